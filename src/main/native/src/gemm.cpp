// Matrix products against stored-format weights (dequantised in the kernel), routed-expert products and the
// embedding gather (ds4j_gpu.h: ds4j_matmul, ds4j_moe_matmul, ds4j_embed).
//
// One warp computes one output row r for up to TS tokens: lanes stride over the columns, each weight element is
// decoded once per token group and multiplied into TS accumulators, then the warp reduces. The result for (s, r)
// depends only on row r and token s (batch invariant), never on S or on the grouping.
#include "tc.h"

namespace ds4j {

constexpr int MM_WARPS = 8;  // rows per block
constexpr int MM_TS = 8;     // tokens per block

template <int FMT>
__global__ void __launch_bounds__(MM_WARPS * WARP)
matmul_kernel(WView v, int rows, const float* __restrict__ x, int64_t ldx, float* __restrict__ y, int64_t ldy, int S,
              int grp, int64_t xgs) {
    DS4J_AWAIT_PREVIOUS();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.y * MM_WARPS + warp;
    if (r >= rows) return;
    const int s0 = blockIdx.x * MM_TS;
    const int ns = min(MM_TS, S - s0);
    const float* xs = x + (int64_t)s0 * ldx + (int64_t)(r / grp) * xgs;
    float acc[MM_TS];
#pragma unroll
    for (int t = 0; t < MM_TS; t++) acc[t] = 0.f;
    const int cols = v.cols;
    if (ns == MM_TS) {
#pragma unroll 2
        for (int c = lane; c < cols; c += WARP) {
            const float wv = wget<FMT>(v, r, c);
#pragma unroll
            for (int t = 0; t < MM_TS; t++) acc[t] += wv * xs[(int64_t)t * ldx + c];
        }
    } else {
        for (int c = lane; c < cols; c += WARP) {
            const float wv = wget<FMT>(v, r, c);
#pragma unroll
            for (int t = 0; t < MM_TS; t++)
                if (t < ns) acc[t] += wv * xs[(int64_t)t * ldx + c];
        }
    }
#pragma unroll
    for (int t = 0; t < MM_TS; t++) {
        const float sum = warp_sum(acc[t]);
        if (lane == 0 && t < ns) y[(int64_t)(s0 + t) * ldy + r] = sum;
    }
}

// ------------------------------------------------------------------------------------------- vectorised rows
// When a stored row is a whole number of 16-byte chunks and the pointers are 16-byte aligned, each lane loads whole
// chunks (4 F32, 8 BF16/F16, 16 FP8 or 32 FP4 elements), MV_UNROLL chunks in flight, and x as float4. FP8 and FP4
// are widened through F16 bit patterns (e4m3 -> f16 scales by 2^-8, e2m1 -> f16 by 2^-14, folded into the block
// scale), which is exact: every weight equals WeightMatrix#get's value x scale with one rounding.

template <int FMT> struct Epc;
template <> struct Epc<DS4J_FMT_F32> { static constexpr int v = 4; };
template <> struct Epc<DS4J_FMT_F16> { static constexpr int v = 8; };
template <> struct Epc<DS4J_FMT_BF16> { static constexpr int v = 8; };
template <> struct Epc<DS4J_FMT_FP8_E4M3_B128> { static constexpr int v = 16; };
template <> struct Epc<DS4J_FMT_FP4_E2M1_B32> { static constexpr int v = 32; };

constexpr int MV_UNROLL = 4;
// Chunks in flight per lane in matvec_split_kernel: its rows are few (the mHC mapping: 24 rows of n D F32 columns), so
// each block streams a long row and with MV_UNROLL waited for the memory several times in turn. A lane's chunks are
// added in the same order whatever the unroll, so the bits do not change.
template <int FMT> constexpr int MV_SPLIT_UNROLL = FMT == DS4J_FMT_F32 ? 16 : MV_UNROLL;

/** False when DS4J_MV_SPLIT_UNROLL is "4": the split F32 rows keep MV_UNROLL chunks in flight (measurements; same bits). */
static bool mv_split_wide() {
    static std::atomic<int> on{-1};
    return !env_equals(on, "DS4J_MV_SPLIT_UNROLL", "4");
}

/**
 * Fewest tokens from which a split product (few rows of many chunks) runs matvec_rows_kernel instead of
 * matvec_split_kernel (the same bits): DS4J_MV_ROWS (read once; 0 never), else MV_ROWS_MIN.
 */
constexpr int MV_ROWS_MIN = 65;
static int mv_rows_min() {
    static std::atomic<int> c{0};
    const int v = env_choice(c, "DS4J_MV_ROWS", MV_ROWS_MIN, 0, 1 << 20);
    return v == 0 ? INT32_MAX : v;
}

/** Two F16 bit patterns (low, high half) -> floats. */
__device__ __forceinline__ void h2f2(uint32_t h2, float* w) {
    w[0] = __half2float(__ushort_as_half((uint16_t)(h2 & 0xffffu)));
    w[1] = __half2float(__ushort_as_half((uint16_t)(h2 >> 16)));
}

/**
 * Decodes one 16-byte chunk into w[Epc]. Dense formats give the values; FP8 gives e4m3 x 2^-8 and FP4 gives
 * e2m1 x 2^-14 (exact F16 patterns built with byte permutes), to be multiplied by the chunk's block scale x 2^8 or
 * x 2^14 once per chunk (a power of two for E8M0 scales, so this equals scaling every weight).
 */
template <int FMT>
__device__ __forceinline__ void decode_chunk(const uint4& q, float* w) {
    const uint32_t u[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (FMT == DS4J_FMT_F32) {
            w[i] = __uint_as_float(u[i]);
        } else if constexpr (FMT == DS4J_FMT_BF16) {
            w[2 * i] = __uint_as_float(u[i] << 16);
            w[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
        } else if constexpr (FMT == DS4J_FMT_F16) {
            h2f2(u[i], w + 2 * i);
        } else if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128) {
            // bytes (b0, b1) and (b2, b3) spread to 16-bit lanes, then sign -> bit 15, exponent+mantissa -> bits 13..7
            const uint32_t t0 = __byte_perm(u[i], 0u, 0x4140u), t1 = __byte_perm(u[i], 0u, 0x4342u);
            h2f2(((t0 & 0x00800080u) << 8) | ((t0 & 0x007f007fu) << 7), w + 4 * i);
            h2f2(((t1 & 0x00800080u) << 8) | ((t1 & 0x007f007fu) << 7), w + 4 * i + 2);
        } else {
#pragma unroll
            for (int b = 0; b < 4; b++) {
                // byte b: low nibble -> low half, high nibble -> high half (t = byte | byte << 12)
                const uint32_t by = (u[i] >> (8 * b)) & 0xffu, t = by | (by << 12);
                h2f2(((t & 0x00080008u) << 12) | ((t & 0x00070007u) << 9), w + 8 * i + 2 * b);
            }
        }
    }
}

/** The factor of chunk c of row r (decode_chunk's values times it are the weights): the block scale, 1 if unscaled. */
template <int FMT>
__device__ __forceinline__ float chunk_scale(const WView& v, int r, int c) {
    if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128) {
        const size_t si = (size_t)((v.row_base + r) >> 7) * v.scale_cols + ((c * 16) >> 7);
        return v.scale_kind == DS4J_SCALE_F32 ? ((const float*)v.scale)[si] : e8m0(v.scale[si]);
    } else if constexpr (FMT == DS4J_FMT_FP4_E2M1_B32) {
        return e8m0(v.scale[(size_t)r * (v.cols >> 5) + c]);
    }
    return 1.f;
}

