/* plan_args.h - a plan launch's kernel parameters as cuLaunchKernel wants them (plan.h PlanLaunch):
 * buffer pointers, tensor maps (encoded once here: arena addresses never move) and ints. Used by the
 * GPU backend (gpu.c) and the GPU plan check (tests/gpu/run_plan.c). */
#ifndef MOEC_GPU_PLAN_ARGS_H
#define MOEC_GPU_PLAN_ARGS_H

#include <stddef.h>

#include "../../plan/plan.h"
#include "cudrv.h"
#include "kimage.h"

typedef struct GpuArgs {
    void *mem;       /* the values: 64-byte-aligned slots (a CUtensorMap is 128 bytes, 64-byte aligned) */
    void **argp;     /* [nargs] pointers into mem, for cuLaunchKernel */
    int nargs;
} GpuArgs;

/* Fills a for launch l with buffer b at address buf[b]; tensor maps with cuTensorMapEncodeTiled (the
 * driver must be loaded); a PLAN_ARG_NORM of param node p gets norm[p] (NULL, or 0 there: nullptr, the kernel then
 * writes no squares; decision 73). 1, or 0 with the reason in err. */
int gpu_args_build(const PlanLaunch *l, const CUdeviceptr *buf, const CUdeviceptr *norm, GpuArgs *a, char *err,
                   size_t errlen);
void gpu_args_free(GpuArgs *a);

/* Writes every param's working copy (plan.h PLAN_BUF_COPY) from the param's fp32 values with kernel
 * moec_to_bf16 of the image (a bf16 copy) or moec_fp8b_copy_ExNxK (an fp8-block weight's e4m3 copy), on `stream`,
 * and waits: what a harness that uploads parameters itself
 * (tests/gpu/run_plan.c, bench/layer.c) does after the upload (the backend does it in
 * gpu_put_params). Returns the number of copies written, or -1 with the reason in err. */
int gpu_fill_copies(const Plan *p, KModules *mods, const CUdeviceptr *buf, CUstream stream, char *err, size_t errlen);

/* Decision 73's switch, MOEC_GRAD_NORM: "gemm" (the expert weights' gradient-norm squares from their weight-gradient
 * GEMMs, the optimizer does not read those gradients again) gives 1; unset, empty or "separate" (moec_grad_sumsq
 * reads every gradient, as before) 0, the default until the GEMMs' squares have been checked on a GPU
 * (tests/gpu/run_plan.sh's norm_fused rows, tests/gpu/step_ab.sh); anything else -1 with the message in err. */
int gpu_norm_from_gemm(char *err, size_t errlen);

/* For a harness that gives the weight-gradient GEMMs a buffer of its own (tests/gpu/run_plan.c, bench/layer.c):
 * count[node] (count has the graph's nnodes entries, zeroed by the caller) = the doubles that the launch naming
 * param node `node` in a PLAN_ARG_NORM writes on a device of `sms` SMs; returns their total (0: none). */
int64_t gpu_norm_counts(const Plan *p, int sms, int64_t *count);

/* A launch's grid for a device of `sms` SMs (PLAN_GRID_ALL_SMS: one block per SM). */
unsigned gpu_launch_grid(const PlanLaunch *l, int sms);
/* The same for the launch's kernel f, whose dynamic shared memory is set: a cluster launch (l->cluster > 1) of
 * PLAN_GRID_ALL_SMS gets cudrv_persistent_grid's (the clusters that fit at once); 0 with the driver's error in
 * *r when that query fails. */
unsigned gpu_launch_grid_f(const PlanLaunch *l, CUfunction f, int sms, CUresult *r);

#endif
