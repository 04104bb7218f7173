package io.ds4j.kernels;

import io.ds4j.model.DType;
import io.ds4j.model.WeightMatrix;
import io.ds4j.model.WeightMatrix.Format;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

class GemmTest {
    private static final Arena ARENA = Arena.ofAuto();

    // ------------------------------------------------------------ random matrices

    static WeightMatrix random(Format f, int rows, int cols, long seed) {
        return random(f, rows, cols, seed, DType.F8_E8M0);
    }

    static WeightMatrix random(Format f, int rows, int cols, long seed, DType fp8ScaleType) {
        SplittableRandom rnd = new SplittableRandom(seed);
        WeightMatrix shape = new WeightMatrix(f, rows, cols, MemorySegment.NULL, null, null, 0, "t");
        long bytes = shape.rowBytes() * rows;
        MemorySegment d = ARENA.allocate(Math.max(1, bytes), 64);
        switch (f) {
            case F32 -> {
                for (long i = 0; i < (long) rows * cols; i++) d.setAtIndex(WeightMatrix.F32_LE, i, (float) rnd.nextDouble(-1, 1));
            }
            case F16 -> {
                for (long i = 0; i < (long) rows * cols; i++) {
                    int h;
                    do h = rnd.nextInt(1 << 16); while ((h & 0x7C00) == 0x7C00); // no Inf/NaN; subnormals included
                    d.setAtIndex(WeightMatrix.I16_LE, i, (short) h);
                }
            }
            case BF16 -> {
                for (long i = 0; i < (long) rows * cols; i++) {
                    int e = rnd.nextInt(16) == 0 ? 0 : 115 + rnd.nextInt(20);
                    int h = (rnd.nextInt(2) << 15) | (e << 7) | rnd.nextInt(128);
                    d.setAtIndex(WeightMatrix.I16_LE, i, (short) h);
                }
            }
            case FP8_E4M3_B128 -> {
                for (long i = 0; i < bytes; i++) {
                    int b;
                    do b = rnd.nextInt(256); while ((b & 0x7F) == 0x7F);
                    d.set(ValueLayout.JAVA_BYTE, i, (byte) b);
                }
            }
            case FP4_E2M1_B32 -> {
                for (long i = 0; i < bytes; i++) d.set(ValueLayout.JAVA_BYTE, i, (byte) rnd.nextInt(256));
            }
        }
        return switch (f) {
            case FP8_E4M3_B128 -> {
                long n = (long) ((rows + 127) / 128) * ((cols + 127) / 128);
                MemorySegment sc;
                if (fp8ScaleType == DType.F32) {
                    sc = ARENA.allocate(n * 4, 4);
                    for (long i = 0; i < n; i++) sc.setAtIndex(WeightMatrix.F32_LE, i, (float) rnd.nextDouble(1e-4, 4));
                } else {
                    sc = ARENA.allocate(n);
                    for (long i = 0; i < n; i++) sc.set(ValueLayout.JAVA_BYTE, i, (byte) (110 + rnd.nextInt(25)));
                }
                yield new WeightMatrix(f, rows, cols, d, sc, fp8ScaleType, 0, "t");
            }
            case FP4_E2M1_B32 -> {
                long n = (long) rows * (cols / 32);
                MemorySegment sc = ARENA.allocate(Math.max(1, n));
                for (long i = 0; i < n; i++) sc.set(ValueLayout.JAVA_BYTE, i, (byte) (rnd.nextInt(50) == 0 ? 0 : 110 + rnd.nextInt(25)));
                yield new WeightMatrix(f, rows, cols, d, sc, DType.F8_E8M0, 0, "t");
            }
            default -> new WeightMatrix(f, rows, cols, d, null, null, 0, "t");
        };
    }

    static float[] randomX(int n, long seed) {
        SplittableRandom rnd = new SplittableRandom(seed);
        float[] x = new float[n];
        for (int i = 0; i < n; i++) x[i] = (float) rnd.nextDouble(-2, 2);
        return x;
    }

    // ------------------------------------------------------------ reference check

