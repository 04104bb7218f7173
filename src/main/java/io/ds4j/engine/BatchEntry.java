package io.ds4j.engine;

import java.util.Arrays;

/**
 * One entry of a batched step ({@link Backend#step}): a sequence, the S new tokens it gets in this step (a prefill
 * chunk, one decode token, or the pending token plus q draft tokens), the rows whose next-token logits are wanted, and
 * why the step is run. A sequence appears at most once in a batch.
 *
 * @param seq         the sequence the tokens are appended to (at positions seq.length() ...)
 * @param tokens      the S new token ids (S = tokens.length >= 1); the array is not copied and must not change during
 *                    the step
 * @param logitRows   indices in [0, S) of the tokens whose logits are wanted (may be empty)
 * @param kind        prefill, decode or verify
 * @param argmaxBelow 0: the logit rows' full logits are wanted; n in [1, V]: only each logit row's greedy token is
 *                    wanted, the index of its largest logit among token ids [0, n) (lowest id on ties, as
 *                    {@link io.ds4j.sampling.Sampler#argmax}), which {@link Backend#stepArgmax} answers with token ids
 *                    instead of logits (a backend on a device copies 4 bytes per row to the host instead of 4·V)
 * @param layers      null: the entry runs through every layer (embedding to logits); else a prefill chunk runs only
 *                    these layers in this step ({@link Layers}; backends that say {@link Backend#layerSlices})
 * @param argmaxMasks null, or for an argmax-only entry per logit row the token ids its greedy token is chosen among:
 *                    a bitset (bit {@code id & 63} of word {@code id >> 6}, missing words clear), a constraint's
 *                    allowed set ({@link io.ds4j.sampling.Constraint#allowed}); the row's token is then the argmax of
 *                    its logits with every other id at −∞, exactly the greedy token of
 *                    {@link io.ds4j.sampling.Sampler#distribution(float[], int, long[])}; a null row has no mask. Only
 *                    for backends that say {@link Backend#argmaxMasks}. The arrays are not copied and must not change
 *                    during the step
 */
public record BatchEntry(Sequence seq, int[] tokens, int[] logitRows, StepKind kind, int argmaxBelow, Layers layers,
                         long[][] argmaxMasks) {
    public BatchEntry {
        if (seq == null || tokens == null || logitRows == null || kind == null)
            throw new IllegalArgumentException("a batch entry needs a sequence, tokens, logit rows and a step kind");
        if (argmaxBelow < 0) throw new IllegalArgumentException("argmaxBelow must be >= 0, got " + argmaxBelow);
        if (layers != null && kind != StepKind.PREFILL)
            throw new IllegalArgumentException("only a prefill chunk runs in layer slices, not a " + kind + " step");
        if (argmaxMasks != null && (argmaxBelow == 0 || argmaxMasks.length != logitRows.length))
            throw new IllegalArgumentException("argmax masks need an argmax-only entry and one mask per logit row, got "
                    + argmaxMasks.length + " for " + logitRows.length + " rows" + (argmaxBelow == 0 ? " and full logits" : ""));
    }

    /** An entry without argmax masks. */
    public BatchEntry(Sequence seq, int[] tokens, int[] logitRows, StepKind kind, int argmaxBelow, Layers layers) {
        this(seq, tokens, logitRows, kind, argmaxBelow, layers, null);
    }

    /**
     * Layers [from, to) of a prefill chunk, for a step that runs only part of the chunk's forward: the chunk's residual
     * streams after layer to − 1 stay with the sequence ({@link Sequence#slicedLayers}) until a later step runs the next
     * slice of the same chunk; the slice that ends at the last layer computes the logit rows and appends the chunk's
     * tokens to the sequence, with the same numbers as the whole chunk in one step (every layer sees the same inputs).
     * Until then the sequence keeps its length and takes no other step, rollback, snapshot or fork; only the last
     * slice may ask for logit rows. A scheduler runs a chunk this way so that a step beside running decodes stays
     * within its latency bound even where a whole chunk of the fewest useful tokens would not
     * ({@link PrefillBudget}).
     * @param from first layer, 0 for the chunk's first slice (which starts from the embedding)
     * @param to   one past the last layer, at most the model's layer count
     * @throws IllegalArgumentException when from is negative or to is not above from
     */
    public record Layers(int from, int to) {
        public Layers {
            if (from < 0 || to <= from) throw new IllegalArgumentException("layer slice [" + from + ", " + to + ") is empty or negative");
        }

        /** True when the slice ends at the last of {@code numLayers} layers (the chunk completes). */
        public boolean last(int numLayers) {
            return to == numLayers;
        }
    }

    /** An entry through every layer. */
    public BatchEntry(Sequence seq, int[] tokens, int[] logitRows, StepKind kind, int argmaxBelow) {
        this(seq, tokens, logitRows, kind, argmaxBelow, null);
    }

    /** An entry whose logit rows' full logits are wanted. */
    public BatchEntry(Sequence seq, int[] tokens, int[] logitRows, StepKind kind) {
        this(seq, tokens, logitRows, kind, 0);
    }

    /** The number of new tokens S. */
    public int count() {
        return tokens.length;
    }

    /** True when only the logit rows' greedy tokens are wanted (see {@link #argmaxBelow}). */
    public boolean argmaxOnly() {
        return argmaxBelow > 0;
    }

    @Override
    public String toString() {
        return kind + "[" + tokens.length + " tokens at " + seq.length() + ", rows " + Arrays.toString(logitRows)
                + (argmaxBelow > 0 ? ", argmax below " + argmaxBelow + (argmaxMasks != null ? " among masks" : "") : "")
                + (layers != null ? ", layers " + layers.from() + ".." + (layers.to() - 1) : "") + "]";
    }
}
