package io.ds4j.speculative;

import io.ds4j.engine.Draft;
import io.ds4j.engine.Backend;
import io.ds4j.engine.MtpHead;
import io.ds4j.engine.MtpState;
import io.ds4j.engine.Sequence;
import io.ds4j.sampling.Distribution;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;

/**
 * The checkpoint's own MTP layer as the draft ({@link MtpHead}): per request it attaches MTP state to the target's
 * sequence, and each proposal runs the MTP once from the target's state at the last committed position and then
 * chains it on its own output for the further tokens. Proposals are greedy for greedy requests and sampled with the
 * request's settings otherwise (with their distributions, so verification keeps the target's distribution).
 */
public final class MtpDraftSource implements DraftSource {
    private final MtpHead head;
    private final int vocab;
    private final int maxRollback;

    /**
     * @param target the target backend; its model must have a usable MTP layer
     * @param maxRollback the target sequences' rollback window (≥ the largest verify width)
     * @throws IllegalStateException naming what the checkpoint holds when it has no usable MTP layer
     * @throws UnsupportedOperationException when the backend cannot run the MTP layer
     */
    public MtpDraftSource(Backend target, int maxRollback) {
        this.head = target.mtp();
        this.vocab = target.config().vocabSize;
        this.maxRollback = maxRollback;
    }

    @Override
    public String name() {
        return "mtp";
    }

    /** The backend's MTP layer. */
    public MtpHead head() {
        return head;
    }

    @Override
    public Draft open(int[] prompt, SamplingParams params, long seed) {
        SamplingParams p = params.seed() == null ? params : new SamplingParams(params.temperature(), params.topK(), params.topP(),
                params.minP(), seed, params.presencePenalty(), params.frequencyPenalty(), params.repetitionPenalty(),
                params.logitBias(), params.maxTokens(), params.stop(), false, 0, params.ignoreEos());
        return new MtpDraft(new Sampler(p, vocab, prompt), prompt.length);
    }

    private final class MtpDraft implements Draft {
        private final Sampler sampler;
        private MtpState state;
        /** Committed tokens already pushed into the sampler's history. */
        private int histUpTo;

        MtpDraft(Sampler sampler, int promptLen) {
            this.sampler = sampler;
            this.histUpTo = promptLen;
        }

        @Override
        public void attach(Backend target, Sequence seq) {
            if (state != null) state.close();
            state = head.open(seq, maxRollback);
        }

        @Override
        public Proposal propose(int[] ctx, int len, int q) {
            if (state == null || q <= 0) return Proposal.NONE;
            committed(ctx, len);
            float[] lg = state.start(ctx, len);
            int[] toks = new int[q];
            Distribution[] dists = new Distribution[q];
            boolean greedy = sampler.params().isGreedy();
            for (int i = 0; i < q; i++) {
                Distribution d = sampler.distribution(lg, 0);
                int t = greedy ? d.top() : d.sample(sampler.rng());
                toks[i] = t;
                dists[i] = greedy ? null : d;
                sampler.push(t);
                if (i + 1 < q) lg = state.next(t);
            }
            for (int i = q - 1; i >= 0; i--) sampler.pop(toks[i]);
            return new Proposal(toks, dists);
        }

        @Override
        public void committed(int[] ctx, int len) {
            for (; histUpTo < len; histUpTo++) sampler.push(ctx[histUpTo]);
        }

        @Override
        public void close() {
            if (state != null) state.close();
            state = null;
        }
    }
}
