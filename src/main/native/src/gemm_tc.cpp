// Tensor-core GEMMs for prefill (ds4j_gpu.h, DS4J_TC_MIN_ROWS): dense and grouped matrix products against
// stored-format weights, and routed-expert products with the picks grouped by expert (ds4j_moe_matmul_prefill).
//
// One block computes a tile of BM weight rows x BN tokens (BN 32, 64 or 128, chosen per launch) with
// mma.sync.m16n8k16 (BF16 in, F32 accumulate, fragments through ldmatrix), walking the columns BK = 64 at a time.
// The weight tile is read as 16-byte chunks of the stored format and dequantised into shared memory as BF16 (exact
// for BF16, FP8 x E8M0 and FP4 x E8M0; F16 becomes an exact pair of BF16 parts); the F32 activations are split into
// BF16 hi and lo parts on the way into shared memory. Two shared stages: the next tile's global loads are issued into
// registers before the current tile is multiplied and decoded into the other stage half-way through, so their latency
// and the decoding hide behind the MMAs, with one barrier per tile.
//
// DS4J_TC_XSPLIT=1 (read once; off by default): a pre-pass (xsplit_kernel) splits the product's activations into BF16
// hi and lo parts once, into a scratch the context keeps, instead of every block of BM weight rows splitting them again
// (16 to 32 times over for the routed experts); the blocks then copy them straight into shared memory with cp.async,
// issued a whole column tile ahead, which also frees the registers that held them (ptxas: 154-179 instead of 190-215
// at BN 128). The split is the same function of the same F32 value, so the bits are the same. DS4J_TC_XSPLIT=2 also
// caps the BN-128 FP8 and FP4 kernels' registers at 128 so that two blocks share a multiprocessor (their two stages,
// 108 KiB, leave room for two; 16 warps instead of 8 to hide latency): only register allocation differs, same bits.
//
// Column parts (dense products, k_parts): a product whose row blocks leave most multiprocessors idle (a prefill chunk
// of a few dozen tokens through wq_a, wkv, wo_b...) splits its column tiles into a few ranges, one block each, whose
// F32 partial sums a second launch adds in order (sum_partials, gemm_skinny.cpp): each block then walks at least
// DS4J_TC_KSTEPS (8) column tiles instead of all of them (wq_a: 8 instead of 64). The number of ranges depends on the
// weights' shape only (k_parts).
//
// Batch invariance: the value of output (s, r) is the sum over column tiles in order of the same MMA sequence (per
// column range, the ranges then added in order), so it depends on row r and token s only, never on S, on the token's
// place in its tile, or on the other picks of an expert.
#include "tc.h"
#include "tc_mma.h"

#include <atomic>
#include <stdlib.h>
#include <string.h>

namespace ds4j {

bool tc_device(ds4j_ctx* ctx) {
#if DS4J_HAVE_TC
    static std::atomic<int> off{-1};  // -1 unknown, 0 enabled, 1 disabled through DS4J_TC=0
    int o = off.load();
    if (o < 0) {
        const char* e = getenv("DS4J_TC");
        o = (e && strcmp(e, "0") == 0) ? 1 : 0;
        off.store(o);
    }
    if (o == 1) return false;
    return device_cc_major(ctx->device) >= 8;
#else
    (void)ctx;
    return false;
#endif
}

#if DS4J_HAVE_TC
namespace tc {

constexpr int BM = 128;      // weight rows per block (MMA M)
constexpr int BK = 64;       // columns per step: four k16 MMA steps
constexpr int THREADS = 256; // 8 warps
constexpr int LDW = (BK + 8) / 2;  // shared row stride in 32-bit words (two BF16 each): 144 bytes, conflict-free ldmatrix

/**
 * Per token-tile width BN (32, 64 or 128): the warps' layout. Every warp covers 32 tokens (NI = 4 MMA columns) and WM
 * weight rows (MI = WM / 16 MMA rows): 8 x 1 warps of 16 x 32 for BN 32, 4 x 2 warps of 32 x 32 for BN 64, 2 x 4 warps
 * of 64 x 32 for BN 128.
 */
template <int BN>
struct Tile {
    static constexpr int WARPS_N = BN / 32, WARPS_M = 8 / WARPS_N, WM = BM / WARPS_M, MI = WM / 16, NI = 4;
    static constexpr int XV = BN * BK / 4 / THREADS;  // activation float4s per thread and column tile
};

/** Per format: elements per 16-byte chunk, whether W is split into two BF16 parts. */
template <int FMT> struct Fmt;
template <> struct Fmt<DS4J_FMT_F16> { static constexpr int EPC = 8; static constexpr bool SPLIT = true; };
template <> struct Fmt<DS4J_FMT_BF16> { static constexpr int EPC = 8; static constexpr bool SPLIT = false; };
template <> struct Fmt<DS4J_FMT_FP8_E4M3_B128> { static constexpr int EPC = 16; static constexpr bool SPLIT = false; };
template <> struct Fmt<DS4J_FMT_FP4_E2M1_B32> { static constexpr int EPC = 32; static constexpr bool SPLIT = false; };

/**
 * Decodes one 16-byte chunk (EPC elements) into EPC/2 BF16 pairs hi[] (and lo[] for F16); sb: the chunk's E8M0 scale
 * byte (FP8, FP4). FP8 and FP4 codes are placed into BF16 patterns p that read as value x 2^-OFF (OFF 120 for e4m3, 126
 * for e2m1; subnormal codes included; the e4m3 NaN codes 0x7f / 0xff read as +-480 x 2^-OFF, as they did before), which
 * then become value x scale, exact (at most 4 significant bits) wherever that is a normal number:
 * - scales of ordinary size: one BF16 pair multiplication of p by the power of two 2^OFF x scale (both normal); the
 *   F32 path below took about three times the instructions and dominated the block's step (BENCHMARKS.md, fifteenth
 *   session);
 * - other scales (2^OFF x scale not a normal BF16, subnormal products, the NaN scale 0xFF): each half widened to F32
 *   and multiplied by 2^OFF and by the scale (exact in F32), then rounded to BF16.
 * Both give value x scale rounded once, so the bits do not depend on the path.
 */
template <int FMT>
__device__ __forceinline__ void decode(const uint4& q, uint32_t sb, uint32_t* hi, uint32_t* lo) {
    const uint32_t u[4] = {q.x, q.y, q.z, q.w};
    if constexpr (FMT == DS4J_FMT_BF16) {
#pragma unroll
        for (int i = 0; i < 4; i++) hi[i] = u[i];
    } else if constexpr (FMT == DS4J_FMT_F16) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = h2_to_f2(u[i]);
            split_bf16(f.x, f.y, hi[i], lo[i]);  // exact: an F16 value has 11 significant bits, hi + lo hold 16
        }
    } else {
        constexpr bool FP8 = FMT == DS4J_FMT_FP8_E4M3_B128;
        constexpr uint32_t OFF = FP8 ? 120u : 126u;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if constexpr (FP8) {
                // bytes (0, 1) and (2, 3) into the high bytes of 16-bit lanes: the sign is then at bit 15, and
                // exponent and mantissa (bits 14..8) move to 10..4
                const uint32_t t0 = __byte_perm(u[i], 0u, 0x1404u), t1 = __byte_perm(u[i], 0u, 0x3424u);
                hi[2 * i] = (t0 & 0x80008000u) | ((t0 >> 4) & 0x07f007f0u);
                hi[2 * i + 1] = (t1 & 0x80008000u) | ((t1 >> 4) & 0x07f007f0u);
            } else {
                const uint32_t v = u[i] >> 4;
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    // byte b's low nibble at bits 0..3, its high nibble at 16..19 (the other bits are masked off):
                    // sign -> bit 15, exponent and mantissa -> bits 8..6
                    const uint32_t t = __byte_perm(u[i], v, (uint32_t)(b | b << 4 | (4 + b) << 8 | (4 + b) << 12));
                    hi[4 * i + b] = ((t << 12) & 0x80008000u) | ((t << 6) & 0x01c001c0u);
                }
            }
        }
        // the multiplier and every nonzero product normal: sb + OFF <= 254 and the smallest nonzero value (e4m3
        // 2^-9, e2m1 2^-1) x scale >= 2^-126
        constexpr uint32_t SB_MIN = FP8 ? 10u : 2u;
        if (sb - SB_MIN <= 254u - OFF - SB_MIN) {
            const uint32_t m = pow2_pair(sb + OFF);
#pragma unroll
            for (int j = 0; j < Fmt<FMT>::EPC / 2; j++) hi[j] = mul_bf16x2(hi[j], m);
        } else {
            const float sc = e8m0(sb), up = __uint_as_float((127u + OFF) << 23);
#pragma unroll
            for (int j = 0; j < Fmt<FMT>::EPC / 2; j++)
                hi[j] = pack_bf16(__uint_as_float(hi[j] << 16) * up * sc, __uint_as_float(hi[j] & 0xffff0000u) * up * sc);
        }
    }
}

