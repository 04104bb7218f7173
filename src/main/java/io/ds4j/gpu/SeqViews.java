package io.ds4j.gpu;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * An array of {@code ds4j_seq_view} (include/ds4j/ds4j_gpu.h): one sequence of a batched step per element, in host
 * memory, for the library's {@code *_seqs} functions (which take the array in host memory to check and size the launch,
 * and the same bytes in device memory for the kernels). Element layout, 48 bytes: N0 int64 at 0, S int32 at 8, row0
 * int32 at 12, ring at 16, ring2 at 24, store at 32 (device addresses), cap int32 at 40, 4 bytes reserved.
 */
public final class SeqViews {
    /** Bytes of one element. */
    public static final long BYTES = 48;

    private final MemorySegment host;
    private final int n;

    /** n zeroed elements in the arena's memory. */
    public SeqViews(Arena arena, int n) {
        if (n < 1) throw new IllegalArgumentException("need at least one sequence view, got " + n);
        this.n = n;
        host = arena.allocate(BYTES * n, 8);
    }

    /**
     * n elements over host memory the caller owns (at least {@code n * BYTES} bytes, 8-byte aligned), not cleared.
     * @throws IllegalArgumentException for n < 1 or a segment too small
     */
    public SeqViews(MemorySegment host, int n) {
        if (n < 1) throw new IllegalArgumentException("need at least one sequence view, got " + n);
        if (host.byteSize() < BYTES * n) throw new IllegalArgumentException("segment of " + host.byteSize() + " bytes for " + n + " views");
        this.n = n;
        this.host = host.asSlice(0, BYTES * n);
    }

    /**
     * Sets element i.
     * @param N0   positions before this step
     * @param S    the sequence's rows in the step (>= 1)
     * @param row0 its first row in the step's row-major activations
     * @param ring the function's first state (window ring, compressor ring_a), a device address or 0
     * @param ring2 compressor ring_z, or 0
     * @param store compressed entries or indexer keys, or 0
     * @param cap  rows of ring (and ring2)
     * @return this
     */
    public SeqViews set(int i, long N0, int S, int row0, long ring, long ring2, long store, int cap) {
        long o = BYTES * i;
        host.set(ValueLayout.JAVA_LONG, o, N0);
        host.set(ValueLayout.JAVA_INT, o + 8, S);
        host.set(ValueLayout.JAVA_INT, o + 12, row0);
        host.set(ValueLayout.JAVA_LONG, o + 16, ring);
        host.set(ValueLayout.JAVA_LONG, o + 24, ring2);
        host.set(ValueLayout.JAVA_LONG, o + 32, store);
        host.set(ValueLayout.JAVA_INT, o + 40, cap);
        host.set(ValueLayout.JAVA_INT, o + 44, 0);
        return this;
    }

    /**
     * Replaces element i's ring address (e.g. with a copy of the ring).
     * @return this
     */
    public SeqViews ring(int i, long ring) {
        host.set(ValueLayout.JAVA_LONG, BYTES * i + 16, ring);
        return this;
    }

    /**
     * Replaces element i's store address (e.g. with a copy of the entries).
     * @return this
     */
    public SeqViews store(int i, long store) {
        host.set(ValueLayout.JAVA_LONG, BYTES * i + 32, store);
        return this;
    }

    /** The host copy. */
    public MemorySegment host() {
        return host;
    }

    /** Number of elements. */
    public int size() {
        return n;
    }

    /** Bytes of the array. */
    public long bytes() {
        return BYTES * n;
    }
}
