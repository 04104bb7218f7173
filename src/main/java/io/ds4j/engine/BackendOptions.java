package io.ds4j.engine;

/**
 * What a backend is asked for at start-up, beyond the model itself (server config keys in brackets).
 *
 * @param devices             GPUs to use [{@code gpu.devices}]; the HIP backend runs on one device, more is refused
 * @param placement           where routed experts live [{@code gpu.expertPlacement}]
 * @param deviceMemoryBudget  bytes of device memory the weights may use, 0 = everything the device has free less a
 *                            reserve for the workspace and the caches [{@code gpu.memoryBudgetMiB}]
 * @param f16KvVerify         verify attention reads the persistent F16 cache directly instead of converting it to F32
 *                            on every verify step (the same numbers) [{@code verify.f16Kv}, {@code --fused-verify-f16-kv}]
 * @param f32ShortContextRows on the GPU, a query whose attended row count is at most this keeps Q·Kᵀ and P·V in plain
 *                            F32, above it they run on tensor cores at F32 accuracy (decode and verify steps)
 *                            [{@code verify.f32ShortContextRows}], valid {@value #MIN_SHORT_ROWS} to
 *                            {@value #MAX_SHORT_ROWS}
 */
public record BackendOptions(int devices, ExpertPlacement placement, long deviceMemoryBudget, boolean f16KvVerify,
                             int f32ShortContextRows) {
    public static final int MIN_SHORT_ROWS = 1, MAX_SHORT_ROWS = 4096, DEFAULT_SHORT_ROWS = 512;

    /** One device, automatic placement, no budget, the F32-convert verify path (the defaults of conf/server.json). */
    public static final BackendOptions DEFAULTS = new BackendOptions(1, ExpertPlacement.AUTO, 0, false, DEFAULT_SHORT_ROWS);

    /** @throws IllegalArgumentException for a value out of range, naming the option */
    public BackendOptions {
        if (devices < 1) throw new IllegalArgumentException("gpu.devices: must be at least 1, got " + devices);
        if (placement == null) throw new IllegalArgumentException("gpu.expertPlacement: must be set");
        if (deviceMemoryBudget < 0)
            throw new IllegalArgumentException("gpu.memoryBudgetMiB: the device memory budget must be >= 0 bytes, got " + deviceMemoryBudget);
        if (f32ShortContextRows < MIN_SHORT_ROWS || f32ShortContextRows > MAX_SHORT_ROWS)
            throw new IllegalArgumentException("verify.f32ShortContextRows: must be an integer in [" + MIN_SHORT_ROWS + ", "
                    + MAX_SHORT_ROWS + "], got " + f32ShortContextRows);
    }

    /** Bytes in a MiB, for {@code gpu.memoryBudgetMiB}. */
    public static long mib(long n) {
        return n << 20;
    }

    public BackendOptions withF16KvVerify(boolean on) {
        return new BackendOptions(devices, placement, deviceMemoryBudget, on, f32ShortContextRows);
    }

    public BackendOptions withPlacement(ExpertPlacement p) {
        return new BackendOptions(devices, p, deviceMemoryBudget, f16KvVerify, f32ShortContextRows);
    }

    /** Where the routed experts of a GPU backend live. */
    public enum ExpertPlacement {
        /** Monolithic when the whole model fits the device budget, else hybrid; with the F16-KV verifier on, asks for monolithic. */
        AUTO,
        /** Every routed expert in device memory; a model that does not fit is a start-up error. */
        MONOLITHIC,
        /** Routed experts beyond the device budget stay in host memory and run on the CPU kernels. */
        HYBRID;

        /** Lower-case config spelling. */
        public String key() {
            return name().toLowerCase(java.util.Locale.ROOT);
        }

        /**
         * Reads the config spelling (case-insensitive, surrounding blanks ignored).
         * @throws IllegalArgumentException naming the accepted values and the value given
         */
        public static ExpertPlacement parse(String s) {
            if (s != null)
                for (ExpertPlacement p : values()) if (p.key().equals(s.trim().toLowerCase(java.util.Locale.ROOT))) return p;
            throw new IllegalArgumentException("must be one of auto, monolithic, hybrid, got "
                    + (s == null ? "null" : "\"" + s + "\""));
        }
    }
}
