package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.ds4j.text.Tokenizer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * stream_options.continuous_usage_stats: every streamed chunk carries the usage so far, so a client can tell how many
 * tokens a chunk stands for (bench-server's per-token inter-token latency reads it).
 */
class ContinuousUsageTest {
    /** A character with no token of its own: its bytes come in several tokens, and its text waits for the last one. */
    static final String SPLIT = "ok \uD83E\uDEE0 done";
    static TestServer server;

    @BeforeAll
    static void up() throws Exception {
        server = TestServer.scripted(new ScriptedBackend(p -> TestServer.tokenizer().encode(SPLIT)), Map.of());
    }

    @AfterAll
    static void down() throws Exception {
        server.close();
    }

    static List<JsonNode> chunks(String options) throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi",
                "\"stream\":true,\"temperature\":0,\"speculative_q\":0,\"stream_options\":" + options));
        assertEquals(200, r.status(), r.body());
        List<JsonNode> out = new ArrayList<>();
        for (String e : r.events()) if (!e.equals("[DONE]")) out.add(Json.MAPPER.readTree(e));
        return out;
    }

    @Test
    void everyChunkCarriesTheTokensGeneratedSoFarAndAHeldBackCharacterComesWithTheTokenThatCompletesIt() throws Exception {
        Tokenizer t = TestServer.tokenizer();
        int[] ids = t.encode(SPLIT);
        // the test stands on a character split across tokens: find the token whose text comes out only with a later one
        int splitAt = -1;
        for (int i = 1; i < ids.length && splitAt < 0; i++)
            if (t.decode(java.util.Arrays.copyOf(ids, i)).endsWith("\uFFFD")) splitAt = i;
        assertTrue(splitAt > 0, "the vendored tokenizer splits U+1FAE0 across tokens");

        List<JsonNode> cs = chunks("{\"include_usage\":true,\"continuous_usage_stats\":true}");
        JsonNode last = cs.getLast();
        assertTrue(last.get("choices").isEmpty(), "the closing usage chunk");
        int total = last.get("usage").get("completion_tokens").asInt();
        assertEquals(ids.length + 1, total, "the script plus EOS");
        int prompt = last.get("usage").get("prompt_tokens").asInt();
        int before = 0, maxK = 0;
        StringBuilder text = new StringBuilder();
        for (JsonNode c : cs.subList(0, cs.size() - 1)) {
            JsonNode u = c.get("usage");
            assertTrue(u != null && u.isObject(), "usage on every chunk: " + c);
            int n = u.get("completion_tokens").asInt();
            assertEquals(prompt, u.get("prompt_tokens").asInt());
            assertEquals(prompt + n, u.get("total_tokens").asInt());
            assertTrue(n >= before, "non-decreasing: " + before + " then " + n);
            String content = c.path("choices").path(0).path("delta").path("content").asText("");
            if (!content.isEmpty()) {
                maxK = Math.max(maxK, n - before);
                before = n;
                text.append(content);
            }
        }
        assertEquals(SPLIT, text.toString());
        assertTrue(maxK >= 2, "the split character's chunk stands for its tokens: at most " + maxK + " a chunk");
        assertEquals(total, cs.get(cs.size() - 2).get("usage").get("completion_tokens").asInt(), "the finish chunk counts all");
    }

    /**
     * Without include_usage no chunk carries usage (continuous_usage_stats alone has no effect, as in vLLM); with it,
     * only the closing chunk has the usage, and every chunk before it has {@code "usage": null}, as OpenAI sends them.
     */
    @Test
    void onlyTheClosingChunkCarriesUsage() throws Exception {
        for (JsonNode c : chunks("{\"continuous_usage_stats\":true}")) assertFalse(c.has("usage"), c.toString());
        List<JsonNode> cs = chunks("{\"include_usage\":true}");
        for (JsonNode c : cs) {
            assertTrue(c.has("usage"), "every chunk has the key: " + c);
            assertEquals(c.get("choices").isEmpty(), !c.get("usage").isNull(), "only the closing chunk has the usage: " + c);
        }
        assertTrue(cs.getLast().get("choices").isEmpty(), cs.getLast().toString());
        // completions' chunks alike
        TestServer.Resp r = server.post("/v1/completions", "{\"prompt\":\"Hi\",\"stream\":true,\"temperature\":0,"
                + "\"stream_options\":{\"include_usage\":true}}");
        assertEquals(200, r.status(), r.body());
        for (String e : r.events()) {
            if (e.equals("[DONE]")) continue;
            JsonNode c = Json.MAPPER.readTree(e);
            assertTrue(c.has("usage"), "every chunk has the key: " + c);
            assertEquals(c.get("choices").isEmpty(), !c.get("usage").isNull(), "only the closing chunk has the usage: " + c);
        }
    }

    @Test
    void streamOptionsWithoutAStreamAreA400() throws Exception {
        for (String stream : new String[]{"", "\"stream\":false,"}) {
            TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi",
                    stream + "\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true}"));
            assertEquals(400, r.status(), r.body());
            assertTrue(r.body().contains("stream_options") && r.body().contains("only with"), r.body());
        }
        TestServer.Resp ok = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"stream_options\":null"));
        assertEquals(200, ok.status(), "null is no options: " + ok.body());
        TestServer.Resp done = server.post("/v1/completions", "{\"model\":\"scripted\",\"prompt\":\"Hi\",\"max_tokens\":2,"
                + "\"stream_options\":{\"include_usage\":true}}");
        assertEquals(400, done.status(), "completions too: " + done.body());
    }

    @Test
    void aNonBooleanIsA400NamingTheField() throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi",
                "\"stream\":true,\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":\"yes\"}"));
        assertEquals(400, r.status(), r.body());
        assertTrue(r.body().contains("stream_options.continuous_usage_stats"), r.body());
    }
}
