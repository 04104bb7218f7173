package io.ds4j.engine;

import io.ds4j.model.AttentionKind;
import io.ds4j.model.ModelConfig;

/**
 * The per-sequence state layout every backend uses (spec section 4), so that capacities and the byte count are
 * defined once:
 * <ul>
 *   <li>raw window: a ring of W−1+k_max F16 rows [d] per layer (the last W−1 rows plus room to roll back k_max);</li>
 *   <li>compressors: a ring of raw (a, z) F32 rows [c·w each], 2m + k_max rows with overlap (CSA and indexer: the
 *       previous window's Ca and the incomplete window), m + k_max without (HCA);</li>
 *   <li>compressed entries and indexer keys: append-only F16 rows, ⌊N/m⌋ of them.</li>
 * </ul>
 */
public final class CacheLayout {
    private CacheLayout() {}

    /**
     * Compressed entries (or indexer keys) of a compressor of ratio m over n tokens: ⌊n / m⌋ — an entry exists once
     * its window of m tokens is complete. Every backend's sequence state counts its entries with this.
     */
    public static int entries(long n, int m) {
        return (int) (n / m);
    }

    /** Rows of the raw window ring: W − 1 + k_max (at least 1). */
    public static int windowRows(ModelConfig c, int maxRollback) {
        return Math.max(1, c.slidingWindow - 1 + maxRollback);
    }

    /** Rows of a compressor's raw (a, z) ring: 2m + k_max with overlap, m + k_max without. */
    public static int compressorRows(int m, boolean overlap, int maxRollback) {
        return (overlap ? 2 * m : m) + maxRollback;
    }

    /**
     * Bytes of one sequence's state at a context length: F16 window rings, F32 compressor rings (values and logits),
     * F16 compressed entries and indexer keys.
     * @param ctx context length in tokens
     */
    public static long stateBytes(ModelConfig c, int ctx, int maxRollback) {
        long b = 0;
        for (int l = 0; l < c.numLayers; l++) {
            b += (long) windowRows(c, maxRollback) * c.headDim * 2;
            AttentionKind k = c.layerTypes[l];
            if (k != AttentionKind.SLIDING) {
                int m = c.ratio(l);
                boolean ov = k == AttentionKind.CSA;
                b += (long) compressorRows(m, ov, maxRollback) * (ov ? 2 : 1) * c.headDim * 4 * 2 + (long) entries(ctx, m) * c.headDim * 2;
            }
            if (k == AttentionKind.CSA) {
                int m = c.csaRatio;
                b += (long) compressorRows(m, true, maxRollback) * 2 * c.indexHeadDim * 4 * 2 + (long) entries(ctx, m) * c.indexHeadDim * 2;
            }
        }
        return b;
    }

    /**
     * Checks a rollback request against what the rings still hold.
     * @throws IllegalStateException when the sequence is closed
     * @throws IllegalArgumentException when k is negative or larger than rollbackable
     */
    public static void checkRollback(int k, int rollbackable, int maxRollback, boolean closed) {
        if (closed) throw new IllegalStateException("sequence is closed");
        if (k < 0) throw new IllegalArgumentException("rollback count must be >= 0, got " + k);
        if (k > rollbackable)
            throw new IllegalArgumentException("cannot roll back " + k + " tokens: at most " + rollbackable
                    + " can be removed now (max rollback " + maxRollback + ")");
    }
}
