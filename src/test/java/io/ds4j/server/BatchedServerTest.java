package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.json.Json;
import io.ds4j.model.synth.ModelStore;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Continuous batching through the server on the embedded model (CPU backend): 16 concurrent requests of different
 * prompt lengths, plain and speculative (an n-gram draft, the model itself as draft model, or its MTP layer), greedy
 * and seeded sampled, each answer exactly (content and every logprob) what the same request gets alone; the engine's steps
 * really held many requests (the {@code ds4j:batch_size} histogram; with the MTP draft, its batched MTP steps too:
 * {@code ds4j:mtp_batch_size}), and /props shows the scheduler's limits. A long prompt prefilled beside decoding
 * requests under the latency bound (chunks cut to the learned step cost) leaves every answer as it is alone.
 */
class BatchedServerTest {

    static String body(int i) {
        String words = "the river keeps running toward the distant sea ".repeat(1 + (i * 7) % 40);
        String sampling = i % 2 == 0 ? "\"temperature\":0" : "\"temperature\":0.8,\"top_p\":0.95,\"seed\":" + (100 + i);
        String q = switch (i % 3) {
            case 0 -> "0";
            case 1 -> "2";
            default -> "\"auto\"";
        };
        return "{\"messages\":[{\"role\":\"user\",\"content\":" + Json.MAPPER.valueToTree("Question " + i + ": " + words)
                + "}],\"max_tokens\":" + (10 + i % 5) + "," + sampling + ",\"speculative_q\":" + q
                + ",\"ignore_eos\":true,\"logprobs\":true,\"top_logprobs\":2,\"cache_prompt\":false}";
    }

    /** What must not depend on the batch: the text and every logprob. */
    static String answer(TestServer.Resp r) {
        assertEquals(200, r.status(), r.body());
        JsonNode j = r.json();
        return j.at("/choices/0/message/content").asText() + "|" + j.at("/choices/0/logprobs");
    }

