package io.ds4j.server;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.json.Json;

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

    /**
     * The usage of a request answered with several choices ({@code n}), from each choice's own: the prompt is one, so
     * its tokens are counted once (with the fewest any choice resumed from the cache: {@code prompt_n} is then the most
     * one choice prefilled); generated, reasoning, draft and prediction counts are summed over the choices, as OpenAI
     * sums completion tokens. Timings are those of the whole answer: {@code queue_ms} and {@code prompt_ms} the longest
     * of a choice, {@code ttft_ms} the earliest first token, {@code predicted_ms} the longest decode, and the rates the
     * summed tokens over those times (the choices decode side by side).
     * @param choices each choice's usage, at least one
     */
    static Usage ofChoices(java.util.List<Usage> choices) {
        Usage first = choices.getFirst();
        int completion = 0, reasoning = 0, cached = first.cachedTokens, afterFirst = 0;
        long offered = 0, accepted = 0, steps = 0, predAccepted = 0, predRejected = 0;
        double queue = 0, ttft = Double.NaN, prefill = 0, decode = 0;
        for (Usage u : choices) {
            completion += u.completionTokens;
            reasoning += u.reasoningTokens;
            cached = Math.min(cached, u.cachedTokens);
            afterFirst += Math.max(0, u.completionTokens - 1);
            offered += u.draftOffered;
            accepted += u.draftAccepted;
            steps += u.verifySteps;
            predAccepted += u.acceptedPredictionTokens;
            predRejected += u.rejectedPredictionTokens;
            queue = Math.max(queue, u.queueMs);
            // a choice without a first token (NaN) does not make the answer's first token unknown
            if (!Double.isNaN(u.ttftMs)) ttft = Double.isNaN(ttft) ? u.ttftMs : Math.min(ttft, u.ttftMs);
            prefill = Math.max(prefill, u.prefillMs);
            decode = Math.max(decode, u.decodeMs);
        }
        double prefillTps = prefill > 0 ? (first.promptTokens - cached) / (prefill / 1e3) : first.prefillTps;
        // as for one request: the tokens after each choice's first, per second of decoding; NaN without any
        double decodeTps = afterFirst == 0 || decode <= 0 ? Double.NaN : afterFirst / (decode / 1e3);
        return new Usage(first.promptTokens, completion, queue, ttft, prefill, prefillTps, decode, decodeTps, offered,
                accepted, steps, cached, reasoning, predAccepted, predRejected);
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
