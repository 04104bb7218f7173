package io.ds4j.server;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * vLLM's KV-cache gauge, {@code vllm:kv_cache_usage_perc} and its older name {@code vllm:gpu_cache_usage_perc}: 0 while
 * nothing runs; while a request runs, the tokens of state its sequence holds over the engine's capacity (a context per
 * slot, at most model.cacheTokens), rising as it generates; 0 again once it has ended.
 */
class KvCacheUsageTest {
    static final String NEW = "vllm:kv_cache_usage_perc", OLD = "vllm:gpu_cache_usage_perc";
    TestServer server;

    @AfterEach
    void stop() {
        if (server != null) server.close();
    }

    double usage() throws Exception {
        String m = server.get("/metrics").body();
        double v = PromText.value(m, NEW);
        assertEquals(v, PromText.value(m, OLD), "both names carry one value: " + m);
        return v;
    }

    /** The prompt tokens of a chat body, as the server counts them. */
    int promptTokens(String body) throws Exception {
        TestServer.Resp r = server.post("/tokenize", body);
        assertEquals(200, r.status(), r.body());
        return r.json().get("count").asInt();
    }

    /**
     * Runs a long streamed request and checks the gauge against the capacity: a whole number of tokens of it held, at
     * least the prompt and at most the prompt plus max_tokens, more after further tokens; 0 before and after.
     */
    void check(long capacity) throws Exception {
        assertEquals(0.0, usage(), "idle");
        String body = SchedulingTest.LONG;
        int prompt = promptTokens(body);
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions", body)) {
            assertEquals(200, s.status);
            for (int i = 0; i < 6; i++) s.nextData();
            double a = usage();
            double held = a * capacity;
            assertEquals(Math.rint(held), held, 1e-6, "a whole number of tokens of " + capacity + ": " + a);
            assertTrue(held >= prompt && held <= prompt + 3000, "holds the prompt (" + prompt + " tokens) and what it generated: " + held);
            for (int i = 0; i < 40; i++) s.nextData();
            double b = usage();
            assertTrue(b > a, "rises as the request generates: " + a + " then " + b);
        }
        assertTrue(TestServer.eventually(3000, () -> server.state().metrics().running.get() == 0), "the request ended");
        assertEquals(0.0, usage(), "its state released");
    }

    @Test
    void aContextPerSlotIsTheWhole() throws Exception {
        ScriptedBackend b = new ScriptedBackend(TestServer::defaultScript);
        b.delayMs = 5;
        server = TestServer.scripted(b, Map.of("speculative.draft", "none", "limits.maxActive", 3));
        check(3L * server.state().maxContext());
    }

    /**
     * A reload that lowers limits.maxContextTokens below what a running request was admitted with leaves that request
     * its slot's context in the whole (it read 1.0 while the request held a few hundred of its 32,768 tokens).
     */
    @Test
    void aRunningRequestKeepsTheContextItWasAdmittedWith(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
        ScriptedBackend b = new ScriptedBackend(TestServer::defaultScript);
        b.delayMs = 5;
        java.nio.file.Path f = dir.resolve("server.json");
        String text = "{\"server\": {\"configScanMs\": 50}, \"limits\": {\"maxActive\": 2}, \"speculative\": {\"draft\": \"none\"}}";
        java.nio.file.Files.writeString(f, text);
        server = TestServer.start(TestServer.provider(b), Map.of(), f, text);
        int admitted = server.state().maxContext(), prompt = promptTokens(SchedulingTest.LONG);
        try (RawStream s = new RawStream(server.port, "/v1/chat/completions", SchedulingTest.LONG)) {
            assertEquals(200, s.status);
            for (int i = 0; i < 6; i++) s.nextData();
            java.nio.file.Files.writeString(f, text.replace("\"maxActive\": 2", "\"maxActive\": 2, \"maxContextTokens\": 64"));
            assertTrue(TestServer.eventually(5000, () -> server.state().maxContext() == 64), "reloaded: " + server.state().maxContext());
            for (int i = 0; i < 4; i++) s.nextData();
            // the engine takes the reloaded limit at its next tick, which may come after the server's state shows it:
            // until then the gauge's whole is still two slots of the old context (a CI run read 22 tokens of 65,536)
            double[] u = {0};
            TestServer.eventually(3000, () -> {
                try {
                    u[0] = usage();
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
                double h = u[0] * (admitted + 64);
                return Math.abs(Math.rint(h) - h) < 1e-6 && h >= prompt;
            });
            double held = u[0] * (admitted + 64);
            assertEquals(Math.rint(held), held, 1e-6, "a whole number of tokens of one admitted context and one free slot of 64: " + u[0]);
            assertTrue(held >= prompt && held <= prompt + 3000,
                    "the running request's slot keeps its admitted " + admitted + " tokens: " + u[0] + " of them would be " + held);
        }
    }

    @Test
    void modelCacheTokensIsTheWholeWhereItIsSet() throws Exception {
        ScriptedBackend b = new ScriptedBackend(TestServer::defaultScript);
        b.delayMs = 5;
        server = TestServer.scripted(b, Map.of("speculative.draft", "none", "model.cacheTokens", 5000));
        assertTrue(5000 < 8L * server.state().maxContext(), "the cache is the smaller bound");
        check(5000);
    }

    /**
     * One scrape reports one value under both names even when the engine publishes a new usage between the two gauges'
     * reads (a scrape beside a running request once read 0.0112 under one name and 0.011 under the other): the value is
     * read as the scrape starts.
     */
    @Test
    void bothNamesReadTheValueTheScrapeStartedWith() {
        var registry = Ds4jServer.newRegistry();  // the server's, with its naming convention
        ServerMetrics m = new ServerMetrics(registry, null);
        m.kvCache(1, 10);
        m.scrapeStarting();
        m.kvCache(5, 10);  // published while the scrape runs
        String text = registry.scrape();
        assertEquals(0.1, PromText.value(text, NEW), 1e-12, text);
        assertEquals(0.1, PromText.value(text, OLD), 1e-12, text);
        assertEquals(0.5, m.kvCacheUsage(), 1e-12, "the live value is the engine's last");
    }
}
