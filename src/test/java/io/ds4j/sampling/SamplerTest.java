package io.ds4j.sampling;

import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

class SamplerTest {
    static final int V = 10;

    static float[] logits(double... v) {
        float[] f = new float[v.length];
        for (int i = 0; i < v.length; i++) f[i] = (float) v[i];
        return f;
    }

    static SamplingParams params(double t, int k, double p, double minP) {
        return SamplingParams.sampled(t, k, p, minP, 1, 10);
    }

    @Test
    void greedyTakesTheArgmaxAndLowestIdOnTies() {
        Sampler s = new Sampler(SamplingParams.greedy(5), V, new int[0]);
        assertEquals(3, s.sample(logits(0, 1, 2, 5, 5, 1, 0, 0, 0, 0), 0));
    }

    /**
     * The masked argmax (what a backend computes for a constrained greedy row) is the greedy token of the sampler's
     * distribution under the same mask, below a token limit, on rows with ties, NaN (at index 0 too), infinities and
     * masks that allow few ids, none of the finite ones, or miss words.
     */
    @Test
    void maskedArgmaxIsTheMaskedGreedyToken() {
        java.util.SplittableRandom r = new java.util.SplittableRandom(5);
        int vocab = 300;
        for (int trial = 0; trial < 3000; trial++) {
            int limit = trial % 3 == 0 ? vocab : 1 + r.nextInt(vocab);
            float[] z = new float[vocab + 7];
            for (int i = 0; i < z.length; i++) {
                int k = r.nextInt(20);
                z[i] = k == 0 ? Float.NaN : k == 1 ? Float.NEGATIVE_INFINITY : k == 2 ? Float.POSITIVE_INFINITY : r.nextInt(6);
            }
            long[] allow = new long[trial % 7 == 0 ? 2 : (vocab + 63) / 64];
            double density = trial % 5 == 0 ? 0.01 : r.nextDouble();
            for (int i = 0; i < allow.length * 64; i++) if (r.nextDouble() < density) allow[i >> 6] |= 1L << i;
            if (Long.bitCount(allow[0]) + Long.bitCount(allow[allow.length - 1]) == 0) allow[0] |= 1L << r.nextInt(64);
            int off = 7;
            float[] row = java.util.Arrays.copyOfRange(z, 0, vocab + off);
            System.arraycopy(z, 0, row, off, vocab);
            Sampler s = new Sampler(SamplingParams.greedy(5), vocab, new int[0], limit);
            assertEquals(s.distribution(row, off, allow).top(), Sampler.argmax(row, off, limit, allow),
                    "trial " + trial + " limit " + limit);
        }
    }

    @Test
    void topKKeepsExactlyKCandidates() {
        Sampler s = new Sampler(params(1, 3, 1, 0), V, new int[0]);
        Distribution d = s.distribution(logits(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), 0);
        assertEquals(3, d.size());
        assertEquals(9, d.top());
        assertEquals(0, d.probOf(6));
        double sum = 0;
        for (int i = 0; i < d.size(); i++) sum += d.prob(i);
        assertEquals(1, sum, 1e-6);
    }

    @Test
    void topPKeepsTheSmallestNucleus() {
        // probabilities 0.5, 0.25, 0.125, ... (log2 spacing)
        double l2 = Math.log(2);
        Sampler s = new Sampler(params(1, 0, 0.7, 0), V, new int[0]);
        Distribution d = s.distribution(logits(9 * l2, 8 * l2, 7 * l2, 6 * l2, 5 * l2, 4 * l2, 3 * l2, 2 * l2, l2, 0), 0);
        assertEquals(2, d.size(), "0.5 + 0.25 >= 0.7");
        assertEquals(2.0 / 3, d.probOf(0), 1e-6);
    }

