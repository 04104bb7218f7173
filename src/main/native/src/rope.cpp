// RoPE (spec 3.0; 3.4 steps 2-3 and 6) and its fusions with the RMSNorm of the attention inputs: ds4j_rope and
// ds4j_rope_at, RMSNorm + RoPE + F16 rounding of rows in place (ds4j_rmsnorm_rope, ds4j_rmsnorm_rope_at), the query
// and kv norms of a step in one launch (ds4j_qkv_norm_rope), and the F16 rounding alone (ds4j_round_f16: the kv row is
// rounded through binary16 before it is cached; the fused kernels end with the same rounding).
#include "common.h"

namespace ds4j {

__global__ void rope_kernel(float* x, int S, int heads, int width, int rope_dim, const float* inv_freq, int64_t pos0,
                            int64_t pos_step, const int64_t* pos, int inverse) {
    DS4J_AWAIT_PREVIOUS();
    const int half = rope_dim / 2;
    const int64_t total = (int64_t)S * heads * half;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % half);
        const int64_t sh = idx / half;  // s * heads + h
        const int s = (int)(sh / heads);
        const float ft = (float)(pos ? pos[s] : pos0 + (int64_t)s * pos_step);
        const double phi = (double)mul(inv_freq[i], ft);
        const float c = (float)cos(phi);
        float sn = (float)sin(phi);
        if (inverse) sn = -sn;
        float* base = x + sh * width + (width - rope_dim);
        const float a = base[2 * i], b = base[2 * i + 1];
        base[2 * i] = sub(mul(a, c), mul(b, sn));
        base[2 * i + 1] = add(mul(b, c), mul(a, sn));
    }
}

/** Row xr of width n in place: RMSNorm, RoPE of its last rope_dim channels at position ft, optional F16 rounding. */
__device__ __forceinline__ void rmsnorm_rope_row(float* xr, const float* weight, int n, float eps, int rope_dim,
                                                 const float* inv_freq, float ft, int round16, double* sh) {
    rmsnorm_row(xr, xr, weight, n, eps, sh);
    __syncthreads();
    float* base = xr + (n - rope_dim);
    for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x) {
        const double phi = (double)mul(inv_freq[i], ft);
        const float c = (float)cos(phi), sn = (float)sin(phi);
        const float a = base[2 * i], b = base[2 * i + 1];
        base[2 * i] = sub(mul(a, c), mul(b, sn));
        base[2 * i + 1] = add(mul(b, c), mul(a, sn));
    }
    if (round16) {
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) xr[i] = f16_to_f32(f32_to_f16(xr[i]));
    }
}

__global__ void rmsnorm_rope_kernel(float* x, const float* weight, int n, float eps, int rope_dim, const float* inv_freq,
                                    int64_t pos0, const int64_t* pos, int rows_per_pos, int round16) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ double sh[32];
    const float ft = (float)(pos ? pos[blockIdx.x / rows_per_pos] : pos0 + blockIdx.x / rows_per_pos);
    rmsnorm_rope_row(x + (int64_t)blockIdx.x * n, weight, n, eps, rope_dim, inv_freq, ft, round16, sh);
}

/**
 * The query and shared-kv norms of S rows in one launch: blocks 0 .. S*H-1 the query heads (RMSNorm_1 over d, RoPE at
 * the row's position), blocks S*H .. S*H+S-1 the kv rows (RMSNorm with kv_w, RoPE, F16 rounding). Row s is at
 * pos[s] when pos is given, else at pos0 + s.
 */
__global__ void qkv_norm_rope_kernel(float* q, float* kv, const float* kv_w, int S, int H, int d, float eps,
                                     int rope_dim, const float* inv_freq, int64_t pos0, const int64_t* pos) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ double sh[32];
    const int b = blockIdx.x;
    const bool isq = b < S * H;
    const int s = isq ? b / H : b - S * H;
    const float ft = (float)(pos ? pos[s] : pos0 + s);
    if (isq) rmsnorm_rope_row(q + (int64_t)b * d, nullptr, d, eps, rope_dim, inv_freq, ft, 0, sh);
    else rmsnorm_rope_row(kv + (int64_t)s * d, kv_w, d, eps, rope_dim, inv_freq, ft, 1, sh);
}

// qkv_norm_rope_kernel gives each row (a query head or the kv row, 512 values) a block of 256 threads, so that a
// prefill chunk of 512 tokens launches 33,280 blocks of three barriers each, which the launch rate, not the bytes,
// bounds (~120 us a layer). qkv_norm_rope_warp_kernel gives a row one warp, eight rows a block, and the same bits:
// lane l keeps the row's values l, l + 32, ... (slot k: value 32 k + l) in registers and sums their squares as the
// 256-thread block does (thread t = 32 w + l: its values t, t + 256, ... in order, in double; the eight warps' sums
// each by warp_sum's butterfly over the lanes, then added in warp order: block_sum); the RoPE pairs reach their
// lanes by shuffles. The rounding and operation order of every value is rmsnorm_rope_row's.
constexpr int QKV_SLOTS = 16;  // values a lane holds: rows of at most 32 x 16 = 512 values
constexpr int QKV_ROWS = 8;    // rows (warps) per block