/**
 * acc += one chunk's products: w (decode_chunk's E values) times the E activations xv, summed in column order
 * into a partial, then scaled by s (chunk_scale) and added. Every vectorised kernel adds a chunk through this one
 * function, so the same chunk gives the same bits in each.
 */
template <int FMT>
__device__ __forceinline__ void chunk_add(float& acc, const float (&w)[Epc<FMT>::v], const float4 (&xv)[Epc<FMT>::v / 4],
                                          float s) {
    constexpr int E = Epc<FMT>::v;
    constexpr bool QUANT = FMT == DS4J_FMT_FP8_E4M3_B128 || FMT == DS4J_FMT_FP4_E2M1_B32;
    constexpr float UNIT = FMT == DS4J_FMT_FP8_E4M3_B128 ? 256.f : 16384.f;
    float part = 0.f;
#pragma unroll
    for (int k = 0; k < E / 4; k++) {
        part += w[4 * k] * xv[k].x;
        part += w[4 * k + 1] * xv[k].y;
        part += w[4 * k + 2] * xv[k].z;
        part += w[4 * k + 3] * xv[k].w;
    }
    if constexpr (QUANT) {
        const float mult = s * UNIT;  // inf only for scales near 2^127: then scale in two steps
        acc += (isinf(mult) && !isinf(s)) ? (part * UNIT) * s : part * mult;
    } else {
        acc += part;
    }
}

