package io.ds4j.model;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.json.Json;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * DeepSeek-V4 model configuration with every legacy key folded in (spec section 1).
 * Field names follow the spec's notation; units are elements unless stated.
 */
public final class ModelConfig {
    public int vocabSize = 129280;
    /** D */
    public int hidden = 4096;
    /** L, main decoder layers (MTP not included). */
    public int numLayers = 43;
    /** H */
    public int numHeads = 64;
    /** d */
    public int headDim = 512;
    /** r = int(d * partial_rotary_factor) */
    public int ropeDim = 64;
    /** q' */
    public int qLoraRank = 1024;
    /** G */
    public int oGroups = 8;
    /** R */
    public int oLoraRank = 1024;
    /** W, including the query itself. */
    public int slidingWindow = 128;
    public AttentionKind[] layerTypes;
    /** m_C */
    public int csaRatio = 4;
    /** m_H */
    public int hcaRatio = 128;
    public double ropeTheta = 10000.0;
    public double compressRopeTheta = 160000.0;
    /** YaRN parameters of the compress rope; {@code yarnFactor == 0} means plain rope. */
    public double yarnFactor = 0;
    public double yarnOriginalMax = 0;
    public double yarnBetaFast = 32;
    public double yarnBetaSlow = 1;
    public int indexHeads = 64;
    public int indexHeadDim = 128;
    public int indexTopk = 512;
    /** E */
    public int numExperts = 256;
    /** k */
    public int expertsPerToken = 6;
    /** I, routed and shared expert width. */
    public int moeInter = 2048;
    public double routedScaling = 1.5;
    /** true for hash_moe layers (route by token id). */
    public boolean[] hashMoe;
    public double swigluLimit = 10.0;
    /** n */
    public int hcMult = 4;
    public int sinkhornIters = 20;
    public double hcEps = 1e-6;
    public double rmsEps = 1e-6;
    public int maxPositionEmbeddings = 1048576;
    public int bosTokenId = 0;
    public int eosTokenId = 1;
    public String scoringFunc = "sqrtsoftplus";
    /**
     * MTP depth the config announces ({@code num_nextn_predict_layers}, V4 default 1). Informational: whether a usable
     * MTP layer exists is decided by the tensors present ({@link WeightLoader}); make-model writes one layer when ≥ 1.
     */
    public int mtpLayers = 1;

    private static final ObjectMapper JSON = new ObjectMapper();

    /**
     * Reads {@code config.json}.
     * @throws CheckpointException when the file is missing, not JSON, or holds values the model cannot use
     */
    public static ModelConfig read(Path file) throws CheckpointException {
        if (!Files.isRegularFile(file)) throw new CheckpointException(file, null, "config.json not found");
        JsonNode root;
        try {
            // read as every JSON text is read (Json.read, as request bodies): a syntax error in one line, at its line and column
            root = Json.read(Files.readAllBytes(file), "a file");
        } catch (Json.Unreadable e) {
            throw new CheckpointException(file, null, e.getMessage());
        } catch (IOException e) {
            throw new CheckpointException(file, null, "config.json cannot be read: " + e.getMessage());
        }
        if (root == null || !root.isObject()) throw new CheckpointException(file, null, "config.json is not a JSON object");
        try {
            return fromJson(root);
        } catch (IllegalArgumentException e) {
            throw new CheckpointException(file, null, e.getMessage());
        }
    }

