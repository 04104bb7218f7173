package io.ds4j.server.config;

import java.util.List;

/**
 * A server configuration that cannot be used. The message lists every problem found, each naming its key
 * (for example {@code limits.maxActive: must be an integer >= 1, got 0}).
 */
public final class ConfigException extends Exception {
    private final List<String> problems;
    private final boolean fileUnread;

    /** @param problems one line per problem, each starting with the key it is about */
    public ConfigException(List<String> problems) {
        this(problems, false);
    }

    /**
     * @param problems   as {@link #ConfigException(List)}
     * @param fileUnread whether the configuration file could not be read as a JSON object, so that none of its keys
     *                   was checked ({@link #fileUnread()})
     */
    public ConfigException(List<String> problems, boolean fileUnread) {
        super(String.join("; ", problems));
        this.problems = List.copyOf(problems);
        this.fileUnread = fileUnread;
    }

    /** One problem. */
    public ConfigException(String problem) {
        this(List.of(problem));
    }

    /** The problems, one per key. */
    public List<String> problems() {
        return problems;
    }

    /**
     * Whether the configuration file could not be read as a JSON object (a syntax error, bytes that are not UTF-8, a
     * key given twice, an empty file, another JSON value): none of its keys was checked, and what the start checks of
     * the model, draft and backend could be made only of the values the command line gives.
     */
    public boolean fileUnread() {
        return fileUnread;
    }
}
