// SwiGLU of the experts' feed-forward (spec 3.0, ds4j_swiglu): silu of the clamped gate times the clamped up
// projection. This mirrors io.ds4j.cpu.CpuBackend / Ops operation by operation, including where the CPU evaluates in
// double.
#include "common.h"

namespace ds4j {

/** SwiGLU of one gate value g and up value u with the limit lim. */
__device__ __forceinline__ float swiglu_of(float g, float u, float lim) {
    const float gv = fminf(g, lim);
    const float uv = fmaxf(-lim, fminf(u, lim));
    return mul((float)(gv / (1.0 + exp(-(double)gv))), uv);
}

__global__ void swiglu_kernel(const float* g, const float* u, float* out, int64_t n, float lim) {
    DS4J_AWAIT_PREVIOUS();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = swiglu_of(g[i], u[i], lim);
}

/** swiglu_kernel of g and u each summed from its planes (ds4j_swiglu_parts). */
__global__ void swiglu_parts_kernel(const float* g, int gn, int64_t gs, const float* u, int un, int64_t us, float* out,
                                    int64_t n, float lim) {
    DS4J_AWAIT_PREVIOUS();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = swiglu_of(planes_sum<float>(g, gn, gs, i), planes_sum<float>(u, un, us, i), lim);
}

}  // namespace ds4j

using namespace ds4j;

extern "C" {

int32_t ds4j_swiglu(ds4j_ctx* ctx, const float* g, const float* u, float* out, int64_t n, float limit) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(g && u && out && n >= 0, "ds4j_swiglu: bad arguments");
    if (n == 0) return DS4J_OK;
    swiglu_kernel<<<grid_for(n), 256, 0, ctx->stream>>>(g, u, out, n, limit);
    DS4J_LAUNCHED("swiglu");
    return DS4J_OK;
}

int32_t ds4j_swiglu_parts(ds4j_ctx* ctx, const float* g, int32_t g_planes, int64_t g_stride, const float* u,
                          int32_t u_planes, int64_t u_stride, float* out, int64_t n, float limit) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(g && u && out && n >= 0 && g_planes >= 1 && u_planes >= 1 && (g_planes == 1 || g_stride >= n) &&
                 (u_planes == 1 || u_stride >= n),
             "ds4j_swiglu_parts: bad arguments (planes %d / %d, strides %lld / %lld, n %lld)", g_planes, u_planes,
             (long long)g_stride, (long long)u_stride, (long long)n);
    if (n == 0) return DS4J_OK;
    swiglu_parts_kernel<<<grid_for(n), 256, 0, ctx->stream>>>(g, g_planes, g_stride, u, u_planes, u_stride, out, n, limit);
    DS4J_LAUNCHED("swiglu_parts");
    return DS4J_OK;
}

int32_t ds4j_parts_begin(ds4j_ctx* ctx) {
    DS4J_CHECK_CTX(ctx);
    ctx->parts_state = 1;
    ctx->parts_at = nullptr;
    ctx->parts_n = 0;
    ctx->parts_stride = 0;
    return DS4J_OK;
}

int32_t ds4j_parts_end(ds4j_ctx* ctx, const float** host_at, int32_t* host_planes, int64_t* host_stride) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(host_at && host_planes && host_stride, "ds4j_parts_end: null result");
    const bool left = ctx->parts_state == 2;
    *host_at = left ? ctx->parts_at : nullptr;
    *host_planes = left ? ctx->parts_n : 0;
    *host_stride = left ? ctx->parts_stride : 0;
    ctx->parts_state = 0;
    return DS4J_OK;
}

}  // extern "C"
