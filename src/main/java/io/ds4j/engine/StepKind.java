package io.ds4j.engine;

/**
 * Why a forward step runs. The numerics of prefill and decode never depend on it; a backend may pick a different
 * implementation of the same operation per kind (the GPU backend's verify attention path applies only to
 * {@link #VERIFY} steps, as in the reference system's fused verifier).
 */
public enum StepKind {
    /** A prompt chunk (S ≥ 1 rows, usually only the last row's logits wanted). */
    PREFILL,
    /** One new token (S = 1) of plain autoregressive decoding, or a draft model's step. */
    DECODE,
    /** Speculative verification: the last accepted token plus q draft tokens (S = q + 1), every row's logits wanted. */
    VERIFY
}
