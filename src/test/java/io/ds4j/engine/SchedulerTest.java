package io.ds4j.engine;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.model.ModelConfig;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.NgramDraft;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The engine's scheduler on the CPU backend (micro model): batch invariance (every request's output, greedy or
 * seeded-sampled, plain or speculative with n-gram and draft-model drafts, equals the same request run alone while
 * 17 others of different prompt lengths share its steps); draft-model proposals run as batched steps; a cancelled
 * request, mid-prefill or mid-decode, ends at the next tick with its state released while the others go on; a long
 * prompt is split across ticks under the token budget while the decodes step in every tick; beside running decodes the
 * latency policy cuts its chunks shorter (never where the backend says a cut changes numbers) and its output stays
 * that of the request alone; a request whose step fails inside a batched step fails alone.
 */
class SchedulerTest {
    static ModelConfig cfg;
    static CpuBackend targetCpu, otherCpu, sameCpu;

    @BeforeAll
    static void load() {
        cfg = TestModelsAccess.microConfig();
        targetCpu = new CpuBackend(TestModelsAccess.random(cfg, 42));
        otherCpu = new CpuBackend(TestModelsAccess.random(cfg, 4242));
        sameCpu = new CpuBackend(TestModelsAccess.random(cfg, 42));
    }

    @AfterAll
    static void close() {
        targetCpu.close();
        otherCpu.close();
        sameCpu.close();
    }

    record Req(int[] prompt, SamplingParams params, DraftSource draft, String width) {
        BatchInvarianceRuns.Req runs() {
            return new BatchInvarianceRuns.Req(prompt, params, draft, width);
        }
    }

    static Generation open(Backend target, Req r, int chunk, List<Integer> out) {
        return BatchInvarianceRuns.open(target, r.runs(), chunk, out);
    }

    static int[] tokens(List<Integer> l) {
        return BatchInvarianceRuns.tokens(l);
    }

    @Test
    void eachRequestsOutputIsTheSameAloneAndInABatch() {
        BatchInvarianceRuns.Report rep = BatchInvarianceRuns.run(targetCpu, otherCpu, sameCpu);
        assertEquals(List.of(), rep.failures());
        for (int i = 0; i < rep.requests().size(); i++) {
            BatchInvarianceRuns.Req r = rep.requests().get(i);
            assertTrue(rep.alone().get(i).length > 0);
            assertArrayEquals(rep.alone().get(i), rep.batched().get(i), "request " + i + " (" + r.label() + ")");
            // speculative greedy output is plain greedy output, batched too
            if (r.params().isGreedy()) assertArrayEquals(rep.plain().get(i), rep.batched().get(i), "request " + i + " (" + r.label() + ")");
        }
        assertTrue(rep.widest() >= 16, "at least 16 requests shared a step, widest " + rep.widest());
        assertTrue(rep.mixedKinds() > 0, "some steps mixed prefill, decode and verify entries");
        assertTrue(rep.maxPrefill() <= 64, "prefill within the token budget: " + rep.maxPrefill());
        assertTrue(rep.ticks() < rep.aloneSteps() / 3, "batching needs far fewer steps: " + rep.ticks() + " ticks vs "
                + rep.aloneSteps() + " alone");
        assertTrue(rep.widestDraft() >= 3, "draft-model steps batched over the requests using it: " + rep.widestDraft());
        assertTrue(rep.allReleased(), "every finished request released its sequence");
    }

