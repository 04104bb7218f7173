package io.ds4j.model;

/**
 * All weights of a DeepSeek-V4 model, by role (spec section 2), independent of the checkpoint's naming scheme
 * and storage dtype. Matrices stay in their stored format ({@link WeightMatrix}); small vectors (norm weights,
 * biases, sinks, position biases) are held as float arrays.
 */
public final class ModelWeights implements AutoCloseable {
    public final ModelConfig config;
    /** [V, D] */
    public WeightMatrix embed;
    /** [n, n·D] */
    public WeightMatrix hcHeadFn;
    /** [n] */
    public float[] hcHeadBase;
    /** [1] */
    public float[] hcHeadScale;
    /** [D] */
    public float[] finalNorm;
    /** [V, D] */
    public WeightMatrix lmHead;
    public Layer[] layers;
    /** The checkpoint's MTP layer (spec 2.6), or null when it has none that can be used ({@link #mtpProblem} says why). */
    public Mtp mtp;
    /** Why {@link #mtp} is null: what the checkpoint holds instead (no mtp.* tensors, another layout, a missing tensor). */
    public String mtpProblem;
    /** Resources to release on close (mapped files), may be null. */
    public AutoCloseable owner;

    public ModelWeights(ModelConfig config) {
        this.config = config;
        this.layers = new Layer[config.numLayers];
    }

    /** Weights of one decoder layer (spec 2.2, 2.3). */
    public static final class Layer {
        /** mHC mappings: fn [(2+n)·n, n·D], base [(2+n)·n], scale [3]. */
        public WeightMatrix attnHcFn, ffnHcFn;
        public float[] attnHcBase, attnHcScale, ffnHcBase, ffnHcScale;
        /** [D] each */
        public float[] inputNorm, postAttnNorm;
        /** [q', D] */
        public WeightMatrix qA;
        /** [q'] */
        public float[] qANorm;
        /** [H·d, q'] */
        public WeightMatrix qB;
        /** [d, D] */
        public WeightMatrix kv;
        /** [d] */
        public float[] kvNorm;
        /** [G·R, H·d/G] */
        public WeightMatrix oA;
        /** [D, G·R] */
        public WeightMatrix oB;
        /** [H] */
        public float[] sinks;
        /** Main compressor (CSA width 2d, HCA width d); null on sliding-only layers. */
        public Compressor compressor;
        /** Indexer (CSA only), else null. */
        public Indexer indexer;
        /** Router [E, D]. */
        public WeightMatrix gate;
        /** e_score_correction_bias [E] on moe layers, null on hash_moe layers. */
        public float[] gateBias;
        /** tid2eid [V·k] (row-major [V, k]) on hash_moe layers, null otherwise. */
        public int[] tid2eid;
        /** Routed experts, per expert: w1 (gate) [I, D], w3 (up) [I, D], w2 (down) [D, I]. */
        public WeightMatrix[] w1, w3, w2;
        /** Shared expert: gate [I, D], up [I, D], down [D, I]. */
        public WeightMatrix sharedW1, sharedW3, sharedW2;
    }

    /**
     * The multi-token-prediction block ({@code mtp.0.*}): one decoder layer (sliding-window attention, top-k MoE, mHC) in
     * {@link #block}, plus the input projections and its own output merge. Embedding and lm_head are the main model's.
     */
    public static final class Mtp {
        /** The decoder layer, shaped by {@link ModelConfig#mtpBlockConfig()}. */
        public Layer block;
        /** [D, D] each: embedding and previous-hidden-state projections. */
        public WeightMatrix eProj, hProj;
        /** [D] each: RMSNorm weights of the embedding, of each previous stream, and the final norm. */
        public float[] enorm, hnorm, norm;
        /** [n, n·D] */
        public WeightMatrix hcHeadFn;
        /** [n] */
        public float[] hcHeadBase;
        /** [1] */
        public float[] hcHeadScale;
    }

    /** A compressor (spec 3.5): per-token values and pooling logits, position bias, entry norm. */
    public static final class Compressor {
        /** [c·w, D] where w = d (or d_I) and c = 2 with overlap (CSA), 1 without (HCA). */
        public WeightMatrix kvProj, gateProj;
        /** [m, c·w] */
        public float[] positionBias;
        /** [w] */
        public float[] norm;
    }

    /** Lightning Indexer (spec 3.6). */
    public static final class Indexer {
        public Compressor compressor;
        /** [H_I·d_I, q'] */
        public WeightMatrix qB;
        /** [H_I, D] */
        public WeightMatrix weightsProj;
    }

    /** Total bytes of stored weight data (matrices only), for reporting. */
    public long storedBytes() {
        long b = embed.storedBytes() + lmHead.storedBytes() + hcHeadFn.storedBytes();
        for (Layer l : layers) {
            b += l.attnHcFn.storedBytes() + l.ffnHcFn.storedBytes() + l.qA.storedBytes() + l.qB.storedBytes()
                    + l.kv.storedBytes() + l.oA.storedBytes() + l.oB.storedBytes() + l.gate.storedBytes()
                    + l.sharedW1.storedBytes() + l.sharedW2.storedBytes() + l.sharedW3.storedBytes();
            if (l.compressor != null) b += l.compressor.kvProj.storedBytes() + l.compressor.gateProj.storedBytes();
            if (l.indexer != null) b += l.indexer.qB.storedBytes() + l.indexer.weightsProj.storedBytes()
                    + l.indexer.compressor.kvProj.storedBytes() + l.indexer.compressor.gateProj.storedBytes();
            for (int e = 0; e < l.w1.length; e++) b += l.w1[e].storedBytes() + l.w2[e].storedBytes() + l.w3[e].storedBytes();
        }
        return b;
    }

    @Override
    public void close() throws Exception {
        if (owner != null) owner.close();
    }
}