/** Weight chunks and activations of one column tile, in registers between the global loads and the shared stores. */
template <int FMT, int BN, bool XP>
struct Regs {
    static constexpr int EPC = Fmt<FMT>::EPC, CPR = BK / EPC, NCH = BM * CPR, NPT = NCH / THREADS;
    static_assert(NCH % THREADS == 0, "whole chunks per thread");
    uint4 wq[NPT];
    uint32_t ws[NPT];  // E8M0 scale bytes (FP8, FP4), decoded only when the tile is stored
    float4 xq[XP ? 1 : Tile<BN>::XV];  // unused with XP: the activations go to shared memory through cp.async
};

/**
 * Weight tiles the XP 3 kernels keep in flight in registers (gemm_kernel's D): FP8 and FP4 hold few registers per tile
 * (2 and 1 chunks a thread), BF16 and F16 4, so they keep 2.
 */
template <int FMT>
struct Deep {
    static constexpr int D = Regs<FMT, 64, true>::NPT <= 2 ? 4 : 2;
};

/** Global -> registers: the weight chunks (rows row0 .. row_end-1) and activations of the column tile at k0 (the
 *  activations only without XP). */
template <int FMT, int BN, bool XP>
__device__ __forceinline__ void load_tile(Regs<FMT, BN, XP>& t, const WView& v, int64_t rb, bool wal, int row0, int row_end,
                                          const float* x, const int64_t* xoff, int k0) {
    using R = Regs<FMT, BN, XP>;
    const int tid = threadIdx.x, cols = v.cols;
#pragma unroll
    for (int i = 0; i < R::NPT; i++) {
        const int c = tid + i * THREADS;
        t.wq[i] = make_uint4(0u, 0u, 0u, 0u);
        t.ws[i] = 127u;
        const int gr = row0 + c / R::CPR, col = k0 + (c % R::CPR) * R::EPC;
        if (gr < row_end && col < cols) {
            const uint8_t* p = v.w + (size_t)gr * rb + (size_t)col * 16 / R::EPC;
            t.wq[i] = wal ? __ldg(reinterpret_cast<const uint4*>(p)) : load16_bytes(p);
            if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128)
                t.ws[i] = v.scale[(size_t)((v.row_base + gr) >> 7) * v.scale_cols + (col >> 7)];
            else if constexpr (FMT == DS4J_FMT_FP4_E2M1_B32)
                t.ws[i] = v.scale[(size_t)gr * (cols >> 5) + (col >> 5)];
        }
    }
    if constexpr (!XP) {
        // 16 float4s per token row of the tile: a half warp reads 256 contiguous bytes
#pragma unroll
        for (int i = 0; i < Tile<BN>::XV; i++) {
            const int c = tid + i * THREADS, tok = c >> 4, col = k0 + (c & 15) * 4;
            const int64_t o = xoff[tok];
            t.xq[i] = (o >= 0 && col < cols) ? __ldg(reinterpret_cast<const float4*>(x + o + col)) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
    }
}

/** Registers -> shared memory: weights decoded to BF16 (hi, and lo for F16), activations split into hi and lo (the
 *  activations only without XP). */
