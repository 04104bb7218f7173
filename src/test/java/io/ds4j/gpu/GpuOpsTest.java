package io.ds4j.gpu;

import io.ds4j.kernels.Ops;
import io.ds4j.kernels.TopK;
import io.ds4j.model.DType;
import io.ds4j.model.Rope;
import io.ds4j.model.WeightMatrix;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.Gpu.ptr;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;
import static org.junit.jupiter.api.Assertions.*;

/**
 * Single kernels of the GPU library against the CPU reference (io.ds4j.cpu / io.ds4j.model), on random inputs:
 * stored-format matrix products (every format, row views, strides, token counts), routed-expert products, RMSNorm,
 * RoPE, F16 rounding and ring stores, the indexer's top-k (ties, NaN, -0) and MoE routing; and the prefill path
 * (steps of DS4J_TC_MIN_ROWS rows or more: tensor-core products, routed experts grouped by expert, tensor-core indexer
 * scores) against F64 references, for odd shapes, on both sides of the threshold.
 */
@Tag("gpu")
class GpuOpsTest {
    static Gpu gpu;
    static final List<Long> allocs = new ArrayList<>();
    static final Arena ARENA = Arena.ofShared();

    @BeforeAll
    static void open() {
        gpu = Gpu.open(0);
        System.out.println("GPU: " + gpu + "; prefill path (>= " + DS4J_TC_MIN_ROWS() + " rows) on "
                + (gpu.tensorCores() ? "tensor cores" : "the FFMA kernels"));
    }

    @AfterAll
    static void close() {
        for (long p : allocs) gpu.free(p);
        gpu.close();
    }

    static long dev(MemorySegment s) {
        long p = gpu.malloc(s.byteSize(), "test");
        allocs.add(p);
        gpu.upload(p, s);
        return p;
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

    static long zeros(long bytes) {
        long p = gpu.malloc(bytes, "test");
        allocs.add(p);
        gpu.memset(p, 0, bytes);
        return p;
    }

    static float[] gauss(SplittableRandom r, int n, double std) {
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) (r.nextGaussian() * std);
        return a;
    }

    /** A random matrix in the given stored format (FP8 scales as E8M0 or F32). */
    static WeightMatrix randomMatrix(SplittableRandom r, WeightMatrix.Format f, int rows, int cols, boolean f32Scales) {
        return switch (f) {
            case F32 -> WeightMatrix.ofFloats(gauss(r, rows * cols, 1), rows, cols, "f32");
            case F16, BF16 -> {
                MemorySegment d = ARENA.allocate(2L * rows * cols, 16);
                for (long i = 0; i < (long) rows * cols; i++) {
                    float v = (float) r.nextGaussian();
                    short h = f == WeightMatrix.Format.F16 ? Float.floatToFloat16(v) : (short) (Float.floatToRawIntBits(v) >>> 16);
                    d.set(WeightMatrix.I16_LE, 2 * i, h);
                }
                yield new WeightMatrix(f, rows, cols, d, null, null, 0, f.name());
            }
            case FP8_E4M3_B128 -> {
                MemorySegment d = ARENA.allocate((long) rows * cols, 16);
                for (long i = 0; i < (long) rows * cols; i++) {
                    int b = r.nextInt(256);
                    if ((b & 0x7F) == 0x7F) b &= 0xFE; // no NaN codes
                    d.set(ValueLayout.JAVA_BYTE, i, (byte) b);
                }
                int sr = (rows + 127) / 128, sc = (cols + 127) / 128;
                MemorySegment s = ARENA.allocate((long) sr * sc * (f32Scales ? 4 : 1), 16);
                for (int i = 0; i < sr * sc; i++) {
                    if (f32Scales) s.set(WeightMatrix.F32_LE, 4L * i, (float) Math.scalb(1.0 + r.nextDouble(), -8 + r.nextInt(4)));
                    else s.set(ValueLayout.JAVA_BYTE, i, (byte) (120 + r.nextInt(6)));
                }
                yield new WeightMatrix(f, rows, cols, d, s, f32Scales ? DType.F32 : DType.F8_E8M0, 0, "fp8");
            }
            case FP4_E2M1_B32 -> {
                MemorySegment d = ARENA.allocate((long) rows * cols / 2, 16);
                for (long i = 0; i < (long) rows * cols / 2; i++) d.set(ValueLayout.JAVA_BYTE, i, (byte) r.nextInt(256));
                MemorySegment s = ARENA.allocate((long) rows * cols / 32, 16);
                for (long i = 0; i < (long) rows * cols / 32; i++) s.set(ValueLayout.JAVA_BYTE, i, (byte) (122 + r.nextInt(6)));
                yield new WeightMatrix(f, rows, cols, d, s, DType.F8_E8M0, 0, "fp4");
            }
        };
    }

    static DeviceMatrix upload(WeightMatrix m) {
        long d = dev(m.data), s = m.scale == null ? 0 : dev(m.scale);
        return new DeviceMatrix(m.format.ordinal(), d, s, m.scaleType == DType.F32 ? 1 : 0, m.rowBase, m.rows, m.cols, m.name);
    }

    /** max |got − want| / (Σ|w·x| of the row + 1e-30) over all outputs. */
    static void checkMatmul(String what, WeightMatrix m, float[] x, int ldx, int S, float[] y, int ldy) {
        double worst = 0;
        for (int s = 0; s < S; s++)
            for (int r = 0; r < m.rows; r++) {
                double acc = 0, mag = 0;
                for (int c = 0; c < m.cols; c++) {
                    double p = (double) m.get(r, c) * x[s * ldx + c];
                    acc += p;
                    mag += Math.abs(p);
                }
                double err = Math.abs(y[s * ldy + r] - acc) / (mag + 1e-30);
                assertFalse(Double.isNaN(y[s * ldy + r]), what + ": NaN at s=" + s + " r=" + r);
                worst = Math.max(worst, err);
            }
        System.out.printf("matmul %-40s max relative error %.2e%n", what, worst);
        assertTrue(worst < 1e-5, what + ": relative error " + worst);
    }

    @Test
    void matmulEveryFormatViewAndStride() {
        SplittableRandom r = new SplittableRandom(1);
        int rows = 300, cols = 320;
        for (WeightMatrix.Format f : WeightMatrix.Format.values())
            for (boolean f32s : f == WeightMatrix.Format.FP8_E4M3_B128 ? new boolean[]{false, true} : new boolean[]{false}) {
                WeightMatrix m = randomMatrix(r, f, rows, cols, f32s);
                DeviceMatrix dm = upload(m);
                for (int S : new int[]{1, 5, 8, 17}) {
                    float[] x = gauss(r, S * cols, 1);
                    long dx = dev(x), dy = zeros(4L * S * rows);
                    check(ds4j_matmul(gpu.ctx(), dm.format(), ptr(dm.data()), ptr(dm.scale()), dm.scaleKind(), dm.rowBase(), rows, cols,
                            ptr(dx), cols, ptr(dy), rows, S, 0), "matmul");
                    checkMatmul(f + (f32s ? "/f32 scales" : "") + " S=" + S, m, x, cols, S, gpu.downloadFloats(dy, S * rows), rows);
                }
                // a row view (as the grouped o_a projection uses) with strided activations: ldx a multiple of 4 takes
                // the vectorised path, an odd one the scalar path
                for (int pad : new int[]{8, 7}) {
                    int from = 130, to = 260, S = 6, ldx = cols + pad, ldy = (to - from) + 3;
                    WeightMatrix mv = m.rowRange(from, to);
                    DeviceMatrix dv = dm.rowRange(from, to);
                    float[] x = gauss(r, S * ldx, 1);
                    long dx = dev(x), dy = zeros(4L * S * ldy);
                    check(ds4j_matmul(gpu.ctx(), dv.format(), ptr(dv.data()), ptr(dv.scale()), dv.scaleKind(), dv.rowBase(), dv.rows(),
                            cols, ptr(dx), ldx, ptr(dy), ldy, S, 0), "matmul view");
                    checkMatmul(f + (f32s ? "/f32 scales" : "") + " rows 130..260 ldx+" + pad, mv, x, ldx, S,
                            gpu.downloadFloats(dy, S * ldy), ldy);
                }
            }
    }

