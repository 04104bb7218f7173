package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Map;
import java.util.StringJoiner;

import static org.junit.jupiter.api.Assertions.*;

/**
 * vLLM's {@code stop_token_ids} and {@code include_stop_str_in_output} on chat and completions, on the scripted model,
 * whose answer "Hello! How can I help you today?" is the tokens Hello, !, How, can, I, help (id {@value #HELP}), you,
 * today, ?: a stop token ends the answer with finish reason "stop" and its id as the (integer) stop_reason, its text
 * left out unless kept; a kept stop string ends the output, text after it in its token dropped; streamed and not
 * alike, the logprobs' tokens joining to the content.
 */
class StopTokensTest {
    /** The token " help" of the scripted answer. */
    static final int HELP = 1694;
    static final String CHAT = "/v1/chat/completions", COMPLETIONS = "/v1/completions";
    static TestServer server;

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript), Map.of("speculative.draft", "none"));
        assertEquals(" help", TestServer.tokenizer().decode(new int[]{HELP}), "the vendored tokenizer's token the tests stop on");
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    /** An answer's text, finish reason, stop_reason, logprobs' tokens joined, and completion tokens: streamed or not alike. */
    record Answer(String text, String finish, JsonNode stopReason, String logprobTokens, int logprobCount, int completionTokens) {}

    static String body(String path, String extra) {
        String common = "\"temperature\":0,\"max_tokens\":20," + extra;
        return path.equals(CHAT) ? TestServer.chat("Hi", common) : "{\"model\":\"scripted\",\"prompt\":\"Hi\"," + common + "}";
    }

    /** A stop_reason null (present: a finish chunk and a whole answer always carry the key) as null. */
    static JsonNode orNull(JsonNode n) {
        assertNotNull(n, "the key stop_reason is there");
        return n.isNull() ? null : n;
    }

    /** The answer to a request, not streamed. */
    static Answer full(String path, String extra) throws Exception {
        TestServer.Resp r = server.post(path, body(path, extra));
        assertEquals(200, r.status(), r.body());
        assertNull(r.headers().firstValue(RequestFields.HEADER).orElse(null), "no field is ignored: " + r.body());
        JsonNode c = r.json().at("/choices/0");
        boolean chat = path.equals(CHAT);
        StringJoiner tokens = new StringJoiner("");
        int count = 0;
        if (chat && c.get("logprobs").isObject()) for (JsonNode t : c.at("/logprobs/content")) {
            tokens.add(t.get("token").asText());
            count++;
        }
        if (!chat && c.get("logprobs").isObject()) for (JsonNode t : c.at("/logprobs/tokens")) {
            tokens.add(t.asText());
            count++;
        }
        return new Answer(chat ? c.at("/message/content").asText() : c.get("text").asText(), c.get("finish_reason").asText(),
                orNull(c.get("stop_reason")), tokens.toString(), count, r.json().at("/usage/completion_tokens").asInt());
    }

    /** The answer to a request, streamed (with the usage chunk). */
    static Answer streamed(String path, String extra) throws Exception {
        TestServer.Resp r = server.post(path, body(path, extra + ",\"stream\":true,\"stream_options\":{\"include_usage\":true}"));
        assertEquals(200, r.status(), r.body());
        assertNull(r.headers().firstValue(RequestFields.HEADER).orElse(null), "no field is ignored: " + r.body());
        boolean chat = path.equals(CHAT);
        StringBuilder text = new StringBuilder();
        StringJoiner tokens = new StringJoiner("");
        String finish = null;
        JsonNode stopReason = null;
        int count = 0, completion = -1;
        for (String e : r.events()) {
            if (e.equals("[DONE]")) continue;
            JsonNode j = Json.MAPPER.readTree(e);
            if (j.hasNonNull("usage")) completion = j.at("/usage/completion_tokens").asInt();
            for (JsonNode c : j.get("choices")) {
                text.append(chat ? c.at("/delta/content").asText("") : c.path("text").asText(""));
                if (c.hasNonNull("finish_reason")) {
                    assertNull(finish, "one finish chunk: " + r.body());
                    finish = c.get("finish_reason").asText();
                    stopReason = orNull(c.get("stop_reason"));
                }
                JsonNode lp = c.get("logprobs");
                if (lp == null || !lp.isObject()) continue;
                for (JsonNode t : chat ? lp.path("content") : lp.path("tokens")) {
                    tokens.add(chat ? t.get("token").asText() : t.asText());
                    count++;
                }
            }
        }
        return new Answer(text.toString(), finish, stopReason, tokens.toString(), count, completion);
    }

    /** Both ways, on both endpoints: the same answer, which {@code check} then judges. */
    static void both(String extra, java.util.function.Consumer<Answer> check) throws Exception {
        for (String path : new String[]{CHAT, COMPLETIONS}) {
            Answer f = full(path, extra), s = streamed(path, extra);
            assertEquals(f, s, path + " " + extra + ": streamed as not");
            check.accept(f);
        }
    }

    @Test
    void aStopTokenEndsTheAnswerWithItsIdAsTheStopReasonAndWithoutItsText() throws Exception {
        both("\"stop_token_ids\":[5," + HELP + "]", a -> {
            assertEquals("Hello! How can I", a.text(), a.toString());
            assertEquals("stop", a.finish());
            assertTrue(a.stopReason().isInt(), "an integer, as vLLM gives it: " + a);
            assertEquals(HELP, a.stopReason().intValue());
            assertEquals(6, a.completionTokens(), "the stop token is generated and counted: " + a);
        });
        // an id the answer never reaches changes nothing: the end of the turn ends it, with no stop_reason
        both("\"stop_token_ids\":[5]", a -> {
            assertEquals(TestServer.PLAIN, a.text());
            assertEquals("stop", a.finish());
            assertNull(a.stopReason(), a.toString());
        });
    }

    @Test
    void aKeptStopTokenEndsTheOutputWithItsText() throws Exception {
        both("\"stop_token_ids\":[" + HELP + "],\"include_stop_str_in_output\":true", a -> {
            assertEquals("Hello! How can I help", a.text(), a.toString());
            assertEquals("stop", a.finish());
            assertEquals(HELP, a.stopReason().intValue());
        });
    }

    @Test
    void aKeptStopStringEndsTheOutputAndTheRestOfItsTokenIsDropped() throws Exception {
        // "can I h" ends inside the token " help": its "elp" is dropped
        both("\"stop\":[\"can I h\"],\"include_stop_str_in_output\":true", a -> {
            assertEquals("Hello! How can I h", a.text(), a.toString());
            assertEquals("stop", a.finish());
            assertEquals("can I h", a.stopReason().asText());
        });
        both("\"stop\":[\"can I h\"],\"include_stop_str_in_output\":false", a -> {
            assertEquals("Hello! How ", a.text(), "left out by default: " + a);
            assertEquals("can I h", a.stopReason().asText());
        });
    }

    @Test
    void aStopStringTheKeptStopTokenCompletesIsTheStopReason() throws Exception {
        // as vLLM: the kept token's text is matched against the stop strings, and a match names the string
        both("\"stop\":[\"I help\"],\"stop_token_ids\":[" + HELP + "],\"include_stop_str_in_output\":true", a -> {
            assertEquals("Hello! How can I help", a.text(), a.toString());
            assertEquals("I help", a.stopReason().asText());
        });
        // not kept, the token's text is never matched: the stop token ends it, and the " I" held as a possible start
        // of the stop string is output
        both("\"stop\":[\"I help\"],\"stop_token_ids\":[" + HELP + "]", a -> {
            assertEquals("Hello! How can I", a.text(), a.toString());
            assertEquals(HELP, a.stopReason().intValue());
        });
    }

    @Test
    void logprobsJoinToTheContent() throws Exception {
        String chatLp = "\"logprobs\":true,\"top_logprobs\":1", compLp = "\"logprobs\":1";
        for (String path : new String[]{CHAT, COMPLETIONS}) {
            String lp = path.equals(CHAT) ? chatLp : compLp;
            for (String extra : new String[]{
                    // the stop token is listed without text (its text is not output), so the tokens join to the content
                    "\"stop_token_ids\":[" + HELP + "]",
                    "\"stop_token_ids\":[" + HELP + "],\"include_stop_str_in_output\":true",
                    // the token the kept stop string ends inside is listed with its part up to the stop string's end
                    "\"stop\":[\"can I h\"],\"include_stop_str_in_output\":true",
                    "\"stop\":[\"I help\"],\"stop_token_ids\":[" + HELP + "],\"include_stop_str_in_output\":true"}) {
                Answer f = full(path, lp + "," + extra), s = streamed(path, lp + "," + extra);
                assertEquals(f, s, path + " " + extra + ": streamed as not");
                assertEquals(f.text(), f.logprobTokens(), path + " " + extra + ": " + f);
                assertEquals(6, f.logprobCount(), "every generated token listed, the stop token too: " + f);
            }
        }
    }

    @Test
    void everyChoiceStopsOnTheToken() throws Exception {
        TestServer.Resp r = server.post(CHAT, body(CHAT, "\"n\":2,\"stop_token_ids\":[" + HELP + "]"));
        assertEquals(200, r.status(), r.body());
        for (JsonNode c : r.json().get("choices")) {
            assertEquals("Hello! How can I", c.at("/message/content").asText(), r.body());
            assertEquals(HELP, c.get("stop_reason").intValue(), r.body());
        }
    }

    /**
     * vLLM's min_tokens: the stop token ids (and the end of the turn) cannot come before that many tokens, and a stop
     * string ends the answer only in the text of a later token ("How" is the third token: it stops the answer with
     * min_tokens 2, not with 3); streamed as not; more than max_tokens, or negative, is a 400 naming the field.
     */
    @Test
    void minTokensHoldsTheEndBack() throws Exception {
        both("\"min_tokens\":6,\"stop_token_ids\":[" + HELP + "]", a -> {
            assertFalse(a.text().startsWith("Hello! How can I help"), "the sixth token may not be the stop token: " + a);
            assertTrue(a.completionTokens() >= 6, a.toString());
        });
        both("\"min_tokens\":5,\"stop_token_ids\":[" + HELP + "]", a -> {
            assertEquals("Hello! How can I", a.text(), "from the sixth token on it may: " + a);
            assertEquals(HELP, a.stopReason().asInt());
        });
        both("\"min_tokens\":2,\"stop\":[\"How\"]", a -> {
            assertEquals("stop", a.finish(), a.toString());
            assertEquals("How", a.stopReason().asText());
        });
        both("\"min_tokens\":3,\"stop\":[\"How\"]", a -> {
            assertTrue(a.text().startsWith("Hello! How can"), "not stopped in the third token's text: " + a);
            assertNotEquals("How", a.stopReason() == null ? null : a.stopReason().asText(), a.toString());
        });
        // a stop token a grammar forces before min_tokens does not end the answer ("!" is the scripted answer's second
        // token; the regex holds the output to it and then the end, which the complete grammar's end overrides)
        int bang = TestServer.tokenizer().encode("!")[0];
        both("\"min_tokens\":3,\"stop_token_ids\":[" + bang + "],\"structured_outputs\":{\"regex\":\"Hello!\"}", a -> {
            assertEquals("Hello!", a.text(), a.toString());
            assertNull(a.stopReason(), a.toString());
        });
        for (String path : new String[]{CHAT, COMPLETIONS}) {
            assertEquals("min_tokens: is out of range: give an integer in [0, 20] (at most max_tokens), got 21",
                    refused(path, "\"min_tokens\":21", "min_tokens").get("message").asText());
            assertEquals("min_tokens: is out of range: give an integer in [0, 20] (at most max_tokens), got -1",
                    refused(path, "\"min_tokens\":-1", "min_tokens").get("message").asText());
            assertEquals("min_tokens: must be an integer, got 2.5", refused(path, "\"min_tokens\":2.5", "min_tokens").get("message").asText());
            assertEquals("min_tokens: must be an integer, got a string", refused(path, "\"min_tokens\":\"3\"", "min_tokens").get("message").asText());
        }
        // without max_tokens the limit is the server's default, and is said to be
        TestServer.Resp r = server.post(CHAT, TestServer.chat("Hi", "\"min_tokens\":5000"));
        assertEquals(400, r.status(), r.body());
        assertEquals("min_tokens: is out of range: give an integer in [0, 4096] (at most the server's default max_tokens), got 5000",
                r.json().at("/error/message").asText());
    }

    /**
     * A min_tokens the context cannot hold after the prompt is refused naming it and the room where the server's default
     * max_tokens applies (that default is cut to the room, so the answer would end short of min_tokens); beside a
     * max_tokens of the client's, which is at least min_tokens, that max_tokens is what is refused. One that just fits is
     * met, the answer ending at the context.
     */
    @Test
    void aMinTokensPastTheContextsRoomIsRefused() throws Exception {
        int ctx = 64;
        try (TestServer s = TestServer.scripted(new ScriptedBackend(TestServer::defaultScript),
                Map.of("speculative.draft", "none", "limits.maxContextTokens", ctx))) {
            for (String path : new String[]{CHAT, COMPLETIONS}) {
                int prompt = s.post(path, body(path, "\"stream\":false")).json().at("/usage/prompt_tokens").asInt();
                int room = ctx - prompt;
                String over = "\"temperature\":0,\"min_tokens\":" + (room + 1);
                TestServer.Resp r = s.post(path, path.equals(CHAT) ? TestServer.chat("Hi", over) : "{\"prompt\":\"Hi\"," + over + "}");
                assertEquals(400, r.status(), r.body());
                assertEquals("min_tokens", r.json().at("/error/param").asText(), r.body());
                assertEquals("context_length_exceeded", r.json().at("/error/code").asText(), r.body());
                assertEquals("min_tokens: the prompt is " + prompt + " tokens and this server's context limit is " + ctx
                        + " tokens (prompt + output), so at most " + room + " tokens can be generated after it, fewer than"
                        + " min_tokens (" + (room + 1) + ")", r.json().at("/error/message").asText());
                String both = "\"temperature\":0,\"max_tokens\":" + (room + 1) + ",\"min_tokens\":" + (room + 1);
                r = s.post(path, path.equals(CHAT) ? TestServer.chat("Hi", both) : "{\"prompt\":\"Hi\"," + both + "}");
                assertEquals(400, r.status(), r.body());
                assertEquals("max_tokens", r.json().at("/error/param").asText(), r.body());
                assertEquals("context_length_exceeded", r.json().at("/error/code").asText(), r.body());
                String fits = "\"temperature\":0,\"max_tokens\":" + room + ",\"min_tokens\":" + room;
                r = s.post(path, path.equals(CHAT) ? TestServer.chat("Hi", fits) : "{\"prompt\":\"Hi\"," + fits + "}");
                assertEquals(200, r.status(), r.body());
                assertEquals(room, r.json().at("/usage/completion_tokens").asInt(), r.body());
                assertEquals("length", r.json().at("/choices/0/finish_reason").asText(), r.body());
            }
        }
    }

    /**
     * A stream's finish chunk carries stop_reason as vLLM's does: null when the turn ended or max_tokens cut it, the stop
     * string or the stop token's id otherwise; before it, a chat chunk has no stop_reason and a completions chunk a null
     * one (vLLM writes its chat chunks with the fields it set, its completion chunks with all of them).
     */
    @Test
    void aStreamsFinishChunkCarriesStopReasonAsVllmsDoes() throws Exception {
        String[] extras = {"\"max_tokens\":3", "\"max_tokens\":20", "\"max_tokens\":20,\"stop\":[\"How\"]",
                "\"max_tokens\":20,\"stop_token_ids\":[" + HELP + "]"};
        String[] finishes = {"length", "stop", "stop", "stop"};
        String[] reasons = {"null", "null", "\"How\"", String.valueOf(HELP)};
        for (String path : new String[]{CHAT, COMPLETIONS}) {
            boolean chat = path.equals(CHAT);
            for (int k = 0; k < extras.length; k++) {
                String body = chat ? TestServer.chat("Hi", "\"temperature\":0,\"stream\":true," + extras[k])
                        : "{\"model\":\"scripted\",\"prompt\":\"Hi\",\"temperature\":0,\"stream\":true," + extras[k] + "}";
                TestServer.Resp r = server.post(path, body);
                assertEquals(200, r.status(), r.body());
                java.util.List<String> events = r.events();
                assertEquals("[DONE]", events.getLast(), r.body());
                JsonNode fin = Json.MAPPER.readTree(events.get(events.size() - 2)).at("/choices/0");
                String what = path + " " + extras[k] + ": " + r.body();
                assertEquals(finishes[k], fin.get("finish_reason").asText(), what);
                assertTrue(fin.has("stop_reason"), "the finish chunk has the key: " + what);
                assertEquals(reasons[k], Json.write(fin.get("stop_reason")), what);
                for (String e : events.subList(0, events.size() - 2)) {
                    JsonNode c = Json.MAPPER.readTree(e).at("/choices/0");
                    if (chat) assertFalse(c.has("stop_reason"), "a chat chunk before the finish has none: " + e);
                    else assertTrue(c.has("stop_reason") && c.get("stop_reason").isNull(), "a completions chunk's is null: " + e);
                }
            }
        }
    }

    /** Posts a bad body and returns its error, checking the status and that param and message name the field. */
    static JsonNode refused(String path, String extra, String param) throws Exception {
        TestServer.Resp r = server.post(path, body(path, extra));
        assertEquals(400, r.status(), extra + ": " + r.body());
        JsonNode e = r.json().get("error");
        assertEquals(param, e.path("param").asText(null), extra + ": " + r.body());
        assertTrue(e.get("message").asText().startsWith(param + ": "), r.body());
        return e;
    }

    @Test
    void badValuesAreRefusedNamingTheField() throws Exception {
        int vocab = TestServer.tokenizer().vocabSize();
        for (String path : new String[]{CHAT, COMPLETIONS}) {
            assertEquals("stop_token_ids: must be an array of token ids, got 5",
                    refused(path, "\"stop_token_ids\":5", "stop_token_ids").get("message").asText());
            refused(path, "\"stop_token_ids\":\"5\"", "stop_token_ids");
            assertEquals("stop_token_ids[1]: must be a token id in [0, " + vocab + "), got -1",
                    refused(path, "\"stop_token_ids\":[5,-1]", "stop_token_ids[1]").get("message").asText());
            assertEquals("stop_token_ids[0]: must be a token id in [0, " + vocab + "), got " + vocab,
                    refused(path, "\"stop_token_ids\":[" + vocab + "]", "stop_token_ids[0]").get("message").asText());
            refused(path, "\"stop_token_ids\":[1.5]", "stop_token_ids[0]");
            refused(path, "\"stop_token_ids\":[\"5\"]", "stop_token_ids[0]");
            refused(path, "\"stop_token_ids\":[null]", "stop_token_ids[0]");
            refused(path, "\"stop_token_ids\":[1e400]", "stop_token_ids[0]");
            StringJoiner many = new StringJoiner(",", "[", "]");
            for (int i = 0; i < 65; i++) many.add(String.valueOf(i));
            assertEquals("stop_token_ids: at most 64 token ids, got 65",
                    refused(path, "\"stop_token_ids\":" + many, "stop_token_ids").get("message").asText());
            refused(path, "\"include_stop_str_in_output\":\"yes\"", "include_stop_str_in_output");
        }
        // the bounds themselves are fine: 64 ids, the last token id, an integral number written otherwise, null, none
        StringJoiner ids = new StringJoiner(",", "[", "]");
        for (int i = 0; i < 63; i++) ids.add(String.valueOf(10000 + i));
        ids.add(String.valueOf(vocab - 1));
        assertEquals(TestServer.PLAIN, full(CHAT, "\"stop_token_ids\":" + ids).text());
        assertEquals("Hello! How can I", full(CHAT, "\"stop_token_ids\":[1.694e3]").text());
        assertEquals(TestServer.PLAIN, full(CHAT, "\"stop_token_ids\":null,\"include_stop_str_in_output\":null").text());
        assertEquals(TestServer.PLAIN, full(CHAT, "\"stop_token_ids\":[]").text());
    }

    /**
     * The Anthropic Messages API takes neither field (it has stop_sequences, which go on as chat's stop): they are named
     * as ignored there, and its stop_sequences still end the answer as before, the sequence left out.
     */
    @Test
    void theMessagesApiNamesThemIgnoredAndItsStopSequencesWorkAsBefore() throws Exception {
        TestServer.Resp r = server.post("/v1/messages", "{\"model\":\"scripted\",\"max_tokens\":20,\"stop_sequences\":[\"can I h\"],"
                + "\"stop_token_ids\":[" + HELP + "],\"include_stop_str_in_output\":true,"
                + "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}");
        assertEquals(200, r.status(), r.body());
        assertEquals("stop_token_ids, include_stop_str_in_output", r.headers().firstValue(RequestFields.HEADER).orElse(null));
        JsonNode m = r.json();
        assertEquals("Hello! How ", m.at("/content/0/text").asText(), r.body());
        assertEquals("stop_sequence", m.get("stop_reason").asText(), r.body());
        assertEquals("can I h", m.get("stop_sequence").asText(), r.body());
    }
}