template <int FMT, int BN, bool XP>
__device__ __forceinline__ void store_tile(const Regs<FMT, BN, XP>& t, uint32_t* sw, uint32_t* swl, uint32_t* sxh, uint32_t* sxl) {
    using R = Regs<FMT, BN, XP>;
    constexpr int EPC = R::EPC;
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < R::NPT; i++) {
        const int c = tid + i * THREADS;
        uint32_t h[EPC / 2], l[Fmt<FMT>::SPLIT ? EPC / 2 : 1];
        decode<FMT>(t.wq[i], t.ws[i], h, l);
        const int o = (c / R::CPR) * LDW + (c % R::CPR) * (EPC / 2);
#pragma unroll
        for (int j = 0; j < EPC / 8; j++) {
            *reinterpret_cast<uint4*>(sw + o + 4 * j) = make_uint4(h[4 * j], h[4 * j + 1], h[4 * j + 2], h[4 * j + 3]);
            if constexpr (Fmt<FMT>::SPLIT)
                *reinterpret_cast<uint4*>(swl + o + 4 * j) = make_uint4(l[4 * j], l[4 * j + 1], l[4 * j + 2], l[4 * j + 3]);
        }
    }
    if constexpr (!XP) {
#pragma unroll
        for (int i = 0; i < Tile<BN>::XV; i++) {
            const int c = tid + i * THREADS, o = (c >> 4) * LDW + (c & 15) * 2;
            uint32_t h0, l0, h1, l1;
            split_bf16(t.xq[i].x, t.xq[i].y, h0, l0);
            split_bf16(t.xq[i].z, t.xq[i].w, h1, l1);
            *reinterpret_cast<uint2*>(sxh + o) = make_uint2(h0, h1);
            *reinterpret_cast<uint2*>(sxl + o) = make_uint2(l0, l1);
        }
    }
}

/** 16 bytes global -> shared without registers (cp.async, L2 only: the activations are shared by many blocks). */
__device__ __forceinline__ void cp_async16(uint32_t* smem, const void* gmem) {
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(gmem));
}

/** Waits for this thread's cp.async copies (the barrier that follows makes them visible to the block). */
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

/**
 * XP: the activations of the column tile at k0, already split (xsplit_kernel), straight into the stage's hi and lo
 * tiles: per token row 8 chunks of 8 BF16 per part, zeros past the columns and for absent tokens (xoff < 0).
 */
template <int BN>
__device__ __forceinline__ void issue_x(uint32_t* sxh, uint32_t* sxl, const uint16_t* xs, int64_t plane, const int64_t* xoff,
                                        int cols, int k0) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < BN * (BK / 8) / THREADS; i++) {
        const int c = tid + i * THREADS, tok = c >> 3, col = k0 + (c & 7) * 8, o = tok * LDW + (c & 7) * 4;
        const int64_t xo = xoff[tok];
        if (xo >= 0 && col < cols) {
            cp_async16(sxh + o, xs + xo + col);
            cp_async16(sxl + o, xs + plane + xo + col);
        } else {
            *reinterpret_cast<uint4*>(sxh + o) = make_uint4(0u, 0u, 0u, 0u);
            *reinterpret_cast<uint4*>(sxl + o) = make_uint4(0u, 0u, 0u, 0u);
        }
    }
}

/** Shared memory of gemm_kernel<FMT, *, BN>: two stages, each the weight tile (and its lo part for F16) and the
 *  activation hi and lo tiles; WORDS per stage, BYTES in all. */
template <int FMT, int BN>
struct Stage {
    static constexpr int WORDS = ((Fmt<FMT>::SPLIT ? 2 : 1) * BM + 2 * BN) * LDW;
    static constexpr size_t BYTES = (size_t)2 * WORDS * 4;
};

/** Everything a GEMM block needs; one struct for the dense (grouped) and the routed-expert variant. */
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
    const int32_t* perm;         // pick ids grouped by expert (stable)
    const int32_t* cnt;          // [E] picks per expert
    const int32_t* off;          // [E] first position of expert e in perm
    const int32_t* tile_prefix;  // [E + 1] token tiles before expert e
    int E, k, x_per_pick;
    // XP (activations split beforehand, xsplit_kernel): hi parts of activation row i at xs + i * xs_ld, lo parts
    // xs_plane elements further; rows: dense g * S + s (group g, token s), moe the rows of x
    const uint16_t* xs;
    int64_t xs_ld, xs_plane;
    // dense, column parts (k_parts): kparts > 1 splits the column tiles into kparts ranges of nearly equal length, one
    // per blockIdx.z; the block of range j writes its sum to part + j * S * rows, token s at (s * rows + r), and
    // sum_partials adds the ranges in order into y. kparts 0 or 1: one range, written to y
    int kparts;
    float* part;
};

/**
 * One block: BM weight rows x BN tokens. The column tiles pass through two shared stages: while the warps multiply
 * tile kt, the global loads of tile kt + 1 (XP 3: of tiles up to kt + Deep<FMT>::D) are in flight into registers, and
 * after the multiplications of its first half tile kt + 1 is decoded into the other stage, so each tile costs one
 * barrier.
 *
 * Numbers: output (s, r) is the sum over the k16 chunks 0 .. 2 ceil(cols / 32) - 1, in increasing order, of the MMAs
 * hi x W, lo x W (and, for F16, hi x W-lo) into one F32 accumulator from 0: the sequence does not depend on BN, on
 * the tile a token falls in or on the other tokens, so results are bit-identical across tile choices and S. With
 * column parts (a.kparts > 1, dense only) each part's chunks go into an accumulator of their own in that order and the parts are
 * added in order afterwards (sum_partials); kparts is a function of the shape (k_parts), never of S.
 */
