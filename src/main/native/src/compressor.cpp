// The compressor of the compressed-attention layers (spec 3.5): pooling of every window a step completes into a
// compressed entry (per channel a softmax over the window's rows, then RMSNorm, RoPE and the F16 store;
// ds4j_compress_pool, in channel slices over many blocks when a launch has few windows), the pooling and the
// compressor's two ring stores in one launch (ds4j_compress_step), and both for several sequences
// (ds4j_compress_pool_seqs, ds4j_compress_step_seqs).
#include "ops.h"

namespace ds4j {

/**
 * The compressor rows (values a or logits z) of the positions base + r, r < n (n <= cap + 1 where any comes from the
 * ring): this step's rows from N0 on, the ring's before. The ring slot of base is found once (a 64-bit remainder per
 * row read cost more than the pooling's arithmetic), then stepped.
 */
struct CompRows {
    int64_t base, N0;
    int64_t s0;  // ring slot of base (0 without a ring)
    int cap, cw;
    __device__ __forceinline__ CompRows(int64_t base_, int64_t N0_, int cap_, int cw_)
        : base(base_), N0(N0_), s0(cap_ > 0 && base_ < N0_ ? base_ % cap_ : 0), cap(cap_), cw(cw_) {}
    /** Row of position base + r in ring or fresh. */
    __device__ __forceinline__ const float* row(const float* ring, const float* fresh, int r) const {
        const int64_t p = base + r;
        if (p >= N0) return fresh + (p - N0) * cw;
        int64_t s = s0 + r;
        if (s >= cap) s -= cap;
        return ring + s * cw;
    }
};

/** Threads per block of the pooling launches. */
constexpr int POOL_THREADS = 512;
/** Channel pattern of the norm's sum of squares: that of a 256-thread block, whatever the block size (the same bits). */
constexpr int POOL_NORM_THREADS = 256;
/**
 * Floats of dynamic shared memory a pooling block may take: 44 KiB, which with its static 256 bytes stays under the
 * 48 KiB a launch gets without opting in.
 */
constexpr int POOL_SMEM_FLOATS = 11264;
/**
 * Widest compressor row the pooling takes (ds4j_gpu.h): a chosen bound, twice the model's 512; 4 w floats and one chunk
 * of one row (2 w) would fit POOL_SMEM_FLOATS up to 1,877.
 */
constexpr int POOL_MAX_W = DS4J_COMPRESS_MAX_WIDTH;
static_assert(6 * POOL_MAX_W <= POOL_SMEM_FLOATS, "a pooling block's shared memory at the widest row");

/** Window rows whose exponentials the pooling holds in shared memory at once for width w (1 .. 16). */
__host__ __device__ __forceinline__ int pool_rows_per_chunk(int w) {
    const int j = (POOL_SMEM_FLOATS / w - 4) / 2;
    return j < 1 ? 1 : j > 16 ? 16 : j;
}

/** Dynamic shared memory of a pooling block for width w (w <= POOL_MAX_W): 4 w floats and two chunks of rows. */
static size_t pool_smem(int w) { return (size_t)(4 + 2 * pool_rows_per_chunk(w)) * w * sizeof(float); }

/**
 * The pooled channels c0 .. c0 + wc - 1 of one compressed entry (window b of the step) into out[0 .. wc): per channel
 * the softmax over the window's rows (with overlap the previous window's rows first, then this window's) of logits z +
 * position bias, weighting the values a (pool_finish then takes RMSNorm, RoPE and the F16 store). sm: shared memory of
 * (3 + 2 J) wc floats, J = pool_rows_per_chunk(wc). The channel's maximum is taken over all rows in any order (the
 * same number); the exponentials and their products with a are computed a chunk of rows at a time by all threads and
 * summed per channel in row order: the order of the CPU reference (CpuBackend#compress) and the bits of the earlier
 * kernel, one thread per channel walking the window (~140 us per compressor call on average in a 65-row prefill chunk,
 * BENCHMARKS.md, fourteenth session); now the block's threads share the exponentials. A channel's arithmetic does not
 * depend on which other channels its block pools (c0, wc), so blocks over slices of the channels give the same bits.
 */
__device__ __forceinline__ void pool_channels(const float* ring_a, const float* ring_z, int cap, const float* a_new,
                                              const float* z_new, int64_t N0, int m, int w, int overlap, const float* pb,
                                              int b, int c0, int wc, float* sm, float* out) {
    const int J = pool_rows_per_chunk(wc);
    float *mxs = sm, *sums = mxs + wc, *accs = sums + wc, *ev = accs + wc, *eav = ev + J * wc;
    const int64_t win = N0 / m + b;
    const int cw = overlap ? 2 * w : w;
    const int64_t prev = (win - 1) * m, cur = win * m;
    const bool has_prev = overlap && win > 0;
    const int voff = overlap ? w : 0;
    // row r of the R pooled rows is position base + r: the previous window's row r (channels from 0), then this
    // window's row r - mp (channels from voff)
    const CompRows rows(has_prev ? prev : cur, N0, cap, cw);
    const int mp = has_prev ? m : 0, R = mp + m;
    const int tid = threadIdx.x, bd = blockDim.x;
    // the maxima: G row groups per channel (their partial maxima in ev, which holds J wc floats), then the groups'
    // maxima together
    const int G = bd >= wc ? min(bd / wc, J) : 1;
    for (int i = tid; i < G * wc; i += bd) {
        const int g = i / wc, ch = c0 + i - g * wc;
        float mx = -INFINITY;
        for (int r = g; r < R; r += G) {
            const int j = r < mp ? r : r - mp, o = r < mp ? ch : voff + ch;
            mx = fmaxf(mx, add(rows.row(ring_z, z_new, r)[o], pb[j * cw + o]));
        }
        ev[i] = mx;
    }
    __syncthreads();
    for (int c = tid; c < wc; c += bd) {
        float mx = ev[c];
        for (int g = 1; g < G; g++) mx = fmaxf(mx, ev[g * wc + c]);
        mxs[c] = mx;
        sums[c] = 0.f;
        accs[c] = 0.f;
    }
    __syncthreads();
    for (int r0 = 0; r0 < R; r0 += J) {
        const int n = R - r0 < J ? R - r0 : J;
        for (int i = tid; i < n * wc; i += bd) {
            const int rr = i / wc, c = i - rr * wc, ch = c0 + c, r = r0 + rr;
            const int j = r < mp ? r : r - mp, o = r < mp ? ch : voff + ch;
            const float e = exp_d(sub(add(rows.row(ring_z, z_new, r)[o], pb[j * cw + o]), mxs[c]));
            ev[i] = e;
            eav[i] = mul(e, rows.row(ring_a, a_new, r)[o]);
        }
        __syncthreads();
        for (int c = tid; c < wc; c += bd) {
            float sum = sums[c], acc = accs[c];
            for (int rr = 0; rr < n; rr++) {
                sum = add(sum, ev[rr * wc + c]);
                acc = add(acc, eav[rr * wc + c]);
            }
            sums[c] = sum;
            accs[c] = acc;
        }
        __syncthreads();
    }
    for (int c = tid; c < wc; c += bd) out[c] = accs[c] / sums[c];
}

/**
 * The rest of window b's entry from its pooled channels (pooled: w floats of shared memory, complete): RMSNorm with
 * norm_w, RoPE of the last rope_dim channels at the window's position, the F16 store.
 */
__device__ __forceinline__ void pool_finish(float* pooled, int64_t N0, int m, int w, const float* norm_w, float eps,
                                            const float* inv_freq, int rope_dim, uint16_t* entries, int b) {
    __shared__ double red[32];
    const int64_t win = N0 / m + b;
    const int tid = threadIdx.x;
    double ss = 0;
    if (tid < POOL_NORM_THREADS)
        for (int ch = tid; ch < w; ch += POOL_NORM_THREADS) ss += (double)mul(pooled[ch], pooled[ch]);
    ss = block_sum(ss, red);  // warps past the pattern's add zeros, after its warps' sums: the same value
    const float inv = (float)(1.0 / sqrt((double)add((float)(ss / w), eps)));
    for (int ch = threadIdx.x; ch < w; ch += blockDim.x) pooled[ch] = mul(norm_w[ch], mul(pooled[ch], inv));
    __syncthreads();
    const int half = rope_dim / 2;
    const float ft = (float)(win * m);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const double phi = (double)mul(inv_freq[i], ft);
        const float c = (float)cos(phi), sn = (float)sin(phi);
        float* base = pooled + (w - rope_dim);
        const float a = base[2 * i], b = base[2 * i + 1];
        base[2 * i] = sub(mul(a, c), mul(b, sn));
        base[2 * i + 1] = add(mul(b, c), mul(a, sn));
    }
    __syncthreads();
    for (int ch = threadIdx.x; ch < w; ch += blockDim.x) entries[win * w + ch] = f32_to_f16(pooled[ch]);
}

