package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.chat.V4Format;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReference;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@code /v1/completions} with a {@code suffix}: the prompt and suffix around the hole in the tokenizer's
 * fill-in-the-middle markers (as control tokens), the answer the middle; on a scripted model that writes a middle
 * only when it sees the hole.
 */
class FillInTheMiddleTest {
    static TestServer server;
    static final AtomicReference<int[]> lastPrompt = new AtomicReference<>(new int[0]);

    static int[] script(int[] prompt) {
        lastPrompt.set(prompt);
        Tokenizer t = TestServer.tokenizer();
        int hole = t.id(V4Format.FIM_HOLE).orElseThrow();
        return Arrays.stream(prompt).anyMatch(id -> id == hole) ? t.encode("    x = 1") : TestServer.defaultScript(prompt);
    }

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.scripted(new ScriptedBackend(FillInTheMiddleTest::script), Map.of("speculative.draft", "none"));
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    static TestServer.Resp post(String fields) throws Exception {
        return server.post("/v1/completions", "{\"model\":\"scripted\",\"temperature\":0,\"max_tokens\":20," + fields + "}");
    }

    @Test
    void theMiddleIsWrittenBetweenPromptAndSuffix() throws Exception {
        TestServer.Resp r = post("\"prompt\":\"def f():\\n\",\"suffix\":\"\\n    return x\"");
        assertEquals(200, r.status(), r.body());
        assertEquals("    x = 1", r.json().at("/choices/0/text").asText(), r.body());
        Tokenizer t = TestServer.tokenizer();
        int[] expected = t.encode(V4Format.BOS + V4Format.FIM_BEGIN + "def f():\n" + V4Format.FIM_HOLE + "\n    return x"
                + V4Format.FIM_END);
        assertArrayEquals(expected, lastPrompt.get(), t.decode(lastPrompt.get()));
        // the markers are the tokenizer's control tokens, not their spelling in text
        assertEquals(t.id(V4Format.FIM_BEGIN).orElseThrow(), lastPrompt.get()[1]);
        assertEquals(t.id(V4Format.FIM_END).orElseThrow(), lastPrompt.get()[lastPrompt.get().length - 1]);

        // an insertion at the start of a text: an empty prompt is the empty prefix
        TestServer.Resp start = post("\"prompt\":\"\",\"suffix\":\"return x\"");
        assertEquals(200, start.status(), start.body());
        assertEquals("    x = 1", start.json().at("/choices/0/text").asText(), start.body());
    }

    @Test
    void aSuffixThatCannotBeUsedIsNamed() throws Exception {
        for (String[] c : new String[][]{
                {"\"prompt\":[1,2,3],\"suffix\":\"x\"", "suffix: needs a text prompt"},
                {"\"prompt\":\"a\",\"suffix\":\"x\",\"echo\":true", "suffix: cannot be combined with echo"},
                {"\"prompt\":\"a\",\"suffix\":7", "suffix: must be a string"}}) {
            TestServer.Resp r = post(c[0]);
            assertEquals(400, r.status(), r.body());
            JsonNode e = r.json().get("error");
            assertEquals("suffix", e.get("param").asText(), r.body());
            assertTrue(e.get("message").asText().startsWith(c[1]), r.body());
        }
        // still no empty prompt without one
        TestServer.Resp empty = post("\"prompt\":\"\"");
        assertEquals(400, empty.status(), empty.body());
    }
}
