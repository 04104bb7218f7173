package io.ds4j.grammar;

import io.ds4j.text.Tokenizer;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.WeakHashMap;

/**
 * The token byte strings of one tokenizer as a trie, built once per tokenizer and shared by every request: walking it
 * against a grammar state visits each shared prefix once and prunes whole subtrees at the first rejected byte,
 * which is what makes a mask over ~129k tokens cheap. Added (special) tokens are left out; the end-of-sequence token
 * is handled by the constraint itself.
 */
public final class TokenTrie {
    private static final Map<Tokenizer, TokenTrie> CACHE = new WeakHashMap<>();

    /** Children of node n are nodes firstChild[n] .. firstChild[n] + childCount[n] − 1, edge labels in label[]. */
    final int[] firstChild, childCount;
    final byte[] label;
    /** Tokens ending at node n: ids tokens[tokStart[n] .. tokStart[n + 1]). */
    final int[] tokStart, tokens;
    final byte[][] bytes;
    final int vocab;
    final int eos;
    final int nodes;
    /**
     * The control token that ends reasoning ({@code </think>}, one token in DeepSeek-V4's vocabulary), or −1: left out
     * of the trie with the other control tokens, offered by the constraint only inside reasoning.
     */
    final int thinkEnd;
    /** The most bytes of any token in the trie. */
    final int longest;

    /**
     * Precomputed shortcuts for free text, the states that would otherwise walk the whole trie: tokens that leave a
     * JSON string body unchanged (complete UTF-8, no quote, backslash or control character) and tokens that leave
     * delimited raw text unchanged (complete UTF-8, no '<'), each with a trie of all the other tokens.
     */
    final long[] stringPure, textPure;
    final TokenTrie stringRest, textRest;

    /** The trie of a tokenizer (built on first use, then cached for the tokenizer's lifetime). */
    public static TokenTrie of(Tokenizer t) {
        synchronized (CACHE) {
            return CACHE.computeIfAbsent(t, TokenTrie::build);
        }
    }

    private static TokenTrie build(Tokenizer t) {
        int vocab = t.vocabSize();
        byte[][] bytes = new byte[vocab][];
        List<Integer> ids = new ArrayList<>(), strRest = new ArrayList<>(), txtRest = new ArrayList<>();
        long[] strPure = new long[(vocab + 63) >> 6], txtPure = new long[strPure.length];
        int thinkEnd = -1;
        for (int i = 0; i < vocab; i++) {
            byte[] b;
            try {
                b = t.tokenBytes(i);
            } catch (IllegalArgumentException e) {
                continue;
            }
            bytes[i] = b;
            if (t.isControl(i) && Arrays.equals(b, States.THINK_END.bytes)) thinkEnd = i;
            if (b.length == 0 || t.isControl(i)) continue;
            ids.add(i);
            boolean utf8 = completeUtf8(b), str = utf8, txt = utf8;
            for (byte x : b) {
                if (x == '"' || x == '\\' || (x >= 0 && x < 0x20)) str = false;
                if (x == '<') txt = false;
            }
            if (str) strPure[i >> 6] |= 1L << i;
            else strRest.add(i);
            if (txt) txtPure[i >> 6] |= 1L << i;
            else txtRest.add(i);
        }
        return new TokenTrie(vocab, t.eosId(), thinkEnd, bytes, ids, strPure,
                new TokenTrie(vocab, t.eosId(), thinkEnd, bytes, strRest, null, null, null, null),
                txtPure, new TokenTrie(vocab, t.eosId(), thinkEnd, bytes, txtRest, null, null, null, null));
    }

