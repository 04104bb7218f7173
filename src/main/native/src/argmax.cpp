// Greedy sampling's argmax over rows of logits (ds4j_argmax_rows). The kernel and its device helpers are defined
// inside the extern "C" block, so they have C linkage: the kernel's symbol is its plain name, argmax_rows_kernel.
#include "common.h"

using namespace ds4j;

extern "C" {

/** (v, i) beats (w, j): a larger value, or the same value at a lower index (i == INT32_MAX: none yet). */
__device__ __forceinline__ bool argmax_beats(float v, int32_t i, float w, int32_t j) {
    return v > w || (v == w && i < j);
}

/** The warp's best (value, index) pair by argmax_beats, in every lane. */
__device__ __forceinline__ void warp_argmax(float& best, int32_t& at) {
    for (int o = 16; o > 0; o >>= 1) {
        const float w = DS4J_SHFL_XOR(best, o);
        const int32_t j = DS4J_SHFL_XOR(at, o);
        if (argmax_beats(w, j, best, at)) {
            best = w;
            at = j;
        }
    }
}

/** Row value i as the scan sees it: x[i], or -inf where the row's mask (null: none) clears bit i. */
__device__ __forceinline__ float argmax_value(const float* row, const uint64_t* mask, int32_t i) {
    return !mask || (mask[i >> 6] >> (i & 63)) & 1 ? row[i] : -INFINITY;
}

/**
 * ds4j_argmax_rows(_masked): one block per row. Each thread scans its strided share in ascending index (keeping the
 * first of equal values), then the (value, index) pairs are reduced by the order of argmax_beats, which is associative
 * and commutative, so the answer does not depend on the block size. NaN entries are skipped: none can win a sequential
 * strictly-greater scan, except at index 0, which the scan never leaves. With masks (mask_ld words a row), a cleared
 * id's value is -inf before anything else.
 */
__global__ void argmax_rows_kernel(const float* __restrict__ x, int64_t ld, int32_t n, const uint64_t* __restrict__ masks,
                                   int64_t mask_ld, int32_t* __restrict__ out) {
    DS4J_AWAIT_PREVIOUS();
    const float* row = x + (int64_t)blockIdx.x * ld;
    const uint64_t* mask = masks ? masks + (int64_t)blockIdx.x * mask_ld : nullptr;
    float best = -INFINITY;
    int32_t at = INT32_MAX;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = argmax_value(row, mask, i);
        if (v != v) continue;
        if (argmax_beats(v, i, best, at)) {
            best = v;
            at = i;
        }
    }
    warp_argmax(best, at);
    __shared__ float sv[32];
    __shared__ int32_t si[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    if (lane == 0) {
        sv[warp] = best;
        si[warp] = at;
    }
    __syncthreads();
    if (warp == 0) {
        best = lane < warps ? sv[lane] : -INFINITY;
        at = lane < warps ? si[lane] : INT32_MAX;
        warp_argmax(best, at);
        if (lane == 0) {
            const float v0 = argmax_value(row, mask, 0);
            out[blockIdx.x] = (v0 != v0 || at == INT32_MAX) ? 0 : at;
        }
    }
}

int32_t ds4j_argmax_rows(ds4j_ctx* ctx, const float* x, int64_t ld, int32_t rows, int32_t n, int32_t* out) {
    return ds4j_argmax_rows_masked(ctx, x, ld, rows, n, nullptr, 0, out);
}

int32_t ds4j_argmax_rows_masked(ds4j_ctx* ctx, const float* x, int64_t ld, int32_t rows, int32_t n, const uint64_t* masks,
                                int64_t mask_ld, int32_t* out) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && out && rows >= 0 && n > 0 && ld >= n && (!masks || mask_ld >= (n + 63) / 64),
             "ds4j_argmax_rows: bad arguments (rows %d, n %d, ld %lld, mask_ld %lld)", rows, n, (long long)ld,
             (long long)mask_ld);
    if (rows == 0) return DS4J_OK;
    argmax_rows_kernel<<<rows, 256, 0, ctx->stream>>>(x, ld, n, masks, mask_ld, out);
    DS4J_LAUNCHED("argmax_rows");
    return DS4J_OK;
}

}  // extern "C"
