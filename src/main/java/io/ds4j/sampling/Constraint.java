package io.ds4j.sampling;

/**
 * A per-request restriction of which tokens may come next (constrained decoding). Generation asks for the allowed
 * set before every draw, masks everything else out of the logits, and reports each committed token. Implementations
 * are stateful and belong to one request; not thread-safe.
 */
public interface Constraint {
    /**
     * The tokens allowed next, as a bitset over token ids (bit {@code id & 63} of word {@code id >> 6}); never empty.
     *
     * @param remaining how many tokens may still be generated, this one included (≥ 1); lets the constraint steer
     *                  towards a complete output before the length limit
     * @return a bitset the caller must not modify (it may be cached)
     */
    long[] allowed(int remaining);

    /**
     * How many of tokens[0 .. n) form an allowed continuation from the current state, in order (each checked in the
     * state after the ones before it, without committing anything).
     */
    int acceptablePrefix(int[] tokens, int n, int remaining);

    /**
     * The allowed set in the state after tokens[0 .. n) without committing them (each allowed in turn, as
     * {@link #acceptablePrefix} found): the mask of a verify row whose drafts before it are accepted, computed ahead
     * of the commit. Null where it is not known ahead (the end-of-sequence token among them, or a constraint that
     * does not compute ahead): the caller asks {@link #allowed} once it has committed them.
     * @param remaining as for {@link #allowed}, counted from after the n tokens
     */
    default long[] allowedAfter(int[] tokens, int n, int remaining) {
        return null;
    }

    /**
     * Commits a generated token.
     * @throws IllegalStateException when the token was not allowed
     */
    void advance(int token);

    /** True when the output so far is complete (the end-of-sequence token is allowed). */
    boolean complete();

    /** Words of an {@link #allowed} bitset over token ids [0, vocab). */
    static int words(int vocab) {
        return (vocab + 63) >> 6;
    }

    /** Whether token id is set in an {@link #allowed} bitset. */
    static boolean has(long[] bits, int id) {
        return id >= 0 && (id >> 6) < bits.length && (bits[id >> 6] & (1L << id)) != 0;
    }
}
