package io.ds4j.model.synth;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.Checkpoint;
import io.ds4j.model.DType;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.SafetensorsWriter;
import io.ds4j.model.TensorNames;
import io.ds4j.model.WeightMatrix;

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.IntStream;

/**
 * A seeded random DeepSeek-V4 checkpoint in the real on-disk format: {@code config.json} plus safetensors
 * (one {@code model.safetensors}, or shards with {@code model.safetensors.index.json} when larger than the shard limit).
 *
 * <p>Every tensor of spec 2.1–2.3 is generated, in either naming scheme (spec 2.4). Values are a pure function of
 * (seed, canonical tensor name, row, column): each row of each logical matrix draws from its own
 * {@link SplittableRandom}, so the same seed gives identical bytes whatever the thread count, and the HF, original,
 * F32, BF16 and FP8 variants of one seed hold the same underlying values (BF16 rounds them to nearest even, FP8/FP4
 * quantise them). Routed experts are keyed by their per-expert name, so HF's stacked {@code gate_up_proj} rows equal
 * the original {@code w1}/{@code w3}.
 *
 * <p>Value scales (chosen for a numerically healthy forward pass):
 * <ul>
 *   <li>Linear weights [out, in]: N(0, 1/√in) (the approximate normal below); the indexer's {@code weights_proj} is
 *       |N(0, 1/√D)|, non-negative so indexer scores are tie-free (spec 6.6);</li>
 *   <li>embedding N(0, 1); every RMSNorm weight 1 + N(0, 0.05);</li>
 *   <li>mHC {@code fn} N(0, 1/√(nD)); {@code base} N(0, 1); {@code scale} U(0.5, 1.5) (hc_head likewise);</li>
 *   <li>attention sinks N(0, 1); compressor position biases N(0, 0.1); router correction bias N(0, 0.05);</li>
 *   <li>tid2eid: each row is k distinct expert ids (a prefix of a random permutation).</li>
 * </ul>
 * "N(0, σ)" is the Irwin–Hall approximation (sum of four uniforms, rescaled to variance σ², so |z| ≤ 3.46σ), which is
 * fast and depends only on {@link SplittableRandom#nextLong()} (stable across JDKs).
 *
 * <p>Storage: {@link Storage#F32} and {@link Storage#BF16} store every float tensor in that type;
 * {@link Storage#FP8} is "as released" (spec 2.5, original naming only): wq_a, wq_b, wkv, wo_a, wo_b, indexer wq_b and
 * the shared experts are F8_E4M3 with an F8_E8M0 {@code .scale} per 128×128 block; routed experts are FP4 e2m1 packed
 * two per I8 byte [out, in/2] with an F8_E8M0 {@code .scale} [out, in/32]; embed, head, router, compressor and
 * indexer-compressor projections, indexer weights_proj and norms are BF16; hc_*, sinks, ape and gate.bias are F32.
 * tid2eid is always I64. Tensors are produced one at a time straight into the memory-mapped output (big ones in
 * parallel row bands), so memory use stays far below the model size.
 */
public final class RandomCheckpoint {
    /** Storage dtype choice. */
    public enum Storage {
        /** Every float tensor F32. */
        F32,
        /** Every float tensor BF16. */
        BF16,
        /** As released: FP8 dense projections, FP4 routed experts, the rest BF16/F32 (original naming only). */
        FP8;

        /**
         * Parses {@code f32}, {@code bf16} or {@code fp8} (case-insensitive).
         * @throws IllegalArgumentException for anything else
         */
        public static Storage parse(String s) {
            return switch (s.toLowerCase(java.util.Locale.ROOT)) {
                case "f32", "fp32", "float32" -> F32;
                case "bf16", "bfloat16" -> BF16;
                case "fp8" -> FP8;
                default -> throw new IllegalArgumentException("unknown dtype '" + s + "' (expected bf16, f32 or fp8)");
            };
        }
    }

