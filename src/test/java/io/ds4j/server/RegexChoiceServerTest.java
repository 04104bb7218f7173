package io.ds4j.server;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.json.Json;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.*;

/**
 * vLLM's output constraints through HTTP against the embedded default model (random weights, so only the constraint
 * shapes the output): {@code structured_outputs.regex} / {@code guided_regex} outputs match their pattern
 * (java.util.regex, whole string), {@code structured_outputs.choice} / {@code guided_choice} outputs are one of the
 * strings, {@code structured_outputs.grammar} / {@code guided_grammar} / llama.cpp's {@code grammar} outputs are
 * sentences of their EBNF grammar, sampled with temperature 1 over several seeds, streamed or not, on chat and
 * completions, after reasoning, beside tools in auto mode and continuing a prefix; and every misuse is a 400 naming the
 * field (a grammar's refusal its line and column too).
 */
class RegexChoiceServerTest {
    static TestServer server;

    static final String CHAT = "/v1/chat/completions", COMPLETIONS = "/v1/completions";

    @BeforeAll
    static void start() throws Exception {
        server = TestServer.start(new DefaultModelProvider(), Map.of(), null, null);
    }

    @AfterAll
    static void stop() {
        if (server != null) server.close();
    }

    static String body(String extra) {
        return "{\"messages\":[{\"role\":\"user\",\"content\":\"Answer.\"}]," + extra + "}";
    }

    static String q(String s) {
        return Json.MAPPER.valueToTree(s).toString();
    }

    static String content(TestServer.Resp r) {
        assertEquals(200, r.status(), r.body());
        assertNull(r.headers().firstValue(RequestFields.HEADER).orElse(null), "every field was read: " + r.body());
        JsonNode c = r.json().at("/choices/0");
        assertEquals("stop", c.get("finish_reason").asText(), r.body());
        return c.at("/message/content").asText();
    }

    static final List<String> PATTERNS = List.of("(red|green|blue) \\d{2,3}", "[A-Z][a-z]{2,8}( [A-Z][a-z]{2,8})?",
            "\\{\"id\": \\d+, \"ok\": (true|false)\\}", "[^\\n]{3,12}\\.", "(日本|中国)[α-ω]{1,3}!?", "-?\\d+(\\.\\d{1,2})?");

    @Test
    void regexOutputsMatch() throws Exception {
        for (String pattern : PATTERNS) {
            Pattern java = Pattern.compile(pattern);
            for (int seed = 0; seed < 4; seed++) {
                String field = seed % 2 == 0 ? "\"structured_outputs\":{\"regex\":" + q(pattern) + "}" : "\"guided_regex\":" + q(pattern);
                String out = content(server.post(CHAT, body(field + ",\"max_tokens\":60,\"temperature\":1,\"seed\":" + seed)));
                assertTrue(java.matcher(out).matches(), pattern + " -> '" + out + "'");
            }
        }
    }

    @Test
    void choiceOutputsAreOneOfTheStrings() throws Exception {
        List<String> choices = List.of("positive", "negative", "neutral", "pos", "très bien", "良い");
        String array = Json.MAPPER.valueToTree(choices).toString();
        java.util.Set<String> seen = new java.util.HashSet<>();
        for (int seed = 0; seed < 8; seed++) {
            String field = seed % 2 == 0 ? "\"structured_outputs\":{\"choice\":" + array + "}" : "\"guided_choice\":" + array;
            String out = content(server.post(CHAT, body(field + ",\"max_tokens\":20,\"temperature\":1,\"seed\":" + seed)));
            assertTrue(choices.contains(out), "'" + out + "'");
            seen.add(out);
        }
        assertTrue(seen.size() > 1, "the model chooses, not the server: " + seen);
        // an empty string is a choice like the others
        String out = content(server.post(CHAT, body("\"guided_choice\":[\"\"],\"max_tokens\":5")));
        assertEquals("", out);
    }

