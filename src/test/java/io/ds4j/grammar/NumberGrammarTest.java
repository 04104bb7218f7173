package io.ds4j.grammar;

import com.fasterxml.jackson.databind.ObjectMapper;
import org.junit.jupiter.api.Test;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Every number the grammar admits parses to a finite double, and every integer to a long that a JavaScript client
 * reads exactly (at most 2^53 − 1 in magnitude): random walks through the byte automaton, and its edges checked
 * one by one (the largest exponent each mantissa length may take is admitted, one more is not).
 */
class NumberGrammarTest {
    static final ObjectMapper M = new ObjectMapper();
    static final String ALPHABET = "0123456789-+.eE";
    static final BigDecimal MAX_DOUBLE = new BigDecimal(Double.MAX_VALUE);
    static final long MAX_EXACT = (1L << 53) - 1;

    static GState start(String schema) throws Exception {
        return States.value(SchemaCompiler.compile(M.readTree(schema)), States.End.INSTANCE);
    }

    /** The grammar of a schema read as the server reads a request, which keeps each number's text. */
    static GState served(String schema) throws Exception {
        return States.value(SchemaCompiler.compile(io.ds4j.json.Json.read(schema.getBytes(java.nio.charset.StandardCharsets.UTF_8))),
                States.End.INSTANCE);
    }

    /** Whether the grammar from s takes text whole. */
    static boolean accepts(GState s, String text) {
        for (int i = 0; i < text.length() && s != null; i++) s = s.next(text.charAt(i));
        return s != null && s.accepting();
    }

    /**
     * A random text the automaton admits: each step picks among the bytes it allows, mostly '9' and the exponent
     * letter where allowed (so walks reach the largest magnitudes), and stops only rarely where it could.
     */
    static String walk(GState s, SplittableRandom r) {
        StringBuilder b = new StringBuilder();
        while (true) {
            List<Character> next = new ArrayList<>();
            for (char c : ALPHABET.toCharArray()) if (s.next(c) != null) next.add(c);
            if (next.isEmpty() || (s.accepting() && r.nextInt(12) == 0)) {
                assertTrue(s.accepting(), "a dead end after " + b);
                return b.toString();
            }
            char c = next.get(r.nextInt(next.size()));
            int bias = r.nextInt(4);
            if (bias == 0 && next.contains('9')) c = '9';
            else if (bias == 1 && next.contains('e')) c = 'e';
            b.append(c);
            s = s.next(c);
        }
    }

    static void assertFinite(String text) {
        double d = Double.parseDouble(text);
        assertTrue(Double.isFinite(d), text + " parses to " + d);
        assertTrue(new BigDecimal(text).abs().compareTo(MAX_DOUBLE) < 0, text);
    }

    static void assertExact(String text) {
        long v = assertDoesNotThrow(() -> Long.parseLong(text), text);
        assertTrue(Math.abs(v) <= MAX_EXACT, text + " is beyond 2^53 - 1");
        assertEquals(0, new BigDecimal(text).compareTo(new BigDecimal((double) v)), text + " is not exact as a double");
    }

    @Test
    void randomNumbersTheGrammarAdmitsAreFiniteDoubles() throws Exception {
        SplittableRandom r = new SplittableRandom(39);
        int withExponent = 0, longest = 0;
        // a number, a non-negative one, and any JSON value (json_object's values) that starts as a number
        for (String schema : new String[]{"{\"type\":\"number\"}", "{\"type\":\"number\",\"minimum\":0}", "{}"}) {
            GState s = start(schema);
            for (int i = 0; i < 20_000; i++) {
                String t = walk(s, r);
                assertFinite(t);
                assertTrue(t.length() <= States.MAX_NUMBER, t);
                if (t.indexOf('e') >= 0 || t.indexOf('E') >= 0) withExponent++;
                longest = Math.max(longest, t.length());
            }
        }
        // the walks did reach the exponents and lengths that could overflow
        assertTrue(withExponent > 10_000, "walks with an exponent: " + withExponent);
        assertEquals(States.MAX_NUMBER, longest);
    }

