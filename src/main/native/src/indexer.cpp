// The Lightning Indexer (spec 3.6): scores of the compressed entries for each query (FFMA kernels; the tensor-core
// kernels of prefill are in indexer_tc.cpp) and the top-k selection per query row (one block per row, or the
// multi-block kernels for long rows of short steps), for one sequence or several.
#include "ops.h"
#include "tc.h"

namespace ds4j {

constexpr int IDX_ENTRIES = 4;  // entries per block (one per warp) in the indexer score kernel: many blocks at decode

template <typename T>
__device__ __forceinline__ void indexer_scores_body(const float* qi, const float* wt, const T* keys, int64_t N0, int m,
                                                    int HI, int dI, int K, float w_scale, float s_scale, float* scores,
                                                    int64_t ld, int b, int s) {
    const int64_t avail = (N0 + s + 1) / m;
    if (avail <= K) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int64_t e0 = (int64_t)b * IDX_ENTRIES;
    const int64_t e1 = e0 + IDX_ENTRIES < avail ? e0 + IDX_ENTRIES : avail;
    const float* q = qi + (int64_t)s * HI * dI;
    for (int64_t e = e0 + warp; e < e1; e += nw) {
        const T* key = keys + e * dI;
        float acc = 0;
        for (int h = 0; h < HI; h++) {
            float dt = 0;
            for (int i = lane; i < dI; i += WARP) dt += q[h * dI + i] * load_f(key, i);
            dt = warp_sum(dt);
            acc = add(acc, mul(mul(mul(wt[(int64_t)s * HI + h], w_scale), fmaxf(dt, 0.f)), s_scale));
        }
        if (lane == 0) scores[(int64_t)s * ld + e] = acc;
    }
}

template <typename T>
__global__ void indexer_scores_kernel(const float* qi, const float* wt, const T* keys, int64_t N0, int m,
                                      int HI, int dI, int K, float w_scale, float s_scale, float* scores, int64_t ld) {
    DS4J_AWAIT_PREVIOUS();
    indexer_scores_body<T>(qi, wt, keys, N0, m, HI, dI, K, w_scale, s_scale, scores, ld, blockIdx.x, blockIdx.y);
}

/** indexer_scores_kernel over several sequences: blockIdx.z picks the sequence; T the keys' type. */
template <typename T>
__global__ void indexer_scores_seqs_kernel(const ds4j_seq_view* views, const float* qi, const float* wt, int m, int HI,
                                           int dI, int K, float w_scale, float s_scale, float* scores, int64_t ld) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.z];
    if ((int)blockIdx.y >= v.S) return;
    const int64_t r0 = v.row0;
    indexer_scores_body<T>(qi + r0 * HI * dI, wt + r0 * HI, (const T*)v.store, v.N0, m, HI, dI, K, w_scale, s_scale,
                           scores + r0 * ld, ld, blockIdx.x, blockIdx.y);
}

/** Order-preserving key: larger float -> larger key; -0 == +0; NaN lowest. */
__device__ __forceinline__ uint32_t order_key(float f) {
    if (isnan(f)) return 0u;
    if (f == 0.f) f = 0.f;
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

constexpr int TOPK_THREADS = 256;

/**
 * The bin of hist[256] (higher bins first) that holds the krem-th largest of the keys counted, found by warp 0: lane L
 * sums bins 255 - 8L .. 248 - 8L, a warp scan gives the keys above each lane's bins, and the one lane where krem falls
 * walks its eight. The same bin and remainder as walking the bins one at a time from 255 (the crossing is reached by
 * bin 0, since the candidates hold at least krem keys). Results in bin_sh, krem_sh; the caller's barrier publishes them.
 */
__device__ __forceinline__ void topk_bin(const unsigned* hist, int krem, uint32_t* bin_sh, int* krem_sh) {
    const int lane = threadIdx.x & 31;
    unsigned h[8];
    int sum = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        h[i] = hist[255 - (8 * lane + i)];
        sum += (int)h[i];
    }
    int incl = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = DS4J_SHFL_UP(incl, o);
        if (lane >= o) incl += y;
    }
    const int before = incl - sum;
    if (before < krem && krem <= incl) {  // exactly one lane
        int cum = before, b = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            if (b == 0 && cum + (int)h[i] >= krem) b = 256 - (8 * lane + i);  // bin + 1, so that 0 means not yet
            else if (b == 0) cum += (int)h[i];
        }
        *bin_sh = (uint32_t)(b - 1);
        *krem_sh = krem - cum;
    }
}

