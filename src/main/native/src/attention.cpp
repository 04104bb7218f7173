// Attention side of the forward (spec 3.4-3.7): RoPE, F16 rounding and ring stores of the MLA cache, attention with
// sink over raw window rows and compressed entries, compressor pooling, Lightning Indexer scores and top-k.
#include "common.h"
#include "tc.h"

#include <stdlib.h>
#include <string.h>

namespace ds4j {

__global__ void rope_kernel(float* x, int S, int heads, int width, int rope_dim, const float* inv_freq, int64_t pos0,
                            int64_t pos_step, const int64_t* pos, int inverse) {
    DS4J_AWAIT_PREVIOUS();
    const int half = rope_dim / 2;
    const int64_t total = (int64_t)S * heads * half;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % half);
        const int64_t sh = idx / half;  // s * heads + h
        const int s = (int)(sh / heads);
        const float ft = (float)(pos ? pos[s] : pos0 + (int64_t)s * pos_step);
        const double phi = (double)mul(inv_freq[i], ft);
        const float c = (float)cos(phi);
        float sn = (float)sin(phi);
        if (inverse) sn = -sn;
        float* base = x + sh * width + (width - rope_dim);
        const float a = base[2 * i], b = base[2 * i + 1];
        base[2 * i] = sub(mul(a, c), mul(b, sn));
        base[2 * i + 1] = add(mul(b, c), mul(a, sn));
    }
}

/** Row xr of width n in place: RMSNorm, RoPE of its last rope_dim channels at position ft, optional F16 rounding. */
__device__ __forceinline__ void rmsnorm_rope_row(float* xr, const float* weight, int n, float eps, int rope_dim,
                                                 const float* inv_freq, float ft, int round16, double* sh) {
    rmsnorm_row(xr, xr, weight, n, eps, sh);
    __syncthreads();
    float* base = xr + (n - rope_dim);
    for (int i = threadIdx.x; i < rope_dim / 2; i += blockDim.x) {
        const double phi = (double)mul(inv_freq[i], ft);
        const float c = (float)cos(phi), sn = (float)sin(phi);
        const float a = base[2 * i], b = base[2 * i + 1];
        base[2 * i] = sub(mul(a, c), mul(b, sn));
        base[2 * i + 1] = add(mul(b, c), mul(a, sn));
    }
    if (round16) {
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) xr[i] = f16_to_f32(f32_to_f16(xr[i]));
    }
}

__global__ void rmsnorm_rope_kernel(float* x, const float* weight, int n, float eps, int rope_dim, const float* inv_freq,
                                    int64_t pos0, const int64_t* pos, int rows_per_pos, int round16) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ double sh[32];
    const float ft = (float)(pos ? pos[blockIdx.x / rows_per_pos] : pos0 + blockIdx.x / rows_per_pos);
    rmsnorm_rope_row(x + (int64_t)blockIdx.x * n, weight, n, eps, rope_dim, inv_freq, ft, round16, sh);
}

/**
 * The query and shared-kv norms of S rows in one launch: blocks 0 .. S*H-1 the query heads (RMSNorm_1 over d, RoPE at
 * the row's position), blocks S*H .. S*H+S-1 the kv rows (RMSNorm with kv_w, RoPE, F16 rounding). Row s is at
 * pos[s] when pos is given, else at pos0 + s.
 */
__global__ void qkv_norm_rope_kernel(float* q, float* kv, const float* kv_w, int S, int H, int d, float eps,
                                     int rope_dim, const float* inv_freq, int64_t pos0, const int64_t* pos) {
    DS4J_AWAIT_PREVIOUS();
    __shared__ double sh[32];
    const int b = blockIdx.x;
    const bool isq = b < S * H;
    const int s = isq ? b / H : b - S * H;
    const float ft = (float)(pos ? pos[s] : pos0 + s);
    if (isq) rmsnorm_rope_row(q + (int64_t)b * d, nullptr, d, eps, rope_dim, inv_freq, ft, 0, sh);
    else rmsnorm_rope_row(kv + (int64_t)s * d, kv_w, d, eps, rope_dim, inv_freq, ft, 1, sh);
}

// qkv_norm_rope_kernel gives each row (a query head or the kv row, 512 values) a block of 256 threads, so that a
// prefill chunk of 512 tokens launches 33,280 blocks of three barriers each, which the launch rate, not the bytes,
// bounds (~120 us a layer). qkv_norm_rope_warp_kernel gives a row one warp, eight rows a block, and the same bits:
// lane l keeps the row's values l, l + 32, ... (slot k: value 32 k + l) in registers and sums their squares as the
// 256-thread block does (thread t = 32 w + l: its values t, t + 256, ... in order, in double; the eight warps' sums
// each by warp_sum's butterfly over the lanes, then added in warp order: block_sum); the RoPE pairs reach their
// lanes by shuffles. The rounding and operation order of every value is rmsnorm_rope_row's.
constexpr int QKV_SLOTS = 16;  // values a lane holds: rows of at most 32 x 16 = 512 values
constexpr int QKV_ROWS = 8;    // rows (warps) per block

/**
 * rmsnorm_rope_row's result for one row of n values (n a multiple of 32, at most 32 QKV_SLOTS; rope_dim / 2 <= 32)
 * by one warp, in place: RMSNorm (weight null: RMSNorm_1), RoPE of the last rope_dim values at position ft, optional
 * F16 rounding.
 */
__device__ __forceinline__ void rmsnorm_rope_row_warp(float* xr, const float* weight, int n, float eps, int rope_dim,
                                                      const float* inv_freq, float ft, int round16) {
    const int lane = threadIdx.x & 31, ns = n >> 5;
    float v[QKV_SLOTS];
#pragma unroll
    for (int k = 0; k < QKV_SLOTS; k++) v[k] = k < ns ? xr[32 * k + lane] : 0.f;
    // the block's thread 32 w + lane holds slots w, w + 8 (values 32 w + lane, + 256): its sum, in order
    double tot = 0;
#pragma unroll
    for (int w = 0; w < 8; w++) {
        double ss = 0;
#pragma unroll
        for (int k = w; k < QKV_SLOTS; k += 8)
            if (k < ns) ss += (double)mul(v[k], v[k]);
        tot += warp_sum(ss);  // warp w's butterfly over the lanes, the warps added in order (block_sum)
    }
    const float inv = (float)(1.0 / sqrt((double)add((float)(tot / n), eps)));
#pragma unroll
    for (int k = 0; k < QKV_SLOTS; k++)
        if (k < ns) {
            const float u = mul(v[k], inv);
            v[k] = weight ? mul(weight[32 * k + lane], u) : u;
        }
    // RoPE: lane i takes pair i (values r0 + 2i, r0 + 2i + 1, one slot), fetched from their lanes slot by slot
    const int r0 = n - rope_dim, npair = rope_dim >> 1, j = r0 + 2 * lane, js = j >> 5;
    float a = 0.f, b = 0.f;
#pragma unroll
    for (int k = 0; k < QKV_SLOTS; k++)
        if (k < ns && 32 * k + 31 >= r0) {
            const float va = DS4J_SHFL(v[k], j & 31), vb = DS4J_SHFL(v[k], (j + 1) & 31);
            if (js == k) a = va, b = vb;
        }
#pragma unroll
    for (int k = 0; k < QKV_SLOTS; k++)
        if (k < ns && 32 * k + lane < r0) xr[32 * k + lane] = round16 ? f16_to_f32(f32_to_f16(v[k])) : v[k];
    if (lane < npair) {
        const double phi = (double)mul(inv_freq[lane], ft);
        const float c = (float)cos(phi), sn = (float)sin(phi);
        float ra = sub(mul(a, c), mul(b, sn)), rb = add(mul(b, c), mul(a, sn));
        if (round16) ra = f16_to_f32(f32_to_f16(ra)), rb = f16_to_f32(f32_to_f16(rb));
        xr[j] = ra;
        xr[j + 1] = rb;
    }
}

/** qkv_norm_rope_kernel's rows, one warp each (rmsnorm_rope_row_warp): warp row b < S H a query head, else kv row. */
__global__ void __launch_bounds__(QKV_ROWS * 32)
qkv_norm_rope_warp_kernel(float* q, float* kv, const float* kv_w, int S, int H, int d, float eps, int rope_dim,
                          const float* inv_freq, int64_t pos0, const int64_t* pos) {
    DS4J_AWAIT_PREVIOUS();
    const int64_t b = (int64_t)blockIdx.x * QKV_ROWS + (threadIdx.x >> 5);
    if (b >= (int64_t)S * (H + 1)) return;
    const bool isq = b < (int64_t)S * H;
    const int s = (int)(isq ? b / H : b - (int64_t)S * H);
    const float ft = (float)(pos ? pos[s] : pos0 + s);
    if (isq) rmsnorm_rope_row_warp(q + b * d, nullptr, d, eps, rope_dim, inv_freq, ft, 0);
    else rmsnorm_rope_row_warp(kv + (int64_t)s * d, kv_w, d, eps, rope_dim, inv_freq, ft, 1);
}

__global__ void round_f16_kernel(float* x, int64_t n) {
    DS4J_AWAIT_PREVIOUS();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = f16_to_f32(f32_to_f16(x[i]));
}

/** The first position a ring store of positions N0 .. N0+S-1 writes: only the last cap rows survive. */
__host__ __device__ __forceinline__ int64_t ring_first(int64_t N0, int S, int cap) {
    return N0 + S - cap > N0 ? N0 + S - cap : N0;
}

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

/** The key set of one query (spec 3.7): raw rows p0 .. t, then compressed entries. T: the cache's element type. */
template <typename T>
struct Keys {
    const float* kv_new;
    const T* ring;
    const T* entries;
    const int32_t* sel;  // this query's row of selections, or null when the entries are 0 .. ncomp-1
    int64_t N0, p0;
    int cap, nraw, d;
};

/**
 * The key set of the query at position t = N0 + s (spec 3.7): raw rows max(0, t-W+1) .. t, then the compressed
 * entries it sees (HCA: all (t+1)/m; CSA: all when (t+1)/m <= K, else its K selections sel[s*K ..]). Fills k and
 * returns the key count.
 */
template <typename T>
__device__ __forceinline__ int query_keys(Keys<T>& k, const float* kv_new, const T* ring, int cap, const T* entries,
                                          int kind, int m, const int32_t* sel, int K, int64_t N0, int s, int d, int W) {
    const int64_t t = N0 + s;
    k.kv_new = kv_new;
    k.ring = ring;
    k.entries = entries;
    k.N0 = N0;
    k.cap = cap;
    k.d = d;
    k.p0 = t - W + 1 > 0 ? t - W + 1 : 0;
    k.nraw = (int)(t - k.p0 + 1);
    k.sel = nullptr;
    int ncomp = 0;
    if (kind == DS4J_ATTN_HCA) {
        ncomp = (int)((t + 1) / m);
    } else if (kind == DS4J_ATTN_CSA) {
        const int64_t avail = (t + 1) / m;
        if (avail <= K) ncomp = (int)avail;
        else {
            ncomp = K;
            k.sel = sel + (int64_t)s * K;
        }
    }
    return k.nraw + ncomp;
}

/**
 * Key j as a tagged address: an F32 row of this step (a new token, bit 0 set) or a cache row (cached raw row or
 * entry) of element type T. Rows are at least 2-byte aligned, so bit 0 is free.
 */
template <typename T>
__device__ __forceinline__ uintptr_t key_row(const Keys<T>& k, int j) {
    if (j < k.nraw) {
        const int64_t p = k.p0 + j;
        if (p >= k.N0) return (uintptr_t)(k.kv_new + (p - k.N0) * k.d) | 1u;
        return (uintptr_t)(k.ring + (p % k.cap) * k.d);
    }
    const int i = j - k.nraw;
    const int e = k.sel ? k.sel[i] : i;
    return (uintptr_t)(k.entries + (int64_t)e * k.d);
}

