package io.ds4j.engine;

import io.ds4j.sampling.SamplingParams;
import io.ds4j.speculative.MtpDraftSource;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.SplittableRandom;

import static org.junit.jupiter.api.Assertions.*;

/**
 * The MTP batching checks shared by the CPU test ({@link MtpBatchTest}) and the GPU test ({@code HipMtpTest}): batched
 * MTP steps equal each state stepped alone bit for bit, and 16 MTP requests give the same tokens alone and through
 * one scheduler.
 */
public final class MtpBatchRuns {
    private MtpBatchRuns() {}

    /**
     * E requests, each with two identical targets (A batched, B alone) and an MTP state on each; every tick one batched
     * step over all A states (each a start or a chained step, by its own progress) and each B state alone, compared bit
     * for bit; a request whose proposal is complete runs a verify-like target step (same on A and B: accept a random
     * prefix of random rows, roll back the rest) and starts a new proposal at the next tick.
     */
    public static void batchedEqualsAlone(Backend b, int E, int ticks, long seed) {
        int V = b.config().vocabSize;
        SplittableRandom r = new SplittableRandom(seed);
        MtpHead head = b.mtp();
        int[][] ctx = new int[E][400];
        int[] len = new int[E], q = new int[E], k = new int[E], tok = new int[E];
        Sequence[] A = new Sequence[E], B = new Sequence[E];
        MtpState[] SA = new MtpState[E], SB = new MtpState[E];
        try {
            for (int i = 0; i < E; i++) {
                len[i] = 2 + (i * 13) % 40;
                for (int j = 0; j < len[i]; j++) ctx[i][j] = r.nextInt(V);
                A[i] = b.newSequence(16);
                B[i] = b.newSequence(16);
                SA[i] = head.open(A[i], 16);
                SB[i] = head.open(B[i], 16);
                b.forward(A[i], ctx[i], 0, len[i] - 1, new int[0]);
                b.forward(B[i], ctx[i], 0, len[i] - 1, new int[0]);
                q[i] = 1 + r.nextInt(5);
            }
            int mixed = 0;
            for (int t = 0; t < ticks; t++) {
                List<Integer> order = new ArrayList<>();
                for (int i = 0; i < E; i++) order.add(i);
                Collections.shuffle(order, new Random(seed + t));
                List<MtpHead.Step> steps = new ArrayList<>();
                for (int i : order)
                    steps.add(k[i] == 0 ? MtpHead.Step.start(SA[i], ctx[i], len[i]) : MtpHead.Step.next(SA[i], tok[i]));
                if (steps.stream().anyMatch(MtpHead.Step::isStart) && !steps.stream().allMatch(MtpHead.Step::isStart)) mixed++;
                float[][] got = head.step(steps);
                for (int o = 0; o < E; o++) {
                    int i = order.get(o);
                    float[] alone = k[i] == 0 ? SB[i].start(ctx[i], len[i]) : SB[i].next(tok[i]);
                    assertArrayEquals(alone, got[o], "tick " + t + ", request " + i + (k[i] == 0 ? " start" : " chained step " + k[i])
                            + " at length " + len[i]);
                    tok[i] = argmax(got[o]);
                    if (++k[i] < q[i]) continue;
                    // the proposal is complete: a verify step on both targets, a random prefix accepted
                    int[] rows = new int[q[i] + 1];
                    rows[0] = ctx[i][len[i] - 1];
                    for (int j = 1; j <= q[i]; j++) rows[j] = r.nextInt(V);
                    b.forward(A[i], rows, 0, rows.length, new int[0]);
                    b.forward(B[i], rows, 0, rows.length, new int[0]);
                    int acc = r.nextInt(q[i] + 1);
                    A[i].rollback(q[i] - acc);
                    B[i].rollback(q[i] - acc);
                    for (int j = 1; j <= acc; j++) ctx[i][len[i]++] = rows[j];
                    ctx[i][len[i]++] = r.nextInt(V);
                    k[i] = 0;
                    q[i] = 1 + r.nextInt(5);
                }
            }
            assertTrue(mixed > 0, "some batched steps mixed starts and chained steps");
        } finally {
            for (int i = 0; i < E; i++) {
                if (SA[i] != null) SA[i].close();
                if (SB[i] != null) SB[i].close();
                if (A[i] != null) A[i].close();
                if (B[i] != null) B[i].close();
            }
        }
    }

