package io.ds4j.grammar;

import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The EBNF grammar ({@link Grammar#ebnf}) byte by byte: the notation (literals and their escapes, classes, any
 * character, groups, alternatives, repeats, comments, bodies over several lines), recursion (nested brackets,
 * arithmetic, JSON written as rules), rules that may end without text, the fewest bytes to a match, the nesting limit,
 * and each refusal with the line and column it names.
 */
class EbnfGrammarTest {
    static boolean matches(Grammar g, String text) {
        return RegexGrammarTest.matches(g, text);
    }

    static void accepts(String grammar, String... texts) {
        Grammar g = Grammar.ebnf(grammar);
        for (String t : texts) assertTrue(matches(g, t), grammar + "\nmust match '" + t + "'");
    }

    static void refuses(String grammar, String... texts) {
        Grammar g = Grammar.ebnf(grammar);
        for (String t : texts) assertFalse(matches(g, t), grammar + "\nmust not match '" + t + "'");
    }

    static void refused(String grammar, String says, int line, int column) {
        UnsupportedGrammarException e = assertThrows(UnsupportedGrammarException.class, () -> Grammar.ebnf(grammar), grammar);
        assertTrue(e.getMessage().contains(says), e.getMessage());
        assertEquals(line, e.line(), e.getMessage());
        assertEquals(column, e.column(), e.getMessage());
    }

    @Test
    void theNotation() {
        accepts("root ::= \"abc\"", "abc");
        refuses("root ::= \"abc\"", "", "ab", "abcd");
        accepts("root ::= \"a\\\"b\\\\c\\n\\t\\x41\\u00e9\\U0001F600\\/\"", "a\"b\\c\n\tAé😀/");
        accepts("root ::= \"héllo 日本 😀\"", "héllo 日本 😀");
        accepts("root ::= [a-c] [^0-9\\]] [\\-x]", "a!-", "c]x".replace("]", "%"));
        refuses("root ::= [a-c] [^0-9\\]] [\\-x]", "d!-", "a5-", "a]-");
        accepts("root ::= [^] .", "\n\n", "日😀");
        accepts("root ::= (\"x\" | \"y\")+ \"z\"? \"w\"* [0-9]{2,3} \"q\"{2} \"r\"{1,} \"s\"{,2}",
                "xyzw12qqr", "yy123qqrrrss", "x99qqr");
        refuses("root ::= (\"x\" | \"y\")+ \"z\"? \"w\"* [0-9]{2,3} \"q\"{2} \"r\"{1,} \"s\"{,2}",
                "z12qqr", "x1qqr", "x1234qqr", "x12qr", "x12qq", "x12qqrsss");
        // the empty literal and the empty group match nothing, so they make a part optional
        accepts("root ::= \"a\" (\"\" | \"b\") ()", "a", "ab");
        // comments; a rule's body over several lines; rules in any order
        accepts("""
                # a greeting
                root ::= greeting  # then a name
                         " " name |
                         "bye"
                name ::=
                  [A-Z] [a-z]*   # capitalised
                greeting ::= "hello" | "hi"
                """, "hello Ann", "hi Bo", "bye");
        refuses("""
                root ::= greeting " " name
                name ::= [A-Z] [a-z]*
                greeting ::= "hello"
                """, "hello ann", "hello");
        // a rule name may hold digits, '_' and '-'
        accepts("root ::= a_1 b-2\na_1 ::= \"x\"\nb-2 ::= \"y\"", "xy");
        // a repeat may stand apart from its element, as llama.cpp reads it (inside a group, over a line break too)
        accepts("root ::= \"a\" * \"b\" {2} (\"c\"\n  +)", "bbc", "aabbccc");
        refuses("root ::= \"a\" * \"b\" {2} (\"c\"\n  +)", "abc", "abb");
        // empty alternatives, and an empty body, match the empty text
        accepts("root ::= \"a\" |", "", "a");
        accepts("root ::=", "");
    }

    @Test
    void recursion() {
        String brackets = "root ::= (\"(\" root \")\" | \"[\" root \"]\")*";
        accepts(brackets, "", "()", "([])()", "[[[()]]]");
        refuses(brackets, "(", "(]", ")(", "([)]");
        String arithmetic = """
                root ::= expr
                expr ::= term (("+" | "-") term)*
                term ::= factor (("*" | "/") factor)*
                factor ::= [0-9]+ | "(" expr ")" | "-" factor
                """;
        accepts(arithmetic, "1", "1+2*3", "(1+2)*-3", "((4))/(5-6)", "--7");
        refuses(arithmetic, "", "1+", "(1", "1)", "*2", "1++2");
        String json = """
                root ::= value
                value ::= object | array | string | number | "true" | "false" | "null"
                object ::= "{" ws (member ("," ws member)*)? "}" ws
                member ::= string ":" ws value
                array ::= "[" ws (value ("," ws value)*)? "]" ws
                string ::= "\\"" ([^"\\\\] | "\\\\" ["\\\\/bfnrt])* "\\"" ws
                number ::= "-"? [0-9]+ ("." [0-9]+)? ws
                ws ::= [ \\t\\n]*
                """;
        accepts(json, "{}", "{\"a\": [1, 2.5, {\"b\": null}], \"c\": \"x\\\"y\"}", "[[], [[]], true]");
        refuses(json, "{", "{\"a\" 1}", "[1,]", "\"open", "{\"a\": tru}");
    }

    @Test
    void rulesThatMayEndWithoutText() {
        // a rule that may be empty, repeated: no endless descent, and the text around it still parses
        accepts("root ::= \"<\" item* \">\"\nitem ::= \"x\"?", "<>", "<x>", "<xxx>");
        refuses("root ::= \"<\" item* \">\"\nitem ::= \"x\"?", "<", "<y>");
        accepts("root ::= a b a\na ::= \"\" | \"a\"\nb ::= a a", "", "a", "aaa");
        refuses("root ::= a b a\na ::= \"\" | \"a\"\nb ::= a a", "aaaaa", "b");
        assertTrue(Grammar.ebnf("root ::= e e e\ne ::= ()").startState().accepting());
    }

    @Test
    void distancesAreTheFewestBytesToAMatch() {
        Grammar g = Grammar.ebnf("root ::= \"(\" inner \")\"\ninner ::= \"日\" | \"ab\" | root");
        assertEquals(4, RegexGrammarTest.walk(g, "").dist());
        assertEquals(3, RegexGrammarTest.walk(g, "(").dist());
        assertEquals(4, RegexGrammarTest.walk(g, "((").dist());
        assertEquals(1, RegexGrammarTest.walk(g, "((ab)").dist());
        assertEquals(0, RegexGrammarTest.walk(g, "((ab))").dist());
        // dist is exact along random walks of a recursive grammar (checked byte by byte)
        SplittableRandom r = new SplittableRandom(5);
        for (int i = 0; i < 40; i++) assertNotNull(RegexPropertyTest.generate(g.startState(), r, "brackets"));
    }

    @Test
    void nestingPastTheLimitIsAGrammarLimit() {
        Grammar g = Grammar.ebnf("root ::= \"(\" root \")\" | \"x\"");
        String open = "(".repeat(Ebnf.MAX_NESTING - 1);
        GState closed = RegexGrammarTest.walk(g, open + "x" + ")".repeat(Ebnf.MAX_NESTING - 1));
        assertNotNull(closed, "as deep as the limit");
        assertTrue(closed.accepting());
        GState deepest = RegexGrammarTest.walk(g, open + "(");
        assertNotNull(deepest);
        GrammarLimitException e = assertThrows(GrammarLimitException.class, () -> deepest.next('x'));
        assertTrue(e.getMessage().contains("more than " + Ebnf.MAX_NESTING + " uses of the grammar's rules"), e.getMessage());
    }

    /** A tail call does not grow the stack: right recursion runs past the nesting limit in constant depth and time. */
    @Test
    @org.junit.jupiter.api.Timeout(30)
    void rightRecursionRunsInAStackOfConstantDepth() {
        Grammar g = Grammar.ebnf("root ::= [a-z] root | [a-z]");
        GState s = RegexGrammarTest.walk(g, "a".repeat(5 * Ebnf.MAX_NESTING));
        assertNotNull(s);
        assertTrue(s.accepting());
        assertEquals(RegexGrammarTest.walk(g, "ab"), RegexGrammarTest.walk(g, "abcdef"), "the same state after every letter");
        Grammar list = Grammar.ebnf("root ::= item (\",\" root)?\nitem ::= [0-9]+");
        assertTrue(RegexGrammarTest.matches(list, "1,22,3".repeat(2000).replace("31", "3,1")));
    }

    /**
     * Many rules that may match nothing in a row: every character may end any of them and begin the next, so each byte
     * steps them all. A few are cheap; a run of 20 reaches the work limit on the mask after a letter and ends the
     * request with a grammar limit, in bounded time (a run of 80 held the engine for minutes).
     */
    @Test
    @org.junit.jupiter.api.Timeout(120)
    void runsOfRulesThatMayBeEmptyAreBoundedWork() {
        // a comment of its own makes each grammar a new one: no mask of another test's is found in the shared cache
        java.util.function.IntFunction<Grammar> chain = k -> {
            StringBuilder b = new StringBuilder("# " + System.nanoTime() + "\nroot ::=");
            for (int i = 0; i < k; i++) b.append(" n").append(i);
            b.append(" \"!\"\n");
            for (int i = 0; i < k; i++) b.append("n").append(i).append(" ::= [a-z]*\n");
            return Grammar.ebnf(b.toString());
        };
        GrammarPropertyTest.Out o = GrammarPropertyTest.run(chain.apply(3), 30, 1, 1.0);
        assertTrue(o.eos() && RegexGrammarTest.matches(chain.apply(3), o.text()), o.text());
        // twenty in a row, as docs/api.md says, already go past it
        TokenConstraint c = chain.apply(20).constraint(GrammarPropertyTest.TOK);
        GrammarLimitException e = assertThrows(GrammarLimitException.class, () -> {
            // the first token's mask may fit; one after a letter steps all 20 rules for every letter of every token
            c.advance(GrammarPropertyTest.TOK.encode("ab")[0]);
            c.allowed(100);
        });
        assertTrue(e.getMessage().contains("step its rules more than " + Ebnf.MAX_WORK + " times"), e.getMessage());
        // rules that split one text many ways, as docs/api.md's example
        TokenConstraint split = Grammar.ebnf("root ::= item{0,100} \".\"\nitem ::= [a-z]+").constraint(GrammarPropertyTest.TOK);
        assertThrows(GrammarLimitException.class, () -> {
            for (int i = 0; i < 20; i++) {
                split.allowed(1000);
                split.advance(GrammarPropertyTest.TOK.encode("abcd")[0]);
            }
        });
        // a run of a few is cheap: its masks step a small share of the limit
        TokenConstraint few = chain.apply(3).constraint(GrammarPropertyTest.TOK);
        few.advance(GrammarPropertyTest.TOK.encode("ab")[0]);
        few.allowed(100);
        assertTrue(few.maxWork() < Ebnf.MAX_WORK / 2, few.maxWork() + " frames");
    }

    /** JSON written as rules, sampled token by token: its masks step its frames far below the work limit. */
    @Test
    void anOrdinaryGrammarStaysFarBelowTheWorkLimit() throws Exception {
        // a comment of its own: its masks are computed here, not found in the cache shared with other tests
        Grammar g = Grammar.ebnf("# " + System.nanoTime() + "\n"
                + java.nio.file.Files.readString(java.nio.file.Path.of("tools/grammars/bench-person.gbnf")));
        long most = 0;
        for (long seed = 0; seed < 4; seed++) {
            TokenConstraint c = g.steeredConstraint(GrammarPropertyTest.TOK);
            SplittableRandom r = new SplittableRandom(seed);
            for (int i = 0; i < 150; i++) {
                long[] allowed = c.allowed(200 - i);
                int tok;
                do tok = r.nextInt(GrammarPropertyTest.TOK.vocabSize()); while (!io.ds4j.sampling.Constraint.has(allowed, tok));
                if (tok == GrammarPropertyTest.TOK.eosId()) break;
                c.advance(tok);
            }
            most = Math.max(most, c.maxWork());
        }
        assertTrue(most > 0, "the masks step frames");
        assertTrue(most < Ebnf.MAX_WORK / 20, most + " frames for one mask");
    }

    /**
     * Masks against each token's bytes stepped one by one: inside a string body of plain text (the shortcut of
     * precomputed tokens that keep the state), inside one that excludes one more character (no shortcut), at a
     * number and after a key.
     */
    @Test
    void masksAreEachTokensBytesStepped() throws Exception {
        Grammar g = Grammar.ebnf(java.nio.file.Files.readString(java.nio.file.Path.of("tools/grammars/bench-person.gbnf")));
        Grammar noDel = Grammar.ebnf("root ::= \"\\\"\" [^\"\\\\\\x7f\\x00-\\x1f]* \"\\\"\"");
        io.ds4j.text.Tokenizer tok = GrammarPropertyTest.TOK;
        for (var c : List.of(java.util.Map.entry(g, "{\"name\": \"Ann"), java.util.Map.entry(noDel, "\"x"),
                java.util.Map.entry(g, "{\"name\": \"Ann\", \"age\": 4"), java.util.Map.entry(g, "{\"name\":"))) {
            GState s = RegexGrammarTest.walk(c.getKey(), c.getValue());
            assertNotNull(s, c.getValue());
            TokenConstraint tc = c.getKey().after(c.getValue()).constraint(tok);
            long[] mask = tc.allowed(1 << 20);
            int allowed = 0;
            for (int t = 0; t < tok.vocabSize(); t++) {
                if (tok.isControl(t)) continue;
                byte[] b;
                try {
                    b = tok.tokenBytes(t);
                } catch (IllegalArgumentException e) {
                    continue; // no token of this tokenizer
                }
                boolean ok = b.length > 0 && RegexGrammarTest.walk(s, b) != null;
                assertEquals(ok, io.ds4j.sampling.Constraint.has(mask, t), c.getValue() + " then token " + t + " '" + tok.decode(new int[]{t}) + "'");
                if (ok) allowed++;
            }
            assertTrue(allowed > 0, c.getValue());
        }
        Ebnf.Frame body = (Ebnf.Frame) RegexGrammarTest.walk(g, "{\"name\": \"Ann");
        assertTrue(body.keepsStringText(), "the plain string body takes the shortcut");
        assertFalse(((Ebnf.Frame) RegexGrammarTest.walk(noDel, "\"x")).keepsStringText(), "a body without DEL does not");
    }

    /**
     * Rule uses nested deep that each leave a large counted repeat that may match nothing (the second breaker's grammar,
     * whose masks grew to seconds per token as the nesting deepened, the other requests waiting): every level's
     * repeat may take the next text, and merging those levels counts as work, so the request meets the limit.
     */
    @Test
    @org.junit.jupiter.api.Timeout(120)
    void repeatsLeftOpenAtEveryLevelCountAsWork() {
        TokenConstraint c = Grammar.ebnf("root ::= \"a\" root t | \"x\"\nt ::= ([^.]{1,3000} \".\")?").constraint(GrammarPropertyTest.TOK);
        int a8 = GrammarPropertyTest.TOK.encode("aaaaaaaa")[0];
        assertThrows(GrammarLimitException.class, () -> {
            for (int i = 0; i < Ebnf.MAX_NESTING / 8; i++) {
                c.allowed(4000);
                c.advance(a8);
            }
        });
    }

    @Test
    void refusalsNameWhatAndWhere() {
        refused("root ::= item\nitem ::= \"x\" thing", "rule 'thing' is used but never defined", 2, 14);
        refused("root ::= \"x\"\nroot ::= \"y\"", "rule 'root' is defined twice (first at line 1)", 2, 1);
        refused("start ::= \"x\"", "no rule 'root'", 1, 1);
        refused("", "the grammar is empty", 1, 1);
        refused("root ::= root \"a\" | \"a\"", "left recursion is not supported: rule 'root' begins with 'root'", 1, 1);
        refused("root ::= \"<\" a\na ::= b? c\nb ::= \"b\"\nc ::= d \"x\"\nd ::= a | \"d\"",
                "left recursion is not supported: rule 'a' begins with 'c', which begins with 'd', which begins with 'a' again"
                        + " before any text (whatever comes before that use may match nothing)", 2, 1);
        refused("root ::= \"(\" root \")\"", "rule 'root' matches no finite text", 1, 1);
        refused("root[max_tokens=3] ::= \"x\"", "rule options ('root[...] ::=') are not supported", 1, 5);
        refused("root ::= \"x\" (= \"y\")", "lookahead assertions", 1, 14);
        refused("root ::= tag(\"x\")", "macros ('tag(...)') are not supported", 1, 10);
        refused("root ::= \"\\x41B\"", "is one character to XGrammar and '\\x41' followed by 'B' to llama.cpp", 1, 11);
        refused("root ::= a.\na ::= \"x\"", "a '.' right after a rule name", 1, 11);
        refused("root ::= 'x'", "double quotes", 1, 10);
        refused("root ::= \"abc\ndef\"", "unterminated string", 1, 10);
        refused("root ::= [abc", "unterminated character class", 1, 10);
        refused("root ::= (\"a\"", "this '(' is never closed", 1, 10);
        refused("root ::= \"a\")", "this ')' closes no group", 1, 13);
        refused("root ::= \"a\" b ::= \"c\"", "a rule definition must begin its own line", 1, 16);
        refused("root ::= [\\d]", "shorthand classes such as '\\d' are not supported", 1, 11);
        refused("root ::= \"a\"++", "a repeat follows another", 1, 14);
        refused("root ::= * \"a\"", "nothing to repeat", 1, 10);
        refused("root ::= [a-z] {2,1}", "the minimum is above the maximum", 1, 16);
        refused("root ::= règle\nrègle ::= \"x\"", "rule names are ASCII letters, digits, '_' and '-'", 1, 11);
        refused("root ::= \"a\"{3,1}", "the minimum is above the maximum", 1, 13);
        refused("root ::= \"a\"{x}", "a repeat is written", 1, 13);
        refused("root ::= [z-a]", "its end is below its start", 1, 11);
        refused("root ::= \"\\q\"", "unknown escape '\\q'", 1, 11);
        refused("root ::= \"\\uD800\"", "surrogate", 1, 11);
        refused("root = \"x\"", "'::=' must follow the rule name 'root'", 1, 6);
        refused("root ::= \"x\"\n::= \"y\"", "'::=' without a rule name before it", 2, 1);
        // columns count characters: each emoji is one, not its two UTF-16 units
        refused("root ::= \"😀😀\" x", "rule 'x' is used but never defined", 1, 15);
        refused("::= \"y\"", "a rule must begin with its name", 1, 1);
    }

    @Test
    void aGrammarPastThePositionLimitIsRefused() {
        UnsupportedGrammarException e = assertThrows(UnsupportedGrammarException.class,
                () -> Grammar.ebnf("root ::= (\"ab\" | [0-9]){5000}"));
        assertTrue(e.getMessage().contains("more than " + Regex.MAX_POSITIONS + " NFA positions"), e.getMessage());
    }
}