/** Cache element to F32 (exact for both element types). */
__device__ __forceinline__ float load_f(const uint16_t* p, int i) { return f16_to_f32(p[i]); }
__device__ __forceinline__ float load_f(const float* p, int i) { return p[i]; }

template <typename T>
__device__ __forceinline__ float key_val(uintptr_t kp, int i) {
    return (kp & 1u) ? ((const float*)(kp & ~(uintptr_t)1))[i] : load_f((const T*)kp, i);
}

/**
 * Rows of the key set of query t (spec 3.7): min(t+1, W) raw window rows plus its compressed entries (HCA: all
 * (t+1)/m; CSA: (t+1)/m when that is at most K, else the K selected ones; sliding: none). Grows with t, so the last
 * query of a step attends the most rows.
 */
__host__ __device__ __forceinline__ int64_t attended_rows(int kind, int m, int K, int64_t t, int W) {
    const int64_t nraw = t + 1 < W ? t + 1 : W;
    int64_t nc = 0;
    if (kind == DS4J_ATTN_HCA) nc = (t + 1) / m;
    else if (kind == DS4J_ATTN_CSA) nc = (t + 1) / m <= K ? (t + 1) / m : K;
    return nraw + nc;
}

constexpr int ATT_THREADS = 256;

/** Shared memory of one attention block: q [d], logits [nk], key addresses [nk]. */
static inline int64_t attention_smem(int d, int64_t nk) { return (int64_t)d * 4 + nk * 4 + nk * 8 + 8; }

/**
 * One block per (head, query). T: the cache's element type (uint16_t = F16 rows read in place, float = an F32 copy);
 * both give the same result bit for bit, because F16 -> F32 is exact and the arithmetic is the same. The portable
 * path of ds4j_attention_f16_operands is this kernel on the F16 rows, so it equals the control bit for bit.
 */
template <typename T>
__device__ __forceinline__ void attention_body(const float* q, const float* kv_new, const T* ring, int cap,
                                               const T* entries, int kind, int m, const int32_t* sel, int K,
                                               const float* sinks, int64_t N0, int H, int d, int W, float scale,
                                               int nk_max, float* out, int h, int s) {
    extern __shared__ float sm[];
    __shared__ float red[32];
    uintptr_t* kp = reinterpret_cast<uintptr_t*>(sm);  // [nk_max], 8-byte aligned at the start
    float* qs = sm + 2 * nk_max;                       // [d]
    float* lg = qs + d;                                // [nk]
    Keys<T> k;
    const int nk = query_keys(k, kv_new, ring, cap, entries, kind, m, sel, K, N0, s, d, W);
    const float* qrow = q + ((int64_t)s * H + h) * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) qs[i] = qrow[i];
    for (int j = threadIdx.x; j < nk; j += blockDim.x) kp[j] = key_row(k, j);
    __syncthreads();
    // logits: one warp per key
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    for (int j = warp; j < nk; j += nw) {
        const uintptr_t p = kp[j];
        float acc = 0;
        if (p & 1u) {
            const float* f32 = (const float*)(p & ~(uintptr_t)1);
            for (int i = lane; i < d; i += WARP) acc += qs[i] * f32[i];
        } else {
            const T* row = (const T*)p;
            for (int i = lane; i < d; i += WARP) acc += qs[i] * load_f(row, i);
        }
        acc = warp_sum(acc);
        if (lane == 0) lg[j] = mul(acc, scale);
    }
    __syncthreads();
    const float sink = sinks[h];
    float mx = sink;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) mx = fmaxf(mx, lg[j]);
    mx = block_max(mx, red);
    float part = 0;
    for (int j = threadIdx.x; j < nk; j += blockDim.x) {
        const float e = exp_d(sub(lg[j], mx));
        lg[j] = e;
        part += e;
    }
    const float sum = add(block_sum(part, red), exp_d(sub(sink, mx)));  // block_sum synchronises: lg is complete
    const float inv = 1.f / sum;
    float* orow = out + ((int64_t)s * H + h) * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float acc = 0;
#pragma unroll 8
        for (int j = 0; j < nk; j++) acc = add(acc, mul(mul(lg[j], inv), key_val<T>(kp[j], i)));
        orow[i] = acc;
    }
}

template <typename T>
__global__ void __launch_bounds__(ATT_THREADS)
attention_kernel(const float* q, const float* kv_new, const T* ring, int cap, const T* entries, int kind,
                 int m, const int32_t* sel, int K, const float* sinks, int64_t N0, int H, int d, int W, float scale,
                 int nk_max, float* out) {
    DS4J_AWAIT_PREVIOUS();
    attention_body<T>(q, kv_new, ring, cap, entries, kind, m, sel, K, sinks, N0, H, d, W, scale, nk_max, out,
                      blockIdx.x, blockIdx.y);
}

/**
 * attention_kernel over several sequences of one layer: blockIdx.z picks the sequence, rows offset by its row0; T the
 * cache rows' type (F16 in place, or the control's F32 copies).
 */
template <typename T>
__global__ void __launch_bounds__(ATT_THREADS)
attention_seqs_kernel(const ds4j_seq_view* views, const float* q, const float* kv_new, int kind, int m,
                      const int32_t* sel, int K, const float* sinks, int H, int d, int W, float scale, int nk_max,
                      float* out) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.z];
    if ((int)blockIdx.y >= v.S) return;
    const int64_t r0 = v.row0;
    attention_body<T>(q + r0 * H * d, kv_new + r0 * d, (const T*)v.ring, v.cap, (const T*)v.store, kind, m,
                      sel ? sel + r0 * K : nullptr, K, sinks, v.N0, H, d, W, scale, nk_max, out + r0 * H * d,
                      blockIdx.x, blockIdx.y);
}

// ------------------------------------------------------------------------------------------- split FFMA attention
//
// The F32 attention (ds4j_attention, ds4j_attention_f32, ds4j_attention_seqs, and the queries of
// ds4j_attention_f16_operands at or under its threshold). V4 has one KV head for all query heads (MLA), so a block
// takes AT_HG heads of one query and reads each key row once for all of them: a tile of AT_KT rows goes to shared
// memory as F32 (F16 -> F32 is exact), then Q K^T in AT_CS column slices (warp w: slice w / AT_WPS for
// AT_HG / AT_WPS heads; lane: the tile's key), the logits (warp w: AT_HPW heads from AT_HPW w adding their slices in
// order; lane: the key) and an online softmax per head in the same warp, and P V (thread t: columns t and t + NT of all
// AT_HG heads, NT threads). Each slice's dot products run over its columns in order, the slices are added in order, and
// each head's P V runs over the keys in order, so how heads and columns are dealt to warps and threads changes no bit
// (both block sizes give the same numbers). A query's keys are cut into
// key ranges (flash-decoding) so that a decode step, one query, still fills the device: each range's block writes its
// running max m, sum l and unnormalised output, and at_combine_* adds them with the sink. The ranges are a function of
// the query's own key count only (at_split), never of the step's shape or of other queries or sequences: a query's
// result is the same bit for bit whether it is decoded alone, verified among S queries or batched with other
// sequences. T = uint16_t (F16 rows in place) and T = float (F32 copies) run this one body, so they agree bit for bit.

constexpr int AT_HG = 16;      // heads per block
constexpr int AT_KT = 32;      // keys per tile (one per lane)
constexpr int AT_NS_MAX = 32;  // most key ranges per query
// Column slices of Q K^T: each logit is the sum, in slice order, of AT_CS partial dot products over consecutive
// column ranges (at_slice), each in column order. A fixed part of the numbers (not of the launch): a warp then takes
// one slice for AT_HG / (warps per slice) heads, so each key row it reads from shared memory serves that many heads
// (two when a warp took whole rows), and its dependent FMA chains are a slice long instead of a row.
constexpr int AT_CS = 4;
// Threads of a split block (at_few chooses): AT_THREADS (8 warps of two heads each for Q K^T, two output columns per
// thread at d = 512) where a launch has at least as many blocks as the device has multiprocessors, AT_THREADS_FEW (one
// warp per head, one column per thread) where it has fewer: a decode step's 16 blocks for a 128-key window are chains
// of dependent shared-memory loads and FMAs, which twice the warps hide better, while a step of many blocks keeps two
// smaller blocks per multiprocessor. Every head's sums keep their order either way: the same bits.
constexpr int AT_THREADS = 256, AT_THREADS_FEW = 512;
template <int NT> constexpr int AT_HPW = AT_HG / (NT / 32);  // heads per warp (softmax)
template <int NT> constexpr int AT_WPS = (NT / 32) / AT_CS;   // warps per column slice (Q K^T)
static_assert(AT_HG % (AT_THREADS_FEW / 32) == 0 && AT_HG % (AT_THREADS / 32) == 0, "whole heads per warp");
static_assert((AT_THREADS / 32) % AT_CS == 0 && (AT_THREADS_FEW / 32) % AT_CS == 0, "whole warps per slice");
static_assert(AT_HG % AT_WPS<AT_THREADS> == 0 && AT_HG % AT_WPS<AT_THREADS_FEW> == 0, "whole heads per slice warp");
constexpr int AT_DMAX = 2 * AT_THREADS;  // widest head: two output columns per thread of the smaller block

/** A query's key ranges: nsplit ranges of per keys (a multiple of the tile), the last one shorter. */
struct AtSplit {
    int nsplit, per;
};
__host__ __device__ __forceinline__ AtSplit at_split(int64_t nk) {
    int64_t tiles = (nk + AT_KT - 1) / AT_KT;
    if (tiles < 1) tiles = 1;
    const int64_t tps = (tiles + AT_NS_MAX - 1) / AT_NS_MAX;
    return AtSplit{(int)((tiles + tps - 1) / tps), (int)(tps * AT_KT)};
}

/**
 * Row stride of the key tile in floats: d rounded up to 8 (the loads fill 8 columns at a time) plus 4, an odd number
 * of float4, so that the lanes' float4 reads of 32 different rows do not conflict.
 */
__host__ __device__ __forceinline__ int at_stride(int d) { return ((d + 7) & ~7) + 4; }

/** Columns of a Q K^T slice: d rounded up to 4, cut into AT_CS ranges of a multiple of 4 (the last may be shorter or empty). */
__host__ __device__ __forceinline__ int at_slice(int d) {
    const int d4 = (d + 3) & ~3;
    return (d4 + 4 * AT_CS - 1) / (4 * AT_CS) * 4;
}

/**
 * Dynamic shared memory of the split kernels: q of AT_HG heads, the key tile, the slices' partial logits (slice 0 then
 * P), the corrections, key addresses.
 */
static inline int64_t at_smem(int d) {
    const int d4 = (d + 3) & ~3;
    return (int64_t)AT_HG * d4 * 4 + ((int64_t)AT_KT * at_stride(d) + 4) * 4 + (int64_t)AT_CS * AT_HG * AT_KT * 4 +
           AT_HG * 4 + AT_KT * 8;
}

/** 8 consecutive row elements to F32 (16-byte aligned, all in the row). */
__device__ __forceinline__ void at_load8(const uint16_t* p, float* v) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int e = 0; e < 4; e++) {
        v[2 * e] = f16_to_f32((uint16_t)(w[e] & 0xFFFFu));
        v[2 * e + 1] = f16_to_f32((uint16_t)(w[e] >> 16));
    }
}
__device__ __forceinline__ void at_load8(const float* p, float* v) {
    const float4 x = reinterpret_cast<const float4*>(p)[0], y = reinterpret_cast<const float4*>(p)[1];
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
}

