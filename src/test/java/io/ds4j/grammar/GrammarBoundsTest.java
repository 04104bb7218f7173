package io.ds4j.grammar;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.ds4j.sampling.Constraint;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Schemas whose alternatives overlap must not multiply the parse states: nested anyOf of equivalent branches stays
 * as cheap per token as one branch, a schema that recurses into itself without consuming input is refused at compile
 * time, and the live-state cap ends a constraint that would still grow past it with {@link GrammarLimitException}.
 * Each test's timeout is what catches a blow-up (without the merging, 30 nested brackets of the first schema take
 * minutes).
 */
class GrammarBoundsTest {
    static final ObjectMapper M = new ObjectMapper();
    static final Tokenizer TOK = Tokenizers.vendored();

    /** Two identical alternatives, each an array of the root: every '[' doubled the states before they were merged. */
    static final String TWO_WAYS = "{\"anyOf\":[{\"$ref\":\"#/$defs/d0\"},{\"$ref\":\"#/$defs/d1\"}],\"$defs\":{"
            + "\"d0\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}},\"d1\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}}}";

    static int token(String text) {
        int[] ids = TOK.encode(text);
        assertEquals(1, ids.length, text + " is one token");
        return ids[0];
    }

    /** Feeds n tokens of text t (one token) through the constraint, asking for the mask before each as generation does. */
    static TokenConstraint nest(String schema, String t, int n, int budget) throws Exception {
        TokenConstraint c = Grammar.jsonSchema(M.readTree(schema)).constraint(TOK);
        int tok = token(t);
        for (int i = 0; i < n; i++) {
            assertTrue(Constraint.has(c.allowed(budget - i), tok), "'" + t + "' allowed at step " + i);
            c.advance(tok);
        }
        return c;
    }

    @Test
    @Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void overlappingAlternativesDoNotMultiply() throws Exception {
        // 2^60 parse stacks without merging; with it, two states per nesting level
        TokenConstraint c = nest(TWO_WAYS, "[", 60, 200);
        assertTrue(c.liveStates() <= 4, "live states after 60 '[': " + c.liveStates());
        // and the output can still be closed: ']' is allowed, and 60 of them complete it
        int close = token("]");
        for (int i = 0; i < 60; i++) {
            assertTrue(Constraint.has(c.allowed(200), close), "']' allowed at depth " + (60 - i));
            c.advance(close);
        }
        assertTrue(c.complete());
        // the double-bracket token of the report nests two levels at a time
        nest(TWO_WAYS, "[[", 40, 200);
    }

    @Test
    @Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void deepNestingStaysCheapPerToken() {
        // 6,000 levels: each level's union is shared by the states of the level above, so a state's hash, distance
        // and comparisons must not follow every path down through the levels (exponential in the depth)
        TokenConstraint c = assertDoesNotThrow(() -> nest(TWO_WAYS, "[[", 3000, 100_000));
        assertTrue(c.liveStates() <= 4, "live states at depth 6000: " + c.liveStates());
    }

