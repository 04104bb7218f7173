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
     * The header Anthropic's API and SDKs send the key in, the whole value being the key: a request may carry its key
     * there instead of in Authorization, on every API route, so that those clients need no other setting.
     */
    public static final String X_API_KEY = "x-api-key";

    /**
     * Why a request's keys do not let it in (the message of its 401), or null when they do. Every key the request
     * presents must be one of the keys — each Authorization header's value as a Bearer token, each {@link #X_API_KEY}
     * value (what surrounds it dropped, as for the Bearer token) — and at least one must come: a wrong key beside a
     * valid one is refused, so that no header order or pairing decides who gets in. A blank header presents no key.
     * The message names the header at fault and what to send; it never repeats a value (it may be a real key).
     * @param authorizations the request's Authorization header values, in order
     * @param xApiKeys       its x-api-key header values, in order
     * @param anthropic      whether the route speaks Anthropic's API: a request without a key is told of x-api-key
     *                       first, the header Anthropic's clients send
     */
    public static String refusal(List<String> authorizations, List<String> xApiKeys, List<String> keys, boolean anthropic) {
        int sent = 0;
        String first = null;
        for (int i = 0; i < authorizations.size(); i++) {
            String a = authorizations.get(i);
            if (a.isBlank()) continue;
            sent++;
            String header = label("Authorization", i, authorizations.size()), given = token(a);
            String why = given == null ? "the " + header + " must be 'Bearer <key>' (the word Bearer, a space, then the key);"
                    + " this one has no 'Bearer ' before its value"
                    : given.isEmpty() ? "missing API key after 'Bearer' in the " + header + ": send 'Authorization: Bearer <key>'"
                    : oneOf(given, keys) ? null : "invalid API key in the " + header;
            if (first == null) first = why;
        }
        for (int i = 0; i < xApiKeys.size(); i++) {
            String x = xApiKeys.get(i);
            if (x.isBlank()) continue;
            sent++;
            if (first == null && !oneOf(x.trim(), keys)) first = "invalid API key in the " + label(X_API_KEY, i, xApiKeys.size());
        }
        if (first != null)
            return sent > 1 ? first + "; every key a request sends must be valid: send one key, as 'Authorization: Bearer"
                    + " <key>' or 'x-api-key: <key>'" : first;
        if (sent > 0) return null;
        if (!xApiKeys.isEmpty() && authorizations.stream().allMatch(String::isBlank))
            return "missing API key: the x-api-key header is empty";
        return anthropic ? "missing API key: send 'x-api-key: <key>' (or 'Authorization: Bearer <key>')"
                : "missing API key: send 'Authorization: Bearer <key>'";
    }

    /** A header's name in a refusal: "the x-api-key header", or its place where the request has several. */
    private static String label(String name, int i, int of) {
        return of > 1 ? name + " header " + (i + 1) + " of " + of : name + " header";
    }

    /** Whether a key given is one of the keys (compared in constant time); false for none. */
    private static boolean oneOf(String given, List<String> keys) {
        if (given == null) return false;
        byte[] g = given.getBytes(StandardCharsets.UTF_8);
        for (String k : keys) if (MessageDigest.isEqual(g, k.getBytes(StandardCharsets.UTF_8))) return true;
        return false;
    }

    /**
     * Why no client could ever be let in with a configured key, or null when one can: an empty key, one with what
     * {@link #token} drops at its ends (a request sending it arrives without it), or one with a character past
     * printable ASCII (or a control character inside it).
     */
    public static String unsendable(String key) {
        if (key.isEmpty()) return "is empty; a key needs at least one character";
        if (!key.equals(token("Bearer " + key)))
            return "starts or ends with a space, tab or control character, which no client can send (it is stripped from"
                    + " the Authorization header before the key is compared); remove it from the key";
        // header values reach the server as Latin-1 bytes, and clients send a key's UTF-8 bytes or refuse characters
        // past ASCII, so such a key could never match what a client sends
        for (int i = 0; i < key.length(); i++) {
            char ch = key.charAt(i);
            if (ch > 0x7E || ch < 0x20 && ch != '\t')
                return "holds a character that is not printable ASCII (at position " + (i + 1) + "), which no client can send"
                        + " in a header as it is; use ASCII letters, digits and punctuation";
        }
        return null;
    }
}
