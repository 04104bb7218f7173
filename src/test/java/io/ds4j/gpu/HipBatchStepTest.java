package io.ds4j.gpu;

import io.ds4j.cpu.BatchInvariance;
import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.engine.BatchEntry;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.engine.VerifyAttention;
import io.ds4j.model.TensorNames;
import io.ds4j.model.WeightLoader;
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
import java.util.stream.IntStream;

import static io.ds4j.gpu.bindings.ds4j_gpu_h.ds4j_copy;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The GPU backend's batched step: batch invariance (16 sequences of different lengths and kinds, prefill chunks on
 * both sides of the tensor-core threshold among decode and verify rows, bit for bit against each entry stepped
 * alone, on both verify attention paths and with decode-step graphs for the single steps), parity of a batched step
 * with the CPU's within {@link HipBackendTest#TOL}, the workspace estimate for batches, and a failure in the middle
 * of a batched step.
 */
@Tag("gpu")
class HipBatchStepTest {
    @TempDir
    static Path tmp;
    static Path tinyBf16;

    @BeforeAll
    static void writeModels() throws Exception {
        tinyBf16 = tmp.resolve("tiny-bf16");
        new RandomCheckpoint(Presets.get("tiny"), 11, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16).write(tinyBf16);
    }

    @Test
    void microBatchIsInvariant() {
        try (HipBackend g = new HipBackend(TestModelsAccess.random(TestModelsAccess.microConfig(), 42))) {
            BatchInvariance.check(g, 1, 16, 60, 4, 13);
            assertEquals(0, g.workspaceOvershoot(), "workspace estimate of batched steps");
        }
    }

    /** Prefill chunks of up to DS4J_TC_MIN_ROWS + 26 rows: entries of at least the threshold take the tensor-core path, as alone. */
    @Test
    void tinyBatchIsInvariantAcrossTheTensorCoreThreshold() throws Exception {
        try (HipBackend g = new HipBackend(WeightLoader.load(tinyBf16))) {
            BatchInvariance.check(g, 2, 16, 90, 4, io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_TC_MIN_ROWS() + 25);
            assertEquals(0, g.workspaceOvershoot(), "workspace estimate of batched steps");
        }
    }

    @Test
    void f16VerifyPathBatchIsInvariant() throws Exception {
        try (HipBackend g = new HipBackend(WeightLoader.load(tinyBf16))) {
            g.setVerifyAttention(VerifyAttention.F16);
            g.setF32ShortContextRows(16); // most queries above it: the tensor-core attention path
            BatchInvariance.check(g, 3, 16, 90, 3, 45);
            assertEquals(0, g.workspaceOvershoot(), "workspace estimate of batched steps");
        }
    }

    /**
     * The f16 path with graphs on: its decode and verify batches run in the fixed form, every entry's tensor-core
     * attention in ds4j_attention_f16_operands_seqs at the bounds' launch shapes, the same numbers as each entry alone.
     */
    @Test
    void f16VerifyPathWithGraphsIsInvariant() throws Exception {
        invariantWithGraphsOverTheThreshold(VerifyAttention.F16, 6);
    }

    /**
     * The control path (f32-convert) with graphs on and a threshold most queries pass: its decode batches on the
     * tensor-core attention in the fixed form (those whose entries all start past the threshold without the F32 kernel,
     * ds4j_seqs_bounds's first position), its verify steps on their F32 copies: the same numbers as each entry alone.
     */
    @Test
    void controlPathWithGraphsOverTheThresholdIsInvariant() throws Exception {
        invariantWithGraphsOverTheThreshold(VerifyAttention.F32_CONVERT, 7);
    }

    /** {@link BatchInvariance#check} on the tiny model with graphs on, the given verify path and a threshold of 16 rows. */
    static void invariantWithGraphsOverTheThreshold(VerifyAttention path, long seed) throws Exception {
        try (HipBackend g = new HipBackend(WeightLoader.load(tinyBf16))) {
            g.setGraphs(true);
            g.setVerifyAttention(path);
            g.setF32ShortContextRows(16);
            BatchInvariance.check(g, seed, 16, 90, 3, 13);
            assertTrue(g.graphStats().graphSteps() > 0, "steps ran as graphs");
            assertEquals(0, g.workspaceOvershoot(), "workspace estimate of batched steps");
        }
    }

    /**
     * With graphs on, single-entry decode and verify steps and batches of such entries run as graphs (batches with a
     * prefill chunk without): the same numbers as each entry alone.
     */
    @Test
    void graphedSingleStepsMatchBatchedSteps() throws Exception {
        try (HipBackend g = new HipBackend(WeightLoader.load(tinyBf16))) {
            g.setGraphs(true);
            BatchInvariance.check(g, 4, 16, 60, 3, 13);
            assertTrue(g.graphStats().graphSteps() > 0, "steps ran as graphs");
        }
    }

