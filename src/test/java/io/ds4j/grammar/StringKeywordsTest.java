package io.ds4j.grammar;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.networknt.schema.JsonSchema;
import com.networknt.schema.JsonSchemaFactory;
import com.networknt.schema.SchemaValidatorsConfig;
import com.networknt.schema.SpecVersion;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.function.Predicate;
import java.util.regex.Pattern;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A string's {@code minLength}, {@code maxLength}, {@code pattern} and {@code format}: random logits through the real
 * tokenizer ({@link GrammarPropertyTest#run}) under many seeds give only strings that keep them, checked here on the
 * decoded value (characters counted as code points, the pattern by java.util.regex, formats by java.time and the like)
 * and by an independent validator with format assertions on; what cannot be held is a 400's exception naming the keyword.
 */
class StringKeywordsTest {
    static final ObjectMapper M = new ObjectMapper();

    /** The validator with format assertions on (a format is an annotation only by default). */
    static JsonSchema validator(JsonNode schema) {
        SchemaValidatorsConfig config = SchemaValidatorsConfig.builder().formatAssertionsEnabled(true).build();
        return JsonSchemaFactory.getInstance(SpecVersion.VersionFlag.V202012).getSchema(schema, config);
    }

    /** Runs a schema under seeds 0..seeds-1 (budget tokens each) and checks each value with ok and the validator. */
    static void holds(String schemaText, int seeds, int budget, Predicate<String> ok) throws Exception {
        JsonNode schema = M.readTree(schemaText);
        Grammar g = Grammar.jsonSchema(schema);
        for (long seed = 0; seed < seeds; seed++) {
            GrammarPropertyTest.Out o = GrammarPropertyTest.run(g, budget, seed, seed % 4 == 0 ? 0 : 1.0);
            assertTrue(o.eos(), schemaText + " seed " + seed + ": ended within " + budget + " tokens: " + o.text());
            JsonNode v = M.readTree(o.text());
            assertTrue(v.isTextual(), o.text());
            assertTrue(ok.test(v.textValue()), schemaText + " seed " + seed + ": " + o.text());
            // the validator refuses a time whose offset carries it past midnight in UTC (12:19-15:34), which RFC 3339
            // allows, and an address whose top-level domain is not on IANA's list today, which RFC 5321 does not ask:
            // those are checked by ok alone
            String format = schema.path("format").asText();
            if (!format.equals("time") && !format.equals("email"))
                assertTrue(validator(schema).validate(v).isEmpty(), schemaText + " seed " + seed + ": " + o.text() + " "
                        + validator(schema).validate(v));
        }
    }

    static int chars(String s) {
        return s.codePointCount(0, s.length());
    }

    @Test
    void lengthsHoldCountingCharacters() throws Exception {
        holds("{\"type\":\"string\",\"minLength\":3}", 24, 60, s -> chars(s) >= 3);
        holds("{\"type\":\"string\",\"maxLength\":5}", 24, 60, s -> chars(s) <= 5);
        holds("{\"type\":\"string\",\"minLength\":2,\"maxLength\":4}", 24, 60, s -> chars(s) >= 2 && chars(s) <= 4);
        holds("{\"type\":\"string\",\"minLength\":7,\"maxLength\":7}", 16, 60, s -> chars(s) == 7);
        holds("{\"type\":\"string\",\"maxLength\":0}", 4, 10, String::isEmpty);
    }

    @Test
    void anEscapeIsOneCharacter() throws Exception {
        Grammar g = Grammar.jsonSchema(M.readTree("{\"type\":\"string\",\"maxLength\":2}"));
        assertEquals(-1, GrammarPropertyTest.refusedAt(g, "\"\\n\\u00e9\""), "two escapes are two characters");
        assertEquals(-1, GrammarPropertyTest.refusedAt(g, "\"é😀\""), "two characters of 2 and 4 bytes");
        assertTrue(GrammarPropertyTest.refusedAt(g, "\"\\n\\u00e9x\"") >= 0, "a third character is refused");
        Grammar min = Grammar.jsonSchema(M.readTree("{\"type\":\"string\",\"minLength\":2}"));
        assertTrue(GrammarPropertyTest.refusedAt(min, "\"\\t\"") >= 0, "one character cannot end it");
        // a surrogate pair written as two escapes is one character
        assertTrue(GrammarPropertyTest.refusedAt(min, "\"\\ud83d\\ude00\"") >= 0);
        Grammar one = Grammar.jsonSchema(M.readTree("{\"type\":\"string\",\"maxLength\":1}"));
        assertEquals(-1, GrammarPropertyTest.refusedAt(one, "\"\\ud83d\\ude00\""));
        assertTrue(GrammarPropertyTest.refusedAt(one, "\"\\ude00\\ud83d\"") >= 0, "a low surrogate before a high one is two");
        // held to a pattern, the character is written as UTF-8 (a pattern steps whole characters)
        Grammar pattern = Grammar.jsonSchema(M.readTree("{\"type\":\"string\",\"pattern\":\"[^a]\"}"));
        assertEquals(-1, GrammarPropertyTest.refusedAt(pattern, "\"😀\""));
        assertTrue(GrammarPropertyTest.refusedAt(pattern, "\"\\ud83d\\ude00\"") >= 0);
    }

    @Test
    void aPatternHoldsTheWholeString() throws Exception {
        holds("{\"type\":\"string\",\"pattern\":\"[a-z]{2,5}-\\\\d{3}\"}", 24, 60, s -> s.matches("[a-z]{2,5}-\\d{3}"));
        // anchors are accepted; the whole string matches with or without them
        holds("{\"type\":\"string\",\"pattern\":\"^@[a-zA-Z0-9_]+$\"}", 16, 60, s -> s.matches("@[a-zA-Z0-9_]+"));
        holds("{\"type\":\"string\",\"pattern\":\"(yes|no)\"}", 8, 20, s -> s.equals("yes") || s.equals("no"));
        // characters a JSON string escapes: a quote, a backslash, a line break
        holds("{\"type\":\"string\",\"pattern\":\"[\\\"\\\\\\\\\\\\n]{1,3}\"}", 16, 30, s -> s.matches("[\"\\\\\\n]{1,3}"));
        holds("{\"type\":\"string\",\"pattern\":\"[é日😀]+x\"}", 16, 40, s -> s.matches("[é日😀]+x"));
    }

    @Test
    void aPatternBesideALengthHoldsBoth() throws Exception {
        holds("{\"type\":\"string\",\"pattern\":\"[ab]+\",\"minLength\":4,\"maxLength\":6}", 24, 60,
                s -> s.matches("[ab]+") && chars(s) >= 4 && chars(s) <= 6);
        // the pattern alone would end after "a": the length keeps it going to "bbbb"
        holds("{\"type\":\"string\",\"pattern\":\"a|bbbb|c{2,}\",\"minLength\":3}", 24, 60,
                s -> s.equals("bbbb") || s.matches("c{3,}"));
        holds("{\"type\":\"string\",\"pattern\":\"x*(é|ab)\",\"maxLength\":3}", 24, 30,
                s -> s.matches("x*(é|ab)") && chars(s) <= 3);
        // an escape may only be one the pattern and the length still allow
        Grammar g = Grammar.jsonSchema(M.readTree("{\"type\":\"string\",\"pattern\":\"a|bbbb\",\"minLength\":2}"));
        assertTrue(GrammarPropertyTest.refusedAt(g, "\"\\u0061") >= 0, "an escaped a could only end at one character");
        assertEquals(-1, GrammarPropertyTest.refusedAt(g, "\"\\u0062bbb\""));
    }

    static final Pattern UUID = Pattern.compile("[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}");

    @Test
    void formatsHold() throws Exception {
        holds("{\"type\":\"string\",\"format\":\"date\"}", 24, 40, s -> parses(() -> java.time.LocalDate.parse(s)));
        holds("{\"type\":\"string\",\"format\":\"date-time\"}", 24, 60,
                s -> parses(() -> java.time.OffsetDateTime.parse(s)));
        holds("{\"type\":\"string\",\"format\":\"time\"}", 24, 40, s -> parses(() -> java.time.OffsetTime.parse(s)));
        holds("{\"type\":\"string\",\"format\":\"duration\"}", 24, 40, s -> s.matches("P[0-9YMWDTHS]+") && !s.endsWith("T"));
        holds("{\"type\":\"string\",\"format\":\"uuid\"}", 16, 40, s -> UUID.matcher(s).matches());
        holds("{\"type\":\"string\",\"format\":\"ipv4\"}", 24, 30, s -> ipv4(s));
        holds("{\"type\":\"string\",\"format\":\"ipv6\"}", 24, 60, s -> s.contains(":") && s.matches("[0-9a-fA-F:.]+"));
        holds("{\"type\":\"string\",\"format\":\"hostname\"}", 24, 80, s -> s.length() <= 253 && s.matches("[A-Za-z0-9.-]+"));
        holds("{\"type\":\"string\",\"format\":\"email\"}", 24, 80, s -> email(s));
        holds("{\"type\":\"string\",\"format\":\"date\",\"maxLength\":10,\"minLength\":10}", 8, 40, s -> s.length() == 10);
    }

    @Test
    void leapDaysOnlyInLeapYears() throws Exception {
        Grammar g = Grammar.jsonSchema(M.readTree("{\"type\":\"string\",\"format\":\"date\"}"));
        for (String ok : List.of("2024-02-29", "2000-02-29", "0000-02-29", "2023-12-31", "2023-04-30"))
            assertEquals(-1, GrammarPropertyTest.refusedAt(g, "\"" + ok + "\""), ok);
        for (String bad : List.of("2023-02-29", "1900-02-29", "2023-04-31", "2023-13-01", "2023-00-10", "2023-02-30"))
            assertTrue(GrammarPropertyTest.refusedAt(g, "\"" + bad + "\"") >= 0, bad);
    }

    @Test
    void ipv6FormsAreHeldToEightGroups() throws Exception {
        Grammar g = Grammar.jsonSchema(M.readTree("{\"type\":\"string\",\"format\":\"ipv6\"}"));
        for (String ok : List.of("::", "::1", "fe80::1", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "::ffff:192.0.2.1",
                "1:2:3:4:5:6:1.2.3.4", "1::2:3:4:5:6:7"))
            assertEquals(-1, GrammarPropertyTest.refusedAt(g, "\"" + ok + "\""), ok);
        for (String bad : List.of("1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", "1:2:3:4:5:6:7:1.2.3.4", ":1"))
            assertTrue(GrammarPropertyTest.refusedAt(g, "\"" + bad + "\"") >= 0, bad);
    }

    static boolean parses(Runnable r) {
        try {
            r.run();
            return true;
        } catch (RuntimeException e) {
            return false;
        }
    }

    static final String ATOM = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
    static final Pattern EMAIL = Pattern.compile("(" + ATOM + "(\\." + ATOM + ")*)@(([A-Za-z0-9-]{1,63}\\.)+[A-Za-z]{2,63})");

    /** RFC 5321's Mailbox of a dot-atom local part: at most 64 characters there, 254 in all, labels of 1 to 63, no hyphen first or last. */
    static boolean email(String s) {
        var m = EMAIL.matcher(s);
        if (!m.matches() || m.group(1).length() > 64 || s.length() > 254) return false;
        for (String label : m.group(3).split("\\.")) if (label.startsWith("-") || label.endsWith("-")) return false;
        return true;
    }

    static boolean ipv4(String s) {
        String[] p = s.split("\\.", -1);
        if (p.length != 4) return false;
        for (String x : p) if (!x.matches("0|[1-9][0-9]{0,2}") || Integer.parseInt(x) > 255) return false;
        return true;
    }

    @Test
    void inObjectsAndToolCallsToo() throws Exception {
        String params = "{\"type\":\"object\",\"properties\":{\"day\":{\"type\":\"string\",\"format\":\"date\"},"
                + "\"code\":{\"type\":\"string\",\"pattern\":\"[A-Z]{3}\"},\"note\":{\"type\":\"string\",\"maxLength\":8}},"
                + "\"required\":[\"day\",\"code\",\"note\"],\"additionalProperties\":false}";
        JsonNode schema = M.readTree(params);
        for (long seed = 0; seed < 8; seed++) {
            GrammarPropertyTest.Out o = GrammarPropertyTest.run(Grammar.jsonSchema(schema), 120, seed, 1.0);
            assertTrue(o.eos(), o.text());
            assertTrue(validator(schema).validate(M.readTree(o.text())).isEmpty(), o.text());
            // a forced call: the constrained strings travel as JSON (string="false"), the parser reads them back
            GrammarPropertyTest.Out call = GrammarPropertyTest.run(Grammar.toolCall(List.of("f"), List.of(schema)), 300, seed, 1.0);
            assertTrue(call.eos(), call.text());
            List<String[]> calls = GrammarPropertyTest.parse(call.text()).calls();
            assertEquals(1, calls.size(), call.text());
            JsonNode args = M.readTree(calls.getFirst()[1]);
            assertTrue(validator(schema).validate(args).isEmpty(), call.text() + "\n" + args);
        }
    }

    @Test
    void enumValuesAreFilteredByTheStringKeywords() throws Exception {
        Grammar g = Grammar.jsonSchema(M.readTree("{\"type\":\"string\",\"enum\":[\"a\",\"bbb\",\"2024-01-01\"],\"maxLength\":3}"));
        assertEquals(-1, GrammarPropertyTest.refusedAt(g, "\"bbb\""));
        assertTrue(GrammarPropertyTest.refusedAt(g, "\"2024-01-01\"") >= 0);
        Grammar f = Grammar.jsonSchema(M.readTree("{\"type\":\"string\",\"enum\":[\"a\",\"2024-01-01\"],\"format\":\"date\"}"));
        assertEquals(-1, GrammarPropertyTest.refusedAt(f, "\"2024-01-01\""));
        assertTrue(GrammarPropertyTest.refusedAt(f, "\"a\"") >= 0);
        Grammar p = Grammar.jsonSchema(M.readTree("{\"enum\":[\"ab\",\"abc\",5],\"pattern\":\"a.\"}"));
        assertTrue(GrammarPropertyTest.refusedAt(p, "\"abc\"") >= 0, "the whole string must match");
        assertEquals(-1, GrammarPropertyTest.refusedAt(p, "5"), "a pattern holds strings only");
    }

    /** What cannot be held is refused naming the keyword; a schema itself wrong is invalid rather than unsupported. */
    @Test
    void refusals() throws Exception {
        String[][] cases = {
                {"{\"type\":\"string\",\"format\":\"uri\"}", "format", "false",
                        "format \"uri\" at '' is not supported by constrained decoding (supported: date-time, date, time, duration, email, hostname, ipv4, ipv6, uuid)"},
                {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "pattern", "false",
                        "pattern at '': backreferences ('\\1') are not supported (at position 3)"},
                {"{\"type\":\"string\",\"pattern\":5}", "pattern", "true", "pattern at '' must be a string (a regular expression)"},
                {"{\"type\":\"string\",\"minLength\":-1}", "minLength", "true", "minLength at '' must be a non-negative integer, got -1"},
                {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", "maxLength", "true", "maxLength is below minLength at ''"},
                {"{\"maxLength\":3}", "maxLength", "false", "maxLength at '' without type string is not supported: add \"type\": \"string\" next to it"},
                {"{\"type\":\"string\",\"pattern\":\"a\",\"format\":\"date\"}", "format", "false",
                        "'format' next to 'pattern' (at '') is not supported: keep one (a pattern can spell the format out)"},
                {"{\"type\":\"string\",\"pattern\":\"^a{2,3}$\",\"minLength\":4}", "minLength", "true",
                        "no value satisfies the schema at '': no string of at least 4 characters matches its pattern"},
                // unanchored, JSON Schema has values ("aaaa" holds "aa"): not the schema's fault, this server's limit
                {"{\"type\":\"string\",\"pattern\":\"a{2,3}\",\"minLength\":4}", "minLength", "false",
                        "no string of at least 4 characters matches its pattern at '' as a whole (constrained decoding matches a"
                                + " pattern against the whole string, as if written ^(?:...)$, where JSON Schema also takes a match"
                                + " inside it): write the pattern for the whole string, e.g. '^[A-Z]' as '^[A-Z].*$'"},
                {"{\"type\":\"string\",\"pattern\":\"^[A-Z]\",\"minLength\":3}", "minLength", "false", null},
                {"{\"type\":\"string\",\"format\":\"uuid\",\"maxLength\":30}", "maxLength", "true",
                        "no value satisfies the schema at '': no string of 0 to 30 characters matches its format \"uuid\""},
                {"{\"type\":\"string\",\"format\":\"hostname\",\"minLength\":300}", "minLength", "true",
                        "no value satisfies the schema at '': its format \"hostname\" allows at most 253 characters, fewer than its minLength 300"},
                {"{\"type\":\"string\",\"pattern\":\"[a-z]{0,4000}\",\"maxLength\":4000}", "maxLength", "false", null},
                {"{\"type\":\"string\",\"minLength\":600000000}", "minLength", "false",
                        "minLength 600000000 at '' makes the shortest value of the schema longer than 536,870,912 bytes, more than any output can hold"},
                {"{\"type\":\"integer\",\"format\":\"int64\"}", "format", "false", null}};
        GrammarPropertyTest.assertRefusals(cases);
        // a length alone is a count, however large
        assertEquals(2, Grammar.jsonSchema(M.readTree("{\"type\":\"string\",\"maxLength\":2147483647}")).minBytes());
    }

    /** Past minLength, without a maxLength, more characters lead back to the same state (whose mask is then cached). */
    @Test
    void aLongStringStaysOneStateWithoutAMaximum() throws Exception {
        for (String schema : List.of("{\"type\":\"string\",\"minLength\":2}", "{\"type\":\"string\",\"minLength\":2,\"pattern\":\"[a-z]+\"}")) {
            GState s = Grammar.jsonSchema(M.readTree(schema)).startState();
            for (char ch : "\"abc".toCharArray()) s = s.next(ch);
            assertEquals(s, s.next('d'), schema);
            assertEquals(s, s.next('d').next('e'), schema);
            assertNotNull(s.next('"'), schema);
        }
        assertTrue(GrammarPropertyTest.refusedAt(Grammar.jsonSchema(M.readTree("{\"type\":\"string\",\"minLength\":2}")), "\"\"") >= 0,
                "an empty string is too short");
    }
}
