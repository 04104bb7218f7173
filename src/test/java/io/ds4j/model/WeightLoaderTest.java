package io.ds4j.model;

import com.fasterxml.jackson.databind.node.ObjectNode;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Random;

import static io.ds4j.model.LoaderFixtures.S;
import static org.junit.jupiter.api.Assertions.*;

/** Checkpoint discovery, naming schemes, quantised formats and loader errors on tiny generated checkpoints. */
class WeightLoaderTest {
    @TempDir
    Path tmp;

    // ------------------------------------------------------------------ helpers

    /** ModelWeights flattened to canonical HF names (per-expert names for routed experts). */
    static Map<String, Object> flatten(ModelWeights w) {
        Map<String, Object> m = new HashMap<>();
        m.put("model.embed_tokens.weight", w.embed);
        m.put("lm_head.weight", w.lmHead);
        m.put("model.norm.weight", w.finalNorm);
        m.put("model.hc_head.hc_fn", w.hcHeadFn);
        m.put("model.hc_head.hc_base", w.hcHeadBase);
        m.put("model.hc_head.hc_scale", w.hcHeadScale);
        for (int l = 0; l < w.layers.length; l++) {
            ModelWeights.Layer y = w.layers[l];
            String p = "model.layers." + l + ".";
            m.put(p + "attn_hc.fn", y.attnHcFn);
            m.put(p + "attn_hc.base", y.attnHcBase);
            m.put(p + "attn_hc.scale", y.attnHcScale);
            m.put(p + "ffn_hc.fn", y.ffnHcFn);
            m.put(p + "ffn_hc.base", y.ffnHcBase);
            m.put(p + "ffn_hc.scale", y.ffnHcScale);
            m.put(p + "input_layernorm.weight", y.inputNorm);
            m.put(p + "post_attention_layernorm.weight", y.postAttnNorm);
            m.put(p + "self_attn.q_a_proj.weight", y.qA);
            m.put(p + "self_attn.q_a_norm.weight", y.qANorm);
            m.put(p + "self_attn.q_b_proj.weight", y.qB);
            m.put(p + "self_attn.kv_proj.weight", y.kv);
            m.put(p + "self_attn.kv_norm.weight", y.kvNorm);
            m.put(p + "self_attn.o_a_proj.weight", y.oA);
            m.put(p + "self_attn.o_b_proj.weight", y.oB);
            m.put(p + "self_attn.sinks", y.sinks);
            if (y.compressor != null) putCompressor(m, p + "self_attn.compressor.", y.compressor);
            if (y.indexer != null) {
                putCompressor(m, p + "self_attn.compressor.indexer.", y.indexer.compressor);
                m.put(p + "self_attn.compressor.indexer.q_b_proj.weight", y.indexer.qB);
                m.put(p + "self_attn.compressor.indexer.scorer.weights_proj.weight", y.indexer.weightsProj);
            }
            m.put(p + "mlp.gate.weight", y.gate);
            if (y.gateBias != null) m.put(p + "mlp.gate.e_score_correction_bias", y.gateBias);
            if (y.tid2eid != null) m.put(p + "mlp.gate.tid2eid", y.tid2eid);
            for (int e = 0; e < y.w1.length; e++) {
                m.put(p + "mlp.experts." + e + ".gate_proj.weight", y.w1[e]);
                m.put(p + "mlp.experts." + e + ".up_proj.weight", y.w3[e]);
                m.put(p + "mlp.experts." + e + ".down_proj.weight", y.w2[e]);
            }
            m.put(p + "mlp.shared_experts.gate_proj.weight", y.sharedW1);
            m.put(p + "mlp.shared_experts.up_proj.weight", y.sharedW3);
            m.put(p + "mlp.shared_experts.down_proj.weight", y.sharedW2);
        }
        return m;
    }

    private static void putCompressor(Map<String, Object> m, String p, ModelWeights.Compressor c) {
        m.put(p + "kv_proj.weight", c.kvProj);
        m.put(p + "gate_proj.weight", c.gateProj);
        m.put(p + "position_bias", c.positionBias);
        m.put(p + "kv_norm.weight", c.norm);
    }

    private static float[] values(WeightMatrix w) {
        float[] v = new float[w.rows * w.cols];
        for (int r = 0; r < w.rows; r++) w.dequantRow(r, v, r * w.cols);
        return v;
    }

