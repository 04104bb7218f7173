package io.ds4j.grammar;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The regular-expression grammar byte by byte ({@link GState#next}): what matches and what does not, multi-byte
 * characters in literals and classes (refused at the first byte that no allowed character can begin), the fewest
 * bytes to a match ({@link GState#dist}), quantifier bounds, alternation, negated classes, the choice grammar, and the
 * refusals with the construct and position they name.
 */
class RegexGrammarTest {
    /** The state after the UTF-8 bytes of text, or null where a byte is refused. */
    static GState walk(GState s, byte[] bytes) {
        for (int i = 0; i < bytes.length && s != null; i++) s = s.next(bytes[i] & 0xFF);
        return s;
    }

    static GState walk(Grammar g, String text) {
        return walk(start(g), text.getBytes(StandardCharsets.UTF_8));
    }

    static GState start(Grammar g) {
        return g.startState();
    }

    static boolean matches(String pattern, String text) {
        return matches(Grammar.regex(pattern), text);
    }

    static boolean matches(Grammar g, String text) {
        GState s = walk(g, text);
        return s != null && s.accepting();
    }

    static void accepts(String pattern, String... texts) {
        Grammar g = Grammar.regex(pattern);
        for (String t : texts) assertTrue(matches(g, t), pattern + " must match '" + t + "'");
    }

    static void refuses(String pattern, String... texts) {
        Grammar g = Grammar.regex(pattern);
        for (String t : texts) assertFalse(matches(g, t), pattern + " must not match '" + t + "'");
    }

    static int dist(String pattern, String prefix) {
        GState s = walk(Grammar.regex(pattern), prefix);
        assertNotNull(s, pattern + " after '" + prefix + "'");
        return s.dist();
    }

    @Test
    void literalsAndTheWholeOutput() {
        accepts("abc", "abc");
        refuses("abc", "", "ab", "abcd", "xabc", "ABC");
        accepts("héllo 日本 😀", "héllo 日本 😀");
        refuses("héllo", "hello", "héllo!");
        // the anchors at the ends change nothing; the whole output matches without them
        accepts("^abc$", "abc");
        refuses("^abc$", "abcabc", "");
        accepts("a\\.b\\$\\^\\(\\)\\[\\]\\{\\}\\|\\*\\+\\?\\\\", "a.b$^()[]{}|*+?\\");
        accepts("\\n\\t\\r\\f\\v", "\n\t\r\f\u000B");
        accepts("\\x41\\x{1F600}\\u00e9\\uD83D\\uDE00", "A😀é😀");
        // a brace that begins no repeat is a literal, as is a lone closing bracket or brace
        accepts("a{b}c]{}", "a{b}c]{}");
        // {,} repeats any number of times, as in Python's re
        accepts("xa{,}y", "xy", "xay", "xaaaay");
        refuses("xa{,}y", "xa{,}y");
    }

    @Test
    void classesAndEscapes() {
        accepts("\\d\\w\\s", "7_ ", "0a\t");
        refuses("\\d", "a", "٣"); // ASCII digits only
        accepts("\\D\\W\\S", "a-x", "日!日");
        refuses("\\D", "5");
        accepts("[a-cx-z_]+", "abz_yx");
        refuses("[a-cx-z_]+", "d", "");
        accepts("[^a-c]", "d", "日", "\n");
        refuses("[^a-c]", "a", "b");
        accepts("[\\d\\s.-]+", "1 .-2");
        refuses("[\\d\\s.-]+", "a");
        accepts("[]a]", "]", "a");
        accepts("[a-]", "-", "a");
        accepts("[\\]\\\\^]", "]", "\\", "^");
        accepts(".", "a", "日", "😀", "\t");
        refuses(".", "\n", "\r", "\u2028", "ab", "");
    }

    @Test
    void multiByteCharactersInClasses() {
        accepts("[α-ω]+", "αβγω");
        refuses("[α-ω]+", "a", "Α"); // U+0391 is below the range
        accepts("[^日]", "本", "a");
        refuses("[^日]", "日");
        accepts("[😀-😂]", "😁");
        refuses("[😀-😂]", "😃");
        // a lead byte no allowed character begins is refused at once, not after the character
        GState ascii = start(Grammar.regex("[a-z]"));
        assertNull(ascii.next(0xE6), "no character of [a-z] begins with 0xE6");
        GState greek = start(Grammar.regex("[α-ω]"));
        assertNotNull(greek.next(0xCE), "α..ο begin with 0xCE");
        assertNull(greek.next(0xCE).next(0x91), "0xCE 0x91 is Α, below the range");
        assertNull(greek.next(0xE0), "no three-byte character is Greek");
        // [^日] shares 日's lead bytes with 本: the state lives until the last byte decides
        GState notSun = walk(start(Grammar.regex("[^日]")), new byte[]{(byte) 0xE6, (byte) 0x97});
        assertNotNull(notSun);
        assertNull(notSun.next(0xA5), "日 = E6 97 A5");
        assertNotNull(notSun.next(0xA6));
    }

    @Test
    void malformedUtf8IsRefused() {
        GState any = start(Grammar.regex(".*"));
        assertNull(any.next(0xC0), "C0 only begins overlong forms");
        assertNull(any.next(0x80), "a continuation byte first");
        assertNull(any.next(0xF8));
        assertNull(any.next(0xE0).next(0x80), "E0 80 is overlong");
        assertNull(any.next(0xED).next(0xA0), "ED A0 begins a surrogate");
        assertNull(any.next(0xF4).next(0x90), "F4 90 is past U+10FFFF");
        assertNull(any.next(0xE6).next(0x41), "an ASCII byte inside a character");
        assertFalse(any.next(0xE6).accepting(), "half a character is no complete output");
        assertTrue(walk(any, "日".getBytes(StandardCharsets.UTF_8)).accepting());
    }

    @Test
    void distancesAreTheFewestBytesToAMatch() {
        assertEquals(3, dist("abc", ""));
        assertEquals(1, dist("abc", "ab"));
        assertEquals(0, dist("abc", "abc"));
        assertEquals(1, dist("a|日本", ""));
        assertEquals(3, dist("日+", ""));
        assertEquals(0, dist("日+", "日"));
        assertEquals(5, dist("[α-ω]{2}x", ""));
        assertEquals(3, dist("[α-ω]{2}x", "α"));
        assertEquals(3, dist("\\d{3,5}", ""));
        assertEquals(1, dist("\\d{3,5}", "12"));
        assertEquals(0, dist("(ab)*", ""));
        assertEquals(1, dist(".*x", "日日"));
        assertEquals(4, dist("😀", ""));
        assertEquals(1, dist("[^a]", ""), "the fewest bytes of any character a class takes");
        assertEquals(2, dist("[é-ÿ]", ""));
        // inside a character: its bytes still to come, then the rest
        GState mid = walk(start(Grammar.regex("日本x")), new byte[]{(byte) 0xE6});
        assertEquals(2 + 3 + 1, mid.dist());
        assertEquals(Grammar.regex("abc|de").minBytes(), 2);
    }

    @Test
    void quantifierBounds() {
        accepts("a{2,4}", "aa", "aaa", "aaaa");
        refuses("a{2,4}", "", "a", "aaaaa");
        accepts("a{3}", "aaa");
        refuses("a{3}", "aa", "aaaa");
        accepts("a{2,}", "aa", "a".repeat(50));
        refuses("a{2,}", "a");
        accepts("a{,2}", "", "a", "aa");
        refuses("a{,2}", "aaa");
        accepts("(ab){2}c?", "abab", "ababc");
        refuses("(ab){2}c?", "ab", "abababc");
        accepts("x?y*z+", "z", "xyyzz", "yz");
        refuses("x?y*z+", "xx", "xy", "");
        accepts("a+?b*?c??", "a", "aabbc");
        accepts("(a|bc){1,3}", "a", "bca", "abcbc");
        refuses("(a|bc){1,3}", "", "aaaa", "b");
        accepts("(a*)*b", "b", "aaab");
        accepts("(){3}x", "x");
        accepts("a{0}b", "b");
        refuses("a{0}b", "ab");
    }

    @Test
    void alternationAndGroups() {
        accepts("cat|dog|", "cat", "dog", "");
        refuses("cat|dog|", "ca", "catdog");
        accepts("(?:yes|no)!", "yes!", "no!");
        accepts("(?<word>\\w+)-(?P<n>\\d)", "ab-1");
        accepts("(a|ab)(c|bcd)", "abcd", "ac", "abc");
        refuses("(a|ab)(c|bcd)", "ab", "abd");
        accepts("^(\\+|-)?\\d+(\\.\\d+)?$", "-1.5", "+3", "42");
        refuses("^(\\+|-)?\\d+(\\.\\d+)?$", "1.", ".5", "--1");
    }

    @Test
    void anEndedMatchTakesNoMoreBytes() {
        GState s = walk(Grammar.regex("ab|abc"), "abc");
        assertTrue(s.accepting());
        for (int b = 0; b < 256; b++) assertNull(s.next(b), "nothing after abc: byte " + b);
    }

    @Test
    void statesAreValues() {
        Grammar g = Grammar.regex("[a-z]*x[0-9]");
        assertEquals(walk(g, "abc"), walk(g, "zz"));
        assertEquals(walk(g, "abc").hashCode(), walk(g, "zz").hashCode());
        assertNotEquals(walk(g, "abx"), walk(g, "ab"));
        GState mid1 = walk(Regex.compile(".").start(), new byte[]{(byte) 0xE6});
        GState mid2 = walk(Regex.compile(".").start(), new byte[]{(byte) 0xE6});
        assertNotEquals(mid1, mid2, "states of two patterns compiled apart are not interchangeable");
        // a pattern asked for again is the grammar compiled before, whose states (and masks) requests share
        assertSame(Grammar.regex("."), Grammar.regex("."));
        assertEquals(walk(start(Grammar.regex(".")), new byte[]{(byte) 0xE6}), walk(start(Grammar.regex(".")), new byte[]{(byte) 0xE6}));
        GState one = start(g);
        assertEquals(walk(one, new byte[]{(byte) 0xE6}), walk(one, new byte[]{(byte) 0xE6}));
    }

    /** A refusal's message holds the construct, and its position is where it starts. */
    static void refused(String pattern, String says, int position) {
        UnsupportedRegexException e = assertThrows(UnsupportedRegexException.class, () -> Grammar.regex(pattern), pattern);
        assertTrue(e.getMessage().contains(says), pattern + ": " + e.getMessage());
        assertEquals(position, e.position(), pattern + ": " + e.getMessage());
        if (position >= 0) assertTrue(e.getMessage().endsWith("(at position " + position + ")"), e.getMessage());
    }

    @Test
    void unsupportedConstructsAreRefusedWhereTheyAre() {
        refused("(a)\\1", "backreferences", 3);
        refused("(?P<x>a)(?P=x)", "backreferences", 8);
        refused("(?<x>a)\\k<x>", "backreferences", 7);
        refused("a(?=b)", "lookaround", 1);
        refused("a(?!b)", "lookaround", 1);
        refused("(?<=a)b", "lookaround", 0);
        refused("(?<!a)b", "lookaround", 0);
        refused("(?i)abc", "group construct '(?i'", 0);
        refused("(?>a)", "group construct", 0);
        refused("a^b", "anchor '^'", 1);
        refused("a$b", "anchor '$'", 1);
        refused("(a$)", "anchor '$'", 2);
        refused("\\bword\\b", "anchor '\\b'", 0);
        refused("ab\\Z", "anchor '\\Z'", 2);
        refused("(ab", "this '(' is never closed", 0);
        refused("a(b(c)", "this '(' is never closed", 1);
        refused("ab)", "this ')' closes no group", 2);
        refused("[abc", "this '[' is never closed", 0);
        refused("x[z-a]", "bad range 'z-a'", 2);
        refused("[\\d-z]", "class escape", 1);
        refused("[a-\\w]", "class escape", 1);
        refused("a{5,3}", "bad repeat {5,3}", 1);
        refused("a{0,100000}", "counts above 8192", 1);
        refused("*a", "nothing to repeat", 0);
        refused("a|+", "nothing to repeat", 2);
        refused("({2})", "nothing to repeat", 1);
        refused("a**", "multiple repeat", 2);
        refused("a{2}{3}", "multiple repeat", 4);
        refused("a*+", "possessive", 1);
        refused("\\p{L}", "Unicode property", 0);
        refused("\\q", "unknown escape '\\q'", 0);
        refused("ab\\", "lone '\\'", 2);
        refused("\\x4", "two hex digits", 0);
        refused("\\x{110000}", "beyond U+10FFFF", 0);
        refused("\\uD800", "surrogate", 0);
        refused("\\x{DC00}", "surrogate", 0);
        refused("[[:alpha:]]", "POSIX", 1);
        refused("(?<1x)", "bad group name", 0);
        refused("(".repeat(Regex.MAX_DEPTH + 1) + ")".repeat(Regex.MAX_DEPTH + 1), "nested more than", Regex.MAX_DEPTH);
        refused("[^\\s\\S]", "matches no string", -1);
    }

    @Test
    @Timeout(20)
    void theSizeLimitBoundsRepeats() {
        // 8,191 characters and the match node: at the limit; one more is past it
        assertEquals(Regex.MAX_POSITIONS, Regex.compile("a{8191}").size());
        refused("a{8192}", "more than 8192 NFA positions", -1);
        refused("(a{100}){82}", "more than 8192 NFA positions", -1);
        refused("(x|y|z){0,2000}", "more than 8192 NFA positions", -1);
        // the breaker's pattern: 19 counted repeats of a thousand (each engine step took seconds at 19,000 positions)
        refused("[a-z]*([a-m][a-z]{1000}|[a-m][a-z]{1001}|[a-m][a-z]{1002}|[a-m][a-z]{1003}|[a-m][a-z]{1004}|[a-m][a-z]{1005}"
                + "|[a-m][a-z]{1006}|[a-m][a-z]{1007}|[a-m][a-z]{1008})", "more than 8192 NFA positions", -1);
        // a repeat of a repeat of nothing builds no node, yet would take long: bounded too
        refused("((){4000}){4000}", "too large", -1);
        assertTrue(matches(".{0,3000}", "x".repeat(3000)));
        assertFalse(matches(".{0,3000}", "x".repeat(3001)));
    }

    @Test
    void aChoiceIsExactlyOneOfItsStrings() {
        Grammar g = Grammar.choice(List.of("yes", "no", "yes please", "日本", ""));
        for (String ok : List.of("yes", "no", "yes please", "日本", "")) assertTrue(matches(g, ok), ok);
        for (String bad : List.of("ye", "yes ", "nope", "日", "no no")) assertFalse(matches(g, bad), bad);
        assertEquals(0, g.minBytes(), "the empty choice");
        assertEquals(2, Grammar.choice(List.of("abc", "de")).minBytes());
        assertNull(walk(Grammar.choice(List.of("a", "b")), "c"));
        assertThrows(IllegalArgumentException.class, () -> Grammar.choice(List.of()));
    }
}