/**
 * Radix select of the K-th largest key (8 bits per pass; each pass's bin found by one warp, topk_bin), then an
 * index-ordered compaction (ties: lower index), 256 keys a round, the counts above and at the threshold scanned
 * together.
 */
__device__ __forceinline__ void topk_body(const float* scores, int64_t ld, int64_t N0, int m, int K, int32_t* sel, int s) {
    __shared__ unsigned hist[256];
    __shared__ uint32_t bin_sh;
    __shared__ int krem_sh;
    __shared__ int scan_sh[32];
    const int64_t avail = (N0 + s + 1) / m;
    if (avail <= K) return;
    const float* v = scores + (int64_t)s * ld;
    uint32_t prefix = 0, mask = 0;
    int krem = K;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (int64_t e = threadIdx.x; e < avail; e += blockDim.x) {
            const uint32_t u = order_key(v[e]);
            if ((u & mask) == prefix) atomicAdd(&hist[(u >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x < 32) topk_bin(hist, krem, &bin_sh, &krem_sh);
        __syncthreads();
        prefix |= bin_sh << shift;
        krem = krem_sh;
        mask |= 255u << shift;
        // kept from the kernel before: the next pass's two barriers alone order these reads of bin_sh and krem_sh
        // before warp 0 writes them again
        __syncthreads();
    }
    const uint32_t T = prefix;
    int64_t gt_before = 0, eq_before = 0;
    int32_t* out = sel + (int64_t)s * K;
    for (int64_t base = 0; base < avail; base += blockDim.x) {
        const int64_t e = base + threadIdx.x;
        const uint32_t u = e < avail ? order_key(v[e]) : 0u;
        const int g = e < avail && u > T, q = e < avail && u == T;
        // one scan of both counts: above the threshold in the low 16 bits, at it in the high (a round has <= 256 keys)
        int tot;
        const int x = block_excl_scan(g | q << 16, scan_sh, &tot);
        const int gx = x & 0xffff, qx = x >> 16, gtot = tot & 0xffff, qtot = tot >> 16;
        if (g) {
            const int64_t eqb = eq_before + qx;
            out[gt_before + gx + (eqb < krem ? eqb : krem)] = (int32_t)e;
        } else if (q) {
            const int64_t rank = eq_before + qx;
            if (rank < krem) out[gt_before + gx + rank] = (int32_t)e;
        }
        gt_before += gtot;
        eq_before += qtot;
    }
}

__global__ void __launch_bounds__(TOPK_THREADS)
topk_kernel(const float* scores, int64_t ld, int64_t N0, int m, int K, int32_t* sel) {
    DS4J_AWAIT_PREVIOUS();
    topk_body(scores, ld, N0, m, K, sel, blockIdx.x);
}

/** topk_kernel over several sequences: blockIdx.y picks the sequence, blockIdx.x its row. */
__global__ void __launch_bounds__(TOPK_THREADS)
topk_seqs_kernel(const ds4j_seq_view* views, const float* scores, int64_t ld, int m, int K, int32_t* sel) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.y];
    if ((int)blockIdx.x >= v.S) return;
    topk_body(scores + (int64_t)v.row0 * ld, ld, v.N0, m, K, sel + (int64_t)v.row0 * K, blockIdx.x);
}

// ------------------------------------------------------------------------------------------- multi-block top-k
// topk_body above walks a whole row with one block: at 1M tokens of context (262K compressed entries) that is a serial
// millisecond per row. Long rows of short steps (decode, verify) instead run the same selection over many blocks:
// three radix passes (11, 11 and 10 bits of order_key) count into per-row histograms in device memory; a pass finds
// the digit of the K-th largest key from the previous pass's histogram; then every block counts its chunk's keys
// above and equal to the threshold, and writes its picks at the offsets the earlier chunks' counts give. The picks
// are those of topk_body, in the same places, bit for bit: the K largest keys, ties to the lower index, in index order.

constexpr int TK_THREADS = 256;
constexpr int TK_CHUNK = 2048;                  // entries per block (8 per thread)
constexpr int TK_BINS = 2048;                   // 11-bit digits
constexpr int TK_PASSES = 3;                    // bits 31..21, 20..10, 9..0
constexpr int TK_HIST = TK_PASSES * TK_BINS;    // histogram words per row
constexpr int TK_STATE = 4 * TK_PASSES;         // per row and pass: prefix, mask, keys still to take, spare

