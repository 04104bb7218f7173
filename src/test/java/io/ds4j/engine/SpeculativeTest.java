package io.ds4j.engine;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.model.ModelConfig;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.engine.Draft;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.engine.VerifyWidth;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Speculative decoding: greedy speculative output equals plain greedy output token for token for every draft source
 * and width, on the tiny reference fixture (all attention kinds, both MoE kinds; its FP8/FP4 twin is the draft
 * model) and on an in-memory micro model; acceptance figures behave.
 */
public class SpeculativeTest {
    static CpuBackend target, otherModel, sameModel;
    static ModelConfig cfg;

    @BeforeAll
    static void load() {
        cfg = TestModelsAccess.microConfig();
        target = new CpuBackend(TestModelsAccess.random(cfg, 42));
        otherModel = new CpuBackend(TestModelsAccess.random(cfg, 4242));
        sameModel = new CpuBackend(TestModelsAccess.random(cfg, 42));
    }

    @AfterAll
    static void close() {
        target.close();
        otherModel.close();
        sameModel.close();
    }

    /** What one generation produced: its tokens, its speculative statistics and why it finished. */
    public record Result(int[] tokens, Generation.SpecStats stats, Generation.Finish finish) {}

    static Result generate(int[] prompt, SamplingParams p, DraftSource src, VerifyWidth w) {
        return generate(target, prompt, p, src, w);
    }

    /**
     * Runs one generation to its end on target (prompt, sampling p, draft src or none, verify width w; at most 5 new
     * tokens, rollback window 16); also used by the GPU's speculative test.
     */
    public static Result generate(Backend target, int[] prompt, SamplingParams p, DraftSource src, VerifyWidth w) {
        List<Integer> out = new ArrayList<>();
        Sampler s = new Sampler(p, target.config().vocabSize, prompt);
        Draft d = src == null ? null : src.open(prompt, p, 7);
        Generation g = new Generation(target, target.newSequence(16), prompt, s, d, w,
                new Generation.Options(5, 4096, new int[]{-1}, 16), (tok, lp) -> { out.add(tok); return true; });
        while (g.step()) { }
        return new Result(out.stream().mapToInt(Integer::intValue).toArray(), g.specStats(), g.finish());
    }

    static int[] prompt(SplittableRandom r) {
        int n = 3 + r.nextInt(18);
        int[] p = new int[n];
        for (int i = 0; i < n; i++) p[i] = r.nextInt(cfg.vocabSize);
        return p;
    }

    static DraftSource modelDraft(CpuBackend b) {
        return new ModelDraftSource(b, "model", 16);
    }

    /**
     * 50 prompts on the tiny-hf-bf16 fixture, 40 generated tokens each (10 CSA and 2–3 HCA window boundaries of
     * generation), q in {1, 2, 4, 7} and adaptive, with the n-gram draft and the fixture's FP8/FP4 twin as a draft model.
     */
    @Test
    void greedySpeculativeEqualsPlainGreedyOnTheTinyFixture() throws Exception {
        try (CpuBackend fx = new CpuBackend(io.ds4j.model.WeightLoader.load(java.nio.file.Path.of("src/test/resources/fixtures/tiny-hf-bf16")));
             CpuBackend fxDraft = new CpuBackend(io.ds4j.model.WeightLoader.load(java.nio.file.Path.of("src/test/resources/fixtures/tiny-orig-fp8")))) {
            SplittableRandom r = new SplittableRandom(11);
            SamplingParams p = SamplingParams.greedy(40);
            int V = fx.config().vocabSize;
            java.util.Map<String, long[]> acc = new java.util.TreeMap<>();
            for (int i = 0; i < 50; i++) {
                int[] pr = new int[3 + r.nextInt(30)];
                for (int j = 0; j < pr.length; j++) pr[j] = i % 2 == 0 || j < 5 ? r.nextInt(V) : pr[j - 5]; // odd prompts repeat a 5-token phrase
                int[] plain = generate(fx, pr, p, null, null).tokens();
                assertEquals(40, plain.length);
                for (int q : new int[]{1, 2, 4, 7}) {
                    for (DraftSource src : List.of(NgramDraft.source(), new ModelDraftSource(fxDraft, "fp8-twin", 16))) {
                        Result spec = generate(fx, pr, p, src, VerifyWidth.fixed(q));
                        assertArrayEquals(plain, spec.tokens(), "prompt " + i + " q=" + q + " draft " + src.name());
                        long[] a = acc.computeIfAbsent(src.name() + " q=" + q, k -> new long[2]);
                        a[0] += spec.stats().offered();
                        a[1] += spec.stats().accepted();
                    }
                }
                Result auto = generate(fx, pr, p, NgramDraft.source(), VerifyWidth.parse("auto"));
                assertArrayEquals(plain, auto.tokens(), "adaptive width, prompt " + i);
            }
            acc.forEach((k, a) -> System.out.printf("greedy identity %s: %d offered, %d accepted (%.3f)%n", k, a[0], a[1], (double) a[1] / a[0]));
            assertTrue(acc.values().stream().allMatch(a -> a[0] > 0), "every draft source offered tokens");
        }
    }

