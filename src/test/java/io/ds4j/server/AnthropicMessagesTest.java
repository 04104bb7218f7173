package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The Anthropic Messages API ({@code /v1/messages}, {@code /v1/messages/count_tokens}) on the scripted model: the
 * answer's blocks and stop reasons, the stream's events and that its deltas join to the unstreamed content, a tool
 * call and its result sent back, the prompt a Messages request renders (the same as the chat request it means), its
 * errors in Anthropic's shape naming the Messages fields, and count_tokens against the prompt a request ran.
 */
class AnthropicMessagesTest {
    static TestServer server;
    /** The text of the last prompt the scripted model was given. */
    static final AtomicReference<String> lastPrompt = new AtomicReference<>();
    static final ScriptedBackend backend = new ScriptedBackend(p -> {
        lastPrompt.set(TestServer.tokenizer().decode(p));
        return TestServer.defaultScript(p);
    });

    static final String WEATHER_TOOL = "{\"name\":\"get_weather\",\"description\":\"Weather in a city\",\"input_schema\":"
            + "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}";

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none", "prefixCache.enabled", false));
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    /** A Messages body with one user turn. */
    static String body(String user, String extra) {
        return "{\"model\":\"scripted\",\"max_tokens\":200,\"messages\":[{\"role\":\"user\",\"content\":"
                + Json.MAPPER.valueToTree(user) + "}]" + (extra.isEmpty() ? "" : "," + extra) + "}";
    }

    static JsonNode message(String body) throws Exception {
        TestServer.Resp r = server.post("/v1/messages", body);
        assertEquals(200, r.status(), r.body());
        JsonNode m = r.json();
        assertEquals("message", m.get("type").asText());
        assertEquals("assistant", m.get("role").asText());
        assertEquals("scripted", m.get("model").asText());
        assertTrue(m.get("id").asText().startsWith("msg_"), m.toString());
        return m;
    }

    /** One SSE event: its name and data. */
    record Event(String name, JsonNode data) {}

    static List<Event> stream(String body) throws Exception {
        TestServer.Resp r = server.post("/v1/messages", body);
        assertEquals(200, r.status(), r.body());
        assertTrue(r.headers().firstValue("content-type").orElse("").startsWith("text/event-stream"));
        List<Event> out = new ArrayList<>();
        for (String block : r.body().split("\n\n")) {
            if (block.isBlank()) continue;
            String[] lines = block.split("\n");
            assertEquals(2, lines.length, block);
            assertTrue(lines[0].startsWith("event: ") && lines[1].startsWith("data: "), block);
            JsonNode data = Json.MAPPER.readTree(lines[1].substring(6));
            String name = lines[0].substring(7);
            assertEquals(name, data.get("type").asText(), "an event's name is its data's type");
            out.add(new Event(name, data));
        }
        return out;
    }

    /**
     * Checks a stream's event order and rebuilds the message it tells (content blocks from their deltas, stop reason
     * and usage from message_delta), as a client does.
     */
    static ObjectNode rebuild(List<Event> events) throws Exception {
        assertEquals("message_start", events.getFirst().name());
        assertEquals("message_stop", events.getLast().name());
        assertEquals("message_delta", events.get(events.size() - 2).name());
        ObjectNode m = events.getFirst().data().get("message").deepCopy();
        assertEquals(0, m.get("content").size());
        assertTrue(m.get("stop_reason").isNull());
        ArrayNode content = (ArrayNode) m.get("content");
        StringBuilder json = null;
        int open = -1;
        for (Event e : events.subList(1, events.size() - 2)) {
            JsonNode d = e.data();
            switch (e.name()) {
                case "content_block_start" -> {
                    assertEquals(-1, open, "a block starts after the one before it stopped");
                    open = d.get("index").asInt();
                    assertEquals(content.size(), open, "blocks are numbered in order");
                    content.add(d.get("content_block").deepCopy());
                    json = new StringBuilder();
                }
                case "content_block_delta" -> {
                    assertEquals(open, d.get("index").asInt());
                    ObjectNode b = (ObjectNode) content.get(open);
                    JsonNode delta = d.get("delta");
                    switch (delta.get("type").asText()) {
                        case "text_delta" -> b.put("text", b.get("text").asText() + delta.get("text").asText());
                        case "thinking_delta" -> b.put("thinking", b.get("thinking").asText() + delta.get("thinking").asText());
                        case "input_json_delta" -> json.append(delta.get("partial_json").asText());
                        default -> fail("unknown delta " + delta);
                    }
                }
                case "content_block_stop" -> {
                    assertEquals(open, d.get("index").asInt());
                    ObjectNode b = (ObjectNode) content.get(open);
                    if (b.get("type").asText().equals("tool_use")) b.set("input", Json.MAPPER.readTree(json.toString()));
                    open = -1;
                }
                default -> fail("unexpected event " + e);
            }
        }
        assertEquals(-1, open, "every block stopped before message_delta");
        JsonNode md = events.get(events.size() - 2).data();
        m.set("stop_reason", md.at("/delta/stop_reason"));
        m.set("stop_sequence", md.at("/delta/stop_sequence"));
        m.set("usage", md.get("usage"));
        return m;
    }

    /** The same request streamed: the message it tells equals the unstreamed one but for its id. */
    static void streamsTheSame(String body, JsonNode unstreamed) throws Exception {
        ObjectNode streamed = rebuild(stream(body.substring(0, body.length() - 1) + ",\"stream\":true}"));
        ObjectNode expected = unstreamed.deepCopy();
        streamed.remove("id");
        expected.remove("id");
        assertEquals(expected, streamed);
    }

