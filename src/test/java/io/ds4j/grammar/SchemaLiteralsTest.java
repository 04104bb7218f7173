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
        return io.ds4j.server.Json.read(json.getBytes(StandardCharsets.UTF_8));
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
        Grammar big = grammar("{\"enum\":[1e400]}");
        assertTrue(accepts(big, "1e400"));
        assertFalse(accepts(big, "\"Infinity\""));
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
}
