package io.ds4j.engine;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.model.ModelConfig;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Prefill chunks in layer slices on the CPU backend: the same numbers as the whole chunk, refusals that leave the
 * sequence as it was, and the scheduler that slices a long prompt's chunks beside decoding requests so that every
 * tick stays within the latency bound where even a floor-sized chunk would not, with every request's output as alone.
 */
class LayerSliceTest {
    static ModelConfig cfg;
    static CpuBackend cpu;

    @BeforeAll
    static void load() {
        cfg = TestModelsAccess.microConfig();
        cpu = new CpuBackend(TestModelsAccess.random(cfg, 42));
    }

    @AfterAll
    static void close() {
        cpu.close();
    }

    static int[] prompt(int n, long seed) {
        return TestModelsAccess.randomTokens(cfg, n, seed);
    }

    @Test
    void aChunkInLayerSlicesGivesTheWholeChunksNumbers() {
        assertTrue(cpu.layerSlices());
        int L = cfg.numLayers;
        assertNull(LayerSliceRuns.chunkInSlices(cpu, prompt(45, 1), 21, new int[]{1, 3}, 4));
        assertNull(LayerSliceRuns.chunkInSlices(cpu, prompt(30, 2), 10, new int[]{L - 1}, 3));
        int[] each = new int[L - 1];
        for (int i = 0; i < each.length; i++) each[i] = i + 1;
        assertNull(LayerSliceRuns.chunkInSlices(cpu, prompt(9, 3), 1, each, 3), "one layer a step");
    }

    @Test
    void aPartWaySequenceRefusesEverythingButItsNextSliceAndStaysAsItWas() {
        int L = cfg.numLayers;
        int[] p = prompt(20, 4), rest = java.util.Arrays.copyOfRange(p, 8, 20);
        try (Sequence s = cpu.newSequence(16); Sequence ref = cpu.newSequence(16)) {
            cpu.forward(s, p, 0, 8, new int[0]);
            cpu.forward(ref, p, 0, 8, new int[0]);
            float[] expect = cpu.forward(ref, rest, 0, 12, new int[]{11});
            assertEquals(0, cpu.step(List.of(slice(s, rest, 0, 2, new int[0])))[0].length);
            assertEquals(2, s.slicedLayers());
            assertEquals(8, s.length());
            String m = assertThrows(IllegalArgumentException.class, () -> cpu.forward(s, rest, 0, 12, new int[]{11})).getMessage();
            assertTrue(m.contains("has run 2 of " + L + " layers") && m.contains("layers from 2"), m);
            m = assertThrows(IllegalArgumentException.class, () -> cpu.step(List.of(slice(s, rest, 1, 3, new int[0])))).getMessage();
            assertTrue(m.contains("does not continue") && m.contains("next layer is 2"), m);
            m = assertThrows(IllegalArgumentException.class,
                    () -> cpu.step(List.of(slice(s, java.util.Arrays.copyOf(rest, 5), 2, 3, new int[0])))).getMessage();
            assertTrue(m.contains("5 tokens continues a chunk of 12"), m);
            m = assertThrows(IllegalArgumentException.class, () -> cpu.step(List.of(slice(s, rest, 2, 3, new int[]{11})))).getMessage();
            assertTrue(m.contains("logit rows before the last layer"), m);
            m = assertThrows(IllegalArgumentException.class, () -> cpu.step(List.of(slice(s, rest, 2, L + 1, new int[]{11})))).getMessage();
            assertTrue(m.contains("ends past the model's " + L + " layers"), m);
            assertThrows(IllegalArgumentException.class,
                    () -> new BatchEntry(s, new int[]{1}, new int[]{0}, StepKind.DECODE, 0, new BatchEntry.Layers(0, 1)));
            assertThrows(IllegalArgumentException.class, () -> new BatchEntry.Layers(2, 2));
            m = assertThrows(IllegalStateException.class, () -> s.rollback(1)).getMessage();
            assertTrue(m.contains("roll back") && m.contains("2 of " + L), m);
            assertThrows(IllegalStateException.class, () -> cpu.snapshot(s));
            assertThrows(IllegalStateException.class, () -> cpu.fork(s, 16));
            // a batch whose one entry is refused changes no sequence
            try (Sequence other = cpu.newSequence(16)) {
                assertThrows(IllegalArgumentException.class, () -> cpu.step(List.of(
                        new BatchEntry(other, new int[]{3, 4}, new int[]{1}, StepKind.PREFILL), slice(s, rest, 1, 2, new int[0]))));
                assertEquals(0, other.length());
            }
            assertEquals(2, s.slicedLayers());
            float[] got = cpu.step(List.of(slice(s, rest, 2, L, new int[]{11})))[0];
            assertArrayEquals(expect, got, "the chunk finished after the refusals gives the whole chunk's numbers");
            assertEquals(0, s.slicedLayers());
            s.rollback(3); // allowed again
        }
    }

