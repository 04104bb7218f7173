package io.ds4j.gpu;

import io.ds4j.engine.CacheLayout;
import io.ds4j.engine.RollbackWindow;
import io.ds4j.engine.Sequence;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.ModelConfig;

import java.util.ArrayList;
import java.util.List;

/**
 * Per-sequence state of the GPU backend in device memory, laid out as the CPU backend's sequence state (the
 * {@link io.ds4j.engine.CacheLayout} rules) so that rollback is a pointer move (spec 4.5) and nothing is copied:
 * <ul>
 *   <li>raw window: an F16 ring [W−1+k_max, d] per layer, slot = position mod capacity;</li>
 *   <li>compressors (CSA, HCA, indexer): F32 rings of the raw per-token (a, z) rows [2m+k_max (m+k_max without
 *       overlap), cw];</li>
 *   <li>compressed entries and indexer keys: append-only F16 stores [count, w] ({@link EntryLog}), grown by
 *       doubling; rollback truncates the count. A store is shared with the snapshots taken of this sequence and
 *       with the sequences resumed from them ({@link Snapshot}).</li>
 * </ul>
 * Stepped by one thread at a time through {@link HipBackend#forward}.
 */
public final class HipSequence implements Sequence {
    final HipBackend backend;
    final ModelConfig cfg;
    /** Length and rollback window. */
    final RollbackWindow pos;
    final LayerState[] layers;
    boolean closed;
    /** Why a step failed after it had started changing the device state (null: usable). */
    String failed;
    /** The final streams of the latest positions, kept while an MTP state is attached (else null). */
    KeptRing kept;
    /**
     * A prefill chunk part-way through its layers ({@link io.ds4j.engine.BatchEntry.Layers}): how far it got, and device
     * buffers of its streams X and of their RMSNorm_1 v [rows, n·D] F32 (what the next site's mHC product reads: the last
     * stream update computed it); 0 when none. Freed when the chunk's last slice has run.
     */
    final io.ds4j.engine.ChunkProgress chunk = new io.ds4j.engine.ChunkProgress();
    long sliceX, sliceV, sliceBytes;
    private final List<Long> fixed = new ArrayList<>();

    /** One layer's state (device pointers). */
    static final class LayerState {
        final int winCap;
        long win;
        Comp comp, index;

        LayerState(int winCap) {
            this.winCap = winCap;
        }
    }

    /**
     * An append-only device store of F16 rows [entryCap, w], shared by a sequence, the snapshots taken of it and the
     * sequences resumed from them. Rows [0, frozen) are used by snapshots and never rewritten; only the writer writes
     * rows at or past frozen; a compressor that must write where it may not copies its own rows into a new store.
     * Freed when the last holder lets go (refs). Touched under the backend's lock.
     */
    static final class EntryLog {
        long ptr;
        int entryCap, frozen, refs = 1;
        Comp writer;

        EntryLog(long ptr, int entryCap) {
            this.ptr = ptr;
            this.entryCap = entryCap;
        }

        /** Drops one holder's reference (and the write right, when it had it); frees the rows with the last one. */
        void release(Gpu gpu, Comp holder) {
            if (writer == holder && holder != null) writer = null;
            if (--refs == 0 && ptr != 0) {
                gpu.free(ptr);
                ptr = 0;
            }
        }
    }

    /** One compressor's state. */
    static final class Comp {
        final int m, w, cw, cap;
        final boolean overlap;
        long ringA, ringZ;
        EntryLog log;
        int count;

        /** Device address of the entry rows (read through here: a store may move when its writer grows it). */
        long entries() {
            return log.ptr;
        }

        Comp(int m, int w, boolean overlap, int kMax) {
            this.m = m;
            this.w = w;
            this.overlap = overlap;
            this.cw = overlap ? 2 * w : w;
            this.cap = CacheLayout.compressorRows(m, overlap, kMax);
        }
    }