    @Test
    void matmulSplitRowsForFewRowsOfManyColumns() {
        // rows < 2048 with >= 128 chunks of 16 bytes per row: each row is split over a block's warps
        SplittableRandom r = new SplittableRandom(12);
        for (WeightMatrix.Format f : WeightMatrix.Format.values()) {
            int rows = 100, cols = 4096;
            WeightMatrix m = randomMatrix(r, f, rows, cols, false);
            DeviceMatrix dm = upload(m);
            for (int S : new int[]{1, 11}) {
                float[] x = gauss(r, S * cols, 1);
                long dx = dev(x), dy = zeros(4L * S * rows);
                check(ds4j_matmul(gpu.ctx(), dm.format(), ptr(dm.data()), ptr(dm.scale()), dm.scaleKind(), 0, rows, cols, ptr(dx),
                        cols, ptr(dy), rows, S, 0), "matmul");
                checkMatmul(f + " 100x4096 (split rows) S=" + S, m, x, cols, S, gpu.downloadFloats(dy, S * rows), rows);
            }
        }
        // F32 (the mHC mappings) at prefill sizes: several rows a block (matvec_rows_kernel), the bits of each token's
        // row computed alone (one block a row); row counts below and past whole blocks of rows
        for (int[] shape : new int[][]{{24, 16384}, {26, 4096}, {3, 1024}}) {
            int rows = shape[0], cols = shape[1];
            WeightMatrix m = randomMatrix(r, WeightMatrix.Format.F32, rows, cols, false);
            DeviceMatrix dm = upload(m);
            for (int S : new int[]{65, 70, 130}) {
                float[] x = gauss(r, S * cols, 1);
                long dx = dev(x);
                float[] y = matmul(dm, dx, cols, S, rows);
                String what = "F32 " + rows + "x" + cols + " (split rows) S=" + S;
                checkMatmul(what, m, x, cols, S, y, rows);
                assertRowsAlone(what, dm, dx, cols, S, rows, y);
            }
        }
    }

    @Test
    void groupedMatmulEqualsPerGroupProducts() {
        // the grouped output projection: rows g*R .. g*R+R-1 read x at offset g*gw (one launch instead of G)
        SplittableRandom r = new SplittableRandom(13);
        for (WeightMatrix.Format f : new WeightMatrix.Format[]{WeightMatrix.Format.BF16, WeightMatrix.Format.FP8_E4M3_B128})
            checkGrouped(r, f, 4, 24, 64, 5, f + " group ");
    }

    /**
     * ds4j_matmul_grouped with G groups of R rows over gw columns each, S rows of x with a padded stride, against the
     * per-group products (checkMatmul) of the matching row range and x slice.
     */
    private void checkGrouped(SplittableRandom r, WeightMatrix.Format f, int G, int R, int gw, int S, String label) {
        int ldx = G * gw + 8;
        WeightMatrix m = randomMatrix(r, f, G * R, gw, false);
        DeviceMatrix dm = upload(m);
        float[] x = gauss(r, S * ldx, 1);
        long dx = dev(x), dy = zeros(4L * S * G * R);
        check(ds4j_matmul_grouped(gpu.ctx(), dm.format(), ptr(dm.data()), ptr(dm.scale()), dm.scaleKind(), 0, G * R, gw, R, gw,
                ptr(dx), ldx, ptr(dy), G * R, S, 0), "matmul_grouped");
        float[] y = gpu.downloadFloats(dy, S * G * R);
        for (int g = 0; g < G; g++) {
            float[] xs = new float[S * gw], ys = new float[S * R];
            for (int s = 0; s < S; s++) {
                System.arraycopy(x, s * ldx + g * gw, xs, s * gw, gw);
                System.arraycopy(y, s * G * R + g * R, ys, s * R, R);
            }
            checkMatmul(label + g, m.rowRange(g * R, (g + 1) * R), xs, gw, S, ys, R);
        }
    }

    @Test
    void fusedNormRopeRoundEqualsTheSeparateKernels() {
        io.ds4j.model.ModelConfig c = io.ds4j.model.synth.Presets.get("small");
        Rope rope = Rope.compress(c);
        SplittableRandom r = new SplittableRandom(14);
        int S = 3, H = 5, d = 128;
        long pos0 = 777;
        float[] x = gauss(r, S * H * d, 2), w = gauss(r, d, 1);
        long dt = dev(rope.invFreq), dw = dev(w);
        for (boolean weighted : new boolean[]{false, true}) {
            long a = dev(x), b = dev(x);
            check(ds4j_rmsnorm_rope(gpu.ctx(), ptr(a), weighted ? ptr(dw) : MemorySegment.NULL, S * H, d, 1e-6f, rope.dims, ptr(dt),
                    pos0, H, 1), "rmsnorm_rope");
            check(ds4j_rmsnorm(gpu.ctx(), ptr(b), ptr(b), weighted ? ptr(dw) : MemorySegment.NULL, S * H, d, 1e-6f), "rmsnorm");
            check(ds4j_rope(gpu.ctx(), ptr(b), S, H, d, rope.dims, ptr(dt), pos0, 1, 0), "rope");
            check(ds4j_round_f16(gpu.ctx(), ptr(b), (long) S * H * d), "round");
            assertArrayEquals(gpu.downloadFloats(b, S * H * d), gpu.downloadFloats(a, S * H * d), "fused == separate");
        }
    }

    @Test
    void matmulScalarPathForUnalignedRows() {
        SplittableRandom r = new SplittableRandom(11);
        for (WeightMatrix.Format f : new WeightMatrix.Format[]{WeightMatrix.Format.F32, WeightMatrix.Format.BF16, WeightMatrix.Format.FP8_E4M3_B128}) {
            int rows = 37, cols = 102, S = 3; // 102 columns: no whole number of 16-byte chunks per row in any of these
            WeightMatrix m = randomMatrix(r, f, rows, cols, false);
            DeviceMatrix dm = upload(m);
            float[] x = gauss(r, S * cols, 1);
            long dx = dev(x), dy = zeros(4L * S * rows);
            check(ds4j_matmul(gpu.ctx(), dm.format(), ptr(dm.data()), ptr(dm.scale()), dm.scaleKind(), 0, rows, cols, ptr(dx), cols,
                    ptr(dy), rows, S, 0), "matmul");
            checkMatmul(f + " cols=102 (scalar path)", m, x, cols, S, gpu.downloadFloats(dy, S * rows), rows);
        }
    }

    @Test
    void moeMatmulPicksExperts() {
        SplittableRandom r = new SplittableRandom(2);
        int E = 5, k = 2, S = 3, rows = 40, cols = 64;
        for (WeightMatrix.Format f : new WeightMatrix.Format[]{WeightMatrix.Format.BF16, WeightMatrix.Format.FP4_E2M1_B32}) {
            Experts ex = uploadExperts(r, f, E, rows, cols);
            WeightMatrix[] ms = ex.ms();
            long dt = ex.dataTable(), st = ex.scaleTable();
            int[] ids = {4, 1, 0, 2, 3, 4};
            for (boolean perPick : new boolean[]{false, true}) {
                int xr = perPick ? S * k : S;
                float[] x = gauss(r, xr * cols, 1);
                long dx = dev(x), dids = dev(ids), dy = zeros(4L * S * k * rows);
                check(ds4j_moe_matmul(gpu.ctx(), f.ordinal(), ptr(dt), ptr(f == WeightMatrix.Format.BF16 ? 0 : st), MemorySegment.NULL, 0,
                        rows, cols, ptr(dids), k, S, ptr(dx), cols, perPick ? 1 : 0, ptr(dy), rows), "moe_matmul");
                float[] y = gpu.downloadFloats(dy, S * k * rows);
                for (int p = 0; p < S * k; p++) {
                    float[] xs = Arrays.copyOfRange(x, (perPick ? p : p / k) * cols, (perPick ? p : p / k) * cols + cols);
                    checkMatmul(f + " expert " + ids[p] + " pick " + p + (perPick ? " per pick" : ""), ms[ids[p]], xs, cols, 1,
                            Arrays.copyOfRange(y, p * rows, p * rows + rows), rows);
                }
            }
        }
    }

    @Test
    void rmsnormMatchesOps() {
        SplittableRandom r = new SplittableRandom(3);
        int rows = 4, n = 1000;
        float[] x = gauss(r, rows * n, 2), w = gauss(r, n, 1);
        for (boolean weighted : new boolean[]{false, true}) {
            long dx = dev(x), dy = zeros(4L * rows * n), dw = dev(w);
            check(ds4j_rmsnorm(gpu.ctx(), ptr(dx), ptr(dy), weighted ? ptr(dw) : MemorySegment.NULL, rows, n, 1e-6f), "rmsnorm");
            float[] got = gpu.downloadFloats(dy, rows * n), want = x.clone();
            Ops.rmsNormRows(want, rows, n, weighted ? w : null, 1e-6f);
            for (int i = 0; i < want.length; i++) assertEquals(want[i], got[i], 2e-6 * Math.abs(want[i]) + 1e-7, "rmsnorm " + i);
        }
    }

    @Test
    void ropeMatchesRopeApply() {
        io.ds4j.model.ModelConfig c = io.ds4j.model.synth.Presets.get("small");
        SplittableRandom r = new SplittableRandom(4);
        for (Rope rope : new Rope[]{Rope.main(c), Rope.compress(c)})
            for (boolean inverse : new boolean[]{false, true}) {
                int S = 5, heads = 3, width = 128;
                long pos0 = 4090, step = 7;
                float[] x = gauss(r, S * heads * width, 1);
                long dx = dev(x), dt = dev(rope.invFreq);
                check(ds4j_rope(gpu.ctx(), ptr(dx), S, heads, width, rope.dims, ptr(dt), pos0, step, inverse ? 1 : 0), "rope");
                float[] got = gpu.downloadFloats(dx, x.length), want = x.clone();
                float[] cs = new float[rope.dims / 2], sn = new float[rope.dims / 2];
                for (int s = 0; s < S; s++) {
                    rope.angles(pos0 + s * step, cs, sn);
                    for (int h = 0; h < heads; h++) rope.apply(want, (s * heads + h) * width, width, cs, sn, inverse);
                }
                for (int i = 0; i < want.length; i++) assertEquals(want[i], got[i], 1e-6 * Math.abs(want[i]) + 1e-6, "rope " + i);
            }
    }

