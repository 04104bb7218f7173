package io.ds4j.engine;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.model.MtpCheckpoints;
import io.ds4j.model.WeightLoader;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.MtpDraftSource;
import io.ds4j.engine.VerifyWidth;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The MTP draft: greedy output with it equals plain greedy output token for token (several q, prompts and generations
 * that cross CSA and HCA window boundaries), and the MTP state kept incrementally across verify steps (catch-up,
 * chained entries, rollback) gives the same proposal logits as a fresh MTP state on a fresh target.
 */
class MtpSpeculativeTest {
    @TempDir
    static Path tmp;
    static CpuBackend micro, tiny;

    @BeforeAll
    static void load() throws Exception {
        micro = new CpuBackend(WeightLoader.load(MtpCheckpoints.micro(tmp.resolve("micro"), 17, true)));
        tiny = new CpuBackend(WeightLoader.load(MtpCheckpoints.tinyFp8(tmp.resolve("tiny"), 19)));
    }

    @AfterAll
    static void close() {
        micro.close();
        tiny.close();
    }

    /** Micro model (W 4, CSA 4, HCA 8): 12 prompts of 3–30 tokens, 40 generated tokens, q in {1, 2, 3, 5, 7} and adaptive. */
    @Test
    void greedyWithMtpEqualsPlainGreedyOnTheMicroModel() {
        identity(micro, 12, 40, new int[]{1, 2, 3, 5, 7}, 23);
    }

    /** Tiny preset as released (FP8/FP4, W 8, CSA 4, HCA 16, real vocabulary): 4 prompts, 40 tokens, q in {2, 4}. */
    @Test
    void greedyWithMtpEqualsPlainGreedyOnTheTinyFp8Model() {
        identity(tiny, 4, 40, new int[]{2, 4}, 29);
    }

    private static void identity(CpuBackend b, int prompts, int n, int[] qs, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        SamplingParams p = SamplingParams.greedy(n);
        int V = b.config().vocabSize;
        long offered = 0, accepted = 0;
        MtpDraftSource src = new MtpDraftSource(b, 16);
        for (int i = 0; i < prompts; i++) {
            int[] pr = new int[3 + r.nextInt(28)];
            for (int j = 0; j < pr.length; j++) pr[j] = r.nextInt(V);
            int[] plain = gen(b, pr, p, null, null).tokens();
            assertEquals(n, plain.length);
            for (int q : qs) {
                SpeculativeTest.Result spec = gen(b, pr, p, src, VerifyWidth.fixed(q));
                assertArrayEquals(plain, spec.tokens(), "prompt " + i + " q=" + q);
                offered += spec.stats().offered();
                accepted += spec.stats().accepted();
            }
            assertArrayEquals(plain, gen(b, pr, p, src, VerifyWidth.parse("auto")).tokens(), "adaptive width, prompt " + i);
        }
        System.out.printf("MTP greedy identity (%s): %d offered, %d accepted%n", b.config(), offered, accepted);
        assertTrue(offered > 0, "the MTP draft offered tokens");
    }

    /** As {@link SpeculativeTest#generate} with 40 tokens allowed. */
    static SpeculativeTest.Result gen(Backend b, int[] prompt, SamplingParams p, MtpDraftSource src, VerifyWidth w) {
        java.util.List<Integer> out = new java.util.ArrayList<>();
        io.ds4j.sampling.Sampler s = new io.ds4j.sampling.Sampler(p, b.config().vocabSize, prompt);
        io.ds4j.engine.Draft d = src == null ? null : src.open(prompt, p, 7);
        Generation g = new Generation(b, b.newSequence(16), prompt, s, d, w,
                new Generation.Options(5, 4096, new int[]{-1}, 16), (tok, lp) -> { out.add(tok); return true; });
        while (g.step()) { }
        return new SpeculativeTest.Result(out.stream().mapToInt(Integer::intValue).toArray(), g.specStats(), g.finish());
    }

    /**
     * Drives a target through verify-like steps (accept some, roll back the rest) with the MTP state started and chained
     * at every step; at each step the first proposal's logits equal those of a fresh MTP state attached to a fresh
     * target prefilled with the committed text (up to the batch-split rounding of the CPU products).
     */
    @Test
    void incrementalMtpStateMatchesAFreshOne() {
        CpuBackend b = micro;
        int V = b.config().vocabSize;
        SplittableRandom r = new SplittableRandom(31);
        int[] ctx = new int[200];
        int len = 9;
        for (int i = 0; i < len; i++) ctx[i] = r.nextInt(V);
        MtpHead head = b.mtp();
        try (Sequence t = b.newSequence(16); MtpState st = head.open(t, 16)) {
            b.forward(t, ctx, 0, len - 1, new int[0]); // prefill all but the pending token
            for (int step = 0; step < 25; step++) {
                float[] inc = st.start(ctx, len);
                int q = 1 + r.nextInt(5);
                int[] drafts = new int[q];
                float[] lg = inc;
                for (int i = 0; i < q; i++) {
                    drafts[i] = argmax(lg);
                    if (i + 1 < q) lg = st.next(drafts[i]);
                }
                float[] fresh = freshStart(b, ctx, len);
                assertArrayEquals(fresh, inc, 1e-5f, "step " + step + " at length " + len);
                // verify step: the pending token plus q random tokens, keep a random prefix
                int[] rows = new int[q + 1];
                rows[0] = ctx[len - 1];
                for (int i = 1; i <= q; i++) rows[i] = r.nextInt(V);
                b.forward(t, rows, 0, q + 1, new int[0]);
                int acc = r.nextInt(q + 1);
                t.rollback(q - acc);
                for (int i = 1; i <= acc; i++) ctx[len++] = rows[i];
                ctx[len++] = r.nextInt(V); // the new pending token
            }
        }
    }

    private static float[] freshStart(CpuBackend b, int[] ctx, int len) {
        try (Sequence t = b.newSequence(16); MtpState st = b.mtp().open(t, 16)) {
            b.forward(t, ctx, 0, len - 1, new int[0]);
            return st.start(Arrays.copyOf(ctx, len), len);
        }
    }

    private static int argmax(float[] a) {
        int k = 0;
        for (int i = 1; i < a.length; i++) if (a[i] > a[k]) k = i;
        return k;
    }
}