/** The E activations of one chunk (16-byte aligned) as float4s. */
template <int FMT>
__device__ __forceinline__ void load_x(const float* xp, float4 (&xv)[Epc<FMT>::v / 4]) {
#pragma unroll
    for (int k = 0; k < Epc<FMT>::v / 4; k++) xv[k] = reinterpret_cast<const float4*>(xp)[k];
}

/**
 * acc[t] += sum over this warp's chunks of W[r, c] x[t*ldx + c], t < ns; warp sw of `split` warps per row; U chunks
 * of a lane in flight (a lane's chunks are added in ascending order for any U).
 */
template <int FMT, int U = MV_UNROLL>
__device__ __forceinline__ void row_dot_vec(const WView& v, int r, const float* __restrict__ x, int64_t ldx, int ns,
                                            float* acc, int sw = 0, int split = 1) {
    constexpr int E = Epc<FMT>::v;
    const int lane = threadIdx.x & 31;
    const int64_t rb = row_bytes_of(FMT, v.cols);
    const uint4* wr = reinterpret_cast<const uint4*>(v.w + (size_t)r * rb);
    const int nch = (int)(rb / 16);
    const int step = WARP * split;
    for (int c0 = lane + WARP * sw; c0 < nch; c0 += step * U) {
        uint4 q[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + step * u;
            if (c < nch) q[u] = __ldg(wr + c);
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + step * u;
            if (c >= nch) break;
            const float s = chunk_scale<FMT>(v, r, c);
            float w[E];
            decode_chunk<FMT>(q[u], w);
            const int col0 = c * E;
#pragma unroll
            for (int t = 0; t < MM_TS; t++)
                if (t < ns) {
                    float4 xv[E / 4];
                    load_x<FMT>(x + (int64_t)t * ldx + col0, xv);
                    chunk_add<FMT>(acc[t], w, xv, s);
                }
        }
    }
}

/**
 * Few-row matrices (the mHC mappings, qA, kv, ...) take MM_WARPS warps per row (split over the chunks) so that
 * enough warps stream the weights; the choice depends on the shape only.
 */
template <int FMT, int U>
__global__ void __launch_bounds__(MM_WARPS * WARP)
matvec_split_kernel(WView v, int rows, const float* __restrict__ x, int64_t ldx, float* __restrict__ y, int64_t ldy, int S,
                    int grp, int64_t xgs) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ float part[MM_WARPS][MM_TS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.y;
    const int s0 = blockIdx.x * MM_TS;
    const int ns = min(MM_TS, S - s0);
    float acc[MM_TS];
#pragma unroll
    for (int t = 0; t < MM_TS; t++) acc[t] = 0.f;
    row_dot_vec<FMT, U>(v, r, x + (int64_t)s0 * ldx + (int64_t)(r / grp) * xgs, ldx, ns, acc, warp, MM_WARPS);
#pragma unroll
    for (int t = 0; t < MM_TS; t++) {
        const float sum = warp_sum(acc[t]);
        if (lane == 0) part[warp][t] = sum;
    }
    __syncthreads();
    if (threadIdx.x < ns) {
        float sum = 0.f;
        for (int w = 0; w < MM_WARPS; w++) sum += part[w][threadIdx.x];
        y[(int64_t)(s0 + threadIdx.x) * ldy + r] = sum;
    }
}

