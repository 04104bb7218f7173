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
import io.ds4j.speculative.PredictionDraft;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Speculative sampling draws from the same distribution as plain sampling (two-sample chi-square homogeneity test on
 * the third generated token, which goes through verify acceptance and residual resampling), for two sampler settings
 * on a 97-token model. Seeds are fixed, so the test is deterministic.
 *
 * <p>Power: with N = 2000 draws per arm and significance 0.001, the same test is run as a negative control on two
 * arms that really differ — plain sampling from the target versus plain sampling from the draft model, which is what
 * an implementation that accepted every draft token would produce — and must reject there.
 */
class SpeculativeSamplingStatisticsTest {
    static final int N = 2000;
    static CpuBackend target, drafter;
    /** Draft tokens offered over the last {@link #thirdTokenCounts} call (to check the draft was exercised). */
    static long lastOffered;
    static ModelConfig cfg;

    @BeforeAll
    static void load() {
        cfg = TestModelsAccess.microConfig();
        target = new CpuBackend(TestModelsAccess.random(cfg, 42));
        drafter = new CpuBackend(TestModelsAccess.random(cfg, 4242));
    }

    @AfterAll
    static void close() {
        target.close();
        drafter.close();
    }

    /** Counts of the 3rd generated token over N runs with seeds base..base+N-1. */
    static long[] thirdTokenCounts(CpuBackend model, int[] prompt, SamplingParams base, DraftSource src, int q, long seedBase) {
        long[] counts = new long[cfg.vocabSize];
        lastOffered = 0;
        for (int i = 0; i < N; i++) {
            SamplingParams p = new SamplingParams(base.temperature(), base.topK(), base.topP(), base.minP(), seedBase + i,
                    base.presencePenalty(), base.frequencyPenalty(), base.repetitionPenalty(), Map.of(), 3, List.of(), false, 0, true);
            int[] last = new int[1];
            Sampler s = new Sampler(p, cfg.vocabSize, prompt);
            Draft d = src == null ? null : src.open(prompt, p, 99 + i);
            Generation g = new Generation(model, model.newSequence(16), prompt, s, d, src == null ? null : VerifyWidth.fixed(q),
                    new Generation.Options(64, 4096, new int[0], 16), (tok, lp) -> {
                        last[0] = tok;
                        return true;
                    });
            while (g.step()) { }
            assertEquals(3, g.generatedTokens());
            lastOffered += g.specStats().offered();
            counts[last[0]]++;
        }
        return counts;
    }

    /** Two-sample chi-square statistic with cells of expected count < 5 pooled; returns {statistic, degrees of freedom}. */
    static double[] chiSquare(long[] a, long[] b) {
        long na = 0, nb = 0;
        for (int i = 0; i < a.length; i++) {
            na += a[i];
            nb += b[i];
        }
        double stat = 0, poolA = 0, poolB = 0;
        int cells = 0;
        for (int i = 0; i < a.length; i++) {
            double tot = a[i] + b[i];
            double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
            if (ea < 5 || eb < 5) {
                poolA += a[i];
                poolB += b[i];
                continue;
            }
            stat += (a[i] - ea) * (a[i] - ea) / ea + (b[i] - eb) * (b[i] - eb) / eb;
            cells++;
        }
        double tot = poolA + poolB;
        if (tot > 0) {
            double ea = tot * na / (na + nb), eb = tot * nb / (na + nb);
            if (ea > 0) stat += (poolA - ea) * (poolA - ea) / ea;
            if (eb > 0) stat += (poolB - eb) * (poolB - eb) / eb;
            cells++;
        }
        return new double[]{stat, Math.max(1, cells - 1)};
    }

    /** Upper 0.001 critical value of chi-square with df degrees of freedom (Wilson–Hilferty approximation). */
    static double critical(double df) {
        double z = 3.090232; // upper 0.001 standard normal quantile
        double h = 2.0 / (9 * df);
        return df * Math.pow(1 - h + z * Math.sqrt(h), 3);
    }

    static void assertSame(long[] plain, long[] spec, String what) {
        double[] c = chiSquare(plain, spec);
        System.out.printf("%s: chi2 = %.1f, df = %.0f, critical(0.001) = %.1f%n", what, c[0], c[1], critical(c[1]));
        assertTrue(c[0] < critical(c[1]), what + ": speculative sampling differs from plain sampling (chi2 " + c[0] + ")");
    }