/** compress_pool_body's window b by one block: pool_channels over every channel, then pool_finish. */
__device__ __forceinline__ void compress_pool_body(const float* ring_a, const float* ring_z, int cap, const float* a_new,
                                                   const float* z_new, int64_t N0, int m, int w, int overlap,
                                                   const float* pb, const float* norm_w, float eps,
                                                   const float* inv_freq, int rope_dim, uint16_t* entries, int b) {
    extern __shared__ float pool_sm[];  // pooled [w], then pool_channels' max, sum, acc [w] and e, e a [J][w]
    pool_channels(ring_a, ring_z, cap, a_new, z_new, N0, m, w, overlap, pb, b, 0, w, pool_sm + w, pool_sm);
    __syncthreads();
    pool_finish(pool_sm, N0, m, w, norm_w, eps, inv_freq, rope_dim, entries, b);
}

__global__ void __launch_bounds__(POOL_THREADS) compress_pool_kernel(const float* ring_a, const float* ring_z, int cap, const float* a_new,
                                     const float* z_new, int64_t N0, int m, int w, int overlap, const float* pb,
                                     const float* norm_w, float eps, const float* inv_freq, int rope_dim,
                                     uint16_t* entries) {
    DS4J_AWAIT_PREVIOUS();
    compress_pool_body(ring_a, ring_z, cap, a_new, z_new, N0, m, w, overlap, pb, norm_w, eps, inv_freq, rope_dim,
                       entries, blockIdx.x);
}

