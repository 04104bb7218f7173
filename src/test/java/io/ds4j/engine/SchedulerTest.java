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
 * that of the request alone; at the floor a chunk is cut to the floor where that makes a shorter step than one layer
 * of it (CPU-like costs) and runs in slices where it does not (GPU-like); a request whose step fails inside a batched
 * step fails alone.
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

    /**
     * A constraint whose mask fails while the step's rows are sampled ahead fails its own request at the commit, and no
     * other request is committed while its rows are still being sampled ahead: the parallel loop is not cut short by
     * the failure (its caller went on to the commits while other tasks still ran, racing their samplers).
     */
    @Test
    void aMaskThatFailsAheadOfTheCommitRacesNoOtherRequest() {
        int V = cfg.vocabSize;
        Scheduler<Integer> sch = new Scheduler<>(targetCpu, new Scheduler.Limits(256, 64));
        List<Slow> slow = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            io.ds4j.sampling.Constraint c;
            if (i % 2 == 0) {
                c = new Slow(V, 0) {
                    @Override public long[] allowedAfter(int[] t, int n, int remaining) {
                        throw new IllegalStateException("no mask for you");
                    }
                    @Override public long[] allowed(int remaining) {
                        throw new IllegalStateException("no mask for you");
                    }
                };
            } else {
                Slow sl = new Slow(V, 40);
                slow.add(sl);
                c = sl;
            }
            int[] prompt = {1 + i, 2, 3};
            SamplingParams p = SamplingParams.sampled(0.9, 0, 0.95, 0, 70 + i, 6);
            sch.add(i, new Generation(targetCpu, targetCpu.newSequence(16), prompt, new io.ds4j.sampling.Sampler(p, V, prompt), null, null,
                    new Generation.Options(8, 4096, new int[]{-1}, 16), (t, lp) -> true, c));
        }
        java.util.Set<Integer> failed = new java.util.HashSet<>();
        for (int ticks = 0; !sch.isEmpty() && ticks < 100; ticks++) failed.addAll(sch.tick().failed().keySet());
        assertEquals(java.util.Set.of(0, 2, 4, 6, 8), failed, "the requests whose masks failed, alone");
        for (Slow sl : slow) {
            assertTrue(sl.advanced > 0, "the others went on");
            assertFalse(sl.raced, "a commit came while the row was still being sampled ahead");
        }
    }

    /** Every token allowed, each mask computed ahead slowly; notes a commit that comes while one is computed. */
    static class Slow implements io.ds4j.sampling.Constraint {
        final long[] all;
        final int sleepMs;
        volatile boolean inMask, raced;
        volatile int advanced;

        Slow(int V, int sleepMs) {
            all = new long[(V + 63) / 64];
            java.util.Arrays.fill(all, -1L);
            this.sleepMs = sleepMs;
        }

        @Override public long[] allowed(int remaining) { return all; }
        @Override public long[] allowedAfter(int[] t, int n, int remaining) {
            inMask = true;
            try {
                Thread.sleep(sleepMs);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            inMask = false;
            return all;
        }
        @Override public int acceptablePrefix(int[] t, int n, int remaining) { return n; }
        @Override public void advance(int token) {
            if (inMask) raced = true;
            advanced++;
        }
        @Override public boolean complete() { return true; }
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

    static void assertAsAlone(LongPromptRuns.Run r) {
        for (String k : r.alone().keySet()) assertArrayEquals(r.alone().get(k), r.batched().get(k), "request " + k + " as alone");
    }

    @Test
    void besideDecodesALongPromptsChunksAreCutToTheStretchBoundAndOutputsStayAsAlone() {
        LongPromptRuns.Run r = LongPromptRuns.run(targetCpu, null, -1, false);
        assertAsAlone(r);
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
     * With layer slices on, where the bound allows more than the floor but less than a chunk, a long prompt's chunk is
     * not cut to the tokens that fit (a short chunk pays most of a whole one's pass over the weights): the whole chunk
     * runs the layers that fit, every tick within the bound, and every output is the request's alone.
     */
    @Test
    void underTheStretchBoundALongPromptsChunksRunInLayerSlicesInsteadOfBeingCut() {
        LongPromptRuns.Run r = LongPromptRuns.run(targetCpu, null, -1, true);
        assertAsAlone(r);
        int sliced = 0, stretch = 0;
        for (int i = 0; i < r.ticks().size(); i++) {
            Scheduler.Tick<String> t = r.ticks().get(i);
            PrefillBudget.Decision d = t.budget();
            assertEquals(3, t.stepped().stream().filter(k -> k.length() == 1).count(), "tick " + i + ": every decode stepped");
            if (d.reason() != PrefillBudget.Reason.STRETCH) continue;
            stretch++;
            assertTrue(t.nanos() <= 1.5 * 12_000_000L, "tick " + i + ": " + t.nanos() / 1e6 + " ms > 1.5 x 12 ms");
            if (t.slicedTokens() > 0) sliced++;
            else assertTrue(t.prefillTokens() <= 16, "tick " + i + ": a whole chunk of " + t.prefillTokens() + " tokens");
        }
        assertTrue(stretch > r.ticks().size() / 2 && sliced > stretch / 2, sliced + " of " + stretch + " ticks under the stretch"
                + " bound ran a slice, of " + r.ticks().size());
        // chunks were cut only before the prefill cost was known (the first chunk of each prompt at most: its two
        // parts, each listed once per slice)
        long cut = r.longChunks().stream().filter(c -> c != 64 && c != 300 % 64 && c != 150 % 64).distinct().count();
        assertTrue(cut <= 4, "chunks cut: " + r.longChunks());
    }

    /**
     * Where even a floor-sized chunk breaks the stretch bound (a prefill pass with a large fixed cost, as on the GPU),
     * prompts whose whole rest fits in the floor come along in the same tick up to the token budget, a long prompt's
     * chunks stay at the floor, a short prompt above the floor waits its turn, and every output is the request's alone.
     */
    @org.junit.jupiter.params.ParameterizedTest
    @org.junit.jupiter.params.provider.ValueSource(booleans = {false, true})
    void atTheFloorShortPromptsComeAlongUpToTheTokenBudget(boolean slices) {
        TrackingBackend target = new TrackingBackend(targetCpu);
        // 12 ms with decode rows; a prefill pass 30 ms + 0.1 ms a token: the bound (0.5 x 12 ms) is never met
        target.cost = batch -> {
            boolean decode = batch.stream().anyMatch(e -> e.kind() != StepKind.PREFILL);
            int prefill = batch.stream().filter(e -> e.kind() == StepKind.PREFILL).mapToInt(BatchEntry::count).sum();
            return (decode ? 12_000_000L : 0) + (prefill > 0 ? 30_000_000L + 100_000L * prefill : 0);
        };
        Scheduler<String> sch = new Scheduler<>(target, new Scheduler.Limits(256, 64, 1.5, 8, slices), target::now);
        SplittableRandom rnd = new SplittableRandom(5);
        int V = cfg.vocabSize;
        Map<String, Req> reqs = new java.util.LinkedHashMap<>();
        Map<String, List<Integer>> outs = new java.util.LinkedHashMap<>();
        for (String k : List.of("a", "b"))
            reqs.put(k, new Req(new int[]{1 + rnd.nextInt(V - 1), 2, 3}, SamplingParams.greedy(60), null, "1"));
        int[] longPrompt = new int[100];
        for (int j = 0; j < longPrompt.length; j++) longPrompt[j] = rnd.nextInt(V);
        reqs.put("long", new Req(longPrompt, SamplingParams.greedy(3), null, "1"));
        for (int i = 0; i < 6; i++) {
            int[] p = new int[3 + i];  // 3 .. 8 tokens: within the floor
            for (int j = 0; j < p.length; j++) p[j] = rnd.nextInt(V);
            reqs.put("short" + i, new Req(p, i % 2 == 0 ? SamplingParams.greedy(4) : SamplingParams.sampled(0.8, 0, 0.9, 0, 31 + i, 4), null, "1"));
        }
        int[] over = new int[12];  // above the floor: not carried along
        for (int j = 0; j < over.length; j++) over[j] = rnd.nextInt(V);
        reqs.put("over", new Req(over, SamplingParams.greedy(3), null, "1"));
        for (String k : List.of("a", "b")) {
            outs.put(k, new ArrayList<>());
            sch.add(k, open(target, reqs.get(k), 64, outs.get(k)));
        }
        while (sch.tick().prefillTokens() > 0) { } // the two decode now
        sch.tick(); // and their decode-only time is measured
        for (String k : reqs.keySet()) {
            if (outs.containsKey(k)) continue;
            outs.put(k, new ArrayList<>());
            sch.add(k, open(target, reqs.get(k), 64, outs.get(k)));
        }
        Scheduler.Tick<String> first = sch.tick();
        for (int i = 0; i < 6; i++) assertEquals(1, outs.get("short" + i).size(), "short" + i + " got its first token in the first tick");
        if (slices) {
            // the long prompt's whole chunk (64) in a slice of its layers, the short prompts whole beside it
            assertEquals(PrefillBudget.Reason.LAYERS, first.budget().reason(), "the bound cannot be met by a floor chunk");
            assertEquals(64 + (3 + 4 + 5 + 6 + 7 + 8), first.prefillTokens(), "a slice of the long prompt's chunk and the six short prompts");
        } else {
            assertTrue(first.budget().atFloor(), "the bound cannot be met: " + first.budget());
            assertEquals(8 + (3 + 4 + 5 + 6 + 7 + 8), first.prefillTokens(), "the long prompt's floor chunk and the six short prompts");
        }
        assertTrue(outs.get("over").isEmpty(), "a prompt above the floor is not carried along");
        int ticks = 0;
        while (!sch.isEmpty()) {
            Scheduler.Tick<String> t = sch.tick();
            if (++ticks > 1000) fail("the requests do not end");
            if (t.budget() != null && t.budget().atFloor())
                assertTrue(t.prefillTokens() - t.slicedTokens() <= 8 + 12, "whole chunks at the floor: " + t.prefillTokens());
        }
        for (var en : reqs.entrySet()) {
            List<Integer> a = new ArrayList<>();
            Generation g = open(targetCpu, en.getValue(), 64, a);
            while (g.step()) { }
            assertArrayEquals(tokens(a), tokens(outs.get(en.getKey())), "request " + en.getKey() + " as alone");
        }
    }

    /**
     * A CPU-like cost at the floor: a step with decode rows 12 ms, prefill 1 ms a token's work and nothing a pass (a
     * chunk in a slice costs its share of the layers), so that a floor chunk of 8 tokens (8 ms) and one layer of a
     * 64-token chunk (12.8 ms) both break the bound (0.5 x 12 ms), and the floor chunk makes the shorter step. The
     * long prompt's first chunk runs in slices (they measure the per-pass cost line's long end; its short end came
     * from two prompts prefilled beside the first stream), then a chunk is cut to the floor while one layer of it holds
     * more tokens than the floor (a chunk's rest of at most 5 x 8 tokens runs in slices: one layer of it costs no
     * more): every such step takes at most 20 ms, not 24.8. Before, every chunk ran in slices of one layer.
     * Outputs as alone.
     */
    @Test
    void atTheFloorACpuLikeCostCutsAChunkToTheFloorInsteadOfSlicingIt() {
        FloorRun r = floorRun(batch -> (hasDecode(batch) ? 12_000_000L : 0) + Math.round(1_000_000L * prefillWork(batch)));
        assertAsAlone(r.alone(), r.batched());
        long longSliced = r.longEntries().stream().filter(e -> e.layers() != null && e.layers().from() == 0 && e.count() > 5 * 8).count();
        assertEquals(1, longSliced, "only the first chunk of more than 5 x 8 tokens ran in slices:" + describe(r.longEntries()));
        int firstChunk = 0, floorChunks = 0;
        for (int i = 0; i < r.ticks().size(); i++) {
            Scheduler.Tick<String> t = r.ticks().get(i);
            if (t.prefillTokens() == 0) continue;
            if (t.slicedTokens() > 5 * 8) {
                firstChunk++;
                continue;
            }
            assertTrue(t.budget().atFloor(), "tick " + i + ": " + t.budget());
            assertTrue(t.nanos() <= 20_000_000L, "tick " + i + ": " + t.nanos() / 1e6 + " ms > 12 + 8 ms");
            if (t.slicedTokens() == 0) {
                assertTrue(t.prefillTokens() <= 8, "tick " + i + ": a whole chunk of " + t.prefillTokens() + " tokens");
                floorChunks++;
            }
        }
        assertEquals(cfg.numLayers, firstChunk, "the first chunk's slices");
        // each later 64-token chunk: three floor chunks, then its rest of 40 in slices; the last (44): one, then 36
        assertEquals(3 * 3 + 1, floorChunks, "ticks with a floor chunk:" + describe(r.longEntries()));
        PrefillBudget b = r.budget();
        assertEquals(0, b.passMs(), 1e-6, "no cost a pass");
        assertEquals(1, b.tokenMs(), 1e-6, "1 ms a token");
    }

    /**
     * A GPU-like cost at the floor: a pass over the layers costs 40 ms whatever its tokens (a chunk in a slice its
     * share of that), a token's work 0.05 ms. A floor chunk of 8 tokens costs 40.4 ms, one layer of a 64-token chunk
     * 8.64 ms: at the floor the chunks keep running in slices, although one layer holds more tokens' work than the
     * floor (64 > 8 tokens x 5 layers, where a cost per token would cut them). Outputs as alone.
     */
    @Test
    void atTheFloorAGpuLikeCostKeepsSlicingWhereAFloorChunkCostsMore() {
        FloorRun r = floorRun(batch -> (hasDecode(batch) ? 12_000_000L : 0)
                + Math.round(40_000_000L * prefillPasses(batch) + 50_000L * prefillWork(batch)));
        assertAsAlone(r.alone(), r.batched());
        int layers = 0;
        for (int i = 0; i < r.ticks().size(); i++) {
            Scheduler.Tick<String> t = r.ticks().get(i);
            if (t.prefillTokens() == 0 || !t.budget().atFloor()) continue;
            // (under the stretch bound a chunk of which no layer fits is cut, as before: the cost per token learned
            // from the slices predicts that a floor chunk fits)
            assertTrue(t.slicedTokens() > 0, "tick " + i + " at the floor ran a whole chunk of " + t.prefillTokens() + " tokens:"
                    + describe(r.longEntries()));
            assertTrue(t.nanos() <= 12_000_000L + 8_650_000L, "tick " + i + ": " + t.nanos() / 1e6 + " ms > 12 + 8.64 ms");
            layers++;
        }
        assertTrue(layers >= 4 * cfg.numLayers, layers + " ticks at the floor ran a slice:" + describe(r.longEntries()));
        PrefillBudget b = r.budget();
        assertEquals(40, b.passMs(), 1e-6, "40 ms a pass");
        assertEquals(0.05, b.tokenMs(), 1e-6, "0.05 ms a token");
    }

    static boolean hasDecode(List<BatchEntry> batch) {
        return batch.stream().anyMatch(e -> e.kind() != StepKind.PREFILL);
    }

    /** A step's prefill tokens' work: each prefill entry's tokens times the share of the micro model's layers it runs. */
    static double prefillWork(List<BatchEntry> batch) {
        double w = 0;
        for (BatchEntry e : batch) if (e.kind() == StepKind.PREFILL) w += e.count() * share(e);
        return w;
    }

    /** A step's passes over the layers for prefill: one for its whole prefill entries together, plus a slice's share. */
    static double prefillPasses(List<BatchEntry> batch) {
        boolean whole = false;
        double p = 0;
        for (BatchEntry e : batch) {
            if (e.kind() != StepKind.PREFILL) continue;
            if (e.layers() == null) whole = true;
            else p += share(e);
        }
        return p + (whole ? 1 : 0);
    }

    static double share(BatchEntry e) {
        return e.layers() == null ? 1 : (double) (e.layers().to() - e.layers().from()) / cfg.numLayers;
    }

    static String describe(List<BatchEntry> entries) {
        StringBuilder b = new StringBuilder();
        for (BatchEntry e : entries) b.append(' ').append(e.count()).append(e.layers() == null ? "" : e.layers().toString());
        return b.toString();
    }

    static void assertAsAlone(Map<String, int[]> alone, Map<String, int[]> batched) {
        for (String k : alone.keySet()) assertArrayEquals(alone.get(k), batched.get(k), "request " + k + " as alone");
    }

    /**
     * What {@link #floorRun} showed.
     * @param ticks       the ticks from the long prompt's arrival until its first token
     * @param longEntries the long prompt's prefill entries, in order
     * @param budget      the scheduler's cost model after those ticks
     */
    record FloorRun(List<Scheduler.Tick<String>> ticks, List<BatchEntry> longEntries, PrefillBudget budget,
                    Map<String, int[]> batched, Map<String, int[]> alone) {}

    /**
     * Stream "a" decodes, then "b" and "c" (3-token prompts) are prefilled beside it and decode too, then a 300-token
     * prompt arrives (prefill chunk 64, token budget 64, maxTickStretch 1.5, minPrefillChunk 8, layer slices on) on the
     * given fake step cost; the run goes on until every request ended, and each is run alone too.
     */
    static FloorRun floorRun(java.util.function.ToLongFunction<List<BatchEntry>> cost) {
        TrackingBackend target = new TrackingBackend(targetCpu);
        target.cost = cost;
        Scheduler<String> sch = new Scheduler<>(target, new Scheduler.Limits(256, 64, 1.5, 8, true), target::now);
        SplittableRandom rnd = new SplittableRandom(17);
        Map<String, Req> reqs = new java.util.LinkedHashMap<>();
        for (String k : List.of("a", "b", "c"))
            reqs.put(k, new Req(new int[]{1 + rnd.nextInt(cfg.vocabSize - 1), 2, 3}, SamplingParams.greedy(150), null, "1"));
        reqs.put("long", new Req(TestModelsAccess.randomTokens(cfg, 300, 23), SamplingParams.greedy(3), null, "1"));
        Map<String, List<Integer>> outs = new java.util.LinkedHashMap<>();
        Map<String, Generation> gens = new java.util.LinkedHashMap<>();
        java.util.function.Consumer<String> admit = k -> {
            outs.put(k, new ArrayList<>());
            gens.put(k, open(target, reqs.get(k), 64, outs.get(k)));
            sch.add(k, gens.get(k));
        };
        admit.accept("a");
        while (gens.get("a").prefilling()) sch.tick();
        admit.accept("b");
        admit.accept("c");
        while (gens.get("b").prefilling() || gens.get("c").prefilling()) sch.tick();
        int firstStep = target.entries.size();
        admit.accept("long");
        List<Scheduler.Tick<String>> ticks = new ArrayList<>();
        while (outs.get("long").isEmpty()) {
            ticks.add(sch.tick());
            if (ticks.size() > 1000) fail("the long prompt does not finish");
        }
        assertFalse(gens.get("a").done(), "the streams decode throughout");
        Sequence longSeq = target.sequences.get(3);
        List<BatchEntry> longEntries = new ArrayList<>();
        for (int s = firstStep; s < target.entries.size(); s++)
            for (BatchEntry e : target.entries.get(s)) if (e.kind() == StepKind.PREFILL && e.seq() == longSeq) longEntries.add(e);
        while (!sch.isEmpty()) sch.tick();
        Map<String, int[]> batched = new java.util.LinkedHashMap<>(), alone = new java.util.LinkedHashMap<>();
        for (var en : reqs.entrySet()) {
            batched.put(en.getKey(), tokens(outs.get(en.getKey())));
            List<Integer> a = new ArrayList<>();
            Generation g = open(targetCpu, en.getValue(), 64, a);
            while (g.step()) { }
            alone.put(en.getKey(), tokens(a));
        }
        return new FloorRun(ticks, longEntries, sch.prefillBudget(), batched, alone);
    }

    /**
     * A backend whose steps of 32 rows or more round differently from shorter ones (as the GPU's tensor-core
     * threshold): a chunk of 32 or more is only cut into parts of at least 32, whatever the bound asks.
     */
    @Test
    void chunksAreCutOnlyWhereTheBackendSaysTheNumbersStayTheSame() {
        LongPromptRuns.Run r = LongPromptRuns.run(targetCpu, (rows, first) -> rows < 32 || (first >= 32 && rows - first >= 32), -1, false);
        assertAsAlone(r);
        // the 150-token prompt's last natural chunk (22 tokens) is below the threshold: it may be cut anywhere
        assertEquals(22, r.longChunks().stream().filter(c -> c < 32).mapToInt(Integer::intValue).sum(),
                "below the threshold only the parts of a chunk that was below it: " + r.longChunks());
        assertTrue(r.longChunks().stream().anyMatch(c -> c < 64), "the bound cut chunks to 32: " + r.longChunks());
        // and a backend that never allows a cut gets whole chunks
        LongPromptRuns.Run w = LongPromptRuns.run(targetCpu, (rows, first) -> false, -1, false);
        assertAsAlone(w);
        assertTrue(w.longChunks().stream().allMatch(c -> c == 64 || c == 300 % 64 || c == 150 % 64),
                "whole chunks only: " + w.longChunks());
    }

    @Test
    void aReloadOfTheLimitsAppliesFromTheNextTick() {
        LongPromptRuns.Run r = LongPromptRuns.run(targetCpu, null, 6, false);
        assertAsAlone(r);
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
