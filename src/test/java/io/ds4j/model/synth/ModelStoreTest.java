package io.ds4j.model.synth;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Two processes creating the same model: the one that finishes second uses the first one's folder. A model being
 * written leaves no partial folder behind: not on failure, not when the JVM is stopped, and a killed run's is removed
 * by the next use of the store.
 */
class ModelStoreTest {
    static Path model(Path dir, String weights) throws IOException {
        Files.createDirectories(dir);
        Files.writeString(dir.resolve("config.json"), "{}");
        if (weights != null) Files.writeString(dir.resolve("model.safetensors"), weights);
        return dir;
    }

    @Test
    void losingTheRaceToACompleteModelUsesIt(@TempDir Path root) throws IOException {
        Path done = model(root.resolve("tiny-seed1"), "first");
        Path tmp = model(root.resolve(".tiny-123"), "second");
        ModelStore.moveIntoPlace(tmp, done); // on Linux this rename fails with "Directory not empty"
        assertEquals("first", Files.readString(done.resolve("model.safetensors")));
    }

    @Test
    void anIncompleteTargetIsStillAnError(@TempDir Path root) throws IOException {
        Path half = model(root.resolve("tiny-seed1"), null);
        Path tmp = model(root.resolve(".tiny-123"), "second");
        assertThrows(IOException.class, () -> ModelStore.moveIntoPlace(tmp, half));
    }

    @Test
    void aFreePlaceGetsTheModel(@TempDir Path root) throws IOException {
        Path tmp = model(root.resolve(".tiny-123"), "mine");
        ModelStore.moveIntoPlace(tmp, root.resolve("tiny-seed1"));
        assertEquals("mine", Files.readString(root.resolve("tiny-seed1/model.safetensors")));
    }

    @Test
    void aStoredModelOfAnotherPresetVersionIsMadeAgain(@TempDir Path root) throws IOException {
        var cfg = Presets.get("flash-shaped", 6, 16);
        Path dir = model(root.resolve("flash-shaped-L6-E16-fp8-seed1"), "weights");
        Files.writeString(dir.resolve("config.json"), cfg.toJson().toString());
        java.util.List<String> log = new java.util.ArrayList<>();
        assertTrue(ModelStore.current(dir, cfg, log::add), "same config: reused");
        assertTrue(log.isEmpty());
        // the same name made from an older schedule (layer 1 CSA instead of sliding-window)
        var old = Presets.get("flash-shaped", 6, 16);
        old.layerTypes = Presets.compactSchedule(6);
        Files.writeString(dir.resolve("config.json"), old.toJson().toString());
        assertFalse(ModelStore.current(dir, cfg, log::add), "another config: not reused");
        assertFalse(Files.exists(dir), "the stale folder is removed so that it is made again");
        assertTrue(log.get(0).contains("another version of its preset"), log.toString());
    }

    /** The hidden temporary folders in root. */
    static java.util.List<Path> temps(Path root) throws IOException {
        try (var s = Files.list(root)) {
            return s.filter(p -> p.getFileName().toString().startsWith(".")).toList();
        }
    }

    @Test
    void aFailedWriteLeavesNoTemporaryFolder(@TempDir Path root) throws IOException {
        IOException e = assertThrows(IOException.class, () -> ModelStore.create(root, root.resolve("tiny-seed1"), "tiny", 10, tmp -> {
            Files.writeString(tmp.resolve("model.safetensors"), "half");
            throw new IOException("disk full");
        }));
        assertEquals("disk full", e.getMessage());
        assertEquals(java.util.List.of(), temps(root));
        assertFalse(Files.exists(root.resolve("tiny-seed1")));
    }

    @Test
    void aModelLargerThanTheFreeSpaceIsRefusedBeforeWriting(@TempDir Path root) {
        IOException e = assertThrows(IOException.class, () -> ModelStore.create(root, root.resolve("big"), "big", Long.MAX_VALUE,
                tmp -> fail("nothing is written")));
        assertTrue(e.getMessage().startsWith("not enough disk space for the model: "), e.getMessage());
    }