template <int FMT, bool MOE, int BN, int XP>
__global__ void __launch_bounds__(THREADS, BN <= 64 || XP >= 2 ? 2 : 1) gemm_kernel(Args a) {
    DS4J_AWAIT_PREVIOUS();
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // the host only launches this on compute capability >= 8.0 (tc_device)
#else
    using T = Tile<BN>;
    constexpr bool SPLIT = Fmt<FMT>::SPLIT;
    constexpr int MI = T::MI, NI = T::NI;
    extern __shared__ __align__(16) uint32_t tc_gsm[];
    __shared__ int64_t xoff[BN], yoff[BN];  // element offsets of each token's x and y rows (-1: no token)

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    WView v = a.v;
    int row0, row_end;
    int nvalid;  // tokens of this block's tile (the rest are padding: their MMAs are skipped, see below)
    if constexpr (MOE) {
        const int bx = (int)blockIdx.x;
        if (bx >= a.tile_prefix[a.E]) return;  // more blocks are launched than there are tiles (an upper bound)
        int lo = 0, hi = a.E;                  // expert e with tile_prefix[e] <= bx < tile_prefix[e + 1]
        while (hi - lo > 1) {
            const int mid = (lo + hi) >> 1;
            if (a.tile_prefix[mid] <= bx) lo = mid;
            else hi = mid;
        }
        const int e = lo, i = bx - a.tile_prefix[e];
        const int start = a.off[e] + i * BN, len = min(BN, a.cnt[e] - i * BN);
        nvalid = len;
        v.w = (const uint8_t*)a.w_table[e];
        if (!v.w) return;  // expert e is in host memory (hybrid placement): the caller fills its pick rows itself
        v.scale = a.scale_table ? (const uint8_t*)a.scale_table[e] : nullptr;
        v.row_base = a.row_base_table ? a.row_base_table[e] : 0;
        row0 = blockIdx.y * BM;
        row_end = min(a.rows, row0 + BM);
        if (tid < BN) {
            if (tid < len) {
                const int p = a.perm[start + tid];
                xoff[tid] = (int64_t)(a.x_per_pick ? p : p / a.k) * (XP != 0 ? a.xs_ld : a.ldx);
                yoff[tid] = (int64_t)p * a.ldy;
            } else {
                xoff[tid] = -1;
                yoff[tid] = -1;
            }
        }
    } else {
        const int gi = blockIdx.y / a.tiles_per_grp, ti = blockIdx.y % a.tiles_per_grp;
        nvalid = min(BN, a.S - (int)blockIdx.x * BN);
        row0 = gi * a.grp + ti * BM;
        row_end = min(row0 + BM, (gi + 1) * a.grp);
        if (tid < BN) {
            const int s = blockIdx.x * BN + tid;
            xoff[tid] = s >= a.S ? -1 : XP != 0 ? ((int64_t)gi * a.S + s) * a.xs_ld : (int64_t)s * a.ldx + (int64_t)gi * a.xgs;
            yoff[tid] = s >= a.S ? -1 : a.part ? (int64_t)s * a.rows : (int64_t)s * a.ldy;
        }
    }
    // this block's column tiles [kb, ke) (all of them but in a column part) and where its sums go (the part's
    // partials, or y)
    const int nk = (v.cols + BK - 1) / BK, kp = MOE || a.kparts < 1 ? 1 : a.kparts;
    const int kb = MOE ? 0 : (int)((int64_t)nk * blockIdx.z / kp), ke = MOE ? nk : (int)((int64_t)nk * (blockIdx.z + 1) / kp);
    float* const y = !MOE && a.part ? a.part + (size_t)blockIdx.z * a.S * a.rows : a.y;
    const int cols = v.cols;
    const int64_t rb = row_bytes_of(FMT, cols);
    const bool wal = ((uintptr_t)v.w & 15u) == 0;
    __syncthreads();

    // stage layout (words): weights [BM][LDW], weights lo (F16) [BM][LDW], x hi [BN][LDW], x lo [BN][LDW]
    constexpr int SW = Stage<FMT, BN>::WORDS, OWL = BM * LDW, OXH = (SPLIT ? 2 : 1) * BM * LDW, OXL = OXH + BN * LDW;

    // weight tiles in flight in registers ahead of the one being decoded: 1, or Deep<FMT>::D (XP 3, launches of few
    // blocks, where each block's column tiles run one after another and a tile's load latency is not hidden by other
    // blocks); only when the loads are issued changes, never what is stored into the stages
    constexpr int D = XP == 3 ? Deep<FMT>::D : 1;
    Regs<FMT, BN, XP != 0> regs[D];

    float acc[MI][NI][4];
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[mi][ni][j] = 0.f;

    const int wm = warp % T::WARPS_M, wn = warp / T::WARPS_M;
    const int n16 = 2 * ((cols + 31) / 32);  // k16 chunks: the same count for every tiling (trailing zero chunks too)
    // ldmatrix lane addresses (words, within a stage): A x4 = rows 0-7 / 8-15 at k 0-7, then at k 8-15;
    // B x4 = tokens 0-7 at k 0-7, k 8-15, then tokens 8-15 at k 0-7, k 8-15 (b0, b1 of two MMA columns)
    const int tok0 = wn * 32;  // this warp's first token in the tile
    const int a_off = (wm * T::WM + (lane & 15)) * LDW + (lane >> 4) * 4;
    const int b_off = (wn * 32 + ((lane >> 4) & 1) * 8 + (lane & 7)) * LDW + ((lane >> 3) & 1) * 4;

#pragma unroll
    for (int d = 0; d < D; d++)
        if (d == 0 || kb + d < ke) load_tile<FMT, BN, XP != 0>(regs[d], v, rb, wal, row0, row_end, a.x, xoff, (kb + d) * BK);
    {
        uint32_t* first = tc_gsm + (kb & 1) * SW;  // tile kt is always in stage kt & 1
        if constexpr (XP != 0) issue_x<BN>(first + OXH, first + OXL, a.xs, a.xs_plane, xoff, cols, kb * BK);
        store_tile<FMT, BN, XP != 0>(regs[0], first, first + OWL, first + OXH, first + OXL);
    }
    if constexpr (XP != 0) cp_async_wait_all();
    __syncthreads();
    // column tile kt has its weights in regs[(kt - kb) % D]: loaded D tiles ahead, stored into the other stage mid-way
    // through tile kt - 1 (so that register set is free for tile kt + D when tile kt starts)
    for (int kt0 = kb; kt0 < ke; kt0 += D)
#pragma unroll
    for (int d = 0; d < D; d++) {
        const int kt = kt0 + d;
        if (kt >= ke) break;
        const uint32_t* st = tc_gsm + (kt & 1) * SW;
        uint32_t* nx = tc_gsm + ((kt + 1) & 1) * SW;
        const bool more = kt + 1 < ke;
        if (kt + D < ke) load_tile<FMT, BN, XP != 0>(regs[d], v, rb, wal, row0, row_end, a.x, xoff, (kt + D) * BK);
        // XP: the next tile's activations go into the other stage now (its last reads were before the previous
        // barrier) and have the whole tile's multiplications to arrive
        if (XP != 0 && more) issue_x<BN>(nx + OXH, nx + OXL, a.xs, a.xs_plane, xoff, cols, (kt + 1) * BK);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            // chunks 0 and 1 of a tile always exist (n16 is even); 2 and 3 may lie past the columns' last 32
            if (kk >= 2 && kt * (BK / 16) + kk >= n16) break;
            uint32_t af[MI][4], afl[SPLIT ? MI : 1][4], bh[NI / 2][4], bl[NI / 2][4];
            // a warp's 16-token groups past the block's tokens hold padding: no loads, no MMAs (uniform per warp; the
            // other tokens' sums are the same MMAs in the same order)
            if (tok0 < nvalid) {
#pragma unroll
                for (int mi = 0; mi < MI; mi++) {
                    ldsm_x4(af[mi], st + a_off + mi * 16 * LDW + kk * 8);
                    if constexpr (SPLIT) ldsm_x4(afl[mi], st + OWL + a_off + mi * 16 * LDW + kk * 8);
                }
#pragma unroll
                for (int nj = 0; nj < NI / 2; nj++) {
                    if (tok0 + nj * 16 >= nvalid) break;
                    ldsm_x4(bh[nj], st + OXH + b_off + nj * 16 * LDW + kk * 8);
                    ldsm_x4(bl[nj], st + OXL + b_off + nj * 16 * LDW + kk * 8);
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int ni = 2 * nj + h;
#pragma unroll
                        for (int mi = 0; mi < MI; mi++) {
                            mma_bf16(acc[mi][ni], af[mi], bh[nj][2 * h], bh[nj][2 * h + 1]);
                            mma_bf16(acc[mi][ni], af[mi], bl[nj][2 * h], bl[nj][2 * h + 1]);
                            if constexpr (SPLIT) mma_bf16(acc[mi][ni], afl[mi], bh[nj][2 * h], bh[nj][2 * h + 1]);
                        }
                    }
                }
            }
            // the next tile goes into the other stage (last read before the previous barrier) mid-way, so that its
            // decoding overlaps the remaining multiplications of this warp and of the others
            if (kk == 1 && more) store_tile<FMT, BN, XP != 0>(regs[(d + 1) % D], nx, nx + OWL, nx + OXH, nx + OXL);
        }
        if constexpr (XP != 0) cp_async_wait_all();
        __syncthreads();
    }

    // C fragment: c0, c1 = (row g, columns 2t, 2t+1), c2, c3 = row g+8
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int ni = 0; ni < NI; ni++) {
            const int r = row0 + wm * T::WM + mi * 16 + g, t = wn * 32 + ni * 8 + 2 * tig;
            const int64_t y0 = yoff[t], y1 = yoff[t + 1];
            if (r < row_end) {
                if (y0 >= 0) y[y0 + r] = acc[mi][ni][0];
                if (y1 >= 0) y[y1 + r] = acc[mi][ni][1];
            }
            if (r + 8 < row_end) {
                if (y0 >= 0) y[y0 + r + 8] = acc[mi][ni][2];
                if (y1 >= 0) y[y1 + r + 8] = acc[mi][ni][3];
            }
        }
