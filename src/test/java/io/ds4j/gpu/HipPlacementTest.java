package io.ds4j.gpu;

import static io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_TC_MIN_ROWS;
import io.ds4j.engine.Backend;
import io.ds4j.engine.BackendOptions;
import io.ds4j.engine.BackendOptions.ExpertPlacement;
import io.ds4j.engine.EngineStatus;
import io.ds4j.engine.Sequence;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.TensorNames;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.Presets;
import io.ds4j.model.synth.RandomCheckpoint;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.stream.Stream;

import static io.ds4j.gpu.HipBackendTest.all;
import static io.ds4j.gpu.HipBackendTest.prompt;
import static org.junit.jupiter.api.Assertions.*;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

/**
 * Expert placement on the GPU: hybrid placement with a budget that leaves half the routed experts of
 * every layer in host memory gives the logits of monolithic placement (max |difference| ≤ 2e-3, same argmax) for
 * prefill, decode, verification of 5 rows and rollback, on the {@code tiny} (FP8 + FP4 experts) and {@code small}
 * (BF16) presets; monolithic with a too-small budget fails with a clear message before uploading anything; auto picks
 * monolithic exactly when the model fits; the memory report lists every category; running out of device memory while
 * uploading, creating a sequence or growing its cache is a clear error that frees what was allocated and leaves the
 * sequence usable.
 */
@Tag("gpu")
class HipPlacementTest {
    static final String F16_DROPPED = io.ds4j.engine.FeatureGate.F16KV_HYBRID_WARNING;

    @TempDir
    static Path tmp;
    static Path tiny, small;

    @BeforeAll
    static void writeModels() throws Exception {
        tiny = tmp.resolve("tiny-fp8");
        new RandomCheckpoint(Presets.get("tiny"), 21, TensorNames.Scheme.ORIGINAL, RandomCheckpoint.Storage.FP8).write(tiny);
        small = tmp.resolve("small-bf16");
        new RandomCheckpoint(Presets.get("small"), 22, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16).write(small);
    }

    static BackendOptions opts(ExpertPlacement p, long budget, boolean f16) {
        return new BackendOptions(1, p, budget, f16, BackendOptions.DEFAULT_SHORT_ROWS);
    }

    static HipBackend open(Path dir, BackendOptions o) throws Exception {
        ModelWeights w = WeightLoader.load(dir);
        try {
            return new HipBackend(w, o);
        } catch (RuntimeException e) {
            w.close();
            throw e;
        }
    }

    static ExpertPlacementPlan.Footprint footprint(Path dir) throws Exception {
        try (ModelWeights w = WeightLoader.load(dir)) {
            return DeviceWeights.measure(w);
        }
    }

    /** A budget that holds every weight but the routed experts, plus experts 0 .. r−1 of every layer. */
    static long budgetFor(ExpertPlacementPlan.Footprint fp, int r) {
        long b = fp.fixedTotal() + fp.tablesTotal();
        for (long[] layer : fp.expertBytes())
            for (int e = 0; e < r; e++) b += layer[e];
        return b;
    }

    // ---------------------------------------------------------------------------------------------------- parity

    @TestFactory
    Stream<DynamicTest> hybridMatchesMonolithic() {
        List<DynamicTest> t = new ArrayList<>();
        for (String m : new String[]{"tiny", "small"})
            t.add(DynamicTest.dynamicTest(m, () -> {
                Path dir = m.equals("tiny") ? tiny : small;
                ExpertPlacementPlan.Footprint fp = footprint(dir);
                int E = fp.expertBytes()[0].length, r = E / 2;
                try (HipBackend mono = open(dir, opts(ExpertPlacement.MONOLITHIC, 0, false));
                     HipBackend hyb = open(dir, opts(ExpertPlacement.HYBRID, budgetFor(fp, r), false))) {
                    assertEquals("monolithic", mono.status().expertPlacement());
                    EngineStatus st = hyb.status();
                    assertEquals("hybrid", st.expertPlacement());
                    assertEquals(fp.expertBytes().length * (E - r), st.hostExperts());
                    for (int res : hyb.placement().resident()) assertEquals(r, res, "resident experts per layer");
                    prefill(m, mono, hyb);
                    decode(m, mono, hyb);
                    verify(m, mono, hyb, 4);
                    for (int l = 0; l < hyb.hostPickCount.length; l++)
                        assertTrue(hyb.hostPickCount[l] > 0, m + ": layer " + l + " ran no pick on the host");
                    for (long n : mono.hostPickCount) assertEquals(0, n);
                    assertEquals(0, mono.workspaceOvershoot(), "bytes a step took beyond Workspace.stepBytes (monolithic)");
                    assertEquals(0, hyb.workspaceOvershoot(), "bytes a step took beyond Workspace.stepBytes (hybrid)");
                }
            }));
        return t.stream();
    }

