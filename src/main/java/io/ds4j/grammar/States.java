package io.ds4j.grammar;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;

/**
 * The grammar states. Each state is a record holding its continuation {@code k} (the state to enter once its own
 * part is complete), so a state is the whole remaining grammar and equal records are interchangeable.
 * Whitespace between JSON tokens is allowed where JSON allows it, at most {@link #MAX_WS} bytes in a row.
 * Alternatives live at once are a {@link Union}, which merges states that differ only in their continuation, so
 * overlapping anyOf alternatives do not multiply the states at every nesting level; at most
 * {@link Grammar#MAX_LIVE_STATES} may be live ({@link GrammarLimitException} past it).
 */
final class States {
    private States() {}

    /** Longest whitespace run between JSON tokens: room for a newline and indentation, but no endless padding. */
    static final int MAX_WS = 24;
    /** Longest number text (sign, digits, fraction, exponent). */
    static final int MAX_NUMBER = 24;

    static final Schema.Any ANY = new Schema.Any();
    static final Schema.Arr ANY_ARRAY = new Schema.Arr(0, -1);

    static {
        ANY.minLen = 1;
        ANY_ARRAY.items = ANY;
        ANY_ARRAY.minLen = 2;
    }

    /** The start of a value of schema s, followed by k. */
    static GState value(Schema s, GState k) {
        return switch (s) {
            case Schema.Any a -> new AnyStart(k);
            case Schema.AnyObject o -> new FreeObj(0, k);
            case Schema.Str x -> new Str(k, Str.OPEN);
            case Schema.StrOf x -> new StrOf(x, k);
            case Schema.Text x -> new Text(x.re.start(), k, k.dist());
            case Schema.Num n -> Num.start(k, n);
            case Schema.Literals l -> new Lit(l.set, 0, new Same(k));
            case Schema.Arr a -> new Arr(a, 0, Arr.OPEN, k);
            case Schema.Obj o -> new Obj(o, 0, Obj.OPEN, k);
            case Schema.AnyOf u -> {
                // the compiler's flattened alternatives: nested anyOf and $ref expanded once, each schema once
                Schema[] opts = u.alternatives != null ? u.alternatives : u.options;
                List<GState> alts = new ArrayList<>(opts.length);
                for (Schema o : opts) alts.add(value(o, k));
                yield Union.of(alts);
            }
            case Schema.Ref r -> value(r.target, k);
        };
    }

    static GState ws(GState then) {
        return new Ws(then, MAX_WS);
    }

    /**
     * JSON text without whitespace between its tokens (vLLM's {@code disable_any_whitespace}): the JSON state in, with
     * whether the text so far ends inside a string (str) and right after its backslash (esc). Whitespace is refused
     * outside strings by reading the text itself rather than the states: a number or literal ends only at the byte
     * after it, which the state it ends in steps into its continuation's whitespace, so no state of in says "between
     * tokens" there. A string's content is untouched.
     */
    record Compact(GState in, boolean str, boolean esc) implements GState {
        @Override
        public GState next(int b) {
            if (!str && isWs(b)) return null;
            GState n = in.next(b);
            if (n == null) return null;
            return new Compact(n, str ? esc || b != '"' : b == '"', str && !esc && b == '\\');
        }

        @Override public boolean accepting() { return in.accepting(); }
        @Override public int dist() { return in.dist(); }
    }

    static boolean isWs(int b) {
        return b == ' ' || b == '\n' || b == '\t' || b == '\r';
    }

    /** Accepts nothing more; complete. */
    enum End implements GState {
        INSTANCE;

        @Override public GState next(int b) { return null; }
        @Override public boolean accepting() { return true; }
        @Override public int dist() { return 0; }
    }

    /**
     * A state whose own part is followed by a continuation {@link #k}, entered once that part is complete. Two states
     * that differ only in their continuation accept together exactly what their common part followed by either
     * continuation accepts, so {@link Union#of} can hold them as one state whose continuation is the union of theirs.
     */
    interface Framed extends GState {
        /** What follows this state's own part. */
        GState k();

        /** The same own part followed by another continuation. */
        GState withK(GState k);
    }

    /** Optional whitespace (up to left bytes) before then. */
    record Ws(GState then, int left) implements Framed {
        @Override
        public GState next(int b) {
            if (isWs(b) && left > 0) return left == 1 ? then : new Ws(then, left - 1);
            return then.next(b);
        }

        @Override public GState k() { return then; }
        @Override public GState withK(GState k) { return new Ws(k, left); }

        @Override public boolean accepting() { return then.accepting(); }
        @Override public int dist() { return then.dist(); }
    }

    /** Whether the output is (or may be) inside reasoning: free text that ends with {@code </think>}. */
    static boolean inReasoning(GState g) {
        if (g instanceof Reasoning) return true;
        if (g instanceof Until u) return u.d == THINK_END;
        if (g instanceof Union u) for (GState a : u.alts) if (inReasoning(a)) return true;
        return false;
    }

    /** How many states a state keeps live at once: a union's members, through leading whitespace. */
    static int width(GState g) {
        while (g instanceof Ws w) g = w.then;
        return g instanceof Union u ? u.width : 1;
    }

    /**
     * Several alternatives live at once (anyOf, a literal that may end or go on). Built only by {@link #of}, which keeps
     * one state per frame: alternatives that reached the same point of the same schema node along different parents
     * become one state whose continuation is the union of theirs. The live states thus stay bounded by the schema's
     * size instead of multiplying by the number of alternatives at every nesting level, and the continuations form a
     * shared graph rather than one copy of the stack per parse. Unions compare as sets; their hash, distance and
     * acceptance are computed once, since unions nest inside continuations and recomputing them would walk the
     * graph's every path.
     */
    static final class Union implements GState {
        /** One state per frame, in the order of their hashes (ties in any order). */
        private final GState[] alts;
        private final int[] hashes;
        private final int hash;
        private final int width;
        private final boolean frames;
        // caches filled on first use; a race only computes the same value twice
        private int dist = -1;
        private int accepting = -1;
        /**
         * A union found equal to this one, towards the one standing for all unions found equal so far: equal unions
         * built apart (the mask's walk and the committed token build the same states) compare once, not at every
         * level that shares them.
         */
        private Union canon;

