package io.ds4j.gpu;

import io.ds4j.engine.CacheLayout;
import io.ds4j.engine.Backend;
import io.ds4j.engine.Sequence;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.CheckpointException;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.Rope;
import io.ds4j.model.WeightLoader;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.lang.foreign.MemorySegment;
import java.nio.file.Path;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.Gpu.ptr;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;

/**
 * The DeepSeek-V4 forward (spec section 3) on a GPU through the ds4j GPU library (HIP C++, built with hipcc or, on
 * NVIDIA, with nvcc), mirroring {@link io.ds4j.cpu.CpuBackend} operation by operation: F32 activations, weights in
 * their stored format dequantised inside the kernels, the F16 MLA cache and the F32 compressor rings of each
 * {@link HipSequence} in device memory. One step serves prefill chunks, decode and verification (S ≥ 1 rows); steps
 * of at least {@code DS4J_TC_MIN_ROWS} rows (prefill chunks) run the matrix products, the routed experts (grouped by
 * expert) and the indexer scores on tensor cores, shorter ones (decode, verify) on the F32 FFMA kernels (ds4j_gpu.h
 * says how close the two are). Only the requested logits rows are copied back.
 *
 * <p>All work runs on one stream of one device; calls are serialised on the backend (different sequences may be
 * stepped from different threads, one at a time). Implements {@code backend: hip} ({@link io.ds4j.engine.Backends}).
 */
public final class HipBackend implements Backend {
    private static final Logger LOG = LoggerFactory.getLogger(HipBackend.class);

    private final Gpu gpu;
    private final ModelConfig c;
    private final ModelWeights hostWeights;
    private final DeviceWeights w;
    private final Workspace ws;
    /** Device inv_freq tables [r/2] of the main and compress RoPE (spec 1.4). */
    private final long ropeMain, ropeCompress;
    private boolean closed;

    /**
     * Opens the first GPU and uploads the weights.
     * @param weights loaded weights; the backend closes them in {@link #close()}
     * @throws GpuUnavailableException when no GPU can be used (message names what is missing)
     * @throws GpuException when the weights do not fit (message names what did not fit)
     */
    public HipBackend(ModelWeights weights) {
        this(weights, Gpu.open(0));
    }

    private HipBackend(ModelWeights weights, Gpu gpu) {
        this.gpu = gpu;
        this.c = weights.config;
        this.hostWeights = weights;
        DeviceWeights dw = null;
        Workspace wsp = null;
        long rm = 0, rc = 0;
        try {
            long t0 = System.nanoTime();
            dw = new DeviceWeights(gpu, weights);
            rm = gpu.uploadNew(Rope.main(c).invFreq, "rope table");
            rc = gpu.uploadNew(Rope.compress(c).invFreq, "rope table");
            wsp = new Workspace(gpu);
            gpu.sync();
            long[] mem = gpu.memory();
            LOG.info("hip backend on {}: weights uploaded in {} s: {} (total {}); device memory used {} of {}",
                    gpu, String.format("%.2f", (System.nanoTime() - t0) / 1e9), dw.summary(), Gpu.mib(dw.totalBytes()),
                    Gpu.mib(mem[1] - mem[0]), Gpu.mib(mem[1]));
        } catch (RuntimeException e) {
            if (wsp != null) wsp.close();
            if (dw != null) dw.close();
            try {
                gpu.free(rm);
                gpu.free(rc);
                gpu.close();
            } catch (RuntimeException ignored) {
                // report the original failure
            }
            throw e;
        }
        this.w = dw;
        this.ws = wsp;
        this.ropeMain = rm;
        this.ropeCompress = rc;
    }

    /**
     * {@code backend: hip}: checks for a usable GPU first (fast, clear failure), then loads and uploads the model.
     * @throws IllegalArgumentException when no GPU can be used here, naming what is missing
     * @throws CheckpointException when the model cannot be loaded
     */
    public static HipBackend open(Path modelDir) throws CheckpointException {
        return open(modelDir, io.ds4j.engine.BackendOptions.DEFAULTS);
    }

