package io.ds4j.server;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Every answer of the API routes carries an {@code X-Request-Id}: the client's own where it sent a sane one, else the
 * server's (a generation's completion id, as its body gives it; {@code req-...} for other requests), and the request's
 * log lines name it, so that one id finds a request on both sides.
 */
class RequestIdTest {
    static TestServer server;

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of());
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    static String id(TestServer.Resp r) {
        return r.headers().firstValue(HttpVerticle.REQUEST_ID).orElse(null);
    }

    @Test
    void aGenerationIsNamedByItsCompletionId() throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":3"));
        assertEquals(200, r.status(), r.body());
        assertEquals(r.json().get("id").asText(), id(r), "the header names the request as its body does");
        assertTrue(id(r).startsWith("chatcmpl-"), id(r));
        TestServer.Resp s = server.post("/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":3,\"stream\":true}");
        assertEquals(200, s.status(), s.body());
        assertTrue(s.events().getFirst().contains("\"id\":\"" + id(s) + "\""), id(s) + " in " + s.body());
        TestServer.Resp resp = server.post("/v1/responses", "{\"input\":\"Hi\",\"max_output_tokens\":3}");
        assertEquals(resp.json().get("id").asText(), id(resp), resp.body());
    }

    @Test
    void theClientsIdIsEchoedAndLogged() throws Exception {
        try (LogCapture log = new LogCapture()) {
            TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":3"),
                    HttpVerticle.REQUEST_ID, "job-7");
            assertEquals(200, r.status(), r.body());
            assertEquals("job-7", id(r));
            // the body keeps its completion id; the engine's lines name both
            String gen = r.json().get("id").asText();
            assertTrue(gen.startsWith("chatcmpl-"), gen);
            String named = "request " + gen + " (X-Request-Id job-7) ";
            assertTrue(TestServer.eventually(5000, () -> log.linesWith(named + "finished").size() == 1), log.lines().toString());
            assertEquals(1, log.linesWith(named + "admitted").size(), log.lines().toString());
            // a refusal too: its header and its log line
            TestServer.Resp bad = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"temperature\":9"),
                    HttpVerticle.REQUEST_ID, "job-8");
            assertEquals(400, bad.status(), bad.body());
            assertEquals("job-8", id(bad));
            List<String> refused = log.linesWith("request job-8: POST /v1/chat/completions rejected with 400: temperature");
            assertEquals(1, refused.size(), log.lines().toString());
        }
    }

    @Test
    void theIgnoredFieldsWarningOfAGenerationNamesTheClientsId() throws Exception {
        try (LogCapture log = new LogCapture()) {
            TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":3,\"bogus\":1"),
                    HttpVerticle.REQUEST_ID, "gen-1");
            assertEquals(200, r.status(), r.body());
            // as the engine's lines name it, so that grepping the client's id finds the warning too
            String named = "request " + r.json().get("id").asText() + " (X-Request-Id gen-1): POST /v1/chat/completions:"
                    + " ignored an unknown field: bogus";
            assertEquals(1, log.linesWith(named).size(), log.lines().toString());
        }
    }

    @Test
    void everyApiAnswerHasOne() throws Exception {
        try (LogCapture log = new LogCapture()) {
            TestServer.Resp bad = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"temperature\":9"));
            assertEquals(400, bad.status(), bad.body());
            String own = id(bad);
            assertNotNull(own, bad.headers().toString());
            assertTrue(own.matches("req-[A-Za-z0-9]{24}"), own);
            assertEquals(1, log.linesWith("request " + own + ": POST /v1/chat/completions rejected with 400").size(),
                    log.lines().toString());
        }
        for (String path : new String[]{"/v1/models", "/health", "/props", "/v1/no-such-route"}) {
            TestServer.Resp r = server.get(path);
            assertNotNull(id(r), path + " " + r.status() + ": " + r.headers());
        }
        assertNotEquals(id(server.get("/v1/models")), id(server.get("/v1/models")), "each request has its own");
        TestServer.Resp t = server.post("/tokenize", "{\"content\":\"Hi\"}", HttpVerticle.REQUEST_ID, "  tok-1 ");
        assertEquals("tok-1", id(t), "blanks around it are not part of it");
        // a static file is no API answer
        assertNull(id(server.get("/")), "the playground");
    }

    /** The answer to a request sent as written (an HTTP client would refuse a malformed escape), until it closes. */
    static String raw(String request) throws Exception {
        try (java.net.Socket s = new java.net.Socket("127.0.0.1", server.port)) {
            s.setSoTimeout(10_000);
            s.getOutputStream().write(request.getBytes(java.nio.charset.StandardCharsets.US_ASCII));
            return new String(s.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        }
    }

    @Test
    void aPathThatCannotBeDecodedUnderV1HasOne() throws Exception {
        // its 400 is a refusal under /v1/ like any other; the router cannot decode the path, so it is judged as written
        String own = raw("GET /v1/%zz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assertTrue(own.startsWith("HTTP/1.1 400 ") && own.contains("invalid_path"), own);
        assertTrue(own.toLowerCase().matches("(?s).*\r\nx-request-id: req-[a-z0-9]{24}\r\n.*"), own);
        String client = raw("GET /v1/%zz HTTP/1.1\r\nHost: x\r\nX-Request-Id: bad-1\r\n"
                + "Connection: close\r\n\r\n");
        assertTrue(client.toLowerCase().contains("\r\nx-request-id: bad-1\r\n"), client);
        // outside the API paths, as a static file's answer, none
        String other = raw("GET /%zz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assertTrue(other.startsWith("HTTP/1.1 400 "), other);
        assertFalse(other.toLowerCase().contains("x-request-id"), other);
    }

    @Test
    void anOddClientIdIsReplacedByTheServersOwn() throws Exception {
        String longest = "x".repeat(HttpVerticle.MAX_REQUEST_ID);
        assertEquals(longest, id(server.get("/v1/models", HttpVerticle.REQUEST_ID, longest)));
        String tooLong = id(server.get("/v1/models", HttpVerticle.REQUEST_ID, longest + "x"));
        assertTrue(tooLong.startsWith("req-"), tooLong);
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":3"),
                HttpVerticle.REQUEST_ID, longest + "x");
        assertEquals(r.json().get("id").asText(), id(r), "a generation's own is its completion id");
        // what no header of an answer or log line should carry as it came
        assertNull(HttpVerticle.clientRequestId("caf\u00e9"));
        assertNull(HttpVerticle.clientRequestId("a\tb"));
        assertNull(HttpVerticle.clientRequestId("a\u0000b"));
        assertNull(HttpVerticle.clientRequestId("   "));
        assertNull(HttpVerticle.clientRequestId(null));
        assertEquals("a b", HttpVerticle.clientRequestId(" a b "));
    }
}
