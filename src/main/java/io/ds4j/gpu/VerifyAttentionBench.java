package io.ds4j.gpu;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.SplittableRandom;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.Gpu.ptr;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;

/**
 * Kernel-level microbenchmark of one layer's verify attention: S queries (default 5 = q + 1 with q = 4),
 * 64 heads, head width 512, window 128 — V4-Flash's attention shape — for a CSA layer (ratio 4, the indexer's 512
 * picks per query) and an HCA layer (ratio 128, every entry) at several context lengths (tokens in the cache after the
 * step; the step's last query sits at context − 1). Cache rows are random F16 values; the CSA picks are random sorted
 * sets. A benchmark, not a test: it prints a Markdown table and asserts nothing.
 *
 * <p>--queries takes a list (1 = a decode step, 5 = a verify step of q + 1 with q = 4): one table per entry. Paths, each
 * timed as the mean of --reps back-to-back calls after a warm-up (host launch costs included, as in a real step):
 * <ul>
 *   <li>{@code f32-convert}: the control — ds4j_f16_to_f32 of every window ring row, every compressed entry and (CSA)
 *       every indexer key of the layer, then ds4j_attention_f16_operands_f32 at --threshold on the copies (the F32
 *       kernel at or under it, tensor cores above, as the backend's control path); "of which conversion" times the
 *       conversions alone;</li>
 *   <li>{@code f32 copies, attention alone}: that attention on the converted rows, without the conversion;</li>
 *   <li>{@code f16 full-F32}: ds4j_attention on the F16 rows in place (what the F16 path runs up to the threshold);</li>
 *   <li>{@code f16 tensor-core}: ds4j_attention_f16_operands (what it runs above the threshold).</li>
 * </ul>
 * "picked" marks what the F16 path takes at the threshold (n_attn ≤ threshold: full F32).
 *
 * <p>A second table per --queries entry times the CSA layer's Lightning Indexer (H_I 64, d_I 128, 512 picks over
 * context / 4 keys): ds4j_indexer_scores on the F16 keys in place, ds4j_indexer_scores_f32 on the control's F32 copies
 * and ds4j_indexer_topk, with the bytes the scores must read (the keys once, F16 or F32, and the scores written). The
 * environment variables DS4J_INDEXER_TC=0 and DS4J_TOPK_MULTI=0 give the previous kernels for comparison.
 *
 * <p>Figures: useful FLOP = 4·H·d·Σ_s n_s (Q·Kᵀ and P·V, n_s the rows query s attends), against the FP32 non-tensor
 * peak (F32 paths) or the F16 tensor dense peak (tensor-core path). Bytes = the least traffic each path needs: every
 * distinct attended row once (F16 rows 2 bytes per element, this step's rows and the F32 copies 4), q and the output;
 * the control adds its conversion (2 bytes read + 4 written per converted element). Defaults: the H200's
 * 67 TFLOP/s FP32, 989 TFLOP/s F16 tensor (dense), 4.8 TB/s HBM.
 *
 * <pre>
 * java ... io.ds4j.gpu.VerifyAttentionBench [--contexts 4096,59933,122879] [--queries 1,5] [--reps 200]
 *      [--threshold 512] [--peak-fp32 67] [--peak-f16 989] [--peak-gbs 4800]
 * </pre>
 */
public final class VerifyAttentionBench {
    private VerifyAttentionBench() {}

    static final int H = 64, D = 512, W = 128, CAP = W - 1 + 16, K = 512, DI = 128;

