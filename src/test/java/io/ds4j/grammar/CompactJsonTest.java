package io.ds4j.grammar;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * JSON without whitespace between its tokens (vLLM's {@code disable_any_whitespace}, {@link States.Compact}): whitespace
 * is refused wherever it would fall between tokens (after a bracket, a comma, a colon, a number, a literal) and kept
 * inside strings, escaped quotes included; what the plain grammar takes without such whitespace is still taken.
 */
class CompactJsonTest {
    static final ObjectMapper M = new ObjectMapper();
    static final String SCHEMA = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\"},\"ok\":{\"type\":\"boolean\"},"
            + "\"s\":{\"type\":\"string\"},\"xs\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}},"
            + "\"required\":[\"n\",\"ok\",\"s\",\"xs\"]}";

    static GState plain() throws Exception {
        return Grammar.jsonSchema(M.readTree(SCHEMA), false).startState();
    }

    static GState compact() throws Exception {
        return Grammar.jsonSchema(M.readTree(SCHEMA), true).startState();
    }

    @Test
    void compactTextIsTakenByBoth() throws Exception {
        String t = "{\"n\":12.5,\"ok\":true,\"s\":\"a b\\\" c\\\\\",\"xs\":[1,2,3]}";
        assertTrue(NumberGrammarTest.accepts(plain(), t));
        assertTrue(NumberGrammarTest.accepts(compact(), t));
    }

    @Test
    void whitespaceBetweenTokensIsRefusedEverywhere() throws Exception {
        String t = "{\"n\":12.5,\"ok\":true,\"s\":\"a\",\"xs\":[1,2]}";
        int refused = 0;
        boolean inString = false;
        for (int i = 1; i < t.length(); i++) {
            if (t.charAt(i - 1) == '"') inString = !inString;  // no escapes in t
            if (inString) continue;  // inside a key a space is a different key; inside "a" it is content (below)
            // between two tokens: beside a bracket, comma, colon or quote (inside 12.5 or true a space splits a token)
            if ("{[,:\"".indexOf(t.charAt(i - 1)) < 0 && "}],:\"".indexOf(t.charAt(i)) < 0) continue;
            String spaced = t.substring(0, i) + " " + t.substring(i);
            assertFalse(NumberGrammarTest.accepts(compact(), spaced), spaced);
            assertTrue(NumberGrammarTest.accepts(plain(), spaced), "the plain grammar takes " + spaced);
            refused++;
        }
        assertTrue(NumberGrammarTest.accepts(compact(), t.replace("\"a\"", "\" a \"")));
        assertEquals(20, refused, "positions between tokens");
        for (String ws : new String[]{"\n", "\t", "\r"})
            assertFalse(NumberGrammarTest.accepts(compact(), "{" + ws + t.substring(1)), "whitespace " + (int) ws.charAt(0));
    }

    @Test
    void anEscapedQuoteDoesNotEndTheString() throws Exception {
        // after \" the string goes on, so a space there is content; after \\ the next quote ends it
        assertTrue(NumberGrammarTest.accepts(compact(), "{\"n\":1,\"ok\":false,\"s\":\"\\\" x\",\"xs\":[]}"));
        assertFalse(NumberGrammarTest.accepts(compact(), "{\"n\":1,\"ok\":false,\"s\":\"\\\\\" ,\"xs\":[]}"));
        assertTrue(NumberGrammarTest.accepts(compact(), "{\"n\":1,\"ok\":false,\"s\":\"\\\\\",\"xs\":[]}"));
    }

    @Test
    void randomWalksNeverWriteWhitespaceOutsideStrings() throws Exception {
        String alphabet = "{}[]\":,0123456789.-eEtruefalsn \n\\abxs";
        SplittableRandom r = new SplittableRandom(7);
        for (int walk = 0; walk < 300; walk++) {
            GState s = compact();
            StringBuilder b = new StringBuilder();
            for (int step = 0; step < 200 && !(s.accepting() && r.nextInt(8) == 0); step++) {
                java.util.List<Character> next = new java.util.ArrayList<>();
                for (char c : alphabet.toCharArray()) if (s.next(c) != null) next.add(c);
                if (next.isEmpty()) break;
                char c = next.get(r.nextInt(next.size()));
                s = s.next(c);
                assertNotNull(s);
                b.append(c);
            }
            // outside strings no whitespace: strip the strings and look
            String outside = b.toString().replaceAll("\"(\\\\.|[^\"\\\\])*\"?", "\"\"");
            assertFalse(outside.matches("(?s).*\\s.*"), b.toString());
        }
    }
}
