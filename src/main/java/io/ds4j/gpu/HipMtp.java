package io.ds4j.gpu;

import io.ds4j.engine.MtpHead;
import io.ds4j.engine.MtpState;
import io.ds4j.engine.Sequence;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;

import java.util.ArrayList;
import java.util.List;

/**
 * The MTP layer on the GPU (spec 2.6), mirroring the CPU's: the block runs as a one-layer {@link HipBackend}
 * ({@link ModelConfig#mtpBlockConfig()}) on its own stream of the target's device, with the MTP's hc_head and norm, and
 * the embedding and lm_head uploaded for it (a second copy on the device). The input projections
 * {@code h_proj(hnorm(H_t,i)) + e_proj(enorm(embed(tok_{t+1})))} run on the device too
 * ({@link HipBackend#forwardMtp}); H_t comes from the target sequence's device ring of kept streams ({@link KeptRing}).
 * The steps of many states run as one batched forward ({@link #step}).
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
        return new State(seq, maxRollback + 1);
    }

    /** Device buffer of a batched step's previous streams [inCap, n·D] (grown as needed; 0 before the first). */
    private long batchIn;
    private int inCap;

    /**
     * {@inheritDoc} The steps run as one {@link HipBackend#forwardMtp} of the block over their sequences: each start's
     * kept streams and each chained step's previous output are copied into one input matrix, and the block's
     * products run over row runs chosen as for each entry alone. All checks run before any state changes.
     */
    @Override
    public synchronized float[][] step(List<Step> steps) {
        final int E = steps.size(), nD = c.hcMult * c.hidden;
        if (E == 0) return new float[0][];
        State[] st = MtpHead.checkSteps(steps, m -> m instanceof State x && x.head() == this ? x : null, (x, s) -> {
            if (s.isStart()) x.checkStart(s.ctx(), s.len());
            else x.checkNext(s.token());
        }, State[]::new);
        int[] lo = new int[E], count = new int[E];
        int R = 0;
        for (int i = 0; i < E; i++) {
            Step s = steps.get(i);
            if (s.isStart()) {
                int N = st[i].tgt.length();
                lo[i] = st[i].startPos(N);
                count[i] = N - lo[i];
            } else count[i] = 1;
            R += count[i];
        }
        if (R > inCap) { // before any state changes: running out of memory here changes nothing
            long grown = block.gpu().malloc(4L * nD * Math.max(R, 2 * inCap), "MTP batched input streams");
            if (batchIn != 0) block.gpu().free(batchIn);
            batchIn = grown;
            inCap = Math.max(R, 2 * inCap);
        }
        for (int i = 0; i < E; i++) if (steps.get(i).isStart()) st[i].moveTo(lo[i]);
        List<HipSequence> seqs = new ArrayList<>(E);
        List<int[]> toks = new ArrayList<>(E);
        boolean[] zeroFirst = new boolean[E];
        long[] last = new long[E];
        int at = 0;
        for (int i = 0; i < E; i++) {
            Step s = steps.get(i);
            State x = st[i];
            long dst = batchIn + 4L * at * nD;
            int[] t = new int[count[i]];
            if (s.isStart()) {
                for (int k = 0; k < t.length; k++) t[k] = s.ctx()[lo[i] + k + 1];
                x.kept.gather(block.gpu(), lo[i], lo[i] + t.length, dst);
                zeroFirst[i] = lo[i] == 0;
            } else {
                t[0] = s.token();
                block.gpu().copy(dst, x.last, 4L * nD); // queued before the step overwrites `last`
            }
            seqs.add(x.m);
            toks.add(t);
            last[i] = x.last;
            at += t.length;
        }
        float[][] lg = block.forwardMtp(seqs, batchIn, toks, zeroFirst, in, last);
        for (int i = 0; i < E; i++) {
            if (steps.get(i).isStart()) st[i].realLen = st[i].tgt.length();
            st[i].started = true;
        }
        return lg;
    }

    @Override
    public synchronized void close() {
        if (batchIn != 0) block.gpu().free(batchIn);
        batchIn = 0;
        inCap = 0;
        block.close();
    }

    private final class State implements MtpState {
        private final HipSequence tgt;
        private final HipSequence m;
        private final KeptRing kept;
        /** Device buffer of the block's latest output streams [n·D]. */
        private final long last;
        private int realLen;
        private boolean started, closed;

        State(HipSequence tgt, int window) {
            this.tgt = tgt;
            this.kept = tgt.kept;
            this.m = block.newSequence(window);
            int nD = c.hcMult * c.hidden;
            this.last = block.gpu().malloc(4L * nD, "MTP output streams");
        }

        @Override
        public HipMtp head() {
            return HipMtp.this;
        }

        /** What {@link #start} refuses, without changing anything. */
        void checkStart(int[] ctx, int len) {
            if (closed) throw new IllegalStateException("MTP state is closed");
            int N = tgt.length();
            MtpHead.checkStartContext(N, ctx, len, c.slidingWindow, c.vocabSize);
            if (tgt.kept != kept || kept.hi < N || kept.lo > N - 1)
                throw new IllegalStateException("the target's streams up to position " + (N - 1) + " were not kept");
            m.checkUsable();
        }

        /** What {@link #next} refuses, without changing anything. */
        void checkNext(int token) {
            if (closed) throw new IllegalStateException("MTP state is closed");
            if (!started) throw new IllegalStateException("next() before start()");
            if (token < 0 || token >= c.vocabSize)
                throw new IllegalArgumentException("token id " + token + " is outside [0, " + c.vocabSize + ")");
            m.checkUsable();
        }

        /**
         * The first entry a start at target length N recomputes: the first entry not built from committed streams (at
         * least the last one, whose output is the first proposal), but no further back than the block's window needs
         * and the ring holds.
         */
        int startPos(int N) {
            int from = Math.min(realLen, N - 1);
            return Math.max(from, Math.max(N - c.slidingWindow, kept.lo));
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
            if (tgt.kept == kept) tgt.kept = null;
            kept.free();
            block.gpu().free(last);
            m.close();
        }
    }
}
