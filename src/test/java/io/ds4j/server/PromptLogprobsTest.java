package io.ds4j.server;

import io.ds4j.app.DefaultModelProvider;
import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.engine.Backend;
import io.ds4j.app.Backends;
import io.ds4j.engine.Sequence;
import io.ds4j.json.Json;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.text.Tokenizer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.Iterator;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * {@code /v1/completions} with {@code echo} and {@code logprobs} scores the prompt, as evaluation harnesses need
 * (lm-evaluation-harness's loglikelihood requests: token-id prompt, {@code max_tokens} 1 or 0, {@code echo},
 * {@code logprobs} 1, temperature 0). The scores are checked against a log-softmax computed here from the backend's
 * own logits, run directly on the same model.
 */
class PromptLogprobsTest {
    static TestServer server;
    static Path dir;
    static Tokenizer tok;

    @BeforeAll
    static void start() throws Exception {
        // the embedded default model (random tiny DeepSeek-V4) on the CPU backend; prefill chunks smaller than the
        // prompt, so scoring spans several prefill steps
        server = TestServer.start(new DefaultModelProvider(), Map.of("speculative.draft", "none", "limits.prefillChunk", 16), null, null);
        dir = ModelStore.ensure("tiny", 1, s -> { });
        tok = TestServer.tokenizer();
    }

    @AfterAll
    static void stop() {
        server.close();
    }

    /** log p(ids[i] | ids[0..i-1]) for i >= 1, from one forward of the whole prompt, in double precision. */
    static double[] reference(int[] ids) throws Exception {
        try (Backend be = Backends.open("cpu", dir); Sequence seq = be.newSequence(1)) {
            int V = be.config().vocabSize;
            int[] rows = new int[ids.length];
            for (int i = 0; i < rows.length; i++) rows[i] = i;
            float[] lg = be.forward(seq, ids, 0, ids.length, rows);
            double[] out = new double[ids.length];
            out[0] = Double.NaN;
            for (int i = 1; i < ids.length; i++) {
                int off = (i - 1) * V;
                double mx = Double.NEGATIVE_INFINITY;
                for (int v = 0; v < V; v++) mx = Math.max(mx, lg[off + v]);
                double sum = 0;
                for (int v = 0; v < V; v++) sum += Math.exp(lg[off + v] - mx);
                out[i] = lg[off + ids[i]] - mx - Math.log(sum);
            }
            return out;
        }
    }

    static String idsJson(int[] ids) {
        StringBuilder s = new StringBuilder("[");
        for (int i = 0; i < ids.length; i++) s.append(i > 0 ? "," : "").append(ids[i]);
        return s.append(']').toString();
    }

    @Test
    void harnessRequestGetsThePromptScored() throws Exception {
        int[] text = tok.encode("The quick brown fox jumps over the lazy dog. Evaluation harnesses score every token of a prompt.");
        int[] ids = new int[text.length + 1];
        ids[0] = tok.bosId();
        System.arraycopy(text, 0, ids, 1, text.length);
        assertTrue(ids.length > 16, "the prompt spans several prefill chunks");
        double[] ref = reference(ids);
        for (int maxTokens : new int[]{1, 0}) {
            String body = "{\"model\":\"" + server.get("/v1/models").json().at("/data/0/id").asText() + "\",\"prompt\":[" + idsJson(ids)
                    + "],\"max_tokens\":" + maxTokens + ",\"temperature\":0,\"logprobs\":1,\"echo\":true,\"seed\":1234}";
            TestServer.Resp r = server.post("/v1/completions", body);
            assertEquals(200, r.status(), r.body());
            JsonNode lp = r.json().at("/choices/0/logprobs");
            JsonNode tlp = lp.get("token_logprobs"), top = lp.get("top_logprobs"), toks = lp.get("tokens");
            assertEquals(ids.length + maxTokens, tlp.size(), lp.toString());
            assertTrue(tlp.get(0).isNull(), "the first token has no context");
            assertTrue(top.get(0).isNull());
            for (int i = 1; i < ids.length; i++) {
                assertEquals(ref[i], tlp.get(i).asDouble(), 1e-4, "prompt token " + i);
                assertEquals(new String(tok.tokenBytes(ids[i]), java.nio.charset.StandardCharsets.UTF_8), toks.get(i).asText());
                // the harness's is_greedy test: the token's logprob against the best alternative listed; the token
                // itself is listed too (up to logprobs + 1 entries, as OpenAI documents), after the alternative
                String token = toks.get(i).asText();
                assertEquals(top.get(i).fieldNames().next().equals(token) ? 1 : 2, top.get(i).size(), top.get(i).toString());
                double best = top.get(i).elements().next().asDouble();
                assertTrue(best >= tlp.get(i).asDouble() - 1e-6, "the listed alternative is the most likely one");
                assertEquals(tlp.get(i).asDouble(), top.get(i).get(token).asDouble(), 1e-6, top.get(i).toString());
            }
            if (maxTokens == 0) assertEquals("length", r.json().at("/choices/0/finish_reason").asText());
            // the prefill is timed when nothing is generated too
            assertTrue(r.json().at("/usage/timings/prompt_ms").asDouble() > 0, r.json().at("/usage/timings").toString());
            assertTrue(r.json().at("/usage/timings/prompt_per_second").asDouble() > 0, r.json().at("/usage/timings").toString());
            assertEquals(maxTokens, r.json().at("/usage/completion_tokens").asInt());
        }
    }

