package io.ds4j.cpu;

/**
 * The final residual streams (before {@code hc_head}, [n·D] per position) of a sequence's most recent positions, in a
 * ring indexed by position: what an attached MTP layer reads as the target's state. Rows stay valid across a rollback
 * (a rolled-back position is simply rewritten by the next step).
 */
final class KeptStreams {
    private final int width, cap;
    private final float[] rows;
    /** Valid positions [lo, hi). */
    private int lo, hi;

    /**
     * @param width n·D floats per position
     * @param cap positions kept
     */
    KeptStreams(int width, int cap) {
        this.width = width;
        this.cap = cap;
        this.rows = new float[Math.multiplyExact(width, cap)];
    }

    /** Records the streams X [S, width] of positions n0 .. n0+S−1. */
    void put(float[] X, int n0, int S) {
        int end = n0 + S;
        int first = n0 >= lo && n0 <= hi ? lo : n0; // a gap (positions never seen) restarts the valid range
        for (int p = Math.max(n0, end - cap); p < end; p++)
            System.arraycopy(X, (p - n0) * width, rows, (p % cap) * width, width);
        hi = end;
        lo = Math.max(first, end - cap);
    }

    /** The first position whose streams are kept. */
    int lo() {
        return lo;
    }

    /** One past the last position whose streams were recorded (rows at or past the owner's length after a rollback are stale). */
    int hi() {
        return hi;
    }

    /** Copies position p's streams into dst[off .. off+width). */
    void get(int p, float[] dst, int off) {
        if (p < lo || p >= hi) throw new IllegalStateException("streams of position " + p + " are not kept (kept: [" + lo + ", " + hi + "))");
        System.arraycopy(rows, (p % cap) * width, dst, off, width);
    }
}
