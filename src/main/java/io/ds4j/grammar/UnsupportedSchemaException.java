package io.ds4j.grammar;

/**
 * A schema the constraint engine cannot enforce; names the keyword and where it is. Either the schema uses something
 * outside the supported subset, or it is no valid schema at all ({@link #invalid()}: a keyword's value of the wrong kind,
 * a {@code $ref} that does not resolve, a schema no value satisfies), which a client fixes differently.
 */
public final class UnsupportedSchemaException extends IllegalArgumentException {
    private final String keyword;
    private final String path;
    private final int tool;
    private final boolean invalid;

    /** A schema outside the supported subset. */
    public UnsupportedSchemaException(String keyword, String path, String message) {
        this(keyword, path, message, -1, false);
    }

    private UnsupportedSchemaException(String keyword, String path, String message, int tool, boolean invalid) {
        super(message);
        this.keyword = keyword;
        this.path = path;
        this.tool = tool;
        this.invalid = invalid;
    }

    /** A schema that is wrong as JSON Schema reads it, or that no value satisfies, rather than merely unsupported. */
    public static UnsupportedSchemaException invalid(String keyword, String path, String message) {
        return new UnsupportedSchemaException(keyword, path, message, -1, true);
    }

    /** The same problem, found in the parameters of function number {@code tool} of a tool grammar's list. */
    UnsupportedSchemaException inTool(int tool) {
        return new UnsupportedSchemaException(keyword, path, getMessage(), tool, invalid);
    }

    /** Whether the schema itself is at fault ({@link #invalid}) rather than the subset the engine supports. */
    public boolean invalid() {
        return invalid;
    }

    /** The index of the function whose parameters hold the problem in a tool grammar's list; −1 outside one. */
    public int tool() {
        return tool;
    }

    /** The offending keyword ({@code pattern}, {@code oneOf}, ...). */
    public String keyword() {
        return keyword;
    }

    /** JSON pointer of the schema node holding it ({@code ""} for the root). */
    public String path() {
        return path;
    }

    /**
     * The message without the location it gives in JSON pointer form ({@code at '/properties/x'}), for a caller that
     * names the location itself in its own form, so that the location is said once.
     */
    public String problem() {
        String m = getMessage();
        for (String at : new String[] {" (at '" + path + "/" + keyword + "')", " (at '" + path + "')", " at '" + path + "'"})
            m = m.replace(at, "");
        return m;
    }
}
