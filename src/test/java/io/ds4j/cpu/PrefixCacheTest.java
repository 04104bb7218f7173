package io.ds4j.cpu;

import io.ds4j.engine.Generation;
import io.ds4j.engine.PrefixCache;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StateSnapshot;
import io.ds4j.model.ModelConfig;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Snapshots and the prefix cache on the CPU backend: a sequence resumed from a snapshot gives bit for bit the logits
 * of a cold prefill, for prefixes on and off block boundaries and across the raw window (4), CSA (4) and HCA (8)
 * windows of the micro model; shared entry stores survive rollback and divergence; the cache resumes the longest
 * prefix, evicts within its budget and still answers exactly; a cancelled prefill leaves usable snapshots; speculative
 * decoding on a resumed sequence gives the plain greedy answer.
 */
class PrefixCacheTest {
    static CpuBackend backend;
    static ModelConfig cfg;

    @BeforeAll
    static void load() {
        cfg = TestModels.microConfig();
        backend = new CpuBackend(TestModels.random(cfg, 42));
    }

    @AfterAll
    static void close() {
        backend.close();
    }

    static int[] prompt(int n, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        return IntStream.range(0, n).map(i -> r.nextInt(cfg.vocabSize)).toArray();
    }

    static int[] rows(int n) {
        return IntStream.range(0, n).toArray();
    }

    /** Forwards toks[from, to) in chunks of at most chunk tokens; logits of every row. */
    static float[] forward(Sequence s, int[] toks, int from, int to, int chunk) {
        float[] out = new float[(to - from) * cfg.vocabSize];
        for (int p = from; p < to; ) {
            int n = Math.min(chunk, to - p);
            float[] lg = backend.forward(s, toks, p, n, rows(n));
            System.arraycopy(lg, 0, out, (p - from) * cfg.vocabSize, lg.length);
            p += n;
        }
        return out;
    }

    /** Logits of rows [from, toks.length) of a cold prefill of all of toks in one step. */
    static float[] cold(int[] toks, int from) {
        try (CpuSequence s = backend.newSequence(16)) {
            float[] all = backend.forward(s, toks, 0, toks.length, rows(toks.length));
            return Arrays.copyOfRange(all, from * cfg.vocabSize, all.length);
        }
    }

    @Test
    void resumedSequenceMatchesColdPrefill() {
        int[] toks = prompt(61, 3);
        for (int len : new int[]{1, 3, 4, 8, 9, 16, 17, 24, 33, 40, 48, 60}) {
            try (CpuSequence src = backend.newSequence(16)) {
                forward(src, toks, 0, len, 5);
                StateSnapshot snap = backend.snapshot(src);
                assertEquals(len, snap.length());
                float[] srcRest = forward(src, toks, len, toks.length, 7);
                try (Sequence r = backend.resume(snap, 16)) {
                    assertEquals(len, r.length());
                    assertEquals(0, r.rollbackable(), "nothing before the snapshot can be rolled back");
                    float[] rest = forward(r, toks, len, toks.length, 64);
                    float[] want = cold(toks, len);
                    assertArrayEquals(want, rest, "resumed at " + len);
                    assertArrayEquals(want, srcRest, "the snapshotted sequence itself, after " + len);
                }
                snap.close();
            }
        }
    }

    @Test
    void sharedEntriesSurviveRollbackAndDivergence() {
        int[] toks = prompt(61, 5);
        int[] other = prompt(61, 6);
        try (CpuSequence src = backend.newSequence(16)) {
            forward(src, toks, 0, 32, 32);
            StateSnapshot snap = backend.snapshot(src);
            // the source goes on, rolls back below the snapshot and writes other tokens where the shared rows were
            forward(src, toks, 32, 40, 8);
            src.rollback(12);
            int[] mixed = Arrays.copyOf(toks, 61);
            System.arraycopy(other, 28, mixed, 28, 33);
            float[] srcRest = forward(src, mixed, 28, 61, 6);
            assertArrayEquals(cold(mixed, 28), srcRest, "the source after rolling back below its snapshot");
            // two sequences resumed from the same snapshot diverge, stepped alternately
            int[] second = Arrays.copyOf(toks, 61);
            System.arraycopy(other, 32, second, 32, 29);
            try (Sequence a = backend.resume(snap, 16); Sequence b = backend.resume(snap, 16)) {
                float[] ra = new float[29 * cfg.vocabSize], rb = new float[29 * cfg.vocabSize];
                for (int p = 32; p < 61; p += 3) {
                    int n = Math.min(3, 61 - p);
                    System.arraycopy(backend.forward(a, toks, p, n, rows(n)), 0, ra, (p - 32) * cfg.vocabSize, n * cfg.vocabSize);
                    System.arraycopy(backend.forward(b, second, p, n, rows(n)), 0, rb, (p - 32) * cfg.vocabSize, n * cfg.vocabSize);
                }
                assertArrayEquals(cold(toks, 32), ra, "first continuation");
                assertArrayEquals(cold(second, 32), rb, "second continuation");
            }
            // and the snapshot still resumes exactly after all that
            try (Sequence c = backend.resume(snap, 16)) {
                assertArrayEquals(cold(toks, 32), forward(c, toks, 32, 61, 61), "after the others");
            }
        }
    }

