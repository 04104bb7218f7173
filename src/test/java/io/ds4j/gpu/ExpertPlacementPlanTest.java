package io.ds4j.gpu;

import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.engine.BackendOptions.ExpertPlacement;
import io.ds4j.engine.CacheLayout;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.synth.Presets;
import org.junit.jupiter.api.Test;

import java.util.LinkedHashMap;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The expert placement arithmetic of the GPU backend, without a GPU: which placement each request gets for a budget,
 * how many routed experts of each layer stay on the device, the out-of-memory messages, the automatic budget and its
 * reserve, and the dry-run footprint of real weights.
 */
class ExpertPlacementPlanTest {
    static final long MIB = 1 << 20;

    /** 3 layers × 4 experts of 100 bytes, tables 64 bytes per layer, 1500 bytes of other weights: 2892 in all. */
    static ExpertPlacementPlan.Footprint fp() {
        return fp(new long[][]{{100, 100, 100, 100}, {100, 100, 100, 100}, {100, 100, 100, 100}});
    }

    /** Fixed weights of the test footprints: 1500 bytes in five categories. */
    static Map<String, Long> fixedCategories() {
        Map<String, Long> fixed = new LinkedHashMap<>();
        fixed.put(DeviceMemoryReport.EMBED, 1000L);
        fixed.put(DeviceMemoryReport.ATTENTION, 300L);
        fixed.put(DeviceMemoryReport.COMPRESSORS, 100L);
        fixed.put(DeviceMemoryReport.SHARED, 60L);
        fixed.put(DeviceMemoryReport.OTHER, 40L);
        return fixed;
    }

    static ExpertPlacementPlan.Footprint fp(long[][] experts) {
        Map<String, Long> fixed = fixedCategories();
        long[][] host = new long[experts.length][];
        for (int l = 0; l < experts.length; l++) {
            host[l] = new long[experts[l].length];
            java.util.Arrays.fill(host[l], 90);
        }
        long[] tables = new long[experts.length];
        java.util.Arrays.fill(tables, 64);
        return new ExpertPlacementPlan.Footprint(fixed, experts, tables, host);
    }

    static ExpertPlacementPlan.Budget budget(long bytes) {
        return ExpertPlacementPlan.Budget.of(bytes, 10_000, 0);
    }

    @Test
    void footprintArithmetic() {
        ExpertPlacementPlan.Footprint f = fp();
        assertEquals(1500, f.fixedTotal());
        assertEquals(192, f.tablesTotal());
        assertEquals(2892, f.total());
        assertEquals(500, f.residentBytes(new int[]{2, 3, 0}));
        assertEquals(90 * 7, f.hostBytes(new int[]{2, 3, 0}));
    }

    @Test
    void autoIsMonolithicExactlyWhenTheWholeModelFits() {
        ExpertPlacementPlan p = ExpertPlacementPlan.plan(ExpertPlacement.AUTO, false, budget(2892), fp());
        assertEquals(ExpertPlacement.MONOLITHIC, p.placement());
        assertArrayEquals(new int[]{4, 4, 4}, p.resident());
        assertEquals(0, p.hostExperts());
        assertEquals(2892, p.deviceBytes());

        p = ExpertPlacementPlan.plan(ExpertPlacement.AUTO, false, budget(2891), fp());
        assertEquals(ExpertPlacement.HYBRID, p.placement());
        // room for experts 2891 − 1692 = 1199: three full rounds (900), then one more in layers 0 and 1 (1100)
        assertArrayEquals(new int[]{4, 4, 3}, p.resident());
        assertEquals(1, p.hostExperts());
        assertEquals(1692 + 1100, p.deviceBytes());
        assertFalse(p.f16KvDropped());
        assertEquals("3..4", p.residentRange());
    }

    @Test
    void hybridKeepsAUniformPrefixAndFillsTheRest() {
        // room 1692 + 650: two rounds (600), then one more in layer 0 (100 > 50 left: no) → 2, 2, 2
        ExpertPlacementPlan p = ExpertPlacementPlan.plan(ExpertPlacement.HYBRID, false, budget(1692 + 650), fp());
        assertArrayEquals(new int[]{2, 2, 2}, p.resident());
        assertEquals(6, p.hostExperts());
        assertEquals(1692 + 600, p.deviceBytes());
        assertEquals("2", p.residentRange());
        // room 1692 + 799: two rounds (600) and one more in layer 0 (700); layer 1 would need 800
        p = ExpertPlacementPlan.plan(ExpertPlacement.HYBRID, false, budget(1692 + 799), fp());
        assertArrayEquals(new int[]{3, 2, 2}, p.resident());
        // nothing but the fixed weights: every expert on the host
        p = ExpertPlacementPlan.plan(ExpertPlacement.HYBRID, false, budget(1692), fp());
        assertArrayEquals(new int[]{0, 0, 0}, p.resident());
        assertEquals(12, p.hostExperts());
        assertEquals(ExpertPlacement.HYBRID, p.placement());
    }

