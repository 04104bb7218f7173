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

    @Test
    void aKeptStopStringEndsTheOutputForEverySplitAndTheRestIsDropped() {
        String text = "abc<END>def";
        for (int i = 0; i <= text.length(); i++)
            for (int j = i; j <= text.length(); j++) {
                StopStrings s = new StopStrings(List.of("<END>", "zz"), true);
                String out = s.push(text.substring(0, i)) + s.push(text.substring(i, j)) + s.push(text.substring(j)) + s.flush();
                assertEquals("abc<END>", out, "split at " + i + "," + j);
                assertTrue(s.stopped());
                assertEquals("<END>", s.matched());
            }
    }

    @Test
    void aKeptStopStringHoldsNothingBack() {
        // the text that may begin a stop string is output either way, so it goes out at once
        StopStrings s = new StopStrings(List.of("</stop>"), true);
        assertEquals("a</st", s.push("a</st"));
        assertEquals("op>", s.push("op> more"), "the stop string is still matched across the pieces");
        assertTrue(s.stopped());
        assertEquals("", s.push("x"));
        assertEquals("", s.flush());

        StopStrings t = new StopStrings(List.of("xyz"), true);
        assertEquals("abxy", t.push("abxy"));
        assertEquals("q", t.push("q"));
        assertEquals("", t.flush(), "nothing was held");
        assertFalse(t.stopped());
    }

    @Test
    void keptTheOutputEndsWhereTheFirstStopStringCompletes() {
        // "bc" completes before "abcd" does: kept, the output ends there in one piece as in any split
        String text = "xabcd";
        for (int i = 0; i <= text.length(); i++) {
            StopStrings s = new StopStrings(List.of("abcd", "bc"), true);
            assertEquals("xabc", s.push(text.substring(0, i)) + s.push(text.substring(i)) + s.flush(), "split at " + i);
            assertEquals("bc", s.matched());
        }
        // left out (the default, unchanged), the earliest one to begin in the piece cuts
        StopStrings d = new StopStrings(List.of("abcd", "bc"));
        assertEquals("x", d.push("xabcd"));
        assertEquals("abcd", d.matched());
    }

    /** Unarmed pieces (vLLM's min_tokens not reached) complete no stop string, but one may begin there and complete later. */
    @Test
    void unarmedPiecesCompleteNoStopString() {
        StopStrings s = new StopStrings(List.of("bc"));
        assertEquals("abc", s.push("abc", false) + s.push("", false));
        assertFalse(s.stopped());
        assertEquals("x", s.push("xb", false));
        assertEquals("", s.push("cd", true));
        assertTrue(s.stopped());
        assertEquals("bc", s.matched());
    }

    /**
     * A stop string held whole inside the start of a longer one while unarmed completed where none may end the output:
     * a later armed piece does not end it there (it crashed with the stop string kept, and cut the output without).
     */
    @Test
    void aStopStringHeldWholeFromUnarmedTextDoesNotEndTheOutputLater() {
        for (boolean keep : new boolean[]{false, true}) {
            StopStrings s = new StopStrings(List.of("chaos!Z", "ha"), keep);
            StringBuilder out = new StringBuilder();
            out.append(s.push("x chaos!", false));
            out.append(s.push("y", true));
            assertFalse(s.stopped(), "keep " + keep);
            out.append(s.push(" ha!", true));
            assertTrue(s.stopped());
            assertEquals(keep ? "x chaos!y ha" : "x chaos!y ", out.toString(), "keep " + keep);
        }
    }
}