// Many tokens against few rows of many chunks (the mHC mappings in a prefill chunk): matvec_split_kernel runs one
// block per (row, token group), so every row's block reads the group's activations again (24 times for the mapping:
// at 512 tokens ~800 MB through the L2 for 34 MB of activations). matvec_rows_kernel gives a block MR_RB rows of one
// group, and each lane loads a chunk's activations once for all of them. The sums are matvec_split_kernel's: warp w
// of MM_WARPS takes chunks lane + 32 w, + 256, ... in ascending order through chunk_add, then warp_sum and the warps
// added in order; so the bits are the same and the choice between the two may follow S (mv_rows_min).
constexpr int MR_RB = 4;  // rows per block
constexpr int MR_TS = 8;  // tokens per block

/**
 * y[s, r] = W[r, :] . x[s, (r / grp) xgs ..] for the block's MR_RB rows (all of one group: grp a multiple of MR_RB, or
 * grp == rows) and MR_TS tokens; matvec_split_kernel's bits (see above). Grid (tokens / MR_TS, rows / MR_RB) rounded up.
 */
template <int FMT>
__global__ void __launch_bounds__(MM_WARPS * WARP)
matvec_rows_kernel(WView v, int rows, const float* __restrict__ x, int64_t ldx, float* __restrict__ y, int64_t ldy, int S,
                   int grp, int64_t xgs) {
    DS4J_AWAIT_PREVIOUS();
    constexpr int E = Epc<FMT>::v;
    __shared__ float part[MM_WARPS][MR_RB * MR_TS];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r0 = blockIdx.y * MR_RB, nr = min(MR_RB, rows - r0);
    const int s0 = blockIdx.x * MR_TS, ns = min(MR_TS, S - s0);
    const int64_t rb = row_bytes_of(FMT, v.cols);
    const int nch = (int)(rb / 16);
    const float* xs = x + (int64_t)s0 * ldx + (int64_t)(r0 / grp) * xgs;
    float acc[MR_RB][MR_TS];
#pragma unroll
    for (int i = 0; i < MR_RB; i++)
#pragma unroll
        for (int t = 0; t < MR_TS; t++) acc[i][t] = 0.f;
#pragma unroll 2
    for (int c = lane + WARP * warp; c < nch; c += WARP * MM_WARPS) {
        uint4 q[MR_RB];
#pragma unroll
        for (int i = 0; i < MR_RB; i++)
            if (i < nr) q[i] = __ldg(reinterpret_cast<const uint4*>(v.w + (size_t)(r0 + i) * rb) + c);
        float4 xv[MR_TS][E / 4];
#pragma unroll
        for (int t = 0; t < MR_TS; t++)
            if (t < ns) load_x<FMT>(xs + (int64_t)t * ldx + c * E, xv[t]);
#pragma unroll
        for (int i = 0; i < MR_RB; i++)
            if (i < nr) {
                const float s = chunk_scale<FMT>(v, r0 + i, c);
                float w[E];
                decode_chunk<FMT>(q[i], w);
#pragma unroll
                for (int t = 0; t < MR_TS; t++)
                    if (t < ns) chunk_add<FMT>(acc[i][t], w, xv[t], s);
            }
    }
#pragma unroll
    for (int i = 0; i < MR_RB; i++)
#pragma unroll
        for (int t = 0; t < MR_TS; t++) {
            const float sum = warp_sum(acc[i][t]);
            if (lane == 0) part[warp][i * MR_TS + t] = sum;
        }
    __syncthreads();
    const int i = threadIdx.x / MR_TS, t = threadIdx.x % MR_TS;
    if (i < nr && t < ns) {
        float sum = 0.f;
        for (int w = 0; w < MM_WARPS; w++) sum += part[w][threadIdx.x];
        y[(int64_t)(s0 + t) * ldy + r0 + i] = sum;
    }
}

