package io.ds4j.server;

import io.ds4j.app.DefaultModelProvider;
import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.vertx.core.Future;
import io.vertx.core.Vertx;
import io.vertx.core.http.HttpClient;
import io.vertx.core.http.HttpClientOptions;
import io.vertx.core.http.HttpMethod;
import io.vertx.core.http.PoolOptions;
import io.vertx.core.http.RequestOptions;
import io.vertx.junit5.VertxExtension;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A bounded load test on loopback: 64 concurrent streaming clients against the embedded model (8 running, the rest
 * queued) all get complete, well-formed streams with correct usage counts (checked against one logprobs entry per
 * generated token and against /tokenize), and /metrics agrees with the client-side totals.
 */
@ExtendWith(VertxExtension.class)
class LoadTest {
    static final int CLIENTS = 64, MAX_TOKENS = 12;
    static TestServer server;
    static Vertx vertx;
    /** In a field: Vert.x closes unreachable clients (java-stack.md). */
    static HttpClient client;

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.start(new DefaultModelProvider(), Map.of("limits.maxQueue", CLIENTS), null, null);
        vertx = Vertx.vertx();
        client = vertx.createHttpClient(new HttpClientOptions().setDefaultHost("127.0.0.1").setDefaultPort(server.port),
                new PoolOptions().setHttp1MaxSize(CLIENTS + 8));
    }

    @AfterAll
    static void stop() {
        client.close().await();
        vertx.close().await();
        server.close();
    }

    record Result(String body, int status) {}

    static String body(int i) {
        return TestServer.chat("Client " + i + " asks for a story about " + "the sea ".repeat(i % 5 + 1), "\"stream\":true,"
                + "\"stream_options\":{\"include_usage\":true},\"max_tokens\":" + MAX_TOKENS + ",\"ignore_eos\":true,"
                + "\"temperature\":0,\"logprobs\":true").replace("\"model\":\"scripted\",", "");
    }

    @Test
    void sixtyFourConcurrentStreams() throws Exception {
        List<Future<Result>> all = new ArrayList<>();
        long t0 = System.nanoTime();
        for (int i = 0; i < CLIENTS; i++) {
            String b = body(i);
            all.add(client.request(new RequestOptions().setMethod(HttpMethod.POST).setURI("/v1/chat/completions")
                            .putHeader("Content-Type", "application/json").setIdleTimeout(120_000))
                    .compose(req -> req.send(b))
                    .compose(resp -> resp.body().map(buf -> new Result(buf.toString(), resp.statusCode()))));
        }
        Future.all(all).await(Duration.ofSeconds(180).toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
        double secs = (System.nanoTime() - t0) / 1e9;
        long promptSum = 0, completionSum = 0;
        for (int i = 0; i < CLIENTS; i++) {
            Result r = all.get(i).result();
            assertEquals(200, r.status(), r.body());
            int[] counts = checkStream(r.body(), i);
            promptSum += counts[0];
            completionSum += counts[1];
        }
        System.out.printf("load test: %d streams, %d prompt + %d generated tokens in %.1f s%n", CLIENTS, promptSum, completionSum, secs);
        assertEquals((long) CLIENTS * MAX_TOKENS, completionSum);
        String metrics = server.get("/metrics").body();
        assertEquals(promptSum, metric(metrics, "vllm:prompt_tokens_total"));
        assertEquals(completionSum, metric(metrics, "vllm:generation_tokens_total"));
        assertEquals(completionSum, metric(metrics, "llamacpp:tokens_predicted_total"));
        assertEquals(CLIENTS, metric(metrics, "vllm:request_success_total{finished_reason=\"length\"}"));
        assertEquals(CLIENTS, metric(metrics, "vllm:time_to_first_token_seconds_count"));
        assertEquals(CLIENTS, metric(metrics, "vllm:e2e_request_latency_seconds_count"));
        // the per-request histograms vLLM's dashboards chart
        assertEquals(promptSum, metric(metrics, "vllm:request_prompt_tokens_sum"));
        assertEquals(completionSum, metric(metrics, "vllm:request_generation_tokens_sum"));
        assertEquals((long) CLIENTS * MAX_TOKENS, metric(metrics, "vllm:request_max_num_generation_tokens_sum"));
        for (String h : List.of("vllm:request_prompt_tokens_count", "vllm:request_prefill_time_seconds_count",
                "vllm:request_decode_time_seconds_count"))
            assertEquals(CLIENTS, metric(metrics, h), h);
        assertEquals(metric(metrics, "vllm:inter_token_latency_seconds_count"), metric(metrics, "vllm:time_per_output_token_seconds_count"));
        assertTrue(metric(metrics, "vllm:time_per_output_token_seconds_count") >= CLIENTS);
        assertEquals(0, metric(metrics, "vllm:num_requests_running"));
        assertEquals(0, metric(metrics, "vllm:num_requests_waiting"));
        // as vLLM's, every vllm: series is labelled with the served model's id (its dashboards select by it)
        String id = server.get("/v1/models").json().at("/data/0/id").asText();
        List<String> series = metrics.lines().filter(l -> l.startsWith("vllm:")).toList();
        assertTrue(series.size() > 20, metrics);
        for (String l : series) assertTrue(l.contains("model_name=\"" + id + "\""), l);
        assertEquals(CLIENTS, metric(metrics, "vllm:request_success_total{finished_reason=\"length\",model_name=\"" + id + "\"}"));
        assertTrue(metrics.lines().filter(l -> l.startsWith("ds4j:") || l.startsWith("llamacpp:")).noneMatch(l -> l.contains("model_name")),
                "only vLLM's series carry model_name");
    }

    static long metric(String text, String name) {
        double v = PromText.value(text, name);
        assertFalse(Double.isNaN(v), name + " in /metrics");
        return Math.round(v);
    }

    /** Checks one stream's shape; returns {prompt tokens, completion tokens}. */
    static int[] checkStream(String body, int i) throws Exception {
        assertTrue(body.endsWith("data: [DONE]\n\n"), "stream " + i + " ends with [DONE]");
        List<String> frames = new ArrayList<>();
        for (String f : body.split("\n\n")) {
            assertTrue(f.startsWith("data: "), "frame of stream " + i + ": " + f);
            frames.add(f.substring(6));
        }
        String id = null;
        int logprobTokens = 0;
        String finish = null;
        JsonNode usage = null;
        for (int k = 0; k < frames.size() - 1; k++) {
            JsonNode j = Json.MAPPER.readTree(frames.get(k));
            assertFalse(j.has("error"), frames.get(k));
            if (id == null) id = j.get("id").asText();
            assertEquals(id, j.get("id").asText(), "one id per stream");
            if (k == 0) assertEquals("assistant", j.at("/choices/0/delta/role").asText());
            // include_usage: every chunk has the key, null before the closing one, as OpenAI sends them
            assertTrue(j.has("usage"), frames.get(k));
            if (!j.get("usage").isNull()) {
                assertEquals(frames.size() - 2, k, "usage is the last chunk before [DONE]");
                assertEquals(0, j.get("choices").size());
                usage = j.get("usage");
                continue;
            }
            JsonNode c = j.at("/choices/0");
            logprobTokens += c.path("logprobs").path("content").size();
            if (!c.path("finish_reason").isNull()) {
                assertNull(finish, "one finish chunk");
                finish = c.get("finish_reason").asText();
            }
        }
        assertEquals("length", finish);
        assertNotNull(usage, "usage chunk of stream " + i);
        int completion = usage.get("completion_tokens").asInt();
        assertEquals(MAX_TOKENS, completion);
        assertEquals(completion, logprobTokens, "one logprobs entry per generated token");
        int prompt = usage.get("prompt_tokens").asInt();
        String msgs = Json.MAPPER.readTree(body(i)).get("messages").toString();
        int expected = server.post("/tokenize", "{\"messages\":" + msgs + "}").json().get("count").asInt();
        assertEquals(expected, prompt, "prompt_tokens of stream " + i);
        assertEquals(prompt + completion, usage.get("total_tokens").asInt());
        return new int[]{prompt, completion};
    }
}
