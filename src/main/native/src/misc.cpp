// Row-wise ops of the forward: RMSNorm, mHC (spec 3.2, 3.9), MoE routing and combination (spec 3.8), SwiGLU.
// These mirror io.ds4j.cpu.CpuBackend / Ops operation by operation, including where the CPU evaluates in double.
#include "common.h"

#include <stdlib.h>
#include <string.h>

namespace ds4j {

constexpr int HC_MAX = 8;  // largest hc_mult supported by the mHC kernels

/**
 * The collapse of column d of a row's n streams xs [n, D]: sum over i of pre[i] xs[i D + d], in i order. The n values
 * are loaded before the first is added (one round trip, not n).
 */
__device__ __forceinline__ float hc_collapse(const float* pre, const float* xs, int n, int D, int d) {
    float xi[HC_MAX];
#pragma unroll
    for (int i = 0; i < HC_MAX; i++) xi[i] = i < n ? xs[(int64_t)i * D + d] : 0.f;
    float acc = 0;
#pragma unroll
    for (int i = 0; i < HC_MAX; i++)
        if (i < n) acc = add(acc, mul(pre[i], xi[i]));
    return acc;
}

__global__ void rmsnorm_kernel(const float* x, float* y, const float* weight, int n, float eps) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ double sh[32];
    rmsnorm_row(x + (int64_t)blockIdx.x * n, y + (int64_t)blockIdx.x * n, weight, n, eps, sh);
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

/** X'[s, k, d] = post[s, k] * fv + sum_j comb[s, j, k] * X[s, j, d] for one (s, d), in place; xs = X + s*n*D. */
__device__ __forceinline__ void hc_post_elem(float* xs, float fv, const float* post_s, const float* M, int n, int D,
                                             int d) {
    float xj[HC_MAX];
#pragma unroll
    for (int j = 0; j < HC_MAX; j++) xj[j] = j < n ? xs[(int64_t)j * D + d] : 0.f;
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

/** sqrt(softplus(z)) in double, softplus(z) = z above 20 (io.ds4j.kernels.Ops#sqrtSoftplus). */
__device__ __forceinline__ float sqrt_softplus(float z) {
    const double sp = z > 20.f ? (double)z : log1p(exp((double)z));
    return (float)sqrt(sp);
}

/** a ranks above b: larger value, or equal value and lower index; NaN last (io.ds4j.kernels.TopK). */
__device__ __forceinline__ bool better(const float* v, int a, int b) {
    const float x = v[a], y = v[b];
    if (x != y) {
        if (isnan(x)) return false;
        if (isnan(y)) return true;
        return x > y;
    }
    return a < b;
}

constexpr int ROUTE_KMAX = 16;

__global__ void moe_route_kernel(const float* lam, const float* bias, const int32_t* tid2eid, const int32_t* tokens,
                                 int E, int k, float scaling, int32_t* ids, float* weights) {
    DS4J_AWAIT_PREVIOUS();
    extern __shared__ float sm[];
    float* sc = sm;
    float* biased = sm + E;
    const int s = blockIdx.x;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const float v = sqrt_softplus(lam[(int64_t)s * E + e]);
        sc[e] = v;
        if (bias) biased[e] = add(v, bias[e]);
    }
    __syncthreads();
    if (threadIdx.x != 0) return;
    int pick[ROUTE_KMAX];
    if (tid2eid) {
        const int tok = tokens[s];
        for (int j = 0; j < k; j++) pick[j] = tid2eid[(int64_t)tok * k + j];
    } else {
        // k passes of "best not yet taken", then ascending id order (TopK.select returns sorted indices)
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                bool taken = false;
                for (int i = 0; i < j; i++) taken |= pick[i] == e;
                if (taken) continue;
                if (best < 0 || better(biased, e, best)) best = e;
            }
            pick[j] = best;
        }
        for (int a = 1; a < k; a++)
            for (int b = a; b > 0 && pick[b - 1] > pick[b]; b--) {
                const int t = pick[b];
                pick[b] = pick[b - 1];
                pick[b - 1] = t;
            }
    }
    float sum = 0;
    for (int j = 0; j < k; j++) sum = add(sum, sc[pick[j]]);
    for (int j = 0; j < k; j++) {
        ids[s * k + j] = pick[j];
        weights[s * k + j] = mul(sc[pick[j]] / add(sum, 1e-20f), scaling);
    }
}