    /**
     * Builds a config from parsed JSON, applying the derivation rules of spec 1.2.
     * @throws IllegalArgumentException naming the key for a value of the wrong type or range
     */
    public static ModelConfig fromJson(JsonNode j) {
        ModelConfig c = new ModelConfig();
        c.vocabSize = intKey(j, "vocab_size", c.vocabSize);
        c.hidden = intKey(j, "hidden_size", c.hidden);
        c.numLayers = intKey(j, "num_hidden_layers", c.numLayers);
        c.numHeads = intKey(j, "num_attention_heads", c.numHeads);
        c.headDim = intKey(j, "head_dim", c.headDim);
        c.qLoraRank = intKey(j, "q_lora_rank", c.qLoraRank);
        c.oGroups = intKey(j, "o_groups", c.oGroups);
        c.oLoraRank = intKey(j, "o_lora_rank", c.oLoraRank);
        c.slidingWindow = intKey(j, "sliding_window", c.slidingWindow);
        c.ropeTheta = numKey(j, "rope_theta", c.ropeTheta);
        c.compressRopeTheta = numKey(j, "compress_rope_theta", c.compressRopeTheta);
        c.indexHeads = intKey(j, "index_n_heads", c.indexHeads);
        c.indexHeadDim = intKey(j, "index_head_dim", c.indexHeadDim);
        c.indexTopk = intKey(j, "index_topk", c.indexTopk);
        c.numExperts = intKey(j, "n_routed_experts", c.numExperts);
        c.expertsPerToken = intKey(j, "num_experts_per_tok", c.expertsPerToken);
        c.moeInter = intKey(j, "moe_intermediate_size", c.moeInter);
        c.routedScaling = numKey(j, "routed_scaling_factor", c.routedScaling);
        c.swigluLimit = numKey(j, "swiglu_limit", c.swigluLimit);
        c.hcMult = intKey(j, "hc_mult", c.hcMult);
        c.sinkhornIters = intKey(j, "hc_sinkhorn_iters", c.sinkhornIters);
        c.hcEps = numKey(j, "hc_eps", c.hcEps);
        c.rmsEps = numKey(j, "rms_norm_eps", c.rmsEps);
        c.maxPositionEmbeddings = intKey(j, "max_position_embeddings", c.maxPositionEmbeddings);
        c.bosTokenId = intKey(j, "bos_token_id", c.bosTokenId);
        if (j.has("eos_token_id") && j.get("eos_token_id").isArray() && !j.get("eos_token_id").isEmpty())
            c.eosTokenId = intValue("eos_token_id[0]", j.get("eos_token_id").get(0));
        else c.eosTokenId = intKey(j, "eos_token_id", c.eosTokenId);
        c.mtpLayers = intKey(j, "num_nextn_predict_layers", c.mtpLayers);
        // before the layers and heads are counted out below, which a zero or negative count would break obscurely
        c.checkDimensions();
        if (j.hasNonNull("scoring_func")) c.scoringFunc = j.get("scoring_func").asText();
        if (!"sqrtsoftplus".equals(c.scoringFunc))
            throw new IllegalArgumentException("scoring_func '" + c.scoringFunc + "' is not supported (DeepSeek-V4 uses sqrtsoftplus)");

        // compress rates: dict, legacy scalar overrides
        if (j.hasNonNull("compress_rates")) {
            JsonNode cr = j.get("compress_rates");
            c.csaRatio = intKey(cr, AttentionKind.CSA.hfName, c.csaRatio);
            c.hcaRatio = intKey(cr, AttentionKind.HCA.hfName, c.hcaRatio);
        }
        c.csaRatio = intKey(j, "compress_rate_csa", c.csaRatio);
        c.hcaRatio = intKey(j, "compress_rate_hca", c.hcaRatio);

        int n = c.numLayers;
        // layer types: explicit > legacy compress_ratios > V4-Pro default; cut to L (spec 1.2)
        List<AttentionKind> types = new ArrayList<>();
        if (j.hasNonNull("layer_types")) {
            for (JsonNode t : array(j, "layer_types")) types.add(AttentionKind.fromHfName(t.asText()));
        } else if (j.hasNonNull("compress_ratios")) {
            for (JsonNode t : array(j, "compress_ratios")) types.add(AttentionKind.fromLegacyRatio(t.asInt()));
        } else {
            for (int l = 0; l < n; l++)
                types.add(l < 2 ? AttentionKind.HCA : (l % 2 == 1 ? AttentionKind.CSA : AttentionKind.HCA));
        }
        if (types.size() < n)
            throw new IllegalArgumentException("layer_types has " + types.size() + " entries but num_hidden_layers is " + n);
        c.layerTypes = types.subList(0, n).toArray(new AttentionKind[0]);

        c.hashMoe = new boolean[n];
        if (j.hasNonNull("mlp_layer_types")) {
            ArrayNode a = array(j, "mlp_layer_types");
            if (a.size() < n) throw new IllegalArgumentException("mlp_layer_types has " + a.size() + " entries but num_hidden_layers is " + n);
            for (int l = 0; l < n; l++) {
                String s = a.get(l).asText();
                if (!s.equals("hash_moe") && !s.equals("moe"))
                    throw new IllegalArgumentException("mlp_layer_types entry '" + s + "' is not hash_moe or moe");
                c.hashMoe[l] = s.equals("hash_moe");
            }
        } else {
            int hash = intKey(j, "num_hash_layers", 3);
            for (int l = 0; l < n; l++) c.hashMoe[l] = l < hash;
        }

        // rope dims: legacy qk_rope_head_dim > partial_rotary_factor > 1/8
        if (j.hasNonNull("qk_rope_head_dim")) c.ropeDim = intKey(j, "qk_rope_head_dim", 64);
        else if (j.hasNonNull("partial_rotary_factor")) c.ropeDim = (int) (c.headDim * numKey(j, "partial_rotary_factor", 0.125));
        else c.ropeDim = c.headDim / 8;

        // compress rope: nested rope_parameters.compress, or flat rope_parameters / rope_scaling (spec 1.2)
        JsonNode rp = j.hasNonNull("rope_parameters") ? j.get("rope_parameters") : j.get("rope_scaling");
        if (rp != null && rp.isObject()) {
            JsonNode comp = rp.has("compress") && rp.get("compress").isObject() ? rp.get("compress") : rp;
            if (rp.has("main") && rp.get("main").isObject() && rp.get("main").has("rope_theta"))
                c.ropeTheta = numKey(rp.get("main"), "rope_theta", c.ropeTheta);
            if (comp != rp && comp.has("rope_theta")) c.compressRopeTheta = numKey(comp, "rope_theta", c.compressRopeTheta);
            String type = comp.has("rope_type") ? comp.get("rope_type").asText() : comp.has("type") ? comp.get("type").asText() : "default";
            if (type.equals("yarn")) {
                c.yarnFactor = numKey(comp, "factor", 0);
                c.yarnOriginalMax = numKey(comp, "original_max_position_embeddings", c.maxPositionEmbeddings);
                c.yarnBetaFast = numKey(comp, "beta_fast", 32);
                c.yarnBetaSlow = numKey(comp, "beta_slow", 1);
                if (c.yarnFactor == 0) c.yarnFactor = c.maxPositionEmbeddings / c.yarnOriginalMax;
            } else if (!type.equals("default")) {
                throw new IllegalArgumentException("rope type '" + type + "' is not supported (default or yarn)");
            }
        }
        c.validate();
        return c;
    }