        private Union(GState[] alts, int[] hashes, int width) {
            this.alts = alts;
            this.hashes = hashes;
            this.width = width;
            boolean f = false;
            // members are never unions (of flattens them)
            for (GState g : alts) f |= g instanceof Ebnf.Frame;
            this.frames = f;
            // mixed, not summed: members share their continuation's hash, and a plain sum of two would shift it out
            // a few bits per nesting level until every deep union hashed alike
            int h = 0x2545F491;
            for (int x : hashes) h = (h ^ mix(x)) * 0x9E3779B1;
            this.hash = mix(h);
        }

        private static int mix(int x) {
            x ^= x >>> 16;
            x *= 0x85EBCA6B;
            x ^= x >>> 13;
            x *= 0xC2B2AE35;
            return x ^ (x >>> 16);
        }

        /** The union standing for every union found equal to this one. */
        private Union rep() {
            Union r = this;
            while (r.canon != null) r = r.canon;
            for (Union x = this; x != r; ) {
                Union n = x.canon;
                x.canon = r;
                x = n;
            }
            return r;
        }

        /**
         * The union of some states (nulls, which lead nowhere, left out; unions flattened): null for none, the state
         * itself for one, else a union with states of equal frames merged.
         * @throws GrammarLimitException when more than {@link Grammar#MAX_LIVE_STATES} states would be live
         */
        static GState of(List<GState> in) {
            LinkedHashSet<GState> flat = new LinkedHashSet<>();
            for (GState g : in) {
                if (g == null) continue;
                if (g instanceof Union u) Collections.addAll(flat, u.alts);
                else flat.add(g);
            }
            if (flat.size() <= 1) return flat.isEmpty() ? null : flat.getFirst();
            // a grammar's frames merge through their continuations, which can run as deep as its rule uses are nested:
            // each merge counts towards its work per token (Ebnf#MAX_WORK)
            for (GState g : flat) {
                if (g instanceof Ebnf.Frame) {
                    Ebnf.chargeSteps(flat.size());
                    break;
                }
            }
            // a state's frame is the state with a placeholder continuation: equal frames, mergeable states
            LinkedHashMap<GState, List<GState>> frames = new LinkedHashMap<>();
            for (GState g : flat)
                frames.computeIfAbsent(g instanceof Framed f ? f.withK(End.INSTANCE) : g, x -> new ArrayList<>(1)).add(g);
            List<GState> out = new ArrayList<>(frames.size());
            for (List<GState> same : frames.values()) {
                if (same.size() == 1) {
                    out.add(same.getFirst());
                    continue;
                }
                List<GState> ks = new ArrayList<>(same.size());
                for (GState g : same) ks.add(((Framed) g).k());
                out.add(((Framed) same.getFirst()).withK(of(ks)));
            }
            if (out.size() == 1) return out.getFirst();
            int width = 0;
            for (GState g : out) width += width(g);
            if (width > Grammar.MAX_LIVE_STATES) throw new GrammarLimitException(width);
            long[] order = new long[out.size()];
            for (int i = 0; i < order.length; i++) order[i] = ((long) out.get(i).hashCode() << 32) | i;
            Arrays.sort(order);
            GState[] alts = new GState[order.length];
            int[] hashes = new int[order.length];
            for (int i = 0; i < order.length; i++) {
                alts[i] = out.get((int) order[i]);
                hashes[i] = (int) (order[i] >> 32);
            }
            return new Union(alts, hashes, width);
        }

        static GState of(GState a, GState b) {
            return of(Arrays.asList(a, b));
        }

        /** The states live at once (not to be changed). */
        List<GState> members() {
            return Arrays.asList(alts);
        }

        /** Whether a member is an EBNF grammar's frame: its members are then stepped together ({@link Ebnf#stepAll}). */
        boolean hasFrames() {
            return frames;
        }

        @Override
        public GState next(int b) {
            // a grammar's frames share continuations: stepped together, each is stepped once
            if (frames) return Ebnf.stepAll(this, b);
            List<GState> out = new ArrayList<>(alts.length);
            for (GState g : alts) {
                GState t = g.next(b);
                if (t != null) out.add(t);
            }
            return of(out);
        }

        @Override
        public boolean accepting() {
            if (accepting < 0) {
                boolean any = false;
                for (GState g : alts) any |= g.accepting();
                accepting = any ? 1 : 0;
            }
            return accepting == 1;
        }

        @Override
        public int dist() {
            if (dist < 0) {
                int d = GState.FAR;
                for (GState g : alts) d = Math.min(d, g.dist());
                dist = d;
            }
            return dist;
        }

        @Override
        public int hashCode() {
            return hash;
        }

        @Override
        public boolean equals(Object o) {
            if (this == o) return true;
            if (!(o instanceof Union u) || u.hash != hash || u.alts.length != alts.length) return false;
            Union a = rep(), b = u.rep();
            if (a == b) return true;
            if (!Arrays.equals(hashes, u.hashes)) return false;
            for (int i = 0; i < alts.length; i++) if (!alts[i].equals(u.alts[i]) && !inTies(u, i)) return false;
            a.canon = b;
            return true;
        }

        /** Whether alts[i] equals a member of u with the same hash (members of equal hashes may be in any order). */
        private boolean inTies(Union u, int i) {
            for (int j = 0; j < u.alts.length; j++) if (j != i && u.hashes[j] == hashes[i] && alts[i].equals(u.alts[j])) return true;
            return false;
        }

