// Skinny tensor-core products for steps of 1 .. DS4J_TC_MIN_ROWS - 1 rows (decode, verify, small batches):
// ds4j_matmul, ds4j_matmul_grouped and ds4j_moe_matmul against stored-format weights (ds4j_gpu.h, DS4J_TC_MIN_ROWS).
// Such steps are bound by the weight bytes, so the kernel is built around streaming them: many 16-byte loads in flight
// per lane, decoded in registers straight into MMA operands.
//
// Layout: the weights are the MMA's A operand (16 weight rows per m16 tile), the step's rows (tokens, or one expert's
// picks) are B (8 per n8 tile, up to NT = 8 tiles per pass: a step of 64 rows reads each weight once). A warp owns MT
// m-tiles (16 MT weight rows) and a share of the columns; lane (g, t) = (lane / 4, lane % 4) loads one 16-byte chunk
// of rows g and g + 8 of each m-tile, and these bytes are its A fragments: no shared-memory staging, no shuffles (FP8
// aside: fp8_x takes each token's largest |x| over the four lanes t). Chunk c of a row holds E columns (16 FP8, 32
// FP4, 8 BF16 / F16); the four lanes t of a row read chunks 4j + t, 64 contiguous bytes. K-step i of a chunk puts four
// of its columns into the lane's k slots {2t, 2t+1, 2t+8, 2t+9} (FP8, BF16, F16: columns 4i .. 4i+3 in order; FP4:
// within each 8-column word the pairs (n, n+4), which decode with shifts and masks alone) and the B fragment takes x
// at the same four columns of token g. So the MMA's k runs over a fixed permutation of the columns, the same for every
// row and token, and the result differs in rounding (not in value) from the prefill GEMM of gemm_tc.cpp.
//
// Exactness: FP4 e2m1 bit patterns are placed into BF16 patterns, which read as value x 2^-126 (subnormal codes
// included), then multiplied by 2^126 x the E8M0 scale, a power of two: exact, as gemm_tc.cpp's decoding. BF16 weights
// are used as stored, F16 ones as an exact BF16 hi + lo pair; x is split into BF16 hi + lo; F32 accumulation (see
// ds4j_gpu.h for the error bound). FP8 e4m3 weights take F16 MMAs instead: exact F16 values from the hardware
// conversion, the block scale and a per-group power of two of x applied to each chunk group's partial sum (fp8_x).
//
// Batch invariance: the result for (token s, row r) is the sum of the warps' partial sums in warp order, each warp's
// over its chunks in order, each chunk's k-steps in order; the warp count and the column split depend on the matrix
// shape only, never on S, on the token's place in its tile or on the other tokens or picks of the step (shape_for).
// S picks the pass width and, for 64-token passes, the m-tiles per warp: which rows a warp holds, not how they sum.
//
// Routed experts: one block per (expert, row tile), which collects all the expert's picks in ascending order and runs
// them as the B tokens, so each expert's weights are read once per step, not once per pick. Where the caller gives the
// number of experts E and it is below the number of picks, the grid's x dimension has E blocks and block x takes the
// x-th smallest expert id picked (those past the distinct experts leave); otherwise (E unknown, or at least the picks)
// one block per pick, where the block of an expert's first pick works and the others leave at once
// (moe_block_expert). Either way the x dimension has min(picks, E) blocks when E is given; y walks the row tiles (the
// staged kernel: its row groups, several per block).
//
// Staged activations (skinny_smem_kernel, steps of at least DS4J_SKINNY_SMEM rows): the same products with x split
// once per block into shared memory and shared by 128 weight rows, a column partition per block where the row tiles
// alone are too few, and the partitions' partial sums added in the warp order above (the same bits; see its comment).
// FP4 passes copy the raw x into the slots by cp.async and split it there (sm_xasync). On an sm_90a build for an H100 /
// H200, passes of 2 .. 8 n-tiles of FP8 weights (BF16 and FP4 where asked for) run the same products on warpgroup MMAs
// (tc_wgmma.h, sm_wgmma): x staged as K-major core matrices (sm_put), four warps' A fragments in one wgmma per k-step.
//
// Dense FP8 and BF16 passes of one n-tile whose row tiles are whole (FP8: each in one 128-row scale block; all of V4's
// are) take a lean instance of the staged kernel (sm_lean): the same MMAs in the same order, fewer instructions.
//
// Launch shape (from the matrix shape only): MT m-tiles per warp, nw warps per block over one row tile's columns, U
// chunk groups of loads in flight per lane. MT_HI, U, TARGET_WARPS and TARGET_TILES are first choices for the H200,
// not measured optima: `tools/device/run.sh mm-bench` (io.ds4j.gpu.MatmulBench) prints what they give.
#include "ops.h"
#include "tc.h"
#include "tc_mma.h"
#include "tc_wgmma.h"

#include <algorithm>
#include <atomic>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

namespace ds4j {

#if DS4J_HAVE_TC
namespace sk {

/**
 * Per format: elements per 16-byte chunk (E), m-tiles per warp (MT: MT_HI where the shape has enough row tiles to fill
 * the device, else MT_HI / 2; more m-tiles share each x fragment, fewer give more blocks), chunk groups in flight (U).
 */
template <int FMT> struct Fmt;
template <> struct Fmt<DS4J_FMT_BF16> { static constexpr int E = 8, MT_HI = 2, U = 2; };
template <> struct Fmt<DS4J_FMT_F16> { static constexpr int E = 8, MT_HI = 2, U = 2; };
template <> struct Fmt<DS4J_FMT_FP8_E4M3_B128> { static constexpr int E = 16, MT_HI = 2, U = 2; };
template <> struct Fmt<DS4J_FMT_FP4_E2M1_B32> { static constexpr int E = 32, MT_HI = 4, U = 2; };

constexpr int MAX_PICKS = 1024;  // routed experts: picks S*k of one launch, collected per expert in shared memory
constexpr int TARGET_WARPS = 2048;  // enough warps streaming to cover the H200's 132 SMs several times

/** TARGET_WARPS, or DS4J_SKINNY_WARPS (a power of two, 512 .. 16384) for measurements; read once. */
static int target_warps() {
    static std::atomic<int> v{0};
    int t = v.load();
    if (t == 0) {
        t = TARGET_WARPS;
        if (const char* e = getenv("DS4J_SKINNY_WARPS")) {
            const int n = atoi(e);
            if (n >= 512 && n <= 16384 && (n & (n - 1)) == 0) t = n;
        }
        v.store(t);
    }
    return t;
}
constexpr int TARGET_TILES = 264;   // row tiles (blocks) for two per SM on the H200

struct Args {
    WView v;          // dense: the weight view; moe: scale_kind, cols and scale_cols shared by every expert
    int rows;         // rows of the view (dense) or of each expert (moe)
    int grp;          // dense: rows per group (rows when not grouped)
    int tiles_per_grp;
    int64_t xgs;      // dense: x offset of group g is g * xgs
    const float* x;
    int64_t ldx;
    float* y;
    int64_t ldy;
    int S;
    // moe
    void* const* w_table;
    void* const* scale_table;
    const int32_t* row_base_table;
    const int32_t* ids;
    int P, k, x_per_pick;
    int E;            // moe: experts (ids lie in [0, E)) for a grid over distinct experts; 0: a grid over picks
};

#ifndef DS4J_SKINNY_PREFETCH
#define DS4J_SKINNY_PREFETCH 1
#endif
// DS4J_SKINNY_PREFETCH=0 at build time turns the L2 prefetch of the weights off (for measurements; BENCHMARKS.md,
// twelfth session, has the A/B against the library before it). Dense products prefetch their weights only (no V4
// dense product has FP4 scales); no cap on a block's bytes was tried: one wave of blocks may ask for a whole matrix.

/**
 * Share part of parts (an even split of the bytes, cut anywhere) of rows [r0, r1) of a row-major matrix with rb bytes a
 * row at base: the bytes a block prefetches into the L2 (prefetch_l2), so that the blocks of one row range, one per
 * column partition, together ask for each of its bytes once. Empty when r1 <= r0.
 */
__device__ __forceinline__ L2Range rows_share(const void* base, int64_t rb, int r0, int r1, int part, int parts) {
    if (!DS4J_SKINNY_PREFETCH || base == nullptr || r1 <= r0) return L2Range{nullptr, 0};
    const size_t len = (size_t)(r1 - r0) * (size_t)rb, lo = len * (size_t)part / parts, hi = len * (size_t)(part + 1) / parts;
    return L2Range{(const uint8_t*)base + (size_t)r0 * (size_t)rb + lo, hi - lo};
}

/**
 * The weights of skinny_kernel's dense block: its row tile of rt rows (every column) of its group, as the kernel body
 * takes it (the body keeps its own lines: calling this helper there instead gave most dense instances more registers,
 * up to 229 from 219 and new spills, `nvcc -Xptxas -v`).
 */
template <int FMT>
__device__ __forceinline__ L2Range sk_tile_range(const Args& a, int rt) {
    const int gi = blockIdx.x / a.tiles_per_grp, r0 = gi * a.grp + (blockIdx.x % a.tiles_per_grp) * rt;
    return rows_share(a.v.w, row_bytes_of(FMT, a.v.cols), r0, min(r0 + rt, (gi + 1) * a.grp), 0, 1);
}

/** The first `most` bytes of r (a block's prefetch cut to its share of the L2: SmArgs::pf_max). */
__device__ __forceinline__ L2Range l2_first(L2Range r, int64_t most) {
    return L2Range{r.p, r.n < (size_t)most ? r.n : (size_t)most};
}

/**
 * Prefetches share part of parts of rows [r0, r1) of v into the L2, at most `most` bytes of each: the weights, and the
 * FP4 scale bytes (one per 32 columns of a row; FP8's 128 x 128 block scales are few and left out).
 */
template <int FMT>
__device__ __forceinline__ void sk_prefetch_rows(const WView& v, int r0, int r1, int part, int parts,
                                                 int64_t most = INT64_MAX) {
    prefetch_l2(l2_first(rows_share(v.w, row_bytes_of(FMT, v.cols), r0, r1, part, parts), most));
    if constexpr (FMT == DS4J_FMT_FP4_E2M1_B32)
        prefetch_l2(l2_first(rows_share(v.scale, v.cols >> 5, r0, r1, part, parts), most));
}

constexpr int MOE_MAX_E = 1024;  // most experts a grid over distinct experts handles (Args::E); more take one over picks

/**
 * The routed expert block x of a moe launch works on, with its picks (ascending pick index) in picks[0 .. *n), or -1
 * when the block has none: with a.E > 0, the x-th smallest expert id among ids[0 .. P) (a grid of min(P, E) blocks);
 * with a.E == 0, ids[x] when pick x is that expert's first pick (a grid of P blocks). Each picked expert goes to
 * exactly one block either way, and which block it is changes no bits. Every thread of the block gets the same answer;
 * every thread must call it (it synchronises the block). sh: block_excl_scan's 32 ints.
 */
__device__ __forceinline__ int moe_block_expert(const Args& a, int x, int32_t* picks, int* sh, int* n) {
    __shared__ unsigned present[MOE_MAX_E / 32];
    __shared__ int chosen;
    const int tid = threadIdx.x;
    int e;
    if (a.E > 0) {
        const int words = (a.E + 31) >> 5;
        if (tid == 0) chosen = -1;
        for (int i = tid; i < words; i += blockDim.x) present[i] = 0u;
        __syncthreads();
        for (int q = tid; q < a.P; q += blockDim.x) {
            const int id = a.ids[q];
            // ids lie in [0, E) (the entry points' contract); one outside is left out rather than written past the bitmap
            if ((unsigned)id < (unsigned)a.E) atomicOr(&present[id >> 5], 1u << (id & 31));
        }
        __syncthreads();
        const unsigned w = tid < words ? present[tid] : 0u;
        const int c = __popc(w);
        int total;
        const int before = block_excl_scan(c, sh, &total);  // experts picked in the words below this thread's
        if (x >= before && x < before + c) {
            unsigned m = w;
            for (int r = before; r < x; r++) m &= m - 1;  // drop the lowest bits until the x-th is lowest
            chosen = tid * 32 + __ffs((int)m) - 1;
        }
        __syncthreads();
        e = chosen;
    } else {
        if (tid == 0) chosen = 0;
        e = a.ids[x];
        __syncthreads();
        for (int q = tid; q < x; q += blockDim.x)
            if (a.ids[q] == e) chosen = 1;
        __syncthreads();
        if (chosen) e = -1;
    }
    if (e < 0 || !a.w_table[e]) return -1;  // no expert, or one in host memory: the caller fills its pick rows itself
    int cnt = 0;  // the same in every thread; with a.E == 0 no pick below x has the expert
    for (int q0 = a.E > 0 ? 0 : x; q0 < a.P; q0 += blockDim.x) {
        const int q = q0 + tid;
        const int f = q < a.P && a.ids[q] == e;
        int tot;
        const int at = block_excl_scan(f, sh, &tot);
        if (f) picks[cnt + at] = q;
        cnt += tot;
    }
    *n = cnt;
    return e;
}

__device__ __forceinline__ uint32_t word(const uint4& q, int i) {
    return i == 0 ? q.x : i == 1 ? q.y : i == 2 ? q.z : q.w;
}

/** Whether FP4 scale byte sb takes two multipliers (multipliers): 2^126 x scale past the largest BF16 exponent. */
__device__ __forceinline__ bool two_multipliers(uint32_t sb) { return sb + 126u > 254u; }

/**
 * Multipliers taking decoded FP4 patterns to value x scale for E8M0 scale byte sb: one (m1) when 2^126 x scale is a
 * normal BF16, else two (m1 = 2^126, m2 = scale; two = true), for scales above 2^1.
 */
template <int FMT>
__device__ __forceinline__ void multipliers(uint32_t sb, uint32_t& m1, uint32_t& m2, bool& two) {
    static_assert(FMT == DS4J_FMT_FP4_E2M1_B32, "FP8 scales multiply partial sums (fp8_mma)");
    constexpr uint32_t OFF = 126u;
    two = two_multipliers(sb);
    m1 = tc::pow2_pair(two ? OFF + 127u : sb + OFF);
    m2 = sb == 255u ? 0x7fc07fc0u : tc::pow2_pair(sb);  // E8M0 0xFF is NaN
}

/**
 * Whether any lane of the warp (every lane taking part) has two multipliers for any of the U chunk groups of FP4 scale
 * bytes sb: the same in every lane, so that callers run the k-steps of the common case (every scale at most 2^1, as in
 * trained weights) without the second multiplies, where a per-lane test would leave them in the instruction stream,
 * predicated off. False for the other formats.
 */
template <int FMT, int U, int MT>
__device__ __forceinline__ bool any_two(const uint32_t (&sb)[U][MT][2]) {
    if constexpr (FMT != DS4J_FMT_FP4_E2M1_B32) {
        return false;
    } else {
        bool t = false;
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int mi = 0; mi < MT; mi++) t = t || two_multipliers(sb[u][mi][0]) || two_multipliers(sb[u][mi][1]);
        return DS4J_ANY(t);
    }
}

/**
 * FP4 nibbles n and n + 4 of word u (n = 0 or 1) as BF16 patterns in the low and high halves: each nibble's bits 2..0
 * at 8..6 and its sign bit 3 at 15. The product by 65 2^(6 - 4n) writes the two isolated nibbles twice, 6 bits apart,
 * without carries (the copies do not overlap): the first copy puts bits 2..0 in place, the second the sign; the mask
 * keeps those. Three instructions a word pair (and, multiply, and) where separate shifts for the two fields took four.
 */
__device__ __forceinline__ uint32_t fp4_pair(uint32_t u, int n) {
    return ((u & (0x000f000fu << (4 * n))) * (65u << (6 - 4 * n))) & 0x81c081c0u;
}

/**
 * The two A words of k-step i for one row's chunk q: w0 = k slots (2t, 2t+1), w1 = (2t+8, 2t+9), as BF16 pairs
 * (l0, l1: the low BF16 parts of F16 weights). See the file comment for the column each slot holds. TWO false: the
 * caller knows that no lane of the warp has two multipliers (any_two), so none is tested for.
 */
template <int FMT, bool TWO = true>
__device__ __forceinline__ void a_words(const uint4& q, int i, uint32_t m1, uint32_t m2, bool two, uint32_t& w0,
                                        uint32_t& w1, uint32_t& l0, uint32_t& l1) {
    if constexpr (FMT == DS4J_FMT_BF16) {
        w0 = word(q, 2 * i);
        w1 = word(q, 2 * i + 1);
    } else if constexpr (FMT == DS4J_FMT_F16) {
        const float2 f0 = tc::h2_to_f2(word(q, 2 * i)), f1 = tc::h2_to_f2(word(q, 2 * i + 1));
        tc::split_bf16(f0.x, f0.y, w0, l0);  // exact: an F16 value has 11 significant bits, hi + lo hold 16
        tc::split_bf16(f1.x, f1.y, w1, l1);
    } else {
        // FP4 (FP8 takes fp8_a): nibbles n, n + 4 of word i / 2 (n = 2 (i % 2), then n + 1) as BF16 pairs (fp4_pair)
        static_assert(FMT == DS4J_FMT_FP4_E2M1_B32, "FP8 weights take fp8_a");
        const uint32_t u = word(q, i >> 1) >> (i & 1 ? 8 : 0);  // nibbles 2, 3, 6, 7 to the places of 0, 1, 4, 5
        w0 = tc::mul_bf16x2(fp4_pair(u, 0), m1);
        w1 = tc::mul_bf16x2(fp4_pair(u, 1), m1);
        if (TWO && two) {
            w0 = tc::mul_bf16x2(w0, m2);
            w1 = tc::mul_bf16x2(w1, m2);
        }
    }
}

/**
 * FP4 k-step i's four x values from the eight columns 8 (i / 2) .. 8 (i / 2) + 7 of its chunk (x0 the first four, x1
 * the others): columns (n, n + 4) and (n + 1, n + 5) of the word's 8, n = 2 (i % 2).
 */
__device__ __forceinline__ float4 fp4_kstep(const float4& x0, const float4& x1, int i) {
    return (i & 1) ? make_float4(x0.z, x1.z, x0.w, x1.w) : make_float4(x0.x, x1.x, x0.y, x1.y);
}

/** The B words {hi of k slots (2t, 2t+1), hi (2t+8, 2t+9), lo .., lo ..} of a k-step's four x values (b_fetch). */
__device__ __forceinline__ uint4 bf16_words(const float4& v) {
    uint32_t h0, h1, l0, l1;
    tc::split_bf16(v.x, v.y, h0, l0);
    tc::split_bf16(v.z, v.w, h1, l1);
    return make_uint4(h0, h1, l0, l1);
}

/**
 * The four x values of k-step i for token row xr (null: no token, zeros) at chunk column col, in the order of the k
 * slots (2t, 2t+1, 2t+8, 2t+9).
 */
template <int FMT>
__device__ __forceinline__ float4 b_fetch(const float* xr, int col, int i) {
    float4 r = make_float4(0.f, 0.f, 0.f, 0.f);
    if (xr) {
        if constexpr (FMT == DS4J_FMT_FP4_E2M1_B32) {
            // columns (n, n + 4) and (n + 1, n + 5) of the word's 8, n = 2 (i % 2); the two loads are shared by k-steps
            // 2j and 2j + 1, which the unrolled loop issues back to back
            const float4 x0 = __ldg(reinterpret_cast<const float4*>(xr + col + 8 * (i >> 1)));
            const float4 x1 = __ldg(reinterpret_cast<const float4*>(xr + col + 8 * (i >> 1) + 4));
            r = fp4_kstep(x0, x1, i);
        } else {
            r = __ldg(reinterpret_cast<const float4*>(xr + col + 4 * i));
        }
    }
    return r;
}

/**
 * The B words of k-step i for token row xr (null: no token) at chunk column col: (hi, lo) of the k slots (2t, 2t+1)
 * and (2t+8, 2t+9).
 */
template <int FMT>
__device__ __forceinline__ void b_words(const float* xr, int col, int i, uint32_t& h0, uint32_t& h1, uint32_t& l0,
                                        uint32_t& l1) {
    const uint4 w = bf16_words(b_fetch<FMT>(xr, col, i));
    h0 = w.x, h1 = w.y, l0 = w.z, l1 = w.w;
}

/**
 * 16 bytes of x from global to shared memory without registers (cp.async, L2 only: x is shared by many blocks); src
 * null: 16 zero bytes (nothing is read; any is a valid address to name). Lands at sk_cp_wait.
 */
__device__ __forceinline__ void sk_cp16(uint4* smem, const float* src, const float* any) {
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(sa), "l"(src ? src : any), "r"(src ? 16 : 0));
}

