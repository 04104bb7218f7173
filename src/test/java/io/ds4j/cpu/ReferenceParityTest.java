package io.ds4j.cpu;

import io.ds4j.engine.Backend;
import io.ds4j.engine.Sequence;
import io.ds4j.model.SafetensorsFile;
import io.ds4j.model.WeightLoader;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.stream.IntStream;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Parity with Hugging Face transformers' DeepseekV4ForCausalLM (fp32) on the committed fixtures
 * (src/test/resources/fixtures, made by tools/reference/make_fixtures.py). For every fixture and scenario
 * (no cache, prefill + token-by-token decode, uneven chunks), with ds4j's F16 cache:
 * <ul>
 *   <li>against HF run with the same F16 rounding of its cache rows ({@code logits.f16cache.*}): max |logit
 *       difference| ≤ 2e-3 at every position;</li>
 *   <li>against plain fp32 HF ({@code logits.*}): max |logit difference| ≤ 2e-3 at every position, except where
 *       the two HF runs themselves differ by more than 2e-3 — a router or indexer near-tie that F16 rounding flips
 *       (spec 6.6); those positions are counted and printed;</li>
 *   <li>an identical argmax everywhere, except where the reference's top-2 margin is under 1e-2 (counted and
 *       printed).</li>
 * </ul>
 */
public class ReferenceParityTest {
    public static final Path FIXTURES = Path.of("src/test/resources/fixtures");
    static final double TOL = 2e-3, MARGIN = 1e-2;

    @TestFactory
    Stream<DynamicTest> fixtures() throws IOException {
        assertTrue(Files.isDirectory(FIXTURES), "fixtures missing: " + FIXTURES.toAbsolutePath());
        List<Path> dirs;
        try (Stream<Path> s = Files.list(FIXTURES)) {
            dirs = s.filter(p -> Files.isRegularFile(p.resolve("expected.safetensors"))).sorted().toList();
        }
        assertFalse(dirs.isEmpty(), "no fixture directories under " + FIXTURES);
        List<DynamicTest> tests = new ArrayList<>();
        for (Path dir : dirs) {
            tests.add(DynamicTest.dynamicTest(dir.getFileName().toString(),
                    () -> checkFixture(dir, d -> new CpuBackend(WeightLoader.load(d)), "cpu")));
        }
        return tests.stream();
    }

    /** Opens a backend on a model directory (the CPU backend here, the GPU backend in its own parity test). */
    public interface Opener {
        Backend open(Path modelDir) throws Exception;
    }

    /** Runs every scenario of one fixture on the backend {@code open} gives and applies the criteria above. */
    public static void checkFixture(Path dir, Opener open, String label) throws Exception {
        try (SafetensorsFile exp = SafetensorsFile.open(dir.resolve("expected.safetensors"));
             Backend be = open.open(dir)) {
            long[] ids = exp.tensor("input_ids").toLongs();
            int[] toks = new int[ids.length];
            for (int i = 0; i < ids.length; i++) toks[i] = (int) ids[i];
            int T = toks.length;
            Map<String, String> meta = exp.metadata();
            int prefill = Integer.parseInt(meta.get("P").trim());
            int[] chunks = parseList(meta.get("chunks"));
            int[] ones = new int[T - prefill + 1];
            ones[0] = prefill;
            java.util.Arrays.fill(ones, 1, ones.length, 1);
            for (String sc : new String[]{"nocache", "decode", "chunks"}) {
                int[] sched = sc.equals("nocache") ? new int[]{T} : sc.equals("decode") ? ones : chunks;
                compare(label, dir, sc, be, toks, sched, exp.tensor("logits." + sc).toFloats(),
                        exp.tensor("logits.f16cache." + sc).toFloats());
            }
        }
    }

    static int[] parseList(String s) {
        return java.util.Arrays.stream(s.replaceAll("[\\[\\]\\s]", "").split(",")).mapToInt(Integer::parseInt).toArray();
    }

    static void compare(String label, Path dir, String scenario, Backend be, int[] toks, int[] chunks, float[] want32, float[] want16) {
        int V = be.config().vocabSize, T = toks.length;
        assertEquals((long) T * V, want32.length, "reference logits shape");
        assertEquals((long) T * V, want16.length, "F16-cache reference logits shape");
        float[] got = new float[T * V];
        try (Sequence s = be.newSequence(16)) {
            int off = 0;
            for (int ch : chunks) {
                float[] lg = be.forward(s, toks, off, ch, IntStream.range(0, ch).toArray());
                System.arraycopy(lg, 0, got, off * V, lg.length);
                off += ch;
            }
            assertEquals(T, off, "chunk schedule covers the prompt");
        }
        double worst16 = 0, worst32 = 0;
        int flips = 0, smallMargin = 0, argmaxExempt = 0;
        List<String> failures = new ArrayList<>();
        for (int t = 0; t < T; t++) {
            double d16 = maxDiff(got, want16, t, V), d32 = maxDiff(got, want32, t, V), ref = maxDiff(want32, want16, t, V);
            worst16 = Math.max(worst16, d16);
            if (d16 > TOL) failures.add("pos " + t + ": max|diff| vs F16-cache HF " + d16);
            if (ref > TOL) flips++;
            else {
                worst32 = Math.max(worst32, d32);
                if (d32 > TOL) failures.add("pos " + t + ": max|diff| vs fp32 HF " + d32);
            }
            int ga = argmax(got, t, V), ra = argmax(want32, t, V);
            double margin = margin(want32, t, V, ra);
            if (margin < MARGIN) smallMargin++;
            if (ga != ra) {
                if (margin < MARGIN) argmaxExempt++;
                else failures.add("pos " + t + ": argmax " + ga + " != reference " + ra + " (margin " + margin + ")");
            }
        }
        System.out.printf("%s parity %s/%s: T=%d max|diff| vs F16-cache HF %.3g, vs fp32 HF %.3g; positions where F16 rounding "
                        + "flips a near-tie in HF itself: %d; reference top-2 margin < %.0e: %d (argmax differs at %d)%n",
                label, dir.getFileName(), scenario, T, worst16, worst32, flips, MARGIN, smallMargin, argmaxExempt);
        assertTrue(failures.isEmpty(), dir.getFileName() + "/" + scenario + ": " + failures.size() + " failures, first: "
                + failures.subList(0, Math.min(5, failures.size())));
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

    static double margin(float[] a, int t, int V, int top) {
        float second = Float.NEGATIVE_INFINITY;
        for (int v = 0; v < V; v++) if (v != top) second = Math.max(second, a[t * V + v]);
        return a[t * V + top] - second;
    }
}
