/*
 * ds4j GPU library: the C API that Java binds to (io.ds4j.gpu.bindings.ds4j_gpu_h, generated from this file by
 * tools/bindgen/BindGen.java; BindingsDriftTest fails when the two differ).
 *
 * Conventions
 *  - Every function but ds4j_api_version, ds4j_platform and ds4j_last_error returns a status: DS4J_OK (0) or one of
 *    the DS4J_ERR_* codes; ds4j_last_error() then holds a one-line message for the calling thread.
 *  - Kernel entry points are asynchronous on the context's stream; a failure inside a kernel is reported by the
 *    next ds4j_download or ds4j_ctx_sync. Launch-time failures are reported at once.
 *  - Pointers named x, y, w, ... are device pointers unless the parameter is called host_*. Matrices are row-major;
 *    "ld" is the distance between consecutive rows in elements. Activations are F32, the MLA cache is F16 (stored
 *    as uint16_t bit patterns), compressor state is F32.
 *  - Weight matrices are kept in their stored format (io.ds4j.model.WeightMatrix) and dequantised in the kernels:
 *    W[r, c] of a view whose first row is row_base in the stored tensor.
 *  - Only fixed-width integer types, float and pointers appear in signatures (one function = one downcall).
 *
 * Spec references (ds4-architecture.md) are given per function.
 */
#ifndef DS4J_GPU_H
#define DS4J_GPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define DS4J_API __declspec(dllexport)
#else
#define DS4J_API __attribute__((visibility("default")))
#endif

#define DS4J_GPU_API_VERSION 1

/* status codes */
#define DS4J_OK 0
#define DS4J_ERR_RUNTIME 1   /* GPU runtime error (launch failure, fault reported by a sync, ...) */
#define DS4J_ERR_NO_RUNTIME 2 /* no GPU driver / runtime on this machine */
#define DS4J_ERR_NO_DEVICE 3 /* the runtime works but there is no (such) device */
#define DS4J_ERR_ARG 4       /* invalid argument (shape, null pointer, unsupported format) */
#define DS4J_ERR_OOM 5       /* device memory exhausted */
#define DS4J_ERR_CAPTURE 6   /* graph capture failed or a call is not allowed while capturing: the captured work did not run */

/* weight formats: the order of io.ds4j.model.WeightMatrix.Format */
#define DS4J_FMT_F32 0
#define DS4J_FMT_F16 1
#define DS4J_FMT_BF16 2
#define DS4J_FMT_FP8_E4M3_B128 3 /* e4m3 bytes, scale grid [ceil(rows_total/128), ceil(cols/128)] */
#define DS4J_FMT_FP4_E2M1_B32 4  /* [rows, cols/2] bytes (element 2j low nibble), scale [rows, cols/32] E8M0 */

/* scale element kinds (FP8 only; FP4 scales are always E8M0) */
#define DS4J_SCALE_E8M0 0
#define DS4J_SCALE_F32 1

/* attention kinds (io.ds4j.model.AttentionKind) */
#define DS4J_ATTN_SLIDING 0
#define DS4J_ATTN_CSA 1
#define DS4J_ATTN_HCA 2

/* implementations of ds4j_attention_f16_operands */
#define DS4J_F16OPS_AUTO 0     /* tensor cores where the build has them (nvcc, d in {64, 128, 256, 512}), else portable */
#define DS4J_F16OPS_PORTABLE 1 /* the portable kernel (all hipcc builds): F32 arithmetic on the F16 rows, no tensor cores */
#define DS4J_F16OPS_WHOLE 2    /* as AUTO, but each query's keys in one block (no key ranges, no work memory): prefill
                                  chunks, whose many queries fill the device without splitting */

/** A device and the one stream every call on it is ordered on. */
typedef struct ds4j_ctx ds4j_ctx;

/* ------------------------------------------------------------------------------------------------ runtime */

/** DS4J_GPU_API_VERSION of the built library. */
DS4J_API int32_t ds4j_api_version(void);
/** "cuda" (built with nvcc) or "hip" (built with hipcc); a static string. */
DS4J_API const char* ds4j_platform(void);
/** The message of the calling thread's last failed call ("" when none); valid until its next call. */
DS4J_API const char* ds4j_last_error(void);

/** Number of visible devices. DS4J_ERR_NO_RUNTIME names the missing driver when there is none. */
DS4J_API int32_t ds4j_device_count(int32_t* host_count);
/** NUL-terminated device name into host_buf[0 .. len). */
DS4J_API int32_t ds4j_device_name(int32_t device, char* host_buf, int32_t len);
/** Compute capability, multiprocessor count and total memory (bytes) of a device. */
DS4J_API int32_t ds4j_device_props(int32_t device, int32_t* host_cc_major, int32_t* host_cc_minor,
                                   int32_t* host_multiprocessors, int64_t* host_total_bytes);
/** Free and total device memory (bytes) of the context's device. */
DS4J_API int32_t ds4j_device_memory(ds4j_ctx* ctx, int64_t* host_free_bytes, int64_t* host_total_bytes);

/** Creates a context (device + non-blocking stream). */
DS4J_API int32_t ds4j_ctx_create(int32_t device, ds4j_ctx** host_out);
/** Synchronises and releases the context (allocations are not freed). */
DS4J_API int32_t ds4j_ctx_destroy(ds4j_ctx* ctx);
/** Waits for all work queued on the context; reports kernel faults. */
DS4J_API int32_t ds4j_ctx_sync(ds4j_ctx* ctx);

/* ------------------------------------------------------------------------------------------------ memory */

/** Allocates bytes (256-byte aligned) of device memory; DS4J_ERR_OOM names the size and the free memory. */
DS4J_API int32_t ds4j_malloc(ds4j_ctx* ctx, int64_t bytes, void** host_out);
/** Frees device memory from ds4j_malloc (null is ignored); waits for the device first. */
DS4J_API int32_t ds4j_free(ds4j_ctx* ctx, void* ptr);
/** Host to device copy, ordered on the stream; host_src may be reused when it returns. */
DS4J_API int32_t ds4j_upload(ds4j_ctx* ctx, void* dst, const void* host_src, int64_t bytes);
/** Device to host copy; waits for it (and for all earlier work) to finish. */
DS4J_API int32_t ds4j_download(ds4j_ctx* ctx, void* host_dst, const void* src, int64_t bytes);
/** Device to device copy, ordered on the stream. */
DS4J_API int32_t ds4j_copy(ds4j_ctx* ctx, void* dst, const void* src, int64_t bytes);
/** Sets bytes to the byte value, ordered on the stream. */
DS4J_API int32_t ds4j_memset(ds4j_ctx* ctx, void* dst, int32_t value, int64_t bytes);

/* ------------------------------------------------------------------------------------------------ step graphs */

/*
 * Decode-step graphs: the kernels of a whole step are captured from the context's stream into a graph and launched as
 * one, instead of one launch per kernel. Between ds4j_graph_begin and ds4j_graph_end_launch (or ds4j_graph_discard)
 * the kernel entry points, ds4j_copy and ds4j_memset record work instead of running it (ds4j_malloc still allocates
 * at once); ds4j_upload, ds4j_download, ds4j_ctx_sync and ds4j_free would wait for the device and fail with
 * DS4J_ERR_CAPTURE instead (nothing recorded runs: discard the capture and run the step without it). Kernels take per-step values (positions,
 * counts) as arguments, so consecutive steps give graphs of the same topology with other parameters: the context
 * keeps up to DS4J_GRAPH_CACHE executable graphs, keyed by topology (node count, node types, kernel functions), and
 * a captured graph whose topology is cached only updates that executable's parameters (cheap) instead of building
 * a new one. Results equal those of the same calls without capture bit for bit (same kernels, same order).
 */
