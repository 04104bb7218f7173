package io.ds4j.server;

/** Lets tests of other packages (a cluster gateway's) make {@link SlowClientTest}'s checks of their HTTP front. */
public final class SlowClientTestAccess {
    private SlowClientTestAccess() {}

    /** {@link SlowClientTest#unknownPathsAreAnsweredWithoutWaitingForTheirBodies} against the server on a port. */
    public static void unknownPathsAreAnsweredWithoutWaitingForTheirBodies(int port) throws Exception {
        SlowClientTest.unknownPathsAreAnsweredWithoutWaitingForTheirBodies(port);
    }
}
