package io.ds4j.engine;

import io.ds4j.model.ModelConfig;

/**
 * A compute backend for one DeepSeek-V4 model. One step function serves prefill chunks, decode and speculative
 * verification (spec 4.2): S ≥ 1 new tokens go in, logits come back only for the rows asked for.
 */
public interface Backend extends AutoCloseable {
    /** Short name ("cpu", "hip"). */
    String name();

    ModelConfig config();

    /**
     * A new, empty sequence.
     * @param maxRollback how many tokens {@link Sequence#rollback} must be able to remove (default 16)
     */
    Sequence newSequence(int maxRollback);

    /**
     * Runs tokens[off .. off+count) at positions seq.length() … and appends them to the sequence.
     * @param logitRows indices in [0, count) of the new tokens whose next-token logits are wanted (may be empty)
     * @return logits [logitRows.length, V], row-major
     * @throws IllegalArgumentException for a token id outside [0, V) or a bad row index; the sequence is unchanged then
     */
    float[] forward(Sequence seq, int[] tokens, int off, int count, int[] logitRows);

    /**
     * {@link #forward(Sequence, int[], int, int, int[])} with the reason for the step; a backend may choose an
     * implementation per kind (the GPU backend's verify attention path). The default ignores the kind.
     */
    default float[] forward(Sequence seq, int[] tokens, int off, int count, int[] logitRows, StepKind kind) {
        return forward(seq, tokens, off, count, logitRows);
    }

    /**
     * One step over a batch of sequences: every entry's tokens are appended to its sequence, and the logits of its
     * requested rows come back. Row-wise work (products, MoE, mHC, norms, head) runs over all rows of the batch at
     * once; attention, compressors, indexer and caches work per entry. A request's numbers must not depend on what else
     * is in the batch (batch invariance: a sequence stepped alone or with others gives bit-identical logits).
     * The default runs the entries one after another through {@link #forward}.
     * @param batch entries, each sequence at most once
     * @return per entry i, its logits [batch.get(i).logitRows().length, V], row-major
     * @throws IllegalArgumentException naming the entry (its index) for a bad token id, a bad logit row, a foreign or
     *         repeated sequence; no sequence is changed then
     * @throws RuntimeException the backend's error when the step fails later: the entries' sequences are then in the
     *         state the backend's {@link #forward} documents for a failed step
     */
    default float[][] step(java.util.List<BatchEntry> batch) {
        checkBatch(config(), batch);
        for (int i = 0; i < batch.size(); i++)
            if (batch.get(i).layers() != null)
                throw new IllegalArgumentException("batch entry " + i + ": backend " + name() + " does not run layer slices");
        float[][] out = new float[batch.size()][];
        for (int i = 0; i < batch.size(); i++) {
            BatchEntry e = batch.get(i);
            out[i] = forward(e.seq(), e.tokens(), 0, e.count(), e.logitRows(), e.kind());
        }
        return out;
    }

    /**
     * {@link #step} where entries that want only their rows' greedy tokens ({@link BatchEntry#argmaxOnly()}) get token
     * ids instead of logits: the index of each row's largest logit among ids [0, argmaxBelow), the lowest index on
     * ties, exactly {@link io.ds4j.sampling.Sampler#argmax} over the logits {@link #step} would return (also for NaN:
     * a NaN never wins, unless it is at index 0, which then stays the answer). The other entries get their logits as
     * from {@link #step}. The default computes the ids from {@link #step}'s logits; a backend on a device computes
     * them there and copies back only the ids.
     * @return per entry its logits or its ids (see {@link StepOutput})
     * @throws IllegalArgumentException as {@link #step}, also for an argmaxBelow above V
     * @throws RuntimeException as {@link #step}
     */
    default StepOutput stepArgmax(java.util.List<BatchEntry> batch) {
        checkArgmax(config(), batch);
        return StepOutput.fromLogits(batch, step(batch), config().vocabSize);
    }

    /**
     * Whether {@link #stepArgmax} chooses argmax-only rows among their {@link BatchEntry#argmaxMasks} (a constraint's
     * allowed tokens), so that a constrained greedy request's rows need not come back as logits. The default
     * {@link #stepArgmax} does (it computes the ids from the logits on the host); a backend that overrides it says
     * here whether its override does. Default false: an engine then asks such rows for their full logits.
     */
    default boolean argmaxMasks() {
        return false;
    }

