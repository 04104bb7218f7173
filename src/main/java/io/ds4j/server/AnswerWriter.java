package io.ds4j.server;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.json.Json;

import java.util.List;

/**
 * Writes one generation's engine events in its API's wire shapes: the OpenAI chat and completions ones
 * ({@link ResponseBuilder}), the Anthropic Messages ones ({@link AnthropicResponse}) or those of OpenAI's Responses API
 * ({@link ResponsesResponse}). A streamed answer is the concatenation of what {@link #start},
 * each {@link #delta} and {@link #done} return; an answer that is not streamed is {@link #full}, and the other methods
 * return "" while they gather it.
 */
interface AnswerWriter {
    /**
     * What goes out when the request is admitted.
     * @param echo         completions' echoed prompt, or null
     * @param promptTokens completions with echo and logprobs: the echoed prompt's tokens with their scores, or null
     */
    String start(String echo, List<EngineEvent.TokenLogprob> promptTokens);

    /** The frames of one engine step (streaming), or "" after gathering it. */
    String delta(EngineEvent.Delta d);

    /** The closing frames of a stream. */
    String done(EngineEvent.Done d);

    /** The whole answer of a request that is not streamed. */
    ObjectNode full(EngineEvent.Done d);

    /**
     * The frame that ends a stream that started when the request fails (the engine failed, the server shut down):
     * here OpenAI chat's, a {@code data:} frame with the error body; an API with an error event of its own overrides it.
     */
    default String failed(ApiException e) {
        return "data: " + Json.write(e.body()) + "\n\n";
    }
}
