package io.ds4j.cli;

import org.slf4j.Logger;
import sun.misc.Signal;

import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

/**
 * SIGINT (Ctrl-C) and SIGTERM for {@code serve}: the first one shuts the server down gracefully (the JVM's shutdown
 * hooks, which wait up to {@code server.shutdownGraceSeconds} for running requests), a second one while that runs ends
 * the process at once, as servers such as vLLM do on a second Ctrl-C. The JVM on its own ignores a signal that arrives
 * while its hooks run, so a user who does not want to wait for the grace period had to find the process and kill it.
 * Exit status 128 + the signal's number either way, as the JVM's own handling gives.
 */
final class Signals {
    private Signals() {}

    /**
     * Installs the handlers (where the JVM lets them be installed: not under {@code -Xrs}, which leaves the signals to
     * the process's default).
     * @param log     says what the second signal decided
     * @param onFirst told the first signal's name ({@code SIGTERM}, {@code SIGINT}) before the shutdown begins
     */
    static void install(Logger log, Consumer<String> onFirst) {
        AtomicInteger seen = new AtomicInteger();
        for (String name : new String[]{"INT", "TERM"}) {
            try {
                Signal.handle(new Signal(name), sig -> {
                    int status = 128 + sig.getNumber();
                    if (seen.incrementAndGet() == 1) {
                        onFirst.accept("SIG" + sig.getName());
                        // System.exit waits for the shutdown hooks: never on the thread that takes the next signal
                        Thread.ofPlatform().name("ds4j-exit").start(() -> System.exit(status));
                    } else {
                        log.warn("second SIG{} while shutting down: exiting now, without waiting for running requests "
                                + "(they end without the rest of their answers)", sig.getName());
                        Runtime.getRuntime().halt(status);
                    }
                });
            } catch (IllegalArgumentException e) {
                log.debug("SIG{} left to the JVM: {}", name, e.getMessage());
            }
        }
    }
}
