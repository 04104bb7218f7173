package io.ds4j.gpu;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.Gpu.ptr;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The Lightning Indexer's kernels at long context (V4-Flash shapes: H_I 64, d_I 128, top 512, ratio 4).
 *
 * <p>Top-k: rows up to 300,000 entries (1.2M tokens) with many ties at the threshold, NaN, -0 / +0 and infinities
 * equal a host reference (larger key first, ties to the lower index, NaN lowest, picks in index order) on the
 * many-blocks path (decode, verify, several sequences, launch shapes from bounds) and the one-block path (short rows).
 *
 * <p>Scores: the decode (one query), verify (five) and prefill (70) calls give each (query, key) the same bits; so do
 * the F32 copies of the keys, several sequences in one call and launch shapes from bounds; every score is within a
 * bound derived from the kernels' roundings of a double reference.
 */
@Tag("gpu")
class GpuIndexerTest {
    static final int HI = 64, dI = 128, K = 512, m = 4;
    static Gpu gpu;
    static final List<Long> allocs = new ArrayList<>();

    @BeforeAll
    static void open() {
        gpu = Gpu.open(0);
        System.out.println("GPU: " + gpu + "; DS4J_INDEXER_TC=" + System.getenv("DS4J_INDEXER_TC") + ", DS4J_TOPK_MULTI="
                + System.getenv("DS4J_TOPK_MULTI"));
    }

    @AfterAll
    static void close() {
        for (long p : allocs) gpu.free(p);
        gpu.close();
    }

    static long alloc(long bytes) {
        long p = gpu.malloc(Math.max(256, bytes), "test");
        allocs.add(p);
        return p;
    }

    static long dev(float[] v) {
        long p = alloc(4L * v.length);
        gpu.upload(p, v);
        return p;
    }

    static long dev(short[] v) {
        long p = alloc(2L * v.length);
        gpu.upload(p, v);
        return p;
    }

    static long dev(SeqViews v) {
        long p = alloc(v.bytes());
        gpu.upload(p, v.host());
        return p;
    }

    /** The kernels' order: larger float larger key, -0 == +0, NaN below everything. */
    static long orderKey(float f) {
        if (Float.isNaN(f)) return 0;
        if (f == 0f) f = 0f;
        int u = Float.floatToRawIntBits(f);
        return (u < 0 ? ~u : u | 0x80000000) & 0xffffffffL;
    }

    /** The K picks of v[off .. off + avail): larger key first, ties to the lower index; returned in index order. */
    static int[] reference(float[] v, int off, int avail, int K) {
        long[] order = new long[avail];
        // (descending key, index) in the high and low words; the sign bit flipped so that the signed sort orders the
        // words as unsigned numbers (a key gap of 2^31 or more would otherwise sort negative, first)
        for (int e = 0; e < avail; e++) order[e] = (((0xffffffffL - orderKey(v[off + e])) << 32) | e) ^ Long.MIN_VALUE;
        Arrays.sort(order);
        int[] p = new int[K];
        for (int i = 0; i < K; i++) p[i] = (int) order[i];
        Arrays.sort(p);
        return p;
    }

    /** Scores with few distinct values (ties at any threshold), some NaN, signed zeros and infinities. */
    static float[] tiedScores(SplittableRandom r, int n) {
        float[] pool = {0f, -0f, 0.25f, 0.5f, -1f, 2f, Float.POSITIVE_INFINITY, Float.NEGATIVE_INFINITY, Float.NaN};
        float[] v = new float[n];
        for (int i = 0; i < n; i++)
            v[i] = r.nextInt(4) == 0 ? (float) Math.round(r.nextGaussian() * 8) / 8 : pool[r.nextInt(pool.length)];
        return v;
    }

