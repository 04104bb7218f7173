package io.ds4j.engine;

import io.ds4j.sampling.Distribution;

/**
 * A per-request draft: proposes tokens that the target then verifies in one batched step. Implementations keep
 * whatever state they need (a draft model's own cache, an n-gram index) consistent with the committed text.
 */
public interface Draft extends AutoCloseable {
    /**
     * Proposes up to q tokens continuing ctx[0 .. len).
     * @return the proposal; may hold fewer than q tokens (none when the draft has nothing to offer)
     */
    Proposal propose(int[] ctx, int len, int q);

    /** Tells the draft that the committed context is now ctx[0 .. len) (called after every verify step). */
    void committed(int[] ctx, int len);

    /**
     * Tells the draft how the verifier judged its last proposal: called once after every verify step that offered
     * draft tokens, also the step that ends the generation (possibly after {@link #close()}, so it must only count).
     * @param judged proposed tokens counted as offered: the whole proposal the verifier was sent (a constraint may have
     *               cut it), drafts after a rejected one included, but not those after an accepted token that ended
     *               the generation (nothing judged them)
     * @param accepted of those, the ones accepted (a prefix of the judged)
     */
    default void verified(int judged, int accepted) {}

    /**
     * Tells the draft which target sequence it drafts for, before the generation's first step (the prefill). A draft
     * that reads the target's state (the MTP layer) hooks into the sequence here; the default ignores it.
     */
    default void attach(Backend target, Sequence seq) {}

    @Override
    default void close() {}

    /** The longest context (tokens) this draft can hold (a draft model's own context; unbounded for lookup drafts). */
    default int maxContext() {
        return Integer.MAX_VALUE;
    }

    /**
     * Proposed tokens and, for each, the distribution it was drawn from (null entries mean the token was chosen
     * deterministically, i.e. a point mass — n-gram lookup and greedy drafts).
     */
    record Proposal(int[] tokens, Distribution[] dists) {
        public static final Proposal NONE = new Proposal(new int[0], new Distribution[0]);

        public int size() {
            return tokens.length;
        }
    }
}
