// mHC, the manifold-constrained hyper-connections (spec 3.2, 3.9): the mapping of a row's streams (pre, post and the
// Sinkhorn-normalised combination) and its collapse into the block input (ds4j_hc_pre, with the site's RMSNorm:
// ds4j_hc_pre_norm), the stream update with the block output (ds4j_hc_post; with the MoE combination and the next
// RMSNorm: ds4j_hc_post_norm) and the head's collapse (ds4j_hc_head); one-block and split forms (DS4J_HC_SPLIT,
// ds4j_set_hc_split), which give the same bits. These mirror io.ds4j.cpu.CpuBackend / Ops operation by operation,
// including where the CPU evaluates in double.
#include "ops.h"

#include <stdlib.h>
#include <string.h>

namespace ds4j {

constexpr int HC_MAX = 8;  // largest hc_mult supported by the mHC kernels

/**
 * The collapse of column d of a row's n streams xs [n, D]: sum over i of pre[i] xs[i D + d], in i order. The n values
 * are loaded before the first is added (one round trip, not n): hc_collapse_load loads them into xi, hc_collapse_sum
 * adds them (split so that a kernel can load before pre is known).
 */
__device__ __forceinline__ void hc_collapse_load(const float* xs, int n, int D, int d, float (&xi)[HC_MAX]) {
#pragma unroll
    for (int i = 0; i < HC_MAX; i++) xi[i] = i < n ? xs[(int64_t)i * D + d] : 0.f;
}
__device__ __forceinline__ float hc_collapse_sum(const float* pre, const float (&xi)[HC_MAX], int n) {
    float acc = 0;
#pragma unroll
    for (int i = 0; i < HC_MAX; i++)
        if (i < n) acc = add(acc, mul(pre[i], xi[i]));
    return acc;
}
__device__ __forceinline__ float hc_collapse(const float* pre, const float* xs, int n, int D, int d) {
    float xi[HC_MAX];
    hc_collapse_load(xs, n, D, d, xi);
    return hc_collapse_sum(pre, xi, n);
}

/**
 * One Sinkhorn step on M [n, n] in shared memory, parallel over rows (cols == false: thread j scales row j) or
 * columns (thread k scales column k); each thread sums in the CPU's order. All threads of the block call it.
 */
__device__ __forceinline__ void sinkhorn_step(float* M, int n, float eps, bool cols) {
    const int i = threadIdx.x;
    if (i < n) {
        float sum = 0;
        for (int a = 0; a < n; a++) sum = add(sum, cols ? M[a * n + i] : M[i * n + a]);
        const float den = add(sum, eps);
        for (int a = 0; a < n; a++) {
            float& v = cols ? M[a * n + i] : M[i * n + a];
            v = v / den;
        }
    }
    __syncthreads();
}

__global__ void hc_pre_kernel(const float* mu, const float* base, const float* scale, const float* X, int n, int D,
                              int iters, float eps, float* post, float* comb, float* col, int norm,
                              const float* norm_w, float rms_eps) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ float pre[HC_MAX];
    __shared__ double red[32];
    __shared__ float M[HC_MAX * HC_MAX];
    const int s = blockIdx.x, mix = (2 + n) * n;
    const float* m = mu + (int64_t)s * mix;
    const int j = threadIdx.x;
    if (j < n) {
        pre[j] = add(sigmoid_d(add(mul(scale[0], m[j]), base[j])), eps);
        post[s * n + j] = 2.f * sigmoid_d(add(mul(scale[1], m[n + j]), base[n + j]));
        // row j: softmax over k, + eps
        float mx = -INFINITY;
        for (int k = 0; k < n; k++) {
            const float v = add(mul(scale[2], m[2 * n + j * n + k]), base[2 * n + j * n + k]);
            M[j * n + k] = v;
            mx = fmaxf(mx, v);
        }
        float sum = 0;
        for (int k = 0; k < n; k++) {
            const float e = exp_d(sub(M[j * n + k], mx));
            M[j * n + k] = e;
            sum = add(sum, e);
        }
        for (int k = 0; k < n; k++) M[j * n + k] = add(M[j * n + k] / sum, eps);
    }
    __syncthreads();
    sinkhorn_step(M, n, eps, true);  // columns first (spec 3.2 step 6)
    for (int it = 1; it < iters; it++) {
        sinkhorn_step(M, n, eps, false);
        sinkhorn_step(M, n, eps, true);
    }
    if (j < n * n) comb[(int64_t)s * n * n + j] = M[j];
    const float* xs = X + (int64_t)s * n * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        const float acc = hc_collapse(pre, xs, n, D, d);
        col[(int64_t)s * D + d] = acc;
    }
    if (norm) {  // the RMSNorm of the column, as rmsnorm_kernel computes it (same block size, same order)
        __syncthreads();
        rmsnorm_row(col + (int64_t)s * D, col + (int64_t)s * D, norm_w, D, rms_eps, red);
    }
}

