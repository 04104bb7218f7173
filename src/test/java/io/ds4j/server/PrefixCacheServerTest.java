package io.ds4j.server;

import io.ds4j.app.DefaultModelProvider;
import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The prefix cache through the server on the embedded model (CPU backend): a later turn resumes the earlier prompt
 * and reports {@code usage.prompt_tokens_details.cached_tokens}; its answer (tokens and logprobs) is exactly that of
 * the same request with {@code cache_prompt: false}; concurrent requests sharing a prefix all answer exactly; the
 * figures show in /metrics and /props; a bad {@code cache_prompt} is a 400.
 */
class PrefixCacheServerTest {
    static TestServer server;
    static final String SYSTEM = "You are a careful assistant. " + "Answer briefly and cite the document. ".repeat(12);

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.start(new DefaultModelProvider(), Map.of("prefixCache.blockTokens", 16,
                "prefixCache.intervalTokens", 32, "limits.prefillChunk", 48), null, null);
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    static String body(String question, String history, boolean cache) {
        return "{\"messages\":[{\"role\":\"system\",\"content\":" + Json.MAPPER.valueToTree(SYSTEM).toString() + "},"
                + history + "{\"role\":\"user\",\"content\":" + Json.MAPPER.valueToTree(question).toString() + "}],"
                + "\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,\"top_logprobs\":3,"
                + "\"cache_prompt\":" + cache + "}";
    }

    /** The answer's parts that must not depend on the cache: content and every logprob. */
    static String answer(JsonNode r) {
        return r.at("/choices/0/message/content").asText() + "|" + r.at("/choices/0/logprobs").toString();
    }

    static int cached(JsonNode r) {
        JsonNode c = r.at("/usage/prompt_tokens_details/cached_tokens");
        assertTrue(c.isInt(), "usage has prompt_tokens_details.cached_tokens: " + r.get("usage"));
        return c.intValue();
    }

