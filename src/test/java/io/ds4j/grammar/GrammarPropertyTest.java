package io.ds4j.grammar;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.networknt.schema.JsonSchema;
import com.networknt.schema.JsonSchemaFactory;
import com.networknt.schema.SpecVersion;
import com.networknt.schema.ValidationMessage;
import io.ds4j.sampling.Constraint;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;
import io.ds4j.text.chat.OutputParser;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Property tests of the constraint engine without a model: random schemas of the supported subset, random logits as
 * the "model", the real DeepSeek tokenizer. Every output must parse and validate against its schema, checked by an
 * independent validator (networknt json-schema-validator), and must complete within max_tokens when the budget
 * allows the schema's shortest output.
 */
class GrammarPropertyTest {
    static final ObjectMapper M = new ObjectMapper();
    static final Tokenizer TOK = Tokenizers.vendored();
    static final int V = 129_280;

    /** Samples to the end (EOS) or the budget with random logits; returns the text and whether EOS came. */
    record Out(String text, boolean eos, int tokens) {}

    static Out run(Grammar g, int maxTokens, long seed, double temperature) {
        return run(g, "", maxTokens, seed, temperature);
    }

    /**
     * The same after a prefix the "model" writes first (each of its tokens must be allowed); the prefix is part of the
     * text and of the tokens counted.
     */
    static Out run(Grammar g, String prefix, int maxTokens, long seed, double temperature) {
        // steered whatever the grammar's own choice, so that random logits complete the output within the budget (free
        // text with optional calls is not steered: a model ends its own strings; random logits would not)
        TokenConstraint c = g.steeredConstraint(TOK);
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        int[] forced = prefix.isEmpty() ? new int[0] : TOK.encode(prefix);
        for (int i = 0; i < forced.length; i++) {
            assertTrue(Constraint.has(c.allowed(maxTokens - i), forced[i]), "prefix token " + i + " of " + prefix);
            c.advance(forced[i]);
            bytes.writeBytes(TOK.tokenBytes(forced[i]));
        }
        SamplingParams p = temperature == 0 ? SamplingParams.greedy(maxTokens) : SamplingParams.sampled(temperature, 64, 1, 0, seed, maxTokens);
        Sampler s = new Sampler(p, V, new int[0], TOK.vocabSize());
        SplittableRandom r = new SplittableRandom(seed);
        float[] logits = new float[V], base = new float[V];
        for (int v = 0; v < V; v++) base[v] = r.nextFloat() * 8;
        for (int i = forced.length; i < maxTokens; i++) {
            // a cheap random "model": the same random row, rotated by a random offset each step
            int off = r.nextInt(V);
            System.arraycopy(base, off, logits, 0, V - off);
            System.arraycopy(base, 0, logits, V - off, off);
            long[] allow = c.allowed(maxTokens - i);
            int tok = s.distribution(logits, 0, allow).sample(s.rng());
            assertTrue(Constraint.has(allow, tok));
            try {
                c.advance(tok);
            } catch (IllegalStateException e) {
                throw new IllegalStateException(e.getMessage() + " after: " + bytes.toString(StandardCharsets.UTF_8) + " / " + g, e);
            }
            if (tok == TOK.eosId()) return new Out(bytes.toString(StandardCharsets.UTF_8), true, i + 1);
            bytes.writeBytes(TOK.tokenBytes(tok));
        }
        return new Out(bytes.toString(StandardCharsets.UTF_8), false, maxTokens);
    }

    static JsonSchema validator(JsonNode schema) {
        return JsonSchemaFactory.getInstance(SpecVersion.VersionFlag.V202012).getSchema(schema);
    }

