package io.ds4j.grammar;

/**
 * An EBNF grammar the constraint engine cannot enforce: a syntax error, a rule used but never defined, left recursion,
 * a construct outside the supported notation, or a grammar too large to compile ({@link Grammar#ebnf}). The message
 * names the construct and, where there is one, its line and column.
 */
public final class UnsupportedGrammarException extends IllegalArgumentException {
    private final int line, column;

    /**
     * @param problem what is wrong, without the position
     * @param line    the 1-based line of the construct, 0 for the grammar as a whole
     * @param column  its 1-based column (in characters), 0 for the grammar as a whole
     */
    public UnsupportedGrammarException(String problem, int line, int column) {
        super(line > 0 ? problem + " (at line " + line + ", column " + column + ")" : problem);
        this.line = line;
        this.column = column;
    }

    /** The 1-based line of the offending construct, 0 where the grammar as a whole is at fault. */
    public int line() {
        return line;
    }

    /** The 1-based column of the offending construct, 0 where the grammar as a whole is at fault. */
    public int column() {
        return column;
    }
}
