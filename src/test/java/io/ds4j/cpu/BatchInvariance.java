package io.ds4j.cpu;

import io.ds4j.engine.Backend;
import io.ds4j.engine.BatchEntry;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.SplittableRandom;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The batch-invariance check shared by the CPU and GPU tests: a batched step gives every entry bit for bit the logits
 * that stepping it alone gives, and leaves its sequence in the same state.
 */
public final class BatchInvariance {
    private BatchInvariance() {}

    /**
     * Sequence pairs (A_i, B_i) with the same history of 0 .. maxHistory tokens (B_i a fork of A_i); each round steps
     * every A_i in one batch (entries in shuffled order, kinds rotating over prefill chunks of 2 .. 1 + maxPrefill
     * tokens, decode tokens and verify steps of 2 .. 5 rows followed by the same rollback on both) and every B_i
     * alone with the same entry, and compares bit for bit; a last batched decode step over all compares the states.
     */
    public static void check(Backend b, long seed, int entries, int maxHistory, int rounds, int maxPrefill) {
        int V = b.config().vocabSize;
        SplittableRandom r = new SplittableRandom(seed);
        Sequence[] A = new Sequence[entries], B = new Sequence[entries];
        try {
            for (int i = 0; i < entries; i++) {
                A[i] = b.newSequence(16);
                int h = i == 0 ? 0 : 1 + r.nextInt(maxHistory);
                int[] hist = tokens(r, h, V);
                if (h > 0) b.forward(A[i], hist, 0, h, new int[0]);
                B[i] = b.fork(A[i], 16);
            }
            for (int round = 0; round < rounds; round++) {
                List<Integer> order = new ArrayList<>(IntStream.range(0, entries).boxed().toList());
                Collections.shuffle(order, new Random(seed * 31 + round));
                List<BatchEntry> batch = new ArrayList<>();
                for (int i : order) {
                    StepKind kind = StepKind.values()[(i + round) % 3];
                    int S = switch (kind) {
                        case PREFILL -> 2 + r.nextInt(maxPrefill);
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
                assertEquals(batch.size(), got.length);
                for (int j = 0; j < batch.size(); j++) {
                    BatchEntry e = batch.get(j);
                    int i = order.get(j);
                    assertEquals(e.logitRows().length * V, got[j].length);
                    float[] alone = b.forward(B[i], e.tokens(), 0, e.count(), e.logitRows(), e.kind());
                    assertArrayEquals(alone, got[j], "round " + round + ", entry " + i + " " + e.kind() + " of " + e.count()
                            + " tokens at " + (B[i].length() - e.count()));
                    assertEquals(B[i].length(), A[i].length());
                    if (e.kind() == StepKind.VERIFY) { // rejected drafts: both roll back the same
                        int k = r.nextInt(e.count());
                        A[i].rollback(k);
                        B[i].rollback(k);
                    }
                }
            }
            List<BatchEntry> last = new ArrayList<>();
            for (int i = 0; i < entries; i++) last.add(new BatchEntry(A[i], tokens(r, 1, V), new int[]{0}, StepKind.DECODE));
            float[][] got = b.step(last);
            for (int i = 0; i < entries; i++)
                assertArrayEquals(b.forward(B[i], last.get(i).tokens(), 0, 1, new int[]{0}, StepKind.DECODE), got[i], "final, entry " + i);
        } finally {
            for (int i = 0; i < entries; i++) {
                if (A[i] != null) A[i].close();
                if (B[i] != null) B[i].close();
            }
        }
    }

    /** n random token ids in [0, V). */
    public static int[] tokens(SplittableRandom r, int n, int V) {
        return IntStream.range(0, n).map(x -> r.nextInt(V)).toArray();
    }
}
