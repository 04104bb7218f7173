package io.ds4j.server;

/**
 * The engine's answer to a submitted request.
 * @param accepted   true when the request is running or queued
 * @param queued     position in the waiting queue (0 = running at once)
 * @param error      why it was refused (null when accepted)
 * @param cachedTokens a request running at once: its prompt tokens resumed from the prefix cache (the cache was looked
 *                   up as it started); -1 where not known yet (queued: looked up when it starts) or refused
 */
public record Admission(boolean accepted, int queued, ApiException error, int cachedTokens) {
    static Admission running(int cachedTokens) {
        return new Admission(true, 0, null, cachedTokens);
    }

    static Admission queued(int position) {
        return new Admission(true, position, null, -1);
    }

    static Admission refused(ApiException e) {
        return new Admission(false, 0, e, -1);
    }
}
