package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.text.Tokenizer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@code thinking_token_budget} on chat and Anthropic's {@code thinking.budget_tokens}, on the scripted model, which in
 * thinking mode reasons for a dozen tokens ({@link TestServer#THINKING}): a budget cuts the reasoning after that many
 * tokens and the answer follows; without thinking mode, or with a budget the reasoning stays under, nothing changes.
 */
class ReasoningBudgetServerTest {
    static TestServer server;

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("speculative.draft", "none"));
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    /** The reasoning the scripted model writes in its first n tokens. */
    static String firstTokens(int n) {
        Tokenizer t = TestServer.tokenizer();
        return t.decode(Arrays.copyOf(t.encode(TestServer.THINKING), n));
    }

    static JsonNode chat(String extra) throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("hi", "\"max_tokens\":60,"
                + "\"chat_template_kwargs\":{\"thinking\":true}" + extra));
        assertEquals(200, r.status(), r.body());
        return r.json().at("/choices/0/message");
    }

    @Test
    void aBudgetCutsTheReasoning() throws Exception {
        JsonNode free = chat("");
        String reasoning = TestServer.THINKING.substring(0, TestServer.THINKING.indexOf("</think>"));
        assertEquals(reasoning, free.get("reasoning_content").asText(), free.toString());

        JsonNode cut = chat(",\"thinking_token_budget\":3");
        assertEquals(firstTokens(3), cut.get("reasoning_content").asText(), cut.toString());
        assertFalse(cut.get("content").asText().isEmpty(), "the answer follows the cut: " + cut);

        // the thinking object's budget_tokens (Anthropic's shape) is the same budget; adaptive is thinking mode
        JsonNode inThinking = chat(",\"thinking\":{\"type\":\"adaptive\",\"budget_tokens\":3}");
        assertEquals(firstTokens(3), inThinking.get("reasoning_content").asText(), inThinking.toString());
        TestServer.Resp both = server.post("/v1/chat/completions", TestServer.chat("hi", "\"thinking\":{\"type\":\"enabled\","
                + "\"budget_tokens\":3},\"thinking_token_budget\":4"));
        assertEquals(400, both.status(), both.body());
        assertEquals("thinking.budget_tokens", both.json().at("/error/param").asText(), both.body());

        JsonNode ample = chat(",\"thinking_token_budget\":1000");
        assertEquals(free, ample, "a budget the reasoning stays under changes nothing");

        TestServer.Resp bad = server.post("/v1/chat/completions", TestServer.chat("hi", "\"thinking_token_budget\":-1"));
        assertEquals(400, bad.status(), bad.body());
        assertEquals("thinking_token_budget", bad.json().at("/error/param").asText(), bad.body());
    }

    @Test
    void anthropicsBudgetTokensCutTheThinking() throws Exception {
        TestServer.Resp r = server.post("/v1/messages", "{\"model\":\"scripted\",\"max_tokens\":60,\"thinking\":{\"type\":\"enabled\","
                + "\"budget_tokens\":3},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
        assertEquals(200, r.status(), r.body());
        JsonNode content = r.json().get("content");
        assertEquals("thinking", content.get(0).get("type").asText(), r.body());
        assertEquals(firstTokens(3), content.get(0).get("thinking").asText(), r.body());
        assertEquals("text", content.get(1).get("type").asText(), r.body());

        // adaptive: thinking as long as the model likes
        TestServer.Resp adaptive = server.post("/v1/messages", "{\"model\":\"scripted\",\"max_tokens\":60,\"thinking\":"
                + "{\"type\":\"adaptive\"},\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}");
        assertEquals(200, adaptive.status(), adaptive.body());
        assertEquals(TestServer.THINKING.substring(0, TestServer.THINKING.indexOf("</think>")),
                adaptive.json().at("/content/0/thinking").asText(), adaptive.body());
    }
}
