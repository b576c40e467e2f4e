/* cudrv.c - loading the CUDA driver API at run time (cudrv.h). */
#include "cudrv.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

CuDriver cu;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int load_ok;
static char load_err[512];

static void load(void)
{
    const char *name = getenv("MOEC_CUDA_LIB") ? getenv("MOEC_CUDA_LIB") : "libcuda.so.1";
    void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(load_err, sizeof load_err, "cannot load the CUDA driver (%s): %s", name, dlerror());
        return;
    }
#define CUDRV_SYM(fn, sym, args)                                                                       \
    *(void **)&cu.fn = dlsym(h, sym);                                                                   \
    if (!cu.fn) {                                                                                       \
        snprintf(load_err, sizeof load_err, "the CUDA driver %s has no %s (too old a driver?)", name, sym); \
        return;                                                                                         \
    }
    CUDRV_FUNCS(CUDRV_SYM)
#undef CUDRV_SYM
    /* every stream its own hardware queue (the default is 8): the rank simulator's ranks are streams of one
     * context, and one rank's barrier kernel waiting in a queue another rank's stream shares would stop that
     * rank from ever arriving (runtime/gpu/gpu.c, COLL_SIM; a user's own setting wins) */
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
    CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        char b[128];
        snprintf(load_err, sizeof load_err, "the CUDA driver did not start: %s",
                 r == CUDA_ERROR_NO_DEVICE ? "no CUDA-capable device is present"
                 : r == 34                ? "CUDA_ERROR_STUB_LIBRARY: this libcuda is the toolkit's stub, not a driver"
                                          : cudrv_error(r, b, sizeof b));
        return;
    }
    int count = 0;
    if (cu.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
        snprintf(load_err, sizeof load_err, "the CUDA driver sees no GPU");
        return;
    }
    cu.cuDriverGetVersion(&cu.version);
    load_ok = 1;
}

int cudrv_load(char *err, size_t errlen)
{
    pthread_once(&once, load);
    if (!load_ok && err)
        snprintf(err, errlen, "%s", load_err);
    return load_ok;
}

const char *cudrv_error(CUresult r, char *buf, size_t n)
{
    const char *name = NULL, *what = NULL;
    if (cu.cuGetErrorName)
        cu.cuGetErrorName(r, &name);
    if (cu.cuGetErrorString)
        cu.cuGetErrorString(r, &what);
    if (name && what)
        snprintf(buf, n, "%s (%s)", name, what);
    else
        snprintf(buf, n, "CUDA error %d", (int)r);
    return buf;
}

static CUlaunchConfig launch_config(unsigned grid, unsigned block, unsigned shared, CUstream stream,
                                    CUlaunchAttribute *attr, int cluster)
{
    CUlaunchConfig c;
    memset(&c, 0, sizeof c);
    memset(attr, 0, sizeof *attr);
    attr->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr->value.clusterDim.x = (unsigned)cluster;
    attr->value.clusterDim.y = attr->value.clusterDim.z = 1;
    c.gridDimX = grid;
    c.gridDimY = c.gridDimZ = 1;
    c.blockDimX = block;
    c.blockDimY = c.blockDimZ = 1;
    c.sharedMemBytes = shared;
    c.hStream = stream;
    c.attrs = attr;
    c.numAttrs = 1;
    return c;
}

CUresult cudrv_launch(CUfunction f, unsigned grid, unsigned block, unsigned shared, CUstream stream, void **args,
                      int cluster)
{
    if (cluster <= 1)
        return cu.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, shared, stream, args, NULL);
    CUlaunchAttribute attr;
    CUlaunchConfig c = launch_config(grid, block, shared, stream, &attr, cluster);
    return cu.cuLaunchKernelEx(&c, f, args, NULL);
}

unsigned cudrv_persistent_grid(CUfunction f, int sms, unsigned block, unsigned shared, int cluster, CUresult *r)
{
    *r = CUDA_SUCCESS;
    if (sms < 1)
        sms = 1;
    if (cluster <= 1)
        return (unsigned)sms;
    CUlaunchAttribute attr;
    CUlaunchConfig c = launch_config((unsigned)cluster, block, shared, NULL, &attr, cluster);
    int n = 0;
    *r = cu.cuOccupancyMaxActiveClusters(&n, f, &c);
    if (*r != CUDA_SUCCESS)
        return 0;
    int most = sms / cluster < 1 ? 1 : sms / cluster;
    if (n < 1)
        n = 1;
    if (n > most)
        n = most;
    return (unsigned)(n * cluster);
}