#define DS4J_GRAPH_CACHE 16
/* how ds4j_graph_end_launch got its executable graph */
#define DS4J_GRAPH_UPDATED 0        /* a cached executable of the same topology, parameters updated */
#define DS4J_GRAPH_INSTANTIATED 1   /* a new topology: instantiated (evicting the least recently used when full) */
#define DS4J_GRAPH_REINSTANTIATED 2 /* a cached topology whose update was refused: instantiated again */

/** *host_available = 1 when this build can capture and launch graphs, else 0 (then ds4j_graph_begin fails). */
DS4J_API int32_t ds4j_graph_available(int32_t* host_available);
/** Starts capturing the context's stream (relaxed capture mode). DS4J_ERR_ARG when a capture is already open. */
DS4J_API int32_t ds4j_graph_begin(ds4j_ctx* ctx);
/**
 * Ends the capture, updates or instantiates the executable graph for its topology and launches it on the stream
 * (asynchronous, as a kernel call; a following ds4j_download waits for it). *host_how: DS4J_GRAPH_UPDATED,
 * _INSTANTIATED or _REINSTANTIATED. The stream is out of capture mode on return, whatever the outcome.
 * DS4J_ERR_CAPTURE: the capture was invalidated or the graph could not be instantiated; nothing of it ran.
 * DS4J_ERR_RUNTIME: the launch failed (the step's device state is unknown).
 */
DS4J_API int32_t ds4j_graph_end_launch(ds4j_ctx* ctx, int32_t* host_how);
/** Ends an open capture (if any) and drops what it recorded, nothing of which ran; the stream is usable again. */
DS4J_API int32_t ds4j_graph_discard(ds4j_ctx* ctx);
/** *host_capturing = 1 while the context's stream is in capture mode (for checks after failures), else 0. */
DS4J_API int32_t ds4j_graph_capturing(ds4j_ctx* ctx, int32_t* host_capturing);
/** Destroys the context's cached executable graphs (waits for the device first); ds4j_ctx_destroy does it too. */
DS4J_API int32_t ds4j_graph_release(ds4j_ctx* ctx);

/*
 * Kept step graphs: a step whose kernel launches and arguments depend only on its shape (positions, lengths and cache
 * addresses read from device memory: the *_seqs calls with ds4j_seqs_bounds on) is captured once and replayed as is
 * every step of that shape; the caller uploads the step's inputs (tokens, positions, sequence views) into the same
 * device buffers before each replay. No recording, no parameter update per step.
 */
/**
 * Ends the capture and instantiates it without launching; *host_exec: a handle for ds4j_graph_replay and
 * ds4j_graph_destroy. The stream is out of capture mode on return. DS4J_ERR_CAPTURE: the capture was invalidated or
 * could not be instantiated; nothing of it ran.
 */
DS4J_API int32_t ds4j_graph_end_keep(ds4j_ctx* ctx, int64_t* host_exec);
/** Launches a kept executable graph on the context's stream (asynchronous, as a kernel call). */
DS4J_API int32_t ds4j_graph_replay(ds4j_ctx* ctx, int64_t exec);
/** Destroys a kept executable graph (waits for the context's stream first: no launch of it may be in flight). */
DS4J_API int32_t ds4j_graph_destroy(ds4j_ctx* ctx, int64_t exec);
/**
 * Launch shapes of the *_seqs calls from bounds (on = 1) instead of the views' present values (on = 0, the default),
 * so that a step's launches and their arguments depend only on its shape: ds4j_compress_pool_seqs (and
 * ds4j_compress_step_seqs) launches ceil(max S / m) window blocks per sequence, ds4j_indexer_scores_seqs entry blocks for ld entries, and both indexer
 * calls launch even when no view needs a selection (the kernels skip what a view does not need); ds4j_attention_seqs
 * sizes its key scratch for the window plus K compressed entries (CSA) or max_entries (HCA), failing with DS4J_ERR_ARG
 * when a view has more. ds4j_attention_f16_operands_f32_seqs and ds4j_indexer_scores_f32_seqs follow the same rules as
 * their F16 forms; ds4j_f16_to_f32_seqs takes its bounds as arguments and launches for them either way. first_position: no query
 * of the step sits before it (each view's N0 is at least it, checked by the attention calls; 0 when unknown), so
 * ds4j_attention_f16_operands_seqs (and its _f32 form) launches its F32 kernel only where a query from there on can
 * attend at most short_rows rows (attended rows grow with the position): the caller's shape key must then tell apart
 * steps on either side of that, e.g. by that choice per layer kind. The numbers are the same either way, bit for bit.
 */
DS4J_API int32_t ds4j_seqs_bounds(ds4j_ctx* ctx, int32_t on, int64_t max_entries, int64_t first_position);

/*
 * Branches: calls that do not depend on the calls beside them run on other streams of the context (its side lanes 1 ..
 * DS4J_BRANCH_LANES), at the same time. After ds4j_branch_begin(lane) the context's calls queue on that lane's stream,
 * behind everything queued on the context's own stream before it; after ds4j_branch_end they queue on the context's
 * stream again, beside the branch, until ds4j_branch_join(lane) makes that stream wait for it. One branch is open at a
 * time; branches of different lanes may be ended and unjoined together. A step graph captures them as parallel nodes.
 * Each lane has its own scratch memory (the column-split products' partials, the prefill GEMM's split activations, the
 * split attention's partials), so calls in branches and beside them may run at once. Each call computes what it computes
 * queued on one stream, bit for bit: only the order in time changes. The caller keeps the memory a branch reads or writes
 * untouched beside it until its join. ds4j_ctx_sync, ds4j_graph_begin, ds4j_graph_end_* and ds4j_graph_discard end an
 * open branch and join every unjoined one first.
 */
#define DS4J_BRANCH_LANES 2
/**
 * Opens a branch on lane (1 .. DS4J_BRANCH_LANES); a branch still open, or one of this lane not joined yet (a failure
 * between the calls), is ended and joined first.
 */
DS4J_API int32_t ds4j_branch_begin(ds4j_ctx* ctx, int32_t lane);
/** Ends the open branch: later calls queue on the context's own stream, beside it (DS4J_ERR_ARG when none is open). */
DS4J_API int32_t ds4j_branch_end(ds4j_ctx* ctx);
/**
 * The context's stream waits for lane's ended branch (no-op when it has none; DS4J_ERR_ARG when a branch is still open
 * or lane is not in 1 .. DS4J_BRANCH_LANES).
 */
DS4J_API int32_t ds4j_branch_join(ds4j_ctx* ctx, int32_t lane);
/**
 * Process-wide counts since the library was loaded: kernel launches queued by the library's entry points (each
 * kernel counted once when captured, never when replayed inside a graph), device copies and fills (ds4j_copy,
 * ds4j_memset, ds4j_upload) and graph launches. Any output may be null.
 */
DS4J_API int32_t ds4j_launch_counts(int64_t* host_kernels, int64_t* host_copies, int64_t* host_graphs);