__host__ __device__ __forceinline__ int tk_shift(int p) { return p == 0 ? 21 : (p == 1 ? 10 : 0); }
__host__ __device__ __forceinline__ uint32_t tk_digits(int p) { return p == 2 ? 0x3ffu : 0x7ffu; }

/** Scratch words of the multi-block top-k for rows rows of chunks chunks: histograms, states, chunk counts. */
static inline int64_t tk_scratch_words(int64_t rows, int64_t chunks) {
    return rows * (TK_HIST + TK_STATE + 2 * chunks);
}

/** The row a block works on: its scores, available entries, output and scratch; avail <= K when it has none. */
struct TkRow {
    const float* v;
    int64_t avail;
    int32_t* out;
    uint32_t* hist;   // [TK_PASSES][TK_BINS]
    uint32_t* state;  // [TK_PASSES][4]
    uint32_t* cnt;    // [chunks][2]: keys above the threshold, keys equal to it
};

/** Row blockIdx.y of the single-sequence call (views null), or row blockIdx.y of sequence blockIdx.z. */
__device__ __forceinline__ TkRow tk_row(const ds4j_seq_view* views, const float* scores, int64_t ld, int64_t N0, int m,
                                        int K, int32_t* sel, uint32_t* scratch, int rows, int64_t chunks) {
    TkRow r;
    int64_t row = blockIdx.y;
    if (views) {
        const ds4j_seq_view v = views[blockIdx.z];
        if ((int)blockIdx.y >= v.S) {
            r.avail = 0;
            return r;
        }
        N0 = v.N0;
        row = v.row0 + blockIdx.y;
    }
    r.avail = (N0 + blockIdx.y + 1) / m;
    r.v = scores + row * ld;
    r.out = sel + row * K;
    r.hist = scratch + row * TK_HIST;
    r.state = scratch + (int64_t)rows * TK_HIST + row * TK_STATE;
    r.cnt = scratch + (int64_t)rows * (TK_HIST + TK_STATE) + row * 2 * chunks;
    return r;
}

/**
 * The digit of pass p holding the krem-th largest of the keys counted in hist (bins of higher digits first), as
 * topk_body's serial walk finds it: prefix gets the digit, krem the keys still to take within it.
 */
__device__ __forceinline__ void tk_select(const uint32_t* hist, int p, uint32_t& prefix, int& krem) {
    __shared__ int scan_sh[32];
    __shared__ uint32_t bin_sh;
    __shared__ int krem_sh;
    constexpr int PER = TK_BINS / TK_THREADS;
    const int t = threadIdx.x;
    unsigned h[PER];  // thread t holds bins 2047 - PER t .. 2047 - PER t - PER + 1, highest first
    int sum = 0;
#pragma unroll
    for (int i = 0; i < PER; i++) {
        h[i] = hist[TK_BINS - 1 - (PER * t + i)];
        sum += (int)h[i];
    }
    int total;
    const int before = block_excl_scan(sum, scan_sh, &total);
    const int k = krem;
    if (before < k && k <= before + sum) {  // exactly one thread: the bins above its own hold fewer than krem keys
        int cum = before;
#pragma unroll
        for (int i = 0; i < PER; i++) {
            if (cum + (int)h[i] >= k) {
                bin_sh = (uint32_t)(TK_BINS - 1 - (PER * t + i));
                krem_sh = k - cum;
                break;
            }
            cum += (int)h[i];
        }
    }
    __syncthreads();
    prefix |= bin_sh << tk_shift(p);
    krem = krem_sh;
    __syncthreads();
}

/**
 * The state after passes 0 .. p-1: pass p-1's digit chosen from its histogram (the state before it from the scratch)
 * and, by the row's first block, stored for the next kernel.
 */
struct TkState {
    uint32_t prefix, mask;  // the digits chosen so far, and their bits
    int krem;               // keys still to take among those that match them
};

