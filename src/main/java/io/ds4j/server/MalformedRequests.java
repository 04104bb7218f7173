package io.ds4j.server;

/**
 * The answer to a request whose path's percent-escapes cannot be read, or that Vert.x Web's router refuses with 400
 * before any of our routes runs: a malformed escape ({@code /v1/models/%ZZ}, {@code /health%}), which the router cannot
 * normalise to match it against the routes, escapes that do not decode to UTF-8 or decode to a NUL, which the router
 * passes on (as U+FFFD, or the NUL itself). Without an error handler for 400 the router answers a plain-text "Bad
 * Request" and logs the exception with its whole stack trace at ERROR, for every such request from any anonymous
 * client; both HTTP fronts (a single server and a cluster gateway) answer with this instead. The request's framing is
 * intact in all these cases, so its connection is kept for the next request. (An HTTP/1.1 request without Host, which
 * the router refuses too, never reaches it: {@link RequestFraming#host} refuses its head and closes the connection.)
 */
public final class MalformedRequests {
    private MalformedRequests() {}

    /**
     * The answer to a request the router refused, or that a front refused with {@link #path} (the failure is then that
     * refusal): {@link #answer(String, Throwable)} of its path.
     */
    public static ApiException answer(io.vertx.core.http.HttpServerRequest req, Throwable failure) {
        if (failure instanceof ApiException e) return e;
        return answer(req.path(), failure);
    }

    /**
     * A 400 invalid_request_error naming what is wrong: code {@code invalid_path} and the first bad escape ({@link #path})
     * for a path the router could not decode, else code {@code invalid_request} with the router's reason.
     * @param rawPath the request's path as it arrived (not decoded)
     * @param failure what the router failed with (may be null)
     */
    public static ApiException answer(String rawPath, Throwable failure) {
        ApiException bad = path(rawPath);
        if (bad != null && (failure == null || failure instanceof IllegalArgumentException)) return bad;
        String why = failure != null && failure.getMessage() != null ? failure.getMessage() : "the request cannot be routed";
        return new ApiException(400, "invalid_request_error", "invalid_request", null, "bad request: " + why, null);
    }

    /**
     * The 400 {@code invalid_path} for a path's first bad percent-escape, or null when they are all good: a '%' not
     * followed by two hexadecimal digits, escapes that do not decode to UTF-8 ({@code %C3} alone, {@code %FF}, the
     * surrogate {@code %ED%A0%80}: the router decoded them to U+FFFD, so {@code /v1/models/%C3} was a 404 for a model
     * named '\ufffd'), or an escaped NUL. Both fronts ask it for every request before anything reads the path.
     * @param rawPath the path as it arrived, not decoded (null: none)
     */
    public static ApiException path(String rawPath) {
        if (rawPath == null) return null;
        int end = rawPath.length();
        for (int i = 0; i < rawPath.length(); i++) if (rawPath.charAt(i) == '?' || rawPath.charAt(i) == '#') { end = i; break; }
        // the path's bytes once decoded, each with where its text starts (the target is ASCII: RequestFraming#target)
        byte[] bytes = new byte[end];
        int[] at = new int[end];
        boolean[] escape = new boolean[end];
        int n = 0;
        for (int i = 0; i < end; i++) {
            char c = rawPath.charAt(i);
            at[n] = i;
            if (c == '%' && i + 2 < end && hex(rawPath.charAt(i + 1)) && hex(rawPath.charAt(i + 2))) {
                escape[n] = true;
                bytes[n++] = (byte) Integer.parseInt(rawPath.substring(i + 1, i + 3), 16);
                i += 2;
            } else bytes[n++] = (byte) c;
        }
        for (int i = 0; i < n; ) {
            int b = bytes[i] & 0xFF, need, lo = 0x80, hi = 0xBF;
            if (b == '%' && !escape[i]) return malformed(rawPath, at[i], end);
            // a NUL ends a C string: no name holds one, and the router passed it on into a model's name
            if (b == 0 && escape[i])
                return invalid("the request path's percent-escape '" + rawPath.substring(at[i], at[i] + 3) + "' at character "
                        + (at[i] + 1) + " is a NUL byte, which no path holds");
            if (b < 0x80) { i++; continue; }
            if (b >= 0xC2 && b <= 0xDF) need = 1;
            else if (b >= 0xE0 && b <= 0xEF) { need = 2; if (b == 0xE0) lo = 0xA0; if (b == 0xED) hi = 0x9F; }
            else if (b >= 0xF0 && b <= 0xF4) { need = 3; if (b == 0xF0) lo = 0x90; if (b == 0xF4) hi = 0x8F; }
            else return notUtf8(rawPath, at, i, i);
            for (int j = 1; j <= need; j++) {
                int c = i + j < n ? bytes[i + j] & 0xFF : -1;
                if (c >= (j == 1 ? lo : 0x80) && c <= (j == 1 ? hi : 0xBF)) continue;
                // a '%' that is no escape cutting the sequence short (%C3%, %C3%4, %C3%ZZ) is named as malformed
                if (c == '%' && !escape[i + j]) return malformed(rawPath, at[i + j], end);
                // shown up to the byte that breaks the sequence where that is an escape too, else up to the one before
                return notUtf8(rawPath, at, i, c >= 0 && escape[i + j] ? i + j : i + j - 1);
            }
            i += need + 1;
        }
        return null;
    }

    /** A '%' at p that is not followed by two hexadecimal digits, shown no further than the path's end. */
    private static ApiException malformed(String rawPath, int p, int end) {
        return invalid("the request path has a malformed percent-escape '" + rawPath.substring(p, Math.min(end, p + 3))
                + "' at character " + (p + 1) + ": a '%' must be followed by two hexadecimal digits (a literal '%' is"
                + " written %25)");
    }

    private static ApiException notUtf8(String rawPath, int[] at, int from, int to) {
        int start = at[from], stop = at[to] + 3; // each byte shown is an escape
        return invalid("the request path's percent-escapes '" + rawPath.substring(start, stop) + "' at character "
                + (start + 1) + " are not UTF-8: a character outside ASCII is percent-encoded as its UTF-8 bytes (\u00fc is"
                + " %C3%BC)");
    }

    private static ApiException invalid(String message) {
        return new ApiException(400, "invalid_request_error", "invalid_path", null, message, null);
    }

    private static boolean hex(char c) {
        return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F';
    }
}