/* ------------------------------------------------------------------------------------------------ dense ops */

/*
 * Prefill path (tensor cores). With S >= DS4J_TC_MIN_ROWS rows (or S >= the call's tc_rows, below), ds4j_matmul, ds4j_matmul_grouped and
 * ds4j_moe_matmul_prefill run on tensor cores (mma.sync m16n8k16, BF16 inputs, F32 accumulation) when the build and
 * the device allow it (nvcc build, compute capability >= 8.0; hipcc builds for AMD always take the F32 FFMA kernels)
 * and W is BF16, F16, FP8 with E8M0 scales or FP4 (ds4j_matmul*: with at least 64 rows), its stored rows are whole
 * 16-byte chunks, w and x are 16-byte aligned and ldx, x_group_stride are multiples of 4. Weight tiles are dequantised in shared memory, never in global
 * memory, and exactly: BF16, FP8 x E8M0 and FP4 x E8M0 values are BF16 numbers, and an F16 weight is the exact sum of
 * two BF16 parts. Each F32 activation is split into hi = bf16(x) and lo = bf16(x - hi), |x - hi - lo| <= 2^-16 |x|,
 * and W hi + W lo (+ W_lo hi for F16) accumulate in F32: every product is within 2^-16 relative of the F32 one, about
 * the rounding noise of an F32 sum of a few thousand terms. F32 weights and FP8 with F32 scales keep the FFMA kernels.
 * A dense product whose blocks of 128 weight rows would leave most multiprocessors idle sums its columns in a few
 * ranges, one block each, and adds the ranges' F32 sums in order: how many ranges depends on the weights' shape only,
 * never on S or the device (DS4J_TC_KSTEPS=N, 0 .. 64, read at the first call: at least N column tiles of 64 per
 * range, default 8; 0 one range, for measurements, which changes the rounding of those products). Their partial sums
 * take device memory the context keeps (ranges x rows x 4 bytes per token; failing to allocate it fails the call with
 * DS4J_ERR_OOM rather than rounding differently).
 * Below the threshold (decode; verification of q+1 rows, q+1 <= 17 with the default rollback window of 16; batched
 * steps of up to 64 decode or verify rows, which is why the threshold is 65: such a step is one launch per product
 * that reads every weight once) the same
 * builds, devices and formats run the skinny tensor-core products (any row count; w and x 16-byte aligned, rows of
 * whole 16-byte chunks, ldx and x_group_stride multiples of 4): each 16-byte weight load is decoded in registers
 * straight into the MMA's operand, with the same exact BF16 decoding, hi + lo split of x and F32 accumulation, so the
 * same error bound, except FP8 weights: exact F16 values (e4m3 to F16 in hardware) against x 2^-e split into F16 hi +
 * lo, e per token and 64 columns such that their largest |x| scales into [2^14, 2^15), the E8M0 scale and 2^e applied
 * to each 64 columns' F32 partial sum; each x within 2^-22 |x| plus 2^-39 of the largest |x| of its 64 columns (plus
 * 2^-151 where that largest |x| is below 2^-112); ds4j_moe_matmul reads each picked expert's weights once for all its picks there (in passes of up
 * to 64 picks). The environment variables DS4J_SKINNY_WIDE=0 / 1 (steps of 33 .. 64 rows in passes of 32, each reading
 * the weights, for every product / for none; the default 2 does so for FP8 products of at least 2,048 rows) and DS4J_SKINNY_WIDE_MT=1 (one m-tile of 16 weight rows per warp in 64-row passes instead of two) are
 * for measurements; they change no result. Elsewhere (hipcc
 * builds, F32 weights, FP8 with F32 scales, unaligned pointers) the FFMA kernels run. Every path gives row (s, r) a
 * result that does not depend on S or on the other rows, but the paths differ in rounding (the skinny and prefill
 * products sum the columns in different orders), so results are invariant to chunking only among steps on the same
 * side of the threshold.
 * The environment variable DS4J_TC=0 (read at the first call) turns the tensor-core paths off; DS4J_SKINNY=0 only
 * the skinny ones (steps below the threshold then run on the FFMA kernels).
 * The last argument of these three calls, tc_rows, moves the threshold for that call: 0 keeps DS4J_TC_MIN_ROWS,
 * 1 .. DS4J_TC_MIN_ROWS makes every call of at least that many rows run as a call of DS4J_TC_MIN_ROWS rows would: on
 * the tensor-core path where the build, device, format and pointers allow it, else on the FFMA kernels (never the
 * skinny ones), so each row gets the numbers it gets in a call above the threshold. A caller that decides per request
 * which side a request's rows are on (e.g. a short prefill chunk) passes 1 for them and 0 elsewhere. Any other value
 * fails with DS4J_ERR_ARG.
 */
#define DS4J_TC_MIN_ROWS 65

/** *host_available = 1 when the tensor-core prefill path runs on ctx's device (see DS4J_TC_MIN_ROWS), else 0. */
DS4J_API int32_t ds4j_tc_available(ds4j_ctx* ctx, int32_t* host_available);

/**
 * y[s*ldy + r] = sum_c W[r, c] * x[s*ldx + c] for s < S, r < rows (F32 accumulation).
 * W is a view of rows [row_base, row_base + rows) of a stored matrix with cols columns: w points at the view's first
 * row; for FP8, scale is the tensor's whole block grid and row_base locates the view in it; for FP4, scale points at
 * the view's first row of scales; dense formats take scale = NULL.
 */
DS4J_API int32_t ds4j_matmul(ds4j_ctx* ctx, int32_t format, const void* w, const void* scale, int32_t scale_kind,
                             int32_t row_base, int32_t rows, int32_t cols,
                             const float* x, int64_t ldx, float* y, int64_t ldy, int32_t S, int32_t tc_rows);

/**
 * Block-diagonal product (the grouped output projection, spec 3.4 step 7): as ds4j_matmul, but row r reads its
 * activations at x[s*ldx + (r / group_rows) * x_group_stride + c] (rows = groups x group_rows).
 */
DS4J_API int32_t ds4j_matmul_grouped(ds4j_ctx* ctx, int32_t format, const void* w, const void* scale, int32_t scale_kind,
                                     int32_t row_base, int32_t rows, int32_t cols, int32_t group_rows,
                                     int64_t x_group_stride, const float* x, int64_t ldx, float* y, int64_t ldy,
                                     int32_t S, int32_t tc_rows);

/**
 * Routed-expert products (spec 3.8 step 4). For pick p = s*k + j (s < S, j < k) with e = ids[p]:
 * y[p*ldy + r] = sum_c W_e[r, c] * x[row*ldx + c], row = x_per_pick ? p : s.
 * w_table / scale_table: device arrays of E device pointers (one matrix per expert, all [rows, cols] in one format);
 * row_base_table: device int32 array [E] (FP8 views inside a stacked grid) or NULL for all zero.
 * Hybrid expert placement: a NULL w_table[e] marks expert e as not in device memory; picks routed to it are skipped
 * and their rows y[p*ldy .. p*ldy + rows) are left as they are (the caller computes them elsewhere and writes them).
 */
DS4J_API int32_t ds4j_moe_matmul(ds4j_ctx* ctx, int32_t format, void* const* w_table, void* const* scale_table,
                                 const int32_t* row_base_table, int32_t scale_kind, int32_t rows, int32_t cols,
                                 const int32_t* ids, int32_t k, int32_t S,
                                 const float* x, int64_t ldx, int32_t x_per_pick, float* y, int64_t ldy);