__global__ void swiglu_kernel(const float* g, const float* u, float* out, int64_t n, float lim) {
    DS4J_AWAIT_PREVIOUS();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float gv = fminf(g[i], lim);
        const float uv = fmaxf(-lim, fminf(u[i], lim));
        out[i] = mul((float)(gv / (1.0 + exp(-(double)gv))), uv);
    }
}

/**
 * Row s, channel d of the MoE output: the k picks of s in ascending expert id (the CPU accumulates experts in that
 * order), each weights[p] * yr[p, d], then + shared[s, d].
 */
__device__ __forceinline__ float moe_combine_elem(const int32_t* ids, const float* weights, const float* yr,
                                                  const float* shared, int s, int k, int D, int d) {
    int order[ROUTE_KMAX];
    for (int j = 0; j < k; j++) order[j] = j;
    for (int a = 1; a < k; a++)
        for (int b = a; b > 0 && ids[s * k + order[b - 1]] > ids[s * k + order[b]]; b--) {
            const int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    float acc = 0;
    for (int j = 0; j < k; j++) {
        const int p = s * k + order[j];
        acc = add(acc, mul(weights[p], yr[(int64_t)p * D + d]));
    }
    return add(acc, shared[(int64_t)s * D + d]);
}

__global__ void moe_combine_kernel(const int32_t* ids, const float* weights, const float* yr, const float* shared,
                                   int S, int k, int D, float* out) {
    DS4J_AWAIT_PREVIOUS();
    const int64_t total = (int64_t)S * D;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int s = (int)(i / D), d = (int)(i % D);
        out[i] = moe_combine_elem(ids, weights, yr, shared, s, k, D, d);
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

constexpr int HC_THREADS = 256;  // block size of the split kernels (the RMSNorm order is that of 256 threads)
constexpr int HC_COLS = HC_THREADS;  // columns of a row per block (one per thread)

/** Rows of one split launch: one arrival counter each in ds4j_ctx.hc_count (longer steps run in several launches). */
constexpr int HC_COUNT_ROWS = DS4J_HC_COUNT_ROWS;

/** A load that sees what other blocks of the same launch wrote before a __threadfence (it does not stop at L1). */
template <bool COHERENT>
__device__ __forceinline__ float hc_ld(const float* p) {
    if (COHERENT) return *(const volatile float*)p;
    return *p;
}

/**
 * rmsnorm_row with blockDim.x == HC_THREADS, the same bits: each thread sums its elements i = t, t + 256, ... in
 * ascending order in double, then block_sum. REG > 0 (rows of at most REG * 256 values): a thread reads its values
 * once, all loads issued before the first is used, and keeps them in registers for the scaling; REG == 0 reads twice,
 * in a loop. yr may be xr (each thread writes only the elements it read).
 */
template <bool COHERENT, int REG>
__device__ __forceinline__ void rmsnorm_row_ilp(const float* xr, float* yr, const float* weight, int n, float eps,
                                                double* sh) {
    const int t = threadIdx.x;
    if (REG > 0) {
        float x[REG > 0 ? REG : 1];
#pragma unroll
        for (int u = 0; u < REG; u++) {
            const int i = t + u * HC_THREADS;
            x[u] = i < n ? hc_ld<COHERENT>(xr + i) : 0.f;
        }
        double ss = 0;
#pragma unroll
        for (int u = 0; u < REG; u++)
            if (t + u * HC_THREADS < n) ss += (double)mul(x[u], x[u]);
        ss = block_sum(ss, sh);
        const float inv = (float)(1.0 / sqrt((double)add((float)(ss / n), eps)));
#pragma unroll
        for (int u = 0; u < REG; u++) {
            const int i = t + u * HC_THREADS;
            if (i < n) {
                const float v = mul(x[u], inv);
                yr[i] = weight ? mul(weight[i], v) : v;
            }
        }
    } else {
        double ss = 0;
        for (int i = t; i < n; i += HC_THREADS) {
            const float v = hc_ld<COHERENT>(xr + i);
            ss += (double)mul(v, v);
        }
        ss = block_sum(ss, sh);
        const float inv = (float)(1.0 / sqrt((double)add((float)(ss / n), eps)));
        for (int i = t; i < n; i += HC_THREADS) {
            const float v = mul(hc_ld<COHERENT>(xr + i), inv);
            yr[i] = weight ? mul(weight[i], v) : v;
        }
    }
}

/**
 * rmsnorm_row_ilp's REG for a launch of rows rows of n values: 16 or 64 registers per thread when the row fits, or 0
 * (the loop, fewer registers: more blocks per SM) above 64 * 256 values or for more than HC_FEW_ROWS rows, where the
 * other rows hide a row's latency.
 */
constexpr int HC_FEW_ROWS = 64;
static inline int hc_reg_for(int64_t rows, int64_t n) {
    if (rows > HC_FEW_ROWS) return 0;
    return n <= 16 * HC_THREADS ? 16 : n <= 64 * HC_THREADS ? 64 : 0;
}

/**
 * Whether the calling block is the last of the `blocks` blocks of its row to get here (every thread gets the answer).
 * Counts on *count, which wraps to 0 with the last arrival, ready for the next launch. What the row's blocks wrote
 * before the call is visible to the last block (through hc_ld<true>).
 */
__device__ __forceinline__ bool last_of_row(unsigned* count, unsigned blocks, int* flag) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) *flag = atomicInc(count, blocks - 1) == blocks - 1;
    __syncthreads();
    const bool last = *flag != 0;
    if (last) __threadfence();
    return last;
}

