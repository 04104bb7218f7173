// How fast the H200 streams a weight matrix into SMs under different access patterns, measured alone: what a one-row
// product (gemm_skinny.cpp) could reach on its bytes if reading them were all it did. Each kernel reads every byte of
// an R x C byte matrix once and folds the words into one value per block (so that no load is dropped); the matrix is
// one of enough copies that together exceed the L2 (each launch reads HBM). Every variant is captured in a graph of 40
// launches, replayed 5 times; the best replay's time per launch is printed with the bytes' rate.
//
// Patterns:
//   flat U        every warp reads 512 contiguous bytes per load instruction, U of them in flight per lane, the
//                 warps striding over the whole matrix (the best case for the memory system)
//   tile U NW i|c the skinny kernels' shape: a block of 8 warps, each warp 16 rows (lane g, t: rows g and g + 8, 16
//                 bytes at chunk 4 j + t, so 64 contiguous bytes of each of 8 rows per instruction), NW column
//                 partitions per row group (grid rows / 128 x NW), chunk groups j of partition p interleaved
//                 (p, p + NW, ...; i) or contiguous (c); U chunk groups of loads in flight per lane, +pf: the block
//                 first asks the L2 for its bytes (cp.async.bulk.prefetch.L2)
//   bulk S KB xN  one thread per block copies contiguous pieces of S KiB into a ring of N shared-memory stages with
//                 cp.async.bulk (completion on an mbarrier), every thread folds each stage from shared memory
//
//   nvcc -O3 -arch=sm_90 -std=c++17 tools/device/stream-probe.cu -o .device/stream_probe   (here; CUDA 12.3 or later)
//   .device/stream_probe                                                                  (on the GPU machine)
#include <cstdint>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

