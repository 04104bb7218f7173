package io.ds4j.gpu;

import io.ds4j.engine.BackendOptions;
import io.ds4j.engine.BackendOptions.ExpertPlacement;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.engine.VerifyAttention;
import io.ds4j.model.TensorNames;
import io.ds4j.model.synth.Presets;
import io.ds4j.model.synth.RandomCheckpoint;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;
import static org.junit.jupiter.api.Assertions.*;

/**
 * Decode-step graphs ({@link DecodeGraphs}): with graphs on, decode and verify steps give the
 * logits of graphs off bit for bit over sequences that cross every topology change (compressor windows completing,
 * HCA entries, the Lightning Indexer starting to select, verify attention paths, steps without logits) with
 * rollbacks in between; fixed-form steps are captured at most once per shape key and then replayed with no kernel
 * launched from the host; a pure decode stretch reuses executables; a step failing inside the capture leaves no stream
 * capturing and the backend usable; a capture the runtime refuses runs the step without a graph; profile mode and
 * hybrid placement never capture.
 */
@Tag("gpu")
class HipGraphTest {
    @TempDir
    static Path tmp;
    static Path tiny, small;

    @BeforeAll
    static void writeModels() throws Exception {
        tiny = tmp.resolve("tiny-fp8");
        new RandomCheckpoint(Presets.get("tiny"), 31, TensorNames.Scheme.ORIGINAL, RandomCheckpoint.Storage.FP8).write(tiny);
        small = tmp.resolve("small-bf16");
        new RandomCheckpoint(Presets.get("small"), 32, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16).write(small);
    }

    /**
     * A monolithic backend with graphs switched on in both forms (by default only the kept form runs: fixed-form steps
     * replayed, the others kernel by kernel, see DecodeGraphs).
     */
    static HipBackend monolithic(Path dir) throws Exception {
        HipBackend b = HipPlacementTest.open(dir, HipPlacementTest.opts(ExpertPlacement.MONOLITHIC, 0, false));
        assertTrue(b.graphs(), "graphs are on by default (the kept form)");
        b.setGraphs(true);
        return b;
    }

    static int[] tokens(HipBackend b, int n, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        int[] t = new int[n];
        for (int i = 0; i < n; i++) t[i] = r.nextInt(b.config().vocabSize);
        return t;
    }

    static float[] step(HipBackend b, boolean graphs, Sequence s, int[] toks, int off, int S, int[] rows, StepKind kind) {
        b.setGraphs(graphs);
        return b.forward(s, toks, off, S, rows, kind);
    }

    static int[] all(int n) {
        return java.util.stream.IntStream.range(0, n).toArray();
    }

