package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.json.Json;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * speculative.q takes what a request's speculative_q takes, with the same meaning: 0 in the configuration is no
 * speculation (neither the draft nor a prediction) for the requests that give no speculative_q (it was refused), and
 * a request's own width still asks for it.
 */
class SpeculativeWidthConfigTest {
    /** A greedy chat request of 12 tokens, with a prediction and speculative_q where given. */
    static String body(String prediction, Integer q) {
        ObjectNode b = Json.MAPPER.createObjectNode();
        b.putArray("messages").addObject().put("role", "user").put("content", "one two one two one two");
        b.put("max_tokens", 12).put("temperature", 0).put("ignore_eos", true);
        if (prediction != null) b.putObject("prediction").put("type", "content").put("content", prediction);
        if (q != null) b.put("speculative_q", q);
        return b.toString();
    }

    @Test
    void zeroInTheConfigurationIsNoSpeculationUnlessARequestAsks() throws Exception {
        try (TestServer s = TestServer.start(new DefaultModelProvider(), Map.of("speculative.draft", "ngram", "speculative.q", 0),
                null, null)) {
            assertEquals("0", s.get("/props").json().at("/speculative/q").asText());
            // the configuration as /props shows it can be written back into a file: the width is the number 0
            assertTrue(s.get("/props").json().at("/config/speculative/q").isInt(), s.get("/props").body());
            JsonNode plain = s.post("/v1/chat/completions", body(null, null)).json();
            String text = plain.at("/choices/0/message/content").asText();
            assertEquals(0, plain.at("/usage/timings/draft_n").asInt(), plain.toString());
            // the greedy output as a prediction: not used without a width of the request's own, as with speculative_q 0
            JsonNode predicted = s.post("/v1/chat/completions", body(text, null)).json();
            assertEquals(0, predicted.at("/usage/timings/draft_n").asInt(), predicted.toString());
            JsonNode asked = s.post("/v1/chat/completions", body(text, 4)).json();
            assertTrue(asked.at("/usage/timings/draft_n").asInt() > 0, asked.toString());
            assertTrue(asked.at("/usage/completion_tokens_details/accepted_prediction_tokens").asInt() > 0, asked.toString());
            for (JsonNode r : new JsonNode[]{predicted, asked})
                assertEquals(text, r.at("/choices/0/message/content").asText(), "greedy output either way");
        }
    }
}
