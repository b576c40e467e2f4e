/* gpu.h - the GPU backend of the training binary (docs/gpu-runtime.md).
 *
 * A Gpu runs one rank's training step on one NVIDIA GPU with the kernels
 * and the launch list of the plan the compiler made (plan/plan.h), through
 * the CUDA driver API (loaded at run time, runtime/gpu/cudrv.h):
 *   - the kernels: the image embedded in the binary when it was compiled
 *     for this GPU's architecture and this exact source, else the on-disk
 *     cache, else NVRTC now (then cached);
 *   - memory: parameters one allocation (the plan's params region), AdamW's
 *     moments one allocation ([m | v], in the trainer's host layout), the
 *     activations and gradients one arena laid out by the codegen's liveness
 *     plan, the batch one small region; nothing is allocated during a step.
 *     The total is checked against the GPU's free memory before anything is
 *     allocated;
 *   - a step: the batch's host-to-device copy, the plan's launches in order
 *     (collectives through the rank's Comm), the gradient norm, clipping and
 *     AdamW on the device; the loss and the norm are copied into a ring on
 *     the device, read by the host only when it logs. Without collectives the
 *     whole step is captured once in a CUDA graph and replayed.
 * Several Gpus may share a device (the rank simulator: one per thread). */
#ifndef MOEC_GPU_H
#define MOEC_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "../../ir/ir.h"
#include "../../plan/plan.h"
#include "../backend.h"

struct Comm;

typedef struct GpuOptions {
    int device;               /* ordinal, or -1: MOEC_LOCAL_RANK % count (0 without it) */
    int graphs;               /* 1: capture the step in a CUDA graph (with collectives: when they run on the device) */
    int ring;                 /* steps the loss ring holds (>= the trainer's log interval) */
    int verbose;              /* print where the kernels came from */
    const double *param_wd;   /* [nparams] each param's weight decay (0 = none) */
    int *no_kernels;          /* if not NULL, set to 1 when gpu_create failed for want of kernels (no image
                                 for this GPU and no NVRTC): the one failure --device auto falls back from */
    int forward_only;         /* forward passes only (eval, forward probes): the plan's forward launches, their
                                 buffers laid out alone (plan_forward_memory), no AdamW state; steps refused */
} GpuOptions;

typedef struct GpuInfo {
    char name[256];
    int cc_major, cc_minor, sms;
    size_t total_mem, free_mem;
    char arch[16];            /* what NVRTC compiles for it: sm_90a */
    char image_from[4608];    /* "embedded cubin (sm_90a)", "cache ~/.cache/moec/...", "NVRTC 13.0, 2.1 s" */
    size_t planned_bytes;     /* every allocation of the plan */
    size_t planned_params, planned_adam, planned_acts, planned_other;
    size_t training_acts;     /* the activations and gradients of the plan's own (training) layout */
    int forward_only;
    size_t measured_bytes;    /* device memory this Gpu took, from cuMemGetInfo (0 when shared) */
    int nlaunches, ncollectives, graph;
    int coll_device;          /* the collectives are enqueued on the device (the rank simulator's peer access, or
                                 NCCL): no host round trip in a step, which is one CUDA graph (decision 46) */
    double coll_seconds;      /* wall time inside collectives (after the kernels before them finished) */
    long long coll_calls;
} GpuInfo;

typedef struct Gpu Gpu;

/* What gpu_create allocates for plan p, from the plan alone (no driver, no GPU: --dry-run): the four
 * allocations, each in whole 2 MiB pages, their total, and the reserve the fit check adds for the module,
 * the context and NCCL's buffers. gpu_create refuses a plan when total + reserve exceeds the free memory.
 * ranks: the run's world size (buckets for the gradient all-reduce when > 1); ring: the loss ring's steps. */
enum { GPU_MEMORY_RESERVE = 256 << 20 };
typedef struct GpuMemoryPlan {
    size_t params;            /* the params region: fp32 masters and their bf16 working copies */
    size_t adam;              /* AdamW's two moments, fp32 */
    size_t acts;              /* the activations region: activations, gradients and workspaces (plan_memory) */
    size_t other;             /* the batch, the optimizer's scratch, the gradient buckets, the exchanges' staging */
    size_t total, reserve;
    size_t exchange;          /* of other: the expert exchanges' two staging buffers (ep slots of the dropless
                                 capacity each, decision 46); 0 without expert parallelism or with one rank */
} GpuMemoryPlan;
void gpu_plan_memory(const Plan *p, int ranks, int ring, GpuMemoryPlan *out);

/* Whether a GPU can be used: 1, or 0 with why in `why` (no driver, no device). */
int gpu_probe(char *why, size_t n);

/* Whether plan p's kernels run on GPU `name` of compute capability major.minor: 1, or 0 with the reason
 * and the way out in err. A plan whose source holds the fast kernels' sm_90a code (p->needs_arch, moec
 * compile's default --kernels fast where a node qualifies) runs on compute capability 9.0 only; on another
 * GPU the message names `moec compile MODEL -o OUT --kernels reference` and --device cpu (decision 48).
 * Pure: gpu_create calls it once it knows the device, before any kernel is compiled or loaded; the tests
 * fake the device through it. */
