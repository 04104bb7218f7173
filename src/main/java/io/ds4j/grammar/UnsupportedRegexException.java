package io.ds4j.grammar;

/**
 * A regular expression the constraint engine cannot enforce: a syntax error, a construct outside the supported subset
 * (backreferences, lookaround, anchors inside the pattern, ...), or a pattern too large to compile. The message names
 * the construct and, where there is one, its position.
 */
public final class UnsupportedRegexException extends IllegalArgumentException {
    private final int position;

    /** @param position the 0-based index (in UTF-16 units of the pattern) of the construct, −1 for the whole pattern */
    public UnsupportedRegexException(String message, int position) {
        super(message);
        this.position = position;
    }

    /** The 0-based index of the offending construct in the pattern, or −1 where the pattern as a whole is at fault. */
    public int position() {
        return position;
    }
}
