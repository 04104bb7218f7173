package io.ds4j.model;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.function.UnaryOperator;

/**
 * Test fixtures: a tiny random DeepSeek-V4 model held as logical (dequantised) values per canonical HF name,
 * which can be written in either naming scheme, plain or quantised (FP8 dense projections, FP4 routed experts).
 * The tensor list is written out here independently of {@link WeightLoader} (spec 2.1–2.4).
 */
final class LoaderFixtures {
    static final ObjectMapper JSON = new ObjectMapper();

    /** Tiny config: 2 layers (CSA, HCA), V 64, D 32, H 2, d 16, r 4, q' 16, G 2, R 8, E 4, k 2, n 2, W 4. */
    static ModelConfig tinyConfig(int inter) {
        ObjectNode j = JSON.createObjectNode();
        j.put("vocab_size", 64).put("hidden_size", 32).put("num_hidden_layers", 2).put("num_attention_heads", 2)
                .put("head_dim", 16).put("qk_rope_head_dim", 4).put("q_lora_rank", 16).put("o_groups", 2)
                .put("o_lora_rank", 8).put("n_routed_experts", 4).put("num_experts_per_tok", 2)
                .put("moe_intermediate_size", inter).put("hc_mult", 2).put("sliding_window", 4)
                .put("index_n_heads", 2).put("index_head_dim", 8).put("index_topk", 2).put("num_hash_layers", 1);
        j.putArray("layer_types").add("compressed_sparse_attention").add("heavily_compressed_attention");
        j.putObject("compress_rates").put("compressed_sparse_attention", 4).put("heavily_compressed_attention", 8);
        return ModelConfig.fromJson(j);
    }

    enum Quant { NONE, FP8, FP4 }

    /** One logical tensor. For FP8/FP4, {@code codes}/{@code scales} hold the quantised bytes. */
    static final class T {
        long[] shape;
        float[] v;
        long[] ints;
        DType plain = DType.F32;
        Quant quant = Quant.NONE;
        byte[] codes, scales;
    }

    /** A stored tensor about to be written. */
    record S(DType dtype, long[] shape, byte[] bytes) {}

    final ModelConfig cfg;
    final boolean quantised;
    final Map<String, T> tensors = new LinkedHashMap<>();
    private final Random rnd;

    LoaderFixtures(ModelConfig cfg, long seed, boolean quantised) {
        this.cfg = cfg;
        this.quantised = quantised;
        this.rnd = new Random(seed);
        int n = cfg.hcMult, D = cfg.hidden, V = cfg.vocabSize, H = cfg.numHeads, d = cfg.headDim, q = cfg.qLoraRank;
        int G = cfg.oGroups, R = cfg.oLoraRank, E = cfg.numExperts, I = cfg.moeInter, mix = (2 + n) * n;
        f("model.embed_tokens.weight", DType.BF16, V, D);
        f("lm_head.weight", DType.F16, V, D);
        f("model.norm.weight", DType.F32, D);
        f("model.hc_head.hc_fn", DType.F32, n, (long) n * D);
        f("model.hc_head.hc_base", DType.F32, n);
        f("model.hc_head.hc_scale", DType.F32, 1);
        for (int l = 0; l < cfg.numLayers; l++) {
            String p = "model.layers." + l + ".";
            for (String site : new String[]{"attn_hc.", "ffn_hc."}) {
                f(p + site + "fn", DType.F32, mix, (long) n * D);
                f(p + site + "base", DType.F32, mix);
                f(p + site + "scale", DType.F32, 3);
            }
            f(p + "input_layernorm.weight", DType.BF16, D);
            f(p + "post_attention_layernorm.weight", DType.F16, D);
            dense(p + "self_attn.q_a_proj.weight", q, D);
            f(p + "self_attn.q_a_norm.weight", DType.F32, q);
            dense(p + "self_attn.q_b_proj.weight", (long) H * d, q);
            dense(p + "self_attn.kv_proj.weight", d, D);
            f(p + "self_attn.kv_norm.weight", DType.F32, d);
            dense(p + "self_attn.o_a_proj.weight", (long) G * R, (long) H * d / G);
            dense(p + "self_attn.o_b_proj.weight", D, (long) G * R);
            f(p + "self_attn.sinks", DType.F32, H);
            AttentionKind k = cfg.layerTypes[l];
            if (k != AttentionKind.SLIDING) {
                int c = k == AttentionKind.CSA ? 2 : 1, m = cfg.ratio(l);
                String cp = p + "self_attn.compressor.";
                f(cp + "kv_proj.weight", DType.BF16, (long) c * d, D);
                f(cp + "gate_proj.weight", DType.F32, (long) c * d, D);
                f(cp + "position_bias", DType.F32, m, (long) c * d);
                f(cp + "kv_norm.weight", DType.F32, d);
                if (k == AttentionKind.CSA) {
                    int dI = cfg.indexHeadDim, HI = cfg.indexHeads;
                    String ip = cp + "indexer.";
                    f(ip + "kv_proj.weight", DType.F32, 2L * dI, D);
                    f(ip + "gate_proj.weight", DType.BF16, 2L * dI, D);
                    f(ip + "position_bias", DType.F32, m, 2L * dI);
                    f(ip + "kv_norm.weight", DType.F32, dI);
                    dense(ip + "q_b_proj.weight", (long) HI * dI, q);
                    f(ip + "scorer.weights_proj.weight", DType.BF16, HI, D);
                }
            }
            f(p + "mlp.gate.weight", DType.F32, E, D);
            if (cfg.hashMoe[l]) {
                T t = new T();
                t.shape = new long[]{V, cfg.expertsPerToken};
                t.ints = new long[V * cfg.expertsPerToken];
                for (int i = 0; i < t.ints.length; i++) t.ints[i] = rnd.nextInt(E);
                tensors.put(p + "mlp.gate.tid2eid", t);
            } else {
                f(p + "mlp.gate.e_score_correction_bias", DType.F32, E);
            }
            for (int e = 0; e < E; e++) {
                expert(p + "mlp.experts." + e + ".gate_proj.weight", I, D);
                expert(p + "mlp.experts." + e + ".up_proj.weight", I, D);
                expert(p + "mlp.experts." + e + ".down_proj.weight", D, I);
            }
            dense(p + "mlp.shared_experts.gate_proj.weight", I, D);
            dense(p + "mlp.shared_experts.up_proj.weight", I, D);
            dense(p + "mlp.shared_experts.down_proj.weight", D, I);
        }
    }

