package io.ds4j.cpu;

import io.ds4j.model.ModelConfig;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.SplittableRandom;
import java.util.stream.IntStream;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Engine invariants on an in-memory random model: results do not depend on chunking (spec 4.3), and rollback
 * restores the state exactly (spec 4.5).
 */
class CpuBackendTest {
    static CpuBackend backend;
    static ModelConfig cfg;

    @BeforeAll
    static void load() {
        cfg = TestModels.microConfig();
        backend = new CpuBackend(TestModels.random(cfg, 42));
    }

    @AfterAll
    static void close() {
        backend.close();
    }

    static int[] prompt(int n, long seed) {
        SplittableRandom r = new SplittableRandom(seed);
        return IntStream.range(0, n).map(i -> r.nextInt(cfg.vocabSize)).toArray();
    }

    static int[] all(int n) {
        return IntStream.range(0, n).toArray();
    }

    /** Runs the tokens in the given chunk sizes and returns logits for every position. */
    static float[] run(int[] toks, int[] chunks) {
        try (CpuSequence s = backend.newSequence(16)) {
            float[] out = new float[toks.length * cfg.vocabSize];
            int off = 0;
            for (int ch : chunks) {
                float[] lg = backend.forward(s, toks, off, ch, all(ch));
                System.arraycopy(lg, 0, out, off * cfg.vocabSize, lg.length);
                off += ch;
            }
            assertEquals(toks.length, off);
            return out;
        }
    }

    @Test
    void logitsAreFiniteAndNotDegenerate() {
        float[] lg = run(prompt(40, 1), new int[]{40});
        for (float v : lg) assertTrue(Float.isFinite(v));
        float mn = Float.MAX_VALUE, mx = -Float.MAX_VALUE;
        for (int i = 0; i < cfg.vocabSize; i++) {
            mn = Math.min(mn, lg[i]);
            mx = Math.max(mx, lg[i]);
        }
        assertTrue(mx - mn > 0.1, "logit spread " + (mx - mn));
    }

    @Test
    void chunkingDoesNotChangeLogits() {
        int[] toks = prompt(70, 7);
        float[] whole = run(toks, new int[]{70});
        int[] ones = new int[70];
        Arrays.fill(ones, 1);
        assertArrayEquals(whole, run(toks, ones), "token by token");
        assertArrayEquals(whole, run(toks, new int[]{37, 5, 3, 1, 7, 1, 16}), "uneven chunks");
        assertArrayEquals(whole, run(toks, new int[]{3, 13, 2, 9, 30, 13}), "other chunks");
    }

    @Test
    void rollbackIsExact() {
        SplittableRandom r = new SplittableRandom(5);
        for (int trial = 0; trial < 40; trial++) {
            int n = 1 + r.nextInt(60);
            int k = 1 + r.nextInt(Math.min(16, n));
            int[] toks = prompt(n, 100 + trial);
            int[] all = all(k);
            // fresh: forward n-k, then the last k
            float[] fresh;
            try (CpuSequence s = backend.newSequence(16)) {
                if (n - k > 0) backend.forward(s, toks, 0, n - k, new int[0]);
                fresh = backend.forward(s, toks, n - k, k, all);
            }
            // forward all n (in random chunks), roll back k, forward the same k again
            try (CpuSequence s = backend.newSequence(16)) {
                int off = 0;
                while (off < n) {
                    int ch = 1 + r.nextInt(n - off);
                    backend.forward(s, toks, off, ch, new int[0]);
                    off += ch;
                }
                s.rollback(k);
                assertEquals(n - k, s.length());
                float[] again = backend.forward(s, toks, n - k, k, all);
                assertArrayEquals(fresh, again, "n=" + n + " k=" + k);
                // and once more with different tokens in between
                s.rollback(k);
                int[] other = prompt(k, 999 + trial);
                backend.forward(s, other, 0, k, new int[0]);
                s.rollback(k);
                assertArrayEquals(fresh, backend.forward(s, toks, n - k, k, all), "after a rejected draft n=" + n + " k=" + k);
            }
        }
    }

    @Test
    void stateBytesReportMatchesTheSequence() {
        for (int n : new int[]{1, 7, 33, 70}) {
            try (CpuSequence s = backend.newSequence(16)) {
                backend.forward(s, prompt(n, n), 0, n, new int[0]);
                assertEquals(backend.stateBytes(n, 16), s.stateBytes(), "context " + n);
            }
        }
        assertTrue(backend.stateBytes(4096, 16) > backend.stateBytes(64, 16), "compressed entries grow with the context");
    }

    @Test
    void rollbackBeyondWindowIsRefused() {
        try (CpuSequence s = backend.newSequence(4)) {
            backend.forward(s, prompt(10, 3), 0, 10, new int[0]);
            assertEquals(4, s.rollbackable());
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> s.rollback(5));
            assertTrue(e.getMessage().contains("at most 4"), e.getMessage());
        }
    }

    @Test
    void badTokenIsRejectedWithoutChangingState() {
        try (CpuSequence s = backend.newSequence(4)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> backend.forward(s, new int[]{1, cfg.vocabSize}, 0, 2, new int[]{0}));
            assertTrue(e.getMessage().contains("outside"), e.getMessage());
            assertEquals(0, s.length());
        }
    }
}