    /**
     * The check {@link #stepArgmax} adds to {@link #checkBatch}.
     * @throws IllegalArgumentException naming the entry whose argmaxBelow is above V
     */
    static void checkArgmax(ModelConfig c, java.util.List<BatchEntry> batch) {
        for (int i = 0; i < batch.size(); i++) {
            if (batch.get(i).argmaxBelow() > c.vocabSize)
                throw new IllegalArgumentException("batch entry " + i + ": argmaxBelow " + batch.get(i).argmaxBelow()
                        + " is above the vocabulary size " + c.vocabSize);
            long[][] m = batch.get(i).argmaxMasks();
            int words = io.ds4j.sampling.Constraint.words(c.vocabSize);
            if (m != null) for (long[] row : m)
                if (row != null && row.length > words)
                    throw new IllegalArgumentException("batch entry " + i + ": an argmax mask of " + row.length
                            + " words is longer than the vocabulary's " + words);
        }
    }

    /**
     * The argument checks every {@link #step} makes before touching any state.
     * @throws IllegalArgumentException for an empty batch, a repeated sequence, or an entry that fails {@link #checkStep}
     *         (the message names the entry's index)
     */
    static void checkBatch(ModelConfig c, java.util.List<BatchEntry> batch) {
        if (batch.isEmpty()) throw new IllegalArgumentException("a batch needs at least one entry");
        java.util.Set<Sequence> seen = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<>());
        for (int i = 0; i < batch.size(); i++) {
            BatchEntry e = batch.get(i);
            if (!seen.add(e.seq())) throw new IllegalArgumentException("batch entry " + i + ": its sequence is already in the batch");
            try {
                checkStep(c, e.tokens(), 0, e.count(), e.logitRows());
                checkLayers(c, e);
            } catch (IllegalArgumentException x) {
                throw new IllegalArgumentException("batch entry " + i + ": " + x.getMessage(), x);
            }
        }
    }

    /**
     * Whether a prefill step of {@code rows} tokens, run instead as a step of its first {@code first} tokens and then
     * a step of the other {@code rows − first}, gives bit for bit the same logits and sequence state. The scheduler
     * cuts prefill chunks shorter (to bound the running requests' latency) only where this holds, so a request's
     * output never depends on what else runs. The default is false (never cut): a backend whose kernels depend on the
     * step's size says where they do not.
     * @param rows  the chunk's tokens (at least 2)
     * @param first the first part's tokens, 1 .. rows − 1
     */
    default boolean prefillSplitExact(int rows, int first) {
        return false;
    }

    /**
     * Whether {@link #step} runs prefill chunks in layer slices ({@link BatchEntry.Layers}): a slice's streams stay with
     * the sequence until the chunk's next slice, and the last slice gives bit for bit the numbers of the whole chunk
     * in one step. The default is false (such entries are refused).
     */
    default boolean layerSlices() {
        return false;
    }

    /**
     * A count of the one-off work done inside steps so far (on the GPU: step graphs captured, workspace reallocations),
     * read before and after a step: a step during which it moved cost more than the same step costs again, so the
     * scheduler's latency policy does not learn from it ({@link PrefillBudget#observe}). The default, 0, never moves.
     */
    default long oneOffWork() {
        return 0;
    }

    /** The verify attention paths this backend can switch between (empty: it has only one). */
    default java.util.Set<VerifyAttention> verifyAttentionPaths() {
        return java.util.Set.of();
    }

    /**
     * Switches the verify attention path for the following {@link StepKind#VERIFY} steps (tests and benchmarks; the
     * server sets it once from {@code verify.f16Kv}).
     * @throws UnsupportedOperationException when the backend does not offer that path
     */
    default void setVerifyAttention(VerifyAttention path) {
        throw new UnsupportedOperationException("backend " + name() + " has a single verify attention path");
    }

    /**
     * A new sequence holding a copy of src's state (same length; nothing to roll back yet). Used to give a draft that
     * is a copy of the target the target's prefilled cache without a second prefill.
     * @throws UnsupportedOperationException when the backend cannot copy sequences
     */
    default Sequence fork(Sequence src, int maxRollback) {
        throw new UnsupportedOperationException("backend " + name() + " cannot fork sequences");
    }

    /** Whether {@link #snapshot} and {@link #resume} are supported (the prefix cache is off when not). */
    default boolean snapshots() {
        return false;
    }

    /**
     * A snapshot of seq's state at its current length (see {@link StateSnapshot}: rings copied, compressed entries and
     * indexer keys shared). The sequence is unchanged and may go on; a later step that would rewrite shared rows (a
     * rollback below the snapshot followed by new tokens) copies its store first.
     * @throws UnsupportedOperationException when {@link #snapshots()} is false
     * @throws IllegalStateException when the sequence is closed or unusable
     * @throws RuntimeException the backend's out-of-memory error when the copies do not fit (nothing is kept then)
     */
    default StateSnapshot snapshot(Sequence seq) {
        throw new UnsupportedOperationException("backend " + name() + " cannot snapshot sequences");
    }

    /**
     * A new sequence whose state is the snapshot's (length = snap.length(), nothing to roll back yet): forwarding
     * the tokens after the prefix gives bit for bit what a cold prefill of the whole prompt gives. The snapshot stays
     * valid and may be resumed again.
     * @param maxRollback must equal the rollback window of the sequence the snapshot was taken from (the ring sizes)
     * @throws UnsupportedOperationException when {@link #snapshots()} is false
     * @throws IllegalArgumentException for a snapshot of another backend, a closed one or a different rollback window
     */
    default Sequence resume(StateSnapshot snap, int maxRollback) {
        throw new UnsupportedOperationException("backend " + name() + " cannot resume sequences from snapshots");
    }

    /**
     * The model's MTP layer as a draft source ({@link MtpHead}).
     * @throws IllegalStateException naming what the checkpoint holds instead when the model has no usable MTP layer
     * @throws UnsupportedOperationException when this backend cannot run an MTP layer
     */
    default MtpHead mtp() {
        throw new UnsupportedOperationException("backend " + name() + " cannot run the MTP layer");
    }

    /** What this backend effectively does (placement, verify attention path, diagnostics). */
    default EngineStatus status() {
        return EngineStatus.cpu();
    }

    /**
     * The argument checks every {@link #forward} makes before touching any state.
     * @throws IllegalArgumentException for S &lt; 1, a token id outside [0, V) or a logit row outside [0, S)
     */
    static void checkStep(ModelConfig c, int[] tokens, int off, int S, int[] logitRows) {
        if (S < 1) throw new IllegalArgumentException("need at least one token, got " + S);
        for (int s = 0; s < S; s++) {
            int t = tokens[off + s];
            if (t < 0 || t >= c.vocabSize)
                throw new IllegalArgumentException("token id " + t + " at index " + s + " is outside [0, " + c.vocabSize + ")");
        }
        for (int r : logitRows)
            if (r < 0 || r >= S) throw new IllegalArgumentException("logit row " + r + " is outside [0, " + S + ")");
    }

    /** Whether any entry runs a layer slice ({@link BatchEntry#layers}); a plain loop, as every step asks it. */
    static boolean anySlice(java.util.List<BatchEntry> batch) {
        for (BatchEntry e : batch) if (e.layers() != null) return true;
        return false;
    }

    /**
     * The checks of an entry against its sequence's part-way chunk ({@link Sequence#slicedLayers}): a sequence with
     * one takes only that chunk's next slice (from = its sliced layers, the same tokens); a slice ends at most at the
     * last layer, and only the last slice asks for logit rows.
     * @throws IllegalArgumentException naming what is wrong
     */
    static void checkLayers(ModelConfig c, BatchEntry e) {
        int done = e.seq().slicedLayers();
        BatchEntry.Layers ly = e.layers();
        if (ly == null) {
            if (done > 0) throw new IllegalArgumentException("the sequence's prefill chunk has run " + done + " of "
                    + c.numLayers + " layers: its next step must run layers from " + done);
            return;
        }
        if (ly.to() > c.numLayers)
            throw new IllegalArgumentException("layer slice [" + ly.from() + ", " + ly.to() + ") ends past the model's " + c.numLayers + " layers");
        if (ly.from() != done)
            throw new IllegalArgumentException("layer slice [" + ly.from() + ", " + ly.to() + ") does not continue the sequence's chunk, "
                    + (done == 0 ? "which has none part-way (a chunk starts at layer 0)" : "whose next layer is " + done));
        if (done > 0 && e.count() != e.seq().slicedRows())
            throw new IllegalArgumentException("layer slice of " + e.count() + " tokens continues a chunk of " + e.seq().slicedRows());
        if (!ly.last(c.numLayers) && e.logitRows().length > 0)
            throw new IllegalArgumentException("layer slice [" + ly.from() + ", " + ly.to() + ") asks for logit rows before the last layer");
    }

    /** Bytes of per-sequence state at a given context length (tokens), with the given rollback window. */
    long stateBytes(int contextTokens, int maxRollback);

    @Override
    void close();
}
