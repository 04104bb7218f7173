package io.ds4j.gpu;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.Gpu.ptr;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;

/**
 * Kernel-level microbenchmark of the matrix products of one V4-Flash decoder layer at decode, verify and prefill sizes:
 * time, weight bytes, FLOP and the fractions of the HBM bound and of the BF16 tensor-core peak for ds4j_matmul,
 * ds4j_matmul_grouped and the routed experts, by default at S = 1, 5, 16, 32, 64 rows. Below DS4J_TC_MIN_ROWS the
 * skinny tensor-core products run where the device has them, the FFMA kernels otherwise (the environment variable
 * DS4J_SKINNY=0 for the FFMA figures, DS4J_SKINNY_WIDE=0 / 1 for steps of 33 .. 64 rows in passes of 32 / in one pass
 * for every product (the default 2: passes of 32 for FP8 products of at least 2,048 rows),
 * DS4J_SKINNY_WIDE_MT=1 for one m-tile per warp in 64-row passes, DS4J_SKINNY_SMEM=0 for the kernel without staged
 * activations, =1 for the staged one at every S; DS4J_SKINNY_XLOADS=0|1 for the staging's x loads one slot at a time or
 * four at a time, FP8 aside, which stages each lane's chunk at once). The routed experts run ds4j_moe_matmul_prefill
 * at every S, as the backend does: below DS4J_TC_MIN_ROWS one skinny block per picked expert where the picks outnumber the 16 experts
 * (from 3 rows; DS4J_SKINNY_MOE_GRID=0 for one per pick, DS4J_SKINNY_MOE_RG=N for N (1 .. 16) row groups of 128 rows
 * per staged block instead of the number that leaves about 384 blocks, DS4J_SKINNY_MOE_SMEM_MAX=N for staged
 * activations up to N rows instead of 32). From DS4J_TC_MIN_ROWS
 * rows (prefill chunks, e.g. --rows 512,2048), or from --tc-rows N rows (1 .. DS4J_TC_MIN_ROWS: the calls' tc_rows, as
 * the backend passes for the prefill chunks it runs on tensor cores below DS4J_TC_MIN_ROWS), the prefill GEMM runs (gemm_tc.cpp; DS4J_TC_BN=64 or 128 forces its
 * token tile, DS4J_TC_XSPLIT=0 for the activations split in every block instead of once per product) and the routed experts run
 * ds4j_moe_matmul_prefill (picks grouped by expert on the device, the grouping included in the time). A benchmark,
 * not a test: it prints a Markdown table and asserts nothing.
 *
 * <p>Shapes (hidden 4096, q_lora 1024, 64 heads of 512, 8 output groups, MoE intermediate 2048): wq_a 1024x4096,
 * wq_b 32768x1024, wkv 512x4096, wo_a 8 groups of 1024x4096, wo_b 4096x8192, shared expert w1 2048x4096 and
 * w2 4096x2048 (FP8 e4m3, 128x128 E8M0 scales); a BF16 1024x4096 product; the routed experts' w1 2048x4096 and
 * w2 4096x2048 (FP4 e2m1, 1x32 E8M0 scales), 16 experts, 6 distinct picks per row; where --only names it (e.g.
 * --only lm_head), the output head, BF16 129280x4096. Weights are random.
 *
 * <p>Each figure is the mean of --reps back-to-back calls after a warm-up (launch costs included); the "graph" figure
 * is the mean per call of the same calls captured once into a graph (one call per weight copy) and replayed, so without
 * the host's launch costs ("–" where capture is not available). "y hash" is a hash of the bits of the last call's
 * result (every copy holds the same weights): equal hashes across runs with different switches (DS4J_SKINNY_SMEM, DS4J_TC_XSPLIT, ...)
 * show that they give the same bits on the device. The calls cycle
 * over copies of the weights that together exceed --cold-mb (default 512 MB, ten times the H200's 50 MB L2), so every
 * call reads its weights from HBM. Bytes = the weights (and scales) the call must read: every row of a dense matrix,
 * every distinct picked expert once for the routed experts; x and y are not counted. FLOP = 2 x rows x cols x S
 * (x picks for the experts). MMA FLOP = the FLOP the tensor cores execute on the BF16 paths: each activation is split
 * into BF16 hi and lo parts, so twice the product's FLOP (three times for F16 weights, not in the table); the fraction
 * of the peak is given for both. Defaults: the H200's 4.8 TB/s HBM and 989 TFLOP/s dense BF16.
 *
 * <pre>
 * java ... io.ds4j.gpu.MatmulBench [--rows 1,5,16,32,64] [--reps 50] [--cold-mb 512] [--peak-gbs 4800]
 *     [--peak-tflops 989] [--only NAME] [--tc-rows N]
 * </pre>
 */