/** Waits for this thread's sk_cp16 copies (visible to this thread; a barrier makes them visible to the block). */
__device__ __forceinline__ void sk_cp_wait() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// ------------------------------------------------------------------------------------------- FP8 on F16 operands
//
// FP8 weights take F16 MMAs instead of the BF16 placement above: the hardware turns two e4m3 bytes into an exact F16
// pair in one instruction, where placing them into BF16 patterns took about a dozen per pair of words and left the
// one-row products bound by their instruction count rather than by memory (BENCHMARKS.md, tenth session). The E8M0
// block scale (one per 128 rows x 128 columns; a chunk group's 64 columns lie in one block) multiplies the chunk
// group's F32 partial sum instead of the weights. x is split into F16 hi + lo of x 2^-e, with e per (token, chunk group)
// such that the group's largest |x| lands in [2^14, 2^15) (no F16 overflow, full F16 precision at the top; e >= -126,
// so groups whose largest |x| is below 2^-112 land lower), and 2^e multiplies the partial sum too:
// |x 2^-e - hi - lo| <= 2^-22 |x 2^-e| + 2^-25 (F16 subnormals), so each x is within 2^-22 |x| + 2^-39 of its group's
// largest |x| (below 2^-112: + 2^-151, under F32's smallest subnormal). Both kernels, at every S, sum a row the same
// way: per chunk group, per n-tile, per m-tile, the k-steps' hi and lo MMAs into a zeroed partial p, then
// acc = fma(scale, p 2^e, acc).

/**
 * acc + one FP8 chunk group's partial sum p of one (row, token): fma(ws, p xs, acc) with ws the row's block scale and
 * xs the token's 2^e. The one place this rounding is written, so that the mma.sync and wgmma paths sum alike.
 */
__device__ __forceinline__ float fp8_fold(float acc, float p, float ws, float xs) { return fmaf(ws, __fmul_rn(p, xs), acc); }

/** The F16 A fragments of one chunk group of FP8 rows: a[i][mi] = k-step i of m-tile mi (q: rows g, g + 8). */
template <int MT>
__device__ __forceinline__ void fp8_a(const uint4 (&q)[MT][2], uint32_t (&a)[4][MT][4]) {
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) tc::e4m3x4_to_f16(word(q[mi][h], i), a[i][mi][h], a[i][mi][h + 2]);
}

/** fp8_x's first half: lane (g, t)'s 16 x values (token g's row xr, null: zeros, at its chunk's column col). */
__device__ __forceinline__ void fp8_x_fetch(const float* xr, int col, float4 (&v)[4]) {
#pragma unroll
    for (int i = 0; i < 4; i++) v[i] = b_fetch<DS4J_FMT_FP8_E4M3_B128>(xr, col, i);
}

/** fp8_x's second half: the B words of the x that fp8_x_fetch loaded; all 32 lanes call it (the group maximum). */
__device__ __forceinline__ float fp8_x_words(const float4 (&v)[4], uint4 (&bw)[4]) {
    float m = 0.f;  // fmaxf drops NaN: a NaN x stays NaN in hi
#pragma unroll
    for (int i = 0; i < 4; i++)
        m = fmaxf(m, fmaxf(fmaxf(fabsf(v[i].x), fabsf(v[i].y)), fmaxf(fabsf(v[i].z), fabsf(v[i].w))));
    m = fmaxf(m, DS4J_SHFL_XOR(m, 1));
    m = fmaxf(m, DS4J_SHFL_XOR(m, 2));
    // biased exponent of m; inf keeps e = 0 (an inf x makes the sum NaN: its lo is inf - inf); zero and groups below
    // 2^-112 (F32 subnormals included) take the largest scaling, 2^126
    const int be = (int)(__float_as_uint(m) >> 23);
    const int e = be == 255 ? 0 : max(be - 141, -126);
    const float sc = __uint_as_float((uint32_t)(127 - e) << 23);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float a0 = __fmul_rn(v[i].x, sc), a1 = __fmul_rn(v[i].y, sc), a2 = __fmul_rn(v[i].z, sc),
                    a3 = __fmul_rn(v[i].w, sc);
        tc::split_f16(a0, a1, bw[i].x, bw[i].z);
        tc::split_f16(a2, a3, bw[i].y, bw[i].w);
    }
    return __uint_as_float((uint32_t)(127 + e) << 23);
}

/**
 * x of one FP8 chunk group as F16 B words; all 32 lanes call it. Lane (g, t) passes token g's row xr (null: zeros) at
 * its chunk's column col and gets bw[i] = {hi of k slots (2t, 2t+1), hi (2t+8, 2t+9), lo .., lo ..} of k-step i (the
 * slots of b_words) for x 2^-e; returns 2^e, the same in the four lanes of token g (see the comment above).
 */
__device__ __forceinline__ float fp8_x(const float* xr, int col, uint4 (&bw)[4]) {
    float4 v[4];
    fp8_x_fetch(xr, col, v);
    return fp8_x_words(v, bw);
}

/**
 * acc[mi][nt] += one FP8 chunk group's products for n-tile nt: per m-tile, the four k-steps' hi and lo MMAs into a
 * zeroed partial p, then acc = fma(ws, p xs, acc) with ws the rows' block scales (rows g, g + 8) and xs the tokens' 2^e
 * (xs0: token 2t, xs1: token 2t + 1; C fragment c0, c1 = row g, c2, c3 = row g + 8).
 */
template <int MT, int NT>
__device__ __forceinline__ void fp8_mma(const uint32_t (&a)[4][MT][4], const uint4 (&bw)[4], const float (&ws)[MT][2],
                                        float xs0, float xs1, int nt, float (&acc)[MT][NT][4]) {
#pragma unroll
    for (int mi = 0; mi < MT; mi++) {
        float p[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            tc::mma_f16(p, a[i][mi], bw[i].x, bw[i].y);
            tc::mma_f16(p, a[i][mi], bw[i].z, bw[i].w);
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[mi][nt][j] = fp8_fold(acc[mi][nt][j], p[j], ws[mi][j >> 1], (j & 1) ? xs1 : xs0);
    }
}

/** The block scales of one chunk group's rows (sb: E8M0 bytes of rows g, g + 8 per m-tile) as floats. */
template <int MT>
__device__ __forceinline__ void fp8_ws(const uint32_t (&sb)[MT][2], float (&ws)[MT][2]) {
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) ws[mi][h] = e8m0(sb[mi][h]);
}

/**
 * One warp's share of a row tile: acc[mi][nt] += W[row0 + 16 mi .., its chunks] x[tokens of n-tile nt] for n-tiles
 * below ntv, over chunk groups warp, warp + nw, ... (chunk group j = chunks 4j .. 4j+3, one per lane t).
 */
template <int FMT, int MT, int NT>
__device__ __forceinline__ void warp_part(const WView& v, int64_t rb, bool wal, int row0, int row_end, int warp, int nw,
                                          const float* x, const int64_t* xoff, int ntv, float (&acc)[MT][NT][4]) {
    // loads in flight per lane: 2 MT U; one m-tile per warp (the small matrices' choice) doubles U instead, so that
    // every warp keeps eight 16-byte loads in flight (the registers allow it without spilling, FP4 aside)
    // a 64-token pass (NT = 8) halves U: its accumulators take the registers
    constexpr int U1 = (MT == 1 && FMT != DS4J_FMT_FP4_E2M1_B32 && FMT != DS4J_FMT_F16) ? 2 * Fmt<FMT>::U : Fmt<FMT>::U;
    constexpr int E = Fmt<FMT>::E, U = NT > 4 ? (U1 > 1 ? U1 / 2 : 1) : U1, KS = E / 4;
    constexpr bool QUANT = FMT == DS4J_FMT_FP4_E2M1_B32;  // scaled weights (FP8 takes its own branch)
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int nch = (int)(rb >> 4), ngr = (nch + 3) >> 2;
    // token rows (null: no token); a 64-token pass reads them from shared memory as it goes, to save 16 registers
    constexpr bool XR = NT <= 4;
    const float* xr[XR ? NT : 1];
#pragma unroll
    for (int nt = 0; nt < (XR ? NT : 0); nt++) {
        const int64_t o = nt < ntv ? xoff[nt * 8 + g] : -1;
        xr[nt] = o >= 0 ? x + o : nullptr;
    }
    const uint8_t* wr[MT][2];
    size_t sbase[MT][2];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = row0 + 16 * mi + 8 * h + g;
            wr[mi][h] = r < row_end ? v.w + (size_t)r * rb : nullptr;
            sbase[mi][h] = FMT == DS4J_FMT_FP8_E4M3_B128 ? (size_t)((v.row_base + r) >> 7) * v.scale_cols
                                                         : (size_t)r * (v.cols >> 5);
        }
    for (int j0 = warp; j0 < ngr; j0 += nw * U) {
        // all loads of U chunk groups first, so that 2 MT U 16-byte loads per lane are in flight
        uint4 q[U][MT][2];
        uint32_t sb[U][MT][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = (j0 + u * nw) * 4 + t;
            const bool ok = j0 + u * nw < ngr && c < nch;
#pragma unroll
            for (int mi = 0; mi < MT; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    q[u][mi][h] = make_uint4(0u, 0u, 0u, 0u);
                    sb[u][mi][h] = 127u;  // scale 1 where there is no weight (zeros), never NaN
                    if (ok && wr[mi][h]) {
                        const uint8_t* p = wr[mi][h] + (size_t)c * 16;
                        q[u][mi][h] = wal ? __ldg(reinterpret_cast<const uint4*>(p)) : tc::load16_bytes(p);
                        if constexpr (FMT == DS4J_FMT_FP4_E2M1_B32) sb[u][mi][h] = v.scale[sbase[mi][h] + c];
                    }
                    // FP8: the row's block scale in every lane of an existing chunk group, also past the row's last
                    // chunk: it multiplies the partial sum of the group's four lanes (fp8_mma), not the lane's weights
                    if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128)
                        if (j0 + u * nw < ngr && wr[mi][h]) sb[u][mi][h] = v.scale[sbase[mi][h] + (c >> 3)];
                }
        }
        const bool two_any = any_two<FMT, U, MT>(sb);
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (j0 + u * nw >= ngr) break;  // the same for every lane of the warp
            const int c = (j0 + u * nw) * 4 + t;
            const int col = c < nch ? c * E : -1;
            if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128) {
                uint32_t a8[4][MT][4];
                float ws[MT][2];
                fp8_a<MT>(q[u], a8);
                fp8_ws<MT>(sb[u], ws);
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
                    if (nt < ntv) {
                        const float* xt = nullptr;
                        if constexpr (XR) xt = xr[nt];
                        else if (xoff[nt * 8 + g] >= 0) xt = x + xoff[nt * 8 + g];
                        uint4 bw[4];
                        const float xs = fp8_x(col >= 0 ? xt : nullptr, col, bw);
                        fp8_mma<MT, NT>(a8, bw, ws, DS4J_SHFL(xs, 8 * t), DS4J_SHFL(xs, 8 * t + 4), nt, acc);
                    }
            } else {
                uint32_t m1[MT][2], m2[MT][2];
                bool two[MT][2];
#pragma unroll
                for (int mi = 0; mi < MT; mi++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        m1[mi][h] = m2[mi][h] = 0u;
                        two[mi][h] = false;
                        if constexpr (QUANT) multipliers<FMT>(sb[u][mi][h], m1[mi][h], m2[mi][h], two[mi][h]);
                    }
                // the k-steps, with or without the second multipliers (any_two); the same MMAs either way
                auto ksteps = [&](auto two_c) {
                    constexpr bool TW = decltype(two_c)::value;
#pragma unroll
                    for (int i = 0; i < KS; i++) {
                        // the A fragments of every m-tile first (PTX ISA, mma.m16n8k16: a0 = (row g, k 2t..2t+1), a1 =
                        // row g+8, a2 = k + 8, a3 = both), then each n-tile's B words once for all m-tiles: only four B
                        // words are live at a time, which leaves the registers for eight n-tiles of accumulators. Every
                        // accumulator still takes its MMAs in the order (k-step, hi, lo[, F16 low part]).
                        uint32_t a[MT][4], al[MT][4];
#pragma unroll
                        for (int mi = 0; mi < MT; mi++) {
                            a_words<FMT, TW>(q[u][mi][0], i, m1[mi][0], m2[mi][0], two[mi][0], a[mi][0], a[mi][2],
                                             al[mi][0], al[mi][2]);
                            a_words<FMT, TW>(q[u][mi][1], i, m1[mi][1], m2[mi][1], two[mi][1], a[mi][1], a[mi][3],
                                             al[mi][1], al[mi][3]);
                        }
#pragma unroll
                        for (int nt = 0; nt < NT; nt++)
                            if (nt < ntv) {
                                uint32_t bh0, bh1, bl0, bl1;
                                const float* xt = nullptr;
                                if constexpr (XR) xt = xr[nt];
                                else if (xoff[nt * 8 + g] >= 0) xt = x + xoff[nt * 8 + g];
                                b_words<FMT>(col >= 0 ? xt : nullptr, col, i, bh0, bh1, bl0, bl1);
#pragma unroll
                                for (int mi = 0; mi < MT; mi++) {
                                    tc::mma_bf16(acc[mi][nt], a[mi], bh0, bh1);
                                    tc::mma_bf16(acc[mi][nt], a[mi], bl0, bl1);
                                    if constexpr (FMT == DS4J_FMT_F16) tc::mma_bf16(acc[mi][nt], al[mi], bh0, bh1);
                                }
                            }
                    }
                };
                if (two_any) ksteps(std::true_type{});
                else ksteps(std::false_type{});
            }
        }
    }
}

