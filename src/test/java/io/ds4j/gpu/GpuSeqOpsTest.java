package io.ds4j.gpu;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.TreeSet;

import static io.ds4j.gpu.Gpu.check;
import static io.ds4j.gpu.Gpu.ptr;
import static io.ds4j.gpu.bindings.ds4j_gpu_h.*;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The library's several-sequence functions ({@code *_seqs}, {@code *_at}) against the single-sequence ones they stand
 * for, bit for bit: sequences of different lengths and step sizes (decode 1, verify 5, a prefill chunk), across a
 * compressor boundary and past the indexer's top-k, for sliding, CSA and HCA layers.
 */
@Tag("gpu")
class GpuSeqOpsTest {
    static Gpu gpu;
    static final List<Long> allocs = new ArrayList<>();
    static final Arena ARENA = Arena.ofShared();
    static final int H = 4, d = 64, W = 8, ROPE = 16, K = 6, HI = 4, dI = 32;
    /** (N0, S) of the sequences of the step: decode, verify, prefill chunk, decode on a compressor boundary. */
    static final long[] N0 = {57, 130, 0, 31, 300};
    static final int[] S = {1, 5, 37, 1, 5};

    @BeforeAll
    static void open() {
        gpu = Gpu.open(0);
    }

    @AfterAll
    static void close() {
        for (long p : allocs) gpu.free(p);
        gpu.close();
    }

    static long alloc(long bytes) {
        long p = gpu.malloc(Math.max(16, bytes), "test");
        allocs.add(p);
        gpu.memset(p, 0, Math.max(16, bytes));
        return p;
    }

    static long dev(float[] v) {
        long p = alloc(4L * v.length);
        gpu.upload(p, v);
        return p;
    }

    static long dev(int[] v) {
        long p = alloc(4L * v.length);
        gpu.upload(p, v);
        return p;
    }

    static long dev(short[] v) {
        long p = alloc(2L * v.length);
        gpu.upload(p, v);
        return p;
    }

    static long dev(long[] v) {
        long p = alloc(8L * v.length);
        gpu.upload(p, v);
        return p;
    }

    static long devViews(SeqViews v) {
        long p = alloc(v.bytes());
        gpu.upload(p, v.host());
        return p;
    }

