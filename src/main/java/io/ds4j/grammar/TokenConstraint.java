package io.ds4j.grammar;

import com.github.benmanes.caffeine.cache.Cache;
import com.github.benmanes.caffeine.cache.Caffeine;
import io.ds4j.sampling.Constraint;


/**
 * A {@link Constraint} that walks a byte-level grammar: the allowed set of a state is found by walking the
 * tokenizer's {@link TokenTrie} against the state (each prefix once; a rejected byte prunes its whole subtree) and
 * is cached per state, since the same states recur (inside a string every ordinary character leads back to the same
 * state). The cache is shared by every constraint in the process ({@link #MASK_CACHE_BYTES}): requests held to one
 * compiled grammar ({@link Grammar} keeps those it compiled) meet the same states, so a schema many clients send has
 * its masks computed once, not once per request. States that are equal have the same continuations (their
 * {@code equals} says so), so a mask found for one is the mask of the other.
 *
 * <p>Length steering: a token is allowed only if the output can still be completed after it within the remaining
 * budget, counting one token for end-of-sequence (none with ignore_eos, where the output runs to max_tokens and ends
 * there complete) and assuming the worst case of one byte per token. Every byte has a
 * single-byte token in byte-level BPE vocabularies, so this guarantees a complete output whenever the budget allows
 * one at all. Where the budget is below that worst case from the start, the tokens that come closest to the end are
 * allowed, if taking them each step completes the output within the budget (counted once, in real tokens); where even
 * that path does not fit, the output cannot be complete whatever is allowed, so it is not steered at all: the model
 * writes what it would under the grammar and generation ends with finish reason "length" and the output as far as it
 * got, never closed early by the steering (a forced call's arguments as far as the model wrote them, not
 * {@code {"city": ""}}). A grammar of free text with optional tool calls is not steered at all
 * ({@link Grammar#optionalToolCalls}): the model's call is never shortened to fit.
 *
 * <p>Reasoning ends with {@code </think>}, which the model writes as one control token: that token is offered where
 * the grammar is inside the reasoning (other control tokens are never offered).
 *
 * <p>Bounded work: a state holds at most {@link Grammar#MAX_LIVE_STATES} live alternatives; {@link #allowed},
 * {@link #acceptablePrefix} and {@link #advance} throw {@link GrammarLimitException} (and leave the state as it was)
 * when a step would need more.
 */
public final class TokenConstraint implements Constraint {
    private static final org.slf4j.Logger LOG = org.slf4j.LoggerFactory.getLogger(TokenConstraint.class);

    /**
     * The bytes of masks kept for all constraints together (least recently used first out): 64 MiB, about 4,000 masks
     * of V4's 129,280-token vocabulary (16 KB each), where each request kept 128 of its own before.
     */
    static final long MASK_CACHE_BYTES = 64L << 20;

    /** A state's mask, by the trie it was walked over and whether the end is offered as with ignore_eos. */
    private record Key(TokenTrie trie, boolean ignoreEos, GState state) {}

    /** A state's allowed tokens with no length limit, and the largest completion distance after any of them. */
    private record Entry(long[] bits, int maxAfter) {}

    private static final Cache<Key, Entry> MASKS = Caffeine.newBuilder()
            .maximumWeight(MASK_CACHE_BYTES)
            // a regex state's live positions weigh too: up to 8,192 of them, as heavy as a mask
            .weigher((Key k, Entry e) -> e.bits.length * Long.BYTES + 64 + regexPositions(k.state) * Integer.BYTES)
            // its upkeep on the calling thread: the common pool runs the scheduler's parallel sampling
            .executor(Runnable::run)
            .build();

    private static int regexPositions(GState s) {
        return s instanceof Regex.At a ? a.positions() : s instanceof Regex.Mid m ? m.from().positions()
                : s instanceof Ebnf.Frame f ? f.weight() : 0;
    }

    private final TokenTrie trie;
    private final int words;
    private GState state;
    private long maskNanos, maskCalls, cacheHits, maxWork;

    private final boolean steered;
    /**
     * Whether the path of the closest tokens completes the output within the budget, once asked (where no completion
     * fits the worst case): 0 not asked yet, 1 it does, -1 it does not, and the output is left unsteered.
     */
    private int closestFits;
    private final boolean ignoreEos;
    /**
     * The tokens a completion may take after the token being chosen, less its remaining count: the chosen token, and
     * the end-of-sequence token unless ignore_eos, where the output ends at max_tokens instead.
     */
    private final int reserved;
    /** The request's id, which the log line names, or null where there is none (one output, as generate's). */
    private final String requestId;

