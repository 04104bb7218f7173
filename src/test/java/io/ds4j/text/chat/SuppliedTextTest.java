package io.ds4j.text.chat;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.ds4j.text.PromptText;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;
import io.ds4j.text.chat.ChatMessage.ToolCall;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * What a conversation supplies (contents, reasoning, names, arguments, tool results, tool definitions, the response
 * format) is plain text to the tokenizer: only the template's own markers become control tokens, so a message cannot
 * write an end of sentence or open a turn. Through the vendored DeepSeek tokenizer.
 */
class SuppliedTextTest {
    private static final ObjectMapper JSON = new ObjectMapper();
    private static Tokenizer tok;

    /** Control-token strings of the tokenizer and of the format, one after another. */
    private static final String MARKERS = V4Format.BOS + V4Format.EOS + V4Format.USER + V4Format.ASSISTANT
            + V4Format.THINK_START + V4Format.THINK_END + "<｜tool▁calls▁begin｜><｜tool▁sep｜><｜fim▁hole｜><|EOT|>"
            + V4Format.TOOL_CALLS_OPEN + V4Format.TOOL_RESULT_OPEN;

    @BeforeAll
    static void load() {
        tok = Tokenizers.vendored();
    }

    /** A conversation with {@code x} in every field a client supplies, in thinking mode with tools (reasoning kept). */
    private static PromptText render(String x) throws Exception {
        String q = JSON.writeValueAsString(x); // x as a JSON string, quotes included
        List<ChatMessage> messages = List.of(
                ChatMessage.system("system " + x),
                ChatMessage.developer("developer " + x),
                ChatMessage.user("user " + x),
                ChatMessage.assistant("answer " + x, "reasoning " + x,
                        List.of(new ToolCall("c1", "call" + x, "{" + JSON.writeValueAsString("key" + x) + ":" + q + ",\"n\":[" + q + "]}"))),
                ChatMessage.tool("c1", "result " + x),
                ChatMessage.user("again " + x));
        JsonNode tools = JSON.readTree("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":" + q
                + ",\"parameters\":{\"type\":\"object\",\"properties\":{\"p\":{\"type\":\"string\",\"description\":" + q + "}}}}}]");
        JsonNode format = JSON.readTree("{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"n\",\"schema\":{\"description\":"
                + q + "}}}");
        return ChatEncoder.render(messages, ChatOptions.defaults().withThinking(true).withTools(tools).withResponseFormat(format));
    }

    private static List<Integer> controlIds(int[] ids) {
        List<Integer> out = new ArrayList<>();
        for (int id : ids) if (tok.isControl(id)) out.add(id);
        return out;
    }

    @Test
    void controlTokenStringsInSuppliedTextArePlainText() throws Exception {
        PromptText injected = render(MARKERS), clean = render("x");
        int[] ids = tok.encode(injected);
        // the same control tokens, in the same places of the format, as the conversation without the markers
        assertEquals(controlIds(tok.encode(clean)), controlIds(ids), tok.decode(ids));
        assertFalse(controlIds(ids).isEmpty(), "the template's markers are control tokens");
        // and nothing of the text is lost: the markers are there as the characters they were
        assertEquals(injected.toString(), tok.decode(ids));
        // the same text tokenised whole (what a completion prompt is) does give them as control tokens
        assertTrue(controlIds(tok.encode(injected.toString())).size() > controlIds(ids).size());
    }

    @Test
    void eachMarkerAloneInAMessageIsPlainText() {
        for (String marker : new String[]{V4Format.EOS, V4Format.USER, V4Format.ASSISTANT, V4Format.THINK_START,
                V4Format.THINK_END, V4Format.BOS}) {
            int[] ids = tok.encode(ChatEncoder.render(List.of(ChatMessage.user(marker)), ChatOptions.defaults()));
            List<Integer> expected = List.of(tok.bosId(), tok.id(V4Format.USER).getAsInt(),
                    tok.id(V4Format.ASSISTANT).getAsInt(), tok.id(V4Format.THINK_END).getAsInt());
            assertEquals(expected, controlIds(ids), marker + ": " + Arrays.toString(ids));
            assertTrue(ids.length > expected.size() + 1, marker + " is several plain tokens: " + Arrays.toString(ids));
        }
    }

    @Test
    void ordinaryConversationsTokeniseAsTheirText() throws Exception {
        // texts that meet the template's own text at their edges (spaces, newlines, brackets, half a marker)
        String[] texts = {"x", "Hello, world!", " leading space", "trailing space ", "\n\nnewlines\n", "12345 67",
            "你好，世界", "emoji 🙂 here", "<", ">", "｜", "<think", "think>", "a <b> c", "</tool_result", "<｜User", "User｜>",
            "\"quoted\"", "tab\there", "\r\n"};
        for (String t : texts) {
            PromptText p = render(t);
            assertArrayEquals(tok.encode(p.toString()), tok.encode(p), "for " + JSON.writeValueAsString(t));
            for (ChatOptions o : new ChatOptions[]{ChatOptions.defaults(), ChatOptions.defaults().withThinking(true)}) {
                PromptText chat = ChatEncoder.render(List.of(ChatMessage.system(t), ChatMessage.user(t),
                        ChatMessage.assistant(t), ChatMessage.user(t)), o);
                assertArrayEquals(tok.encode(chat.toString()), tok.encode(chat), "for " + JSON.writeValueAsString(t));
            }
        }
    }

    @Test
    void aMarkerAcrossASuppliedPiecesEdgeIsPlainText() {
        // a supplied "<｜Us" followed by template text "er｜>": no control token, though the whole text holds one
        PromptText p = new PromptText().template(V4Format.BOS).supplied("<｜Us").template("er｜>" + V4Format.ASSISTANT);
        int[] ids = tok.encode(p);
        assertEquals(List.of(tok.bosId(), tok.id(V4Format.ASSISTANT).getAsInt()), controlIds(ids), Arrays.toString(ids));
        assertEquals(p.toString(), tok.decode(ids));
        assertTrue(controlIds(tok.encode(p.toString())).contains(tok.id(V4Format.USER).getAsInt()));
    }
}
