package io.ds4j.speculative;

import io.ds4j.engine.SteppedDraft;
import io.ds4j.engine.Draft;
import io.ds4j.engine.Backend;
import io.ds4j.engine.BatchEntry;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.sampling.Distribution;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;

import java.util.Arrays;
import java.util.List;

/**
 * A draft model: a separate (smaller) DeepSeek-V4 with the target's vocabulary and its own cache. Per request it
 * keeps a sequence in sync with the committed text, proposes q tokens autoregressively (greedy for greedy requests,
 * sampled with the request's settings otherwise), and rolls its own cache back to the committed text after every
 * verify step.
 */
public final class ModelDraftSource implements DraftSource {
    private final Backend draft;
    private final String name;
    private final int maxRollback;

    /**
     * @param draft the draft model's backend (its vocabulary must equal the target's; checked by the caller that
     *              loads both, see {@link #checkCompatible})
     * @param name for logs ("model:DIR")
     * @param maxRollback the draft sequence's rollback window (≥ the largest verify width)
     */
    public ModelDraftSource(Backend draft, String name, int maxRollback) {
        this.draft = draft;
        this.name = name;
        this.maxRollback = maxRollback;
    }

    /**
     * Refuses a draft whose vocabulary or tokenizer differs from the target's.
     * @param targetTokenizer an identity of the target's tokenizer (e.g. a hash of its tokenizer.json)
     * @param draftTokenizer the same for the draft
     * @throws IllegalArgumentException with a message saying what differs
     */
    public static void checkCompatible(Backend target, Backend draft, String targetTokenizer, String draftTokenizer) {
        int tv = target.config().vocabSize, dv = draft.config().vocabSize;
        if (tv != dv)
            throw new IllegalArgumentException("draft model vocabulary (" + dv + " tokens) differs from the target's (" + tv
                    + " tokens); a draft must share the target's vocabulary");
        if (targetTokenizer != null && draftTokenizer != null && !targetTokenizer.equals(draftTokenizer))
            throw new IllegalArgumentException("draft model tokenizer (" + draftTokenizer + ") differs from the target's ("
                    + targetTokenizer + "); a draft must share the target's tokenizer");
    }

    @Override
    public String name() {
        return name;
    }

    /** The draft's backend. */
    public Backend backend() {
        return draft;
    }

    /** The draft model's {@code max_position_embeddings}. */
    @Override
    public int maxContext() {
        return draft.config().maxPositionEmbeddings;
    }

    @Override
    public Draft open(int[] prompt, SamplingParams params, long seed) {
        SamplingParams p = params.seed() == null ? params : new SamplingParams(params.temperature(), params.topK(), params.topP(),
                params.minP(), seed, params.presencePenalty(), params.frequencyPenalty(), params.repetitionPenalty(),
                params.logitBias(), params.maxTokens(), params.stop(), false, 0, params.ignoreEos());
        return new ModelDraft(draft.newSequence(maxRollback), new Sampler(p, draft.config().vocabSize, prompt), prompt.length);
    }

    @Override
    public void close() {
        draft.close();
    }

    private final class ModelDraft implements SteppedDraft {
        private final Sequence seq;
        private final Sampler sampler;
        private final int promptLen;
        /** Tokens currently in the draft cache (committed text, then possibly proposals). */
        private int[] cached = new int[256];
        /** Generated tokens already pushed into the draft sampler's history. */
        private int histUpTo;
        // the proposal under way: its width, tokens chosen so far, and the entry whose logits come next
        private int q, chosen;
        private int[] toks;
        private Distribution[] dists;
        private BatchEntry pending;
        /** The sequence's length when {@link #pending} was made (-1: no step under way). */
        private int pendingAt = -1;
        private Proposal done;

        @Override
        public int maxContext() {
            return ModelDraftSource.this.maxContext();
        }

        ModelDraft(Sequence seq, Sampler sampler, int promptLen) {
            this.seq = seq;
            this.sampler = sampler;
            this.promptLen = promptLen;
            this.histUpTo = promptLen;
        }

        @Override
        public Backend backend() {
            return draft;
        }