    static JsonNode post(String body) throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", body);
        assertEquals(200, r.status(), r.body());
        return r.json();
    }

    @Test
    void laterTurnResumesAndAnswersAsCold() throws Exception {
        JsonNode first = post(body("What does the first page say?", "", true));
        int prompt = first.at("/usage/prompt_tokens").intValue();
        assertTrue(prompt > 64, "prompt of " + prompt + " tokens");
        String history = "{\"role\":\"user\",\"content\":\"What does the first page say?\"},{\"role\":\"assistant\",\"content\":"
                + Json.MAPPER.valueToTree(first.at("/choices/0/message/content").asText()).toString() + "},";
        JsonNode hot = post(body("And the second?", history, true));
        JsonNode cold = post(body("And the second?", history, false));
        int c = cached(hot);
        assertTrue(c > 0 && c % 16 == 0 && c < hot.at("/usage/prompt_tokens").intValue(), "cached " + c);
        assertEquals(0, cached(cold), "cache_prompt: false resumes nothing");
        assertEquals(answer(cold), answer(hot));
        assertEquals(c, hot.at("/usage/prompt_tokens").intValue() - hot.at("/usage/timings/prompt_n").intValue());

        String metrics = server.get("/metrics").body();
        assertTrue(metricValue(metrics, "ds4j:prefix_cache_hits_total") >= 1, metrics);
        assertTrue(metricValue(metrics, "ds4j:prefix_cache_hit_tokens_total") >= c, metrics);
        assertTrue(metricValue(metrics, "ds4j:prefix_cache_bytes") > 0, metrics);
        JsonNode props = server.get("/props").json().get("prefix_cache");
        assertTrue(props.get("enabled").asBoolean(), props.toString());
        assertEquals(16, props.get("blockTokens").intValue());
        assertTrue(props.get("snapshots").intValue() > 0, props.toString());
    }

    @Test
    void concurrentRequestsSharingAPrefixAnswerExactly() throws Exception {
        List<String> questions = List.of("Summarise section one.", "Summarise section two.", "List the authors.",
                "Which year is it from?", "Summarise section one.");
        post(body("Warm up: what is this document?", "", true)); // leaves snapshots of the shared system prompt
        List<CompletableFuture<HttpResponse<String>>> all = new ArrayList<>();
        for (String q : questions) {
            HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + server.port + "/v1/chat/completions"))
                    .timeout(Duration.ofSeconds(120)).header("Content-Type", "application/json")
                    .POST(HttpRequest.BodyPublishers.ofString(body(q, "", true))).build();
            all.add(server.http().sendAsync(req, HttpResponse.BodyHandlers.ofString()));
        }
        for (int i = 0; i < questions.size(); i++) {
            HttpResponse<String> r = all.get(i).get();
            assertEquals(200, r.statusCode(), r.body());
            JsonNode hot = Json.MAPPER.readTree(r.body());
            // all five resume the same snapshot at once and are stepped interleaved, each appending its own entries
            assertTrue(cached(hot) > 0, "question " + i + " resumed the shared prefix: " + hot.get("usage"));
            assertEquals(answer(post(body(questions.get(i), "", false))), answer(hot), "question " + i);
        }
    }

    /**
     * prefixCache.budgetMiB is live: a reload that lowers it evicts at once, with no request to come (the budget was
     * applied only when the next request started, so the snapshots and their memory stayed until then).
     */
    @Test
    void aReloadThatLowersTheBudgetEvictsAtOnce(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
        java.nio.file.Path f = dir.resolve("server.json");
        String text = "{\"server\": {\"configScanMs\": 100}, \"prefixCache\": {\"budgetMiB\": 64}}";
        java.nio.file.Files.writeString(f, text);
        try (LogCapture log = new LogCapture();
             TestServer s = TestServer.start(new DefaultModelProvider(), Map.of("prefixCache.blockTokens", 16,
                     "prefixCache.intervalTokens", 32, "limits.prefillChunk", 48), f, text)) {
            TestServer.Resp r = s.post("/v1/chat/completions", body("What does the first page say?", "", true));
            assertEquals(200, r.status(), r.body());
            JsonNode before = s.get("/props").json().get("prefix_cache");
            assertTrue(before.get("snapshots").asInt() > 0 && before.get("bytes").asLong() > 0, before.toString());
            java.nio.file.Path tmp = dir.resolve("server.json.tmp");
            java.nio.file.Files.writeString(tmp, text.replace("64", "0"));
            java.nio.file.Files.move(tmp, f, java.nio.file.StandardCopyOption.REPLACE_EXISTING,
                    java.nio.file.StandardCopyOption.ATOMIC_MOVE);
            assertTrue(TestServer.eventually(5000, () -> {
                try {
                    JsonNode pc = s.get("/props").json().get("prefix_cache");
                    return pc.get("budgetMiB").asInt() == 0 && pc.get("snapshots").asInt() == 0 && pc.get("bytes").asLong() == 0;
                } catch (Exception e) {
                    return false;
                }
            }), "evicted at the reload: " + s.get("/props").json().get("prefix_cache"));
            String metrics = s.get("/metrics").body();
            assertEquals(0, metricValue(metrics, "ds4j:prefix_cache_bytes"), metrics);
            assertEquals(0, metricValue(metrics, "ds4j:prefix_cache_budget_bytes"), metrics);
            assertEquals(before.get("snapshots").asInt(), (int) metricValue(metrics, "ds4j:prefix_cache_evictions_total"), metrics);
            assertEquals(1, log.linesWith("prefix cache: budget now 0 MiB").size(), log.linesWith("EngineVerticle").toString());
        }
    }

    @Test
    void badCachePromptIsA400() throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", body("Hi", "", true).replace("\"cache_prompt\":true", "\"cache_prompt\":\"yes\""));
        assertEquals(400, r.status(), r.body());
        assertTrue(r.body().contains("cache_prompt"), r.body());
    }

    static double metricValue(String text, String name) {
        for (String line : text.split("\n"))
            if (line.startsWith(name + " ") || line.startsWith(name + "{")) return Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
        throw new AssertionError("no metric " + name);
    }
}
