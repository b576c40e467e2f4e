/* cudrv.h - the part of the CUDA driver API the GPU backend uses, loaded
 * at run time with dlopen("libcuda.so.1").
 *
 * moec declares the few types and constants itself instead of including the
 * toolkit's cuda.h, so the training binary builds on machines without the
 * toolkit and starts on machines without a driver: cudrv_load() fails with
 * a message and the trainer falls back to the CPU (or, with --device cuda,
 * stops with that message). Every entry point is resolved once; the
 * versioned symbols (_v2) are the ones cuda.h maps the names to. */
#ifndef MOEC_CUDRV_H
#define MOEC_CUDRV_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphExec_st *CUgraphExec;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
    CU_STREAM_NON_BLOCKING = 1,
    CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
    CU_EVENT_DEFAULT = 0,
    CU_MEMHOSTALLOC_PORTABLE = 1,
    CU_MEMHOSTALLOC_DEVICEMAP = 2,
    /* for the sm_90 GEMM (codegen/gemm_sm90.cuh): large dynamic shared memory, kernel facts, tensor maps */
    CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
    CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
    CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
    CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
    CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
    CU_TENSOR_MAP_INTERLEAVE_NONE = 0,
    CU_TENSOR_MAP_SWIZZLE_NONE = 0,
    CU_TENSOR_MAP_SWIZZLE_128B = 3,
    CU_TENSOR_MAP_L2_PROMOTION_NONE = 0,
    CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3,
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0,
};

/* CUtensorMap: 128 opaque bytes, 64-byte aligned (cuda.h's layout); a kernel takes it by value as a
 * `const __grid_constant__` parameter (codegen/sm90.cuh's moec::sm90::TmaDesc). */
typedef struct CUtensorMap {
    _Alignas(64) unsigned long long opaque[16];
} CUtensorMap;

/* cuLaunchKernelEx's configuration (cuda.h's layout), for the one attribute moec sets: the cluster dimension
 * (thread-block clusters, sm_90; decision 71) */