    static float[] gauss(SplittableRandom r, int n) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = (float) (r.nextGaussian());
        return v;
    }

    static short[] f16(SplittableRandom r, int n) {
        short[] v = new short[n];
        for (int i = 0; i < n; i++) v[i] = Float.floatToFloat16((float) r.nextGaussian());
        return v;
    }

    static float[] f16Rounded(SplittableRandom r, int n) {
        float[] v = gauss(r, n);
        for (int i = 0; i < n; i++) v[i] = Float.float16ToFloat(Float.floatToFloat16(v[i]));
        return v;
    }

    /** RoPE inverse frequencies 10000^(-2i/ROPE). */
    static float[] invFreq() {
        float[] f = new float[ROPE / 2];
        for (int i = 0; i < f.length; i++) f[i] = (float) Math.pow(10000.0, -2.0 * i / ROPE);
        return f;
    }

    static int rows() {
        int R = 0;
        for (int s : S) R += s;
        return R;
    }

    static int row0(int e) {
        int r = 0;
        for (int i = 0; i < e; i++) r += S[i];
        return r;
    }

    @Test
    void attentionOverSeveralSequencesEqualsOneCallPerSequence() {
        attentionSeqsEqualOneCallPerSequence(7, H, d, W, K, 16, N0, S);
    }

    /**
     * V4's attention shape (64 heads of 512, window 128, CSA ratio 4 with 512 picks, HCA ratio 128) at long contexts,
     * where a query's keys are cut into several key ranges (up to ~8,300 rows at 1M tokens): the batched call and the
     * single-sequence calls make the same cuts, so they agree bit for bit.
     */
    @Test
    void attentionOverSeveralLongSequencesEqualsOneCallPerSequence() {
        attentionSeqsEqualOneCallPerSequence(17, 64, 512, 128, 512, 128, new long[]{59_928, 4_095, 1_048_571, 200, 122_874},
                new int[]{5, 1, 1, 5, 3});
    }

    static void attentionSeqsEqualOneCallPerSequence(long seed, int H, int d, int W, int K, int mHca, long[] N0, int[] S) {
        SplittableRandom r = new SplittableRandom(seed);
        int R = 0;
        int[] row0s = new int[S.length];
        for (int e = 0; e < S.length; e++) {
            row0s[e] = R;
            R += S[e];
        }
        int cap = W - 1 + 16;
        for (int kind : new int[]{DS4J_ATTN_SLIDING(), DS4J_ATTN_CSA(), DS4J_ATTN_HCA()}) {
            int m = kind == DS4J_ATTN_CSA() ? 4 : kind == DS4J_ATTN_HCA() ? mHca : 0;
            long q = dev(gauss(r, R * H * d)), kv = dev(f16Rounded(r, R * d)), sinks = dev(gauss(r, H));
            int[] selAll = new int[R * K];
            long[] ring = new long[N0.length], entries = new long[N0.length];
            SeqViews v = new SeqViews(ARENA, N0.length);
            for (int e = 0; e < N0.length; e++) {
                ring[e] = dev(f16(r, cap * d));
                int count = m == 0 ? 0 : (int) ((N0[e] + S[e]) / m);
                entries[e] = count == 0 ? 0 : dev(f16(r, count * d));
                for (int s = 0; s < S[e]; s++) {
                    long avail = m == 0 ? 0 : (N0[e] + s + 1) / m;
                    if (kind == DS4J_ATTN_CSA() && avail > K) {
                        TreeSet<Integer> pick = new TreeSet<>();
                        while (pick.size() < K) pick.add(r.nextInt((int) avail));
                        int j = 0;
                        for (int p : pick) selAll[(row0s[e] + s) * K + j++] = p;
                    }
                }
                v.set(e, N0[e], S[e], row0s[e], ring[e], 0, entries[e], cap);
            }
            long sel = dev(selAll), out = alloc(4L * R * H * d), views = devViews(v);
            float scale = (float) (1 / Math.sqrt(d));
            check(ds4j_attention_seqs(gpu.ctx(), v.host(), ptr(views), N0.length, ptr(q), ptr(kv), kind, m, ptr(sel), K,
                    ptr(sinks), H, d, W, scale, ptr(out)), "attention_seqs");
            float[] batched = gpu.downloadFloats(out, R * H * d);
            for (int e = 0; e < N0.length; e++) {
                long o1 = alloc(4L * S[e] * H * d), r0 = row0s[e];
                check(ds4j_attention(gpu.ctx(), ptr(q + 4 * r0 * H * d), ptr(kv + 4 * r0 * d), ptr(ring[e]), cap, ptr(entries[e]),
                        kind, m, ptr(sel + 4 * r0 * K), K, ptr(sinks), N0[e], S[e], H, d, W, scale, ptr(o1)), "attention");
                float[] one = gpu.downloadFloats(o1, S[e] * H * d);
                float[] part = java.util.Arrays.copyOfRange(batched, (int) r0 * H * d, (int) (r0 + S[e]) * H * d);
                assertArrayEquals(one, part, "kind " + kind + ", sequence " + e);
                for (float x : one) assertTrue(Float.isFinite(x), "kind " + kind + ", sequence " + e + ": non-finite output");
            }
        }
    }

    @Test
    void ringStoresAndCompressorPoolingOverSeveralSequencesEqualOneCallPerSequence() {
        SplittableRandom r = new SplittableRandom(8);
        int R = rows(), w = 32, m = 4, cw = 2 * w, cap = 2 * m - 1 + 8;
        float[] a = gauss(r, R * cw), z = gauss(r, R * cw);
        long da = dev(a), dz = dev(z), pb = dev(gauss(r, m * cw)), norm = dev(gauss(r, w));
        long invFreq = dev(invFreq());
        float[][] ringA0 = new float[N0.length][], ringZ0 = new float[N0.length][];
        long[] ra = new long[2 * N0.length], rz = new long[2 * N0.length], st = new long[2 * N0.length];
        int[] entriesCap = new int[N0.length];
        SeqViews v = new SeqViews(ARENA, N0.length), v1 = new SeqViews(ARENA, N0.length);
        for (int e = 0; e < N0.length; e++) {
            ringA0[e] = gauss(r, cap * cw);
            ringZ0[e] = gauss(r, cap * cw);
            entriesCap[e] = (int) ((N0[e] + S[e]) / m) + 1;
            // copy 0 is stepped by the batched calls, copy 1 by one call per sequence
            for (int c = 0; c < 2; c++) {
                ra[2 * e + c] = dev(ringA0[e]);
                rz[2 * e + c] = dev(ringZ0[e]);
                st[2 * e + c] = alloc(2L * entriesCap[e] * w);
            }
            v.set(e, N0[e], S[e], row0(e), ra[2 * e], rz[2 * e], st[2 * e], cap);
        }
        long views = devViews(v);
        check(ds4j_compress_pool_seqs(gpu.ctx(), v.host(), ptr(views), N0.length, ptr(da), ptr(dz), m, w, 1, ptr(pb), ptr(norm),
                1e-6f, ptr(invFreq), ROPE), "compress_pool_seqs");
        check(ds4j_ring_store_seqs(gpu.ctx(), v.host(), ptr(views), N0.length, 0, 0, cw, ptr(da)), "ring_store_seqs a");
        check(ds4j_ring_store_seqs(gpu.ctx(), v.host(), ptr(views), N0.length, 1, 0, cw, ptr(dz)), "ring_store_seqs z");
        for (int e = 0; e < N0.length; e++) {
            long r0 = row0(e);
            check(ds4j_compress_pool(gpu.ctx(), ptr(ra[2 * e + 1]), ptr(rz[2 * e + 1]), cap, ptr(da + 4 * r0 * cw), ptr(dz + 4 * r0 * cw),
                    N0[e], S[e], m, w, 1, ptr(pb), ptr(norm), 1e-6f, ptr(invFreq), ROPE, ptr(st[2 * e + 1])), "compress_pool");
            check(ds4j_ring_store(gpu.ctx(), ptr(ra[2 * e + 1]), 0, cap, cw, ptr(da + 4 * r0 * cw), N0[e], S[e]), "ring a");
            check(ds4j_ring_store(gpu.ctx(), ptr(rz[2 * e + 1]), 0, cap, cw, ptr(dz + 4 * r0 * cw), N0[e], S[e]), "ring z");
            assertArrayEquals(gpu.downloadShorts(st[2 * e + 1], entriesCap[e] * w), gpu.downloadShorts(st[2 * e], entriesCap[e] * w),
                    "entries of sequence " + e);
            assertArrayEquals(gpu.downloadFloats(ra[2 * e + 1], cap * cw), gpu.downloadFloats(ra[2 * e], cap * cw), "ring a " + e);
            assertArrayEquals(gpu.downloadFloats(rz[2 * e + 1], cap * cw), gpu.downloadFloats(rz[2 * e], cap * cw), "ring z " + e);
        }
        // the F16 window ring store
        int wcap = W - 1 + 16;
        long kv = dev(gauss(r, R * d));
        SeqViews wv = new SeqViews(ARENA, N0.length);
        long[] w0 = new long[N0.length], w1 = new long[N0.length];
        for (int e = 0; e < N0.length; e++) {
            short[] init = f16(r, wcap * d);
            w0[e] = dev(init);
            w1[e] = dev(init);
            wv.set(e, N0[e], S[e], row0(e), w0[e], 0, 0, wcap);
        }
        long wviews = devViews(wv);
        check(ds4j_ring_store_seqs(gpu.ctx(), wv.host(), ptr(wviews), N0.length, 0, 1, d, ptr(kv)), "window ring_store_seqs");
        for (int e = 0; e < N0.length; e++) {
            check(ds4j_ring_store(gpu.ctx(), ptr(w1[e]), 1, wcap, d, ptr(kv + 4L * row0(e) * d), N0[e], S[e]), "window ring");
            assertArrayEquals(gpu.downloadShorts(w1[e], wcap * d), gpu.downloadShorts(w0[e], wcap * d), "window ring " + e);
        }
    }

    @Test
    void indexerScoresAndTopKOverSeveralSequencesEqualOneCallPerSequence() {
        SplittableRandom r = new SplittableRandom(9);
        int R = rows(), m = 4;
        long ld = 0;
        for (int e = 0; e < N0.length; e++) ld = Math.max(ld, (N0[e] + S[e]) / m);
        long qi = dev(gauss(r, R * HI * dI)), wt = dev(gauss(r, R * HI));
        SeqViews v = new SeqViews(ARENA, N0.length);
        long[] keys = new long[N0.length];
        for (int e = 0; e < N0.length; e++) {
            int count = (int) ((N0[e] + S[e]) / m);
            keys[e] = count == 0 ? 0 : dev(f16(r, count * dI));
            v.set(e, N0[e], S[e], row0(e), 0, 0, keys[e], 0);
        }
        long views = devViews(v), scores = alloc(4L * R * ld), sel = alloc(4L * R * K);
        float ws = 0.5f, ss = 0.125f;
        check(ds4j_indexer_scores_seqs(gpu.ctx(), v.host(), ptr(views), N0.length, ptr(qi), ptr(wt), m, HI, dI, K, ws, ss, ptr(scores), ld),
                "indexer_scores_seqs");
        check(ds4j_indexer_topk_seqs(gpu.ctx(), v.host(), ptr(views), N0.length, ptr(scores), ld, m, K, ptr(sel)), "topk_seqs");
        float[] bs = gpu.downloadFloats(scores, (int) (R * ld));
        int[] bsel = gpu.downloadInts(sel, R * K);
        int picked = 0;
        for (int e = 0; e < N0.length; e++) {
            long r0 = row0(e), sc1 = alloc(4L * S[e] * ld), sel1 = alloc(4L * S[e] * K);
            check(ds4j_indexer_scores(gpu.ctx(), ptr(qi + 4 * r0 * HI * dI), ptr(wt + 4 * r0 * HI), ptr(keys[e]), N0[e], S[e], m, HI, dI, K,
                    ws, ss, ptr(sc1), ld), "indexer_scores");
            check(ds4j_indexer_topk(gpu.ctx(), ptr(sc1), ld, N0[e], S[e], m, K, ptr(sel1)), "topk");
            assertArrayEquals(gpu.downloadFloats(sc1, (int) (S[e] * ld)),
                    java.util.Arrays.copyOfRange(bs, (int) (r0 * ld), (int) ((r0 + S[e]) * ld)), "scores of sequence " + e);
            int[] one = gpu.downloadInts(sel1, S[e] * K);
            assertArrayEquals(one, java.util.Arrays.copyOfRange(bsel, (int) r0 * K, (int) (r0 + S[e]) * K), "selection of sequence " + e);
            for (int x : one) if (x != 0) picked++;
        }
        assertTrue(picked > 0, "some rows need a selection (avail > K)");
    }

    @Test
    void ropeAtPositionsFromMemoryEqualsRopeAtAStartPosition() {
        SplittableRandom r = new SplittableRandom(10);
        int R = rows(), n = d;
        long invFreq = dev(invFreq());
        long[] pos = new long[R];
        for (int e = 0; e < N0.length; e++) for (int s = 0; s < S[e]; s++) pos[row0(e) + s] = N0[e] + s;
        long dpos = dev(pos);
        float[] x = gauss(r, R * H * n), w = gauss(r, n);
        long dw = dev(w);
        // rmsnorm + rope (+ f16), H rows per position, and the plain rope (inverse), at once vs one call per sequence
        long a = dev(x), b = dev(x);
        check(ds4j_rmsnorm_rope_at(gpu.ctx(), ptr(a), ptr(dw), R * H, n, 1e-6f, ROPE, ptr(invFreq), ptr(dpos), H, 1), "rmsnorm_rope_at");
        check(ds4j_rope_at(gpu.ctx(), ptr(a), R, H, n, ROPE, ptr(invFreq), ptr(dpos), 1), "rope_at");
        for (int e = 0; e < N0.length; e++) {
            long off = 4L * row0(e) * H * n;
            check(ds4j_rmsnorm_rope(gpu.ctx(), ptr(b + off), ptr(dw), S[e] * H, n, 1e-6f, ROPE, ptr(invFreq), N0[e], H, 1), "rmsnorm_rope");
            check(ds4j_rope(gpu.ctx(), ptr(b + off), S[e], H, n, ROPE, ptr(invFreq), N0[e], 1, 1), "rope");
        }
        assertArrayEquals(gpu.downloadFloats(b, R * H * n), gpu.downloadFloats(a, R * H * n));
    }
}