    /** {@link #open(Path)} with start-up options (placement, verify attention path). */
    public static HipBackend open(Path modelDir, io.ds4j.engine.BackendOptions options) throws CheckpointException {
        Gpu gpu;
        try {
            gpu = Gpu.open(0);
        } catch (GpuUnavailableException e) {
            throw new IllegalArgumentException("backend 'hip' is not available on this machine: " + e.getMessage()
                    + "; use backend 'cpu'", e);
        }
        ModelWeights weights;
        try {
            weights = WeightLoader.load(modelDir);
        } catch (CheckpointException | RuntimeException e) {
            gpu.close();
            throw e;
        }
        try {
            return new HipBackend(weights, gpu);
        } catch (RuntimeException e) {
            try {
                weights.close();
            } catch (Exception ignored) {
                // report the original failure
            }
            throw e;
        }
    }

    /** The GPU this backend runs on. */
    public Gpu gpu() {
        return gpu;
    }

    /** Device bytes of the uploaded weights. */
    public long weightBytes() {
        return w.totalBytes();
    }

    @Override
    public String name() {
        return "hip";
    }

    @Override
    public ModelConfig config() {
        return c;
    }

    @Override
    public synchronized HipSequence newSequence(int maxRollback) {
        if (closed) throw new IllegalStateException("backend is closed");
        return new HipSequence(this, c, maxRollback);
    }

    /** Runs r under the backend's lock (device memory release of a sequence). */
    synchronized void release(Runnable r) {
        if (!closed) r.run();
    }

    @Override
    public long stateBytes(int ctx, int maxRollback) {
        return CacheLayout.stateBytes(c, ctx, maxRollback);
    }

    @Override
    public synchronized void close() {
        if (closed) return;
        closed = true;
        try {
            ws.close();
            w.close();
            gpu.free(ropeMain);
            gpu.free(ropeCompress);
            gpu.close();
        } finally {
            try {
                hostWeights.close();
            } catch (Exception e) {
                throw new IllegalStateException("closing weights: " + e.getMessage(), e);
            }
        }
    }

    // ------------------------------------------------------------------------------------------------------------

    private MemorySegment ctx() {
        return gpu.ctx();
    }

    /**
     * Opt-in per-operation timing ({@code -Dds4j.gpu.profile=true} or {@link #setProfiling}): each call waits for the device and adds its
     * wall time to a category. Slows everything down; for finding where time goes, not for throughput figures.
     */
    private java.util.Map<String, long[]> profile = Boolean.getBoolean("ds4j.gpu.profile") ? new java.util.TreeMap<>() : null;
    private long profileMark;

    /** Checks a library call's status; in profile mode also waits and books its time under cat. */
    private void k(int rc, String what, String cat) {
        check(rc, what);
        if (profile != null) {
            gpu.sync();
            long now = System.nanoTime();
            long[] v = profile.computeIfAbsent(cat, x -> new long[2]);
            v[0] += now - profileMark;
            v[1]++;
            profileMark = now;
        }
    }

    /** Turns per-operation timing on or off (see {@link #takeProfile}). */
    public synchronized void setProfiling(boolean on) {
        profile = on ? new java.util.TreeMap<>() : null;
    }

    /** The per-category times booked since the last call (profile mode), as "category: ms (calls)" lines; clears them. */
    public synchronized String takeProfile() {
        if (profile == null) return "profiling is off (-Dds4j.gpu.profile=true)";
        StringBuilder b = new StringBuilder();
        long total = 0;
        for (long[] v : profile.values()) total += v[0];
        for (var e : profile.entrySet())
            b.append(String.format("  %-32s %9.3f ms %5.1f%% (%d calls)%n", e.getKey(), e.getValue()[0] / 1e6,
                    100.0 * e.getValue()[0] / Math.max(1, total), e.getValue()[1]));
        profile.clear();
        return b.toString();
    }

