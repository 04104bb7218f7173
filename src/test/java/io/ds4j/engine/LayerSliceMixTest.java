package io.ds4j.engine;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.MtpCheckpoints;
import io.ds4j.model.WeightLoader;
import io.ds4j.sampling.Constraint;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.MtpDraftSource;
import io.ds4j.speculative.NgramDraft;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.function.BiConsumer;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Layer slices of long prompts' chunks mixed with what else a request can be: MTP drafts, scored prompts, snapshot
 * points, constrained decoding, configuration reloads while a chunk is part-way, cancellation with another prompt
 * waiting. Every output (tokens, prompt scores, the state at snapshot points) must be the request's alone. The
 * sequences are the CPU backend's own (the MTP draft needs them), on a fake clock as {@link LayerSliceRuns#fakeCost}.
 */
class LayerSliceMixTest {
    @TempDir
    static Path tmp;
    static CpuBackend cpu;
    static ModelConfig cfg;
    static int L;

    @BeforeAll
    static void load() throws Exception {
        cpu = new CpuBackend(WeightLoader.load(MtpCheckpoints.micro(tmp.resolve("micro"), 17, true)));
        cfg = cpu.config();
        L = cfg.numLayers;
    }

    @AfterAll
    static void close() {
        cpu.close();
    }

    /** The CPU backend with a fake clock that each step advances by {@link LayerSliceRuns#fakeCost}; records the entries. */
    static final class Clocked implements Backend {
        final Backend inner;
        long now;
        final List<List<BatchEntry>> entries = new ArrayList<>();

        Clocked(Backend inner) {
            this.inner = inner;
        }

        @Override public String name() { return inner.name(); }
        @Override public ModelConfig config() { return inner.config(); }
        @Override public Sequence newSequence(int maxRollback) { return inner.newSequence(maxRollback); }
        @Override public float[] forward(Sequence s, int[] t, int off, int n, int[] rows) { return inner.forward(s, t, off, n, rows); }
        @Override public float[] forward(Sequence s, int[] t, int off, int n, int[] rows, StepKind k) { return inner.forward(s, t, off, n, rows, k); }
        @Override public long stateBytes(int ctx, int k) { return inner.stateBytes(ctx, k); }
        @Override public boolean layerSlices() { return inner.layerSlices(); }
        @Override public boolean prefillSplitExact(int rows, int first) { return inner.prefillSplitExact(rows, first); }
        @Override public Sequence fork(Sequence s, int k) { return inner.fork(s, k); }
        @Override public boolean snapshots() { return inner.snapshots(); }
        @Override public StateSnapshot snapshot(Sequence s) { return inner.snapshot(s); }
        @Override public Sequence resume(StateSnapshot s, int k) { return inner.resume(s, k); }
        @Override public MtpHead mtp() { return inner.mtp(); }
        @Override public void close() { }

        @Override
        public float[][] step(List<BatchEntry> batch) {
            entries.add(List.copyOf(batch));
            now += LayerSliceRuns.fakeCost(batch, inner.config().numLayers);
            return inner.step(batch);
        }

        @Override
        public StepOutput stepArgmax(List<BatchEntry> batch) {
            entries.add(List.copyOf(batch));
            now += LayerSliceRuns.fakeCost(batch, inner.config().numLayers);
            return inner.stepArgmax(batch);
        }
    }

    /** Allows only token ids that are multiples of 3 (never complete). */
    static final class Thirds implements Constraint {
        final long[] bits;

        Thirds(int V) {
            bits = new long[(V + 63) / 64];
            for (int i = 0; i < V; i += 3) bits[i >> 6] |= 1L << i;
        }

        @Override public long[] allowed(int remaining) { return bits; }
        @Override public int acceptablePrefix(int[] t, int n, int remaining) {
            int k = 0;
            while (k < n && t[k] % 3 == 0) k++;
            return k;
        }
        @Override public void advance(int token) {
            if (token % 3 != 0) throw new IllegalStateException("token " + token + " not allowed");
        }
        @Override public boolean complete() { return false; }
    }

