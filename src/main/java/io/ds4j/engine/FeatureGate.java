package io.ds4j.engine;

import io.ds4j.engine.BackendOptions.ExpertPlacement;

import java.util.ArrayList;
import java.util.List;

/**
 * Which backend options a backend accepts, and what it effectively does with them: an option that cannot apply is
 * refused at start or reported as a diagnostic, never dropped silently. The F16-KV verifier changes
 * only how a verify step (spec 4.2, S = q + 1 rows) reads the F16 cache rows of its key set (spec 3.7), never which
 * rows it attends to.
 *
 * <p>Three steps, all pure functions so that every combination is testable without a GPU:
 * <ol>
 *   <li>{@link #check} at start-up and on every config reload (before anything is opened): the F16-KV verifier is
 *       accepted only with {@code backend: hip} on a single device, and the HIP backend runs on one device. A refusal
 *       names the requirement and the current backend and device count; the server does not start (or a reload is
 *       rejected as a whole).</li>
 *   <li>{@link #requestedPlacement} before the GPU backend loads the weights: with the F16-KV verifier on, {@code auto}
 *       asks for {@code monolithic} (the verifier needs every routed expert on the device).</li>
 *   <li>{@link #resolve} after the load, with the placement the backend actually ended up with: the
 *       {@link EngineStatus} the backend reports from {@link Backend#status()}. On hybrid placement the F16-KV verifier
 *       is off and the status carries {@link #F16KV_HYBRID_WARNING} — the option is never dropped silently.</li>
 * </ol>
 */
public final class FeatureGate {
    private FeatureGate() {}

    /** The diagnostic when the F16-KV verifier was asked for but the routed experts ended up in hybrid placement. */
    public static final String F16KV_HYBRID_WARNING = "F16-KV verifier unavailable with hybrid expert placement; "
            + "using F32 verifier attention (verify.f16Kv requested)";

    /** The backends there are ("cpu": the reference, always available; "hip": one GPU through the native library). */
    public static final List<String> BACKENDS = List.of("cpu", "hip");

    /** Verify attention path names, as {@link EngineStatus#verifyAttention()} reports them. */
    public static final String VERIFY_F32_CONVERT = "f32-convert", VERIFY_F16 = "f16";

    /**
     * The refusal of a backend name that is none of {@link #BACKENDS} ({@code unknown backend 'cuda' (expected one of
     * [cpu, hip])}), or null for a known one: the one wording of the configuration, the CLI and the backends' opening.
     */
    public static String unknownBackend(String name) {
        return BACKENDS.contains(name) ? null : "unknown backend '" + name + "' (expected one of " + BACKENDS + ")";
    }

    /**
     * Checks options against a backend before it is opened. Every message starts with the configuration key it is
     * about ({@code "verify.f16Kv: ..."}, {@code "gpu.devices: ..."}), so the server can blame the flag or the file
     * that set it.
     *
     * @param backend the configured backend name ("cpu" or "hip"; other names are refused elsewhere)
     * @param o       the options (already range-checked by their constructor)
     * @return one message per refused option, each naming the requirement and the current backend and devices;
     *         empty = accepted
     */
    public static List<String> check(String backend, BackendOptions o) {
        List<String> refused = new ArrayList<>();
        boolean hip = "hip".equals(backend);
        if (o.f16KvVerify() && !f16KvVerifierPossible(backend, o.devices()))
            refused.add("verify.f16Kv: the F16-KV verifier (--fused-verify-f16-kv) requires backend hip on a single device;"
                    + " current: " + current(backend, o.devices()));
        // the HIP backend drives one device; a larger count would otherwise be ignored without a word
        if (hip && o.devices() > 1)
            refused.add("gpu.devices: backend hip runs on a single device (no multi-device split); current: "
                    + current(backend, o.devices()));
        return refused;
    }

    /**
     * Whether the F16-KV verifier can run on a backend and device count (backend hip on a single device), so that a
     * backend may offer both verify attention paths; a hybrid expert placement still leaves it the control alone.
     */
    public static boolean f16KvVerifierPossible(String backend, int devices) {
        return "hip".equals(backend) && devices == 1;
    }

    private static String current(String backend, int devices) {
        return "backend " + backend + " on " + devices + (devices == 1 ? " device" : " devices");
    }

    /**
     * The placement a GPU backend should load with (the F16-KV verifier needs the whole model on the device, so the
     * monolithic-load decision includes that option): {@code auto} becomes {@code monolithic} when the F16-KV verifier is on; otherwise the configured
     * placement. With {@code monolithic} requested this way and the model not fitting the device budget, the backend
     * may still fall back to {@code hybrid} (as {@code auto} does), and {@link #resolve} then reports the diagnostic;
     * only an explicitly configured {@code monolithic} makes a model that does not fit a start-up error.
     */
    public static ExpertPlacement requestedPlacement(BackendOptions o) {
        return o.placement() == ExpertPlacement.AUTO && o.f16KvVerify() ? ExpertPlacement.MONOLITHIC : o.placement();
    }

