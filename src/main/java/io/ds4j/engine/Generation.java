package io.ds4j.engine;

import io.ds4j.sampling.Constraint;
import io.ds4j.sampling.Distribution;
import io.ds4j.sampling.Sampler;

import java.util.Arrays;

/**
 * One request's generation as a step-wise state machine, so a scheduler can batch many requests into one backend
 * step: {@link #plan} says what the next step runs (a {@link BatchEntry}), {@link #commit} takes its logits
 * and does the rest; {@link #step} does both around a step of this request alone. A step is one prefill chunk, or
 * one decode step, which is always a speculative verify step: the
 * pending token plus q draft tokens go through the target in one batched forward over q+1 rows, the longest
 * acceptable prefix is committed and the rest rolled back. q = 0 (no draft, or a draft with nothing to offer) is plain
 * decoding through the same code.
 *
 * <p>Acceptance (spec: Leviathan et al. 2023 "Fast Inference from Transformers via Speculative Decoding"; Chen et
 * al. 2023): greedy requests accept draft token d_i while it equals the argmax of the target's processed logits at
 * that position; sampled requests accept d_i with probability min(1, p(d_i)/q(d_i)) and on rejection draw from the
 * normalised max(0, p − q). Penalties and biases are applied to every verify row exactly as plain decoding would, so
 * the output distribution is the target's under every sampler setting.
 *
 * <p>Accounting definitions: <b>offered</b> = draft tokens sent for verification (the pending token and the target's
 * own token are not counted, nor drafts after an accepted one that ended the generation, which nothing judged; drafts
 * after a rejected one are offered and not accepted, as vLLM's num_draft_tokens counts them); <b>accepted</b> = offered tokens committed; <b>acceptance rate</b> = accepted / offered;
 * <b>committed per step</b> = (accepted + 1) / verify steps, the +1 being the token each step's last row produces.
 * Lucebox counts the same offered tokens (q − 1 there, because its q includes the seed row).
 *
 * <p>Constrained decoding: with a {@link Constraint}, every draw (the first token, each verify row) is masked by the
 * constraint's state after all tokens committed before it, and a draft is cut at its first token the constraint
 * does not allow before it is verified, so speculative output under a constraint equals plain output under it.
 *
 * <p>A {@link ReasoningBudget} ({@link #limitReasoning}) replaces the draw of the row where the budget runs out by the
 * end-of-reasoning token; as it depends only on the tokens committed before the row, speculative output under a budget
 * equals plain output under it too (a draft token other than the forced one is rejected there).
 */
public final class Generation {
    /** Why generation ended. */
    public enum Finish { STOP, LENGTH, CANCELLED }

    /** Receives generated tokens in order. */
    public interface Listener {
        /**
         * @param logprobs null unless logprobs were requested
         * @return false to stop generating (for example a stop string completed)
         */
        boolean onToken(int token, Sampler.TokenLogprobs logprobs);
    }

    /** Called with the sequence when the prefill reaches one of the lengths given to {@link #snapshotAt}. */
    public interface PrefillPoint {
        void reached(Sequence seq);
    }

    /** Static settings of a generation. */
    /**
     * The token ids that end a generation: the tokenizer's end-of-sequence token and the model config's
     * {@code eos_token_id} (the same id twice counts once). The one place this is decided (server and CLI).
     */
    public static int[] endIds(int tokenizerEos, io.ds4j.model.ModelConfig c) {
        return tokenizerEos == c.eosTokenId ? new int[]{tokenizerEos} : new int[]{tokenizerEos, c.eosTokenId};
    }

    /**
     * The context limit in use (tokens): the configured one capped by the model's max_position_embeddings. The one
     * place this is decided (server and CLI).
     */
    public static int contextLimit(int configured, int modelPositions) {
        return Math.min(configured, modelPositions);
    }

    public record Options(int prefillChunk, int maxContext, int[] eosIds, int maxRollback) {
        public Options {
            if (prefillChunk < 1) throw new IllegalArgumentException("prefill chunk must be >= 1");
        }
    }

    private final Backend target;
    private final Sequence seq;
    private final Sampler sampler;
    private final Draft draft;
    private final VerifyWidth width;
    private final Options opt;
    private final Listener listener;
    private final Constraint constraint;
    private final int promptLen;
    /** prompt followed by generated tokens; ctx[len-1] is the pending token once decoding started. */
    private int[] ctx;
    private int len;
    private int prefilled;
    /** A prefill chunk part-way through its layers ({@link BatchEntry.Layers}): its tokens and the next layer to run. */
    private final ChunkProgress chunk = new ChunkProgress();
    /** Prompt tokens the sequence held when the generation started (a resumed prefix). */
    private final int cached;
    private int[] points = new int[0];
    private int nextPoint;
    private PrefillPoint pointHook;
    private int generated;
    private Finish finish;
    /** The step planned and not yet committed, and its draft tokens (decode steps). */
    private BatchEntry planned;
    private Draft.Proposal plannedProposal;
    private volatile boolean cancelled;