    /**
     * Two sequences on one backend given the same steps, one with graphs off and one with graphs on: a prefill chunk,
     * then until {@code until} tokens decode steps (some without logits), verify steps of q+1 rows followed by a
     * rollback of the rejected drafts, and switches of the verify attention path. Every step's logits must be equal
     * bit for bit, and every decode / verify step with graphs on must have been captured (no refused capture).
     */
    static void sameWithAndWithoutGraphs(HipBackend b, int prompt, int until, long seed) {
        assertTrue(b.graphs(), "graphs switched on (monolithic placement)");
        int[] toks = tokens(b, until + 40, seed);
        SplittableRandom r = new SplittableRandom(seed);
        DecodeGraphs.Stats before = b.graphStats();
        long expectCaptured = 0;
        int steps = 0;
        try (Sequence off = b.newSequence(16); Sequence on = b.newSequence(16)) {
            int[] last = {prompt - 1};
            assertArrayEquals(step(b, false, off, toks, 0, prompt, last, StepKind.PREFILL),
                    step(b, true, on, toks, 0, prompt, last, StepKind.PREFILL), "prefill");
            while (off.length() < until) {
                int pos = off.length();
                double u = r.nextDouble();
                if (u < 0.08) {
                    b.setVerifyAttention(b.verifyAttention() == VerifyAttention.F16 ? VerifyAttention.F32_CONVERT : VerifyAttention.F16);
                    continue;
                }
                if (u < 0.3) {
                    int q = 1 + r.nextInt(4), n = q + 1;
                    String where = "verify of " + n + " rows at " + pos + " (" + b.verifyAttention().key() + ")";
                    assertArrayEquals(step(b, false, off, toks, pos, n, all(n), StepKind.VERIFY),
                            step(b, true, on, toks, pos, n, all(n), StepKind.VERIFY), where);
                    int reject = r.nextInt(n);
                    off.rollback(reject);
                    on.rollback(reject);
                } else {
                    int[] rows = u < 0.36 ? new int[0] : new int[]{0};
                    assertArrayEquals(step(b, false, off, toks, pos, 1, rows, StepKind.DECODE),
                            step(b, true, on, toks, pos, 1, rows, StepKind.DECODE), "decode at " + pos + ", rows " + rows.length);
                }
                expectCaptured++;
                steps++;
                assertEquals(off.length(), on.length());
            }
        }
        DecodeGraphs.Stats after = b.graphStats();
        long captured = after.captured() - before.captured(), updated = after.updated() - before.updated(),
                built = after.instantiated() - before.instantiated() + after.reinstantiated() - before.reinstantiated(),
                kept = after.kept() - before.kept(), replayed = after.replayed() - before.replayed();
        System.out.printf("graphs on = off bit for bit: %d steps to %d tokens; replayed %d, captured once per shape %d;"
                + " re-recorded %d: executables updated %d, built %d (%d refused updates)%n", steps, until, replayed, kept, captured,
                updated, built, after.reinstantiated() - before.reinstantiated());
        assertEquals(0, after.fallbacks() - before.fallbacks(), "no capture refused");
        assertEquals(expectCaptured, after.graphSteps() - before.graphSteps(), "every decode and verify step with graphs on ran as a graph");
        assertEquals(captured, updated + built);
        assertTrue(replayed + updated > kept + built, "most steps reuse an executable graph: replayed " + replayed + ", updated "
                + updated + "; captured for a shape " + kept + ", built " + built);
    }

    /**
     * The shape key of a one-sequence step in the fixed form as the backend forms it (kind, rows, logits rows, whether the
     * indexer selects, the power-of-two bounds of the scores row and of the HCA entries, and for a verify step on the
     * control path the bound of the CSA entries its conversion copies); the workspace is not reallocated in these runs
     * (its first chunk holds every decode and verify step), and the window ring's rows are those of one sequence.
     */
    static String shapeKey(HipBackend b, StepKind kind, int N0, int S, int[] rows) {
        var c = b.config();
        long csa = (N0 + S) / c.csaRatio, hca = (N0 + S) / c.hcaRatio;
        boolean indexer = csa > c.indexTopk;
        boolean convert = kind == StepKind.VERIFY && b.verifyAttention() == VerifyAttention.F32_CONVERT;
        return kind + ":" + S + ":" + java.util.Arrays.toString(rows) + ":" + indexer + ":" + (indexer ? HipBackend.bound(csa) : 0)
                + ":" + HipBackend.bound(hca) + ":" + (convert ? HipBackend.bound(csa) : 0);
    }

    @Test
    void fixedFormStepsAreCapturedOncePerShapeAndReplayed() throws Exception {
        // tiny: window 8, CSA m 4 with K_I 4 (the indexer selects from 20 tokens on), HCA m 16. The f16 path with the
        // largest short-context threshold: every decode and verify step takes the plain attention (the fixed form)
        try (HipBackend b = monolithic(tiny)) {
            b.setVerifyAttention(VerifyAttention.F16);
            b.setF32ShortContextRows(BackendOptions.MAX_SHORT_ROWS);
            capturedOncePerShapeAndReplayed(b, 11);
        }
    }

