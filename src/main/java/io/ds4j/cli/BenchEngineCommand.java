package io.ds4j.cli;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.CpuSequence;
import io.ds4j.kernels.MemBandwidth;
import io.ds4j.kernels.Parallel;
import io.ds4j.kernels.ProductProfile;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.WeightMatrix;
import io.ds4j.model.synth.ModelStore;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.nio.file.Path;
import java.util.SplittableRandom;
import java.util.concurrent.Callable;

/**
 * {@code ds4j bench-engine}: prefill and decode throughput of the CPU backend, the weight bytes a decode step reads,
 * and the achieved bandwidth against a read bandwidth this command measures on the same machine. A benchmark,
 * not a test: it prints figures and asserts nothing.
 */
@Command(name = "bench-engine", mixinStandardHelpOptions = true,
        description = "Measure CPU prefill/decode tokens/s and decode memory bandwidth use.")
public final class BenchEngineCommand implements Callable<Integer> {
    static final class Source {
        @Option(names = "--model", paramLabel = "DIR", description = "model directory") Path model;
        @Option(names = "--preset", paramLabel = "NAME", description = "preset model (tiny, small, flash-shaped), created on first use") String preset;
    }

    @ArgGroup(exclusive = true, multiplicity = "0..1") Source source = new Source();
    @Option(names = "--seed", defaultValue = "1", description = "seed of the preset model (default ${DEFAULT-VALUE})") long seed;
    @Option(names = "--prompt-tokens", defaultValue = "512", description = "prefill length in tokens (default ${DEFAULT-VALUE})") int promptTokens;
    @Option(names = "--decode-tokens", defaultValue = "64", description = "decode steps to time (default ${DEFAULT-VALUE})") int decodeTokens;
    @Option(names = "--chunk", defaultValue = "512", description = "prefill chunk size in tokens (default ${DEFAULT-VALUE})") int chunk;
    @Option(names = "--repeats", defaultValue = "3", description = "timed runs, each followed by a read-bandwidth pass at least as long as its decode; the best prefill, the best decode and the best pass are reported (default ${DEFAULT-VALUE})") int repeats;
    @Option(names = "--warmup", defaultValue = "1", description = "untimed runs before the timed ones, so that the JIT compiler has compiled the kernels (default ${DEFAULT-VALUE})") int warmup;
    @Option(names = "--max-context", defaultValue = "65536",
            description = "largest prompt + decode length this run may use (default ${DEFAULT-VALUE}); also capped by the model's max_position_embeddings")
    int maxContext;
    @Option(names = "--batch", defaultValue = "1",
            description = "also time batched decode: N sequences (copies of the prefilled prompt) stepped together, one step of N decode entries per token, each run next to a batch-1 run of the same steps; prints the aggregate tokens/s and its ratio to batch 1 (default ${DEFAULT-VALUE}: off)")
    int batch;
    @Option(names = "--no-bandwidth", description = "skip the memory bandwidth measurement") boolean noBandwidth;
    @Option(names = "--profile", description = "time the decode steps' matrix-vector products (by hand-off to the worker pool) and print where a decoded token's time went in the best run")
    boolean profile;

