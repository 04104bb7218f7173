package io.ds4j.model;

import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Tensor naming schemes and the mapping between them (spec 2.4). Canonical names are the Hugging Face state-dict
 * names of spec 2.1–2.3 ({@code model.layers.0.self_attn.q_a_proj.weight}); the original DeepSeek checkpoint uses
 * {@code layers.0.attn.wq_a.weight}. Routed experts have no one-to-one mapping (HF stacks them into
 * {@code mlp.experts.gate_up_proj}/{@code down_proj}); the per-expert forms
 * {@code model.layers.{l}.mlp.experts.{e}.{gate,up,down}_proj.weight} ↔ {@code layers.{l}.ffn.experts.{e}.w{1,3,2}.weight}
 * are mapped too.
 */
public final class TensorNames {
    private TensorNames() {}

    /** A checkpoint's naming scheme. */
    public enum Scheme {
        /** Hugging Face names ({@code model.embed_tokens.weight}, spec 2.1–2.3). */
        HF,
        /** Original DeepSeek names ({@code embed.weight}, spec 2.4). */
        ORIGINAL
    }

    /** Top-level names: canonical HF → original. */
    private static final Map<String, String> TOP = Map.of(
            "model.embed_tokens.weight", "embed.weight",
            "lm_head.weight", "head.weight",
            "model.norm.weight", "norm.weight",
            "model.hc_head.hc_fn", "hc_head_fn",
            "model.hc_head.hc_base", "hc_head_base",
            "model.hc_head.hc_scale", "hc_head_scale");

    /** Layer-relative names: canonical HF suffix (after {@code model.layers.{l}.}) → original suffix (after {@code layers.{l}.}). */
    private static final List<String[]> LAYER = List.of(
            new String[]{"attn_hc.fn", "hc_attn_fn"},
            new String[]{"attn_hc.base", "hc_attn_base"},
            new String[]{"attn_hc.scale", "hc_attn_scale"},
            new String[]{"ffn_hc.fn", "hc_ffn_fn"},
            new String[]{"ffn_hc.base", "hc_ffn_base"},
            new String[]{"ffn_hc.scale", "hc_ffn_scale"},
            new String[]{"input_layernorm.weight", "attn_norm.weight"},
            new String[]{"post_attention_layernorm.weight", "ffn_norm.weight"},
            new String[]{"self_attn.q_a_proj.weight", "attn.wq_a.weight"},
            new String[]{"self_attn.q_a_norm.weight", "attn.q_norm.weight"},
            new String[]{"self_attn.q_b_proj.weight", "attn.wq_b.weight"},
            new String[]{"self_attn.kv_proj.weight", "attn.wkv.weight"},
            new String[]{"self_attn.kv_norm.weight", "attn.kv_norm.weight"},
            new String[]{"self_attn.o_a_proj.weight", "attn.wo_a.weight"},
            new String[]{"self_attn.o_b_proj.weight", "attn.wo_b.weight"},
            new String[]{"self_attn.sinks", "attn.attn_sink"},
            new String[]{"self_attn.compressor.kv_proj.weight", "attn.compressor.wkv.weight"},
            new String[]{"self_attn.compressor.gate_proj.weight", "attn.compressor.wgate.weight"},
            new String[]{"self_attn.compressor.position_bias", "attn.compressor.ape"},
            new String[]{"self_attn.compressor.kv_norm.weight", "attn.compressor.norm.weight"},
            new String[]{"self_attn.compressor.indexer.kv_proj.weight", "attn.indexer.compressor.wkv.weight"},
            new String[]{"self_attn.compressor.indexer.gate_proj.weight", "attn.indexer.compressor.wgate.weight"},
            new String[]{"self_attn.compressor.indexer.position_bias", "attn.indexer.compressor.ape"},
            new String[]{"self_attn.compressor.indexer.kv_norm.weight", "attn.indexer.compressor.norm.weight"},
            new String[]{"self_attn.compressor.indexer.q_b_proj.weight", "attn.indexer.wq_b.weight"},
            new String[]{"self_attn.compressor.indexer.scorer.weights_proj.weight", "attn.indexer.weights_proj.weight"},
            new String[]{"mlp.gate.weight", "ffn.gate.weight"},
            new String[]{"mlp.gate.e_score_correction_bias", "ffn.gate.bias"},
            new String[]{"mlp.gate.tid2eid", "ffn.gate.tid2eid"},
            new String[]{"mlp.shared_experts.gate_proj.weight", "ffn.shared_experts.w1.weight"},
            new String[]{"mlp.shared_experts.up_proj.weight", "ffn.shared_experts.w3.weight"},
            new String[]{"mlp.shared_experts.down_proj.weight", "ffn.shared_experts.w2.weight"});

    private static final Map<String, String> LAYER_TO_ORIG = toMap(0);
    private static final Map<String, String> LAYER_TO_HF = toMap(1);
    private static final Pattern HF_LAYER = Pattern.compile("model\\.layers\\.(\\d+)\\.(.+)");
    private static final Pattern ORIG_LAYER = Pattern.compile("layers\\.(\\d+)\\.(.+)");
    private static final Pattern HF_EXPERT = Pattern.compile("mlp\\.experts\\.(\\d+)\\.(gate|up|down)_proj\\.weight");
    private static final Pattern ORIG_EXPERT = Pattern.compile("ffn\\.experts\\.(\\d+)\\.w([123])\\.weight");