    /** Checks y (from yOff, stride rows) against a double reference built from WeightMatrix.get. */
    static void check(WeightMatrix w, float[] x, int xOff, int S, float[] y, int yOff) {
        double[] row = new double[w.cols];
        for (int r = 0; r < w.rows; r++) {
            for (int c = 0; c < w.cols; c++) row[c] = w.get(r, c);
            for (int s = 0; s < S; s++) {
                double ref = 0, mag = 0;
                for (int c = 0; c < w.cols; c++) {
                    double p = row[c] * x[xOff + s * w.cols + c];
                    ref += p;
                    mag += Math.abs(p);
                }
                float got = y[yOff + s * w.rows + r];
                double tol = 1e-5 * mag + 1e-30;
                if (!(Math.abs(got - ref) <= tol))
                    fail(w + " S=" + S + " s=" + s + " r=" + r + ": got " + got + ", expected " + ref + " (tol " + tol + ")");
            }
        }
    }

    static void runMatmul(WeightMatrix w, int S, long seed) {
        float[] x = randomX(S * w.cols, seed);
        float[] y = new float[S * w.rows];
        java.util.Arrays.fill(y, Float.NaN);
        Gemm.matmul(w, x, S, y);
        check(w, x, 0, S, y, 0);
    }

    // ------------------------------------------------------------ tests

    @Test
    void allFormatsOddShapes() {
        long seed = 1;
        for (Format f : Format.values())
            for (int rows : new int[]{1, 7, 130})
                for (int cols : new int[]{32, 96, 160, 288})
                    for (int S : new int[]{1, 3, 17})
                        runMatmul(random(f, rows, cols, seed++), S, seed++);
    }

    @Test
    void colsNotMultipleOfVectorLength() {
        long seed = 100;
        for (Format f : new Format[]{Format.F32, Format.F16, Format.BF16, Format.FP8_E4M3_B128})
            for (int cols : new int[]{1, 5, 33, 129, 200})
                for (int S : new int[]{1, 2, 5})
                    runMatmul(random(f, 9, cols, seed++), S, seed++);
    }

    @Test
    void largeParallelAndChunked() {
        // cols > the 512-column prefill chunk; enough bytes to split over threads
        long seed = 200;
        runMatmul(random(Format.F32, 45, 1100, seed++), 4, seed++);
        runMatmul(random(Format.BF16, 91, 1100, seed++), 3, seed++);
        runMatmul(random(Format.F16, 91, 1030, seed++), 1, seed++);
        runMatmul(random(Format.FP8_E4M3_B128, 150, 1100, seed++), 3, seed++);
        runMatmul(random(Format.FP4_E2M1_B32, 151, 1056, seed++), 2, seed++);
    }

    /** The BF16 few-token path (2 .. FEW_TOKENS tokens) equals the matvec bit for bit, across chunk and tail shapes. */
    @Test
    void bf16FewTokensMatchMatvec() {
        long seed = 700;
        for (int cols : new int[]{3, 8, 40, 100, 512, 1030, 1037, 2048, 2100}) {
            WeightMatrix w = random(Format.BF16, 19, cols, seed++);
            for (int S = 2; S <= Gemm.FEW_TOKENS; S++) {
                float[] x = randomX(S * cols, seed++);
                float[] y = new float[S * 19];
                Gemm.matmul(w, x, S, y);
                for (int s = 0; s < S; s++) {
                    float[] y1 = new float[19];
                    Gemm.matvec(w, x, s * cols, y1, 0);
                    assertArrayEquals(y1, java.util.Arrays.copyOfRange(y, s * 19, s * 19 + 19), "cols " + cols + " S=" + S + " s=" + s);
                }
            }
        }
    }

    /** y[s] of a batch equals, bit for bit, the matvec of row s alone (the forward pass relies on this). */
    @Test
    void batchInvariant() {
        long seed = 300;
        for (Format f : Format.values()) {
            int cols = f == Format.FP4_E2M1_B32 ? 1088 : 1037;
            WeightMatrix w = random(f, 21, cols, seed++);
            for (int S : new int[]{2, 5, 8, 9}) {
                float[] x = randomX(S * cols, seed++);
                float[] y = new float[S * 21];
                Gemm.matmul(w, x, S, y);
                for (int s = 0; s < S; s++) {
                    float[] y1 = new float[21];
                    Gemm.matvec(w, x, s * cols, y1, 0);
                    assertArrayEquals(y1, java.util.Arrays.copyOfRange(y, s * 21, s * 21 + 21), f + " S=" + S + " s=" + s);
                }
            }
        }
    }

