package io.ds4j.cpu;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;

/** Measures the achievable memory read bandwidth of this machine, the yardstick for the decode kernels. */
public final class MemBandwidth {
    private MemBandwidth() {}

    private static final VectorSpecies<Float> FS = FloatVector.SPECIES_PREFERRED;
    private static final int CHUNK = 1 << 20;
    private static volatile float sink;

    /**
     * Read bandwidth over a 1 GiB off-heap buffer, all {@link Parallel} threads, best of 5 passes.
     * @return GB/s (10^9 bytes per second)
     */
    public static double measureReadGBs() {
        return measureReadGBs(1L << 30, 5);
    }

    /**
     * Streams float sums over a zero-filled off-heap buffer of {@code bytes} (rounded up to 1 MiB) with all
     * {@link Parallel} threads, {@code passes} times after one warm-up pass.
     * @return the best pass's read bandwidth in GB/s (10^9 bytes per second)
     * @throws IllegalArgumentException when bytes or passes is not positive
     * @throws OutOfMemoryError when the buffer cannot be allocated
     */
    public static double measureReadGBs(long bytes, int passes) {
        if (bytes <= 0 || passes <= 0) throw new IllegalArgumentException("bytes " + bytes + ", passes " + passes);
        int chunks = (int) Math.min(Integer.MAX_VALUE, (bytes + CHUNK - 1) / CHUNK);
        try (Arena arena = Arena.ofShared()) {
            MemorySegment seg = arena.allocate((long) chunks * CHUNK, 4096); // zeroed, so its pages are present
            float[] partial = new float[chunks];
            double best = 0;
            for (int p = 0; p <= passes; p++) {
                long t0 = System.nanoTime();
                Parallel.forRange(chunks, 1, (a, b) -> {
                    for (int i = a; i < b; i++) partial[i] = sumChunk(seg, (long) i * CHUNK);
                });
                long dt = System.nanoTime() - t0;
                float s = 0;
                for (float f : partial) s += f;
                sink = s;
                if (p > 0) best = Math.max(best, (double) chunks * CHUNK / dt);
            }
            return best;
        }
    }

    private static float sumChunk(MemorySegment seg, long off) {
        int vb = FS.vectorByteSize();
        FloatVector a = FloatVector.zero(FS), b = a, c = a, d = a;
        for (long o = off, end = off + CHUNK; o < end; o += 4L * vb) {
            a = a.add(FloatVector.fromMemorySegment(FS, seg, o, ByteOrder.LITTLE_ENDIAN));
            b = b.add(FloatVector.fromMemorySegment(FS, seg, o + vb, ByteOrder.LITTLE_ENDIAN));
            c = c.add(FloatVector.fromMemorySegment(FS, seg, o + 2L * vb, ByteOrder.LITTLE_ENDIAN));
            d = d.add(FloatVector.fromMemorySegment(FS, seg, o + 3L * vb, ByteOrder.LITTLE_ENDIAN));
        }
        return a.add(b).add(c.add(d)).reduceLanes(VectorOperators.ADD);
    }
}
