/* backend.h - what the trainer asks of a compute backend: a table of
 * functions, as the transports in runtime/comm/comm.h are.
 *
 * A backend runs one rank's part of a Plan: it owns the rank's parameters,
 * gradients and AdamW state in its own memory (host or device), runs a
 * training step (forward, backward, the global gradient norm, clipping and
 * AdamW, with the step's collectives through the rank's Comm) and hands the
 * step's loss back when asked. The trainer (train/) holds host copies of
 * the parameters and AdamW state only for initialisation, checkpoints and
 * dumps, in the plan's flat layout (PlanParam.offset; AdamW as [m | v]).
 * It never asks which backend it has: everything backend-specific is
 * behind these functions. Two implement it: runtime/cpu (the reference, plain
 * C) and runtime/gpu (CUDA). */
#ifndef MOEC_BACKEND_H
#define MOEC_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "../plan/plan.h"
#include "comm/comm.h"

typedef struct Backend Backend;

typedef struct BackendOptions {
    int graphs;          /* CUDA: capture the step in a graph when it has no collectives */
    int ring;            /* steps whose losses may stay unread (>= the trainer's log interval) */
    int *no_kernels;     /* CUDA: set to 1 when create failed for want of kernels (--device auto falls back) */
    int forward_only;    /* forward passes only (eval, forward_probe, read_metrics; put_state without AdamW):
                          * the activations planned up to the loss, no gradients, no AdamW state; a training
                          * step is refused (--eval, embed and score) */
} BackendOptions;

/* What the trainer prints about the backend and the memory it planned. */
typedef struct BackendInfo {
    char device[512];        /* "cpu (2 threads)", "cuda: NVIDIA H200 (sm_90a, 132 SMs, 139.8 GiB, 139.2 GiB free)" */
    char kernels[4700];      /* where the kernels came from ("" on the CPU) */
    char step[256];          /* how a step runs: "the step is replayed as a CUDA graph", ... */
    size_t planned_params, planned_opt, planned_acts, planned_other, planned_total;
    size_t training_acts;    /* the activations (and gradients) a training plan of this backend would take:
                              * planned_acts unless forward_only */
    int forward_only;        /* set up with BackendOptions.forward_only */
    size_t measured;         /* device memory this backend took (0: not measured) */
    int nlaunches, ncollectives;
    double coll_seconds;     /* wall time inside collectives */
    long long coll_calls;
} BackendInfo;

/* --profile: where a training step's time goes, per IR node. The trainer
 * zeroes a BackendProfile (node: nnodes entries of the plan's graph) once,
 * and each profiled step adds to it. */
enum { BACKEND_PROFILE_KERNELS = 200 };
typedef struct BackendProfileRow {
    double seconds;          /* summed over the profiled steps */
    int64_t launches;        /* kernels, copies or collective calls, summed */
    char kernels[BACKEND_PROFILE_KERNELS];  /* what ran, comma-separated ("" on the CPU: the node's C code) */
} BackendProfileRow;

/* work that belongs to no IR node */
typedef enum BackendProfileExtra {
    BACKEND_PROFILE_OPTIMIZER,  /* the global gradient norm, clipping, AdamW */
    BACKEND_PROFILE_BUCKETS,    /* the bucketed gradient all-reduce after the backward (GPU) */
    BACKEND_PROFILE_BATCH,      /* the batch into the backend's memory */
    BACKEND_PROFILE_NEXTRA
} BackendProfileExtra;

typedef struct BackendProfile {
    int nnodes;
    BackendProfileRow *node;                     /* [nnodes], by node id; caller-owned */
    BackendProfileRow extra[BACKEND_PROFILE_NEXTRA];
    double step_seconds;     /* the whole steps, from the batch's copy to the last update, summed */
    int steps;
    char clock[64];          /* how it was timed: "CUDA events", "CLOCK_MONOTONIC" */
} BackendProfile;

/* What a forward pass showed besides the objective (read_metrics): the
 * language-model loss without the auxiliary terms, and per MoE layer (each
 * forward topk_experts node) the tokens routed to each expert, the router's
 * entropy and the load-balancing loss E * sum_i f_i P_i of its batch. Sums
 * over the passes since the last read (`passes` of them); the caller divides. */
enum { BACKEND_MOE_LAYERS = 64, BACKEND_MOE_EXPERTS = 64 };
typedef struct BackendMoeLayer {
    int node;                /* the topk_experts node's id */
    int experts, k;
    double rows;             /* tokens routed (summed over the passes) */
    double load[BACKEND_MOE_EXPERTS];  /* assignments per expert (summed; a token counts k times) */
    double entropy;          /* the router's mean per-token entropy in nats, summed over the passes */
    double aux;              /* the load-balancing loss, summed over the passes */
} BackendMoeLayer;

typedef struct BackendMetrics {
    int passes;
    double loss;             /* the objective (the model's `loss`, aux terms included), summed */
    double lm_loss;          /* the language-model loss node alone (cross_entropy / masked_lm_loss), summed */
    int has_lm;              /* the graph has such a node */
    int nlayers;
    BackendMoeLayer layer[BACKEND_MOE_LAYERS];
} BackendMetrics;