// A prefill chunk completes few windows of a long compressor (4 of 128 rows at 512 tokens), and one block per window
// then pools 128 rows x 512 channels alone: ~175 us a call (BENCHMARKS.md, twenty-ninth session). With few windows the
// channels are pooled in slices of POOL_SLICE, one block each, into F32 scratch, and one block per window finishes the
// entry from there (pool_finish): the same operations per channel and per entry, so the same bits.
constexpr int POOL_SLICE = 32;     // channels per block of compress_pool_part_kernel
constexpr int POOL_FEW_WINDOWS = 16;  // at most this many windows in a launch take the sliced pooling

/** Block (b, y): window b's channels [y POOL_SLICE, + POOL_SLICE) into part[b w ..]. */
__global__ void __launch_bounds__(POOL_THREADS) compress_pool_part_kernel(const float* ring_a, const float* ring_z, int cap,
                                                                          const float* a_new, const float* z_new, int64_t N0,
                                                                          int m, int w, int overlap, const float* pb,
                                                                          float* part) {
    DS4J_AWAIT_PREVIOUS();
    extern __shared__ float pool_sm[];
    const int b = blockIdx.x, c0 = blockIdx.y * POOL_SLICE;
    pool_channels(ring_a, ring_z, cap, a_new, z_new, N0, m, w, overlap, pb, b, c0, POOL_SLICE, pool_sm,
                  part + (int64_t)b * w + c0);
}

