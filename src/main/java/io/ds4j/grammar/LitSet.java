package io.ds4j.grammar;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * A fixed set of byte strings as a trie: node 0 is the root; each node knows its children, whether a string ends
 * there (and that string's value) and how many bytes the shortest completion below it needs. When one string is a
 * prefix of another (enum values 1 and 12), a state at the shorter one's end keeps both readings ({@link States.Lit}).
 */
final class LitSet {
    private final int[][] child; // per node, (byte, child) pairs: sets are small, a 256-wide table would waste memory
    private final int[] value;   // value of the string ending at a node, or Integer.MIN_VALUE
    private final int[] rest;    // bytes to the nearest end below a node
    private final int minLen;

    LitSet(List<String> texts) {
        this(texts, range(texts.size()));
    }

    /** @param values one value per text, reported when that text is complete */
    LitSet(List<String> texts, int[] values) {
        List<int[]> kids = new ArrayList<>();
        List<Integer> vals = new ArrayList<>();
        kids.add(new int[0]);
        vals.add(Integer.MIN_VALUE);
        for (int t = 0; t < texts.size(); t++) {
            byte[] b = texts.get(t).getBytes(StandardCharsets.UTF_8);
            int n = 0;
            for (byte x : b) {
                int c = find(kids.get(n), x & 0xFF);
                if (c < 0) {
                    c = kids.size();
                    kids.add(new int[0]);
                    vals.add(Integer.MIN_VALUE);
                    int[] k = kids.get(n);
                    int[] k2 = Arrays.copyOf(k, k.length + 2);
                    k2[k.length] = x & 0xFF;
                    k2[k.length + 1] = c;
                    kids.set(n, k2);
                }
                n = c;
            }
            if (vals.get(n) == Integer.MIN_VALUE) vals.set(n, values[t]);
        }
        child = kids.toArray(new int[0][]);
        value = vals.stream().mapToInt(Integer::intValue).toArray();
        rest = new int[child.length];
        // children always have larger indices than their parent: fill from the end
        for (int n = child.length - 1; n >= 0; n--) {
            int r = value[n] != Integer.MIN_VALUE ? 0 : GState.FAR;
            for (int i = 0; i < child[n].length; i += 2) r = Math.min(r, GState.add(1, rest[child[n][i + 1]]));
            rest[n] = r;
        }
        minLen = rest[0];
    }

    private static int[] range(int n) {
        int[] r = new int[n];
        for (int i = 0; i < n; i++) r[i] = i;
        return r;
    }

    private static int find(int[] k, int b) {
        for (int i = 0; i < k.length; i += 2) if (k[i] == b) return k[i + 1];
        return -1;
    }

    /** The child of node n by byte b, or −1. */
    int step(int n, int b) {
        return find(child[n], b);
    }

    /** Node n's children as (byte, node) pairs; do not modify. */
    int[] children(int n) {
        return child[n];
    }

    boolean terminal(int n) {
        return value[n] != Integer.MIN_VALUE;
    }

    int value(int n) {
        return value[n];
    }

    int rest(int n) {
        return rest[n];
    }

    int minLen() {
        return minLen;
    }
}