/**
 * ds4j_moe_matmul for prefill chunks: the same arguments and results (pick order), plus the number of experts E
 * (every ids[p] must lie in [0, E)) and scratch device memory of at least 4 * (S*k + 3*E + 1) bytes (16-byte
 * aligned). On the tensor-core path (S >= tc_rows, DS4J_TC_MIN_ROWS when 0, see there; x 16-byte aligned, ldx a multiple of 4) the
 * picks are grouped by expert on the device (a stable counting sort of ids into the scratch) and each expert's picks
 * run as one GEMM, which reads the expert's weights once per 64 picks instead of once per pick; results go straight
 * to their pick rows. Otherwise it runs ds4j_moe_matmul (the scratch unused): below that threshold its skinny kernel,
 * which then launches one block per distinct picked expert instead of one per pick where S*k > E (the same results);
 * at or above it (the tensor-core path declined by the format or pointers) its FFMA kernel. As there, a null w_table
 * entry (an expert in host memory) leaves that expert's pick rows of y untouched.
 */
DS4J_API int32_t ds4j_moe_matmul_prefill(ds4j_ctx* ctx, int32_t format, void* const* w_table, void* const* scale_table,
                                         const int32_t* row_base_table, int32_t scale_kind, int32_t rows, int32_t cols,
                                         int32_t E, const int32_t* ids, int32_t k, int32_t S, const float* x,
                                         int64_t ldx, int32_t x_per_pick, float* y, int64_t ldy, void* scratch,
                                         int64_t scratch_bytes, int32_t tc_rows);

/** Spec 3.1: X[s, i, :] = W[tokens[s], :] for every stream i < n (X is [S, n, cols]); W in any format. */
DS4J_API int32_t ds4j_embed(ds4j_ctx* ctx, int32_t format, const void* w, const void* scale, int32_t scale_kind,
                            int32_t row_base, int32_t rows, int32_t cols, const int32_t* tokens, int32_t S,
                            int32_t n, float* X);

/** Spec 3.0 RMSNorm over rows of width n: y = weight * x / sqrt(mean(x^2) + eps); weight NULL = RMSNorm_1; y may be x. */
DS4J_API int32_t ds4j_rmsnorm(ds4j_ctx* ctx, const float* x, float* y, const float* weight, int32_t rows, int32_t n,
                              float eps);

/**
 * Spec 3.0 RoPE on the last rope_dim channels of each of heads vectors of width `width` per row (x is
 * [S, heads, width]); row s uses position pos0 + s*pos_step; inverse != 0 rotates by -phi (spec 3.4 step 6).
 * inv_freq: device [rope_dim/2] (io.ds4j.model.Rope#invFreq).
 */
DS4J_API int32_t ds4j_rope(ds4j_ctx* ctx, float* x, int32_t S, int32_t heads, int32_t width, int32_t rope_dim,
                           const float* inv_freq, int64_t pos0, int64_t pos_step, int32_t inverse);

/**
 * Fused RMSNorm, RoPE and optional F16 rounding, in place (spec 3.4 steps 2-3): each of `rows` rows of width n is
 * normalised (weight NULL = RMSNorm_1), its last rope_dim channels rotated at position pos0 + row / rows_per_pos, then,
 * when round_f16 != 0, rounded through binary16. Same results as ds4j_rmsnorm, ds4j_rope and ds4j_round_f16 in turn.
 */
DS4J_API int32_t ds4j_rmsnorm_rope(ds4j_ctx* ctx, float* x, const float* weight, int32_t rows, int32_t n, float eps,
                                   int32_t rope_dim, const float* inv_freq, int64_t pos0, int32_t rows_per_pos,
                                   int32_t round_f16);

/** Rounds n floats through IEEE binary16 (round to nearest even), in place. */
DS4J_API int32_t ds4j_round_f16(ds4j_ctx* ctx, float* x, int64_t n);

/**
 * Ring store: rows [S, width] F32 of positions N0 .. N0+S-1 go to slot p % cap of ring [cap, width]; only the last
 * min(S, cap) are written. ring_f16 != 0: the ring is F16 (uint16_t), else F32.
 */
DS4J_API int32_t ds4j_ring_store(ds4j_ctx* ctx, void* ring, int32_t ring_f16, int32_t cap, int32_t width,
                                 const float* rows, int64_t N0, int32_t S);

/* ------------------------------------------------------------------------------------------------ mHC (spec 3.2, 3.9) */

/**
 * mHC mapping from mu = F * RMSNorm_1(vec X) ([S, (2+n)n]): post [S, n], Sinkhorn matrix comb [S, n, n] and the
 * collapsed input col[s] = sum_i pre_i X[s, i] ([S, D]). base [(2+n)n], scale [3] are device arrays. n <= 8.
 */
DS4J_API int32_t ds4j_hc_pre(ds4j_ctx* ctx, const float* mu, const float* base, const float* scale, const float* X,
                             int32_t S, int32_t n, int32_t D, int32_t sinkhorn_iters, float hc_eps,
                             float* post, float* comb, float* col);
/** Stream update X'[s, k] = post[s, k] * f[s] + sum_j comb[s, j, k] * X[s, j], in place. */
DS4J_API int32_t ds4j_hc_post(ds4j_ctx* ctx, float* X, const float* f, const float* post, const float* comb,
                              int32_t S, int32_t n, int32_t D);
/**
 * ds4j_hc_pre followed by the RMSNorm of each column row in the same launch: col[s] = norm_w * col[s] /
 * sqrt(mean(col[s]^2) + rms_eps) (norm_w NULL = RMSNorm_1). Same results as ds4j_hc_pre then ds4j_rmsnorm(col, col).
 */
DS4J_API int32_t ds4j_hc_pre_norm(ds4j_ctx* ctx, const float* mu, const float* base, const float* scale, const float* X,
                                  int32_t S, int32_t n, int32_t D, int32_t sinkhorn_iters, float hc_eps, float* post,
                                  float* comb, float* col, const float* norm_w, float rms_eps);
/**
 * ds4j_hc_post with its block output and the next site's input norm in one launch. ids NULL: the block output is f
 * [S, D]. ids given: it is the MoE combination of ds4j_moe_combine(ids, weights, y_routed, shared = f, S, k, D), which
 * is not stored. Then, when v is not NULL, v[s] = RMSNorm_1 of the updated row X[s] ([S, n*D], eps). Same results as
 * ds4j_moe_combine (when ids), ds4j_hc_post and ds4j_rmsnorm(X, v, NULL, S, n*D, eps) in turn.
 */
DS4J_API int32_t ds4j_hc_post_norm(ds4j_ctx* ctx, float* X, const float* f, const int32_t* ids, const float* weights,
                                   const float* y_routed, int32_t k, const float* post, const float* comb, int32_t S,
                                   int32_t n, int32_t D, float eps, float* v);
/** Spec 3.9 merge: y[r] = sum_k (sigmoid(mu[r, k] * scale[0] + base[k]) + hc_eps) * X[r, k] for R rows [R, n, D]. */
DS4J_API int32_t ds4j_hc_head(ds4j_ctx* ctx, const float* mu, const float* base, const float* scale, const float* X,
                              int32_t R, int32_t n, int32_t D, float hc_eps, float* y);

