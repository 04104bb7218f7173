package io.ds4j.grammar;

/**
 * An immutable position in a byte-level grammar: what has been matched so far and everything that must follow.
 * States are values: equal states (by {@code equals}) accept exactly the same byte continuations, which is what lets
 * {@link TokenConstraint} cache a mask per state.
 */
public interface GState {
    /** Distance reported when no finite continuation reaches acceptance. */
    int FAR = 1 << 29;

    /** The state after byte b (0..255), or null when b cannot come next. */
    GState next(int b);

    /** True when the text matched so far is a complete sentence of the grammar. */
    boolean accepting();

    /** The fewest bytes that lead from here to an accepting state ({@link #FAR} when none do). */
    int dist();

    /** Adds distances without overflowing past {@link #FAR}. */
    static int add(int a, int b) {
        return Math.min(FAR, a + b);
    }
}
