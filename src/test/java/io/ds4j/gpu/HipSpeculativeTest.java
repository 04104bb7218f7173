package io.ds4j.gpu;

import io.ds4j.engine.Backend;
import io.ds4j.engine.SpeculativeTest;
import io.ds4j.model.WeightLoader;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.engine.VerifyWidth;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.TreeMap;

import static org.junit.jupiter.api.Assertions.*;

/**
 * Speculative decoding on the GPU: greedy speculative output equals plain greedy output token for
 * token. The CPU backend's loop, sampler and drafts are reused unchanged; the target runs on {@link HipBackend}, and so
 * does the model draft (the fixture's FP8/FP4 twin). This holds because a row's logits do not depend on how many rows
 * a step verifies (tested bit for bit in HipBackendTest).
 */
@Tag("gpu")
class HipSpeculativeTest {
    static final Path TINY = Path.of("src/test/resources/fixtures/tiny-hf-bf16"), TWIN = Path.of("src/test/resources/fixtures/tiny-orig-fp8");

    /** One generation on target ({@link SpeculativeTest#generate}); adds its offered and accepted drafts to stats. */
    static int[] generate(Backend target, int[] prompt, SamplingParams p, DraftSource src, VerifyWidth w, long[] stats) {
        SpeculativeTest.Result r = SpeculativeTest.generate(target, prompt, p, src, w);
        if (stats != null && src != null) {
            stats[0] += r.stats().offered();
            stats[1] += r.stats().accepted();
        }
        return r.tokens();
    }

    @Test
    void greedySpeculativeEqualsPlainGreedyOnTheGpu() throws Exception {
        try (HipBackend target = new HipBackend(WeightLoader.load(TINY)); HipBackend twin = new HipBackend(WeightLoader.load(TWIN))) {
            SplittableRandom r = new SplittableRandom(11);
            SamplingParams p = SamplingParams.greedy(40);
            int V = target.config().vocabSize;
            Map<String, long[]> acc = new TreeMap<>();
            for (int i = 0; i < 16; i++) {
                int[] pr = new int[3 + r.nextInt(30)];
                for (int j = 0; j < pr.length; j++) pr[j] = i % 2 == 0 || j < 5 ? r.nextInt(V) : pr[j - 5]; // odd prompts repeat a phrase
                int[] plain = generate(target, pr, p, null, null, null);
                assertEquals(40, plain.length);
                for (int q : new int[]{1, 2, 4, 7})
                    for (DraftSource src : List.of(NgramDraft.source(), new ModelDraftSource(twin, "fp8-twin", 16))) {
                        long[] a = acc.computeIfAbsent(src.name() + " q=" + q, k -> new long[2]);
                        assertArrayEquals(plain, generate(target, pr, p, src, VerifyWidth.fixed(q), a),
                                "prompt " + i + " q=" + q + " draft " + src.name());
                    }
                assertArrayEquals(plain, generate(target, pr, p, NgramDraft.source(), VerifyWidth.parse("auto"), null), "adaptive, prompt " + i);
            }
            acc.forEach((k, a) -> System.out.printf("gpu greedy identity %s: %d offered, %d accepted (%.3f)%n", k, a[0], a[1], (double) a[1] / a[0]));
            assertTrue(acc.values().stream().allMatch(a -> a[0] > 0), "every draft source offered tokens");
        }
    }
}
