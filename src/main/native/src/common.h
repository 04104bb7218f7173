// Shared by every source of libds4j_gpu: platform selection (HIP on AMD, CUDA through our compat header with
// nvcc), error reporting and small device helpers. Kernels assume 32-lane warps (NVIDIA, and AMD RDNA gfx11 in its
// default wave32 mode).
#pragma once

#if defined(__NVCC__) && !defined(__HIPCC__)
#include "../compat/hip_to_cuda.h"
#define DS4J_PLATFORM_NAME "cuda"
#define DS4J_SHFL_XOR(v, o) __shfl_xor_sync(0xffffffffu, (v), (o))
#define DS4J_SHFL_UP(v, o) __shfl_up_sync(0xffffffffu, (v), (o))
#define DS4J_SHFL(v, l) __shfl_sync(0xffffffffu, (v), (l))
#define DS4J_ANY(p) __any_sync(0xffffffffu, (p))
#else
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#define DS4J_PLATFORM_NAME "hip"
#define DS4J_SHFL_XOR(v, o) __shfl_xor((v), (o), 32)
#define DS4J_SHFL_UP(v, o) __shfl_up((v), (o), 32)
#define DS4J_SHFL(v, l) __shfl((v), (l), 32)
#define DS4J_ANY(p) __any(p)
#if defined(__AMDGCN_WAVEFRONT_SIZE) && __AMDGCN_WAVEFRONT_SIZE != 32
#error "ds4j kernels assume wave32 (RDNA, gfx11); build for gfx1100/gfx1151 without -mwavefrontsize64"
#endif
#endif

#include <stdint.h>
#include <stddef.h>
#include <atomic>
#include <stdlib.h>
#include <string.h>
#include "../include/ds4j/ds4j_gpu.h"

// Tensor-core kernels (mma.sync through inline PTX) exist only in nvcc builds; hipcc builds use the FFMA kernels for
// every shape (see ds4j_gpu.h, DS4J_TC_MIN_ROWS).
#if defined(__NVCC__) && !defined(__HIPCC__)
#define DS4J_HAVE_TC 1
#else
#define DS4J_HAVE_TC 0
#endif

/**
 * The fewest rows a product call with this tc_rows argument (ds4j_matmul, ds4j_matmul_grouped,
 * ds4j_moe_matmul_prefill; already validated to 0 .. DS4J_TC_MIN_ROWS) runs on the tensor-core prefill path:
 * DS4J_TC_MIN_ROWS for 0, else tc_rows.
 */
inline int tc_min_rows(int32_t tc_rows) { return tc_rows > 0 ? tc_rows : DS4J_TC_MIN_ROWS; }

// Programmatic dependent launch (graph.cpp, programmatic_edges): in a step graph on compute capability 9.0+, a
// kernel may be launched while the kernel before it still runs, so that its launch latency hides behind that kernel's
// tail. Every kernel therefore begins with DS4J_AWAIT_PREVIOUS(): it waits until the previous kernel of the graph has
// completed and its writes are visible (PTX griddepcontrol.wait; before it the kernel touches no memory), then lets
// the next kernel launch (griddepcontrol.launch_dependents), whose own wait holds it until this one has completed.
// Launched any other way (no programmatic edge) both instructions do nothing. A kernel without this line must never
// be reached by a programmatic edge: KernelEntryTest checks that every __global__ function starts with it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define DS4J_AWAIT_PREVIOUS()                                   \
    do {                                                        \
        asm volatile("griddepcontrol.wait;" ::: "memory");      \
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); \
    } while (0)
#else
#define DS4J_AWAIT_PREVIOUS() \
    do {                      \
    } while (0)
#endif

