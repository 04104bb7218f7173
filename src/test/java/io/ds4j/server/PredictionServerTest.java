package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.vertx.junit5.VertxExtension;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Predicted outputs over HTTP: {@code prediction} on both endpoints changes nothing in the answer, speculates even on
 * a server without a draft, and its accepted / rejected tokens come back in {@code usage.completion_tokens_details},
 * streamed and not; malformed predictions are 400s naming the field.
 */
@ExtendWith(VertxExtension.class)
class PredictionServerTest {
    static TestServer noDraft, ngram;

    @BeforeAll
    static void start() throws Exception {
        noDraft = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                Map.of("speculative.draft", "none", "limits.maxContextTokens", 256));
        ngram = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of());
    }

    @AfterAll
    static void stop() {
        noDraft.close();
        ngram.close();
    }

    static String chatWith(String prediction) {
        return TestServer.chat("Hi", "\"temperature\":0" + (prediction == null ? "" : ",\"prediction\":" + prediction));
    }

    static String content(String text) {
        return "{\"type\":\"content\",\"content\":" + Json.MAPPER.valueToTree(text) + "}";
    }

    /** Answer text and usage of a non-streamed chat or completion. */
    static JsonNode post(TestServer s, String path, String body) throws Exception {
        TestServer.Resp r = s.post(path, body);
        assertEquals(200, r.status(), r.body());
        return r.json();
    }

    static void assertCounts(JsonNode usage, boolean exact) {
        JsonNode d = usage.get("completion_tokens_details");
        long acc = d.get("accepted_prediction_tokens").asLong(-1), rej = d.get("rejected_prediction_tokens").asLong(-1);
        long offered = usage.at("/timings/draft_n").asLong(), draftAccepted = usage.at("/timings/draft_n_accepted").asLong();
        assertTrue(acc > 0, "some prediction tokens accepted: " + usage);
        if (exact) {
            assertEquals(0, rej, "an exact prediction has no rejected tokens: " + usage);
            // every verify step commits its accepted drafts and one token of its own; the first token is the prefill's
            assertEquals(usage.get("completion_tokens").asLong() - usage.at("/timings/verify_steps").asLong() - 1, acc, usage.toString());
        }
        else assertTrue(rej > 0, "a partly wrong prediction has rejected tokens: " + usage);
        // no other draft on this server: every draft token offered came from the prediction
        assertEquals(offered, acc + rej, usage.toString());
        assertEquals(draftAccepted, acc, usage.toString());
        assertTrue(acc <= usage.get("completion_tokens").asLong(), usage.toString());
    }

    @Test
    void anExactPredictionIsAcceptedWithoutAConfiguredDraft() throws Exception {
        JsonNode plain = post(noDraft, "/v1/chat/completions", chatWith(null));
        assertEquals(TestServer.PLAIN, plain.at("/choices/0/message/content").asText());
        JsonNode pd = plain.at("/usage/completion_tokens_details");
        assertEquals(0, pd.get("accepted_prediction_tokens").asInt(-1), "always present, 0 without a prediction");
        assertEquals(0, pd.get("rejected_prediction_tokens").asInt(-1));
        assertEquals(0, plain.at("/usage/timings/draft_n").asInt(-1), "no draft configured, none used");

        JsonNode r = post(noDraft, "/v1/chat/completions", chatWith(content(TestServer.PLAIN)));
        assertEquals(TestServer.PLAIN, r.at("/choices/0/message/content").asText());
        assertCounts(r.get("usage"), true);
        assertEquals(plain.at("/usage/completion_tokens").asInt(), r.at("/usage/completion_tokens").asInt());
        assertTrue(r.at("/usage/timings/verify_steps").asInt() < plain.at("/usage/timings/verify_steps").asInt(),
                "fewer verify steps with the prediction: " + r.get("usage"));
    }

    @Test
    void aPartlyWrongPredictionAsTextPartsChangesNothing() throws Exception {
        String parts = "{\"type\":\"content\",\"content\":[{\"type\":\"text\",\"text\":\"Hello! How can we \"},"
                + "{\"type\":\"text\",\"text\":\"help you today?\"}]}";
        JsonNode r = post(noDraft, "/v1/chat/completions", chatWith(parts));
        assertEquals(TestServer.PLAIN, r.at("/choices/0/message/content").asText());
        assertCounts(r.get("usage"), false);
    }

    @Test
    void anUnrelatedPredictionProposesNothing() throws Exception {
        JsonNode r = post(noDraft, "/v1/chat/completions", chatWith(content("zebra quantum marmalade")));
        assertEquals(TestServer.PLAIN, r.at("/choices/0/message/content").asText());
        JsonNode d = r.at("/usage/completion_tokens_details");
        assertEquals(0, d.get("accepted_prediction_tokens").asInt(-1), r.toString());
        assertEquals(0, d.get("rejected_prediction_tokens").asInt(-1), r.toString());
    }

    @Test
    void streamedUsageCarriesTheCounts() throws Exception {
        TestServer.Resp r = noDraft.post("/v1/chat/completions", chatWith(content(TestServer.PLAIN))
                .replace("\"temperature\":0", "\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}"));
        assertEquals(200, r.status(), r.body());
        List<String> ev = r.events();
        assertEquals("[DONE]", ev.getLast());
        StringBuilder text = new StringBuilder();
        JsonNode usage = null;
        for (String e : ev.subList(0, ev.size() - 1)) {
            JsonNode c = Json.MAPPER.readTree(e);
            if (c.hasNonNull("usage")) usage = c.get("usage");
            JsonNode delta = c.at("/choices/0/delta/content");
            if (delta.isTextual()) text.append(delta.asText());
        }
        assertEquals(TestServer.PLAIN, text.toString());
        assertNotNull(usage, r.body());
        assertCounts(usage, true);
    }

    @Test
    void completionsTakeAStringOrTheObject() throws Exception {
        for (String pred : List.of(Json.MAPPER.valueToTree(TestServer.PLAIN).toString(), content(TestServer.PLAIN))) {
            JsonNode r = post(noDraft, "/v1/completions", "{\"prompt\":\"Hi\",\"temperature\":0,\"prediction\":" + pred + "}");
            assertEquals(TestServer.PLAIN, r.at("/choices/0/text").asText());
            assertCounts(r.get("usage"), true);
        }
    }

    @Test
    void aPredictionCombinesWithTheConfiguredDraft() throws Exception {
        JsonNode r = post(ngram, "/v1/chat/completions", chatWith(content(TestServer.PLAIN)));
        assertEquals(TestServer.PLAIN, r.at("/choices/0/message/content").asText());
        JsonNode u = r.get("usage");
        long acc = u.at("/completion_tokens_details/accepted_prediction_tokens").asLong();
        long rej = u.at("/completion_tokens_details/rejected_prediction_tokens").asLong();
        assertTrue(acc > 0 && rej == 0, u.toString());
        assertTrue(acc + rej <= u.at("/timings/draft_n").asLong(), u.toString());
        // speculative_q 0 turns speculation off, the prediction included
        JsonNode off = post(ngram, "/v1/chat/completions", chatWith(content(TestServer.PLAIN)).replace("\"temperature\":0", "\"temperature\":0,\"speculative_q\":0"));
        assertEquals(TestServer.PLAIN, off.at("/choices/0/message/content").asText());
        assertEquals(0, off.at("/usage/timings/draft_n").asInt(-1));
        assertEquals(0, off.at("/usage/completion_tokens_details/accepted_prediction_tokens").asInt(-1));
    }

    @Test
    void malformedPredictionsAre400sNamingTheField() throws Exception {
        Map<String, String> chat = new java.util.LinkedHashMap<>();
        chat.put("\"just a string\"", "prediction");
        chat.put("42", "prediction");
        chat.put("[\"a\"]", "prediction");
        chat.put("{\"content\":\"x\"}", "prediction.type");
        chat.put("{\"type\":\"text\",\"content\":\"x\"}", "prediction.type");
        chat.put("{\"type\":7,\"content\":\"x\"}", "prediction.type");
        chat.put("{\"type\":\"content\"}", "prediction.content");
        chat.put("{\"type\":\"content\",\"content\":5}", "prediction.content");
        chat.put("{\"type\":\"content\",\"content\":{\"text\":\"x\"}}", "prediction.content");
        chat.put("{\"type\":\"content\",\"content\":[\"x\"]}", "prediction.content[0]");
        chat.put("{\"type\":\"content\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"image_url\",\"image_url\":{\"url\":\"u\"}}]}",
                "prediction.content[1].type");
        chat.put("{\"type\":\"content\",\"content\":[{\"text\":\"a\"}]}", "prediction.content[0].type");
        chat.put("{\"type\":\"content\",\"content\":[{\"type\":\"text\"}]}", "prediction.content[0].text");
        chat.put("{\"type\":\"content\",\"content\":[{\"type\":\"text\",\"text\":[1]}]}", "prediction.content[0].text");
        for (var e : chat.entrySet()) expect("/v1/chat/completions", chatWith(e.getKey()), e.getValue(), null);
        expect("/v1/completions", "{\"prompt\":\"Hi\",\"prediction\":42}", "prediction", null);
        expect("/v1/completions", "{\"prompt\":\"Hi\",\"prediction\":{\"type\":\"content\",\"content\":[{\"type\":\"x\"}]}}",
                "prediction.content[0].type", null);
        // longer than the room the context leaves after the prompt (256 tokens here)
        String longText = "word ".repeat(400);
        JsonNode e = expect("/v1/chat/completions", chatWith(content(longText)), "prediction", "context_length_exceeded");
        assertTrue(e.get("message").asText().contains("256"), e.toString());
        assertTrue(e.get("message").asText().contains(" tokens; after the "), "within the character bound the prediction is tokenised and counted: " + e);
        // far beyond what the room can hold in characters (the longest token has 128 bytes): refused before tokenising,
        // the message counts characters; the same for completions
        String huge = "x".repeat(256 * 128 + 1);
        e = expect("/v1/chat/completions", chatWith(content(huge)), "prediction", "context_length_exceeded");
        assertTrue(e.get("message").asText().contains("is " + huge.length() + " characters"), e.toString());
        e = expect("/v1/completions", "{\"prompt\":\"Hi\",\"prediction\":\"" + huge + "\"}", "prediction", "context_length_exceeded");
        assertTrue(e.get("message").asText().contains("is " + huge.length() + " characters"), e.toString());
        // a prompt that alone exceeds the context is reported as such, whatever the prediction
        e = expect("/v1/completions", "{\"prompt\":\"" + "word ".repeat(400) + "\",\"prediction\":\"" + huge + "\"}", "prompt",
                "context_length_exceeded");
        // the server still serves
        assertEquals(TestServer.PLAIN, post(noDraft, "/v1/chat/completions", chatWith(null)).at("/choices/0/message/content").asText());
    }

    @Test
    void aPromptBeyondTheContextInCharactersIsRefusedBeforeItIsTokenised() throws Exception {
        JsonNode e;
        // a prompt (or a text to tokenize) with more characters than 256 tokens of at most 128 bytes can hold is refused
        // before it is tokenised (both bodies are past HttpVerticle.LONG_TEXT_BYTES: none of them waits for the long-text lane)
        for (int chars : new int[]{256 * 128 + 1, 2 * HttpVerticle.LONG_TEXT_BYTES + 1}) {
            String x = "x".repeat(chars);
            e = expect("/v1/chat/completions", TestServer.chat(x, ""), "messages", "context_length_exceeded");
            assertTrue(e.get("message").asText().contains(" characters, more than this server's context limit of 256 tokens"), e.toString());
            e = expect("/v1/completions", "{\"prompt\":\"" + x + "\"}", "prompt", "context_length_exceeded");
            assertTrue(e.get("message").asText().contains("the prompt is " + chars + " characters"), e.toString());
            // /tokenize applies the same bound to each of its ways of giving the text
            for (String field : new String[]{"content", "prompt"}) {
                e = expect("/tokenize", "{\"" + field + "\":\"" + x + "\"}", field, "context_length_exceeded");
                assertTrue(e.get("message").asText().contains("the prompt is " + chars + " characters"), e.toString());
            }
            e = expect("/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"" + x + "\"}]}", "messages",
                    "context_length_exceeded");
            assertTrue(e.get("message").asText().contains("context limit of 256 tokens"), e.toString());
        }
    }

    static JsonNode expect(String path, String body, String param, String code) throws Exception {
        TestServer.Resp r = noDraft.post(path, body);
        assertEquals(400, r.status(), "status for " + body + ": " + r.body());
        JsonNode e = r.json().get("error");
        assertEquals(param, e.path("param").asText(null), "param for " + body + ": " + r.body());
        assertTrue(e.get("message").asText().startsWith(param + ":"), "message names " + param + ": " + r.body());
        if (code != null) assertEquals(code, e.path("code").asText(null), r.body());
        return e;
    }
}
