package io.ds4j.cli;

import io.ds4j.kernels.Gemm;
import io.ds4j.cpu.CpuBackend;
import io.ds4j.cpu.CpuSequence;
import io.ds4j.kernels.ProductProfile;
import io.ds4j.model.ModelWeights;
import io.ds4j.model.WeightLoader;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code ds4j bench-engine}: its byte count per decoded token and its --profile output. */
class BenchEngineCommandTest {
    /**
     * The bytes the profile sees a decode step's matrix-vector products read equal the command's own count of
     * weight bytes per decoded token, less the one embedding row read without a product: the two are counted
     * independently (one by walking the weights, one inside Gemm.matvecs), so this checks both.
     */
    @Test
    void profiledBytesMatchTheCountedDecodeBytes() throws Exception {
        try (CpuBackend be = new CpuBackend(WeightLoader.load(Path.of(GenerateCommandTest.FIXTURE)));
             CpuSequence s = be.newSequence(4)) {
            ModelWeights w = be.weights();
            int[] toks = {5, 17, 3, 9, 11, 2};
            be.forward(s, toks, 0, 5, new int[]{4});
            for (int step = 0; step < 2; step++) { // the second step runs on compiled paths too; both must match
                ProductProfile p = new ProductProfile();
                ProductProfile.activate(p);
                try {
                    be.forward(s, toks, 5, 1, new int[]{0});
                } finally {
                    ProductProfile.activate(null);
                }
                long bytes = p.groups().stream().mapToLong(ProductProfile.Group::bytes).sum();
                long expected = BenchEngineCommand.decodeWeightBytes(w) - w.embed.storedBytes() / w.embed.rows;
                assertEquals(expected, bytes, "weight bytes of one decode step");
                s.rollback(1);
            }
        }
    }

    @Test
    void profileFlagPrintsWhereTheTimeWent() {
        GenerateCommandTest.Run r = GenerateCommandTest.run("bench-engine", "--model", GenerateCommandTest.FIXTURE,
                "--prompt-tokens", "8", "--decode-tokens", "3", "--repeats", "2", "--no-bandwidth", "--profile");
        assertEquals(0, r.code(), r.err());
        assertTrue(r.out().contains("decode profile of the best run:"), r.out());
        assertTrue(r.out().contains("1 x lm_head.weight["), r.out());
        assertTrue(r.out().contains("everything else (attention over the cache"), r.out());
    }
}