__device__ __forceinline__ TkState tk_state(const TkRow& r, int p, int K) {
    TkState st{0u, 0u, K};
    if (p == 0) return st;
    if (p > 1) st = TkState{r.state[4 * (p - 2)], r.state[4 * (p - 2) + 1], (int)r.state[4 * (p - 2) + 2]};
    tk_select(r.hist + (p - 1) * TK_BINS, p - 1, st.prefix, st.krem);
    st.mask |= tk_digits(p - 1) << tk_shift(p - 1);
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        r.state[4 * (p - 1)] = st.prefix;
        r.state[4 * (p - 1) + 1] = st.mask;
        r.state[4 * (p - 1) + 2] = (uint32_t)st.krem;
    }
    return st;
}

/** Pass p: the chunk's keys that match the digits chosen so far, counted by their digit p into the row's histogram. */
__global__ void __launch_bounds__(TK_THREADS)
tk_hist_kernel(const ds4j_seq_view* views, const float* scores, int64_t ld, int64_t N0, int m, int K, int32_t* sel,
               uint32_t* scratch, int rows, int64_t chunks, int p) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ unsigned hist[TK_BINS];
    const TkRow r = tk_row(views, scores, ld, N0, m, K, sel, scratch, rows, chunks);
    const int64_t e0 = (int64_t)blockIdx.x * TK_CHUNK;
    if (r.avail <= K || e0 >= r.avail) return;  // uniform over the block
    const TkState st = tk_state(r, p, K);
    for (int i = threadIdx.x; i < TK_BINS; i += TK_THREADS) hist[i] = 0;
    __syncthreads();
    const int64_t e1 = e0 + TK_CHUNK < r.avail ? e0 + TK_CHUNK : r.avail;
    const int sh = tk_shift(p);
    const uint32_t dm = tk_digits(p);
    for (int64_t e = e0 + threadIdx.x; e < e1; e += TK_THREADS) {
        const uint32_t u = order_key(r.v[e]);
        if ((u & st.mask) == st.prefix) atomicAdd(&hist[(u >> sh) & dm], 1u);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < TK_BINS; i += TK_THREADS)
        if (hist[i]) atomicAdd(&r.hist[p * TK_BINS + i], hist[i]);
}

/** The threshold key (all three digits) and the chunk's counts of keys above it and equal to it. */
__global__ void __launch_bounds__(TK_THREADS)
tk_count_kernel(const ds4j_seq_view* views, const float* scores, int64_t ld, int64_t N0, int m, int K, int32_t* sel,
                uint32_t* scratch, int rows, int64_t chunks) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ int scan_sh[32];
    const TkRow r = tk_row(views, scores, ld, N0, m, K, sel, scratch, rows, chunks);
    const int64_t e0 = (int64_t)blockIdx.x * TK_CHUNK;
    if (r.avail <= K || e0 >= r.avail) return;
    const uint32_t T = tk_state(r, TK_PASSES, K).prefix;
    const int64_t e1 = e0 + TK_CHUNK < r.avail ? e0 + TK_CHUNK : r.avail;
    int g = 0, q = 0;
    for (int64_t e = e0 + threadIdx.x; e < e1; e += TK_THREADS) {
        const uint32_t u = order_key(r.v[e]);
        g += u > T;
        q += u == T;
    }
    int gt, eq;
    block_excl_scan(g, scan_sh, &gt);
    block_excl_scan(q, scan_sh, &eq);
    if (threadIdx.x == 0) {
        r.cnt[2 * blockIdx.x] = (uint32_t)gt;
        r.cnt[2 * blockIdx.x + 1] = (uint32_t)eq;
    }
}

