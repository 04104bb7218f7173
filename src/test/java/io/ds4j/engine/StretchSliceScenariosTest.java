package io.ds4j.engine;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.model.ModelConfig;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.NgramDraft;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Adversarial scenarios for layer slices under the stretch bound and the decode-only time from repeated shapes:
 * cancellation and reloads mid-chunk, a standing clock, two long prompts beside swinging verify rows, entries varying
 * under maxBatchRows, wide speculative streams beside a waiting prompt, a one-layer model with slices off; every
 * output checked against the request run alone. The bound's edges are in {@link StretchSliceBoundTest}, which shares
 * these helpers.
 */
class StretchSliceScenariosTest {
    static ModelConfig cfg, oneLayer;
    static CpuBackend target, target1;

    @BeforeAll
    static void load() {
        cfg = TestModelsAccess.microConfig();
        target = new CpuBackend(TestModelsAccess.random(cfg, 42));
        oneLayer = oneLayerConfig();
        target1 = new CpuBackend(TestModelsAccess.random(oneLayer, 42));
    }

    @AfterAll
    static void close() {
        target.close();
        target1.close();
    }

    /** The micro config with a single layer. */
    static ModelConfig oneLayerConfig() {
        ObjectMapper om = new ObjectMapper();
        ObjectNode j = om.createObjectNode();
        j.put("vocab_size", 97).put("hidden_size", 32).put("num_hidden_layers", 1).put("num_attention_heads", 4)
                .put("head_dim", 16).put("qk_rope_head_dim", 4).put("q_lora_rank", 16).put("o_groups", 2)
                .put("o_lora_rank", 8).put("sliding_window", 4).put("index_n_heads", 4).put("index_head_dim", 8)
                .put("index_topk", 2).put("n_routed_experts", 4).put("num_experts_per_tok", 2)
                .put("moe_intermediate_size", 16).put("hc_mult", 4).put("num_hash_layers", 0).put("swiglu_limit", 1.0);
        j.putArray("layer_types").add("sliding_attention");
        j.putObject("compress_rates").put("compressed_sparse_attention", 4).put("heavily_compressed_attention", 8);
        j.putObject("rope_scaling").put("type", "yarn").put("factor", 4).put("original_max_position_embeddings", 16)
                .put("beta_fast", 32).put("beta_slow", 1);
        return ModelConfig.fromJson(j);
    }

    /** A scheduled run: the ticks from the first added request on, and every request's output batched and alone. */
    record Run(List<Scheduler.Tick<String>> ticks, Map<String, int[]> batched, Map<String, int[]> alone,
               Map<String, Generation> gens) {}

    interface Hook {
        /** Called before tick i (may add requests, cancel, reload limits). */
        void before(int i, Scheduler<String> sch, Map<String, Generation> gens, Map<String, List<Integer>> outs);
    }

    static Run run(CpuBackend backend, Scheduler.Limits limits, Map<String, BatchInvarianceRuns.Req> first,
                   Map<String, BatchInvarianceRuns.Req> later, Hook hook, int maxTicks) {
        TrackingBackend tb = new TrackingBackend(backend);
        int L = backend.config().numLayers;
        tb.cost = b -> LongPromptRuns.fakeCost(b, L);
        Scheduler<String> sch = new Scheduler<>(tb, limits, tb::now);
        Map<String, List<Integer>> outs = new LinkedHashMap<>();
        Map<String, Generation> gens = new LinkedHashMap<>();
        for (var en : first.entrySet()) {
            outs.put(en.getKey(), new ArrayList<>());
            Generation g = BatchInvarianceRuns.open(tb, en.getValue(), 64, outs.get(en.getKey()));
            gens.put(en.getKey(), g);
            sch.add(en.getKey(), g);
        }
        while (sch.tick().prefillTokens() > 0) { } // the first ones decode now
        for (var en : later.entrySet()) {
            outs.put(en.getKey(), new ArrayList<>());
            Generation g = BatchInvarianceRuns.open(tb, en.getValue(), 64, outs.get(en.getKey()));
            gens.put(en.getKey(), g);
            sch.add(en.getKey(), g);
        }
        List<Scheduler.Tick<String>> ticks = new ArrayList<>();
        while (!sch.isEmpty()) {
            if (hook != null) hook.before(ticks.size(), sch, gens, outs);
            ticks.add(sch.tick());
            if (ticks.size() > maxTicks) fail("no end after " + maxTicks + " ticks (livelock?)");
        }
        Map<String, int[]> batched = new LinkedHashMap<>();
        outs.forEach((k, v) -> batched.put(k, BatchInvarianceRuns.tokens(v)));
        Map<String, BatchInvarianceRuns.Req> all = new LinkedHashMap<>(first);
        all.putAll(later);
        return new Run(ticks, batched, LongPromptRuns.alone(backend, all), gens);
    }