/**
 * Block: one row tile of 16 MT rows (dense: of one group; moe: of one expert) for all tokens (picks), in passes of
 * 8 NT; nw = blockDim.x / 32 warps split the columns and their partial sums are added in warp order.
 */
template <int FMT, int MT, int NT, bool MOE>
__global__ void __launch_bounds__(MT >= 4 ? 256 : 512) skinny_kernel(Args a) {
    // dense: the block's row tile is known before the wait (moe: its expert is not, see below)
    DS4J_AWAIT_PREVIOUS_PREFETCHING(MOE ? L2Range{nullptr, 0} : sk_tile_range<FMT>(a, 16 * MT));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // the host only launches this on compute capability >= 8.0 (tc_device)
#else
    constexpr int RT = 16 * MT, TOK = 8 * NT;
    __shared__ float red[TOK * RT];
    __shared__ int64_t xoff[TOK], yoff[TOK];
    __shared__ int32_t picks[MOE ? MAX_PICKS : 1];
    __shared__ int sh[32];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, nw = blockDim.x >> 5, g = lane >> 2, t = lane & 3;
    WView v = a.v;
    int row0, row_end, n;
    int64_t xg = 0;
    if constexpr (MOE) {
        const int e = moe_block_expert(a, blockIdx.x, picks, sh, &n);
        if (e < 0) return;
        v.w = (const uint8_t*)a.w_table[e];
        v.scale = a.scale_table ? (const uint8_t*)a.scale_table[e] : nullptr;
        v.row_base = a.row_base_table ? a.row_base_table[e] : 0;
        row0 = blockIdx.y * RT;
        row_end = min(a.rows, row0 + RT);
        sk_prefetch_rows<FMT>(v, row0, row_end, 0, 1);
    } else {
        const int gi = blockIdx.x / a.tiles_per_grp, ti = blockIdx.x % a.tiles_per_grp;
        row0 = gi * a.grp + ti * RT;
        row_end = min(row0 + RT, (gi + 1) * a.grp);
        xg = (int64_t)gi * a.xgs;
        n = a.S;
    }
    const int64_t rb = row_bytes_of(FMT, v.cols);
    const bool wal = ((uintptr_t)v.w & 15u) == 0;
    for (int s0 = 0; s0 < n; s0 += TOK) {
        const int cnt = min(TOK, n - s0);
        __syncthreads();  // the previous pass has stored its results
        if (tid < TOK) {
            int64_t xo = -1, yo = -1;
            if (tid < cnt) {
                if constexpr (MOE) {
                    const int q = picks[s0 + tid];
                    xo = (int64_t)(a.x_per_pick ? q : q / a.k) * a.ldx;
                    yo = (int64_t)q * a.ldy;
                } else {
                    xo = (int64_t)(s0 + tid) * a.ldx + xg;
                    yo = (int64_t)(s0 + tid) * a.ldy;
                }
            }
            xoff[tid] = xo;
            yoff[tid] = yo;
        }
        __syncthreads();
        const int ntv = (cnt + 7) >> 3;
        float acc[MT][NT][4];
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[mi][nt][j] = 0.f;
        warp_part<FMT, MT, NT>(v, rb, wal, row0, row_end, warp, nw, a.x, xoff, ntv, acc);
        // partial sums in warp order; C fragment: c0, c1 = (row g, tokens 2t, 2t+1), c2, c3 = row g+8
        for (int w = 0; w < nw; w++) {
            if (warp == w) {
#pragma unroll
                for (int mi = 0; mi < MT; mi++)
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
                        if (nt < ntv)
#pragma unroll
                            for (int j = 0; j < 4; j++) {
                                const int i = (nt * 8 + 2 * t + (j & 1)) * RT + 16 * mi + g + (j >> 1) * 8;
                                red[i] = w == 0 ? acc[mi][nt][j] : red[i] + acc[mi][nt][j];
                            }
            }
            __syncthreads();
        }
        for (int i = tid; i < cnt * RT; i += blockDim.x) {
            const int tok = i / RT, r = row0 + i % RT;
            if (r < row_end) a.y[yoff[tok] + r] = red[i];
        }
    }
#endif
}

// ------------------------------------------------------------------------------------------- x shared in shared memory
//
// The variant with the activations staged per block (DS4J_SKINNY_SMEM): above, every warp loads and splits its own x
// for each chunk and k-step, so a block moves S K 4 bytes of x through L1 / L2 for only 16 MT weight rows (8x the FP8
// weight bytes at 64 rows). Here a block holds SM_W row tiles (one per warp, one m-tile each) of one column partition
// (the chunk groups p, p + nw, ... of the kernel above, nw from shape_for) or of all partitions in turn; its threads
// stage the partition's B words once into shared memory, in slices of `sl` chunk groups, and every warp reads them
// with one 16-byte LDS per (k-step, n-tile). Same bits: every accumulator takes the same MMAs (same A and B words,
// tail chunks included) in the same order, and a row's partitions are added in partition order, as the warps' partial
// sums above: in registers (total = p == 0 ? acc : total + acc) when a block walks all partitions, else through the
// scratch partials of every partition, added in order by skinny_combine. Which of the two runs (split) and how many
// row tiles a block holds change no bits, so they may follow S as well as the shape.

constexpr int SM_W = 8;               // row tiles (warps) per block
constexpr int SM_BYTES = 64 * 1024;   // staged B words per slice, at most (dynamic shared memory)

/** Where a launch of skinny_smem_kernel puts its results: y (split = false) or per-partition partials. */
struct SmArgs {
    int nw;          // column partitions (shape_for's warps per row tile)
    int rgpg;        // blocks' row groups (SM_W row tiles each) per group (dense) or per expert (moe)
    int tpg;         // row tiles of 16 rows per group or expert
    int sl;          // chunk groups per staged slice
    int split;       // 1: one partition per block, partials to part; 0: every partition, total to y
    int ns;          // dense: S; moe: P (the partials' token rows)
    float* part;     // [nw][ns][rows] partials when split
    int xloads;      // 1: the staging issues the x loads of SM_XL slots together (sm_xloads)
    int rg;          // moe: row groups per block, taken in turn (grid y: rgpg / rg rounded up); dense: 1
    int xasync;      // 1: the staging copies raw x into the slots by cp.async, then splits it in place (sm_xasync)
    int lean;        // 1: the lean instance runs (sm_lean)
    int64_t pf_max;  // most weight bytes a block asks the L2 for before it starts (run_smem: l2_share)
};

/**
 * The rows [r0, r1) of skinny_smem_kernel's block, as the kernel body takes them: dense, its row group (SM_W row tiles
 * of 16 MT rows of its group); moe, its b.rg row groups of its expert.
 */
template <int MT, bool MOE>
__device__ __forceinline__ void sm_block_rows(const Args& a, const SmArgs& b, int& r0, int& r1) {
    constexpr int RT = 16 * MT;
    if constexpr (MOE) {
        const int t0 = (int)blockIdx.y * b.rg * SM_W, t1 = min(min((int)(blockIdx.y + 1) * b.rg, b.rgpg) * SM_W, b.tpg);
        r0 = t0 * RT;
        r1 = min(a.rows, t1 * RT);
    } else {
        const int gi = blockIdx.x / b.rgpg, t0 = (blockIdx.x % b.rgpg) * SM_W, t1 = min(t0 + SM_W, b.tpg);
        r0 = gi * a.grp + t0 * RT;
        r1 = min(gi * a.grp + t1 * RT, (gi + 1) * a.grp);
    }
}

/** The weights of skinny_smem_kernel's dense block: its rows, its partition's share when b.split. */
template <int FMT, int MT>
__device__ __forceinline__ L2Range sm_dense_range(const Args& a, const SmArgs& b) {
    int r0, r1;
    sm_block_rows<MT, false>(a, b, r0, r1);
    return l2_first(rows_share(a.v.w, row_bytes_of(FMT, a.v.cols), r0, r1, b.split ? (int)blockIdx.y : 0, b.split ? b.nw : 1),
                    b.pf_max);
}

constexpr int SM_GT = SM_BYTES / (4 * 512);  // most (chunk group, n-tile) pairs of one FP8 slice (4 k-steps each)
constexpr int SM_XL = 4;  // slots per thread whose x loads the staging issues together (SmArgs::xloads)

/** B words of one (chunk group, n-tile, k-step, lane) slot: {hi k 2t..2t+1, hi k 2t+8.., lo .., lo ..}. */
template <int FMT, int NT>
__device__ __forceinline__ int sm_slot(int jj, int nt, int i, int lane) {
    return ((jj * NT + nt) * (Fmt<FMT>::E / 4) + i) * 32 + lane;
}

/**
 * Stores the B words w = {hi k 2t..2t+1, hi k 2t+8.., lo .., lo ..} of (chunk group jj, n-tile nt, k-step i, lane (g, t))
 * into the staged slice xs: at slot sm_slot (mma.sync reads them back as fragments), or (WG) into the K-major core
 * matrices that wgmma reads (tc_wgmma.h): per (jj, i) the hi block, then the lo block, each 8 NT tokens x 16 k BF16
 * (NT x 256 bytes), token nt 8 + g at k 2t, 2t + 1 in core 2 nt and at k 2t + 8, 2t + 9 in core 2 nt + 1. The same bytes
 * in all, so a slice's size does not change. A warp's 32 lanes store 32 consecutive words of each core pair.
 */
template <int FMT, int NT, bool WG>
__device__ __forceinline__ void sm_put(uint4* xs, int jj, int nt, int i, int lane, uint4 w) {
    if constexpr (!WG) {
        xs[sm_slot<FMT, NT>(jj, nt, i, lane)] = w;
    } else {
        uint32_t* b = reinterpret_cast<uint32_t*>(xs) + (jj * (Fmt<FMT>::E / 4) + i) * 2 * NT * 64;
        const int o = nt * 64 + (lane >> 2) * 4 + (lane & 3);
        b[o] = w.x;
        b[o + 32] = w.y;
        b[NT * 64 + o] = w.z;
        b[NT * 64 + o + 32] = w.w;
    }
}

#ifndef DS4J_SKINNY_PIPE
#define DS4J_SKINNY_PIPE 1
#endif
/**
 * Whether skinny_smem_kernel loads a warp's next chunk groups while it computes the current ones (two batches of
 * Fmt::U chunk groups in registers): FP8 only. On the H200 (BENCHMARKS.md, eleventh session; equal mm-bench hashes)
 * FP8 wo_a / wo_b at 1 and 16 rows took 17.0 / 21.9 and 17.1 / 22.3 µs against 17.7 / 24.2 and 18.1 / 24.6 without;
 * the FP4 routed experts the same way (124 registers, two blocks per multiprocessor instead of three) slowed the
 * decode step from 64-67 to 58 tokens/s. DS4J_SKINNY_PIPE=0 at build time turns it off (for measurements). Same bits.
 */
template <int FMT>
struct SmPipe {
    static constexpr bool on = DS4J_SKINNY_PIPE && FMT == DS4J_FMT_FP8_E4M3_B128;
};

/**
 * Chunk groups in flight per lane in skinny_smem_kernel (U): warp_part's U for one m-tile, 64-token passes included,
 * except FP8 with SmPipe, whose two batches of Fmt::U groups each keep as many loads in flight.
 */
template <int FMT, int MT>
struct SmU {
    static constexpr bool TWICE = MT == 1 && (FMT == DS4J_FMT_BF16 || (FMT == DS4J_FMT_FP8_E4M3_B128 && !SmPipe<FMT>::on));
    static constexpr int U = TWICE ? 2 * Fmt<FMT>::U : Fmt<FMT>::U;
};

/** One warp's weight chunks (and scale bytes) of up to SmU::U chunk groups, loaded before they are decoded. */
template <int FMT, int MT>
struct SmBatch {
    uint4 q[SmU<FMT, MT>::U][MT][2];
    uint32_t sb[SmU<FMT, MT>::U][MT][2];
};

/**
 * Loads chunk groups m .. m + min(U, left) - 1 of partition p (chunk group j = p + m nw) of the warp's rows: zeros (and
 * scale 1) where a chunk is past the row's end or the warp holds no such row, as warp_part.
 */
