package io.ds4j.gpu;

import io.ds4j.model.Rope;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.Gpu.ptr;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The fused per-layer kernels against the unfused sequence they replace, bit for bit, on random inputs: mHC mapping
 * with the site norm (ds4j_hc_pre_norm), the stream update with the MoE combination and the next site's RMSNorm_1
 * (ds4j_hc_post_norm), the query and kv norms with RoPE (ds4j_qkv_norm_rope, positions from an offset or from
 * memory), and a compressor's pooling with its ring stores (ds4j_compress_step and its several-sequence form, in one
 * launch or, where the stores could overwrite a slot the pooling reads, in three). Shapes cover one row (decode),
 * a few rows (verify), odd widths and widths below the block size. The split forms of the row-wise kernels (mHC,
 * RMSNorm, routing; ds4j_set_hc_split) give the bits of the one-block forms, and a row alone those of the same row in a
 * step of several.
 */
@Tag("gpu")
class GpuFusedOpsTest {
    static Gpu gpu;
    static final List<Long> allocs = new ArrayList<>();

    @BeforeAll
    static void open() {
        gpu = Gpu.open(0);
    }

    @AfterAll
    static void close() {
        for (long p : allocs) gpu.free(p);
        gpu.close();
    }

    static long dev(float[] v) {
        long p = gpu.malloc(4L * Math.max(1, v.length), "test");
        allocs.add(p);
        gpu.upload(p, v);
        return p;
    }

    static long dev(int[] v) {
        long p = gpu.malloc(4L * Math.max(1, v.length), "test");
        allocs.add(p);
        gpu.upload(p, v);
        return p;
    }

    static long dev(long[] v) {
        long p = gpu.malloc(8L * Math.max(1, v.length), "test");
        allocs.add(p);
        gpu.upload(p, v);
        return p;
    }

    static long dev(short[] v) {
        long p = gpu.malloc(2L * Math.max(1, v.length), "test");
        allocs.add(p);
        gpu.upload(p, v);
        return p;
    }

    static short[] f16(SplittableRandom r, int n) {
        short[] v = new short[n];
        for (int i = 0; i < n; i++) v[i] = Float.floatToFloat16((float) r.nextGaussian());
        return v;
    }

