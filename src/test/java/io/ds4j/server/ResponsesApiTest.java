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
 * OpenAI's Responses API ({@code POST /v1/responses}) on the scripted model: the output items of a text, thinking and
 * tool-call answer, the round trip of a call and its output sent back as input items (the same prompt as the chat
 * request it means), a strict json_schema format, an answer cut by max_output_tokens, the stream's events (order,
 * sequence numbers, and that they rebuild the unstreamed response), errors in OpenAI's shape naming the Responses
 * fields, unknown fields reported as on chat, and the 404 of a stored response's routes.
 */
class ResponsesApiTest {
    static TestServer server;
    /** The text of the last prompt the scripted model was given. */
    static final AtomicReference<String> lastPrompt = new AtomicReference<>();
    /** The scripted answer to a prompt that asks for JSON. */
    static final String JSON_ANSWER = "{\"city\": \"Paris\", \"days\": 3}";
    static final ScriptedBackend backend = new ScriptedBackend(p -> {
        String text = TestServer.tokenizer().decode(p);
        lastPrompt.set(text);
        if (text.contains("as JSON")) return TestServer.tokenizer().encode(JSON_ANSWER);
        return TestServer.defaultScript(p);
    });

    static final String WEATHER_TOOL = "{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather in a city\","
            + "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},"
            + "\"required\":[\"city\"]}}";
    static final String CHAT_WEATHER_TOOL = "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather in a city\","
            + "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},"
            + "\"required\":[\"city\"]}}}";

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none", "prefixCache.enabled", false));
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    /** A Responses body whose input is one string. */
    static String body(String input, String extra) {
        return "{\"model\":\"scripted\",\"input\":" + Json.MAPPER.valueToTree(input) + (extra.isEmpty() ? "" : "," + extra) + "}";
    }

    static String streamed(String body) {
        return body.substring(0, body.length() - 1) + ",\"stream\":true}";
    }

    static JsonNode response(String body) throws Exception {
        TestServer.Resp r = server.post("/v1/responses", body);
        assertEquals(200, r.status(), r.body());
        JsonNode o = r.json();
        assertEquals("response", o.get("object").asText());
        assertEquals("scripted", o.get("model").asText());
        assertTrue(o.get("id").asText().matches("resp_[A-Za-z0-9]{24}"), o.toString());
        assertTrue(Math.abs(o.get("created_at").asLong() - System.currentTimeMillis() / 1000) < 60, o.toString());
        return o;
    }

    /** One SSE event: its name and data. */
    record Event(String name, JsonNode data) {}

    static List<Event> stream(String body) throws Exception {
        TestServer.Resp r = server.post("/v1/responses", body);
        assertEquals(200, r.status(), r.body());
        assertTrue(r.headers().firstValue("content-type").orElse("").startsWith("text/event-stream"));
        return events(r.body());
    }

    /** The events of a stream, each checked: its name is its data's type, and the sequence numbers count from 0. */
    static List<Event> events(String body) throws Exception {
        List<Event> out = new ArrayList<>();
        for (String block : body.split("\n\n")) {
            if (block.isBlank()) continue;
            String[] lines = block.split("\n");
            assertEquals(2, lines.length, block);
            assertTrue(lines[0].startsWith("event: ") && lines[1].startsWith("data: "), block);
            JsonNode data = Json.MAPPER.readTree(lines[1].substring(6));
            String name = lines[0].substring(7);
            assertEquals(name, data.get("type").asText(), "an event's name is its data's type");
            assertEquals(out.size(), data.get("sequence_number").asInt(), "numbered in the order sent: " + block);
            out.add(new Event(name, data));
        }
        return out;
    }

    /**
     * Checks a stream's event order and rebuilds the response it tells (the output items from their added, delta
     * and done events), as a client does; returns the final response's event data with its output replaced by the
     * rebuilt one.
     */
    static ObjectNode rebuild(List<Event> events) {
        assertEquals("response.created", events.get(0).name());
        assertEquals("response.in_progress", events.get(1).name());
        JsonNode created = events.get(0).data().get("response");
        assertEquals("in_progress", created.get("status").asText());
        assertEquals(0, created.get("output").size());
        assertTrue(created.get("usage").isNull());
        String last = events.getLast().name();
        assertTrue(last.equals("response.completed") || last.equals("response.incomplete"), last);
        ArrayNode output = Json.array();
        int open = -1;
        StringBuilder text = null;
        for (Event e : events.subList(2, events.size() - 1)) {
            JsonNode d = e.data();
            switch (e.name()) {
                case "response.output_item.added" -> {
                    assertEquals(-1, open, "an item begins after the one before it is done");
                    open = d.get("output_index").asInt();
                    assertEquals(output.size(), open, "items are numbered in order");
                    assertEquals("in_progress", d.at("/item/status").asText());
                    output.add(d.get("item").deepCopy());
                    text = new StringBuilder();
                }
                case "response.content_part.added" -> {
                    assertEquals(open, d.get("output_index").asInt());
                    assertEquals(0, d.get("content_index").asInt());
                    assertEquals(output.get(open).get("id").asText(), d.get("item_id").asText());
                    ((ArrayNode) output.get(open).get("content")).add(d.get("part").deepCopy());
                }
                case "response.output_text.delta", "response.reasoning_text.delta", "response.function_call_arguments.delta" -> {
                    assertEquals(open, d.get("output_index").asInt());
                    assertEquals(output.get(open).get("id").asText(), d.get("item_id").asText());
                    text.append(d.get("delta").asText());
                }
                case "response.output_text.done", "response.reasoning_text.done" -> {
                    assertEquals(text.toString(), d.get("text").asText(), "the deltas join to the text done");
                    ((ObjectNode) output.get(open).get("content").get(0)).put("text", text.toString());
                }
                case "response.function_call_arguments.done" -> {
                    assertEquals(text.toString(), d.get("arguments").asText());
                    ((ObjectNode) output.get(open)).put("arguments", text.toString());
                }
                case "response.content_part.done" ->
                        assertEquals(output.get(open).get("content").get(0), d.get("part"), "the part done is the part rebuilt");
                case "response.output_item.done" -> {
                    assertEquals(open, d.get("output_index").asInt());
                    ((ObjectNode) output.get(open)).put("status", d.at("/item/status").asText());
                    assertEquals(output.get(open), d.get("item"), "the item done is the item rebuilt");
                    open = -1;
                }
                default -> fail("unexpected event " + e);
            }
        }
        assertEquals(-1, open, "every item is done before the response");
        ObjectNode r = events.getLast().data().get("response").deepCopy();
        assertEquals(r.get("output"), output, "the final response's output is the one the events built");
        return r;
    }