/* ------------------------------------------------------------------------------------------------ attention (3.4-3.7) */

/**
 * Attention with sink for S queries at positions N0 .. N0+S-1 (spec 3.4 step 5, key set 3.7). q [S, H, d];
 * raw rows: positions >= N0 from kv_new [S, d] (F32, already F16-rounded), older ones from the F16 ring [cap, d]
 * (slot p % cap); compressed rows from entries [*, d] F16: kind HCA uses every w < (t+1)/m, kind CSA uses
 * w < avail = (t+1)/m when avail <= K, else sel[s*K .. s*K+K) (ds4j_indexer_topk); sliding uses none.
 * out [S, H, d] (overwritten). scale = 1/sqrt(d); sinks [H].
 * Where the device's shared memory allows (d <= 512 on NVIDIA), a block reads each key row once for 16 heads and a
 * query's keys are cut into up to 32 key ranges run by separate blocks, then combined; the cut depends on the query's
 * own key count only, so a query gives the same bits alone (decode), in a verify step or batched with other sequences.
 * The ranges' partials live in device memory the context owns (grown on demand, at most 64 MB a launch; longer steps
 * run in several launches), freed by ds4j_ctx_destroy.
 */
DS4J_API int32_t ds4j_attention(ds4j_ctx* ctx, const float* q, const float* kv_new, const uint16_t* ring, int32_t cap,
                                const uint16_t* entries, int32_t kind, int32_t m, const int32_t* sel, int32_t K,
                                const float* sinks, int64_t N0, int32_t S, int32_t H, int32_t d, int32_t W,
                                float scale, float* out);

/**
 * ds4j_attention over an F32 copy of the cache (the verify path "f32-convert" before it took
 * ds4j_attention_f16_operands_f32; now the tests' plain-F32 reference): ring [cap, d] and entries [*, d] are F32
 * (ds4j_f16_to_f32 of the F16 rows). Same keys, masks and operation order as ds4j_attention, so on converted rows the
 * two give the same output bit for bit.
 */
DS4J_API int32_t ds4j_attention_f32(ds4j_ctx* ctx, const float* q, const float* kv_new, const float* ring, int32_t cap,
                                    const float* entries, int32_t kind, int32_t m, const int32_t* sel, int32_t K,
                                    const float* sinks, int64_t N0, int32_t S, int32_t H, int32_t d, int32_t W,
                                    float scale, float* out);

/** dst[i] = src[i] for i < n: F16 bit patterns to F32 (exact). */
DS4J_API int32_t ds4j_f16_to_f32(ds4j_ctx* ctx, const uint16_t* src, float* dst, int64_t n);

/**
 * n_attn of a step: the number of rows its last query (position N0+S-1 = t) attends, which is the most any
 * query of the step attends (the count grows with the position): min(t+1, W) raw window rows plus the compressed
 * entries of ds4j_attention (HCA: (t+1)/m; CSA: min((t+1)/m, K); sliding: none). Needs no context.
 */
DS4J_API int32_t ds4j_attention_rows(int32_t kind, int32_t m, int32_t K, int64_t N0, int32_t S, int32_t W,
                                     int64_t* host_rows);

/**
 * ds4j_attention reading the F16 ring and entries in place as tensor-core operands (the decode steps' attention, and
 * the "f16" path's verify steps; the control's verify steps run the same on F32 copies,
 * ds4j_attention_f16_operands_f32): the same key set, masks and sink, at F32 accuracy. Queries whose attended rows
 * (ds4j_attention_rows of that query alone) are at most short_rows run ds4j_attention's F32 kernel on the F16 rows
 * (equal to it bit for bit); the others, with impl DS4J_F16OPS_AUTO in an nvcc build and d in {64, 128, 256, 512}, run
 * on tensor cores (mma.sync m16n8k16 F16 x F16 -> F32): each query row is scaled by a power of two (largest |value|
 * into [2^14, 2^15)) and each probability by 2^14, both split into F16 hi + lo (22 significant bits), two products
 * accumulated in F32 and the scalings undone exactly, so the output equals plain F32 arithmetic within F32 rounding
 * noise (the GPU tests hold it within 1e-5 of the output's scale at lengths up to 1,048,576). Flash-decoding style: a
 * block takes 64 heads of one query and a range of its keys (tiles of 32 keys, read once per block); how a query's keys
 * are split into ranges depends on its own key count only, so each query's output is the same bit for bit whatever S is
 * (a decode step of one query and a verify step of several agree); the ranges' partials are combined with the sink in a
 * second kernel. Needs work memory of ds4j_attention_f16_operands_work bytes (may be 0; work may then be NULL). With
 * DS4J_F16OPS_WHOLE the tensor-core queries are not split into key ranges (one block per query and 64 heads, no work
 * memory): the prefill chunks' choice, where hundreds of queries already fill the device and a split's partials would
 * need gigabytes. Its numbers are those of one range, so they differ from AUTO's in rounding only. Otherwise (hipcc
 * builds, other d, or DS4J_F16OPS_PORTABLE) every query runs the F32 kernel, equal to ds4j_attention bit for bit. The
 * tensor-core kernel reads with 16-byte loads: q, kv_new, ring and entries must be 16-byte aligned.
 */
DS4J_API int32_t ds4j_attention_f16_operands(ds4j_ctx* ctx, const float* q, const float* kv_new, const uint16_t* ring,
                                             int32_t cap, const uint16_t* entries, int32_t kind, int32_t m,
                                             const int32_t* sel, int32_t K, const float* sinks, int64_t N0, int32_t S,
                                             int32_t H, int32_t d, int32_t W, float scale, int64_t short_rows,
                                             int32_t impl, void* work, int64_t work_bytes, float* out);

/**
 * ds4j_attention_f16_operands over F32 copies of the cache (ring [cap, d] and entries [*, d] F32, ds4j_f16_to_f32 of
 * the F16 rows): the same kernels, each copied row rounded back to F16 on its way to the tensor cores (exact), so on
 * converted rows the two give the same output bit for bit. The verify path "f32-convert" (the control) attends on its
 * copies through this, so that the two verify paths differ only in where the rows are read. Same work memory
 * (ds4j_attention_f16_operands_work) and errors.
 */
DS4J_API int32_t ds4j_attention_f16_operands_f32(ds4j_ctx* ctx, const float* q, const float* kv_new, const float* ring,
                                                 int32_t cap, const float* entries, int32_t kind, int32_t m,
                                                 const int32_t* sel, int32_t K, const float* sinks, int64_t N0,
                                                 int32_t S, int32_t H, int32_t d, int32_t W, float scale,
                                                 int64_t short_rows, int32_t impl, void* work, int64_t work_bytes,
                                                 float* out);

/** Bytes of work memory ds4j_attention_f16_operands needs for these arguments (0 when it needs none). */
DS4J_API int32_t ds4j_attention_f16_operands_work(ds4j_ctx* ctx, int32_t kind, int32_t m, int32_t K, int64_t N0,
                                                  int32_t S, int32_t H, int32_t d, int32_t W, int64_t short_rows,
                                                  int32_t impl, int64_t* host_bytes);

