package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;

import java.io.ByteArrayOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Locale;
import java.util.SortedSet;
import java.util.TreeSet;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Checks both HTTP fronts must pass alike, a single server and a cluster gateway (its answers relayed from an engine
 * serving the scripted model): each is run by a test of each front, against its port.
 */
public final class FrontChecks {
    /** How long a check waits for an answer that should come at once: far below limits.bodyReadTimeoutMs's default. */
    static final int PROMPT_MS = 5_000;

    private FrontChecks() {}

    /**
     * A client that sends {@code Expect: 100-continue} and holds its body back until told: a declared length over any
     * server.maxBodyBytes gets 413 at once, a compressed body 415 at once, and a body within the limit 100 Continue,
     * then the answer once it is sent.
     * @param headers extra header lines (each ending in CRLF), e.g. the API key
     */
    public static void expectContinueIsAnsweredBeforeTheBody(int port, String headers) throws Exception {
        String head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + headers
                + "Expect: 100-continue\r\n";
        long overAnyLimit = (1L << 30) + 1;  // server.maxBodyBytes is at most 1 GiB
        SlowClientTest.Answer big = heldBack(port, head + "Content-Length: " + overAnyLimit + "\r\n\r\n");
        assertTrue(big.statusLine().startsWith("HTTP/1.1 413"), big.toString());
        JsonNode e = Json.MAPPER.readTree(big.body()).get("error");
        assertEquals("request_too_large", e.get("code").asText(), big.toString());
        assertTrue(e.get("message").asText().contains("(" + overAnyLimit + " bytes)"), big.toString());
        SlowClientTest.Answer gzip = heldBack(port, head + "Content-Encoding: gzip\r\nContent-Length: 20\r\n\r\n");
        assertTrue(gzip.statusLine().startsWith("HTTP/1.1 415"), gzip.toString());
        assertTrue(gzip.body().contains("\"unsupported_content_encoding\""), gzip.toString());
        assertEquals("identity", gzip.headers().get("accept-encoding"), gzip.toString());

        byte[] body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2}".getBytes(StandardCharsets.UTF_8);
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(PROMPT_MS);
            OutputStream o = s.getOutputStream();
            o.write((head + "Content-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            o.flush();
            String interim;
            try {
                interim = new String(s.getInputStream().readNBytes(25), StandardCharsets.US_ASCII);
            } catch (SocketTimeoutException t) {
                throw new AssertionError("no 100 Continue within " + PROMPT_MS + " ms: the server waits for the body the client holds back", t);
            }
            assertEquals("HTTP/1.1 100 Continue\r\n\r\n", interim);
            o.write(body);
            o.flush();
            SlowClientTest.Answer a = SlowClientTest.readAnswer(s.getInputStream());
            assertTrue(a.statusLine().startsWith("HTTP/1.1 200"), a.toString());
        }
    }

    /** Sends a request's head only, holding its body back, and reads the one answer that should come at once. */
    private static SlowClientTest.Answer heldBack(int port, String head) throws Exception {
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(PROMPT_MS);
            s.getOutputStream().write(head.getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().flush();
            try {
                return SlowClientTest.readAnswer(s.getInputStream());
            } catch (SocketTimeoutException t) {
                throw new AssertionError("no answer within " + PROMPT_MS + " ms to a request whose body is held back: "
                        + head.replace("\r\n", " | "), t);
            }
        }
    }

    /**
     * GET, HEAD and OPTIONS requests that declare a body and send only part of it: each gets at once the status it gets
     * without a body (the answers never depend on one), not a 408 once the body is late.
     */
    public static void bodilessMethodsAreAnsweredWithoutWaitingForTheirBodies(int port) throws Exception {
        for (String[] r : new String[][]{{"GET", "/v1/models/scripted"}, {"HEAD", "/v1/models/scripted"},
                {"GET", "/v1/models/nope"}, {"OPTIONS", "/v1/chat/completions"}}) {
            String line = r[0] + " " + r[1] + " HTTP/1.1\r\nHost: x\r\n";
            String plain = statusLine(port, line + "\r\n", "");
            String stalled = statusLine(port, line + "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n", "{\"a");
            assertEquals(plain, stalled, r[0] + " " + r[1]);
        }
    }