    @Test
    void topKOfLongRowsEqualsTheReference() {
        SplittableRandom r = new SplittableRandom(31);
        // {N0, S, K}: decode and verify at 1.2M tokens, a row of only NaN and one value, picks spanning many chunks,
        // rows just over 8,192 entries (the many-blocks threshold) and a short row (one block per row)
        long[][] cases = {{1_199_995, 1, K}, {1_199_990, 5, K}, {400_000, 2, 4096}, {32_800, 3, K}, {20_000, 5, K}};
        for (long[] c : cases) {
            long N0 = c[0];
            int S = (int) c[1], k = (int) c[2];
            int ld = (int) ((N0 + S) / m) + 3;
            float[] v = tiedScores(r, S * ld);
            if (N0 == 400_000) for (int i = 0; i < v.length; i++) v[i] = i % 7 == 0 ? Float.NaN : 1f;
            for (int s = 0; s < S; s++) // past the row's available set: a read would pick these
                for (int e = (int) ((N0 + s + 1) / m); e < ld; e++) v[s * ld + e] = Float.POSITIVE_INFINITY;
            long dv = dev(v), sel = alloc(4L * S * k);
            gpu.memset(sel, 0xFF, 4L * S * k);
            check(ds4j_indexer_topk(gpu.ctx(), ptr(dv), ld, N0, S, m, k, ptr(sel)), "indexer_topk");
            int[] got = gpu.downloadInts(sel, S * k);
            for (int s = 0; s < S; s++) {
                int avail = (int) ((N0 + s + 1) / m);
                assertArrayEquals(reference(v, s * ld, avail, k), Arrays.copyOfRange(got, s * k, s * k + k),
                        "top-" + k + " of " + avail + " entries, row " + s);
            }
            System.out.printf("top-%d of %,d entries x %d rows: equal to the reference%n", k, ld - 3, S);
        }
    }

    @Test
    void topKOverSeveralSequencesEqualsTheReferenceWithAndWithoutBounds() {
        SplittableRandom r = new SplittableRandom(32);
        long[] N0 = {1_000_000, 3000, 250_000, 10};
        int[] S = {1, 5, 5, 2};
        int R = 0;
        long most = 0;
        for (int e = 0; e < N0.length; e++) {
            R += S[e];
            most = Math.max(most, (N0[e] + S[e]) / m);
        }
        int ld = (int) most + 1;
        float[] v = tiedScores(r, R * ld);
        long dv = dev(v);
        try (Arena arena = Arena.ofConfined()) {
            SeqViews views = new SeqViews(arena, N0.length);
            for (int e = 0, r0 = 0; e < N0.length; r0 += S[e], e++) views.set(e, N0[e], S[e], r0, 0, 0, 0, 0);
            long dViews = dev(views);
            for (int bounds = 0; bounds < 2; bounds++) {
                long sel = alloc(4L * R * K);
                gpu.memset(sel, 0xFF, 4L * R * K);
                check(ds4j_seqs_bounds(gpu.ctx(), bounds, 0, 0), "seqs_bounds");
                try {
                    check(ds4j_indexer_topk_seqs(gpu.ctx(), views.host(), ptr(dViews), N0.length, ptr(dv), ld, m, K, ptr(sel)), "topk_seqs");
                } finally {
                    check(ds4j_seqs_bounds(gpu.ctx(), 0, 0, 0), "seqs_bounds off");
                }
                int[] got = gpu.downloadInts(sel, R * K);
                for (int e = 0, row = 0; e < N0.length; e++)
                    for (int s = 0; s < S[e]; s++, row++) {
                        int avail = (int) ((N0[e] + s + 1) / m);
                        int[] want = new int[K];
                        if (avail > K) want = reference(v, row * ld, avail, K);
                        else Arrays.fill(want, -1); // untouched
                        assertArrayEquals(want, Arrays.copyOfRange(got, row * K, row * K + K),
                                "sequence " + e + " row " + s + " (" + avail + " entries), bounds " + bounds);
                    }
            }
        }
    }

    /** A CSA layer's indexer inputs: R query rows, keys for N0 + R tokens (F16 and their F32 copies). */
    static final class Inputs {
        final long N0;
        final int R, total;
        final float[] qi, wt;
        final short[] keys;
        final long dq, dw, dk, dk32;

