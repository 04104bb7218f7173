package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.vertx.junit5.VertxExtension;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Engine scheduling seen from clients: a full queue answers 429 with Retry-After; a client that disconnects stops its
 * request at the next step boundary — while decoding, while prefilling and while queued — and the engine does no more
 * work for it; a request that fails inside the engine does not affect the others.
 */
@ExtendWith(VertxExtension.class)
class SchedulingTest {
    TestServer server;
    ScriptedBackend backend = new ScriptedBackend(TestServer::defaultScript);

    @AfterEach
    void stop() {
        if (server != null) server.close();
    }

    static final String LONG = TestServer.chat("Please count for a long time.", "\"stream\":true,\"max_tokens\":3000");

    static String id(String firstChunk) throws Exception {
        return Json.MAPPER.readTree(firstChunk).get("id").asText();
    }

    /** Asserts the engine does no more forwards from now on (no other request is running). */
    void assertEngineIdle() throws Exception {
        assertTrue(TestServer.eventually(3000, () -> server.state().metrics().running.get() == 0), "nothing running");
        long f = backend.forwards.get();
        Thread.sleep(300);
        assertEquals(f, backend.forwards.get(), "the engine kept computing after the cancellation");
    }

    @Test
    void disconnectDuringDecodeStopsTheRequest() throws Exception {
        backend.delayMs = 10;
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        String id;
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions", LONG)) {
            assertEquals(200, s.status);
            id = id(s.nextData());
            for (int i = 0; i < 3; i++) assertTrue(s.nextData().contains("\"content\""));
        }
        String rid = id;
        assertTrue(TestServer.eventually(3000, () -> server.state().finished(rid) != null), "the request ended");
        ServerState.JobRecord r = server.state().finished(id);
        assertEquals("cancelled", r.outcome());
        assertTrue(r.generated() < 100, "stopped soon after the disconnect, generated " + r.generated());
        assertEngineIdle();
        // the exchange of a client that went away is not waited for at shutdown
        assertTrue(TestServer.eventually(3000, () -> server.state().openExchanges() == 0), "open exchanges: " + server.state().openExchanges());
        assertTrue(server.get("/metrics").body().contains("ds4j:requests_cancelled_total 1.0"));
    }

    /**
     * The events the engine sent before it saw the disconnect reach the exchange's consumer, which takes them quietly:
     * no "Discarding message" warning from the event bus for a client that went away (several disconnects, so that
     * one lands while a token is on its way).
     */
    @Test
    void aDisconnectLeavesNoEventBusWarning() throws Exception {
        // the embedded model, whose steps (with n-gram drafts) send several tokens at a time
        server = TestServer.start(new io.ds4j.app.DefaultModelProvider(), Map.of(), null, null);
        try (LogCapture log = new LogCapture()) {
            for (int k = 0; k < 20; k++) {
                // streamed and not: a whole answer's tokens travel to the HTTP side as they come, too
                boolean stream = k % 2 == 0;
                try (RawStream s = new RawStream(server.port, "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\","
                        + "\"content\":\"Hi\"}],\"max_tokens\":30000,\"ignore_eos\":true" + (stream ? ",\"stream\":true}" : "}"), stream)) {
                    assertTrue(TestServer.eventually(3000, () -> server.state().metrics().running.get() == 1), "running");
                    Thread.sleep(30 + 10 * k);
                }
                assertTrue(TestServer.eventually(3000, () -> server.state().metrics().running.get() == 0), "cancelled");
            }
            Thread.sleep(200);
            assertEquals(List.of(), log.lines().stream().filter(l -> l.contains("Discarding message")).toList());
            // cause before effect: the HTTP side's line comes before the engine's, which acts on the cancel it raised
            List<String> lines = log.lines();
            java.util.regex.Pattern said = java.util.regex.Pattern.compile("request (\\S+): client disconnected");
            int checked = 0;
            for (int i = 0; i < lines.size(); i++) {
                java.util.regex.Matcher m = said.matcher(lines.get(i));
                if (!m.find()) continue;
                String engineLine = "request " + m.group(1) + " cancelled (the client went away) at a step boundary";
                for (int j = 0; j < i; j++) assertFalse(lines.get(j).contains(engineLine), lines.subList(j, i + 1).toString());
                checked++;
            }
            assertTrue(checked > 0, lines.toString());
        }
    }

    @Test
    void disconnectMidBatchReleasesTheStateAndTheOthersFinish() throws Exception {
        backend.delayMs = 2;
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        String body = TestServer.chat("Please count for a long time.", "\"stream\":true,\"max_tokens\":150,"
                + "\"stream_options\":{\"include_usage\":true}");
        List<CompletableFuture<TestServer.Resp>> others = new java.util.ArrayList<>();
        for (int i = 0; i < 3; i++) others.add(CompletableFuture.supplyAsync(() -> {
            try {
                return server.post("/v1/chat/completions", body);
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        }));
        String id;
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions", LONG)) {
            assertEquals(200, s.status);
            id = id(s.nextData());
            for (int i = 0; i < 3; i++) assertTrue(s.nextData().contains("\"content\""));
            assertTrue(TestServer.eventually(3000, () -> server.state().metrics().running.get() == 4), "all four run together");
        }
        String rid = id;
        assertTrue(TestServer.eventually(3000, () -> server.state().finished(rid) != null), "the request ended");
        assertEquals("cancelled", server.state().finished(id).outcome());
        int running = server.state().metrics().running.get();
        assertTrue(backend.openSequences() <= running, "the cancelled request's sequence is closed: " + backend.openSequences()
                + " open for " + running + " running");
        for (CompletableFuture<TestServer.Resp> f : others) {
            TestServer.Resp r = f.get();
            assertEquals(200, r.status());
            assertEquals("[DONE]", r.events().getLast());
            JsonNode usage = Json.MAPPER.readTree(r.events().get(r.events().size() - 2)).get("usage");
            assertEquals(150, usage.get("completion_tokens").asInt(), "the others ran to their end");
        }
        assertEquals(0, backend.openSequences());
        assertTrue(server.get("/metrics").body().contains("ds4j:batch_size_count"), "batched steps are counted");
    }

    @Test
    void disconnectDuringPrefillStopsTheRequest() throws Exception {
        backend.delayMs = 20;
        server = TestServer.scripted(backend, Map.of("limits.prefillChunk", 4, "speculative.draft", "none"));
        String body = TestServer.chat("Please count for a long time. " + "lorem ipsum dolor ".repeat(150), "\"stream\":true");
        String id;
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions", body)) {
            assertEquals(200, s.status);
            id = id(s.nextData()); // the role chunk comes at admission, before prefill
            long f0 = backend.forwards.get();
            assertTrue(TestServer.eventually(2000, () -> backend.forwards.get() > f0 + 3), "prefill started");
        }
        String rid = id;
        assertTrue(TestServer.eventually(3000, () -> server.state().finished(rid) != null), "the request ended");
        ServerState.JobRecord r = server.state().finished(id);
        assertEquals("cancelled", r.outcome());
        assertEquals(0, r.generated());
        assertTrue(r.promptProcessed() < r.promptTokens(), "cancelled during prefill: " + r);
        assertEngineIdle();
    }

    @Test
    void disconnectOfANonStreamingRequest() throws Exception {
        backend.delayMs = 10;
        server = TestServer.scripted(backend, Map.of());
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions",
                TestServer.chat("Please count for a long time.", "\"max_tokens\":3000"), false)) {
            long f0 = backend.forwards.get();
            assertTrue(TestServer.eventually(2000, () -> backend.forwards.get() > f0 + 5), "generation started");
        }
        assertTrue(TestServer.eventually(3000, () -> server.state().recent().stream().anyMatch(r -> r.outcome().equals("cancelled"))));
        assertEngineIdle();
    }

    @Test
    void fullQueueAnswers429WithRetryAfter() throws Exception {
        backend.delayMs = 20;
        server = TestServer.scripted(backend, Map.of("limits.maxActive", 1, "limits.maxQueue", 1));
        try (RawStream a = new RawStream(server.port, "/v1/chat/completions", LONG);
             RawStream b = new RawStream(server.port, "/v1/chat/completions", LONG)) {
            assertEquals(200, a.status);
            assertEquals(200, b.status);
            String bid = id(b.nextData());
            assertTrue(TestServer.eventually(2000, () -> server.state().metrics().waiting.get() == 1), "b waits");
            TestServer.Resp c = server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
            assertEquals(429, c.status(), c.body());
            int retry = Integer.parseInt(c.headers().firstValue("retry-after").orElseThrow());
            assertTrue(retry >= 1 && retry <= 60, "Retry-After " + retry);
            assertEquals("queue_full", c.json().at("/error/code").asText());
            assertEquals(1.0, PromText.value(server.get("/metrics").body(), "vllm:num_requests_waiting"));
            b.close();
            assertTrue(TestServer.eventually(3000, () -> server.state().finished(bid) != null));
            assertEquals(0, server.state().finished(bid).promptProcessed(), "b was cancelled while queued");
        }
        assertEngineIdle();
        TestServer.Resp d = server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
        assertEquals(200, d.status(), "accepted again once the queue drained: " + d.body());
    }

    /** With limits.maxQueue 0 a request that finds every slot taken is told that no request may wait, not "0 waiting". */
    @Test
    void aFullEngineWithNoQueueSaysNoRequestMayWait() throws Exception {
        backend.delayMs = 20;
        server = TestServer.scripted(backend, Map.of("limits.maxActive", 1, "limits.maxQueue", 0));
        try (RawStream a = new RawStream(server.port, "/v1/chat/completions", LONG)) {
            assertEquals(200, a.status);
            TestServer.Resp c = server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
            assertEquals(429, c.status(), c.body());
            String m = c.json().at("/error/message").asText();
            assertTrue(m.startsWith("the server is busy: 1 request running (limits.maxActive 1) and limits.maxQueue is 0,"
                    + " so no request may wait for a slot; retry after "), m);
        }
        assertEngineIdle();
    }

    /**
     * Where a slot is free but model.cacheTokens holds the next request back, the 429 says so: the running requests'
     * reservations against the cache and what the next one needs (it said only "1 request running (limits.maxActive 8)").
     */
    @Test
    void aFullQueueBehindTheCacheSaysTheCacheHoldsItBack() throws Exception {
        backend.delayMs = 20;
        server = TestServer.scripted(backend, Map.of("limits.maxActive", 8, "limits.maxQueue", 0, "model.cacheTokens", 400));
        try (RawStream a = new RawStream(server.port, "/v1/chat/completions",
                TestServer.chat("Please count for a long time.", "\"max_tokens\":300,\"stream\":true"))) {
            assertEquals(200, a.status);
            TestServer.Resp c = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":200"));
            assertEquals(429, c.status(), c.body());
            String m = c.json().at("/error/message").asText();
            assertTrue(m.matches("the server is busy: 1 request running \\(limits\\.maxActive 8; a slot is free, but they reserve \\d+"
                    + " of the 400 tokens of model\\.cacheTokens and the next request needs \\d+: its prompt plus max_tokens\\) and"
                    + " limits\\.maxQueue is 0, so no request may wait for a slot; retry after .*"), m);
            // without max_tokens the server's default (cut to the whole cache) is what does not fit: said so
            TestServer.Resp d = server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
            assertEquals(429, d.status(), d.body());
            String dm = d.json().at("/error/message").asText();
            assertTrue(dm.contains(": its prompt plus max_tokens (") && dm.contains(", the server's default cut to the cache; a"
                    + " smaller max_tokens may fit)"), dm);
        }
        assertEngineIdle();
    }

    /**
     * Every thread of the server's long-text lane busy until release() or close(), so that long bodies wait for it;
     * its tasks count as the lane's running tokenisations, as the server's own do.
     */
    private static final class BusyLane implements AutoCloseable {
        private final java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
        private final io.vertx.core.WorkerExecutor lane;

        BusyLane(TestServer server) throws InterruptedException {
            lane = server.server.vertx().createSharedWorkerExecutor("ds4j-long-text", HttpVerticle.LONG_TEXT_THREADS, 30,
                    java.util.concurrent.TimeUnit.MINUTES);
            java.util.concurrent.CountDownLatch busy = new java.util.concurrent.CountDownLatch(HttpVerticle.LONG_TEXT_THREADS);
            for (int i = 0; i < HttpVerticle.LONG_TEXT_THREADS; i++)
                lane.executeBlocking(() -> {
                    server.state().longTextStarted();
                    try {
                        busy.countDown();
                        return release.await(60, java.util.concurrent.TimeUnit.SECONDS);
                    } finally {
                        server.state().longTextEnded();
                    }
                }, false);
            assertTrue(busy.await(30, java.util.concurrent.TimeUnit.SECONDS), "the lane is busy");
        }

        void release() {
            release.countDown();
        }

        @Override
        public void close() {
            release.countDown();
            lane.close();
        }
    }

    /** With limits.maxQueue 0 a long body that finds a lane thread free runs (it got 429 on an idle server). */
    @Test
    void aLongBodyThatNeedNotWaitRunsWithNoQueue() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.maxActive", 1, "limits.maxQueue", 0));
        String tokenize = "{\"content\":\"" + "lorem ipsum dolor sit amet ".repeat(HttpVerticle.LONG_TEXT_BYTES / 20) + "\"}";
        TestServer.Resp r = server.post("/tokenize", tokenize);
        assertEquals(200, r.status(), r.body());
        try (BusyLane lane = new BusyLane(server)) {
            TestServer.Resp busy = server.post("/tokenize", tokenize);
            assertEquals(429, busy.status(), "with every lane thread busy it would wait: " + busy.body());
            // no queue: the lane is busy and nothing may wait (it read "0 requests ... waiting ... (limits.maxQueue 0)")
            assertEquals("queue_full", busy.json().at("/error/code").asText(), busy.body());
            assertEquals("the server is busy: all " + HttpVerticle.LONG_TEXT_THREADS + " threads tokenising bodies of "
                    + HttpVerticle.LONG_TEXT_BYTES + " bytes or more are busy and limits.maxQueue is 0, so no request may"
                    + " wait for one; retry after " + HttpVerticle.LONG_TEXT_RETRY_SECONDS + " s",
                    busy.json().at("/error/message").asText());
        }
        assertEquals(0, server.state().longTextWaiting());
    }

    @Test
    void longBodiesWaitingForTheirLaneCountAgainstTheQueue() throws Exception {
        server = TestServer.scripted(backend, Map.of("limits.maxActive", 1, "limits.maxQueue", 1));
        try (BusyLane lane = new BusyLane(server)) {
            String text = "lorem ipsum dolor sit amet ".repeat(HttpVerticle.LONG_TEXT_BYTES / 20);
            String tokenize = "{\"content\":\"" + text + "\"}";
            CompletableFuture<TestServer.Resp> first = CompletableFuture.supplyAsync(() -> {
                try {
                    return server.post("/tokenize", tokenize);
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            assertTrue(TestServer.eventually(10_000, () -> server.state().longTextWaiting() == 1), "the first long body waits");
            // the queue's one place is taken: the next long body is refused as a full queue is, naming the limit
            for (String path : List.of("/tokenize", "/v1/completions")) {
                TestServer.Resp r = server.post(path, path.equals("/tokenize") ? tokenize
                        : "{\"prompt\":\"" + text + "\",\"max_tokens\":1}");
                assertEquals(429, r.status(), r.body());
                assertEquals("queue_full", r.json().at("/error/code").asText(), r.body());
                assertTrue(r.json().at("/error/message").asText().contains("limits.maxQueue 1"), r.body());
                assertTrue(r.headers().firstValue("retry-after").isPresent(), r.body());
            }
            assertEquals(1, server.state().longTextWaiting(), "a refused body is not counted");
            // a short body does not wait for that lane
            assertEquals(200, server.post("/tokenize", "{\"content\":\"Hello\"}").status());
            lane.release();
            TestServer.Resp r = first.get();
            assertEquals(200, r.status(), r.body());
            assertEquals(TestServer.tokenizer().encode(text).length, r.json().get("count").asInt());
            assertEquals(0, server.state().longTextWaiting());
            assertEquals(200, server.post("/tokenize", tokenize).status(), "accepted again once the lane's queue drained");
        }
    }

    /**
     * A client that goes away while its request waits to reach the engine (its submission queued behind an engine step)
     * ends with one line saying what became of it and is counted as cancelled, as one cancelled in the engine is (it
     * was only said to be disconnected, and not counted).
     */
    @Test
    void aRequestWhoseClientWentBeforeItReachedTheEngineIsLoggedAndCounted() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none"));
        java.util.concurrent.CountDownLatch gate = new java.util.concurrent.CountDownLatch(1);
        try (LogCapture log = new LogCapture()) {
            backend.gate = gate;
            CompletableFuture<TestServer.Resp> a = CompletableFuture.supplyAsync(() -> {
                try {
                    return server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":2"));
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            assertTrue(TestServer.eventually(5000, () -> backend.gated.get() > 0), "a step holds the engine thread");
            try (RawStream b = new RawStream(server.port, "/v1/chat/completions", TestServer.chat("Hello", "\"max_tokens\":2"), false)) {
                Thread.sleep(500); // tokenised and submitted; the submission waits for the engine thread
            }
            assertTrue(TestServer.eventually(5000, () -> !log.linesWith("client disconnected").isEmpty()), log.lines().toString());
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("request (\\S+): client disconnected")
                    .matcher(log.linesWith("client disconnected").getFirst());
            assertTrue(m.find());
            String bid = m.group(1);
            backend.gate = null;
            gate.countDown();
            assertEquals(200, a.get().status());
            assertTrue(TestServer.eventually(5000, () -> server.state().finished(bid) != null), "b's end is recorded");
            assertEquals("cancelled", server.state().finished(bid).outcome());
            List<String> outcome = log.linesWith("request " + bid).stream().filter(l -> !l.contains("client disconnected")).toList();
            assertEquals(1, outcome.size(), log.linesWith("request " + bid).toString());
            assertTrue(outcome.getFirst().contains("dropped before it reached the engine"), outcome.getFirst());
            assertTrue(server.get("/metrics").body().contains("ds4j:requests_cancelled_total 1.0"));
        } finally {
            gate.countDown();
        }
    }

    /** A generation whose client goes away while its long body waits for a tokenising thread is counted as cancelled. */
    @Test
    void aRequestWhoseClientWentBeforeItWasTokenisedIsCounted() throws Exception {
        server = TestServer.scripted(backend, Map.of());
        try (BusyLane lane = new BusyLane(server); LogCapture log = new LogCapture()) {
            String text = "lorem ipsum dolor sit amet ".repeat(HttpVerticle.LONG_TEXT_BYTES / 20);
            try (RawStream b = new RawStream(server.port, "/v1/completions", "{\"prompt\":\"" + text + "\",\"max_tokens\":1}", false)) {
                assertTrue(TestServer.eventually(10_000, () -> server.state().longTextWaiting() == 1), "the long body waits");
            }
            Thread.sleep(300); // the server sees the connection close
            lane.release();
            assertTrue(TestServer.eventually(5000, () -> {
                try {
                    return server.get("/metrics").body().contains("ds4j:requests_cancelled_total 1.0");
                } catch (Exception e) {
                    return false;
                }
            }), "counted as cancelled: " + log.linesWith("HttpVerticle"));
            assertEquals(1, log.linesWith("dropped before it reached the engine").size(), log.linesWith("HttpVerticle").toString());
            // led by the request's id, as its other lines are
            String line = log.linesWith("dropped before it reached the engine").getFirst();
            assertTrue(java.util.regex.Pattern.compile("request cmpl-\\w+: POST /v1/completions: the client went away before"
                    + " the request was tokenised; dropped").matcher(line).find(), line);
        }
    }

    /**
     * A large body is parsed and checked off the event loop (reading 128,000 logit_bias keys took it for a second or
     * more, and every stream it served stalled meanwhile): with every thread of Vert.x's worker pool held, its answer
     * waits while the event loop goes on answering; once they are free it gets the answer a small body gets, and a
     * valid one its ignored fields' header. A small body is still read on the event loop.
     */
    @Test
    void aLargeBodyIsReadOffTheEventLoop() throws Exception {
        server = TestServer.scripted(backend, Map.of());
        StringBuilder bias = new StringBuilder();
        for (int i = 0; i < 4000; i++) bias.append(i == 0 ? "" : ",").append('"').append(i).append("\":1");
        String large = "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":1,\"logit_bias\":{" + bias + "}";
        assertTrue(large.length() >= HttpVerticle.LARGE_BODY_BYTES, "a large body: " + large.length());
        int threads = io.vertx.core.VertxOptions.DEFAULT_WORKER_POOL_SIZE;
        java.util.concurrent.CountDownLatch busy = new java.util.concurrent.CountDownLatch(threads);
        java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
        try {
            for (int i = 0; i < threads; i++)
                server.server.vertx().executeBlocking(() -> {
                    busy.countDown();
                    return release.await(60, java.util.concurrent.TimeUnit.SECONDS);
                }, false);
            assertTrue(busy.await(30, java.util.concurrent.TimeUnit.SECONDS), "the worker pool is held");
            CompletableFuture<TestServer.Resp> refused = CompletableFuture.supplyAsync(() -> {
                try {
                    return server.post("/v1/chat/completions", large + ",\"temperature\":5}");
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            TestServer.Resp small = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"temperature\":5"));
            assertEquals(400, small.status(), small.body());
            assertEquals(200, server.get("/health").status());
            Thread.sleep(300);
            assertFalse(refused.isDone(), "the large body waits for a worker thread: " + (refused.isDone() ? refused.get().body() : ""));
            release.countDown();
            TestServer.Resp r = refused.get(30, java.util.concurrent.TimeUnit.SECONDS);
            assertEquals(400, r.status(), r.body());
            assertEquals(small.json().get("error"), r.json().get("error"), "the same answer as a small body's");
        } finally {
            release.countDown();
        }
        TestServer.Resp ok = server.post("/v1/chat/completions", large + ",\"max_token\":3}");
        assertEquals(200, ok.status(), ok.body());
        assertTrue(ok.headers().firstValue(RequestFields.HEADER).orElse("").contains("max_token"), ok.headers().map().toString());
    }

    /** The test tokenizer, whose encoding of a text that holds {@code HOLD} waits until released. */
    private static final class HeldTokenizer implements io.ds4j.text.Tokenizer {
        final io.ds4j.text.Tokenizer t = TestServer.tokenizer();
        final java.util.concurrent.CountDownLatch release = new java.util.concurrent.CountDownLatch(1);
        final java.util.concurrent.atomic.AtomicInteger held = new java.util.concurrent.atomic.AtomicInteger();

        @Override
        public int[] encode(String text) {
            if (text.contains("HOLD")) {
                held.incrementAndGet();
                try {
                    release.await(60, java.util.concurrent.TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            return t.encode(text);
        }

        @Override public int[] encode(io.ds4j.text.PromptText prompt) { return t.encode(prompt); }
        @Override public String decode(int[] ids) { return t.decode(ids); }
        @Override public byte[] tokenBytes(int id) { return t.tokenBytes(id); }
        @Override public boolean isControl(int id) { return t.isControl(id); }
        @Override public int vocabSize() { return t.vocabSize(); }
        @Override public java.util.OptionalInt id(String tokenText) { return t.id(tokenText); }
        @Override public int bosId() { return t.bosId(); }
        @Override public int eosId() { return t.eosId(); }
        @Override public String source() { return t.source(); }
    }

    /**
     * Generations whose clients go away while their prompts are being tokenised are each said in one line and counted
     * as cancelled at once (each of their choices), not when (or, for a prompt over the context, never after) their tokenisation ends; what
     * the tokenisation then gives reaches neither the engine nor the log.
     */
    @Test
    void requestsWhoseClientsWentWhileTheyWereTokenisedAreLoggedAndCountedAtOnce() throws Exception {
        HeldTokenizer tok = new HeldTokenizer();
        server = TestServer.start((cfg, log) -> new LoadedModel("scripted", "/scripted", false, backend, tok, null),
                Map.of("limits.maxContextTokens", 64), null, null);
        try (LogCapture log = new LogCapture()) {
            List<RawStream> clients = new java.util.ArrayList<>();
            // the third prompt is over the context limit (an error nobody is left to read)
            // the second asks for three choices: each counts as a request, as when one is cancelled later
            for (String prompt : List.of("HOLD one", "HOLD two", "HOLD " + "lorem ipsum ".repeat(100)))
                clients.add(new RawStream(server.port, "/v1/completions", "{\"prompt\":\"" + prompt + "\",\"max_tokens\":1"
                        + (prompt.equals("HOLD two") ? ",\"n\":3" : "") + "}", false));
            try {
                assertTrue(TestServer.eventually(10_000, () -> tok.held.get() == 3), "the three prompts are being tokenised");
                for (RawStream c : clients) c.close();
                assertTrue(TestServer.eventually(5000, () -> log.linesWith("dropped before it reached the engine").size() == 3),
                        "each is said while its tokenisation still runs: " + log.linesWith("HttpVerticle"));
                // each led by its own request id, as the request's other lines are
                java.util.regex.Pattern said = java.util.regex.Pattern.compile(
                        "request (cmpl-\\w+): POST /v1/completions: the client went away while the request was being tokenised");
                java.util.Set<String> ids = new java.util.HashSet<>();
                for (String l : log.linesWith("dropped before it reached the engine")) {
                    java.util.regex.Matcher m = said.matcher(l);
                    assertTrue(m.find(), l);
                    ids.add(m.group(1));
                }
                assertEquals(3, ids.size(), ids.toString());
                assertTrue(server.get("/metrics").body().contains("ds4j:requests_cancelled_total 5.0"));
            } finally {
                tok.release.countDown();
            }
            // the tokenisations end: nothing more is said or counted, nothing reaches the engine
            assertTrue(TestServer.eventually(5000, () -> server.state().openExchanges() == 0), "the tokenisations ended");
            Thread.sleep(200);
            assertEquals(3, log.linesWith("dropped before it reached the engine").size(), log.linesWith("HttpVerticle").toString());
            assertTrue(log.linesWith("rejected with").isEmpty(), log.linesWith("HttpVerticle").toString());
            assertTrue(log.linesWith("EngineVerticle").stream().noneMatch(l -> l.contains("admitted")), log.linesWith("EngineVerticle").toString());
            assertTrue(server.get("/metrics").body().contains("ds4j:requests_cancelled_total 5.0"));
        }
    }

    @Test
    void aFailingRequestDoesNotAffectOthers() throws Exception {
        backend.delayMs = 5;
        backend.failOn = TestServer.tokenizer().encode("EXPLODE");
        server = TestServer.scripted(backend, Map.of());
        CompletableFuture<TestServer.Resp> good = CompletableFuture.supplyAsync(() -> {
            try {
                return server.post("/v1/chat/completions", TestServer.chat("Please count for a long time.",
                        "\"stream\":true,\"max_tokens\":60,\"stream_options\":{\"include_usage\":true}"));
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
        TestServer.Resp bad = server.post("/v1/chat/completions", TestServer.chat("EXPLODE", "\"stream\":true"));
        assertEquals(200, bad.status());
        String last = bad.events().getLast();
        JsonNode err = Json.MAPPER.readTree(last).get("error");
        assertNotNull(err, "the stream ends with an error event: " + bad.body());
        assertTrue(err.get("message").asText().contains("injected backend fault"));
        TestServer.Resp bad2 = server.post("/v1/chat/completions", TestServer.chat("EXPLODE", ""));
        assertEquals(500, bad2.status());
        assertEquals("server_error", bad2.json().at("/error/type").asText());
        TestServer.Resp ok = good.get();
        assertEquals(200, ok.status());
        assertEquals("[DONE]", ok.events().getLast());
        JsonNode usage = Json.MAPPER.readTree(ok.events().get(ok.events().size() - 2)).get("usage");
        assertEquals(60, usage.get("completion_tokens").asInt());
        assertTrue(server.get("/metrics").body().contains("ds4j:requests_failed_total 2.0"));
        assertEquals(200, server.post("/v1/chat/completions", TestServer.chat("Hi", "")).status());
    }
}
