package io.ds4j.model;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * Builds {@link ModelWeights} from a model directory (spec section 2), with every tensor memory-mapped in its stored
 * format. Only small vectors (norms, biases, sinks, position biases, hc base/scale, tid2eid) are copied onto the heap.
 *
 * <p>Matrices by stored dtype:
 * <ul>
 *   <li>F32 / BF16 / F16 [out, in] → the same {@link WeightMatrix.Format};</li>
 *   <li>F8_E4M3 [out, in] with a block-scale tensor [ceil(out/128), ceil(in/128)] named {@code <prefix>.scale}
 *       (original scheme; F8_E8M0 or U8) or {@code <name>_scale_inv} (HF fp8 scheme; F32, F8_E8M0 or U8; BF16/F16
 *       are widened to F32) → {@code FP8_E4M3_B128};</li>
 *   <li>I8 / U8 [out, in/2] (packed FP4 e2m1, element 2j in the low nibble) with an E8M0 scale [out, in/32]
 *       (F8_E8M0 or U8) → {@code FP4_E2M1_B32}.</li>
 * </ul>
 * Routed experts are per-expert tensors in the original scheme and stacked {@code gate_up_proj} [E, 2I, D] /
 * {@code down_proj} [E, D, I] in the HF scheme (per-expert HF names are accepted too). Every shape is checked
 * against the config.
 *
 * <p>The MTP layer ({@code mtp.0.*}, original naming in either scheme, see {@link TensorNames#mtp}) is loaded when
 * present and complete into {@link ModelWeights#mtp}; otherwise {@link ModelWeights#mtpProblem} says what was found
 * (no {@code mtp.*} tensors, the DSpark drafter layout, a missing or misshapen tensor) and the main model still loads.
 */
public final class WeightLoader {
    private final Checkpoint ck;
    private final ModelConfig c;
    /** While loading the MTP block: canonical names of layer {@code c.numLayers} resolve to {@code mtp.0.*}. */
    private boolean mtpMode;

    private WeightLoader(Checkpoint ck) {
        this.ck = ck;
        this.c = ck.config();
    }

    /** A tensor by canonical name; in MTP mode the MTP layer's stored name. */
    private StoredTensor find(String canonical) {
        String mp = TensorNames.layer(c.numLayers, "");
        if (mtpMode && canonical.startsWith(mp)) {
            String s = TensorNames.mtp(canonical.substring(mp.length()));
            return s == null ? null : ck.stored(s);
        }
        return ck.find(canonical);
    }

    /** {@link #find}, or the checkpoint's "not found" error naming the stored name. */
    private StoredTensor get(String canonical) throws CheckpointException {
        String mp = TensorNames.layer(c.numLayers, "");
        if (mtpMode && canonical.startsWith(mp)) {
            StoredTensor t = find(canonical);
            if (t == null) {
                String s = TensorNames.mtp(canonical.substring(mp.length()));
                throw new CheckpointException(ck.dir(), s != null ? s : canonical, "not found in checkpoint");
            }
            return t;
        }
        return ck.get(canonical);
    }

    /**
     * Opens and loads a model directory. The returned weights own the mapped files ({@link ModelWeights#owner});
     * close them to unmap.
     * @throws CheckpointException naming the file (and tensor) for a missing/invalid config, file or tensor,
     *         a shape that does not match the config, or an unusable dtype
     */
    public static ModelWeights load(Path modelDir) throws CheckpointException {
        Checkpoint ck = Checkpoint.open(modelDir);
        try {
            ModelWeights w = load(ck);
            ck = null;
            return w;
        } finally {
            if (ck != null) ck.close();
        }
    }

    /**
     * Loads from an already opened checkpoint; the weights take ownership of it ({@link ModelWeights#owner}).
     * On failure the checkpoint is left open for the caller to close.
     * @throws CheckpointException as {@link #load(Path)}
     */
    public static ModelWeights load(Checkpoint ck) throws CheckpointException {
        ModelWeights w = new WeightLoader(ck).loadAll();
        w.owner = ck;
        return w;
    }

    private ModelWeights loadAll() throws CheckpointException {
        ModelWeights w = new ModelWeights(c);
        int n = c.hcMult, D = c.hidden, V = c.vocabSize;
        w.embed = matrix("model.embed_tokens.weight", V, D);
        w.lmHead = matrix("lm_head.weight", V, D);
        w.finalNorm = vector("model.norm.weight", D);
        w.hcHeadFn = matrix("model.hc_head.hc_fn", n, (long) n * D);
        w.hcHeadBase = vector("model.hc_head.hc_base", n);
        w.hcHeadScale = vector("model.hc_head.hc_scale", 1);
        for (int l = 0; l < c.numLayers; l++) w.layers[l] = layer(l);
        try {
            w.mtp = mtp();
        } catch (CheckpointException e) {
            w.mtpProblem = e.getMessage();
        } finally {
            mtpMode = false;
        }
        return w;
    }

    /**
     * The MTP block (spec 2.6), loaded as layer {@code numLayers} of the one-layer config
     * {@link ModelConfig#mtpBlockConfig()}.
     * @throws CheckpointException saying what the checkpoint holds instead: no {@code mtp.*} tensors, the DSpark
     *         drafter layout ({@code mtp.1}/{@code mtp.2}, {@code markov_head}, {@code confidence_head}), or a missing
     *         or misshapen tensor of {@code mtp.0}
     */
    private ModelWeights.Mtp mtp() throws CheckpointException {
        java.util.Set<String> names = ck.mtpNames();
        if (names.isEmpty())
            throw new CheckpointException(ck.dir(), null, "the checkpoint has no MTP layer (no mtp.* tensors; config.json "
                    + "num_nextn_predict_layers = " + c.mtpLayers + ")");
        java.util.TreeSet<String> stages = new java.util.TreeSet<>();
        boolean dspark = false;
        for (String n : names) {
            String rest = n.startsWith("model.") ? n.substring(6) : n;
            int dot = rest.indexOf('.', 4);
            stages.add(dot > 0 ? rest.substring(0, dot) : rest);
            dspark |= n.contains("markov_head") || n.contains("confidence_head");
        }
        if (dspark || !stages.equals(java.util.Set.of("mtp.0")))
            throw new CheckpointException(ck.dir(), null, "the mtp.* tensors are not an MTP layer: found " + names.size()
                    + " tensors in " + stages + (dspark ? " with markov_head/confidence_head" : "")
                    + (dspark ? " (the DSpark drafter layout)" : "") + "; an MTP layer is mtp.0 alone");
        mtpMode = true;
        ModelConfig mc = c.mtpBlockConfig();
        int L = c.numLayers, D = c.hidden, n = c.hcMult;
        ModelWeights.Mtp m = new ModelWeights.Mtp();
        try {
            m.block = layer(L, mc.layerTypes[0], false);
            m.eProj = matrix(ln(L, "e_proj.weight"), D, D);
            m.hProj = matrix(ln(L, "h_proj.weight"), D, D);
            m.enorm = vector(ln(L, "enorm.weight"), D);
            m.hnorm = vector(ln(L, "hnorm.weight"), D);
            m.norm = vector(ln(L, "shared_head.norm.weight"), D);
            m.hcHeadFn = matrix(ln(L, "hc_head.hc_fn"), n, (long) n * D);
            m.hcHeadBase = vector(ln(L, "hc_head.hc_base"), n);
            m.hcHeadScale = vector(ln(L, "hc_head.hc_scale"), 1);
        } catch (CheckpointException e) {
            throw new CheckpointException(ck.dir(), null, "the MTP layer is incomplete (" + names.size()
                    + " mtp.0 tensors): " + e.getMessage());
        }
        return m;
    }

    private ModelWeights.Layer layer(int l) throws CheckpointException {
        return layer(l, c.layerTypes[l], c.hashMoe[l]);
    }

    private ModelWeights.Layer layer(int l, AttentionKind kind, boolean hashMoe) throws CheckpointException {
        ModelWeights.Layer y = new ModelWeights.Layer();
        int n = c.hcMult, D = c.hidden, H = c.numHeads, d = c.headDim, q = c.qLoraRank, G = c.oGroups, R = c.oLoraRank;
        int E = c.numExperts, I = c.moeInter;
        int mix = (2 + n) * n;
        y.attnHcFn = matrix(ln(l, "attn_hc.fn"), mix, (long) n * D);
        y.attnHcBase = vector(ln(l, "attn_hc.base"), mix);
        y.attnHcScale = vector(ln(l, "attn_hc.scale"), 3);
        y.ffnHcFn = matrix(ln(l, "ffn_hc.fn"), mix, (long) n * D);
        y.ffnHcBase = vector(ln(l, "ffn_hc.base"), mix);
        y.ffnHcScale = vector(ln(l, "ffn_hc.scale"), 3);
        y.inputNorm = vector(ln(l, "input_layernorm.weight"), D);
        y.postAttnNorm = vector(ln(l, "post_attention_layernorm.weight"), D);

        y.qA = matrix(ln(l, "self_attn.q_a_proj.weight"), q, D);
        y.qANorm = vector(ln(l, "self_attn.q_a_norm.weight"), q);
        y.qB = matrix(ln(l, "self_attn.q_b_proj.weight"), (long) H * d, q);
        y.kv = matrix(ln(l, "self_attn.kv_proj.weight"), d, D);
        y.kvNorm = vector(ln(l, "self_attn.kv_norm.weight"), d);
        y.oA = matrix(ln(l, "self_attn.o_a_proj.weight"), (long) G * R, (long) H * d / G);
        y.oB = matrix(ln(l, "self_attn.o_b_proj.weight"), D, (long) G * R);
        y.sinks = vector(ln(l, "self_attn.sinks"), H);

        if (kind != AttentionKind.SLIDING) {
            boolean csa = kind == AttentionKind.CSA;
            y.compressor = compressor(ln(l, "self_attn.compressor."), csa ? 2 : 1, d, csa ? c.csaRatio : c.hcaRatio);
            if (csa) {
                ModelWeights.Indexer ix = new ModelWeights.Indexer();
                String p = ln(l, "self_attn.compressor.indexer.");
                ix.compressor = compressor(p, 2, c.indexHeadDim, c.csaRatio);
                ix.qB = matrix(p + "q_b_proj.weight", (long) c.indexHeads * c.indexHeadDim, q);
                ix.weightsProj = matrix(p + "scorer.weights_proj.weight", c.indexHeads, D);
                y.indexer = ix;
            }
        }

        y.gate = matrix(ln(l, "mlp.gate.weight"), E, D);
        if (hashMoe) y.tid2eid = tid2eid(ln(l, "mlp.gate.tid2eid"));
        else y.gateBias = vector(ln(l, "mlp.gate.e_score_correction_bias"), E);

        y.w1 = new WeightMatrix[E];
        y.w3 = new WeightMatrix[E];
        y.w2 = new WeightMatrix[E];
        String gateUp = ln(l, "mlp.experts.gate_up_proj"), down = ln(l, "mlp.experts.down_proj");
        boolean stacked = ck.scheme() == TensorNames.Scheme.HF && !mtpMode
                && (ck.find(gateUp) != null || ck.find(ln(l, "mlp.experts.0.gate_proj.weight")) == null);
        if (stacked) {
            WeightMatrix[] gu = matrices(get(gateUp), gateUp, E, 2L * I, D);
            WeightMatrix[] dn = matrices(get(down), down, E, D, I);
            for (int e = 0; e < E; e++) {
                y.w1[e] = renamed(gu[e].rowRange(0, I), expertName(l, e, "gate_proj"));
                y.w3[e] = renamed(gu[e].rowRange(I, 2 * I), expertName(l, e, "up_proj"));
                y.w2[e] = renamed(dn[e], expertName(l, e, "down_proj"));
            }
        } else {
            for (int e = 0; e < E; e++) {
                y.w1[e] = matrix(expertName(l, e, "gate_proj"), I, D);
                y.w3[e] = matrix(expertName(l, e, "up_proj"), I, D);
                y.w2[e] = matrix(expertName(l, e, "down_proj"), D, I);
            }
        }
        y.sharedW1 = matrix(ln(l, "mlp.shared_experts.gate_proj.weight"), I, D);
        y.sharedW3 = matrix(ln(l, "mlp.shared_experts.up_proj.weight"), I, D);
        y.sharedW2 = matrix(ln(l, "mlp.shared_experts.down_proj.weight"), D, I);
        return y;
    }

    private ModelWeights.Compressor compressor(String prefix, int overlap, int width, int ratio) throws CheckpointException {
        ModelWeights.Compressor k = new ModelWeights.Compressor();
        k.kvProj = matrix(prefix + "kv_proj.weight", (long) overlap * width, c.hidden);
        k.gateProj = matrix(prefix + "gate_proj.weight", (long) overlap * width, c.hidden);
        k.positionBias = vector(prefix + "position_bias", ratio, (long) overlap * width);
        k.norm = vector(prefix + "kv_norm.weight", width);
        return k;
    }

    private static String ln(int l, String suffix) {
        return TensorNames.layer(l, suffix);
    }

    private static String expertName(int l, int e, String proj) {
        return ln(l, "mlp.experts." + e + "." + proj + ".weight");
    }

    private static WeightMatrix renamed(WeightMatrix m, String name) {
        return new WeightMatrix(m.format, m.rows, m.cols, m.data, m.scale, m.scaleType, m.rowBase, name);
    }

    // ---------------------------------------------------------------- vectors

    /** A float vector of the given shape (a [1] vector may also be stored as a scalar []). */
    private float[] vector(String canonical, long... shape) throws CheckpointException {
        StoredTensor t = get(canonical);
        boolean scalarOk = shape.length == 1 && shape[0] == 1 && t.shape().length == 0;
        if (!scalarOk) checkShape(t, shape, null);
        return t.toFloats();
    }

    private int[] tid2eid(String canonical) throws CheckpointException {
        StoredTensor t = get(canonical);
        if (t.dtype() != DType.I64 && t.dtype() != DType.I32)
            throw new CheckpointException(t.file(), t.name(), "expected dtype I64 or I32, found " + t.dtype().safetensorsName);
        checkShape(t, new long[]{c.vocabSize, c.expertsPerToken}, null);
        long[] v = t.toLongs();
        int[] out = new int[v.length];
        for (int i = 0; i < v.length; i++) {
            if (v[i] < 0 || v[i] >= c.numExperts)
                throw new CheckpointException(t.file(), t.name(), "token " + (i / c.expertsPerToken) + " maps to expert id "
                        + v[i] + ", outside [0, " + c.numExperts + ")");
            out[i] = (int) v[i];
        }
        return out;
    }

    // ---------------------------------------------------------------- matrices

    /** A 2-D matrix [rows, cols] by canonical name (with its scale tensor when quantised). */
    private WeightMatrix matrix(String canonical, long rows, long cols) throws CheckpointException {
        return matrices(get(canonical), canonical, 0, rows, cols)[0];
    }

    /**
     * Views of a stored matrix: {@code count == 0} → one [rows, cols] matrix from a 2-D tensor;
     * {@code count > 0} → {@code count} matrices from a stacked [count, rows, cols] tensor.
     */
    private WeightMatrix[] matrices(StoredTensor w, String label, int count, long rows, long cols) throws CheckpointException {
        WeightMatrix.Format fmt = formatOf(w);
        StoredTensor scale = fmt == WeightMatrix.Format.FP8_E4M3_B128 || fmt == WeightMatrix.Format.FP4_E2M1_B32 ? findScale(w) : null;
        return build(w, scale, fmt, label, count, rows, cols);
    }

    private StoredTensor findScale(StoredTensor w) throws CheckpointException {
        for (String s : TensorNames.scaleNames(ck.scheme(), w.name())) {
            StoredTensor t = ck.stored(s);
            if (t != null) return t;
        }
        String expected = TensorNames.scaleNames(ck.scheme(), w.name()).getFirst();
        throw new CheckpointException(w.file(), w.name(), "quantised weight (dtype " + w.dtype().safetensorsName
                + ") has no block-scale tensor: '" + expected + "' not found");
    }

    private static WeightMatrix.Format formatOf(StoredTensor w) throws CheckpointException {
        return switch (w.dtype()) {
            case F32 -> WeightMatrix.Format.F32;
            case BF16 -> WeightMatrix.Format.BF16;
            case F16 -> WeightMatrix.Format.F16;
            case F8_E4M3 -> WeightMatrix.Format.FP8_E4M3_B128;
            case I8, U8 -> WeightMatrix.Format.FP4_E2M1_B32;
            default -> throw new CheckpointException(w.file(), w.name(), "dtype " + w.dtype().safetensorsName
                    + " cannot be used for a weight matrix (expected F32, BF16, F16, F8_E4M3 or FP4 packed as I8/U8)");
        };
    }

    /**
     * Validates shapes and builds matrix views from a weight tensor and its optional scale tensor.
     * Package-private for tests.
     */
    static WeightMatrix[] build(StoredTensor w, StoredTensor scale, WeightMatrix.Format fmt, String label,
                                int count, long rows, long cols) throws CheckpointException {
        if (rows > Integer.MAX_VALUE || cols > Integer.MAX_VALUE)
            throw new CheckpointException(w.file(), w.name(), "matrix [" + rows + ", " + cols + "] is too large");
        boolean fp4 = fmt == WeightMatrix.Format.FP4_E2M1_B32, fp8 = fmt == WeightMatrix.Format.FP8_E4M3_B128;
        if (fp4 && cols % WeightMatrix.FP4_BLOCK != 0)
            throw new CheckpointException(w.file(), w.name(), "FP4 weight needs an input dim that is a multiple of 32, config gives " + cols);
        long storedCols = fp4 ? cols / 2 : cols;
        checkShape(w, lead(count, rows, storedCols), fp4 ? "FP4 packed two per byte, [out, in/2] for logical [" + rows + ", " + cols + "]" : null);

        MemorySegment scaleSeg = null;
        DType scaleType = null;
        long scaleRows = 0, scaleCols = 0;
        if (fp8 || fp4) {
            if (fp8) {
                scaleRows = ceilDiv(rows, WeightMatrix.FP8_BLOCK);
                scaleCols = ceilDiv(cols, WeightMatrix.FP8_BLOCK);
            } else {
                scaleRows = rows;
                scaleCols = cols / WeightMatrix.FP4_BLOCK;
            }
            checkShape(scale, lead(count, scaleRows, scaleCols), (fp8 ? "one scale per 128x128 block" : "one scale per 1x32 block")
                    + " of " + w.name());
            switch (scale.dtype()) {
                case F8_E8M0, U8 -> {
                    scaleSeg = scale.data();
                    scaleType = DType.F8_E8M0;
                }
                case F32, BF16, F16, F64 -> {
                    if (fp4) throw new CheckpointException(scale.file(), scale.name(),
                            "FP4 block scales must be E8M0 (F8_E8M0 or U8), found " + scale.dtype().safetensorsName);
                    if (scale.dtype() == DType.F32) scaleSeg = scale.data();
                    else {
                        float[] f = scale.toFloats();
                        scaleSeg = Arena.ofAuto().allocate(4L * f.length, 4);
                        MemorySegment.copy(f, 0, scaleSeg, WeightMatrix.F32_LE, 0, f.length);
                    }
                    scaleType = DType.F32;
                }
                default -> throw new CheckpointException(scale.file(), scale.name(), "unusable block-scale dtype "
                        + scale.dtype().safetensorsName + " (expected F8_E8M0, U8 or F32)");
            }
        }

        long rowBytes = switch (fmt) {
            case F32 -> cols * 4;
            case F16, BF16 -> cols * 2;
            case FP8_E4M3_B128 -> cols;
            case FP4_E2M1_B32 -> cols / 2;
        };
        long dataStride = rows * rowBytes;
        long scaleStride = scaleRows * scaleCols * (scaleType == null ? 0 : scaleType.size);
        int k = Math.max(count, 1);
        WeightMatrix[] out = new WeightMatrix[k];
        for (int e = 0; e < k; e++) {
            MemorySegment d = count == 0 ? w.data() : w.data().asSlice(e * dataStride, dataStride);
            MemorySegment s = scaleSeg == null ? null : count == 0 ? scaleSeg : scaleSeg.asSlice(e * scaleStride, scaleStride);
            String name = count == 0 ? label : label + "[" + e + "]";
            out[e] = new WeightMatrix(fmt, (int) rows, (int) cols, d, s, scaleType, 0, name);
        }
        return out;
    }

    private static long[] lead(int count, long a, long b) {
        return count == 0 ? new long[]{a, b} : new long[]{count, a, b};
    }

    private static long ceilDiv(long a, long b) {
        return (a + b - 1) / b;
    }

    private static void checkShape(StoredTensor t, long[] expected, String note) throws CheckpointException {
        long[] s = t.shape();
        if (!Arrays.equals(s, expected))
            throw new CheckpointException(t.file(), t.name(), "shape mismatch: expected " + Arrays.toString(expected)
                    + (note != null ? " (" + note + ")" : "") + " from config.json, found " + Arrays.toString(s)
                    + " (dtype " + t.dtype().safetensorsName + ")");
    }
}
