package io.ds4j.engine;

import java.util.List;

/**
 * A backend's multi-token-prediction (MTP) layer, the checkpoint's own cheap draft (spec 2.6): one decoder block that
 * reads the target's final residual streams (before {@code hc_head}) at position t and the embedding of token t+1,
 * and predicts token t+2 through its own {@code hc_head}, its own norm and the shared lm_head. Chained, it feeds its
 * own output streams back in to propose further tokens.
 *
 * <p>Obtained from {@link Backend#mtp()}; the engine and the draft code know this interface only.
 */
public interface MtpHead {
    /**
     * Attaches MTP state to a target sequence. From now on the backend keeps the target's final residual streams of its
     * most recent positions (a ring of W + maxRollback + 2 rows), which {@link MtpState#start} reads. Attach before the
     * target's prefill: the MTP's window then covers the prompt's last W positions, as a full MTP prefill would.
     * @param target a sequence of the backend this head belongs to
     * @param maxRollback the target's rollback window (the MTP's own cache drops up to that many speculative entries)
     * @throws IllegalArgumentException for a sequence of another backend
     */
    MtpState open(Sequence target, int maxRollback);

    /**
     * One state's part of a batched MTP forward ({@link #step}): a proposal's start ({@link MtpState#start} with ctx and
     * len) or a chained step ({@link MtpState#next} with token).
     * @param state the state (of this head)
     * @param ctx   for a start, the committed context (len = target length + 1); null for a chained step
     * @param len   for a start, the context's length; unused for a chained step
     * @param token for a chained step, the previous proposal; unused for a start
     */
    record Step(MtpState state, int[] ctx, int len, int token) {
        public Step {
            if (state == null) throw new IllegalArgumentException("an MTP step needs a state");
        }

        /** The start of a proposal from ctx[0 .. len). */
        public static Step start(MtpState state, int[] ctx, int len) {
            if (ctx == null) throw new IllegalArgumentException("a start needs the context");
            return new Step(state, ctx, len, -1);
        }

        /** A chained step with the given token. */
        public static Step next(MtpState state, int token) {
            return new Step(state, null, 0, token);
        }

        /** True for the start of a proposal. */
        public boolean isStart() {
            return ctx != null;
        }
    }

    /**
     * The context checks of {@link MtpState#start} that do not depend on the backend: the target holds N ≥ 1 positions,
     * len = N + 1 (the pending token), ctx holds len tokens, and the tokens the MTP's window reads (positions
     * max(1, N − window) .. N) lie in [0, vocab).
     * @throws IllegalStateException when the context does not continue the target
     * @throws IllegalArgumentException for a short array or a token outside the vocabulary
     */
    static void checkStartContext(int N, int[] ctx, int len, int window, int vocab) {
        if (len != N + 1)
            throw new IllegalStateException("context of " + len + " tokens does not continue the target's " + N + " positions by one pending token");
        if (N == 0) throw new IllegalStateException("the target holds no positions yet");
        if (ctx.length < len) throw new IllegalArgumentException("context array of " + ctx.length + " tokens is shorter than len " + len);
        for (int p = Math.max(1, N - window); p <= N; p++)
            if (ctx[p] < 0 || ctx[p] >= vocab)
                throw new IllegalArgumentException("token id " + ctx[p] + " at position " + p + " is outside [0, " + vocab + ")");
    }

    /** A backend's check of one step against its state ({@link #checkSteps}); throws what the step would refuse. */
    @FunctionalInterface
    interface StepCheck<S extends MtpState> {
        void check(S state, Step step);
    }

    /**
     * The checks of a batched {@link #step} before any state changes, for the backends' implementations: every state is
     * one of the calling head's ({@code own} gives it typed, or null for another head's), none appears twice, and
     * {@code check} accepts each step. With several steps the error names the step's index.
     * @return the steps' states, typed, in order
     * @throws IllegalArgumentException a state of another head, a repeated state, or what check throws as such
     * @throws IllegalStateException what check throws as such
     */
    static <S extends MtpState> S[] checkSteps(List<Step> steps, java.util.function.Function<MtpState, S> own,
                                               StepCheck<S> check, java.util.function.IntFunction<S[]> array) {
        final int E = steps.size();
        S[] st = array.apply(E);
        java.util.Set<MtpState> seen = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        for (int i = 0; i < E; i++) {
            Step s = steps.get(i);
            try {
                S x = own.apply(s.state());
                if (x == null) throw new IllegalArgumentException("the MTP state belongs to another head");
                if (!seen.add(x)) throw new IllegalArgumentException("its state is already in the batch");
                check.check(x, s);
                st[i] = x;
            } catch (IllegalArgumentException | IllegalStateException e) {
                if (E == 1) throw e;
                throw e instanceof IllegalArgumentException ? new IllegalArgumentException("MTP step " + i + ": " + e.getMessage(), e)
                        : new IllegalStateException("MTP step " + i + ": " + e.getMessage(), e);
            }
        }
        return st;
    }

    /**
     * Runs the steps of many states as one MTP forward: the rows of all of them (a start's catch-up rows, a chained
     * step's one row) go through the input projections, the block and the head together, and the block's attention
     * runs per state. Each step's logits are bit for bit those of {@link MtpState#start} or {@link MtpState#next} run
     * alone (batch invariance); those two are this method with one step.
     * @param steps at most one per state (may mix starts and chained steps)
     * @return per step, in order, the logits [V] of its next token
     * @throws IllegalArgumentException naming the step's index: a state of another head, a repeated state, a token
     *         outside [0, V); no state changes then
     * @throws IllegalStateException naming the step's index for what {@link MtpState#start} or {@link MtpState#next}
     *         refuses (closed state, context not continuing the target, chained step before a start); no state changes
     *         then
     */
    float[][] step(List<Step> steps);

    /** Short description for logs and bench output ("mtp (1 layer, 4 streams)"). */
    String describe();
}
