package io.ds4j.grammar;

import com.fasterxml.jackson.databind.JsonNode;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;

import static org.junit.jupiter.api.Assertions.*;

/**
 * enum and const: a literal is produced as the schema writes it (numbers by their text, read as the server reads a
 * request), and only where it also satisfies the other keywords of its node.
 */
class SchemaLiteralsTest {
    static final Tokenizer TOK = Tokenizers.vendored();

    /** A schema read as the server reads a request body, numbers keeping their text. */
    static JsonNode schema(String json) throws Exception {
        return io.ds4j.json.Json.read(json.getBytes(StandardCharsets.UTF_8));
    }

    static Grammar grammar(String json) throws Exception {
        return Grammar.jsonSchema(schema(json));
    }

    /** Whether the grammar takes text as a complete output. */
    static boolean accepts(Grammar g, String text) {
        TokenConstraint c = g.constraint(TOK);
        try {
            for (int t : TOK.encode(text)) c.advance(t);
        } catch (IllegalStateException e) {
            return false;
        }
        return c.complete();
    }

    @Test
    void numbersAreProducedAsWritten() throws Exception {
        Grammar tiny = grammar("{\"enum\":[1e-400]}");
        assertTrue(accepts(tiny, "1e-400"));
        assertFalse(accepts(tiny, "0.0"));
        Grammar hundred = grammar("{\"const\":1e2}");
        assertTrue(accepts(hundred, "1e2"));
        assertFalse(accepts(hundred, "100.0"));
        assertTrue(accepts(grammar("{\"const\":5}"), "5"));
        assertTrue(accepts(grammar("{\"const\":-0}"), "-0"));
        assertTrue(accepts(grammar("{\"const\":2.50}"), "2.50"));
        // inside arrays and objects too
        Grammar nested = grammar("{\"const\":{\"a\":[1E+2,0.10]}}");
        assertTrue(accepts(nested, "{\"a\":[1E+2,0.10]}"));
        assertFalse(accepts(nested, "{\"a\":[100.0,0.1]}"));
    }

