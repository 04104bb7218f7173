package io.ds4j.gpu;

import io.ds4j.engine.MtpBatchRuns;
import io.ds4j.engine.MtpReferenceTest;
import io.ds4j.engine.SpeculativeTest;
import io.ds4j.model.MtpCheckpoints;
import io.ds4j.model.WeightLoader;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.MtpDraftSource;
import io.ds4j.engine.VerifyWidth;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The MTP layer on the GPU: its logits match the PyTorch reference (the fixture {@link MtpReferenceTest} checks on the
 * CPU) within 2e-3, greedy output with the MTP draft equals plain greedy output on the GPU, and the MTP steps of many
 * requests batched ({@link HipMtp#step}) give each request what it gets alone.
 */
@Tag("gpu")
class HipMtpTest {
    @TempDir
    Path tmp;

    @Test
    void gpuMtpMatchesThePyTorchReference() throws Exception {
        MtpReferenceTest.Expected e = MtpReferenceTest.Expected.read();
        try (HipBackend b = new HipBackend(WeightLoader.load(MtpReferenceTest.checkpoint(tmp.resolve("tiny"))))) {
            MtpReferenceTest.check(b, e, new int[]{e.ids().length}, "hip, one prefill step");
            MtpReferenceTest.check(b, e, new int[]{7, 1, 13, 3, 100}, "hip, chunks 7,1,13,3,...");
        }
    }

    /** Batched MTP steps ({@link HipMtp#step}) give every state bit for bit its logits stepped alone. */
    @Test
    void batchedMtpStepsEqualEachStateAloneOnTheGpu() throws Exception {
        try (HipBackend b = new HipBackend(WeightLoader.load(MtpCheckpoints.tinyFp8(tmp.resolve("fp8"), 19)))) {
            MtpBatchRuns.batchedEqualsAlone(b, 12, 40, 41);
        }
    }

    /** 16 MTP requests give the same tokens alone and through one scheduler, greedy ones plain greedy output. */
    @Test
    void sixteenMtpRequestsGiveTheSameTokensAloneAndBatchedOnTheGpu() throws Exception {
        try (HipBackend b = new HipBackend(WeightLoader.load(MtpCheckpoints.tinyFp8(tmp.resolve("fp8"), 19)))) {
            MtpBatchRuns.sixteenRequestsAloneAndBatched(b);
        }
    }

    @Test
    void greedyWithMtpEqualsPlainGreedyOnTheGpu() throws Exception {
        try (HipBackend b = new HipBackend(WeightLoader.load(MtpCheckpoints.tinyFp8(tmp.resolve("fp8"), 19)))) {
            SplittableRandom r = new SplittableRandom(29);
            SamplingParams p = SamplingParams.greedy(40);
            int V = b.config().vocabSize;
            MtpDraftSource src = new MtpDraftSource(b, 16);
            long offered = 0;
            for (int i = 0; i < 6; i++) {
                int[] pr = new int[3 + r.nextInt(28)];
                for (int j = 0; j < pr.length; j++) pr[j] = r.nextInt(V);
                int[] plain = SpeculativeTest.generate(b, pr, p, null, null).tokens();
                for (int q : new int[]{1, 3, 5}) {
                    SpeculativeTest.Result spec = SpeculativeTest.generate(b, pr, p, src, VerifyWidth.fixed(q));
                    assertArrayEquals(plain, spec.tokens(), "prompt " + i + " q=" + q);
                    offered += spec.stats().offered();
                }
            }
            assertTrue(offered > 0, "the MTP draft offered tokens");
        }
    }
}