    TokenConstraint(TokenTrie trie, GState start, boolean steered, boolean ignoreEos) {
        this(trie, start, steered, ignoreEos, null);
    }

    TokenConstraint(TokenTrie trie, GState start, boolean steered, boolean ignoreEos, String requestId) {
        this.requestId = requestId;
        this.trie = trie;
        this.words = (trie.vocab + 63) >> 6;
        this.state = start;
        this.steered = steered;
        this.ignoreEos = ignoreEos;
        this.reserved = ignoreEos ? 1 : 2;
    }

    @Override
    public long[] allowed(int remaining) {
        long t0 = System.nanoTime();
        long[] r = allowed(state, Math.max(1, remaining));
        maskNanos += System.nanoTime() - t0;
        maskCalls++;
        return r;
    }

    /**
     * The mask at state s; an EBNF grammar's frames stepped for it are counted against {@link Ebnf#MAX_WORK}.
     * @throws GrammarLimitException where the grammar would step its rules more than that
     */
    private long[] allowed(GState s, int remaining) {
        Ebnf.countWork(true);
        try {
            return mask(s, remaining);
        } finally {
            maxWork = Math.max(maxWork, Ebnf.countWork(false));
        }
    }

    /** The most grammar frames one mask of this constraint stepped ({@link Ebnf#MAX_WORK}; for tests). */
    long maxWork() {
        return maxWork;
    }

    private long[] mask(GState s, int remaining) {
        // a string held to a length alone takes, far from its bounds, what a plain string takes there (whose mask is
        // then shared with plain strings at the same place)
        if (s instanceof States.StrOf st) s = st.plainAlike(trie.longest);
        else if (inString(s) instanceof States.StrOf st) s = new States.Compact(st.plainAlike(trie.longest), true, false);
        Key k = new Key(trie, ignoreEos, s);
        // looked up, then computed outside the cache's locks (a mask can take milliseconds; two threads that miss the
        // same state at once both compute it, with the same result)
        Entry e = MASKS.getIfPresent(k);
        if (e == null) {
            e = full(s);
            MASKS.put(k, e);
        } else {
            cacheHits++;
        }
        if (!steered || closestFits < 0 || e.maxAfter <= remaining - reserved) return e.bits;
        return steered(s, remaining, e.bits);
    }

    /**
     * For free-text states (a JSON string body, a grammar's rule looping on the same text, raw text before its
     * delimiter) the precomputed tokens that leave the state as it is; the walk then only needs the tokens outside that
     * set. Null for other states.
     */
    private long[] pure(GState s) {
        s = inString(s);
        if (s instanceof States.Str st && st.mode() == States.Str.BODY) return trie.stringPure;
        if (s instanceof States.StrOf st && st.room() >= 0) return trie.stringPureWithin(st.room());
        if (s instanceof Ebnf.Frame f && f.keepsStringText()) return trie.stringPure;
        if (s instanceof States.Until u && u.matched() == 0 && u.utf8() == 0) return trie.textPure;
        if (s instanceof States.Reasoning r && r.think() == 0 && r.open() == 0 && r.utf8() == 0) return trie.textPure;
        return null;
    }

    /**
     * The JSON state inside a compact state ({@link States.Compact}) whose text ends inside a string, not after its
     * backslash, else s: until the string closes the wrapper refuses nothing, so a token that stays in the string (no
     * quote, no backslash) is taken exactly where the inner state takes it, and the string's shortcuts (its pure tokens,
     * a length-bounded string's plain likeness) hold for the wrapper too; tokens that leave the string are still walked
     * from the wrapper, which refuses whitespace after it.
     */
    private static GState inString(GState s) {
        return s instanceof States.Compact c && c.str() && !c.esc() ? c.in() : s;
    }

    private TokenTrie rest(GState s) {
        s = inString(s);
        return s instanceof States.Str || s instanceof States.StrOf || s instanceof Ebnf.Frame ? trie.stringRest : trie.textRest;
    }

    private Entry full(GState s) {
        long[] bits = new long[words];
        Walk w = new Walk(bits, Integer.MAX_VALUE);
        long[] pure = pure(s);
        if (pure != null) {
            System.arraycopy(pure, 0, bits, 0, words);
            w.trie = rest(s);
            w.maxAfter = s.dist();
        }
        w.walk(s, 0);
        w.thinkEnd(s);
        end(s, bits);
        return new Entry(bits, w.maxAfter);
    }