/**
 * X'[s, k, d] = post[s, k] * fv + sum_j comb[s, j, k] * X[s, j, d] for one (s, d), in place, with the row's streams at d
 * already loaded into xj (hc_collapse_load); xs = X + s*n*D, post_s = post + s*n, M = comb + s*n*n.
 */
__device__ __forceinline__ void hc_post_elem_loaded(float* xs, float fv, const float* post_s, const float* M,
                                                    const float (&xj)[HC_MAX], int n, int D, int d) {
    float out[HC_MAX];
#pragma unroll
    for (int k = 0; k < HC_MAX; k++) {
        if (k < n) {
            float acc = mul(post_s[k], fv);
#pragma unroll
            for (int j = 0; j < HC_MAX; j++)
                if (j < n) acc = add(acc, mul(M[j * n + k], xj[j]));
            out[k] = acc;
        }
    }
#pragma unroll
    for (int k = 0; k < HC_MAX; k++)
        if (k < n) xs[(int64_t)k * D + d] = out[k];
}

/** hc_post_elem_loaded after loading the streams at d: the whole update of one (s, d). */
__device__ __forceinline__ void hc_post_elem(float* xs, float fv, const float* post_s, const float* M, int n, int D,
                                             int d) {
    float xj[HC_MAX];
    hc_collapse_load(xs, n, D, d, xj);
    hc_post_elem_loaded(xs, fv, post_s, M, xj, n, D, d);
}

__global__ void hc_post_kernel(float* X, const float* f, const float* post, const float* comb, int S, int n, int D) {
    DS4J_AWAIT_PREVIOUS();
    const int64_t total = (int64_t)S * D;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int s = (int)(i / D), d = (int)(i % D);
        hc_post_elem(X + (int64_t)s * n * D, f[(int64_t)s * D + d], post + s * n, comb + (int64_t)s * n * n, n, D, d);
    }
}

__global__ void hc_head_kernel(const float* mu, const float* base, const float* scale, const float* X, int n, int D,
                               float eps, float* y) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ float pre[HC_MAX];
    const int r = blockIdx.x;
    if (threadIdx.x < n) pre[threadIdx.x] = add(sigmoid_d(add(mul(mu[r * n + threadIdx.x], scale[0]), base[threadIdx.x])), eps);
    __syncthreads();
    const float* xs = X + (int64_t)r * n * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        const float acc = hc_collapse(pre, xs, n, D, d);
        y[(int64_t)r * D + d] = acc;
    }
}

/**
 * One block per row s: the block output f (or, with ids, the MoE combination whose shared-expert term is f) goes
 * into the stream update of row s (hc_post_elem), then, with v, RMSNorm_1 of the updated row X[s] [n*D] into v[s]
 * (rmsnorm_kernel's arithmetic: 256 threads, same order).
 */
