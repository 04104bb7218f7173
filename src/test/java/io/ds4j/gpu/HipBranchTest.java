package io.ds4j.gpu;

import io.ds4j.engine.BackendOptions.ExpertPlacement;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.model.TensorNames;
import io.ds4j.model.synth.Presets;
import io.ds4j.model.synth.RandomCheckpoint;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.SplittableRandom;

import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;
import static org.junit.jupiter.api.Assertions.*;

/**
 * Branches ({@code ds4j_branch_*}, {@link HipBackend#setBranches}): a step whose independent products run on the
 * context's side streams gives the logits of the same step on one stream, bit for bit, kernel by kernel and replayed
 * from kept graphs, over a tensor-core prefill chunk, a short prefill chunk, decode and verify steps with rollbacks; and
 * the calls' misuse is refused or mended: an end without a branch or a lane out of range is an argument error, a
 * branch left open by a failure is ended by the next begin, an unjoined one joined by the next begin of its lane or a
 * sync.
 */
@Tag("gpu")
class HipBranchTest {
    @TempDir
    static Path tmp;
    static Path tiny;

    @BeforeAll
    static void writeModel() throws Exception {
        tiny = tmp.resolve("tiny-fp8");
        new RandomCheckpoint(Presets.get("tiny"), 41, TensorNames.Scheme.ORIGINAL, RandomCheckpoint.Storage.FP8).write(tiny);
    }

    static float[] step(HipBackend b, boolean branches, boolean graphs, Sequence s, int[] toks, int off, int S, int[] rows,
                        StepKind kind) {
        b.setBranches(branches);
        return HipGraphTest.step(b, graphs, s, toks, off, S, rows, kind);
    }

    @Test
    void stepsWithBranchesGiveTheNumbersOfOneStream() throws Exception {
        try (HipBackend b = HipPlacementTest.open(tiny, HipPlacementTest.opts(ExpertPlacement.MONOLITHIC, 0, false))) {
            int[] toks = HipGraphTest.tokens(b, 260, 42);
            SplittableRandom r = new SplittableRandom(42);
            // one: a single stream, kernel by kernel; two: branches, kernel by kernel; kept: branches, graphs on
            try (Sequence one = b.newSequence(16); Sequence two = b.newSequence(16); Sequence kept = b.newSequence(16)) {
                int P = HipBackend.PREFILL_TC_ROWS + 6;  // a chunk on the tensor-core path, then one below it
                for (int[] chunk : new int[][]{{0, P}, {P, 5}}) {
                    int[] last = {chunk[1] - 1};
                    float[] want = step(b, false, false, one, toks, chunk[0], chunk[1], last, StepKind.PREFILL);
                    assertArrayEquals(want, step(b, true, false, two, toks, chunk[0], chunk[1], last, StepKind.PREFILL), "prefill " + chunk[1]);
                    assertArrayEquals(want, step(b, true, true, kept, toks, chunk[0], chunk[1], last, StepKind.PREFILL), "prefill " + chunk[1]);
                }
                int steps = 0;
                while (one.length() < 200) {
                    int pos = one.length();
                    if (r.nextDouble() < 0.3) {
                        int n = 2 + r.nextInt(4);
                        int[] rows = HipGraphTest.all(n);
                        float[] want = step(b, false, false, one, toks, pos, n, rows, StepKind.VERIFY);
                        assertArrayEquals(want, step(b, true, false, two, toks, pos, n, rows, StepKind.VERIFY), "verify at " + pos);
                        assertArrayEquals(want, step(b, true, true, kept, toks, pos, n, rows, StepKind.VERIFY), "verify at " + pos + ", graph");
                        int reject = r.nextInt(n);
                        one.rollback(reject);
                        two.rollback(reject);
                        kept.rollback(reject);
                    } else {
                        int[] rows = {0};
                        float[] want = step(b, false, false, one, toks, pos, 1, rows, StepKind.DECODE);
                        assertArrayEquals(want, step(b, true, false, two, toks, pos, 1, rows, StepKind.DECODE), "decode at " + pos);
                        assertArrayEquals(want, step(b, true, true, kept, toks, pos, 1, rows, StepKind.DECODE), "decode at " + pos + ", graph");
                    }
                    steps++;
                }
                System.out.printf("branches = one stream bit for bit: 2 prefill chunks and %d decode / verify steps to %d tokens%n",
                        steps, one.length());
            }
        }
    }

