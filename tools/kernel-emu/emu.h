// Host emulation of the CUDA subset that gemm_tc.cpp, gemm_skinny.cpp and indexer_tc.cpp use, for checking their
// indexing without a GPU (tools/kernel-emu/run.sh): one std::thread per GPU thread of a block, one block at a time;
// __shared__ variables become function statics (shared by the block's threads); __syncthreads is a barrier; warp
// shuffles, ldmatrix and mma.sync go through per-warp exchange buffers, the MMA fragments decoded with the PTX ISA
// layouts (mma.m16n8k16, .f16/.bf16) and multiplied in double. It checks how the kernels index memory and fragments,
// not tensor-core rounding or speed.
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static
#define DS4J_PLATFORM_NAME "emu"

struct uint4 { uint32_t x, y, z, w; };
struct uint2 { uint32_t x, y; };
struct float4 { float x, y, z, w; };
struct float2 { float x, y; };
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) { return {a, b, c, d}; }
inline uint2 make_uint2(uint32_t a, uint32_t b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef int hipError_t;
typedef void* hipStream_t;
typedef void* hipGraphExec_t;
typedef void* hipEvent_t;
#define hipSuccess 0
inline hipError_t hipGetLastError() { return 0; }
inline const char* hipGetErrorName(hipError_t) { return "emu"; }
inline const char* hipGetErrorString(hipError_t) { return "emu"; }

inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

struct EmuBlock {
    std::barrier<>* block;
    std::barrier<>* warp[32];
    // per-warp exchange
    uint32_t xa[32][32][4];
    uint32_t xb[32][32][2];
    float xc[32][32][4];
    double xs[32][32];
    const uint32_t* xp[32][32];
};
inline EmuBlock* g_blk;
inline uint32_t* emu_dyn_smem;
/** Launches whose kernels wrote past their dynamic shared memory (emu_launch); the driver counts them as failures. */
inline int emu_smem_overruns = 0;

inline void __syncthreads() { g_blk->block->arrive_and_wait(); }
/** atomicAdd on shared or global words: the block's threads run at once, the blocks one after another. */
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
/** old = *a; *a = old >= v ? 0 : old + 1; returns old (blocks run one at a time, so the order of arrival is the grid's). */
inline unsigned atomicInc(unsigned* a, unsigned v) {
    std::atomic_ref<unsigned> r(*a);
    unsigned old = r.load();
    while (!r.compare_exchange_weak(old, old >= v ? 0u : old + 1u)) {}
    return old;
}
/** atomicOr on shared or global words (moe_block_expert's bitmap of picked experts). */
inline unsigned atomicOr(unsigned* p, unsigned v) { return __atomic_fetch_or(p, v, __ATOMIC_RELAXED); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline int __ffs(int v) { return __builtin_ffs(v); }
inline void __trap() { abort(); }

template <typename T> T __ldg(const T* p) { return *p; }
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        int sel = (s >> (4 * i)) & 7;
        r |= (uint32_t)((v >> (8 * sel)) & 0xff) << (8 * i);
    }
    return r;
}
using std::isinf;
using std::isnan;
using std::max;
using std::min;

// F16
struct __half { uint16_t b; };
struct __half2 { uint16_t x, y; };
inline float __half2float(__half h) { _Float16 f; memcpy(&f, &h.b, 2); return (float)f; }
inline __half __ushort_as_half(uint16_t u) { return {u}; }
inline uint16_t __half_as_ushort(__half h) { return h.b; }
inline __half __float2half_rn(float f) { _Float16 h = (_Float16)f; __half r; memcpy(&r.b, &h, 2); return r; }
inline float2 __half22float2(__half2 h) { return {__half2float({h.x}), __half2float({h.y})}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half_rn(a).b, __float2half_rn(b).b}; }

// warp collectives
inline int emu_lane() { return threadIdx.x & 31; }
inline int emu_warp() { return threadIdx.x >> 5; }
template <typename T>
T emu_exchange(T v, int src) {
    const int w = emu_warp(), l = emu_lane();
    g_blk->xs[w][l] = (double)v;
    g_blk->warp[w]->arrive_and_wait();
    T r = (T)g_blk->xs[w][src];
    g_blk->warp[w]->arrive_and_wait();
    return r;
}
template <typename T> T emu_shfl_xor(T v, int o) { return emu_exchange(v, emu_lane() ^ o); }
template <typename T> T emu_shfl_up(T v, int o) { int l = emu_lane(); return emu_exchange(v, l >= o ? l - o : l); }
#define DS4J_SHFL_XOR(v, o) emu_shfl_xor((v), (o))
#define DS4J_SHFL_UP(v, o) emu_shfl_up((v), (o))
#define DS4J_SHFL(v, l) emu_exchange((v), (l))
/** Whether p holds in any lane of the warp (__any_sync over all 32 lanes). */
inline bool emu_any(bool p) {
    const int w = emu_warp(), l = emu_lane();
    g_blk->xs[w][l] = p ? 1.0 : 0.0;
    g_blk->warp[w]->arrive_and_wait();
    bool r = false;
    for (int i = 0; i < 32; i++) r = r || g_blk->xs[w][i] != 0.0;
    g_blk->warp[w]->arrive_and_wait();
    return r;
}
#define DS4J_ANY(p) emu_any(p)