    public static void main(String[] args) {
        List<Integer> contexts = new ArrayList<>(List.of(4096, 59_933, 122_879));
        List<Integer> queries = new ArrayList<>(List.of(5));
        int reps = 200, threshold = 512;
        double peak32 = 67, peak16 = 989, peakGbs = 4800;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--contexts" -> {
                    contexts.clear();
                    for (String s : args[++i].split(",")) contexts.add(Integer.parseInt(s.trim()));
                }
                case "--queries" -> {
                    queries.clear();
                    for (String s : args[++i].split(",")) queries.add(Integer.parseInt(s.trim()));
                }
                case "--reps" -> reps = Integer.parseInt(args[++i]);
                case "--threshold" -> threshold = Integer.parseInt(args[++i]);
                case "--peak-fp32" -> peak32 = Double.parseDouble(args[++i]);
                case "--peak-f16" -> peak16 = Double.parseDouble(args[++i]);
                case "--peak-gbs" -> peakGbs = Double.parseDouble(args[++i]);
                default -> throw new IllegalArgumentException("unknown option " + args[i]
                        + " (expected --contexts, --queries, --reps, --threshold, --peak-fp32, --peak-f16, --peak-gbs)");
            }
        }
        if (queries.isEmpty() || queries.stream().anyMatch(q -> q < 1) || reps < 1)
            throw new IllegalArgumentException("--queries and --reps must be at least 1");
        try (Gpu gpu = Gpu.open(0)) {
            for (int S : queries) {
                System.out.printf("GPU %s; one layer's %s attention: S %d, H %d, d %d, W %d; CSA ratio 4 with %d picks, HCA ratio 128;"
                        + " %d calls per figure; threshold %d%n", gpu, S == 1 ? "decode" : "verify", S, H, D, W, K, reps, threshold);
                System.out.println();
                System.out.println("| context | layer | n_attn | path | µs per call | of which conversion µs | TFLOP/s | % of peak | GB/s | % of HBM |");
                System.out.println("|---:|---|---:|---|---:|---:|---:|---:|---:|---:|");
                for (int ctx : contexts)
                    for (int kind : new int[]{DS4J_ATTN_CSA(), DS4J_ATTN_HCA()})
                        try (Layer L = new Layer(gpu, kind, ctx, S, 7 + ctx)) {
                            L.run(reps, threshold, peak32, peak16, peakGbs);
                        }
                System.out.println();
                System.out.printf("Lightning Indexer of one CSA layer: S %d, H_I 64, d_I %d, top %d; DS4J_INDEXER_TC=%s, DS4J_TOPK_MULTI=%s%n",
                        S, DI, K, envOr("DS4J_INDEXER_TC", "1"), envOr("DS4J_TOPK_MULTI", "1"));
                System.out.println();
                System.out.println("| context | keys | scores µs (F16 in place) | GB/s | scores µs (F32 copies) | GB/s | top-k µs |");
                System.out.println("|---:|---:|---:|---:|---:|---:|---:|");
                for (int ctx : contexts)
                    try (Layer L = new Layer(gpu, DS4J_ATTN_CSA(), ctx, S, 7 + ctx)) {
                        L.indexer(reps);
                    }
                System.out.println();
            }
        }
    }

    static String envOr(String name, String dflt) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? dflt : v;
    }

    /** One layer's cache and a step's inputs on the device. */
    static final class Layer implements AutoCloseable {
        final Gpu gpu;
        final int kind, m, S, count, idxCount;
        final long N0;
        final List<Long> allocs = new ArrayList<>();
        final long q, kvNew, sinks, ring, entries, sel, idxKeys, out, ring32, entries32, idx32;
        final long flops, distinctCompressed;
        final int[] nk;

        Layer(Gpu gpu, int kind, int ctx, int S, long seed) {
            this.gpu = gpu;
            this.kind = kind;
            this.m = kind == DS4J_ATTN_CSA() ? 4 : 128;
            this.S = S;
            this.N0 = ctx - S;
            if (N0 < 0) throw new IllegalArgumentException("context " + ctx + " is shorter than the step (" + S + ")");
            SplittableRandom r = new SplittableRandom(seed);
            count = ctx / m;
            idxCount = kind == DS4J_ATTN_CSA() ? ctx / 4 : 0;
            q = upload(gauss(r, S * H * D));
            float[] kn = gauss(r, S * D);
            for (int i = 0; i < kn.length; i++) kn[i] = Float.float16ToFloat(Float.floatToFloat16(kn[i]));
            kvNew = upload(kn);
            sinks = upload(gauss(r, H));
            ring = uploadF16(r, (long) CAP * D);
            entries = uploadF16(r, (long) count * D);
            idxKeys = idxCount == 0 ? 0 : uploadF16(r, (long) idxCount * DI);
            int[] picks = new int[S * K];
            Set<Integer> distinct = new HashSet<>();
            nk = new int[S];
            long f = 0;
            for (int s = 0; s < S; s++) {
                long t = N0 + s;
                int avail = (int) ((t + 1) / m);
                int nc = avail;
                if (kind == DS4J_ATTN_CSA() && avail > K) {
                    int[] p = r.ints(0, avail).distinct().limit(K).sorted().toArray();
                    System.arraycopy(p, 0, picks, s * K, K);
                    for (int e : p) distinct.add(e);
                    nc = K;
                } else for (int e = 0; e < avail; e++) distinct.add(e);
                nk[s] = (int) Math.min(t + 1, W) + nc;
                f += 4L * H * D * nk[s];
            }
            flops = f;
            distinctCompressed = distinct.size();
            sel = kind == DS4J_ATTN_CSA() ? upload(picks) : 0;
            out = alloc(4L * S * H * D);
            ring32 = alloc(4L * CAP * D);
            entries32 = alloc(4L * Math.max(1, count) * D);
            idx32 = idxCount == 0 ? 0 : alloc(4L * idxCount * DI);
        }

        long alloc(long bytes) {
            long p = gpu.malloc(Math.max(256, bytes), "benchmark");
            allocs.add(p);
            return p;
        }

        long upload(float[] v) {
            long p = alloc(4L * v.length);
            gpu.upload(p, v);
            return p;
        }

        long upload(int[] v) {
            long p = alloc(4L * v.length);
            gpu.upload(p, v);
            return p;
        }

        long uploadF16(SplittableRandom r, long n) {
            long p = alloc(2 * n);
            final int chunk = 1 << 22;
            for (long off = 0; off < n; off += chunk) {
                short[] h = new short[(int) Math.min(chunk, n - off)];
                for (int i = 0; i < h.length; i++) h[i] = Float.floatToFloat16((float) r.nextGaussian());
                gpu.upload(p + 2 * off, h);
            }
            return p;
        }

        static float[] gauss(SplittableRandom r, int n) {
            float[] a = new float[n];
            for (int i = 0; i < n; i++) a[i] = (float) r.nextGaussian();
            return a;
        }

        float scale() {
            return (float) (1.0 / Math.sqrt(D));
        }

        void convert() {
            check(ds4j_f16_to_f32(gpu.ctx(), ptr(ring), ptr(ring32), (long) CAP * D), "f16_to_f32");
            if (count > 0) check(ds4j_f16_to_f32(gpu.ctx(), ptr(entries), ptr(entries32), (long) count * D), "f16_to_f32");
            if (idxCount > 0) check(ds4j_f16_to_f32(gpu.ctx(), ptr(idxKeys), ptr(idx32), (long) idxCount * DI), "f16_to_f32");
        }

        void control() {
            convert();
            attentionF32();
        }

        int threshold;

        void attentionF32() {
            check(ds4j_attention_f16_operands_f32(gpu.ctx(), ptr(q), ptr(kvNew), ptr(ring32), CAP, ptr(entries32), kind, m, ptr(sel), K,
                    ptr(sinks), N0, S, H, D, W, scale(), threshold, DS4J_F16OPS_AUTO(), ptr(work), workBytes, ptr(out)),
                    "attention_f16_operands_f32");
        }

        void inPlace() {
            check(ds4j_attention(gpu.ctx(), ptr(q), ptr(kvNew), ptr(ring), CAP, ptr(entries), kind, m, ptr(sel), K, ptr(sinks),
                    N0, S, H, D, W, scale(), ptr(out)), "attention");
        }

        long workBytes, work;

        void tensorCores() {
            check(ds4j_attention_f16_operands(gpu.ctx(), ptr(q), ptr(kvNew), ptr(ring), CAP, ptr(entries), kind, m, ptr(sel), K,
                    ptr(sinks), N0, S, H, D, W, scale(), 0L, DS4J_F16OPS_AUTO(), ptr(work), workBytes, ptr(out)), "attention_f16_operands");
        }

        double time(Runnable r, int reps) {
            r.run();
            gpu.sync();
            long t0 = System.nanoTime();
            for (int i = 0; i < reps; i++) r.run();
            gpu.sync();
            return (System.nanoTime() - t0) / 1e3 / reps;
        }

        void run(int reps, int threshold, double peak32, double peak16, double peakGbs) {
            this.threshold = threshold;
            try (Arena a = Arena.ofConfined()) {
                MemorySegment b = a.allocate(ValueLayout.JAVA_LONG);
                check(ds4j_attention_f16_operands_work(gpu.ctx(), kind, m, K, N0, S, H, D, W, 0L, DS4J_F16OPS_AUTO(), b), "work");
                workBytes = b.get(ValueLayout.JAVA_LONG, 0);
            }
            work = workBytes == 0 ? 0 : alloc(workBytes);
            long nAttn = nk[S - 1];
            // least traffic: distinct attended rows once, q and the output
            long windowRows = Math.min(N0, W - 1);
            long io = 2L * S * H * D * 4;
            long rows16 = (windowRows + distinctCompressed) * D * 2 + (long) S * D * 4 + io;
            long rows32 = (windowRows + distinctCompressed) * D * 4 + (long) S * D * 4 + io;
            long converted = (long) CAP * D + (long) count * D + (long) idxCount * DI;
            double conv = time(this::convert, reps);
            double ctl = time(this::control, reps);
            double f32 = time(this::attentionF32, reps);
            double inpl = time(this::inPlace, reps);
            double tc = time(this::tensorCores, reps);
            String layer = kind == DS4J_ATTN_CSA() ? "CSA" : "HCA";
            boolean full = nAttn <= threshold;
            row(layer, nAttn, "f32-convert (control)", ctl, String.format(Locale.ROOT, "%.1f", conv), rows32 + 6 * converted,
                    full ? peak32 : peak16, peakGbs);
            row(layer, nAttn, "f32 copies, attention alone", f32, "–", rows32, full ? peak32 : peak16, peakGbs);
            row(layer, nAttn, "f16 full-F32" + (full ? " (picked)" : ""), inpl, "–", rows16, peak32, peakGbs);
            row(layer, nAttn, "f16 tensor-core" + (full ? "" : " (picked)"), tc, "–", rows16, peak16, peakGbs);
        }

        /** The indexer's scores (F16 keys, F32 copies) and top-k at this layer's context, one row of the table. */
        void indexer(int reps) {
            final int HI = 64;
            SplittableRandom r = new SplittableRandom(N0 + 3);
            long qi = upload(gauss(r, S * HI * DI)), wt = upload(gauss(r, S * HI));
            long scores = alloc(4L * S * idxCount), picks = alloc(4L * S * K);
            check(ds4j_f16_to_f32(gpu.ctx(), ptr(idxKeys), ptr(idx32), (long) idxCount * DI), "f16_to_f32");
            float ws = (float) (1 / Math.sqrt(HI)), ss = (float) (1 / Math.sqrt(DI));
            double f16 = time(() -> check(ds4j_indexer_scores(gpu.ctx(), ptr(qi), ptr(wt), ptr(idxKeys), N0, S, 4, HI, DI, K, ws, ss,
                    ptr(scores), idxCount), "indexer_scores"), reps);
            double f32 = time(() -> check(ds4j_indexer_scores_f32(gpu.ctx(), ptr(qi), ptr(wt), ptr(idx32), N0, S, 4, HI, DI, K, ws, ss,
                    ptr(scores), idxCount), "indexer_scores_f32"), reps);
            double topk = time(() -> check(ds4j_indexer_topk(gpu.ctx(), ptr(scores), idxCount, N0, S, 4, K, ptr(picks)), "indexer_topk"), reps);
            long written = 4L * S * idxCount, keys = (long) idxCount * DI;
            System.out.printf(Locale.ROOT, "| %,d | %,d | %.1f | %.0f | %.1f | %.0f | %.1f |%n", N0 + S, idxCount, f16,
                    (2 * keys + written) / (f16 * 1e-6) / 1e9, f32, (4 * keys + written) / (f32 * 1e-6) / 1e9, topk);
        }

        void row(String layer, long nAttn, String path, double us, String conv, long bytes, double peakT, double peakGbs) {
            double tflops = flops / (us * 1e-6) / 1e12, gbs = bytes / (us * 1e-6) / 1e9;
            System.out.printf(Locale.ROOT, "| %,d | %s | %d | %s | %.1f | %s | %.2f | %.1f %% | %.0f | %.1f %% |%n", N0 + S, layer, nAttn, path,
                    us, conv, tflops, 100 * tflops / peakT, gbs, 100 * gbs / peakGbs);
        }

        @Override
        public void close() {
            for (long p : allocs) gpu.free(p);
        }
    }
}
