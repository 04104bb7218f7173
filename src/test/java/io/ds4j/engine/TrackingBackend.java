package io.ds4j.engine;

import io.ds4j.model.ModelConfig;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * A backend wrapper for scheduler tests: records the shape of every batched step (entries and their kinds) and
 * whether each sequence it handed out has been closed, and can fail the steps of sequences marked poisoned. It
 * delegates the numbers to the wrapped backend. For the scheduler's latency policy it also keeps a fake clock that
 * each step advances by a given cost, records every step's entry sizes, and can answer
 * {@link #prefillSplitExact} by another rule than the wrapped backend's (to play a backend with a size threshold), and
 * can play a backend that does one-off work in some steps ({@link #oneOff}).
 */
public final class TrackingBackend implements Backend {
    final Backend inner;
    /** Per {@link #step} call, the kinds of its entries in order. */
    public final List<List<StepKind>> steps = Collections.synchronizedList(new ArrayList<>());
    public final List<Seq> sequences = Collections.synchronizedList(new ArrayList<>());
    /** Per {@link #step} call, its entries in order. */
    public final List<List<BatchEntry>> entries = Collections.synchronizedList(new ArrayList<>());
    /** Per {@link #step} call, the row counts of its entries in order. */
    public final List<int[]> counts = Collections.synchronizedList(new ArrayList<>());
    /** Nanoseconds a step adds to {@link #now} (null: the clock stands still). */
    public volatile java.util.function.ToLongFunction<List<BatchEntry>> cost;
    /** Answers {@link #prefillSplitExact} instead of the wrapped backend (null: the wrapped backend answers). */
    public volatile java.util.function.BiPredicate<Integer, Integer> splitRule;
    private final java.util.concurrent.atomic.AtomicLong clock = new java.util.concurrent.atomic.AtomicLong();
    /** Says which steps do one-off work ({@link #oneOffWork} moves; null: none do), as a GPU's graph captures. */
    public volatile java.util.function.Predicate<List<BatchEntry>> oneOff;
    private final java.util.concurrent.atomic.AtomicLong work = new java.util.concurrent.atomic.AtomicLong();
    /**
     * Verify attention paths offered in place of the wrapped backend's (empty: the wrapped backend's own). A choice
     * among them is recorded, not passed on: the numbers stay the wrapped backend's.
     */
    public volatile java.util.Set<VerifyAttention> offeredPaths = java.util.Set.of();
    /** With {@link #offeredPaths}: the path chosen when each verify entry ran, in order. */
    public final List<VerifyAttention> verifyPaths = Collections.synchronizedList(new ArrayList<>());
    private volatile VerifyAttention path;

    public TrackingBackend(Backend inner) {
        this.inner = inner;
    }

    /** A sequence of the wrapped backend that remembers being closed. */
    public static final class Seq implements Sequence {
        final Sequence inner;
        public volatile boolean closed;
        /** When set, every step holding this sequence throws after running (as a faulty kernel would). */
        public volatile boolean poisoned;

        Seq(Sequence inner) {
            this.inner = inner;
        }

        @Override public int length() { return inner.length(); }
        @Override public void rollback(int k) { inner.rollback(k); }
        @Override public int rollbackable() { return inner.rollbackable(); }
        @Override public int slicedLayers() { return inner.slicedLayers(); }
        @Override public int slicedRows() { return inner.slicedRows(); }
        @Override public long stateBytes() { return inner.stateBytes(); }

        @Override
        public void close() {
            closed = true;
            inner.close();
        }
    }

    @Override public String name() { return inner.name(); }
    @Override public ModelConfig config() { return inner.config(); }
    @Override public long stateBytes(int contextTokens, int maxRollback) { return inner.stateBytes(contextTokens, maxRollback); }
    @Override public boolean layerSlices() { return inner.layerSlices(); }
    /** What {@link #argmaxMasks} says (default false; the default stepArgmax chooses among masks either way). */
    public volatile boolean masks;
    @Override public boolean argmaxMasks() { return masks; }
    @Override public void close() { inner.close(); }

    @Override
    public java.util.Set<VerifyAttention> verifyAttentionPaths() {
        var p = offeredPaths;
        return p.isEmpty() ? inner.verifyAttentionPaths() : p;
    }

    @Override
    public void setVerifyAttention(VerifyAttention p) {
        if (offeredPaths.isEmpty()) inner.setVerifyAttention(p);
        else if (!offeredPaths.contains(p)) throw new UnsupportedOperationException("path " + p + " is not offered");
        else path = p;
    }

    @Override
    public long oneOffWork() {
        return work.get();
    }

    /** The fake clock (ns): the sum of the costs of the steps so far. */
    public long now() {
        return clock.get();
    }

    @Override
    public boolean prefillSplitExact(int rows, int first) {
        var r = splitRule;
        return r != null ? r.test(rows, first) : inner.prefillSplitExact(rows, first);
    }

    @Override
    public Sequence newSequence(int maxRollback) {
        Seq s = new Seq(inner.newSequence(maxRollback));
        sequences.add(s);
        return s;
    }

    private static Sequence unwrap(Sequence s) {
        Seq t = (Seq) s;
        if (t.closed) throw new IllegalStateException("sequence is closed");
        return t.inner;
    }

    @Override
    public float[] forward(Sequence seq, int[] tokens, int off, int count, int[] logitRows) {
        return forward(seq, tokens, off, count, logitRows, StepKind.DECODE);
    }

    @Override
    public float[] forward(Sequence seq, int[] tokens, int off, int count, int[] logitRows, StepKind kind) {
        return step(List.of(new BatchEntry(seq, java.util.Arrays.copyOfRange(tokens, off, off + count), logitRows, kind)))[0];
    }

    @Override
    public float[][] step(List<BatchEntry> batch) {
        Backend.checkBatch(config(), batch);
        List<BatchEntry> in = new ArrayList<>(batch.size());
        List<StepKind> kinds = new ArrayList<>(batch.size());
        boolean poison = false;
        for (BatchEntry e : batch) {
            in.add(new BatchEntry(unwrap(e.seq()), e.tokens(), e.logitRows(), e.kind(), 0, e.layers()));
            kinds.add(e.kind());
            if (e.kind() == StepKind.VERIFY && !offeredPaths.isEmpty()) verifyPaths.add(path);
            poison |= ((Seq) e.seq()).poisoned;
        }
        steps.add(kinds);
        entries.add(List.copyOf(batch));
        counts.add(batch.stream().mapToInt(BatchEntry::count).toArray());
        var c = cost;
        if (c != null) clock.addAndGet(c.applyAsLong(batch));
        var o = oneOff;
        if (o != null && o.test(batch)) work.incrementAndGet();
        float[][] out = inner.step(in);
        if (poison) throw new IllegalStateException("injected fault in a batched step");
        return out;
    }
}
