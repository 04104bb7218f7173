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

/** /health while loading and when ready, /props, /v1/models, the static playground and CORS. */
@ExtendWith(VertxExtension.class)
class EndpointsTest {

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

    @Test
    void propsModelsPlaygroundAndCors() throws Exception {
        try (TestServer t = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                Map.of("server.cors.allowedOrigins", List.of("http://app.example"), "speculative.q", "3"))) {
            JsonNode p = t.get("/props").json();
            assertEquals("cpu", p.get("backend").asText());
            assertEquals("ngram", p.at("/speculative/draft").asText());
            assertEquals("3", p.at("/speculative/q").asText());
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
            TestServer.Resp other = t.get("/v1/models", "Origin", "http://evil.example");
            assertTrue(other.headers().firstValue("access-control-allow-origin").isEmpty(), "other origins get no CORS headers");

            String metrics = t.get("/metrics").body();
            for (String name : List.of("vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                    "vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:prompt_tokens_total",
                    "vllm:generation_tokens_total", "vllm:spec_decode_num_draft_tokens_total",
                    "vllm:spec_decode_num_accepted_tokens_total", "llamacpp:requests_processing", "vertx_http_server"))
                assertTrue(metrics.contains(name), "/metrics has " + name);
        }
    }
}