    @Test
    void aBackendWithoutLayerSlicesRefusesThem() {
        TrackingBackend plain = new TrackingBackend(cpu);
        Backend none = new Backend() {
            @Override public String name() { return "none"; }
            @Override public ModelConfig config() { return cfg; }
            @Override public Sequence newSequence(int maxRollback) { return cpu.newSequence(maxRollback); }
            @Override public float[] forward(Sequence seq, int[] t, int off, int n, int[] rows) { return cpu.forward(seq, t, off, n, rows); }
            @Override public long stateBytes(int ctx, int k) { return cpu.stateBytes(ctx, k); }
            @Override public void close() { }
        };
        assertTrue(plain.layerSlices());
        assertFalse(none.layerSlices());
        try (Sequence s = none.newSequence(16)) {
            String m = assertThrows(IllegalArgumentException.class, () -> none.step(List.of(slice(s, new int[]{1, 2}, 0, 1, new int[0]))))
                    .getMessage();
            assertTrue(m.contains("does not run layer slices"), m);
            assertEquals(0, s.length());
        }
    }

    static BatchEntry slice(Sequence s, int[] tokens, int from, int to, int[] rows) {
        return new BatchEntry(s, tokens, rows, StepKind.PREFILL, 0, new BatchEntry.Layers(from, to));
    }

    /**
     * On fake costs where a floor-sized chunk breaks the bound: the long prompts' chunks run a few layers a tick, every
     * tick holding prefill stays within 1.5x the decode-only tick, every decoding request steps in every tick, each
     * chunk's slices cover its layers in order, and every output is the request's alone.
     */
    @Test
    void besideDecodesALongPromptsChunksRunInLayerSlicesWithinTheBound() {
        LayerSliceRuns.Run r = LayerSliceRuns.scheduled(cpu, true, false);
        assertEquals(List.of(), r.failed());
        for (String k : r.alone().keySet()) assertArrayEquals(r.alone().get(k), r.batched().get(k), "request " + k + " as alone");
        int sliced = 0;
        for (int i = 0; i < r.ticks().size(); i++) {
            Scheduler.Tick<String> t = r.ticks().get(i);
            if (t.budget() == null || t.prefillTokens() == 0) continue;
            assertEquals(3, t.stepped().stream().filter(k -> k.length() == 1).count(), "tick " + i + ": every decode stepped");
            PrefillBudget.Reason why = t.budget().reason();
            if (why == PrefillBudget.Reason.NO_DATA) continue; // the first chunk measures the prefill cost
            // at the floor only a prompt's rest within the floor runs whole (it may come along with other short rests)
            if (why == PrefillBudget.Reason.FLOOR) assertTrue(t.prefillTokens() <= 32, "tick " + i + ": " + t.prefillTokens() + " tokens at the floor");
            else {
                // a prompt's short rest (at most the floor) may come along beside a slice, at its whole cost
                int rest = t.slicedTokens() > 0 ? t.prefillTokens() - t.slicedTokens() : 0;
                assertTrue(rest <= 32, "tick " + i + ": " + rest + " whole tokens beside a slice");
                long restNs = rest > 0 ? (2 + rest) * 1_000_000L : 0;
                assertTrue(t.nanos() - restNs <= 1.5 * 40_000_000L, "tick " + i + " (" + why + "): " + t.nanos() / 1e6 + " ms ("
                        + rest + " whole tokens) > 1.5 x 40 ms");
            }
            if (why == PrefillBudget.Reason.LAYERS) sliced++;
        }
        assertTrue(sliced > r.ticks().size() / 2, "most ticks ran a slice: " + sliced + " of " + r.ticks().size());
        // each prompt's slices follow each other from layer 0 to the last; one chunk part-way at a time
        String partWay = null;
        int[] next = new int[2];
        for (int s = 0; s < r.order().size(); s++) {
            String k = r.order().get(s);
            BatchEntry.Layers ly = r.layersInOrder().get(s);
            int i = k.equals("long") ? 0 : 1;
            if (ly == null) {
                assertEquals(0, next[i], k + ": a whole chunk while its own was part-way");
                continue;
            }
            assertTrue(partWay == null || partWay.equals(k), "two chunks part-way at once: " + r.order());
            assertEquals(next[i], ly.from(), k + "'s slices in order: " + r.slices(k));
            next[i] = ly.last(cfg.numLayers) ? 0 : ly.to();
            partWay = next[i] == 0 ? null : k;
        }
        assertArrayEquals(new int[2], next, "the last chunks finished");
    }