    static Map<String, BatchInvarianceRuns.Req> decoders(int V, int n, int tokens, boolean drafts) {
        SplittableRandom rnd = new SplittableRandom(5);
        Map<String, BatchInvarianceRuns.Req> m = new LinkedHashMap<>();
        for (int i = 0; i < n; i++) {
            int[] p = new int[]{1 + rnd.nextInt(Math.min(90, V - 1)), 2, 3, 2, 3};
            m.put("d" + i, new BatchInvarianceRuns.Req(p, SamplingParams.greedy(tokens),
                    drafts ? NgramDraft.source() : null, drafts ? "auto" : "3"));
        }
        return m;
    }

    static BatchInvarianceRuns.Req longPrompt(ModelConfig c, int n, long seed, boolean sampled) {
        int[] p = TestModelsAccess.randomTokens(c, n, seed);
        return new BatchInvarianceRuns.Req(p, sampled ? SamplingParams.sampled(0.9, 0, 0.95, 0, seed, 5) : SamplingParams.greedy(5),
                null, "1");
    }

    static void assertAsAlone(Run r) {
        for (var en : r.alone().entrySet()) {
            if (r.gens().get(en.getKey()).finish() == Generation.Finish.CANCELLED) continue;
            assertArrayEquals(en.getValue(), r.batched().get(en.getKey()), en.getKey() + ": batched output differs from alone");
        }
    }

    static final Scheduler.Limits SLICED = new Scheduler.Limits(256, 64, 1.5, 8, true);

    /** The same run with slices off: the chunks are cut to the bound (contrast to the test above). */
    @Test
    void oneLayerModelWithSlicesOffKeepsTheBound() {
        Map<String, BatchInvarianceRuns.Req> later = new LinkedHashMap<>();
        later.put("long", longPrompt(oneLayer, 300, 7, false));
        Run r = run(target1, new Scheduler.Limits(256, 64, 1.5, 8, false), decoders(oneLayer.vocabSize, 3, 60, false),
                later, null, 2000);
        assertAsAlone(r);
        double worst = 0;
        for (Scheduler.Tick<String> t : r.ticks())
            if (t.budget() != null && t.budget().reason() == PrefillBudget.Reason.STRETCH && t.decodeRows() > 0)
                worst = Math.max(worst, t.nanos() / 1e6);
        assertTrue(worst <= 1.5 * 12 * 1.15, "worst STRETCH tick " + worst + " ms");
    }

    // the backend the generations of a run use (the TrackingBackend wrapping the CPU backend)
    static final ThreadLocal<Backend> CURRENT = new ThreadLocal<>();

    /** {@link #run} where the hook may open requests of {@code extra} (their alone outputs are computed too). */
    static Run runWithExtra(CpuBackend backend, Scheduler.Limits limits, Map<String, BatchInvarianceRuns.Req> first,
                            Map<String, BatchInvarianceRuns.Req> later, Map<String, BatchInvarianceRuns.Req> extra,
                            Hook hook, int maxTicks) {
        TrackingBackend tb = new TrackingBackend(backend);
        int L = backend.config().numLayers;
        tb.cost = b -> LongPromptRuns.fakeCost(b, L);
        CURRENT.set(tb);
        try {
            Scheduler<String> sch = new Scheduler<>(tb, limits, tb::now);
            Map<String, List<Integer>> outs = new LinkedHashMap<>();
            Map<String, Generation> gens = new LinkedHashMap<>();
            for (var en : first.entrySet()) {
                outs.put(en.getKey(), new ArrayList<>());
                Generation g = BatchInvarianceRuns.open(tb, en.getValue(), 64, outs.get(en.getKey()));
                gens.put(en.getKey(), g);
                sch.add(en.getKey(), g);
            }
            while (sch.tick().prefillTokens() > 0) { }
            for (var en : later.entrySet()) {
                outs.put(en.getKey(), new ArrayList<>());
                Generation g = BatchInvarianceRuns.open(tb, en.getValue(), 64, outs.get(en.getKey()));
                gens.put(en.getKey(), g);
                sch.add(en.getKey(), g);
            }
            List<Scheduler.Tick<String>> ticks = new ArrayList<>();
            while (!sch.isEmpty()) {
                if (hook != null) hook.before(ticks.size(), sch, gens, outs);
                ticks.add(sch.tick());
                if (ticks.size() > maxTicks) fail("no end after " + maxTicks + " ticks (livelock?)");
            }
            Map<String, int[]> batched = new LinkedHashMap<>();
            outs.forEach((k, v) -> batched.put(k, BatchInvarianceRuns.tokens(v)));
            Map<String, BatchInvarianceRuns.Req> all = new LinkedHashMap<>(first);
            all.putAll(later);
            all.putAll(extra);
            Map<String, int[]> alone = LongPromptRuns.alone(backend, all);
            alone.keySet().retainAll(batched.keySet());
            return new Run(ticks, batched, alone, gens);
        } finally {
            CURRENT.remove();
        }
    }

