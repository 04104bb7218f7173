package io.ds4j.server;

import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * A request of another API (the Anthropic Messages API, OpenAI's Responses API) rewritten into the chat request it
 * means: the chat body that {@link Requests#parse} reads and checks as any chat request, how the chat checks' errors
 * name the client's own fields, and how the answer is written in that API's shapes.
 */
interface TranslatedRequest {
    /** The chat body, to give {@link Requests#parse}. */
    ObjectNode chat();

    /**
     * A chat check's error as the client's API states it: its field, and the chat paths in its message, named as the
     * client sent them.
     *
     * @param e an error of the chat parser, the chat template, or the admission of the chat request
     * @return the same error (status, code) about the client's fields
     */
    ApiException renamed(ApiException e);

    /**
     * A note about the chat request ({@link Requests.Gen#notes}: a schema not enforced, ...) as the client's API states
     * it: its chat paths named as the client sent them, as {@link #renamed} names an error's.
     */
    default String renamedNote(String note) {
        return renamed(new ApiException(400, "invalid_request_error", null, null, note, null)).getMessage();
    }

    /**
     * Hints for fields of the client's body that this API does not read, by path pattern, said instead of a "did you
     * mean" ({@link RequestFields#report(com.fasterxml.jackson.databind.JsonNode, java.util.Map)}): chat's names for
     * this API's fields. None by default.
     */
    default java.util.Map<String, String> fieldHints() {
        return java.util.Map.of();
    }

    /**
     * The fields of the client's body accepted without a word though unread ({@link RequestFields#ACCEPTED}, OpenAI's
     * platform fields, by default): an API without some of them has its own, so that they are reported as unknown there.
     */
    default java.util.Set<String> acceptedFields() {
        return RequestFields.ACCEPTED;
    }

    /**
     * The boolean fields named as ignored when true, with why ({@link RequestFields#IGNORED_WHEN_TRUE}, OpenAI's
     * {@code store}, by default): an API without them has none, and they are unknown fields there.
     */
    default java.util.Map<String, String> ignoredWhenTrue() {
        return RequestFields.IGNORED_WHEN_TRUE;
    }

    /** The prefix of the request's id ({@code msg_}, {@code resp_}), followed by a random part. */
    String idPrefix();

    /**
     * The writer of the answer in this API's shapes.
     *
     * @param id           the request's id (the prefix and its random part)
     * @param created      the request's arrival, in seconds since the epoch
     * @param model        the served model's id
     * @param g            the chat request as read (streaming, sampling as applied)
     * @param promptTokens the prompt's tokens
     * @param maxTokens    the most tokens the generation applies: the client's, or the server's default cut to the room
     *                     after the prompt
     */
    AnswerWriter writer(String id, long created, String model, Requests.Gen g, int promptTokens, int maxTokens);
}
