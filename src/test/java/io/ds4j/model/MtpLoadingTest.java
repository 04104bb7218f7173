package io.ds4j.model;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.speculative.MtpDraftSource;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Loading the MTP layer ({@code mtp.0.*}): present in both naming schemes and in the released storage (FP8 dense, FP4
 * experts); absent, the DSpark drafter layout and a truncated layer are refused by the MTP draft with a message naming
 * what was found, while the main model still loads.
 */
class MtpLoadingTest {
    @TempDir
    Path tmp;

    @Test
    void presentInHfNamingF32() throws Exception {
        Path dir = MtpCheckpoints.micro(tmp.resolve("m"), 3, true);
        try (Checkpoint ck = Checkpoint.open(dir)) {
            assertTrue(ck.mtpNames().contains("mtp.0.e_proj.weight"), "MTP keeps the original names in an HF checkpoint");
            assertTrue(ck.mtpNames().contains("mtp.0.ffn.experts.3.w2.weight"));
            assertEquals(TensorNames.Scheme.HF, ck.scheme());
            assertTrue(ck.names().stream().noneMatch(n -> n.startsWith("mtp.")), "mtp.* stays out of the main namespace");
        }
        try (ModelWeights w = WeightLoader.load(dir)) {
            assertNull(w.mtpProblem);
            ModelWeights.Mtp m = w.mtp;
            assertNotNull(m);
            int D = w.config.hidden, n = w.config.hcMult;
            assertEquals(D, m.eProj.rows);
            assertEquals(D, m.hProj.cols);
            assertEquals(n * D, m.hcHeadFn.cols);
            assertNotNull(m.block.gateBias, "the MTP MoE routes by score with the correction bias");
            assertNull(m.block.tid2eid);
            assertNull(m.block.compressor, "the MTP layer is window-only");
            assertEquals(w.config.numExperts, m.block.w1.length);
        }
    }

    @Test
    void presentInTheReleasedStorage() throws Exception {
        Path dir = MtpCheckpoints.tinyFp8(tmp.resolve("t"), 5);
        try (ModelWeights w = WeightLoader.load(dir)) {
            assertNotNull(w.mtp, () -> w.mtpProblem);
            assertEquals(WeightMatrix.Format.FP8_E4M3_B128, w.mtp.eProj.format, "e_proj is FP8 like the other dense projections");
            assertEquals(WeightMatrix.Format.FP8_E4M3_B128, w.mtp.block.qA.format);
            assertEquals(WeightMatrix.Format.FP4_E2M1_B32, w.mtp.block.w1[0].format, "routed experts are FP4");
            assertEquals(WeightMatrix.Format.BF16, w.mtp.block.gate.format);
        }
    }

    @Test
    void absentIsRefusedByTheMtpDraft() throws Exception {
        Path dir = MtpCheckpoints.micro(tmp.resolve("none"), 3, false);
        try (CpuBackend b = new CpuBackend(WeightLoader.load(dir))) {
            assertNull(b.weights().mtp);
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> new MtpDraftSource(b, 16));
            assertTrue(e.getMessage().contains("no MTP layer") && e.getMessage().contains("no mtp.* tensors"), e.getMessage());
        }
    }

    @Test
    void dsparkLayoutIsRefused() throws Exception {
        Path dir = MtpCheckpoints.micro(tmp.resolve("dspark"), 3, true);
        MtpCheckpoints.rewrite(dir, n -> false, Map.of(
                "mtp.1.enorm.weight", new float[32], "mtp.2.enorm.weight", new float[32],
                "mtp.2.markov_head.weight", new float[8], "mtp.2.confidence_head.weight", new float[8]));
        try (CpuBackend b = new CpuBackend(WeightLoader.load(dir))) {
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> b.mtp());
            String msg = e.getMessage();
            assertTrue(msg.contains("DSpark") && msg.contains("[mtp.0, mtp.1, mtp.2]") && msg.contains("markov_head"), msg);
        }
    }

    @Test
    void truncatedLayerIsRefusedNamingTheMissingTensor() throws Exception {
        Path dir = MtpCheckpoints.micro(tmp.resolve("cut"), 3, true);
        MtpCheckpoints.rewrite(dir, n -> n.equals("mtp.0.ffn.experts.2.w3.weight") || n.equals("mtp.0.h_proj.weight"), Map.of());
        try (CpuBackend b = new CpuBackend(WeightLoader.load(dir))) {
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> b.mtp());
            String msg = e.getMessage();
            assertTrue(msg.contains("incomplete") && msg.contains("mtp.0.ffn.experts.2.w3.weight"), msg);
        }
    }

    @Test
    void misshapenTensorIsRefused() throws Exception {
        Path dir = MtpCheckpoints.micro(tmp.resolve("shape"), 3, true);
        MtpCheckpoints.rewrite(dir, n -> n.equals("mtp.0.hnorm.weight"), Map.of("mtp.0.hnorm.weight", new float[31]));
        try (ModelWeights w = WeightLoader.load(dir)) {
            assertNull(w.mtp);
            assertTrue(w.mtpProblem.contains("mtp.0.hnorm.weight") && w.mtpProblem.contains("shape mismatch"), w.mtpProblem);
        }
    }
}
