package io.ds4j.cpu;

import io.ds4j.engine.CacheLayout;
import io.ds4j.engine.Backend;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StateSnapshot;
import io.ds4j.model.AttentionKind;
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
 * new raw rows are rounded to F16 before any query reads them, exactly as cached rows are.
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
        if (!(sequence instanceof CpuSequence seq) || seq.cfg != c)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        if (seq.closed) throw new IllegalStateException("sequence is closed");
        Backend.checkStep(c, tokens, off, S, logitRows);
        final int D = c.hidden, n = c.hcMult, nD = n * D;
        final int N0 = seq.pos.length();

        // 3.1: every stream starts as the embedding.
        float[] X = new float[S * nD];
        float[] row = new float[D];
        for (int s = 0; s < S; s++) {
            wts.embed.dequantRow(tokens[off + s], row, 0);
            for (int i = 0; i < n; i++) System.arraycopy(row, 0, X, s * nD + i * D, D);
        }
        int[] toks = Arrays.copyOfRange(tokens, off, off + S);
        float[] post = new float[S * n], comb = new float[S * n * n], col = new float[S * D];
        for (int l = 0; l < c.numLayers; l++) {
            ModelWeights.Layer L = wts.layers[l];
            // 3.3 attention site
            hcPre(X, S, L.attnHcFn, L.attnHcBase, L.attnHcScale, post, comb, col);
            Ops.rmsNormRows(col, S, D, L.inputNorm, (float) c.rmsEps);
            float[] a = attention(seq, l, L, col, S, N0);
            hcPost(X, S, a, post, comb);
            // 3.3 MoE site
            hcPre(X, S, L.ffnHcFn, L.ffnHcBase, L.ffnHcScale, post, comb, col);
            Ops.rmsNormRows(col, S, D, L.postAttnNorm, (float) c.rmsEps);
            float[] f = moe(l, L, col, S, toks);
            hcPost(X, S, f, post, comb);
        }
        if (seq.kept != null) seq.kept.put(X, N0, S);
        seq.pos.advance(S);
        return head(X, logitRows);
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

    private float[] attention(CpuSequence seq, int l, ModelWeights.Layer L, float[] x, int S, int N0) {
        final int D = c.hidden, H = c.numHeads, d = c.headDim, W = c.slidingWindow;
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

        // every projection of x (query latent, shared kv, compressor and indexer inputs) as one batch, then every
        // projection of the query latent: in decode each batch is one hand-off to the worker pool
        float[] ql = new float[S * c.qLoraRank], kv = new float[S * d];
        ModelWeights.Compressor cw = st.comp != null ? L.compressor : null;
        ModelWeights.Indexer ix = st.index != null ? L.indexer : null;
        int cwc = cw == null ? 0 : st.comp.cw, iwc = ix == null ? 0 : st.index.cw;
        float[] ca = new float[S * cwc], cz = new float[S * cwc], ia = new float[S * iwc], iz = new float[S * iwc];
        float[] wt = new float[ix == null ? 0 : S * c.indexHeads];
        float[] qi = new float[ix == null ? 0 : S * c.indexHeads * c.indexHeadDim];
        List<WeightMatrix> pw = new ArrayList<>(List.of(L.qA, L.kv));
        List<float[]> py = new ArrayList<>(List.of(ql, kv));
        if (cw != null) {
            pw.addAll(List.of(cw.kvProj, cw.gateProj));
            py.addAll(List.of(ca, cz));
        }
        if (ix != null) {
            pw.addAll(List.of(ix.compressor.kvProj, ix.compressor.gateProj, ix.weightsProj));
            py.addAll(List.of(ia, iz, wt));
        }
        float[][] px = new float[pw.size()][];
        Arrays.fill(px, x);
        Gemm.matmuls(S, pw.toArray(WeightMatrix[]::new), px, py.toArray(float[][]::new));
        // 1. query latent, 2. queries
        Ops.rmsNormRows(ql, S, c.qLoraRank, L.qANorm, eps);
        float[] q = new float[S * H * d];
        if (ix != null) Gemm.matmuls(S, new WeightMatrix[]{L.qB, ix.qB}, new float[][]{ql, ql}, new float[][]{q, qi});
        else Gemm.matmul(L.qB, ql, S, q);
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

        float[] o = new float[S * H * d];
        final float scale = (float) (1.0 / Math.sqrt(d));
        final int[][] sel = selected;
        final int[] entSlot = slot;
        final int m = st.comp == null ? 0 : st.comp.m;
        Parallel.forRange(S * H, 1, (lo, hi) -> {
            float[] lg = new float[W + nEnt + 1], d4 = new float[4];
            int[] idx = new int[W + nEnt + 1];
            for (int sh = lo; sh < hi; sh++) {
                int s = sh / H, h = sh % H, t = N0 + s;
                int qo = (s * H + h) * d;
                // the keys this query attends: its raw window rows, then the visible or selected compressed entries
                int cnt = 0;
                for (int p = Math.max(0, t - W + 1); p <= t; p++) idx[cnt++] = p - firstRaw;
                int rawCnt = cnt;
                if (kind == AttentionKind.HCA) {
                    int vis = (t + 1) / m;
                    for (int w = 0; w < vis; w++) idx[cnt++] = w;
                } else if (kind == AttentionKind.CSA) {
                    for (int w : sel[s]) idx[cnt++] = entSlot[w];
                }
                float mx = Math.max(L.sinks[h], scores(q, qo, rawK, idx, 0, rawCnt, d, scale, lg, d4));
                mx = Math.max(mx, scores(q, qo, entK, idx, rawCnt, cnt, d, scale, lg, d4));
                float sum = (float) Math.exp(L.sinks[h] - mx);
                for (int i = 0; i < cnt; i++) {
                    lg[i] = (float) Math.exp(lg[i] - mx);
                    sum += lg[i];
                }
                float inv = 1f / sum;
                for (int i = 0; i < cnt; i++) lg[i] *= inv;
                values(lg, rawK, idx, 0, rawCnt, d, o, qo);
                values(lg, entK, idx, rawCnt, cnt, d, o, qo);
            }
        });
        // 6. de-rotation at the query position
        for (int s = 0; s < S; s++) {
            System.arraycopy(cosT, s * half, cs, 0, half);
            System.arraycopy(sinT, s * half, sn, 0, half);
            for (int h = 0; h < H; h++) P.apply(o, (s * H + h) * d, d, cs, sn, true);
        }
        // keep the newest raw rows in the ring (after all queries of this step have read them)
        for (int p = Math.max(N0, N0 + S - st.winCap); p < N0 + S; p++) {
            int dst = (p % st.winCap) * d;
            for (int i = 0; i < d; i++) st.win[dst + i] = Float.floatToFloat16(kv[(p - N0) * d + i]);
        }
        // 7. grouped output projection
        final int G = c.oGroups, R = c.oLoraRank, gw = H * d / G;
        float[] y = new float[S * G * R];
        if (S == 1) { // group g reads o[g·gw ..] and writes y[g·R ..]: all groups in one batch
            WeightMatrix[] wg = new WeightMatrix[G];
            float[][] xg = new float[G][], yg = new float[G][];
            int[] xo = new int[G], yo = new int[G];
            for (int g = 0; g < G; g++) {
                wg[g] = L.oA.rowRange(g * R, (g + 1) * R);
                xg[g] = o;
                xo[g] = g * gw;
                yg[g] = y;
                yo[g] = g * R;
            }
            Gemm.matvecs(wg, xg, xo, yg, yo);
        } else {
            float[] u = new float[S * gw], yg = new float[S * R];
            for (int g = 0; g < G; g++) {
                for (int s = 0; s < S; s++) System.arraycopy(o, s * H * d + g * gw, u, s * gw, gw);
                Gemm.matmul(L.oA.rowRange(g * R, (g + 1) * R), u, S, yg);
                for (int s = 0; s < S; s++) System.arraycopy(yg, s * R, y, s * G * R + g * R, R);
            }
        }
        float[] out = new float[S * D];
        Gemm.matmul(L.oB, y, S, out);
        return out;
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
        float[] wts2 = new float[S * k];
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
                wts2[s * k + j] = sc[pick[j]] / (sum + 1e-20f) * (float) c.routedScaling;
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
                        ws[cnt++] = wts2[s * k + j];
                    }
            active[na] = e;
            rowsOf[na] = rs;
            wOf[na++] = ws;
        }
        if (S == 1) {
            // decode: every expert's w1/w3 (the shared one's too) in one batch, every w2 in another, so each is one
            // hand-off to the worker pool; products 0 .. na-1 are the routed experts, product na the shared one
            WeightMatrix[] w1 = new WeightMatrix[na + 1], w3 = new WeightMatrix[na + 1], w2 = new WeightMatrix[na + 1];
            float[][] hin = new float[na + 1][];
            int[] rows = new int[na + 1];
            for (int a = 0; a < na; a++) {
                w1[a] = L.w1[active[a]];
                w3[a] = L.w3[active[a]];
                w2[a] = L.w2[active[a]];
                hin[a] = gather(h, rowsOf[a], D);
                rows[a] = rowsOf[a].length;
            }
            w1[na] = L.sharedW1;
            w3[na] = L.sharedW3;
            w2[na] = L.sharedW2;
            hin[na] = h;
            rows[na] = S;
            float[][] y = experts(w1, w3, w2, hin, rows, I, lim);
            for (int a = 0; a < na; a++) addRouted(out, y[a], rowsOf[a], wOf[a], D);
            for (int i = 0; i < S * D; i++) out[i] += y[na][i];
        } else {
            // one expert at a time, so a long prefill chunk holds the intermediates of one expert only
            for (int a = 0; a < na; a++) {
                int e = active[a];
                float[] y = experts(new WeightMatrix[]{L.w1[e]}, new WeightMatrix[]{L.w3[e]}, new WeightMatrix[]{L.w2[e]},
                        new float[][]{gather(h, rowsOf[a], D)}, new int[]{rowsOf[a].length}, I, lim)[0];
                addRouted(out, y, rowsOf[a], wOf[a], D);
            }
            float[] sh = experts(new WeightMatrix[]{L.sharedW1}, new WeightMatrix[]{L.sharedW3}, new WeightMatrix[]{L.sharedW2},
                    new float[][]{h}, new int[]{S}, I, lim)[0];
            for (int i = 0; i < S * D; i++) out[i] += sh[i];
        }
        return out;
    }

    /**
     * One SwiGLU expert MLP (spec 3.8 steps 4–5, routed or shared) on S rows: y = W2 · SwiGLU_clamped(W1 h, W3 h), the
     * same products and order as the CPU backend's own MoE ({@link #experts}). Also runs the routed experts that the GPU
     * backend keeps in host memory (hybrid expert placement).
     * @param w1 gate [I, D], w3 up [I, D], w2 down [D', I] in any stored format
     * @param h inputs [S, D], row-major
     * @param I intermediate width (rows of w1 and w3)
     * @param lim swiglu_limit (spec 3.0)
     * @return y [S, D'] (D' = w2.rows), row-major
     */
    public static float[] expert(WeightMatrix w1, WeightMatrix w3, WeightMatrix w2, float[] h, int S, int I, float lim) {
        return experts(new WeightMatrix[]{w1}, new WeightMatrix[]{w3}, new WeightMatrix[]{w2}, new float[][]{h}, new int[]{S}, I, lim)[0];
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

    /**
     * SwiGLU experts: y_i = W2_i · swiglu(W1_i · h_i, W3_i · h_i) for products with S_i = rows[i] tokens each. All
     * W1/W3 products form one batch and all W2 products another, so when every S_i is 1 (decode) each batch is one
     * hand-off to the worker pool.
     */
    private static float[][] experts(WeightMatrix[] w1, WeightMatrix[] w3, WeightMatrix[] w2, float[][] h, int[] rows,
                                     int I, float lim) {
        int n = w1.length;
        boolean decode = true;
        for (int r : rows) decode &= r == 1;
        float[][] g = new float[n][], u = new float[n][], y = new float[n][];
        for (int i = 0; i < n; i++) {
            g[i] = new float[rows[i] * I];
            u[i] = new float[rows[i] * I];
            y[i] = new float[rows[i] * w2[i].rows];
        }
        if (decode) {
            WeightMatrix[] w13 = new WeightMatrix[2 * n];
            float[][] x13 = new float[2 * n][], y13 = new float[2 * n][];
            for (int i = 0; i < n; i++) {
                w13[2 * i] = w1[i];
                w13[2 * i + 1] = w3[i];
                x13[2 * i] = x13[2 * i + 1] = h[i];
                y13[2 * i] = g[i];
                y13[2 * i + 1] = u[i];
            }
            Gemm.matmuls(1, w13, x13, y13);
        } else {
            for (int i = 0; i < n; i++) {
                Gemm.matmul(w1[i], h[i], rows[i], g[i]);
                Gemm.matmul(w3[i], h[i], rows[i], u[i]);
            }
        }
        for (int i = 0; i < n; i++)
            for (int j = 0; j < rows[i] * I; j++) g[i][j] = Ops.swiglu(g[i][j], u[i][j], lim);
        if (decode) Gemm.matmuls(1, w2, g, y);
        else for (int i = 0; i < n; i++) Gemm.matmul(w2[i], g[i], rows[i], y[i]);
        return y;
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
     * projections of the target's state and of the next token): X [S, n·D] goes in, holds the final streams afterwards,
     * the S positions are appended to seq, and the logits of the requested rows come back.
     * @param toks the token id of each row (read by hash-routed layers only)
     */
    float[] forwardStreams(CpuSequence seq, float[] X, int[] toks, int S, int[] logitRows) {
        if (seq.cfg != c) throw new IllegalArgumentException("sequence does not belong to this backend");
        if (seq.closed) throw new IllegalStateException("sequence is closed");
        final int D = c.hidden, n = c.hcMult;
        final int N0 = seq.pos.length();
        float[] post = new float[S * n], comb = new float[S * n * n], col = new float[S * D];
        for (int l = 0; l < c.numLayers; l++) {
            ModelWeights.Layer L = wts.layers[l];
            hcPre(X, S, L.attnHcFn, L.attnHcBase, L.attnHcScale, post, comb, col);
            Ops.rmsNormRows(col, S, D, L.inputNorm, (float) c.rmsEps);
            float[] a = attention(seq, l, L, col, S, N0);
            hcPost(X, S, a, post, comb);
            hcPre(X, S, L.ffnHcFn, L.ffnHcBase, L.ffnHcScale, post, comb, col);
            Ops.rmsNormRows(col, S, D, L.postAttnNorm, (float) c.rmsEps);
            float[] f = moe(l, L, col, S, toks);
            hcPost(X, S, f, post, comb);
        }
        seq.pos.advance(S);
        return head(X, logitRows);
    }
}
