package io.ds4j.engine;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/**
 * Reuse of prompt prefixes across requests: snapshots of sequence state ({@link StateSnapshot}) taken at block
 * boundaries of prompts, found again by the token ids of a new prompt, so that only the tokens after the longest
 * cached prefix are prefilled. Knows the backend only through {@link Backend#snapshot} and {@link Backend#resume}.
 *
 * <p>Keys: the prompt is cut into blocks of {@code blockTokens} tokens (a multiple of every compression ratio, so a
 * boundary is also a boundary of every compressor window); block i's key is a 64-bit hash of block i−1's key and the
 * token ids of block i (a hash chain), so a key names a whole prefix. A lookup also compares the stored token ids,
 * so a hash collision can never resume the wrong state.
 *
 * <p>Where snapshots are taken while a prompt is prefilled (all block boundaries past the resumed length):
 * <ul>
 *   <li>the last block boundary of the prompt (the next turn of a conversation extends the whole prompt);</li>
 *   <li>every {@code intervalTokens} tokens (a later prompt that diverges inside this one still finds a prefix);</li>
 *   <li>the branch point: the last block this prompt shares with a prompt seen before (a block key seen earlier),
 *       so requests that share a document but differ in the question after it hit from the third one on.</li>
 * </ul>
 *
 * <p>Memory: the bytes of all snapshots (their own rings, plus each shared store once at its largest use) stay within
 * {@code budgetBytes}; the least recently used snapshot is evicted first. Not thread-safe: one engine thread.
 */
public final class PrefixCache implements AutoCloseable {
    /** Block keys remembered for branch points (a bounded LRU set; the key is 8 bytes). */
    private static final int SEEN_CAPACITY = 1 << 18;

