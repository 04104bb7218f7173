package io.ds4j.gpu;

import io.ds4j.engine.Sequence;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.WeightMatrix;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.model.synth.RandomCheckpoint;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

/**
 * GPU benchmark of the HIP backend (tools/device/run.sh bench): prefill tokens/s at a prompt length, decode
 * tokens/s (batch 1) at one or more context lengths, bytes read per decoded token (weights actually touched: dense
 * matrices, the k routed experts of every layer, lm_head, plus the F16 cache rows read) and the achieved bandwidth
 * against a peak (default 4.8 TB/s, the H200's). A benchmark, not a test: it prints figures and asserts nothing.
 *
 * <pre>
 * java ... io.ds4j.gpu.GpuBench [--model DIR | --preset NAME [--dtype bf16|fp8] [--layers L] [--experts E]]
 *      [--prompt-tokens 4096] [--chunk 512] [--decode-tokens 32] [--contexts 4096,59933] [--max-prefill 131072]
 *      [--peak-gbs 4800] [--graph-rounds 3] [--verify-rows 5] [--verify-paths f32-convert,f16@1024] [--batches 1,4,16,64]
 *      [--attention f32-convert|f16|PATH@ROWS]
 * </pre>
 * {@code --verify-paths}: the verify attention paths the verify step is timed on, in turn (default: the backend's
 * start-up path); {@code PATH@N} is that path with {@code verify.f32ShortContextRows} N (e.g. {@code f32-convert@4096}:
 * every query of up to 4,096 attended rows in plain F32, the control's arithmetic before the forty-sixth session).
 * {@code --attention}: the path and threshold of every decode and verify step of the run.
 * {@code --chunk-at CTX,...}: one prefill chunk of --chunk tokens at each of these contexts ({@link #chunkAt}).
 * {@code --batches}: batched decode at each context (copies of the prefilled sequence stepped together, see
 * {@link #batched}).
 * Decode-step graphs ({@link DecodeGraphs}): the decode rate is measured with the default setting
 * ({@code -Dds4j.gpu.graphs}, off unless turned on), then with graphs off and on in interleaved A/B rounds of
 * --decode-tokens steps at the same context (each round's tokens are rolled back; 0 rounds skips it), with, per
 * setting, the kernel launches, copies and graph launches per step (ds4j_launch_counts) and the host time per step
 * until its last launch was queued ({@link HipBackend#hostTime}).
 * Contexts up to --max-prefill are prefilled for real, in chunks of --chunk tokens (prefill chunks run on tensor
 * cores where the GPU has them; the output says), and the prefill time and rate are printed; longer ones start from
 * a synthetic cache of random F16 rows (HipSequence#fillRandom: real sizes and access pattern, meaningless values).
 * A preset model comes from the model store ({@link ModelStore#ensureVariant}; fp8: original naming, FP8 + FP4 as released).
 */
public final class GpuBench {
    private GpuBench() {}

    public static void main(String[] args) throws Exception {
        String model = null, preset = "flash-shaped", dtype = "fp8";
        Integer layers = null, experts = null;
        int prompt = 4096, chunk = 512, decode = 32, maxPrefill = 131072, graphRounds = 3, verifyRows = 0;
        double peak = 4800;
        List<Integer> contexts = new ArrayList<>(), batches = new ArrayList<>(), chunkAt = new ArrayList<>();
        List<String> verifyPaths = new ArrayList<>();
        String attention = null;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            switch (a) {
                case "--model" -> model = args[++i];
                case "--preset" -> preset = args[++i];
                case "--dtype" -> dtype = args[++i];
                case "--layers" -> layers = Integer.parseInt(args[++i]);
                case "--experts" -> experts = Integer.parseInt(args[++i]);
                case "--prompt-tokens" -> prompt = Integer.parseInt(args[++i]);
                case "--chunk" -> chunk = Integer.parseInt(args[++i]);
                case "--decode-tokens" -> decode = Integer.parseInt(args[++i]);
                case "--contexts" -> { for (String s : args[++i].split(",")) contexts.add(Integer.parseInt(s.trim())); }
                case "--peak-gbs" -> peak = Double.parseDouble(args[++i]);
                case "--max-prefill" -> maxPrefill = Integer.parseInt(args[++i]);
                case "--graph-rounds" -> graphRounds = Integer.parseInt(args[++i]);
                case "--verify-rows" -> verifyRows = Integer.parseInt(args[++i]);
                case "--verify-paths" -> verifyPaths.addAll(List.of(args[++i].split(",")));
                case "--attention" -> attention = args[++i];
                case "--batches" -> { for (String s : args[++i].split(",")) batches.add(Integer.parseInt(s.trim())); }
                case "--chunk-at" -> { for (String s : args[++i].split(",")) chunkAt.add(Integer.parseInt(s.trim())); }
                default -> throw new IllegalArgumentException("unknown option " + a);
            }
        }
        if (contexts.isEmpty()) contexts.add(prompt);
        Path dir;
        if (model != null) dir = Path.of(model);
        else dir = ModelStore.ensureVariant(preset, layers, experts, RandomCheckpoint.Storage.parse(dtype), 1, System.out::println);

