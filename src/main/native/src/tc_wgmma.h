// Warpgroup MMA (wgmma, sm_90a) with the A operand in registers and B in shared memory, for the skinny products of
// several n-tiles (gemm_skinny.cpp, skinny_smem_kernel's WG instances): the four warps of a warpgroup (two a block) issue
// one wgmma.m64nNk16 where each issued N / 8 mma.sync.m16n8k16 and loaded its own B words, then wait for it before the
// next stage (gemm_skinny.cpp's DS4J_WG_INFLIGHT 1 would decode the next stage meanwhile; not measured).
//
// Why the same bits: a warp's A registers are exactly mma.sync's A fragment (rows 16 w .. 16 w + 15 of the 64 are warp
// w's of its warpgroup; lane (g, t) holds rows g, g + 8 at k 2t, 2t + 1, 2t + 8, 2t + 9), its accumulators are
// mma.sync's C fragments of the N / 8 n-tiles in order (d[4 j + c] = n-tile j's c), and one k16 step of wgmma rounds as
// one mma.sync k16 step (tools/device/wgmma-probe.cu: 0 of 8,192 values differ on the H200, BENCHMARKS.md, twenty-ninth
// session). B (tokens x 16 k of one k-step) is K-major: 8 x 8 core matrices of 128 contiguous bytes (token row n % 8 at
// 16 bytes, k % 8 at 2 bytes), the two k halves 128 bytes apart (LBO) and token groups of 8 256 bytes apart (SBO).
//
// The wgmma code exists only where the device code targets sm_90a (__CUDA_ARCH_FEAT_SM90_ALL): elsewhere mma_rs traps
// and the other wrappers do nothing, and the host launches no kernel that uses them (gemm_skinny.cpp's sm_wgmma: a library
// whose build.sh flags name sm_90a, DS4J_WGMMA, on a device of compute capability 9).
#pragma once

#include "tc_mma.h"

#if DS4J_HAVE_TC
namespace ds4j {
namespace wg {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DS4J_WG_DEVICE 1
#else
#define DS4J_WG_DEVICE 0
#endif

/** Shared-memory matrix descriptor (no swizzle) of a K-major operand at p: LBO 128, SBO 256 (see above). */
__device__ __forceinline__ uint64_t desc(const void* p) {
#if DS4J_WG_DEVICE
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a >> 4) & 0x3fff) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
#else
    (void)p;
    return 0;
#endif
}

/** Orders this thread's register writes (A fragments, accumulators) before the warpgroup's next wgmma reads them. */
__device__ __forceinline__ void fence() {
#if DS4J_WG_DEVICE
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

/**
 * Makes this thread's generic-proxy writes to shared memory visible to the async proxy, through which wgmma reads its B
 * operand: each staging thread calls it after its stores and before the barrier that precedes the MMAs (without it a
 * wgmma may read a slice's earlier contents).
 */
__device__ __forceinline__ void fence_proxy_async() {
#if DS4J_WG_DEVICE
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

/** Closes the wgmma issued since the last commit into one group. */
__device__ __forceinline__ void commit() {
#if DS4J_WG_DEVICE
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}

/** Waits until at most N committed groups are in flight (their accumulators and A registers are free after it). */
template <int N>
__device__ __forceinline__ void wait() {
#if DS4J_WG_DEVICE
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

/** Keeps the compiler from moving accesses of an accumulator across the wgmma that own them. */
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

/**
 * d[N / 2] (+)= A (this warp's 16 rows of 64, k16: a[4]) x B (N tokens x k16 at descriptor db); acc 0 overwrites d.
 * BF: BF16 operands, else F16. F32 accumulation.
 */
template <int N, bool BF>
__device__ __forceinline__ void mma_rs(float* d, const uint32_t* a, uint64_t db, int acc);

#if DS4J_WG_DEVICE
template <>
__device__ __forceinline__ void mma_rs<16, true>(float* d, const uint32_t* a, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

template <>
__device__ __forceinline__ void mma_rs<24, true>(float* d, const uint32_t* a, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %17, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, %16, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

template <>
__device__ __forceinline__ void mma_rs<32, true>(float* d, const uint32_t* a, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

template <>
__device__ __forceinline__ void mma_rs<64, true>(float* d, const uint32_t* a, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

template <>
__device__ __forceinline__ void mma_rs<16, false>(float* d, const uint32_t* a, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

template <>
__device__ __forceinline__ void mma_rs<24, false>(float* d, const uint32_t* a, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %17, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n24k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11}, {%12,%13,%14,%15}, %16, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

template <>
__device__ __forceinline__ void mma_rs<32, false>(float* d, const uint32_t* a, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

template <>
__device__ __forceinline__ void mma_rs<64, false>(float* d, const uint32_t* a, uint64_t db, int acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
#else
template <int N, bool BF>
__device__ __forceinline__ void mma_rs(float*, const uint32_t*, uint64_t, int) {
    __trap();
}
#endif

}  // namespace wg
}  // namespace ds4j
#endif  // DS4J_HAVE_TC
