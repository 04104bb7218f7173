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
        return switch (name) {
            case "cpu" -> new CpuBackend(WeightLoader.load(modelDir));
            case "hip" -> io.ds4j.gpu.HipBackend.open(modelDir);
            default -> throw new IllegalArgumentException("unknown backend '" + name + "' (expected one of " + NAMES + ")");
        };
    }
}