// Weights read by a kernel are never written by a step, so a kernel may ask for them before its wait: the L2 fetches
// them from HBM while the previous kernel still runs (weight streaming kernels otherwise spend their first round trip
// idle). DS4J_AWAIT_PREVIOUS_PREFETCHING(r) prefetches the L2Range r (computed from the kernel's parameters and
// indices alone: it reads no memory) into the L2, then waits as DS4J_AWAIT_PREVIOUS. A prefetch into the L2 never
// changes what a load returns (global memory is coherent in the L2, and the L1 is not filled), so even a range that a
// kernel of the step writes would stay correct; KernelEntryTest accepts this form as a kernel's first line.

/** Bytes [p, p + n) for the L2 to fetch: a hint only; null or n = 0 asks for nothing. */
struct L2Range {
    const void* p;
    size_t n;
};

/**
 * Asks the L2 for r, split evenly over the calling block's warps (lane 0 of each issues one bulk prefetch of its
 * piece, cut to 16-byte granules: the start rounded up, the end down, as cp.async.bulk.prefetch wants). sm_90+; a no-op
 * elsewhere. Every thread of the block may call it.
 */
__device__ __forceinline__ void prefetch_l2(L2Range r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const int nw = (int)(blockDim.x >> 5), w = (int)(threadIdx.x >> 5);
    if ((threadIdx.x & 31) != 0 || r.p == nullptr || r.n < 16) return;
    const uintptr_t a = ((uintptr_t)r.p + 15u) & ~(uintptr_t)15u, e = ((uintptr_t)r.p + r.n) & ~(uintptr_t)15u;
    if (e <= a) return;
    const size_t gran = (e - a) >> 4;  // 16-byte granules, split over the warps
    const uintptr_t b0 = a + ((gran * (size_t)w / nw) << 4), b1 = a + ((gran * (size_t)(w + 1) / nw) << 4);
    for (uintptr_t b = b0; b < b1; b += (uintptr_t)1 << 30) {  // size is 32 bits: pieces of at most 1 GiB
        const uint32_t n = (uint32_t)min((uintptr_t)1 << 30, b1 - b);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(b), "r"(n) : "memory");
    }
#else
    (void)r;
#endif
}

#define DS4J_AWAIT_PREVIOUS_PREFETCHING(...) \
    do {                                     \
        prefetch_l2(__VA_ARGS__);            \
        DS4J_AWAIT_PREVIOUS();               \
    } while (0)

// Stream capture and graphs (graph.cpp): HIP has the API we use since ROCm 5.3; every CUDA 12+ build has it.
#if defined(__HIPCC__) && defined(HIP_VERSION) && HIP_VERSION < 50300000
#define DS4J_HAVE_GRAPHS 0
#else
#define DS4J_HAVE_GRAPHS 1
#endif

namespace ds4j {
/** One cached executable graph of a context: its topology signature and when it was last launched. */
struct GraphSlot {
#if DS4J_HAVE_GRAPHS
    hipGraphExec_t exec = nullptr;
#endif
    uint64_t signature = 0;
    uint64_t used = 0;
};

/**
 * What a launch takes from its context that must differ between streams working at once (ds4j_branch_begin): the
 * stream, and the scratch buffers that a product or an attention call writes and reads within its launches. A context
 * is its own stream's lane (ds4j_ctx derives from it) and keeps one for each side lane.
 */
struct Lane {
    hipStream_t stream = nullptr;
    /**
     * Device memory of the split attention's key-range partials (attention.cpp; also the multi-block top-k's and the
     * sliced pooling's scratch: at_scratch, ops.h), grown on demand. Replaced buffers stay allocated until
     * ds4j_ctx_destroy: launches queued or captured into a graph may still use them.
     */
    void* att_scratch = nullptr;
    int64_t att_scratch_bytes = 0;
    void* att_retired[32] = {};
    int att_retired_n = 0;
    /**
     * Device memory of the column-split partials of the skinny products and of the prefill GEMM's column parts
     * (partials_scratch, gemm_skinny.cpp), grown and kept as att_scratch.
     */
    void* sk_scratch = nullptr;
    int64_t sk_scratch_bytes = 0;
    void* sk_retired[32] = {};
    int sk_retired_n = 0;
    /** Device memory of the prefill GEMM's split activations (gemm_tc.cpp, DS4J_TC_XSPLIT), grown and kept as att_scratch. */
    void* tc_scratch = nullptr;
    int64_t tc_scratch_bytes = 0;
    void* tc_retired[32] = {};
    int tc_retired_n = 0;
    /**
     * ds4j_parts_begin / ds4j_parts_end: 1 while armed (the lane's next column-split skinny product whose y rows are
     * contiguous leaves its partials, unsummed, and records them here: parts_at, parts_n planes parts_stride floats
     * apart; 2 once one did), 0 otherwise.
     */
    int parts_state = 0;
    const float* parts_at = nullptr;
    int parts_n = 0;
    int64_t parts_stride = 0;
};
}  // namespace ds4j

