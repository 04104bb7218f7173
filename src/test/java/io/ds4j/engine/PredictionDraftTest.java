package io.ds4j.engine;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.model.WeightLoader;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.engine.Draft;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.speculative.PredictionDraft;
import io.ds4j.engine.VerifyWidth;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Predicted outputs as a draft: greedy output with a prediction (exact, edited, unrelated, one token, empty) equals
 * plain greedy output on the tiny fixture (all attention kinds; 40 generated tokens cross several compressor window
 * boundaries), for several widths, alone and combined with the n-gram draft or a draft model; and the accepted /
 * rejected prediction token counts add up as documented.
 */
class PredictionDraftTest {
    static CpuBackend fx, fxDraft;
    static final int TOKENS = 40;

    @BeforeAll
    static void load() throws Exception {
        fx = new CpuBackend(WeightLoader.load(Path.of("src/test/resources/fixtures/tiny-hf-bf16")));
        fxDraft = new CpuBackend(WeightLoader.load(Path.of("src/test/resources/fixtures/tiny-orig-fp8")));
    }

    @AfterAll
    static void close() {
        fx.close();
        fxDraft.close();
    }

    /** One generation: its tokens, speculative statistics and the prediction draft's counts. */
    record Run(int[] tokens, Generation.SpecStats stats, long accepted, long rejected) {}

    static Run run(int[] prompt, SamplingParams p, int[] prediction, DraftSource other, VerifyWidth w) {
        List<Integer> out = new ArrayList<>();
        Sampler s = new Sampler(p, fx.config().vocabSize, prompt);
        PredictionDraft d = prediction == null ? null
                : new PredictionDraft(prediction, prompt.length, other == null ? null : other.open(prompt, p, 7));
        Draft plainDraft = prediction == null && other != null ? other.open(prompt, p, 7) : null;
        Generation g = new Generation(fx, fx.newSequence(16), prompt, s, d != null ? d : plainDraft, w,
                new Generation.Options(5, 4096, new int[]{-1}, 16), (tok, lp) -> { out.add(tok); return true; });
        while (g.step()) { }
        return new Run(out.stream().mapToInt(Integer::intValue).toArray(), g.specStats(),
                d == null ? 0 : d.acceptedTokens(), d == null ? 0 : d.rejectedTokens());
    }

    /** Tokens not in the given output (so a prediction of them never matches it). */
    static int[] unrelated(int[] output, int n, SplittableRandom r) {
        int[] u = new int[n];
        for (int i = 0; i < n; ) {
            int t = r.nextInt(fx.config().vocabSize);
            int ft = t;
            if (IntStream.of(output).noneMatch(x -> x == ft)) u[i++] = t;
        }
        return u;
    }

    static int[] concat(int[]... parts) {
        return Arrays.stream(parts).flatMapToInt(IntStream::of).toArray();
    }