        ModelWeights w = WeightLoader.load(dir);
        ModelConfig c = w.config;
        long expertBytes = 0, denseBytes = w.lmHead.storedBytes() + w.hcHeadFn.storedBytes() + w.embed.rowBytes();
        for (ModelWeights.Layer L : w.layers) {
            for (WeightMatrix m : new WeightMatrix[]{L.attnHcFn, L.ffnHcFn, L.qA, L.qB, L.kv, L.oA, L.oB, L.gate, L.sharedW1,
                    L.sharedW2, L.sharedW3}) denseBytes += m.storedBytes();
            if (L.compressor != null) denseBytes += L.compressor.kvProj.storedBytes() + L.compressor.gateProj.storedBytes();
            if (L.indexer != null) denseBytes += L.indexer.qB.storedBytes() + L.indexer.weightsProj.storedBytes()
                    + L.indexer.compressor.kvProj.storedBytes() + L.indexer.compressor.gateProj.storedBytes();
            expertBytes += (long) c.expertsPerToken * (L.w1[0].storedBytes() + L.w2[0].storedBytes() + L.w3[0].storedBytes());
        }
        try (HipBackend be = new HipBackend(w)) {
            if (attention != null) {
                setPath(be, attention);
                System.out.println("attention path for every decode and verify step: " + attention);
            }
            System.out.printf("model %s: %s%n  GPU %s, weights on device %s; prefill steps (>= %d rows) on %s%n", dir, c, be.gpu(),
                    Gpu.mib(be.weightBytes()), io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_TC_MIN_ROWS(),
                    be.gpu().tensorCores() ? "tensor cores" : "FFMA kernels (no tensor-core path here)");
            SplittableRandom r = new SplittableRandom(1);
            int maxCtx = Math.max(prompt, contexts.stream().mapToInt(Integer::intValue).max().orElse(prompt));
            for (int n : chunkAt) maxCtx = Math.max(maxCtx, n + chunk);
            final int maxPre = maxPrefill, ch = chunk, dec = decode, promptT = prompt;  // for the lambdas below
            int[] toks = new int[maxCtx + 2 * decode + 2 + verifyRows]; // the verify step reads rows past the decoded ones
            for (int i = 0; i < toks.length; i++) toks[i] = r.nextInt(c.vocabSize);
            // warm-up (module load, workspace growth)
            try (Sequence s = be.newSequence(16)) {
                be.forward(s, toks, 0, Math.min(chunk, prompt), new int[]{0});
                be.forward(s, toks, 0, 1, new int[]{0});
            }
            // prefill
            double bestPrefill = 0;
            for (int rep = 0; rep < 2; rep++) {
                try (Sequence s = be.newSequence(16)) {
                    long t0 = System.nanoTime();
                    prefill(be, s, toks, prompt, chunk);
                    bestPrefill = Math.max(bestPrefill, prompt / ((System.nanoTime() - t0) / 1e9));
                }
            }
            System.out.printf("prefill: %.0f tokens/s (%d tokens, chunks of %d)%n", bestPrefill, prompt, chunk);
            try (Sequence s = be.newSequence(16)) {
                prefill(be, s, toks, Math.max(0, prompt - chunk), chunk);
                profiled(be, "  one prefill chunk of " + Math.min(chunk, prompt) + " tokens at context " + Math.max(0, prompt - chunk),
                        () -> prefill(be, s, toks, Math.min(ch, promptT), ch));
            }
            for (int ctx : chunkAt) chunkAt(be, toks, ctx, chunk);
            for (int ctx : contexts) {
                try (HipSequence s = be.newSequence(Math.max(16, decode))) {
                    long t0 = System.nanoTime();
                    boolean synthetic = ctx > maxPre;
                    if (synthetic) s.fillRandom(ctx, 7);
                    else prefill(be, s, toks, ctx, chunk);
                    double pre = (System.nanoTime() - t0) / 1e9;
                    be.forward(s, toks, ctx, 1, new int[]{0}); // warm
                    long t1 = System.nanoTime();
                    for (int i = 1; i <= decode; i++) be.forward(s, toks, ctx + i, 1, new int[]{0});
                    double tps = decode / ((System.nanoTime() - t1) / 1e9);
                    long cache = cacheBytes(c, ctx);
                    double bytes = denseBytes + expertBytes + cache;
                    double gbs = bytes * tps / 1e9;
                    System.out.printf("decode at context %d: %.1f tokens/s (batch 1; %s %.1f s%s)%n", ctx, tps,
                            synthetic ? "synthetic random cache, filled in" : "prefill of the context took", pre,
                            synthetic ? "" : String.format(", %.0f tokens/s", ctx / pre));
                    System.out.printf("  bytes per decoded token: %.1f MB weights (%.1f MB dense + head, %.1f MB routed experts) + %.2f MB cache%n",
                            (denseBytes + expertBytes) / 1e6, denseBytes / 1e6, expertBytes / 1e6, cache / 1e6);
                    System.out.printf("  achieved %.0f GB/s = %.1f%% of %.0f GB/s (decode-step graphs %s)%n", gbs, 100 * gbs / peak, peak,
                            be.graphs() ? "on" : "off");
                    if (graphRounds > 0) graphsAB(be, s, toks, decode, graphRounds);
                    profiled(be, "  one decode step", () -> be.forward(s, toks, ctx + dec + 1, 1, new int[]{0}));
                    if (verifyRows > 0) {
                        if (verifyPaths.isEmpty()) verifyStep(be, s, toks, verifyRows, decode);
                        else for (String path : verifyPaths) verifyStep(be, s, toks, verifyRows, decode, path);
                    }
                    if (!batches.isEmpty()) batched(be, s, Math.max(16, decode), toks, decode, batches);
                }
            }
        }
    }

    /**
     * Decode tokens/s with decode-step graphs off and on, interleaved (the order alternates per round): each batch
     * decodes n tokens from the sequence's current length and rolls them back, so all run at the same context. One
     * untimed batch per setting first (executable graphs built, caches warm).
     */
    static void graphsAB(HipBackend be, HipSequence s, int[] toks, int n, int rounds) {
        boolean initial = be.graphs();
        if (!initial) {
            try {
                be.setGraphs(true);
            } catch (UnsupportedOperationException e) {
                System.out.println("  decode-step graphs A/B skipped: " + e.getMessage());
                return;
            }
        }
        int pos = s.length();
        double[][] tps = new double[2][rounds];
        // per setting over the timed rounds: kernel launches, copies, graph launches, host ns, steps
        long[][] work = new long[2][5];
        DecodeGraphs.Stats before = null;
        for (int r = -1; r < rounds; r++) {
            if (r == 0) before = be.graphStats();
            for (int j = 0; j < 2; j++) {
                boolean on = (j == 0) == (r % 2 == 0);
                be.setGraphs(on);
                long[] l0 = be.gpu().launchCounts();
                HipBackend.HostTime h0 = be.hostTime();
                long t0 = System.nanoTime();
                for (int i = 0; i < n; i++) be.forward(s, toks, pos + i, 1, new int[]{0});
                double rate = n / ((System.nanoTime() - t0) / 1e9);
                long[] l1 = be.gpu().launchCounts();
                HipBackend.HostTime h1 = be.hostTime();
                s.rollback(n);
                if (r >= 0) {
                    tps[on ? 1 : 0][r] = rate;
                    long[] w = work[on ? 1 : 0];
                    for (int k = 0; k < 3; k++) w[k] += l1[k] - l0[k];
                    w[3] += h1.nanos() - h0.nanos();
                    w[4] += h1.steps() - h0.steps();
                }
            }
        }
        be.setGraphs(initial);
        DecodeGraphs.Stats after = be.graphStats();
        double off = median(tps[0]), on = median(tps[1]);
        System.out.printf("  decode-step graphs A/B at context %d (%d interleaved rounds of %d tokens):%n", pos, rounds, n);
        System.out.printf("    off: %s tokens/s, median %.1f%n", rates(tps[0]), off);
        System.out.printf("    on:  %s tokens/s, median %.1f (%+.1f%%); executable graphs updated %d, built %d (%d refused updates),"
                        + " refused captures %d%n", rates(tps[1]), on, 100 * (on / off - 1), after.updated() - before.updated(),
                after.instantiated() - before.instantiated() + after.reinstantiated() - before.reinstantiated(),
                after.reinstantiated() - before.reinstantiated(), after.fallbacks() - before.fallbacks());
        System.out.printf("    on:  steps replayed from a kept graph %d, captured once for their shape %d, re-recorded %d%n",
                after.replayed() - before.replayed(), after.kept() - before.kept(), after.captured() - before.captured());
        for (int j = 0; j < 2; j++) {
            long[] w = work[j];
            double st = Math.max(1, w[4]);
            System.out.printf("    %s per step: %.1f kernel launches, %.1f copies, %.2f graph launches; host %.3f ms until the last"
                            + " launch was queued%n", j == 1 ? "on: " : "off:", w[0] / st, w[1] / st, w[2] / st, w[3] / st / 1e6);
        }
    }

    /**
     * {@link #verifyStep(HipBackend, HipSequence, int[], int, int)} on the verify attention path {@code path}
     * ({@code f32-convert}, {@code f16} or {@code PATH@ROWS}: that path with that short-context threshold); the
     * backend's path and threshold are restored afterwards.
     * @throws IllegalArgumentException for an unknown path
     */
    static void verifyStep(HipBackend be, HipSequence s, int[] toks, int rows, int n, String path) {
        io.ds4j.engine.VerifyAttention before = be.verifyAttention();
        int rowsBefore = be.f32ShortContextRows();
        setPath(be, path);
        System.out.println("  verify path " + path + ":");
        try {
            verifyStep(be, s, toks, rows, n);
        } finally {
            be.setVerifyAttention(before);
            be.setF32ShortContextRows(rowsBefore);
        }
    }

    /**
     * Sets the backend's attention path for decode and verify steps: {@code f32-convert}, {@code f16} or {@code PATH@ROWS}
     * (that path with that short-context threshold).
     * @throws IllegalArgumentException for an unknown path or a threshold out of range
     */
    static void setPath(HipBackend be, String path) {
        int at = path.indexOf('@');
        String key = at < 0 ? path : path.substring(0, at);
        io.ds4j.engine.VerifyAttention p = java.util.Arrays.stream(io.ds4j.engine.VerifyAttention.values())
                .filter(v -> v.key().equals(key)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("attention path: f32-convert, f16 or PATH@ROWS, got " + path));
        be.setVerifyAttention(p);
        if (at >= 0) be.setF32ShortContextRows(Integer.parseInt(path.substring(at + 1)));
    }

    /**
     * A verify step of `rows` rows at the sequence's context against a decode step there: both timed over n steps (each
     * rolled back), then one verify step's profile by category.
     */
    static void verifyStep(HipBackend be, HipSequence s, int[] toks, int rows, int n) {
        int pos = s.length();
        int[] want = java.util.stream.IntStream.range(0, rows).toArray();
        be.forward(s, toks, pos, rows, want, io.ds4j.engine.StepKind.VERIFY);
        s.rollback(rows);
        long t0 = System.nanoTime();
        for (int i = 0; i < n; i++) {
            be.forward(s, toks, pos, rows, want, io.ds4j.engine.StepKind.VERIFY);
            s.rollback(rows);
        }
        double verifyMs = (System.nanoTime() - t0) / 1e6 / n;
        t0 = System.nanoTime();
        for (int i = 0; i < n; i++) {
            be.forward(s, toks, pos, 1, new int[]{0}, io.ds4j.engine.StepKind.DECODE);
            s.rollback(1);
        }
        double decodeMs = (System.nanoTime() - t0) / 1e6 / n;
        System.out.printf("  verify step of %d rows at context %d: %.2f ms = %.2fx a decode step (%.2f ms)%n", rows, pos, verifyMs,
                verifyMs / decodeMs, decodeMs);
        profiled(be, "  one verify step", () -> be.forward(s, toks, pos, rows, want, io.ds4j.engine.StepKind.VERIFY));
        s.rollback(rows);
    }

    /**
     * Batched decode: for each batch size N, N copies of the prefilled sequence step together (one step of N decode
     * entries per token), n steps timed after one warm-up step, then rolled back so that every size runs at the same
     * context (n must not exceed maxRollback, the source's rollback window); aggregate tokens/s, per-step time and the
     * ratio to batch 1 of the same run. Each size first runs n untimed steps (graph capture and warm-up), then for N > 1
     * three rounds, whose median is printed with how many of the first round's steps replayed a kept graph. With graphs
     * off each round times both attention settings, the several-sequence kernels (grouped) and one entry at a time, which
     * goes first alternating; with graphs on an all-decode step takes the backend's fixed form, which runs every entry through the
     * several-sequence kernels whatever that setting, so one setting is timed (printing both would time one graph twice
     * and show the first-run warm-up as a difference). The profiles of one step of the largest size follow, in each setting
     * (a profiled step runs kernel by kernel, outside the fixed form; by operation with
     * -Dds4j.gpu.profileByOperation=true).
     */
    static void batched(HipBackend be, HipSequence s, int maxRollback, int[] toks, int n, List<Integer> sizes) {
        int pos = s.length();
        double one = 0;
        int largest = sizes.stream().mapToInt(Integer::intValue).max().orElse(1);
        System.out.printf("  batched decode at context %d (%d timed steps per size; every entry a decode token):%n", pos, n);
        for (int N : sizes) {
            List<Sequence> seqs = new ArrayList<>();
            try {
                for (int i = 0; i < N; i++) seqs.add(be.fork(s, maxRollback)); // copies need the source's ring sizes
                // the warm-up: the first steps of a size capture its graph and run slower, in whichever setting
                // went first
                batchSteps(be, seqs, toks, pos, n);
                for (Sequence q : seqs) q.rollback(n);
                // batch 1 once; for N > 1 the rounds, with graphs off the two attention settings interleaved (the order
                // alternates) so that neither gains from going second; each setting's median over the rounds
                int settings = N == 1 || be.graphs() ? 1 : 2, rounds = N == 1 ? 1 : 3;
                double[][] rate = new double[2][rounds];
                DecodeGraphs.Stats[][] gs = new DecodeGraphs.Stats[2][2];
                for (int r = 0; r < rounds; r++)
                    for (int j = 0; j < settings; j++) {
                        // one setting: grouped in every round; two: alternating which goes first
                        boolean grouped = settings == 1 || (j == 0) == (r % 2 == 0);
                        be.setGroupedAttention(grouped);
                        batchSteps(be, seqs, toks, pos, 1);
                        for (Sequence q : seqs) q.rollback(1);
                        DecodeGraphs.Stats g0 = be.graphStats();
                        long t0 = System.nanoTime();
                        batchSteps(be, seqs, toks, pos, n);
                        double sec = (System.nanoTime() - t0) / 1e9;
                        DecodeGraphs.Stats g1 = be.graphStats();
                        for (Sequence q : seqs) q.rollback(n);
                        rate[grouped ? 0 : 1][r] = (double) N * n / sec;
                        if (r == 0) gs[grouped ? 0 : 1] = new DecodeGraphs.Stats[]{g0, g1};
                    }
                for (int j = 0; j < settings; j++) {
                    double agg = median(rate[j]);
                    if (N == 1) one = agg;
                    DecodeGraphs.Stats g0 = gs[j][0], g1 = gs[j][1];
                    System.out.printf("    batch %3d%s: %8.1f tokens/s aggregate, %6.1f per stream, %7.2f ms a step, %5.2fx batch 1%s%n", N,
                            N == 1 ? "          " : settings == 1 ? " (fixed)  " : j == 0 ? " (grouped)" : " (entries)", agg, agg / N, 1e3 * N / agg,
                            one > 0 ? agg / one : Double.NaN,
                            (rounds > 1 ? " (rounds " + rates(rate[j]) + ")" : "") + String.format("; first round's steps: %d kept graphs replayed, %d captured",
                                    g1.replayed() - g0.replayed(), g1.captured() + g1.kept() - g0.captured() - g0.kept()));
                }
                if (N == largest && N > 1)
                    for (boolean grouped : new boolean[]{true, false}) {
                        be.setGroupedAttention(grouped);
                        profiled(be, "    one step of " + N + " decode entries, attention " + (grouped ? "grouped" : "one entry at a time")
                                + ",", () -> batchSteps(be, seqs, toks, pos, 1));
                        for (Sequence q : seqs) q.rollback(1);
                    }
            } finally {
                be.setGroupedAttention(true);
                for (Sequence q : seqs) q.close();
            }
        }
    }

    /**
     * One prefill chunk of `chunk` tokens at a long context (a synthetic cache of ctx tokens, HipSequence#fillRandom):
     * the median of 5 timed chunks (each rolled back), then one chunk's profile. What a long prompt's chunk adds to the
     * steps of the streams decoding beside it.
     */
    static void chunkAt(HipBackend be, int[] toks, int ctx, int chunk) {
        try (HipSequence s = be.newSequence(Math.max(16, chunk))) {
            s.fillRandom(ctx, 7);
            be.forward(s, toks, ctx, chunk, new int[]{chunk - 1}); // warm
            s.rollback(chunk);
            double[] ms = new double[5];
            for (int i = 0; i < ms.length; i++) {
                long t0 = System.nanoTime();
                be.forward(s, toks, ctx, chunk, new int[]{chunk - 1});
                ms[i] = (System.nanoTime() - t0) / 1e6;
                s.rollback(chunk);
            }
            System.out.printf("prefill chunk of %d tokens at context %d (synthetic cache): %.2f ms median (%s)%n", chunk, ctx,
                    median(ms), rates(ms));
            profiled(be, " ", () -> be.forward(s, toks, ctx, chunk, new int[]{chunk - 1}));  // "  by category ..."
        }
    }

    /** Runs step once with every operation waited for and timed, then prints "HEADING by category (...)" and the profile. */
    private static void profiled(HipBackend be, String heading, Runnable step) {
        be.setProfiling(true);
        try {
            step.run();
            System.out.print(heading + " by category (each op waited for):\n" + be.takeProfile());
        } finally {
            be.setProfiling(false);
        }
    }

    /** n batched decode steps: entry i gets token toks[pos + step + i] (different tokens per stream). */
    private static void batchSteps(HipBackend be, List<Sequence> seqs, int[] toks, int pos, int n) {
        for (int t = 0; t < n; t++) {
            List<io.ds4j.engine.BatchEntry> batch = new ArrayList<>();
            for (int i = 0; i < seqs.size(); i++)
                batch.add(new io.ds4j.engine.BatchEntry(seqs.get(i), new int[]{toks[(pos + t + i) % toks.length]}, new int[]{0},
                        io.ds4j.engine.StepKind.DECODE));
            be.step(batch);
        }
    }

    private static double median(double[] v) {
        double[] c = v.clone();
        java.util.Arrays.sort(c);
        return c.length % 2 == 1 ? c[c.length / 2] : (c[c.length / 2 - 1] + c[c.length / 2]) / 2;
    }

    private static String rates(double[] v) {
        StringBuilder b = new StringBuilder();
        for (double x : v) b.append(b.isEmpty() ? "" : " ").append(String.format("%.1f", x));
        return b.toString();
    }

    static void prefill(HipBackend be, Sequence s, int[] toks, int n, int chunk) {
        for (int off = 0; off < n; off += chunk) {
            int m = Math.min(chunk, n - off);
            be.forward(s, toks, off, m, off + m == n ? new int[]{m - 1} : new int[0]);
        }
    }

    /** F16 cache bytes one decode step reads at context ctx (window rows, HCA entries, CSA keys and picks). */
    static long cacheBytes(ModelConfig c, int ctx) {
        long b = 0;
        for (int l = 0; l < c.numLayers; l++) {
            b += (long) Math.min(ctx, c.slidingWindow) * c.headDim * 2;
            if (c.layerTypes[l] == AttentionKind.HCA) b += (long) (ctx / c.hcaRatio) * c.headDim * 2;
            if (c.layerTypes[l] == AttentionKind.CSA)
                b += (long) (ctx / c.csaRatio) * c.indexHeadDim * 2 + (long) Math.min(c.indexTopk, ctx / c.csaRatio) * c.headDim * 2;
        }
        return b;
    }
}