    HipSequence(HipBackend backend, ModelConfig c, int maxRollback) {
        this.pos = new RollbackWindow(maxRollback); // validates maxRollback
        this.backend = backend;
        this.cfg = c;
        this.layers = new LayerState[c.numLayers];
        Gpu gpu = backend.gpu();
        try {
            for (int l = 0; l < c.numLayers; l++) {
                LayerState ls = new LayerState(CacheLayout.windowRows(c, maxRollback));
                ls.win = zeroed(gpu, (long) ls.winCap * c.headDim * 2, "window ring");
                AttentionKind k = c.layerTypes[l];
                if (k != AttentionKind.SLIDING) ls.comp = comp(gpu, new Comp(c.ratio(l), c.headDim, k == AttentionKind.CSA, maxRollback));
                if (k == AttentionKind.CSA) ls.index = comp(gpu, new Comp(c.csaRatio, c.indexHeadDim, true, maxRollback));
                layers[l] = ls;
            }
        } catch (RuntimeException e) {
            free();
            throw e;
        }
    }

    private Comp comp(Gpu gpu, Comp cs) {
        cs.ringA = zeroed(gpu, (long) cs.cap * cs.cw * 4, "compressor ring");
        cs.ringZ = zeroed(gpu, (long) cs.cap * cs.cw * 4, "compressor ring");
        cs.log = new EntryLog(gpu.malloc(64L * cs.w * 2, "sequence state: compressed entries"), 64);
        cs.log.writer = cs;
        return cs;
    }

    private long zeroed(Gpu gpu, long bytes, String what) {
        long p = gpu.malloc(bytes, "sequence state: " + what);
        fixed.add(p);
        gpu.memset(p, 0, bytes);
        return p;
    }

    /**
     * Checks that no step failed half-way on this sequence.
     * @throws IllegalStateException when a step failed half-way: the rings may hold rows of positions the sequence
     *         does not have, so it can neither continue nor roll back
     */
    void checkUsable() {
        if (failed != null)
            throw new IllegalStateException("this sequence's device state was lost when a step failed (" + failed
                    + "); start a new sequence");
    }

    @Override
    public int slicedLayers() {
        return chunk.layers();
    }

    @Override
    public int slicedRows() {
        return chunk.rows();
    }

    /** Frees the part-way chunk's buffers (the chunk's last slice has run, or the sequence closes). */
    void dropSlice() {
        Gpu gpu = backend.gpu();
        if (sliceX != 0) gpu.free(sliceX);
        if (sliceV != 0) gpu.free(sliceV);
        sliceX = sliceV = sliceBytes = 0;
        chunk.clear();
    }

    /**
     * Makes rows [count, n) writable and room for n entries: takes the store over when nobody writes it and no
     * snapshot uses rows at or past count, else copies rows [0, count) into a new store of its own; grows the store
     * by doubling (device copy). When a new buffer does not fit, nothing changes and the {@link GpuException}
     * (DS4J_ERR_OOM) names the rows asked for.
     */
    static void ensure(Gpu gpu, Comp cs, int n) {
        EntryLog lg = cs.log;
        boolean writes = n > cs.count;
        boolean mine = (lg.writer == cs || lg.writer == null) && cs.count >= lg.frozen;
        if (writes && !mine) {
            int cap = (int) Math.min(Integer.MAX_VALUE - 8, Math.max(64L, Math.max((long) n, 2L * cs.count)));
            long p = gpu.malloc((long) cap * cs.w * 2, "sequence state: compressed entries (" + cap + " rows)");
            gpu.copy(p, lg.ptr, (long) cs.count * cs.w * 2);
            lg.release(gpu, cs);
            cs.log = new EntryLog(p, cap);
            cs.log.writer = cs;
            return;
        }
        if (writes) lg.writer = cs;
        if (n <= lg.entryCap) return;
        int cap = (int) Math.min(Integer.MAX_VALUE - 8, Math.max((long) n, 2L * lg.entryCap));
        long p = gpu.malloc((long) cap * cs.w * 2, "sequence state: compressed entries (" + cap + " rows)");
        // the writer's rows cover every row a snapshot uses (count >= frozen)
        gpu.copy(p, lg.ptr, (long) Math.max(cs.count, lg.frozen) * cs.w * 2);
        gpu.free(lg.ptr);
        lg.ptr = p;
        lg.entryCap = cap;
    }

