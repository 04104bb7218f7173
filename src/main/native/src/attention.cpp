// Attention with sink over raw window rows and compressed entries (spec 3.4 step 5, key set 3.7): the key set of a
// query; the reference kernel (one block per head and query, and the portable path of the F16-operand attention); the
// split FFMA kernels and their combine (ds4j_attention, ds4j_attention_f32, ds4j_attention_seqs: decode, verify,
// several sequences); the F16-operand tensor-core kernel of decode and verify queries above the short-context
// threshold and its combine (ds4j_attention_f16_operands, on F16 rows in place or, _f32, on F32 copies of them); their
// launches, and the key counts the Java side sizes buffers by
// (ds4j_attention_rows, ds4j_attention_f16_operands_work).
#include "ops.h"

namespace ds4j {

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
 * the query has fewer ranges than c + 1 or more than max_rows keys.
 */
template <typename T, int NT>
__device__ __forceinline__ void at_split_body(const float* q, const float* kv_new, const T* ring, int cap,
                                              const T* entries, int kind, int m, const int32_t* sel, int K,
                                              const float* sinks, int64_t N0, int H, int d, int W, float scale,
                                              float* out, float* part, float* ml, int nsmax, int64_t slot, int s,
                                              int g, int c, int64_t max_rows = INT64_MAX) {
    Keys<T> k;
    const int nk = query_keys(k, kv_new, ring, cap, entries, kind, m, sel, K, N0, s, d, W);
    const AtSplit sp = at_split(nk);
    if (c >= sp.nsplit || nk > max_rows) return;
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
constexpr int AT_COMBINE_U = 8;  // ranges whose partials a thread loads before it adds them

__device__ __forceinline__ void at_combine_body(const float* part, const float* ml, int nsmax, int nsplit, int64_t slot_h,
                                                float sink, int d, float* orow) {
    // One block a row of a few ranges: its time is a chain of round trips to memory. The ranges' maxima and sums are
    // fetched once, one a thread, into shared memory, and each thread takes four adjacent columns with one 16-byte load
    // a range, issuing AT_COMBINE_U ranges' loads before it adds them. Every value, operation and order is that of one
    // thread walking the ranges column by column, so the sums are the same bits.
    __shared__ float mls[2 * AT_NS_MAX];
    __shared__ float wts[AT_NS_MAX + 1];  // e^(m_c - M), then the denominator
    const float* mlr = ml + slot_h * nsmax * 2;
    for (int c = threadIdx.x; c < 2 * nsplit; c += blockDim.x) mls[c] = mlr[c];
    __syncthreads();
    float M = sink;
    for (int c = 0; c < nsplit; c++) M = fmaxf(M, mls[2 * c]);
    for (int c = threadIdx.x; c < nsplit; c += blockDim.x) wts[c] = exp_d(sub(mls[2 * c], M));
    __syncthreads();
    if (threadIdx.x == 0) {
        float L = exp_d(sub(sink, M));
        for (int c = 0; c < nsplit; c++) L = add(L, mul(wts[c], mls[2 * c + 1]));
        wts[AT_NS_MAX] = L;
    }
    __syncthreads();
    const float L = wts[AT_NS_MAX];
    const float* pr = part + slot_h * nsmax * d;
    if ((((uintptr_t)pr | (uintptr_t)orow) & 15) != 0 || (d & 3) != 0) {
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            float acc = 0.f;
            for (int c = 0; c < nsplit; c++) acc = add(acc, mul(wts[c], pr[(int64_t)c * d + i]));
            orow[i] = acc / L;
        }
        return;
    }
    for (int i = threadIdx.x; i < d / 4; i += blockDim.x) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int c0 = 0; c0 < nsplit; c0 += AT_COMBINE_U) {
            const int n = nsplit - c0 < AT_COMBINE_U ? nsplit - c0 : AT_COMBINE_U;
            float4 p[AT_COMBINE_U];
#pragma unroll
            for (int u = 0; u < AT_COMBINE_U; u++)
                if (u < n) p[u] = reinterpret_cast<const float4*>(pr + (int64_t)(c0 + u) * d)[i];
#pragma unroll
            for (int u = 0; u < AT_COMBINE_U; u++) {
                if (u < n) {
                    const float w = wts[c0 + u];
                    acc.x = add(acc.x, mul(w, p[u].x));
                    acc.y = add(acc.y, mul(w, p[u].y));
                    acc.z = add(acc.z, mul(w, p[u].z));
                    acc.w = add(acc.w, mul(w, p[u].w));
                }
            }
        }
        reinterpret_cast<float4*>(orow)[i] = make_float4(acc.x / L, acc.y / L, acc.z / L, acc.w / L);
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

/**
 * at_split_kernel over sequences: grid (nsmax, ceil(H/AT_HG) * max_s, views); partial slot = view * max_s + s. Queries
 * of more than max_rows keys are left alone (tc_attention_seqs_kernel runs them).
 */
template <typename T, int NT>
__global__ void __launch_bounds__(NT)
at_split_seqs_kernel(const ds4j_seq_view* views, const float* q, const float* kv_new, int kind, int m,
                     const int32_t* sel, int K, const float* sinks, int H, int d, int W, float scale, int max_s,
                     float* part, float* ml, int nsmax, int64_t max_rows, float* out) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.z];
    const int G = (H + AT_HG - 1) / AT_HG;
    const int s = blockIdx.y / G;
    if (s >= v.S) return;
    const int64_t r0 = v.row0;
    at_split_body<T, NT>(q + r0 * H * d, kv_new + r0 * d, (const T*)v.ring, v.cap, (const T*)v.store, kind, m,
                     sel ? sel + r0 * K : nullptr, K, sinks, v.N0, H, d, W, scale, out + r0 * H * d, part, ml, nsmax,
                     (int64_t)blockIdx.z * max_s + s, s, blockIdx.y % G, blockIdx.x, max_rows);
}