/** Columns c .. c+7 of a row of n elements to F32, zero past n; vector loads where the row allows. */
template <typename E>
__device__ __forceinline__ void at_chunk(const E* row, int c, int n, float* v) {
    if (c + 8 <= n && ((uintptr_t)(row + c) & 15u) == 0) {
        at_load8(row + c, v);
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = c + e < n ? load_f(row, c + e) : 0.f;
    }
}

/**
 * Block (key range c, head group g, query s): heads g*AT_HG .. of query s, keys [c*per, min(nk, (c+1)*per)) of its
 * key set. With one range the block writes its rows of out; otherwise the range's partials: O at
 * part[((slot*H + h)*nsmax + c)*d ..], (m, l) at ml[((slot*H + h)*nsmax + c)*2 ..]. Returns early (uniformly) when
 * the query has fewer ranges than c + 1.
 */
template <typename T, int NT>
__device__ __forceinline__ void at_split_body(const float* q, const float* kv_new, const T* ring, int cap,
                                              const T* entries, int kind, int m, const int32_t* sel, int K,
                                              const float* sinks, int64_t N0, int H, int d, int W, float scale,
                                              float* out, float* part, float* ml, int nsmax, int64_t slot, int s,
                                              int g, int c) {
    Keys<T> k;
    const int nk = query_keys(k, kv_new, ring, cap, entries, kind, m, sel, K, N0, s, d, W);
    const AtSplit sp = at_split(nk);
    if (c >= sp.nsplit) return;
    const int kbeg = c * sp.per, kend = min(nk, kbeg + sp.per);
    const int d4 = (d + 3) & ~3, dp = at_stride(d), sw = at_slice(d);
    extern __shared__ __align__(16) float at_sm[];
    float* qs = at_sm;                          // [AT_HG][d4]
    float* Ks = qs + AT_HG * d4;                // [AT_KT][dp], then 4 spare floats
    float* Ps = Ks + AT_KT * dp + 4;            // [AT_HG][AT_KT] P, over [AT_CS][AT_HG][AT_KT] partial logits
    float* corrS = Ps + AT_CS * AT_HG * AT_KT;  // [AT_HG]
    uintptr_t* kaddr = reinterpret_cast<uintptr_t*>(corrS + AT_HG);  // [AT_KT]
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h0 = g * AT_HG;
    if ((d & 3) == 0 && ((uintptr_t)q & 15u) == 0) {
        // 16 bytes a load, a thread's loads all in flight before the first is stored: one round trip, not one a value
        constexpr int QL = AT_HG * AT_DMAX / (4 * NT);  // float4 per thread at the widest head
        const int n4 = AT_HG * d4 / 4;
        float4 v[QL];
#pragma unroll
        for (int u = 0; u < QL; u++) {
            const int i = tid + u * NT, h = h0 + 4 * i / d4;
            v[u] = i < n4 && h < H ? *reinterpret_cast<const float4*>(q + ((int64_t)s * H + h) * d + 4 * i % d4)
                                   : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < QL; u++)
            if (tid + u * NT < n4) reinterpret_cast<float4*>(qs)[tid + u * NT] = v[u];
    } else {
        for (int i = tid; i < AT_HG * d4; i += blockDim.x) {
            const int hh = i / d4, col = i % d4, h = h0 + hh;
            qs[i] = h < H && col < d ? q[((int64_t)s * H + h) * d + col] : 0.f;
        }
    }
    // softmax state of the warp's heads AT_HPW<NT>*warp + e, the same in every lane
    float m_run[AT_HPW<NT>], l_run[AT_HPW<NT>];
#pragma unroll
    for (int e = 0; e < AT_HPW<NT>; e++) m_run[e] = -INFINITY, l_run[e] = 0.f;
    // output columns ca = tid, cb = tid + NT of every head
    const int ca = tid, cb = tid + NT;
    const bool has_a = ca < d, has_b = cb < d;
    float o[AT_HG][2];
#pragma unroll
    for (int hh = 0; hh < AT_HG; hh++) o[hh][0] = o[hh][1] = 0.f;
    const int c8n = (d4 + 7) / 8;

    for (int kb = kbeg; kb < kend; kb += AT_KT) {
        const int nv = min(AT_KT, kend - kb);
        if (tid < AT_KT) kaddr[tid] = tid < nv ? key_row(k, kb + tid) : 0;
        __syncthreads();  // kaddr ready; the previous tile's P V is done with Ks and Ps (and, the first time, qs ready)
        for (int i = tid; i < AT_KT * c8n; i += blockDim.x) {
            const int j = i / c8n, col = (i % c8n) * 8;
            const uintptr_t a = kaddr[j];
            float v[8];
            if (j >= nv) {
#pragma unroll
                for (int e = 0; e < 8; e++) v[e] = 0.f;  // zero, not garbage: P = 0 times NaN is NaN
            } else if (a & 1u) {
                at_chunk((const float*)(a & ~(uintptr_t)1), col, d, v);
            } else {
                at_chunk((const T*)a, col, d, v);
            }
            float* dst = Ks + j * dp + col;  // col + 8 <= dp - 4: the columns past d are zero
            *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
            *reinterpret_cast<float4*>(dst + 4) = make_float4(v[4], v[5], v[6], v[7]);
        }
        __syncthreads();  // K tile ready

        // partial logits: column slice warp / AT_WPS, heads HQ * (warp % AT_WPS) + e, against key lane
        {
            constexpr int HQ = AT_HG / AT_WPS<NT>;
            const int sl = warp / AT_WPS<NT>, hb = HQ * (warp % AT_WPS<NT>);
            const int c0 = sl * sw, c1 = min(d4, c0 + sw);
            const float* kr = Ks + lane * dp;
            const float* qw = qs + hb * d4;
            float acc[HQ];
#pragma unroll
            for (int e = 0; e < HQ; e++) acc[e] = 0.f;
#pragma unroll 2
            for (int i = c0; i < c1; i += 4) {
                const float4 kv = *reinterpret_cast<const float4*>(kr + i);
#pragma unroll
                for (int e = 0; e < HQ; e++) {
                    const float4 x = *reinterpret_cast<const float4*>(qw + e * d4 + i);
                    acc[e] += x.x * kv.x;
                    acc[e] += x.y * kv.y;
                    acc[e] += x.z * kv.z;
                    acc[e] += x.w * kv.w;
                }
            }
#pragma unroll
            for (int e = 0; e < HQ; e++) Ps[(sl * AT_HG + hb + e) * AT_KT + lane] = acc[e];
        }
        __syncthreads();  // partial logits ready

        // logits of heads AT_HPW<NT>*warp + e against key lane (the slices added in order), then their online softmax
        {
#pragma unroll
            for (int e = 0; e < AT_HPW<NT>; e++) {
                const int h = AT_HPW<NT> * warp + e;
                float acc = Ps[h * AT_KT + lane];
#pragma unroll
                for (int c = 1; c < AT_CS; c++) acc = add(acc, Ps[(c * AT_HG + h) * AT_KT + lane]);
                const float lg = lane < nv ? mul(acc, scale) : -INFINITY;
                const float mnew = fmaxf(m_run[e], warp_max(lg));  // finite: the tile has a key
                const float corr = m_run[e] == -INFINITY ? 0.f : exp_d(sub(m_run[e], mnew));
                const float p = lane < nv ? exp_d(sub(lg, mnew)) : 0.f;
                l_run[e] = add(mul(l_run[e], corr), warp_sum(p));
                m_run[e] = mnew;
                Ps[h * AT_KT + lane] = p;  // over slice 0's partial of this head and key, read above by this thread
                if (lane == 0) corrS[AT_HPW<NT> * warp + e] = corr;
            }
        }
        __syncthreads();  // P and the corrections ready

        // O = diag(corr) O + P V over the tile's keys (past nv: P = 0 and V = 0)
        {
            const int nv4 = (nv + 3) & ~3;
#pragma unroll
            for (int hh = 0; hh < AT_HG; hh++) {
                const float cr = corrS[hh];
                o[hh][0] *= cr;
                o[hh][1] *= cr;
            }
            if (has_a) {
                for (int j = 0; j < nv4; j += 4) {
                    const float* vr = Ks + j * dp;
                    float va[4], vb[4];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        va[e] = vr[e * dp + ca];
                        vb[e] = has_b ? vr[e * dp + cb] : 0.f;
                    }
#pragma unroll
                    for (int hh = 0; hh < AT_HG; hh++) {
                        const float4 p = *reinterpret_cast<const float4*>(Ps + hh * AT_KT + j);
                        o[hh][0] += p.x * va[0];
                        o[hh][0] += p.y * va[1];
                        o[hh][0] += p.z * va[2];
                        o[hh][0] += p.w * va[3];
                        o[hh][1] += p.x * vb[0];
                        o[hh][1] += p.y * vb[1];
                        o[hh][1] += p.z * vb[2];
                        o[hh][1] += p.w * vb[3];
                    }
                }
            }
        }
    }

    // each head's (m, l) to every thread: through Ps (free after the last P V)
    __syncthreads();
    if (lane == 0)
#pragma unroll
        for (int e = 0; e < AT_HPW<NT>; e++) {
            Ps[AT_HPW<NT> * warp + e] = m_run[e];
            Ps[AT_HG + AT_HPW<NT> * warp + e] = l_run[e];
        }
    __syncthreads();
    if (!has_a) return;
    const bool direct = sp.nsplit == 1;
#pragma unroll
    for (int hh = 0; hh < AT_HG; hh++) {
        const int h = h0 + hh;
        if (h >= H) break;
        const float mr = Ps[hh], lr = Ps[AT_HG + hh];
        const int64_t slot_h = slot * H + h;
        if (direct) {
            const float sink = sinks[h], M = fmaxf(mr, sink);
            const float w = exp_d(sub(mr, M));
            const float f = w / add(mul(lr, w), exp_d(sub(sink, M)));
            float* orow = out + ((int64_t)s * H + h) * d;
            orow[ca] = mul(o[hh][0], f);
            if (has_b) orow[cb] = mul(o[hh][1], f);
        } else {
            float* prow = part + (slot_h * nsmax + c) * d;
            prow[ca] = o[hh][0];
            if (has_b) prow[cb] = o[hh][1];
            if (tid == 0) {
                ml[(slot_h * nsmax + c) * 2] = mr;
                ml[(slot_h * nsmax + c) * 2 + 1] = lr;
            }
        }
    }
}

/**
 * Adds the nsplit (> 1) key ranges of row (slot, h) with the sink: orow = sum_c e^(m_c-M) O_c / (sum_c e^(m_c-M) l_c +
 * e^(sink-M)), M the largest of the m_c and the sink, the ranges in order.
 */
__device__ __forceinline__ void at_combine_body(const float* part, const float* ml, int nsmax, int nsplit, int64_t slot_h,
                                                float sink, int d, float* orow) {
    __shared__ float wts[AT_NS_MAX + 1];  // e^(m_c - M), then the denominator
    const float* mlr = ml + slot_h * nsmax * 2;
    float M = sink;
    for (int c = 0; c < nsplit; c++) M = fmaxf(M, mlr[2 * c]);
    for (int c = threadIdx.x; c < nsplit; c += blockDim.x) wts[c] = exp_d(sub(mlr[2 * c], M));
    __syncthreads();
    if (threadIdx.x == 0) {
        float L = exp_d(sub(sink, M));
        for (int c = 0; c < nsplit; c++) L = add(L, mul(wts[c], mlr[2 * c + 1]));
        wts[AT_NS_MAX] = L;
    }
    __syncthreads();
    const float L = wts[AT_NS_MAX];
    const float* pr = part + slot_h * nsmax * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float acc = 0.f;
        for (int c = 0; c < nsplit; c++) acc = add(acc, mul(wts[c], pr[(int64_t)c * d + i]));
        orow[i] = acc / L;
    }
}