/**
 * Compressor pooling (spec 3.5) of every window completed by positions N0 .. N0+S-1: windows N0/m .. (N0+S)/m - 1.
 * Rows of positions >= N0 come from a_new/z_new [S, cw], older ones from ring_a/ring_z [cap, cw] (slot p % cap),
 * cw = overlap ? 2w : w. Each entry: per-channel softmax over the slots of z + position_bias [m, cw], pooled a,
 * RMSNorm(norm_w [w]), RoPE at position win*m (inv_freq [rope_dim/2]), stored F16 at entries[win*w ..].
 * w at most DS4J_COMPRESS_MAX_WIDTH (DS4J_ERR_ARG otherwise, also when no window completes; the same for the step and
 * sequence variants). The ring must hold the positions the windows read: cap >= (overlap ? 2m : m) - 1 (checked).
 */
#define DS4J_COMPRESS_MAX_WIDTH 1024
DS4J_API int32_t ds4j_compress_pool(ds4j_ctx* ctx, const float* ring_a, const float* ring_z, int32_t cap,
                                    const float* a_new, const float* z_new, int64_t N0, int32_t S, int32_t m, int32_t w,
                                    int32_t overlap, const float* position_bias, const float* norm_w, float eps,
                                    const float* inv_freq, int32_t rope_dim, uint16_t* entries);

/**
 * A compressor's step: ds4j_compress_pool, then the step's rows a_new and z_new into the F32 rings ring_a and ring_z
 * (ds4j_ring_store, ring_f16 = 0, width cw), in one launch when the slots the stores write cannot be any the pooling
 * reads (S + (overlap ? 2m-1 : m-1) <= cap), else in those three calls. Same results either way.
 */
DS4J_API int32_t ds4j_compress_step(ds4j_ctx* ctx, float* ring_a, float* ring_z, int32_t cap, const float* a_new,
                                    const float* z_new, int64_t N0, int32_t S, int32_t m, int32_t w, int32_t overlap,
                                    const float* position_bias, const float* norm_w, float eps, const float* inv_freq,
                                    int32_t rope_dim, uint16_t* entries);

/**
 * Lightning Indexer scores (spec 3.6 step 3) for the queries whose available set avail = (N0+s+1)/m exceeds K:
 * scores[s*ld + e] = sum_h (wt[s, h] * w_scale) * relu(qi[s, h] . keys[e]) * s_scale for e < avail.
 * qi [S, HI, dI] (RoPE applied), wt [S, HI], keys [*, dI] F16. Rows with avail <= K are left untouched.
 * Where ds4j_indexer_scores_tc runs on tensor cores (see there), this call does too, for every S, with the same
 * arithmetic per (query, key): a score does not depend on S, on the other queries or on which call computed it
 * (decode, verify, prefill, ds4j_indexer_scores_seqs, F32 keys). Elsewhere, or with the environment variable
 * DS4J_INDEXER_TC=0 (read at the first call; ds4j_indexer_scores_tc keeps its tensor cores), an F32 FFMA kernel runs,
 * one warp per key: again a function of the query and the key only, but rounded differently.
 */
DS4J_API int32_t ds4j_indexer_scores(ds4j_ctx* ctx, const float* qi, const float* wt, const uint16_t* keys,
                                     int64_t N0, int32_t S, int32_t m, int32_t HI, int32_t dI, int32_t K,
                                     float w_scale, float s_scale, float* scores, int64_t ld);

/**
 * ds4j_indexer_scores over F32 keys [*, dI] holding F16 values (the "f32-convert" verify path); the same result bit for
 * bit (on tensor cores when both key arrays are 16-byte aligned, each F32 key converted to F16 exactly).
 */
DS4J_API int32_t ds4j_indexer_scores_f32(ds4j_ctx* ctx, const float* qi, const float* wt, const float* keys,
                                         int64_t N0, int32_t S, int32_t m, int32_t HI, int32_t dI, int32_t K,
                                         float w_scale, float s_scale, float* scores, int64_t ld);

/**
 * ds4j_indexer_scores on tensor cores: the same arguments and contract. Each (query, head) row of qi is scaled by a
 * power of two that puts its largest |value| in [2^14, 2^15), split into F16 hi + lo (22 significant bits, no overflow
 * or early underflow) and multiplied with the F16 keys (exact) in F16 MMAs with F32 accumulation, then scaled back;
 * ReLU, weights and the sum over heads (16 heads at a time, then the groups in head order) follow in F32. Dot products
 * are within about 2^-21 relative of F32 ones. Steps of few queries (decode, verify) run a kernel whose blocks share
 * a key range across the queries, prefill chunks one that walks the keys per query group; both give the same bits.
 * Runs on an nvcc build, compute capability >= 8.0 (DS4J_TC not "0"), HI and dI multiples of 16 up to 128, qi and
 * keys 16-byte aligned; otherwise it is ds4j_indexer_scores on its FFMA kernel.
 */
DS4J_API int32_t ds4j_indexer_scores_tc(ds4j_ctx* ctx, const float* qi, const float* wt, const uint16_t* keys,
                                        int64_t N0, int32_t S, int32_t m, int32_t HI, int32_t dI, int32_t K,
                                        float w_scale, float s_scale, float* scores, int64_t ld);

/**
 * Top-K (spec 6.6 tie-break: larger score first, then lower index; NaN last) of scores[s*ld .. s*ld + avail) for
 * each row with avail = (N0+s+1)/m > K; sel[s*K .. s*K+K) gets the picks in ascending index order.
 * Steps of at most 64 rows whose longest row has at least 8,192 entries (decode and verify at long context) run on
 * many blocks per row (a radix select over 2,048-entry chunks, six launches), counting in the device memory the
 * context keeps for ds4j_attention; other calls, or all with the environment variable DS4J_TOPK_MULTI=0, run one
 * block per row. The picks are the same either way.
 */
DS4J_API int32_t ds4j_indexer_topk(ds4j_ctx* ctx, const float* scores, int64_t ld, int64_t N0, int32_t S, int32_t m,
                                   int32_t K, int32_t* sel);

/* ------------------------------------------------------------------------------------- several sequences in one step */

/**
 * One sequence of a batched step as the *_seqs functions see it, for one layer. Its new tokens are rows row0 ..
 * row0+S-1 of the step's row-major activations (every sequence's rows contiguous, in batch order), at positions N0 ..
 * N0+S-1. ring / ring2 / store / cap are the state the function works on (each function says which). The functions
 * take the array twice: in host memory (checked, and sized into the launch) and the same bytes in device memory (read
 * by the kernels). Each sequence's results equal those of the single-sequence function on its rows, bit for bit.
 */
typedef struct ds4j_seq_view {
    int64_t N0;
    int32_t S, row0;
    void* ring;
    void* ring2;
    void* store;
    int32_t cap, reserved;
} ds4j_seq_view;

/**
 * ds4j_rope with one position per row group: row s (of S rows of `heads` vectors) uses position pos[s], pos in
 * device memory [S]. Same arithmetic as ds4j_rope.
 */
DS4J_API int32_t ds4j_rope_at(ds4j_ctx* ctx, float* x, int32_t S, int32_t heads, int32_t width, int32_t rope_dim,
                              const float* inv_freq, const int64_t* pos, int32_t inverse);

/**
 * ds4j_rmsnorm_rope with positions from memory: row r is rotated at position pos[r / rows_per_pos] (pos in device
 * memory). Same arithmetic as ds4j_rmsnorm_rope.
 */
