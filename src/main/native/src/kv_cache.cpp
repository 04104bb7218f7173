// The MLA cache's rows: ring stores of a step's rows into a layer's window ring (ds4j_ring_store, F16 or F32 rings;
// ds4j_ring_store_seqs for several sequences), and the F16 -> F32 conversions that give the control its F32 copies of
// the cache (ds4j_f16_to_f32, ds4j_f16_to_f32_seqs; exact).
#include "ops.h"

namespace ds4j {

__device__ __forceinline__ void ring_store_body(void* ring, int f16, int cap, int width, const float* rows, int64_t N0,
                                                int S, int64_t p0) {
    const int64_t count = N0 + S - p0;
    const int64_t total = count * width;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t p = p0 + i / width;
        const int c = (int)(i % width);
        const float v = rows[(p - N0) * width + c];
        const int64_t dst = (p % cap) * width + c;
        if (f16) ((uint16_t*)ring)[dst] = f32_to_f16(v);
        else ((float*)ring)[dst] = v;
    }
}

__global__ void ring_store_kernel(void* ring, int f16, int cap, int width, const float* rows, int64_t N0, int S,
                                  int64_t p0) {
    DS4J_AWAIT_PREVIOUS();
    ring_store_body(ring, f16, cap, width, rows, N0, S, p0);
}

/** One ring store per sequence (blockIdx.y): ring or ring2 of each view. */
__global__ void ring_store_seqs_kernel(const ds4j_seq_view* views, int which, int f16, int width, const float* rows) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.y];
    ring_store_body(which ? v.ring2 : v.ring, f16, v.cap, width, rows + (int64_t)v.row0 * width, v.N0, v.S,
                    ring_first(v.N0, v.S, v.cap));
}

/** F16 bit patterns to F32, 8 per thread where the pointers allow 16-byte accesses. */
__global__ void f16_to_f32_kernel(const uint16_t* src, float* dst, int64_t n, int vec) {
    DS4J_AWAIT_PREVIOUS();
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (vec) {
        const int64_t n8 = n / 8;
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n8; i += stride) {
            const uint4 v = reinterpret_cast<const uint4*>(src)[i];
            const uint32_t w[4] = {v.x, v.y, v.z, v.w};
            float o[8];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                o[2 * j] = f16_to_f32((uint16_t)(w[j] & 0xFFFFu));
                o[2 * j + 1] = f16_to_f32((uint16_t)(w[j] >> 16));
            }
            reinterpret_cast<float4*>(dst)[2 * i] = make_float4(o[0], o[1], o[2], o[3]);
            reinterpret_cast<float4*>(dst)[2 * i + 1] = make_float4(o[4], o[5], o[6], o[7]);
        }
        for (int64_t i = n8 * 8 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = f16_to_f32(src[i]);
    } else {
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) dst[i] = f16_to_f32(src[i]);
    }
}

/**
 * ds4j_f16_to_f32_seqs: grid (chunks of 8 values over one view's copy, views). View i's copy starts at dst + i *
 * stride: ring_rows rows for its window ring (the first view.cap of them written), then its (N0+S)/m compressed
 * entries (at most max_entries); rows of `width` values. Block (0, i) writes views32[i]: views[i] with ring and store
 * pointing at the copies. Lengths and addresses come from the device views, so a captured launch serves every step
 * whose views fit the bounds.
 */
__global__ void f16_to_f32_seqs_kernel(const ds4j_seq_view* views, int ring_rows, int m, int64_t max_entries, int width,
                                       float* dst, ds4j_seq_view* views32) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.y];
    const int64_t stride = ((int64_t)ring_rows + max_entries) * width;
    float* copy = dst + (int64_t)blockIdx.y * stride;
    float* ring32 = copy;
    float* entries32 = copy + (int64_t)ring_rows * width;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        ds4j_seq_view o = v;
        if (ring_rows > 0) o.ring = ring32;
        if (m > 0) o.store = entries32;
        views32[blockIdx.y] = o;
    }
    const int64_t ring_n = ring_rows > 0 ? (int64_t)(v.cap < ring_rows ? v.cap : ring_rows) * width : 0;
    int64_t count = m > 0 ? (v.N0 + v.S) / m : 0;
    if (count > max_entries) count = max_entries;
    const int64_t ent_n = count * width;
    const int64_t chunks = stride / 8;
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < chunks; c += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i = c * 8;  // width is a multiple of 8, so a chunk never straddles the ring and the entries
        const uint16_t* src;
        float* out;
        if (i < (int64_t)ring_rows * width) {
            if (i >= ring_n) continue;
            src = (const uint16_t*)v.ring + i;
            out = ring32 + i;
        } else {
            const int64_t j = i - (int64_t)ring_rows * width;
            if (j >= ent_n) continue;
            src = (const uint16_t*)v.store + j;
            out = entries32 + j;
        }
        const uint4 h = *reinterpret_cast<const uint4*>(src);
        const uint32_t w[4] = {h.x, h.y, h.z, h.w};
        float o[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            o[2 * k] = f16_to_f32((uint16_t)(w[k] & 0xFFFFu));
            o[2 * k + 1] = f16_to_f32((uint16_t)(w[k] >> 16));
        }
        reinterpret_cast<float4*>(out)[0] = make_float4(o[0], o[1], o[2], o[3]);
        reinterpret_cast<float4*>(out)[1] = make_float4(o[4], o[5], o[6], o[7]);
    }
}

}  // namespace ds4j

