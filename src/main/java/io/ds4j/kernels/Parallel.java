package io.ds4j.kernels;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.concurrent.locks.LockSupport;

/**
 * Process-wide fixed worker pool for data-parallel loops.
 *
 * <p>The pool is created once, on first use: {@code threads() - 1} daemon workers, the calling thread being the
 * last participant, so a single caller keeps exactly {@link #threads()} cores busy (the default is
 * {@link Runtime#availableProcessors()}, overridable with {@code -Dds4j.threads=N}). Idle workers spin briefly
 * ({@code -Dds4j.spinMicros}, default 100 µs) so back-to-back loops start without a wake-up, then park.
 *
 * <p>{@link #forRange} may be called from several threads at once (their loops share the workers) and is
 * reentrant: a call made from inside a body (on a worker or on a calling thread) runs inline and serially.
 */
public final class Parallel {
    private Parallel() {}

    /** A loop body over the half-open index range [from, to). */
    @FunctionalInterface
    public interface RangeBody {
        void run(int from, int to);
    }

    private static final int THREADS = Math.max(1, Integer.getInteger("ds4j.threads",
            Runtime.getRuntime().availableProcessors()));
    private static final long SPIN_NS = Math.max(0, Long.getLong("ds4j.spinMicros", 100)) * 1000L;
    /** Chunks handed out per participating thread, for load balance. */
    private static final int CHUNKS_PER_THREAD = 4;
    private static final int SLOTS = 64;

    private static final AtomicReferenceArray<Task> ACTIVE = new AtomicReferenceArray<>(SLOTS);
    /** Number of non-null ACTIVE slots (a cheap "is there work" check for spinning workers). */
    private static final AtomicInteger ACTIVE_COUNT = new AtomicInteger();
    private static final ThreadLocal<int[]> DEPTH = ThreadLocal.withInitial(() -> new int[1]);
    private static final Worker[] WORKERS = startWorkers();

    /** Number of threads a loop can use: the workers plus the calling thread. */
    public static int threads() {
        return THREADS;
    }

    /**
     * Runs {@code body} over [0, n) split into chunks of at least {@code grain} indices (except the last), on the
     * workers and the calling thread; returns when every chunk is done. A chunk is never split further, and chunks
     * of one call may run in any order and concurrently.
     *
     * @param n     number of indices; nothing happens when {@code n <= 0}
     * @param grain minimum chunk size (values below 1 count as 1); when {@code n <= grain} the body runs inline
     * @param body  the loop body, called with disjoint ranges covering [0, n)
     * @throws RuntimeException or Error: the first one a body threw (the remaining chunks are skipped)
     */
    public static void forRange(int n, int grain, RangeBody body) {
        if (n <= 0) return;
        grain = Math.max(1, grain);
        if (n <= grain || THREADS == 1 || Thread.currentThread() instanceof Worker) {
            body.run(0, n);
            return;
        }
        int[] depth = DEPTH.get();
        if (depth[0] > 0) {
            body.run(0, n);
            return;
        }
        int chunk = (int) Math.max(grain, ((long) n + THREADS * CHUNKS_PER_THREAD - 1) / (THREADS * CHUNKS_PER_THREAD));
        run(body, n, chunk, depth);
    }

    /**
     * Runs {@code body(i, i + 1)} for every i in [0, chunks), each call a chunk of its own (never merged), on the
     * workers and the calling thread; for callers that size their chunks themselves (for load balance, many more
     * than {@link #threads()}). Same threading rules as {@link #forRange}.
     *
     * @param chunks number of chunks; nothing happens when {@code chunks <= 0}
     * @param body   the loop body, called once per chunk index
     * @throws RuntimeException or Error: the first one a body threw (the remaining chunks are skipped)
     */
    public static void forEachChunk(int chunks, RangeBody body) {
        if (chunks <= 0) return;
        int[] depth = DEPTH.get();
        if (chunks == 1 || THREADS == 1 || Thread.currentThread() instanceof Worker || depth[0] > 0) {
            for (int i = 0; i < chunks; i++) body.run(i, i + 1);
            return;
        }
        run(body, chunks, 1, depth);
    }

