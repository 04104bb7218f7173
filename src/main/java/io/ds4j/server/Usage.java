package io.ds4j.server;

import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * Token counts and timings of one finished request, as sent in the response's {@code usage}.
 *
 * @param promptTokens      prompt tokens
 * @param completionTokens  generated tokens (including the end-of-sequence token when one ended the turn)
 * @param queueMs           from arrival to the first engine step
 * @param ttftMs            from arrival to the first generated token (parsing, tokenising, queueing and prefill)
 * @param prefillMs         from the first engine step to the first generated token
 * @param prefillTps        prompt tokens per second of prefill
 * @param decodeMs          from the first generated token to the last
 * @param decodeTps         tokens per second after the first one; NaN (sent as null) with fewer than two tokens
 * @param draftOffered      draft tokens sent for verification
 * @param draftAccepted     draft tokens accepted
 * @param verifySteps       decode (verify) steps
 * @param cachedTokens      prompt tokens resumed from the prefix cache instead of prefilled
 * @param reasoningTokens   generated tokens of the reasoning (thinking mode; its closing {@code </think>} included)
 * @param acceptedPredictionTokens tokens of the request's {@code prediction} proposed as drafts and accepted by the
 *                          verifier (0 without a prediction)
 * @param rejectedPredictionTokens tokens of the request's {@code prediction} proposed as drafts and not accepted
 *                          (0 without a prediction); accepted + rejected = the prediction's share
 *                          of {@code draftOffered}
 */
public record Usage(int promptTokens, int completionTokens, double queueMs, double ttftMs, double prefillMs,
                    double prefillTps, double decodeMs, double decodeTps, long draftOffered, long draftAccepted,
                    long verifySteps, int cachedTokens, int reasoningTokens, long acceptedPredictionTokens,
                    long rejectedPredictionTokens) {

    /** Usage of a request without a prediction. */
    public Usage(int promptTokens, int completionTokens, double queueMs, double ttftMs, double prefillMs,
                 double prefillTps, double decodeMs, double decodeTps, long draftOffered, long draftAccepted,
                 long verifySteps, int cachedTokens, int reasoningTokens) {
        this(promptTokens, completionTokens, queueMs, ttftMs, prefillMs, prefillTps, decodeMs, decodeTps, draftOffered,
                draftAccepted, verifySteps, cachedTokens, reasoningTokens, 0, 0);
    }

    /** accepted / offered, NaN when nothing was offered. */
    public double acceptanceRate() {
        return draftOffered == 0 ? Double.NaN : (double) draftAccepted / draftOffered;
    }

    /** Tokens committed per verify step on average, NaN without steps. */
    public double committedPerStep() {
        return verifySteps == 0 ? Double.NaN : (double) (draftAccepted + verifySteps) / verifySteps;
    }

    /**
     * The OpenAI usage object (with {@code completion_tokens_details.reasoning_tokens}, and its
     * {@code accepted_prediction_tokens} and {@code rejected_prediction_tokens}, always present as OpenAI sends them) plus a {@code timings} object. Timing names follow llama.cpp's {@code timings}
     * ({@code prompt_n}, {@code prompt_per_second}, {@code predicted_per_second}, {@code draft_n},
     * {@code draft_n_accepted}) so tools that read those keep working.
     */
    public ObjectNode toJson() {
        ObjectNode u = Json.object();
        u.put("prompt_tokens", promptTokens);
        u.put("completion_tokens", completionTokens);
        u.put("total_tokens", promptTokens + completionTokens);
        u.putObject("prompt_tokens_details").put("cached_tokens", cachedTokens);
        u.putObject("completion_tokens_details").put("reasoning_tokens", reasoningTokens)
                .put("accepted_prediction_tokens", acceptedPredictionTokens)
                .put("rejected_prediction_tokens", rejectedPredictionTokens);
        ObjectNode t = u.putObject("timings");
        Json.putNumber(t, "queue_ms", queueMs);
        Json.putNumber(t, "ttft_ms", ttftMs);
        t.put("prompt_n", promptTokens - cachedTokens);
        t.put("cache_n", cachedTokens);
        Json.putNumber(t, "prompt_ms", prefillMs);
        Json.putNumber(t, "prompt_per_second", prefillTps);
        t.put("predicted_n", completionTokens);
        Json.putNumber(t, "predicted_ms", decodeMs);
        Json.putNumber(t, "predicted_per_second", decodeTps);
        t.put("draft_n", draftOffered);
        t.put("draft_n_accepted", draftAccepted);
        Json.putNumber(t, "draft_acceptance_rate", acceptanceRate());
        t.put("verify_steps", verifySteps);
        Json.putNumber(t, "mean_committed_per_step", committedPerStep());
        return u;
    }
}