/**
 * rmsnorm_rope_row's result for one row of n values (n a multiple of 32, at most 32 QKV_SLOTS; rope_dim / 2 <= 32)
 * by one warp, in place: RMSNorm (weight null: RMSNorm_1), RoPE of the last rope_dim values at position ft, optional
 * F16 rounding.
 */
__device__ __forceinline__ void rmsnorm_rope_row_warp(float* xr, const float* weight, int n, float eps, int rope_dim,
                                                      const float* inv_freq, float ft, int round16) {
    const int lane = threadIdx.x & 31, ns = n >> 5;
    float v[QKV_SLOTS];
#pragma unroll
    for (int k = 0; k < QKV_SLOTS; k++) v[k] = k < ns ? xr[32 * k + lane] : 0.f;
    // the block's thread 32 w + lane holds slots w, w + 8 (values 32 w + lane, + 256): its sum, in order
    double tot = 0;
#pragma unroll
    for (int w = 0; w < 8; w++) {
        double ss = 0;
#pragma unroll
        for (int k = w; k < QKV_SLOTS; k += 8)
            if (k < ns) ss += (double)mul(v[k], v[k]);
        tot += warp_sum(ss);  // warp w's butterfly over the lanes, the warps added in order (block_sum)
    }
    const float inv = (float)(1.0 / sqrt((double)add((float)(tot / n), eps)));
#pragma unroll
    for (int k = 0; k < QKV_SLOTS; k++)
        if (k < ns) {
            const float u = mul(v[k], inv);
            v[k] = weight ? mul(weight[32 * k + lane], u) : u;
        }
    // RoPE: lane i takes pair i (values r0 + 2i, r0 + 2i + 1, one slot), fetched from their lanes slot by slot
    const int r0 = n - rope_dim, npair = rope_dim >> 1, j = r0 + 2 * lane, js = j >> 5;
    float a = 0.f, b = 0.f;
#pragma unroll
    for (int k = 0; k < QKV_SLOTS; k++)
        if (k < ns && 32 * k + 31 >= r0) {
            const float va = DS4J_SHFL(v[k], j & 31), vb = DS4J_SHFL(v[k], (j + 1) & 31);
            if (js == k) a = va, b = vb;
        }
#pragma unroll
    for (int k = 0; k < QKV_SLOTS; k++)
        if (k < ns && 32 * k + lane < r0) xr[32 * k + lane] = round16 ? f16_to_f32(f32_to_f16(v[k])) : v[k];
    if (lane < npair) {
        const double phi = (double)mul(inv_freq[lane], ft);
        const float c = (float)cos(phi), sn = (float)sin(phi);
        float ra = sub(mul(a, c), mul(b, sn)), rb = add(mul(b, c), mul(a, sn));
        if (round16) ra = f16_to_f32(f32_to_f16(ra)), rb = f16_to_f32(f32_to_f16(rb));
        xr[j] = ra;
        xr[j + 1] = rb;
    }
}

/** qkv_norm_rope_kernel's rows, one warp each (rmsnorm_rope_row_warp): warp row b < S H a query head, else kv row. */
__global__ void __launch_bounds__(QKV_ROWS * 32)
qkv_norm_rope_warp_kernel(float* q, float* kv, const float* kv_w, int S, int H, int d, float eps, int rope_dim,
                          const float* inv_freq, int64_t pos0, const int64_t* pos) {
    DS4J_AWAIT_PREVIOUS();
    const int64_t b = (int64_t)blockIdx.x * QKV_ROWS + (threadIdx.x >> 5);
    if (b >= (int64_t)S * (H + 1)) return;
    const bool isq = b < (int64_t)S * H;
    const int s = (int)(isq ? b / H : b - (int64_t)S * H);
    const float ft = (float)(pos ? pos[s] : pos0 + s);
    if (isq) rmsnorm_rope_row_warp(q + b * d, nullptr, d, eps, rope_dim, inv_freq, ft, 0);
    else rmsnorm_rope_row_warp(kv + (int64_t)s * d, kv_w, d, eps, rope_dim, inv_freq, ft, 1);
}

__global__ void round_f16_kernel(float* x, int64_t n) {
    DS4J_AWAIT_PREVIOUS();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = f16_to_f32(f32_to_f16(x[i]));
}

}  // namespace ds4j

using namespace ds4j;

extern "C" {

int32_t ds4j_rope(ds4j_ctx* ctx, float* x, int32_t S, int32_t heads, int32_t width, int32_t rope_dim,
                  const float* inv_freq, int64_t pos0, int64_t pos_step, int32_t inverse) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && inv_freq && S >= 0 && heads > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= width,
             "ds4j_rope: bad arguments (heads %d, width %d, rope_dim %d)", heads, width, rope_dim);
    if (S == 0) return DS4J_OK;
    rope_kernel<<<grid_for((int64_t)S * heads * (rope_dim / 2)), 256, 0, ctx->stream>>>(x, S, heads, width, rope_dim,
                                                                                        inv_freq, pos0, pos_step, nullptr,
                                                                                        inverse);
    DS4J_LAUNCHED("rope");
    return DS4J_OK;
}