    /** Every fixture tensor is present with exactly its logical values, and nothing else is. */
    private static void assertMatches(LoaderFixtures fx, ModelWeights w) {
        Map<String, Object> flat = flatten(w);
        assertEquals(fx.tensors.keySet(), flat.keySet());
        for (Map.Entry<String, LoaderFixtures.T> e : fx.tensors.entrySet()) {
            String name = e.getKey();
            LoaderFixtures.T t = e.getValue();
            Object o = flat.get(name);
            assertNotNull(o, name);
            switch (o) {
                case WeightMatrix m -> {
                    assertEquals(t.shape[0], m.rows, name);
                    assertEquals(t.shape[1], m.cols, name);
                    assertArrayEquals(t.v, values(m), name);
                }
                case float[] f -> assertArrayEquals(t.v, f, name);
                case int[] ids -> assertArrayEquals(Arrays.stream(t.ints).mapToInt(x -> (int) x).toArray(), ids, name);
                default -> fail(name + ": " + o);
            }
        }
    }

    private static void assertSameWeights(ModelWeights a, ModelWeights b) {
        Map<String, Object> fa = flatten(a), fb = flatten(b);
        assertEquals(fa.keySet(), fb.keySet());
        for (String k : fa.keySet()) {
            Object x = fa.get(k), y = fb.get(k);
            switch (x) {
                case WeightMatrix m -> assertArrayEquals(values(m), values((WeightMatrix) y), k);
                case float[] f -> assertArrayEquals(f, (float[]) y, k);
                case int[] i -> assertArrayEquals(i, (int[]) y, k);
                default -> fail(k);
            }
        }
    }

    private static CheckpointException loadFails(Path dir, String... fragments) {
        CheckpointException e = assertThrows(CheckpointException.class, () -> WeightLoader.load(dir).close());
        for (String s : fragments) assertTrue(e.getMessage().contains(s), "'" + s + "' missing in: " + e.getMessage());
        return e;
    }

    // ------------------------------------------------------------------ loading

    @Test
    void bothNamingSchemesLoadIdenticalWeights() throws Exception {
        ModelConfig cfg = LoaderFixtures.tinyConfig(16);
        LoaderFixtures fx = new LoaderFixtures(cfg, 1, false);
        Path a = tmp.resolve("orig"), b = tmp.resolve("hf");
        fx.writeSingle(a, fx.original());
        fx.writeSingle(b, fx.hf());
        try (ModelWeights wa = WeightLoader.load(a); ModelWeights wb = WeightLoader.load(b)) {
            assertMatches(fx, wa);
            assertMatches(fx, wb);
            assertSameWeights(wa, wb);
            assertEquals(WeightMatrix.Format.BF16, wa.embed.format);
            assertEquals(WeightMatrix.Format.F16, wb.lmHead.format);
            assertEquals(WeightMatrix.Format.BF16, wb.layers[0].w1[3].format);
            assertEquals(WeightMatrix.Format.F32, wb.layers[1].w2[0].format);
            // layer types decide compressor/indexer presence; hash layer has tid2eid and no bias
            assertNotNull(wa.layers[0].indexer);
            assertEquals(2 * cfg.headDim, wa.layers[0].compressor.kvProj.rows);
            assertNull(wa.layers[1].indexer);
            assertEquals(cfg.headDim, wa.layers[1].compressor.kvProj.rows);
            assertEquals(8 * cfg.headDim, wa.layers[1].compressor.positionBias.length);
            assertNotNull(wa.layers[0].tid2eid);
            assertNull(wa.layers[0].gateBias);
            assertNull(wa.layers[1].tid2eid);
            assertNotNull(wa.layers[1].gateBias);
            assertTrue(wa.storedBytes() > 0);
        }
    }

