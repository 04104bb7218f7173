// Tensor-core GEMMs for prefill (ds4j_gpu.h, DS4J_TC_MIN_ROWS): dense and grouped matrix products against
// stored-format weights, and routed-expert products with the picks grouped by expert (ds4j_moe_matmul_prefill).
//
// One block computes a tile of BM weight rows x BN tokens with mma.sync.m16n8k16 (BF16 in, F32 accumulate), walking
// the columns BK at a time. The weight tile is read as 16-byte chunks of the stored format and dequantised into
// shared memory as BF16 (exact for BF16, FP8 x E8M0 and FP4 x E8M0; F16 becomes an exact pair of BF16 parts); the
// F32 activations are split into BF16 hi and lo parts on the way into shared memory. The next tile's global loads are
// issued into registers before the current tile is multiplied, so their latency hides behind the MMAs.
//
// Batch invariance: the value of output (s, r) is the sum over column tiles in order of the same MMA sequence, so it
// depends on row r and token s only, never on S, on the token's place in its tile, or on the other picks of an expert.
#include "tc.h"

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
    constexpr int MAXDEV = 64;
    static std::atomic<int> cc[MAXDEV];  // 0 unknown, else major compute capability + 1
    const int d = ctx->device;
    int v = d >= 0 && d < MAXDEV ? cc[d].load() : 0;
    if (v == 0) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        v = major + 1;
        if (d >= 0 && d < MAXDEV) cc[d].store(v);
    }
    return v - 1 >= 8;
#else
    (void)ctx;
    return false;
#endif
}

#if DS4J_HAVE_TC
namespace tc {

constexpr int BM = 128;      // weight rows per block (MMA M)
constexpr int BN = 64;       // tokens per block (MMA N)
constexpr int BK = 32;       // columns per step
constexpr int THREADS = 256; // 8 warps: 4 along the rows x 2 along the tokens, each 32 x 32
constexpr int LDW = (BK + 8) / 2;  // shared row stride in 32-bit words (two BF16 each): 80 bytes, conflict-free loads

/** Per format: elements per 16-byte chunk, whether W is split into two BF16 parts. */
template <int FMT> struct Fmt;
template <> struct Fmt<DS4J_FMT_F16> { static constexpr int EPC = 8; static constexpr bool SPLIT = true; };
template <> struct Fmt<DS4J_FMT_BF16> { static constexpr int EPC = 8; static constexpr bool SPLIT = false; };
template <> struct Fmt<DS4J_FMT_FP8_E4M3_B128> { static constexpr int EPC = 16; static constexpr bool SPLIT = false; };
template <> struct Fmt<DS4J_FMT_FP4_E2M1_B32> { static constexpr int EPC = 32; static constexpr bool SPLIT = false; };

/** Two floats -> BF16 pair (round to nearest even), lo in the low half. */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/** (a, b) ~ hi + lo, BF16 pairs: hi = bf16(x), lo = bf16(x - hi), so |x - hi - lo| <= 2^-16 |x|. */
__device__ __forceinline__ void split_bf16(float a, float b, uint32_t& hi, uint32_t& lo) {
    hi = pack_bf16(a, b);
    lo = pack_bf16(__fsub_rn(a, __uint_as_float(hi << 16)), __fsub_rn(b, __uint_as_float(hi & 0xffff0000u)));
}

/** Two F16 bit patterns (low, high half) -> floats. */
__device__ __forceinline__ float2 h2_to_f2(uint32_t u) {
    __half2 h;
    memcpy(&h, &u, 4);
    return __half22float2(h);
}

/** 16 bytes at an address of any alignment (experts whose storage is not 16-byte aligned). */
__device__ __forceinline__ uint4 load16_bytes(const uint8_t* p) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) |
               ((uint32_t)p[4 * i + 3] << 24);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/** D += A B for one m16n8k16 tile: a[4] (row-major A fragment), b0, b1 (column-major B fragment), BF16. */
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/**
 * Decodes one 16-byte chunk (EPC elements) into EPC/2 BF16 pairs hi[] (and lo[] for F16). FP8 and FP4 go through
 * F16 patterns (value x 2^-8, x 2^-14, see gemm.cpp decode_chunk) and are multiplied by 2^8 (2^14) x the E8M0 block
 * scale, a power of two, so value x scale is exact in F32 and then in BF16 (it has at most 4 significant bits).
 */
