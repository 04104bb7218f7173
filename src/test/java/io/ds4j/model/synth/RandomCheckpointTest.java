package io.ds4j.model.synth;

import io.ds4j.cli.Main;
import io.ds4j.model.Checkpoint;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.TensorNames;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.WeightMatrix;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.*;

class RandomCheckpointTest {
    static final long SEED = 7;
    static Path root;
    static Path hfBf16, origBf16Sharded, origF32, origFp8;

    @BeforeAll
    static void generate() throws Exception {
        root = Files.createTempDirectory("ds4j-synth-test");
        ModelConfig tiny = Presets.get("tiny");
        hfBf16 = root.resolve("hf-bf16");
        new RandomCheckpoint(tiny, SEED, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16)
                .metadata(Map.of("ds4j.preset", "tiny")) // as the CLI writes it
                .write(hfBf16);
        origBf16Sharded = root.resolve("orig-bf16-sharded");
        new RandomCheckpoint(tiny, SEED, TensorNames.Scheme.ORIGINAL, RandomCheckpoint.Storage.BF16)
                .write(origBf16Sharded, 12L << 20, null);
        // the FP8-vs-F32 pair uses a cut vocabulary to keep the test fast; values are keyed by (name, row, col),
        // so its first 8192 embed/head rows and all layer weights equal the full tiny model's
        ModelConfig cut = Presets.get("tiny");
        cut.vocabSize = 8192;
        origF32 = root.resolve("orig-f32");
        new RandomCheckpoint(cut, SEED, TensorNames.Scheme.ORIGINAL, RandomCheckpoint.Storage.F32).write(origF32);
        origFp8 = root.resolve("orig-fp8");
        new RandomCheckpoint(cut, SEED, TensorNames.Scheme.ORIGINAL, RandomCheckpoint.Storage.FP8).write(origFp8);
    }