    @Test
    void aCancelledRequestEndsAtTheNextTickAndReleasesItsState() {
        TrackingBackend target = new TrackingBackend(targetCpu);
        Scheduler<String> sch = new Scheduler<>(target, new Scheduler.Limits(256, 8));
        SplittableRandom rnd = new SplittableRandom(9);
        Map<String, Integer> lens = Map.of("decoding", 5, "prefilling", 120, "other1", 7, "other2", 30);
        Map<String, Generation> gens = new java.util.LinkedHashMap<>();
        Map<String, List<Integer>> outs = new java.util.HashMap<>();
        for (String k : List.of("decoding", "prefilling", "other1", "other2")) {
            int[] p = new int[lens.get(k)];
            for (int j = 0; j < p.length; j++) p[j] = rnd.nextInt(cfg.vocabSize);
            List<Integer> out = new ArrayList<>();
            outs.put(k, out);
            Generation g = open(target, new Req(p, SamplingParams.greedy(60), k.equals("other1") ? NgramDraft.source() : null, "2"), 8, out);
            gens.put(k, g);
            sch.add(k, g);
        }
        for (int i = 0; i < 4; i++) sch.tick();
        assertTrue(gens.get("prefilling").prefilling(), "the long prompt is still prefilling");
        assertFalse(gens.get("decoding").prefilling());
        int seqDecoding = 0, seqPrefilling = 1;
        gens.get("decoding").cancel();
        gens.get("prefilling").cancel();
        int before = outs.get("decoding").size();
        Scheduler.Tick<String> t = sch.tick();
        assertTrue(t.ended().containsAll(List.of("decoding", "prefilling")), "both ended at this tick: " + t.ended());
        assertFalse(t.stepped().contains("decoding") || t.stepped().contains("prefilling"), "no step for a cancelled request");
        assertEquals(Generation.Finish.CANCELLED, gens.get("decoding").finish());
        assertEquals(Generation.Finish.CANCELLED, gens.get("prefilling").finish());
        assertEquals(before, outs.get("decoding").size());
        assertTrue(target.sequences.get(seqDecoding).closed && target.sequences.get(seqPrefilling).closed, "their state is released");
        assertEquals(2, sch.size());
        while (!sch.isEmpty()) assertTrue(sch.tick().failed().isEmpty());
        assertEquals(60, outs.get("other1").size(), "the others ran to their end");
        assertEquals(60, outs.get("other2").size());
    }

    @Test
    void aLongPromptIsSplitUnderTheTokenBudgetWhileDecodesStepEveryTick() {
        TrackingBackend target = new TrackingBackend(targetCpu);
        int budget = 16;
        Scheduler<String> sch = new Scheduler<>(target, new Scheduler.Limits(256, budget));
        int chunk = Scheduler.prefillChunk(512, sch.limits());
        assertEquals(budget, chunk, "prefill chunks are no longer than the budget");
        SplittableRandom rnd = new SplittableRandom(3);
        List<String> decoders = List.of("a", "b", "c");
        for (String k : decoders) {
            int[] p = {1 + rnd.nextInt(90), 2, 3};
            sch.add(k, open(target, new Req(p, SamplingParams.greedy(200), k.equals("b") ? NgramDraft.source() : null, "3"), chunk,
                    new ArrayList<>()));
        }
        while (true) {
            Scheduler.Tick<String> t = sch.tick();
            if (t.prefillTokens() == 0) break; // all three decode now
        }
        int[] longPrompt = new int[300];
        for (int j = 0; j < longPrompt.length; j++) longPrompt[j] = rnd.nextInt(cfg.vocabSize);
        List<Integer> longOut = new ArrayList<>();
        Generation lg = open(target, new Req(longPrompt, SamplingParams.greedy(4), null, "1"), chunk, longOut);
        sch.add("long", lg);
        int ticks = 0;
        while (longOut.isEmpty()) {
            Scheduler.Tick<String> t = sch.tick();
            ticks++;
            assertTrue(t.prefillTokens() <= budget, "tick " + ticks + ": " + t.prefillTokens() + " prefill tokens");
            assertTrue(t.stepped().containsAll(decoders), "tick " + ticks + ": every decode stepped, " + t.stepped());
        }
        assertEquals((300 + budget - 1) / budget, ticks, "the prompt took one budget-sized chunk per tick");
    }