    /**
     * A request of a run.
     * @param scoreTop   prompt scoring (-1: none)
     * @param snapAt     snapshot points (null: none); at each the state is forked and one token stepped, whose logits
     *                   are recorded
     * @param constrained a {@link Thirds} constraint
     */
    record Spec(String key, int[] prompt, SamplingParams params, DraftSource draft, String width, int scoreTop, int[] snapAt,
                boolean constrained, StateSnapshot from) {
        Spec(String key, int[] prompt, SamplingParams params, DraftSource draft, String width) {
            this(key, prompt, params, draft, width, -1, null, false, null);
        }

        Spec(String key, int[] prompt, SamplingParams params, DraftSource draft, String width, int scoreTop, int[] snapAt,
             boolean constrained) {
            this(key, prompt, params, draft, width, scoreTop, snapAt, constrained, null);
        }

        /** This request resumed from a snapshot of its prompt's prefix. */
        Spec from(StateSnapshot snap) {
            return new Spec(key, prompt, params, draft, width, scoreTop, snapAt, constrained, snap);
        }
    }

    /** What a request gave: its tokens, its prompt scores, the logits after each snapshot point. */
    record Out(List<Integer> tokens, Sampler.TokenLogprobs[] scores, List<float[]> atPoints, Generation gen, Sequence seq) {}

    static Out open(Backend b, Spec s, int chunk) {
        List<Integer> toks = new ArrayList<>();
        List<float[]> at = new ArrayList<>();
        Sequence seq = s.from() != null ? b.resume(s.from(), 16) : b.newSequence(16);
        Sampler sampler = new Sampler(s.params(), b.config().vocabSize, s.prompt());
        Generation g = new Generation(b, seq, s.prompt(), sampler, s.draft() == null ? null : s.draft().open(s.prompt(), s.params(), 99),
                s.draft() == null ? null : VerifyWidth.parse(s.width()), new Generation.Options(chunk, 4096, new int[]{-1}, 16),
                (t, lp) -> { toks.add(t); return true; }, s.constrained() ? new Thirds(b.config().vocabSize) : null);
        if (s.snapAt() != null) g.snapshotAt(s.snapAt(), q -> {
            assertEquals(0, q.slicedLayers(), "a snapshot point is reached with no chunk part-way");
            try (Sequence f = b.fork(q, 16)) {
                at.add(b.forward(f, new int[]{7 % b.config().vocabSize}, 0, 1, new int[]{0}));
            }
        });
        if (s.scoreTop() >= 0) g.scorePrompt(s.scoreTop());
        return new Out(toks, null, at, g, seq);
    }

    /** What a scheduled run gave. */
    record Run(Map<String, Out> outs, Map<String, Out> alone, Map<String, List<BatchEntry.Layers>> slices, List<Scheduler.Tick<String>> ticks,
               Clocked backend, Scheduler<String> sch) {
        void assertAsAlone() {
            for (String k : alone.keySet()) {
                Out a = alone.get(k), b = outs.get(k);
                assertEquals(a.tokens(), b.tokens(), "request " + k + "'s tokens as alone");
                assertEquals(a.atPoints().size(), b.atPoints().size(), "request " + k + "'s snapshot points");
                for (int i = 0; i < a.atPoints().size(); i++)
                    assertArrayEquals(a.atPoints().get(i), b.atPoints().get(i), "request " + k + "'s state at snapshot point " + i);
                Sampler.TokenLogprobs[] sa = a.gen().promptScores(), sb = b.gen().promptScores();
                assertEquals(sa == null, sb == null, k + ": scores");
                if (sa != null) {
                    assertEquals(sa.length, sb.length);
                    for (int i = 1; i < sa.length; i++) {
                        assertEquals(sa[i].token(), sb[i].token(), k + " score " + i);
                        assertEquals(sa[i].logprob(), sb[i].logprob(), k + " score " + i);
                        assertArrayEquals(sa[i].topIds(), sb[i].topIds(), k + " score " + i);
                        assertArrayEquals(sa[i].topLogprobs(), sb[i].topLogprobs(), k + " score " + i);
                    }
                }
            }
        }

        int slicedEntries(String k) {
            return (int) slices.getOrDefault(k, List.of()).stream().filter(java.util.Objects::nonNull).count();
        }
    }

