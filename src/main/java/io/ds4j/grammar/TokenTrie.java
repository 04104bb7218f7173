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

    /** The trie of a tokenizer (built on first use, then cached for the tokenizer's lifetime). */
    public static TokenTrie of(Tokenizer t) {
        synchronized (CACHE) {
            return CACHE.computeIfAbsent(t, TokenTrie::new);
        }
    }

    private TokenTrie(Tokenizer t) {
        vocab = t.vocabSize();
        eos = t.eosId();
        bytes = new byte[vocab][];
        List<Integer> ids = new ArrayList<>();
        for (int i = 0; i < vocab; i++) {
            byte[] b;
            try {
                b = t.tokenBytes(i);
            } catch (IllegalArgumentException e) {
                continue;
            }
            bytes[i] = b;
            if (b.length > 0 && !t.isAdded(i)) ids.add(i);
        }
        Integer[] order = ids.toArray(new Integer[0]);
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
