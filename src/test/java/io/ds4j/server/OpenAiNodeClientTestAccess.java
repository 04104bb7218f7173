package io.ds4j.server;

/** Lets tests of other packages use {@link OpenAiNodeClientTest}'s check for node. */
public final class OpenAiNodeClientTestAccess {
    private OpenAiNodeClientTestAccess() {}

    /** True when {@code node} is on the PATH. */
    public static boolean nodeAvailable() {
        return OpenAiNodeClientTest.onPath("node");
    }
}
