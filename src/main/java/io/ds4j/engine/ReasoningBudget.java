package io.ds4j.engine;

import java.util.function.IntFunction;

/**
 * A cap on how many tokens a generation may spend reasoning: while the output is inside its reasoning (thinking mode,
 * before the end-of-reasoning token), each committed token spends one; once the budget is spent the next token is the
 * end-of-reasoning token, whatever the model would choose, so the answer gets the rest of the token limit. The model
 * ending its reasoning by itself ends the budget's work. The end is put at a character boundary: a token that leaves a
 * UTF-8 character unfinished lets the tokens that finish it through first (at most three more), so the reasoning text
 * does not end in a broken character.
 *
 * <p>Stateful, one per generation; {@link Generation} asks {@link #forcing} before choosing each token and reports each
 * committed token to {@link #committed}.
 */
public final class ReasoningBudget {
    private final int endToken;
    private final IntFunction<byte[]> tokenBytes;
    private int left;
    private boolean ended;
    /** Continuation bytes the last committed tokens leave owing to finish a UTF-8 character. */
    private int owed;

    /**
     * @param endToken   the end-of-reasoning token id (V4's {@code </think>} control token)
     * @param tokens     reasoning tokens allowed before the end is forced (0: the first token ends the reasoning)
     * @param tokenBytes the bytes each token id writes (for the character boundary); never null
     * @throws IllegalArgumentException for a negative budget
     */
    public ReasoningBudget(int endToken, int tokens, IntFunction<byte[]> tokenBytes) {
        if (tokens < 0) throw new IllegalArgumentException("reasoning budget must be >= 0, got " + tokens);
        this.endToken = endToken;
        this.left = tokens;
        this.tokenBytes = tokenBytes;
    }

    /** The end-of-reasoning token id. */
    public int endToken() {
        return endToken;
    }

    /**
     * Tokens past the budget that may finish a character: a UTF-8 character has at most three continuation bytes, so a
     * model that keeps opening new characters instead is stopped after these.
     */
    private static final int MAX_FINISHING = 3;

    /** Whether the next token must end the reasoning: the budget is spent, at a character boundary. */
    public boolean forcing() {
        return !ended && left <= 0 && (owed == 0 || left <= -MAX_FINISHING);
    }

    /** Whether the reasoning has ended (the model's own end or a forced one). */
    public boolean ended() {
        return ended;
    }

    /** Reports a committed token: the end-of-reasoning token ends the budget's work; any other one spends one. */
    public void committed(int token) {
        if (ended) return;
        if (token == endToken) {
            ended = true;
            return;
        }
        left--;
        byte[] b = tokenBytes.apply(token);
        if (b == null) return;
        for (byte x : b) {
            int u = x & 0xFF;
            if (u < 0x80) owed = 0;
            else if (u < 0xC0) owed = Math.max(0, owed - 1);
            else owed = u >= 0xF0 ? 3 : u >= 0xE0 ? 2 : 1;
        }
    }
}