    /**
     * Products batched into one dispatch (mixed formats, inputs shared between products, offsets) equal separate
     * matvec calls bit for bit, and matmuls with S &gt; 1 equals separate matmul calls.
     */
    @Test
    void batchedProductsMatchSeparateOnes() {
        long seed = 500;
        int cols = 288;
        float[] shared = randomX(cols + 40, seed++), other = randomX(2 * cols, seed++);
        WeightMatrix[] w = {
                random(Format.BF16, 0, cols, seed++), random(Format.FP4_E2M1_B32, 67, cols, seed++),
                random(Format.BF16, 130, cols, seed++),
                random(Format.BF16, 5, cols, seed++), random(Format.FP8_E4M3_B128, 300, cols, seed++),
                random(Format.F16, 33, cols, seed++), random(Format.F32, 1, cols, seed++),
                random(Format.BF16, 3, 0, seed++), random(Format.BF16, 4000, cols, seed++)};
        float[][] x = {shared, shared, shared, shared, other, shared, other, other, shared};
        int[] xOff = {40, 40, 40, 3, cols, 40, 0, 7, 40};
        float[][] y = new float[w.length][];
        int[] yOff = new int[w.length];
        for (int i = 0; i < w.length; i++) {
            yOff[i] = i;
            y[i] = new float[w[i].rows + i];
            java.util.Arrays.fill(y[i], Float.NaN);
        }
        Gemm.matvecs(w, x, xOff, y, yOff);
        for (int i = 0; i < w.length; i++) {
            float[] one = new float[w[i].rows + i];
            java.util.Arrays.fill(one, Float.NaN);
            Gemm.matvec(w[i], x[i], xOff[i], one, yOff[i]);
            assertArrayEquals(one, y[i], w[i] + " in a batch");
            check(w[i], x[i], xOff[i], 1, y[i], yOff[i]);
        }
        int S = 3;
        float[][] xs = new float[w.length][], ys = new float[w.length][];
        for (int i = 0; i < w.length; i++) {
            xs[i] = randomX(S * w[i].cols, seed++);
            ys[i] = new float[S * w[i].rows];
        }
        Gemm.matmuls(S, w, xs, ys);
        for (int i = 0; i < w.length; i++) {
            float[] one = new float[S * w[i].rows];
            Gemm.matmul(w[i], xs[i], S, one);
            assertArrayEquals(one, ys[i], w[i] + " in matmuls");
        }
        assertThrows(IllegalArgumentException.class, () -> Gemm.matvecs(w, x, xOff, y, new int[1]));
        assertThrows(IllegalArgumentException.class, () -> Gemm.matmuls(1, w, xs, new float[1][]));
        float[][] shortY = y.clone();
        shortY[4] = new float[10]; // the 300-row product
        assertThrows(IllegalArgumentException.class, () -> Gemm.matvecs(w, x, xOff, shortY, yOff));
    }

    /** Scales so large that 2^120·scale overflows take the two-multiply path with the same values. */
    @Test
    void hugeScales() {
        WeightMatrix f8 = random(Format.FP8_E4M3_B128, 130, 300, 400, DType.F32);
        for (long i = 0; i < f8.scale.byteSize() / 4; i += 2) f8.scale.setAtIndex(WeightMatrix.F32_LE, i, 1e5f);
        runMatmul(f8, 1, 401);
        runMatmul(f8, 3, 402);
        WeightMatrix f4 = random(Format.FP4_E2M1_B32, 9, 128, 403);
        for (long i = 0; i < f4.scale.byteSize(); i += 3) f4.scale.set(ValueLayout.JAVA_BYTE, i, (byte) 140);
        runMatmul(f4, 1, 404);
        runMatmul(f4, 3, 405);
    }

    @Test
    void fp8ViewsAndF32Scales() {
        WeightMatrix w = random(Format.FP8_E4M3_B128, 300, 200, 7);
        for (int[] rr : new int[][]{{0, 300}, {50, 250}, {127, 129}, {128, 300}, {299, 300}, {3, 10}}) {
            WeightMatrix v = w.rowRange(rr[0], rr[1]);
            for (int S : new int[]{1, 3}) runMatmul(v, S, rr[0] * 31L + S);
        }
        WeightMatrix f = random(Format.FP8_E4M3_B128, 260, 300, 8, DType.F32);
        runMatmul(f, 1, 9);
        runMatmul(f, 4, 10);
        runMatmul(f.rowRange(100, 211), 1, 11);
        runMatmul(f.rowRange(100, 211), 3, 12);
    }

