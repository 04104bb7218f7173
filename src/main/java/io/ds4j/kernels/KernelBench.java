package io.ds4j.kernels;

import io.ds4j.model.DType;
import io.ds4j.model.WeightMatrix;
import io.ds4j.model.WeightMatrix.Format;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Locale;

/**
 * Benchmark of the {@link Gemm} kernels (not a test): matvec read bandwidth per format on ~256 MB matrices
 * against {@link MemBandwidth#measureReadGBs()}, per-call latency on expert-sized FP4 matrices, and prefill
 * GFLOP/s. Run: {@code java --add-modules jdk.incubator.vector -cp target/classes io.ds4j.kernels.KernelBench [MB]}.
 */
public final class KernelBench {
    private KernelBench() {}

    /**
     * @param args [MB per matrix (default 256)] [formats to run (default all; F32 F16 BF16 FP8_E4M3_B128
     *             FP4_E2M1_B32)]. Each format's matvec cycles through enough such matrices to stream at least
     *             1 GiB per round, so large last-level caches do not inflate the figures.
     */
    public static void main(String[] args) {
        long mb = args.length > 0 ? Long.parseLong(args[0]) : 256;
        java.util.List<Format> formats = new java.util.ArrayList<>();
        for (int i = 1; i < args.length; i++) formats.add(Format.valueOf(args[i]));
        if (formats.isEmpty()) formats.addAll(java.util.List.of(Format.values()));
        System.out.printf(Locale.ROOT, "threads %d, float lanes %d, vector kernels %s, fp8 subnormal-safe decode %s%n",
                Parallel.threads(), Gemm.VL, Gemm.VECTOR, Gemm.FP8_SAFE);
        double bw = MemBandwidth.measureReadGBs();
        System.out.printf(Locale.ROOT, "memory read bandwidth: %.1f GB/s (1 GiB buffer, best of 5)%n", bw);

        long target = mb << 20;
        int copies = (int) Math.max(1, ((1L << 30) + target - 1) / target);
        for (Format f : formats) {
            int rows = 8192;
            long rowBytes = target / rows;
            int cols = (int) switch (f) {
                case F32 -> rowBytes / 4;
                case F16, BF16 -> rowBytes / 2;
                case FP8_E4M3_B128 -> rowBytes;
                case FP4_E2M1_B32 -> rowBytes * 2;
            };
            try (Arena arena = Arena.ofShared()) {
                WeightMatrix[] ws = new WeightMatrix[copies];
                for (int k = 0; k < copies; k++) ws[k] = random(arena, f, rows, cols, 1 + k);
                float[] x = randomX(cols, 2), y = new float[rows];
                int[] next = {0};
                double sec = time(() -> Gemm.matvec(ws[next[0]++ % copies], x, 0, y, 0), 2 * copies, 6 * copies);
                double gbs = ws[0].storedBytes() / sec / 1e9;
                System.out.printf(Locale.ROOT, "matvec %-14s %5d x %-6d %7.1f MB (x%d)  %7.2f ms  %6.1f GB/s  %5.1f%% of bandwidth%n",
                        f, rows, cols, ws[0].storedBytes() / 1e6, copies, sec * 1e3, gbs, 100 * gbs / bw);
            }
        }
        if (formats.contains(Format.FP4_E2M1_B32)) {
            // expert-sized FP4 matrices: per-call latency (dispatch overhead included), cache-warm
            for (int[] shape : new int[][]{{2048, 7168}, {7168, 2048}}) {
                try (Arena arena = Arena.ofShared()) {
                    WeightMatrix w = random(arena, Format.FP4_E2M1_B32, shape[0], shape[1], 3);
                    float[] x = randomX(shape[1], 4), y = new float[shape[0]];
                    double sec = time(() -> Gemm.matvec(w, x, 0, y, 0), 50, 200);
                    System.out.printf(Locale.ROOT, "matvec FP4 expert  %5d x %-6d %7.1f MB  %7.1f us  %6.1f GB/s (cache-warm)%n",
                            shape[0], shape[1], w.storedBytes() / 1e6, sec * 1e6, w.storedBytes() / sec / 1e9);
                }
            }
        }
        // prefill: S tokens against one matrix
        int S = 64;
        for (Format f : formats) {
            int rows = 2048, cols = 4096;
            try (Arena arena = Arena.ofShared()) {
                WeightMatrix w = random(arena, f, rows, cols, 5);
                float[] x = randomX(S * cols, 6), y = new float[S * rows];
                double sec = time(() -> Gemm.matmul(w, x, S, y), 2, 5);
                System.out.printf(Locale.ROOT, "matmul %-14s %5d x %-6d S=%d  %7.2f ms  %6.1f GFLOP/s%n",
                        f, rows, cols, S, sec * 1e3, 2.0 * S * rows * cols / sec / 1e9);
            }
        }
    }