        @Override
        public String toString() {
            // not the members: printing a shared graph of continuations in full takes time exponential in its depth
            return "Union[" + alts.length + " states, " + width + " live]";
        }
    }

    /** What follows a completed literal of a {@link LitSet}, by the literal's value. */
    interface Then {
        GState after(int value);

        /** after(value).dist(), computed without building the state. */
        int afterDist(int value);

        /** The continuation after the whole construct this belongs to (see {@link Framed}). */
        GState k();

        /** The same, followed by another continuation. */
        Then withK(GState k);
    }

    /** The same continuation whatever the literal. */
    record Same(GState k) implements Then {
        @Override public GState after(int value) { return k; }
        @Override public int afterDist(int value) { return k.dist(); }
        @Override public Then withK(GState k) { return new Same(k); }
    }

    /** Inside one literal of a set. */
    record Lit(LitSet set, int node, Then then) implements Framed {
        @Override
        public GState next(int b) {
            int c = set.step(node, b);
            GState cont = c >= 0 ? new Lit(set, c, then) : null;
            if (set.terminal(node)) {
                GState past = then.after(set.value(node)).next(b);
                if (past != null) return cont == null ? past : Union.of(cont, past);
            }
            return cont;
        }

        @Override public GState k() { return then.k(); }
        @Override public GState withK(GState k) { return new Lit(set, node, then.withK(k)); }

        @Override
        public boolean accepting() {
            return set.terminal(node) && then.after(set.value(node)).accepting();
        }

        @Override
        public int dist() {
            if (then instanceof Same same) return GState.add(set.rest(node), same.k.dist());
            return dist(node, 0);
        }

        private int dist(int n, int depth) {
            int best = GState.FAR;
            if (set.terminal(n)) best = GState.add(depth, then.afterDist(set.value(n)));
            int[] kids = set.children(n);
            for (int i = 1; i < kids.length; i += 2) best = Math.min(best, dist(kids[i], depth + 1));
            return best;
        }
    }

    /**
     * Content beside tool calls while its text so far is a proper start of {@code avoid} (the bytes that open a
     * tool-call block where content would begin): the content may not begin with the whole of it, which only the block
     * may write, so that the output parser's reading (a block where the content begins is a call) is the grammar's. The
     * distance is the content's own (a content whose shortest text began so is no content a schema or pattern asks for).
     */
    record Avoiding(GState in, byte[] avoid, int matched) implements GState {
        @Override
        public GState next(int b) {
            GState t = in.next(b);
            if (t == null || (avoid[matched] & 0xFF) != b) return t;
            return matched + 1 == avoid.length ? null : new Avoiding(t, avoid, matched + 1);
        }

        @Override public boolean accepting() { return in.accepting(); }
        @Override public int dist() { return in.dist(); }
    }

    /** A literal text (one string), then k. */
    static GState literal(String text, GState k) {
        return new Lit(LITERALS.computeIfAbsent(text, t -> new LitSet(List.of(t))), 0, new Same(k));
    }

    /** One set per literal text, so states built from the same text compare equal. */
    private static final java.util.concurrent.ConcurrentHashMap<String, LitSet> LITERALS = new java.util.concurrent.ConcurrentHashMap<>();

    /** Any JSON value. */
    record AnyStart(GState k) implements Framed {
        @Override public GState withK(GState k) { return new AnyStart(k); }

        @Override
        public GState next(int b) {
            return switch (b) {
                case '{' -> new FreeObj(1, k);
                case '[' -> new Arr(ANY_ARRAY, 0, Arr.FIRST, k);
                case '"' -> new Str(k, Str.BODY);
                case 't', 'f', 'n' -> new Lit(BOOL_NULL, 0, new Same(k)).next(b);
                default -> (b == '-' || (b >= '0' && b <= '9')) ? Num.start(k, ANY_NUMBER).next(b) : null;
            };
        }

        @Override public boolean accepting() { return false; }
        @Override public int dist() { return GState.add(1, k.dist()); }
    }

    static final Schema.Num ANY_NUMBER = new Schema.Num(false);
    static final LitSet BOOL_NULL = new LitSet(List.of("true", "false", "null"));

    /**
     * A free-form object. Phases: 0 before '{', 1 after '{' (key or '}'), 2 after ',' (key), 3 after a key (':'),
     * 4 after a value (',' or '}'); whitespace is handled by wrapping.
     */
    record FreeObj(int phase, GState k) implements Framed {
        @Override public GState withK(GState k) { return new FreeObj(phase, k); }

        @Override
        public GState next(int b) {
            return switch (phase) {
                case 0 -> b == '{' ? ws(new FreeObj(1, k)) : null;
                case 1, 2 -> b == '"' ? new Str(ws(new FreeObj(3, k)), Str.BODY) : (b == '}' && phase == 1 ? k : null);
                case 3 -> b == ':' ? ws(value(ANY, ws(new FreeObj(4, k)))) : null;
                default -> b == ',' ? ws(new FreeObj(2, k)) : b == '}' ? k : null;
            };
        }

        @Override public boolean accepting() { return false; }

        @Override
        public int dist() {
            int own = switch (phase) {
                case 0 -> 2;
                case 1, 4 -> 1;
                case 2 -> 7;   // "":0}
                default -> 3;  // :0}
            };
            return GState.add(own, k.dist());
        }
    }

    /** A JSON string. Modes: OPEN, BODY, ESC, HEX(n) = HEX1 − 1 + n digits left, UTF8 = 16 + need·8 + range kind. */
    record Str(GState k, int mode, int kd) implements Framed {
        @Override public GState withK(GState k) { return new Str(k, mode); }

        Str(GState k, int mode) {
            this(k, mode, k.dist());
        }

        static final int OPEN = -1, BODY = 0, ESC = 1, HEX1 = 1; // HEX n digits left: mode 1 + n (2..5)