    @Override
    public Integer call() throws Exception {
        atLeast("--prompt-tokens", promptTokens, 1);
        atLeast("--decode-tokens", decodeTokens, 1);
        atLeast("--chunk", chunk, 1);
        atLeast("--repeats", repeats, 1);
        atLeast("--warmup", warmup, 0);
        atLeast("--max-context", maxContext, 2);
        atLeast("--batch", batch, 1);
        long total = (long) promptTokens + decodeTokens;
        if (total > maxContext)
            throw new IllegalArgumentException("--prompt-tokens (" + promptTokens + ") + --decode-tokens (" + decodeTokens + ") = "
                    + total + " exceeds --max-context " + maxContext + " (raise --max-context for a longer run)");
        Path dir = source.model != null ? Main.modelFolder("--model", source.model)
                : ModelStore.ensure(source.preset != null ? source.preset : "small", seed, System.err::println);
        ModelWeights w = WeightLoader.load(dir);
        ModelConfig c = w.config;
        if (total > c.maxPositionEmbeddings) {
            w.close();
            throw new IllegalArgumentException("--prompt-tokens (" + promptTokens + ") + --decode-tokens (" + decodeTokens + ") = "
                    + total + " exceeds the model's context of " + c.maxPositionEmbeddings + " tokens (max_position_embeddings)");
        }
        try (CpuBackend be = new CpuBackend(w); MemBandwidth.Meter meter = noBandwidth ? null : new MemBandwidth.Meter(1L << 30)) {
            System.out.printf("model: %s%n  %s%n  threads: %d%n", dir, c, Parallel.threads());
            long weightBytes = decodeWeightBytes(w);
            int ctx = promptTokens + decodeTokens / 2;
            long cacheBytes = decodeCacheBytes(c, ctx);
            SplittableRandom r = new SplittableRandom(seed);
            int[] toks = new int[promptTokens + decodeTokens];
            for (int i = 0; i < toks.length; i++) toks[i] = r.nextInt(c.vocabSize);
            for (int i = 0; i < warmup; i++) {
                long[] ns = run(be, toks, null);
                System.out.printf("  warm-up run %d (not counted): prefill %.1f tok/s, decode %.2f tok/s%n", i + 1,
                        promptTokens / (ns[0] / 1e9), decodeTokens / (ns[1] / 1e9));
            }
            double bestPrefill = 0, bestDecode = 0, bestBw = 0;
            ProductProfile bestProf = null;
            long bestNanos = 0;
            for (int rep = 0; rep < repeats; rep++) {
                ProductProfile prof = profile ? new ProductProfile() : null;
                long[] ns = run(be, toks, prof);
                double pre = promptTokens / (ns[0] / 1e9), secs = ns[1] / 1e9, dec = decodeTokens / secs;
                if (dec > bestDecode) {
                    bestProf = prof;
                    bestNanos = ns[1];
                }
                System.out.printf("  run %d: prefill %.1f tok/s, decode %.2f tok/s = %.2f GB/s", rep + 1, pre, dec,
                        (weightBytes + cacheBytes) * dec / 1e9);
                if (meter != null) { // a bandwidth pass right after the run, at least as long as the run's decode
                    MemBandwidth.Pass bw = meter.pass(secs);
                    bestBw = Math.max(bestBw, bw.gbPerSecond());
                    System.out.printf(", then read bandwidth %.2f GB/s over %.2f s", bw.gbPerSecond(), bw.seconds());
                }
                System.out.println();
                bestPrefill = Math.max(bestPrefill, pre);
                bestDecode = Math.max(bestDecode, dec);
            }
            double gbs = (weightBytes + cacheBytes) * bestDecode / 1e9;
            System.out.printf("prefill: %.1f tokens/s (%d-token prompt, chunks of %d; best run)%n", bestPrefill, promptTokens, chunk);
            System.out.printf("decode:  %.2f tokens/s (batch 1, context %d..%d; best run)%n", bestDecode, promptTokens, promptTokens + decodeTokens);
            System.out.printf("bytes read per decoded token: %.1f MB weights + %.2f MB F16 cache (at context %d)%n",
                    weightBytes / 1e6, cacheBytes / 1e6, ctx);
            System.out.printf("achieved: %.2f GB/s%n", gbs);
            for (int n : new int[]{promptTokens + decodeTokens, 4096, 65536})
                System.out.printf("state per sequence at %d tokens: %.2f MB (F16 cache + F32 compressor state, rollback window 16)%n",
                        n, be.stateBytes(n, 16) / 1e6);
            if (bestProf != null) printProfile(bestProf, bestNanos, decodeTokens);
            if (batch > 1) {
                // batch 1 and batch N back to back in each run, so that both see the same machine load
                java.util.List<Double> ratios = new java.util.ArrayList<>();
                double best = 0;
                for (int rep = 0; rep < warmup + repeats; rep++) {
                    double one = decodeTokens / (runBatch(be, toks, 1) / 1e9);
                    double agg = batch * (double) decodeTokens / (runBatch(be, toks, batch) / 1e9);
                    boolean counted = rep >= warmup;
                    if (counted) {
                        best = Math.max(best, agg);
                        ratios.add(agg / one);
                    }
                    System.out.printf("  batched run %d%s: batch 1 %.2f tok/s, batch %d %.2f tok/s aggregate = %.2fx%n", rep + 1,
                            counted ? "" : " (warm-up, not counted)", one, batch, agg, agg / one);
                }
                java.util.Collections.sort(ratios);
                System.out.printf("decode batch %d: %.2f tokens/s aggregate (best run, %.2f per sequence); aggregate / batch 1 in the"
                        + " same run: median %.2fx (of %d runs)%n", batch, best, best / batch, ratios.get(ratios.size() / 2), ratios.size());
            }
            if (meter != null) {
                double peak = 0;
                for (int p = 0; p < 5; p++) peak = Math.max(peak, meter.pass(0).gbPerSecond());
                System.out.printf("read bandwidth, short-window peak (best of 5 single sweeps of 1 GiB): %.2f GB/s -> decode at %.0f%% of it%n",
                        peak, 100 * gbs / peak);
                System.out.printf("measured read bandwidth: %.2f GB/s (best of %d %s, each at least as long as a timed run's decode, "
                        + "taken right after it) -> decode at %.0f%% of the bandwidth bound%n", bestBw, repeats,
                        repeats == 1 ? "pass" : "passes", 100 * gbs / bestBw);
            }
        }
        return 0;
    }