    @Test
    void randomIntegersTheGrammarAdmitsAreExactInJavaScript() throws Exception {
        SplittableRandom r = new SplittableRandom(39);
        int fifteen = 0;
        for (String schema : new String[]{"{\"type\":\"integer\"}", "{\"type\":\"integer\",\"minimum\":0}",
                "{\"type\":\"integer\",\"minimum\":-1e30,\"maximum\":1e30}"}) {
            GState s = start(schema);
            for (int i = 0; i < 20_000; i++) {
                String t = walk(s, r);
                assertExact(t);
                if (t.replace("-", "").length() == SchemaCompiler.BOUNDED_DIGITS) fifteen++;
            }
            assertTrue(accepts(s, "999999999999999"), schema);
            assertFalse(accepts(s, "1000000000000000"), schema);
        }
        assertTrue(fifteen > 1000, "walks of 15 digits: " + fifteen);
        // the report's integer: 24 digits, which JavaScript rounds
        assertFalse(accepts(start("{\"type\":\"integer\"}"), "933647685126847349171777"));
    }

    @Test
    void eachMantissaLengthTakesTheLargestFiniteExponentAndNoMore() throws Exception {
        GState s = start("{\"type\":\"number\"}");
        int checked = 0;
        for (int d = 1; d <= States.MAX_NUMBER - 3; d++) {
            String nines = "9".repeat(d);
            for (String mantissa : new String[]{nines, nines + ".9", "-" + nines, (d == 1 ? "0" : nines) + ".99"}) {
                for (int e = 0; e <= 999; e++) {
                    for (String written : new String[]{"e" + e, "E+" + e, "e" + String.format("%03d", e)}) {
                        String t = mantissa + written;
                        boolean expected = t.length() <= States.MAX_NUMBER && d + e <= States.Num.MAX_MAGNITUDE;
                        assertEquals(expected, accepts(s, t), t);
                        if (expected) {
                            assertFinite(t);
                            checked++;
                        }
                    }
                    // a negative exponent of up to three digits is always finite (at worst zero)
                    String neg = mantissa + "e-" + e;
                    if (neg.length() <= States.MAX_NUMBER) {
                        assertTrue(accepts(s, neg), neg);
                        assertFinite(neg);
                    }
                }
            }
        }
        assertTrue(checked > 10_000, "admitted texts checked: " + checked);
        // the report's number, and the edge of double range
        assertFalse(accepts(s, "91207513E898662376790471"));
        assertTrue(accepts(s, "1e307"));
        assertFalse(accepts(s, "1e308"));
        assertFalse(accepts(s, "9e999"));
        assertFalse(accepts(s, "1e0001"), "four exponent digits");
    }

    /** Every text the grammar admits from s after prefix with up to extra more bytes (digits and '.'), exhaustively. */
    static void admitted(GState s, String prefix, int extra, List<String> out) {
        if (s.accepting()) out.add(prefix);
        if (extra == 0) return;
        for (char c : "0123456789.".toCharArray()) {
            GState t = s.next(c);
            if (t != null) admitted(t, prefix + c, extra - 1, out);
        }
    }

    /** The text that takes the largest byte allowed at every step ('.' first), and each of its accepted prefixes. */
    static List<String> largest(GState s, String prefix) {
        List<String> out = new ArrayList<>();
        String t = prefix;
        while (true) {
            if (s.accepting()) out.add(t);
            char pick = 0;
            for (char c : "0123456789.".toCharArray()) if (s.next(c) != null && pick != '.') pick = c;
            if (pick == 0) return out;
            t += pick;
            s = s.next(pick);
        }
    }

