package io.ds4j.cpu;

import io.ds4j.engine.CacheLayout;
import io.ds4j.engine.RollbackWindow;
import io.ds4j.engine.Sequence;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.ModelConfig;

import java.util.Arrays;

/**
 * Per-sequence state of the CPU backend (spec section 4), laid out so that rollback is a pointer move:
 * <ul>
 *   <li>raw window: a ring of W−1+k_max F16 rows [d] per layer, indexed by position mod capacity;</li>
 *   <li>compressors (CSA, HCA, indexer): a ring of the raw per-token (a, z) rows in F32 [c·w each], long enough to
 *       rebuild the incomplete window and, with overlap, the previous window's Ca (2m + k_max rows; m + k_max
 *       without overlap). The HF "buffer" and "overlap" are views of that ring, so nothing is copied on rollback;</li>
 *   <li>compressed entries and indexer keys: append-only F16 arrays [count, w]; rollback truncates the count.</li>
 * </ul>
 */
public final class CpuSequence implements Sequence {
    final ModelConfig cfg;
    /** Length and rollback window. */
    final RollbackWindow pos;
    final LayerState[] layers;
    boolean closed;

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

    /** One compressor's state: raw (a, z) ring plus the append-only entries. */
    static final class CompressorState {
        final int m, w, cw, cap;
        final boolean overlap;
        final float[] ringA, ringZ;
        short[] entries;
        int count;

        CompressorState(int m, int w, boolean overlap, int kMax) {
            this.m = m;
            this.w = w;
            this.overlap = overlap;
            this.cw = overlap ? 2 * w : w;
            this.cap = CacheLayout.compressorRows(m, overlap, kMax);
            ringA = new float[cap * cw];
            ringZ = new float[cap * cw];
            entries = new short[16 * w];
        }

        void ensure(int n) {
            if ((long) n * w > entries.length)
                entries = Arrays.copyOf(entries, (int) Math.max((long) n * w, Math.min(Integer.MAX_VALUE - 8, 2L * entries.length)));
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
    public void rollback(int k) {
        int n = pos.rollback(k, closed);
        for (LayerState ls : layers) {
            if (ls.comp != null) ls.comp.count = n / ls.comp.m;
            if (ls.index != null) ls.index.count = n / ls.index.m;
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
        return b;
    }

    @Override
    public void close() {
        closed = true;
    }
}
