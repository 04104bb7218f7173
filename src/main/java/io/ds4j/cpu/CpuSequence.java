package io.ds4j.cpu;

import io.ds4j.engine.CacheLayout;
import io.ds4j.engine.RollbackWindow;
import io.ds4j.engine.Sequence;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.ModelConfig;

import io.ds4j.engine.StateSnapshot;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Per-sequence state of the CPU backend (spec section 4), laid out so that rollback is a pointer move:
 * <ul>
 *   <li>raw window: a ring of W−1+k_max F16 rows [d] per layer, indexed by position mod capacity;</li>
 *   <li>compressors (CSA, HCA, indexer): a ring of the raw per-token (a, z) rows in F32 [c·w each], long enough to
 *       rebuild the incomplete window and, with overlap, the previous window's Ca (2m + k_max rows; m + k_max
 *       without overlap). The HF "buffer" and "overlap" are views of that ring, so nothing is copied on rollback;</li>
 *   <li>compressed entries and indexer keys: append-only F16 stores [count, w] ({@link EntryLog}); rollback
 *       truncates the count. A store is shared with the snapshots taken of this sequence and with the sequences
 *       resumed from them ({@link #snapshot}, {@link #resume}).</li>
 * </ul>
 */
public final class CpuSequence implements Sequence {
    final ModelConfig cfg;
    /** Length and rollback window. */
    final RollbackWindow pos;
    final LayerState[] layers;
    boolean closed;
    /** The final residual streams of the latest positions, kept while an MTP state is attached (else null). */
    KeptStreams kept;
    /**
     * A prefill chunk part-way through its layers ({@link io.ds4j.engine.BatchEntry.Layers}): how far it got, and its
     * streams [rows, n·D] after the last layer run (null when none).
     */
    final io.ds4j.engine.ChunkProgress chunk = new io.ds4j.engine.ChunkProgress();
    float[] sliceX;

    CpuSequence(ModelConfig cfg, int maxRollback) {
        this.pos = new RollbackWindow(maxRollback); // validates maxRollback
        this.cfg = cfg;
        layers = new LayerState[cfg.numLayers];
        for (int l = 0; l < cfg.numLayers; l++) layers[l] = new LayerState(cfg, l, maxRollback);
    }

    /** State of one layer. */
    static final class LayerState {
        final int winCap;
        final short[] win;
        final CompressorState comp;
        final CompressorState index;

        LayerState(ModelConfig c, int l, int kMax) {
            winCap = CacheLayout.windowRows(c, kMax);
            win = new short[winCap * c.headDim];
            AttentionKind k = c.layerTypes[l];
            comp = k == AttentionKind.SLIDING ? null
                    : new CompressorState(c.ratio(l), c.headDim, k == AttentionKind.CSA, kMax);
            index = k == AttentionKind.CSA ? new CompressorState(c.csaRatio, c.indexHeadDim, true, kMax) : null;
        }
    }

    /**
     * An append-only store of F16 rows [capacity, w] shared by a sequence, the snapshots taken of it and the sequences
     * resumed from those. Rows [0, frozen) are used by snapshots and never rewritten; only the writer writes rows at
     * or past frozen. A compressor that must write where it may not copies its own rows into a new store first.
     */
    static final class EntryLog {
        short[] rows;
        int frozen;
        CompressorState writer;

        EntryLog(short[] rows) {
            this.rows = rows;
        }
    }

    /** One compressor's state: raw (a, z) ring plus the append-only entries. */
    static final class CompressorState {
        final int m, w, cw, cap;
        final boolean overlap;
        final float[] ringA, ringZ;
        EntryLog log;
        int count;

        CompressorState(int m, int w, boolean overlap, int kMax) {
            this.m = m;
            this.w = w;
            this.overlap = overlap;
            this.cw = overlap ? 2 * w : w;
            this.cap = CacheLayout.compressorRows(m, overlap, kMax);
            ringA = new float[cap * cw];
            ringZ = new float[cap * cw];
            log = new EntryLog(new short[16 * w]);
            log.writer = this;
        }

        /** The entry rows [count, w] (read only: writes go through {@link #ensure} first). */
        short[] entries() {
            return log.rows;
        }

        /**
         * Makes rows [count, n) writable: takes the store over when nobody writes it and no snapshot uses rows at or
         * past count, copies rows [0, count) into a new store of its own otherwise; then grows it to n rows.
         */
        void ensure(int n) {
            boolean mine = log.writer == this || (log.writer == null && count >= log.frozen);
            if (mine && count >= log.frozen) log.writer = this;
            else {
                short[] own = Arrays.copyOf(log.rows, Math.max(n, Math.max(16, count)) * w);
                if (log.writer == this) log.writer = null;
                log = new EntryLog(own);
                log.writer = this;
            }
            if ((long) n * w > log.rows.length)
                log.rows = Arrays.copyOf(log.rows, (int) Math.max((long) n * w, Math.min(Integer.MAX_VALUE - 8, 2L * log.rows.length)));
        }

        /** Gives up the right to write the store (the sequence is closed). */
        void release() {
            if (log != null && log.writer == this) log.writer = null;
        }

        long bytes() {
            return (ringA.length + ringZ.length) * 4L + (long) count * w * 2;
        }
    }

    @Override
    public int length() {
        return pos.length();
    }

    @Override
    public int slicedLayers() {
        return chunk.layers();
    }

    @Override
    public int slicedRows() {
        return chunk.rows();
    }

    /** {@inheritDoc} @throws IllegalStateException while a prefill chunk is part-way through its layers */
    @Override
    public void rollback(int k) {
        chunk.checkNone("roll back", cfg.numLayers);
        int n = pos.rollback(k, closed);
        for (LayerState ls : layers) {
            if (ls.comp != null) ls.comp.count = CacheLayout.entries(n, ls.comp.m);
            if (ls.index != null) ls.index.count = CacheLayout.entries(n, ls.index.m);
        }
    }

    @Override
    public int rollbackable() {
        return pos.rollbackable();
    }

    @Override
    public long stateBytes() {
        long b = 0;
        for (LayerState ls : layers) {
            b += ls.win.length * 2L;
            if (ls.comp != null) b += ls.comp.bytes();
            if (ls.index != null) b += ls.index.bytes();
        }
        return b + (sliceX != null ? sliceX.length * 4L : 0);
    }

    @Override
    public void close() {
        if (closed) return;
        closed = true;
        sliceX = null;
        chunk.clear();
        for (LayerState ls : layers) {
            if (ls.comp != null) ls.comp.release();
            if (ls.index != null) ls.index.release();
        }
    }

    /** A copy of this sequence's rings and a share of its entry stores (see {@link StateSnapshot}). */
    Snapshot snapshot() {
        chunk.checkNone("snapshot or fork", cfg.numLayers);
        if (closed) throw new IllegalStateException("sequence is closed");
        return new Snapshot(this);
    }

    /**
     * A new sequence in the snapshot's state.
     * @throws IllegalArgumentException for a closed snapshot or a different rollback window
     */
    static CpuSequence resume(Snapshot s, int maxRollback) {
        if (s.closed) throw new IllegalArgumentException("snapshot is closed");
        if (s.maxRollback != maxRollback)
            throw new IllegalArgumentException("snapshot was taken with rollback window " + s.maxRollback + ", not " + maxRollback);
        CpuSequence q = new CpuSequence(s.cfg, maxRollback);
        for (int l = 0; l < q.layers.length; l++) {
            LayerState ls = q.layers[l];
            System.arraycopy(s.win[l], 0, ls.win, 0, ls.win.length);
            if (ls.comp != null) s.comp[l].restore(ls.comp);
            if (ls.index != null) s.index[l].restore(ls.index);
        }
        q.pos.reset(s.length);
        return q;
    }

    /** Frozen copy of one compressor: its rings, and its store up to count. */
    private record CompCopy(float[] ringA, float[] ringZ, EntryLog log, int count, int w) {
        static CompCopy of(CompressorState cs) {
            if (cs == null) return null;
            cs.log.frozen = Math.max(cs.log.frozen, cs.count);
            return new CompCopy(cs.ringA.clone(), cs.ringZ.clone(), cs.log, cs.count, cs.w);
        }

        void restore(CompressorState cs) {
            System.arraycopy(ringA, 0, cs.ringA, 0, ringA.length);
            System.arraycopy(ringZ, 0, cs.ringZ, 0, ringZ.length);
            cs.log = log;
            cs.count = count;
        }
    }

    /** The CPU backend's {@link StateSnapshot}: host copies of the rings, shared entry stores. */
    static final class Snapshot implements StateSnapshot {
        final ModelConfig cfg;
        final int length, maxRollback;
        final short[][] win;
        final CompCopy[] comp, index;
        final long own;
        final List<SharedRows> shared = new ArrayList<>();
        boolean closed;

        private Snapshot(CpuSequence q) {
            cfg = q.cfg;
            length = q.pos.length();
            maxRollback = q.pos.max();
            int L = q.layers.length;
            win = new short[L][];
            comp = new CompCopy[L];
            index = new CompCopy[L];
            long b = 0;
            for (int l = 0; l < L; l++) {
                LayerState ls = q.layers[l];
                win[l] = ls.win.clone();
                b += win[l].length * 2L;
                comp[l] = CompCopy.of(ls.comp);
                index[l] = CompCopy.of(ls.index);
                for (CompCopy c : new CompCopy[]{comp[l], index[l]}) {
                    if (c == null) continue;
                    b += (c.ringA.length + c.ringZ.length) * 4L;
                    shared.add(new SharedRows(c.log, (long) c.count * c.w * 2));
                }
            }
            own = b;
        }

        @Override
        public int length() {
            return length;
        }

        @Override
        public long ownBytes() {
            return closed ? 0 : own;
        }

        @Override
        public List<SharedRows> shared() {
            return closed ? List.of() : shared;
        }

        @Override
        public void close() {
            // host memory: the arrays go with the last reference
            closed = true;
        }
    }
}
