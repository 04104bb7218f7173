// MoE routing and combination (spec 3.8): the router's picks and weights per row (ds4j_moe_route: a serial
// selection per row, or with the split kernels on (hc_split) a rank per expert, the same picks), and the weighted sum
// of the routed experts' outputs plus the shared expert's (ds4j_moe_combine). These mirror io.ds4j.cpu.CpuBackend /
// Ops operation by operation, including where the CPU evaluates in double.
#include "ops.h"

namespace ds4j {

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

extern "C" {

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
