// Attention side of the forward (spec 3.4-3.7): RoPE, F16 rounding and ring stores of the MLA cache, attention with
// sink over raw window rows and compressed entries, compressor pooling, Lightning Indexer scores and top-k.
#include "common.h"

namespace ds4j {

__global__ void rope_kernel(float* x, int S, int heads, int width, int rope_dim, const float* inv_freq, int64_t pos0,
                            int64_t pos_step, int inverse) {
    const int half = rope_dim / 2;
    const int64_t total = (int64_t)S * heads * half;
    for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < total;
         idx += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(idx % half);
        const int64_t sh = idx / half;  // s * heads + h
        const int s = (int)(sh / heads);
        const float ft = (float)(pos0 + (int64_t)s * pos_step);
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

__global__ void rmsnorm_rope_kernel(float* x, const float* weight, int n, float eps, int rope_dim, const float* inv_freq,
                                    int64_t pos0, int rows_per_pos, int round16) {
    __shared__ double sh[32];
    float* xr = x + (int64_t)blockIdx.x * n;
    double ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i];
        ss += (double)mul(v, v);
    }
    ss = block_sum(ss, sh);
    const float inv = (float)(1.0 / sqrt((double)add((float)(ss / n), eps)));
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float u = mul(xr[i], inv);
        xr[i] = weight ? mul(weight[i], u) : u;
    }
    __syncthreads();
    const float ft = (float)(pos0 + blockIdx.x / rows_per_pos);
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

__global__ void round_f16_kernel(float* x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        x[i] = f16_to_f32(f32_to_f16(x[i]));
}

__global__ void ring_store_kernel(void* ring, int f16, int cap, int width, const float* rows, int64_t N0, int S,
                                  int64_t p0) {
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

/** The key set of one query (spec 3.7): raw rows p0 .. t, then compressed entries. */
struct Keys {
    const float* kv_new;
    const uint16_t* ring;
    const uint16_t* entries;
    const int32_t* sel;  // this query's row of selections, or null when the entries are 0 .. ncomp-1
    int64_t N0, p0;
    int cap, nraw, d;
};

/** Key j as a tagged address: an F32 row (a new token, bit 0 set) or an F16 row (cached raw row or entry). */
__device__ __forceinline__ uintptr_t key_row(const Keys& k, int j) {
    if (j < k.nraw) {
        const int64_t p = k.p0 + j;
        if (p >= k.N0) return (uintptr_t)(k.kv_new + (p - k.N0) * k.d) | 1u;
        return (uintptr_t)(k.ring + (p % k.cap) * k.d);
    }
    const int i = j - k.nraw;
    const int e = k.sel ? k.sel[i] : i;
    return (uintptr_t)(k.entries + (int64_t)e * k.d);
}

__device__ __forceinline__ float key_val(uintptr_t kp, int i) {
    return (kp & 1u) ? ((const float*)(kp & ~(uintptr_t)1))[i] : f16_to_f32(((const uint16_t*)kp)[i]);
}

constexpr int ATT_THREADS = 256;

/** Shared memory of one attention block: q [d], logits [nk], key addresses [nk]. */
static inline int64_t attention_smem(int d, int64_t nk) { return (int64_t)d * 4 + nk * 4 + nk * 8 + 8; }

__global__ void __launch_bounds__(ATT_THREADS)
attention_kernel(const float* q, const float* kv_new, const uint16_t* ring, int cap, const uint16_t* entries, int kind,
                 int m, const int32_t* sel, int K, const float* sinks, int64_t N0, int H, int d, int W, float scale,
                 int nk_max, float* out) {
    extern __shared__ float sm[];
    __shared__ float red[32];
    const int h = blockIdx.x, s = blockIdx.y;
    const int64_t t = N0 + s;
    uintptr_t* kp = reinterpret_cast<uintptr_t*>(sm);  // [nk_max], 8-byte aligned at the start
    float* qs = sm + 2 * nk_max;                       // [d]
    float* lg = qs + d;                                // [nk]
    Keys k;
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
    const int nk = k.nraw + ncomp;
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
            const uint16_t* f16 = (const uint16_t*)p;
            for (int i = lane; i < d; i += WARP) acc += qs[i] * f16_to_f32(f16[i]);
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
        for (int j = 0; j < nk; j++) acc = add(acc, mul(mul(lg[j], inv), key_val(kp[j], i)));
        orow[i] = acc;
    }
}