        @Override
        public GState next(int b) {
            if (mode == OPEN) return b == '"' ? new Str(k, BODY, kd) : null;
            if (mode == BODY) {
                if (b == '"') return k;
                if (b == '\\') return new Str(k, ESC, kd);
                if (b < 0x20) return null;
                if (b < 0x80) return this;
                return utf8Lead(b);
            }
            if (mode == ESC) {
                return switch (b) {
                    case '"', '\\', '/', 'b', 'f', 'n', 'r', 't' -> new Str(k, BODY, kd);
                    case 'u' -> new Str(k, HEX1 + 4, kd);
                    default -> null;
                };
            }
            if (mode <= HEX1 + 4) {
                boolean hex = (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
                if (!hex) return null;
                return new Str(k, mode == HEX1 + 1 ? BODY : mode - 1, kd);
            }
            int need = (mode - 16) >> 3, kind = (mode - 16) & 7;
            int lo = 0x80, hi = 0xBF;
            switch (kind) {
                case 1 -> lo = 0xA0;
                case 2 -> hi = 0x9F;
                case 3 -> lo = 0x90;
                case 4 -> hi = 0x8F;
                default -> { }
            }
            if (b < lo || b > hi) return null;
            return need == 1 ? new Str(k, BODY, kd) : new Str(k, 16 + (need - 1) * 8, kd);
        }

        private GState utf8Lead(int b) {
            if (b >= 0xC2 && b <= 0xDF) return new Str(k, 16 + 8, kd);
            if (b == 0xE0) return new Str(k, 16 + 16 + 1, kd);
            if (b == 0xED) return new Str(k, 16 + 16 + 2, kd);
            if (b >= 0xE1 && b <= 0xEF) return new Str(k, 16 + 16, kd);
            if (b == 0xF0) return new Str(k, 16 + 24 + 3, kd);
            if (b == 0xF4) return new Str(k, 16 + 24 + 4, kd);
            if (b >= 0xF1 && b <= 0xF3) return new Str(k, 16 + 24, kd);
            return null;
        }

        @Override public boolean accepting() { return false; }

        @Override
        public int dist() {
            int own;
            if (mode == OPEN) own = 2;
            else if (mode == BODY) own = 1;
            else if (mode == ESC) own = 2;
            else if (mode <= HEX1 + 4) own = mode - HEX1 + 1;
            else own = ((mode - 16) >> 3) + 1;
            return GState.add(own, kd);
        }
    }

    /**
     * A JSON string of a {@link Schema.StrOf}: the characters its text stands for (an escape read as its character) step
     * the schema's pattern, re, and are counted, so the string ends only where the pattern matches and the count is in
     * the length range, and no character is taken after which it could not. Modes: OPEN before the opening quote, BODY
     * between characters (or inside a character written as raw UTF-8, whose bytes re, then a {@link Regex.Mid}, takes
     * in turn), ESC after a backslash, HEX1 + n with n hex digits of a backslash-u escape to come (hex: those so far).
     * count is the characters so far, the one inside re included; without a maxLength it stops at minLength (more
     * changes nothing), so a long string keeps one state. Held to a pattern, a backslash-u escape of a surrogate is
     * refused (a pair would be one character written in two escapes, which the pattern cannot step one at a time):
     * such a character is written as UTF-8. Held to a length alone, any escape is taken, as a plain string takes it,
     * and a low surrogate's escape right after a high one's (high: the escape before was one) counts with it as one
     * character.
     */
    record StrOf(Schema.StrOf s, GState re, int count, int mode, int hex, boolean high, GState k, int kd) implements Framed {
        static final int OPEN = -1, BODY = 0, ESC = 1, HEX1 = 1;

        StrOf(Schema.StrOf s, GState k) {
            this(s, s.re.start(), 0, OPEN, 0, false, k, k.dist());
        }

        @Override public GState withK(GState k) { return new StrOf(s, re, count, mode, hex, high, k, k.dist()); }

        /**
         * The plain string state whose tokens this one takes, where that is so (else this state): a length alone is
         * held, minLength is reached, and no token (at most longest bytes, so at most that many characters) can pass
         * maxLength. A token then leads both to states of the same distance, so the plain string's mask, which most
         * tokens keep without a walk over the trie, is this one's.
         */
        GState plainAlike(int longest) {
            if (s.re != Schema.StrOf.ANY_TEXT || mode != BODY || !(re instanceof Regex.At) || count < s.minLength
                    || s.maxLength >= 0 && s.maxLength - count < longest) return this;
            return new Str(k, Str.BODY, kd);
        }

        /**
         * How many more characters the string may take, where plain string text (no quote, backslash or control
         * character) keeps this state but for its count and distance alike: a length alone is held and minLength is
         * reached; else −1. A token of such text and at most that many characters then leads to a state of the same
         * distance, so the mask takes those tokens without walking them ({@link TokenTrie#stringPureWithin}).
         */
        int room() {
            if (s.re != Schema.StrOf.ANY_TEXT || mode != BODY || !(re instanceof Regex.At) || count < s.minLength) return -1;
            return s.maxLength < 0 ? Integer.MAX_VALUE : s.maxLength - count;
        }

        /** The state in mode m after a character (or a byte of one) led re to t, c characters in all; null where it cannot end. */
        private GState then(GState t, int c, int m, int h) {
            if (t == null || !fits(t, c)) return null;
            return new StrOf(s, t, s.maxLength < 0 ? Math.min(c, s.minLength) : c, m, h, false, k, kd);
        }

        /** Whether the pattern's state t, c characters in, can still end at a length in range. */
        private boolean fits(GState t, int c) {
            if (s.counts == null) return true;
            if (t instanceof Regex.Mid m) return m.from().anyChar(m.lo(), m.hi(), a -> within(a, c));
            return within((Regex.At) t, c);
        }

        private boolean within(Regex.At a, int c) {
            return a.endsWithin(s.counts, Math.max(0, s.minLength - c), s.maxLength >= 0 ? s.maxLength - c : s.cap);
        }

