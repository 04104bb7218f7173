// Whether the H200's warpgroup MMA (wgmma, sm_90a) reads a K-major BF16 operand from shared memory in the layout this
// probe writes, and whether its sums equal those of mma.sync bit for bit: the facts a wgmma path of the prefill GEMM
// (gemm_tc.cpp) would rest on, checked on the device before any kernel is written around them.
//
// One warpgroup computes D[64 x N] = A[64 x K] B[N x K]^T (BF16 in, F32 accumulate) with wgmma.m64nNk16, both operands
// in shared memory as 8 x 8 core matrices of 128 contiguous bytes each (row r, column k of an operand at core matrix
// (r / 8, k / 8), index (r / 8) (K / 8) + k / 8, then row r % 8 at 16 bytes a row), the descriptor's two strides
// tried both ways. The results are compared with an F64 reference on the host (relative error), then bit for bit with
// the same product on mma.sync.m16n8k16 in the same k order (one k16 step at a time, accumulated from 0), and N = 64
// against the first 64 columns of N = 128.
//
// On the H200 (BENCHMARKS.md, twenty-ninth session): with the strides (128, K / 8 x 128) both N give the reference's
// accuracy and 0 values differing from mma.sync, and N = 64 equals N = 128's first columns; the strides swapped give
// garbage. A wgmma path of the prefill GEMM built on this (cores 144 bytes apart so that its stores did not conflict)
// gave mma.sync's bits for every product and was slower, and was dropped (same section).
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a tools/device/wgmma-probe.cu -o .device/wgmma_probe
//   .device/wgmma_probe                                                    (on the GPU machine)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
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

constexpr int M = 64, K = 256, NMAX = 128;

/** Byte offset of element (r, k) of an operand with kc = K / 8 core matrices a row of cores. */
__host__ __device__ inline int core_off(int r, int k, int kc) { return (((r >> 3) * kc + (k >> 3)) << 7) + ((r & 7) << 4) + ((k & 7) << 1); }

__device__ inline uint64_t desc(const void* p, int lbo, int sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a >> 4) & 0x3fff) | ((uint64_t)((lbo >> 4) & 0x3fff) << 16) | ((uint64_t)((sbo >> 4) & 0x3fff) << 32);
}

template <int N>
__device__ inline void wgmma(float* d, uint64_t da, uint64_t db, int scale_d);

template <>
__device__ inline void wgmma<128>(float* d, uint64_t da, uint64_t db, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
        "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63},"
        " %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),
          "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
          "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]),
          "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]),
          "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d));
#endif
}

template <>
__device__ inline void wgmma<64>(float* d, uint64_t da, uint64_t db, int scale_d) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
        " %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]),
          "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d));
#endif
}

/** Block of 128 threads: D = A B^T over all of K with wgmma (N columns), strides (lbo, sbo); D row-major [64][NMAX]. */
template <int N>
__global__ void wg_kernel(const uint16_t* A, const uint16_t* B, float* D, int lbo, int sbo) {
    extern __shared__ __align__(128) uint8_t sm[];
    uint8_t* sa = sm;
    uint8_t* sb = sm + M * K * 2;
    for (int i = threadIdx.x; i < M * K; i += blockDim.x) *(uint16_t*)(sa + core_off(i / K, i % K, K / 8)) = A[i];
    for (int i = threadIdx.x; i < N * K; i += blockDim.x) *(uint16_t*)(sb + core_off(i / K, i % K, K / 8)) = B[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    float d[N / 2];
    for (int i = 0; i < N / 2; i++) d[i] = 0.f;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int kk = 0; kk < K / 16; kk++)  // k16 step kk: core columns 2 kk, 2 kk + 1
        wgmma<N>(d, desc(sa + kk * 256, lbo, sbo), desc(sb + kk * 256, lbo, sbo), kk > 0);
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#endif
    // accumulator j of thread (warp w, lane g t): n-tile j / 4, rows 16 w + g (+ 8 for j & 2), column 8 (j / 4) + 2 t + (j & 1)
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int j = 0; j < N / 2; j++) {
        const int r = 16 * w + g + ((j & 2) ? 8 : 0), c = 8 * (j >> 2) + 2 * t + (j & 1);
        D[r * NMAX + c] = d[j];
    }
}