    /**
     * A burst of short prompts (each within the floor) beyond the token budget, beside decoding requests where a
     * floor-sized chunk breaks the bound: none is sliced, each comes along whole or waits for a tick with room, so the
     * ticks are those of the same burst with layer slices off, and every output is as alone.
     */
    @Test
    void aBurstOfShortPromptsBeyondTheBudgetIsNeverSliced() {
        List<List<Integer>> perTick = new ArrayList<>();
        List<java.util.Map<String, int[]>> outsBoth = new ArrayList<>();
        for (boolean slices : new boolean[]{false, true}) {
            TrackingBackend target = new TrackingBackend(cpu);
            target.cost = b -> LayerSliceRuns.fakeCost(b, cfg.numLayers);
            Scheduler<String> sch = new Scheduler<>(target, new Scheduler.Limits(256, 64, 1.5, 32, slices), target::now);
            java.util.Map<String, List<Integer>> outs = new java.util.LinkedHashMap<>();
            java.util.Map<String, BatchInvarianceRuns.Req> reqs = new java.util.LinkedHashMap<>();
            for (String k : List.of("a", "b"))
                reqs.put(k, new BatchInvarianceRuns.Req(new int[]{4 + k.length(), 5, 6}, io.ds4j.sampling.SamplingParams.greedy(40), null, "1"));
            for (int i = 0; i < 20; i++)
                reqs.put("s" + i, new BatchInvarianceRuns.Req(prompt(10 + i % 7, 100 + i), io.ds4j.sampling.SamplingParams.greedy(3), null, "1"));
            for (String k : List.of("a", "b")) {
                outs.put(k, new ArrayList<>());
                sch.add(k, BatchInvarianceRuns.open(target, reqs.get(k), 64, outs.get(k)));
            }
            while (sch.tick().prefillTokens() > 0) { }
            sch.tick(); // the decode-only time is measured
            for (int i = 0; i < 20; i++) {
                outs.put("s" + i, new ArrayList<>());
                sch.add("s" + i, BatchInvarianceRuns.open(target, reqs.get("s" + i), 64, outs.get("s" + i)));
            }
            List<Integer> ticks = new ArrayList<>();
            while (!sch.isEmpty()) {
                Scheduler.Tick<String> t = sch.tick();
                assertEquals(0, t.slicedTokens(), "no short prompt runs in slices");
                ticks.add(t.prefillTokens());
            }
            perTick.add(ticks);
            java.util.Map<String, int[]> o = new java.util.LinkedHashMap<>();
            outs.forEach((k, v) -> o.put(k, BatchInvarianceRuns.tokens(v)));
            outsBoth.add(o);
            for (var en : reqs.entrySet()) {
                List<Integer> a = new ArrayList<>();
                Generation g = BatchInvarianceRuns.open(cpu, en.getValue(), 64, a);
                while (g.step()) { }
                assertArrayEquals(BatchInvarianceRuns.tokens(a), o.get(en.getKey()), "request " + en.getKey() + " as alone");
            }
        }
        assertEquals(perTick.get(0), perTick.get(1), "the same ticks with and without layer slices");
        assertTrue(perTick.get(1).stream().anyMatch(n -> n > 32), "short prompts came along together: " + perTick.get(1));
    }