    /**
     * Partial sums left to the SwiGLU ({@link HipBackend#setPartialsToReaders}: the routed experts' w1 and w3, the shared
     * expert's W3): the small preset (3 layers, FP8) gives the logits of the products summed by their own launches, bit
     * for bit, kernel by kernel and replayed from kept graphs, over a tensor-core prefill chunk, a short one, and decode and
     * verify steps with rollbacks; and products did leave their partials.
     */
    @Test
    void partialSumsLeftToTheSwigluGiveTheNumbersOfSummedProducts() throws Exception {
        Path small = tmp.resolve("small-fp8");
        new RandomCheckpoint(Presets.get("small", 3, null), 45, TensorNames.Scheme.ORIGINAL, RandomCheckpoint.Storage.FP8).write(small);
        try (HipBackend b = HipPlacementTest.open(small, HipPlacementTest.opts(ExpertPlacement.MONOLITHIC, 0, false))) {
            int[] toks = HipGraphTest.tokens(b, 200, 46);
            SplittableRandom r = new SplittableRandom(46);
            try (Sequence summed = b.newSequence(16); Sequence left = b.newSequence(16); Sequence kept = b.newSequence(16)) {
                int P = HipBackend.PREFILL_TC_ROWS + 6;
                for (int[] chunk : new int[][]{{0, P}, {P, 5}}) {
                    int[] last = {chunk[1] - 1};
                    b.setPartialsToReaders(false);
                    float[] want = step(b, true, false, summed, toks, chunk[0], chunk[1], last, StepKind.PREFILL);
                    b.setPartialsToReaders(true);
                    assertArrayEquals(want, step(b, true, false, left, toks, chunk[0], chunk[1], last, StepKind.PREFILL), "prefill " + chunk[1]);
                    assertArrayEquals(want, step(b, true, true, kept, toks, chunk[0], chunk[1], last, StepKind.PREFILL), "prefill " + chunk[1]);
                }
                long before = b.partialsLeft;
                while (summed.length() < 140) {
                    int pos = summed.length();
                    boolean verify = r.nextDouble() < 0.3;
                    int n = verify ? 2 + r.nextInt(4) : 1;
                    int[] rows = HipGraphTest.all(n);
                    StepKind kind = verify ? StepKind.VERIFY : StepKind.DECODE;
                    b.setPartialsToReaders(false);
                    float[] want = step(b, true, false, summed, toks, pos, n, rows, kind);
                    b.setPartialsToReaders(true);
                    assertArrayEquals(want, step(b, true, false, left, toks, pos, n, rows, kind), kind + " at " + pos);
                    assertArrayEquals(want, step(b, true, true, kept, toks, pos, n, rows, kind), kind + " at " + pos + ", graph");
                    if (verify) {
                        int reject = r.nextInt(n);
                        summed.rollback(reject);
                        left.rollback(reject);
                        kept.rollback(reject);
                    }
                }
                assertTrue(b.partialsLeft > before, "decode and verify steps left partial sums to the SwiGLU: " + (b.partialsLeft - before));
                System.out.printf("partial sums to the SwiGLU = summed products bit for bit to %d tokens (%d products left theirs)%n",
                        summed.length(), b.partialsLeft - before);
            }
        }
    }

    /**
     * Batched steps of 12 entries (decode, verify and short prefill entries mixed; all-decode rounds take the fixed form
     * from kept graphs): each entry's logits with branches equal those of the same step on one stream, kernel by kernel.
     */
    @Test
    void batchedStepsWithBranchesGiveTheNumbersOfOneStream() throws Exception {
        try (HipBackend b = HipPlacementTest.open(tiny, HipPlacementTest.opts(ExpertPlacement.MONOLITHIC, 0, false))) {
            final int E = 12, V = b.config().vocabSize;
            SplittableRandom r = new SplittableRandom(43);
            java.util.List<Sequence> one = new java.util.ArrayList<>(), two = new java.util.ArrayList<>();
            try {
                for (int i = 0; i < E; i++) {
                    one.add(b.newSequence(16));
                    two.add(b.newSequence(16));
                    int[] hist = HipGraphTest.tokens(b, 3 + r.nextInt(30), 100 + i);
                    int[] last = {hist.length - 1};
                    assertArrayEquals(step(b, false, false, one.get(i), hist, 0, hist.length, last, StepKind.PREFILL),
                            step(b, true, true, two.get(i), hist, 0, hist.length, last, StepKind.PREFILL), "history of entry " + i);
                }
                for (int round = 0; round < 12; round++) {
                    boolean decodes = round % 3 != 2;
                    java.util.List<io.ds4j.engine.BatchEntry> a = new java.util.ArrayList<>(), c = new java.util.ArrayList<>();
                    for (int i = 0; i < E; i++) {
                        StepKind kind = decodes ? StepKind.DECODE : StepKind.values()[(i + round) % 3];
                        int S = kind == StepKind.DECODE ? 1 : 2 + r.nextInt(4);
                        int[] toks = new int[S];
                        for (int j = 0; j < S; j++) toks[j] = r.nextInt(V);
                        int[] rows = HipGraphTest.all(S);
                        a.add(new io.ds4j.engine.BatchEntry(one.get(i), toks, rows, kind));
                        c.add(new io.ds4j.engine.BatchEntry(two.get(i), toks, rows, kind));
                    }
                    b.setBranches(false);
                    b.setGraphs(false);
                    float[][] want = b.step(a);
                    b.setBranches(true);
                    b.setGraphs(true);
                    float[][] got = b.step(c);
                    for (int i = 0; i < E; i++) assertArrayEquals(want[i], got[i], "round " + round + ", entry " + i + " " + a.get(i));
                }
            } finally {
                one.forEach(Sequence::close);
                two.forEach(Sequence::close);
            }
        }
    }