#define CK(call)                                                                \
    do {                                                                        \
        cudaError_t e_ = (call);                                                \
        if (e_ != cudaSuccess) {                                                \
            printf("%s: %s\n", #call, cudaGetErrorString(e_));                  \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

__device__ __forceinline__ uint32_t fold(uint4 q) { return q.x ^ (q.y * 3u) ^ (q.z * 5u) ^ (q.w * 7u); }

__device__ __forceinline__ void block_out(uint32_t acc, uint32_t* out) {
    __shared__ uint32_t s;
    if (threadIdx.x == 0) s = 0;
    __syncthreads();
    atomicXor(&s, acc);
    __syncthreads();
    if (threadIdx.x == 0) out[blockIdx.x + gridDim.x * blockIdx.y] = s;
}

template <int U>
__global__ void __launch_bounds__(256) flat_kernel(const uint4* __restrict__ w, size_t n16, uint32_t* out) {
    const int lane = threadIdx.x & 31;
    const size_t warp = (size_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const size_t nwarps = (size_t)gridDim.x * (blockDim.x >> 5);
    uint32_t acc = 0;
    for (size_t b = warp * 32 * U; b < n16; b += nwarps * 32 * U) {
        uint4 q[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const size_t i = b + (size_t)u * 32 + lane;
            q[u] = i < n16 ? __ldg(w + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) acc += fold(q[u]);
    }
    block_out(acc, out);
}

template <int U, bool INTERLEAVED, bool PF>
__global__ void __launch_bounds__(256) tile_kernel(const uint8_t* __restrict__ w, int cols, int nw, uint32_t* out) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int p = blockIdx.y, row0 = blockIdx.x * 128 + warp * 16;
    const int ngr = cols / 64, per = ngr / nw;
    if (PF && (threadIdx.x & 31) == 0) {
        // the block's rows, its partition's even share of their bytes, one piece per warp
        const size_t len = (size_t)128 * cols, lo = len * p / nw, hi = len * (p + 1) / nw;
        const size_t a = (size_t)blockIdx.x * 128 * cols + lo + (hi - lo) * warp / 8, e = (size_t)blockIdx.x * 128 * cols + lo + (hi - lo) * (warp + 1) / 8;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(w + (a & ~(size_t)15)), "r"((uint32_t)((e - a) & ~(size_t)15)) : "memory");
    }
    const uint8_t* r0 = w + (size_t)(row0 + g) * cols;
    const uint8_t* r1 = w + (size_t)(row0 + g + 8) * cols;
    uint32_t acc = 0;
    for (int m0 = 0; m0 < per; m0 += U) {
        uint4 q[U][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int m = m0 + u;
            const int j = INTERLEAVED ? p + m * nw : p * per + m;
            const size_t off = (size_t)(j * 4 + t) * 16;
            q[u][0] = m < per ? __ldg(reinterpret_cast<const uint4*>(r0 + off)) : make_uint4(0, 0, 0, 0);
            q[u][1] = m < per ? __ldg(reinterpret_cast<const uint4*>(r1 + off)) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) acc += fold(q[u][0]) + 3u * fold(q[u][1]);
    }
    block_out(acc, out);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

template <int STAGES>
__global__ void __launch_bounds__(256) bulk_kernel(const uint8_t* __restrict__ w, size_t bytes, int stage_bytes, uint32_t* out) {
    extern __shared__ __align__(128) uint8_t ring[];
    __shared__ __align__(8) uint64_t bar[STAGES];
    const size_t npieces = (bytes + stage_bytes - 1) / stage_bytes;
    // contiguous pieces per block
    const size_t p0 = npieces * blockIdx.x / gridDim.x, p1 = npieces * (blockIdx.x + 1) / gridDim.x;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    auto issue = [&](size_t piece, int s) {
        const size_t off = piece * stage_bytes;
        const uint32_t n = (uint32_t)((off + stage_bytes <= bytes) ? stage_bytes : bytes - off);
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&bar[s])), "r"(n) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                         smem_addr(ring + (size_t)s * stage_bytes)),
                     "l"(w + off), "r"(n), "r"(smem_addr(&bar[s]))
                     : "memory");
    };
    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES && p0 + s < p1; s++) issue(p0 + s, s);
    uint32_t acc = 0;
    for (size_t pc = p0; pc < p1; pc++) {
        const int s = (int)((pc - p0) % STAGES);
        const uint32_t parity = (uint32_t)(((pc - p0) / STAGES) & 1);
        uint32_t done = 0;
        while (!done)
            asm volatile("{ .reg .pred P; mbarrier.try_wait.parity.shared::cta.b64 P, [%1], %2; selp.u32 %0, 1, 0, P; }"
                         : "=r"(done)
                         : "r"(smem_addr(&bar[s])), "r"(parity)
                         : "memory");
        const size_t off = pc * stage_bytes;
        const int n = (int)((off + stage_bytes <= bytes) ? stage_bytes : bytes - off);
        const uint4* st = reinterpret_cast<const uint4*>(ring + (size_t)s * stage_bytes);
        for (int i = threadIdx.x; i < n / 16; i += blockDim.x) acc += fold(st[i]);
        __syncthreads();  // every thread is done with stage s
        if (threadIdx.x == 0 && pc + STAGES < p1) issue(pc + STAGES, s);
    }
    block_out(acc, out);
}

struct Mat {
    int rows, cols;
    const char* name;
};

