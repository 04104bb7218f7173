package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@code n} > 1: several independent choices to one prompt, each its own engine request, answered as OpenAI does
 * (choices with index 0..n-1, the prompt's tokens counted once and the generated ones summed), streamed (each choice's
 * role chunk first and its own finish chunk, one usage chunk and one [DONE] after the last) and not. Seeded choices
 * sample with seed + index; greedy ones are identical. The choices are admitted together or refused together (429);
 * a failing choice ends the answer and the others are stopped; a client that goes away stops every choice.
 */
class MultipleChoicesTest {
    TestServer server;
    final ScriptedBackend backend = new ScriptedBackend(TestServer::defaultScript);

    @AfterEach
    void stop() {
        if (server != null) server.close();
    }

    static final String LONG = "Please count for a long time.";
    static final String TOOLS = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
            + "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}}]";

    static JsonNode json(String s) throws Exception {
        return Json.MAPPER.readTree(s);
    }

    @Test
    void threeChoicesNotStreamedComeInIndexOrderWithTheirUsageSummed() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        JsonNode one = server.post("/v1/chat/completions", TestServer.chat("Hi", "")).json();
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":3"));
        assertEquals(200, r.status(), r.body());
        JsonNode j = r.json();
        assertTrue(j.get("id").asText().startsWith("chatcmpl-"));
        assertEquals("chat.completion", j.get("object").asText());
        assertEquals(3, j.get("choices").size(), r.body());
        for (int i = 0; i < 3; i++) {
            JsonNode c = j.get("choices").get(i);
            assertEquals(i, c.get("index").asInt());
            assertEquals(TestServer.PLAIN, c.at("/message/content").asText());
            assertEquals("stop", c.get("finish_reason").asText());
        }
        int prompt = one.at("/usage/prompt_tokens").asInt(), completion = one.at("/usage/completion_tokens").asInt();
        assertEquals(prompt, j.at("/usage/prompt_tokens").asInt(), "the prompt is counted once");
        assertEquals(3 * completion, j.at("/usage/completion_tokens").asInt(), "the choices' tokens are summed");
        assertEquals(prompt + 3 * completion, j.at("/usage/total_tokens").asInt());
        assertEquals(3 * completion, j.at("/usage/timings/predicted_n").asInt());
        // each choice was a request to the engine
        List<String> stops = server.get("/metrics").body().lines()
                .filter(l -> l.startsWith("vllm:request_success_total{") && l.contains("\"stop\"")).toList();
        assertEquals(1, stops.size(), stops.toString());
        assertTrue(stops.getFirst().endsWith(" 4.0"), "one request and three choices finished: " + stops);
    }

    /** Each choice's chunks in order: role first, its text, its finish chunk; one usage chunk and one [DONE] after all. */
    @Test
    void threeChoicesStreamedEachWithRoleAndFinishThenOneUsageAndOneDone() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        JsonNode one = server.post("/v1/chat/completions", TestServer.chat("Hi", "")).json();
        int completion = one.at("/usage/completion_tokens").asInt();
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi",
                "\"n\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true}"));
        assertEquals(200, r.status(), r.body());
        List<String> ev = r.events();
        assertEquals("[DONE]", ev.getLast());
        assertEquals(1, ev.stream().filter("[DONE]"::equals).count(), "one [DONE]");
        JsonNode usage = json(ev.get(ev.size() - 2));
        assertEquals(0, usage.get("choices").size(), "the usage chunk has no choices");
        assertEquals(3 * completion, usage.at("/usage/completion_tokens").asInt());
        assertEquals(one.at("/usage/prompt_tokens").asInt(), usage.at("/usage/prompt_tokens").asInt());
        Map<Integer, StringBuilder> text = new HashMap<>();
        Map<Integer, Integer> finishes = new HashMap<>(), lastCount = new HashMap<>();
        String id = null;
        for (int k = 0; k < ev.size() - 2; k++) {
            JsonNode c = json(ev.get(k));
            if (id == null) id = c.get("id").asText();
            assertEquals(id, c.get("id").asText(), "one id for the whole answer");
            assertEquals(1, c.get("choices").size());
            JsonNode ch = c.get("choices").get(0);
            int i = ch.get("index").asInt();
            assertTrue(i >= 0 && i < 3, "index " + i);
            if (k < 3) {
                // every choice's role chunk comes first, in index order
                assertEquals(k, i);
                assertEquals("assistant", ch.at("/delta/role").asText());
            } else {
                assertFalse(ch.get("delta").has("role"), "one role chunk per choice: " + c);
            }
            assertFalse(finishes.containsKey(i), "nothing of choice " + i + " after its finish chunk: " + c);
            // continuous usage: the chunk's own choice so far, never another's or the sum
            int count = c.at("/usage/completion_tokens").asInt();
            assertTrue(count >= lastCount.getOrDefault(i, 0) && count <= completion, "choice " + i + "'s count so far: " + c);
            lastCount.put(i, count);
            if (!ch.get("finish_reason").isNull()) {
                assertEquals("stop", ch.get("finish_reason").asText());
                assertEquals(completion, count, "the finish chunk counts its choice's tokens");
                finishes.put(i, k);
            }
            text.computeIfAbsent(i, x -> new StringBuilder()).append(ch.at("/delta/content").asText(""));
        }
        assertEquals(Set.of(0, 1, 2), finishes.keySet(), "a finish chunk per choice");
        for (int i = 0; i < 3; i++) assertEquals(TestServer.PLAIN, text.get(i).toString(), "choice " + i);
    }

    @Test
    void completionsEchoThePromptInEveryChoiceAndBestOfEqualToNIsAccepted() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        TestServer.Resp r = server.post("/v1/completions", "{\"prompt\":\"Hi there\",\"n\":2,\"best_of\":2,\"echo\":true,\"max_tokens\":4}");
        assertEquals(200, r.status(), r.body());
        JsonNode j = r.json();
        assertEquals("text_completion", j.get("object").asText());
        assertEquals(2, j.get("choices").size());
        String first = j.at("/choices/0/text").asText();
        assertTrue(first.startsWith("Hi there") && first.length() > "Hi there".length(), first);
        assertEquals(first, j.at("/choices/1/text").asText());
        assertEquals(1, j.at("/choices/1/index").asInt());
        // streamed: the echo is each choice's first chunk
        TestServer.Resp s = server.post("/v1/completions", "{\"prompt\":\"Hi there\",\"n\":2,\"echo\":true,\"max_tokens\":4,\"stream\":true}");
        assertEquals(200, s.status(), s.body());
        Map<Integer, StringBuilder> text = new HashMap<>();
        for (String e : s.events()) {
            if (e.equals("[DONE]")) continue;
            JsonNode ch = json(e).at("/choices/0");
            text.computeIfAbsent(ch.get("index").asInt(), x -> new StringBuilder()).append(ch.get("text").asText());
        }
        assertEquals(first, text.get(0).toString());
        assertEquals(first, text.get(1).toString());
        // with logprobs, every choice lists the echoed prompt's tokens first (scored: the BOS the server added precedes
        // them), then its own
        JsonNode scored = server.post("/v1/completions",
                "{\"prompt\":\"Hi there\",\"n\":2,\"echo\":true,\"logprobs\":1,\"max_tokens\":4}").json();
        for (int i = 0; i < 2; i++) {
            JsonNode lp = scored.at("/choices/" + i + "/logprobs");
            assertEquals("Hi", lp.at("/tokens/0").asText(), lp.toString());
            assertEquals(2 + 4, lp.get("tokens").size(), "2 prompt and 4 generated tokens: " + lp);
            assertTrue(lp.at("/token_logprobs/0").isNumber(), lp.toString());
            StringBuilder joined = new StringBuilder();
            for (JsonNode t : lp.get("tokens")) joined.append(t.asText());
            assertEquals(scored.at("/choices/" + i + "/text").asText(), joined.toString(), "prompt and output tokens join to the text");
        }
    }

    @Test
    void eachChoiceParsesItsOwnToolCallsWithIdsOfItsOwn() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?", "\"n\":2," + TOOLS));
        assertEquals(200, r.status(), r.body());
        Set<String> ids = new HashSet<>();
        for (JsonNode c : r.json().get("choices")) {
            assertEquals("tool_calls", c.get("finish_reason").asText(), c.toString());
            JsonNode call = c.at("/message/tool_calls/0");
            assertEquals("get_weather", call.at("/function/name").asText());
            assertEquals("Paris", json(call.at("/function/arguments").asText()).get("city").asText());
            ids.add(call.get("id").asText());
        }
        assertEquals(2, ids.size(), "call ids are unique across choices: " + ids);
    }

    @Test
    void nAndBestOfOutOfBoundsAreRefusedNamingTheField() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.maxActive", 2, "limits.maxQueue", 3));
        assertRefused(server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":17")), "n",
                "n: is out of range: give an integer in [1, 16], got 17");
        assertRefused(server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":0")), "n",
                "n: is out of range: give an integer in [1, 16], got 0");
        assertRefused(server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":\"2\"")), "n", "n: must be an integer");
        // more than the server could ever admit together: a 400, not a 429 that no retry would pass
        assertRefused(server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":6")), "n",
                "n: this server admits at most 5 requests at once (limits.maxActive 2 running, limits.maxQueue 3 waiting)");
        assertRefused(server.post("/v1/completions", "{\"prompt\":\"x\",\"n\":2,\"best_of\":3}"), "best_of",
                "best_of: must equal n (2): this server returns every choice it generates and does not rank them, got 3");
        assertRefused(server.post("/v1/completions", "{\"prompt\":\"x\",\"best_of\":2}"), "best_of", "best_of: must equal n (1)");
        assertEquals(200, server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":5")).status(), "5 fit");
    }

    /** A server that admits one request at a time says so in the singular. */
    @Test
    void aServerOfOneRequestSaysSoInTheSingular() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.maxActive", 1, "limits.maxQueue", 0));
        assertRefused(server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":2")), "n",
                "n: this server admits at most 1 request at once (limits.maxActive 1 running, limits.maxQueue 0 waiting) and"
                        + " the 2 choices are admitted together, each as one request; ask for at most 1, got 2");
    }

    /**
     * Choices whose sequence state the cache can hold only some of at once, with too small a queue for the rest: no
     * retry could ever admit them together, so it is a 400 naming n (it was a 429 that never cleared, on an idle server).
     */
    @Test
    void choicesTheCacheCanNeverHoldTogetherAreA400() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.maxActive", 2, "limits.maxQueue", 1, "model.cacheTokens", 300,
                "speculative.draft", "none"));
        assertRefused(server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":3,\"max_tokens\":200")), "n",
                "n: the request's 3 choices are admitted together and can never all fit");
        // no max_tokens sent: the message says the value it names is the server's default, not the client's
        TestServer.Resp byDefault = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":3"));
        assertEquals(400, byDefault.status(), byDefault.body());
        assertTrue(byDefault.json().at("/error/message").asText().contains("the server's default cut to what the cache leaves"),
                byDefault.body());
        // two fit: one runs, one waits for it
        assertEquals(200, server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":2,\"max_tokens\":200")).status());
    }

    static void assertRefused(TestServer.Resp r, String param, String messageStart) {
        assertEquals(400, r.status(), r.body());
        JsonNode e = r.json().get("error");
        assertEquals(param, e.get("param").asText(), r.body());
        assertTrue(e.get("message").asText().startsWith(messageStart), e.get("message").asText());
    }

    /** One choice failing in the engine ends the answer with its error; the others are stopped and their state freed. */
    @Test
    void aFailingChoiceEndsTheAnswerAndStopsTheOthers() throws Exception {
        backend.delayMs = 5;
        int[] marker = TestServer.tokenizer().encode(" count for");
        backend.failOnceOn(marker);
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat(LONG, "\"n\":3,\"max_tokens\":3000"));
        assertEquals(500, r.status(), r.body());
        assertTrue(r.json().at("/error/message").asText().contains("injected backend fault"), r.body());
        assertOthersStopped(2);
        // streamed: the role chunks (and whatever the others made), then an error frame that ends the stream
        backend.failOnceOn(marker);
        TestServer.Resp st = server.post("/v1/chat/completions", TestServer.chat(LONG, "\"n\":3,\"max_tokens\":3000,\"stream\":true"));
        assertEquals(200, st.status(), st.body());
        List<String> ev = st.events();
        assertTrue(ev.getLast().contains("injected backend fault"), "an error frame ends the stream: " + ev.getLast());
        assertEquals(1, ev.stream().filter(e -> e.contains("\"error\"")).count(), "one error frame, the last");
        assertFalse(ev.contains("[DONE]"));
        for (int i = 0; i < 3; i++) assertEquals(i, json(ev.get(i)).at("/choices/0/index").asInt(), "the role chunks came first");
        assertOthersStopped(4);
    }

    /** Nothing runs, no sequence is left open, and {@code cancelled} requests were counted as cancelled in all. */
    void assertOthersStopped(int cancelled) throws Exception {
        assertTrue(TestServer.eventually(5000, () -> server.state().metrics().running.get() == 0
                && server.state().metrics().waiting.get() == 0), "nothing runs");
        assertTrue(TestServer.eventually(3000, () -> backend.openSequences() == 0), "open sequences: " + backend.openSequences());
        long f = backend.forwards.get();
        Thread.sleep(200);
        assertEquals(f, backend.forwards.get(), "the engine kept computing");
        String metrics = server.get("/metrics").body();
        assertTrue(metrics.contains("ds4j:requests_cancelled_total " + cancelled + ".0"), metrics.lines()
                .filter(l -> l.startsWith("ds4j:requests_cancelled")).toList().toString());
    }

    @Test
    void aClientThatGoesAwayStopsEveryChoice() throws Exception {
        backend.delayMs = 5;
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        String id;
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions",
                TestServer.chat(LONG, "\"n\":3,\"max_tokens\":3000,\"stream\":true"))) {
            assertEquals(200, s.status);
            id = json(s.nextData()).get("id").asText();
            for (int i = 0; i < 6; i++) assertNotNull(s.nextData());
            assertEquals(3, server.state().metrics().running.get(), "each choice runs as a request");
        }
        for (int i = 0; i < 3; i++) {
            String cid = id + "-" + i;
            assertTrue(TestServer.eventually(3000, () -> server.state().finished(cid) != null), "choice " + i + " ended");
            ServerState.JobRecord r = server.state().finished(cid);
            assertEquals("cancelled", r.outcome(), cid);
            assertTrue(r.generated() < 200, "stopped soon after the disconnect: " + r);
        }
        assertOthersStopped(3);
    }

    /** The shutdown ends every choice: the answer ends with one 503 error frame and every sequence is released. */
    @Test
    void theShutdownEndsEveryChoice() throws Exception {
        backend.delayMs = 5;
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none", "server.shutdownGraceSeconds", 1));
        try (LogCapture log = new LogCapture(); RawStream s = new RawStream(server.port, "/v1/chat/completions",
                TestServer.chat(LONG, "\"n\":2,\"max_tokens\":3000,\"stream\":true"))) {
            assertEquals(200, s.status);
            assertTrue(TestServer.eventually(3000, () -> server.state().metrics().running.get() == 2), "both run");
            var closing = server.server.close();
            String error = s.firstError(n -> { });
            assertNotNull(error, "the stream ends with an error frame");
            assertEquals("server_shutting_down", json(error).at("/error/code").asText(), error);
            closing.toCompletionStage().toCompletableFuture().get(20, java.util.concurrent.TimeUnit.SECONDS);
            // the other choice's 503 was on its way when the answer ended: received quietly, not discarded with a warning
            assertEquals(List.of(), log.lines().stream().filter(l -> l.contains("Discarding message")).toList());
        }
        server = null;
        assertEquals(0, backend.openSequences(), "every sequence released");
    }

    /** The choices are admitted together: where not all fit, the request is refused whole and none of it runs. */
    @Test
    void choicesThatDoNotAllFitAreRefusedTogether() throws Exception {
        backend.delayMs = 5;
        server = TestServer.scripted(backend, Map.of("limits.maxActive", 2, "limits.maxQueue", 1, "speculative.draft", "none"));
        // an idle server: two start, one waits
        TestServer.Resp ok = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":3"));
        assertEquals(200, ok.status(), ok.body());
        assertEquals(3, ok.json().get("choices").size());
        try (RawStream a = new RawStream(server.port, "/v1/chat/completions", TestServer.chat(LONG, "\"max_tokens\":3000,\"stream\":true"))) {
            assertEquals(200, a.status);
            assertNotNull(a.nextData());
            // one slot and one queue place are free: two of three would fit
            TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":3"));
            assertEquals(429, r.status(), r.body());
            assertEquals("queue_full", r.json().at("/error/code").asText());
            assertTrue(r.headers().firstValue("retry-after").isPresent());
            String m = r.json().at("/error/message").asText();
            assertTrue(m.startsWith("the server is busy: the request's n = 3 choices are admitted together, each as one request,"
                    + " and only 2 fit now: 1 request running (limits.maxActive 2) and 0 waiting (limits.maxQueue 1)"), m);
            assertEquals(1, server.state().metrics().running.get(), "none of the refused choices runs");
            assertEquals(0, server.state().metrics().waiting.get(), "none of the refused choices waits");
            // two fit: one runs beside the long request, one waits
            TestServer.Resp two = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"n\":2"));
            assertEquals(200, two.status(), two.body());
            assertEquals(2, two.json().get("choices").size());
        }
    }

    /** On the tiny model: seeded choices sample with seed + index (choice 0 is the request with n = 1); greedy ones agree. */
    @Test
    void seededChoicesDifferAndReproduceAndGreedyChoicesAreIdentical() throws Exception {
        server = TestServer.start(new DefaultModelProvider(), Map.of("speculative.draft", "none"), null, null);
        // the tiny model serves under its own id: bodies without "model"
        java.util.function.BiFunction<String, String, String> chat = (user, extra) ->
                TestServer.chat(user, extra).replace("\"model\":\"scripted\",", "");
        String sampled = "\"max_tokens\":12,\"ignore_eos\":true,\"temperature\":1.0,\"seed\":";
        JsonNode three = post(chat.apply("Tell me a story", "\"n\":3," + sampled + "41"));
        List<String> texts = new ArrayList<>();
        for (JsonNode c : three.get("choices")) texts.add(c.at("/message/content").asText());
        assertEquals(3, new HashSet<>(texts).size(), "sampled choices differ: " + texts);
        for (int i = 0; i < 3; i++) {
            JsonNode alone = post(chat.apply("Tell me a story", sampled + (41 + i)));
            assertEquals(alone.at("/choices/0/message/content").asText(), texts.get(i), "choice " + i + " samples with seed 41 + " + i);
        }
        JsonNode again = post(chat.apply("Tell me a story", "\"n\":3," + sampled + "41"));
        for (int i = 0; i < 3; i++) assertEquals(texts.get(i), again.at("/choices/" + i + "/message/content").asText(), "reproducible");
        JsonNode greedy = post(chat.apply("Tell me a story", "\"n\":3,\"max_tokens\":12,\"ignore_eos\":true,\"temperature\":0"));
        String g0 = greedy.at("/choices/0/message/content").asText();
        assertFalse(g0.isEmpty());
        for (int i = 1; i < 3; i++) assertEquals(g0, greedy.at("/choices/" + i + "/message/content").asText(), "greedy choices agree");
    }

    private JsonNode post(String body) throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", body);
        assertEquals(200, r.status(), r.body());
        return r.json();
    }
}
