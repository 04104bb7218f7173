package io.ds4j.engine;

/**
 * What a backend actually does after start-up, for {@code /props}, {@code /metrics} and the start-up log (issue 8
 * item 4: an option is never dropped silently).
 *
 * @param backend            "cpu" or "hip"
 * @param expertPlacement    effective placement: "host" (cpu backend), "monolithic" or "hybrid"
 * @param hostExperts        routed experts kept in host memory (hybrid), 0 otherwise
 * @param f16KvRequested     the F16-KV verifier was asked for
 * @param f16KvActive        verify steps read the F16 cache directly
 * @param verifyAttention    "f32-convert" or "f16", the verify attention path in use
 * @param f32ShortContextRows the F16 path's full-F32 threshold (attended rows)
 * @param diagnostic         why a requested feature is off (null when nothing was dropped)
 */
public record EngineStatus(String backend, String expertPlacement, int hostExperts, boolean f16KvRequested,
                           boolean f16KvActive, String verifyAttention, int f32ShortContextRows, String diagnostic) {

    /** The CPU backend: experts in host memory, F32 verify attention on F16 rows (there is no conversion path). */
    public static EngineStatus cpu() {
        return new EngineStatus("cpu", "host", 0, false, false, "f32", BackendOptions.DEFAULT_SHORT_ROWS, null);
    }
}
