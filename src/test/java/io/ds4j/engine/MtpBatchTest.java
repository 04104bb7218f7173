package io.ds4j.engine;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.model.MtpCheckpoints;
import io.ds4j.model.WeightLoader;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.List;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The MTP drafts of many requests batched ({@link MtpHead#step}) on the CPU: every state's logits in a batched MTP
 * step are bit for bit those of the same state stepped alone (starts and chained steps mixed, targets of different
 * lengths, catch-up over accepted tokens and rollbacks), a bad step fails naming itself and changes nothing, and
 * through the scheduler 16 requests with the MTP draft (greedy and seeded sampled, different prompt lengths and widths)
 * give the same tokens as alone, greedy ones the plain greedy tokens, with the MTP steps of at least 8 requests
 * batched together.
 */
class MtpBatchTest {
    @TempDir
    static Path tmp;
    static CpuBackend micro, tiny;

    @BeforeAll
    static void load() throws Exception {
        micro = new CpuBackend(WeightLoader.load(MtpCheckpoints.micro(tmp.resolve("micro"), 17, true)));
        tiny = new CpuBackend(WeightLoader.load(MtpCheckpoints.tinyFp8(tmp.resolve("tiny"), 19)));
    }

    @AfterAll
    static void close() {
        micro.close();
        tiny.close();
    }

    @Test
    void batchedMtpStepsEqualEachStateAloneOnTheMicroModel() {
        MtpBatchRuns.batchedEqualsAlone(micro, 12, 60, 41);
    }

    @Test
    void batchedMtpStepsEqualEachStateAloneOnTheTinyFp8Model() {
        MtpBatchRuns.batchedEqualsAlone(tiny, 6, 16, 43);
    }

    /**
     * A step the head refuses (a token outside the vocabulary, a state twice, a chained step before a start) fails the
     * whole call naming the step's index, and no state changed: the same states stepped afterwards give what they give
     * alone.
     */
    @Test
    void aRefusedStepNamesItsIndexAndChangesNothing() {
        CpuBackend b = micro;
        int V = b.config().vocabSize;
        MtpHead head = b.mtp();
        int[] c1 = {5, 6, 7, 8, 9, 10}, c2 = {11, 12, 13, 14};
        try (Sequence t1 = b.newSequence(16); Sequence t2 = b.newSequence(16); Sequence u1 = b.newSequence(16);
             MtpState s1 = head.open(t1, 16); MtpState s2 = head.open(t2, 16); MtpState r1 = head.open(u1, 16)) {
            b.forward(t1, c1, 0, c1.length - 1, new int[0]);
            b.forward(t2, c2, 0, c2.length - 1, new int[0]);
            b.forward(u1, c1, 0, c1.length - 1, new int[0]);
            var e = assertThrows(IllegalStateException.class,
                    () -> head.step(List.of(MtpHead.Step.start(s1, c1, c1.length), MtpHead.Step.next(s2, 3))));
            assertTrue(e.getMessage().startsWith("MTP step 1: next() before start()"), e.getMessage());
            var d = assertThrows(IllegalArgumentException.class,
                    () -> head.step(List.of(MtpHead.Step.start(s1, c1, c1.length), MtpHead.Step.start(s1, c1, c1.length))));
            assertTrue(d.getMessage().startsWith("MTP step 1: its state is already in the batch"), d.getMessage());
            float[][] got = head.step(List.of(MtpHead.Step.start(s1, c1, c1.length), MtpHead.Step.start(s2, c2, c2.length)));
            float[] alone = r1.start(c1, c1.length);
            assertArrayEquals(alone, got[0]);
            var x = assertThrows(IllegalArgumentException.class,
                    () -> head.step(List.of(MtpHead.Step.next(s1, 1), MtpHead.Step.next(s2, V))));
            assertTrue(x.getMessage().startsWith("MTP step 1: token id " + V), x.getMessage());
            float[][] next = head.step(List.of(MtpHead.Step.next(s1, 1), MtpHead.Step.next(s2, 2)));
            assertArrayEquals(r1.next(1), next[0], "the refused batch left the first state as it was");
        }
    }

    @Test
    void sixteenMtpRequestsGiveTheSameTokensAloneAndBatched() {
        MtpBatchRuns.sixteenRequestsAloneAndBatched(micro);
    }
}
