/* cuda.h - CUDA C code generation for a compiled IR graph (docs/codegen.md).
 *
 * cuda_codegen() takes a graph after the whole pass pipeline and produces
 *   - source: one CUDA C translation unit, kernels.cu: the device library
 *     (codegen/mxfp8.cuh, codegen/prelude.cuh), then one `extern "C"
 *     __global__` kernel per launch of every node in graph order, every
 *     shape, stride and attribute a compile-time constant, each headed by a
 *     comment naming its IR node and source line; then the optimizer
 *     kernels (AdamW, gradient norm). Identical kernels of different nodes
 *     (the same layer repeated) are emitted once, named after the first node
 *     that needs them; the plan says which kernel each launch runs.
 *   - plan: JSON (schema in docs/codegen.md): the launches in order with
 *     their grid, block and buffers, host-side collectives in their place,
 *     every buffer's size and liveness-planned offset, params, gradients,
 *     inputs, the loss, the optimizer.
 * Storage is fp32 for every floating tensor (an e4m3 tensor holds its
 * dequantized values, as on the CPU), i32 for indices. The output is
 * byte-identical for identical input. */
#ifndef MOEC_CODEGEN_CUDA_H
#define MOEC_CODEGEN_CUDA_H

#include <stddef.h>

#include "../ir/ir.h"

typedef struct CudaModule {
    char *source;          /* kernels.cu, NUL-terminated */
    size_t source_len;
    char *plan_json;       /* plan.json, NUL-terminated */
    int nkernels;          /* distinct kernels in source, optimizer included */
    int nlaunches;         /* kernel launches per training step (forward + backward) */
    int ncollectives;      /* host-side collective calls per step */
    char **kernel_names;   /* [nkernels], in source order */
} CudaModule;

typedef struct CudaOptions {
    int no_dedup;          /* one kernel per launch even when identical (default: share) */
} CudaOptions;

/* Generates the module. Returns 1, or 0 after reporting through d (may be
 * NULL) why the graph cannot run on the GPU (a custom op from a plugin).
 * opts may be NULL. Internal errors die(). */
int cuda_codegen(const IrGraph *g, const CudaOptions *opts, Diag *d, CudaModule *out);
void cuda_module_free(CudaModule *m);

/* Whether the emitter table covers op (for the tests): 1 launches kernels,
 * 2 no launch (leaf or alias), 3 host-side collective, 4 refused, 0 none. */
int cuda_op_handling(IrOp op);

#endif
