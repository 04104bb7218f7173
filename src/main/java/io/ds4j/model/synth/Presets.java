package io.ds4j.model.synth;

import io.ds4j.model.AttentionKind;
import io.ds4j.model.ModelConfig;

import java.util.List;

/**
 * Named model shapes for synthetic checkpoints ({@code ds4j make-model --preset NAME}).
 *
 * <ul>
 *   <li>{@code tiny}: the spec-8 parity shape shrunk further, but with the real vocabulary (129280, so the vendored
 *       DeepSeek tokenizer works): D 64, 5 layers [S, C, H, C, H], 3 hash layers, H 4, d 32, r 8, q' 32, G 2, R 16,
 *       E 8, k 2, I 32, n 4, W 8, CSA 4, HCA 16, indexer 8×16 top-4, YaRN compress rope (factor 16, original 32),
 *       swiglu_limit 1.0 (clamps fire). About 40 MB in BF16, 74 MB in F32 (embed + lm_head are 33 MB of the BF16
 *       size, the three [V, 2] I64 tid2eid tables 6 MB).</li>
 *   <li>{@code small}: a CPU-benchmark shape, about 466 MB in BF16: D 512, 8 layers [S, S, C, H, C, H, C, H]
 *       (the V4-Flash schedule of spec 1.3), H 16, d 128, r 32, q' 256, G 4, R 256, E 16, k 2, I 384, W 128,
 *       CSA 4, HCA 128, indexer 16×64 top-64, YaRN (16, 65536).</li>
 *   <li>{@code flash-shaped}: V4-Flash's real per-layer dimensions (spec 1.1: D 4096, H 64, d 512, r 64, q' 1024,
 *       G 8, R 1024, I 2048, W 128, CSA 4, HCA 128, indexer 64×128 top-512, YaRN (16, 65536)) at full depth
 *       (default 43 layers in V4-Flash's schedule of spec 1.3: 2 sliding-window, then CSA and HCA alternating, 21 CSA
 *       and 20 HCA) with few routed experts (default 16, k 6), so that it fits one GPU and is made in seconds. Meant
 *       to be written as FP8 + FP4: about 18 GB with the defaults (embed and head BF16 are 2.1 GB of it).</li>
 * </ul>
 * Layer counts and expert counts can be overridden with {@link #get(String, Integer, Integer)}; the attention
 * schedule is then extended by the preset's rule ({@link #compactSchedule} or {@link #flashSchedule}).
 */
public final class Presets {
    private Presets() {}

    /** Names accepted by {@link #get}. */
    public static final List<String> NAMES = List.of("tiny", "small", "flash-shaped");

    /** The preset with its default layer and expert counts. */
    public static ModelConfig get(String name) {
        return get(name, null, null);
    }

    /**
     * A preset with optional overrides.
     * @param layers number of decoder layers, or null for the preset's default
     * @param experts number of routed experts, or null for the preset's default
     * @throws IllegalArgumentException for an unknown name or out-of-range override
     */
    public static ModelConfig get(String name, Integer layers, Integer experts) {
        if (layers != null && (layers < 1 || layers > 1000))
            throw new IllegalArgumentException("--layers must be in 1..1000, got " + layers);
        ModelConfig c = switch (name) {
            case "tiny" -> tiny(layers == null ? 5 : layers);
            case "small" -> small(layers == null ? 8 : layers);
            case "flash-shaped", "flash" -> flashShaped(layers == null ? 43 : layers);
            default -> throw new IllegalArgumentException("unknown preset '" + name + "' (expected one of " + NAMES + ")");
        };
        if (experts != null) {
            if (experts < c.expertsPerToken || experts > 4096)
                throw new IllegalArgumentException("--experts must be in " + c.expertsPerToken + "..4096 for preset '" + name
                        + "' (it routes each token to " + c.expertsPerToken + " experts), got " + experts);
            c.numExperts = experts;
        }
        c.validate();
        return c;
    }