    private static Map<String, String> toMap(int from) {
        java.util.HashMap<String, String> m = new java.util.HashMap<>();
        for (String[] p : LAYER) m.put(p[from], p[1 - from]);
        return Map.copyOf(m);
    }

    /**
     * Original DeepSeek name of a canonical HF name (spec 2.4).
     * @return the original name, or null when there is none (stacked routed experts, unknown names)
     */
    public static String toOriginal(String hf) {
        String top = TOP.get(hf);
        if (top != null) return top;
        Matcher m = HF_LAYER.matcher(hf);
        if (!m.matches()) return null;
        String rest = m.group(2), o = LAYER_TO_ORIG.get(rest);
        if (o != null) return "layers." + m.group(1) + "." + o;
        Matcher e = HF_EXPERT.matcher(rest);
        if (e.matches()) {
            String w = switch (e.group(2)) { case "gate" -> "w1"; case "up" -> "w3"; default -> "w2"; };
            return "layers." + m.group(1) + ".ffn.experts." + e.group(1) + "." + w + ".weight";
        }
        return null;
    }

    /**
     * Canonical HF name of an original DeepSeek name (inverse of {@link #toOriginal}).
     * @return the HF name, or null when there is none ({@code mtp.*}, scale tensors, unknown names)
     */
    public static String toHf(String original) {
        for (Map.Entry<String, String> t : TOP.entrySet()) if (t.getValue().equals(original)) return t.getKey();
        Matcher m = ORIG_LAYER.matcher(original);
        if (!m.matches()) return null;
        String rest = m.group(2), h = LAYER_TO_HF.get(rest);
        if (h != null) return "model.layers." + m.group(1) + "." + h;
        Matcher e = ORIG_EXPERT.matcher(rest);
        if (e.matches()) {
            String p = switch (e.group(2)) { case "1" -> "gate"; case "3" -> "up"; default -> "down"; };
            return "model.layers." + m.group(1) + ".mlp.experts." + e.group(1) + "." + p + "_proj.weight";
        }
        return null;
    }

    /** The name of a canonical HF tensor in the given scheme (null when it has none). */
    public static String inScheme(Scheme scheme, String hf) {
        return scheme == Scheme.HF ? hf : toOriginal(hf);
    }

    /**
     * Candidate names of the block-scale tensor that accompanies a quantised weight stored as {@code weightName}:
     * original scheme {@code <prefix>.scale}; HF fp8 scheme {@code <name>_scale_inv} (so
     * {@code X.weight → X.weight_scale_inv}, {@code experts.gate_up_proj → experts.gate_up_proj_scale_inv}).
     */
    public static List<String> scaleNames(Scheme scheme, String weightName) {
        String prefix = weightName.endsWith(".weight") ? weightName.substring(0, weightName.length() - 7) : weightName;
        return scheme == Scheme.ORIGINAL
                ? List.of(prefix + ".scale", weightName + "_scale_inv")
                : List.of(weightName + "_scale_inv", prefix + ".scale");
    }

    /** Prefix of the (single) MTP layer's tensors, in every naming scheme. */
    public static final String MTP_PREFIX = "mtp.0.";

    /** MTP-only tensors: canonical suffix → original suffix (after {@code mtp.0.}). */
    private static final Map<String, String> MTP_EXTRA = Map.of(
            "e_proj.weight", "e_proj.weight",
            "h_proj.weight", "h_proj.weight",
            "enorm.weight", "enorm.weight",
            "hnorm.weight", "hnorm.weight",
            "shared_head.norm.weight", "norm.weight",
            "hc_head.hc_fn", "hc_head_fn",
            "hc_head.hc_base", "hc_head_base",
            "hc_head.hc_scale", "hc_head_scale");

    /**
     * Stored name of an MTP tensor. Hugging Face has no naming for the MTP layer (its loader drops {@code mtp.*}), so
     * checkpoints of both schemes keep DeepSeek's original one: {@code mtp.0.} + the original layer suffix
     * ({@code attn.wq_a.weight}, {@code ffn.experts.3.w1.weight}, ...) or an MTP-only name ({@code e_proj.weight},
     * {@code h_proj.weight}, {@code enorm.weight}, {@code hnorm.weight}, {@code norm.weight}, {@code hc_head_fn},
     * {@code hc_head_base}, {@code hc_head_scale}).
     * @param suffix a canonical HF layer suffix ({@code self_attn.q_a_proj.weight}, {@code mlp.experts.3.gate_proj.weight})
     *               or one of the MTP-only canonical suffixes ({@code e_proj.weight}, {@code shared_head.norm.weight},
     *               {@code hc_head.hc_fn}, ...)
     * @return the stored name, or null for an unknown suffix
     */
    public static String mtp(String suffix) {
        String x = MTP_EXTRA.get(suffix);
        if (x != null) return MTP_PREFIX + x;
        String o = toOriginal("model.layers.0." + suffix);
        return o == null ? null : MTP_PREFIX + o.substring("layers.0.".length());
    }

    /** Canonical HF name of a layer tensor: {@code model.layers.{l}.{suffix}}. */
    public static String layer(int l, String suffix) {
        return "model.layers." + l + "." + suffix;
    }
}