/** Block b: window b's entry from its pooled channels in part (compress_pool_part_kernel). */
__global__ void __launch_bounds__(POOL_THREADS) compress_pool_finish_kernel(const float* part, int64_t N0, int m, int w,
                                                                            const float* norm_w, float eps,
                                                                            const float* inv_freq, int rope_dim,
                                                                            uint16_t* entries) {
    DS4J_AWAIT_PREVIOUS();
    extern __shared__ float pool_sm[];
    const int b = blockIdx.x;
    for (int ch = threadIdx.x; ch < w; ch += blockDim.x) pool_sm[ch] = part[(int64_t)b * w + ch];
    __syncthreads();
    pool_finish(pool_sm, N0, m, w, norm_w, eps, inv_freq, rope_dim, entries, b);
}

/** Windows completed by a step of S positions after N0. */
__host__ __device__ __forceinline__ int64_t windows_done(int64_t N0, int S, int m) { return (N0 + S) / m - N0 / m; }

/** compress_pool_kernel over several sequences: blockIdx.y picks the sequence, blockIdx.x its window. */
__global__ void __launch_bounds__(POOL_THREADS) compress_pool_seqs_kernel(const ds4j_seq_view* views, const float* a_new, const float* z_new, int m,
                                          int w, int overlap, const float* pb, const float* norm_w, float eps,
                                          const float* inv_freq, int rope_dim) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.y];
    if ((int64_t)blockIdx.x >= windows_done(v.N0, v.S, m)) return;
    const int cw = overlap ? 2 * w : w;
    compress_pool_body((const float*)v.ring, (const float*)v.ring2, v.cap, a_new + (int64_t)v.row0 * cw,
                       z_new + (int64_t)v.row0 * cw, v.N0, m, w, overlap, pb, norm_w, eps, inv_freq, rope_dim,
                       (uint16_t*)v.store, blockIdx.x);
}

/**
 * The compressor's ring stores of one step (values a and logits z, F32 rings) as blocks nb0 .. nb0+nb-1 of a launch:
 * the same element copies as ring_store_body, both rings per element.
 */
__device__ __forceinline__ void comp_store_body(float* ring_a, float* ring_z, int cap, int cw, const float* a_new,
                                                const float* z_new, int64_t N0, int S, int b, int nb) {
    const int64_t p0 = ring_first(N0, S, cap);
    const int64_t total = (N0 + S - p0) * cw;
    for (int64_t i = (int64_t)b * blockDim.x + threadIdx.x; i < total; i += (int64_t)nb * blockDim.x) {
        const int64_t p = p0 + i / cw;
        const int c = (int)(i % cw);
        const int64_t src = (p - N0) * cw + c, dst = (p % cap) * cw + c;
        ring_a[dst] = a_new[src];
        ring_z[dst] = z_new[src];
    }
}

/**
 * Whether a step of S rows may store into a compressor ring of cap rows while the same step pools from it: the slots
 * it writes are not any slot the pooling reads (the windows completed in the step reach back at most 2m-1 positions
 * with overlap, m-1 without).
 */
__host__ __device__ __forceinline__ bool comp_store_disjoint(int S, int m, int overlap, int cap) {
    return (int64_t)S + (overlap ? 2 * m - 1 : m - 1) <= cap;
}