    /**
     * The nucleus over a full vocabulary row is the smallest set of the most likely tokens (in descending order, ties
     * to the lower id) whose mass reaches top_p, whatever the row's shape: peaked (the cut within the tokens above 2^-10
     * of the top weight), a long tail above 2^-24, flat (over all candidates), and with top-k candidates. Checked against
     * a sort of every token's softmax probability in double.
     */
    @Test
    void theNucleusOfAFullRowIsTheSmallestSetWhateverItsShape() {
        int n = 129_280;
        java.util.SplittableRandom r = new java.util.SplittableRandom(3);
        for (int shape = 0; shape < 4; shape++) {
            float[] lg = new float[n];
            for (int i = 0; i < n; i++) lg[i] = (float) (r.nextGaussian() * (shape == 2 ? 0.01 : 2.5));
            if (shape == 0) for (int i = 0; i < 20; i++) lg[r.nextInt(n)] += 14;
            if (shape == 1) for (int i = 0; i < 2000; i++) lg[r.nextInt(n)] += 6;
            for (double topP : new double[]{0.5, 0.9, 0.95, 0.999}) {
                int k = shape == 3 ? 5000 : 0;
                Distribution d = new Sampler(SamplingParams.sampled(0.8, k, topP, 0, 1, 10), n, new int[0]).distribution(lg, 0);
                // the reference: every candidate's probability in double, sorted
                Integer[] ids = new Integer[n];
                for (int i = 0; i < n; i++) ids[i] = i;
                java.util.Arrays.sort(ids, (a, b) -> lg[a] != lg[b] ? Float.compare(lg[b], lg[a]) : Integer.compare(a, b));
                int cands = k > 0 ? k : n;
                double mx = lg[ids[0]], sum = 0;
                double[] w = new double[cands];
                for (int i = 0; i < cands; i++) sum += w[i] = Math.exp((lg[ids[i]] - mx) / 0.8);
                double mass = 0;
                int keep = 0;
                while (keep < cands && mass < topP) mass += w[keep++] / sum;
                String what = "shape " + shape + ", top_p " + topP;
                // the float exponentials may move a cut that falls within rounding of top_p by a token
                assertTrue(Math.abs(d.size() - keep) <= 1, what + ": " + d.size() + " kept, " + keep + " expected");
                // rank by rank the same token, or one whose weight is the same to F32 rounding (a near tie, ordered by
                // its F32 weight and then its id), with the reference's probability
                double[] byId = new double[n];
                for (int i = 0; i < cands; i++) byId[ids[i]] = w[i];
                for (int i = 0; i < Math.min(d.size(), keep); i++) {
                    double got = byId[d.id(i)];
                    assertTrue(d.id(i) == ids[i] || Math.abs(got - w[i]) <= 1e-6 * w[i], what + ", rank " + i + ": token "
                            + d.id(i) + " of weight " + got + " where " + ids[i] + " of " + w[i]);
                    assertEquals(w[i] / sum / mass, d.prob(i), 1e-5 * (w[i] / sum / mass) + 1e-9, what + ", rank " + i);
                }
            }
        }
    }

    @Test
    void minPDropsUnlikelyTokens() {
        Sampler s = new Sampler(params(1, 0, 1, 0.2), V, new int[0]); // keeps p >= 0.2 * p_max
        double l = Math.log(0.25);
        Distribution d = s.distribution(logits(0, l, l, -10, -10, -10, -10, -10, -10, -10), 0);
        assertEquals(0, d.probOf(3));
        assertEquals(3, d.size());
        assertEquals(0, d.top());
    }

