package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@code n} > 1 prefills the prompt the choices share once: the first choice prefills it, the others wait for its
 * prefill to pass the prompt's last block boundary and resume the snapshot it left in the prefix cache, prefilling only
 * the tokens after it. Their answers are those of the request sent alone without the cache (tokens and logprobs), and
 * {@code vllm:prompt_tokens_total} counts one prompt plus the other choices' tails. On the embedded model (CPU).
 */
class SharedPromptChoicesTest {
    static final int BLOCK = 16;
    static TestServer server;

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.start(new DefaultModelProvider(), Map.of("prefixCache.blockTokens", BLOCK,
                "prefixCache.intervalTokens", 32, "limits.prefillChunk", 48, "speculative.draft", "none"), null, null);
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    static String body(String user, String extra) {
        return body(user, 6, extra);
    }

    static String body(String user, int maxTokens, String extra) {
        return "{\"messages\":[{\"role\":\"user\",\"content\":" + Json.MAPPER.valueToTree(user) + "}],\"max_tokens\":" + maxTokens
                + ",\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,\"top_logprobs\":2" + extra + "}";
    }

    static JsonNode post(String body) throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", body);
        assertEquals(200, r.status(), r.body());
        return r.json();
    }

    static double counter(String name) throws Exception {
        return counterOf(server, name);
    }

    /** A prompt whose length is not a multiple of the block, so that its last block boundary leaves tokens to prefill. */
    static String userText(String topic) throws Exception {
        for (int words = 30; ; words++) {
            String u = (topic + " ").repeat(words).trim();
            int len = post(body(u, 1, ",\"cache_prompt\":false")).at("/usage/prompt_tokens").asInt();
            if (len % BLOCK != 0 && len > 3 * BLOCK) return u;
        }
    }

    @Test
    void theChoicesPrefillTheirPromptOnceAndAnswerAsAlone() throws Exception {
        String user = userText("sharing the prefill of several choices");
        JsonNode alone = post(body(user, ",\"cache_prompt\":false"));
        int prompt = alone.at("/usage/prompt_tokens").asInt(), tail = prompt % BLOCK;
        double before = counter("vllm:prompt_tokens_total");
        JsonNode three = post(body(user, ",\"n\":3"));
        double prefilled = counter("vllm:prompt_tokens_total") - before;
        assertEquals(prompt + 2 * tail, prefilled, 0.0, "one prompt of " + prompt + " tokens prefilled, then two tails of "
                + tail + " after its last block boundary");
        assertEquals(3, three.get("choices").size());
        for (int i = 0; i < 3; i++) {
            JsonNode c = three.get("choices").get(i);
            assertEquals(alone.at("/choices/0/message/content").asText(), c.at("/message/content").asText(), "choice " + i);
            assertEquals(alone.at("/choices/0/logprobs").toString(), c.get("logprobs").toString(), "choice " + i + "'s logprobs");
        }
    }

    @Test
    void streamedChoicesShareThePrefillToo() throws Exception {
        String user = userText("streaming the choices of one prompt");
        JsonNode alone = post(body(user, ",\"cache_prompt\":false"));
        int prompt = alone.at("/usage/prompt_tokens").asInt(), tail = prompt % BLOCK;
        double before = counter("vllm:prompt_tokens_total");
        TestServer.Resp r = server.post("/v1/chat/completions", body(user, ",\"n\":2,\"stream\":true"));
        assertEquals(200, r.status(), r.body());
        StringBuilder[] texts = {new StringBuilder(), new StringBuilder()};
        for (String line : r.body().split("\n")) {
            if (!line.startsWith("data: {")) continue;
            JsonNode c = Json.MAPPER.readTree(line.substring(6)).at("/choices/0");
            if (c.isMissingNode()) continue;
            JsonNode content = c.at("/delta/content");
            if (content.isTextual()) texts[c.get("index").asInt()].append(content.asText());
        }
        for (int i = 0; i < 2; i++) assertEquals(alone.at("/choices/0/message/content").asText(), texts[i].toString(), "choice " + i);
        assertEquals(prompt + tail, counter("vllm:prompt_tokens_total") - before, 0.0);
    }

    /** Without the cache (cache_prompt false) each choice prefills the whole prompt, as before. */
    @Test
    void withoutTheCacheEachChoicePrefillsThePrompt() throws Exception {
        String user = userText("choices without the prefix cache");
        JsonNode alone = post(body(user, ",\"cache_prompt\":false"));
        int prompt = alone.at("/usage/prompt_tokens").asInt();
        double before = counter("vllm:prompt_tokens_total");
        JsonNode two = post(body(user, ",\"n\":2,\"cache_prompt\":false"));
        assertEquals(2.0 * prompt, counter("vllm:prompt_tokens_total") - before, 0.0);
        for (int i = 0; i < 2; i++)
            assertEquals(alone.at("/choices/0/message/content").asText(), two.at("/choices/" + i + "/message/content").asText());
    }

    /**
     * A client that goes away while the other choices wait for the first one's prefill: every choice ends cancelled,
     * the held ones without having computed anything, and nothing stays running or reserved.
     */
    @Test
    void aClientThatGoesAwayWhileChoicesWaitEndsThemAll() throws Exception {
        String user = "a long prompt for the first choice to prefill ".repeat(120);
        String id;
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions", body(user, 3000, ",\"n\":3,\"stream\":true"))) {
            assertEquals(200, s.status);
            id = Json.MAPPER.readTree(s.nextData()).get("id").asText();
            assertEquals(3, server.state().metrics().running.get(), "the held choices count as running");
        }
        for (int i = 0; i < 3; i++) {
            String cid = id + "-" + i;
            assertTrue(TestServer.eventually(5000, () -> server.state().finished(cid) != null), "choice " + i + " ended");
            assertEquals("cancelled", server.state().finished(cid).outcome(), cid);
        }
        assertEquals(0, server.state().finished(id + "-1").generated());
        assertTrue(TestServer.eventually(3000, () -> server.state().metrics().running.get() == 0), "nothing runs");
        // the slots and reservations were given back: a request runs at once
        assertEquals(200, server.post("/v1/chat/completions", body("Hi", 2, "")).status());
    }

    /** The shutdown ends held choices with the others: one 503 error frame ends the answer, nothing stays open. */
    @Test
    void theShutdownEndsHeldChoicesToo() throws Exception {
        TestServer own = TestServer.start(new DefaultModelProvider(), Map.of("prefixCache.blockTokens", BLOCK,
                "limits.prefillChunk", 16, "speculative.draft", "none", "server.shutdownGraceSeconds", 0), null, null);
        try (RawStream s = new RawStream(own.port, "/v1/chat/completions",
                body("a long prompt for the first choice to prefill ".repeat(200), 3000, ",\"n\":3,\"stream\":true"))) {
            assertEquals(200, s.status);
            assertEquals(3, own.state().metrics().running.get());
            var closing = own.server.close();
            String error = s.firstError(n -> { });
            assertNotNull(error, "the stream ends with an error frame");
            assertEquals("server_shutting_down", Json.MAPPER.readTree(error).at("/error/code").asText(), error);
            closing.toCompletionStage().toCompletableFuture().get(20, java.util.concurrent.TimeUnit.SECONDS);
        }
        assertEquals(0, own.state().metrics().running.get(), "nothing runs");
    }

    /**
     * Choices that all had to queue share the prefill too: the first one promoted prefills, the others promoted with it
     * wait for it (each choice prefilled the whole prompt when it started from the queue).
     */
    @Test
    void queuedChoicesShareThePrefillWhenTheyStart() throws Exception {
        TestServer own = TestServer.start(new DefaultModelProvider(), Map.of("prefixCache.blockTokens", BLOCK,
                "limits.prefillChunk", 48, "speculative.draft", "none", "limits.maxActive", 2), null, null);
        try {
            String user = "choices that wait in the queue for their slots ".repeat(12);
            TestServer.Resp alone = own.post("/v1/chat/completions", body(user, ",\"cache_prompt\":false"));
            assertEquals(200, alone.status(), alone.body());
            int prompt = alone.json().at("/usage/prompt_tokens").asInt(), tail = prompt % BLOCK;
            assertTrue(tail != 0 && prompt > BLOCK, "a prompt of " + prompt + " tokens");
            java.util.concurrent.CompletableFuture<TestServer.Resp> two;
            double before;
            try (RawStream a = new RawStream(own.port, "/v1/chat/completions", body("Hi", 3000, ",\"stream\":true"));
                 RawStream b = new RawStream(own.port, "/v1/chat/completions", body("Hello", 3000, ",\"stream\":true"))) {
                // the role chunk goes out at admission, the second chunk after the prompt's prefill: both counted by then
                for (int i = 0; i < 2; i++) {
                    assertNotNull(a.nextData());
                    assertNotNull(b.nextData());
                }
                before = counterOf(own, "vllm:prompt_tokens_total");
                two = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
                    try {
                        return own.post("/v1/chat/completions", body(user, ",\"n\":2"));
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                });
                assertTrue(TestServer.eventually(5000, () -> own.state().metrics().waiting.get() == 2), "both choices queue");
            }
            TestServer.Resp r = two.get(60, java.util.concurrent.TimeUnit.SECONDS);
            assertEquals(200, r.status(), r.body());
            for (int i = 0; i < 2; i++)
                assertEquals(alone.json().at("/choices/0/message/content").asText(), r.json().at("/choices/" + i + "/message/content").asText());
            // the two streams were cancelled after their first chunks: each prefilled its short prompt before
            assertEquals(prompt + tail, counterOf(own, "vllm:prompt_tokens_total") - before, 0.0, "one prompt and one tail");
        } finally {
            own.close();
        }
    }

    static double counterOf(TestServer s, String name) throws Exception {
        double v = PromText.value(s.get("/metrics").body(), name);
        if (Double.isNaN(v)) throw new AssertionError(name);
        return v;
    }
}
