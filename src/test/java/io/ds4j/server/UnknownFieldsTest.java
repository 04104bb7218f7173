package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Request body fields an endpoint does not read (a newcomer's {@code max_token} ran 4096 tokens without a word): they
 * are named in a warning and in the x-ds4j-ignored-fields header, with a "did you mean", and change nothing else;
 * under server.rejectUnknownFields (live) they are a 400 as OpenAI words it. A body with every field the endpoints
 * read gets no warning, which keeps the parser's reads and the documented fields together.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class UnknownFieldsTest {
    @TempDir
    static Path dir;
    static Path file;
    static TestServer server;

    static final String CHAT = "/v1/chat/completions";

    @BeforeAll
    static void start() throws Exception {
        file = dir.resolve("server.json");
        String text = "{\"server\": {\"configScanMs\": 100}}";
        Files.writeString(file, text);
        server = TestServer.start(TestServer.provider(new ScriptedBackend(TestServer::defaultScript)), Map.of(), file, text);
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    static String ignored(TestServer.Resp r) {
        return r.headers().firstValue(RequestFields.HEADER).orElse(null);
    }

    /** The answer without what differs between two runs (ids, times). */
    static JsonNode answer(TestServer.Resp r) {
        JsonNode j = r.json();
        return Json.object().<com.fasterxml.jackson.databind.node.ObjectNode>set("choices", j.get("choices"))
                .put("completion_tokens", j.at("/usage/completion_tokens").asInt());
    }

    @Test
    @Order(1)
    void unknownFieldsAreNamedAndChangeNothing() throws Exception {
        TestServer.Resp plain = server.post(CHAT, TestServer.chat("Hi", "\"temperature\":0"));
        assertEquals(200, plain.status(), plain.body());
        assertNull(ignored(plain), "a body of known fields gets no header");
        try (LogCapture log = new LogCapture()) {
            TestServer.Resp r = server.post(CHAT, TestServer.chat("Hi", "\"temperature\":0,\"max_token\":3,"
                    + "\"chat_template_kwargs\":{\"thinkng\":false},\"stop_sequences\":[\"x\"],\"unused\":null"));
            assertEquals(200, r.status(), r.body());
            assertEquals("max_token (did you mean max_tokens?), chat_template_kwargs.thinkng (did you mean"
                    + " chat_template_kwargs.thinking?), stop_sequences", ignored(r), "a null value asks for nothing");
            assertEquals(answer(plain), answer(r), "the ignored fields change nothing");
            // vLLM's fields this server does not take say so, not "did you mean" a name that only looks alike
            TestServer.Resp v = server.post(CHAT, TestServer.chat("Hi", "\"temperature\":0,\"bad_words\":[\"x\"]"));
            assertEquals("bad_words (vLLM's bad_words is not supported (logit_bias can ban token ids))", ignored(v));
            String id = r.json().get("id").asText();
            List<String> warn = log.linesWith("ignored 3 unknown fields");
            assertEquals(1, warn.size(), log.lines().toString());
            assertTrue(warn.getFirst().contains("WARN") && warn.getFirst().contains("request " + id + ": POST " + CHAT)
                    && warn.getFirst().endsWith(ignored(r)), warn.getFirst());
        }
    }

    @Test
    @Order(2)
    void aStreamCarriesTheHeaderToo() throws Exception {
        String extra = "\"stream\":true,\"stream_options\":{\"include_usage\":true,\"include_usge\":true}";
        TestServer.Resp r = server.post(CHAT, TestServer.chat("Hi", extra));
        assertEquals(200, r.status(), r.body());
        assertTrue(r.headers().firstValue("content-type").orElse("").startsWith("text/event-stream"), r.headers().toString());
        assertEquals("stream_options.include_usge (did you mean stream_options.include_usage?)", ignored(r));
        assertEquals("[DONE]", r.events().getLast());
        assertTrue(r.events().get(r.events().size() - 2).contains("\"usage\""), "include_usage still applies: " + r.body());
    }

    @Test
    @Order(3)
    void everyEndpointNamesWhatItIgnores() throws Exception {
        TestServer.Resp c = server.post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokns\":3,\"Stream\":false,"
                + "\"temprature\":0,\"messages\":[]}");
        assertEquals(200, c.status(), c.body());
        assertEquals("max_tokns (did you mean max_tokens?), Stream (did you mean stream?), temprature (did you mean"
                + " temperature?), messages", ignored(c), "messages belongs to chat");
        TestServer.Resp t = server.post("/tokenize", "{\"content\":\"Hi\",\"with_piece\":true,\"add_specials\":true}");
        assertEquals(200, t.status(), t.body());
        assertEquals("with_piece (did you mean with_pieces?), add_specials (did you mean add_special?)", ignored(t));
        // a second text (prompt beside content) is no ignored field but a 400 naming both (BadInputTest)
        assertEquals(400, server.post("/tokenize", "{\"content\":\"Hi\",\"prompt\":\"other\"}").status());
        TestServer.Resp d = server.post("/detokenize", "{\"tokens\":[1],\"token\":[2]}");
        assertEquals(200, d.status(), d.body());
        assertEquals("token (did you mean tokens?)", ignored(d));
        // fields deep in messages, with their paths
        TestServer.Resp m = server.post(CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                + "\"text\":\"Hi\",\"cache_control\":{\"type\":\"ephemeral\"}}],\"nmae\":\"x\"}]}");
        assertEquals(200, m.status(), m.body());
        assertEquals("messages[0].content[0].cache_control, messages[0].nmae (did you mean messages[0].name?)", ignored(m));
    }

    /**
     * A message's name (OpenAI's participant name) is read, a string as OpenAI types it, but DeepSeek-V4's chat format
     * has no place for it: the answer does not depend on it, so it is named as ignored, with why, in the header and the
     * log line, on chat (streamed or not) and on /tokenize's messages.
     */
    @Test
    @Order(3)
    void aMessagesNameIsNamedAsIgnored() throws Exception {
        String named = "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\",\"name\":\"sys\"},"
                + "{\"role\":\"user\",\"content\":\"Hi\",\"name\":\"bob\"}],\"temperature\":0";
        String plainBody = named.replace(",\"name\":\"sys\"", "").replace(",\"name\":\"bob\"", "");
        String why = " (not rendered: DeepSeek-V4's chat format has no place for a message's name)";
        String expected = "messages[0].name" + why + ", messages[1].name" + why;
        TestServer.Resp plain = server.post(CHAT, plainBody + "}");
        assertEquals(200, plain.status(), plain.body());
        try (LogCapture log = new LogCapture()) {
            TestServer.Resp r = server.post(CHAT, named + "}");
            assertEquals(200, r.status(), r.body());
            assertEquals(expected, ignored(r));
            assertEquals(answer(plain), answer(r), "the name changes nothing");
            List<String> warn = log.linesWith("ignored 2 unknown fields");
            assertEquals(1, warn.size(), log.lines().toString());
            assertTrue(warn.getFirst().contains("request " + r.json().get("id").asText() + ": POST " + CHAT)
                    && warn.getFirst().endsWith(expected), warn.getFirst());
        }
        TestServer.Resp s = server.post(CHAT, named + ",\"stream\":true}");
        assertEquals(200, s.status(), s.body());
        assertEquals(expected, ignored(s), "streamed");
        String noSampling = ",\"temperature\":0";
        TestServer.Resp t = server.post("/tokenize", named.replace(noSampling, "") + "}");
        assertEquals(200, t.status(), t.body());
        assertEquals(expected, ignored(t), "tokenize renders the messages as chat does");
        assertEquals(server.post("/tokenize", plainBody.replace(noSampling, "") + "}").json().get("tokens"), t.json().get("tokens"));
        // still checked as OpenAI types it
        TestServer.Resp bad = server.post(CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\",\"name\":7}]}");
        assertEquals(400, bad.status(), bad.body());
        assertEquals("messages[0].name", bad.json().at("/error/param").asText(), bad.body());
    }

    /**
     * {@code store: true} asks for a completion kept to fetch later, which this server never does: named as ignored, with
     * why, on chat, completions and the Responses API; {@code store: false} asks for nothing and stays silent.
     */
    @Test
    @Order(3)
    void storeTrueIsNamedAsIgnored() throws Exception {
        try (LogCapture log = new LogCapture()) {
            TestServer.Resp r = server.post(CHAT, TestServer.chat("Hi", "\"store\":true"));
            assertEquals(200, r.status(), r.body());
            assertEquals("store (this server stores nothing)", ignored(r));
            List<String> warn = log.linesWith("request " + r.json().get("id").asText() + ": POST " + CHAT + ": ignored");
            assertEquals(1, warn.size(), log.lines().toString());
        }
        TestServer.Resp s = server.post(CHAT, TestServer.chat("Hi", "\"store\":true,\"stream\":true"));
        assertEquals("store (this server stores nothing)", ignored(s), "streamed");
        TestServer.Resp c = server.post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":2,\"store\":true}");
        assertEquals("store (this server stores nothing)", ignored(c), "completions");
        TestServer.Resp resp = server.post("/v1/responses", "{\"input\":\"Hi\",\"max_output_tokens\":2,\"store\":true}");
        assertEquals(200, resp.status(), resp.body());
        assertEquals("store (this server stores nothing)", ignored(resp), "responses");
        assertFalse(resp.json().get("store").asBoolean(), resp.body());
        for (String quiet : new String[]{"\"store\":false", "\"store\":null"})
            assertNull(ignored(server.post(CHAT, TestServer.chat("Hi", quiet))), quiet);
    }

    @Test
    @Order(4)
    void namesAreShownPrintableAndTheListIsBounded() throws Exception {
        StringBuilder many = new StringBuilder();
        for (int i = 0; i < 20; i++) many.append(",\"zz").append(i).append("\":1");
        TestServer.Resp r = server.post(CHAT, TestServer.chat("Hi", "\"m\\u00e4x\\n\":1" + many));
        assertEquals(200, r.status(), r.body());
        String h = ignored(r);
        assertTrue(h.startsWith("m\\u00e4x\\u000a, zz0, "), h);
        assertTrue(h.endsWith(", zz6, and 13 more"), h);
        // an empty name, top-level or nested, is shown as "" rather than as nothing
        TestServer.Resp e = server.post(CHAT, TestServer.chat("Hi", "\"\":1,\"stream_options\":{\"\":2},\"stream\":true"));
        assertEquals(200, e.status(), e.body());
        assertEquals("\"\", stream_options.\"\"", ignored(e));
    }

    /**
     * Every field the endpoints read, nested ones included, and the OpenAI fields accepted on purpose: no warning. A
     * field the parser stops reading, or a reader that no longer records what it reads, shows here.
     */
    @Test
    @Order(5)
    void aBodyOfEveryKnownFieldGetsNoWarning() throws Exception {
        String tools = """
                "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                  "strict": true, "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                  "days": {"type": "integer"}},
                  "required": ["city"], "additionalProperties": false}}}]""";
        String messages = """
                "messages": [
                  {"role": "system", "content": "Be brief."},
                  {"role": "developer", "content": "Answer in English."},
                  {"role": "user", "content": [{"type": "text", "text": "Hi"}, "there"]},
                  {"role": "assistant", "content": null, "refusal": "No."},
                  {"role": "user", "content": "And the weather?"},
                  {"role": "assistant", "content": "Let me check.", "reasoning_content": "A tool call.", "annotations": [],
                   "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get_weather",
                     "arguments": "{\\"city\\": \\"Paris\\"}"}}]},
                  {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
                  {"role": "user", "content": "Thanks"}]""";
        String sampling = """
                "temperature": 0, "top_p": 1, "top_k": 0, "min_p": 0, "presence_penalty": 0, "frequency_penalty": 0,
                "repetition_penalty": 1, "seed": 7, "stop": ["\\n\\n\\n"], "logit_bias": {"5": 0}, "ignore_eos": false,
                "stop_token_ids": [5], "include_stop_str_in_output": false,
                "skip_special_tokens": true, "speculative_q": "auto", "cache_prompt": true, "n": 1,
                "user": "u1", "safety_identifier": "s1", "metadata": {"k": "v"}, "store": false,
                "service_tier": "auto", "prompt_cache_key": "p1\"""";
        String chat = "{\"model\": \"scripted\", " + messages + ", " + tools + ", " + sampling + """
                , "stream": false, "max_tokens": 8, "max_completion_tokens": 8, "logprobs": true, "top_logprobs": 2,
                "tool_choice": "auto", "parallel_tool_calls": true,
                "response_format": {"type": "json_schema", "json_schema": {"name": "r", "description": "d",
                  "strict": false, "schema": {"type": "object"}}},
                "chat_template_kwargs": {"thinking": true, "enable_thinking": true, "reasoning_effort": "high"},
                "thinking": {"type": "enabled"}, "reasoning_effort": "high", "modalities": ["text"],
                "prediction": {"type": "content", "content": [{"type": "text", "text": "Hello"}]}}""";
        TestServer.Resp r = server.post(CHAT, chat);
        assertEquals(200, r.status(), r.body());
        assertNull(ignored(r), "chat");

        // the scripted model calls get_weather when asked about the weather
        String streamed = TestServer.chat("What is the weather in Paris?", "\"stream\":true,\"max_tokens\":64,"
                + "\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true},"
                + "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}," + tools);
        r = server.post(CHAT, streamed);
        assertEquals(200, r.status(), r.body());
        assertNull(ignored(r), "chat streamed, forced tool");

        String completion = "{\"model\": \"scripted\", \"prompt\": [\"Hi\"], \"echo\": true, \"logprobs\": 1, \"best_of\": 1,"
                + " \"max_tokens\": 4, \"prediction\": \"Hello\", " + sampling + "}";
        r = server.post("/v1/completions", completion);
        assertEquals(200, r.status(), r.body());
        assertNull(ignored(r), "completions");

        r = server.post("/tokenize", "{\"model\": \"scripted\", \"content\": \"Hi\", \"add_special\": true, \"with_pieces\": true}");
        assertEquals(200, r.status(), r.body());
        assertNull(ignored(r), "tokenize");
        r = server.post("/tokenize", "{\"model\": \"scripted\", \"with_pieces\": false, " + messages + ", " + tools
                + ", \"chat_template_kwargs\": {\"thinking\": true}}");
        assertEquals(200, r.status(), r.body());
        assertNull(ignored(r), "tokenize messages");
        r = server.post("/detokenize", "{\"model\": \"scripted\", \"tokens\": [1, 2]}");
        assertEquals(200, r.status(), r.body());
        assertNull(ignored(r), "detokenize");
    }

    /**
     * An assistant message sent back as this server answered it is read whole: a thinking answer carries its reasoning
     * twice, as reasoning_content and as reasoning (the name newer vLLM clients read), and a client that appends the
     * answer's message to its history (the usual multi-turn loop) sends both; neither is an unknown field.
     */
    @Test
    @Order(5)
    void anAnswerSentBackInTheHistoryIsNoUnknownField() throws Exception {
        TestServer.Resp first = server.post(CHAT, TestServer.chat("Hi", "\"reasoning_effort\":\"high\",\"max_tokens\":32"));
        assertEquals(200, first.status(), first.body());
        JsonNode said = first.json().at("/choices/0/message");
        assertTrue(said.has("reasoning_content") && said.has("reasoning"), said.toString());
        String history = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, " + Json.write(said)
                + ", {\"role\": \"user\", \"content\": \"And?\"}], \"max_tokens\": 4}";
        TestServer.Resp r = server.post(CHAT, history);
        assertEquals(200, r.status(), r.body());
        assertNull(ignored(r), "the server's own message");
        // reasoning alone is read as reasoning_content is
        r = server.post(CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\","
                + " \"content\": \"Hello\", \"reasoning\": \"A greeting.\"}, {\"role\": \"user\", \"content\": \"And?\"}],"
                + " \"max_tokens\": 4}");
        assertEquals(200, r.status(), r.body());
        assertNull(ignored(r), "reasoning alone");
    }

    /** Replaces the file in one step, as an editor's save-and-rename does. */
    static void write(String text) throws Exception {
        Path tmp = dir.resolve("server.json.tmp");
        Files.writeString(tmp, text);
        Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    }

    static boolean strict() {
        try {
            return server.get("/props").json().at("/config/server/rejectUnknownFields").asBoolean();
        } catch (Exception e) {
            return false;
        }
    }

    @Test
    @Order(6)
    void strictModeRefusesAsOpenAiDoes() throws Exception {
        write("{\"server\": {\"configScanMs\": 100, \"rejectUnknownFields\": true}}");
        assertTrue(TestServer.eventually(5000, UnknownFieldsTest::strict), "the key applies live");
        try {
            TestServer.Resp r = server.post(CHAT, TestServer.chat("Hi", "\"max_token\":3"));
            assertEquals(400, r.status(), r.body());
            JsonNode e = r.json().get("error");
            assertEquals("Unrecognized request argument supplied: max_token (did you mean max_tokens?)", e.get("message").asText());
            assertEquals("invalid_request_error", e.get("type").asText());
            assertEquals("max_token", e.get("param").asText());

            r = server.post(CHAT, TestServer.chat("Hi", "\"stream\":true,\"stream_options\":{\"include_usge\":true},\"foo\":1"));
            assertEquals(400, r.status(), r.body());
            e = r.json().get("error");
            assertEquals("Unrecognized request arguments supplied: stream_options.include_usge (did you mean"
                    + " stream_options.include_usage?), foo", e.get("message").asText());
            assertEquals("stream_options.include_usge", e.get("param").asText());

            r = server.post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokns\":3}");
            assertEquals(400, r.status(), r.body());
            assertEquals("max_tokns", r.json().at("/error/param").asText());

            r = server.post(CHAT, TestServer.chat("Hi", "\"max_tokens\":3,\"user\":\"u1\",\"other\":null"));
            assertEquals(200, r.status(), "known, accepted and null fields pass: " + r.body());
        } finally {
            write("{\"server\": {\"configScanMs\": 100}}");
            assertTrue(TestServer.eventually(5000, () -> !strict()), "back to warnings");
        }
    }
}