    @Test
    void aBoundBelowTenToTheFifteenIsNeverPassedByTheFraction() throws Exception {
        SplittableRandom r = new SplittableRandom(41);
        String nines = "9".repeat(SchemaCompiler.BOUNDED_DIGITS);
        // {schema, bound, the bound's own text where the grammar must still admit it, a text just past it}
        String[][] cases = {
                {"{\"type\":\"number\",\"maximum\":999999999999999}", "999999999999999", "999999999999999.0", "999999999999999.00000001"},
                {"{\"type\":\"number\",\"maximum\":999999999999999.5}", "999999999999999.5", "999999999999999.5", "999999999999999.50000001"},
                {"{\"type\":\"number\",\"maximum\":999999999999999.25}", "999999999999999.25", "999999999999999.25", "999999999999999.3"},
                {"{\"type\":\"number\",\"maximum\":999999999999999.909}", "999999999999999.909", "999999999999999.909", "999999999999999.91"},
                {"{\"type\":\"number\",\"minimum\":-999999999999999}", "-999999999999999", "-999999999999999", "-999999999999999.00000001"},
                {"{\"type\":\"number\",\"minimum\":-999999999999999.5,\"maximum\":1e300}", "-999999999999999.5", "-999999999999999.5", "-999999999999999.6"},
        };
        for (String[] c : cases) {
            GState s = served(c[0]);
            BigDecimal bound = new BigDecimal(c[1]);
            boolean upper = bound.signum() > 0;
            java.util.function.Predicate<String> within = t -> upper ? new BigDecimal(t).compareTo(bound) <= 0 : new BigDecimal(t).compareTo(bound) >= 0;
            String prefix = (upper ? "" : "-") + nines;
            GState at = s;
            for (char ch : prefix.toCharArray()) at = at.next(ch);
            assertNotNull(at, c[0]);
            // past 15 nines, every text of up to 5 more bytes; and the largest the automaton allows, to its full length
            List<String> texts = new ArrayList<>();
            admitted(at, prefix, 5, texts);
            List<String> big = largest(at, prefix);
            texts.addAll(big);
            for (String t : texts) assertTrue(within.test(t), c[0] + " admitted " + t);
            assertTrue(texts.contains(prefix) && texts.contains(prefix + ".0000"), c[0] + ": " + texts);
            assertEquals(States.MAX_NUMBER, big.getLast().length(), c[0] + ": " + big.getLast());
            // random walks over the whole range, leaning on nines
            for (int i = 0; i < 5_000; i++) {
                String t = walk(s, r);
                assertTrue(within.test(t), c[0] + " admitted " + t);
            }
            assertTrue(accepts(s, c[2]), c[0] + " refuses " + c[2]);
            assertFalse(accepts(s, c[3]), c[0] + " admits " + c[3]);
        }
        // the report's texts, and a bound of 10^15 that keeps every fraction
        assertFalse(accepts(served(cases[0][0]), "999999999999999.99999999"));
        assertFalse(accepts(served(cases[4][0]), "-999999999999999.9999999"));
        assertTrue(accepts(served("{\"type\":\"number\",\"maximum\":1e15}"), "999999999999999.99999999"));
    }

    /**
     * An integer's minimum, maximum, exclusiveMinimum and exclusiveMaximum, whatever their values: every text the
     * automaton admits (walked at random, and every integer of a window around the bounds tried) is an integer written
     * as JSON writes it and within the bounds, and every integer within them is admitted.
     */
    @Test
    void integerBoundsHoldAnyValue() throws Exception {
        record Case(String schema, long lo, long hi) {}
        long cap = 999_999_999_999_999L;
        List<Case> cases = List.of(new Case("{\"type\":\"integer\",\"minimum\":1,\"maximum\":100}", 1, 100),
                new Case("{\"type\":\"integer\",\"exclusiveMinimum\":0}", 1, cap),
                new Case("{\"type\":\"integer\",\"minimum\":-50,\"exclusiveMaximum\":-3}", -50, -4),
                new Case("{\"type\":\"integer\",\"minimum\":1.5,\"maximum\":7.9}", 2, 7),
                new Case("{\"type\":\"integer\",\"exclusiveMinimum\":-1.5,\"exclusiveMaximum\":1e1}", -1, 9),
                new Case("{\"type\":\"integer\",\"minimum\":-7,\"maximum\":1234}", -7, 1234),
                new Case("{\"type\":\"integer\",\"minimum\":95,\"maximum\":1005}", 95, 1005),
                new Case("{\"type\":\"integer\",\"maximum\":-100}", -cap, -100),
                new Case("{\"type\":\"integer\",\"minimum\":5,\"maximum\":5}", 5, 5),
                new Case("{\"type\":\"integer\",\"minimum\":123456789,\"maximum\":9876543210123}", 123456789, 9876543210123L));
        SplittableRandom r = new SplittableRandom(3);
        for (Case c : cases) {
            GState g = start(c.schema());
            for (int i = 0; i < 300; i++) {
                String t = walk(g, r);
                assertTrue(t.matches("-?(0|[1-9][0-9]*)") && !t.equals("-0"), c.schema() + ": " + t);
                long v = Long.parseLong(t);
                assertTrue(v >= c.lo() && v <= c.hi(), c.schema() + ": " + t);
            }
            for (long edge : new long[]{c.lo(), c.hi()})
                for (long v = edge - 120; v <= edge + 120; v++)
                    assertEquals(v >= c.lo() && v <= c.hi(), accepts(g, Long.toString(v)), c.schema() + ": " + v);
            assertFalse(accepts(g, "0" + c.lo()) || accepts(g, c.lo() + ".0") || accepts(g, c.lo() + "e0"), c.schema());
        }
        // literals are kept by the exclusive bounds too
        GState e = start("{\"type\":\"integer\",\"enum\":[0,1,2],\"exclusiveMinimum\":0,\"exclusiveMaximum\":2}");
        assertTrue(accepts(e, "1") && !accepts(e, "0") && !accepts(e, "2"));
    }

