package io.ds4j.server;

import io.ds4j.app.DefaultModelProvider;
import io.ds4j.server.config.ConfigException;
import io.ds4j.server.config.ServerConfig;
import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A server that cannot start says why, promptly: the start future fails (it never hangs) with one line, and the
 * provider's quick checks run before anything binds.
 */
class StartFailureTest {

    static Throwable startFailure(Map<String, Object> overrides, ModelProvider p) throws Exception {
        Map<String, Object> o = TestServer.base();
        o.putAll(overrides);
        ServerConfig cfg = ServerConfig.parse(null, "t", o);
        CompletableFuture<Ds4jServer> f = Ds4jServer.start(new Ds4jServer.Options(cfg, null, o, p)).toCompletionStage().toCompletableFuture();
        ExecutionException e = assertThrows(ExecutionException.class, () -> f.get(30, TimeUnit.SECONDS));
        return e.getCause();
    }

    @Test
    void aPortInUseFailsTheStartWithOneLine() throws Exception {
        try (ServerSocket taken = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            int port = taken.getLocalPort();
            AtomicBoolean loaded = new AtomicBoolean();
            Throwable t = startFailure(Map.of("server.port", port), (cfg, log) -> {
                loaded.set(true);
                throw new IllegalStateException("must not load");
            });
            assertInstanceOf(Ds4jServer.StartException.class, t);
            assertEquals("cannot listen on 127.0.0.1:" + port + ": address already in use", t.getMessage());
            assertFalse(loaded.get(), "the model is not loaded when the port cannot be bound");
        }
    }

    @Test
    void theProviderCheckRunsBeforeBinding() throws Exception {
        int port;
        try (ServerSocket s = new ServerSocket(0, 50, InetAddress.getLoopbackAddress())) {
            port = s.getLocalPort();
        }
        ModelProvider p = new ModelProvider() {
            @Override
            public LoadedModel load(ServerConfig c, java.util.function.Consumer<String> log) {
                throw new IllegalStateException("must not load");
            }

            @Override
            public void check(ServerConfig c) {
                throw new IllegalArgumentException("model.backend: backend 'x' is not available on this machine");
            }
        };
        Throwable t = startFailure(Map.of("server.port", port), p);
        assertEquals("model.backend: backend 'x' is not available on this machine", t.getMessage());
        // the port was never bound
        try (ServerSocket again = new ServerSocket(port, 50, InetAddress.getLoopbackAddress())) {
            assertEquals(port, again.getLocalPort());
        }
    }

    @Test
    void theDefaultProviderChecksTheModelFolder() {
        var e = assertThrows(ConfigException.class, () -> new DefaultModelProvider().check(
                ServerConfig.parse(null, "t", Map.of("model.path", "/nonexistent/model"))));
        assertTrue(e.getMessage().startsWith("model.path: folder not found: /nonexistent/model"), e.getMessage());
        e = assertThrows(ConfigException.class, () -> new DefaultModelProvider().check(
                ServerConfig.parse(null, "t", Map.of("speculative.draft", "/nonexistent/draft"))));
        assertTrue(e.getMessage().startsWith("speculative.draft:"), e.getMessage());
        // every problem, one per key: a bad model folder does not hide a bad draft folder
        e = assertThrows(ConfigException.class, () -> new DefaultModelProvider().check(ServerConfig.parse(null, "t",
                Map.of("model.path", "/nonexistent/model", "speculative.draft", "/nonexistent/draft"))));
        assertEquals(2, e.problems().size(), e.getMessage());
        assertTrue(e.problems().get(0).startsWith("model.path: ") && e.problems().get(1).startsWith("speculative.draft: "),
                e.getMessage());
    }

    /** A default top-k above the loaded model's vocabulary fails the start, named (every request giving none would 400). */
    @Test
    void aDefaultTopKAboveTheVocabularyFailsTheStart() throws Exception {
        Map<String, Object> o = TestServer.base();
        o.put("sampling.top_k", 1000000);
        ServerConfig cfg = ServerConfig.parse(null, "t", o);
        Ds4jServer srv = Ds4jServer.start(new Ds4jServer.Options(cfg, null, o, TestServer.provider(new ScriptedBackend(
                TestServer::defaultScript)))).toCompletionStage().toCompletableFuture().get(30, TimeUnit.SECONDS);
        try {
            ExecutionException e = assertThrows(ExecutionException.class,
                    () -> srv.ready().toCompletionStage().toCompletableFuture().get(30, TimeUnit.SECONDS));
            String m = String.valueOf(e.getCause().getMessage());
            assertTrue(m.startsWith("sampling.top_k: must be in [-1, ") && m.endsWith("got 1000000"), m);
        } finally {
            srv.close().toCompletionStage().toCompletableFuture().get(30, TimeUnit.SECONDS);
        }
    }
}