    /** One tensor as it will be stored. */
    public record Tensor(String name, DType dtype, long[] shape, long bytes) {}

    /** What {@link #write} produced. */
    public record Result(Path dir, List<Path> files, int tensors, long bytes, double seconds) {}

    /** Progress callback, called after each tensor. */
    @FunctionalInterface
    public interface Progress {
        void update(long bytesDone, long bytesTotal, String tensor);
    }

    /** Default shard limit, 4 GiB per file. */
    public static final long DEFAULT_MAX_SHARD = 4L << 30;

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final ValueLayout.OfLong I64_LE = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    /** Elements per parallel work item. */
    private static final int BAND_ELEMENTS = 1 << 18;
    /** Bytes generated per heap chunk before copying into the output. */
    private static final long CHUNK_BYTES = 32L << 20;

    private final ModelConfig cfg;
    private final long seed;
    private final TensorNames.Scheme naming;
    private final Storage storage;
    private final List<Planned> plan = new ArrayList<>();
    private final Map<String, String> metadata = new LinkedHashMap<>();

    /**
     * Plans a checkpoint (nothing is generated until {@link #write}).
     * @throws IllegalArgumentException for FP8 with HF naming, or FP8 expert dims not a multiple of 32
     */
    public RandomCheckpoint(ModelConfig config, long seed, TensorNames.Scheme naming, Storage storage) {
        config.validate();
        if (storage == Storage.FP8 && naming != TensorNames.Scheme.ORIGINAL)
            throw new IllegalArgumentException("dtype fp8 is the original DeepSeek release format; use it with original naming");
        if (storage == Storage.FP8 && (config.hidden % 32 != 0 || config.moeInter % 32 != 0))
            throw new IllegalArgumentException("fp8 stores routed experts as FP4 with 1x32 blocks: hidden_size (" + config.hidden
                    + ") and moe_intermediate_size (" + config.moeInter + ") must be multiples of 32");
        this.cfg = config;
        this.seed = seed;
        this.naming = naming;
        this.storage = storage;
        metadata.put("format", "pt");
        metadata.put("ds4j.synthetic", "seed=" + seed + " dtype=" + storage.name().toLowerCase(java.util.Locale.ROOT)
                + " naming=" + naming.name().toLowerCase(java.util.Locale.ROOT));
        buildPlan();
    }

    /** The config this checkpoint is generated for. */
    public ModelConfig config() {
        return cfg;
    }

    /** Every tensor, in the order used to fill shards. */
    public List<Tensor> tensors() {
        List<Tensor> out = new ArrayList<>(plan.size());
        for (Planned p : plan) out.add(new Tensor(p.name, p.dtype, p.shape.clone(), p.bytes()));
        return Collections.unmodifiableList(out);
    }

    /** Total tensor bytes (headers excluded). */
    public long totalBytes() {
        long b = 0;
        for (Planned p : plan) b += p.bytes();
        return b;
    }

    /** Adds {@code __metadata__} entries written into every safetensors file. */
    public RandomCheckpoint metadata(Map<String, String> m) {
        metadata.putAll(m);
        return this;
    }

    /**
     * The {@code config.json} content: {@link ModelConfig#toJson()} plus legacy keys ({@code num_hash_layers}, and
     * {@code compress_ratios} when the ratios are the legacy 4/128), {@code torch_dtype}, and for FP8 the released
     * {@code quantization_config} / {@code expert_dtype}.
     */
    public ObjectNode configJson() {
        ObjectNode o = cfg.toJson();
        int hash = 0;
        while (hash < cfg.numLayers && cfg.hashMoe[hash]) hash++;
        boolean prefix = true;
        for (int l = hash; l < cfg.numLayers; l++) prefix &= !cfg.hashMoe[l];
        if (prefix) o.put("num_hash_layers", hash);
        if (cfg.csaRatio == 4 && cfg.hcaRatio == 128) {
            ArrayNode cr = o.putArray("compress_ratios");
            for (AttentionKind k : cfg.layerTypes) cr.add(k.legacyRatio);
        }
        o.put("torch_dtype", storage == Storage.F32 ? "float32" : "bfloat16");
        if (storage == Storage.FP8) {
            ObjectNode q = o.putObject("quantization_config");
            q.put("quant_method", "fp8");
            q.put("fmt", "e4m3");
            q.put("scale_fmt", "ue8m0");
            q.putArray("weight_block_size").add(128).add(128);
            o.put("expert_dtype", "fp4");
        }
        o.put("topk_method", "noaux_tc");
        return o;
    }

