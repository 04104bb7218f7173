package io.ds4j.server;

import io.ds4j.text.chat.OutputParser;

import java.util.List;

/** What the engine sends to a request's event-bus address while it runs, in order: deltas, then Done or Failed. */
public sealed interface EngineEvent {
    /**
     * Output decided by one engine step.
     * @param events   reasoning / content / tool-call events (plain completions use content deltas only)
     * @param logprobs one entry per generated token of this step when logprobs were asked for, else empty
     */
    record Delta(List<OutputParser.Event> events, List<TokenLogprob> logprobs) implements EngineEvent {}

    /**
     * The request finished normally.
     * @param finishReason "stop", "length" or "tool_calls"
     * @param stopString   the stop string that ended it, or null
     */
    record Done(String finishReason, String stopString, Usage usage) implements EngineEvent {}

    /**
     * The prompt's scores, sent once prefill is done and before any Delta (completions with echo and logprobs).
     * @param tokens one entry per prompt token; the first has a NaN logprob and no alternatives (nothing precedes it)
     */
    record PromptLogprobs(List<TokenLogprob> tokens) implements EngineEvent {}

    /** The request failed inside the engine; other requests are unaffected. */
    record Failed(int status, String message) implements EngineEvent {}

    /** A generated token's log-probability, with the most likely alternatives. */
    record TokenLogprob(String token, byte[] bytes, float logprob, List<TopLogprob> top) {}

    /** One alternative token. */
    record TopLogprob(String token, byte[] bytes, float logprob) {}
}