    /**
     * A string held to a pattern or a format completes wherever its shortest answer fits (minBytes + 1 tokens): the
     * steering counts an escape's own bytes, so it never begins a backslash escape that cannot end in time (a letter or
     * a digit has no two-byte escape: six bytes). It used to count one byte for it, and such strings ended cut.
     */
    @Test
    void stringsHeldToAPatternOrFormatCompleteWhereTheShortestFits() throws Exception {
        for (String text : List.of("{\"type\":\"string\",\"pattern\":\"^ab$\"}", "{\"type\":\"string\",\"pattern\":\"^[0-9]+$\"}",
                "{\"type\":\"string\",\"format\":\"date\"}")) {
            JsonNode schema = M.readTree(text);
            Grammar g = Grammar.jsonSchema(schema);
            JsonSchema v = validator(schema);
            for (int extra = 0; extra < 4; extra++)
                for (long seed = 0; seed < 8; seed++) {
                    int budget = g.minBytes() + 1 + extra;
                    Out o = run(g, budget, seed, 1.0);
                    assertTrue(o.eos(), text + " in " + budget + " tokens, seed " + seed + ": " + o.text());
                    assertTrue(v.validate(M.readTree(o.text())).isEmpty(), o.text());
                }
        }
    }

    @Test
    void randomSchemasGiveValidJson() throws Exception {
        SplittableRandom r = new SplittableRandom(19);
        int checked = 0;
        for (int trial = 0; trial < 60; trial++) {
            ObjectNode schema = RandomSchemas.schema(r);
            Grammar g = Grammar.jsonSchema(schema);
            int budget = 24 + r.nextInt(160);
            if (g.minBytes() + 1 > budget) continue;
            Out o;
            try {
                o = run(g, budget, r.nextLong(), trial % 3 == 0 ? 0 : 1.0);
            } catch (IllegalStateException e) {
                throw new AssertionError(schema + " budget " + budget + ": " + e.getMessage(), e);
            }
            assertTrue(o.eos, "ended with EOS within " + budget + " tokens: " + schema + " -> " + o.text);
            JsonNode v = M.readTree(o.text);
            Set<ValidationMessage> errors = validator(schema).validate(v);
            assertTrue(errors.isEmpty(), schema + "\n" + o.text + "\n" + errors);
            checked++;
        }
        assertTrue(checked >= 40, "most schemas fit their budgets: " + checked);
    }

    @Test
    void jsonObjectModeGivesAnObject() throws Exception {
        for (long seed = 0; seed < 10; seed++) {
            Out o = run(Grammar.jsonObject(), 30 + (int) seed * 20, seed, 1.0);
            assertTrue(o.eos, o.text);
            assertTrue(M.readTree(o.text).isObject(), o.text);
        }
    }