    /** Best wall time of {@code runs} calls after {@code warm} calls, in seconds. */
    static double time(Runnable r, int warm, int runs) {
        for (int i = 0; i < warm; i++) r.run();
        long best = Long.MAX_VALUE;
        for (int i = 0; i < runs; i++) {
            long t0 = System.nanoTime();
            r.run();
            best = Math.min(best, System.nanoTime() - t0);
        }
        return best / 1e9;
    }

    static float[] randomX(int n, long seed) {
        float[] x = new float[n];
        long s = seed * 0x9E3779B97F4A7C15L + 1;
        for (int i = 0; i < n; i++) {
            s = s * 6364136223846793005L + 1442695040888963407L;
            x[i] = (int) (s >>> 40) / (float) (1 << 23) - 1f;
        }
        return x;
    }

    /**
     * A random matrix in format f with realistic codes: Gaussian weights quantised like a checkpoint (FP8: block
     * maximum near 448, so subnormal codes are rare; FP4: block maximum near 6), tiled from a 64 KiB pool with a
     * per-row offset; scales 2^-7.
     */
    static WeightMatrix random(Arena arena, Format f, int rows, int cols, long seed) {
        WeightMatrix shape = new WeightMatrix(f, rows, cols, MemorySegment.NULL, null, null, 0, "bench");
        long rowBytes = shape.rowBytes(), bytes = rowBytes * rows;
        MemorySegment data = arena.allocate(bytes, 64);
        byte[] pool = pool(f, seed);
        MemorySegment ps = MemorySegment.ofArray(pool);
        Parallel.forRange(rows, 64, (a, b) -> {
            for (int r = a; r < b; r++) {
                long off = (r * 8191L) % (pool.length / 2) & ~7L;
                for (long c = 0; c < rowBytes; ) {
                    long n = Math.min(rowBytes - c, pool.length - off);
                    MemorySegment.copy(ps, off, data, r * rowBytes + c, n);
                    c += n;
                    off = 0;
                }
            }
        });
        return switch (f) {
            case FP8_E4M3_B128 -> {
                long n = (long) ((rows + 127) / 128) * ((cols + 127) / 128);
                MemorySegment sc = arena.allocate(n);
                sc.fill((byte) 120);
                yield new WeightMatrix(f, rows, cols, data, sc, DType.F8_E8M0, 0, "bench");
            }
            case FP4_E2M1_B32 -> {
                MemorySegment sc = arena.allocate((long) rows * (cols / 32));
                sc.fill((byte) 120);
                yield new WeightMatrix(f, rows, cols, data, sc, DType.F8_E8M0, 0, "bench");
            }
            default -> new WeightMatrix(f, rows, cols, data, null, null, 0, "bench");
        };
    }

    private static byte[] pool(Format f, long seed) {
        java.util.SplittableRandom rnd = new java.util.SplittableRandom(seed);
        byte[] p = new byte[1 << 16];
        java.nio.ByteBuffer bb = java.nio.ByteBuffer.wrap(p).order(java.nio.ByteOrder.LITTLE_ENDIAN);
        switch (f) {
            case F32 -> { while (bb.hasRemaining()) bb.putFloat((float) (rnd.nextGaussian() * 0.02)); }
            case BF16 -> { while (bb.hasRemaining()) bb.putShort((short) (Float.floatToIntBits((float) (rnd.nextGaussian() * 0.02)) >>> 16)); }
            case F16 -> { while (bb.hasRemaining()) bb.putShort(Float.floatToFloat16((float) (rnd.nextGaussian() * 0.02))); }
            case FP8_E4M3_B128 -> {
                boolean uniform = Boolean.getBoolean("ds4j.bench.uniformFp8"); // worst case: 1/16 subnormal codes
                for (int i = 0; i < p.length; i++) {
                    if (!uniform) p[i] = (byte) nearest(WeightMatrix.E4M3, 256, rnd.nextGaussian() * 448 / 4.2);
                    else do p[i] = (byte) rnd.nextInt(256); while ((p[i] & 0x7F) == 0x7F);
                }
            }
            case FP4_E2M1_B32 -> {
                for (int i = 0; i < p.length; i++) {
                    int lo = nearest(WeightMatrix.E2M1, 16, rnd.nextGaussian() * 6 / 2.2);
                    int hi = nearest(WeightMatrix.E2M1, 16, rnd.nextGaussian() * 6 / 2.2);
                    p[i] = (byte) (lo | hi << 4);
                }
            }
        }
        return p;
    }

    /** Index of the finite table value nearest to v (clamped to the table's range). */
    private static int nearest(float[] table, int n, double v) {
        int best = 0;
        double bd = Double.MAX_VALUE;
        for (int i = 0; i < n; i++) {
            if (Float.isNaN(table[i])) continue;
            double dd = Math.abs(table[i] - v);
            if (dd < bd) {
                bd = dd;
                best = i;
            }
        }
        return best;
    }
}
