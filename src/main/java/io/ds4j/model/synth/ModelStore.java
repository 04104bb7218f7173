package io.ds4j.model.synth;

import io.ds4j.model.TensorNames;

import java.io.IOException;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;

/**
 * A local store of preset checkpoints that are created deterministically on first use (same preset and seed →
 * identical files). Lives in {@code $DS4J_HOME/models} (default {@code ~/.cache/ds4j/models}); a model is written
 * to a temporary folder and moved into place whole, so an interrupted run never leaves half a model behind: the
 * temporary folder is removed on failure and at the JVM's exit, and one left by a killed process is removed by a later
 * use of the store once nothing has touched it for a while ({@link #cleanStale}).
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
        cleanStale(root(), log);
        if (current(dir, cfg, log)) return dir;
        RandomCheckpoint ck = new RandomCheckpoint(cfg, seed, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16);
        log.accept(String.format("creating model '%s' (seed %d, %.0f MB) in %s — random weights, meaningless text",
                preset, seed, ck.totalBytes() / 1e6, dir));
        create(root(), dir, preset, ck.totalBytes(), tmp -> ck.write(tmp, Long.MAX_VALUE, null));
        return dir;
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
        cleanStale(root(), log);
        if (current(dir, cfg, log)) return dir;
        TensorNames.Scheme naming = storage == RandomCheckpoint.Storage.FP8 ? TensorNames.Scheme.ORIGINAL : TensorNames.Scheme.HF;
        RandomCheckpoint ck = new RandomCheckpoint(cfg, seed, naming, storage);
        log.accept(String.format("creating model '%s' (%d layers, %d routed experts, %s, seed %d, %.0f MB) in %s — random weights",
                preset, cfg.numLayers, cfg.numExperts, st, seed, ck.totalBytes() / 1e6, dir));
        create(root(), dir, preset, ck.totalBytes(), tmp -> ck.write(tmp, Long.MAX_VALUE, null));
        return dir;
    }

    /** Writes a model's files into a folder. */
    @FunctionalInterface
    interface Writer {
        void write(Path folder) throws IOException;
    }

    /**
     * Marker in the name of a folder being written: {@code .<preset>.pid<N>-<random>}, N the writing process, so that a
     * later run can tell a folder whose writer died (removed) from one another process is still writing (left alone).
     */
    static final String PID_MARK = ".pid";

    /**
     * The store's temporary folders: {@code .<preset>.pid<N>-<random>}, or an earlier version's {@code .<preset>-<random>}
     * (group 2: the pid, null there), for the presets this store writes; no other folder is ever taken for one.
     */
    private static final java.util.regex.Pattern TEMP = java.util.regex.Pattern.compile(
            "\\.(" + String.join("|", Presets.NAMES.stream().map(java.util.regex.Pattern::quote).toList()) + ")(?:\\.pid(\\d+))?-\\d+");
    /**
     * A temporary folder untouched this long has no writer left (a writer adds to its files without pause), whatever
     * its pid says: the pid may be reused, or of another pid namespace (a container, another host sharing the store).
     */
    static final long STALE_IDLE_MS = 600_000;
    /** ... and one whose pid is alive here is taken for being written until it is untouched this long. */
    static final long LIVE_IDLE_MS = 3_600_000;

    /**
     * Writes a model into a temporary folder beside dir and moves it into place whole. The temporary folder is removed
     * when the writing fails and, through a shutdown hook held while it is written, when the JVM exits on the way
     * (Ctrl-C, SIGTERM, System.exit): an interrupted run leaves no partial folder behind. Refused up front when the
     * file system has clearly not the room.
     */
    static void create(Path root, Path dir, String preset, long bytes, Writer writer) throws IOException {
        Files.createDirectories(root);
        long free = Files.getFileStore(root).getUsableSpace();
        if (free > 0 && bytes > free)
            throw new IOException(String.format("not enough disk space for the model: %.0f MB needed, %.0f MB free in %s",
                    bytes / 1e6, free / 1e6, root));
        Path tmp = Files.createTempDirectory(root, "." + preset + PID_MARK + ProcessHandle.current().pid() + "-");
        Thread hook = new Thread(() -> removeWhileWritten(tmp), "ds4j-model-cleanup");
        boolean hooked = addHook(hook);
        try {
            writer.write(tmp);
            moveIntoPlace(tmp, dir);
        } finally {
            if (hooked) removeHook(hook);
            if (Files.exists(tmp)) deleteTree(tmp);
        }
    }

    private static boolean addHook(Thread hook) {
        try {
            Runtime.getRuntime().addShutdownHook(hook);
            return true;
        } catch (IllegalStateException shuttingDown) {
            return false; // the JVM is exiting already: the finally block is all there is
        }
    }

    private static void removeHook(Thread hook) {
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException shuttingDown) {
            // the hook runs (or ran) now: it removes the folder if the move has not happened
        }
    }

    /**
     * The shutdown hook's removal: the writing thread may still add files while the JVM exits, so the tree is removed
     * again until it is gone (once its folder is gone, nothing can be created in it).
     */
    static void removeWhileWritten(Path tmp) {
        for (int attempt = 0; attempt < 20 && Files.exists(tmp); attempt++) {
            try {
                deleteTree(tmp);
            } catch (IOException | java.io.UncheckedIOException e) {
                try {
                    Thread.sleep(10);
                } catch (InterruptedException ie) {
                    return;
                }
            }
        }
    }

    /**
     * Removes the temporary folders earlier runs left in the store (a process killed while it wrote a model, which no
     * hook can clean up), each said in one line. A folder is removed only when nothing has touched it for
     * {@link #STALE_IDLE_MS} (its writer, if any, would have), or for {@link #LIVE_IDLE_MS} where a process of its pid
     * runs here; a more recent one whose writer is not seen here is only reported, as another process (in another pid
     * namespace, or on another host sharing the store) may be writing it. Problems are reported, never thrown: a
     * cleanup never stops a run.
     */
    static void cleanStale(Path root, java.util.function.Consumer<String> log) {
        if (!Files.isDirectory(root)) return;
        List<Path> found;
        try (Stream<Path> s = Files.list(root)) {
            found = s.filter(p -> TEMP.matcher(p.getFileName().toString()).matches() && Files.isDirectory(p, LinkOption.NOFOLLOW_LINKS))
                    .toList();
        } catch (IOException e) {
            return;
        }
        long now = System.currentTimeMillis();
        for (Path p : found) {
            var m = TEMP.matcher(p.getFileName().toString());
            if (!m.matches()) continue;
            Long pid = m.group(2) == null ? null : Long.parseLong(m.group(2));
            boolean alive = pid != null && ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false);
            long idle = now - lastModified(p);
            if (alive && idle < LIVE_IDLE_MS) continue; // being written here
            if (idle < STALE_IDLE_MS) {
                log.accept("partial model folder " + p + " (touched " + idle / 60_000 + " min ago"
                        + (pid == null ? "" : ", its writer, process " + pid + ", not running here")
                        + ") may still be being written; it is removed once untouched for " + STALE_IDLE_MS / 60_000
                        + " min, or delete it if no ds4j is creating a model");
                continue;
            }
            String why = "untouched for " + idle / 60_000 + " min" + (pid == null ? "" : alive
                    ? " (process " + pid + " runs, but writes nothing there)" : " and its writer (process " + pid + ") is gone");
            long bytes = size(p);
            try {
                deleteTree(p);
                log.accept(String.format("removed partial model folder %s (%.0f MB) left by an interrupted run: %s", p, bytes / 1e6, why));
            } catch (IOException | java.io.UncheckedIOException e) {
                log.accept(String.format("partial model folder %s (%.0f MB) left by an interrupted run could not be removed (%s): delete it",
                        p, bytes / 1e6, e.getMessage()));
            }
        }
    }

    /**
     * The newest modification time in a tree (ms); now where any of it cannot be read (a tree being written or moved
     * meanwhile is taken for touched just now, never for an old one to remove).
     */
    private static long lastModified(Path p) {
        long now = System.currentTimeMillis();
        try (Stream<Path> s = Files.walk(p)) {
            return s.mapToLong(q -> {
                try {
                    return Files.getLastModifiedTime(q).toMillis();
                } catch (IOException e) {
                    return now;
                }
            }).max().orElse(now);
        } catch (IOException | java.io.UncheckedIOException e) {
            return now;
        }
    }

    private static long size(Path p) {
        try (Stream<Path> s = Files.walk(p)) {
            return s.filter(Files::isRegularFile).mapToLong(q -> q.toFile().length()).sum();
        } catch (IOException | java.io.UncheckedIOException e) {
            return 0;
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