    /**
     * A call failing inside a branch (the shared kv product on lane 1, the routed experts' first call, w3, on lane 2)
     * or beside one before its join (wq_b, the router in one launch), kernel by kernel and inside a step's capture: the step fails
     * with the library's error, no stream is left capturing, and another sequence stepped at once, with the failed one
     * still open, gives the logits it gives without any failure.
     */
    @Test
    void aFailureInOrBesideABranchLeavesTheBackendUsable() throws Exception {
        try (HipBackend b = HipPlacementTest.open(tiny, HipPlacementTest.opts(ExpertPlacement.MONOLITHIC, 0, false))) {
            int[] toks = HipGraphTest.tokens(b, 100, 44);
            var L = b.deviceWeights().layers[0];
            // the router: the gate's product (the default) or its one launch (the tiny model's gate is one it takes)
            for (boolean fused : new boolean[]{false, true})
            for (boolean graphs : new boolean[]{false, true}) {
                b.setFusedRouter(fused);
                assertEquals(fused, b.fusedRouterTaken(), "the router in one launch");
                String[] faults = {L.kv.name(), L.qB.name(), fused ? "moe_gate_route" : L.gate.name(), "routed experts"};
                b.setBranches(false);
                java.util.List<float[]> want = HipGraphTest.decodeRun(b, graphs, toks, 10, 30);
                b.setBranches(true);
                for (String at : faults) {
                    String where = at + ", graphs " + graphs + ", router in one launch " + fused;
                    try (Sequence other = b.newSequence(16); Sequence s = b.newSequence(16)) {
                        b.forward(other, toks, 0, 10, new int[0]);
                        for (int i = 10; i < 15; i++) assertArrayEquals(want.get(i - 10), b.forward(other, toks, i, 1, new int[]{0}), where);
                        b.forward(s, toks, 0, 10, new int[0]);
                        b.dropKeptGraphs();  // the failing step is captured, not replayed from the other's graph
                        b.injectFault(at, () -> ds4j_copy(b.gpu().ctx(), MemorySegment.NULL, MemorySegment.NULL, 4));
                        GpuException e = assertThrows(GpuException.class, () -> b.forward(s, toks, 10, 1, new int[]{0}), where);
                        assertEquals(DS4J_ERR_ARG(), e.code, where + ": " + e.getMessage());
                        assertFalse(b.capturing(), "no stream left capturing: " + where);
                        for (int i = 15; i < 30; i++)
                            assertArrayEquals(want.get(i - 10), b.forward(other, toks, i, 1, new int[]{0}), where + ", step " + i);
                    }
                }
            }
        }
    }

    @Test
    void misusedBranchCallsAreRefusedOrMended() throws Exception {
        try (Gpu gpu = Gpu.open(0)) {
            var ctx = gpu.ctx();
            int lanes = DS4J_BRANCH_LANES();
            assertTrue(lanes >= 2, "lanes " + lanes);
            assertEquals(DS4J_ERR_ARG(), ds4j_branch_end(ctx), "an end with no branch open");
            assertEquals(DS4J_ERR_ARG(), ds4j_branch_begin(ctx, 0), "lane 0 is the context's own stream");
            assertEquals(DS4J_ERR_ARG(), ds4j_branch_begin(ctx, lanes + 1), "past the last lane");
            assertEquals(DS4J_ERR_ARG(), ds4j_branch_join(ctx, lanes + 1), "past the last lane");
            assertEquals(DS4J_OK(), ds4j_branch_join(ctx, 1), "a join with nothing to join is a no-op");
            assertEquals(DS4J_OK(), ds4j_branch_begin(ctx, 1));
            assertEquals(DS4J_ERR_ARG(), ds4j_branch_join(ctx, 1), "a join while the branch is open");
            // a second begin (a step that failed inside its branch) ends the open one first
            assertEquals(DS4J_OK(), ds4j_branch_begin(ctx, 2));
            assertEquals(DS4J_OK(), ds4j_branch_end(ctx));
            // both lanes ended and unjoined: the sync joins them; the context works on one stream again
            assertEquals(DS4J_OK(), ds4j_ctx_sync(ctx));
            assertEquals(DS4J_ERR_ARG(), ds4j_branch_end(ctx), "nothing left open after the sync");
            // a lane begun again before its join is joined first
            assertEquals(DS4J_OK(), ds4j_branch_begin(ctx, 1));
            assertEquals(DS4J_OK(), ds4j_branch_end(ctx));
            assertEquals(DS4J_OK(), ds4j_branch_begin(ctx, 1));
            assertEquals(DS4J_OK(), ds4j_branch_end(ctx));
            assertEquals(DS4J_OK(), ds4j_branch_join(ctx, 1));
            assertEquals(DS4J_OK(), ds4j_ctx_sync(ctx));
        }
    }
}