#endif
}

/**
 * XP pre-pass: activation row i (i < nrows; dense i = g * S + s reads x[s*ldx + g*xgs ..], moe i = s reads
 * x[s*ldx ..], with S = nrows and xgs = 0) split into BF16 hi and lo parts, exactly as store_tile splits them, at
 * xs[i * lds + c] (hi) and xs[plane + i * lds + c] (lo), c < cols (a multiple of 8): each thread one 8-column chunk.
 */
__global__ void xsplit_kernel(const float* x, int64_t ldx, int64_t xgs, int S, int64_t nrows, int cols, int64_t lds,
                              uint16_t* xs, int64_t plane) {
    DS4J_AWAIT_PREVIOUS();
    const int64_t cpr = cols / 8, n = nrows * cpr;
    for (int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < n; q += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = q / cpr;
        const int c = (int)(q % cpr) * 8;
        const float* src = x + (i % S) * ldx + (i / S) * xgs + c;
        const float4 f0 = __ldg(reinterpret_cast<const float4*>(src)), f1 = __ldg(reinterpret_cast<const float4*>(src + 4));
        uint32_t h[4], l[4];
        split_bf16(f0.x, f0.y, h[0], l[0]);
        split_bf16(f0.z, f0.w, h[1], l[1]);
        split_bf16(f1.x, f1.y, h[2], l[2]);
        split_bf16(f1.z, f1.w, h[3], l[3]);
        *reinterpret_cast<uint4*>(xs + i * lds + c) = make_uint4(h[0], h[1], h[2], h[3]);
        *reinterpret_cast<uint4*>(xs + plane + i * lds + c) = make_uint4(l[0], l[1], l[2], l[3]);
    }
}

// ------------------------------------------------------------------------------------------- grouping picks by expert

/**
 * Block e: off[e] = picks with an id below e, cnt[e] = picks of expert e, and perm[off[e] ..] = those picks in
 * ascending pick order (a stable counting sort; ids outside [0, E) belong to no expert and are left out).
 */
__global__ void moe_group_kernel(const int32_t* ids, int P, int32_t* perm, int32_t* cnt, int32_t* off) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ int sh[32];
    const int e = blockIdx.x;
    int lt = 0, eq = 0;
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        const int id = ids[p];
        lt += id >= 0 && id < e;
        eq += id == e;
    }
    int lt_all, eq_all;
    block_excl_scan(lt, sh, &lt_all);
    block_excl_scan(eq, sh, &eq_all);
    if (threadIdx.x == 0) {
        cnt[e] = eq_all;
        off[e] = lt_all;
    }
    if (eq_all == 0) return;  // uniform: every thread has the same total
    int base = lt_all;
    for (int p0 = 0; p0 < P; p0 += blockDim.x) {
        const int p = p0 + threadIdx.x;
        const int f = p < P && ids[p] == e;
        int tot;
        const int x = block_excl_scan(f, sh, &tot);
        if (f) perm[base + x] = p;
        base += tot;
    }
}