    @Test
    void f16RoundingAndRingStore() {
        SplittableRandom r = new SplittableRandom(5);
        int width = 33, cap = 7, S = 11;
        long N0 = 20;
        float[] x = gauss(r, S * width, 3);
        long dx = dev(x);
        check(ds4j_round_f16(gpu.ctx(), ptr(dx), x.length), "round_f16");
        float[] got = gpu.downloadFloats(dx, x.length);
        for (int i = 0; i < x.length; i++) assertEquals(Ops.f16(x[i]), got[i], 0f, "round " + i);
        long ring = zeros(2L * cap * width);
        check(ds4j_ring_store(gpu.ctx(), ptr(ring), 1, cap, width, ptr(dx), N0, S), "ring_store");
        short[] h = gpu.downloadShorts(ring, cap * width);
        for (long p = N0 + S - cap; p < N0 + S; p++)
            for (int c = 0; c < width; c++)
                assertEquals(Float.floatToFloat16(got[(int) (p - N0) * width + c]), h[(int) (p % cap) * width + c], "ring p=" + p);
    }

    @Test
    void topKMatchesCpuWithTiesNaNAndZeros() {
        SplittableRandom r = new SplittableRandom(6);
        // one NaN per row at most: TopK's order among several NaNs is not defined (its comparator is not total there)
        float[] pool = {0f, -0f, 0.5f, -1f, 3f, Float.NEGATIVE_INFINITY, 1e-30f};
        for (int[] cfg : new int[][]{{999, 4, 37}, {1999, 3, 512}, {63, 2, 1}, {40, 1, 40}}) {
            int N0 = cfg[0], S = cfg[1], K = cfg[2], m = 1;
            int ld = N0 + S;
            float[] v = new float[S * ld];
            for (int i = 0; i < v.length; i++) v[i] = r.nextInt(3) == 0 ? (float) r.nextGaussian() : pool[r.nextInt(pool.length)];
            for (int s = 0; s < S; s++) v[s * ld + r.nextInt(N0 + s + 1)] = Float.NaN;
            long dv = dev(v), sel = zeros(4L * S * K);
            check(ds4j_indexer_topk(gpu.ctx(), ptr(dv), ld, N0, S, m, K, ptr(sel)), "topk");
            int[] got = gpu.downloadInts(sel, S * K);
            for (int s = 0; s < S; s++) {
                int avail = N0 + s + 1;
                if (avail <= K) continue;
                int[] want = TopK.select(Arrays.copyOfRange(v, s * ld, s * ld + avail), avail, K);
                assertArrayEquals(want, Arrays.copyOfRange(got, s * K, s * K + K), "top-" + K + " of " + avail + " row " + s);
            }
        }
    }

    @Test
    void moeRouteMatchesCpuRouting() {
        SplittableRandom r = new SplittableRandom(7);
        int S = 9, E = 16, k = 6, V = 50;
        float scaling = 1.5f;
        float[] lam = gauss(r, S * E, 2), bias = gauss(r, E, 0.1);
        lam[3] = lam[4]; // a tie
        int[] toks = new int[S], tid2eid = new int[V * k];
        for (int i = 0; i < S; i++) toks[i] = r.nextInt(V);
        for (int i = 0; i < tid2eid.length; i++) tid2eid[i] = r.nextInt(E);
        for (boolean hash : new boolean[]{false, true}) {
            long dl = dev(lam), db = dev(bias), dt = dev(tid2eid), dtok = dev(toks), ids = zeros(4L * S * k), wts = zeros(4L * S * k);
            check(ds4j_moe_route(gpu.ctx(), ptr(dl), hash ? MemorySegment.NULL : ptr(db), hash ? ptr(dt) : MemorySegment.NULL, ptr(dtok),
                    S, E, k, scaling, ptr(ids), ptr(wts)), "moe_route");
            int[] gi = gpu.downloadInts(ids, S * k);
            float[] gw = gpu.downloadFloats(wts, S * k);
            for (int s = 0; s < S; s++) {
                float[] sc = new float[E], biased = new float[E];
                for (int e = 0; e < E; e++) {
                    sc[e] = Ops.sqrtSoftplus(lam[s * E + e]);
                    biased[e] = sc[e] + bias[e];
                }
                int[] pick = hash ? Arrays.copyOfRange(tid2eid, toks[s] * k, toks[s] * k + k) : TopK.select(biased, E, k);
                float sum = 0;
                for (int j = 0; j < k; j++) sum += sc[pick[j]];
                for (int j = 0; j < k; j++) {
                    assertEquals(pick[j], gi[s * k + j], "route s=" + s + " j=" + j + (hash ? " (hash)" : ""));
                    float want = sc[pick[j]] / (sum + 1e-20f) * scaling;
                    assertEquals(want, gw[s * k + j], 1e-6f * Math.abs(want), "weight s=" + s + " j=" + j);
                }
            }
        }
    }

    // ------------------------------------------------------------------------------------------------------------
    // prefill path: steps of DS4J_TC_MIN_ROWS rows or more (tensor cores where the device has them)

    static final int TC = DS4J_TC_MIN_ROWS();

    /** y [S, ldy] = x [S, ldx] · W^T through ds4j_matmul. */
    static float[] matmul(DeviceMatrix dm, long dx, int ldx, int S, int ldy) {
        long dy = zeros(4L * S * ldy);
        check(ds4j_matmul(gpu.ctx(), dm.format(), ptr(dm.data()), ptr(dm.scale()), dm.scaleKind(), dm.rowBase(), dm.rows(), dm.cols(),
                ptr(dx), ldx, ptr(dy), ldy, S, 0), "matmul");
        return gpu.downloadFloats(dy, S * ldy);
    }

    @Test
    void prefillMatmulEveryFormatOddShapes() {
        // 300 rows (not whole tiles of 128), columns not whole tiles of 32 (FP4: whole, its blocks are 32), S on both
        // sides of the threshold and not whole tiles of 64; F32 and FP8 with F32 scales stay on the FFMA kernels
        SplittableRandom r = new SplittableRandom(21);
        int rows = 300;
        for (WeightMatrix.Format f : WeightMatrix.Format.values())
            for (boolean f32s : f == WeightMatrix.Format.FP8_E4M3_B128 ? new boolean[]{false, true} : new boolean[]{false}) {
                int cols = switch (f) {
                    case FP8_E4M3_B128 -> 336;
                    case FP4_E2M1_B32 -> 352;
                    default -> 328;
                };
                String name = f + (f32s ? "/f32 scales" : "");
                WeightMatrix m = randomMatrix(r, f, rows, cols, f32s);
                DeviceMatrix dm = upload(m);
                float[] x = gauss(r, 130 * cols, 1);
                long dx = dev(x);
                float[] y130 = null;
                for (int S : new int[]{TC - 1, TC, TC + 1, 100, 130}) {
                    float[] y = matmul(dm, dx, cols, S, rows);
                    checkMatmul(name + " " + rows + "x" + cols + " S=" + S, m, x, cols, S, y, rows);
                    if (S == 130) y130 = y;
                }
                // a row's result does not depend on S within a path: the first TC + 5 rows of the 130-row step
                assertArrayEquals(Arrays.copyOf(y130, (TC + 5) * rows), matmul(dm, dx, cols, TC + 5, rows),
                        name + ": " + (TC + 5) + " rows vs 130 rows");
                // a row view (FP8: row_base 130 inside the 128 x 128 block grid) with strided activations and outputs
                int from = 130, to = 260, S = TC + 5, ldx = cols + 8, ldy = (to - from) + 3;
                WeightMatrix mv = m.rowRange(from, to);
                DeviceMatrix dv = dm.rowRange(from, to);
                float[] xs = gauss(r, S * ldx, 1);
                checkMatmul(name + " rows 130..260 ldx+8 S=" + S, mv, xs, ldx, S, matmul(dv, dev(xs), ldx, S, ldy), ldy);
            }
    }

