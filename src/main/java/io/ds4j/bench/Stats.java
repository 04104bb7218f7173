package io.ds4j.bench;

import java.util.Arrays;

/** Small summaries of measured values shared by the benchmarks. */
public final class Stats {
    private Stats() {}

    /**
     * The median of the measured values: the middle one, or the mean of the two middle ones. NaN entries (not
     * measured) are left out; NaN where none was measured. The array is not changed.
     */
    public static double median(double[] v) {
        double[] s = Arrays.stream(v).filter(x -> !Double.isNaN(x)).toArray();
        Arrays.sort(s);
        int n = s.length;
        return n == 0 ? Double.NaN : n % 2 == 1 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    }

    /**
     * A median with a distribution-free confidence interval: the interval between the k-th smallest and the k-th
     * largest value, k the largest count with P(Binomial(n, 1/2) &lt; k) at most (1 - level) / 2 on each side, which
     * holds the true median with at least that probability whatever the values' distribution (each value lies below
     * the median with probability 1/2). NaN entries are left out.
     * @param median the median of the values (NaN where none)
     * @param lo     the interval's lower end (NaN where too few values give one at this level: fewer than 6 at 95 %)
     * @param hi     its upper end (NaN as lo)
     */
    public record Interval(double median, double lo, double hi) {}

    /**
     * The median of v and its interval at the given level (e.g. 0.95): for 40 values the 14th smallest and the 14th
     * largest; the array is not changed.
     * @throws IllegalArgumentException for a level outside (0, 1)
     */
    public static Interval medianInterval(double[] v, double level) {
        if (!(level > 0 && level < 1)) throw new IllegalArgumentException("level must be in (0, 1), got " + level);
        double[] s = Arrays.stream(v).filter(x -> !Double.isNaN(x)).toArray();
        Arrays.sort(s);
        int n = s.length, k = 0;
        double tail = (1 - level) / 2, logTerm = -n * Math.log(2), cdf = 0;  // logTerm: log P(X = i), from i = 0
        for (int i = 0; i < n / 2; i++) {
            cdf += Math.exp(logTerm);                                      // P(X <= i) = P(X < i + 1)
            if (cdf > tail) break;
            k = i + 1;
            logTerm += Math.log((double) (n - i) / (i + 1));
        }
        return k == 0 ? new Interval(median(s), Double.NaN, Double.NaN) : new Interval(median(s), s[k - 1], s[n - k]);
    }
}
