package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.vertx.junit5.VertxExtension;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.net.URI;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.*;

/** /health (GET and HEAD) while loading and when ready, /props, /v1/models and one model by id, the static playground and CORS. */
@ExtendWith(VertxExtension.class)
class EndpointsTest {

    /**
     * A static file's path with a trailing '/' is answered with the file's own path as Location; a path with a backslash
     * or a control character gets none (a browser drops a tab, and "/\t/host/..." would then read as another host).
     */
    @Test
    void aFilesPathWithATrailingSlashRedirectsOnlyToAPathOfThisServer() {
        String root = java.nio.file.Path.of("webroot").toAbsolutePath().toString();
        assertEquals("/app.js", HttpVerticle.fileWithoutSlash(root, "/app.js/"));
        assertEquals("/app.js", HttpVerticle.fileWithoutSlash(root, "//app.js//"));
        assertNull(HttpVerticle.fileWithoutSlash(root, "/app.js"), "no trailing slash");
        assertNull(HttpVerticle.fileWithoutSlash(root, "/vendor/"), "a folder");
        assertNull(HttpVerticle.fileWithoutSlash(root, "/nothing.js/"), "no file");
        assertNull(HttpVerticle.fileWithoutSlash(root, "/\t/evil.example/x%2F..%2F..%2F..%2Fapp.js/"), "a tab");
        assertNull(HttpVerticle.fileWithoutSlash(root, "/\\evil.example/..%2Fapp.js/"), "a backslash");
        assertNull(HttpVerticle.fileWithoutSlash(root, "/%2E%2E%2F%2E%2E%2Fetc%2Fhostname/"), "outside the folder");
    }

