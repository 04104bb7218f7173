package io.ds4j.grammar;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.TreeSet;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Random EBNF grammars (recursive rules, rules that may be empty, nested repeats, classes of multi-byte characters)
 * against an independent reference written here: each grammar is built as a tree, printed in the notation, compiled by
 * {@link Grammar#ebnf}, and judged by a direct matcher over the tree (the set of end positions of each part, rules
 * memoized by start position). Both must agree on which grammars are refused (left recursion, a root no finite text
 * matches), on random strings and on strings walked from the compiled grammar (each state's fewest bytes to a match
 * checked exact on the way), one character changed too; and sampled token by token with the real tokenizer, outputs
 * must match.
 */
class EbnfPropertyTest {
    private static final int[] ALPHABET = "ab(x\" 日😀".codePoints().toArray();

    sealed interface E permits Lit, Cls, Any, Ref, Seq, Alt, Rep {}

    record Lit(String text) implements E {}

    record Cls(Set<Integer> members, boolean negate) implements E {}

    record Any() implements E {}

    record Ref(int rule) implements E {}

    record Seq(List<E> items) implements E {}

    record Alt(List<E> options) implements E {}

    record Rep(E body, int min, int max) implements E {}

    static E random(SplittableRandom r, int rules, int depth) {
        int pick = depth >= 3 ? r.nextInt(4) : r.nextInt(8);
        switch (pick) {
            case 0 -> {
                StringBuilder b = new StringBuilder();
                int n = r.nextInt(4);
                for (int i = 0; i < n; i++) b.appendCodePoint(ALPHABET[r.nextInt(ALPHABET.length)]);
                return new Lit(b.toString());
            }
            case 1 -> {
                Set<Integer> m = new TreeSet<>();
                int n = 1 + r.nextInt(3);
                for (int i = 0; i < n; i++) m.add(ALPHABET[r.nextInt(ALPHABET.length)]);
                return new Cls(m, r.nextInt(4) == 0);
            }
            case 2 -> {
                return r.nextInt(3) == 0 ? new Any() : new Ref(r.nextInt(rules));
            }
            case 3 -> {
                return r.nextInt(2) == 0 ? new Ref(r.nextInt(rules)) : new Lit(String.valueOf((char) ALPHABET[r.nextInt(3)]));
            }
            case 4, 5 -> {
                List<E> items = new ArrayList<>();
                int n = 2 + r.nextInt(2);
                for (int i = 0; i < n; i++) items.add(random(r, rules, depth + 1));
                return new Seq(items);
            }
            case 6 -> {
                List<E> options = new ArrayList<>();
                int n = 2 + r.nextInt(2);
                for (int i = 0; i < n; i++) options.add(random(r, rules, depth + 1));
                return new Alt(options);
            }
            default -> {
                int min = r.nextInt(3), kind = r.nextInt(4);
                int max = kind == 0 ? -1 : kind == 1 ? min : min + r.nextInt(3);
                return new Rep(random(r, rules, depth + 1), min, max);
            }
        }
    }

    static String name(int rule) {
        return rule == 0 ? "root" : "r" + rule;
    }

    static String print(E e) {
        return switch (e) {
            case Lit l -> {
                StringBuilder b = new StringBuilder("\"");
                l.text().codePoints().forEach(c -> b.append(c == '"' ? "\\\"" : c == '\\' ? "\\\\" : new String(Character.toChars(c))));
                yield b.append('"').toString();
            }
            case Cls c -> {
                StringBuilder b = new StringBuilder(c.negate() ? "[^" : "[");
                for (int m : c.members()) b.append("]\\^-".indexOf(m) >= 0 ? "\\" : "").appendCodePoint(m);
                yield b.append(']').toString();
            }
            case Any a -> ".";
            case Ref f -> name(f.rule());
            case Seq s -> "(" + String.join(" ", s.items().stream().map(EbnfPropertyTest::print).toList()) + ")";
            case Alt a -> "(" + String.join(" | ", a.options().stream().map(EbnfPropertyTest::print).toList()) + ")";
            case Rep p -> "(" + print(p.body()) + ")" + (p.max() < 0 ? (p.min() == 0 ? "*" : p.min() == 1 ? "+" : "{" + p.min() + ",}")
                    : p.min() == 0 && p.max() == 1 ? "?" : p.min() == p.max() ? "{" + p.min() + "}" : "{" + p.min() + "," + p.max() + "}");
        };
    }

    // ------------------------------------------------------------------------------------------ the reference

    static final int FAR = Integer.MAX_VALUE / 4;

    /** The fewest code points of each rule (FAR: no finite text), by iterating to a fixed point. */
    static int[] minLengths(List<E> rules) {
        int[] min = new int[rules.size()];
        Arrays.fill(min, FAR);
        for (boolean changed = true; changed; ) {
            changed = false;
            for (int i = 0; i < min.length; i++) {
                int m = minLen(rules.get(i), min);
                if (m < min[i]) {
                    min[i] = m;
                    changed = true;
                }
            }
        }
        return min;
    }