template <int FMT>
__global__ void __launch_bounds__(MM_WARPS * WARP)
matvec_kernel(WView v, int rows, const float* __restrict__ x, int64_t ldx, float* __restrict__ y, int64_t ldy, int S,
              int grp, int64_t xgs) {
    DS4J_AWAIT_PREVIOUS();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.y * MM_WARPS + warp;
    if (r >= rows) return;
    const int s0 = blockIdx.x * MM_TS;
    const int ns = min(MM_TS, S - s0);
    float acc[MM_TS];
#pragma unroll
    for (int t = 0; t < MM_TS; t++) acc[t] = 0.f;
    row_dot_vec<FMT>(v, r, x + (int64_t)s0 * ldx + (int64_t)(r / grp) * xgs, ldx, ns, acc);
#pragma unroll
    for (int t = 0; t < MM_TS; t++) {
        const float sum = warp_sum(acc[t]);
        if (lane == 0 && t < ns) y[(int64_t)(s0 + t) * ldy + r] = sum;
    }
}

template <int FMT>
__global__ void __launch_bounds__(MM_WARPS * WARP)
moe_matmul_kernel(void* const* w_table, void* const* scale_table, const int32_t* row_base_table, int scale_kind,
                  int rows, int cols, const int32_t* ids, int k, const float* __restrict__ x, int64_t ldx,
                  int x_per_pick, float* __restrict__ y, int64_t ldy) {
    DS4J_AWAIT_PREVIOUS();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int r = blockIdx.y * MM_WARPS + warp;
    if (r >= rows) return;
    const int p = blockIdx.x;
    const int e = ids[p];
    WView v;
    v.w = (const uint8_t*)w_table[e];
    if (!v.w) return;  // expert e is in host memory (hybrid placement): the caller fills row p of y itself
    v.scale = scale_table ? (const uint8_t*)scale_table[e] : nullptr;
    v.scale_kind = scale_kind;
    v.row_base = row_base_table ? row_base_table[e] : 0;
    v.cols = cols;
    v.scale_cols = (cols + 127) >> 7;
    const float* xr = x + (int64_t)(x_per_pick ? p : p / k) * ldx;
    // vectorised when this expert's rows and x allow 16-byte loads (decided per expert, never by S)
    const bool vec = ((uintptr_t)v.w & 15u) == 0 && (row_bytes_of(FMT, cols) & 15) == 0 && ((uintptr_t)xr & 15u) == 0;
    float acc[MM_TS];
#pragma unroll
    for (int t = 0; t < MM_TS; t++) acc[t] = 0.f;
    if (vec) {
        row_dot_vec<FMT>(v, r, xr, 0, 1, acc);
    } else {
#pragma unroll 4
        for (int c = lane; c < cols; c += WARP) acc[0] += wget<FMT>(v, r, c) * xr[c];
    }
    const float sum = warp_sum(acc[0]);
    if (lane == 0) y[(int64_t)p * ldy + r] = sum;
}

template <int FMT>
__global__ void embed_kernel(WView v, const int32_t* tokens, int S, int n, float* X) {
    DS4J_AWAIT_PREVIOUS();
    const int64_t total = (int64_t)S * v.cols;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int s = (int)(i / v.cols), c = (int)(i % v.cols);
        const float val = wget<FMT>(v, tokens[s], c);
        for (int j = 0; j < n; j++) X[((int64_t)s * n + j) * v.cols + c] = val;
    }
}

static bool valid_format(int f) { return f >= DS4J_FMT_F32 && f <= DS4J_FMT_FP4_E2M1_B32; }

static int check_view(const char* fn, int format, const void* w, const void* scale, int scale_kind, int rows, int cols) {
    if (!valid_format(format)) return fail(DS4J_ERR_ARG, "%s: unknown weight format %d", fn, format);
    if (rows < 0 || cols <= 0) return fail(DS4J_ERR_ARG, "%s: bad shape [%d, %d]", fn, rows, cols);
    if (!w) return fail(DS4J_ERR_ARG, "%s: null weight", fn);
    if (format >= DS4J_FMT_FP8_E4M3_B128 && !scale) return fail(DS4J_ERR_ARG, "%s: quantised weight without scales", fn);
    if (format == DS4J_FMT_FP4_E2M1_B32 && (cols % 32) != 0)
        return fail(DS4J_ERR_ARG, "%s: FP4 cols %d not a multiple of 32", fn, cols);
    if (scale_kind != DS4J_SCALE_E8M0 && scale_kind != DS4J_SCALE_F32)
        return fail(DS4J_ERR_ARG, "%s: unknown scale kind %d", fn, scale_kind);
    return DS4J_OK;
}