    @Test
    void greedyOutputWithAPredictionEqualsPlainGreedyOutput() {
        SplittableRandom r = new SplittableRandom(17);
        SamplingParams p = SamplingParams.greedy(TOKENS);
        int V = fx.config().vocabSize;
        Map<String, long[]> figures = new LinkedHashMap<>();
        for (int i = 0; i < 6; i++) {
            int[] pr = new int[4 + r.nextInt(24)];
            for (int j = 0; j < pr.length; j++) pr[j] = r.nextInt(V);
            int[] plain = run(pr, p, null, null, null).tokens();
            assertEquals(TOKENS, plain.length);
            Map<String, int[]> predictions = new LinkedHashMap<>();
            predictions.put("exact", plain);
            int[] edited = plain.clone();
            edited[7] = unrelated(plain, 1, r)[0];
            // an edit, an insertion and a deletion: the draft must re-align after each
            predictions.put("edited", concat(Arrays.copyOfRange(edited, 0, 15), unrelated(plain, 3, r),
                    Arrays.copyOfRange(edited, 15, 25), Arrays.copyOfRange(edited, 29, TOKENS)));
            predictions.put("shifted", Arrays.copyOfRange(plain, 9, TOKENS));
            predictions.put("unrelated", unrelated(plain, 50, r));
            predictions.put("one token", new int[]{plain[0]});
            predictions.put("empty", new int[0]);
            for (var e : predictions.entrySet()) {
                for (int q : new int[]{1, 2, 4, 7}) {
                    for (DraftSource other : Arrays.asList(null, NgramDraft.source(), new ModelDraftSource(fxDraft, "fp8-twin", 16))) {
                        if (other instanceof ModelDraftSource && q != 4) continue; // the draft model is the slow one
                        String what = "prompt " + i + ", prediction " + e.getKey() + ", q=" + q + ", other " + (other == null ? "none" : other.name());
                        Run spec = run(pr, p, e.getValue(), other, VerifyWidth.fixed(q));
                        assertArrayEquals(plain, spec.tokens(), what);
                        long judged = spec.accepted() + spec.rejected();
                        if (other == null) assertEquals(spec.stats().offered(), judged, what + ": the prediction is the only draft");
                        else assertTrue(judged <= spec.stats().offered(), what);
                        assertTrue(spec.accepted() <= spec.stats().accepted(), what);
                        long[] f = figures.computeIfAbsent(e.getKey() + (other == null ? "" : "+" + other.name()), k -> new long[3]);
                        f[0] += spec.accepted();
                        f[1] += spec.rejected();
                        f[2] += spec.stats().steps();
                    }
                }
                Run auto = run(pr, p, e.getValue(), null, VerifyWidth.parse("auto"));
                assertArrayEquals(plain, auto.tokens(), "prompt " + i + ", prediction " + e.getKey() + ", adaptive width");
            }
        }
        figures.forEach((k, f) -> System.out.printf("prediction %-22s accepted %5d, rejected %5d, verify steps %5d%n", k, f[0], f[1], f[2]));
        assertTrue(figures.get("edited")[0] > 0 && figures.get("edited")[1] > 0, "an edited prediction is partly accepted, partly rejected");
        assertTrue(figures.get("shifted")[0] > 0, "a prediction of the output's tail is found by re-alignment");
        assertEquals(0, figures.get("unrelated")[0] + figures.get("unrelated")[1], "an unrelated prediction never proposes");
        assertEquals(0, figures.get("empty")[0] + figures.get("empty")[1]);
    }

    @Test
    void anExactPredictionIsAcceptedWhole() {
        SplittableRandom r = new SplittableRandom(5);
        SamplingParams p = SamplingParams.greedy(TOKENS);
        for (int i = 0; i < 3; i++) {
            int[] pr = new int[5 + r.nextInt(10)];
            for (int j = 0; j < pr.length; j++) pr[j] = r.nextInt(fx.config().vocabSize);
            int[] plain = run(pr, p, null, null, null).tokens();
            for (int q : new int[]{1, 4, 8}) {
                Run spec = run(pr, p, plain, null, VerifyWidth.fixed(q));
                assertEquals(0, spec.rejected(), "q=" + q);
                assertEquals(spec.stats().offered(), spec.accepted());
                // the first token comes from the prefill, each verify step adds its accepted drafts and one of its own
                assertEquals(TOKENS, 1 + spec.accepted() + spec.stats().steps(), "q=" + q);
                assertEquals(Math.ceilDiv(TOKENS - 1, q + 1), spec.stats().steps(), "q=" + q + ": every step commits q + 1 tokens");
            }
        }
    }

    @Test
    void anUnrelatedPredictionLeavesTheOtherDraftAsItWas() {
        SplittableRandom r = new SplittableRandom(9);
        SamplingParams p = SamplingParams.greedy(TOKENS);
        int[] pr = {5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7};
        int[] plain = run(pr, p, null, null, null).tokens();
        Run ngram = run(pr, p, null, NgramDraft.source(), VerifyWidth.fixed(3));
        Run both = run(pr, p, unrelated(plain, 30, r), NgramDraft.source(), VerifyWidth.fixed(3));
        assertArrayEquals(plain, both.tokens());
        assertEquals(0, both.accepted());
        assertEquals(0, both.rejected());
        assertEquals(ngram.stats(), both.stats(), "the n-gram draft proposes exactly as without the prediction");
    }
}