    /**
     * Writes {@code config.json} and the weights into {@code dir} (created if needed; existing files of the same
     * names are replaced), with the default 4 GiB shard limit.
     */
    public Result write(Path dir) throws IOException {
        return write(dir, DEFAULT_MAX_SHARD, null);
    }

    /**
     * Writes {@code config.json} and the weights into {@code dir}.
     * @param maxShardBytes largest safetensors file; a single {@code model.safetensors} when everything fits
     * @param progress optional callback after each tensor (may be null)
     */
    public Result write(Path dir, long maxShardBytes, Progress progress) throws IOException {
        long t0 = System.nanoTime();
        Files.createDirectories(dir);
        // split into shards in plan order, counting a generous header estimate per tensor
        List<List<Planned>> shards = new ArrayList<>();
        List<Planned> cur = new ArrayList<>();
        long curBytes = 1024;
        for (Planned p : plan) {
            long b = p.bytes() + 128 + 2L * p.name.length();
            if (!cur.isEmpty() && curBytes + b > maxShardBytes) {
                shards.add(cur);
                cur = new ArrayList<>();
                curBytes = 1024;
            }
            cur.add(p);
            curBytes += b;
        }
        shards.add(cur);

        AtomicLong done = new AtomicLong();
        long total = totalBytes();
        List<Path> files = new ArrayList<>();
        Map<String, String> weightMap = new LinkedHashMap<>();
        for (int s = 0; s < shards.size(); s++) {
            String fileName = shards.size() == 1 ? Checkpoint.SINGLE
                    : String.format("model-%05d-of-%05d.safetensors", s + 1, shards.size());
            SafetensorsWriter w = new SafetensorsWriter().metadata(metadata);
            for (Planned p : shards.get(s)) {
                w.add(p.name, p.dtype, p.shape, dst -> {
                    p.fill.fill(dst);
                    long d = done.addAndGet(p.bytes());
                    if (progress != null) progress.update(d, total, p.name);
                });
                weightMap.put(p.name, fileName);
            }
            Path f = dir.resolve(fileName);
            w.write(f);
            files.add(f);
        }
        if (shards.size() > 1) {
            ObjectNode idx = JSON.createObjectNode();
            idx.putObject("metadata").put("total_size", total);
            ObjectNode wm = idx.putObject("weight_map");
            weightMap.forEach(wm::put);
            Path p = dir.resolve(Checkpoint.INDEX);
            JSON.writerWithDefaultPrettyPrinter().writeValue(p.toFile(), idx);
            files.add(p);
        }
        Path conf = dir.resolve("config.json");
        JSON.writerWithDefaultPrettyPrinter().writeValue(conf.toFile(), configJson());
        files.addFirst(conf);
        long bytes = 0;
        for (Path f : files) bytes += Files.size(f);
        return new Result(dir, List.copyOf(files), plan.size(), bytes, (System.nanoTime() - t0) / 1e9);
    }

    // ================================================================ plan

    /** Produces a tensor's bytes. */
    private interface Fill {
        void fill(MemorySegment dst) throws IOException;
    }

    private record Planned(String name, DType dtype, long[] shape, Fill fill) {
        long bytes() {
            long n = dtype.size;
            for (long d : shape) n *= d;
            return n;
        }
    }