using namespace ds4j;

extern "C" {

int32_t ds4j_ring_store(ds4j_ctx* ctx, void* ring, int32_t ring_f16, int32_t cap, int32_t width, const float* rows,
                        int64_t N0, int32_t S) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(ring && rows && cap > 0 && width > 0 && S >= 0 && N0 >= 0, "ds4j_ring_store: bad arguments");
    if (S == 0) return DS4J_OK;
    const int64_t p0 = ring_first(N0, S, cap);
    ring_store_kernel<<<grid_for((N0 + S - p0) * width), 256, 0, ctx->stream>>>(ring, ring_f16, cap, width, rows, N0, S, p0);
    DS4J_LAUNCHED("ring_store");
    return DS4J_OK;
}

int32_t ds4j_f16_to_f32(ds4j_ctx* ctx, const uint16_t* src, float* dst, int64_t n) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(n >= 0 && (n == 0 || (src && dst)), "ds4j_f16_to_f32: bad arguments (n %lld)", (long long)n);
    if (n == 0) return DS4J_OK;
    const int vec = ((uintptr_t)src % 16 == 0 && (uintptr_t)dst % 16 == 0) ? 1 : 0;
    f16_to_f32_kernel<<<grid_for(vec ? (n + 7) / 8 : n), 256, 0, ctx->stream>>>(src, dst, n, vec);
    DS4J_LAUNCHED("f16_to_f32");
    return DS4J_OK;
}

int32_t ds4j_ring_store_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views, int32_t n,
                             int32_t which, int32_t ring_f16, int32_t width, const float* rows) {
    DS4J_CHECK_CTX(ctx);
    int32_t max_s = 0;
    const int32_t vrc = check_views("ds4j_ring_store_seqs", host_views, views, n, &max_s);
    if (vrc != DS4J_OK) return vrc;
    DS4J_ARG(rows && width > 0 && (which == 0 || which == 1), "ds4j_ring_store_seqs: bad arguments");
    int64_t most = 0;
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        DS4J_ARG((which ? v.ring2 : v.ring) && v.cap > 0, "ds4j_ring_store_seqs: view %d has no ring", i);
        const int64_t c = v.N0 + v.S - ring_first(v.N0, v.S, v.cap);
        if (c > most) most = c;
    }
    dim3 grid(grid_for(most * width), (unsigned)n);
    ring_store_seqs_kernel<<<grid, 256, 0, ctx->stream>>>(views, which, ring_f16, width, rows);
    DS4J_LAUNCHED("ring_store_seqs");
    return DS4J_OK;
}

int32_t ds4j_f16_to_f32_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views, int32_t n,
                             int32_t ring_rows, int32_t m, int64_t max_entries, int32_t width, float* dst,
                             ds4j_seq_view* views32) {
    DS4J_CHECK_CTX(ctx);
    const char* fn = "ds4j_f16_to_f32_seqs";
    int32_t max_s = 0;
    const int32_t vrc = check_views(fn, host_views, views, n, &max_s);
    if (vrc != DS4J_OK) return vrc;
    DS4J_ARG(dst && views32 && width > 0 && width % 8 == 0 && ring_rows >= 0 && m >= 0 && max_entries >= 0 &&
                 (ring_rows > 0 || m > 0) && ((uintptr_t)dst & 15u) == 0,
             "%s: bad arguments (ring_rows %d, m %d, max_entries %lld, width %d)", fn, ring_rows, m,
             (long long)max_entries, width);
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        DS4J_ARG(ring_rows == 0 || (v.ring && ((uintptr_t)v.ring & 15u) == 0 && v.cap <= ring_rows),
                 "%s: view %d: ring of %d rows, bound %d (16-byte aligned rings)", fn, i, v.cap, ring_rows);
        const int64_t count = m > 0 ? (v.N0 + v.S) / m : 0;
        DS4J_ARG(count <= max_entries && (count == 0 || (v.store && ((uintptr_t)v.store & 15u) == 0)),
                 "%s: view %d: %lld entries, bound %lld (16-byte aligned stores)", fn, i, (long long)count,
                 (long long)max_entries);
    }
    const int64_t chunks = ((int64_t)ring_rows + max_entries) * width / 8;
    f16_to_f32_seqs_kernel<<<dim3(grid_for(chunks), (unsigned)n), 256, 0, ctx->stream>>>(views, ring_rows, m, max_entries,
                                                                                         width, dst, views32);
    DS4J_LAUNCHED("f16_to_f32_seqs");
    return DS4J_OK;
}

}  // extern "C"