        /**
         * The state in mode m inside an escape whose character is in [lo, hi], which some such character must lead to
         * (else null); held to a length alone, any does.
         */
        private GState escaped(int lo, int hi, int m, int h) {
            // at maxLength only the low half of a pair begun just before may come, which adds no character
            if (count == s.maxLength) return high && hi >= 0xDC00 && lo <= 0xDFFF ? new StrOf(s, re, count, m, h, true, k, kd) : null;
            if (s.re == Schema.StrOf.ANY_TEXT || ((Regex.At) re).anyChar(lo, hi, a -> fits(a, count + 1)))
                return new StrOf(s, re, count, m, h, high, k, kd);
            return null;
        }

        @Override
        public GState next(int b) {
            if (mode == OPEN) return b == '"' ? new StrOf(s, re, count, BODY, 0, false, k, kd) : null;
            if (mode == BODY) {
                if (re instanceof Regex.Mid m) return then(m.next(b), count, BODY, 0);
                if (b == '"') return re.accepting() && count >= s.minLength ? k : null;
                if (b == '\\') return escaped(0, 0xFFFF, ESC, 0);
                if (count == s.maxLength || b < 0x20) return null;
                return then(re.next(b), count + 1, BODY, 0);
            }
            Regex.At at = (Regex.At) re;
            if (mode == ESC) {
                int cp = switch (b) {
                    case '"', '\\', '/' -> b;
                    case 'b' -> '\b';
                    case 'f' -> '\f';
                    case 'n' -> '\n';
                    case 'r' -> '\r';
                    case 't' -> '\t';
                    default -> -1;
                };
                if (b == 'u') return escaped(0, 0xFFFF, HEX1 + 4, 0);
                return cp < 0 || count == s.maxLength ? null : then(at.step(cp), count + 1, BODY, 0);
            }
            int d = Character.digit(b, 16);
            if (d < 0 || b >= 0x80) return null;
            int v = hex << 4 | d, left = mode - HEX1 - 1;
            if (left > 0) return escaped(v << 4 * left, v << 4 * left | (1 << 4 * left) - 1, HEX1 + left, v);
            if (v < 0xD800 || v > 0xDFFF) return count == s.maxLength ? null : then(at.step(v), count + 1, BODY, 0);
            if (s.re != Schema.StrOf.ANY_TEXT) return null;
            // a low surrogate right after a high one is the rest of its character
            boolean pair = high && v >= 0xDC00;
            if (!pair && count == s.maxLength) return null;
            GState t = then(re, pair ? count : count + 1, BODY, 0);
            return t == null || pair || v >= 0xDC00 ? t : new StrOf(s, re, ((StrOf) t).count, BODY, 0, true, k, kd);
        }

        @Override public boolean accepting() { return false; }

        /**
         * A lower bound: the bytes of the pattern's shortest ending and of the characters minLength still asks for, one
         * each, whichever is more (a longer character takes more), then the closing quote. Inside an escape held to a
         * pattern, the escape's own bytes come first: after the backslash the cheaper of a two-byte escape's character
         * and a backslash-u escape (u and four digits) of any, after some digits the ones still to come; then the
         * pattern's shortest ending after that character. Counting the escape as one byte let the length steering begin
         * an escape (a backslash token) that could not end within max_tokens, where the pattern's next character (a
         * letter, a digit) has no two-byte escape.
         */
        @Override
        public int dist() {
            int chars = Math.max(0, s.minLength - count), own;
            if (mode == OPEN) own = 1 + Math.max(re.dist(), chars);
            else if (mode == BODY) own = Math.max(re.dist(), chars);
            else if (s.re == Schema.StrOf.ANY_TEXT) own = mode == ESC ? Math.max(1, chars) : (mode - HEX1) + Math.max(0, chars - 1);
            else if (mode == ESC) {
                Regex.At at = (Regex.At) re;
                int rest = Math.max(0, chars - 1);
                own = Math.min(GState.add(1, Math.max(at.distAfterShortEscape(), rest)),
                        GState.add(5, Math.max(at.distAfterBmpChar(), rest)));
            } else {
                int left = mode - HEX1, lo = hex << 4 * left;
                own = GState.add(left, Math.max(((Regex.At) re).distAfterChars(lo, lo | (1 << 4 * left) - 1), Math.max(0, chars - 1)));
            }
            return GState.add(GState.add(own, 1), kd);
        }
    }

    /**
     * A value of a {@link Schema.Text}: its pattern's state re, then k once re matches; a byte may go on in re or, where
     * re matches, begin k (a number's digits never begin what follows it, so at most one does).
     */
    record Text(GState re, GState k, int kd) implements Framed {
        @Override public GState withK(GState k) { return new Text(re, k, k.dist()); }

        @Override
        public GState next(int b) {
            GState t = re.next(b), on = t == null ? null : new Text(t, k, kd);
            GState end = re.accepting() ? k.next(b) : null;
            return end == null ? on : on == null ? end : Union.of(on, end);
        }

        @Override public boolean accepting() { return re.accepting() && k.accepting(); }
        @Override public int dist() { return GState.add(re.dist(), kd); }
    }