    static int[] prompt(int n, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        int[] p = new int[n];
        for (int i = 0; i < n; i++) p[i] = r.nextInt(cfg.vocabSize);
        return p;
    }

    static List<Spec> decoders(DraftSource d, String width, boolean constrained) {
        List<Spec> out = new ArrayList<>();
        for (String k : List.of("a", "b", "c"))
            out.add(new Spec(k, new int[]{1 + k.charAt(0) % 50, 2, 3}, k.equals("b") ? SamplingParams.sampled(0.9, 0, 0.95, 0, 5, 120)
                    : SamplingParams.greedy(120), d, width, -1, null, constrained && !k.equals("a")));
        return out;
    }

    /**
     * The decoders start and decode; then the long prompts arrive; hook(tickIndex, run state) runs before every tick
     * after that; the run goes on until every request ended. Then each request runs alone.
     */
    static Run run(Scheduler.Limits limits, List<Spec> decode, List<Spec> longs, BiConsumer<Integer, Map<String, Out>> hook) {
        return runHooked(limits, decode, longs, hook == null ? null : (i, outs, sch, b) -> hook.accept(i, outs));
    }

    /** What runs before a tick of {@link #run}: its index, the requests, the scheduler and the backend. */
    interface Hook {
        void before(int tick, Map<String, Out> outs, Scheduler<String> sch, Clocked backend);
    }

    /** {@link #run} with a hook that may also change the scheduler (a reload) and read the backend's steps. */
    static Run runHooked(Scheduler.Limits limits, List<Spec> decode, List<Spec> longs, Hook hook) {
        Clocked b = new Clocked(cpu);
        Scheduler<String> sch = new Scheduler<>(b, limits, () -> b.now);
        int chunk = Scheduler.prefillChunk(64, limits);
        Map<String, Out> outs = new LinkedHashMap<>();
        for (Spec s : decode) {
            Out o = open(b, s, chunk);
            outs.put(s.key(), o);
            sch.add(s.key(), o.gen());
        }
        while (sch.tick().prefillTokens() > 0) { }
        sch.tick();
        int first = b.entries.size();
        for (Spec s : longs) {
            Out o = open(b, s, chunk);
            outs.put(s.key(), o);
            sch.add(s.key(), o.gen());
        }
        List<Scheduler.Tick<String>> ticks = new ArrayList<>();
        while (!sch.isEmpty()) {
            if (hook != null) hook.before(ticks.size(), outs, sch, b);
            Scheduler.Tick<String> t = sch.tick();
            assertEquals(Map.of(), t.failed(), "tick " + ticks.size());
            ticks.add(t);
            assertTrue(ticks.size() < 5000, "the run does not end");
        }
        Map<Sequence, String> bySeq = new IdentityHashMap<>();
        outs.forEach((k, o) -> bySeq.put(o.seq(), k));
        Map<String, List<BatchEntry.Layers>> slices = new LinkedHashMap<>();
        for (int s = first; s < b.entries.size(); s++)
            for (BatchEntry e : b.entries.get(s))
                if (e.kind() == StepKind.PREFILL) slices.computeIfAbsent(bySeq.get(e.seq()), k -> new ArrayList<>()).add(e.layers());
        Map<String, Out> alone = new LinkedHashMap<>();
        List<Spec> all = new ArrayList<>(decode);
        all.addAll(longs);
        for (Spec s : all) {
            Out o = open(cpu, s, chunk);
            while (o.gen().step()) { }
            alone.put(s.key(), o);
        }
        return new Run(outs, alone, slices, ticks, b, sch);
    }

    static final Scheduler.Limits SLICED = new Scheduler.Limits(256, 64, 1.5, 32, true);

