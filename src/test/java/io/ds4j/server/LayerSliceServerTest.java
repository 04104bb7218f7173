package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.json.Json;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static io.ds4j.server.BatchedServerTest.answer;
import static io.ds4j.server.BatchedServerTest.metric;
import static io.ds4j.server.BatchedServerTest.nan0;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The server end to end with prefill chunks in layer slices: decoding streams with the MTP draft, beside a long chat
 * prompt that goes into the prefix cache and a long scored prompt ({@code echo} with logprobs, max_tokens 0), where a
 * floor-sized chunk breaks the bound (maxTickStretch 1.05, floor 64): every answer (text, logprobs, prompt scores) is as
 * alone, steps ran in layer slices, and the prefix the sliced prompt left in the cache answers the same again.
 */
class LayerSliceServerTest {
    @Test
    void longPromptsInLayerSlicesBesideMtpStreamsAnswerAsAlone() throws Exception {
        try (TestServer server = TestServer.start(new DefaultModelProvider(), Map.of("speculative.draft", "mtp", "limits.maxActive", 8,
                "scheduler.tokenBudget", 256, "limits.prefillChunk", 256, "scheduler.maxTickStretch", 1.05,
                "scheduler.minPrefillChunk", 64, "scheduler.layerSlices", true), null, null);
             var pool = java.util.concurrent.Executors.newFixedThreadPool(6)) {
            List<String> bodies = new ArrayList<>();
            for (int i = 0; i < 3; i++) bodies.add("{\"messages\":[{\"role\":\"user\",\"content\":\"Stream " + i
                    + " tells a story\"}],\"max_tokens\":120,\"ignore_eos\":true,\"logprobs\":true,\"cache_prompt\":false,"
                    + (i % 2 == 0 ? "\"temperature\":0" : "\"temperature\":0.8,\"seed\":" + (50 + i)) + "}");
            String longText = "lantern " + "the harbour keeps its lights burning through the long winter night ".repeat(60);
            String chat = "{\"messages\":[{\"role\":\"user\",\"content\":" + Json.MAPPER.valueToTree(longText)
                    + "}],\"max_tokens\":6,\"temperature\":0,\"ignore_eos\":true,\"logprobs\":true,\"cache_prompt\":";
            String scoredText = "a ledger of tides " + "every gull counts the boats that come back before dark ".repeat(40);
            String scored = "{\"prompt\":" + Json.MAPPER.valueToTree(scoredText) + ",\"max_tokens\":0,\"logprobs\":2,\"echo\":true}";
            List<String> alone = new ArrayList<>();
            for (String b : bodies) alone.add(answer(server.post("/v1/chat/completions", b)));
            TestServer.Resp chatAlone = server.post("/v1/chat/completions", chat + "false}");
            assertTrue(chatAlone.json().at("/usage/prompt_tokens").asInt() > 500, chatAlone.body());
            String chatAnswer = answer(chatAlone);
            String scoredAlone = scores(server.post("/v1/completions", scored));
            double layersBefore = nan0(metric(server.get("/metrics").body(), "ds4j:step_prefill_limit_reason_total{reason=\"layers\"}"));
            List<java.util.concurrent.Future<TestServer.Resp>> fs = new ArrayList<>();
            for (String b : bodies) fs.add(pool.submit(() -> server.post("/v1/chat/completions", b)));
            double before = nan0(metric(server.get("/metrics").body(), "vllm:generation_tokens_total"));
            assertTrue(TestServer.eventually(60_000, () -> {
                try {
                    return nan0(metric(server.get("/metrics").body(), "vllm:generation_tokens_total")) >= before + 6;
                } catch (Exception e) {
                    return false;
                }
            }), "the streams decode when the long prompts arrive");
            var lc = pool.submit(() -> server.post("/v1/chat/completions", chat + "true}"));
            var ls = pool.submit(() -> server.post("/v1/completions", scored));
            for (int i = 0; i < bodies.size(); i++) assertEquals(alone.get(i), answer(fs.get(i).get()), "stream " + i);
            assertEquals(chatAnswer, answer(lc.get()), "the long chat prompt's answer");
            assertEquals(scoredAlone, scores(ls.get()), "the scored prompt's scores");
            String metrics = server.get("/metrics").body();
            double layers = nan0(metric(metrics, "ds4j:step_prefill_limit_reason_total{reason=\"layers\"}"));
            assertTrue(layers > layersBefore, "steps ran in layer slices: "
                    + metrics.lines().filter(l -> l.startsWith("ds4j:step_prefill_limit_reason")).toList());
            // the prefix the sliced prompt left in the cache answers as before
            TestServer.Resp again = server.post("/v1/chat/completions", chat + "true}");
            assertEquals(chatAnswer, answer(again), "resumed from the cache");
            assertTrue(again.json().at("/usage/prompt_tokens_details/cached_tokens").asInt(0) > 0, again.body());
        }
    }

    static String scores(TestServer.Resp r) {
        assertEquals(200, r.status(), r.body());
        JsonNode lp = r.json().at("/choices/0/logprobs");
        assertTrue(lp.get("token_logprobs").size() > 300, "a long scored prompt: " + lp.get("token_logprobs").size());
        return lp.toString();
    }
}
