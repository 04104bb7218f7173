package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.json.Json;
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

    /**
     * A stop string in the answer's first character leaves no token's text: the logprobs asked for are listed empty
     * ({@code {"content": []}} in chat, empty arrays in completions), not null (the SDKs read {@code .content}).
     */
    @Test
    void logprobsAskedForAreListedEvenWhenNoTextIsLeft() throws Exception {
        String chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":8,\"temperature\":0,\"logprobs\":true";
        String first = server.post("/v1/chat/completions", chat + "}").json().at("/choices/0/message/content").asText().substring(0, 1);
        TestServer.Resp r = server.post("/v1/chat/completions", chat + ",\"stop\":[" + Json.MAPPER.valueToTree(first) + "]}");
        assertEquals(200, r.status(), r.body());
        assertEquals("", r.json().at("/choices/0/message/content").asText(), r.body());
        JsonNode lp = r.json().at("/choices/0/logprobs/content");
        assertTrue(lp.isArray() && lp.isEmpty(), r.body());
        String comp = "{\"prompt\":\"Hi\",\"max_tokens\":8,\"temperature\":0,\"logprobs\":1";
        String firstText = server.post("/v1/completions", comp + "}").json().at("/choices/0/text").asText().substring(0, 1);
        TestServer.Resp c = server.post("/v1/completions", comp + ",\"stop\":[" + Json.MAPPER.valueToTree(firstText) + "]}");
        assertEquals(200, c.status(), c.body());
        assertTrue(c.json().at("/choices/0/logprobs/tokens").isArray() && c.json().at("/choices/0/logprobs/tokens").isEmpty(), c.body());
        // not asked for: null, as before
        TestServer.Resp none = server.post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2}");
        assertTrue(none.json().at("/choices/0/logprobs").isNull(), none.body());
    }

    /**
     * A character split across two tokens (300 is E2 80, 23351 is A7 'a': "‧a", forced by logit_bias) whose second
     * token runs into the stop string "a": the cut token is listed with its own byte of the character, not the whole
     * character again (its first bytes are the first token's).
     */
    @Test
    void aCutTokenListsOnlyItsOwnBytesOfASplitCharacter() throws Exception {
        String body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2,\"temperature\":0,"
                + "\"logprobs\":true,\"logit_bias\":{\"300\":100,\"23351\":50},\"repetition_penalty\":3,\"stop\":[\"a\"]";
        TestServer.Resp r = server.post("/v1/chat/completions", body + "}");
        assertEquals(200, r.status(), r.body());
        JsonNode c = r.json().at("/choices/0");
        assertEquals("\u2027", c.at("/message/content").asText(), r.body());
        ByteArrayOutputStream joined = new ByteArrayOutputStream();
        for (JsonNode t : c.at("/logprobs/content")) for (JsonNode b : t.get("bytes")) joined.write(b.intValue());
        assertEquals("\u2027", joined.toString(StandardCharsets.UTF_8), r.body());

        TestServer.Resp s = server.post("/v1/chat/completions", body + ",\"stream\":true}");
        ByteArrayOutputStream streamed = new ByteArrayOutputStream();
        for (String e : s.events()) {
            if (e.equals("[DONE]")) continue;
            JsonNode lp = Json.MAPPER.readTree(e).at("/choices/0/logprobs/content");
            if (lp.isArray()) for (JsonNode t : lp) for (JsonNode b : t.get("bytes")) streamed.write(b.intValue());
        }
        assertEquals("\u2027", streamed.toString(StandardCharsets.UTF_8), s.body());
    }

    /**
     * Bytes that make no character (a U+FFFD in the text, 3 bytes of UTF-8 for 2 raw ones) before a token the stop
     * string cuts: the cut token is listed up to the stop string, not a character past it (seed 6 on the embedded model
     * writes "的确是 속� impossible"; the stop string "le" leaves " impossib").
     */
    @Test
    void aCutAfterAReplacementCharacterListsTheTokenUpToTheStopString() throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                + "\"max_tokens\":8,\"seed\":6,\"logprobs\":true,\"stop\":[\"le\"]}");
        assertEquals(200, r.status(), r.body());
        JsonNode c = r.json().at("/choices/0");
        String content = c.at("/message/content").asText();
        assertTrue(content.contains("\uFFFD") && content.endsWith(" impossib"), "the case this test is about: " + content);
        StringBuilder joined = new StringBuilder();
        for (JsonNode t : c.at("/logprobs/content")) joined.append(t.get("token").asText());
        assertEquals(content, joined.toString(), r.body());

        // a stop string of a multi-byte character inside a token ("的确是", stop "是"): the token is listed with its
        // bytes up to the stop string's first character, not one byte into it
        TestServer.Resp cjk = server.post("/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                + "\"max_tokens\":8,\"seed\":6,\"logprobs\":true,\"stop\":[\"\u662f\"]}");
        assertEquals(200, cjk.status(), cjk.body());
        JsonNode k = cjk.json().at("/choices/0");
        assertEquals("\u7684\u786e", k.at("/message/content").asText(), "the case this test is about: " + cjk.body());
        StringBuilder tokens = new StringBuilder();
        for (JsonNode t : k.at("/logprobs/content")) tokens.append(t.get("token").asText());
        assertEquals("\u7684\u786e", tokens.toString(), cjk.body());
    }
}