    @Test
    void mtpDraftsBesideASlicedPromptWithItsOwnMtpDraftAreAsAlone() {
        MtpDraftSource mtp = new MtpDraftSource(cpu, 16);
        List<Spec> dec = decoders(mtp, "3", false);
        Run r = run(SLICED, dec, List.of(new Spec("long", prompt(300, 1), SamplingParams.greedy(20), mtp, "auto"),
                new Spec("long2", prompt(170, 2), SamplingParams.sampled(0.9, 0, 0.95, 0, 9, 20), mtp, "2")), null);
        r.assertAsAlone();
        assertTrue(r.slicedEntries("long") > 4, "the long prompt ran in slices: " + r.slices.get("long"));
        assertTrue(r.slicedEntries("long2") > 4, "the second long prompt ran in slices: " + r.slices.get("long2"));
        assertTrue(r.ticks.stream().anyMatch(t -> !t.mtpSteps().isEmpty() && t.slicedTokens() > 0), "MTP drafts beside a slice");
    }

    @Test
    void aScoredPromptInSlicesScoresAsAlone() {
        Run r = run(SLICED, decoders(NgramDraft.source(), "2", false),
                List.of(new Spec("long", prompt(230, 3), SamplingParams.greedy(6), null, "1", 4, null, false),
                        new Spec("zero", prompt(150, 4), SamplingParams.greedy(0), null, "1", 2, null, false)), null);
        r.assertAsAlone();
        assertNotNull(r.outs.get("long").gen().promptScores());
        assertTrue(r.slicedEntries("long") > 4, "scored prompt ran in slices: " + r.slices.get("long"));
        assertTrue(r.slicedEntries("zero") > 4, "max_tokens 0 scored prompt ran in slices: " + r.slices.get("zero"));
    }

    @Test
    void snapshotPointsInsideASlicedPromptSeeTheWholeChunksState() {
        Run r = run(SLICED, decoders(null, "1", false),
                List.of(new Spec("long", prompt(260, 5), SamplingParams.greedy(8), null, "1", -1, new int[]{100, 150, 256}, false)), null);
        r.assertAsAlone();
        assertEquals(3, r.outs.get("long").atPoints().size());
        assertTrue(r.slicedEntries("long") > 4, "ran in slices: " + r.slices.get("long"));
    }

    @Test
    void constrainedDecodersBesideASlicedConstrainedPromptAreAsAlone() {
        Run r = run(SLICED, decoders(NgramDraft.source(), "3", true),
                List.of(new Spec("long", prompt(200, 6), SamplingParams.sampled(0.8, 0, 1, 0, 3, 12), null, "1", -1, null, true)), null);
        r.assertAsAlone();
        for (String k : List.of("b", "c", "long"))
            assertTrue(r.outs.get(k).tokens().stream().allMatch(t -> t % 3 == 0), k + " obeys its constraint");
        assertTrue(r.slicedEntries("long") > 4);
    }

    /** The prompt's last chunk (36 tokens, above the floor) runs in slices: only its last slice has the logit row. */
    @Test
    void aPromptsLastChunkInSlicesGetsItsLogitRowAtTheLastSlice() {
        Run r = run(SLICED, decoders(null, "1", false), List.of(new Spec("long", prompt(100, 7), SamplingParams.greedy(10), null, "1")), null);
        r.assertAsAlone();
        List<BatchEntry.Layers> s = r.slices.get("long");
        int lastChunkSlices = 0;
        for (List<BatchEntry> step : r.backend.entries)
            for (BatchEntry e : step)
                if (e.seq() == r.outs.get("long").seq() && e.kind() == StepKind.PREFILL && e.count() == 36 && e.layers() != null) {
                    lastChunkSlices++;
                    assertEquals(e.layers().last(L) ? 1 : 0, e.logitRows().length, "logit rows of slice " + e.layers());
                }
        assertTrue(lastChunkSlices > 1, "the last chunk ran in slices: " + s);
    }

    /**
     * A reload turns layer slices off while a chunk is part-way: the chunk still finishes (in slices), no new chunk
     * starts in slices, and every output is as alone.
     */
    @Test
    void turningLayerSlicesOffWhileAChunkIsPartWayFinishesIt() {
        int[] partWaySeen = {0};
        Run r = runWith(reloadTick(), new Scheduler.Limits(256, 64, 1.5, 32, false), partWaySeen);
        r.assertAsAlone();
        assertEquals(1, partWaySeen[0], "one chunk part-way at the reload");
        // the part-way chunk went on in slices to its last layer (runWith checks that no chunk starts in slices after)
        List<BatchEntry.Layers> s = r.slices.get("long");
        int lastSlice = -1;
        for (int i = 0; i < s.size(); i++) if (s.get(i) != null) lastSlice = i;
        assertTrue(s.get(lastSlice).last(L), "the part-way chunk finished: " + s);
    }