    static int minLen(E e, int[] min) {
        return switch (e) {
            case Lit l -> (int) l.text().codePoints().count();
            case Cls c -> 1;
            case Any a -> 1;
            case Ref f -> min[f.rule()];
            case Seq s -> Math.min(FAR, s.items().stream().mapToInt(x -> minLen(x, min)).sum());
            case Alt a -> a.options().stream().mapToInt(x -> minLen(x, min)).min().orElse(FAR);
            case Rep p -> p.min() == 0 ? 0 : Math.min(FAR, p.min() * minLen(p.body(), min));
        };
    }

    /** The rules e may use before any text of its own (through parts that may be empty). */
    static void firstRefs(E e, int[] min, BitSet out) {
        switch (e) {
            case Ref f -> out.set(f.rule());
            case Seq s -> {
                for (E x : s.items()) {
                    firstRefs(x, min, out);
                    if (minLen(x, min) != 0) break;
                }
            }
            case Alt a -> a.options().forEach(x -> firstRefs(x, min, out));
            case Rep p -> {
                if (p.max() != 0) firstRefs(p.body(), min, out);
            }
            default -> { }
        }
    }

    static boolean leftRecursive(List<E> rules, int[] min) {
        int n = rules.size();
        boolean[][] reach = new boolean[n][n];
        for (int i = 0; i < n; i++) {
            BitSet f = new BitSet();
            firstRefs(rules.get(i), min, f);
            for (int j = f.nextSetBit(0); j >= 0; j = f.nextSetBit(j + 1)) reach[i][j] = true;
        }
        for (int k = 0; k < n; k++) for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) reach[i][j] |= reach[i][k] && reach[k][j];
        for (int i = 0; i < n; i++) if (reach[i][i]) return true;
        return false;
    }

    /** The direct matcher over one text: end positions of each part from a start position. */
    static final class Matcher {
        final List<E> rules;
        final int[] t;
        final Map<Long, BitSet> memo = new HashMap<>();

        Matcher(List<E> rules, String text) {
            this.rules = rules;
            this.t = text.codePoints().toArray();
        }

        boolean matches() {
            return ends(rules.getFirst(), 0).get(t.length);
        }

        BitSet ends(E e, int pos) {
            BitSet out = new BitSet();
            switch (e) {
                case Lit l -> {
                    int[] cps = l.text().codePoints().toArray();
                    if (pos + cps.length <= t.length && Arrays.equals(cps, Arrays.copyOfRange(t, pos, pos + cps.length))) out.set(pos + cps.length);
                }
                case Cls c -> {
                    if (pos < t.length && c.members().contains(t[pos]) != c.negate()) out.set(pos + 1);
                }
                case Any a -> {
                    if (pos < t.length) out.set(pos + 1);
                }
                case Ref f -> {
                    long key = (long) f.rule() << 32 | pos;
                    BitSet known = memo.get(key);
                    if (known == null) {
                        known = ends(rules.get(f.rule()), pos);
                        memo.put(key, known);
                    }
                    out.or(known);
                }
                case Seq s -> {
                    BitSet at = new BitSet();
                    at.set(pos);
                    for (E x : s.items()) at = step(x, at);
                    out.or(at);
                }
                case Alt a -> a.options().forEach(x -> out.or(ends(x, pos)));
                case Rep p -> {
                    BitSet at = new BitSet();
                    at.set(pos);
                    for (int i = 0; i < p.min(); i++) at = step(p.body(), at);
                    out.or(at);
                    for (int i = p.min(); p.max() < 0 || i < p.max(); i++) {
                        BitSet next = step(p.body(), at);
                        BitSet fresh = (BitSet) next.clone();
                        fresh.andNot(out);
                        out.or(next);
                        if (p.max() < 0 && fresh.isEmpty()) break;
                        at = next;
                    }
                }
            }
            return out;
        }

        BitSet step(E e, BitSet from) {
            BitSet out = new BitSet();
            for (int p = from.nextSetBit(0); p >= 0; p = from.nextSetBit(p + 1)) out.or(ends(e, p));
            return out;
        }
    }

    static String randomText(SplittableRandom r) {
        StringBuilder b = new StringBuilder();
        int n = r.nextInt(8);
        for (int i = 0; i < n; i++) b.appendCodePoint(ALPHABET[r.nextInt(ALPHABET.length)]);
        return b.toString();
    }

    // ---------------------------------------------------------------------------------------------------- tests

    @Test
    void agreesWithTheReference() {
        SplittableRandom r = new SplittableRandom(17);
        int compiled = 0, refusedLeft = 0, refusedInfinite = 0, matched = 0;
        for (int g = 0; g < 300; g++) {
            int n = 1 + r.nextInt(4);
            List<E> rules = new ArrayList<>();
            for (int i = 0; i < n; i++) rules.add(random(r, n, 0));
            StringBuilder text = new StringBuilder();
            for (int i = 0; i < n; i++) text.append(name(i)).append(" ::= ").append(print(rules.get(i))).append('\n');
            int[] min = minLengths(rules);
            boolean left = leftRecursive(rules, min), infinite = min[0] >= FAR;
            Grammar grammar;
            try {
                grammar = Grammar.ebnf(text.toString());
            } catch (UnsupportedGrammarException e) {
                if (left) {
                    assertTrue(e.getMessage().contains("left recursion"), text + e.getMessage());
                    refusedLeft++;
                } else {
                    assertTrue(infinite, text + " refused: " + e.getMessage());
                    assertTrue(e.getMessage().contains("matches no finite text"), text + e.getMessage());
                    refusedInfinite++;
                }
                continue;
            }
            assertFalse(left, text + " is left-recursive, yet compiled");
            assertFalse(infinite, text + " has no finite root, yet compiled");
            compiled++;
            GState start = grammar.startState();
            for (int i = 0; i < 80; i++) {
                String s = randomText(r);
                boolean ref = new Matcher(rules, s).matches();
                assertEquals(ref, RegexPropertyTest.ours(start, s), text + " on '" + s + "'");
                if (ref) matched++;
            }
            for (int i = 0; i < 12; i++) {
                String s = RegexPropertyTest.generate(start, r, text.toString());
                if (s == null) continue;
                assertTrue(new Matcher(rules, s).matches(), text + " generated '" + s + "'");
                matched++;
                int[] cps = s.codePoints().toArray();
                if (cps.length == 0) continue;
                cps[r.nextInt(cps.length)] = ALPHABET[r.nextInt(ALPHABET.length)];
                String m = new String(cps, 0, cps.length);
                assertEquals(new Matcher(rules, m).matches(), RegexPropertyTest.ours(start, m), text + " on '" + m + "'");
            }
        }
        // the draw covers each outcome well
        assertTrue(compiled >= 150 && refusedLeft >= 20 && refusedInfinite >= 5 && matched >= 2000,
                compiled + " compiled, " + refusedLeft + " left-recursive, " + refusedInfinite + " infinite, " + matched + " matches");
    }

    /** A grammar after the reasoning (thinking mode), beside tools in auto mode, and continuing a given start. */
    @Test
    void afterReasoningAndBesideOptionalToolCalls() throws Exception {
        String text = "root ::= \"[\" item (\", \" item)* \"]\"\nitem ::= [a-z]{1,6} | root";
        Grammar g = Grammar.ebnf(text);
        for (long seed = 0; seed < 4; seed++) {
            GrammarPropertyTest.Out o = GrammarPropertyTest.run(g.afterThinking(), 80, seed, 1.0);
            assertTrue(o.eos(), o.text());
            int end = o.text().indexOf("</think>");
            assertTrue(end >= 0, o.text());
            assertTrue(RegexGrammarTest.matches(g, o.text().substring(end + "</think>".length())), o.text());
        }
        com.fasterxml.jackson.databind.JsonNode p = new com.fasterxml.jackson.databind.ObjectMapper()
                .readTree("{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}},\"required\":[\"q\"]}");
        Grammar tools = Grammar.optionalToolCalls(List.of("search"), List.of(p), List.of(true), true, g);
        assertTrue(GrammarPropertyTest.refusedAt(tools, "Free text") >= 0, "the content is held to the grammar");
        for (long seed = 0; seed < 4; seed++) {
            GrammarPropertyTest.Out o = GrammarPropertyTest.run(tools, 60, seed, 1.0);
            assertTrue(o.eos(), o.text());
            assertTrue(RegexGrammarTest.matches(g, o.text()) || o.text().startsWith("\n\n<｜DSML｜tool_calls>"), o.text());
        }
        assertNotNull(g.after("[ab, [c"));
        assertNull(g.after("[ab]]"));
        assertEquals(2, g.after("[ab, [c").minBytes(), "']]' closes both");
    }

    /** One token per sample: random logits, the real tokenizer, the mask and steering of {@link TokenConstraint}. */
    @Test
    void tokenOutputsMatchTheirGrammars() {
        List<String> grammars = List.of(
                "root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\nterm ::= [0-9]+ | \"(\" expr \")\"",
                "root ::= \"{\" pair (\", \" pair)* \"}\"\npair ::= key \": \" value\nkey ::= [a-z]+\nvalue ::= [0-9]+ | root",
                "root ::= (\"日本\" | [α-ω]+ | \"😀\")+ \".\"",
                "root ::= line+\nline ::= [A-Z] [a-z ]* \"\\n\"");
        SplittableRandom r = new SplittableRandom(9);
        for (String text : grammars) {
            Grammar g = Grammar.ebnf(text);
            for (int k = 0; k < 4; k++) {
                int budget = 10 + r.nextInt(40);
                GrammarPropertyTest.Out o = GrammarPropertyTest.run(g, budget, r.nextLong(), k == 0 ? 0 : 1.0);
                assertTrue(o.eos(), text + " within " + budget + ": " + o.text());
                assertTrue(RegexGrammarTest.matches(g, o.text()), text + " -> '" + o.text() + "'");
            }
        }
    }
}
