package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A request whose body cannot be framed beyond doubt — Content-Length with Transfer-Encoding, a Transfer-Encoding that
 * does not end with chunked, a chunked body that cannot be read — gets a 4xx (501 for an unknown transfer coding) with
 * an OpenAI error and its connection closed, never a 500 or a connection left waiting, and nothing that follows it on
 * the connection is served; the server keeps serving. Raw sockets, since HTTP clients do not send such requests.
 */
class RequestFramingTest {
    static TestServer server;
    static final String BODY = "{\"content\":\"hi\"}";

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("server.maxBodyBytes", 4096));
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    @AfterEach
    void stillServing() throws Exception {
        TestServer.Resp r = server.post("/tokenize", BODY);
        assertEquals(200, r.status(), r.body());
    }

    /**
     * Sends the bytes on a new connection and returns all that comes back until the server closes it; a server that
     * keeps the connection open fails the test (read timeout).
     */
    static String untilClosed(String request) throws Exception {
        try (Socket s = new Socket("127.0.0.1", server.port)) {
            s.setSoTimeout(10_000);
            s.getOutputStream().write(request.getBytes(StandardCharsets.UTF_8));
            return new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    static String chunked(String body) {
        return Integer.toHexString(body.length()) + "\r\n" + body + "\r\n0\r\n\r\n";
    }

    static String post(String version, String headers) {
        return "POST /tokenize HTTP/" + version + "\r\nHost: x\r\nContent-Type: application/json\r\n" + headers + "\r\n";
    }

    /** How many answers (status lines) the bytes hold. */
    static long answers(String bytes) {
        return java.util.regex.Pattern.compile("HTTP/1\\.[01] \\d{3} ").matcher(bytes).results().count();
    }

    /** Checks that the answer is one refusal with the status and code, marked Connection: close; returns its error. */
    static JsonNode refused(String answer, int status, String code) throws Exception {
        assertTrue(answer.matches("(?s)HTTP/1\\.[01] " + status + " .*"), answer);
        assertEquals(1, answers(answer), "one answer only: " + answer);
        String head = answer.substring(0, answer.indexOf("\r\n\r\n")).toLowerCase();
        assertTrue(head.contains("\r\nconnection: close"), answer);
        assertTrue(head.contains("\r\ncontent-type: application/json"), answer);
        // answered before (or beside) the router, it still carries an id as the routes' answers do
        assertTrue(head.matches("(?s).*\r\nx-request-id: (req-[a-z0-9]{24}|job-\\d+)(\r\n.*|$)"), answer);
        JsonNode e = Json.MAPPER.readTree(answer.substring(answer.indexOf("\r\n\r\n") + 4)).get("error");
        assertEquals(code, e.get("code").asText(), answer);
        assertEquals("invalid_request_error", e.get("type").asText(), answer);
        return e;
    }

    @Test
    void contentLengthWithTransferEncodingIs400AndNothingAfterItIsServed() throws Exception {
        String smuggled = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        String body = chunked(BODY);
        for (String request : new String[]{
                post("1.1", "Content-Length: 4\r\nTransfer-Encoding: chunked\r\n") + body,
                post("1.1", "Transfer-Encoding: chunked\r\nContent-Length: 4\r\n") + body,
                // the length a proxy in front may go by covers a second request; the chunks end before it
                post("1.1", "Content-Length: " + (body.length() + smuggled.length()) + "\r\nTransfer-Encoding: chunked\r\n")
                        + body + smuggled,
                post("1.1", "Content-Length: " + BODY.length() + "\r\nTransfer-Encoding: xchunked\r\n") + BODY,
                post("1.0", "Content-Length: " + body.length() + "\r\nTransfer-Encoding: chunked\r\n") + body,
                "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"}) {
            String answer = untilClosed(request);
            JsonNode e = refused(answer, 400, "invalid_header");
            assertTrue(e.get("message").asText().contains(request.contains(" HTTP/1.0\r\n") ? "HTTP/1.0"
                    : "both Content-Length and Transfer-Encoding"), answer);
            assertFalse(answer.contains("\"status\""), "the request in the body is not answered: " + answer);
        }
    }

    /** A refusal of a head Vert.x cannot take echoes the client's request id (a chunked body's: see the test below). */
    @Test
    void refusalsBeforeTheRouteEchoTheClientsRequestId() throws Exception {
        String answer = untilClosed(post("1.1", "X-Request-Id: job-7\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n")
                + chunked(BODY));
        refused(answer, 400, "invalid_header");
        assertTrue(answer.contains("\r\nx-request-id: job-7\r\n") || answer.contains("\r\nX-Request-Id: job-7\r\n"), answer);
        // an id the server would not take (past 128 characters) is replaced by one of its own
        answer = untilClosed(post("1.1", "X-Request-Id: job-" + "9".repeat(200) + "\r\nTransfer-Encoding: gzip, chunked\r\n") + chunked(BODY));
        refused(answer, 501, "unsupported_transfer_encoding");
        assertFalse(answer.contains("job-99"), answer);
    }

    @Test
    void aBodyOfAmbiguousLengthIsRefusedOnAnyRoute() throws Exception {
        FrontChecks.ambiguousFramingIsRefusedAndNothingAfterItServed(server.port);
    }

    @Test
    void aTransferEncodingThatDoesNotEndWithChunkedIsRefused() throws Exception {
        for (String te : new String[]{"xchunked", "chunked, gzip", "chunked, chunked", "chunked\r\nTransfer-Encoding: chunked",
                "chunked;x", "chunked ;x=1"}) {
            JsonNode e = refused(untilClosed(post("1.1", "Transfer-Encoding: " + te + "\r\n") + chunked(BODY)), 400, "invalid_header");
            assertTrue(e.get("message").asText().contains("chunked"), e.toString());
        }
        JsonNode e = refused(untilClosed(post("1.0", "Transfer-Encoding: chunked\r\n") + chunked(BODY)), 400, "invalid_header");
        assertTrue(e.get("message").asText().contains("HTTP/1.0"), e.toString());
        // chunked last, but with a coding this server does not decode: 501, naming it
        e = refused(untilClosed(post("1.1", "Transfer-Encoding: gzip, chunked\r\n") + chunked(BODY)), 501,
                "unsupported_transfer_encoding");
        assertTrue(e.get("message").asText().contains("'gzip'"), e.toString());
    }

    @Test
    void aChunkedBodyThatCannotBeReadIs400AndCloses() throws Exception {
        // blanks before the size: RFC 9112's chunk-size is 1*HEXDIG, which Netty took after trimming them
        for (String size : new String[]{"zz", "fffffffffffffffffff", "-1", "100000000", "0000000100000000", "80000000",
                "10000003c", " " + Integer.toHexString(BODY.length()), "\t" + Integer.toHexString(BODY.length()),
                // a control byte in an extension: a bare CR (a front may end the line there), a NUL, a DEL
                Integer.toHexString(BODY.length()) + ";a\rb", Integer.toHexString(BODY.length()) + ";a=\u0000",
                Integer.toHexString(BODY.length()) + ";\u007f",
                // extensions past the decoder's line limit: named as a chunk-size line, not as the request line
                "10;" + "a".repeat(10_000)}) {
            String answer = untilClosed(post("1.1", "Transfer-Encoding: chunked\r\nX-Request-Id: job-8\r\n") + size + "\r\n" + BODY
                    + "\r\n0\r\n\r\n");
            JsonNode e = refused(answer, 400, "invalid_chunked_body");
            // answered beside the router, it echoes the client's id as the route's answer would
            assertTrue(answer.toLowerCase(java.util.Locale.ROOT).contains("\r\nx-request-id: job-8\r\n"), answer);
            assertTrue(e.get("message").asText().startsWith("the request's chunked body cannot be read: "), e.toString());
            if (size.startsWith("10;" + "a".repeat(20)))
                assertTrue(e.get("message").asText().contains("a chunk-size line is longer than the server reads"), e.toString());
            if (size.endsWith(";a\rb"))
                assertTrue(e.get("message").asText().contains("the chunk-size line holds the control character U+000D"), e.toString());
            if (size.equals("zz"))
                assertEquals("the request's chunked body cannot be read: a chunk's size is not a hexadecimal number: each chunk"
                        + " of a chunked body starts with its size in hexadecimal digits alone, then CRLF", e.get("message").asText());
        }
        // Content-Length twice with different values: named with both, and what to do
        JsonNode twice = refused(untilClosed(post("1.1", "Content-Length: " + BODY.length() + "\r\nContent-Length: 5\r\n") + BODY),
                400, "invalid_header");
        assertEquals("the request cannot be read: Content-Length is not one length (" + BODY.length()
                + ", 5): give the body's length once, in one Content-Length header", twice.get("message").asText());
        // a value that is no number is not repeated back
        JsonNode word = refused(untilClosed(post("1.1", "Content-Length: " + BODY.length() + "\r\nContent-Length: x<y\r\n") + BODY),
                400, "invalid_header");
        assertEquals("the request cannot be read: Content-Length is not one length: give the body's length once, in one"
                + " Content-Length header", word.get("message").asText());
        // the request before it on the connection is answered first, then the refusal
        String answer = untilClosed(post("1.1", "Content-Length: " + BODY.length() + "\r\n") + BODY
                + post("1.1", "Transfer-Encoding: chunked\r\n") + "5\r\n{\"con\r\nzz\r\n");
        assertTrue(answer.startsWith("HTTP/1.1 200 "), answer);
        refused(answer.substring(answer.indexOf("HTTP/1.1 400 ")), 400, "invalid_chunked_body");
        // a request answered before its bad chunk came (no such route): that answer, and then the connection closed
        try (Socket s = new Socket("127.0.0.1", server.port)) {
            s.setSoTimeout(10_000);
            OutputStream o = s.getOutputStream();
            o.write("POST /nope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n".getBytes(StandardCharsets.UTF_8));
            var in = s.getInputStream();
            byte[] first = new byte[12];
            for (int got = 0, n; got < first.length; got += n) assertTrue((n = in.read(first, got, first.length - got)) > 0);
            assertEquals("HTTP/1.1 404", new String(first, StandardCharsets.US_ASCII));
            o.write("zz\r\n".getBytes(StandardCharsets.UTF_8));
            answer = new String(first, StandardCharsets.US_ASCII) + new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
        assertEquals(1, answers(answer), answer);
        String metrics = server.get("/metrics").body();
        assertTrue(metrics.contains("ds4j:requests_rejected_total{reason=\"invalid_chunked_body\"} 14.0"), metrics);
        // a size line with a byte past ASCII: Netty's own index error was the message
        try (Socket s = new Socket("127.0.0.1", server.port)) {
            s.setSoTimeout(10_000);
            s.getOutputStream().write((post("1.1", "Transfer-Encoding: chunked\r\n")).getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().write(new byte[]{'1', (byte) 0xff, '\r', '\n'});
            JsonNode high = refused(new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8), 400, "invalid_chunked_body");
            assertEquals("the request's chunked body cannot be read: a chunk's size is not a hexadecimal number: each chunk"
                    + " of a chunked body starts with its size in hexadecimal digits alone, then CRLF", high.get("message").asText());
        }
        // a size that wraps to a small number (Netty reads 100000000 as 0, the last chunk): nothing after it is served
        String smuggled = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        answer = untilClosed(post("1.1", "Transfer-Encoding: chunked\r\n") + "100000000\r\n\r\n" + smuggled);
        JsonNode e = refused(answer, 400, "invalid_chunked_body");
        assertTrue(e.get("message").asText().contains("'100000000' is past the largest this server reads"), answer);
        // the largest size it reads is a size, not a refusal (the body is shorter: the connection ends first)
        assertNull(RequestFraming.oversizedChunkSize(io.netty.buffer.Unpooled.copiedBuffer("7fffffff\r\n", StandardCharsets.US_ASCII)));
        assertNull(RequestFraming.oversizedChunkSize(io.netty.buffer.Unpooled.copiedBuffer("000007fffffff;x\r\n", StandardCharsets.US_ASCII)));
        // any number of leading zeros is still 1*HEXDIG: a size after 100 zeros is read
        String ok = untilClosed(post("1.1", "Transfer-Encoding: chunked\r\nConnection: close\r\n") + "0".repeat(100) + chunked(BODY));
        assertTrue(ok.startsWith("HTTP/1.1 200 "), ok);
        assertEquals("80000000", RequestFraming.oversizedChunkSize(io.netty.buffer.Unpooled.copiedBuffer(" 80000000\r\n", StandardCharsets.US_ASCII)));
    }

    /**
     * A chunked body whose chunk sizes pass server.maxBodyBytes (4096 here) gets 413 as soon as the size that passes it
     * is read, and its connection closed: one chunk declared larger than the limit was awaited until the body's deadline
     * (a 408 after 30 s), and a body past the limit in smaller chunks, answered 413, was read to that deadline. A body of
     * exactly the limit is still read, and a request answered before its body (a 404) has its connection closed.
     */
    @Test
    void aChunkedBodyPastTheLimitIs413AtOnceAndCloses() throws Exception {
        String head = post("1.1", "Transfer-Encoding: chunked\r\n");
        String a = "a".repeat(2048);
        for (String body : new String[]{"100000\r\n" + a, "800\r\n" + a + "\r\n800\r\n" + a + "\r\n10\r\n" + "b".repeat(16),
                "1001\r\n"}) {
            long t0 = System.nanoTime();
            JsonNode e = refused(untilClosed(head + body), 413, "request_too_large");
            assertEquals("the request body is larger than the limit of 4096 bytes (server.maxBodyBytes)", e.get("message").asText());
            assertTrue(System.nanoTime() - t0 < 5_000_000_000L, "answered at once");
        }
        // answered already (no such route): that answer alone, and the connection closed
        String answer = untilClosed("POST /nope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n" + a);
        assertTrue(answer.startsWith("HTTP/1.1 404 "), answer);
        assertEquals(1, answers(answer), answer);
        // exactly the limit, in two chunks, is read
        String json = "{\"content\":\"" + "x".repeat(4096 - 14) + "\"}";
        answer = untilClosed(head.replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n") + "800\r\n" + json.substring(0, 2048)
                + "\r\n800\r\n" + json.substring(2048) + "\r\n0\r\n\r\n");
        assertTrue(answer.startsWith("HTTP/1.1 200 "), answer);
        String metrics = server.get("/metrics").body();
        assertTrue(metrics.contains("ds4j:requests_rejected_total{reason=\"request_too_large\"} 3.0"), metrics);
    }

    /**
     * A target of raw non-ASCII bytes is refused, naming the byte, and nothing after it on the connection is served
     * (it was read as Latin-1: 404 "model: '\u00c3\u00bc' does not exist"); the same character percent-encoded is
     * read as UTF-8.
     */
    @Test
    void aTargetThatIsNotAsciiIsRefused() throws Exception {
        String answer = untilClosed("GET /v1/models/\u00fc HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n");
        JsonNode e = refused(answer, 400, "invalid_path");
        assertEquals("the request cannot be read: its target (path and query) holds the byte 0xC3 at byte 12, which is not"
                + " printable ASCII: a request target is ASCII, any other character percent-encoded as UTF-8 (\u00fc is %C3%BC)",
                e.get("message").asText(), answer);
        // in a query too, and a control byte
        refused(untilClosed("GET /health?q=\u00e9 HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "invalid_path");
        assertTrue(refused(untilClosed("GET /he\u0001alth HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "invalid_path")
                .get("message").asText().contains("the byte 0x01 at byte 4"));
        // a blank or control byte that Netty would split the line at (it answered "invalid version format")
        for (String[] c : new String[][]{{"\t", "09"}, {"\u000b", "0B"}, {"\f", "0C"}, {"\r", "0D"}, {" ", "20"}}) {
            String line = "GET /v1/mo" + c[0] + "dels HTTP/1.1\r\nHost: x\r\n\r\n";
            JsonNode bad = refused(untilClosed(line + "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 400, "invalid_path");
            assertTrue(bad.get("message").asText().startsWith("the request cannot be read: its target (path and query) holds the byte 0x"
                    + c[1] + " at byte 7, which is not printable ASCII"), c[1] + ": " + bad);
        }
        // blank lines before the request are still read as before (extra spaces around the target are refused:
        // aRequestLineWithoutSingleSpacesIsNamed)
        String served = untilClosed("\r\nGET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assertTrue(served.startsWith("HTTP/1.1 200"), served);
        TestServer.Resp encoded = server.get("/v1/models/%C3%BC");
        assertEquals(404, encoded.status(), encoded.body());
        assertTrue(encoded.body().contains("'\u00fc' does not exist"), encoded.body());
    }

    /**
     * Sends a GET of the target and then a GET /health on one connection: the first must be a 400 invalid_path without
     * Connection: close, the second answered (200), as the first's framing is intact. Returns the first's error.
     */
    static JsonNode refusedKeepingTheConnection(String target) throws Exception {
        String answer = untilClosed("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n"
                + "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assertTrue(answer.startsWith("HTTP/1.1 400 "), answer);
        int headEnd = answer.indexOf("\r\n\r\n"), next = answer.indexOf("HTTP/1.1 200 ", headEnd);
        assertTrue(next > 0 && answers(answer) == 2, "the next request is served: " + answer);
        assertFalse(answer.substring(0, headEnd).toLowerCase().contains("\r\nconnection: close"), answer);
        JsonNode e = Json.MAPPER.readTree(answer.substring(headEnd + 4, next)).get("error");
        assertEquals("invalid_path", e.get("code").asText(), answer);
        assertEquals("invalid_request_error", e.get("type").asText(), answer);
        return e;
    }

    /**
     * Percent-escapes in the path that do not decode to UTF-8 are a 400 invalid_path naming them (the router decoded
     * them to U+FFFD: 404 for model '\ufffd'); the connection is kept, as for a malformed escape (it was closed, though
     * the request's framing is intact).
     */
    @Test
    void pathEscapesThatAreNotUtf8AreRefused() throws Exception {
        String[][] cases = {{"/v1/models/%C3", "%C3", "12"}, {"/v1/models/%FF", "%FF", "12"}, {"/v1/models/%ED%A0%80", "%ED%A0", "12"},
                {"/v1/models/a%E2%82", "%E2%82", "13"}, {"/v1/models/%C3a?x=%C3%BC", "%C3", "12"}, {"/v1/models/%c0%80", "%c0", "12"}};
        for (String[] c : cases) {
            JsonNode e = refusedKeepingTheConnection(c[0]);
            assertEquals("the request path's percent-escapes '" + c[1] + "' at character " + c[2] + " are not"
                    + " UTF-8: a character outside ASCII is percent-encoded as its UTF-8 bytes (\u00fc is %C3%BC)",
                    e.get("message").asText(), c[0]);
        }
        // valid UTF-8 escapes, also of four bytes, reach the route (a malformed escape: BadInputTest)
        for (String ok : new String[]{"/v1/models/%C3%BC", "/v1/models/%F0%9F%98%80", "/v1/models/%E2%82%AC"}) {
            TestServer.Resp r = server.get(ok);
            assertEquals(404, r.status(), ok + ": " + r.body());
            assertFalse(r.body().contains("\ufffd"), r.body());
        }
    }

    /**
     * A request line that does not end with an HTTP version — a space inside the target, no version, a version in small
     * letters — is a 400 invalid_request_line in HTTP/1.1 naming the line, and nothing after it is served: it was
     * Netty's "invalid version format: B" (or "text is empty"), as invalid_header, in HTTP/1.0.
     */
    @Test
    void aRequestLineWithoutAVersionIsNamed() throws Exception {
        String next = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        for (String line : new String[]{"GET /a b", "GET /a b c", "GET /a", "GET", "GET /health http/1.1", "GET /a HTTP/1.1 x",
                "GET /a HTTP/1.x"}) {
            String answer = untilClosed(line + "\r\nHost: x\r\n\r\n" + next);
            assertTrue(answer.startsWith("HTTP/1.1 400 "), line + ": " + answer);
            JsonNode e = refused(answer, 400, "invalid_request_line");
            assertEquals("the request cannot be read: its request line '" + line + "' does not end with an HTTP version: a"
                    + " request line is a method, a target and a version separated by single spaces (GET /v1/models"
                    + " HTTP/1.1), a space inside the target written %20", e.get("message").asText(), line);
        }
    }

    /**
     * A request line of an HTTP version other than 1.0 and 1.1 — HTTP/2's prior-knowledge preface, HTTP/1.2, HTTP/0.9
     * — is a 505 http_version_not_supported naming the version and the versions served, and nothing after it is served:
     * it was Vert.x's 501 with no body, in the request's own version (HTTP/2.0 501), and no log line.
     */
    @Test
    void aRequestLineOfAnotherHttpVersionIsA505NamingIt() throws Exception {
        String next = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        for (String[] c : new String[][]{{"PRI * HTTP/2.0", "HTTP/2.0"}, {"GET /health HTTP/2.0", "HTTP/2.0"},
                {"GET /health HTTP/1.2", "HTTP/1.2"}, {"GET /health HTTP/0.9", "HTTP/0.9"}}) {
            String answer = untilClosed(c[0] + "\r\nHost: x\r\n\r\n" + next);
            assertTrue(answer.startsWith("HTTP/1.1 505 "), c[0] + ": " + answer);
            JsonNode e = refused(answer, 505, "http_version_not_supported");
            assertTrue(e.get("message").asText().startsWith("the request cannot be read: its HTTP version " + c[1]
                    + " is not supported: this server speaks HTTP/1.1 and HTTP/1.0"), c[0] + ": " + e);
        }
        // on the Messages route in Anthropic's shape, as the route's own errors are (it took OpenAI's: the line's target
        // was not known)
        String answer = untilClosed("POST /v1/messages HTTP/1.2\r\nHost: x\r\n\r\n");
        assertTrue(answer.startsWith("HTTP/1.1 505 "), answer);
        JsonNode body = Json.MAPPER.readTree(answer.substring(answer.indexOf("\r\n\r\n") + 4));
        assertEquals("error", body.path("type").asText(), answer);
        assertTrue(body.path("error").path("message").asText().contains("its HTTP version HTTP/1.2 is not supported"), answer);
    }

    /**
     * A client that goes on sending after its head was refused (a body behind a 505 for its version or a 400 for both
     * Content-Length and Transfer-Encoding; HTTP/2 frames behind the prior-knowledge preface) gets to write it and reads
     * the whole answer: the server reads and drops the rest before it closes, as after a 413 for a chunked body. Closed
     * at once, the connection answered the client's next bytes with a reset, and the client saw a broken pipe instead.
     */
    @Test
    void aClientStillSendingAfterItsHeadWasRefusedReadsTheWholeAnswer() throws Exception {
        byte[] piece = "y".repeat(65536).getBytes(StandardCharsets.US_ASCII);
        for (String[] c : new String[][]{{"POST /tokenize HTTP/1.2\r\nHost: x\r\nContent-Length: 4194304\r\n\r\n", "505",
                "http_version_not_supported"}, {"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 4194304\r\n"
                + "Transfer-Encoding: chunked\r\n\r\n", "400", "invalid_header"}}) {
            try (Socket s = new Socket("127.0.0.1", server.port)) {
                s.setSoTimeout(10_000);
                OutputStream o = s.getOutputStream();
                o.write(c[0].getBytes(StandardCharsets.US_ASCII));
                o.flush();
                java.io.InputStream in = s.getInputStream();
                assertEquals("HTTP/1.1 " + c[1], new String(in.readNBytes(12), StandardCharsets.US_ASCII), c[0]);
                // the answer is out: whatever the client sends now comes after the server decided to close
                for (int i = 0; i < 64; i++) {
                    o.write(piece);
                    o.flush();
                    if (i == 0) Thread.sleep(100);  // time for a reset to come back, were the connection closed
                }
                String rest = new String(in.readAllBytes(), StandardCharsets.UTF_8);
                assertTrue(rest.contains(c[2]), c[0] + ": " + rest);
            }
        }
        assertEquals(200, server.post("/tokenize", BODY).status(), "still serving");
    }

    /**
     * A request line whose parts are not separated by single spaces — a space after the version, two between two parts,
     * none but spaces for a target — is a 400 invalid_request_line naming the line, as one without a version is, and
     * nothing after it is served: the space after the version was Netty's "Illegal character in request line: 0x20" as
     * invalid_header, and two spaces were served.
     */
    @Test
    void aRequestLineWithoutSingleSpacesIsNamed() throws Exception {
        String next = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        String[][] cases = {{"GET /health HTTP/1.1 ", "has a space after its HTTP version"},
                {"GET /health HTTP/1.1  ", "has a space after its HTTP version"},
                {"GET  /health HTTP/1.1", "has more than one space between two of its parts"},
                {"GET /health  HTTP/1.1", "has more than one space between two of its parts"},
                {"GET   HTTP/1.1", "has no target"}};
        for (String[] c : cases) {
            String answer = untilClosed(c[0] + "\r\nHost: x\r\n\r\n" + next);
            assertTrue(answer.startsWith("HTTP/1.1 400 "), c[0] + ": " + answer);
            JsonNode e = refused(answer, 400, "invalid_request_line");
            assertEquals("the request cannot be read: its request line '" + c[0] + "' " + c[1] + ": a request line is a"
                    + " method, a target and a version separated by single spaces (GET /v1/models HTTP/1.1), a space"
                    + " inside the target written %20", e.get("message").asText(), c[0]);
        }
    }

    /**
     * A blank or control byte in the target of a request line after empty lines is refused as without them, also when
     * the empty line comes in a segment of its own: the empty line was taken for the request line, and Netty answered
     * "invalid version format".
     */
    @Test
    void aTargetAfterEmptyLinesIsChecked() throws Exception {
        String bad = "GET /v1/mo\tdels HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        for (String blank : new String[]{"\r\n", "\n", "\r\n\r\n"}) {
            JsonNode e = refused(untilClosed(blank + bad), 400, "invalid_path");
            assertTrue(e.get("message").asText().contains("holds the byte 0x09 at byte 7"), e.toString());
        }
        try (Socket s = new Socket("127.0.0.1", server.port)) {
            s.setSoTimeout(10_000);
            s.setTcpNoDelay(true);
            s.getOutputStream().write("\r\n".getBytes(StandardCharsets.UTF_8));
            s.getOutputStream().flush();
            Thread.sleep(200);
            s.getOutputStream().write(bad.getBytes(StandardCharsets.UTF_8));
            String answer = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(refused(answer, 400, "invalid_path").get("message").asText().contains("the byte 0x09"), answer);
        }
    }

    /**
     * A '%' that is no escape after the lead of a UTF-8 sequence is a 400 invalid_path naming it as malformed, quoted no
     * further than the path (the scanner read past the target's end, and the connection closed without an answer), as
     * one alone is; the connection is kept for both.
     */
    @Test
    void anIncompleteEscapeAfterALeadIsNamed() throws Exception {
        String[][] cases = {{"/v1/models/%C3%", "%", "15"}, {"/v1/models/%C3%4", "%4", "15"}, {"/v1/models/%E2%82%", "%", "18"},
                {"/v1/models/%F0%9F%98%", "%", "21"}, {"/v1/models/%C3%#", "%", "15"}, {"/v1/models/%C3%ZZ", "%ZZ", "15"},
                {"/v1/models/%C3%?x=1", "%", "15"}, {"/v1/models/%ZZ", "%ZZ", "12"}, {"/v1/models/%FF%ZZ", "%FF", "12"}};
        for (String[] c : cases) {
            JsonNode e = refusedKeepingTheConnection(c[0]);
            if (c[1].equals("%FF")) {
                assertTrue(e.get("message").asText().startsWith("the request path's percent-escapes '%FF' at character 12"), c[0]);
                continue;
            }
            assertEquals("the request path has a malformed percent-escape '" + c[1] + "' at character "
                    + c[2] + ": a '%' must be followed by two hexadecimal digits (a literal '%' is written %25)",
                    e.get("message").asText(), c[0]);
        }
    }

    /**
     * An escaped NUL in the path is a 400 invalid_path naming it (it reached the route as part of a model's name), the
     * connection kept.
     */
    @Test
    void anEscapedNulIsRefused() throws Exception {
        for (String[] c : new String[][]{{"/v1/models/%00", "12"}, {"/v1/models/a%00b", "13"}}) {
            JsonNode e = refusedKeepingTheConnection(c[0]);
            assertEquals("the request path's percent-escape '%00' at character " + c[1] + " is a NUL byte,"
                    + " which no path holds", e.get("message").asText(), c[0]);
        }
    }

    /**
     * A Host that is present but no host[:port], or Host given twice, is a 400 invalid_header naming the value (escaped),
     * and nothing after it on the connection is served; it was taken for a missing Host ("the 'Host' header is
     * required", invalid_request) with the connection kept. Valid forms are still served, an empty port and a port with
     * leading zeros among them (RFC 3986: port = *DIGIT; they were refused).
     */
    @Test
    void anInvalidOrRepeatedHostIsRefused() throws Exception {
        String next = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        String[][] bad = {{"\u00fc", "\\xC3\\xBC"}, {"a b", "a b"}, {"[::1", "[::1"}, {"x:99999999", "x:99999999"},
                {"x:abc", "x:abc"}, {"x/y", "x/y"}, {"x@y", "x@y"}, {"x:65536", "x:65536"}, {"[::g]:80", "[::g]:80"},
                {"x:0000065536", "x:0000065536"}, {"x:-1", "x:-1"}, {"x: 80", "x: 80"}};
        for (String[] h : bad) {
            String answer = untilClosed("GET /health HTTP/1.1\r\nHost: " + h[0] + "\r\n\r\n" + next);
            JsonNode e = refused(answer, 400, "invalid_header");
            assertTrue(e.get("message").asText().startsWith("the request cannot be read: its Host header '" + h[1] + "' is invalid:"),
                    h[0] + ": " + answer);
        }
        // a folded Host line reads as one value with a blank, and the answer says that folding may be why
        JsonNode folded = refused(untilClosed("GET /health HTTP/1.1\r\nHost: a\r\n folded: x\r\n\r\n" + next), 400,
                "invalid_header");
        assertTrue(folded.get("message").asText().endsWith("; a blank in it may come from obsolete line folding (a header"
                + " line that starts with a space or tab continues the line before it)"), folded.toString());
        for (String hosts : new String[]{"Host: x\r\nHost: y\r\n", "Host: x\r\nHost: x\r\n"}) {
            JsonNode e = refused(untilClosed("GET /health HTTP/1.1\r\n" + hosts + "\r\n" + next), 400, "invalid_header");
            assertEquals("the request cannot be read: it has 2 Host headers; a request has exactly one (RFC 9112 section 3.2)",
                    e.get("message").asText());
        }
        // RFC 3986's port is *DIGIT: an empty port and leading zeros are valid
        for (String good : new String[]{"localhost", "localhost:8080", "127.0.0.1:1", "[::1]", "[::1]:65535", "a-b.example.org.",
                "x:000080", "x:", "[::1]:", "x:0000065535", "x:0"}) {
            try (Socket s = new Socket("127.0.0.1", server.port)) {
                s.setSoTimeout(10_000);
                s.getOutputStream().write(("GET /health HTTP/1.1\r\nHost: " + good + "\r\nConnection: close\r\n\r\n")
                        .getBytes(StandardCharsets.UTF_8));
                String answer = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
                assertTrue(answer.startsWith("HTTP/1.1 200"), good + ": " + answer);
            }
        }
    }

    /**
     * A Host with a percent-escape is a 400 invalid_header naming it, the connection closed and nothing after it served,
     * in HTTP/1.1 and 1.0: Vert.x's Host parsing threw on it, and the connection was left without an answer.
     */
    @Test
    void aHostWithAPercentIsRefused() throws Exception {
        String next = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
        for (String version : new String[]{"1.1", "1.0"})
            for (String h : new String[]{"%41", "%00", "%ff", "a%2fb", "%20", "%", "x%4"}) {
                String answer = untilClosed("GET /health HTTP/" + version + "\r\nHost: " + h + "\r\n\r\n" + next);
                JsonNode e = refused(answer, 400, "invalid_header");
                assertEquals("the request cannot be read: its Host header '" + h + "' is invalid: it holds '%', and"
                        + " percent-escapes in a Host are not accepted: give the host name as is", e.get("message").asText(), answer);
            }
    }

    @Test
    void aWellFramedChunkedBodyIsReadAndTheConnectionKept() throws Exception {
        try (Socket s = new Socket("127.0.0.1", server.port)) {
            s.setSoTimeout(10_000);
            OutputStream o = s.getOutputStream();
            var in = new java.io.BufferedReader(new java.io.InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
            // the coding's name in any letter case; then a second request on the same connection; then chunk extensions
            // (a token, a quoted string with a blank and a TAB, bytes past ASCII), which are read past
            String ext = Integer.toHexString(BODY.length()) + ";a=b;c=\"x y\tz\u00e9\"\r\n" + BODY + "\r\n0\r\n\r\n";
            for (String te : new String[]{"chunked", "Chunked", "chunked "}) {
                o.write((post("1.1", "Transfer-Encoding: " + te.strip() + "\r\n") + (te.endsWith(" ") ? ext : chunked(BODY)))
                        .getBytes(StandardCharsets.UTF_8));
                assertTrue(in.readLine().startsWith("HTTP/1.1 200 "), te);
                int length = -1;
                for (String h = in.readLine(); !h.isEmpty(); h = in.readLine())
                    if (h.toLowerCase().startsWith("content-length:")) length = Integer.parseInt(h.substring(15).trim());
                char[] body = new char[length];
                for (int got = 0, n; got < length; got += n) assertTrue((n = in.read(body, got, length - got)) > 0);
                assertTrue(new String(body).contains("\"tokens\""), new String(body));
            }
        }
    }
}