    /** Distributions of {@link Src}. */
    private enum Dist { NORMAL, ABS_NORMAL, ONE_PLUS_NORMAL, UNIFORM }

    /**
     * A logical float matrix [rows, cols]: values are a function of (seed, key, row, col).
     * NORMAL/ABS_NORMAL/ONE_PLUS_NORMAL use a = σ; UNIFORM draws from [a, b).
     */
    private record Src(String key, int rows, int cols, Dist dist, double a, double b) {
        static Src normal(String key, int rows, int cols, double std) {
            return new Src(key, rows, cols, Dist.NORMAL, std, 0);
        }

        static Src linear(String key, int out, int in) {
            return normal(key, out, in, 1 / Math.sqrt(in));
        }
    }

    private static final double SQRT3 = Math.sqrt(3.0);

    /** Fills one row of {@code src} into {@code out[0 .. cols)}. */
    private void row(Src src, int r, float[] out) {
        SplittableRandom rnd = new SplittableRandom(mix64(keySeed(src.key) ^ mix64(r + 0x632BE59BD9B4E019L)));
        int n = src.cols;
        switch (src.dist) {
            case UNIFORM -> {
                double lo = src.a, span = src.b - src.a;
                for (int c = 0; c < n; c++) out[c] = (float) (lo + span * ((rnd.nextLong() >>> 11) * 0x1.0p-53));
            }
            default -> {
                float std = (float) (src.a * SQRT3);
                for (int c = 0; c < n; c++) {
                    long x = rnd.nextLong();
                    // Irwin–Hall: four 16-bit uniforms, mean 2, variance 1/3 → z = (sum − 2)·√3
                    int s = (int) (x & 0xFFFF) + (int) ((x >>> 16) & 0xFFFF) + (int) ((x >>> 32) & 0xFFFF) + (int) (x >>> 48);
                    float z = ((s + 2) * 0x1p-16f - 2f) * std;
                    out[c] = switch (src.dist) {
                        case ABS_NORMAL -> Math.abs(z);
                        case ONE_PLUS_NORMAL -> 1f + z;
                        default -> z;
                    };
                }
            }
        }
    }

    private long keySeed(String key) {
        long h = 0xcbf29ce484222325L; // FNV-1a 64 over UTF-8
        for (byte b : key.getBytes(StandardCharsets.UTF_8)) {
            h ^= b & 0xFF;
            h *= 0x100000001b3L;
        }
        return mix64(h ^ mix64(seed));
    }

    private static long mix64(long z) {
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }

    private String name(String canonical) {
        String mp = "model.layers." + cfg.numLayers + ".";
        String n = canonical.startsWith(mp) ? TensorNames.mtp(canonical.substring(mp.length()))
                : TensorNames.inScheme(naming, canonical);
        if (n == null) throw new IllegalStateException("no " + naming + " name for " + canonical);
        return n;
    }

    private DType floatType(DType fp8Choice) {
        return switch (storage) {
            case F32 -> DType.F32;
            case BF16 -> DType.BF16;
            case FP8 -> fp8Choice;
        };
    }

    /** A float tensor whose rows are the concatenation of {@code parts} (all with the same cols). */
    private void floatTensor(String name, DType dtype, long[] shape, Src... parts) {
        plan.add(new Planned(name, dtype, shape, dst -> fillFloats(dst, dtype, parts)));
    }

    /** A 2-D matrix: BF16/F32 as chosen, or FP8 e4m3 + scale when {@code quantise} and storage is FP8. */
    private void matrix(String canonical, Src src, boolean quantise) {
        String n = name(canonical);
        if (storage == Storage.FP8 && quantise) {
            Quantised q = new Quantised(src, false);
            String sn = TensorNames.scaleNames(naming, n).getFirst();
            plan.add(new Planned(n, DType.F8_E4M3, new long[]{src.rows, src.cols}, q::fillWeight));
            plan.add(new Planned(sn, DType.F8_E8M0,
                    new long[]{(src.rows + 127) / 128, (src.cols + 127) / 128}, q::fillScale));
        } else {
            floatTensor(n, floatType(DType.BF16), new long[]{src.rows, src.cols}, src);
        }
    }