    private final Backend backend;
    private final int block;
    private final int interval;
    private final int maxRollback;
    private long budget;
    private final LinkedHashMap<Long, Entry> entries = new LinkedHashMap<>(64, 0.75f, true);
    private final LinkedHashMap<Long, Boolean> seen = new LinkedHashMap<>(1024, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<Long, Boolean> e) {
            return size() > SEEN_CAPACITY;
        }
    };
    private long bytes;
    private long hits, misses, hitTokens, evictions, inserted;

    private record Entry(long key, int[] tokens, StateSnapshot snap) {}

    /**
     * Counters since start and the current size.
     * @param hits          lookups that resumed a snapshot
     * @param misses        lookups that found none
     * @param hitTokens     prompt tokens not prefilled thanks to hits
     * @param snapshots     snapshots held now
     * @param bytes         bytes held now
     * @param budgetBytes   the budget
     * @param evictions     snapshots dropped to stay within the budget
     * @param inserted      snapshots taken
     * @param blockTokens   the block size
     */
    public record Stats(long hits, long misses, long hitTokens, int snapshots, long bytes, long budgetBytes,
                        long evictions, long inserted, int blockTokens) {}

    /**
     * A sequence to prefill a prompt with: resumed from the longest cached prefix, or new.
     * @param seq         the sequence (owned by the caller)
     * @param cachedTokens prompt tokens already in seq (0 on a miss)
     */
    public record Start(Sequence seq, int cachedTokens) {}

    /**
     * @param backend        must support snapshots ({@link Backend#snapshots()})
     * @param blockTokens    block size in tokens; rounded up to a multiple of every compression ratio of the model
     * @param intervalTokens distance between periodic snapshots; rounded up to a multiple of the block (0: none)
     * @param budgetBytes    memory the snapshots may hold
     * @param maxRollback    the rollback window of every sequence this cache snapshots and resumes
     * @throws IllegalArgumentException for a backend without snapshots or a non-positive block
     */
    public PrefixCache(Backend backend, int blockTokens, int intervalTokens, long budgetBytes, int maxRollback) {
        if (!backend.snapshots()) throw new IllegalArgumentException("backend " + backend.name() + " cannot snapshot sequences");
        if (blockTokens < 1) throw new IllegalArgumentException("block must be >= 1 token, got " + blockTokens);
        this.backend = backend;
        this.block = alignedBlock(backend.config(), blockTokens);
        this.interval = intervalTokens <= 0 ? 0 : (intervalTokens + block - 1) / block * block;
        this.budget = Math.max(0, budgetBytes);
        this.maxRollback = maxRollback;
    }

    /** The smallest multiple of every compression ratio of the model that is at least {@code blockTokens}. */
    public static int alignedBlock(io.ds4j.model.ModelConfig c, int blockTokens) {
        long l = 1;
        for (int i = 0; i < c.numLayers; i++)
            if (c.layerTypes[i] != io.ds4j.model.AttentionKind.SLIDING) l = lcm(l, c.ratio(i));
        if (c.layerTypes.length > 0 && Arrays.stream(c.layerTypes).anyMatch(k -> k == io.ds4j.model.AttentionKind.CSA))
            l = lcm(l, c.csaRatio);
        long b = (blockTokens + l - 1) / l * l;
        return (int) Math.min(Integer.MAX_VALUE, b);
    }

    private static long lcm(long a, long b) {
        long x = a, y = b;
        while (y != 0) {
            long t = x % y;
            x = y;
            y = t;
        }
        return a / x * b;
    }

    /** Block size in tokens. */
    public int blockTokens() {
        return block;
    }

    /** Changes the budget, evicting at once when the cache is over the new one. */
    public void budgetBytes(long b) {
        budget = Math.max(0, b);
        evict();
    }

    /**
     * The sequence to prefill {@code prompt} with: a new one resumed from the longest cached prefix that leaves at
     * least one prompt token to prefill (its logits give the first generated token), or a new empty one.
     */
    public Start start(int[] prompt) {
        long[] keys = keys(prompt, (prompt.length - 1) / block);
        for (int i = keys.length; i >= 1; i--) {
            Entry e = entries.get(keys[i - 1]);
            if (e == null || !Arrays.equals(e.tokens, 0, e.tokens.length, prompt, 0, e.tokens.length)) continue;
            Sequence s = backend.resume(e.snap, maxRollback);
            hits++;
            hitTokens += e.tokens.length;
            return new Start(s, e.tokens.length);
        }
        misses++;
        return new Start(backend.newSequence(maxRollback), 0);
    }

    /**
     * Prompt lengths at which the prefill of {@code prompt} should stop and {@link #offer} a snapshot, ascending,
     * all in (from, prompt.length]. Also records the prompt's blocks as seen (for later branch points).
     * @param from tokens already in the sequence (a resumed prefix)
     */
    public int[] snapshotPoints(int[] prompt, int from) {
        int nb = prompt.length / block;
        long[] keys = keys(prompt, nb);
        TreeSet<Integer> pts = new TreeSet<>();
        if (nb > 0) pts.add(nb * block);
        if (interval > 0) for (int p = interval; p <= nb * block; p += interval) pts.add(p);
        int branch = 0;
        for (int i = 0; i < nb; i++) if (seen.containsKey(keys[i])) branch = i + 1; else break;
        if (branch > 0) pts.add(branch * block);
        for (long k : keys) seen.put(k, Boolean.TRUE);
        return pts.stream().filter(p -> p > from).mapToInt(Integer::intValue).toArray();
    }

    /**
     * The prompt length at which a prefill of a prompt of {@code promptLength} tokens always offers a snapshot (its
     * last block boundary, see {@link #snapshotPoints}) that a later {@link #start} of the same prompt resumes (one
     * that leaves at least one prompt token to prefill), or 0 when there is none: a prompt of at most one block, or one
     * that ends on a block boundary (whose last boundary leaves no token to prefill). Requests that send the same
     * prompt at once ({@code n} choices) wait for the first one's prefill to pass this point, then prefill only the
     * tokens after it.
     */
    public int sharedPoint(int promptLength) {
        return promptLength % block == 0 ? 0 : promptLength / block * block;
    }

    /**
     * Takes a snapshot of seq (whose first seq.length() tokens are prompt's) and keeps it under the key of that
     * prefix, unless one is already kept. Evicts least recently used snapshots to stay within the budget (which may
     * evict this one at once when it alone is over the budget). Failures to snapshot (out of memory) are swallowed:
     * the cache is an optimisation, the request goes on.
     * @return whether a snapshot was taken
     */
    public boolean offer(int[] prompt, Sequence seq) {
        int n = seq.length();
        if (n == 0 || n % block != 0 || n > prompt.length) return false;
        long key = keys(prompt, n / block)[n / block - 1];
        Entry old = entries.get(key);
        if (old != null && Arrays.equals(old.tokens, 0, n, prompt, 0, n)) return false;
        StateSnapshot snap;
        try {
            snap = backend.snapshot(seq);
        } catch (RuntimeException e) {
            return false;
        }
        if (old != null) drop(old);
        entries.put(key, new Entry(key, Arrays.copyOf(prompt, n), snap));
        inserted++;
        recount();
        evict();
        return true;
    }

    private void evict() {
        Iterator<Entry> it = entries.values().iterator();
        while (bytes > budget && it.hasNext()) {
            Entry e = it.next();
            it.remove();
            e.snap.close();
            evictions++;
            recount();
        }
    }

    private void drop(Entry e) {
        entries.remove(e.key);
        e.snap.close();
        recount();
    }

    /** Own bytes of every snapshot plus each shared store once, at the largest row count any snapshot uses. */
    private void recount() {
        long b = 0;
        IdentityHashMap<Object, Long> stores = new IdentityHashMap<>();
        for (Entry e : entries.values()) {
            b += e.snap.ownBytes();
            for (StateSnapshot.SharedRows r : e.snap.shared()) stores.merge(r.store(), r.bytes(), Math::max);
        }
        for (long v : stores.values()) b += v;
        bytes = b;
    }

    /** Chain keys of the first nBlocks blocks of tokens. */
    long[] keys(int[] tokens, int nBlocks) {
        long[] k = new long[Math.max(0, nBlocks)];
        long h = 0x9E3779B97F4A7C15L;
        for (int b = 0; b < k.length; b++) {
            for (int i = b * block, e = i + block; i < e; i++) h = mix(h ^ (tokens[i] & 0xFFFFFFFFL) * 0xBF58476D1CE4E5B9L);
            h = mix(h + b);
            k[b] = h;
        }
        return k;
    }

    /** A 64-bit finaliser (multiply-xorshift); spreads every input bit over the output. */
    private static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** Counters and size now. */
    public Stats stats() {
        return new Stats(hits, misses, hitTokens, entries.size(), bytes, budget, evictions, inserted, block);
    }

    /** Lengths of the cached prefixes, most recently used last (tests and diagnostics). */
    public List<Integer> cachedLengths() {
        List<Integer> l = new ArrayList<>();
        for (Entry e : entries.values()) l.add(e.tokens.length);
        return l;
    }

    /** Releases every snapshot. */
    @Override
    public void close() {
        for (Entry e : entries.values()) e.snap.close();
        entries.clear();
        bytes = 0;
    }
}
