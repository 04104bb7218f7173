package io.ds4j.server;

import io.ds4j.engine.BackendOptions;
import io.ds4j.json.Json;
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

    /**
     * sampling.top_k is checked against the vocabulary of the model the configuration names with the other keys: one
     * refusal names it with them. The vocabulary is asked for only for a top-k that is on, with model.path judged valid.
     */
    @Test
    void aTopKPastTheVocabularyIsNamedWithTheOtherProblems() throws Exception {
        List<String> asked = new java.util.ArrayList<>();
        ServerConfig.Vocabulary vocab = path -> {
            asked.add(String.valueOf(path));
            return 1000;
        };
        byte[] bad = "{\"limits\": {\"maxQueue\": -1}, \"model\": {\"path\": \"/m\"}, \"sampling\": {\"top_k\": 1001}}"
                .getBytes(java.nio.charset.StandardCharsets.UTF_8);
        ConfigException e = assertThrows(ConfigException.class, () -> ServerConfig.parseFile(bad, "f.json", null, vocab));
        assertEquals(List.of("limits.maxQueue: must be an integer in [0, 1048576], got -1",
                "sampling.top_k: must be in [-1, 1000] (0 or -1 = off; 1000 is the tokenizer's vocabulary), got 1001"), e.problems());
        assertEquals(List.of("/m"), asked);
        assertEquals(1000, ServerConfig.parseFile("{\"sampling\": {\"top_k\": 1000}}".getBytes(), "f.json", null, vocab)
                .sampling().topK());
        asked.clear();
        for (String off : List.of("{}", "{\"sampling\": {\"top_k\": -1}}", "{\"model\": {\"path\": \"\"}, \"sampling\": {\"top_k\": 1001}}")) {
            try {
                ServerConfig.parseFile(off.getBytes(), "f.json", null, vocab);
            } catch (ConfigException x) {
                assertEquals(List.of("model.path: must be a folder or null, got an empty string"), x.problems(), off);
            }
        }
        assertEquals(List.of(), asked, "the vocabulary is not asked for");
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

    /** A prefill chunk above the token budget is named with the value it is capped to; within it nothing is said. */
    @Test
    void chunksAboveTheTokenBudgetAreSaidToBeCapped() throws Exception {
        assertEquals(java.util.List.of(), ServerConfig.defaults().prefillCaps());
        assertEquals(java.util.List.of("limits.prefillChunk 4096 is capped to 512, scheduler.tokenBudget: no prefill step takes more tokens",
                        "scheduler.minPrefillChunk 1000 is capped to 512, scheduler.tokenBudget: no prefill step takes more tokens"),
                ServerConfig.parse("{\"limits\": {\"prefillChunk\": 4096}, \"scheduler\": {\"minPrefillChunk\": 1000}}", "t", null)
                        .prefillCaps());
        assertEquals(java.util.List.of(), ServerConfig.parse("{\"limits\": {\"prefillChunk\": 4096}, \"scheduler\": {\"tokenBudget\": 4096}}",
                "t", null).prefillCaps());
    }

    /**
     * scheduler.minPrefillChunk above limits.prefillChunk acts as the chunk (a step gives a prompt at most one chunk; the
     * start said "at least 512 tokens" while chunks were 100), is named with the value it is capped to, and a larger
     * chunk lifts the cap. A chunk set below the default floor alone is no refused combination: the floor follows it.
     */
    @Test
    void aFloorAboveThePrefillChunkIsCappedToIt() throws Exception {
        ServerConfig c = ServerConfig.parse("{\"limits\": {\"prefillChunk\": 100}, \"scheduler\": {\"minPrefillChunk\": 512}}", "t", null);
        assertEquals(100, c.minPrefillChunkInEffect());
        assertEquals(512, c.minPrefillChunk(), "the configured value stays");
        assertEquals(java.util.List.of("scheduler.minPrefillChunk 512 is capped to 100, limits.prefillChunk: a step gives a prompt at most one chunk"),
                c.prefillCaps());
        ServerConfig small = ServerConfig.parse("{\"limits\": {\"prefillChunk\": 16}}", "t", null);
        assertEquals(16, small.minPrefillChunkInEffect());
        assertEquals(java.util.List.of("scheduler.minPrefillChunk 64 is capped to 16, limits.prefillChunk: a step gives a prompt at most one chunk"),
                small.prefillCaps());
        // the chunk capped by the budget caps the floor at the budget, said as the budget's cap
        ServerConfig both = ServerConfig.parse("{\"limits\": {\"prefillChunk\": 300}, \"scheduler\": {\"minPrefillChunk\": 512,"
                + " \"tokenBudget\": 200}}", "t", null);
        assertEquals(200, both.minPrefillChunkInEffect());
        assertEquals(java.util.List.of("limits.prefillChunk 300 is capped to 200, scheduler.tokenBudget: no prefill step takes more tokens",
                "scheduler.minPrefillChunk 512 is capped to 200, scheduler.tokenBudget: no prefill step takes more tokens"), both.prefillCaps());
        assertEquals(64, ServerConfig.defaults().minPrefillChunkInEffect());
        ServerConfig wider = ServerConfig.parse("{\"limits\": {\"prefillChunk\": 512}, \"scheduler\": {\"minPrefillChunk\": 512}}", "t", null);
        assertEquals(java.util.List.of("scheduler.minPrefillChunk is no longer capped to 100: 512 in effect (limits.prefillChunk 512, "
                + "scheduler.tokenBudget 512)"), wider.prefillCapLifts(c));
    }

    /** A cap that a larger budget (or a smaller value) lifts is said to be gone, with the value in effect. */
    @Test
    void aLiftedCapIsNamedWithTheValueInEffect() throws Exception {
        ServerConfig capped = ServerConfig.parse("{\"limits\": {\"prefillChunk\": 4096}, \"scheduler\": {\"minPrefillChunk\": 1000}}", "t", null);
        ServerConfig wider = ServerConfig.parse("{\"limits\": {\"prefillChunk\": 4096}, \"scheduler\": {\"minPrefillChunk\": 1000,"
                + " \"tokenBudget\": 4096}}", "t", null);
        assertEquals(java.util.List.of("limits.prefillChunk is no longer capped to 512: 4096 in effect (scheduler.tokenBudget 4096)",
                "scheduler.minPrefillChunk is no longer capped to 512: 1000 in effect (limits.prefillChunk 4096, scheduler.tokenBudget 4096)"),
                wider.prefillCapLifts(capped));
        // still capped under a budget between: nothing lifted (prefillCaps says the new cap)
        ServerConfig between = ServerConfig.parse("{\"limits\": {\"prefillChunk\": 4096}, \"scheduler\": {\"minPrefillChunk\": 1000,"
                + " \"tokenBudget\": 2048}}", "t", null);
        assertEquals(java.util.List.of("scheduler.minPrefillChunk is no longer capped to 512: 1000 in effect (limits.prefillChunk 4096, scheduler.tokenBudget 2048)"),
                between.prefillCapLifts(capped));
        // nothing was capped: nothing to lift
        assertEquals(java.util.List.of(), wider.prefillCapLifts(ServerConfig.defaults()));
        assertEquals(java.util.List.of(), capped.prefillCapLifts(wider));
    }

    @Test
    void topKOffIsZeroOrMinusOneAsInRequests() throws Exception {
        assertEquals(0, ServerConfig.parse("{\"sampling\": {\"top_k\": -1}}", "t", null).sampling().topK());
        assertEquals(0, ServerConfig.parse("{\"sampling\": {\"top_k\": 0}}", "t", null).sampling().topK());
        assertEquals(40, ServerConfig.parse("{\"sampling\": {\"top_k\": 40}}", "t", null).sampling().topK());
        assertThrows(ConfigException.class, () -> ServerConfig.parse("{\"sampling\": {\"top_k\": -2}}", "t", null));
    }

        @Test
    void everyProblemIsReportedByKey() {
        ConfigException e = problems("{\"server\": {\"port\": \"80\", \"prot\": 1}, \"limits\": {\"maxActive\": 0},"
                + " \"sampling\": {\"temperature\": 7}, \"speculative\": {\"q\": 12}, \"log\": {\"level\": \"loud\"}, \"extra\": 1}");
        List<String> p = e.problems();
        assertTrue(p.contains("server.port: must be an integer, got \"80\""), p.toString());
        assertTrue(p.contains("server.prot: unknown key (did you mean server.port?)"), p.toString());
        assertTrue(p.contains("speculative.q: must be 0 (off), an integer 1..8 or \"auto\", got 12"), p.toString());
        assertTrue(p.contains("extra: unknown key"), p.toString());
        assertTrue(p.contains("limits.maxActive: must be an integer in [1, 4096], got 0"), p.toString());
        // a whole number beyond the int range is told the key's range, as other values out of range are (not "must be
        // an integer", nor the int range: it was "must be an integer of at most 2147483647 in magnitude")
        assertEquals(List.of("scheduler.maxBatchRows: must be an integer in [1, 65536], got 99999999999"),
                problems("{\"scheduler\": {\"maxBatchRows\": 99999999999}}").problems());
        assertEquals(List.of("scheduler.maxBatchRows: must be an integer in [1, 65536], got 2147483648"),
                problems("{\"scheduler\": {\"maxBatchRows\": 2147483648}}").problems());
        // a key without an upper bound: the range as far as an int reaches, which its largest value is within
        assertEquals(List.of("model.cacheTokens: must be an integer in [0, 2147483647], got 2147483648"),
                problems("{\"model\": {\"cacheTokens\": 2147483648}}").problems());
        assertEquals(List.of("model.cacheTokens: must be an integer in [0, 2147483647], got -2147483649"),
                problems("{\"model\": {\"cacheTokens\": -2147483649}}").problems());
        assertDoesNotThrow(() -> ServerConfig.parse("{\"model\": {\"cacheTokens\": 2147483647.0}}", "t", null));
        assertEquals(List.of("scheduler.maxTickStretch: must be 0 (off) or in [1, 100], got 0.5",
                        "scheduler.minPrefillChunk: must be an integer in [1, 1048576], got 0"),
                problems("{\"scheduler\": {\"maxTickStretch\": 0.5, \"minPrefillChunk\": 0}}").problems());
        // a number a long cannot hold is named as written, not as Long.MAX_VALUE
        assertEquals(List.of("scheduler.maxTickStretch: must be 0 (off) or in [1, 100], got 1e20"),
                problems("{\"scheduler\": {\"maxTickStretch\": 1e20}}").problems());
        e = problems("{\"limits\": {\"maxActive\": 0}, \"sampling\": {\"temperature\": 7}, \"log\": {\"level\": \"loud\"}}");
        assertTrue(e.getMessage().contains("limits.maxActive: must be an integer in [1, 4096], got 0"), e.getMessage());
        assertTrue(e.getMessage().contains("sampling.temperature: must be in [0, 2], got 7"), e.getMessage());
        assertTrue(e.getMessage().contains("log.level: must be one of"), e.getMessage());
        // a level that is no string is named too (it threw a NullPointerException)
        assertEquals(List.of("log.level: must be one of trace, debug, info, warn, error, off, got 5"),
                problems("{\"log\": {\"level\": 5}}").problems());
        assertEquals(List.of("log.level: must be one of trace, debug, info, warn, error, off, got null"),
                problems("{\"log\": {\"level\": null}}").problems());
    }

    /**
     * An entry of server.cors.allowedOrigins that no browser's Origin header can equal is refused, naming the key and
     * what an origin is (it was accepted, and CORS stayed off for that page without a word).
     */
    @Test
    void aCorsOriginThatCanNeverMatchIsRefused() throws Exception {
        String what = " (an origin is scheme://host[:port] as a browser sends it, such as \"http://localhost:3000\", \"*\" for any, or"
                + " \"null\" for file:// pages and sandboxed frames)";
        assertEquals(List.of("server.cors.allowedOrigins: \"not a url\" is not an origin" + what),
                problems("{\"server\": {\"cors\": {\"allowedOrigins\": [\"not a url\"]}}}").problems());
        // the null origin is written as browsers send it
        assertEquals(List.of("server.cors.allowedOrigins: \"NULL\" never matches: a browser sends that origin as \"null\" (in lower case)"),
                problems("{\"server\": {\"cors\": {\"allowedOrigins\": [\"NULL\"]}}}").problems());
        assertEquals(List.of("server.cors.allowedOrigins: \"localhost:3000\" is not an origin" + what,
                        "server.cors.allowedOrigins: \"http://App.example/\" never matches: a browser sends that origin as"
                                + " \"http://app.example\" (scheme and host in lower case, no default port, no path or trailing slash)",
                        "server.cors.allowedOrigins: \"https://a.example:443\" never matches: a browser sends that origin as"
                                + " \"https://a.example\" (scheme and host in lower case, no default port, no path or trailing slash)"),
                problems("{\"server\": {\"cors\": {\"allowedOrigins\": [\"localhost:3000\", \"http://App.example/\","
                        + " \"https://a.example:443\"]}}}").problems());
        // a port no browser can send, and an international host written as itself (browsers send its ASCII form)
        assertEquals(List.of("server.cors.allowedOrigins: \"http://a.example:0\" has no valid port: 0 is not in 1..65535",
                        "server.cors.allowedOrigins: \"http://a.example:70000\" has no valid port: 70000 is not in 1..65535",
                        "server.cors.allowedOrigins: \"https://b\u00fccher.example:8443\" never matches: a browser sends that origin as"
                                + " \"https://xn--bcher-kva.example:8443\" (an international host name in its ASCII form)"),
                problems("{\"server\": {\"cors\": {\"allowedOrigins\": [\"http://a.example:0\", \"http://a.example:70000\","
                        + " \"https://b\u00fccher.example:8443\"]}}}").problems());
        // an entry twice, or others beside "*", change nothing: said rather than taken silently
        assertEquals(List.of("server.cors.allowedOrigins: \"http://a.example\" is listed more than once"),
                problems("{\"server\": {\"cors\": {\"allowedOrigins\": [\"http://a.example\", \"https://b.example\","
                        + " \"http://a.example\"]}}}").problems());
        assertEquals(List.of("server.cors.allowedOrigins: \"*\" allows any origin, so the other entries change nothing: give"
                        + " \"*\" alone, or the origins alone"),
                problems("{\"server\": {\"cors\": {\"allowedOrigins\": [\"http://a.example\", \"*\"]}}}").problems());
        // "null": the Origin of file:// pages and sandboxed frames, which an operator may allow on purpose
        assertEquals(List.of("http://a.example", "null"), ServerConfig.parse("{\"server\": {\"cors\": {\"allowedOrigins\":"
                + " [\"http://a.example\", \"null\"]}}}", "t", null).corsOrigins());
        for (String ok : List.of("*", "http://localhost:3000", "https://app.example", "http://[::1]:8080", "http://127.0.0.1", "null",
                "https://xn--bcher-kva.example:8443", "http://a.example:65535"))
            assertEquals(List.of(ok), ServerConfig.parse("{\"server\": {\"cors\": {\"allowedOrigins\": [\"" + ok + "\"]}}}",
                    "t", null).corsOrigins());
    }

    /**
     * A key put in the wrong group, or written in snake_case for camelCase, names the key it is elsewhere (it was only
     * "unknown key": no typo of the whole path is near); a name in several groups names each.
     */
    @Test
    void aKeyInTheWrongGroupNamesTheKeyItIs() {
        assertEquals(List.of("server.maxActive: unknown key (did you mean limits.maxActive?)",
                        "limits.maxBodyBytes: unknown key (did you mean server.maxBodyBytes?)",
                        "limits.temperature: unknown key (did you mean sampling.temperature?)"),
                problems("{\"server\":{\"maxActive\":3},\"limits\":{\"maxBodyBytes\":1024,\"temperature\":1}}").problems());
        assertEquals(" (did you mean server.maxBodyBytes?)", ServerConfig.suggestion("limits.max_body_bytes"));
        assertEquals(" (did you mean sampling.top_k?)", ServerConfig.suggestion("sampling.topK"));
        assertEquals(" (did you mean server.cors.allowedOrigins?)", ServerConfig.suggestion("server.AllowedOrigins"));
        assertEquals(" (did you mean server.port or cluster.port?)", ServerConfig.suggestion("limits.port"));
        // a typo within the right group is still found
        assertEquals(" (did you mean limits.maxQueue?)", ServerConfig.suggestion("limits.maxQeue"));
        // a key but for its case is that key alone (not every key of its name in other groups)
        assertEquals(" (did you mean server.port?)", ServerConfig.suggestion("Server.port"));
        assertEquals(" (did you mean server.cors.allowedOrigins?)", ServerConfig.suggestion("SERVER.CORS.allowed_origins"));
        // a name cut short names the one key of its group it begins, and only one
        assertEquals(" (did you mean limits.maxContextTokens?)", ServerConfig.suggestion("limits.maxContext"));
        assertEquals("", ServerConfig.suggestion("limits.max"));
        // a group's name mistyped in the file names the group, as a key's does
        assertEquals(List.of("limit: unknown key (did you mean limits?)"), problems("{\"limit\":{\"maxActive\":3}}").problems());
        assertEquals(" (did you mean server.cors?)", ServerConfig.suggestion("server.cros"));
    }

    /**
     * A file that cannot be read hides no more than it must: the refusal says that its keys were not checked, and the
     * command line's values, known without it, are judged on their own (a combination with keys the file may set is
     * not); an empty file has no keys to leave unchecked.
     */
    @Test
    void aFileThatCannotBeReadSaysWhatWasNotCheckedAndStillJudgesTheFlags() {
        java.util.Map<String, Object> flags = new java.util.LinkedHashMap<>();
        flags.put("limits.maxActive", 0);
        flags.put("server.port", "x");
        flags.put("limits.maxQeue", 3);
        // valid on its own; whether it suits the backend depends on model.backend, which the file may set
        flags.put("gpu.expertPlacement", "hybrid");
        ConfigException e = assertThrows(ConfigException.class, () -> ServerConfig.parse("{\"limits\": {\"maxActive\": 4,}",
                "f.json", flags));
        assertTrue(e.fileUnread());
        assertEquals(List.of("f.json: malformed JSON at line 1, column 28: unexpected character '}': expected a field name in double quotes",
                "f.json: " + ServerConfig.NOT_CHECKED, "limits.maxQeue: unknown key (did you mean limits.maxQueue?)",
                "server.port: must be an integer, got \"x\"", "limits.maxActive: must be an integer in [1, 4096], got 0"),
                e.problems());
        e = assertThrows(ConfigException.class, () -> ServerConfig.parse(" ", "f.json", java.util.Map.of("limits.maxActive", 0)));
        assertTrue(e.fileUnread());
        assertEquals(List.of("f.json: the file is empty; write {} to use every default",
                "limits.maxActive: must be an integer in [1, 4096], got 0"), e.problems());
        // a file that can be read is judged as before
        assertFalse(problems("{\"limits\": {\"maxActive\": 0}}").fileUnread());
    }

    /**
     * "Did you mean" only for a close name: a short name one typo from it (a swap of neighbours is one), a longer one
     * a quarter of its length; two edits that turn one short word into another are no typo.
     */
    @Test
    void didYouMeanOnlyForACloseName() {
        assertEquals("name", ServerConfig.closest("nmae", List.of("name", "model")));
        assertEquals("tools", ServerConfig.closest("tool", List.of("tools", "store")));
        assertNull(ServerConfig.closest("stop", List.of("store", "stream", "top_p")));
        assertNull(ServerConfig.closest("top", List.of("top_p", "store")));
        assertEquals("max_output_tokens", ServerConfig.closest("max_outptu_tokenz", List.of("max_output_tokens")));
        assertEquals("temperature", ServerConfig.closest("Temprature", List.of("temperature")));
    }

    @Test
    void syntaxErrorsNameTheLine() {
        ConfigException e = problems("{\n  \"server\": {\n    \"port\": 80,\n  }\n}");
        assertTrue(e.getMessage().startsWith("test: malformed JSON at line 4"), e.getMessage());
        // what the file holds instead is said, as for a group that is no object
        assertEquals(List.of("test: must be a JSON object, got an array"), problems("[]").problems());
        assertEquals(List.of("test: must be a JSON object, got 5"), problems("5").problems());
        assertEquals(List.of("server: must be an object, got 5"), problems("{\"server\": 5}").problems());
        assertEquals(List.of("scheduler: must be an object, got \"x\""), problems("{\"scheduler\": \"x\"}").problems());
        assertEquals(List.of("limits: must be an object, got an array"), problems("{\"limits\": [1]}").problems());
    }

    /**
     * The file is read as strictly as a request body: a key given twice is refused by its path (the last value does not
     * silently win), content after the object too (bytes that are not UTF-8: CliErrorsTest, ConfigReloadTest).
     */
    @Test
    void aKeyGivenTwiceAndTrailingContentAreRefused() {
        String dup = "{\"limits\":{\"maxActive\":4,\"maxActive\":5}}";
        assertEquals(List.of("test: limits.maxActive: is given twice in one JSON object (the second time at line 1, column "
                + (dup.lastIndexOf("\"maxActive\"") + 12) + "); give each key once", "test: " + ServerConfig.NOT_CHECKED),
                problems(dup).problems());
        assertTrue(problems("{\"server\":{\"apiKeys\":[],\"apiKeys\":[\"k\"]}}").getMessage().contains("server.apiKeys: is given twice"));
        assertTrue(problems("{} {}").getMessage().startsWith("test: malformed JSON at line 1, column 4: more content after"),
                problems("{} {}").getMessage());
    }

    @Test
    void crossKeyChecks() {
        assertTrue(problems("{\"model\": {\"backend\": \"cuda\"}}").getMessage().contains("model.backend: unknown backend 'cuda'"));
        assertTrue(problems("{\"server\": {\"apiKeys\": [\"\"]}}").getMessage().contains("server.apiKeys"));
    }

    /**
     * A file's API keys overridden by the command line's are reported (start-up warning, the reload's message in
     * /props) as "***" each: neither side's keys in clear text, as /props shows them.
     */
    @Test
    void overriddenApiKeysAreShownMasked() {
        byte[] file = "{\"server\": {\"apiKeys\": [\"sk-file-1\", \"sk-file-2\"]}, \"limits\": {\"maxActive\": 9}}".getBytes();
        List<String> lines = ServerConfig.overridden(file, Map.of("server.apiKeys", List.of("sk-flag"), "limits.maxActive", 5), false);
        assertEquals(List.of("limits.maxActive: the file's 9 is overridden by the command line's 5",
                "server.apiKeys: the file's [\"***\",\"***\"] is overridden by the command line's [\"***\"]"), lines);
        for (String l : lines) assertFalse(l.contains("sk-"), l);
        // a number as the file wrote it, not as its double prints
        assertEquals(List.of("server.port: the file's 1e3 is overridden by the command line's 8080"),
                ServerConfig.overridden("{\"server\":{\"port\":1e3}}".getBytes(), Map.of("server.port", 8080), false));
        // a file value that is the key's default is listed only when asked for (the reload's message), not warned of
        byte[] defaults = "{\"server\":{\"port\":8080},\"limits\":{\"maxActive\":9}}".getBytes();
        Map<String, Object> flags = Map.of("server.port", 9000, "limits.maxActive", 5);
        assertEquals(List.of("limits.maxActive: the file's 9 is overridden by the command line's 5"),
                ServerConfig.overridden(defaults, flags, false));
        assertEquals(List.of("limits.maxActive: the file's 9 is overridden by the command line's 5",
                "server.port: the file's 8080 is overridden by the command line's 9000"), ServerConfig.overridden(defaults, flags, true));
        // a value is one value however written: the default as 8.08e3 or 1 (of a double key) is the default; the
        // flag's own value written otherwise overrides nothing
        byte[] written = "{\"server\":{\"port\":8.08e3},\"sampling\":{\"temperature\":1},\"limits\":{\"maxActive\":5.0}}".getBytes();
        Map<String, Object> more = Map.of("server.port", 9000, "sampling.temperature", 0.6, "limits.maxActive", 5);
        assertEquals(List.of(), ServerConfig.overridden(written, more, false));
        assertEquals(List.of("sampling.temperature: the file's 1 is overridden by the command line's 0.6",
                "server.port: the file's 8.08e3 is overridden by the command line's 9000"), ServerConfig.overridden(written, more, true));
    }

    /**
     * An API key no client can send is refused at load, by its index (the key itself is a secret and is not shown):
     * an empty one, and one that starts or ends with a space, tab or control character, which is stripped from the
     * Authorization header before the key is compared, and one with a character past printable ASCII (header values
     * arrive as Latin-1, clients send UTF-8 or refuse it). A space inside a key is sent as it is.
     */
    @Test
    void apiKeysNoClientCanSendAreRefused() throws Exception {
        String ends = "starts or ends with a space, tab or control character, which no client can send (it is stripped"
                + " from the Authorization header before the key is compared); remove it from the key";
        assertEquals(List.of("server.apiKeys: the key at index 1 " + ends),
                problems("{\"server\": {\"apiKeys\": [\"sk-1\", \" k \"]}}").problems());
        assertEquals(List.of("server.apiKeys: the key at index 0 " + ends, "server.apiKeys: the key at index 1 " + ends,
                        "server.apiKeys: the key at index 2 is empty; a key needs at least one character"),
                problems("{\"server\": {\"apiKeys\": [\"\\tk\", \"k\\n\", \"\"]}}").problems());
        assertEquals(List.of("server.apiKeys: the key at index 0 " + ends),
                problems("{\"server\": {\"apiKeys\": [\"   \"]}}").problems());
        ConfigException e = assertThrows(ConfigException.class, () -> ServerConfig.parse("{}", "f", Map.of("server.apiKeys", List.of("k "))));
        assertFalse(e.getMessage().contains("k "), "the key is not shown: " + e.getMessage());
        assertEquals(List.of("a b"), ServerConfig.parse("{\"server\": {\"apiKeys\": [\"a b\"]}}", "t", null).apiKeys());
        String ascii = "holds a character that is not printable ASCII (at position 3), which no client can send in a header"
                + " as it is; use ASCII letters, digits and punctuation";
        assertEquals(List.of("server.apiKeys: the key at index 0 " + ascii, "server.apiKeys: the key at index 1 " + ascii),
                problems("{\"server\": {\"apiKeys\": [\"cl\u00e9\", \"k-\u20acy\"]}}").problems());
    }

    @Test
    void gpuAndVerifyKeysBuildTheBackendOptions() throws Exception {
        BackendOptions d = ServerConfig.defaults().backendOptions();
        assertEquals(BackendOptions.DEFAULTS, d, "the defaults of the file are the backend's defaults");
        ServerConfig c = ServerConfig.parse("{\"model\": {\"backend\": \"hip\"}, \"gpu\": {\"devices\": 1,"
                + " \"expertPlacement\": \" HYBRID\", \"memoryBudgetMiB\": 81920}, \"verify\": {\"f16Kv\": true,"
                + " \"f32ShortContextRows\": 4096}}", "test", null);
        assertEquals("hybrid", c.expertPlacement(), "stored in its canonical spelling");
        BackendOptions o = c.backendOptions();
        assertEquals(new BackendOptions(1, BackendOptions.ExpertPlacement.HYBRID, 81920L << 20, true, 4096), o);
        assertEquals(1, ServerConfig.parse("{\"verify\": {\"f32ShortContextRows\": 1}}", "t", null).verifyF32ShortContextRows());
    }

    @Test
    void gpuAndVerifyValuesOutOfRangeNameKeyValueAndRange() {
        for (int bad : new int[]{0, -1, 4097, 1 << 20}) {
            List<String> p = problems("{\"verify\": {\"f32ShortContextRows\": " + bad + "}}").problems();
            assertEquals(List.of("verify.f32ShortContextRows: must be an integer in [1, 4096], got " + bad), p);
        }
        assertEquals(List.of("gpu.expertPlacement: must be one of auto, monolithic, hybrid, got \"sideways\""),
                problems("{\"gpu\": {\"expertPlacement\": \"sideways\"}}").problems());
        assertEquals(List.of("gpu.expertPlacement: must be a string, got 2"), problems("{\"gpu\": {\"expertPlacement\": 2}}").problems());
        assertEquals(List.of("gpu.devices: must be an integer in [1, ∞], got 0"), problems("{\"gpu\": {\"devices\": 0}}").problems());
        assertEquals(List.of("gpu.memoryBudgetMiB: must be an integer in [0, ∞], got -5"),
                problems("{\"gpu\": {\"memoryBudgetMiB\": -5}}").problems());
        // an option already refused for its value is not judged again by the gate
        assertEquals(List.of("verify.f32ShortContextRows: must be an integer in [1, 4096], got 0"),
                problems("{\"verify\": {\"f16Kv\": true, \"f32ShortContextRows\": 0}}").problems());
    }

    @Test
    void theFeatureGateJudgesTheBackendOptionsTogether() throws Exception {
        // F16-KV verifier: only backend hip on a single device
        assertEquals(List.of("verify.f16Kv: the F16-KV verifier (--fused-verify-f16-kv) requires backend hip on a single device;"
                + " current: backend cpu on 1 device"), problems("{\"verify\": {\"f16Kv\": true}}").problems());
        assertEquals(List.of("verify.f16Kv: the F16-KV verifier (--fused-verify-f16-kv) requires backend hip on a single device;"
                        + " current: backend hip on 2 devices",
                "gpu.devices: backend hip runs on a single device (no multi-device split); current: backend hip on 2 devices"),
                problems("{\"model\": {\"backend\": \"hip\"}, \"gpu\": {\"devices\": 2}, \"verify\": {\"f16Kv\": true}}").problems());
        assertTrue(ServerConfig.parse("{\"model\": {\"backend\": \"hip\"}, \"verify\": {\"f16Kv\": true}}", "t", null).verifyF16Kv());
        // hybrid placement is accepted: the backend turns the verifier off and says so (FeatureGate.resolve)
        assertTrue(ServerConfig.parse("{\"model\": {\"backend\": \"hip\"}, \"gpu\": {\"expertPlacement\": \"hybrid\"},"
                + " \"verify\": {\"f16Kv\": true}}", "t", null).verifyF16Kv());
        // gpu.* do not apply to backend cpu and are not refused there
        assertEquals(2, ServerConfig.parse("{\"gpu\": {\"devices\": 2}}", "t", null).gpuDevices());
        // an override goes through the same gate
        ConfigException e = assertThrows(ConfigException.class, () -> ServerConfig.parse("{\"model\": {\"backend\": \"hip\"}}", "t",
                Map.of("verify.f16Kv", true, "model.backend", "cpu")));
        assertTrue(e.getMessage().startsWith("verify.f16Kv: the F16-KV verifier"), e.getMessage());
        // an unknown backend is reported as such, without a second message from the gate
        assertEquals(List.of("model.backend: unknown backend 'cuda' (expected one of [cpu, hip])"),
                problems("{\"model\": {\"backend\": \"cuda\"}, \"verify\": {\"f16Kv\": true}}").problems());
    }

    /**
     * speculative.q reads as a request's speculative_q does (one reading, ConfigKey.width): 0 is no speculation (it was
     * refused), a number written as a string is refused (the file's "4" was taken while a request's "5" is a 400).
     */
    @Test
    void speculativeWidthReadsAsARequestsSpeculativeQ() throws Exception {
        assertEquals("0", ServerConfig.parse("{\"speculative\": {\"q\": 0}}", "t", null).specQ());
        assertEquals("8", ServerConfig.parse("{\"speculative\": {\"q\": 8.0}}", "t", null).specQ());
        assertEquals("auto", ServerConfig.parse("{\"speculative\": {\"q\": \" AUTO \"}}", "t", null).specQ());
        assertEquals(List.of("speculative.q: must be 0 (off), an integer 1..8 or \"auto\", got \"4\""),
                problems("{\"speculative\": {\"q\": \"4\"}}").problems());
        assertEquals(List.of("speculative.q: must be 0 (off), an integer 1..8 or \"auto\", got -1"),
                problems("{\"speculative\": {\"q\": -1}}").problems());
        assertEquals("0 (off), [1, 8] or \"auto\"", ServerConfig.keyOf("speculative.q").rangeText());
    }

    @Test
    void overridesWinOverTheFileAndAreChecked() throws Exception {
        ServerConfig c = ServerConfig.parse("{\"server\": {\"port\": 9000}, \"limits\": {\"maxQueue\": 5}}", "f",
                Map.of("server.port", 1234, "speculative.q", 4, "server.apiKeys", List.of("a", "b")));
        assertEquals(1234, c.port());
        assertEquals(5, c.maxQueue());
        assertEquals("4", c.specQ());
        assertEquals(List.of("a", "b"), c.apiKeys());
        assertThrows(ConfigException.class, () -> ServerConfig.parse("{}", "f", Map.of("limits.maxActive", -1)));
        assertEquals("***", c.toJson(true).at("/server/apiKeys/0").asText());
    }

    /**
     * A bad value the command line overrides is still the file's: a start without the flag would refuse the file, so it
     * is named now, after the file's name (it used to pass with a warning that the flag wins).
     */
    @Test
    void aBadValueAFlagOverridesIsStillNamed() {
        ConfigException e = assertThrows(ConfigException.class, () -> ServerConfig.parse(
                "{\"server\": {\"port\": \"abc\"}, \"limits\": {\"maxActive\": 99999}}", "f.json",
                Map.of("server.port", 18932, "limits.maxActive", 3)));
        String hides = " (the file on its own: the command line's values hide it now, and a start without them would refuse the file)";
        assertEquals(2, e.problems().size(), e.getMessage());
        assertEquals("f.json: server.port: must be an integer, got \"abc\"" + hides, e.problems().get(0));
        assertTrue(e.problems().get(1).startsWith("f.json: limits.maxActive: ") && e.problems().get(1).contains("99999")
                && e.problems().get(1).endsWith(hides), e.problems().get(1));
        // a combination the flags make hold is the file's too
        e = assertThrows(ConfigException.class, () -> ServerConfig.parse("{\"verify\": {\"f16Kv\": true}}", "f.json",
                Map.of("model.backend", "hip")));
        assertTrue(e.getMessage().startsWith("f.json: verify.f16Kv: the F16-KV verifier") && e.getMessage().endsWith(hides), e.getMessage());
        // a valid file the flags override passes, the flags' values winning
        assertDoesNotThrow(() -> ServerConfig.parse("{\"server\": {\"port\": 9000}}", "f.json", Map.of("server.port", 1)));
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
    void aReloadThatReplacesAKeySaysTheKeySetChangedWithoutShowingKeys() throws Exception {
        ServerConfig one = ServerConfig.parse("{\"server\": {\"apiKeys\": [\"sk-old\"]}}", "a", null);
        ServerConfig other = ServerConfig.parse("{\"server\": {\"apiKeys\": [\"sk-new\"]}}", "b", null);
        ServerConfig two = ServerConfig.parse("{\"server\": {\"apiKeys\": [\"sk-old\", \"sk-2\"]}}", "c", null);
        String replaced = String.valueOf(ServerConfig.reload(one, other).live());
        assertEquals("[server.apiKeys: \"1 key(s)\" -> \"1 key(s) (1 added, 1 removed)\"]", replaced);
        assertEquals("[server.apiKeys: \"1 key(s)\" -> \"2 key(s) (1 added, 0 removed)\"]", String.valueOf(ServerConfig.reload(one, two).live()));
        for (String shown : List.of(replaced, String.valueOf(ServerConfig.reload(one, two).live())))
            assertFalse(shown.contains("sk-"), shown);
        // distinct keys are counted: a list that repeats a key holds it once
        ServerConfig three = ServerConfig.parse("{\"server\": {\"apiKeys\": [\"k1\", \"k2\", \"k1\"]}}", "d", null);
        ServerConfig twice = ServerConfig.parse("{\"server\": {\"apiKeys\": [\"k3\", \"k3\"]}}", "e", null);
        assertEquals("[server.apiKeys: \"2 key(s)\" -> \"1 key(s) (1 added, 2 removed)\"]",
                String.valueOf(ServerConfig.reload(three, twice).live()));
        ServerConfig ab = ServerConfig.parse("{\"server\": {\"apiKeys\": [\"a\", \"b\"]}}", "f", null);
        ServerConfig aab = ServerConfig.parse("{\"server\": {\"apiKeys\": [\"a\", \"a\", \"b\"]}}", "g", null);
        assertEquals("[server.apiKeys: \"2 key(s)\" -> \"2 key(s) (0 added, 0 removed, repeated or reordered)\"]",
                String.valueOf(ServerConfig.reload(ab, aab).live()));
    }

    @Test
    void readmeDocumentsEveryKey() throws Exception {
        String readme = Files.readString(Path.of("README.md"));
        for (ConfigKey k : ServerConfig.KEYS) assertTrue(readme.contains("`" + k.name() + "`"), "README documents " + k.name());
    }

    @Test
    void aFileWithMoreThanOneValueIsToldSoAsAFile() {
        ConfigException e = problems("{} {}");
        assertTrue(e.getMessage().contains("more content after the JSON value (one JSON value a file)"), e.getMessage());
        assertFalse(e.getMessage().contains("a body"), e.getMessage());
        e = problems("{}}");
        assertTrue(e.getMessage().contains("a stray '}' (one JSON value a file)"), e.getMessage());
    }

    /** The README's configuration table: key → its cells (key, default, range, applies, meaning). */
    static Map<String, List<String>> readmeConfigRows() throws Exception {
        Map<String, List<String>> rows = new java.util.LinkedHashMap<>();
        boolean in = false;
        for (String line : Files.readAllLines(Path.of("README.md"))) {
            if (line.equals("| key | default | range | applies | meaning |")) in = true;
            else if (in && line.isBlank()) break;
            else if (in && line.startsWith("| `")) {
                // the meaning may hold a '|' of its own: only the first four separators split cells
                List<String> cells = java.util.Arrays.stream(line.substring(2).split(" \\| ", 5)).map(String::strip).toList();
                rows.put(cells.getFirst().replace("`", ""), cells);
            }
        }
        assertFalse(rows.isEmpty(), "README has the configuration table with a range column");
        return rows;
    }

    @Test
    void readmeStatesEveryNumericKeysRangeAsValidated() throws Exception {
        Map<String, List<String>> rows = readmeConfigRows();
        assertEquals(ServerConfig.KEYS.stream().map(ConfigKey::name).toList(), List.copyOf(rows.keySet()),
                "the table lists every key, in the order of ServerConfig.KEYS");
        for (ConfigKey k : ServerConfig.KEYS) {
            boolean numeric = k.type() == ConfigKey.Type.INT || k.type() == ConfigKey.Type.NUMBER;
            assertEquals(numeric, k.range() != null, k.name() + ": a numeric key, and only one, declares its range");
            List<String> row = rows.get(k.name());
            assertEquals(k.rangeText(), row.get(2), k.name() + ": the README's range cell");
            assertEquals(k.live() ? "live" : "restart", row.get(3), k.name() + ": the README's applies cell");
            // the range is stated once, in its column: a bound also written in the prose could drift from it
            if (k.range() != null)
                assertFalse(row.get(4).matches(".*(\\d\\.\\.-?\\d|[≥≤] ?-?\\d).*"), k.name() + ": the meaning restates a range: " + row.get(4));
        }
    }

    @Test
    void validationEnforcesEachKeysDeclaredRange() throws Exception {
        for (ConfigKey k : ServerConfig.KEYS) {
            ConfigKey.Range r = k.range();
            if (r == null) continue;
            boolean integer = k.type() == ConfigKey.Type.INT;
            double step = integer ? 1 : 0.5;
            List<Double> outside = new java.util.ArrayList<>(List.of(r.openLow() ? r.lo() : r.lo() - step));
            if (r.hi() != Double.POSITIVE_INFINITY) outside.add(r.hi() + step);
            for (double x : outside) {
                String json = json(k.name(), x, integer);
                List<String> p = problems(json).problems();
                assertEquals(1, p.size(), json + " -> " + p);
                assertTrue(p.getFirst().startsWith(k.name() + ": must be " + (integer ? "an integer " : "")),
                        json + " -> " + p);
                assertTrue(p.getFirst().contains(r.interval()), json + " -> " + p);
            }
            // the bounds themselves are within range (a cross-key rule, such as cluster.engineTimeoutMs against
            // cluster.announceMs, may still refuse one alone)
            for (double inside : r.hi() != Double.POSITIVE_INFINITY ? List.of(r.hi(), r.openLow() ? r.hi() : r.lo()) : List.of(r.lo())) {
                String json = json(k.name(), inside, integer);
                try {
                    assertEquals(inside, ((Number) ServerConfig.parse(json, "test", null).get(k.name())).doubleValue(), json);
                } catch (ConfigException e) {
                    assertTrue(e.problems().stream().noneMatch(p -> p.contains(r.interval())), json + " -> " + e.problems());
                }
            }
        }
    }

    private static String json(String dotted, double x, boolean integer) {
        String[] parts = dotted.split("\\.");
        String v = integer ? Long.toString((long) x) : Double.toString(x);
        return "{\"" + parts[0] + "\": {\"" + parts[1] + "\": " + v + "}}";
    }

    /** A blank model name is refused (it would be served as the id "" that no request can name); null is the folder's. */
    @Test
    void aBlankModelNameIsRefused() throws Exception {
        assertEquals(List.of("model.name: must be a name or null (the model folder's name), got an empty string"),
                problems("{\"model\": {\"name\": \"\"}}").problems());
        assertEquals(List.of("model.name: must be a name or null (the model folder's name), got \"  \""),
                problems("{\"model\": {\"name\": \"  \"}}").problems());
        assertEquals(1, problems("{\"model\": {\"name\": \"\u00a0\"}}").problems().size(), "a no-break space is blank too");
        assertNull(ServerConfig.parse("{\"model\": {\"name\": null}}", "test", null).modelName());
        assertEquals("v4", ServerConfig.parse("{\"model\": {\"name\": \"v4\"}}", "test", null).modelName());
    }

    /**
     * A file's numbers are judged as written, as a request's are: an integer key refuses 2.0000000000000001 (a double
     * rounds it to 2) and takes 4.0 and 1e3; a range is checked on the exact number (2.0000000000000000001 is above 2);
     * the speculative width and the seed take a whole number written with a fraction (4.0) as a request does; a number
     * whose double alone misses the range is told what the double holds.
     */
    @Test
    void fileNumbersAreJudgedAsWritten() throws Exception {
        assertEquals(List.of("limits.maxActive: must be an integer, got 2.0000000000000001"),
                problems("{\"limits\": {\"maxActive\": 2.0000000000000001}}").problems());
        assertEquals(List.of("sampling.temperature: must be in [0, 2], got 2.0000000000000000001"),
                problems("{\"sampling\": {\"temperature\": 2.0000000000000000001}}").problems());
        // 1e-400 is in (0, 1]; its double, 0, is not: the message says so, as a request's does
        assertEquals(List.of("sampling.top_p: must be in (0, 1], got 1e-400 (0 in double precision)"),
                problems("{\"sampling\": {\"top_p\": 1e-400}}").problems());
        // beyond the double range a number has no fraction: the key's range is what it misses
        assertEquals(List.of("limits.maxActive: must be an integer in [1, 4096], got 1e400"),
                problems("{\"limits\": {\"maxActive\": 1e400}}").problems());
        ServerConfig c = ServerConfig.parse("{\"limits\": {\"maxActive\": 4.0, \"maxQueue\": 1e3}, \"speculative\": {\"q\": 4.0},"
                + " \"sampling\": {\"seed\": 7.0}}", "test", null);
        assertEquals(4, c.get("limits.maxActive"));
        assertEquals(1000, c.get("limits.maxQueue"));
        assertEquals("4", c.get("speculative.q"));
        assertEquals(7L, c.get("sampling.seed"));
        // the seed exactly as written, as a request's (a double would make 9007199254740993.0 ...992)
        assertEquals(9007199254740993L, ServerConfig.parse("{\"sampling\": {\"seed\": 9007199254740993.0}}", "test", null)
                .get("sampling.seed"));
        assertEquals(Long.MAX_VALUE, ServerConfig.parse("{\"sampling\": {\"seed\": 9223372036854775807.0}}", "test", null)
                .get("sampling.seed"));
        assertEquals(List.of("sampling.seed: must be an integer in [-2^63, 2^63) or null, got 9223372036854775808"),
                problems("{\"sampling\": {\"seed\": 9223372036854775808}}").problems());
        // two spellings of one number are one value; two numbers a double cannot tell apart are two
        ConfigKey t = ServerConfig.keyOf("sampling.temperature"), m = ServerConfig.keyOf("limits.maxActive");
        assertTrue(m.sameValue(1000, Json.read("1e3".getBytes(), "x")));
        assertTrue(t.sameValue(0.7, Json.read("0.70".getBytes(), "x")));
        assertFalse(t.sameValue(2, Json.read("2.0000000000000000001".getBytes(), "x")));
    }

    /** A refused API key value is named by its kind, never shown: the message reaches the terminal, the log and /props. */
    @Test
    void aRefusedApiKeyValueIsNotShown() {
        assertEquals(List.of("server.apiKeys: must be an array of strings, got a string"),
                problems("{\"server\": {\"apiKeys\": \"sk-SECRET1\"}}").problems());
        assertEquals(List.of("server.apiKeys: must be an array of strings, got an array with an element that is not a string"),
                problems("{\"server\": {\"apiKeys\": [\"sk-ok\", 5]}}").problems());
    }

    @Test
    void fileErrorsShowNumbersAsWritten() {
        assertEquals(List.of("limits.maxActive: must be an integer in [1, 4096], got 10000000000.0"),
                problems("{\"limits\": {\"maxActive\": 10000000000.0}}").problems());
        assertEquals(List.of("limits.maxActive: must be an integer, got 2.50"),
                problems("{\"limits\": {\"maxActive\": 2.50}}").problems());
        assertEquals(List.of("sampling.temperature: must be in [0, 2], got 2.50"),
                problems("{\"sampling\": {\"temperature\": 2.50}}").problems());
        assertEquals(List.of("limits.maxActive: must be an integer in [1, 4096], got 5e3"),
                problems("{\"limits\": {\"maxActive\": 5e3}}").problems());
    }

    /** A width written back as the file takes it: toJson and a reload's change show the number 4, not the text "4". */
    @Test
    void aSpeculativeWidthIsShownAsANumber() throws Exception {
        ServerConfig four = ServerConfig.parse("{\"speculative\": {\"q\": 4}}", "f", java.util.Map.of());
        assertTrue(four.toJson(false).at("/speculative/q").isInt(), four.toJson(false).toString());
        assertEquals("4", four.specQ());
        assertEquals(four, ServerConfig.parse(four.toJson(false).toString(), "f", java.util.Map.of()), "round trip");
        String changes = String.valueOf(ServerConfig.reload(ServerConfig.defaults(), four).live());
        assertTrue(changes.contains("speculative.q: \"auto\" -> 4"), changes);
    }
}