    /** The same request streamed tells the unstreamed response, but for the ids of the response and its items. */
    static void streamsTheSame(String body, JsonNode unstreamed) throws Exception {
        ObjectNode streamed = rebuild(stream(streamed(body)));
        assertEquals(withoutIds(unstreamed), withoutIds(streamed));
    }

    /** A response without its id, its time and its items' ids (random per request). */
    static ObjectNode withoutIds(JsonNode r) {
        ObjectNode o = r.deepCopy();
        o.remove("id");
        o.remove("created_at");
        for (JsonNode item : o.get("output")) {
            ((ObjectNode) item).remove("id");
            ((ObjectNode) item).remove("call_id");
        }
        return o;
    }

    /** An OpenAI error body of the status, whose param is param and whose message starts with messageStart. */
    static void assertError(TestServer.Resp r, int status, String param, String messageStart) {
        assertEquals(status, r.status(), r.body());
        JsonNode e = r.json().get("error");
        assertNotNull(e, r.body());
        assertEquals(param, e.get("param").isNull() ? null : e.get("param").asText(), r.body());
        assertTrue(e.get("message").asText().startsWith(messageStart), r.body());
    }

    @Test
    void plainTextAnswer() throws Exception {
        String body = body("Hi", "\"temperature\":0,\"metadata\":{\"task\":\"t1\"},\"user\":\"u1\",\"store\":true");
        JsonNode r = response(body);
        assertEquals("completed", r.get("status").asText());
        assertTrue(r.get("incomplete_details").isNull());
        assertTrue(r.get("error").isNull());
        JsonNode out = r.get("output");
        assertEquals(1, out.size(), r.toString());
        JsonNode msg = out.get(0);
        assertTrue(msg.get("id").asText().startsWith("msg_"), msg.toString());
        assertEquals(Json.MAPPER.readTree("{\"type\":\"message\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":"
                + "[{\"type\":\"output_text\",\"text\":" + Json.MAPPER.valueToTree(TestServer.PLAIN) + ",\"annotations\":[],\"logprobs\":[]}]}"),
                withoutId(msg));
        JsonNode u = r.get("usage");
        int generated = TestServer.tokenizer().encode(TestServer.PLAIN).length + 1;  // the end of sentence too
        assertEquals(generated, u.get("output_tokens").asInt(), u.toString());
        assertEquals(0, u.at("/output_tokens_details/reasoning_tokens").asInt(), u.toString());
        assertEquals(0, u.at("/input_tokens_details/cached_tokens").asInt(), u.toString());
        int prompt = server.post("/tokenize", TestServer.chat("Hi", "")).json().get("count").asInt();
        assertEquals(prompt, u.get("input_tokens").asInt(), "the prompt of the chat request it means");
        assertEquals(prompt + generated, u.get("total_tokens").asInt());
        // the settings echoed: as sent, or as applied; nothing is stored, whatever store asked
        assertEquals(0.0, r.get("temperature").asDouble());
        assertTrue(r.get("top_p").isNumber(), r.toString());
        assertEquals(Json.MAPPER.readTree("{\"task\":\"t1\"}"), r.get("metadata"));
        assertEquals("u1", r.get("user").asText());
        assertFalse(r.get("store").asBoolean());
        assertEquals("auto", r.get("tool_choice").asText());
        assertEquals(0, r.get("tools").size());
        assertEquals(Json.MAPPER.readTree("{\"format\":{\"type\":\"text\"}}"), r.get("text"));
        assertTrue(r.get("instructions").isNull());
        // the limit applied, as temperature is: the server's default (limits.maxTokensDefault) where none was given
        assertEquals(4096, r.get("max_output_tokens").asInt(), r.toString());
        assertTrue(r.get("previous_response_id").isNull());
        assertTrue(r.get("parallel_tool_calls").asBoolean());
        assertEquals("disabled", r.get("truncation").asText());
        streamsTheSame(body, r);
    }

    static ObjectNode withoutId(JsonNode item) {
        ObjectNode o = item.deepCopy();
        o.remove("id");
        return o;
    }