/** Grid (nsmax, ceil(H/AT_HG) * S): queries s_base + blockIdx.y / groups, partial slot blockIdx.y / groups. */
template <typename T, int NT>
__global__ void __launch_bounds__(NT)
at_split_kernel(const float* q, const float* kv_new, const T* ring, int cap, const T* entries, int kind, int m,
                const int32_t* sel, int K, const float* sinks, int64_t N0, int H, int d, int W, float scale, int s_base,
                float* part, float* ml, int nsmax, float* out) {
    DS4J_AWAIT_PREVIOUS();
    const int G = (H + AT_HG - 1) / AT_HG;
    const int sl = blockIdx.y / G;
    at_split_body<T, NT>(q, kv_new, ring, cap, entries, kind, m, sel, K, sinks, N0, H, d, W, scale, out, part, ml, nsmax,
                     sl, s_base + sl, blockIdx.y % G, blockIdx.x);
}

/** Grid (H, S): the rows of queries s_base + blockIdx.y that have more than one key range. */
__global__ void at_combine_kernel(const float* part, const float* ml, int nsmax, int kind, int m, int K, int64_t N0,
                                  int W, int s_base, int H, int d, const float* sinks, float* out) {
    DS4J_AWAIT_PREVIOUS();
    const int s = s_base + blockIdx.y, h = blockIdx.x;
    const int nsplit = at_split(attended_rows(kind, m, K, N0 + s, W)).nsplit;
    if (nsplit == 1) return;
    at_combine_body(part, ml, nsmax, nsplit, (int64_t)blockIdx.y * H + h, sinks[h], d, out + ((int64_t)s * H + h) * d);
}

/** at_split_kernel over sequences: grid (nsmax, ceil(H/AT_HG) * max_s, views); partial slot = view * max_s + s. */
template <typename T, int NT>
__global__ void __launch_bounds__(NT)
at_split_seqs_kernel(const ds4j_seq_view* views, const float* q, const float* kv_new, int kind, int m,
                     const int32_t* sel, int K, const float* sinks, int H, int d, int W, float scale, int max_s,
                     float* part, float* ml, int nsmax, float* out) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.z];
    const int G = (H + AT_HG - 1) / AT_HG;
    const int s = blockIdx.y / G;
    if (s >= v.S) return;
    const int64_t r0 = v.row0;
    at_split_body<T, NT>(q + r0 * H * d, kv_new + r0 * d, (const T*)v.ring, v.cap, (const T*)v.store, kind, m,
                     sel ? sel + r0 * K : nullptr, K, sinks, v.N0, H, d, W, scale, out + r0 * H * d, part, ml, nsmax,
                     (int64_t)blockIdx.z * max_s + s, s, blockIdx.y % G, blockIdx.x);
}

/** at_combine_kernel over sequences: grid (H, max_s, views). */
__global__ void at_combine_seqs_kernel(const ds4j_seq_view* views, const float* part, const float* ml, int nsmax,
                                       int kind, int m, int K, int W, int max_s, int H, int d, const float* sinks,
                                       float* out) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.z];
    const int s = blockIdx.y, h = blockIdx.x;
    if (s >= v.S) return;
    const int nsplit = at_split(attended_rows(kind, m, K, v.N0 + s, W)).nsplit;
    if (nsplit == 1) return;
    const int64_t slot = (int64_t)blockIdx.z * max_s + s;
    at_combine_body(part, ml, nsmax, nsplit, slot * H + h, sinks[h], d,
                    out + ((int64_t)v.row0 + s) * H * d + (int64_t)h * d);
}
// ------------------------------------------------------------------------------------------- end of split attention

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

/** Radix select of the K-th largest key (8 bits per pass), then an index-ordered compaction (ties: lower index). */
__device__ __forceinline__ void topk_body(const float* scores, int64_t ld, int64_t N0, int m, int K, int32_t* sel, int s) {
    __shared__ unsigned hist[256];
    __shared__ uint32_t prefix_sh;
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
        if (threadIdx.x == 0) {
            unsigned cum = 0;
            int b = 255;
            for (; b > 0; b--) {
                if (cum + hist[b] >= (unsigned)krem) break;
                cum += hist[b];
            }
            prefix_sh = prefix | ((uint32_t)b << shift);
            krem_sh = krem - (int)cum;
        }
        __syncthreads();
        prefix = prefix_sh;
        krem = krem_sh;
        mask |= 255u << shift;
        __syncthreads();
    }
    const uint32_t T = prefix;
    int64_t gt_before = 0, eq_before = 0;
    int32_t* out = sel + (int64_t)s * K;
    for (int64_t base = 0; base < avail; base += blockDim.x) {
        const int64_t e = base + threadIdx.x;
        const uint32_t u = e < avail ? order_key(v[e]) : 0u;
        const int g = e < avail && u > T, q = e < avail && u == T;
        int gtot, qtot;
        const int gx = block_excl_scan(g, scan_sh, &gtot);
        const int qx = block_excl_scan(q, scan_sh, &qtot);
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

// ------------------------------------------------------------------------------------------- F16-operand attention
//
// ds4j_attention_f16_operands: the verify attention of the F16 path above the short-context threshold. Same key set
// and masks per query as attention_kernel, the F16 cache rows read in place as tensor-core operands (exact: they are
// F16 values). The F32 side of each product keeps F32 accuracy: every query row is scaled by a power of two that puts
// its largest |value| in [2^14, 2^15) and split into F16 hi + lo parts, and every probability (at most 1) is scaled
// by 2^14 and split likewise; the two MMAs per product accumulate in F32 and the scalings are undone exactly. The hi
// + lo pair carries 22 significant bits, so each product term is within about 2^-22 relative of the F32 one and the
// output matches the control (F32 attention over an F32 copy of the cache) to F32 rounding noise, not F16 rounding.
// Rounding q or the probabilities to F16 instead (what this kernel once did) perturbs every verified row by ~1e-3
// relative; the rows a verify step commits then differ from what decode steps write, and the difference compounds
// through the layers and the steps (a copy-of-target draft lost a third of its tokens at 43 layers).
//
// Flash-decoding layout: a block takes 64 heads of one query (the 64 x d output accumulator is what one SM's
// registers hold at d = 512) and a range of that query's keys; each key tile is loaded once into shared memory and
// used by all 64 heads (one KV head: every head reads the same rows). The S queries of a step run concurrently over
// the same window and (mostly) the same entries, so HBM sees one read of the step's key set and the other queries
// hit L2. Blocks write unnormalised partials (running max m, sum l, output) and a combine kernel adds them with the
// sink; with a single key range per query the block finishes the rows itself.

/** 2 + 2 F16 halves of a 32-bit word: the lower address holds the lower index (mma fragment order). */
__device__ __forceinline__ uint32_t pack2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

constexpr int TC_ROWS = 64;     // heads per block (4 warps x m16)
constexpr int TC_KT = 32;       // keys per tile (two Q tiles, hi and lo, leave room for 32 keys of d = 512)

/**
 * How a query's nk keys are split into key ranges when at most ns_max ranges are wanted: ranges of whole tiles, as
 * even as possible. A function of the query's own key count, never of the step's: a query gets the same partition,
 * so the same result bit for bit, whether it is verified among S queries or decoded alone.
 */
struct TcSplit {
    int nsplit;  // ranges
    int per;     // keys per range, a multiple of the tile
};
__host__ __device__ __forceinline__ TcSplit tc_split(int64_t nk, int ns_max) {
    int64_t tiles = (nk + TC_KT - 1) / TC_KT;
    if (tiles < 1) tiles = 1;
    const int64_t ns = tiles < ns_max ? tiles : ns_max;
    const int64_t tps = (tiles + ns - 1) / ns;
    return TcSplit{(int)((tiles + tps - 1) / tps), (int)(tps * TC_KT)};
}

// mma.sync m16n8k16 and cp.async need sm_80 or newer (the nvcc build targets sm_90); -DDS4J_PORTABLE_ONLY builds
// the portable kernel alone (a compile check of what hipcc builds).
#if defined(__NVCC__) && !defined(__HIPCC__) && !defined(DS4J_PORTABLE_ONLY)
#define DS4J_HAVE_MMA 1

/** D += A B, m16n8k16, A row-major F16 [16 x 16], B column-major F16 [16 x 8], C/D F32 [16 x 8]. */
__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                          uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
    const unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gmem));
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

constexpr int TC_THREADS = 256; // 8 warps
constexpr float TC_P_UP = 16384.f, TC_P_DOWN = 1.f / 16384.f;  // 2^14: probabilities <= 1 scaled into F16's range
constexpr int TC_PAD = 8;       // F16 row padding of Q / K / P tiles (conflict-free fragment loads)
constexpr int TC_SPAD = 4;      // F32 padding of the score tile

/** Dynamic shared memory of tc_attention_kernel<D>. */
static inline size_t tc_smem(int D) {
    return (size_t)2 * TC_ROWS * (D + TC_PAD) * 2       // Q hi and lo, F16
           + (size_t)TC_KT * (D + TC_PAD) * 2           // K tile, F16
           + (size_t)TC_ROWS * (TC_KT + TC_SPAD) * 4    // scores, F32
           + (size_t)2 * TC_ROWS * (TC_KT + TC_PAD) * 2 // probabilities hi and lo, F16
           + (size_t)4 * TC_ROWS * 4                    // correction, final m and l, score factor per row
           + (size_t)TC_KT * 8;                         // key addresses
}

/** (a, b) -> F16 pairs hi = f16(a, b), lo = f16(a - hi, b - hi), packed in mma fragment order. */
__device__ __forceinline__ void split2(float a, float b, uint32_t& hi, uint32_t& lo) {
    const uint16_t ha = f32_to_f16(a), hb = f32_to_f16(b);
    hi = pack2(ha, hb);
    lo = pack2(f32_to_f16(sub(a, f16_to_f32(ha))), f32_to_f16(sub(b, f16_to_f32(hb))));
}

/**
 * Grid ((S - s0) * ceil(H/64), most ranges of a query). Block (query s = s0 + .., head block hb, key range c): heads
 * hb*64 .. +64 of query s, keys [c*per, min(nk_s, (c+1)*per)) of its key set, where nsplit and per are tc_split(nk_s,
 * ns_max); blocks with c >= nsplit have nothing to do. A query with one range writes its rows of out; otherwise its
 * ranges write partials for tc_combine_kernel. Warp w: row tile w&3 (16 heads); in Q K^T keys (w>>2)*16 .. +16 of the
 * tile, in P V output columns (w>>2)*D/2 .. +D/2.
 */