    @Test
    void streamedAnswersEqualWholeOnes() throws Exception {
        for (String field : List.of("\"guided_regex\":" + q("[a-z]{4,10}( [a-z]{2,6}){1,3}\\."),
                "\"structured_outputs\":{\"choice\":[\"alpha\",\"beta\",\"gamma delta\"]}")) {
            for (int seed = 0; seed < 3; seed++) {
                String extra = field + ",\"max_tokens\":40,\"temperature\":1,\"seed\":" + seed;
                TestServer.Resp whole = server.post(CHAT, body(extra));
                assertEquals(200, whole.status(), whole.body());
                TestServer.Resp stream = server.post(CHAT, body(extra + ",\"stream\":true"));
                assertEquals(200, stream.status(), stream.body());
                assertEquals(GoldenSseTest.assembleFull(whole.json()), GoldenSseTest.assemble(stream), field);
                String text = whole.json().at("/choices/0/message/content").asText();
                assertTrue(field.contains("regex") ? text.matches("[a-z]{4,10}( [a-z]{2,6}){1,3}\\.")
                        : List.of("alpha", "beta", "gamma delta").contains(text), text);
            }
        }
    }

    @Test
    void completionsTakeThemToo() throws Exception {
        Pattern java = Pattern.compile("\\d{3}-\\d{4}");
        for (int seed = 0; seed < 3; seed++) {
            TestServer.Resp r = server.post(COMPLETIONS, "{\"prompt\":\"Call me at \",\"guided_regex\":\"\\\\d{3}-\\\\d{4}\","
                    + "\"max_tokens\":30,\"temperature\":1,\"seed\":" + seed + (seed == 2 ? ",\"stream\":true" : "") + "}");
            assertEquals(200, r.status(), r.body());
            assertNull(r.headers().firstValue(RequestFields.HEADER).orElse(null));
            String text;
            if (seed == 2) {
                StringBuilder b = new StringBuilder();
                for (String e : r.events()) if (!e.equals("[DONE]")) b.append(Json.MAPPER.readTree(e).at("/choices/0/text").asText(""));
                text = b.toString();
            } else {
                text = r.json().at("/choices/0/text").asText();
            }
            assertTrue(java.matcher(text).matches(), "'" + text + "'");
        }
        // an echoed prompt is not part of the constrained output
        TestServer.Resp echo = server.post(COMPLETIONS, "{\"prompt\":\"Verdict: \",\"echo\":true,\"structured_outputs\":"
                + "{\"choice\":[\"guilty\",\"not guilty\"]},\"max_tokens\":10,\"temperature\":1,\"seed\":4}");
        assertEquals(200, echo.status(), echo.body());
        String text = echo.json().at("/choices/0/text").asText();
        assertTrue(text.equals("Verdict: guilty") || text.equals("Verdict: not guilty"), text);
        assertEquals("stop", echo.json().at("/choices/0/finish_reason").asText());
    }

    @Test
    void afterReasoningBesideToolsAndForEveryChoice() throws Exception {
        Pattern java = Pattern.compile("(yes|no), \\d");
        String field = "\"structured_outputs\":{\"regex\":\"(yes|no), \\\\d\"}";
        // thinking mode: the reasoning is free, the content is held to the pattern
        TestServer.Resp thinking = server.post(CHAT, body(field + ",\"reasoning_effort\":\"high\",\"max_tokens\":80,\"temperature\":1,\"seed\":2"));
        assertTrue(java.matcher(content(thinking)).matches(), thinking.body());
        assertTrue(thinking.json().at("/choices/0/message/reasoning_content").isTextual(), thinking.body());
        // tools in auto mode: the content or a call, never free text
        String tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"lookup\",\"parameters\":{\"type\":\"object\","
                + "\"properties\":{\"q\":{\"type\":\"string\"}},\"required\":[\"q\"]}}}],\"tool_choice\":\"auto\"";
        for (int seed = 0; seed < 4; seed++) {
            TestServer.Resp r = server.post(CHAT, body(field + "," + tools + ",\"max_tokens\":80,\"temperature\":1,\"seed\":" + seed));
            assertEquals(200, r.status(), r.body());
            JsonNode m = r.json().at("/choices/0/message");
            assertTrue(m.path("tool_calls").size() > 0 || java.matcher(m.path("content").asText("")).matches(), r.body());
        }
        // n choices, each held to the pattern
        TestServer.Resp n = server.post(CHAT, body(field + ",\"n\":3,\"max_tokens\":20,\"temperature\":1,\"seed\":9"));
        assertEquals(200, n.status(), n.body());
        assertEquals(3, n.json().get("choices").size());
        for (JsonNode c : n.json().get("choices")) assertTrue(java.matcher(c.at("/message/content").asText()).matches(), n.body());
    }

