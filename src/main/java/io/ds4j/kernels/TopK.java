package io.ds4j.kernels;

/**
 * Deterministic top-k selection (spec 6.6): the k largest values, ties broken towards the lower index, so the
 * result never depends on thread count or chunking. O(n log k) with a bounded heap, no full sort.
 */
public final class TopK {
    private TopK() {}

    /**
     * @param v values, the first n are considered
     * @param k how many to keep (k ≤ n)
     * @return the selected indices in ascending index order
     */
    public static int[] select(float[] v, int n, int k) {
        if (k > n) throw new IllegalArgumentException("k " + k + " > n " + n);
        int[] heap = new int[k]; // min-heap by (value, -index): the root is the weakest kept element
        int size = 0;
        for (int i = 0; i < n; i++) {
            if (size < k) {
                heap[size] = i;
                siftUp(heap, size++, v);
            } else if (better(v, i, heap[0])) {
                heap[0] = i;
                siftDown(heap, 0, size, v);
            }
        }
        java.util.Arrays.sort(heap, 0, size);
        return heap;
    }

    /** True when a ranks above b: larger value, or equal value and lower index. NaN ranks last. */
    private static boolean better(float[] v, int a, int b) {
        float x = v[a], y = v[b];
        if (x != y) {
            if (Float.isNaN(x)) return false;
            if (Float.isNaN(y)) return true;
            return x > y;
        }
        return a < b;
    }

    private static void siftUp(int[] h, int i, float[] v) {
        while (i > 0) {
            int p = (i - 1) >> 1;
            if (better(v, h[p], h[i])) {
                int t = h[p]; h[p] = h[i]; h[i] = t;
                i = p;
            } else break;
        }
    }

    private static void siftDown(int[] h, int i, int n, float[] v) {
        while (true) {
            int l = 2 * i + 1, r = l + 1, w = i;
            if (l < n && better(v, h[w], h[l])) w = l;
            if (r < n && better(v, h[w], h[r])) w = r;
            if (w == i) return;
            int t = h[w]; h[w] = h[i]; h[i] = t;
            i = w;
        }
    }
}