/** The chunk's picks at their places: after the picks of the earlier chunks, in index order (topk_body's rule). */
__global__ void __launch_bounds__(TK_THREADS)
tk_write_kernel(const ds4j_seq_view* views, const float* scores, int64_t ld, int64_t N0, int m, int K, int32_t* sel,
                uint32_t* scratch, int rows, int64_t chunks) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ int scan_sh[32];
    const TkRow r = tk_row(views, scores, ld, N0, m, K, sel, scratch, rows, chunks);
    const int64_t e0 = (int64_t)blockIdx.x * TK_CHUNK;
    if (r.avail <= K || e0 >= r.avail) return;
    const uint32_t T = r.state[4 * (TK_PASSES - 1)];
    const int krem = (int)r.state[4 * (TK_PASSES - 1) + 2];
    int gb = 0, qb = 0;  // picks above T and keys equal to T in the chunks before this one
    for (int64_t c = threadIdx.x; c < (int64_t)blockIdx.x; c += TK_THREADS) {
        gb += (int)r.cnt[2 * c];
        qb += (int)r.cnt[2 * c + 1];
    }
    int64_t gt_before, eq_before;
    {
        int t;
        block_excl_scan(gb, scan_sh, &t);
        gt_before = t;
        block_excl_scan(qb, scan_sh, &t);
        eq_before = t;
    }
    if (gt_before + (eq_before < krem ? eq_before : krem) >= K) return;  // every pick lies in earlier chunks
    const int64_t e1 = e0 + TK_CHUNK < r.avail ? e0 + TK_CHUNK : r.avail;
    for (int64_t base = e0; base < e1; base += TK_THREADS) {
        const int64_t e = base + threadIdx.x;
        const uint32_t u = e < e1 ? order_key(r.v[e]) : 0u;
        const int g = e < e1 && u > T, q = e < e1 && u == T;
        int gtot, qtot;
        const int gx = block_excl_scan(g, scan_sh, &gtot);
        const int qx = block_excl_scan(q, scan_sh, &qtot);
        if (g) {
            const int64_t eqb = eq_before + qx;
            r.out[gt_before + gx + (eqb < krem ? eqb : krem)] = (int32_t)e;
        } else if (q) {
            const int64_t rank = eq_before + qx;
            if (rank < krem) r.out[gt_before + gx + rank] = (int32_t)e;
        }
        gt_before += gtot;
        eq_before += qtot;
    }
}

// ------------------------------------------------------------------------------------------- end of multi-block top-k

/** Checks and launches indexer_scores_kernel<T>. */
template <typename T>
static int32_t launch_indexer_scores(ds4j_ctx* ctx, const char* fn, const float* qi, const float* wt, const T* keys,
                                     int64_t N0, int32_t S, int32_t m, int32_t HI, int32_t dI, int32_t K, float w_scale,
                                     float s_scale, float* scores, int64_t ld) {
    DS4J_ARG(qi && wt && scores && m > 0 && HI > 0 && dI > 0 && K > 0 && S >= 0 && N0 >= 0, "%s: bad arguments", fn);
    const int64_t maxAvail = (N0 + S) / m;
    if (S == 0 || maxAvail <= K) return DS4J_OK;
    DS4J_ARG(keys && ld >= maxAvail, "%s: scores row of %lld < %lld entries", fn, (long long)ld, (long long)maxAvail);
    int rc = DS4J_OK;
    if (tc_indexer(ctx, nullptr, 1, qi, wt, keys, sizeof(T) == 4, true, N0, S, m, HI, dI, K, w_scale, s_scale, scores,
                   ld, maxAvail, true, &rc))
        return rc;
    DS4J_ARG(S <= 65535, "%s: S %d too large for one launch", fn, S);
    dim3 grid((unsigned)((maxAvail + IDX_ENTRIES - 1) / IDX_ENTRIES), S);
    indexer_scores_kernel<T><<<grid, 128, 0, ctx->stream>>>(qi, wt, keys, N0, m, HI, dI, K, w_scale, s_scale, scores, ld);
    DS4J_LAUNCHED("indexer_scores");
    return DS4J_OK;
}

/** Rows at most and entries at least of a top-k call that runs on many blocks per row (else one block per row). */
constexpr int TK_MULTI_ROWS = 64;
constexpr int64_t TK_MULTI_MIN = 8192;

/** False when the environment variable DS4J_TOPK_MULTI is "0" (read at the first call): one block per row always. */
static bool tk_multi_enabled() {
    static std::atomic<int> on{-1};
    return !env_equals(on, "DS4J_TOPK_MULTI", "0");
}

/** Whether a top-k call over rows rows of up to most entries runs on the multi-block kernels (shape only). */
static bool tk_multi(int64_t rows, int64_t most) {
    return rows > 0 && rows <= TK_MULTI_ROWS && most >= TK_MULTI_MIN && most <= 0x7fffffffll && tk_multi_enabled();
}

/**
 * The multi-block top-k: grid (chunks of `most` entries, ny rows, nz sequences); rows = the scratch rows (the largest
 * row index + 1). The scratch is the attention's key-range scratch of the context: calls on one stream never have
 * both live at once.
 */