    @Test
    void quantisedCheckpointsFp8AndFp4() throws Exception {
        ModelConfig cfg = LoaderFixtures.tinyConfig(32); // FP4 needs in-dims that are multiples of 32 (w2 has in = I)
        LoaderFixtures fx = new LoaderFixtures(cfg, 2, true);
        Path a = tmp.resolve("orig"), b = tmp.resolve("hf");
        fx.writeSingle(a, fx.original());
        fx.writeSingle(b, fx.hf());
        try (ModelWeights wa = WeightLoader.load(a); ModelWeights wb = WeightLoader.load(b)) {
            assertMatches(fx, wa);
            assertMatches(fx, wb);
            assertSameWeights(wa, wb);
            ModelWeights.Layer y = wa.layers[0];
            assertEquals(WeightMatrix.Format.FP8_E4M3_B128, y.qA.format);
            assertEquals(DType.F8_E8M0, y.qA.scaleType);
            assertEquals(WeightMatrix.Format.FP8_E4M3_B128, y.sharedW2.format);
            assertEquals(WeightMatrix.Format.FP8_E4M3_B128, y.indexer.qB.format);
            assertEquals(WeightMatrix.Format.FP4_E2M1_B32, y.w1[0].format);
            assertEquals(WeightMatrix.Format.FP4_E2M1_B32, y.w2[3].format);
            assertEquals(WeightMatrix.Format.FP8_E4M3_B128, wb.layers[1].oB.format);
            assertEquals(DType.F32, wb.layers[1].oB.scaleType);
        }
    }

    @Test
    void fp8BlockScalesWithPartialBlocks() throws Exception {
        int rows = 130, cols = 260; // grid [2, 3], last blocks partial
        Random rnd = new Random(3);
        byte[] codes = LoaderFixtures.fp8Codes(rnd, rows * cols);
        byte[] scales = LoaderFixtures.e8m0Scales(rnd, 6);
        float[] expected = LoaderFixtures.dequantFp8(codes, scales, rows, cols);
        float[] f32Scales = new float[6];
        for (int i = 0; i < 6; i++) f32Scales[i] = LoaderFixtures.e8m0(scales[i]);
        Path f = tmp.resolve("fp8.safetensors");
        new SafetensorsWriter()
                .addBytes("w.weight", DType.F8_E4M3, new long[]{rows, cols}, codes)
                .addBytes("w.scale", DType.F8_E8M0, new long[]{2, 3}, scales)
                .add("w.weight_scale_inv", DType.F32, new long[]{2, 3}, f32Scales)
                .add("w.bf16_scale", DType.BF16, new long[]{2, 3}, f32Scales)
                .write(f);
        try (SafetensorsFile sf = SafetensorsFile.open(f)) {
            for (String scale : new String[]{"w.scale", "w.weight_scale_inv", "w.bf16_scale"}) {
                WeightMatrix m = WeightLoader.build(sf.tensor("w.weight"), sf.tensor(scale), WeightMatrix.Format.FP8_E4M3_B128,
                        "w", 0, rows, cols)[0];
                assertArrayEquals(expected, values(m), scale);
                WeightMatrix tail = m.rowRange(127, 130); // straddles the block boundary
                for (int r = 0; r < 3; r++)
                    for (int c = 0; c < cols; c++) assertEquals(expected[(127 + r) * cols + c], tail.get(r, c));
            }
            CheckpointException e = assertThrows(CheckpointException.class, () -> WeightLoader.build(sf.tensor("w.weight"),
                    sf.tensor("w.scale"), WeightMatrix.Format.FP8_E4M3_B128, "w", 0, rows, 256));
            assertTrue(e.getMessage().contains("w.weight") && e.getMessage().contains("[130, 256]"), e.getMessage());
        }
    }

    @Test
    void fp4NibbleOrderLowNibbleIsEvenElement() throws Exception {
        int rows = 3, cols = 64;
        byte[] packed = new byte[rows * cols / 2];
        packed[0] = (byte) 0x71;                  // element 0 ← nibble 1 (0.5), element 1 ← nibble 7 (6)
        packed[1] = (byte) 0x9F;                  // element 2 ← nibble 15 (-6), element 3 ← nibble 9 (-0.5)
        for (int i = 2; i < packed.length; i++) packed[i] = (byte) (i * 37);
        byte[] scales = new byte[rows * cols / 32];
        Arrays.fill(scales, (byte) 128);          // ×2
        scales[1] = (byte) 126;                   // row 0, cols 32..63: ×0.5
        Path f = tmp.resolve("fp4.safetensors");
        new SafetensorsWriter().addBytes("e.weight", DType.I8, new long[]{rows, cols / 2}, packed)
                .addBytes("e.scale", DType.F8_E8M0, new long[]{rows, cols / 32}, scales).write(f);
        try (SafetensorsFile sf = SafetensorsFile.open(f)) {
            WeightMatrix m = WeightLoader.build(sf.tensor("e.weight"), sf.tensor("e.scale"), WeightMatrix.Format.FP4_E2M1_B32,
                    "e", 0, rows, cols)[0];
            assertEquals(1f, m.get(0, 0));
            assertEquals(12f, m.get(0, 1));
            assertEquals(-12f, m.get(0, 2));
            assertEquals(-1f, m.get(0, 3));
            assertArrayEquals(LoaderFixtures.dequantFp4(packed, scales, rows, cols), values(m));
            WeightMatrix r2 = m.rowRange(2, 3);
            for (int c = 0; c < cols; c++) assertEquals(m.get(2, c), r2.get(0, c));
        }
    }

