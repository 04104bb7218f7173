// Internal interface of the tensor-core prefill kernels (gemm_tc.cpp, indexer_tc.cpp); see ds4j_gpu.h,
// DS4J_TC_MIN_ROWS, for what they compute and when they run.
#pragma once

#include "common.h"

namespace ds4j {

/** Whether the tensor-core paths run on ctx's device: an nvcc build, compute capability >= 8.0, DS4J_TC not "0". */
bool tc_device(ds4j_ctx* ctx);

/**
 * y[s*ldy + r] = sum_c W[r, c] x[s*ldx + (r / grp) * xgs + c] on tensor cores, when the format, shape and pointers
 * allow it (see ds4j_gpu.h). Returns false, launching nothing, when they do not (the caller then runs the FFMA
 * kernels); otherwise true with *rc the launch status. Arguments are already validated; S >= DS4J_TC_MIN_ROWS.
 */
bool tc_matmul(ds4j_ctx* ctx, int format, const WView& v, int rows, int grp, int64_t xgs, const float* x, int64_t ldx,
               float* y, int64_t ldy, int S, int* rc);

/**
 * Grouping of routed-expert picks by expert (gemm.cpp): block e of moe_group_kernel (E blocks) writes cnt[e], off[e]
 * and perm[off[e] ..] (the picks of expert e in ascending order); moe_chunks_kernel (one block) writes prefix[e] =
 * sum over e' < e of ceil(cnt[e'] / chunk), for e <= E.
 */
__global__ void moe_group_kernel(const int32_t* ids, int P, int32_t* perm, int32_t* cnt, int32_t* off);
__global__ void moe_chunks_kernel(const int32_t* cnt, int E, int chunk, int32_t* prefix);

}  // namespace ds4j