    /** Layer 0 sliding-only, then CSA and HCA alternating: S, C, H, C, H, ... */
    public static AttentionKind[] compactSchedule(int layers) {
        AttentionKind[] k = new AttentionKind[layers];
        for (int l = 0; l < layers; l++)
            k[l] = l == 0 ? AttentionKind.SLIDING : (l % 2 == 1 ? AttentionKind.CSA : AttentionKind.HCA);
        return k;
    }

    /** The V4-Flash schedule of spec 1.3: layers 0 and 1 sliding-only, then CSA on even and HCA on odd layers. */
    public static AttentionKind[] flashSchedule(int layers) {
        AttentionKind[] k = new AttentionKind[layers];
        for (int l = 0; l < layers; l++)
            k[l] = l < 2 ? AttentionKind.SLIDING : (l % 2 == 0 ? AttentionKind.CSA : AttentionKind.HCA);
        return k;
    }

    private static void schedule(ModelConfig c, int layers, AttentionKind[] kinds) {
        c.numLayers = layers;
        c.layerTypes = kinds;
        c.hashMoe = new boolean[layers];
        for (int l = 0; l < layers; l++) c.hashMoe[l] = l < 3;
    }

    private static ModelConfig tiny(int layers) {
        ModelConfig c = new ModelConfig();
        c.vocabSize = 129280;
        c.hidden = 64;
        c.numHeads = 4;
        c.headDim = 32;
        c.ropeDim = 8;
        c.qLoraRank = 32;
        c.oGroups = 2;
        c.oLoraRank = 16;
        c.numExperts = 8;
        c.expertsPerToken = 2;
        c.moeInter = 32;
        c.hcMult = 4;
        c.slidingWindow = 8;
        c.csaRatio = 4;
        c.hcaRatio = 16;
        c.indexHeads = 8;
        c.indexHeadDim = 16;
        c.indexTopk = 4;
        c.yarnFactor = 16;
        c.yarnOriginalMax = 32;
        c.swigluLimit = 1.0;
        schedule(c, layers, compactSchedule(layers));
        return c;
    }

    private static ModelConfig small(int layers) {
        ModelConfig c = new ModelConfig();
        c.vocabSize = 129280;
        c.hidden = 512;
        c.numHeads = 16;
        c.headDim = 128;
        c.ropeDim = 32;
        c.qLoraRank = 256;
        c.oGroups = 4;
        c.oLoraRank = 256;
        c.numExperts = 16;
        c.expertsPerToken = 2;
        c.moeInter = 384;
        c.hcMult = 4;
        c.slidingWindow = 128;
        c.csaRatio = 4;
        c.hcaRatio = 128;
        c.indexHeads = 16;
        c.indexHeadDim = 64;
        c.indexTopk = 64;
        c.yarnFactor = 16;
        c.yarnOriginalMax = 65536;
        schedule(c, layers, flashSchedule(layers));
        return c;
    }

    private static ModelConfig flashShaped(int layers) {
        ModelConfig c = new ModelConfig(); // class defaults are V4-Flash's dimensions
        c.vocabSize = 129280;
        c.hidden = 4096;
        c.numHeads = 64;
        c.headDim = 512;
        c.ropeDim = 64;
        c.qLoraRank = 1024;
        c.oGroups = 8;
        c.oLoraRank = 1024;
        c.moeInter = 2048;
        c.numExperts = 16;
        c.expertsPerToken = 6;
        c.slidingWindow = 128;
        c.csaRatio = 4;
        c.hcaRatio = 128;
        c.indexHeads = 64;
        c.indexHeadDim = 128;
        c.indexTopk = 512;
        c.yarnFactor = 16;
        c.yarnOriginalMax = 65536;
        c.swigluLimit = 10.0;
        schedule(c, layers, flashSchedule(layers));
        return c;
    }
}