    @Test
    void healthSaysLoadingUntilTheModelIsReady() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        ModelProvider slow = (cfg, log) -> {
            release.await(30, TimeUnit.SECONDS);
            return TestServer.provider(new ScriptedBackend(TestServer::defaultScript)).load(cfg, log);
        };
        Map<String, Object> o = TestServer.base();
        Ds4jServer s = Ds4jServer.start(new Ds4jServer.Options(io.ds4j.server.config.ServerConfig.parse(null, "t", o), null, o, slow)).await();
        try {
            var http = java.net.http.HttpClient.newBuilder().version(java.net.http.HttpClient.Version.HTTP_1_1).build();
            HttpResponse<String> h = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + s.port() + "/health")).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(503, h.statusCode());
            assertTrue(h.body().contains("\"loading\""), h.body());
            String head = raw(s.port(), "HEAD", "/health");
            assertTrue(head.startsWith("HTTP/1.1 503") && head.endsWith("\r\n\r\n") && head.contains("Retry-After"), head);
            // a model asked for by id while loading: the 503 every model route gives then
            assertEquals(503, http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + s.port() + "/v1/models/scripted")).build(),
                    HttpResponse.BodyHandlers.ofString()).statusCode());
            HttpResponse<String> c = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + s.port() + "/v1/chat/completions"))
                    .POST(HttpRequest.BodyPublishers.ofString(TestServer.chat("Hi", ""))).build(), HttpResponse.BodyHandlers.ofString());
            assertEquals(503, c.statusCode(), c.body());
            assertTrue(c.headers().firstValue("retry-after").isPresent());
            assertTrue(c.body().contains("model_loading"));
            release.countDown();
            s.ready().await();
            h = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + s.port() + "/health")).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(200, h.statusCode());
            assertEquals("{\"status\":\"ready\"}", h.body());
        } finally {
            release.countDown();
            s.close().await();
        }
    }

    /** The raw answer to a request without a body, read to the end (the connection closes after it). */
    static String raw(int port, String method, String path) throws Exception {
        try (java.net.Socket s = new java.net.Socket("127.0.0.1", port)) {
            s.setSoTimeout(30_000);
            s.getOutputStream().write((method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    .getBytes(java.nio.charset.StandardCharsets.US_ASCII));
            return new String(s.getInputStream().readAllBytes(), java.nio.charset.StandardCharsets.UTF_8);
        }
    }

    /**
     * The status line and the header lines of a raw answer, in order of their text; an X-Request-Id's value is left out
     * (each request has its own), the header itself kept.
     */
    static java.util.SortedSet<String> headLines(String answer) {
        java.util.SortedSet<String> s = new java.util.TreeSet<>();
        for (String l : answer.substring(0, answer.indexOf("\r\n\r\n")).split("\r\n")) s.add(FrontChecks.withoutRequestId(l));
        return s;
    }

    @Test
    void oneModelByIdAndHealthByHead() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of())) {
            // the same object as the list's entry
            JsonNode listed = t.get("/v1/models").json().at("/data/0");
            // with a trailing slash too, as every other route takes one (POST /v1/chat/completions/)
            for (String path : List.of("/v1/models/scripted", "/models/scripted", "/v1/models/scripted/", "/models/scripted/")) {
                TestServer.Resp r = t.get(path);
                assertEquals(200, r.status(), path + ": " + r.body());
                assertEquals(listed, r.json(), path);
            }
            for (String id : List.of("gpt-4o", "deepseek-ai/DeepSeek-V4", "scripted/x")) {
                TestServer.Resp r = t.get("/v1/models/" + id);
                assertEquals(404, r.status(), r.body());
                JsonNode e = r.json().get("error");
                assertEquals("model_not_found", e.get("code").asText(), r.body());
                assertEquals("invalid_request_error", e.get("type").asText(), r.body());
                assertEquals("model", e.get("param").asText(), r.body());
                assertTrue(e.get("message").asText().contains("'" + id + "' does not exist"), r.body());
                TestServer.Resp slash = t.get("/v1/models/" + id + "/");
                assertEquals(404, slash.status(), slash.body());
                assertEquals(e, slash.json().get("error"), "the id without the trailing slash: " + slash.body());
            }
            TestServer.Resp post = t.post("/v1/models/scripted", "{}");
            assertEquals(405, post.status(), post.body());
            assertEquals("GET, HEAD", post.headers().firstValue("allow").orElse(null));

            // HEAD /health: GET's status and headers, no body
            String get = raw(t.port, "GET", "/health"), head = raw(t.port, "HEAD", "/health");
            assertTrue(get.startsWith("HTTP/1.1 200") && get.endsWith("{\"status\":\"ready\"}"), get);
            assertTrue(head.startsWith("HTTP/1.1 200"), head);
            assertTrue(head.endsWith("\r\n\r\n"), "no body: " + head);
            assertEquals(headLines(get), headLines(head), "the same status and headers");
            assertEquals("GET, HEAD", t.post("/health", "{}").headers().firstValue("allow").orElse(null));
        }
        // an organisation/name id, given as it is or with its '/' percent-encoded (as JS clients encode path parts)
        ScriptedBackend b = new ScriptedBackend(TestServer::defaultScript);
        ModelProvider named = (cfg, log) -> new LoadedModel("deepseek-ai/DeepSeek-V4-Flash", "/scripted", false, b,
                TestServer.tokenizer(), null);
        try (TestServer t = TestServer.start(named, Map.of(), null, null)) {
            for (String path : List.of("/v1/models/deepseek-ai/DeepSeek-V4-Flash", "/v1/models/deepseek-ai%2FDeepSeek-V4-Flash",
                    "/v1/models/deepseek-ai/DeepSeek-V4-Flash/")) {
                TestServer.Resp r = t.get(path);
                assertEquals(200, r.status(), path + ": " + r.body());
                assertEquals("deepseek-ai/DeepSeek-V4-Flash", r.json().get("id").asText(), path);
            }
        }
    }

    /** The header lines of a raw answer but one, in order of their text. */
    static java.util.SortedSet<String> headLinesBut(String answer, String header) {
        java.util.SortedSet<String> s = headLines(answer);
        s.removeIf(l -> l.toLowerCase(java.util.Locale.ROOT).startsWith(header + ":"));
        return s;
    }

    @Test
    void anOverLongRequestLineIsA414WithTheErrorBody() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of())) {
            FrontChecks.overLongRequestLineIsA414WithTheErrorBody(t.port);
        }
    }

    @Test
    void rangesPastALongAndStaleIfRangesAreServedAsRfc9110Says() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of())) {
            FrontChecks.rangesPastALongAndStaleIfRangesAreServedAsRfc9110Says(t.port);
        }
    }

    @Test
    void optionsOnAnUnknownPathIsA404OrAPreflightsAnswer() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                Map.of("server.cors.allowedOrigins", List.of("http://app.example")))) {
            FrontChecks.optionsOnAnUnknownPathIsAnsweredAsOnASingleServer(t.port, "http://app.example");
        }
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                Map.of("server.cors.allowedOrigins", List.of("http://app.example"), "server.apiKeys", List.of("k1")))) {
            FrontChecks.optionsOnAnUnknownApiPathNeedsTheKeyButAPreflightDoesNot(t.port, "http://app.example");
        }
    }

    @Test
    void everyKeyARequestSendsMustBeValid() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("server.apiKeys", List.of("k1")))) {
            FrontChecks.everyKeyARequestSendsMustBeValid(t.port);
        }
    }

    /** allowedOrigins "null" allows the Origin browsers send from file:// pages and sandboxed frames, and only it. */
    @Test
    void theNullOriginIsAllowedWhereConfigured() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                Map.of("server.cors.allowedOrigins", List.of("null")))) {
            for (String[] c : new String[][]{{"null", "null"}, {"http://app.example", null}}) {
                HttpRequest pre = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + t.port + "/v1/chat/completions"))
                        .method("OPTIONS", HttpRequest.BodyPublishers.noBody()).header("Origin", c[0])
                        .header("Access-Control-Request-Method", "POST").build();
                HttpResponse<String> r = t.http().send(pre, HttpResponse.BodyHandlers.ofString());
                assertEquals(c[1] != null ? 204 : 403, r.statusCode(), c[0] + ": " + r.body());
                assertEquals(c[1], r.headers().firstValue("access-control-allow-origin").orElse(null), c[0]);
            }
        }
    }

    @Test
    void headIsAnsweredWhereverGetIs() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of())) {
            for (String path : List.of("/v1/models", "/models", "/v1/models/scripted", "/models/scripted", "/v1/models/nope",
                    "/props", "/metrics", "/health", "/", "/app.css", "/no-such-file.html", "/v1/nothing")) {
                String get = raw(t.port, "GET", path), head = raw(t.port, "HEAD", path);
                assertTrue(head.endsWith("\r\n\r\n"), "no body: " + head);
                assertFalse(head.startsWith("HTTP/1.1 405"), path + ": " + head);
                if (path.equals("/metrics") || path.equals("/props")) {
                    // their figures move between two requests (counters, load): the same headers but the length
                    assertEquals(headLinesBut(get, "content-length"), headLinesBut(head, "content-length"), path);
                    assertTrue(head.toLowerCase(java.util.Locale.ROOT).contains("content-length: "), head);
                } else {
                    // (the static files carry a Date, which may turn to the next second between the two)
                    assertEquals(headLinesBut(get, "date"), headLinesBut(head, "date"), path + ": the same status and headers");
                }
            }
            FrontChecks.staticHeadsMatchGets(t.port);
            FrontChecks.unsatisfiableRangeIsA416WithTheErrorBody(t.port);
            FrontChecks.undecodableRequestsGetTheJsonError(t.port);
            // a wrong method is told HEAD is allowed
            TestServer.Resp post = t.post("/metrics", "{}");
            assertEquals(405, post.status());
            assertEquals("GET, HEAD", post.headers().firstValue("allow").orElse(null));
        }
        // with API keys, a HEAD without one gets the 401's status and headers
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("server.apiKeys", List.of("k")))) {
            String get = raw(t.port, "GET", "/v1/models"), head = raw(t.port, "HEAD", "/v1/models");
            assertTrue(get.startsWith("HTTP/1.1 401"), get);
            assertEquals(headLines(get), headLines(head));
        }
    }

    /**
     * The key check reads the path the router routes by: dot segments, doubled slashes and percent-escaped letters
     * reach the same API routes, so they need the key as the plain path does.
     */
    @Test
    void anApiPathWrittenAnotherWayStillNeedsTheKey() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("server.apiKeys", List.of("k")))) {
            for (String path : List.of("/v1/models", "//v1/models", "/./v1/models", "/%76%31/models", "/v1/./models",
                    "/x/../v1/models", "//props", "/%70rops", "/./metrics", "//tokenize")) {
                String get = raw(t.port, path.endsWith("tokenize") ? "POST" : "GET", path);
                assertTrue(get.startsWith("HTTP/1.1 401"), path + ": " + get);
            }
            String chat = raw(t.port, "POST", "/./v1/chat/completions");
            assertTrue(chat.startsWith("HTTP/1.1 401"), chat);
            // the playground's files stay open to all
            assertTrue(raw(t.port, "GET", "/./index.html").startsWith("HTTP/1.1 200"));
        }
    }

    /**
     * /props' scheduler section shows the values the scheduler works with: the prefill chunk and the floor under the
     * latency bound (scheduler.minPrefillChunk) each at most the token budget; the configured ones stay under config.
     */
    @Test
    void theSchedulersPropsShowTheValuesInEffect() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                Map.of("scheduler.tokenBudget", 48, "scheduler.minPrefillChunk", 64, "limits.prefillChunk", 512))) {
            JsonNode p = t.get("/props").json();
            assertEquals(48, p.at("/scheduler/tokenBudget").asInt());
            assertEquals(48, p.at("/scheduler/prefillChunk").asInt(), p.get("scheduler").toString());
            assertEquals(48, p.at("/scheduler/minPrefillChunk").asInt(), "a floor above the budget acts as the budget: " + p.get("scheduler"));
            assertEquals(64, p.at("/config/scheduler/minPrefillChunk").asInt(), "the configured value stays under config");
            assertEquals(512, p.at("/config/limits/prefillChunk").asInt());
            // limits shows what is in effect too, the configured value beside it, named
            assertEquals(48, p.at("/limits/prefillChunk").asInt(), p.get("limits").toString());
            assertEquals(512, p.at("/limits/prefillChunkConfigured").asInt(), p.get("limits").toString());
        }
        // a context limit past the model's: its context in effect, as n_ctx
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                Map.of("limits.maxContextTokens", 2_000_000))) {
            JsonNode p = t.get("/props").json();
            int nCtx = p.at("/limits/n_ctx").asInt();
            assertTrue(nCtx < 2_000_000, p.get("limits").toString());
            assertEquals(nCtx, p.at("/limits/maxContextTokens").asInt(), p.get("limits").toString());
            assertEquals(2_000_000, p.at("/limits/maxContextTokensConfigured").asInt(), p.get("limits").toString());
            assertEquals(2_000_000, p.at("/config/limits/maxContextTokens").asInt());
        }
        // a floor above the chunk acts as the chunk: a step gives a prompt at most one chunk
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                Map.of("scheduler.minPrefillChunk", 512, "limits.prefillChunk", 100))) {
            JsonNode p = t.get("/props").json();
            assertEquals(100, p.at("/scheduler/prefillChunk").asInt(), p.get("scheduler").toString());
            assertEquals(100, p.at("/scheduler/minPrefillChunk").asInt(), p.get("scheduler").toString());
            assertEquals(512, p.at("/config/scheduler/minPrefillChunk").asInt(), "the configured value stays under config");
        }
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("scheduler.minPrefillChunk", 32))) {
            JsonNode p = t.get("/props").json();
            assertEquals(32, p.at("/scheduler/minPrefillChunk").asInt(), "below the budget: as configured");
            assertEquals(512, p.at("/scheduler/prefillChunk").asInt());
        }
    }

    @Test
    void propsModelsPlaygroundAndCors() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                Map.of("server.cors.allowedOrigins", List.of("http://app.example"), "speculative.q", 3))) {
            JsonNode p = t.get("/props").json();
            assertEquals("cpu", p.get("backend").asText());
            assertEquals("ngram", p.at("/speculative/draft").asText());
            assertEquals("3", p.at("/speculative/q").asText());
            assertTrue(p.at("/speculative/q").isInt(), "as the file writes it: " + p);
            // the cpu backend's effective state: F32 verify attention over its F16 cache, experts in host memory
            assertFalse(p.at("/verify/f16KvRequested").asBoolean());
            assertFalse(p.at("/verify/f16KvActive").asBoolean());
            assertEquals("f32", p.at("/verify/attention").asText());
            assertEquals(512, p.at("/verify/f32ShortContextRows").asInt());
            assertTrue(p.at("/verify/diagnostic").isNull());
            assertEquals("host", p.at("/engine/expertPlacement").asText());
            assertEquals("auto", p.at("/engine/expertPlacementConfigured").asText());
            assertEquals(8, p.at("/limits/maxActive").asInt());
            assertEquals(32768, p.at("/limits/n_ctx").asInt());
            assertEquals("scripted", p.at("/model/id").asText());
            assertTrue(p.get("pending_restart").isEmpty());

            JsonNode m = t.get("/v1/models").json();
            assertEquals("list", m.get("object").asText());
            assertEquals("scripted", m.at("/data/0/id").asText());
            assertEquals("model", m.at("/data/0/object").asText());
            // vLLM's field for the context limit in effect, the same as /props' n_ctx
            assertEquals(32768, m.at("/data/0/max_model_len").asInt(), m.toString());
            assertEquals(m.at("/data/0/meta/n_ctx"), m.at("/data/0/max_model_len"));
            // the checkpoint's rows and the tokenizer's ids, each named: top_k's bound is the tokenizer's
            int tokenizerIds = TestServer.tokenizer().vocabSize();
            assertEquals(tokenizerIds, m.at("/data/0/meta/n_vocab_tokenizer").asInt(), m.toString());
            assertEquals(tokenizerIds, p.at("/model/n_vocab_tokenizer").asInt(), p.toString());
            assertEquals(p.at("/model/n_vocab"), m.at("/data/0/meta/n_vocab"));

            TestServer.Resp index = t.get("/");
            assertEquals(200, index.status());
            assertTrue(index.body().contains("<html"), "the playground page is served");

            HttpRequest pre = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + t.port + "/v1/chat/completions"))
                    .method("OPTIONS", HttpRequest.BodyPublishers.noBody()).header("Origin", "http://app.example")
                    .header("Access-Control-Request-Method", "POST").build();
            HttpResponse<String> r = t.http().send(pre, HttpResponse.BodyHandlers.ofString());
            assertEquals(204, r.statusCode());
            assertEquals("http://app.example", r.headers().firstValue("access-control-allow-origin").orElse(null));
            // the headers a browser SDK asks for are allowed (the openai JS SDK sends X-Stainless-*)
            String asked = "authorization, content-type, x-stainless-arch, x-stainless-lang, x-stainless-os, x-stainless-retry-count";
            HttpRequest sdk = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + t.port + "/v1/chat/completions"))
                    .method("OPTIONS", HttpRequest.BodyPublishers.noBody()).header("Origin", "http://app.example")
                    .header("Access-Control-Request-Method", "POST").header("Access-Control-Request-Headers", asked).build();
            HttpResponse<String> rs = t.http().send(sdk, HttpResponse.BodyHandlers.ofString());
            assertEquals(204, rs.statusCode());
            assertEquals(asked, rs.headers().firstValue("access-control-allow-headers").orElse(null));
            assertTrue(rs.headers().allValues("vary").toString().contains("Access-Control-Request-Headers"), rs.headers().toString());
            // a script of that origin may read the header that names the fields a request's endpoint ignored, and the request's id
            TestServer.Resp typo = t.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_token\":3"), "Origin", "http://app.example");
            assertEquals(RequestFields.HEADER + ", " + HttpVerticle.NOTES_HEADER + ", " + HttpVerticle.REQUEST_ID,
                    typo.headers().firstValue("access-control-expose-headers").orElse(null));
            assertTrue(typo.headers().firstValue(RequestFields.HEADER).isPresent(), typo.headers().toString());
            TestServer.Resp other = t.get("/v1/models", "Origin", "http://evil.example");
            assertTrue(other.headers().firstValue("access-control-allow-origin").isEmpty(), "other origins get no CORS headers");
            // but every answer says that it depends on the Origin, so that no cache hands it to an allowed origin
            assertEquals(List.of("Origin"), other.headers().allValues("vary"), "another origin's answer");
            assertEquals(List.of("Origin"), t.get("/v1/models").headers().allValues("vary"), "an answer to no Origin");
            assertEquals(List.of("Origin"), typo.headers().allValues("vary"), "an allowed origin's answer");

            String metrics = t.get("/metrics").body();
            for (String name : List.of("vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                    "vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:prompt_tokens_total",
                    "vllm:generation_tokens_total", "vllm:spec_decode_num_draft_tokens_total",
                    "vllm:spec_decode_num_accepted_tokens_total", "llamacpp:requests_processing", "vertx_http_server",
                    "ds4j:stream_delivery_seconds_bucket"))
                assertTrue(metrics.contains(name), "/metrics has " + name);
        }
    }
}