template <int FMT>
__device__ __forceinline__ void decode(const uint4& q, float sc, uint32_t* hi, uint32_t* lo) {
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
        constexpr float UNIT = FMT == DS4J_FMT_FP8_E4M3_B128 ? 256.f : 16384.f;
        const float mult = sc * UNIT;
        // mult overflows only for scales near 2^127: then scale in two steps (both exact)
        const bool two = isinf(mult) && !isinf(sc);
#define DS4J_TC_SCALE(v) (two ? ((v) * UNIT) * sc : (v) * mult)
        if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t t0 = __byte_perm(u[i], 0u, 0x4140u), t1 = __byte_perm(u[i], 0u, 0x4342u);
                const float2 f0 = h2_to_f2(((t0 & 0x00800080u) << 8) | ((t0 & 0x007f007fu) << 7));
                const float2 f1 = h2_to_f2(((t1 & 0x00800080u) << 8) | ((t1 & 0x007f007fu) << 7));
                hi[2 * i] = pack_bf16(DS4J_TC_SCALE(f0.x), DS4J_TC_SCALE(f0.y));
                hi[2 * i + 1] = pack_bf16(DS4J_TC_SCALE(f1.x), DS4J_TC_SCALE(f1.y));
            }
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    const uint32_t by = (u[i] >> (8 * b)) & 0xffu, t = by | (by << 12);
                    const float2 f = h2_to_f2(((t & 0x00080008u) << 12) | ((t & 0x00070007u) << 9));
                    hi[4 * i + b] = pack_bf16(DS4J_TC_SCALE(f.x), DS4J_TC_SCALE(f.y));
                }
        }
#undef DS4J_TC_SCALE
    }
}

/** Weight chunks and activations of one column tile, in registers between the global loads and the shared stores. */
template <int FMT>
struct Regs {
    static constexpr int EPC = Fmt<FMT>::EPC, CPR = BK / EPC, NCH = BM * CPR, NPT = (NCH + THREADS - 1) / THREADS;
    uint4 wq[NPT];
    float ws[NPT];
    float4 xq[2];
};