    static void prefill(String name, Backend ref, Backend test) {
        HipBackendTest.Cmp cmp = new HipBackendTest.Cmp(name + " prefill", ref.config().vocabSize, "hybrid vs monolithic");
        int[] toks = prompt(ref.config(), 100, 1);
        try (Sequence a = ref.newSequence(16); Sequence b = test.newSequence(16)) {
            cmp.rows(ref.forward(a, toks, 0, 100, all(100)), test.forward(b, toks, 0, 100, all(100)), "prefill 100");
        }
        cmp.done();
    }

    static void decode(String name, Backend ref, Backend test) {
        HipBackendTest.Cmp cmp = new HipBackendTest.Cmp(name + " decode", ref.config().vocabSize, "hybrid vs monolithic");
        // a prefill chunk at or above DS4J_TC_MIN_ROWS (the prefill kernels), then decode steps (the small-step ones)
        final int P = DS4J_TC_MIN_ROWS() + 5;
        int[] toks = prompt(ref.config(), P + 40, 2);
        try (Sequence a = ref.newSequence(16); Sequence b = test.newSequence(16)) {
            cmp.rows(ref.forward(a, toks, 0, P, new int[]{P - 1}), test.forward(b, toks, 0, P, new int[]{P - 1}), "prefill " + P);
            for (int i = P; i < P + 40; i++)
                cmp.rows(ref.forward(a, toks, i, 1, new int[]{0}), test.forward(b, toks, i, 1, new int[]{0}), "decode pos " + i);
        }
        cmp.done();
    }

    /** Verification of q+1 rows, then a rollback of the rejected drafts on both sides. */
    static void verify(String name, Backend ref, Backend test, int q) {
        HipBackendTest.Cmp cmp = new HipBackendTest.Cmp(name + " verify q=" + q, ref.config().vocabSize, "hybrid vs monolithic");
        SplittableRandom r = new SplittableRandom(3);
        int[] toks = prompt(ref.config(), 400, 4);
        try (Sequence a = ref.newSequence(16); Sequence b = test.newSequence(16)) {
            int pos = 50;
            cmp.rows(ref.forward(a, toks, 0, pos, new int[]{pos - 1}), test.forward(b, toks, 0, pos, new int[]{pos - 1}), "prefill");
            int rolledBack = 0;
            while (pos + q + 1 < toks.length && pos < 200) {
                int n = q + 1;
                cmp.rows(ref.forward(a, toks, pos, n, all(n)), test.forward(b, toks, pos, n, all(n)), "verify at " + pos);
                int reject = r.nextInt(n);
                a.rollback(reject);
                b.rollback(reject);
                rolledBack += reject;
                assertEquals(a.length(), b.length());
                pos = a.length();
            }
            assertTrue(rolledBack > 0, "some drafts were rolled back");
        }
        cmp.done();
    }

    // ---------------------------------------------------------------------------------------------------- decisions

    @Test
    void monolithicWithATooSmallBudgetFailsBeforeUploading() throws Exception {
        ExpertPlacementPlan.Footprint fp = footprint(tiny);
        long budget = fp.total() - 1;
        try (Gpu g = Gpu.open(0)) {
            long free0 = g.memory()[0];
            DeviceMemoryException e = assertThrows(DeviceMemoryException.class,
                    () -> open(tiny, opts(ExpertPlacement.MONOLITHIC, budget, false)));
            String m = e.getMessage();
            System.out.println("monolithic, budget too small: " + m);
            for (String part : new String[]{"monolithic", Gpu.mib(fp.total()), Gpu.mib(budget), "gpu.expertPlacement: hybrid",
                    "gpu.memoryBudgetMiB", "smaller model", DeviceMemoryReport.EXPERTS_DEVICE})
                assertTrue(m.contains(part), "message names '" + part + "': " + m);
            assertEquals(io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_ERR_OOM(), e.code);
            long free1 = g.memory()[0];
            // nothing the failed work took stays taken; more free memory after is no leak: under the hog's pressure
            // the runtime may hand back memory it kept from earlier tests (e.g. of destroyed graph executables)
            assertTrue(free1 >= free0 - (8L << 20), "device memory before " + free0 + ", after " + free1);
        }
    }