    /** Fake step costs: 12 ms when decode/verify rows run, plus 2 ms + 0.25 ms per token when prefill runs. */
    static long fakeCost(List<BatchEntry> batch) {
        boolean decode = batch.stream().anyMatch(e -> e.kind() != StepKind.PREFILL);
        int prefill = batch.stream().filter(e -> e.kind() == StepKind.PREFILL).mapToInt(BatchEntry::count).sum();
        return (decode ? 12_000_000L : 0) + (prefill > 0 ? 2_000_000L + 250_000L * prefill : 0);
    }

    /** What a run of a long prompt beside decoding requests showed. */
    record LongRun(List<Integer> longChunks, List<Scheduler.Tick<String>> ticks) {}

    /**
     * Three greedy requests decode (one with an n-gram draft) when a 300-token greedy prompt and a 150-token seeded
     * sampled prompt arrive (prefill chunk 64, token budget 64, maxTickStretch 1.5, floor 8), on fake step costs;
     * every request's tokens are compared with the same request stepped alone.
     * @param reloadAt ticks after the long prompts' arrival at which the limits turn the bound off, then on again two
     *                 ticks later (-1: never)
     */
    static LongRun longPromptBesideDecodes(java.util.function.BiPredicate<Integer, Integer> splitRule, int reloadAt) {
        TrackingBackend target = new TrackingBackend(targetCpu);
        target.cost = SchedulerTest::fakeCost;
        target.splitRule = splitRule;
        Scheduler.Limits bounded = new Scheduler.Limits(256, 64, 1.5, 8);
        Scheduler<String> sch = new Scheduler<>(target, bounded, target::now);
        SplittableRandom rnd = new SplittableRandom(11);
        Map<String, Req> reqs = new java.util.LinkedHashMap<>();
        for (String k : List.of("a", "b", "c"))
            reqs.put(k, new Req(new int[]{1 + rnd.nextInt(90), 2, 3}, SamplingParams.greedy(120), k.equals("b") ? NgramDraft.source() : null, "3"));
        int[] p1 = new int[300], p2 = new int[150];
        for (int j = 0; j < p1.length; j++) p1[j] = rnd.nextInt(cfg.vocabSize);
        for (int j = 0; j < p2.length; j++) p2[j] = rnd.nextInt(cfg.vocabSize);
        reqs.put("long", new Req(p1, SamplingParams.greedy(5), null, "1"));
        reqs.put("long2", new Req(p2, SamplingParams.sampled(0.9, 0, 0.95, 0, 77, 5), null, "1"));
        Map<String, List<Integer>> outs = new java.util.HashMap<>();
        for (String k : List.of("a", "b", "c")) {
            outs.put(k, new ArrayList<>());
            sch.add(k, open(target, reqs.get(k), 64, outs.get(k)));
        }
        while (sch.tick().prefillTokens() > 0) { } // the three decode now
        int firstLongStep = target.counts.size();
        for (String k : List.of("long", "long2")) {
            outs.put(k, new ArrayList<>());
            sch.add(k, open(target, reqs.get(k), 64, outs.get(k)));
        }
        List<Scheduler.Tick<String>> ticks = new ArrayList<>();
        while (outs.get("long").isEmpty() || outs.get("long2").isEmpty()) {
            if (ticks.size() == reloadAt) sch.limits(new Scheduler.Limits(256, 64));
            if (ticks.size() == reloadAt + 2) sch.limits(bounded);
            ticks.add(sch.tick());
        }
        List<Integer> chunks = new ArrayList<>();
        for (int s = firstLongStep; s < target.counts.size(); s++) {
            int[] c = target.counts.get(s);
            for (int e = 0; e < c.length; e++) if (target.steps.get(s).get(e) == StepKind.PREFILL) chunks.add(c[e]);
        }
        while (!sch.isEmpty()) sch.tick();
        for (var en : reqs.entrySet()) {
            List<Integer> a = new ArrayList<>();
            Generation g = open(targetCpu, en.getValue(), 64, a);
            while (g.step()) { }
            assertArrayEquals(tokens(a), tokens(outs.get(en.getKey())), "request " + en.getKey() + " as alone");
        }
        return new LongRun(chunks, ticks);
    }

