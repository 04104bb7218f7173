package io.ds4j.text.chat;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.ds4j.text.chat.ChatMessage.Role;
import java.util.List;
import org.junit.jupiter.api.Test;

class ChatMessageTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    private static JsonNode json(String text) throws Exception {
        return JSON.readTree(text);
    }

    private static String error(String messagesJson) throws Exception {
        return assertThrows(ChatFormatException.class, () -> ChatMessage.listFromOpenAi(json(messagesJson))).getMessage();
    }

    @Test
    void readsAllRoles() throws Exception {
        List<ChatMessage> m = ChatMessage.listFromOpenAi(json("""
                [{"role": "system", "content": "s"},
                 {"role": "developer", "content": "d"},
                 {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "name": "bob"},
                 {"role": "assistant", "content": null, "reasoning_content": "r",
                  "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\\"x\\": 1}"}},
                                 {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {"y": [1, 2.5]}}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                 {"role": "tool", "tool_call_id": "c2", "content": "done"}]"""));
        assertEquals(6, m.size());
        assertEquals(Role.DEVELOPER, m.get(1).role());
        assertEquals("a\n\nb", m.get(2).content());
        assertEquals("bob", m.get(2).name());
        assertNull(m.get(3).content());
        assertEquals("r", m.get(3).reasoningContent());
        assertEquals(new ChatMessage.ToolCall("c1", "f", "{\"x\": 1}"), m.get(3).toolCalls().get(0));
        assertEquals("{\"y\": [1, 2.5]}", m.get(3).toolCalls().get(1).arguments());
        assertEquals("c1", m.get(4).toolCallId());
    }

    @Test
    void errorsNameTheField() throws Exception {
        assertEquals("messages[1].role: unknown role 'foo' (use system, developer, user, assistant, tool)",
                error("[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"foo\", \"content\": \"x\"}]"));
        assertEquals("messages[0].role: missing", error("[{\"content\": \"x\"}]"));
        assertEquals("messages[0].content[1].type: unsupported content part type 'image_url'",
                error("[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"image_url\", \"image_url\": {\"url\": \"u\"}}]}]"));
        // null only where the role may leave it null (an assistant's turn with tool calls or a refusal)
        assertEquals("messages[0].content: must be a string or an array of content parts",
                error("[{\"role\": \"user\", \"content\": 5}]"));
        assertEquals("messages[0].content: must be a string, an array of content parts or null",
                error("[{\"role\": \"assistant\", \"content\": 5}]"));
        // an array of content parts has at least one, whatever the role
        for (String role : new String[]{"system", "developer", "user"})
            assertEquals("messages[0].content: is an empty array: an array of content parts needs at least one part",
                    error("[{\"role\": \"" + role + "\", \"content\": []}]"), role);
        assertEquals("messages[1].content: is an empty array: an array of content parts needs at least one part (an assistant"
                + " message with tool_calls may leave content null)",
                error("[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": [], \"tool_calls\": "
                        + "[{\"id\": \"c1\", \"function\": {\"name\": \"f\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"r\"}]"));
        assertEquals("messages[2].content: is an empty array: an array of content parts needs at least one part",
                error("[{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": "
                        + "[{\"id\": \"c1\", \"function\": {\"name\": \"f\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": []}]"));
        assertEquals("messages[0].tool_calls[0].function.name: must be a non-empty string",
                error("[{\"role\": \"assistant\", \"tool_calls\": [{\"type\": \"function\", \"function\": {\"arguments\": \"{}\"}}]}]"));
        assertEquals("messages[0].tool_calls[0].function.name: must be 1 to 64 letters, digits, underscores or hyphens, got 'a\"b'",
                error("[{\"role\": \"assistant\", \"tool_calls\": [{\"id\": \"c1\", \"function\": {\"name\": \"a\\\"b\"}}]}]"));
        assertEquals("messages[0].tool_calls: only assistant messages carry tool calls",
                error("[{\"role\": \"user\", \"content\": \"x\", \"tool_calls\": [{\"function\": {\"name\": \"f\"}}]}]"));
        assertEquals("messages[0].content: a developer message needs non-empty content",
                error("[{\"role\": \"developer\", \"content\": \"\"}]"));
        assertEquals("messages[0].reasoning_content: must be a string",
                error("[{\"role\": \"assistant\", \"content\": \"x\", \"reasoning_content\": 1}]"));
        assertEquals("messages: must be an array",
                assertThrows(ChatFormatException.class, () -> ChatMessage.listFromOpenAi(json("{}"))).getMessage());
    }

    @Test
    void aPartWithEmptyTextIsEmptyContent() throws Exception {
        List<ChatMessage> m = ChatMessage.listFromOpenAi(json("[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"\"}]}]"));
        assertEquals("", m.get(0).content());
        assertEquals(V4Format.BOS + V4Format.USER + V4Format.ASSISTANT + V4Format.THINK_END,
                ChatEncoder.encode(m, ChatOptions.defaults()));
    }

    @Test
    void optionsValidateTools() throws Exception {
        assertEquals("tools[0].function: missing or not an object", assertThrows(ChatFormatException.class,
                () -> ChatOptions.defaults().withTools(json("[{\"type\": \"function\"}]"))).getMessage());
        assertEquals("tools: must be an array", assertThrows(ChatFormatException.class,
                () -> ChatOptions.defaults().withTools(json("{}"))).getMessage());
    }
}