    /** With scheduler.layerSlices off the same run takes whole chunks at the floor, beyond the bound. */
    @Test
    void withLayerSlicesOffChunksRunWholeAtTheFloor() {
        LayerSliceRuns.Run r = LayerSliceRuns.scheduled(cpu, false, false);
        for (String k : r.alone().keySet()) assertArrayEquals(r.alone().get(k), r.batched().get(k), "request " + k + " as alone");
        assertTrue(r.layersInOrder().stream().allMatch(java.util.Objects::isNull), "no slices: " + r.layersInOrder());
        assertTrue(r.ticks().stream().anyMatch(t -> t.budget() != null && t.budget().reason() == PrefillBudget.Reason.FLOOR
                && t.nanos() > 1.5 * 40_000_000L), "floor chunks break the bound");
    }

    /**
     * A batched step holding a slice fails for another request after running (a faulty kernel): that request fails
     * alone, the slice is kept (not run twice), and the others' outputs are as alone.
     */
    @Test
    void aFailedStepBesideASliceFailsOnlyItsRequest() {
        LayerSliceRuns.Run r = LayerSliceRuns.scheduled(cpu, true, true);
        assertTrue(r.poisoned() >= 0, "a slice was part-way when the fault came");
        Scheduler.Tick<String> t = r.ticks().get(r.poisoned());
        assertTrue(t.isolated() && t.prefillTokens() > 0, "the failed step held a slice and was retried entry by entry");
        assertEquals(List.of("c"), r.failed());
        for (String k : List.of("a", "b", "long", "long2"))
            assertArrayEquals(r.alone().get(k), r.batched().get(k), "request " + k + " as alone");
    }

    /** A cancelled request part-way through a slice ends at the next tick and its sequence (and streams) are released. */
    @Test
    void aRequestCancelledPartWayThroughASliceReleasesItsState() {
        TrackingBackend target = new TrackingBackend(cpu);
        target.cost = b -> LayerSliceRuns.fakeCost(b, cfg.numLayers);
        Scheduler<String> sch = new Scheduler<>(target, new Scheduler.Limits(256, 64, 1.5, 32), target::now);
        List<Integer> outA = new ArrayList<>(), outL = new ArrayList<>();
        var a = new BatchInvarianceRuns.Req(new int[]{4, 5, 6}, io.ds4j.sampling.SamplingParams.greedy(200), null, "1");
        var l = new BatchInvarianceRuns.Req(prompt(400, 9), io.ds4j.sampling.SamplingParams.greedy(3), null, "1");
        sch.add("a", BatchInvarianceRuns.open(target, a, 64, outA));
        while (sch.tick().prefillTokens() > 0) { }
        Generation gl = BatchInvarianceRuns.open(target, l, 64, outL);
        sch.add("long", gl);
        for (int i = 0; i < 200 && !gl.slicing(); i++) sch.tick();
        assertTrue(gl.slicing(), "the long prompt's chunk went part-way");
        TrackingBackend.Seq seq = target.sequences.get(1);
        assertTrue(seq.slicedLayers() > 0);
        gl.cancel();
        Scheduler.Tick<String> t = sch.tick();
        assertTrue(t.ended().contains("long"), "ended at the next tick: " + t.ended());
        assertTrue(seq.closed, "its sequence is released");
        assertEquals(0, seq.slicedLayers(), "and its streams with it");
        while (!sch.isEmpty()) sch.tick();
        List<Integer> alone = new ArrayList<>();
        Generation g = BatchInvarianceRuns.open(cpu, a, 64, alone);
        while (g.step()) { }
        assertEquals(alone, outA, "the other request is as alone");
    }