    static float[] gauss(SplittableRandom r, int n, double std) {
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) (r.nextGaussian() * std);
        return a;
    }

    /** The two device arrays hold the same bits (n floats). */
    static void sameBits(long expected, long actual, int n, String what) {
        float[] e = gpu.downloadFloats(expected, n), a = gpu.downloadFloats(actual, n);
        for (int i = 0; i < n; i++)
            if (Float.floatToRawIntBits(e[i]) != Float.floatToRawIntBits(a[i]))
                fail(what + ": element " + i + " of " + n + ": fused " + a[i] + ", separate " + e[i]);
    }

    @Test
    void hcPreNormEqualsHcPreThenRmsnorm() {
        SplittableRandom r = new SplittableRandom(31);
        final int iters = 20;
        final float hcEps = 1e-6f, eps = 1e-6f;
        for (int[] shape : new int[][]{{1, 4, 4096}, {5, 4, 4096}, {3, 4, 1000}, {2, 3, 200}, {7, 8, 257}}) {
            int S = shape[0], n = shape[1], D = shape[2], mix = (2 + n) * n;
            long mu = dev(gauss(r, S * mix, 1)), base = dev(gauss(r, mix, 0.5)), scale = dev(gauss(r, 3, 1));
            long X = dev(gauss(r, S * n * D, 1));
            for (boolean weighted : new boolean[]{true, false}) {
                long w = weighted ? dev(gauss(r, D, 1)) : 0;
                long p1 = dev(new float[S * n]), c1 = dev(new float[S * n * n]), col1 = dev(new float[S * D]);
                long p2 = dev(new float[S * n]), c2 = dev(new float[S * n * n]), col2 = dev(new float[S * D]);
                check(ds4j_hc_pre(gpu.ctx(), ptr(mu), ptr(base), ptr(scale), ptr(X), S, n, D, iters, hcEps, ptr(p1), ptr(c1), ptr(col1)),
                        "hc_pre");
                check(ds4j_rmsnorm(gpu.ctx(), ptr(col1), ptr(col1), ptr(w), S, D, eps), "rmsnorm");
                check(ds4j_hc_pre_norm(gpu.ctx(), ptr(mu), ptr(base), ptr(scale), ptr(X), S, n, D, iters, hcEps, ptr(p2), ptr(c2),
                        ptr(col2), ptr(w), eps), "hc_pre_norm");
                String at = "S " + S + ", n " + n + ", D " + D + (weighted ? ", weighted" : "");
                sameBits(p1, p2, S * n, "post, " + at);
                sameBits(c1, c2, S * n * n, "comb, " + at);
                sameBits(col1, col2, S * D, "col, " + at);
            }
        }
    }

    @Test
    void hcPostNormEqualsCombineHcPostThenRmsnorm() {
        SplittableRandom r = new SplittableRandom(32);
        final float eps = 1e-6f;
        final int E = 16;
        for (int[] shape : new int[][]{{1, 4, 4096, 6}, {5, 4, 4096, 6}, {3, 4, 1000, 2}, {2, 3, 200, 1}, {4, 8, 257, 16}}) {
            int S = shape[0], n = shape[1], D = shape[2], k = shape[3], nD = n * D;
            float[] x = gauss(r, S * nD, 1);
            long f = dev(gauss(r, S * D, 1)), post = dev(gauss(r, S * n, 1)), comb = dev(gauss(r, S * n * n, 0.5));
            // k distinct experts per row in random order (the combination sums them in ascending id)
            int[] ids = new int[S * k];
            for (int s = 0; s < S; s++) {
                int[] perm = new int[E];
                for (int e = 0; e < E; e++) perm[e] = e;
                for (int e = E - 1; e > 0; e--) {
                    int j = r.nextInt(e + 1), t = perm[e];
                    perm[e] = perm[j];
                    perm[j] = t;
                }
                System.arraycopy(perm, 0, ids, s * k, k);
            }
            long dids = dev(ids), wts = dev(gauss(r, S * k, 1)), yr = dev(gauss(r, S * k * D, 1));
            String at = "S " + S + ", n " + n + ", D " + D + ", k " + k;
            // the attention site: the block output as given
            for (boolean norm : new boolean[]{true, false}) {
                long X1 = dev(x), X2 = dev(x), v1 = dev(new float[S * nD]), v2 = dev(new float[S * nD]);
                check(ds4j_hc_post(gpu.ctx(), ptr(X1), ptr(f), ptr(post), ptr(comb), S, n, D), "hc_post");
                if (norm) check(ds4j_rmsnorm(gpu.ctx(), ptr(X1), ptr(v1), MemorySegment.NULL, S, nD, eps), "rmsnorm");
                check(ds4j_hc_post_norm(gpu.ctx(), ptr(X2), ptr(f), MemorySegment.NULL, MemorySegment.NULL, MemorySegment.NULL, k,
                        ptr(post), ptr(comb), S, n, D, eps, norm ? ptr(v2) : MemorySegment.NULL), "hc_post_norm");
                sameBits(X1, X2, S * nD, "streams, " + at + (norm ? ", norm" : ""));
                sameBits(v1, v2, S * nD, "norm, " + at + (norm ? ", norm" : ""));
            }
            // the MoE site: the combination of routed rows and shared expert output f
            long X1 = dev(x), X2 = dev(x), v1 = dev(new float[S * nD]), v2 = dev(new float[S * nD]), out = dev(new float[S * D]);
            check(ds4j_moe_combine(gpu.ctx(), ptr(dids), ptr(wts), ptr(yr), ptr(f), S, k, D, ptr(out)), "moe_combine");
            check(ds4j_hc_post(gpu.ctx(), ptr(X1), ptr(out), ptr(post), ptr(comb), S, n, D), "hc_post");
            check(ds4j_rmsnorm(gpu.ctx(), ptr(X1), ptr(v1), MemorySegment.NULL, S, nD, eps), "rmsnorm");
            check(ds4j_hc_post_norm(gpu.ctx(), ptr(X2), ptr(f), ptr(dids), ptr(wts), ptr(yr), k, ptr(post), ptr(comb), S, n, D, eps,
                    ptr(v2)), "hc_post_norm with combine");
            sameBits(X1, X2, S * nD, "streams, combine, " + at);
            sameBits(v1, v2, S * nD, "norm, combine, " + at);
        }
        assertNotEquals(DS4J_OK(), ds4j_hc_post_norm(gpu.ctx(), MemorySegment.NULL, MemorySegment.NULL, MemorySegment.NULL,
                MemorySegment.NULL, MemorySegment.NULL, 1, MemorySegment.NULL, MemorySegment.NULL, 1, 4, 16, eps, MemorySegment.NULL),
                "null pointers are refused");
    }

    /** Random inputs of the row-wise mHC, RMSNorm and routing kernels for S rows (n streams of D, k of E experts). */
    record RowInputs(int S, int n, int D, int k, int E, float[] mu, float[] base, float[] scale, float[] X, float[] w, float[] f,
                     float[] post, float[] comb, int[] ids, float[] wts, float[] yr, float[] headMu, float[] lam, float[] bias,
                     int[] toks, int[] tid2eid) {
        static RowInputs random(SplittableRandom r, int S, int n, int D, int k) {
            final int E = 16, V = 40, mix = (2 + n) * n;
            int[] ids = new int[S * k], toks = new int[S], tid2eid = new int[V * k];
            for (int s = 0; s < S; s++) {
                int[] perm = new int[E];
                for (int e = 0; e < E; e++) perm[e] = e;
                for (int e = E - 1; e > 0; e--) {
                    int j = r.nextInt(e + 1), t = perm[e];
                    perm[e] = perm[j];
                    perm[j] = t;
                }
                System.arraycopy(perm, 0, ids, s * k, k);
                toks[s] = r.nextInt(V);
            }
            for (int i = 0; i < tid2eid.length; i++) tid2eid[i] = r.nextInt(E);
            float[] lam = gauss(r, S * E, 2);
            for (int s = 0; s < S; s++) lam[s * E + 3] = lam[s * E + 4]; // ties
            return new RowInputs(S, n, D, k, E, gauss(r, S * mix, 1), gauss(r, mix, 0.5), gauss(r, 3, 1), gauss(r, S * n * D, 1),
                    gauss(r, D, 1), gauss(r, S * D, 1), gauss(r, S * n, 1), gauss(r, S * n * n, 0.5), ids, gauss(r, S * k, 1),
                    gauss(r, S * k * D, 1), gauss(r, S * n, 1), lam, gauss(r, E, 0.1), toks, tid2eid);
        }

        /** Rows [from, from + rows) of a per-row array of width per. */
        static float[] rows(float[] a, int per, int from, int rows) {
            return java.util.Arrays.copyOfRange(a, from * per, (from + rows) * per);
        }

        static int[] rows(int[] a, int per, int from, int rows) {
            return java.util.Arrays.copyOfRange(a, from * per, (from + rows) * per);
        }

        /**
         * Rows [from, from + rows) through every kernel, each result downloaded: hc_pre_norm (post, comb, col), hc_pre
         * (col), hc_post_norm with the MoE combination and the norm (streams, v), hc_post_norm alone (streams), hc_head,
         * RMSNorm of the streams, moe_route with bias (ids, weights) and hashed (ids, weights).
         */
        float[][] run(int from, int rows) {
            final int mix = (2 + n) * n, nD = n * D, iters = 20;
            final float hcEps = 1e-6f, eps = 1e-6f;
            long dmu = dev(rows(mu, mix, from, rows)), dbase = dev(base), dscale = dev(scale), dX = dev(rows(X, nD, from, rows));
            long dw = dev(w), post1 = dev(new float[rows * n]), comb1 = dev(new float[rows * n * n]), col1 = dev(new float[rows * D]);
            check(ds4j_hc_pre_norm(gpu.ctx(), ptr(dmu), ptr(dbase), ptr(dscale), ptr(dX), rows, n, D, iters, hcEps, ptr(post1), ptr(comb1),
                    ptr(col1), ptr(dw), eps), "hc_pre_norm");
            long col2 = dev(new float[rows * D]);
            check(ds4j_hc_pre(gpu.ctx(), ptr(dmu), ptr(dbase), ptr(dscale), ptr(dX), rows, n, D, iters, hcEps, ptr(post1), ptr(comb1),
                    ptr(col2)), "hc_pre");
            long df = dev(rows(f, D, from, rows)), dpost = dev(rows(post, n, from, rows)), dcomb = dev(rows(comb, n * n, from, rows));
            long dids = dev(rows(ids, k, from, rows)), dwts = dev(rows(wts, k, from, rows)), dyr = dev(rows(yr, k * D, from, rows));
            long X1 = dev(rows(X, nD, from, rows)), v1 = dev(new float[rows * nD]);
            check(ds4j_hc_post_norm(gpu.ctx(), ptr(X1), ptr(df), ptr(dids), ptr(dwts), ptr(dyr), k, ptr(dpost), ptr(dcomb), rows, n, D,
                    eps, ptr(v1)), "hc_post_norm");
            long X2 = dev(rows(X, nD, from, rows));
            check(ds4j_hc_post_norm(gpu.ctx(), ptr(X2), ptr(df), MemorySegment.NULL, MemorySegment.NULL, MemorySegment.NULL, k,
                    ptr(dpost), ptr(dcomb), rows, n, D, eps, MemorySegment.NULL), "hc_post_norm without norm");
            long dhm = dev(rows(headMu, n, from, rows)), y = dev(new float[rows * D]);
            check(ds4j_hc_head(gpu.ctx(), ptr(dhm), ptr(dbase), ptr(dscale), ptr(dX), rows, n, D, hcEps, ptr(y)), "hc_head");
            long vn = dev(new float[rows * nD]);
            check(ds4j_rmsnorm(gpu.ctx(), ptr(dX), ptr(vn), MemorySegment.NULL, rows, nD, eps), "rmsnorm");
            long dlam = dev(rows(lam, E, from, rows)), dbias = dev(bias), dtoks = dev(rows(toks, 1, from, rows)), dt = dev(tid2eid);
            long ri = dev(new int[rows * k]), rw = dev(new float[rows * k]), hi = dev(new int[rows * k]), hw = dev(new float[rows * k]);
            check(ds4j_moe_route(gpu.ctx(), ptr(dlam), ptr(dbias), MemorySegment.NULL, ptr(dtoks), rows, E, k, 1.5f, ptr(ri), ptr(rw)),
                    "moe_route");
            check(ds4j_moe_route(gpu.ctx(), ptr(dlam), MemorySegment.NULL, ptr(dt), ptr(dtoks), rows, E, k, 1.5f, ptr(hi), ptr(hw)),
                    "moe_route hashed");
            return new float[][]{gpu.downloadFloats(post1, rows * n), gpu.downloadFloats(comb1, rows * n * n),
                    gpu.downloadFloats(col1, rows * D), gpu.downloadFloats(col2, rows * D), gpu.downloadFloats(X1, rows * nD),
                    gpu.downloadFloats(v1, rows * nD), gpu.downloadFloats(X2, rows * nD), gpu.downloadFloats(y, rows * D),
                    gpu.downloadFloats(vn, rows * nD), ints(gpu.downloadInts(ri, rows * k)), gpu.downloadFloats(rw, rows * k),
                    ints(gpu.downloadInts(hi, rows * k)), gpu.downloadFloats(hw, rows * k)};
        }

        static final String[] NAMES = {"hc_pre_norm post", "hc_pre_norm comb", "hc_pre_norm col", "hc_pre col",
                "hc_post_norm streams", "hc_post_norm v", "hc_post streams", "hc_head", "rmsnorm", "moe_route ids",
                "moe_route weights", "hashed ids", "hashed weights"};

        /** Per-row widths of run's results. */
        int[] widths() {
            return new int[]{n, n * n, D, D, n * D, n * D, n * D, D, n * D, k, k, k, k};
        }

        static float[] ints(int[] a) {
            float[] f = new float[a.length];
            for (int i = 0; i < a.length; i++) f[i] = Float.intBitsToFloat(a[i]);
            return f;
        }
    }

    static void sameBits(float[] expected, float[] actual, String what) {
        assertEquals(expected.length, actual.length, what);
        for (int i = 0; i < expected.length; i++)
            if (Float.floatToRawIntBits(expected[i]) != Float.floatToRawIntBits(actual[i]))
                fail(what + ": element " + i + " of " + expected.length + ": want " + expected[i] + ", got " + actual[i]);
    }

    /** run(from, rows) with the split kernels on or off (ds4j_set_hc_split), the previous selection restored. */
    static float[][] runWith(boolean split, RowInputs in, int from, int rows) {
        int prev = ds4j_set_hc_split(split ? 1 : 0);
        try {
            return in.run(from, rows);
        } finally {
            ds4j_set_hc_split(prev);
        }
    }

    /** (S, n, D, k); above 64 rows the split collapse takes 1,024 columns a block instead of 256. */
    static final int[][] ROW_SHAPES = {{1, 4, 4096, 6}, {5, 4, 4096, 6}, {64, 4, 4096, 6}, {70, 4, 1000, 6}, {3, 8, 257, 16},
            {2, 4, 5000, 2}, {2, 3, 200, 1}, {80, 4, 4096, 6}, {66, 4, 1100, 3}};

    @Test
    void splitRowKernelsEqualTheOneBlockKernels() {
        SplittableRandom r = new SplittableRandom(35);
        for (int[] sh : ROW_SHAPES) {
            RowInputs in = RowInputs.random(r, sh[0], sh[1], sh[2], sh[3]);
            float[][] one = runWith(false, in, 0, in.S()), split = runWith(true, in, 0, in.S());
            float[][] again = runWith(true, in, 0, in.S()); // the arrival counters are back at zero after a launch
            String at = "S " + in.S() + ", n " + in.n() + ", D " + in.D() + ", k " + in.k();
            for (int i = 0; i < one.length; i++) {
                sameBits(one[i], split[i], RowInputs.NAMES[i] + " split vs one block, " + at);
                sameBits(split[i], again[i], RowInputs.NAMES[i] + " split run twice, " + at);
            }
        }
    }

    @Test
    void aRowAloneEqualsTheSameRowOfAStep() {
        SplittableRandom r = new SplittableRandom(36);
        for (int[] sh : ROW_SHAPES) {
            RowInputs in = RowInputs.random(r, sh[0], sh[1], sh[2], sh[3]);
            if (in.S() == 1) continue;
            float[][] step = runWith(true, in, 0, in.S());
            int[] widths = in.widths();
            for (int s : new int[]{0, in.S() / 2, in.S() - 1}) {
                float[][] alone = runWith(true, in, s, 1);
                for (int i = 0; i < step.length; i++)
                    sameBits(RowInputs.rows(step[i], widths[i], s, 1), alone[i],
                            RowInputs.NAMES[i] + ", row " + s + " alone vs in a step of " + in.S() + " (n " + in.n() + ", D " + in.D() + ")");
            }
        }
    }

    @Test
    void qkvNormRopeEqualsTheTwoNormRopes() {
        io.ds4j.model.ModelConfig c = io.ds4j.model.synth.Presets.get("small");
        SplittableRandom r = new SplittableRandom(33);
        final float eps = 1e-6f;
        for (Rope rope : new Rope[]{Rope.main(c), Rope.compress(c)}) {
            long table = dev(rope.invFreq);
            for (int[] shape : new int[][]{{1, 64, 512}, {5, 64, 512}, {70, 64, 512}, {3, 7, 128}, {2, 3, 64}, {2, 3, 96}}) {
                int S = shape[0], H = shape[1], d = shape[2];
                if (rope.dims > d) continue;
                float[] q = gauss(r, S * H * d, 2), kv = gauss(r, S * d, 2);
                long kvw = dev(gauss(r, d, 1));
                long[] pos = new long[S];
                for (int s = 0; s < S; s++) pos[s] = r.nextInt(70000);
                long dpos = dev(pos), pos0 = 40961;
                String at = "S " + S + ", H " + H + ", d " + d + ", rope " + rope.dims;
                // positions pos0 + s
                long q1 = dev(q), q2 = dev(q), k1 = dev(kv), k2 = dev(kv);
                check(ds4j_rmsnorm_rope(gpu.ctx(), ptr(q1), MemorySegment.NULL, S * H, d, eps, rope.dims, ptr(table), pos0, H, 0), "q");
                check(ds4j_rmsnorm_rope(gpu.ctx(), ptr(k1), ptr(kvw), S, d, eps, rope.dims, ptr(table), pos0, 1, 1), "kv");
                check(ds4j_qkv_norm_rope(gpu.ctx(), ptr(q2), ptr(k2), ptr(kvw), S, H, d, eps, rope.dims, ptr(table), pos0,
                        MemorySegment.NULL), "qkv");
                sameBits(q1, q2, S * H * d, "q, " + at);
                sameBits(k1, k2, S * d, "kv, " + at);
                // positions from memory
                q1 = dev(q);
                q2 = dev(q);
                k1 = dev(kv);
                k2 = dev(kv);
                check(ds4j_rmsnorm_rope_at(gpu.ctx(), ptr(q1), MemorySegment.NULL, S * H, d, eps, rope.dims, ptr(table), ptr(dpos), H, 0),
                        "q at");
                check(ds4j_rmsnorm_rope_at(gpu.ctx(), ptr(k1), ptr(kvw), S, d, eps, rope.dims, ptr(table), ptr(dpos), 1, 1), "kv at");
                check(ds4j_qkv_norm_rope(gpu.ctx(), ptr(q2), ptr(k2), ptr(kvw), S, H, d, eps, rope.dims, ptr(table), 0, ptr(dpos)),
                        "qkv at");
                sameBits(q1, q2, S * H * d, "q at, " + at);
                sameBits(k1, k2, S * d, "kv at, " + at);
            }
        }
    }

    /**
     * (m, overlap, cap, N0, S) cases: decode and verify steps completing no window, one, several; ring wrap-around. The
     * pooling alone takes the channels in slices where few windows of at least 64 rows complete, the step's one-launch
     * form pools a window in one block: the long windows' cases compare the two.
     */
    static final int[][] COMPRESS_CASES = {
            {4, 1, 8 + 16, 0, 1}, {4, 1, 8 + 16, 3, 1}, {4, 1, 8 + 16, 4098, 1}, {4, 1, 8 + 16, 4095, 1},
            {4, 1, 8 + 16, 4093, 5}, {4, 1, 8 + 16, 1000, 17}, {4, 1, 8 + 16, 1001, 40}, {4, 1, 8 + 16, 0, 37},
            {128, 0, 128 + 16, 127, 1}, {128, 0, 128 + 16, 4000, 1}, {128, 0, 128 + 16, 4093, 5}, {128, 0, 128 + 16, 255, 17},
            {128, 0, 128 + 16, 250, 300}, {128, 0, 128 + 16, 1020, 10}, {64, 1, 128 + 32, 2040, 20}};

    @Test
    void compressStepEqualsPoolThenRingStores() {
        io.ds4j.model.ModelConfig c = io.ds4j.model.synth.Presets.get("small");
        Rope rope = Rope.compress(c);
        SplittableRandom r = new SplittableRandom(34);
        long table = dev(rope.invFreq);
        for (int w : new int[]{128, 512})
        for (int[] cs : COMPRESS_CASES) {
            int m = cs[0], overlap = cs[1], cap = cs[2], S = cs[4], cw = overlap == 1 ? 2 * w : w;
            long N0 = cs[3];
            int entries = (int) ((N0 + S) / m) + 1;
            float[] ringA = gauss(r, cap * cw, 1), ringZ = gauss(r, cap * cw, 1);
            short[] st = f16(r, entries * w);
            long a = dev(gauss(r, S * cw, 1)), z = dev(gauss(r, S * cw, 1)), pb = dev(gauss(r, m * cw, 0.3)), norm = dev(gauss(r, w, 1));
            long ra1 = dev(ringA), rz1 = dev(ringZ), st1 = dev(st), ra2 = dev(ringA), rz2 = dev(ringZ), st2 = dev(st);
            check(ds4j_compress_pool(gpu.ctx(), ptr(ra1), ptr(rz1), cap, ptr(a), ptr(z), N0, S, m, w, overlap, ptr(pb), ptr(norm), 1e-6f,
                    ptr(table), rope.dims, ptr(st1)), "compress_pool");
            check(ds4j_ring_store(gpu.ctx(), ptr(ra1), 0, cap, cw, ptr(a), N0, S), "ring a");
            check(ds4j_ring_store(gpu.ctx(), ptr(rz1), 0, cap, cw, ptr(z), N0, S), "ring z");
            check(ds4j_compress_step(gpu.ctx(), ptr(ra2), ptr(rz2), cap, ptr(a), ptr(z), N0, S, m, w, overlap, ptr(pb), ptr(norm), 1e-6f,
                    ptr(table), rope.dims, ptr(st2)), "compress_step");
            String at = "w " + w + ", m " + m + ", overlap " + overlap + ", cap " + cap + ", N0 " + N0 + ", S " + S;
            assertArrayEquals(gpu.downloadShorts(st1, entries * w), gpu.downloadShorts(st2, entries * w), "entries, " + at);
            sameBits(ra1, ra2, cap * cw, "ring a, " + at);
            sameBits(rz1, rz2, cap * cw, "ring z, " + at);
        }
    }

    /** A width above DS4J_COMPRESS_MAX_WIDTH is refused by the pooling and the step, also when no window completes. */
    @Test
    void compressorWiderThanTheLimitIsRefused() {
        final int w = DS4J_COMPRESS_MAX_WIDTH() + 1, m = 4, cap = 8;
        long buf = dev(new float[2 * cap * w]), pb = dev(new float[m * w]), norm = dev(new float[w]), table = dev(new float[32]);
        short[] none = new short[4 * w];
        long st = dev(none);
        for (int S : new int[]{1, 8}) {  // no window completes, two windows complete
            assertEquals(DS4J_ERR_ARG(), ds4j_compress_pool(gpu.ctx(), ptr(buf), ptr(buf), cap, ptr(buf), ptr(buf), 0, S, m, w, 0,
                    ptr(pb), ptr(norm), 1e-6f, ptr(table), 64, ptr(st)), "compress_pool, S " + S);
            assertEquals(DS4J_ERR_ARG(), ds4j_compress_step(gpu.ctx(), ptr(buf), ptr(buf), cap, ptr(buf), ptr(buf), 0, S, m, w, 0,
                    ptr(pb), ptr(norm), 1e-6f, ptr(table), 64, ptr(st)), "compress_step, S " + S);
        }
        assertArrayEquals(none, gpu.downloadShorts(st, 4 * w), "nothing stored");
    }

    @Test
    void compressStepSeqsEqualsPoolThenRingStores() {
        io.ds4j.model.ModelConfig c = io.ds4j.model.synth.Presets.get("small");
        Rope rope = Rope.compress(c);
        SplittableRandom r = new SplittableRandom(35);
        long table = dev(rope.invFreq);
        final int w = 128;
        // groups of sequences at one (m, overlap, cap): short steps only (one launch), then one long step among them
        int[][][] groups = {
                {{4, 1, 24, 4095, 1}, {4, 1, 24, 17, 1}, {4, 1, 24, 4093, 5}, {4, 1, 24, 0, 1}},
                {{4, 1, 24, 4095, 1}, {4, 1, 24, 1001, 40}},
                {{128, 0, 144, 127, 1}, {128, 0, 144, 4093, 5}, {128, 0, 144, 300, 2}},
        };
        for (boolean bounds : new boolean[]{false, true})
            for (int[][] g : groups) {
                int n = g.length, m = g[0][0], overlap = g[0][1], cap = g[0][2], cw = overlap == 1 ? 2 * w : w, R = 0;
                int[] row0 = new int[n];
                for (int e = 0; e < n; e++) {
                    row0[e] = R;
                    R += g[e][4];
                }
                long a = dev(gauss(r, R * cw, 1)), z = dev(gauss(r, R * cw, 1)), pb = dev(gauss(r, m * cw, 0.3)), norm = dev(gauss(r, w, 1));
                SeqViews v1 = new SeqViews(java.lang.foreign.Arena.ofAuto(), n), v2 = new SeqViews(java.lang.foreign.Arena.ofAuto(), n);
                long[][] dev1 = new long[n][], dev2 = new long[n][];
                int[] entries = new int[n];
                for (int e = 0; e < n; e++) {
                    long N0 = g[e][3];
                    int S = g[e][4];
                    entries[e] = (int) ((N0 + S) / m) + 1;
                    float[] ringA = gauss(r, cap * cw, 1), ringZ = gauss(r, cap * cw, 1);
                    short[] st = f16(r, entries[e] * w);
                    dev1[e] = new long[]{dev(ringA), dev(ringZ), dev(st)};
                    dev2[e] = new long[]{dev(ringA), dev(ringZ), dev(st)};
                    v1.set(e, N0, S, row0[e], dev1[e][0], dev1[e][1], dev1[e][2], cap);
                    v2.set(e, N0, S, row0[e], dev2[e][0], dev2[e][1], dev2[e][2], cap);
                }
                long d1 = gpu.malloc(v1.bytes(), "test"), d2 = gpu.malloc(v2.bytes(), "test");
                allocs.add(d1);
                allocs.add(d2);
                gpu.upload(d1, v1.host());
                gpu.upload(d2, v2.host());
                check(ds4j_seqs_bounds(gpu.ctx(), bounds ? 1 : 0, bounds ? 256 : 0, 0), "bounds");
                try {
                    check(ds4j_compress_pool_seqs(gpu.ctx(), v1.host(), ptr(d1), n, ptr(a), ptr(z), m, w, overlap, ptr(pb), ptr(norm), 1e-6f,
                            ptr(table), rope.dims), "compress_pool_seqs");
                    check(ds4j_ring_store_seqs(gpu.ctx(), v1.host(), ptr(d1), n, 0, 0, cw, ptr(a)), "ring a");
                    check(ds4j_ring_store_seqs(gpu.ctx(), v1.host(), ptr(d1), n, 1, 0, cw, ptr(z)), "ring z");
                    check(ds4j_compress_step_seqs(gpu.ctx(), v2.host(), ptr(d2), n, ptr(a), ptr(z), m, w, overlap, ptr(pb), ptr(norm), 1e-6f,
                            ptr(table), rope.dims), "compress_step_seqs");
                } finally {
                    check(ds4j_seqs_bounds(gpu.ctx(), 0, 0, 0), "bounds off");
                }
                for (int e = 0; e < n; e++) {
                    String at = "sequence " + e + " (m " + m + ", N0 " + g[e][3] + ", S " + g[e][4] + (bounds ? ", bounds" : "") + ")";
                    assertArrayEquals(gpu.downloadShorts(dev1[e][2], entries[e] * w), gpu.downloadShorts(dev2[e][2], entries[e] * w),
                            "entries, " + at);
                    sameBits(dev1[e][0], dev2[e][0], cap * cw, "ring a, " + at);
                    sameBits(dev1[e][1], dev2[e][1], cap * cw, "ring z, " + at);
                }
            }
    }

    /** (S, E, D, k, format, ldx); E above 16 takes several blocks a row (the last ranks), ldx above D strided rows. */
    static final int[][] ROUTER_SHAPES = {{1, 16, 4096, 6, 2, 4096}, {5, 16, 4096, 6, 2, 4100}, {64, 16, 4096, 6, 2, 4096},
            {3, 40, 4096, 6, 0, 4096}, {2, 256, 4096, 8, 2, 4096}, {7, 256, 1000, 8, 1, 1004}, {4, 6, 64, 6, 2, 64},
            {9, 33, 520, 2, 0, 528}};

    /**
     * ds4j_moe_gate_route: the scores within their rounding bound of double sums (one F32 sum a lane over D / (32 × the
     * chunk's width) chunks, then five levels of a warp's tree: at most (D / 32 + 6) × 2^-24 of the terms' absolute
     * sum), the picks and weights those of ds4j_moe_route on the kernel's own scores bit for bit (biased and hashed),
     * a row alone the bits of the same row in the step, and a second launch the bits of the first (the arrival counters
     * are back at zero).
     */
    @Test
    void routerInOneLaunchScoresWithinTheBoundAndPicksAsTheRankingRouter() {
        SplittableRandom r = new SplittableRandom(41);
        try (java.lang.foreign.Arena a = java.lang.foreign.Arena.ofConfined()) {
            MemorySegment fits = a.allocate(java.lang.foreign.ValueLayout.JAVA_INT);
            for (int[] sh : ROUTER_SHAPES) {
                final int S = sh[0], E = sh[1], D = sh[2], k = sh[3], fmt = sh[4], ldx = sh[5];
                check(ds4j_moe_gate_route_fits(gpu.ctx(), fmt, E, D, fits), "fits");
                assertEquals(1, fits.get(java.lang.foreign.ValueLayout.JAVA_INT, 0), "fits " + java.util.Arrays.toString(sh));
                // weights: F32 values, or F16 / BF16 patterns, and their exact F32 values for the reference
                float[] wv = new float[E * D];
                long dw;
                if (fmt == DS4J_FMT_F32()) {
                    wv = gauss(r, E * D, 0.05);
                    dw = dev(wv);
                } else {
                    short[] bits = new short[E * D];
                    for (int i = 0; i < E * D; i++) {
                        float v = (float) (r.nextGaussian() * 0.05);
                        bits[i] = fmt == DS4J_FMT_F16() ? Float.floatToFloat16(v) : (short) (Float.floatToRawIntBits(v) >>> 16);
                        wv[i] = fmt == DS4J_FMT_F16() ? Float.float16ToFloat(bits[i]) : Float.intBitsToFloat((bits[i] & 0xffff) << 16);
                    }
                    dw = dev(bits);
                }
                float[] x = gauss(r, S * ldx, 1.0), bias = gauss(r, E, 0.1);
                int[] toks = new int[S], table = new int[5 * k];
                for (int s = 0; s < S; s++) toks[s] = r.nextInt(5);
                for (int t = 0; t < 5; t++)
                    for (int j = 0; j < k; j++) table[t * k + j] = (t + 3 * j) % E;
                long dx = dev(x), db = dev(bias), dt = dev(toks), dtab = dev(table);
                String at = "S " + S + ", E " + E + ", D " + D + ", k " + k + ", format " + fmt + ", ldx " + ldx;
                for (boolean hash : new boolean[]{false, true}) {
                    MemorySegment pb = hash ? MemorySegment.NULL : ptr(db), pt = hash ? ptr(dtab) : MemorySegment.NULL;
                    long lam = dev(new float[S * E]), ids = dev(new int[S * k]), wts = dev(new float[S * k]);
                    check(ds4j_moe_gate_route(gpu.ctx(), fmt, ptr(dw), E, D, ptr(dx), ldx, pb, pt, ptr(dt), S, k, 1.5f, ptr(lam),
                            ptr(ids), ptr(wts)), "moe_gate_route");
                    float[] got = gpu.downloadFloats(lam, S * E);
                    for (int s = 0; s < S; s++)
                        for (int e = 0; e < E; e++) {
                            double sum = 0, abs = 0;
                            for (int c = 0; c < D; c++) {
                                double t = (double) wv[e * D + c] * x[s * ldx + c];
                                sum += t;
                                abs += Math.abs(t);
                            }
                            double bound = (D / 32.0 + 6) * Math.scalb(1.0, -24) * abs;
                            assertTrue(Math.abs(got[s * E + e] - sum) <= bound, at + ": score (" + s + ", " + e + ") " + got[s * E + e]
                                    + " against " + sum + ", bound " + bound);
                        }
                    // the ranking router on the same scores: the same picks and weights
                    long ri = dev(new int[S * k]), rw = dev(new float[S * k]);
                    check(ds4j_moe_route(gpu.ctx(), ptr(lam), pb, pt, ptr(dt), S, E, k, 1.5f, ptr(ri), ptr(rw)), "moe_route");
                    sameBits(ri, ids, S * k, at + (hash ? ", hashed" : "") + ": ids against moe_route's");
                    sameBits(rw, wts, S * k, at + (hash ? ", hashed" : "") + ": weights against moe_route's");
                    // again: the same bits
                    long lam2 = dev(new float[S * E]), ids2 = dev(new int[S * k]), wts2 = dev(new float[S * k]);
                    check(ds4j_moe_gate_route(gpu.ctx(), fmt, ptr(dw), E, D, ptr(dx), ldx, pb, pt, ptr(dt), S, k, 1.5f, ptr(lam2),
                            ptr(ids2), ptr(wts2)), "moe_gate_route again");
                    sameBits(lam, lam2, S * E, at + ": scores of a second launch");
                    sameBits(ids, ids2, S * k, at + ": ids of a second launch");
                    sameBits(wts, wts2, S * k, at + ": weights of a second launch");
                    // the last row alone
                    final int s = S - 1;
                    long lam1 = dev(new float[E]), ids1 = dev(new int[k]), wts1 = dev(new float[k]);
                    check(ds4j_moe_gate_route(gpu.ctx(), fmt, ptr(dw), E, D, ptr(dx + 4L * s * ldx), ldx, pb, pt, ptr(dt + 4L * s), 1, k,
                            1.5f, ptr(lam1), ptr(ids1), ptr(wts1)), "moe_gate_route, a row alone");
                    sameBits(lam + 4L * s * E, lam1, E, at + ": a row's scores alone");
                    sameBits(ids + 4L * s * k, ids1, k, at + ": a row's ids alone");
                    sameBits(wts + 4L * s * k, wts1, k, at + ": a row's weights alone");
                }
            }
            // what it declines: FP8 weights, D not a multiple of 8, a row too wide for a block's shared memory
            for (int[] no : new int[][]{{DS4J_FMT_FP8_E4M3_B128(), 16, 4096}, {DS4J_FMT_BF16(), 16, 4100}, {DS4J_FMT_BF16(), 16, 12288},
                    {DS4J_FMT_BF16(), 0, 4096}}) {
                check(ds4j_moe_gate_route_fits(gpu.ctx(), no[0], no[1], no[2], fits), "fits");
                assertEquals(0, fits.get(java.lang.foreign.ValueLayout.JAVA_INT, 0), "declined " + java.util.Arrays.toString(no));
            }
            long buf = dev(new float[64]);
            assertEquals(DS4J_ERR_ARG(), ds4j_moe_gate_route(gpu.ctx(), DS4J_FMT_BF16(), ptr(buf), 16, 4100, ptr(buf), 4100,
                    ptr(buf), MemorySegment.NULL, ptr(buf), 1, 6, 1f, ptr(buf), ptr(buf), ptr(buf)), "D 4,100 is refused");
        }
    }
}
