package io.ds4j.grammar;

/** A schema uses something the constraint engine cannot enforce; names the keyword and where it is. */
public final class UnsupportedSchemaException extends IllegalArgumentException {
    private final String keyword;
    private final String path;
    private final int tool;

    public UnsupportedSchemaException(String keyword, String path, String message) {
        this(keyword, path, message, -1);
    }

    private UnsupportedSchemaException(String keyword, String path, String message, int tool) {
        super(message);
        this.keyword = keyword;
        this.path = path;
        this.tool = tool;
    }

    /** The same problem, found in the parameters of function number {@code tool} of a tool grammar's list. */
    UnsupportedSchemaException inTool(int tool) {
        return new UnsupportedSchemaException(keyword, path, getMessage(), tool);
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
