package io.ds4j.server;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.json.Json;

/**
 * A request that the server answers with an OpenAI-style error body:
 * {@code {"error": {"message", "type", "param", "code"}}}. Client mistakes are 4xx and name the offending field
 * in {@code param} (and at the start of the message).
 */
public final class ApiException extends RuntimeException {
    private final int status;
    private final String type;
    private final String param;
    private final String code;
    private final Integer retryAfterSeconds;
    /** The reason the log gives where it is not the message, else null ({@link #loggedAs}). */
    private final String logged;

    public ApiException(int status, String type, String code, String param, String message, Integer retryAfterSeconds) {
        this(status, type, code, param, message, retryAfterSeconds, null);
    }

    private ApiException(int status, String type, String code, String param, String message, Integer retryAfterSeconds,
                         String logged) {
        super(message);
        this.status = status;
        this.type = type;
        this.code = code;
        this.param = param;
        this.retryAfterSeconds = retryAfterSeconds;
        this.logged = logged;
    }

    /**
     * This refusal with another reason for the log than its answer's message: a HEAD is answered with GET's refusal (so
     * that its Content-Length is GET's), but the log tells what was asked.
     */
    public ApiException loggedAs(String reason) {
        return new ApiException(status, type, code, param, getMessage(), retryAfterSeconds, reason);
    }

    /** The reason the log gives: the message, unless {@link #loggedAs} gave another. */
    public String logReason() {
        return logged != null ? logged : getMessage();
    }

    /** 400 invalid_request_error about one field; the message is prefixed with the field's name. */
    public static ApiException badField(String param, String problem) {
        return new ApiException(400, "invalid_request_error", null, param, param + ": " + problem, null);
    }

    /**
     * 400 {@code invalid_json} for a body that is JSON but no object ({@code [1,2]}, {@code null}), naming what it is:
     * the code of every other body that cannot be taken as a request.
     */
    public static ApiException bodyNotAnObject(com.fasterxml.jackson.databind.JsonNode body) {
        String got = body == null || body.isNull() ? "null" : body.isArray() ? "an array" : body.isTextual() ? "a string"
                : body.isNumber() ? "a number" : body.isBoolean() ? "a boolean" : "another JSON value";
        return new ApiException(400, "invalid_request_error", "invalid_json", null, "the request body must be a JSON object, not " + got, null);
    }

    /** 400 invalid_request_error with a code (e.g. context_length_exceeded). */
    public static ApiException bad(String param, String code, String message) {
        return new ApiException(400, "invalid_request_error", code, param, message, null);
    }

    public int status() {
        return status;
    }

    /** The OpenAI error code (e.g. "queue_full"), or null. */
    public String code() {
        return code;
    }

    public Integer retryAfterSeconds() {
        return retryAfterSeconds;
    }

    /** The field the error names, or null. */
    public String param() {
        return param;
    }

    /**
     * The same error about another field name, worded anew: what an API that translates its requests into another's
     * (the Anthropic Messages API over chat) reports, so that the client reads the names it sent.
     */
    public ApiException renamed(String param, String message) {
        return new ApiException(status, type, code, param, message, retryAfterSeconds);
    }

    /**
     * How a front writes an error's body for the path of the request it refuses. Refusals answered before routing (a
     * chunked body past the size limit or malformed, a body that came too slowly) ask it too, so that every error to a
     * path takes the shape that path speaks.
     */
    @FunctionalInterface
    public interface Bodies {
        /** The body of e, refusing a request for path (the path as the router routes it). */
        ObjectNode of(String path, ApiException e);
    }

    /** OpenAI's body on every path: a cluster gateway's own refusals. */
    public static final Bodies OPENAI = (path, e) -> e.body();

    /** The OpenAI error body. */
    public ObjectNode body() {
        return errorBody(getMessage(), type, param, code);
    }

    /** {@code {"error": {"message", "type", "param", "code"}}}. */
    public static ObjectNode errorBody(String message, String type, String param, String code) {
        ObjectNode root = Json.object();
        ObjectNode e = root.putObject("error");
        e.put("message", message);
        e.put("type", type);
        if (param == null) e.putNull("param"); else e.put("param", param);
        if (code == null) e.putNull("code"); else e.put("code", code);
        return root;
    }
}