static int32_t launch_topk_multi(ds4j_ctx* ctx, const char* fn, const ds4j_seq_view* views, const float* scores,
                                 int64_t ld, int64_t N0, int ny, int nz, int rows, int64_t most, int m, int K,
                                 int32_t* sel) {
    const int64_t chunks = (most + TK_CHUNK - 1) / TK_CHUNK;
    float* buf = nullptr;
    const int32_t rc = at_scratch(ctx, 4 * tk_scratch_words(rows, chunks), &buf);
    if (rc != DS4J_OK) return rc;
    uint32_t* scratch = reinterpret_cast<uint32_t*>(buf);
    hipError_t e = hipMemsetAsync(scratch, 0, (size_t)rows * TK_HIST * 4, ctx->stream);
    if (e != hipSuccess) return fail_hip(e, "ds4j_indexer_topk: clearing the histograms");
    launched_copies.fetch_add(1, std::memory_order_relaxed);
    DS4J_ARG(ny <= 65535 && nz <= 65535, "%s: %d rows too many for one launch", fn, ny);
    dim3 grid((unsigned)chunks, (unsigned)ny, (unsigned)nz);
    for (int p = 0; p < TK_PASSES; p++) {
        tk_hist_kernel<<<grid, TK_THREADS, 0, ctx->stream>>>(views, scores, ld, N0, m, K, sel, scratch, rows, chunks,
                                                             p);
        DS4J_LAUNCHED("indexer_topk (histogram)");
    }
    tk_count_kernel<<<grid, TK_THREADS, 0, ctx->stream>>>(views, scores, ld, N0, m, K, sel, scratch, rows, chunks);
    DS4J_LAUNCHED("indexer_topk (count)");
    tk_write_kernel<<<grid, TK_THREADS, 0, ctx->stream>>>(views, scores, ld, N0, m, K, sel, scratch, rows, chunks);
    DS4J_LAUNCHED("indexer_topk (write)");
    return DS4J_OK;
}

}  // namespace ds4j

using namespace ds4j;

template <typename T>
static int32_t indexer_scores_seqs_impl(ds4j_ctx* ctx, const char* fn, const ds4j_seq_view* host_views,
                                        const ds4j_seq_view* views, int32_t n, const float* qi, const float* wt,
                                        int32_t m, int32_t HI, int32_t dI, int32_t K, float w_scale, float s_scale,
                                        float* scores, int64_t ld) {
    int32_t max_s = 0;
    const int32_t vrc = check_views(fn, host_views, views, n, &max_s);
    if (vrc != DS4J_OK) return vrc;
    DS4J_ARG(qi && wt && scores && m > 0 && HI > 0 && dI > 0 && K > 0, "%s: bad arguments", fn);
    int64_t maxAvail = 0;
    bool aligned = true;
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        const int64_t a = (v.N0 + v.S) / m;
        if (a > K) DS4J_ARG(v.store && ld >= a, "%s: view %d: scores row of %lld < %lld entries", fn, i, (long long)ld,
                            (long long)a);
        if (a > maxAvail) maxAvail = a;
        aligned &= ((uintptr_t)v.store & 15u) == 0;
    }
    if (ctx->fixed_grids) {  // ds4j_seqs_bounds: as many entry blocks as a scores row holds, launched always
        DS4J_ARG(ld > 0 && (ld + IDX_ENTRIES - 1) / IDX_ENTRIES <= 0x7fffffff, "%s: bad ld %lld", fn, (long long)ld);
        maxAvail = ld;
    } else if (maxAvail <= K) return DS4J_OK;
    int rc = DS4J_OK;
    if (tc_indexer(ctx, views, n, qi, wt, nullptr, sizeof(T) == 4, aligned, 0, max_s, m, HI, dI, K, w_scale, s_scale,
                   scores, ld, maxAvail, true, &rc))
        return rc;
    dim3 grid((unsigned)((maxAvail + IDX_ENTRIES - 1) / IDX_ENTRIES), max_s, n);
    indexer_scores_seqs_kernel<T><<<grid, 128, 0, ctx->stream>>>(views, qi, wt, m, HI, dI, K, w_scale, s_scale, scores, ld);
    DS4J_LAUNCHED("indexer_scores_seqs");
    return DS4J_OK;
}