    /** y[s*ldy + r] = Σ W[r, c] x[s*ldx + c] (ds4j_matmul). */
    private void matmul(DeviceMatrix m, long x, long ldx, long y, long ldy, int S) {
        k(ds4j_matmul(ctx(), m.format(), ptr(m.data()), ptr(m.scale()), m.scaleKind(), m.rowBase(), m.rows(), m.cols(),
                ptr(x), ldx, ptr(y), ldy, S), m.name(), m == w.lmHead ? "lm_head" : "matmul (dense)");
    }

    private void matmul(DeviceMatrix m, long x, long y, int S) {
        matmul(m, x, m.cols(), y, m.rows(), S);
    }

    private void rmsnorm(long x, long y, long weight, int rows, int n) {
        k(ds4j_rmsnorm(ctx(), ptr(x), ptr(y), ptr(weight), rows, n, (float) c.rmsEps), "rmsnorm", "norm, rope, mHC");
    }

    private void rope(long x, int S, int heads, int width, long table, long pos0, long step, boolean inverse) {
        k(ds4j_rope(ctx(), ptr(x), S, heads, width, c.ropeDim, ptr(table), pos0, step, inverse ? 1 : 0), "rope", "norm, rope, mHC");
    }

    @Override
    public synchronized float[] forward(Sequence sequence, int[] tokens, int off, int S, int[] logitRows) {
        if (closed) throw new IllegalStateException("backend is closed");
        if (!(sequence instanceof HipSequence seq) || seq.backend != this)
            throw new IllegalArgumentException("sequence does not belong to this backend");
        if (seq.closed) throw new IllegalStateException("sequence is closed");
        Backend.checkStep(c, tokens, off, S, logitRows);
        final int D = c.hidden, n = c.hcMult, nD = n * D;
        final int N0 = seq.pos.length();
        ws.reset();
        if (profile != null) {
            gpu.sync();
            profileMark = System.nanoTime();
        }
        // grow the entry arrays first, so that a failure leaves the sequence unchanged
        for (HipSequence.LayerState ls : seq.layers) {
            if (ls.comp != null) HipSequence.ensure(gpu, ls.comp, (N0 + S) / ls.comp.m);
            if (ls.index != null) HipSequence.ensure(gpu, ls.index, (N0 + S) / ls.index.m);
        }
        long tok = ws.i32(S);
        int[] toks = java.util.Arrays.copyOfRange(tokens, off, off + S);
        gpu.upload(tok, toks);

        // 3.1: every stream starts as the embedding
        long X = ws.f32((long) S * nD);
        DeviceMatrix e = w.embed;
        k(ds4j_embed(ctx(), e.format(), ptr(e.data()), ptr(e.scale()), e.scaleKind(), e.rowBase(), e.rows(), e.cols(),
                ptr(tok), S, n, ptr(X)), "embed", "embed");
        long post = ws.f32((long) S * n), comb = ws.f32((long) S * n * n), col = ws.f32((long) S * D);
        for (int l = 0; l < c.numLayers; l++) {
            DeviceWeights.Layer L = w.layers[l];
            long mark = ws.mark();
            // 3.3 attention site
            hcPre(X, S, L.attnHcFn, L.attnHcBase, L.attnHcScale, post, comb, col);
            rmsnorm(col, col, L.inputNorm, S, D);
            long a = attention(seq, l, L, col, S, N0);
            k(ds4j_hc_post(ctx(), ptr(X), ptr(a), ptr(post), ptr(comb), S, n, D), "hc_post", "norm, rope, mHC");
            ws.release(mark);
            // 3.3 MoE site
            hcPre(X, S, L.ffnHcFn, L.ffnHcBase, L.ffnHcScale, post, comb, col);
            rmsnorm(col, col, L.postAttnNorm, S, D);
            long f = moe(l, L, col, S, tok);
            k(ds4j_hc_post(ctx(), ptr(X), ptr(f), ptr(post), ptr(comb), S, n, D), "hc_post", "norm, rope, mHC");
            ws.release(mark);
        }
        float[] logits = head(X, logitRows);
        // committed only once the device has finished (head() waits for it)
        for (HipSequence.LayerState ls : seq.layers) {
            if (ls.comp != null) ls.comp.count = (N0 + S) / ls.comp.m;
            if (ls.index != null) ls.index.count = (N0 + S) / ls.index.m;
        }
        seq.pos.advance(S);
        return logits;
    }

