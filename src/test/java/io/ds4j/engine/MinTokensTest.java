package io.ds4j.engine;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.model.ModelConfig;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.NgramDraft;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * vLLM's min_tokens ({@link Generation#minTokens}) on a model that wants to end at once (its end-of-sequence logit
 * raised far above the rest, a stop token id's less so): the first n tokens are neither, then the end comes; greedy
 * alike whether the backend chooses the rows among masks or the host samples the logits, alone, with drafts and
 * batched; sampled outputs never end early.
 */
class MinTokensTest {
    static CpuBackend inner;
    static final int EOS = 1, STOP = 7;

    /** The wrapped model with EOS's logit +1000 and STOP's +500 in every row; says {@link #argmaxMasks} as told. */
    static final class EndsAtOnce implements Backend {
        final boolean masks;

        EndsAtOnce(boolean masks) {
            this.masks = masks;
        }

        @Override public String name() { return inner.name(); }
        @Override public ModelConfig config() { return inner.config(); }
        @Override public Sequence newSequence(int maxRollback) { return inner.newSequence(maxRollback); }
        @Override public long stateBytes(int contextTokens, int maxRollback) { return inner.stateBytes(contextTokens, maxRollback); }
        @Override public boolean argmaxMasks() { return masks; }
        @Override public void close() { }

        @Override
        public float[] forward(Sequence seq, int[] tokens, int from, int count, int[] logitRows) {
            float[] lg = inner.forward(seq, tokens, from, count, logitRows);
            int V = config().vocabSize;
            for (int r = 0; r < logitRows.length; r++) {
                lg[r * V + EOS] += 1000;
                lg[r * V + STOP] += 500;
            }
            return lg;
        }
    }

    @BeforeAll
    static void load() {
        inner = new CpuBackend(TestModelsAccess.random(TestModelsAccess.microConfig(), 3));
    }

    @AfterAll
    static void close() {
        inner.close();
    }

    static Generation gen(Backend b, SamplingParams p, int min, boolean draft, List<Integer> out) {
        int[] prompt = {5, 9, 12, 9, 5, 9, 12};
        Generation g = new Generation(b, b.newSequence(8), prompt, new Sampler(p, b.config().vocabSize, prompt),
                draft ? NgramDraft.source().open(prompt, p, 3) : null, draft ? VerifyWidth.fixed(3) : null,
                new Generation.Options(16, 256, new int[]{EOS}, 8), (t, lp) -> {
                    out.add(t);
                    return true;
                });
        g.minTokens(min, new int[]{STOP});
        return g;
    }

    static List<Integer> alone(Backend b, SamplingParams p, int min, boolean draft) {
        List<Integer> out = new ArrayList<>();
        Generation g = gen(b, p, min, draft, out);
        while (g.step()) { }
        return out;
    }

    @Test
    void theEndWaitsForMinTokens() {
        SamplingParams greedy = SamplingParams.greedy(40);
        for (int min : new int[]{0, 1, 5, 12}) {
            for (boolean draft : new boolean[]{false, true}) {
                List<Integer> masked = alone(new EndsAtOnce(true), greedy, min, draft);
                List<Integer> logits = alone(new EndsAtOnce(false), greedy, min, draft);
                assertEquals(logits, masked, "min " + min + (draft ? " with drafts" : ""));
                assertEquals(min + 1, masked.size(), "min " + min + ": " + masked);
                assertEquals(EOS, masked.getLast());
                assertFalse(masked.subList(0, min).contains(EOS) || masked.subList(0, min).contains(STOP), masked.toString());
            }
        }
        for (long seed = 0; seed < 6; seed++) {
            List<Integer> s = alone(new EndsAtOnce(true), SamplingParams.sampled(1.0, 0, 1.0, 0, seed, 40), 6, seed % 2 == 0);
            assertTrue(s.size() >= 7 && !s.subList(0, 6).contains(EOS) && !s.subList(0, 6).contains(STOP), s.toString());
        }
    }

    @Test
    void batchedRequestsHoldTheirOwnMinimum() {
        EndsAtOnce b = new EndsAtOnce(true);
        Scheduler<Integer> sch = new Scheduler<>(b, new Scheduler.Limits(64, 16));
        int[] mins = {0, 3, 9, 4};
        List<List<Integer>> outs = new ArrayList<>();
        for (int i = 0; i < mins.length; i++) {
            List<Integer> out = new ArrayList<>();
            outs.add(out);
            sch.add(i, gen(b, SamplingParams.greedy(40), mins[i], i % 2 == 1, out));
        }
        for (int t = 0; !sch.isEmpty() && t < 1000; t++) assertTrue(sch.tick().failed().isEmpty());
        for (int i = 0; i < mins.length; i++) {
            assertEquals(alone(new EndsAtOnce(false), SamplingParams.greedy(40), mins[i], i % 2 == 1), outs.get(i), "request " + i);
            assertEquals(mins[i] + 1, outs.get(i).size());
        }
    }
}