    /**
     * Benchmark support: makes this (empty) sequence look as if {@code n} tokens had been forwarded, with random F16
     * cache rows and compressor rows, so that decode can be timed at a long context without its prefill. The values
     * are meaningless; only sizes and access patterns are real. Not for inference.
     */
    void fillRandom(int n, long seed) {
        if (pos.length() != 0) throw new IllegalStateException("fillRandom needs an empty sequence");
        Gpu gpu = backend.gpu();
        java.util.SplittableRandom r = new java.util.SplittableRandom(seed);
        for (LayerState ls : layers) {
            gpu.upload(ls.win, randomF16(r, (long) ls.winCap * cfg.headDim));
            for (Comp cs : new Comp[]{ls.comp, ls.index}) {
                if (cs == null) continue;
                int count = CacheLayout.entries(n, cs.m);
                ensure(gpu, cs, count);
                if (count > 0) gpu.upload(cs.entries(), randomF16(r, (long) count * cs.w));
                float[] ring = new float[cs.cap * cs.cw];
                for (int i = 0; i < ring.length; i++) ring[i] = (float) (r.nextGaussian() * 0.5);
                gpu.upload(cs.ringA, ring);
                gpu.upload(cs.ringZ, ring);
                cs.count = count;
            }
        }
        pos.reset(n);
    }

    /**
     * Copies src's state into this (empty) sequence of the same backend: window rings, compressor rings, compressed
     * entries and indexer keys (device-to-device), and the length. Nothing can be rolled back past the copy.
     * @throws IllegalStateException when this sequence is not empty or the window capacities differ
     */
    void copyFrom(HipSequence src) {
        if (pos.length() != 0) throw new IllegalStateException("copyFrom needs an empty sequence");
        src.chunk.checkNone("fork", cfg.numLayers);
        Gpu gpu = backend.gpu();
        for (int l = 0; l < layers.length; l++) {
            LayerState a = layers[l], b = src.layers[l];
            if (a.winCap != b.winCap)
                throw new IllegalStateException("window capacity " + b.winCap + " of the source differs from " + a.winCap
                        + " (use the same maxRollback)");
            gpu.copy(a.win, b.win, (long) a.winCap * cfg.headDim * 2);
            Comp[] ca = {a.comp, a.index}, cb = {b.comp, b.index};
            for (int i = 0; i < 2; i++) {
                if (ca[i] == null) continue;
                Comp x = ca[i], y = cb[i];
                gpu.copy(x.ringA, y.ringA, (long) x.cap * x.cw * 4);
                gpu.copy(x.ringZ, y.ringZ, (long) x.cap * x.cw * 4);
                ensure(gpu, x, y.count);
                gpu.copy(x.entries(), y.entries(), (long) y.count * y.w * 2);
                x.count = y.count;
            }
        }
        pos.reset(src.pos.length());
    }

    /**
     * A snapshot of this sequence (device-to-device copies of the rings; the entry stores shared and frozen up to
     * their counts). On running out of device memory nothing is kept and the {@link GpuException} propagates.
     */
    Snapshot snapshot() {
        chunk.checkNone("snapshot", cfg.numLayers);
        return new Snapshot(this);
    }

    /**
     * Puts the snapshot's state into this new, empty sequence: copies the rings and takes a share of the stores.
     * @throws IllegalArgumentException for a different rollback window
     */
    void resumeFrom(Snapshot s) {
        if (pos.length() != 0) throw new IllegalStateException("resumeFrom needs an empty sequence");
        if (s.maxRollback != pos.max())
            throw new IllegalArgumentException("snapshot was taken with rollback window " + s.maxRollback + ", not " + pos.max());
        Gpu gpu = backend.gpu();
        for (int l = 0; l < layers.length; l++) {
            LayerState ls = layers[l];
            gpu.copy(ls.win, s.win[l], (long) ls.winCap * cfg.headDim * 2);
            Comp[] mine = {ls.comp, ls.index};
            Snapshot.CompCopy[] theirs = {s.comp[l], s.index[l]};
            for (int i = 0; i < 2; i++) {
                Comp cs = mine[i];
                if (cs == null) continue;
                Snapshot.CompCopy cc = theirs[i];
                gpu.copy(cs.ringA, cc.ringA, cc.ringBytes);
                gpu.copy(cs.ringZ, cc.ringZ, cc.ringBytes);
                cs.log.release(gpu, cs);
                cs.log = cc.log;
                cc.log.refs++;
                cs.count = cc.count;
            }
        }
        pos.reset(s.length);
    }