    /** The same on the control path: its verify steps convert the cache in the fixed form (ds4j_f16_to_f32_seqs). */
    @Test
    void controlVerifyStepsAreCapturedOncePerShapeAndReplayed() throws Exception {
        try (HipBackend b = monolithic(tiny)) {
            b.setVerifyAttention(VerifyAttention.F32_CONVERT);
            capturedOncePerShapeAndReplayed(b, 12);
        }
    }

    /**
     * Two sequences given the same prefill, decode and verify steps (with rollbacks) to 90 tokens, graphs off and on:
     * equal logits bit for bit, every step with graphs on replayed from a kept graph or captured once for its shape key
     * (none re-recorded or refused), then a decode stretch of known keys launching no kernel from the host.
     */
    static void capturedOncePerShapeAndReplayed(HipBackend b, long seed) {
        int[] toks = tokens(b, 200, seed);
        SplittableRandom r = new SplittableRandom(seed);
        java.util.Set<String> keys = new java.util.HashSet<>();
        DecodeGraphs.Stats before = b.graphStats();
        int graphSteps = 0;
        try (Sequence off = b.newSequence(16); Sequence on = b.newSequence(16)) {
            int[] last = {4};
            assertArrayEquals(step(b, false, off, toks, 0, 5, last, StepKind.PREFILL), step(b, true, on, toks, 0, 5, last, StepKind.PREFILL));
            while (off.length() < 90) {
                int pos = off.length();
                if (r.nextDouble() < 0.25) {
                    int n = 2 + r.nextInt(4);
                    keys.add(shapeKey(b, StepKind.VERIFY, pos, n, all(n)));
                    assertArrayEquals(step(b, false, off, toks, pos, n, all(n), StepKind.VERIFY),
                            step(b, true, on, toks, pos, n, all(n), StepKind.VERIFY), "verify of " + n + " rows at " + pos);
                    int reject = r.nextInt(n);
                    off.rollback(reject);
                    on.rollback(reject);
                } else {
                    int[] rows = r.nextDouble() < 0.1 ? new int[0] : new int[]{0};
                    keys.add(shapeKey(b, StepKind.DECODE, pos, 1, rows));
                    assertArrayEquals(step(b, false, off, toks, pos, 1, rows, StepKind.DECODE),
                            step(b, true, on, toks, pos, 1, rows, StepKind.DECODE), "decode at " + pos);
                }
                graphSteps++;
            }
            DecodeGraphs.Stats after = b.graphStats();
            long kept = after.kept() - before.kept(), replayed = after.replayed() - before.replayed();
            System.out.printf("fixed form: %d graph steps to 90 tokens, %d shape keys: captured %d, replayed %d%n", graphSteps,
                    keys.size(), kept, replayed);
            assertEquals(0, after.captured() - before.captured(), "no step was re-recorded");
            assertEquals(0, after.fallbacks() - before.fallbacks(), "no capture refused");
            assertEquals(graphSteps, kept + replayed, "every decode and verify step ran from a kept graph");
            assertTrue(kept <= keys.size(), "captured " + kept + " times for " + keys.size() + " shape keys");
            // a decode stretch of keys seen: no kernel launched from the host, one graph launch and one upload a step
            int pos = on.length();
            for (int i = 0; i < 2; i++) b.forward(on, toks, pos + i, 1, new int[]{0}, StepKind.DECODE);
            long[] l0 = b.gpu().launchCounts();
            for (int i = 2; i < 12; i++) b.forward(on, toks, pos + i, 1, new int[]{0}, StepKind.DECODE);
            long[] l1 = b.gpu().launchCounts();
            assertEquals(0, l1[0] - l0[0], "kernel launches from the host in 10 replayed steps");
            assertEquals(10, l1[1] - l0[1], "copies: one upload of the inputs a step");
            assertEquals(10, l1[2] - l0[2], "graph launches");
        }
    }

