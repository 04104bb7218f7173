package io.ds4j.engine;

/**
 * Benchmark support a backend may offer for very long contexts (the F16-KV verifier's matched table goes to V4's
 * 1,048,576 tokens, where a real prefill would take hours on a random model): a sequence can be given a context of
 * random cache rows instead of a prefill, and the verify control's per-step cache conversion can be timed on its own.
 * Not for inference: a synthetic context's values are meaningless; only its sizes and access patterns are real.
 */
public interface SyntheticContext {
    /**
     * Makes an empty sequence look as if {@code n} tokens had been forwarded: random F16 cache rows (window ring,
     * compressed entries, indexer keys) and compressor rows.
     * @throws IllegalStateException when the sequence is not empty
     * @throws IllegalArgumentException when the sequence is not this backend's
     */
    void fillSynthetic(Sequence seq, int n, long seed);

    /**
     * Milliseconds the {@link VerifyAttention#F32_CONVERT} control spends per verify step converting the sequence's
     * complete F16 cache to F32 (every layer's window ring, compressed entries and indexer keys at its current length),
     * timed alone on the device (median of {@code reps} runs).
     */
    double verifyConversionMillis(Sequence seq, int reps);

    /** Device memory free now, in bytes. */
    long freeDeviceBytes();
}
