package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import io.vertx.junit5.VertxExtension;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The SSE wire format as a contract: plain, thinking and tool-call streams from a real server (scripted model) must
 * match the golden transcripts under {@code src/test/resources/io/ds4j/server/golden/} byte for byte, after replacing
 * the parts that differ per run (ids, created, timings). Run with {@code -Dds4j.updateGolden=true} to rewrite them
 * (then review the diff). Also checks that non-streaming and speculative decoding give the same message.
 */
@ExtendWith(VertxExtension.class)
class GoldenSseTest {
    static TestServer server;
    static final Path GOLDEN = Path.of("src/test/resources/io/ds4j/server/golden");
    static final String TOOLS = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather forecast\","
            + "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}}}}}]";

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("speculative.draft", "ngram"));
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    /** Replaces what differs between runs. */
    static String normalize(String sse) {
        return sse.replaceAll("\"id\":\"chatcmpl-[A-Za-z0-9]+\"", "\"id\":\"chatcmpl-ID\"")
                .replaceAll("\"created\":\\d+", "\"created\":0")
                .replaceAll("\"call_[A-Za-z0-9]+\"", "\"call_ID\"")
                .replaceAll("\"timings\":\\{[^}]*}", "\"timings\":{}");
    }

    static void golden(String name, String body) throws Exception {
        Path f = GOLDEN.resolve(name);
        String actual = normalize(body);
        if (Boolean.getBoolean("ds4j.updateGolden") || !Files.exists(f)) {
            Files.createDirectories(GOLDEN);
            Files.writeString(f, actual, StandardCharsets.UTF_8);
            System.out.println("wrote golden transcript " + f);
            return;
        }
        assertEquals(Files.readString(f, StandardCharsets.UTF_8), actual, "SSE transcript " + name);
    }

    @Test
    void plainStream() throws Exception {
        double delivered = BatchedServerTest.metric(server.get("/metrics").body(), "ds4j:stream_delivery_seconds_count");
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi",
                "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"speculative_q\":0"));
        assertEquals(200, r.status(), r.body());
        // each step's output chunk is booked once its write completes (the engine's send to the socket)
        String m = server.get("/metrics").body();
        double n = BatchedServerTest.metric(m, "ds4j:stream_delivery_seconds_count") - delivered;
        long deltas = r.events().stream().filter(e -> e.contains("\"content\":\"") && !e.contains("\"content\":\"\"")).count();
        assertTrue(n >= 1 && n <= deltas, n + " deliveries booked for " + deltas + " content chunks");
        assertTrue(r.headers().firstValue("content-type").orElse("").startsWith("text/event-stream"));
        golden("plain.sse", r.body());
        JsonNode usage = Json.MAPPER.readTree(r.events().get(r.events().size() - 2)).get("usage");
        assertEquals(TestServer.tokenizer().encode(TestServer.PLAIN).length + 1, usage.get("completion_tokens").asInt(),
                "the script plus EOS");
        JsonNode t = usage.get("timings");
        for (String k : new String[]{"ttft_ms", "prompt_per_second", "predicted_per_second", "draft_n", "draft_n_accepted",
                "mean_committed_per_step"})
            assertTrue(t.has(k), "timings." + k);
    }

    @Test
    void thinkingStream() throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi",
                "\"stream\":true,\"temperature\":0,\"speculative_q\":0,\"chat_template_kwargs\":{\"thinking\":true}"));
        assertEquals(200, r.status(), r.body());
        golden("thinking.sse", r.body());
        assertFalse(r.body().contains("\"usage\""), "no usage chunk unless stream_options.include_usage");
    }

    @Test
    void toolCallStream() throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?",
                "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"temperature\":0,\"speculative_q\":0," + TOOLS));
        assertEquals(200, r.status(), r.body());
        golden("toolcall.sse", r.body());
        assertFalse(r.body().contains("DSML"), "no DSML markup leaks into the stream");
        assertTrue(r.body().contains("\"finish_reason\":\"tool_calls\""));
    }

    @Test
    void stopStringsInsideToolCallMarkupNeverLeakMarkup() throws Exception {
        for (String stop : new String[]{"DSML", "invoke", "city", "\\\"", "Paris"}) {
            for (boolean stream : new boolean[]{false, true}) {
                TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?",
                        "\"stream\":" + stream + ",\"temperature\":0,\"speculative_q\":0,\"stop\":[\"" + stop + "\"]," + TOOLS));
                assertEquals(200, r.status(), r.body());
                // the stop string itself comes back as stop_reason: only the rest must be free of markup
                String body = r.body().replaceAll("\"stop_reason\":\"(\\\\.|[^\"\\\\])*\"", "");
                String what = "stop " + stop + (stream ? " (stream)" : "") + ": " + r.body();
                assertFalse(body.contains("DSML"), "no DSML markup leaks: " + what);
                assertFalse(body.contains("\\uff5c") || body.contains("｜"), "no delimiter leaks: " + what);
            }
        }
    }

    /** Joins a chat stream's deltas into the message a client would assemble. */
    static String assemble(TestServer.Resp r) throws Exception {
        StringBuilder content = new StringBuilder(), reasoning = new StringBuilder(), args = new StringBuilder();
        String name = null, finish = null;
        for (String e : r.events()) {
            if (e.equals("[DONE]")) continue;
            JsonNode c = Json.MAPPER.readTree(e).path("choices").path(0);
            if (c.isMissingNode()) continue;
            JsonNode d = c.path("delta");
            if (d.hasNonNull("content")) content.append(d.get("content").asText());
            if (d.hasNonNull("reasoning_content")) reasoning.append(d.get("reasoning_content").asText());
            for (JsonNode tc : d.path("tool_calls")) {
                if (tc.path("function").hasNonNull("name")) name = tc.path("function").get("name").asText();
                args.append(tc.path("function").path("arguments").asText(""));
            }
            if (c.hasNonNull("finish_reason")) finish = c.get("finish_reason").asText();
        }
        return "reasoning=" + reasoning + "|content=" + content + "|call=" + name + args + "|finish=" + finish;
    }

    static String assembleFull(JsonNode j) {
        JsonNode c = j.path("choices").path(0), m = c.path("message");
        JsonNode tc = m.path("tool_calls").path(0).path("function");
        return "reasoning=" + m.path("reasoning_content").asText("") + "|content=" + (m.path("content").isNull() ? "" : m.path("content").asText(""))
                + "|call=" + (tc.isMissingNode() ? "null" : tc.path("name").asText() + tc.path("arguments").asText())
                + "|finish=" + c.path("finish_reason").asText();
    }

    @Test
    void nonStreamingAndSpeculativeGiveTheSameMessage() throws Exception {
        String[][] cases = {
                {"Hi", ""},
                {"Hi", ",\"chat_template_kwargs\":{\"thinking\":true}"},
                {"What is the weather in Paris?", "," + TOOLS}};
        for (String[] c : cases) {
            String plain = assemble(server.post("/v1/chat/completions", TestServer.chat(c[0], "\"stream\":true,\"temperature\":0,\"speculative_q\":0" + c[1])));
            for (String q : new String[]{"1", "4", "\"auto\""}) {
                TestServer.Resp s = server.post("/v1/chat/completions", TestServer.chat(c[0], "\"stream\":true,\"temperature\":0,\"speculative_q\":" + q + c[1]));
                assertEquals(plain, assemble(s), "speculative q=" + q + " for " + c[0] + c[1]);
            }
            TestServer.Resp full = server.post("/v1/chat/completions", TestServer.chat(c[0], "\"temperature\":0" + c[1]));
            assertEquals(200, full.status(), full.body());
            assertEquals(plain, assembleFull(full.json()), "non-streaming " + c[0] + c[1]);
            assertEquals("chat.completion", full.json().get("object").asText());
        }
        String tool = assemble(server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?", "\"stream\":true," + TOOLS)));
        assertEquals("reasoning=|content=Let me check.|call=get_weather{\"city\": \"Paris\", \"days\": 3}|finish=tool_calls", tool);
        String think = assemble(server.post("/v1/chat/completions", TestServer.chat("Hi", "\"stream\":true,\"reasoning_effort\":\"high\"")));
        assertEquals("reasoning=The user says hi. I should greet back.|content=Hi there, nice to meet you.|call=null|finish=stop", think);
    }

    /**
     * A tool call cut by max_tokens at every length: streamed and whole answers agree, the arguments are exactly the
     * text generated so far (a prefix of the whole call's, never closed or completed), and the finish reason is length.
     */
    @Test
    void aToolCallCutByMaxTokensCarriesOnlyWhatWasGenerated() throws Exception {
        String whole = "{\"city\": \"Paris\", \"days\": 3}";
        int n = TestServer.tokenizer().encode(TestServer.TOOL).length;
        String close = "</｜DSML｜invoke>";
        int invokeClosed = TestServer.tokenizer().encode(TestServer.TOOL.substring(0, TestServer.TOOL.indexOf(close) + close.length())).length;
        for (int max = 1; max < n; max++) {
            String extra = "\"temperature\":0,\"speculative_q\":0,\"max_tokens\":" + max + "," + TOOLS;
            String streamed = assemble(server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?", "\"stream\":true," + extra)));
            TestServer.Resp full = server.post("/v1/chat/completions", TestServer.chat("What is the weather in Paris?", extra));
            assertEquals(200, full.status(), full.body());
            assertEquals(streamed, assembleFull(full.json()), "max_tokens " + max);
            assertEquals("length", full.json().at("/choices/0/finish_reason").asText(), full.body());
            JsonNode call = full.json().at("/choices/0/message/tool_calls/0/function");
            if (call.isMissingNode()) continue;
            String args = call.get("arguments").asText();
            assertTrue(whole.startsWith(args), "max_tokens " + max + ": " + args);
            assertEquals(max >= invokeClosed, args.equals(whole), "max_tokens " + max + ": " + args);
        }
    }

    @Test
    void completionsStreamAndEcho() throws Exception {
        TestServer.Resp r = server.post("/v1/completions", "{\"prompt\":\"Say hi\",\"stream\":true,\"echo\":true,\"max_tokens\":50}");
        assertEquals(200, r.status(), r.body());
        StringBuilder text = new StringBuilder();
        String finish = null;
        for (String e : r.events()) {
            if (e.equals("[DONE]")) continue;
            JsonNode c = Json.MAPPER.readTree(e).path("choices").path(0);
            assertEquals("text_completion", Json.MAPPER.readTree(e).get("object").asText());
            text.append(c.path("text").asText());
            if (c.hasNonNull("finish_reason")) finish = c.get("finish_reason").asText();
        }
        assertEquals("Say hi" + TestServer.PLAIN, text.toString());
        assertEquals("stop", finish);
        TestServer.Resp n = server.post("/v1/completions", "{\"prompt\":\"Say hi\",\"max_tokens\":3}");
        assertEquals(200, n.status(), n.body());
        assertEquals("length", n.json().at("/choices/0/finish_reason").asText());
        assertEquals(3, n.json().at("/usage/completion_tokens").asInt());
    }

    @Test
    void stopStringsAreHeldBackAndNeverSent() throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"stream\":true,\"stop\":[\"can I\"]"));
        assertEquals("reasoning=|content=Hello! How |call=null|finish=stop", assemble(r));
        assertTrue(r.body().contains("\"stop_reason\":\"can I\""));
    }

    @Test
    void logprobsPerToken() throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"logprobs\":true,\"top_logprobs\":2,\"temperature\":0"));
        assertEquals(200, r.status(), r.body());
        JsonNode lp = r.json().at("/choices/0/logprobs/content");
        assertEquals(r.json().at("/usage/completion_tokens").asInt(), lp.size(), "one entry per generated token");
        assertEquals(2, lp.get(0).get("top_logprobs").size());
        StringBuilder joined = new StringBuilder();
        for (int i = 0; i < lp.size() - 1; i++) joined.append(lp.get(i).get("token").asText()); // the last one is EOS
        assertEquals(TestServer.PLAIN, joined.toString());
    }

    @Test
    void echoWithLogprobsListsThePromptFirstAndOffsetsFollowTheEcho() throws Exception {
        String prompt = "Say hi";
        for (boolean stream : new boolean[]{false, true}) {
            TestServer.Resp r = server.post("/v1/completions", "{\"prompt\":\"" + prompt + "\",\"echo\":true,\"logprobs\":1,"
                    + "\"max_tokens\":4,\"temperature\":0,\"stream\":" + stream + "}");
            assertEquals(200, r.status(), r.body());
            java.util.List<String> tokens = new java.util.ArrayList<>();
            java.util.List<JsonNode> lps = new java.util.ArrayList<>(), offs = new java.util.ArrayList<>();
            StringBuilder text = new StringBuilder();
            java.util.List<JsonNode> choices = new java.util.ArrayList<>();
            if (stream) {
                for (String e : r.events()) if (!e.equals("[DONE]")) choices.add(Json.MAPPER.readTree(e).at("/choices/0"));
            } else {
                choices.add(r.json().at("/choices/0"));
            }
            for (JsonNode c : choices) {
                text.append(c.path("text").asText());
                JsonNode lp = c.get("logprobs");
                if (lp == null || lp.isNull()) continue;
                for (int i = 0; i < lp.get("tokens").size(); i++) {
                    tokens.add(lp.get("tokens").get(i).asText());
                    lps.add(lp.get("token_logprobs").get(i));
                    offs.add(lp.get("text_offset").get(i));
                }
            }
            int[] promptIds = TestServer.tokenizer().encode(prompt);
            assertTrue(tokens.size() >= promptIds.length + 1, tokens.toString());
            StringBuilder joined = new StringBuilder();
            for (int i = 0; i < promptIds.length; i++) {
                // scored given the tokens before them (the BOS the server added is not echoed, so every one has a score)
                assertTrue(lps.get(i).isNumber(), "prompt tokens are scored: " + lps);
                assertEquals(joined.length(), offs.get(i).asInt(), "prompt token offsets: " + offs);
                joined.append(tokens.get(i));
            }
            assertEquals(prompt, joined.toString(), "the prompt tokens spell the echoed prompt (no BOS)");
            assertEquals(prompt.length(), offs.get(promptIds.length).asInt(), "the first generated token starts after the echo: " + offs);
            assertFalse(lps.get(promptIds.length).isNull());
            assertTrue(text.toString().startsWith(prompt), text.toString());
        }
    }

    @Test
    void aSingleGeneratedTokenHasNoDecodeRate() throws Exception {
        TestServer.Resp r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":1"));
        assertEquals(200, r.status(), r.body());
        JsonNode t = r.json().at("/usage/timings");
        assertEquals(1, t.get("predicted_n").asInt());
        assertTrue(t.get("predicted_per_second").isNull(), t.toString());
        r = server.post("/v1/chat/completions", TestServer.chat("Hi", "\"max_tokens\":3"));
        assertTrue(r.json().at("/usage/timings/predicted_per_second").isNumber(), r.body());
    }
}
