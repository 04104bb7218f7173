package io.ds4j.gpu;

import io.ds4j.engine.BackendOptions;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.engine.VerifyAttention;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.model.synth.RandomCheckpoint;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.Map;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The F16-KV verifier against the control at V4-Flash's full depth (43 layers: 2 sliding-window, 21 CSA, 20 HCA; 16
 * routed experts, 6 per token; FP8 + FP4 as released) at 59,933 and 122,879 tokens of context. The context is
 * synthetic ({@link HipBackend#fillSynthetic}: random F16 cache, compressor and indexer rows; a real prefill of these
 * lengths takes minutes of device time, and the F16-KV matched benchmark, {@code ds4j bench}, covers prefilled
 * contexts), then every step appends real rows. At each length:
 * <ul>
 *   <li>acceptance: 100 greedy speculative rounds on the {@code f16} path with a copy of the target as the draft (a fork
 *       of the target, q = 4) keep at least 99.9 % of the draft tokens (decode and verify steps take the same
 *       per-query path, so a copy of the target should lose none);</li>
 *   <li>agreement: 2,000 verify steps of 5 rows, each verified by the control ({@code f32-convert}) and then by the
 *       {@code f16} path on the same rows (rolled back in between): the two choose the same token (argmax) on at least
 *       99.99 % of the rows, and since the paths differ only in where they read the cache rows (in place, or F32 copies
 *       of the same F16 values) their logits must be equal bit for bit. Between steps a pseudo-random prefix of the
 *       {@code f16} path's rows is kept and its argmax tokens are fed next, so the context grows by ~6,000 real rows
 *       over the run.</li>
 * </ul>
 * Before the control's verify steps took the same tensor-core arithmetic above the threshold (plain F32 on the copies),
 * the agreement was 99.76 % and 99.73 % of rows (BENCHMARKS.md, "Full depth, 2026-12-01 (fifth session)"): on this
 * random full-depth model any rounding-level difference grows into changed tokens ({@link ArgmaxTrace}).
 *
 * <p>Tagged {@code gpu-long} (not {@code gpu}): ~2.5 minutes per length on an H200, so it runs only when asked for:
 * {@code tools/device/run.sh test --include-tag gpu-long --select-class io.ds4j.gpu.HipVerifyFullDepthTest}.
 */
@Tag("gpu-long")
class HipVerifyFullDepthTest {
    static final int S = 5, STEPS = 2000, ACCEPT_ROUNDS = 100;
    static HipBackend be;

    @BeforeAll
    static void open() throws Exception {
        Path dir = ModelStore.ensureVariant("flash-shaped", 43, 16, RandomCheckpoint.Storage.FP8, 1, System.out::println);
        be = new HipBackend(WeightLoader.load(dir), BackendOptions.DEFAULTS.withF16KvVerify(true));
        assertEquals(43, be.config().numLayers);
    }

    @AfterAll
    static void close() {
        if (be != null) be.close();
    }

    @Test
    void at59933TokensTheF16PathKeepsTheControlsTokens() {
        check(59_933);
    }

    @Test
    void at122879TokensTheF16PathKeepsTheControlsTokens() {
        check(122_879);
    }

    static void check(int ctx) {
        int V = be.config().vocabSize;
        try (Sequence seq = be.newSequence(16)) {
            long t0 = System.nanoTime();
            be.fillSynthetic(seq, ctx - 1, ctx);
            SplittableRandom r = new SplittableRandom(ctx);
            be.setVerifyAttention(VerifyAttention.F16);
            float[] last = be.forward(seq, new int[]{r.nextInt(V)}, 0, 1, new int[]{0}, StepKind.DECODE);
            System.out.printf("synthetic context of %,d tokens in %.1f s%n", seq.length(), (System.nanoTime() - t0) / 1e9);
            assertEquals(ctx, seq.length());
            int next = acceptance(seq, argmax(last, 0, V), V, ctx);
            agreement(seq, next, V, r, ctx);
        }
    }

    /**
     * Copy-of-target speculative rounds on the f16 path from seq's state, first being the next token (not forwarded);
     * seq keeps what the rounds commit. Returns the token after them (not forwarded).
     */
    static int acceptance(Sequence seq, int first, int V, int ctx) {
        be.setVerifyAttention(VerifyAttention.F16);
        int pending = first;  // the next token, not yet forwarded by either sequence
        long offered = 0, accepted = 0, t0 = System.nanoTime();
        try (Sequence dft = be.fork(seq, 16)) {
            for (int round = 0; round < ACCEPT_ROUNDS; round++) {
                int[] d = new int[S - 1];
                int tok = pending;
                for (int i = 0; i < S - 1; i++) {
                    float[] lg = be.forward(dft, new int[]{tok}, 0, 1, new int[]{0}, StepKind.DECODE);
                    d[i] = tok = argmax(lg, 0, V);
                }
                int[] rows = new int[S];
                rows[0] = pending;
                System.arraycopy(d, 0, rows, 1, S - 1);
                float[] lg = be.forward(seq, rows, 0, S, new int[]{0, 1, 2, 3, 4}, StepKind.VERIFY);
                int a = 0;
                while (a < S - 1 && argmax(lg, a, V) == d[a]) a++;
                offered += S - 1;
                accepted += a;
                // keep the pending token and the accepted drafts; the draft forwarded pending and d[0 .. S-2)
                seq.rollback(S - 1 - a);
                dft.rollback((S - 1) - Math.min(a + 1, S - 1));
                if (a == S - 1) {
                    // every draft accepted: the draft has not forwarded d[S-2]; the bonus token comes next
                    be.forward(dft, d, S - 2, 1, new int[]{0}, StepKind.DECODE);
                }
                pending = argmax(lg, a, V);
            }
        }
        double rate = (double) accepted / offered;
        System.out.printf("f16 path at %,d tokens, copy-of-target draft: acceptance %.4f (%d of %d) in %.1f s%n", ctx, rate,
                accepted, offered, (System.nanoTime() - t0) / 1e9);
        assertTrue(rate >= 0.999, "copy-of-target acceptance on the f16 path at " + ctx + ": " + rate + " < 0.999");
        Map<AttentionKind, String> modes = be.verifyAttentionModes();
        assertTrue(modes.get(AttentionKind.CSA).startsWith("f16 tensor-core"), "CSA layers above the threshold: " + modes);
        assertTrue(modes.get(AttentionKind.HCA).startsWith("f16 tensor-core"), "HCA layers above the threshold: " + modes);
        return pending;
    }

    /** STEPS verify steps on both paths from the next token first; asserts the argmax agreement per row. */
    static void agreement(Sequence seq, int first, int V, SplittableRandom r, int ctx) {
        int[] toks = new int[S];
        toks[0] = first;
        for (int i = 1; i < S; i++) toks[i] = r.nextInt(V);
        long t0 = System.nanoTime();
        HipVerifyAttentionTest.Agreement ag = HipVerifyAttentionTest.compareVerifyPaths(be, seq, toks, STEPS, r, null);
        double rate = ag.rate();
        System.out.printf("full depth, verify attention at %,d..%,d tokens: %d of %d rows (%.4f %%) and %d of %d steps with the"
                        + " same argmax on both paths; max |logit diff| %.3g; %.1f s%n", ctx, seq.length(), ag.agree(), ag.rows(),
                100 * rate, ag.stepsSame(), ag.steps(), ag.maxLogitDiff(), (System.nanoTime() - t0) / 1e9);
        assertTrue(rate >= 0.9999, "argmax agreement at " + ctx + ": " + rate + " < 99.99 %");
        assertEquals(0.0, ag.maxLogitDiff(), "max |logit difference| between the paths at " + ctx);
    }

    static int argmax(float[] lg, int row, int V) {
        return HipVerifyAttentionTest.argmax(lg, row, V);
    }
}