/** at_combine_kernel over sequences: grid (H, max_s, views); queries of more than max_rows keys left alone. */
__global__ void at_combine_seqs_kernel(const ds4j_seq_view* views, const float* part, const float* ml, int nsmax,
                                       int kind, int m, int K, int W, int max_s, int H, int d, const float* sinks,
                                       int64_t max_rows, float* out) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.z];
    const int s = blockIdx.y, h = blockIdx.x;
    if (s >= v.S) return;
    const int64_t nk = attended_rows(kind, m, K, v.N0 + s, W);
    if (nk > max_rows) return;
    const int nsplit = at_split(nk).nsplit;
    if (nsplit == 1) return;
    const int64_t slot = (int64_t)blockIdx.z * max_s + s;
    at_combine_body(part, ml, nsmax, nsplit, slot * H + h, sinks[h], d,
                    out + ((int64_t)v.row0 + s) * H * d + (int64_t)h * d);
}
// ------------------------------------------------------------------------------------------- end of split attention

// ------------------------------------------------------------------------------------------- F16-operand attention
//
// ds4j_attention_f16_operands: decode and verify attention above the short-context threshold, on both verify paths
// (the control's verify steps through ds4j_attention_f16_operands_f32, on its F32 copies). Same key set and masks per
// query as attention_kernel, the F16 cache rows read as tensor-core operands (exact: they are F16 values). The F32
// side of each product keeps F32 accuracy: every query row is scaled by a power of two that puts
// its largest |value| in [2^14, 2^15) and split into F16 hi + lo parts, and every probability (at most 1) is scaled
// by 2^14 and split likewise; the two MMAs per product accumulate in F32 and the scalings are undone exactly. The hi
// + lo pair carries 22 significant bits, so each product term is within about 2^-22 relative of the F32 one and the
// output matches plain F32 attention (attention_kernel) to F32 rounding noise, not F16 rounding.
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
 * T: the cache rows' element type: uint16_t, the F16 rows read in place (cp.async into the key tile); float, F32 copies
 * of them (the control's conversion), rounded back to F16 on their way into the tile, which is exact, so both give the
 * same tiles and the same output bit for bit.
 *
 * Block (query s of a sequence at positions N0 .., heads h0 .. h0+63, key range c): keys [c*per, min(nk_s, (c+1)*per))
 * of query s's key set, where nsplit and per are tc_split(nk_s, ns_max); nothing to do (a uniform return) when c >=
 * nsplit or nk_s <= min_rows (those queries run the F32 kernel). q, kv_new, sel and out are the sequence's rows (row s
 * of q / out holds H heads of D). A query with one range writes its rows of out; otherwise its ranges write partials:
 * O at part[(c*SH + pslot*H + h)*D ..], (m, l) at part[nmax*SH*D + (c*SH + pslot*H + h)*2 ..] (SH: the launch's partial
 * slots times H), for tc_combine_body. Warp w: row tile w&3 (16 heads); in Q K^T keys (w>>2)*16 .. +16 of the tile, in
 * P V output columns (w>>2)*D/2 .. +D/2.
 */
