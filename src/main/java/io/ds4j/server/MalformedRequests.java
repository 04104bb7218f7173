package io.ds4j.server;

/**
 * The answer to a request that Vert.x Web's router refuses with 400 before any of our routes runs: a path with a
 * malformed percent-escape ({@code /v1/models/%ZZ}, {@code /health%}), which the router cannot normalise to match it
 * against the routes, or an HTTP/1.1 request without a Host header. Without an error handler for 400 the router answers
 * a plain-text "Bad Request" and logs the exception with its whole stack trace at ERROR, for every such request from
 * any anonymous client; both HTTP fronts (a single server and a cluster gateway) answer with this instead.
 */
public final class MalformedRequests {
    private MalformedRequests() {}

    /**
     * The answer to a request the router refused: {@link #answer(String, Throwable)}, but for an HTTP/1.1 request
     * without Host a 400 {@code invalid_header} saying so, the code of every other header problem (the router's
     * reason came as {@code invalid_request}).
     */
    public static ApiException answer(io.vertx.core.http.HttpServerRequest req, Throwable failure) {
        if (req.version() != io.vertx.core.http.HttpVersion.HTTP_1_0 && req.getHeader(io.vertx.core.http.HttpHeaders.HOST) == null
                && badEscape(req.path() != null ? req.path() : "") < 0)
            return new ApiException(400, "invalid_request_error", "invalid_header", null,
                    "the request has no Host header, which HTTP/1.1 requires", null);
        return answer(req.path(), failure);
    }

    /**
     * A 400 invalid_request_error naming what is wrong: code {@code invalid_path} and the first malformed escape for a
     * path the router could not decode, else code {@code invalid_request} with the router's reason.
     * @param rawPath the request's path as it arrived (not decoded)
     * @param failure what the router failed with (may be null)
     */
    public static ApiException answer(String rawPath, Throwable failure) {
        int at = rawPath != null ? badEscape(rawPath) : -1;
        if (at >= 0 && (failure == null || failure instanceof IllegalArgumentException))
            return new ApiException(400, "invalid_request_error", "invalid_path", null, "the request path has a malformed"
                    + " percent-escape '" + rawPath.substring(at, Math.min(rawPath.length(), at + 3)) + "' at character "
                    + (at + 1) + ": a '%' must be followed by two hexadecimal digits (a literal '%' is written %25)", null);
        String why = failure != null && failure.getMessage() != null ? failure.getMessage() : "the request cannot be routed";
        return new ApiException(400, "invalid_request_error", "invalid_request", null, "bad request: " + why, null);
    }

    /** Where the first '%' of a path that is not followed by two hexadecimal digits is, or -1 when there is none. */
    static int badEscape(String path) {
        for (int i = path.indexOf('%'); i >= 0; i = path.indexOf('%', i + 1))
            if (!(i + 2 < path.length() && hex(path.charAt(i + 1)) && hex(path.charAt(i + 2)))) return i;
        return -1;
    }

    private static boolean hex(char c) {
        return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F';
    }
}
