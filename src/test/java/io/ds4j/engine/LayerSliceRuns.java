package io.ds4j.engine;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Prefill chunks run in layer slices ({@link BatchEntry.Layers}), for the CPU and GPU tests (no test-only libraries, so
 * the device package can run it): the backend's numbers slice by slice against the whole chunk, and a scheduler that
 * slices a long prompt's chunks beside decoding requests on fake step costs.
 */
public final class LayerSliceRuns {
    private LayerSliceRuns() {}

    /**
     * Prefills {@code prompt} on two sequences, the first chunk of {@code firstChunk} tokens whole on both, the rest
     * whole on one and in the given slices on the other, each slice in a step beside a decode entry of a third
     * sequence (whose twin decodes alone); then both decode {@code decodes} greedy tokens. Compares every logit bit
     * for bit, the third sequence's too, and checks the sliced sequence's length and {@link Sequence#slicedLayers}
     * between slices.
     * @param cuts the layers where the slices meet, ascending, inside (0, numLayers)
     * @return null when everything matched, else what differed
     */
    public static String chunkInSlices(Backend b, int[] prompt, int firstChunk, int[] cuts, int decodes) {
        final int L = b.config().numLayers, V = b.config().vocabSize, n = prompt.length - firstChunk;
        int[] first = Arrays.copyOf(prompt, firstChunk), rest = Arrays.copyOfRange(prompt, firstChunk, prompt.length);
        try (Sequence whole = b.newSequence(16); Sequence sliced = b.newSequence(16); Sequence beside = b.newSequence(16);
             Sequence twin = b.newSequence(16)) {
            b.forward(whole, first, 0, firstChunk, new int[0]);
            b.forward(sliced, first, 0, firstChunk, new int[0]);
            int[] side = {5 % V, 7 % V, 11 % V};
            b.forward(beside, side, 0, side.length, new int[0]);
            b.forward(twin, side, 0, side.length, new int[0]);
            float[] expect = b.forward(whole, rest, 0, n, new int[]{n - 1});
            float[] got = null;
            int[] bounds = new int[cuts.length + 2];
            bounds[bounds.length - 1] = L;
            System.arraycopy(cuts, 0, bounds, 1, cuts.length);
            int sideTok = 13 % V;
            for (int s = 0; s + 1 < bounds.length; s++) {
                BatchEntry.Layers ly = new BatchEntry.Layers(bounds[s], bounds[s + 1]);
                boolean last = ly.last(L);
                List<BatchEntry> step = List.of(
                        new BatchEntry(beside, new int[]{sideTok}, new int[]{0}, StepKind.DECODE),
                        new BatchEntry(sliced, rest, last ? new int[]{n - 1} : new int[0], StepKind.PREFILL, 0, ly));
                float[][] out = b.step(step);
                float[] alone = b.forward(twin, new int[]{sideTok}, 0, 1, new int[]{0}, StepKind.DECODE);
                if (!Arrays.equals(alone, out[0])) return "the decode beside slice " + ly + " differs from it alone";
                sideTok = argmax(alone, 0, V);
                if (!last) {
                    if (out[1].length != 0) return "slice " + ly + " returned " + out[1].length + " logits before the last layer";
                    if (sliced.length() != firstChunk) return "slice " + ly + " moved the length to " + sliced.length();
                    if (sliced.slicedLayers() != ly.to()) return "slice " + ly + ": slicedLayers " + sliced.slicedLayers();
                } else got = out[1];
            }
            if (sliced.slicedLayers() != 0 || sliced.length() != prompt.length)
                return "after the last slice: slicedLayers " + sliced.slicedLayers() + ", length " + sliced.length();
            if (!Arrays.equals(expect, got)) return "the chunk's logits in slices differ from the whole chunk's";
            int tok = argmax(expect, 0, V);
            for (int d = 0; d < decodes; d++) {
                float[] a = b.forward(whole, new int[]{tok}, 0, 1, new int[]{0}, StepKind.DECODE);
                float[] c = b.forward(sliced, new int[]{tok}, 0, 1, new int[]{0}, StepKind.DECODE);
                if (!Arrays.equals(a, c)) return "decode step " + d + " after the chunk differs";
                tok = argmax(a, 0, V);
            }
            return null;
        }
    }

    static int argmax(float[] x, int off, int n) {
        int best = 0;
        for (int i = 1; i < n; i++) if (x[off + i] > x[off + best]) best = i;
        return best;
    }