template <int D>
__global__ void __launch_bounds__(TC_THREADS, 1)
tc_attention_kernel(const float* q, const float* kv_new, const uint16_t* ring, int cap, const uint16_t* entries, int kind,
                    int m, const int32_t* sel, int K, const float* sinks, int64_t N0, int S, int H, int W, float scale,
                    int s0, int ns_max, float* part, float* out) {
    DS4J_AWAIT_PREVIOUS();
    // NT: n8 output tiles per warp (D/2 columns); KN: n8 key tiles per warp in Q K^T
    constexpr int ST = D + TC_PAD, SST = TC_KT + TC_SPAD, PST = TC_KT + TC_PAD, NT = D / 16, KN = TC_KT / 16;
    constexpr int KPT = TC_KT / 4;  // keys per thread in the softmax
    extern __shared__ __align__(16) unsigned char tc_sm[];
    uint16_t* Qh = reinterpret_cast<uint16_t*>(tc_sm);
    uint16_t* Ql = Qh + TC_ROWS * ST;
    uint16_t* Ks = Ql + TC_ROWS * ST;
    float* Sc = reinterpret_cast<float*>(Ks + TC_KT * ST);
    uint16_t* Ph = reinterpret_cast<uint16_t*>(Sc + TC_ROWS * SST);
    uint16_t* Pl = Ph + TC_ROWS * PST;
    float* corrS = reinterpret_cast<float*>(Pl + TC_ROWS * PST);
    float* rmS = corrS + TC_ROWS;
    float* rlS = rmS + TC_ROWS;
    float* sfS = rlS + TC_ROWS;  // scale * 2^-t: undoes the row's scaling of q
    uintptr_t* kaddr = reinterpret_cast<uintptr_t*>(sfS + TC_ROWS);

    const int HB = (H + TC_ROWS - 1) / TC_ROWS;
    const int s = s0 + (int)(blockIdx.x / HB), h0 = (blockIdx.x % HB) * TC_ROWS, c = blockIdx.y;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;

    Keys<uint16_t> k;
    const int nk = query_keys(k, kv_new, ring, cap, entries, kind, m, sel, K, N0, s, D, W);
    const TcSplit sp = tc_split(nk, ns_max);
    if (c >= sp.nsplit) return;  // uniform over the block
    const int kbeg = c * sp.per, kend = min(nk, kbeg + sp.per);

    // Q block as hi + lo of each row scaled by 2^t (rows past H are zero): row tid>>2, float4 columns (tid&3) + 4j
    {
        const int r = tid >> 2, q4 = tid & 3, h = h0 + r;
        const float4* qr = reinterpret_cast<const float4*>(q + ((int64_t)s * H + (h < H ? h : 0)) * D);
        float mx = 0.f;
        if (h < H)
            for (int c4 = q4; c4 < D / 4; c4 += 4) {
                const float4 v = qr[c4];
                mx = fmaxf(mx, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
            }
        mx = fmaxf(mx, DS4J_SHFL_XOR(mx, 1));
        mx = fmaxf(mx, DS4J_SHFL_XOR(mx, 2));
        // 2^t puts the largest |value| in [2^14, 2^15): hi cannot overflow, lo stays normal down to 2^-28 of it
        int t = 0;
        if (mx > 0.f && mx <= 3.402823466e38f) {
            const int ex = (int)((__float_as_uint(mx) >> 23) & 0xffu) - 127;
            t = min(126, max(-126, 14 - ex));
        }
        const float up = __uint_as_float((uint32_t)(127 + t) << 23), down = __uint_as_float((uint32_t)(127 - t) << 23);
        if (q4 == 0) sfS[r] = mul(scale, down);
        for (int c4 = q4; c4 < D / 4; c4 += 4) {
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (h < H) v = qr[c4];
            uint32_t h01, l01, h23, l23;
            split2(mul(v.x, up), mul(v.y, up), h01, l01);
            split2(mul(v.z, up), mul(v.w, up), h23, l23);
            *reinterpret_cast<uint2*>(Qh + r * ST + c4 * 4) = make_uint2(h01, h23);
            *reinterpret_cast<uint2*>(Ql + r * ST + c4 * 4) = make_uint2(l01, l23);
        }
    }

    // softmax state of row tid>>2, kept identically by its 4 threads
    float m_run = -INFINITY, l_run = 0.f;
    float o[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.f;
    const int rt = warp & 3, half = warp >> 2;

    for (int kb = kbeg; kb < kend; kb += TC_KT) {
        const int nv = min(TC_KT, kend - kb);
        if (tid < TC_KT) kaddr[tid] = tid < nv ? key_row(k, kb + tid) : 0;
        __syncthreads();  // kaddr ready; the previous tile's P V is done with Ks
        for (int i = tid; i < TC_KT * (D / 8); i += TC_THREADS) {
            const int j = i / (D / 8), c8 = i % (D / 8);
            uint16_t* dst = Ks + j * ST + c8 * 8;
            const uintptr_t a = kaddr[j];
            if (j >= nv) {
                *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);  // zero, not garbage: 0 x NaN = NaN
            } else if (a & 1u) {  // a row of this step, F32 holding F16 values: exact
                const float4* f = reinterpret_cast<const float4*>((const float*)(a & ~(uintptr_t)1) + c8 * 8);
                const float4 x = f[0], y = f[1];
                *reinterpret_cast<uint4*>(dst) = make_uint4(pack2(f32_to_f16(x.x), f32_to_f16(x.y)),
                                                            pack2(f32_to_f16(x.z), f32_to_f16(x.w)),
                                                            pack2(f32_to_f16(y.x), f32_to_f16(y.y)),
                                                            pack2(f32_to_f16(y.z), f32_to_f16(y.w)));
            } else {
                cp_async16(dst, (const uint16_t*)a + c8 * 8);
            }
        }
        cp_async_wait_all();
        __syncthreads();  // K tile (and, the first time, Q) ready

        // scores S = scale * Q K^T = sf_row * (Qhi K^T + Qlo K^T): warp rows rt*16 .. +16, keys half*16 .. +16
        {
            float acc[KN][4];
#pragma unroll
            for (int nt = 0; nt < KN; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
            const int qoff = (rt * 16 + gid) * ST + 2 * tig;
            const uint16_t* kbp = Ks + (half * (TC_KT / 2) + gid) * ST + 2 * tig;
#pragma unroll 2
            for (int kk = 0; kk < D / 16; kk++) {
#pragma unroll
                for (int part_ = 0; part_ < 2; part_++) {
                    const uint16_t* qa = (part_ ? Ql : Qh) + qoff + kk * 16;
                    const uint32_t a0 = *reinterpret_cast<const uint32_t*>(qa);
                    const uint32_t a1 = *reinterpret_cast<const uint32_t*>(qa + 8 * ST);
                    const uint32_t a2 = *reinterpret_cast<const uint32_t*>(qa + 8);
                    const uint32_t a3 = *reinterpret_cast<const uint32_t*>(qa + 8 * ST + 8);
#pragma unroll
                    for (int nt = 0; nt < KN; nt++) {
                        const uint16_t* b = kbp + nt * 8 * ST + kk * 16;
                        mma_16816(acc[nt], a0, a1, a2, a3, *reinterpret_cast<const uint32_t*>(b),
                                  *reinterpret_cast<const uint32_t*>(b + 8));
                    }
                }
            }
            const float f0 = sfS[rt * 16 + gid], f1 = sfS[rt * 16 + gid + 8];
#pragma unroll
            for (int nt = 0; nt < KN; nt++) {
                const int col = half * (TC_KT / 2) + nt * 8 + 2 * tig;
                float* r0 = Sc + (rt * 16 + gid) * SST + col;
                float* r1 = r0 + 8 * SST;
                r0[0] = mul(acc[nt][0], f0);
                r0[1] = mul(acc[nt][1], f0);
                r1[0] = mul(acc[nt][2], f1);
                r1[1] = mul(acc[nt][3], f1);
            }
        }
        __syncthreads();

        // online softmax: row tid>>2, keys (tid&3)*KPT .. +KPT of the tile; P scaled by 2^14, split into hi + lo
        {
            const int r = tid >> 2, q4 = tid & 3;
            const float* sr = Sc + r * SST + q4 * KPT;
            float mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < KPT; i++)
                if (q4 * KPT + i < nv) mx = fmaxf(mx, sr[i]);
            mx = fmaxf(mx, DS4J_SHFL_XOR(mx, 1));
            mx = fmaxf(mx, DS4J_SHFL_XOR(mx, 2));
            const float mnew = fmaxf(m_run, mx);  // finite: the tile has at least one key
            const float corr = m_run == -INFINITY ? 0.f : expf(m_run - mnew);
            float sum = 0.f;
            uint16_t* prh = Ph + r * PST + q4 * KPT;
            uint16_t* prl = Pl + r * PST + q4 * KPT;
#pragma unroll
            for (int i = 0; i < KPT; i += 2) {
                const float p0 = q4 * KPT + i < nv ? expf(sr[i] - mnew) : 0.f;
                const float p1 = q4 * KPT + i + 1 < nv ? expf(sr[i + 1] - mnew) : 0.f;
                sum += p0 + p1;
                uint32_t hi, lo;
                split2(mul(p0, TC_P_UP), mul(p1, TC_P_UP), hi, lo);
                *reinterpret_cast<uint32_t*>(prh + i) = hi;
                *reinterpret_cast<uint32_t*>(prl + i) = lo;
            }
            sum += DS4J_SHFL_XOR(sum, 1);
            sum += DS4J_SHFL_XOR(sum, 2);
            l_run = l_run * corr + sum;
            m_run = mnew;
            if (q4 == 0) corrS[r] = corr;
        }
        __syncthreads();

        // O = diag(corr) O + (Phi + Plo) V: warp rows rt*16 .. +16, output columns half*D/2 .. +D/2
        {
            const float c0 = corrS[rt * 16 + gid], c1 = corrS[rt * 16 + gid + 8];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                o[nt][0] *= c0;
                o[nt][1] *= c0;
                o[nt][2] *= c1;
                o[nt][3] *= c1;
            }
#pragma unroll
            for (int kk = 0; kk < TC_KT / 16; kk++) {
                const int poff = (rt * 16 + gid) * PST + kk * 16 + 2 * tig;
                uint32_t ah[4], al[4];
                ah[0] = *reinterpret_cast<const uint32_t*>(Ph + poff);
                ah[1] = *reinterpret_cast<const uint32_t*>(Ph + poff + 8 * PST);
                ah[2] = *reinterpret_cast<const uint32_t*>(Ph + poff + 8);
                ah[3] = *reinterpret_cast<const uint32_t*>(Ph + poff + 8 * PST + 8);
                al[0] = *reinterpret_cast<const uint32_t*>(Pl + poff);
                al[1] = *reinterpret_cast<const uint32_t*>(Pl + poff + 8 * PST);
                al[2] = *reinterpret_cast<const uint32_t*>(Pl + poff + 8);
                al[3] = *reinterpret_cast<const uint32_t*>(Pl + poff + 8 * PST + 8);
                // B[k][n] = V[key kk*16 + k][column n]: two keys per register, the lower key in the low half
                const uint16_t* vb = Ks + (kk * 16 + 2 * tig) * ST + half * (D / 2) + gid;
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const uint16_t* v = vb + nt * 8;
                    const uint32_t b0 = pack2(v[0], v[ST]), b1 = pack2(v[8 * ST], v[9 * ST]);
                    mma_16816(o[nt], ah[0], ah[1], ah[2], ah[3], b0, b1);
                    mma_16816(o[nt], al[0], al[1], al[2], al[3], b0, b1);
                }
            }
        }
    }

    if ((tid & 3) == 0) {
        rmS[tid >> 2] = m_run;
        rlS[tid >> 2] = l_run;
    }
    __syncthreads();
    const int64_t SH = (int64_t)S * H;
    const bool direct = sp.nsplit == 1;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int r = rt * 16 + gid + 8 * hh, h = h0 + r;
        if (h >= H) continue;
        const int64_t row = (int64_t)s * H + h;
        const float mr = rmS[r], lr = rlS[r];
        float a = TC_P_DOWN;  // O holds 2^14 P V
        float* dst;
        if (direct) {
            const float sink = sinks[h], M = fmaxf(mr, sink);
            const float wgt = mr == -INFINITY ? 0.f : expf(mr - M);
            a = mul(TC_P_DOWN, wgt / (lr * wgt + expf(sink - M)));
            dst = out + row * D;
        } else {
            dst = part + ((int64_t)c * SH + row) * D;
            if (half == 0 && tig == 0) {
                float* ml = part + (int64_t)gridDim.y * SH * D + ((int64_t)c * SH + row) * 2;
                ml[0] = mr;
                ml[1] = lr;
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int col = half * (D / 2) + nt * 8 + 2 * tig;
            *reinterpret_cast<float2*>(dst + col) = make_float2(o[nt][2 * hh] * a, o[nt][2 * hh + 1] * a);
        }
    }
}
#endif  // DS4J_HAVE_MMA

