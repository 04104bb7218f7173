package io.ds4j.engine;

/**
 * A backend's multi-token-prediction (MTP) layer, the checkpoint's own cheap draft (spec 2.6): one decoder block that
 * reads the target's final residual streams (before {@code hc_head}) at position t and the embedding of token t+1,
 * and predicts token t+2 through its own {@code hc_head}, its own norm and the shared lm_head. Chained, it feeds its
 * own output streams back in to propose further tokens.
 *
 * <p>Obtained from {@link Backend#mtp()}; the engine and the draft code know this interface only.
 */
public interface MtpHead {
    /**
     * Attaches MTP state to a target sequence. From now on the backend keeps the target's final residual streams of its
     * most recent positions (a ring of W + maxRollback + 2 rows), which {@link MtpState#start} reads. Attach before the
     * target's prefill: the MTP's window then covers the prompt's last W positions, as a full MTP prefill would.
     * @param target a sequence of the backend this head belongs to
     * @param maxRollback the target's rollback window (the MTP's own cache drops up to that many speculative entries)
     * @throws IllegalArgumentException for a sequence of another backend
     */
    MtpState open(Sequence target, int maxRollback);

    /** Short description for logs and bench output ("mtp (1 layer, 4 streams)"). */
    String describe();
}
