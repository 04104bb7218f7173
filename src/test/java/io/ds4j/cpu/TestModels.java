package io.ds4j.cpu;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.WeightMatrix;

import java.util.SplittableRandom;

/** In-memory random models for engine tests (no files involved). */
final class TestModels {
    private TestModels() {}

    /** A very small config exercising all three attention kinds, both MoE kinds, YaRN and a pruning indexer. */
    static ModelConfig microConfig() {
        return microConfig(2, "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                "compressed_sparse_attention", "heavily_compressed_attention");
    }

    /** {@link #microConfig()}'s dimensions with these layers, the first hashLayers of them with hash-routed MoE. */
    static ModelConfig microConfig(int hashLayers, String... layerTypes) {
        ObjectMapper om = new ObjectMapper();
        ObjectNode j = om.createObjectNode();
        j.put("vocab_size", 97).put("hidden_size", 32).put("num_hidden_layers", layerTypes.length).put("num_attention_heads", 4)
                .put("head_dim", 16).put("qk_rope_head_dim", 4).put("q_lora_rank", 16).put("o_groups", 2)
                .put("o_lora_rank", 8).put("sliding_window", 4).put("index_n_heads", 4).put("index_head_dim", 8)
                .put("index_topk", 2).put("n_routed_experts", 4).put("num_experts_per_tok", 2)
                .put("moe_intermediate_size", 16).put("hc_mult", 4).put("num_hash_layers", hashLayers).put("swiglu_limit", 1.0);
        var types = j.putArray("layer_types");
        for (String t : layerTypes) types.add(t);
        j.putObject("compress_rates").put("compressed_sparse_attention", 4).put("heavily_compressed_attention", 8);
        j.putObject("rope_scaling").put("type", "yarn").put("factor", 4).put("original_max_position_embeddings", 16)
                .put("beta_fast", 32).put("beta_slow", 1);
        return ModelConfig.fromJson(j);
    }

    static ModelWeights random(ModelConfig c, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        ModelWeights w = new ModelWeights(c);
        int D = c.hidden, n = c.hcMult, d = c.headDim, H = c.numHeads;
        w.embed = mat(r, c.vocabSize, D, 1.0, "embed");
        w.hcHeadFn = mat(r, n, n * D, 0.1, "hc_head_fn");
        w.hcHeadBase = vec(r, n, 0, 0.5);
        w.hcHeadScale = vec(r, 1, 1, 0.2);
        w.finalNorm = vec(r, D, 1, 0.1);
        w.lmHead = mat(r, c.vocabSize, D, 1 / Math.sqrt(D), "head");
        for (int l = 0; l < c.numLayers; l++) {
            ModelWeights.Layer L = new ModelWeights.Layer();
            int hc = (2 + n) * n;
            L.attnHcFn = mat(r, hc, n * D, 0.1, "attn_hc");
            L.ffnHcFn = mat(r, hc, n * D, 0.1, "ffn_hc");
            L.attnHcBase = vec(r, hc, 0, 0.5);
            L.ffnHcBase = vec(r, hc, 0, 0.5);
            L.attnHcScale = vec(r, 3, 1, 0.3);
            L.ffnHcScale = vec(r, 3, 1, 0.3);
            L.inputNorm = vec(r, D, 1, 0.1);
            L.postAttnNorm = vec(r, D, 1, 0.1);
            L.qA = mat(r, c.qLoraRank, D, 1 / Math.sqrt(D), "qa");
            L.qANorm = vec(r, c.qLoraRank, 1, 0.1);
            L.qB = mat(r, H * d, c.qLoraRank, 1 / Math.sqrt(c.qLoraRank), "qb");
            L.kv = mat(r, d, D, 1 / Math.sqrt(D), "kv");
            L.kvNorm = vec(r, d, 1, 0.1);
            L.oA = mat(r, c.oGroups * c.oLoraRank, H * d / c.oGroups, 1 / Math.sqrt(H * d / c.oGroups), "oa");
            L.oB = mat(r, D, c.oGroups * c.oLoraRank, 1 / Math.sqrt(c.oGroups * c.oLoraRank), "ob");
            L.sinks = vec(r, H, 0, 1);
            AttentionKind k = c.layerTypes[l];
            if (k != AttentionKind.SLIDING) L.compressor = comp(r, c, d, c.ratio(l), k == AttentionKind.CSA);
            if (k == AttentionKind.CSA) {
                L.indexer = new ModelWeights.Indexer();
                L.indexer.compressor = comp(r, c, c.indexHeadDim, c.csaRatio, true);
                L.indexer.qB = mat(r, c.indexHeads * c.indexHeadDim, c.qLoraRank, 1 / Math.sqrt(c.qLoraRank), "iqb");
                float[] wp = new float[c.indexHeads * D];
                for (int i = 0; i < wp.length; i++) wp[i] = (float) Math.abs(r.nextGaussian() / Math.sqrt(D));
                L.indexer.weightsProj = WeightMatrix.ofFloats(wp, c.indexHeads, D, "iw");
            }
            L.gate = mat(r, c.numExperts, D, 1 / Math.sqrt(D), "gate");
            if (c.hashMoe[l]) {
                L.tid2eid = new int[c.vocabSize * c.expertsPerToken];
                for (int t = 0; t < c.vocabSize; t++) {
                    int[] perm = perm(r, c.numExperts);
                    for (int j = 0; j < c.expertsPerToken; j++) L.tid2eid[t * c.expertsPerToken + j] = perm[j];
                }
            } else L.gateBias = vec(r, c.numExperts, 0, 0.1);
            int E = c.numExperts, I = c.moeInter;
            L.w1 = new WeightMatrix[E];
            L.w2 = new WeightMatrix[E];
            L.w3 = new WeightMatrix[E];
            for (int e = 0; e < E; e++) {
                L.w1[e] = mat(r, I, D, 1 / Math.sqrt(D) * 2, "w1");
                L.w3[e] = mat(r, I, D, 1 / Math.sqrt(D) * 2, "w3");
                L.w2[e] = mat(r, D, I, 1 / Math.sqrt(I), "w2");
            }
            L.sharedW1 = mat(r, I, D, 1 / Math.sqrt(D) * 2, "sw1");
            L.sharedW3 = mat(r, I, D, 1 / Math.sqrt(D) * 2, "sw3");
            L.sharedW2 = mat(r, D, I, 1 / Math.sqrt(I), "sw2");
            w.layers[l] = L;
        }
        return w;
    }

    private static ModelWeights.Compressor comp(SplittableRandom r, ModelConfig c, int w, int m, boolean overlap) {
        ModelWeights.Compressor k = new ModelWeights.Compressor();
        int cw = overlap ? 2 * w : w;
        k.kvProj = mat(r, cw, c.hidden, 1 / Math.sqrt(c.hidden), "ckv");
        k.gateProj = mat(r, cw, c.hidden, 1 / Math.sqrt(c.hidden), "cg");
        k.positionBias = vec(r, m * cw, 0, 0.5);
        k.norm = vec(r, w, 1, 0.1);
        return k;
    }

    private static int[] perm(SplittableRandom r, int n) {
        int[] p = new int[n];
        for (int i = 0; i < n; i++) p[i] = i;
        for (int i = n - 1; i > 0; i--) {
            int j = r.nextInt(i + 1), t = p[i];
            p[i] = p[j];
            p[j] = t;
        }
        return p;
    }

    static WeightMatrix mat(SplittableRandom r, int rows, int cols, double std, String name) {
        float[] a = new float[rows * cols];
        for (int i = 0; i < a.length; i++) a[i] = (float) (r.nextGaussian() * std);
        return WeightMatrix.ofFloats(a, rows, cols, name);
    }

    static float[] vec(SplittableRandom r, int n, double mean, double std) {
        float[] a = new float[n];
        for (int i = 0; i < n; i++) a[i] = (float) (mean + r.nextGaussian() * std);
        return a;
    }
}
