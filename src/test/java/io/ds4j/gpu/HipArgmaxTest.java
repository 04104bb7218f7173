package io.ds4j.gpu;

import io.ds4j.cpu.TestModelsAccess;
import io.ds4j.engine.BatchEntry;
import io.ds4j.engine.Sequence;
import io.ds4j.engine.StepKind;
import io.ds4j.engine.StepOutput;
import io.ds4j.model.TensorNames;
import io.ds4j.model.WeightLoader;
import io.ds4j.model.synth.Presets;
import io.ds4j.model.synth.RandomCheckpoint;
import io.ds4j.sampling.Sampler;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.Gpu.ptr;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.ds4j_argmax_rows;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.ds4j_argmax_rows_masked;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The device argmax ({@code ds4j_argmax_rows}, {@link HipBackend#stepArgmax}): the greedy token of every argmax-only
 * row equals {@link Sampler#argmax} over the logits the same step gives with full logits, for decode, verify and
 * prefill entries, alone (decode-step graphs) and batched, with the tokenizer's limit below V and mixed with entries
 * that want logits, among masks (a constrained greedy row: {@code ds4j_argmax_rows_masked}) or not; and the kernel's
 * tie and NaN policy against the host's on crafted rows, with and without masks.
 */
@Tag("gpu")
class HipArgmaxTest {
    @TempDir
    static Path tmp;

    /** Crafted rows: ties, NaN at index 0 and elsewhere, all −∞, −0 and +0, the maximum past the limit, random rows. */
    @Test
    void kernelMatchesHostArgmaxWithTiesAndNaN() {
        int V = 5000, limit = 4990;
        List<float[]> rows = new ArrayList<>();
        SplittableRandom r = new SplittableRandom(3);
        for (int k = 0; k < 6; k++) {
            float[] x = new float[V];
            for (int i = 0; i < V; i++) x[i] = (float) r.nextGaussian();
            rows.add(x);
        }
        rows.get(0)[17] = 9f;
        rows.get(0)[4000] = 9f; // a tie: the lower index
        rows.get(0)[33] = 9f;
        rows.get(1)[0] = Float.NaN; // NaN at 0 stays the answer
        rows.get(1)[10] = 50f;
        rows.get(2)[5] = Float.NaN; // NaN elsewhere never wins
        rows.get(2)[6] = 40f;
        rows.get(2)[700] = Float.NaN;
        java.util.Arrays.fill(rows.get(3), Float.NEGATIVE_INFINITY);
        rows.get(3)[2] = Float.NaN;
        java.util.Arrays.fill(rows.get(4), 0f);
        rows.get(4)[0] = -0f;
        rows.get(4)[1] = 0f; // −0 and +0 compare equal: index 0
        rows.get(5)[4995] = 100f; // past the limit: not seen
        rows.get(5)[123] = 8f;
        float[] flat = new float[rows.size() * V];
        for (int k = 0; k < rows.size(); k++) System.arraycopy(rows.get(k), 0, flat, k * V, V);
        try (Gpu gpu = Gpu.open(0)) {
            long x = gpu.uploadNew(flat, "argmax rows");
            long out = gpu.malloc(4L * rows.size(), "argmax out");
            try {
                for (int n : new int[]{limit, V, 1}) {
                    check(ds4j_argmax_rows(gpu.ctx(), ptr(x), V, rows.size(), n, ptr(out)), "argmax_rows");
                    int[] got = gpu.downloadInts(out, rows.size());
                    for (int k = 0; k < rows.size(); k++)
                        assertEquals(Sampler.argmax(flat, k * V, n), got[k], "row " + k + " below " + n);
                }
                assertEquals(17, Sampler.argmax(flat, 0, limit), "the host's own policy (lowest index on ties)");
                // among masks: every row's own random mask, the maxima and row 1's NaN at 0 cleared in some, one mask
                // that allows nothing, one that allows everything
                int W = (V + 63) / 64;
                long[] masks = new long[rows.size() * W];
                for (int i = 0; i < masks.length; i++) masks[i] = r.nextLong() & r.nextLong();
                masks[0] &= ~(1L << 17);             // row 0: the first of the tied maxima cleared: the next one wins
                masks[W] &= ~1L;                     // row 1: its NaN at 0 cleared: the scan goes on from -inf
                java.util.Arrays.fill(masks, 2 * W, 3 * W, 0L);   // row 2: nothing allowed: 0
                java.util.Arrays.fill(masks, 4 * W, 5 * W, -1L);  // row 4: everything
                long m = gpu.malloc(8L * masks.length, "argmax masks");
                try {
                    gpu.upload(m, masks);
                    for (int n : new int[]{limit, V, 1}) {
                        check(ds4j_argmax_rows_masked(gpu.ctx(), ptr(x), V, rows.size(), n, ptr(m), (long) W, ptr(out)), "argmax_rows_masked");
                        int[] got = gpu.downloadInts(out, rows.size());
                        for (int k = 0; k < rows.size(); k++)
                            assertEquals(Sampler.argmax(flat, k * V, n, java.util.Arrays.copyOfRange(masks, k * W, (k + 1) * W)),
                                    got[k], "masked row " + k + " below " + n);
                    }
                } finally {
                    gpu.free(m);
                }
            } finally {
                gpu.free(x);
                gpu.free(out);
            }
        }
    }

    /**
     * Two sets of sequences with the same history: one stepped with full logits, the other with argmax-only entries;
     * every argmax-only row's id equals the host's argmax of the matching logits row (the step is deterministic and
     * batch-invariant, so the logits are the same bits), and the entries that want logits get the same logits.
     */
    @Test
    void deviceArgmaxEqualsHostArgmaxForDecodeVerifyPrefillAndBatches() throws Exception {
        Path dir = tmp.resolve("tiny-bf16");
        new RandomCheckpoint(Presets.get("tiny"), 11, TensorNames.Scheme.HF, RandomCheckpoint.Storage.BF16).write(dir);
        try (HipBackend g = new HipBackend(WeightLoader.load(dir))) {
            compare(g, "tiny");
        }
        try (HipBackend g = new HipBackend(TestModelsAccess.random(TestModelsAccess.microConfig(), 42))) {
            compare(g, "micro");
        }
    }

    private static void compare(HipBackend g, String what) {
        int V = g.config().vocabSize, limit = V - 37;
        SplittableRandom r = new SplittableRandom(5);
        int E = 6;
        Sequence[] full = new Sequence[E], ids = new Sequence[E];
        for (int e = 0; e < E; e++) {
            full[e] = g.newSequence(16);
            ids[e] = g.newSequence(16);
        }
        try {
            int checkedRows = 0, maskedRows = 0;
            for (int round = 0; round < 8; round++) {
                // round 0: prefill chunks of different lengths (last row wanted); then decode and verify steps,
                // alone (rounds 1-2, single-entry steps take the decode graphs) and batched (the rest)
                List<int[]> toks = new ArrayList<>();
                List<int[]> rows = new ArrayList<>();
                List<StepKind> kinds = new ArrayList<>();
                for (int e = 0; e < E; e++) {
                    int S = round == 0 ? 3 + 5 * e : e % 2 == 0 ? 1 : 1 + (e + round) % 4;
                    int[] t = new int[S];
                    for (int i = 0; i < S; i++) t[i] = r.nextInt(V);
                    toks.add(t);
                    StepKind k = round == 0 ? StepKind.PREFILL : S == 1 ? StepKind.DECODE : StepKind.VERIFY;
                    kinds.add(k);
                    int[] want = k == StepKind.PREFILL ? new int[]{S - 1} : java.util.stream.IntStream.range(0, S).toArray();
                    rows.add(want);
                }
                List<List<Integer>> groups = new ArrayList<>();
                if (round == 1 || round == 2) for (int e = 0; e < E; e++) groups.add(List.of(e));
                else groups.add(java.util.stream.IntStream.range(0, E).boxed().toList());
                for (List<Integer> grp : groups) {
                    List<BatchEntry> a = new ArrayList<>(), b = new ArrayList<>();
                    for (int e : grp) {
                        a.add(new BatchEntry(full[e], toks.get(e), rows.get(e), kinds.get(e)));
                        // entry 3 keeps its logits on the argmax side (a mixed batch); entry 5 takes the whole vocabulary in odd
                        // rounds (limits differ: one launch per entry), the others share one limit (one launch)
                        int below = e == 3 && round >= 3 ? 0 : e == 5 && round % 2 == 1 ? V : limit;
                        // entries 1 and 4 choose among masks (a constrained greedy request's rows): random sets, a
                        // row without one, a mask shorter than the vocabulary's words
                        long[][] masks = null;
                        if (below > 0 && (e == 1 || e == 4)) {
                            masks = new long[rows.get(e).length][];
                            for (int i = 0; i < masks.length; i++) {
                                if (i == 1) continue;
                                long[] mk = new long[i == 2 ? Math.max(1, (V + 63) / 64 - 1) : (V + 63) / 64];
                                for (int w = 0; w < mk.length; w++) mk[w] = r.nextLong() & r.nextLong();
                                masks[i] = mk;
                            }
                        }
                        b.add(new BatchEntry(ids[e], toks.get(e), rows.get(e), kinds.get(e), below, null, masks));
                    }
                    float[][] lg = g.step(a);
                    StepOutput o = g.stepArgmax(b);
                    for (int k = 0; k < grp.size(); k++) {
                        BatchEntry be = b.get(k);
                        if (!be.argmaxOnly()) {
                            assertNull(o.argmax()[k]);
                            assertArrayEquals(lg[k], o.logits()[k], what + ": logits of a mixed batch's logits entry");
                            continue;
                        }
                        assertNull(o.logits()[k], what + ": an argmax-only entry gets no logits");
                        int[] got = o.argmax()[k];
                        assertEquals(be.logitRows().length, got.length);
                        for (int i = 0; i < got.length; i++, checkedRows++) {
                            long[] mk = be.argmaxMasks() == null ? null : be.argmaxMasks()[i];
                            if (mk != null) maskedRows++;
                            assertEquals(mk == null ? Sampler.argmax(lg[k], i * V, be.argmaxBelow())
                                            : Sampler.argmax(lg[k], i * V, be.argmaxBelow(), mk), got[i],
                                    what + ": round " + round + ", entry " + grp.get(k) + " (" + be.kind() + "), row " + i);
                        }
                    }
                }
                for (int e = 0; e < E; e++) assertEquals(full[e].length(), ids[e].length());
            }
            assertTrue(checkedRows > 50 && maskedRows > 10, "rows compared: " + checkedRows + ", among masks " + maskedRows);
        } finally {
            for (int e = 0; e < E; e++) {
                full[e].close();
                ids[e].close();
            }
        }
    }
}