    @Test
    void autoIsMonolithicExactlyWhenTheModelFits() throws Exception {
        ExpertPlacementPlan.Footprint fp = footprint(tiny);
        try (HipBackend b = open(tiny, opts(ExpertPlacement.AUTO, fp.total(), false))) {
            assertEquals("monolithic", b.status().expertPlacement());
            assertEquals(0, b.status().hostExperts());
            assertEquals(fp.total(), b.weightBytes(), "measured footprint = uploaded bytes");
        }
        try (HipBackend b = open(tiny, opts(ExpertPlacement.AUTO, fp.total() - 1, false))) {
            assertEquals("hybrid", b.status().expertPlacement());
            assertTrue(b.status().hostExperts() >= 1);
            assertTrue(b.weightBytes() <= fp.total() - 1, "uploaded " + b.weightBytes() + " within the budget");
            assertNull(b.status().diagnostic());
        }
        // automatic budget (free memory less the reserve): the tiny model fits an H200
        try (HipBackend b = open(tiny, BackendOptions.DEFAULTS)) {
            assertEquals("monolithic", b.status().expertPlacement());
            assertFalse(b.memoryReport().budgetBytes() == 0);
            assertTrue(b.memoryReport().reserveBytes() >= ExpertPlacementPlan.RUNTIME_RESERVE);
        }
    }

    @Test
    void f16KvVerifierFallsBackToHybridWithTheDiagnostic() throws Exception {
        ExpertPlacementPlan.Footprint fp = footprint(tiny);
        try (HipBackend b = open(tiny, opts(ExpertPlacement.AUTO, fp.total() - 1, true))) {
            EngineStatus st = b.status();
            assertEquals("hybrid", st.expertPlacement());
            assertTrue(st.f16KvRequested());
            assertFalse(st.f16KvActive());
            assertEquals(F16_DROPPED, st.diagnostic());
        }
        try (HipBackend b = open(tiny, opts(ExpertPlacement.AUTO, fp.total(), true))) {
            assertEquals("monolithic", b.status().expertPlacement());
            assertNull(b.status().diagnostic());
        }
    }

    @Test
    void memoryReportListsEveryCategory() throws Exception {
        ExpertPlacementPlan.Footprint fp = footprint(small);
        int E = fp.expertBytes()[0].length;
        try (HipBackend b = open(small, opts(ExpertPlacement.HYBRID, budgetFor(fp, E / 4), false))) {
            try (Sequence s = b.newSequence(16)) {
                b.forward(s, prompt(b.config(), 64, 9), 0, 64, new int[]{63});
            }
            DeviceMemoryReport r = b.memoryReport();
            String text = r.format();
            System.out.println(text);
            assertEquals(DeviceMemoryReport.CATEGORIES, r.entries().stream().map(DeviceMemoryReport.Entry::category).toList());
            for (String cat : DeviceMemoryReport.CATEGORIES) assertTrue(text.contains(cat), "report shows " + cat);
            for (String cat : List.of(DeviceMemoryReport.EMBED, DeviceMemoryReport.ATTENTION, DeviceMemoryReport.COMPRESSORS,
                    DeviceMemoryReport.SHARED, DeviceMemoryReport.EXPERTS_DEVICE, DeviceMemoryReport.EXPERTS_HOST,
                    DeviceMemoryReport.OTHER, DeviceMemoryReport.WORKSPACE, DeviceMemoryReport.FREE))
                assertTrue(r.bytes(cat) > 0, cat + " is " + r.bytes(cat));
            long weights = 0;
            for (String cat : List.of(DeviceMemoryReport.EMBED, DeviceMemoryReport.ATTENTION, DeviceMemoryReport.COMPRESSORS,
                    DeviceMemoryReport.SHARED, DeviceMemoryReport.EXPERTS_DEVICE, DeviceMemoryReport.OTHER))
                weights += r.bytes(cat);
            assertTrue(weights >= b.weightBytes() && weights - b.weightBytes() < 4096, "categories add up to the weights");
            assertEquals(fp.hostBytes(b.placement().resident()), r.bytes(DeviceMemoryReport.EXPERTS_HOST));
            assertEquals("hybrid", r.placement());
            assertEquals(b.status().hostExperts(), r.hostExperts());
        }
    }

