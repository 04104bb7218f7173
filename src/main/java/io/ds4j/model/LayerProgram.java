package io.ds4j.model;

/**
 * The DeepSeek-V4 forward (spec section 3), written once over one step of a batch: R rows in all, the new tokens of
 * every entry of the step concatenated in entry order. The backends implement the coarse operations ({@link Ops});
 * this class fixes their order:
 * <pre>
 *   X = embed                                              3.1
 *   for each layer l:
 *     X = mixPost(X, attention(l, norm(mixPre(X, l, ATTENTION))))   3.2-3.7
 *     X = mixPost(X, moe(l, norm(mixPre(X, l, MOE))))               3.2, 3.8
 *   logits = head(X)                                       3.9
 * </pre>
 * Row-wise operations (mHC, norms, the MoE, the head, every matrix product) see all R rows at once; attention,
 * compressors, indexer and caches are per entry, at that entry's positions. A row's numbers must not depend on the other
 * rows of the step (batch invariance): an implementation whose kernel choice depends on a row count keys it on the
 * entry's own count, never on R.
 *
 * <p>Shapes below: D = hidden, n = hc_mult, V = vocabulary; A is the backend's handle of an F32 activation matrix
 * (a host array, a device address).
 */
public final class LayerProgram {
    private LayerProgram() {}

    /** The two mHC sites of a layer (spec 3.3): before the attention block and before the MoE block. */
    public enum Site { ATTENTION, MOE }

    /**
     * The coarse operations of one step, bound to that step's batch (its entries, their token ids and positions).
     * @param <A> handle of an F32 activation matrix
     */
    public interface Ops<A> {
        /** 3.1: the residual streams X [R, n·D], every stream of row r the embedding of its token. */
        A embed();

        /**
         * 3.2 mHC pre-mapping of a site over all rows: keeps post [R, n] and the Sinkhorn matrix [R, n, n] for the
         * next {@link #mixPost}, and returns the collapsed input Σ pre_i X_i [R, D].
         */
        A mixPre(A X, int layer, Site site);

        /** RMSNorm in place of x [R, D] with the site's weight (input_layernorm, post_attention_layernorm). */
        void norm(A x, int layer, Site site);

        /**
         * 3.4-3.7 attention block of a layer: x [R, D] -> output [R, D]. Per entry: queries, shared kv, compressors,
         * indexer and the cache, at the entry's positions; the window ring, compressor rings and entry stores of the
         * entry's sequence take the new rows.
         */
        A attention(int layer, A x);

        /**
         * 3.8 MoE block of a layer: x [R, D] -> output [R, D]: routing (hash routing by token id on hash layers), the
         * routed experts grouped across all rows, the shared expert, the weighted combination.
         */
        A moe(int layer, A x);

        /** 3.2 mHC post-mapping over all rows, in place: X'_k = post_k · f + Σ_j M_jk X_j (X [R, n·D], f [R, D]). */
        void mixPost(A X, A f);

        /** The end of a site: scratch taken since its {@link #mixPre} may be reused (a no-op on the host). */
        default void siteDone() {}

        /** 3.9: hc_head merge, final norm and lm_head for the requested rows of every entry: logits [Σ R_e, V]. */
        A head(A X);
    }

    /**
     * Runs the forward of one step.
     * @param layers number of layers to run (the config's num_hidden_layers)
     * @return what {@link Ops#head} returns
     */
    public static <A> A run(Ops<A> ops, int layers) {
        return ops.head(layers(ops, ops.embed(), 0, layers));
    }

    /**
     * Runs layers [from, to) on the streams X (updated in place) and returns them: a part of {@link #run} for a prefill
     * chunk run in layer slices, whose streams carry over from one slice to the next. Every layer sees what it sees in
     * {@link #run}, so a chunk run slice by slice gives the same numbers.
     * @param X the streams [R, n·D] after layer from − 1 ({@link Ops#embed} for from = 0)
     */
    public static <A> A layers(Ops<A> ops, A X, int from, int to) {
        for (int l = from; l < to; l++) {
            A col = ops.mixPre(X, l, Site.ATTENTION);
            ops.norm(col, l, Site.ATTENTION);
            ops.mixPost(X, ops.attention(l, col));
            ops.siteDone();
            col = ops.mixPre(X, l, Site.MOE);
            ops.norm(col, l, Site.MOE);
            ops.mixPost(X, ops.moe(l, col));
            ops.siteDone();
        }
        return X;
    }
}
