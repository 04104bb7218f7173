package io.ds4j.kernels;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;

import static org.junit.jupiter.api.Assertions.*;

class ParallelTest {

    private static void assertCoversOnce(int n, int grain) {
        AtomicIntegerArray hits = new AtomicIntegerArray(Math.max(n, 1));
        AtomicInteger calls = new AtomicInteger();
        Parallel.forRange(n, grain, (a, b) -> {
            assertTrue(0 <= a && a < b && b <= n, a + ".." + b);
            if (b < n) assertTrue(b - a >= Math.max(1, grain), "chunk " + a + ".." + b + " below grain " + grain);
            calls.incrementAndGet();
            for (int i = a; i < b; i++) hits.incrementAndGet(i);
        });
        for (int i = 0; i < n; i++) assertEquals(1, hits.get(i), "index " + i + " of " + n + " grain " + grain);
        if (n <= 0) assertEquals(0, calls.get());
    }

    @Test
    void coversEveryIndexOnce() {
        for (int n : new int[]{0, -3, 1, 2, 7, 64, 1000, 100_003})
            for (int grain : new int[]{0, 1, 3, 16, 5000}) assertCoversOnce(n, grain);
    }

    /** forEachChunk calls the body once per index, with single-index ranges, also when nested (inline). */
    @Test
    void eachChunkOnce() {
        for (int n : new int[]{0, -1, 1, 2, 3, 17, 1000}) {
            AtomicIntegerArray hits = new AtomicIntegerArray(Math.max(n, 1));
            AtomicInteger inner = new AtomicInteger();
            Parallel.forEachChunk(n, (a, b) -> {
                assertEquals(a + 1, b, "range " + a + ".." + b);
                hits.incrementAndGet(a);
                Parallel.forEachChunk(3, (c, d) -> {
                    assertEquals(c + 1, d);
                    inner.incrementAndGet();
                });
            });
            for (int i = 0; i < n; i++) assertEquals(1, hits.get(i), "chunk " + i + " of " + n);
            assertEquals(3 * Math.max(n, 0), inner.get());
        }
        IllegalStateException e = assertThrows(IllegalStateException.class, () ->
                Parallel.forEachChunk(50, (a, b) -> {
                    if (a == 31) throw new IllegalStateException("chunk 31");
                }));
        assertEquals("chunk 31", e.getMessage());
    }

    @Test
    void nestedCallsRunInline() {
        AtomicLong sum = new AtomicLong();
        Parallel.forRange(40, 1, (a, b) -> {
            for (int i = a; i < b; i++) {
                int base = i * 100;
                Parallel.forRange(100, 1, (c, d) -> {
                    long s = 0;
                    for (int j = c; j < d; j++) s += base + j;
                    sum.addAndGet(s);
                });
            }
        });
        long n = 4000;
        assertEquals(n * (n - 1) / 2, sum.get());
    }

    @Test
    void concurrentCallers() throws Exception {
        int callers = 4, rounds = 300;
        List<Thread> ts = new ArrayList<>();
        List<Throwable> errors = new java.util.concurrent.CopyOnWriteArrayList<>();
        for (int t = 0; t < callers; t++) {
            int id = t;
            Thread th = new Thread(() -> {
                try {
                    for (int r = 0; r < rounds; r++) {
                        int n = 50 + (r * 7 + id * 13) % 500;
                        long[] part = new long[n];
                        Parallel.forRange(n, 1 + r % 5, (a, b) -> {
                            for (int i = a; i < b; i++) part[i] = i + (long) id * n;
                        });
                        long s = 0;
                        for (long v : part) s += v;
                        long expect = (long) n * (n - 1) / 2 + (long) id * n * n;
                        if (s != expect) throw new AssertionError("caller " + id + " round " + r + ": " + s + " != " + expect);
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            });
            ts.add(th);
            th.start();
        }
        for (Thread th : ts) th.join(20_000);
        for (Thread th : ts) assertFalse(th.isAlive(), "caller hung");
        if (!errors.isEmpty()) fail(errors.get(0));
    }

    @Test
    void exceptionPropagatesAndPoolSurvives() {
        IllegalStateException e = assertThrows(IllegalStateException.class, () ->
                Parallel.forRange(1000, 1, (a, b) -> {
                    if (a <= 500 && 500 < b) throw new IllegalStateException("boom");
                }));
        assertEquals("boom", e.getMessage());
        assertCoversOnce(10_000, 1);
    }

    @Test
    void gemmFromSeveralThreads() throws Exception {
        var w = GemmTest.random(io.ds4j.model.WeightMatrix.Format.FP8_E4M3_B128, 260, 512, 77);
        float[] x = GemmTest.randomX(3 * 512, 78);
        float[] expect = new float[3 * 260];
        Gemm.matmul(w, x, 3, expect);
        GemmTest.check(w, x, 0, 3, expect, 0);
        List<Thread> ts = new ArrayList<>();
        List<Throwable> errors = new java.util.concurrent.CopyOnWriteArrayList<>();
        for (int t = 0; t < 3; t++) {
            Thread th = new Thread(() -> {
                try {
                    for (int r = 0; r < 4; r++) { // few rounds: the vector code is mostly still interpreted here
                        float[] y = new float[3 * 260];
                        Gemm.matmul(w, x, 3, y);
                        assertArrayEquals(expect, y);
                        float[] y1 = new float[260];
                        Gemm.matvec(w, x, 512, y1, 0);
                        assertArrayEquals(java.util.Arrays.copyOfRange(expect, 260, 520), y1);
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            });
            ts.add(th);
            th.start();
        }
        for (Thread th : ts) th.join(20_000);
        if (!errors.isEmpty()) fail(errors.get(0));
    }

    @Test
    void bandwidthProbeRuns() {
        double gbs = MemBandwidth.measureReadGBs(8L << 20, 1); // mostly interpreted here: only sanity
        assertTrue(gbs > 0 && gbs < 10_000, "GB/s " + gbs);
    }
}