    /** 3.9: hc_head merge, final norm and lm_head for the requested rows only; waits for the device. */
    private float[] head(long X, int[] rows) {
        final int D = c.hidden, n = c.hcMult, nD = n * D, R = rows.length;
        if (R == 0) {
            gpu.sync();
            return new float[0];
        }
        long xs = ws.f32((long) R * nD), v = ws.f32((long) R * nD), mu = ws.f32((long) R * n), y = ws.f32((long) R * D);
        for (int i = 0; i < R; i++) gpu.copy(xs + 4L * i * nD, X + 4L * rows[i] * nD, 4L * nD);
        rmsnorm(xs, v, 0, R, nD);
        matmul(w.hcHeadFn, v, mu, R);
        k(ds4j_hc_head(ctx(), ptr(mu), ptr(w.hcHeadBase), ptr(w.hcHeadScale), ptr(xs), R, n, D, (float) c.hcEps, ptr(y)), "hc_head", "norm, rope, mHC");
        rmsnorm(y, y, w.finalNorm, R, D);
        long logits = ws.f32((long) R * c.vocabSize);
        matmul(w.lmHead, y, logits, R);
        return gpu.downloadFloats(logits, R * c.vocabSize);
    }

    /** 3.2 mHC mapping for S tokens: post [S, n], Sinkhorn matrix [S, n, n], collapsed input [S, D]. */
    private void hcPre(long X, int S, DeviceMatrix fn, long base, long scale, long post, long comb, long col) {
        final int D = c.hidden, n = c.hcMult, nD = n * D, mix = (2 + n) * n;
        long mark = ws.mark();
        long v = ws.f32((long) S * nD), mu = ws.f32((long) S * mix);
        rmsnorm(X, v, 0, S, nD);
        matmul(fn, v, mu, S);
        k(ds4j_hc_pre(ctx(), ptr(mu), ptr(base), ptr(scale), ptr(X), S, n, D, c.sinkhornIters, (float) c.hcEps,
                ptr(post), ptr(comb), ptr(col)), "hc_pre", "norm, rope, mHC");
        ws.release(mark);
    }

    // ------------------------------------------------------------------------------------------------------------
    // 3.4–3.7 attention

    private long attention(HipSequence seq, int l, DeviceWeights.Layer L, long x, int S, int N0) {
        final int D = c.hidden, H = c.numHeads, d = c.headDim, W = c.slidingWindow;
        final AttentionKind kind = c.layerTypes[l];
        final long P = kind == AttentionKind.SLIDING ? ropeMain : ropeCompress;
        HipSequence.LayerState st = seq.layers[l];
        // 1. query latent (kept for the indexer), 2. queries: per-head RMSNorm_1, RoPE
        long ql = ws.f32((long) S * c.qLoraRank);
        matmul(L.qA, x, ql, S);
        rmsnorm(ql, ql, L.qANorm, S, c.qLoraRank);
        long q = ws.f32((long) S * H * d);
        matmul(L.qB, ql, q, S);
        k(ds4j_rmsnorm_rope(ctx(), ptr(q), MemorySegment.NULL, S * H, d, (float) c.rmsEps, c.ropeDim, ptr(P), N0, H, 0),
                "q norm + rope", "norm, rope, mHC");
        // 3. shared kv: norm, RoPE, rounded to F16 as stored
        long kv = ws.f32((long) S * d);
        matmul(L.kv, x, kv, S);
        k(ds4j_rmsnorm_rope(ctx(), ptr(kv), ptr(L.kvNorm), S, d, (float) c.rmsEps, c.ropeDim, ptr(P), N0, 1, 1),
                "kv norm + rope + f16", "norm, rope, mHC");
        // 4. compressors and the indexer's selection
        if (st.comp != null) compress(st.comp, L.compressor, x, S, N0);
        long sel = 0;
        if (st.index != null) {
            compress(st.index, L.indexer.compressor, x, S, N0);
            sel = indexerSelect(st.index, L, ql, x, S, N0);
        }
        // 5. attention over [raw window ‖ compressed entries] with the sink; 6. de-rotation
        long o = ws.f32((long) S * H * d);
        int akind = switch (kind) {
            case SLIDING -> DS4J_ATTN_SLIDING();
            case CSA -> DS4J_ATTN_CSA();
            case HCA -> DS4J_ATTN_HCA();
        };
        int m = st.comp == null ? 0 : st.comp.m;
        k(ds4j_attention(ctx(), ptr(q), ptr(kv), ptr(st.win), st.winCap, ptr(st.comp == null ? 0 : st.comp.entries), akind, m,
                ptr(sel), c.indexTopk, ptr(L.sinks), N0, S, H, d, W, (float) (1.0 / Math.sqrt(d)), ptr(o)), "attention", "attention");
        rope(o, S, H, d, P, N0, 1, true);
        // the newest raw rows go to the ring after every query of this step has read the old ones
        k(ds4j_ring_store(ctx(), ptr(st.win), 1, st.winCap, d, ptr(kv), N0, S), "window ring store", "attention");
        // 7. grouped output projection
        final int G = c.oGroups, R = c.oLoraRank, gw = H * d / G;
        long y = ws.f32((long) S * G * R);
        DeviceMatrix oA = L.oA;
        k(ds4j_matmul_grouped(ctx(), oA.format(), ptr(oA.data()), ptr(oA.scale()), oA.scaleKind(), oA.rowBase(), oA.rows(), oA.cols(),
                R, gw, ptr(o), (long) H * d, ptr(y), (long) G * R, S), oA.name(), "matmul (dense)");
        long out = ws.f32((long) S * D);
        matmul(L.oB, y, out, S);
        return out;
    }

