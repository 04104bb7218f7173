package io.ds4j.cpu;

import io.ds4j.engine.BatchEntry;
import io.ds4j.engine.BatchRun;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.model.ModelConfig;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * A real fault inside a layer slice on the CPU backend (its kept streams corrupted, so the slice's layers throw): the
 * backend runs a step's slices before its whole entries, so those have not advanced when the slice throws, and
 * BatchRun steps them again alone: every entry but the slice's answers as alone, short or beyond the rollback window.
 */
class SliceFaultIsolationTest {
    static ModelConfig cfg;
    static CpuBackend cpu;

    @BeforeAll
    static void load() {
        cfg = TestModelsAccess.microConfig();
        cpu = new CpuBackend(TestModelsAccess.random(cfg, 42));
    }

    @AfterAll
    static void close() {
        cpu.close();
    }

    static int[] prompt(int n, long seed) {
        return TestModelsAccess.randomTokens(cfg, n, seed);
    }

    /** A whole prefill entry of wholeRows rows (its logit row the last) beside a slice that throws: only the slice fails. */
    static void faultBeside(int wholeRows) {
        int[] p = prompt(wholeRows + 8, 1), q = prompt(40, 2);
        try (Sequence a = cpu.newSequence(16); Sequence ref = cpu.newSequence(16); Sequence b = cpu.newSequence(16)) {
            cpu.forward(a, p, 0, 8, new int[0]);
            cpu.forward(ref, p, 0, 8, new int[0]);
            float[] expect = cpu.forward(ref, p, 8, wholeRows, new int[]{wholeRows - 1});
            int[] rest = Arrays.copyOfRange(q, 8, 40);
            cpu.forward(b, q, 0, 8, new int[0]);
            cpu.step(List.of(new BatchEntry(b, rest, new int[0], StepKind.PREFILL, 0, new BatchEntry.Layers(0, 1))));
            ((CpuSequence) b).sliceX = new float[1]; // the kept streams are broken: the next slice throws inside its layers
            BatchRun.Outcome o = BatchRun.run(cpu, List.of(
                    new BatchEntry(a, Arrays.copyOfRange(p, 8, 8 + wholeRows), new int[]{wholeRows - 1}, StepKind.PREFILL),
                    new BatchEntry(b, rest, new int[0], StepKind.PREFILL, 0, new BatchEntry.Layers(1, 2))));
            assertTrue(o.isolated());
            assertFalse(o.ok(1), "the broken slice fails");
            assertTrue(o.ok(0), "the whole entry of " + wholeRows + " rows beside it does not: " + o.failures()[0]);
            assertArrayEquals(expect, o.logits()[0], "and gives its numbers as alone");
            assertEquals(8 + wholeRows, a.length());
        }
    }

    /** A whole entry within the rollback window is rolled back and stepped again alone. */
    @Test
    void aFaultInASliceLeavesAShortEntryBesideItAsAlone() {
        faultBeside(12);
    }

    /**
     * Fails (a finding): a whole entry of 22 rows (beyond the rollback window of 16) with a logit row has advanced when
     * the slice throws, so BatchRun fails it with the slice's error. Without the slice in the batch the CPU's one pass
     * advances no sequence before a fault, and the entry would be stepped again alone.
     */
    @Test
    void aFaultInASliceLeavesALongerEntryBesideItAsAlone() {
        faultBeside(22);
    }
}