    /** A vector or small matrix, BF16 in fp8 storage unless {@code fp8F32}. */
    private void small(String canonical, long[] shape, Src src, boolean fp8F32) {
        floatTensor(name(canonical), floatType(fp8F32 ? DType.F32 : DType.BF16), shape, src);
    }

    private void buildPlan() {
        ModelConfig c = cfg;
        int V = c.vocabSize, D = c.hidden, n = c.hcMult;
        double normStd = 0.05, hcStd = 1 / Math.sqrt((double) n * D);

        matrix("model.embed_tokens.weight", Src.normal("model.embed_tokens.weight", V, D, 1.0), false);
        for (int l = 0; l < c.numLayers; l++) layer(l, c.layerTypes[l], c.hashMoe[l]);
        norm("model.norm.weight", D, normStd);
        small("model.hc_head.hc_fn", new long[]{n, (long) n * D}, Src.normal("model.hc_head.hc_fn", n, n * D, hcStd), true);
        small("model.hc_head.hc_base", new long[]{n}, Src.normal("model.hc_head.hc_base", 1, n, 1.0), true);
        small("model.hc_head.hc_scale", new long[]{1}, new Src("model.hc_head.hc_scale", 1, 1, Dist.UNIFORM, 0.5, 1.5), true);
        matrix("lm_head.weight", Src.linear("lm_head.weight", V, D), false);
        if (c.mtpLayers > 0) mtpLayer();
    }

    /**
     * The tensors of decoder layer l (l = numLayers: the MTP block, stored as {@code mtp.0.*}, see
     * {@link TensorNames#mtp}).
     */
    private void layer(int l, AttentionKind kind, boolean hash) {
        ModelConfig c = cfg;
        int D = c.hidden, n = c.hcMult, H = c.numHeads, d = c.headDim, q = c.qLoraRank;
        int G = c.oGroups, R = c.oLoraRank, E = c.numExperts, I = c.moeInter, mix = (2 + n) * n;
        double normStd = 0.05, hcStd = 1 / Math.sqrt((double) n * D);
        String p = "model.layers." + l + ".";
        for (String site : new String[]{"attn_hc.", "ffn_hc."}) {
            small(p + site + "fn", new long[]{mix, (long) n * D}, Src.normal(p + site + "fn", mix, n * D, hcStd), true);
            small(p + site + "base", new long[]{mix}, Src.normal(p + site + "base", 1, mix, 1.0), true);
            small(p + site + "scale", new long[]{3}, new Src(p + site + "scale", 1, 3, Dist.UNIFORM, 0.5, 1.5), true);
        }
        norm(p + "input_layernorm.weight", D, normStd);
        norm(p + "post_attention_layernorm.weight", D, normStd);

        String a = p + "self_attn.";
        matrix(a + "q_a_proj.weight", Src.linear(a + "q_a_proj.weight", q, D), true);
        norm(a + "q_a_norm.weight", q, normStd);
        matrix(a + "q_b_proj.weight", Src.linear(a + "q_b_proj.weight", H * d, q), true);
        matrix(a + "kv_proj.weight", Src.linear(a + "kv_proj.weight", d, D), true);
        norm(a + "kv_norm.weight", d, normStd);
        matrix(a + "o_a_proj.weight", Src.linear(a + "o_a_proj.weight", G * R, H * d / G), true);
        matrix(a + "o_b_proj.weight", Src.linear(a + "o_b_proj.weight", D, G * R), true);
        small(a + "sinks", new long[]{H}, Src.normal(a + "sinks", 1, H, 1.0), true);

        if (kind != AttentionKind.SLIDING) {
            boolean csa = kind == AttentionKind.CSA;
            int m = csa ? c.csaRatio : c.hcaRatio;
            compressor(a + "compressor.", csa ? 2 : 1, d, m, normStd);
            if (csa) {
                String x = a + "compressor.indexer.";
                compressor(x, 2, c.indexHeadDim, m, normStd);
                matrix(x + "q_b_proj.weight", Src.linear(x + "q_b_proj.weight", c.indexHeads * c.indexHeadDim, q), true);
                matrix(x + "scorer.weights_proj.weight",
                        new Src(x + "scorer.weights_proj.weight", c.indexHeads, D, Dist.ABS_NORMAL, 1 / Math.sqrt(D), 0), false);
            }
        }

        String f = p + "mlp.";
        matrix(f + "gate.weight", Src.linear(f + "gate.weight", E, D), false);
        if (hash) tid2eid(f + "gate.tid2eid");
        else small(f + "gate.e_score_correction_bias", new long[]{E}, Src.normal(f + "gate.e_score_correction_bias", 1, E, 0.05), true);
        experts(l, E, I, D);
        matrix(f + "shared_experts.gate_proj.weight", Src.linear(f + "shared_experts.gate_proj.weight", I, D), true);
        matrix(f + "shared_experts.up_proj.weight", Src.linear(f + "shared_experts.up_proj.weight", I, D), true);
        matrix(f + "shared_experts.down_proj.weight", Src.linear(f + "shared_experts.down_proj.weight", D, I), true);
    }