        Inputs(SplittableRandom r, long N0, int R) {
            this.N0 = N0;
            this.R = R;
            total = (int) ((N0 + R) / m);
            qi = new float[R * HI * dI];
            for (int row = 0; row < R * HI; row++) {
                double mag = row % 3 == 0 ? 1e-3 : row % 3 == 1 ? 1 : 300; // each row scaled into F16 on its own
                for (int i = 0; i < dI; i++) qi[row * dI + i] = (float) (r.nextGaussian() * mag);
            }
            wt = new float[R * HI];
            for (int i = 0; i < wt.length; i++) wt[i] = (float) r.nextGaussian();
            keys = new short[total * dI];
            for (int i = 0; i < keys.length; i++) keys[i] = Float.floatToFloat16((float) r.nextGaussian());
            dq = dev(qi);
            dw = dev(wt);
            dk = dev(keys);
            dk32 = alloc(4L * keys.length);
            check(ds4j_f16_to_f32(gpu.ctx(), ptr(dk), ptr(dk32), keys.length), "f16_to_f32");
        }

        /** Scores of rows s0 .. s0 + S - 1 (at positions N0 + s0 ..) as one call, [S, total]. */
        float[] scores(int s0, int S, boolean f32, boolean tc) {
            long out = alloc(4L * S * total);
            gpu.memset(out, 0xFF, 4L * S * total);
            float ws = (float) (1 / Math.sqrt(HI)), ss = (float) (1 / Math.sqrt(dI));
            long q = dq + 4L * s0 * HI * dI, w = dw + 4L * s0 * HI;
            int rc = f32 ? ds4j_indexer_scores_f32(gpu.ctx(), ptr(q), ptr(w), ptr(dk32), N0 + s0, S, m, HI, dI, K, ws, ss, ptr(out), total)
                    : tc ? ds4j_indexer_scores_tc(gpu.ctx(), ptr(q), ptr(w), ptr(dk), N0 + s0, S, m, HI, dI, K, ws, ss, ptr(out), total)
                    : ds4j_indexer_scores(gpu.ctx(), ptr(q), ptr(w), ptr(dk), N0 + s0, S, m, HI, dI, K, ws, ss, ptr(out), total);
            check(rc, "indexer scores");
            return gpu.downloadFloats(out, S * total);
        }
    }

    @Test
    void decodeVerifyAndPrefillScoresAreBitIdenticalAndWithinTheirBound() {
        SplittableRandom r = new SplittableRandom(33);
        Inputs in = new Inputs(r, 40_003, 70);
        int T = in.total;
        boolean tcEverywhere = !"0".equals(System.getenv("DS4J_INDEXER_TC"));
        float[] prefill = in.scores(0, 70, false, false);
        float[] verify = in.scores(0, 5, false, false);
        assertArrayEquals(Arrays.copyOfRange(prefill, 0, 5 * T), verify, "verify step (5 rows) vs the same rows of a 70-row call");
        float[] verify32 = in.scores(0, 5, true, false);
        assertArrayEquals(verify, verify32, "verify step: F32 copies of the keys vs the F16 keys");
        if (tcEverywhere)
            assertArrayEquals(prefill, in.scores(0, 70, false, true), "ds4j_indexer_scores vs ds4j_indexer_scores_tc");
        for (int s = 0; s < 5; s++) {
            float[] one = in.scores(s, 1, false, false);
            assertArrayEquals(Arrays.copyOfRange(verify, s * T, (s + 1) * T), one, "query " + s + " alone (decode) vs its verify row");
            assertArrayEquals(one, in.scores(s, 1, true, false), "decode of query " + s + ": F32 copies vs F16 keys");
        }
        // the bound: q = hi + lo to 2^-22; the MMA's F32 accumulation over d_I products (2^-23 a step, truncation
        // allowed); then the scaling back (exact), two products and H_I sums in F32 (2^-24 each)
        double bound = 0x1p-22 + (dI + 2) * 0x1p-23 + (HI + 3) * 0x1p-24;
        double worst = 0;
        float ws = (float) (1 / Math.sqrt(HI)), ss = (float) (1 / Math.sqrt(dI));
        for (int s : new int[]{0, 4, 40, 69}) {
            int avail = (int) ((in.N0 + s + 1) / m);
            for (int e = 0; e < T; e += (e < avail - 50 ? 37 : 1)) {
                float got = prefill[s * T + e];
                if (e >= avail) {
                    assertEquals(-1, Float.floatToRawIntBits(got), "untouched s=" + s + " e=" + e);
                    continue;
                }
                double ref = 0, mag = 0;
                for (int h = 0; h < HI; h++) {
                    double d = 0, dm = 0;
                    for (int c = 0; c < dI; c++) {
                        double p = (double) in.qi[(s * HI + h) * dI + c] * Float.float16ToFloat(in.keys[e * dI + c]);
                        d += p;
                        dm += Math.abs(p);
                    }
                    double w = in.wt[s * HI + h] * ws;
                    ref += w * Math.max(d, 0) * ss;
                    mag += Math.abs(w) * dm * ss;
                }
                double err = Math.abs(got - ref) / (mag + 1e-30);
                worst = Math.max(worst, err);
                assertTrue(err <= bound, "s=" + s + " e=" + e + ": " + got + " vs " + ref + " (relative " + err + " > " + bound + ")");
            }
        }
        System.out.printf("indexer scores over %,d keys: decode = verify = prefill rows, F32 copies = F16 keys; worst %.2e of the"
                + " magnitude (bound %.2e)%n", T, worst, bound);
    }