    /** Stacked [E, rows, cols] quantised experts (HF fp8 layout; FP4 for completeness) split into per-expert views. */
    @Test
    void stackedQuantisedExperts() throws Exception {
        int E = 2, rows = 130, cols = 256;
        Random rnd = new Random(8);
        byte[] codes = LoaderFixtures.fp8Codes(rnd, E * rows * cols);
        byte[] scales = LoaderFixtures.e8m0Scales(rnd, E * 2 * 2);
        byte[] packed = new byte[E * rows * cols / 2];
        rnd.nextBytes(packed);
        byte[] s4 = LoaderFixtures.e8m0Scales(rnd, E * rows * cols / 32);
        Path f = tmp.resolve("stacked.safetensors");
        new SafetensorsWriter()
                .addBytes("x.gate_up_proj", DType.F8_E4M3, new long[]{E, rows, cols}, codes)
                .addBytes("x.gate_up_proj_scale_inv", DType.F8_E8M0, new long[]{E, 2, 2}, scales)
                .addBytes("y.down_proj", DType.U8, new long[]{E, rows, cols / 2}, packed)
                .addBytes("y.down_proj_scale_inv", DType.U8, new long[]{E, rows, cols / 32}, s4)
                .write(f);
        try (SafetensorsFile sf = SafetensorsFile.open(f)) {
            WeightMatrix[] m8 = WeightLoader.build(sf.tensor("x.gate_up_proj"), sf.tensor("x.gate_up_proj_scale_inv"),
                    WeightMatrix.Format.FP8_E4M3_B128, "x", E, rows, cols);
            WeightMatrix[] m4 = WeightLoader.build(sf.tensor("y.down_proj"), sf.tensor("y.down_proj_scale_inv"),
                    WeightMatrix.Format.FP4_E2M1_B32, "y", E, rows, cols);
            for (int e = 0; e < E; e++) {
                float[] x = LoaderFixtures.dequantFp8(Arrays.copyOfRange(codes, e * rows * cols, (e + 1) * rows * cols),
                        Arrays.copyOfRange(scales, e * 4, e * 4 + 4), rows, cols);
                assertArrayEquals(x, values(m8[e]), "fp8 expert " + e);
                WeightMatrix up = m8[e].rowRange(65, 130);
                for (int c = 0; c < cols; c++) assertEquals(x[(65 + 64) * cols + c], up.get(64, c));
                float[] y = LoaderFixtures.dequantFp4(Arrays.copyOfRange(packed, e * rows * cols / 2, (e + 1) * rows * cols / 2),
                        Arrays.copyOfRange(s4, e * rows * cols / 32, (e + 1) * rows * cols / 32), rows, cols);
                assertArrayEquals(y, values(m4[e]), "fp4 expert " + e);
            }
        }
    }

