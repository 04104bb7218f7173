package io.ds4j.sampling;

import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The sampler's fast paths give the general path's results bit for bit: the vector argmax against the sequential scan
 * (ties, NaN, −0/+0, −∞), and the in-place, thresholded top-p draw of an unmasked row against the same row through
 * the copying path (an allow-everything mask takes it), over peaked and flat rows, several temperatures, top-p and
 * min-p settings, with the tokenizer's limit below V.
 */
class SamplerFastPathTest {
    /** The sequential scan the vector argmax must equal. */
    private static int scan(float[] z, int off, int n) {
        int best = 0;
        for (int i = 1; i < n; i++) if (z[off + i] > z[off + best]) best = i;
        return best;
    }

    @Test
    void vectorArgmaxEqualsTheScan() {
        SplittableRandom r = new SplittableRandom(1);
        for (int trial = 0; trial < 400; trial++) {
            int n = 1 + r.nextInt(3000), off = r.nextInt(5);
            float[] z = new float[off + n + 3];
            int kind = trial % 8;
            for (int i = 0; i < z.length; i++) z[i] = kind == 0 ? r.nextInt(4) : (float) r.nextGaussian();
            if (kind == 1) z[off + r.nextInt(n)] = Float.NaN;
            if (kind == 2) z[off] = Float.NaN;
            if (kind == 3) Arrays.fill(z, Float.NEGATIVE_INFINITY);
            if (kind == 4) {
                Arrays.fill(z, 0f);
                z[off + r.nextInt(n)] = -0f;
            }
            if (kind == 5) z[off + n - 1] = 99f; // the maximum in the scalar tail
            if (kind == 6) z[off + n] = 1e9f; // past the row: not seen
            assertEquals(scan(z, off, n), Sampler.argmax(z, off, n), "trial " + trial + " kind " + kind + " n " + n);
        }
    }

    @Test
    void unmaskedDrawEqualsTheGeneralPath() {
        int V = 20_000, limit = 19_950;
        SplittableRandom r = new SplittableRandom(2);
        long[] all = new long[(V + 63) / 64];
        Arrays.fill(all, -1L);
        double[][] settings = {{0.8, 0.95, 0}, {1.0, 1.0, 0}, {0.7, 0.9, 0.05}, {1.3, 0.99, 0}, {0.5, 1.0, 0.1}, {1.0, 0.5, 0}};
        for (int trial = 0; trial < 24; trial++) {
            float[] row = new float[V + 7];
            boolean flat = trial % 3 == 0;
            for (int i = 0; i < row.length; i++) row[i] = (float) (r.nextGaussian() * (flat ? 0.3 : 2.0));
            if (!flat) for (int k = 0; k < 10; k++) row[7 + r.nextInt(limit)] = 15 + r.nextFloat() * 5;
            if (trial % 4 == 1) row[7 + limit + 3] = 500f; // a huge logit past the tokenizer's ids: never produced
            double[] s = settings[trial % settings.length];
            SamplingParams p = new SamplingParams(s[0], 0, s[1], s[2], 5L, 0, 0, 1, Map.of(), 10, List.of(), false, 0, false);
            Sampler a = new Sampler(p, V, new int[0], limit), b = new Sampler(p, V, new int[0], limit);
            Distribution fast = a.distribution(row, 7, null), general = b.distribution(row, 7, all);
            assertArrayEquals(general.ids, fast.ids, "trial " + trial);
            assertArrayEquals(general.probs, fast.probs, "trial " + trial);
            for (int id : fast.ids) assertTrue(id < limit);
        }
    }
}
