// MoE routing and combination (spec 3.8): the router's picks and weights per row (ds4j_moe_route: a serial
// selection per row, or with the split kernels on (hc_split) a rank per expert, the same picks; ds4j_moe_gate_route:
// the gate's scores and the ranking's picks in one launch), and the weighted sum
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
 * moe_route_kernel's results for row s without its serial selection, by the calling block (every thread): expert e is
 * picked when fewer than k experts rank above it (larger biased score, or equal and lower id; NaN below every number,
 * NaNs by id: the order of the k passes of moe_route_kernel), its slot among the picks is the number of picked ids below
 * it; the weights' sum runs over the picks in ascending id as there. Hash rows keep tid2eid's order. lam is row s's E
 * raw scores (read through hc_ld<COHERENT>: the router's other blocks wrote them in the same launch), sc and key 2E
 * floats of shared memory, by_rank and pick ROUTE_KMAX ints of it.
 */
template <bool COHERENT>
__device__ __forceinline__ void route_rank_row(const float* lam, const float* bias, const int32_t* tid2eid,
                                               const int32_t* tokens, int s, int E, int k, float scaling, int32_t* ids,
                                               float* weights, float* sc, float* key, int* by_rank, int* pick) {
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        const float v = sqrt_softplus(hc_ld<COHERENT>(lam + e));
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

/** route_rank_row for row blockIdx.x of lam [S, E] (the split kernels' form of moe_route_kernel: the same picks). */
__global__ void moe_route_rank_kernel(const float* lam, const float* bias, const int32_t* tid2eid, const int32_t* tokens,
                                      int E, int k, float scaling, int32_t* ids, float* weights) {
    DS4J_AWAIT_PREVIOUS();
    extern __shared__ float sm[];
    __shared__ int by_rank[ROUTE_KMAX], pick[ROUTE_KMAX];
    const int s = blockIdx.x;
    route_rank_row<false>(lam + (int64_t)s * E, bias, tid2eid, tokens, s, E, k, scaling, ids, weights, sm, sm + E, by_rank,
                          pick);
}

/** Most experts per block of the router in one launch (one warp each; gate_route_epb picks how many). */
constexpr int GR_EXPERTS = 16;
/** 16-byte weight chunks a lane loads before it uses the first (all issued together). */
constexpr int GR_BATCH = 8;

/** Elements of a 16-byte chunk of gate weights, and their F32 values (exact for F32, F16 and BF16). */
template <int FMT> struct GateChunk;
template <> struct GateChunk<DS4J_FMT_F32> {
    static constexpr int N = 4;
    static __device__ __forceinline__ float at(const uint4& q, int j) {
        return __uint_as_float(j == 0 ? q.x : j == 1 ? q.y : j == 2 ? q.z : q.w);
    }
};
template <int FMT> struct GateChunk16 {
    static constexpr int N = 8;
    static __device__ __forceinline__ float at(const uint4& q, int j) {
        const uint32_t u = (j >> 1) == 0 ? q.x : (j >> 1) == 1 ? q.y : (j >> 1) == 2 ? q.z : q.w;
        const uint16_t h = (uint16_t)((j & 1) ? u >> 16 : u & 0xffffu);
        return FMT == DS4J_FMT_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
};
template <> struct GateChunk<DS4J_FMT_F16> : GateChunk16<DS4J_FMT_F16> {};
template <> struct GateChunk<DS4J_FMT_BF16> : GateChunk16<DS4J_FMT_BF16> {};

/**
 * The router's scores and picks in one launch (ds4j_moe_gate_route): grid (blocks a row, S), a warp an expert (at most
 * GR_EXPERTS a block). The block stages row s of x in shared memory; warp w scores expert e = blockIdx.x * (warps a
 * block) + w: lane l takes the 16-byte weight chunks l, l + 32, ... in that order, each chunk's products added by fmaf
 * into one F32 sum in column order, then the lanes' sums by warp_sum, lane 0's value kept; so a score depends on D and
 * the format only, never on S, the row's place or the launch shape. Scores go to lam [S, E]; with one block a row that block ranks them, else the
 * row's last block to finish (arrival counters, count [S]) reads them back and ranks them (route_rank_row).
 */
template <int FMT>
__global__ void __launch_bounds__(GR_EXPERTS * 32)
moe_gate_route_kernel(const uint8_t* w, int64_t row_bytes, int E, int D, const float* x, int64_t ldx, const float* bias,
                      const int32_t* tid2eid, const int32_t* tokens, int k, float scaling, float* lam, int32_t* ids,
                      float* weights, unsigned* count) {
    DS4J_AWAIT_PREVIOUS();
    using C = GateChunk<FMT>;
    extern __shared__ __align__(16) float gsm[];  // x's row [D], then sc [E] and key [E] for the ranking
    __shared__ int by_rank[ROUTE_KMAX], pick[ROUTE_KMAX], flag;
    const int s = blockIdx.y;
    const float* xr = x + (int64_t)s * ldx;
    for (int i = 4 * threadIdx.x; i < D; i += 4 * blockDim.x) *(float4*)(gsm + i) = *(const float4*)(xr + i);
    __syncthreads();
    const int lane = threadIdx.x & 31, e = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (e < E) {
        const uint4* wr = (const uint4*)(w + (int64_t)e * row_bytes);
        const int chunks = D / C::N;
        float acc = 0.f;
        for (int c0 = lane; c0 < chunks; c0 += 32 * GR_BATCH) {
            uint4 q[GR_BATCH];
#pragma unroll
            for (int b = 0; b < GR_BATCH; b++) {
                const int c = c0 + 32 * b;
                q[b] = c < chunks ? __ldg(wr + c) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int b = 0; b < GR_BATCH; b++) {
                const int c = c0 + 32 * b;
                if (c >= chunks) break;
#pragma unroll
                for (int j = 0; j < C::N; j++) acc = fmaf(C::at(q[b], j), gsm[c * C::N + j], acc);
            }
        }
        acc = warp_sum(acc);
        if (lane == 0) lam[(int64_t)s * E + e] = acc;
    }
    // one block a row: lam's row is its own, visible after the barrier; several: the row's last block ranks (the
    // answer is the same for the whole block, so the others leave together)
    if (gridDim.x == 1) __syncthreads();
    else if (!last_of_row(count + s, gridDim.x, &flag)) return;
    float* sc = gsm + D;
    route_rank_row<true>(lam + (int64_t)s * E, bias, tid2eid, tokens, s, E, k, scaling, ids, weights, sc, sc + E, by_rank,
                         pick);
}

/**
 * Experts (warps) per block of ds4j_moe_gate_route: DS4J_GATE_ROUTE_EPB, 1 .. GR_EXPERTS, read once (for measurements;
 * every score is the same at any value: a warp computes its expert alone). Default 16.
 */
static int gate_route_epb() {
    static std::atomic<int> c{0};
    return env_choice(c, "DS4J_GATE_ROUTE_EPB", GR_EXPERTS, 1, GR_EXPERTS);
}

/** Dynamic shared memory of a moe_gate_route_kernel block: x's row and the ranking's 2E scores. */
inline int64_t gate_route_smem(int E, int D) { return ((int64_t)D + 2 * (int64_t)E) * (int64_t)sizeof(float); }

/** Whether ds4j_moe_gate_route takes this format and shape (see ds4j_gpu.h). */
inline bool gate_route_fits(int format, int E, int D) {
    const int n = format == DS4J_FMT_F32 ? 4 : (format == DS4J_FMT_F16 || format == DS4J_FMT_BF16) ? 8 : 0;
    // the static shared variables (by_rank, pick, flag: 132 bytes) share the 48 KiB a block may take without opting in
    return n > 0 && D > 0 && D % 8 == 0 && E >= 1 && E <= 4096 && gate_route_smem(E, D) <= 48 * 1024 - 256;
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

int32_t ds4j_moe_gate_route_fits(ds4j_ctx* ctx, int32_t format, int32_t E, int32_t D, int32_t* host_fits) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(host_fits, "ds4j_moe_gate_route_fits: null result");
    // several blocks a row count on the context's arrival counters, which a failed allocation left out
    *host_fits = gate_route_fits(format, E, D) && (E <= gate_route_epb() || ctx->route_count) ? 1 : 0;
    return DS4J_OK;
}

int32_t ds4j_moe_gate_route(ds4j_ctx* ctx, int32_t format, const void* w, int32_t E, int32_t D, const float* x,
                            int64_t ldx, const float* bias, const int32_t* tid2eid, const int32_t* tokens, int32_t S,
                            int32_t k, float scaling, float* lam, int32_t* ids, float* weights) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(w && x && lam && ids && weights, "ds4j_moe_gate_route: null pointer");
    DS4J_ARG((bias != nullptr) != (tid2eid != nullptr), "ds4j_moe_gate_route: exactly one of bias and tid2eid must be given");
    DS4J_ARG(!tid2eid || tokens, "ds4j_moe_gate_route: hash routing needs the token ids");
    DS4J_ARG(k >= 1 && k <= ROUTE_KMAX && E >= k, "ds4j_moe_gate_route: unsupported k %d / E %d (k <= %d)", k, E, ROUTE_KMAX);
    DS4J_ARG(gate_route_fits(format, E, D), "ds4j_moe_gate_route: format %d, E %d, D %d not taken (ds4j_moe_gate_route_fits)",
             format, E, D);
    DS4J_ARG(S >= 0 && ldx >= D && ldx % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)w & 15) == 0,
             "ds4j_moe_gate_route: S %d, ldx %lld, x and w 16-byte aligned with ldx a multiple of 4", S, (long long)ldx);
    if (S == 0) return DS4J_OK;
    const int epb = gate_route_epb();
    const unsigned nb = (unsigned)((E + epb - 1) / epb);
    if (nb > 1 && !ctx->route_count)
        return fail(DS4J_ERR_OOM, "ds4j_moe_gate_route: %u blocks a row, and the arrival counters could not be allocated", nb);
    const int64_t rb = row_bytes_of(format, D);
    const size_t smem = (size_t)gate_route_smem(E, D);
    // rows in launches of at most DS4J_HC_COUNT_ROWS (one counter each)
    for (int32_t s0 = 0; s0 < S; s0 += DS4J_HC_COUNT_ROWS) {
        const int32_t n = S - s0 < DS4J_HC_COUNT_ROWS ? S - s0 : DS4J_HC_COUNT_ROWS;
        const dim3 grid(nb, (unsigned)n);
        const float* xs = x + (int64_t)s0 * ldx;
        const int32_t* ts = tokens ? tokens + s0 : nullptr;
        float* ls = lam + (int64_t)s0 * E;
        int32_t* is = ids + (int64_t)s0 * k;
        float* ws = weights + (int64_t)s0 * k;
#define DS4J_GR(F)                                                                                                     \
    moe_gate_route_kernel<F><<<grid, epb * 32, smem, ctx->stream>>>((const uint8_t*)w, rb, E, D, xs, ldx, bias,         \
                                                                           tid2eid, ts, k, scaling, ls, is, ws,        \
                                                                           ctx->route_count)
        if (format == DS4J_FMT_F32) DS4J_GR(DS4J_FMT_F32);
        else if (format == DS4J_FMT_F16) DS4J_GR(DS4J_FMT_F16);
        else DS4J_GR(DS4J_FMT_BF16);
#undef DS4J_GR
        DS4J_LAUNCHED("moe_gate_route");
    }
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