    /**
     * Held content is the model's text as the constraint let it write it: the end-of-sentence token's text or DSML
     * markup inside a pattern or choice is content, not the end of the turn or a tool call (no tool was offered); and
     * beside tools in auto mode a block still opens only where the content would begin.
     */
    @Test
    void heldContentIsNeverReadAsMarkup() throws Exception {
        String eos = io.ds4j.text.chat.V4Format.EOS, open = io.ds4j.text.chat.V4Format.TOOL_CALLS_OPEN;
        String block = "\n\n" + open + "\n" + io.ds4j.text.chat.V4Format.INVOKE_OPEN + " name=\"f\">\n"
                + io.ds4j.text.chat.V4Format.INVOKE_CLOSE + "\n" + io.ds4j.text.chat.V4Format.TOOL_CALLS_CLOSE;
        for (String choice : List.of("a " + eos + " b", block, "x" + block, "\n\n")) {
            String field = "\"structured_outputs\":{\"choice\":[" + q(choice) + "]},\"max_tokens\":200,\"temperature\":1,\"seed\":3";
            TestServer.Resp whole = server.post(CHAT, body(field));
            assertEquals(choice, content(whole), whole.body());
            assertTrue(whole.json().at("/choices/0/message/tool_calls").isMissingNode()
                    || whole.json().at("/choices/0/message/tool_calls").isEmpty(), whole.body());
            TestServer.Resp stream = server.post(CHAT, body(field + ",\"stream\":true"));
            assertEquals(GoldenSseTest.assembleFull(whole.json()), GoldenSseTest.assemble(stream), choice);
        }
        // the same text under a pattern, after reasoning
        TestServer.Resp r = server.post(CHAT, body("\"guided_regex\":" + q("<\uFF5Cend\u2581of\u2581sentence\uFF5C>!")
                + ",\"reasoning_effort\":\"high\",\"max_tokens\":200,\"temperature\":1,\"seed\":1"));
        assertEquals(eos + "!", content(r), r.body());
    }

    @Test
    void aContinuedPrefixIsHeldWithItsContinuation() throws Exception {
        String start = "{\"messages\":[{\"role\":\"user\",\"content\":\"Colour?\"},{\"role\":\"assistant\",\"content\":";
        String rest = ",\"prefix\":true}],\"guided_regex\":\"(red|green|blue) \\\\d{2}\",\"max_tokens\":20,\"temperature\":1,\"seed\":1}";
        TestServer.Resp r = server.post(CHAT, start + "\"gre\"" + rest);
        String out = content(r);
        assertTrue(("gre" + out).matches("green \\d{2}"), out);
        TestServer.Resp bad = server.post(CHAT, start + "\"purple\"" + rest);
        assertEquals(400, bad.status(), bad.body());
        assertEquals("messages[1].prefix", bad.json().at("/error/param").asText(), bad.body());
        assertTrue(bad.json().at("/error/message").asText().contains("cannot begin an output of the regex"), bad.body());
    }

    @Test
    void structuredOutputsJsonAndJsonObject() throws Exception {
        String schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"],\"additionalProperties\":false}";
        String out = content(server.post(CHAT, body("\"structured_outputs\":{\"json\":" + schema + ",\"disable_fallback\":true,"
                + "\"disable_additional_properties\":false,\"disable_any_whitespace\":false,\"grammar\":null},\"max_tokens\":40,\"temperature\":1")));
        JsonNode v = Json.MAPPER.readTree(out);
        assertTrue(v.get("n").isIntegralNumber() && v.size() == 1, out);
        // vLLM's older guided_json is the same constraint (it was ignored with a warning)
        out = content(server.post(CHAT, body("\"guided_json\":" + schema + ",\"max_tokens\":40,\"temperature\":1")));
        v = Json.MAPPER.readTree(out);
        assertTrue(v.get("n").isIntegralNumber() && v.size() == 1, out);
        refused(CHAT, body("\"guided_json\":" + schema + ",\"guided_regex\":\"a\""), "guided_json", "guided_json: cannot be combined with guided_regex");
        out = content(server.post(CHAT, body("\"structured_outputs\":{\"json_object\":true},\"max_tokens\":40,\"temperature\":1")));
        assertTrue(Json.MAPPER.readTree(out).isObject(), out);
        TestServer.Resp r = server.post(CHAT, body("\"structured_outputs\":{\"json\":{\"type\":\"string\",\"contentEncoding\":\"base64\"}},\"max_tokens\":40"));
        assertEquals(400, r.status(), r.body());
        assertEquals("structured_outputs.json", r.json().at("/error/param").asText(), r.body());
        assertTrue(r.json().at("/error/message").asText().contains("'contentEncoding'"), r.body());
    }