    @Test
    void scoresOfSeveralSequencesEqualOneCallPerSequenceWithAndWithoutBounds() {
        SplittableRandom r = new SplittableRandom(34);
        Inputs a = new Inputs(r, 60_000, 5), b = new Inputs(r, 9_000, 1);
        int R = 6;
        long ld = Math.max(a.total, b.total);
        long qi = alloc(4L * R * HI * dI), wt = alloc(4L * R * HI);
        gpu.upload(qi, a.qi);
        gpu.upload(qi + 4L * 5 * HI * dI, b.qi);
        gpu.upload(wt, a.wt);
        gpu.upload(wt + 4L * 5 * HI, b.wt);
        float[] wantA = a.scores(0, 5, false, false), wantB = b.scores(0, 1, false, false);
        float ws = (float) (1 / Math.sqrt(HI)), ss = (float) (1 / Math.sqrt(dI));
        try (Arena arena = Arena.ofConfined()) {
            SeqViews views = new SeqViews(arena, 2);
            views.set(0, a.N0, 5, 0, 0, 0, a.dk, 0);
            views.set(1, b.N0, 1, 5, 0, 0, b.dk, 0);
            long dViews = dev(views);
            for (int bounds = 0; bounds < 2; bounds++) {
                long out = alloc(4L * R * ld);
                gpu.memset(out, 0xFF, 4L * R * ld);
                check(ds4j_seqs_bounds(gpu.ctx(), bounds, 0, 0), "seqs_bounds");
                try {
                    check(ds4j_indexer_scores_seqs(gpu.ctx(), views.host(), ptr(dViews), 2, ptr(qi), ptr(wt), m, HI, dI, K, ws, ss, ptr(out), ld),
                            "indexer_scores_seqs");
                } finally {
                    check(ds4j_seqs_bounds(gpu.ctx(), 0, 0, 0), "seqs_bounds off");
                }
                float[] got = gpu.downloadFloats(out, (int) (R * ld));
                for (int s = 0; s < 5; s++)
                    assertArrayEquals(Arrays.copyOfRange(wantA, s * a.total, (s + 1) * a.total),
                            Arrays.copyOfRange(got, (int) (s * ld), (int) (s * ld + a.total)), "sequence 0 row " + s + ", bounds " + bounds);
                assertArrayEquals(wantB, Arrays.copyOfRange(got, (int) (5 * ld), (int) (5 * ld + b.total)), "sequence 1, bounds " + bounds);
            }
        }
    }
}
