// RMSNorm of rows (spec 3.0, ds4j_rmsnorm): one block of 256 threads per row, either the loop of rmsnorm_row
// (common.h) or, with the split kernels on (hc_split), rmsnorm_row_ilp's loads issued together (ops.h): the same bits.
// The fused norms live with what they follow: RMSNorm + RoPE in rope.cpp, the mHC site norms in mhc.cpp.
// These mirror io.ds4j.cpu.CpuBackend / Ops operation by operation, including where the CPU evaluates in double.
#include "ops.h"

namespace ds4j {

__global__ void rmsnorm_kernel(const float* x, float* y, const float* weight, int n, float eps) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ double sh[32];
    rmsnorm_row(x + (int64_t)blockIdx.x * n, y + (int64_t)blockIdx.x * n, weight, n, eps, sh);
}

template <int REG>
__global__ void __launch_bounds__(HC_THREADS) rmsnorm_ilp_kernel(const float* x, float* y, const float* weight, int n,
                                                                  float eps) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ double sh[32];
    rmsnorm_row_ilp<false, REG>(x + (int64_t)blockIdx.x * n, y + (int64_t)blockIdx.x * n, weight, n, eps, sh);
}

}  // namespace ds4j

using namespace ds4j;

extern "C" {

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

}  // extern "C"