    /** Alternatives listed per scored prompt token; -1 = the prompt is not scored. */
    private int scoreTop = -1;
    /** Scores of prompt tokens 1..n-1 under the model (entry 0 stays null: nothing precedes it). */
    private Sampler.TokenLogprobs[] promptScores;

    // statistics
    private long startNs, prefillEndNs, firstTokenNs, endNs;
    private long offered, accepted, verifySteps;

    /**
     * @param seq a sequence of the target, owned by this generation from now on (closed when it ends): empty, or
     *            holding the state of the prompt's first seq.length() tokens (a resumed prefix; those are not prefilled)
     * @param draft null for plain decoding
     * @param width null for plain decoding
     * @throws IllegalArgumentException for an empty prompt, one that leaves no room in the context (for max_tokens 0,
     *         one longer than the context), or a sequence that already holds the whole prompt
     */
    public Generation(Backend target, Sequence seq, int[] prompt, Sampler sampler, Draft draft, VerifyWidth width,
                      Options opt, Listener listener) {
        this(target, seq, prompt, sampler, draft, width, opt, listener, null);
    }

    /**
     * @param constraint restricts every generated token (null for none); owned by this generation
     * @see #Generation(Backend, Sequence, int[], Sampler, Draft, VerifyWidth, Options, Listener)
     */
    public Generation(Backend target, Sequence seq, int[] prompt, Sampler sampler, Draft draft, VerifyWidth width,
                      Options opt, Listener listener, Constraint constraint) {
        if (prompt.length == 0) throw new IllegalArgumentException("the prompt is empty");
        // a generation of no tokens (max_tokens 0: the prompt's scores alone) needs no room after the prompt
        boolean generates = sampler.params().maxTokens() > 0;
        if (prompt.length > opt.maxContext() || generates && prompt.length == opt.maxContext())
            throw new IllegalArgumentException("prompt of " + prompt.length + " tokens leaves no room in the context of "
                    + opt.maxContext() + " tokens");
        if (seq.length() >= prompt.length)
            throw new IllegalArgumentException("the sequence already holds " + seq.length() + " tokens of a " + prompt.length
                    + "-token prompt; at least one prompt token must be prefilled");
        this.target = target;
        this.seq = seq;
        this.cached = seq.length();
        this.prefilled = cached;
        this.sampler = sampler;
        this.draft = draft;
        this.width = width;
        this.opt = opt;
        this.listener = listener;
        this.constraint = constraint;
        this.promptLen = prompt.length;
        this.ctx = Arrays.copyOf(prompt, prompt.length + 64);
        this.len = prompt.length;
        if (draft != null) draft.attach(target, seq);
    }

    /**
     * Makes the prefill stop at each of the given prompt lengths (ascending, past the cached prefix) and call hook
     * there, before the next chunk. Chunks end at those lengths, at multiples of the chunk size and at the prompt's
     * end: the same cuts whether the prefill starts at 0 or at a resumed block boundary, which matters on a backend
     * whose rounding depends on the step's size (the GPU's tensor-core prefill path).
     */
    public void snapshotAt(int[] lengths, PrefillPoint hook) {
        this.points = lengths.clone();
        this.nextPoint = 0;
        this.pointHook = hook;
        while (nextPoint < points.length && points[nextPoint] <= prefilled) nextPoint++;
    }

    /** Prefill rows per step while scoring the prompt: each row's logits are a vocabulary-sized float array. */
    static final int SCORE_CHUNK = 64;

    /**
     * Caps the output's reasoning ({@link ReasoningBudget}): the output starts inside it, and once the budget is spent
     * the next token is the end-of-reasoning token (where a constraint allows it there). Call before the first step.
     * @throws IllegalStateException after the first step
     */
    public void limitReasoning(ReasoningBudget budget) {
        if (startNs != 0) throw new IllegalStateException("limitReasoning after the first step");
        this.budget = budget;
    }

    /** The output's reasoning cap, or null. */
    private ReasoningBudget budget;

    /**
     * The end-of-reasoning token when the reasoning budget is spent and the next token must end it, else -1. Under a
     * constraint the token goes in only where the constraint allows it (outside a tool-call block the reasoning
     * opened), so the end waits for such a place rather than breaking the constraint.
     */
    private int forcedToken() {
        if (budget == null || !budget.forcing()) return -1;
        int end = budget.endToken();
        return constraint == null || Constraint.has(mask(), end) ? end : -1;
    }

