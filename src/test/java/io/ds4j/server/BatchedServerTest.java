package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.app.DefaultModelProvider;
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
 * {@code ds4j:mtp_batch_size}), and /props shows the scheduler's limits.
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
        try (TestServer server = TestServer.start(new DefaultModelProvider(), Map.of("speculative.draft", d,
                "limits.maxActive", 16, "scheduler.tokenBudget", 48, "limits.prefillChunk", 64), null, null)) {
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
            double mtpSteps = metric(metrics, "ds4j:mtp_batch_size_count"), mtpSmall = metric(metrics, "ds4j:mtp_batch_size_bucket{le=\"4.0\"}");
            if (draft.equals("mtp"))
                assertTrue(mtpSteps > 0 && mtpSmall < mtpSteps, "some MTP steps held more than 4 requests: " + mtpSmall + " of " + mtpSteps);
            else assertEquals(0.0, mtpSteps, "no MTP steps without the MTP draft");
        }
    }

    /** The value of a metric line (name with labels, exactly as printed), or NaN. */
    static double metric(String text, String name) {
        for (String l : text.split("\n"))
            if (l.startsWith(name + " ")) return Double.parseDouble(l.substring(name.length() + 1).trim());
        return Double.NaN;
    }
}
