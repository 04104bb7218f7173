package io.ds4j.engine;

/**
 * The verify attention paths of the GPU backend. Both attend to the same rows with the same masks and
 * operation order; they differ in how the persistent F16 MLA cache is read on {@link StepKind#VERIFY} steps.
 */
public enum VerifyAttention {
    /** The control: each verify step converts the layer's complete F16 cache rows to an F32 scratch, then attends in F32. */
    F32_CONVERT("f32-convert"),
    /**
     * Reads the F16 rows directly with F32 accumulation; Q·Kᵀ and P·V stay in full F32 up to
     * {@link BackendOptions#f32ShortContextRows()} attended rows, above it F16 operands on tensor cores.
     */
    F16("f16");

    private final String key;

    VerifyAttention(String key) {
        this.key = key;
    }

    /** The spelling used in logs, /props and the benchmark ("f32-convert", "f16"). */
    public String key() {
        return key;
    }
}
