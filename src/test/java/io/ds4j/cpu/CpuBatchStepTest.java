package io.ds4j.cpu;

import io.ds4j.engine.BatchEntry;
import io.ds4j.engine.StepKind;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.ModelStore;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.SplittableRandom;
import java.util.stream.IntStream;

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

    /**
     * Sequence pairs (A_i, B_i) with the same history of 0 .. maxHistory tokens; each round steps every A_i in one
     * batch (entries in shuffled order) and every B_i alone with the same entry, and compares.
     */
    static void checkInvariance(CpuBackend b, long seed, int maxHistory, int rounds) {
        int V = b.config().vocabSize;
        SplittableRandom r = new SplittableRandom(seed);
        CpuSequence[] A = new CpuSequence[ENTRIES], B = new CpuSequence[ENTRIES];
        try {
            for (int i = 0; i < ENTRIES; i++) {
                A[i] = b.newSequence(16);
                int h = i == 0 ? 0 : 1 + r.nextInt(maxHistory);
                int[] hist = tokens(r, h, V);
                if (h > 0) b.forward(A[i], hist, 0, h, new int[0]);
                B[i] = b.fork(A[i], 16);
            }
            for (int round = 0; round < rounds; round++) {
                List<Integer> order = new ArrayList<>(IntStream.range(0, ENTRIES).boxed().toList());
                Collections.shuffle(order, new Random(seed * 31 + round));
                List<BatchEntry> batch = new ArrayList<>();
                StepKind[] kinds = new StepKind[ENTRIES];
                for (int i : order) {
                    StepKind kind = StepKind.values()[(i + round) % 3];
                    kinds[i] = kind;
                    int S = switch (kind) {
                        case PREFILL -> 2 + r.nextInt(12);
                        case DECODE -> 1;
                        case VERIFY -> 2 + r.nextInt(4);
                    };
                    int[] rows = switch (kind) {
                        case PREFILL -> (i % 4 == 0) ? new int[0] : (i % 4 == 1) ? IntStream.range(0, S).toArray() : new int[]{S - 1};
                        case DECODE -> new int[]{0};
                        case VERIFY -> IntStream.range(0, S).toArray();
                    };
                    batch.add(new BatchEntry(A[i], tokens(r, S, V), rows, kind));
                }
                float[][] got = b.step(batch);
                for (int j = 0; j < batch.size(); j++) {
                    BatchEntry e = batch.get(j);
                    int i = order.get(j);
                    assertEquals(e.logitRows().length * V, got[j].length);
                    float[] alone = b.forward(B[i], e.tokens(), 0, e.count(), e.logitRows(), e.kind());
                    assertArrayEquals(alone, got[j], "round " + round + ", entry " + i + " " + e.kind() + " of " + e.count()
                            + " tokens at " + (B[i].length() - e.count()));
                    assertEquals(B[i].length(), A[i].length());
                    if (kinds[i] == StepKind.VERIFY) { // rejected drafts: both roll back the same
                        int k = r.nextInt(e.count());
                        A[i].rollback(k);
                        B[i].rollback(k);
                    }
                }
            }
            // one last decode step over all, batched against alone: the state after the rounds is the same
            List<BatchEntry> last = new ArrayList<>();
            for (int i = 0; i < ENTRIES; i++) last.add(new BatchEntry(A[i], tokens(r, 1, V), new int[]{0}, StepKind.DECODE));
            float[][] got = b.step(last);
            for (int i = 0; i < ENTRIES; i++)
                assertArrayEquals(b.forward(B[i], last.get(i).tokens(), 0, 1, new int[]{0}, StepKind.DECODE), got[i], "final, entry " + i);
        } finally {
            for (int i = 0; i < ENTRIES; i++) {
                if (A[i] != null) A[i].close();
                if (B[i] != null) B[i].close();
            }
        }
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
        return IntStream.range(0, n).map(x -> r.nextInt(V)).toArray();
    }
}