/** tile_prefix[e] = sum over e' < e of ceil(cnt[e'] / bn), e <= E (one block); bn: the token tile width. */
__global__ void moe_tiles_kernel(const int32_t* cnt, int E, int bn, int32_t* tile_prefix) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ int sh[32];
    int carry = 0;
    for (int e0 = 0; e0 < E; e0 += blockDim.x) {
        const int e = e0 + threadIdx.x;
        const int v = e < E ? (cnt[e] + bn - 1) / bn : 0;
        int tot;
        const int x = block_excl_scan(v, sh, &tot);
        if (e < E) tile_prefix[e] = carry + x;
        carry += tot;
    }
    if (threadIdx.x == 0) tile_prefix[E] = carry;
}

/** Streaming multiprocessors of ctx's device (cached per device); 0 when unknown. */
static int sm_count(ds4j_ctx* ctx) {
    constexpr int MAXDEV = 64;
    static std::atomic<int> n[MAXDEV];  // 0 unknown
    const int d = ctx->device;
    int v = d >= 0 && d < MAXDEV ? n[d].load() : 0;
    if (v == 0) {
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, d) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        if (d >= 0 && d < MAXDEV) n[d].store(v);
    }
    return v;
}

/**
 * The token tile width for S tokens, bpt blocks per token tile (dense: row blocks x column parts) or an average of
 * avg_picks picks per expert (moe): DS4J_TC_BN=32, 64 or 128 forces it (for measurements); otherwise 128, the cheaper
 * tile per product, unless that leaves the device's multiprocessors idle or an average expert's picks would fill a
 * 128-token tile less than once (moe), then 64. Dense products of a prefill chunk of a few dozen tokens (beside running
 * streams) take 32 where S fits in it, or fits in two such tiles whose blocks stay within two per multiprocessor: a
 * 64-token tile of at most 32 tokens leaves half its warps without a token to multiply, and a 32-token tile gives each
 * warp 16 weight rows instead of 32. On the H200 (`tools/device/run.sh mm-bench --rows 16,32,64 --tc-rows 1`, graph µs,
 * equal result hashes; BENCHMARKS.md, twenty-first session) 32 against 64 took wq_b 28.1 / 31.1 against 35.0 / 42.9 at
 * 16 / 32 tokens, wo_a 101.6 against 111.8 at 32, wo_b 55.7 against 61.4; at 64 tokens wo_a 102.8 against 140.1, wo_b
 * 56.4 against 75.9, shared w1 / w3 19.8 against 24.7, but wq_b (256 row blocks) 56.3 against 47.1. The routed experts
 * keep 64 (99.0 against 88.8 for w1 / w3 at 16 tokens). DS4J_TC_BN32=0 turns the 32 off (for measurements). Numbers
 * never depend on the tile (see gemm_kernel).
 */
static int pick_bn(ds4j_ctx* ctx, bool moe, int64_t bpt, int64_t avg_picks, int S) {
    static std::atomic<int> forced{-1}, narrow{-1};
    int f = forced.load();
    if (f < 0) {
        const char* e = getenv("DS4J_TC_BN");
        f = e && strcmp(e, "32") == 0 ? 32 : e && strcmp(e, "64") == 0 ? 64 : e && strcmp(e, "128") == 0 ? 128 : 0;
        forced.store(f);
    }
    if (f) return f;
    if (moe) return avg_picks >= 128 ? 128 : 64;
    const int64_t sms = sm_count(ctx);
    if (S <= 64 && !env_equals(narrow, "DS4J_TC_BN32", "0") && (S <= 32 || bpt <= sms)) return 32;  // 2 bpt blocks at 33..64
    return (int64_t)((S + 127) / 128) * bpt >= sms ? 128 : 64;
}

/**
 * DS4J_TC_XSPLIT (read once): 0 the blocks split the activations, 1 or 2 (the default: measured fastest on the H200,
 * `tools/device/run.sh mm-bench --rows 512,2048`) a pre-pass does (see launch_gemm).
 */
static int xsplit_mode() {
    static std::atomic<int> mode{-1};
    int m = mode.load();
    if (m < 0) {
        const char* e = getenv("DS4J_TC_XSPLIT");
        m = e && strcmp(e, "0") == 0 ? 0 : e && strcmp(e, "1") == 0 ? 1 : 2;
        mode.store(m);
    }
    return m;
}

/**
 * The blocks per token tile that column parts aim at: the H200's multiprocessor count, a constant rather than the
 * device's count so that a product's numbers are the same on every device (as the skinny kernels' TARGET_TILES).
 */
constexpr int PARTS_BLOCKS = 132;

/**
 * Column parts of a dense product of row_blocks blocks of BM rows over nk column tiles (see gemm_kernel): none when
 * one token tile's blocks are more than a quarter of PARTS_BLOCKS (the partials' traffic then costs more than it saves
 * at a few hundred tokens: wo_a's 64 row blocks, 257 -> 288 us at 512 tokens in 3 parts on the H200); else as many as
 * make at most PARTS_BLOCKS blocks per token tile (so that the two 64-token tiles of a 65-row chunk fit the two blocks
 * per multiprocessor of the XP 3 kernels in one wave: wo_b's 32 row blocks take 4 parts, not 5, which left a second
 * wave of 56 blocks), with at least DS4J_TC_KSTEPS column tiles per part (read once, 0 .. 64; default 8; 0 turns the
 * parts off). Measured with `tools/device/run.sh mm-bench --rows 65,512`: BENCHMARKS.md, fourteenth and sixteenth
 * sessions. A function of the shape only, never of S or the device, so a token's sums do not depend on what else the
 * product carries.
 */
static int k_parts(int64_t row_blocks, int nk) {
    static std::atomic<int> steps{0};
    const int m = env_choice(steps, "DS4J_TC_KSTEPS", 8, 0, 64);
    if (m == 0 || 4 * row_blocks > PARTS_BLOCKS) return 1;
    const int64_t want = PARTS_BLOCKS / row_blocks, most = nk / m;
    return (int)(want < most ? want : most > 1 ? most : 1);
}

/** Launches gemm_kernel<FMT, MOE, BN, XP> with its two shared stages; the launch status. */
template <int FMT, bool MOE, int BN, int XP>
static hipError_t launch_gemm(ds4j_ctx* ctx, dim3 grid, const Args& a) {
    constexpr size_t smem = Stage<FMT, BN>::BYTES;
    hipError_t e = cudaFuncSetAttribute(gemm_kernel<FMT, MOE, BN, XP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != hipSuccess) return e;
    gemm_kernel<FMT, MOE, BN, XP><<<grid, THREADS, smem, ctx->stream>>>(a);
    return hipGetLastError();
}