__global__ void hc_post_norm_kernel(float* X, const float* f, const int32_t* ids, const float* weights, const float* yr,
                                    int k, const float* post, const float* comb, int n, int D, float eps, float* v) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ double red[32];
    const int s = blockIdx.x;
    float* xs = X + (int64_t)s * n * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        const float fv = ids ? moe_combine_elem(ids, weights, yr, f, s, k, D, d) : f[(int64_t)s * D + d];
        hc_post_elem(xs, fv, post + s * n, comb + (int64_t)s * n * n, n, D, d);
    }
    if (v) {
        __syncthreads();
        rmsnorm_row(xs, v + (int64_t)s * n * D, nullptr, n * D, eps, red);
    }
}

// ------------------------------------------------------------------------------------------- split mHC kernels
// The kernels above run one block per row: a decode step (one row) put each mHC site on a single SM, whose loops waited
// for every load in turn. The split forms below spread a row's D columns over blocks of HC_COLS columns and leave the
// row-wide reductions (the RMSNorms) to the last block of the row, which runs rmsnorm_row's arithmetic (256 threads,
// the same per-thread order and block sum) with its loads issued together. Every element is computed by the same
// operations in the same order as in the one-block kernels, so both forms give the same bits for any number of rows;
// a row's result depends on n and D only. DS4J_HC_SPLIT=0 (or ds4j_set_hc_split(0)) selects the one-block kernels.

constexpr int HC_COLS = HC_THREADS;  // columns of a row per block (one per thread)

/** Rows of one split launch: one arrival counter each in ds4j_ctx.hc_count (longer steps run in several launches). */
constexpr int HC_COUNT_ROWS = DS4J_HC_COUNT_ROWS;

/**
 * The mHC mapping of one row by one block (hc_pre_kernel's arithmetic): post [n], and the Sinkhorn matrix comb [n, n]
 * with one thread per element, each step reading one buffer and writing the other; a sum runs in the same order as
 * in sinkhorn_step.
 */
__device__ __forceinline__ void hc_mapping(const float* m, const float* base, const float* scale, int n, int iters,
                                           float eps, float* post, float* comb) {
    __shared__ float M[2][HC_MAX * HC_MAX];
    const int j = threadIdx.x, nn = n * n;
    if (j < n) {
        post[j] = 2.f * sigmoid_d(add(mul(scale[1], m[n + j]), base[n + j]));
        float* Mr = M[0] + j * n;
        float mx = -INFINITY;
        for (int k = 0; k < n; k++) {
            const float v = add(mul(scale[2], m[2 * n + j * n + k]), base[2 * n + j * n + k]);
            Mr[k] = v;
            mx = fmaxf(mx, v);
        }
        float sum = 0;
        for (int k = 0; k < n; k++) {
            const float e = exp_d(sub(Mr[k], mx));
            Mr[k] = e;
            sum = add(sum, e);
        }
        for (int k = 0; k < n; k++) Mr[k] = add(Mr[k] / sum, eps);
    }
    __syncthreads();
    int cur = 0;
    for (int step = 0; step < 2 * iters - 1; step++) {  // columns first, then (rows, columns) iters - 1 times
        if (j < nn) {
            const float* A = M[cur];
            const int r = j / n, c = j - r * n;
            float sum = 0;
            if ((step & 1) == 0)
                for (int a = 0; a < n; a++) sum = add(sum, A[a * n + c]);
            else
                for (int a = 0; a < n; a++) sum = add(sum, A[r * n + a]);
            M[cur ^ 1][j] = A[j] / add(sum, eps);
        }
        __syncthreads();
        cur ^= 1;
    }
    if (j < nn) comb[j] = M[cur][j];
}