/**
 * Adds the partials of each row (s, h) of queries s0 .. S-1 that tc_attention_kernel split into several key ranges,
 * with the sink: out = sum_c e^(m_c-M) O_c / (sum_c e^(m_c-M) l_c + e^(sink-M)). Rows of single-range queries were
 * written by the attention kernel and are left alone. nmax: the grid's range count (the partials' stride).
 */
__global__ void tc_combine_kernel(const float* part, int nmax, int kind, int m, int K, int64_t N0, int S, int W, int s0,
                                  int ns_max, int H, int d, const float* sinks, float* out) {
    DS4J_AWAIT_PREVIOUS();
    const int64_t SH = (int64_t)S * H;
    const int64_t row = (int64_t)s0 * H + blockIdx.x;
    const int64_t s = row / H;
    const int nsplit = tc_split(attended_rows(kind, m, K, N0 + s, W), ns_max).nsplit;
    if (nsplit == 1) return;
    const float* ml = part + (int64_t)nmax * SH * d;
    const float sink = sinks[row % H];
    float M = sink;
    for (int c = 0; c < nsplit; c++) M = fmaxf(M, ml[((int64_t)c * SH + row) * 2]);
    float L = expf(sink - M);
    for (int c = 0; c < nsplit; c++) {
        const float mc = ml[((int64_t)c * SH + row) * 2];
        if (mc != -INFINITY) L += expf(mc - M) * ml[((int64_t)c * SH + row) * 2 + 1];
    }
    const float inv = 1.f / L;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float acc = 0.f;
        for (int c = 0; c < nsplit; c++) {
            const float mc = ml[((int64_t)c * SH + row) * 2];
            if (mc != -INFINITY) acc += expf(mc - M) * part[((int64_t)c * SH + row) * d + i];
        }
        out[row * d + i] = acc * inv;
    }
}

/** What the attention launches need to know of a device: asked once per device, then cached. */
struct DeviceLimits {
    int sms;             // multiprocessors (1 when the device does not say)
    int64_t smem_optin;  // most dynamic shared memory a block may opt in to (48 KB when the device does not say)
};

static DeviceLimits device_limits(int device) {
    static DeviceLimits cache[64];
    if (device < 0 || device >= 64) return DeviceLimits{1, 48 * 1024};
    if (cache[device].sms == 0) {
        hipDeviceProp_t p;
        const bool ok = hipGetDeviceProperties(&p, device) == hipSuccess;
        cache[device].sms = ok && p.multiProcessorCount > 0 ? p.multiProcessorCount : 1;
        cache[device].smem_optin = ok && p.sharedMemPerBlockOptin > 48 * 1024 ? (int64_t)p.sharedMemPerBlockOptin : 48 * 1024;
    }
    return cache[device];
}

/** Checks and launches attention_kernel<T> (ds4j_attention and its variants). */
/** Grants a kernel more than the default 48 KB of dynamic shared memory (once per device and size reached). */
static int32_t smem_opt_in(ds4j_ctx* ctx, const void* fn, int64_t smem, int64_t* granted) {
    const int dv = ctx->device >= 0 && ctx->device < 64 ? ctx->device : 0;
    if (smem <= granted[dv]) return DS4J_OK;
    hipError_t e = hipFuncSetAttribute(fn, hipFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != hipSuccess) return fail_hip(e, "attention: shared memory opt-in");
    granted[dv] = smem;
    return DS4J_OK;
}

/** Checks the views of a *_seqs call and gives their largest S. */
static int32_t check_views(const char* fn, const ds4j_seq_view* host_views, const ds4j_seq_view* views, int32_t n,
                           int32_t* max_s_out) {
    DS4J_ARG(host_views && views && n > 0 && n <= 65535, "%s: bad sequence views (n %d)", fn, n);
    int32_t max_s = 0;
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        DS4J_ARG(v.S > 0 && v.S <= 65535 && v.row0 >= 0 && v.N0 >= 0, "%s: view %d: bad S %d, row0 %d or N0 %lld", fn, i,
                 v.S, v.row0, (long long)v.N0);
        if (v.S > max_s) max_s = v.S;
    }
    *max_s_out = max_s;
    return DS4J_OK;
}

/** Most bytes of key-range partials one split launch uses: longer steps run in several launches. */
constexpr int64_t AT_SCRATCH_CAP = 64ll << 20;

/**
 * Whether a split launch of this grid takes AT_THREADS_FEW threads a block: fewer blocks than the device has
 * multiprocessors (a function of the launch shape and the device; the bits are the same either way).
 */
static bool at_few(ds4j_ctx* ctx, dim3 grid) {
    return (int64_t)grid.x * grid.y * grid.z < device_limits(ctx->device).sms;
}

/** Whether the split kernels run for head width d on ctx's device (a function of d and the device only). */
static bool at_usable(ds4j_ctx* ctx, int d) {
    return d <= AT_DMAX && at_smem(d) + 1024 <= device_limits(ctx->device).smem_optin;
}

/**
 * At least bytes of the context's key-range scratch in *out. A larger buffer replaces a smaller one; the smaller one is
 * kept until ds4j_ctx_destroy, because launches queued or captured into a graph may still use it.
 */
static int32_t at_scratch(ds4j_ctx* ctx, int64_t bytes, float** out) {
    if (bytes > ctx->att_scratch_bytes) {
        DS4J_ARG(ctx->att_retired_n < (int)(sizeof(ctx->att_retired) / sizeof(ctx->att_retired[0])),
                 "attention: key-range scratch grown too often");
        int64_t want = ctx->att_scratch_bytes * 2 > bytes ? ctx->att_scratch_bytes * 2 : bytes;
        if (want < (1ll << 20)) want = 1ll << 20;
        void* p = nullptr;
        hipError_t e = hipMalloc(&p, (size_t)want);
        if (e != hipSuccess) {
            hipGetLastError();
            return fail(DS4J_ERR_OOM, "attention: %lld bytes of key-range scratch: %s", (long long)want, hipGetErrorName(e));
        }
        if (ctx->att_scratch) ctx->att_retired[ctx->att_retired_n++] = ctx->att_scratch;
        ctx->att_scratch = p;
        ctx->att_scratch_bytes = want;
    }
    *out = (float*)ctx->att_scratch;
    return DS4J_OK;
}

/** The most key ranges any of the queries N0 .. N0+S-1 gets. */
static int at_nsmax(int kind, int m, int K, int64_t N0, int S, int W) {
    int n = 1;
    for (int s = 0; s < S; s++) {
        const int ns = at_split(attended_rows(kind, m, K, N0 + s, W)).nsplit;
        if (ns > n) n = ns;
    }
    return n;
}

/** ds4j_attention (and its variants) through the split kernels; arguments checked by the caller. */
template <typename T>
static int32_t launch_split(ds4j_ctx* ctx, const char* fn, const float* q, const float* kv_new, const T* ring,
                            int32_t cap, const T* entries, int32_t kind, int32_t m, const int32_t* sel, int32_t K,
                            const float* sinks, int64_t N0, int32_t S, int32_t H, int32_t d, int32_t W, float scale,
                            float* out) {
    const int G = (H + AT_HG - 1) / AT_HG;
    const int nsmax = at_nsmax(kind, m, K, N0, S, W);
    const int64_t row_bytes = nsmax > 1 ? (int64_t)H * nsmax * (d + 2) * 4 : 0;
    int64_t per = row_bytes > 0 ? AT_SCRATCH_CAP / row_bytes : S;
    if (per < 1) per = 1;
    if (per > S) per = S;
    if (per > 65535 / G) per = 65535 / G;
    DS4J_ARG(per >= 1, "%s: %d heads too many for one launch", fn, H);
    float* part = nullptr;
    if (row_bytes > 0) {
        const int32_t rc = at_scratch(ctx, row_bytes * per, &part);
        if (rc != DS4J_OK) return rc;
    }
    float* ml = part ? part + per * H * nsmax * (int64_t)d : nullptr;
    const int64_t smem = at_smem(d);
    for (int32_t s0 = 0; s0 < S; s0 += (int32_t)per) {
        const int n = (int)(S - s0 < per ? S - s0 : per);
        const dim3 grid((unsigned)nsmax, (unsigned)(G * n));
        const bool few = at_few(ctx, grid);
        static int64_t granted[2][64];
        const void* kern = few ? reinterpret_cast<const void*>(at_split_kernel<T, AT_THREADS_FEW>)
                               : reinterpret_cast<const void*>(at_split_kernel<T, AT_THREADS>);
        if (smem > 48 * 1024) {
            const int32_t rc = smem_opt_in(ctx, kern, smem, granted[few]);
            if (rc != DS4J_OK) return rc;
        }
        if (few)
            at_split_kernel<T, AT_THREADS_FEW><<<grid, AT_THREADS_FEW, (size_t)smem, ctx->stream>>>(
                q, kv_new, ring, cap, entries, kind, m, sel, K, sinks, N0, H, d, W, scale, s0, part, ml, nsmax, out);
        else
            at_split_kernel<T, AT_THREADS><<<grid, AT_THREADS, (size_t)smem, ctx->stream>>>(
                q, kv_new, ring, cap, entries, kind, m, sel, K, sinks, N0, H, d, W, scale, s0, part, ml, nsmax, out);
        DS4J_LAUNCHED("attention (key ranges)");
        if (nsmax > 1) {
            at_combine_kernel<<<dim3((unsigned)H, (unsigned)n), 128, 0, ctx->stream>>>(part, ml, nsmax, kind, m, K, N0, W,
                                                                                      s0, H, d, sinks, out);
            DS4J_LAUNCHED("attention combine");
        }
    }
    return DS4J_OK;
}

template <typename T>
static int32_t launch_attention(ds4j_ctx* ctx, const char* fn, const float* q, const float* kv_new, const T* ring,
                                int32_t cap, const T* entries, int32_t kind, int32_t m, const int32_t* sel, int32_t K,
                                const float* sinks, int64_t N0, int32_t S, int32_t H, int32_t d, int32_t W, float scale,
                                float* out) {
    DS4J_ARG(q && kv_new && sinks && out && S >= 0 && H > 0 && d > 0 && W > 0 && N0 >= 0, "%s: bad arguments", fn);
    DS4J_ARG(N0 == 0 || (ring && cap >= W - 1), "%s: ring of %d rows cannot hold the window", fn, cap);
    DS4J_ARG(kind == DS4J_ATTN_SLIDING || (m > 0 && (entries || (N0 + S) / m == 0)), "%s: compressed layer without entries",
             fn);
    DS4J_ARG(kind != DS4J_ATTN_CSA || (K > 0 && (sel || (N0 + S) / m <= K)), "%s: CSA without selections", fn);
    if (S == 0 || measure_skip("attention")) return DS4J_OK;
    if (at_usable(ctx, d)) return launch_split<T>(ctx, fn, q, kv_new, ring, cap, entries, kind, m, sel, K, sinks, N0, S, H,
                                                  d, W, scale, out);
    int64_t maxc = 0;
    if (kind == DS4J_ATTN_HCA) maxc = (N0 + S) / m;
    else if (kind == DS4J_ATTN_CSA) maxc = (N0 + S) / m < K ? (N0 + S) / m : K;
    const int64_t nk_max = W + maxc;
    const int64_t smem = attention_smem(d, nk_max);
    // the block's static shared memory (the reduction scratch) counts against the same per-block limit
    DS4J_ARG(smem + 1024 <= device_limits(ctx->device).smem_optin,
             "%s: %lld keys per query (window %d + %lld compressed) exceed the kernel's shared memory", fn,
             (long long)nk_max, W, (long long)maxc);
    if (smem > 48 * 1024) {  // long contexts (HCA past ~480K tokens): opt in to more than the default 48 KB
        static int64_t granted[64];
        const int32_t rc = smem_opt_in(ctx, reinterpret_cast<const void*>(attention_kernel<T>), smem, granted);
        if (rc != DS4J_OK) return rc;
    }
    DS4J_ARG(S <= 65535, "%s: S %d too large for one launch", fn, S);
    dim3 grid(H, S);
    attention_kernel<T><<<grid, ATT_THREADS, (size_t)smem, ctx->stream>>>(
        q, kv_new, ring, cap, entries, kind, m, sel, K, sinks, N0, H, d, W, scale, (int)nk_max, out);
    DS4J_LAUNCHED("attention");
    return DS4J_OK;
}

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

