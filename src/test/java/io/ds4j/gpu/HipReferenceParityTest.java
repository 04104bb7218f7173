package io.ds4j.gpu;

import io.ds4j.engine.Sequence;
import io.ds4j.model.SafetensorsFile;
import io.ds4j.model.WeightLoader;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.TestFactory;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.stream.IntStream;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The GPU backend against Hugging Face transformers' fp32 logits on the committed fixtures
 * (src/test/resources/fixtures), with the criteria of io.ds4j.cpu.ReferenceParityTest: for every fixture and
 * scenario (no cache, prefill + token-by-token decode, uneven chunks) max |logit difference| ≤ 2e-3 against HF run
 * with the F16 cache rounding, and against plain fp32 HF except at positions where the two HF runs themselves differ
 * by more (F16 rounding flips a near-tie); the same argmax except where the reference's top-2 margin is under 1e-2.
 */
@Tag("gpu")
class HipReferenceParityTest {
    static final Path FIXTURES = Path.of("src/test/resources/fixtures");
    static final double TOL = 2e-3, MARGIN = 1e-2;

    @TestFactory
    Stream<DynamicTest> fixtures() throws Exception {
        List<Path> dirs;
        try (Stream<Path> s = Files.list(FIXTURES)) {
            dirs = s.filter(p -> Files.isRegularFile(p.resolve("expected.safetensors"))).sorted().toList();
        }
        assertFalse(dirs.isEmpty(), "no fixtures under " + FIXTURES.toAbsolutePath());
        return dirs.stream().map(d -> DynamicTest.dynamicTest(d.getFileName().toString(), () -> check(d)));
    }

    static void check(Path dir) throws Exception {
        try (SafetensorsFile exp = SafetensorsFile.open(dir.resolve("expected.safetensors"));
             HipBackend be = new HipBackend(WeightLoader.load(dir))) {
            long[] ids = exp.tensor("input_ids").toLongs();
            int[] toks = Arrays.stream(ids).mapToInt(v -> (int) v).toArray();
            int T = toks.length;
            Map<String, String> meta = exp.metadata();
            int prefill = Integer.parseInt(meta.get("P").trim());
            int[] chunks = Arrays.stream(meta.get("chunks").replaceAll("[\\[\\]\\s]", "").split(",")).mapToInt(Integer::parseInt).toArray();
            int[] ones = new int[T - prefill + 1];
            ones[0] = prefill;
            Arrays.fill(ones, 1, ones.length, 1);
            for (String sc : new String[]{"nocache", "decode", "chunks"}) {
                int[] sched = sc.equals("nocache") ? new int[]{T} : sc.equals("decode") ? ones : chunks;
                compare(dir.getFileName() + "/" + sc, be, toks, sched, exp.tensor("logits." + sc).toFloats(),
                        exp.tensor("logits.f16cache." + sc).toFloats());
            }
        }
    }

    static void compare(String what, HipBackend be, int[] toks, int[] chunks, float[] want32, float[] want16) {
        int V = be.config().vocabSize, T = toks.length;
        float[] got = new float[T * V];
        try (Sequence s = be.newSequence(16)) {
            int off = 0;
            for (int ch : chunks) {
                float[] lg = be.forward(s, toks, off, ch, IntStream.range(0, ch).toArray());
                System.arraycopy(lg, 0, got, off * V, lg.length);
                off += ch;
            }
            assertEquals(T, off);
        }
        double worst16 = 0, worst32 = 0;
        int flips = 0, exempt = 0;
        List<String> failures = new ArrayList<>();
        for (int t = 0; t < T; t++) {
            double d16 = maxDiff(got, want16, t, V), d32 = maxDiff(got, want32, t, V), ref = maxDiff(want32, want16, t, V);
            worst16 = Math.max(worst16, d16);
            if (d16 > TOL) failures.add("pos " + t + ": vs F16-cache HF " + d16);
            if (ref > TOL) flips++;
            else {
                worst32 = Math.max(worst32, d32);
                if (d32 > TOL) failures.add("pos " + t + ": vs fp32 HF " + d32);
            }
            int ga = argmax(got, t, V), ra = argmax(want32, t, V);
            if (ga != ra) {
                float second = Float.NEGATIVE_INFINITY;
                for (int v = 0; v < V; v++) if (v != ra) second = Math.max(second, want32[t * V + v]);
                if (want32[t * V + ra] - second < MARGIN) exempt++;
                else failures.add("pos " + t + ": argmax " + ga + " != reference " + ra);
            }
        }
        System.out.printf("gpu parity %-24s T=%d max|diff| vs F16-cache HF %.3g, vs fp32 HF %.3g; HF near-tie flips %d; argmax exempt %d%n",
                what, T, worst16, worst32, flips, exempt);
        assertTrue(failures.isEmpty(), what + ": " + failures.size() + " failures, first " + failures.subList(0, Math.min(5, failures.size())));
    }

    static double maxDiff(float[] a, float[] b, int t, int V) {
        double m = 0;
        for (int v = 0; v < V; v++) {
            double d = Math.abs(a[t * V + v] - b[t * V + v]);
            if (Double.isNaN(d)) return Double.POSITIVE_INFINITY;
            m = Math.max(m, d);
        }
        return m;
    }

    static int argmax(float[] a, int t, int V) {
        int best = 0;
        for (int v = 1; v < V; v++) if (a[t * V + v] > a[t * V + best]) best = v;
        return best;
    }
}