template <int REG>
__global__ void __launch_bounds__(HC_THREADS) rmsnorm_ilp_kernel(const float* x, float* y, const float* weight, int n,
                                                                  float eps) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ double sh[32];
    rmsnorm_row_ilp<false, REG>(x + (int64_t)blockIdx.x * n, y + (int64_t)blockIdx.x * n, weight, n, eps, sh);
}

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
 * hc_pre_kernel split: blocks x < B = gridDim.x - 1 collapse columns [x * cols, +cols) of row blockIdx.y (cols: a
 * multiple of HC_THREADS, hc_cols), block B computes the row's mapping (post, Sinkhorn). With norm, the last collapse
 * block of the row normalises col[s].
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
        hc_mapping(m, base, scale, n, iters, eps, post + s * n, comb + (int64_t)s * n * n);
        return;
    }
    const int j = threadIdx.x;
    if (j < n) pre[j] = add(sigmoid_d(add(mul(scale[0], m[j]), base[j])), eps);
    __syncthreads();
    const float* xs = X + (int64_t)s * n * D;
    float* cs = col + (int64_t)s * D;
    const int d1 = min(D, (int)(blockIdx.x + 1) * cols);
    for (int d = blockIdx.x * cols + threadIdx.x; d < d1; d += HC_THREADS) {
        const float acc = hc_collapse(pre, xs, n, D, d);
        cs[d] = acc;
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
    __shared__ int flag;
    const int s = blockIdx.y;
    if (ids) {  // moe_combine_elem's order of the picks (its stable insertion sort by id): pick j's slot, in parallel
        const int j = threadIdx.x;
        if (j < k) {
            const int id = ids[s * k + j];
            int slot = 0;
            for (int i = 0; i < k; i++) {
                const int o = ids[s * k + i];
                slot += o < id || (o == id && i < j);
            }
            order[slot] = j;
        }
        __syncthreads();
    }
    float* xs = X + (int64_t)s * n * D;
    const int d = blockIdx.x * HC_COLS + threadIdx.x;
    if (d < D) {
        float fv;
        if (ids) {
            float acc = 0;
            for (int j = 0; j < k; j++) {
                const int p = s * k + order[j];
                acc = add(acc, mul(weights[p], yr[(int64_t)p * D + d]));
            }
            fv = add(acc, f[(int64_t)s * D + d]);
        } else {
            fv = f[(int64_t)s * D + d];
        }
        hc_post_elem(xs, fv, post + s * n, comb + (int64_t)s * n * n, n, D, d);
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

/**
 * moe_route_kernel's results without its serial selection: expert e is picked when fewer than k experts rank above it
 * (larger biased score, or equal and lower id; NaN below every number, NaNs by id: the order of the k passes of
 * moe_route_kernel), its slot among the picks is the number of picked ids below it; the weights' sum runs over the
 * picks in ascending id as there. Hash rows keep tid2eid's order.
 */
__global__ void moe_route_rank_kernel(const float* lam, const float* bias, const int32_t* tid2eid, const int32_t* tokens,
                                      int E, int k, float scaling, int32_t* ids, float* weights) {
    DS4J_AWAIT_PREVIOUS();
    extern __shared__ float sm[];
    __shared__ int by_rank[ROUTE_KMAX], pick[ROUTE_KMAX];
    float* sc = sm;
    float* key = sm + E;
    const int s = blockIdx.x;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const float v = sqrt_softplus(lam[(int64_t)s * E + e]);
        sc[e] = v;
        if (bias) key[e] = add(v, bias[e]);
    }
    __syncthreads();
    if (tid2eid) {
        if ((int)threadIdx.x < k) pick[threadIdx.x] = tid2eid[(int64_t)tokens[s] * k + threadIdx.x];
    } else {
        for (int e = threadIdx.x; e < E; e += blockDim.x) {
            const float x = key[e];
            const bool xn = isnan(x);
            int rank = 0;
            for (int o = 0; o < E && rank < k; o++) {
                const float y = key[o];
                const bool yn = isnan(y);
                // o ranks above e
                rank += (xn && yn) ? o < e : (yn ? 0 : (xn ? 1 : (y > x || (y == x && o < e))));
            }
            if (rank < k) by_rank[rank] = e;
        }
        __syncthreads();
        if ((int)threadIdx.x < k) {
            const int e = by_rank[threadIdx.x];
            int slot = 0;
            for (int j = 0; j < k; j++) slot += by_rank[j] < e;
            pick[slot] = e;
        }
    }
    __syncthreads();
    if ((int)threadIdx.x < k) {
        float sum = 0;
        for (int j = 0; j < k; j++) sum = add(sum, sc[pick[j]]);
        const int e = pick[threadIdx.x];
        ids[s * k + threadIdx.x] = e;
        weights[s * k + threadIdx.x] = mul(sc[e] / add(sum, 1e-20f), scaling);
    }
}

}  // namespace ds4j