    /** {@link #run} with the limits changed before tick {@code at} (a reload mid-run), counting chunks part-way then. */
    static Run runWith(int at, Scheduler.Limits after, int[] partWaySeen) {
        int[] reloadStep = {-1};
        Run r = runHooked(SLICED, decoders(NgramDraft.source(), "2", false), List.of(new Spec("long", prompt(300, 8), SamplingParams.greedy(10), null, "1"),
                new Spec("long2", prompt(150, 9), SamplingParams.greedy(10), null, "1")), (i, outs, sch, b) -> {
            if (i != at) return;
            for (Out o : outs.values()) if (o.gen().slicing()) partWaySeen[0]++;
            sch.limits(after);
            reloadStep[0] = b.entries.size();
        });
        // after the reload, a slice that starts a chunk (from 0) never runs
        assertTrue(reloadStep[0] >= 0, "the reload happened");
        for (int s = reloadStep[0]; s < r.backend().entries.size(); s++)
            for (BatchEntry e : r.backend().entries.get(s))
                if (e.layers() != null) assertTrue(e.layers().from() > 0, "a new chunk started in slices after the reload: " + e);
        return r;
    }

    /** maxTickStretch 0 (the bound off) while a chunk is part-way: the next tick runs the rest of its layers at once. */
    @Test
    void turningTheBoundOffWhileAChunkIsPartWayFinishesItInTheNextTick() {
        Scheduler.Limits off = new Scheduler.Limits(256, 64, 0, 32, true);
        int[] seen = {0};
        Run r = runWith(reloadTick(), off, seen);
        r.assertAsAlone();
        assertEquals(1, seen[0], "one chunk part-way at the reload");
        // the first prefill entry after the reload finishes the chunk
        List<BatchEntry.Layers> s = r.slices.get("long");
        int lastSlice = -1;
        for (int i = 0; i < s.size(); i++) if (s.get(i) != null) lastSlice = i;
        assertTrue(s.get(lastSlice).last(L) && s.get(lastSlice).from() > 0, "finished with its rest: " + s);
        assertTrue(lastSlice + 1 == s.size() || s.subList(lastSlice + 1, s.size()).stream().allMatch(java.util.Objects::isNull));
    }

    /** The tick of {@link #runWith}'s run where the long prompt's second chunk is part-way. */
    static int reloadTick() {
        int[] at = {-1};
        run(SLICED, decoders(NgramDraft.source(), "2", false), List.of(new Spec("long", prompt(300, 8), SamplingParams.greedy(10), null, "1"),
                new Spec("long2", prompt(150, 9), SamplingParams.greedy(10), null, "1")), (i, outs) -> {
            if (at[0] < 0 && outs.get("long").gen().slicing() && outs.get("long").gen().prefilledTokens() >= 64) at[0] = i;
        });
        assertTrue(at[0] >= 0);
        return at[0];
    }

    /**
     * A long prompt is cancelled while its chunk is part-way and another long prompt waits: the cancelled one's state
     * goes at the next tick, the waiting one starts its slices and every other output is as alone.
     */
    @Test
    void cancellingAPartWayPromptLetsTheWaitingOneSlice() {
        boolean[] cancelled = {false};
        Run r = run(SLICED, decoders(NgramDraft.source(), "2", false),
                List.of(new Spec("long", prompt(300, 10), SamplingParams.greedy(10), null, "1"),
                        new Spec("long2", prompt(200, 11), SamplingParams.greedy(10), null, "1")), (i, outs) -> {
                    Generation g = outs.get("long").gen();
                    if (!cancelled[0] && g.slicing() && g.prefilledTokens() >= 64) {
                        assertTrue(outs.get("long2").gen().prefilling());
                        g.cancel();
                        cancelled[0] = true;
                    }
                });
        assertTrue(cancelled[0]);
        assertEquals(Generation.Finish.CANCELLED, r.outs.get("long").gen().finish());
        assertEquals(0, r.outs.get("long").seq().slicedLayers());
        assertEquals(List.of(), r.outs.get("long").tokens());
        r.alone.remove("long");
        r.assertAsAlone();
        assertTrue(r.slicedEntries("long2") > 4, "the waiting prompt ran in slices: " + r.slices.get("long2"));
    }