    static final String ARITHMETIC = "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*  # sums\nterm ::= [0-9]{1,3} | \"(\" expr \")\"";

    /** Whether text is a whole output of an EBNF grammar (its fewest bytes to a match after the text is 0). */
    static boolean ofGrammar(String grammar, String text) {
        io.ds4j.grammar.Grammar after = io.ds4j.grammar.Grammar.ebnf(grammar).after(text);
        return after != null && after.minBytes() == 0;
    }

    @Test
    void grammarOutputsMatch() throws Exception {
        // vLLM's structured_outputs.grammar and guided_grammar, and llama.cpp's grammar: the same constraint
        List<String> fields = List.of("\"structured_outputs\":{\"grammar\":" + q(ARITHMETIC) + "}", "\"guided_grammar\":" + q(ARITHMETIC),
                "\"grammar\":" + q(ARITHMETIC));
        java.util.Set<String> seen = new java.util.HashSet<>();
        for (int seed = 0; seed < 6; seed++) {
            String field = fields.get(seed % 3);
            String out = content(server.post(CHAT, body(field + ",\"max_tokens\":40,\"temperature\":1,\"seed\":" + seed)));
            assertTrue(ofGrammar(ARITHMETIC, out), field + " -> '" + out + "'");
            seen.add(out);
        }
        assertTrue(seen.size() > 1, "the model chooses within the grammar: " + seen);
        // on completions too, streamed
        TestServer.Resp r = server.post(COMPLETIONS, "{\"prompt\":\"1+\",\"guided_grammar\":" + q(ARITHMETIC)
                + ",\"max_tokens\":30,\"temperature\":1,\"seed\":3,\"stream\":true}");
        assertEquals(200, r.status(), r.body());
        StringBuilder text = new StringBuilder();
        for (String line : r.body().split("\n")) {
            if (!line.startsWith("data: {")) continue;
            text.append(Json.MAPPER.readTree(line.substring(6)).at("/choices/0/text").asText());
        }
        assertTrue(ofGrammar(ARITHMETIC, text.toString()), "'" + text + "'");
    }

    @Test
    void aGrammarTheEngineCannotEnforceIsA400NamingWhere() throws Exception {
        refused(CHAT, body("\"structured_outputs\":{\"grammar\":\"root ::= x\"}"), "structured_outputs.grammar",
                "structured_outputs.grammar: rule 'x' is used but never defined (at line 1, column 10)");
        refused(CHAT, body("\"guided_grammar\":" + q("root ::= root \"a\" | \"a\"")), "guided_grammar",
                "guided_grammar: left recursion is not supported: rule 'root' begins with 'root'");
        refused(COMPLETIONS, "{\"prompt\":\"x\",\"grammar\":" + q("root ::= \"a\"\nroot ::= \"b\"") + "}", "grammar",
                "grammar: rule 'root' is defined twice (first at line 1) (at line 2, column 1)");
        refused(CHAT, body("\"guided_grammar\":5"), "guided_grammar", "guided_grammar: must be a string (an EBNF grammar");
        refused(CHAT, body("\"grammar\":" + q(ARITHMETIC) + ",\"guided_regex\":\"a\""), "grammar", "grammar: cannot be combined with guided_regex");
    }

    /** A 400, its param and the start of its message. */
    static void refused(String path, String body, String param, String message) throws Exception {
        TestServer.Resp r = server.post(path, body);
        assertEquals(400, r.status(), body + " -> " + r.body());
        JsonNode e = r.json().get("error");
        assertEquals(param, e.get("param").asText(), r.body());
        assertTrue(e.get("message").asText().startsWith(message), e.get("message").asText());
        assertEquals("invalid_request_error", e.get("type").asText());
    }