    // ------------------------------------------------------------------ generation

    private void f(String name, DType dt, long... shape) {
        T t = new T();
        t.shape = shape;
        t.plain = dt;
        int count = (int) (shape.length == 1 ? shape[0] : shape[0] * shape[1]);
        t.v = new float[count];
        for (int i = 0; i < count; i++) t.v[i] = roundTo(dt, (float) rnd.nextGaussian());
        tensors.put(name, t);
    }

    private void dense(String name, long rows, long cols) {
        if (!quantised) {
            f(name, DType.BF16, rows, cols);
            return;
        }
        T t = new T();
        t.shape = new long[]{rows, cols};
        t.quant = Quant.FP8;
        t.codes = fp8Codes(rnd, (int) (rows * cols));
        t.scales = e8m0Scales(rnd, (int) (ceil128(rows) * ceil128(cols)));
        t.v = dequantFp8(t.codes, t.scales, (int) rows, (int) cols);
        tensors.put(name, t);
    }

    private void expert(String name, long rows, long cols) {
        if (!quantised) {
            f(name, DType.BF16, rows, cols);
            return;
        }
        T t = new T();
        t.shape = new long[]{rows, cols};
        t.quant = Quant.FP4;
        t.codes = new byte[(int) (rows * cols / 2)];
        rnd.nextBytes(t.codes);
        t.scales = e8m0Scales(rnd, (int) (rows * cols / 32));
        t.v = dequantFp4(t.codes, t.scales, (int) rows, (int) cols);
        tensors.put(name, t);
    }

    static long ceil128(long x) {
        return (x + 127) / 128;
    }

