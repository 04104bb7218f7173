package io.ds4j.engine;

import java.util.Arrays;

/**
 * One entry of a batched step ({@link Backend#step}): a sequence, the S new tokens it gets in this step (a prefill
 * chunk, one decode token, or the pending token plus q draft tokens), the rows whose next-token logits are wanted, and
 * why the step is run. A sequence appears at most once in a batch.
 *
 * @param seq       the sequence the tokens are appended to (at positions seq.length() ...)
 * @param tokens    the S new token ids (S = tokens.length >= 1); the array is not copied and must not change during the step
 * @param logitRows indices in [0, S) of the tokens whose logits are wanted (may be empty)
 * @param kind      prefill, decode or verify
 */
public record BatchEntry(Sequence seq, int[] tokens, int[] logitRows, StepKind kind) {
    public BatchEntry {
        if (seq == null || tokens == null || logitRows == null || kind == null)
            throw new IllegalArgumentException("a batch entry needs a sequence, tokens, logit rows and a step kind");
    }

    /** The number of new tokens S. */
    public int count() {
        return tokens.length;
    }

    @Override
    public String toString() {
        return kind + "[" + tokens.length + " tokens at " + seq.length() + ", rows " + Arrays.toString(logitRows) + "]";
    }
}