    /**
     * The MTP block (spec 2.6): a sliding-window layer with a top-k MoE, the input projections e_proj/h_proj (quantised
     * like the other dense projections), enorm/hnorm, its own final norm and hc_head.
     */
    private void mtpLayer() {
        ModelConfig c = cfg;
        int L = c.numLayers, D = c.hidden, n = c.hcMult;
        double normStd = 0.05, hcStd = 1 / Math.sqrt((double) n * D);
        String p = "model.layers." + L + ".";
        matrix(p + "e_proj.weight", Src.linear(p + "e_proj.weight", D, D), true);
        matrix(p + "h_proj.weight", Src.linear(p + "h_proj.weight", D, D), true);
        norm(p + "enorm.weight", D, normStd);
        norm(p + "hnorm.weight", D, normStd);
        layer(L, AttentionKind.SLIDING, false);
        norm(p + "shared_head.norm.weight", D, normStd);
        small(p + "hc_head.hc_fn", new long[]{n, (long) n * D}, Src.normal(p + "hc_head.hc_fn", n, n * D, hcStd), true);
        small(p + "hc_head.hc_base", new long[]{n}, Src.normal(p + "hc_head.hc_base", 1, n, 1.0), true);
        small(p + "hc_head.hc_scale", new long[]{1}, new Src(p + "hc_head.hc_scale", 1, 1, Dist.UNIFORM, 0.5, 1.5), true);
    }

    private void norm(String canonical, int width, double std) {
        small(canonical, new long[]{width}, new Src(canonical, 1, width, Dist.ONE_PLUS_NORMAL, std, 0), false);
    }

    private void compressor(String prefix, int overlap, int width, int ratio, double normStd) {
        int D = cfg.hidden;
        matrix(prefix + "kv_proj.weight", Src.linear(prefix + "kv_proj.weight", overlap * width, D), false);
        matrix(prefix + "gate_proj.weight", Src.linear(prefix + "gate_proj.weight", overlap * width, D), false);
        small(prefix + "position_bias", new long[]{ratio, (long) overlap * width},
                Src.normal(prefix + "position_bias", ratio, overlap * width, 0.1), true);
        norm(prefix + "kv_norm.weight", width, normStd);
    }