    @Test
    void greedySpeculativeEqualsPlainGreedyOnTheMicroModel() {
        SplittableRandom r = new SplittableRandom(11);
        SamplingParams p = SamplingParams.greedy(40);
        for (int i = 0; i < 10; i++) {
            int[] pr = prompt(r);
            int[] plain = generate(pr, p, null, null).tokens();
            for (int q : new int[]{1, 3, 7})
                for (DraftSource src : List.of(NgramDraft.source(), modelDraft(otherModel)))
                    assertArrayEquals(plain, generate(pr, p, src, VerifyWidth.fixed(q)).tokens(), "prompt " + i + " q=" + q);
        }
    }

    @Test
    void identicalDraftIsAlwaysAccepted() {
        SplittableRandom r = new SplittableRandom(12);
        for (int i = 0; i < 5; i++) {
            int[] pr = prompt(r);
            Result res = generate(pr, SamplingParams.greedy(30), modelDraft(sameModel), VerifyWidth.fixed(4));
            assertEquals(1.0, res.stats().acceptanceRate(), 0.0, "a copy of the target is always accepted");
            assertEquals(5.0, res.stats().committedPerStep(), 1.0, "about q+1 tokens per step");
        }
    }

    @Test
    void randomDraftIsMostlyRejectedButOutputUnchanged() {
        SplittableRandom r = new SplittableRandom(13);
        long off = 0, acc = 0;
        for (int i = 0; i < 5; i++) {
            int[] pr = prompt(r);
            int[] plain = generate(pr, SamplingParams.greedy(30), null, null).tokens();
            Result res = generate(pr, SamplingParams.greedy(30), modelDraft(otherModel), VerifyWidth.fixed(4));
            assertArrayEquals(plain, res.tokens());
            off += res.stats().offered();
            acc += res.stats().accepted();
        }
        double rate = (double) acc / off;
        assertTrue(rate < 0.5, "acceptance of an unrelated draft should be low, got " + rate);
    }

    @Test
    void sampledGenerationIsReproducibleWithASeed() {
        int[] pr = {5, 6, 7, 8, 9};
        SamplingParams p = SamplingParams.sampled(0.9, 0, 0.95, 0, 1234, 25);
        assertArrayEquals(generate(pr, p, null, null).tokens(), generate(pr, p, null, null).tokens());
        assertArrayEquals(generate(pr, p, NgramDraft.source(), VerifyWidth.fixed(3)).tokens(),
                generate(pr, p, NgramDraft.source(), VerifyWidth.fixed(3)).tokens());
    }

    @Test
    void maxTokensAndFinishReason() {
        Result res = generate(new int[]{1, 2, 3}, SamplingParams.greedy(7), modelDraft(sameModel), VerifyWidth.fixed(4));
        assertEquals(7, res.tokens().length, "speculation never overshoots max_tokens");
        assertEquals(Generation.Finish.LENGTH, res.finish());
    }

