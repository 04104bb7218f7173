package io.ds4j.engine;


/**
 * A draft whose proposal is a series of model steps (a draft model: one catch-up step, then one step per further
 * token), exposed step by step so that {@link DraftBatch} can run the steps of many requests' drafts as batched
 * {@link Backend#step}s of their shared backend. One proposal at a time: {@link #begin}, then {@link #advance} with
 * each step's logits until it returns null, then {@link #proposal}. {@link #propose} does the same alone.
 */
public interface SteppedDraft extends Draft {
    /** The backend the draft's steps run on (drafts sharing one are batched together). */
    Backend backend();

    /**
     * Starts a proposal of q ≥ 1 tokens continuing ctx[0 .. len) (the draft first syncs its state with the
     * committed context).
     * @return the first step's entry (the draft's catch-up on the tokens it has not seen)
     */
    BatchEntry begin(int[] ctx, int len, int q);

    /**
     * Takes the logits of the entry last returned (by {@link #begin} or this method) and chooses the next draft token.
     * @return the next step's entry, or null when the proposal is complete
     */
    BatchEntry advance(float[] logits);

    /** The completed proposal (after {@link #advance} returned null). */
    Proposal proposal();

    /**
     * Drops a started proposal after a failed step; the draft's state is synced again with the committed context at
     * the next {@link #begin} or {@link #committed}.
     */
    void abandon();
}
