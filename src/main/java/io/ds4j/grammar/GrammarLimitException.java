package io.ds4j.grammar;

/**
 * Enforcing a constrained output would need more parse states live at once than {@link Grammar#MAX_LIVE_STATES}:
 * its schema's alternatives overlap too much at this point of the output. The request's schema is at fault, not the
 * server: the request ends with a client error and nothing else is affected.
 */
public final class GrammarLimitException extends RuntimeException {
    private final int live;

    /** @param live how many states the step would have kept live */
    public GrammarLimitException(int live) {
        super("the output's schema would keep " + live + " parse states live at once here, more than the "
                + Grammar.MAX_LIVE_STATES + " the constraint engine allows (the limit bounds its work per token): its anyOf"
                + " alternatives overlap too much; use fewer of them, or ones that differ early in the output");
        this.live = live;
    }

    /** How many states the step would have kept live. */
    public int live() {
        return live;
    }
}
