package io.ds4j.gpu;

import io.ds4j.engine.StepKind;
import org.junit.jupiter.api.Test;

import java.util.Arrays;

import static io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_TC_MIN_ROWS;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The row runs of a batched GPU step ({@link HipBackend#rowRuns}): every row in exactly one run, in order; the rows of
 * an entry on the tensor-core path ({@link HipBackend#tcEntry}: at least DS4J_TC_MIN_ROWS rows, or a prefill chunk of
 * at least {@link HipBackend#PREFILL_TC_ROWS}) in a run marked for it (tc_rows 1), shared only with such entries;
 * every other run at most the run width and marked 0 (the skinny or FFMA path, as the smaller entries take alone).
 * No GPU needed.
 */
class RowRunsTest {
    static final int T = DS4J_TC_MIN_ROWS();
    static final int P = HipBackend.PREFILL_TC_ROWS;

    static StepKind[] all(int n, StepKind k) {
        StepKind[] a = new StepKind[n];
        Arrays.fill(a, k);
        return a;
    }

    @Test
    void runsCoverTheRowsAndKeepEachEntrysKernel() {
        int[][] cases = {{1}, {T}, {T - 1}, {1, 1, 1}, {3, T + 5, 1, 1, T, T, 2}, {T - 1, T - 1, 1}, {0, 4, 0, T}, new int[64],
                {P, P - 1, 1, P + 3, T}, {1, 1, P, P, 2 * P, 1}};
        Arrays.fill(cases[7], 1);
        for (int[] counts : cases)
            for (StepKind kind : StepKind.values())
                for (int width : new int[]{T - 1, 31, 1}) check(counts, all(counts.length, kind), width);
        // decode entries first, then prefill chunks, as the scheduler plans a tick
        check(new int[]{1, 5, 1, P, T - 1, 3, P + 1}, new StepKind[]{StepKind.DECODE, StepKind.VERIFY, StepKind.DECODE,
                StepKind.PREFILL, StepKind.PREFILL, StepKind.PREFILL, StepKind.PREFILL}, T - 1);
    }

    static void check(int[] counts, StepKind[] kinds, int width) {
        String what = Arrays.toString(counts) + " " + Arrays.toString(kinds) + " width " + width;
        int[][] runs = HipBackend.rowRuns(counts, kinds, width);
        int p = 0;
        for (int[] run : runs) {
            assertEquals(p, run[0], what + ": runs are contiguous");
            assertTrue(run[1] > 0);
            assertTrue(run[2] == 0 || run[2] == 1, what + ": tc_rows 0 or 1");
            p += run[1];
        }
        assertEquals(Arrays.stream(counts).sum(), p, what + ": every row");
        // each row's run is on the side of the threshold its entry is on, and holds only rows of that side
        int r = 0;
        for (int i = 0; i < counts.length; i++) {
            boolean tc = HipBackend.tcEntry(kinds[i], counts[i]);
            assertEquals(counts[i] >= T || (kinds[i] == StepKind.PREFILL && counts[i] >= P), tc, what);
            for (int j = 0; j < counts[i]; j++, r++) {
                int[] run = runOf(runs, r);
                if (tc) assertEquals(1, run[2], what + ": row " + r + " of a tensor-core entry");
                else {
                    assertEquals(0, run[2], what + ": row " + r + " of a small entry");
                    assertTrue(run[1] <= width, what + ": row " + r + " of a small entry in a run of " + run[1]);
                }
            }
        }
        // a tensor-core run starts and ends at entry boundaries
        int[] bounds = new int[counts.length + 1];
        for (int i = 0; i < counts.length; i++) bounds[i + 1] = bounds[i] + counts[i];
        for (int[] run : runs)
            if (run[2] == 1) {
                assertTrue(Arrays.binarySearch(bounds, run[0]) >= 0, what + ": a tensor-core run starts at an entry");
                assertTrue(Arrays.binarySearch(bounds, run[0] + run[1]) >= 0, what + ": a tensor-core run ends at an entry");
            }
    }

    @Test
    void decodeRowsShareRuns() {
        int[] ones = new int[2 * T];
        Arrays.fill(ones, 1);
        int[][] runs = HipBackend.rowRuns(ones, all(ones.length, StepKind.DECODE), T - 1);
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
        StepKind[] dec = all(64, StepKind.DECODE);
        assertArrayEquals(new int[][]{{0, 64, 0}}, HipBackend.rowRuns(ones, dec));
        int[][] narrow = HipBackend.rowRuns(ones, dec, 31);
        assertArrayEquals(new int[][]{{0, 31, 0}, {31, 31, 0}, {62, 2, 0}}, narrow);
        // verify entries of 5 rows: runs fill up to the width and may split an entry
        int[] fives = new int[13];
        Arrays.fill(fives, 5);
        assertArrayEquals(new int[][]{{0, 64, 0}, {64, 1, 0}}, HipBackend.rowRuns(fives, all(13, StepKind.VERIFY)));
        assertThrows(IllegalArgumentException.class, () -> HipBackend.rowRuns(ones, dec, T));
        assertThrows(IllegalArgumentException.class, () -> HipBackend.rowRuns(ones, dec, 0));
        assertThrows(IllegalArgumentException.class, () -> HipBackend.rowRuns(ones, all(3, StepKind.DECODE)));
    }

    /**
     * Short prompts admitted in one tick beside decoding streams: the decode rows share one skinny run, the prompts'
     * chunks one tensor-core run (their weights read once together); verify entries of the same size stay skinny.
     */
    @Test
    void shortPromptsShareOneTensorCoreRun() {
        assertTrue(P >= 1 && P <= T, "prefill threshold " + P);
        if (P >= T - 1) return; // the property put prefill chunks back on the decode side: nothing to show
        int q = Math.max(P, 62);
        int[] counts = {1, 1, 1, q, q, q};
        StepKind[] kinds = {StepKind.DECODE, StepKind.DECODE, StepKind.DECODE, StepKind.PREFILL, StepKind.PREFILL, StepKind.PREFILL};
        assertArrayEquals(new int[][]{{0, 3, 0}, {3, 3 * q, 1}}, HipBackend.rowRuns(counts, kinds));
        kinds[4] = StepKind.VERIFY;
        int[][] runs = HipBackend.rowRuns(counts, kinds);
        assertEquals(1, runOf(runs, 3)[2]);
        assertEquals(0, runOf(runs, 3 + q)[2], "a verify entry of " + q + " rows stays on the skinny kernels");
        assertEquals(1, runOf(runs, 3 + 2 * q)[2]);
        // a prefill chunk below the threshold shares the decode rows' run
        if (P > 1) assertArrayEquals(new int[][]{{0, 2 + P - 1, 0}},
                HipBackend.rowRuns(new int[]{1, 1, P - 1}, new StepKind[]{StepKind.DECODE, StepKind.DECODE, StepKind.PREFILL}));
    }

    /** A prefill chunk is cut only into parts on its own side of {@link HipBackend#PREFILL_TC_ROWS}. */
    @Test
    void prefillCutsStayOnTheChunksSide() {
        for (int rows = 2; rows <= 3 * T; rows++)
            for (int first = 1; first < rows; first++) {
                boolean tc = rows >= P, exact = HipBackend.splitExact(rows, first);
                assertEquals(tc ? first >= P && rows - first >= P : true, exact, rows + " cut at " + first);
            }
        assertFalse(HipBackend.splitExact(5, 0));
        assertFalse(HipBackend.splitExact(5, 5));
    }

    static int[] runOf(int[][] runs, int row) {
        for (int[] run : runs) if (row >= run[0] && row < run[0] + run[1]) return run;
        throw new AssertionError("row " + row + " in no run");
    }
}