template <int FMT, int MT>
__device__ __forceinline__ void sm_load(SmBatch<FMT, MT>& bt, const uint8_t* const (&wr)[MT][2],
                                        const size_t (&sbase)[MT][2], const uint8_t* scale, bool wal, int nch, int p,
                                        int nw, int m, int left) {
    constexpr int U = SmU<FMT, MT>::U;
    const int t = threadIdx.x & 3;
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = (p + (m + u) * nw) * 4 + t;
        const bool ok = u < left && c < nch;
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                bt.q[u][mi][h] = make_uint4(0u, 0u, 0u, 0u);
                bt.sb[u][mi][h] = 127u;
                if (ok && wr[mi][h]) {
                    const uint8_t* ptr = wr[mi][h] + (size_t)c * 16;
                    bt.q[u][mi][h] = wal ? __ldg(reinterpret_cast<const uint4*>(ptr)) : tc::load16_bytes(ptr);
                    if constexpr (FMT == DS4J_FMT_FP4_E2M1_B32) bt.sb[u][mi][h] = scale[sbase[mi][h] + c];
                }
                if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128)  // as warp_part: every lane of an existing chunk group
                    if (u < left && wr[mi][h]) bt.sb[u][mi][h] = scale[sbase[mi][h] + (c >> 3)];
            }
    }
}

/**
 * Runs run(no second multipliers, FULL, NV) for NV = ntv (the pass's n-tiles holding tokens, 1 .. NV0) and returns
 * true; false (nothing run) for an ntv outside that range. Passes of 8 n-tiles (64 tokens) take only their full count.
 */
template <int NV0, class R>
__device__ __forceinline__ bool run_full(int ntv, R& run) {
    if constexpr (NV0 < 1) {
        return false;
    } else {
        if (ntv == NV0) {
            run(std::false_type{}, std::true_type{}, std::integral_constant<int, NV0>{});
            return true;
        }
        constexpr int NEXT = NV0 > 4 ? 0 : NV0 - 1;
        return run_full<NEXT>(ntv, run);
    }
}

/**
 * Chunk groups a batch of the lean instances (sm_lean), two batches in flight as SmPipe. On an H100 (BENCHMARKS.md,
 * forty-first session; `tools/device/run.sh mm-bench --rows 1,5 --reps 50`, equal result hashes) 4 a batch (128
 * registers) took wq_b at 1 row 17.1 µs against 16.6 with 2, and 2 a batch built for three blocks a multiprocessor
 * (80 registers, spills) 25.8.
 */
constexpr int SM_LU = 2;

/** One warp's chunks of up to SM_LU chunk groups (rows g and g + 8) and, FP8, the E8M0 scale byte they share. */
struct SmLeanBatch {
    uint4 q[SM_LU][2];
    uint32_t sb[SM_LU];
};

/**
 * sm_load for a warp whose 16 rows are all present (FP8: and share one 128-row scale block), in a product whose rows are
 * whole chunk groups (64 FP8 or 32 BF16 columns) at a 16-byte aligned base (the host's checks: sm_lean, and
 * skinny_matmul's refusal of an unaligned base, which sm_lean relies on): no test per chunk, no zero fill, addresses
 * from two row pointers, FP8's scale one byte per chunk group for rows g and g + 8. Loads chunk groups
 * j = p + (m + u) nw for u below min(SM_LU, left): bytes w0 + 64 j (row g at lane t's chunk of chunk group 0) and
 * w1 + 64 j (row g + 8); FP8, scale srow[j / 2] (a chunk group's four chunks lie in one 128-column block: c / 8 = j / 2).
 */
template <int FMT>
__device__ __forceinline__ void sm_lean_load(SmLeanBatch& lb, const uint8_t* w0, const uint8_t* w1, const uint8_t* srow,
                                             int p, int nw, int m, int left) {
#pragma unroll
    for (int u = 0; u < SM_LU; u++)
        if (u < left) {
            const int j = p + (m + u) * nw;
            const size_t o = (size_t)j * 64;
            lb.q[u][0] = __ldg(reinterpret_cast<const uint4*>(w0 + o));
            lb.q[u][1] = __ldg(reinterpret_cast<const uint4*>(w1 + o));
            if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128) lb.sb[u] = __ldg(srow + (j >> 1));
        }
}

/**
 * sm_compute for one m-tile and one n-tile on an SmLeanBatch. BF16: per chunk group, per k-step, the hi and lo MMAs into
 * acc. FP8: per chunk group fp8_a, the rows' block scale (one byte for both), the staged B words and 2^e, fp8_mma. The
 * same operands and operations in the same order, so the same bits.
 */
template <int FMT>
__device__ __forceinline__ void sm_lean_compute(const SmLeanBatch& lb, const uint4* xs, const float* xsc, int jj0, int left,
                                                float (&acc)[1][1][4]) {
    const int lane = threadIdx.x & 31;
    if constexpr (FMT == DS4J_FMT_BF16) {
        // sm_compute's BF16 order for one m-tile and one n-tile: per chunk group, per k-step, hi then lo into acc
#pragma unroll
        for (int u = 0; u < SM_LU; u++) {
            if (u >= left) break;
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const uint32_t a[4] = {word(lb.q[u][0], 2 * i), word(lb.q[u][1], 2 * i), word(lb.q[u][0], 2 * i + 1),
                                       word(lb.q[u][1], 2 * i + 1)};
                const uint4 b = xs[sm_slot<DS4J_FMT_BF16, 1>(jj0 + u, 0, i, lane)];
                tc::mma_bf16(acc[0][0], a, b.x, b.y);
                tc::mma_bf16(acc[0][0], a, b.z, b.w);
            }
        }
    } else {
#pragma unroll
        for (int u = 0; u < SM_LU; u++) {
            if (u >= left) break;
            const uint4 q[1][2] = {{lb.q[u][0], lb.q[u][1]}};
            uint32_t a8[4][1][4];
            fp8_a<1>(q, a8);
            const float w = e8m0(lb.sb[u]);
            const float ws[1][2] = {{w, w}};
            uint4 bw[4];
#pragma unroll
            for (int i = 0; i < 4; i++) bw[i] = xs[sm_slot<DS4J_FMT_FP8_E4M3_B128, 1>(jj0 + u, 0, i, lane)];
            const float2 e2 = *reinterpret_cast<const float2*>(xsc + (jj0 + u) * 8 + 2 * (lane & 3));
            fp8_mma<1, 1>(a8, bw, ws, e2.x, e2.y, 0, acc);
        }
    }
}

/**
 * acc += the loaded chunk groups (min(U, left) of them) x the B words staged in xs for slots jj0 .., in warp_part's
 * MMA order: per chunk group, per k-step, per n-tile below ntv, per m-tile: hi, lo[, the F16 low part]; FP8: per chunk
 * group, per n-tile, per m-tile as fp8_mma, with each token's 2^e from xsc.
 */
template <int FMT, int MT, int NT>
__device__ __forceinline__ void sm_compute(const SmBatch<FMT, MT>& bt, const uint4* xs, const float* xsc, int jj0,
                                           int left, int ntv, float (&acc)[MT][NT][4]) {
    constexpr int U = SmU<FMT, MT>::U, KS = Fmt<FMT>::E / 4;
    constexpr bool QUANT = FMT == DS4J_FMT_FP4_E2M1_B32;  // scaled weights (FP8 takes its own branch)
    const int lane = threadIdx.x & 31;
    if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128) {
        // warp_part's FP8 order; the B words and each token's 2^e (xsc) as the staging left them
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (u >= left) break;
            uint32_t a8[4][MT][4];
            float ws[MT][2];
            fp8_a<MT>(bt.q[u], a8);
            fp8_ws<MT>(bt.sb[u], ws);
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                if (nt < ntv) {
                    uint4 bw[4];
#pragma unroll
                    for (int i = 0; i < 4; i++) bw[i] = xs[sm_slot<FMT, NT>(jj0 + u, nt, i, lane)];
                    const float2 e2 = *reinterpret_cast<const float2*>(xsc + ((jj0 + u) * NT + nt) * 8 + 2 * (lane & 3));
                    fp8_mma<MT, NT>(a8, bw, ws, e2.x, e2.y, nt, acc);
                }
        }
    } else {
        // FP4: a batch of U chunk groups in a pass of several n-tiles runs without the tests for the batch's end and
        // for each n-tile (FULL, NV n-tiles holding tokens, a constant: one variant per count, run_full): straight-line
        // code that the compiler may schedule across k-steps and chunk groups, where the tested variant predicated
        // every MMA and synchronised the warp before it (at 64 rows most experts' 24-odd picks fill 3 of a pass's 4
        // n-tiles, so the tested variant was the common one). One-tile passes stay as they are: their 80 registers
        // would spill. Without the second multipliers unless some lane has two (TW, any_two; the ends are then
        // tested too: one slow variant, not two). The same MMAs in the same order in every variant.
        auto run = [&](auto two_c, auto full_c, auto nv_c) {
            constexpr bool TW = decltype(two_c)::value, FULL = decltype(full_c)::value;
            constexpr int NV = decltype(nv_c)::value;
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (!FULL && u >= left) break;  // the same for every lane of the warp
                uint32_t m1[MT][2], m2[MT][2];
                bool two[MT][2];
#pragma unroll
                for (int mi = 0; mi < MT; mi++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        m1[mi][h] = m2[mi][h] = 0u;
                        two[mi][h] = false;
                        if constexpr (QUANT) multipliers<FMT>(bt.sb[u][mi][h], m1[mi][h], m2[mi][h], two[mi][h]);
                    }
#pragma unroll
                for (int i = 0; i < KS; i++) {
                    uint32_t a[MT][4], al[MT][4];
#pragma unroll
                    for (int mi = 0; mi < MT; mi++) {
                        a_words<FMT, TW>(bt.q[u][mi][0], i, m1[mi][0], m2[mi][0], two[mi][0], a[mi][0], a[mi][2],
                                         al[mi][0], al[mi][2]);
                        a_words<FMT, TW>(bt.q[u][mi][1], i, m1[mi][1], m2[mi][1], two[mi][1], a[mi][1], a[mi][3],
                                         al[mi][1], al[mi][3]);
                    }
#pragma unroll
                    for (int nt = 0; nt < NT; nt++)
                        if (FULL ? nt < NV : nt < ntv) {
                            const uint4 b = xs[sm_slot<FMT, NT>(jj0 + u, nt, i, lane)];
#pragma unroll
                            for (int mi = 0; mi < MT; mi++) {
                                tc::mma_bf16(acc[mi][nt], a[mi], b.x, b.y);
                                tc::mma_bf16(acc[mi][nt], a[mi], b.z, b.w);
                                if constexpr (FMT == DS4J_FMT_F16) tc::mma_bf16(acc[mi][nt], al[mi], b.x, b.y);
                            }
                        }
                }
            }
        };
        using All = std::integral_constant<int, NT>;
        if (any_two<FMT, U, MT>(bt.sb)) run(std::true_type{}, std::false_type{}, All{});
        else if (!(QUANT && NT > 1 && left >= U && run_full<NT>(ntv, run))) run(std::false_type{}, std::false_type{}, All{});
    }
}

/**
 * sm_compute on warpgroup MMAs (tc_wgmma.h), one m-tile per warp, all NT n-tiles of the pass (the staging zeroes no
 * tile past ntv; their columns are never stored). BF16 and FP4 weights: stages of up to four k-steps, each the warp's
 * A fragments decoded, then the warpgroup's hi and lo MMAs over the pass's 8 NT tokens into acc. FP8 weights: per chunk
 * group its four k-steps' hi and lo F16 MMAs into a zeroed partial, then acc = fma(scale, partial 2^e, acc) per element
 * as fp8_mma. Per (row, token) the same products in the same order as sm_compute, so the same sums. Every warp of the
 * block calls it, rows or not (wgmma takes the whole warpgroup; a warp without rows decodes zeros). Returns with every
 * MMA done. DS4J_WG_INFLIGHT 1 (a build-time choice) lets a stage's MMAs run while the warp decodes the next one's A
 * into a second register set, for BF16 and FP4; not measured: it needs ~198 registers, one block a multiprocessor.
 */
#ifndef DS4J_WG_INFLIGHT
#define DS4J_WG_INFLIGHT 0
#endif
template <int FMT, int NT>
__device__ __forceinline__ void sm_compute_wg(const SmBatch<FMT, 1>& bt, const uint4* xs, const float* xsc, int jj0,
                                              int left, float (&acc)[1][NT][4]) {
    constexpr int U = SmU<FMT, 1>::U, KS = Fmt<FMT>::E / 4, N = 8 * NT;
    const uint8_t* xb = reinterpret_cast<const uint8_t*>(xs);
    float* d = &acc[0][0][0];
    if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128) {
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (u >= left) break;  // the same in every warp of the block
            uint32_t a8[4][1][4];
            float ws[1][2];
            fp8_a<1>(bt.q[u], a8);
            fp8_ws<1>(bt.sb[u], ws);
            float pp[4 * NT];
#pragma unroll
            for (int j = 0; j < 4 * NT; j++) {
                pp[j] = 0.f;
                wg::fence_operand(pp[j]);
            }
            wg::fence();
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint8_t* hb = xb + ((jj0 + u) * KS + i) * 2 * NT * 256;
                wg::mma_rs<N, false>(pp, a8[i][0], wg::desc(hb), 1);
                wg::mma_rs<N, false>(pp, a8[i][0], wg::desc(hb + NT * 256), 1);
            }
            wg::commit();
            wg::wait<0>();
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const float2 e2 = *reinterpret_cast<const float2*>(xsc + ((jj0 + u) * NT + nt) * 8 + 2 * (lane & 3));
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    wg::fence_operand(pp[4 * nt + j]);
                    d[4 * nt + j] = fp8_fold(d[4 * nt + j], pp[4 * nt + j], ws[0][j >> 1], (j & 1) ? e2.y : e2.x);
                }
            }
        }
    } else {
        static_assert(FMT == DS4J_FMT_BF16 || FMT == DS4J_FMT_FP4_E2M1_B32, "BF16 and FP4 weights take two MMAs a k-step");
        constexpr int H = KS < 4 ? KS : 4, SPU = KS / H;  // k-steps a stage, stages a chunk group
        constexpr bool QUANT = FMT == DS4J_FMT_FP4_E2M1_B32;
        uint32_t a[2][H][4];
#pragma unroll
        for (int st = 0; st < U * SPU; st++) {
            const int u = st / SPU, i0 = (st % SPU) * H;
            if (u >= left) break;  // the same in every warp of the block
            uint32_t m1[2] = {0u, 0u}, m2[2] = {0u, 0u}, lo;
            bool two[2] = {false, false};
            if constexpr (QUANT) {
                multipliers<FMT>(bt.sb[u][0][0], m1[0], m2[0], two[0]);
                multipliers<FMT>(bt.sb[u][0][1], m1[1], m2[1], two[1]);
            }
            uint32_t (&as)[H][4] = a[st & 1];
#pragma unroll
            for (int i = 0; i < H; i++) {
                a_words<FMT>(bt.q[u][0][0], i0 + i, m1[0], m2[0], two[0], as[i][0], as[i][2], lo, lo);
                a_words<FMT>(bt.q[u][0][1], i0 + i, m1[1], m2[1], two[1], as[i][1], as[i][3], lo, lo);
            }
#pragma unroll
            for (int j = 0; j < 4 * NT; j++) wg::fence_operand(d[j]);
            wg::fence();
#pragma unroll
            for (int i = 0; i < H; i++) {
                const uint8_t* hb = xb + ((jj0 + u) * KS + i0 + i) * 2 * NT * 256;
                wg::mma_rs<N, true>(d, as[i], wg::desc(hb), 1);
                wg::mma_rs<N, true>(d, as[i], wg::desc(hb + NT * 256), 1);
            }
            wg::commit();
            wg::wait<DS4J_WG_INFLIGHT>();  // with 1: the stage before is done, its register set free for the next
        }
        wg::wait<0>();
#pragma unroll
        for (int j = 0; j < 4 * NT; j++) wg::fence_operand(d[j]);
    }
}