    /**
     * Cancelling the long prompt while its chunk is part-way through its layers: it ends at the next tick, its
     * sequence released, the others go on unchanged, and the decodes keep stepping (no livelock on a dead slice).
     */
    @Test
    void cancellingASlicedPromptMidChunkEndsItAndTheOthersGoOn() {
        Map<String, BatchInvarianceRuns.Req> later = new LinkedHashMap<>();
        later.put("long", longPrompt(cfg, 300, 7, false));
        later.put("long2", longPrompt(cfg, 200, 8, true));
        boolean[] cancelled = {false};
        int[] at = {-1};
        Hook hook = (i, sch, gens, outs) -> {
            Generation g = gens.get("long");
            if (!cancelled[0] && i > 10 && g.slicing()) {
                g.cancel();
                cancelled[0] = true;
                at[0] = i;
            }
        };
        Run r = runWithExtra(target, SLICED, decoders(cfg.vocabSize, 3, 80, false), later, Map.of(), hook, 3000);
        assertTrue(cancelled[0], "the long prompt was cancelled part-way through a chunk's layers");
        assertEquals(Generation.Finish.CANCELLED, r.gens().get("long").finish());
        assertTrue(r.ticks().get(at[0]).ended().contains("long"), "ended at the next tick: " + r.ticks().get(at[0]).ended());
        assertAsAlone(r);
    }

    /**
     * A reload mid-chunk: layer slices off, then maxTickStretch 0, while the long prompt's chunk is part-way through its
     * layers. The chunk finishes (all remaining layers once the bound is off), nothing is stuck, outputs as alone.
     */
    @Test
    void reloadsMidChunkFinishTheChunkAndOutputsStayAsAlone() {
        for (Scheduler.Limits reload : List.of(new Scheduler.Limits(256, 64, 1.5, 8, false),
                new Scheduler.Limits(256, 64, 0, 1, true), new Scheduler.Limits(256, 64, 0, 1, false))) {
            Map<String, BatchInvarianceRuns.Req> later = new LinkedHashMap<>();
            later.put("long", longPrompt(cfg, 300, 7, false));
            later.put("long2", longPrompt(cfg, 150, 8, true));
            int[] at = {-1};
            Hook hook = (i, sch, gens, outs) -> {
                if (at[0] < 0 && i > 10 && gens.get("long").slicing()) {
                    sch.limits(reload);
                    at[0] = i;
                }
            };
            Run r = runWithExtra(target, SLICED, decoders(cfg.vocabSize, 3, 80, true), later, Map.of(), hook, 3000);
            assertTrue(at[0] >= 0, "reloaded mid-chunk");
            if (reload.maxTickStretch() == 0) {
                Scheduler.Tick<String> t = r.ticks().get(at[0]);
                assertFalse(r.gens().get("long").slicing() && t.stepped().contains("long"),
                        "with the bound off the part-way chunk finishes at once");
            }
            assertAsAlone(r);
        }
    }