/** The same product on mma.sync.m16n8k16 (4 warps, 16 rows each), k16 steps in order, fragments from global memory. */
__global__ void mma_kernel(const uint16_t* A, const uint16_t* B, float* D) {
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    for (int nt = 0; nt < NMAX / 8; nt++) {
        float c[4] = {0.f, 0.f, 0.f, 0.f};
        for (int kk = 0; kk < K / 16; kk++) {
            const int r0 = 16 * w + g, k0 = 16 * kk + 2 * t, n = 8 * nt + g;
            auto pr = [&](int r, int k) { return (uint32_t)A[r * K + k] | ((uint32_t)A[r * K + k + 1] << 16); };
            auto pb = [&](int n_, int k) { return (uint32_t)B[n_ * K + k] | ((uint32_t)B[n_ * K + k + 1] << 16); };
            const uint32_t a0 = pr(r0, k0), a1 = pr(r0 + 8, k0), a2 = pr(r0, k0 + 8), a3 = pr(r0 + 8, k0 + 8);
            const uint32_t b0 = pb(n, k0), b1 = pb(n, k0 + 8);
            asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
        const int r = 16 * w + g, col = 8 * nt + 2 * t;
        D[r * NMAX + col] = c[0];
        D[r * NMAX + col + 1] = c[1];
        D[(r + 8) * NMAX + col] = c[2];
        D[(r + 8) * NMAX + col + 1] = c[3];
    }
}

static uint16_t bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float unbf(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int main() {
    std::vector<uint16_t> A(M * K), B(NMAX * K);
    uint64_t s = 12345;
    auto rnd = [&]() {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return (float)((s >> 40) & 0xffffff) / 16777216.f * 2.f - 1.f;
    };
    for (auto& v : A) v = bf16(rnd() * std::ldexp(1.f, (int)(rnd() * 8)));
    for (auto& v : B) v = bf16(rnd() * std::ldexp(1.f, (int)(rnd() * 8)));
    uint16_t *dA, *dB;
    float* dD;
    CK(cudaMalloc(&dA, A.size() * 2));
    CK(cudaMalloc(&dB, B.size() * 2));
    CK(cudaMalloc(&dD, M * NMAX * 4));
    CK(cudaMemcpy(dA, A.data(), A.size() * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B.data(), B.size() * 2, cudaMemcpyHostToDevice));
    const int smem = (M + NMAX) * K * 2;
    CK(cudaFuncSetAttribute(wg_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    CK(cudaFuncSetAttribute(wg_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    std::vector<float> ref(M * NMAX), mm(M * NMAX), got(M * NMAX), got64(M * NMAX);
    for (int r = 0; r < M; r++)
        for (int n = 0; n < NMAX; n++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)unbf(A[r * K + k]) * unbf(B[n * K + k]);
            ref[r * NMAX + n] = (float)acc;
        }
    mma_kernel<<<1, 128>>>(dA, dB, dD);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(mm.data(), dD, mm.size() * 4, cudaMemcpyDeviceToHost));
    auto err = [&](const std::vector<float>& v, int ncols) {
        double worst = 0;
        for (int r = 0; r < M; r++)
            for (int n = 0; n < ncols; n++) {
                double mag = 0;
                for (int k = 0; k < K; k++) mag += std::fabs((double)unbf(A[r * K + k]) * unbf(B[n * K + k]));
                worst = std::fmax(worst, std::fabs(v[r * NMAX + n] - ref[r * NMAX + n]) / (mag + 1e-30));
            }
        return worst;
    };
    auto diff = [&](const std::vector<float>& a, const std::vector<float>& b, int ncols) {
        int n = 0;
        for (int r = 0; r < M; r++)
            for (int c = 0; c < ncols; c++) n += memcmp(&a[r * NMAX + c], &b[r * NMAX + c], 4) != 0;
        return n;
    };
    printf("mma.sync: worst relative error %.3g\n", err(mm, NMAX));
    const int strides[2][2] = {{128, (K / 8) * 128}, {(K / 8) * 128, 128}};
    for (auto& st : strides) {
        CK(cudaMemset(dD, 0xff, M * NMAX * 4));
        wg_kernel<128><<<1, 128, smem>>>(dA, dB, dD, st[0], st[1]);
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess) {
            printf("lbo %d sbo %d: %s\n", st[0], st[1], cudaGetErrorString(e));
            return 1;
        }
        CK(cudaMemcpy(got.data(), dD, got.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemset(dD, 0xff, M * NMAX * 4));
        wg_kernel<64><<<1, 128, smem>>>(dA, dB, dD, st[0], st[1]);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(got64.data(), dD, got64.size() * 4, cudaMemcpyDeviceToHost));
        printf("wgmma lbo %4d sbo %4d: n128 worst relative error %.3g, n64 %.3g; values differing from mma.sync: n128 %d of %d,"
               " n64 %d of %d; n64 vs n128 (first 64 columns) %d\n",
               st[0], st[1], err(got, NMAX), err(got64, 64), diff(got, mm, NMAX), M * NMAX, diff(got64, mm, 64), M * 64,
               diff(got64, got, 64));
    }
    return 0;
}