    /** Random e4m3 codes, NaN codes (0x7F, 0xFF) excluded. */
    static byte[] fp8Codes(Random rnd, int n) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) {
            int v;
            do v = rnd.nextInt(256); while ((v & 0x7F) == 0x7F);
            b[i] = (byte) v;
        }
        return b;
    }

    /** Random E8M0 scale bytes near 1.0 (2^-6 … 2^5). */
    static byte[] e8m0Scales(Random rnd, int n) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) b[i] = (byte) (121 + rnd.nextInt(12));
        return b;
    }

    /** Independent e4m3fn decoder (bias 7, no infinities, S.1111.111 = NaN). */
    static float e4m3(int b) {
        int s = (b >> 7) & 1, e = (b >> 3) & 15, m = b & 7;
        double v = e == 0 ? m / 8.0 * Math.pow(2, -6) : (1 + m / 8.0) * Math.pow(2, e - 7);
        return (float) (s == 1 ? -v : v);
    }

    static float e8m0(int b) {
        return (float) Math.pow(2, (b & 0xFF) - 127);
    }

    static final float[] FP4 = {0f, .5f, 1f, 1.5f, 2f, 3f, 4f, 6f, -0f, -.5f, -1f, -1.5f, -2f, -3f, -4f, -6f};

    static float[] dequantFp8(byte[] codes, byte[] scales, int rows, int cols) {
        int gc = (int) ceil128(cols);
        float[] v = new float[rows * cols];
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++)
                v[r * cols + c] = e4m3(codes[r * cols + c] & 0xFF) * e8m0(scales[(r / 128) * gc + c / 128]);
        return v;
    }

    static float[] dequantFp4(byte[] packed, byte[] scales, int rows, int cols) {
        float[] v = new float[rows * cols];
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) {
                int b = packed[r * cols / 2 + c / 2] & 0xFF;
                int nib = (c % 2 == 0) ? b & 15 : b >> 4;
                v[r * cols + c] = FP4[nib] * e8m0(scales[r * (cols / 32) + c / 32]);
            }
        return v;
    }

    static float roundTo(DType dt, float x) {
        return switch (dt) {
            case F32 -> x;
            case BF16 -> Float.intBitsToFloat((SafetensorsWriter.bf16(x) & 0xFFFF) << 16);
            case F16 -> Float.float16ToFloat(SafetensorsWriter.f16(x));
            default -> throw new IllegalArgumentException(dt.toString());
        };
    }

    // ------------------------------------------------------------------ encoding

    static byte[] encode(DType dt, float[] v) {
        ByteBuffer b = ByteBuffer.allocate(v.length * dt.size).order(ByteOrder.LITTLE_ENDIAN);
        for (float x : v) {
            switch (dt) {
                case F32 -> b.putFloat(x);
                case BF16 -> b.putShort(SafetensorsWriter.bf16(x));
                case F16 -> b.putShort(SafetensorsWriter.f16(x));
                default -> throw new IllegalArgumentException(dt.toString());
            }
        }
        return b.array();
    }

    static byte[] encodeInts(DType dt, long[] v) {
        ByteBuffer b = ByteBuffer.allocate(v.length * dt.size).order(ByteOrder.LITTLE_ENDIAN);
        for (long x : v) if (dt == DType.I64) b.putLong(x); else b.putInt((int) x);
        return b.array();
    }

    /** Stored tensors in the original DeepSeek scheme (FP8 `.scale` as E8M0/U8, FP4 as I8/U8, tid2eid I64). */
    Map<String, S> original() {
        Map<String, S> out = new TreeMap<>();
        int i = 0;
        for (Map.Entry<String, T> e : tensors.entrySet()) {
            String name = TensorNames.toOriginal(e.getKey());
            if (name == null) throw new IllegalStateException("no original name for " + e.getKey());
            T t = e.getValue();
            String prefix = name.substring(0, name.length() - ".weight".length());
            switch (t.quant) {
                case NONE -> out.put(name, t.ints != null ? new S(DType.I64, t.shape, encodeInts(DType.I64, t.ints))
                        : new S(t.plain, t.shape, encode(t.plain, t.v)));
                case FP8 -> {
                    out.put(name, new S(DType.F8_E4M3, t.shape, t.codes));
                    out.put(prefix + ".scale", new S(i % 2 == 0 ? DType.F8_E8M0 : DType.U8,
                            new long[]{ceil128(t.shape[0]), ceil128(t.shape[1])}, t.scales));
                }
                case FP4 -> {
                    out.put(name, new S(i % 2 == 0 ? DType.I8 : DType.U8, new long[]{t.shape[0], t.shape[1] / 2}, t.codes));
                    out.put(prefix + ".scale", new S(i % 3 == 0 ? DType.U8 : DType.F8_E8M0,
                            new long[]{t.shape[0], t.shape[1] / 32}, t.scales));
                }
            }
            i++;
        }
        // an MTP block that must be ignored
        out.put("mtp.0.norm.weight", new S(DType.F32, new long[]{3}, new byte[12]));
        return out;
    }

    /**
     * Stored tensors in the HF scheme: routed experts stacked into gate_up_proj/down_proj (BF16 or F32, holding the
     * exact dequantised values), FP8 with F32 {@code weight_scale_inv}, tid2eid I32.
     */
    Map<String, S> hf() {
        Map<String, S> out = new TreeMap<>();
        int E = cfg.numExperts, I = cfg.moeInter, D = cfg.hidden;
        for (Map.Entry<String, T> e : tensors.entrySet()) {
            String name = e.getKey();
            T t = e.getValue();
            if (name.contains(".mlp.experts.")) continue;
            switch (t.quant) {
                case NONE -> out.put(name, t.ints != null ? new S(DType.I32, t.shape, encodeInts(DType.I32, t.ints))
                        : new S(t.plain, t.shape, encode(t.plain, t.v)));
                case FP8 -> {
                    out.put(name, new S(DType.F8_E4M3, t.shape, t.codes));
                    float[] s = new float[t.scales.length];
                    for (int k = 0; k < s.length; k++) s[k] = e8m0(t.scales[k]);
                    out.put(name + "_scale_inv", new S(DType.F32, new long[]{ceil128(t.shape[0]), ceil128(t.shape[1])}, encode(DType.F32, s)));
                }
                case FP4 -> throw new IllegalStateException("FP4 outside experts");
            }
        }
        for (int l = 0; l < cfg.numLayers; l++) {
            String p = "model.layers." + l + ".mlp.experts.";
            float[] gu = new float[E * 2 * I * D], dn = new float[E * D * I];
            for (int e = 0; e < E; e++) {
                System.arraycopy(tensors.get(p + e + ".gate_proj.weight").v, 0, gu, e * 2 * I * D, I * D);
                System.arraycopy(tensors.get(p + e + ".up_proj.weight").v, 0, gu, e * 2 * I * D + I * D, I * D);
                System.arraycopy(tensors.get(p + e + ".down_proj.weight").v, 0, dn, e * D * I, D * I);
            }
            DType dt = l % 2 == 0 ? DType.BF16 : DType.F32;
            out.put(p + "gate_up_proj", new S(dt, new long[]{E, 2L * I, D}, encode(dt, gu)));
            out.put(p + "down_proj", new S(dt, new long[]{E, D, I}, encode(dt, dn)));
        }
        out.put("model.mtp.0.norm.weight", new S(DType.F32, new long[]{3}, new byte[12]));
        return out;
    }

    // ------------------------------------------------------------------ files

    void writeConfig(Path dir) throws IOException {
        Files.createDirectories(dir);
        Files.writeString(dir.resolve("config.json"), cfg.toJson().toPrettyString());
    }

    static void writeFile(Path file, Map<String, S> stored) throws IOException {
        SafetensorsWriter w = new SafetensorsWriter().metadata(Map.of("format", "pt"));
        for (Map.Entry<String, S> e : stored.entrySet())
            w.add(e.getKey(), e.getValue().dtype(), e.getValue().shape(), MemorySegment.ofArray(e.getValue().bytes()));
        w.write(file);
    }

    /** Writes config.json and model.safetensors. */
    void writeSingle(Path dir, Map<String, S> stored) throws IOException {
        writeConfig(dir);
        writeFile(dir.resolve("model.safetensors"), stored);
    }

    /** Writes config.json, {@code shards} shard files (round-robin by name) and model.safetensors.index.json. */
    void writeSharded(Path dir, Map<String, S> stored, int shards) throws IOException {
        writeConfig(dir);
        List<Map<String, S>> parts = new ArrayList<>();
        for (int i = 0; i < shards; i++) parts.add(new TreeMap<>());
        ObjectNode index = JSON.createObjectNode();
        ObjectNode wm = index.putObject("weight_map");
        long total = 0;
        int i = 0;
        for (Map.Entry<String, S> e : stored.entrySet()) {
            int s = i++ % shards;
            parts.get(s).put(e.getKey(), e.getValue());
            wm.put(e.getKey(), shardName(s, shards));
            total += e.getValue().bytes().length;
        }
        index.putObject("metadata").put("total_size", total);
        for (int s = 0; s < shards; s++) writeFile(dir.resolve(shardName(s, shards)), parts.get(s));
        Files.writeString(dir.resolve(Checkpoint.INDEX), index.toPrettyString());
    }

    static String shardName(int s, int shards) {
        return String.format("model-%05d-of-%05d.safetensors", s + 1, shards);
    }

    /** Rewrites a safetensors file with an edited header (data region kept as is). */
    static void rewriteHeader(Path file, UnaryOperator<ObjectNode> edit) throws IOException {
        byte[] all = Files.readAllBytes(file);
        long n = ByteBuffer.wrap(all, 0, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        ObjectNode header = (ObjectNode) JSON.readTree(new String(all, 8, (int) n, java.nio.charset.StandardCharsets.UTF_8));
        byte[] json = JSON.writeValueAsBytes(edit.apply(header));
        int m = (json.length + 7) & ~7;
        ByteBuffer out = ByteBuffer.allocate(8 + m + all.length - 8 - (int) n).order(ByteOrder.LITTLE_ENDIAN);
        out.putLong(m).put(json);
        while (out.position() < 8 + m) out.put((byte) ' ');
        out.put(all, 8 + (int) n, all.length - 8 - (int) n);
        Files.write(file, out.array());
    }
}
