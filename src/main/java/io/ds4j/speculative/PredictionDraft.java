package io.ds4j.speculative;

import io.ds4j.engine.Draft;
import io.ds4j.sampling.Distribution;
import io.ds4j.sampling.SamplingParams;

import java.util.Arrays;

/**
 * A draft from a client's predicted output (OpenAI's {@code prediction}): the tokenised text the client expects the
 * answer to be, typically a file to be regenerated with small edits. While the generated output follows the
 * prediction, the next q prediction tokens are proposed. When the output leaves it (the target rejected a prediction
 * token, or generated something the prediction does not hold), the draft re-aligns on the longest suffix of the
 * generated output that occurs in the prediction and proposes what follows that occurrence; among equally long
 * matches the first one at or after the point where the alignment was lost wins (edits keep the text's order), else
 * the first one. A match of one token is enough, as for {@link NgramDraft}.
 *
 * <p>It combines with another draft (n-gram lookup or a draft model): the prediction proposes first, and the other
 * draft proposes wherever the prediction has nothing to offer (no match, or the prediction is used up). The other
 * draft is told about every commit either way, so its own state stays in sync. Prediction proposals are deterministic
 * (point masses, null distributions), so the verifier's sampled acceptance keeps the target's distribution.
 *
 * <p>Accounting (see {@link #verified}): <b>accepted</b> = prediction tokens proposed and accepted by the verifier;
 * <b>rejected</b> = prediction tokens proposed for verification and not accepted (a rejection also rejects the rest of
 * its proposal). Tokens of the other draft count in neither; proposed tokens never sent for verification (cut by a
 * constraint) or after an accepted token that ended the generation count in neither. So accepted + rejected = the prediction's share of the draft tokens offered.
 */
public final class PredictionDraft implements Draft {
    /** Longest output suffix compared when re-aligning (longer matches change nothing in practice). */
    static final int MAX_MATCH = 64;

    private final int[] pred;
    private final int promptLen;
    private final Draft other;
    /**
     * Index in the prediction of the token the output is expected to continue with, or -1 when the output is not
     * aligned with the prediction (a re-alignment search is due).
     */
    private int cursor;
    /** Where the alignment was last lost (re-alignment prefers matches from here on). */
    private int lostAt;
    /** Context length up to which committed tokens have been compared with the prediction. */
    private int seen;
    /** The last proposal: how many of its tokens came from the prediction (0 = the other draft's, or none). */
    private int lastFromPrediction;
    private long accepted, rejected;

    /**
     * @param prediction the tokenised prediction (plain text tokens; may be empty: then only the other draft proposes)
     * @param promptLen the request's prompt length: the generated output starts at this context position
     * @param other the request's other draft, or null; owned (closed) by this draft
     */
    public PredictionDraft(int[] prediction, int promptLen, Draft other) {
        if (promptLen < 0) throw new IllegalArgumentException("promptLen must be >= 0");
        this.pred = prediction.clone();
        this.promptLen = promptLen;
        this.other = other;
        this.cursor = 0;
        this.seen = promptLen;
    }

    /**
     * A source that opens a {@link PredictionDraft} of one fixed prediction per request, combined with a draft of
     * other (null for the prediction alone); for benchmarks and tests (a server opens one per request directly).
     */
    public static DraftSource source(int[] prediction, DraftSource other) {
        int[] p = prediction.clone();
        return new DraftSource() {
            @Override
            public String name() {
                return other == null ? "prediction" : "prediction+" + other.name();
            }

            @Override
            public Draft open(int[] prompt, SamplingParams params, long seed) {
                return new PredictionDraft(p, prompt.length, other == null ? null : other.open(prompt, params, seed));
            }
        };
    }

    @Override
    public Proposal propose(int[] ctx, int len, int q) {
        follow(ctx, len);
        lastFromPrediction = 0;
        if (cursor < 0) {
            cursor = realign(ctx, len);
            seen = len;
        }
        if (cursor >= 0 && cursor < pred.length && q > 0) {
            int k = Math.min(q, pred.length - cursor);
            lastFromPrediction = k;
            return new Proposal(Arrays.copyOfRange(pred, cursor, cursor + k), new Distribution[k]);
        }
        if (other == null) return Proposal.NONE;
        // the other draft may hold a shorter context than the prediction's unlimited one
        int oq = (int) Math.min(q, (long) other.maxContext() - len);
        return oq > 0 ? other.propose(ctx, len, oq) : Proposal.NONE;
    }

    /** Advances the alignment over the tokens committed since the last call; loses it at the first mismatch. */
    private void follow(int[] ctx, int len) {
        for (int i = Math.max(seen, promptLen); i < len && cursor >= 0; i++) {
            if (cursor < pred.length && pred[cursor] == ctx[i]) cursor++;
            else {
                lostAt = cursor;
                cursor = -1;
            }
        }
        seen = Math.max(seen, len);
    }

    /**
     * The prediction index after the longest match of a suffix of the generated output ctx[promptLen .. len) that
     * still has a token after it in the prediction; -1 when no token matches.
     */
    private int realign(int[] ctx, int len) {
        int n = len - promptLen;
        if (n <= 0 || pred.length < 2) return -1;
        int best = -1, bestK = 0;
        boolean bestAfter = false;
        // j = prediction index after the match; a proposal needs pred[j], so j <= pred.length - 1
        for (int j = 1; j < pred.length; j++) {
            int k = 0, lim = Math.min(Math.min(n, j), MAX_MATCH);
            while (k < lim && pred[j - 1 - k] == ctx[len - 1 - k]) k++;
            if (k == 0) continue;
            boolean after = j - k >= lostAt;
            if (k > bestK || (k == bestK && after && !bestAfter)) {
                best = j;
                bestK = k;
                bestAfter = after;
            }
        }
        return best;
    }

    @Override
    public void committed(int[] ctx, int len) {
        follow(ctx, len);
        if (other != null) other.committed(ctx, len);
    }

    /**
     * Counts the verifier's judgement of the last proposal when it came from the prediction.
     * @param judged proposal tokens counted as offered (see {@link io.ds4j.engine.Draft#verified})
     * @param acc of those, the accepted ones (a prefix of the judged)
     */
    @Override
    public void verified(int judged, int acc) {
        if (lastFromPrediction > 0) {
            accepted += acc;
            rejected += judged - acc;
        }
        lastFromPrediction = 0;
    }

    /** Prediction tokens the verifier accepted so far. */
    public long acceptedTokens() {
        return accepted;
    }

    /** Prediction tokens offered and not accepted so far. */
    public long rejectedTokens() {
        return rejected;
    }

    /** The prediction's length in tokens. */
    public int length() {
        return pred.length;
    }

    @Override
    public int maxContext() {
        // the prediction needs no positions; the other draft's limit is applied when it proposes
        return Integer.MAX_VALUE;
    }

    @Override
    public void close() {
        if (other != null) other.close();
    }
}