    /**
     * Scores the prompt during prefill: for each prompt token after the first, its log-probability under the model's
     * raw logits given the tokens before it (a log-softmax over the vocabulary, no sampler settings applied), and the
     * topN most likely alternatives. Prefill then asks for every row's logits, in chunks of at most
     * {@value #SCORE_CHUNK} rows (results do not depend on the chunking). Call before the first step.
     * @throws IllegalStateException after the first step
     */
    public void scorePrompt(int topN) {
        if (startNs != 0) throw new IllegalStateException("scorePrompt after the first step");
        if (topN < 0) throw new IllegalArgumentException("topN must be >= 0, got " + topN);
        scoreTop = topN;
        promptScores = new Sampler.TokenLogprobs[promptLen];
    }

    /**
     * vLLM's {@code min_tokens}: until n tokens are generated, the end-of-sequence ids and the given ids (the request's
     * stop token ids) may not be generated: they leave every row's allowed set, as a constraint's mask would (in
     * sampling, greedy choice and speculative acceptance alike). Where a constraint allows nothing else (its output is
     * complete), the constraint's set stands. Call before the first step.
     * @param n       tokens to generate before the output may end (0: none)
     * @param stopIds further ids held back until then (null for none)
     * @throws IllegalStateException after the first step
     */
    public void minTokens(int n, int[] stopIds) {
        if (startNs != 0) throw new IllegalStateException("minTokens after the first step");
        if (n <= 0) return;
        int V = target.config().vocabSize;
        long[] m = new long[Constraint.words(V)];
        java.util.Arrays.fill(m, -1L);
        for (int id : opt.eosIds()) if (id >= 0 && id < V) m[id >> 6] &= ~(1L << id);
        if (stopIds != null) for (int id : stopIds) if (id >= 0 && id < V) m[id >> 6] &= ~(1L << id);
        minTokens = n;
        endBanned = m;
    }

    /** vLLM's min_tokens ({@link #minTokens}); 0: none. */
    private int minTokens;
    /** Every id but those min_tokens holds back, or null. */
    private long[] endBanned;

    /**
     * The allowed set of the row committed after {@code ahead} more tokens: the constraint's (null: none) with the ids
     * min_tokens holds back removed while fewer than min_tokens tokens are generated.
     */
    private long[] rowMask(long[] constrained, int ahead) {
        if (endBanned == null || generated + ahead >= minTokens) return constrained;
        if (constrained == null) return endBanned;
        long[] m = new long[constrained.length];
        boolean any = false;
        for (int w = 0; w < m.length; w++) any |= (m[w] = constrained[w] & (w < endBanned.length ? endBanned[w] : 0)) != 0;
        // the constraint allows only the end (its output is complete): it stands
        return any ? m : constrained;
    }

    /**
     * The prompt's scores once prefill is done (see {@link #scorePrompt}): entry i scores prompt token i; entry 0 is
     * null. Null when the prompt is not scored or prefill has not finished.
     */
    public Sampler.TokenLogprobs[] promptScores() {
        return promptScores != null && prefilled == promptLen ? promptScores.clone() : null;
    }

    /** Asks the generation to stop at the next step boundary (thread-safe). */
    public void cancel() {
        cancelled = true;
    }

    public boolean done() {
        return finish != null;
    }

    public Finish finish() {
        return finish;
    }

    /** True while the prompt is still being prefilled. */
    public boolean prefilling() {
        return finish == null && prefilled < promptLen;
    }

    /**
     * Runs one step on its own: {@link #plan()}, the target's {@link Backend#stepArgmax} over this one entry, then
     * {@link #commit}. For callers that step a single request (the CLI, tests); a scheduler batches many requests'
     * plans into one backend step instead.
     * @return true while more steps remain
     * @throws RuntimeException the backend's error when the step fails (the plan stays outstanding; {@link #cancel}
     *         and another call release the state)
     */
    public boolean step() {
        BatchEntry e = plan();
        if (e == null) return false;
        e = maskedArgmax();
        StepOutput o = target.stepArgmax(java.util.List.of(e));
        return commit(o.logits()[0], o.argmax()[0]);
    }

    /** The draft proposal a decode step asks for: up to q tokens continuing ctx[0 .. len). */
    public record DraftCall(Draft draft, int[] ctx, int len, int q) {}

    /**
     * The draft tokens the next decode step would ask for, without asking for them (no state changes): null while
     * prefilling, when done, without a draft, or when no draft token fits (q = 0). A scheduler that batches draft
     * model steps over many requests obtains the proposals itself and passes them to {@link #plan(Draft.Proposal)}.
     */
    public DraftCall draftCall() {
        if (finish != null || cancelled || prefilled < promptLen || planned != null || draft == null || width == null) return null;
        int budget = sampler.params().maxTokens() - generated;
        int room = opt.maxContext() - len;
        int q = Math.min(width.next(), Math.min(budget - 1, Math.min(room - 1, opt.maxRollback())));
        // a draft model holds at most its own context: past it, decode without drafts
        q = Math.min(q, draft.maxContext() - len);
        return q > 0 ? new DraftCall(draft, ctx, len, q) : null;
    }