    static int countTokens(String body) throws Exception {
        TestServer.Resp r = server.post("/v1/messages/count_tokens", body);
        assertEquals(200, r.status(), r.body());
        assertEquals(1, r.json().size(), r.body());
        return r.json().get("input_tokens").asInt();
    }

    static void assertError(TestServer.Resp r, int status, String type, String messageStart) {
        assertEquals(status, r.status(), r.body());
        JsonNode j = r.json();
        assertEquals("error", j.get("type").asText(), r.body());
        assertEquals(type, j.at("/error/type").asText(), r.body());
        assertTrue(j.at("/error/message").asText().startsWith(messageStart), r.body());
    }

    @Test
    void plainTextAnswer() throws Exception {
        String body = body("Hi", "\"temperature\":0");
        JsonNode m = message(body);
        assertEquals(Json.MAPPER.readTree("[{\"type\":\"text\",\"text\":\"" + TestServer.PLAIN + "\"}]"), m.get("content"));
        assertEquals("end_turn", m.get("stop_reason").asText());
        assertTrue(m.get("stop_sequence").isNull());
        JsonNode u = m.get("usage");
        int generated = TestServer.tokenizer().encode(TestServer.PLAIN).length + 1;  // the end of sentence too
        assertEquals(generated, u.get("output_tokens").asInt(), u.toString());
        assertEquals(0, u.get("cache_read_input_tokens").asInt());
        assertEquals(countTokens(body), u.get("input_tokens").asInt(), "count_tokens counts the prompt the request ran");
        streamsTheSame(body, m);
    }

    @Test
    void toolUseAnswer() throws Exception {
        String body = body("What is the weather in Paris?", "\"tools\":[" + WEATHER_TOOL + "]");
        JsonNode m = message(body);
        assertEquals("tool_use", m.get("stop_reason").asText(), m.toString());
        JsonNode c = m.get("content");
        assertEquals(2, c.size(), m.toString());
        assertEquals(Json.MAPPER.readTree("{\"type\":\"text\",\"text\":\"Let me check.\"}"), c.get(0));
        JsonNode call = c.get(1);
        assertEquals("tool_use", call.get("type").asText());
        assertTrue(call.get("id").asText().matches("toolu_[A-Za-z0-9]+"), call.toString());
        assertEquals("get_weather", call.get("name").asText());
        assertEquals(Json.MAPPER.readTree("{\"city\":\"Paris\",\"days\":3}"), call.get("input"));
        assertTrue(lastPrompt.get().contains("get_weather") && lastPrompt.get().contains("Weather in a city"),
                "the tool is described in the prompt: " + lastPrompt.get());
        // streamed: the same blocks (the call's id is random per request, so compared apart from it)
        ObjectNode streamed = rebuild(stream(body.substring(0, body.length() - 1) + ",\"stream\":true}"));
        assertTrue(streamed.at("/content/1/id").asText().startsWith("toolu_"));
        ((ObjectNode) streamed.at("/content/1")).remove("id");
        ObjectNode expected = m.deepCopy();
        ((ObjectNode) expected.at("/content/1")).remove("id");
        streamed.remove("id");
        expected.remove("id");
        assertEquals(expected, streamed);
    }

    @Test
    void thinkingBlocks() throws Exception {
        String body = body("Hi", "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}");
        JsonNode m = message(body);
        assertTrue(lastPrompt.get().endsWith("<think>"), "thinking mode: " + lastPrompt.get());
        assertEquals(Json.MAPPER.readTree("[{\"type\":\"thinking\",\"thinking\":\"The user says hi. I should greet back.\",\"signature\":\"\"},"
                + "{\"type\":\"text\",\"text\":\"Hi there, nice to meet you.\"}]"), m.get("content"));
        assertEquals("end_turn", m.get("stop_reason").asText());
        streamsTheSame(body, m);
        message(body("Hi", "\"thinking\":{\"type\":\"disabled\"}"));
        assertFalse(lastPrompt.get().endsWith("<think>"), lastPrompt.get());
    }

    @Test
    void stopSequencesAndMaxTokens() throws Exception {
        String stop = body("Hi", "\"stop_sequences\":[\"nothing\",\"help\"]");
        JsonNode m = message(stop);
        assertEquals("Hello! How can I ", m.at("/content/0/text").asText());
        assertEquals("stop_sequence", m.get("stop_reason").asText());
        assertEquals("help", m.get("stop_sequence").asText());
        streamsTheSame(stop, m);

        String cut = body("Hi", "").replace("\"max_tokens\":200", "\"max_tokens\":3");
        JsonNode c = message(cut);
        assertEquals("max_tokens", c.get("stop_reason").asText());
        assertEquals(3, c.at("/usage/output_tokens").asInt());
        assertTrue(TestServer.PLAIN.startsWith(c.at("/content/0/text").asText()), c.toString());
        streamsTheSame(cut, c);
    }

