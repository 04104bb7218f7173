// Lightning Indexer scores on tensor cores for prefill (spec 3.6 step 3; ds4j_gpu.h: ds4j_indexer_scores_tc).
//
// A block holds ROWS (query, head) rows of qi in shared memory, as F16 hi + lo pairs of the row scaled by a power of
// two, and walks up to TILES tiles of KT keys (F16, exact as MMA inputs): one warp multiplies its 16 rows with all
// KT keys of a tile (mma.sync.m16n8k16, F16 in, F32 accumulate), applies ReLU, the head weight and d_I^-1/2, and
// sums its 16 rows with shuffles; the partial sums of the warps of one query are then added in warp order. A query's
// heads are whole warps: HI must be a multiple of 16 (and at most ROWS).
//
// Work at a 123K-token prefill (V4-Flash shapes: H_I 64, d_I 128): about 1.5e13 multiply-adds per CSA layer, the
// same as the FFMA kernel but at tensor-core rate. Each (query, key) score depends only on that query's row and that
// key, so the result does not depend on S or on how the queries are grouped into blocks.
#include "tc.h"
#include "tc_mma.h"

#include <stdlib.h>
#include <string.h>

#include <atomic>

namespace ds4j {

#if DS4J_HAVE_TC
namespace itc {

constexpr int KT = 64;       // keys per tile
constexpr int TILES = 8;     // most tiles per block: up to 512 keys share one conversion of the queries
constexpr int DMAX = 128;    // largest d_I (shared memory)

/**
 * Shared bytes of one block of rows (query, head) rows for key width dI: queries hi, lo, nb key tiles, nb sets of
 * partial sums, factors (nb 2: score_block's LEAN 2).
 */
static inline size_t smem_bytes(int rows, int dI, int nb = 1) {
    const int ldq = dI / 2 + 4;
    return 4 * ((size_t)2 * rows * ldq + nb * ((size_t)KT * ldq + (size_t)(rows / 16) * KT) + 2 * rows);
}

/** Eight F32 keys values (F16 numbers, so exactly) as the F16 halves of one 16-byte chunk. */
__device__ __forceinline__ uint4 pack_f16x8(float4 a, float4 b) {
    const __half2 h[4] = {__floats2half2_rn(a.x, a.y), __floats2half2_rn(a.z, a.w), __floats2half2_rn(b.x, b.y),
                          __floats2half2_rn(b.z, b.w)};
    uint4 r;
    memcpy(&r, h, 16);
    return r;
}

/** One term of spec 3.6 step 3, in the order of ds4j_indexer_scores: ((w_{t,h} H_I^-1/2) ReLU(dot)) d_I^-1/2. */
__device__ __forceinline__ float term(float wsc, float dot, float s_scale) { return mul(mul(wsc, fmaxf(dot, 0.f)), s_scale); }

/**
 * One block: queries s0 .. s0 + ROWS/HI - 1 (those below S) against keys e0 .. e0 + tiles KT - 1 (those below the
 * last query's available set). ROWS (query, head) rows, 2 ROWS threads: warp w multiplies rows 16w .. 16w+15. T is the
 * key type: uint16_t (F16 bits) or float (F16 values held in F32, converted exactly). Which block computes a score, and
 * with which other queries or keys, does not change its bits: head h always sits in row h % 16 of its warp, key e in
 * column e % 8 of its n-tile (e0 is a multiple of KT), and the sum runs over the query's warps in order.
 */
template <typename T, int ROWS, int LEAN = 0>
__device__ __forceinline__ void score_block(const float* __restrict__ qi, const float* __restrict__ wt,
                                            const T* __restrict__ keys, int64_t N0, int S, int m, int HI, int dI,
                                            int K, float w_scale, float s_scale, float* scores, int64_t ld, int s0,
                                            int64_t e0, int tiles) {
    constexpr int THREADS = 2 * ROWS, WARPS = THREADS / 32;
    extern __shared__ __align__(16) uint32_t sm[];
    const int ldq = dI / 2 + 4;  // row stride in words: rows 8 apart fall 4 banks apart, fragment loads conflict-free
    uint32_t* qh = sm;
    uint32_t* ql = qh + ROWS * ldq;
    constexpr int NB = LEAN == 2 ? 2 : 1;  // key tiles and partial sums held: LEAN 2 fills one while the other is read
    uint32_t* ks = ql + ROWS * ldq;                              // [NB][KT][ldq]
    float* part = reinterpret_cast<float*>(ks + NB * KT * ldq);  // [NB][WARPS][KT]
    float* wsc = part + NB * WARPS * KT;                         // [ROWS] w_{t,h} H_I^-1/2 (0: row not scored)
    float* unsc = wsc + ROWS;                                // [ROWS] 2^-t, undoing the row's scaling

    const int qpb = ROWS / HI;  // queries per block
    const int slast = min(s0 + qpb, S) - 1;
    const int64_t avail_max = (N0 + slast + 1) / m;  // the block's last query sees the most entries
    if (avail_max <= K || e0 >= avail_max) return;  // uniform over the block
    const int64_t e1 = min(e0 + (int64_t)KT * tiles, avail_max);
    const int ntiles = (int)((e1 - e0 + KT - 1) / KT);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;

    // 1. queries: warp w converts rows 16w .. 16w+15 (row r = query r / HI, head r % HI); the 16 rows' loads all go
    // out before the first is converted (one round trip for the warp's rows instead of one a row; BENCHMARKS.md,
    // forty-third session, one measurement: a 16-entry step's call 10 % shorter, a one-row call unchanged)
    // A warp's 16 rows are heads h0 .. h0 + 15 of one query (HI is a multiple of 16), so whether that query is scored
    // is found once a warp (a 64-bit division), not once a row
    const int qw = warp * 16 / HI, sw = s0 + qw, h0 = warp * 16 % HI;
    const bool live = qw < qpb && sw < S && (N0 + sw + 1) / m > K;
    float4 qv[16];
#pragma unroll
    for (int i = 0; i < 16; i++) {
        qv[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        if (live && lane * 4 < dI)
            qv[i] = __ldg(reinterpret_cast<const float4*>(qi + ((int64_t)sw * HI + h0 + i) * dI) + lane);
    }
#pragma unroll
    for (int i = 0; i < 16; i++) {
        const int r = warp * 16 + i;
        const float4 v = qv[i];
        const float mx = warp_max(fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
        // 2^t puts the row's largest |value| in [2^14, 2^15): F16 hi cannot overflow, lo stays normal down to
        // 2^-28 of the largest value. Zero, subnormal-only and non-finite rows keep t = 0 / the clamp.
        int t = 0;
        if (mx > 0.f && mx <= 3.402823466e38f) {
            const int ex = (int)((__float_as_uint(mx) >> 23) & 0xffu) - 127;  // -127 for subnormals
            t = min(126, max(-126, 14 - ex));
        }
        const float up = __uint_as_float((uint32_t)(127 + t) << 23);
        if (lane * 4 < dI) {
            uint32_t h0, l0, h1, l1;
            tc::split_f16(v.x * up, v.y * up, h0, l0);
            tc::split_f16(v.z * up, v.w * up, h1, l1);
            *reinterpret_cast<uint2*>(qh + r * ldq + 2 * lane) = make_uint2(h0, h1);
            *reinterpret_cast<uint2*>(ql + r * ldq + 2 * lane) = make_uint2(l0, l1);
        }
        if (lane == 0) {
            unsc[r] = __uint_as_float((uint32_t)(127 - t) << 23);
            wsc[r] = live ? mul(wt[(int64_t)sw * HI + h0 + i], w_scale) : 0.f;
        }
    }

    // 2. key tiles: registers hold the next tile while the current one is multiplied
    constexpr bool F32 = sizeof(T) == 4;
    constexpr int KCH = KT * DMAX / 8 / THREADS;  // 16-byte chunks (8 keys' halves) per thread, at most
    const int cpk = dI / 8;                        // chunks per key
    uint4 kq[F32 ? 1 : KCH];
    float4 kf[F32 ? 2 * KCH : 1];
    // a thread's chunks are the same in every tile: chunk i is 16-byte column cc(i) of the tile's key jc(i) (KT or
    // more: no chunk). dI is known only at run time, so c / cpk is a division (the ncu profile of BENCHMARKS.md,
    // fifty-seventh session: about 300 instructions a warp and tile went to the loads and stores): where cpk divides
    // THREADS (d_I a power of two, V4's 128) chunk i is chunk 0 moved THREADS / cpk keys on, found once a block
    const int j0 = tid / cpk, c0 = tid % cpk;
    const bool even = THREADS % cpk == 0;
    auto jc = [&](int i) { return even ? j0 + i * (THREADS / cpk) : (tid + i * THREADS) / cpk; };
    auto cc = [&](int i) { return even ? c0 : (tid + i * THREADS) % cpk; };
    auto load = [&](int tile) {
        const int64_t eb = e0 + (int64_t)tile * KT;
        const int lim = (int)min((int64_t)KT, e1 - eb);  // keys of this tile below e1
        const T* kb = keys + eb * dI;
#pragma unroll
        for (int i = 0; i < KCH; i++) {
            const bool in = jc(i) < lim;
            if constexpr (F32) {
                kf[2 * i] = kf[2 * i + 1] = make_float4(0.f, 0.f, 0.f, 0.f);
                if (in) {
                    const float4* p = reinterpret_cast<const float4*>(kb + jc(i) * dI) + 2 * cc(i);
                    kf[2 * i] = __ldg(p);
                    kf[2 * i + 1] = __ldg(p + 1);
                }
            } else {
                kq[i] = make_uint4(0u, 0u, 0u, 0u);
                if (in) kq[i] = __ldg(reinterpret_cast<const uint4*>(kb + jc(i) * dI) + cc(i));
            }
        }
    };
    load(0);
    // step 3's (query, key) items: a thread's items, and the entries their query sees, are the same at every tile
    // (0: the query is past S or not scored), so the 64-bit divisions run once a block, not once a tile
    constexpr int ITEMS = (ROWS / 16 * KT + THREADS - 1) / THREADS;  // qpb * KT <= ROWS / 16 * KT
    int64_t seen[ITEMS];
#pragma unroll
    for (int it = 0; it < ITEMS; it++) {
        const int s = s0 + (tid + it * THREADS) / KT;
        seen[it] = 0;
        if (tid + it * THREADS < qpb * KT && s < S) {
            const int64_t avail = (N0 + s + 1) / m;
            if (avail > K) seen[it] = avail;
        }
    }
    // LEAN: only the rows of the block's queries below S are multiplied (a block of the last queries may hold fewer
    // than qpb; the others' sums are never read), else every row (the kernels as measured so far)
    const int rows_used = (LEAN ? min(qpb, S - s0) : qpb) * HI;
    // the keys held in registers (the last load) into key buffer b
    auto store = [&](int b) {
#pragma unroll
        for (int i = 0; i < KCH; i++) {
            if (jc(i) < KT) {
                uint4 w;
                if constexpr (F32) w = pack_f16x8(kf[2 * i], kf[2 * i + 1]);
                else w = kq[i];
                *reinterpret_cast<uint4*>(ks + (b * KT + jc(i)) * ldq + cc(i) * 4) = w;
            }
        }
    };
    // the warp's 16 rows times the keys kb (one buffer), the terms summed over the rows into partial sums p [WARPS][KT]
    auto multiply = [&](const uint32_t* kb, float* p) {
        float acc[KT / 8][4];
#pragma unroll
        for (int ni = 0; ni < KT / 8; ni++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[ni][j] = 0.f;
        if (warp * 16 < rows_used) {  // warps past the last query's rows have nothing to multiply
            if constexpr (LEAN != 0) {
                // fragments through ldmatrix, lane addresses in words: A = the warp's rows 0-7 / 8-15 at the k-step's
                // words 0-3, then 4-7 (a0 .. a3); B = keys 0-7 at words 0-3, 4-7, then keys 8-15 (b0, b1 of two n-tiles)
                const int oa = (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ldq + (lane >> 4) * 4;
                const int ob = ((lane & 7) + (lane >> 4) * 8) * ldq + ((lane >> 3) & 1) * 4;
                for (int kk = 0; kk < dI / 16; kk++) {
                    uint32_t ah[4], al[4];
                    tc::ldsm_x4(ah, qh + oa + kk * 8);
                    tc::ldsm_x4(al, ql + oa + kk * 8);
#pragma unroll
                    for (int ni = 0; ni < KT / 8; ni += 2) {
                        uint32_t b[4];  // b0, b1 of n-tile ni, then of ni + 1
                        tc::ldsm_x4(b, kb + ob + ni * 8 * ldq + kk * 8);
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            tc::mma_f16(acc[ni + h], ah, b[2 * h], b[2 * h + 1]);
                            tc::mma_f16(acc[ni + h], al, b[2 * h], b[2 * h + 1]);
                        }
                    }
                }
            } else {
                for (int kk = 0; kk < dI / 16; kk++) {
                    // fragments as in gemm_tc.cpp: A rows g / g+8, k pairs 2t / 2t+8; B column (key) g
                    const int o = (warp * 16 + g) * ldq + kk * 8 + tig;
                    const uint32_t ah[4] = {qh[o], qh[o + 8 * ldq], qh[o + 4], qh[o + 8 * ldq + 4]};
                    const uint32_t al[4] = {ql[o], ql[o + 8 * ldq], ql[o + 4], ql[o + 8 * ldq + 4]};
#pragma unroll
                    for (int ni = 0; ni < KT / 8; ni++) {
                        const int ob = (ni * 8 + g) * ldq + kk * 8 + tig;
                        const uint32_t b0 = kb[ob], b1 = kb[ob + 4];
                        tc::mma_f16(acc[ni], ah, b0, b1);
                        tc::mma_f16(acc[ni], al, b0, b1);
                    }
                }
            }
        }
        // C fragment: c0, c1 = (row g, keys 2t, 2t+1), c2, c3 = row g+8; sum the warp's 16 rows (one query's heads)
        const int r0 = warp * 16 + g, r1 = r0 + 8;
        const float w0 = wsc[r0], w1 = wsc[r1], u0 = unsc[r0], u1 = unsc[r1];
        // the two rows' terms for key 2t + c of n-tile ni, added: what the warp's shuffles then sum over its 8 lanes
        auto pair = [&](int ni, int c) {
            return add(term(w0, mul(acc[ni][c], u0), s_scale), term(w1, mul(acc[ni][2 + c], u1), s_scale));
        };
        if constexpr (LEAN != 0) {
            // the 8 lanes' sums (rows g) as a transposed butterfly: at each of three steps (lanes 4, 8, 16 apart: bits
            // 0, 1, 2 of g) a lane keeps half of its values, sends the other half and adds what its partner sent for
            // the half it kept. Each value is summed over the same pairs in the same order as the loop below, so the
            // bits are the same, with 14 shuffles a tile instead of 48; lane g ends with n-tile 4 b0 + 2 b1 + b2 (b:
            // the bits of g). The first step runs as the terms are made (n-tiles ni and ni + 4), so that at most 8 of
            // the 16 values are held beside the accumulators (no spills).
            static_assert(KT == 64, "three butterfly steps take 16 values (8 n-tiles, two keys each) to two");
            float v[KT / 8];
            {
                const bool upper = lane & 4;
#pragma unroll
                for (int ni = 0; ni < KT / 16; ni++)
#pragma unroll
                    for (int c = 0; c < 2; c++) {
                        const float a = pair(ni, c), b = pair(ni + KT / 16, c);
                        v[2 * ni + c] = add(upper ? b : a, DS4J_SHFL_XOR(upper ? a : b, 4));
                    }
            }
#pragma unroll
            for (int step = 1; step < 3; step++) {  // a counted loop: unrolled whole, so v stays in registers
                const int half = KT / 8 >> step, o = 4 << step;  // 4 values kept of 8, then 2 of 4
                const bool upper = lane & o;  // this lane keeps values half .. 2 half - 1 of the ones left
#pragma unroll
                for (int i = 0; i < half; i++) {
                    const float keep = upper ? v[i + half] : v[i], send = upper ? v[i] : v[i + half];
                    v[i] = add(keep, DS4J_SHFL_XOR(send, o));
                }
            }
            const int ni = 4 * (g & 1) + 2 * ((g >> 1) & 1) + (g >> 2);
            *reinterpret_cast<float2*>(p + warp * KT + ni * 8 + 2 * tig) = make_float2(v[0], v[1]);
        } else {
#pragma unroll
            for (int ni = 0; ni < KT / 8; ni++) {
                float t0 = pair(ni, 0), t1 = pair(ni, 1);
#pragma unroll
                for (int o = 4; o < 32; o <<= 1) {
                    t0 = add(t0, DS4J_SHFL_XOR(t0, o));
                    t1 = add(t1, DS4J_SHFL_XOR(t1, o));
                }
                if (g == 0) {
                    p[warp * KT + ni * 8 + 2 * tig] = t0;
                    p[warp * KT + ni * 8 + 2 * tig + 1] = t1;
                }
            }
        }
    };
    // 3. per (query, key) of tile `tile`: the query's warps in order, from partial sums p
    auto finish = [&](int tile, const float* p) {
        const int64_t eb = e0 + (int64_t)tile * KT;
#pragma unroll
        for (int it = 0; it < ITEMS; it++) {
            const int idx = tid + it * THREADS, q = idx / KT, j = idx % KT;
            const int64_t e = eb + j;
            if (e >= seen[it]) continue;  // also every item past qpb * KT or S, and every query not scored
            float sum = 0.f;
            for (int w = q * HI / 16; w < (q + 1) * HI / 16; w++) sum = add(sum, p[w * KT + j]);
            scores[(int64_t)(s0 + q) * ld + e] = sum;
        }
    };
    if constexpr (NB == 1) {
        for (int tile = 0; tile < ntiles; tile++) {
            __syncthreads();  // the previous tile's keys and partial sums are consumed; the queries are stored
            store(0);
            __syncthreads();
            if (tile + 1 < ntiles) load(tile + 1);
            multiply(ks, part);
            __syncthreads();
            finish(tile, part);
        }
    } else {
        // one barrier a tile: tile t's keys were stored into buffer t % 2 during tile t - 1, and tile t - 1's sums are
        // finished while tile t is multiplied. At the barrier of tile t every warp has multiplied tile t - 1 (so its
        // key buffer, (t + 1) % 2, may be refilled) and finished tile t - 2 (so partial sums t % 2 may be rewritten);
        // the first barrier also follows the queries' staging.
        store(0);
        if (ntiles > 1) load(1);
        for (int tile = 0; tile < ntiles; tile++) {
            __syncthreads();
            if (tile + 1 < ntiles) {
                store((tile + 1) & 1);
                if (tile + 2 < ntiles) load(tile + 2);
            }
            if (tile > 0) finish(tile - 1, part + ((tile - 1) & 1) * WARPS * KT);
            multiply(ks + (tile & 1) * KT * ldq, part + (tile & 1) * WARPS * KT);
        }
        __syncthreads();
        finish(ntiles - 1, part + ((ntiles - 1) & 1) * WARPS * KT);
    }
}

/** Prefill: blockIdx.x walks the keys (TILES tiles a block), blockIdx.y the groups of ROWS / HI queries. */
template <typename T, int ROWS>
__global__ void __launch_bounds__(2 * ROWS)
indexer_tc_kernel(const float* __restrict__ qi, const float* __restrict__ wt, const T* __restrict__ keys, int64_t N0,
                  int S, int m, int HI, int dI, int K, float w_scale, float s_scale, float* scores, int64_t ld) {
    DS4J_AWAIT_PREVIOUS();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // the host only launches this on compute capability >= 8.0 (tc_device)
#else
    score_block<T, ROWS>(qi, wt, keys, N0, S, m, HI, dI, K, w_scale, s_scale, scores, ld, blockIdx.y * (ROWS / HI),
                         (int64_t)blockIdx.x * KT * TILES, TILES);
#endif
}

/**
 * Decode and verify steps (few queries): blockIdx.x walks the query groups, so that the blocks reading one key range
 * run together and share it in L2; blockIdx.y the key ranges of `tiles` tiles; blockIdx.z the sequence when views is
 * not null (its N0, S, row0 and keys = view.store replace the arguments).
 */
template <typename T, int ROWS, int LEAN = 0>
// the occupancy of the builds measured (BENCHMARKS.md, fifty-seventh session): two blocks of 128 rows a multiprocessor
// (at most 128 registers; at 135, one block, the F32-key scores took 318 µs against 229) and three of 64 (at most 170)
__global__ void __launch_bounds__(2 * ROWS, ROWS == 128 ? 2 : 3)
indexer_tc_rows_kernel(const ds4j_seq_view* views, const float* __restrict__ qi, const float* __restrict__ wt,
                       const T* __restrict__ keys, int64_t N0, int S, int m, int HI, int dI, int K, float w_scale,
                       float s_scale, float* scores, int64_t ld, int tiles) {
    DS4J_AWAIT_PREVIOUS();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();
#else
    const int s0 = blockIdx.x * (ROWS / HI);
    if (views) {
        const ds4j_seq_view v = views[blockIdx.z];
        if (s0 >= v.S) return;
        const int64_t r0 = v.row0;
        qi += r0 * HI * dI;
        wt += r0 * HI;
        scores += r0 * ld;
        keys = reinterpret_cast<const T*>(v.store);
        N0 = v.N0;
        S = v.S;
    }
    score_block<T, ROWS, LEAN>(qi, wt, keys, N0, S, m, HI, dI, K, w_scale, s_scale, scores, ld, s0,
                               (int64_t)blockIdx.y * KT * tiles, tiles);
#endif
}

}  // namespace itc
#endif  // DS4J_HAVE_TC

}  // namespace ds4j

using namespace ds4j;

/** False when the environment variable DS4J_INDEXER_TC is "0" (read at the first call): see ds4j_indexer_scores. */
static bool indexer_tc_enabled() {
    static std::atomic<int> on{-1};
    return !env_equals(on, "DS4J_INDEXER_TC", "0");
}

#if DS4J_HAVE_TC
/**
 * Opts the kernel in to its dynamic shared memory (once per device: granted[device] remembers it) and launches it;
 * the launch status.
 */
template <typename K, typename... A>
static int tc_launch(ds4j_ctx* ctx, int64_t* granted, K kernel, dim3 grid, int threads, size_t smem, A... args) {
    const int dv = ctx->device >= 0 && ctx->device < 64 ? ctx->device : 0;
    if ((int64_t)smem > granted[dv]) {
        hipError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != hipSuccess) return fail_hip(e, "indexer scores: shared memory of the tensor-core kernel");
        granted[dv] = (int64_t)smem;
    }
    kernel<<<grid, threads, smem, ctx->stream>>>(args...);
    DS4J_LAUNCHED("indexer_scores (tensor cores)");
    return DS4J_OK;
}

/** The kernels of one key type T. */
template <typename T>
static bool tc_indexer_t(ds4j_ctx* ctx, const ds4j_seq_view* views, int n, const float* qi, const float* wt,
                         const T* keys, int64_t N0, int S, int m, int HI, int dI, int K, float w_scale, float s_scale,
                         float* scores, int64_t ld, int64_t most, int* rc) {
    using namespace itc;
    // per kernel and device: opted-in bytes (the rows kernels by block size and loop, then the prefill kernel)
    static int64_t granted_rows[2][3][64], granted_prefill[64];
    const int64_t kt = (most + KT - 1) / KT;  // key tiles
    if (views || S <= 64) {  // few queries (decode, verify, a batch's steps): the keys' blocks run together
        // measurement switches (same bits: a score does not depend on its block, see score_block):
        // DS4J_INDEXER_ROWS64=1 blocks of 64 rows at any query count; DS4J_INDEXER_TILES=T up to T key tiles a block;
        // DS4J_INDEXER_LEAN: 1 (the default) the loop with ldmatrix fragments that skips unused rows and sums rows by a
        // transposed butterfly, 0 the loop before it, 2 the lean loop with one barrier a tile (two key buffers)
        // (score_block's LEAN; the same bits; at 1,048,000 tokens on an H100 LEAN 1's scores took about 212 µs a CSA layer on
        // F16 keys against LEAN 0's 263, and 228 against 276 on F32 copies: BENCHMARKS.md, fifty-seventh session)
        static std::atomic<int> rows64{-1}, most_tiles{0}, lean_on{0};
        const int lean = env_choice(lean_on, "DS4J_INDEXER_LEAN", 1, 0, 2);
        const bool small = HI <= 64 && ((int64_t)S * HI <= 64 || env_equals(rows64, "DS4J_INDEXER_ROWS64", "1"));
        const int qpb = (small ? 64 : 128) / HI;
        const int64_t groups = ((int64_t)S + qpb - 1) / qpb;
        int tiles = env_choice(most_tiles, "DS4J_INDEXER_TILES", TILES, 1, 256);  // at least 512 blocks where the keys
                                                                                   // allow it, else fewer keys per block
        while (tiles > 1 && groups * n * ((kt + tiles - 1) / tiles) < 512) tiles >>= 1;
        const int64_t kb = (kt + tiles - 1) / tiles;
        if (groups > 0x7fffffff || kb > 65535 || n > 65535) return false;
        dim3 grid((unsigned)groups, (unsigned)kb, (unsigned)n);
        const size_t smem = smem_bytes(small ? 64 : 128, dI, lean == 2 ? 2 : 1);
        // the rows kernels by block size (64, 128 rows) and loop (DS4J_INDEXER_LEAN 0, 1, 2): one signature
        using RowsKernel = decltype(&indexer_tc_rows_kernel<T, 64, 0>);
        static const RowsKernel kernels[2][3] = {
                {indexer_tc_rows_kernel<T, 64, 0>, indexer_tc_rows_kernel<T, 64, 1>, indexer_tc_rows_kernel<T, 64, 2>},
                {indexer_tc_rows_kernel<T, 128, 0>, indexer_tc_rows_kernel<T, 128, 1>, indexer_tc_rows_kernel<T, 128, 2>}};
        const int size = small ? 0 : 1;
        *rc = tc_launch(ctx, granted_rows[size][lean], kernels[size][lean], grid, small ? 128 : 256, smem, views, qi, wt,
                        keys, N0, S, m, HI, dI, K, w_scale, s_scale, scores, ld, tiles);
        return true;
    }
    const int qpb = 128 / HI;
    const int64_t by = ((int64_t)S + qpb - 1) / qpb, bx = (kt + TILES - 1) / TILES;
    if (by > 65535 || bx > 0x7fffffff) return false;
    *rc = tc_launch(ctx, granted_prefill, indexer_tc_kernel<T, 128>, dim3((unsigned)bx, (unsigned)by), 256,
                    smem_bytes(128, dI), qi, wt, keys, N0, S, m, HI, dI, K, w_scale, s_scale, scores, ld);
    return true;
}
#endif

bool ds4j::tc_indexer(ds4j_ctx* ctx, const ds4j_seq_view* views, int n, const float* qi, const float* wt,
                      const void* keys, bool keys_f32, bool keys_aligned, int64_t N0, int S, int m, int HI, int dI,
                      int K, float w_scale, float s_scale, float* scores, int64_t ld, int64_t most, bool switchable,
                      int* rc) {
#if DS4J_HAVE_TC
    using namespace itc;
    if (S <= 0 || n <= 0 || most <= 0) return false;
    if (HI % 16 != 0 || HI > 128 || dI % 16 != 0 || dI > DMAX || ((uintptr_t)qi & 15u) != 0 || !keys_aligned ||
        ((uintptr_t)keys & 15u) != 0)
        return false;
    if ((switchable && !indexer_tc_enabled()) || !tc_device(ctx)) return false;
    return keys_f32 ? tc_indexer_t<float>(ctx, views, n, qi, wt, (const float*)keys, N0, S, m, HI, dI, K, w_scale,
                                          s_scale, scores, ld, most, rc)
                    : tc_indexer_t<uint16_t>(ctx, views, n, qi, wt, (const uint16_t*)keys, N0, S, m, HI, dI, K,
                                             w_scale, s_scale, scores, ld, most, rc);
#else
    (void)ctx, (void)views, (void)n, (void)qi, (void)wt, (void)keys, (void)keys_f32, (void)keys_aligned, (void)N0;
    (void)S;
    (void)m, (void)HI, (void)dI, (void)K, (void)w_scale, (void)s_scale, (void)scores, (void)ld, (void)most;
    (void)switchable, (void)rc;
    return false;
#endif
}

extern "C" {

int32_t ds4j_indexer_scores_tc(ds4j_ctx* ctx, const float* qi, const float* wt, const uint16_t* keys, int64_t N0,
                               int32_t S, int32_t m, int32_t HI, int32_t dI, int32_t K, float w_scale, float s_scale,
                               float* scores, int64_t ld) {
    DS4J_CHECK_CTX(ctx);
    // the argument checks of ds4j_indexer_scores, then the shapes the tensor-core kernels handle
    DS4J_ARG(qi && wt && scores && m > 0 && HI > 0 && dI > 0 && K > 0 && S >= 0 && N0 >= 0,
             "ds4j_indexer_scores_tc: bad arguments");
    const int64_t max_avail = (N0 + S) / m;
    if (S == 0 || max_avail <= K) return DS4J_OK;
    DS4J_ARG(keys && ld >= max_avail, "ds4j_indexer_scores_tc: scores row of %lld < %lld entries", (long long)ld,
             (long long)max_avail);
    int rc = DS4J_OK;
    if (tc_indexer(ctx, nullptr, 1, qi, wt, keys, false, true, N0, S, m, HI, dI, K, w_scale, s_scale, scores, ld,
                   max_avail, false, &rc))
        return rc;
    return ds4j_indexer_scores(ctx, qi, wt, keys, N0, S, m, HI, dI, K, w_scale, s_scale, scores, ld);
}

}  // extern "C"