    @Test
    void besideDecodesALongPromptsChunksAreCutToTheStretchBoundAndOutputsStayAsAlone() {
        LongRun r = longPromptBesideDecodes(null, -1);
        int cut = 0, probes = 0, prev = -1;
        for (int i = 0; i < r.ticks().size(); i++) {
            Scheduler.Tick<String> t = r.ticks().get(i);
            PrefillBudget.Decision d = t.budget();
            assertNotNull(d, "tick " + i + ": a prompt waited");
            assertEquals(3, t.stepped().stream().filter(k -> k.length() == 1).count(), "tick " + i + ": every decode stepped");
            assertTrue(t.prefillTokens() <= Math.max(d.tokens(), 0) || d.tokens() == 0 && t.prefillTokens() == 0,
                    "tick " + i + ": " + t.prefillTokens() + " prefill tokens over the limit " + d.tokens());
            if (d.reason() == PrefillBudget.Reason.PROBE) {
                probes++;
                assertEquals(0, t.prefillTokens());
                assertNotEquals(i - 1, prev, "two probes in a row: the prompt must progress");
                prev = i;
                continue;
            }
            assertTrue(t.prefillTokens() > 0, "tick " + i + ": the prompt progresses (" + d.reason() + ")");
            if (d.reason() == PrefillBudget.Reason.STRETCH || d.reason() == PrefillBudget.Reason.CEILING)
                assertTrue(t.nanos() <= 1.5 * 12_000_000L, "tick " + i + ": " + t.nanos() / 1e6 + " ms > 1.5 x 12 ms");
            else assertTrue(t.prefillTokens() <= 8, "tick " + i + " at the floor: " + t.prefillTokens());
            if (t.prefillTokens() < 64 && d.bounded()) cut++;
        }
        assertTrue(probes <= 1, "decode-only time was measured before the prompts came: " + probes + " probes");
        assertTrue(cut > r.ticks().size() / 2, "most ticks cut the prompt's chunk: " + cut + " of " + r.ticks().size());
        // fixed point of the learned cost: 2 + 0.25 n <= 0.5 * 12, so 16 tokens a tick
        int last = r.ticks().get(r.ticks().size() - 2).prefillTokens();
        assertTrue(last >= 12 && last <= 16, "chunks grew to the bound: " + last);
        assertEquals(450, r.longChunks().stream().mapToInt(Integer::intValue).sum(), "every prompt token prefilled once");
    }

    /**
     * A backend whose steps of 32 rows or more round differently from shorter ones (as the GPU's tensor-core
     * threshold): a chunk of 32 or more is only cut into parts of at least 32, whatever the bound asks.
     */
    @Test
    void chunksAreCutOnlyWhereTheBackendSaysTheNumbersStayTheSame() {
        LongRun r = longPromptBesideDecodes((rows, first) -> rows < 32 || (first >= 32 && rows - first >= 32), -1);
        // the 150-token prompt's last natural chunk (22 tokens) is below the threshold: it may be cut anywhere
        assertEquals(22, r.longChunks().stream().filter(c -> c < 32).mapToInt(Integer::intValue).sum(),
                "below the threshold only the parts of a chunk that was below it: " + r.longChunks());
        assertTrue(r.longChunks().stream().anyMatch(c -> c < 64), "the bound cut chunks to 32: " + r.longChunks());
        // and a backend that never allows a cut gets whole chunks
        LongRun w = longPromptBesideDecodes((rows, first) -> false, -1);
        assertTrue(w.longChunks().stream().allMatch(c -> c == 64 || c == 300 % 64 || c == 150 % 64),
                "whole chunks only: " + w.longChunks());
    }