enum { CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4 };
typedef struct CUlaunchAttribute {
    int id;
    char pad[4];
    union {
        char pad[64];
        struct {
            unsigned x, y, z;
        } clusterDim;
    } value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig {
    unsigned gridDimX, gridDimY, gridDimZ;
    unsigned blockDimX, blockDimY, blockDimZ;
    unsigned sharedMemBytes;
    CUstream hStream;
    CUlaunchAttribute *attrs;
    unsigned numAttrs;
} CUlaunchConfig;

/* X(name, symbol, arguments) */
#define CUDRV_FUNCS(X)                                                                                          \
    X(cuInit, "cuInit", (unsigned))                                                                             \
    X(cuDriverGetVersion, "cuDriverGetVersion", (int *))                                                         \
    X(cuDeviceGetCount, "cuDeviceGetCount", (int *))                                                             \
    X(cuDeviceGet, "cuDeviceGet", (CUdevice *, int))                                                             \
    X(cuDeviceGetName, "cuDeviceGetName", (char *, int, CUdevice))                                               \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", (int *, int, CUdevice))                                      \
    X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", (size_t *, CUdevice))                                             \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", (CUcontext *, CUdevice))                             \
    X(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", (CUdevice))                                     \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", (CUcontext))                                                           \
    X(cuCtxSynchronize, "cuCtxSynchronize", (void))                                                              \
    X(cuMemGetInfo, "cuMemGetInfo_v2", (size_t *, size_t *))                                                     \
    X(cuModuleLoadData, "cuModuleLoadData", (CUmodule *, const void *))                                          \
    X(cuModuleUnload, "cuModuleUnload", (CUmodule))                                                              \
    X(cuModuleGetFunction, "cuModuleGetFunction", (CUfunction *, CUmodule, const char *))                        \
    X(cuMemAlloc, "cuMemAlloc_v2", (CUdeviceptr *, size_t))                                                      \
    X(cuMemFree, "cuMemFree_v2", (CUdeviceptr))                                                                  \
    X(cuMemAllocHost, "cuMemAllocHost_v2", (void **, size_t))                                                    \
    X(cuMemFreeHost, "cuMemFreeHost", (void *))                                                                  \
    X(cuMemHostAlloc, "cuMemHostAlloc", (void **, size_t, unsigned))                                             \
    X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2", (CUdeviceptr *, void *, unsigned))             \
    X(cuMemcpyHtoD, "cuMemcpyHtoD_v2", (CUdeviceptr, const void *, size_t))                                      \
    X(cuMemcpyDtoH, "cuMemcpyDtoH_v2", (void *, CUdeviceptr, size_t))                                            \
    X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", (CUdeviceptr, const void *, size_t, CUstream))                  \
    X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", (void *, CUdeviceptr, size_t, CUstream))                        \
    X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", (CUdeviceptr, CUdeviceptr, size_t, CUstream))                   \
    X(cuMemsetD8Async, "cuMemsetD8Async", (CUdeviceptr, unsigned char, size_t, CUstream))                       \
    X(cuLaunchKernel, "cuLaunchKernel",                                                                         \
      (CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **,      \
       void **))                                                                                                 \
    X(cuLaunchKernelEx, "cuLaunchKernelEx", (const CUlaunchConfig *, CUfunction, void **, void **))             \
    X(cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters", (int *, CUfunction, const CUlaunchConfig *))    \
    X(cuStreamCreate, "cuStreamCreate", (CUstream *, unsigned))                                                  \
    X(cuStreamDestroy, "cuStreamDestroy_v2", (CUstream))                                                         \
    X(cuStreamSynchronize, "cuStreamSynchronize", (CUstream))                                                    \
    X(cuStreamQuery, "cuStreamQuery", (CUstream))                                                                \
    X(cuStreamBeginCapture, "cuStreamBeginCapture_v2", (CUstream, int))                                          \
    X(cuStreamEndCapture, "cuStreamEndCapture", (CUstream, CUgraph *))                                           \
    X(cuGraphInstantiate, "cuGraphInstantiateWithFlags", (CUgraphExec *, CUgraph, unsigned long long))           \
    X(cuGraphLaunch, "cuGraphLaunch", (CUgraphExec, CUstream))                                                   \
    X(cuGraphExecDestroy, "cuGraphExecDestroy", (CUgraphExec))                                                   \
    X(cuGraphDestroy, "cuGraphDestroy", (CUgraph))                                                               \
    X(cuEventCreate, "cuEventCreate", (CUevent *, unsigned))                                                     \
    X(cuEventRecord, "cuEventRecord", (CUevent, CUstream))                                                       \
    X(cuEventSynchronize, "cuEventSynchronize", (CUevent))                                                       \
    X(cuEventQuery, "cuEventQuery", (CUevent))                                                                   \
    X(cuEventElapsedTime, "cuEventElapsedTime_v2", (float *, CUevent, CUevent))                                 \
    X(cuEventDestroy, "cuEventDestroy_v2", (CUevent))                                                            \
    X(cuGetErrorName, "cuGetErrorName", (CUresult, const char **))                                               \
    X(cuGetErrorString, "cuGetErrorString", (CUresult, const char **))                                           \
    X(cuFuncGetAttribute, "cuFuncGetAttribute", (int *, int, CUfunction))                                        \
    X(cuFuncSetAttribute, "cuFuncSetAttribute", (CUfunction, int, int))                                          \
    X(cuMemsetD32Async, "cuMemsetD32Async", (CUdeviceptr, unsigned, size_t, CUstream))                          \
    X(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled",                                                         \
      (CUtensorMap *, int, unsigned, void *, const unsigned long long *, const unsigned long long *,              \
       const unsigned *, const unsigned *, int, int, int, int))

typedef struct CuDriver {
#define CUDRV_FIELD(name, sym, args) CUresult(*name) args;
    CUDRV_FUNCS(CUDRV_FIELD)
#undef CUDRV_FIELD
    int version;  /* cuDriverGetVersion: 13000 = 13.0 */
} CuDriver;

/* The loaded driver (valid after cudrv_load returned 1). */
extern CuDriver cu;

/* Loads libcuda.so.1 ($MOEC_CUDA_LIB overrides the name) and calls
 * cuInit(0), once; later calls return the first result. Returns 1, or 0
 * with why in err ("libcuda.so.1 not found", "no CUDA-capable device"). */
int cudrv_load(char *err, size_t errlen);

/* Launches f on a 1-D grid: cuLaunchKernel, or with cluster > 1 cuLaunchKernelEx with cluster dimension
 * (cluster, 1, 1) (grid a multiple of cluster). */
CUresult cudrv_launch(CUfunction f, unsigned grid, unsigned block, unsigned shared, CUstream stream, void **args,
                      int cluster);
/* The grid of a persistent kernel (one block an SM, looping over tiles): sms, or with clusters of `cluster`
 * blocks, cluster times the clusters that can run at once (cuOccupancyMaxActiveClusters: a GPC's SMs may not
 * pair up, and a cluster left to wait would run all its tiles after the others), at most sms rounded down to
 * a multiple of cluster. 0 with the driver's error in *r when the query fails. */
unsigned cudrv_persistent_grid(CUfunction f, int sms, unsigned block, unsigned shared, int cluster, CUresult *r);

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for r. */
const char *cudrv_error(CUresult r, char *buf, size_t n);

#endif