    /**
     * Batches of verify entries on the control path (three sequences at different lengths: the indexer selecting for
     * some, HCA entries for all) run in the fixed form, captured once per shape key and replayed, with every entry's
     * logits equal bit for bit to the same steps without graphs; a batch mixing in decode entries runs kernel by kernel
     * (the decode entries grouped, the verify entry converting alone) with the same numbers.
     */
    @Test
    void controlVerifyBatchesRunAsKeptGraphs() throws Exception {
        try (HipBackend b = HipPlacementTest.open(tiny, HipPlacementTest.opts(ExpertPlacement.MONOLITHIC, 0, false))) {
            b.setVerifyAttention(VerifyAttention.F32_CONVERT);
            int[] toks = tokens(b, 300, 21);
            int[] starts = {30, 47, 61};
            List<Sequence> off = new ArrayList<>(), on = new ArrayList<>();
            try {
                for (int n : starts) {
                    Sequence a = b.newSequence(16), c = b.newSequence(16);
                    off.add(a);
                    on.add(c);
                    b.setGraphs(false);
                    b.forward(a, toks, 0, n, new int[0]);
                    b.setGraphs(true);
                    b.forward(c, toks, 0, n, new int[0]);
                }
                SplittableRandom r = new SplittableRandom(21);
                DecodeGraphs.Stats before = b.graphStats();
                int fixedSteps = 0;
                for (int round = 0; round < 24; round++) {
                    boolean mixed = round % 6 == 5;
                    List<io.ds4j.engine.BatchEntry> eOff = new ArrayList<>(), eOn = new ArrayList<>();
                    int[] count = new int[starts.length];
                    for (int i = 0; i < starts.length; i++) {
                        // mixed rounds: two decode entries (the several-sequence kernels group them) beside a
                        // verify entry on the control path, which runs on its own
                        boolean decode = mixed && i < 2;
                        // two verify widths per entry, so that most rounds replay a shape seen before
                        int n = decode ? 1 : (round + i) % 2 == 0 ? 3 : 5, pos = off.get(i).length();
                        count[i] = n;
                        int[] t = java.util.Arrays.copyOfRange(toks, pos, pos + n);
                        StepKind kind = decode ? StepKind.DECODE : StepKind.VERIFY;
                        int[] rows = decode ? new int[]{0} : all(n);
                        eOff.add(new io.ds4j.engine.BatchEntry(off.get(i), t, rows, kind));
                        eOn.add(new io.ds4j.engine.BatchEntry(on.get(i), t, rows, kind));
                    }
                    b.setGraphs(false);
                    float[][] want = b.step(eOff);
                    b.setGraphs(true);
                    float[][] got = b.step(eOn);
                    for (int i = 0; i < starts.length; i++) {
                        assertArrayEquals(want[i], got[i], "round " + round + (mixed ? " (mixed)" : "") + ", entry " + i);
                        int reject = count[i] > 1 ? r.nextInt(count[i]) : 0;
                        off.get(i).rollback(reject);
                        on.get(i).rollback(reject);
                        assertEquals(off.get(i).length(), on.get(i).length());
                    }
                    if (!mixed) fixedSteps++;
                }
                DecodeGraphs.Stats after = b.graphStats();
                long kept = after.kept() - before.kept(), replayed = after.replayed() - before.replayed();
                System.out.printf("control verify batches: %d fixed-form steps, captured %d, replayed %d%n", fixedSteps, kept, replayed);
                assertEquals(fixedSteps, kept + replayed, "every all-verify batch ran from a kept graph");
                assertTrue(replayed > 0, "some batches replayed a kept graph");
                assertEquals(0, after.fallbacks() - before.fallbacks(), "no capture refused");
            } finally {
                for (Sequence q : off) q.close();
                for (Sequence q : on) q.close();
            }
        }
    }

    @Test
    void tinyGraphsMatchKernelByKernel() throws Exception {
        // window 8, CSA m 4 with K_I 4 (the indexer selects from 20 tokens on), HCA m 16
        try (HipBackend b = monolithic(tiny)) {
            b.setF32ShortContextRows(BackendOptions.MIN_SHORT_ROWS); // f16 verify above one row: the F16-operand kernel
            sameWithAndWithoutGraphs(b, 5, 180, 1);
        }
    }

