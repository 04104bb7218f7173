package io.ds4j.engine;

import io.ds4j.model.ModelConfig;

/**
 * A compute backend for one DeepSeek-V4 model. One step function serves prefill chunks, decode and speculative
 * verification (spec 4.2): S ≥ 1 new tokens go in, logits come back only for the rows asked for.
 */
public interface Backend extends AutoCloseable {
    /** Short name ("cpu", "hip"). */
    String name();

    ModelConfig config();

    /**
     * A new, empty sequence.
     * @param maxRollback how many tokens {@link Sequence#rollback} must be able to remove (default 16)
     */
    Sequence newSequence(int maxRollback);

    /**
     * Runs tokens[off .. off+count) at positions seq.length() … and appends them to the sequence.
     * @param logitRows indices in [0, count) of the new tokens whose next-token logits are wanted (may be empty)
     * @return logits [logitRows.length, V], row-major
     * @throws IllegalArgumentException for a token id outside [0, V) or a bad row index; the sequence is unchanged then
     */
    float[] forward(Sequence seq, int[] tokens, int off, int count, int[] logitRows);

    /** Bytes of per-sequence state at a given context length (tokens), with the given rollback window. */
    long stateBytes(int contextTokens, int maxRollback);

    @Override
    void close();
}