/** The lane fields (stream, scratch) are always those of the stream launches go to (see side). */
struct ds4j_ctx : ds4j::Lane {
    int device;
    /** Between ds4j_graph_begin and ds4j_graph_end_launch / ds4j_graph_discard: calls that wait must not run. */
    bool capturing = false;
    ds4j::GraphSlot graphs[DS4J_GRAPH_CACHE];
    uint64_t graph_clock = 0;
    /** ds4j_seqs_bounds: *_seqs launch shapes from bounds (fixed per step shape) instead of the views' values. */
    bool fixed_grids = false;
    int64_t fixed_entries = 0;
    /** ds4j_seqs_bounds: no query of the step sits before this position (0: any may). */
    int64_t fixed_first = 0;
    /**
     * Arrival counters of the split mHC kernels (mhc.cpp), DS4J_HC_COUNT_ROWS of them, zero between launches; null
     * when they could not be allocated (the one-block kernels run then).
     */
    unsigned* hc_count = nullptr;
    /**
     * Arrival counters of the router's launches of several blocks a row (ds4j_moe_gate_route), DS4J_HC_COUNT_ROWS of
     * them, zero between launches; null when they could not be allocated (such launches are declined then).
     */
    unsigned* route_count = nullptr;
    /**
     * ds4j_branch_*: the side lanes (side[i - 1] is lane i's while no branch is open; while lane i is open it holds the
     * context's own, and the inherited Lane, which launches always take, is lane i's), made with the context.
     * fork_ev[i - 1] orders lane i after the context's stream, join_ev[i - 1] the other way.
     */
    ds4j::Lane side[DS4J_BRANCH_LANES];
    hipEvent_t fork_ev[DS4J_BRANCH_LANES] = {}, join_ev[DS4J_BRANCH_LANES] = {};
    int lane = 0;           // the open branch's lane (1 .. DS4J_BRANCH_LANES), 0 when none is open
    unsigned unjoined = 0;  // bit i - 1: lane i ended (join_ev recorded) and not yet waited for by the context's stream
};

/** Rows one split mHC launch covers (its counters in ds4j_ctx.hc_count). */
#define DS4J_HC_COUNT_ROWS 4096