/**
 * hc_mapping by one warp where the matrix has at most 32 elements (n <= 5; V4's n is 4): lane j holds element
 * j = (r, c) = (j / n, j % n) in a register and gathers its row or column by shuffles, so that the Sinkhorn steps
 * wait for no barrier and no shared memory, and the softmax's exponentials run one a lane instead of n a thread. The
 * block's chain of 2 iters - 1 steps, each behind a block barrier, outlasted the collapse blocks: on an H100
 * (BENCHMARKS.md, forty-second session; Nsight Compute over a 43-layer decode step) hc_pre_split_kernel of one
 * 4 x 4,096 row took 16.3 us a call with it and 12.0-12.4 with this warp. Each value comes from hc_mapping's
 * operations in its order (every sum over a = 0 .. n - 1, the largest value by fmaxf from -inf in that order): the
 * same bits. Every lane of the warp calls it.
 */
__device__ __forceinline__ void hc_mapping_warp(const float* m, const float* base, const float* scale, int n, int iters,
                                                float eps, float* post, float* comb) {
    const int j = threadIdx.x & 31;
    const bool on = j < n * n;
    const int r = on ? j / n : 0, c = on ? j - r * n : 0;  // lanes past the matrix read row 0 and never store
    if (j < n) post[j] = 2.f * sigmoid_d(add(mul(scale[1], m[n + j]), base[n + j]));
    const float v0 = on ? add(mul(scale[2], m[2 * n + j]), base[2 * n + j]) : 0.f;
    float mx = -INFINITY;  // row r's softmax, plus eps
    for (int k = 0; k < n; k++) mx = fmaxf(mx, DS4J_SHFL(v0, r * n + k));
    const float e = exp_d(sub(v0, mx));
    float sum = 0;
    for (int k = 0; k < n; k++) sum = add(sum, DS4J_SHFL(e, r * n + k));
    float v = add(e / sum, eps);
    for (int step = 0; step < 2 * iters - 1; step++) {  // columns first, then (rows, columns) iters - 1 times
        float t = 0;
        for (int a = 0; a < n; a++) t = add(t, DS4J_SHFL(v, (step & 1) == 0 ? a * n + c : r * n + a));
        v = v / add(t, eps);
    }
    if (on) comb[j] = v;
}

/**
 * hc_pre_kernel split: blocks x < B = gridDim.x - 1 collapse columns [x * cols, +cols) of row blockIdx.y (cols: a
 * multiple of HC_THREADS, hc_cols), block B computes the row's mapping (post, Sinkhorn; by one warp, hc_mapping_warp,
 * where the matrix has at most 32 elements). With norm, the last collapse block of the row normalises col[s].
 */
template <int REG>
__global__ void __launch_bounds__(HC_THREADS) hc_pre_split_kernel(const float* mu, const float* base, const float* scale,
                                                                   const float* X, int n, int D, int iters, float eps,
                                                                   float* post, float* comb, float* col, int norm,
                                                                   const float* norm_w, float rms_eps, unsigned* count,
                                                                   int cols) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ float pre[HC_MAX];
    __shared__ double red[32];
    __shared__ int flag;
    const int s = blockIdx.y, mix = (2 + n) * n, B = gridDim.x - 1;
    const float* m = mu + (int64_t)s * mix;
    if ((int)blockIdx.x == B) {
        if (n * n > 32) hc_mapping(m, base, scale, n, iters, eps, post + s * n, comb + (int64_t)s * n * n);
        else if (threadIdx.x < 32) hc_mapping_warp(m, base, scale, n, iters, eps, post + s * n, comb + (int64_t)s * n * n);
        return;
    }
    const int j = threadIdx.x;
    const float* xs = X + (int64_t)s * n * D;
    float* cs = col + (int64_t)s * D;
    const int d0 = blockIdx.x * cols + j, d1 = min(D, (int)(blockIdx.x + 1) * cols);
    // the thread's first column's streams are loaded before pre, which they do not need, so that the two reads overlap
    // (with rmsnorm_row_ilp's weights loaded early, a 4 x 4,096 decode row took 8.0 us a call against 12.0-12.4 on an
    // H100: BENCHMARKS.md, forty-second session)
    float xi[HC_MAX];
    if (d0 < d1) hc_collapse_load(xs, n, D, d0, xi);
    if (j < n) pre[j] = add(sigmoid_d(add(mul(scale[0], m[j]), base[j])), eps);
    __syncthreads();
    for (int d = d0; d < d1; d += HC_THREADS) {
        if (d != d0) hc_collapse_load(xs, n, D, d, xi);
        cs[d] = hc_collapse_sum(pre, xi, n);
    }
    if (norm && last_of_row(count + s, B, &flag)) rmsnorm_row_ilp<true, REG>(cs, cs, norm_w, D, rms_eps, red);
}

