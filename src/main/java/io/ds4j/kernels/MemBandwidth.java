package io.ds4j.kernels;

import jdk.incubator.vector.FloatVector;
import jdk.incubator.vector.VectorOperators;
import jdk.incubator.vector.VectorSpecies;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteOrder;

/**
 * Measures the achievable memory read bandwidth of this machine, the yardstick for the decode kernels: all
 * {@link Parallel} threads stream float sums over an off-heap buffer far larger than the last-level cache.
 *
 * <p>On a shared virtual machine the bandwidth a program gets moves from window to window and from minute to minute
 * (BENCHMARKS.md, "CPU engine", has the spread on the build VM). A bound taken once, at another moment and over
 * another length of time than the run it bounds, moves the ratio by as much as the run itself does; a benchmark
 * therefore takes a {@link Meter#pass(double)} right after each timed run, as long as that run.
 */
public final class MemBandwidth {
    private MemBandwidth() {}

    private static final VectorSpecies<Float> FS = FloatVector.SPECIES_PREFERRED;
    private static final int CHUNK = 1 << 20;
    private static volatile float sink;

    /**
     * Read bandwidth over a 1 GiB off-heap buffer, all {@link Parallel} threads, best of 5 single sweeps (each about
     * 35 ms on the build VM): the short-window peak.
     * @return GB/s (10^9 bytes per second)
     */
    public static double measureReadGBs() {
        return measureReadGBs(1L << 30, 5);
    }

    /**
     * Streams float sums over a zero-filled off-heap buffer of {@code bytes} (rounded up to 1 MiB) with all
     * {@link Parallel} threads, {@code passes} single sweeps after one warm-up sweep.
     * @return the best sweep's read bandwidth in GB/s (10^9 bytes per second)
     * @throws IllegalArgumentException when bytes or passes is not positive
     * @throws OutOfMemoryError when the buffer cannot be allocated
     */
    public static double measureReadGBs(long bytes, int passes) {
        if (passes <= 0) throw new IllegalArgumentException("bytes " + bytes + ", passes " + passes);
        try (Meter m = new Meter(bytes)) {
            double best = 0;
            for (int p = 0; p < passes; p++) best = Math.max(best, m.pass(0).gbPerSecond());
            return best;
        }
    }

    /**
     * One measured pass.
     * @param gbPerSecond read bandwidth in GB/s (10^9 bytes per second)
     * @param seconds     the pass's wall time
     */
    public record Pass(double gbPerSecond, double seconds) {}

    /**
     * A reusable read-bandwidth probe: one off-heap buffer, swept by all {@link Parallel} threads. Lets a benchmark
     * take a bandwidth pass right after each timed run, over the same length of time. Not thread-safe.
     */
    public static final class Meter implements AutoCloseable {
        private final Arena arena = Arena.ofShared();
        private final MemorySegment seg;
        private final int chunks;
        private final float[] partial;

        /**
         * Allocates and zero-fills the buffer (so its pages are present) and sweeps it once to warm up.
         * @param bytes buffer size, rounded up to 1 MiB; should be many times the last-level cache
         * @throws IllegalArgumentException when bytes is not positive
         * @throws OutOfMemoryError when the buffer cannot be allocated
         */
        public Meter(long bytes) {
            if (bytes <= 0) throw new IllegalArgumentException("bytes " + bytes);
            chunks = (int) Math.min(Integer.MAX_VALUE, (bytes + CHUNK - 1) / CHUNK);
            seg = arena.allocate((long) chunks * CHUNK, 4096);
            partial = new float[chunks];
            sweep();
        }

        /** Buffer size in bytes. */
        public long bytes() {
            return (long) chunks * CHUNK;
        }

        /**
         * One pass: whole sweeps over the buffer, repeated until at least {@code minSeconds} have passed (one sweep
         * when 0), so a pass lasts up to one sweep longer than asked.
         * @return the pass's read bandwidth and duration
         */
        public Pass pass(double minSeconds) {
            long t0 = System.nanoTime(), bytes = 0, dt;
            do {
                sweep();
                bytes += bytes();
                dt = System.nanoTime() - t0;
            } while (dt < minSeconds * 1e9);
            return new Pass((double) bytes / dt, dt / 1e9);
        }

        private void sweep() {
            Parallel.forRange(chunks, 1, (a, b) -> {
                for (int i = a; i < b; i++) partial[i] = sumChunk(seg, (long) i * CHUNK);
            });
            float s = 0;
            for (float f : partial) s += f;
            sink = s;
        }

        @Override
        public void close() {
            arena.close();
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