extern "C" {

int32_t ds4j_indexer_scores(ds4j_ctx* ctx, const float* qi, const float* wt, const uint16_t* keys, int64_t N0,
                            int32_t S, int32_t m, int32_t HI, int32_t dI, int32_t K, float w_scale, float s_scale,
                            float* scores, int64_t ld) {
    DS4J_CHECK_CTX(ctx);
    return launch_indexer_scores<uint16_t>(ctx, "ds4j_indexer_scores", qi, wt, keys, N0, S, m, HI, dI, K, w_scale, s_scale,
                                           scores, ld);
}

int32_t ds4j_indexer_scores_f32(ds4j_ctx* ctx, const float* qi, const float* wt, const float* keys, int64_t N0,
                                int32_t S, int32_t m, int32_t HI, int32_t dI, int32_t K, float w_scale, float s_scale,
                                float* scores, int64_t ld) {
    DS4J_CHECK_CTX(ctx);
    return launch_indexer_scores<float>(ctx, "ds4j_indexer_scores_f32", qi, wt, keys, N0, S, m, HI, dI, K, w_scale,
                                        s_scale, scores, ld);
}

int32_t ds4j_indexer_topk(ds4j_ctx* ctx, const float* scores, int64_t ld, int64_t N0, int32_t S, int32_t m, int32_t K,
                          int32_t* sel) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(scores && sel && m > 0 && K > 0 && S >= 0 && N0 >= 0, "ds4j_indexer_topk: bad arguments");
    const int64_t most = (N0 + S) / m;
    if (S == 0 || most <= K) return DS4J_OK;
    if (tk_multi(S, most))
        return launch_topk_multi(ctx, "ds4j_indexer_topk", nullptr, scores, ld, N0, S, 1, S, most, m, K, sel);
    topk_kernel<<<S, TOPK_THREADS, 0, ctx->stream>>>(scores, ld, N0, m, K, sel);
    DS4J_LAUNCHED("indexer_topk");
    return DS4J_OK;
}

int32_t ds4j_indexer_scores_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views, int32_t n,
                                 const float* qi, const float* wt, int32_t m, int32_t HI, int32_t dI, int32_t K,
                                 float w_scale, float s_scale, float* scores, int64_t ld) {
    DS4J_CHECK_CTX(ctx);
    return indexer_scores_seqs_impl<uint16_t>(ctx, "ds4j_indexer_scores_seqs", host_views, views, n, qi, wt, m, HI, dI,
                                              K, w_scale, s_scale, scores, ld);
}

int32_t ds4j_indexer_scores_f32_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views,
                                     int32_t n, const float* qi, const float* wt, int32_t m, int32_t HI, int32_t dI,
                                     int32_t K, float w_scale, float s_scale, float* scores, int64_t ld) {
    DS4J_CHECK_CTX(ctx);
    return indexer_scores_seqs_impl<float>(ctx, "ds4j_indexer_scores_f32_seqs", host_views, views, n, qi, wt, m, HI, dI,
                                           K, w_scale, s_scale, scores, ld);
}

int32_t ds4j_indexer_topk_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views, int32_t n,
                               const float* scores, int64_t ld, int32_t m, int32_t K, int32_t* sel) {
    DS4J_CHECK_CTX(ctx);
    int32_t max_s = 0;
    const int32_t vrc = check_views("ds4j_indexer_topk_seqs", host_views, views, n, &max_s);
    if (vrc != DS4J_OK) return vrc;
    DS4J_ARG(scores && sel && m > 0 && K > 0, "ds4j_indexer_topk_seqs: bad arguments");
    bool any = false;
    int64_t most = 0, rows = 0;
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        const int64_t a = (v.N0 + v.S) / m;
        any |= a > K;
        if (a > most) most = a;
        if ((int64_t)v.row0 + v.S > rows) rows = (int64_t)v.row0 + v.S;
    }
    if (!any && !ctx->fixed_grids) return DS4J_OK;
    if (ctx->fixed_grids) most = ld;  // ds4j_seqs_bounds: the launch shape follows the scores row, not the positions
    if (tk_multi(rows, most))
        return launch_topk_multi(ctx, "ds4j_indexer_topk_seqs", views, scores, ld, 0, max_s, n, (int)rows, most, m, K,
                                 sel);
    dim3 grid((unsigned)max_s, (unsigned)n);
    topk_seqs_kernel<<<grid, TOPK_THREADS, 0, ctx->stream>>>(views, scores, ld, m, K, sel);
    DS4J_LAUNCHED("indexer_topk_seqs");
    return DS4J_OK;
}

}  // extern "C"