    private static void atLeast(String option, int value, int min) {
        if (value < min) throw new IllegalArgumentException(option + " must be >= " + min + ", got " + value);
    }

    /**
     * One run on a fresh sequence: the prompt prefilled in chunks, then decodeTokens decode steps, the decode steps
     * recorded in prof when it is not null.
     * @return {prefill nanoseconds, decode nanoseconds}
     */
    private long[] run(CpuBackend be, int[] toks, ProductProfile prof) {
        try (CpuSequence s = be.newSequence(16)) {
            long t0 = System.nanoTime();
            for (int off = 0; off < promptTokens; off += chunk) {
                int n = Math.min(chunk, promptTokens - off);
                be.forward(s, toks, off, n, off + n == promptTokens ? new int[]{n - 1} : new int[0]);
            }
            long t1 = System.nanoTime();
            ProductProfile.activate(prof);
            try {
                for (int i = 0; i < decodeTokens; i++) be.forward(s, toks, promptTokens + i, 1, new int[]{0});
            } finally {
                ProductProfile.activate(null);
            }
            return new long[]{t1 - t0, System.nanoTime() - t1};
        }
    }

    /**
     * Batched decode: the prompt prefilled once, then batch copies of that sequence stepped together for
     * decodeTokens steps (each copy its own tokens), one {@link CpuBackend#step} of batch decode entries per step.
     * @return decode nanoseconds
     */
    private long runBatch(CpuBackend be, int[] toks, int batch) {
        java.util.List<CpuSequence> seqs = new java.util.ArrayList<>();
        try {
            CpuSequence base = be.newSequence(16);
            seqs.add(base);
            for (int off = 0; off < promptTokens; off += chunk) {
                int n = Math.min(chunk, promptTokens - off);
                be.forward(base, toks, off, n, new int[0]);
            }
            for (int i = 1; i < batch; i++) seqs.add(be.fork(base, 16));
            SplittableRandom r = new SplittableRandom(seed + 1);
            long t0 = System.nanoTime();
            for (int t = 0; t < decodeTokens; t++) {
                java.util.List<io.ds4j.engine.BatchEntry> entries = new java.util.ArrayList<>();
                for (CpuSequence s : seqs)
                    entries.add(new io.ds4j.engine.BatchEntry(s, new int[]{r.nextInt(be.config().vocabSize)}, new int[]{0},
                            io.ds4j.engine.StepKind.DECODE));
                be.step(entries);
            }
            return System.nanoTime() - t0;
        } finally {
            for (CpuSequence s : seqs) s.close();
        }
    }