    /**
     * A JSON number of schema n (integer: no fraction or exponent; bounded: capped integer digits, no exponent);
     * len counts its bytes so far, digits its integer digits; in the exponent, negExp is its sign, exp the value of
     * its digits so far and expDigits their count. Every text admitted parses to a finite double: see
     * {@link #MAX_EXP_DIGITS} and {@link #MAX_MAGNITUDE}. Where a bound is below 10^15 ({@link Schema.Num#posCap}),
     * tight says the digits so far are those of the bound (15 nines, then its fraction), so a number never passes it:
     * 999999999999999.99999999 under a maximum of 999999999999999 parsed as 10^15.
     */
    record Num(GState k, Schema.Num n, int phase, int len, int digits, boolean negExp, int exp, int expDigits,
               boolean neg, boolean tight) implements Framed {
        @Override public GState withK(GState k) { return new Num(k, n, phase, len, digits, negExp, exp, expDigits, neg, tight); }

        static final int START = 0, MINUS = 1, ZERO = 2, INT = 3, DOT = 4, FRAC = 5, E = 6, ESIGN = 7, EXP = 8;
        /** Most exponent digits (leading zeros count): an exponent is at most 999, whatever its sign. */
        static final int MAX_EXP_DIGITS = 3;
        /**
         * Integer digits plus a positive exponent are at most this, so a number stays below 10^308, under
         * Double.MAX_VALUE (1.797e308): a longer mantissa leaves a smaller exponent. Without it the model wrote
         * 91207513E898662376790471, Infinity to every client. A negative exponent needs no such cap: at worst the
         * value rounds to zero or a subnormal, still finite.
         */
        static final int MAX_MAGNITUDE = 308;

        static Num start(GState k, Schema.Num n) {
            // tight only where some cap applies, so numbers without one keep the states they had
            return new Num(k, n, START, 0, 0, false, 0, 0, false, n.posCap != null || n.negCap != null);
        }

        private boolean done() {
            return phase == ZERO || phase == INT || phase == FRAC || phase == EXP;
        }

        /** Whether exponent digit d may come next. */
        private boolean expDigit(int d) {
            int e = exp * 10 + d;
            return expDigits < MAX_EXP_DIGITS && (negExp || digits + e <= MAX_MAGNITUDE);
        }

        /**
         * Whether the digits after b still equal the bound's, or -1 where b would pass it. In the integer part that is
         * all nines; at the dot, fifteen of them; in the fraction, the cap's digit at that place.
         */
        private int tightAfter(int to, int b) {
            if (!tight) return 0;
            String cap = neg ? n.negCap : n.posCap;
            if (cap == null) return 0;
            return switch (to) {
                case ZERO -> 0;
                case INT -> b == '9' ? 1 : 0;
                case DOT -> digits == n.maxIntDigits ? 1 : 0;
                case FRAC -> {
                    int at = len - (neg ? 1 : 0) - digits - 1;
                    int c = at < cap.length() ? cap.charAt(at) : '0';
                    yield b > c ? -1 : b == c ? 1 : 0;
                }
                default -> 0;
            };
        }

        @Override
        public GState next(int b) {
            boolean digit = b >= '0' && b <= '9';
            boolean integer = n.integer, expAllowed = !n.integer && n.maxIntDigits < 0;
            boolean moreDigits = n.maxIntDigits < 0 || digits < n.maxIntDigits;
            int to = -1;
            switch (phase) {
                case START -> to = b == '-' && !n.nonNegative ? MINUS : b == '0' ? ZERO : digit ? INT : -1;
                case MINUS -> to = b == '0' ? ZERO : digit ? INT : -1;
                case ZERO, INT -> {
                    if (phase == INT && digit && moreDigits) to = INT;
                    else if (!integer && b == '.') to = DOT;
                    else if (expAllowed && (b == 'e' || b == 'E')) to = E;
                }
                case DOT -> to = digit ? FRAC : -1;
                case FRAC -> to = digit ? FRAC : expAllowed && (b == 'e' || b == 'E') ? E : -1;
                case E -> to = (b == '+' || b == '-') ? ESIGN : digit && expDigit(b - '0') ? EXP : -1;
                case ESIGN, EXP -> to = digit && expDigit(b - '0') ? EXP : -1;
                default -> { }
            }
            boolean minus = to == MINUS;
            int t = minus ? (tight && n.negCap != null ? 1 : 0) : to >= 0 ? tightAfter(to, b) : 0;
            if (t < 0) to = -1;
            // a phase that still needs a digit must leave room for it under the length cap
            boolean complete = to == ZERO || to == INT || to == FRAC || to == EXP;
            if (to >= 0 && len + (complete ? 1 : 2) <= MAX_NUMBER) {
                boolean expNext = to == EXP;
                return new Num(k, n, to, len + 1, digits + (to == ZERO || to == INT ? 1 : 0),
                        negExp || (to == ESIGN && b == '-'), expNext ? exp * 10 + (b - '0') : exp,
                        expDigits + (expNext ? 1 : 0), neg || minus, t == 1);
            }
            return done() ? k.next(b) : null;
        }

        @Override public boolean accepting() { return done() && k.accepting(); }

        @Override
        public int dist() {
            return GState.add(done() ? 0 : 1, k.dist());
        }
    }

    /** Phases of containers. */
    record Arr(Schema.Arr a, int count, int phase, GState k) implements Framed {
        @Override public GState withK(GState k) { return new Arr(a, count, phase, k); }

        static final int OPEN = 0, FIRST = 1, AFTER = 2;

        @Override
        public GState next(int b) {
            switch (phase) {
                case OPEN:
                    return b == '[' ? ws(new Arr(a, 0, FIRST, k)) : null;
                case FIRST:
                    if (b == ']') return a.minItems == 0 ? k : null;
                    if (a.maxItems == 0) return null;
                    return value(a.items, ws(after(1))).next(b);
                default:
                    if (b == ']') return count >= a.minItems ? k : null;
                    if (b == ',' && (a.maxItems < 0 || count < a.maxItems)) return ws(value(a.items, ws(after(count + 1))));
                    return null;
            }
        }

        private Arr after(int n) {
            int cap = Math.max(1, Math.max(a.minItems, a.maxItems));
            return new Arr(a, Math.min(n, cap), AFTER, k);
        }

        @Override public boolean accepting() { return false; }