    // ---------------------------------------------------------------------------------------------------- out of memory

    /**
     * The tests that take all device memory are skipped under compute-sanitizer (tools/device/run.sh sanitize sets
     * ds4j.sanitizer): the sanitizer needs device memory of its own, and no kernel runs while memory is taken.
     */
    static void notUnderSanitizer() {
        assumeFalse(Boolean.getBoolean("ds4j.sanitizer"), "takes all device memory: not under compute-sanitizer");
    }

    /** Takes all free device memory (one large block, then small ones until none is left). */
    static List<Long> hogAll(Gpu g) {
        List<Long> held = new ArrayList<>();
        long free = g.memory()[0];
        if (free > (64L << 20)) held.add(g.malloc(free - (32L << 20), "test hog"));
        for (long piece : new long[]{4L << 20, 256L << 10, 4096})
            while (true) {
                try {
                    held.add(g.malloc(piece, "test hog"));
                } catch (GpuException e) {
                    assertEquals(io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_ERR_OOM(), e.code, e.getMessage());
                    break;
                }
            }
        return held;
    }

    static void release(Gpu g, List<Long> held) {
        for (long p : held) g.free(p);
        held.clear();
    }

    @Test
    void outOfMemoryWhileUploadingIsClearAndFreesEverything() throws Exception {
        notUnderSanitizer();
        try (Gpu g = Gpu.open(0)) {
            long free0 = g.memory()[0];
            // all of it, then 24 MiB back: an explicit budget is trusted, so the plan passes and the upload itself runs
            // out. Taking all first also takes what the runtime keeps from earlier tests and hands back only under
            // pressure (graph executables, its pools): one block of free0 - 24 MiB left the upload that memory too
            List<Long> held = hogAll(g);
            for (int i = 0; i < 6; i++) g.free(held.remove(1));  // six of hogAll's 4 MiB pieces, after its large block
            try {
                DeviceMemoryException e = assertThrows(DeviceMemoryException.class,
                        () -> open(tiny, opts(ExpertPlacement.MONOLITHIC, 1L << 40, false)));
                String m = e.getMessage();
                System.out.println("upload out of memory: " + m);
                for (String part : new String[]{"out of device memory uploading", "MiB", "gpu.memoryBudgetMiB",
                        "gpu.expertPlacement", "smaller model"})
                    assertTrue(m.contains(part), "message names '" + part + "': " + m);
            } finally {
                release(g, held);
            }
            long free1 = g.memory()[0];
            // nothing the failed work took stays taken; more free memory after is no leak: under the hog's pressure
            // the runtime may hand back memory it kept from earlier tests (e.g. of destroyed graph executables)
            assertTrue(free1 >= free0 - (8L << 20), "device memory before " + free0 + ", after " + free1);
        }
    }

    @Test
    void outOfMemoryForCachesIsClearAndLeavesTheSequenceUsable() throws Exception {
        notUnderSanitizer();
        try (Gpu g = Gpu.open(0); HipBackend b = open(tiny, opts(ExpertPlacement.MONOLITHIC, 0, false))) {
            int[] toks = prompt(b.config(), 300, 11);
            float[] expected;
            try (Sequence s = b.newSequence(16)) {
                expected = b.forward(s, toks, 0, 300, new int[]{299});
            }
            Sequence s = b.newSequence(16);
            List<Long> held = hogAll(g);
            try {
                // the compressed entries (64 rows at first) must grow for 300 tokens
                DeviceMemoryException e = assertThrows(DeviceMemoryException.class, () -> b.forward(s, toks, 0, 300, new int[]{299}));
                String m = e.getMessage();
                System.out.println("step out of memory: " + m);
                for (String part : new String[]{"a step of 300 tokens at position 0", "limits.prefillChunk", "gpu.memoryBudgetMiB"})
                    assertTrue(m.contains(part), "message names '" + part + "': " + m);
                assertEquals(0, s.length());
                DeviceMemoryException e2 = assertThrows(DeviceMemoryException.class, () -> b.newSequence(16));
                assertTrue(e2.getMessage().contains("a new sequence's cache"), e2.getMessage());
            } finally {
                release(g, held);
            }
            assertArrayEquals(expected, b.forward(s, toks, 0, 300, new int[]{299}), "the sequence works after the failure");
            s.close();
        }
    }
}