static WView make_view(const void* w, const void* scale, int scale_kind, int row_base, int cols) {
    WView v;
    v.w = (const uint8_t*)w;
    v.scale = (const uint8_t*)scale;
    v.scale_kind = scale_kind;
    v.row_base = row_base;
    v.cols = cols;
    v.scale_cols = (cols + 127) / 128;
    return v;
}

}  // namespace ds4j

using namespace ds4j;

#define DS4J_DISPATCH_FMT(format, KERNEL_CALL)                            \
    switch (format) {                                                     \
        case DS4J_FMT_F32: { constexpr int F = DS4J_FMT_F32; KERNEL_CALL; break; } \
        case DS4J_FMT_F16: { constexpr int F = DS4J_FMT_F16; KERNEL_CALL; break; } \
        case DS4J_FMT_BF16: { constexpr int F = DS4J_FMT_BF16; KERNEL_CALL; break; } \
        case DS4J_FMT_FP8_E4M3_B128: { constexpr int F = DS4J_FMT_FP8_E4M3_B128; KERNEL_CALL; break; } \
        default: { constexpr int F = DS4J_FMT_FP4_E2M1_B32; KERNEL_CALL; break; } \
    }

static int32_t matmul_impl(const char* fn, ds4j_ctx* ctx, int32_t format, const void* w, const void* scale,
                           int32_t scale_kind, int32_t row_base, int32_t rows, int32_t cols, int32_t grp, int64_t xgs,
                           const float* x, int64_t ldx, float* y, int64_t ldy, int32_t S, int32_t tc_rows) {
    int rc = check_view(fn, format, w, scale, scale_kind, rows, cols);
    if (rc) return rc;
    DS4J_ARG_TC_ROWS(fn, tc_rows);
    DS4J_ARG(S >= 0 && x && y && ldx >= cols && ldy >= rows, "%s: bad activations (S %d, ldx %lld, ldy %lld)", fn, S,
             (long long)ldx, (long long)ldy);
    DS4J_ARG(grp > 0 && xgs >= 0, "%s: bad grouping (group_rows %d, x_group_stride %lld)", fn, grp, (long long)xgs);
    if (S == 0 || rows == 0) return DS4J_OK;
    DS4J_ARG(blocks_for(rows, MM_WARPS) <= 65535, "%s: %d rows exceed one launch", fn, rows);
    if (measure_skip(format == DS4J_FMT_F32 ? "mapping" : format == DS4J_FMT_FP8_E4M3_B128 ? "fp8" : "bf16")) return DS4J_OK;
    const WView v = make_view(w, scale, scale_kind, row_base, cols);
    // prefill: tensor cores where the format, shape and pointers allow (gemm_tc.cpp); S below the caller's threshold
    // (tc_rows, DS4J_TC_MIN_ROWS by default) never. Where they do not allow it, a call at or above the threshold runs
    // the FFMA kernels below whatever its S, as a call of DS4J_TC_MIN_ROWS rows would (never the skinny ones)
    const bool prefill = S >= tc_min_rows(tc_rows);
    if (prefill) {
        int trc = DS4J_OK;
        if (tc_matmul(ctx, format, v, rows, grp, xgs, x, ldx, y, ldy, S, &trc)) return trc;
    }
    // decode and verify steps: the skinny tensor-core product where the format, pointers and device allow it
    // (gemm_skinny.cpp); the choice depends on the format, the alignment and S below the threshold only
    if (!prefill) {
        int src = DS4J_OK;
        if (skinny_matmul(ctx, format, v, rows, grp, xgs, x, ldx, y, ldy, S, &src)) return src;
    }
    // token groups vary fastest, so that consecutive blocks read the same weight rows (L2 reuse in prefill)
    dim3 grid((unsigned)((S + MM_TS - 1) / MM_TS), blocks_for(rows, MM_WARPS));
    // below the threshold the path depends on shapes and pointers only, so results never depend on S there
    const bool vec = (row_bytes_of(format, cols) & 15) == 0 && ((uintptr_t)w & 15u) == 0 && ((uintptr_t)x & 15u) == 0 &&
                     (ldx & 3) == 0 && (xgs & 3) == 0;
    // few rows of many chunks: split each row over a block's warps
    const bool split = vec && rows < 2048 && row_bytes_of(format, cols) / 16 >= 4 * WARP;
    // matvec_rows_kernel for the formats of at most 8 values a chunk (wider ones would hold 64 or 128 activation
    // registers a token and spill: ptxas)
    const bool narrow = format == DS4J_FMT_F32 || format == DS4J_FMT_F16 || format == DS4J_FMT_BF16;
    if (split && narrow && S >= mv_rows_min() && (grp == rows || grp % MR_RB == 0)) {
        dim3 g3((unsigned)((S + MR_TS - 1) / MR_TS), (unsigned)((rows + MR_RB - 1) / MR_RB));
        auto* k = format == DS4J_FMT_F32 ? matvec_rows_kernel<DS4J_FMT_F32>
                  : format == DS4J_FMT_F16 ? matvec_rows_kernel<DS4J_FMT_F16> : matvec_rows_kernel<DS4J_FMT_BF16>;
        k<<<g3, MM_WARPS * WARP, 0, ctx->stream>>>(v, rows, x, ldx, y, ldy, S, grp, xgs);
    } else if (split) {
        dim3 g2((unsigned)((S + MM_TS - 1) / MM_TS), (unsigned)rows);
        const bool wide = mv_split_wide();
        DS4J_DISPATCH_FMT(format, ((wide ? matvec_split_kernel<F, MV_SPLIT_UNROLL<F>> : matvec_split_kernel<F, MV_UNROLL>)
                                   <<<g2, MM_WARPS * WARP, 0, ctx->stream>>>(v, rows, x, ldx, y, ldy, S, grp, xgs)))
    } else if (vec)
        DS4J_DISPATCH_FMT(format, (matvec_kernel<F><<<grid, MM_WARPS * WARP, 0, ctx->stream>>>(v, rows, x, ldx, y, ldy, S, grp, xgs)))
    else
        DS4J_DISPATCH_FMT(format, (matmul_kernel<F><<<grid, MM_WARPS * WARP, 0, ctx->stream>>>(v, rows, x, ldx, y, ldy, S, grp, xgs)))
    DS4J_LAUNCHED("matmul");
    return DS4J_OK;
}