    /**
     * logprobs 0 on /v1/completions lists each token's own logprob as its one top_logprobs entry, as vLLM answers it
     * (OpenAI always lists the chosen token there), for the echoed prompt and the generated tokens, whole and streamed:
     * never an empty object for every token.
     */
    @Test
    void logprobsZeroListsEachTokenItself() throws Exception {
        String body = "{\"prompt\":\"The quick brown fox\",\"max_tokens\":3,\"temperature\":0,\"logprobs\":0,\"echo\":true";
        TestServer.Resp r = server.post("/v1/completions", body + "}");
        assertEquals(200, r.status(), r.body());
        JsonNode lp = r.json().at("/choices/0/logprobs");
        JsonNode tlp = lp.get("token_logprobs"), top = lp.get("top_logprobs"), toks = lp.get("tokens");
        assertEquals(tok.encode("The quick brown fox").length + 3, toks.size(), lp.toString());
        for (int i = 0; i < toks.size(); i++) {
            assertEquals(1, top.get(i).size(), i + ": " + lp);
            assertEquals(tlp.get(i).asDouble(), top.get(i).get(toks.get(i).asText()).asDouble(), i + ": " + lp);
        }
        TestServer.Resp s = server.post("/v1/completions", body + ",\"stream\":true}");
        assertEquals(200, s.status(), s.body());
        com.fasterxml.jackson.databind.node.ArrayNode streamed = Json.MAPPER.createArrayNode();
        for (String e : s.events())
            if (!e.equals("[DONE]")) for (JsonNode t : Json.MAPPER.readTree(e).at("/choices/0/logprobs/top_logprobs")) streamed.add(t);
        assertEquals(top, streamed, "streamed as whole");
    }

    /**
     * The chosen token is listed once in top_logprobs, whatever its text in {@code tokens}: greedy with logprobs 1 lists
     * it as the best alternative, so a token cut where a stop string matched inside it (its text there the part before
     * the stop) has that one entry, under its whole text, not a second under the part.
     */
    @Test
    void aTokenCutByAStopStringIsListedOnce() throws Exception {
        String body = "{\"prompt\":\"The quick brown fox\",\"max_tokens\":12,\"temperature\":0,\"logprobs\":1";
        JsonNode whole = server.post("/v1/completions", body + "}").json().at("/choices/0/logprobs");
        StringBuilder text = new StringBuilder();
        String stop = null;
        int at = -1;
        for (int i = 0; i < whole.get("tokens").size() && stop == null; i++) {
            String t = whole.get("tokens").get(i).asText();
            // the token's text less its first character, where it first appears inside this token
            if (t.length() >= 2 && (text + t).indexOf(t.substring(1)) == text.length() + 1) {
                stop = t.substring(1);
                at = i;
            }
            text.append(t);
        }
        assertNotNull(stop, "a generated token of two characters or more: " + whole);
        String full = whole.get("tokens").get(at).asText();
        TestServer.Resp r = server.post("/v1/completions", body + ",\"stop\":[" + Json.MAPPER.writeValueAsString(stop) + "]}");
        assertEquals(200, r.status(), r.body());
        JsonNode lp = r.json().at("/choices/0/logprobs");
        assertEquals(at + 1, lp.get("tokens").size(), lp.toString());
        assertEquals(full.substring(0, 1), lp.get("tokens").get(at).asText(), lp.toString());
        JsonNode top = lp.get("top_logprobs").get(at);
        assertEquals(1, top.size(), top.toString());
        assertEquals(lp.get("token_logprobs").get(at).asDouble(), top.get(full).asDouble(), 1e-6, top.toString());
    }

