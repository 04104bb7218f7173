package io.ds4j.cpu;

import io.ds4j.engine.BatchEntry;
import io.ds4j.engine.StepKind;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.ModelStore;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Batch invariance of the CPU backend's batched step: every entry of a batch of 16 sequences of different lengths and
 * step kinds (prefill chunks, decode tokens, verify rows followed by a rollback) gets bit for bit the logits it gets
 * when stepped alone, and the sequences' states stay identical over several steps.
 */
class CpuBatchStepTest {
    static final int ENTRIES = 16;

    @Test
    void microModelBatchIsInvariant() {
        try (CpuBackend b = new CpuBackend(TestModels.random(TestModels.microConfig(), 42))) {
            checkInvariance(b, 1, 60, 4);
        }
    }

    @Test
    void tinyPresetBatchIsInvariant() throws Exception {
        try (CpuBackend b = new CpuBackend(load("tiny"))) {
            checkInvariance(b, 2, 90, 3);
        }
    }

    @Test
    void smallPresetBatchIsInvariant() throws Exception {
        try (CpuBackend b = new CpuBackend(load("small"))) {
            checkInvariance(b, 3, 40, 2);
        }
    }

    static ModelWeights load(String preset) throws Exception {
        return WeightLoader.load(ModelStore.ensure(preset, 1, s -> { }));
    }

    static void checkInvariance(CpuBackend b, long seed, int maxHistory, int rounds) {
        BatchInvariance.check(b, seed, ENTRIES, maxHistory, rounds, 13);
    }

    @Test
    void badEntryFailsBeforeAnySequenceChanges() {
        try (CpuBackend b = new CpuBackend(TestModels.random(TestModels.microConfig(), 42));
             CpuSequence s0 = b.newSequence(16); CpuSequence s1 = b.newSequence(16); CpuSequence closed = b.newSequence(16)) {
            int V = b.config().vocabSize;
            b.forward(s0, new int[]{1, 2, 3}, 0, 3, new int[0]);
            List<BatchEntry> bad = List.of(new BatchEntry(s0, new int[]{4}, new int[]{0}, StepKind.DECODE),
                    new BatchEntry(s1, new int[]{5, V}, new int[]{1}, StepKind.PREFILL));
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> b.step(bad));
            assertTrue(e.getMessage().startsWith("batch entry 1: token id " + V), e.getMessage());
            assertEquals(3, s0.length());
            assertEquals(0, s1.length());
            List<BatchEntry> twice = List.of(new BatchEntry(s0, new int[]{4}, new int[]{0}, StepKind.DECODE),
                    new BatchEntry(s0, new int[]{5}, new int[]{0}, StepKind.DECODE));
            assertThrows(IllegalArgumentException.class, () -> b.step(twice));
            closed.close();
            List<BatchEntry> withClosed = List.of(new BatchEntry(s0, new int[]{4}, new int[]{0}, StepKind.DECODE),
                    new BatchEntry(closed, new int[]{5}, new int[]{0}, StepKind.DECODE));
            IllegalStateException c = assertThrows(IllegalStateException.class, () -> b.step(withClosed));
            assertTrue(c.getMessage().contains("batch entry 1"), c.getMessage());
            assertEquals(3, s0.length());
            // unchanged: the next step gives what a fresh sequence with the same history gives
            try (CpuSequence ref = b.newSequence(16)) {
                b.forward(ref, new int[]{1, 2, 3}, 0, 3, new int[0]);
                assertArrayEquals(b.forward(ref, new int[]{4}, 0, 1, new int[]{0}), b.forward(s0, new int[]{4}, 0, 1, new int[]{0}));
            }
        }
    }

    static int[] tokens(SplittableRandom r, int n, int V) {
        return BatchInvariance.tokens(r, n, V);
    }
}