    /**
     * 16 requests with the MTP draft (prompts of 2..70 tokens, greedy and seeded sampled, widths 1..4 and adaptive),
     * alone and then together through one scheduler: the same tokens both ways; greedy ones equal plain greedy output;
     * the MTP steps of at least 8 requests ran as one batched MTP step.
     */
    public static void sixteenRequestsAloneAndBatched(Backend b) {
        int V = b.config().vocabSize;
        MtpDraftSource mtp = new MtpDraftSource(b, 16);
        SplittableRandom rnd = new SplittableRandom(7);
        List<BatchInvarianceRuns.Req> reqs = new ArrayList<>();
        for (int i = 0; i < 16; i++) {
            int[] p = new int[2 + (i * 29) % 69];
            for (int j = 0; j < p.length; j++) p[j] = i % 3 == 0 && j >= 5 ? p[j - 5] : rnd.nextInt(V);
            int max = 16 + i % 6;
            SamplingParams sp = i % 2 == 0 ? SamplingParams.greedy(max) : SamplingParams.sampled(0.9, 0, 0.95, 0, 500 + i, max);
            reqs.add(new BatchInvarianceRuns.Req(p, sp, mtp, i % 5 == 0 ? "auto" : Integer.toString(1 + i % 4)));
        }
        int chunk = 8;
        List<int[]> alone = new ArrayList<>(), plain = new ArrayList<>();
        for (BatchInvarianceRuns.Req r : reqs) {
            List<Integer> out = new ArrayList<>();
            Generation g = BatchInvarianceRuns.open(b, r, chunk, out);
            while (g.step()) { }
            alone.add(BatchInvarianceRuns.tokens(out));
            out = new ArrayList<>();
            g = BatchInvarianceRuns.open(b, new BatchInvarianceRuns.Req(r.prompt(), r.params(), null, r.width()), chunk, out);
            while (g.step()) { }
            plain.add(BatchInvarianceRuns.tokens(out));
        }
        Scheduler<Integer> sch = new Scheduler<>(b, new Scheduler.Limits(256, 64));
        List<List<Integer>> outs = new ArrayList<>();
        for (int i = 0; i < reqs.size(); i++) {
            List<Integer> out = new ArrayList<>();
            outs.add(out);
            sch.add(i, BatchInvarianceRuns.open(b, reqs.get(i), Scheduler.prefillChunk(chunk, sch.limits()), out));
        }
        int widestMtp = 0, ticks = 0;
        long mtpForwards = 0;
        while (!sch.isEmpty() && ticks++ < 10_000) {
            Scheduler.Tick<Integer> t = sch.tick();
            assertEquals(java.util.Map.of(), t.failed());
            for (int n : t.mtpSteps()) widestMtp = Math.max(widestMtp, n);
            mtpForwards += t.mtpSteps().size();
        }
        for (int i = 0; i < reqs.size(); i++) {
            BatchInvarianceRuns.Req r = reqs.get(i);
            int[] got = BatchInvarianceRuns.tokens(outs.get(i));
            assertTrue(got.length > 0);
            assertArrayEquals(alone.get(i), got, "request " + i + " (" + r.label() + ")");
            if (r.params().isGreedy()) assertArrayEquals(plain.get(i), got, "request " + i + " (" + r.label() + "): plain greedy");
        }
        assertTrue(widestMtp >= 8, "the MTP steps of at least 8 requests ran batched, widest " + widestMtp);
        System.out.printf("MTP batching: %d requests, %d ticks, %d batched MTP steps, widest %d requests%n",
                reqs.size(), ticks, mtpForwards, widestMtp);
    }

    private static int argmax(float[] a) {
        int m = 0;
        for (int i = 1; i < a.length; i++) if (a[i] > a[m]) m = i;
        return m;
    }
}