template <int D, typename T>
__device__ __forceinline__ void tc_attention_body(const float* q, const float* kv_new, const T* ring, int cap,
                                                  const T* entries, int kind, int m, const int32_t* sel, int K,
                                                  const float* sinks, int64_t N0, int H, int W, float scale, int ns_max,
                                                  int64_t min_rows, int s, int h0, int c, float* part, int64_t pslot,
                                                  int64_t SH, int nmax, float* out) {
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

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;

    Keys<T> k;
    const int nk = query_keys(k, kv_new, ring, cap, entries, kind, m, sel, K, N0, s, D, W);
    const TcSplit sp = tc_split(nk, ns_max);
    if (c >= sp.nsplit || nk <= min_rows) return;  // uniform over the block
    const int kbeg = c * sp.per, kend = min(nk, kbeg + sp.per);

    // Q block as hi + lo of each row scaled by 2^t (rows past H are zero). Warp w takes rows w*QRW .. +QRW, QRB at a
    // time: each lane loads its float4 columns lane + 32j of the batch's rows (all in flight: one round trip a batch,
    // each value read once), the row's largest |value| by shuffles (a max is the same in any order, so t is too),
    // then splits what it holds. The staging of a block that computes a single tile (a decode query's key range) is
    // most of its time, so its latency is what this order saves.
    {
        constexpr int QF = D / 4, QV = (QF + 31) / 32;           // float4 a row, a lane's float4 of a row
        constexpr int QRW = TC_ROWS / (TC_THREADS / 32), QRB = 4; // rows a warp, rows a batch
        static_assert(QRW % QRB == 0, "whole batches of rows");
#pragma unroll 1
        for (int rb = 0; rb < QRW; rb += QRB) {
            float4 v[QRB][QV];
#pragma unroll
            for (int i = 0; i < QRB; i++) {
                const int h = h0 + warp * QRW + rb + i;
                const float4* qr = reinterpret_cast<const float4*>(q + ((int64_t)s * H + (h < H ? h : 0)) * D);
#pragma unroll
                for (int j = 0; j < QV; j++) {
                    const int c4 = lane + 32 * j;
                    v[i][j] = h < H && c4 < QF ? qr[c4] : make_float4(0.f, 0.f, 0.f, 0.f);
                }
            }
#pragma unroll
            for (int i = 0; i < QRB; i++) {
                const int r = warp * QRW + rb + i;
                float mx = 0.f;
#pragma unroll
                for (int j = 0; j < QV; j++)
                    mx = fmaxf(mx, fmaxf(fmaxf(fabsf(v[i][j].x), fabsf(v[i][j].y)), fmaxf(fabsf(v[i][j].z), fabsf(v[i][j].w))));
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, DS4J_SHFL_XOR(mx, o));
                // 2^t puts the largest |value| in [2^14, 2^15): hi cannot overflow, lo stays normal down to 2^-28 of it
                int t = 0;
                if (mx > 0.f && mx <= 3.402823466e38f) {
                    const int ex = (int)((__float_as_uint(mx) >> 23) & 0xffu) - 127;
                    t = min(126, max(-126, 14 - ex));
                }
                const float up = __uint_as_float((uint32_t)(127 + t) << 23), down = __uint_as_float((uint32_t)(127 - t) << 23);
                if (lane == 0) sfS[r] = mul(scale, down);
#pragma unroll
                for (int j = 0; j < QV; j++) {
                    const int c4 = lane + 32 * j;
                    if (c4 >= QF) continue;
                    uint32_t h01, l01, h23, l23;
                    split2(mul(v[i][j].x, up), mul(v[i][j].y, up), h01, l01);
                    split2(mul(v[i][j].z, up), mul(v[i][j].w, up), h23, l23);
                    *reinterpret_cast<uint2*>(Qh + r * ST + c4 * 4) = make_uint2(h01, h23);
                    *reinterpret_cast<uint2*>(Ql + r * ST + c4 * 4) = make_uint2(l01, l23);
                }
            }
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
            } else if ((a & 1u) || sizeof(T) == 4) {  // a row of this step or an F32 copy, F32 holding F16 values: exact
                const float4* f = reinterpret_cast<const float4*>((const float*)(a & ~(uintptr_t)1) + c8 * 8);
                const float4 x = f[0], y = f[1];
                *reinterpret_cast<uint4*>(dst) = make_uint4(pack2(f32_to_f16(x.x), f32_to_f16(x.y)),
                                                            pack2(f32_to_f16(x.z), f32_to_f16(x.w)),
                                                            pack2(f32_to_f16(y.x), f32_to_f16(y.y)),
                                                            pack2(f32_to_f16(y.z), f32_to_f16(y.w)));
            } else {
                cp_async16(dst, (const uint16_t*)a + c8 * 8);  // an F16 cache row in place
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
    const bool direct = sp.nsplit == 1;
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int r = rt * 16 + gid + 8 * hh, h = h0 + r;
        if (h >= H) continue;
        const int64_t prow = pslot * H + h;
        const float mr = rmS[r], lr = rlS[r];
        float a = TC_P_DOWN;  // O holds 2^14 P V
        float* dst;
        if (direct) {
            const float sink = sinks[h], M = fmaxf(mr, sink);
            const float wgt = mr == -INFINITY ? 0.f : expf(mr - M);
            a = mul(TC_P_DOWN, wgt / (lr * wgt + expf(sink - M)));
            dst = out + ((int64_t)s * H + h) * D;
        } else {
            dst = part + ((int64_t)c * SH + prow) * D;
            if (half == 0 && tig == 0) {
                float* ml = part + (int64_t)nmax * SH * D + ((int64_t)c * SH + prow) * 2;
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

/**
 * Grid ((S - s0) * ceil(H/64), most ranges of a query): queries s0 .. S-1 of one sequence (tc_attention_body), partial
 * slot = query.
 */
template <int D, typename T>
__global__ void __launch_bounds__(TC_THREADS, 1)
tc_attention_kernel(const float* q, const float* kv_new, const T* ring, int cap, const T* entries, int kind, int m,
                    const int32_t* sel, int K, const float* sinks, int64_t N0, int S, int H, int W, float scale, int s0,
                    int ns_max, float* part, float* out) {
    DS4J_AWAIT_PREVIOUS();
    const int HB = (H + TC_ROWS - 1) / TC_ROWS;
    const int s = s0 + (int)(blockIdx.x / HB);
    tc_attention_body<D, T>(q, kv_new, ring, cap, entries, kind, m, sel, K, sinks, N0, H, W, scale, ns_max, -1, s,
                            (int)(blockIdx.x % HB) * TC_ROWS, (int)blockIdx.y, part, s, (int64_t)S * H, (int)gridDim.y,
                            out);
}

/**
 * tc_attention_kernel over sequences: grid (max_s * ceil(H/64), most ranges of a query, views); the queries of more
 * than min_rows keys (the others run at_split_seqs_kernel), partial slot = view * max_s + s.
 */
template <int D, typename T>
__global__ void __launch_bounds__(TC_THREADS, 1)
tc_attention_seqs_kernel(const ds4j_seq_view* views, const float* q, const float* kv_new, int kind, int m,
                         const int32_t* sel, int K, const float* sinks, int H, int W, float scale, int64_t min_rows,
                         int ns_max, int max_s, float* part, float* out) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.z];
    const int HB = (H + TC_ROWS - 1) / TC_ROWS;
    const int s = (int)(blockIdx.x / HB);
    if (s >= v.S) return;
    const int64_t r0 = v.row0;
    tc_attention_body<D, T>(q + r0 * H * D, kv_new + r0 * D, (const T*)v.ring, v.cap, (const T*)v.store, kind, m,
                            sel ? sel + r0 * K : nullptr, K, sinks, v.N0, H, W, scale, ns_max, min_rows, s,
                            (int)(blockIdx.x % HB) * TC_ROWS, (int)blockIdx.y, part, (int64_t)blockIdx.z * max_s + s,
                            (int64_t)gridDim.z * max_s * H, (int)gridDim.y, out + r0 * H * D);
}
#endif  // DS4J_HAVE_MMA

/**
 * Adds the nsplit (> 1) key ranges of partial row `row` (slot * H + h) that tc_attention_body wrote, with the sink:
 * orow = sum_c e^(m_c-M) O_c / (sum_c e^(m_c-M) l_c + e^(sink-M)), the ranges in order. Rows of single-range queries
 * were written by the attention kernel and are left alone by the kernels below. nmax: the attention grid's range count
 * (the partials' stride); SH: its partial slots times H.
 */
constexpr int TC_COMBINE_W = 256;  // ranges whose max, sum and weight a combine block keeps in shared memory
constexpr int TC_COMBINE_U = 8;    // ranges whose partials a thread loads before it adds them

__device__ __forceinline__ void tc_combine_body(const float* part, int nmax, int64_t SH, int64_t row, int nsplit,
                                                float sink, int d, float* orow) {
    // One block a row, so every step here is a chain of round trips to memory that nothing else hides: the ranges'
    // maxima and sums are fetched once, one a thread, and each thread issues TC_COMBINE_U ranges' partials (16 bytes
    // each) before it adds them. The values, the operations and their order are those of one thread walking the
    // ranges one by one, so the sums are the same bits. More than TC_COMBINE_W ranges read their max and sum from
    // memory where used; a row not 16-byte aligned (or d not a multiple of 4) takes one column a thread.
    __shared__ float mls[2 * TC_COMBINE_W], wts[TC_COMBINE_W];
    const float* ml = part + (int64_t)nmax * SH * d;
    const bool kept = nsplit <= TC_COMBINE_W;
    if (kept) {
        for (int c = threadIdx.x; c < nsplit; c += blockDim.x) {
            mls[2 * c] = ml[((int64_t)c * SH + row) * 2];
            mls[2 * c + 1] = ml[((int64_t)c * SH + row) * 2 + 1];
        }
        __syncthreads();
    }
    const auto mc_of = [&](int c) { return kept ? mls[2 * c] : ml[((int64_t)c * SH + row) * 2]; };
    const auto lc_of = [&](int c) { return kept ? mls[2 * c + 1] : ml[((int64_t)c * SH + row) * 2 + 1]; };
    float M = sink;
    for (int c = 0; c < nsplit; c++) M = fmaxf(M, mc_of(c));
    float L = expf(sink - M);
    for (int c = 0; c < nsplit; c++) {
        const float mc = mc_of(c);
        if (mc != -INFINITY) L += expf(mc - M) * lc_of(c);
    }
    const float inv = 1.f / L;
    // each range's weight e^(m_c - M) once a row (-1: a range whose max is -inf, left out), not once a column
    const auto weight = [&](int c) {
        const float mc = mc_of(c);
        return mc != -INFINITY ? expf(mc - M) : -1.f;
    };
    if (kept) {
        for (int c = threadIdx.x; c < nsplit; c += blockDim.x) wts[c] = weight(c);
        __syncthreads();
    }
    const auto wt = [&](int c) { return kept ? wts[c] : weight(c); };
    const float* p0 = part + row * d;  // range c's partial row: p0 + c * SH * d
    if ((((uintptr_t)p0 | (uintptr_t)orow) & 15) != 0 || (d & 3) != 0) {
        for (int i = threadIdx.x; i < d; i += blockDim.x) {
            float acc = 0.f;
            for (int c = 0; c < nsplit; c++) {
                const float w = wt(c);
                if (w != -1.f) acc += w * p0[(int64_t)c * SH * d + i];  // a weight is never negative (NaN included)
            }
            orow[i] = acc * inv;
        }
        return;
    }
    for (int i = threadIdx.x; i < d / 4; i += blockDim.x) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int c0 = 0; c0 < nsplit; c0 += TC_COMBINE_U) {
            const int n = nsplit - c0 < TC_COMBINE_U ? nsplit - c0 : TC_COMBINE_U;
            float4 p[TC_COMBINE_U];
            float w[TC_COMBINE_U];
#pragma unroll
            for (int u = 0; u < TC_COMBINE_U; u++) {
                w[u] = u < n ? wt(c0 + u) : -1.f;
                if (w[u] != -1.f) p[u] = reinterpret_cast<const float4*>(p0 + (int64_t)(c0 + u) * SH * d)[i];
            }
#pragma unroll
            for (int u = 0; u < TC_COMBINE_U; u++) {
                if (w[u] != -1.f) {  // a weight is never negative (NaN included)
                    acc.x += w[u] * p[u].x;
                    acc.y += w[u] * p[u].y;
                    acc.z += w[u] * p[u].z;
                    acc.w += w[u] * p[u].w;
                }
            }
        }
        reinterpret_cast<float4*>(orow)[i] = make_float4(acc.x * inv, acc.y * inv, acc.z * inv, acc.w * inv);
    }
}

