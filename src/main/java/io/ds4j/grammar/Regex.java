package io.ds4j.grammar;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.PriorityQueue;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A regular expression as a byte-level grammar that the whole output must match. The pattern is parsed to a syntax
 * tree ({@link Parser}), built into a Thompson NFA over Unicode code points ({@link Builder}: character nodes carry
 * sorted code point ranges, split nodes are alternatives and loops, one match node), and walked as a {@link GState}
 * whose value is the set of live positions (character nodes and the match node); the bytes of a multi-byte character
 * are decoded inside the state ({@link Mid}), which refuses a byte as soon as no live position takes any character it
 * could still begin.
 *
 * <p>Work: an NFA has at most {@link #MAX_POSITIONS} nodes. A state is one {@link GState} however many positions are
 * live in it (one entry of a {@link States.Union}, so one of {@link Grammar#MAX_LIVE_STATES}); a step costs time in
 * the number of live positions, which the NFA's size bounds. Since the token mask's walk over the token trie steps the
 * same states again and again, states met are kept (up to {@link #MAX_KEPT} per pattern) with the transitions found
 * from them: a DFA built as the output needs it.
 */
final class Regex {
    /**
     * The most NFA nodes a pattern may compile to (each character, class, alternative and loop is one). It bounds the
     * live positions of a state, and a token mask's walk over the token trie steps them at every trie node: a pattern of
     * 19 counted repeats of a thousand (19,000 positions, under the 20,000 allowed before) made each step of every
     * running request take seconds.
     */
    static final int MAX_POSITIONS = 8_192;
    /** Groups nested deeper than this are refused (the parser and the builder recurse once per level). */
    static final int MAX_DEPTH = 200;
    /** Steps the builder may take (a repeat of a repeat of nothing builds no node, yet takes time). */
    private static final int MAX_WORK = 2_000_000;
    /**
     * States kept with their transitions, and the live positions they may hold together (a counted repeat's states
     * hold many each); past either, new states are built each time they are met (slower, the same answers).
     */
    static final int MAX_KEPT = 8192, MAX_KEPT_POSITIONS = 1 << 22;

    /**
     * Node kinds. A grammar of rules ({@link Ebnf}) shares one match node as every rule's end, and a call node stands
     * for a whole rule: out1 is where the caller goes on, out2 the rule called; a state's live positions then hold call
     * nodes beside character nodes, which {@link Ebnf}'s states expand (a pattern has none).
     */
    static final byte CHAR = 0, SPLIT = 1, MATCH = 2, CALL = 3;

    /** Code point ranges as sorted, disjoint [lo, hi] pairs, never holding a surrogate (no character is one). */
    private static final int[] DIGIT = {'0', '9'};
    private static final int[] WORD = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
    private static final int[] SPACE = {'\t', '\r', ' ', ' '};
    /** Every character but a line break (\n, \r, U+0085, U+2028, U+2029), as java.util.regex reads '.'. */
    private static final int[] DOT = complement(new int[]{'\n', '\n', '\r', '\r', 0x85, 0x85, 0x2028, 0x2029});

    private final byte[] kind;
    private final int[] out1, out2;
    private final int[][] ranges;
    /** The pattern's distinct character sets (one per class, escape or literal written), and each node's (−1: none). */
    private final int[][] sets;
    private final int[] setOf;
    /** Per node, the fewest bytes of output that lead from it to the match ({@link GState#FAR}: none do). */
    private final int[] dist;
    private final int match;
    /** Starts of the code point classes: code points between two starts are in the same ranges of every node. */
    private final int[] classStarts;
    private final ConcurrentHashMap<At, At> kept = new ConcurrentHashMap<>();
    private final java.util.concurrent.atomic.AtomicInteger keptPositions = new java.util.concurrent.atomic.AtomicInteger();
    /** Room for closures, reused by one step at a time (the steps of one pattern run on one thread as a rule). */
    private final Scratch scratch;
    private final At start;
    /** The first node of each rule (a pattern is rule 0), and each rule's fewest bytes ({@link GState#FAR}: none end). */
    private final int[] ruleStart, ruleMin;
    /**
     * {@link #entry} by rule and {@link #returnOf} by call node, found on first use: every byte read where a call is live
     * enters the rule (a race only finds the same state twice).
     */
    private final At[] entries, returns;

    /** A transition found to lead nowhere, as a memo holds it (null there means not yet found). */
    private static final GState DEAD = new GState() {
        @Override public GState next(int b) { return null; }
        @Override public boolean accepting() { return false; }
        @Override public int dist() { return GState.FAR; }
    };

    private Regex(Builder b, int match, int... ruleStart) {
        int n = b.size;
        this.kind = Arrays.copyOf(b.kind, n);
        this.out1 = Arrays.copyOf(b.out1, n);
        this.out2 = Arrays.copyOf(b.out2, n);
        this.ranges = Arrays.copyOf(b.ranges, n);
        this.sets = b.sets.toArray(new int[0][]);
        this.setOf = Arrays.copyOf(b.setOf, n);
        this.match = match;
        this.ruleStart = ruleStart;
        this.ruleMin = new int[ruleStart.length];
        this.entries = new At[ruleStart.length];
        this.returns = new At[b.calls ? n : 0];
        this.dist = distances();
        this.classStarts = classStarts();
        this.scratch = new Scratch(n);
        this.start = state(closure(new int[]{ruleStart[0]}, 1));
        if (start == null && !b.calls) throw new UnsupportedRegexException("the pattern matches no string (it needs a character"
                + " that no class allows, such as [^\\s\\S])", -1);
    }

    /**
     * Compiles a pattern.
     * @throws UnsupportedRegexException for a syntax error, a construct outside the supported subset, a pattern of
     *         more than {@link #MAX_POSITIONS} NFA nodes, or one that matches no string
     */
    static Regex compile(String pattern) {
        Node root = new Parser(pattern).parse();
        Builder b = new Builder();
        int match = b.add(MATCH, -1, -1, null);
        int startNode = b.compile(root, match);
        return new Regex(b, match, startNode);
    }

    /**
     * The NFA of a grammar's rules, rule i's body followed by the shared match node (its end).
     * @param rules the rules' bodies; {@link Call} names a rule by its index here
     * @throws UnsupportedRegexException for more than {@link #MAX_POSITIONS} NFA nodes
     */
    static Regex rules(List<Node> rules) {
        Builder b = new Builder();
        int match = b.add(MATCH, -1, -1, null);
        int[] starts = new int[rules.size()];
        for (int r = 0; r < starts.length; r++) starts[r] = b.compile(rules.get(r), match);
        return new Regex(b, match, starts);
    }

    /** The state before any output (null: a grammar's first rule ends no output). */
    GState start() {
        return start;
    }

    /** Rule r's fewest bytes of output ({@link GState#FAR} where no output ends it). */
    int ruleMin(int r) {
        return ruleMin[r];
    }

    /** The live positions at the start of rule r (null where the rule ends no output). */
    At entry(int r) {
        At a = entries[r];
        if (a == null) entries[r] = a = state(closure(new int[]{ruleStart[r]}, 1));
        return a;
    }

    /** The live positions where a call node's caller goes on once the rule called has ended. */
    At returnOf(int call) {
        At a = returns[call];
        if (a == null) returns[call] = a = state(closure(new int[]{out1[call]}, 1));
        return a;
    }

    /** The rule a call node calls. */
    int callee(int call) {
        return out2[call];
    }

    /**
     * The rules a rule may call before any output of its own: from its first node through splits, and past calls of
     * rules that may end without output (a rule among its own is left recursion).
     */
    java.util.BitSet callsFirst(int r) {
        java.util.BitSet out = new java.util.BitSet(), seen = new java.util.BitSet();
        java.util.ArrayDeque<Integer> todo = new java.util.ArrayDeque<>(List.of(ruleStart[r]));
        while (!todo.isEmpty()) {
            int u = todo.pop();
            if (seen.get(u)) continue;
            seen.set(u);
            if (kind[u] == SPLIT) {
                todo.push(out1[u]);
                todo.push(out2[u]);
            } else if (kind[u] == CALL) {
                out.set(out2[u]);
                if (ruleMin[out2[u]] == 0) todo.push(out1[u]);
            }
        }
        return out;
    }

    /** Whether a whole string matches the pattern, its code points stepped from the start (a lone surrogate never does). */
    boolean matches(String s) {
        At a = start;
        for (int j = 0; j < s.length() && a != null; ) {
            int cp = s.codePointAt(j);
            j += Character.charCount(cp);
            a = (At) a.step(cp);
        }
        return a != null && a.accepting;
    }

    /** {@link #charCounts} kept per cap, at most this many caps per pattern (past it, computed each time). */
    private static final int MAX_KEPT_COUNTS = 16;
    private final ConcurrentHashMap<Integer, java.util.BitSet[]> counts = new ConcurrentHashMap<>();

    /**
     * Per NFA node, the numbers of characters, 0 to cap, that paths from it to the match read: bit L of row u is set
     * where some path from u reads exactly L characters to the end. A string held both to this pattern and to a length
     * range steps the pattern and counts its characters; these rows tell whether the positions it reached can still end
     * at a length in the range, so no state is entered from which no output ends. Built a character layer at a time
     * (the nodes L characters from the end are those one character before the nodes L − 1 from it, and what reaches
     * them through splits), so in time and bits of about {@code size() * (cap + 1)}; the caller bounds that.
     */
    java.util.BitSet[] charCounts(int cap) {
        java.util.BitSet[] kept = counts.get(cap);
        if (kept != null) return kept;
        int n = kind.length;
        // the splits that lead to each node, to walk the splits backwards
        int[] predCount = new int[n + 1];
        for (int u = 0; u < n; u++)
            if (kind[u] == SPLIT) {
                predCount[out1[u] + 1]++;
                predCount[out2[u] + 1]++;
            }
        for (int v = 0; v < n; v++) predCount[v + 1] += predCount[v];
        int[] preds = new int[predCount[n]], fill = Arrays.copyOf(predCount, n);
        for (int u = 0; u < n; u++)
            if (kind[u] == SPLIT) {
                preds[fill[out1[u]]++] = u;
                preds[fill[out2[u]]++] = u;
            }
        java.util.BitSet[] rows = new java.util.BitSet[n];
        for (int u = 0; u < n; u++) rows[u] = new java.util.BitSet(cap + 1);
        int[] layer = new int[n], stack = new int[n];
        boolean[] in = new boolean[n];
        int size = 0, sp = 0;
        stack[sp++] = match;
        for (int len = 0; ; len++) {
            // the layer: the seeds and the splits that lead to them
            Arrays.fill(in, false);
            size = 0;
            for (int j = 0; j < sp; j++) in[stack[j]] = true;
            while (sp > 0) {
                int v = stack[--sp];
                layer[size++] = v;
                for (int e = predCount[v]; e < predCount[v + 1]; e++)
                    if (!in[preds[e]]) {
                        in[preds[e]] = true;
                        stack[sp++] = preds[e];
                    }
            }
            for (int j = 0; j < size; j++) rows[layer[j]].set(len);
            if (len == cap) break;
            // the character nodes one character before the layer seed the next
            for (int u = 0; u < n; u++) if (kind[u] == CHAR && ranges[u].length > 0 && in[out1[u]]) stack[sp++] = u;
            if (sp == 0) break;
        }
        if (counts.size() < MAX_KEPT_COUNTS) counts.putIfAbsent(cap, rows);
        return rows;
    }

    /** NFA nodes (for tests of the size limit). */
    int size() {
        return kind.length;
    }

    // ---------------------------------------------------------------------------------------------------- analysis

    /** Fewest UTF-8 bytes of a code point. */
    private static int utf8Length(int cp) {
        return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    }

    /**
     * Shortest distances to the match node over the reversed graph (Dijkstra): a character edge weighs the fewest
     * bytes of any character it takes (its lowest code point's, as the byte length grows with the code point), a
     * split's edges nothing, a call's edge the fewest bytes of the rule it calls. Those come from the distances
     * themselves (a rule's is its first node's), so with calls the search runs again while a rule's fewest bytes
     * shrink: each run settles the rules whose shortest output needs one more level of calls, at most one run per rule.
     */
    private int[] distances() {
        boolean calls = false;
        for (byte k : kind) calls |= k == CALL;
        Arrays.fill(ruleMin, GState.FAR);
        while (true) {
            int[] d = distancesOnce();
            boolean shrank = false;
            for (int r = 0; r < ruleStart.length; r++) {
                if (d[ruleStart[r]] < ruleMin[r]) {
                    ruleMin[r] = d[ruleStart[r]];
                    shrank = true;
                }
            }
            if (!calls || !shrank) return d;
        }
    }

    private int[] distancesOnce() {
        int n = kind.length;
        int[] count = new int[n + 1];
        for (int u = 0; u < n; u++) {
            if (kind[u] == CHAR && ranges[u].length > 0 || kind[u] == CALL && ruleMin[out2[u]] < GState.FAR) count[out1[u] + 1]++;
            if (kind[u] == SPLIT) {
                count[out1[u] + 1]++;
                count[out2[u] + 1]++;
            }
        }
        for (int v = 0; v < n; v++) count[v + 1] += count[v];
        int[] from = new int[count[n]], weight = new int[count[n]], fill = Arrays.copyOf(count, n);
        for (int u = 0; u < n; u++) {
            if (kind[u] == CHAR && ranges[u].length > 0) {
                from[fill[out1[u]]] = u;
                weight[fill[out1[u]]++] = utf8Length(ranges[u][0]);
            }
            if (kind[u] == CALL && ruleMin[out2[u]] < GState.FAR) {
                from[fill[out1[u]]] = u;
                weight[fill[out1[u]]++] = ruleMin[out2[u]];
            }
            if (kind[u] == SPLIT) {
                from[fill[out1[u]]++] = u;
                from[fill[out2[u]]++] = u;
            }
        }
        int[] d = new int[n];
        Arrays.fill(d, GState.FAR);
        d[match] = 0;
        PriorityQueue<long[]> queue = new PriorityQueue<>((a, b) -> Long.compare(a[0], b[0]));
        queue.add(new long[]{0, match});
        while (!queue.isEmpty()) {
            long[] top = queue.poll();
            int v = (int) top[1];
            if (top[0] > d[v]) continue;
            for (int e = count[v]; e < count[v + 1]; e++) {
                int u = from[e], nd = GState.add(d[v], weight[e]);
                if (nd < d[u]) {
                    d[u] = nd;
                    queue.add(new long[]{nd, u});
                }
            }
        }
        return d;
    }

    private int[] classStarts() {
        int total = 1;
        for (int[] r : ranges) if (r != null) total += r.length;
        int[] s = new int[total];
        int k = 0;
        s[k++] = 0;
        for (int[] r : ranges) {
            if (r == null) continue;
            for (int j = 0; j < r.length; j += 2) {
                s[k++] = r[j];
                s[k++] = r[j + 1] + 1;
            }
        }
        Arrays.sort(s);
        int m = 0;
        for (int j = 0; j < s.length; j++) if (m == 0 || s[j] != s[m - 1]) s[m++] = s[j];
        return Arrays.copyOf(s, m);
    }

    private int classOf(int cp) {
        int j = Arrays.binarySearch(classStarts, cp);
        return j >= 0 ? j : -j - 2;
    }

    /** Whether sorted ranges r hold a code point in [lo, hi]. */
    private static boolean meets(int[] r, int lo, int hi) {
        // the first pair whose end is at or past lo
        int a = 0, b = r.length / 2;
        while (a < b) {
            int m = (a + b) >>> 1;
            if (r[2 * m + 1] < lo) a = m + 1;
            else b = m;
        }
        return a < r.length / 2 && r[2 * a] <= hi;
    }

    /** Room for a closure: visit stamps and a stack, reused instead of allocated per step. */
    private static final class Scratch {
        final int[] seen, stack;
        int stamp;

        Scratch(int n) {
            seen = new int[n];
            stack = new int[n];
        }
    }

    /**
     * The live positions reachable from some nodes without output: the character and match nodes among them and
     * behind their splits, sorted; nodes from which the match cannot be reached are left out, so a state holds only
     * positions that can still complete the output.
     */
    private int[] closure(int[] seeds, int count) {
        synchronized (scratch) {
            return closure(scratch, seeds, count);
        }
    }

    private int[] closure(Scratch s, int[] seeds, int count) {
        int stamp = ++s.stamp;
        if (stamp == Integer.MAX_VALUE) {
            Arrays.fill(s.seen, 0);
            s.stamp = stamp = 1;
        }
        int sp = 0;
        int[] out = new int[Math.max(4, count)];
        int m = 0;
        for (int j = 0; j < count; j++) {
            int u = seeds[j];
            if (s.seen[u] != stamp && dist[u] < GState.FAR) {
                s.seen[u] = stamp;
                s.stack[sp++] = u;
            }
        }
        while (sp > 0) {
            int u = s.stack[--sp];
            if (kind[u] == SPLIT) {
                for (int side = 0; side < 2; side++) {
                    int v = side == 0 ? out1[u] : out2[u];
                    if (s.seen[v] != stamp && dist[v] < GState.FAR) {
                        s.seen[v] = stamp;
                        s.stack[sp++] = v;
                    }
                }
            } else {
                if (m == out.length) out = Arrays.copyOf(out, m * 2);
                out[m++] = u;
            }
        }
        int[] r = Arrays.copyOf(out, m);
        Arrays.sort(r);
        return r;
    }

    /** The state of some live positions (null for none): the kept one where there is one. */
    private At state(int[] pos) {
        if (pos.length == 0) return null;
        // a grammar's rules step within its work per token: the closure just built cost time in its positions
        if (returns.length > 0) Ebnf.charge(pos.length);
        At probe = new At(this, pos, false);
        At found = kept.get(probe);
        if (found != null) return found;
        if (kept.size() >= MAX_KEPT || keptPositions.get() > MAX_KEPT_POSITIONS - pos.length) return probe;
        At a = new At(this, pos, true);
        At before = kept.putIfAbsent(a, a);
        if (before != null) return before;
        keptPositions.addAndGet(pos.length);
        return a;
    }

    // ------------------------------------------------------------------------------------------------------ states

    /**
     * Between characters: the live positions, sorted. A state remembers its transitions (by byte for ASCII characters
     * and the lead bytes of longer ones, by code point class for the characters those complete). Only a kept state
     * remembers, and only kept states: a state built past {@link #MAX_KEPT} remembers nothing, so that neither the
     * grammar (through the start state's transitions) nor a constraint's cached masks (through the state they are
     * cached for) hold the states a mask's walk over the token trie builds, one per trie node of thousands of
     * positions each (a counted repeat past the limits filled the heap that way).
     */
    static final class At implements GState {
        private final Regex re;
        private final int[] pos;
        private final int hash, dist;
        private final boolean accepting, kept;
        /** Transitions found, by byte (null: not yet; {@link #DEAD}: none); allocated on the first step. */
        private GState[] byByte;
        private volatile ConcurrentHashMap<Integer, GState> byClass;
        private volatile int[] bySet;
        /** Live positions from which {@link #after} works per character set ({@link #bySet}) rather than per position. */
        private static final int BY_SET_FROM = 16;
        /** {@link #calls}, found on first use (a race only finds the same array twice). */
        private int[] callNodes;
        /** {@link #loopsOnStringText}: 0 not yet decided, 1 yes, −1 no. */
        private int loopsOnString;
        /** The characters JSON may write as a two-byte escape: quote, backslash, slash, and b f n r t. */
        private static final int[] SHORT_ESCAPED = {'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'};
        /** {@link #distAfterShortEscape} and {@link #distAfterBmpChar} plus one, found on first use (0: not yet). */
        private int afterShort, afterBmp;

        At(Regex re, int[] pos, boolean kept) {
            this.re = re;
            this.pos = pos;
            this.hash = Arrays.hashCode(pos) * 31 + System.identityHashCode(re);
            int d = GState.FAR;
            for (int p : pos) d = Math.min(d, re.dist[p]);
            this.dist = d;
            this.accepting = Arrays.binarySearch(pos, re.match) >= 0;
            this.kept = kept;
        }

        /** Whether a transition to t may be remembered: by a kept state, to a kept state or none (see {@link At}). */
        private boolean remembers(GState t) {
            return kept && (!(t instanceof At a) || a.kept);
        }

        @Override
        public GState next(int b) {
            GState[] memo = byByte;
            if (memo == null) byByte = memo = new GState[256];
            GState known = memo[b];
            if (known != null) return known == DEAD ? null : known;
            GState t;
            if (b < 0x80) {
                t = step(b);
            } else {
                int need = States.utf8After(0, b);
                t = need < 0 ? null : mid(b & (0x3F >> need), need, need == 1 ? 0x80 : need == 2 ? 0x800 : 0x10000);
            }
            if (remembers(t)) memo[b] = t == null ? DEAD : t;
            return t;
        }

        /** The state after code point cp, or null where no live position takes it. */
        GState step(int cp) {
            // by class: the ASCII bytes of one class (every letter of [a-z]) lead to one state, built once
            ConcurrentHashMap<Integer, GState> memo = byClass;
            if (memo == null) byClass = memo = new ConcurrentHashMap<>();
            int cls = re.classOf(cp);
            GState known = memo.get(cls);
            if (known != null) return known == DEAD ? null : known;
            int[] seeds = new int[pos.length];
            int n = 0;
            for (int p : pos) if (re.kind[p] == CHAR && meets(re.ranges[p], cp, cp)) seeds[n++] = re.out1[p];
            At t = n == 0 ? null : re.state(re.closure(seeds, n));
            if (remembers(t)) memo.put(cls, t == null ? DEAD : t);
            return t;
        }

        /**
         * The state inside a character whose bytes so far give the high bits v, with need bytes to come, of a
         * sequence whose length allows code points from min up; null where no live position takes any of them.
         */
        GState mid(int v, int need, int min) {
            int lo = Math.max(min, v << (6 * need)), hi = Math.min(Mid.max(min), (v << (6 * need)) | ((1 << (6 * need)) - 1));
            if (lo > hi) return null;
            int best = after(lo, hi);
            return best >= GState.FAR ? null : new Mid(this, v, need, min, GState.add(need, best));
        }

        /** The fewest bytes to a match after one character in [lo, hi] ({@link GState#FAR} where none is taken). */
        private int after(int lo, int hi) {
            int best = GState.FAR;
            if (pos.length >= BY_SET_FROM && re.sets.length <= pos.length) {
                int[] bs = bySet;
                if (bs == null) bySet = bs = bySet();
                for (int j = 0; j < bs.length; j++) if (bs[j] < best && meets(re.sets[j], lo, hi)) best = bs[j];
                return best;
            }
            for (int p : pos)
                if (re.kind[p] == CHAR && re.dist[re.out1[p]] < best && meets(re.ranges[p], lo, hi)) best = re.dist[re.out1[p]];
            return best;
        }

        /**
         * Per character set of the pattern, the fewest bytes to a match after a character of it from a live position
         * that takes that set. A repeat's copies share their set, so a state of a counted repeat's many positions is
         * judged per set instead of per position; the first bytes of every multi-byte character the token trie holds
         * ask this, so it is worth computing once per state.
         */
        private int[] bySet() {
            int[] bs = new int[re.sets.length];
            Arrays.fill(bs, GState.FAR);
            for (int p : pos) if (re.kind[p] == CHAR) bs[re.setOf[p]] = Math.min(bs[re.setOf[p]], re.dist[re.out1[p]]);
            return bs;
        }

        /**
         * Tries f on one code point of each code point class in [lo, hi] (surrogates left out), in order, until it
         * returns true: whether it did. All characters of a class lead alike from any positions.
         */
        private boolean anyClassChar(int lo, int hi, java.util.function.IntPredicate f) {
            for (int cp = lo; cp <= hi; ) {
                if (cp >= 0xD800 && cp <= 0xDFFF) {
                    cp = 0xE000;
                    continue;
                }
                if (f.test(cp)) return true;
                int next = re.classOf(cp) + 1;
                if (next >= re.classStarts.length) break;
                cp = re.classStarts[next];
            }
            return false;
        }

        /** Whether some character in [lo, hi] (surrogates left out) leads from these positions to a state that ok accepts. */
        boolean anyChar(int lo, int hi, java.util.function.Predicate<At> ok) {
            return anyClassChar(lo, hi, cp -> step(cp) instanceof At a && ok.test(a));
        }

        /**
         * The fewest bytes from these positions to the match after one character in [lo, hi] (surrogates left out):
         * {@link GState#FAR} where none leads on.
         */
        int distAfterChars(int lo, int hi) {
            int[] best = {GState.FAR};
            anyClassChar(lo, hi, cp -> {
                if (step(cp) instanceof At a) best[0] = Math.min(best[0], a.dist);
                return best[0] == 0;  // nothing is shorter
            });
            return best[0];
        }

        /**
         * {@link #distAfterChars} over the characters JSON may write as a two-byte escape (a quote, a backslash, a
         * slash and the five controls b f n r t); remembered.
         */
        int distAfterShortEscape() {
            int v = afterShort;
            if (v == 0) {
                int best = GState.FAR;
                for (int cp : SHORT_ESCAPED)
                    if (step(cp) instanceof At a) best = Math.min(best, a.dist);
                afterShort = v = best + 1;
            }
            return v - 1;
        }

        /** {@link #distAfterChars} over the Basic Multilingual Plane (what one backslash-u escape writes); remembered. */
        int distAfterBmpChar() {
            int v = afterBmp;
            if (v == 0) afterBmp = v = distAfterChars(0, 0xFFFF) + 1;
            return v - 1;
        }

        /**
         * Whether some path from these positions to the match reads a number of characters in [lo, hi], by the rows of
         * {@link #charCounts} (hi at most their cap).
         */
        boolean endsWithin(java.util.BitSet[] rows, int lo, int hi) {
            for (int p : pos) {
                int b = rows[p].nextSetBit(lo);
                if (b >= 0 && b <= hi) return true;
            }
            return false;
        }

        /** Live positions (what the state weighs). */
        int positions() {
            return pos.length;
        }

        /** The call nodes among the live positions, in order (a grammar's states have them, a pattern's none). */
        int[] calls() {
            int[] c = callNodes;
            if (c == null) {
                int n = 0;
                for (int p : pos) if (re.kind[p] == CALL) n++;
                c = new int[n];
                n = 0;
                for (int p : pos) if (re.kind[p] == CALL) c[n++] = p;
                callNodes = c;
            }
            return c;
        }

        /** Whether the rule being matched may end here (the match node is live). */
        boolean ends() {
            return accepting;
        }

        /**
         * Whether every character of a JSON string's plain text (any but '"', '\\' and the controls below U+0020) leads
         * from these positions back to them, and nothing else is live that the next byte could enter (no call, not the
         * rule's end): the string body of a grammar written as rules, whose tokens of plain text then keep its state
         * as they keep a JSON string body's ({@link TokenTrie#stringPure}). Decided once, per character class.
         */
        boolean loopsOnStringText() {
            int v = loopsOnString;
            if (v == 0) {
                boolean ok = !accepting && calls().length == 0;
                int[] starts = re.classStarts;
                for (int j = 0; ok && j < starts.length; j++) {
                    int hi = j + 1 < starts.length ? starts[j + 1] - 1 : 0x10FFFF;
                    int cp = starts[j];
                    while (cp <= hi && (cp < 0x20 || cp == '"' || cp == '\\' || (cp >= 0xD800 && cp <= 0xDFFF))) cp = cp == 0xD800 ? 0xE000 : cp + 1;
                    if (cp > hi) continue;
                    GState t = step(cp);
                    ok = t != null && t.equals(this);
                }
                loopsOnString = v = ok ? 1 : -1;
            }
            return v > 0;
        }

        /** Whether the rule's end is all that is live (a tail call's return: nothing of the rule follows). */
        boolean onlyEnds() {
            return pos.length == 1 && accepting;
        }

        /** The NFA these positions are of. */
        Regex nfa() {
            return re;
        }

        @Override public boolean accepting() { return accepting; }
        @Override public int dist() { return dist; }
        @Override public int hashCode() { return hash; }

        @Override
        public boolean equals(Object o) {
            return this == o || o instanceof At a && a.re == re && a.hash == hash && Arrays.equals(a.pos, pos);
        }

        @Override
        public String toString() {
            return "regex state of " + pos.length + " positions";
        }
    }

    /**
     * Inside a multi-byte character: the state before it, the high bits v its bytes gave so far, how many bytes are
     * still to come, and the lowest code point of its byte length (which also bounds the highest: an overlong form is
     * refused as the first byte that makes it one comes).
     */
    record Mid(At from, int v, int need, int min, int dist) implements GState {
        static int max(int min) {
            return min == 0x80 ? 0x7FF : min == 0x800 ? 0xFFFF : 0x10FFFF;
        }

        /** The lowest code point the character's bytes so far allow. */
        int lo() {
            return Math.max(min, v << (6 * need));
        }

        /** The highest code point the character's bytes so far allow. */
        int hi() {
            return Math.min(max(min), (v << (6 * need)) | ((1 << (6 * need)) - 1));
        }

        @Override
        public GState next(int b) {
            if (b < 0x80 || b > 0xBF) return null;
            int w = (v << 6) | (b & 0x3F);
            if (need > 1) return from.mid(w, need - 1, min);
            return w < min || w > max(min) ? null : from.step(w);
        }

        @Override public boolean accepting() { return false; }
        @Override public int dist() { return dist; }

        @Override
        public boolean equals(Object o) {
            return o instanceof Mid m && m.v == v && m.need == need && m.min == min && m.from.equals(from);
        }

        @Override
        public int hashCode() {
            return ((from.hashCode() * 31 + v) * 31 + need) * 31 + min;
        }
    }

    // -------------------------------------------------------------------------------------------------- the syntax

    /** A syntax tree (of a pattern, or of a grammar rule's body). */
    sealed interface Node permits Chars, Seq, Alt, Rep, Call {}

    /** One character of a set of code point ranges. */
    record Chars(int[] ranges) implements Node {}

    record Seq(List<Node> items) implements Node {}

    record Alt(List<Node> options) implements Node {}

    /** body repeated min to max times (max −1: no bound). */
    record Rep(Node body, int min, int max) implements Node {}

    /** A grammar rule, by its index. */
    record Call(int rule) implements Node {}

    /** Sorted, merged ranges without surrogates, from [lo, hi] pairs in any order. */
    static int[] normalize(int[] pairs, int n) {
        long[] order = new long[n / 2];
        for (int j = 0; j < n; j += 2) order[j / 2] = ((long) pairs[j] << 32) | pairs[j + 1];
        Arrays.sort(order);
        int[] out = new int[n + 2];
        int m = 0;
        for (long x : order) {
            int lo = (int) (x >> 32), hi = (int) x;
            if (m > 0 && lo <= out[m - 1] + 1) out[m - 1] = Math.max(out[m - 1], hi);
            else {
                out[m++] = lo;
                out[m++] = hi;
            }
        }
        // take the surrogates out: a range across them becomes the two around them
        int[] r = new int[m + 2];
        int k = 0;
        for (int j = 0; j < m; j += 2) {
            int lo = out[j], hi = out[j + 1];
            if (lo < 0xD800 && hi >= 0xD800) {
                r[k++] = lo;
                r[k++] = 0xD7FF;
                lo = 0xE000;
            } else if (lo >= 0xD800 && lo <= 0xDFFF) {
                lo = 0xE000;
            }
            if (lo <= hi) {
                r[k++] = lo;
                r[k++] = hi;
            }
        }
        return Arrays.copyOf(r, k);
    }

    /** Every character outside sorted ranges r. */
    static int[] complement(int[] r) {
        int[] out = new int[r.length + 2];
        int k = 0, next = 0;
        for (int j = 0; j < r.length; j += 2) {
            if (r[j] > next) {
                out[k++] = next;
                out[k++] = r[j] - 1;
            }
            next = r[j + 1] + 1;
        }
        if (next <= 0x10FFFF) {
            out[k++] = next;
            out[k++] = 0x10FFFF;
        }
        return normalize(out, k);
    }

    /**
     * A recursive-descent reader of the supported syntax. Positions in messages are 0-based indexes into the pattern
     * (in UTF-16 units, as a JSON string's escapes count them).
     */
    private static final class Parser {
        private final String p;
        private int i, depth;
        /** The ranges of the class escape {@link #escape} read last. */
        private int[] escaped;

        Parser(String p) {
            this.p = p;
        }

        private static UnsupportedRegexException error(String what, int at) {
            return new UnsupportedRegexException(what + " (at position " + at + ")", at);
        }

        Node parse() {
            // a leading '^' and a trailing '$' say what holds anyway: the whole output matches
            if (p.startsWith("^")) i = 1;
            Node n = alternation();
            if (i < p.length()) throw error("unbalanced parenthesis: this ')' closes no group", i);
            return n;
        }

        private Node alternation() {
            List<Node> options = new ArrayList<>();
            options.add(sequence());
            while (i < p.length() && p.charAt(i) == '|') {
                i++;
                options.add(sequence());
            }
            return options.size() == 1 ? options.getFirst() : new Alt(options);
        }

        private Node sequence() {
            List<Node> items = new ArrayList<>();
            while (i < p.length()) {
                char c = p.charAt(i);
                if (c == '|' || c == ')') break;
                if (c == '$' && i == p.length() - 1 && depth == 0) {
                    i++;
                    break;
                }
                items.add(quantified(atom()));
            }
            return items.size() == 1 ? items.getFirst() : new Seq(items);
        }

        private Node atom() {
            int at = i;
            int c = p.codePointAt(i);
            switch (c) {
                case '(' -> {
                    return group();
                }
                case '[' -> {
                    return charClass();
                }
                case '.' -> {
                    i++;
                    return new Chars(DOT);
                }
                case '\\' -> {
                    int cp = escape(false);
                    return new Chars(cp >= 0 ? new int[]{cp, cp} : escaped);
                }
                case '*', '+', '?' -> throw error("nothing to repeat: '" + (char) c + "' follows no character or group", at);
                case '{' -> {
                    if (bounds(i) != null) throw error("nothing to repeat: '" + p.substring(at, bounds(i)[2]) + "' follows no character or group", at);
                }
                case '^', '$' -> throw error("the anchor '" + (char) c + "' is only accepted at the very "
                        + (c == '^' ? "start" : "end") + " of the pattern, where it changes nothing (the whole output must match)", at);
                default -> { }
            }
            int cp = literal();
            return new Chars(new int[]{cp, cp});
        }

        /** The literal character at i, consumed (a lone surrogate, which is no character, refused). */
        private int literal() {
            int at = i, c = p.codePointAt(i);
            if (Character.isSurrogate((char) c) && c <= 0xFFFF) throw error("half of a UTF-16 surrogate pair without the other half is no character", at);
            i += Character.charCount(c);
            return c;
        }

        private Node quantified(Node atom) {
            if (i >= p.length()) return atom;
            int at = i;
            int min, max;
            switch (p.charAt(i)) {
                case '*' -> { min = 0; max = -1; i++; }
                case '+' -> { min = 1; max = -1; i++; }
                case '?' -> { min = 0; max = 1; i++; }
                case '{' -> {
                    int[] b = bounds(i);
                    if (b == null) return atom;
                    min = b[0];
                    max = b[1];
                    i = b[2];
                }
                default -> {
                    return atom;
                }
            }
            if (i < p.length() && p.charAt(i) == '?') i++; // lazy: the same strings match
            else if (i < p.length() && p.charAt(i) == '+')
                throw error("possessive quantifiers ('*+', '++', '?+', '{n}+') are not supported", at);
            if (i < p.length() && (p.charAt(i) == '*' || p.charAt(i) == '+' || p.charAt(i) == '?' || (p.charAt(i) == '{' && bounds(i) != null)))
                throw error("multiple repeat: a quantifier follows another (group the first to repeat it: (a{2})*)", i);
            return new Rep(atom, min, max);
        }

        /**
         * The repeat {n}, {n,}, {n,m}, {,m} or {,} starting at from as {min, max (−1: none), the index after it}, or null
         * where the brace begins no repeat (it is then a literal '{').
         */
        private int[] bounds(int from) {
            int n = p.length(), j = from + 1, a = j;
            while (j < n && p.charAt(j) >= '0' && p.charAt(j) <= '9') j++;
            String lo = p.substring(a, j), hi = lo;
            boolean comma = j < n && p.charAt(j) == ',';
            if (comma) {
                int b = ++j;
                while (j < n && p.charAt(j) >= '0' && p.charAt(j) <= '9') j++;
                hi = p.substring(b, j);
            }
            // {,} is {0,}, as in Python's re, whose patterns vLLM's users write; {} stays a literal there too
            if (j >= n || p.charAt(j) != '}' || (lo.isEmpty() && !comma)) return null;
            String written = p.substring(from, j + 1);
            int min = lo.isEmpty() ? 0 : count(lo, written, from);
            int max = comma && hi.isEmpty() ? -1 : count(hi, written, from);
            if (max >= 0 && min > max) throw error("bad repeat " + written + ": the minimum is above the maximum", from);
            return new int[]{min, max, j + 1};
        }

        private static int count(String digits, String written, int at) {
            String d = digits.replaceFirst("^0+(?=.)", "");
            if (d.length() > 6 || Integer.parseInt(d) > MAX_POSITIONS)
                throw error("repeat " + written + ": counts above " + MAX_POSITIONS + " are not supported", at);
            return Integer.parseInt(d);
        }

        private Node group() {
            int open = i++;
            if (p.startsWith("?", i)) {
                if (p.startsWith("?:", i)) {
                    i += 2;
                } else if (p.startsWith("?=", i) || p.startsWith("?!", i) || p.startsWith("?<=", i) || p.startsWith("?<!", i)) {
                    throw error("lookaround ('(?=', '(?!', '(?<=', '(?<!') is not supported", open);
                } else if (p.startsWith("?P=", i)) {
                    throw error("backreferences ('(?P=name)') are not supported", open);
                } else if (p.startsWith("?P<", i) || p.startsWith("?<", i)) {
                    // a named group is read as a plain group: no backreference can use its name
                    i += p.startsWith("?P<", i) ? 3 : 2;
                    int name = i;
                    while (i < p.length() && (Character.isLetterOrDigit(p.charAt(i)) || p.charAt(i) == '_')) i++;
                    if (i == name || i >= p.length() || p.charAt(i) != '>') throw error("bad group name: write (?<name>...) or (?P<name>...) with a name of letters, digits and '_'", open);
                    i++;
                } else {
                    throw error("the group construct '" + p.substring(open, Math.min(p.length(), open + 3))
                            + "' is not supported (inline flags, atomic groups, conditionals and comments are not)", open);
                }
            }
            if (++depth > MAX_DEPTH) throw error("groups nested more than " + MAX_DEPTH + " deep are not supported", open);
            Node inner = alternation();
            depth--;
            if (i >= p.length() || p.charAt(i) != ')') throw error("unbalanced parenthesis: this '(' is never closed", open);
            i++;
            return inner;
        }

        private Node charClass() {
            int open = i++;
            boolean negate = i < p.length() && p.charAt(i) == '^';
            if (negate) i++;
            int[] set = new int[16];
            int n = 0;
            // a ']' first in the class is itself a member, so "[]a]" is a class of ']' and 'a'
            for (boolean first = true; ; first = false) {
                if (i >= p.length()) throw error("unterminated character class: this '[' is never closed", open);
                if (p.charAt(i) == ']' && !first) {
                    i++;
                    break;
                }
                int at = i;
                int lo = classAtom();
                int[] add;
                if (i + 1 < p.length() && p.charAt(i) == '-' && p.charAt(i + 1) != ']') {
                    i++;
                    int hi = lo < 0 ? -1 : classAtom();
                    if (lo < 0 || hi < 0) throw error("a range cannot start or end with a class escape such as \\d", at);
                    if (hi < lo) throw error("bad range '" + p.substring(at, i) + "': its end is below its start", at);
                    add = new int[]{lo, hi};
                } else {
                    add = lo >= 0 ? new int[]{lo, lo} : escaped;
                }
                if (n + add.length > set.length) set = Arrays.copyOf(set, 2 * (n + add.length));
                System.arraycopy(add, 0, set, n, add.length);
                n += add.length;
            }
            int[] r = normalize(set, n);
            return new Chars(negate ? complement(r) : r);
        }

        /** One character of a class, consumed; −1 for a class escape, whose ranges are then in {@link #escaped}. */
        private int classAtom() {
            char c = p.charAt(i);
            if (c == '\\') return escape(true);
            if (c == '[' && i + 1 < p.length() && (p.charAt(i + 1) == ':' || p.charAt(i + 1) == '=' || p.charAt(i + 1) == '.'))
                throw error("POSIX classes such as [:alpha:] are not supported", i);
            return literal();
        }

        /** The escape at i, consumed: its code point, or −1 for a class escape (its ranges in {@link #escaped}). */
        private int escape(boolean inClass) {
            int at = i;
            if (i + 1 >= p.length()) throw error("the pattern ends with a lone '\\'", at);
            int e = p.codePointAt(i + 1);
            i += 1 + Character.charCount(e);
            switch (e) {
                case 'd' -> escaped = DIGIT;
                case 'D' -> escaped = complement(DIGIT);
                case 'w' -> escaped = WORD;
                case 'W' -> escaped = complement(WORD);
                case 's' -> escaped = SPACE;
                case 'S' -> escaped = complement(SPACE);
                case 'n' -> { return '\n'; }
                case 't' -> { return '\t'; }
                case 'r' -> { return '\r'; }
                case 'f' -> { return '\f'; }
                case 'v' -> { return 0x0B; }
                case 'x' -> { return hex(at); }
                case 'u' -> { return utf16(at); }
                case 'b', 'B', 'A', 'z', 'Z', 'G' -> throw error("the anchor '\\" + (char) e + "' is not supported"
                        + (inClass ? "" : " (word boundaries and anchors inside the pattern are not: the whole output must match)"), at);
                case 'p', 'P' -> throw error("Unicode property classes ('\\p{...}') are not supported", at);
                case 'k' -> throw error("backreferences ('\\k<name>') are not supported", at);
                default -> {
                    if (e >= '0' && e <= '9') throw error("backreferences ('\\" + (char) e + "') are not supported", at);
                    if (e < 0x80 && Character.isLetter(e)) throw error("unknown escape '\\" + (char) e + "'", at);
                    if (Character.isSurrogate((char) e) && e <= 0xFFFF) throw error("half of a UTF-16 surrogate pair without the other half is no character", at + 1);
                    return e;
                }
            }
            return -1;
        }

        /** \xHH or \x{H...}: the code point, consumed. */
        private int hex(int at) {
            String digits;
            if (i < p.length() && p.charAt(i) == '{') {
                int close = p.indexOf('}', i);
                digits = close < 0 ? "" : p.substring(i + 1, close);
                if (digits.isEmpty() || digits.length() > 6 || !isHex(digits)) throw error("'\\x{' needs 1 to 6 hex digits and a '}'", at);
                i = close + 1;
            } else {
                digits = i + 2 <= p.length() ? p.substring(i, i + 2) : "";
                if (!isHex(digits) || digits.length() != 2) throw error("'\\x' needs two hex digits (\\xHH) or braces (\\x{HHHH})", at);
                i += 2;
            }
            int cp = Integer.parseInt(digits, 16);
            if (cp > 0x10FFFF) throw error("'\\x{" + digits + "}' is beyond U+10FFFF", at);
            if (cp >= 0xD800 && cp <= 0xDFFF) throw error("'" + p.substring(at, i) + "' is a UTF-16 surrogate, no character", at);
            return cp;
        }

        /** \\uHHHH, a surrogate pair written as two of them read as the one character: the code point, consumed. */
        private int utf16(int at) {
            int c = hex4(at);
            if (Character.isHighSurrogate((char) c) && p.startsWith("\\u", i)) {
                int save = i;
                i += 2;
                int low = hex4(save);
                if (Character.isLowSurrogate((char) low)) return Character.toCodePoint((char) c, (char) low);
                i = save;
            }
            if (Character.isSurrogate((char) c))
                throw error("'" + p.substring(at, at + 6) + "' is half of a UTF-16 surrogate pair without the other half, no character", at);
            return c;
        }

        private int hex4(int at) {
            String digits = i + 4 <= p.length() ? p.substring(i, i + 4) : "";
            if (digits.length() != 4 || !isHex(digits)) throw error("'\\u' needs four hex digits (\\uHHHH)", at);
            i += 4;
            return Integer.parseInt(digits, 16);
        }

        private static boolean isHex(String s) {
            for (int j = 0; j < s.length(); j++) if ("0123456789abcdefABCDEF".indexOf(s.charAt(j)) < 0) return false;
            return !s.isEmpty();
        }
    }

    /** Builds the NFA from the syntax tree, backwards: each part is built with the node that follows it known. */
    private static final class Builder {
        byte[] kind = new byte[64];
        int[] out1 = new int[64], out2 = new int[64];
        int[][] ranges = new int[64][];
        int[] setOf = new int[64];
        /** The syntax tree's character sets, each once: the copies a repeat builds share their node's. */
        final List<int[]> sets = new ArrayList<>();
        private final java.util.IdentityHashMap<int[], Integer> setIndex = new java.util.IdentityHashMap<>();
        int size, work;
        /** Whether a call node was built (a grammar's rules rather than a pattern). */
        boolean calls;

        int add(byte k, int a, int b, int[] r) {
            if (size >= MAX_POSITIONS) throw tooLarge();
            if (size == kind.length) {
                int n = Math.min(MAX_POSITIONS, size * 2);
                kind = Arrays.copyOf(kind, n);
                out1 = Arrays.copyOf(out1, n);
                out2 = Arrays.copyOf(out2, n);
                ranges = Arrays.copyOf(ranges, n);
                setOf = Arrays.copyOf(setOf, n);
            }
            kind[size] = k;
            out1[size] = a;
            out2[size] = b;
            ranges[size] = r;
            setOf[size] = r == null ? -1 : setIndex.computeIfAbsent(r, x -> {
                sets.add(x);
                return sets.size() - 1;
            });
            return size++;
        }

        private static UnsupportedRegexException tooLarge() {
            return new UnsupportedRegexException("the pattern is too large: it compiles to more than " + MAX_POSITIONS
                    + " NFA positions, the limit that bounds the work per token (each character, class, alternative and"
                    + " loop is one; a repeat {n,m} holds m copies of what it repeats)", -1);
        }

        /** The first node of node's part, followed by node k. */
        int compile(Node node, int k) {
            if (++work > MAX_WORK) throw tooLarge();
            switch (node) {
                case Chars c -> {
                    return add(CHAR, k, -1, c.ranges());
                }
                case Call c -> {
                    calls = true;
                    return add(CALL, k, c.rule(), null);
                }
                case Seq s -> {
                    int t = k;
                    for (int j = s.items().size() - 1; j >= 0; j--) t = compile(s.items().get(j), t);
                    return t;
                }
                case Alt a -> {
                    int t = compile(a.options().getLast(), k);
                    for (int j = a.options().size() - 2; j >= 0; j--) t = add(SPLIT, compile(a.options().get(j), k), t, null);
                    return t;
                }
                case Rep r -> {
                    int t = k;
                    if (r.max() < 0) {
                        // a loop: after each copy, another or what follows; at least one copy enters through the copy
                        int loop = add(SPLIT, -1, k, null);
                        int body = compile(r.body(), loop);
                        out1[loop] = body;
                        t = r.min() == 0 ? loop : body;
                        for (int j = 1; j < r.min(); j++) t = compile(r.body(), t);
                    } else {
                        // the optional copies nest, (x(x(x)?)?)?, so that each count has one path
                        for (int j = 0; j < r.max() - r.min(); j++) t = add(SPLIT, compile(r.body(), t), k, null);
                        for (int j = 0; j < r.min(); j++) t = compile(r.body(), t);
                    }
                    return t;
                }
            }
        }
    }
}