    /** Why {@link #requestedPlacement} asks for what it does, for the start-up log (names every reason, on or off). */
    public static String placementReason(BackendOptions o) {
        ExpertPlacement r = requestedPlacement(o);
        return r.key() + " requested: gpu.expertPlacement " + o.placement().key() + ", verify.f16Kv "
                + (o.f16KvVerify() ? "on" : "off");
    }

    /**
     * The effective state of a GPU backend after loading. Contract for the GPU backend: call it once the weights are
     * placed, with the placement it ended up with, and return the result from {@link Backend#status()}; run verify
     * steps on the {@code f16} path exactly when {@link EngineStatus#f16KvActive()} is true. The function does not log;
     * whoever opened the backend reports {@link EngineStatus#diagnostic()} (the server logs it as a warning at start-up
     * and shows it in {@code /props} and {@code /metrics}; {@code ds4j generate} prints it on stderr).
     *
     * @param backend     the backend's name ("hip")
     * @param o           the options the backend was opened with (accepted by {@link #check})
     * @param effective   where the routed experts ended up: {@code MONOLITHIC} or {@code HYBRID}, never {@code AUTO}
     * @param hostExperts routed experts (summed over layers) kept in host memory; 0 with monolithic placement
     * @return the status: F16-KV active only on monolithic placement; on hybrid with the option requested, inactive
     *         with {@link #F16KV_HYBRID_WARNING} as the diagnostic
     * @throws IllegalArgumentException when the gate refuses the options, {@code effective} is {@code AUTO} or null,
     *         {@code hostExperts} is negative or non-zero with monolithic placement, or an explicitly configured
     *         {@code monolithic} placement ended up hybrid (that must be a start-up error instead)
     */
    public static EngineStatus resolve(String backend, BackendOptions o, ExpertPlacement effective, int hostExperts) {
        List<String> refused = check(backend, o);
        if (!refused.isEmpty()) throw new IllegalArgumentException(String.join("; ", refused));
        if (effective == null || effective == ExpertPlacement.AUTO)
            throw new IllegalArgumentException("effective expert placement must be monolithic or hybrid, got " + effective);
        if (hostExperts < 0 || (effective == ExpertPlacement.MONOLITHIC && hostExperts != 0))
            throw new IllegalArgumentException("host experts must be 0 with monolithic placement and >= 0 with hybrid, got "
                    + hostExperts + " with " + effective.key());
        if (o.placement() == ExpertPlacement.MONOLITHIC && effective == ExpertPlacement.HYBRID)
            throw new IllegalArgumentException("gpu.expertPlacement monolithic was configured but the backend ended up hybrid;"
                    + " a model that does not fit must fail at start-up");
        boolean active = o.f16KvVerify() && effective == ExpertPlacement.MONOLITHIC;
        String diagnostic = o.f16KvVerify() && !active ? F16KV_HYBRID_WARNING : null;
        return new EngineStatus(backend, effective.key(), hostExperts, o.f16KvVerify(), active,
                active ? VERIFY_F16 : VERIFY_F32_CONVERT, o.f32ShortContextRows(), diagnostic);
    }

    /**
     * One line for the start-up log: what the backend decided and why (backend, placement and its reason, verify
     * attention path and threshold). {@link EngineStatus#diagnostic()} is not repeated here: it gets its own warning.
     */
    public static String explain(String backend, BackendOptions o, EngineStatus s) {
        StringBuilder b = new StringBuilder("backend ").append(s.backend());
        if (!"hip".equals(backend)) {
            b.append(": routed experts in host memory, verify attention ").append(s.verifyAttention())
                    .append(" over the F16 cache (gpu.* and verify.f32ShortContextRows apply to backend hip only)");
        } else {
            b.append(" on ").append(o.devices()).append(o.devices() == 1 ? " device" : " devices")
                    .append(", memory budget ").append(o.deviceMemoryBudget() == 0 ? "all free device memory"
                            : (o.deviceMemoryBudget() >> 20) + " MiB")
                    .append(": expert placement ").append(s.expertPlacement()).append(" (").append(placementReason(o)).append(")");
            if (s.hostExperts() > 0) b.append(", ").append(s.hostExperts()).append(" routed experts in host memory");
            b.append("; verify attention ").append(s.verifyAttention());
            if (!s.f16KvActive()) b.append(s.f16KvRequested() ? " (verify.f16Kv requested but off, see the warning)" : " (verify.f16Kv off)");
            // the threshold holds for decode and verify steps on both verify paths (HipBackend's attention arithmetic)
            b.append("; attention in plain F32 up to ").append(s.f32ShortContextRows())
                    .append(" attended rows per query, on tensor cores at F32 accuracy above (nvcc builds; hipcc builds stay in F32)");
        }
        return b.toString();
    }
}