    @Test
    void misuseIsA400NamingTheField() throws Exception {
        refused(CHAT, body("\"structured_outputs\":\"[a-z]+\""), "structured_outputs",
                "structured_outputs: must be an object such as {\"regex\": \"...\"}");
        refused(CHAT, body("\"structured_outputs\":{\"regex\":5}"), "structured_outputs.regex",
                "structured_outputs.regex: must be a string (a regular expression), got 5");
        refused(CHAT, body("\"guided_regex\":[\"a\"]"), "guided_regex", "guided_regex: must be a string (a regular expression), got an array");
        refused(CHAT, body("\"structured_outputs\":{\"choice\":[]}"), "structured_outputs.choice",
                "structured_outputs.choice: must be a non-empty array of strings, got an empty array");
        refused(CHAT, body("\"guided_choice\":\"yes\""), "guided_choice", "guided_choice: must be a non-empty array of strings, got a string");
        refused(CHAT, body("\"guided_choice\":[\"yes\",3]"), "guided_choice[1]", "guided_choice[1]: must be a string, got 3");
        refused(CHAT, body("\"structured_outputs\":{\"json\":\"{}\"}"), "structured_outputs.json",
                "structured_outputs.json: must be a JSON schema (an object), got a string");
        refused(CHAT, body("\"structured_outputs\":{\"regx\":\"a\"}"), "structured_outputs.regx",
                "structured_outputs.regx: is not a structured_outputs field (did you mean structured_outputs.regex?)");
        refused(CHAT, body("\"structured_outputs\":{\"structural_tag\":\"{}\"}"), "structured_outputs.structural_tag",
                "structured_outputs.structural_tag: is not supported by this server");
        // JSON without whitespace between its tokens, whichever field asks for the JSON; a regex, choice or grammar
        // decides its own whitespace, so the flag changes nothing there
        String schema = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}},"
                + "\"b\":{\"type\":\"string\"}},\"required\":[\"a\",\"b\"]}";
        for (String fields : new String[]{"\"structured_outputs\":{\"json\":" + schema + ",\"disable_any_whitespace\":true}",
                "\"structured_outputs\":{\"disable_any_whitespace\":true},\"guided_json\":" + schema,
                "\"structured_outputs\":{\"disable_any_whitespace\":true},\"response_format\":{\"type\":\"json_schema\","
                        + "\"json_schema\":{\"name\":\"x\",\"strict\":true,\"schema\":" + schema + "}}",
                "\"structured_outputs\":{\"disable_any_whitespace\":true,\"json_object\":true}"}) {
            for (int seed = 0; seed < 4; seed++) {
                var r = server.post(CHAT, body(fields + ",\"max_tokens\":120,\"temperature\":1.5,\"seed\":" + seed));
                assertEquals(200, r.status(), r.body());
                String out = r.json().get("choices").get(0).get("message").get("content").asText();
                String finish = r.json().get("choices").get(0).get("finish_reason").asText();
                // outside its strings the JSON has no whitespace (a cut by max_tokens may end inside a string)
                String outside = out.replaceAll("\"(\\\\.|[^\"\\\\])*\"?", "\"\"");
                assertFalse(outside.matches("(?s).*\\s.*"), fields + " -> " + out);
                if (finish.equals("stop")) assertTrue(Json.MAPPER.readTree(out).isObject(), out);
            }
        }
        // without the flag the same requests do write whitespace between tokens (so the check above can fail)
        int spaced = 0;
        for (int seed = 0; seed < 4; seed++) {
            String out = content(server.post(CHAT, body("\"structured_outputs\":{\"json\":" + schema + "},\"max_tokens\":120,"
                    + "\"temperature\":1.5,\"seed\":" + seed)));
            if (out.replaceAll("\"(\\\\.|[^\"\\\\])*\"?", "\"\"").matches("(?s).*\\s.*")) spaced++;
        }
        assertTrue(spaced > 0, "no plain output had whitespace between its tokens");
        assertEquals("a", content(server.post(CHAT, body("\"structured_outputs\":{\"regex\":\"a\",\"disable_any_whitespace\":true}"))));
        assertEquals("b", content(server.post(CHAT, body("\"structured_outputs\":{\"grammar\":\"root ::= \\\"b\\\"\",\"disable_any_whitespace\":true}"))));
        // one constraint per request, whichever fields give them
        refused(CHAT, body("\"structured_outputs\":{\"regex\":\"a\",\"choice\":[\"a\"]}"), "structured_outputs.choice",
                "structured_outputs.choice: cannot be combined with structured_outputs.regex");
        refused(CHAT, body("\"structured_outputs\":{\"regex\":\"a\"},\"guided_regex\":\"a\""), "guided_regex",
                "guided_regex: cannot be combined with structured_outputs.regex");
        refused(CHAT, body("\"guided_regex\":\"a\",\"guided_choice\":[\"a\"]"), "guided_choice",
                "guided_choice: cannot be combined with guided_regex");
        refused(CHAT, body("\"response_format\":{\"type\":\"json_object\"},\"guided_choice\":[\"a\"]"), "guided_choice",
                "guided_choice: cannot be combined with response_format (json_object)");
        refused(CHAT, body("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"strict\":true,"
                + "\"schema\":{\"type\":\"object\"}}},\"structured_outputs\":{\"regex\":\"a\"}"), "structured_outputs.regex",
                "structured_outputs.regex: cannot be combined with response_format (json_schema)");
        String tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
        refused(CHAT, body(tools + ",\"tool_choice\":\"required\",\"guided_regex\":\"a\""), "guided_regex",
                "guided_regex: cannot be combined with a forced tool call (tool_choice \"required\")");
        refused(CHAT, body(tools + ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},\"guided_choice\":[\"a\"]"),
                "guided_choice", "guided_choice: cannot be combined with a forced tool call (tool_choice naming a function)");
        // an enforced response_format alike (it was dropped without a word); a non-strict schema then only describes the answer
        refused(CHAT, body(tools + ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}},\"response_format\":"
                + "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"strict\":true,\"schema\":{\"type\":\"object\"}}}"),
                "response_format", "response_format: cannot be combined with a forced tool call (tool_choice naming a function)");
        refused(CHAT, body(tools + ",\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}"),
                "response_format", "response_format: cannot be combined with a forced tool call (tool_choice \"required\")");
        // patterns the engine cannot enforce, with what and where
        refused(CHAT, body("\"structured_outputs\":{\"regex\":\"(ab\"}"), "structured_outputs.regex",
                "structured_outputs.regex: unbalanced parenthesis: this '(' is never closed (at position 0)");
        refused(CHAT, body("\"guided_regex\":\"(a)\\\\1\""), "guided_regex", "guided_regex: backreferences ('\\1') are not supported (at position 3)");
        refused(CHAT, body("\"guided_regex\":\"a(?=b)\""), "guided_regex", "guided_regex: lookaround");
        refused(CHAT, body("\"guided_regex\":\"a{0,4000}b{0,4000}\""), "guided_regex", "guided_regex: the pattern is too large");
        refused(COMPLETIONS, "{\"prompt\":\"x\",\"guided_regex\":\"[z-a]\"}", "guided_regex", "guided_regex: bad range 'z-a'");
        refused(COMPLETIONS, "{\"prompt\":\"x\",\"guided_regex\":\"a\",\"structured_outputs\":{\"choice\":[\"a\"]}}",
                "guided_regex", "guided_regex: cannot be combined with structured_outputs.choice");
    }

    /**
     * A json_schema without strict is held to only where it is the request's one constraint: beside a regex it only
     * describes the answer (as OpenAI reads strict false), and the regex holds.
     */
    @Test
    void aNonStrictSchemaIsNoConstraintBesideTheRegex() throws Exception {
        String out = content(server.post(CHAT, body("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
                + "\"schema\":{\"type\":\"object\"}}},\"guided_regex\":\"[a-c]{3}\",\"max_tokens\":10,\"temperature\":1")));
        assertTrue(out.matches("[a-c]{3}"), out);
        // and beside a forced call the call is the answer
        String tools = "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}}]";
        var forced = server.post(CHAT, body(tools + ",\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_schema\","
                + "\"json_schema\":{\"name\":\"a\",\"schema\":{\"type\":\"object\"}}},\"max_tokens\":200"));
        assertEquals(200, forced.status(), forced.body());
    }
}
