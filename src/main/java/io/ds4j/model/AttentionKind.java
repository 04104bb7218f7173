package io.ds4j.model;

/** Attention kind of one decoder layer (spec 1.2, 3.7). */
public enum AttentionKind {
    /** Sliding window only, {@code main} RoPE. */
    SLIDING("sliding_attention", 0),
    /** Compressed sparse attention: ratio m_C compressor with overlap plus Lightning Indexer top-k. */
    CSA("compressed_sparse_attention", 4),
    /** Heavily compressed attention: ratio m_H compressor, every complete entry attended. */
    HCA("heavily_compressed_attention", 128);

    /** The Hugging Face {@code layer_types} label. */
    public final String hfName;
    /** The legacy {@code compress_ratios} value that maps to this kind. */
    public final int legacyRatio;

    AttentionKind(String hfName, int legacyRatio) {
        this.hfName = hfName;
        this.legacyRatio = legacyRatio;
    }

    /** @throws IllegalArgumentException for an unknown label */
    public static AttentionKind fromHfName(String s) {
        for (AttentionKind k : values()) if (k.hfName.equals(s)) return k;
        throw new IllegalArgumentException("unknown layer type '" + s + "' (expected sliding_attention, "
                + "compressed_sparse_attention or heavily_compressed_attention)");
    }

    /** @throws IllegalArgumentException for a ratio other than 0, 4 or 128 (spec 1.2 rule 2) */
    public static AttentionKind fromLegacyRatio(int r) {
        for (AttentionKind k : values()) if (k.legacyRatio == r) return k;
        throw new IllegalArgumentException("compress_ratios value " + r + " is not one of 0, 4, 128");
    }
}