inline float emu_bf16(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }
inline float emu_f16(uint16_t b) { return __half2float({b}); }

/** mma.m16n8k16.row.col f32 += A B, fragments per the PTX ISA. */
inline void emu_mma(float* d, const uint32_t* a, uint32_t b0, uint32_t b1, bool bf16) {
    const int w = emu_warp(), l = emu_lane();
    EmuBlock* B = g_blk;
    for (int i = 0; i < 4; i++) B->xa[w][l][i] = a[i], B->xc[w][l][i] = d[i];
    B->xb[w][l][0] = b0;
    B->xb[w][l][1] = b1;
    B->warp[w]->arrive_and_wait();
    float A[16][16], Bm[16][8];
    auto cv = [&](uint32_t u, int half) { uint16_t h = half ? u >> 16 : u & 0xffff; return bf16 ? emu_bf16(h) : emu_f16(h); };
    for (int ln = 0; ln < 32; ln++) {
        int g = ln >> 2, t = ln & 3;
        for (int j = 0; j < 2; j++) {
            A[g][2 * t + j] = cv(B->xa[w][ln][0], j);
            A[g + 8][2 * t + j] = cv(B->xa[w][ln][1], j);
            A[g][2 * t + 8 + j] = cv(B->xa[w][ln][2], j);
            A[g + 8][2 * t + 8 + j] = cv(B->xa[w][ln][3], j);
            Bm[2 * t + j][g] = cv(B->xb[w][ln][0], j);
            Bm[2 * t + 8 + j][g] = cv(B->xb[w][ln][1], j);
        }
    }
    int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; i++) {
        int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        double s = 0;
        for (int k = 0; k < 16; k++) s += (double)A[row][k] * Bm[k][col];
        d[i] = (float)(s + B->xc[w][l][i]);
    }
    B->warp[w]->arrive_and_wait();
}

/** ldmatrix.sync.aligned.m8n8.x4.b16: lane l gives row l % 8 of matrix l / 8; r[i] = matrix i, row l / 4, word l % 4. */
inline void emu_ldsm_x4(uint32_t* r, const uint32_t* p) {
    const int w = emu_warp(), l = emu_lane();
    g_blk->xp[w][l] = p;
    g_blk->warp[w]->arrive_and_wait();
    for (int i = 0; i < 4; i++) r[i] = g_blk->xp[w][i * 8 + l / 4][l % 4];
    g_blk->warp[w]->arrive_and_wait();
}

/** cvt.rn.bf16x2.f32 */
inline uint16_t emu_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if (std::isnan(f)) return 0x7fc0;
    uint32_t r = u + 0x7fff + ((u >> 16) & 1);
    return (uint16_t)(r >> 16);
}

/** fma.rn.bf16x2 a, b, -0: each half's product rounded to BF16 (exact in float: two 8-bit significands). */
inline uint32_t emu_mul_bf16x2(uint32_t a, uint32_t b) {
    const float lo = emu_bf16(a & 0xffff) * emu_bf16(b & 0xffff), hi = emu_bf16(a >> 16) * emu_bf16(b >> 16);
    return emu_to_bf16(lo) | ((uint32_t)emu_to_bf16(hi) << 16);
}

/** Runs body() as every thread of every block of grid (blocks in order); smem bytes of dynamic shared memory. */
template <typename F>
void emu_launch(dim3 grid, dim3 block, size_t smem, F&& body) {
    const int n = block.x;
    // 1024 guard words past the dynamic shared memory: a kernel that writes past its smem bytes is reported
    const size_t words = (smem + 3) / 4;
    std::vector<uint32_t> dyn(words + 1024, 0x5eed5eedu);
    emu_dyn_smem = dyn.data();
    blockDim = block;
    gridDim = grid;
    for (unsigned bz = 0; bz < grid.z; bz++)
    for (unsigned by = 0; by < grid.y; by++)
        for (unsigned bx = 0; bx < grid.x; bx++) {
            EmuBlock* B = new EmuBlock();
            std::barrier<> bb(n);
            B->block = &bb;
            for (int w = 0; w < n / 32; w++) B->warp[w] = new std::barrier<>(32);
            g_blk = B;
            std::memset(dyn.data(), 0xAB, words * 4);  // garbage, as on a GPU (the guard words keep their pattern)
            std::vector<std::thread> th;
            for (int t = 0; t < n; t++)
                th.emplace_back([&, t, bx, by, bz] {
                    threadIdx = dim3(t);
                    blockIdx = dim3(bx, by, bz);
                    body();
                });
            for (auto& x : th) x.join();
            for (int w = 0; w < n / 32; w++) delete B->warp[w];
            delete B;
        }
    for (size_t k = words; k < dyn.size(); k++)
        if (dyn[k] != 0x5eed5eedu) {
            printf("FAIL a kernel wrote past its %zu bytes of dynamic shared memory (word %zu)\n", smem, k);
            emu_smem_overruns++;
            break;
        }
}
