package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * What third-party clients (curl, HTTP/1.0 proxies, SDKs that read usage details) and a fuzzer met: strict UTF-8
 * bodies, 100 Continue, HTTP/1.0 streams that end, reasoning token counts, undecodable headers, refused preflights,
 * tool definitions checked as OpenAI checks them, and the warm-up step at load.
 */
class ClientDetailsTest {
    static ScriptedBackend backend;
    static TestServer server;
    static long forwardsAtReady;

    @BeforeAll
    static void start() throws Exception {
        backend = new ScriptedBackend(TestServer::defaultScript);
        server = TestServer.scripted(backend, Map.of("server.apiKeys", List.of("sk-test"),
                "server.cors.allowedOrigins", List.of("https://ok.example")));
        forwardsAtReady = backend.forwards.get();
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    static final String[] KEY = {"Authorization", "Bearer sk-test"};

    /** Sends raw bytes and reads the whole answer until the server closes the connection (or the timeout). */
    static String raw(byte[] request, int timeoutMs) throws Exception {
        try (Socket s = new Socket("127.0.0.1", server.port)) {
            s.setSoTimeout(timeoutMs);
            s.getOutputStream().write(request);
            s.getOutputStream().flush();
            ByteArrayOutputStream got = new ByteArrayOutputStream();
            InputStream in = s.getInputStream();
            byte[] buf = new byte[8192];
            try {
                for (int n; (n = in.read(buf)) >= 0; ) got.write(buf, 0, n);
            } catch (SocketTimeoutException e) {
                return got.toString(StandardCharsets.UTF_8) + "\n<<timeout: the connection stayed open>>";
            }
            return got.toString(StandardCharsets.UTF_8);
        }
    }

    static byte[] post(String version, String extraHeaders, byte[] body) {
        byte[] head = ("POST /v1/chat/completions " + version + "\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sk-test\r\n"
                + "Content-Type: application/json\r\nContent-Length: " + body.length + "\r\n" + extraHeaders + "\r\n")
                .getBytes(StandardCharsets.ISO_8859_1);
        byte[] all = new byte[head.length + body.length];
        System.arraycopy(head, 0, all, 0, head.length);
        System.arraycopy(body, 0, all, head.length, body.length);
        return all;
    }

    /**
     * With API keys set, a request line refused before its headers are read (an HTTP version other than 1.0 and 1.1,
     * which has no key read either) is a 401 even when a valid key follows, its message naming the version: what
     * docs/api.md says under Errors.
     */
    @Test
    void aRequestLineOfAnotherVersionIsA401NamingItWhereKeysAreSet() throws Exception {
        String a = raw(post("HTTP/1.2", "", "{}".getBytes(StandardCharsets.US_ASCII)), 10_000);
        assertTrue(a.startsWith("HTTP/1.1 401 "), a);
        assertTrue(a.contains("; the request cannot be read either (its HTTP version HTTP/1.2 is not supported"), a);
        // a request line past the limit: in the 414's own words, not the decoder's "An HTTP line is larger than ..."
        a = raw(("GET /" + "a".repeat(5000) + " HTTP/1.1\r\nHost: x\r\n\r\n").getBytes(StandardCharsets.US_ASCII), 10_000);
        assertTrue(a.startsWith("HTTP/1.1 401 "), a);
        assertTrue(a.contains("; the request cannot be read either (the request line is longer than 4096 bytes, the server's limit"), a);
    }

    /**
     * A request whose headers cannot be read but carry a valid key as x-api-key (Anthropic's SDKs send it) gets the
     * framing's 400, as with the key in Authorization, not a 401 (a final check's find: only Authorization was read).
     */
    @Test
    void anUnreadableRequestWithAValidXApiKeyIsNotA401() throws Exception {
        for (String key : new String[]{"x-api-key: sk-test", "Authorization: Bearer sk-test"}) {
            String a = raw(("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + key + "\r\nContent-Length: 2\r\n"
                    + "Content-Length: 3\r\n\r\n{}").getBytes(StandardCharsets.US_ASCII), 10_000);
            assertTrue(a.startsWith("HTTP/1.1 400 "), key + ": " + a);
            assertTrue(a.contains("Content-Length is not one length (2, 3)"), key + ": " + a);
        }
    }

    /**
     * The newcomer's mistakes get a message that says what to do, with the same status as before: a key without
     * "Bearer ", a mistyped route, and a completions body sent to chat (or the other way round).
     */
    @Test
    void commonMistakesAreExplained() throws Exception {
        var bare = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":2"), "Authorization", "sk-test");
        assertEquals(401, bare.status(), bare.body());
        String m = bare.json().at("/error/message").asText();
        assertTrue(m.contains("'Bearer <key>'") && m.contains("no 'Bearer '"), m);
        assertFalse(m.contains("sk-test"), "the value is not echoed: " + m);
        var none = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":2"));
        assertEquals("missing API key: send 'Authorization: Bearer <key>'", none.json().at("/error/message").asText(), none.body());
        // 'Bearer' with nothing after it (HTTP drops a trailing space) lacks the key, not the scheme
        for (String empty : new String[] {"Bearer", "Bearer ", "bearer    "}) {
            var r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":2"), "Authorization", empty);
            assertEquals(401, r.status(), r.body());
            assertEquals("missing API key after 'Bearer' in the Authorization header: send 'Authorization: Bearer <key>'",
                    r.json().at("/error/message").asText(), "'" + empty + "': " + r.body());
        }
        var wrong = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":2"), "Authorization", "Bearer sk-nope");
        assertEquals("invalid API key in the Authorization header", wrong.json().at("/error/message").asText(), wrong.body());

        var typo = server.post("/v1/chat/completion", "{}", KEY);
        assertEquals(404, typo.status(), typo.body());
        assertEquals("no route for POST /v1/chat/completion; did you mean POST /v1/chat/completions?",
                typo.json().at("/error/message").asText(), typo.body());
        assertEquals("no route for GET /v1/Models; did you mean GET /v1/models?",
                server.get("/v1/Models", KEY).json().at("/error/message").asText());
        assertEquals("no route for POST /v1/embeddings", server.post("/v1/embeddings", "{}", KEY).json().at("/error/message").asText(),
                "no guess when nothing is close");

        var prompt = server.post("/v1/chat/completions", "{\"prompt\":\"Hi\"}", KEY);
        assertEquals(400, prompt.status(), prompt.body());
        assertEquals("messages", prompt.json().at("/error/param").asText(), prompt.body());
        assertTrue(prompt.json().at("/error/message").asText().contains("'prompt' belongs to /v1/completions"), prompt.body());
        var messages = server.post("/v1/completions", TestServer.chat("Hi", "\"max_tokens\":2"), KEY);
        assertEquals(400, messages.status(), messages.body());
        assertTrue(messages.json().at("/error/message").asText().contains("'messages' belongs to /v1/chat/completions"), messages.body());
    }

    @Test
    void invalidUtf8IsRefusedLikeOtherBadBytes() throws Exception {
        // overlong "/", a UTF-16 surrogate, a code point above U+10FFFF, a lone continuation byte, a cut-off character
        byte[][] bad = {{(byte) 0xC0, (byte) 0xAF}, {(byte) 0xED, (byte) 0xA0, (byte) 0x80},
                {(byte) 0xF4, (byte) 0x90, (byte) 0x80, (byte) 0x80}, {(byte) 0x80}, {(byte) 0xE2, (byte) 0x82}};
        for (byte[] b : bad) {
            byte[] pre = "{\"messages\":[{\"role\":\"user\",\"content\":\"a".getBytes(StandardCharsets.UTF_8);
            byte[] post = "\"}],\"max_tokens\":2}".getBytes(StandardCharsets.UTF_8);
            byte[] body = new byte[pre.length + b.length + post.length];
            System.arraycopy(pre, 0, body, 0, pre.length);
            System.arraycopy(b, 0, body, pre.length, b.length);
            System.arraycopy(post, 0, body, pre.length + b.length, post.length);
            String r = raw(post("HTTP/1.1", "Connection: close\r\n", body), 10_000);
            assertTrue(r.startsWith("HTTP/1.1 400"), r);
            assertTrue(r.contains("\"code\":\"invalid_json\"") && r.contains("not valid UTF-8"), r);
            assertTrue(r.contains("byte offset " + pre.length), "names where: " + r);
        }
        // UTF-16 text of ASCII characters is well-formed UTF-8 with NUL bytes between them: refused, not read as UTF-16
        // (it was answered 200)
        byte[] u16 = TestServer.chat("Hi", "\"max_tokens\":2").getBytes(StandardCharsets.UTF_16LE);
        String r16 = raw(post("HTTP/1.1", "Connection: close\r\n", u16), 10_000);
        assertTrue(r16.startsWith("HTTP/1.1 400"), r16);
        assertTrue(r16.contains("the request body is not UTF-8 JSON: it holds a NUL byte at byte offset 1, as UTF-16"), r16);
        // well-formed 2-, 3- and 4-byte characters still pass
        TestServer.Resp ok = server.post("/v1/chat/completions", TestServer.chat("é € 😀", "\"max_tokens\":2"), KEY);
        assertEquals(200, ok.status(), ok.body());
    }

    @Test
    void expect100ContinueIsAnsweredBeforeTheBody() throws Exception {
        // curl waits (one second) for 100 Continue before it sends the body; a refusal comes instead of it
        FrontChecks.expectContinueIsAnsweredBeforeTheBody(server.port, "Authorization: Bearer sk-test\r\n");
    }

    /**
     * An HTTP/1.0 stream, whether or not the client asked to keep the connection alive, ends with the connection's
     * close, and once it has ended it no longer counts as an open response (a shutdown would otherwise wait for it).
     */
    @Test
    void http10StreamEndsWithConnectionCloseAndIsNoLongerOpen() throws Exception {
        byte[] body = TestServer.chat("Hi", "\"stream\":true,\"max_tokens\":4").getBytes(StandardCharsets.UTF_8);
        for (String connection : List.of("Connection: keep-alive\r\n", "")) {
            String r = raw(post("HTTP/1.0", connection, body), 10_000);
            assertFalse(r.contains("<<timeout"), "the stream must end: " + r);
            assertTrue(r.startsWith("HTTP/1.0 200") || r.startsWith("HTTP/1.1 200"), r);
            String head = r.substring(0, r.indexOf("\r\n\r\n")).toLowerCase();
            assertTrue(head.contains("connection: close"), head);
            assertFalse(head.contains("transfer-encoding: chunked"), "HTTP/1.0 has no chunked encoding: " + head);
            assertTrue(r.contains("data: [DONE]"), r);
            assertTrue(TestServer.eventually(2_000, () -> server.state().openExchanges() == 0
                            && server.state().openGenerations() == 0),
                    connection + ": still open after the stream ended: " + server.state().openExchanges());
        }
    }

    @Test
    void usageCountsReasoningTokens() throws Exception {
        String thinking = "\"chat_template_kwargs\":{\"thinking\":true},\"temperature\":0,\"speculative_q\":0";
        JsonNode u = server.post("/v1/chat/completions", TestServer.chat("Hi", thinking), KEY).json().get("usage");
        // the scripted reasoning, its </think> included (the tokenizer encodes it as one token)
        int expected = TestServer.tokenizer().encode(TestServer.THINKING.substring(0, TestServer.THINKING.indexOf("</think>"))).length + 1;
        assertEquals(expected, u.at("/completion_tokens_details/reasoning_tokens").asInt(), u.toString());
        JsonNode plain = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":3"), KEY).json().get("usage");
        assertEquals(0, plain.at("/completion_tokens_details/reasoning_tokens").asInt(-1), plain.toString());
    }

    @Test
    void metricsLeaveOutVertxActiveRequestsGauge() throws Exception {
        server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":2"), KEY);
        String m = server.get("/metrics", KEY).body();
        assertTrue(m.contains("vertx_http_server_requests_total") || m.contains("vertx_http_server_response"), "Vert.x metrics are there");
        assertFalse(m.contains("vertx_http_server_active_requests"), "the gauge that goes negative is left out");
    }

    @Test
    void authorizationWithControlCharactersIsA401WithAnOpenAiBody() throws Exception {
        byte[] req = ("GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-\u0001test\r\n\r\n")
                .getBytes(StandardCharsets.ISO_8859_1);
        String r = raw(req, 10_000);
        assertTrue(r.startsWith("HTTP/1.1 401"), r);
        assertTrue(r.toLowerCase().contains("www-authenticate: bearer"), r);
        JsonNode e = Json.MAPPER.readTree(r.substring(r.indexOf("\r\n\r\n") + 4)).get("error");
        assertEquals("invalid_api_key", e.get("code").asText(), e.toString());
        // the header's value (a key, perhaps a real one with a typo) is neither echoed nor logged; the character is named
        assertFalse(e.get("message").asText().contains("sk-"), e.toString());
        assertEquals("a header value contains a prohibited character U+0001 (the value is not shown)",
                HttpVerticle.decodeProblem(new IllegalArgumentException("a header value contains a prohibited character '\u0001': Bearer sk-\u0001test")));
        TestServer.Resp missing = server.get("/v1/models");
        assertEquals(401, missing.status());
        assertEquals("Bearer", missing.headers().firstValue("WWW-Authenticate").orElse(null));
    }

    /**
     * Whatever the character and whoever words the message (Vert.x with a decimal code of any length or the character
     * itself, Netty with a hex code), a header's value is never shown and the character is named by its code point.
     */
    /** A header name Vert.x refuses is named with what is wrong: a blank before its colon, or its character. */
    @Test
    void aRefusedHeaderNameSaysWhatIsWrong() throws Exception {
        String prefix = "a header name cannot contain some prohibited characters, such as : ";
        assertEquals("the header name 'Host' has a blank before its colon; RFC 9112 allows none between a field name and its colon",
                HttpVerticle.decodeProblem(new IllegalArgumentException(prefix + "Host ")));
        assertEquals("the header name 'X Y' contains a prohibited character U+0020 (a field name is letters, digits and !#$%&'*+-.^_`|~)",
                HttpVerticle.decodeProblem(new IllegalArgumentException(prefix + "X Y")));
        try (java.net.Socket s = new java.net.Socket("127.0.0.1", server.port)) {
            s.setSoTimeout(10_000);
            s.getOutputStream().write("GET /health HTTP/1.1\r\nHost : x\r\n\r\n".getBytes(java.nio.charset.StandardCharsets.US_ASCII));
            String a = new String(s.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
            // this server has API keys: a 401 that says why the headers cannot be read
            assertTrue(a.startsWith("HTTP/1.1 401 ") && a.contains("the header name 'Host' has a blank before its colon"), a);
        }
    }

    @Test
    void aRefusedHeaderValueIsNeverShownAndItsCharacterIsNamed() {
        String shown = " (the value is not shown)";
        for (String[] c : new String[][]{{"1", "U+0001"}, {"11", "U+000B"}, {"12", "U+000C"}, {"31", "U+001F"},
                {"127", "U+007F"}, {"\u000b", "U+000B"}}) {
            String why = HttpVerticle.decodeProblem(new IllegalArgumentException(
                    "a header value contains a prohibited character '" + c[0] + "': Bearer sk-secret\u000bXYZ"));
            assertEquals("a header value contains a prohibited character " + c[1] + shown, why, c[0]);
        }
        assertEquals("a header value contains a prohibited character U+001B at index 3",
                HttpVerticle.decodeProblem(new IllegalArgumentException("a header value contains prohibited character 0x1b at index 3")));
        for (String m : List.of("only '\\n' is allowed after '\\r': sk-secret\rXYZ", "only ' ' and '\\t' are allowed after '\\n': sk-secret",
                "a header value must not end with '\\r' or '\\n':sk-secret\n", "a header value is odd: sk-secret")) {
            String why = HttpVerticle.decodeProblem(new IllegalArgumentException(m));
            assertFalse(why.contains("sk-secret"), why);
            assertTrue(why.endsWith(shown), why);
        }
    }

    /**
     * Netty refuses a Content-Length it cannot take as a length with "is not a number"; where the value is a number
     * all the same, what is wrong with it is said truly: "-0" is no negative number, and a number of 41 digits is as
     * much past the largest length as one of 20.
     */
    @Test
    void aContentLengthThatIsANumberButNoLengthIsNamedTruly() {
        String netty = "Content-Length value is not a number: ";
        assertEquals("Content-Length -0 has a minus sign: give the body's length in bytes, digits alone",
                HttpVerticle.decodeProblem(new IllegalArgumentException(netty + "-0")));
        assertEquals("Content-Length -000 has a minus sign: give the body's length in bytes, digits alone",
                HttpVerticle.decodeProblem(new IllegalArgumentException(netty + "-000")));
        assertEquals("Content-Length -05 is negative: give the body's length in bytes",
                HttpVerticle.decodeProblem(new IllegalArgumentException(netty + "-05")));
        String digits41 = "1".repeat(41);
        assertEquals("Content-Length " + digits41 + " is past the largest length a request can give (" + Long.MAX_VALUE + " bytes)",
                HttpVerticle.decodeProblem(new IllegalArgumentException(netty + digits41)));
        assertEquals("Content-Length value is not a number: +5", HttpVerticle.decodeProblem(new IllegalArgumentException(netty + "+5")));
    }

    @Test
    void preflightFromAnOriginNotAllowedIs403() throws Exception {
        TestServer.Resp ok = options("https://ok.example");
        assertEquals(204, ok.status());
        TestServer.Resp no = options("https://evil.example");
        assertEquals(403, no.status(), no.body());
        assertTrue(no.json().at("/error/message").asText().contains("https://evil.example"), no.body());
    }

    private static TestServer.Resp options(String origin) throws Exception {
        var b = java.net.http.HttpRequest.newBuilder(java.net.URI.create("http://127.0.0.1:" + server.port + "/v1/chat/completions"))
                .method("OPTIONS", java.net.http.HttpRequest.BodyPublishers.noBody())
                .header("Origin", origin).header("Access-Control-Request-Method", "POST");
        var r = server.http().send(b.build(), java.net.http.HttpResponse.BodyHandlers.ofString());
        return new TestServer.Resp(r.statusCode(), r.headers(), r.body());
    }

    @Test
    void toolDefinitionsAreCheckedAsOpenAiDoes() throws Exception {
        String fn = "{\"type\":\"function\",\"function\":{\"name\":\"%s\",\"parameters\":{\"type\":\"object\",\"properties\":{},\"required\":%s}}}";
        expect(TestServer.chat("Hi", "\"tools\":[" + fn.formatted("get weather", "[]") + "]"), "tools[0].function.name");
        expect(TestServer.chat("Hi", "\"tools\":[" + fn.formatted("x".repeat(65), "[]") + "]"), "tools[0].function.name");
        expect(TestServer.chat("Hi", "\"tools\":[" + fn.formatted("f", "\"city\"") + "]"), "tools[0].function.parameters.required");
        expect(TestServer.chat("Hi", "\"tools\":[" + fn.formatted("f", "[1]") + "]"), "tools[0].function.parameters.required");
        // two tools of one name: which one a call or tool_choice names would be left to chance
        JsonNode dup = expect(TestServer.chat("Hi", "\"tools\":[" + fn.formatted("f", "[]") + "," + fn.formatted("g", "[]") + ","
                + fn.formatted("f", "[]") + "]"), "tools[2].function.name");
        assertEquals("tools[2].function.name: 'f' is also the name of tools[0]; each tool needs its own name",
                dup.get("message").asText(), dup.toString());
        String noId = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":null,"
                + "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{}}}]},"
                + "{\"role\":\"tool\",\"content\":\"ok\"}],\"max_tokens\":2}";
        expect(noId, "messages[2].tool_call_id");
        // accepted: names with - and _, required as an array, arguments given as an object, a tool message with its id
        String good = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":null,"
                + "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get-weather_2\",\"arguments\":{\"city\":\"Paris\"}}}]},"
                + "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"}],\"max_tokens\":2,\"tools\":["
                + fn.formatted("get-weather_2", "[\"city\"]") + "]}";
        TestServer.Resp r = server.post("/v1/chat/completions", good, KEY);
        assertEquals(200, r.status(), r.body());
    }

    /** A 400 naming param; returns its error object. */
    private static JsonNode expect(String body, String param) throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", body, KEY);
        assertEquals(400, r.status(), r.body());
        assertEquals(param, r.json().at("/error/param").asText(), r.body());
        return r.json().get("error");
    }

    @Test
    void topKOffIsZeroOrMinusOne() throws Exception {
        for (String k : new String[]{"0", "-1"}) {
            TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"top_k\":" + k + ",\"max_tokens\":2"), KEY);
            assertEquals(200, r.status(), r.body());
        }
        assertEquals(400, server.post("/v1/chat/completions", TestServer.chat("Hi", "\"top_k\":-2"), KEY).status());
    }

        @Test
    void theModelRanOneWarmUpStepBeforeItWasReady() {
        // start() waited until the server was ready, before any request: that forward is the warm-up step
        assertEquals(1, forwardsAtReady, "one warm-up step at load");
    }
}