    @Test
    void aNumberWhoseTextIsLostIsRefusedNotProducedAsInfinity() throws Exception {
        // another reader's tree: 1e400 is an infinite double, with nothing to write it as
        JsonNode s = new com.fasterxml.jackson.databind.ObjectMapper().readTree("{\"enum\":[1e400]}");
        UnsupportedSchemaException e = assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(s));
        assertTrue(e.getMessage().contains("beyond the double range"), e.getMessage());
    }

    /**
     * A number past the double range is refused, not produced as written (1e400 was, and every client reads it as
     * Infinity); an integer past 2^53 - 1 where only an integer is valid is refused too (JavaScript reads
     * 9007199254740993 as ...992), as the number grammar never produces one.
     */
    @Test
    void literalsClientsCannotReadAreRefused() throws Exception {
        for (String[] c : new String[][]{{"{\"enum\":[1e400]}", "1e400", "enum"}, {"{\"const\":-1E+309}", "-1E+309", "const"},
                {"{\"const\":{\"a\":[1,1e99999999999]}}", "1e99999999999", "const"}, {"{\"enum\":[1,2e308]}", "2e308", "enum"}}) {
            UnsupportedSchemaException e = refused(c[0]);
            assertEquals(c[2], e.keyword(), c[0]);
            assertEquals("the number " + c[1] + " in the " + c[2] + " is beyond the double range (clients read it as"
                    + " Infinity); write a number within \u00b11.7976931348623157e308", e.problem(), c[0]);
        }
        for (String s : new String[]{"{\"type\":\"integer\",\"enum\":[1,9007199254740993]}", "{\"type\":\"integer\",\"const\":-9007199254740992}",
                "{\"type\":[\"integer\",\"null\"],\"const\":1e16}"}) {
            UnsupportedSchemaException e = refused(s);
            assertEquals("type", e.keyword(), s);
            assertTrue(e.problem().contains("is past 2^53 - 1 (9007199254740991), which JavaScript clients cannot read exactly"), e.problem());
        }
        // nested: the property's type decides, and its path is named
        assertEquals("/properties/a", refused("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                + "\"const\":{\"a\":9007199254740993}}").path());
        // the edges are taken: the largest finite double as written, 2^53 - 1 as an integer, and a large one under type number
        assertTrue(accepts(grammar("{\"const\":1.7976931348623157e308}"), "1.7976931348623157e308"));
        assertTrue(accepts(grammar("{\"const\":1e-400}"), "1e-400"));
        assertTrue(accepts(grammar("{\"type\":\"integer\",\"enum\":[9007199254740991,-9007199254740991]}"), "-9007199254740991"));
        assertTrue(accepts(grammar("{\"type\":\"number\",\"const\":9007199254740993}"), "9007199254740993"));
    }

    static UnsupportedSchemaException refused(String json) throws Exception {
        JsonNode s = schema(json);
        return assertThrows(UnsupportedSchemaException.class, () -> Grammar.jsonSchema(s), json);
    }

    /** A $ref that does not resolve is named where it is written (its pointer names no node). */
    @Test
    void anUnresolvedReferenceIsNamedWhereItIsWritten() throws Exception {
        UnsupportedSchemaException e = refused("{\"$ref\":\"#/$defs/nope\"}");
        assertEquals("$ref", e.keyword());
        assertEquals("", e.path());
        assertEquals("$ref \"#/$defs/nope\" does not resolve", e.problem());
        e = refused("{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/definitions/x\"}},\"required\":[\"a\"]}");
        assertEquals("/properties/a", e.path());
        assertEquals("$ref \"#/definitions/x\" does not resolve", e.problem());
        // a property name with '/' or '~' is one step of the pointer (escaped), not two
        e = refused("{\"type\":\"object\",\"properties\":{\"a/b~c\":{\"$ref\":\"#/$defs/nope\"}},\"required\":[\"a/b~c\"]}");
        assertEquals("/properties/a~1b~0c", e.path());
    }

    /**
     * A definition nothing refers to is checked as a used one is: a dangling $ref, or a keyword outside the subset, in
     * it is refused with the error the same definition gives once a $ref reaches it.
     */
    @Test
    void anUnusedDefinitionIsCheckedAsAUsedOne() throws Exception {
        String bad = "{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/Missing\"}}}";
        String unused = "{\"type\":\"string\",\"$defs\":{\"Unused\":" + bad + "}}";
        String used = "{\"$ref\":\"#/$defs/Unused\",\"$defs\":{\"Unused\":" + bad + "}}";
        UnsupportedSchemaException u = refused(unused), r = refused(used);
        assertEquals("$ref", u.keyword());
        assertEquals("/$defs/Unused/properties/x", u.path());
        assertEquals("$ref \"#/$defs/Missing\" at '/$defs/Unused/properties/x' does not resolve", u.getMessage());
        assertEquals(r.getMessage(), u.getMessage());
        // under definitions, nested in another definition, and a keyword the compiler refuses
        u = refused("{\"type\":\"string\",\"definitions\":{\"A\":{\"type\":\"string\",\"$defs\":{\"a/b\":"
                + "{\"type\":\"string\",\"contentEncoding\":\"base64\"}}}}}");
        assertEquals("contentEncoding", u.keyword());
        assertEquals("/definitions/A/$defs/a~1b", u.path());
        // a $defs that holds no named schemas
        assertEquals("$defs at '' must be an object of named schemas", refused("{\"type\":\"string\",\"$defs\":[]}").getMessage());
        // unused definitions that are fine change nothing
        assertTrue(accepts(grammar("{\"type\":\"string\",\"$defs\":{\"N\":{\"type\":\"integer\"},"
                + "\"R\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/R\"}}}}"), "\"hi\""));
    }

    /** The tester's cases: each produced a value its node's type forbids; no value satisfies them, so they are refused. */
    @Test
    void aLiteralThatBreaksItsNodesTypeIsRefused() throws Exception {
        UnsupportedSchemaException e = refused("{\"type\":\"integer\",\"enum\":[\"a\"]}");
        assertEquals("enum", e.keyword());
        assertEquals("", e.path());
        assertEquals("no value satisfies the schema: none of its enum values is valid for 'type'", e.problem());
        e = refused("{\"type\":\"string\",\"const\":5}");
        assertEquals("const", e.keyword());
        assertEquals("no value satisfies the schema: its const is not valid for 'type'", e.problem());
        refused("{\"type\":\"object\",\"const\":5}");
        e = refused("{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"const\":[1]}");
        assertEquals("no value satisfies the schema: its const is not valid for 'items'", e.problem());
        // the keywords named are those that alone rule out every value, else all of them, together
        assertEquals("no value satisfies the schema: none of its enum values is valid for 'maximum'",
                refused("{\"type\":\"number\",\"enum\":[5],\"maximum\":1}").problem());
        assertEquals("no value satisfies the schema: none of its enum values is valid for 'type', 'maximum' together",
                refused("{\"type\":\"integer\",\"maximum\":0,\"enum\":[1,\"a\"]}").problem());
        e = refused("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"boolean\",\"enum\":[0,1]}}}");
        assertEquals("/properties/x", e.path());
        // 1e400 is no integer as the server reads integers (its double is infinite), and const must be in enum too
        refused("{\"type\":\"integer\",\"const\":1e400}");
        refused("{\"const\":\"a\",\"enum\":[\"b\"]}");
    }

    @Test
    void onlyTheValuesThatSatisfyTheWholeNodeAreProduced() throws Exception {
        Grammar ints = grammar("{\"type\":\"integer\",\"enum\":[\"a\",1,2.5,1e2,1.0,1e-400]}");
        for (String ok : new String[]{"1", "1e2", "1.0"}) assertTrue(accepts(ints, ok), ok);
        for (String no : new String[]{"\"a\"", "2.5", "1e-400"}) assertFalse(accepts(ints, no), no);
        Grammar list = grammar("{\"type\":[\"string\",\"null\"],\"enum\":[\"a\",null,3]}");
        assertTrue(accepts(list, "\"a\"") && accepts(list, "null"));
        assertFalse(accepts(list, "3"));
        assertTrue(accepts(grammar("{\"const\":\"b\",\"enum\":[\"a\",\"b\"]}"), "\"b\""));
        // any bound next to an enum (it is checked exactly here, not by the number grammar's few supported bounds)
        Grammar min = grammar("{\"type\":\"number\",\"minimum\":3,\"maximum\":5,\"enum\":[1,3,5,5.0000000000000000001]}");
        assertTrue(accepts(min, "3") && accepts(min, "5"));
        assertFalse(accepts(min, "1") || accepts(min, "5.0000000000000000001"));
        Grammar obj = grammar("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],"
                + "\"additionalProperties\":false,\"enum\":[{\"a\":1},{\"a\":\"x\"},{},{\"a\":1,\"b\":2}]}");
        assertTrue(accepts(obj, "{\"a\":1}"));
        for (String no : new String[]{"{\"a\":\"x\"}", "{}", "{\"a\":1,\"b\":2}"}) assertFalse(accepts(obj, no), no);
        Grammar ref = grammar("{\"$defs\":{\"n\":{\"type\":\"integer\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},"
                + "\"maxItems\":2,\"enum\":[[1],[\"x\"],[1,2,3]]}");
        assertTrue(accepts(ref, "[1]"));
        assertFalse(accepts(ref, "[\"x\"]") || accepts(ref, "[1,2,3]"));
    }

    /** The number grammar's bounds are judged and named as written: 1e-400 is no 0, 1e400 is not "Infinity". */
    @Test
    void boundsAreJudgedAndNamedAsWritten() throws Exception {
        UnsupportedSchemaException e = refused("{\"type\":\"integer\",\"minimum\":1e400}");
        assertEquals("minimum", e.keyword());
        assertTrue(e.getMessage().startsWith("minimum 1e400 at ''"), e.getMessage());
        e = refused("{\"type\":\"number\",\"minimum\":1e-400}");
        assertTrue(e.getMessage().startsWith("minimum 1e-400 at ''"), e.getMessage());
        // an integer's minimum is held whatever it is: 1e-400 is above 0, so 1 is the least
        Grammar positive = grammar("{\"type\":\"integer\",\"minimum\":1e-400}");
        assertTrue(accepts(positive, "1") && !accepts(positive, "0"));
        assertTrue(accepts(grammar("{\"type\":\"integer\",\"minimum\":0.0}"), "0"), "0.0 is 0");
    }

    @Test
    void aKeywordOutsideTheSubsetNextToALiteralIsStillRefused() throws Exception {
        assertEquals("contentEncoding", refused("{\"type\":\"array\",\"items\":{\"type\":\"string\",\"contentEncoding\":\"base64\"},\"const\":[\"a\"]}").keyword());
        assertEquals("$ref", refused("{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"}]}},\"type\":\"array\","
                + "\"items\":{\"$ref\":\"#/$defs/a\"},\"const\":[1]}").keyword());
    }
}
