package io.ds4j.grammar;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Requests that send the same constraint share its compiled grammar ({@link Grammar}) and the token masks of its states
 * ({@link TokenConstraint}): asked again, a schema, pattern, choice list or tool list gives the grammar compiled before,
 * and a second request's mask of a state the first met is a cache hit; masks with and without ignore_eos are kept
 * apart, and a refused constraint is refused every time.
 */
class SharedGrammarTest {
    static final ObjectMapper M = new ObjectMapper();

    @Test
    void theSameConstraintIsTheSameGrammar() throws Exception {
        Grammar.forgetCompiled();  // grammars compiled by the tests run before this one may fill the cache
        String schema = "{\"type\":\"object\",\"properties\":{\"shared\":{\"type\":\"integer\"}},\"required\":[\"shared\"]}";
        assertSame(Grammar.jsonSchema(M.readTree(schema)), Grammar.jsonSchema(M.readTree(schema)));
        assertNotSame(Grammar.jsonSchema(M.readTree(schema)), Grammar.jsonSchema(M.readTree(schema.replace("integer", "string"))));
        assertSame(Grammar.regex("shared-[0-9]+"), Grammar.regex("shared-[0-9]+"));
        assertSame(Grammar.choice(List.of("yes", "no")), Grammar.choice(List.of("yes", "no")));
        assertNotSame(Grammar.choice(List.of("yes", "no")), Grammar.choice(List.of("no", "yes")));
        assertSame(Grammar.jsonObject(), Grammar.jsonObject());
        // JSON without whitespace between its tokens is another grammar of the same schema
        assertSame(Grammar.jsonSchema(M.readTree(schema), true), Grammar.jsonSchema(M.readTree(schema), true));
        assertNotSame(Grammar.jsonSchema(M.readTree(schema), true), Grammar.jsonSchema(M.readTree(schema)));
        assertNotSame(Grammar.jsonObject(true), Grammar.jsonObject());
        List<JsonNode> params = List.of(M.readTree("{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}"));
        assertSame(Grammar.toolCall(List.of("find"), params), Grammar.toolCall(List.of("find"), params));
        Grammar content = Grammar.regex("shared-[0-9]+");
        assertSame(Grammar.optionalToolCalls(List.of("find"), params, List.of(true), false, content),
                Grammar.optionalToolCalls(List.of("find"), params, List.of(true), false, Grammar.regex("shared-[0-9]+")));
        assertNotSame(Grammar.optionalToolCalls(List.of("find"), params, List.of(true), false, content),
                Grammar.optionalToolCalls(List.of("find"), params, List.of(true), true, content));
        for (int i = 0; i < 2; i++) assertThrows(UnsupportedRegexException.class, () -> Grammar.regex("shared(["));
    }

    /**
     * Numbers count as written: schemas whose numbers differ only in how they are written ({@code 1e2} / {@code 100.0},
     * {@code 0} / {@code -0}) are different grammars, each writing its own const, and a const its type refuses is
     * refused even after a schema with an acceptable one was compiled (they were one cache key when the key was
     * Jackson's text of the tree).
     */
    @Test
    void numbersAreKeyedAsWritten() throws Exception {
        for (String[] pair : new String[][]{{"1e2", "100.0"}, {"-0", "0"}, {"1e-400", "0.0"}}) {
            for (String v : pair) {
                Grammar g = Grammar.jsonSchema(read("{\"const\":" + v + "}"));
                assertTrue(RegexGrammarTest.matches(g, v), v + " in the grammar of its own schema");
                for (String other : pair)
                    if (!other.equals(v)) assertFalse(RegexGrammarTest.matches(g, other), other + " in the grammar of " + v);
            }
        }
        Grammar.jsonSchema(read("{\"type\":\"integer\",\"const\":1.0}"));
        assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(read("{\"type\":\"integer\",\"const\":1.0000000000000000001}")));
        List<JsonNode> a = List.of(read("{\"type\":\"object\",\"properties\":{\"a\":{\"const\":1e2}}}"));
        List<JsonNode> b = List.of(read("{\"type\":\"object\",\"properties\":{\"a\":{\"const\":100.0}}}"));
        assertNotSame(Grammar.toolCall(List.of("f"), a), Grammar.toolCall(List.of("f"), b));
    }

    /** A request body's JSON, its numbers' text kept as the server's reader keeps it. */
    static JsonNode read(String json) throws Exception {
        return io.ds4j.json.Json.read(json.getBytes(java.nio.charset.StandardCharsets.UTF_8));
    }

    @Test
    void aSecondRequestFindsTheMasksOfTheFirst() throws Exception {
        String schema = "{\"type\":\"object\",\"properties\":{\"masks\":{\"type\":\"boolean\"}},\"required\":[\"masks\"]}";
        TokenConstraint first = Grammar.jsonSchema(M.readTree(schema)).constraint(GrammarPropertyTest.TOK);
        long[] a = first.allowed(100);
        assertEquals(0, first.cacheHits(), "a state no request met before");
        TokenConstraint second = Grammar.jsonSchema(M.readTree(schema)).constraint(GrammarPropertyTest.TOK);
        assertSame(a, second.allowed(100));
        assertEquals(1, second.cacheHits());
        // with ignore_eos the end is offered elsewhere: its own mask
        TokenConstraint ignoring = Grammar.jsonSchema(M.readTree(schema)).constraint(GrammarPropertyTest.TOK, true);
        ignoring.allowed(100);
        assertEquals(0, ignoring.cacheHits());
        // and after the same tokens the same state: the whole output's masks are shared
        for (int t : GrammarPropertyTest.TOK.encode("{\"masks\": ")) {
            first.advance(t);
            second.advance(t);
        }
        long[] b = first.allowed(100);
        assertSame(b, second.allowed(100));
    }
}