    /**
     * tc_rows 1 puts a call of any size on the prefill path (the backend's prefill chunks of at least
     * HipBackend.PREFILL_TC_ROWS rows): each row's result equals that row of a call above DS4J_TC_MIN_ROWS, bit for bit,
     * for dense products and the routed experts; tc_rows outside 0 .. DS4J_TC_MIN_ROWS is a clear error.
     */
    @Test
    void tcRowsPutsSmallCallsOnThePrefillPath() {
        SplittableRandom r = new SplittableRandom(25);
        int rows = 256, cols = 512, big = TC + 30;
        for (WeightMatrix.Format f : new WeightMatrix.Format[]{WeightMatrix.Format.BF16, WeightMatrix.Format.FP8_E4M3_B128,
                WeightMatrix.Format.FP4_E2M1_B32}) {
            WeightMatrix m = randomMatrix(r, f, rows, cols, false);
            DeviceMatrix dm = upload(m);
            float[] x = gauss(r, big * cols, 1);
            long dx = dev(x);
            float[] yBig = matmul(dm, dx, cols, big, rows);
            for (int S : new int[]{1, 16, 40, TC - 1}) {
                long dy = zeros(4L * S * rows);
                check(ds4j_matmul(gpu.ctx(), dm.format(), ptr(dm.data()), ptr(dm.scale()), dm.scaleKind(), dm.rowBase(), rows, cols,
                        ptr(dx), cols, ptr(dy), rows, S, 1), "matmul tc_rows 1");
                assertArrayEquals(Arrays.copyOf(yBig, S * rows), gpu.downloadFloats(dy, S * rows),
                        f + ": S=" + S + " with tc_rows 1 vs the rows of a " + big + "-row call");
            }
            // the routed experts: the picks of the first 20 tokens alone vs in a call above the threshold
            int E = 5, k = 2, few = 20;
            long[] data = new long[E], scale = new long[E];
            WeightMatrix[] ms = new WeightMatrix[E];
            for (int e = 0; e < E; e++) {
                ms[e] = randomMatrix(r, f, rows, cols, false);
                DeviceMatrix d = upload(ms[e]);
                data[e] = d.data();
                scale[e] = d.scale();
            }
            long dt = gpu.malloc(8L * E, "t"), st = gpu.malloc(8L * E, "t");
            allocs.add(dt);
            allocs.add(st);
            gpu.upload(dt, data);
            gpu.upload(st, scale);
            MemorySegment scaleTable = f.ordinal() >= WeightMatrix.Format.FP8_E4M3_B128.ordinal() ? ptr(st) : MemorySegment.NULL;
            int[] ids = unevenIds(r, big, E + 2, k, 1); // ids in [0, E), k distinct per token
            long dids = dev(ids), bytes = 4L * (big * k + 3L * E + 1), scratch = zeros(bytes);
            float[][] got = new float[2][];
            int[] steps = {big, few};
            for (int c = 0; c < 2; c++) {
                long dy = zeros(4L * steps[c] * k * rows);
                check(ds4j_moe_matmul_prefill(gpu.ctx(), f.ordinal(), ptr(dt), scaleTable, MemorySegment.NULL, 0, rows, cols, E,
                        ptr(dids), k, steps[c], ptr(dx), cols, 0, ptr(dy), rows, ptr(scratch), bytes, c == 0 ? 0 : 1), "moe tc_rows");
                got[c] = gpu.downloadFloats(dy, steps[c] * k * rows);
            }
            assertArrayEquals(Arrays.copyOf(got[0], few * k * rows), got[1], f + ": routed picks of " + few + " tokens with tc_rows 1");
            // activations 4 bytes off a 16-byte boundary: the tensor-core path declines (the skinny one too), and a call
            // with tc_rows 1 gives its rows the numbers of the call above the threshold (the FFMA kernel's)
            long dxo = dev(Arrays.copyOf(x, big * cols + 4)) + 4;
            float[][] off = new float[2][];
            for (int c = 0; c < 2; c++) {
                long dy = zeros(4L * steps[c] * k * rows);
                check(ds4j_moe_matmul_prefill(gpu.ctx(), f.ordinal(), ptr(dt), scaleTable, MemorySegment.NULL, 0, rows, cols, E,
                        ptr(dids), k, steps[c], ptr(dxo), cols, 0, ptr(dy), rows, ptr(scratch), bytes, c == 0 ? 0 : 1), "moe tc_rows, x off");
                off[c] = gpu.downloadFloats(dy, steps[c] * k * rows);
            }
            assertArrayEquals(Arrays.copyOf(off[0], few * k * rows), off[1], f + ": routed picks of " + few
                    + " tokens with tc_rows 1, activations off their alignment (FFMA fallback)");
            for (int p = 0; p < few * k; p++)
                checkMatmul(f + " tc_rows 1 pick " + p, ms[ids[p]], Arrays.copyOfRange(x, p / k * cols, p / k * cols + cols), cols, 1,
                        Arrays.copyOfRange(got[1], p * rows, p * rows + rows), rows);
        }
        // where the tensor-core path declines (fewer than 64 weight rows; F32 weights) a call with tc_rows 1 runs the FFMA
        // kernels as a call above the threshold does, not the skinny ones of its size
        for (WeightMatrix.Format f : new WeightMatrix.Format[]{WeightMatrix.Format.BF16, WeightMatrix.Format.FP8_E4M3_B128,
                WeightMatrix.Format.F32}) {
            int few = f == WeightMatrix.Format.F32 ? 96 : 48;
            WeightMatrix m = randomMatrix(r, f, few, cols, false);
            DeviceMatrix dm = upload(m);
            float[] x = gauss(r, big * cols, 1);
            long dx = dev(x);
            float[] yBig = matmul(dm, dx, cols, big, few);
            for (int S : new int[]{1, 16, 40}) {
                long dy = zeros(4L * S * few);
                check(ds4j_matmul(gpu.ctx(), dm.format(), ptr(dm.data()), ptr(dm.scale()), dm.scaleKind(), dm.rowBase(), few, cols,
                        ptr(dx), cols, ptr(dy), few, S, 1), "matmul tc_rows 1, FFMA fallback");
                assertArrayEquals(Arrays.copyOf(yBig, S * few), gpu.downloadFloats(dy, S * few),
                        f + " " + few + " rows: S=" + S + " with tc_rows 1 vs the rows of a " + big + "-row call");
            }
        }
        WeightMatrix m = randomMatrix(r, WeightMatrix.Format.BF16, 128, 64, false);
        DeviceMatrix dm = upload(m);
        for (int bad : new int[]{-1, TC + 1}) {
            assertEquals(DS4J_ERR_ARG(), ds4j_matmul(gpu.ctx(), dm.format(), ptr(dm.data()), ptr(dm.scale()), dm.scaleKind(), 0, 128, 64,
                    ptr(dev(gauss(r, 64, 1))), 64, ptr(zeros(4L * 128)), 128, 1, bad));
            assertTrue(Gpu.lastError().contains("tc_rows"), Gpu.lastError());
        }
    }

    /**
     * Products whose blocks of 128 weight rows leave most multiprocessors idle run in column parts on the tensor cores
     * (gemm_tc.cpp, k_parts: a 256 x 4096 product in 8 column ranges, 4 groups of 128 rows over 1,024 columns in 2),
     * their partial sums added in order by one more launch than a product without parts: within the reference's
     * tolerance, and a row's result is the same bits whatever S (also with tc_rows 1 at 16 rows, with ldy past the
     * rows, and for the grouped product).
     */
    @Test
    void prefillMatmulInColumnParts() {
        SplittableRandom r = new SplittableRandom(26);
        int rows = 256, cols = 4096, big = 140;
        for (WeightMatrix.Format f : new WeightMatrix.Format[]{WeightMatrix.Format.BF16, WeightMatrix.Format.F16,
                WeightMatrix.Format.FP8_E4M3_B128, WeightMatrix.Format.FP4_E2M1_B32}) {
            WeightMatrix m = randomMatrix(r, f, rows, cols, false);
            DeviceMatrix dm = upload(m);
            float[] x = gauss(r, big * cols, 1);
            long dx = dev(x);
            float[] yBig = matmul(dm, dx, cols, big, rows);
            checkMatmul(f + " " + rows + "x" + cols + " S=" + big, m, x, cols, big, yBig, rows);
            for (int S : new int[]{TC, TC + 5, 130})
                assertArrayEquals(Arrays.copyOf(yBig, S * rows), matmul(dm, dx, cols, S, rows), f + ": S=" + S + " vs S=" + big);
            int few = 16;
            long dy = zeros(4L * few * rows);
            check(ds4j_matmul(gpu.ctx(), dm.format(), ptr(dm.data()), ptr(dm.scale()), dm.scaleKind(), dm.rowBase(), rows, cols,
                    ptr(dx), cols, ptr(dy), rows, few, 1), "matmul tc_rows 1");
            assertArrayEquals(Arrays.copyOf(yBig, few * rows), gpu.downloadFloats(dy, few * rows),
                    f + ": " + few + " rows with tc_rows 1 vs S=" + big);
            int S = TC + 5, ldy = rows + 3;
            float[] strided = matmul(dm, dx, cols, S, ldy);
            for (int t = 0; t < S; t++)
                assertArrayEquals(Arrays.copyOfRange(yBig, t * rows, (t + 1) * rows), Arrays.copyOfRange(strided, t * ldy, t * ldy + rows),
                        f + ": row " + t + " with ldy " + ldy);
            if (f == WeightMatrix.Format.FP8_E4M3_B128) {
                // the parts ran: one launch more (their sum) than for a product of 34 row blocks, which takes none
                DeviceMatrix whole = upload(randomMatrix(r, f, 34 * 128, 512, false));
                long dxw = dev(gauss(r, TC * 512, 1));
                long k0 = gpu.launchCounts()[0];
                matmul(dm, dx, cols, TC, rows);
                long k1 = gpu.launchCounts()[0];
                matmul(whole, dxw, 512, TC, 34 * 128);
                long k2 = gpu.launchCounts()[0];
                assertEquals("0".equals(System.getenv("DS4J_TC_KSTEPS")) ? 0 : 1, (k1 - k0) - (k2 - k1),
                        "kernel launches of a product in parts minus those of one without");
            }
        }
        checkGrouped(r, WeightMatrix.Format.FP8_E4M3_B128, 4, 128, 1024, TC + 13, "FP8 4 groups of 128 x 1024 (column parts), group ");
        WeightMatrix g = randomMatrix(r, WeightMatrix.Format.FP8_E4M3_B128, 4 * 128, 1024, false);
        DeviceMatrix dg = upload(g);
        int ldx = 4 * 1024;
        long dx = dev(gauss(r, 130 * ldx, 1));
        float[][] ys = new float[2][];
        int[] steps = {TC + 13, 130};
        for (int c = 0; c < 2; c++) {
            long dy = zeros(4L * steps[c] * 4 * 128);
            check(ds4j_matmul_grouped(gpu.ctx(), dg.format(), ptr(dg.data()), ptr(dg.scale()), dg.scaleKind(), 0, 4 * 128, 1024, 128,
                    1024, ptr(dx), ldx, ptr(dy), 4 * 128, steps[c], 0), "matmul_grouped");
            ys[c] = gpu.downloadFloats(dy, steps[c] * 4 * 128);
        }
        assertArrayEquals(ys[0], Arrays.copyOf(ys[1], ys[0].length), "grouped in column parts: " + steps[0] + " rows vs " + steps[1]);
    }