    @Test
    void temperatureSharpens() {
        Sampler hot = new Sampler(params(2, 0, 1, 0), V, new int[0]);
        Sampler cold = new Sampler(params(0.5, 0, 1, 0), V, new int[0]);
        float[] z = logits(1, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        assertTrue(cold.distribution(z, 0).probOf(0) > hot.distribution(z, 0).probOf(0));
    }

    @Test
    void extremeButValidSettingsGiveAProperDistribution() {
        // 1 / 1e-40 overflows F32 (the maximum's weight was 0 x inf = NaN); 1e-300 rounds to an F32 zero (inf logits)
        float[] z = logits(1, 3, 2, 0, 0, 0, 0, 0, 0, 0);
        Distribution cold = new Sampler(params(1e-40, 0, 1, 0), V, new int[0]).distribution(z, 0);
        assertEquals(1, cold.size(), "a vanishing temperature keeps the argmax alone");
        assertEquals(1, cold.top());
        assertEquals(1.0, cold.probOf(1));
        Distribution rep = new Sampler(params(1, 0, 1, 0).withPenalties(0, 0, 1e-300), V, new int[]{2}).distribution(z, 0);
        assertEquals(2, rep.top(), "the penalised positive logit becomes the largest finite one");
        assertEquals(1.0, rep.probOf(2));
        // a seen token that a constraint masks keeps its -inf (-inf x the F32 zero the penalty rounds to is NaN)
        long[] allow = {~(1L << 2)};
        Distribution masked = new Sampler(params(1, 0, 1, 0).withPenalties(0, 0, 1e-300), V, new int[]{2}).distribution(z, 0, allow);
        assertEquals(1, masked.top(), "the masked token is never drawn; the others keep their weights");
        assertEquals(0.0, masked.probOf(2));
    }

    @Test
    void penaltiesAndBiasChangeTheArgmax() {
        float[] z = logits(3, 2.5, 0, 0, 0, 0, 0, 0, 0, 0);
        Sampler pres = new Sampler(SamplingParams.greedy(5).withPenalties(1.0, 0, 1), V, new int[0]);
        pres.push(0);
        assertEquals(1, pres.sample(z, 0), "presence penalty pushes token 0 below token 1");
        pres.pop(0);
        assertEquals(0, pres.sample(z, 0), "pop undoes the history");
        Sampler rep = new Sampler(SamplingParams.greedy(5).withPenalties(0, 0, 1.5), V, new int[]{0});
        assertEquals(1, rep.sample(z, 0), "repetition penalty counts prompt tokens: 3/1.5 < 2.5");
        Sampler freq = new Sampler(SamplingParams.greedy(5).withPenalties(0, 0.3, 1), V, new int[0]);
        freq.push(0);
        assertEquals(0, freq.sample(z, 0), "one occurrence: 3 - 0.3 > 2.5");
        freq.push(0);
        assertEquals(1, freq.sample(z, 0), "two occurrences: 3 - 0.6 < 2.5");
        Sampler bias = new Sampler(SamplingParams.greedy(5).withLogitBias(Map.of(7, 10f)), V, new int[0]);
        assertEquals(7, bias.sample(z, 0));
    }

    @Test
    void tokensPastTheTokenizerAreNeverDrawn() {
        Sampler s = new Sampler(params(1, 0, 1, 0), V, new int[0], 5);
        float[] z = logits(0, 0, 0, 0, 0, 9, 9, 9, 9, 9);
        for (int i = 0; i < 200; i++) assertTrue(s.sample(z, 0) < 5);
    }

    @Test
    void sameSeedSameDraws() {
        float[] z = logits(1, 1, 1, 1, 1, 1, 1, 1, 1, 1);
        Sampler a = new Sampler(params(1, 0, 1, 0), V, new int[0]), b = new Sampler(params(1, 0, 1, 0), V, new int[0]);
        for (int i = 0; i < 50; i++) assertEquals(a.sample(z, 0), b.sample(z, 0));
    }

    @Test
    void invalidParametersNameTheParameterAndRange() {
        assertMsg(() -> params(3, 0, 1, 0).validate(V), "temperature: must be in [0, 2], got 3");
        assertMsg(() -> params(1, -1, 1, 0).validate(V), "top_k: must be in [0, 10]");
        assertMsg(() -> params(1, 0, 0, 0).validate(V), "top_p: must be in (0, 1], got 0");
        assertMsg(() -> params(1, 0, 1, 2).validate(V), "min_p: must be in [0, 1], got 2");
        assertMsg(() -> SamplingParams.greedy(-1).validate(V), "max_tokens: must be >= 0, got -1");
        assertMsg(() -> SamplingParams.greedy(1).withPenalties(3, 0, 1).validate(V), "presence_penalty: must be in [-2, 2], got 3");
        assertMsg(() -> SamplingParams.greedy(1).withLogitBias(Map.of(99, 1f)).validate(V), "logit_bias: token id 99");
        assertMsg(() -> SamplingParams.greedy(1).withStop(List.of("")).validate(V), "stop strings must not be empty");
        assertMsg(() -> SamplingParams.greedy(1).withLogprobs(true, 21).validate(V), "top_logprobs: must be in [0, 20], got 21");
        // a caller that knows how a value was written has it shown so (a request's 1e-400 is 0 as a double)
        assertMsg(() -> params(1, 0, 0, 0).validate(V, name -> name.equals("top_p") ? "1e-400" : null), "top_p: must be in (0, 1], got 1e-400");
        assertMsg(() -> SamplingParams.greedy(1).withLogitBias(Map.of(3, 150f)).validate(V, name -> name.equals("logit_bias[3]") ? "1.5E2" : null),
                "logit_bias: bias 1.5E2 for token 3 is outside [-100, 100]");
        assertMsg(() -> SamplingParams.greedy(1).withPenalties(0, 0, -0.0).validate(V), "repetition_penalty: must be in (0, 10], got -0");
        // a range is decided on the number as written too: past the bound by less than a double (or a float) tells
        assertMsg(() -> params(2, 0, 1, 0).validate(V, name -> name.equals("temperature") ? "2.0000000000000000001" : null),
                "temperature: must be in [0, 2], got 2.0000000000000000001");
        assertMsg(() -> SamplingParams.greedy(1).withLogitBias(Map.of(3, 100f)).validate(V, name -> name.equals("logit_bias[3]") ? "100.000001" : null),
                "logit_bias: bias 100.000001 for token 3 is outside [-100, 100]");
        params(2, 0, 1, 0).validate(V, name -> name.equals("temperature") ? "2.000" : null);
    }

    @Test
    void numbersInMessagesAreWrittenPlainly() {
        assertEquals("5", SamplingParams.plain(5.0));
        assertEquals("-3", SamplingParams.plain(-3.0));
        assertEquals("0", SamplingParams.plain(0.0));
        assertEquals("-0", SamplingParams.plain(-0.0));
        assertEquals("0.5", SamplingParams.plain(0.5));
        assertEquals("10000000000", SamplingParams.plain(1e10));
        assertEquals("9223372036854775808", SamplingParams.plain(0x1p63));
        assertEquals("1e30", SamplingParams.plain(1e30));
        assertEquals("1.5e-7", SamplingParams.plain(1.5e-7));
        assertEquals("a number beyond 1.8e308 (the largest double)", SamplingParams.plain(Double.POSITIVE_INFINITY));
        assertMsg(() -> SamplingParams.greedy(1).withPenalties(0, 0, 1e30).validate(V), "repetition_penalty: must be in (0, 10], got 1e30");
        assertMsg(() -> SamplingParams.greedy(1).withLogitBias(Map.of(1, 1e9f)).validate(V), "logit_bias: bias 1000000000 for token 1");
    }

    static void assertMsg(Runnable r, String part) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, r::run);
        assertTrue(e.getMessage().contains(part), e.getMessage());
    }

    @Test
    void logprobsAreNormalisedAndOrdered() {
        Sampler s = new Sampler(SamplingParams.greedy(5).withLogprobs(true, 3), V, new int[0]);
        float[] z = logits(0, 1, 2, 3, 0, 0, 0, 0, 0, 0);
        Sampler.TokenLogprobs lp = s.logprobs(z, 0, 3, 3);
        double sum = 0;
        for (float v : z) sum += Math.exp(v);
        assertEquals(3 - Math.log(sum), lp.logprob(), 1e-5);
        assertArrayEquals(new int[]{3, 2, 1}, lp.topIds());
    }
}