    /**
     * Drafts after a rejected one count as offered (sent for verification) and not accepted, as vLLM's num_draft_tokens
     * counts them: a copy of the target whose proposals have their first token changed is rejected at once every step,
     * so every draft of every proposal is offered and none accepted (the output still equals plain greedy decoding).
     */
    @Test
    void draftsAfterARejectionCountAsOffered() {
        int[] pr = {5, 17, 42, 8};
        int V = cfg.vocabSize;
        DraftSource copy = modelDraft(sameModel);
        DraftSource wrongFirst = new DraftSource() {
            @Override
            public String name() {
                return "copy, first token changed";
            }

            @Override
            public Draft open(int[] prompt, SamplingParams p, long seed) {
                Draft d = copy.open(prompt, p, seed);
                return new Draft() {
                    @Override
                    public Proposal propose(int[] ctx, int len, int q) {
                        Proposal x = d.propose(ctx, len, q);
                        if (x.tokens().length == 0) return x;
                        int[] t = x.tokens().clone();
                        t[0] = (t[0] + 1) % V; // the target's greedy choice is t[0]: never this one
                        return new Proposal(t, x.dists());
                    }

                    @Override
                    public void committed(int[] ctx, int len) {
                        d.committed(ctx, len);
                    }

                    @Override
                    public void close() {
                        d.close();
                    }
                };
            }
        };
        Result res = generate(pr, SamplingParams.greedy(12), wrongFirst, VerifyWidth.fixed(4));
        Result plain = generate(pr, SamplingParams.greedy(12), null, VerifyWidth.fixed(4));
        assertArrayEquals(plain.tokens(), res.tokens(), "a rejected draft never changes greedy output");
        Generation.SpecStats st = res.stats();
        assertEquals(0, st.accepted(), st.toString());
        assertTrue(st.steps() > 0, st.toString());
        // every step's proposal is rejected at its first token, so each step emits one token (the first came from the
        // prefill); step k then has 12 - 1 - k tokens left and offers min(4, left - 1): the drafts after the rejected
        // first one count too
        long expected = 0;
        for (int k = 0; k < st.steps(); k++) expected += Math.min(4, 12 - 1 - k - 1);
        assertEquals(expected, st.offered(), st.toString());
    }

    /**
     * An identical draft is accepted in full whatever ends the generation: the length limit at any point of a verify
     * step, or the listener stopping (a stop string, EOS) right after an accepted draft token; drafts after the end
     * were never judged, so they are not counted as offered.
     */
    @Test
    void identicalDraftShowsFullAcceptanceAtTheEnd() {
        int[] pr = {5, 17, 42, 8};
        for (int max = 1; max <= 13; max++) {
            Result res = generate(pr, SamplingParams.greedy(max), modelDraft(sameModel), VerifyWidth.fixed(4));
            assertEquals(res.stats().offered(), res.stats().accepted(), "max_tokens " + max + ": " + res.stats());
        }
        for (int stopAt = 2; stopAt <= 12; stopAt++) {
            List<Integer> out = new ArrayList<>();
            int[] limit = {stopAt};
            SamplingParams p = SamplingParams.greedy(40);
            Generation g = new Generation(target, target.newSequence(16), pr, new Sampler(p, cfg.vocabSize, pr),
                    modelDraft(sameModel).open(pr, p, 7), VerifyWidth.fixed(4), new Generation.Options(5, 4096, new int[]{-1}, 16),
                    (tok, lp) -> { out.add(tok); return out.size() < limit[0]; });
            while (g.step()) { }
            assertEquals(stopAt, out.size());
            Generation.SpecStats st = g.specStats();
            assertEquals(st.offered(), st.accepted(), "stopped after " + stopAt + " tokens: " + st);
            assertTrue(st.offered() > 0 || stopAt < 2);
        }
    }
}