    @Test
    void prefillGroupedMatmul() {
        // groups of 128 rows (whole tiles) and of 96 (a group's last tile is partial) read their own slices of x
        SplittableRandom r = new SplittableRandom(22);
        int G = 3, gw = 64, S = TC + 13;
        for (int R : new int[]{128, 96})
            for (WeightMatrix.Format f : new WeightMatrix.Format[]{WeightMatrix.Format.BF16, WeightMatrix.Format.FP8_E4M3_B128,
                    WeightMatrix.Format.FP4_E2M1_B32})
                checkGrouped(r, f, G, R, gw, S, f + " groups of " + R + ", S=" + S + ", group ");
    }

    /** Picks of S tokens over E experts, k distinct each: expert `hot` in 4 of 5 tokens (several tiles), the last two never. */
    static int[] unevenIds(SplittableRandom r, int S, int E, int k, int hot) {
        int[] ids = new int[S * k];
        for (int s = 0; s < S; s++) {
            List<Integer> pool = new ArrayList<>();
            for (int e = 0; e < E - 2; e++) pool.add(e);
            java.util.Collections.shuffle(pool, new java.util.Random(r.nextLong()));
            if (s % 5 != 4) {
                pool.remove(Integer.valueOf(hot));
                pool.addFirst(hot);
            }
            for (int j = 0; j < k; j++) ids[s * k + j] = pool.get(j);
        }
        return ids;
    }

    @Test
    void prefillMoeGroupsPicksByExpert() {
        SplittableRandom r = new SplittableRandom(23);
        int E = 7, k = 3, S = TC + 18, rows = 72, cols = 128, hot = 2;
        for (WeightMatrix.Format f : new WeightMatrix.Format[]{WeightMatrix.Format.BF16, WeightMatrix.Format.F16,
                WeightMatrix.Format.FP8_E4M3_B128, WeightMatrix.Format.FP4_E2M1_B32}) {
            WeightMatrix[] ms = new WeightMatrix[E];
            long[] data = new long[E], scale = new long[E];
            int[] rowBase = new int[E];
            boolean stacked = f == WeightMatrix.Format.FP8_E4M3_B128;
            if (stacked) {
                // experts as row views of one stacked matrix: 72-row views start inside 128-row scale blocks
                WeightMatrix all = randomMatrix(r, f, E * rows, cols, false);
                DeviceMatrix dall = upload(all);
                for (int e = 0; e < E; e++) {
                    ms[e] = all.rowRange(e * rows, (e + 1) * rows);
                    DeviceMatrix d = dall.rowRange(e * rows, (e + 1) * rows);
                    data[e] = d.data();
                    scale[e] = d.scale();
                    rowBase[e] = d.rowBase();
                }
            } else {
                for (int e = 0; e < E; e++) {
                    ms[e] = randomMatrix(r, f, rows, cols, false);
                    DeviceMatrix d = upload(ms[e]);
                    data[e] = d.data();
                    scale[e] = d.scale();
                }
                // expert 1 stored 8 bytes past a 16-byte boundary: the kernels must not assume aligned expert storage
                long p = gpu.malloc(ms[1].data.byteSize() + 16, "test");
                allocs.add(p);
                gpu.upload(p + 8, ms[1].data);
                data[1] = p + 8;
            }
            long dt = gpu.malloc(8L * E, "t"), st = gpu.malloc(8L * E, "t"), rt = dev(rowBase);
            allocs.add(dt);
            allocs.add(st);
            gpu.upload(dt, data);
            gpu.upload(st, scale);
            MemorySegment scaleTable = f.ordinal() >= WeightMatrix.Format.FP8_E4M3_B128.ordinal() ? ptr(st) : MemorySegment.NULL;
            MemorySegment rowTable = stacked ? ptr(rt) : MemorySegment.NULL;
            for (boolean perPick : new boolean[]{false, true})
                for (int steps : new int[]{S, TC - 1}) {
                    int P = steps * k, xr = perPick ? P : steps;
                    int[] ids = unevenIds(r, steps, E, k, hot);
                    float[] x = gauss(r, xr * cols, 1);
                    long dx = dev(x), dids = dev(ids), dy = zeros(4L * P * rows), dy0 = zeros(4L * P * rows);
                    long bytes = 4L * (P + 3L * E + 1), scratch = zeros(bytes);
                    check(ds4j_moe_matmul_prefill(gpu.ctx(), f.ordinal(), ptr(dt), scaleTable, rowTable, 0, rows, cols, E, ptr(dids), k,
                            steps, ptr(dx), cols, perPick ? 1 : 0, ptr(dy), rows, ptr(scratch), bytes, 0), "moe_matmul_prefill");
                    float[] y = gpu.downloadFloats(dy, P * rows);
                    for (int p = 0; p < P; p++) {
                        float[] xs = Arrays.copyOfRange(x, (perPick ? p : p / k) * cols, (perPick ? p : p / k) * cols + cols);
                        checkMatmul(f + " S=" + steps + " expert " + ids[p] + " pick " + p + (perPick ? " per pick" : ""), ms[ids[p]], xs,
                                cols, 1, Arrays.copyOfRange(y, p * rows, p * rows + rows), rows);
                    }
                    if (steps < TC) {
                        // below the threshold the prefill entry is the per-pick kernel
                        check(ds4j_moe_matmul(gpu.ctx(), f.ordinal(), ptr(dt), scaleTable, rowTable, 0, rows, cols, ptr(dids), k, steps,
                                ptr(dx), cols, perPick ? 1 : 0, ptr(dy0), rows), "moe_matmul");
                        assertArrayEquals(gpu.downloadFloats(dy0, P * rows), y, f + ": S=" + steps + " prefill entry vs per-pick kernel");
                    }
                }
            // too little scratch is a clear error, not a fault
            int[] ids = unevenIds(r, S, E, k, hot);
            long small = zeros(64);
            assertEquals(DS4J_ERR_ARG(), ds4j_moe_matmul_prefill(gpu.ctx(), f.ordinal(), ptr(dt), scaleTable, rowTable, 0, rows, cols, E,
                    ptr(dev(ids)), k, S, ptr(dev(gauss(r, S * cols, 1))), cols, 0, ptr(zeros(4L * S * k * rows)), rows, ptr(small), 64, 0));
            assertTrue(Gpu.lastError().contains("scratch"), Gpu.lastError());
        }
    }