/** Grid ((S - s0) * H): the rows of queries s0 .. S-1 of one sequence, partial slot = query. */
__global__ void tc_combine_kernel(const float* part, int nmax, int kind, int m, int K, int64_t N0, int S, int W, int s0,
                                  int ns_max, int H, int d, const float* sinks, float* out) {
    DS4J_AWAIT_PREVIOUS();
    const int64_t row = (int64_t)s0 * H + blockIdx.x;
    const int64_t s = row / H;
    const int nsplit = tc_split(attended_rows(kind, m, K, N0 + s, W), ns_max).nsplit;
    if (nsplit == 1) return;
    tc_combine_body(part, nmax, (int64_t)S * H, row, nsplit, sinks[row % H], d, out + row * d);
}

/**
 * tc_combine_kernel over sequences: grid (H, max_s, views); the rows of queries of more than min_rows keys and more
 * than one range, partial slot = view * max_s + s.
 */
__global__ void tc_combine_seqs_kernel(const ds4j_seq_view* views, const float* part, int nmax, int kind, int m, int K,
                                       int W, int64_t min_rows, int ns_max, int max_s, int H, int d, const float* sinks,
                                       float* out) {
    DS4J_AWAIT_PREVIOUS();
    const ds4j_seq_view v = views[blockIdx.z];
    const int s = (int)blockIdx.y, h = (int)blockIdx.x;
    if (s >= v.S) return;
    const int64_t nk = attended_rows(kind, m, K, v.N0 + s, W);
    if (nk <= min_rows) return;
    const int nsplit = tc_split(nk, ns_max).nsplit;
    if (nsplit == 1) return;
    const int64_t slot = (int64_t)blockIdx.z * max_s + s;
    tc_combine_body(part, nmax, (int64_t)gridDim.z * max_s * H, slot * H + h, nsplit, sinks[h], d,
                    out + ((int64_t)v.row0 + s) * H * d + (int64_t)h * d);
}