DS4J_API int32_t ds4j_rmsnorm_rope_at(ds4j_ctx* ctx, float* x, const float* weight, int32_t rows, int32_t n, float eps,
                                      int32_t rope_dim, const float* inv_freq, const int64_t* pos,
                                      int32_t rows_per_pos, int32_t round_f16);

/**
 * The query and shared-kv norms of S rows in one launch (spec 3.4 steps 2-3): q [S, H, d] each head RMSNorm_1 and RoPE,
 * kv [S, d] RMSNorm with kv_w, RoPE and rounded through binary16; row s at position pos[s] (device memory) when pos
 * is not NULL, else pos0 + s. Same results as ds4j_rmsnorm_rope(q, NULL, S*H, d, .., H, 0) and
 * ds4j_rmsnorm_rope(kv, kv_w, S, d, .., 1, 1) (or their _at forms).
 */
DS4J_API int32_t ds4j_qkv_norm_rope(ds4j_ctx* ctx, float* q, float* kv, const float* kv_w, int32_t S, int32_t H,
                                    int32_t d, float eps, int32_t rope_dim, const float* inv_freq, int64_t pos0,
                                    const int64_t* pos);

/**
 * ds4j_ring_store for n sequences: the rows [R, width] of each sequence go to its ring (which = 0: view.ring,
 * 1: view.ring2) of view.cap rows.
 */
DS4J_API int32_t ds4j_ring_store_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views,
                                      int32_t n, int32_t which, int32_t ring_f16, int32_t width, const float* rows);

/**
 * ds4j_attention for n sequences of one layer (view.ring = the F16 window ring of view.cap rows, view.store = the F16
 * compressed entries): q [R, H, d], kv_new [R, d], sel [R, K] (rows of sequences that need no selection unused),
 * out [R, H, d].
 */
DS4J_API int32_t ds4j_attention_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views,
                                     int32_t n, const float* q, const float* kv_new, int32_t kind, int32_t m,
                                     const int32_t* sel, int32_t K, const float* sinks, int32_t H, int32_t d,
                                     int32_t W, float scale, float* out);

/**
 * ds4j_attention_f16_operands (DS4J_F16OPS_AUTO) for n sequences of one layer, views and rows as ds4j_attention_seqs:
 * each query of at most short_rows attended rows through ds4j_attention_seqs's F32 kernel, each of more on tensor
 * cores, with the key ranges ds4j_attention_f16_operands gives it (a function of its own key count and of the device),
 * so every sequence's output equals, bit for bit, what ds4j_attention_f16_operands gives for it alone: the attention of
 * a step of several decode entries, and of verify entries on the "f16" path. One launch per kernel (more where the
 * key-range partials would pass 64 MB); under ds4j_seqs_bounds the launch shapes follow the bounds, not the positions.
 * Builds and devices without the tensor-core kernel run every query on the F32 kernel, as ds4j_attention_f16_operands
 * does. Errors: those of ds4j_attention_seqs, and a negative short_rows.
 */
DS4J_API int32_t ds4j_attention_f16_operands_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views,
                                                  const ds4j_seq_view* views, int32_t n, const float* q,
                                                  const float* kv_new, int32_t kind, int32_t m, const int32_t* sel,
                                                  int32_t K, const float* sinks, int32_t H, int32_t d, int32_t W,
                                                  float scale, int64_t short_rows, float* out);

/**
 * ds4j_attention_f16_operands_seqs over F32 copies of the cache (view.ring and view.store F32, e.g. views32 of
 * ds4j_f16_to_f32_seqs), as ds4j_attention_f16_operands_f32 is to ds4j_attention_f16_operands: the same output bit for
 * bit as ds4j_attention_f16_operands_seqs on the F16 rows the copies were made from.
 */
DS4J_API int32_t ds4j_attention_f16_operands_f32_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views,
                                                      const ds4j_seq_view* views, int32_t n, const float* q,
                                                      const float* kv_new, int32_t kind, int32_t m, const int32_t* sel,
                                                      int32_t K, const float* sinks, int32_t H, int32_t d, int32_t W,
                                                      float scale, int64_t short_rows, float* out);

/**
 * The control's conversion (ds4j_f16_to_f32) for n sequences of one layer, lengths and addresses read from the device
 * views: view i's F32 copy starts at dst + i * (ring_rows + max_entries) * width floats and holds, when ring_rows > 0,
 * its window ring (view.cap rows of the F16 view.ring, at most ring_rows; the copy keeps ring_rows rows of room), then,
 * when m > 0, its (N0 + S) / m compressed entries or indexer keys (F16 view.store, at most max_entries). views32[i]
 * (device memory, n elements) becomes views[i] with ring (when ring_rows > 0) and store (when m > 0) replaced by the
 * copies' addresses. width a multiple of 8; dst, the rings and the stores 16-byte aligned. The host views are checked
 * against the bounds (DS4J_ERR_ARG naming the view); the launch shape depends on n and the bounds only.
 */
DS4J_API int32_t ds4j_f16_to_f32_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views,
                                      int32_t n, int32_t ring_rows, int32_t m, int64_t max_entries, int32_t width,
                                      float* dst, ds4j_seq_view* views32);

/**
 * ds4j_compress_pool for n sequences (view.ring = ring_a, view.ring2 = ring_z, both F32 of view.cap rows;
 * view.store = the F16 entries): a_new, z_new [R, cw].
 */
DS4J_API int32_t ds4j_compress_pool_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views,
                                         int32_t n, const float* a_new, const float* z_new, int32_t m, int32_t w,
                                         int32_t overlap, const float* position_bias, const float* norm_w, float eps,
                                         const float* inv_freq, int32_t rope_dim);

/**
 * ds4j_compress_step for n sequences: ds4j_compress_pool_seqs and ds4j_ring_store_seqs of a_new (which 0) and z_new
 * (which 1, both F32, width cw) in one launch when no view's stores can reach a slot its pooling reads, else in those
 * three calls. Same results either way; under ds4j_seqs_bounds the window blocks are those of ds4j_compress_pool_seqs.
 */
DS4J_API int32_t ds4j_compress_step_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views,
                                         int32_t n, const float* a_new, const float* z_new, int32_t m, int32_t w,
                                         int32_t overlap, const float* position_bias, const float* norm_w, float eps,
                                         const float* inv_freq, int32_t rope_dim);

/**
 * ds4j_indexer_scores for n sequences (view.store = the F16 indexer keys; 16-byte aligned for the tensor cores):
 * qi [R, HI, dI], wt [R, HI], scores [R, ld] with ld at least the largest (N0+S)/m.
 */
DS4J_API int32_t ds4j_indexer_scores_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views,
                                          int32_t n, const float* qi, const float* wt, int32_t m, int32_t HI,
                                          int32_t dI, int32_t K, float w_scale, float s_scale, float* scores,
                                          int64_t ld);

/**
 * ds4j_indexer_scores_seqs over F32 keys (view.store = F32 indexer keys, 16-byte aligned, e.g. views32 of
 * ds4j_f16_to_f32_seqs; host_views the same views in host memory): the control path's scores, as
 * ds4j_indexer_scores_f32 per sequence.
 */
DS4J_API int32_t ds4j_indexer_scores_f32_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views,
                                              int32_t n, const float* qi, const float* wt, int32_t m, int32_t HI,
                                              int32_t dI, int32_t K, float w_scale, float s_scale, float* scores,
                                              int64_t ld);