    /** Whether b is a whole number of well-formed UTF-8 characters. */
    static boolean completeUtf8(byte[] b) {
        int i = 0;
        while (i < b.length) {
            int c = b[i] & 0xFF, n, lo = 0x80, hi = 0xBF;
            if (c < 0x80) { i++; continue; }
            if (c >= 0xC2 && c <= 0xDF) n = 1;
            else if (c >= 0xE0 && c <= 0xEF) { n = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
            else if (c >= 0xF0 && c <= 0xF4) { n = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
            else return false;
            if (i + n >= b.length) return false;
            for (int j = 1; j <= n; j++) {
                int x = b[i + j] & 0xFF;
                if (j == 1 ? (x < lo || x > hi) : (x < 0x80 || x > 0xBF)) return false;
            }
            i += n + 1;
        }
        return true;
    }

    private TokenTrie(int vocab, int eos, int thinkEnd, byte[][] bytes, List<Integer> ids, long[] stringPure, TokenTrie stringRest,
                      long[] textPure, TokenTrie textRest) {
        this.vocab = vocab;
        this.eos = eos;
        this.thinkEnd = thinkEnd;
        this.bytes = bytes;
        this.stringPure = stringPure;
        this.stringRest = stringRest;
        this.textPure = textPure;
        this.textRest = textRest;
        Integer[] order = ids.toArray(new Integer[0]);
        int most = 0;
        for (int id : order) most = Math.max(most, bytes[id].length);
        this.longest = most;
        Arrays.sort(order, (a, c) -> Arrays.compareUnsigned(bytes[a], bytes[c]));
        // build breadth-first so each node's children are contiguous
        IntList fc = new IntList(), cc = new IntList(), ts = new IntList(), tk = new IntList();
        ByteList lb = new ByteList();
        IntList lo = new IntList(), hi = new IntList(), depth = new IntList();
        fc.add(0); cc.add(0); lb.add((byte) 0); lo.add(0); hi.add(order.length); depth.add(0);
        for (int n = 0; n < lo.size; n++) {
            int a = lo.get(n), b = hi.get(n), d = depth.get(n);
            ts.add(tk.size);
            while (a < b && bytes[order[a]].length == d) tk.add(order[a++]);
            fc.set(n, lo.size);
            int count = 0;
            while (a < b) {
                byte x = bytes[order[a]][d];
                int e = a;
                while (e < b && bytes[order[e]][d] == x) e++;
                lo.add(a); hi.add(e); depth.add(d + 1); fc.add(0); cc.add(0); lb.add(x);
                count++;
                a = e;
            }
            cc.set(n, count);
        }
        ts.add(tk.size);
        nodes = lo.size;
        firstChild = fc.toArray();
        childCount = cc.toArray();
        label = lb.toArray();
        tokStart = ts.toArray();
        tokens = tk.toArray();
    }

    /** {@link #stringPureWithin} by room, built on first use (a race only builds one twice). */
    private volatile long[][] pureWithin;

    /**
     * The {@link #stringPure} tokens of at most room characters (code points): what a string body that may take only
     * so many more characters keeps without a walk over the trie.
     */
    long[] stringPureWithin(int room) {
        if (room >= longest) return stringPure;
        long[][] kept = pureWithin;
        if (kept == null) pureWithin = kept = new long[longest][];
        long[] r = kept[room];
        if (r == null) {
            r = new long[stringPure.length];
            for (int i = 0; i < vocab; i++) {
                if ((stringPure[i >> 6] & 1L << i) == 0) continue;
                int chars = 0;
                for (byte x : bytes[i]) if ((x & 0xC0) != 0x80) chars++;
                if (chars <= room) r[i >> 6] |= 1L << i;
            }
            kept[room] = r;
        }
        return r;
    }

    /** Number of token ids (the tokenizer's vocabulary size). */
    public int vocab() {
        return vocab;
    }

    /** Number of trie nodes (for reports). */
    public int nodes() {
        return nodes;
    }

    private static final class IntList {
        int[] a = new int[1024];
        int size;

        void add(int v) {
            if (size == a.length) a = Arrays.copyOf(a, size * 2);
            a[size++] = v;
        }

        int get(int i) { return a[i]; }
        void set(int i, int v) { a[i] = v; }
        int[] toArray() { return Arrays.copyOf(a, size); }
    }

    private static final class ByteList {
        byte[] a = new byte[1024];
        int size;

        void add(byte v) {
            if (size == a.length) a = Arrays.copyOf(a, size * 2);
            a[size++] = v;
        }

        byte[] toArray() { return Arrays.copyOf(a, size); }
    }
}