    /**
     * Token rows the next step will have, or 0 when there is none (done, cancelled, or a step already planned): the
     * prefill chunk's size while prefilling, else 1 + the largest number of draft tokens ({@link #draftCall}).
     */
    public int nextRows() {
        if (finish != null || cancelled || planned != null) return 0;
        if (chunk.layers() > 0) return chunk.rows();
        if (prefilled < promptLen) return nextChunk();
        DraftCall c = draftCall();
        return 1 + (c == null ? 0 : c.q());
    }

    /** The next prefill chunk's size: chunk multiples from the prompt's start, snapshot points and the prompt's end. */
    private int nextChunk() {
        // chunks end at multiples of the chunk size counted from the prompt's start (a resumed prefill is cut where
        // a cold one is), and at the given points; a scored prompt takes at most SCORE_CHUNK rows a step
        int chunk = scoreTop >= 0 ? Math.min(opt.prefillChunk(), SCORE_CHUNK) : opt.prefillChunk();
        int n = Math.min(chunk - prefilled % chunk, promptLen - prefilled);
        if (nextPoint < points.length) n = Math.min(n, points[nextPoint] - prefilled);
        return n;
    }

    /**
     * Plans the next step, asking the draft for its proposal itself (see {@link #plan(Draft.Proposal)}).
     * @return the step's batch entry, or null when the generation has ended (a cancelled one ends here and releases
     *         its state)
     */
    public BatchEntry plan() {
        DraftCall c = draftCall();
        return plan(c == null ? Draft.Proposal.NONE : c.draft().propose(c.ctx(), c.len(), c.q()));
    }

    /**
     * Plans the next step: a prefill chunk, or the pending token plus the given draft tokens (the proposal for
     * {@link #draftCall()}, cut at the first token a constraint does not allow; ignored while prefilling). The
     * entry's logits go to {@link #commit}. Planning twice without a commit returns the same entry.
     * @param proposal draft tokens for this step ({@link Draft.Proposal#NONE} for plain decoding)
     * @return the step's batch entry, or null when the generation has ended (a cancelled one ends here and releases
     *         its state)
     */
    public BatchEntry plan(Draft.Proposal proposal) {
        if (finish != null) return null;
        if (startNs == 0) startNs = System.nanoTime();
        if (cancelled) {
            end(Finish.CANCELLED);
            return null;
        }
        if (planned != null) return planned;
        if (chunk.layers() > 0) return planChunk(chunk.rows(), new BatchEntry.Layers(chunk.layers(), target.config().numLayers));
        if (prefilled < promptLen) return planChunk(nextChunk(), null);
        Draft.Proposal prop = proposal == null ? Draft.Proposal.NONE : proposal;
        if (constraint != null && prop.size() > 0) {
            // drafts the constraint rejects would be rejected by verification anyway: do not spend rows on them
            int ok = constraint.acceptablePrefix(prop.tokens(), prop.size(), remaining());
            if (ok < prop.size())
                prop = new Draft.Proposal(Arrays.copyOf(prop.tokens(), ok), Arrays.copyOf(prop.dists(), ok));
        }
        int q = prop.size();
        int[] rows = new int[q + 1];
        rows[0] = ctx[len - 1];
        System.arraycopy(prop.tokens(), 0, rows, 1, q);
        int[] want = new int[q + 1];
        for (int i = 0; i <= q; i++) want[i] = i;
        plannedProposal = prop;
        planned = new BatchEntry(seq, rows, want, q > 0 ? StepKind.VERIFY : StepKind.DECODE, argmaxBelow());
        return planned;
    }

    /**
     * Plans the next prefill step cut to its first {@code maxRows} tokens (the rest of the chunk comes next), for a
     * scheduler that limits a tick's prefill; {@link #plan()} otherwise. The caller chooses cuts that do not change
     * the numbers ({@link Backend#prefillSplitExact}).
     * @param maxRows at least 1
     * @return the step's batch entry, or null when the generation has ended (a cancelled one ends here and releases
     *         its state)
     * @throws IllegalArgumentException when maxRows is below 1
     */
    public BatchEntry planPrefill(int maxRows) {
        return planPrefill(maxRows, Integer.MAX_VALUE);
    }