    @Test
    void indexerTensorCoresMatchReference() {
        SplittableRandom r = new SplittableRandom(24);
        // {HI, dI, N0, S, m, K}: several blocks of 512 keys; queries with avail <= K (left untouched) and above;
        // HI 48 (part of a block's rows unused); HI 8 is not a multiple of 16 (the FFMA kernel runs)
        for (int[] cfg : new int[][]{{16, 64, 300, 40, 4, 32}, {64, 128, 4000, 33, 4, 128}, {48, 32, 600, 35, 4, 120},
                {16, 16, 2100, 70, 1, 2110}, {8, 16, 200, 40, 4, 16}}) {
            int HI = cfg[0], dI = cfg[1], N0 = cfg[2], S = cfg[3], m = cfg[4], K = cfg[5];
            int maxAvail = (N0 + S) / m, ld = maxAvail + 5;
            float[] qi = new float[S * HI * dI];
            for (int row = 0; row < S * HI; row++) {
                // rows of very different magnitudes: each is scaled into the F16 range on its own
                double mag = row % 3 == 0 ? 1e-3 : row % 3 == 1 ? 1 : 300;
                for (int i = 0; i < dI; i++) qi[row * dI + i] = (float) (r.nextGaussian() * mag);
            }
            float[] wt = gauss(r, S * HI, 1);
            short[] keys = new short[maxAvail * dI];
            for (int i = 0; i < keys.length; i++) keys[i] = Float.floatToFloat16((float) r.nextGaussian());
            long dq = dev(qi), dw = dev(wt), dk = gpu.malloc(2L * keys.length, "test");
            allocs.add(dk);
            gpu.upload(dk, keys);
            long a = zeros(4L * S * ld), b = zeros(4L * S * ld);
            gpu.memset(a, 0xFF, 4L * S * ld); // NaN pattern: entries that must stay untouched
            gpu.memset(b, 0xFF, 4L * S * ld);
            float ws = (float) (1.0 / Math.sqrt(HI)), ss = (float) (1.0 / Math.sqrt(dI));
            check(ds4j_indexer_scores_tc(gpu.ctx(), ptr(dq), ptr(dw), ptr(dk), N0, S, m, HI, dI, K, ws, ss, ptr(a), ld), "indexer_scores_tc");
            check(ds4j_indexer_scores(gpu.ctx(), ptr(dq), ptr(dw), ptr(dk), N0, S, m, HI, dI, K, ws, ss, ptr(b), ld), "indexer_scores");
            float[] tc = gpu.downloadFloats(a, S * ld), ffma = gpu.downloadFloats(b, S * ld);
            double worst = 0;
            int scored = 0;
            for (int s = 0; s < S; s++) {
                int avail = (N0 + s + 1) / m;
                for (int e = 0; e < ld; e++) {
                    int i = s * ld + e;
                    if (avail <= K || e >= avail) {
                        assertEquals(-1, Float.floatToRawIntBits(tc[i]), "untouched s=" + s + " e=" + e + " " + Arrays.toString(cfg));
                        continue;
                    }
                    double ref = 0, mag = 0;
                    for (int h = 0; h < HI; h++) {
                        double d = 0, dm = 0;
                        for (int c = 0; c < dI; c++) {
                            double p = (double) qi[(s * HI + h) * dI + c] * Float.float16ToFloat(keys[e * dI + c]);
                            d += p;
                            dm += Math.abs(p);
                        }
                        double w = (double) (wt[s * HI + h] * ws);
                        ref += w * Math.max(d, 0) * ss;
                        mag += Math.abs(w) * dm * ss;
                    }
                    scored++;
                    double err = Math.abs(tc[i] - ref) / (mag + 1e-30);
                    worst = Math.max(worst, err);
                    assertTrue(err < 1e-5, Arrays.toString(cfg) + " s=" + s + " e=" + e + ": tensor cores " + tc[i] + " vs " + ref);
                    assertTrue(Math.abs(ffma[i] - ref) / (mag + 1e-30) < 1e-5, "FFMA kernel s=" + s + " e=" + e);
                }
            }
            if (HI % 16 != 0) assertArrayEquals(ffma, tc, "HI " + HI + ": the FFMA kernel runs");
            System.out.printf("indexer scores HI %d dI %d N0 %d S %d: %d scored, max relative error %.2e%n", HI, dI, N0, S, scored, worst);
            assertTrue(scored > 0, "some queries scored");
        }
    }

    // ------------------------------------------------------------------------------------------------------------
    // decode and verify steps (S below DS4J_TC_MIN_ROWS): the skinny tensor-core products where the device has them

    static final WeightMatrix.Format[] TC_FORMATS = {WeightMatrix.Format.BF16, WeightMatrix.Format.F16,
            WeightMatrix.Format.FP8_E4M3_B128, WeightMatrix.Format.FP4_E2M1_B32};

    /** Row s of y [S, ldy] computed alone (S = 1, x from row s) must equal row s of the S-row step bit for bit. */
    static void assertRowsAlone(String what, DeviceMatrix dm, long dx, int ldx, int S, int ldy, float[] y) {
        for (int s : new int[]{0, S / 2, S - 1}) {
            float[] alone = matmul(dm, dx + 4L * s * ldx, ldx, 1, ldy);
            assertArrayEquals(Arrays.copyOfRange(y, s * ldy, (s + 1) * ldy), alone, what + ": row " + s + " alone vs in S=" + S);
        }
    }

    @Test
    void skinnyMatmulEveryFormatAndRowCount() {
        // 75 rows (not whole tiles of 32 or 64), columns not whole groups of four 16-byte chunks, every pass width (up to
        // 64 rows in one pass, whose warps hold other rows than the narrower passes': still the same bits per row)
        SplittableRandom r = new SplittableRandom(31);
        int rows = 75;
        for (WeightMatrix.Format f : WeightMatrix.Format.values()) {
            int cols = f == WeightMatrix.Format.FP4_E2M1_B32 ? 160 : 80;
            WeightMatrix m = randomMatrix(r, f, rows, cols, false);
            DeviceMatrix dm = upload(m);
            float[] x = gauss(r, 64 * cols, 1);
            long dx = dev(x);
            for (int S : new int[]{1, 2, 5, 8, 9, 17, 31, 32, 33, 47, 64}) {
                float[] y = matmul(dm, dx, cols, S, rows);
                checkMatmul(f + " " + rows + "x" + cols + " S=" + S, m, x, cols, S, y, rows);
                if (S >= 17) assertRowsAlone(f + " S=" + S, dm, dx, cols, S, rows, y);
            }
        }
    }

    @Test
    void skinnyMatmulFewRowsManyColumnsAndViews() {
        // few rows of many columns (several warps per row tile, summed in a fixed order); an FP8 row view whose rows
        // start inside the 128 x 128 scale grid, with strided activations and outputs
        SplittableRandom r = new SplittableRandom(32);
        for (WeightMatrix.Format f : TC_FORMATS) {
            int rows = 20, cols = 4096;
            WeightMatrix m = randomMatrix(r, f, rows, cols, false);
            DeviceMatrix dm = upload(m);
            float[] x = gauss(r, 64 * cols, 1);
            long dx = dev(x);
            for (int S : new int[]{1, 17, 64}) {
                float[] y = matmul(dm, dx, cols, S, rows);
                checkMatmul(f + " 20x4096 S=" + S, m, x, cols, S, y, rows);
                if (S > 1) assertRowsAlone(f + " 20x4096 S=" + S, dm, dx, cols, S, rows, y);
            }
            WeightMatrix big = randomMatrix(r, f, 300, 256, false);
            DeviceMatrix dbig = upload(big);
            int from = 130, to = 260, S = 5, ldx = 256 + 8, ldy = (to - from) + 3;
            float[] xs = gauss(r, S * ldx, 1);
            checkMatmul(f + " rows 130..260 ldx+8 S=" + S, big.rowRange(from, to), xs, ldx, S,
                    matmul(dbig.rowRange(from, to), dev(xs), ldx, S, ldy), ldy);
        }
    }

    @Test
    void skinnyGroupedMatmul() {
        // groups of 40 rows: a group's last tile is partial and the next group's rows start a new tile
        SplittableRandom r = new SplittableRandom(33);
        for (WeightMatrix.Format f : TC_FORMATS)
            for (int S : new int[]{1, 9, 64})
                checkGrouped(r, f, 3, 40, 128, S, f + " groups of 40, S=" + S + ", group ");
    }

    @Test
    void skinnyMatmulManyRowTiles() {
        // enough row tiles for the kernel to give each warp twice the m-tiles (2 x 16 rows, FP4 4 x 16), plus a
        // partial last tile; routed experts of as many rows (6 picks per token)
        SplittableRandom r = new SplittableRandom(35);
        for (WeightMatrix.Format f : TC_FORMATS) {
            int rows = 264 * (f == WeightMatrix.Format.FP4_E2M1_B32 ? 64 : 32) + 5, cols = 128;
            WeightMatrix m = randomMatrix(r, f, rows, cols, false);
            DeviceMatrix dm = upload(m);
            float[] x = gauss(r, 64 * cols, 1);
            long dx = dev(x);
            for (int S : new int[]{1, 9, 64}) {
                float[] y = matmul(dm, dx, cols, S, rows);
                checkMatmul(f + " " + rows + "x" + cols + " S=" + S, m, x, cols, S, y, rows);
                if (S > 1) assertRowsAlone(f + " " + rows + " rows S=" + S, dm, dx, cols, S, rows, y);
            }
        }
        int E = 8, k = 6, S = 5, rows = 2900, cols = 64;
        WeightMatrix.Format f = WeightMatrix.Format.FP4_E2M1_B32;
        Experts xs = uploadExperts(r, f, E, rows, cols);
        WeightMatrix[] ms = xs.ms();
        long dt = xs.dataTable(), st = xs.scaleTable();
        int[] ids = new int[S * k];
        for (int p = 0; p < S * k; p++) ids[p] = (p / k * 3 + p % k) % (E - 1);
        float[] x = gauss(r, S * cols, 1);
        long dx = dev(x), dids = dev(ids), dy = zeros(4L * S * k * rows);
        check(ds4j_moe_matmul(gpu.ctx(), f.ordinal(), ptr(dt), ptr(st), MemorySegment.NULL, 0, rows, cols, ptr(dids), k, S, ptr(dx),
                cols, 0, ptr(dy), rows), "moe_matmul");
        float[] y = gpu.downloadFloats(dy, S * k * rows);
        for (int p = 0; p < S * k; p++)
            checkMatmul("FP4 experts of " + rows + " rows, pick " + p, ms[ids[p]], Arrays.copyOfRange(x, p / k * cols, p / k * cols + cols),
                    cols, 1, Arrays.copyOfRange(y, p * rows, (p + 1) * rows), rows);
        long dy1 = zeros(4L * k * rows);
        check(ds4j_moe_matmul(gpu.ctx(), f.ordinal(), ptr(dt), ptr(st), MemorySegment.NULL, 0, rows, cols, ptr(dids + 4L * 2 * k), k, 1,
                ptr(dx + 4L * 2 * cols), cols, 0, ptr(dy1), rows), "moe_matmul alone");
        assertArrayEquals(Arrays.copyOfRange(y, 2 * k * rows, 3 * k * rows), gpu.downloadFloats(dy1, k * rows), "token 2 alone vs in S=5");
    }