namespace ds4j {

// ------------------------------------------------------------------------------------------- host: errors

/** Records a message for ds4j_last_error and returns code. */
int fail(int code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/** Maps a runtime error to a status and records "<what>: <name> (<description>)". */
int fail_hip(hipError_t e, const char* what);
/** Process-wide launch counts (ds4j_launch_counts): kernels, copies and fills, graph launches. */
extern std::atomic<int64_t> launched_kernels, launched_copies, launched_graphs;
/**
 * The major compute capability of a device, asked of the runtime once per device (devices 0 .. 63) and kept; 0 when
 * the runtime cannot say (not kept: asked again next time).
 */
int device_cc_major(int device);
/**
 * Measurement only, never for results: whether DS4J_MEASURE_SKIP (a comma-separated list, read once) names the class of
 * operations `what` ("mhc", "mapping", "combine", "attention", "routed", "fp8", "bf16"), whose entry points then return
 * without launching anything. Replaying a step graph without one class shows what that class costs inside the replay,
 * overlap and launch gaps included, which kernel-by-kernel profiles do not; the step's numbers are meaningless then.
 */
bool measure_skip(const char* what);
/** Called by ds4j_embed at the start of each forward step: the profiler window of DS4J_PROFILE_STEP (runtime.cpp). */
void profile_step_mark(ds4j_ctx* ctx, int rows);
/** Makes ctx's device current for the calling thread. */
int bind(ds4j_ctx* ctx);
/** Ends an open capture and destroys the cached executable graphs of ctx (graph.cpp; for ds4j_ctx_destroy). */
void graphs_destroy(ds4j_ctx* ctx);
/**
 * Ends an open branch and joins every unjoined one (ds4j_branch_*), so that ctx's fields are its own stream's and that
 * stream waits for everything queued on the context; for calls that end a capture or wait, and after failures. The
 * runtime's first error, or hipSuccess.
 */
hipError_t branch_settle(ds4j_ctx* ctx);

}  // namespace ds4j

#define DS4J_CHECK_CTX(ctx)                                                     \
    do {                                                                        \
        if (!(ctx)) return ds4j::fail(DS4J_ERR_ARG, "%s: null context", __func__); \
        int rc_ = ds4j::bind(ctx);                                              \
        if (rc_ != DS4J_OK) return rc_;                                         \
    } while (0)

/** Calls that wait for the device cannot run while ctx's stream is being captured into a graph. */
#define DS4J_NOT_CAPTURING(ctx)                                                                                   \
    do {                                                                                                          \
        if ((ctx)->capturing)                                                                                     \
            return ds4j::fail(DS4J_ERR_CAPTURE,                                                                   \
                              "%s waits for the device and cannot run while the stream is captured into a graph " \
                              "(ds4j_graph_begin); discard the capture and run the step without it",            \
                              __func__);                                                                          \
    } while (0)

#define DS4J_ARG(cond, ...)                                        \
    do {                                                           \
        if (!(cond)) return ds4j::fail(DS4J_ERR_ARG, __VA_ARGS__); \
    } while (0)

/** Fails entry point fn with DS4J_ERR_ARG unless its tc_rows argument is in 0 .. DS4J_TC_MIN_ROWS (see tc_min_rows). */
#define DS4J_ARG_TC_ROWS(fn, tc_rows)                                                                       \
    DS4J_ARG((tc_rows) >= 0 && (tc_rows) <= DS4J_TC_MIN_ROWS, "%s: tc_rows %d not in 0 .. %d", fn, (int)(tc_rows), \
             DS4J_TC_MIN_ROWS)

#define DS4J_LAUNCHED(name)                                                 \
    do {                                                                    \
        hipError_t e_ = hipGetLastError();                                  \
        if (e_ != hipSuccess) return ds4j::fail_hip(e_, "launching " name); \
        ds4j::launched_kernels.fetch_add(1, std::memory_order_relaxed);     \
    } while (0)

// ------------------------------------------------------------------------------------------- device helpers

namespace ds4j {

constexpr int WARP = 32;

/**
 * Whether the environment variable `name` equals `value`, read at the first call through `cache` (the caller's static
 * std::atomic<int>, -1 until read): the measurement switches of the kernels (DS4J_PDL=0, DS4J_SKINNY=0, ...).
 */
static inline bool env_equals(std::atomic<int>& cache, const char* name, const char* value) {
    int v = cache.load();
    if (v < 0) {
        const char* e = getenv(name);
        v = e && strcmp(e, value) == 0 ? 1 : 0;
        cache.store(v);
    }
    return v == 1;
}

/**
 * A small integer setting of the environment variable `name`, read at the first call through `cache` (the caller's
 * static std::atomic<int>, 0 until read): def when unset or not one of lo .. hi (lo >= 0).
 */
static inline int env_choice(std::atomic<int>& cache, const char* name, int def, int lo, int hi) {
    int v = cache.load();
    if (v == 0) {
        v = def;
        if (const char* e = getenv(name)) {
            const int n = atoi(e);
            if (e[0] >= '0' && e[0] <= '9' && n >= lo && n <= hi) v = n;
        }
        cache.store(v + 1);  // stored plus one, so that 0 means unread
        return v;
    }
    return v - 1;
}

static inline unsigned blocks_for(int64_t n, int per) { return (unsigned)((n + per - 1) / per); }
/** Blocks of 256 threads for n elements of a grid-stride kernel: at least 1, at most 65,535 (the kernel loops). */
static inline unsigned grid_for(int64_t n) {
    const int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += DS4J_SHFL_XOR(v, o);
    return v;
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += DS4J_SHFL_XOR(v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, DS4J_SHFL_XOR(v, o));
    return v;
}

/** Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the same value. */
template <typename T>
__device__ __forceinline__ T block_sum(T v, T* sh) {
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    T r = 0;
    for (int i = 0; i < nw; i++) r += sh[i];
    return r;
}

__device__ __forceinline__ float block_max(float v, float* sh) {
    v = warp_max(v);
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    float r = sh[0];
    for (int i = 1; i < nw; i++) r = fmaxf(r, sh[i]);
    return r;
}

/** Exclusive prefix sum over the block (blockDim.x a multiple of 32); *total gets the block's sum. */
__device__ __forceinline__ int block_excl_scan(int v, int* sh, int* total) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int y = DS4J_SHFL_UP(x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) sh[wid] = x;
    __syncthreads();
    int off = 0, tot = 0;
    for (int i = 0; i < nw; i++) {
        if (i < wid) off += sh[i];
        tot += sh[i];
    }
    *total = tot;
    return off + x - v;
}

// Uncontracted arithmetic where the CPU reference rounds after every operation (small, exactness-sensitive ops).
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float4 add(float4 a, float4 b) {
    return make_float4(add(a.x, b.x), add(a.y, b.y), add(a.z, b.z), add(a.w, b.w));
}

/** Planes of partial sums loaded together before they are added (planes_sum): one round trip per PLANES_BATCH. */
constexpr int PLANES_BATCH = 8;

/**
 * Planes 0 .. n - 1 of the Vec (float or float4) at element i, stride floats apart, added in plane order: the order
 * that decides the bits of a column-split product's result (gemm_skinny.cpp's partitions), for its own sums
 * (skinny_combine) and for a reader of its planes (swiglu_parts_kernel) alike. PLANES_BATCH loads go out before their
 * adds, which still run in plane order.
 */
template <class Vec>
__device__ __forceinline__ Vec planes_sum(const float* at, int n, int64_t stride, int64_t i) {
    Vec acc = *reinterpret_cast<const Vec*>(at + i);
    for (int p0 = 1; p0 < n; p0 += PLANES_BATCH) {
        Vec v[PLANES_BATCH];
#pragma unroll
        for (int j = 0; j < PLANES_BATCH; j++)
            if (p0 + j < n) v[j] = *reinterpret_cast<const Vec*>(at + (int64_t)(p0 + j) * stride + i);
#pragma unroll
        for (int j = 0; j < PLANES_BATCH; j++)
            if (p0 + j < n) acc = add(acc, v[j]);
    }
    return acc;
}

/**
 * Spec 3.0 RMSNorm of one row of n values by the whole block: yr = weight * xr / sqrt(mean(xr^2) + eps) (weight null =
 * RMSNorm_1); the square sum in double, in one fixed order. yr may be xr: each thread writes only the elements it read.
 */
__device__ __forceinline__ void rmsnorm_row(const float* xr, float* yr, const float* weight, int n, float eps, double* sh) {
    double ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i];
        ss += (double)mul(v, v);
    }
    ss = block_sum(ss, sh);
    const float inv = (float)(1.0 / sqrt((double)add((float)(ss / n), eps)));
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float u = mul(xr[i], inv);
        yr[i] = weight ? mul(weight[i], u) : u;
    }
}
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }

/** 1 / (1 + e^-z) evaluated in double, rounded to float (io.ds4j.kernels.Ops#sigmoid). */
__device__ __forceinline__ float sigmoid_d(float z) { return (float)(1.0 / (1.0 + exp(-(double)z))); }

/** e^z in double, rounded to float (the CPU's (float) Math.exp). */
__device__ __forceinline__ float exp_d(float z) { return (float)exp((double)z); }

__device__ __forceinline__ float f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t f32_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }
__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float(((uint32_t)h) << 16); }

/** E8M0 byte -> 2^(e-127) (NaN for 0xFF), as io.ds4j.model.WeightMatrix#e8m0. */
__device__ __forceinline__ float e8m0(uint32_t b) {
    b &= 0xFFu;
    if (b == 0xFFu) return __uint_as_float(0x7fc00000u);
    return __uint_as_float(b == 0 ? 0x00400000u : (b << 23));
}

/** e4m3fn byte -> value, as io.ds4j.model.WeightMatrix#E4M3. */
__device__ __forceinline__ float e4m3(uint32_t b) {
    const uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if (e == 0) v = (float)m * 0.001953125f;  // m/8 * 2^-6
    else if (e == 15 && m == 7) v = __uint_as_float(0x7fc00000u);
    else v = __uint_as_float(((e + 120u) << 23) | (m << 20));
    return (b & 0x80u) ? -v : v;
}