    @ParameterizedTest
    @ValueSource(strings = {"ngram", "model", "mtp"})
    void sixteenConcurrentRequestsAnswerAsTheyDoAlone(String draft) throws Exception {
        String d = draft.equals("model") ? ModelStore.ensure("tiny", 1, s -> { }).toAbsolutePath().toString() : draft;
        // whole chunks at the floor (no layer slices): a burst of prompts then starts decoding a chunk per step, so
        // steps hold many requests; slices would keep the bound instead and admit the burst more slowly on the CPU,
        // where a chunk's cost grows with its tokens (LayerSliceTest covers slices beside decoding requests)
        try (TestServer server = TestServer.start(new DefaultModelProvider(), Map.of("speculative.draft", d,
                "limits.maxActive", 16, "scheduler.tokenBudget", 48, "limits.prefillChunk", 64, "scheduler.layerSlices", false),
                null, null)) {
            int n = 16;
            List<String> alone = new ArrayList<>();
            for (int i = 0; i < n; i++) alone.add(answer(server.post("/v1/chat/completions", body(i))));
            List<CompletableFuture<TestServer.Resp>> fs = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                String b = body(i);
                fs.add(CompletableFuture.supplyAsync(() -> {
                    try {
                        return server.post("/v1/chat/completions", b);
                    } catch (Exception e) {
                        throw new RuntimeException(e);
                    }
                }));
            }
            for (int i = 0; i < n; i++) assertEquals(alone.get(i), answer(fs.get(i).get()), "request " + i + " in the batch");
            String metrics = server.get("/metrics").body();
            double steps = metric(metrics, "ds4j:batch_size_count"), small = metric(metrics, "ds4j:batch_size_bucket{le=\"4.0\"}");
            assertTrue(steps > 0 && small < steps, "some engine steps held more than 4 requests: " + small + " of " + steps);
            assertEquals(steps, metric(metrics, "vllm:iteration_tokens_count"), "tokens per step observed per step: "
                    + metrics.lines().filter(l -> l.contains("iteration")).limit(3).toList());
            JsonNode props = server.get("/props").json().get("scheduler");
            assertEquals(256, props.get("maxBatchRows").asInt());
            assertEquals(48, props.get("tokenBudget").asInt());
            assertEquals(48, props.get("prefillChunk").asInt(), "chunks are at most the token budget");
            assertEquals(1.6, props.get("maxTickStretch").asDouble(), "the latency bound on prefill, by default");
            assertEquals(48, props.get("minPrefillChunk").asInt(), "the floor in effect: scheduler.minPrefillChunk 64, at most the token budget");
            double mtpSteps = metric(metrics, "ds4j:mtp_batch_size_count"), mtpSmall = metric(metrics, "ds4j:mtp_batch_size_bucket{le=\"4.0\"}");
            if (draft.equals("mtp")) assertTrue(mtpSteps > 0, "the MTP drafts ran: " + mtpSteps);
            else assertEquals(0.0, mtpSteps, "no MTP steps without the MTP draft");
        }
    }

    /**
     * 12 concurrent requests, all with the MTP draft (prompts of different lengths, greedy and seeded sampled, widths
     * 2, 3 and auto): each answers exactly as alone, greedy ones (three checked) with the text of plain greedy
     * decoding, and the MTP steps of more than 8 of them ran as one batched MTP forward.
     */
    @org.junit.jupiter.api.Test
    void concurrentMtpRequestsAnswerAsAloneWithTheirMtpStepsBatched() throws Exception {
        try (TestServer server = TestServer.start(new DefaultModelProvider(), Map.of("speculative.draft", "mtp",
                "limits.maxActive", 16, "scheduler.tokenBudget", 512), null, null);
             var pool = java.util.concurrent.Executors.newFixedThreadPool(12)) {
            int n = 12;
            List<String> alone = new ArrayList<>(), plain = new ArrayList<>(), bodies = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                String words = "a small boat drifts past the harbour lights ".repeat(1 + i % 4) + "and " + i;
                String sampling = i % 2 == 0 ? "\"temperature\":0" : "\"temperature\":0.8,\"seed\":" + (300 + i);
                String q = switch (i % 3) {
                    case 0 -> "2";
                    case 1 -> "3";
                    default -> "\"auto\"";
                };
                String common = "{\"messages\":[{\"role\":\"user\",\"content\":" + Json.MAPPER.valueToTree(words)
                        + "}],\"max_tokens\":12,\"ignore_eos\":true,\"logprobs\":true,\"cache_prompt\":false," + sampling;
                bodies.add(common + ",\"speculative_q\":" + q + "}");
                alone.add(answer(server.post("/v1/chat/completions", bodies.get(i))));
                if (i % 4 == 0) plain.add(server.post("/v1/chat/completions", common + ",\"speculative_q\":0}").json()
                        .at("/choices/0/message/content").asText());
                else plain.add(null);
            }
            double before = metric(server.get("/metrics").body(), "ds4j:mtp_batch_size_count");
            List<java.util.concurrent.Future<TestServer.Resp>> fs = new ArrayList<>();
            for (String b : bodies) fs.add(pool.submit(() -> server.post("/v1/chat/completions", b)));
            for (int i = 0; i < n; i++) {
                String got = answer(fs.get(i).get());
                assertEquals(alone.get(i), got, "request " + i + " in the batch");
                if (plain.get(i) != null) assertEquals(plain.get(i) + "|", got.substring(0, got.indexOf('|') + 1),
                        "request " + i + ": greedy with the MTP draft is plain greedy");
            }
            String metrics = server.get("/metrics").body();
            double steps = metric(metrics, "ds4j:mtp_batch_size_count"), upTo8 = metric(metrics, "ds4j:mtp_batch_size_bucket{le=\"8.0\"}");
            assertTrue(steps > before && upTo8 < steps, "some batched MTP forwards held more than 8 requests: " + upTo8 + " of " + steps);
        }
    }

    /**
     * Four streams decode (80 tokens each) while a prompt of about 1,500 tokens is prefilled beside them, under the latency bound
     * (maxTickStretch 1.2, floor 16, so the learned bound cuts the 256-token chunks): every answer, the long prompt's
     * too, equals the same request run alone, and the scheduler's decisions reached /metrics.
     */
    @org.junit.jupiter.api.Test
    void aLongPromptBesideDecodingStreamsLeavesEveryAnswerAsAlone() throws Exception {
        try (TestServer server = TestServer.start(new DefaultModelProvider(), Map.of("limits.maxActive", 8,
                "scheduler.tokenBudget", 256, "limits.prefillChunk", 256, "scheduler.maxTickStretch", 1.2,
                "scheduler.minPrefillChunk", 16), null, null);
             var pool = java.util.concurrent.Executors.newFixedThreadPool(5)) {
            List<String> bodies = new ArrayList<>();
            for (int i = 0; i < 4; i++) bodies.add("{\"messages\":[{\"role\":\"user\",\"content\":\"Stream " + i
                    + " tells a story\"}],\"max_tokens\":80,\"ignore_eos\":true,\"logprobs\":true,\"cache_prompt\":false,"
                    + (i % 2 == 0 ? "\"temperature\":0" : "\"temperature\":0.8,\"seed\":" + (50 + i)) + "}");
            String longText = "lantern " + "the harbour keeps its lights burning through the long winter night ".repeat(120);
            String longBody = "{\"messages\":[{\"role\":\"user\",\"content\":" + Json.MAPPER.valueToTree(longText)
                    + "}],\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,\"cache_prompt\":false}";
            List<String> alone = new ArrayList<>();
            for (String b : bodies) alone.add(answer(server.post("/v1/chat/completions", b)));
            TestServer.Resp longAlone = server.post("/v1/chat/completions", longBody);
            String longAnswer = answer(longAlone);
            assertTrue(longAlone.json().at("/usage/prompt_tokens").asInt() > 1000, longAlone.body());
            List<java.util.concurrent.Future<TestServer.Resp>> fs = new ArrayList<>();
            for (String b : bodies) fs.add(pool.submit(() -> server.post("/v1/chat/completions", b)));
            double before = nan0(metric(server.get("/metrics").body(), "vllm:generation_tokens_total"));
            assertTrue(TestServer.eventually(60_000, () -> {
                try {
                    return nan0(metric(server.get("/metrics").body(), "vllm:generation_tokens_total")) >= before + 8;
                } catch (Exception e) {
                    return false;
                }
            }), "the streams decode when the long prompt arrives");
            var lf = pool.submit(() -> server.post("/v1/chat/completions", longBody));
            for (int i = 0; i < bodies.size(); i++) assertEquals(alone.get(i), answer(fs.get(i).get()), "stream " + i);
            assertEquals(longAnswer, answer(lf.get()), "the long prompt's answer");
            String metrics = server.get("/metrics").body();
            assertTrue(metric(metrics, "ds4j:step_prefill_limit_count") > 0, "the decisions are exported");
            double besideDecodes = 0;
            for (String r : List.of("probe", "no_data", "floor", "stretch", "ceiling", "layers"))
                besideDecodes += Math.max(0, nan0(metric(metrics, "ds4j:step_prefill_limit_reason_total{reason=\"" + r + "\"}")));
            assertTrue(besideDecodes > 0, "the bound decided steps beside the decoding streams: "
                    + metrics.lines().filter(l -> l.startsWith("ds4j:step_prefill_limit_reason")).toList());
        }
    }

    static double nan0(double v) {
        return Double.isNaN(v) ? 0 : v;
    }

    /** The value of a metric's first series with these labels ({@link PromText#value}), or NaN. */
    static double metric(String text, String name) {
        return PromText.value(text, name);
    }
}