    /**
     * The smallest context a request may run with: {@code limits.maxContextTokens}' minimum, generate's
     * {@code --max-context}'s, and the least {@code max_position_embeddings} a model may have, since the context in
     * effect is the smaller of the configured one and the model's.
     */
    public static final int MIN_CONTEXT_TOKENS = 16;

    /** Checks the relations between dimensions that the forward relies on. */
    public void validate() {
        checkDimensions();
        req(ropeDim > 0 && ropeDim % 2 == 0 && ropeDim <= headDim, "rope dims " + ropeDim + " must be even and <= head_dim " + headDim);
        req(ropeDim <= indexHeadDim || !usesCsa(), "rope dims must be <= index_head_dim");
        req(numHeads % oGroups == 0, "num_attention_heads " + numHeads + " is not a multiple of o_groups " + oGroups);
        req(expertsPerToken > 0 && expertsPerToken <= numExperts, "num_experts_per_tok must be in 1..n_routed_experts");
        req(csaRatio >= 1 && hcaRatio >= 1, "compress rates must be >= 1");
        req(hcMult >= 1 && sinkhornIters >= 1, "hc_mult and hc_sinkhorn_iters must be >= 1");
        req(indexTopk >= 1, "index_topk must be >= 1");
    }

    /** Each dimension on its own, named by its config.json key with the value given. */
    private void checkDimensions() {
        positive("vocab_size", vocabSize);
        positive("hidden_size", hidden);
        positive("num_hidden_layers", numLayers);
        positive("num_attention_heads", numHeads);
        positive("head_dim", headDim);
        positive("o_groups", oGroups);
        positive("q_lora_rank", qLoraRank);
        positive("o_lora_rank", oLoraRank);
        positive("moe_intermediate_size", moeInter);
        positive("index_n_heads", indexHeads);
        positive("index_head_dim", indexHeadDim);
        req(maxPositionEmbeddings >= MIN_CONTEXT_TOKENS, "max_position_embeddings must be at least " + MIN_CONTEXT_TOKENS
                + " (the smallest context a request runs with), got " + maxPositionEmbeddings);
        // every sequence allocates a ring of sliding_window - 1 + k_max rows per layer (CacheLayout.windowRows) whatever
        // its context; a window wider than the longest context never fills, and 2e9 overflowed the ring's size
        req(slidingWindow >= 1 && slidingWindow <= maxPositionEmbeddings, "sliding_window must be from 1 to"
                + " max_position_embeddings (" + maxPositionEmbeddings + "), got " + slidingWindow);
        tokenId("bos_token_id", bosTokenId);
        tokenId("eos_token_id", eosTokenId);
    }