extern "C" {

int32_t ds4j_matmul(ds4j_ctx* ctx, int32_t format, const void* w, const void* scale, int32_t scale_kind,
                    int32_t row_base, int32_t rows, int32_t cols, const float* x, int64_t ldx, float* y, int64_t ldy,
                    int32_t S, int32_t tc_rows) {
    DS4J_CHECK_CTX(ctx);
    return matmul_impl("ds4j_matmul", ctx, format, w, scale, scale_kind, row_base, rows, cols, rows > 0 ? rows : 1, 0, x,
                       ldx, y, ldy, S, tc_rows);
}

int32_t ds4j_matmul_grouped(ds4j_ctx* ctx, int32_t format, const void* w, const void* scale, int32_t scale_kind,
                            int32_t row_base, int32_t rows, int32_t cols, int32_t group_rows, int64_t x_group_stride,
                            const float* x, int64_t ldx, float* y, int64_t ldy, int32_t S, int32_t tc_rows) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(group_rows > 0 && rows % group_rows == 0, "ds4j_matmul_grouped: %d rows are not whole groups of %d", rows,
             group_rows);
    DS4J_ARG(ldx >= (int64_t)(rows / group_rows - 1) * x_group_stride + cols,
             "ds4j_matmul_grouped: ldx %lld too small for %d groups", (long long)ldx, rows / group_rows);
    return matmul_impl("ds4j_matmul_grouped", ctx, format, w, scale, scale_kind, row_base, rows, cols, group_rows,
                       x_group_stride, x, ldx, y, ldy, S, tc_rows);
}