    @Test
    void theFirstExpertCarriesSharedStorage() {
        // expert 0 of each layer also pays for a scale grid shared by the layer's experts (stacked FP8)
        long[][] b = {{400, 100, 100, 100}, {400, 100, 100, 100}};
        ExpertPlacementPlan.Footprint f = fp(b);
        long fixed = f.fixedTotal() + f.tablesTotal();
        ExpertPlacementPlan p = ExpertPlacementPlan.plan(ExpertPlacement.HYBRID, false, budget(fixed + 799), f);
        assertArrayEquals(new int[]{1, 0}, p.resident(), "one round costs 800; layer 0 gets its first expert");
        p = ExpertPlacementPlan.plan(ExpertPlacement.HYBRID, false, budget(fixed + 900), f);
        assertArrayEquals(new int[]{2, 1}, p.resident(), "one round (800), the second round needs 200: one more in layer 0");
        assertEquals(fixed + 900, p.deviceBytes());
        p = ExpertPlacementPlan.plan(ExpertPlacement.HYBRID, false, budget(fixed + 1000), f);
        assertArrayEquals(new int[]{2, 2}, p.resident());
    }

    @Test
    void hybridThatHoldsEverythingIsMonolithic() {
        ExpertPlacementPlan p = ExpertPlacementPlan.plan(ExpertPlacement.HYBRID, true, budget(5000), fp());
        assertEquals(ExpertPlacement.MONOLITHIC, p.placement());
        assertEquals(0, p.hostExperts());
        assertFalse(p.f16KvDropped(), "monolithic keeps the F16-KV verifier");
    }

    @Test
    void f16KvVerifierAsksForMonolithicAndIsDroppedWithHybrid() {
        ExpertPlacementPlan p = ExpertPlacementPlan.plan(ExpertPlacement.AUTO, true, budget(2892), fp());
        assertEquals(ExpertPlacement.MONOLITHIC, p.placement());
        assertFalse(p.f16KvDropped());
        p = ExpertPlacementPlan.plan(ExpertPlacement.AUTO, true, budget(2000), fp());
        assertEquals(ExpertPlacement.HYBRID, p.placement());
        assertTrue(p.f16KvDropped());
        p = ExpertPlacementPlan.plan(ExpertPlacement.HYBRID, true, budget(2000), fp());
        assertTrue(p.f16KvDropped());
        p = ExpertPlacementPlan.plan(ExpertPlacement.MONOLITHIC, true, budget(2892), fp());
        assertFalse(p.f16KvDropped());
    }

    @Test
    void monolithicThatDoesNotFitNamesWhatToChange() {
        DeviceMemoryException e = assertThrows(DeviceMemoryException.class,
                () -> ExpertPlacementPlan.plan(ExpertPlacement.MONOLITHIC, false, ExpertPlacementPlan.Budget.of(2000 * MIB, 3000 * MIB, 0),
                        fp(new long[][]{{1000 * MIB, 1000 * MIB}})));
        String m = e.getMessage();
        for (String part : new String[]{"monolithic", "2000.0 MiB", "3000.0 MiB", "short", "gpu.expertPlacement: hybrid",
                "gpu.memoryBudgetMiB", "smaller model", DeviceMemoryReport.EMBED, DeviceMemoryReport.EXPERTS_DEVICE, "1 layers x 2 experts"})
            assertTrue(m.contains(part), "message names '" + part + "': " + m);
        assertEquals(5, e.code, "DS4J_ERR_OOM");
    }

    @Test
    void weightsBesidesTheExpertsThatDoNotFitAreAnErrorInEveryPlacement() {
        for (ExpertPlacement pl : ExpertPlacement.values()) {
            DeviceMemoryException e = assertThrows(DeviceMemoryException.class,
                    () -> ExpertPlacementPlan.plan(pl, false, budget(1691), fp()), pl.key());
            if (pl != ExpertPlacement.MONOLITHIC)
                assertTrue(e.getMessage().contains("even with every routed expert in host memory"), e.getMessage());
            assertTrue(e.getMessage().contains("gpu.memoryBudgetMiB"), e.getMessage());
        }
    }

