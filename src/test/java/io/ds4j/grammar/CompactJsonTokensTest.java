package io.ds4j.grammar;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.sampling.Constraint;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Compact JSON (vLLM's {@code disable_any_whitespace}, {@link States.Compact}) through the token masks: walks with the
 * real tokenizer over schemas with anyOf, recursion, enums and consts holding spaces and escaped quotes, formats and
 * patterns, never write whitespace between tokens and end in values the schema takes; compact serialisations are taken;
 * inside a length-bounded string the masks are shared as for plain JSON (the string's shortcuts see through the
 * wrapper: {@code TokenConstraint.inString}). Written by a breaker of the feature.
 */
class CompactJsonTokensTest {
    static final ObjectMapper M = new ObjectMapper();

    static String outside(String s) {
        return s.replaceAll("\"(\\\\.|[^\"\\\\])*\"?", "\"\"");
    }

    static final List<String> SCHEMAS = List.of(
            "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\"}},\"required\":[\"a\"]},{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}},{\"type\":\"null\"},{\"type\":\"number\"}]}",
            "{\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}},\"required\":[\"v\",\"kids\"]}},\"$ref\":\"#/$defs/t\"}",
            "{\"enum\":[\"a \\\"b\\\" c\",{\"k\":[1,2],\"z\":\"x y\"},\"x\\\\\",[true,null,1.5e3]]}",
            "{\"type\":\"object\",\"properties\":{\"c\":{\"const\":{\"a b\":\"c d\",\"e\":[1,{\"f\":null}]}},\"p\":{\"type\":\"string\",\"pattern\":\"^[a-z \\\"]+$\"},\"d\":{\"type\":\"string\",\"format\":\"date-time\"},\"m\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":9}},\"required\":[\"c\",\"p\",\"d\",\"m\"]}",
            "{}",
            "{\"type\":\"object\",\"properties\":{\"a\\\"b\":{\"type\":\"boolean\"},\"c\\\\\":{\"type\":\"string\"},\"sp ace\":{\"type\":\"array\",\"items\":{}}},\"required\":[\"a\\\"b\",\"c\\\\\",\"sp ace\"]}",
            "{\"type\":\"object\"}",
            "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":2,\"maxItems\":4}");

    /** Token-level random walks (the real tokenizer, the steered constraint) on compact grammars. */
    @Test
    void tokenWalksOnAssortedSchemas() throws Exception {
        int n = 0;
        for (String text : SCHEMAS) {
            JsonNode schema = M.readTree(text);
            Grammar g = Grammar.jsonSchema(schema, true);
            for (long seed = 0; seed < 12; seed++) {
                GrammarPropertyTest.Out o = GrammarPropertyTest.run(g, 200, seed, seed % 2 == 0 ? 1.0 : 2.0);
                assertFalse(outside(o.text()).matches("(?s).*\\s.*"), text + " -> " + o.text());
                if (o.eos()) {
                    JsonNode v = M.readTree(o.text());
                    assertTrue(GrammarPropertyTest.validator(schema).validate(v).isEmpty(), text + " -> " + o.text());
                    assertTrue(M.writeValueAsString(v).length() <= o.text().length(), o.text());
                    n++;
                }
            }
        }
        for (long seed = 0; seed < 12; seed++) {
            GrammarPropertyTest.Out o = GrammarPropertyTest.run(Grammar.jsonObject(true), 200, seed, 2.0);
            assertFalse(outside(o.text()).matches("(?s).*\\s.*"), o.text());
        }
        assertTrue(n > 0, "no walk ended in a complete value");
    }

    /** Random schemas as the property test makes them, compact. */
    @Test
    void randomSchemasCompact() throws Exception {
        SplittableRandom r = new SplittableRandom(23);
        for (int trial = 0; trial < 60; trial++) {
            ObjectNode schema = RandomSchemas.schema(r);
            Grammar g = Grammar.jsonSchema(schema, true);
            int budget = 24 + r.nextInt(160);
            if (g.minBytes() + 1 > budget) continue;
            GrammarPropertyTest.Out o = GrammarPropertyTest.run(g, budget, r.nextLong(), trial % 3 == 0 ? 0 : 1.0);
            assertTrue(o.eos(), schema + " -> " + o.text());
            assertFalse(outside(o.text()).matches("(?s).*\\s.*"), schema + " -> " + o.text());
            assertTrue(GrammarPropertyTest.validator(schema).validate(M.readTree(o.text())).isEmpty(), o.text());
        }
    }

    /** Compact JSON of any valid value (as Jackson writes it) is accepted by the compact grammar. */
    @Test
    void compactSerialisationsAccepted() throws Exception {
        String[][] cases = {
                {SCHEMAS.get(2), "\"a \\\"b\\\" c\"", "{\"k\":[1,2],\"z\":\"x y\"}", "\"x\\\\\"", "[true,null,1.5e3]"},
                {SCHEMAS.get(5), "{\"a\\\"b\":true,\"c\\\\\":\"\\u0022 \\\\\",\"sp ace\":[{\"q\":[ ]}]}"},
                {SCHEMAS.get(5), "{\"a\\\"b\":true,\"c\\\\\":\"\\u0022 \\\\\",\"sp ace\":[{\"q\":[]},\"\\\\\\\"\",-0.5E+2]}"},
                {"{\"type\":\"string\",\"pattern\":\"^a\\\\\\\\ b$\"}", "\"a\\\\ b\""},
        };
        for (String[] c : cases) {
            GState s = Grammar.jsonSchema(M.readTree(c[0]), true).startState();
            GState p = Grammar.jsonSchema(M.readTree(c[0]), false).startState();
            for (int i = 1; i < c.length; i++) {
                boolean compactText = !outside(c[i]).matches("(?s).*\\s.*");
                assertEquals(NumberGrammarTest.accepts(p, c[i]) && compactText, NumberGrammarTest.accepts(s, c[i]), c[0] + " : " + c[i]);
            }
        }
    }

    /**
     * A string held to a length: far from its bounds its masks are shared as a plain string's are, compact or not
     * (StrOf.plainAlike and the string's pure tokens, seen through the wrapper by TokenConstraint.inString; before
     * that, a compact string's every mask was a full vocabulary walk, never cached).
     */
    @Test
    void masksInsideALengthBoundedStringAreShared() throws Exception {
        for (boolean compact : new boolean[]{false, true}) {
            String schema = "{\"type\":\"object\",\"properties\":{\"s" + compact + "\":{\"type\":\"string\",\"maxLength\":4000}},\"required\":[\"s" + compact + "\"]}";
            Grammar g = Grammar.jsonSchema(M.readTree(schema), compact);
            TokenConstraint c = g.constraint(GrammarPropertyTest.TOK);
            for (int t : GrammarPropertyTest.TOK.encode("{\"s" + compact + "\":\"")) {
                c.allowed(10000);
                c.advance(t);
            }
            int word = GrammarPropertyTest.TOK.encode(" hello")[0];
            for (int i = 0; i < 60; i++) {
                assertTrue(Constraint.has(c.allowed(10000), word));
                c.advance(word);
            }
            assertTrue(c.cacheHits() >= 50, "compact=" + compact + ": cache hits " + c.cacheHits() + " of " + c.maskCalls());
        }
    }
}
