// Internal interface of the tensor-core kernels: prefill (gemm_tc.cpp, indexer_tc.cpp) and the skinny products of
// decode and verify steps (gemm_skinny.cpp); see ds4j_gpu.h, DS4J_TC_MIN_ROWS, for what they compute and when they run.
#pragma once

#include "common.h"

namespace ds4j {

/** Formats with an exact BF16 path: BF16, F16 (as two BF16 parts), FP8 with E8M0 scales, FP4. */
inline bool tc_format(int format, int scale_kind) {
    return format == DS4J_FMT_BF16 || format == DS4J_FMT_F16 || format == DS4J_FMT_FP4_E2M1_B32 ||
           (format == DS4J_FMT_FP8_E4M3_B128 && scale_kind == DS4J_SCALE_E8M0);
}

/** Whether the tensor-core paths run on ctx's device: an nvcc build, compute capability >= 8.0, DS4J_TC not "0". */
bool tc_device(ds4j_ctx* ctx);

/**
 * y[s*ldy + r] = sum_c W[r, c] x[s*ldx + (r / grp) * xgs + c] on tensor cores, when the format, shape and pointers
 * allow it (see ds4j_gpu.h). Returns false, launching nothing, when they do not (the caller then runs the FFMA
 * kernels); otherwise true with *rc the launch status. Arguments are already validated; the caller decided that S
 * takes this path (S >= tc_min_rows of its tc_rows).
 */
bool tc_matmul(ds4j_ctx* ctx, int format, const WView& v, int rows, int grp, int64_t xgs, const float* x, int64_t ldx,
               float* y, int64_t ldy, int S, int* rc);

/**
 * The skinny tensor-core product for steps of 1 .. DS4J_TC_MIN_ROWS - 1 rows (decode, verify): as tc_matmul, for
 * S < DS4J_TC_MIN_ROWS. Returns false, launching nothing, when the format, pointers or device do not allow it.
 */
bool skinny_matmul(ds4j_ctx* ctx, int format, const WView& v, int rows, int grp, int64_t xgs, const float* x,
                   int64_t ldx, float* y, int64_t ldy, int S, int* rc);

/**
 * ds4j_moe_matmul on the skinny tensor-core kernel (S < DS4J_TC_MIN_ROWS): each expert's weights are read once for
 * all its picks. E: the number of experts (every id in [0, E)), which sizes the grid by distinct experts instead of
 * by picks, or 0 when unknown. Returns false, launching nothing, when the format, pointers, pick count or device do
 * not allow it.
 */
bool skinny_moe(ds4j_ctx* ctx, int format, void* const* w_table, void* const* scale_table,
                const int32_t* row_base_table, int scale_kind, int rows, int cols, int E, const int32_t* ids, int k,
                int S, const float* x, int64_t ldx, int x_per_pick, float* y, int64_t ldy, int* rc);

/**
 * ds4j_moe_matmul with the number of experts E (every id in [0, E); 0 when unknown), which lets the skinny kernel size
 * its grid by distinct experts (gemm.cpp; ds4j_moe_matmul_prefill passes its E). skinny false: the FFMA kernel even
 * below DS4J_TC_MIN_ROWS (a prefill call at or above its tc_rows whose tensor-core path the arguments do not allow,
 * so that it rounds as the same call of DS4J_TC_MIN_ROWS rows would). A status.
 */
int32_t moe_matmul_impl(ds4j_ctx* ctx, int32_t format, void* const* w_table, void* const* scale_table,
                        const int32_t* row_base_table, int32_t scale_kind, int32_t rows, int32_t cols, int32_t E,
                        const int32_t* ids, int32_t k, int32_t S, const float* x, int64_t ldx, int32_t x_per_pick,
                        float* y, int64_t ldy, bool skinny);

/**
 * At least bytes of the context's device scratch for column-split partial sums in *out (shared by the skinny and the
 * prefill products; a larger buffer replaces a smaller one, which stays allocated until ds4j_ctx_destroy because
 * queued or captured launches may still use it). A status: DS4J_ERR_OOM when it cannot be allocated.
 */
int partials_scratch(ds4j_ctx* ctx, int64_t bytes, float** out);

/**
 * Launches y[s ldy + r] = part[0][s][r] + part[1][s][r] + ... + part[nw - 1][s][r], added in that order, for s < ns,
 * r < rows (part[p] holds ns x rows floats); ids / w_table non-null (routed experts): rows s whose expert ids[s] has no
 * device weights are left untouched. A status.
 */
int sum_partials(ds4j_ctx* ctx, const float* part, int nw, int ns, int rows, float* y, int64_t ldy, const int32_t* ids,
                 void* const* w_table);

/**
 * Lightning Indexer scores on tensor cores (indexer_tc.cpp; ds4j_gpu.h, ds4j_indexer_scores): one sequence (views
 * null: qi, wt, keys, N0, S) or n (views in device memory, keys from view.store, S the largest view.S). keys F16 bits,
 * or F32 (keys_f32) holding F16 values; keys_aligned: every view's store is 16-byte aligned. most: the largest
 * available set (or the scores row, for launch shapes fixed by ld). switchable: DS4J_INDEXER_TC=0 turns it off.
 * Returns false, launching nothing, when the build, device, shapes or pointers do not allow it; otherwise true with
 * *rc the launch status. Arguments are already validated.
 */
bool tc_indexer(ds4j_ctx* ctx, const ds4j_seq_view* views, int n, const float* qi, const float* wt, const void* keys,
                bool keys_f32, bool keys_aligned, int64_t N0, int S, int m, int HI, int dI, int K, float w_scale,
                float s_scale, float* scores, int64_t ld, int64_t most, bool switchable, int* rc);

}  // namespace ds4j
