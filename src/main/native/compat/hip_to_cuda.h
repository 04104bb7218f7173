/*
 * The subset of the HIP runtime API that ds4j uses, mapped onto the CUDA runtime so that the same HIP C++ sources
 * build with nvcc (CUDA 13). Written for ds4j; only what src/main/native uses is here. On AMD the sources include
 * <hip/hip_runtime.h> instead (see src/main/native/src/common.h).
 */
#ifndef DS4J_HIP_TO_CUDA_H
#define DS4J_HIP_TO_CUDA_H

#include <cuda_runtime.h>
#include <cuda_fp16.h>

/* types */
typedef cudaError_t hipError_t;
typedef cudaStream_t hipStream_t;
typedef cudaDeviceProp hipDeviceProp_t;

/* error codes */
#define hipSuccess cudaSuccess
#define hipErrorNoDevice cudaErrorNoDevice
#define hipErrorInsufficientDriver cudaErrorInsufficientDriver
#define hipErrorOutOfMemory cudaErrorMemoryAllocation
#define hipErrorInvalidDevice cudaErrorInvalidDevice

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
#define hipMemGetInfo cudaMemGetInfo
#define hipDriverGetVersion cudaDriverGetVersion
#define hipRuntimeGetVersion cudaRuntimeGetVersion

/* streams */
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize

/* memory */
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemsetAsync cudaMemsetAsync
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipDeviceSynchronize cudaDeviceSynchronize

#endif /* DS4J_HIP_TO_CUDA_H */
