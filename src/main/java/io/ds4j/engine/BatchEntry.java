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
 */
public record BatchEntry(Sequence seq, int[] tokens, int[] logitRows, StepKind kind, int argmaxBelow) {
    public BatchEntry {
        if (seq == null || tokens == null || logitRows == null || kind == null)
            throw new IllegalArgumentException("a batch entry needs a sequence, tokens, logit rows and a step kind");
        if (argmaxBelow < 0) throw new IllegalArgumentException("argmaxBelow must be >= 0, got " + argmaxBelow);
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
                + (argmaxBelow > 0 ? ", argmax below " + argmaxBelow : "") + "]";
    }
}