int main() {
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const Mat mats[] = {{4096, 8192, "wo_b-like 4096 x 8192 (33.5 MB)"},
                        {2048, 4096, "shared w1-like 2048 x 4096 (8.4 MB)"},
                        {512, 4096, "wkv-like 512 x 4096 (2.1 MB)"}};
    const size_t pool = (size_t)320 << 20;  // copies spread over 320 MiB, far above the L2
    uint8_t* buf;
    CK(cudaMalloc(&buf, pool));
    CK(cudaMemset(buf, 0x5a, pool));
    uint32_t* out;
    CK(cudaMalloc(&out, 1 << 20));
    cudaStream_t st;
    CK(cudaStreamCreate(&st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int launches = 40;
    for (const Mat& m : mats) {
        const size_t bytes = (size_t)m.rows * m.cols;
        const int copies = (int)(pool / bytes);
        printf("== %s, %d copies cycled, %d SMs\n", m.name, copies, sms);
        auto measure = [&](const char* label, auto launch) {
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
            for (int k = 0; k < launches; k++) launch(buf + (size_t)(k % copies) * bytes);
            CK(cudaStreamEndCapture(st, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            CK(cudaGraphLaunch(ge, st));
            float best = 1e30f;
            for (int r = 0; r < 5; r++) {
                CK(cudaEventRecord(e0, st));
                CK(cudaGraphLaunch(ge, st));
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                if (ms < best) best = ms;
            }
            const double us = best * 1000.0 / launches;
            printf("  %-28s %8.2f us  %6.0f GB/s  %5.1f %% of 4.8 TB/s\n", label, us, bytes / us / 1e3, bytes / us / 1e3 / 48.0);
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
        };
        const size_t n16 = bytes / 16;
        for (int bps : {2, 4, 8}) {
            char l[64];
            snprintf(l, sizeof l, "flat U4, %d blocks/SM", bps);
            measure(l, [&](const uint8_t* w) { flat_kernel<4><<<sms * bps, 256, 0, st>>>((const uint4*)w, n16, out); });
            snprintf(l, sizeof l, "flat U8, %d blocks/SM", bps);
            measure(l, [&](const uint8_t* w) { flat_kernel<8><<<sms * bps, 256, 0, st>>>((const uint4*)w, n16, out); });
        }
        const int rg = m.rows / 128;
        for (int nw : {2, 4, 8, 16}) {
            if ((m.cols / 64) % nw) continue;
            char l[64];
            const dim3 grid(rg, nw);
            snprintf(l, sizeof l, "tile U2 NW%d i (%d blocks)", nw, rg * nw);
            measure(l, [&](const uint8_t* w) { tile_kernel<2, true, false><<<grid, 256, 0, st>>>(w, m.cols, nw, out); });
            snprintf(l, sizeof l, "tile U2 NW%d i +pf", nw);
            measure(l, [&](const uint8_t* w) { tile_kernel<2, true, true><<<grid, 256, 0, st>>>(w, m.cols, nw, out); });
            snprintf(l, sizeof l, "tile U2 NW%d c", nw);
            measure(l, [&](const uint8_t* w) { tile_kernel<2, false, false><<<grid, 256, 0, st>>>(w, m.cols, nw, out); });
            snprintf(l, sizeof l, "tile U4 NW%d i", nw);
            measure(l, [&](const uint8_t* w) { tile_kernel<4, true, false><<<grid, 256, 0, st>>>(w, m.cols, nw, out); });
            snprintf(l, sizeof l, "tile U4 NW%d c", nw);
            measure(l, [&](const uint8_t* w) { tile_kernel<4, false, false><<<grid, 256, 0, st>>>(w, m.cols, nw, out); });
            snprintf(l, sizeof l, "tile U8 NW%d c", nw);
            measure(l, [&](const uint8_t* w) { tile_kernel<8, false, false><<<grid, 256, 0, st>>>(w, m.cols, nw, out); });
        }
        for (int kb : {8, 16, 32}) {
            for (int bps : {1, 2}) {
                const int sb = kb * 1024;
                char l[64];
                snprintf(l, sizeof l, "bulk %d KB x4, %d blocks/SM", kb, bps);
                const int smem = 4 * sb;
                if (smem * bps > 200 * 1024) continue;
                CK(cudaFuncSetAttribute(bulk_kernel<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
                measure(l, [&](const uint8_t* w) { bulk_kernel<4><<<sms * bps, 256, smem, st>>>(w, bytes, sb, out); });
            }
        }
    }
    CK(cudaDeviceSynchronize());
    printf("done\n");
    return 0;
}
