package io.ds4j.text.chat;

/**
 * A chat request that cannot be encoded: a bad message field, an unsupported option value. The message starts with
 * the path of the offending field, e.g. {@code messages[2].role: unknown role 'foo'}.
 */
public final class ChatFormatException extends IllegalArgumentException {
    private final String field;

    /**
     * @param field path of the offending field, e.g. {@code messages[2].role}
     * @param problem what is wrong with it
     */
    public ChatFormatException(String field, String problem) {
        super(field + ": " + problem);
        this.field = field;
    }

    /** The path of the offending field, e.g. {@code messages[2].role}. */
    public String field() {
        return field;
    }
}
