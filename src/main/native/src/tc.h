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

}  // namespace ds4j
