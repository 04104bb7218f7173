package io.ds4j.gpu;

import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.engine.BackendOptions;
import io.ds4j.engine.EngineStatus;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.TensorNames;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.Presets;
import io.ds4j.model.synth.RandomCheckpoint;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.Gpu.ptr;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The two verify attention paths of the GPU backend ("f32-convert", the control, and "f16", which reads the F16 cache
 * in place).
 *
 * <p>Kernel level, on random F16 cache rows: at or under the short-context threshold the F16 path (ds4j_attention on
 * the F16 rows) equals the F32 control (ds4j_f16_to_f32 of the rows, then ds4j_attention_f32) within 1e-6 — by
 * construction bit for bit; the F32 indexer scores equal the F16 ones likewise. Above it, the tensor-core kernel (F32
 * accuracy through hi + lo F16 splits) is compared with an exact reference (double) under a bound derived from the
 * rounding it adds and must equal the F32 control within 1e-5 at lengths up to 1,048,576 tokens; on F32 copies of the
 * rows (ds4j_attention_f16_operands_f32, the control path's verify steps) it gives the same bits as on the F16 rows;
 * the portable kernel (what hipcc builds run) equals the F32 control bit for bit.
 *
 * <p>Backend level: 2,000 verify steps of q+1 = 5 tokens at 59,933 tokens of context on the {@code flash-shaped}
 * preset (4 layers S, C, H, C; 6 routed experts; FP8 + FP4 as released), where the CSA layers attend 128 + 512 and
 * the HCA layer 128 + 468 rows, over the threshold of 512: the control and the F16 path, which differ only in where
 * they read the rows, give the same logits bit for bit. The context is synthetic: {@link HipSequence#fillRandom} gives
 * the sequence random F16 cache rows and compressor rows of 59,933 tokens (a real prefill of that length would take
 * minutes), then every step appends real rows.
 */
@Tag("gpu")
class HipVerifyAttentionTest {
    static final double U32 = 0x1p-24, U_TC = 0x1p-22;
    static Gpu gpu;
    static final List<Long> allocs = new ArrayList<>();

    @TempDir
    static Path tmp;

    @BeforeAll
    static void open() {
        gpu = Gpu.open(0);
        System.out.println("GPU: " + gpu);
    }

    @AfterAll
    static void close() {
        for (long p : allocs) gpu.free(p);
        gpu.close();
    }

    static long alloc(long bytes) {
        long p = gpu.malloc(Math.max(bytes, 256), "test");
        allocs.add(p);
        return p;
    }

    static long dev(float[] v) {
        long p = alloc(4L * v.length);
        if (v.length > 0) gpu.upload(p, v);
        return p;
    }

    static long dev(short[] v) {
        long p = alloc(2L * v.length);
        if (v.length > 0) gpu.upload(p, v);
        return p;
    }

    static long dev(int[] v) {
        long p = alloc(4L * v.length);
        if (v.length > 0) gpu.upload(p, v);
        return p;
    }

    static float f16(short h) {
        return Float.float16ToFloat(h);
    }

    static float round16(float x) {
        return Float.float16ToFloat(Float.floatToFloat16(x));
    }

    /** One attention call: shape, position and data. */
    static final class Case {
        final String name;
        final int kind, H, d, W, m, K, S, cap;
        final long N0;
        final float[] q, kvNew, sinks;
        final short[] ring, entries;
        final int[] sel;
        final int count;

        Case(String name, int kind, int H, int d, int m, int K, long N0, int S, double qStd, long seed) {
            this.name = name;
            this.kind = kind;
            this.H = H;
            this.d = d;
            this.W = 128;
            this.m = m;
            this.K = K;
            this.N0 = N0;
            this.S = S;
            this.cap = W - 1 + 16;
            SplittableRandom r = new SplittableRandom(seed);
            q = new float[S * H * d];
            for (int i = 0; i < q.length; i++) q[i] = (float) (r.nextGaussian() * qStd);
            kvNew = new float[S * d];
            for (int i = 0; i < kvNew.length; i++) kvNew[i] = round16((float) r.nextGaussian());
            sinks = new float[H];
            for (int i = 0; i < H; i++) sinks[i] = (float) r.nextGaussian();
            ring = new short[cap * d];
            for (int i = 0; i < ring.length; i++) ring[i] = Float.floatToFloat16((float) r.nextGaussian());
            count = kind == DS4J_ATTN_SLIDING() ? 0 : (int) ((N0 + S) / m);
            entries = new short[count * d];
            for (int i = 0; i < entries.length; i++) entries[i] = Float.floatToFloat16((float) r.nextGaussian());
            sel = new int[S * Math.max(K, 1)];
            if (kind == DS4J_ATTN_CSA())
                for (int s = 0; s < S; s++) {
                    int avail = (int) ((N0 + s + 1) / m);
                    if (avail <= K) continue;
                    int[] pick = r.ints(0, avail).distinct().limit(K).sorted().toArray();
                    System.arraycopy(pick, 0, sel, s * K, K);
                }
        }

        private Case(Case c, int s) {
            name = c.name + ", query " + s + " alone";
            kind = c.kind;
            H = c.H;
            d = c.d;
            W = c.W;
            m = c.m;
            K = c.K;
            N0 = c.N0 + s;
            S = 1;
            cap = c.cap;
            q = Arrays.copyOfRange(c.q, s * H * d, (s + 1) * H * d);
            kvNew = Arrays.copyOfRange(c.kvNew, s * d, (s + 1) * d);
            sinks = c.sinks;
            ring = c.ring.clone();
            for (int r = 0; r < s; r++)
                for (int i = 0; i < d; i++) ring[(int) ((c.N0 + r) % cap) * d + i] = Float.floatToFloat16(c.kvNew[r * d + i]);
            entries = c.entries;
            count = c.count;
            sel = Arrays.copyOfRange(c.sel, s * Math.max(K, 1), (s + 1) * Math.max(K, 1));
        }

        /** Query s of this step as a decode step of its own: the step's earlier rows stored into the ring, as a decode would. */
        Case alone(int s) {
            return new Case(this, s);
        }

        long nAttn() {
            long[] out = new long[1];
            try (Arena a = Arena.ofConfined()) {
                MemorySegment o = a.allocate(ValueLayout.JAVA_LONG);
                check(ds4j_attention_rows(kind, m, K, N0, S, W, o), "attention_rows");
                out[0] = o.get(ValueLayout.JAVA_LONG, 0);
            }
            return out[0];
        }

        /** The key rows of query s (spec 3.7), as the kernels enumerate them. */
        float[][] keys(int s) {
            long t = N0 + s, p0 = Math.max(0, t - W + 1);
            List<float[]> rows = new ArrayList<>();
            for (long p = p0; p <= t; p++) {
                float[] v = new float[d];
                for (int i = 0; i < d; i++)
                    v[i] = p >= N0 ? kvNew[(int) (p - N0) * d + i] : f16(ring[(int) (p % cap) * d + i]);
                rows.add(v);
            }
            if (kind != DS4J_ATTN_SLIDING()) {
                int avail = (int) ((t + 1) / m);
                boolean picked = kind == DS4J_ATTN_CSA() && avail > K;
                int n = picked ? K : avail;
                for (int j = 0; j < n; j++) {
                    int e = picked ? sel[s * K + j] : j;
                    float[] v = new float[d];
                    for (int i = 0; i < d; i++) v[i] = f16(entries[e * d + i]);
                    rows.add(v);
                }
            }
            return rows.toArray(new float[0][]);
        }
    }

    /** Device copies of a case and runners for the paths. */
    static final class OnDevice {
        final Case c;
        final long q, kvNew, sinks, ring, entries, sel;

        OnDevice(Case c) {
            this.c = c;
            q = dev(c.q);
            kvNew = dev(c.kvNew);
            sinks = dev(c.sinks);
            ring = dev(c.ring);
            entries = c.count == 0 ? 0 : dev(c.entries);
            sel = c.kind == DS4J_ATTN_CSA() ? dev(c.sel) : 0;
        }

        float scale() {
            return (float) (1.0 / Math.sqrt(c.d));
        }

        long out() {
            return alloc(4L * c.S * c.H * c.d);
        }

        /** The F16 path at or under the threshold: F32 arithmetic on the F16 rows in place. */
        float[] f16InPlace() {
            long o = out();
            check(ds4j_attention(gpu.ctx(), ptr(q), ptr(kvNew), ptr(ring), c.cap, ptr(entries), c.kind, c.m, ptr(sel), c.K, ptr(sinks),
                    c.N0, c.S, c.H, c.d, c.W, scale(), ptr(o)), "attention");
            return gpu.downloadFloats(o, c.S * c.H * c.d);
        }

        /** The control: every cache row to F32, then F32 attention. */
        float[] control() {
            long r32 = alloc(4L * c.ring.length), e32 = c.count == 0 ? 0 : alloc(4L * c.entries.length), o = out();
            check(ds4j_f16_to_f32(gpu.ctx(), ptr(ring), ptr(r32), c.ring.length), "f16_to_f32");
            if (c.count > 0) check(ds4j_f16_to_f32(gpu.ctx(), ptr(entries), ptr(e32), c.entries.length), "f16_to_f32");
            check(ds4j_attention_f32(gpu.ctx(), ptr(q), ptr(kvNew), ptr(r32), c.cap, ptr(e32), c.kind, c.m, ptr(sel), c.K, ptr(sinks),
                    c.N0, c.S, c.H, c.d, c.W, scale(), ptr(o)), "attention_f32");
            return gpu.downloadFloats(o, c.S * c.H * c.d);
        }

        /** Bytes of work memory ds4j_attention_f16_operands (and its _f32 form) needs for this case at threshold 0. */
        long workBytes(int impl) {
            try (Arena a = Arena.ofConfined()) {
                MemorySegment b = a.allocate(ValueLayout.JAVA_LONG);
                check(ds4j_attention_f16_operands_work(gpu.ctx(), c.kind, c.m, c.K, c.N0, c.S, c.H, c.d, c.W, 0L, impl, b), "work");
                return b.get(ValueLayout.JAVA_LONG, 0);
            }
        }

        /** The F16 path above the threshold: F16 operands (impl DS4J_F16OPS_AUTO or _PORTABLE). */
        float[] f16Operands(int impl) {
            long bytes = workBytes(impl);
            long work = bytes == 0 ? 0 : alloc(bytes), o = out();
            check(ds4j_attention_f16_operands(gpu.ctx(), ptr(q), ptr(kvNew), ptr(ring), c.cap, ptr(entries), c.kind, c.m, ptr(sel), c.K,
                    ptr(sinks), c.N0, c.S, c.H, c.d, c.W, scale(), 0L, impl, ptr(work), bytes, ptr(o)), "attention_f16_operands");
            return gpu.downloadFloats(o, c.S * c.H * c.d);
        }

        /** The control's verify attention: every cache row to F32, then ds4j_attention_f16_operands_f32 on the copies. */
        float[] f16OperandsOnCopies(int impl) {
            long bytes = workBytes(impl);
            long r32 = alloc(4L * c.ring.length), e32 = c.count == 0 ? 0 : alloc(4L * c.entries.length), o = out();
            long work = bytes == 0 ? 0 : alloc(bytes);
            check(ds4j_f16_to_f32(gpu.ctx(), ptr(ring), ptr(r32), c.ring.length), "f16_to_f32");
            if (c.count > 0) check(ds4j_f16_to_f32(gpu.ctx(), ptr(entries), ptr(e32), c.entries.length), "f16_to_f32");
            check(ds4j_attention_f16_operands_f32(gpu.ctx(), ptr(q), ptr(kvNew), ptr(r32), c.cap, ptr(e32), c.kind, c.m, ptr(sel), c.K,
                    ptr(sinks), c.N0, c.S, c.H, c.d, c.W, scale(), 0L, impl, ptr(work), bytes, ptr(o)), "attention_f16_operands_f32");
            return gpu.downloadFloats(o, c.S * c.H * c.d);
        }
    }

    /**
     * The exact output (double, q unrounded) and per-element error bounds of the two paths against it.
     *
     * <p>Control (F32 throughout): a dot product of d terms errs by at most γ_d Σ|q_i k_i| (γ_d = d u / (1 − d u),
     * u = 2⁻²⁴), so each logit by E_c ≤ scale·(γ_d + u)·max_j Σ|q k_j| and each softmax weight by a factor within
     * e^(±2 E_c); the weighted sum of n rows adds (n + 8)·2u relative to A_i = Σ_j w_j |v_ji|.
     *
     * <p>F16 operands (tensor cores): each query row is scaled by 2^t (its largest |value| into [2^14, 2^15)) and split
     * into F16 hi + lo; q̃ = (hi + lo)·2^-t shifts logit j by δ_j = scale·(q̃ − q)·k_j (computed exactly here with the
     * same split), so every weight changes by a factor within e^(±2Δ), Δ = max|δ_j|; each probability (≤ 1) is scaled
     * by 2^14 and split likewise, which multiplies it by (1 ± 2⁻²¹) plus at most 2⁻³⁸ absolute; F32 accumulation on
     * tensor cores is allowed u' = 2⁻²² per operation (their adder need not round to nearest), over the 2d-term dot
     * products (E_t) and the 2n-term weighted sum plus the split combine.
     * So |O − exact| ≤ A_i·((1 + 2⁻²¹)·e^(2(Δ + E_t)) − 1 + (2n + 2d + 16)·2u') + n·2⁻³⁸·max_j|v_ji|.
     */
    static final class Reference {
        /** q̃ of the tensor-core kernel: the row scaled by 2^t (largest |value| in [2^14, 2^15)), F16 hi + lo, unscaled. */
        static double[] splitRow(float[] q, int off, int d) {
            float mx = 0;
            for (int i = 0; i < d; i++) mx = Math.max(mx, Math.abs(q[off + i]));
            int t = mx > 0 ? Math.min(126, Math.max(-126, 14 - Math.getExponent(mx))) : 0;
            double[] out = new double[d];
            for (int i = 0; i < d; i++) {
                float x = Math.scalb(q[off + i], t), hi = round16(x), lo = round16(x - hi);
                out[i] = Math.scalb((double) hi + lo, -t);
            }
            return out;
        }

        final double[] exact, boundControl, boundF16;

        Reference(Case c) {
            int n0 = c.S * c.H * c.d;
            exact = new double[n0];
            boundControl = new double[n0];
            boundF16 = new double[n0];
            double scale = (float) (1.0 / Math.sqrt(c.d));
            double gd = c.d * U32 / (1 - c.d * U32), gdt = 2 * c.d * U_TC / (1 - 2 * c.d * U_TC);
            for (int s = 0; s < c.S; s++) {
                float[][] k = c.keys(s);
                int n = k.length;
                for (int h = 0; h < c.H; h++) {
                    int qo = (s * c.H + h) * c.d;
                    double[] qt = splitRow(c.q, qo, c.d);
                    double[] z = new double[n];
                    double maxAbs = 0, delta = 0, zmax = c.sinks[h];
                    for (int j = 0; j < n; j++) {
                        double dot = 0, abs = 0, dq = 0;
                        for (int i = 0; i < c.d; i++) {
                            double qi = c.q[qo + i], kv = k[j][i];
                            dot += qi * kv;
                            abs += Math.abs(qi * kv);
                            dq += (qt[i] - qi) * kv;
                        }
                        z[j] = scale * dot;
                        maxAbs = Math.max(maxAbs, scale * abs);
                        delta = Math.max(delta, Math.abs(scale * dq));
                        zmax = Math.max(zmax, z[j]);
                    }
                    double L = Math.exp(c.sinks[h] - zmax);
                    double[] w = new double[n];
                    for (int j = 0; j < n; j++) L += w[j] = Math.exp(z[j] - zmax);
                    for (int j = 0; j < n; j++) w[j] /= L;
                    double ec = (gd + U32) * maxAbs, et = (gdt + U_TC) * maxAbs;
                    double fc = Math.expm1(2 * ec) + (n + 8) * 2 * U32;
                    double ft = (1 + 0x1p-21) * Math.exp(2 * (delta + et)) - 1 + (2 * n + 2 * c.d + 16) * 2 * U_TC;
                    for (int i = 0; i < c.d; i++) {
                        double o = 0, a = 0, vmax = 0;
                        for (int j = 0; j < n; j++) {
                            o += w[j] * k[j][i];
                            a += w[j] * Math.abs(k[j][i]);
                            vmax = Math.max(vmax, Math.abs(k[j][i]));
                        }
                        exact[qo + i] = o;
                        boundControl[qo + i] = a * fc + 1e-30;
                        boundF16[qo + i] = a * ft + n * 0x1p-38 * vmax + 1e-30;
                    }
                }
            }
        }
    }

    static double maxDiff(float[] a, float[] b) {
        double m = 0;
        for (int i = 0; i < a.length; i++) {
            double e = Math.abs((double) a[i] - b[i]);
            m = Double.isNaN(e) ? Double.POSITIVE_INFINITY : Math.max(m, e);
        }
        return m;
    }

    /** Asserts |got − exact| ≤ bound everywhere; returns the largest ratio. */
    static double checkBound(String what, float[] got, double[] exact, double[] bound) {
        double worst = 0;
        int bad = 0;
        String first = null;
        for (int i = 0; i < got.length; i++) {
            double e = Math.abs(got[i] - exact[i]);
            if (!(e <= bound[i])) {
                if (first == null) first = "element " + i + ": got " + got[i] + ", exact " + exact[i] + ", bound " + bound[i];
                bad++;
            }
            worst = Math.max(worst, Double.isNaN(e) ? Double.POSITIVE_INFINITY : e / bound[i]);
        }
        assertEquals(0, bad, what + ": " + bad + " elements beyond the bound, first " + first);
        return worst;
    }

    static final int CSA = 1, HCA = 2;

    static Case flash(String name, int kind, long N0, double qStd, long seed) {
        int m = kind == CSA ? 4 : kind == HCA ? 128 : 0;
        return new Case(name, kind, 64, 512, m, 512, N0, 5, qStd, seed);
    }

    @Test
    void attendedRowsAgreeWithTheLibrary() {
        ModelConfig c = Presets.get("flash-shaped");
        for (int l = 0; l < c.numLayers; l++)
            for (long N0 : new long[]{0, 1, 100, 127, 128, 2043, 2047, 2048, 59_928, 122_874})
                for (int S : new int[]{1, 5, 9}) {
                    int kind = switch (c.layerTypes[l]) {
                        case SLIDING -> DS4J_ATTN_SLIDING();
                        case CSA -> DS4J_ATTN_CSA();
                        case HCA -> DS4J_ATTN_HCA();
                    };
                    try (Arena a = Arena.ofConfined()) {
                        MemorySegment o = a.allocate(ValueLayout.JAVA_LONG);
                        check(ds4j_attention_rows(kind, c.layerTypes[l] == AttentionKind.SLIDING ? 0 : c.ratio(l), c.indexTopk, N0, S,
                                c.slidingWindow, o), "attention_rows");
                        assertEquals(o.get(ValueLayout.JAVA_LONG, 0), HipBackend.attendedRows(c, l, N0, S), "layer " + l + " N0 " + N0 + " S " + S);
                    }
                }
        // the figures of the full-depth model at 59,933 tokens (a step of 5 whose last position is 59,932): layers 0 and 1
        // sliding-window, 2 CSA, 3 HCA
        assertEquals(128, HipBackend.attendedRows(c, 1, 59_928, 5));
        assertEquals(128 + 512, HipBackend.attendedRows(c, 2, 59_928, 5));
        assertEquals(128 + 468, HipBackend.attendedRows(c, 3, 59_928, 5));
    }

    @Test
    void atOrUnderTheThresholdTheF16PathEqualsTheControl() {
        int T = BackendOptions.DEFAULT_SHORT_ROWS;
        List<Case> cases = List.of(
                flash("sliding, first step", 0, 0, 1, 1),
                flash("sliding, window filling", 0, 60, 1, 2),
                flash("sliding, ring wrapped", 0, 4091, 1, 3),
                flash("csa, dense entries", CSA, 1400, 1, 4),
                flash("hca", HCA, 40_000, 1, 5),
                flash("hca, sharp softmax", HCA, 40_000, 6, 6));
        for (Case c : cases) {
            assertTrue(c.nAttn() <= T, c.name + ": n_attn " + c.nAttn());
            OnDevice dc = new OnDevice(c);
            float[] f16 = dc.f16InPlace(), ctl = dc.control();
            double diff = maxDiff(f16, ctl);
            System.out.printf("verify attention %-28s n_attn %4d <= %d: max |f16 - control| = %.3g%n", c.name, c.nAttn(), T, diff);
            assertTrue(diff <= 1e-6, c.name + ": " + diff);
            Reference ref = new Reference(c);
            checkBound(c.name + " control vs exact", ctl, ref.exact, ref.boundControl);
        }
    }

    /**
     * A query decoded alone (S = 1, the step's earlier rows already in the ring) gives its row of a verify step bit for
     * bit, on both F32 paths, at lengths where the attention kernel cuts a query's keys into several key ranges (HCA at
     * 1M tokens: ~8,300 rows, ranges of several tiles): speculative greedy decoding depends on it. The outputs also stay
     * within the control's error bound against the exact result.
     */
    @Test
    void aQueryDecodedAloneGivesItsRowOfAVerifyStepBitForBit() {
        List<Case> cases = List.of(
                flash("sliding, ring wrapped", 0, 4091, 1, 31),
                flash("csa 59,933", CSA, 59_928, 1, 32),
                flash("hca 59,933 sharp softmax", HCA, 59_928, 8, 33),
                flash("hca 1,048,576", HCA, 1_048_571, 1, 34),
                new Case("hca d128 H80 (partial head group)", HCA, 80, 128, 2, 64, 3000, 5, 1, 35));
        for (Case c : cases) {
            OnDevice dc = new OnDevice(c);
            float[] f16 = dc.f16InPlace(), ctl = dc.control();
            assertArrayEquals(ctl, f16, c.name + ": F16 rows in place vs the F32 copies");
            Reference ref = new Reference(c);
            double rc = checkBound(c.name + " control", ctl, ref.exact, ref.boundControl);
            int rowLen = c.H * c.d;
            for (int s = 0; s < c.S; s++) {
                OnDevice one = new OnDevice(c.alone(s));
                float[] a = one.f16InPlace(), b = one.control();
                float[] row = Arrays.copyOfRange(f16, s * rowLen, (s + 1) * rowLen);
                assertArrayEquals(row, a, c.name + ": query " + s + " decoded alone (F16 in place) vs its verify row");
                assertArrayEquals(row, b, c.name + ": query " + s + " decoded alone (F32 copies) vs its verify row");
            }
            System.out.printf("verify attention %-34s n_attn %5d: every query alone = its verify row; control %.2f of its bound%n",
                    c.name, c.nAttn(), rc);
        }
    }

    @Test
    void indexerScoresOnF32CopiesEqualTheF16Ones() {
        SplittableRandom r = new SplittableRandom(21);
        int HI = 64, dI = 128, K = 512, m = 4, S = 5;
        long N0 = 8191;
        int total = (int) ((N0 + S) / m);
        float[] qi = new float[S * HI * dI], wt = new float[S * HI];
        for (int i = 0; i < qi.length; i++) qi[i] = (float) r.nextGaussian();
        for (int i = 0; i < wt.length; i++) wt[i] = (float) Math.abs(r.nextGaussian());
        short[] keys = new short[total * dI];
        for (int i = 0; i < keys.length; i++) keys[i] = Float.floatToFloat16((float) r.nextGaussian());
        long dq = dev(qi), dw = dev(wt), dk = dev(keys), k32 = alloc(4L * keys.length), a = alloc(4L * S * total), b = alloc(4L * S * total);
        check(ds4j_f16_to_f32(gpu.ctx(), ptr(dk), ptr(k32), keys.length), "f16_to_f32");
        float[] conv = gpu.downloadFloats(k32, keys.length);
        for (int i = 0; i < keys.length; i++) assertEquals(f16(keys[i]), conv[i], 0f, "conversion " + i);
        float ws = (float) (1 / Math.sqrt(HI)), ss = (float) (1 / Math.sqrt(dI));
        check(ds4j_indexer_scores(gpu.ctx(), ptr(dq), ptr(dw), ptr(dk), N0, S, m, HI, dI, K, ws, ss, ptr(a), total), "scores");
        check(ds4j_indexer_scores_f32(gpu.ctx(), ptr(dq), ptr(dw), ptr(k32), N0, S, m, HI, dI, K, ws, ss, ptr(b), total), "scores f32");
        assertArrayEquals(gpu.downloadFloats(a, S * total), gpu.downloadFloats(b, S * total), "indexer scores, F16 vs F32 keys");
    }

    @Test
    void overTheThresholdTheF16PathEqualsTheControlWithin1e5() {
        List<Case> cases = List.of(
                flash("sliding (threshold < 128)", 0, 4091, 1, 11),
                flash("csa 4,096", CSA, 4091, 1, 12),
                flash("csa dense -> picked in-step", CSA, 2047, 1, 13),
                flash("hca 59,933", HCA, 59_928, 1, 14),
                flash("hca 59,933 sharp softmax", HCA, 59_928, 8, 15),
                flash("hca 122,879", HCA, 122_874, 1, 16),
                flash("csa 122,879", CSA, 122_874, 1, 17),
                flash("hca 262,144", HCA, 262_139, 1, 21),
                flash("hca 1,048,576", HCA, 1_048_571, 1, 22),
                flash("csa 1,048,576", CSA, 1_048_571, 1, 23),
                new Case("hca d128 H16 (padded rows)", HCA, 16, 128, 128, 64, 59_928, 5, 1, 18),
                new Case("csa d128 H80 (two head blocks)", CSA, 80, 128, 4, 64, 3000, 3, 1, 19),
                new Case("hca d32 H4 (portable only)", HCA, 4, 32, 16, 4, 5000, 5, 1, 20));
        for (Case c : cases) {
            OnDevice dc = new OnDevice(c);
            float[] ctl = dc.control(), tc = dc.f16Operands(DS4J_F16OPS_AUTO()), port = dc.f16Operands(DS4J_F16OPS_PORTABLE());
            Reference ref = new Reference(c);
            double rc = checkBound(c.name + " control", ctl, ref.exact, ref.boundControl);
            double rt = checkBound(c.name + " f16 operands (auto)", tc, ref.exact, ref.boundF16);
            double maxOut = 0;
            for (double v : ref.exact) maxOut = Math.max(maxOut, Math.abs(v));
            double diff = maxDiff(tc, ctl);
            System.out.printf("verify attention %-32s n_attn %7d: max |f16 path - control| = %.3g (max |out| %.3g); vs exact: control %.2f, f16 ops %.2f of their bounds%n",
                    c.name, c.nAttn(), diff, maxOut, rc, rt);
            // the portable kernel is the control's arithmetic on the F16 rows in place: bit for bit
            assertArrayEquals(ctl, port, c.name + ": portable F16 path vs control");
            // the same kernels on F32 copies of the rows (the control path's verify steps): bit for bit
            assertArrayEquals(tc, dc.f16OperandsOnCopies(DS4J_F16OPS_AUTO()), c.name + ": tensor cores on F32 copies vs F16 rows");
            // 1e-5 of the output's scale: a sharp softmax (large logits) amplifies the F32 rounding of the logits, the
            // control's own included (both stay within their bounds against the exact result above)
            assertTrue(diff <= 1e-5 * Math.max(1, maxOut), c.name + ": max |f16 path - control| " + diff + " > 1e-5 x max(1, max |out| " + maxOut + ")");
            boolean tensorCores = c.d == 64 || c.d == 128 || c.d == 256 || c.d == 512;
            assertTrue(!tensorCores || diff > 0 || c.nAttn() == 0, c.name + ": the tensor-core path gave the control's output bit for bit: was it used?");
        }
    }

    /** The flash-shaped preset (4 layers S, C, H, C; 6 routed experts, k 6), FP8 + FP4 as released. */
    static Path flashModel() throws Exception {
        Path dir = tmp.resolve("flash-shaped-fp8");
        if (!java.nio.file.Files.isDirectory(dir)) {
            long t0 = System.nanoTime();
            new RandomCheckpoint(Presets.get("flash-shaped", 4, 6), 5, TensorNames.Scheme.ORIGINAL, RandomCheckpoint.Storage.FP8).write(dir);
            System.out.printf("wrote flash-shaped (4 layers, 6 experts, fp8) in %.1f s%n", (System.nanoTime() - t0) / 1e9);
        }
        return dir;
    }

    static int argmax(float[] lg, int row, int V) {
        int best = 0;
        for (int v = 1; v < V; v++) if (lg[row * V + v] > lg[row * V + best]) best = v;
        return best;
    }

    @Test
    void twoThousandVerifyStepsAt59933TokensGiveTheSameLogitsOnBothPaths() throws Exception {
        final int ctx = 59_933, steps = 2000, S = 5;
        try (HipBackend be = new HipBackend(WeightLoader.load(flashModel()), BackendOptions.DEFAULTS.withF16KvVerify(true));
             HipSequence seq = be.newSequence(16)) {
            ModelConfig c = be.config();
            int V = c.vocabSize;
            EngineStatus st = be.status();
            assertEquals("f16", st.verifyAttention());
            assertTrue(st.f16KvRequested() && st.f16KvActive(), st.toString());
            seq.fillRandom(ctx, 9);
            SplittableRandom r = new SplittableRandom(10);
            long t0 = System.nanoTime();
            Agreement ag = compareVerifyPaths(be, seq, r.ints(S, 0, V).toArray(), steps, r, () -> {
                Map<AttentionKind, String> modes = be.verifyAttentionModes();
                System.out.println("verify attention modes at context " + ctx + ": " + modes);
                assertTrue(modes.get(AttentionKind.SLIDING).startsWith("f16 full-F32"), modes.toString());
                assertTrue(modes.get(AttentionKind.CSA).contains("(n_attn 640 > 512)"), modes.toString());
                assertTrue(modes.get(AttentionKind.HCA).contains("(n_attn 596 > 512)"), modes.toString());
            });
            double rate = ag.rate(), maxLogitDiff = ag.maxLogitDiff();
            System.out.printf("verify attention at %d..%d tokens: %d of %d rows (%.4f %%) with the same argmax on both paths; max |logit diff| %.3g; %.1f s%n",
                    ctx, seq.length(), ag.agree(), ag.rows(), 100 * rate, maxLogitDiff, (System.nanoTime() - t0) / 1e9);
            // the paths differ only in where the rows are read (in place or converted, exactly): the same logits
            assertEquals(0.0, maxLogitDiff, "max |logit difference| between the paths above the threshold");
            assertEquals(ag.rows(), ag.agree(), "rows with the same argmax on both paths");
        }
    }

    /** What {@link #compareVerifyPaths} counted: rows and steps whose argmax the two paths share, the largest logit gap. */
    record Agreement(long rows, long agree, long steps, long stepsSame, double maxLogitDiff) {
        double rate() {
            return (double) agree / rows;
        }
    }

    /**
     * steps verify steps of toks.length rows on seq, each verified by the control ({@code f32-convert}) and then by the
     * {@code f16} path on the same rows (rolled back in between), counting rows with the same argmax. Between steps a
     * pseudo-random prefix of the f16 path's rows is kept and its argmax tokens are fed next (random tokens after
     * them). afterFirst runs once, after the first step (checks of the modes it entered). Leaves the f16 path set.
     */
    static Agreement compareVerifyPaths(HipBackend be, Sequence seq, int[] toks, int steps, SplittableRandom r,
                                        Runnable afterFirst) {
        int S = toks.length, V = be.config().vocabSize;
        int[] all = new int[S];
        for (int i = 0; i < S; i++) all[i] = i;
        long rows = 0, agree = 0, stepsSame = 0;
        double maxLogitDiff = 0;
        for (int step = 0; step < steps; step++) {
            be.setVerifyAttention(io.ds4j.engine.VerifyAttention.F32_CONVERT);
            float[] a = be.forward(seq, toks, 0, S, all, StepKind.VERIFY);
            seq.rollback(S);
            be.setVerifyAttention(io.ds4j.engine.VerifyAttention.F16);
            float[] b = be.forward(seq, toks, 0, S, all, StepKind.VERIFY);
            if (step == 0 && afterFirst != null) afterFirst.run();
            int[] arg = new int[S];
            boolean same = true;
            for (int row = 0; row < S; row++) {
                int x = argmax(a, row, V), y = argmax(b, row, V);
                arg[row] = y;
                rows++;
                if (x == y) agree++;
                else same = false;
            }
            if (same) stepsSame++;
            maxLogitDiff = Math.max(maxLogitDiff, maxDiff(a, b));
            // commit the F16 path's rows up to a pseudo-accepted prefix, feed its argmax tokens
            int keep = 1 + r.nextInt(S);
            seq.rollback(S - keep);
            int[] next = new int[S];
            for (int i = 0; i < S; i++) next[i] = keep - 1 + i < S ? arg[keep - 1 + i] : r.nextInt(V);
            toks = next;
        }
        return new Agreement(rows, agree, steps, stepsSame, maxLogitDiff);
    }

    /**
     * What the 4-layer tests missed: at full depth (V4-Flash's 43 layers), greedy speculative decoding with a copy of
     * the target as the draft must keep the draft's tokens on the {@code f16} path too. Acceptance measures more than
     * one-step agreement: the rows a verify step commits stay in the cache, so any difference between verify and decode
     * numerics is fed back through every later layer and step; with F16-rounded operands the copy-of-target acceptance
     * fell to 0.675 at 4,096 tokens while single steps still agreed on 98.8 % of rows.
     */
    @Test
    void fullDepthCopyOfTargetDraftIsAcceptedOnTheF16Path() throws Exception {
        Path dir = io.ds4j.model.synth.ModelStore.ensureVariant("flash-shaped", 43, 16, RandomCheckpoint.Storage.FP8, 1,
                System.out::println);
        try (HipBackend be = new HipBackend(WeightLoader.load(dir), BackendOptions.DEFAULTS.withF16KvVerify(true))) {
            var o = new io.ds4j.bench.VerifyPathBench.Options(List.of(4096), 4, 600, 0, 512, 7);
            List<io.ds4j.bench.VerifyPathBench.Row> rows = io.ds4j.bench.VerifyPathBench.run(be, o, System.out);
            for (var r : rows) {
                System.out.printf("full depth, %s at %d tokens: acceptance %.4f (%d of %d)%n", r.path(), r.length(), r.acceptance(),
                        r.accepted(), r.offered());
                assertTrue(r.acceptance() >= 0.999, r.path() + ": copy-of-target acceptance " + r.acceptance() + " < 0.999");
            }
            Map<AttentionKind, String> modes = be.verifyAttentionModes();
            assertTrue(modes.get(AttentionKind.CSA).startsWith("f16 tensor-core"), "CSA layers above the threshold: " + modes);
        }
    }

    /**
     * On both verify paths a verify step must compute exactly what the decode steps it stands for compute, above the
     * threshold too: the kernel splits each query's keys by that query's own key count and picks F32 or tensor cores
     * per query, so S does not matter, and the control's F32 copies hold the F16 values exactly. Contexts: one where the
     * step straddles the CSA layers' threshold (queries at n_attn 511 and 512 in F32, the rest on tensor cores) and
     * 59,933 (every compressed layer on tensor cores).
     */
    @Test
    void aboveTheThresholdAVerifyStepEqualsTheDecodeStepsItStandsFor() throws Exception {
        try (HipBackend be = new HipBackend(WeightLoader.load(flashModel()), BackendOptions.DEFAULTS.withF16KvVerify(true))) {
            int V = be.config().vocabSize, S = 5;
            for (var path : io.ds4j.engine.VerifyAttention.values()) {
                for (int ctx : new int[]{1_537, 59_933}) {
                    be.setVerifyAttention(path);
                    try (HipSequence seq = be.newSequence(16)) {
                        seq.fillRandom(ctx, 31);
                        int[] toks = new SplittableRandom(ctx).ints(S, 0, V).toArray(), all = {0, 1, 2, 3, 4};
                        float[] verified = be.forward(seq, toks, 0, S, all, StepKind.VERIFY);
                        seq.rollback(S);
                        for (int i = 0; i < S; i++) {
                            float[] decoded = be.forward(seq, toks, i, 1, new int[]{0}, StepKind.DECODE);
                            assertArrayEquals(decoded, Arrays.copyOfRange(verified, i * V, (i + 1) * V),
                                    path.key() + " path, context " + ctx + ": decode step " + i + " vs verify row " + i);
                        }
                        System.out.println(path.key() + " path at context " + ctx + ": verify rows equal decode steps bit for bit; modes "
                                + be.verifyAttentionModes());
                    }
                    assertTrue(be.verifyAttentionModes().get(AttentionKind.CSA).startsWith(path.key() + " tensor-core"),
                            be.verifyAttentionModes().toString());
                }
            }
        }
    }

    /**
     * The control's conversion timed for ds4j bench (alone and replayed from a captured graph) gives finite times, leaves
     * the sequence's cache as it was (a verify step after it equals one before it, bit for bit) and no capture open;
     * with graphs off there is no graph figure.
     */
    @Test
    void theConversionIsTimedAloneAndInAGraphWithoutTouchingTheCache() {
        ModelConfig c = TestModelsAccess.microConfig();
        try (HipBackend be = new HipBackend(TestModelsAccess.random(c, 42), BackendOptions.DEFAULTS.withF16KvVerify(true))) {
            int V = c.vocabSize, n = 300, S = 5;
            int[] toks = new SplittableRandom(3).ints(n + S, 0, V).toArray(), all = {0, 1, 2, 3, 4};
            try (HipSequence seq = be.newSequence(16)) {
                be.forward(seq, toks, 0, n, new int[0], StepKind.PREFILL);
                float[] before = be.forward(seq, toks, n, S, all, StepKind.VERIFY);
                seq.rollback(S);
                be.setGraphs(true);
                var t = be.verifyConversion(seq, S, 3);
                assertTrue(t.aloneMs() > 0 && Double.isFinite(t.aloneMs()) && t.graphMs() > 0 && Double.isFinite(t.graphMs()), t.toString());
                assertArrayEquals(before, be.forward(seq, toks, n, S, all, StepKind.VERIFY), "a verify step after the timing");
                seq.rollback(S);
                be.setGraphs(false);
                var off = be.verifyConversion(seq, S, 3);
                assertTrue(off.aloneMs() > 0 && Double.isNaN(off.graphMs()), off.toString());
                assertArrayEquals(before, be.forward(seq, toks, n, S, all, StepKind.VERIFY), "a verify step kernel by kernel after it");
                System.out.println("conversion at " + n + " tokens: " + t + "; graphs off: " + off);
            }
        }
    }

    @Test
    void underTheThresholdWholeStepsAreBitIdenticalAndStatusFollowsTheSwitch() {
        ModelConfig c = TestModelsAccess.microConfig();
        try (HipBackend be = new HipBackend(TestModelsAccess.random(c, 42))) {
            EngineStatus st = be.status();
            assertEquals("hip", st.backend());
            assertEquals("monolithic", st.expertPlacement());
            assertEquals("f32-convert", st.verifyAttention());
            assertFalse(st.f16KvRequested() || st.f16KvActive());
            assertEquals(BackendOptions.DEFAULT_SHORT_ROWS, st.f32ShortContextRows());
            assertThrows(IllegalArgumentException.class, () -> be.setF32ShortContextRows(0));
            assertThrows(IllegalArgumentException.class, () -> be.setF32ShortContextRows(4097));
            SplittableRandom r = new SplittableRandom(3);
            int V = c.vocabSize;
            int[] prompt = r.ints(40, 0, V).toArray(), all = {0, 1, 2, 3, 4};
            try (Sequence seq = be.newSequence(16)) {
                be.forward(seq, prompt, 0, prompt.length, new int[0], StepKind.PREFILL);
                for (int step = 0; step < 30; step++) {
                    int[] toks = r.ints(5, 0, V).toArray();
                    be.setVerifyAttention(io.ds4j.engine.VerifyAttention.F32_CONVERT);
                    float[] a = be.forward(seq, toks, 0, 5, all, StepKind.VERIFY);
                    seq.rollback(5);
                    be.setVerifyAttention(io.ds4j.engine.VerifyAttention.F16);
                    float[] b = be.forward(seq, toks, 0, 5, all, StepKind.VERIFY);
                    assertArrayEquals(a, b, "step " + step + " at context " + (seq.length() - 5));
                    seq.rollback(r.nextInt(5));
                }
                Map<AttentionKind, String> modes = be.verifyAttentionModes();
                System.out.println("micro model verify attention modes: " + modes);
                for (String m : modes.values()) assertTrue(m.startsWith("f16 full-F32"), m);
                assertEquals("f16", be.status().verifyAttention());
                assertTrue(be.status().f16KvActive());
            }
        }
    }
}