/**
 * Whether a launch of this grid takes the XP 3 kernels (token tiles of 32 and 64 only: at 128 the deeper loads spill): at most
 * four blocks per multiprocessor in all (a prefill chunk of a few dozen tokens, small products), so each block's column
 * tiles are its critical path; DS4J_TC_DEEP=0 (read once) never, for measurements. Same bits either way.
 */
static bool deep_tiles(ds4j_ctx* ctx, dim3 grid) {
    static std::atomic<int> off{-1};
    if (env_equals(off, "DS4J_TC_DEEP", "0")) return false;
    const int sms = sm_count(ctx);
    return sms > 0 && (int64_t)grid.x * grid.y * grid.z <= 4 * (int64_t)sms;
}

/**
 * XP 0: the blocks split the activations; 1: split beforehand (a.xs); 2: as 1, and at BN 128 for FP8 and FP4 (whose two
 * stages leave room for two blocks per multiprocessor) registers capped for two blocks (DS4J_TC_XSPLIT=2); 3: as 1,
 * with Deep<FMT>::D weight tiles in flight per block and registers capped for two blocks (deep_tiles).
 */
template <int FMT, bool MOE, int BN>
static hipError_t launch_gemm(ds4j_ctx* ctx, dim3 grid, const Args& a) {
    constexpr bool OCC2 = BN == 128 && (FMT == DS4J_FMT_FP8_E4M3_B128 || FMT == DS4J_FMT_FP4_E2M1_B32);
    if (!a.xs) return launch_gemm<FMT, MOE, BN, 0>(ctx, grid, a);
    if constexpr (BN <= 64)
        if (deep_tiles(ctx, grid)) return launch_gemm<FMT, MOE, BN, 3>(ctx, grid, a);
    if constexpr (OCC2)
        if (xsplit_mode() == 2) return launch_gemm<FMT, MOE, BN, 2>(ctx, grid, a);
    return launch_gemm<FMT, MOE, BN, 1>(ctx, grid, a);
}

template <bool MOE>
static hipError_t launch_gemm(ds4j_ctx* ctx, int format, int bn, dim3 grid, const Args& a) {
#define DS4J_TC_BN_SWITCH(F) \
    return bn == 128 ? launch_gemm<F, MOE, 128>(ctx, grid, a) : bn == 64 ? launch_gemm<F, MOE, 64>(ctx, grid, a) \
                                                                          : launch_gemm<F, MOE, 32>(ctx, grid, a)
    switch (format) {
        case DS4J_FMT_F16: DS4J_TC_BN_SWITCH(DS4J_FMT_F16);
        case DS4J_FMT_BF16: DS4J_TC_BN_SWITCH(DS4J_FMT_BF16);
        case DS4J_FMT_FP8_E4M3_B128: DS4J_TC_BN_SWITCH(DS4J_FMT_FP8_E4M3_B128);
        default: DS4J_TC_BN_SWITCH(DS4J_FMT_FP4_E2M1_B32);
    }
#undef DS4J_TC_BN_SWITCH
}

/**
 * XP: splits nrows activation rows of cols columns (see xsplit_kernel) into the context's split scratch and points
 * a.xs at it. Leaves a.xs null (the kernel then splits per tile, with the same bits) when the switch is off, the scratch
 * would have to grow during a graph capture, or it cannot be allocated; returns a launch failure's status, else DS4J_OK.
 * A grown scratch replaces the old one, which stays allocated until ds4j_ctx_destroy (queued or captured launches).
 */
static int xsplit(ds4j_ctx* ctx, Args& a, int64_t nrows, int cols, int64_t xgs, int S) {
    a.xs = nullptr;
    if (xsplit_mode() == 0 || nrows <= 0) return DS4J_OK;
    const int64_t lds = cols, bytes = 4 * nrows * lds;  // hi and lo, two bytes each
    if (bytes > ctx->tc_scratch_bytes) {
        if (ctx->capturing || ctx->tc_retired_n >= (int)(sizeof(ctx->tc_retired) / sizeof(ctx->tc_retired[0])))
            return DS4J_OK;
        const int64_t want = ctx->tc_scratch_bytes * 2 > bytes ? ctx->tc_scratch_bytes * 2 : bytes;
        void* p = nullptr;
        if (hipMalloc(&p, (size_t)want) != hipSuccess) {
            hipGetLastError();
            return DS4J_OK;
        }
        if (ctx->tc_scratch) ctx->tc_retired[ctx->tc_retired_n++] = ctx->tc_scratch;
        ctx->tc_scratch = p;
        ctx->tc_scratch_bytes = want;
    }
    uint16_t* xs = (uint16_t*)ctx->tc_scratch;
    const int64_t chunks = nrows * (cols / 8);
    const int blocks = (int)(chunks / 256 + 1 < 8192 ? chunks / 256 + 1 : 8192);
    xsplit_kernel<<<blocks, 256, 0, ctx->stream>>>(a.x, a.ldx, xgs, S, nrows, cols, lds, xs, nrows * lds);
    const hipError_t e = hipGetLastError();
    if (e != hipSuccess) return fail_hip(e, "launching the activation split (tensor cores)");
    launched_kernels.fetch_add(1, std::memory_order_relaxed);
    a.xs = xs;
    a.xs_ld = lds;
    a.xs_plane = nrows * lds;
    return DS4J_OK;
}

}  // namespace tc
#endif  // DS4J_HAVE_TC

