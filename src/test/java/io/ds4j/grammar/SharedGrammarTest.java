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
        String schema = "{\"type\":\"object\",\"properties\":{\"shared\":{\"type\":\"integer\"}},\"required\":[\"shared\"]}";
        assertSame(Grammar.jsonSchema(M.readTree(schema)), Grammar.jsonSchema(M.readTree(schema)));
        assertNotSame(Grammar.jsonSchema(M.readTree(schema)), Grammar.jsonSchema(M.readTree(schema.replace("integer", "string"))));
        assertSame(Grammar.regex("shared-[0-9]+"), Grammar.regex("shared-[0-9]+"));
        assertSame(Grammar.choice(List.of("yes", "no")), Grammar.choice(List.of("yes", "no")));
        assertNotSame(Grammar.choice(List.of("yes", "no")), Grammar.choice(List.of("no", "yes")));
        assertSame(Grammar.jsonObject(), Grammar.jsonObject());
        List<JsonNode> params = List.of(M.readTree("{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}"));
        assertSame(Grammar.toolCall(List.of("find"), params), Grammar.toolCall(List.of("find"), params));
        Grammar content = Grammar.regex("shared-[0-9]+");
        assertSame(Grammar.optionalToolCalls(List.of("find"), params, List.of(true), false, content),
                Grammar.optionalToolCalls(List.of("find"), params, List.of(true), false, Grammar.regex("shared-[0-9]+")));
        assertNotSame(Grammar.optionalToolCalls(List.of("find"), params, List.of(true), false, content),
                Grammar.optionalToolCalls(List.of("find"), params, List.of(true), true, content));
        for (int i = 0; i < 2; i++) assertThrows(UnsupportedRegexException.class, () -> Grammar.regex("shared(["));
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
