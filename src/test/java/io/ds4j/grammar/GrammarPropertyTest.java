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
        TokenConstraint c = g.constraint(TOK);
        SamplingParams p = temperature == 0 ? SamplingParams.greedy(maxTokens) : SamplingParams.sampled(temperature, 64, 1, 0, seed, maxTokens);
        Sampler s = new Sampler(p, V, new int[0], TOK.vocabSize());
        SplittableRandom r = new SplittableRandom(seed);
        float[] logits = new float[V], base = new float[V];
        for (int v = 0; v < V; v++) base[v] = r.nextFloat() * 8;
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        for (int i = 0; i < maxTokens; i++) {
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
        for (String kw : List.of("pattern", "format", "minLength", "oneOf", "allOf", "not", "minimum", "patternProperties")) {
            String type = kw.equals("minimum") ? "integer" : "string";
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
}
