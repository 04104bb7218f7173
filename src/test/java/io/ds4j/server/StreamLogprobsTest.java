package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.app.DefaultModelProvider;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Streamed logprobs ride with their text when a stop string cuts a token: on the embedded model, whose greedy answer
 * to "Hi" has a token "-shot" followed by "你不能", the stop string "t你" begins inside "-shot", so the filter releases
 * "-sho" and holds "t". The chunk carrying "-sho" carries that token's logprob too (it came a chunk later, with no text),
 * and the logprobs' bytes join to the content.
 */
class StreamLogprobsTest {
    static TestServer server;

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.start(new DefaultModelProvider(), Map.of("speculative.draft", "none"), null, null);
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    @Test
    void aChunksTextAndItsLogprobsGoTogether() throws Exception {
        TestServer.Resp s = server.post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                + "\"max_tokens\":8,\"temperature\":0,\"stop\":[\"t你\"],\"logprobs\":true,\"stream\":true}");
        assertEquals(200, s.status(), s.body());
        StringBuilder content = new StringBuilder();
        ByteArrayOutputStream lpBytes = new ByteArrayOutputStream();
        String stopReason = null;
        for (String e : s.events()) {
            if (e.equals("[DONE]")) continue;
            JsonNode c = Json.MAPPER.readTree(e).at("/choices/0");
            String text = c.at("/delta/content").asText("");
            JsonNode lp = c.at("/logprobs/content");
            if (!text.isEmpty()) assertTrue(lp.isArray() && !lp.isEmpty(), "a chunk with text has its tokens' logprobs: " + e);
            content.append(text);
            if (lp.isArray()) for (JsonNode t : lp) for (JsonNode b : t.get("bytes")) lpBytes.write(b.intValue());
            if (c.hasNonNull("stop_reason")) stopReason = c.get("stop_reason").asText();
        }
        assertEquals("t你", stopReason, "the stop string matched (the case this test is about): " + s.body());
        assertTrue(content.toString().endsWith("-sho"), content.toString());
        assertEquals(content.toString(), lpBytes.toString(StandardCharsets.UTF_8), "the logprobs' bytes join to the content");
    }
}
