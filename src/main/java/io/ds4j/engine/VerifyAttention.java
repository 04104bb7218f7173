package io.ds4j.engine;

/**
 * The verify attention paths of the GPU backend. Both attend to the same rows with the same masks and the same
 * arithmetic (plain F32 up to {@link BackendOptions#f32ShortContextRows()} attended rows, tensor cores at F32 accuracy
 * above), so they give the same logits bit for bit; they differ only in how the persistent F16 MLA cache is read on
 * {@link StepKind#VERIFY} steps.
 */
public enum VerifyAttention {
    /** The control: each verify step converts the layer's complete F16 cache rows to an F32 scratch and attends on it. */
    F32_CONVERT("f32-convert"),
    /** Reads the F16 rows in place, as decode steps do (no conversion). */
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
