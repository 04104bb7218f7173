package io.ds4j.grammar;

/** A schema uses something the constraint engine cannot enforce; names the keyword and where it is. */
public final class UnsupportedSchemaException extends IllegalArgumentException {
    private final String keyword;
    private final String path;

    public UnsupportedSchemaException(String keyword, String path, String message) {
        super(message);
        this.keyword = keyword;
        this.path = path;
    }

    /** The offending keyword ({@code pattern}, {@code oneOf}, ...). */
    public String keyword() {
        return keyword;
    }

    /** JSON pointer of the schema node holding it ({@code ""} for the root). */
    public String path() {
        return path;
    }
}
