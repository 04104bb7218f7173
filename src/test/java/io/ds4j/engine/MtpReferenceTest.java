package io.ds4j.engine;

import io.ds4j.cpu.CpuBackend;
import io.ds4j.model.SafetensorsFile;
import io.ds4j.model.StoredTensor;
import io.ds4j.model.TensorNames;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.Presets;
import io.ds4j.model.synth.RandomCheckpoint;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The CPU MTP forward against the PyTorch reference ({@code tools/reference/mtp_reference.py}): the tiny preset as
 * {@code make-model --preset tiny --seed 20260601} writes it (BF16, HF naming, an MTP layer), a 41-token prompt, the
 * target's logits at the last prompt position and three chained MTP rows (fed the reference's recorded draft tokens)
 * agree within the parity tolerance 2e-3, with the prefill in one step and in uneven chunks.
 */
public class MtpReferenceTest {
    /** The committed reference output. */
    public static final Path FIXTURE = Path.of("src/test/resources/fixtures/mtp/tiny-seed20260601-expected.safetensors");
    public static final long SEED = 20260601;
    static final float TOL = 2e-3f;

    @TempDir
    Path tmp;

    /** The reference's arrays: input_ids, chain_tokens, logits.target [V], logits.mtp [q, V]. */
    public record Expected(int[] ids, int[] chain, float[] target, float[][] mtp) {
        public static Expected read() throws Exception {
            try (SafetensorsFile f = SafetensorsFile.open(FIXTURE)) {
                int[] ids = ints(f.tensor("input_ids"));
                int[] chain = ints(f.tensor("chain_tokens"));
                float[] t = f.tensor("logits.target").toFloats();
                StoredTensor m = f.tensor("logits.mtp");
                int q = (int) m.shape()[0], V = (int) m.shape()[1];
                float[] all = m.toFloats();
                float[][] rows = new float[q][];
                for (int i = 0; i < q; i++) rows[i] = java.util.Arrays.copyOfRange(all, i * V, (i + 1) * V);
                return new Expected(ids, chain, t, rows);
            }
        }

        private static int[] ints(StoredTensor t) throws Exception {
            long[] v = t.toLongs();
            int[] out = new int[v.length];
            for (int i = 0; i < v.length; i++) out[i] = (int) v[i];
            return out;
        }
    }

    /** The fixture's checkpoint, byte for byte the tensors make-model writes for the tiny preset and this seed. */
    public static Path checkpoint(Path dir) throws Exception {
        new RandomCheckpoint(Presets.get("tiny"), SEED, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16).write(dir);
        return dir;
    }

    /** Largest |a − b|. */
    public static float maxDiff(float[] a, float[] b) {
        assertEquals(a.length, b.length);
        float m = 0;
        for (int i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
        return m;
    }

    /**
     * Runs the target over the prompt's first N tokens in the given chunks with an MTP state attached, then the MTP
     * start and q − 1 chained steps; asserts every row against the reference.
     */
    public static void check(Backend b, Expected e, int[] chunks, String what) {
        int N = e.ids().length - 1;
        try (Sequence seq = b.newSequence(16); MtpState st = b.mtp().open(seq, 16)) {
            float[] tl = null;
            int at = 0;
            for (int c : chunks) {
                int n = Math.min(c, N - at);
                if (n <= 0) break;
                tl = b.forward(seq, e.ids(), at, n, at + n == N ? new int[]{n - 1} : new int[0]);
                at += n;
            }
            assertEquals(N, at, "chunks cover the prompt");
            float dt = maxDiff(e.target(), tl);
            float[] lg = st.start(e.ids(), N + 1);
            StringBuilder sb = new StringBuilder(String.format("%s: target %.2e", what, dt));
            for (int i = 0; i < e.mtp().length; i++) {
                if (i > 0) lg = st.next(e.chain()[i - 1]);
                float d = maxDiff(e.mtp()[i], lg);
                sb.append(String.format(", mtp row %d %.2e", i, d));
                assertTrue(d <= TOL, what + ": MTP row " + i + " differs from the reference by " + d);
            }
            System.out.println(sb);
            assertTrue(dt <= TOL, what + ": target logits differ from the reference by " + dt);
        }
    }

    @Test
    void cpuMtpMatchesThePyTorchReference() throws Exception {
        Expected e = Expected.read();
        try (CpuBackend b = new CpuBackend(WeightLoader.load(checkpoint(tmp.resolve("tiny"))))) {
            check(b, e, new int[]{e.ids().length}, "cpu, one prefill step");
            check(b, e, new int[]{7, 1, 13, 3, 100}, "cpu, chunks 7,1,13,3,...");
        }
    }
}