    private static void positive(String key, int value) {
        req(value > 0, key + " must be positive, got " + value);
    }

    private void tokenId(String key, int value) {
        req(value >= 0 && value < vocabSize, key + " must be a token id from 0 to vocab_size - 1 (" + (vocabSize - 1)
                + "), got " + value);
    }

    private boolean usesCsa() {
        for (AttentionKind k : layerTypes) if (k == AttentionKind.CSA) return true;
        return false;
    }

    /**
     * The config of the MTP block seen as a one-layer model: a sliding-window-only layer (compress ratio 0, the last
     * entry of V4's {@code compress_ratios}) with a top-k routed MoE (router bias, no token-id hashing); every other
     * dimension is this model's.
     */
    public ModelConfig mtpBlockConfig() {
        ModelConfig m = copy();
        m.numLayers = 1;
        m.layerTypes = new AttentionKind[]{AttentionKind.SLIDING};
        m.hashMoe = new boolean[]{false};
        m.mtpLayers = 0;
        return m;
    }

    /** Compression ratio m of a layer, 0 for sliding-only layers. */
    public int ratio(int layer) {
        return switch (layerTypes[layer]) {
            case SLIDING -> 0;
            case CSA -> csaRatio;
            case HCA -> hcaRatio;
        };
    }

    /** Writes this config as a Hugging Face style config.json (explicit layer_types, nested-free rope keys). */
    public ObjectNode toJson() {
        ObjectNode o = JSON.createObjectNode();
        o.put("model_type", "deepseek_v4");
        o.putArray("architectures").add("DeepseekV4ForCausalLM");
        o.put("vocab_size", vocabSize);
        o.put("hidden_size", hidden);
        o.put("num_hidden_layers", numLayers);
        o.put("num_attention_heads", numHeads);
        o.put("num_key_value_heads", 1);
        o.put("head_dim", headDim);
        o.put("qk_rope_head_dim", ropeDim);
        o.put("q_lora_rank", qLoraRank);
        o.put("o_groups", oGroups);
        o.put("o_lora_rank", oLoraRank);
        o.put("sliding_window", slidingWindow);
        ArrayNode lt = o.putArray("layer_types");
        for (AttentionKind k : layerTypes) lt.add(k.hfName);
        ObjectNode cr = o.putObject("compress_rates");
        cr.put(AttentionKind.CSA.hfName, csaRatio);
        cr.put(AttentionKind.HCA.hfName, hcaRatio);
        ArrayNode mt = o.putArray("mlp_layer_types");
        for (boolean h : hashMoe) mt.add(h ? "hash_moe" : "moe");
        o.put("rope_theta", ropeTheta);
        o.put("compress_rope_theta", compressRopeTheta);
        if (yarnFactor > 0) {
            ObjectNode rs = o.putObject("rope_scaling");
            rs.put("type", "yarn");
            rs.put("rope_type", "yarn");
            rs.put("factor", yarnFactor);
            rs.put("original_max_position_embeddings", (int) yarnOriginalMax);
            rs.put("beta_fast", yarnBetaFast);
            rs.put("beta_slow", yarnBetaSlow);
        }
        o.put("index_n_heads", indexHeads);
        o.put("index_head_dim", indexHeadDim);
        o.put("index_topk", indexTopk);
        o.put("n_routed_experts", numExperts);
        o.put("n_shared_experts", 1);
        o.put("num_experts_per_tok", expertsPerToken);
        o.put("moe_intermediate_size", moeInter);
        o.put("routed_scaling_factor", routedScaling);
        o.put("scoring_func", scoringFunc);
        o.put("norm_topk_prob", true);
        o.put("swiglu_limit", swigluLimit);
        o.put("hc_mult", hcMult);
        o.put("hc_sinkhorn_iters", sinkhornIters);
        o.put("hc_eps", hcEps);
        o.put("rms_norm_eps", rmsEps);
        o.put("max_position_embeddings", maxPositionEmbeddings);
        o.put("bos_token_id", bosTokenId);
        o.put("eos_token_id", eosTokenId);
        o.put("tie_word_embeddings", false);
        o.put("hidden_act", "silu");
        o.put("num_nextn_predict_layers", mtpLayers);
        o.put("torch_dtype", "float32");
        return o;
    }