int gpu_check_arch(const Plan *p, const char *name, int major, int minor, char *err, size_t errlen);

/* Runs plan p (its kernels, tensor table and launch list, plan/plan.h):
 * gets the kernels' image (embedded in the plan, cached, or NVRTC now),
 * checks that the plan fits and allocates memory. comm is the rank's communicator (NULL = one
 * rank); collectives go through it, staged through host memory unless it
 * is NCCL (device memory). Returns NULL with a message in err. */
Gpu *gpu_create(const Plan *p, struct Comm *comm, const GpuOptions *o, char *err, size_t errlen);
void gpu_destroy(Gpu *G);
const GpuInfo *gpu_info(const Gpu *G);

/* Parameters and AdamW moments to and from the trainer's host layout:
 * params[param_off[p] ..] (param_off per g->params index); adam = [m | v],
 * each nparams_total floats in the same layout. Synchronous. */
int gpu_put_params(Gpu *G, const float *params, const int64_t *param_off);
int gpu_get_params(Gpu *G, float *params, const int64_t *param_off);
int gpu_put_adam(Gpu *G, const float *adam, int64_t nparams_total);
int gpu_get_adam(Gpu *G, float *adam, int64_t nparams_total);
/* The raw gradient of param p (after the step's backward), synchronous. */
int gpu_get_grad(Gpu *G, int p, float *out);

/* One training step on tokens/targets ([local batch, seq] i32): forward,
 * backward, global norm, clipping and AdamW with this lr and bias
 * corrections. Asynchronous unless the plan has collectives staged
 * through the host. */
int gpu_step(Gpu *G, const int32_t *tokens, const int32_t *targets, double lr, double bc1, double bc2);
/* --grad-accum: one step over `micro` micro-batches ([micro, local batch, seq] i32 each), the gradient of
 * sum_k weight[k] * loss_k (each pass seeded with its weight) accumulated in double on the device, then norm,
 * clipping and AdamW as gpu_step (backend.h accum_step). Synchronous. */
int gpu_accum_step(Gpu *G, const int32_t *tokens, const int32_t *targets, int micro, const double *weight, double lr,
                   double bc1, double bc2);
/* The forward pass only (evaluation); returns the loss (synchronous). With m (else NULL), what the pass
 * showed is added to it as the CPU backend adds it (runtime/cpu/moe_metrics.c, the same code): the
 * language-model loss node's value and per MoE layer the router's logits and chosen experts, each copied
 * to the host right after its node's launches, before a later launch reuses its memory. */
int gpu_eval(Gpu *G, const int32_t *tokens, const int32_t *targets, double *loss, BackendMetrics *m);
/* The training passes' metrics since the last call (the steps' and --grad-accum's micro-batches': loss,
 * language-model loss, per MoE layer the load, entropy and auxiliary loss), summed on the device during the
 * steps (no copy inside a step, which stays one CUDA graph) and read here after waiting for them; then reset. */
int gpu_read_step_metrics(Gpu *G, BackendMetrics *m);
/* The forward pass up to node `node` (its launches and those before it), whose fp32 value is copied to out
 * (ir_numel floats); synchronous. */
int gpu_forward_probe(Gpu *G, const int32_t *tokens, const int32_t *targets, int node, float *out);
/* --profile: what gpu_profile_step adds its times (seconds) and launch counts to. */
typedef struct GpuProfile {
    double *node_seconds;     /* [nnodes], by node id */
    int64_t *node_launches;   /* [nnodes] */
    double batch_seconds, opt_seconds, bucket_seconds, step_seconds;
    int64_t batch_copies, opt_launches, bucket_calls;
} GpuProfile;
/* gpu_step launch by launch, never as a CUDA graph (the same launches in
 * the same order: the same results), with a CUDA event recorded before and
 * after each launch, collective, the batch's copy, the optimizer and the
 * whole step; waits for the step and adds the events' elapsed times to prof. */
int gpu_profile_step(Gpu *G, const int32_t *tokens, const int32_t *targets, double lr, double bc1, double bc2,
                     GpuProfile *prof);
/* Waits for the steps since the last call and returns their losses and
 * gradient norms (oldest first); *n is how many (<= ring). */
int gpu_read_steps(Gpu *G, double *losses, double *norms, int *n);
/* After gpu_read_steps: device memory in use now minus before gpu_create. */
void gpu_measure(Gpu *G);

/* Host-memory collectives for a device transport (NCCL), through a
 * temporary device buffer; group is a CommGroup. 1, or 0 (c->error). */
int gpu_host_allreduce_f64(Gpu *G, struct Comm *c, int group, double *v, int64_t n);
int gpu_host_allgather(Gpu *G, struct Comm *c, int group, const void *in, void *out, size_t bytes);

/* The last error (for messages after a 0 return). */
const char *gpu_error(const Gpu *G);

#endif