int32_t ds4j_moe_matmul(ds4j_ctx* ctx, int32_t format, void* const* w_table, void* const* scale_table,
                        const int32_t* row_base_table, int32_t scale_kind, int32_t rows, int32_t cols,
                        const int32_t* ids, int32_t k, int32_t S, const float* x, int64_t ldx, int32_t x_per_pick,
                        float* y, int64_t ldy) {
    DS4J_CHECK_CTX(ctx);
    return moe_matmul_impl(ctx, format, w_table, scale_table, row_base_table, scale_kind, rows, cols, 0, ids, k, S, x,
                           ldx, x_per_pick, y, ldy, true);
}

}  // extern "C"

int32_t ds4j::moe_matmul_impl(ds4j_ctx* ctx, int32_t format, void* const* w_table, void* const* scale_table,
                        const int32_t* row_base_table, int32_t scale_kind, int32_t rows, int32_t cols, int32_t E,
                        const int32_t* ids, int32_t k, int32_t S, const float* x, int64_t ldx, int32_t x_per_pick,
                        float* y, int64_t ldy, bool skinny) {
    int rc = check_view("ds4j_moe_matmul", format, w_table, format >= DS4J_FMT_FP8_E4M3_B128 ? scale_table : w_table,
                        scale_kind, rows, cols);
    if (rc) return rc;
    DS4J_ARG(ids && x && y && k > 0 && S >= 0 && ldx >= cols && ldy >= rows, "ds4j_moe_matmul: bad arguments");
    if (S == 0 || rows == 0) return DS4J_OK;
    DS4J_ARG(blocks_for(rows, MM_WARPS) <= 65535, "ds4j_moe_matmul: %d rows exceed one launch", rows);
    if (measure_skip("routed")) return DS4J_OK;
    // each expert's weights read once for all its picks, on tensor cores (gemm_skinny.cpp), where allowed
    int src = DS4J_OK;
    if (skinny && skinny_moe(ctx, format, w_table, scale_table, row_base_table, scale_kind, rows, cols, E, ids, k, S, x, ldx,
                   x_per_pick, y, ldy, &src))
        return src;
    dim3 grid((unsigned)(S * k), blocks_for(rows, MM_WARPS));
    DS4J_DISPATCH_FMT(format, (moe_matmul_kernel<F><<<grid, MM_WARPS * WARP, 0, ctx->stream>>>(
                                  w_table, scale_table, row_base_table, scale_kind, rows, cols, ids, k, x, ldx,
                                  x_per_pick, y, ldy)));
    DS4J_LAUNCHED("moe_matmul");
    return DS4J_OK;
}

extern "C" {

int32_t ds4j_embed(ds4j_ctx* ctx, int32_t format, const void* w, const void* scale, int32_t scale_kind,
                   int32_t row_base, int32_t rows, int32_t cols, const int32_t* tokens, int32_t S, int32_t n,
                   float* X) {
    DS4J_CHECK_CTX(ctx);
    int rc = check_view("ds4j_embed", format, w, scale, scale_kind, rows, cols);
    if (rc) return rc;
    DS4J_ARG(tokens && X && S >= 0 && n > 0, "ds4j_embed: bad arguments");
    if (S == 0) return DS4J_OK;
    profile_step_mark(ctx, S);
    const WView v = make_view(w, scale, scale_kind, row_base, cols);
    const int64_t total = (int64_t)S * cols;
    const unsigned blocks = (unsigned)(total / 256 + 1 < 65535 ? total / 256 + 1 : 65535);
    DS4J_DISPATCH_FMT(format, (embed_kernel<F><<<blocks, 256, 0, ctx->stream>>>(v, tokens, S, n, X)));
    DS4J_LAUNCHED("embed");
    return DS4J_OK;
}

}  // extern "C"