    /** A deep copy. */
    public ModelConfig copy() {
        return fromJson(toJson());
    }

    @Override
    public String toString() {
        return "ModelConfig{L=" + numLayers + ", D=" + hidden + ", H=" + numHeads + ", d=" + headDim + ", r=" + ropeDim
                + ", E=" + numExperts + "x" + expertsPerToken + ", I=" + moeInter + ", V=" + vocabSize
                + ", layers=" + Arrays.toString(layerTypes) + "}";
    }

    private static void req(boolean ok, String msg) {
        if (!ok) throw new IllegalArgumentException(msg);
    }

    private static ArrayNode array(JsonNode j, String key) {
        JsonNode v = j.get(key);
        if (!v.isArray()) throw new IllegalArgumentException("'" + key + "' must be a list");
        return (ArrayNode) v;
    }

    /**
     * A key's int value, def where the key is absent or null (as transformers writes an unset attribute); a fraction or
     * a value past the int range is refused.
     */
    private static int intKey(JsonNode j, String key, int def) {
        JsonNode v = j.get(key);
        return v == null || v.isNull() ? def : intValue(key, v);
    }

    /**
     * A number node as an int, judged on its exact value as written ({@link Json#exact}), so that 4294967360 is not
     * read as 64 nor 1e30 as 2147483647; a refusal shows the value as the file wrote it.
     */
    private static int intValue(String key, JsonNode v) {
        java.math.BigDecimal x = v.isNumber() ? Json.exact(v) : null;
        if (x == null || (x.signum() != 0 && x.stripTrailingZeros().scale() > 0))
            throw new IllegalArgumentException(key + " must be an integer, got " + Json.asWritten(v));
        if (x.compareTo(java.math.BigDecimal.valueOf(Integer.MAX_VALUE)) > 0)
            throw new IllegalArgumentException(key + " must be an integer of at most " + Integer.MAX_VALUE + ", got " + Json.asWritten(v));
        if (x.compareTo(java.math.BigDecimal.valueOf(Integer.MIN_VALUE)) < 0)
            throw new IllegalArgumentException(key + " must be an integer of at least " + Integer.MIN_VALUE + ", got " + Json.asWritten(v));
        return x.intValueExact();
    }

    private static double numKey(JsonNode j, String key, double def) {
        JsonNode v = j.get(key);
        if (v == null || v.isNull()) return def;  // as intKey: null is unset
        if (!v.isNumber()) throw new IllegalArgumentException("'" + key + "' must be a number, got " + v);
        return v.asDouble();
    }
}