/**
 * hc_post_norm_kernel split: block x updates columns [x * HC_COLS, +HC_COLS) of row blockIdx.y (with the MoE
 * combination when ids); with v, the last block of the row computes RMSNorm_1 of the updated row into v[s]. (1,024
 * columns a block, as hc_pre_split_kernel's collapse takes in prefill chunks, took 110 us a call at 512 rows against
 * 84: BENCHMARKS.md, twenty-ninth session.)
 */
template <int REG>
__global__ void __launch_bounds__(HC_THREADS) hc_post_split_kernel(float* X, const float* f, const int32_t* ids,
                                                                    const float* weights, const float* yr, int k,
                                                                    const float* post, const float* comb, int n, int D,
                                                                    float eps, float* v, unsigned* count) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ double red[32];
    __shared__ int order[ROUTE_KMAX];
    __shared__ float pc[HC_MAX + HC_MAX * HC_MAX];  // post [n], then comb [n, n]
    __shared__ int flag;
    const int s = blockIdx.y, j = threadIdx.x;
    float* xs = X + (int64_t)s * n * D;
    const int d = blockIdx.x * HC_COLS + j;
    // every read that does not wait for the picks' order is issued first: the thread's streams and f value, the row's
    // post and comb (into shared memory), the picks' ids; then each pick's weight and routed value, all of them before
    // the first is added. A loop over the picks waited for each pick's two loads in turn (a MoE site's call of a 4 x
    // 4,096 decode row took 9.92 us with it, 9.38 without, on an H100: BENCHMARKS.md, forty-seventh session).
    float xj[HC_MAX];
    float fv = 0.f;
    if (d < D) {
        hc_collapse_load(xs, n, D, d, xj);
        fv = f[(int64_t)s * D + d];
    }
    if (j < n + n * n) pc[j] = j < n ? post[s * n + j] : comb[(int64_t)s * n * n + j - n];
    if (ids && j < k) {  // moe_combine_elem's order of the picks (its stable insertion sort by id): pick j's slot
        const int id = ids[s * k + j];
        int slot = 0;
        for (int i = 0; i < k; i++) {
            const int o = ids[s * k + i];
            slot += o < id || (o == id && i < j);
        }
        order[slot] = j;
    }
    __syncthreads();
    if (d < D) {
        if (ids) {
            float wv[ROUTE_KMAX], yv[ROUTE_KMAX];
#pragma unroll
            for (int i = 0; i < ROUTE_KMAX; i++)
                if (i < k) {
                    const int p = s * k + order[i];
                    wv[i] = weights[p];
                    yv[i] = yr[(int64_t)p * D + d];
                }
            float acc = 0;
#pragma unroll
            for (int i = 0; i < ROUTE_KMAX; i++)
                if (i < k) acc = add(acc, mul(wv[i], yv[i]));
            fv = add(acc, fv);
        }
        hc_post_elem_loaded(xs, fv, pc, pc + n, xj, n, D, d);
    }
    if (v && last_of_row(count + s, gridDim.x, &flag))
        rmsnorm_row_ilp<true, REG>(xs, v + (int64_t)s * n * D, nullptr, n * D, eps, red);
}