/** compress_pool_kernel and the two ring stores in one launch: blocks 0 .. nwin-1 pool, the rest store. */
__global__ void __launch_bounds__(POOL_THREADS) compress_step_kernel(float* ring_a, float* ring_z, int cap, const float* a_new, const float* z_new,
                                     int64_t N0, int S, int m, int w, int overlap, const float* pb, const float* norm_w,
                                     float eps, const float* inv_freq, int rope_dim, uint16_t* entries, int nwin) {
    DS4J_AWAIT_PREVIOUS();
    const int b = blockIdx.x;
    if (b < nwin)
        compress_pool_body(ring_a, ring_z, cap, a_new, z_new, N0, m, w, overlap, pb, norm_w, eps, inv_freq, rope_dim,
                           entries, b);
    else
        comp_store_body(ring_a, ring_z, cap, overlap ? 2 * w : w, a_new, z_new, N0, S, b - nwin, gridDim.x - nwin);
}

/** compress_step_kernel over several sequences: blockIdx.y picks the sequence; blocks 0 .. nwin-1 pool, the rest store. */
__global__ void __launch_bounds__(POOL_THREADS) compress_step_seqs_kernel(const ds4j_seq_view* views, const float* a_new, const float* z_new, int m,
                                          int w, int overlap, const float* pb, const float* norm_w, float eps,
                                          const float* inv_freq, int rope_dim, int nwin) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.y];
    const int cw = overlap ? 2 * w : w;
    const int b = blockIdx.x;
    if (b < nwin) {
        if ((int64_t)b >= windows_done(v.N0, v.S, m)) return;
        compress_pool_body((const float*)v.ring, (const float*)v.ring2, v.cap, a_new + (int64_t)v.row0 * cw,
                           z_new + (int64_t)v.row0 * cw, v.N0, m, w, overlap, pb, norm_w, eps, inv_freq, rope_dim,
                           (uint16_t*)v.store, b);
    } else {
        comp_store_body((float*)v.ring, (float*)v.ring2, v.cap, cw, a_new + (int64_t)v.row0 * cw,
                        z_new + (int64_t)v.row0 * cw, v.N0, v.S, b - nwin, gridDim.x - nwin);
    }
}

}  // namespace ds4j

using namespace ds4j;

extern "C" {

/** DS4J_POOL_SLICES=0 (read once): one block per window for every launch (measurements; the same bits). */
static bool pool_whole_windows() {
    static std::atomic<int> c{-1};
    return env_equals(c, "DS4J_POOL_SLICES", "0");
}

int32_t ds4j_compress_pool(ds4j_ctx* ctx, const float* ring_a, const float* ring_z, int32_t cap, const float* a_new,
                           const float* z_new, int64_t N0, int32_t S, int32_t m, int32_t w, int32_t overlap,
                           const float* position_bias, const float* norm_w, float eps, const float* inv_freq,
                           int32_t rope_dim, uint16_t* entries) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(a_new && z_new && position_bias && norm_w && inv_freq && entries && m > 0 && w > 0 && S >= 0 && N0 >= 0,
             "ds4j_compress_pool: bad arguments");
    DS4J_ARG(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= w, "ds4j_compress_pool: bad rope_dim %d", rope_dim);
    DS4J_ARG(N0 == 0 || (ring_a && ring_z && cap >= (overlap ? 2 * m : m) - 1), "ds4j_compress_pool: ring too small");
    DS4J_ARG(w <= POOL_MAX_W, "ds4j_compress_pool: width %d above %d", w, POOL_MAX_W);
    const int64_t nwin = (N0 + S) / m - N0 / m;
    if (nwin <= 0) return DS4J_OK;
    // few windows of long rows (a prefill chunk's HCA windows): the channels in slices over many blocks (same bits)
    if (nwin <= POOL_FEW_WINDOWS && m * (overlap ? 2 : 1) >= 64 && w % POOL_SLICE == 0 && !pool_whole_windows()) {
        float* part = nullptr;
        const int32_t rc = at_scratch(ctx, nwin * w * (int64_t)sizeof(float), &part);
        if (rc != DS4J_OK) return rc;
        compress_pool_part_kernel<<<dim3((unsigned)nwin, (unsigned)(w / POOL_SLICE)), POOL_THREADS,
                                    pool_smem(POOL_SLICE), ctx->stream>>>(ring_a, ring_z, cap, a_new, z_new, N0, m, w,
                                                                           overlap, position_bias, part);
        DS4J_LAUNCHED("compress_pool");
        compress_pool_finish_kernel<<<(unsigned)nwin, POOL_THREADS, (size_t)w * sizeof(float), ctx->stream>>>(
            part, N0, m, w, norm_w, eps, inv_freq, rope_dim, entries);
        DS4J_LAUNCHED("compress_pool");
        return DS4J_OK;
    }
    compress_pool_kernel<<<(unsigned)nwin, POOL_THREADS, pool_smem(w), ctx->stream>>>(
        ring_a, ring_z, cap, a_new, z_new, N0, m, w, overlap, position_bias, norm_w, eps, inv_freq, rope_dim, entries);
    DS4J_LAUNCHED("compress_pool");
    return DS4J_OK;
}