bool tc_matmul(ds4j_ctx* ctx, int format, const WView& v, int rows, int grp, int64_t xgs, const float* x, int64_t ldx,
               float* y, int64_t ldy, int S, int* rc) {
#if DS4J_HAVE_TC
    using namespace tc;
    // shape-only conditions (and alignment), so the choice never depends on S beyond the threshold
    if (!tc_format(format, v.scale_kind) || rows < 64) return false;
    if ((row_bytes_of(format, v.cols) & 15) != 0 || ((uintptr_t)v.w & 15u) != 0 || ((uintptr_t)x & 15u) != 0 ||
        (ldx & 3) != 0 || (xgs & 3) != 0)
        return false;
    if (!tc_device(ctx)) return false;
    const int groups = rows / grp, tpg = (grp + BM - 1) / BM;
    if ((int64_t)groups * tpg > 65535) return false;
    Args a{};
    a.v = v;
    a.rows = rows;
    a.grp = grp;
    a.tiles_per_grp = tpg;
    a.xgs = xgs;
    a.x = x;
    a.ldx = ldx;
    a.y = y;
    a.ldy = ldy;
    a.S = S;
    a.kparts = k_parts((int64_t)groups * tpg, (v.cols + BK - 1) / BK);
    if (a.kparts > 1) {
        *rc = partials_scratch(ctx, (int64_t)a.kparts * S * rows * 4, &a.part);
        if (*rc != DS4J_OK) return true;
    }
    const int bn = pick_bn(ctx, false, (int64_t)groups * tpg * a.kparts, 0, S);
    const int xrc = xsplit(ctx, a, (int64_t)groups * S, v.cols, groups > 1 ? xgs : 0, S);
    if (xrc != DS4J_OK) {
        *rc = xrc;
        return true;
    }
    dim3 grid((unsigned)((S + bn - 1) / bn), (unsigned)(groups * tpg), (unsigned)a.kparts);
    hipError_t e = launch_gemm<false>(ctx, format, bn, grid, a);
    *rc = e == hipSuccess ? DS4J_OK : fail_hip(e, "launching matmul (tensor cores)");
    if (*rc == DS4J_OK) launched_kernels.fetch_add(1, std::memory_order_relaxed);
    if (*rc == DS4J_OK && a.kparts > 1) *rc = sum_partials(ctx, a.part, a.kparts, S, rows, y, ldy, nullptr, nullptr);
    return true;
#else
    (void)ctx, (void)format, (void)v, (void)rows, (void)grp, (void)xgs, (void)x, (void)ldx, (void)y, (void)ldy, (void)S,
        (void)rc;
    return false;
#endif
}

}  // namespace ds4j

using namespace ds4j;

extern "C" {

int32_t ds4j_tc_available(ds4j_ctx* ctx, int32_t* host_available) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(host_available, "ds4j_tc_available: null output");
    *host_available = tc_device(ctx) ? 1 : 0;
    return DS4J_OK;
}

int32_t ds4j_moe_matmul_prefill(ds4j_ctx* ctx, int32_t format, void* const* w_table, void* const* scale_table,
                                const int32_t* row_base_table, int32_t scale_kind, int32_t rows, int32_t cols, int32_t E,
                                const int32_t* ids, int32_t k, int32_t S, const float* x, int64_t ldx,
                                int32_t x_per_pick, float* y, int64_t ldy, void* scratch, int64_t scratch_bytes,
                                int32_t tc_rows) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG_TC_ROWS("ds4j_moe_matmul_prefill", tc_rows);
    DS4J_ARG(E > 0 && k > 0 && S >= 0 && (int64_t)S * k <= 0x7fffffff, "ds4j_moe_matmul_prefill: bad E %d / k %d / S %d",
             E, k, S);
    const int64_t P = (int64_t)S * k, need = 4 * (P + 3 * (int64_t)E + 1);
    DS4J_ARG(scratch && scratch_bytes >= need && ((uintptr_t)scratch & 15u) == 0,
             "ds4j_moe_matmul_prefill: scratch of %lld bytes (need %lld, 16-byte aligned)", (long long)scratch_bytes,
             (long long)need);
    const bool prefill = S >= tc_min_rows(tc_rows);
#if DS4J_HAVE_TC
    using namespace tc;
    const bool use = prefill && tc_format(format, scale_kind) && rows > 0 && cols > 0 &&
                     (row_bytes_of(format, cols) & 15) == 0 && ((uintptr_t)x & 15u) == 0 && (ldx & 3) == 0 &&
                     tc_device(ctx) && (rows + BM - 1) / BM <= 65535;
    if (use) {
        // the same argument checks as ds4j_moe_matmul
        DS4J_ARG(w_table && (format < DS4J_FMT_FP8_E4M3_B128 || scale_table),
                 "ds4j_moe_matmul_prefill: null weight or scale table (format %d)", format);
        DS4J_ARG(format != DS4J_FMT_FP4_E2M1_B32 || cols % 32 == 0, "ds4j_moe_matmul_prefill: FP4 cols %d not a multiple of 32", cols);
        DS4J_ARG(ids && x && y && ldx >= cols && ldy >= rows, "ds4j_moe_matmul_prefill: bad arguments");
        int32_t* perm = (int32_t*)scratch;
        int32_t* cnt = perm + P;
        int32_t* off = cnt + E;
        int32_t* tile_prefix = off + E;
        moe_group_kernel<<<E, 256, 0, ctx->stream>>>(ids, (int)P, perm, cnt, off);
        DS4J_LAUNCHED("moe_group");
        const int bn = pick_bn(ctx, true, 0, P / E, 0);
        moe_tiles_kernel<<<1, 1024, 0, ctx->stream>>>(cnt, E, bn, tile_prefix);
        DS4J_LAUNCHED("moe_tiles");
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
        a.perm = perm;
        a.cnt = cnt;
        a.off = off;
        a.tile_prefix = tile_prefix;
        a.E = E;
        a.k = k;
        a.x_per_pick = x_per_pick;
        // sum over experts of ceil(cnt / bn) <= P / bn + (experts with picks)
        const int xrc = xsplit(ctx, a, x_per_pick ? P : S, cols, 0, (int)(x_per_pick ? P : S));
        if (xrc != DS4J_OK) return xrc;
        const int64_t max_tiles = P / bn + (E < P ? E : P);
        dim3 grid((unsigned)max_tiles, (unsigned)((rows + BM - 1) / BM));
        const hipError_t e = launch_gemm<true>(ctx, format, bn, grid, a);
        if (e != hipSuccess) return fail_hip(e, "launching moe_matmul (tensor cores)");
        launched_kernels.fetch_add(1, std::memory_order_relaxed);
        return DS4J_OK;
    }
#endif
    return moe_matmul_impl(ctx, format, w_table, scale_table, row_base_table, scale_kind, rows, cols, E, ids, k, S, x,
                           ldx, x_per_pick, y, ldy, !prefill);
}

}  // extern "C"