/** How ds4j_attention_f16_operands runs for one set of arguments (ds4j_attention_f16_operands_work gives the same). */
struct F16OpsPlan {
    bool mma;        // the tensor-core kernel runs (else the portable one for every query)
    int s0;          // first query over short_rows: queries before it run the F32 kernel
    int ns_max;      // most key ranges per query (a function of the device and H, not of S)
    int nmax;        // most ranges any query of the step gets (the grid's second dimension)
    int64_t work;    // bytes of partials
};

static F16OpsPlan f16ops_plan(ds4j_ctx* ctx, int32_t kind, int32_t m, int32_t K, int64_t N0, int32_t S, int32_t H,
                              int32_t d, int32_t W, int64_t short_rows, int32_t impl) {
    F16OpsPlan p{false, S, 1, 1, 0};
#if defined(DS4J_HAVE_MMA)
    p.mma = (impl == DS4J_F16OPS_AUTO || impl == DS4J_F16OPS_WHOLE) && (d == 64 || d == 128 || d == 256 || d == 512);
#else
    (void)impl;
#endif
    if (!p.mma || S <= 0) return p;
    // attended rows grow with the position: the queries over short_rows are a suffix of the step
    p.s0 = S;
    while (p.s0 > 0 && attended_rows(kind, m, K, N0 + p.s0 - 1, W) > short_rows) p.s0--;
    if (p.s0 == S) {
        p.mma = false;
        return p;
    }
    const int HB = (H + TC_ROWS - 1) / TC_ROWS;
    p.ns_max = impl == DS4J_F16OPS_WHOLE ? 1 : device_limits(ctx->device).sms / HB;
    if (p.ns_max < 1) p.ns_max = 1;
    for (int s = p.s0; s < S; s++) {
        const int n = tc_split(attended_rows(kind, m, K, N0 + s, W), p.ns_max).nsplit;
        if (n > p.nmax) p.nmax = n;
    }
    p.work = p.nmax > 1 ? (int64_t)p.nmax * S * H * ((int64_t)d + 2) * 4 : 0;
    return p;
}

}  // namespace ds4j

using namespace ds4j;

template <typename T>
static int32_t attention_seqs_impl(ds4j_ctx* ctx, const char* fn, const ds4j_seq_view* host_views,
                                   const ds4j_seq_view* views, int32_t n, const float* q, const float* kv_new, int32_t kind,
                                   int32_t m, const int32_t* sel, int32_t K, const float* sinks, int32_t H, int32_t d,
                                   int32_t W, float scale, float* out) {
    int32_t max_s = 0;
    const int32_t vrc = check_views(fn, host_views, views, n, &max_s);
    if (vrc != DS4J_OK) return vrc;
    DS4J_ARG(q && kv_new && sinks && out && H > 0 && d > 0 && W > 0, "%s: bad arguments", fn);
    DS4J_ARG(kind == DS4J_ATTN_SLIDING || kind == DS4J_ATTN_CSA || kind == DS4J_ATTN_HCA, "%s: unknown kind %d", fn, kind);
    int64_t maxc = 0;
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        const int64_t N0 = v.N0, S = v.S;
        DS4J_ARG(N0 == 0 || (v.ring && v.cap >= W - 1), "%s: view %d: ring of %d rows cannot hold the window", fn, i, v.cap);
        DS4J_ARG(kind == DS4J_ATTN_SLIDING || (m > 0 && (v.store || (N0 + S) / m == 0)),
                 "%s: view %d: compressed layer without entries", fn, i);
        DS4J_ARG(kind != DS4J_ATTN_CSA || (K > 0 && (sel || (N0 + S) / m <= K)), "%s: view %d: CSA without selections", fn, i);
        int64_t c = 0;
        if (kind == DS4J_ATTN_HCA) c = (N0 + S) / m;
        else if (kind == DS4J_ATTN_CSA) c = (N0 + S) / m < K ? (N0 + S) / m : K;
        if (c > maxc) maxc = c;
    }
    if (measure_skip("attention")) return DS4J_OK;
    if (ctx->fixed_grids) {  // ds4j_seqs_bounds: the scratch for the bound, not for the present count
        const int64_t bound = kind == DS4J_ATTN_CSA ? K : kind == DS4J_ATTN_HCA ? ctx->fixed_entries : 0;
        DS4J_ARG(maxc <= bound, "%s: %lld compressed entries exceed the bound %lld (ds4j_seqs_bounds)", fn,
                 (long long)maxc, (long long)bound);
        maxc = bound;
    }
    if (at_usable(ctx, d)) {
        const int G = (H + AT_HG - 1) / AT_HG;
        DS4J_ARG((int64_t)G * max_s <= 65535, "%s: S %d too large for one launch", fn, max_s);
        int nsmax = 1;
        if (ctx->fixed_grids) {
            // the grid for the bound: any query of at most W + maxc keys gets at most min(its tiles, AT_NS_MAX)
            // ranges; a query's own split (at_split of its key count) and so its numbers do not depend on nsmax
            const int64_t tiles = (W + maxc + AT_KT - 1) / AT_KT;
            nsmax = (int)(tiles < AT_NS_MAX ? (tiles < 1 ? 1 : tiles) : AT_NS_MAX);
        } else {
            for (int32_t i = 0; i < n; i++) {
                const int ns = at_nsmax(kind, m, K, host_views[i].N0, host_views[i].S, W);
                if (ns > nsmax) nsmax = ns;
            }
        }
        // partial slots: view * max_s + s; views in groups that keep the scratch within AT_SCRATCH_CAP
        const int64_t view_bytes = nsmax > 1 ? (int64_t)max_s * H * nsmax * (d + 2) * 4 : 0;
        int64_t per = view_bytes > 0 ? AT_SCRATCH_CAP / view_bytes : n;
        if (per < 1) per = 1;
        if (per > n) per = n;
        float* part = nullptr;
        if (view_bytes > 0) {
            const int32_t rc = at_scratch(ctx, view_bytes * per, &part);
            if (rc != DS4J_OK) return rc;
        }
        float* ml = part ? part + per * max_s * H * nsmax * (int64_t)d : nullptr;
        const int64_t smem = at_smem(d);
        for (int32_t v0 = 0; v0 < n; v0 += (int32_t)per) {
            const int nv = (int)(n - v0 < per ? n - v0 : per);
            const dim3 grid((unsigned)nsmax, (unsigned)(G * max_s), (unsigned)nv);
            const bool few = at_few(ctx, grid);
            static int64_t granted[2][64];
            const void* kern = few ? reinterpret_cast<const void*>(at_split_seqs_kernel<T, AT_THREADS_FEW>)
                                   : reinterpret_cast<const void*>(at_split_seqs_kernel<T, AT_THREADS>);
            if (smem > 48 * 1024) {
                const int32_t rc = smem_opt_in(ctx, kern, smem, granted[few]);
                if (rc != DS4J_OK) return rc;
            }
            if (few)
                at_split_seqs_kernel<T, AT_THREADS_FEW><<<grid, AT_THREADS_FEW, (size_t)smem, ctx->stream>>>(
                    views + v0, q, kv_new, kind, m, sel, K, sinks, H, d, W, scale, max_s, part, ml, nsmax, out);
            else
                at_split_seqs_kernel<T, AT_THREADS><<<grid, AT_THREADS, (size_t)smem, ctx->stream>>>(
                    views + v0, q, kv_new, kind, m, sel, K, sinks, H, d, W, scale, max_s, part, ml, nsmax, out);
            DS4J_LAUNCHED("attention_seqs (key ranges)");
            if (nsmax > 1) {
                at_combine_seqs_kernel<<<dim3((unsigned)H, (unsigned)max_s, (unsigned)nv), 128, 0, ctx->stream>>>(
                    views + v0, part, ml, nsmax, kind, m, K, W, max_s, H, d, sinks, out);
                DS4J_LAUNCHED("attention_seqs combine");
            }
        }
        return DS4J_OK;
    }
    const int64_t nk_max = W + maxc;
    const int64_t smem = attention_smem(d, nk_max);
    DS4J_ARG(smem + 1024 <= device_limits(ctx->device).smem_optin,
             "%s: %lld keys per query (window %d + %lld compressed) exceed the kernel's shared memory", fn,
             (long long)nk_max, W, (long long)maxc);
    if (smem > 48 * 1024) {
        static int64_t granted[64];
        const int32_t rc = smem_opt_in(ctx, reinterpret_cast<const void*>(attention_seqs_kernel<T>), smem, granted);
        if (rc != DS4J_OK) return rc;
    }
    dim3 grid(H, max_s, n);
    attention_seqs_kernel<T><<<grid, ATT_THREADS, (size_t)smem, ctx->stream>>>(views, q, kv_new, kind, m, sel, K, sinks, H,
                                                                             d, W, scale, (int)nk_max, out);
    DS4J_LAUNCHED("attention_seqs");
    return DS4J_OK;
}

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

int32_t ds4j_rope(ds4j_ctx* ctx, float* x, int32_t S, int32_t heads, int32_t width, int32_t rope_dim,
                  const float* inv_freq, int64_t pos0, int64_t pos_step, int32_t inverse) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && inv_freq && S >= 0 && heads > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= width,
             "ds4j_rope: bad arguments (heads %d, width %d, rope_dim %d)", heads, width, rope_dim);
    if (S == 0) return DS4J_OK;
    rope_kernel<<<grid_for((int64_t)S * heads * (rope_dim / 2)), 256, 0, ctx->stream>>>(x, S, heads, width, rope_dim,
                                                                                        inv_freq, pos0, pos_step, nullptr,
                                                                                        inverse);
    DS4J_LAUNCHED("rope");
    return DS4J_OK;
}

int32_t ds4j_rmsnorm_rope(ds4j_ctx* ctx, float* x, const float* weight, int32_t rows, int32_t n, float eps,
                          int32_t rope_dim, const float* inv_freq, int64_t pos0, int32_t rows_per_pos, int32_t round_f16) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && inv_freq && rows >= 0 && n > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= n && rows_per_pos > 0,
             "ds4j_rmsnorm_rope: bad arguments (rows %d, n %d, rope_dim %d, rows_per_pos %d)", rows, n, rope_dim, rows_per_pos);
    if (rows == 0) return DS4J_OK;
    rmsnorm_rope_kernel<<<rows, 256, 0, ctx->stream>>>(x, weight, n, eps, rope_dim, inv_freq, pos0, nullptr, rows_per_pos,
                                                       round_f16);
    DS4J_LAUNCHED("rmsnorm_rope");
    return DS4J_OK;
}

/** DS4J_QKV_BLOCK_ROWS=1 (read once): qkv_norm_rope_kernel for every shape (measurements; the same bits). */
static bool qkv_block_rows() {
    static std::atomic<int> c{-1};
    return env_equals(c, "DS4J_QKV_BLOCK_ROWS", "1");
}