    @Test
    void skinnyMoeReadsEachExpertOncePerStep() {
        // picks with an expert twice in one token, experts never picked, expert 1 stored off a 16-byte boundary, expert
        // 2 in host memory (null table entry: its pick rows stay as they were); every pick against the reference, the
        // picks of tokens 0 and S-1 computed alone (S = 1) equal to theirs in the S-row step, and the step with the
        // number of experts given (ds4j_moe_matmul_prefill below DS4J_TC_MIN_ROWS) equal to it, bit for bit
        SplittableRandom r = new SplittableRandom(34);
        int E = 6, k = 3, rows = 72;
        for (WeightMatrix.Format f : TC_FORMATS) {
            int cols = f == WeightMatrix.Format.FP4_E2M1_B32 ? 256 : 128;
            ExpertMatrices em = expertMatrices(r, f, E, rows, cols);
            WeightMatrix[] ms = em.ms();
            long[] data = em.data();
            long p1 = gpu.malloc(ms[1].data.byteSize() + 16, "test");
            allocs.add(p1);
            gpu.upload(p1 + 8, ms[1].data);
            data[1] = p1 + 8;
            data[2] = 0;
            long dt = table(data), st = table(em.scale());
            MemorySegment scaleTable = f.ordinal() >= WeightMatrix.Format.FP8_E4M3_B128.ordinal() ? ptr(st) : MemorySegment.NULL;
            for (boolean perPick : new boolean[]{false, true})
                for (int S : new int[]{1, 5, 17, 31, 40, 64}) {
                    int P = S * k, xr = perPick ? P : S;
                    int[] ids = new int[P];
                    for (int s = 0; s < S; s++)
                        for (int j = 0; j < k; j++) ids[s * k + j] = s % 3 == 1 && j == 1 ? ids[s * k] : (s * 7 + j * 3) % (E - 1);
                    float[] x = gauss(r, xr * cols, 1);
                    long dx = dev(x), dids = dev(ids), dy = dev(filled(P * rows, -777f));
                    check(ds4j_moe_matmul(gpu.ctx(), f.ordinal(), ptr(dt), scaleTable, MemorySegment.NULL, 0, rows, cols, ptr(dids), k,
                            S, ptr(dx), cols, perPick ? 1 : 0, ptr(dy), rows), "moe_matmul");
                    float[] y = gpu.downloadFloats(dy, P * rows);
                    // with the number of experts known (the backend's call): one block per picked expert instead of
                    // one per pick, the same bits
                    long dyE = dev(filled(P * rows, -777f)), scratch = zeros(4L * (P + 3L * E + 1));
                    check(ds4j_moe_matmul_prefill(gpu.ctx(), f.ordinal(), ptr(dt), scaleTable, MemorySegment.NULL, 0, rows, cols, E,
                            ptr(dids), k, S, ptr(dx), cols, perPick ? 1 : 0, ptr(dyE), rows, ptr(scratch), 4L * (P + 3L * E + 1), 0),
                            "moe_matmul_prefill");
                    assertArrayEquals(y, gpu.downloadFloats(dyE, P * rows), f + " S=" + S + (perPick ? " per pick" : "")
                            + ": a grid over distinct experts vs over picks");
                    for (int p = 0; p < P; p++) {
                        float[] yp = Arrays.copyOfRange(y, p * rows, p * rows + rows);
                        if (ids[p] == 2) {
                            assertArrayEquals(filled(rows, -777f), yp, f + ": pick " + p + " of the host expert untouched");
                            continue;
                        }
                        int xrow = perPick ? p : p / k;
                        checkMatmul(f + " S=" + S + " expert " + ids[p] + " pick " + p + (perPick ? " per pick" : ""), ms[ids[p]],
                                Arrays.copyOfRange(x, xrow * cols, xrow * cols + cols), cols, 1, yp, rows);
                    }
                    for (int s : new int[]{0, S - 1}) {
                        long dy1 = dev(filled(k * rows, -777f));
                        check(ds4j_moe_matmul(gpu.ctx(), f.ordinal(), ptr(dt), scaleTable, MemorySegment.NULL, 0, rows, cols,
                                ptr(dids + 4L * s * k), k, 1, ptr(dx + 4L * (perPick ? s * k : s) * cols), cols, perPick ? 1 : 0, ptr(dy1),
                                rows), "moe_matmul alone");
                        assertArrayEquals(Arrays.copyOfRange(y, s * k * rows, (s + 1) * k * rows), gpu.downloadFloats(dy1, k * rows),
                                f + ": token " + s + " alone vs in S=" + S + (perPick ? " per pick" : ""));
                    }
                }
        }
    }

    @Test
    void skinnyMoeAtTheModelsShapeTakesSeveralRowGroupsPerBlock() {
        // V4-Flash's routed w1 shape (2048 x 4096 FP4) with 16 experts and 6 picks a token: a one-row step launches few
        // expert blocks (6 x 16 row groups x 8 column partitions, two row groups per block by default), a five-row step
        // one block per picked expert (16 x 16 x 8, four per block); every pick against the reference, and the picks of
        // a token alone, in the five-row step and with the grid over picks all bit-identical; for picks spread over all
        // experts and for picks with one expert taken twice by every token
        SplittableRandom r = new SplittableRandom(36);
        int E = 16, k = 6, rows = 2048, cols = 4096, S = 5, P = S * k;
        WeightMatrix.Format f = WeightMatrix.Format.FP4_E2M1_B32;
        Experts xs = uploadExperts(r, f, E, rows, cols);
        WeightMatrix[] ms = xs.ms();
        long dt = xs.dataTable(), st = xs.scaleTable();
        int[] spread = new int[P];
        for (int p = 0; p < P; p++) spread[p] = (p / k * 5 + p % k * 3) % E;  // 6 distinct a token, every expert in the step
        // expert 7 also takes picks 4 and 5 of every token: 11 picks, two passes of 8, so each row group of its blocks
        // after the first stages x again for each pass; experts 1 and 12 unpicked, so two expert blocks leave
        int[] twice = spread.clone();
        for (int s = 0; s < S; s++) twice[s * k + 4] = twice[s * k + 5] = 7;
        float[] x = gauss(r, S * cols, 1);
        long dx = dev(x), scratch = zeros(4L * (P + 3L * E + 1));
        for (int[] ids : new int[][]{spread, twice}) {
            String what = ids == spread ? "spread picks" : "expert 7 picked 11 times";
            long dids = dev(ids);
            java.util.function.BiFunction<Integer, Boolean, float[]> step = (n, knownE) -> {
                int first = n == S ? 0 : 2;  // one row: token 2
                long dy = dev(filled(n * k * rows, -777f));
                if (knownE)
                    check(ds4j_moe_matmul_prefill(gpu.ctx(), f.ordinal(), ptr(dt), ptr(st), MemorySegment.NULL, 0, rows, cols, E,
                            ptr(dids + 4L * first * k), k, n, ptr(dx + 4L * first * cols), cols, 0, ptr(dy), rows, ptr(scratch),
                            4L * (P + 3L * E + 1), 0), "moe_matmul_prefill");
                else
                    check(ds4j_moe_matmul(gpu.ctx(), f.ordinal(), ptr(dt), ptr(st), MemorySegment.NULL, 0, rows, cols,
                            ptr(dids + 4L * first * k), k, n, ptr(dx + 4L * first * cols), cols, 0, ptr(dy), rows), "moe_matmul");
                return gpu.downloadFloats(dy, n * k * rows);
            };
            float[] y = step.apply(S, true);
            for (int p = 0; p < P; p++)
                checkMatmul(what + ": FP4 2048x4096 experts, pick " + p + " (expert " + ids[p] + ")", ms[ids[p]],
                        Arrays.copyOfRange(x, p / k * cols, p / k * cols + cols), cols, 1, Arrays.copyOfRange(y, p * rows, (p + 1) * rows),
                        rows);
            assertArrayEquals(y, step.apply(S, false), what + ": grid over distinct experts vs over picks");
            assertArrayEquals(Arrays.copyOfRange(y, 2 * k * rows, 3 * k * rows), step.apply(1, true), what + ": token 2 alone vs in the step");
        }
    }