/**
 * Blocks per multiprocessor skinny_smem_kernel is built for (__launch_bounds__): 2 for FP8 in 8-token passes (the
 * pipelined loads of SmPipe stay within 128 registers, no spills). 3 for the FP4 routed experts in
 * 8-token passes (decode, verify), which caps them at 80 registers (from 97; 44 bytes spilled): their launches are
 * many short blocks (picks x row groups x column partitions: at one row 768 for w1 / w3 and 1,536 for w2, 2.9 and 5.8
 * waves at two blocks per multiprocessor), whose fixed latencies a third block per multiprocessor overlaps. On the
 * H200 (`tools/device/run.sh mm-bench --only routed`, graph figures, equal result hashes; BENCHMARKS.md, eighth
 * session) w1 / w3 went from 16.4 to 20.7 % of HBM at 1 row and from 16.8 to 21.7 % at 5, w2 from 12.8 to 18.0 % and
 * 12.6 to 18.7 %; 4 blocks (64 registers) was slower than 3 at both row counts; the FP8 products were slower with 3.
 * Same bits at any value. Every other instance gets 0, which leaves the register choice to the compiler as without a
 * second __launch_bounds__ argument (1 would not: it changes the registers of most other instances).
 */
constexpr int sm_min_blocks(int fmt, int nt, bool moe) {
    return moe && nt == 1 && fmt == DS4J_FMT_FP4_E2M1_B32 ? 3 : nt == 1 && fmt == DS4J_FMT_FP8_E4M3_B128 ? 2 : 0;
}

/**
 * WG instances (sm_wgmma) are built for two blocks per multiprocessor (128 registers) in passes of up to 4 n-tiles and
 * for one in 8-tile passes, whose 64 tokens of accumulators spill at 128, and with DS4J_WG_INFLIGHT 1.
 *
 * Block: SM_W row tiles of 16 MT rows (dense: of one group; moe: of one expert, b.rg such row groups in turn), one
 * per warp, for all tokens (picks) in passes of 8 NT; partition blockIdx.y (dense) / blockIdx.z (moe) when b.split,
 * else every partition in order. Grid: dense (groups rgpg, split ? nw : 1); moe (picks, or a.E when it is set, one block
 * per distinct expert picked (moe_block_expert), rgpg / rg rounded up, split ? nw : 1).
 */
template <int FMT, int MT, int NT, bool MOE, bool WG = false, bool LEAN = false>
__global__ void __launch_bounds__(SM_W * 32, WG ? (DS4J_WG_INFLIGHT || NT > 4 ? 1 : 2) : sm_min_blocks(FMT, NT, MOE))
    skinny_smem_kernel(Args a, SmArgs b) {
    // dense: the block's rows are known before the wait (moe: its expert is not, see below)
    DS4J_AWAIT_PREVIOUS_PREFETCHING(MOE ? L2Range{nullptr, 0} : sm_dense_range<FMT, MT>(a, b));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();
#else
    constexpr int RT = 16 * MT, TOK = 8 * NT, E = Fmt<FMT>::E, KS = E / 4;
    static_assert(!WG || (MT == 1 && NT >= 2 && FMT != DS4J_FMT_F16),
                  "the wgmma instances: one m-tile per warp, passes of 2 .. 8 n-tiles, BF16, FP8 or FP4 weights");
    extern __shared__ __align__(128) uint4 sk_xs[];
    // WG with cp.async staging: the raw x lands past the slice's B words (sm_plan doubles the shared memory), since the
    // core-matrix layout does not put an item's words where its raw x was
    uint4* const sk_raw = WG && b.xasync ? sk_xs + b.sl * NT * KS * 32 : sk_xs;
    // FP8: each staged (chunk group, token)'s 2^e (fp8_x) at (jj NT + nt) 8 + token; sl NT <= SM_GT (sm_plan's slices)
    __shared__ __align__(8) float sk_xsc[FMT == DS4J_FMT_FP8_E4M3_B128 ? SM_GT * 8 : 2];
    __shared__ int64_t xoff[TOK], yoff[TOK];
    __shared__ int32_t tokid[TOK];
    __shared__ int32_t picks[MOE ? MAX_PICKS : 1];
    __shared__ int sh[32];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    WView v = a.v;
    int row0, row_end, n, pb;
    int64_t xg = 0;
    if constexpr (MOE) {
        // a host expert's pick rows: the caller fills them (skinny_combine skips them too)
        const int e = moe_block_expert(a, blockIdx.x, picks, sh, &n);
        if (e < 0) return;
        v.w = (const uint8_t*)a.w_table[e];
        v.scale = a.scale_table ? (const uint8_t*)a.scale_table[e] : nullptr;
        v.row_base = a.row_base_table ? a.row_base_table[e] : 0;
        pb = b.split ? (int)blockIdx.z : 0;
        int r0, r1;  // the rows of the block's row groups; its partition's share of them
        sm_block_rows<MT, true>(a, b, r0, r1);
        sk_prefetch_rows<FMT>(v, r0, r1, pb, b.split ? b.nw : 1, b.pf_max);
    } else {
        const int gi = blockIdx.x / b.rgpg, ti = (blockIdx.x % b.rgpg) * SM_W + warp;
        row0 = gi * a.grp + ti * RT;
        row_end = ti < b.tpg ? min(row0 + RT, (gi + 1) * a.grp) : row0;
        xg = (int64_t)gi * a.xgs;
        n = a.S;
        pb = b.split ? (int)blockIdx.y : 0;
    }
    const int pe = b.split ? pb + 1 : b.nw;
    const int64_t rb = row_bytes_of(FMT, v.cols);
    const bool wal = ((uintptr_t)v.w & 15u) == 0;
    const int nch = (int)(rb >> 4), ngr = (nch + 3) >> 2;
    // moe: the block's row groups in turn (b.rg of them), the staged x kept from one to the next where it is the same
    // slice (one pass, one partition and one slice per block: decode and verify steps); dense: one row group
    int staged_s0 = -1, staged_p = -1, staged_m0 = -1;
    const int rg_end = MOE ? min((int)(blockIdx.y + 1) * b.rg, b.rgpg) : 1;
    for (int rgi = MOE ? (int)blockIdx.y * b.rg : 0; rgi < rg_end; rgi++) {
    if constexpr (MOE) {
        const int ti = rgi * SM_W + warp;
        row0 = ti * RT;
        row_end = ti < b.tpg ? min(a.rows, row0 + RT) : row0;
    }
    const bool mine = row0 < row_end;  // the warp holds rows
    const uint8_t* wr[MT][2];
    size_t sbase[MT][2];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = row0 + 16 * mi + 8 * h + g;
            wr[mi][h] = r < row_end ? v.w + (size_t)r * rb : nullptr;
            sbase[mi][h] = FMT == DS4J_FMT_FP8_E4M3_B128 ? (size_t)((v.row_base + r) >> 7) * v.scale_cols
                                                         : (size_t)r * (v.cols >> 5);
        }
    // the lean instances (LEAN, sm_lean): row g's and row g + 8's bytes at lane t's chunk, and FP8's scale row
    static_assert(!LEAN || ((FMT == DS4J_FMT_FP8_E4M3_B128 || FMT == DS4J_FMT_BF16) && MT == 1 && NT == 1 && !MOE && !WG),
                  "the lean instances: dense FP8 and BF16 products, one m-tile per warp, one n-tile, mma.sync");
    const uint8_t* const lw0 = LEAN && mine ? wr[0][0] + 16 * t : nullptr;
    const uint8_t* const lw1 = LEAN && mine ? wr[0][1] + 16 * t : nullptr;
    const uint8_t* const lsr = LEAN && FMT == DS4J_FMT_FP8_E4M3_B128 ? v.scale + sbase[0][0] : nullptr;
    for (int s0 = 0; s0 < n; s0 += TOK) {
        const int cnt = min(TOK, n - s0);
        __syncthreads();  // the previous pass is done with xoff, yoff
        if (tid < TOK) {
            int64_t xo = -1, yo = -1;
            int id = -1;
            if (tid < cnt) {
                if constexpr (MOE) {
                    const int q = picks[s0 + tid];
                    xo = (int64_t)(a.x_per_pick ? q : q / a.k) * a.ldx;
                    yo = (int64_t)q * a.ldy;
                    id = q;
                } else {
                    xo = (int64_t)(s0 + tid) * a.ldx + xg;
                    yo = (int64_t)(s0 + tid) * a.ldy;
                    id = s0 + tid;
                }
            }
            xoff[tid] = xo;
            yoff[tid] = yo;
            tokid[tid] = id;
        }
        __syncthreads();
        const int ntv = (cnt + 7) >> 3;
        float tot[MT][NT][4];
        for (int p = pb; p < pe; p++) {
            float acc[MT][NT][4];
#pragma unroll
            for (int mi = 0; mi < MT; mi++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int j = 0; j < 4; j++) acc[mi][nt][j] = 0.f;
            const int ngp = p < ngr ? (ngr - p + b.nw - 1) / b.nw : 0;  // chunk groups of partition p
            for (int m0 = 0; m0 < ngp; m0 += b.sl) {
                const int sln = min(b.sl, ngp - m0);
                const bool stage = !MOE || s0 != staged_s0 || p != staged_p || m0 != staged_m0;  // the same in every thread
                if (stage) __syncthreads();  // every warp is done with the previous slice
                // the slice's first weight loads go out before the staging, so that they overlap it
                SmBatch<FMT, MT> bt;
                SmLeanBatch lb;
                if constexpr (LEAN)
                    if (mine) sm_lean_load<FMT>(lb, lw0, lw1, lsr, p, b.nw, m0, sln);
                if (!LEAN && (mine || WG)) sm_load<FMT, MT>(bt, wr, sbase, v.scale, wal, nch, p, b.nw, m0, sln);
                const int slots = stage ? sln * ntv * KS * 32 : 0;
                staged_s0 = s0, staged_p = p, staged_m0 = m0;
                if (b.xasync) {
                    // two rounds by the same thread per item (chunk group, n-tile, lane): first its raw x goes to its
                    // own KS slots (slot i: columns 4i .. 4i + 3 of the lane's chunk, as b_fetch reads them) by
                    // cp.async, every item's copies in flight together; then the thread turns its items' raw x into B
                    // words in place (the same words as the staging below)
                    const int items = slots / KS;
                    for (int e = tid; e < items; e += blockDim.x) {
                        const int ln = e & 31, nt = (e >> 5) % ntv, jj = (e >> 5) / ntv;
                        const int c = (p + (m0 + jj) * b.nw) * 4 + (ln & 3);
                        const int64_t o = xoff[nt * 8 + (ln >> 2)];
                        const bool ok = c < nch && o >= 0;
#pragma unroll
                        for (int i = 0; i < KS; i++)
                            sk_cp16(&sk_raw[sm_slot<FMT, NT>(jj, nt, i, ln)], ok ? a.x + o + c * E + 4 * i : nullptr, a.x);
                    }
                    sk_cp_wait();  // this thread's copies only: it turns no other thread's items, so no barrier
                    for (int e = tid; e < items; e += blockDim.x) {
                        const int ln = e & 31, nt = (e >> 5) % ntv, jj = (e >> 5) / ntv;
                        uint4* sl4 = &sk_raw[sm_slot<FMT, NT>(jj, nt, 0, ln)];  // slot i at sl4[32 i]
                        if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128) {
                            float4 v[4];
                            uint4 bw[4];
#pragma unroll
                            for (int i = 0; i < 4; i++) v[i] = *reinterpret_cast<const float4*>(&sl4[32 * i]);
                            const float xsv = fp8_x_words(v, bw);
#pragma unroll
                            for (int i = 0; i < 4; i++) {
                                if constexpr (WG) sm_put<FMT, NT, true>(sk_xs, jj, nt, i, ln, bw[i]);
                                else sl4[32 * i] = bw[i];
                            }
                            if ((ln & 3) == 0) sk_xsc[(jj * NT + nt) * 8 + (ln >> 2)] = xsv;
                        } else {
                            // k-step i's words from its four x values in b_fetch's order; FP4 pairs k-steps 2j, 2j + 1
#pragma unroll
                            for (int i = 0; i < KS; i += 2) {
                                const float4 x0 = *reinterpret_cast<const float4*>(&sl4[32 * i]);
                                const float4 x1 = *reinterpret_cast<const float4*>(&sl4[32 * (i + 1)]);
                                const bool fp4 = FMT == DS4J_FMT_FP4_E2M1_B32;
                                const uint4 w0 = bf16_words(fp4 ? fp4_kstep(x0, x1, i) : x0);
                                const uint4 w1 = bf16_words(fp4 ? fp4_kstep(x0, x1, i + 1) : x1);
                                if constexpr (WG) {
                                    sm_put<FMT, NT, true>(sk_xs, jj, nt, i, ln, w0);
                                    sm_put<FMT, NT, true>(sk_xs, jj, nt, i + 1, ln, w1);
                                } else {
                                    sl4[32 * i] = w0;
                                    sl4[32 * (i + 1)] = w1;
                                }
                            }
                        }
                    }
                } else if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128) {
                    // one (chunk group, n-tile, lane) per thread, its four k-steps together (fp8_x's group maximum
                    // takes the token's four lanes t): whole warps, as slots / KS is a multiple of 32
                    for (int e = tid; e < slots / KS; e += blockDim.x) {
                        const int ln = e & 31, nt = (e >> 5) % ntv, jj = (e >> 5) / ntv;
                        const int c = (p + (m0 + jj) * b.nw) * 4 + (ln & 3);
                        const int64_t o = xoff[nt * 8 + (ln >> 2)];
                        uint4 bw[4];
                        const float xsv = fp8_x(c < nch && o >= 0 ? a.x + o : nullptr, c < nch ? c * E : -1, bw);
#pragma unroll
                        for (int i = 0; i < 4; i++) sm_put<FMT, NT, WG>(sk_xs, jj, nt, i, ln, bw[i]);
                        if ((ln & 3) == 0) sk_xsc[(jj * NT + nt) * 8 + (ln >> 2)] = xsv;
                    }
                } else if (b.xloads) {
                    // SM_XL slots per thread at a time, their x loads all issued before the first is split, so that a
                    // thread waits for one L2 round trip per SM_XL slots instead of one per slot
                    for (int e0 = tid; e0 < slots; e0 += SM_XL * blockDim.x) {
                        float4 xv[SM_XL];
                        int dst[SM_XL], jj_[SM_XL], nt_[SM_XL], i_[SM_XL], ln_[SM_XL];
#pragma unroll
                        for (int k = 0; k < SM_XL; k++) {
                            const int e = e0 + k * blockDim.x;
                            dst[k] = -1;
                            xv[k] = make_float4(0.f, 0.f, 0.f, 0.f);
                            if (e < slots) {
                                const int ln = e & 31, i = (e >> 5) % KS, rest = (e >> 5) / KS, nt = rest % ntv, jj = rest / ntv;
                                const int c = (p + (m0 + jj) * b.nw) * 4 + (ln & 3);
                                const int64_t o = xoff[nt * 8 + (ln >> 2)];
                                xv[k] = b_fetch<FMT>(c < nch && o >= 0 ? a.x + o : nullptr, c < nch ? c * E : -1, i);
                                dst[k] = 0;
                                jj_[k] = jj, nt_[k] = nt, i_[k] = i, ln_[k] = ln;
                            }
                        }
#pragma unroll
                        for (int k = 0; k < SM_XL; k++)
                            if (dst[k] >= 0) sm_put<FMT, NT, WG>(sk_xs, jj_[k], nt_[k], i_[k], ln_[k], bf16_words(xv[k]));
                    }
                } else {
                    for (int e = tid; e < slots; e += blockDim.x) {
                        const int ln = e & 31, i = (e >> 5) % KS, rest = (e >> 5) / KS, nt = rest % ntv, jj = rest / ntv;
                        const int c = (p + (m0 + jj) * b.nw) * 4 + (ln & 3);
                        const int64_t o = xoff[nt * 8 + (ln >> 2)];
                        uint32_t h0, h1, l0, l1;
                        b_words<FMT>(c < nch && o >= 0 ? a.x + o : nullptr, c < nch ? c * E : -1, i, h0, h1, l0, l1);
                        sm_put<FMT, NT, WG>(sk_xs, jj, nt, i, ln, make_uint4(h0, h1, l0, l1));
                    }
                }
                if (stage) {
                    if constexpr (WG) wg::fence_proxy_async();  // the staged words, to wgmma's reads
                    __syncthreads();
                }
                if constexpr (LEAN) {
                    // two batches in turn, each loaded while the other computes (SmPipe's order without a copy of
                    // the batch: a load with nothing left loads nothing)
                    if (mine)
                        for (int jj0 = 0; jj0 < sln; jj0 += 2 * SM_LU) {
                            SmLeanBatch nx;
                            sm_lean_load<FMT>(nx, lw0, lw1, lsr, p, b.nw, m0 + jj0 + SM_LU, sln - jj0 - SM_LU);
                            sm_lean_compute<FMT>(lb, sk_xs, sk_xsc, jj0, sln - jj0, acc);
                            if (jj0 + SM_LU >= sln) break;
                            sm_lean_load<FMT>(lb, lw0, lw1, lsr, p, b.nw, m0 + jj0 + 2 * SM_LU, sln - jj0 - 2 * SM_LU);
                            sm_lean_compute<FMT>(nx, sk_xs, sk_xsc, jj0 + SM_LU, sln - jj0 - SM_LU, acc);
                        }
                    continue;
                }
                // WG: every warp, rows or not (the warpgroup's MMAs take all four)
                if (mine || WG) {
                    constexpr int U = SmU<FMT, MT>::U;
                    auto compute = [&](const SmBatch<FMT, MT>& bb, int jj0) {
                        if constexpr (WG) sm_compute_wg<FMT, NT>(bb, sk_xs, sk_xsc, jj0, sln - jj0, acc);
                        else sm_compute<FMT, MT, NT>(bb, sk_xs, sk_xsc, jj0, sln - jj0, ntv, acc);
                    };
                    if constexpr (SmPipe<FMT>::on) {
                        // the next chunk groups' loads go out before this batch is decoded and multiplied, so that a
                        // warp keeps loads in flight while it computes (same MMAs in the same order)
                        for (int jj0 = 0; jj0 < sln; jj0 += U) {
                            SmBatch<FMT, MT> nx;
                            if (jj0 + U < sln)
                                sm_load<FMT, MT>(nx, wr, sbase, v.scale, wal, nch, p, b.nw, m0 + jj0 + U, sln - jj0 - U);
                            compute(bt, jj0);
                            if (jj0 + U < sln) bt = nx;
                        }
                    } else {
                        compute(bt, 0);
                        for (int jj0 = U; jj0 < sln; jj0 += U) {
                            sm_load<FMT, MT>(bt, wr, sbase, v.scale, wal, nch, p, b.nw, m0 + jj0, sln - jj0);
                            compute(bt, jj0);
                        }
                    }
                }
            }
#pragma unroll
            for (int mi = 0; mi < MT; mi++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int j = 0; j < 4; j++) tot[mi][nt][j] = p == pb ? acc[mi][nt][j] : tot[mi][nt][j] + acc[mi][nt][j];
        }
        if (!mine) continue;
        // C fragment: c0, c1 = (row g, tokens 2t, 2t+1), c2, c3 = row g+8. Each token's output row is found once for
        // its 2 MT values (the lookup and its 64-bit offset were per value: ~15 % of a 64-row routed pass's
        // instructions on the H100, BENCHMARKS.md thirty-seventh session)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            if (nt < ntv)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    const int tok = nt * 8 + 2 * t + c;
                    if (tok >= cnt) continue;
                    float* const out = b.split ? b.part + ((size_t)pb * b.ns + tokid[tok]) * a.rows : a.y + yoff[tok];