/** hc_head_kernel split: block x collapses columns [x * HC_COLS, +HC_COLS) of row blockIdx.y. */
__global__ void __launch_bounds__(HC_THREADS) hc_head_split_kernel(const float* mu, const float* base, const float* scale,
                                                                    const float* X, int n, int D, float eps, float* y) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ float pre[HC_MAX];
    const int r = blockIdx.y;
    if (threadIdx.x < n) pre[threadIdx.x] = add(sigmoid_d(add(mul(mu[r * n + threadIdx.x], scale[0]), base[threadIdx.x])), eps);
    __syncthreads();
    const int d = blockIdx.x * HC_COLS + threadIdx.x;
    if (d < D) {
        const float* xs = X + (int64_t)r * n * D;
        const float acc = hc_collapse(pre, xs, n, D, d);
        y[(int64_t)r * D + d] = acc;
    }
}

/** The split mHC kernels on (1) or the one-block ones (0); -1 until the first call reads DS4J_HC_SPLIT. */
static std::atomic<int> hc_split_mode{-1};

bool hc_split() {
    int o = hc_split_mode.load();
    if (o < 0) {
        const char* e = getenv("DS4J_HC_SPLIT");
        o = (e && strcmp(e, "0") == 0) ? 0 : 1;
        int unknown = -1;
        if (!hc_split_mode.compare_exchange_strong(unknown, o)) o = hc_split_mode.load();
    }
    return o == 1;
}

}  // namespace ds4j

using namespace ds4j;

/** Blocks of HC_COLS columns for a row of D columns. */
static inline unsigned hc_blocks(int D) { return (unsigned)((D + HC_COLS - 1) / HC_COLS); }

/**
 * Columns per block of the split collapse (hc_pre_split_kernel) for a launch of `rows` rows: HC_COLS (one per thread)
 * up to HC_FEW_ROWS rows, where a row's blocks must fill the device; 4 HC_COLS above (a prefill chunk of 512 rows:
 * 43 us a call against 53 with 256 columns, BENCHMARKS.md, twenty-ninth session). Each element's operations do not
 * depend on it: the same bits. DS4J_HC_COLS=256 keeps HC_COLS for every launch (measurements).
 */
static int hc_cols(int rows) {
    static std::atomic<int> c{0};
    const int wide = env_choice(c, "DS4J_HC_COLS", 4 * HC_COLS, HC_COLS, 16 * HC_COLS) / HC_COLS * HC_COLS;
    return rows > HC_FEW_ROWS ? wide : HC_COLS;
}