    @Test
    void toolResultHistoryRendersAsTheSameChatRequest() throws Exception {
        String anthropic = "{\"model\":\"scripted\",\"max_tokens\":50,\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\","
                + "\"cache_control\":{\"type\":\"ephemeral\"}}],\"tools\":[" + WEATHER_TOOL + "],\"messages\":["
                + "{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"},"
                + "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"Call the tool.\",\"signature\":\"\"},"
                + "{\"type\":\"text\",\"text\":\"Let me check.\"},"
                + "{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\",\"days\":3}}]},"
                + "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"text\",\"text\":\"Sunny, 21 C\"}]},"
                + "{\"type\":\"text\",\"text\":\"And tomorrow?\"}]}]}";
        TestServer.Resp r = server.post("/v1/messages", anthropic);
        assertEquals(200, r.status(), r.body());
        assertTrue(r.headers().firstValue(RequestFields.HEADER).isEmpty(), "cache_control and signature are accepted: " + r.headers());
        String prompt = lastPrompt.get();
        // the chat request it means, in OpenAI's shapes: the same prompt, token for token
        String chat = "{\"model\":\"scripted\",\"max_tokens\":50,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                + "\"description\":\"Weather in a city\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
                + "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}}],\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                + "{\"role\":\"user\",\"content\":\"What is the weather in Paris?\"},"
                + "{\"role\":\"assistant\",\"content\":\"Let me check.\",\"reasoning_content\":\"Call the tool.\",\"tool_calls\":[{\"id\":\"toolu_1\","
                + "\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"days\\\":3}\"}}]},"
                + "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"Sunny, 21 C\"},{\"role\":\"user\",\"content\":\"And tomorrow?\"}]}";
        assertEquals(200, server.post("/v1/chat/completions", chat).status());
        assertEquals(lastPrompt.get(), prompt, "the Messages request renders the chat request's prompt");
        assertTrue(prompt.contains("Sunny, 21 C") && prompt.contains("Be brief."), prompt);
        assertEquals(server.post("/tokenize", chat).json().get("count").asInt(), countTokens(anthropic));

        // a failed call's result says so in its text
        server.post("/v1/messages", anthropic.replace("\"tool_use_id\":\"toolu_1\",", "\"tool_use_id\":\"toolu_1\",\"is_error\":true,"));
        assertTrue(lastPrompt.get().contains("Error: Sunny, 21 C"), lastPrompt.get());

        // a result for a call that was never made: chat's pairing rule, named as the client sent it
        TestServer.Resp bad = server.post("/v1/messages", anthropic.replace("\"tool_use_id\":\"toolu_1\"", "\"tool_use_id\":\"toolu_9\""));
        assertError(bad, 400, "invalid_request_error", "messages[2].content[0].tool_use_id: 'toolu_9' is not the id of a tool_use"
                + " block of messages[1] (its tool_use ids: 'toolu_1')");
        // the pairing rules in the Messages API's terms, never chat's (tool calls, tool messages)
        String first = "{\"model\":\"scripted\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
                + "\"tool_result\",\"tool_use_id\":\"nope\",\"content\":\"x\"}]}]}";
        TestServer.Resp orphan = server.post("/v1/messages", first);
        assertEquals(400, orphan.status(), orphan.body());
        assertEquals("messages[0].content[0].tool_use_id: 'nope' answers no tool_use block: a tool_result block answers a"
                + " tool_use block of the assistant message right before its user message", orphan.json().at("/error/message").asText());
        String result = "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"text\",\"text\":\"Sunny, 21 C\"}]},";
        TestServer.Resp twice = server.post("/v1/messages", anthropic.replace(result, result + result));
        assertEquals(400, twice.status(), twice.body());
        assertEquals("messages[2].content[1].tool_use_id: 'toolu_1' was already answered by messages[2].content[0]: each"
                + " tool_use block of messages[1] is answered by one tool_result block", twice.json().at("/error/message").asText());
        for (TestServer.Resp r2 : List.of(bad, orphan, twice))
            for (String chatWord : List.of("tool call", "tool message", "tool_calls"))
                assertFalse(r2.json().at("/error/message").asText().contains(chatWord), chatWord + " in " + r2.body());
        // a call left unanswered
        TestServer.Resp unanswered = server.post("/v1/messages", anthropic.replace(
                "{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":[{\"type\":\"text\",\"text\":\"Sunny, 21 C\"}]},", ""));
        assertError(unanswered, 400, "invalid_request_error", "messages[1].content: no tool_result block answers the tool_use block 'toolu_1' before messages[2] (a user message): each tool_use block"
                + " must be answered by a tool_result block in the user message right after it");
    }

    @Test
    void consecutiveAssistantTurnsAreOneTurn() throws Exception {
        // text turns: one assistant message whose parts are both texts
        String anthropic = "{\"model\":\"scripted\",\"max_tokens\":20,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"},"
                + "{\"role\":\"assistant\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"b\"}]},"
                + "{\"role\":\"user\",\"content\":\"x\"}]}";
        assertEquals(200, server.post("/v1/messages", anthropic).status());
        String prompt = lastPrompt.get();
        String chat = "{\"model\":\"scripted\",\"max_tokens\":20,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"},"
                + "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
                + "{\"role\":\"user\",\"content\":\"x\"}]}";
        assertEquals(200, server.post("/v1/chat/completions", chat).status());
        assertEquals(lastPrompt.get(), prompt);
        assertFalse(prompt.contains("<｜end▁of▁sentence｜>b"), prompt);
        // turns with calls: the calls of both, in order, answered by one user turn
        String tools = "{\"model\":\"scripted\",\"max_tokens\":20,\"tools\":[" + WEATHER_TOOL + "],\"messages\":["
                + "{\"role\":\"user\",\"content\":\"Paris and Rome?\"},"
                + "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Checking.\"},"
                + "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
                + "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t2\",\"name\":\"get_weather\",\"input\":{\"city\":\"Rome\"}}]},"
                + "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\",\"content\":\"Sun\"},"
                + "{\"type\":\"tool_result\",\"tool_use_id\":\"t2\",\"content\":\"Rain\"}]}]}";
        TestServer.Resp r = server.post("/v1/messages", tools);
        assertEquals(200, r.status(), r.body());
        prompt = lastPrompt.get();
        String chatTools = "{\"model\":\"scripted\",\"max_tokens\":20,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                + "\"description\":\"Weather in a city\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
                + "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}}],\"messages\":[{\"role\":\"user\",\"content\":\"Paris and Rome?\"},"
                + "{\"role\":\"assistant\",\"content\":\"Checking.\",\"tool_calls\":["
                + "{\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
                + "{\"id\":\"t2\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Rome\\\"}\"}}]},"
                + "{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"Sun\"},{\"role\":\"tool\",\"tool_call_id\":\"t2\",\"content\":\"Rain\"}]}";
        TestServer.Resp c = server.post("/v1/chat/completions", chatTools);
        assertEquals(200, c.status(), c.body());
        assertEquals(lastPrompt.get(), prompt);
    }