int32_t ds4j_rmsnorm_rope(ds4j_ctx* ctx, float* x, const float* weight, int32_t rows, int32_t n, float eps,
                          int32_t rope_dim, const float* inv_freq, int64_t pos0, int32_t rows_per_pos, int32_t round_f16) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && inv_freq && rows >= 0 && n > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= n && rows_per_pos > 0,
             "ds4j_rmsnorm_rope: bad arguments (rows %d, n %d, rope_dim %d, rows_per_pos %d)", rows, n, rope_dim, rows_per_pos);
    if (rows == 0) return DS4J_OK;
    rmsnorm_rope_kernel<<<rows, 256, 0, ctx->stream>>>(x, weight, n, eps, rope_dim, inv_freq, pos0, nullptr, rows_per_pos,
                                                       round_f16);
    DS4J_LAUNCHED("rmsnorm_rope");
    return DS4J_OK;
}

/** DS4J_QKV_BLOCK_ROWS=1 (read once): qkv_norm_rope_kernel for every shape (measurements; the same bits). */
static bool qkv_block_rows() {
    static std::atomic<int> c{-1};
    return env_equals(c, "DS4J_QKV_BLOCK_ROWS", "1");
}

int32_t ds4j_qkv_norm_rope(ds4j_ctx* ctx, float* q, float* kv, const float* kv_w, int32_t S, int32_t H, int32_t d,
                           float eps, int32_t rope_dim, const float* inv_freq, int64_t pos0, const int64_t* pos) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(q && kv && inv_freq && S >= 0 && H > 0 && d > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= d &&
                 (pos || pos0 >= 0),
             "ds4j_qkv_norm_rope: bad arguments (S %d, H %d, d %d, rope_dim %d)", S, H, d, rope_dim);
    if (S == 0) return DS4J_OK;
    // a warp a row where the row fits its registers (the same bits), else a block a row
    if (d % 32 == 0 && d <= 32 * QKV_SLOTS && rope_dim <= 64 && !qkv_block_rows()) {
        const int64_t rows = (int64_t)S * (H + 1);
        qkv_norm_rope_warp_kernel<<<(unsigned)((rows + QKV_ROWS - 1) / QKV_ROWS), QKV_ROWS * 32, 0, ctx->stream>>>(
            q, kv, kv_w, S, H, d, eps, rope_dim, inv_freq, pos0, pos);
    } else {
        qkv_norm_rope_kernel<<<(unsigned)(S * (H + 1)), 256, 0, ctx->stream>>>(q, kv, kv_w, S, H, d, eps, rope_dim,
                                                                               inv_freq, pos0, pos);
    }
    DS4J_LAUNCHED("qkv_norm_rope");
    return DS4J_OK;
}

int32_t ds4j_round_f16(ds4j_ctx* ctx, float* x, int64_t n) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && n >= 0, "ds4j_round_f16: bad arguments");
    if (n == 0) return DS4J_OK;
    round_f16_kernel<<<grid_for(n), 256, 0, ctx->stream>>>(x, n);
    DS4J_LAUNCHED("round_f16");
    return DS4J_OK;
}

int32_t ds4j_rope_at(ds4j_ctx* ctx, float* x, int32_t S, int32_t heads, int32_t width, int32_t rope_dim,
                     const float* inv_freq, const int64_t* pos, int32_t inverse) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && inv_freq && pos && S >= 0 && heads > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= width,
             "ds4j_rope_at: bad arguments (heads %d, width %d, rope_dim %d)", heads, width, rope_dim);
    if (S == 0) return DS4J_OK;
    rope_kernel<<<grid_for((int64_t)S * heads * (rope_dim / 2)), 256, 0, ctx->stream>>>(x, S, heads, width, rope_dim,
                                                                                        inv_freq, 0, 0, pos, inverse);
    DS4J_LAUNCHED("rope_at");
    return DS4J_OK;
}

int32_t ds4j_rmsnorm_rope_at(ds4j_ctx* ctx, float* x, const float* weight, int32_t rows, int32_t n, float eps,
                             int32_t rope_dim, const float* inv_freq, const int64_t* pos, int32_t rows_per_pos,
                             int32_t round_f16) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && inv_freq && pos && rows >= 0 && n > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= n &&
                 rows_per_pos > 0,
             "ds4j_rmsnorm_rope_at: bad arguments (rows %d, n %d, rope_dim %d, rows_per_pos %d)", rows, n, rope_dim,
             rows_per_pos);
    if (rows == 0) return DS4J_OK;
    rmsnorm_rope_kernel<<<rows, 256, 0, ctx->stream>>>(x, weight, n, eps, rope_dim, inv_freq, 0, pos, rows_per_pos,
                                                       round_f16);
    DS4J_LAUNCHED("rmsnorm_rope_at");
    return DS4J_OK;
}

}  // extern "C"