    @Test
    void instructionsAndMessageItemsRenderAsTheSameChatRequest() throws Exception {
        String responses = "{\"model\":\"scripted\",\"instructions\":\"Be brief.\",\"input\":["
                + "{\"role\":\"developer\",\"content\":\"Answer in English.\"},"
                + "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Hello\"},{\"type\":\"input_text\",\"text\":\"there\"}]},"
                + "{\"type\":\"message\",\"id\":\"msg_1\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hi!\",\"annotations\":[]}]},"
                + "{\"role\":\"user\",\"content\":\"How are you?\"}]}";
        TestServer.Resp r = server.post("/v1/responses", responses);
        assertEquals(200, r.status(), r.body());
        assertTrue(r.headers().firstValue(RequestFields.HEADER).isEmpty(), "an output item's id, status and annotations are accepted: " + r.headers());
        String prompt = lastPrompt.get();
        String chat = "{\"model\":\"scripted\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                + "{\"role\":\"developer\",\"content\":\"Answer in English.\"},"
                + "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello\"},{\"type\":\"text\",\"text\":\"there\"}]},"
                + "{\"role\":\"assistant\",\"content\":\"Hi!\"},{\"role\":\"user\",\"content\":\"How are you?\"}]}";
        assertEquals(200, server.post("/v1/chat/completions", chat).status());
        assertEquals(lastPrompt.get(), prompt, "the Responses request renders the chat request's prompt");
        assertTrue(prompt.contains("Be brief.") && prompt.contains("Hello\n\nthere"), prompt);
        assertEquals("Be brief.", r.json().get("instructions").asText());
    }

    @Test
    void thinkingIsAReasoningItem() throws Exception {
        String body = body("Hi", "\"reasoning\":{\"effort\":\"high\",\"summary\":\"auto\"}");
        JsonNode r = response(body);
        assertTrue(lastPrompt.get().endsWith("<think>"), "thinking mode: " + lastPrompt.get());
        int cut = TestServer.THINKING.indexOf("</think>");
        JsonNode out = r.get("output");
        assertEquals(2, out.size(), r.toString());
        assertTrue(out.get(0).get("id").asText().startsWith("rs_"), out.toString());
        assertEquals(Json.MAPPER.readTree("{\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":"
                + Json.MAPPER.valueToTree(TestServer.THINKING.substring(0, cut)) + "}],\"status\":\"completed\"}"), withoutId(out.get(0)));
        assertEquals(TestServer.THINKING.substring(cut + "</think>".length()), out.at("/1/content/0/text").asText());
        assertTrue(r.at("/usage/output_tokens_details/reasoning_tokens").asInt() > 0, r.toString());
        assertEquals(Json.MAPPER.readTree("{\"effort\":\"high\",\"summary\":\"auto\"}"), r.get("reasoning"));
        streamsTheSame(body, r);
        // effort none: thinking off
        response(body("Hi", "\"reasoning\":{\"effort\":\"none\"}"));
        assertFalse(lastPrompt.get().endsWith("<think>"), lastPrompt.get());
    }

    @Test
    void aToolCallAndItsOutputSentBack() throws Exception {
        String body = body("What is the weather in Paris?", "\"tools\":[" + WEATHER_TOOL + "]");
        JsonNode r = response(body);
        assertEquals("completed", r.get("status").asText());
        JsonNode out = r.get("output");
        assertEquals(2, out.size(), r.toString());
        assertEquals("Let me check.", out.at("/0/content/0/text").asText());
        JsonNode call = out.get(1);
        assertEquals("function_call", call.get("type").asText());
        assertTrue(call.get("id").asText().matches("fc_[A-Za-z0-9]+"), call.toString());
        assertTrue(call.get("call_id").asText().matches("call_[A-Za-z0-9]+"), call.toString());
        assertEquals("get_weather", call.get("name").asText());
        assertEquals("completed", call.get("status").asText());
        assertEquals(Json.MAPPER.readTree("{\"city\":\"Paris\",\"days\":3}"), Json.MAPPER.readTree(call.get("arguments").asText()));
        assertEquals(Json.MAPPER.readTree("[" + WEATHER_TOOL + "]"), r.get("tools"), "the tools echoed as sent");
        assertTrue(lastPrompt.get().contains("get_weather") && lastPrompt.get().contains("Weather in a city"), lastPrompt.get());
        streamsTheSame(body, r);

        // the output sent back as input items, with the call's output: the chat request it means, token for token
        ArrayNode input = Json.array();
        input.addObject().put("role", "user").put("content", "What is the weather in Paris?");
        input.addAll((ArrayNode) r.get("output"));
        input.addObject().put("type", "function_call_output").put("call_id", call.get("call_id").asText()).put("output", "Sunny, 21 C");
        ObjectNode next = Json.object().put("model", "scripted");
        next.set("input", input);
        next.set("tools", Json.MAPPER.readTree("[" + WEATHER_TOOL + "]"));
        TestServer.Resp answered = server.post("/v1/responses", Json.write(next));
        assertEquals(200, answered.status(), answered.body());
        assertTrue(answered.headers().firstValue(RequestFields.HEADER).isEmpty(), answered.headers().toString());
        String prompt = lastPrompt.get();
        ObjectNode chat = Json.object().put("model", "scripted");
        chat.set("tools", Json.MAPPER.readTree("[" + CHAT_WEATHER_TOOL + "]"));
        ArrayNode messages = chat.putArray("messages");
        messages.addObject().put("role", "user").put("content", "What is the weather in Paris?");
        ObjectNode assistant = messages.addObject().put("role", "assistant").put("content", "Let me check.");
        ObjectNode tc = assistant.putArray("tool_calls").addObject().put("id", call.get("call_id").asText()).put("type", "function");
        tc.putObject("function").put("name", "get_weather").put("arguments", call.get("arguments").asText());
        messages.addObject().put("role", "tool").put("tool_call_id", call.get("call_id").asText()).put("content", "Sunny, 21 C");
        assertEquals(200, server.post("/v1/chat/completions", Json.write(chat)).status());
        assertEquals(lastPrompt.get(), prompt, "the Responses request renders the chat request's prompt");
        assertTrue(prompt.contains("Sunny, 21 C"), prompt);

        // an output for a call that was never made: chat's pairing rule, named as the client sent it
        String sent = Json.write(next);
        TestServer.Resp bad = server.post("/v1/responses", sent.replace("\"call_id\":\"" + call.get("call_id").asText() + "\",\"output\"",
                "\"call_id\":\"call_nope\",\"output\""));
        assertError(bad, 400, "input[3].call_id", "input[3].call_id: 'call_nope' is not the call_id of a function_call in the"
                + " assistant turn at input[1] (its call_ids: '" + call.get("call_id").asText() + "')");
        // the same output twice
        ArrayNode twice = input.deepCopy();
        twice.add(twice.get(3).deepCopy());
        ObjectNode again = next.deepCopy();
        again.set("input", twice);
        assertError(server.post("/v1/responses", Json.write(again)), 400, "input[4].call_id", "input[4].call_id: '"
                + call.get("call_id").asText() + "' was already answered by input[3]: each function_call in the assistant turn at"
                + " input[1] is answered by one function_call_output item");
        // a call left unanswered
        input.remove(3);
        input.addObject().put("role", "user").put("content", "And tomorrow?");
        TestServer.Resp unanswered = server.post("/v1/responses", Json.write(next));
        assertError(unanswered, 400, "input[2]", "input[2]: no function_call_output item answers the function_call item '"
                + call.get("call_id").asText() + "' before input[3] (a user message): each function_call item must be answered by a"
                + " function_call_output item with its call_id before any other item");
        input.remove(3);
        assertError(server.post("/v1/responses", Json.write(next)), 400, "input[2]", "input[2]: no function_call_output item"
                + " answers the function_call item '" + call.get("call_id").asText() + "' before the input ends:");
    }

    @Test
    void consecutiveCallsAreOneTurn() throws Exception {
        String responses = "{\"model\":\"scripted\",\"max_output_tokens\":20,\"tools\":[" + WEATHER_TOOL + "],\"input\":["
                + "{\"role\":\"user\",\"content\":\"Paris and Rome?\"},"
                + "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":\"Two calls.\"}],\"encrypted_content\":null},"
                + "{\"type\":\"function_call\",\"id\":\"fc_1\",\"call_id\":\"t1\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\",\"status\":\"completed\"},"
                + "{\"type\":\"function_call\",\"call_id\":\"t2\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Rome\\\"}\"},"
                + "{\"type\":\"function_call_output\",\"call_id\":\"t2\",\"output\":\"Rain\"},"
                + "{\"type\":\"function_call_output\",\"call_id\":\"t1\",\"output\":[{\"type\":\"input_text\",\"text\":\"Sun\"}]}]}";
        TestServer.Resp r = server.post("/v1/responses", responses);
        assertEquals(200, r.status(), r.body());
        assertTrue(r.headers().firstValue(RequestFields.HEADER).isEmpty(), r.headers().toString());
        String prompt = lastPrompt.get();
        String chat = "{\"model\":\"scripted\",\"max_tokens\":20,\"tools\":[" + CHAT_WEATHER_TOOL + "],\"messages\":["
                + "{\"role\":\"user\",\"content\":\"Paris and Rome?\"},"
                + "{\"role\":\"assistant\",\"reasoning_content\":\"Two calls.\",\"tool_calls\":["
                + "{\"id\":\"t1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}},"
                + "{\"id\":\"t2\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Rome\\\"}\"}}]},"
                + "{\"role\":\"tool\",\"tool_call_id\":\"t2\",\"content\":\"Rain\"},{\"role\":\"tool\",\"tool_call_id\":\"t1\",\"content\":\"Sun\"}]}";
        TestServer.Resp c = server.post("/v1/chat/completions", chat);
        assertEquals(200, c.status(), c.body());
        assertEquals(lastPrompt.get(), prompt);
        // a call's arguments that are no JSON object: chat's check, named as the item
        assertError(server.post("/v1/responses", responses.replace("{\\\"city\\\":\\\"Rome\\\"}", "[1]")), 400,
                "input[3].arguments", "input[3].arguments: must be a JSON object encoded as a string");
        // arguments nested past the reader's depth: said so, with the limit (they are not shown to be invalid JSON)
        assertError(server.post("/v1/responses", responses.replace("{\\\"city\\\":\\\"Rome\\\"}",
                        "{\\\"a\\\":" + "[".repeat(5000) + "]".repeat(5000) + "}")), 400, "input[3].arguments",
                "input[3].arguments: is nested too deeply: more than 1000 levels of objects and arrays (the most this server reads)");
        // the same call id twice
        assertError(server.post("/v1/responses", responses.replace("\"call_id\":\"t2\",\"name\"", "\"call_id\":\"t1\",\"name\"")), 400,
                "input[3].call_id", "input[3].call_id: 't1' is also the call_id of input[2]: each function_call has a call_id of its own");
    }

    @Test
    void strictJsonSchemaFormat() throws Exception {
        String schema = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},"
                + "\"required\":[\"city\",\"days\"],\"additionalProperties\":false}";
        String format = "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"forecast\",\"strict\":true,\"schema\":" + schema + "}}";
        String body = body("The forecast as JSON, please.", format);
        JsonNode r = response(body);
        assertEquals(Json.MAPPER.readTree(JSON_ANSWER), Json.MAPPER.readTree(r.at("/output/0/content/0/text").asText()), r.toString());
        assertEquals(Json.MAPPER.readTree("{\"format\":{\"type\":\"json_schema\",\"name\":\"forecast\",\"strict\":true,\"schema\":" + schema + "}}"),
                r.get("text"));
        String prompt = lastPrompt.get();
        assertTrue(prompt.contains("forecast"), "the schema is described in the prompt: " + prompt);
        String chat = TestServer.chat("The forecast as JSON, please.", "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                + "{\"name\":\"forecast\",\"strict\":true,\"schema\":" + schema + "}}");
        assertEquals(200, server.post("/v1/chat/completions", chat).status());
        assertEquals(lastPrompt.get(), prompt);
        streamsTheSame(body, r);
        // strict: the schema is compiled for constrained decoding, whose refusal names the node of text.format.schema
        assertError(server.post("/v1/responses", body("x as JSON", format.replace("{\"type\":\"string\"}", "{\"type\":\"string\",\"contentEncoding\":\"base64\"}"))),
                400, "text.format.schema.properties.city", "text.format.schema.properties.city:");
        // json_object: the output is held to a JSON object
        JsonNode o = response(body("The forecast as JSON, please.", "\"text\":{\"format\":{\"type\":\"json_object\"}}"));
        assertTrue(Json.MAPPER.readTree(o.at("/output/0/content/0/text").asText()).isObject(), o.toString());
        assertError(server.post("/v1/responses", body("Hi", "\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":" + schema + "}}")),
                400, "text.format.name", "text.format.name: is required");
    }

    @Test
    void maxOutputTokensMakesItIncomplete() throws Exception {
        String body = body("Hi", "\"max_output_tokens\":3");
        JsonNode r = response(body);
        assertEquals("incomplete", r.get("status").asText(), r.toString());
        assertEquals(Json.MAPPER.readTree("{\"reason\":\"max_output_tokens\"}"), r.get("incomplete_details"));
        assertEquals(3, r.at("/usage/output_tokens").asInt());
        assertEquals(3, r.get("max_output_tokens").asInt());
        assertEquals("incomplete", r.at("/output/0/status").asText(), "the item the limit cut");
        assertTrue(TestServer.PLAIN.startsWith(r.at("/output/0/content/0/text").asText()), r.toString());
        List<Event> events = stream(streamed(body));
        assertEquals("response.incomplete", events.getLast().name());
        streamsTheSame(body, r);
        // cut by the server's default (chat's max_tokens is no field of this API, and is ignored): the reason is OpenAI's
        // max_output_tokens still, and max_output_tokens says the limit that cut it (it was null)
        try (TestServer small = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                java.util.Map.of("limits.maxTokensDefault", 2, "speculative.draft", "none"))) {
            TestServer.Resp cut = small.post("/v1/responses", "{\"input\":\"Hi\",\"max_tokens\":5}");
            assertEquals(200, cut.status(), cut.body());
            assertEquals("max_tokens (did you mean max_output_tokens?)", cut.headers().firstValue(RequestFields.HEADER).orElse(null));
            JsonNode c = cut.json();
            assertEquals("incomplete", c.get("status").asText(), c.toString());
            assertEquals(Json.MAPPER.readTree("{\"reason\":\"max_output_tokens\"}"), c.get("incomplete_details"));
            assertEquals(2, c.at("/usage/output_tokens").asInt(), c.toString());
            assertEquals(2, c.get("max_output_tokens").asInt(), c.toString());
        }
    }