    /** The status line of the answer to a request, read within {@link #PROMPT_MS}. */
    private static String statusLine(int port, String head, String part) throws Exception {
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(PROMPT_MS);
            s.getOutputStream().write((head + part).getBytes(StandardCharsets.US_ASCII));
            s.getOutputStream().flush();
            InputStream in = s.getInputStream();
            ByteArrayOutputStream got = new ByteArrayOutputStream();
            try {
                for (int b; !got.toString(StandardCharsets.US_ASCII).contains("\r\n"); got.write(b))
                    if ((b = in.read()) < 0) throw new AssertionError("the connection closed after: " + got);
            } catch (SocketTimeoutException t) {
                throw new AssertionError("no answer within " + PROMPT_MS + " ms to " + head.replace("\r\n", " | ")
                        + " with " + part.length() + " bytes of its body", t);
            }
            return got.toString(StandardCharsets.US_ASCII).trim();
        }
    }

    /** Paths of the playground's folder, some written other ways, some of a directory, some of no file. */
    static final List<String> STATIC_PATHS = List.of("/", "/index.html", "/app.css", "/app.js", "/vendor/README.md",
            "/vendor/dompurify/LICENSE", "/vendor/marked/marked.umd.js", "/app.%6as", "/index.html/", "/vendor/highlight.js",
            "/vendor/highlight.js/", "/no-such-file.html", "/v1/nothing");

    /**
     * HEAD on the playground's paths gets GET's status and headers, its Content-Type and length included (a Date may
     * turn to the next second between the two); a file's type follows the file served, however its path was written,
     * and a HEAD with a Range is answered as without one.
     */
    public static void staticHeadsMatchGets(int port) throws Exception {
        for (String path : STATIC_PATHS) {
            String get = raw(port, "GET", path), head = raw(port, "HEAD", path);
            assertTrue(head.endsWith("\r\n\r\n"), "no body: " + head);
            assertEquals(headLinesButDate(get), headLinesButDate(head), path + ": GET's status and headers");
            int length = get.substring(get.indexOf("\r\n\r\n") + 4).getBytes(StandardCharsets.UTF_8).length;
            assertTrue(head.toLowerCase(Locale.ROOT).contains("content-length: " + length + "\r\n"), path + ": " + head);
        }
        // a Range is GET's alone: a HEAD with one is answered as without it, with the whole file's length
        String whole = raw(port, "HEAD", "/app.js", "");
        for (String range : List.of("bytes=0-9", "bytes=99999999-", "bytes=-10")) {
            String head = raw(port, "HEAD", "/app.js", "Range: " + range + "\r\n");
            assertEquals(headLinesButDate(whole), headLinesButDate(head), "HEAD with Range: " + range);
        }
        assertTrue(raw(port, "GET", "/app.js", "Range: bytes=0-9\r\n").startsWith("HTTP/1.1 206"), "GET's range still served");
        assertEquals(contentType(raw(port, "GET", "/app.js")), contentType(raw(port, "GET", "/app.%6as")));
        assertEquals("text/javascript;charset=UTF-8", contentType(raw(port, "GET", "/app.js")));
        assertEquals("text/html;charset=UTF-8", contentType(raw(port, "GET", "/")));
        // a file's path with a trailing '/' sends the client to the file's own path (served there, the page's relative
        // links would resolve under it); a folder's keeps its '/'
        for (String[] r : new String[][]{{"/index.html/", "/index.html"}, {"/app.js//?v=2", "/app.js?v=2"}, {"//app.css/", "/app.css"}}) {
            String a = raw(port, "GET", r[0]);
            assertTrue(a.startsWith("HTTP/1.1 301"), r[0] + ": " + a);
            assertTrue(a.contains("\r\nlocation: " + r[1] + "\r\n") || a.contains("\r\nLocation: " + r[1] + "\r\n"), r[0] + ": " + a);
        }
        assertTrue(raw(port, "GET", "/").startsWith("HTTP/1.1 200"));
        // the vendored notices are text to read, not files to save
        for (String text : List.of("/vendor/dompurify/LICENSE", "/vendor/dompurify/LICENSE-MPL", "/vendor/README.md"))
            assertEquals("text/plain;charset=UTF-8", contentType(raw(port, "GET", text)), text);
    }

    /**
     * A request Vert.x cannot parse (a bad Content-Length, a header line with a space in its name: 400
     * {@code invalid_header}; a header past the decoder's limit: 431 {@code request_header_fields_too_large}) gets
     * the OpenAI error body and the connection closed, from a single server and from a cluster gateway alike.
     */
    public static void undecodableRequestsGetTheJsonError(int port) throws Exception {
        for (String[] r : new String[][]{{"GET", "/health", "Content-Length: -1\r\n", "400", "invalid_header"},
                {"GET", "/health", "Bad Header: y\r\n", "400", "invalid_header"},
                {"GET", "/health", "X-Long: " + "b".repeat(9000) + "\r\n", "431", "request_header_fields_too_large"}}) {
            String a = raw(port, r[0], r[1], r[2]);
            String what = r[2].length() > 40 ? "a long header" : r[2].trim();
            assertTrue(a.startsWith("HTTP/1.1 " + r[3]), what + ": " + a);
            assertTrue(a.toLowerCase(Locale.ROOT).contains("\r\ncontent-type: application/json"), what + ": " + a);
            assertTrue(a.toLowerCase(Locale.ROOT).matches("(?s).*\r\nx-request-id: req-[a-z0-9]{24}\r\n.*"), what + ": " + a);
            JsonNode e = Json.MAPPER.readTree(a.substring(a.indexOf("\r\n\r\n") + 4)).get("error");
            assertNotNull(e, what + ": " + a);
            assertEquals(r[4], e.get("code").asText(), what + ": " + a);
        }
        // a Content-Length that is a number but no length: named for what is wrong with it (Netty says "is not a
        // number"), a value that is no number keeps that wording
        for (String[] h : new String[][]{{"-5", "Content-Length -5 is negative: give the body's length in bytes"},
                {"99999999999999999999", "Content-Length 99999999999999999999 is past the largest length a request can give ("
                        + Long.MAX_VALUE + " bytes)"}, {"abc", "Content-Length value is not a number: abc"}}) {
            String a = raw(port, "POST", "/v1/chat/completions", "Content-Length: " + h[0] + "\r\n");
            assertTrue(a.startsWith("HTTP/1.1 400"), h[0] + ": " + a);
            assertEquals("the request cannot be read: " + h[1],
                    Json.MAPPER.readTree(a.substring(a.indexOf("\r\n\r\n") + 4)).at("/error/message").asText(), h[0]);
        }
        // a value with a prohibited character (an API key, perhaps) is neither echoed nor logged, whatever the
        // character's code, in any header; the character is named by its code point
        for (String[] h : new String[][]{{"Authorization: Bearer sk-secret\u000bXYZ", "U+000B"},
                {"Authorization: Bearer sk-secret\u007fXYZ", "U+007F"}, {"X-Note: sk-secret\u001fXYZ", "U+001F"},
                {"X-Note: sk-secret\u0001XYZ", "U+0001"}}) {
            try (LogCapture log = new LogCapture()) {
                String a = raw(port, "GET", "/v1/models", h[0] + "\r\n");
                assertTrue(a.startsWith("HTTP/1.1 400"), h[1] + ": " + a);
                String message = Json.MAPPER.readTree(a.substring(a.indexOf("\r\n\r\n") + 4)).at("/error/message").asText();
                assertEquals("the request cannot be read: a header value contains a prohibited character " + h[1]
                        + " (the value is not shown)", message, h[1]);
                assertEquals(List.of(), log.linesWith("sk-secret"), h[1] + ": the value is not logged");
            }
        }
    }

    /**
     * A GET whose Range no part of the file satisfies gets 416 with {@code Content-Range: bytes *}{@code /LENGTH} and the
     * usual OpenAI error body, and nothing is logged above DEBUG for it: any client can send such ranges.
     */
    public static void unsatisfiableRangeIsA416WithTheErrorBody(int port) throws Exception {
        String whole = raw(port, "GET", "/app.js");
        int length = whole.substring(whole.indexOf("\r\n\r\n") + 4).getBytes(StandardCharsets.UTF_8).length;
        try (LogCapture log = new LogCapture()) {
            // a first byte at or past the file's end, also one past anything a long holds
            for (String range : List.of("bytes=99999999-", "bytes=" + length + "-", "bytes=99999999999999999999-")) {
                String a = raw(port, "GET", "/app.js", "Range: " + range + "\r\n");
                assertTrue(a.startsWith("HTTP/1.1 416"), range + ": " + a);
                String head = a.substring(0, a.indexOf("\r\n\r\n")).toLowerCase(Locale.ROOT);
                assertTrue(head.contains("\r\ncontent-range: bytes */" + length + "\r\n"), range + ": " + a);
                assertTrue(head.contains("\r\ncontent-type: application/json\r\n"), range + ": " + a);
                JsonNode e = Json.MAPPER.readTree(a.substring(a.indexOf("\r\n\r\n") + 4)).get("error");
                assertNotNull(e, range + ": " + a);
                assertEquals("invalid_request_error", e.get("type").asText(), a);
                assertEquals("range_not_satisfiable", e.get("code").asText(), a);
                assertTrue(e.get("message").asText().contains(length + " bytes"), a);
            }
            // nothing above DEBUG (at debug, as a test before this one may leave the level, the DEBUG line is fine)
            List<String> logged = log.lines().stream().filter(l -> !l.contains("[DEBUG]") && (l.contains("Unhandled")
                    || l.contains("/app.js") || l.contains("\tat "))).toList();
            assertTrue(logged.isEmpty(), "logged above DEBUG for a client's unsatisfiable range: " + logged);
        }
        // the ranges it can serve still are
        assertTrue(raw(port, "GET", "/app.js", "Range: bytes=" + (length - 1) + "-\r\n").startsWith("HTTP/1.1 206"));
    }

    /**
     * A request line longer than the server's limit (4096 bytes) gets 414 with the OpenAI error body naming the limit,
     * not the decoder's bare 400, and the connection closed; in HTTP/1.1, the server's version (the decoder's stand-in
     * for the request it could not read was HTTP/1.0, and so was the answer's status line).
     */
    public static void overLongRequestLineIsA414WithTheErrorBody(int port) throws Exception {
        String a = raw(port, "GET", "/" + "a".repeat(5000));
        assertTrue(a.startsWith("HTTP/1.1 414 "), a);
        String head = a.substring(0, a.indexOf("\r\n\r\n")).toLowerCase(Locale.ROOT);
        assertTrue(head.contains("\r\ncontent-type: application/json"), a);
        assertTrue(head.contains("\r\nconnection: close"), a);
        // its path was not read: it gets an id all the same (an API path's answer would carry one)
        String id = head.replaceAll("(?s).*\r\nx-request-id: (req-[a-z0-9]{24}).*", "$1");
        assertTrue(id.matches("req-[a-z0-9]{24}"), a);
        JsonNode e = Json.MAPPER.readTree(a.substring(a.indexOf("\r\n\r\n") + 4)).get("error");
        assertNotNull(e, a);
        assertEquals("invalid_request_error", e.get("type").asText(), a);
        assertEquals("uri_too_long", e.get("code").asText(), a);
        assertTrue(e.get("message").asText().contains("4096 bytes"), a);
        // the line, not only its path, is what is too long: a long method gets the same words, and so does the log line
        // (it said the decoder's "An HTTP line is larger than 4096 bytes.")
        try (LogCapture log = new LogCapture()) {
            a = raw(port, "G".repeat(5000), "/");
            assertTrue(a.startsWith("HTTP/1.1 414 "), a);
            assertTrue(a.contains("the request line is longer than 4096 bytes, the server's limit: shorten it"), a);
            assertTrue(TestServer.eventually(2000, () -> !log.linesWith("rejected with 414: the request line is longer than"
                    + " 4096 bytes, the server's limit").isEmpty()), log.lines().toString());
        }
        // a line within the limit is still routed
        assertTrue(raw(port, "GET", "/" + "a".repeat(3000)).startsWith("HTTP/1.1 404"));
    }

    /**
     * Ranges RFC 9110 says how to serve: a last position past the file's end, even past what a long holds, is the
     * file's end (206 with the rest of the file); a Range with an If-Range the file does not match (no answer carries a
     * validator, so none does) is ignored: 200 with the whole file, also where the range alone would be a 416.
     */
    public static void rangesPastALongAndStaleIfRangesAreServedAsRfc9110Says(int port) throws Exception {
        String whole = raw(port, "GET", "/app.js");
        String body = whole.substring(whole.indexOf("\r\n\r\n") + 4);
        int length = body.getBytes(StandardCharsets.UTF_8).length;
        for (String range : List.of("bytes=0-99999999999999999999", "bytes=0-" + Long.MAX_VALUE, "bytes=0-" + length)) {
            String a = raw(port, "GET", "/app.js", "Range: " + range + "\r\n");
            assertTrue(a.startsWith("HTTP/1.1 206"), range + ": " + a);
            assertTrue(a.toLowerCase(Locale.ROOT).contains("\r\ncontent-range: bytes 0-" + (length - 1) + "/" + length + "\r\n"), range + ": " + a);
            assertEquals(body, a.substring(a.indexOf("\r\n\r\n") + 4), range);
        }
        String tail = raw(port, "GET", "/app.js", "Range: bytes=10-99999999999999999999\r\n");
        assertTrue(tail.startsWith("HTTP/1.1 206"), tail);
        assertTrue(tail.toLowerCase(Locale.ROOT).contains("\r\ncontent-range: bytes 10-" + (length - 1) + "/" + length + "\r\n"), tail);
        // a suffix range: the last N bytes (206), the whole file where it is shorter; a suffix of 0 asks no byte (416)
        String last5 = raw(port, "GET", "/app.js", "Range: bytes=-5\r\n");
        assertTrue(last5.startsWith("HTTP/1.1 206"), last5);
        assertTrue(last5.toLowerCase(Locale.ROOT).contains("\r\ncontent-range: bytes " + (length - 5) + "-" + (length - 1) + "/" + length + "\r\n"), last5);
        assertEquals(new String(java.util.Arrays.copyOfRange(body.getBytes(StandardCharsets.UTF_8), length - 5, length), StandardCharsets.UTF_8),
                last5.substring(last5.indexOf("\r\n\r\n") + 4));
        for (String range : List.of("bytes=-" + (length + 10), "bytes=-99999999999999999999")) {
            String a = raw(port, "GET", "/app.js", "Range: " + range + "\r\n");
            assertTrue(a.startsWith("HTTP/1.1 206") && a.toLowerCase(Locale.ROOT).contains("\r\ncontent-range: bytes 0-" + (length - 1) + "/" + length + "\r\n"), range + ": " + a);
        }
        assertTrue(raw(port, "GET", "/app.js", "Range: bytes=-0\r\n").startsWith("HTTP/1.1 416"));
        assertTrue(raw(port, "GET", "/", "Range: bytes=-5\r\n").startsWith("HTTP/1.1 206"), "a folder's index page too");
        // a folder without an index page is no page: 404 at once, not a redirect to the same path with '/' (a 404)
        for (String dir : List.of("/vendor", "/vendor/", "/vendor/highlight.js"))
            assertTrue(raw(port, "GET", dir).startsWith("HTTP/1.1 404"), dir);
        // a last position before the first: an invalid range, so the Range is ignored (200, the whole file), not a 416
        for (String range : List.of("bytes=5-3", "bytes=1-0")) {
            String a = raw(port, "GET", "/app.js", "Range: " + range + "\r\n");
            assertTrue(a.startsWith("HTTP/1.1 200"), range + ": " + a);
            assertEquals(body, a.substring(a.indexOf("\r\n\r\n") + 4), range);
        }
        for (String ifRange : List.of("\"stale\"", "W/\"weak\"", "Thu, 01 Jan 1970 00:00:00 GMT")) {
            for (String range : List.of("bytes=0-9", "bytes=99999999-", "bytes=-10")) {
                String a = raw(port, "GET", "/app.js", "Range: " + range + "\r\nIf-Range: " + ifRange + "\r\n");
                assertTrue(a.startsWith("HTTP/1.1 200"), ifRange + ", " + range + ": " + a);
                assertFalse(a.toLowerCase(Locale.ROOT).contains("\r\ncontent-range:"), ifRange + ", " + range + ": " + a);
                assertEquals(body, a.substring(a.indexOf("\r\n\r\n") + 4), ifRange + ", " + range);
            }
        }
    }

    /**
     * OPTIONS on a path no route answers gets the 404 any other method gets there (with its "did you mean"), and a CORS
     * preflight there 204 from an allowed origin, 403 from another: a gateway answers it itself, as a single server does.
     * @param origin an origin server.cors.allowedOrigins allows
     */
    public static void optionsOnAnUnknownPathIsAnsweredAsOnASingleServer(int port, String origin) throws Exception {
        for (String[] r : new String[][]{{"/nope", "no route for OPTIONS /nope"},
                {"/v1/chat/completion", "no route for OPTIONS /v1/chat/completion; did you mean POST /v1/chat/completions?"},
                {"/index.html", "no route for OPTIONS /index.html"}}) {
            String a = raw(port, "OPTIONS", r[0]);
            assertTrue(a.startsWith("HTTP/1.1 404"), r[0] + ": " + a);
            JsonNode e = Json.MAPPER.readTree(a.substring(a.indexOf("\r\n\r\n") + 4)).get("error");
            assertEquals("not_found", e.get("code").asText(), a);
            assertEquals(r[1], e.get("message").asText(), a);
        }
        String ok = raw(port, "OPTIONS", "/nope", "Origin: " + origin + "\r\nAccess-Control-Request-Method: POST\r\n");
        assertTrue(ok.startsWith("HTTP/1.1 204"), ok);
        assertTrue(ok.toLowerCase(Locale.ROOT).contains("\r\naccess-control-allow-origin: " + origin + "\r\n"), ok);
        String no = raw(port, "OPTIONS", "/nope", "Origin: http://elsewhere.example\r\nAccess-Control-Request-Method: POST\r\n");
        assertTrue(no.startsWith("HTTP/1.1 403"), no);
        assertTrue(no.contains("\"cors_origin_not_allowed\""), no);
    }

    /**
     * On a front with API keys: OPTIONS on an API path no route answers needs the key as any other method there (401),
     * and a CORS preflight there from an allowed origin is answered without one (204), as browsers send it.
     * @param origin an origin server.cors.allowedOrigins allows
     */
    public static void optionsOnAnUnknownApiPathNeedsTheKeyButAPreflightDoesNot(int keyedPort, String origin) throws Exception {
        String a = raw(keyedPort, "OPTIONS", "/v1/nothing");
        assertTrue(a.startsWith("HTTP/1.1 401"), a);
        assertTrue(a.contains("\"invalid_api_key\""), a);
        String ok = raw(keyedPort, "OPTIONS", "/v1/nothing", "Origin: " + origin + "\r\nAccess-Control-Request-Method: POST\r\n");
        assertTrue(ok.startsWith("HTTP/1.1 204"), ok);
        // the routes outside /v1/ need the key with a trailing '/' too, which the router takes as the same route (a
        // breaker's /props/, /metrics/ and POST /completions/ were answered without one)
        for (String[] r : new String[][]{{"GET", "/props/"}, {"GET", "/metrics/"}, {"GET", "/models/"}, {"POST", "/completions/"},
                {"POST", "/chat/completions/"}, {"POST", "/tokenize/"}, {"POST", "/detokenize/"}}) {
            String k = raw(keyedPort, r[0], r[1]);
            assertTrue(k.startsWith("HTTP/1.1 401"), r[0] + " " + r[1] + ": " + k);
            assertTrue(k.contains("\"invalid_api_key\""), r[0] + " " + r[1] + ": " + k);
        }
    }

    /**
     * On a front whose one key is {@code k1}: every key a request sends — each Authorization header, each x-api-key —
     * must be valid, whatever their order, and the 401 names the header at fault without repeating its value; a
     * request whose headers cannot be read is refused so too. A blank header sends no key.
     */
    public static void everyKeyARequestSendsMustBeValid(int keyedPort) throws Exception {
        String[][] refused = {
            {"Authorization: Bearer sk-wrong\r\nx-api-key: k1\r\n", "invalid API key in the Authorization header;"},
            {"x-api-key: k1\r\nAuthorization: Bearer sk-wrong\r\n", "invalid API key in the Authorization header;"},
            {"Authorization: Bearer k1\r\nx-api-key: sk-wrong\r\n", "invalid API key in the x-api-key header;"},
            {"Authorization: Bearer k1\r\nAuthorization: Bearer sk-wrong\r\n", "invalid API key in the Authorization header 2 of 2;"},
            {"Authorization: Bearer sk-wrong\r\nAuthorization: Bearer k1\r\n", "invalid API key in the Authorization header 1 of 2;"},
            {"x-api-key: k1\r\nx-api-key: sk-wrong\r\n", "invalid API key in the x-api-key header 2 of 2;"},
            {"Authorization: k1\r\nx-api-key: k1\r\n", "the Authorization header must be 'Bearer <key>'"},
            {"x-api-key: sk-wrong\r\n", "invalid API key in the x-api-key header"}};
        for (String[] r : refused) {
            String a = raw(keyedPort, "GET", "/props", r[0]);
            assertTrue(a.startsWith("HTTP/1.1 401"), r[0] + a);
            String m = Json.MAPPER.readTree(a.substring(a.indexOf("\r\n\r\n") + 4)).at("/error/message").asText();
            assertTrue(m.startsWith(r[1]), r[0] + m);
            assertFalse(m.contains("sk-wrong"), "the value is not repeated: " + m);
        }
        for (String h : List.of("Authorization: Bearer k1\r\n", "x-api-key: k1\r\n", "Authorization: Bearer k1\r\nx-api-key: k1\r\n",
                "Authorization: Bearer k1\r\nx-api-key: \r\n", "Authorization: \r\nx-api-key: k1\r\n")) {
            String a = raw(keyedPort, "GET", "/props", h);
            assertTrue(a.startsWith("HTTP/1.1 200"), h + a);
        }
        // headers that cannot be read (those before the unreadable one are): a valid key gets the 400, a valid key
        // beside a wrong one the 401
        String bad = "X-Note: a\u0001b\r\n";
        String one = raw(keyedPort, "GET", "/props", "x-api-key: k1\r\n" + bad);
        assertTrue(one.startsWith("HTTP/1.1 400"), one);
        String two = raw(keyedPort, "GET", "/props", "x-api-key: k1\r\nAuthorization: Bearer sk-wrong\r\n" + bad);
        assertTrue(two.startsWith("HTTP/1.1 401"), two);
    }

    /**
     * A request whose body's length is ambiguous — Content-Length with Transfer-Encoding, a Transfer-Encoding that does
     * not end with chunked, one in an HTTP/1.0 request — gets 400 {@code invalid_header} (501
     * {@code unsupported_transfer_encoding} for a coding other than chunked) and its connection closed, and the request
     * that follows it on the connection (one hidden in its body, as a proxy in front may frame it) is not answered; from
     * a single server and a cluster gateway alike.
     */
    public static void ambiguousFramingIsRefusedAndNothingAfterItServed(int port) throws Exception {
        String hidden = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", chunks = "0\r\n\r\n";
        String[][] cases = {
            {"1.1", "Content-Length: " + (chunks.length() + hidden.length()) + "\r\nTransfer-Encoding: chunked\r\n", "400", "invalid_header"},
            {"1.1", "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", "400", "invalid_header"},
            {"1.1", "Transfer-Encoding: xchunked\r\n", "400", "invalid_header"},
            {"1.1", "Transfer-Encoding: chunked, gzip\r\n", "400", "invalid_header"},
            {"1.0", "Transfer-Encoding: chunked\r\n", "400", "invalid_header"},
            {"1.1", "Transfer-Encoding: gzip, chunked\r\n", "501", "unsupported_transfer_encoding"}};
        for (String[] c : cases) {
            String what = "HTTP/" + c[0] + " " + c[1].trim().replace("\r\n", ", ");
            String a;
            try (Socket s = new Socket("127.0.0.1", port)) {
                s.setSoTimeout(PROMPT_MS);
                s.getOutputStream().write(("GET /health HTTP/" + c[0] + "\r\nHost: x\r\n" + c[1] + "\r\n" + chunks + hidden)
                        .getBytes(StandardCharsets.US_ASCII));
                // read to the end: a connection left open fails here
                a = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            }
            assertTrue(a.startsWith("HTTP/" + c[0] + " " + c[2] + " "), what + ": " + a);
            assertEquals(1, java.util.regex.Pattern.compile("HTTP/1\\.[01] \\d{3} ").matcher(a).results().count(),
                    what + ": one answer only: " + a);
            assertTrue(a.toLowerCase(Locale.ROOT).contains("\r\nconnection: close\r\n"), what + ": " + a);
            JsonNode e = Json.MAPPER.readTree(a.substring(a.indexOf("\r\n\r\n") + 4)).get("error");
            assertEquals(c[3], e.get("code").asText(), what + ": " + a);
        }
    }

    /** The raw answer to a request without a body, read to the end (the connection closes after it). */
    static String raw(int port, String method, String path) throws Exception {
        return raw(port, method, path, "");
    }

    /**
     * A form body (multipart/form-data) is a 415 unsupported_media_type in the shape of its route's API: Anthropic's
     * {"type": "error", "error": {"type", "message"}} on /v1/messages, OpenAI's {"error": {..., "code"}} on
     * /v1/chat/completions; a single server and a cluster gateway alike.
     */
    public static void aFormBodyIsA415InItsRoutesShape(int port) throws Exception {
        String body = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2}";
        for (String path : List.of("/v1/messages", "/v1/chat/completions")) {
            java.net.http.HttpResponse<String> r;
            try (java.net.http.HttpClient c = java.net.http.HttpClient.newHttpClient()) {
                r = c.send(java.net.http.HttpRequest.newBuilder(java.net.URI.create("http://127.0.0.1:" + port + path))
                        .header("Content-Type", "multipart/form-data; boundary=b").header("anthropic-version", "2023-06-01")
                        .POST(java.net.http.HttpRequest.BodyPublishers.ofString(body)).build(), java.net.http.HttpResponse.BodyHandlers.ofString());
            }
            assertEquals(415, r.statusCode(), path + ": " + r.body());
            JsonNode n = Json.MAPPER.readTree(r.body());
            String want = "the request body is multipart/form-data; this API takes a JSON body (Content-Type: application/json)";
            if (path.equals("/v1/messages")) {
                assertEquals("error", n.path("type").asText(), r.body());
                assertEquals("invalid_request_error", n.path("error").path("type").asText(), r.body());
                assertEquals(want, n.path("error").path("message").asText(), r.body());
            } else {
                assertEquals("unsupported_media_type", n.path("error").path("code").asText(), r.body());
                assertEquals(want, n.path("error").path("message").asText(), r.body());
            }
        }
    }

    /** The raw answer to a request without a body, with extra header lines (each ending in CRLF). */
    public static String raw(int port, String method, String path, String headers) throws Exception {
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(30_000);
            s.getOutputStream().write((method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + headers + "\r\n")
                    .getBytes(StandardCharsets.US_ASCII));
            return new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    /**
     * The status line and the header lines of a raw answer but its Date, in order of their text; an X-Request-Id's
     * value is left out (each request has its own), the header itself kept.
     */
    public static SortedSet<String> headLinesButDate(String answer) {
        SortedSet<String> s = new TreeSet<>();
        for (String l : answer.substring(0, answer.indexOf("\r\n\r\n")).split("\r\n")) s.add(withoutRequestId(l));
        s.removeIf(l -> l.toLowerCase(Locale.ROOT).startsWith("date:"));
        return s;
    }

    /** A header line, an X-Request-Id's value replaced by a mark: two requests' answers differ in it alone. */
    public static String withoutRequestId(String line) {
        return line.toLowerCase(Locale.ROOT).startsWith("x-request-id:") ? "X-Request-Id: (the request's own)" : line;
    }

    private static String contentType(String answer) {
        for (String l : answer.substring(0, answer.indexOf("\r\n\r\n")).split("\r\n"))
            if (l.toLowerCase(Locale.ROOT).startsWith("content-type:")) return l.substring(l.indexOf(':') + 1).trim();
        return null;
    }
}