using namespace ds4j;

/** The split mHC kernels on (1) or the one-block ones (0); -1 until the first call reads DS4J_HC_SPLIT. */
static std::atomic<int> hc_split_mode{-1};

static bool hc_split() {
    int o = hc_split_mode.load();
    if (o < 0) {
        const char* e = getenv("DS4J_HC_SPLIT");
        o = (e && strcmp(e, "0") == 0) ? 0 : 1;
        int unknown = -1;
        if (!hc_split_mode.compare_exchange_strong(unknown, o)) o = hc_split_mode.load();
    }
    return o == 1;
}

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

/**
 * ds4j_argmax_rows: one block per row. Each thread scans its strided share in ascending index (keeping the first of
 * equal values), then the (value, index) pairs are reduced by the order of argmax_beats, which is associative and
 * commutative, so the answer does not depend on the block size. NaN entries are skipped: none can win a sequential
 * strictly-greater scan, except at index 0, which the scan never leaves.
 */
__global__ void argmax_rows_kernel(const float* __restrict__ x, int64_t ld, int32_t n, int32_t* __restrict__ out) {
    DS4J_AWAIT_PREVIOUS();
    const float* row = x + (int64_t)blockIdx.x * ld;
    float best = -INFINITY;
    int32_t at = INT32_MAX;
    for (int32_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = row[i];
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
        if (lane == 0) out[blockIdx.x] = (row[0] != row[0] || at == INT32_MAX) ? 0 : at;
    }
}

