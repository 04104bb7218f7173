package io.ds4j.engine;

/**
 * What a backend actually does after start-up, for {@code /props}, {@code /metrics} and the start-up log (so an
 * option is never dropped silently). The GPU backend builds it with {@link FeatureGate#resolve}; it does
 * not change after the backend is opened.
 *
 * @param backend             "cpu" or "hip"
 * @param expertPlacement     effective placement: "host" (cpu backend), "monolithic" or "hybrid"
 * @param hostExperts         routed experts (summed over layers) kept in host memory with hybrid placement, 0 otherwise
 * @param f16KvRequested      the F16-KV verifier was asked for ({@code verify.f16Kv})
 * @param f16KvActive         verify steps read the F16 cache directly
 * @param verifyAttention     the verify attention path in use: "f32-convert" or "f16" (GPU), "f32" (cpu: F32
 *                            attention over its F16 cache, no conversion step)
 * @param f32ShortContextRows attended rows per query up to which the GPU's decode and verify attention stays in plain
 *                            F32 (tensor cores at F32 accuracy above, on both verify paths); 0 when the backend has no
 *                            such rule (cpu)
 * @param diagnostic          why a requested feature is off, e.g. {@link FeatureGate#F16KV_HYBRID_WARNING}; null when
 *                            nothing was dropped
 */
public record EngineStatus(String backend, String expertPlacement, int hostExperts, boolean f16KvRequested,
                           boolean f16KvActive, String verifyAttention, int f32ShortContextRows, String diagnostic) {

    /** @throws IllegalArgumentException for a missing name or a negative count */
    public EngineStatus {
        if (backend == null || expertPlacement == null || verifyAttention == null)
            throw new IllegalArgumentException("backend, expert placement and verify attention must be set");
        if (hostExperts < 0 || f32ShortContextRows < 0)
            throw new IllegalArgumentException("host experts and the F32 threshold must be >= 0, got " + hostExperts
                    + " and " + f32ShortContextRows);
        if (f16KvActive && !f16KvRequested) throw new IllegalArgumentException("F16-KV active but not requested");
    }

    /** The CPU backend: experts in host memory, F32 verify attention on F16 rows (there is no conversion path). */
    public static EngineStatus cpu() {
        return new EngineStatus("cpu", "host", 0, false, false, "f32", 0, null);
    }
}