        @Override
        public Proposal propose(int[] ctx, int len, int q) {
            if (q < 1) return Proposal.NONE;
            BatchEntry e = begin(ctx, len, q);
            try {
                while (e != null) e = advance(draft.step(List.of(e))[0]);
            } catch (RuntimeException | Error x) {
                abandon();
                throw x;
            }
            return proposal();
        }

        @Override
        public BatchEntry begin(int[] ctx, int len, int q) {
            if (q < 1) throw new IllegalArgumentException("a proposal needs q >= 1, got " + q);
            if (pending != null) abandon();
            sync(ctx, len);
            // catch up: everything of ctx not yet in the draft cache (at least the pending token)
            int have = seq.length();
            if (have >= len) {
                // the cache already holds the whole context (cannot happen with a pending token, but stay safe)
                seq.rollback(1);
                have = len - 1;
            }
            this.q = q;
            this.chosen = 0;
            this.toks = new int[q];
            this.dists = new Distribution[q];
            this.done = null;
            // catching up on several tokens (the prompt, or tokens accepted since the last proposal) is a prefill
            // chunk; a single pending token is a decode step
            int n = len - have;
            pending = new BatchEntry(seq, Arrays.copyOfRange(ctx, have, len), new int[]{n - 1},
                    n > 1 ? StepKind.PREFILL : StepKind.DECODE);
            pendingAt = have;
            return pending;
        }

        @Override
        public BatchEntry advance(float[] lg) {
            if (pending == null) throw new IllegalStateException("advance without a step under way");
            // the step ran: its tokens are in the draft cache now
            remember(pending.tokens(), 0, pending.count());
            pending = null;
            pendingAt = -1;
            boolean greedy = sampler.params().isGreedy();
            Distribution d = sampler.distribution(lg, 0);
            int t = greedy ? d.top() : d.sample(sampler.rng());
            toks[chosen] = t;
            dists[chosen] = greedy ? null : d;
            sampler.push(t);
            chosen++;
            if (chosen < q) {
                pending = new BatchEntry(seq, new int[]{t}, new int[]{0}, StepKind.DECODE);
                pendingAt = seq.length();
                return pending;
            }
            for (int i = q - 1; i >= 0; i--) sampler.pop(toks[i]);
            done = new Proposal(toks, dists);
            return null;
        }

        @Override
        public Proposal proposal() {
            if (done == null) throw new IllegalStateException("no completed proposal");
            return done;
        }

        @Override
        public void abandon() {
            // the sampler's history holds the tokens chosen so far: take them back out
            for (int i = chosen - 1; i >= 0; i--) sampler.pop(toks[i]);
            chosen = 0;
            done = null;
            // a failed step may have appended its tokens without them being remembered: mark those positions unknown
            // (no token id matches -1), so the next sync rolls them back
            if (pendingAt >= 0) {
                int n = seq.length();
                if (n > cached.length) cached = Arrays.copyOf(cached, Math.max(cached.length * 2, n));
                for (int i = pendingAt; i < n; i++) cached[i] = -1;
            }
            pending = null;
            pendingAt = -1;
        }

        private void remember(int[] src, int from, int to) {
            remember(src, from, to, seq.length() - (to - from));
        }

        private void remember(int[] src, int from, int to, int at) {
            if (at + (to - from) > cached.length) cached = Arrays.copyOf(cached, Math.max(cached.length * 2, at + (to - from)));
            System.arraycopy(src, from, cached, at, to - from);
        }

        @Override
        public void committed(int[] ctx, int len) {
            sync(ctx, len);
        }

        /** Rolls the draft cache back to its longest prefix that agrees with ctx[0 .. len). */
        private void sync(int[] ctx, int len) {
            for (; histUpTo < len; histUpTo++) sampler.push(ctx[histUpTo]);
            int n = seq.length(), common = 0, lim = Math.min(n, len);
            while (common < lim && cached[common] == ctx[common]) common++;
            if (common < n) {
                int k = n - common;
                if (k > seq.rollbackable()) {
                    throw new IllegalStateException("draft cache diverged by " + k + " tokens, beyond its rollback window "
                            + seq.rollbackable());
                }
                seq.rollback(k);
            }
        }

        @Override
        public void close() {
            seq.close();
        }
    }
}