public final class MatmulBench {
    private MatmulBench() {}

    /** One product: name, format, rows x cols (grouped: groups of rows / groups rows, each over its own x slice). */
    record Shape(String name, int format, int rows, int cols, int groups) {
        long weightBytes() {
            long b = format == DS4J_FMT_FP8_E4M3_B128() ? (long) rows * cols
                    : format == DS4J_FMT_FP4_E2M1_B32() ? (long) rows * cols / 2
                    : format == DS4J_FMT_F32() ? 4L * rows * cols : 2L * rows * cols;
            return b + scaleBytes();
        }

        long dataBytes() {
            return weightBytes() - scaleBytes();
        }

        long scaleBytes() {
            if (format == DS4J_FMT_FP8_E4M3_B128()) return (long) ((rows + 127) / 128) * ((cols + 127) / 128);
            if (format == DS4J_FMT_FP4_E2M1_B32()) return (long) rows * cols / 32;
            return 0;
        }
    }

    public static void main(String[] args) {
        int[] rowCounts = {1, 5, 16, 32, 64};
        int reps = 50;
        double coldMb = 512, peakGbs = 4800, peakTflops = 989;
        String only = null; // products whose name contains this text (e.g. to profile one kernel with ncu)
        int tcRows = 0; // the calls' tc_rows: 0 = the library's threshold (DS4J_TC_MIN_ROWS)
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--rows" -> {
                    String[] p = args[++i].split(",");
                    rowCounts = new int[p.length];
                    for (int j = 0; j < p.length; j++) rowCounts[j] = Integer.parseInt(p[j].trim());
                }
                case "--reps" -> reps = Integer.parseInt(args[++i]);
                case "--cold-mb" -> coldMb = Double.parseDouble(args[++i]);
                case "--peak-gbs" -> peakGbs = Double.parseDouble(args[++i]);
                case "--peak-tflops" -> peakTflops = Double.parseDouble(args[++i]);
                case "--only" -> only = args[++i];
                case "--tc-rows" -> tcRows = Integer.parseInt(args[++i]);
                default -> throw new IllegalArgumentException("unknown option " + args[i]
                        + " (expected --rows, --reps, --cold-mb, --peak-gbs, --peak-tflops, --only, --tc-rows)");
            }
        }
        for (int S : rowCounts)
            if (S < 1 || S > 4096) throw new IllegalArgumentException("--rows: " + S + " is not in 1 .. 4096");
        if (reps < 1) throw new IllegalArgumentException("--reps must be at least 1");
        if (tcRows < 0 || tcRows > DS4J_TC_MIN_ROWS())
            throw new IllegalArgumentException("--tc-rows: " + tcRows + " is not in 0 .. " + DS4J_TC_MIN_ROWS());
        final int tcr = tcRows;
        if (!(peakGbs > 0) || !(peakTflops > 0)) throw new IllegalArgumentException("--peak-gbs and --peak-tflops must be positive");
        final double tflops = peakTflops;
        final int fp8 = DS4J_FMT_FP8_E4M3_B128(), fp4 = DS4J_FMT_FP4_E2M1_B32(), bf16 = DS4J_FMT_BF16(), f32 = DS4J_FMT_F32();
        List<Shape> dense = List.of(
                new Shape("wq_a", fp8, 1024, 4096, 1),
                new Shape("wq_b", fp8, 32768, 1024, 1),
                new Shape("wkv", fp8, 512, 4096, 1),
                new Shape("wo_a (8 groups)", fp8, 8192, 4096, 8),
                new Shape("wo_b", fp8, 4096, 8192, 1),
                new Shape("shared w1 / w3", fp8, 2048, 4096, 1),
                new Shape("shared w2", fp8, 4096, 2048, 1),
                new Shape("bf16 1024x4096", bf16, 1024, 4096, 1),
                // the mHC mapping of a layer's residual streams: (2 + n) n rows over n D columns (n = 4, D = 4096), F32
                new Shape("mHC mapping (f32 24x16384)", f32, 24, 16384, 1));
        List<Shape> experts = List.of(new Shape("routed w1 / w3", fp4, 2048, 4096, 1), new Shape("routed w2", fp4, 4096, 2048, 1));
        // the output head (vocabulary 129,280, BF16, 1.06 GB): only where --only names it, its copies being 2 GB
        Shape head = new Shape("lm_head 129280x4096", bf16, 129280, 4096, 1);
        if (only != null) {
            final String o = only;
            dense = java.util.stream.Stream.concat(dense.stream(), java.util.stream.Stream.of(head))
                    .filter(sh -> sh.name().contains(o)).toList();
            experts = experts.stream().filter(sh -> sh.name().contains(o)).toList();
            if (dense.isEmpty() && experts.isEmpty()) throw new IllegalArgumentException("--only " + o + ": no product of that name");
        }
        final int E = 16, k = 6;
        try (Gpu gpu = Gpu.open(0)) {
            int maxS = 0;
            for (int S : rowCounts) maxS = Math.max(maxS, S);
            System.out.printf("GPU %s; matrix products, %d calls per figure over > %.0f MB of weight copies;"
                    + " DS4J_TC_MIN_ROWS %d, tc_rows %d; tensor cores %s; DS4J_SKINNY_WIDE %s, DS4J_SKINNY_WIDE_MT %s,"
                    + " DS4J_SKINNY_SMEM %s, DS4J_SKINNY_XLOADS %s, DS4J_SKINNY_WGMMA %s;"
                    + " prefill DS4J_TC_BN %s, DS4J_TC_XSPLIT %s%n", gpu, reps, coldMb,
                    DS4J_TC_MIN_ROWS(), tcr,
                    !gpu.tensorCores() ? "off (FFMA kernels)"
                            : "0".equals(System.getenv("DS4J_SKINNY")) ? "for prefill only (DS4J_SKINNY=0: FFMA kernels here)"
                            : "on (skinny kernels)",
                    envOr("DS4J_SKINNY_WIDE", "default (2)"), envOr("DS4J_SKINNY_WIDE_MT", "default (2)"),
                    envOr("DS4J_SKINNY_SMEM", "default (1)"), envOr("DS4J_SKINNY_XLOADS", "default (0)"),
                    envOr("DS4J_SKINNY_WGMMA", "default (8: FP8)"),
                    envOr("DS4J_TC_BN", "default (by shape)"), envOr("DS4J_TC_XSPLIT", "default (2)"));
            System.out.println();
            System.out.println("| product | format | rows x cols | S | µs per call | MB read | GB/s | % of HBM | GFLOP/s"
                    + " | % of BF16 peak (product / MMA) | graph µs | graph % of HBM | y hash |");
            System.out.println("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
            SplittableRandom r = new SplittableRandom(1);
            // x: S rows of up to 8 x 4096 columns (wo_a's groups); y: S rows of the most outputs (wq_b's 32768, the
            // head's 129280) or k x 4096
            int maxOut = 32768;
            for (Shape s : dense) maxOut = Math.max(maxOut, s.rows);
            long x = gpu.malloc(4L * maxS * 32768, "x"), y = gpu.malloc(4L * maxS * maxOut, "y");
            final int maxPicks = maxS * k;
            long scratch = gpu.malloc(4L * (maxPicks + 3L * E + 1), "moe scratch");
            try {
                gpu.upload(x, gauss(r, maxS * 32768));
                for (Shape s : dense) {
                    try (Copies c = new Copies(gpu, s, copiesFor(s.weightBytes(), coldMb), r)) {
                        for (int S : rowCounts) {
                            int rpg = s.rows / s.groups;
                            long ldx = (long) s.groups * s.cols;
                            final int Sf = S;
                            int[] next = {0};
                            Runnable call = () -> {
                                int i = next[0]++ % c.n;
                                if (s.groups > 1)
                                    check(ds4j_matmul_grouped(gpu.ctx(), s.format, ptr(c.data[i]), ptr(c.scale[i]), DS4J_SCALE_E8M0(), 0,
                                            s.rows, s.cols, rpg, s.cols, ptr(x), ldx, ptr(y), s.rows, Sf, tcr), "matmul_grouped");
                                else
                                    check(ds4j_matmul(gpu.ctx(), s.format, ptr(c.data[i]), ptr(c.scale[i]), DS4J_SCALE_E8M0(), 0,
                                            s.rows, s.cols, ptr(x), ldx, ptr(y), s.rows, Sf, tcr), "matmul");
                            };
                            double us = time(gpu, reps, call);
                            next[0] = 0;
                            double gus = DecodeGraphs.replayMicros(gpu, c.n, reps, call);
                            row(s.name, s, S, us, s.weightBytes(), 2.0 * s.rows * s.cols * S, peakGbs, tflops, gus,
                                    bitsHash(gpu.downloadFloats(y, S * s.rows)));
                        }
                    }
                }
                for (Shape s : experts) {
                    int tables = (int) Math.max(1, copiesFor(E * s.weightBytes(), coldMb));
                    List<Copies> sets = new ArrayList<>();
                    long[] dt = new long[tables], st = new long[tables];
                    try {
                        for (int t = 0; t < tables; t++) {
                            Copies c = new Copies(gpu, s, E, r);
                            sets.add(c);
                            dt[t] = gpu.malloc(8L * E, "table");
                            st[t] = gpu.malloc(8L * E, "table");
                            gpu.upload(dt[t], c.data);
                            gpu.upload(st[t], c.scale);
                        }
                        for (int S : rowCounts) {
                            int[] ids = picks(r, S, E, k);
                            long dids = gpu.uploadNew(ids, "ids");
                            try {
                                int distinct = (int) java.util.Arrays.stream(ids).distinct().count();
                                final int Sf = S;
                                int[] next = {0};
                                Runnable call = () -> {
                                    int t = next[0]++ % tables;
                                    check(ds4j_moe_matmul_prefill(gpu.ctx(), s.format, ptr(dt[t]), ptr(st[t]), MemorySegment.NULL,
                                            DS4J_SCALE_E8M0(), s.rows, s.cols, E, ptr(dids), k, Sf, ptr(x), s.cols, 0, ptr(y), s.rows,
                                            ptr(scratch), 4L * (maxPicks + 3L * E + 1), tcr), "moe_matmul_prefill");
                                };
                                double us = time(gpu, reps, call);
                                next[0] = 0;
                                double gus = DecodeGraphs.replayMicros(gpu, tables, reps, call);
                                row(s.name + " (" + distinct + " of " + E + " experts)", s, S, us, distinct * s.weightBytes(),
                                        2.0 * s.rows * s.cols * S * k, peakGbs, tflops, gus, bitsHash(gpu.downloadFloats(y, S * k * s.rows)));
                            } finally {
                                gpu.free(dids);
                            }
                        }
                    } finally {
                        for (Copies c : sets) c.close();
                        for (int t = 0; t < sets.size(); t++) {
                            gpu.free(dt[t]);
                            gpu.free(st[t]);
                        }
                    }
                }
            } finally {
                gpu.free(x);
                gpu.free(y);
                gpu.free(scratch);
            }
        }
    }

    static int copiesFor(long bytes, double coldMb) {
        return (int) Math.max(2, Math.ceil(coldMb * 1e6 / bytes));
    }

    /** Mean µs per call of `call` over reps calls after reps / 5 + 1 warm-up calls. */
    static double time(Gpu gpu, int reps, Runnable call) {
        for (int i = 0; i < reps / 5 + 1; i++) call.run();
        gpu.sync();
        long t0 = System.nanoTime();
        for (int i = 0; i < reps; i++) call.run();
        gpu.sync();
        return (System.nanoTime() - t0) / 1e3 / reps;
    }

    /** A 64-bit FNV-1a hash of the floats' bit patterns, as 16 hex digits. */
    static String bitsHash(float[] v) {
        long h = 0xcbf29ce484222325L;
        for (float f : v) {
            h ^= Float.floatToRawIntBits(f) & 0xffffffffL;
            h *= 0x100000001b3L;
        }
        return String.format("%016x", h);
    }

    /**
     * One table row: µs per call, bytes read, FLOP of the product; the BF16 peak fraction for the product's FLOP and
     * for the MMA FLOP (twice as many: hi and lo parts of the activations); the graph-replayed µs and the result's hash.
     */
    static void row(String name, Shape s, int S, double us, long bytes, double flop, double peakGbs, double peakTflops,
                    double graphUs, String hash) {
        String fmt = s.format == DS4J_FMT_FP8_E4M3_B128() ? "FP8" : s.format == DS4J_FMT_FP4_E2M1_B32() ? "FP4"
                : s.format == DS4J_FMT_F32() ? "F32" : "BF16";
        double gbs = bytes / (us * 1e3);
        double pct = 100 * flop / (us * 1e-6) / (peakTflops * 1e12);
        String graph = Double.isNaN(graphUs) ? "– | –" : String.format(java.util.Locale.ROOT, "%.1f | %.1f %%", graphUs,
                100 * bytes / (graphUs * 1e3) / peakGbs);
        System.out.printf(java.util.Locale.ROOT, "| %s | %s | %dx%d | %d | %.1f | %.1f | %.0f | %.1f %% | %.0f | %.1f %% / %.1f %% | %s | %s |%n",
                name, fmt, s.rows, s.cols, S, us, bytes / 1e6, gbs, 100 * gbs / peakGbs, flop / (us * 1e3), pct, 2 * pct, graph, hash);
    }

    /** S rows of k distinct experts each, uniformly. */
    static int[] picks(SplittableRandom r, int S, int E, int k) {
        int[] ids = new int[S * k];
        for (int s = 0; s < S; s++) {
            int[] perm = new int[E];
            for (int e = 0; e < E; e++) perm[e] = e;
            for (int j = 0; j < k; j++) {
                int q = j + r.nextInt(E - j);
                int t = perm[j];
                perm[j] = perm[q];
                perm[q] = t;
                ids[s * k + j] = perm[j];
            }
        }
        return ids;
    }

    static float[] gauss(SplittableRandom r, int n) {
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) r.nextGaussian();
        return a;
    }

    /** n copies of one random matrix of the shape in device memory (data and scales). */
    static final class Copies implements AutoCloseable {
        final Gpu gpu;
        final int n;
        final long[] data, scale;

        Copies(Gpu gpu, Shape s, int n, SplittableRandom r) {
            this.gpu = gpu;
            this.n = n;
            data = new long[n];
            scale = new long[n];
            try (Arena a = Arena.ofConfined()) {
                MemorySegment d = a.allocate(s.dataBytes(), 16);
                for (long i = 0; i < s.dataBytes(); i++) {
                    int b = r.nextInt(256);
                    if (s.format == DS4J_FMT_FP8_E4M3_B128() && (b & 0x7F) == 0x7F) b &= 0xFE;  // no NaN codes
                    if (s.format == DS4J_FMT_BF16() && (i & 1) == 1) b = 0x3C + r.nextInt(8);  // BF16: moderate exponents
                    if (s.format == DS4J_FMT_F32() && (i & 3) == 3) b = 0x3C + r.nextInt(4);  // F32: likewise
                    d.set(ValueLayout.JAVA_BYTE, i, (byte) b);
                }
                MemorySegment sc = a.allocate(Math.max(1, s.scaleBytes()), 16);
                for (long i = 0; i < s.scaleBytes(); i++) sc.set(ValueLayout.JAVA_BYTE, i, (byte) (118 + r.nextInt(8)));
                for (int i = 0; i < n; i++) {
                    data[i] = gpu.malloc(s.dataBytes(), s.name());
                    gpu.upload(data[i], d);
                    if (s.scaleBytes() > 0) {
                        scale[i] = gpu.malloc(s.scaleBytes(), s.name() + " scales");
                        gpu.upload(scale[i], sc);
                    }
                }
            } catch (RuntimeException e) {
                close();
                throw e;
            }
        }

        @Override
        public void close() {
            for (int i = 0; i < n; i++) {
                if (data[i] != 0) gpu.free(data[i]);
                if (scale[i] != 0) gpu.free(scale[i]);
            }
        }
    }

    /** The environment variable's value, or def when unset. */
    static String envOr(String name, String def) {
        String v = System.getenv(name);
        return v == null ? def : v;
    }
}