    @Test
    void theStreamsEventsInOrder() throws Exception {
        List<Event> events = stream(streamed(body("What is the weather in Paris?", "\"tools\":[" + WEATHER_TOOL + "]")));
        List<String> names = new ArrayList<>();
        for (Event e : events) if (names.isEmpty() || !names.getLast().equals(e.name())) names.add(e.name());
        assertEquals(List.of("response.created", "response.in_progress",
                "response.output_item.added", "response.content_part.added", "response.output_text.delta",
                "response.output_text.done", "response.content_part.done", "response.output_item.done",
                "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
                "response.output_item.done", "response.completed"), names);
        JsonNode done = events.getLast().data().get("response");
        assertEquals("completed", done.get("status").asText());
        assertTrue(done.at("/usage/output_tokens").asInt() > 0, done.toString());
        String id = events.getFirst().data().at("/response/id").asText();
        assertEquals(id, done.get("id").asText(), "one response, created then completed");
    }

    @Test
    void anErrorAfterTheStreamStartedIsAnErrorEvent() throws Exception {
        backend.failOn = TestServer.tokenizer().encode("EXPLODE");
        try {
            TestServer.Resp r = server.post("/v1/responses", body("EXPLODE", "\"stream\":true"));
            assertEquals(200, r.status());
            List<Event> events = events(r.body());
            assertEquals("response.created", events.getFirst().name());
            Event last = events.getLast();
            assertEquals("error", last.name(), r.body());
            assertTrue(last.data().get("message").asText().contains("injected backend fault"), r.body());
            assertTrue(last.data().has("code") && last.data().has("param"), r.body());
            assertTrue(events.stream().noneMatch(e -> e.name().equals("response.completed")), r.body());
            // unstreamed: OpenAI's error body with a 500
            TestServer.Resp plain = server.post("/v1/responses", body("EXPLODE", ""));
            assertEquals(500, plain.status(), plain.body());
            assertEquals("server_error", plain.json().at("/error/type").asText(), plain.body());
        } finally {
            backend.failOn = null;
        }
    }