    /**
     * The sliced sequence itself is poisoned (every batched step holding it throws after running, a faulty kernel):
     * only that request fails, every other request's output is as alone (another long prompt's short rest of 12
     * tokens, within the rollback window, came along beside the poisoned slice and was stepped again alone), and its
     * sequence is released.
     */
    @Test
    void aPoisonedSlicedSequenceFailsOnlyItsOwnRequest() {
        poisonedLongPrompt(true, 140);
    }

    /**
     * A poisoned long prompt, with another long prompt of {@code otherLen} tokens (chunks of 64, its rest last).
     * @param slices the limits' layerSlices
     */
    static void poisonedLongPrompt(boolean slices, int otherLen) {
        TrackingBackend target = new TrackingBackend(cpu);
        target.cost = b -> LayerSliceRuns.fakeCost(b, cfg.numLayers);
        Scheduler<String> sch = new Scheduler<>(target, new Scheduler.Limits(256, 64, 1.5, 32, slices), target::now);
        java.util.Map<String, BatchInvarianceRuns.Req> reqs = new java.util.LinkedHashMap<>();
        reqs.put("a", new BatchInvarianceRuns.Req(new int[]{4, 5, 6}, io.ds4j.sampling.SamplingParams.greedy(150), null, "1"));
        reqs.put("b", new BatchInvarianceRuns.Req(new int[]{7, 5, 6}, io.ds4j.sampling.SamplingParams.sampled(0.9, 0, 0.95, 0, 3, 150),
                io.ds4j.speculative.NgramDraft.source(), "3"));
        java.util.Map<String, List<Integer>> outs = new java.util.LinkedHashMap<>();
        for (String k : reqs.keySet()) {
            outs.put(k, new ArrayList<>());
            sch.add(k, BatchInvarianceRuns.open(target, reqs.get(k), 64, outs.get(k)));
        }
        while (sch.tick().prefillTokens() > 0) { }
        sch.tick();
        List<Integer> outL = new ArrayList<>(), outL2 = new ArrayList<>();
        var l = new BatchInvarianceRuns.Req(prompt(300, 11), io.ds4j.sampling.SamplingParams.greedy(3), null, "1");
        var l2 = new BatchInvarianceRuns.Req(prompt(otherLen, 12), io.ds4j.sampling.SamplingParams.greedy(3), null, "1");
        Generation gl = BatchInvarianceRuns.open(target, l, 64, outL);
        sch.add("long", gl);
        sch.add("long2", BatchInvarianceRuns.open(target, l2, 64, outL2));
        TrackingBackend.Seq seq = target.sequences.get(2);
        for (int i = 0; i < 200 && (slices ? !gl.slicing() : gl.prefilledTokens() < 64); i++) sch.tick();
        assertTrue(!slices || gl.slicing(), "the long prompt's chunk went part-way");
        seq.poisoned = true;
        java.util.Map<String, Throwable> failed = new java.util.LinkedHashMap<>();
        while (!sch.isEmpty()) failed.putAll(sch.tick().failed());
        assertEquals(java.util.Set.of("long"), failed.keySet(), "only the poisoned request fails: " + failed);
        assertTrue(seq.closed, "its sequence is released");
        assertEquals(List.of(), outL, "the failed request produced nothing");
        for (String k : reqs.keySet()) {
            List<Integer> a = new ArrayList<>();
            Generation g = BatchInvarianceRuns.open(cpu, reqs.get(k), 64, a);
            while (g.step()) { }
            assertEquals(a, outs.get(k), "request " + k + " as alone");
        }
        List<Integer> a = new ArrayList<>();
        Generation g = BatchInvarianceRuns.open(cpu, l2, 64, a);
        while (g.step()) { }
        assertEquals(a, outL2, "the other long prompt as alone");
    }
}