    /**
     * {@link #planPrefill(int)} where the step runs at most {@code layers} layers of the chunk ({@link BatchEntry.Layers},
     * for a backend that says {@link Backend#layerSlices}): a chunk part-way through its layers ({@link #slicing})
     * continues with its next layers (maxRows does not cut it); a new chunk starts at layer 0. The chunk's tokens count
     * as prefilled once its last layer has run.
     * @param layers at least 1; the model's layer count or more runs the chunk whole
     * @throws IllegalArgumentException when maxRows or layers is below 1
     */
    public BatchEntry planPrefill(int maxRows, int layers) {
        if (maxRows < 1) throw new IllegalArgumentException("maxRows must be >= 1, got " + maxRows);
        if (layers < 1) throw new IllegalArgumentException("layers must be >= 1, got " + layers);
        if (finish != null || planned != null || cancelled || prefilled >= promptLen) return plan();
        if (startNs == 0) startNs = System.nanoTime();
        int L = target.config().numLayers;
        if (chunk.layers() > 0)
            return planChunk(chunk.rows(), new BatchEntry.Layers(chunk.layers(), (int) Math.min(L, (long) chunk.layers() + layers)));
        return planChunk(Math.min(nextChunk(), maxRows), layers < L ? new BatchEntry.Layers(0, layers) : null);
    }

    /** True while a prefill chunk is part-way through its layers (its next slice comes next). */
    public boolean slicing() {
        return chunk.layers() > 0;
    }

    /** Plans a prefill step of the next n prompt tokens, through every layer (slice null) or the slice's. */
    private BatchEntry planChunk(int n, BatchEntry.Layers slice) {
        boolean last = prefilled + n == promptLen;
        int[] rows = last ? new int[]{n - 1} : new int[0];
        if (slice != null && !slice.last(target.config().numLayers)) rows = new int[0];
        else if (scoreTop >= 0) {
            rows = new int[n];
            for (int r = 0; r < n; r++) rows[r] = r;
        }
        planned = new BatchEntry(seq, Arrays.copyOfRange(ctx, prefilled, prefilled + n), rows, StepKind.PREFILL,
                argmaxBelow(), slice);
        return planned;
    }

    /**
     * The {@link BatchEntry#argmaxBelow} of this generation's steps: the sampler's token limit when every row's token
     * is its argmax and nothing else of the logits is used (greedy without bias, penalties or logprobs, no
     * constraint's mask, the prompt not scored; speculative acceptance under greedy compares a draft token with that
     * argmax only), else 0 (the full logits).
     */
    private int argmaxBelow() {
        return constraint == null && !endsHeldBack() && scoreTop < 0 && sampler.argmaxSuffices() ? sampler.tokenLimit() : 0;
    }

    /** Whether min_tokens still holds the end back for some row of the next step (all rows from generated on). */
    private boolean endsHeldBack() {
        return endBanned != null && generated < minTokens;
    }

    /**
     * Whether {@link #maskedArgmax} would re-plan the planned step: its rows' full logits are wanted only for their
     * masks (a constraint's, or the end held back by {@link #minTokens}; greedy without bias, penalties or logprobs, the
     * prompt not scored), some row's logits are wanted, and the backend chooses argmax rows among masks
     * ({@link Backend#argmaxMasks}).
     */
    public boolean maskable() {
        BatchEntry e = planned;
        return e != null && !e.argmaxOnly() && e.logitRows().length > 0 && (constraint != null || endsHeldBack())
                && scoreTop < 0 && sampler.argmaxSuffices() && target.argmaxMasks();
    }

    /**
     * Lets the backend choose the planned step's constrained greedy tokens: when {@link #maskable}, computes each logit
     * row's mask now, the one its commit would apply (a verify row's as {@link #prepare} does, after the drafts before
     * it), and re-plans the step as argmax-only among those masks ({@link BatchEntry#argmaxMasks}), so that a backend
     * on a device copies back a token id per row instead of V logits; the commit then gives the same tokens as from
     * the logits. Touches only this generation's planned step and constraint (whose masks are the costly part): a
     * scheduler may call it for different generations on different threads before the step. Where a row's mask is not
     * known ahead ({@link Constraint#allowedAfter} null), the step stays as planned.
     * @return the entry to run: {@link #planned()} after the call
     * @throws RuntimeException as the constraint's mask computation (a grammar's work limit); the step stays as planned
     */
    public BatchEntry maskedArgmax() {
        if (!maskable()) return planned;
        BatchEntry e = planned;
        int rows = e.logitRows().length;
        long[][] masks = new long[rows][];
        // a prefill chunk's one row is its last: the first generated token's, row 0 as a decode step's
        for (int i = 0; i < rows; i++) {
            masks[i] = rowMaskAhead(i);
            if (masks[i] == UNKNOWN) return planned;
        }
        planned = new BatchEntry(e.seq(), e.tokens(), e.logitRows(), e.kind(), sampler.tokenLimit(), e.layers(), masks);
        return planned;
    }

