package io.ds4j.text.chat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.ds4j.text.chat.ChatMessage.ToolCall;
import io.ds4j.text.chat.ChatOptions.EncodingRevision;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Golden strings for the V4 prompt format. Every expected string was derived by hand from DeepSeek's
 * {@code encoding_dsv4.py} (see package-info) and is written out literally; {@link #officialToolVector()} is the case
 * of DeepSeek's {@code encoding/tests/test_output_1.txt}, whose expected text a third-party test suite quotes.
 */
class ChatEncoderTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    private static final ChatOptions CHAT = ChatOptions.defaults();
    private static final ChatOptions THINKING = ChatOptions.defaults().withThinking(true);

    private static final String MAX_EFFORT_TEXT =
            "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
            + "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
            + "Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

    private static final String BEYOND_MAX_EFFORT_TEXT =
            "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\n"
            + "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its most fundamental components, trace every causal chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
            + "Do not stop reasoning until you have independently verified the solution from multiple angles and are certain that no assumption remains unchecked and no error remains undiscovered.\n\n";

    private static final String TOOLS_HEAD = "## Tools\n\n"
            + "You have access to a set of tools to help answer the user's question. You can invoke tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
            + "<｜DSML｜tool_calls>\n"
            + "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
            + "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
            + "...\n"
            + "</｜DSML｜invoke>\n"
            + "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
            + "...\n"
            + "</｜DSML｜invoke>\n"
            + "</｜DSML｜tool_calls>\n\n"
            + "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
            + "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\n"
            + "Otherwise, output directly after </think> with tool calls or final response.\n\n"
            + "### Available Tool Schemas\n\n";
    private static final String TOOLS_TAIL =
            "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

    private static JsonNode json(String text) {
        try {
            return JSON.readTree(text);
        } catch (Exception e) {
            throw new AssertionError(e);
        }
    }

    private static String encode(ChatOptions options, ChatMessage... messages) {
        return ChatEncoder.encode(List.of(messages), options);
    }

    @Test
    void specialTokensAreTheExpectedCodePoints() {
        assertEquals("<\uFF5Cbegin\u2581of\u2581sentence\uFF5C>", "<｜begin▁of▁sentence｜>");
        assertEquals("<｜begin▁of▁sentence｜>", V4Format.BOS);
        assertEquals("<｜end▁of▁sentence｜>", V4Format.EOS);
        assertEquals("<｜User｜>", V4Format.USER);
        assertEquals("<｜Assistant｜>", V4Format.ASSISTANT);
        assertEquals("<｜DSML｜tool_calls>", V4Format.TOOL_CALLS_OPEN);
        assertEquals("</｜DSML｜parameter>", V4Format.PARAMETER_CLOSE);
    }

    @Test
    void plainSingleTurn() {
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜></think>",
                encode(CHAT, ChatMessage.user("Hello")));
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜><think>",
                encode(THINKING, ChatMessage.user("Hello")));
        assertEquals("<｜begin▁of▁sentence｜>", encode(CHAT));
    }

    @Test
    void withoutGenerationPrompt() {
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hello",
                encode(CHAT.withAddGenerationPrompt(false), ChatMessage.user("Hello")));
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>Hello!<｜end▁of▁sentence｜><｜User｜>Bye",
                encode(CHAT.withAddGenerationPrompt(false), ChatMessage.user("Hi"), ChatMessage.assistant("Hello!"),
                        ChatMessage.user("Bye")));
    }

    @Test
    void aContinuedLastMessageStaysOpen() {
        ChatOptions cont = CHAT.withContinueFinal(true);
        List<ChatMessage> prefix = List.of(ChatMessage.user("Code?"), ChatMessage.assistant("```python\n"));
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Code?<｜Assistant｜></think>```python\n",
                ChatEncoder.encode(prefix, cont));
        // as a finished turn it ends with the end of sentence
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Code?<｜Assistant｜></think>```python\n<｜end▁of▁sentence｜>",
                ChatEncoder.encode(prefix, CHAT));
        assertEquals(false, ChatEncoder.answerStartsInReasoning(prefix, cont.withThinking(true)));

        // thinking mode: content after closed reasoning continues the content
        List<ChatMessage> both = List.of(ChatMessage.user("Q"), ChatMessage.assistant("The answer", "I know it", List.of()));
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜><think>I know it</think>The answer",
                ChatEncoder.encode(both, cont.withThinking(true)));
        // reasoning alone is continued: not closed yet
        List<ChatMessage> reasoning = List.of(ChatMessage.user("Q"), ChatMessage.assistant("", "Let me", List.of()));
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜><think>Let me",
                ChatEncoder.encode(reasoning, cont.withThinking(true)));
        assertEquals(true, ChatEncoder.answerStartsInReasoning(reasoning, cont.withThinking(true)));
        assertEquals(true, ChatEncoder.answerStartsInReasoning(both, THINKING), "not continued: a new answer");
    }

    @Test
    void onlyAnAssistantMessageWithoutCallsIsContinued() {
        ChatOptions cont = CHAT.withContinueFinal(true);
        ChatFormatException user = assertThrows(ChatFormatException.class,
                () -> ChatEncoder.encode(List.of(ChatMessage.user("Hi")), cont));
        assertEquals("messages[0].role: only an assistant message can be continued, got user", user.getMessage());
        ChatFormatException calls = assertThrows(ChatFormatException.class, () -> ChatEncoder.encode(List.of(
                ChatMessage.user("Hi"), ChatMessage.assistant(null, null, List.of(new ToolCall("c1", "f", "{}")))), cont));
        assertEquals("messages[1].tool_calls", calls.field());
    }

    @Test
    void systemPrompt() {
        assertEquals("<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hi<｜Assistant｜></think>",
                encode(CHAT, ChatMessage.system("You are a helpful assistant."), ChatMessage.user("Hi")));
        assertEquals("<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hi<｜Assistant｜><think>",
                encode(THINKING, ChatMessage.system("You are a helpful assistant."), ChatMessage.user("Hi")));
    }

    @Test
    void developerMessage() {
        ChatMessage[] conversation = {ChatMessage.system("S"), ChatMessage.developer("Answer in French."),
                ChatMessage.user("Hi")};
        // a developer turn is a user turn; it is not merged with the user message after it
        assertEquals("<｜begin▁of▁sentence｜>S<｜User｜>Answer in French.<｜User｜>Hi<｜Assistant｜></think>",
                encode(CHAT, conversation));
        // thinking mode with dropping: developer messages before the last user turn are removed
        assertEquals("<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜><think>", encode(THINKING, conversation));
        assertEquals("<｜begin▁of▁sentence｜>S<｜User｜>Answer in French.<｜User｜>Hi<｜Assistant｜><think>",
                encode(THINKING.withDropEarlierReasoning(false), conversation));
        // a developer message that is the last user-like turn stays and gets the generation prompt
        assertEquals("<｜begin▁of▁sentence｜>S<｜User｜>Answer in French.<｜Assistant｜><think>",
                encode(THINKING, ChatMessage.system("S"), ChatMessage.developer("Answer in French.")));

        ChatFormatException e = assertThrows(ChatFormatException.class,
                () -> encode(CHAT, ChatMessage.system("S"), ChatMessage.developer("")));
        assertEquals("messages[1].content", e.field());
    }

    @Test
    void multiTurnChat() {
        assertEquals("<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜></think>Hello! How can I help?<｜end▁of▁sentence｜>"
                        + "<｜User｜>Tell me a joke.<｜Assistant｜></think>",
                encode(CHAT, ChatMessage.system("S"), ChatMessage.user("Hi"),
                        ChatMessage.assistant("Hello! How can I help?", "The user greets me.", List.of()),
                        ChatMessage.user("Tell me a joke.")));
    }

    @Test
    void thinkingDropsEarlierReasoning() {
        ChatMessage[] conversation = {ChatMessage.user("Hi"),
                ChatMessage.assistant("Hello!", "The user greets me.", List.of()), ChatMessage.user("What is 2+2?")};
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>Hello!<｜end▁of▁sentence｜>"
                        + "<｜User｜>What is 2+2?<｜Assistant｜><think>",
                encode(THINKING, conversation));
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>The user greets me.</think>Hello!<｜end▁of▁sentence｜>"
                        + "<｜User｜>What is 2+2?<｜Assistant｜><think>",
                encode(THINKING.withDropEarlierReasoning(false), conversation));
    }

    @Test
    void thinkingKeepsReasoningAfterTheLastUserTurn() {
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think>Greet back.</think>Hello!<｜end▁of▁sentence｜>",
                encode(THINKING, ChatMessage.user("Hi"), ChatMessage.assistant("Hello!", "Greet back.", List.of())));
        // an assistant turn without reasoning still gets the closing tag in thinking mode
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜><think></think>Hello!<｜end▁of▁sentence｜>",
                encode(THINKING, ChatMessage.user("Hi"), ChatMessage.assistant("Hello!")));
    }

    @Test
    void reasoningEffort() {
        ChatMessage hello = ChatMessage.user("Hello");
        assertEquals("<｜begin▁of▁sentence｜>" + MAX_EFFORT_TEXT + "<｜User｜>Hello<｜Assistant｜><think>",
                encode(THINKING.withReasoningEffort("max"), hello));
        assertEquals("<｜begin▁of▁sentence｜>Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
                        + "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.\n"
                        + "Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n"
                        + "S<｜User｜>Hello<｜Assistant｜><think>",
                encode(THINKING.withReasoningEffort("max"), ChatMessage.system("S"), hello));
        // "high" is accepted and renders nothing in the V4 release encoding
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜><think>",
                encode(THINKING.withReasoningEffort("high"), hello));
        // chat mode never renders an effort
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜></think>",
                encode(CHAT.withReasoningEffort("max"), hello));

        ChatOptions r0731 = THINKING.withRevision(EncodingRevision.V4_0731);
        assertEquals("<｜begin▁of▁sentence｜>" + MAX_EFFORT_TEXT + "<｜User｜>Hello<｜Assistant｜><think>",
                encode(r0731.withReasoningEffort("high"), hello));
        assertEquals("<｜begin▁of▁sentence｜>" + BEYOND_MAX_EFFORT_TEXT + "<｜User｜>Hello<｜Assistant｜><think>",
                encode(r0731.withReasoningEffort("max"), hello));
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜><think>",
                encode(r0731.withReasoningEffort("low"), hello));

        assertEquals("reasoning_effort",
                assertThrows(ChatFormatException.class, () -> THINKING.withReasoningEffort("low")).field());
        assertThrows(ChatFormatException.class, () -> r0731.withReasoningEffort("medium"));
    }

    @Test
    void effortPreamblesMatchThePublishedHashes() throws Exception {
        // SHA-256 of the 0731 checkpoint's REASONING_EFFORT_PROMPTS["high"] and ["max"] (UTF-8)
        assertEquals("f7a24f3b3050d4a83781e9b755b316aae2ec1d9dc87562541d90bcb04d7350f7",
                sha256(V4Format.EFFORT_ABSOLUTE_MAXIMUM));
        assertEquals("53fb31b8392ec5b4a926481943efc67636748f137c1a49d493a7af4d4fa55d2c",
                sha256(V4Format.EFFORT_BEYOND_MAXIMUM));
        assertEquals(MAX_EFFORT_TEXT, V4Format.EFFORT_ABSOLUTE_MAXIMUM);
        assertEquals(BEYOND_MAX_EFFORT_TEXT, V4Format.EFFORT_BEYOND_MAXIMUM);
    }

    private static String sha256(String s) throws Exception {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8)));
    }

    /** DeepSeek's own vector: thinking mode, tools on the system message, a tool call and its result. */
    @Test
    void officialToolVector() {
        JsonNode tools = json("""
                [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather for a specific location",
                  "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "The city name"},
                  "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Temperature unit"}}, "required": ["location"]}}},
                 {"type": "function", "function": {"name": "search", "description": "Search the web for information",
                  "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "Search query"},
                  "num_results": {"type": "integer", "description": "Number of results to return"}}, "required": ["query"]}}}]
                """);
        List<ChatMessage> messages = List.of(
                ChatMessage.system("You are a helpful assistant."),
                ChatMessage.user("What's the weather in Beijing?"),
                ChatMessage.assistant("", "The user wants to know the weather in Beijing. I should use the get_weather tool.",
                        List.of(new ToolCall("call_1", "get_weather", "{\"location\": \"Beijing\", \"unit\": \"celsius\"}"))),
                ChatMessage.tool("call_1", "{\"temperature\": 22, \"condition\": \"sunny\", \"humidity\": 45}"),
                ChatMessage.assistant("The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity.",
                        "Got the weather data. Let me format a nice response.", List.of()));
        String expected = "<｜begin▁of▁sentence｜>You are a helpful assistant.\n\n## Tools\n\n"
                + "You have access to a set of tools to help answer the user's question. "
                + "You can invoke tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
                + "<｜DSML｜tool_calls>\n"
                + "<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
                + "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
                + "...\n"
                + "</｜DSML｜invoke>\n"
                + "<｜DSML｜invoke name=\"$TOOL_NAME2\">\n"
                + "...\n"
                + "</｜DSML｜invoke>\n"
                + "</｜DSML｜tool_calls>\n\n"
                + "String parameters should be specified as is and set `string=\"true\"`. "
                + "For all other types (numbers, booleans, arrays, objects), "
                + "pass the value in JSON format and set `string=\"false\"`.\n\n"
                + "If thinking_mode is enabled (triggered by <think>), "
                + "you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response."
                + "\n\nOtherwise, output directly after </think> with tool calls or final response.\n\n"
                + "### Available Tool Schemas\n\n"
                + "{\"name\": \"get_weather\", \"description\": \"Get the weather for a specific location\", "
                + "\"parameters\": {\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\", "
                + "\"description\": \"The city name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"], "
                + "\"description\": \"Temperature unit\"}}, \"required\": [\"location\"]}}\n"
                + "{\"name\": \"search\", \"description\": \"Search the web for information\", "
                + "\"parameters\": {\"type\": \"object\", \"properties\": {\"query\": {\"type\": \"string\", "
                + "\"description\": \"Search query\"}, \"num_results\": {\"type\": \"integer\", "
                + "\"description\": \"Number of results to return\"}}, \"required\": [\"query\"]}}\n\n"
                + "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n"
                + "<｜User｜>What's the weather in Beijing?<｜Assistant｜>"
                + "<think>The user wants to know the weather in Beijing. I should use the get_weather tool.</think>\n\n"
                + "<｜DSML｜tool_calls>\n"
                + "<｜DSML｜invoke name=\"get_weather\">\n"
                + "<｜DSML｜parameter name=\"location\" string=\"true\">Beijing</｜DSML｜parameter>\n"
                + "<｜DSML｜parameter name=\"unit\" string=\"true\">celsius</｜DSML｜parameter>\n"
                + "</｜DSML｜invoke>\n"
                + "</｜DSML｜tool_calls>"
                + "<｜end▁of▁sentence｜>"
                + "<｜User｜><tool_result>{\"temperature\": 22, \"condition\": \"sunny\", \"humidity\": 45}</tool_result>"
                + "<｜Assistant｜>"
                + "<think>Got the weather data. Let me format a nice response.</think>"
                + "The weather in Beijing is currently sunny with a temperature of 22°C and 45% humidity."
                + "<｜end▁of▁sentence｜>";
        assertEquals(expected, ChatEncoder.encode(messages, THINKING.withTools(tools)));
    }

    @Test
    void toolsWithoutSystemMessage() {
        JsonNode tools = json("""
                [{"type": "function", "function": {"name": "now", "description": "Current time",
                  "parameters": {"type": "object", "properties": {}}}}]""");
        assertEquals("<｜begin▁of▁sentence｜>\n\n" + TOOLS_HEAD
                        + "{\"name\": \"now\", \"description\": \"Current time\", \"parameters\": {\"type\": \"object\", \"properties\": {}}}"
                        + TOOLS_TAIL + "<｜User｜>What time is it?<｜Assistant｜></think>",
                encode(CHAT.withTools(tools), ChatMessage.user("What time is it?")));
        // an empty tools array counts as none
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>",
                encode(CHAT.withTools(json("[]")), ChatMessage.user("Hi")));
    }

    @Test
    void toolsKeepEarlierReasoningInThinkingMode() {
        JsonNode tools = json("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
        assertEquals("<｜begin▁of▁sentence｜>\n\n" + TOOLS_HEAD + "{\"name\": \"f\"}" + TOOLS_TAIL
                        + "<｜User｜>Hi<｜Assistant｜><think>The user greets me.</think>Hello!<｜end▁of▁sentence｜>"
                        + "<｜User｜>What is 2+2?<｜Assistant｜><think>",
                encode(THINKING.withTools(tools), ChatMessage.user("Hi"),
                        ChatMessage.assistant("Hello!", "The user greets me.", List.of()), ChatMessage.user("What is 2+2?")));
    }

    @Test
    void dsmlToolCallsInHistory() {
        String args = "{\"city\": \"Paris\", \"days\": 3, \"budget\": 1250.5, \"flexible\": true, "
                + "\"stops\": [\"Lyon\", \"Nice\"], \"prefs\": {\"hotel\": \"4★\", \"late\": null}, "
                + "\"note\": \"say \\\"hi\\\"\\nbye\"}";
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Plan a trip<｜Assistant｜></think>Let me check.\n\n"
                        + "<｜DSML｜tool_calls>\n"
                        + "<｜DSML｜invoke name=\"plan\">\n"
                        + "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
                        + "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
                        + "<｜DSML｜parameter name=\"budget\" string=\"false\">1250.5</｜DSML｜parameter>\n"
                        + "<｜DSML｜parameter name=\"flexible\" string=\"false\">true</｜DSML｜parameter>\n"
                        + "<｜DSML｜parameter name=\"stops\" string=\"false\">[\"Lyon\", \"Nice\"]</｜DSML｜parameter>\n"
                        + "<｜DSML｜parameter name=\"prefs\" string=\"false\">{\"hotel\": \"4★\", \"late\": null}</｜DSML｜parameter>\n"
                        + "<｜DSML｜parameter name=\"note\" string=\"true\">say \"hi\"\nbye</｜DSML｜parameter>\n"
                        + "</｜DSML｜invoke>\n"
                        + "</｜DSML｜tool_calls><｜end▁of▁sentence｜>",
                encode(CHAT, ChatMessage.user("Plan a trip"),
                        ChatMessage.assistant("Let me check.", null, List.of(new ToolCall("c1", "plan", args)))));
    }

    @Test
    void severalCallsEmptyAndNonJsonArguments() {
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Go<｜Assistant｜></think>\n\n"
                        + "<｜DSML｜tool_calls>\n"
                        + "<｜DSML｜invoke name=\"now\">\n"
                        + "\n"
                        + "</｜DSML｜invoke>\n"
                        + "<｜DSML｜invoke name=\"echo\">\n"
                        + "<｜DSML｜parameter name=\"arguments\" string=\"true\">not json</｜DSML｜parameter>\n"
                        + "</｜DSML｜invoke>\n"
                        + "</｜DSML｜tool_calls><｜end▁of▁sentence｜>",
                encode(CHAT, ChatMessage.user("Go"), ChatMessage.assistant(null, null,
                        List.of(new ToolCall("a", "now", "{}"), new ToolCall("b", "echo", "not json")))));
    }

    @Test
    void toolResultsAreMergedAndOrderedByCall() {
        ChatMessage[] conversation = {
                ChatMessage.user("Weather in Paris and Rome?"),
                ChatMessage.assistant("", null, List.of(
                        new ToolCall("call_p", "get_weather", "{\"city\": \"Paris\"}"),
                        new ToolCall("call_r", "get_weather", "{\"city\": \"Rome\"}"))),
                ChatMessage.tool("call_r", "Rome: 25°C"),
                ChatMessage.tool("call_p", "Paris: 18°C"),
                ChatMessage.user("Which is warmer?")};
        String history = "<｜begin▁of▁sentence｜><｜User｜>Weather in Paris and Rome?<｜Assistant｜></think>\n\n"
                + "<｜DSML｜tool_calls>\n"
                + "<｜DSML｜invoke name=\"get_weather\">\n"
                + "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
                + "</｜DSML｜invoke>\n"
                + "<｜DSML｜invoke name=\"get_weather\">\n"
                + "<｜DSML｜parameter name=\"city\" string=\"true\">Rome</｜DSML｜parameter>\n"
                + "</｜DSML｜invoke>\n"
                + "</｜DSML｜tool_calls><｜end▁of▁sentence｜>"
                + "<｜User｜><tool_result>Paris: 18°C</tool_result>\n\n<tool_result>Rome: 25°C</tool_result>\n\nWhich is warmer?";
        assertEquals(history + "<｜Assistant｜></think>", encode(CHAT, conversation));
        // thinking mode without tools: the tool results form the last user turn
        assertEquals(history + "<｜Assistant｜><think>", encode(THINKING, conversation));
    }

    @Test
    void toolResultThenAssistant() {
        assertEquals("<｜begin▁of▁sentence｜><｜User｜>Time?<｜Assistant｜></think>\n\n"
                        + "<｜DSML｜tool_calls>\n"
                        + "<｜DSML｜invoke name=\"now\">\n"
                        + "\n"
                        + "</｜DSML｜invoke>\n"
                        + "</｜DSML｜tool_calls><｜end▁of▁sentence｜>"
                        + "<｜User｜><tool_result>12:00</tool_result><｜Assistant｜></think>",
                encode(CHAT, ChatMessage.user("Time?"),
                        ChatMessage.assistant(null, null, List.of(new ToolCall("t", "now", "{}"))),
                        ChatMessage.tool("t", "12:00")));
    }

    @Test
    void responseFormat() {
        assertEquals("<｜begin▁of▁sentence｜>S\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
                        + "{\"type\": \"json_object\"}<｜User｜>List two colors.<｜Assistant｜></think>",
                encode(CHAT.withResponseFormat(json("{\"type\":\"json_object\"}")),
                        ChatMessage.system("S"), ChatMessage.user("List two colors.")));

        JsonNode schema = json("""
                {"type":"json_schema","json_schema":{"name":"colors","schema":{"type":"object",
                 "properties":{"colors":{"type":"array","items":{"type":"string"}}},"required":["colors"]},"strict":true}}""");
        assertEquals("<｜begin▁of▁sentence｜>\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
                        + "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"colors\", \"schema\": {\"type\": \"object\", "
                        + "\"properties\": {\"colors\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}}}, "
                        + "\"required\": [\"colors\"]}, \"strict\": true}}"
                        + "<｜User｜>List two colors.<｜Assistant｜></think>",
                encode(CHAT.withResponseFormat(schema), ChatMessage.user("List two colors.")));

        JsonNode tools = json("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]");
        assertEquals("<｜begin▁of▁sentence｜>S\n\n" + TOOLS_HEAD + "{\"name\": \"f\"}" + TOOLS_TAIL
                        + "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
                        + "{\"type\": \"json_object\"}<｜User｜>Q<｜Assistant｜></think>",
                encode(CHAT.withTools(tools).withResponseFormat(json("{\"type\":\"json_object\"}")),
                        ChatMessage.system("S"), ChatMessage.user("Q")));

        assertEquals("<｜begin▁of▁sentence｜>S<｜User｜>Q<｜Assistant｜></think>",
                encode(CHAT.withResponseFormat(json("{\"type\":\"text\"}")), ChatMessage.system("S"), ChatMessage.user("Q")));
        assertThrows(ChatFormatException.class, () -> CHAT.withResponseFormat(json("{\"type\":\"xml\"}")));
    }

    @Test
    void openAiRequestEndToEnd() {
        JsonNode messages = json("""
                [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                 {"role": "user", "content": [{"type": "text", "text": "Part one."}, {"type": "text", "text": "Part two."}]},
                 {"role": "assistant", "content": null, "tool_calls": [{"id": "x1", "type": "function",
                   "function": {"name": "lookup", "arguments": "{\\"q\\": \\"cats\\", \\"n\\": 2}"}}]},
                 {"role": "tool", "tool_call_id": "x1", "content": "[\\"a\\", \\"b\\"]"}]""");
        assertEquals("<｜begin▁of▁sentence｜>Be brief.<｜User｜>Part one.\n\nPart two.<｜Assistant｜></think>\n\n"
                        + "<｜DSML｜tool_calls>\n"
                        + "<｜DSML｜invoke name=\"lookup\">\n"
                        + "<｜DSML｜parameter name=\"q\" string=\"true\">cats</｜DSML｜parameter>\n"
                        + "<｜DSML｜parameter name=\"n\" string=\"false\">2</｜DSML｜parameter>\n"
                        + "</｜DSML｜invoke>\n"
                        + "</｜DSML｜tool_calls><｜end▁of▁sentence｜>"
                        + "<｜User｜><tool_result>[\"a\", \"b\"]</tool_result><｜Assistant｜></think>",
                ChatEncoder.encode(ChatMessage.listFromOpenAi(messages), CHAT));
    }
}