    /**
     * A clock that stands still (every duration 0): decodeMs 0, every bound the floor, slices of one layer. Every prompt
     * still progresses and ends; nothing loops forever; outputs as alone.
     */
    @Test
    void aStandingClockNeitherLivelocksNorChangesOutputs() {
        TrackingBackend tb = new TrackingBackend(target);
        tb.cost = null; // the clock stands still
        Scheduler<String> sch = new Scheduler<>(tb, SLICED, tb::now);
        Map<String, BatchInvarianceRuns.Req> reqs = new LinkedHashMap<>(decoders(cfg.vocabSize, 3, 40, true));
        reqs.put("long", longPrompt(cfg, 300, 7, false));
        reqs.put("long2", longPrompt(cfg, 200, 8, true));
        Map<String, List<Integer>> outs = new LinkedHashMap<>();
        for (var en : reqs.entrySet()) {
            outs.put(en.getKey(), new ArrayList<>());
            sch.add(en.getKey(), BatchInvarianceRuns.open(tb, en.getValue(), 64, outs.get(en.getKey())));
        }
        int n = 0;
        while (!sch.isEmpty()) {
            sch.tick();
            assertTrue(++n < 5000, "no end after 5000 ticks");
        }
        assertEquals(0.0, sch.prefillBudget().decodeMs());
        Map<String, int[]> alone = LongPromptRuns.alone(target, reqs);
        for (var en : alone.entrySet())
            assertArrayEquals(en.getValue(), BatchInvarianceRuns.tokens(outs.get(en.getKey())), en.getKey());
    }

    /**
     * Two long prompts and speculative decodes (verify rows 1-4 swinging each tick) under STRETCH with slices: both
     * prompts progress (neither waits for the other's whole prefill), every tick steps every decode, outputs as alone,
     * and the run ends well within a bound on ticks.
     */
    @Test
    void twoLongPromptsBesideSwingingVerifyRowsBothProgressAndStayAsAlone() {
        Map<String, BatchInvarianceRuns.Req> later = new LinkedHashMap<>();
        later.put("long", longPrompt(cfg, 320, 7, false));
        later.put("long2", longPrompt(cfg, 320, 8, true));
        int[] both = {0};
        Hook hook = (i, sch, gens, outs) -> {
            Generation a = gens.get("long"), b = gens.get("long2");
            if (a.prefilledTokens() > 0 && a.prefilling() && b.prefilledTokens() > 0 && b.prefilling()) both[0]++;
        };
        Run r = runWithExtra(target, SLICED, decoders(cfg.vocabSize, 4, 150, true), later, Map.of(), hook, 3000);
        assertAsAlone(r);
        assertTrue(both[0] > 3, "the two prompts' prefills interleave (" + both[0] + " ticks with both part-way)");
        int probes = 0;
        for (Scheduler.Tick<String> t : r.ticks()) {
            if (t.budget() != null && t.budget().reason() == PrefillBudget.Reason.PROBE) probes++;
            if (t.budget() != null && t.budget().reason() == PrefillBudget.Reason.STRETCH) assertTrue(t.slicedTokens() > 0
                    || t.prefillTokens() <= 8, "under STRETCH a long prompt's chunk runs as a slice, not cut");
        }
        assertTrue(probes < r.ticks().size() / 4, probes + " probes of " + r.ticks().size() + " ticks");
    }

    /**
     * Through the scheduler: speculative decodes whose verify rows swing each tick, under a maxBatchRows that lets a
     * varying number of decode entries into a tick, and short requests arriving and ending; decode rows cost 1 ms
     * each. Exploratory: how many probes are measured and how far decodeMs strays from the real decode-only time.
     */
    @Test
    void swingingEntriesUnderMaxBatchRowsKeepDecodeMsFreshAndProbesRare() {
        TrackingBackend tb = new TrackingBackend(target);
        int L = cfg.numLayers;
        tb.cost = b -> {
            long rows = b.stream().filter(e -> e.kind() != StepKind.PREFILL).mapToLong(BatchEntry::count).sum();
            long pre = LongPromptRuns.fakeCost(b.stream().filter(e -> e.kind() == StepKind.PREFILL).toList(), L);
            return 4_000_000L + rows * 1_000_000L + pre;
        };
        Scheduler<String> sch = new Scheduler<>(tb, new Scheduler.Limits(12, 64, 1.5, 8, true), tb::now);
        Map<String, BatchInvarianceRuns.Req> reqs = new LinkedHashMap<>(decoders(cfg.vocabSize, 8, 1500, true));
        Map<String, List<Integer>> outs = new LinkedHashMap<>();
        for (var en : reqs.entrySet()) {
            outs.put(en.getKey(), new ArrayList<>());
            sch.add(en.getKey(), BatchInvarianceRuns.open(tb, en.getValue(), 64, outs.get(en.getKey())));
        }
        for (int i = 0; i < 5; i++) sch.tick();
        BatchInvarianceRuns.Req lp = longPrompt(cfg, 2500, 7, false);
        outs.put("long", new ArrayList<>());
        Generation lg = BatchInvarianceRuns.open(tb, lp, 64, outs.get("long"));
        sch.add("long", lg);
        reqs.put("long", lp);
        int probes = 0, prefillTicks = 0, measured = 0, n = 0;
        double last = sch.prefillBudget().decodeMs();
        java.util.Set<Integer> entrySet = new java.util.TreeSet<>();
        StringBuilder trace = new StringBuilder();
        while (!lg.done() && n < 3000) {
            Scheduler.Tick<String> t = sch.tick();
            n++;
            int entries = t.entries() - (t.prefillTokens() > 0 ? 1 : 0);
            entrySet.add(entries);
            if (t.budget() != null && t.budget().reason() == PrefillBudget.Reason.PROBE) {
                probes++;
                if (sch.prefillBudget().decodeMs() != last) measured++;
                if (trace.length() < 2000) trace.append(" P").append(entries).append('/').append(t.decodeRows()).append('=').append(t.nanos() / 1e6);
            } else if (t.prefillTokens() > 0) prefillTicks++;
            last = sch.prefillBudget().decodeMs();
        }
        assertTrue(lg.done(), "the long prompt ended");
        assertTrue(probes <= prefillTicks / 8 + 3, probes + " probes for " + prefillTicks + " prefill ticks (" + measured + " measured; entries "
                + entrySet + ";" + trace + ")");
        while (!sch.isEmpty()) sch.tick();
        Map<String, int[]> alone = LongPromptRuns.alone(target, reqs);
        for (var en : alone.entrySet())
            assertArrayEquals(en.getValue(), BatchInvarianceRuns.tokens(outs.get(en.getKey())), en.getKey());
    }

