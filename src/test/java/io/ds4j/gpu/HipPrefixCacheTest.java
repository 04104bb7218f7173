package io.ds4j.gpu;

import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.engine.Backend;
import io.ds4j.engine.Generation;
import io.ds4j.engine.PrefixCache;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StateSnapshot;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.TensorNames;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.Presets;
import io.ds4j.model.synth.RandomCheckpoint;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Snapshots and the prefix cache on the GPU backend, bit for bit against a cold prefill on the same backend:
 * <ul>
 *   <li>micro model (F32 weights): a sequence resumed at lengths on and off block boundaries, across the raw window
 *       and the CSA and HCA windows, gives the cold logits; shared entry stores survive a rollback below the snapshot
 *       and two diverging continuations;</li>
 *   <li>{@code tiny} preset in FP8 (the tensor-core prefill path for steps of DS4J_TC_MIN_ROWS rows or more): greedy generations
 *       through the cache as the server runs them (chunks cut at multiples of the chunk size and at the prompt's last
 *       block boundary) give the tokens and logprobs of cold generations, and the snapshots' device memory is freed.</li>
 * </ul>
 */
@Tag("gpu")
class HipPrefixCacheTest {
    @TempDir
    static Path tmp;

    static int[] prompt(ModelConfig c, int n, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        return IntStream.range(0, n).map(i -> r.nextInt(c.vocabSize)).toArray();
    }

    static int[] rows(int n) {
        return IntStream.range(0, n).toArray();
    }

    static float[] forward(Backend b, Sequence s, int[] toks, int from, int to, int chunk) {
        int V = b.config().vocabSize;
        float[] out = new float[(to - from) * V];
        for (int p = from; p < to; ) {
            int n = Math.min(chunk, to - p);
            float[] lg = b.forward(s, toks, p, n, rows(n));
            System.arraycopy(lg, 0, out, (p - from) * V, lg.length);
            p += n;
        }
        return out;
    }

    @Test
    void microResumeMatchesColdBitForBit() {
        ModelConfig c = TestModelsAccess.microConfig();
        try (HipBackend g = new HipBackend(TestModelsAccess.random(c, 42))) {
            int[] toks = prompt(c, 61, 3);
            float[] cold;
            try (Sequence s = g.newSequence(16)) {
                cold = forward(g, s, toks, 0, 61, 61);
            }
            int V = c.vocabSize;
            for (int len : new int[]{1, 4, 8, 9, 16, 24, 33, 40, 60}) {
                try (Sequence src = g.newSequence(16)) {
                    forward(g, src, toks, 0, len, 5);
                    StateSnapshot snap = g.snapshot(src);
                    float[] srcRest = forward(g, src, toks, len, 61, 7);
                    try (Sequence r = g.resume(snap, 16)) {
                        float[] rest = forward(g, r, toks, len, 61, 61);
                        float[] want = Arrays.copyOfRange(cold, len * V, cold.length);
                        assertArrayEquals(want, rest, "resumed at " + len);
                        assertArrayEquals(want, srcRest, "source after a snapshot at " + len);
                    }
                    snap.close();
                }
            }
            // rollback below the snapshot, then divergence from the same snapshot
            int[] other = prompt(c, 61, 6);
            int[] mixed = Arrays.copyOf(toks, 61);
            System.arraycopy(other, 28, mixed, 28, 33);
            float[] coldMixed;
            try (Sequence s = g.newSequence(16)) {
                coldMixed = forward(g, s, mixed, 0, 61, 61);
            }
            try (Sequence src = g.newSequence(16)) {
                forward(g, src, toks, 0, 32, 32);
                StateSnapshot snap = g.snapshot(src);
                forward(g, src, toks, 32, 40, 8);
                src.rollback(12);
                assertArrayEquals(Arrays.copyOfRange(coldMixed, 28 * V, coldMixed.length), forward(g, src, mixed, 28, 61, 6));
                // the second continuation keeps the snapshot's 32 tokens and goes on with other ones
                int[] second = Arrays.copyOf(toks, 61);
                System.arraycopy(other, 32, second, 32, 29);
                float[] coldSecond;
                try (Sequence s = g.newSequence(16)) {
                    coldSecond = forward(g, s, second, 0, 61, 61);
                }
                try (Sequence a = g.resume(snap, 16); Sequence b = g.resume(snap, 16)) {
                    float[] rb = forward(g, b, second, 32, 61, 3);
                    float[] ra = forward(g, a, toks, 32, 61, 4);
                    assertArrayEquals(Arrays.copyOfRange(cold, 32 * V, cold.length), ra, "first continuation");
                    assertArrayEquals(Arrays.copyOfRange(coldSecond, 32 * V, coldSecond.length), rb, "second continuation");
                }
                snap.close();
            }
        }
    }