/** Global -> registers: the weight chunks (rows row0 .. row_end-1) and activations of the column tile at k0. */
template <int FMT>
__device__ __forceinline__ void load_tile(Regs<FMT>& t, const WView& v, int64_t rb, bool wal, int row0, int row_end,
                                          const float* x, const int64_t* xoff, int k0) {
    using R = Regs<FMT>;
    const int tid = threadIdx.x, cols = v.cols;
#pragma unroll
    for (int i = 0; i < R::NPT; i++) {
        const int c = tid + i * THREADS;
        t.wq[i] = make_uint4(0u, 0u, 0u, 0u);
        t.ws[i] = 1.f;
        if (R::NCH % THREADS == 0 || c < R::NCH) {
            const int gr = row0 + c / R::CPR, col = k0 + (c % R::CPR) * R::EPC;
            if (gr < row_end && col < cols) {
                const uint8_t* p = v.w + (size_t)gr * rb + (size_t)col * 16 / R::EPC;
                t.wq[i] = wal ? __ldg(reinterpret_cast<const uint4*>(p)) : load16_bytes(p);
                if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128)
                    t.ws[i] = e8m0(v.scale[(size_t)((v.row_base + gr) >> 7) * v.scale_cols + (col >> 7)]);
                else if constexpr (FMT == DS4J_FMT_FP4_E2M1_B32)
                    t.ws[i] = e8m0(v.scale[(size_t)gr * (cols >> 5) + (col >> 5)]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int c = tid + i * THREADS, tok = c >> 3, col = k0 + (c & 7) * 4;
        const int64_t o = xoff[tok];
        t.xq[i] = (o >= 0 && col < cols) ? __ldg(reinterpret_cast<const float4*>(x + o + col)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

/** Registers -> shared memory: weights decoded to BF16 (hi, and lo for F16), activations split into hi and lo. */
template <int FMT>
__device__ __forceinline__ void store_tile(const Regs<FMT>& t, uint32_t* sw, uint32_t* swl, uint32_t* sxh, uint32_t* sxl) {
    using R = Regs<FMT>;
    constexpr int EPC = R::EPC;
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < R::NPT; i++) {
        const int c = tid + i * THREADS;
        if (R::NCH % THREADS == 0 || c < R::NCH) {
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
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int c = tid + i * THREADS, o = (c >> 3) * LDW + (c & 7) * 2;
        uint32_t h0, l0, h1, l1;
        split_bf16(t.xq[i].x, t.xq[i].y, h0, l0);
        split_bf16(t.xq[i].z, t.xq[i].w, h1, l1);
        *reinterpret_cast<uint2*>(sxh + o) = make_uint2(h0, h1);
        *reinterpret_cast<uint2*>(sxl + o) = make_uint2(l0, l1);
    }
}

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
};

template <int FMT, bool MOE>
__global__ void __launch_bounds__(THREADS) gemm_kernel(Args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    __trap();  // the host only launches this on compute capability >= 8.0 (tc_device)
#else
    constexpr bool SPLIT = Fmt<FMT>::SPLIT;
    __shared__ __align__(16) uint32_t sw[BM * LDW];
    __shared__ __align__(16) uint32_t swl[SPLIT ? BM * LDW : 4];
    __shared__ __align__(16) uint32_t sxh[BN * LDW];
    __shared__ __align__(16) uint32_t sxl[BN * LDW];
    __shared__ int64_t xoff[BN], yoff[BN];  // element offsets of each token's x and y rows (-1: no token)

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, tig = lane & 3;
    WView v = a.v;
    int row0, row_end;
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
        v.w = (const uint8_t*)a.w_table[e];
        if (!v.w) return;  // expert e is in host memory (hybrid placement): the caller fills its pick rows itself
        v.scale = a.scale_table ? (const uint8_t*)a.scale_table[e] : nullptr;
        v.row_base = a.row_base_table ? a.row_base_table[e] : 0;
        row0 = blockIdx.y * BM;
        row_end = min(a.rows, row0 + BM);
        if (tid < BN) {
            if (tid < len) {
                const int p = a.perm[start + tid];
                xoff[tid] = (int64_t)(a.x_per_pick ? p : p / a.k) * a.ldx;
                yoff[tid] = (int64_t)p * a.ldy;
            } else {
                xoff[tid] = -1;
                yoff[tid] = -1;
            }
        }
    } else {
        const int gi = blockIdx.y / a.tiles_per_grp, ti = blockIdx.y % a.tiles_per_grp;
        row0 = gi * a.grp + ti * BM;
        row_end = min(row0 + BM, (gi + 1) * a.grp);
        if (tid < BN) {
            const int s = blockIdx.x * BN + tid;
            xoff[tid] = s < a.S ? (int64_t)s * a.ldx + (int64_t)gi * a.xgs : -1;
            yoff[tid] = s < a.S ? (int64_t)s * a.ldy : -1;
        }
    }
    const int cols = v.cols;
    const int64_t rb = row_bytes_of(FMT, cols);
    const bool wal = ((uintptr_t)v.w & 15u) == 0;
    __syncthreads();

    Regs<FMT> regs;

    float acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[mi][ni][j] = 0.f;

    const int wm = warp & 3, wn = warp >> 2;
    const int nk = (cols + BK - 1) / BK;
    load_tile<FMT>(regs, v, rb, wal, row0, row_end, a.x, xoff, 0);
    for (int kt = 0; kt < nk; kt++) {
        store_tile<FMT>(regs, sw, swl, sxh, sxl);
        __syncthreads();
        if (kt + 1 < nk) load_tile<FMT>(regs, v, rb, wal, row0, row_end, a.x, xoff, (kt + 1) * BK);
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            // fragments (PTX ISA, mma.m16n8k16): A a0 = (row g, k 2t..2t+1), a1 = row g+8, a2 = k+8, a3 = both;
            // B b0 = (k 2t..2t+1, column g), b1 = k+8; t = lane % 4. One 32-bit word holds two consecutive k.
            uint32_t af[2][4], afl[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const int o = (wm * 32 + mi * 16 + g) * LDW + kk * 8 + tig;
                af[mi][0] = sw[o];
                af[mi][1] = sw[o + 8 * LDW];
                af[mi][2] = sw[o + 4];
                af[mi][3] = sw[o + 8 * LDW + 4];
                if constexpr (SPLIT) {
                    afl[mi][0] = swl[o];
                    afl[mi][1] = swl[o + 8 * LDW];
                    afl[mi][2] = swl[o + 4];
                    afl[mi][3] = swl[o + 8 * LDW + 4];
                }
            }
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int o = (wn * 32 + ni * 8 + g) * LDW + kk * 8 + tig;
                const uint32_t bh0 = sxh[o], bh1 = sxh[o + 4], bl0 = sxl[o], bl1 = sxl[o + 4];
#pragma unroll
                for (int mi = 0; mi < 2; mi++) {
                    mma_bf16(acc[mi][ni], af[mi], bh0, bh1);
                    mma_bf16(acc[mi][ni], af[mi], bl0, bl1);
                    if constexpr (SPLIT) mma_bf16(acc[mi][ni], afl[mi], bh0, bh1);
                }
            }
        }
        __syncthreads();
    }

    // C fragment: c0, c1 = (row g, columns 2t, 2t+1), c2, c3 = row g+8
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            const int r = row0 + wm * 32 + mi * 16 + g, t = wn * 32 + ni * 8 + 2 * tig;
            const int64_t y0 = yoff[t], y1 = yoff[t + 1];
            if (r < row_end) {
                if (y0 >= 0) a.y[y0 + r] = acc[mi][ni][0];
                if (y1 >= 0) a.y[y1 + r] = acc[mi][ni][1];
            }
            if (r + 8 < row_end) {
                if (y0 >= 0) a.y[y0 + r + 8] = acc[mi][ni][2];
                if (y1 >= 0) a.y[y1 + r + 8] = acc[mi][ni][3];
            }
        }
#endif
}

