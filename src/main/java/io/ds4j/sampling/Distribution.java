package io.ds4j.sampling;

import java.util.random.RandomGenerator;

/**
 * The next-token distribution a {@link Sampler} draws from: a sparse set of candidate ids with probabilities that
 * sum to 1 (after temperature, top-k, top-p and min-p), or a single certain token for greedy decoding.
 */
public final class Distribution {
    /** Candidate token ids, most likely first. */
    final int[] ids;
    /** Their probabilities, same order, summing to 1. */
    final float[] probs;

    Distribution(int[] ids, float[] probs) {
        this.ids = ids;
        this.probs = probs;
    }

    /** A distribution that puts all mass on one token (greedy decoding, or a deterministic draft). */
    public static Distribution certain(int token) {
        return new Distribution(new int[]{token}, new float[]{1f});
    }

    /** Number of candidates with non-zero probability. */
    public int size() {
        return ids.length;
    }

    public int id(int i) {
        return ids[i];
    }

    public float prob(int i) {
        return probs[i];
    }

    /** The most likely token. */
    public int top() {
        return ids[0];
    }

    /** Probability of a token (0 when it was filtered out). */
    public double probOf(int token) {
        for (int i = 0; i < ids.length; i++) if (ids[i] == token) return probs[i];
        return 0;
    }

    /** Draws a token by inverse CDF with one uniform draw. */
    public int sample(RandomGenerator rng) {
        if (ids.length == 1) return ids[0];
        double u = rng.nextDouble(), acc = 0;
        for (int i = 0; i < ids.length; i++) {
            acc += probs[i];
            if (u < acc) return ids[i];
        }
        return ids[ids.length - 1];
    }

    /**
     * The normalised residual max(0, p − q) used on rejection in speculative sampling (Leviathan et al. 2023,
     * Chen et al. 2023), where p is this distribution and q the draft's.
     * @return the residual, or this distribution when p ≤ q everywhere (only possible through rounding)
     */
    public Distribution residual(Distribution q) {
        // q's probabilities by token id, so that each of p's candidates is looked up once (a scan of q per candidate
        // would cost |p|·|q|: seconds for two full-vocabulary distributions)
        int maxId = 0;
        for (int id : q.ids) maxId = Math.max(maxId, id);
        float[] qp = new float[maxId + 1];
        for (int i = 0; i < q.ids.length; i++) qp[q.ids[i]] = q.probs[i];
        int n = 0;
        int[] ids2 = new int[ids.length];
        float[] pr = new float[ids.length];
        double sum = 0;
        for (int i = 0; i < ids.length; i++) {
            double r = probs[i] - (ids[i] <= maxId ? qp[ids[i]] : 0f);
            if (r > 0) {
                ids2[n] = ids[i];
                pr[n++] = (float) r;
                sum += r;
            }
        }
        if (n == 0 || sum <= 0) return this;
        for (int i = 0; i < n; i++) pr[i] = (float) (pr[i] / sum);
        return new Distribution(java.util.Arrays.copyOf(ids2, n), java.util.Arrays.copyOf(pr, n));
    }
}