    @Test
    void automaticBudgetIsTheFreeMemoryLessTheReserve() {
        ExpertPlacementPlan.Budget b = ExpertPlacementPlan.Budget.of(0, 10_000 * MIB, 1_000 * MIB);
        assertEquals(9_000 * MIB, b.bytes());
        assertFalse(b.explicit());
        assertTrue(b.describe().contains("less a reserve of 1000.0 MiB"), b.describe());
        assertEquals(0, ExpertPlacementPlan.Budget.of(0, 500, 1000).bytes(), "never negative");
        b = ExpertPlacementPlan.Budget.of(20_000 * MIB, 10_000 * MIB, 1_000 * MIB);
        assertEquals(20_000 * MIB, b.bytes(), "an explicit budget is trusted");
        assertTrue(b.explicit());
        assertTrue(b.describe().contains("gpu.memoryBudgetMiB = 20000.0 MiB"), b.describe());
        assertThrows(IllegalArgumentException.class, () -> ExpertPlacementPlan.Budget.of(-1, 0, 0));
    }

    @Test
    void reserveCoversRuntimeWorkspaceAndCaches() {
        ModelConfig c = Presets.get("flash-shaped");
        long caches = ExpertPlacementPlan.RESERVE_SEQUENCES * CacheLayout.stateBytes(c, ExpertPlacementPlan.RESERVE_CONTEXT,
                ExpertPlacementPlan.RESERVE_ROLLBACK);
        long step = Workspace.stepBytes(c, ExpertPlacementPlan.RESERVE_STEP_TOKENS,
                ExpertPlacementPlan.RESERVE_CONTEXT - ExpertPlacementPlan.RESERVE_STEP_TOKENS, ExpertPlacementPlan.RESERVE_LOGIT_ROWS);
        assertEquals(ExpertPlacementPlan.RUNTIME_RESERVE + step + caches, ExpertPlacementPlan.reserveBytes(c));
        // the step holds at least the mHC streams [S, n·D] and the routed picks [S·k, I] twice and [S·k, D]
        long S = ExpertPlacementPlan.RESERVE_STEP_TOKENS, k = c.expertsPerToken;
        assertTrue(step >= 4 * S * c.hcMult * c.hidden + 4 * (2 * S * k * c.moeInter + S * k * c.hidden), "step " + step);
    }

    @Test
    void stepWorkspaceGrowsWithTokensContextAndLogitsRows() {
        ModelConfig c = Presets.get("small");
        long base = Workspace.stepBytes(c, 64, 1000, 1);
        assertTrue(Workspace.stepBytes(c, 128, 1000, 1) > base, "more tokens");
        assertTrue(Workspace.stepBytes(c, 64, 100_000, 1) > base, "indexer scores grow with the context");
        long rows = Workspace.stepBytes(c, 64, 1000, 64);
        assertTrue(rows >= 4L * 64 * c.vocabSize + 4L * 64 * c.hcMult * c.hidden, "logits of 64 rows and the streams: " + rows);
        assertTrue(rows > Workspace.stepBytes(c, 64, 1000, 0));
        assertEquals(0, Workspace.stepBytes(c, 64, 1000, 1) % 256, "allocations are rounded to 256 bytes");
    }

    @Test
    void dryRunFootprintOfRealWeights() throws Exception {
        ModelConfig c = TestModelsAccess.microConfig();
        try (ModelWeights w = TestModelsAccess.random(c, 5)) {
            ExpertPlacementPlan.Footprint f = DeviceWeights.measure(w);
            assertEquals(c.numLayers, f.expertBytes().length);
            for (String cat : new String[]{DeviceMemoryReport.EMBED, DeviceMemoryReport.ATTENTION, DeviceMemoryReport.COMPRESSORS,
                    DeviceMemoryReport.SHARED, DeviceMemoryReport.OTHER})
                assertTrue(f.fixed().get(cat) > 0, cat);
            assertFalse(f.fixed().containsKey(DeviceMemoryReport.EXPERTS_DEVICE));
            long stored = w.embed.storedBytes() + w.lmHead.storedBytes();
            assertTrue(f.fixed().get(DeviceMemoryReport.EMBED) >= stored && f.fixed().get(DeviceMemoryReport.EMBED) < stored + 512);
            for (int l = 0; l < c.numLayers; l++) {
                assertEquals(c.numExperts, f.expertBytes()[l].length);
                assertTrue(f.tableBytes()[l] >= 2 * 8L * c.numExperts, "data tables of w1, w3, w2 at least");
                for (int e = 0; e < c.numExperts; e++) {
                    ModelWeights.Layer L = w.layers[l];
                    long s = L.w1[e].storedBytes() + L.w3[e].storedBytes() + L.w2[e].storedBytes();
                    assertEquals(s, f.hostBytes()[l][e]);
                    assertTrue(f.expertBytes()[l][e] >= s && f.expertBytes()[l][e] < s + 3 * 2 * 256, "expert " + e + " device bytes");
                }
            }
            long sum = f.fixedTotal() + f.tablesTotal();
            for (long[] layer : f.expertBytes()) for (long v : layer) sum += v;
            assertEquals(sum, f.total());
        }
    }
}
