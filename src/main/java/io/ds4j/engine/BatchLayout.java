package io.ds4j.engine;

import java.util.List;

/**
 * Where the entries of a batched step ({@link Backend#step}) lie in the step's row-major activations, decided once for
 * every backend: entry i's S_i new tokens are rows first[i] .. first[i] + count[i] − 1 (entries in batch order, rows
 * concatenated; R rows in all), at positions start[i] .. (its sequence's length before the step).
 */
public final class BatchLayout {
    /** First row of each entry [E]. */
    public final int[] first;
    /** Rows (new tokens) of each entry [E]. */
    public final int[] count;
    /** Position of each entry's first new token: its sequence's length before the step [E]. */
    public final int[] start;
    /** Each entry's requested logit rows, indices into its own rows [E][*]. */
    public final int[][] logitRows;
    /** Every new token id, entry after entry [R]. */
    public final int[] toks;
    /** R: rows in all. */
    public final int rows;

    public BatchLayout(List<BatchEntry> batch) {
        int E = batch.size();
        first = new int[E];
        count = new int[E];
        start = new int[E];
        logitRows = new int[E][];
        int r = 0;
        for (int i = 0; i < E; i++) {
            BatchEntry e = batch.get(i);
            first[i] = r;
            count[i] = e.count();
            start[i] = e.seq().length();
            logitRows[i] = e.logitRows();
            r += e.count();
        }
        rows = r;
        toks = new int[r];
        for (int i = 0; i < E; i++) System.arraycopy(batch.get(i).tokens(), 0, toks, first[i], count[i]);
    }

    /** The requested logit rows of every entry as rows of the step, in batch order [Σ logitRows[i].length]. */
    public int[] headRows() {
        return headRows(first, logitRows);
    }

    /** {@link #headRows()} of a layout given by its first rows and logit rows. */
    public static int[] headRows(int[] first, int[][] logitRows) {
        int n = 0;
        for (int[] rs : logitRows) n += rs.length;
        int[] rows = new int[n];
        n = 0;
        for (int i = 0; i < logitRows.length; i++) for (int r : logitRows[i]) rows[n++] = first[i] + r;
        return rows;
    }
}