    /** The planned entry awaiting {@link #commit}, or null. */
    public BatchEntry planned() {
        return planned;
    }

    /**
     * Commits the planned step given its logits (as {@link Backend#step} returned them for the entry): prompt scores
     * and the first sampled token after the last prefill chunk; speculative acceptance, emitted tokens and the
     * rollback of rejected rows after a decode/verify step.
     * @param lg the entry's logits [logitRows.length, V]
     * @return true while more steps remain
     * @throws IllegalStateException when no step is planned
     */
    public boolean commit(float[] lg) {
        return commit(lg, null);
    }

    /**
     * {@link #commit(float[])} given the entry's logits, or, for an entry planned as argmax-only
     * ({@link BatchEntry#argmaxOnly()}), its rows' greedy tokens instead ({@link Backend#stepArgmax}). Both give the
     * same result for such an entry.
     * @param lg  the entry's logits [logitRows.length, V], or null when ids are given
     * @param ids the entry's greedy token per logit row, or null when logits are given
     * @throws IllegalStateException when no step is planned
     * @throws IllegalArgumentException when neither is given, or ids for an entry that needs logits
     */
    public boolean commit(float[] lg, int[] ids) {
        BatchEntry e = planned;
        if (e == null) throw new IllegalStateException("commit without a planned step");
        if (lg == null && ids == null) throw new IllegalArgumentException("commit needs the entry's logits or its token ids");
        if (lg == null && !e.argmaxOnly()) throw new IllegalArgumentException("the planned step needs its logits, got token ids");
        if (lg != null) ids = null;
        planned = null;
        try {
            return commitPlanned(e, lg, ids);
        } finally {
            prepared = null;
        }
    }

    private boolean commitPlanned(BatchEntry e, float[] lg, int[] ids) {
        if (finish != null) return false;
        if (e.kind() == StepKind.PREFILL) return commitPrefill(e, lg, ids);
        Draft.Proposal prop = plannedProposal;
        plannedProposal = null;
        return commitDecode(prop, lg, ids);
    }

    /** The distribution of logit row i: the certain token ids[i] when ids are given (argmax-only), else the sampler's. */
    private Distribution rowDistribution(float[] lg, int[] ids, int i) {
        int forced = forcedToken();
        if (forced >= 0) return Distribution.certain(forced);
        if (ids != null) return Distribution.certain(ids[i]);
        if (prepared != null && prepared.logits == lg && prepared.dists[i] != null) return prepared.dists[i];
        return sampler.distribution(lg, i * target.config().vocabSize, mask());
    }

    /** Distributions of a planned decode/verify step's rows computed ahead of its commit ({@link #prepare}). */
    private record Prepared(float[] logits, Distribution[] dists) {}

    private Prepared prepared;

    /**
     * Whether {@link #prepare} would do anything for the planned step: a decode/verify step whose rows' distributions
     * depend on the logits and the planned drafts alone (no penalties or bias, which follow the tokens committed
     * before each row; not greedy-only, whose entries come back as token ids). A constraint's masks qualify: a row is
     * committed only after the drafts before it were accepted, so its mask is the constraint's state after those
     * drafts ({@link Constraint#allowedAfter}).
     */
    public boolean preparable() {
        BatchEntry e = planned;
        return e != null && e.kind() != StepKind.PREFILL && !e.argmaxOnly()
                && !sampler.params().hasPenalties() && (sampler.params().logitBias() == null || sampler.params().logitBias().isEmpty());
    }

    /**
     * Computes the planned step's row distributions from its logits ahead of {@link #commit}, which then uses them:
     * the same distributions commit would compute (they depend on the logits and the planned drafts alone, see
     * {@link #preparable}), so the output is unchanged. Touches only this generation's sampler and constraint (whose
     * masks it computes, the costly part of a constrained row): a scheduler may prepare different generations on
     * different threads before it commits them on its own. Does nothing when not {@link #preparable}.
     * @param lg the planned entry's logits [logitRows.length, V]
     */
    public void prepare(float[] lg) {
        if (!preparable() || lg == null) return;
        int rows = planned.logitRows().length, V = target.config().vocabSize;
        Distribution[] d = new Distribution[rows];
        for (int i = 0; i < rows; i++) {
            long[] mask = rowMaskAhead(i);
            if (mask == UNKNOWN) break; // the rest at the commit, if it gets there
            d[i] = sampler.distribution(lg, i * V, mask);
        }
        prepared = new Prepared(lg, d);
    }