    private void experts(int l, int E, int I, int D) {
        String p = "model.layers." + l + ".mlp.experts.";
        Src[] w1 = new Src[E], w3 = new Src[E], w2 = new Src[E];
        for (int e = 0; e < E; e++) {
            w1[e] = Src.linear(p + e + ".gate_proj.weight", I, D);
            w3[e] = Src.linear(p + e + ".up_proj.weight", I, D);
            w2[e] = Src.linear(p + e + ".down_proj.weight", D, I);
        }
        if (naming == TensorNames.Scheme.HF && l < cfg.numLayers) { // the MTP block keeps per-expert original names
            Src[] gu = new Src[2 * E];
            for (int e = 0; e < E; e++) {
                gu[2 * e] = w1[e];
                gu[2 * e + 1] = w3[e];
            }
            DType t = floatType(DType.BF16);
            floatTensor(p + "gate_up_proj", t, new long[]{E, 2L * I, D}, gu);
            floatTensor(p + "down_proj", t, new long[]{E, D, I}, w2);
            return;
        }
        for (int e = 0; e < E; e++) {
            for (Src s : new Src[]{w1[e], w2[e], w3[e]}) {
                String n = name(s.key);
                if (storage == Storage.FP8) {
                    Quantised qz = new Quantised(s, true);
                    plan.add(new Planned(n, DType.I8, new long[]{s.rows, s.cols / 2}, qz::fillWeight));
                    plan.add(new Planned(TensorNames.scaleNames(TensorNames.Scheme.ORIGINAL, n).getFirst(), DType.F8_E8M0,
                            new long[]{s.rows, s.cols / 32}, qz::fillScale));
                } else {
                    floatTensor(n, floatType(DType.BF16), new long[]{s.rows, s.cols}, s);
                }
            }
        }
    }

    private void tid2eid(String canonical) {
        int V = cfg.vocabSize, k = cfg.expertsPerToken, E = cfg.numExperts;
        long seedKey = keySeed(canonical);
        plan.add(new Planned(name(canonical), DType.I64, new long[]{V, k}, dst -> {
            long[] ids = new long[Math.multiplyExact(V, k)];
            int bands = (V + 4095) / 4096;
            IntStream.range(0, bands).parallel().forEach(b -> {
                int[] perm = new int[E];
                for (int t = b * 4096; t < Math.min(V, (b + 1) * 4096); t++) {
                    SplittableRandom rnd = new SplittableRandom(mix64(seedKey ^ mix64(t + 0x632BE59BD9B4E019L)));
                    for (int e = 0; e < E; e++) perm[e] = e;
                    for (int j = 0; j < k; j++) { // partial Fisher–Yates: the first k entries of a random permutation
                        int r = j + rnd.nextInt(E - j);
                        int tmp = perm[j];
                        perm[j] = perm[r];
                        perm[r] = tmp;
                        ids[t * k + j] = perm[j];
                    }
                }
            });
            MemorySegment.copy(ids, 0, dst, I64_LE, 0, ids.length);
        }));
    }

    // ================================================================ generation

