package io.ds4j.gpu;

import io.ds4j.engine.BatchInvarianceRuns;
import io.ds4j.engine.LayerSliceRuns;
import io.ds4j.engine.LongPromptRuns;
import io.ds4j.model.WeightLoader;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Batch invariance on the GPU: the CPU test's mix of 18 requests (prompt lengths 3..70; no draft, n-gram, the
 * fixture's FP8/FP4 twin and a copy of the target as draft models; greedy and seeded sampled) runs alone and then
 * through one scheduler on {@link HipBackend}; every request's tokens are the same both ways, and greedy speculative
 * output equals plain greedy output in the batch. Kernel choices that depend on a step's row count (the tensor-core
 * threshold of the products) must not change any request's numbers for this to hold. Also: long prompts whose chunks
 * the scheduler's latency bound cuts beside decoding requests answer as alone, and the backend's rule for where a
 * chunk may be cut ({@link HipBackend#prefillSplitExact}) is the chunking invariance it has. Chunks run in layer
 * slices give the whole chunk's numbers, on the tensor-core path and below it, and a scheduler that slices long
 * prompts beside decoding requests leaves every answer as alone.
 */
@Tag("gpu")
class HipBatchInvarianceTest {
    static final Path TINY = Path.of("src/test/resources/fixtures/tiny-hf-bf16"), TWIN = Path.of("src/test/resources/fixtures/tiny-orig-fp8");

    @Test
    void eachRequestsOutputIsTheSameAloneAndInABatchOnTheGpu() throws Exception {
        try (HipBackend target = new HipBackend(WeightLoader.load(TINY)); HipBackend twin = new HipBackend(WeightLoader.load(TWIN));
             HipBackend same = new HipBackend(WeightLoader.load(TINY))) {
            BatchInvarianceRuns.Report rep = BatchInvarianceRuns.run(target, twin, same);
            assertEquals(List.of(), rep.failures());
            for (int i = 0; i < rep.requests().size(); i++) {
                BatchInvarianceRuns.Req r = rep.requests().get(i);
                assertArrayEquals(rep.alone().get(i), rep.batched().get(i), "request " + i + " (" + r.label() + ")");
                if (r.params().isGreedy()) assertArrayEquals(rep.plain().get(i), rep.batched().get(i), "request " + i + " (" + r.label() + ")");
            }
            assertTrue(rep.widest() >= 16, "at least 16 requests shared a step, widest " + rep.widest());
            assertTrue(rep.allReleased());
            System.out.printf("gpu batch invariance: %d requests, widest step %d entries, %d ticks (%d steps alone)%n",
                    rep.requests().size(), rep.widest(), rep.ticks(), rep.aloneSteps());
        }
    }

    @Test
    void chunksInLayerSlicesGiveTheWholeChunksNumbersOnTheGpu() throws Exception {
        try (HipBackend target = new HipBackend(WeightLoader.load(TINY))) {
            assertTrue(target.layerSlices());
            java.util.SplittableRandom r = new java.util.SplittableRandom(3);
            int[] p = new int[90];
            for (int i = 0; i < p.length; i++) p[i] = r.nextInt(target.config().vocabSize);
            int P = HipBackend.PREFILL_TC_ROWS;
            // a chunk on the tensor-core path (40 rows), one below it (P − 1 rows), one layer a step
            assertNull(LayerSliceRuns.chunkInSlices(target, p, 50, new int[]{1, 3}, 4), "40-row chunk");
            assertNull(LayerSliceRuns.chunkInSlices(target, java.util.Arrays.copyOf(p, 20 + P - 1), 20, new int[]{2}, 4), (P - 1) + "-row chunk");
            assertNull(LayerSliceRuns.chunkInSlices(target, java.util.Arrays.copyOf(p, 70), 6, new int[]{1, 2, 3, 4}, 3), "64-row chunk");
            LayerSliceRuns.Run run = LayerSliceRuns.scheduled(target, true, false);
            assertEquals(List.of(), run.failed());
            for (String k : run.alone().keySet())
                assertArrayEquals(run.alone().get(k), run.batched().get(k), "request " + k + " beside sliced chunks, as alone");
            assertTrue(run.layersInOrder().stream().anyMatch(java.util.Objects::nonNull), "chunks ran in slices");
            System.out.printf("gpu layer slices: the whole chunk's numbers; scheduled slices %s%n", run.slices("long"));
        }
    }

    @Test
    void longPromptsCutByTheLatencyBoundAnswerAsAloneOnTheGpu() throws Exception {
        try (HipBackend target = new HipBackend(WeightLoader.load(TINY))) {
            int P = HipBackend.PREFILL_TC_ROWS;
            assertTrue(target.prefillSplitExact(2 * P + 6, P) && (P < 7 || target.prefillSplitExact(P - 1, 5)), "cuts that keep each side");
            assertFalse(P > 1 && (target.prefillSplitExact(2 * P + 6, P - 1) || target.prefillSplitExact(P + 10, 11)),
                    "cuts across the threshold");
            LongPromptRuns.Run r = LongPromptRuns.run(target, null, -1, false);
            for (String k : r.alone().keySet())
                assertArrayEquals(r.alone().get(k), r.batched().get(k), "request " + k + " beside the long prompts, as alone");
            assertTrue(r.longChunks().stream().anyMatch(c -> c < 64), "the bound cut chunks: " + r.longChunks());
            System.out.printf("gpu long prompts under the latency bound: chunks %s, answers as alone%n", r.longChunks());
        }
    }
}
