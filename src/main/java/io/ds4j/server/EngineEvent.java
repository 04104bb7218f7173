package io.ds4j.server;

import io.ds4j.text.chat.OutputParser;

import java.util.List;

/** What the engine sends to a request's event-bus address while it runs, in order: deltas, then Done or Failed. */
public sealed interface EngineEvent {
    /**
     * Output decided by one engine step.
     * @param events   reasoning / content / tool-call events (plain completions use content deltas only)
     * @param logprobs one entry per generated token of this step when logprobs were asked for, else empty
     * @param flushedNanos {@link System#nanoTime} when the engine sent it (the front measures the delivery from it:
     *                     both run in one JVM)
     * @param completionTokens tokens generated so far, this step's included (also those whose text is still held back:
     *                     an incomplete character, a possible stop string or markup)
     */
    record Delta(List<OutputParser.Event> events, List<TokenLogprob> logprobs, long flushedNanos, int completionTokens)
            implements EngineEvent {}

    /**
     * The request finished normally.
     * @param finishReason "stop", "length" or "tool_calls"
     * @param stopString   the stop string that ended it, or null
     * @param stopToken    the token id of {@code stop_token_ids} that ended it, or null (also when its text completed a
     *                     stop string: that string is then the reason, as in vLLM)
     */
    record Done(String finishReason, String stopString, Integer stopToken, Usage usage) implements EngineEvent {}

    /**
     * The prompt's scores, sent once prefill is done and before any Delta (completions with echo and logprobs).
     * @param tokens one entry per prompt token; the first has a NaN logprob and no alternatives (nothing precedes it)
     */
    record PromptLogprobs(List<TokenLogprob> tokens) implements EngineEvent {}

    /**
     * The request failed inside the engine, or the engine ended it (shutdown); other requests are unaffected.
     * @param status            HTTP status of the error (a stream that already started gets it as an error event)
     * @param code              the error body's code, or null (then the status decides it)
     * @param retryAfterSeconds Retry-After for the client, or null
     */
    record Failed(int status, String message, String code, Integer retryAfterSeconds) implements EngineEvent {
        /** A failure without a code of its own. */
        public Failed(int status, String message) {
            this(status, message, null, null);
        }
    }

    /**
     * A generated token's log-probability, with the most likely alternatives.
     * @param listed whether the token itself (by id) is among {@code top}: its text may differ from its entry there (a
     *               control token left out of the text, a token cut where a stop string matched inside it)
     */
    record TokenLogprob(String token, byte[] bytes, float logprob, List<TopLogprob> top, boolean listed) {}

    /** One alternative token. */
    record TopLogprob(String token, byte[] bytes, float logprob) {}
}