#pragma unroll
                    for (int mi = 0; mi < MT; mi++)
#pragma unroll
                        for (int h = 0; h < 2; h++) {
                            const int r = row0 + 16 * mi + g + 8 * h;
                            if (r < row_end) out[r] = tot[mi][nt][2 * h + c];
                        }
                }
    }
    }
#endif
}

/** Whether sum_partials runs skinny_combine<4> (4 outputs a thread, 16-byte accesses) for these arguments, else <1>. */
inline bool combine_by_4(int rows, int64_t ldy, const float* part, const float* y) {
    return rows % 4 == 0 && ldy % 4 == 0 && ((uintptr_t)part & 15u) == 0 && ((uintptr_t)y & 15u) == 0;
}

/**
 * y[s ldy + r] = part[0][s][r] + part[1][s][r] + ... + part[nw - 1][s][r], added in that order (the warp order of
 * skinny_kernel), for s < ns, r < rows; moe (ids non-null): rows s of picks whose expert is in host memory untouched.
 * A thread takes V consecutive r of one s (V = 4: rows, ldy and both pointers 16-byte multiples) and sums them by
 * planes_sum (common.h): PLANES_BATCH partitions' values loaded at a time, added in partition order (a 64-row step's
 * partials are megabytes, a 1-row step's a chain of nw round trips).
 */
template <int V>
__global__ void skinny_combine(const float* part, int nw, int ns, int rows, float* y, int64_t ldy, const int32_t* ids,
                               void* const* w_table) {
    DS4J_AWAIT_PREVIOUS();
    using Vec = typename std::conditional<V == 4, float4, float>::type;
    const int64_t i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    if (i >= (int64_t)ns * rows) return;
    const int s = (int)(i / rows), r = (int)(i % rows);
    if (ids && !w_table[ids[s]]) return;
    *reinterpret_cast<Vec*>(y + s * ldy + r) = planes_sum<Vec>(part, nw, (int64_t)ns * rows, i);
}

/** m-tiles per warp for a format, (rows of a group, groups) and the number of matrices streamed at once (units). */
static int mt_for(int format, int64_t grp, int64_t groups, int units) {
    const int hi = format == DS4J_FMT_FP4_E2M1_B32 ? Fmt<DS4J_FMT_FP4_E2M1_B32>::MT_HI : 2;
    const int64_t tiles = groups * ((grp + 16 * hi - 1) / (16 * hi)) * units;
    return tiles >= TARGET_TILES ? hi : hi / 2;
}

/**
 * Warps per block for a shape (never for S): enough warps in all to stream the weights, each with at least two chunk
 * groups of its row tile's columns; at most 16 (8 with four m-tiles per warp, whose registers allow 256 threads).
 */
static int warps_for(int mt, int64_t tiles, int64_t rb) {
    const int64_t ngr = (rb / 16 + 3) / 4;
    int nw = 4;
    const int target = target_warps();
    while (nw < (mt >= 4 ? 8 : 16) && tiles * nw < target && ngr >= 4 * nw) nw *= 2;
    return nw;
}

/** Fewest rows (all groups of an FP8 product) from which steps of more than 32 rows run in passes of 32 (wide_passes). */
constexpr int64_t NARROW_MIN_ROWS = 2048;
/** Fewest rows from which a product of any format runs steps of more than 32 rows in passes of 32 (the output head). */
constexpr int64_t NARROW_MIN_ROWS_ANY = 65536;

/**
 * Whether a step of more than 32 rows against a product of `rows` rows (all groups) in `format` runs in one pass of 8
 * n-tiles (true) or in passes of 32 rows, each reading the weights (false). DS4J_SKINNY_WIDE (read once): 2 (default)
 * passes of 32 for FP8 products of at least NARROW_MIN_ROWS rows, one pass for the others; 1 always one pass; 0 always
 * passes of 32. A 64-token FP8 pass holds 186 registers a thread, one block per multiprocessor, so a product whose
 * blocks exceed one wave runs two latency-bound waves of it; two 32-row passes run two blocks per multiprocessor. On
 * the H200 (`DS4J_SKINNY_WIDE=1|2 tools/device/run.sh mm-bench --rows 48,64 --reps 20`, graph µs at 64 rows, equal
 * result hashes; BENCHMARKS.md, twenty-second session) passes of 32 took wq_b 69.1 against 83.1, wo_a 74.1 against
 * 93.5, wo_b 70.2 against 91.7, the shared expert's w1 / w3 23.5 against 27.7 and w2 24.7 against 28.4, where wq_a
 * (1,024 rows) took 18.1 against 15.1 and wkv (512) 16.9 against 13.9 in passes of 32 (twenty-first session), so those
 * keep one pass; a 64-entry decode step of the 43-layer model 83.8–87.2 ms against 88.9–90.3. Other formats keep one
 * pass (the BF16 product of 1,024 rows moved by 3 %) up to NARROW_MIN_ROWS_ANY rows: the BF16 head (129,280 rows, 1 GB
 * read once per pass) takes 1,702 µs in two passes of 32 at 64 rows against 2,109 in one, 1,558 against 1,854 at 48
 * (an H100, `DS4J_SKINNY_WIDE=0|1 tools/device/run.sh mm-bench --rows 1,32,48,64 --reps 20 --only lm_head`, twice
 * each, equal result hashes; BENCHMARKS.md, fifty-first session). The pass width never changes a row's sums.
 */
static bool wide_passes(int format, int64_t rows) {
    static std::atomic<int> c{0};
    const int v = env_choice(c, "DS4J_SKINNY_WIDE", 2, 0, 2);
    return v == 1 || (v == 2 && rows < NARROW_MIN_ROWS_ANY && (format != DS4J_FMT_FP8_E4M3_B128 || rows < NARROW_MIN_ROWS));
}

/**
 * m-tiles per warp in 64-token passes, for every format: DS4J_SKINNY_WIDE_MT (1 or 2; default 2). More m-tiles share
 * each activation fragment (2: half the activation reads of 1), fewer give more blocks; four would not fit the
 * registers beside 64 tokens of accumulators.
 */
static int wide_mt() {
    static std::atomic<int> c{0};
    return env_choice(c, "DS4J_SKINNY_WIDE_MT", 2, 1, 2);
}

/**
 * The launch shape of one product: nw warps per block, mt m-tiles per warp, nt n-tiles per pass, tpg row tiles per
 * group (dense) or per expert (moe).
 */
struct Shape {
    int mt, nw, nt;
    int64_t tpg;
};

/**
 * The shape for S token rows against `groups` groups of grp rows (moe: one group of an expert's rows, units = k experts
 * streamed at once). The column split (nw: warp w of a block sums chunk groups w, w + nw, ...), and with it the order in
 * which every row's products are summed, comes from the matrix shape alone, through the m-tiles the narrow passes take;
 * S only picks the pass width (nt: (S + 7) / 8 up to 4 n-tiles, 8 for more than 32 rows where wide_passes says so) and,
 * in 64-token passes, the
 * m-tiles per warp (wide_mt), which decide which rows a warp holds, never how a row is summed.
 */
static Shape shape_for(int format, int64_t grp, int64_t groups, int units, int64_t rb, int S) {
    Shape sh;
    sh.mt = mt_for(format, grp, groups, units);
    sh.tpg = (grp + 16 * sh.mt - 1) / (16 * sh.mt);
    sh.nw = warps_for(sh.mt, groups * sh.tpg * units, rb);
    sh.nt = S > 32 ? (wide_passes(format, grp * groups) ? 8 : 4) : (S + 7) / 8;
    if (sh.nt == 8) {
        sh.mt = wide_mt();
        sh.tpg = (grp + 16 * sh.mt - 1) / (16 * sh.mt);
    }
    return sh;
}

/**
 * Steps of at least DS4J_SKINNY_SMEM rows (0: none; default 1: every step, the faster choice at every row count on the
 * H200 by `tools/device/run.sh mm-bench --rows 1,5,16,32,64`, e.g. wo_b FP8 at 1 row 24.7 us against 30.1, routed FP4
 * w1 / w3 at 1 row 28.6 against 45.1) take skinny_smem_kernel where sm_plan allows it. Read once.
 */
static int smem_min_rows() {
    static std::atomic<int> c{0};
    return env_choice(c, "DS4J_SKINNY_SMEM", 1, 0, 64);
}

/**
 * Whether the staging of skinny_smem_kernel issues the x loads of SM_XL slots per thread together, for a BF16, F16 or
 * FP4 weight format (FP8 stages a lane's whole chunk at once, fp8_x): DS4J_SKINNY_XLOADS "1" yes, "0" (default) no. On
 * the H200 (`tools/device/run.sh mm-bench --rows 1,5,16`, graph µs, equal result hashes; BENCHMARKS.md, sixth session)
 * the FP8 products of the BF16 path gained from it, the FP4 experts lost 2-4 % (two x loads a slot: twice the
 * registers), the BF16 product lost 2-4 % at 1 and 5 rows and gained 7 % at 16; F16 was not measured. Same bits either
 * way. Read once.
 */
static bool sm_xloads(int format) {
    static std::atomic<int> c{0};
    return env_choice(c, "DS4J_SKINNY_XLOADS", 0, 0, 1) == 1 && format != DS4J_FMT_FP8_E4M3_B128;
}

/**
 * Whether skinny_smem_kernel stages x by cp.async (SmArgs::xasync) for a weight format: bit `format` of
 * DS4J_SKINNY_XASYNC (0 .. 31; 30 every format, 0 none), by default FP4 only. On the H200
 * (`tools/device/run.sh mm-bench --rows 1,5,16,64 --reps 50`, graph µs, equal result hashes; BENCHMARKS.md, nineteenth
 * session) the routed FP4 experts took 162.8 / 196.6 µs (w1 / w3, w2) at 64 rows against 198.3 / 224.7 with the register
 * staging, 72.0 / 87.1 against 79.1 / 87.2 at 16, 61.5 / 64.6 against 63.9 / 63.9 at 5 and 25.8 / 28.2 against 26.1 /
 * 27.9 at 1; the FP8 products lost at 5 rows and more (wo_b at 16 rows 31.4 against 26.1: their staging issues a lane's
 * whole chunk at once already). Same bits either way. Read once.
 */
static int sm_xasync(int format) {
    static std::atomic<int> c{0};
    return (env_choice(c, "DS4J_SKINNY_XASYNC", 1 << DS4J_FMT_FP4_E2M1_B32, 0, 31) >> format) & 1;
}

/**
 * DS4J_SKINNY_SPLIT (read once): 2 (default) lets sm_plan choose the column split from the shape as described there; 0
 * never splits (every block walks all partitions, also where the row tiles alone give few warps, which the default
 * leaves to the kernel without staging); 1 splits wherever the partials fit SM_SCRATCH_CAP. For measurements: the
 * partitions and their order are shape_for's either way, so no value changes.
 */