    private boolean commitPrefill(BatchEntry e, float[] lg, int[] ids) {
        int n = e.count();
        if (e.layers() != null && !e.layers().last(target.config().numLayers)) {
            // the chunk's streams wait in the sequence for its next layers
            chunk.ranTo(n, e.layers().to());
            return true;
        }
        chunk.clear();
        boolean scoring = scoreTop >= 0;
        boolean last = prefilled + n == promptLen;
        if (scoring) {
            int V = target.config().vocabSize;
            // row r predicts the token after position prefilled + r
            for (int r = 0; r < n && prefilled + r + 1 < promptLen; r++)
                promptScores[prefilled + r + 1] = sampler.logprobs(lg, r * V, ctx[prefilled + r + 1], scoreTop);
        }
        int lastRow = scoring ? (n - 1) * target.config().vocabSize : 0;
        prefilled += n;
        if (nextPoint < points.length && points[nextPoint] == prefilled) {
            nextPoint++;
            pointHook.reached(seq);
        }
        if (last) {
            prefillEndNs = System.nanoTime();
            if (draft != null) draft.committed(ctx, promptLen);
            // max_tokens 0: only the prompt's scores were wanted
            if (sampler.params().maxTokens() == 0) return end(Finish.LENGTH);
            // the last chunk's only logit row is its last (not scored: scoring needs the logits)
            int forced = forcedToken();
            Distribution d = forced >= 0 ? Distribution.certain(forced)
                    : ids != null ? Distribution.certain(ids[0]) : sampler.distribution(lg, lastRow, mask());
            int tok = d.sample(sampler.rng());
            firstTokenNs = System.nanoTime();
            if (!emit(tok, lg, lastRow)) return false;
        }
        return finish == null;
    }

    private boolean commitDecode(Draft.Proposal prop, float[] lg, int[] ids) {
        int q = prop.size();
        int V = target.config().vocabSize;
        int acc = 0;
        // offered: every draft of the proposal, except those after an accepted one that ended the generation (EOS, a
        // stop string, the length limit), which nothing judged; drafts after a rejected one are offered and rejected
        int judged = 0;
        boolean endedOnAccept = false;
        // rows i = 0..q: row i predicts the token after the pending token and drafts 0..i-1
        for (int i = 0; i <= q; i++) {
            Distribution p = rowDistribution(lg, ids, i);
            if (i < q) {
                judged++;
                int d = prop.tokens()[i];
                boolean ok;
                Distribution qd = prop.dists()[i];
                if (sampler.params().isGreedy()) ok = d == p.top();
                else {
                    double pq = p.probOf(d), qq = qd == null ? 1.0 : qd.probOf(d);
                    ok = qq > 0 && sampler.rng().nextDouble() < Math.min(1.0, pq / qq);
                }
                if (ok) {
                    acc++;
                    if (!emit(d, lg, i * V)) {
                        endedOnAccept = true;
                        break;
                    }
                    continue;
                }
                int tok = sampler.params().isGreedy() ? p.top()
                        : p.residual(qd != null ? qd : Distribution.certain(d)).sample(sampler.rng());
                emit(tok, lg, i * V);
                break;
            }
            emit(p.sample(sampler.rng()), lg, i * V);
        }
        // the cache holds the pending token and drafts 0..q-1; keep the pending token and the accepted drafts
        int reject = q - acc;
        if (reject > 0 && finish == null) seq.rollback(reject);
        int offeredNow = endedOnAccept ? judged : q;
        offered += offeredNow;
        accepted += acc;
        verifySteps++;
        if (width != null) width.record(offeredNow, acc);
        if (draft != null && q > 0) draft.verified(offeredNow, acc);
        if (draft != null && finish == null) draft.committed(ctx, len);
        if (finish == null && cancelled) return end(Finish.CANCELLED);
        return finish == null;
    }

    /**
     * Ends the generation now as cancelled and releases its sequence and draft, whatever its state (a planned step is
     * dropped). For a scheduler that fails a request after an error in its step.
     */
    public void abandon() {
        cancelled = true;
        planned = null;
        prepared = null;
        plannedProposal = null;
        end(Finish.CANCELLED);
    }

    /** Commits one generated token; returns false once generation has finished. */
    private boolean emit(int tok, float[] lg, int off) {
        if (finish != null) return false;
        if (len == ctx.length) ctx = Arrays.copyOf(ctx, ctx.length * 2);
        if (constraint != null) constraint.advance(tok);
        if (budget != null) budget.committed(tok);
        ctx[len++] = tok;
        generated++;
        sampler.push(tok);
        Sampler.TokenLogprobs lp = sampler.params().logprobs() ? sampler.logprobs(lg, off, tok, sampler.params().topLogprobs()) : null;
        boolean isEos = false;
        // under a constraint the end-of-sequence token is the grammar's end of the output: it ends the generation even
        // with ignore_eos (the grammar allows nothing else after it)
        if (!sampler.params().ignoreEos() || constraint != null) for (int e : opt.eosIds()) if (e == tok) isEos = true;
        boolean go = listener.onToken(tok, lp);
        if (!go || isEos) return end(Finish.STOP);
        if (generated >= sampler.params().maxTokens() || len >= opt.maxContext()) return end(Finish.LENGTH);
        return true;
    }