/** A compressor row (values a or logits z) of position p: this step's rows or the ring. */
__device__ __forceinline__ const float* comp_row(const float* ring, const float* fresh, int64_t p, int64_t N0, int cap,
                                                 int cw) {
    return p >= N0 ? fresh + (p - N0) * cw : ring + (p % cap) * cw;
}

__global__ void compress_pool_kernel(const float* ring_a, const float* ring_z, int cap, const float* a_new,
                                     const float* z_new, int64_t N0, int m, int w, int overlap, const float* pb,
                                     const float* norm_w, float eps, const float* inv_freq, int rope_dim,
                                     uint16_t* entries) {
    extern __shared__ float pooled[];  // [w]
    __shared__ double red[32];
    const int64_t win = N0 / m + blockIdx.x;
    const int cw = overlap ? 2 * w : w;
    const int64_t prev = (win - 1) * m, cur = win * m;
    const bool has_prev = overlap && win > 0;
    const int voff = overlap ? w : 0;
    for (int ch = threadIdx.x; ch < w; ch += blockDim.x) {
        float mx = -INFINITY;
        if (has_prev)
            for (int j = 0; j < m; j++)
                mx = fmaxf(mx, add(comp_row(ring_z, z_new, prev + j, N0, cap, cw)[ch], pb[j * cw + ch]));
        for (int j = 0; j < m; j++)
            mx = fmaxf(mx, add(comp_row(ring_z, z_new, cur + j, N0, cap, cw)[voff + ch], pb[j * cw + voff + ch]));
        float sum = 0, acc = 0;
        if (has_prev)
            for (int j = 0; j < m; j++) {
                const float e = exp_d(sub(add(comp_row(ring_z, z_new, prev + j, N0, cap, cw)[ch], pb[j * cw + ch]), mx));
                sum = add(sum, e);
                acc = add(acc, mul(e, comp_row(ring_a, a_new, prev + j, N0, cap, cw)[ch]));
            }
        for (int j = 0; j < m; j++) {
            const float e = exp_d(sub(add(comp_row(ring_z, z_new, cur + j, N0, cap, cw)[voff + ch], pb[j * cw + voff + ch]), mx));
            sum = add(sum, e);
            acc = add(acc, mul(e, comp_row(ring_a, a_new, cur + j, N0, cap, cw)[voff + ch]));
        }
        pooled[ch] = acc / sum;
    }
    __syncthreads();
    double ss = 0;
    for (int ch = threadIdx.x; ch < w; ch += blockDim.x) ss += (double)mul(pooled[ch], pooled[ch]);
    ss = block_sum(ss, red);
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

constexpr int IDX_ENTRIES = 4;  // entries per block (one per warp) in the indexer score kernel: many blocks at decode

__global__ void indexer_scores_kernel(const float* qi, const float* wt, const uint16_t* keys, int64_t N0, int m,
                                      int HI, int dI, int K, float w_scale, float s_scale, float* scores, int64_t ld) {
    const int s = blockIdx.y;
    const int64_t avail = (N0 + s + 1) / m;
    if (avail <= K) return;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int64_t e0 = (int64_t)blockIdx.x * IDX_ENTRIES;
    const int64_t e1 = e0 + IDX_ENTRIES < avail ? e0 + IDX_ENTRIES : avail;
    const float* q = qi + (int64_t)s * HI * dI;
    for (int64_t e = e0 + warp; e < e1; e += nw) {
        const uint16_t* key = keys + e * dI;
        float acc = 0;
        for (int h = 0; h < HI; h++) {
            float dt = 0;
            for (int i = lane; i < dI; i += WARP) dt += q[h * dI + i] * f16_to_f32(key[i]);
            dt = warp_sum(dt);
            acc = add(acc, mul(mul(mul(wt[(int64_t)s * HI + h], w_scale), fmaxf(dt, 0.f)), s_scale));
        }
        if (lane == 0) scores[(int64_t)s * ld + e] = acc;
    }
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
__global__ void __launch_bounds__(TOPK_THREADS)
topk_kernel(const float* scores, int64_t ld, int64_t N0, int m, int K, int32_t* sel) {
    __shared__ unsigned hist[256];
    __shared__ uint32_t prefix_sh;
    __shared__ int krem_sh;
    __shared__ int scan_sh[32];
    const int s = blockIdx.x;
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

static unsigned grid_for(int64_t n) {
    const int64_t b = (n + 255) / 256;
    return (unsigned)(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

}  // namespace ds4j

using namespace ds4j;

extern "C" {

int32_t ds4j_rope(ds4j_ctx* ctx, float* x, int32_t S, int32_t heads, int32_t width, int32_t rope_dim,
                  const float* inv_freq, int64_t pos0, int64_t pos_step, int32_t inverse) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && inv_freq && S >= 0 && heads > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= width,
             "ds4j_rope: bad arguments (heads %d, width %d, rope_dim %d)", heads, width, rope_dim);
    if (S == 0) return DS4J_OK;
    rope_kernel<<<grid_for((int64_t)S * heads * (rope_dim / 2)), 256, 0, ctx->stream>>>(x, S, heads, width, rope_dim,
                                                                                        inv_freq, pos0, pos_step, inverse);
    DS4J_LAUNCHED("rope");
    return DS4J_OK;
}

int32_t ds4j_rmsnorm_rope(ds4j_ctx* ctx, float* x, const float* weight, int32_t rows, int32_t n, float eps,
                          int32_t rope_dim, const float* inv_freq, int64_t pos0, int32_t rows_per_pos, int32_t round_f16) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(x && inv_freq && rows >= 0 && n > 0 && rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= n && rows_per_pos > 0,
             "ds4j_rmsnorm_rope: bad arguments (rows %d, n %d, rope_dim %d, rows_per_pos %d)", rows, n, rope_dim, rows_per_pos);
    if (rows == 0) return DS4J_OK;
    rmsnorm_rope_kernel<<<rows, 256, 0, ctx->stream>>>(x, weight, n, eps, rope_dim, inv_freq, pos0, rows_per_pos, round_f16);
    DS4J_LAUNCHED("rmsnorm_rope");
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
    const int64_t p0 = N0 + S - cap > N0 ? N0 + S - cap : N0;
    ring_store_kernel<<<grid_for((N0 + S - p0) * width), 256, 0, ctx->stream>>>(ring, ring_f16, cap, width, rows, N0, S, p0);
    DS4J_LAUNCHED("ring_store");
    return DS4J_OK;
}

int32_t ds4j_attention(ds4j_ctx* ctx, const float* q, const float* kv_new, const uint16_t* ring, int32_t cap,
                       const uint16_t* entries, int32_t kind, int32_t m, const int32_t* sel, int32_t K,
                       const float* sinks, int64_t N0, int32_t S, int32_t H, int32_t d, int32_t W, float scale,
                       float* out) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(q && kv_new && sinks && out && S >= 0 && H > 0 && d > 0 && W > 0 && N0 >= 0,
             "ds4j_attention: bad arguments");
    DS4J_ARG(N0 == 0 || (ring && cap >= W - 1), "ds4j_attention: ring of %d rows cannot hold the window", cap);
    DS4J_ARG(kind == DS4J_ATTN_SLIDING || (m > 0 && (entries || (N0 + S) / m == 0)),
             "ds4j_attention: compressed layer without entries");
    DS4J_ARG(kind != DS4J_ATTN_CSA || (K > 0 && (sel || (N0 + S) / m <= K)), "ds4j_attention: CSA without selections");
    if (S == 0) return DS4J_OK;
    int64_t maxc = 0;
    if (kind == DS4J_ATTN_HCA) maxc = (N0 + S) / m;
    else if (kind == DS4J_ATTN_CSA) maxc = (N0 + S) / m < K ? (N0 + S) / m : K;
    const int64_t nk_max = W + maxc;
    const int64_t smem = attention_smem(d, nk_max);
    DS4J_ARG(smem <= 48 * 1024,
             "ds4j_attention: %lld keys per query (window %d + %lld compressed) exceed the kernel's shared memory",
             (long long)nk_max, W, (long long)maxc);
    DS4J_ARG(S <= 65535, "ds4j_attention: S %d too large for one launch", S);
    dim3 grid(H, S);
    attention_kernel<<<grid, ATT_THREADS, (size_t)smem, ctx->stream>>>(q, kv_new, ring, cap, entries, kind, m, sel, K,
                                                                       sinks, N0, H, d, W, scale, (int)nk_max, out);
    DS4J_LAUNCHED("attention");
    return DS4J_OK;
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
    const int64_t nwin = (N0 + S) / m - N0 / m;
    if (nwin <= 0) return DS4J_OK;
    DS4J_ARG(w * sizeof(float) <= 32 * 1024, "ds4j_compress_pool: width %d too large", w);
    compress_pool_kernel<<<(unsigned)nwin, 256, w * sizeof(float), ctx->stream>>>(
        ring_a, ring_z, cap, a_new, z_new, N0, m, w, overlap, position_bias, norm_w, eps, inv_freq, rope_dim, entries);
    DS4J_LAUNCHED("compress_pool");
    return DS4J_OK;
}

int32_t ds4j_indexer_scores(ds4j_ctx* ctx, const float* qi, const float* wt, const uint16_t* keys, int64_t N0,
                            int32_t S, int32_t m, int32_t HI, int32_t dI, int32_t K, float w_scale, float s_scale,
                            float* scores, int64_t ld) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(qi && wt && scores && m > 0 && HI > 0 && dI > 0 && K > 0 && S >= 0 && N0 >= 0,
             "ds4j_indexer_scores: bad arguments");
    const int64_t maxAvail = (N0 + S) / m;
    if (S == 0 || maxAvail <= K) return DS4J_OK;
    DS4J_ARG(keys && ld >= maxAvail, "ds4j_indexer_scores: scores row of %lld < %lld entries", (long long)ld,
             (long long)maxAvail);
    DS4J_ARG(S <= 65535, "ds4j_indexer_scores: S %d too large for one launch", S);
    dim3 grid((unsigned)((maxAvail + IDX_ENTRIES - 1) / IDX_ENTRIES), S);
    indexer_scores_kernel<<<grid, 128, 0, ctx->stream>>>(qi, wt, keys, N0, m, HI, dI, K, w_scale, s_scale, scores, ld);
    DS4J_LAUNCHED("indexer_scores");
    return DS4J_OK;
}

int32_t ds4j_indexer_topk(ds4j_ctx* ctx, const float* scores, int64_t ld, int64_t N0, int32_t S, int32_t m, int32_t K,
                          int32_t* sel) {
    DS4J_CHECK_CTX(ctx);
    DS4J_ARG(scores && sel && m > 0 && K > 0 && S >= 0 && N0 >= 0, "ds4j_indexer_topk: bad arguments");
    if (S == 0 || (N0 + S) / m <= K) return DS4J_OK;
    topk_kernel<<<S, TOPK_THREADS, 0, ctx->stream>>>(scores, ld, N0, m, K, sel);
    DS4J_LAUNCHED("indexer_topk");
    return DS4J_OK;
}

}  // extern "C"