/**
 * ds4j_indexer_topk for n sequences: scores [R, ld], sel [R, K]. Under ds4j_seqs_bounds the choice between one and
 * many blocks per row takes ld for the longest row.
 */
DS4J_API int32_t ds4j_indexer_topk_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views,
                                        int32_t n, const float* scores, int64_t ld, int32_t m, int32_t K, int32_t* sel);

/* ------------------------------------------------------------------------------------------------ MoE (spec 3.8) */

/**
 * Routing: s = sqrtsoftplus(lam[s, :E]); ids [S, k] = tid2eid[tokens[s]] (hash layers, tid2eid [V, k]) or the top-k
 * of s + bias (ascending ids); weights [S, k] = s[id] / (sum + 1e-20) * scaling. Exactly one of bias / tid2eid is set.
 */
DS4J_API int32_t ds4j_moe_route(ds4j_ctx* ctx, const float* lam, const float* bias, const int32_t* tid2eid,
                                const int32_t* tokens, int32_t S, int32_t E, int32_t k, float scaling,
                                int32_t* ids, float* weights);

/**
 * The router in one launch: lam [S, E] = x [S, D] (row s at x + s*ldx) times the gate W [E, D] transposed (W stored
 * F32, F16 or BF16, rows of D values), then ds4j_moe_route's picks and weights from lam (ids [S, k], weights [S, k]).
 * Each score is one F32 sum whose order depends on D and the format only (a warp per expert, fmaf in column order per
 * lane, then the lanes' sums), so a row's scores and picks are the same at any S; they round differently from
 * ds4j_matmul's. Shapes ds4j_moe_gate_route_fits declines fail with DS4J_ERR_ARG; x and w 16-byte aligned, ldx a
 * multiple of 4. With more experts than a block takes (16; DS4J_GATE_ROUTE_EPB for measurements) a row takes several
 * blocks, the last to finish ranking (the context's arrival counters; DS4J_ERR_OOM when they could not be allocated).
 */
DS4J_API int32_t ds4j_moe_gate_route(ds4j_ctx* ctx, int32_t format, const void* w, int32_t E, int32_t D, const float* x,
                                     int64_t ldx, const float* bias, const int32_t* tid2eid, const int32_t* tokens,
                                     int32_t S, int32_t k, float scaling, float* lam, int32_t* ids, float* weights);

/**
 * *host_fits = 1 when ds4j_moe_gate_route takes a gate of this format (F32, F16 or BF16), E experts (1 .. 4,096) and D
 * columns (a multiple of 8, with D + 2E floats within a block's 48 KiB of shared memory less 256 bytes) on this context
 * (more experts than a block takes: its arrival counters were allocated), else 0.
 */
DS4J_API int32_t ds4j_moe_gate_route_fits(ds4j_ctx* ctx, int32_t format, int32_t E, int32_t D, int32_t* host_fits);

/** out[i] = silu(min(g[i], limit)) * clamp(u[i], -limit, limit) for i < n (spec 3.0); out may alias g or u. */
DS4J_API int32_t ds4j_swiglu(ds4j_ctx* ctx, const float* g, const float* u, float* out, int64_t n, float limit);

/**
 * ds4j_swiglu of g and u each given as planes of partial sums: g = g_planes[0] + g_planes[1] + ... added in plane order
 * (plane p at g + p * g_stride floats), u likewise; out[i] for i < n. The planes a column-split product left unsummed
 * (ds4j_parts_end) give the bits of ds4j_swiglu on that product's summed result; one plane (stride unused) is a plain
 * array. out may alias plane 0 of g or u.
 */
DS4J_API int32_t ds4j_swiglu_parts(ds4j_ctx* ctx, const float* g, int32_t g_planes, int64_t g_stride, const float* u,
                                   int32_t u_planes, int64_t u_stride, float* out, int64_t n, float limit);

/**
 * Partial sums left to their reader: after ds4j_parts_begin, the next product launched on the context's current lane
 * (ds4j_branch_begin) that splits its columns on the skinny path and whose output rows are contiguous (ldy = rows)
 * leaves its column partitions' partial sums in the lane's scratch instead of adding them into y, and
 * ds4j_parts_end gives where: *host_at, *host_planes planes *host_stride floats apart (plane p: partition p's sums, in
 * y's layout); *host_planes = 0 when no product did (y holds the result). The planes stay valid until the lane's next
 * column-split product. For a reader that adds them in plane order (ds4j_swiglu_parts): the same bits as the sums.
 * Routed-expert products (ds4j_moe_matmul) leave every pick's rows, so a caller arms them only where every expert is
 * in device memory.
 */
DS4J_API int32_t ds4j_parts_begin(ds4j_ctx* ctx);
DS4J_API int32_t ds4j_parts_end(ds4j_ctx* ctx, const float** host_at, int32_t* host_planes, int64_t* host_stride);

/**
 * out[s] = sum over the k picks of s in ascending expert id of weights[s, j] * y_routed[s*k + j] + shared[s]
 * (rows of width D).
 */
DS4J_API int32_t ds4j_moe_combine(ds4j_ctx* ctx, const int32_t* ids, const float* weights, const float* y_routed,
                                  const float* shared, int32_t S, int32_t k, int32_t D, float* out);

/**
 * The greedy token of each of `rows` logits rows (row r at x + r*ld floats): out[r] = the index in [0, n) of the row's
 * largest value, the lowest index on ties; a NaN never wins, except that a NaN at index 0 makes the answer 0. This is
 * what a sequential scan gives that starts at index 0 and moves only to a strictly larger value
 * (io.ds4j.sampling.Sampler.argmax), so a greedy row's 129,280 logits need not cross to the host (4 bytes instead).
 * The result does not depend on the launch shape. n in [1, ld]; out in device memory [rows].
 */
DS4J_API int32_t ds4j_argmax_rows(ds4j_ctx* ctx, const float* x, int64_t ld, int32_t rows, int32_t n, int32_t* out);

/**
 * ds4j_argmax_rows among allowed ids: row r's id i counts as -inf unless bit (i & 63) of masks[r * mask_ld + (i >> 6)]
 * is set (a constraint's allowed set, io.ds4j.sampling.Constraint.allowed), then as ds4j_argmax_rows, so the answer is
 * the greedy token io.ds4j.sampling.Sampler.distribution gives under that mask: a constrained greedy row needs only
 * its mask uploaded (V / 8 bytes) instead of its logits downloaded (4 V bytes). masks in device memory [rows][mask_ld],
 * mask_ld >= (n + 63) / 64; null masks: ds4j_argmax_rows.
 */
DS4J_API int32_t ds4j_argmax_rows_masked(ds4j_ctx* ctx, const float* x, int64_t ld, int32_t rows, int32_t n,
                                         const uint64_t* masks, int64_t mask_ld, int32_t* out);

/* ------------------------------------------------------------------------------------------------ kernel selection */

/**
 * Selects the split forms of the mHC, RMSNorm and routing kernels (on != 0: a row's work spread over many blocks; the
 * default unless the environment variable DS4J_HC_SPLIT is "0") or the one-block-per-row forms, for the whole process.
 * Both give the same bits. Returns the previous selection (1 or 0). For A/B measurements and tests.
 */
DS4J_API int32_t ds4j_set_hc_split(int32_t on);

#ifdef __cplusplus
}
#endif

#endif /* DS4J_GPU_H */
