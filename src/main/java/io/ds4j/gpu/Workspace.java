package io.ds4j.gpu;

import java.util.ArrayList;
import java.util.List;

/**
 * Scratch device memory for the activations of one step: a bump allocator over grow-only chunks. Work is ordered on
 * the context's one stream, so memory released by {@link #release} can be handed out again at once: a later kernel
 * that reuses it runs after the earlier ones that used it. {@link #reset} merges the chunks into one (the peak
 * size) between steps.
 */
final class Workspace implements AutoCloseable {
    private static final long ALIGN = 256, MIN_CHUNK = 64L << 20;
    private final Gpu gpu;
    private final List<long[]> chunks = new ArrayList<>(); // {base, size}
    private int cur;
    private long off;

    Workspace(Gpu gpu) {
        this.gpu = gpu;
    }

    /** Device memory for bytes (256-byte aligned), valid until released or reset. */
    long alloc(long bytes) {
        bytes = Math.max(ALIGN, (bytes + ALIGN - 1) / ALIGN * ALIGN);
        while (cur < chunks.size()) {
            long[] c = chunks.get(cur);
            if (off + bytes <= c[1]) {
                long p = c[0] + off;
                off += bytes;
                return p;
            }
            cur++;
            off = 0;
        }
        long size = Math.max(bytes, Math.max(MIN_CHUNK, chunks.isEmpty() ? 0 : 2 * chunks.getLast()[1]));
        chunks.add(new long[]{gpu.malloc(size, "activations (workspace)"), size});
        cur = chunks.size() - 1;
        off = bytes;
        return chunks.get(cur)[0];
    }

    /** n floats. */
    long f32(long n) {
        return alloc(4 * n);
    }

    /** n int32. */
    long i32(long n) {
        return alloc(4 * n);
    }

    /** The current position, for {@link #release}. */
    long mark() {
        return ((long) cur << 40) | off;
    }

    /** Frees everything allocated after the mark. */
    void release(long mark) {
        cur = (int) (mark >>> 40);
        off = mark & ((1L << 40) - 1);
    }

    /** Frees everything; merges several chunks into one of their total size (waits for the device then). */
    void reset() {
        if (chunks.size() > 1) {
            long total = 0;
            for (long[] c : chunks) total += c[1];
            gpu.sync();
            for (long[] c : chunks) gpu.free(c[0]);
            chunks.clear();
            chunks.add(new long[]{gpu.malloc(total, "activations (workspace)"), total});
        }
        cur = 0;
        off = 0;
    }

    /** Device bytes held. */
    long bytes() {
        long b = 0;
        for (long[] c : chunks) b += c[1];
        return b;
    }

    @Override
    public void close() {
        for (long[] c : chunks) {
            try {
                gpu.free(c[0]);
            } catch (RuntimeException ignored) {
                // keep freeing the rest
            }
        }
        chunks.clear();
    }
}
