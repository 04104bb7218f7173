// SwiGLU of the experts' feed-forward (spec 3.0, ds4j_swiglu): silu of the clamped gate times the clamped up
// projection. This mirrors io.ds4j.cpu.CpuBackend / Ops operation by operation, including where the CPU evaluates in
// double.
#include "common.h"

namespace ds4j {

__global__ void swiglu_kernel(const float* g, const float* u, float* out, int64_t n, float lim) {
    DS4J_AWAIT_PREVIOUS();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float gv = fminf(g[i], lim);
        const float uv = fmaxf(-lim, fminf(u[i], lim));
        out[i] = mul((float)(gv / (1.0 + exp(-(double)gv))), uv);
    }
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

}  // extern "C"