        @Override
        public int dist() {
            // in long: minItems 2147483647 times an item's length wrapped negative as an int, and the decoder took
            // the array for the shortest way out of an anyOf with null
            long item = a.items.minLen, min = a.minItems;
            long own = switch (phase) {
                case OPEN -> 2 + (min == 0 ? 0 : min * item + min - 1);
                case FIRST -> 1 + (min == 0 ? 0 : min * item + min - 1);
                default -> 1 + Math.max(0, min - count) * (item + 1);
            };
            return GState.add((int) Math.min(own, GState.FAR), k.dist());
        }
    }

    /** An object of known properties. Phases: OPEN before '{', FIRST after '{', AFTER after a value. */
    record Obj(Schema.Obj o, int next, int phase, GState k) implements Framed {
        @Override public GState withK(GState k) { return new Obj(o, next, phase, k); }

        static final int OPEN = 0, FIRST = 1, AFTER = 2;

        @Override
        public GState next(int b) {
            switch (phase) {
                case OPEN:
                    return b == '{' ? ws(new Obj(o, 0, FIRST, k)) : null;
                case FIRST:
                    if (b == '}') return o.firstRequired(0) == o.props.length ? k : null;
                    GState key = keys(0);
                    return key == null ? null : key.next(b);
                default:
                    if (b == '}') return o.firstRequired(next) == o.props.length ? k : null;
                    if (b == ',' && next < o.props.length) return ws(keys(next));
                    return null;
            }
        }

        private GState keys(int from) {
            if (from >= o.props.length) return null;
            return new Lit(o.keys(from), 0, new KeyThen(o, k));
        }

        @Override public boolean accepting() { return false; }

        @Override
        public int dist() {
            int own = switch (phase) {
                case OPEN -> 1 + o.tail(0, true);
                case FIRST -> o.tail(0, true);
                default -> o.tail(next, false);
            };
            return GState.add(own, k.dist());
        }
    }

    /** After a key: ':' then the property's value, then the rest of the object. */
    record KeyThen(Schema.Obj o, GState k) implements Then {
        @Override public Then withK(GState k) { return new KeyThen(o, k); }

        @Override
        public GState after(int i) {
            return ws(new Colon(o, i, k));
        }

        @Override
        public int afterDist(int i) {
            return GState.add(1 + o.props[i].minLen + o.tail(i + 1, false), k.dist());
        }
    }

    record Colon(Schema.Obj o, int i, GState k) implements Framed {
        @Override public GState withK(GState k) { return new Colon(o, i, k); }

        @Override
        public GState next(int b) {
            return b == ':' ? ws(value(o.props[i], ws(new Obj(o, i + 1, Obj.AFTER, k)))) : null;
        }

        @Override public boolean accepting() { return false; }

        @Override
        public int dist() {
            return GState.add(1 + o.props[i].minLen + o.tail(i + 1, false), k.dist());
        }
    }

    /** A fixed delimiter with its failure table (compared by identity). */
    static final class Delim {
        final byte[] bytes;
        final int[] fail;

        Delim(String s) {
            bytes = s.getBytes(StandardCharsets.UTF_8);
            fail = new int[bytes.length];
            for (int i = 1, j = 0; i < bytes.length; i++) {
                while (j > 0 && bytes[i] != bytes[j]) j = fail[j - 1];
                if (bytes[i] == bytes[j]) j++;
                fail[i] = j;
            }
        }

        /** Bytes of the delimiter matched after byte b, m of them matched before it (bytes.length: complete). */
        int step(int m, int b) {
            while (m > 0 && (bytes[m] & 0xFF) != b) m = fail[m - 1];
            return (bytes[m] & 0xFF) == b ? m + 1 : m;
        }

        /** Fewest bytes that complete the delimiter, m matched and utf8 continuation bytes of a character owed. */
        int rest(int m, int utf8) {
            return utf8 + bytes.length - (utf8 > 0 ? 0 : m);
        }
    }

    /** The UTF-8 continuation bytes owed after byte b, utf8 owed before it; −1 where b cannot come. */
    static int utf8After(int utf8, int b) {
        if (utf8 > 0) return b >= 0x80 && b <= 0xBF ? utf8 - 1 : -1;
        if (b < 0x80) return 0;
        if (b >= 0xC2 && b <= 0xDF) return 1;
        if (b >= 0xE0 && b <= 0xEF) return 2;
        if (b >= 0xF0 && b <= 0xF4) return 3;
        return -1;
    }

    static final Delim THINK_END = new Delim(io.ds4j.text.chat.V4Format.THINK_END);
    static final Delim PARAMETER_END = new Delim(Dsml.PARAMETER_CLOSE);
    static final Delim TOOL_CALLS_START = new Delim(Dsml.TOOL_CALLS_OPEN);

    /**
     * Free UTF-8 text up to and including the first occurrence of a delimiter, then k. With {@code mayEnd} the text
     * may also end the output anywhere between characters (the delimiter is then an option, not a must).
     */
    record Until(Delim d, int matched, int utf8, GState k, int kd, boolean mayEnd) implements Framed {
        @Override public GState withK(GState k) { return new Until(d, matched, utf8, k, k.dist(), mayEnd); }

        Until(Delim d, int matched, int utf8, GState k) {
            this(d, matched, utf8, k, k.dist(), false);
        }

        /** Text that may end anywhere or go on into k through the delimiter. */
        static Until optional(Delim d, GState k) {
            return new Until(d, 0, 0, k, k.dist(), true);
        }

        @Override
        public GState next(int b) {
            int u = utf8After(utf8, b);
            if (u < 0) return null;
            int m = d.step(matched, b);
            if (m == d.bytes.length) return k;
            return m == matched && u == utf8 && m == 0 && u == 0 ? this : new Until(d, m, u, k, kd, mayEnd);
        }

        @Override public boolean accepting() { return mayEnd && utf8 == 0; }

        @Override
        public int dist() {
            if (mayEnd) return utf8;
            return GState.add(d.rest(matched, utf8), kd);
        }
    }

