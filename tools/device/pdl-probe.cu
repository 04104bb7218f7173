// What programmatic edges save between dependent kernels of a graph, measured alone: a stream captures a chain of
// 2,000 small kernels (132 blocks of 256 threads, each starting with the same griddepcontrol wait as every ds4j kernel,
// common.h DS4J_AWAIT_PREVIOUS), the graph is replayed ten times with its plain edges and ten times with every edge made
// programmatic (as graph.cpp's programmatic_edges does for a step), and the time per kernel of each is printed. The two
// chains must end with the same x[0].
//
//   nvcc -O3 -arch=sm_90 -std=c++17 tools/device/pdl-probe.cu -o .device/pdl_probe   (here; CUDA 13 or later)
//   .device/pdl_probe                                                              (on the GPU machine, carry .device)
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void chain_step(float* x, int n) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * 0.999f + 1.0f;  // each kernel reads what the one before it wrote
}

#define CK(call)                                                                     \
    do {                                                                             \
        cudaError_t e_ = (call);                                                     \
        if (e_ != cudaSuccess) {                                                     \
            printf("%s: %s\n", #call, cudaGetErrorString(e_));                       \
            return 1;                                                                \
        }                                                                            \
    } while (0)

int main() {
    const int kernels = 2000, n = 132 * 256, reps = 10;
    float* x;
    CK(cudaMalloc(&x, n * sizeof(float)));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    for (int programmatic = 0; programmatic < 2; programmatic++) {
        CK(cudaMemset(x, 0, n * sizeof(float)));
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        for (int k = 0; k < kernels; k++) chain_step<<<132, 256, 0, s>>>(x, n);
        CK(cudaStreamEndCapture(s, &g));
        if (programmatic) {
            size_t m = 0;
            CK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &m));
            std::vector<cudaGraphNode_t> from(m), to(m);
            std::vector<cudaGraphEdgeData> plain(m);
            CK(cudaGraphGetEdges(g, from.data(), to.data(), plain.data(), &m));
            CK(cudaGraphRemoveDependencies(g, from.data(), to.data(), plain.data(), m));
            cudaGraphEdgeData e{};
            e.from_port = cudaGraphKernelNodePortProgrammatic;
            e.type = cudaGraphDependencyTypeProgrammatic;
            std::vector<cudaGraphEdgeData> prog(m, e);
            CK(cudaGraphAddDependencies(g, from.data(), to.data(), prog.data(), m));
            printf("made %zu edges programmatic\n", m);
        }
        cudaGraphExec_t exec;
        CK(cudaGraphInstantiateWithFlags(&exec, g, 0));
        for (int w = 0; w < 3; w++) CK(cudaGraphLaunch(exec, s));
        CK(cudaStreamSynchronize(s));
        cudaEvent_t t0, t1;
        CK(cudaEventCreate(&t0));
        CK(cudaEventCreate(&t1));
        CK(cudaEventRecord(t0, s));
        for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(exec, s));
        CK(cudaEventRecord(t1, s));
        CK(cudaStreamSynchronize(s));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        float x0 = 0;
        CK(cudaMemcpy(&x0, x, sizeof(float), cudaMemcpyDeviceToHost));
        printf("%s edges: %.3f us per kernel (%d kernels of 132 blocks, %d replays); x[0] = %.6f\n",
               programmatic ? "programmatic" : "plain", ms * 1000.0 / ((double)reps * kernels), kernels, reps, x0);
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(g));
    }
    return 0;
}