extern "C" {

int32_t ds4j_set_hc_split(int32_t on) {
    hc_split();  // the environment's value first, so that it does not replace this one later
    return hc_split_mode.exchange(on ? 1 : 0);
}

/** hc_pre_kernel or its split form over S rows (norm: with the site norm); the arguments are checked. */
static int32_t hc_pre_launch(ds4j_ctx* ctx, const float* mu, const float* base, const float* scale, const float* X,
                             int32_t S, int32_t n, int32_t D, int32_t iters, float hc_eps, float* post, float* comb,
                             float* col, int norm, const float* norm_w, float rms_eps) {
    if (measure_skip("mhc")) return DS4J_OK;
    if (!hc_split() || (norm && !ctx->hc_count)) {
        hc_pre_kernel<<<S, 256, 0, ctx->stream>>>(mu, base, scale, X, n, D, iters, hc_eps, post, comb, col, norm, norm_w,
                                                  rms_eps);
        return DS4J_OK;
    }
    for (int32_t s0 = 0; s0 < S; s0 += HC_COUNT_ROWS) {
        const int32_t rows = S - s0 < HC_COUNT_ROWS ? S - s0 : HC_COUNT_ROWS;
        const int reg = hc_reg_for(rows, D), cols = hc_cols(rows);
        const int mix = (2 + n) * n;
        const dim3 grid((unsigned)((D + cols - 1) / cols) + 1, rows);
        const float* m = mu + (int64_t)s0 * mix;
        const float* x = X + (int64_t)s0 * n * D;
        float *p = post + (int64_t)s0 * n, *c = comb + (int64_t)s0 * n * n, *o = col + (int64_t)s0 * D;
        if (reg == 16)
            hc_pre_split_kernel<16><<<grid, HC_THREADS, 0, ctx->stream>>>(m, base, scale, x, n, D, iters, hc_eps, p, c, o,
                                                                          norm, norm_w, rms_eps, ctx->hc_count, cols);
        else if (reg == 64)
            hc_pre_split_kernel<64><<<grid, HC_THREADS, 0, ctx->stream>>>(m, base, scale, x, n, D, iters, hc_eps, p, c, o,
                                                                          norm, norm_w, rms_eps, ctx->hc_count, cols);
        else
            hc_pre_split_kernel<0><<<grid, HC_THREADS, 0, ctx->stream>>>(m, base, scale, x, n, D, iters, hc_eps, p, c, o,
                                                                         norm, norm_w, rms_eps, ctx->hc_count, cols);
    }
    return DS4J_OK;
}

int32_t ds4j_hc_pre(ds4j_ctx* ctx, const float* mu, const float* base, const float* scale, const float* X, int32_t S,
                    int32_t n, int32_t D, int32_t sinkhorn_iters, float hc_eps, float* post, float* comb, float* col) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(mu && base && scale && X && post && comb && col, "ds4j_hc_pre: null pointer");
    DS4J_ARG(n >= 1 && n <= HC_MAX && D > 0 && S >= 0 && sinkhorn_iters >= 1,
             "ds4j_hc_pre: unsupported shape (n %d, max %d; D %d; iters %d)", n, HC_MAX, D, sinkhorn_iters);
    if (S == 0) return DS4J_OK;
    hc_pre_launch(ctx, mu, base, scale, X, S, n, D, sinkhorn_iters, hc_eps, post, comb, col, 0, nullptr, 0.f);
    DS4J_LAUNCHED("hc_pre");
    return DS4J_OK;
}

int32_t ds4j_hc_pre_norm(ds4j_ctx* ctx, const float* mu, const float* base, const float* scale, const float* X,
                         int32_t S, int32_t n, int32_t D, int32_t sinkhorn_iters, float hc_eps, float* post,
                         float* comb, float* col, const float* norm_w, float rms_eps) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(mu && base && scale && X && post && comb && col, "ds4j_hc_pre_norm: null pointer");
    DS4J_ARG(n >= 1 && n <= HC_MAX && D > 0 && S >= 0 && sinkhorn_iters >= 1,
             "ds4j_hc_pre_norm: unsupported shape (n %d, max %d; D %d; iters %d)", n, HC_MAX, D, sinkhorn_iters);
    if (S == 0) return DS4J_OK;
    hc_pre_launch(ctx, mu, base, scale, X, S, n, D, sinkhorn_iters, hc_eps, post, comb, col, 1, norm_w, rms_eps);
    DS4J_LAUNCHED("hc_pre_norm");
    return DS4J_OK;
}

int32_t ds4j_hc_post(ds4j_ctx* ctx, float* X, const float* f, const float* post, const float* comb, int32_t S, int32_t n,
                     int32_t D) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(X && f && post && comb, "ds4j_hc_post: null pointer");
    DS4J_ARG(n >= 1 && n <= HC_MAX && D > 0 && S >= 0, "ds4j_hc_post: unsupported shape (n %d, D %d)", n, D);
    if (S == 0 || measure_skip("mhc")) return DS4J_OK;
    hc_post_kernel<<<grid_for((int64_t)S * D), 256, 0, ctx->stream>>>(X, f, post, comb, S, n, D);
    DS4J_LAUNCHED("hc_post");
    return DS4J_OK;
}