    @Test
    void smallBatchIsInvariant() throws Exception {
        Path small = tmp.resolve("small-bf16");
        new RandomCheckpoint(Presets.get("small"), 13, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16).write(small);
        try (HipBackend g = new HipBackend(WeightLoader.load(small))) {
            BatchInvariance.check(g, 5, 16, 300, 3, 45);
            assertEquals(0, g.workspaceOvershoot(), "workspace estimate of batched steps");
        }
    }

    /** The same batch of 16 entries (same histories) on the CPU and the GPU: logits within the parity tolerance. */
    @Test
    void batchedStepMatchesTheCpu() throws Exception {
        final int SMALL = io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_TC_MIN_ROWS() - 1;
        try (CpuBackend cpu = new CpuBackend(WeightLoader.load(tinyBf16)); HipBackend gpu = new HipBackend(WeightLoader.load(tinyBf16))) {
            int V = cpu.config().vocabSize, E = 16;
            HipBackendTest.Cmp cmp = new HipBackendTest.Cmp("tiny batched step", V);
            SplittableRandom r = new SplittableRandom(6);
            List<Sequence> cs = new ArrayList<>(), gs = new ArrayList<>();
            try {
                for (int i = 0; i < E; i++) {
                    cs.add(cpu.newSequence(16));
                    gs.add(gpu.newSequence(16));
                    // short histories: every product of the GPU rounds differently from the CPU's F32 (tensor cores
                    // at F32 accuracy: prefill tiles, and the skinny kernels of shorter steps), within the parity
                    // tolerance for one step, but over a long history that can flip a near-tie of the indexer's top-k or
                    // the routing, after which a row legitimately differs; the invariance tests cover the batched
                    // entries against each entry alone bit for bit, HipBackendTest longer histories one entry at a time
                    int h = 1 + r.nextInt(12);
                    int[] hist = BatchInvariance.tokens(r, h, V);
                    for (int off = 0; off < h; off += SMALL) {
                        int n = Math.min(SMALL, h - off);
                        cpu.forward(cs.get(i), hist, off, n, new int[0]);
                        gpu.forward(gs.get(i), hist, off, n, new int[0]);
                    }
                }
                for (int round = 0; round < 3; round++) {
                    List<BatchEntry> cb = new ArrayList<>(), gb = new ArrayList<>();
                    for (int i = 0; i < E; i++) {
                        StepKind kind = StepKind.values()[(i + round) % 3];
                        int S = kind == StepKind.PREFILL ? 2 + r.nextInt(7) : kind == StepKind.DECODE ? 1 : 2 + r.nextInt(4);
                        int[] toks = BatchInvariance.tokens(r, S, V), rows = IntStream.range(0, S).toArray();
                        cb.add(new BatchEntry(cs.get(i), toks, rows, kind));
                        gb.add(new BatchEntry(gs.get(i), toks, rows, kind));
                    }
                    float[][] c = cpu.step(cb), g = gpu.step(gb);
                    for (int i = 0; i < E; i++) cmp.rows(c[i], g[i], "round " + round + " entry " + i + " " + cb.get(i));
                }
            } finally {
                cs.forEach(Sequence::close);
                gs.forEach(Sequence::close);
            }
            cmp.done();
        }
    }

    /** A failure in the middle of a batched step marks every sequence of the batch unusable and no other. */
    @Test
    void failureMidBatchMarksTheBatchsSequences() throws Exception {
        try (HipBackend g = new HipBackend(WeightLoader.load(tinyBf16));
             Sequence a = g.newSequence(16); Sequence b = g.newSequence(16); Sequence other = g.newSequence(16)) {
            for (Sequence s : List.of(a, b, other)) g.forward(s, new int[]{1, 2, 3}, 0, 3, new int[0]);
            g.injectFault("attention", () -> ds4j_copy(g.gpu().ctx(), MemorySegment.NULL, MemorySegment.NULL, 4));
            List<BatchEntry> batch = List.of(new BatchEntry(a, new int[]{4}, new int[]{0}, StepKind.DECODE),
                    new BatchEntry(b, new int[]{5, 6}, new int[]{1}, StepKind.VERIFY));
            assertThrows(GpuException.class, () -> g.step(batch));
            assertThrows(IllegalStateException.class, () -> g.forward(a, new int[]{4}, 0, 1, new int[]{0}));
            IllegalStateException e = assertThrows(IllegalStateException.class,
                    () -> g.step(List.of(new BatchEntry(other, new int[]{4}, new int[]{0}, StepKind.DECODE),
                            new BatchEntry(b, new int[]{4}, new int[]{0}, StepKind.DECODE))));
            assertTrue(e.getMessage().startsWith("batch entry 1:"), e.getMessage());
            assertEquals(3, other.length());
            assertEquals(V(g), g.forward(other, new int[]{4}, 0, 1, new int[]{0}).length);
        }
    }

    static int V(HipBackend g) {
        return g.config().vocabSize;
    }
}
