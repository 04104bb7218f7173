package io.ds4j.engine;

import org.junit.jupiter.api.Test;

import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

class StopStringsTest {
    @Test
    void stopStringSplitAcrossThreeTokensNeverLeaks() {
        StopStrings s = new StopStrings(List.of("STOP!"));
        StringBuilder out = new StringBuilder();
        for (String piece : new String[]{"Hello S", "TO", "P", "! more"}) {
            out.append(s.push(piece));
            assertFalse(out.toString().contains("S") && out.toString().endsWith("S"), "held back: " + out);
        }
        assertTrue(s.stopped());
        assertEquals("Hello ", out.toString());
        assertEquals("STOP!", s.matched());
    }

    @Test
    void everySplitOfTheTextGivesTheSameOutput() {
        String text = "abc<END>def";
        for (int i = 0; i <= text.length(); i++)
            for (int j = i; j <= text.length(); j++) {
                StopStrings s = new StopStrings(List.of("<END>", "zz"));
                String out = s.push(text.substring(0, i)) + s.push(text.substring(i, j)) + s.push(text.substring(j)) + s.flush();
                assertEquals("abc", out, "split at " + i + "," + j);
            }
    }

    @Test
    void falseStartIsReleased() {
        StopStrings s = new StopStrings(List.of("</stop>"));
        assertEquals("a", s.push("a</st"));
        assertEquals("</start", s.push("art"));
        assertEquals("", s.flush());
        assertFalse(s.stopped());
    }

    @Test
    void heldTextIsFlushedAtTheEnd() {
        StopStrings s = new StopStrings(List.of("xyz"));
        assertEquals("ab", s.push("abxy"));
        assertEquals("xy", s.flush());
    }
}