    /** Tokens and their logprobs (bit patterns of the logits' softmax) of a greedy generation. */
    record Out(List<Integer> tokens, List<Double> logprobs, int cached) {}

    static SamplingParams greedyWithLogprobs(int n) {
        return new SamplingParams(0, 0, 1, 0, null, 0, 0, 1, Map.of(), n, List.of(), true, 3, false);
    }

    /** Generates 6 tokens greedily, through the cache when one is given (as the server does), else cold. */
    static Out generate(PrefixCache cache, int[] prompt) {
        return generate(cache, prompt, false, -1);
    }

    /**
     * @param speculative n-gram draft with up to 4 tokens verified per step
     * @param cancelAfter cancel after this many steps (-1: never)
     */
    static Out generate(PrefixCache cache, int[] prompt, boolean speculative, int cancelAfter) {
        SamplingParams p = greedyWithLogprobs(speculative ? 24 : 6);
        List<Integer> toks = new ArrayList<>();
        List<Double> lps = new ArrayList<>();
        Sequence seq = cache != null ? cache.start(prompt).seq() : backend.newSequence(16);
        Generation g = new Generation(backend, seq, prompt, new Sampler(p, cfg.vocabSize, prompt),
                speculative ? new io.ds4j.speculative.NgramDraft(io.ds4j.speculative.NgramDraft.MAX_N) : null,
                speculative ? io.ds4j.engine.VerifyWidth.fixed(4) : null,
                new Generation.Options(5, 4096, new int[]{-1}, 16), (t, lp) -> {
            toks.add(t);
            lps.add((double) lp.logprob());
            for (float v : lp.topLogprobs()) lps.add((double) v);
            return true;
        });
        if (cache != null) g.snapshotAt(cache.snapshotPoints(prompt, seq.length()), s -> cache.offer(prompt, s));
        int steps = 0;
        while (g.step()) if (++steps == cancelAfter) g.cancel();
        if (cancelAfter >= 0) assertEquals(Generation.Finish.CANCELLED, g.finish());
        if (speculative) assertTrue(g.specStats().offered() > 0, "the draft offered tokens: " + g.specStats());
        return new Out(toks, lps, g.cachedTokens());
    }

    static int[] concat(int[] a, int aLen, int[] b) {
        int[] r = Arrays.copyOf(a, aLen + b.length);
        System.arraycopy(b, 0, r, aLen, b.length);
        return r;
    }

    @Test
    void cacheResumesTheLongestPrefixAndAnswersAsCold() {
        try (PrefixCache cache = new PrefixCache(backend, 8, 0, 1L << 30, 16)) {
            assertEquals(8, cache.blockTokens(), "lcm of the ratios 4 and 8");
            int[] a = prompt(45, 11);
            int[] b = concat(a, 29, prompt(20, 12));        // shares 29 tokens: off a block boundary
            int[] c = concat(a, 45, prompt(10, 13));        // extends a
            int[] d = concat(a, 29, prompt(17, 14));        // shares b's branch point
            int[] e = concat(a, 40, prompt(3, 15));         // shares exactly a's last block boundary
            int[][] prompts = {a, b, c, d, e};
            int[] wantCached = {0, 0, 40, 24, 0};
            // e: 40 cached tokens would leave 3 to prefill: allowed (a hit needs at least one token left)
            wantCached[4] = 40;
            for (int i = 0; i < prompts.length; i++) {
                Out hot = generate(cache, prompts[i]);
                Out cold = generate(null, prompts[i]);
                assertEquals(wantCached[i], hot.cached(), "cached tokens of prompt " + i + "; cache holds " + cache.cachedLengths());
                assertEquals(cold.tokens(), hot.tokens(), "greedy tokens of prompt " + i);
                assertEquals(cold.logprobs(), hot.logprobs(), "logprobs of prompt " + i);
            }
            PrefixCache.Stats st = cache.stats();
            assertEquals(3, st.hits());
            assertEquals(2, st.misses());
            assertEquals(40 + 24 + 40, st.hitTokens());
            assertEquals(0, st.evictions());
            assertTrue(st.bytes() > 0);
        }
    }