    /**
     * The allowed tokens after which the output can still be completed within the budget; where none can in the worst
     * case, the tokens that get closest, or {@code full} (unsteered) where even those cannot complete it in time.
     */
    private long[] steered(GState s, int remaining, long[] full) {
        long[] bits = new long[words];
        Walk w = new Walk(bits, remaining - reserved);
        long[] pure = pure(s);
        if (pure != null) {
            w.trie = rest(s);
            if (s.dist() <= remaining - reserved) System.arraycopy(pure, 0, bits, 0, words);
            w.minAfter = s.dist();
        }
        w.walk(s, 0);
        w.thinkEnd(s);
        offerEnd(s, bits);
        if (!isEmpty(bits)) return bits;
        // no completion fits in the worst case of a byte a token: the closest tokens may still complete it in real
        // tokens (a forced call's markup is about 180 bytes in about 60 tokens). Asked once, along one closest path (the
        // lowest token id each step): the closest tokens are taken from here on, so the answer is taken to hold later
        if (closestFits == 0) {
            closestFits = closestPathTokens(s, remaining) <= remaining ? 1 : -1;
            if (closestFits < 0)
                LOG.info("{}constrained output not steered: the path of its closest tokens to a complete form takes more than"
                        + " the {} tokens max_tokens leaves; the model's own output is cut there (finish reason length), not"
                        + " closed early", requestId == null ? "" : "request " + requestId + ": ", remaining);
        }
        // unsteered: closing the output early would still end it incomplete, and then not as the model wrote it
        if (closestFits < 0) return full;
        return closest(s, w.minAfter);
    }

    /**
     * The most steps {@link #closestPathTokens} walks: each is two walks of the trie on the engine's thread (~2.7 ms
     * with V4's vocabulary on this project's 2-core machine), which every other request waits for, once per choice.
     * At 1,024 a schema whose shortest value runs to kilobytes held all streams for 2.8 s (11 s at n = 4); at 128 the
     * wait is at most ~0.35 s per choice, and a forced call's markup (~60 tokens) is still walked whole. Where max_tokens
     * leaves more, a path still going after it is taken as one that fits, and steered as any other.
     */
    static final int CLOSEST_PATH_STEPS = 128;

    /** The tokens after which s is nearest the end (fewest bytes left): those with completion distance minAfter. */
    private long[] closest(GState s, int minAfter) {
        long[] bits = new long[words];
        Walk best = new Walk(bits, minAfter);
        long[] pure = pure(s);
        if (pure != null) {
            best.trie = rest(s);
            if (s.dist() <= minAfter) System.arraycopy(pure, 0, bits, 0, words);
        }
        best.walk(s, 0);
        best.thinkEnd(s);
        if (isEmpty(bits)) set(bits, trie.eos);
        return bits;
    }

    /**
     * The tokens the output takes from s to its end (the end-of-sequence token included unless ignore_eos) taking one
     * of the closest tokens each step; more than {@code cap} (or {@link #CLOSEST_PATH_STEPS}) where it is longer.
     */
    private int closestPathTokens(GState s, int cap) {
        int limit = Math.min(cap, CLOSEST_PATH_STEPS);
        for (int n = 0; ; n++) {
            if (s.accepting()) return n + (ignoreEos ? 0 : 1);
            if (n >= limit) return limit + 1;
            Walk w = new Walk(new long[words], -1);
            if (pure(s) != null) {
                w.trie = rest(s);
                w.minAfter = s.dist();
            }
            w.walk(s, 0);
            w.thinkEnd(s);
            long[] bits = closest(s, w.minAfter);
            int tok = -1;
            for (int i = 0; i < words && tok < 0; i++) {
                long b = bits[i] & (i == trie.eos >> 6 ? ~(1L << trie.eos) : -1L);
                if (b != 0) tok = (i << 6) + Long.numberOfTrailingZeros(b);
            }
            GState t = tok < 0 ? null : advance(s, tok);
            if (t == null) return limit + 1;
            s = t;
        }
    }

    /** {@link #offerEnd}, and the end at a dead end too, which compiled grammars do not reach (end rather than hang). */
    private void end(GState s, long[] bits) {
        offerEnd(s, bits);
        if (isEmpty(bits)) set(bits, trie.eos);
    }