    /**
     * Reasoning beside optional tool calls: free UTF-8 text up to the first {@code </think>} (then k, the output after
     * the reasoning) or the first opening of a tool-call block (then block, its calls), whichever comes first, as the
     * output parser ends reasoning at either.
     */
    record Reasoning(int think, int open, int utf8, GState k, GState block) implements GState {
        @Override
        public GState next(int b) {
            int u = utf8After(utf8, b);
            if (u < 0) return null;
            int t = THINK_END.step(think, b), o = TOOL_CALLS_START.step(open, b);
            if (t == THINK_END.bytes.length) return k;
            if (o == TOOL_CALLS_START.bytes.length) return block;
            return t == think && o == open && u == utf8 ? this : new Reasoning(t, o, u, k, block);
        }

        @Override public boolean accepting() { return false; }

        @Override
        public int dist() {
            return Math.min(GState.add(THINK_END.rest(think, utf8), k.dist()), GState.add(TOOL_CALLS_START.rest(open, utf8), block.dist()));
        }
    }

    // ------------------------------------------------------------------------------------------- DSML tool calls

    /**
     * After the invoke line of tool i: its parameters, held to its schema, or any DSML parameters ({@link FreeParams})
     * for a tool whose schema is not enforced (a null entry of tools).
     */
    record ToolThen(List<Schema.Obj> tools, GState k) implements Then {
        @Override public Then withK(GState k) { return new ToolThen(tools, k); }

        @Override
        public GState after(int i) {
            Schema.Obj o = tools.get(i);
            if (o == null) return new FreeParams(true, k);
            return new Lit(o.dsml(0, true), 0, new ParamThen(o, k));
        }

        @Override
        public int afterDist(int i) {
            Schema.Obj o = tools.get(i);
            return GState.add(o == null ? FreeParams.CLOSE_BYTES : o.dsmlTail(0, true), k.dist());
        }
    }

    /**
     * The parameters of a function whose arguments are not held to a schema: DSML parameter lines of any name, each a
     * raw text ({@code string="true"}) or any JSON value ({@code string="false"}), then the invoke's close and k. The
     * markup stays what the output parser reads, so the call is still reported as a call.
     */
    record FreeParams(boolean first, GState k) implements Framed {
        static final String CLOSE = "\n" + Dsml.INVOKE_CLOSE;
        static final int CLOSE_BYTES = CLOSE.getBytes(StandardCharsets.UTF_8).length;

        @Override public GState withK(GState k) { return new FreeParams(first, k); }

        @Override
        public GState next(int b) {
            GState param = literal((first ? "" : "\n") + Dsml.PARAMETER_OPEN + " name=\"", new ParamName(false, 0, k));
            return Union.of(param, literal(CLOSE, k)).next(b);
        }

        @Override public boolean accepting() { return false; }
        @Override public int dist() { return GState.add(CLOSE_BYTES, k.dist()); }
    }

    /**
     * A free parameter's name (one character or more, none of them a quote, angle bracket or line break, which the
     * DSML attribute cannot carry), its closing quote, its kind and value, then the next parameter or the close.
     */
    record ParamName(boolean some, int utf8, GState k) implements Framed {
        /** The fewest bytes after the name's closing quote: an empty raw value, its close, the invoke's close. */
        private static final int REST = (" string=\"true\">" + Dsml.PARAMETER_CLOSE + FreeParams.CLOSE)
                .getBytes(StandardCharsets.UTF_8).length;

        @Override public GState withK(GState k) { return new ParamName(some, utf8, k); }

        @Override
        public GState next(int b) {
            if (utf8 == 0 && b == '"') return some ? kind() : null;
            if (b == '<' || b == '>' || b == '\n' || b == '\r') return null;
            int u = utf8After(utf8, b);
            if (u < 0) return null;
            return some && u == 0 && utf8 == 0 ? this : new ParamName(true, u, k);
        }

        private GState kind() {
            GState more = new FreeParams(false, k);
            GState raw = literal("true\">", new Until(PARAMETER_END, 0, 0, more));
            GState json = literal("false\">", value(ANY, literal(Dsml.PARAMETER_CLOSE, more)));
            return literal(" string=\"", Union.of(raw, json));
        }

        @Override public boolean accepting() { return false; }
        @Override public int dist() { return GState.add(utf8 + (some ? 0 : 1) + 1 + REST, k.dist()); }
    }

    /**
     * After an invoke's close when more calls may follow: the block's close (then nothing), or another invoke line of
     * one of the tools (heads, valued by tool index) whose call leads back here. Built on each step rather than held,
     * since the graph is a cycle; equal by its parts, so the constraint's mask cache finds it again.
     */
    record MoreCalls(LitSet heads, List<Schema.Obj> tools) implements GState {
        private static final String CLOSE = "\n" + Dsml.TOOL_CALLS_CLOSE;
        private static final int CLOSE_BYTES = CLOSE.getBytes(StandardCharsets.UTF_8).length;

        @Override
        public GState next(int b) {
            GState close = literal(CLOSE, End.INSTANCE);
            GState another = new Lit(heads, 0, new ToolThen(tools, this));
            return Union.of(close, another).next(b);
        }

        @Override public boolean accepting() { return false; }
        @Override public int dist() { return CLOSE_BYTES; }
    }

    /** After a parameter opening tag (or the invoke close, value −1). */
    record ParamThen(Schema.Obj o, GState k) implements Then {
        @Override public Then withK(GState k) { return new ParamThen(o, k); }

        @Override
        public GState after(int j) {
            if (j < 0) return k;
            GState rest = new Lit(o.dsml(j + 1, false), 0, this);
            if (Dsml.raw(o.props[j])) return new Until(PARAMETER_END, 0, 0, rest);
            return value(o.props[j], literal(Dsml.PARAMETER_CLOSE, rest));
        }

        @Override
        public int afterDist(int j) {
            if (j < 0) return k.dist();
            return GState.add(o.dsmlValue(j) + o.dsmlTail(j + 1, false), k.dist());
        }
    }
}
