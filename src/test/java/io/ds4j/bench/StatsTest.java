package io.ds4j.bench;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.*;

/** The benchmarks' summaries: the median and its distribution-free interval. */
class StatsTest {
    /** 1 .. n in a shuffled order, with NaN entries that are left out. */
    static double[] values(int n) {
        double[] v = new double[n + 2];
        for (int i = 0; i < n; i++) v[i] = (i * 11L % n) + 1;  // a permutation of 1 .. n (11 is prime to the n used)
        v[n] = Double.NaN;
        v[n + 1] = Double.NaN;
        return v;
    }

    /**
     * The interval's ends are the k-th smallest and the k-th largest value, k from the binomial tables of the sign test
     * at 95 %: 1 at 6 and 7 values, 2 at 10, 6 at 20, 14 at 40, 40 at 100; none under 6.
     */
    @Test
    void theIntervalIsTheSignTestsOrderStatistics() {
        int[][] nk = {{6, 1}, {7, 1}, {10, 2}, {20, 6}, {40, 14}, {100, 40}};
        for (int[] c : nk) {
            int n = c[0], k = c[1];
            Stats.Interval i = Stats.medianInterval(values(n), 0.95);
            assertEquals((n + 1) / 2.0, i.median(), "n " + n);
            assertEquals(k, i.lo(), "n " + n);
            assertEquals(n + 1 - k, i.hi(), "n " + n);
        }
        Stats.Interval five = Stats.medianInterval(values(5), 0.95);
        assertEquals(3.0, five.median());
        assertTrue(Double.isNaN(five.lo()) && Double.isNaN(five.hi()), five.toString());
        assertTrue(Double.isNaN(Stats.medianInterval(new double[]{Double.NaN}, 0.95).median()));
        // a looser level narrows it: at 50 %, 40 values give the 18th and 23rd
        Stats.Interval half = Stats.medianInterval(values(40), 0.5);
        assertEquals(18.0, half.lo());
        assertEquals(23.0, half.hi());
        assertThrows(IllegalArgumentException.class, () -> Stats.medianInterval(values(10), 1.0));
    }
}
