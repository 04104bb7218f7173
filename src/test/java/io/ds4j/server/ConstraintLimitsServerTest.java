package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.grammar.Grammar;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Structured-output schemas that are expensive to enforce never hold the engine: overlapping anyOf alternatives
 * nested deep finish like any request, a schema that would keep more parse states live than
 * {@link Grammar#MAX_LIVE_STATES} ends that request alone with a 400 (an error event on a stream) while the server
 * goes on, and schemas recognisably pathological up front are refused with a 400 naming the problem. The timeouts
 * are what catches an engine held for minutes (before the states were merged, the first request took hours).
 */
class ConstraintLimitsServerTest {
    private final ScriptedBackend backend = new ScriptedBackend(TestServer::defaultScript);
    private TestServer server;

    @AfterEach
    void stop() throws Exception {
        if (server != null) server.server.close().toCompletionStage().toCompletableFuture().get(60, TimeUnit.SECONDS);
    }

    /** The report's schema: two identical alternatives, each an array of the root. */
    static final String TWO_WAYS = "{\"anyOf\":[{\"$ref\":\"#/$defs/d0\"},{\"$ref\":\"#/$defs/d1\"}],\"$defs\":{"
            + "\"d0\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}},\"d1\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}}}";
    static final String THREE_WAYS = "{\"anyOf\":[{\"$ref\":\"#/$defs/d0\"},{\"$ref\":\"#/$defs/d1\"},{\"$ref\":\"#/$defs/d2\"}],"
            + "\"$defs\":{\"d0\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}},\"d1\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}},"
            + "\"d2\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}}}";

    static String strict(String schema) {
        return "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"out\",\"strict\":true,\"schema\":" + schema + "}}";
    }

    /** Forces the tokens of the given texts (each one token) with a large logit bias. */
    static String force(String... texts) {
        StringBuilder b = new StringBuilder("\"logit_bias\":{");
        for (int i = 0; i < texts.length; i++) {
            int[] ids = TestServer.tokenizer().encode(texts[i]);
            assertEquals(1, ids.length, texts[i]);
            b.append(i > 0 ? "," : "").append('"').append(ids[0]).append("\":100");
        }
        return b.append('}').toString();
    }

    static String errorCode(TestServer.Resp r) {
        return r.json().path("error").path("code").asText();
    }

    /** Nothing but nested arrays. */
    static void assertNestedArrays(JsonNode n) {
        assertTrue(n.isArray(), n.toString());
        for (JsonNode c : n) assertNestedArrays(c);
    }

    @Test
    @Timeout(value = 120, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void overlappingAlternativesNestedDeepFinishAndTheServerGoesOn() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        for (String schema : new String[]{TWO_WAYS, THREE_WAYS}) {
            TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", strict(schema)
                    + ",\"temperature\":0,\"max_tokens\":40," + force("[", "[[")));
            assertEquals(200, r.status(), r.body());
            JsonNode choice = r.json().at("/choices/0");
            String content = choice.at("/message/content").asText();
            assertEquals("stop", choice.get("finish_reason").asText(), content);
            assertTrue(content.startsWith("[[[[[[[[[["), "the bias nests it deep: " + content);
            assertNestedArrays(Json.MAPPER.readTree(content));
        }
        // and the engine serves the next request
        TestServer.Resp plain = server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
        assertEquals(200, plain.status(), plain.body());
        assertEquals(TestServer.PLAIN, plain.json().at("/choices/0/message/content").asText());
    }

    /**
     * k arrays at the root (k within the limit), each of items that are one of two objects: after "[{" the 2k objects
     * are all live, past the limit.
     */
    static String tooWideAfterTwoBytes() {
        int k = Grammar.MAX_LIVE_STATES / 2 + 1;
        StringBuilder s = new StringBuilder("{\"anyOf\":[");
        for (int i = 0; i < k; i++) {
            if (i > 0) s.append(',');
            s.append("{\"type\":\"array\",\"items\":{\"anyOf\":[");
            for (int j = 0; j < 2; j++) {
                if (j > 0) s.append(',');
                s.append("{\"type\":\"object\",\"properties\":{\"a").append(i).append('_').append(j)
                        .append("\":{\"type\":\"integer\"}},\"required\":[\"a").append(i).append('_').append(j).append("\"]}");
            }
            s.append("]}}");
        }
        return s.append("]}").toString();
    }

    @Test
    @Timeout(value = 120, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void pastTheLiveStateLimitOnlyThatRequestFailsWith400() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        String extra = strict(tooWideAfterTwoBytes()) + ",\"temperature\":0,\"max_tokens\":30," + force("[", "{");
        try (LogCapture log = new LogCapture()) {
            TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", extra));
            assertEquals(400, r.status(), r.body());
            assertEquals("grammar_too_complex", errorCode(r), r.body());
            String m = r.json().at("/error/message").asText();
            assertTrue(m.contains(String.valueOf(Grammar.MAX_LIVE_STATES)) && m.contains("anyOf"), m);
            // the log says what was decided and why, without a stack trace
            assertTrue(TestServer.eventually(2000, () -> log.lines().stream().anyMatch(l -> l.contains("WARN")
                    && l.contains("grammar_too_complex") && l.contains(String.valueOf(Grammar.MAX_LIVE_STATES)))), log.lines().toString());
        }
        // streamed: the headers went out at admission, so the client gets an error event
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions", TestServer.chat("Hi", extra + ",\"stream\":true"))) {
            assertEquals(200, s.status);
            String error = s.firstError(n -> { });
            assertNotNull(error, "an error event");
            assertEquals("grammar_too_complex", Json.MAPPER.readTree(error).at("/error/code").asText(), error);
        }
        TestServer.Resp plain = server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
        assertEquals(200, plain.status(), plain.body());
        assertTrue(TestServer.eventually(2000, () -> server.state().metrics().running.get() == 0), "nothing runs");
        // each counted once, as a client error
        String metrics = server.get("/metrics").body();
        assertTrue(metrics.contains("ds4j:requests_rejected_total{reason=\"grammar_too_complex\"} 2.0"),
                metrics.lines().filter(l -> l.contains("rejected")).toList().toString());
        assertTrue(TestServer.eventually(2000, () -> backend.openSequences() == 0), "every sequence released");
    }

    /**
     * An EBNF grammar whose every character steps 80 rules that may match nothing (the breaker's grammar, which held the
     * engine 14 minutes for one token): the request ends with 400 grammar_too_complex within the work limit, and the
     * next request is served.
     */
    @Test
    @Timeout(value = 120, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void aGrammarPastTheWorkLimitFailsAloneWith400() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        StringBuilder g = new StringBuilder("root ::=");
        for (int i = 0; i < 80; i++) g.append(" n").append(i);
        g.append(" \"!\"\n");
        for (int i = 0; i < 80; i++) g.append("n").append(i).append(" ::= [a-z]*\n");
        String extra = "\"grammar\":" + Json.MAPPER.valueToTree(g.toString()) + ",\"temperature\":0,\"max_tokens\":30," + force("ab");
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", extra));
        assertEquals(400, r.status(), r.body());
        assertEquals("grammar_too_complex", errorCode(r), r.body());
        assertTrue(r.json().at("/error/message").asText().contains("step its rules more than"), r.body());
        TestServer.Resp plain = server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
        assertEquals(200, plain.status(), plain.body());
        assertTrue(TestServer.eventually(2000, () -> backend.openSequences() == 0), "every sequence released");
    }

    @Test
    @Timeout(value = 120, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void pathologicalSchemasAreRefusedUpFront() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        // an alternative that is the schema itself, with nothing written in between: no finite expansion
        TestServer.Resp self = server.post("/v1/chat/completions", TestServer.chat("Hi",
                strict("{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"string\"}]}")));
        assertEquals(400, self.status(), self.body());
        assertEquals("unsupported_schema_keyword", errorCode(self), self.body());
        assertTrue(self.json().at("/error/message").asText().contains("refers back to itself"), self.body());
        // more alternatives open at once than the engine keeps live
        int n = Grammar.MAX_LIVE_STATES + 1;
        StringBuilder wide = new StringBuilder("{\"type\":\"object\",\"properties\":{\"x\":{\"anyOf\":[");
        for (int i = 0; i < n; i++) wide.append(i > 0 ? "," : "").append("{\"const\":").append(i).append('}');
        wide.append("]}},\"required\":[\"x\"]}");
        TestServer.Resp tooWide = server.post("/v1/chat/completions", TestServer.chat("Hi", strict(wide.toString())));
        assertEquals(400, tooWide.status(), tooWide.body());
        assertEquals("response_format.json_schema.schema.properties.x", tooWide.json().at("/error/param").asText(), tooWide.body());
        assertTrue(tooWide.json().at("/error/message").asText().contains(n + " alternatives"), tooWide.body());
        // a forced tool call's parameters go through the same checks
        TestServer.Resp tool = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"tools\":[{\"type\":\"function\","
                + "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/a\"}},"
                + "\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}}}}}],\"tool_choice\":\"required\""));
        assertEquals(400, tool.status(), tool.body());
        assertTrue(tool.json().at("/error/message").asText().contains("refers back to itself"), tool.body());
        TestServer.Resp plain = server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
        assertEquals(200, plain.status(), plain.body());
    }
}
