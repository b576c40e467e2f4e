/* cpu.h - the CPU reference backend: executes an IR graph with plain C.
 *
 * A CpuPlan gives every node a buffer, laid out by the one memory planner
 * (plan/memory.c, the GPU's too): buffers of intermediate tensors are
 * reused once their last user has run (liveness over the node order), in
 * one allocation; inputs and params are bound to caller-owned storage;
 * outputs (the loss, gradients, `output` tensors) keep their buffers to the
 * end. Two precisions: F32 for
 * training, F64 for the check mode that gradients are verified in. */
#ifndef MOEC_CPU_H
#define MOEC_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "../../ir/ir.h"
#include "../backend.h"

struct Comm;

typedef enum CpuPrecision { CPU_F32, CPU_F64 } CpuPrecision;

typedef struct CpuPlan {
    const IrGraph *g;
    CpuPrecision prec;
    void **buf;          /* [nnodes] */
    size_t *bytes;       /* [nnodes] */
    void *arena;         /* the activations and gradients, one allocation */
    size_t planned_bytes;  /* its size: the activation peak */
    struct Comm *comm;     /* for the collective ops (expert parallelism); NULL = one rank */
    int nplanned;          /* nodes [0, nplanned) have buffers (cpu_plan_init_upto); running past them is a bug */
    unsigned char *bf16;   /* [nnodes] or NULL: 1 where the plan stores the node's tensor in bf16 (cpu_plan_round_bf16) */
} CpuPlan;

/* Elements are 4 bytes for i32 and for floats in F32, 8 for floats in F64. */
size_t cpu_elem_size(const IrNode *n, CpuPrecision prec);

void cpu_plan_init(CpuPlan *p, const IrGraph *g, CpuPrecision prec);
/* Buffers for nodes [0, upto) only, planned as if the graph ended there (a forward pass up to the loss:
 * no gradient, and each activation released after its last forward use, not kept for the backward). */
void cpu_plan_init_upto(CpuPlan *p, const IrGraph *g, CpuPrecision prec, int upto);
/* The activation arena cpu_plan_init_upto allocates. */
size_t cpu_plan_arena_bytes_upto(const IrGraph *g, CpuPrecision prec, int upto);
void cpu_plan_free(CpuPlan *p);
struct Plan;
/* Rounds, from now on, every value an F32 run writes into a node whose buffer the plan stores in bf16
 * (PlanBuf.storage, decided by codegen under --kernels fast: docs/decisions.md 40) to bf16, round to
 * nearest even, right after the node ran: the GPU rounds at the same points, so the CPU stays its
 * reference. Nothing for a plan without the GPU part or without bf16 tensors, or in F64. */
void cpu_plan_round_bf16(CpuPlan *p, const struct Plan *plan);
/* Points an input or param node at caller-owned data (cpu_elem_size each). */
void cpu_plan_bind(CpuPlan *p, const IrNode *n, void *data);
/* Runs nodes [from, to) in order. */
/* Run nodes [from, to) / all nodes: 1, or 0 when a collective failed (a peer lost, a bad message); the
 * communicator's error says why and the nodes after it did not run. */
int cpu_plan_run_range(CpuPlan *p, int from, int to);
/* The activation arena cpu_plan_init would allocate, in bytes (nothing allocated). */
size_t cpu_plan_arena_bytes(const IrGraph *g, CpuPrecision prec);
int cpu_plan_run(CpuPlan *p);
void *cpu_plan_data(const CpuPlan *p, const IrNode *n);
double cpu_plan_scalar(const CpuPlan *p, const IrNode *n);

/* Threads for the row-parallel kernels (default 1). Results do not depend
 * on the count: each output element is computed by one thread. */
void cpu_set_threads(int n);
int cpu_get_threads(void);
void cpu_parallel_for(int64_t n, void (*fn)(void *ctx, int64_t lo, int64_t hi), void *ctx);

/* moe_metrics.c: the nodes a pass is watched at (BackendMetrics) */
typedef struct CpuWatch {
    int lm;                          /* the language-model loss node, or -1 */
    int nlayers;
    int layer[BACKEND_MOE_LAYERS];   /* the forward topk_experts nodes */
} CpuWatch;
void cpu_metrics_watch(const IrGraph *g, CpuWatch *w);
int cpu_metrics_watched(const CpuWatch *w, int id);
/* The backward pass's seed, d loss / d loss: the fill node (value 1) autodiff starts from (LOSS.seed), or -1.
 * --grad-accum writes a micro-batch's weight into it after it runs, on both backends. */
int cpu_loss_seed(const IrGraph *g);
void cpu_metrics_observe(const CpuPlan *p, const CpuWatch *w, int id, BackendMetrics *m);
/* What MoE layer l (the watched topk_experts node n) showed, from host copies of its chosen experts [N, k]
 * and its router's logits [N, E]; cpu_metrics_observe's arithmetic, which the GPU backend calls too. */
void cpu_metrics_layer(const IrNode *n, int l, const float *logits, const int32_t *ex, BackendMetrics *m);

void cpu_exec_node_f32(const IrNode *n, void *const *buf, struct Comm *comm);
void cpu_exec_node_f64(const IrNode *n, void *const *buf, struct Comm *comm);

#endif
