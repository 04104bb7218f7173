package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The Messages-to-chat translation without a server: the chat body a Messages body becomes, the names chat's errors
 * get back, and Anthropic's error types by status.
 */
class AnthropicApiTest {
    /** A body as the server reads it (objects that record the fields asked for). */
    static JsonNode read(String json) {
        try {
            return Json.read(json.getBytes(StandardCharsets.UTF_8));
        } catch (Json.Unreadable e) {
            throw new AssertionError(e);
        }
    }

    static final String BODY = "{\"max_tokens\":10,\"system\":\"S\",\"stop_sequences\":[\"x\"],\"tool_choice\":{\"type\":\"any\","
            + "\"disable_parallel_tool_use\":true},\"tools\":[{\"name\":\"a\",\"input_schema\":{\"type\":\"object\"}},"
            + "{\"name\":\"b\",\"description\":\"B\",\"input_schema\":{\"type\":\"object\"}}],\"messages\":["
            + "{\"role\":\"user\",\"content\":\"q\"},"
            + "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"t\"},{\"type\":\"tool_use\",\"id\":\"u1\",\"name\":\"a\",\"input\":{}},"
            + "{\"type\":\"tool_use\",\"id\":\"u2\",\"name\":\"b\",\"input\":{\"k\":1}}]},"
            + "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"u1\",\"content\":\"r1\"},"
            + "{\"type\":\"tool_result\",\"tool_use_id\":\"u2\",\"is_error\":true},{\"type\":\"text\",\"text\":\"more\"}]}]}";

    @Test
    void aMessagesBodyBecomesTheChatBodyItMeans() {
        AnthropicApi.Translation t = AnthropicApi.translate(read(BODY), true);
        JsonNode c = t.chat();
        assertEquals(read("[\"x\"]"), c.get("stop"));
        assertEquals("required", c.get("tool_choice").asText());
        assertFalse(c.get("parallel_tool_calls").asBoolean());
        assertEquals(read("{\"type\":\"function\",\"function\":{\"name\":\"b\",\"description\":\"B\",\"parameters\":{\"type\":\"object\"}}}"),
                c.get("tools").get(1));
        JsonNode m = c.get("messages");
        assertEquals(6, m.size(), m.toString());
        assertEquals(read("{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"S\"}]}"), m.get(0));
        assertEquals("u2", m.at("/2/tool_calls/1/id").asText());
        assertEquals(read("{\"k\":1}"), m.at("/2/tool_calls/1/function/arguments"));
        assertEquals(read("{\"role\":\"tool\",\"tool_call_id\":\"u1\",\"content\":\"r1\"}"), m.get(3));
        assertEquals("Error: ", m.at("/4/content").asText());
        assertEquals("more", m.at("/5/content/0/text").asText());
        assertEquals(java.util.List.of("system", "messages[0]", "messages[1]", "messages[2].content[0]", "messages[2].content[1]", "messages[2]"),
                t.origins());
    }

    @Test
    void chatsErrorsNameTheMessagesFields() {
        AnthropicApi.Translation t = AnthropicApi.translate(read(BODY), true);
        String[][] cases = {
                {"tools[1].function.parameters.properties.x", "tools[1].input_schema.properties.x"},
                {"tools[0].function.name", "tools[0].name"},
                {"tools[0].function", "tools[0]"},
                {"stop[0]", "stop_sequences[0]"},
                {"parallel_tool_calls", "tool_choice.disable_parallel_tool_use"},
                {"tool_choice.function.name", "tool_choice.name"},
                {"messages[2].tool_calls[1].function.arguments", "messages[1].content[2].input"},
                {"messages[4].tool_call_id", "messages[2].content[1].tool_use_id"},
                {"messages[5].content", "messages[2].content"},
                {"max_tokens", "max_tokens"}};
        for (String[] c : cases) {
            ApiException e = t.renamed(ApiException.badField(c[0], "see messages[3] and tools[1].function.parameters"));
            assertEquals(c[1], e.param(), c[0]);
            assertEquals(c[1] + ": see messages[2].content[0] and tools[1].input_schema", e.getMessage(), c[0]);
            assertEquals(400, e.status());
        }
    }

    @Test
    void theClientsOwnStringsAreNeverRenamed() {
        // ids, a schema's property name and a stop string that read as chat paths
        String body = BODY.replace("\"u2\"", "\"tools[0].function.parameters\"").replace("\"stop_sequences\":[\"x\"]",
                "\"stop_sequences\":[\"messages[0]\\\"\"]").replace("{\"name\":\"a\",\"input_schema\":{\"type\":\"object\"}}",
                "{\"name\":\"a\",\"input_schema\":{\"type\":\"object\",\"properties\":{\"messages[1]\":{}}}}");
        AnthropicApi.Translation t = AnthropicApi.translate(read(body), true);
        ApiException e = t.renamed(ApiException.badField("messages[4].tool_call_id",
                "'tools[0].function.parameters' is not the id of a tool call of messages[2]"));
        assertEquals("messages[2].content[1].tool_use_id", e.param());
        assertEquals("messages[2].content[1].tool_use_id: 'tools[0].function.parameters' is not the id of a tool_use block of messages[1]",
                e.getMessage());
        e = t.renamed(ApiException.badField("tools[0].function.parameters.properties.messages[1]", "is wrong"));
        assertEquals("tools[0].input_schema.properties.messages[1]", e.param());
        assertEquals("tools[0].input_schema.properties.messages[1]: is wrong", e.getMessage());
        e = t.renamed(ApiException.badField("stop[0]", "\"messages[0]\\\"\" is too long (messages[2])"));
        assertEquals("stop_sequences[0]: \"messages[0]\\\"\" is too long (messages[1])", e.getMessage());
    }

    @Test
    void errorTypesFollowTheStatus() {
        int[] statuses = {400, 401, 403, 404, 405, 408, 413, 415, 429, 500, 503};
        String[] types = {"invalid_request_error", "authentication_error", "permission_error", "not_found_error",
                "invalid_request_error", "invalid_request_error", "request_too_large", "invalid_request_error",
                "rate_limit_error", "api_error", "overloaded_error"};
        for (int i = 0; i < statuses.length; i++) {
            ApiException e = new ApiException(statuses[i], "x", "code", "p", "m", null);
            assertEquals(read("{\"type\":\"error\",\"error\":{\"type\":\"" + types[i] + "\",\"message\":\"m\"}}"),
                    AnthropicApi.errorBody(e), "status " + statuses[i]);
        }
    }
}
