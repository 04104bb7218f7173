package io.ds4j.json;

import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.core.exc.StreamConstraintsException;

/**
 * What to say of JSON the parser stopped reading at one of its limits (nesting depth, the length of a number, a string
 * or a field name). Such a text is not shown to be malformed, only too large to read, so it is said that way, with the
 * limit, in one wording for every reader (request bodies, files, tool-call arguments).
 */
public final class ReadLimits {
    private ReadLimits() {}

    /**
     * The limit e stopped at, as a predicate of the text read ("holds a string too long to read: more than 20000000
     * characters (the most this server reads)").
     * @param limits the constraints of the reader that stopped
     * @param at     where it stopped, said right after the problem (" at line 1, column 9"), or ""
     */
    public static String problem(StreamConstraintsException e, StreamReadConstraints limits, String at) {
        String m = e.getOriginalMessage() == null ? "" : e.getOriginalMessage().toLowerCase(java.util.Locale.ROOT);
        String most = " (the most this server reads)";
        if (m.contains("nesting"))
            return "is nested too deeply" + at + ": more than " + limits.getMaxNestingDepth() + " levels of objects and arrays" + most;
        if (m.contains("number"))
            return "holds a number too long to read" + at + ": more than " + limits.getMaxNumberLength() + " characters" + most;
        if (m.contains("name"))
            return "holds a field name too long to read" + at + ": more than " + limits.getMaxNameLength() + " characters" + most;
        if (m.contains("string"))
            return "holds a string too long to read" + at + ": more than " + limits.getMaxStringLength() + " characters" + most;
        return "is too large to read" + at + " (past a limit of this server's JSON reader)";
    }
}
