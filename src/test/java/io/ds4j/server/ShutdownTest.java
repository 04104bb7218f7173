package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.vertx.core.Future;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Graceful shutdown ({@link Ds4jServer#close}, what SIGTERM / Ctrl-C run): running requests finish within
 * {@code server.shutdownGraceSeconds}, new and queued ones get 503 server_shutting_down, the ones past the grace period
 * end with that 503 (an error event on a stream) after everything generated before it, and every sequence is released.
 * With the engine's thread stuck inside one step, the HTTP side answers in its place and the close still ends.
 */
class ShutdownTest {
    private final ScriptedBackend backend = new ScriptedBackend(TestServer::defaultScript);
    private TestServer server;
    private Future<Void> closing;

    @AfterEach
    void stop() {
        CountDownLatch h = backend.gate;
        if (h != null) h.countDown();
        if (closing == null && server != null) server.close();
    }

    private static String errorCode(String json) throws Exception {
        JsonNode e = Json.MAPPER.readTree(json).get("error");
        assertNotNull(e, "an error body: " + json);
        return e.get("code").asText();
    }

    @Test
    void runningStreamsFinishWhileNewRequestsAreRefused() throws Exception {
        backend.delayMs = 20;
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none", "server.shutdownGraceSeconds", 30));
        String body = TestServer.chat("Please count for a long time.", "\"stream\":true,\"max_tokens\":100");
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions", body)) {
            assertEquals(200, s.status);
            assertNotNull(s.nextData());
            closing = server.server.close();
            assertTrue(TestServer.eventually(3000, () -> server.state().draining()), "the server is draining");
            // the listener is still open while the stream runs: a new request and /health are told why
            TestServer.Resp refused = server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
            assertEquals(503, refused.status());
            assertEquals("server_shutting_down", errorCode(refused.body()));
            assertEquals("5", refused.headers().firstValue("Retry-After").orElse(null));
            TestServer.Resp health = server.get("/health");
            assertEquals(503, health.status());
            assertEquals("shutting_down", health.json().get("status").asText());
            List<String> rest = new ArrayList<>();
            for (String d = s.nextData(); d != null; d = s.nextData()) {
                rest.add(d);
                if (d.equals("[DONE]")) break;
            }
            assertEquals("[DONE]", rest.getLast(), "the running stream ran to its end: " + rest);
            JsonNode last = Json.MAPPER.readTree(rest.get(rest.size() - 2));
            assertEquals("length", last.at("/choices/0/finish_reason").asText(), "it stopped at max_tokens, not at the shutdown");
        }
        closing.toCompletionStage().toCompletableFuture().get(20, TimeUnit.SECONDS);
        assertEquals(0, backend.openSequences(), "every sequence released");
    }

    @Test
    void requestsPastTheGracePeriodEndWith503AfterWhatWasGenerated() throws Exception {
        backend.delayMs = 10;
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none", "server.shutdownGraceSeconds", 1,
                "limits.maxActive", 2));
        // two running (one streamed, one not), one queued behind them
        CompletableFuture<TestServer.Resp> plain = CompletableFuture.supplyAsync(() -> {
            try {
                return server.post("/v1/chat/completions", TestServer.chat("Please count for a long time.", "\"max_tokens\":3000"));
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions", SchedulingTest.LONG)) {
            assertEquals(200, s.status);
            StringBuilder content = new StringBuilder();
            content.append(Json.MAPPER.readTree(s.nextData()).at("/choices/0/delta/content").asText(""));
            assertTrue(TestServer.eventually(5000, () -> server.state().metrics().running.get() == 2), "two run");
            CompletableFuture<TestServer.Resp> queued = CompletableFuture.supplyAsync(() -> {
                try {
                    return server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            assertTrue(TestServer.eventually(5000, () -> server.state().metrics().waiting.get() == 1), "one waits");
            long t0 = System.nanoTime();
            closing = server.server.close();
            TestServer.Resp q = queued.get(10, TimeUnit.SECONDS);
            assertEquals(503, q.status(), "the queued request is refused at once: " + q.body());
            assertEquals("server_shutting_down", errorCode(q.body()));
            String error = s.firstError(n -> content.append(n.at("/choices/0/delta/content").asText("")));
            assertNotNull(error, "the stream ends with an error event");
            assertEquals("server_shutting_down", errorCode(error));
            double waited = (System.nanoTime() - t0) / 1e9;
            assertTrue(waited >= 0.9 && waited < 10, "ended at the grace period's end, after " + waited + " s");
            // what the client got before the error is the script's text from its start, without a gap
            String expected = TestServer.tokenizer().decode(TestServer.defaultScript(TestServer.tokenizer().encode(
                    "Please count for a long time.")));
            assertTrue(content.length() > 0 && expected.startsWith(content.toString()),
                    "the content before the error is the script's start: " + content);
            TestServer.Resp p = plain.get(10, TimeUnit.SECONDS);
            assertEquals(503, p.status(), p.body());
            assertEquals("server_shutting_down", errorCode(p.body()));
        }
        closing.toCompletionStage().toCompletableFuture().get(20, TimeUnit.SECONDS);
        assertEquals(0, backend.openSequences(), "every sequence released");
        assertEquals("shutdown", server.state().recent().getLast().outcome());
    }

    /**
     * A request with n = 2 whose choice 0 runs while choice 1 waits for a slot is running, not queued: the shutdown's
     * 503 (an error event after choice 0's text) says that choice 1 had not started and the request ends unfinished,
     * without waiting for the grace period (its choice 1 could never start).
     */
    @Test
    void aRequestWithAChoiceStillQueuedIsToldWhichChoiceHadNotStarted() throws Exception {
        backend.delayMs = 10;
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none", "server.shutdownGraceSeconds", 30,
                "limits.maxActive", 1));
        String body = TestServer.chat("Please count for a long time.", "\"stream\":true,\"max_tokens\":3000,\"n\":2");
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions", body)) {
            assertEquals(200, s.status);
            assertNotNull(s.nextData());
            assertTrue(TestServer.eventually(5000, () -> server.state().metrics().running.get() == 1
                    && server.state().metrics().waiting.get() == 1), "choice 0 runs, choice 1 waits");
            closing = server.server.close();
            // each choice's role chunk goes out at the start; only choice 0 generates text
            String error = s.firstError(n -> {
                if (n.at("/choices/0/index").asInt(0) == 1) assertEquals("", n.at("/choices/0/delta/content").asText(""), "choice 1 ran: " + n);
            });
            assertNotNull(error, "the stream ends with an error event");
            assertEquals("server_shutting_down", errorCode(error));
            assertEquals("the server is shutting down and choice 1 of the request's 2 was still queued, not started; a request's"
                    + " choices are answered together, so it ends here unfinished and its running choices are stopped; retry on"
                    + " another instance or once it is back", Json.MAPPER.readTree(error).at("/error/message").asText());
        }
        closing.toCompletionStage().toCompletableFuture().get(20, TimeUnit.SECONDS);
        assertEquals(0, backend.openSequences(), "every sequence released");
    }

    @Test
    @org.junit.jupiter.api.Timeout(value = 120, threadMode = org.junit.jupiter.api.Timeout.ThreadMode.SEPARATE_THREAD)
    void aStuckEngineStillShutsDownInBoundedTime() throws Exception {
        server = TestServer.scripted(backend, Map.of("speculative.draft", "none", "server.shutdownGraceSeconds", 1,
                "limits.maxActive", 1));
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions", SchedulingTest.LONG)) {
            assertEquals(200, s.status);
            assertNotNull(s.nextData());
            // the engine's thread now stays inside one step: no drain, no timer and no undeploy can run on it
            backend.gate = new CountDownLatch(1);
            long f0 = backend.forwards.get();
            assertTrue(TestServer.eventually(5000, () -> backend.forwards.get() > f0), "the engine is inside a step");
            CompletableFuture<TestServer.Resp> queued = CompletableFuture.supplyAsync(() -> {
                try {
                    return server.post("/v1/chat/completions", TestServer.chat("Hi", ""));
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            assertTrue(TestServer.eventually(5000, () -> server.state().openGenerations() == 2), "the second request was submitted");
            long t0 = System.nanoTime();
            closing = server.server.close();
            // the waiting request gets its 503 without the engine, soon after the engine fails to take up the shutdown
            TestServer.Resp q = queued.get(Ds4jServer.ENGINE_ANSWER_MS / 1000 + 5, TimeUnit.SECONDS);
            assertEquals(503, q.status(), q.body());
            assertEquals("server_shutting_down", errorCode(q.body()));
            double refused = (System.nanoTime() - t0) / 1e9;
            assertTrue(refused < Ds4jServer.ENGINE_ANSWER_MS / 1000.0 + 3, "refused after " + refused + " s");
            // the running stream ends with the 503 error event once the grace period and the engine's margin are over
            String error = s.firstError(n -> { });
            assertNotNull(error, "the stream ends with an error event");
            assertEquals("server_shutting_down", errorCode(error));
            // and the server closes although the engine's thread never comes back
            closing.toCompletionStage().toCompletableFuture().get(Ds4jServer.ENGINE_MARGIN_MS / 1000 + Ds4jServer.FLUSH_WAIT_MS / 1000
                    + Ds4jServer.CLOSE_WAIT_MS / 1000 + 10, TimeUnit.SECONDS);
            double closed = (System.nanoTime() - t0) / 1e9;
            assertTrue(closed < 1 + (Ds4jServer.ENGINE_MARGIN_MS + Ds4jServer.FLUSH_WAIT_MS + Ds4jServer.CLOSE_WAIT_MS) / 1000.0 + 3,
                    "closed after " + closed + " s");
        }
    }
}
