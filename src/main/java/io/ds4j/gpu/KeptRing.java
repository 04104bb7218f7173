package io.ds4j.gpu;

/**
 * The final residual streams (before {@code hc_head}, [n·D] F32 per position) of a sequence's most recent positions,
 * in a device ring indexed by position: what an attached MTP layer reads as the target's state. Written by device
 * copies queued inside the target's step (capturable like the rest of it); rows stay valid across a rollback.
 */
final class KeptRing {
    final Gpu gpu;
    final long ring;
    final int width, cap;
    /** Valid positions [lo, hi) (rows at or past the owner's length after a rollback are stale). */
    int lo, hi;

    KeptRing(Gpu gpu, int width, int cap) {
        this.gpu = gpu;
        this.width = width;
        this.cap = cap;
        this.ring = gpu.malloc(4L * width * cap, "MTP stream ring");
    }

    /** Queues the copies of X [S, width] (device) as positions n0 .. n0+S−1. */
    void put(long X, int n0, int S) {
        int end = n0 + S;
        int first = n0 >= lo && n0 <= hi ? lo : n0;
        for (int p = Math.max(n0, end - cap); p < end; ) { // at most two copies: up to the ring's end, then from its start
            int run = Math.min(end - p, cap - p % cap);
            gpu.copy(row(p), X + 4L * (p - n0) * width, 4L * width * run);
            p += run;
        }
        hi = end;
        lo = Math.max(first, end - cap);
    }

    /**
     * Queues copies of positions [from, to) into dst [to − from, width] (device, same device), in at most two copies.
     * @param gpu the context whose stream orders the copies
     */
    void gather(Gpu gpu, int from, int to, long dst) {
        for (int p = from; p < to; ) {
            int run = Math.min(to - p, cap - p % cap);
            gpu.copy(dst + 4L * (p - from) * width, row(p), 4L * width * run);
            p += run;
        }
    }

    /** Device address of position p's row. */
    long row(int p) {
        return ring + 4L * (long) (p % cap) * width;
    }

    void free() {
        gpu.free(ring);
    }
}