typedef struct BackendOps {
    const char *name;        /* "cpu", "cuda" */
    /* Sets up the rank's part of plan p (which must outlive the backend).
     * comm: the rank's communicator. NULL with a message in err. */
    Backend *(*create)(const Plan *p, Comm *comm, const BackendOptions *o, char *err, size_t errlen);
    void (*destroy)(Backend *b);
    /* Parameters and AdamW moments in the plan's flat layout ([m | v], each
     * nparams_total floats); adam may be NULL (parameters only). */
    int (*put_state)(Backend *b, const float *params, const float *adam);
    int (*get_state)(Backend *b, float *params, float *adam);
    /* The raw gradient of parameter i after the last step (before clipping). */
    int (*get_grad)(Backend *b, int i, float *out);
    /* One training step on this rank's batch ([local batch, seq] i32 each):
     * forward, backward, norm, clipping, AdamW with learning rate lr at
     * optimizer step `step` (from 1: the bias corrections). May return
     * before it is done; its loss is read by read_steps. */
    int (*step)(Backend *b, const int32_t *tokens, const int32_t *targets, double lr, int64_t step);
    /* A training step exactly as step() (same arguments, same results: the
     * loss curve goes on; its loss is read by read_steps), with each launch
     * timed and added to prof. Synchronous: it returns when the step is done.
     * The GPU runs it launch by launch, never as a CUDA graph. */
    int (*profile_step)(Backend *b, const int32_t *tokens, const int32_t *targets, double lr, int64_t step,
                        BackendProfile *prof);
    /* Optional (NULL: not available): one training step over `micro` micro-batches of this
     * rank's batch shape (tokens, targets: [micro, local batch, seq] i32), its gradient that of
     * sum_k weight[k] * loss_k: each micro-batch's pass runs with the backward's seed (d loss /
     * d loss, the fill node LOSS.seed) set to weight[k], so the plan's collectives (gradient
     * all-reduce, expert exchanges) carry weighted gradients, which are summed in double; then
     * norm, clipping and AdamW as step(). With weight[k] = (this rank's scored targets in
     * micro-batch k) / (this rank's in all of them), the gradient and loss of the batch of all
     * micro-batches at once (the losses are token-weighted means; each rank's rows those it
     * would hold in that batch), up to fp32 rounding (--grad-accum). Its loss,
     * sum_k weight[k] * loss_k, is read by read_steps. */
    int (*accum_step)(Backend *b, const int32_t *tokens, const int32_t *targets, int micro, const double *weight,
                      double lr, int64_t step);
    /* Waits for the steps since the last call; their losses (this rank's)
     * and global gradient norms, oldest first; *n of them. */
    int (*read_steps)(Backend *b, double *losses, double *norms, int *n);
    /* The forward pass only; this rank's loss. */
    int (*eval)(Backend *b, const int32_t *tokens, const int32_t *targets, double *loss);
    /* Optional (NULL: the backend does not measure them): the metrics of the
     * training steps (eval = 0) or of the eval() passes (eval = 1) since the
     * last read of that kind, then reset. */
    int (*read_metrics)(Backend *b, int eval, BackendMetrics *out);
    /* Optional (NULL: not available): the forward pass only, with the value
     * of node `node` (float, its whole tensor, as on the CPU) copied to out
     * as soon as it is computed. For embeddings and scores (train/embed.c,
     * train/score.c). */
    int (*forward_probe)(Backend *b, const int32_t *tokens, const int32_t *targets, int node, float *out);
    /* Collectives on host values over the rank's transport (a device
     * transport such as NCCL stages them through device memory). */
    int (*host_allreduce_f64)(Backend *b, CommGroup g, double *v, int64_t n);
    int (*host_allgather)(Backend *b, CommGroup g, const void *in, void *out, size_t bytes);
    void (*info)(Backend *b, BackendInfo *out);
    const char *(*error)(const Backend *b);
} BackendOps;

/* Every backend begins with its ops. */
struct Backend {
    const BackendOps *ops;
};

extern const BackendOps backend_cpu;
extern const BackendOps backend_cuda;

/* Whether the CUDA backend can start here: 1, or 0 with why (no driver, no GPU). */
int backend_cuda_probe(char *why, size_t n);

/* What the CUDA backend would allocate for plan p on one GPU, from the plan alone (no driver, no GPU needed:
 * --dry-run): its four allocations in whole 2 MiB pages (parameters with their bf16 copies, the AdamW
 * moments, the activations region, the batch and optimizer scratch), their total, and the reserve its fit
 * check adds (runtime/gpu/gpu.h: gpu_plan_memory). ranks: the run's world size; ring: the loss ring's steps. */
typedef struct BackendMemoryPlan {
    size_t params, opt, acts, other, total, reserve;
    size_t exchange;  /* of other: the expert exchanges' staging (decision 46) */
} BackendMemoryPlan;
void backend_cuda_plan_memory(const Plan *p, int ranks, int ring, BackendMemoryPlan *out);

#endif
