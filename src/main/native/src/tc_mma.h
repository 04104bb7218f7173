// Tensor-core building blocks shared by the prefill GEMM (gemm_tc.cpp), the skinny products (gemm_skinny.cpp) and the
// indexer scores (indexer_tc.cpp):
// F32 -> BF16 / F16 conversion and hi/lo splitting, e4m3 -> F16 conversion, BF16 pair multiplication, unaligned
// 16-byte loads and mma.sync m16n8k16 (BF16 and F16 operands). Only for nvcc builds (DS4J_HAVE_TC); tools/kernel-emu
// replaces the inline PTX with host emulations.
#pragma once

#include "common.h"

#if DS4J_HAVE_TC
#include <string.h>

namespace ds4j {
namespace tc {

/** Two floats -> BF16 pair (round to nearest even), lo in the low half. */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/** (a, b) ~ hi + lo, BF16 pairs: hi = bf16(x), lo = bf16(x - hi), so |x - hi - lo| <= 2^-16 |x|. */
__device__ __forceinline__ void split_bf16(float a, float b, uint32_t& hi, uint32_t& lo) {
    hi = pack_bf16(a, b);
    lo = pack_bf16(__fsub_rn(a, __uint_as_float(hi << 16)), __fsub_rn(b, __uint_as_float(hi & 0xffff0000u)));
}

/** BF16 pair (both halves) 2^(f - 127) for a biased exponent f in 1 .. 254. */
__device__ __forceinline__ uint32_t pow2_pair(uint32_t f) { return (f << 7) | (f << 23); }

/**
 * a * b for two BF16 pairs (fma.rn with -0 added, so a zero product keeps its sign), subnormal inputs included:
 * exact whenever b is a power of two and the products stay in the normal range.
 */
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
    uint32_t r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u));
    return r;
}

/**
 * Four e4m3 bytes (byte 0 lowest) -> two F16 pairs: lo holds bytes 0, 1 (byte 0 in the low half), hi bytes 2, 3. Exact:
 * every e4m3 value is an F16 number (NaN codes give NaN). The hardware conversion on compute capability >= 8.9, else
 * the value of each byte (common.h, e4m3) rounded to F16, which is the same number.
 */
__device__ __forceinline__ void e4m3x4_to_f16(uint32_t u, uint32_t& lo, uint32_t& hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
        : "=r"(lo), "=r"(hi) : "r"(u));
#else
    const __half2 l = __floats2half2_rn(e4m3(u & 0xffu), e4m3((u >> 8) & 0xffu));
    const __half2 h = __floats2half2_rn(e4m3((u >> 16) & 0xffu), e4m3(u >> 24));
    memcpy(&lo, &l, 4);
    memcpy(&hi, &h, 4);
#endif
}

/**
 * (a, b) -> F16 pairs hi = f16(x), lo = f16(x - hi) (22 significant bits together for |x| >= 2^-3): the indexer's
 * queries (indexer_tc.cpp) and the FP8 products' x (gemm_skinny.cpp, fp8_x).
 */
__device__ __forceinline__ void split_f16(float a, float b, uint32_t& hi, uint32_t& lo) {
    const __half2 h = __floats2half2_rn(a, b);
    const float2 hf = __half22float2(h);
    const __half2 l = __floats2half2_rn(__fsub_rn(a, hf.x), __fsub_rn(b, hf.y));
    memcpy(&hi, &h, 4);
    memcpy(&lo, &l, 4);
}

/**
 * Four 8x8 matrices of 16-bit elements from shared memory (ldmatrix .x4): lane l gives the address of row l % 8 of
 * matrix l / 8 (16-byte aligned, 8 elements a row); r[i] = matrix i's row l / 4, word l % 4. The MMA fragments of
 * gemm_tc.cpp (BF16) and of the indexer's scores (indexer_tc.cpp, F16): one instruction for four words.
 */
__device__ __forceinline__ void ldsm_x4(uint32_t* r, const uint32_t* p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/** Two F16 bit patterns (low, high half) -> floats. */
__device__ __forceinline__ float2 h2_to_f2(uint32_t u) {
    __half2 h;
    memcpy(&h, &u, 4);
    return __half22float2(h);
}

/** 16 bytes at an address of any alignment (experts whose storage is not 16-byte aligned). */
__device__ __forceinline__ uint4 load16_bytes(const uint8_t* p) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++)
        w[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) |
               ((uint32_t)p[4 * i + 3] << 24);
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/** D += A B for one m16n8k16 tile: a[4] (row-major A fragment), b0, b1 (column-major B fragment), BF16. */
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/** D += A B for one m16n8k16 tile: a[4] (row-major A fragment), b0, b1 (column-major B fragment), F16. */
__device__ __forceinline__ void mma_f16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace tc
}  // namespace ds4j
#endif  // DS4J_HAVE_TC