int32_t ds4j_qkv_norm_rope(ds4j_ctx* ctx, float* q, float* kv, const float* kv_w, int32_t S, int32_t H, int32_t d,
                           float eps, int32_t rope_dim, const float* inv_freq, int64_t pos0, const int64_t* pos) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(q && kv && inv_freq && S >= 0 && H > 0 && d > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= d &&
                 (pos || pos0 >= 0),
             "ds4j_qkv_norm_rope: bad arguments (S %d, H %d, d %d, rope_dim %d)", S, H, d, rope_dim);
    if (S == 0) return DS4J_OK;
    // a warp a row where the row fits its registers (the same bits), else a block a row
    if (d % 32 == 0 && d <= 32 * QKV_SLOTS && rope_dim <= 64 && !qkv_block_rows()) {
        const int64_t rows = (int64_t)S * (H + 1);
        qkv_norm_rope_warp_kernel<<<(unsigned)((rows + QKV_ROWS - 1) / QKV_ROWS), QKV_ROWS * 32, 0, ctx->stream>>>(
            q, kv, kv_w, S, H, d, eps, rope_dim, inv_freq, pos0, pos);
    } else {
        qkv_norm_rope_kernel<<<(unsigned)(S * (H + 1)), 256, 0, ctx->stream>>>(q, kv, kv_w, S, H, d, eps, rope_dim,
                                                                               inv_freq, pos0, pos);
    }
    DS4J_LAUNCHED("qkv_norm_rope");
    return DS4J_OK;
}

int32_t ds4j_round_f16(ds4j_ctx* ctx, float* x, int64_t n) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && n >= 0, "ds4j_round_f16: bad arguments");
    if (n == 0) return DS4J_OK;
    round_f16_kernel<<<grid_for(n), 256, 0, ctx->stream>>>(x, n);
    DS4J_LAUNCHED("round_f16");
    return DS4J_OK;
}

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

int32_t ds4j_attention(ds4j_ctx* ctx, const float* q, const float* kv_new, const uint16_t* ring, int32_t cap,
                       const uint16_t* entries, int32_t kind, int32_t m, const int32_t* sel, int32_t K,
                       const float* sinks, int64_t N0, int32_t S, int32_t H, int32_t d, int32_t W, float scale,
                       float* out) {
    DS4J_CHECK_CTX(ctx);
    return launch_attention<uint16_t>(ctx, "ds4j_attention", q, kv_new, ring, cap, entries, kind, m, sel, K, sinks,
                                             N0, S, H, d, W, scale, out);
}

int32_t ds4j_attention_f32(ds4j_ctx* ctx, const float* q, const float* kv_new, const float* ring, int32_t cap,
                           const float* entries, int32_t kind, int32_t m, const int32_t* sel, int32_t K,
                           const float* sinks, int64_t N0, int32_t S, int32_t H, int32_t d, int32_t W, float scale,
                           float* out) {
    DS4J_CHECK_CTX(ctx);
    return launch_attention<float>(ctx, "ds4j_attention_f32", q, kv_new, ring, cap, entries, kind, m, sel, K,
                                          sinks, N0, S, H, d, W, scale, out);
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

int32_t ds4j_attention_rows(int32_t kind, int32_t m, int32_t K, int64_t N0, int32_t S, int32_t W, int64_t* host_rows) {
    DS4J_ARG(host_rows && S > 0 && N0 >= 0 && W > 0 && (kind == DS4J_ATTN_SLIDING || (m > 0 && (kind != DS4J_ATTN_CSA || K > 0))),
             "ds4j_attention_rows: bad arguments");
    DS4J_ARG(kind == DS4J_ATTN_SLIDING || kind == DS4J_ATTN_CSA || kind == DS4J_ATTN_HCA, "ds4j_attention_rows: unknown kind %d",
             kind);
    *host_rows = attended_rows(kind, m, K, N0 + S - 1, W);
    return DS4J_OK;
}

int32_t ds4j_attention_f16_operands_work(ds4j_ctx* ctx, int32_t kind, int32_t m, int32_t K, int64_t N0, int32_t S,
                                         int32_t H, int32_t d, int32_t W, int64_t short_rows, int32_t impl,
                                         int64_t* host_bytes) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(host_bytes, "ds4j_attention_f16_operands_work: null output");
    *host_bytes = f16ops_plan(ctx, kind, m, K, N0, S, H, d, W, short_rows, impl).work;
    return DS4J_OK;
}

int32_t ds4j_attention_f16_operands(ds4j_ctx* ctx, const float* q, const float* kv_new, const uint16_t* ring,
                                    int32_t cap, const uint16_t* entries, int32_t kind, int32_t m, const int32_t* sel,
                                    int32_t K, const float* sinks, int64_t N0, int32_t S, int32_t H, int32_t d,
                                    int32_t W, float scale, int64_t short_rows, int32_t impl, void* work,
                                    int64_t work_bytes, float* out) {
    DS4J_CHECK_CTX(ctx);
    const char* fn = "ds4j_attention_f16_operands";
    DS4J_ARG(impl == DS4J_F16OPS_AUTO || impl == DS4J_F16OPS_PORTABLE || impl == DS4J_F16OPS_WHOLE, "%s: unknown impl %d",
             fn, impl);
    const F16OpsPlan p = f16ops_plan(ctx, kind, m, K, N0, S, H, d, W, short_rows, impl);
    // queries at or under short_rows (all of them without tensor cores): F32 arithmetic on the F16 rows
    if (p.s0 > 0 || !p.mma) {
        const int32_t rc = launch_attention<uint16_t>(ctx, fn, q, kv_new, ring, cap, entries, kind, m, sel, K, sinks, N0,
                                                      p.mma ? p.s0 : S, H, d, W, scale, out);
        if (rc != DS4J_OK || !p.mma) return rc;
    }
#if defined(DS4J_HAVE_MMA)
    DS4J_ARG(q && kv_new && sinks && out && S >= 0 && H > 0 && W > 0 && N0 >= 0, "%s: bad arguments", fn);
    DS4J_ARG(N0 == 0 || (ring && cap >= W - 1), "%s: ring of %d rows cannot hold the window", fn, cap);
    DS4J_ARG(kind == DS4J_ATTN_SLIDING || (m > 0 && (entries || (N0 + S) / m == 0)), "%s: compressed layer without entries",
             fn);
    DS4J_ARG(kind != DS4J_ATTN_CSA || (K > 0 && (sel || (N0 + S) / m <= K)), "%s: CSA without selections", fn);
    DS4J_ARG(p.work == 0 || (work && work_bytes >= p.work), "%s: work memory of %lld bytes < %lld needed", fn,
             (long long)work_bytes, (long long)p.work);
    const int HB = (H + TC_ROWS - 1) / TC_ROWS;
    const int nq = S - p.s0;
    DS4J_ARG((int64_t)nq * HB <= 0x7fffffff && p.nmax <= 65535, "%s: S %d too large for one launch", fn, S);
    const size_t smem = tc_smem(d);
    dim3 grid((unsigned)(nq * HB), (unsigned)p.nmax);
    float* part = (float*)work;
#define DS4J_TC_LAUNCH(DD)                                                                                          \
    do {                                                                                                            \
        static bool attr_set[64];                                                                                   \
        if (ctx->device < 0 || ctx->device >= 64 || !attr_set[ctx->device]) {                                       \
            cudaError_t e_ = cudaFuncSetAttribute(tc_attention_kernel<DD>, cudaFuncAttributeMaxDynamicSharedMemorySize, \
                                                  (int)smem);                                                       \
            if (e_ != cudaSuccess) return fail_hip(e_, "ds4j_attention_f16_operands: shared memory opt-in");         \
            if (ctx->device >= 0 && ctx->device < 64) attr_set[ctx->device] = true;                                 \
        }                                                                                                           \
        tc_attention_kernel<DD><<<grid, TC_THREADS, smem, ctx->stream>>>(q, kv_new, ring, cap, entries, kind, m, sel, K, \
                                                                         sinks, N0, S, H, W, scale, p.s0, p.ns_max,  \
                                                                         part, out);                                 \
    } while (0)
    switch (d) {
        case 64: DS4J_TC_LAUNCH(64); break;
        case 128: DS4J_TC_LAUNCH(128); break;
        case 256: DS4J_TC_LAUNCH(256); break;
        default: DS4J_TC_LAUNCH(512); break;
    }
#undef DS4J_TC_LAUNCH
    DS4J_LAUNCHED("attention (tensor cores)");
    if (p.nmax > 1) {
        tc_combine_kernel<<<(unsigned)((int64_t)nq * H), 128, 0, ctx->stream>>>(part, p.nmax, kind, m, K, N0, S, W, p.s0,
                                                                               p.ns_max, H, d, sinks, out);
        DS4J_LAUNCHED("attention combine");
    }
    return DS4J_OK;
#else
    (void)work;
    (void)work_bytes;
    return DS4J_OK;
#endif
}

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


int32_t ds4j_rope_at(ds4j_ctx* ctx, float* x, int32_t S, int32_t heads, int32_t width, int32_t rope_dim,
                     const float* inv_freq, const int64_t* pos, int32_t inverse) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && inv_freq && pos && S >= 0 && heads > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= width,
             "ds4j_rope_at: bad arguments (heads %d, width %d, rope_dim %d)", heads, width, rope_dim);
    if (S == 0) return DS4J_OK;
    rope_kernel<<<grid_for((int64_t)S * heads * (rope_dim / 2)), 256, 0, ctx->stream>>>(x, S, heads, width, rope_dim,
                                                                                        inv_freq, 0, 0, pos, inverse);
    DS4J_LAUNCHED("rope_at");
    return DS4J_OK;
}

int32_t ds4j_rmsnorm_rope_at(ds4j_ctx* ctx, float* x, const float* weight, int32_t rows, int32_t n, float eps,
                             int32_t rope_dim, const float* inv_freq, const int64_t* pos, int32_t rows_per_pos,
                             int32_t round_f16) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && inv_freq && pos && rows >= 0 && n > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= n &&
                 rows_per_pos > 0,
             "ds4j_rmsnorm_rope_at: bad arguments (rows %d, n %d, rope_dim %d, rows_per_pos %d)", rows, n, rope_dim,
             rows_per_pos);
    if (rows == 0) return DS4J_OK;
    rmsnorm_rope_kernel<<<rows, 256, 0, ctx->stream>>>(x, weight, n, eps, rope_dim, inv_freq, 0, pos, rows_per_pos,
                                                       round_f16);
    DS4J_LAUNCHED("rmsnorm_rope_at");
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


int32_t ds4j_attention_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views, int32_t n,
                            const float* q, const float* kv_new, int32_t kind, int32_t m, const int32_t* sel, int32_t K,
                            const float* sinks, int32_t H, int32_t d, int32_t W, float scale, float* out) {
    DS4J_CHECK_CTX(ctx);
    return attention_seqs_impl<uint16_t>(ctx, "ds4j_attention_seqs", host_views, views, n, q, kv_new, kind, m, sel, K,
                                         sinks, H, d, W, scale, out);
}

int32_t ds4j_attention_f32_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views, int32_t n,
                                const float* q, const float* kv_new, int32_t kind, int32_t m, const int32_t* sel,
                                int32_t K, const float* sinks, int32_t H, int32_t d, int32_t W, float scale, float* out) {
    DS4J_CHECK_CTX(ctx);
    return attention_seqs_impl<float>(ctx, "ds4j_attention_f32_seqs", host_views, views, n, q, kv_new, kind, m, sel, K,
                                      sinks, H, d, W, scale, out);
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
