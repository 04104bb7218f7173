package io.ds4j.speculative;

import io.ds4j.engine.Draft;
import io.ds4j.sampling.Distribution;
import io.ds4j.sampling.SamplingParams;

import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;

/**
 * N-gram prompt lookup (no model): proposes the continuation of the most recent earlier occurrence of the longest
 * suffix of the context (n from {@link #maxN} down to 1). Very effective on retrieval, code editing and repetitive
 * text; costs a few hash lookups per step. Proposals are deterministic (point masses), so sampled requests accept a
 * proposed token with exactly the target's probability of it.
 */
public final class NgramDraft implements Draft {
    /** Longest suffix tried. */
    public static final int MAX_N = 6;
    private final int maxN;
    /** One index per n: hash of the n-gram ending at position p (exclusive end) → the latest such p. */
    private final Map<Long, Integer>[] index;
    private int indexed;

    @SuppressWarnings("unchecked")
    public NgramDraft(int maxN) {
        if (maxN < 1) throw new IllegalArgumentException("n-gram size must be >= 1");
        this.maxN = maxN;
        index = new Map[maxN + 1];
        for (int n = 1; n <= maxN; n++) index[n] = new HashMap<>();
    }

    /** The source for a server or CLI: one fresh index per request. */
    public static DraftSource source() {
        return new DraftSource() {
            @Override
            public String name() {
                return "ngram";
            }

            @Override
            public Draft open(int[] prompt, SamplingParams params, long seed) {
                return new NgramDraft(MAX_N);
            }
        };
    }

    private static long hash(int[] a, int from, int to) {
        long h = 1469598103934665603L;
        for (int i = from; i < to; i++) h = (h ^ a[i]) * 1099511628211L + 0x9E3779B97F4A7C15L;
        return h;
    }

    @Override
    public void committed(int[] ctx, int len) {
        // index n-grams ending at positions <= len-1, so a match always has at least one continuation token
        for (int end = Math.max(indexed, 1); end <= len - 1; end++)
            for (int n = 1; n <= maxN && n <= end; n++) index[n].put(hash(ctx, end - n, end), end);
        indexed = Math.max(indexed, len);
    }

    @Override
    public Proposal propose(int[] ctx, int len, int q) {
        committed(ctx, len);
        for (int n = Math.min(maxN, len - 1); n >= 1; n--) {
            Integer end = index[n].get(hash(ctx, len - n, len));
            if (end == null || end >= len) continue;
            if (!Arrays.equals(ctx, end - n, end, ctx, len - n, len)) continue; // hash collision
            int k = Math.min(q, len - end);
            if (k <= 0) continue;
            return new Proposal(Arrays.copyOfRange(ctx, end, end + k), new Distribution[k]);
        }
        return Proposal.NONE;
    }
}