/** Grants a kernel more than the default 48 KB of dynamic shared memory (once per device and size reached). */
static int32_t smem_opt_in(ds4j_ctx* ctx, const void* fn, int64_t smem, int64_t* granted) {
    const int dv = ctx->device >= 0 && ctx->device < 64 ? ctx->device : 0;
    if (smem <= granted[dv]) return DS4J_OK;
    hipError_t e = hipFuncSetAttribute(fn, hipFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != hipSuccess) return fail_hip(e, "attention: shared memory opt-in");
    granted[dv] = smem;
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

/**
 * Checks the arguments of ds4j_attention (and its variants) and launches the split kernels (launch_split) where
 * they run for d on this device, else attention_kernel<T>.
 */
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

/**
 * Most key ranges of a query on the tensor-core kernel outside a prefill: as many blocks as the device has
 * multiprocessors for one query's 64-head blocks. A function of the device and H only, so a query's split (and its
 * numbers) are the same alone, among S queries or among other sequences.
 */
static int tc_ns_max(ds4j_ctx* ctx, int H) {
    const int HB = (H + TC_ROWS - 1) / TC_ROWS;
    const int n = device_limits(ctx->device).sms / HB;
    return n < 1 ? 1 : n;
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
    // the same condition as ds4j_attention_f16_operands_seqs's: a device whose blocks cannot hold the kernel's shared
    // memory runs every query on the F32 kernel instead of failing
    p.mma = (impl == DS4J_F16OPS_AUTO || impl == DS4J_F16OPS_WHOLE) && (d == 64 || d == 128 || d == 256 || d == 512) &&
            (int64_t)tc_smem(d) <= device_limits(ctx->device).smem_optin;
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
    p.ns_max = impl == DS4J_F16OPS_WHOLE ? 1 : tc_ns_max(ctx, H);
    for (int s = p.s0; s < S; s++) {
        const int n = tc_split(attended_rows(kind, m, K, N0 + s, W), p.ns_max).nsplit;
        if (n > p.nmax) p.nmax = n;
    }
    p.work = p.nmax > 1 ? (int64_t)p.nmax * S * H * ((int64_t)d + 2) * 4 : 0;
    return p;
}

}  // namespace ds4j

using namespace ds4j;

/**
 * Checks each view of a several-sequence attention call (its ring holds the window, a compressed layer has entries, CSA
 * has selections where a query needs them) and finds the most compressed entries a query of the call attends: the
 * bound under ds4j_seqs_bounds (ctx->fixed_grids), else the views' own largest count.
 */
