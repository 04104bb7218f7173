package io.ds4j.server;

import io.ds4j.server.config.ConfigException;
import io.ds4j.server.config.ConfigKey;
import io.ds4j.server.config.ServerConfig;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/** Parsing, validation and the live/restart split of conf/server.json. */
class ServerConfigTest {

    static ConfigException problems(String json) {
        return assertThrows(ConfigException.class, () -> ServerConfig.parse(json, "test", null));
    }

    @Test
    void defaultsAreValidAndMatchTheShippedFile() throws Exception {
        ServerConfig d = ServerConfig.defaults();
        assertEquals(ServerConfig.fromTree(d.toJson(false)), d);
        assertEquals(d, ServerConfig.parse(null, "none", null));
        assertEquals(d, ServerConfig.parse("{}", "empty", null));
        // an empty file is not "all defaults": a truncated write must not reset every setting
        for (String blank : new String[]{"", " \n\t "}) {
            ConfigException e = assertThrows(ConfigException.class, () -> ServerConfig.parse(blank, "f.json", null));
            assertEquals("f.json: the file is empty; write {} to use every default", e.getMessage());
        }
        Path shipped = Path.of("conf/server.json");
        assertEquals(d, ServerConfig.parse(Files.readString(shipped), shipped.toString(), null),
                "conf/server.json holds the defaults");
        assertEquals("127.0.0.1", d.host());
        assertEquals("auto", d.specQ());
        assertNull(d.modelPath());
    }

    @Test
    void everyProblemIsReportedByKey() {
        ConfigException e = problems("{\"server\": {\"port\": \"80\", \"prot\": 1}, \"limits\": {\"maxActive\": 0},"
                + " \"sampling\": {\"temperature\": 7}, \"speculative\": {\"q\": 12}, \"log\": {\"level\": \"loud\"}, \"extra\": 1}");
        List<String> p = e.problems();
        assertTrue(p.contains("server.port: must be an integer, got \"80\""), p.toString());
        assertTrue(p.contains("server.prot: unknown key (did you mean server.port?)"), p.toString());
        assertTrue(p.contains("speculative.q: must be \"auto\" or an integer 1..8, got 12"), p.toString());
        assertTrue(p.contains("extra: unknown key"), p.toString());
        assertTrue(p.contains("limits.maxActive: must be an integer in [1, 4096], got 0"), p.toString());
        e = problems("{\"limits\": {\"maxActive\": 0}, \"sampling\": {\"temperature\": 7}, \"log\": {\"level\": \"loud\"}}");
        assertTrue(e.getMessage().contains("limits.maxActive: must be an integer in [1, 4096], got 0"), e.getMessage());
        assertTrue(e.getMessage().contains("sampling.temperature: must be in [0, 2], got 7"), e.getMessage());
        assertTrue(e.getMessage().contains("log.level: must be one of"), e.getMessage());
    }

    @Test
    void syntaxErrorsNameTheLine() {
        ConfigException e = problems("{\n  \"server\": {\n    \"port\": 80,\n  }\n}");
        assertTrue(e.getMessage().startsWith("test: not valid JSON at line 4"), e.getMessage());
        assertTrue(problems("[1]").getMessage().contains("must be a JSON object"));
        assertTrue(problems("{\"server\": 5}").getMessage().contains("server: must be an object"));
    }

    @Test
    void crossKeyChecks() {
        assertTrue(problems("{\"verify\": {\"f16Kv\": true}}").getMessage().contains("verify.f16Kv: must be false with backend cpu"));
        assertTrue(problems("{\"model\": {\"backend\": \"cuda\"}}").getMessage().contains("model.backend: unknown backend 'cuda'"));
        assertTrue(problems("{\"server\": {\"apiKeys\": [\"\"]}}").getMessage().contains("server.apiKeys"));
    }

    @Test
    void overridesWinOverTheFileAndAreChecked() throws Exception {
        ServerConfig c = ServerConfig.parse("{\"server\": {\"port\": 9000}, \"limits\": {\"maxQueue\": 5}}", "f",
                Map.of("server.port", 1234, "speculative.q", "4", "server.apiKeys", List.of("a", "b")));
        assertEquals(1234, c.port());
        assertEquals(5, c.maxQueue());
        assertEquals("4", c.specQ());
        assertEquals(List.of("a", "b"), c.apiKeys());
        assertThrows(ConfigException.class, () -> ServerConfig.parse("{}", "f", Map.of("limits.maxActive", -1)));
        assertEquals("***", c.toJson(true).at("/server/apiKeys/0").asText());
    }

    @Test
    void reloadSplitsLiveFromRestartKeys() throws Exception {
        ServerConfig running = ServerConfig.parse("{\"limits\": {\"maxActive\": 4}}", "a", null);
        ServerConfig proposed = ServerConfig.parse("{\"limits\": {\"maxActive\": 6}, \"model\": {\"path\": \"/m\"},"
                + " \"server\": {\"port\": 9}, \"sampling\": {\"top_k\": 40}}", "b", null);
        ServerConfig.Reload r = ServerConfig.reload(running, proposed);
        assertEquals(List.of("limits.maxActive", "sampling.top_k"), r.live().stream().map(ServerConfig.Change::key).toList());
        assertEquals(List.of("server.port", "model.path"), r.pending().stream().map(ServerConfig.Change::key).toList());
        assertEquals(6, r.applied().maxActive());
        assertEquals(40, r.applied().sampling().topK());
        assertEquals(8080, r.applied().port(), "restart keys keep their running value");
        assertNull(r.applied().modelPath());
        assertTrue(ServerConfig.reload(running, running).live().isEmpty());
    }

    @Test
    void readmeDocumentsEveryKey() throws Exception {
        String readme = Files.readString(Path.of("README.md"));
        for (ConfigKey k : ServerConfig.KEYS) assertTrue(readme.contains("`" + k.name() + "`"), "README documents " + k.name());
    }
}
