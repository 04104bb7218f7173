// Helpers of more than one op family. The sources of libds4j_gpu are grouped by operation family (rope.cpp,
// kv_cache.cpp, attention.cpp, compressor.cpp, indexer.cpp; norm.cpp, mhc.cpp, moe_routing.cpp, swiglu.cpp,
// argmax.cpp; the products in gemm.cpp, gemm_skinny.cpp, gemm_tc.cpp and indexer_tc.cpp): what one family alone uses
// stays in its source, what several use is here (what every source uses is in common.h).
#pragma once

#include "common.h"

namespace ds4j {

// ------------------------------------------------------------------------------------------- device: cache rows
// Ring slots (the ring stores of kv_cache.cpp and compressor.cpp) and cache elements (read by attention.cpp and
// indexer.cpp).

/** The first position a ring store of positions N0 .. N0+S-1 writes: only the last cap rows survive. */
__host__ __device__ __forceinline__ int64_t ring_first(int64_t N0, int S, int cap) {
    return N0 + S - cap > N0 ? N0 + S - cap : N0;
}

/** Cache element to F32 (exact for both element types). */
__device__ __forceinline__ float load_f(const uint16_t* p, int i) { return f16_to_f32(p[i]); }
__device__ __forceinline__ float load_f(const float* p, int i) { return p[i]; }

// ------------------------------------------------------------------------------------------- host: views and scratch
// The *_seqs entry points of kv_cache.cpp, attention.cpp, compressor.cpp and indexer.cpp check their views here; the
// context's key-range scratch serves the split attention (attention.cpp), the multi-block top-k (indexer.cpp) and the
// sliced pooling (compressor.cpp), which never have their scratch live at once on one stream.

/** Checks the views of a *_seqs call and gives their largest S. */
inline int32_t check_views(const char* fn, const ds4j_seq_view* host_views, const ds4j_seq_view* views, int32_t n,
                           int32_t* max_s_out) {
    DS4J_ARG(host_views && views && n > 0 && n <= 65535, "%s: bad sequence views (n %d)", fn, n);
    int32_t max_s = 0;
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        DS4J_ARG(v.S > 0 && v.S <= 65535 && v.row0 >= 0 && v.N0 >= 0, "%s: view %d: bad S %d, row0 %d or N0 %lld", fn, i,
                 v.S, v.row0, (long long)v.N0);
        if (v.S > max_s) max_s = v.S;
    }
    *max_s_out = max_s;
    return DS4J_OK;
}

/**
 * At least bytes of the context's key-range scratch in *out. A larger buffer replaces a smaller one; the smaller one is
 * kept until ds4j_ctx_destroy, because launches queued or captured into a graph may still use it.
 */
inline int32_t at_scratch(ds4j_ctx* ctx, int64_t bytes, float** out) {
    if (bytes > ctx->att_scratch_bytes) {
        DS4J_ARG(ctx->att_retired_n < (int)(sizeof(ctx->att_retired) / sizeof(ctx->att_retired[0])),
                 "attention: key-range scratch grown too often");
        int64_t want = ctx->att_scratch_bytes * 2 > bytes ? ctx->att_scratch_bytes * 2 : bytes;
        if (want < (1ll << 20)) want = 1ll << 20;
        void* p = nullptr;
        hipError_t e = hipMalloc(&p, (size_t)want);
        if (e != hipSuccess) {
            hipGetLastError();
            return fail(DS4J_ERR_OOM, "attention: %lld bytes of key-range scratch: %s", (long long)want, hipGetErrorName(e));
        }
        if (ctx->att_scratch) ctx->att_retired[ctx->att_retired_n++] = ctx->att_scratch;
        ctx->att_scratch = p;
        ctx->att_scratch_bytes = want;
    }
    *out = (float*)ctx->att_scratch;
    return DS4J_OK;
}

/**
 * What launches need to know of a device (attention.cpp's block sizes and shared memory, gemm_skinny.cpp's L2
 * prefetch): asked once per device, then cached.
 */
struct DeviceLimits {
    int sms;             // multiprocessors (1 when the device does not say)
    int64_t smem_optin;  // most dynamic shared memory a block may opt in to (48 KB when the device does not say)
    int64_t l2;          // L2 cache bytes (0 when the device does not say)
};

inline DeviceLimits device_limits(int device) {
    static DeviceLimits cache[64];
    if (device < 0 || device >= 64) return DeviceLimits{1, 48 * 1024, 0};
    if (cache[device].sms == 0) {
        hipDeviceProp_t p;
        const bool ok = hipGetDeviceProperties(&p, device) == hipSuccess;
        cache[device].smem_optin = ok && p.sharedMemPerBlockOptin > 48 * 1024 ? (int64_t)p.sharedMemPerBlockOptin : 48 * 1024;
        cache[device].l2 = ok && p.l2CacheSize > 0 ? (int64_t)p.l2CacheSize : 0;
        cache[device].sms = ok && p.multiProcessorCount > 0 ? p.multiProcessorCount : 1;  // last: it marks the entry filled
    }
    return cache[device];
}

// ------------------------------------------------------------------------------------------- row-wise kernels
// The RMSNorm of 256-thread blocks with its loads issued together (rmsnorm_ilp_kernel of norm.cpp, and the row norms
// that end the split mHC kernels of mhc.cpp), the switch between the split and the one-block forms (norm.cpp, mhc.cpp,
// moe_routing.cpp), and the MoE combination of one element (moe_routing.cpp, and mhc.cpp's fused post and norm).

/** Block size of the split kernels and of rmsnorm_ilp_kernel (the RMSNorm order is that of 256 threads). */
constexpr int HC_THREADS = 256;

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
        // the weights are loaded with the values, before the sum needs them, so that the scaling waits for no read
        // (rmsnorm_ilp_kernel<16> of a decode row: 3.7 us a call against 5.0 on an H100; BENCHMARKS.md, forty-second
        // session)
        float x[REG > 0 ? REG : 1], w[REG > 0 ? REG : 1];
#pragma unroll
        for (int u = 0; u < REG; u++) {
            const int i = t + u * HC_THREADS;
            x[u] = i < n ? hc_ld<COHERENT>(xr + i) : 0.f;
            w[u] = i < n && weight ? weight[i] : 1.f;
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
                yr[i] = weight ? mul(w[u], v) : v;
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
 * Whether the split kernels run (mhc.cpp: DS4J_HC_SPLIT, read at the first call, or ds4j_set_hc_split): the split mHC
 * kernels, rmsnorm_ilp_kernel (norm.cpp) and moe_route_rank_kernel (moe_routing.cpp); else the one-block kernels. Both
 * forms give the same bits.
 */
bool hc_split();

/**
 * Whether the calling block is the last of the `blocks` blocks of its row to get here (every thread gets the answer).
 * Counts on *count, which wraps to 0 with the last arrival, ready for the next launch. What the row's blocks wrote
 * before the call is visible to the last block (through hc_ld<true>). The split mHC kernels (mhc.cpp) and the router
 * over several blocks a row (moe_routing.cpp) count on it.
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

/** Most picks per row (k) of the router, the MoE combination and the mHC post kernels. */
constexpr int ROUTE_KMAX = 16;

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

}  // namespace ds4j
