package io.ds4j.cpu;

import io.ds4j.engine.BatchEntry;
import io.ds4j.kernels.Gemm;
import io.ds4j.kernels.VecOps;
import io.ds4j.kernels.Parallel;
import io.ds4j.kernels.Ops;
import io.ds4j.kernels.TopK;
import io.ds4j.kernels.Experts;
import io.ds4j.engine.CacheLayout;
import io.ds4j.engine.Backend;
import io.ds4j.engine.StepKind;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StateSnapshot;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.LayerProgram;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.Rope;
import io.ds4j.model.WeightMatrix;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The pure-Java DeepSeek-V4 forward (spec section 3) over the per-sequence state of section 4. It is the numeric
 * reference of ds4j: activations are fp32, the persistent MLA cache (raw window rows, compressed entries, indexer
 * keys) is F16, compressor state is fp32. Every token's result is independent of how the tokens were chunked:
 * new raw rows are rounded to F16 before any query reads them, exactly as cached rows are. The layer order is
 * {@link LayerProgram}'s; this class implements its operations on host arrays, over all rows of a batched step
 * ({@link #step}) at once where the work is row-wise.
 *
 * <p>Not thread-safe per sequence; different sequences may be stepped from different threads.
 */
public final class CpuBackend implements Backend {
    private final ModelWeights wts;
    private final ModelConfig c;
    private final Rope ropeMain, ropeCompress;

    /** @param weights loaded weights; the backend closes them in {@link #close()} */
    public CpuBackend(ModelWeights weights) {
        this.wts = weights;
        this.c = weights.config;
        this.ropeMain = Rope.main(c);
        this.ropeCompress = Rope.compress(c);
    }

    @Override
    public String name() {
        return "cpu";
    }

    @Override
    public ModelConfig config() {
        return c;
    }

    /** The weights this backend runs. */
    public ModelWeights weights() {
        return wts;
    }

    @Override
    public CpuSequence newSequence(int maxRollback) {
        return new CpuSequence(c, maxRollback);
    }

    @Override
    public boolean snapshots() {
        return true;
    }

    /** {@inheritDoc} Always: every row's numbers here are independent of the step's size (chunking is exact). */
    @Override
    public boolean prefillSplitExact(int rows, int first) {
        return first >= 1 && first < rows;
    }

    /** {@inheritDoc} Host copies of the rings; the entry stores are shared. */
    @Override
    public StateSnapshot snapshot(Sequence sequence) {
        return own(sequence).snapshot();
    }

    @Override
    public CpuSequence resume(StateSnapshot snap, int maxRollback) {
        if (!(snap instanceof CpuSequence.Snapshot s) || s.cfg != c)
            throw new IllegalArgumentException("snapshot does not belong to this backend");
        return CpuSequence.resume(s, maxRollback);
    }

    @Override
    public CpuSequence fork(Sequence src, int maxRollback) {
        CpuSequence.Snapshot s = own(src).snapshot();
        if (s.maxRollback != maxRollback) throw new IllegalArgumentException("fork needs the same rollback window");
        return CpuSequence.resume(s, maxRollback);
    }

    private CpuSequence own(Sequence sequence) {
        if (!(sequence instanceof CpuSequence seq) || seq.cfg != c)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        return seq;
    }

    @Override
    public long stateBytes(int ctx, int maxRollback) {
        return CacheLayout.stateBytes(c, ctx, maxRollback);
    }

    @Override
    public void close() {
        try {
            wts.close();
        } catch (Exception e) {
            throw new IllegalStateException("closing weights: " + e.getMessage(), e);
        }
    }

    // ------------------------------------------------------------------------------------------------------------

    @Override
    public float[] forward(Sequence sequence, int[] tokens, int off, int S, int[] logitRows) {
        return forward(sequence, tokens, off, S, logitRows, StepKind.PREFILL);
    }

    @Override
    public float[] forward(Sequence sequence, int[] tokens, int off, int S, int[] logitRows, StepKind kind) {
        own(sequence);
        Backend.checkStep(c, tokens, off, S, logitRows);
        return step(List.of(new BatchEntry(sequence, Arrays.copyOfRange(tokens, off, off + S), logitRows,
                kind == null ? StepKind.PREFILL : kind)))[0];
    }

    /**
     * {@inheritDoc} The rows of all entries run together through {@link LayerProgram}: every matrix product, the
     * MoE (routed experts grouped over the whole batch), mHC, norms and the head over all rows; attention, compressors
     * and indexer per entry. Batch invariance holds because {@link Gemm} gives row s of a product a result that depends
     * on that row only (not on the row count, the thread count or the path), and every other operation is per row or
     * per entry. All checks run before any state changes; the step kind does not change the CPU's arithmetic.
     * @throws IllegalArgumentException naming the entry: a sequence of another backend, a bad token id or logit row,
     *         a repeated sequence
     * @throws IllegalStateException naming the entry for a closed sequence
     */
    @Override
    public float[][] step(List<BatchEntry> batch) {
        for (int i = 0; i < batch.size(); i++) {
            Sequence s = batch.get(i).seq();
            if (!(s instanceof CpuSequence seq) || seq.cfg != c)
                throw new IllegalArgumentException("batch entry " + i + ": sequence does not belong to this backend");
            if (seq.closed) throw new IllegalStateException("batch entry " + i + ": sequence is closed");
        }
        Backend.checkBatch(c, batch);
        if (!Backend.anySlice(batch)) return run(new Step(batch), batch);
        List<BatchEntry> whole = batch.stream().filter(e -> e.layers() == null).toList();
        // each chunk's layer slice on its own (no other row depends on it), then the whole entries together: a slice
        // that fails leaves the whole entries as they were, so they can be stepped again alone (BatchRun)
        float[][] out = new float[batch.size()][];
        for (int i = 0; i < batch.size(); i++) if (batch.get(i).layers() != null) out[i] = runSlice(batch.get(i));
        float[][] wholeOut = whole.isEmpty() ? new float[0][] : run(new Step(whole), whole);
        for (int i = 0, w = 0; i < batch.size(); i++) if (batch.get(i).layers() == null) out[i] = wholeOut[w++];
        return out;
    }

    /** {@inheritDoc} Always: a slice's streams stay in the sequence (host memory), and each layer sees what it sees whole. */
    @Override
    public boolean layerSlices() {
        return true;
    }

    /** {@inheritDoc} Yes: the default {@link #stepArgmax} (the ids from the logits, on the host). */
    @Override
    public boolean argmaxMasks() {
        return true;
    }

    /**
     * Runs a checked entry's layer slice: from the embedding (from 0) or the streams the sequence kept, through layers
     * [from, to); then the streams stay with the sequence, or, at the last layer, the head's logits come back and the
     * chunk's tokens are appended.
     */
    private float[] runSlice(BatchEntry e) {
        CpuSequence seq = (CpuSequence) e.seq();
        BatchEntry.Layers ly = e.layers();
        Step st = new Step(List.of(e), ly.from() == 0 ? null : seq.sliceX);
        float[] X = LayerProgram.layers(st, st.embed(), ly.from(), ly.to());
        if (!ly.last(c.numLayers)) {
            seq.sliceX = X;
            seq.chunk.ranTo(e.count(), ly.to());
            return new float[0];
        }
        seq.sliceX = null;
        seq.chunk.clear();
        float[] logits = st.head(X);
        seq.pos.advance(e.count());
        return logits;
    }

    /**
     * The operations of one step over a batch ({@link LayerProgram.Ops} on host arrays): rows of entry i are
     * [first[i], first[i] + count[i]) of every activation matrix, at positions start[i] ...
     */
    private final class Step implements LayerProgram.Ops<float[]> {
        final CpuSequence[] seqs;
        final int[] first, count, start;
        final int[][] logitRows;
        /** All new token ids, entry after entry [R]. */
        final int[] toks;
        final int R;
        final float[] post, comb;

        /** Streams to start from instead of the embedding ({@link #forwardStreams}), or null. */
        final float[] given;

        Step(List<BatchEntry> batch) {
            this(batch, null);
        }

        Step(List<BatchEntry> batch, float[] given) {
            this.given = given;
            int E = batch.size();
            seqs = new CpuSequence[E];
            for (int i = 0; i < E; i++) seqs[i] = (CpuSequence) batch.get(i).seq();
            io.ds4j.engine.BatchLayout lay = new io.ds4j.engine.BatchLayout(batch);
            first = lay.first;
            count = lay.count;
            start = lay.start;
            logitRows = lay.logitRows;
            toks = lay.toks;
            R = lay.rows;
            post = new float[R * c.hcMult];
            comb = new float[R * c.hcMult * c.hcMult];
        }

        @Override
        public float[] embed() { // 3.1: every stream starts as the embedding
            if (given != null) return given;
            final int D = c.hidden, n = c.hcMult, nD = n * D;
            float[] X = new float[R * nD], row = new float[D];
            for (int s = 0; s < R; s++) {
                wts.embed.dequantRow(toks[s], row, 0);
                for (int i = 0; i < n; i++) System.arraycopy(row, 0, X, s * nD + i * D, D);
            }
            return X;
        }

        @Override
        public float[] mixPre(float[] X, int l, LayerProgram.Site site) {
            ModelWeights.Layer L = wts.layers[l];
            float[] col = new float[R * c.hidden];
            if (site == LayerProgram.Site.ATTENTION) hcPre(X, R, L.attnHcFn, L.attnHcBase, L.attnHcScale, post, comb, col);
            else hcPre(X, R, L.ffnHcFn, L.ffnHcBase, L.ffnHcScale, post, comb, col);
            return col;
        }

        @Override
        public void norm(float[] x, int l, LayerProgram.Site site) {
            ModelWeights.Layer L = wts.layers[l];
            Ops.rmsNormRows(x, R, c.hidden, site == LayerProgram.Site.ATTENTION ? L.inputNorm : L.postAttnNorm, (float) c.rmsEps);
        }

        @Override
        public float[] attention(int l, float[] x) {
            return CpuBackend.this.attention(this, l, wts.layers[l], x);
        }

        @Override
        public float[] moe(int l, float[] x) {
            return CpuBackend.this.moe(l, wts.layers[l], x, R, toks);
        }

        @Override
        public void mixPost(float[] X, float[] f) {
            hcPost(X, R, f, post, comb);
        }

        @Override
        public float[] head(float[] X) {
            int[] rows = io.ds4j.engine.BatchLayout.headRows(first, logitRows);
            // the final streams of sequences with an MTP state attached, before hc_head (the MTP's input)
            final int nD = c.hcMult * c.hidden;
            for (int i = 0; i < seqs.length; i++)
                if (seqs[i].kept != null)
                    seqs[i].kept.put(Arrays.copyOfRange(X, first[i] * nD, (first[i] + count[i]) * nD), start[i], count[i]);
            return CpuBackend.this.head(X, rows);
        }
    }

    /** 3.9: hc_head merge, final norm and lm_head for the requested rows only. */
    private float[] head(float[] X, int[] rows) {
        final int D = c.hidden, n = c.hcMult, nD = n * D, R = rows.length;
        if (R == 0) return new float[0];
        float[] v = new float[R * nD];
        for (int i = 0; i < R; i++) System.arraycopy(X, rows[i] * nD, v, i * nD, nD);
        float[] xs = v.clone();
        Ops.rmsNormRows(v, R, nD, null, (float) c.rmsEps);
        float[] mu = new float[R * n];
        Gemm.matmul(wts.hcHeadFn, v, R, mu);
        float[] y = new float[R * D];
        for (int i = 0; i < R; i++) {
            for (int k = 0; k < n; k++) {
                float pre = Ops.sigmoid(mu[i * n + k] * wts.hcHeadScale[0] + wts.hcHeadBase[k]) + (float) c.hcEps;
                for (int j = 0; j < D; j++) y[i * D + j] += pre * xs[i * nD + k * D + j];
            }
        }
        Ops.rmsNormRows(y, R, D, wts.finalNorm, (float) c.rmsEps);
        float[] logits = new float[R * c.vocabSize];
        Gemm.matmul(wts.lmHead, y, R, logits);
        return logits;
    }

    /**
     * 3.2 mHC mapping for S tokens: fills post [S, n], the Sinkhorn matrix M [S, n, n] and the collapsed input
     * Σ pre_i X_i [S, D].
     */
    private void hcPre(float[] X, int S, WeightMatrix fn, float[] base, float[] scale, float[] post, float[] comb, float[] col) {
        final int D = c.hidden, n = c.hcMult, nD = n * D, m = (2 + n) * n;
        final float eps = (float) c.hcEps;
        float[] v = X.clone();
        Ops.rmsNormRows(v, S, nD, null, (float) c.rmsEps);
        float[] mu = new float[S * m];
        Gemm.matmul(fn, v, S, mu);
        float[] pre = new float[n];
        for (int s = 0; s < S; s++) {
            int mo = s * m;
            for (int i = 0; i < n; i++) {
                pre[i] = Ops.sigmoid(scale[0] * mu[mo + i] + base[i]) + eps;
                post[s * n + i] = 2f * Ops.sigmoid(scale[1] * mu[mo + n + i] + base[n + i]);
            }
            int co = s * n * n;
            for (int j = 0; j < n; j++) {
                float mx = Float.NEGATIVE_INFINITY;
                for (int k = 0; k < n; k++) {
                    float v2 = scale[2] * mu[mo + 2 * n + j * n + k] + base[2 * n + j * n + k];
                    comb[co + j * n + k] = v2;
                    mx = Math.max(mx, v2);
                }
                float sum = 0;
                for (int k = 0; k < n; k++) {
                    float e = (float) Math.exp(comb[co + j * n + k] - mx);
                    comb[co + j * n + k] = e;
                    sum += e;
                }
                for (int k = 0; k < n; k++) comb[co + j * n + k] = comb[co + j * n + k] / sum + eps;
            }
            normCols(comb, co, n, eps);
            for (int it = 1; it < c.sinkhornIters; it++) {
                for (int j = 0; j < n; j++) {
                    float sum = 0;
                    for (int k = 0; k < n; k++) sum += comb[co + j * n + k];
                    for (int k = 0; k < n; k++) comb[co + j * n + k] /= (sum + eps);
                }
                normCols(comb, co, n, eps);
            }
            // col = 0 + pre_0 X_0 + pre_1 X_1 + ..., element by element in stream order
            int xo = s * nD;
            Arrays.fill(col, s * D, s * D + D, 0f);
            for (int i = 0; i < n; i++) VecOps.addProduct(pre[i], X, xo + i * D, col, s * D, D);
        }
    }

    private static void normCols(float[] M, int co, int n, float eps) {
        for (int k = 0; k < n; k++) {
            float sum = 0;
            for (int j = 0; j < n; j++) sum += M[co + j * n + k];
            for (int j = 0; j < n; j++) M[co + j * n + k] /= (sum + eps);
        }
    }

    /** 3.2 stream update: X'_k = post_k · f + Σ_j M_jk X_j. */
    private void hcPost(float[] X, int S, float[] f, float[] post, float[] comb) {
        final int D = c.hidden, n = c.hcMult, nD = n * D;
        float[] nx = new float[nD];
        for (int s = 0; s < S; s++) {
            int xo = s * nD, co = s * n * n;
            for (int k = 0; k < n; k++) { // element by element: post_k f, then + M_jk X_j for j in order
                VecOps.scale(post[s * n + k], f, s * D, nx, k * D, D);
                for (int j = 0; j < n; j++) VecOps.addProduct(comb[co + j * n + k], X, xo + j * D, nx, k * D, D);
            }
            System.arraycopy(nx, 0, X, xo, nD);
        }
    }

    // ------------------------------------------------------------------------------------------------------------
    // 3.4–3.7 attention

    /**
     * 3.4-3.7 over a batch: the projections of x [R, D] (query latent, shared kv, compressor and indexer inputs, then
     * the queries) and the output projection run over all rows; the rest per entry ({@link #attendEntry}).
     */
    private float[] attention(Step b, int l, ModelWeights.Layer L, float[] x) {
        final int D = c.hidden, H = c.numHeads, d = c.headDim, R = b.R;
        final float eps = (float) c.rmsEps;
        final AttentionKind kind = c.layerTypes[l];
        // every projection of x as one batch, then every projection of the query latent: in decode each batch is one
        // hand-off to the worker pool
        float[] ql = new float[R * c.qLoraRank], kv = new float[R * d];
        ModelWeights.Compressor cw = kind != AttentionKind.SLIDING ? L.compressor : null;
        ModelWeights.Indexer ix = kind == AttentionKind.CSA ? L.indexer : null;
        // the compressors' value and gate rows per token, 2d wide in a CSA layer (its windows overlap: width 2m, stride m)
        int compressorWidth = cw == null ? 0 : kind == AttentionKind.CSA ? 2 * d : d;
        int indexerWidth = ix == null ? 0 : 2 * c.indexHeadDim;
        float[] ca = new float[R * compressorWidth], cz = new float[R * compressorWidth];
        float[] ia = new float[R * indexerWidth], iz = new float[R * indexerWidth];
        float[] wt = new float[ix == null ? 0 : R * c.indexHeads];
        float[] qi = new float[ix == null ? 0 : R * c.indexHeads * c.indexHeadDim];
        List<WeightMatrix> projections = new ArrayList<>(List.of(L.qA, L.kv));
        List<float[]> outputs = new ArrayList<>(List.of(ql, kv));
        if (cw != null) {
            projections.addAll(List.of(cw.kvProj, cw.gateProj));
            outputs.addAll(List.of(ca, cz));
        }
        if (ix != null) {
            projections.addAll(List.of(ix.compressor.kvProj, ix.compressor.gateProj, ix.weightsProj));
            outputs.addAll(List.of(ia, iz, wt));
        }
        float[][] inputs = new float[projections.size()][];
        Arrays.fill(inputs, x);
        Gemm.matmuls(R, projections.toArray(WeightMatrix[]::new), inputs, outputs.toArray(float[][]::new));
        // 1. query latent, 2. queries
        Ops.rmsNormRows(ql, R, c.qLoraRank, L.qANorm, eps);
        float[] q = new float[R * H * d];
        if (ix != null) Gemm.matmuls(R, new WeightMatrix[]{L.qB, ix.qB}, new float[][]{ql, ql}, new float[][]{q, qi});
        else Gemm.matmul(L.qB, ql, R, q);
        // per entry at its positions: norms, RoPE, compressors, indexer and the keys; then the queries of every entry
        // in one hand-off to the worker pool (each query's numbers are its own); then the entries' caches
        final int E = b.seqs.length;
        EntryKeys[] ek = new EntryKeys[E];
        int[] base = new int[E + 1];
        int keys = 0;
        for (int e = 0; e < E; e++) {
            int r0 = b.first[e], S = b.count[e];
            ek[e] = attendEntry(b.seqs[e], l, L, slice(q, r0, S, H * d), slice(kv, r0, S, d), slice(ca, r0, S, compressorWidth),
                    slice(cz, r0, S, compressorWidth), slice(ia, r0, S, indexerWidth), slice(iz, r0, S, indexerWidth), slice(wt, r0, S, ix == null ? 0 : c.indexHeads),
                    slice(qi, r0, S, ix == null ? 0 : c.indexHeads * c.indexHeadDim), S, b.start[e]);
            base[e + 1] = base[e] + S * H;
            keys = Math.max(keys, c.slidingWindow + ek[e].nEnt + 1);
        }
        final int maxKeys = keys;
        Parallel.forRange(base[E], 1, (lo, hi) -> {
            float[] lg = new float[maxKeys], d4 = new float[4];
            int[] idx = new int[maxKeys];
            int e = 0;
            for (int g = lo; g < hi; g++) {
                while (g >= base[e + 1]) e++;
                query(ek[e], L, g - base[e], lg, d4, idx);
            }
        });
        float[] o = new float[R * H * d];
        for (int e = 0; e < E; e++) {
            finish(ek[e]);
            System.arraycopy(ek[e].o, 0, o, b.first[e] * H * d, b.count[e] * H * d);
        }
        // 7. grouped output projection
        final int G = c.oGroups, Rk = c.oLoraRank, gw = H * d / G;
        float[] y = new float[R * G * Rk];
        if (R == 1) { // group g reads o[g·gw ..] and writes y[g·Rk ..]: all groups in one batch
            WeightMatrix[] wg = new WeightMatrix[G];
            float[][] xg = new float[G][], yg = new float[G][];
            int[] xo = new int[G], yo = new int[G];
            for (int g = 0; g < G; g++) {
                wg[g] = L.oA.rowRange(g * Rk, (g + 1) * Rk);
                xg[g] = o;
                xo[g] = g * gw;
                yg[g] = y;
                yo[g] = g * Rk;
            }
            Gemm.matvecs(wg, xg, xo, yg, yo);
        } else {
            float[] u = new float[R * gw], yg = new float[R * Rk];
            for (int g = 0; g < G; g++) {
                for (int s = 0; s < R; s++) System.arraycopy(o, s * H * d + g * gw, u, s * gw, gw);
                Gemm.matmul(L.oA.rowRange(g * Rk, (g + 1) * Rk), u, R, yg);
                for (int s = 0; s < R; s++) System.arraycopy(yg, s * Rk, y, s * G * Rk + g * Rk, Rk);
            }
        }
        float[] out = new float[R * D];
        Gemm.matmul(L.oB, y, R, out);
        return out;
    }

    /** Rows [r0, r0 + S) of a row-major matrix of width w. */
    private static float[] slice(float[] a, int r0, int S, int w) {
        return Arrays.copyOfRange(a, r0 * w, (r0 + S) * w);
    }

    /**
     * 3.4-3.7 for one entry of S rows at positions N0 ..: given its projections (queries q [S, H·d], shared kv [S, d],
     * compressor inputs ca, cz [S, cw], indexer inputs ia, iz [S, cw_I], head weights wt [S, HI], indexer queries
     * qi [S, HI·dI]), normalises and rotates the queries and kv, runs the compressors and the indexer and gathers the
     * keys its queries attend; {@link #query} and {@link #finish} do the rest.
     */
    private EntryKeys attendEntry(CpuSequence seq, int l, ModelWeights.Layer L, float[] q, float[] kv, float[] ca, float[] cz,
                                float[] ia, float[] iz, float[] wt, float[] qi, int S, int N0) {
        final int H = c.numHeads, d = c.headDim, W = c.slidingWindow;
        final float eps = (float) c.rmsEps;
        final AttentionKind kind = c.layerTypes[l];
        final Rope P = kind == AttentionKind.SLIDING ? ropeMain : ropeCompress;
        CpuSequence.LayerState st = seq.layers[l];
        final int half = c.ropeDim / 2;
        float[] cosT = new float[S * half], sinT = new float[S * half];
        for (int s = 0; s < S; s++) {
            float[] cs = new float[half], sn = new float[half];
            P.angles(N0 + s, cs, sn);
            System.arraycopy(cs, 0, cosT, s * half, half);
            System.arraycopy(sn, 0, sinT, s * half, half);
        }
        float[] cs = new float[half], sn = new float[half];
        for (int s = 0; s < S; s++) {
            System.arraycopy(cosT, s * half, cs, 0, half);
            System.arraycopy(sinT, s * half, sn, 0, half);
            for (int h = 0; h < H; h++) {
                int o = (s * H + h) * d;
                Ops.rmsNorm(q, o, d, null, eps);
                P.apply(q, o, d, cs, sn, false);
            }
        }
        // 3. shared kv, rounded to F16 as stored
        for (int s = 0; s < S; s++) {
            Ops.rmsNorm(kv, s * d, d, L.kvNorm, eps);
            System.arraycopy(cosT, s * half, cs, 0, half);
            System.arraycopy(sinT, s * half, sn, 0, half);
            P.apply(kv, s * d, d, cs, sn, false);
        }
        for (int i = 0; i < kv.length; i++) kv[i] = Ops.f16(kv[i]);

        // 4. compressors (entries become visible by the per-query threshold below)
        if (st.comp != null) compress(st.comp, L.compressor, ca, cz, S, N0);
        int[][] selected = null;
        if (st.index != null) {
            compress(st.index, L.indexer.compressor, ia, iz, S, N0);
            selected = indexerSelect(st.index, qi, wt, S, N0, cosT, sinT);
        }

        // 5. attention over [raw window ‖ compressed entries] with the sink
        int firstRaw = Math.max(0, N0 - (W - 1));
        int nRaw = N0 + S - firstRaw;
        float[] rawK = new float[nRaw * d];
        for (int p = firstRaw; p < N0 + S; p++) {
            int dst = (p - firstRaw) * d;
            if (p >= N0) System.arraycopy(kv, (p - N0) * d, rawK, dst, d);
            else {
                int src = (p % st.winCap) * d;
                f16ToF32(st.win, src, rawK, dst, d);
            }
        }
        // compressed entries as F32: HCA queries attend every visible entry; CSA queries only the ones the indexer
        // selected, so only those are converted (packed, in first-use order; slot maps entry -> packed row)
        int nEnt = st.comp == null ? 0 : st.comp.count;
        int[] slot = null;
        float[] entK;
        if (kind == AttentionKind.CSA) {
            slot = new int[nEnt];
            Arrays.fill(slot, -1);
            int used = 0;
            for (int[] ss : selected) for (int w : ss) if (slot[w] < 0) slot[w] = used++;
            entK = new float[used * d];
            for (int w = 0; w < nEnt; w++)
                if (slot[w] >= 0) f16ToF32(st.comp.entries(), w * d, entK, slot[w] * d, d);
        } else {
            entK = new float[nEnt * d];
            if (nEnt > 0) f16ToF32(st.comp.entries(), 0, entK, 0, nEnt * d);
        }

        return new EntryKeys(st, kind, P, S, N0, q, kv, new float[S * H * d], rawK, entK, firstRaw, selected, slot,
                st.comp == null ? 0 : st.comp.m, nEnt, cosT, sinT);
    }

    /**
     * One entry's attention inputs for a layer, from {@link #attendEntry}: its queries q [S, H·d] (normalised,
     * rotated), new kv rows [S, d] (F16-rounded), the attended keys as F32 (raw window rows from position firstRaw,
     * compressed entries: all for HCA, the selected ones packed by slot for CSA), and the output o [S, H·d].
     */
    private record EntryKeys(CpuSequence.LayerState st, AttentionKind kind, Rope P, int S, int N0, float[] q, float[] kv,
                             float[] o, float[] rawK, float[] entK, int firstRaw, int[][] sel, int[] entSlot, int m, int nEnt,
                             float[] cosT, float[] sinT) {}

    /**
     * 3.7 for one query head sh = s·H + h of an entry: its keys (raw window rows, then the visible or selected
     * compressed entries), softmax with the sink, and o[s, h] = Σ p_i V_i. lg, d4 and idx are scratch.
     */
    private void query(EntryKeys k, ModelWeights.Layer L, int sh, float[] lg, float[] d4, int[] idx) {
        final int H = c.numHeads, d = c.headDim, W = c.slidingWindow;
        final float scale = (float) (1.0 / Math.sqrt(d));
        int s = sh / H, h = sh % H, t = k.N0 + s;
        int qo = (s * H + h) * d;
        int cnt = 0;
        for (int p = Math.max(0, t - W + 1); p <= t; p++) idx[cnt++] = p - k.firstRaw;
        int rawCnt = cnt;
        if (k.kind == AttentionKind.HCA) {
            int vis = (t + 1) / k.m;
            for (int w = 0; w < vis; w++) idx[cnt++] = w;
        } else if (k.kind == AttentionKind.CSA) {
            for (int w : k.sel[s]) idx[cnt++] = k.entSlot[w];
        }
        float mx = Math.max(L.sinks[h], scores(k.q, qo, k.rawK, idx, 0, rawCnt, d, scale, lg, d4));
        mx = Math.max(mx, scores(k.q, qo, k.entK, idx, rawCnt, cnt, d, scale, lg, d4));
        float sum = (float) Math.exp(L.sinks[h] - mx);
        for (int i = 0; i < cnt; i++) {
            lg[i] = (float) Math.exp(lg[i] - mx);
            sum += lg[i];
        }
        float inv = 1f / sum;
        for (int i = 0; i < cnt; i++) lg[i] *= inv;
        values(lg, k.rawK, idx, 0, rawCnt, d, k.o, qo);
        values(lg, k.entK, idx, rawCnt, cnt, d, k.o, qo);
    }

    /** 3.7 step 6 and the cache of one entry: de-rotation of o at the query positions, the new raw rows into the ring. */
    private void finish(EntryKeys k) {
        final int H = c.numHeads, d = c.headDim, half = c.ropeDim / 2, S = k.S, N0 = k.N0;
        float[] cs = new float[half], sn = new float[half];
        for (int s = 0; s < S; s++) {
            System.arraycopy(k.cosT, s * half, cs, 0, half);
            System.arraycopy(k.sinT, s * half, sn, 0, half);
            for (int h = 0; h < H; h++) k.P.apply(k.o, (s * H + h) * d, d, cs, sn, true);
        }
        // keep the newest raw rows in the ring (after all queries of this step have read them)
        CpuSequence.LayerState st = k.st;
        for (int p = Math.max(N0, N0 + S - st.winCap); p < N0 + S; p++) {
            int dst = (p % st.winCap) * d;
            for (int i = 0; i < d; i++) st.win[dst + i] = Float.floatToFloat16(k.kv[(p - N0) * d + i]);
        }
    }

    private static float dot(float[] a, int ao, float[] b, int bo, int n) {
        return VecOps.dot(a, ao, b, bo, n);
    }

    /**
     * Attention logits lg[i] = dot(q[qo .. qo+d), K[idx[i]·d ..]) · scale for i in [from, to), four keys at a time
     * (the same values as one {@link VecOps#dot} per key); returns their maximum (−∞ when the range is empty).
     */
    private static float scores(float[] q, int qo, float[] K, int[] idx, int from, int to, int d, float scale,
                                float[] lg, float[] d4) {
        float mx = Float.NEGATIVE_INFINITY;
        int i = from;
        for (; i + 4 <= to; i += 4) {
            VecOps.dot4(q, qo, K, idx[i] * d, idx[i + 1] * d, idx[i + 2] * d, idx[i + 3] * d, d, d4);
            for (int j = 0; j < 4; j++) {
                lg[i + j] = d4[j] * scale;
                mx = Math.max(mx, lg[i + j]);
            }
        }
        for (; i < to; i++) {
            lg[i] = dot(q, qo, K, idx[i] * d, d) * scale;
            mx = Math.max(mx, lg[i]);
        }
        return mx;
    }

    /** dst[dOff + i] = the F16 value src[sOff + i] as F32 (exact), i in [0, n). */
    private static void f16ToF32(short[] src, int sOff, float[] dst, int dOff, int n) {
        for (int i = 0; i < n; i++) dst[dOff + i] = Float.float16ToFloat(src[sOff + i]);
    }

    /**
     * Attention output o[oo .. oo+d) += Σ_i p[i] · V[idx[i]·d ..] for i in [from, to), keys in order, four at a
     * time with {@link VecOps#axpy4} (the same values as one {@link VecOps#axpy} per key, in order).
     */
    private static void values(float[] p, float[] V, int[] idx, int from, int to, int d, float[] o, int oo) {
        int i = from;
        for (; i + 4 <= to; i += 4)
            VecOps.axpy4(p[i], p[i + 1], p[i + 2], p[i + 3], V, idx[i] * d, idx[i + 1] * d, idx[i + 2] * d,
                    idx[i + 3] * d, o, oo, d);
        for (; i < to; i++) VecOps.axpy(p[i], V, idx[i] * d, o, oo, d);
    }

    /**
     * 3.5 compressor step: appends the S new tokens' raw (a, z) rows to the ring and emits an entry for every window
     * that completes, in position order (so a window never needs more than the last 2m rows of the ring).
     * a and z [S, cw] are the new tokens' kv and gate projections (W.kvProj and W.gateProj of the layer input).
     */
    private void compress(CpuSequence.CompressorState cs, ModelWeights.Compressor W, float[] a, float[] z, int S, int N0) {
        final int cw = cs.cw, w = cs.w, m = cs.m;
        float[] pooled = new float[w];
        float[] cos = new float[c.ropeDim / 2], sin = new float[c.ropeDim / 2];
        for (int s = 0; s < S; s++) {
            int p = N0 + s;
            int slot = (p % cs.cap) * cw;
            System.arraycopy(a, s * cw, cs.ringA, slot, cw);
            System.arraycopy(z, s * cw, cs.ringZ, slot, cw);
            if ((p + 1) % m != 0) continue;
            int win = p / m;
            // pool: per channel softmax over the slots (2m with overlap, m for entry 0 or without overlap)
            for (int ch = 0; ch < w; ch++) {
                float mx = Float.NEGATIVE_INFINITY;
                int prevStart = (win - 1) * m, curStart = win * m;
                boolean hasPrev = cs.overlap && win > 0;
                int vOff = cs.overlap ? w : 0; // Cb is the second half with overlap
                if (hasPrev) for (int j = 0; j < m; j++) mx = Math.max(mx, logit(cs, W, prevStart + j, j, ch));
                for (int j = 0; j < m; j++) mx = Math.max(mx, logit(cs, W, curStart + j, j, vOff + ch));
                float sum = 0, acc = 0;
                if (hasPrev) for (int j = 0; j < m; j++) {
                    float e = (float) Math.exp(logit(cs, W, prevStart + j, j, ch) - mx);
                    sum += e;
                    acc += e * cs.ringA[((prevStart + j) % cs.cap) * cw + ch];
                }
                for (int j = 0; j < m; j++) {
                    float e = (float) Math.exp(logit(cs, W, curStart + j, j, vOff + ch) - mx);
                    sum += e;
                    acc += e * cs.ringA[((curStart + j) % cs.cap) * cw + vOff + ch];
                }
                pooled[ch] = acc / sum;
            }
            Ops.rmsNorm(pooled, 0, w, W.norm, (float) c.rmsEps);
            ropeCompress.angles((long) win * m, cos, sin);
            ropeCompress.apply(pooled, 0, w, cos, sin, false);
            cs.ensure(win + 1);
            for (int ch = 0; ch < w; ch++) cs.log.rows[win * w + ch] = Float.floatToFloat16(pooled[ch]);
            cs.count = win + 1;
        }
    }

    /** Biased pooling logit of position p, slot j, channel ch of the (a, z) row (spec 3.5: bias on z, never on a). */
    private static float logit(CpuSequence.CompressorState cs, ModelWeights.Compressor W, int p, int j, int ch) {
        return cs.ringZ[(p % cs.cap) * cs.cw + ch] + W.positionBias[j * cs.cw + ch];
    }

    /**
     * 3.6 Lightning Indexer: for each new query, the compressed entries it attends (all available ones when there
     * are at most K_I, else the top K_I by score; ties go to the lower entry index). qi [S, HI·dI]: the indexer
     * queries (indexer.qB of the query latent; rotated here, in place); wt [S, HI]: the head weights
     * (indexer.weightsProj of the layer input).
     */
    private int[][] indexerSelect(CpuSequence.CompressorState ix, float[] qi, float[] wt, int S, int N0,
                                  float[] cosT, float[] sinT) {
        final int HI = c.indexHeads, dI = c.indexHeadDim, K = c.indexTopk, m = ix.m, half = c.ropeDim / 2;
        float[] cs = new float[half], sn = new float[half];
        for (int s = 0; s < S; s++) {
            System.arraycopy(cosT, s * half, cs, 0, half);
            System.arraycopy(sinT, s * half, sn, 0, half);
            for (int h = 0; h < HI; h++) ropeCompress.apply(qi, (s * HI + h) * dI, dI, cs, sn, false);
        }
        int total = ix.count;
        float[] keys = new float[total * dI];
        for (int i = 0; i < keys.length; i++) keys[i] = Float.float16ToFloat(ix.log.rows[i]);
        final float wScale = (float) (1.0 / Math.sqrt(HI)), sScale = (float) (1.0 / Math.sqrt(dI));
        int[][] sel = new int[S][];
        if (S == 1) { // decode: the entries' scores in parallel
            int avail = (N0 + 1) / m;
            if (avail <= K) sel[0] = iota(avail);
            else {
                float[] score = new float[avail];
                Parallel.forRange(avail, 8, (lo, hi) -> {
                    float[] d4 = new float[4];
                    for (int e = lo; e < hi; e++) score[e] = indexScore(qi, wt, keys, 0, e, HI, dI, wScale, sScale, d4);
                });
                sel[0] = TopK.select(score, avail, K);
            }
            return sel;
        }
        Parallel.forRange(S, 1, (lo, hi) -> {
            float[] d4 = new float[4];
            for (int s = lo; s < hi; s++) {
                int avail = (N0 + s + 1) / m;
                if (avail <= K) {
                    sel[s] = iota(avail);
                    continue;
                }
                float[] score = new float[avail];
                for (int e = 0; e < avail; e++) score[e] = indexScore(qi, wt, keys, s, e, HI, dI, wScale, sScale, d4);
                sel[s] = TopK.select(score, avail, K);
            }
        });
        return sel;
    }

    /** 0, 1, .., n−1. */
    private static int[] iota(int n) {
        int[] all = new int[n];
        for (int i = 0; i < n; i++) all[i] = i;
        return all;
    }

    /**
     * 3.6 index score of entry e for query s: Σ_h (w[s, h]·wScale) · max(qi[s, h] · key_e, 0) · sScale, heads in
     * order; the head dot products are taken four at a time (same values as one {@link VecOps#dot} each).
     */
    private static float indexScore(float[] qi, float[] wt, float[] keys, int s, int e, int HI, int dI,
                                    float wScale, float sScale, float[] d4) {
        float acc = 0;
        int h = 0, qo = s * HI * dI, ko = e * dI;
        for (; h + 4 <= HI; h += 4) {
            VecOps.dot4(keys, ko, qi, qo + h * dI, qo + (h + 1) * dI, qo + (h + 2) * dI, qo + (h + 3) * dI, dI, d4);
            for (int j = 0; j < 4; j++) acc += (wt[s * HI + h + j] * wScale) * Math.max(d4[j], 0f) * sScale;
        }
        for (; h < HI; h++) {
            float dt = dot(qi, qo + h * dI, keys, ko, dI);
            acc += (wt[s * HI + h] * wScale) * Math.max(dt, 0f) * sScale;
        }
        return acc;
    }

    // ------------------------------------------------------------------------------------------------------------
    // 3.8 MoE

    private float[] moe(int l, ModelWeights.Layer L, float[] h, int S, int[] toks) {
        final int D = c.hidden, E = c.numExperts, k = c.expertsPerToken, I = c.moeInter;
        final float lim = (float) c.swigluLimit;
        float[] lam = new float[S * E];
        Gemm.matmul(L.gate, h, S, lam);
        int[] ids = new int[S * k];
        float[] routeWeights = new float[S * k];
        float[] sc = new float[E], biased = new float[E];
        for (int s = 0; s < S; s++) {
            for (int e = 0; e < E; e++) sc[e] = Ops.sqrtSoftplus(lam[s * E + e]);
            int[] pick;
            if (c.hashMoe[l]) pick = Arrays.copyOfRange(L.tid2eid, toks[s] * k, toks[s] * k + k);
            else {
                for (int e = 0; e < E; e++) biased[e] = sc[e] + L.gateBias[e];
                pick = TopK.select(biased, E, k);
            }
            float sum = 0;
            for (int j = 0; j < k; j++) sum += sc[pick[j]];
            for (int j = 0; j < k; j++) {
                ids[s * k + j] = pick[j];
                routeWeights[s * k + j] = sc[pick[j]] / (sum + 1e-20f) * (float) c.routedScaling;
            }
        }
        float[] out = new float[S * D];
        // routed experts in ascending id; each expert runs once on the tokens routed to it, then the shared expert
        int[] active = new int[Math.min(E, S * k)];
        int[][] rowsOf = new int[active.length][];
        float[][] wOf = new float[active.length][];
        int na = 0;
        for (int e = 0; e < E; e++) {
            int cnt = 0;
            for (int i = 0; i < S * k; i++) if (ids[i] == e) cnt++;
            if (cnt == 0) continue;
            int[] rs = new int[cnt];
            float[] ws = new float[cnt];
            cnt = 0;
            for (int s = 0; s < S; s++)
                for (int j = 0; j < k; j++)
                    if (ids[s * k + j] == e) {
                        rs[cnt] = s;
                        ws[cnt++] = routeWeights[s * k + j];
                    }
            active[na] = e;
            rowsOf[na] = rs;
            wOf[na++] = ws;
        }
        if (S <= Gemm.FEW_TOKENS) {
            // decode (one sequence or a batch of a few rows): one product per (expert, row) pick and per row of the
            // shared expert, every w1/w3 in one batch and every w2 in another, so each is one hand-off to the worker
            // pool; products are matrix-vector products, whose numbers are those of any other path (Gemm)
            int picks = 0;
            for (int a = 0; a < na; a++) picks += rowsOf[a].length;
            int np = picks + S;
            WeightMatrix[] w1 = new WeightMatrix[np], w3 = new WeightMatrix[np], w2 = new WeightMatrix[np];
            float[][] hin = new float[np][];
            int[] rows = new int[np];
            Arrays.fill(rows, 1);
            int p = 0;
            for (int a = 0; a < na; a++)
                for (int r : rowsOf[a]) {
                    w1[p] = L.w1[active[a]];
                    w3[p] = L.w3[active[a]];
                    w2[p] = L.w2[active[a]];
                    hin[p++] = Arrays.copyOfRange(h, r * D, r * D + D);
                }
            for (int s = 0; s < S; s++, p++) {
                w1[p] = L.sharedW1;
                w3[p] = L.sharedW3;
                w2[p] = L.sharedW2;
                hin[p] = Arrays.copyOfRange(h, s * D, s * D + D);
            }
            float[][] y = Experts.run(w1, w3, w2, hin, rows, I, lim);
            p = 0;
            for (int a = 0; a < na; a++) // routed experts in ascending id, then the shared one, per row
                for (int i = 0; i < rowsOf[a].length; i++, p++)
                    addRouted(out, y[p], new int[]{rowsOf[a][i]}, new float[]{wOf[a][i]}, D);
            for (int s = 0; s < S; s++, p++)
                for (int d = 0; d < D; d++) out[s * D + d] += y[p][d];
        } else {
            // one expert at a time, so a long prefill chunk holds the intermediates of one expert only
            for (int a = 0; a < na; a++) {
                int e = active[a];
                float[] y = Experts.run(new WeightMatrix[]{L.w1[e]}, new WeightMatrix[]{L.w3[e]}, new WeightMatrix[]{L.w2[e]},
                        new float[][]{gather(h, rowsOf[a], D)}, new int[]{rowsOf[a].length}, I, lim)[0];
                addRouted(out, y, rowsOf[a], wOf[a], D);
            }
            float[] sh = Experts.run(new WeightMatrix[]{L.sharedW1}, new WeightMatrix[]{L.sharedW3}, new WeightMatrix[]{L.sharedW2},
                    new float[][]{h}, new int[]{S}, I, lim)[0];
            for (int i = 0; i < S * D; i++) out[i] += sh[i];
        }
        return out;
    }


    /** Rows rs of h [*, D], packed. */
    private static float[] gather(float[] h, int[] rs, int D) {
        float[] g = new float[rs.length * D];
        for (int i = 0; i < rs.length; i++) System.arraycopy(h, rs[i] * D, g, i * D, D);
        return g;
    }

    /** out[rs[i], :] += wt[i] · y[i, :] (y [rs.length, D]). */
    private static void addRouted(float[] out, float[] y, int[] rs, float[] wt, int D) {
        for (int i = 0; i < rs.length; i++) {
            int so = rs[i] * D;
            float wgt = wt[i];
            for (int d = 0; d < D; d++) out[so + d] += wgt * y[i * D + d];
        }
    }

    // ------------------------------------------------------------------------------------------------------------
    // MTP layer

    private CpuMtp mtpHead;

    /** {@inheritDoc} The MTP block runs as a one-layer model on this backend's kernels ({@link CpuMtp}). */
    @Override
    public synchronized io.ds4j.engine.MtpHead mtp() {
        if (wts.mtp == null) throw new IllegalStateException("no usable MTP layer: "
                + (wts.mtpProblem != null ? wts.mtpProblem : "these weights were built without one"));
        if (mtpHead == null) mtpHead = new CpuMtp(this);
        return mtpHead;
    }

    /**
     * The decoder layers run on given streams instead of the embedding (the MTP block, whose input streams are its
     * projections of the target's state and of the next token), over a batch: X [R, n·D] (the rows of all entries,
     * entry after entry) goes in and holds the final streams afterwards ({@link LayerProgram} updates them in place),
     * each entry's tokens are appended to its sequence, and the logits of its requested rows come back. Batch invariant
     * as {@link #step} is.
     * @param batch entries whose tokens are the token id of each row (read by hash-routed layers only)
     * @return per entry, its logits [logitRows.length, V]
     */
    float[][] forwardStreams(List<BatchEntry> batch, float[] X) {
        for (int i = 0; i < batch.size(); i++) {
            if (!(batch.get(i).seq() instanceof CpuSequence seq) || seq.cfg != c)
                throw new IllegalArgumentException("batch entry " + i + ": sequence does not belong to this backend");
            if (seq.closed) throw new IllegalStateException("batch entry " + i + ": sequence is closed");
        }
        Backend.checkBatch(c, batch);
        Step st = new Step(batch, X);
        if (X.length != st.R * c.hcMult * c.hidden)
            throw new IllegalArgumentException("streams of " + X.length + " floats for " + st.R + " rows");
        return run(st, batch);
    }

    /** Runs a checked step's layers, then splits the logits rows per entry and advances each entry's positions. */
    private float[][] run(Step st, List<BatchEntry> batch) {
        float[] logits = LayerProgram.run(st, c.numLayers);
        float[][] out = new float[batch.size()][];
        int at = 0;
        for (int i = 0; i < batch.size(); i++) {
            int n = batch.get(i).logitRows().length * c.vocabSize;
            out[i] = Arrays.copyOfRange(logits, at, at + n);
            at += n;
            st.seqs[i].pos.advance(st.count[i]);
        }
        return out;
    }
}
