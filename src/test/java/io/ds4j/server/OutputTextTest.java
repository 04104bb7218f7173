package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.ds4j.text.Tokenizer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * What text a client gets: control tokens (the tokenizer's added tokens) never reach content, reasoning or the
 * logprobs' token text unless the request says {@code skip_special_tokens: false}, and with a stop string the
 * logprobs' tokens join to exactly the content.
 */
class OutputTextTest {
    static TestServer server;
    static final Tokenizer TOK = TestServer.tokenizer();
    static final int THINK_END = TOK.id("</think>").orElseThrow();
    static final int TOOL_CALL_BEGIN = TOK.id("<｜tool▁call▁begin｜>").orElseThrow();

    /** Prompts that mention "controls" get a script with control tokens in the middle of text. */
    static int[] script(int[] prompt) {
        String text = TOK.decode(prompt);
        if (!text.contains("controls")) return TestServer.defaultScript(prompt);
        int[] a = TOK.encode("Hello"), b = TOK.encode(" world"), c = TOK.encode("Why");
        boolean thinking = text.endsWith("<think>");
        int[] out = new int[a.length + b.length + c.length + 4];
        int n = 0;
        if (thinking) {
            for (int t : c) out[n++] = t;
            out[n++] = TOOL_CALL_BEGIN;
            out[n++] = THINK_END; // ends the reasoning: markup the parser reads
        }
        for (int t : a) out[n++] = t;
        out[n++] = TOOL_CALL_BEGIN;
        out[n++] = THINK_END; // after the reasoning (or in chat mode): a stray control token
        for (int t : b) out[n++] = t;
        return java.util.Arrays.copyOf(out, n);
    }

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.scripted(new ScriptedBackend(OutputTextTest::script), Map.of());
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    static JsonNode chat(String user, String extra) throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat(user, "\"temperature\":0," + extra));
        assertEquals(200, r.status(), r.body());
        return r.json().at("/choices/0");
    }

    static String joinedTokens(JsonNode choice) {
        StringBuilder s = new StringBuilder();
        for (JsonNode t : choice.at("/logprobs/content")) s.append(t.get("token").asText());
        return s.toString();
    }

    @Test
    void controlTokensAreLeftOutOfTheText() throws Exception {
        JsonNode c = chat("show controls", "\"logprobs\":true");
        assertEquals("Hello world", c.at("/message/content").asText());
        assertEquals("Hello world", joinedTokens(c), "logprob text as the content");
        JsonNode keep = chat("show controls", "\"skip_special_tokens\":false,\"logprobs\":true");
        assertEquals("Hello<｜tool▁call▁begin｜></think> world", keep.at("/message/content").asText());
        // the end-of-sentence token that ended the turn is listed too (its text is never content)
        assertEquals("Hello<｜tool▁call▁begin｜></think> world<｜end▁of▁sentence｜>", joinedTokens(keep));
        // thinking mode: the first </think> still ends the reasoning; the control tokens around it are not text
        JsonNode t = chat("show controls", "\"chat_template_kwargs\":{\"thinking\":true}");
        assertEquals("Why", t.at("/message/reasoning_content").asText());
        assertEquals("Hello world", t.at("/message/content").asText());
        // completions: the same
        TestServer.Resp r = server.post("/v1/completions", "{\"prompt\":\"show controls\",\"temperature\":0,\"logprobs\":0}");
        assertEquals("Hello world", r.json().at("/choices/0/text").asText(), r.body());
    }

    /** End-of-sentence tokens that ignore_eos passes over are not text, so they are listed without text. */
    @Test
    void endTokensPassedOverByIgnoreEosAreListedWithoutText() throws Exception {
        String bias = "\"logit_bias\":{\"" + TOK.eosId() + "\":100},\"max_tokens\":3,\"ignore_eos\":true,\"logprobs\":true";
        for (String skip : new String[]{"true", "false"}) {
            JsonNode c = chat("Hi", bias + ",\"skip_special_tokens\":" + skip);
            assertEquals("", c.at("/message/content").asText(), c.toString());
            assertEquals(3, c.at("/logprobs/content").size(), c.toString());
            assertEquals("", joinedTokens(c), "skip_special_tokens " + skip + ": " + c);
        }
    }

    @Test
    void aForcedThinkEndIsNotContent() throws Exception {
        // logit_bias forcing </think> in chat mode: the model "writes" it three times
        String bias = "\"logit_bias\":{\"" + THINK_END + "\":100},\"max_tokens\":3";
        assertEquals("", chat("Hi", bias).at("/message/content").asText());
        assertEquals("</think></think></think>", chat("Hi", bias + ",\"skip_special_tokens\":false").at("/message/content").asText());
    }

    @Test
    void logprobTokensJoinToTheContentWhateverTheStopString() throws Exception {
        // the scripted answer is TestServer.PLAIN, "Hello! How can I help you today?"
        for (String stop : new String[]{"help", "elp yo", "!", "today?", "Hello", "o! How"}) {
            JsonNode c = chat("Hi", "\"logprobs\":true,\"stop\":" + Json.MAPPER.valueToTree(stop));
            String content = c.at("/message/content").asText();
            assertEquals(TestServer.PLAIN.substring(0, TestServer.PLAIN.indexOf(stop)), content, "stop " + stop);
            assertEquals(content, joinedTokens(c), "stop " + stop + ": " + c.at("/logprobs"));
            // streamed: the same tokens
            TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi",
                    "\"temperature\":0,\"stream\":true,\"logprobs\":true,\"stop\":" + Json.MAPPER.valueToTree(stop)));
            StringBuilder text = new StringBuilder(), toks = new StringBuilder();
            for (String e : r.events()) {
                if (e.equals("[DONE]")) continue;
                JsonNode ch = Json.MAPPER.readTree(e).at("/choices/0");
                text.append(ch.at("/delta/content").asText(""));
                for (JsonNode t : ch.at("/logprobs/content")) toks.append(t.get("token").asText());
            }
            assertEquals(content, text.toString(), "stream, stop " + stop);
            assertEquals(content, toks.toString(), "stream, stop " + stop);
        }
        // without a stop string every token is listed
        assertEquals(TestServer.PLAIN, joinedTokens(chat("Hi", "\"logprobs\":true")));
    }
}
