package io.ds4j.engine;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.model.CheckpointException;
import io.ds4j.model.WeightLoader;

import java.nio.file.Path;
import java.util.List;

/** Opens a model on a named backend: the single place that knows which backends exist. */
public final class Backends {
    private Backends() {}

    /** Backend names accepted by {@link #open}. */
    public static final List<String> NAMES = List.of("cpu", "hip");

    /**
     * @param name "cpu" or "hip"
     * @throws CheckpointException when the model cannot be loaded
     * @throws IllegalArgumentException for an unknown backend, or one that cannot run on this machine (with the reason)
     */
    public static Backend open(String name, Path modelDir) throws CheckpointException {
        return open(name, modelDir, BackendOptions.DEFAULTS);
    }

    /**
     * Opens a backend with start-up options (GPU devices, expert placement, verify attention path). The options are
     * checked against the backend first ({@link FeatureGate}).
     * @throws IllegalArgumentException as {@link #open(String, Path)}, or when the gate refuses an option (the message
     *         names the requirement and the current backend)
     */
    public static Backend open(String name, Path modelDir, BackendOptions options) throws CheckpointException {
        if (!NAMES.contains(name)) throw new IllegalArgumentException("unknown backend '" + name + "' (expected one of " + NAMES + ")");
        List<String> refused = FeatureGate.check(name, options);
        if (!refused.isEmpty()) throw new IllegalArgumentException(String.join("; ", refused));
        return switch (name) {
            case "cpu" -> new CpuBackend(WeightLoader.load(modelDir));
            case "hip" -> io.ds4j.gpu.HipBackend.open(modelDir, options);
            default -> throw new IllegalArgumentException("unknown backend '" + name + "' (expected one of " + NAMES + ")");
        };
    }
}
