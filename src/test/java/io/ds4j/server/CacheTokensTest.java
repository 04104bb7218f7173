package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import org.junit.jupiter.api.Test;

import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@code model.cacheTokens}: the server's default max_tokens is cut to the room the cache leaves, as the context limit
 * cuts it (a client that sent no max_tokens was refused for the default's 4096); a client's own max_tokens past the
 * cache is refused naming the field it sent; a request that waits for the cache says so in its queue line.
 */
class CacheTokensTest {
    private static String chat(String extra) {
        return "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]" + extra + "}";
    }

    @Test
    void theDefaultMaxTokensIsCutToTheCacheAndAClientsOwnIsRefusedNamingIt() throws Exception {
        ScriptedBackend b = new ScriptedBackend(TestServer::defaultScript);
        try (TestServer s = TestServer.scripted(b, Map.of("model.cacheTokens", 50))) {
            TestServer.Resp r = s.post("/v1/chat/completions", chat(""));
            assertEquals(200, r.status(), r.body());
            int prompt = r.json().at("/usage/prompt_tokens").asInt();
            assertTrue(prompt > 0 && prompt < 50, r.body());

            r = s.post("/v1/chat/completions", chat(", \"max_tokens\": 4096"));
            assertEquals(400, r.status(), r.body());
            JsonNode e = r.json().get("error");
            assertEquals("max_tokens", e.get("param").asText(), r.body());
            assertEquals("max_tokens: the prompt (" + prompt + " tokens) plus max_tokens (4096) exceeds the server's cache of 50"
                    + " tokens (model.cacheTokens); lower max_tokens or shorten the prompt", e.get("message").asText());
            r = s.post("/v1/chat/completions", chat(", \"max_completion_tokens\": 100"));
            assertEquals(400, r.status(), r.body());
            assertEquals("max_completion_tokens", r.json().at("/error/param").asText(), "the field as sent: " + r.body());

            // a prompt that leaves the cache no room names the prompt, not a max_tokens the client never sent
            String longText = "word ".repeat(60);
            r = s.post("/v1/chat/completions", "{\"messages\": [{\"role\": \"user\", \"content\": \"" + longText + "\"}]}");
            assertEquals(400, r.status(), r.body());
            assertEquals("messages", r.json().at("/error/param").asText(), r.body());
            assertTrue(r.json().at("/error/message").asText().contains("leaves no room for output in the server's cache of 50 tokens"
                    + " (model.cacheTokens)") && !r.json().at("/error/message").asText().contains("max_tokens"), r.body());
        }
    }

    /** A request waiting for the cache (a free slot there) is logged with that reason, not "all slots busy". */
    @Test
    void aRequestWaitingForTheCacheSaysSoInItsQueueLine() throws Exception {
        ScriptedBackend b = new ScriptedBackend(TestServer::defaultScript);
        try (LogCapture log = new LogCapture();
             TestServer s = TestServer.scripted(b, Map.of("model.cacheTokens", 50))) {
            // slow steps keep the first request running while the second arrives (the engine thread must stay free
            // between steps to take the submission, so no gate)
            b.delayMs = 300;
            // the first request's default max_tokens is cut to the whole cache's room: it reserves all 50 tokens
            CompletableFuture<HttpResponse<String>> first = s.http().sendAsync(HttpRequest.newBuilder(URI.create(
                            "http://127.0.0.1:" + s.port + "/v1/chat/completions")).timeout(Duration.ofSeconds(60))
                    .header("Content-Type", "application/json").POST(HttpRequest.BodyPublishers.ofString(chat(""))).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertTrue(TestServer.eventually(10_000, () -> !log.linesWith("admitted").isEmpty()), "the first request runs");
            CompletableFuture<TestServer.Resp> second = CompletableFuture.supplyAsync(() -> {
                try {
                    return s.post("/v1/chat/completions", chat(", \"max_tokens\": 5"));
                } catch (Exception ex) {
                    throw new RuntimeException(ex);
                }
            });
            assertTrue(TestServer.eventually(10_000, () -> !log.linesWith("queued at position 1").isEmpty()), log.lines().toString());
            String line = log.linesWith("queued at position 1").getFirst();
            assertTrue(line.contains("running 1/8 (model.cacheTokens: the running requests reserve 50 of 50 tokens, this one needs ")
                    && !line.contains("all slots busy"), line);
            b.delayMs = 0;
            assertEquals(200, first.get().statusCode(), first.get().body());
            assertEquals(200, second.get().status(), second.get().body());
        }
    }

    /**
     * Without max_tokens, a min_tokens past the room the cache leaves after the prompt (to which the server's default is
     * cut) is refused naming it and the cache; one that just fits is met.
     */
    @Test
    void aMinTokensPastTheCachesRoomIsRefusedNamingTheCache() throws Exception {
        ScriptedBackend b = new ScriptedBackend(TestServer::defaultScript);
        try (TestServer s = TestServer.scripted(b, Map.of("model.cacheTokens", 50, "speculative.draft", "none"))) {
            int prompt = s.post("/v1/chat/completions", chat(", \"max_tokens\": 1")).json().at("/usage/prompt_tokens").asInt();
            int room = 50 - prompt;
            TestServer.Resp r = s.post("/v1/chat/completions", chat(", \"min_tokens\": " + (room + 1)));
            assertEquals(400, r.status(), r.body());
            assertEquals("min_tokens", r.json().at("/error/param").asText(), r.body());
            assertEquals("min_tokens: the server's cache of 50 tokens (model.cacheTokens) leaves room for " + room + " tokens after the "
                    + prompt + "-token prompt, fewer than min_tokens (" + (room + 1) + ")", r.json().at("/error/message").asText());
            r = s.post("/v1/chat/completions", chat(", \"min_tokens\": " + room + ", \"temperature\": 0"));
            assertEquals(200, r.status(), r.body());
            assertEquals(room, r.json().at("/usage/completion_tokens").asInt(), r.body());
        }
    }
}