    @Test
    void shardedIndexAndDirectoryGlob() throws Exception {
        ModelConfig cfg = LoaderFixtures.tinyConfig(16);
        LoaderFixtures fx = new LoaderFixtures(cfg, 5, false);
        Path a = tmp.resolve("sharded");
        fx.writeSharded(a, fx.hf(), 3);
        try (Checkpoint ck = Checkpoint.open(a)) {
            assertEquals(3, ck.files().size());
            assertEquals(TensorNames.Scheme.HF, ck.scheme());
            assertTrue(ck.names().stream().noneMatch(n -> n.contains("mtp")));
        }
        try (ModelWeights w = WeightLoader.load(a)) {
            assertMatches(fx, w);
        }
        // no index, no model.safetensors: every *.safetensors in the directory
        Path b = tmp.resolve("glob");
        fx.writeConfig(b);
        Map<String, S> orig = fx.original();
        Map<String, S> one = new java.util.TreeMap<>(), two = new java.util.TreeMap<>();
        orig.forEach((k, v) -> (k.startsWith("layers.1.") ? two : one).put(k, v));
        LoaderFixtures.writeFile(b.resolve("part-a.safetensors"), one);
        LoaderFixtures.writeFile(b.resolve("part-b.safetensors"), two);
        try (Checkpoint ck = Checkpoint.open(b)) {
            assertEquals(TensorNames.Scheme.ORIGINAL, ck.scheme());
            assertEquals("layers.0.attn.wq_a.weight", ck.get("model.layers.0.self_attn.q_a_proj.weight").name());
            assertNull(ck.find("model.layers.9.self_attn.q_a_proj.weight"));
            ModelWeights w = WeightLoader.load(ck);
            assertMatches(fx, w);
        }
    }

    @Test
    void closeUnmaps() throws Exception {
        LoaderFixtures fx = new LoaderFixtures(LoaderFixtures.tinyConfig(16), 6, false);
        fx.writeSingle(tmp, fx.original());
        ModelWeights w = WeightLoader.load(tmp);
        w.embed.get(0, 0);
        w.close();
        assertThrows(IllegalStateException.class, () -> w.embed.get(0, 0));
    }

    @Test
    void tensorNameMappingRoundTrips() {
        LoaderFixtures fx = new LoaderFixtures(LoaderFixtures.tinyConfig(16), 7, false);
        for (String hf : fx.tensors.keySet()) {
            String o = TensorNames.toOriginal(hf);
            assertNotNull(o, hf);
            assertEquals(hf, TensorNames.toHf(o), o);
        }
        assertEquals("layers.3.attn.indexer.compressor.ape", TensorNames.toOriginal("model.layers.3.self_attn.compressor.indexer.position_bias"));
        assertEquals("layers.0.ffn.gate.bias", TensorNames.toOriginal("model.layers.0.mlp.gate.e_score_correction_bias"));
        assertEquals("hc_head_fn", TensorNames.toOriginal("model.hc_head.hc_fn"));
        assertEquals("layers.2.ffn.experts.7.w3.weight", TensorNames.toOriginal("model.layers.2.mlp.experts.7.up_proj.weight"));
        assertNull(TensorNames.toOriginal("model.layers.0.mlp.experts.gate_up_proj"));
        assertNull(TensorNames.toHf("mtp.0.enorm.weight"));
    }

    // ------------------------------------------------------------------ errors

    private LoaderFixtures tiny() {
        return new LoaderFixtures(LoaderFixtures.tinyConfig(16), 9, false);
    }

    @Test
    void missingConfig() throws Exception {
        LoaderFixtures.writeFile(tmp.resolve("model.safetensors"), tiny().original());
        loadFails(tmp, tmp.resolve("config.json").toString(), "not found");
        loadFails(tmp.resolve("nowhere"), "nowhere", "not found");
    }

