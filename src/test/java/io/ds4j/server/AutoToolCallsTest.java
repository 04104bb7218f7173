package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Tool calls in auto mode through HTTP, on the scripted model, which calls get_weather with
 * {@code {"city": "Paris", "days": 3}} whenever the prompt mentions the weather ({@link TestServer#TOOL}): a function
 * that is not strict gets the model's call as written; a strict one gets a call valid for its schema even where the
 * model would write another; a tool-call block is held to the listed functions; without a weather question the answer
 * is the model's text, untouched. Asked to "Call get_weather", it writes the call alone, as a forced call's grammar
 * admits it.
 */
class AutoToolCallsTest {
    static TestServer server;

    @BeforeAll
    static void start() throws Exception {
        // "Call get_weather" asks for the call alone, which a forced call's grammar admits from its first token
        int[] block = TestServer.tokenizer().encode(CutMidCharacterTest.BLOCK);
        server = TestServer.scripted(new ScriptedBackend(p -> TestServer.tokenizer().decode(p).contains("Call get_weather")
                ? block : TestServer.defaultScript(p)), Map.of("speculative.draft", "none"));
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    static String tool(String name, boolean strict, String properties) {
        return "{\"type\":\"function\",\"function\":{\"name\":\"" + name + "\",\"strict\":" + strict + ",\"parameters\":"
                + "{\"type\":\"object\",\"properties\":" + properties + ",\"required\":[\"city\"],\"additionalProperties\":false}}}";
    }

    static JsonNode answer(String user, String tools, String extra) throws Exception {
        var r = server.post("/v1/chat/completions", TestServer.chat(user, "\"temperature\":0,\"max_tokens\":400,\"tools\":["
                + tools + "]" + extra));
        assertEquals(200, r.status(), r.body());
        return r.json().at("/choices/0");
    }

    @Test
    void aStrictFunctionsCallIsValidForItsSchema() throws Exception {
        String cityIsANumber = "{\"city\":{\"type\":\"integer\"},\"days\":{\"type\":\"integer\"}}";
        JsonNode free = answer("What is the weather in Paris?", tool("get_weather", false, cityIsANumber), "");
        assertEquals("tool_calls", free.get("finish_reason").asText(), free.toString());
        JsonNode freeArgs = Json.MAPPER.readTree(free.at("/message/tool_calls/0/function/arguments").asText());
        assertEquals("Paris", freeArgs.get("city").asText(), "not strict: the model's arguments as written");

        JsonNode strict = answer("What is the weather in Paris?", tool("get_weather", true, cityIsANumber), "");
        assertEquals("tool_calls", strict.get("finish_reason").asText(), strict.toString());
        assertEquals("Let me check.", strict.at("/message/content").asText(), strict.toString());
        JsonNode call = strict.at("/message/tool_calls/0/function");
        assertEquals("get_weather", call.get("name").asText());
        JsonNode args = Json.MAPPER.readTree(call.get("arguments").asText());
        assertTrue(args.get("city").isIntegralNumber(), "strict: the city is an integer: " + args);
        assertTrue(StructuredOutputTest.valid(Json.MAPPER.readTree(cityIsANumber.replace("{\"city\"", "{\"type\":\"object\",\"properties\":{\"city\"") + ",\"required\":[\"city\"],\"additionalProperties\":false}"), args), args.toString());
        assertEquals(1, strict.at("/message/tool_calls").size());
    }

    @Test
    void aBlockNamesOnlyListedFunctions() throws Exception {
        String props = "{\"city\":{\"type\":\"string\"}}";
        JsonNode c = answer("What is the weather in Paris?", tool("get_forecast", true, props), ",\"parallel_tool_calls\":false");
        JsonNode calls = c.at("/message/tool_calls");
        assertEquals(1, calls.size(), c.toString());
        assertEquals("get_forecast", calls.get(0).at("/function/name").asText(), "the one listed function, not the model's get_weather");
        // the scripted model's tokens no longer match the call it is held to, so its argument runs on to max_tokens (the
        // grammar does not shorten a call to fit)
        assertEquals("length", c.get("finish_reason").asText(), c.toString());
        assertTrue(calls.get(0).at("/function/arguments").asText().startsWith("{\"city\": \""), c.toString());
        // streamed, the same call
        var s = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?", "\"temperature\":0,"
                + "\"max_tokens\":400,\"stream\":true,\"parallel_tool_calls\":false,\"tools\":[" + tool("get_forecast", true, props) + "]"));
        assertEquals(200, s.status(), s.body());
        assertTrue(s.body().contains("\"name\":\"get_forecast\""), s.body());
    }

    @Test
    void textAnswersAreUntouched() throws Exception {
        JsonNode c = answer("Hi", tool("lookup", true, "{\"city\":{\"type\":\"integer\"}}"), "");
        assertEquals(TestServer.PLAIN, c.at("/message/content").asText(), c.toString());
        assertEquals("stop", c.get("finish_reason").asText());
        assertTrue(c.at("/message/tool_calls").isMissingNode() || c.at("/message/tool_calls").isEmpty(), c.toString());
    }

    /**
     * A block begun with too few tokens left for its shortest completion is cut by max_tokens (finish reason length,
     * the call as far as it got), as an unconstrained call is: the budget does not turn the model's call into an end of
     * its turn with half a tag in the content.
     */
    @Test
    void aCallBegunWithoutRoomEndsWithLength() throws Exception {
        var r = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?", "\"temperature\":0,"
                + "\"max_tokens\":40,\"tools\":[" + tool("get_weather", true, "{\"city\":{\"type\":\"integer\"}}") + "]"));
        assertEquals(200, r.status(), r.body());
        JsonNode c = r.json().at("/choices/0");
        assertEquals("length", c.get("finish_reason").asText(), c.toString());
        assertEquals("Let me check.", c.at("/message/content").asText(), "no markup in the content: " + c);
        assertEquals("get_weather", c.at("/message/tool_calls/0/function/name").asText(), c.toString());
    }

    /**
     * A forced call (tool_choice required or naming the function) that max_tokens cuts before its shortest complete form
     * (61 tokens here) has the arguments as far as the model wrote them, as OpenAI's: {"city": "Paris cut inside the
     * value, {"city": "Paris" after it, finish reason length, streamed and whole alike. They were closed by the length
     * steering instead ({"city": ""}), which could not make the call complete within max_tokens anyway. With room for
     * the shortest form, the call is steered to complete in time.
     */
    @Test
    void aForcedCallCutByMaxTokensIsTheModelsAsFarAsItGot() throws Exception {
        String tool = tool("get_weather", false, "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}");
        for (String choice : new String[]{"\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"}) {
            String[][] cases = {{"44", "{\"city\": \"Paris"}, {"48", "{\"city\": \"Paris\""}};
            for (String[] k : cases) {
                String extra = "\"temperature\":0,\"max_tokens\":" + k[0] + ",\"tool_choice\":" + choice + ",\"tools\":[" + tool + "]";
                var full = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?", extra));
                assertEquals(200, full.status(), full.body());
                JsonNode c = full.json().at("/choices/0");
                assertEquals("length", c.get("finish_reason").asText(), c.toString());
                assertEquals(k[1], c.at("/message/tool_calls/0/function/arguments").asText(), c.toString());
                var stream = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?", extra + ",\"stream\":true"));
                assertEquals(GoldenSseTest.assembleFull(full.json()), GoldenSseTest.assemble(stream), choice + " " + k[0]);
            }
            JsonNode fits = answer("What is the weather in Paris?", tool, ",\"tool_choice\":" + choice).deepCopy();
            var r = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?", "\"temperature\":0,"
                    + "\"max_tokens\":64,\"tool_choice\":" + choice + ",\"tools\":[" + tool + "]"));
            JsonNode c = r.json().at("/choices/0");
            assertEquals("tool_calls", c.get("finish_reason").asText(), c.toString());
            assertTrue(Json.MAPPER.readTree(c.at("/message/tool_calls/0/function/arguments").asText()).has("city"), c.toString());
            assertEquals("tool_calls", fits.get("finish_reason").asText(), fits.toString());
        }
    }

    /**
     * A call that a stop string or a stop token cut (auto, required and named alike) ends with finish reason stop and
     * the stop as stop_reason, streamed and whole: the call is incomplete, its arguments as far as they got, so
     * tool_calls, which says the model called a tool, would send a client to run it.
     */
    @Test
    void aCallCutByAStopStringOrStopTokenEndsWithStop() throws Exception {
        String tool = tool("get_weather", false, "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}");
        int paris = -1; // the token that writes the city, inside the call's first argument
        for (int id : TestServer.tokenizer().encode(CutMidCharacterTest.BLOCK))
            if (TestServer.tokenizer().decode(new int[]{id}).contains("Paris")) paris = id;
        assertTrue(paris >= 0, "the script writes Paris in a token of its own");
        String[][] stops = {{"\"stop\":[\"</\"]", "</", "{\"city\": \"Paris"}, {"\"stop\":[\"\\\"days\\\"\"]", "\"days\"", "{\"city\": \"Paris\""},
                {"\"stop_token_ids\":[" + paris + "]", Integer.toString(paris), "{\"city\": \""}};
        for (String choice : new String[]{"\"auto\"", "\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"}) {
            String user = choice.equals("\"auto\"") ? "What is the weather in Paris?" : "Call get_weather for Paris.";
            for (String[] s : stops) {
                String extra = "\"temperature\":0,\"max_tokens\":200,\"tool_choice\":" + choice + ",\"tools\":[" + tool + "]," + s[0];
                String what = choice + " " + s[0];
                var full = server.post("/v1/chat/completions", TestServer.chat(user, extra));
                assertEquals(200, full.status(), full.body());
                JsonNode c = full.json().at("/choices/0");
                assertEquals("stop", c.get("finish_reason").asText(), what + ": " + c);
                assertEquals(s[1], c.get("stop_reason").asText(), what + ": " + c);
                assertEquals(s[2], c.at("/message/tool_calls/0/function/arguments").asText(), "as far as they got: " + what + ": " + c);
                var stream = server.post("/v1/chat/completions", TestServer.chat(user, extra + ",\"stream\":true"));
                assertEquals(GoldenSseTest.assembleFull(full.json()), GoldenSseTest.assemble(stream), what);
            }
        }
    }

    /**
     * A call that fits max_tokens is the model's call, not a shorter one: the 88 tokens of the scripted call under a
     * limit of 90, where a grammar steered by one byte a token (the call is ~200 bytes) would have closed it early.
     */
    @Test
    void aCallThatFitsIsNotShortened() throws Exception {
        String props = "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}";
        for (String extra : new String[]{"", ",\"parallel_tool_calls\":false"}) {
            for (boolean strict : new boolean[]{true, false}) {
                var r = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?", "\"temperature\":0,"
                        + "\"max_tokens\":90,\"tools\":[" + tool("get_weather", strict, props) + "]" + extra));
                JsonNode c = r.json().at("/choices/0");
                assertEquals("tool_calls", c.get("finish_reason").asText(), c.toString());
                assertEquals(Json.MAPPER.readTree("{\"city\":\"Paris\",\"days\":3}"),
                        Json.MAPPER.readTree(c.at("/message/tool_calls/0/function/arguments").asText()), strict + extra + ": " + c);
            }
        }
    }

    /**
     * Thinking mode: the model ends its reasoning with the {@code </think>} control token, which the constraint offers
     * inside the reasoning; with ignore_eos the free text runs on to max_tokens as it does without a grammar.
     */
    @Test
    void reasoningEndsAndIgnoreEosHolds() throws Exception {
        String strict = tool("lookup", true, "{\"city\":{\"type\":\"integer\"}}");
        var r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"temperature\":0,\"max_tokens\":60,"
                + "\"chat_template_kwargs\":{\"thinking\":true},\"tools\":[" + strict + "]"));
        JsonNode c = r.json().at("/choices/0");
        assertEquals("The user says hi. I should greet back.", c.at("/message/reasoning_content").asText(), c.toString());
        assertEquals("Hi there, nice to meet you.", c.at("/message/content").asText(), c.toString());
        assertEquals("stop", c.get("finish_reason").asText());
        for (String tools : new String[]{"", ",\"tools\":[" + strict + "]"}) {
            var e = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"temperature\":0,\"max_tokens\":30,\"ignore_eos\":true" + tools));
            JsonNode ec = e.json().at("/choices/0");
            assertEquals("length", ec.get("finish_reason").asText(), tools + ": " + ec);
            assertEquals(30, e.json().at("/usage/completion_tokens").asInt(), e.body());
        }
    }
}