    record Out(List<Integer> tokens, List<Float> logprobs, int cached) {}

    /** A greedy generation as the engine runs one: through the cache when given, else cold; chunk cuts as the server. */
    static Out generate(Backend b, PrefixCache cache, int block, int[] prompt) {
        SamplingParams p = new SamplingParams(0, 0, 1, 0, null, 0, 0, 1, Map.of(), 8, List.of(), true, 3, false);
        List<Integer> toks = new ArrayList<>();
        List<Float> lps = new ArrayList<>();
        Sequence seq = cache != null ? cache.start(prompt).seq() : b.newSequence(16);
        Generation gen = new Generation(b, seq, prompt, new Sampler(p, b.config().vocabSize, prompt), null, null,
                new Generation.Options(128, 8192, new int[]{-1}, 16), (t, lp) -> {
            toks.add(t);
            lps.add(lp.logprob());
            for (float v : lp.topLogprobs()) lps.add(v);
            return true;
        });
        int tail = prompt.length / block * block;
        if (cache != null) gen.snapshotAt(cache.snapshotPoints(prompt, seq.length()), s -> cache.offer(prompt, s));
        else if (tail > 0) gen.snapshotAt(new int[]{tail}, s -> { });
        while (gen.step()) { }
        return new Out(toks, lps, gen.cachedTokens());
    }

    static int[] concat(int[] a, int aLen, int[] b) {
        int[] r = Arrays.copyOf(a, aLen + b.length);
        System.arraycopy(b, 0, r, aLen, b.length);
        return r;
    }

    @Test
    void tinyFp8CacheAnswersAsCold() throws Exception {
        Path dir = tmp.resolve("tiny-fp8");
        new RandomCheckpoint(Presets.get("tiny"), 12, TensorNames.Scheme.ORIGINAL, RandomCheckpoint.Storage.FP8).write(dir);
        try (HipBackend g = new HipBackend(WeightLoader.load(dir))) {
            ModelConfig c = g.config();
            generate(g, null, 64, prompt(c, 859, 9)); // the workspace grows to its size for these steps first
            long free0 = g.gpu().memory()[0];
            try (PrefixCache cache = new PrefixCache(g, 64, 128, 1L << 30, 16)) {
                int block = cache.blockTokens();
                int[] doc = prompt(c, 700, 1);
                int[][] prompts = {
                        concat(doc, 700, prompt(c, 20, 2)),          // cold
                        concat(doc, 700, prompt(c, 45, 3)),          // hits doc's periodic snapshot (640)
                        concat(doc, 700, prompt(c, 9, 4)),           // hits 640 again (the 704 snapshots hold other tokens)
                        concat(doc, 659, prompt(c, 200, 5)),         // off a block boundary
                };
                int[] minCached = {0, 640, 640, 640};
                for (int i = 0; i < prompts.length; i++) {
                    Out hot = generate(g, cache, block, prompts[i]);
                    Out cold = generate(g, null, block, prompts[i]);
                    assertTrue(hot.cached() >= minCached[i], "prompt " + i + " cached " + hot.cached());
                    assertEquals(cold.tokens(), hot.tokens(), "tokens of prompt " + i);
                    assertEquals(cold.logprobs(), hot.logprobs(), "logprobs of prompt " + i);
                    System.out.printf("gpu prefix cache: prompt %d of %d tokens, %d cached, tokens and logprobs equal to cold%n",
                            i, prompts[i].length, hot.cached());
                }
                assertTrue(cache.stats().hits() >= 3, cache.stats().toString());
            }
            // every snapshot and the stores they shared are freed again (allocator slack aside)
            long free1 = g.gpu().memory()[0];
            assertTrue(free0 - free1 < (64L << 20), "device memory not returned: " + (free0 - free1) + " bytes");
        }
    }
}
