package io.ds4j.engine;

import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.NgramDraft;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.function.BiPredicate;

/**
 * Long prompts prefilled beside decoding requests through one {@link Scheduler} under the latency bound, on fake step
 * costs, for the CPU and GPU tests (no test-only libraries, so the device package can run it): three greedy
 * requests decode (one with an n-gram draft) when a 300-token greedy prompt and a 150-token seeded sampled prompt
 * arrive (prefill chunk 64, token budget 64, maxTickStretch 1.5, minPrefillChunk 8, layer slices on or off); then
 * every request runs alone.
 */
public final class LongPromptRuns {
    private LongPromptRuns() {}

    /**
     * What the run showed.
     * @param longChunks the prefill entries' sizes from the long prompts' arrival on, in order
     * @param ticks      the ticks from their arrival until both long prompts produced their first token
     * @param batched    per request ("a", "b", "c" decoding; "long", "long2"), its tokens in the run
     * @param alone      per request, its tokens stepped alone
     */
    public record Run(List<Integer> longChunks, List<Scheduler.Tick<String>> ticks, Map<String, int[]> batched,
                      Map<String, int[]> alone) {}

    /**
     * Fake step costs: 12 ms when decode/verify rows run, plus 2 ms + 0.25 ms per token when prefill runs; a chunk in a
     * layer slice costs its share of the layers of that, the 2 ms included (the largest share of the step's chunks).
     */
    public static long fakeCost(List<BatchEntry> batch, int numLayers) {
        boolean decode = batch.stream().anyMatch(e -> e.kind() != StepKind.PREFILL);
        double fixed = 0, tokens = 0;
        for (BatchEntry e : batch) {
            if (e.kind() != StepKind.PREFILL) continue;
            double share = e.layers() == null ? 1 : (double) (e.layers().to() - e.layers().from()) / numLayers;
            fixed = Math.max(fixed, share);
            tokens += e.count() * share;
        }
        return (decode ? 12_000_000L : 0) + Math.round(2_000_000L * fixed + 250_000L * tokens);
    }

    /**
     * @param backend   the target
     * @param splitRule answers {@link Backend#prefillSplitExact} instead of the backend (null: the backend answers)
     * @param reloadAt  ticks after the long prompts' arrival at which the limits turn the bound off, then on again two
     *                  ticks later (-1: never)
     * @param slices    the limits' layerSlices (false: chunks are cut to the bound)
     */
    public static Run run(Backend backend, BiPredicate<Integer, Integer> splitRule, int reloadAt, boolean slices) {
        TrackingBackend target = new TrackingBackend(backend);
        final int L = backend.config().numLayers;
        target.cost = batch -> fakeCost(batch, L);
        target.splitRule = splitRule;
        int V = backend.config().vocabSize;
        Scheduler.Limits bounded = new Scheduler.Limits(256, 64, 1.5, 8, slices);
        Scheduler<String> sch = new Scheduler<>(target, bounded, target::now);
        Map<String, BatchInvarianceRuns.Req> reqs = requests(V, 11, 120);
        Map<String, List<Integer>> outs = new LinkedHashMap<>();
        for (String k : List.of("a", "b", "c")) {
            outs.put(k, new ArrayList<>());
            sch.add(k, BatchInvarianceRuns.open(target, reqs.get(k), 64, outs.get(k)));
        }
        while (sch.tick().prefillTokens() > 0) { } // the three decode now
        int firstLongStep = target.counts.size();
        for (String k : List.of("long", "long2")) {
            outs.put(k, new ArrayList<>());
            sch.add(k, BatchInvarianceRuns.open(target, reqs.get(k), 64, outs.get(k)));
        }
        List<Scheduler.Tick<String>> ticks = new ArrayList<>();
        while (outs.get("long").isEmpty() || outs.get("long2").isEmpty()) {
            if (ticks.size() == reloadAt) sch.limits(new Scheduler.Limits(256, 64, 0, 1, slices));
            if (ticks.size() == reloadAt + 2) sch.limits(bounded);
            ticks.add(sch.tick());
        }
        List<Integer> chunks = new ArrayList<>();
        for (int s = firstLongStep; s < target.counts.size(); s++) {
            int[] c = target.counts.get(s);
            for (int e = 0; e < c.length; e++) if (target.steps.get(s).get(e) == StepKind.PREFILL) chunks.add(c[e]);
        }
        while (!sch.isEmpty()) sch.tick();
        Map<String, int[]> batched = new LinkedHashMap<>();
        outs.forEach((k, v) -> batched.put(k, BatchInvarianceRuns.tokens(v)));
        return new Run(chunks, ticks, batched, alone(backend, reqs));
    }

    /**
     * The requests of these runs: "a", "b", "c" greedy with a 3-token prompt and {@code decodeTokens} tokens to generate
     * ("b" with an n-gram draft), "long" a 300-token greedy prompt (5 tokens), "long2" a 150-token seeded sampled one.
     */
    static Map<String, BatchInvarianceRuns.Req> requests(int V, long seed, int decodeTokens) {
        SplittableRandom rnd = new SplittableRandom(seed);
        Map<String, BatchInvarianceRuns.Req> reqs = new LinkedHashMap<>();
        for (String k : List.of("a", "b", "c"))
            reqs.put(k, new BatchInvarianceRuns.Req(new int[]{1 + rnd.nextInt(Math.min(90, V - 1)), 2, 3}, SamplingParams.greedy(decodeTokens),
                    k.equals("b") ? NgramDraft.source() : null, "3"));
        int[] p1 = new int[300], p2 = new int[150];
        for (int j = 0; j < p1.length; j++) p1[j] = rnd.nextInt(V);
        for (int j = 0; j < p2.length; j++) p2[j] = rnd.nextInt(V);
        reqs.put("long", new BatchInvarianceRuns.Req(p1, SamplingParams.greedy(5), null, "1"));
        reqs.put("long2", new BatchInvarianceRuns.Req(p2, SamplingParams.sampled(0.9, 0, 0.95, 0, 77, 5), null, "1"));
        return reqs;
    }

    /** Per request, its tokens stepped alone on the backend (prefill chunk 64). */
    static Map<String, int[]> alone(Backend backend, Map<String, BatchInvarianceRuns.Req> reqs) {
        Map<String, int[]> alone = new LinkedHashMap<>();
        for (var en : reqs.entrySet()) {
            List<Integer> a = new ArrayList<>();
            Generation g = BatchInvarianceRuns.open(backend, en.getValue(), 64, a);
            while (g.step()) { }
            alone.put(en.getKey(), BatchInvarianceRuns.tokens(a));
        }
        return alone;
    }
}