/**
 * e2m1 nibble -> value (spec 2.5 LUT {0, .5, 1, 1.5, 2, 3, 4, 6} with sign), without a table: the nibble's bits placed
 * into an F16 pattern give value x 2^-14 exactly (subnormals included).
 */
__device__ __forceinline__ float e2m1(uint32_t nib) {
    return __half2float(__ushort_as_half((uint16_t)(((nib & 8u) << 12) | ((nib & 7u) << 9)))) * 16384.f;
}

/** Bytes of one stored row of cols elements in format fmt. */
__host__ __device__ __forceinline__ int64_t row_bytes_of(int fmt, int cols) {
    return fmt == DS4J_FMT_F32 ? (int64_t)cols * 4
         : fmt <= DS4J_FMT_BF16 ? (int64_t)cols * 2
         : fmt == DS4J_FMT_FP8_E4M3_B128 ? (int64_t)cols : (int64_t)cols / 2;
}

/** A stored weight matrix view (see ds4j_matmul). */
struct WView {
    const uint8_t* w;
    const uint8_t* scale;
    int scale_kind;
    int row_base;
    int cols;
    int scale_cols;  // FP8: ceil(cols / 128)
};

/** W[r, c] of the view, dequantised exactly as io.ds4j.model.WeightMatrix#get (value x scale, one rounding). */
template <int FMT>
__device__ __forceinline__ float wget(const WView& v, int r, int c) {
    if constexpr (FMT == DS4J_FMT_F32) {
        return ((const float*)v.w)[(size_t)r * v.cols + c];
    } else if constexpr (FMT == DS4J_FMT_F16) {
        return f16_to_f32(((const uint16_t*)v.w)[(size_t)r * v.cols + c]);
    } else if constexpr (FMT == DS4J_FMT_BF16) {
        return bf16_to_f32(((const uint16_t*)v.w)[(size_t)r * v.cols + c]);
    } else if constexpr (FMT == DS4J_FMT_FP8_E4M3_B128) {
        const size_t si = (size_t)((v.row_base + r) >> 7) * v.scale_cols + (c >> 7);
        const float sc = v.scale_kind == DS4J_SCALE_F32 ? ((const float*)v.scale)[si] : e8m0(v.scale[si]);
        return e4m3(v.w[(size_t)r * v.cols + c]) * sc;
    } else {
        const uint32_t b = v.w[(size_t)r * (v.cols >> 1) + (c >> 1)];
        const float sc = e8m0(v.scale[(size_t)r * (v.cols >> 5) + (c >> 5)]);
        return e2m1((c & 1) ? (b >> 4) : (b & 15u)) * sc;
    }
}

}  // namespace ds4j