    /**
     * Writes the rows of {@code parts} (concatenated) into {@code dst} as F32 or BF16. Rows are generated in parallel
     * bands into a heap chunk and copied into {@code dst} on the calling thread (the writer's mapping may be confined).
     */
    private void fillFloats(MemorySegment dst, DType dtype, Src[] parts) {
        long rowOffset = 0;
        byte[] chunk = null;
        for (Src s : parts) {
            final int cols = s.cols;
            final long rowBytes = (long) cols * dtype.size;
            int chunkRows = (int) Math.max(1, Math.min(s.rows, CHUNK_BYTES / rowBytes));
            if (chunk == null || chunk.length < chunkRows * rowBytes) chunk = new byte[Math.toIntExact(chunkRows * rowBytes)];
            MemorySegment heap = MemorySegment.ofArray(chunk);
            int bandRows = Math.max(1, BAND_ELEMENTS / Math.max(1, cols));
            for (int c0 = 0; c0 < s.rows; c0 += chunkRows) {
                final int start = c0, nr = Math.min(s.rows, c0 + chunkRows) - c0;
                int bands = (nr + bandRows - 1) / bandRows;
                IntStream r = IntStream.range(0, bands);
                if (bands > 1) r = r.parallel();
                r.forEach(b -> {
                    float[] buf = new float[cols];
                    short[] half = dtype == DType.BF16 ? new short[cols] : null;
                    for (int i = b * bandRows; i < Math.min(nr, (b + 1) * bandRows); i++) {
                        row(s, start + i, buf);
                        long off = i * rowBytes;
                        if (half == null) {
                            MemorySegment.copy(buf, 0, heap, WeightMatrix.F32_LE, off, cols);
                        } else {
                            for (int j = 0; j < cols; j++) half[j] = SafetensorsWriter.bf16(buf[j]);
                            MemorySegment.copy(half, 0, heap, WeightMatrix.I16_LE, off, cols);
                        }
                    }
                });
                MemorySegment.copy(heap, 0, dst, (rowOffset + start) * rowBytes, nr * rowBytes);
            }
            rowOffset += s.rows;
        }
    }

    /**
     * A matrix quantised once into (weight, scale) bytes; whichever of the two tensors is written first computes
     * both and keeps the other until it is written.
     */
    private final class Quantised {
        private final Src src;
        private final boolean fp4;
        private byte[] q, s;
        private boolean weightDone, scaleDone;

        Quantised(Src src, boolean fp4) {
            this.src = src;
            this.fp4 = fp4;
        }

        void fillWeight(MemorySegment dst) {
            byte[] b;
            synchronized (this) {
                compute();
                b = q;
                weightDone = true;
                release();
            }
            MemorySegment.copy(MemorySegment.ofArray(b), 0, dst, 0, b.length);
        }

        void fillScale(MemorySegment dst) {
            byte[] b;
            synchronized (this) {
                compute();
                b = s;
                scaleDone = true;
                release();
            }
            MemorySegment.copy(MemorySegment.ofArray(b), 0, dst, 0, b.length);
        }

        private void release() {
            if (weightDone && scaleDone) {
                q = null;
                s = null;
            }
        }

        private void compute() {
            if (q != null || weightDone || scaleDone) return;
            int rows = src.rows, cols = src.cols;
            long qBytes = fp4 ? (long) rows * cols / 2 : (long) rows * cols;
            if (qBytes > Integer.MAX_VALUE - 16)
                throw new IllegalStateException(src.key + ": quantised matrix of " + qBytes + " bytes is too large");
            byte[] qq = new byte[(int) qBytes];
            int sc = fp4 ? cols / 32 : (cols + 127) / 128;
            byte[] ss = new byte[fp4 ? rows * sc : ((rows + 127) / 128) * sc];
            // bands of 128 rows: one FP8 scale-grid row, or 128 independent FP4 rows
            int bands = (rows + 127) / 128;
            IntStream r = IntStream.range(0, bands);
            if ((long) rows * cols > BAND_ELEMENTS) r = r.parallel();
            r.forEach(b -> {
                int r0 = b * 128, nr = Math.min(rows, r0 + 128) - r0;
                float[] band = new float[nr * cols];
                float[] buf = new float[cols];
                for (int i = 0; i < nr; i++) {
                    row(src, r0 + i, buf);
                    System.arraycopy(buf, 0, band, i * cols, cols);
                }
                if (fp4) Quantize.fp4Blocks(band, 0, nr, cols, qq, r0 * (cols / 2), ss, r0 * sc);
                else Quantize.fp8Blocks(band, 0, nr, cols, qq, r0 * cols, ss, b * sc);
            });
            q = qq;
            s = ss;
        }
    }
}
