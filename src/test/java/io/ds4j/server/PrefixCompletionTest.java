package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.chat.V4Format;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Continuing the last assistant message (DeepSeek's chat prefix completion, {@code "prefix": true}; vLLM's
 * {@code continue_final_message}; Anthropic's prefill) on a scripted model that answers by what the prompt ends with:
 * the prompt stays open after the message (no end of sentence), the answer is only the continuation, in thinking mode
 * it is content or reasoning as the message left off, and a constraint goes on from where the message stops.
 */
class PrefixCompletionTest {
    static TestServer server;
    /** The text of the last prompt the model saw. */
    static final AtomicReference<String> lastPrompt = new AtomicReference<>("");

    static int[] script(int[] prompt) {
        Tokenizer t = TestServer.tokenizer();
        String text = t.decode(prompt);
        lastPrompt.set(text);
        if (text.endsWith("```python\n")) return t.encode("print(1)\n```\nDone.");
        if (text.endsWith("<think>Let me")) return t.encode(" think.</think>Paris.");
        if (text.endsWith("</think>The answer")) return t.encode(" is 42.");
        if (text.endsWith("{\"a\": ")) return t.encode("1}");
        return TestServer.defaultScript(prompt);
    }

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.scripted(new ScriptedBackend(PrefixCompletionTest::script), Map.of("speculative.draft", "none"));
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    static String body(String assistant, String extra) {
        return "{\"model\":\"scripted\",\"temperature\":0,\"max_tokens\":60,\"messages\":[{\"role\":\"user\",\"content\":"
                + "\"Write code\"}," + assistant + "]" + extra + "}";
    }

    static JsonNode ok(String path, String body) throws Exception {
        TestServer.Resp r = server.post(path, body);
        assertEquals(200, r.status(), r.body());
        return r.json();
    }

    static void refused(String body, String param, String message) throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", body);
        assertEquals(400, r.status(), r.body());
        assertEquals(param, r.json().at("/error/param").asText(), r.body());
        assertTrue(r.json().at("/error/message").asText().contains(message), r.body());
    }

    @Test
    void theAnswerContinuesThePrefix() throws Exception {
        JsonNode a = ok("/v1/chat/completions", body("{\"role\":\"assistant\",\"content\":\"```python\\n\",\"prefix\":true}",
                ",\"stop\":[\"```\"]"));
        assertEquals("print(1)\n", a.at("/choices/0/message/content").asText(), a.toString());
        assertEquals("stop", a.at("/choices/0/finish_reason").asText());
        assertTrue(lastPrompt.get().endsWith(V4Format.ASSISTANT + V4Format.THINK_END + "```python\n"), lastPrompt.get());

        // vLLM's switch (with its add_generation_prompt, read), streamed: the same continuation
        TestServer.Resp s = server.post("/v1/chat/completions", body("{\"role\":\"assistant\",\"content\":\"```python\\n\"}",
                ",\"continue_final_message\":true,\"add_generation_prompt\":false,\"stop\":[\"```\"],\"stream\":true"));
        assertFalse(s.headers().firstValue(RequestFields.HEADER).isPresent(), "every field read: " + s.headers().map());
        assertEquals(200, s.status(), s.body());
        assertTrue(s.body().contains("\"content\":\"print\""), s.body());
        assertFalse(s.body().contains("python"), "the prefix is not sent back: " + s.body());

        // without the flag there is nothing to answer: the template would close the turn and open none (the model
        // wrote past the end of the conversation); /tokenize still renders the finished conversation
        refused(body("{\"role\":\"assistant\",\"content\":\"```python\\n\"}", ""), "messages[1]",
                "the last message is the assistant's, so there is nothing to answer");
        TestServer.Resp tok = server.post("/tokenize", body("{\"role\":\"assistant\",\"content\":\"```python\\n\"}", ",\"with_pieces\":true"));
        assertEquals(200, tok.status(), tok.body());
        assertTrue(tok.body().contains(V4Format.EOS), tok.body());
        // add_generation_prompt false (vLLM's): a conversation ending with the user's turn gets no assistant opening
        TestServer.Resp open = server.post("/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"with_pieces\":true}");
        TestServer.Resp closed = server.post("/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                + "\"add_generation_prompt\":false,\"with_pieces\":true}");
        assertTrue(open.body().contains(V4Format.ASSISTANT), open.body());
        assertFalse(closed.body().contains(V4Format.ASSISTANT), closed.body());
    }

    @Test
    void inThinkingModeTheAnswerGoesOnWhereTheMessageLeftOff() throws Exception {
        String thinking = ",\"chat_template_kwargs\":{\"thinking\":true}";
        JsonNode content = ok("/v1/chat/completions", body("{\"role\":\"assistant\",\"reasoning_content\":\"I know it\","
                + "\"content\":\"The answer\",\"prefix\":true}", thinking));
        assertEquals(" is 42.", content.at("/choices/0/message/content").asText(), content.toString());
        assertTrue(content.at("/choices/0/message/reasoning_content").isMissingNode()
                || content.at("/choices/0/message/reasoning_content").isNull(), content.toString());

        JsonNode reasoning = ok("/v1/chat/completions", body("{\"role\":\"assistant\",\"reasoning_content\":\"Let me\","
                + "\"content\":\"\",\"prefix\":true}", thinking));
        assertEquals(" think.", reasoning.at("/choices/0/message/reasoning_content").asText(), reasoning.toString());
        assertEquals("Paris.", reasoning.at("/choices/0/message/content").asText(), reasoning.toString());
    }

    @Test
    void aConstraintGoesOnFromThePrefix() throws Exception {
        JsonNode a = ok("/v1/chat/completions", body("{\"role\":\"assistant\",\"content\":\"{\\\"a\\\": \",\"prefix\":true}",
                ",\"response_format\":{\"type\":\"json_object\"}"));
        assertEquals("1}", a.at("/choices/0/message/content").asText(), a.toString());
        assertEquals("stop", a.at("/choices/0/finish_reason").asText(), a.toString());

        refused(body("{\"role\":\"assistant\",\"content\":\"Sure: {\",\"prefix\":true}", ",\"response_format\":{\"type\":\"json_object\"}"),
                "messages[1].prefix", "the message's content cannot begin an output of");
        refused(body("{\"role\":\"assistant\",\"content\":\"I\",\"prefix\":true}", ",\"tool_choice\":\"required\",\"tools\":["
                + AutoToolCallsTest.tool("get_weather", false, "{\"city\":{\"type\":\"string\"}}") + "]"),
                "messages[1].prefix", "a forced tool call");
        refused(body("{\"role\":\"assistant\",\"content\":\" {\",\"prefix\":true}", ",\"response_format\":{\"type\":\"json_object\"}"),
                "messages[1].prefix", "no space or line break before it");
        // without whitespace between tokens (disable_any_whitespace) the prefix's own space is refused, and the error
        // says which rule it broke; the same prefix without it goes on
        String compact = ",\"response_format\":{\"type\":\"json_object\"},\"structured_outputs\":{\"disable_any_whitespace\":true}";
        refused(body("{\"role\":\"assistant\",\"content\":\"{\\\"a\\\": \",\"prefix\":true}", compact), "messages[1].prefix",
                "cannot begin an output of json_object without whitespace between its tokens (disable_any_whitespace)");
        JsonNode c = ok("/v1/chat/completions", body("{\"role\":\"assistant\",\"content\":\"{\\\"a\\\":\",\"prefix\":true}", compact));
        assertFalse(c.at("/choices/0/message/content").asText().matches("(?s)^\\s.*"), c.toString());
        // a call begun in the message would reach the client as markup: the parser reads the answer from where it stops
        refused(body("{\"role\":\"assistant\",\"content\":\"\\n\\n<\uFF5CDSML\uFF5Ctool_calls>\\n\",\"prefix\":true}",
                ",\"tools\":[" + AutoToolCallsTest.tool("get_weather", true, "{\"city\":{\"type\":\"string\"}}") + "]"),
                "messages[1].prefix", "holds tool-call markup");
    }

    @Test
    void badPrefixesAreNamed() throws Exception {
        refused("{\"model\":\"scripted\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\",\"prefix\":true},"
                + "{\"role\":\"assistant\",\"content\":\"Hello\"},{\"role\":\"user\",\"content\":\"Again\"}]}",
                "messages[0].prefix", "only the last message");
        refused("{\"model\":\"scripted\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\",\"prefix\":true}]}",
                "messages[0].role", "only an assistant message can be continued, got user");
        refused(body("{\"role\":\"assistant\",\"content\":\"x\",\"prefix\":\"yes\"}", ""), "messages[1].prefix", "must be true or false");
        refused(body("{\"role\":\"assistant\",\"content\":\"x\",\"prefix\":true}", ",\"continue_final_message\":false"),
                "continue_final_message", "is false while messages[1].prefix is true");
        refused(body("{\"role\":\"assistant\",\"content\":\"x\",\"prefix\":false}", ",\"continue_final_message\":true"),
                "messages[1].prefix", "is false while continue_final_message is true");
        refused(body("{\"role\":\"assistant\",\"content\":\"x\"}", ",\"continue_final_message\":true,\"add_generation_prompt\":true"),
                "add_generation_prompt", "cannot be true while continue_final_message continues the last message");
        refused("{\"model\":\"scripted\",\"continue_final_message\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
                "messages[0].role", "only an assistant message can be continued");
    }

    @Test
    void anthropicPrefillIsContinued() throws Exception {
        JsonNode m = ok("/v1/messages", "{\"model\":\"scripted\",\"max_tokens\":60,\"stop_sequences\":[\"```\"],\"messages\":["
                + "{\"role\":\"user\",\"content\":\"Write code\"},{\"role\":\"assistant\",\"content\":\"```python\\n\"}]}");
        assertEquals("print(1)\n", m.at("/content/0/text").asText(), m.toString());
        assertEquals("stop_sequence", m.get("stop_reason").asText(), m.toString());
    }
}