    @Test
    void fp4Views() {
        WeightMatrix w = random(Format.FP4_E2M1_B32, 70, 320, 13);
        for (int[] rr : new int[][]{{5, 70}, {0, 1}, {33, 34}, {10, 41}}) {
            WeightMatrix v = w.rowRange(rr[0], rr[1]);
            for (int S : new int[]{1, 2, 3}) runMatmul(v, S, rr[0] * 17L + S);
        }
    }

    @Test
    void matvecOffsets() {
        for (Format f : Format.values()) {
            WeightMatrix w = random(f, 37, 96, f.ordinal() + 20);
            float[] x = randomX(96 + 11, 5);
            float[] y = new float[37 + 4];
            Gemm.matvec(w, x, 11, y, 4);
            check(w, x, 11, 1, y, 4);
        }
    }

    @Test
    void argumentErrors() {
        WeightMatrix w = random(Format.F32, 4, 8, 1);
        assertThrows(IllegalArgumentException.class, () -> Gemm.matmul(w, new float[15], 2, new float[8]));
        assertThrows(IllegalArgumentException.class, () -> Gemm.matmul(w, new float[16], 2, new float[7]));
        assertThrows(IllegalArgumentException.class, () -> Gemm.matvec(w, new float[8], 1, new float[4], 0));
        Gemm.matmul(w, new float[0], 0, new float[0]); // S = 0: nothing to do
    }

    /** Every code of each stored format decodes exactly as WeightMatrix.get (via the vector decoders). */
    @Test
    void decodersExhaustive() {
        org.junit.jupiter.api.Assumptions.assumeTrue(Gemm.VECTOR, "vector decoders not in use");
        // F16: all 65536 codes, Inf/NaN included
        MemorySegment h = ARENA.allocate(1 << 17, 64);
        for (int i = 0; i < 1 << 16; i++) h.setAtIndex(WeightMatrix.I16_LE, i, (short) i);
        assertDecodes(new WeightMatrix(Format.F16, 1, 1 << 16, h, null, null, 0, "f16"));
        assertDecodes(new WeightMatrix(Format.BF16, 1, 1 << 16, h, null, null, 0, "bf16"));
        assertDecodes(new WeightMatrix(Format.BF16, 1, (1 << 16) - 5, h, null, null, 0, "bf16 with a partial last group"));
        // FP8: 256 codes per row, NaN codes replaced by 0; scale 1
        MemorySegment b = ARENA.allocate(256, 64);
        for (int i = 0; i < 256; i++) b.set(ValueLayout.JAVA_BYTE, i, (byte) ((i & 0x7F) == 0x7F ? 0 : i));
        MemorySegment one = ARENA.allocate(2);
        one.fill((byte) 127);
        assertDecodes(new WeightMatrix(Format.FP8_E4M3_B128, 1, 256, b, one, DType.F8_E8M0, 0, "fp8"));
        // FP4: all 256 byte values (every nibble pair), scale 2^3
        MemorySegment p = ARENA.allocate(256, 64);
        for (int i = 0; i < 256; i++) p.set(ValueLayout.JAVA_BYTE, i, (byte) i);
        MemorySegment s4 = ARENA.allocate(16);
        s4.fill((byte) 130);
        assertDecodes(new WeightMatrix(Format.FP4_E2M1_B32, 1, 512, p, s4, DType.F8_E8M0, 0, "fp4"));
    }

    private static void assertDecodes(WeightMatrix w) {
        float[] t = new float[w.cols];
        for (int c0 = 0; c0 < w.cols; c0 += Gemm.KC) Gemm.dequantChunk(w, 0, c0, Math.min(Gemm.KC, w.cols - c0), t, c0);
        for (int c = 0; c < w.cols; c++) {
            float expect = w.get(0, c);
            int pos = c;
            if (Gemm.permuted(w.format)) { // undo the even/odd permutation (within whole groups of 2·VL columns)
                int g = c / (2 * Gemm.VL) * (2 * Gemm.VL), i = c - g;
                if (g + 2 * Gemm.VL <= w.cols) pos = g + (i % 2 == 0 ? i / 2 : Gemm.VL + i / 2);
            }
            float got = t[pos];
            if (Float.isNaN(expect)) assertTrue(Float.isNaN(got), w + " code " + c);
            else assertEquals(Float.floatToIntBits(expect), Float.floatToIntBits(got), w + " code " + c + ": " + got + " vs " + expect);
        }
    }
}