static int32_t attention_views(ds4j_ctx* ctx, const char* fn, const ds4j_seq_view* host_views, int32_t n, int32_t kind,
                               int32_t m, const int32_t* sel, int32_t K, int32_t W, int64_t* maxc) {
    int64_t most = 0;
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        const int64_t N0 = v.N0, S = v.S;
        DS4J_ARG(N0 == 0 || (v.ring && v.cap >= W - 1), "%s: view %d: ring of %d rows cannot hold the window", fn, i, v.cap);
        DS4J_ARG(kind == DS4J_ATTN_SLIDING || (m > 0 && (v.store || (N0 + S) / m == 0)),
                 "%s: view %d: compressed layer without entries", fn, i);
        DS4J_ARG(kind != DS4J_ATTN_CSA || (K > 0 && (sel || (N0 + S) / m <= K)), "%s: view %d: CSA without selections", fn, i);
        DS4J_ARG(!ctx->fixed_grids || N0 >= ctx->fixed_first,
                 "%s: view %d at position %lld, before the first position %lld (ds4j_seqs_bounds)", fn, i, (long long)N0,
                 (long long)ctx->fixed_first);
        int64_t c = 0;
        if (kind == DS4J_ATTN_HCA) c = (N0 + S) / m;
        else if (kind == DS4J_ATTN_CSA) c = (N0 + S) / m < K ? (N0 + S) / m : K;
        if (c > most) most = c;
    }
    if (ctx->fixed_grids) {  // ds4j_seqs_bounds: launch shapes and scratch for the bound, not for the present count
        const int64_t bound = kind == DS4J_ATTN_CSA ? K : kind == DS4J_ATTN_HCA ? ctx->fixed_entries : 0;
        DS4J_ARG(most <= bound, "%s: %lld compressed entries exceed the bound %lld (ds4j_seqs_bounds)", fn,
                 (long long)most, (long long)bound);
        most = bound;
    }
    *maxc = most;
    return DS4J_OK;
}

/**
 * ds4j_attention_seqs and its variants: the queries of at most max_rows keys (INT64_MAX: all) through the split kernels
 * where they run for d on this device (at_usable), else every query through attention_seqs_kernel.
 */
template <typename T>
static int32_t attention_seqs_impl(ds4j_ctx* ctx, const char* fn, const ds4j_seq_view* host_views,
                                   const ds4j_seq_view* views, int32_t n, const float* q, const float* kv_new, int32_t kind,
                                   int32_t m, const int32_t* sel, int32_t K, const float* sinks, int32_t H, int32_t d,
                                   int32_t W, float scale, float* out, int64_t max_rows = INT64_MAX) {
    int32_t max_s = 0;
    const int32_t vrc = check_views(fn, host_views, views, n, &max_s);
    if (vrc != DS4J_OK) return vrc;
    DS4J_ARG(q && kv_new && sinks && out && H > 0 && d > 0 && W > 0, "%s: bad arguments", fn);
    DS4J_ARG(kind == DS4J_ATTN_SLIDING || kind == DS4J_ATTN_CSA || kind == DS4J_ATTN_HCA, "%s: unknown kind %d", fn, kind);
    int64_t maxc = 0;
    const int32_t arc = attention_views(ctx, fn, host_views, n, kind, m, sel, K, W, &maxc);
    if (arc != DS4J_OK) return arc;
    if (measure_skip("attention")) return DS4J_OK;
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
                    views + v0, q, kv_new, kind, m, sel, K, sinks, H, d, W, scale, max_s, part, ml, nsmax, max_rows, out);
            else
                at_split_seqs_kernel<T, AT_THREADS><<<grid, AT_THREADS, (size_t)smem, ctx->stream>>>(
                    views + v0, q, kv_new, kind, m, sel, K, sinks, H, d, W, scale, max_s, part, ml, nsmax, max_rows, out);
            DS4J_LAUNCHED("attention_seqs (key ranges)");
            if (nsmax > 1) {
                at_combine_seqs_kernel<<<dim3((unsigned)H, (unsigned)max_s, (unsigned)nv), 128, 0, ctx->stream>>>(
                    views + v0, part, ml, nsmax, kind, m, K, W, max_s, H, d, sinks, max_rows, out);
                DS4J_LAUNCHED("attention_seqs combine");
            }
        }
        return DS4J_OK;
    }
    DS4J_ARG(max_rows == INT64_MAX, "%s: no split kernels for head width %d on this device", fn, d);
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

/**
 * ds4j_attention_f16_operands and its variant over F32 copies (T: the rows' element type, as tc_attention_body):
 * arguments checked here.
 */