    /**
     * A config.json that is not JSON is told in one line at its line and column, in the words the server uses for a
     * request body (no parser internals); a bad dimension names its key and value, and a model too short for one
     * request's context (max_position_embeddings below 16) is refused at load.
     */
    @Test
    void badConfigJsonNamesWhatIsWrong() throws Exception {
        LoaderFixtures fx = tiny();
        fx.writeSingle(tmp, fx.original());
        Path cfg = tmp.resolve("config.json");
        String good = Files.readString(cfg);
        Files.writeString(cfg, "{\n");
        CheckpointException e = loadFails(tmp, cfg + ": malformed JSON at line 2, column 1: ");
        assertFalse(e.getMessage().contains("\n") || e.getMessage().contains("Source") || e.getMessage().contains("Feature"),
                e.getMessage());
        for (String[] c : new String[][]{{"hidden_size", "-64", "hidden_size must be positive, got -64"},
                {"num_hidden_layers", "0", "num_hidden_layers must be positive, got 0"},
                {"num_hidden_layers", "-2", "num_hidden_layers must be positive, got -2"},
                {"num_attention_heads", "0", "num_attention_heads must be positive, got 0"},
                {"o_groups", "0", "o_groups must be positive, got 0"},
                {"max_position_embeddings", "8", "max_position_embeddings must be at least 16 (the smallest context a request"
                        + " runs with), got 8"},
                // past the int range: refused as written, not wrapped (4294967360 read as 64) or clamped (1e30)
                {"hidden_size", "4294967360", "hidden_size must be an integer of at most 2147483647, got 4294967360"},
                {"hidden_size", "4294967232", "hidden_size must be an integer of at most 2147483647, got 4294967232"},
                {"hidden_size", "1e30", "hidden_size must be an integer of at most 2147483647, got 1e30"},
                {"hidden_size", "1E400", "hidden_size must be an integer of at most 2147483647, got 1E400"},
                {"hidden_size", "-4294967296", "hidden_size must be an integer of at least -2147483648, got -4294967296"},
                {"hidden_size", "64.5", "hidden_size must be an integer, got 64.5"},
                {"hidden_size", "1e-400", "hidden_size must be an integer, got 1e-400"},
                {"hidden_size", "\"64\"", "hidden_size must be an integer, got \"64\""},
                {"num_hidden_layers", "1e30", "num_hidden_layers must be an integer of at most 2147483647, got 1e30"},
                {"eos_token_id", "[ 4294967297 ]", "eos_token_id[0] must be an integer of at most 2147483647, got 4294967297"},
                // a window past the longest context: its ring (sliding_window - 1 + k_max rows) overflowed at 2e9
                {"sliding_window", "2000000000", "sliding_window must be from 1 to max_position_embeddings (1048576), got 2000000000"},
                {"sliding_window", "0", "sliding_window must be from 1 to max_position_embeddings (1048576), got 0"},
                {"q_lora_rank", "0", "q_lora_rank must be positive, got 0"},
                {"o_lora_rank", "-1", "o_lora_rank must be positive, got -1"},
                {"moe_intermediate_size", "0", "moe_intermediate_size must be positive, got 0"},
                {"index_n_heads", "0", "index_n_heads must be positive, got 0"},
                {"index_head_dim", "0", "index_head_dim must be positive, got 0"},
                {"eos_token_id", "64", "eos_token_id must be a token id from 0 to vocab_size - 1 (63), got 64"},
                {"eos_token_id", "[ 64 ]", "eos_token_id must be a token id from 0 to vocab_size - 1 (63), got 64"},
                {"bos_token_id", "-1", "bos_token_id must be a token id from 0 to vocab_size - 1 (63), got -1"}}) {
            String bad = good.replaceFirst("\"" + c[0] + "\" : -?\\d+", java.util.regex.Matcher.quoteReplacement("\"" + c[0] + "\" : " + c[1]));
            assertNotEquals(good, bad, c[0]);
            Files.writeString(cfg, bad);
            loadFails(tmp, cfg + ": " + c[2]);
        }
    }

    @Test
    void missingShardFile() throws Exception {
        LoaderFixtures fx = tiny();
        fx.writeSharded(tmp, fx.hf(), 2);
        Files.delete(tmp.resolve(LoaderFixtures.shardName(1, 2)));
        CheckpointException e = loadFails(tmp, tmp.resolve("model-00002-of-00002.safetensors").toString(), "missing");
        assertEquals(tmp.resolve("model-00002-of-00002.safetensors"), e.file());
    }

    @Test
    void missingTensor() throws Exception {
        LoaderFixtures fx = tiny();
        Map<String, S> m = fx.original();
        m.remove("layers.1.attn.wo_b.weight");
        fx.writeSingle(tmp, m);
        CheckpointException e = loadFails(tmp, "model.safetensors", "layers.1.attn.wo_b.weight", "not found");
        assertEquals("layers.1.attn.wo_b.weight", e.tensor());

        Path hf = tmp.resolve("hf");
        Map<String, S> h = fx.hf();
        h.remove("model.layers.0.mlp.experts.down_proj");
        fx.writeSingle(hf, h);
        loadFails(hf, hf.resolve("model.safetensors").toString(), "model.layers.0.mlp.experts.down_proj", "not found");
    }

