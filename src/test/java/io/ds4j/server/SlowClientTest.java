package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.vertx.junit5.VertxExtension;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Clients that hold resources without finishing their part: a stream its client does not read is cancelled once
 * more than limits.streamBufferBytes wait unsent, freeing its engine slot; a body that stops arriving gets 408 and its
 * connection closed (a body already refused has its connection closed); the server keeps serving the others.
 */
@ExtendWith(VertxExtension.class)
class SlowClientTest {
    TestServer server;
    final ScriptedBackend backend = new ScriptedBackend(TestServer::defaultScript);

    @AfterEach
    void stop() {
        if (server != null) server.close();
    }

    /** Tokens of the flood answer: each 64 bytes of text, listed with 20 alternatives (about 2 KB of SSE a token). */
    static final int FLOOD = 30_000;

    @Test
    void aStreamNobodyReadsIsCancelledOnceItsUnsentBytesPassTheLimit() throws Exception {
        int[] bar = TestServer.tokenizer().encode("=".repeat(64));
        int[] flood = new int[FLOOD];
        java.util.Arrays.fill(flood, bar[0]);
        ScriptedBackend b = new ScriptedBackend(p -> TestServer.tokenizer().decode(p).contains("flood") ? flood : TestServer.defaultScript(p));
        server = TestServer.scripted(b, Map.of("limits.streamBufferBytes", 16 * 1024));
        // the operating system's socket buffers take the first few MB (Linux grows a loopback connection's send buffer up
        // to net.ipv4.tcp_wmem's maximum, 4 MiB by default); the answer is far longer than that and the limit together
        String logprobs = "\"stream\":true,\"logprobs\":true,\"top_logprobs\":20";
        byte[] body = TestServer.chat("flood", logprobs + ",\"max_tokens\":" + FLOOD).getBytes(StandardCharsets.UTF_8);
        try (Socket s = new Socket()) {
            s.setReceiveBufferSize(2048);  // before connecting: the window the client offers stays small
            s.setSoTimeout(30_000);
            s.connect(new java.net.InetSocketAddress("127.0.0.1", server.port));
            OutputStream o = s.getOutputStream();
            o.write(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-Id: slow-1\r\n"
                    + "Content-Length: " + body.length + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
            o.write(body);
            o.flush();
            // the client reads nothing while the answer is generated: the server gives up on it, not the client
            try (LogCapture log = new LogCapture()) {
                assertTrue(TestServer.eventually(300_000, () -> !server.state().recent().isEmpty()), "the request ended");
                // its line names the client's id beside the completion's, as the engine's lines do
                assertTrue(TestServer.eventually(3000, () -> log.linesWith("is not reading its stream").size() == 1), log.lines().toString());
                assertTrue(log.linesWith("is not reading its stream").getFirst().matches("(?s).*request chatcmpl-\\S+ \\(X-Request-Id slow-1\\): .*"),
                        log.linesWith("is not reading its stream").toString());
            }
            ServerState.JobRecord r = server.state().recent().getLast();
            assertEquals("cancelled", r.outcome(), r.toString());
            assertTrue(r.generated() < FLOOD, "stopped before the end of its " + FLOOD + " tokens: " + r);
            // the connection is closed: what was sent before reads to its end, without the stream's end
            String got = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertTrue(got.startsWith("HTTP/1.1 200"), got.substring(0, Math.min(200, got.length())));
            assertFalse(got.contains("[DONE]"), "the stream did not end normally");
        }
        assertTrue(TestServer.eventually(3000, () -> b.openSequences() == 0), "its engine state is released");
        assertTrue(TestServer.eventually(3000, () -> server.state().openExchanges() == 0), "no exchange left open");
        assertTrue(server.get("/metrics").body().contains("ds4j:requests_cancelled_total 1.0"));
        // a client that reads gets its whole stream under the same limit
        TestServer.Resp ok = server.post("/v1/chat/completions", TestServer.chat("Hi", logprobs));
        assertEquals(200, ok.status());
        assertEquals("[DONE]", ok.events().getLast());
    }

    /** Sends the head and the first part of a request, then nothing more; returns everything the server answers. */
    static String stall(int port, String head, String part) throws Exception {
        try (Socket s = new Socket("127.0.0.1", port)) {
            s.setSoTimeout(30_000);  // a bound for a broken server, far above the timeout under test
            OutputStream o = s.getOutputStream();
            o.write((head + part).getBytes(StandardCharsets.UTF_8));
            o.flush();
            InputStream in = s.getInputStream();
            // read to the end: the server closes the connection after its answer
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    @Test
    void aBodyThatStopsArrivingGets408AndItsConnectionClosed() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.bodyReadTimeoutMs", 300));
        long forwards = backend.forwards.get();  // the warm-up's
        String part = "{\"messages\":[{\"role\":\"user\",";
        LogCapture log = new LogCapture();
        String fixed;
        try (log) {
            fixed = stall(server.port, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + "Content-Length: 200\r\n\r\n", part);
        }
        // the log line names the request by the id its answer carries
        String id = fixed.replaceAll("(?s).*\r\n[Xx]-[Rr]equest-[Ii]d: ([^\r]+)\r\n.*", "$1");
        assertTrue(id.startsWith("req-"), fixed);
        assertEquals(1, log.linesWith("request " + id + ": POST /v1/chat/completions rejected with 408").size(), log.lines().toString());
        String chunked = stall(server.port, "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + "Transfer-Encoding: chunked\r\n\r\n", Integer.toHexString(part.length()) + "\r\n" + part + "\r\n");
        for (String answer : new String[]{fixed, chunked}) {
            assertTrue(answer.startsWith("HTTP/1.1 408"), answer);
            assertTrue(answer.toLowerCase(java.util.Locale.ROOT).contains("connection: close"), answer);
            JsonNode e = Json.MAPPER.readTree(answer.substring(answer.indexOf("\r\n\r\n") + 4)).get("error");
            assertEquals("request_timeout", e.get("code").asText(), answer);
            String m = e.get("message").asText();
            assertTrue(m.contains(part.length() + (answer == fixed ? " of the 200 bytes declared" : " bytes (chunked)"))
                    && m.contains("within 300 ms (limits.bodyReadTimeoutMs)"), m);
        }
        // a body refused for its declared size is answered at once; its connection is closed once the rest stops coming
        String refused = stall(server.port, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + "Content-Length: 5000000\r\n\r\n", part);
        assertTrue(refused.startsWith("HTTP/1.1 413") && refused.contains("request_too_large"), refused);
        assertTrue(server.get("/metrics").body().contains("ds4j:requests_rejected_total{reason=\"request_timeout\"} 2.0"), "counted as rejected");
        assertEquals(forwards, backend.forwards.get(), "nothing of the stalled requests reached the engine");
        assertEquals(200, server.post("/v1/chat/completions", TestServer.chat("Hi", "")).status(), "still serving");
    }

    @Test
    void aConnectionClosedInTheMiddleOfItsHeadersIsNotReportedAsA400() throws Exception {
        server = TestServer.scripted(backend, Map.of("log.level", "debug"));
        try (LogCapture log = new LogCapture()) {
            try (Socket s = new Socket("127.0.0.1", server.port)) {
                s.getOutputStream().write("GET /health HTTP/1.1\r\nHost: x\r\n".getBytes(StandardCharsets.US_ASCII));
                s.getOutputStream().flush();
                // the server reads the part (or reads it with the close: the same case)
                assertEquals(200, server.get("/health").status());
            }
            assertTrue(TestServer.eventually(5000, () -> !log.linesWith("closed before its request headers arrived").isEmpty()),
                    log.lines().toString());
            List<String> line = log.linesWith("closed before its request headers arrived");
            assertTrue(line.getFirst().contains("[DEBUG]"), line.toString());
            assertTrue(log.linesWith("rejected with 400").isEmpty(), "no 400 was sent: " + log.lines());
        }
        assertFalse(server.get("/metrics").body().contains("reason=\"invalid_header\""), "not counted as a refusal");
    }

    /** One response read off a connection: its status line, its headers (lower case) and its body. */
    record Answer(String statusLine, java.util.Map<String, String> headers, String body) {}

    /** Reads one response with a Content-Length body, leaving the connection open for the next one. */
    static Answer readAnswer(InputStream in) throws Exception {
        java.io.ByteArrayOutputStream head = new java.io.ByteArrayOutputStream();
        while (!head.toString(StandardCharsets.US_ASCII).endsWith("\r\n\r\n")) {
            int b = in.read();
            if (b < 0) throw new java.io.EOFException("the connection closed after: " + head);
            head.write(b);
        }
        String[] lines = head.toString(StandardCharsets.US_ASCII).split("\r\n");
        java.util.Map<String, String> h = new java.util.HashMap<>();
        for (int i = 1; i < lines.length; i++) {
            int c = lines[i].indexOf(':');
            if (c > 0) h.put(lines[i].substring(0, c).trim().toLowerCase(java.util.Locale.ROOT), lines[i].substring(c + 1).trim());
        }
        byte[] body = in.readNBytes(Integer.parseInt(h.getOrDefault("content-length", "0")));
        return new Answer(lines[0], h, new String(body, StandardCharsets.UTF_8));
    }

    @Test
    void aRequestAnsweredWithoutItsBodyHasItsConnectionClosedOnceTheBodyIsLate() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.bodyReadTimeoutMs", 300, "server.apiKeys", List.of("sk-test")));
        String json = "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n";
        try (LogCapture log = new LogCapture()) {
            // each is answered at once without its body; the connection then waits for the rest of the body, which
            // never comes: stall reads to the end, so it returns only because the server closes the connection
            String wrongKey = stall(server.port, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n" + json, "{\"mes");
            assertTrue(wrongKey.startsWith("HTTP/1.1 401") && wrongKey.contains("invalid_api_key"), wrongKey);
            String unknown = stall(server.port, "POST /v1/nothing HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-test\r\n" + json, "{\"a");
            assertTrue(unknown.startsWith("HTTP/1.1 404"), unknown);
            String health = stall(server.port, "GET /health HTTP/1.1\r\nHost: x\r\n" + json, "abc");
            assertTrue(health.startsWith("HTTP/1.1 200") && health.endsWith("{\"status\":\"ready\"}"), health);
            for (String status : new String[]{"401", "404", "200"}) {
                List<String> l = log.linesWith("answered with " + status + " before its body arrived");
                assertEquals(1, l.size(), log.lines().toString());
                assertTrue(l.getFirst().contains("within 300 ms (limits.bodyReadTimeoutMs)") && l.getFirst().contains("closing the connection"), l.getFirst());
            }
            assertTrue(log.linesWith("GET /health: answered with 200 before its body arrived").getFirst().contains("3 of the 100 bytes declared"),
                    log.lines().toString());
        }
        // a body that arrives in full after an answer that did not read it leaves the connection open for the next request
        try (Socket s = new Socket("127.0.0.1", server.port)) {
            s.setSoTimeout(30_000);
            OutputStream o = s.getOutputStream();
            o.write(("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
                    .getBytes(StandardCharsets.US_ASCII));
            o.flush();
            assertTrue(readAnswer(s.getInputStream()).statusLine().startsWith("HTTP/1.1 401"));
            Thread.sleep(600);  // past the deadline the first request had
            o.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
            o.flush();
            Answer second = readAnswer(s.getInputStream());
            assertTrue(second.statusLine().startsWith("HTTP/1.1 200"), second.toString());
        }
    }

    /**
     * A client that closes its connection after an answer that did not wait for its body (a 413 for the length it
     * declared, with or without Expect: 100-continue; GET /health sent with a body) is noticed at once: the body's
     * deadline is dropped and the log says the client closed the connection, never, once the deadline is past, that
     * the body was late. A client that keeps the connection open without sending still gets that line, and the close.
     */
    @Test
    void aClientThatClosesItsConnectionAfterA413IsNoticedAtOnce() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.bodyReadTimeoutMs", 2000));
        String tooLarge = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5000044\r\n";
        try (LogCapture log = new LogCapture()) {
            for (String head : new String[]{tooLarge + "\r\n", tooLarge + "Expect: 100-continue\r\n\r\n",
                    "GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc"}) {
                try (Socket s = new Socket("127.0.0.1", server.port)) {
                    s.setSoTimeout(30_000);
                    s.getOutputStream().write(head.getBytes(StandardCharsets.US_ASCII));
                    s.getOutputStream().flush();
                    Answer a = readAnswer(s.getInputStream());
                    assertTrue(head.startsWith("GET") ? a.statusLine().startsWith("HTTP/1.1 200")
                            : a.statusLine().startsWith("HTTP/1.1 413") && a.body().contains("request_too_large"), a.toString());
                }  // closed here, the body never sent
            }
            // well before the 2 s deadline: the close is seen as it happens
            assertTrue(TestServer.eventually(1500, () -> log.linesWith("the client closed the connection").size() == 3), log.lines().toString());
            List<String> closed = log.linesWith("the client closed the connection");
            assertEquals(2, log.linesWith("POST /v1/chat/completions: answered with 413 before its body arrived; the client closed"
                    + " the connection, 0 of the 5000044 bytes declared came").size(), closed.toString());
            assertEquals(1, log.linesWith("GET /health: answered with 200 before its body arrived; the client closed the connection,"
                    + " 3 of the 100 bytes declared came").size(), closed.toString());
            Thread.sleep(2500);  // past the deadline the three had
            assertTrue(log.linesWith("did not come within").isEmpty(), log.lines().toString());
            // kept open without sending: closed by the server at the deadline, which the log says
            String kept = stall(server.port, tooLarge + "\r\n", "");
            assertTrue(kept.startsWith("HTTP/1.1 413"), kept);
            List<String> late = log.linesWith("answered with 413 before its body arrived; the rest of the body did not come within 2000 ms");
            assertEquals(1, late.size(), log.lines().toString());
            assertTrue(late.getFirst().contains("0 of the 5000044 bytes declared came; closing the connection"), late.getFirst());
            assertEquals(3, log.linesWith("the client closed the connection").size(), "the server's own close is not the client's: " + log.lines());
            // closed by the server before the deadline, for a chunk it cannot read after the answer: not the client's close
            try (Socket s = new Socket("127.0.0.1", server.port)) {
                s.setSoTimeout(30_000);
                OutputStream o = s.getOutputStream();
                o.write("POST /v1/nothing HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n".getBytes(StandardCharsets.US_ASCII));
                o.flush();
                assertTrue(readAnswer(s.getInputStream()).statusLine().startsWith("HTTP/1.1 404"));
                o.write("zz\r\n".getBytes(StandardCharsets.US_ASCII));
                o.flush();
                assertEquals(-1, s.getInputStream().read(), "the server closed the connection");
            }
            assertTrue(TestServer.eventually(1500, () -> !log.linesWith("POST /v1/nothing: answered before its body was read").isEmpty()),
                    log.lines().toString());
            Thread.sleep(300);  // the close's listener has run
            assertEquals(3, log.linesWith("the client closed the connection").size(), "the server's own close is not the client's: " + log.lines());
        }
        assertEquals(200, server.get("/health").status(), "still serving");
    }

    /**
     * A connection that lingers after the server answered without its body (a chunked body past server.maxBodyBytes
     * gets 413; a 404, then a chunk that cannot be read) outlives the body's deadline while its client trickles bytes:
     * the deadline finds the close already decided and neither writes a 408 nor logs a second decision, and no 408 is
     * counted; the lingering close keeps the connection until the client stops. The deadline logged "rejected with
     * 408" and counted request_timeout for every such connection, though no 408 went out.
     */
    @Test
    void aLingeringCloseIsNotTakenForALateBody() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.bodyReadTimeoutMs", 500, "server.maxBodyBytes", 4096));
        byte[] chunk = ("1000\r\n" + "y".repeat(4096) + "\r\n").getBytes(StandardCharsets.US_ASCII);
        try (LogCapture log = new LogCapture()) {
            for (String path : new String[]{"/v1/chat/completions", "/v1/nothing"}) {
                try (Socket s = new Socket("127.0.0.1", server.port)) {
                    s.setSoTimeout(30_000);
                    OutputStream o = s.getOutputStream();
                    o.write(("POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                            + "Transfer-Encoding: chunked\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
                    if (path.endsWith("nothing")) {
                        o.write("3\r\nabc\r\n".getBytes(StandardCharsets.US_ASCII));
                        o.flush();
                        assertTrue(readAnswer(s.getInputStream()).statusLine().startsWith("HTTP/1.1 404"));
                        o.write("zz\r\n".getBytes(StandardCharsets.US_ASCII));  // a chunk that cannot be read
                    } else {
                        o.write(chunk);
                        o.write(chunk);  // past server.maxBodyBytes
                        o.flush();
                        Answer a = readAnswer(s.getInputStream());
                        assertTrue(a.statusLine().startsWith("HTTP/1.1 413") && a.body().contains("request_too_large"), a.toString());
                    }
                    o.flush();
                    // a byte every 200 ms (well inside the 2 s of quiet) for 3 times the body's deadline
                    for (int i = 0; i < 8; i++) {
                        Thread.sleep(200);
                        o.write('y');
                        o.flush();
                    }
                    assertEquals(-1, s.getInputStream().read(), "the server's side is shut, nothing more comes");
                }
            }
            Thread.sleep(300);  // the close's listeners have run
            assertTrue(log.linesWith("rejected with 408").isEmpty(), log.lines().toString());
            assertTrue(log.linesWith("did not come within").isEmpty(), log.lines().toString());
            assertEquals(1, log.linesWith("POST /v1/chat/completions rejected with 413").size(), log.lines().toString());
            assertEquals(1, log.linesWith("POST /v1/nothing: answered before its body was read").size(), log.lines().toString());
        }
        assertFalse(server.get("/metrics").body().contains("reason=\"request_timeout\""), "no 408 was sent");
        assertEquals(200, server.get("/health").status(), "still serving");
    }

    /**
     * A client that asks for the connection to close after the answer (Connection: close) and then sends nothing of
     * the body it declared: the answer, a 413, went out at once, and the connection is closed at the deadline, as any
     * other's (Vert.x leaves it open while the body is pending).
     */
    @Test
    void aConnectionThatAskedToCloseIsClosedAtTheDeadlineWhenItsBodyNeverComes() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.bodyReadTimeoutMs", 300));
        try (LogCapture log = new LogCapture()) {
            // stall reads to the end: it returns only because the server closes the connection
            String answer = stall(server.port, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + "Content-Length: 5000044\r\nConnection: close\r\n\r\n", "");
            assertTrue(answer.startsWith("HTTP/1.1 413") && answer.contains("request_too_large"), answer);
            List<String> late = log.linesWith("answered with 413 before its body arrived; the rest of the body did not come within 300 ms");
            assertEquals(1, late.size(), log.lines().toString());
            assertTrue(late.getFirst().contains("0 of the 5000044 bytes declared came; closing the connection"), late.getFirst());
        }
    }

    /**
     * Requests that declare a body and send only part of it: one for a path no route answers gets 404, and one for a
     * known path with a method it does not answer 405, at once (their bodies are not needed); a known route that reads
     * its body gets 408 once the body is late.
     */
    static void unknownPathsAreAnsweredWithoutWaitingForTheirBodies(int port) throws Exception {
        String rest = " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n";
        for (String line : List.of("POST /nothing", "POST /v1/nothing", "PUT /v1/nothing", "GET /v1/nothing", "DELETE /x/y",
                "GET /no-such-file.html", "PATCH /")) {
            String answer = stall(port, line + rest, "{\"a");
            assertTrue(answer.startsWith("HTTP/1.1 404"), line + ": " + answer);
            JsonNode e = Json.MAPPER.readTree(answer.substring(answer.indexOf("\r\n\r\n") + 4)).get("error");
            assertEquals("not_found", e.get("code").asText(), answer);
        }
        for (String line : List.of("PUT /v1/chat/completions", "POST /v1/models", "DELETE /tokenize", "POST /v1/models/scripted")) {
            String answer = stall(port, line + rest, "{\"a");
            assertTrue(answer.startsWith("HTTP/1.1 405") && answer.contains("method_not_allowed"), line + ": " + answer);
        }
        String known = stall(port, "POST /v1/chat/completions" + rest, "{\"a");
        assertTrue(known.startsWith("HTTP/1.1 408") && known.contains("request_timeout"), known);
    }

    @Test
    void anUnknownPathIsA404AtOnceEvenWhenItsBodyNeverCompletes() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.bodyReadTimeoutMs", 300));
        unknownPathsAreAnsweredWithoutWaitingForTheirBodies(server.port);
    }

    @Test
    void aGetHeadOrOptionsIsAnsweredWithoutWaitingForItsBody() throws Exception {
        server = TestServer.scripted(backend, Map.of());
        FrontChecks.bodilessMethodsAreAnsweredWithoutWaitingForTheirBodies(server.port);
    }

    @Test
    void aConnectionWithoutACompleteRequestHeadIsClosedButABusyOneIsNot() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.headerReadTimeoutMs", 300));
        try (LogCapture log = new LogCapture()) {
            // a request line and some headers, then nothing; and a client that connects and sends nothing: each is
            // closed without an answer (stall reads to the end, so it returns only because the server closed it)
            assertEquals("", stall(server.port, "GET /health HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n", ""));
            assertEquals("", stall(server.port, "", ""));
            assertEquals(2, log.linesWith("no complete request head within 300 ms after it opened (limits.headerReadTimeoutMs);"
                    + " closing it").size(), log.lines().toString());
        }
        // an answer that is silent for longer than the deadline (a slow prefill) is not cut: streamed or not
        backend.delayMs = 1000;
        TestServer.Resp streamed = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"stream\":true,\"max_tokens\":1"));
        assertEquals(200, streamed.status(), streamed.body());
        assertEquals("[DONE]", streamed.events().getLast());
        TestServer.Resp plain = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":1"));
        assertEquals(200, plain.status(), plain.body());
        backend.delayMs = 0;
        try (Socket s = new Socket("127.0.0.1", server.port)) {
            s.setSoTimeout(30_000);
            OutputStream o = s.getOutputStream();
            // keep-alive: the next request right after an answer is served on the same connection
            for (int i = 0; i < 2; i++) {
                o.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
                o.flush();
                assertTrue(readAnswer(s.getInputStream()).statusLine().startsWith("HTTP/1.1 200"));
            }
            // then, idle beyond the deadline, it is closed
            assertEquals(-1, s.getInputStream().read(), "closed by the server");
        }
    }

    @Test
    void aLoweredHeadDeadlineAppliesToTheNextConnectionAtOnce() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.headerReadTimeoutMs", 3_600_000));
        // silent connections on every HTTP verticle (they take connections in turn): each one's sweep is scheduled
        // 15 minutes ahead; then a reload lowers the deadline to 300 ms
        List<Socket> idle = new java.util.ArrayList<>();
        try {
            for (int i = 0; i < 16; i++) idle.add(new Socket("127.0.0.1", server.port));
            Thread.sleep(300);
            ServerState st = server.state();
            st.reloaded(st.config().with("limits.headerReadTimeoutMs", 300), List.of(),
                    new ServerState.ReloadOutcome(java.time.Instant.now(), "applied", "limits.headerReadTimeoutMs 300"));
            for (int i = 0; i < 4; i++) {
                long t0 = System.nanoTime();
                assertEquals("", stall(server.port, "", ""), "a new silent connection is closed under the new deadline");
                assertTrue((System.nanoTime() - t0) / 1_000_000 < 10_000, "within seconds, not at the old sweep");
            }
        } finally {
            for (Socket s : idle) s.close();
        }
    }
}