// ------------------------------------------------------------------------------------------- grouping picks by expert

/**
 * Block e: off[e] = picks with an id below e, cnt[e] = picks of expert e, and perm[off[e] ..] = those picks in
 * ascending pick order (a stable counting sort; ids outside [0, E) belong to no expert and are left out).
 */
__global__ void moe_group_kernel(const int32_t* ids, int P, int32_t* perm, int32_t* cnt, int32_t* off) {
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

/** tile_prefix[e] = sum over e' < e of ceil(cnt[e'] / BN), e <= E (one block). */
__global__ void moe_tiles_kernel(const int32_t* cnt, int E, int32_t* tile_prefix) {
    __shared__ int sh[32];
    int carry = 0;
    for (int e0 = 0; e0 < E; e0 += blockDim.x) {
        const int e = e0 + threadIdx.x;
        const int v = e < E ? (cnt[e] + BN - 1) / BN : 0;
        int tot;
        const int x = block_excl_scan(v, sh, &tot);
        if (e < E) tile_prefix[e] = carry + x;
        carry += tot;
    }
    if (threadIdx.x == 0) tile_prefix[E] = carry;
}

/** Formats with an exact BF16 path: BF16, F16, FP8 with E8M0 scales, FP4. */
static bool tc_format(int format, int scale_kind) {
    return format == DS4J_FMT_BF16 || format == DS4J_FMT_F16 || format == DS4J_FMT_FP4_E2M1_B32 ||
           (format == DS4J_FMT_FP8_E4M3_B128 && scale_kind == DS4J_SCALE_E8M0);
}

#define DS4J_TC_DISPATCH(format, CALL)                                                                    \
    switch (format) {                                                                                     \
        case DS4J_FMT_F16: { constexpr int F = DS4J_FMT_F16; CALL; break; }                               \
        case DS4J_FMT_BF16: { constexpr int F = DS4J_FMT_BF16; CALL; break; }                             \
        case DS4J_FMT_FP8_E4M3_B128: { constexpr int F = DS4J_FMT_FP8_E4M3_B128; CALL; break; }           \
        default: { constexpr int F = DS4J_FMT_FP4_E2M1_B32; CALL; break; }                                \
    }

}  // namespace tc
#endif  // DS4J_HAVE_TC