    /** The end of the turn where the output may end: always, or with ignore_eos only where nothing else may follow. */
    private void offerEnd(GState s, long[] bits) {
        if (s.accepting() && !(ignoreEos && !isEmpty(bits))) set(bits, trie.eos);
    }

    /** One walk of the trie from a state, setting the bits of tokens whose after-state is within limit. */
    private final class Walk {
        final long[] bits;
        final int limit;
        TokenTrie trie = TokenConstraint.this.trie;
        int maxAfter = -1, minAfter = GState.FAR;
        GState lastState;
        int lastDist;

        Walk(long[] bits, int limit) {
            this.bits = bits;
            this.limit = limit;
        }

        /** Offers the {@code </think>} control token where the reasoning may end (its bytes, as one token). */
        void thinkEnd(GState s) {
            int id = TokenConstraint.this.trie.thinkEnd;
            if (id < 0 || !States.inReasoning(s)) return;
            GState t = TokenConstraint.this.advance(s, id);
            if (t == null) return;
            int d = t.dist();
            minAfter = Math.min(minAfter, d);
            if (d <= limit) {
                maxAfter = Math.max(maxAfter, d);
                set(bits, id);
            }
        }

        void walk(GState s, int node) {
            int first = trie.firstChild[node], end = first + trie.childCount[node];
            for (int c = first; c < end; c++) {
                GState t = s.next(trie.label[c] & 0xFF);
                if (t == null) continue;
                int a = trie.tokStart[c], b = trie.tokStart[c + 1];
                if (a < b) {
                    int d;
                    if (t == lastState) d = lastDist;
                    else {
                        d = t.dist();
                        lastState = t;
                        lastDist = d;
                    }
                    minAfter = Math.min(minAfter, d);
                    if (d <= limit) {
                        maxAfter = Math.max(maxAfter, d);
                        for (int i = a; i < b; i++) set(bits, trie.tokens[i]);
                    }
                }
                if (trie.childCount[c] > 0) walk(t, c);
            }
        }
    }

    private static void set(long[] bits, int id) {
        bits[id >> 6] |= 1L << id;
    }

    private static boolean isEmpty(long[] bits) {
        for (long x : bits) if (x != 0) return false;
        return true;
    }

    @Override
    public int acceptablePrefix(int[] tokens, int n, int remaining) {
        GState s = state;
        for (int i = 0; i < n; i++) {
            int rem = remaining - i;
            if (rem < 1 || s == null) return i;
            int tok = tokens[i];
            if (!Constraint.has(allowed(s, rem), tok)) return i;
            if (tok == trie.eos) return i + 1; // nothing may follow the end
            s = advance(s, tok);
        }
        return n;
    }

    @Override
    public long[] allowedAfter(int[] tokens, int n, int remaining) {
        long t0 = System.nanoTime();
        GState s = state;
        for (int i = 0; i < n && s != null; i++) s = tokens[i] == trie.eos ? null : advance(s, tokens[i]);
        long[] r = s == null ? null : allowed(s, Math.max(1, remaining));
        maskNanos += System.nanoTime() - t0;
        maskCalls++;
        return r;
    }

    @Override
    public void advance(int token) {
        if (token == trie.eos) {
            if (!state.accepting()) throw new IllegalStateException("end of sequence before the constrained output is complete");
            state = States.End.INSTANCE;
            return;
        }
        GState t = advance(state, token);
        if (t == null) throw new IllegalStateException("token " + token + " is not allowed by the constraint here");
        state = t;
    }

    private GState advance(GState s, int token) {
        byte[] b = token >= 0 && token < trie.vocab ? trie.bytes[token] : null;
        if (b == null || b.length == 0) return null;
        for (int i = 0; i < b.length && s != null; i++) s = s.next(b[i] & 0xFF);
        return s;
    }

    @Override
    public boolean complete() {
        return state.accepting();
    }

    /** Parse states live in the current state (alternatives the output may still be in). */
    int liveStates() {
        return States.width(state);
    }

    /** Nanoseconds spent computing masks so far (cache look-ups included). */
    public long maskNanos() {
        return maskNanos;
    }

    /** Masks asked for so far. */
    public long maskCalls() {
        return maskCalls;
    }

    /** Masks answered from the shared per-state cache (the steered end phase is never cached). */
    public long cacheHits() {
        return cacheHits;
    }
}