static int split_choice() {
    static std::atomic<int> c{0};
    return env_choice(c, "DS4J_SKINNY_SPLIT", 2, 0, 2);
}

/**
 * Routed-expert launches of more rows than this keep the kernel without staging (see skinny_moe): 64 (every skinny
 * step), or DS4J_SKINNY_MOE_SMEM_MAX (0 .. 64) for measurements. With the pass width from the picks per expert
 * (moe_pass_rows; 3 n-tiles at 64 rows and 16 experts then), staging won at 64 rows too (187.5 µs for w1 / w3 against 294.9
 * without); 8-tile passes stay unstaged (skinny_moe). Read once.
 */
static int sm_moe_max_rows() {
    static std::atomic<int> c{0};
    return env_choice(c, "DS4J_SKINNY_MOE_SMEM_MAX", 64, 0, 64);
}

/**
 * The rows that pick the pass width of a routed-expert launch of S > 32 rows over E distinct experts (E > 0) with P
 * picks, where S alone would take 8-tile passes: the mean picks per expert m = P / E rounded up, plus one n-tile's
 * worth while that stays within 32 (4 n-tiles, the staged passes' widest): about half the experts hold more than the
 * mean, and each of those would take a second pass that decodes its weights again, where the FP4 experts' time is the
 * decoding, not the MMAs. At most S; S itself for S <= 32. DS4J_SKINNY_MOE_NT "1" adds the n-tile only where m fits in
 * one (the rule before), "0" takes S at every S (both for measurements). On the H200 (`DS4J_SKINNY_MOE_NT=1|2
 * tools/device/run.sh mm-bench --rows 40,48,56,64 --reps 50 --only routed`, graph µs, twice each, equal result hashes;
 * BENCHMARKS.md, twentieth session) w1 / w3 at 40 / 48 / 56 / 64 rows took 86.4 / 98.2 / 102.5 / 105.5 against 127.6 /
 * 118.5 / 123.3 / 154.5 with the rule before, w2 101.0 / 112.7 / 120.5 / 165.4 against 155.5 / 107.0 / 180.0 / 192.0.
 * Earlier (the rule before against S; `tools/device/run.sh mm-bench --rows 16,32,64 --only routed`, 16 experts, graph
 * µs of w1 / w3 and w2; BENCHMARKS.md, twelfth session) 3 n-tiles at 64 rows took 187.5 / 227.3 and
 * 200.3 / 226.5 (two builds) against 302.9–308.1 / 318.1–324.1 with 8; at 32 rows 2 n-tiles against S's 4 gave 84.0 /
 * 97.3 in one build and 119.9 / 160.3 in the other (S's: 90.3–95.4 / 101.3–106.6), so S keeps its pass width there;
 * at 16 rows 1 n-tile instead of 2 was slower (101.3 / 123.7 against 75.4 / 86.8). The pass width never changes a
 * row's sums (shape_for). Read once.
 */
static int moe_pass_rows(int S, int64_t P, int E) {
    static std::atomic<int> c{0};
    const int rule = env_choice(c, "DS4J_SKINNY_MOE_NT", 2, 0, 2);
    if (S <= 32 || E <= 0 || rule == 0) return S;
    const int64_t m = (P + E - 1) / E, r = m <= 8 || (rule == 2 && m + 8 <= 32) ? m + 8 : m;
    return (int)(r < S ? r : S);
}

/**
 * Row groups per block of a staged routed-expert launch (SmArgs::rg) with gx expert blocks, rgpg row groups per expert,
 * parts column partitions as blocks, nt n-tiles per pass and rb weight bytes a row. By default (DS4J_SKINNY_MOE_RG unset
 * or 0): for passes of one n-tile (at most 8 picks of an expert at a time: decode and verify steps), the largest power
 * of two up to 16 whose row groups hold at most MOE_BLOCK_BYTES of weights; for wider passes, the largest power of two
 * up to 16 that leaves at least MOE_BLOCKS blocks. DS4J_SKINNY_MOE_RG 1 .. 16 fixes it (for measurements). Row groups of
 * one block share its expert lookup and, where the slice is the same, its staged x; fewer per block give more blocks.
 * On the H200 (`tools/device/run.sh mm-bench --rows 1,5,16 --only routed`, graph µs, equal result hashes; BENCHMARKS.md,
 * ninth and seventeenth sessions): at 1 row the best were 2 row groups for w1 / w3 (2048 rows of 2048 bytes) and 4 for
 * w2 (4096 of 1024), 512 KiB a block either way (384 blocks); at 5 rows (14 of 16 experts) the same 2 and 4 (62.5 and
 * 67.2 µs), where the block count's rule took 4 and 8 (66.5, 76.5); at 16 rows (2 n-tiles) the block count's 4 and 8
 * (74.4, 88.0) against 82.3 and 91.2 with 512 KiB. Same bits at any value (each warp computes its row tile as before).
 * Read once.
 */
constexpr int64_t MOE_BLOCKS = 384;  // about three blocks per H200 multiprocessor (132), the FP4 experts' occupancy
constexpr int64_t MOE_BLOCK_BYTES = 512 << 10;  // weights of a one-n-tile pass's block
static int moe_row_groups(unsigned gx, int rgpg, int parts, int nt, int64_t rb) {
    static std::atomic<int> c{0};
    const int v = env_choice(c, "DS4J_SKINNY_MOE_RG", 0, 0, 16);
    int rg = v;
    if (v == 0 && nt == 1) {
        rg = 1;
        while (rg < 16 && 2 * rg * SM_W * 16 * rb <= MOE_BLOCK_BYTES) rg *= 2;
    } else if (v == 0) {
        const int64_t blocks = (int64_t)gx * rgpg * parts;
        rg = 1;
        while (rg < 16 && blocks / (2 * rg) >= MOE_BLOCKS) rg *= 2;
    }
    return rg < 1 ? 1 : rg > rgpg ? rgpg : rg;
}

/**
 * Whether routed-expert launches whose number of experts is known take a grid over distinct experts (moe_block_expert):
 * DS4J_SKINNY_MOE_GRID "0" keeps the grid over picks, for measurements (same bits either way). Read once.
 */
static bool expert_grid() {
    static std::atomic<int> c{0};
    return env_choice(c, "DS4J_SKINNY_MOE_GRID", 1, 0, 1) == 1;
}

#ifndef DS4J_WGMMA
#define DS4J_WGMMA 0
#endif
/**
 * Whether a staged launch of this format and pass width takes the warpgroup-MMA instance of skinny_smem_kernel
 * (sm_compute_wg): a library built for sm_90a (DS4J_WGMMA), a device of compute capability 9, passes of 2 .. 8 n-tiles,
 * and bit `format` set in DS4J_SKINNY_WGMMA (0 .. 31, read once; the instances exist for BF16, FP8 and FP4, 28 all
 * three, 0 none; the same bits either way). By default FP8 only. On the H200 (`DS4J_SKINNY_WGMMA=0|28
 * tools/device/run.sh mm-bench --rows 16,32,64 --reps 50`, alternating, graph µs; equal result hashes once the staging
 * was fenced for the async proxy, on an H100; BENCHMARKS.md, thirty-sixth session) the FP8 products gained at 32 and 64 rows (wq_b 29.9 / 54.4 against 36.6 / 68.5, wo_b 31.7 /
 * 57.1 against 37.7 / 69.3, the shared expert's w1 / w3 11.8 / 19.1 against 14.1 / 23.6) and matched at 16; the FP4
 * routed experts lost (w1 / w3 70.9 / 99.0 / 131.3 against 65.4 / 87.6 / 111.0 at 16 / 32 / 64 rows: their time is the
 * decoding, which every warp of a warpgroup now does, rows or not, and each stage waits for its MMAs) and so did the
 * BF16 product (12.2 / 13.9 / 17.6 against 9.1 / 11.0 / 15.9). A 64-entry decode step of the 43-layer model took 68.7–69.0
 * ms with the FP8 products on wgmma against 73.1–74.6 ms without.
 */
static bool sm_wgmma(ds4j_ctx* ctx, int format, int nt) {
    static std::atomic<int> c{0};
    if (!DS4J_WGMMA || nt < 2 || format == DS4J_FMT_F16) return false;
    return ((env_choice(c, "DS4J_SKINNY_WGMMA", 1 << DS4J_FMT_FP8_E4M3_B128, 0, 31) >> format) & 1) &&
           device_cc_major(ctx->device) == 9;
}

/**
 * Whether a dense FP8 or BF16 launch of one n-tile (steps of up to 8 rows) on mma.sync runs the lean instance
 * (SmArgs::lean, sm_lean_load): every row tile whole (grp a multiple of 16), rows of whole chunk groups (cols a multiple
 * of 64 FP8, 32 BF16), FP8 tiles inside one 128-row scale block (row_base a multiple of 16); V4's products all are. The
 * same products in the same order as the other instance, so the same bits; fewer instructions a chunk group (no test
 * or zero fill per chunk, FP8's scale one byte for both rows, addresses from two row pointers). On an H100
 * (BENCHMARKS.md, forty-first session; `tools/device/run.sh mm-bench --rows 1,5 --reps 50` with the lean instance off
 * and on, on the measurement libraries described there, whose DS4J_SKINNY_LEAN values differ from this mask; equal
 * result hashes) graph µs at 1 row wq_b 16.5–16.9 against 20.4–20.5, wo_a 18.5–18.7 against 22.1–22.4, wo_b
 * 18.6–18.9 against 22.2–22.3, the shared expert's w1 / w3 7.7–7.9 against 8.6–8.8, BF16 1,024 × 4,096 7.9 against 8.4;
 * ncu on wq_b: 4.77 M warp instructions against 6.71 M, 21.4 µs against 24.9. DS4J_SKINNY_LEAN (read once): a bit mask
 * over the weight formats as DS4J_SKINNY_XASYNC's, default 12 (FP8 and BF16), 8 FP8 only, 0 none; for measurements.
 */
static bool sm_lean(int format, int nt, bool wg, const WView& v, int64_t grp) {
    static std::atomic<int> c{0};
    const int mask = env_choice(c, "DS4J_SKINNY_LEAN", (1 << DS4J_FMT_FP8_E4M3_B128) | (1 << DS4J_FMT_BF16), 0, 31);
    if (!((mask >> format) & 1) || nt != 1 || wg || grp % 16 != 0) return false;
    if (format == DS4J_FMT_FP8_E4M3_B128) return v.row_base % 16 == 0 && v.cols % 64 == 0;
    return format == DS4J_FMT_BF16 && v.cols % 32 == 0;
}

/** Most bytes of partials one split launch of skinny_smem_kernel uses; larger ones walk every partition per block. */
constexpr int64_t SM_SCRATCH_CAP = 64ll << 20;

/** A launch of skinny_smem_kernel: whether it runs (on), its pass width, its block arguments and dynamic smem bytes. */
struct SmPlan {
    bool on;
    bool wg;  // the warpgroup-MMA instance (sm_wgmma)
    int nt;
    SmArgs b;
    int64_t smem;
};

/**
 * The x-sharing launch for S token rows (ns rows of partials: S, or the picks of a moe launch) against groups of grp
 * rows (rows in all per group set, or per expert; units as in shape_for). The partitions are shape_for's nw, so the
 * bits are skinny_kernel's; the column split across blocks (split) is taken where the row tiles alone give fewer warps
 * than target_warps and the partials fit SM_SCRATCH_CAP (split_choice forces it on or off). Off (the kernel above
 * runs) below smem_min_rows, and, unless the split is forced, where neither split nor enough row tiles would keep the
 * weights streaming.
 */
static SmPlan sm_plan(ds4j_ctx* ctx, int format, int64_t grp, int64_t groups, int units, int64_t rb, int S, int64_t ns,
                      int64_t rows) {
    SmPlan pl{};
    const int min_rows = smem_min_rows();
    if (min_rows == 0 || S < min_rows) return pl;
    const Shape sh = shape_for(format, grp, groups, units, rb, S);
    const int ks = (format == DS4J_FMT_FP4_E2M1_B32 ? 32 : format == DS4J_FMT_FP8_E4M3_B128 ? 16 : 8) / 4;
    const int64_t tpg = (grp + 15) / 16, ngr = (rb / 16 + 3) / 4, ngp = (ngr + sh.nw - 1) / sh.nw;
    const int64_t per = (int64_t)sh.nt * ks * 512;  // bytes of one chunk group's B words
    pl.wg = sm_wgmma(ctx, format, sh.nt);
    pl.b.xasync = sm_xasync(format);
    // the wgmma instance staging by cp.async keeps the raw x beside the B words: half the chunk groups a slice
    const int raw = pl.wg && pl.b.xasync ? 2 : 1;
    int64_t sl = SM_BYTES / raw / per;
    if (sl > ngp) sl = ngp;
    if (sl < 1) sl = 1;
    pl.nt = sh.nt;
    pl.b.nw = sh.nw;
    pl.b.tpg = (int)tpg;
    pl.b.rgpg = (int)((tpg + SM_W - 1) / SM_W);
    pl.b.sl = (int)sl;
    pl.b.ns = (int)ns;
    pl.b.xloads = sm_xloads(format) ? 1 : 0;
    pl.b.rg = 1;
    pl.smem = sl * per * raw;
    const int64_t tiles = groups * tpg * units;
    const bool fits = (int64_t)sh.nw * ns * rows * 4 <= SM_SCRATCH_CAP;
    const int forced = split_choice();
    pl.b.split = forced == 2 ? tiles < target_warps() && fits : forced == 1 && fits;
    if (!pl.b.split && tiles * 2 < target_warps() && forced == 2) return pl;
    if (tpg > 0x7fffffff / SM_W || groups * pl.b.rgpg > 0x7fffffff) return pl;
    pl.on = true;
    return pl;
}

/** The (format, m-tiles, n-tiles) kernels built: shape_for's choices (MT_HI or MT_HI / 2 m-tiles; 1 or 2 at 64 tokens). */
template <int F, int M, int N>
constexpr bool built = N > 4 ? M <= 2 : (M == Fmt<F>::MT_HI || M == Fmt<F>::MT_HI / 2);

}  // namespace sk
#endif  // DS4J_HAVE_TC

// ------------------------------------------------------------------------------------------- host entry points

