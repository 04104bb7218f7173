package io.ds4j.model.synth;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.*;

/** Two processes creating the same model: the one that finishes second uses the first one's folder. */
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
}