int32_t ds4j_hc_post_norm(ds4j_ctx* ctx, float* X, const float* f, const int32_t* ids, const float* weights,
                          const float* y_routed, int32_t k, const float* post, const float* comb, int32_t S, int32_t n,
                          int32_t D, float eps, float* v) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(X && f && post && comb, "ds4j_hc_post_norm: null pointer");
    DS4J_ARG(!ids || (weights && y_routed && k >= 1 && k <= ROUTE_KMAX), "ds4j_hc_post_norm: bad combination inputs (k %d)", k);
    DS4J_ARG(n >= 1 && n <= HC_MAX && D > 0 && S >= 0, "ds4j_hc_post_norm: unsupported shape (n %d, D %d)", n, D);
    if (S == 0 || measure_skip("mhc")) return DS4J_OK;
    if (!hc_split() || (v && !ctx->hc_count)) {
        hc_post_norm_kernel<<<S, 256, 0, ctx->stream>>>(X, f, ids, weights, y_routed, k, post, comb, n, D, eps, v);
    } else {
        for (int32_t s0 = 0; s0 < S; s0 += HC_COUNT_ROWS) {
            const int32_t rows = S - s0 < HC_COUNT_ROWS ? S - s0 : HC_COUNT_ROWS;
            const int reg = hc_reg_for(rows, (int64_t)n * D);
            const dim3 grid(hc_blocks(D), rows);
            const int64_t nD = (int64_t)n * D;
            // the rows of this launch as rows 0 .. rows-1 of shifted arrays (ids and weights are [S, k])
            float* x = X + s0 * nD;
            const float* fs = f + (int64_t)s0 * D;
            const int32_t* is = ids ? ids + (int64_t)s0 * k : nullptr;
            const float* ws = ids ? weights + (int64_t)s0 * k : nullptr;
            const float* ys = ids ? y_routed + (int64_t)s0 * k * D : nullptr;
            const float *p = post + (int64_t)s0 * n, *c = comb + (int64_t)s0 * n * n;
            float* vs = v ? v + s0 * nD : nullptr;
            if (reg == 16)
                hc_post_split_kernel<16><<<grid, HC_THREADS, 0, ctx->stream>>>(x, fs, is, ws, ys, k, p, c, n, D, eps, vs,
                                                                               ctx->hc_count);
            else if (reg == 64)
                hc_post_split_kernel<64><<<grid, HC_THREADS, 0, ctx->stream>>>(x, fs, is, ws, ys, k, p, c, n, D, eps, vs,
                                                                               ctx->hc_count);
            else
                hc_post_split_kernel<0><<<grid, HC_THREADS, 0, ctx->stream>>>(x, fs, is, ws, ys, k, p, c, n, D, eps, vs,
                                                                              ctx->hc_count);
        }
    }
    DS4J_LAUNCHED("hc_post_norm");
    return DS4J_OK;
}

int32_t ds4j_hc_head(ds4j_ctx* ctx, const float* mu, const float* base, const float* scale, const float* X, int32_t R,
                     int32_t n, int32_t D, float hc_eps, float* y) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(mu && base && scale && X && y, "ds4j_hc_head: null pointer");
    DS4J_ARG(n >= 1 && n <= HC_MAX && D > 0 && R >= 0, "ds4j_hc_head: unsupported shape (n %d, D %d)", n, D);
    if (R == 0) return DS4J_OK;
    if (!hc_split()) hc_head_kernel<<<R, 256, 0, ctx->stream>>>(mu, base, scale, X, n, D, hc_eps, y);
    else
        for (int32_t r0 = 0; r0 < R; r0 += 65535)  // gridDim.y's limit
            hc_head_split_kernel<<<dim3(hc_blocks(D), R - r0 < 65535 ? R - r0 : 65535), HC_THREADS, 0, ctx->stream>>>(
                mu + (int64_t)r0 * n, base, scale, X + (int64_t)r0 * n * D, n, D, hc_eps, y + (int64_t)r0 * D);
    DS4J_LAUNCHED("hc_head");
    return DS4J_OK;
}

}  // extern "C"
