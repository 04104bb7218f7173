package io.ds4j.sampling;

import org.junit.jupiter.api.Test;

import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/** The residual max(0, p − q) of speculative sampling, against a direct computation over every token id. */
class DistributionTest {
    /** A random distribution over n of V ids (sorted by probability, as the sampler builds them). */
    static Distribution random(SplittableRandom r, int V, int n) {
        int[] ids = r.ints(0, V).distinct().limit(n).toArray();
        double[] w = new double[n];
        double sum = 0;
        for (int i = 0; i < n; i++) sum += w[i] = r.nextDouble();
        Integer[] order = new Integer[n];
        for (int i = 0; i < n; i++) order[i] = i;
        java.util.Arrays.sort(order, (a, b) -> Double.compare(w[b], w[a]));
        int[] sid = new int[n];
        float[] sp = new float[n];
        for (int i = 0; i < n; i++) {
            sid[i] = ids[order[i]];
            sp[i] = (float) (w[order[i]] / sum);
        }
        return new Distribution(sid, sp);
    }

    @Test
    void residualIsTheNormalisedPositivePartOfTheDifference() {
        SplittableRandom r = new SplittableRandom(3);
        int V = 129_280;
        for (int[] sizes : new int[][]{{V, V}, {V, 50}, {40, V}, {1000, 1000}, {5, 1}}) {
            Distribution p = random(r, V, sizes[0]), q = random(r, V, sizes[1]);
            double[] pd = new double[V], qd = new double[V];
            for (int i = 0; i < p.size(); i++) pd[p.id(i)] = p.prob(i);
            for (int i = 0; i < q.size(); i++) qd[q.id(i)] = q.prob(i);
            double sum = 0;
            for (int t = 0; t < V; t++) sum += Math.max(0, (float) (pd[t] - qd[t]));
            Distribution res = p.residual(q);
            double total = 0;
            for (int i = 0; i < res.size(); i++) {
                int t = res.id(i);
                double want = Math.max(0, (float) (pd[t] - qd[t])) / sum;
                assertEquals(want, res.prob(i), 1e-6, "token " + t + " sizes " + sizes[0] + "/" + sizes[1]);
                assertTrue(res.prob(i) > 0);
                total += res.prob(i);
            }
            assertEquals(1.0, total, 1e-4);
            int positive = 0;
            for (int t = 0; t < V; t++) if (pd[t] - qd[t] > 0) positive++;
            assertEquals(positive, res.size(), "every token with p > q is a candidate, no other");
        }
    }
}