    /** Two long prompts arrive together with a short one: each one's slices follow in order, one part-way at a time. */
    @Test
    void twoLongPromptsAndAShortOneTogether() {
        Run r = run(SLICED, decoders(null, "1", false),
                List.of(new Spec("long", prompt(260, 12), SamplingParams.greedy(5), null, "1"),
                        new Spec("short", prompt(20, 13), SamplingParams.greedy(5), null, "1"),
                        new Spec("long2", prompt(260, 14), SamplingParams.sampled(1, 0, 1, 0, 4, 5), null, "1")), null);
        r.assertAsAlone();
        assertEquals(0, r.slicedEntries("short"));
        assertTrue(r.slicedEntries("long") > 4 && r.slicedEntries("long2") > 4);
    }

    /**
     * Decoding requests and a long prompt all resumed from one snapshot of a shared 128-token prefix (their entry
     * stores shared, copied on write): the long prompt's chunks in layer slices write the stores' layers a few at a
     * time while the decoders write theirs; every output is that of the same request resumed alone.
     */
    @Test
    void requestsResumedFromOneSnapshotBesideASlicedPromptResumedFromItToo() {
        int[] prefix = prompt(128, 20);
        StateSnapshot snap;
        try (Sequence s = cpu.newSequence(16)) {
            cpu.forward(s, prefix, 0, 64, new int[0]);
            cpu.forward(s, prefix, 64, 64, new int[0]);
            snap = cpu.snapshot(s);
        }
        try (snap) {
            List<Spec> dec = new ArrayList<>();
            for (Spec d : decoders(NgramDraft.source(), "2", false)) {
                int[] p = Arrays.copyOf(prefix, 131);
                System.arraycopy(d.prompt(), 0, p, 128, 3);
                dec.add(new Spec(d.key(), p, d.params(), d.draft(), d.width()).from(snap));
            }
            int[] lp = Arrays.copyOf(prefix, 128 + 230);
            System.arraycopy(prompt(230, 21), 0, lp, 128, 230);
            Run r = run(SLICED, dec, List.of(new Spec("long", lp, SamplingParams.greedy(8), null, "1").from(snap),
                    new Spec("cold", lp, SamplingParams.greedy(8), null, "1")), null);
            r.assertAsAlone();
            assertEquals(r.outs.get("long").tokens(), r.outs.get("cold").tokens(), "resumed as cold");
            assertTrue(r.slicedEntries("long") > 4, "ran in slices: " + r.slices.get("long"));
        }
    }

    /** Every decoding request ends while a chunk is part-way: the next tick runs the rest of its layers at once. */
    @Test
    void decodersEndingWhileAChunkIsPartWayLetItFinishWhole() {
        boolean[] done = {false};
        Run r = run(SLICED, decoders(null, "1", false), List.of(new Spec("long", prompt(300, 22), SamplingParams.greedy(8), null, "1")),
                (i, outs) -> {
                    if (!done[0] && outs.get("long").gen().slicing() && outs.get("long").gen().prefilledTokens() >= 64) {
                        for (String k : List.of("a", "b", "c")) outs.get(k).gen().cancel();
                        done[0] = true;
                    }
                });
        assertTrue(done[0]);
        for (String k : List.of("a", "b", "c")) r.alone.remove(k);
        r.assertAsAlone();
        List<BatchEntry.Layers> s = r.slices.get("long");
        int lastSlice = -1;
        for (int i = 0; i < s.size(); i++) if (s.get(i) != null) lastSlice = i;
        assertTrue(s.get(lastSlice).from() > 0 && s.get(lastSlice).last(L), "finished with the rest of its layers: " + s);
        assertTrue(s.subList(lastSlice + 1, s.size()).stream().allMatch(java.util.Objects::isNull), "then whole chunks: " + s);
    }
}