    @Test
    void missingFp8Scale() throws Exception {
        LoaderFixtures fx = new LoaderFixtures(LoaderFixtures.tinyConfig(32), 10, true);
        Map<String, S> m = fx.original();
        m.remove("layers.0.attn.wq_a.scale");
        fx.writeSingle(tmp, m);
        loadFails(tmp, "model.safetensors", "layers.0.attn.wq_a.weight", "layers.0.attn.wq_a.scale");
    }

    @Test
    void truncatedFile() throws Exception {
        LoaderFixtures fx = tiny();
        fx.writeSingle(tmp, fx.original());
        Path f = tmp.resolve("model.safetensors");
        byte[] b = Files.readAllBytes(f);
        Files.write(f, Arrays.copyOf(b, b.length - 100));
        loadFails(tmp, f.toString(), "truncated");
    }

    @Test
    void corruptHeader() throws Exception {
        LoaderFixtures fx = tiny();
        fx.writeSingle(tmp, fx.original());
        Path f = tmp.resolve("model.safetensors");
        byte[] b = Files.readAllBytes(f);
        byte[] garbage = b.clone();
        for (int i = 8; i < 64; i++) garbage[i] = (byte) ('a' + i % 26);
        Files.write(f, garbage);
        loadFails(tmp, f.toString(), "corrupt header");
        byte[] tooLong = b.clone();
        ByteBuffer.wrap(tooLong).order(ByteOrder.LITTLE_ENDIAN).putLong(0, b.length);
        Files.write(f, tooLong);
        loadFails(tmp, f.toString(), "header length", "larger than the file");
    }

    @Test
    void shapeMismatch() throws Exception {
        LoaderFixtures fx = tiny();
        Map<String, S> m = fx.original();
        m.put("layers.0.attn.wkv.weight", new S(DType.F32, new long[]{16, 31}, new byte[16 * 31 * 4]));
        fx.writeSingle(tmp, m);
        CheckpointException e = loadFails(tmp, "model.safetensors", "layers.0.attn.wkv.weight", "expected [16, 32]", "found [16, 31]");
        assertEquals("layers.0.attn.wkv.weight", e.tensor());

        Path hf = tmp.resolve("hf");
        Map<String, S> h = fx.hf();
        h.put("model.layers.1.mlp.experts.gate_up_proj", new S(DType.F32, new long[]{3, 32, 32}, new byte[3 * 32 * 32 * 4]));
        fx.writeSingle(hf, h);
        loadFails(hf, "model.layers.1.mlp.experts.gate_up_proj", "expected [4, 32, 32]", "found [3, 32, 32]");

        Path v = tmp.resolve("vec");
        Map<String, S> o = fx.original();
        o.put("layers.1.attn.compressor.ape", new S(DType.F32, new long[]{4, 16}, new byte[4 * 16 * 4]));
        fx.writeSingle(v, o);
        loadFails(v, "layers.1.attn.compressor.ape", "expected [8, 16]", "found [4, 16]");
    }

    @Test
    void unsupportedDtype() throws Exception {
        LoaderFixtures fx = tiny();
        fx.writeSingle(tmp, fx.original());
        Path f = tmp.resolve("model.safetensors");
        LoaderFixtures.rewriteHeader(f, h -> {
            ((ObjectNode) h.get("layers.0.attn.attn_sink")).put("dtype", "F8_E5M2");
            return h;
        });
        CheckpointException e = loadFails(tmp, f.toString(), "layers.0.attn.attn_sink", "unsupported dtype F8_E5M2");
        assertEquals("layers.0.attn.attn_sink", e.tensor());

        // a known dtype that cannot serve as a matrix / vector
        Path g = tmp.resolve("g");
        Map<String, S> m = fx.original();
        m.put("layers.0.attn.wq_a.weight", new S(DType.I64, new long[]{16, 32}, new byte[16 * 32 * 8]));
        m.put("layers.0.attn.kv_norm.weight", new S(DType.I32, new long[]{16}, new byte[16 * 4]));
        fx.writeSingle(g, m);
        loadFails(g, "layers.0.attn.wq_a.weight", "dtype I64");
    }

    @Test
    void badExpertIds() throws Exception {
        LoaderFixtures fx = tiny();
        fx.tensors.get("model.layers.0.mlp.gate.tid2eid").ints[7] = 4; // E = 4
        fx.writeSingle(tmp, fx.original());
        loadFails(tmp, "layers.0.ffn.gate.tid2eid", "token 3", "expert id 4");
    }
}
