package io.ds4j.speculative;

import io.ds4j.engine.Draft;
import io.ds4j.engine.Backend;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.sampling.Distribution;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;

import java.util.Arrays;

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

    private final class ModelDraft implements Draft {
        private final Sequence seq;
        private final Sampler sampler;
        private final int promptLen;
        /** Tokens currently in the draft cache (committed text, then possibly proposals). */
        private int[] cached = new int[256];
        /** Generated tokens already pushed into the draft sampler's history. */
        private int histUpTo;

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
        public Proposal propose(int[] ctx, int len, int q) {
            sync(ctx, len);
            int V = draft.config().vocabSize;
            // catch up: everything of ctx not yet in the draft cache (at least the pending token)
            int have = seq.length();
            float[] lg;
            if (have >= len) {
                // the cache already holds the whole context (cannot happen with a pending token, but stay safe)
                seq.rollback(1);
                have = len - 1;
            }
            // catching up on several tokens (the prompt, or tokens accepted since the last proposal) is a prefill
            // chunk; a single pending token is a decode step
            lg = draft.forward(seq, ctx, have, len - have, new int[]{len - have - 1},
                    len - have > 1 ? StepKind.PREFILL : StepKind.DECODE);
            remember(ctx, have, len);
            int[] toks = new int[q];
            Distribution[] dists = new Distribution[q];
            boolean greedy = sampler.params().isGreedy();
            for (int i = 0; i < q; i++) {
                Distribution d = sampler.distribution(lg, 0);
                int t = greedy ? d.top() : d.sample(sampler.rng());
                toks[i] = t;
                dists[i] = greedy ? null : d;
                sampler.push(t);
                if (i + 1 < q) {
                    lg = draft.forward(seq, toks, i, 1, new int[]{0}, StepKind.DECODE);
                    remember(toks, i, i + 1, seq.length() - 1);
                }
            }
            for (int i = q - 1; i >= 0; i--) sampler.pop(toks[i]);
            return new Proposal(toks, dists);
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
