package io.ds4j.server;

import io.ds4j.json.Json;
import io.ds4j.server.config.ServerConfig;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@link Requests#parse} alone, without a server: what a chat body is read as, and the 400 each mistake gets (its
 * param and message). Bodies go through {@link Json#read}, as the server reads them, so numbers keep their text.
 */
class RequestsTest {
    static final ModelInfo MODEL = new ModelInfo("scripted", "/scripted", false, "cpu", TestServer.tokenizer(),
            TestServer.tokenizer().vocabSize(), 4096, 1, 1, 1, null, null);

    static Requests.Gen parse(String body) throws Exception {
        return Requests.parse(Json.read(body.getBytes(StandardCharsets.UTF_8)), true, MODEL, ServerConfig.defaults());
    }

    /** The message of the 400 a body gets, its param checked. */
    static String refused(String param, String body) {
        ApiException e = assertThrows(ApiException.class, () -> parse(body), body);
        assertEquals(400, e.status(), body);
        assertEquals(param, e.body().at("/error/param").asText(null), e.getMessage());
        assertEquals("invalid_request_error", e.body().at("/error/type").asText(), e.getMessage());
        return e.getMessage();
    }

    static String chat(String extra) {
        return TestServer.chat("Hi", extra);
    }

    /**
     * reasoning_effort, as README's API section maps it: every OpenAI value (and xhigh, max) to one of DeepSeek-V4's
     * three modes — none to no thinking, minimal to high to Think High (thinking, no preamble), xhigh and max to Think
     * Max — in any case and with spaces around; anything else is a 400 naming the accepted values, and an explicit
     * thinking switch wins over the effort.
     */
    @Test
    void reasoningEffortMapsEveryOpenAiValueAndRefusesOthers() throws Exception {
        String[][] cases = {{"none", "false", null}, {"minimal", "true", "high"}, {"low", "true", "high"},
                {"medium", "true", "high"}, {"high", "true", "high"}, {"xhigh", "true", "max"}, {"x-high", "true", "max"},
                {"max", "true", "max"}, {" Low ", "true", "high"}};
        for (String[] c : cases) {
            for (String field : new String[]{"\"reasoning_effort\":", "\"chat_template_kwargs\":{\"reasoning_effort\":"}) {
                String body = chat(field + Json.MAPPER.writeValueAsString(c[0]) + (field.contains("{") ? "}" : ""));
                var o = parse(body).options();
                assertEquals(Boolean.parseBoolean(c[1]), o.thinking(), body);
                assertEquals(c[2], o.reasoningEffort(), body);
            }
        }
        // an explicit switch wins: thinking off with an effort, thinking on with none
        var off = parse(chat("\"reasoning_effort\":\"high\",\"chat_template_kwargs\":{\"thinking\":false}")).options();
        assertFalse(off.thinking());
        assertTrue(parse(chat("\"reasoning_effort\":\"none\",\"thinking\":{\"type\":\"enabled\"}")).options().thinking());
        for (String bad : new String[]{"extreme", "", "auto", "minimum", "highest"})
            assertEquals("reasoning_effort: unsupported value '" + bad + "' (use none, minimal, low, medium, high, xhigh or max)",
                    refused("reasoning_effort", chat("\"reasoning_effort\":" + Json.MAPPER.writeValueAsString(bad))));
        assertTrue(refused("chat_template_kwargs.reasoning_effort", chat("\"chat_template_kwargs\":{\"reasoning_effort\":\"big\"}"))
                .contains("(use none, minimal, low, medium, high, xhigh or max)"));
        assertTrue(refused("reasoning_effort", chat("\"reasoning_effort\":3")).startsWith("reasoning_effort: "));
    }

    @Test
    void aFloatFieldPastItsBoundAsWrittenIsRefusedThoughItsDoubleIsTheBound() throws Exception {
        // each of these is the bound as a double (a float for a bias), and past it as written
        assertEquals("temperature: must be in [0, 2], got 2.0000000000000000001",
                refused("temperature", chat("\"temperature\":2.0000000000000000001")));
        assertEquals("temperature: must be in [0, 2], got -1e-400", refused("temperature", chat("\"temperature\":-1e-400")));
        assertEquals("top_p: must be in (0, 1], got 1.00000000000000001", refused("top_p", chat("\"top_p\":1.00000000000000001")));
        assertEquals("min_p: must be in [0, 1], got -0.1e-330", refused("min_p", chat("\"min_p\":-0.1e-330")));
        assertEquals("presence_penalty: must be in [-2, 2], got 2.00000000000000001",
                refused("presence_penalty", chat("\"presence_penalty\":2.00000000000000001")));
        assertEquals("frequency_penalty: must be in [-2, 2], got -200000000000000001e-17",
                refused("frequency_penalty", chat("\"frequency_penalty\":-200000000000000001e-17")));
        assertEquals("repetition_penalty: must be in (0, 10], got 10.0000000000000001",
                refused("repetition_penalty", chat("\"repetition_penalty\":10.0000000000000001")));
        assertEquals("logit_bias: bias 100.000001 for token 5 is outside [-100, 100]",
                refused("logit_bias", chat("\"logit_bias\":{\"5\":100.000001}")));
        assertEquals("logit_bias: bias -100.000001 for token 5 is outside [-100, 100]",
                refused("logit_bias", chat("\"logit_bias\":{\"5\":-100.000001}")));
        // an exponent past what a decimal can hold is still on the side it is written
        assertEquals("temperature: must be in [0, 2], got -1e-99999999999",
                refused("temperature", chat("\"temperature\":-1e-99999999999")));
        // the bounds themselves, however written, and what is below them by less than a double tells, are in range
        var g = parse(chat("\"temperature\":2.000000000000000000000,\"top_p\":1e0,\"min_p\":0.99999999999999999999,"
                + "\"presence_penalty\":-2.00,\"frequency_penalty\":200e-2,\"repetition_penalty\":10.0,"
                + "\"logit_bias\":{\"5\":100.0000,\"6\":-99.9999999999}"));
        assertEquals(2, g.params().temperature());
        assertEquals(1, g.params().minP());
        assertEquals(100f, g.params().logitBias().get(5));
        assertEquals(-100f, g.params().logitBias().get(6));
        // as before: 0 in double precision is said so where 0 is out of range, and is 0 where it is in range
        assertEquals("top_p: must be in (0, 1], got 1e-400 (0 in double precision)", refused("top_p", chat("\"top_p\":1e-400")));
        assertEquals(0, parse(chat("\"temperature\":1e-400,\"min_p\":1e-99999999999")).params().temperature());
    }

    @Test
    void aSeedIsTheIntegerAsWrittenNotItsDouble() throws Exception {
        // 2^63 - 1 written with a fraction or an exponent: in range (its double is 2^63, which is not)
        assertEquals(Long.MAX_VALUE, parse(chat("\"seed\":9223372036854775807.0")).params().seed());
        assertEquals(Long.MAX_VALUE, parse(chat("\"seed\":9.223372036854775807e18")).params().seed());
        assertEquals(Long.MIN_VALUE, parse(chat("\"seed\":-9223372036854775808.0")).params().seed());
        assertEquals(Long.MAX_VALUE - 1, parse(chat("\"seed\":92233720368547758.06e2")).params().seed());
        assertEquals(7, parse(chat("\"seed\":7.0")).params().seed());
        assertEquals(0, parse(chat("\"seed\":0e99999999999")).params().seed());
        // -2^63 - 1: its double is -2^63, in range; the number is not, and is refused rather than rounded
        String range = "seed: is out of range: give an integer in [-2^63, 2^63), got ";
        assertEquals(range + "-9223372036854775809.0", refused("seed", chat("\"seed\":-9223372036854775809.0")));
        assertEquals(range + "9223372036854775808.0", refused("seed", chat("\"seed\":9223372036854775808.0")));
        assertEquals(range + "9223372036854775808", refused("seed", chat("\"seed\":9223372036854775808")));
        assertEquals(range + "-9223372036854775809", refused("seed", chat("\"seed\":-9223372036854775809")));
        // past the double range: out of range as for every integer field, not "not an integer"
        assertEquals(range + "1e400", refused("seed", chat("\"seed\":1e400")));
        assertEquals(range + "-1E99999999999", refused("seed", chat("\"seed\":-1E99999999999")));
        assertEquals("seed: must be an integer, got 1.5", refused("seed", chat("\"seed\":1.5")));
        assertEquals("seed: must be an integer, got 9223372036854775806.5", refused("seed", chat("\"seed\":9223372036854775806.5")));
        assertEquals("seed: must be an integer, got 1e-400", refused("seed", chat("\"seed\":1e-400")));
    }

    @Test
    void aLogitBiasKeyIsShownAsWrittenAndIsAsciiDigits() throws Exception {
        int limit = TestServer.tokenizer().vocabSize();
        assertEquals("logit_bias: key '+" + limit + "' is outside the token ids [0, " + limit + ")",
                refused("logit_bias", chat("\"logit_bias\":{\"+" + limit + "\":1}")));
        assertEquals("logit_bias: key '-5' is outside the token ids [0, " + limit + ")",
                refused("logit_bias", chat("\"logit_bias\":{\"-5\":1}")));
        assertEquals("logit_bias: key ' 0099999999999' is outside the token ids [0, " + limit + ")",
                refused("logit_bias", chat("\"logit_bias\":{\" 0099999999999\":1}")));
        String notAnId = "' is not a token id (ASCII digits 0-9, optionally signed, optionally with spaces or tabs around them)";
        // digits of other scripts are digits to Java's Integer.parseInt, not in a token id; the message names the first
        // character that is not printable ASCII
        for (String key : new String[]{"\u0665", "\u0661\u0662", "\uff15", "5\u0665", "\u096b"})
            assertEquals("logit_bias: key '" + key + notAnId + String.format("; it holds U+%04X", key.codePoints()
                    .filter(c -> c > 0x7E).findFirst().orElseThrow()), refused("logit_bias", chat("\"logit_bias\":{\"" + key + "\":1}")), key);
        for (String key : new String[]{"", " ", "+", "-", "5.0", "1e3", "0x5", "5 5", "++5"})
            assertEquals("logit_bias: key '" + key + notAnId, refused("logit_bias", chat("\"logit_bias\":{\"" + key + "\":1}")), key);
        // control characters and other blanks around the digits are not spaces (String.trim would have dropped the
        // control characters), and the message names the one that looks like a space
        for (String[] k : new String[][]{{"\\u00005", "\u00005", "U+0000"}, {"5\\u001f", "5\u001f", "U+001F"}, {"\\n5", "\n5", "U+000A"},
                {"\\u00a05", "\u00a05", "U+00A0"}, {"5\\u2002", "5\u2002", "U+2002"}})
            assertEquals("logit_bias: key '" + k[1] + notAnId + "; it holds " + k[2],
                    refused("logit_bias", chat("\"logit_bias\":{\"" + k[0] + "\":1}")), k[0]);
        // as before: other forms of a token id name it, and the last id is one
        var bias = parse(chat("\"logit_bias\":{\"05\":1,\"+6\":2,\" 7 \":3,\"-0\":4,\"" + (limit - 1) + "\":5}")).params().logitBias();
        assertEquals(java.util.Map.of(5, 1f, 6, 2f, 7, 3f, 0, 4f, limit - 1, 5f), bias);
    }

    static final String CALL = "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
            + "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}},{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"g\"}}]}";

    static String messages(String... m) {
        return "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}," + String.join(",", m) + "]}";
    }

    static String tool(String id) {
        return "{\"role\":\"tool\",\"tool_call_id\":\"" + id + "\",\"content\":\"ok\"}";
    }

    @Test
    void anAssistantMessageNeedsContentOrToolCalls() throws Exception {
        String needs = "messages[1].content: is required in an assistant message without tool_calls (or refusal)";
        assertEquals(needs, refused("messages[1].content", messages("{\"role\":\"assistant\"}")));
        assertEquals(needs, refused("messages[1].content", messages("{\"role\":\"assistant\",\"content\":null}")));
        assertEquals(needs, refused("messages[1].content", messages("{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}")));
        assertEquals(needs, refused("messages[1].content", messages("{\"role\":\"assistant\",\"reasoning_content\":\"r\"}")));
        // a refused turn as OpenAI's API returns it (content null, the words in refusal) is what the assistant said
        var refused = parse(messages("{\"role\":\"assistant\",\"content\":null,\"refusal\":\"I can't help with that.\"}",
                "{\"role\":\"user\",\"content\":\"ok\"}")).messages();
        assertEquals("I can't help with that.", refused.get(1).content());
        // either is enough; empty text is content
        assertEquals(3, parse(messages("{\"role\":\"assistant\",\"content\":\"\"}", "{\"role\":\"user\",\"content\":\"x\"}")).messages().size());
        assertEquals(4, parse(messages(CALL, tool("c1"), tool("c2"))).messages().size());
    }

    @Test
    void aToolMessageAnswersACallOfTheAssistantMessageBeforeIt() throws Exception {
        // answered, in any order, each tool message after the call or after another answer
        assertEquals(4, parse(messages(CALL, tool("c2"), tool("c1"))).messages().size());
        // an id that no call of that message has
        assertEquals("messages[2].tool_call_id: 'c3' is not the id of a tool call of messages[1] (its tool calls: 'c1', 'c2')",
                refused("messages[2].tool_call_id", messages(CALL, tool("c3"))));
        assertEquals("messages[3].tool_call_id: 'C1' is not the id of a tool call of messages[1] (its tool calls: 'c1', 'c2')",
                refused("messages[3].tool_call_id", messages(CALL, tool("c1"), tool("C1"))));
        // no call before it at all, or another message in between (after every call was answered): it answers nothing
        String none = " answers no tool call: a tool message follows the assistant message with the tool_calls it answers"
                + " (or another tool message after it)";
        assertEquals("messages[1].tool_call_id: 'c1'" + none, refused("messages[1].tool_call_id", messages(tool("c1"))));
        assertEquals("messages[5].tool_call_id: 'c1'" + none, refused("messages[5].tool_call_id",
                messages(CALL, tool("c1"), tool("c2"), "{\"role\":\"user\",\"content\":\"and?\"}", tool("c1"))));
        assertEquals("messages[5].tool_call_id: 'c1'" + none, refused("messages[5].tool_call_id",
                messages(CALL, tool("c1"), tool("c2"), "{\"role\":\"assistant\",\"content\":\"done\"}", tool("c1"))));
        // a later turn answers the later calls
        assertEquals(9, parse(messages(CALL, tool("c1"), tool("c2"), "{\"role\":\"assistant\",\"content\":\"ok\"}",
                "{\"role\":\"user\",\"content\":\"again\"}", CALL.replace("c1", "c9"), tool("c9"), tool("c2"))).messages().size());
    }

    @Test
    void everyToolCallIsAnsweredOnceBeforeAnyOtherMessage() throws Exception {
        String user = "{\"role\":\"user\",\"content\":\"and?\"}";
        String rule = ": an assistant message with tool_calls must be followed by a tool message answering each of its"
                + " call ids before any other message";
        // every call answered, in any order, then the conversation goes on
        assertEquals(5, parse(messages(CALL, tool("c2"), tool("c1"), user)).messages().size());
        // a call left without its answer before the next message that is not a tool message
        assertEquals("messages[1].tool_calls: no tool message answers the call 'c2' before messages[3] (a user message)" + rule,
                refused("messages[1].tool_calls", messages(CALL, tool("c1"), user)));
        assertEquals("messages[1].tool_calls: no tool message answers the calls 'c1', 'c2' before messages[2] (an assistant"
                + " message)" + rule, refused("messages[1].tool_calls", messages(CALL, "{\"role\":\"assistant\",\"content\":\"done\"}")));
        // or before the conversation ends: a history whose last calls have no results
        assertEquals("messages[1].tool_calls: no tool message answers the calls 'c1', 'c2' before the messages end" + rule,
                refused("messages[1].tool_calls", messages(CALL)));
        assertEquals("messages[1].tool_calls: no tool message answers the call 'c1' before the messages end" + rule,
                refused("messages[1].tool_calls", messages(CALL, tool("c2"))));
        // many unanswered calls: the first few are named
        StringBuilder many = new StringBuilder("{\"role\":\"assistant\",\"tool_calls\":[");
        for (int i = 0; i < 20; i++)
            many.append(i == 0 ? "" : ",").append("{\"id\":\"k").append(i).append("\",\"function\":{\"name\":\"f\"}}");
        assertEquals("messages[1].tool_calls: no tool message answers the calls 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8',"
                + " and 11 more before the messages end" + rule, refused("messages[1].tool_calls", messages(many + "]}", tool("k0"))));
        // and a wrong id among many calls names the first few of them, not all
        assertEquals("messages[2].tool_call_id: 'nope' is not the id of a tool call of messages[1] (its tool calls: 'k0', 'k1',"
                + " 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', and 12 more)", refused("messages[2].tool_call_id", messages(many + "]}", tool("nope"))));
        // thousands of calls each answered in turn: one look-up per answer, not a scan of the calls (an event loop parses this)
        StringBuilder lots = new StringBuilder("{\"role\":\"assistant\",\"tool_calls\":[");
        List<String> answers = new ArrayList<>();
        for (int i = 0; i < 20_000; i++) {
            lots.append(i == 0 ? "" : ",").append("{\"id\":\"L").append(i).append("\",\"function\":{\"name\":\"f\"}}");
            answers.add(tool("L" + i));
        }
        answers.add(0, lots + "]}");
        assertEquals(20_002, parse(messages(answers.toArray(String[]::new))).messages().size());
        // one call answered twice
        assertEquals("messages[3].tool_call_id: 'c1' was already answered by messages[2]: each tool call of messages[1] is"
                + " answered by one tool message", refused("messages[3].tool_call_id", messages(CALL, tool("c1"), tool("c1"), tool("c2"))));
        // a call without an id (or an empty one), which no tool message could name, and two calls with one id
        String need = ".id: is required: the tool message that answers the call names it by its id";
        assertEquals("messages[1].tool_calls[0]" + need, refused("messages[1].tool_calls[0].id",
                messages("{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}")));
        assertEquals("messages[1].tool_calls[1]" + need, refused("messages[1].tool_calls[1].id",
                messages(CALL.replace("\"id\":\"c2\"", "\"id\":\"\""), tool("c1"))));
        assertEquals("messages[1].tool_calls[1].id: 'c1' is also the id of messages[1].tool_calls[0]: each tool call has an id"
                + " of its own", refused("messages[1].tool_calls[1].id", messages(CALL.replace("c2", "c1"), tool("c1"))));
    }
}