    /** The allowed set for the next token: the constraint's, less what min_tokens holds back; null for all. */
    private long[] mask() {
        return rowMask(constraint == null ? null : constraint.allowed(remaining()), 0);
    }

    /** {@link #rowMaskAhead}'s answer where a row's set cannot be known before the rows ahead of it are committed. */
    private static final long[] UNKNOWN = new long[0];

    /**
     * The allowed set of the planned step's logit row i, ahead of its commit: row 0's is {@link #mask()}'s, a verify
     * row's the constraint's after the drafts before it ({@link Constraint#allowedAfter}, its remaining count i less),
     * less what min_tokens holds back; null for all, {@link #UNKNOWN} where the constraint cannot tell ahead.
     */
    private long[] rowMaskAhead(int i) {
        if (i == 0) return mask();
        if (constraint == null) return rowMask(null, i);
        long[] c = constraint.allowedAfter(plannedProposal.tokens(), i, Math.max(1, tokensLeft() - i));
        return c == null ? UNKNOWN : rowMask(c, i);
    }

    /** Tokens that may still be generated: the request's budget and the context's room, whichever is smaller. */
    private int remaining() {
        return Math.max(1, tokensLeft());
    }

    /** The request's budget and the context's room, whichever is smaller (may be 0). */
    private int tokensLeft() {
        return Math.min(sampler.params().maxTokens() - generated, opt.maxContext() - len);
    }

    private boolean end(Finish f) {
        if (finish == null) {
            finish = f;
            endNs = System.nanoTime();
            seq.close();
            if (draft != null) draft.close();
        }
        return false;
    }

    // ---------------------------------------------------------------------------------------------------------

    /** Prompt tokens prefilled so far. */
    public int prefilledTokens() {
        return prefilled;
    }

    /**
     * Tokens whose state the sequence holds now (a resumed prefix, the prompt prefilled so far and the tokens generated
     * and forwarded; a chunk part-way through its layers counts once its last layer has run); 0 once the generation has
     * ended, since its sequence is closed then.
     */
    public int heldTokens() {
        return finish != null ? 0 : seq.length();
    }

    /** Prompt tokens resumed from a cached prefix instead of prefilled. */
    public int cachedTokens() {
        return cached;
    }

    public int promptTokens() {
        return promptLen;
    }

    public int generatedTokens() {
        return generated;
    }

    /** The generated token ids so far. */
    public int[] generatedIds() {
        return Arrays.copyOfRange(ctx, promptLen, len);
    }

    /**
     * Seconds from the first step to the first generated token (prefill time); with {@code max_tokens} 0 (a scored
     * prompt and nothing generated), to the end of the prefill.
     */
    public double prefillSeconds() {
        long end = firstTokenNs != 0 ? firstTokenNs : prefillEndNs;
        return end == 0 ? 0 : (end - startNs) / 1e9;
    }

    /** Seconds from the first generated token to the end (or now). */
    public double decodeSeconds() {
        if (firstTokenNs == 0) return 0;
        return ((endNs != 0 ? endNs : System.nanoTime()) - firstTokenNs) / 1e9;
    }

    /** Prompt tokens per second of prefill (the prefilled ones: a resumed prefix is not counted). */
    public double prefillTokensPerSecond() {
        double s = prefillSeconds();
        return s > 0 ? (promptLen - cached) / s : 0;
    }

    /** Generated tokens per second after the first one; NaN (undefined) until a second token is generated. */
    public double decodeTokensPerSecond() {
        double s = decodeSeconds();
        return s > 0 && generated > 1 ? (generated - 1) / s : Double.NaN;
    }

    /** Speculative accounting (see the class docs for the definitions). */
    public SpecStats specStats() {
        return new SpecStats(offered, accepted, verifySteps);
    }

    /**
     * Draft tokens offered and accepted, and verify steps.
     */
    public record SpecStats(long offered, long accepted, long steps) {
        /** accepted / offered, or NaN when nothing was offered. */
        public double acceptanceRate() {
            return offered == 0 ? Double.NaN : (double) accepted / offered;
        }

        /** (accepted + steps) / steps: tokens each verify step committed on average. */
        public double committedPerStep() {
            return steps == 0 ? Double.NaN : (double) (accepted + steps) / steps;
        }

        public SpecStats plus(SpecStats o) {
            return new SpecStats(offered + o.offered, accepted + o.accepted, steps + o.steps);
        }
    }
}
