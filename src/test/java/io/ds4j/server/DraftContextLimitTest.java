package io.ds4j.server;

import io.ds4j.app.DefaultModelProvider;
import io.ds4j.server.config.ServerConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/** A draft model whose context limit is below the context in use is accepted, and the load says so once. */
class DraftContextLimitTest {

    @Test
    void theLoadSaysOnceThatTheDraftDraftsWithinItsLimit(@TempDir Path tmp) throws Exception {
        // the embedded default model, and a copy of it (weights linked) that declares a 24-token context
        Path target = io.ds4j.model.synth.ModelStore.ensure("tiny", 1, s -> { });
        Path small = tmp.resolve("small-context");
        Files.createDirectories(small);
        try (var files = Files.list(target)) {
            for (Path f : files.toList()) {
                if (f.getFileName().toString().equals("config.json")) continue;
                Files.createSymbolicLink(small.resolve(f.getFileName()), f.toAbsolutePath());
            }
        }
        String config = Files.readString(target.resolve("config.json"));
        String changed = config.replaceAll("\"max_position_embeddings\"\\s*:\\s*\\d+", "\"max_position_embeddings\": 24");
        assertNotEquals(config, changed);
        Files.writeString(small.resolve("config.json"), changed);
        for (String draft : new String[]{small.toString(), target.toString()}) {
            boolean limited = draft.equals(small.toString());
            ServerConfig cfg = ServerConfig.parse(null, "test", Map.of("model.path", target.toString(), "speculative.draft", draft,
                    "limits.maxContextTokens", 256));
            List<String> log = new ArrayList<>();
            try (LoadedModel m = new DefaultModelProvider().load(cfg, log::add)) {
                long said = log.stream().filter(l -> l.contains("draft model's context limit (max_position_embeddings 24) is below"
                        + " the context in use (256)")).count();
                assertEquals(limited ? 1 : 0, said, log.toString());
                assertEquals(limited ? 24 : 1048576, m.draft().maxContext());
            }
        }
    }
}