    @Test
    @Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void threeOverlappingAlternativesWithObjects() throws Exception {
        String schema = "{\"$defs\":{\"n\":{\"anyOf\":[{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"}},"
                + "{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":3},"
                + "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":\"integer\"}]}}]}},"
                + "\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/n\"}},\"required\":[\"a\"]}";
        TokenConstraint c = Grammar.jsonSchema(M.readTree(schema)).constraint(TOK);
        for (int tok : TOK.encode("{\"a\":")) c.advance(tok);
        int open = token("[");
        for (int i = 0; i < 80; i++) {
            assertTrue(Constraint.has(c.allowed(300), open), "'[' allowed at depth " + i);
            c.advance(open);
        }
        assertTrue(c.liveStates() <= 16, "live states after 80 '[': " + c.liveStates());
    }

    @Test
    void recursionWithoutInputIsRefused() throws Exception {
        for (String s : new String[]{
                "{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"string\"}]}",
                "{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/b\"},{\"type\":\"null\"}]},\"b\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"}]}},"
                        + "\"$ref\":\"#/$defs/a\"}"}) {
            UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(M.readTree(s)), s);
            assertEquals("anyOf", e.keyword(), e.getMessage());
            assertTrue(e.getMessage().contains("refers back to itself"), e.getMessage());
        }
    }

    /**
     * A null minimum or maximum is refused (it was ignored: an unbounded number came out), and a bound of the wrong
     * side says which side is supported (1e15 read as "at or beyond ±999999999999999", which it is).
     */
    @Test
    void nullAndWrongSideBoundsAreNamed() throws Exception {
        for (String k : new String[]{"minimum", "maximum"}) {
            String s = "{\"type\":\"number\",\"" + k + "\":null}";
            UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(M.readTree(s)), s);
            assertEquals(k, e.keyword(), e.getMessage());
            assertTrue(e.getMessage().contains("is null: it must be a number"), e.getMessage());
        }
        UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class,
                () -> Grammar.jsonSchema(M.readTree("{\"type\":\"number\",\"minimum\":1e15}")));
        assertTrue(e.getMessage().startsWith("minimum 1") && e.getMessage().contains("a minimum at or below -999999999999999"),
                e.getMessage());
        e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(M.readTree("{\"type\":\"number\",\"maximum\":-1e15}")));
        assertTrue(e.getMessage().contains("a maximum at or above 999999999999999"), e.getMessage());
        // an integer's bounds are held whatever they are: past the 15 digits integers have here, none is left, which is
        // this server's limit (the schema has values), not a wrong schema
        e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(M.readTree("{\"type\":\"integer\",\"maximum\":-1e15}")));
        assertTrue(!e.invalid() && e.getMessage().contains("leaves no integer of at most 15 digits"), e.getMessage());
        // minimum == maximum: const is named as the way to ask for that one value
        for (String v : new String[]{"999999999999999", "5"}) {
            UnsupportedSchemaException one = assertThrows(UnsupportedSchemaException.class,
                    () -> Grammar.jsonSchema(read("{\"type\":\"number\",\"minimum\":" + v + ",\"maximum\":" + v + "}")));
            assertEquals("minimum " + v + " at '' is not supported (only 0, or a minimum at or below -999999999999999); for the"
                    + " one value minimum and maximum allow, write \"const\": " + v, one.getMessage());
        }
        // ... also where the maximum is the bound refused (a supported minimum: 0, or at or below -999999999999999)
        for (String v : new String[]{"0", "-999999999999999"}) {
            UnsupportedSchemaException one = assertThrows(UnsupportedSchemaException.class,
                    () -> Grammar.jsonSchema(read("{\"type\":\"number\",\"minimum\":" + v + ",\"maximum\":" + v + "}")));
            assertEquals("maximum " + v + " at '' is not supported (only a maximum at or above 999999999999999); for the"
                    + " one value minimum and maximum allow, write \"const\": " + v, one.getMessage());
            // an integer's bounds are held whatever they are: the one value
            Grammar g = Grammar.jsonSchema(read("{\"type\":\"integer\",\"minimum\":" + v + ",\"maximum\":" + v + "}"));
            assertEquals(-1, GrammarPropertyTest.refusedAt(g, v), v);
            assertTrue(GrammarPropertyTest.refusedAt(g, "1") >= 0, v);
        }
        // the supported forms still compile
        Grammar.jsonSchema(M.readTree("{\"type\":\"integer\",\"minimum\":-999999999999999,\"maximum\":999999999999999}"));
        Grammar.jsonSchema(M.readTree("{\"type\":\"number\",\"minimum\":0}"));
    }

    /** A shortest value too long to count is named as such, not as a recursion without a base case. */
    /** The server's reader, which keeps a number's text (1e-400 is no 0, 1e999999999 no Infinity). */
    static JsonNode read(String json) throws Exception {
        return io.ds4j.json.Json.BODY_READER.readTree(json);
    }

    /**
     * A minimum or maximum on a node without a type is refused naming it (it was dropped: {"minimum": 0} produced
     * -99999999999999999999999), in an anyOf and a tool's parameters too; next to enum or const it still filters them.
     */
    @Test
    void aBoundWithoutANumberTypeIsRefused() throws Exception {
        String[][] cases = {{"{\"maximum\":999999999999999}", "maximum", ""}, {"{\"minimum\":0}", "minimum", ""},
                {"{\"maximum\":1e-400}", "maximum", ""}, {"{\"anyOf\":[{\"type\":\"string\"},{\"minimum\":0}]}", "minimum", "/anyOf/1"},
                {"{\"type\":\"object\",\"properties\":{\"x\":{\"maximum\":5,\"properties\":{}}}}", "maximum", "/properties/x"}};
        for (String[] c : cases) {
            UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(read(c[0])), c[0]);
            assertEquals(c[1], e.keyword(), e.getMessage());
            assertEquals(c[1] + " at '" + c[2] + "' without type number or integer is not supported: add \"type\": \"number\""
                    + " or \"integer\" next to it", e.getMessage());
        }
        JsonNode params = read("{\"type\":\"object\",\"properties\":{\"n\":{\"minimum\":0}}}");
        UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.toolCall(java.util.List.of("f"),
                java.util.List.of(params)));
        assertEquals("minimum", e.keyword(), e.getMessage());
        // enum and const keep their values that satisfy the bound
        Grammar.jsonSchema(read("{\"enum\":[1,5],\"minimum\":2}"));
        assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(read("{\"const\":1,\"minimum\":2}")));
    }

    /**
     * A bound whose exponent is too large to compare is a 400 naming it, in a tool's parameters too (BigDecimal threw
     * "BigInteger would overflow supported range" or "Underflow": a 500).
     */
    @Test
    void aBoundWithAHugeExponentIsNamed() throws Exception {
        String[][] cases = {{"maximum", "1e999999999"}, {"minimum", "-1e999999999"}, {"minimum", "-1e2147483648"},
                {"maximum", "1e2147483648"}, {"maximum", "999999999999999.5e999999999"}};
        for (String[] c : cases) {
            for (String type : new String[]{"number", "integer"}) {
                String s = "{\"type\":\"" + type + "\",\"" + c[0] + "\":" + c[1] + "}";
                UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(read(s)), s);
                assertEquals(c[0], e.keyword(), e.getMessage());
                assertEquals(c[0] + " " + c[1] + " at '' is too large to compare: write a bound below 1e1000 in magnitude",
                        e.getMessage());
            }
        }
        JsonNode params = read("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"maximum\":1e999999999}}}");
        UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.toolCall(java.util.List.of("f"),
                java.util.List.of(params)));
        assertEquals("maximum", e.keyword(), e.getMessage());
        // next to an enum too, where the values are compared with it
        e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(read("{\"enum\":[1],\"minimum\":-1e2147483648}")));
        assertEquals("minimum", e.keyword(), e.getMessage());
        // a wide bound within that still compiles
        Grammar.jsonSchema(read("{\"type\":\"number\",\"minimum\":-1e999,\"maximum\":9.99e999}"));
    }

    /**
     * An integer's bound of tiny magnitude rounds to 0 or ±1 at once: rescaling 1e-300000000 to an integer built a power
     * of ten with 3e8 digits (minutes on an event loop), and 1e-999999999 threw an ArithmeticException (a 500).
     */
    @Test
    void anIntegerBoundOfTinyMagnitudeRoundsAtOnce() throws Exception {
        String[][] cases = {{"minimum", "1e-999999999", "1", "0"}, {"minimum", "-1e-999999999", "0", "-1"},
                {"maximum", "1e-999999999", "0", "1"}, {"maximum", "-1e-999999999", "-1", "0"},
                {"exclusiveMinimum", "1e-300000000", "1", "0"}, {"exclusiveMinimum", "-1e-300000000", "0", "-1"},
                {"exclusiveMaximum", "1e-300000000", "0", "1"}, {"exclusiveMaximum", "-1e-300000000", "-1", "0"}};
        for (String[] c : cases) {
            String schema = "{\"type\":\"integer\",\"" + c[0] + "\":" + c[1] + "}";
            long t0 = System.nanoTime();
            Grammar g = Grammar.jsonSchema(read(schema));
            assertTrue(System.nanoTime() - t0 < 5_000_000_000L, schema + " took " + (System.nanoTime() - t0) / 1e9 + " s");
            assertTrue(RegexGrammarTest.matches(g, c[2]), schema + " admits " + c[2]);
            assertFalse(RegexGrammarTest.matches(g, c[3]), schema + " refuses " + c[3]);
        }
    }

    @Test
    void aHugeMinItemsIsNamedNotTakenForEndlessRecursion() throws Exception {
        UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class,
                () -> Grammar.jsonSchema(M.readTree("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2000000000}")));
        assertEquals("minItems", e.keyword(), e.getMessage());
        assertEquals("minItems 2000000000 at '' makes the shortest value of the schema longer than 536,870,912 bytes, more than any output can hold",
                e.getMessage());
        // nested: the array whose own shortest value is past the limit, where it is
        e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(M.readTree("{\"type\":\"object\",\"properties\":{\"m\":"
                + "{\"type\":\"array\",\"minItems\":30000,\"items\":{\"type\":\"array\",\"items\":{\"type\":\"null\"},\"minItems\":30000}}},"
                + "\"required\":[\"m\"]}")));
        assertEquals("/properties/m", e.path(), e.getMessage());
        assertTrue(e.getMessage().startsWith("minItems 30000 at '/properties/m' makes"), e.getMessage());
        // lengths that only add up past it across properties
        e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(M.readTree("{\"type\":\"object\",\"properties\":{"
                + "\"a\":{\"type\":\"array\",\"minItems\":200000000},\"b\":{\"type\":\"array\",\"minItems\":200000000}},"
                + "\"required\":[\"a\",\"b\"]}")));
        assertEquals("minItems", e.keyword(), e.getMessage());
        assertTrue(e.getMessage().contains("longer than 536,870,912 bytes"), e.getMessage());
        // a required recursion still says so
        e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(M.readTree(
                "{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}")));
        assertTrue(e.getMessage().contains("a required recursion without a base case"), e.getMessage());
        // and a large but countable minItems is taken: 100,000 integers and their commas
        assertEquals(2 + 100_000 + 99_999, Grammar.jsonSchema(M.readTree(
                "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":100000}")).minBytes());
    }

    /**
     * A count past an int is named too large (it was "must be a non-negative integer", which 2147483648 is); an
     * integral number written with a fraction or exponent is the integer; a fraction or a negative is still no count.
     */
    @Test
    void aCountPastAnIntIsTooLargeAndTwoPointZeroIsTwo() throws Exception {
        for (String f : new String[]{"minItems", "maxItems"}) {
            for (String big : new String[]{"2147483648", "9007199254740992", "1e20", "1" + "0".repeat(60)}) {
                UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class,
                        () -> Grammar.jsonSchema(io.ds4j.json.Json.read(("{\"type\":\"array\",\"" + f + "\":" + big + "}").getBytes())));
                assertEquals(f, e.keyword(), e.getMessage());
                String shown = big.length() > 40 ? big.substring(0, 40) + "..." : big;
                assertEquals(f + " " + shown + " at '' is too large (at most 2147483647)", e.getMessage());
            }
            for (String bad : new String[]{"-1", "2.5", "1e-3", "\"2\""}) {
                UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class,
                        () -> Grammar.jsonSchema(io.ds4j.json.Json.read(("{\"type\":\"array\",\"" + f + "\":" + bad + "}").getBytes())));
                assertEquals(f + " at '' must be a non-negative integer, got " + bad, e.getMessage());
            }
        }
        // 2.0 and 2e0 are the integer 2: two nulls at least and at most
        for (String two : new String[]{"2.0", "2e0", "20e-1"}) {
            Grammar g = Grammar.jsonSchema(io.ds4j.json.Json.read(("{\"type\":\"array\",\"items\":{\"type\":\"null\"},\"minItems\":"
                    + two + ",\"maxItems\":" + two + "}").getBytes()));
            assertEquals("[null,null]".length(), g.minBytes(), two);
            GState s = States.value(SchemaCompiler.compile(io.ds4j.json.Json.read(("{\"type\":\"array\",\"items\":{\"type\":\"null\"},"
                    + "\"maxItems\":" + two + "}").getBytes())), States.End.INSTANCE);
            for (char c : "[null,null".toCharArray()) s = s.next(c);
            assertNull(s.next(','), "a third item under maxItems " + two);
        }
    }

    /**
     * An array whose shortest value is past counting is the long way out of an anyOf: its distance once wrapped
     * negative (minItems 2147483647 as an int product), and a short budget then opened the array instead of null.
     */
    @Test
    void aHugeMinItemsNextToNullLeavesNullTheShortestWay() throws Exception {
        for (String items : new String[]{"", ",\"items\":{\"type\":\"integer\"}", ",\"items\":{\"type\":\"string\"}"}) {
            String schema = "{\"anyOf\":[{\"type\":\"array\",\"minItems\":2147483647" + items + "},{\"type\":\"null\"}]}";
            Grammar g = Grammar.jsonSchema(M.readTree(schema));
            assertEquals(4, g.minBytes(), schema);
            // with room for little more than null, '[' is not offered and null is
            TokenConstraint c = g.constraint(TOK);
            long[] mask = c.allowed(8);
            assertFalse(Constraint.has(mask, token("[")), schema);
            assertTrue(Constraint.has(mask, token("null")), schema);
            // inside the array (were it chosen), the distance saturates rather than going negative
            GState in = States.value(SchemaCompiler.compile(M.readTree(schema)), States.End.INSTANCE).next('[');
            assertEquals(GState.FAR, in.dist(), schema);
            GState item = items.contains("string") ? in.next('"').next('"') : in.next('1');
            assertEquals(GState.FAR, item.dist(), schema);
        }
    }

    @Test
    @Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void pastTheLimitAStepFailsAndTheStateStays() throws Exception {
        // k arrays (within the limit), each of one of two objects: after "[{" all 2k objects are live
        int k = Grammar.MAX_LIVE_STATES / 2 + 1;
        StringBuilder s = new StringBuilder("{\"anyOf\":[");
        for (int i = 0; i < k; i++) {
            s.append(i > 0 ? "," : "").append("{\"type\":\"array\",\"items\":{\"anyOf\":[");
            for (int j = 0; j < 2; j++)
                s.append(j > 0 ? "," : "").append("{\"type\":\"object\",\"properties\":{\"a").append(i).append('_').append(j)
                        .append("\":{\"type\":\"integer\"}},\"required\":[\"a").append(i).append('_').append(j).append("\"]}");
            s.append("]}}");
        }
        s.append("]}");
        TokenConstraint c = Grammar.jsonSchema(M.readTree(s.toString())).constraint(TOK);
        assertEquals(k, c.liveStates());
        c.advance(token("["));
        int brace = token("{");
        GrammarLimitException e = assertThrows(GrammarLimitException.class, () -> {
            c.allowed(100);
            c.advance(brace);
        });
        assertEquals(2 * k, e.live(), e.getMessage());
        assertTrue(e.getMessage().contains(String.valueOf(Grammar.MAX_LIVE_STATES)), e.getMessage());
        assertThrows(GrammarLimitException.class, () -> c.advance(brace));
        // nothing was committed: the state after '[' is still there and can close
        assertEquals(k, c.liveStates());
        c.advance(token("]"));
        assertTrue(c.complete());
    }

    @Test
    void tooManyAlternativesAtOnceAreRefused() throws Exception {
        StringBuilder s = new StringBuilder("{\"anyOf\":[");
        int n = Grammar.MAX_LIVE_STATES + 1;
        for (int i = 0; i < n; i++) {
            if (i > 0) s.append(',');
            s.append("{\"type\":\"object\",\"properties\":{\"k").append(i).append("\":{\"type\":\"integer\"}},\"required\":[\"k").append(i).append("\"]}");
        }
        s.append("]}");
        JsonNode schema = M.readTree(s.toString());
        UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(schema));
        assertEquals("anyOf", e.keyword(), e.getMessage());
        assertTrue(e.getMessage().contains(String.valueOf(n)) && e.getMessage().contains(String.valueOf(Grammar.MAX_LIVE_STATES)),
                e.getMessage());
    }
}