    @Test
    void aToolCallCutByMaxTokens() throws Exception {
        // the first token count at which the call's first argument value has begun
        int[] ids = TestServer.tokenizer().encode(TestServer.TOOL);
        int k = 1;
        while (!TestServer.tokenizer().decode(java.util.Arrays.copyOf(ids, k)).contains("string=\"true\">P")) k++;
        String body = body("What is the weather in Paris?", "\"tools\":[" + WEATHER_TOOL + "]").replace("\"max_tokens\":200", "\"max_tokens\":" + k);
        JsonNode m = message(body);
        assertEquals("max_tokens", m.get("stop_reason").asText(), m.toString());
        JsonNode call = m.get("content").get(1);
        assertEquals("get_weather", call.get("name").asText(), m.toString());
        assertEquals(Json.object(), call.get("input"), "arguments cut short are no object: the input is empty");
        // streamed: the fragments as far as they got, the same stop reason
        List<Event> events = stream(body.substring(0, body.length() - 1) + ",\"stream\":true}");
        StringBuilder json = new StringBuilder();
        for (Event e : events)
            if (e.name().equals("content_block_delta") && e.data().at("/delta/type").asText().equals("input_json_delta"))
                json.append(e.data().at("/delta/partial_json").asText());
        assertTrue(json.toString().startsWith("{\"city\"") && json.toString().contains("P"), json.toString());
        assertThrows(java.io.IOException.class, () -> Json.MAPPER.readTree(json.toString()), json.toString());
        assertEquals("max_tokens", events.get(events.size() - 2).data().at("/delta/stop_reason").asText());
    }

    @Test
    void aToolCallCutByAStopSequenceStopsForTheSequence() throws Exception {
        // the stop string matches inside the call's first argument: the answer ended on the stop string, not on a call
        String body = body("What is the weather in Paris?", "\"tools\":[" + WEATHER_TOOL + "],\"stop_sequences\":[\"Paris\"]");
        JsonNode m = message(body);
        assertEquals("stop_sequence", m.get("stop_reason").asText(), m.toString());
        assertEquals("Paris", m.get("stop_sequence").asText(), m.toString());
        JsonNode call = m.get("content").get(1);
        assertEquals("get_weather", call.get("name").asText(), m.toString());
        assertEquals(Json.object(), call.get("input"), "arguments cut short are no object: the input is empty, as for max_tokens");
        List<Event> events = stream(body.substring(0, body.length() - 1) + ",\"stream\":true}");
        JsonNode md = events.get(events.size() - 2).data();
        assertEquals("stop_sequence", md.at("/delta/stop_reason").asText(), md.toString());
        assertEquals("Paris", md.at("/delta/stop_sequence").asText(), md.toString());
    }

    @Test
    void messageStartSplitsThePromptAsTheFinalUsage() throws Exception {
        String body = body("Hi", "\"stream\":true");
        TestServer.Resp r = server.post("/v1/messages", body);
        assertEquals(200, r.status(), r.body());
        String[] frames = r.body().split("\n\n");
        JsonNode start = Json.MAPPER.readTree(frames[0].substring(frames[0].indexOf("data: ") + 6)).at("/message/usage");
        String d = frames[frames.length - 2];
        JsonNode last = Json.MAPPER.readTree(d.substring(d.indexOf("data: ") + 6)).get("usage");
        for (String f : new String[]{"input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"})
            assertEquals(last.get(f), start.get(f), f + ": " + start + " vs " + last);
        // a request that started at once knows its prefix cache share at message_start (this server has no cache)
        AnthropicResponse a = new AnthropicResponse("msg_1", "scripted", true, 100);
        a.cached(40);
        String frame = a.start(null, null);
        JsonNode u = Json.MAPPER.readTree(frame.substring(frame.indexOf("data: ") + 6)).at("/message/usage");
        assertEquals(Json.MAPPER.readTree("{\"input_tokens\":60,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":40,"
                + "\"output_tokens\":0}"), u);
    }