    /** Runs [0, n) in chunks of {@code chunk} indices on the pool; depth is the calling thread's nesting counter. */
    private static void run(RangeBody body, int n, int chunk, int[] depth) {
        int nChunks = (int) (((long) n + chunk - 1) / chunk);
        if (nChunks <= 1) {
            body.run(0, n);
            return;
        }
        Task t = new Task(body, n, chunk, nChunks);
        int slot = publish(t);
        if (slot < 0) { // more concurrent loops than slots: run this one alone, chunk by chunk
            for (int i = 0; i < nChunks; i++) body.run(i * chunk, (int) Math.min(n, (long) i * chunk + chunk));
            return;
        }
        wake(nChunks - 1);
        depth[0]++;
        try {
            t.runChunks();
        } finally {
            depth[0]--;
            if (ACTIVE.compareAndSet(slot, t, null)) ACTIVE_COUNT.decrementAndGet();
        }
        t.await();
        Throwable e = t.error;
        if (e instanceof RuntimeException re) throw re;
        if (e instanceof Error er) throw er;
        if (e != null) throw new RuntimeException(e);
    }

    private static int publish(Task t) {
        int start = (int) (Thread.currentThread().threadId() % SLOTS);
        for (int i = 0; i < SLOTS; i++) {
            int s = (start + i) % SLOTS;
            if (ACTIVE.get(s) == null && ACTIVE.compareAndSet(s, null, t)) {
                ACTIVE_COUNT.incrementAndGet();
                return s;
            }
        }
        return -1;
    }

    /** Unparks up to {@code wanted} parked workers. */
    private static void wake(int wanted) {
        for (Worker w : WORKERS) {
            if (wanted <= 0) break;
            if (w.parked) {
                LockSupport.unpark(w);
                wanted--;
            } else {
                wanted--; // a spinning worker will pick the task up by itself
            }
        }
    }

    private static Worker[] startWorkers() {
        Worker[] ws = new Worker[THREADS - 1];
        for (int i = 0; i < ws.length; i++) {
            ws[i] = new Worker(i);
            ws[i].start();
        }
        return ws;
    }

    private static final class Task {
        final RangeBody body;
        final int n, chunk, nChunks;
        final AtomicInteger next = new AtomicInteger();
        final AtomicInteger done = new AtomicInteger();
        volatile Thread waiter;
        volatile Throwable error;

        Task(RangeBody body, int n, int chunk, int nChunks) {
            this.body = body;
            this.n = n;
            this.chunk = chunk;
            this.nChunks = nChunks;
        }

        boolean hasWork() {
            return next.get() < nChunks;
        }

        /** Claims and runs chunks until none is left. */
        void runChunks() {
            int i;
            while ((i = next.getAndIncrement()) < nChunks) {
                try {
                    if (error == null) {
                        int from = i * chunk; // < n, so no overflow
                        body.run(from, (int) Math.min(n, (long) from + chunk));
                    }
                } catch (Throwable e) {
                    if (error == null) error = e;
                } finally {
                    if (done.incrementAndGet() == nChunks) {
                        Thread w = waiter;
                        if (w != null) LockSupport.unpark(w);
                    }
                }
            }
        }

        /** Waits until every chunk has finished (spin, then park). */
        void await() {
            if (done.get() == nChunks) return;
            long end = System.nanoTime() + SPIN_NS;
            while (done.get() != nChunks) {
                if (System.nanoTime() > end) {
                    waiter = Thread.currentThread();
                    while (done.get() != nChunks) LockSupport.park(this);
                    return;
                }
                Thread.onSpinWait();
            }
        }
    }

    private static final class Worker extends Thread {
        volatile boolean parked;
        private int scan;

        Worker(int i) {
            super("ds4j-parallel-" + i);
            setDaemon(true);
            scan = i;
        }

        private Task find() {
            if (ACTIVE_COUNT.get() == 0) return null;
            for (int i = 0; i < SLOTS; i++) {
                Task t = ACTIVE.get((scan + i) % SLOTS);
                if (t != null && t.hasWork()) {
                    scan = (scan + i) % SLOTS;
                    return t;
                }
            }
            return null;
        }

        @Override
        public void run() {
            long idleSince = System.nanoTime();
            while (true) {
                Task t = find();
                if (t != null) {
                    t.runChunks();
                    idleSince = System.nanoTime();
                    continue;
                }
                if (System.nanoTime() - idleSince < SPIN_NS) {
                    Thread.onSpinWait();
                    continue;
                }
                parked = true;
                if (find() == null) LockSupport.park(this); // spurious wake-ups just loop
                parked = false;
                idleSince = System.nanoTime();
            }
        }
    }
}
