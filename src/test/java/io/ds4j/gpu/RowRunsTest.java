package io.ds4j.gpu;

import org.junit.jupiter.api.Test;

import java.util.Arrays;

import static io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_TC_MIN_ROWS;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The row runs of a batched GPU step ({@link HipBackend#rowRuns}): every row in exactly one run, in order; an entry
 * of at least DS4J_TC_MIN_ROWS rows alone in its run (the tensor-core path, as when stepped alone); every other run
 * at most the run width (the skinny or FFMA path, as the smaller entries take alone). No GPU needed.
 */
class RowRunsTest {
    static final int T = DS4J_TC_MIN_ROWS();

    @Test
    void runsCoverTheRowsAndKeepEachEntrysKernel() {
        int[][] cases = {{1}, {T}, {T - 1}, {1, 1, 1}, {3, T + 5, 1, 1, T, T, 2}, {T - 1, T - 1, 1}, {0, 4, 0, T}, new int[64]};
        Arrays.fill(cases[cases.length - 1], 1);
        for (int[] counts : cases)
            for (int width : new int[]{T - 1, 31, 1}) check(counts, width);
    }

    static void check(int[] counts, int width) {
        int[][] runs = HipBackend.rowRuns(counts, width);
        int p = 0;
        for (int[] run : runs) {
            assertEquals(p, run[0], Arrays.toString(counts) + ": runs are contiguous");
            assertTrue(run[1] > 0);
            p += run[1];
        }
        assertEquals(Arrays.stream(counts).sum(), p, Arrays.toString(counts) + ": every row");
        // each row's run is on the side of the threshold its entry is on
        int r = 0;
        for (int cnt : counts) {
            for (int i = 0; i < cnt; i++, r++) {
                int[] run = runOf(runs, r);
                if (cnt >= T) assertArrayEquals(new int[]{r - i, cnt}, run, Arrays.toString(counts) + ": a large entry is its own run");
                else assertTrue(run[1] <= width, Arrays.toString(counts) + ": row " + r + " of a small entry in a run of " + run[1]);
            }
        }
    }

    @Test
    void decodeRowsShareRuns() {
        int[] ones = new int[2 * T];
        Arrays.fill(ones, 1);
        int[][] runs = HipBackend.rowRuns(ones, T - 1);
        assertEquals(3, runs.length, "2T decode rows in runs of T - 1");
        assertEquals(T - 1, runs[0][1]);
        assertEquals(T - 1, HipBackend.RUN_ROWS, "the default run width");
    }

    /** 64 decode streams are one run (one skinny launch per product, each weight read once); narrower runs on request. */
    @Test
    void sixtyFourDecodeRowsAreOneRun() {
        assertTrue(T > 64, "DS4J_TC_MIN_ROWS " + T + " leaves a 64-row step below the tensor-core threshold");
        int[] ones = new int[64];
        Arrays.fill(ones, 1);
        assertArrayEquals(new int[][]{{0, 64}}, HipBackend.rowRuns(ones));
        int[][] narrow = HipBackend.rowRuns(ones, 31);
        assertArrayEquals(new int[][]{{0, 31}, {31, 31}, {62, 2}}, narrow);
        // verify entries of 5 rows: runs fill up to the width and may split an entry
        int[] fives = new int[13];
        Arrays.fill(fives, 5);
        assertArrayEquals(new int[][]{{0, 64}, {64, 1}}, HipBackend.rowRuns(fives));
        assertThrows(IllegalArgumentException.class, () -> HipBackend.rowRuns(ones, T));
        assertThrows(IllegalArgumentException.class, () -> HipBackend.rowRuns(ones, 0));
    }

    static int[] runOf(int[][] runs, int row) {
        for (int[] run : runs) if (row >= run[0] && row < run[0] + run[1]) return run;
        throw new AssertionError("row " + row + " in no run");
    }
}
