package io.ds4j.server;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.List;

/**
 * How an API key ({@code server.apiKeys}) is read from a request and which keys can be given at all, decided here for
 * the single server, the cluster gateway and the configuration check alike.
 */
public final class ApiKeys {
    private ApiKeys() {}

    /**
     * The key an Authorization header carries as a Bearer token, or null when it carries none. What surrounds the key
     * (spaces, tabs, control characters) is dropped, as HTTP drops it from a header value's ends.
     */
    public static String token(String authorization) {
        if (authorization == null || !authorization.regionMatches(true, 0, "Bearer", 0, 6)) return null;
        // 'Bearer' alone carries an empty key: 'Bearer ' with none arrives so, HTTP dropping the value's trailing space
        String rest = authorization.substring(6);
        return rest.isEmpty() || rest.charAt(0) == ' ' ? rest.trim() : null;
    }

    /**
     * The message of the 401 for an Authorization header that {@link #accepted} refused: no key at all, a header
     * without the {@code Bearer} scheme (a bare key is the common mistake), or a key that is not one of the keys. The
     * header's value is never repeated (it may be a real key).
     */
    public static String refusal(String authorization) {
        String given = token(authorization);
        if (given != null)
            return given.isEmpty() ? "missing API key after 'Bearer': send 'Authorization: Bearer <key>'" : "invalid API key";
        if (authorization == null || authorization.isBlank()) return "missing API key: send 'Authorization: Bearer <key>'";
        return "the Authorization header must be 'Bearer <key>' (the word Bearer, a space, then the key);"
                + " this one has no 'Bearer ' before its value";
    }

    /** Whether an Authorization header carries one of the keys as a Bearer token (compared in constant time). */
    public static boolean accepted(String authorization, List<String> keys) {
        return oneOf(token(authorization), keys);
    }

    /**
     * The header Anthropic's API and SDKs send the key in, the whole value being the key: a request may carry its key
     * there instead of in Authorization, on every API route, so that those clients need no other setting.
     */
    public static final String X_API_KEY = "x-api-key";

    /**
     * Whether a request carries one of the keys: as a Bearer token in Authorization, or as the value of
     * {@link #X_API_KEY} (what surrounds it dropped, as for the Bearer token).
     */
    public static boolean accepted(String authorization, String xApiKey, List<String> keys) {
        return accepted(authorization, keys) || xApiKey != null && oneOf(xApiKey.trim(), keys);
    }

    /**
     * The message of the 401 for headers {@link #accepted(String, String, List)} refused: as
     * {@link #refusal(String)}, except for a request that sent x-api-key alone, whose key is the one refused.
     */
    public static String refusal(String authorization, String xApiKey) {
        if (xApiKey != null && (authorization == null || authorization.isBlank()))
            return xApiKey.isBlank() ? "missing API key: the x-api-key header is empty" : "invalid API key";
        return refusal(authorization);
    }

    /** Whether a key given is one of the keys (compared in constant time); false for none. */
    private static boolean oneOf(String given, List<String> keys) {
        if (given == null) return false;
        byte[] g = given.getBytes(StandardCharsets.UTF_8);
        for (String k : keys) if (MessageDigest.isEqual(g, k.getBytes(StandardCharsets.UTF_8))) return true;
        return false;
    }

    /**
     * Why no client could ever be let in with a configured key, or null when one can: an empty key, or one with what
     * {@link #token} drops at its ends (a request sending it arrives without it).
     */
    public static String unsendable(String key) {
        if (key.isEmpty()) return "is empty; a key needs at least one character";
        if (!key.equals(token("Bearer " + key)))
            return "starts or ends with a space, tab or control character, which no client can send (it is stripped from"
                    + " the Authorization header before the key is compared); remove it from the key";
        return null;
    }
}