    /** Where a decoded token's time went: the matrix-vector products by group, then everything else. */
    private static void printProfile(ProductProfile prof, long nanos, long tokens) {
        double perTok = nanos / 1e6 / tokens;
        long mvNanos = 0, mvBytes = 0;
        java.util.List<ProductProfile.Group> groups = prof.groups();
        for (ProductProfile.Group g : groups) {
            mvNanos += g.nanos();
            mvBytes += g.bytes();
        }
        System.out.printf("decode profile of the best run: %.3f ms per token%n", perTok);
        System.out.printf("  matrix-vector products: %.3f ms (%.0f%%), %.1f MB, %.2f GB/s; by hand-off to the worker pool "
                        + "(n products, the first one named):%n", mvNanos / 1e6 / tokens,
                100.0 * mvNanos / nanos, mvBytes / 1e6 / tokens, (double) mvBytes / mvNanos);
        for (ProductProfile.Group g : groups)
            System.out.printf("    %-58s %5.1f per token  %7.3f MB %7.1f us each  %7.3f ms per token  %6.2f GB/s%n", g.name(),
                    (double) g.calls() / tokens, g.bytes() / 1e6 / g.calls(), g.nanos() / 1e3 / g.calls(), g.nanos() / 1e6 / tokens,
                    (double) g.bytes() / g.nanos());
        System.out.printf("  everything else (attention over the cache, mHC, norms, RoPE, compressors, indexer, routing, SwiGLU): %.3f ms (%.0f%%)%n",
                (nanos - mvNanos) / 1e6 / tokens, 100.0 * (nanos - mvNanos) / nanos);
    }

    /**
     * Weight bytes one decode step reads: every matrix except the routed experts and the embedding, one embedding
     * row, and k routed experts (w1, w2, w3) per layer (each token activates exactly k distinct experts).
     */
    static long decodeWeightBytes(ModelWeights w) {
        ModelConfig c = w.config;
        long b = w.embed.storedBytes() / w.embed.rows + w.lmHead.storedBytes() + w.hcHeadFn.storedBytes();
        for (ModelWeights.Layer L : w.layers) {
            WeightMatrix[] dense = {L.attnHcFn, L.ffnHcFn, L.qA, L.qB, L.kv, L.oA, L.oB, L.gate, L.sharedW1, L.sharedW2, L.sharedW3};
            for (WeightMatrix m : dense) b += m.storedBytes();
            if (L.compressor != null) b += L.compressor.kvProj.storedBytes() + L.compressor.gateProj.storedBytes();
            if (L.indexer != null) b += L.indexer.qB.storedBytes() + L.indexer.weightsProj.storedBytes()
                    + L.indexer.compressor.kvProj.storedBytes() + L.indexer.compressor.gateProj.storedBytes();
            long expert = (L.w1[0].storedBytes() + L.w2[0].storedBytes() + L.w3[0].storedBytes());
            b += expert * c.expertsPerToken;
        }
        return b;
    }

    /**
     * F16 cache bytes one decode step reads at a given context: the raw window rows; in HCA layers every compressed
     * entry; in CSA layers every indexer key (the indexer scores all of them) and the index_topk entries it selects.
     */
    static long decodeCacheBytes(ModelConfig c, int ctx) {
        long b = 0;
        for (int l = 0; l < c.numLayers; l++) {
            b += (long) Math.min(ctx, c.slidingWindow - 1) * c.headDim * 2;
            switch (c.layerTypes[l]) {
                case HCA -> b += (long) (ctx / c.hcaRatio) * c.headDim * 2;
                case CSA -> b += ((long) Math.min(ctx / c.csaRatio, c.indexTopk) * c.headDim + (long) (ctx / c.csaRatio) * c.indexHeadDim) * 2;
                default -> { }
            }
        }
        return b;
    }
}