template <typename T>
static int32_t f16ops_launch(ds4j_ctx* ctx, const char* fn, const float* q, const float* kv_new, const T* ring,
                             int32_t cap, const T* entries, int32_t kind, int32_t m, const int32_t* sel, int32_t K,
                             const float* sinks, int64_t N0, int32_t S, int32_t H, int32_t d, int32_t W, float scale,
                             int64_t short_rows, int32_t impl, void* work, int64_t work_bytes, float* out) {
    DS4J_ARG(impl == DS4J_F16OPS_AUTO || impl == DS4J_F16OPS_PORTABLE || impl == DS4J_F16OPS_WHOLE, "%s: unknown impl %d",
             fn, impl);
    const F16OpsPlan p = f16ops_plan(ctx, kind, m, K, N0, S, H, d, W, short_rows, impl);
    // queries at or under short_rows (all of them without tensor cores): F32 arithmetic on the rows
    if (p.s0 > 0 || !p.mma) {
        const int32_t rc = launch_attention<T>(ctx, fn, q, kv_new, ring, cap, entries, kind, m, sel, K, sinks, N0,
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
        static int64_t granted[64];                                                                                 \
        const int32_t rc_ = smem_opt_in(ctx, reinterpret_cast<const void*>(tc_attention_kernel<DD, T>),             \
                                        (int64_t)smem, granted);                                                    \
        if (rc_ != DS4J_OK) return rc_;                                                                             \
        tc_attention_kernel<DD, T><<<grid, TC_THREADS, smem, ctx->stream>>>(q, kv_new, ring, cap, entries, kind, m, \
                                                                            sel, K, sinks, N0, S, H, W, scale,      \
                                                                            p.s0, p.ns_max, part, out);             \
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

/**
 * ds4j_attention_f16_operands_seqs and its variant over F32 copies (T: the rows' element type, as tc_attention_body).
 */
template <typename T>
static int32_t f16ops_seqs_launch(ds4j_ctx* ctx, const char* fn, const ds4j_seq_view* host_views,
                                  const ds4j_seq_view* views, int32_t n, const float* q, const float* kv_new, int32_t kind,
                                  int32_t m, const int32_t* sel, int32_t K, const float* sinks, int32_t H, int32_t d,
                                  int32_t W, float scale, int64_t short_rows, float* out) {
    DS4J_ARG(short_rows >= 0, "%s: negative short_rows %lld", fn, (long long)short_rows);
#if defined(DS4J_HAVE_MMA)
    const bool mma = (d == 64 || d == 128 || d == 256 || d == 512) && at_usable(ctx, d) &&
                     (int64_t)tc_smem(d) <= device_limits(ctx->device).smem_optin;
#else
    const bool mma = false;
#endif
    // without tensor cores every query takes the F32 kernel, as ds4j_attention_f16_operands's portable path does
    if (!mma)
        return attention_seqs_impl<T>(ctx, fn, host_views, views, n, q, kv_new, kind, m, sel, K, sinks, H, d, W, scale,
                                      out);
#if defined(DS4J_HAVE_MMA)
    int32_t max_s = 0;
    const int32_t vrc = check_views(fn, host_views, views, n, &max_s);
    if (vrc != DS4J_OK) return vrc;
    DS4J_ARG(q && kv_new && sinks && out && H > 0 && W > 0, "%s: bad arguments", fn);
    DS4J_ARG(kind == DS4J_ATTN_SLIDING || kind == DS4J_ATTN_CSA || kind == DS4J_ATTN_HCA, "%s: unknown kind %d", fn, kind);
    int64_t maxc = 0;
    const int32_t arc = attention_views(ctx, fn, host_views, n, kind, m, sel, K, W, &maxc);
    if (arc != DS4J_OK) return arc;
    // which kernels have queries: under fixed grids (ds4j_seqs_bounds) from the bounds, whatever the positions
    const int ns_max = tc_ns_max(ctx, H);
    bool any_short = false, any_long = false;
    int nmax = 1;
    for (int32_t i = 0; i < n; i++) {
        const ds4j_seq_view& v = host_views[i];
        for (int s = 0; s < v.S; s++) {
            const int64_t nk = attended_rows(kind, m, K, v.N0 + s, W);
            if (nk <= short_rows) any_short = true;
            else {
                any_long = true;
                const int ns = tc_split(nk, ns_max).nsplit;
                if (ns > nmax) nmax = ns;
            }
        }
    }
    if (measure_skip("attention")) return DS4J_OK;
    if (ctx->fixed_grids) {
        // the grid for the bound (maxc): a query of at most W + maxc keys gets at most min(its tiles, ns_max) ranges;
        // its own split (tc_split of its key count) and so its numbers do not depend on the grid
        const int64_t tiles = (W + maxc + TC_KT - 1) / TC_KT;
        nmax = (int)(tiles < ns_max ? (tiles < 1 ? 1 : tiles) : ns_max);
        any_long = W + maxc > short_rows;  // no query under the bound has more keys than that
        // none before fixed_first, and a later query attends at least as many rows
        any_short = attended_rows(kind, m, K, ctx->fixed_first, W) <= short_rows;
    }
    // queries of at most short_rows keys: the F32 kernel, the control's numbers bit for bit
    if (any_short) {
        const int32_t rc = attention_seqs_impl<T>(ctx, fn, host_views, views, n, q, kv_new, kind, m, sel, K, sinks, H,
                                                  d, W, scale, out, short_rows);
        if (rc != DS4J_OK || !any_long) return rc;
    }
    const int HB = (H + TC_ROWS - 1) / TC_ROWS;
    DS4J_ARG((int64_t)max_s * HB <= 0x7fffffff && nmax <= 65535, "%s: S %d too large for one launch", fn, max_s);
    // partial slots: view * max_s + s; views in groups that keep the scratch within AT_SCRATCH_CAP
    const int64_t view_bytes = nmax > 1 ? (int64_t)max_s * H * nmax * (d + 2) * 4 : 0;
    int64_t per = view_bytes > 0 ? AT_SCRATCH_CAP / view_bytes : n;
    if (per < 1) per = 1;
    if (per > n) per = n;
    if (per > 65535) per = 65535;
    float* part = nullptr;
    if (view_bytes > 0) {
        const int32_t rc = at_scratch(ctx, view_bytes * per, &part);
        if (rc != DS4J_OK) return rc;
    }
    const size_t smem = tc_smem(d);
    for (int32_t v0 = 0; v0 < n; v0 += (int32_t)per) {
        const int nv = (int)(n - v0 < per ? n - v0 : per);
        const dim3 grid((unsigned)(max_s * HB), (unsigned)nmax, (unsigned)nv);
#define DS4J_TC_SEQS_LAUNCH(DD)                                                                                     \
    do {                                                                                                            \
        static int64_t granted[64];                                                                                 \
        const int32_t rc_ = smem_opt_in(ctx, reinterpret_cast<const void*>(tc_attention_seqs_kernel<DD, T>),        \
                                        (int64_t)smem, granted);                                                    \
        if (rc_ != DS4J_OK) return rc_;                                                                             \
        tc_attention_seqs_kernel<DD, T><<<grid, TC_THREADS, smem, ctx->stream>>>(views + v0, q, kv_new, kind, m,    \
                                                                                 sel, K, sinks, H, W, scale,        \
                                                                                 short_rows, ns_max, max_s, part,   \
                                                                                 out);                              \
    } while (0)
        switch (d) {
            case 64: DS4J_TC_SEQS_LAUNCH(64); break;
            case 128: DS4J_TC_SEQS_LAUNCH(128); break;
            case 256: DS4J_TC_SEQS_LAUNCH(256); break;
            default: DS4J_TC_SEQS_LAUNCH(512); break;
        }
#undef DS4J_TC_SEQS_LAUNCH
        DS4J_LAUNCHED("attention_seqs (tensor cores)");
        if (nmax > 1) {
            tc_combine_seqs_kernel<<<dim3((unsigned)H, (unsigned)max_s, (unsigned)nv), 128, 0, ctx->stream>>>(
                views + v0, part, nmax, kind, m, K, W, short_rows, ns_max, max_s, H, d, sinks, out);
            DS4J_LAUNCHED("attention_seqs combine (tensor cores)");
        }
    }
    return DS4J_OK;
#endif
}

extern "C" {

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
    return f16ops_launch<uint16_t>(ctx, "ds4j_attention_f16_operands", q, kv_new, ring, cap, entries, kind, m, sel, K,
                                   sinks, N0, S, H, d, W, scale, short_rows, impl, work, work_bytes, out);
}

int32_t ds4j_attention_f16_operands_f32(ds4j_ctx* ctx, const float* q, const float* kv_new, const float* ring,
                                        int32_t cap, const float* entries, int32_t kind, int32_t m, const int32_t* sel,
                                        int32_t K, const float* sinks, int64_t N0, int32_t S, int32_t H, int32_t d,
                                        int32_t W, float scale, int64_t short_rows, int32_t impl, void* work,
                                        int64_t work_bytes, float* out) {
    DS4J_CHECK_CTX(ctx);
    return f16ops_launch<float>(ctx, "ds4j_attention_f16_operands_f32", q, kv_new, ring, cap, entries, kind, m, sel, K,
                                sinks, N0, S, H, d, W, scale, short_rows, impl, work, work_bytes, out);
}

int32_t ds4j_attention_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views, int32_t n,
                            const float* q, const float* kv_new, int32_t kind, int32_t m, const int32_t* sel, int32_t K,
                            const float* sinks, int32_t H, int32_t d, int32_t W, float scale, float* out) {
    DS4J_CHECK_CTX(ctx);
    return attention_seqs_impl<uint16_t>(ctx, "ds4j_attention_seqs", host_views, views, n, q, kv_new, kind, m, sel, K,
                                         sinks, H, d, W, scale, out);
}

int32_t ds4j_attention_f16_operands_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views,
                                         int32_t n, const float* q, const float* kv_new, int32_t kind, int32_t m,
                                         const int32_t* sel, int32_t K, const float* sinks, int32_t H, int32_t d,
                                         int32_t W, float scale, int64_t short_rows, float* out) {
    DS4J_CHECK_CTX(ctx);
    return f16ops_seqs_launch<uint16_t>(ctx, "ds4j_attention_f16_operands_seqs", host_views, views, n, q, kv_new, kind,
                                        m, sel, K, sinks, H, d, W, scale, short_rows, out);
}

int32_t ds4j_attention_f16_operands_f32_seqs(ds4j_ctx* ctx, const ds4j_seq_view* host_views, const ds4j_seq_view* views,
                                             int32_t n, const float* q, const float* kv_new, int32_t kind, int32_t m,
                                             const int32_t* sel, int32_t K, const float* sinks, int32_t H, int32_t d,
                                             int32_t W, float scale, int64_t short_rows, float* out) {
    DS4J_CHECK_CTX(ctx);
    return f16ops_seqs_launch<float>(ctx, "ds4j_attention_f16_operands_f32_seqs", host_views, views, n, q, kv_new, kind,
                                     m, sel, K, sinks, H, d, W, scale, short_rows, out);
}

}  // extern "C"
