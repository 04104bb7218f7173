package io.ds4j.grammar;

/**
 * Enforcing a constrained output would need more parse states live at once than {@link Grammar#MAX_LIVE_STATES}
 * (its schema's alternatives overlap too much at this point of the output), or an EBNF output would nest its rule uses
 * deeper than {@link Ebnf#MAX_NESTING} or step its rules more than {@link Ebnf#MAX_WORK} times for one token's mask.
 * The request's constraint is at fault, not the server: the request ends with a
 * client error and nothing else is affected.
 */
public final class GrammarLimitException extends RuntimeException {
    private final int live;

    /** @param live how many states the step would have kept live */
    public GrammarLimitException(int live) {
        this("the output's constraint would keep " + live + " parse states live at once here, more than the "
                + Grammar.MAX_LIVE_STATES + " the constraint engine allows (the limit bounds its work per token): its schema's"
                + " anyOf alternatives, or its grammar's rules, overlap too much; use fewer of them, or ones that differ early"
                + " in the output", live);
    }

    private GrammarLimitException(String message, int live) {
        super(message);
        this.live = live;
    }

    /** An EBNF output that would open more than {@code limit} rule uses at once (its parse stack's depth). */
    static GrammarLimitException nesting(int limit) {
        return new GrammarLimitException("the output would open more than " + limit + " uses of the grammar's rules at"
                + " once here (nested that deep), the limit that bounds a grammar state's size", 0);
    }

    /** An EBNF output whose next token's mask would step more than {@code limit} frames through rule uses and ends. */
    static GrammarLimitException work(long limit) {
        return new GrammarLimitException("the grammar would step its rules more than " + limit + " times to find the next"
                + " token's choices here, the limit that bounds the constraint's work per token: rules that split the same"
                + " text many ways (item{0,100} with item ::= [a-z]+), many rules that may match nothing in a row, rule uses"
                + " nested deep, or large counted repeats at every level make every character cost that much; write such"
                + " parts so that each text has one way through them", 0);
    }

    /** How many states the step would have kept live (0 where the limit reached is the nesting of rule uses). */
    public int live() {
        return live;
    }
}