int32_t ds4j_compress_step(ds4j_ctx* ctx, float* ring_a, float* ring_z, int32_t cap, const float* a_new,
                           const float* z_new, int64_t N0, int32_t S, int32_t m, int32_t w, int32_t overlap,
                           const float* position_bias, const float* norm_w, float eps, const float* inv_freq,
                           int32_t rope_dim, uint16_t* entries) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(ring_a && ring_z && cap > 0, "ds4j_compress_step: no ring");
    DS4J_ARG(w <= POOL_MAX_W, "ds4j_compress_step: width %d above %d", w, POOL_MAX_W);
    if (!comp_store_disjoint(S, m, overlap, cap)) {  // the stores must wait for the pooling: three launches
        const int32_t rc = ds4j_compress_pool(ctx, ring_a, ring_z, cap, a_new, z_new, N0, S, m, w, overlap, position_bias,
                                              norm_w, eps, inv_freq, rope_dim, entries);
        if (rc != DS4J_OK) return rc;
        const int32_t cw = overlap ? 2 * w : w;
        const int32_t ra = ds4j_ring_store(ctx, ring_a, 0, cap, cw, a_new, N0, S);
        return ra != DS4J_OK ? ra : ds4j_ring_store(ctx, ring_z, 0, cap, cw, z_new, N0, S);
    }
    DS4J_ARG(a_new && z_new && position_bias && norm_w && inv_freq && entries && m > 0 && w > 0 && S >= 0 && N0 >= 0,
             "ds4j_compress_step: bad arguments");
    DS4J_ARG(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= w, "ds4j_compress_step: bad rope_dim %d", rope_dim);
    if (S == 0) return DS4J_OK;
    const int64_t nwin = windows_done(N0, S, m);
    const int cw = overlap ? 2 * w : w;
    const unsigned nst = grid_for((N0 + S - ring_first(N0, S, cap)) * cw);
    compress_step_kernel<<<(unsigned)nwin + nst, POOL_THREADS, pool_smem(w), ctx->stream>>>(
        ring_a, ring_z, cap, a_new, z_new, N0, S, m, w, overlap, position_bias, norm_w, eps, inv_freq, rope_dim, entries,
        (int)nwin);
    DS4J_LAUNCHED("compress_step");
    return DS4J_OK;
}