    @AfterAll
    static void cleanup() throws Exception {
        if (root == null) return;
        try (var s = Files.walk(root)) {
            for (Path p : s.sorted(java.util.Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
        }
    }

    static String sha256(Path p) throws Exception {
        MessageDigest md = MessageDigest.getInstance("SHA-256");
        try (var in = Files.newInputStream(p)) {
            byte[] buf = new byte[1 << 20];
            for (int n; (n = in.read(buf)) > 0; ) md.update(buf, 0, n);
        }
        return HexFormat.of().formatHex(md.digest());
    }

    static int cli(String... args) {
        var cl = Main.commandLine();
        cl.setOut(new PrintWriter(new StringWriter()));
        cl.setErr(new PrintWriter(new StringWriter()));
        return cl.execute(args);
    }

    @Test
    void sameSeedGivesIdenticalFilesThroughTheCli() throws Exception {
        Path again = root.resolve("cli-hf-bf16");
        // stale files of an earlier sharded run: --force must remove them, or the index would win over the new file
        Files.createDirectories(again);
        Files.writeString(again.resolve(Checkpoint.INDEX), "{\"weight_map\": {}}");
        Files.writeString(again.resolve("model-00001-of-00002.safetensors"), "junk");
        Files.writeString(again.resolve("notes.txt"), "kept");
        assertEquals(2, cli("make-model", "--preset", "tiny", "--seed", "" + SEED, "--out", again.toString()));
        assertEquals(0, cli("make-model", "--preset", "tiny", "--seed", "" + SEED, "--out", again.toString(), "--force"));
        assertFalse(Files.exists(again.resolve(Checkpoint.INDEX)));
        assertFalse(Files.exists(again.resolve("model-00001-of-00002.safetensors")));
        assertTrue(Files.exists(again.resolve("notes.txt")));
        assertEquals(sha256(hfBf16.resolve("model.safetensors")), sha256(again.resolve("model.safetensors")));
        assertEquals(sha256(hfBf16.resolve("config.json")), sha256(again.resolve("config.json")));
        // refuses a non-empty directory without --force; bad values give exit code 2
        assertEquals(2, cli("make-model", "--preset", "tiny", "--seed", "1", "--out", again.toString()));
        assertEquals(2, cli("make-model", "--preset", "huge", "--seed", "1", "--out", root.resolve("x").toString()));
        assertEquals(2, cli("make-model", "--preset", "tiny", "--seed", "1", "--dtype", "fp4", "--out", root.resolve("x").toString()));
        assertEquals(2, cli("make-model", "--preset", "tiny", "--seed", "1", "--dtype", "fp8", "--naming", "hf", "--out", root.resolve("x").toString()));
        assertEquals(2, cli("make-model", "--preset", "tiny", "--seed", "1", "--experts", "1", "--out", root.resolve("x").toString()));
        assertFalse(Files.exists(root.resolve("x")));
    }

    @Test
    void configRoundTrips() throws Exception {
        for (String p : Presets.NAMES) {
            ModelConfig c = Presets.get(p);
            var ck = new RandomCheckpoint(c, 1, TensorNames.Scheme.ORIGINAL,
                    p.startsWith("flash") ? RandomCheckpoint.Storage.FP8 : RandomCheckpoint.Storage.BF16);
            assertEquals(c.toJson(), ModelConfig.fromJson(ck.configJson()).toJson(), p);
        }
        ModelConfig read = ModelConfig.read(hfBf16.resolve("config.json"));
        assertEquals(Presets.get("tiny").toJson(), read.toJson());
        assertEquals(129280, read.vocabSize);
        ModelConfig fp8 = ModelConfig.read(origFp8.resolve("config.json"));
        assertEquals(8192, fp8.vocabSize);
        fp8.vocabSize = 129280;
        assertEquals(Presets.get("tiny").toJson(), fp8.toJson());
        // overrides
        ModelConfig f = Presets.get("flash-shaped", 6, 32);
        assertEquals(6, f.numLayers);
        assertEquals(32, f.numExperts);
        assertEquals("[SLIDING, SLIDING, CSA, HCA, CSA, HCA]", java.util.Arrays.toString(f.layerTypes));
        // the default is full depth in V4-Flash's schedule: 2 sliding-window layers, 21 CSA, 20 HCA, 16 routed experts
        ModelConfig full = Presets.get("flash-shaped");
        assertEquals(43, full.numLayers);
        assertEquals(16, full.numExperts);
        java.util.Map<io.ds4j.model.AttentionKind, Long> kinds = java.util.Arrays.stream(full.layerTypes)
                .collect(java.util.stream.Collectors.groupingBy(k -> k, java.util.stream.Collectors.counting()));
        assertEquals(java.util.Map.of(io.ds4j.model.AttentionKind.SLIDING, 2L, io.ds4j.model.AttentionKind.CSA, 21L,
                io.ds4j.model.AttentionKind.HCA, 20L), kinds);
    }

    @Test
    void presetSizes() {
        long tiny = new RandomCheckpoint(Presets.get("tiny"), 1, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16).totalBytes();
        long small = new RandomCheckpoint(Presets.get("small"), 1, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16).totalBytes();
        long flash = new RandomCheckpoint(Presets.get("flash-shaped"), 1, TensorNames.Scheme.ORIGINAL, RandomCheckpoint.Storage.FP8).totalBytes();
        assertTrue(tiny < 50e6, "tiny " + tiny);
        assertTrue(small > 300e6 && small < 520e6, "small " + small);
        assertTrue(flash > 15e9 && flash < 21e9, "flash " + flash);
    }

    @Test
    void bothNamingsLoadWithIdenticalValues() throws Exception {
        assertTrue(Files.exists(origBf16Sharded.resolve(Checkpoint.INDEX)), "expected a sharded checkpoint");
        try (ModelWeights hf = WeightLoader.load(hfBf16); ModelWeights orig = WeightLoader.load(origBf16Sharded)) {
            Map<String, Object> a = flatten(hf), b = flatten(orig);
            assertEquals(a.keySet(), b.keySet());
            for (String k : a.keySet()) {
                Object x = a.get(k), y = b.get(k);
                if (x instanceof WeightMatrix mx) {
                    WeightMatrix my = (WeightMatrix) y;
                    assertEquals(WeightMatrix.Format.BF16, mx.format, k);
                    assertEquals(mx.format, my.format, k);
                    assertEquals(-1, MemorySegment.mismatch(mx.data, 0, mx.rowBytes() * mx.rows, my.data, 0, my.rowBytes() * my.rows), k);
                } else if (x instanceof float[] fx) {
                    assertArrayEquals(fx, (float[]) y, k);
                } else {
                    assertArrayEquals((int[]) x, (int[]) y, k);
                }
            }
            // tid2eid rows: k distinct experts
            int k = hf.config.expertsPerToken;
            int[] t = hf.layers[0].tid2eid;
            for (int tok = 0; tok < hf.config.vocabSize; tok += 101) {
                Set<Integer> s = new HashSet<>();
                for (int j = 0; j < k; j++) s.add(t[tok * k + j]);
                assertEquals(k, s.size());
            }
            assertNotNull(hf.layers[1].indexer);
            assertNull(hf.layers[2].indexer);
            assertNotNull(hf.layers[2].compressor);
            assertNull(hf.layers[0].compressor);
        }
    }

    @Test
    void fp8CheckpointMatchesF32WithinQuantisationError() throws Exception {
        try (ModelWeights f = WeightLoader.load(origF32); ModelWeights q = WeightLoader.load(origFp8);
             ModelWeights bf = WeightLoader.load(hfBf16)) {
            assertEquals(WeightMatrix.Format.FP8_E4M3_B128, q.layers[0].qA.format);
            assertEquals(WeightMatrix.Format.FP8_E4M3_B128, q.layers[1].indexer.qB.format);
            assertEquals(WeightMatrix.Format.FP8_E4M3_B128, q.layers[3].sharedW2.format);
            assertEquals(WeightMatrix.Format.FP4_E2M1_B32, q.layers[4].w2[7].format);
            assertEquals(WeightMatrix.Format.BF16, q.layers[1].compressor.kvProj.format);
            assertEquals(WeightMatrix.Format.BF16, q.embed.format);
            Map<String, Object> a = flatten(f), b = flatten(q), c = flatten(bf);
            int checked = 0;
            for (String k : a.keySet()) {
                Object x = a.get(k), y = b.get(k);
                if (x instanceof WeightMatrix mx) {
                    assertEquals(WeightMatrix.Format.F32, mx.format, k);
                    WeightMatrix my = (WeightMatrix) y, mb = (WeightMatrix) c.get(k);
                    int step = (long) mx.rows * mx.cols > 100_000 ? 29 : 1;
                    for (int r = 0; r < mx.rows; r += step)
                        for (int col = 0; col < mx.cols; col++) {
                            float v = mx.get(r, col), w = my.get(r, col);
                            assertTrue(Float.isFinite(v), k);
                            assertTrue(Math.abs(w - v) <= bound(my, r, col, v), k + "(" + r + "," + col + "): f32 " + v + " stored " + w);
                            assertEquals(bf16(v), mb.get(r, col), 0f, k);
                            checked++;
                        }
                } else if (x instanceof float[] fx) {
                    float[] fy = (float[]) y;
                    float[] fc = (float[]) c.get(k);
                    for (int i = 0; i < fx.length; i++) {
                        assertEquals(fx[i], fy[i], Math.abs(fx[i]) * 0x1p-8f, k);
                        assertEquals(bf16(fx[i]), fc[i], 0f, k);
                    }
                } else {
                    assertArrayEquals((int[]) x, (int[]) y, k);
                    int[] full = (int[]) c.get(k);
                    assertArrayEquals((int[]) x, java.util.Arrays.copyOf(full, ((int[]) x).length), k);
                }
            }
            assertTrue(checked > 250_000, "checked " + checked);
        }
    }

    private static float bf16(float v) {
        return Float.intBitsToFloat(io.ds4j.model.SafetensorsWriter.bf16(v) << 16);
    }

    /** Largest rounding error of a stored element whose exact value is v. */
    private static float bound(WeightMatrix m, int r, int c, float v) {
        return switch (m.format) {
            case F32 -> 0f;
            case BF16, F16 -> Math.abs(v) * 0x1p-8f;
            case FP8_E4M3_B128 -> {
                float s = m.fp8Scale(r, c);
                yield Math.max(Math.abs(v) * 0x1p-4f, s * 0x1p-10f);
            }
            case FP4_E2M1_B32 -> {
                float s = WeightMatrix.e8m0(m.scale.get(java.lang.foreign.ValueLayout.JAVA_BYTE, (long) r * (m.cols / 32) + c / 32));
                float a = Math.abs(v) / s;
                yield (a < 2 ? 0.25f : a < 4 ? 0.5f : 1f) * s;
            }
        };
    }

    /** Every matrix and vector of a model, by role. */
    static Map<String, Object> flatten(ModelWeights w) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("embed", w.embed);
        m.put("lmHead", w.lmHead);
        m.put("hcHeadFn", w.hcHeadFn);
        m.put("hcHeadBase", w.hcHeadBase);
        m.put("hcHeadScale", w.hcHeadScale);
        m.put("finalNorm", w.finalNorm);
        for (int l = 0; l < w.layers.length; l++) {
            ModelWeights.Layer y = w.layers[l];
            String p = "L" + l + ".";
            List<Object[]> e = new ArrayList<>(List.of(
                    new Object[]{"attnHcFn", y.attnHcFn}, new Object[]{"ffnHcFn", y.ffnHcFn},
                    new Object[]{"attnHcBase", y.attnHcBase}, new Object[]{"attnHcScale", y.attnHcScale},
                    new Object[]{"ffnHcBase", y.ffnHcBase}, new Object[]{"ffnHcScale", y.ffnHcScale},
                    new Object[]{"inputNorm", y.inputNorm}, new Object[]{"postAttnNorm", y.postAttnNorm},
                    new Object[]{"qA", y.qA}, new Object[]{"qANorm", y.qANorm}, new Object[]{"qB", y.qB},
                    new Object[]{"kv", y.kv}, new Object[]{"kvNorm", y.kvNorm}, new Object[]{"oA", y.oA},
                    new Object[]{"oB", y.oB}, new Object[]{"sinks", y.sinks}, new Object[]{"gate", y.gate},
                    new Object[]{"gateBias", y.gateBias}, new Object[]{"tid2eid", y.tid2eid},
                    new Object[]{"sharedW1", y.sharedW1}, new Object[]{"sharedW2", y.sharedW2}, new Object[]{"sharedW3", y.sharedW3}));
            for (int x = 0; x < y.w1.length; x++) {
                e.add(new Object[]{"w1." + x, y.w1[x]});
                e.add(new Object[]{"w2." + x, y.w2[x]});
                e.add(new Object[]{"w3." + x, y.w3[x]});
            }
            if (y.compressor != null) compressor(e, "comp.", y.compressor);
            if (y.indexer != null) {
                compressor(e, "idx.comp.", y.indexer.compressor);
                e.add(new Object[]{"idx.qB", y.indexer.qB});
                e.add(new Object[]{"idx.weightsProj", y.indexer.weightsProj});
            }
            for (Object[] o : e) if (o[1] != null) m.put(p + o[0], o[1]);
        }
        return m;
    }

    private static void compressor(List<Object[]> e, String p, ModelWeights.Compressor c) {
        e.add(new Object[]{p + "kvProj", c.kvProj});
        e.add(new Object[]{p + "gateProj", c.gateProj});
        e.add(new Object[]{p + "positionBias", c.positionBias});
        e.add(new Object[]{p + "norm", c.norm});
    }
}