    /** Writes into a temporary folder of the store at args[0] and waits to be stopped (for the shutdown test). */
    public static void main(String[] args) throws IOException {
        Path root = Path.of(args[0]);
        ModelStore.create(root, root.resolve("tiny-seed1"), "tiny", 10, tmp -> {
            Files.writeString(tmp.resolve("model.safetensors"), "part");
            try {
                Thread.sleep(60_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            throw new IOException("not finished");
        });
    }

    /** SIGTERM (as Ctrl-C) while a model is written: the JVM's shutdown hook removes the partial folder. */
    @Test
    void aStoppedRunRemovesItsPartialFolder(@TempDir Path root) throws Exception {
        Process p = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-cp",
                System.getProperty("java.class.path"), ModelStoreTest.class.getName(), root.toString())
                .redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        try {
            long until = System.currentTimeMillis() + 30_000;
            while (System.currentTimeMillis() < until && temps(root).stream().noneMatch(t -> Files.exists(t.resolve("model.safetensors"))))
                Thread.sleep(20);
            assertEquals(1, temps(root).size(), "the child writes");
            p.destroy(); // SIGTERM
            assertTrue(p.waitFor(30, java.util.concurrent.TimeUnit.SECONDS));
            assertEquals(java.util.List.of(), temps(root), "removed at the exit");
        } finally {
            p.destroyForcibly();
        }
    }

    /** Sets a folder's and its files' modification times back to the epoch's first second: untouched for long. */
    private static Path untouched(Path dir) throws IOException {
        try (var s = Files.walk(dir)) {
            for (Path q : s.toList()) Files.setLastModifiedTime(q, java.nio.file.attribute.FileTime.fromMillis(1000));
        }
        return dir;
    }

    @Test
    void staleTemporaryFoldersAreRemovedAndLiveOnesKept(@TempDir Path root) throws IOException {
        // a pid no process has (above Linux's pid_max limit of 2^22)
        Path dead = untouched(model(root.resolve(".flash-shaped.pid99999999-123"), "part"));
        // its writer not seen here, but touched just now: another pid namespace or host may be writing it
        Path deadRecent = model(root.resolve(".small.pid99999998-124"), "part");
        Path live = model(root.resolve(".tiny.pid" + ProcessHandle.current().pid() + "-456"), "part");
        // a running process of its pid that has written nothing there for long: a reused pid, not its writer
        Path liveIdle = untouched(model(root.resolve(".tiny.pid" + ProcessHandle.current().pid() + "-457"), "part"));
        Path oldStale = untouched(model(root.resolve(".flash-shaped-789"), "part"));
        Path oldRecent = model(root.resolve(".small-321"), "part");
        Path other = Files.createDirectories(root.resolve(".something-else"));
        // hidden folders that look like the old names but are no preset's are never taken for the store's
        Path user = untouched(model(root.resolve(".backup-2024"), "part"));
        java.util.List<String> log = new java.util.ArrayList<>();
        ModelStore.cleanStale(root, log::add);
        assertFalse(Files.exists(dead), "its writer is gone and it is untouched for long");
        assertTrue(Files.exists(deadRecent), "maybe being written by a process not seen here");
        assertTrue(Files.exists(live), "being written by a running process");
        assertFalse(Files.exists(liveIdle), "untouched for long: no writer, whatever runs under its pid");
        assertFalse(Files.exists(oldStale), "an earlier version's, untouched for long");
        assertTrue(Files.exists(oldRecent), "an earlier version's, maybe being written");
        assertTrue(Files.exists(other), "not the store's");
        assertTrue(Files.exists(user), "not the store's");
        assertEquals(5, log.size(), log.toString());
        assertTrue(log.stream().anyMatch(l -> l.startsWith("removed partial model folder " + dead) && l.contains("process 99999999) is gone")), log.toString());
        assertTrue(log.stream().anyMatch(l -> l.startsWith("removed partial model folder " + liveIdle) && l.contains("writes nothing there")), log.toString());
        assertTrue(log.stream().anyMatch(l -> l.startsWith("partial model folder " + deadRecent) && l.contains("not running here")), log.toString());
        assertTrue(log.stream().anyMatch(l -> l.startsWith("partial model folder " + oldRecent) && l.contains("delete it if no ds4j")), log.toString());
    }
}
