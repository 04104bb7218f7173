package io.ds4j.engine;

/**
 * The MTP layer's state for one target sequence: its own sliding-window cache (one entry per position t, built from
 * the target's streams at t and token t+1) plus the speculative entries of the current proposal.
 * Owned by one thread at a time, like the target sequence.
 */
public interface MtpState extends AutoCloseable {
    /**
     * Starts a proposal from the committed text. The target holds positions [0, N) and ctx[N] is the pending token
     * (len = N + 1). Speculative entries of the previous proposal are dropped; the entries of every committed
     * position not seen yet are computed from the target's kept streams (at most the last W are needed: the block
     * attends a window of W positions); the entry at N − 1 is the last.
     * @return logits [V] of the token after the pending one (position N + 1)
     * @throws IllegalStateException when len != target length + 1, or the state is closed
     */
    default float[] start(int[] ctx, int len) {
        return head().step(java.util.List.of(MtpHead.Step.start(this, ctx, len)))[0];
    }

    /**
     * Chains one step: the entry after the last one, from the MTP's own output streams and the given token (the
     * previous proposal).
     * @return logits [V] of the token after {@code token}
     * @throws IllegalArgumentException for a token outside [0, V)
     * @throws IllegalStateException before {@link #start}, or when more than the rollback window would be speculative
     */
    default float[] next(int token) {
        return head().step(java.util.List.of(MtpHead.Step.next(this, token)))[0];
    }

    /** The head this state belongs to: {@link #start} and {@link #next} are one-step batches of its {@link MtpHead#step}. */
    MtpHead head();

    /** Drops the state and stops keeping the target's streams. Idempotent. */
    @Override
    void close();
}
