package io.ds4j.engine;

/**
 * A draft whose proposal is a series of MTP steps of one {@link MtpState} (a start, then one chained step per further
 * token), exposed step by step so that {@link DraftBatch} can run the steps of many requests' MTP drafts as one
 * {@link MtpHead#step} of their shared head per draft position. One proposal at a time: {@link #begin}, then
 * {@link #advance} with each step's logits until it returns null, then {@link #proposal}. {@link #propose} does the
 * same alone.
 */
public interface SteppedMtpDraft extends Draft {
    /** The MTP head the draft's steps run on (drafts sharing one are batched together). */
    MtpHead head();

    /**
     * Starts a proposal of q ≥ 1 tokens continuing ctx[0 .. len).
     * @return the first step (a start of the draft's MTP state), or null when the draft has nothing to offer (not
     *         attached to a target): {@link #proposal} is then empty
     */
    MtpHead.Step begin(int[] ctx, int len, int q);

    /**
     * Takes the logits of the step last returned (by {@link #begin} or this method) and chooses the next draft token.
     * @return the next (chained) step, or null when the proposal is complete
     */
    MtpHead.Step advance(float[] logits);

    /** The completed proposal (after {@link #begin} or {@link #advance} returned null). */
    Proposal proposal();

    /** Drops a started proposal after a failed step (the next {@link #begin} starts afresh from the committed text). */
    void abandon();
}