    /** Decode steps take 40 ms; a prefill entry 2 ms + 1 ms a token, times the share of the layers it runs. */
    public static long fakeCost(List<BatchEntry> batch, int numLayers) {
        boolean decode = batch.stream().anyMatch(e -> e.kind() != StepKind.PREFILL);
        double prefill = 0;
        for (BatchEntry e : batch) {
            if (e.kind() != StepKind.PREFILL) continue;
            double share = e.layers() == null ? 1 : (double) (e.layers().to() - e.layers().from()) / numLayers;
            prefill += (2 + e.count()) * share;
        }
        return (decode ? 40_000_000L : 0) + Math.round(prefill * 1e6);
    }

    /**
     * What a scheduled run showed.
     * @param ticks      the ticks from the long prompts' arrival until both produced their first token
     * @param order      the long prompts' prefill entries in that time, in order: whose ("long", "long2")
     * @param layersInOrder and their layer slices (null: a whole chunk)
     * @param poisoned   the tick (index in ticks) whose step failed for the poisoned request, or -1
     * @param batched    per request ("a", "b", "c" decoding; "long", "long2"), its tokens in the run
     * @param alone      per request, its tokens stepped alone
     * @param failed     requests that failed
     */
    public record Run(List<Scheduler.Tick<String>> ticks, List<String> order, List<BatchEntry.Layers> layersInOrder, int poisoned,
                      Map<String, int[]> batched, Map<String, int[]> alone, List<String> failed) {
        /** One long prompt's entries' slices, in order. */
        public List<BatchEntry.Layers> slices(String k) {
            List<BatchEntry.Layers> out = new ArrayList<>();
            for (int i = 0; i < order.size(); i++) if (order.get(i).equals(k)) out.add(layersInOrder.get(i));
            return out;
        }
    }

    /**
     * Three greedy requests decode (one with an n-gram draft) when a 300-token greedy prompt and a 150-token seeded
     * sampled prompt arrive (prefill chunk 64, token budget 64, maxTickStretch 1.5, minPrefillChunk 32, on
     * {@link #fakeCost}: a floor-sized chunk, 34 ms, breaks the bound of 20 ms, one layer's share of a 64-token chunk
     * does not); then every request runs alone.
     * @param slices the limits' layerSlices
     * @param poison fail request "c"'s step in the first tick that continues a long prompt's slice (the batched step
     *               throws after running, as a faulty kernel would)
     */
    public static Run scheduled(Backend backend, boolean slices, boolean poison) {
        TrackingBackend target = new TrackingBackend(backend);
        final int L = backend.config().numLayers, V = backend.config().vocabSize;
        target.cost = batch -> fakeCost(batch, L);
        Scheduler<String> sch = new Scheduler<>(target, new Scheduler.Limits(256, 64, 1.5, 32, slices), target::now);
        Map<String, BatchInvarianceRuns.Req> reqs = LongPromptRuns.requests(V, 23, 150);
        Map<String, List<Integer>> outs = new LinkedHashMap<>();
        Map<String, Generation> gens = new LinkedHashMap<>();
        for (var en : reqs.entrySet()) {
            outs.put(en.getKey(), new ArrayList<>());
            gens.put(en.getKey(), BatchInvarianceRuns.open(target, en.getValue(), 64, outs.get(en.getKey())));
        }
        for (String k : List.of("a", "b", "c")) sch.add(k, gens.get(k));
        while (sch.tick().prefillTokens() > 0) { } // the three decode now
        int firstLongStep = target.counts.size();
        sch.add("long", gens.get("long"));
        sch.add("long2", gens.get("long2"));
        List<Scheduler.Tick<String>> ticks = new ArrayList<>();
        List<String> failed = new ArrayList<>();
        int poisoned = -1;
        while (outs.get("long").isEmpty() || outs.get("long2").isEmpty()) {
            if (poison && poisoned < 0 && (gens.get("long").slicing() || gens.get("long2").slicing())) {
                target.sequences.get(2).poisoned = true; // request "c" (the third sequence opened)
                poisoned = ticks.size();
            }
            Scheduler.Tick<String> t = sch.tick();
            failed.addAll(t.failed().keySet());
            ticks.add(t);
            if (ticks.size() > 2000) throw new AssertionError("the long prompts do not finish");
        }
        List<String> order = new ArrayList<>();
        List<BatchEntry.Layers> sl = new ArrayList<>();
        for (int s = firstLongStep; s < target.entries.size(); s++)
            for (BatchEntry e : target.entries.get(s))
                if (e.kind() == StepKind.PREFILL) {
                    order.add(e.seq() == target.sequences.get(3) ? "long" : "long2");
                    sl.add(e.layers());
                }
        while (!sch.isEmpty()) failed.addAll(sch.tick().failed().keySet());
        Map<String, int[]> batched = new LinkedHashMap<>();
        outs.forEach((k, v) -> batched.put(k, BatchInvarianceRuns.tokens(v)));
        return new Run(ticks, order, sl, poisoned, batched, LongPromptRuns.alone(backend, reqs), failed);
    }
}