    /** The GPU backend's {@link io.ds4j.engine.StateSnapshot}: device copies of the rings, shared entry stores. */
    static final class Snapshot implements io.ds4j.engine.StateSnapshot {
        /** One compressor's frozen state: ring copies and a share of its store up to count. */
        static final class CompCopy {
            long ringA, ringZ;
            long ringBytes;
            EntryLog log;
            int count, w;
        }

        final HipBackend backend;
        final int length, maxRollback;
        final long[] win;
        final CompCopy[] comp, index;
        private final List<Long> buffers = new ArrayList<>();
        private final List<SharedRows> shared = new ArrayList<>();
        private long own;
        private boolean closed;

        private Snapshot(HipSequence q) {
            backend = q.backend;
            length = q.pos.length();
            maxRollback = q.pos.max();
            int L = q.layers.length;
            win = new long[L];
            comp = new CompCopy[L];
            index = new CompCopy[L];
            Gpu gpu = backend.gpu();
            try {
                for (int l = 0; l < L; l++) {
                    LayerState ls = q.layers[l];
                    long wb = (long) ls.winCap * q.cfg.headDim * 2;
                    win[l] = copyOf(gpu, ls.win, wb, "window ring");
                    comp[l] = copyOf(gpu, ls.comp);
                    index[l] = copyOf(gpu, ls.index);
                }
            } catch (RuntimeException e) {
                release(gpu);
                throw e;
            }
            for (CompCopy[] arr : new CompCopy[][]{comp, index})
                for (CompCopy c : arr)
                    if (c != null) {
                        c.log.frozen = Math.max(c.log.frozen, c.count);
                        shared.add(new SharedRows(c.log, (long) c.count * c.w * 2));
                    }
        }

        private long copyOf(Gpu gpu, long src, long bytes, String what) {
            long p = gpu.malloc(bytes, "prefix cache snapshot: " + what);
            buffers.add(p);
            own += bytes;
            gpu.copy(p, src, bytes);
            return p;
        }

        private CompCopy copyOf(Gpu gpu, Comp cs) {
            if (cs == null) return null;
            CompCopy c = new CompCopy();
            c.ringBytes = (long) cs.cap * cs.cw * 4;
            c.ringA = copyOf(gpu, cs.ringA, c.ringBytes, "compressor ring");
            c.ringZ = copyOf(gpu, cs.ringZ, c.ringBytes, "compressor ring");
            c.log = cs.log;
            cs.log.refs++;
            c.count = cs.count;
            c.w = cs.w;
            return c;
        }

        private void release(Gpu gpu) {
            for (long p : buffers) gpu.free(p);
            buffers.clear();
            for (CompCopy[] arr : new CompCopy[][]{comp, index})
                for (int i = 0; i < arr.length; i++)
                    if (arr[i] != null) {
                        arr[i].log.release(gpu, null);
                        arr[i] = null;
                    }
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

        boolean closed() {
            return closed;
        }

        /** Frees the ring copies and lets go of the stores (under the backend's lock). */
        @Override
        public void close() {
            if (closed) return;
            closed = true;
            backend.release(() -> release(backend.gpu()));
        }
    }

    private static short[] randomF16(java.util.SplittableRandom r, long n) {
        short[] h = new short[Math.toIntExact(n)];
        for (int i = 0; i < h.length; i++) h[i] = Float.floatToFloat16((float) (r.nextGaussian() * 0.3));
        return h;
    }

    @Override
    public int length() {
        return pos.length();
    }

    @Override
    public void rollback(int k) {
        if (!closed) checkUsable();
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
            b += (long) ls.winCap * cfg.headDim * 2;
            for (Comp cs : new Comp[]{ls.comp, ls.index})
                if (cs != null) b += (long) cs.cap * cs.cw * 4 * 2 + (long) cs.count * cs.w * 2;
        }
        return b + 2 * sliceBytes;
    }

    private void free() {
        dropSlice();
        Gpu gpu = backend.gpu();
        for (long p : fixed) gpu.free(p);
        fixed.clear();
        for (LayerState ls : layers) {
            if (ls == null) continue;
            for (Comp cs : new Comp[]{ls.comp, ls.index})
                if (cs != null && cs.log != null) {
                    cs.log.release(gpu, cs);
                    cs.log = null;
                }
        }
    }

    /** Releases the device memory. */
    @Override
    public void close() {
        if (closed) return;
        closed = true;
        backend.release(this::free);
    }
}
