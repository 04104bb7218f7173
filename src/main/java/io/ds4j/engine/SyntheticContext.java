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
     * The {@link VerifyAttention#F32_CONVERT} control's per-step conversion of a sequence's complete F16 cache to F32
     * (every layer's window ring, compressed entries and indexer keys at its current length), timed two ways.
     * @param aloneMs milliseconds timed alone on the device, the copies launched one by one by the host (median of the
     *                runs): the conversion of a step that runs kernel by kernel, host launch cost included
     * @param graphMs milliseconds per conversion replayed from a graph captured once (mean of back-to-back replays),
     *                launched as a control verify step replayed from a kept graph launches it: what such a step pays
     *                for it; NaN where such a step would not be replayed from a kept graph (graphs switched off or
     *                unavailable, a profiled step, or a step the backend runs in its other form)
     */
    record Conversion(double aloneMs, double graphMs) {
        /** Not measured: no conversion to time. */
        public static final Conversion NONE = new Conversion(Double.NaN, Double.NaN);
    }

    /**
     * Times the control's conversion for {@code seq} ({@link Conversion}): {@code reps} runs alone (their median) and
     * 4 × {@code reps} replays of the graph after one warm-up (their mean), the graph holding the copies a control
     * verify step of {@code rows} rows at the sequence's length launches.
     * @throws IllegalArgumentException when the sequence is not this backend's, or rows is not positive
     */
    Conversion verifyConversion(Sequence seq, int rows, int reps);

    /** Device memory free now, in bytes. */
    long freeDeviceBytes();
}
