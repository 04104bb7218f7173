package io.ds4j.speculative;

import io.ds4j.engine.Draft;
import io.ds4j.engine.Backend;
import io.ds4j.engine.MtpHead;
import io.ds4j.engine.MtpState;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.SteppedMtpDraft;
import io.ds4j.sampling.Distribution;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;

import java.util.List;

/**
 * The checkpoint's own MTP layer as the draft ({@link MtpHead}): per request it attaches MTP state to the target's
 * sequence, and each proposal runs the MTP once from the target's state at the last committed position and then
 * chains it on its own output for the further tokens. Proposals are greedy for greedy requests and sampled with the
 * request's settings otherwise (with their distributions, so verification keeps the target's distribution). The draft
 * is a {@link SteppedMtpDraft}: the scheduler runs the MTP steps of all requests' drafts as one batched MTP forward per
 * draft position ({@link io.ds4j.engine.DraftBatch}).
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

    private final class MtpDraft implements SteppedMtpDraft {
        private final Sampler sampler;
        private MtpState state;
        /** Committed tokens already pushed into the sampler's history. */
        private int histUpTo;
        // the proposal under way: its width, the tokens chosen so far (pushed into the sampler's history) and the result
        private int q, chosen;
        private int[] toks;
        private Distribution[] dists;
        private boolean stepping;
        private Proposal done;

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
        public MtpHead head() {
            return head;
        }

        @Override
        public Proposal propose(int[] ctx, int len, int q) {
            if (q <= 0) return Proposal.NONE;
            MtpHead.Step s = begin(ctx, len, q);
            try {
                while (s != null) s = advance(head.step(List.of(s))[0]);
            } catch (RuntimeException | Error x) {
                abandon();
                throw x;
            }
            return proposal();
        }

        @Override
        public MtpHead.Step begin(int[] ctx, int len, int q) {
            if (q < 1) throw new IllegalArgumentException("a proposal needs q >= 1, got " + q);
            if (stepping) abandon();
            committed(ctx, len);
            this.q = q;
            this.chosen = 0;
            this.toks = new int[q];
            this.dists = new Distribution[q];
            if (state == null) { // not attached to a target: nothing to offer
                done = Proposal.NONE;
                return null;
            }
            done = null;
            stepping = true;
            return MtpHead.Step.start(state, ctx, len);
        }

        @Override
        public MtpHead.Step advance(float[] lg) {
            if (!stepping) throw new IllegalStateException("advance without a step under way");
            boolean greedy = sampler.params().isGreedy();
            Distribution d = sampler.distribution(lg, 0);
            int t = greedy ? d.top() : d.sample(sampler.rng());
            toks[chosen] = t;
            dists[chosen] = greedy ? null : d;
            sampler.push(t);
            chosen++;
            if (chosen < q) return MtpHead.Step.next(state, t);
            for (int i = q - 1; i >= 0; i--) sampler.pop(toks[i]);
            chosen = 0;
            stepping = false;
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
            // the sampler's history holds the tokens chosen so far: take them back out (the MTP state drops its
            // speculative entries at the next start)
            for (int i = chosen - 1; i >= 0; i--) sampler.pop(toks[i]);
            chosen = 0;
            stepping = false;
            done = null;
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