    @Test
    void aReloadOfTheLimitsAppliesFromTheNextTick() {
        LongRun r = longPromptBesideDecodes(null, 6);
        for (int i = 3; i < 9; i++) {
            Scheduler.Tick<String> t = r.ticks().get(i);
            // bounded, the chunks stay within 16 tokens (2 + 0.25 n <= 0.5 x 12); off, the rest of a 64-token chunk runs
            if (i == 6 || i == 7) {
                assertEquals(PrefillBudget.Reason.OFF, t.budget().reason(), "tick " + i);
                assertTrue(t.prefillTokens() > 16, "tick " + i + ": the bound is off: " + t.prefillTokens());
            } else {
                assertTrue(t.budget().bounded(), "tick " + i + ": " + t.budget());
                assertTrue(t.prefillTokens() <= 16, "tick " + i + ": " + t.prefillTokens());
            }
        }
    }

    @Test
    void maxBatchRowsDefersDecodesToTheNextTickWithoutChangingThem() {
        TrackingBackend target = new TrackingBackend(targetCpu);
        Scheduler<Integer> sch = new Scheduler<>(target, new Scheduler.Limits(3, 64));
        List<int[]> alone = new ArrayList<>();
        List<List<Integer>> outs = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            int[] p = {5 + i, 6, 7, 5 + i, 6};
            Req r = new Req(p, SamplingParams.sampled(0.8, 0, 1, 0, 7 + i, 12), i % 2 == 0 ? NgramDraft.source() : null, "2");
            List<Integer> a = new ArrayList<>();
            Generation g = open(targetCpu, r, 64, a);
            while (g.step()) { }
            alone.add(tokens(a));
            List<Integer> out = new ArrayList<>();
            outs.add(out);
            sch.add(i, open(target, r, 64, out));
        }
        while (!sch.isEmpty()) {
            Scheduler.Tick<Integer> t = sch.tick();
            assertTrue(t.decodeRows() <= 3 || t.stepped().size() == 1, "decode rows " + t.decodeRows() + " over the limit");
        }
        for (int i = 0; i < 6; i++) assertArrayEquals(alone.get(i), tokens(outs.get(i)), "request " + i);
    }

    @Test
    void aRequestWhoseStepFailsInABatchFailsAlone() {
        TrackingBackend target = new TrackingBackend(targetCpu);
        Scheduler<Integer> sch = new Scheduler<>(target, new Scheduler.Limits(256, 64));
        List<List<Integer>> outs = new ArrayList<>();
        List<int[]> alone = new ArrayList<>();
        for (int i = 0; i < 4; i++) {
            Req r = new Req(new int[]{3 + i, 4, 5, 6}, SamplingParams.greedy(20), i == 1 ? NgramDraft.source() : null, "2");
            List<Integer> a = new ArrayList<>();
            Generation g = open(targetCpu, r, 64, a);
            while (g.step()) { }
            alone.add(tokens(a));
            List<Integer> out = new ArrayList<>();
            outs.add(out);
            sch.add(i, open(target, r, 64, out));
        }
        sch.tick();
        sch.tick();
        target.sequences.get(2).poisoned = true;
        Scheduler.Tick<Integer> t = sch.tick();
        assertTrue(t.isolated(), "the batched step failed and was retried entry by entry");
        assertEquals(List.of(2), List.copyOf(t.failed().keySet()));
        assertTrue(t.failed().get(2).getMessage().contains("injected fault"));
        assertTrue(target.sequences.get(2).closed, "the failed request's state is released");
        while (!sch.isEmpty()) assertTrue(sch.tick().failed().isEmpty());
        for (int i : new int[]{0, 1, 3}) assertArrayEquals(alone.get(i), tokens(outs.get(i)), "request " + i + " was not affected");
    }
}