#if DS4J_HAVE_TC
namespace sk {

/** Launches the kernel for one built shape (built); the others never occur. */
template <int F, int M, int N, bool MOE>
static void launch(dim3 grid, int threads, hipStream_t stream, const Args& a) {
    if constexpr (built<F, M, N>) skinny_kernel<F, M, N, MOE><<<grid, threads, 0, stream>>>(a);
}

// F: format, M: m-tiles per warp (1, 2, 4), N: n-tiles per pass (1 .. 4, 8)
#define DS4J_SK_DISPATCH(format, mt, nt, CALL)                                                         \
    switch (format) {                                                                                  \
        case DS4J_FMT_F16: { constexpr int F = DS4J_FMT_F16; DS4J_SK_MT(mt, nt, CALL); break; }        \
        case DS4J_FMT_BF16: { constexpr int F = DS4J_FMT_BF16; DS4J_SK_MT(mt, nt, CALL); break; }      \
        case DS4J_FMT_FP8_E4M3_B128: { constexpr int F = DS4J_FMT_FP8_E4M3_B128; DS4J_SK_MT(mt, nt, CALL); break; } \
        default: { constexpr int F = DS4J_FMT_FP4_E2M1_B32; DS4J_SK_MT(mt, nt, CALL); break; }         \
    }
// the x-sharing kernel: one m-tile per warp
#define DS4J_SK_DISPATCH_FN(format, nt, CALL)                                                    \
    switch (format) {                                                                           \
        case DS4J_FMT_F16: { constexpr int F = DS4J_FMT_F16; DS4J_SK_NT(nt, CALL); break; }     \
        case DS4J_FMT_BF16: { constexpr int F = DS4J_FMT_BF16; DS4J_SK_NT(nt, CALL); break; }   \
        case DS4J_FMT_FP8_E4M3_B128: { constexpr int F = DS4J_FMT_FP8_E4M3_B128; DS4J_SK_NT(nt, CALL); break; } \
        default: { constexpr int F = DS4J_FMT_FP4_E2M1_B32; DS4J_SK_NT(nt, CALL); break; }      \
    }
#define DS4J_SK_MT(mt, nt, CALL)                                     \
    switch (mt) {                                                    \
        case 1: { constexpr int M = 1; DS4J_SK_NT(nt, CALL); break; }  \
        case 2: { constexpr int M = 2; DS4J_SK_NT(nt, CALL); break; }  \
        default: { constexpr int M = 4; DS4J_SK_NT(nt, CALL); break; } \
    }
#define DS4J_SK_NT(nt, CALL)                                  \
    switch (nt) {                                             \
        case 1: { constexpr int N = 1; CALL; break; }         \
        case 2: { constexpr int N = 2; CALL; break; }         \
        case 3: { constexpr int N = 3; CALL; break; }         \
        case 4: { constexpr int N = 4; CALL; break; }         \
        default: { constexpr int N = 8; CALL; break; }        \
    }

}  // namespace sk

int partials_scratch(ds4j_ctx* ctx, int64_t bytes, float** out) {
    if (bytes > ctx->sk_scratch_bytes) {
        if (ctx->sk_retired_n >= (int)(sizeof(ctx->sk_retired) / sizeof(ctx->sk_retired[0])))
            return fail(DS4J_ERR_ARG, "matmul: partials scratch grown too often");
        int64_t want = ctx->sk_scratch_bytes * 2 > bytes ? ctx->sk_scratch_bytes * 2 : bytes;
        if (want < (1ll << 20)) want = 1ll << 20;
        void* p = nullptr;
        hipError_t e = hipMalloc(&p, (size_t)want);
        if (e != hipSuccess) {
            hipGetLastError();
            return fail(DS4J_ERR_OOM, "matmul: %lld bytes of partials scratch: %s", (long long)want,
                        hipGetErrorName(e));
        }
        if (ctx->sk_scratch) ctx->sk_retired[ctx->sk_retired_n++] = ctx->sk_scratch;
        ctx->sk_scratch = p;
        ctx->sk_scratch_bytes = want;
    }
    *out = (float*)ctx->sk_scratch;
    return DS4J_OK;
}

int sum_partials(ds4j_ctx* ctx, const float* part, int nw, int ns, int rows, float* y, int64_t ldy, const int32_t* ids,
                 void* const* w_table) {
    const int64_t n = (int64_t)ns * rows;
    if (n == 0 || measure_skip("combine")) return DS4J_OK;
    if (sk::combine_by_4(rows, ldy, part, y))
        sk::skinny_combine<4><<<(unsigned)((n / 4 + 255) / 256), 256, 0, ctx->stream>>>(part, nw, ns, rows, y, ldy, ids,
                                                                                       w_table);
    else
        sk::skinny_combine<1><<<(unsigned)((n + 255) / 256), 256, 0, ctx->stream>>>(part, nw, ns, rows, y, ldy, ids, w_table);
    const hipError_t e = hipGetLastError();
    if (e != hipSuccess) return fail_hip(e, "launching matmul (partials sum)");
    launched_kernels.fetch_add(1, std::memory_order_relaxed);
    return DS4J_OK;
}

namespace sk {

/** Launches skinny_smem_kernel<F, 1, N, MOE, WG, LEAN> with pl's shared memory; the launch status. */
template <int F, int N, bool MOE, bool WG, bool LEAN = false>
static hipError_t launch_smem_as(dim3 grid, const SmPlan& pl, hipStream_t stream, const Args& a) {
    hipError_t e = cudaFuncSetAttribute(skinny_smem_kernel<F, 1, N, MOE, WG, LEAN>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pl.smem);
    if (e != hipSuccess) return e;
    skinny_smem_kernel<F, 1, N, MOE, WG, LEAN><<<grid, SM_W * WARP, (size_t)pl.smem, stream>>>(a, pl.b);
    return hipGetLastError();
}

/**
 * Launches skinny_smem_kernel (one m-tile per warp; the wgmma instance where pl.wg, the lean one where pl.b.lean) for
 * pl; the launch status.
 */
template <int F, int N, bool MOE>
static hipError_t launch_smem(dim3 grid, const SmPlan& pl, hipStream_t stream, const Args& a) {
    if constexpr (DS4J_WGMMA && N >= 2 && F != DS4J_FMT_F16)
        if (pl.wg) return launch_smem_as<F, N, MOE, true>(grid, pl, stream, a);
    if constexpr ((F == DS4J_FMT_FP8_E4M3_B128 || F == DS4J_FMT_BF16) && N == 1 && !MOE)
        if (pl.b.lean) return launch_smem_as<F, N, MOE, false, true>(grid, pl, stream, a);
    return launch_smem_as<F, N, MOE, false>(grid, pl, stream, a);
}

/**
 * Most weight bytes each block of a staged launch of `blocks` blocks asks the L2 for before it starts: DS4J_SKINNY_L2
 * percent (read once; default 10, 0 for no limit) of the device's L2 over the blocks that run at once (at most three a
 * multiprocessor). Each block used to ask for its whole share, so a launch larger than the L2 had its early blocks'
 * prefetches evicted by the later ones' before use and read again from memory (the BF16 head, 1.06 GB, 670 µs a
 * call at one row in mm-bench), and (our reading of the step times, not measured apart) a launch of a few dozen MB crowded out
 * what the products beside it in the step were reading.
 * On an H100 (BENCHMARKS.md, fifty-first session): the head 670 -> 513 µs at one row, same result hashes; engine steps
 * at 4,096 tokens of the 43-layer model, 4 runs each against the library without the cut, batch 1 13.09 -> 12.49 ms,
 * 16 entries 26.62 -> 25.81, 64 entries 63.46 -> 62.42, a 5-row verify step 21.61 -> 20.48 (25 % of the L2: 12.67,
 * 26.17, 62.41, 20.90; 5 % and 3 %: as 10 % at one row, up to 65.6 ms at 64 entries). A hint's size changes no
 * number.
 */
static int64_t l2_share(ds4j_ctx* ctx, int64_t blocks) {
    static std::atomic<int> pct{0};
    const int p = env_choice(pct, "DS4J_SKINNY_L2", 10, 0, 1000);
    const DeviceLimits lim = device_limits(ctx->device);
    if (p == 0 || lim.l2 <= 0) return INT64_MAX;  // no limit asked, or the device does not say
    const int64_t running = std::max<int64_t>(1, std::min<int64_t>(blocks, 3 * (int64_t)lim.sms));
    return lim.l2 / 100 * p / running;
}

/**
 * Runs pl for a (grid: dense (groups rgpg), moe (expert blocks, rgpg / pl.b.rg), with the partitions added as the last
 * dimension when split)
 * and, when split, the ordered sum of the partials into y (ns rows of `rows`; ids / w_table for moe). A status.
 */
template <bool MOE>
static int run_smem(ds4j_ctx* ctx, int format, SmPlan pl, dim3 grid, Args a, int rows) {
    if (pl.b.split) {
        int rc = partials_scratch(ctx, (int64_t)pl.b.nw * pl.b.ns * rows * 4, &pl.b.part);
        if (rc != DS4J_OK) return rc;
        if (MOE) grid.z = (unsigned)pl.b.nw;
        else grid.y = (unsigned)pl.b.nw;
    }
    pl.b.pf_max = l2_share(ctx, (int64_t)grid.x * grid.y * grid.z);
    hipError_t e = hipSuccess;
    DS4J_SK_DISPATCH_FN(format, pl.nt, (e = launch_smem<F, N, MOE>(grid, pl, ctx->stream, a)))
    if (e != hipSuccess) return fail_hip(e, "launching matmul (skinny tensor cores, shared x)");
    launched_kernels.fetch_add(1, std::memory_order_relaxed);
    if (pl.b.split && ctx->parts_state == 1 && a.ldy == rows) {
        // left to their reader (ds4j_parts_begin): plane p of the partials holds partition p's sums of y's rows
        ctx->parts_state = 2;
        ctx->parts_at = pl.b.part;
        ctx->parts_n = pl.b.nw;
        ctx->parts_stride = (int64_t)pl.b.ns * rows;
        return DS4J_OK;
    }
    if (pl.b.split)
        return sum_partials(ctx, pl.b.part, pl.b.nw, pl.b.ns, rows, a.y, a.ldy, MOE ? a.ids : nullptr,
                            MOE ? a.w_table : nullptr);
    return DS4J_OK;
}

}  // namespace sk
#endif  // DS4J_HAVE_TC

/** False when the environment variable DS4J_SKINNY is "0" (read at the first call): decode and verify on FFMA. */
static bool skinny_enabled() {
    static std::atomic<int> on{-1};
    return !env_equals(on, "DS4J_SKINNY", "0");
}

bool skinny_matmul(ds4j_ctx* ctx, int format, const WView& v, int rows, int grp, int64_t xgs, const float* x,
                   int64_t ldx, float* y, int64_t ldy, int S, int* rc) {
#if DS4J_HAVE_TC
    using namespace sk;
    if (S <= 0 || S >= DS4J_TC_MIN_ROWS || rows <= 0 || !tc_format(format, v.scale_kind)) return false;
    const int64_t rb = row_bytes_of(format, v.cols);
    if ((rb & 15) != 0 || ((uintptr_t)v.w & 15u) != 0 || ((uintptr_t)x & 15u) != 0 || (ldx & 3) != 0 || (xgs & 3) != 0)
        return false;
    if (!skinny_enabled() || !tc_device(ctx)) return false;
    const int groups = rows / grp;
    const Shape sh = shape_for(format, grp, groups, 1, rb, S);
    const int64_t tiles = (int64_t)groups * sh.tpg;
    if (tiles > 0x7fffffff) return false;
    Args a{};
    a.v = v;
    a.rows = rows;
    a.grp = grp;
    a.tiles_per_grp = (int)sh.tpg;
    a.xgs = xgs;
    a.x = x;
    a.ldx = ldx;
    a.y = y;
    a.ldy = ldy;
    a.S = S;
    SmPlan pl = sm_plan(ctx, format, grp, groups, 1, rb, S, S, rows);
    pl.b.lean = sm_lean(format, pl.nt, pl.wg, v, grp) ? 1 : 0;
    if (pl.on) {
        *rc = run_smem<false>(ctx, format, pl, dim3((unsigned)(groups * pl.b.rgpg)), a, rows);
        return true;
    }
    DS4J_SK_DISPATCH(format, sh.mt, sh.nt, (launch<F, M, N, false>(dim3((unsigned)tiles), sh.nw * WARP, ctx->stream, a)))
    hipError_t e = hipGetLastError();
    *rc = e == hipSuccess ? DS4J_OK : fail_hip(e, "launching matmul (skinny tensor cores)");
    return true;
#else
    (void)ctx, (void)format, (void)v, (void)rows, (void)grp, (void)xgs, (void)x, (void)ldx, (void)y, (void)ldy, (void)S,
        (void)rc;
    return false;
#endif
}

bool skinny_moe(ds4j_ctx* ctx, int format, void* const* w_table, void* const* scale_table,
                const int32_t* row_base_table, int scale_kind, int rows, int cols, int E, const int32_t* ids, int k,
                int S, const float* x, int64_t ldx, int x_per_pick, float* y, int64_t ldy, int* rc) {
#if DS4J_HAVE_TC
    using namespace sk;
    const int64_t P = (int64_t)S * k;
    if (S <= 0 || S >= DS4J_TC_MIN_ROWS || P > MAX_PICKS || rows <= 0 || !tc_format(format, scale_kind)) return false;
    const int64_t rb = row_bytes_of(format, cols);
    if ((rb & 15) != 0 || ((uintptr_t)x & 15u) != 0 || (ldx & 3) != 0) return false;
    if (!skinny_enabled() || !tc_device(ctx)) return false;
    Args a{};
    a.v.scale_kind = scale_kind;
    a.v.cols = cols;
    a.v.scale_cols = (cols + 127) >> 7;
    a.rows = rows;
    a.x = x;
    a.ldx = ldx;
    a.y = y;
    a.ldy = ldy;
    a.S = S;
    a.w_table = w_table;
    a.scale_table = format >= DS4J_FMT_FP8_E4M3_B128 ? scale_table : nullptr;
    a.row_base_table = row_base_table;
    a.ids = ids;
    a.P = (int)P;
    a.k = k;
    a.x_per_pick = x_per_pick;
    // a grid over distinct experts where E is known and smaller than the picks (with V4's 256 experts and 6 picks a
    // token: steps of 43 rows or more; models with few experts, e.g. mm-bench's 16, from 3 rows), else over picks
    a.E = E > 0 && E <= MOE_MAX_E && E < P && expert_grid() ? E : 0;
    const unsigned gx = (unsigned)(a.E > 0 ? a.E : P);
    // shape: k experts streamed at once per row; the pass width from the rows or the picks per expert
    const int Sp = moe_pass_rows(S, P, a.E);
    const Shape sh = shape_for(format, rows, 1, k, rb, Sp);
    if (sh.tpg > 65535) return false;
    // an expert has at most P picks: the pass width follows Sp (shape_for), more picks take more passes
    // staged x for routed experts up to sm_moe_max_rows() rows, in passes of at most 4 n-tiles (8-tile passes were
    // faster without staging: 350.7 against 507.4 µs for w1 / w3 at 64 rows, BENCHMARKS.md fourth session)
    const SmPlan pl = S <= sm_moe_max_rows() && Sp <= 32 ? sm_plan(ctx, format, rows, 1, k, rb, Sp, P, rows) : SmPlan{};
    if (pl.on && pl.b.rgpg <= 65535) {
        SmPlan mp = pl;
        mp.b.rg = moe_row_groups(gx, mp.b.rgpg, mp.b.split ? mp.b.nw : 1, mp.nt, rb);
        *rc = run_smem<true>(ctx, format, mp, dim3(gx, (unsigned)((mp.b.rgpg + mp.b.rg - 1) / mp.b.rg)), a, rows);
        return true;
    }
    dim3 grid(gx, (unsigned)sh.tpg);
    DS4J_SK_DISPATCH(format, sh.mt, sh.nt, (launch<F, M, N, true>(grid, sh.nw * WARP, ctx->stream, a)))
    hipError_t e = hipGetLastError();
    *rc = e == hipSuccess ? DS4J_OK : fail_hip(e, "launching moe_matmul (skinny tensor cores)");
    return true;
#else
    (void)ctx, (void)format, (void)w_table, (void)scale_table, (void)row_base_table, (void)scale_kind, (void)rows,
        (void)cols, (void)E, (void)ids, (void)k, (void)S, (void)x, (void)ldx, (void)x_per_pick, (void)y, (void)ldy, (void)rc;
    return false;
#endif
}

}  // namespace ds4j