int32_t ds4j_compress_pool_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views, int32_t n,
                                const float* a_new, const float* z_new, int32_t m, int32_t w, int32_t overlap,
                                const float* position_bias, const float* norm_w, float eps, const float* inv_freq,
                                int32_t rope_dim) {
    DS4J_CHECK_CTX(ctx);
    const char* fn = "ds4j_compress_pool_seqs";
    int32_t max_s = 0;
    const int32_t vrc = check_views(fn, host_views, views, n, &max_s);
    if (vrc != DS4J_OK) return vrc;
    DS4J_ARG(a_new && z_new && position_bias && norm_w && inv_freq && m > 0 && w > 0, "%s: bad arguments", fn);
    DS4J_ARG(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= w, "%s: bad rope_dim %d", fn, rope_dim);
    DS4J_ARG(w <= POOL_MAX_W, "%s: width %d above %d", fn, w, POOL_MAX_W);
    int64_t most = 0;
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        DS4J_ARG(v.store, "%s: view %d has no entries", fn, i);
        DS4J_ARG(v.N0 == 0 || (v.ring && v.ring2 && v.cap >= (overlap ? 2 * m : m) - 1), "%s: view %d: ring too small", fn, i);
        const int64_t nw = windows_done(v.N0, v.S, m);
        if (nw > most) most = nw;
    }
    if (ctx->fixed_grids) most = (max_s + m - 1) / m;  // the most windows max_s rows can complete
    if (most <= 0) return DS4J_OK;
    dim3 grid((unsigned)most, (unsigned)n);
    compress_pool_seqs_kernel<<<grid, POOL_THREADS, pool_smem(w), ctx->stream>>>(views, a_new, z_new, m, w, overlap,
                                                                            position_bias, norm_w, eps, inv_freq,
                                                                            rope_dim);
    DS4J_LAUNCHED("compress_pool_seqs");
    return DS4J_OK;
}

int32_t ds4j_compress_step_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views, int32_t n,
                                const float* a_new, const float* z_new, int32_t m, int32_t w, int32_t overlap,
                                const float* position_bias, const float* norm_w, float eps, const float* inv_freq,
                                int32_t rope_dim) {
    DS4J_CHECK_CTX(ctx);
    const char* fn = "ds4j_compress_step_seqs";
    int32_t max_s = 0;
    const int32_t vrc = check_views(fn, host_views, views, n, &max_s);
    if (vrc != DS4J_OK) return vrc;
    bool disjoint = true;
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        DS4J_ARG(v.ring && v.ring2 && v.cap > 0, "%s: view %d has no ring", fn, i);
        disjoint &= comp_store_disjoint(v.S, m, overlap, v.cap);
    }
    DS4J_ARG(w <= POOL_MAX_W, "%s: width %d above %d", fn, w, POOL_MAX_W);
    const int32_t cw = overlap ? 2 * w : w;
    if (!disjoint) {  // the stores must wait for the pooling: three launches
        const int32_t rc = ds4j_compress_pool_seqs(ctx, host_views, views, n, a_new, z_new, m, w, overlap, position_bias,
                                                   norm_w, eps, inv_freq, rope_dim);
        if (rc != DS4J_OK) return rc;
        const int32_t ra = ds4j_ring_store_seqs(ctx, host_views, views, n, 0, 0, cw, a_new);
        return ra != DS4J_OK ? ra : ds4j_ring_store_seqs(ctx, host_views, views, n, 1, 0, cw, z_new);
    }
    DS4J_ARG(a_new && z_new && position_bias && norm_w && inv_freq && m > 0 && w > 0, "%s: bad arguments", fn);
    DS4J_ARG(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= w, "%s: bad rope_dim %d", fn, rope_dim);
    int64_t most = 0, rows = 0;
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        DS4J_ARG(v.store, "%s: view %d has no entries", fn, i);
        const int64_t nw = windows_done(v.N0, v.S, m);
        if (nw > most) most = nw;
        const int64_t c = v.N0 + v.S - ring_first(v.N0, v.S, v.cap);
        if (c > rows) rows = c;
    }
    if (ctx->fixed_grids) most = (max_s + m - 1) / m;  // the most windows max_s rows can complete
    dim3 grid((unsigned)most + grid_for(rows * cw), (unsigned)n);
    compress_step_seqs_kernel<<<grid, POOL_THREADS, pool_smem(w), ctx->stream>>>(views, a_new, z_new, m, w, overlap,
                                                                            position_bias, norm_w, eps, inv_freq,
                                                                            rope_dim, (int)most);
    DS4J_LAUNCHED("compress_step_seqs");
    return DS4J_OK;
}

}  // extern "C"
