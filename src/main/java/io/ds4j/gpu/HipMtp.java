package io.ds4j.gpu;

import io.ds4j.engine.MtpHead;
import io.ds4j.engine.MtpState;
import io.ds4j.engine.Sequence;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;

/**
 * The MTP layer on the GPU (spec 2.6), mirroring the CPU's: the block runs as a one-layer {@link HipBackend}
 * ({@link ModelConfig#mtpBlockConfig()}) on its own stream of the target's device, with the MTP's hc_head and norm, and
 * the embedding and lm_head uploaded for it (a second copy on the device). The input projections
 * {@code h_proj(hnorm(H_t,i)) + e_proj(enorm(embed(tok_{t+1})))} run on the device too
 * ({@link HipBackend#forwardMtp}); H_t comes from the target sequence's device ring of kept streams ({@link KeptRing}).
 */
final class HipMtp implements MtpHead, AutoCloseable {
    private final HipBackend target;
    private final HipBackend block;
    private final ModelConfig c;
    final HipBackend.MtpInputs in;

    HipMtp(HipBackend target, ModelWeights main, io.ds4j.engine.BackendOptions options) {
        this.target = target;
        this.c = target.config();
        ModelWeights.Mtp m = main.mtp;
        ModelWeights bw = new ModelWeights(c.mtpBlockConfig());
        bw.layers[0] = m.block;
        bw.embed = main.embed;
        bw.lmHead = main.lmHead;
        bw.hcHeadFn = m.hcHeadFn;
        bw.hcHeadBase = m.hcHeadBase;
        bw.hcHeadScale = m.hcHeadScale;
        bw.finalNorm = m.norm;
        this.block = new HipBackend(bw, options); // owns nothing of the target's: its close frees only its uploads
        this.in = block.mtpInputs(m, c.slidingWindow); // a proposal's start computes at most W entries
    }

    @Override
    public String describe() {
        return "mtp (1 sliding-window layer, " + c.hcMult + " streams, on " + block.gpu() + ")";
    }

    @Override
    public MtpState open(Sequence t, int maxRollback) {
        if (!(t instanceof HipSequence seq) || seq.backend != target)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        if (maxRollback < 0) throw new IllegalArgumentException("maxRollback must be >= 0, got " + maxRollback);
        int nD = c.hcMult * c.hidden, cap = c.slidingWindow + maxRollback + 2;
        if (seq.kept != null) seq.kept.free();
        seq.kept = new KeptRing(target.gpu(), nD, cap);
        return new State(seq, maxRollback + 1, cap);
    }

    @Override
    public void close() {
        block.close();
    }

    private final class State implements MtpState {
        private final HipSequence tgt;
        private final HipSequence m;
        private final KeptRing kept;
        /** Device buffers of the block's: the gathered previous streams [cap, n·D] and the latest output streams [n·D]. */
        private final long gather, last;
        private int realLen;
        private boolean started, closed;

        State(HipSequence tgt, int window, int cap) {
            this.tgt = tgt;
            this.kept = tgt.kept;
            this.m = block.newSequence(window);
            int nD = c.hcMult * c.hidden;
            this.gather = block.gpu().malloc(4L * nD * cap, "MTP input streams");
            this.last = block.gpu().malloc(4L * nD, "MTP output streams");
        }

        @Override
        public float[] start(int[] ctx, int len) {
            if (closed) throw new IllegalStateException("MTP state is closed");
            int N = tgt.length();
            if (len != N + 1)
                throw new IllegalStateException("context of " + len + " tokens does not continue the target's " + N + " positions by one pending token");
            if (N == 0) throw new IllegalStateException("the target holds no positions yet");
            if (tgt.kept != kept || kept.hi < N || kept.lo > N - 1)
                throw new IllegalStateException("the target's streams up to position " + (N - 1) + " were not kept");
            int from = Math.min(realLen, N - 1);
            int lo = Math.max(from, Math.max(N - c.slidingWindow, kept.lo));
            int have = m.length();
            if (have > lo && have - lo <= m.rollbackable()) m.rollback(have - lo);
            else if (have != lo) m.pos.reset(lo);
            int S = N - lo;
            int[] toks = new int[S];
            for (int s = 0; s < S; s++) toks[s] = ctx[lo + s + 1];
            kept.gather(block.gpu(), lo, N, gather);
            float[] lg = block.forwardMtp(m, gather, toks, S, lo == 0, in, last);
            realLen = N;
            started = true;
            return lg;
        }

        @Override
        public float[] next(int token) {
            if (closed) throw new IllegalStateException("MTP state is closed");
            if (!started) throw new IllegalStateException("next() before start()");
            if (token < 0 || token >= c.vocabSize)
                throw new IllegalArgumentException("token id " + token + " is outside [0, " + c.vocabSize + ")");
            // the previous output streams are the input; copied first, as forwardMtp overwrites `last`
            int nD = c.hcMult * c.hidden;
            block.gpu().copy(gather, last, 4L * nD);
            return block.forwardMtp(m, gather, new int[]{token}, 1, false, in, last);
        }

        @Override
        public void close() {
            if (closed) return;
            closed = true;
            if (tgt.kept == kept) tgt.kept = null;
            kept.free();
            block.gpu().free(gather);
            block.gpu().free(last);
            m.close();
        }
    }
}