    @Test
    void errorsNameTheResponsesFields() throws Exception {
        String u = "\"input\":\"Hi\"";
        String[][] cases = {
                {"\"input\":5", "input", "input: must be a string or an array of input items"},
                // nothing to answer: said with the Responses item and without chat's prefix
                {"\"input\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"}]", "input[1]",
                        "input[1]: the last message is the assistant's, so there is nothing to answer: end with a user message"},
                // an assistant turn of several items: the item that ends the input is named, not the turn's first
                {"\"input\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\","
                        + "\"text\":\"Greet.\"}]},{\"role\":\"assistant\",\"content\":\"Hello\"}]", "input[2]",
                        "input[2]: the last message is the assistant's, so there is nothing to answer: end with a user message"},
                {"\"input\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\"},"
                        + "{\"role\":\"assistant\",\"content\":\"again\"}]", "input[2]",
                        "input[2]: the last message is the assistant's, so there is nothing to answer: end with a user message"},
                // the turn's unanswered call is what is refused, where it is the last item or not
                {"\"input\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Let me check.\"},"
                        + "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"get_weather\",\"arguments\":\"{}\"}],\"tools\":["
                        + WEATHER_TOOL + "]", "input[2]", "input[2]: no function_call_output item answers the function_call item 'c1'"},
                {"\"input\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":"
                        + "\"get_weather\",\"arguments\":\"{}\"},{\"role\":\"assistant\",\"content\":\"Let me check.\"}],\"tools\":["
                        + WEATHER_TOOL + "]", "input[1]", "input[1]: no function_call_output item answers the function_call item 'c1'"},
                {"\"input\":[]", "input", "input: must hold at least one item"},
                {"\"model\":\"scripted\"", "input", "input: is required"},
                {"\"input\":[1]", "input[0]", "input[0]: must be an input item object"},
                {"\"input\":[{\"content\":\"x\"}]", "input[0].role", "input[0].role: is required"},
                {"\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]", "input[0].role", "input[0].role: must be \"user\", \"assistant\", \"system\" or \"developer\", got \"tool\" (a tool's result is a function_call_output item)"},
                {"\"input\":[{\"role\":\"user\"}]", "input[0].content", "input[0].content: is required"},
                {"\"input\":[{\"role\":\"user\",\"content\":[]}]", "input[0].content", "input[0].content: must hold at least one content part"},
                {"\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\"}]}]", "input[0].content[0].text", "input[0].content[0].text: is required"},
                {"\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"What is this?\"},{\"type\":\"input_image\",\"image_url\":\"http://x/y.png\"}]}]",
                        "input[0].content[1].type", "input[0].content[1].type: 'input_image' parts are not supported: this model reads text only"},
                {"\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_file\",\"file_id\":\"f\"}]}]", "input[0].content[0].type", "input[0].content[0].type: 'input_file' parts"},
                {"\"input\":[{\"type\":\"web_search_call\",\"id\":\"ws\"}]", "input[0].type", "input[0].type: unsupported item type 'web_search_call'"},
                {"\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]", "input[0].type", "input[0].type: an item_reference names a stored item"},
                {"\"input\":[{\"type\":\"function_call\",\"name\":\"f\",\"arguments\":\"{}\"}]", "input[0].call_id", "input[0].call_id: is required"},
                {"\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"arguments\":\"{}\"}]", "input[0].name", "input[0].name: must be a non-empty string"},
                {"\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":{}}]", "input[0].arguments", "input[0].arguments: must be a string"},
                {"\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"a b\",\"arguments\":\"{}\"},"
                        + "{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"ok\"}]", "input[0].name",
                        "input[0].name: must be 1 to 64 letters, digits, underscores or hyphens, got 'a b'"},
                {"\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\"}]", "input[0].output", "input[0].output: is required"},
                {"\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"r\"}]", "input[0].call_id",
                        "input[0].call_id: 'c' answers no function call: a function_call_output item follows the function_call"
                                + " item it answers (or another function_call_output item after it)"},
                {"\"input\":[{\"type\":\"reasoning\",\"summary\":[{\"type\":\"text\",\"text\":\"x\"}]}]", "input[0].summary[0].type", "input[0].summary[0].type: must be \"summary_text\""},
                {"\"instructions\":5," + u, "instructions", "instructions: must be a string"},
                {"\"previous_response_id\":\"resp_1\"," + u, "previous_response_id", "previous_response_id: is not supported: this server stores no responses"},
                {"\"conversation\":\"conv_1\"," + u, "conversation", "conversation: is not supported"},
                {"\"background\":true," + u, "background", "background: background responses are not supported"},
                {"\"background\":true,\"stream\":true," + u, "background", "background: background responses are not supported:"
                        + " a response is fetched later from storage, and this server stores none; leave background out"},
                {"\"truncation\":\"sometimes\"," + u, "truncation", "truncation: must be \"disabled\" or \"auto\""},
                {"\"include\":[\"message.output_text.logprobs\"]," + u, "include[0]", "include[0]: 'message.output_text.logprobs' is not supported"},
                {"\"top_logprobs\":3," + u, "top_logprobs", "top_logprobs: logprobs are not supported"},
                {"\"stream_options\":{\"include_obfuscation\":false}," + u, "stream_options", "stream_options: is allowed only with \"stream\": true"},
                {"\"metadata\":{\"a\":1}," + u, "metadata.a", "metadata.a: must be a string"},
                {"\"tools\":[{\"type\":\"web_search\"}]," + u, "tools[0].type", "tools[0].type: only function tools are supported, got \"web_search\""},
                {"\"tools\":[{\"name\":\"f\"}]," + u, "tools[0].type", "tools[0].type: is required"},
                {"\"tools\":[{\"type\":\"function\",\"name\":\"get weather\"}]," + u, "tools[0].name", "tools[0].name: must be 1 to 64 letters"},
                {"\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":5}]," + u, "tools[0].parameters", "tools[0].parameters: must be a JSON Schema object"},
                {"\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"strict\":\"yes\"}]," + u, "tools[0].strict", "tools[0].strict: must be true or false"},
                {"\"tools\":[" + WEATHER_TOOL + "],\"tool_choice\":{\"type\":\"function\",\"name\":\"nope\"}," + u, "tool_choice", "tool_choice: names function 'nope'"},
                {"\"tool_choice\":{\"type\":\"web_search_preview\"}," + u, "tool_choice.type", "tool_choice.type: must be \"function\""},
                {"\"tool_choice\":{\"type\":\"function\"}," + u, "tool_choice.name", "tool_choice.name: must be a non-empty string"},
                {"\"tool_choice\":\"required\"," + u, "tool_choice", "tool_choice: 'required' needs at least one tool"},
                {"\"text\":{\"format\":{\"type\":\"yaml\"}}," + u, "text.format.type", "text.format.type: must be \"text\", \"json_object\" or \"json_schema\""},
                {"\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":5}}," + u, "text.format.schema", "text.format.schema: must be a JSON Schema"},
                {"\"reasoning\":{\"effort\":\"enormous\"}," + u, "reasoning.effort", "reasoning.effort: unsupported value 'enormous'"},
                {"\"reasoning\":{\"summary\":\"long\"}," + u, "reasoning.summary", "reasoning.summary: must be \"auto\", \"concise\" or \"detailed\""},
                {"\"max_output_tokens\":0," + u, "max_output_tokens", "max_output_tokens: is out of range: give an integer in [1, 2147483647], got 0"},
                {"\"temperature\":5," + u, "temperature", "temperature: must be in [0, 2], got 5"},
                {"\"parallel_tool_calls\":\"no\"," + u, "parallel_tool_calls", "parallel_tool_calls: must be true or false"},
                {"\"stream\":\"yes\"," + u, "stream", "stream: must be true or false"}};
        for (String[] c : cases) {
            TestServer.Resp r = server.post("/v1/responses", "{" + c[0] + "}");
            assertError(r, 400, c[1], c[2]);
            // chat's own names never reach the client
            for (String chatName : List.of("messages", "max_tokens", "response_format", "reasoning_effort", "tool_call_id", ".function.",
                    "tool call", "tool message"))
                assertFalse(r.json().at("/error/message").asText().contains(chatName), chatName + " in " + r.body());
        }
        assertError(server.post("/v1/responses", body("Hi", "").replace("\"scripted\"", "\"gpt-5\"")), 404, "model",
                "model: 'gpt-5' does not exist");
        // a model name that reads as a chat path is quoted as sent
        assertError(server.post("/v1/responses", body("Hi", "").replace("\"scripted\"", "\"messages[0]\"")), 404, "model",
                "model: 'messages[0]' does not exist");
        assertError(server.post("/v1/responses", "{\"input\":"), 400, null, "malformed JSON");
    }

    @Test
    void anEmptyNameIsSaidToBeEmpty() throws Exception {
        // "must be a non-empty string, got a string" contradicted itself about ""
        String u = "\"input\":\"Hi\",\"model\":\"scripted\"";
        TestServer.Resp r = server.post("/v1/responses", "{\"tools\":[" + WEATHER_TOOL + "],\"tool_choice\":{\"type\":\"function\",\"name\":\"\"}," + u + "}");
        assertError(r, 400, "tool_choice.name", "tool_choice.name: must be a non-empty string, got an empty string");
        assertEquals("tool_choice.name: must be a non-empty string, got an empty string", r.json().at("/error/message").asText());
        r = server.post("/v1/responses", "{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"\",\"arguments\":\"{}\"}],\"model\":\"scripted\"}");
        assertEquals("input[0].name: must be a non-empty string, got an empty string", r.json().at("/error/message").asText(), r.body());
    }

    @Test
    void chatRefusalsAfterTheParserNameTheResponsesFields() throws Exception {
        ResponsesApi.Translation t = ResponsesApi.translate(Json.MAPPER.readTree(body("Hi", "\"max_output_tokens\":900,"
                + "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":{\"type\":\"object\"}}}")));
        // the prompt over the context (HttpVerticle.generate) and max_tokens past the cache (the engine's admission)
        ApiException context = t.renamed(ApiException.bad("messages", "context_length_exceeded", "messages: the prompt is 9000"
                + " tokens as the chat template writes it (response_format's schema: 100 tokens, the messages: 8900 tokens); this"
                + " server's context limit is 4096 tokens"));
        assertEquals("input", context.param());
        assertEquals("context_length_exceeded", context.code());
        assertEquals("input: the prompt is 9000 tokens as the chat template writes it (text.format's schema: 100 tokens, the input:"
                + " 8900 tokens); this server's context limit is 4096 tokens", context.getMessage());
        // a schema that is most of the prompt is refused on it
        ApiException bySchema = t.renamed(ApiException.bad("response_format", "context_length_exceeded", "response_format: the"
                + " prompt is 9000 tokens as the chat template writes it (response_format's schema: 8900 tokens, the messages: 100"
                + " tokens); this server's context limit is 4096 tokens"));
        assertEquals("text.format", bySchema.param());
        assertEquals("text.format: the prompt is 9000 tokens as the chat template writes it (text.format's schema: 8900 tokens,"
                + " the input: 100 tokens); this server's context limit is 4096 tokens", bySchema.getMessage());
        ApiException cache = t.renamed(ApiException.bad("max_tokens", "context_length_exceeded", "max_tokens: the prompt (5"
                + " tokens) plus max_tokens (900) exceeds the server's cache of 512 tokens (model.cacheTokens); lower max_tokens"));
        assertEquals("max_output_tokens: the prompt (5 tokens) plus max_output_tokens (900) exceeds the server's cache of 512"
                + " tokens (model.cacheTokens); lower max_output_tokens", cache.getMessage());
        assertEquals("max_output_tokens", cache.param());
        // the client's own text is quoted as sent, even where it reads as a chat field
        ResponsesApi.Translation own = ResponsesApi.translate(Json.MAPPER.readTree(body("Hi", "").replace("\"scripted\"", "\"max_tokens\"")));
        assertEquals("model: 'max_tokens' does not exist", own.renamed(ApiException.badField("model", "'max_tokens' does not exist")).getMessage());
    }

    @Test
    void aStoredResponsesRoutesAreA404() throws Exception {
        for (String[] c : new String[][]{{"GET", "/v1/responses/resp_123"}, {"DELETE", "/v1/responses/resp_123"},
                {"POST", "/v1/responses/resp_123/cancel"}, {"GET", "/v1/responses/resp_123/input_items"}}) {
            var req = java.net.http.HttpRequest.newBuilder(java.net.URI.create("http://127.0.0.1:" + server.port + c[1]))
                    .method(c[0], java.net.http.HttpRequest.BodyPublishers.noBody()).build();
            var resp = server.http().send(req, java.net.http.HttpResponse.BodyHandlers.ofString());
            TestServer.Resp r = new TestServer.Resp(resp.statusCode(), resp.headers(), resp.body());
            assertError(r, 404, null, "response 'resp_123' not found: this server stores no responses");
            assertEquals("response_not_found", r.json().at("/error/code").asText(), r.body());
        }
        TestServer.Resp get = server.get("/v1/responses");
        assertEquals(405, get.status(), get.body());
        assertEquals("POST", get.headers().firstValue("Allow").orElse(null));
        TestServer.Resp put = server.post("/v1/responses/resp_1", "{}");
        assertEquals(405, put.status(), put.body());
        assertEquals("GET, HEAD, DELETE", put.headers().firstValue("Allow").orElse(null));
        assertEquals(404, server.get("/v1/responses/resp_1/other").status());
        // the token counter is no stored response
        TestServer.Resp counter = server.get("/v1/responses/input_tokens");
        assertEquals(405, counter.status(), counter.body());
        assertEquals("POST", counter.headers().firstValue("Allow").orElse(null));
    }

    @Test
    void inputTokensCountsThePromptARequestRuns() throws Exception {
        String body = body("What is the weather in Paris?", "\"instructions\":\"Be brief.\"");
        int ran = response(body).at("/usage/input_tokens").asInt();
        TestServer.Resp r = server.post("/v1/responses/input_tokens", body);
        assertEquals(200, r.status(), r.body());
        assertEquals(Json.MAPPER.readTree("{\"object\":\"response.input_tokens\",\"input_tokens\":" + ran + "}"), r.json());
        int withTools = server.post("/v1/responses/input_tokens", body("What is the weather in Paris?",
                "\"instructions\":\"Be brief.\",\"tools\":[" + WEATHER_TOOL + "]")).json().get("input_tokens").asInt();
        assertTrue(withTools > ran, withTools + " vs " + ran);
        // read and checked as the generation route reads a body
        assertError(server.post("/v1/responses/input_tokens", body("Hi", "\"previous_response_id\":\"resp_1\"")), 400,
                "previous_response_id", "previous_response_id: is not supported");
        assertError(server.post("/v1/responses/input_tokens", "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"x\"}]}"),
                400, "input[0].call_id", "input[0].call_id: 'c' answers no function call");
    }

    @Test
    void unknownFieldsAreReportedAsOnChat() throws Exception {
        TestServer.Resp r = server.post("/v1/responses", body("Hi", "\"metadata\":{\"k\":\"v\"},\"store\":false,\"user\":\"u\","
                + "\"include\":[\"reasoning.encrypted_content\"],\"truncation\":\"auto\",\"service_tier\":\"auto\",\"prompt_cache_key\":\"k\","
                + "\"max_output_tokenz\":3,\"text\":{\"format\":{\"type\":\"text\"},\"verbosity\":\"low\"}"));
        assertEquals(200, r.status(), r.body());
        assertEquals("max_output_tokenz (did you mean max_output_tokens?), text.verbosity",
                r.headers().firstValue(RequestFields.HEADER).orElse(null));
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("server.rejectUnknownFields", true))) {
            assertError(t.post("/v1/responses", body("Hi", "\"temperture\":1")), 400, "temperture",
                    "Unrecognized request argument supplied: temperture (did you mean temperature?)");
            assertEquals(200, t.post("/v1/responses", body("Hi", "\"store\":false,\"metadata\":{\"a\":\"b\"},"
                    + "\"include\":[\"reasoning.encrypted_content\"],\"reasoning\":{\"effort\":\"low\",\"summary\":\"auto\"},"
                    + "\"stream\":true,\"stream_options\":{\"include_obfuscation\":false}")).status(),
                    "fields Responses clients send unasked");
        }
    }

    /**
     * Chat's names of the Responses fields get those fields as their hint, where no edit distance finds them
     * ({@code max_tokens} is {@code max_output_tokens}); chat's {@code stop} is told it has no counterpart, not offered
     * {@code store}, which only looks alike; and a chat body without input is told its messages are the input.
     */
    @Test
    void chatNamesOfResponsesFieldsGetSensibleHints() throws Exception {
        TestServer.Resp r = server.post("/v1/responses", body("Hi", "\"max_output_tokens\":2,\"stop\":[\"x\"],\"max_token\":3,"
                + "\"max_tokens\":3,\"max_completion_tokens\":3,\"messages\":[],\"response_format\":{\"type\":\"text\"},"
                + "\"reasoning_effort\":\"low\",\"tool\":[]"));
        assertEquals(200, r.status(), r.body());
        assertEquals("stop (the Responses API has no stop field: stop sequences cannot be given), max_token (did you mean"
                + " max_output_tokens?), max_tokens (did you mean max_output_tokens?), max_completion_tokens (did you mean"
                + " max_output_tokens?), messages (did you mean input?), response_format (did you mean text.format?),"
                + " reasoning_effort (did you mean reasoning.effort?), tool (did you mean tools?)",
                r.headers().firstValue(RequestFields.HEADER).orElse(null));
        assertError(server.post("/v1/responses", "{\"model\":\"scripted\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}"),
                400, "input", "input: is required: a string (one user message) or an array of input items (the body has chat's"
                        + " messages: the Responses API takes the conversation as input)");
    }

    @Test
    void aClientThatGoesAwayStopsItsRequest() throws Exception {
        backend.delayMs = 10;
        try {
            String id;
            String body = body("Please count for a long time.", "\"stream\":true,\"max_output_tokens\":3000");
            try (RawStream s = new RawStream(server.port, "/v1/responses", body)) {
                assertEquals(200, s.status);
                id = Json.MAPPER.readTree(s.nextData()).at("/response/id").asText();
                assertTrue(s.nextData().contains("response.in_progress"));
                assertTrue(s.nextData().contains("response.output_item.added"));
                assertTrue(s.nextData().contains("response.content_part.added"));
                for (int i = 0; i < 3; i++) assertTrue(s.nextData().contains("response.output_text.delta"));
            }
            assertTrue(TestServer.eventually(3000, () -> server.state().finished(id) != null), "the request ended");
            ServerState.JobRecord r = server.state().finished(id);
            assertEquals("cancelled", r.outcome());
            assertTrue(r.generated() < 100, "stopped soon after the disconnect, generated " + r.generated());
        } finally {
            backend.delayMs = 0;
        }
    }
}