    @Test
    void modelDraftWithTemperatureOne() {
        int[] prompt = {3, 14, 15, 92, 65};
        SamplingParams p = SamplingParams.sampled(1.0, 0, 1.0, 0, 0, 3);
        long[] plain = thirdTokenCounts(target, prompt, p, null, 0, 1_000_000);
        long[] spec = thirdTokenCounts(target, prompt, p, new ModelDraftSource(drafter, "draft", 16), 2, 2_000_000);
        assertSame(plain, spec, "T=1, model draft, q=2");
        // negative control: what accepting every draft token would sample from
        long[] draftOnly = thirdTokenCounts(drafter, prompt, p, null, 0, 3_000_000);
        double[] c = chiSquare(plain, draftOnly);
        System.out.printf("negative control: chi2 = %.1f, df = %.0f%n", c[0], c[1]);
        assertTrue(c[0] > critical(c[1]), "the test has power to see a wrong distribution");
    }

    /**
     * The MTP draft (sampled proposals with their distributions, q = 2) on a micro checkpoint with an MTP layer: the
     * third token's distribution equals plain sampling's.
     */
    @Test
    void mtpDraftWithTemperatureOne(@org.junit.jupiter.api.io.TempDir java.nio.file.Path tmp) throws Exception {
        try (CpuBackend m = new CpuBackend(io.ds4j.model.WeightLoader.load(io.ds4j.model.MtpCheckpoints.micro(tmp, 17, true)))) {
            assertEquals(cfg.vocabSize, m.config().vocabSize);
            int[] prompt = {3, 14, 15, 92, 65, 35, 89};
            SamplingParams p = SamplingParams.sampled(1.0, 0, 1.0, 0, 0, 3);
            long[] plain = thirdTokenCounts(m, prompt, p, null, 0, 6_000_000);
            long[] spec = thirdTokenCounts(m, prompt, p, new io.ds4j.speculative.MtpDraftSource(m, 16), 2, 7_000_000);
            assertSame(plain, spec, "T=1, MTP draft, q=2");
        }
    }

    @Test
    void ngramDraftWithTopKMinPAndPenalties() {
        int[] prompt = {7, 8, 9, 10, 7, 8, 9, 10, 7, 8, 9, 10, 7, 8, 9};
        SamplingParams p = SamplingParams.sampled(0.7, 12, 0.95, 0.02, 0, 3).withPenalties(0.4, 0.3, 1.1);
        long[] plain = thirdTokenCounts(target, prompt, p, null, 0, 4_000_000);
        long[] spec = thirdTokenCounts(target, prompt, p, NgramDraft.source(), 3, 5_000_000);
        assertSame(plain, spec, "T=0.7 top-k 12 top-p 0.95 min-p 0.02 + penalties, n-gram draft, q=3");
    }

    /**
     * A predicted output: every vocabulary token occurs in it with a follower, so the prediction proposes at every
     * verify step (its point-mass proposals must be accepted with the target's probability, no more).
     */
    @Test
    void predictionWithTemperatureOne() {
        int[] prompt = {3, 14, 15, 92, 65};
        SamplingParams p = SamplingParams.sampled(1.0, 0, 1.0, 0, 0, 3);
        int V = cfg.vocabSize;
        int[] prediction = new int[2 * V];
        java.util.SplittableRandom r = new java.util.SplittableRandom(3);
        for (int i = 0; i < prediction.length; i++) prediction[i] = i < V ? i : r.nextInt(V);
        long[] plain = thirdTokenCounts(target, prompt, p, null, 0, 6_000_000);
        long[] spec = thirdTokenCounts(target, prompt, p, PredictionDraft.source(prediction, null), 2, 7_000_000);
        assertTrue(lastOffered >= N, "the prediction proposed at every verify step: " + lastOffered + " offered");
        assertSame(plain, spec, "T=1, prediction draft, q=2");
        // half the vocabulary: the model draft (sampled proposals with their distributions) proposes after the rest
        int[] half = java.util.stream.IntStream.range(0, V).filter(t -> t % 2 == 0).toArray();
        long[] combined = thirdTokenCounts(target, prompt, p, PredictionDraft.source(half, new ModelDraftSource(drafter, "draft", 16)),
                3, 8_000_000);
        assertSame(plain, combined, "T=1, prediction + model draft, q=3");
    }
}