    @Test
    void unknownFieldsAreRefusedWhereTheServerSaysSo() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("server.rejectUnknownFields", true))) {
            assertError(t.post("/v1/messages", body("Hi", "\"top_kk\":3")), 400, "invalid_request_error",
                    "Unrecognized request argument supplied: top_kk (did you mean top_k?)");
            assertEquals(200, t.post("/v1/messages", body("Hi", "\"metadata\":{\"user_id\":\"u\"},\"system\":[{\"type\":\"text\","
                    + "\"text\":\"Be brief.\",\"cache_control\":{\"type\":\"ephemeral\"}}]")).status(), "fields Messages clients send unasked");
        }
    }

    @Test
    void storeIsAnUnknownFieldOfTheMessagesApi() throws Exception {
        // OpenAI's store is no field of Anthropic's API: whatever its value, it is one more unknown field here
        for (String store : new String[]{"true", "false", "\"x\"", "5"}) {
            TestServer.Resp r = server.post("/v1/messages", body("Hi", "\"store\":" + store));
            assertEquals(200, r.status(), r.body());
            assertEquals("store (the Messages API has no store field: this server stores nothing)",
                    r.headers().firstValue(RequestFields.HEADER).orElse(null), store);
        }
        TestServer.Resp count = server.post("/v1/messages/count_tokens", "{\"model\":\"scripted\",\"messages\":[{\"role\":\"user\","
                + "\"content\":\"Hi\"}],\"store\":false}");
        assertEquals(200, count.status(), count.body());
        assertTrue(count.headers().firstValue(RequestFields.HEADER).orElse("").startsWith("store"), count.headers().toString());
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("server.rejectUnknownFields", true))) {
            assertError(t.post("/v1/messages", body("Hi", "\"store\":false")), 400, "invalid_request_error",
                    "Unrecognized request argument supplied: store (the Messages API has no store field: this server stores nothing)");
        }
    }

    @Test
    void openAisOtherPlatformFieldsAreUnknownToTheMessagesApi() throws Exception {
        // user, safety_identifier and prompt_cache_key are OpenAI's; the Messages API names the end user in metadata.user_id
        String[][] cases = {
                {"\"user\":\"u-1\"", "user (the Messages API names the end user in metadata.user_id)"},
                {"\"safety_identifier\":\"u-1\"", "safety_identifier (the Messages API names the end user in metadata.user_id)"},
                {"\"prompt_cache_key\":\"k\"",
                        "prompt_cache_key (the Messages API has no prompt_cache_key: this server's prefix cache finds prefixes by their tokens)"}};
        for (String[] c : cases) {
            TestServer.Resp r = server.post("/v1/messages", body("Hi", c[0]));
            assertEquals(200, r.status(), r.body());
            assertEquals(c[1], r.headers().firstValue(RequestFields.HEADER).orElse(null), c[0]);
        }
        // the Messages API's own platform fields stay silent
        TestServer.Resp own = server.post("/v1/messages", body("Hi", "\"metadata\":{\"user_id\":\"u-1\"},\"service_tier\":\"auto\""));
        assertEquals(200, own.status(), own.body());
        assertEquals(null, own.headers().firstValue(RequestFields.HEADER).orElse(null));
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("server.rejectUnknownFields", true))) {
            assertError(t.post("/v1/messages", body("Hi", "\"user\":\"u-1\"")), 400, "invalid_request_error",
                    "Unrecognized request argument supplied: user (the Messages API names the end user in metadata.user_id)");
        }
    }

    @Test
    void toolChoiceMapsToChats() throws Exception {
        // any: a call is forced even where the model would answer in text
        JsonNode any = message(body("Hi", "\"tools\":[" + WEATHER_TOOL + "],\"tool_choice\":{\"type\":\"any\"}"));
        assertEquals("tool_use", any.get("stop_reason").asText(), any.toString());
        assertEquals("get_weather", any.at("/content/0/name").asText(), any.toString());
        assertTrue(any.at("/content/0/input/city").isTextual(), any.toString());
        // none: the tools are not offered, the answer is text
        JsonNode none = message(body("Hi", "\"tools\":[" + WEATHER_TOOL + "],\"tool_choice\":{\"type\":\"none\"}"));
        assertFalse(lastPrompt.get().contains("get_weather"), lastPrompt.get());
        assertEquals("end_turn", none.get("stop_reason").asText());
        // a named tool that is not offered: chat's check, named as sent
        assertError(server.post("/v1/messages", body("Hi", "\"tools\":[" + WEATHER_TOOL + "],\"tool_choice\":{\"type\":\"tool\",\"name\":\"nope\"}")),
                400, "invalid_request_error", "tool_choice: names function 'nope'");
    }

    @Test
    void errorsInAnthropicsShape() throws Exception {
        assertError(server.post("/v1/messages", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}"),
                400, "invalid_request_error", "max_tokens: is required");
        assertError(server.post("/v1/messages", body("Hi", "").replace("\"scripted\"", "\"claude-opus\"")),
                404, "not_found_error", "model: 'claude-opus' does not exist");
        // a model name that reads as a chat path is quoted as sent
        assertError(server.post("/v1/messages", body("Hi", "\"system\":\"Be brief.\"").replace("\"scripted\"", "\"messages[0]\"")),
                404, "not_found_error", "model: 'messages[0]' does not exist");
        assertError(server.post("/v1/messages", "{\"model\":\"scripted\",\"max_tokens\":9,\"messages\":[{\"role\":\"user\",\"content\":["
                        + "{\"type\":\"text\",\"text\":\"What is this?\"},{\"type\":\"image\",\"source\":{\"type\":\"url\",\"url\":\"http://x/y.png\"}}]}]}"),
                400, "invalid_request_error", "messages[0].content[1].type: 'image' blocks are not supported");
        assertError(server.post("/v1/messages", body("Hi", "\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]")),
                400, "invalid_request_error", "tools[0].type: server tools are not supported");
        assertError(server.post("/v1/messages", body("Hi", "\"tools\":[" + WEATHER_TOOL.replace("get_weather", "get weather") + "]")),
                400, "invalid_request_error", "tools[0].name:");
        // a forced call's schema is compiled by chat's structured outputs: its refusal names the input_schema node
        assertError(server.post("/v1/messages", body("Hi", "\"tool_choice\":{\"type\":\"any\"},\"tools\":["
                        + WEATHER_TOOL.replace("{\"city\":{\"type\":\"string\"}", "{\"city\":{\"type\":\"string\",\"contentEncoding\":\"base64\"}") + "]")),
                400, "invalid_request_error", "tools[0].input_schema.properties.city");
        assertError(server.post("/v1/messages", body("Hi", "\"temperature\":5")), 400, "invalid_request_error",
                "temperature: must be in [0, 2], got 5");
        assertError(server.post("/v1/messages", body("Hi", "\"stop_sequences\":[\"a\",7]")), 400, "invalid_request_error",
                "stop_sequences[1]: must be a string");
        assertError(server.post("/v1/messages", body("Hi", "\"max_tokens\":0").replace("\"max_tokens\":200,", "")),
                400, "invalid_request_error", "max_tokens: is out of range");
        assertError(server.post("/v1/messages", body("Hi", "\"thinking\":{\"type\":\"sometimes\"}")), 400, "invalid_request_error",
                "thinking.type: must be \"enabled\", \"adaptive\" or \"disabled\"");
        assertError(server.post("/v1/messages", "{\"model\":\"scripted\",\"max_tokens\":9,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}"),
                400, "invalid_request_error", "messages[0].role: must be \"user\" or \"assistant\"");
        // a prefill is continued (PrefixCompletionTest), but a forced call is the whole answer: the error names the
        // client's message, not the prefix flag of the translation
        assertError(server.post("/v1/messages", "{\"model\":\"scripted\",\"max_tokens\":9,\"tool_choice\":{\"type\":\"any\"},"
                        + "\"tools\":[" + WEATHER_TOOL + "],\"messages\":[{\"role\":\"user\",\"content\":\"x\"},"
                        + "{\"role\":\"assistant\",\"content\":\"The answer is\"}]}"),
                400, "invalid_request_error", "messages[1]: a forced tool call");
        assertError(server.post("/v1/messages", "{\"max_tokens\":"), 400, "invalid_request_error", "malformed JSON");
        assertError(server.post("/v1/messages/count_tokens", "{\"messages\":[]}"), 400, "invalid_request_error",
                "messages: must contain at least one message");
        TestServer.Resp get = server.get("/v1/messages");
        assertError(get, 405, "invalid_request_error", "");
        assertEquals("POST", get.headers().firstValue("Allow").orElse(null));
    }

    @Test
    void pathsTheRouterRoutesToMessagesAnswerInAnthropicsShape() throws Exception {
        // the router takes a trailing slash as the same route: its errors are the route's
        assertError(server.post("/v1/messages/", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}"),
                400, "invalid_request_error", "max_tokens: is required");
        assertError(server.post("/v1/messages/count_tokens/", "{\"messages\":[]}"), 400, "invalid_request_error",
                "messages: must contain at least one message");
        assertError(server.post("/v1//messages/?x=1", "{\"max_tokens\":"), 400, "invalid_request_error", "malformed JSON");
        TestServer.Resp get = server.get("/v1/messages/");
        assertError(get, 405, "invalid_request_error", "");
        assertEquals("POST", get.headers().firstValue("Allow").orElse(null));
        // a header Vert.x cannot read, on a Messages path: Anthropic's shape; on chat's: OpenAI's
        for (String target : List.of("/v1/messages", "/v1/messages/count_tokens/", "/v1/./messages?x=1")) {
            String answer = untilClosed(server.port, "POST " + target + " HTTP/1.1\r\nHost: x\r\nX-Bad: a\u0001b\r\n"
                    + "Content-Length: 2\r\n\r\n{}");
            assertError(raw(answer), 400, "invalid_request_error", "the request cannot be read");
        }
        String chat = untilClosed(server.port, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Bad: a\u0001b\r\n"
                + "Content-Length: 2\r\n\r\n{}");
        assertEquals("invalid_header", raw(chat).json().at("/error/code").asText(), chat);
    }

    /** Sends the bytes on a new connection and returns all that comes back until the server closes it. */
    static String untilClosed(int port, String request) throws Exception {
        try (java.net.Socket s = new java.net.Socket("127.0.0.1", port)) {
            s.setSoTimeout(10_000);
            s.getOutputStream().write(request.getBytes(java.nio.charset.StandardCharsets.UTF_8));
            s.getOutputStream().flush();
            return new String(s.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        }
    }

    /** The answer's status and its body as a TestServer response, for assertError. */
    static TestServer.Resp raw(String answer) {
        int status = Integer.parseInt(answer.substring(9, 12));
        String body = answer.substring(answer.indexOf("\r\n\r\n") + 4);
        return new TestServer.Resp(status, java.net.http.HttpHeaders.of(Map.of(), (a, b) -> true), body);
    }

    @Test
    void refusalsBeforeTheRouteAreInAnthropicsShapeToo() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                Map.of("server.maxBodyBytes", 4096, "limits.bodyReadTimeoutMs", 300))) {
            String head = "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
            // a chunked body past server.maxBodyBytes, refused as it is framed
            assertError(raw(untilClosed(t.port, head + "100000\r\n" + "a".repeat(2048))), 413, "request_too_large",
                    "the request body is larger than the limit of 4096 bytes");
            // a chunk size that is no number
            assertError(raw(untilClosed(t.port, head + "zz\r\n{}\r\n0\r\n\r\n")), 400, "invalid_request_error",
                    "the request's chunked body cannot be read");
            // a body that stops coming
            assertError(raw(untilClosed(t.port, head.replace("count_tokens", "") + "5\r\n{\"mes")), 408, "invalid_request_error",
                    "the request body did not arrive in time");
            assertError(raw(untilClosed(t.port, head.replace("/v1/messages", "/v1/./messages/count_tokens?x=1") + "5\r\n{\"mes")),
                    408, "invalid_request_error", "the request body did not arrive in time");
            // the OpenAI routes keep OpenAI's shape
            String chat = untilClosed(t.port, head.replace("/v1/messages", "/v1/chat/completions") + "100000\r\n");
            assertEquals("request_too_large", raw(chat).json().at("/error/code").asText(), chat);
        }
    }

    @Test
    void messagesOnTheseRoutesSpeakOfTheirFields() throws Exception {
        String u = "{\"role\":\"user\",\"content\":\"Hi\"}";
        String[][] cases = {
                {"\"max_tokens\":0,\"messages\":[" + u + "]", "max_tokens:", "/v1/completions"},
                {"\"max_tokens\":5,\"tool_choice\":{\"type\":\"any\"},\"messages\":[" + u + "]", "tool_choice.type: \"any\" needs at least one tool", "'required'"},
                {"\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":{}}]},"
                        + "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"\"}]}]",
                        "messages[1].content[0].tool_use_id: must be a non-empty string", "tool message"},
                {"\"max_tokens\":5,\"messages\":[" + u + ",{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"a b\",\"input\":{}}]},"
                        + "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"a\",\"content\":\"ok\"}]}]",
                        "messages[1].content[0].name: must be 1 to 64 letters, digits, underscores or hyphens, got 'a b'", ".function."},
                {"\"max_tokens\":5,\"stop_sequences\":[\"a\",\"\"],\"messages\":[" + u + "]", "stop_sequences[1]: must not be empty", "stop strings"},
                {"\"max_tokens\":5,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1e12},\"messages\":[" + u + "]",
                        "thinking.budget_tokens: must be an integer from 1 to 2147483647, got 1e12", "at least"}};
        for (String[] c : cases) {
            TestServer.Resp r = server.post("/v1/messages", "{\"model\":\"scripted\"," + c[0] + "}");
            assertError(r, 400, "invalid_request_error", c[1]);
            assertFalse(r.body().contains(c[2]), r.body());
        }
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("server.apiKeys", List.of("k1")))) {
            assertError(t.post("/v1/messages", body("Hi", "")), 401, "authentication_error", "missing API key: send 'x-api-key: <key>'");
            assertTrue(t.post("/v1/chat/completions", TestServer.chat("Hi", "")).body().contains("send 'Authorization: Bearer <key>'"));
        }
    }

    @Test
    void strictToolsAndMetadata() throws Exception {
        // strict tool use is chat's strict function: the call follows the schema, and the field is no unknown one
        TestServer.Resp r = server.post("/v1/messages", body("What is the weather in Paris?", "\"tools\":["
                + WEATHER_TOOL.replace("\"name\":\"get_weather\",", "\"name\":\"get_weather\",\"strict\":true,") + "]"));
        assertEquals(200, r.status(), r.body());
        assertTrue(r.headers().firstValue(RequestFields.HEADER).isEmpty(), r.headers().toString());
        assertEquals("tool_use", r.json().get("stop_reason").asText(), r.body());
        assertError(server.post("/v1/messages", body("Hi", "\"tools\":["
                        + WEATHER_TOOL.replace("\"name\":\"get_weather\",", "\"name\":\"get_weather\",\"strict\":\"yes\",") + "]")),
                400, "invalid_request_error", "tools[0].strict:");
        assertError(server.post("/v1/messages", body("Hi", "\"metadata\":\"x\"")), 400, "invalid_request_error", "metadata: must be an object");
    }

    @Test
    void malformedBodiesAreA400NamingTheField() throws Exception {
        String u = "{\"role\":\"user\",\"content\":\"Hi\"}";
        String[][] cases = {
                {"\"messages\":\"hi\"", "messages"},
                {"\"messages\":[1]", "messages[0]"},
                {"\"messages\":[{\"content\":\"x\"}]", "messages[0].role"},
                {"\"messages\":[{\"role\":\"user\"}]", "messages[0].content"},
                {"\"messages\":[{\"role\":\"user\",\"content\":[]}]", "messages[0].content"},
                {"\"messages\":[{\"role\":\"user\",\"content\":[null]}]", "messages[0].content[0]"},
                {"\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]", "messages[0].content[0].type"},
                {"\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]", "messages[0].content[0].text"},
                {"\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\"}]}]", "messages[0].content[0].tool_use_id"},
                {"\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"a\",\"content\":5}]}]", "messages[0].content[0].content"},
                {"\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":{}}]}]", "messages[0].content[0].type"},
                {"\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"name\":\"f\",\"input\":{}}]}," + u + "]", "messages[0].content[0].id"},
                {"\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"a\",\"name\":\"f\",\"input\":[]}]}," + u + "]", "messages[0].content[0].input"},
                {"\"messages\":[{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\"}]}," + u + "]", "messages[0].content[0].thinking"},
                {"\"system\":5,\"messages\":[" + u + "]", "system"},
                {"\"system\":[{\"type\":\"image\"}],\"messages\":[" + u + "]", "system[0].type"},
                {"\"stop_sequences\":\"x\",\"messages\":[" + u + "]", "stop_sequences"},
                {"\"tools\":\"x\",\"messages\":[" + u + "]", "tools"},
                {"\"tools\":[1],\"messages\":[" + u + "]", "tools[0]"},
                {"\"tools\":[{\"name\":\"f\"}],\"messages\":[" + u + "]", "tools[0].input_schema"},
                {"\"tools\":[{\"input_schema\":{\"type\":\"object\"}}],\"messages\":[" + u + "]", "tools[0].name"},
                {"\"tools\":[{\"name\":\"f\",\"input_schema\":5}],\"messages\":[" + u + "]", "tools[0].input_schema"},
                {"\"tool_choice\":\"auto\",\"messages\":[" + u + "]", "tool_choice"},
                {"\"tool_choice\":{},\"messages\":[" + u + "]", "tool_choice.type"},
                {"\"tool_choice\":{\"type\":\"tool\"},\"messages\":[" + u + "]", "tool_choice.name"},
                {"\"tool_choice\":{\"type\":\"auto\",\"disable_parallel_tool_use\":\"yes\"},\"messages\":[" + u + "]", "tool_choice.disable_parallel_tool_use"},
                {"\"thinking\":true,\"messages\":[" + u + "]", "thinking"},
                {"\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":\"x\"},\"messages\":[" + u + "]", "thinking.budget_tokens"},
                {"\"stream\":\"yes\",\"messages\":[" + u + "]", "stream"},
                {"\"top_k\":1.5,\"messages\":[" + u + "]", "top_k"}};
        for (String[] c : cases) {
            TestServer.Resp r = server.post("/v1/messages", "{\"model\":\"scripted\",\"max_tokens\":5," + c[0] + "}");
            assertError(r, 400, "invalid_request_error", c[1] + ":");
        }
    }

    @Test
    void anErrorAfterTheStreamStartedIsAnErrorEvent() throws Exception {
        backend.failOn = TestServer.tokenizer().encode("EXPLODE");
        try {
            TestServer.Resp r = server.post("/v1/messages", body("EXPLODE", "\"stream\":true"));
            assertEquals(200, r.status());
            String[] frames = r.body().split("\n\n");
            assertEquals("message_start", frames[0].substring(7, frames[0].indexOf('\n')), r.body());
            String last = frames[frames.length - 1];
            assertTrue(last.startsWith("event: error\ndata: "), r.body());
            JsonNode err = Json.MAPPER.readTree(last.substring(last.indexOf("data: ") + 6));
            assertEquals("error", err.get("type").asText());
            assertEquals("api_error", err.at("/error/type").asText(), last);
        } finally {
            backend.failOn = null;
        }
    }

    @Test
    void theKeyMayComeInXApiKey() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("server.apiKeys", List.of("k1")))) {
            String b = body("Hi", "");
            assertEquals(200, t.post("/v1/messages", b, "x-api-key", "k1").status());
            assertEquals(200, t.post("/v1/messages", b, "Authorization", "Bearer k1").status());
            // x-api-key on the OpenAI routes too: one key check for every API route
            assertEquals(200, t.post("/v1/chat/completions", TestServer.chat("Hi", ""), "x-api-key", "k1").status());
            assertError(t.post("/v1/messages", b, "x-api-key", "k2"), 401, "authentication_error", "invalid API key");
            assertError(t.post("/v1/messages", b), 401, "authentication_error", "missing API key");
            assertError(t.post("/v1/messages/count_tokens", b), 401, "authentication_error", "missing API key");
            TestServer.Resp chat = t.post("/v1/chat/completions", TestServer.chat("Hi", ""), "x-api-key", "k2");
            assertEquals(401, chat.status());
            assertEquals("invalid_api_key", chat.json().at("/error/code").asText(), "the OpenAI routes answer in OpenAI's shape");
        }
    }

    @Test
    void aClientThatGoesAwayStopsItsRequest() throws Exception {
        backend.delayMs = 10;
        try {
            String id;
            String body = body("Please count for a long time.", "\"stream\":true").replace("\"max_tokens\":200", "\"max_tokens\":3000");
            try (RawStream s = new RawStream(server.port, "/v1/messages", body)) {
                assertEquals(200, s.status);
                id = Json.MAPPER.readTree(s.nextData()).at("/message/id").asText();
                assertTrue(s.nextData().contains("content_block_start"));
                for (int i = 0; i < 3; i++) assertTrue(s.nextData().contains("text_delta"));
            }
            assertTrue(TestServer.eventually(3000, () -> server.state().finished(id) != null), "the request ended");
            ServerState.JobRecord r = server.state().finished(id);
            assertEquals("cancelled", r.outcome());
            assertTrue(r.generated() < 100, "stopped soon after the disconnect, generated " + r.generated());
        } finally {
            backend.delayMs = 0;
        }
    }

    @Test
    void unknownFieldsAreReportedAsOnChat() throws Exception {
        TestServer.Resp r = server.post("/v1/messages", body("Hi", "\"metadata\":{\"user_id\":\"u1\"},\"top_kk\":3"));
        assertEquals(200, r.status(), r.body());
        assertEquals("top_kk (did you mean top_k?)", r.headers().firstValue(RequestFields.HEADER).orElse(null));
    }

    @Test
    void countTokensFollowsWhatTheRequestHolds() throws Exception {
        String plain = body("What is the weather in Paris?", "");
        int without = countTokens(plain), with = countTokens(body("What is the weather in Paris?", "\"tools\":[" + WEATHER_TOOL + "]"));
        assertTrue(with > without, with + " vs " + without);
        // max_tokens may be left out when counting
        assertEquals(without, countTokens(plain.replace("\"max_tokens\":200,", "")));
        assertEquals(server.post("/tokenize", TestServer.chat("What is the weather in Paris?", "")).json().get("count").asInt(), without);
    }
}