    /** 3.5 compressor step: pools every window completed in this step, then keeps the newest raw rows in the rings. */
    private void compress(HipSequence.Comp cs, DeviceWeights.Comp W, long x, int S, int N0) {
        long a = ws.f32((long) S * cs.cw), z = ws.f32((long) S * cs.cw);
        matmul(W.kvProj, x, a, S);
        matmul(W.gateProj, x, z, S);
        k(ds4j_compress_pool(ctx(), ptr(cs.ringA), ptr(cs.ringZ), cs.cap, ptr(a), ptr(z), N0, S, cs.m, cs.w, cs.overlap ? 1 : 0,
                ptr(W.positionBias), ptr(W.norm), (float) c.rmsEps, ptr(ropeCompress), c.ropeDim, ptr(cs.entries)), "compress_pool", "compressor");
        k(ds4j_ring_store(ctx(), ptr(cs.ringA), 0, cs.cap, cs.cw, ptr(a), N0, S), "compressor ring store", "compressor");
        k(ds4j_ring_store(ctx(), ptr(cs.ringZ), 0, cs.cap, cs.cw, ptr(z), N0, S), "compressor ring store", "compressor");
    }

    /**
     * 3.6 Lightning Indexer: top-K_I entries per query whose available set exceeds K_I (ties to the lower index);
     * returns the selection [S, K_I] (0 when no query needs one: the attention then takes every available entry).
     */
    private long indexerSelect(HipSequence.Comp ix, DeviceWeights.Layer L, long ql, long x, int S, int N0) {
        final int HI = c.indexHeads, dI = c.indexHeadDim, K = c.indexTopk, m = ix.m;
        final int total = (N0 + S) / m;
        if (total <= K) return 0;
        long qi = ws.f32((long) S * HI * dI), wt = ws.f32((long) S * HI);
        matmul(L.indexer.qB, ql, qi, S);
        matmul(L.indexer.weightsProj, x, wt, S);
        rope(qi, S, HI, dI, ropeCompress, N0, 1, false);
        long scores = ws.f32((long) S * total), sel = ws.i32((long) S * K);
        float wScale = (float) (1.0 / Math.sqrt(HI)), sScale = (float) (1.0 / Math.sqrt(dI));
        // prefill chunks score on tensor cores; decode and verify steps (S below the threshold) keep the FFMA kernel
        int rc = S >= DS4J_TC_MIN_ROWS()
                ? ds4j_indexer_scores_tc(ctx(), ptr(qi), ptr(wt), ptr(ix.entries), N0, S, m, HI, dI, K, wScale, sScale, ptr(scores), total)
                : ds4j_indexer_scores(ctx(), ptr(qi), ptr(wt), ptr(ix.entries), N0, S, m, HI, dI, K, wScale, sScale, ptr(scores), total);
        k(rc, "indexer_scores", "indexer");
        k(ds4j_indexer_topk(ctx(), ptr(scores), total, N0, S, m, K, ptr(sel)), "indexer_topk", "indexer");
        return sel;
    }

