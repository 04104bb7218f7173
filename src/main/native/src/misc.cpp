// Row-wise ops of the forward: RMSNorm, mHC (spec 3.2, 3.9), MoE routing and combination (spec 3.8), SwiGLU.
// These mirror io.ds4j.cpu.CpuBackend / Ops operation by operation, including where the CPU evaluates in double.
#include "common.h"

namespace ds4j {

constexpr int HC_MAX = 8;  // largest hc_mult supported by the mHC kernels

__global__ void rmsnorm_kernel(const float* x, float* y, const float* weight, int n, float eps) {
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
        float acc = 0;
        for (int i = 0; i < n; i++) acc = add(acc, mul(pre[i], xs[(int64_t)i * D + d]));
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
    const int64_t total = (int64_t)S * D;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int s = (int)(i / D), d = (int)(i % D);
        hc_post_elem(X + (int64_t)s * n * D, f[(int64_t)s * D + d], post + s * n, comb + (int64_t)s * n * n, n, D, d);
    }
}

__global__ void hc_head_kernel(const float* mu, const float* base, const float* scale, const float* X, int n, int D,
                               float eps, float* y) {
    __shared__ float pre[HC_MAX];
    const int r = blockIdx.x;
    if (threadIdx.x < n) pre[threadIdx.x] = add(sigmoid_d(add(mul(mu[r * n + threadIdx.x], scale[0]), base[threadIdx.x])), eps);
    __syncthreads();
    const float* xs = X + (int64_t)r * n * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float acc = 0;
        for (int k = 0; k < n; k++) acc = add(acc, mul(pre[k], xs[(int64_t)k * D + d]));
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

}  // namespace ds4j

using namespace ds4j;

extern "C" {

int32_t ds4j_rmsnorm(ds4j_ctx* ctx, const float* x, float* y, const float* weight, int32_t rows, int32_t n, float eps) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && y && rows >= 0 && n > 0, "ds4j_rmsnorm: bad arguments (rows %d, n %d)", rows, n);
    if (rows == 0) return DS4J_OK;
    rmsnorm_kernel<<<rows, 256, 0, ctx->stream>>>(x, y, weight, n, eps);
    DS4J_LAUNCHED("rmsnorm");
    return DS4J_OK;
}

int32_t ds4j_hc_pre(ds4j_ctx* ctx, const float* mu, const float* base, const float* scale, const float* X, int32_t S,
                    int32_t n, int32_t D, int32_t sinkhorn_iters, float hc_eps, float* post, float* comb, float* col) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(mu && base && scale && X && post && comb && col, "ds4j_hc_pre: null pointer");
    DS4J_ARG(n >= 1 && n <= HC_MAX && D > 0 && S >= 0 && sinkhorn_iters >= 1,
             "ds4j_hc_pre: unsupported shape (n %d, max %d; D %d; iters %d)", n, HC_MAX, D, sinkhorn_iters);
    if (S == 0) return DS4J_OK;
    hc_pre_kernel<<<S, 256, 0, ctx->stream>>>(mu, base, scale, X, n, D, sinkhorn_iters, hc_eps, post, comb, col, 0,
                                              nullptr, 0.f);
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
    hc_pre_kernel<<<S, 256, 0, ctx->stream>>>(mu, base, scale, X, n, D, sinkhorn_iters, hc_eps, post, comb, col, 1,
                                              norm_w, rms_eps);
    DS4J_LAUNCHED("hc_pre_norm");
    return DS4J_OK;
}

int32_t ds4j_hc_post(ds4j_ctx* ctx, float* X, const float* f, const float* post, const float* comb, int32_t S, int32_t n,
                     int32_t D) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(X && f && post && comb, "ds4j_hc_post: null pointer");
    DS4J_ARG(n >= 1 && n <= HC_MAX && D > 0 && S >= 0, "ds4j_hc_post: unsupported shape (n %d, D %d)", n, D);
    if (S == 0) return DS4J_OK;
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
    if (S == 0) return DS4J_OK;
    hc_post_norm_kernel<<<S, 256, 0, ctx->stream>>>(X, f, ids, weights, y_routed, k, post, comb, n, D, eps, v);
    DS4J_LAUNCHED("hc_post_norm");
    return DS4J_OK;
}

int32_t ds4j_hc_head(ds4j_ctx* ctx, const float* mu, const float* base, const float* scale, const float* X, int32_t R,
                     int32_t n, int32_t D, float hc_eps, float* y) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(mu && base && scale && X && y, "ds4j_hc_head: null pointer");
    DS4J_ARG(n >= 1 && n <= HC_MAX && D > 0 && R >= 0, "ds4j_hc_head: unsupported shape (n %d, D %d)", n, D);
    if (R == 0) return DS4J_OK;
    hc_head_kernel<<<R, 256, 0, ctx->stream>>>(mu, base, scale, X, n, D, hc_eps, y);
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
    moe_route_kernel<<<S, 128, 2 * E * sizeof(float), ctx->stream>>>(lam, bias, tid2eid, tokens, E, k, scaling, ids,
                                                                        weights);
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