    @Test
    void promptEndingOnABoundaryIsResumedOnlyByALongerOne() {
        try (PrefixCache cache = new PrefixCache(backend, 8, 0, 1L << 30, 16)) {
            int[] a = prompt(32, 21);
            assertEquals(0, generate(cache, a).cached());
            // its only snapshot covers all 32 tokens: the same prompt again cannot use it (one token must be prefilled)
            assertEquals(0, generate(cache, a).cached(), "the same prompt again");
            int[] longer = concat(a, 32, prompt(1, 22));
            Out hot = generate(cache, longer);
            assertEquals(32, hot.cached());
            assertEquals(generate(null, longer), new Out(hot.tokens(), hot.logprobs(), 0));
        }
    }

    @Test
    void cancelledPrefillLeavesUsableSnapshotsAndSpeculationMatches() {
        try (PrefixCache cache = new PrefixCache(backend, 8, 8, 1L << 30, 16)) {
            // a repetitive prompt, so the n-gram draft has something to offer
            int[] unit = prompt(7, 51);
            int[] a = new int[70];
            for (int i = 0; i < a.length; i++) a[i] = unit[i % unit.length];
            // cancelled after 9 prefill chunks (cut at multiples of 5 and of 8: 30 tokens; snapshots at 8, 16, 24)
            Out cancelled = generate(cache, a, false, 9);
            assertTrue(cancelled.tokens().isEmpty());
            assertTrue(cache.cachedLengths().containsAll(List.of(8, 16, 24)), "snapshots " + cache.cachedLengths());
            Out hot = generate(cache, a);
            assertEquals(24, hot.cached(), "resumes the longest snapshot the cancelled request left");
            Out cold = generate(null, a);
            assertEquals(cold.tokens(), hot.tokens());
            assertEquals(cold.logprobs(), hot.logprobs());
            // speculative decoding on a resumed sequence: greedy verification gives the plain greedy answer exactly
            int[] b = concat(a, 70, unit);
            Out spec = generate(cache, b, true, -1);
            assertTrue(spec.cached() >= 64, "cached " + spec.cached());
            try (CpuSequence s = backend.newSequence(16)) {
                SamplingParams p = greedyWithLogprobs(24);
                List<Integer> plain = new ArrayList<>();
                Generation g = new Generation(backend, s, b, new Sampler(p, cfg.vocabSize, b), null, null,
                        new Generation.Options(5, 4096, new int[]{-1}, 16), (t, lp) -> plain.add(t));
                while (g.step()) { }
                assertEquals(plain, spec.tokens());
            }
        }
    }

    @Test
    void smallBudgetEvictsAndKeepsAnsweringExactly() {
        long one;
        try (CpuSequence s = backend.newSequence(16)) {
            forward(s, prompt(40, 1), 0, 40, 40);
            StateSnapshot snap = backend.snapshot(s);
            one = snap.ownBytes() + snap.shared().stream().mapToLong(StateSnapshot.SharedRows::bytes).sum();
        }
        try (PrefixCache cache = new PrefixCache(backend, 8, 8, one * 2, 16)) {
            int[] base = prompt(40, 31);
            for (int i = 0; i < 6; i++) {
                int[] p = concat(base, 8 + 6 * i, prompt(9 + i, 40 + i));
                Out hot = generate(cache, p);
                Out cold = generate(null, p);
                assertEquals(cold.tokens(), hot.tokens(), "tokens of prompt " + i);
                assertEquals(cold.logprobs(), hot.logprobs(), "logprobs of prompt " + i);
                assertTrue(cache.stats().bytes() <= one * 2, "within budget: " + cache.stats());
            }
            PrefixCache.Stats st = cache.stats();
            assertTrue(st.evictions() > 0, "evicted: " + st);
            assertTrue(st.hits() > 0, "still hits: " + st);
            cache.budgetBytes(0);
            assertEquals(0, cache.stats().snapshots());
            assertEquals(0, cache.stats().bytes());
            Out again = generate(cache, base);
            assertEquals(0, again.cached());
        }
    }
}