int32_t ds4j_argmax_rows(ds4j_ctx* ctx, const float* x, int64_t ld, int32_t rows, int32_t n, int32_t* out) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && out && rows >= 0 && n > 0 && ld >= n, "ds4j_argmax_rows: bad arguments (rows %d, n %d, ld %lld)", rows,
             n, (long long)ld);
    if (rows == 0) return DS4J_OK;
    argmax_rows_kernel<<<rows, 256, 0, ctx->stream>>>(x, ld, n, out);
    DS4J_LAUNCHED("argmax_rows");
    return DS4J_OK;
}

int32_t ds4j_rmsnorm(ds4j_ctx* ctx, const float* x, float* y, const float* weight, int32_t rows, int32_t n, float eps) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && y && rows >= 0 && n > 0, "ds4j_rmsnorm: bad arguments (rows %d, n %d)", rows, n);
    if (rows == 0) return DS4J_OK;
    const int reg = hc_reg_for(rows, n);
    if (!hc_split()) rmsnorm_kernel<<<rows, 256, 0, ctx->stream>>>(x, y, weight, n, eps);
    else if (reg == 16) rmsnorm_ilp_kernel<16><<<rows, HC_THREADS, 0, ctx->stream>>>(x, y, weight, n, eps);
    else if (reg == 64) rmsnorm_ilp_kernel<64><<<rows, HC_THREADS, 0, ctx->stream>>>(x, y, weight, n, eps);
    else rmsnorm_ilp_kernel<0><<<rows, HC_THREADS, 0, ctx->stream>>>(x, y, weight, n, eps);
    DS4J_LAUNCHED("rmsnorm");
    return DS4J_OK;
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

int32_t ds4j_moe_route(ds4j_ctx* ctx, const float* lam, const float* bias, const int32_t* tid2eid,
                       const int32_t* tokens, int32_t S, int32_t E, int32_t k, float scaling, int32_t* ids,
                       float* weights) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(lam && ids && weights, "ds4j_moe_route: null pointer");
    DS4J_ARG((bias != nullptr) != (tid2eid != nullptr), "ds4j_moe_route: exactly one of bias and tid2eid must be given");
    DS4J_ARG(!tid2eid || tokens, "ds4j_moe_route: hash routing needs the token ids");
    DS4J_ARG(k >= 1 && k <= ROUTE_KMAX && E >= k && E <= 4096, "ds4j_moe_route: unsupported k %d / E %d (k <= %d)", k, E,
             ROUTE_KMAX);
    if (S == 0) return DS4J_OK;
    if (!hc_split())
        moe_route_kernel<<<S, 128, 2 * E * sizeof(float), ctx->stream>>>(lam, bias, tid2eid, tokens, E, k, scaling, ids,
                                                                            weights);
    else
        moe_route_rank_kernel<<<S, 128, 2 * E * sizeof(float), ctx->stream>>>(lam, bias, tid2eid, tokens, E, k, scaling,
                                                                                 ids, weights);
    DS4J_LAUNCHED("moe_route");
    return DS4J_OK;
}

int32_t ds4j_swiglu(ds4j_ctx* ctx, const float* g, const float* u, float* out, int64_t n, float limit) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(g && u && out && n >= 0, "ds4j_swiglu: bad arguments");
    if (n == 0) return DS4J_OK;
    swiglu_kernel<<<grid_for(n), 256, 0, ctx->stream>>>(g, u, out, n, limit);
    DS4J_LAUNCHED("swiglu");
    return DS4J_OK;
}

int32_t ds4j_moe_combine(ds4j_ctx* ctx, const int32_t* ids, const float* weights, const float* y_routed,
                         const float* shared, int32_t S, int32_t k, int32_t D, float* out) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(ids && weights && y_routed && shared && out, "ds4j_moe_combine: null pointer");
    DS4J_ARG(k >= 1 && k <= ROUTE_KMAX && D > 0 && S >= 0, "ds4j_moe_combine: unsupported k %d", k);
    if (S == 0) return DS4J_OK;
    moe_combine_kernel<<<grid_for((int64_t)S * D), 256, 0, ctx->stream>>>(ids, weights, y_routed, shared, S, k, D, out);
    DS4J_LAUNCHED("moe_combine");
    return DS4J_OK;
}

}  // extern "C"