    @Test
    void smallGraphsMatchKernelByKernel() throws Exception {
        // window 128, CSA m 4 with K_I 64 (the indexer selects from 260 tokens on), HCA m 128; head dim 128: the f16
        // verify path above the threshold runs on tensor cores (with 150: CSA layers from about 90 tokens on, HCA and
        // sliding layers never); the prompt chunk (80 rows) takes the tensor-core prefill
        try (HipBackend b = monolithic(small)) {
            b.setF32ShortContextRows(150);
            sameWithAndWithoutGraphs(b, 80, 300, 2);
        }
    }

    @Test
    void decodeReusesExecutableGraphs() throws Exception {
        try (HipBackend b = monolithic(tiny); Sequence s = b.newSequence(16)) {
            int[] toks = tokens(b, 200, 3);
            b.forward(s, toks, 0, 40, new int[0]); // the indexer selects already
            for (int i = 40; i < 48; i++) b.forward(s, toks, i, 1, new int[]{0}); // every decode topology seen once
            DecodeGraphs.Stats before = b.graphStats();
            for (int i = 48; i < 112; i++) b.forward(s, toks, i, 1, new int[]{0});
            DecodeGraphs.Stats after = b.graphStats();
            System.out.printf("64 decode steps: replayed %d, captured for a shape %d, re-recorded %d%n", after.replayed() - before.replayed(),
                    after.kept() - before.kept(), after.captured() - before.captured());
            assertEquals(64, after.graphSteps() - before.graphSteps());
            // one shape key throughout (decode with logits, the indexer selecting, bounds unchanged below 1,024 tokens)
            assertEquals(0, after.kept() - before.kept(), "decode steps replay the executable kept for their shape");
            assertEquals(64, after.replayed() - before.replayed());
        }
    }

    @Test
    void failingStepInsideCaptureLeavesBackendUsable() throws Exception {
        try (HipBackend b = monolithic(tiny)) {
            assertTrue(b.graphs());
            int[] toks = tokens(b, 100, 4);
            DecodeGraphs.Stats before = b.graphStats();
            try (Sequence s = b.newSequence(16)) {
                b.forward(s, toks, 0, 10, new int[0]);
                // an argument error from the library in the middle of a captured decode step
                b.injectFault("attention", () -> ds4j_copy(b.gpu().ctx(), MemorySegment.NULL, MemorySegment.NULL, 4));
                GpuException e = assertThrows(GpuException.class, () -> b.forward(s, toks, 10, 1, new int[]{0}));
                assertEquals(DS4J_ERR_ARG(), e.code, e.getMessage());
                assertFalse(b.capturing(), "no stream left capturing");
                assertEquals(before.graphSteps(), b.graphStats().graphSteps());
                // as without graphs: the failed step's sequence is not used again
                assertThrows(IllegalStateException.class, () -> b.forward(s, toks, 10, 1, new int[]{0}));
            }
            // the backend works on: fresh sequences with graphs on and off agree bit for bit
            List<float[]> offRun = decodeRun(b, false, toks, 10, 40), onRun = decodeRun(b, true, toks, 10, 40);
            for (int i = 0; i < offRun.size(); i++) assertArrayEquals(offRun.get(i), onRun.get(i), "step " + i + " after the failure");
            assertEquals(before.graphSteps() + 30, b.graphStats().graphSteps());
            assertFalse(b.capturing());
        }
    }

