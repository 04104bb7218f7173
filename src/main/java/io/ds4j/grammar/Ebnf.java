package io.ds4j.grammar;

import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * A context-free grammar in the EBNF notation that llama.cpp (GBNF) and XGrammar (vLLM's
 * {@code structured_outputs.grammar}) share, as a byte-level grammar that the whole output must match: rules
 * {@code name ::= body}, the output being rule {@code root}. A body has string literals {@code "..."}, character classes
 * {@code [a-z]} / {@code [^"\\]} ({@code [^]}: any character), {@code .} (any character), rule names, groups
 * {@code ( )}, alternatives {@code |} and repetition {@code * + ? {m} {m,} {m,n} {,n}}; {@code #} starts a comment to
 * the end of the line; a rule's body may go on over several lines, a new rule begins a line with {@code name ::=}.
 *
 * <p>The rules are compiled into one NFA ({@link Regex#rules}: each rule a fragment that ends at the shared match node,
 * a use of a rule one call node), so a rule's own text steps as a pattern's does, with its states and transitions
 * kept. A {@link Frame} is one rule's live positions followed by what comes after the rule, a continuation that is
 * itself a state: the parse stack as a chain of frames. {@link States.Union} merges frames that differ only in their
 * continuation, so ambiguous parses share their stacks instead of multiplying.
 *
 * <p>Refused when the grammar is compiled ({@link UnsupportedGrammarException}, naming line and column): a syntax
 * error, a rule used but never defined or defined twice, no rule {@code root}, left recursion (a rule that can begin
 * with itself, directly or through others: {@code expr ::= expr "+" term}; write it with repetition,
 * {@code expr ::= term ("+" term)*}), a {@code root} that no finite text matches, more than {@value #MAX_RULES} rules
 * or {@value Regex#MAX_POSITIONS} NFA positions, and XGrammar's own extensions (rule options {@code name[...] ::=},
 * lookahead {@code (= ...)}, macros). Ambiguous spellings that the two notations read differently are refused rather
 * than guessed: a {@code \x} escape with more than two hex digits, a {@code .} written right after a rule name.
 * At most {@value #MAX_NESTING} rule uses may be open at once in an output (a tail call, a rule used as the last thing
 * of its rule, opens none: right recursion runs in constant depth), and one token's mask may step frames through rule
 * uses and ends at most {@value #MAX_WORK} times: a state that would go past either ends the request with
 * {@link GrammarLimitException}, as a schema's too many live alternatives do.
 */
final class Ebnf {
    private Ebnf() {}

    /** The most rules a grammar may define (each run of the distance search is over all of them). */
    static final int MAX_RULES = 1_000;
    /** The most rule uses an output may have open at once: the parse stack's depth. */
    static final int MAX_NESTING = 1_000;
    /** Groups nested deeper than this in one rule are refused (the parser recurses once per level). */
    static final int MAX_DEPTH = 200;

    /**
     * The state before any output of a grammar.
     * @throws UnsupportedGrammarException for a grammar outside the supported notation (see the class comment)
     */
    static GState compile(String text) {
        Parser p = new Parser(text);
        List<Regex.Node> bodies = p.parse();
        Regex nfa;
        try {
            nfa = Regex.rules(bodies);
        } catch (UnsupportedRegexException e) {
            throw new UnsupportedGrammarException("the grammar is too large: it compiles to more than " + Regex.MAX_POSITIONS
                    + " NFA positions, the limit that bounds the work per token (each character, class, alternative, loop and"
                    + " rule use is one; a repeat {n,m} holds m copies of what it repeats)", 0, 0);
        }
        leftRecursion(nfa, p);
        if (nfa.ruleMin(0) >= GState.FAR)
            throw new UnsupportedGrammarException("rule 'root' matches no finite text (every alternative needs itself"
                    + " again, or a character no class allows)", p.line(p.defined[0]), p.column(p.defined[0]));
        return new Frame(nfa.entry(0), States.End.INSTANCE, 1);
    }

    /** Refuses a rule that can begin with itself: the parse would descend into it forever before reading anything. */
    private static void leftRecursion(Regex nfa, Parser p) {
        int n = p.names.size();
        BitSet[] first = new BitSet[n];
        for (int r = 0; r < n; r++) first[r] = nfa.callsFirst(r);
        // depth-first over "may begin with"; a rule met again on the path is a cycle
        int[] state = new int[n];
        for (int r = 0; r < n; r++) {
            if (state[r] != 0) continue;
            List<Integer> path = new ArrayList<>();
            int cycle = walk(r, first, state, path);
            if (cycle >= 0) {
                StringBuilder chain = new StringBuilder("'" + p.names.get(cycle) + "'");
                int at = path.indexOf(cycle);
                for (int j = at + 1; j < path.size(); j++) chain.append(" begins with '").append(p.names.get(path.get(j))).append("', which");
                chain.append(" begins with '").append(p.names.get(cycle)).append("'");
                throw new UnsupportedGrammarException("left recursion is not supported: rule " + chain + " again before any"
                        + " text (whatever comes before that use may match nothing); write it with a repeat instead, as"
                        + " expr ::= term (\"+\" term)* is written for expr ::= expr \"+\" term | term",
                        p.line(p.defined[cycle]), p.column(p.defined[cycle]));
            }
        }
    }

    /** Depth-first from r (state 1: on the path, 2: done); the rule that closes a cycle, or −1. */
    private static int walk(int r, BitSet[] first, int[] state, List<Integer> path) {
        state[r] = 1;
        path.add(r);
        for (int s = first[r].nextSetBit(0); s >= 0; s = first[r].nextSetBit(s + 1)) {
            if (state[s] == 1) return s;
            if (state[s] == 0) {
                int c = walk(s, first, state, path);
                if (c >= 0) return c;
            }
        }
        path.removeLast();
        state[r] = 2;
        return -1;
    }

    // ------------------------------------------------------------------------------------------------------ states

    /**
     * The most work one token mask may do in a grammar's rules: frames stepped together (a union's members, and the
     * frames a byte enters or leaves a rule through), live positions built ({@link #charge}), and frames merged through
     * their continuations ({@link States.Union#of}). The bound on a grammar's work
     * per token: ambiguous rules (text that many splits between rule uses match, {@code item{0,100}} with
     * {@code item ::= [a-z]+}), many rules that may match nothing in a row (each character can end any of them and
     * begin the next), rule uses nested deep before something other than their end, or large counted repeats met again
     * at every level, cost much per byte; past this the request ends with {@link GrammarLimitException} instead of
     * holding the engine for seconds per token, or minutes. Ordinary grammars stay far below it: tools/grammars/bench-person.gbnf, JSON of a
     * schema as rules, stays under 5 % of it per mask (EbnfGrammarTest checks it).
     */
    static final long MAX_WORK = 2_000_000;

    /** The frames stepped since {@link #countWork} began on this thread (−1: not counting). */
    private static final ThreadLocal<long[]> WORK = ThreadLocal.withInitial(() -> new long[]{-1});

    /**
     * Starts counting this thread's frame steps against {@link #MAX_WORK} (a token mask's walk), or stops (false).
     * @return the frames stepped since counting began (0 when it begins)
     */
    static long countWork(boolean on) {
        long[] w = WORK.get();
        long n = Math.max(0, w[0]);
        w[0] = on ? 0 : -1;
        return on ? 0 : n;
    }

    /**
     * Charges the building of a rule's live positions (a closure over them, a new state of a counted repeat such as
     * {@code [^.]{1,3000}}) to the work being counted: one step per {@value #POSITIONS_PER_STEP} positions, at least one.
     * @throws GrammarLimitException past {@link #MAX_WORK}
     */
    static void charge(int positions) {
        add(WORK.get(), 1 + positions / POSITIONS_PER_STEP);
    }

    /**
     * Charges frames merged through their continuations ({@link States.Union#of}) to the work being counted, one step
     * each: a merge runs down the continuations, as deep as the rule uses are nested.
     * @throws GrammarLimitException past {@link #MAX_WORK}
     */
    static void chargeSteps(int frames) {
        add(WORK.get(), frames);
    }

    /** Adds n steps to a thread's count w where it counts; past {@link #MAX_WORK}, a {@link GrammarLimitException}. */
    private static void add(long[] w, long n) {
        if (w[0] >= 0 && (w[0] += n) > MAX_WORK) throw GrammarLimitException.work(MAX_WORK);
    }

    /** NFA positions of a state built that count as one frame step of work. */
    static final int POSITIONS_PER_STEP = 64;

    /**
     * One byte's step over frames that share continuations: each frame stepped once (its result kept for the others
     * that reach it), and a frame met again while it is being stepped (a rule that may end without text, repeated)
     * adding nothing there, as the outer step covers it. A result that such a cut left incomplete (it lacks the outer
     * frame's part) is not kept.
     */
    private static final class Step {
        final int b;
        final java.util.HashMap<Frame, GState> done = new java.util.HashMap<>();
        final ArrayList<Frame> active = new ArrayList<>();
        /** The lowest index in {@link #active} that a cut reached during the frame being stepped (MAX_VALUE: none). */
        int lowestCut = Integer.MAX_VALUE;
        final long[] work = WORK.get();

        Step(int b) {
            this.b = b;
        }

        GState on(GState g) {
            if (g instanceof Frame f) return f.step(this);
            if (g instanceof States.Union u && u.hasFrames()) {
                List<GState> out = new ArrayList<>();
                for (GState m : u.members()) out.add(on(m));
                return States.Union.of(out);
            }
            return g.next(b);
        }
    }

    /** A union of frames after byte b, its members stepped together ({@link Step}). */
    static GState stepAll(States.Union u, int b) {
        return new Step(b).on(u);
    }

    /**
     * One rule's live positions ({@link Regex.At}, or {@link Regex.Mid} inside a multi-byte character) followed by k,
     * what comes once the rule has ended. A call node among the positions is entered when the next byte is read: the
     * rule called starts, followed by this rule from past the call; where nothing of this rule follows the call (a
     * tail call: only the rule's end), by k itself, so that right recursion ({@code list ::= item ("," list)?}) runs in
     * a stack of constant depth.
     */
    static final class Frame implements States.Framed {
        private final GState local;
        private final GState k;
        /** Frames in the chain down to the bottom, this one included. */
        private final int depth;
        private final int hash;
        /** {@link #dist}, found on first use (a race only computes it twice). */
        private int dist = -1;

        Frame(GState local, GState k, int depth) {
            this.local = local;
            this.k = k;
            this.depth = depth;
            this.hash = local.hashCode() * 31 + k.hashCode();
        }

        /** Whether this frame is a string body that plain text leaves as it is ({@link Regex.At#loopsOnStringText}). */
        boolean keepsStringText() {
            return local instanceof Regex.At at && at.loopsOnStringText();
        }

        /** Whether the next byte may enter a rule or leave this one (else it steps this rule's own text alone). */
        private boolean branches() {
            return local instanceof Regex.At at && (at.calls().length > 0 || at.ends());
        }

        /** This rule's own step: the same frame where the rule loops on its text (no allocation, a known distance). */
        private GState own(int b) {
            GState own = local.next(b);
            return own == null ? null : own == local ? this : new Frame(own, k, depth);
        }

        @Override
        public GState next(int b) {
            return branches() ? new Step(b).on(this) : own(b);
        }

        private GState step(Step st) {
            // every frame stepped together counts: a union of many frames (a text many levels' rules may take) costs
            // in its width at every byte, branching or not
            add(st.work, 1);
            if (!branches()) return own(st.b);
            if (st.done.containsKey(this)) return st.done.get(this);
            int at = st.active.indexOf(this);
            if (at >= 0) {
                st.lowestCut = Math.min(st.lowestCut, at);
                return null;
            }
            int index = st.active.size(), cutBefore = st.lowestCut;
            st.active.add(this);
            st.lowestCut = Integer.MAX_VALUE;
            List<GState> out = new ArrayList<>();
            out.add(own(st.b));
            Regex.At pos = (Regex.At) local;
            Regex nfa = pos.nfa();
            for (int c : pos.calls()) {
                Regex.At back = nfa.returnOf(c);
                GState after = back.onlyEnds() ? k : new Frame(back, k, depth);
                int inner = depthOf(after) + 1;
                if (inner > MAX_NESTING) throw GrammarLimitException.nesting(MAX_NESTING);
                out.add(st.on(new Frame(nfa.entry(nfa.callee(c)), after, inner)));
            }
            if (pos.ends()) out.add(st.on(k));
            st.active.removeLast();
            GState r = States.Union.of(out);
            if (st.lowestCut >= index) st.done.put(this, r);
            st.lowestCut = Math.min(cutBefore, st.lowestCut >= index ? Integer.MAX_VALUE : st.lowestCut);
            return r;
        }

        @Override
        public boolean accepting() {
            // distances are exact, and the rule's own may run through calls of rules that end without text
            return dist() == 0;
        }

        @Override
        public int dist() {
            int d = dist;
            if (d < 0) dist = d = GState.add(local.dist(), k.dist());
            return d;
        }

        @Override public GState k() { return k; }

        @Override
        public GState withK(GState k) {
            return new Frame(local, k, depthOf(k) + 1);
        }

        /** The frames of a continuation's deepest chain. */
        private static int depthOf(GState k) {
            if (k instanceof Frame f) return f.depth;
            int d = 0;
            if (k instanceof States.Union u) for (GState m : u.members()) d = Math.max(d, depthOf(m));
            return d;
        }

        /** What a cached mask of this state keeps alive, in ints: its live positions and its chain of frames. */
        int weight() {
            Regex.At at = local instanceof Regex.At a ? a : ((Regex.Mid) local).from();
            return at.positions() + 8 * depth;
        }

        @Override public int hashCode() { return hash; }

        @Override
        public boolean equals(Object o) {
            return this == o || o instanceof Frame f && f.hash == hash && f.local.equals(local) && f.k.equals(k);
        }

        @Override
        public String toString() {
            return "grammar state, " + depth + " rules open";
        }
    }

    // -------------------------------------------------------------------------------------------------- the syntax

    /** A recursive-descent reader of the notation; rule 0 is root. Positions in messages are 1-based lines and columns. */
    private static final class Parser {
        private final String s;
        private int i, depth;
        /** Rule names by index (root first), where each was defined (−1: not yet) and first used. */
        final List<String> names = new ArrayList<>();
        int[] defined = new int[16], used = new int[16];
        private final Map<String, Integer> index = new HashMap<>();

        Parser(String s) {
            this.s = s;
            rule("root", -1);
        }

        int line(int at) {
            int l = 1;
            for (int j = 0; j < at && j < s.length(); j++) if (s.charAt(j) == '\n') l++;
            return l;
        }

        /** The 1-based column of index at, in characters (a character outside the BMP counts once, not as two units). */
        int column(int at) {
            int end = Math.min(at, s.length());
            int start = s.lastIndexOf('\n', Math.max(0, end - 1)) + 1;
            return s.codePointCount(start, Math.max(start, end)) + 1;
        }

        private UnsupportedGrammarException error(String what, int at) {
            return new UnsupportedGrammarException(what, line(at), column(at));
        }

        /** The index of the rule named so, added where new. */
        private int rule(String name, int usedAt) {
            Integer r = index.get(name);
            if (r != null) return r;
            int n = names.size();
            if (n >= MAX_RULES) throw error("more than " + MAX_RULES + " rules are not supported", usedAt);
            if (n == defined.length) {
                defined = java.util.Arrays.copyOf(defined, 2 * n);
                used = java.util.Arrays.copyOf(used, 2 * n);
            }
            names.add(name);
            index.put(name, n);
            defined[n] = -1;
            used[n] = usedAt;
            return n;
        }

        List<Regex.Node> parse() {
            List<Regex.Node> bodies = new ArrayList<>();
            skip();
            if (i >= s.length()) throw error("the grammar is empty: it needs a rule 'root ::= ...'", 0);
            while (i < s.length()) {
                int at = i;
                String name = name();
                if (name.isEmpty()) throw error("a rule must begin with its name, then '::=' (found " + found() + ")", at);
                int r = rule(name, -1);
                if (defined[r] >= 0)
                    throw error("rule '" + name + "' is defined twice (first at line " + line(defined[r]) + ")", at);
                defined[r] = at;
                skipInline();
                if (i < s.length() && s.charAt(i) == '[')
                    throw error("rule options ('" + name + "[...] ::=') are not supported", i);
                if (!s.startsWith("::=", i)) throw error("'::=' must follow the rule name '" + name + "' (found " + found() + ")", i);
                i += 3;
                Regex.Node body = alternation();
                skip();
                if (i < s.length() && !startsRule())
                    throw error(s.charAt(i) == ')' ? "unbalanced parenthesis: this ')' closes no group"
                            : "unexpected " + found() + " (a rule definition must begin its own line)", i);
                while (bodies.size() < names.size()) bodies.add(null);
                bodies.set(r, body);
            }
            for (int r = 0; r < names.size(); r++) {
                if (defined[r] >= 0) continue;
                if (r == 0) throw error("the grammar has no rule 'root' (the output must match the rule named root)", 0);
                throw error("rule '" + names.get(r) + "' is used but never defined", used[r]);
            }
            return bodies;
        }

        /** What is at i, for a message. */
        private String found() {
            if (i >= s.length()) return "the end of the grammar";
            int c = s.codePointAt(i);
            return c == '\n' ? "a line break" : "'" + new String(Character.toChars(c)) + "'";
        }

        /** Skips spaces, line breaks and comments. */
        private void skip() {
            while (i < s.length()) {
                char c = s.charAt(i);
                if (c == '#') {
                    while (i < s.length() && s.charAt(i) != '\n') i++;
                } else if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
                    i++;
                } else {
                    return;
                }
            }
        }

        /** Skips spaces and tabs only. */
        private void skipInline() {
            while (i < s.length() && (s.charAt(i) == ' ' || s.charAt(i) == '\t')) i++;
        }

        private static boolean nameChar(char c) {
            return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-';
        }

        private String name() {
            int a = i;
            while (i < s.length() && nameChar(s.charAt(i))) i++;
            if (i > a && i < s.length() && s.charAt(i) == '.')
                throw error("a '.' right after a rule name is read as part of the name by XGrammar and as any character by"
                        + " llama.cpp; put a space before the '.' (any character), or leave dots out of rule names", i);
            return s.substring(a, i);
        }

        /** A rule's definition at the start of a line: its name, options XGrammar allows (refused later), '::='. */
        private static final java.util.regex.Pattern RULE_START = java.util.regex.Pattern.compile("[A-Za-z0-9_-]+[ \t]*(\\[[^\n]*\\][ \t]*)?::=");

        /** Whether a new rule's definition begins at i. */
        private boolean startsRule() {
            return RULE_START.matcher(s).region(i, s.length()).lookingAt();
        }

        private Regex.Node alternation() {
            List<Regex.Node> options = new ArrayList<>();
            options.add(sequence());
            while (i < s.length() && s.charAt(i) == '|') {
                i++;
                options.add(sequence());
            }
            return options.size() == 1 ? options.getFirst() : new Regex.Alt(options);
        }

        /**
         * Items up to '|', ')' or the rule's end: the end of the grammar, or a line that begins a new rule (outside
         * groups, where line breaks are only space).
         */
        private Regex.Node sequence() {
            List<Regex.Node> items = new ArrayList<>();
            while (true) {
                int before = i;
                skip();
                boolean newLine = s.substring(before, i).indexOf('\n') >= 0;
                if (i >= s.length()) break;
                char c = s.charAt(i);
                if (c == '|' || c == ')') break;
                if (newLine && depth == 0 && startsRule()) break;
                items.add(quantified(atom()));
            }
            return items.size() == 1 ? items.getFirst() : new Regex.Seq(items);
        }

        private Regex.Node atom() {
            int at = i;
            char c = s.charAt(i);
            switch (c) {
                case '"' -> {
                    return literal();
                }
                case '[' -> {
                    return charClass();
                }
                case '.' -> {
                    i++;
                    return new Regex.Chars(new int[]{0, 0xD7FF, 0xE000, 0x10FFFF});
                }
                case '(' -> {
                    i++;
                    skip();
                    if (i < s.length() && s.charAt(i) == '=')
                        throw error("lookahead assertions ('(= ...)') are not supported", at);
                    if (++depth > MAX_DEPTH) throw error("groups nested more than " + MAX_DEPTH + " deep are not supported", at);
                    Regex.Node inner = alternation();
                    depth--;
                    skip();
                    if (i >= s.length() || s.charAt(i) != ')') throw error("unbalanced parenthesis: this '(' is never closed", at);
                    i++;
                    return inner;
                }
                case '*', '+', '?', '{' -> throw error("nothing to repeat: '" + c + "' follows no element", at);
                case '\'' -> throw error("strings are written in double quotes (\"...\"), not single ones", at);
                case ':' -> throw error(s.substring(s.lastIndexOf('\n', at - 1) + 1, at).isBlank()
                        ? "'::=' without a rule name before it" : "unexpected '::=' (a rule definition must begin its own line)", at);
                default -> { }
            }
            if (nameChar(c)) {
                String name = name();
                if (s.startsWith("(", i)) throw error("macros ('" + name + "(...)') are not supported", at);
                return new Regex.Call(rule(name, at));
            }
            if (Character.isLetterOrDigit(s.codePointAt(i)))
                throw error("unexpected " + found() + ": rule names are ASCII letters, digits, '_' and '-'", at);
            throw error("unexpected " + found(), at);
        }

        private Regex.Node quantified(Regex.Node atom) {
            // a repeat may stand apart from its element ("a" *), as llama.cpp reads it: spaces, and inside a group line
            // breaks and comments too
            int before = i;
            if (depth > 0) skip();
            else skipInline();
            if (i >= s.length() || "*+?{".indexOf(s.charAt(i)) < 0) {
                i = before;
                return atom;
            }
            int at = i, min, max;
            switch (s.charAt(i)) {
                case '*' -> { min = 0; max = -1; i++; }
                case '+' -> { min = 1; max = -1; i++; }
                case '?' -> { min = 0; max = 1; i++; }
                case '{' -> {
                    int close = s.indexOf('}', i);
                    String inside = close < 0 ? "" : s.substring(i + 1, close).replace(" ", "");
                    if (!inside.matches("[0-9]*(,[0-9]*)?") || inside.isEmpty() || inside.equals(","))
                        throw error("a repeat is written {m}, {m,}, {m,n} or {,n}", at);
                    int comma = inside.indexOf(',');
                    String lo = comma < 0 ? inside : inside.substring(0, comma), hi = comma < 0 ? inside : inside.substring(comma + 1);
                    min = lo.isEmpty() ? 0 : count(lo, at);
                    max = hi.isEmpty() ? -1 : count(hi, at);
                    if (max >= 0 && min > max) throw error("bad repeat {" + inside + "}: the minimum is above the maximum", at);
                    i = close + 1;
                }
                default -> {
                    return atom;
                }
            }
            if (i < s.length() && "*+?{".indexOf(s.charAt(i)) >= 0)
                throw error("a repeat follows another: group the first to repeat it, (\"a\"+)*", i);
            return new Regex.Rep(atom, min, max);
        }

        private int count(String digits, int at) {
            String d = digits.replaceFirst("^0+(?=.)", "");
            if (d.length() > 6 || Integer.parseInt(d) > Regex.MAX_POSITIONS)
                throw error("repeat counts above " + Regex.MAX_POSITIONS + " are not supported", at);
            return Integer.parseInt(d);
        }

        private Regex.Node literal() {
            int open = i++;
            List<Regex.Node> chars = new ArrayList<>();
            while (true) {
                if (i >= s.length() || s.charAt(i) == '\n')
                    throw error("unterminated string: this '\"' is never closed on its line (write a line break as \\n)", open);
                char c = s.charAt(i);
                if (c == '"') {
                    i++;
                    break;
                }
                int cp = c == '\\' ? escape(false) : character();
                chars.add(new Regex.Chars(new int[]{cp, cp}));
            }
            return chars.size() == 1 ? chars.getFirst() : new Regex.Seq(chars);
        }

        private Regex.Node charClass() {
            int open = i++;
            boolean negate = i < s.length() && s.charAt(i) == '^';
            if (negate) i++;
            int[] set = new int[16];
            int n = 0;
            while (true) {
                if (i >= s.length() || s.charAt(i) == '\n')
                    throw error("unterminated character class: this '[' is never closed on its line (write a line break as \\n)", open);
                if (s.charAt(i) == ']') {
                    i++;
                    break;
                }
                int at = i;
                int lo = classAtom(), hi = lo;
                if (i + 1 < s.length() && s.charAt(i) == '-' && s.charAt(i + 1) != ']') {
                    i++;
                    hi = classAtom();
                    if (hi < lo) throw error("bad range '" + s.substring(at, i) + "': its end is below its start", at);
                }
                if (n + 2 > set.length) set = java.util.Arrays.copyOf(set, 2 * set.length);
                set[n++] = lo;
                set[n++] = hi;
            }
            int[] r = Regex.normalize(set, n);
            int[] ranges = negate ? Regex.complement(r) : r;
            if (ranges.length == 0) throw error("the class '" + s.substring(open, i) + "' takes no character", open);
            return new Regex.Chars(ranges);
        }

        private int classAtom() {
            return s.charAt(i) == '\\' ? escape(true) : character();
        }

        /** The literal character at i, consumed (a lone surrogate, which is no character, refused). */
        private int character() {
            int at = i, c = s.codePointAt(i);
            if (Character.isSurrogate((char) c) && c <= 0xFFFF) throw error("half of a UTF-16 surrogate pair without the other half is no character", at);
            i += Character.charCount(c);
            return c;
        }

        /** The escape at i, consumed: its code point. */
        private int escape(boolean inClass) {
            int at = i;
            if (i + 1 >= s.length()) throw error("the grammar ends with a lone '\\'", at);
            char e = s.charAt(i + 1);
            i += 2;
            switch (e) {
                case 'n' -> { return '\n'; }
                case 'r' -> { return '\r'; }
                case 't' -> { return '\t'; }
                case 'b' -> { return '\b'; }
                case 'f' -> { return '\f'; }
                case 'a' -> { return 0x07; }
                case 'v' -> { return 0x0B; }
                case 'e' -> { return 0x1B; }
                case '0' -> { return 0; }
                case 'x' -> {
                    int a = i;
                    while (i < s.length() && Character.digit(s.charAt(i), 16) >= 0 && s.charAt(i) < 0x80) i++;
                    if (i == a) throw error("'\\x' needs hex digits (\\x41)", at);
                    if (i - a > 2)
                        throw error("'" + s.substring(at, i) + "' is one character to XGrammar and '\\x" + s.substring(a, a + 2)
                                + "' followed by '" + s.substring(a + 2, i) + "' to llama.cpp; write \\u or \\U with four or eight hex"
                                + " digits for the one character", at);
                    return Integer.parseInt(s.substring(a, i), 16);
                }
                case 'u', 'U' -> {
                    int len = e == 'u' ? 4 : 8;
                    String digits = i + len <= s.length() ? s.substring(i, i + len) : "";
                    if (digits.length() != len || !digits.chars().allMatch(ch -> Character.digit(ch, 16) >= 0 && ch < 0x80))
                        throw error("'\\" + e + "' needs " + len + " hex digits", at);
                    i += len;
                    long cp = Long.parseLong(digits, 16);
                    if (cp > 0x10FFFF) throw error("'" + s.substring(at, i) + "' is beyond U+10FFFF", at);
                    if (cp >= 0xD800 && cp <= 0xDFFF) throw error("'" + s.substring(at, i) + "' is a UTF-16 surrogate, no character", at);
                    return (int) cp;
                }
                case 'd', 'w', 's', 'D', 'W', 'S' -> throw error("shorthand classes such as '\\" + e + "' are not supported;"
                        + " write the characters out ([0-9], [a-zA-Z0-9_], [ \\t\\n\\r])", at);
                default -> {
                    if (e < 0x80 && !Character.isLetterOrDigit(e) && e != '\n' && e != '\r') return e;
                    throw error("unknown escape '\\" + e + "'" + (inClass ? " in a character class" : ""), at);
                }
            }
        }
    }
}
