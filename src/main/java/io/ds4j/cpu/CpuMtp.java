package io.ds4j.cpu;

import io.ds4j.kernels.Gemm;
import io.ds4j.kernels.VecOps;
import io.ds4j.kernels.Ops;
import io.ds4j.engine.MtpHead;
import io.ds4j.engine.MtpState;
import io.ds4j.engine.Sequence;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;

/**
 * The MTP layer on the CPU (spec 2.6). The block runs as a one-layer model ({@link ModelConfig#mtpBlockConfig()}:
 * sliding-window attention, top-k MoE, mHC) on the target backend's kernels, with the MTP's own hc_head and final
 * norm and the target's embedding and lm_head. Its input streams for position t are
 * {@code h_proj(hnorm(H_t,i)) + e_proj(enorm(embed(tok_{t+1})))} for each stream i, where H_t are the target's final
 * streams at t (or, chained, the MTP's own output streams of the previous entry); the embedding term is zero at t = 0.
 */
final class CpuMtp implements MtpHead {
    private final CpuBackend target;
    private final CpuBackend block;
    private final ModelWeights.Mtp w;
    private final ModelWeights main;
    private final ModelConfig c;

    CpuMtp(CpuBackend target) {
        this.target = target;
        this.main = target.weights();
        this.w = main.mtp;
        this.c = target.config();
        ModelWeights bw = new ModelWeights(c.mtpBlockConfig());
        bw.layers[0] = w.block;
        bw.embed = main.embed;
        bw.lmHead = main.lmHead;
        bw.hcHeadFn = w.hcHeadFn;
        bw.hcHeadBase = w.hcHeadBase;
        bw.hcHeadScale = w.hcHeadScale;
        bw.finalNorm = w.norm;
        this.block = new CpuBackend(bw); // owns nothing: closing it releases no mapping
    }

    @Override
    public String describe() {
        return "mtp (1 sliding-window layer, " + c.hcMult + " streams, shared lm_head)";
    }

    @Override
    public MtpState open(Sequence target, int maxRollback) {
        if (!(target instanceof CpuSequence seq) || seq.cfg != c)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        if (maxRollback < 0) throw new IllegalArgumentException("maxRollback must be >= 0, got " + maxRollback);
        seq.kept = new KeptStreams(c.hcMult * c.hidden, c.slidingWindow + maxRollback + 2);
        return new State(seq, maxRollback + 1);
    }

    /**
     * The block's input streams for S entries: X [S, n·D] from the previous streams H [S, n·D] and the tokens, with the
     * embedding term zeroed where the entry's position is 0.
     */
    private float[] inputs(float[] H, int[] toks, int S, int firstPos) {
        final int D = c.hidden, n = c.hcMult;
        final float eps = (float) c.rmsEps;
        float[] hn = H.clone();
        Ops.rmsNormRows(hn, S * n, D, w.hnorm, eps);
        float[] X = new float[S * n * D];
        Gemm.matmul(w.hProj, hn, S * n, X);
        float[] e = new float[S * D];
        for (int s = 0; s < S; s++) if (firstPos + s > 0) main.embed.dequantRow(toks[s], e, s * D);
        Ops.rmsNormRows(e, S, D, w.enorm, eps);
        float[] ep = new float[S * D];
        Gemm.matmul(w.eProj, e, S, ep);
        for (int s = 0; s < S; s++)
            for (int i = 0; i < n; i++) VecOps.addProduct(1f, ep, s * D, X, (s * n + i) * D, D);
        return X;
    }

    private final class State implements MtpState {
        private final CpuSequence tgt;
        private final CpuSequence m;
        /** Entries computed from the target's committed streams: positions [0, realLen) (or a suffix of them). */
        private int realLen;
        /** Output streams of the latest entry [n·D]. */
        private float[] last;
        private boolean closed;

        State(CpuSequence tgt, int window) {
            this.tgt = tgt;
            this.m = block.newSequence(window);
        }

        @Override
        public float[] start(int[] ctx, int len) {
            if (closed) throw new IllegalStateException("MTP state is closed");
            int N = tgt.length();
            if (len != N + 1)
                throw new IllegalStateException("context of " + len + " tokens does not continue the target's " + N + " positions by one pending token");
            if (N == 0) throw new IllegalStateException("the target holds no positions yet");
            KeptStreams kept = tgt.kept;
            if (kept == null || kept.hi() < N || kept.lo() > N - 1)
                throw new IllegalStateException("the target's streams up to position " + (N - 1) + " were not kept");
            // recompute from the first entry not built from committed streams (at least the last one, whose output
            // is the first proposal), but no further back than the block's window needs and the ring holds
            int from = Math.min(realLen, N - 1);
            int lo = Math.max(from, Math.max(N - c.slidingWindow, kept.lo()));
            int have = m.length();
            if (have > lo && have - lo <= m.rollbackable()) m.rollback(have - lo);
            else if (have != lo) m.pos.reset(lo); // positions skipped or beyond the rollback window: restart there
            int S = N - lo, nD = c.hcMult * c.hidden;
            float[] H = new float[S * nD];
            int[] toks = new int[S];
            for (int s = 0; s < S; s++) {
                kept.get(lo + s, H, s * nD);
                toks[s] = ctx[lo + s + 1];
            }
            float[] X = inputs(H, toks, S, lo);
            float[] lg = block.forwardStreams(m, X, toks, S, new int[]{S - 1});
            last = java.util.Arrays.copyOfRange(X, (S - 1) * nD, S * nD);
            realLen = N;
            return lg;
        }

        @Override
        public float[] next(int token) {
            if (closed) throw new IllegalStateException("MTP state is closed");
            if (last == null) throw new IllegalStateException("next() before start()");
            if (token < 0 || token >= c.vocabSize)
                throw new IllegalArgumentException("token id " + token + " is outside [0, " + c.vocabSize + ")");
            float[] X = inputs(last, new int[]{token}, 1, m.length());
            float[] lg = block.forwardStreams(m, X, new int[]{token}, 1, new int[]{0});
            last = X;
            return lg;
        }

        @Override
        public void close() {
            if (closed) return;
            closed = true;
            tgt.kept = null;
            m.close();
        }
    }
}
