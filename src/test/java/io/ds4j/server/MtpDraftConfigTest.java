package io.ds4j.server;

import io.ds4j.app.DefaultModelProvider;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.TensorNames;
import io.ds4j.model.synth.Presets;
import io.ds4j.model.synth.RandomCheckpoint;
import io.ds4j.server.config.ServerConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/** {@code speculative.draft: "mtp"}: loads the checkpoint's MTP layer as the draft, or refuses to start naming what is missing. */
class MtpDraftConfigTest {
    @Test
    void mtpDraftLoadsWithTheEmbeddedModel() throws Exception {
        Path target = io.ds4j.model.synth.ModelStore.ensure("tiny", 1, s -> { });
        ServerConfig cfg = ServerConfig.parse(null, "test", Map.of("model.path", target.toString(), "speculative.draft", "mtp"));
        new DefaultModelProvider().check(cfg); // "mtp" is not taken for a folder
        List<String> log = new ArrayList<>();
        try (LoadedModel m = new DefaultModelProvider().load(cfg, log::add)) {
            assertEquals("mtp", m.draft().name());
            assertTrue(log.stream().anyMatch(l -> l.contains("the checkpoint's MTP layer")), log.toString());
        }
    }

    @Test
    void aCheckpointWithoutMtpIsRefused(@TempDir Path tmp) throws Exception {
        ModelConfig c = Presets.get("tiny");
        c.mtpLayers = 0;
        new RandomCheckpoint(c, 1, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16).write(tmp);
        ServerConfig cfg = ServerConfig.parse(null, "test", Map.of("model.path", tmp.toString(), "speculative.draft", "mtp"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> new DefaultModelProvider().load(cfg, s -> { }));
        assertTrue(e.getMessage().startsWith("speculative.draft: \"mtp\" needs the checkpoint's MTP layer")
                && e.getMessage().contains("no mtp.* tensors"), e.getMessage());
    }
}