    // ------------------------------------------------------------------------------------------------------------
    // 3.8 MoE

    private long moe(int l, DeviceWeights.Layer L, long h, int S, long tok) {
        final int D = c.hidden, E = c.numExperts, k = c.expertsPerToken, I = c.moeInter;
        final float lim = (float) c.swigluLimit;
        long lam = ws.f32((long) S * E), ids = ws.i32((long) S * k), wts = ws.f32((long) S * k);
        matmul(L.gate, h, lam, S);
        boolean hash = c.hashMoe[l];
        k(ds4j_moe_route(ctx(), ptr(lam), ptr(hash ? 0 : L.gateBias), ptr(hash ? L.tid2eid : 0), ptr(tok), S, E, k,
                (float) c.routedScaling, ptr(ids), ptr(wts)), "moe_route", "MoE (routing, swiglu, combine)");
        long g = ws.f32((long) S * k * I), u = ws.f32((long) S * k * I), yr = ws.f32((long) S * k * D);
        moeMatmul(L.w1, ids, k, S, h, D, false, g, I);
        moeMatmul(L.w3, ids, k, S, h, D, false, u, I);
        k(ds4j_swiglu(ctx(), ptr(g), ptr(u), ptr(g), (long) S * k * I, lim), "swiglu", "MoE (routing, swiglu, combine)");
        moeMatmul(L.w2, ids, k, S, g, I, true, yr, D);
        long sg = ws.f32((long) S * I), su = ws.f32((long) S * I), sy = ws.f32((long) S * D);
        matmul(L.sharedW1, h, sg, S);
        matmul(L.sharedW3, h, su, S);
        k(ds4j_swiglu(ctx(), ptr(sg), ptr(su), ptr(sg), (long) S * I, lim), "swiglu", "MoE (routing, swiglu, combine)");
        matmul(L.sharedW2, sg, sy, S);
        long out = ws.f32((long) S * D);
        k(ds4j_moe_combine(ctx(), ptr(ids), ptr(wts), ptr(yr), ptr(sy), S, k, D, ptr(out)), "moe_combine", "MoE (routing, swiglu, combine)");
        return out;
    }

    private void moeMatmul(DeviceWeights.Experts x, long ids, int k, int S, long in, long ldx, boolean perPick, long y, long ldy) {
        if (S >= DS4J_TC_MIN_ROWS()) {
            // prefill: picks grouped by expert on the device, one GEMM per expert (scratch: the grouping)
            final int E = c.numExperts;
            long bytes = 4L * ((long) S * k + 3L * E + 1), scratch = ws.alloc(bytes);
            k(ds4j_moe_matmul_prefill(ctx(), x.format(), ptr(x.dataTable()), ptr(x.scaleTable()), ptr(x.rowBaseTable()), x.scaleKind(),
                    x.rows(), x.cols(), E, ptr(ids), k, S, ptr(in), ldx, perPick ? 1 : 0, ptr(y), ldy, ptr(scratch), bytes),
                    "routed experts", "routed experts");
            return;
        }
        k(ds4j_moe_matmul(ctx(), x.format(), ptr(x.dataTable()), ptr(x.scaleTable()), ptr(x.rowBaseTable()), x.scaleKind(),
                x.rows(), x.cols(), ptr(ids), k, S, ptr(in), ldx, perPick ? 1 : 0, ptr(y), ldy), "routed experts", "routed experts");
    }
}
