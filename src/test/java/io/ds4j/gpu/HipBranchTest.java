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

import java.nio.file.Path;
import java.util.SplittableRandom;

import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;
import static org.junit.jupiter.api.Assertions.*;

/**
 * Branches ({@code ds4j_branch_*}, {@link HipBackend#setBranches}): a step whose independent products run on the
 * context's second stream gives the logits of the same step on one stream, bit for bit, kernel by kernel and replayed
 * from kept graphs, over a tensor-core prefill chunk, a short prefill chunk, decode and verify steps with rollbacks; and
 * the calls' misuse is refused or mended: an end without a branch is an argument error, a branch left open by a
 * failure is joined by the next begin or sync.
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
        b.setGraphs(graphs);
        return b.forward(s, toks, off, S, rows, kind);
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

    @Test
    void misusedBranchCallsAreRefusedOrMended() throws Exception {
        try (Gpu gpu = Gpu.open(0)) {
            var ctx = gpu.ctx();
            assertEquals(DS4J_ERR_ARG(), ds4j_branch_end(ctx), "an end with no branch open");
            assertEquals(DS4J_OK(), ds4j_branch_join(ctx), "a join with nothing to join is a no-op");
            assertEquals(DS4J_OK(), ds4j_branch_begin(ctx));
            assertEquals(DS4J_ERR_ARG(), ds4j_branch_join(ctx), "a join while the branch is open");
            // a second begin (a step that failed inside its branch) joins the open one first
            assertEquals(DS4J_OK(), ds4j_branch_begin(ctx));
            assertEquals(DS4J_OK(), ds4j_branch_end(ctx));
            // the sync joins the ended branch; the context works on one stream again
            assertEquals(DS4J_OK(), ds4j_ctx_sync(ctx));
            assertEquals(DS4J_ERR_ARG(), ds4j_branch_end(ctx), "nothing left open after the sync");
        }
    }
}
