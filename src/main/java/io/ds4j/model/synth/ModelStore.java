package io.ds4j.model.synth;

import io.ds4j.model.TensorNames;

import java.io.IOException;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Comparator;
import java.util.stream.Stream;

/**
 * A local store of preset checkpoints that are created deterministically on first use (same preset and seed →
 * identical files). Lives in {@code $DS4J_HOME/models} (default {@code ~/.cache/ds4j/models}); a model is written
 * to a temporary folder and moved into place whole, so an interrupted run never leaves half a model behind.
 *
 * <p>Folder names end with a format tag ({@value #FORMAT}): models written before the MTP layer existed lack it, so
 * the tag changed and those folders are no longer used (they can be deleted).
 */
public final class ModelStore {
    private ModelStore() {}

    /** Format tag of the folders: "-v2" = with the MTP layer ({@code mtp.0.*}). */
    public static final String FORMAT = "-v2";

    /** The store's root folder. */
    public static Path root() {
        String home = System.getenv("DS4J_HOME");
        Path base = home != null && !home.isBlank() ? Path.of(home) : Path.of(System.getProperty("user.home"), ".cache", "ds4j");
        return base.resolve("models");
    }

    /** Where {@link #ensure} keeps a preset model (the folder may not exist yet). */
    public static Path folder(String preset, long seed) {
        return root().resolve(preset + "-seed" + seed + FORMAT);
    }

    /**
     * The folder of a preset model, created on first use (BF16, Hugging Face naming).
     * @param log receives one line when the model has to be created
     * @throws IllegalArgumentException for an unknown preset
     * @throws IOException when the model cannot be written
     */
    public static Path ensure(String preset, long seed, java.util.function.Consumer<String> log) throws IOException {
        var cfg = Presets.get(preset);
        Path dir = folder(preset, seed);
        if (current(dir, cfg, log)) return dir;
        Files.createDirectories(root());
        Path tmp = Files.createTempDirectory(root(), "." + preset + "-");
        try {
            RandomCheckpoint ck = new RandomCheckpoint(cfg, seed, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16);
            log.accept(String.format("creating model '%s' (seed %d, %.0f MB) in %s — random weights, meaningless text",
                    preset, seed, ck.totalBytes() / 1e6, dir));
            ck.write(tmp, Long.MAX_VALUE, null);
            moveIntoPlace(tmp, dir);
            return dir;
        } finally {
            if (Files.exists(tmp)) deleteTree(tmp);
        }
    }

    /**
     * A preset variant (layer and routed-expert counts, storage dtype), created on first use like {@link #ensure}:
     * {@code <preset>-L<layers>-E<experts>-<storage>-seed<seed>}. FP8 storage uses the original naming (as released).
     * @param layers  layer count, null = the preset's
     * @param experts routed experts per layer, null = the preset's
     * @throws IllegalArgumentException for an unknown preset or an invalid variant
     * @throws IOException when the model cannot be written
     */
    public static Path ensureVariant(String preset, Integer layers, Integer experts, RandomCheckpoint.Storage storage, long seed,
                                     java.util.function.Consumer<String> log) throws IOException {
        var cfg = Presets.get(preset, layers, experts);
        String st = storage.name().toLowerCase(java.util.Locale.ROOT);
        Path dir = root().resolve(preset + "-L" + cfg.numLayers + "-E" + cfg.numExperts + "-" + st + "-seed" + seed + FORMAT);
        if (current(dir, cfg, log)) return dir;
        Files.createDirectories(root());
        Path tmp = Files.createTempDirectory(root(), "." + preset + "-");
        try {
            TensorNames.Scheme naming = storage == RandomCheckpoint.Storage.FP8 ? TensorNames.Scheme.ORIGINAL : TensorNames.Scheme.HF;
            RandomCheckpoint ck = new RandomCheckpoint(cfg, seed, naming, storage);
            log.accept(String.format("creating model '%s' (%d layers, %d routed experts, %s, seed %d, %.0f MB) in %s — random weights",
                    preset, cfg.numLayers, cfg.numExperts, st, seed, ck.totalBytes() / 1e6, dir));
            ck.write(tmp, Long.MAX_VALUE, null);
            moveIntoPlace(tmp, dir);
            return dir;
        } finally {
            if (Files.exists(tmp)) deleteTree(tmp);
        }
    }

    /**
     * Moves a finished model folder to its place. When another process finished first, the rename fails in a way
     * that depends on the OS (on Linux a plain FileSystemException "Directory not empty", elsewhere
     * FileAlreadyExistsException or DirectoryNotEmptyException): if the place now holds a complete model, that one is
     * used (the same preset and seed give identical files); otherwise the failure stands.
     */
    static void moveIntoPlace(Path tmp, Path dir) throws IOException {
        try {
            try {
                Files.move(tmp, dir, StandardCopyOption.ATOMIC_MOVE);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, dir);
            }
        } catch (IOException e) {
            if (!complete(dir)) throw e;
        }
    }

    /** A finished model folder: config.json and the weights (folders are moved into place only when whole). */
    private static boolean complete(Path dir) {
        return Files.isRegularFile(dir.resolve("config.json")) && Files.isRegularFile(dir.resolve("model.safetensors"));
    }

    /**
     * Whether a complete stored model was made from the given config (a preset whose shape changed since, e.g. a new
     * layer schedule, leaves a folder of the same name with another config: it is made again, not reused).
     */
    static boolean current(Path dir, io.ds4j.model.ModelConfig cfg, java.util.function.Consumer<String> log)
            throws IOException {
        if (!complete(dir)) return false;
        try {
            if (io.ds4j.model.ModelConfig.read(dir.resolve("config.json")).toJson().equals(cfg.toJson())) return true;
        } catch (Exception e) {
            // unreadable: made again below
        }
        log.accept("stored model " + dir + " was made from another version of its preset: making it again");
        deleteTree(dir);
        return false;
    }

    private static void deleteTree(Path p) throws IOException {
        try (Stream<Path> s = Files.walk(p)) {
            for (Path q : s.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(q);
        }
    }
}