    /**
     * Echo with max_tokens 0 generates nothing, so a prompt may fill the whole context (an evaluation harness scores
     * such a prompt); one that asks for a token still needs room for it.
     */
    @Test
    void anEchoOfNothingMoreMayFillTheContext() throws Exception {
        int ctx = 24;
        try (TestServer small = TestServer.start(new DefaultModelProvider(), Map.of("speculative.draft", "none",
                "limits.prefillChunk", 16, "limits.maxContextTokens", ctx), null, null)) {
            int[] ids = new int[ctx];
            int[] words = tok.encode("the context is full of these words ");
            ids[0] = tok.bosId();
            for (int i = 1; i < ctx; i++) ids[i] = words[i % words.length];
            double[] ref = reference(ids);
            String body = "{\"prompt\":" + Json.MAPPER.valueToTree(ids) + ",\"echo\":true,\"logprobs\":1,\"max_tokens\":";
            TestServer.Resp r = small.post("/v1/completions", body + "0}");
            assertEquals(200, r.status(), r.body());
            JsonNode tlp = r.json().at("/choices/0/logprobs/token_logprobs");
            assertEquals(ctx, tlp.size(), r.body());
            assertTrue(tlp.get(0).isNull(), "the first token has no context to be scored in");
            for (int i = 1; i < ctx; i++) assertEquals(ref[i], tlp.get(i).asDouble(), 1e-4, "token " + i);
            assertEquals(0, r.json().at("/usage/completion_tokens").asInt(), r.body());
            TestServer.Resp one = small.post("/v1/completions", body + "1}");
            assertEquals(400, one.status(), one.body());
            assertEquals("context_length_exceeded", one.json().at("/error/code").asText(), one.body());
            assertTrue(one.json().at("/error/message").asText().contains("so at most " + (ctx - 1) + " prompt tokens fit"), one.body());
            // past the context, echo or not, is refused
            int[] longer = java.util.Arrays.copyOf(ids, ctx + 1);
            longer[ctx] = words[0];
            TestServer.Resp past = small.post("/v1/completions", "{\"prompt\":" + Json.MAPPER.valueToTree(longer)
                    + ",\"echo\":true,\"max_tokens\":0}");
            assertEquals(400, past.status(), past.body());
            assertEquals("prompt: the prompt is " + (ctx + 1) + " tokens; this server's context limit is " + ctx + " tokens (prompt +"
                    + " output), so at most " + ctx + " prompt tokens fit (echo with max_tokens 0 generates nothing)",
                    past.json().at("/error/message").asText());
        }
    }

    @Test
    void textPromptAndStreamingAgree() throws Exception {
        String prompt = "Scores do not depend on streaming.";
        int[] text = tok.encode(prompt);
        int[] ids = new int[text.length + 1];
        ids[0] = tok.bosId(); // the server adds BOS to a text prompt; it is not echoed, so the first echoed token is scored
        System.arraycopy(text, 0, ids, 1, text.length);
        double[] ref = reference(ids);
        String body = "{\"prompt\":" + Json.MAPPER.valueToTree(prompt) + ",\"max_tokens\":0,\"logprobs\":2,\"echo\":true";
        JsonNode full = server.post("/v1/completions", body + "}").json();
        assertEquals(prompt, full.at("/choices/0/text").asText());
        JsonNode tlp = full.at("/choices/0/logprobs/token_logprobs");
        assertEquals(text.length, tlp.size());
        for (int i = 0; i < text.length; i++) assertEquals(ref[i + 1], tlp.get(i).asDouble(), 1e-4, "token " + i);
        TestServer.Resp s = server.post("/v1/completions", body + ",\"stream\":true}");
        StringBuilder echoed = new StringBuilder();
        int n = 0;
        for (String e : s.events()) {
            if (e.equals("[DONE]")) continue;
            JsonNode c = Json.MAPPER.readTree(e).at("/choices/0");
            echoed.append(c.get("text").asText());
            for (Iterator<JsonNode> it = c.at("/logprobs/token_logprobs").elements(); it.hasNext(); n++)
                assertEquals(tlp.get(n).asDouble(), it.next().asDouble(), 0.0, "streamed token " + n);
        }
        assertEquals(prompt, echoed.toString());
        assertEquals(text.length, n);
        // max_tokens 0 is for echo only
        assertEquals(400, server.post("/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":0}").status());
        assertEquals(400, server.post("/v1/chat/completions",
                "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":0}").status());
    }
}
