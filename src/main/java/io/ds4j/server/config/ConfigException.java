package io.ds4j.server.config;

import java.util.List;

/**
 * A server configuration that cannot be used. The message lists every problem found, each naming its key
 * (for example {@code limits.maxActive: must be an integer >= 1, got 0}).
 */
public final class ConfigException extends Exception {
    private final List<String> problems;

    /** @param problems one line per problem, each starting with the key it is about */
    public ConfigException(List<String> problems) {
        super(String.join("; ", problems));
        this.problems = List.copyOf(problems);
    }

    /** One problem. */
    public ConfigException(String problem) {
        this(List.of(problem));
    }

    /** The problems, one per key. */
    public List<String> problems() {
        return problems;
    }
}
