package io.ds4j.server;

/**
 * The engine's answer to a submitted request.
 * @param accepted   true when the request is running or queued
 * @param queued     position in the waiting queue (0 = running at once)
 * @param error      why it was refused (null when accepted)
 */
public record Admission(boolean accepted, int queued, ApiException error) {
    static Admission running() {
        return new Admission(true, 0, null);
    }

    static Admission queued(int position) {
        return new Admission(true, position, null);
    }

    static Admission refused(ApiException e) {
        return new Admission(false, 0, e);
    }
}
