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
}