    /**
     * Exploratory, through the scheduler: two n-gram speculative streams of width 8 whose verify rows swing between 1
     * and 9 each (2 to 18 decode rows: more than 2x + 8 apart, a "load change") while a long prompt waits. Counts the
     * probes: every tick whose rows cross the threshold is a probe, a tick without prefill.
     */
    @Test
    void twoWideSpeculativeStreamsDoNotStarveAPrompt() {
        TrackingBackend tb = new TrackingBackend(target);
        int L = cfg.numLayers;
        tb.cost = b -> LongPromptRuns.fakeCost(b, L);
        Scheduler<String> sch = new Scheduler<>(tb, SLICED, tb::now);
        Map<String, BatchInvarianceRuns.Req> reqs = new LinkedHashMap<>();
        SplittableRandom rnd = new SplittableRandom(3);
        for (int i = 0; i < 2; i++) {
            int[] p = new int[40];
            for (int j = 0; j < p.length; j++) p[j] = 1 + rnd.nextInt(4); // a repetitive prompt: n-gram matches
            reqs.put("d" + i, new BatchInvarianceRuns.Req(p, SamplingParams.greedy(400), NgramDraft.source(), "8"));
        }
        Map<String, List<Integer>> outs = new LinkedHashMap<>();
        for (var en : reqs.entrySet()) {
            outs.put(en.getKey(), new ArrayList<>());
            sch.add(en.getKey(), BatchInvarianceRuns.open(tb, en.getValue(), 64, outs.get(en.getKey())));
        }
        while (sch.tick().prefillTokens() > 0) { }
        for (int i = 0; i < 3; i++) sch.tick();
        BatchInvarianceRuns.Req lp = longPrompt(cfg, 600, 7, false);
        outs.put("long", new ArrayList<>());
        Generation lg = BatchInvarianceRuns.open(tb, lp, 64, outs.get("long"));
        sch.add("long", lg);
        reqs.put("long", lp);
        int probes = 0, pre = 0, n = 0;
        StringBuilder rows = new StringBuilder();
        while (!lg.done() && n < 2000) {
            Scheduler.Tick<String> t = sch.tick();
            n++;
            if (t.budget() != null && t.budget().reason() == PrefillBudget.Reason.PROBE) probes++;
            if (t.prefillTokens() > 0) pre++;
            if (rows.length() < 600) rows.append(' ').append(t.decodeRows()).append(t.budget() == null ? "" : t.budget().reason().name().substring(0, 2));
        }
        assertTrue(lg.done(), "the long prompt ended within " + n + " ticks");
        assertTrue(probes <= pre / 4 + 3, probes + " probes against " + pre + " prefill ticks; rows:" + rows);
        while (!sch.isEmpty()) sch.tick();
        Map<String, int[]> alone = LongPromptRuns.alone(target, reqs);
        for (var en : alone.entrySet())
            assertArrayEquals(en.getValue(), BatchInvarianceRuns.tokens(outs.get(en.getKey())), en.getKey());
    }
}