    /** E random expert matrices of one format on the device, with their data and scale addresses (host arrays). */
    record ExpertMatrices(WeightMatrix[] ms, long[] data, long[] scale) {}

    static ExpertMatrices expertMatrices(SplittableRandom r, WeightMatrix.Format f, int E, int rows, int cols) {
        WeightMatrix[] ms = new WeightMatrix[E];
        long[] data = new long[E], scale = new long[E];
        for (int e = 0; e < E; e++) {
            ms[e] = randomMatrix(r, f, rows, cols, false);
            DeviceMatrix d = upload(ms[e]);
            data[e] = d.data();
            scale[e] = d.scale();
        }
        return new ExpertMatrices(ms, data, scale);
    }

    /** A device table of addresses (8 bytes each), as the moe entry points take them. */
    static long table(long[] addresses) {
        long t = dev(new float[2 * addresses.length]);
        gpu.upload(t, addresses);
        return t;
    }

    /** E random expert matrices of one format on the device, with the device tables of their data and scale addresses. */
    /** Planes a product left (ds4j_parts_end): where, how many, how far apart (floats). */
    record Planes(long at, int n, long stride) {}

    static Planes partsEnd() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment at = a.allocate(ValueLayout.ADDRESS), n = a.allocate(ValueLayout.JAVA_INT), st = a.allocate(ValueLayout.JAVA_LONG);
            check(ds4j_parts_end(gpu.ctx(), at, n, st), "parts end");
            return new Planes(at.get(ValueLayout.ADDRESS, 0).address(), n.get(ValueLayout.JAVA_INT, 0), st.get(ValueLayout.JAVA_LONG, 0));
        }
    }

    /** A copy of planes p (they live in the context's scratch until its next column-split product). */
    static Planes kept(Planes p, long n) {
        long to = zeros(4L * p.n() * p.stride());
        gpu.copy(to, p.at(), 4L * p.n() * p.stride());
        assertTrue(p.stride() >= n, "planes " + p.stride() + " floats apart hold " + n + " values");
        return new Planes(to, p.n(), p.stride());
    }

    /**
     * Partial sums left to the SwiGLU (ds4j_parts_begin / ds4j_parts_end, ds4j_swiglu_parts): routed FP4 experts at
     * V4's w1 / w3 shape (2,048 x 4,096, 16 experts, 6 picks a token) at 1 and 5 rows, and a dense FP8 2,048 x 4,096
     * product at 1 row, leave planes (several: their columns were split); the SwiGLU of the planes gives the bits of
     * the SwiGLU of the products' own summed results. After ds4j_parts_end nothing is armed: a product sums into y,
     * and an end with no product in between reports no planes.
     */
    @Test
    void partialSumsLeftToTheSwigluGiveTheSummedProductsBits() {
        SplittableRandom r = new SplittableRandom(53);
        final int E = 16, k = 6, rows = 2048, cols = 4096;
        final float lim = 10f;
        WeightMatrix.Format f4 = WeightMatrix.Format.FP4_E2M1_B32;
        Experts w1 = uploadExperts(r, f4, E, rows, cols), w3 = uploadExperts(r, f4, E, rows, cols);
        for (int S : new int[]{1, 5}) {
            int[] ids = new int[S * k];
            for (int s = 0; s < S; s++)
                for (int j = 0; j < k; j++) ids[s * k + j] = (s * 5 + j * 3) % E;
            long dx = dev(gauss(r, S * cols, 1)), dids = dev(ids);
            final long n = (long) S * k * rows;
            long g = zeros(4 * n), u = zeros(4 * n), want = zeros(4 * n), got = zeros(4 * n);
            check(ds4j_moe_matmul(gpu.ctx(), f4.ordinal(), ptr(w1.dataTable()), ptr(w1.scaleTable()), MemorySegment.NULL, 0, rows, cols,
                    ptr(dids), k, S, ptr(dx), cols, 0, ptr(g), rows), "w1 summed");
            check(ds4j_moe_matmul(gpu.ctx(), f4.ordinal(), ptr(w3.dataTable()), ptr(w3.scaleTable()), MemorySegment.NULL, 0, rows, cols,
                    ptr(dids), k, S, ptr(dx), cols, 0, ptr(u), rows), "w3 summed");
            check(ds4j_swiglu(gpu.ctx(), ptr(g), ptr(u), ptr(want), n, lim), "swiglu");
            long g2 = zeros(4 * n), u2 = zeros(4 * n);
            check(ds4j_parts_begin(gpu.ctx()), "parts begin");
            check(ds4j_moe_matmul(gpu.ctx(), f4.ordinal(), ptr(w1.dataTable()), ptr(w1.scaleTable()), MemorySegment.NULL, 0, rows, cols,
                    ptr(dids), k, S, ptr(dx), cols, 0, ptr(g2), rows), "w1 leaving its partials");
            Planes pg = kept(partsEnd(), n);
            check(ds4j_parts_begin(gpu.ctx()), "parts begin");
            check(ds4j_moe_matmul(gpu.ctx(), f4.ordinal(), ptr(w3.dataTable()), ptr(w3.scaleTable()), MemorySegment.NULL, 0, rows, cols,
                    ptr(dids), k, S, ptr(dx), cols, 0, ptr(u2), rows), "w3 leaving its partials");
            Planes pu = partsEnd();
            assertTrue(pg.n() > 1 && pu.n() > 1, "S " + S + ": the routed products left " + pg.n() + " / " + pu.n() + " planes");
            check(ds4j_swiglu_parts(gpu.ctx(), ptr(pg.at()), pg.n(), pg.stride(), ptr(pu.at()), pu.n(), pu.stride(), ptr(got), n, lim),
                    "swiglu_parts");
            GpuFusedOpsTest.sameBits(gpu.downloadFloats(want, (int) n), gpu.downloadFloats(got, (int) n), "routed w1 / w3 at S " + S);
            // nothing armed any more: the same product sums into y
            check(ds4j_moe_matmul(gpu.ctx(), f4.ordinal(), ptr(w1.dataTable()), ptr(w1.scaleTable()), MemorySegment.NULL, 0, rows, cols,
                    ptr(dids), k, S, ptr(dx), cols, 0, ptr(g2), rows), "w1 after the end");
            GpuFusedOpsTest.sameBits(gpu.downloadFloats(g, (int) n), gpu.downloadFloats(g2, (int) n), "w1 summed after ds4j_parts_end, S " + S);
        }
        // a dense FP8 product's planes with a plain u (one plane)
        WeightMatrix m = randomMatrix(r, WeightMatrix.Format.FP8_E4M3_B128, rows, cols, false);
        DeviceMatrix dm = upload(m);
        long dx = dev(gauss(r, cols, 1)), du = dev(gauss(r, rows, 2));
        long y = zeros(4L * rows), want = zeros(4L * rows), got = zeros(4L * rows);
        check(ds4j_matmul(gpu.ctx(), dm.format(), ptr(dm.data()), ptr(dm.scale()), dm.scaleKind(), dm.rowBase(), rows, cols, ptr(dx), cols,
                ptr(y), rows, 1, 0), "dense summed");
        check(ds4j_swiglu(gpu.ctx(), ptr(y), ptr(du), ptr(want), rows, lim), "swiglu");
        check(ds4j_parts_begin(gpu.ctx()), "parts begin");
        check(ds4j_matmul(gpu.ctx(), dm.format(), ptr(dm.data()), ptr(dm.scale()), dm.scaleKind(), dm.rowBase(), rows, cols, ptr(dx), cols,
                ptr(zeros(4L * rows)), rows, 1, 0), "dense leaving its partials");
        Planes p = partsEnd();
        assertTrue(p.n() > 1, "the dense product left " + p.n() + " planes");
        check(ds4j_swiglu_parts(gpu.ctx(), ptr(p.at()), p.n(), p.stride(), ptr(du), 1, 0, ptr(got), rows, lim), "swiglu_parts");
        GpuFusedOpsTest.sameBits(gpu.downloadFloats(want, rows), gpu.downloadFloats(got, rows), "dense FP8 with a plain u");
        check(ds4j_parts_begin(gpu.ctx()), "parts begin");
        assertEquals(0, partsEnd().n(), "no product between begin and end: no planes");
    }

    record Experts(WeightMatrix[] ms, long dataTable, long scaleTable) {}

    static Experts uploadExperts(SplittableRandom r, WeightMatrix.Format f, int E, int rows, int cols) {
        ExpertMatrices m = expertMatrices(r, f, E, rows, cols);
        return new Experts(m.ms(), table(m.data()), table(m.scale()));
    }

    static float[] filled(int n, float v) {
        float[] a = new float[n];
        Arrays.fill(a, v);
        return a;
    }
}
