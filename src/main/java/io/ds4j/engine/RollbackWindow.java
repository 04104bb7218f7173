package io.ds4j.engine;

/**
 * A sequence's length and how far back it can still be rolled back: the bookkeeping every backend's sequence shares.
 * The rings of {@link CacheLayout} hold the last k_max tokens beyond what the model needs, so after each forward the
 * oldest restorable length moves up to length − k_max and never down again.
 */
public final class RollbackWindow {
    /**
     * The rollback window every sequence of the engine gets unless told otherwise (tokens): the widest verify step
     * (the pending token plus up to 8 drafts) leaves up to 8 rejected rows to remove, and 16 leaves room to spare.
     */
    public static final int DEFAULT = 16;

    private final int max;
    private int length;
    private int floor;

    /** @param max k_max, the rollback window in tokens (≥ 0) */
    public RollbackWindow(int max) {
        if (max < 0) throw new IllegalArgumentException("maxRollback must be >= 0, got " + max);
        this.max = max;
    }

    /** Tokens in the sequence. */
    public int length() {
        return length;
    }

    /** k_max. */
    public int max() {
        return max;
    }

    /** How many of the last tokens can be rolled back now. */
    public int rollbackable() {
        return length - floor;
    }

    /** Records that S tokens were appended. */
    public void advance(int S) {
        length += S;
        floor = Math.max(floor, length - max);
    }

    /**
     * Removes the last k tokens from the count.
     * @return the new length
     * @throws IllegalStateException when the sequence is closed
     * @throws IllegalArgumentException when k is negative or reaches past the window
     */
    public int rollback(int k, boolean closed) {
        CacheLayout.checkRollback(k, rollbackable(), max, closed);
        length -= k;
        return length;
    }

    /** Sets the length to n with nothing restorable below it (state filled from outside, e.g. a benchmark). */
    public void reset(int n) {
        length = n;
        floor = n;
    }
}
