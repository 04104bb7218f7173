package io.ds4j.app;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.engine.Backend;
import io.ds4j.engine.BackendOptions;
import io.ds4j.engine.FeatureGate;
import io.ds4j.gpu.Gpu;
import io.ds4j.gpu.GpuUnavailableException;
import io.ds4j.gpu.HipBackend;
import io.ds4j.model.CheckpointException;
import io.ds4j.model.WeightLoader;

import java.nio.file.Path;
import java.util.List;

/**
 * Opens a model on a named backend: part of the composition root, the one place that knows the backend classes (the
 * engine and the server know only {@link Backend}).
 */
public final class Backends {
    private Backends() {}

    /** Backend names accepted by {@link #open}. */
    public static final List<String> NAMES = FeatureGate.BACKENDS;

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
        requireKnown(name);
        List<String> refused = FeatureGate.check(name, options);
        if (!refused.isEmpty()) throw new IllegalArgumentException(String.join("; ", refused));
        return switch (name) {
            case "cpu" -> new CpuBackend(WeightLoader.load(modelDir));
            case "hip" -> HipBackend.open(modelDir, options);
            default -> throw new IllegalArgumentException(FeatureGate.unknownBackend(name));
        };
    }

    /**
     * Probes the hardware a backend needs (the GPU is opened and closed once), so that a machine without it fails
     * before the server binds its port, and before a command creates a model for it (a 43-layer preset is ~18 GB).
     * @throws IllegalArgumentException naming the backend and the reason when it cannot run here, or when the name is
     *                                  none of {@link #NAMES}
     */
    public static void checkAvailable(String name) {
        checkAvailable(name, true);
    }

    /**
     * {@link #checkAvailable(String)}, the one place that decides whether a backend can run on this machine.
     * @param openDevice open and close the device (the start's probe, which also finds a device the runtime lists but
     *                   cannot open); false only asks the runtime whether it sees the device, opening none (no context,
     *                   no device memory): what a running server, maybe on that GPU, can tell of the next start
     */
    public static void checkAvailable(String name, boolean openDevice) {
        requireKnown(name);
        if (!name.equals("hip")) return;
        try {
            if (openDevice) Gpu.open(0).close();
            else Gpu.requireDevice(0);
        } catch (GpuUnavailableException e) {
            throw new IllegalArgumentException("backend 'hip' is not available on this machine: " + e.getMessage()
                    + "; use backend 'cpu'", e);
        } catch (LinkageError e) {
            throw new IllegalArgumentException("backend 'hip' is not available on this machine: " + e + "; use backend 'cpu'", e);
        }
    }

    /** @throws IllegalArgumentException for a name that is none of {@link #NAMES} ({@link FeatureGate#unknownBackend}) */
    private static void requireKnown(String name) {
        String unknown = FeatureGate.unknownBackend(name);
        if (unknown != null) throw new IllegalArgumentException(unknown);
    }
}