    @Test
    void refusedCaptureRunsTheStepWithoutAGraph() throws Exception {
        try (HipBackend b = monolithic(tiny)) {
            int[] toks = tokens(b, 100, 5);
            List<float[]> ref = decodeRun(b, false, toks, 10, 20);
            DecodeGraphs.Stats before = b.graphStats();
            b.setGraphs(true);
            try (Sequence s = b.newSequence(16)) {
                b.forward(s, toks, 0, 10, new int[0]);
                for (int i = 10; i < 20; i++) {
                    // a call that waits for the device inside the capture: the library refuses it (DS4J_ERR_CAPTURE)
                    if (i == 12 || i == 15) { // a step that is captured (no executable kept for its shape)
                        b.dropKeptGraphs();
                        b.injectFault("attention", () -> ds4j_ctx_sync(b.gpu().ctx()));
                    }
                    assertArrayEquals(ref.get(i - 10), b.forward(s, toks, i, 1, new int[]{0}), "decode at " + i);
                    assertFalse(b.capturing());
                }
            }
            DecodeGraphs.Stats after = b.graphStats();
            assertEquals(2, after.fallbacks() - before.fallbacks());
            assertEquals(8, after.graphSteps() - before.graphSteps());
            assertTrue(b.graphs(), "graphs stay on below " + DecodeGraphs.MAX_FALLBACKS + " refusals");
            try (Sequence s = b.newSequence(16)) {
                b.forward(s, toks, 0, 10, new int[0]);
                b.dropKeptGraphs();
                b.injectFault("attention", () -> ds4j_ctx_sync(b.gpu().ctx()));
                assertArrayEquals(ref.get(0), b.forward(s, toks, 10, 1, new int[]{0}));
            }
            assertFalse(b.graphs(), "graphs off after " + DecodeGraphs.MAX_FALLBACKS + " refusals");
        }
    }

    @Test
    void profileModeAndHybridPlacementNeverCapture() throws Exception {
        try (HipBackend b = monolithic(tiny); Sequence s = b.newSequence(16)) {
            int[] toks = tokens(b, 100, 6);
            b.forward(s, toks, 0, 10, new int[0]);
            long before = b.graphStats().graphSteps();
            b.setProfiling(true);
            for (int i = 10; i < 14; i++) b.forward(s, toks, i, 1, new int[]{0});
            b.takeProfile();
            b.setProfiling(false);
            assertEquals(before, b.graphStats().graphSteps(), "profile mode waits per operation: never captured");
            b.forward(s, toks, 14, 1, new int[]{0});
            assertEquals(before + 1, b.graphStats().graphSteps());
            b.forward(s, toks, 15, 40, new int[0]);
            assertEquals(before + 1, b.graphStats().graphSteps(), "prefill chunks are not captured");
        }
        ExpertPlacementPlan.Footprint fp = HipPlacementTest.footprint(tiny);
        int E = fp.expertBytes()[0].length;
        try (HipBackend h = HipPlacementTest.open(tiny, HipPlacementTest.opts(ExpertPlacement.HYBRID, HipPlacementTest.budgetFor(fp, E / 2), false));
             Sequence s = h.newSequence(16)) {
            assertFalse(h.graphs(), "hybrid placement syncs mid-step: never captured");
            UnsupportedOperationException e = assertThrows(UnsupportedOperationException.class, () -> h.setGraphs(true));
            assertTrue(e.getMessage().contains("hybrid"), e.getMessage());
            int[] toks = tokens(h, 20, 7);
            h.forward(s, toks, 0, 10, new int[0]);
            for (int i = 10; i < 14; i++) h.forward(s, toks, i, 1, new int[]{0});
            assertEquals(0, h.graphStats().graphSteps());
        }
    }

    /** A fresh sequence: a prefill of `prompt` tokens, then decode steps up to `until`; each decode step's logits. */
    static List<float[]> decodeRun(HipBackend b, boolean graphs, int[] toks, int prompt, int until) {
        b.setGraphs(graphs);
        List<float[]> out = new ArrayList<>();
        try (Sequence s = b.newSequence(16)) {
            b.forward(s, toks, 0, prompt, new int[0]);
            for (int i = prompt; i < until; i++) out.add(b.forward(s, toks, i, 1, new int[]{0}));
        }
        return out;
    }
}