    /** Through the tokenizer with random logits, bounded integers inside an object validate (Pydantic's conint and PositiveInt). */
    @Test
    void boundedIntegersInAnObjectValidate() throws Exception {
        com.fasterxml.jackson.databind.JsonNode schema = M.readTree("{\"type\":\"object\",\"properties\":{"
                + "\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":100},\"m\":{\"type\":\"integer\",\"exclusiveMinimum\":0},"
                + "\"k\":{\"type\":[\"integer\",\"null\"],\"minimum\":-5,\"exclusiveMaximum\":5}},\"required\":[\"n\",\"m\",\"k\"],"
                + "\"additionalProperties\":false}");
        Grammar g = Grammar.jsonSchema(schema);
        for (long seed = 0; seed < 16; seed++) {
            GrammarPropertyTest.Out o = GrammarPropertyTest.run(g, 60, seed, seed % 4 == 0 ? 0 : 1.0);
            assertTrue(o.eos(), o.text());
            assertTrue(GrammarPropertyTest.validator(schema).validate(M.readTree(o.text())).isEmpty(), o.text());
        }
    }

    /** What integer bounds cannot give is named: bounds with no integer between them, a bound that is no number, an exclusive bound on a number. */
    @Test
    void integerBoundsRefusals() throws Exception {
        String[][] cases = {
                {"{\"type\":\"integer\",\"minimum\":5,\"exclusiveMaximum\":5}", "exclusiveMaximum", "true",
                        "no value satisfies the schema at '': no integer is at or above 5 and at or below 4 (its minimum and exclusiveMaximum)"},
                {"{\"type\":\"integer\",\"minimum\":1000000000000000}", "minimum", "false",
                        "minimum 1000000000000000 at '' leaves no integer of at most 15 digits (integers here stay within \u00b1999999999999999, which JavaScript clients read exactly)"},
                {"{\"type\":\"integer\",\"exclusiveMinimum\":null}", "exclusiveMinimum", "true", "exclusiveMinimum at '' is null: it must be a number"},
                {"{\"type\":\"integer\",\"exclusiveMinimum\":true}", "exclusiveMinimum", "true", "exclusiveMinimum at '' is true: it must be a number"},
                // a bound that is no number is a wrong schema, on an integer as on a number
                {"{\"type\":\"integer\",\"minimum\":\"1\"}", "minimum", "true", "minimum at '' is \"1\": it must be a number"},
                {"{\"type\":\"number\",\"maximum\":[3]}", "maximum", "true", "maximum at '' is [3]: it must be a number"},
                {"{\"type\":\"number\",\"exclusiveMinimum\":0}", "exclusiveMinimum", "false",
                        "exclusiveMinimum at '' is supported on type integer only, not on type number"},
                {"{\"exclusiveMaximum\":3}", "exclusiveMaximum", "false",
                        "exclusiveMaximum at '' without type number or integer is not supported: add \"type\": \"number\" or \"integer\" next to it"}};
        GrammarPropertyTest.assertRefusals(cases);
    }
}
