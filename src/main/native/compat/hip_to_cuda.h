/*
 * The subset of the HIP runtime API that ds4j uses, mapped onto the CUDA runtime so that the same HIP C++ sources
 * build with nvcc (CUDA 13). Written for ds4j; only what src/main/native uses is here. On AMD the sources include
 * <hip/hip_runtime.h> instead (see src/main/native/src/common.h).
 */
#ifndef DS4J_HIP_TO_CUDA_H
#define DS4J_HIP_TO_CUDA_H

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_profiler_api.h>

/* types */
typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef cudaDeviceProp hipDeviceProp_t;
typedef cudaGraph_t hipGraph_t;
typedef cudaGraphExec_t hipGraphExec_t;
typedef cudaGraphNode_t hipGraphNode_t;
typedef cudaGraphNodeType hipGraphNodeType;
typedef cudaKernelNodeParams hipKernelNodeParams;
typedef cudaStreamCaptureStatus hipStreamCaptureStatus;
typedef cudaGraphExecUpdateResult hipGraphExecUpdateResult;

/* error codes */
#define hipSuccess cudaSuccess
#define hipErrorNoDevice cudaErrorNoDevice
#define hipErrorInsufficientDriver cudaErrorInsufficientDriver
#define hipErrorOutOfMemory cudaErrorMemoryAllocation
#define hipErrorInvalidDevice cudaErrorInvalidDevice
#define hipErrorStreamCaptureUnsupported cudaErrorStreamCaptureUnsupported
#define hipErrorStreamCaptureInvalidated cudaErrorStreamCaptureInvalidated
#define hipErrorStreamCaptureMerge cudaErrorStreamCaptureMerge
#define hipErrorStreamCaptureUnmatched cudaErrorStreamCaptureUnmatched
#define hipErrorStreamCaptureUnjoined cudaErrorStreamCaptureUnjoined
#define hipErrorStreamCaptureIsolation cudaErrorStreamCaptureIsolation
#define hipErrorStreamCaptureImplicit cudaErrorStreamCaptureImplicit
#define hipErrorCapturedEvent cudaErrorCapturedEvent
#define hipErrorStreamCaptureWrongThread cudaErrorStreamCaptureWrongThread
#define hipErrorGraphExecUpdateFailure cudaErrorGraphExecUpdateFailure

/* error strings and state */
#define hipGetErrorName cudaGetErrorName
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipPeekAtLastError cudaPeekAtLastError

/* devices */
#define hipGetDeviceCount cudaGetDeviceCount
#define hipSetDevice cudaSetDevice
#define hipGetDevice cudaGetDevice
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeComputeCapabilityMajor cudaDevAttrComputeCapabilityMajor
#define hipFuncSetAttribute cudaFuncSetAttribute
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipMemGetInfo cudaMemGetInfo
#define hipDriverGetVersion cudaDriverGetVersion
#define hipRuntimeGetVersion cudaRuntimeGetVersion

/* streams */
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipStreamWaitEvent cudaStreamWaitEvent
#define hipEvent_t cudaEvent_t
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDisableTiming cudaEventDisableTiming
#define hipEventRecord cudaEventRecord
#define hipEventDestroy cudaEventDestroy

/* memory */
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipDeviceSynchronize cudaDeviceSynchronize

/* stream capture and graphs (decode-step graphs, graph.cpp) */
#define hipStreamBeginCapture cudaStreamBeginCapture
#define hipStreamEndCapture cudaStreamEndCapture
#define hipStreamIsCapturing cudaStreamIsCapturing
#define hipStreamCaptureModeRelaxed cudaStreamCaptureModeRelaxed
#define hipStreamCaptureStatusNone cudaStreamCaptureStatusNone
#define hipStreamCaptureStatusActive cudaStreamCaptureStatusActive
#define hipStreamCaptureStatusInvalidated cudaStreamCaptureStatusInvalidated
#define hipGraphGetNodes cudaGraphGetNodes
#define hipGraphGetEdges cudaGraphGetEdges
#define hipGraphNodeGetType cudaGraphNodeGetType
#define hipGraphNodeTypeKernel cudaGraphNodeTypeKernel
#define hipGraphKernelNodeGetParams cudaGraphKernelNodeGetParams
#define hipGraphInstantiateWithFlags cudaGraphInstantiateWithFlags
#define hipGraphLaunch cudaGraphLaunch
#define hipProfilerStart cudaProfilerStart
#define hipProfilerStop cudaProfilerStop
#define hipGraphExecDestroy cudaGraphExecDestroy
#define hipGraphDestroy cudaGraphDestroy
#define hipGraphExecUpdateSuccess cudaGraphExecUpdateSuccess

/*
 * HIP keeps the CUDA 11 form of the update call (error node and result as two outputs); CUDA 12 and later return
 * both in one struct.
 */
static inline cudaError_t hipGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphNode_t* error_node,
                                             cudaGraphExecUpdateResult* result) {
#if CUDART_VERSION >= 12000
    cudaGraphExecUpdateResultInfo info;
    cudaError_t e = cudaGraphExecUpdate(exec, graph, &info);
    if (error_node) *error_node = info.errorNode;
    if (result) *result = info.result;
    return e;
#else
    return cudaGraphExecUpdate(exec, graph, error_node, result);
#endif
}

#endif /* DS4J_HIP_TO_CUDA_H */