bool tc_matmul(ds4j_ctx* ctx, int format, const WView& v, int rows, int grp, int64_t xgs, const float* x, int64_t ldx,
               float* y, int64_t ldy, int S, int* rc) {
#if DS4J_HAVE_TC
    using namespace tc;
    // shape-only conditions (and alignment), so the choice never depends on S beyond the threshold
    if (S < DS4J_TC_MIN_ROWS || !tc_format(format, v.scale_kind) || rows < 64) return false;
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
    dim3 grid((unsigned)((S + BN - 1) / BN), (unsigned)(groups * tpg));
    DS4J_TC_DISPATCH(format, (gemm_kernel<F, false><<<grid, THREADS, 0, ctx->stream>>>(a)))
    hipError_t e = hipGetLastError();
    *rc = e == hipSuccess ? DS4J_OK : fail_hip(e, "launching matmul (tensor cores)");
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
                                int32_t x_per_pick, float* y, int64_t ldy, void* scratch, int64_t scratch_bytes) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(E > 0 && k > 0 && S >= 0 && (int64_t)S * k <= 0x7fffffff, "ds4j_moe_matmul_prefill: bad E %d / k %d / S %d",
             E, k, S);
    const int64_t P = (int64_t)S * k, need = 4 * (P + 3 * (int64_t)E + 1);
    DS4J_ARG(scratch && scratch_bytes >= need && ((uintptr_t)scratch & 15u) == 0,
             "ds4j_moe_matmul_prefill: scratch of %lld bytes (need %lld, 16-byte aligned)", (long long)scratch_bytes,
             (long long)need);
#if DS4J_HAVE_TC
    using namespace tc;
    const bool use = S >= DS4J_TC_MIN_ROWS && tc_format(format, scale_kind) && rows > 0 && cols > 0 &&
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
        moe_tiles_kernel<<<1, 1024, 0, ctx->stream>>>(cnt, E, tile_prefix);
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
        // sum over experts of ceil(cnt / BN) <= P / BN + (experts with picks)
        const int64_t max_tiles = P / BN + (E < P ? E : P);
        dim3 grid((unsigned)max_tiles, (unsigned)((rows + BM - 1) / BM));
        DS4J_TC_DISPATCH(format, (gemm_kernel<F, true><<<grid, THREADS, 0, ctx->stream>>>(a)))
        DS4J_LAUNCHED("moe_matmul (tensor cores)");
        return DS4J_OK;
    }
#endif
    return ds4j_moe_matmul(ctx, format, w_table, scale_table, row_base_table, scale_kind, rows, cols, ids, k, S, x, ldx,
                           x_per_pick, y, ldy);
}

}  // extern "C"