    @Test
    void thinkingComesFirst() throws Exception {
        ObjectNode schema = (ObjectNode) M.readTree("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"],\"additionalProperties\":false}");
        Out o = run(Grammar.jsonSchema(schema).afterThinking(), 80, 3, 1.0);
        assertTrue(o.eos, o.text);
        int end = o.text.indexOf("</think>");
        assertTrue(end >= 0, o.text);
        JsonNode v = M.readTree(o.text.substring(end + "</think>".length()));
        assertTrue(validator(schema).validate(v).isEmpty(), o.text);
    }

    @Test
    void toolCallsParseWithValidArguments() throws Exception {
        SplittableRandom r = new SplittableRandom(7);
        for (int trial = 0; trial < 30; trial++) {
            List<String> names = List.of("get_weather", "search", "noop");
            List<JsonNode> params = new ArrayList<>();
            params.add(RandomSchemas.toolParameters(r));
            params.add(RandomSchemas.toolParameters(r));
            params.add(null);
            Grammar g = Grammar.toolCall(names, params);
            int budget = 40 + r.nextInt(200);
            if (g.minBytes() + 1 > budget) continue;
            Out o = run(g, budget, r.nextLong(), 1.0);
            assertTrue(o.eos, o.text);
            OutputParser parser = new OutputParser(false, OutputParser.sequentialIds());
            List<OutputParser.Event> ev = new ArrayList<>(parser.push(o.text));
            ev.addAll(parser.finish());
            String name = null;
            StringBuilder args = new StringBuilder();
            int calls = 0;
            for (OutputParser.Event e : ev) {
                if (e instanceof OutputParser.ToolCallStart s) {
                    name = s.name();
                    calls++;
                }
                if (e instanceof OutputParser.ToolCallArgumentsDelta d) args.append(d.fragment());
                assertFalse(e instanceof OutputParser.ContentDelta c && !c.text().isBlank(), "no content: " + o.text);
            }
            assertEquals(1, calls, o.text);
            int i = names.indexOf(name);
            assertTrue(i >= 0, o.text);
            JsonNode a = M.readTree(args.toString());
            JsonNode schema = params.get(i) == null ? M.readTree("{\"type\":\"object\"}") : params.get(i);
            assertTrue(validator(schema).validate(a).isEmpty(), schema + "\n" + o.text + "\n" + a);
        }
    }

    @Test
    void toolNamesDsmlCannotCarryAreRefused() throws Exception {
        JsonNode p = M.readTree("{\"type\":\"object\",\"properties\":{\"a\\\"b\":{\"type\":\"string\"}}}");
        UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.toolCall(List.of("f"), List.of(p)));
        assertEquals("properties", e.keyword());
    }

    @Test
    void unsupportedKeywordsAreNamed() throws Exception {
        for (String kw : List.of("contentEncoding", "format", "minProperties", "oneOf", "allOf", "not", "minimum", "patternProperties")) {
            String type = kw.equals("minimum") ? "number" : "string";
            String s = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"" + type + "\",\"" + kw + "\":" + (kw.endsWith("Of") ? "[]" : kw.equals("not") || kw.equals("patternProperties") ? "{}" : kw.startsWith("min") ? "1" : "\"x\"") + "}}}";
            UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(M.readTree(s)));
            assertEquals(kw, e.keyword(), e.getMessage());
            assertTrue(e.getMessage().contains(kw));
        }
    }

    @Test
    void lengthCutAllowsOnlyWhatStillFits() throws Exception {
        // a required string with a 40-token budget: the string must close in time whatever the logits say
        ObjectNode schema = (ObjectNode) M.readTree("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\"},\"t\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":2}},\"required\":[\"s\",\"t\"],\"additionalProperties\":false}");
        for (int budget : new int[]{27, 30, 40, 100}) {
            Out o = run(Grammar.jsonSchema(schema), budget, budget, 1.0);
            assertTrue(o.eos, budget + ": " + o.text);
            assertTrue(validator(schema).validate(M.readTree(o.text)).isEmpty(), o.text);
        }
        // a budget below the shortest output ends incomplete (finish reason "length")
        Out cut = run(Grammar.jsonSchema(schema), 5, 1, 1.0);
        assertFalse(cut.eos, cut.text);
    }

    /** A parsed output: its content and its tool calls (name, arguments text). */
    record Parsed(String content, List<String[]> calls) {}

    static Parsed parse(String text) {
        OutputParser parser = new OutputParser(false, OutputParser.sequentialIds());
        List<OutputParser.Event> ev = new ArrayList<>(parser.push(text));
        ev.addAll(parser.finish());
        StringBuilder content = new StringBuilder();
        List<String[]> calls = new ArrayList<>();
        for (OutputParser.Event e : ev) {
            if (e instanceof OutputParser.ContentDelta c) content.append(c.text());
            if (e instanceof OutputParser.ToolCallStart st) calls.add(new String[] {st.name(), ""});
            if (e instanceof OutputParser.ToolCallArgumentsDelta d) calls.getLast()[1] += d.fragment();
        }
        return new Parsed(content.toString(), calls);
    }

    static final String BLOCK = "\n\n<\uFF5CDSML\uFF5Ctool_calls>";

    @Test
    void autoToolCallsLeaveTheTextFreeAndMayEndIt() throws Exception {
        Grammar g = Grammar.optionalToolCalls(List.of("f"), List.of(M.readTree("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"]}")),
                List.of(true), true, null);
        assertEquals(0, g.minBytes());
        assertFalse(g.isToolCall());
        TokenConstraint c = g.constraint(TOK);
        assertTrue(c.complete(), "an empty answer is complete");
        assertTrue(Constraint.has(c.allowed(50), TOK.eosId()), "the end of the turn is allowed before any call");
        // plain text, markup-like text that is not the block's opening, then the end
        String text = "The answer is <b>42</b>, see <\uFF5CDSML\uFF5Cnot a block.";
        int[] toks = TOK.encode(text);
        assertEquals(toks.length, c.acceptablePrefix(toks, toks.length, 100), text);
        for (int t : toks) c.advance(t);
        assertTrue(c.complete());
        c.advance(TOK.eosId());
        // random text ends with EOS within its budget or runs to it; either way it parses as content without calls
        for (long seed = 0; seed < 6; seed++) {
            Out o = run(g, 40, seed, 1.0);
            assertTrue(parse(o.text).calls().isEmpty() || o.text.contains("tool_calls"), o.text);
        }
    }

    @Test
    void aBlockTheModelBeginsIsHeldToTheToolsInAutoMode() throws Exception {
        SplittableRandom r = new SplittableRandom(11);
        List<String> names = List.of("get_weather", "search", "free_form");
        int multi = 0, checked = 0;
        for (int trial = 0; trial < 24; trial++) {
            List<JsonNode> params = List.of(RandomSchemas.toolParameters(r), RandomSchemas.toolParameters(r), RandomSchemas.toolParameters(r));
            boolean parallel = trial % 2 == 0;
            Grammar g = Grammar.optionalToolCalls(names, params, List.of(true, true, false), parallel, null);
            Out o = run(g, "Let me look that up." + BLOCK, 400, r.nextLong(), 1.0);
            assertTrue(o.eos, "a begun block closes within the budget: " + o.text);
            Parsed p = parse(o.text);
            assertEquals("Let me look that up.", p.content(), o.text);
            assertFalse(p.calls().isEmpty(), o.text);
            if (!parallel) assertEquals(1, p.calls().size(), "one invoke without parallel calls: " + o.text);
            if (p.calls().size() > 1) multi++;
            for (String[] call : p.calls()) {
                int i = names.indexOf(call[0]);
                assertTrue(i >= 0, "a listed tool: " + o.text);
                JsonNode a = M.readTree(call[1]);
                assertTrue(a.isObject(), o.text);
                if (i == 2) continue; // not strict: any parameters, but still DSML the parser reads as a call
                assertTrue(validator(params.get(i)).validate(a).isEmpty(), params.get(i) + "\n" + o.text + "\n" + a);
                checked++;
            }
        }
        assertTrue(multi > 0, "parallel calls come when allowed");
        assertTrue(checked >= 10, "strict calls checked: " + checked);
    }

    @Test
    void anUnlistedToolOrInvalidArgumentsCannotBeWritten() throws Exception {
        JsonNode p = M.readTree("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"],\"additionalProperties\":false}");
        Grammar g = Grammar.optionalToolCalls(List.of("count"), List.of(p), List.of(true), false, null);
        String open = "Ok." + BLOCK + "\n<\uFF5CDSML\uFF5Cinvoke name=\"";
        String good = open + "count\">\n<\uFF5CDSML\uFF5Cparameter name=\"n\" string=\"false\">7</\uFF5CDSML\uFF5Cparameter>\n</\uFF5CDSML\uFF5Cinvoke>\n</\uFF5CDSML\uFF5Ctool_calls>";
        assertEquals(-1, refusedAt(g, good), "the valid call is written whole");
        int unlisted = refusedAt(g, open + "delete_all\">\n");
        assertTrue(unlisted >= 0, "an unlisted name is refused");
        int notANumber = refusedAt(g, open + "count\">\n<\uFF5CDSML\uFF5Cparameter name=\"n\" string=\"false\">\"seven\"");
        assertTrue(notANumber >= 0, "an argument outside the schema is refused");
        // one call only: a second invoke after the first is refused
        String twice = good.substring(0, good.lastIndexOf('\n')) + "\n<\uFF5CDSML\uFF5Cinvoke name=\"count\">";
        assertTrue(refusedAt(g, twice) >= 0, "a second invoke without parallel calls is refused");
        // the same two calls pass where parallel calls are on
        Grammar par = Grammar.optionalToolCalls(List.of("count"), List.of(p), List.of(true), true, null);
        assertEquals(-1, refusedAt(par, twice));
    }

    /**
     * Each case {schema, keyword, invalid ("true" / "false"), message or null} is refused by Grammar.jsonSchema naming
     * that keyword, as an invalid schema or an unsupported one, with that message where one is given.
     */
    static void assertRefusals(String[][] cases) throws Exception {
        for (String[] c : cases) {
            UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(M.readTree(c[0])), c[0]);
            assertEquals(c[1], e.keyword(), c[0] + ": " + e.getMessage());
            assertEquals(Boolean.parseBoolean(c[2]), e.invalid(), c[0] + ": " + e.getMessage());
            if (c[3] != null) assertEquals(c[3], e.getMessage(), c[0]);
        }
    }

    /** The index of the first token of the text's encoding the constraint refuses, or −1 when it takes them all. */
    static int refusedAt(Grammar g, String text) {
        TokenConstraint c = g.constraint(TOK);
        int[] toks = TOK.encode(text);
        int n = c.acceptablePrefix(toks, toks.length, 1000);
        return n == toks.length ? -1 : n;
    }

    /**
     * Beside tools, held content may not begin as a tool-call block does: such text is the block's, held to the tools
     * (a block naming a function not offered, written as a choice, is refused), while the same markup later in the
     * content stays content.
     */
    @Test
    void heldContentBesideToolsMayNotOpenABlock() throws Exception {
        // a call without parameters as the tool grammar writes it (the invoke line, a blank line, its close)
        String foreign = "\n\n<\uFF5CDSML\uFF5Ctool_calls>\n<\uFF5CDSML\uFF5Cinvoke name=\"zzz\">\n\n</\uFF5CDSML\uFF5Cinvoke>\n</\uFF5CDSML\uFF5Ctool_calls>";
        JsonNode p = M.readTree("{\"type\":\"object\",\"properties\":{}}");
        Grammar g = Grammar.optionalToolCalls(List.of("f"), List.of(p), List.of(false), true, Grammar.choice(List.of(foreign, "x" + foreign)));
        assertTrue(refusedAt(g, foreign) >= 0, "a block of a function not offered");
        assertEquals(-1, refusedAt(g, "x" + foreign), "markup inside the content is content");
        String own = foreign.replace("zzz", "f");
        assertEquals(-1, refusedAt(g, own), "the block of an offered function");
        // without tools the content may be the markup (the parser then reads it as literal content)
        assertEquals(-1, refusedAt(Grammar.choice(List.of(foreign)), foreign));
    }

    @Test
    void constrainedContentOrABlockOfCalls() throws Exception {
        ObjectNode schema = (ObjectNode) M.readTree("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}},\"required\":[\"x\"],\"additionalProperties\":false}");
        JsonNode p = M.readTree("{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}},\"required\":[\"q\"]}");
        Grammar g = Grammar.optionalToolCalls(List.of("search"), List.of(p), List.of(false), true, Grammar.jsonSchema(schema));
        assertTrue(refusedAt(g, "Free text") >= 0, "the content is held to its schema");
        for (long seed = 0; seed < 6; seed++) {
            Out o = run(g, 80, seed, 1.0);
            assertTrue(o.eos, o.text);
            assertTrue(validator(schema).validate(M.readTree(o.text)).isEmpty(), o.text);
        }
        Out call = run(g, BLOCK, 200, 3, 1.0);
        assertTrue(call.eos, call.text);
        Parsed parsed = parse(call.text);
        assertEquals(1, parsed.calls().size(), call.text);
        assertEquals("search", parsed.calls().getFirst()[0]);
    }

    @Test
    void anUnsupportedKeywordOfAStrictToolNamesTheTool() throws Exception {
        JsonNode ok = M.readTree("{\"type\":\"object\"}");
        JsonNode bad = M.readTree("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"contentEncoding\":\"base64\"}}}");
        UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class,
                () -> Grammar.optionalToolCalls(List.of("a", "b"), List.of(ok, bad), List.of(true, true), true, null));
        assertEquals("contentEncoding", e.keyword());
        assertEquals(1, e.tool());
        // the same schema on a function that is not strict is not compiled: its arguments are free
        Grammar free = Grammar.optionalToolCalls(List.of("a", "b"), List.of(ok, bad), List.of(true, false), true, null);
        assertEquals(0, free.minBytes());
    }

    /**
     * The {@code </think>} control token (how the model ends its reasoning) is offered inside the reasoning only; in
     * thinking mode a block of free calls may open inside the reasoning too (the parser ends the reasoning there), held
     * to the tools as after it, and the turn may end after it.
     */
    @Test
    void reasoningEndsWithItsControlTokenAndMayOpenABlock() throws Exception {
        int think = -1;
        for (int i = 0; i < TOK.vocabSize(); i++)
            if (TOK.isControl(i) && "</think>".equals(new String(TOK.tokenBytes(i), StandardCharsets.UTF_8))) think = i;
        assertTrue(think >= 0, "the vocabulary has </think> as a control token");
        JsonNode p = M.readTree("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"],\"additionalProperties\":false}");
        Grammar g = Grammar.optionalToolCalls(List.of("count"), List.of(p), List.of(true), false, null).afterThinking();
        TokenConstraint c = g.constraint(TOK);
        assertTrue(Constraint.has(c.allowed(100), think), "inside the reasoning");
        for (int t : TOK.encode("Let me think.")) c.advance(t);
        assertTrue(Constraint.has(c.allowed(100), think));
        c.advance(think);
        assertFalse(Constraint.has(c.allowed(100), think), "not after the reasoning");
        assertTrue(c.complete(), "free content may be empty");
        Grammar json = Grammar.jsonObject();
        assertFalse(Constraint.has(json.constraint(TOK).allowed(100), think), "never outside reasoning");
        assertTrue(Constraint.has(json.afterThinking().constraint(TOK).allowed(100), think));

        String call = "\n<\uFF5CDSML\uFF5Cinvoke name=\"count\">\n<\uFF5CDSML\uFF5Cparameter name=\"n\" string=\"false\">7</\uFF5CDSML\uFF5Cparameter>\n</\uFF5CDSML\uFF5Cinvoke>\n</\uFF5CDSML\uFF5Ctool_calls>";
        assertEquals(-1, refusedAt(g, "I should count." + BLOCK + call), "a block inside the reasoning");
        assertTrue(refusedAt(g, "I should count." + BLOCK + "\n<\uFF5CDSML\uFF5Cinvoke name=\"delete_all\">") >= 0, "held to the tools there too");
        TokenConstraint after = g.constraint(TOK);
        for (int t : TOK.encode("I should count." + BLOCK + call)) after.advance(t);
        assertTrue(after.complete(), "the turn may end after the block");
        Parsed parsed = parse("I should count." + BLOCK + call);
        assertEquals(1, parsed.calls().size());
    }

    @Test
    void ignoreEosOffersTheEndOnlyWhereNothingElseMayFollow() throws Exception {
        Grammar free = Grammar.optionalToolCalls(List.of("f"), List.of(M.readTree("{\"type\":\"object\"}")), List.of(true), true, null);
        assertTrue(Constraint.has(free.constraint(TOK, false).allowed(50), TOK.eosId()));
        assertFalse(Constraint.has(free.constraint(TOK, true).allowed(50), TOK.eosId()), "free text runs on");
        ObjectNode schema = (ObjectNode) M.readTree("{\"type\":\"integer\",\"enum\":[7]}");
        TokenConstraint c = Grammar.jsonSchema(schema).constraint(TOK, true);
        c.advance(TOK.encode("7")[0]);
        assertTrue(Constraint.has(c.allowed(50), TOK.eosId()), "the end where the output can go no further");
    }

    /**
     * With ignore_eos the output runs to max_tokens and ends there complete: the steering keeps no token for the end,
     * so the last token continues an output that may end anywhere, and one that must still close takes its close there.
     */
    @Test
    void ignoreEosSteersToCompleteAtMaxTokensWithoutTheEnd() {
        int letter = TOK.encode("a")[0], dot = TOK.encode(".")[0];
        long[] last = Grammar.regex("[a-z]*").constraint(TOK, true).allowed(1);
        assertTrue(Constraint.has(last, letter), "the last token continues the text");
        assertFalse(Constraint.has(last, TOK.eosId()), "no end before max_tokens");
        TokenConstraint closing = Grammar.regex("[a-z]*\\.").constraint(TOK, true);
        closing.advance(letter);
        long[] close = closing.allowed(1);
        assertTrue(Constraint.has(close, dot), "the close fits in the last token");
        assertFalse(Constraint.has(close, letter), "a letter would leave it open");
        // without ignore_eos the end takes a token of its own
        long[] withEnd = Grammar.regex("[a-z]*").constraint(TOK, false).allowed(1);
        assertTrue(Constraint.has(withEnd, TOK.eosId()));
        assertFalse(Constraint.has(withEnd, letter));
        for (long seed = 0; seed < 20; seed++) {
            Out o = runIgnoringEos(Grammar.regex("[a-z ]{0,200}\\."), 12, seed);
            assertEquals(12, o.tokens(), o.text());
            assertTrue(o.text().endsWith(".") && !o.eos(), o.text());
        }
    }

    /** {@link #run} with the request's ignore_eos (unsteered grammars steered all the same). */
    static Out runIgnoringEos(Grammar g, int maxTokens, long seed) {
        TokenConstraint c = new TokenConstraint(TokenTrie.of(TOK), g.startState(), true, true);
        Sampler s = new Sampler(SamplingParams.sampled(1.0, 64, 1, 0, seed, maxTokens), V, new int[0], TOK.vocabSize());
        SplittableRandom r = new SplittableRandom(seed);
        float[] logits = new float[V];
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        for (int i = 0; i < maxTokens; i++) {
            for (int v = 0; v < V; v++) logits[v] = r.nextFloat() * 8;
            long[] allow = c.allowed(maxTokens - i);
            int tok = s.distribution(logits, 0, allow).sample(s.rng());
            c.advance(tok);
            if (tok == TOK.eosId()) return new Out(bytes.toString(StandardCharsets.UTF_8), true, i + 1);
            bytes.writeBytes(TOK.tokenBytes(tok));
        }
        return new Out(bytes.toString(StandardCharsets.UTF_8), false, maxTokens);
    }

    /** A parameters schema whose type list allows null is refused for a constrained call, saying that is why. */
    @Test
    void aParametersTypeListWithNullSaysWhy() throws Exception {
        JsonNode p = M.readTree("{\"type\":[\"object\",\"null\"],\"properties\":{\"a\":{\"type\":\"string\"}}}");
        UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.toolCall(List.of("f"), List.of(p)));
        assertTrue(e.getMessage().contains("its type [\"object\",\"null\"] allows values that are not an object"), e.getMessage());
        // a list of "object" alone is an object schema
        for (String t : new String[]{"[\"object\"]", "[\"object\",\"object\"]"}) {
            JsonNode only = M.readTree("{\"type\":" + t + ",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}");
            Out o = run(Grammar.toolCall(List.of("f"), List.of(only)), 200, 1, 1.0);
            assertTrue(o.eos, o.text);
            assertTrue(M.readTree(parse(o.text).calls().getFirst()[1]).get("a").isIntegralNumber(), o.text);
        }
    }
}
