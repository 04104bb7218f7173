package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.text.Tokenizer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * max_tokens that cuts the output inside a character: on a scripted model that writes every character outside ASCII
 * (the DSML markup's {@code ｜}, a {@code ☀} in its text) one UTF-8 byte a token, so every cut point is met, also the
 * two inside each such character. The bytes of a character the cut left incomplete are no text (never a U+FFFD), and
 * markup cut anywhere is never content: a tool call whose invoke tag was complete is reported with its arguments as far
 * as the model wrote them and finish reason length, unconstrained and forced alike, streamed and whole alike, on every
 * endpoint that reads tool calls.
 */
class CutMidCharacterTest {
    static final String TEXT = "Let me check \u2600.";
    /** The call as DeepSeek-V4 writes it (no text before it: a forced call has none). */
    static final String BLOCK = TestServer.TOOL.substring(TestServer.TOOL.indexOf("\n\n<"));
    /** The whole arguments of the scripted call, as the parser writes them. */
    static final String ARGS = "{\"city\": \"Paris\", \"days\": 3}";
    static final String TOOL = AutoToolCallsTest.tool("get_weather", false, "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}");
    static final String[] CHOICES = {"", ",\"tool_choice\":\"required\"", ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}"};

    static TestServer server;
    static int[] withText, forced;

    @BeforeAll
    static void start() throws Exception {
        withText = bytewise(TEXT + BLOCK);
        forced = bytewise(BLOCK);
        // "Call" asks for the call alone (what a forced call's grammar admits), any other weather question text first
        server = TestServer.scripted(new ScriptedBackend(p -> {
            String prompt = TestServer.tokenizer().decode(p);
            return prompt.contains("Call get_weather") ? forced : prompt.contains("weather") ? withText : TestServer.defaultScript(p);
        }), Map.of("speculative.draft", "none"));
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    /** The text's tokens, with each character outside ASCII as one single-byte token per UTF-8 byte. */
    static int[] bytewise(String text) {
        Tokenizer t = TestServer.tokenizer();
        int[] byteToken = new int[256];
        java.util.Arrays.fill(byteToken, -1);
        for (int id = 0; id < t.vocabSize(); id++) {
            byte[] b = t.tokenBytes(id);
            if (b.length == 1 && byteToken[b[0] & 0xff] < 0) byteToken[b[0] & 0xff] = id;
        }
        IntStream.Builder out = IntStream.builder();
        StringBuilder ascii = new StringBuilder();
        for (int i = 0; i < text.length(); i = text.offsetByCodePoints(i, 1)) {
            int cp = text.codePointAt(i);
            if (cp < 0x80) {
                ascii.appendCodePoint(cp);
                continue;
            }
            for (int id : t.encode(ascii.toString())) out.add(id);
            ascii.setLength(0);
            for (byte b : Character.toString(cp).getBytes(StandardCharsets.UTF_8)) {
                assertTrue(byteToken[b & 0xff] >= 0, "a single-byte token for " + (b & 0xff));
                out.add(byteToken[b & 0xff]);
            }
        }
        for (int id : t.encode(ascii.toString())) out.add(id);
        return out.build().toArray();
    }

    /** No byte of an incomplete character became text, and no DSML markup reached the answer, in any of its fields. */
    static void noReplacementNorMarkup(TestServer.Resp r, String what) {
        assertEquals(200, r.status(), what + ": " + r.body());
        String body = r.body().toLowerCase(java.util.Locale.ROOT);
        assertFalse(body.contains("\uFFFD") || body.contains("\\ufffd"), what + ": " + r.body());
        assertFalse(body.contains("dsml") || body.contains("\uFF5C") || body.contains("\\uff5c"), what + ": " + r.body());
    }

    /**
     * Chat completions at every cut inside a character before the call ends, unconstrained and forced: the content is
     * the text as far as its last whole character (never markup), the call is the model's as far as it got, with
     * finish reason length, streamed as whole.
     */
    @Test
    void everyCutInsideACharacterIsTheModelsOutputAsFarAsItGot() throws Exception {
        for (String choice : CHOICES) {
            boolean free = choice.isEmpty();
            String user = free ? "What is the weather in Paris?" : "Call get_weather for Paris.";
            int[] script = free ? withText : forced;
            // a forced call with room for its shortest form is steered to complete: the cuts before that
            for (int k = 1; k < (free ? script.length : 60); k++) {
                String written = TestServer.tokenizer().decode(java.util.Arrays.copyOf(script, k));
                if (!written.endsWith("\uFFFD")) continue; // the cuts between characters: AutoToolCallsTest, StructuredOutputTest
                String extra = "\"temperature\":0,\"max_tokens\":" + k + ",\"tools\":[" + TOOL + "]" + choice;
                String what = (free ? "auto" : choice) + " max_tokens " + k;
                TestServer.Resp full = server.post("/v1/chat/completions", TestServer.chat(user, extra));
                noReplacementNorMarkup(full, what);
                JsonNode c = full.json().at("/choices/0");
                assertEquals("length", c.get("finish_reason").asText(), what + ": " + c);
                String content = c.at("/message/content").isNull() ? "" : c.at("/message/content").asText();
                assertTrue((free ? TEXT + "\n\n" : "").startsWith(content), what + ": " + c);
                JsonNode call = c.at("/message/tool_calls/0/function");
                assertEquals(written.contains("name=\"get_weather\">"), !call.isMissingNode(), "a call once its invoke tag is whole: " + what + ": " + c);
                if (!call.isMissingNode()) {
                    assertEquals("get_weather", call.get("name").asText(), what + ": " + c);
                    // whole once the invoke's closing tag is written (the block's is cut), else as far as they got
                    String args = call.get("arguments").asText();
                    boolean closed = written.contains("</\uFF5CDSML\uFF5Cinvoke>");
                    assertTrue(closed ? ARGS.equals(args) : ARGS.startsWith(args) && !ARGS.equals(args),
                            "the arguments as far as they got: " + what + ": " + c);
                }
                TestServer.Resp stream = server.post("/v1/chat/completions", TestServer.chat(user, extra + ",\"stream\":true"));
                noReplacementNorMarkup(stream, what + " streamed");
                assertEquals(GoldenSseTest.assembleFull(full.json()), GoldenSseTest.assemble(stream), what);
            }
        }
    }

    /** The first max_tokens whose output's text, decoded, ends with the given text and one byte of the next character. */
    static int cutAfter(int[] script, String text) {
        Tokenizer t = TestServer.tokenizer();
        for (int k = 1; k <= script.length; k++) {
            String s = t.decode(java.util.Arrays.copyOf(script, k));
            if (s.endsWith(text + "\uFFFD")) return k;
        }
        throw new AssertionError("no cut after " + text);
    }

    /**
     * The cuts the reviewer met, exactly: one byte into the text's ☀, into the block's first {@code ｜}, into the
     * {@code ｜} of the tag after a complete invoke tag (the call was reported with {} and the tag's start as content),
     * into the {@code ｜} of a parameter's closing tag.
     */
    @Test
    void theCutsInsideACharacter() throws Exception {
        String[][] free = {{"Let me check ", "Let me check ", null}, {TEXT + "\n\n<", TEXT, null},
                {"get_weather\">\n<", TEXT, ""}, {"Paris</", TEXT, "{\"city\": \"Paris"}};
        for (String[] e : free) {
            String extra = "\"temperature\":0,\"max_tokens\":" + cutAfter(withText, e[0]) + ",\"tools\":[" + TOOL + "]";
            JsonNode c = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?", extra)).json().at("/choices/0");
            assertEquals("length", c.get("finish_reason").asText(), e[0] + ": " + c);
            assertEquals(e[1], c.at("/message/content").asText(), e[0] + ": " + c);
            JsonNode calls = c.at("/message/tool_calls");
            if (e[2] == null) assertTrue(calls.isMissingNode() || calls.isEmpty(), e[0] + ": " + c);
            else {
                assertEquals("get_weather", calls.at("/0/function/name").asText(), e[0] + ": " + c);
                assertEquals(e[2], calls.at("/0/function/arguments").asText(), e[0] + ": " + c);
            }
        }
        String[][] forcedCuts = {{"\n\n<", null}, {"get_weather\">\n<", ""}, {"get_weather\">\n<\uFF5CDSML", ""},
                {"Paris</", "{\"city\": \"Paris"}};
        for (String choice : CHOICES) {
            if (choice.isEmpty()) continue;
            for (String[] e : forcedCuts) {
                String extra = "\"temperature\":0,\"max_tokens\":" + cutAfter(forced, e[0]) + ",\"tools\":[" + TOOL + "]" + choice;
                JsonNode c = server.post("/v1/chat/completions", TestServer.chat("Call get_weather for Paris.", extra)).json().at("/choices/0");
                assertEquals("length", c.get("finish_reason").asText(), e[0] + ": " + c);
                assertTrue(c.at("/message/content").isNull(), "no content: " + e[0] + ": " + c);
                JsonNode calls = c.at("/message/tool_calls");
                if (e[1] == null) assertTrue(calls.isMissingNode() || calls.isEmpty(), e[0] + ": " + c);
                else {
                    assertEquals("get_weather", calls.at("/0/function/name").asText(), choice + " " + e[0] + ": " + c);
                    assertEquals(e[1], calls.at("/0/function/arguments").asText(), choice + " " + e[0] + ": " + c);
                }
            }
        }
    }

    /** A stop token (stop_token_ids) right after a character's first byte cuts there as max_tokens does: no U+FFFD. */
    @Test
    void aStopTokenInsideACharacterCutsItToo() throws Exception {
        int second = withText[cutAfter(withText, "Let me check ")]; // the token of the sun's second byte
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?",
                "\"temperature\":0,\"max_tokens\":100,\"stop_token_ids\":[" + second + "],\"tools\":[" + TOOL + "]"));
        noReplacementNorMarkup(r, "stop token");
        JsonNode c = r.json().at("/choices/0");
        assertEquals("stop", c.get("finish_reason").asText(), c.toString());
        assertEquals(second, c.get("stop_reason").asInt(), c.toString());
        assertEquals("Let me check ", c.at("/message/content").asText(), c.toString());
    }

    /** Anthropic's messages and OpenAI's Responses read the same events: no text block or message of the cut markup. */
    @Test
    void theOtherEndpointsShowNoCutMarkup() throws Exception {
        int k = cutAfter(forced, "get_weather\">\n<\uFF5CDSML");
        String messages = "{\"model\":\"scripted\",\"max_tokens\":" + k + ",\"messages\":[{\"role\":\"user\",\"content\":"
                + "\"Call get_weather for Paris.\"}],\"tool_choice\":{\"type\":\"any\"},\"tools\":[" + AnthropicMessagesTest.WEATHER_TOOL + "]";
        TestServer.Resp m = server.post("/v1/messages", messages + "}");
        noReplacementNorMarkup(m, "messages");
        assertEquals("max_tokens", m.json().get("stop_reason").asText(), m.body());
        assertEquals(1, m.json().get("content").size(), "the call alone, no text block: " + m.body());
        assertEquals("tool_use", m.json().at("/content/0/type").asText(), m.body());
        noReplacementNorMarkup(server.post("/v1/messages", messages + ",\"stream\":true}"), "messages streamed");

        String responses = "{\"model\":\"scripted\",\"input\":\"Call get_weather for Paris.\",\"max_output_tokens\":" + k
                + ",\"tool_choice\":\"required\",\"tools\":[" + ResponsesApiTest.WEATHER_TOOL + "]";
        TestServer.Resp r = server.post("/v1/responses", responses + "}");
        noReplacementNorMarkup(r, "responses");
        for (JsonNode item : r.json().get("output"))
            assertNotEquals("message", item.get("type").asText(), "no message of the cut markup: " + r.body());
        noReplacementNorMarkup(server.post("/v1/responses", responses + ",\"stream\":true}"), "responses streamed");
    }
}
