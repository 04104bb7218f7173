package io.ds4j.cpu;

import io.ds4j.kernels.Gemm;
import io.ds4j.kernels.VecOps;
import io.ds4j.kernels.Ops;
import io.ds4j.engine.BatchEntry;
import io.ds4j.engine.MtpHead;
import io.ds4j.engine.StepKind;
import io.ds4j.engine.MtpState;
import io.ds4j.engine.Sequence;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

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
     * {@inheritDoc} The rows of all steps go through the input projections and the block together
     * ({@link CpuBackend#forwardStreams}); every product and norm there gives a row a result that depends on that row
     * only, and attention runs per state, so a state's logits do not depend on the others. All checks run before any
     * state changes.
     */
    @Override
    public float[][] step(List<Step> steps) {
        final int E = steps.size(), nD = c.hcMult * c.hidden;
        if (E == 0) return new float[0][];
        State[] st = MtpHead.checkSteps(steps, m -> m instanceof State x && x.head() == this ? x : null, (x, s) -> {
            if (s.isStart()) x.checkStart(s.ctx(), s.len());
            else x.checkNext(s.token());
        }, State[]::new);
        // plan: each step's rows (a start's catch-up entries, a chained step's one entry), their previous streams,
        // tokens and positions
        int[] first = new int[E], count = new int[E], newLen = new int[E];
        int R = 0;
        for (int i = 0; i < E; i++) {
            Step s = steps.get(i);
            if (s.isStart()) {
                int N = st[i].tgt.length();
                int lo = st[i].startPos(N);
                st[i].moveTo(lo);
                count[i] = N - lo;
                newLen[i] = N;
            } else count[i] = 1;
            first[i] = R;
            R += count[i];
        }
        float[] H = new float[R * nD];
        int[] toks = new int[R];
        boolean[] noEmbed = new boolean[R];
        List<BatchEntry> batch = new ArrayList<>(E);
        for (int i = 0; i < E; i++) {
            Step s = steps.get(i);
            State x = st[i];
            int f = first[i], S = count[i], p0 = x.m.length();
            if (s.isStart()) {
                for (int k = 0; k < S; k++) {
                    x.tgt.kept.get(p0 + k, H, (f + k) * nD);
                    toks[f + k] = s.ctx()[p0 + k + 1];
                }
            } else {
                System.arraycopy(x.last, 0, H, f * nD, nD);
                toks[f] = s.token();
            }
            for (int k = 0; k < S; k++) noEmbed[f + k] = p0 + k == 0;
            batch.add(new BatchEntry(x.m, Arrays.copyOfRange(toks, f, f + S), new int[]{S - 1}, StepKind.DECODE));
        }
        float[] X = inputs(H, toks, R, noEmbed);
        float[][] lg = block.forwardStreams(batch, X);
        for (int i = 0; i < E; i++) {
            int f = first[i], S = count[i];
            st[i].last = Arrays.copyOfRange(X, (f + S - 1) * nD, (f + S) * nD);
            if (steps.get(i).isStart()) st[i].realLen = newLen[i];
        }
        return lg;
    }

    /**
     * The block's input streams for R rows: X [R, n·D] from the previous streams H [R, n·D] and the tokens, with the
     * embedding term zeroed where noEmbed is set (position 0).
     */
    private float[] inputs(float[] H, int[] toks, int R, boolean[] noEmbed) {
        final int D = c.hidden, n = c.hcMult;
        final float eps = (float) c.rmsEps;
        float[] hn = H.clone();
        Ops.rmsNormRows(hn, R * n, D, w.hnorm, eps);
        float[] X = new float[R * n * D];
        Gemm.matmul(w.hProj, hn, R * n, X);
        float[] e = new float[R * D];
        for (int s = 0; s < R; s++) if (!noEmbed[s]) main.embed.dequantRow(toks[s], e, s * D);
        Ops.rmsNormRows(e, R, D, w.enorm, eps);
        float[] ep = new float[R * D];
        Gemm.matmul(w.eProj, e, R, ep);
        for (int s = 0; s < R; s++)
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
        public CpuMtp head() {
            return CpuMtp.this;
        }

        /** What {@link #start} refuses, without changing anything. */
        void checkStart(int[] ctx, int len) {
            if (closed) throw new IllegalStateException("MTP state is closed");
            int N = tgt.length();
            MtpHead.checkStartContext(N, ctx, len, c.slidingWindow, c.vocabSize);
            KeptStreams kept = tgt.kept;
            if (kept == null || kept.hi() < N || kept.lo() > N - 1)
                throw new IllegalStateException("the target's streams up to position " + (N - 1) + " were not kept");
        }

        /** What {@link #next} refuses, without changing anything. */
        void checkNext(int token) {
            if (closed) throw new IllegalStateException("MTP state is closed");
            if (last == null) throw new IllegalStateException("next() before start()");
            if (token < 0 || token >= c.vocabSize)
                throw new IllegalArgumentException("token id " + token + " is outside [0, " + c.vocabSize + ")");
        }

        /**
         * The first entry a start at target length N recomputes: the first entry not built from committed streams (at
         * least the last one, whose output is the first proposal), but no further back than the block's window needs
         * and the ring holds.
         */
        int startPos(int N) {
            int from = Math.min(realLen, N - 1);
            return Math.max(from, Math.max(N - c.slidingWindow, tgt.kept.lo()));
        }

        /** Moves the block's sequence to position lo (rolled back, or restarted there). */
        void moveTo(int lo) {
            int have = m.length();
            if (have > lo && have - lo <= m.rollbackable()) m.rollback(have - lo);
            else if (have != lo) m.pos.reset(lo); // positions skipped or beyond the rollback window: restart there
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
