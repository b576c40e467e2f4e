/* cuda.h - CUDA C code generation for a plan (docs/codegen.md).
 *
 * cuda_codegen() takes a Plan whose graph went through the whole pass
 * pipeline and fills its GPU part (plan/plan.h):
 *   - cuda_source: one CUDA C translation unit, kernels.cu: the device
 *     library (codegen/mxfp8.cuh, codegen/prelude.cuh), then one `extern "C"
 *     __global__` kernel per launch of every node in graph order, every
 *     shape, stride and attribute a compile-time constant, each headed by a
 *     comment naming its IR node and source line; then the optimizer
 *     kernels (AdamW, gradient norm: cuda_runtime_kernels). Identical
 *     kernels of different nodes (the same layer repeated) are emitted once,
 *     named after the first node that needs them;
 *   - the tensor table (a buffer per node, the views that alias packed
 *     gradients, the kernels' workspaces), laid out by plan_memory_launches
 *     (lifetimes in launch positions);
 *   - the launch list: kernels with grid, block and buffers, host-side
 *     collectives in their place, the eval prefix.
 * Storage is fp32 for every floating tensor (an e4m3 tensor holds its
 * dequantized values, as on the CPU), i32 for indices. The output is
 * byte-identical for identical input. */
#ifndef MOEC_CODEGEN_CUDA_H
#define MOEC_CODEGEN_CUDA_H

#include <stddef.h>

#include "../ir/ir.h"
#include "../plan/plan.h"

/* The runtime's own kernels, after the nodes' in every kernels.cu. */
enum { CUDA_RUNTIME_KERNELS = 21 };
extern const char *const cuda_runtime_kernels[CUDA_RUNTIME_KERNELS];

/* The weight-gradient (K-grouped) GEMMs' epilogue in fast plans (docs/kernels-sm90.md): the default
 * (codegen/cuda_moe_fast.c FAST_KGEMM_EPILOGUE), or forced either way (A/B timing, the tests). The TMA-store
 * epilogue is used only where the launch's dW starts 16-byte aligned; elsewhere the register stores. */
typedef enum CudaKgemmEpilogue { CUDA_KGEMM_DEFAULT, CUDA_KGEMM_TMA, CUDA_KGEMM_REGS } CudaKgemmEpilogue;

/* The bf16 M-grouped GEMMs' schedule in fast plans (docs/kernels-sm90.md, decision 49): the default, chosen per
 * launch from the H200's measurements (codegen/cuda_moe_fast.c mgemm_pingpong), or forced (A/B timing, the tests): cooperative, ping-pong with
 * 128 x 128 tiles per consumer warpgroup, ping-pong with 64 x 256 (pingpong64). The driver takes it from the
 * environment, MOEC_MGEMM=cooperative|pingpong|pingpong64 (driver/build.c). */
typedef enum CudaMgemmSchedule {
    CUDA_MGEMM_DEFAULT,
    CUDA_MGEMM_COOPERATIVE,
    CUDA_MGEMM_PINGPONG,
    CUDA_MGEMM_PINGPONG64
} CudaMgemmSchedule;

/* The same for the K-grouped (weight-gradient) GEMMs: cooperative or ping-pong with 128 x 128 tiles per consumer
 * warpgroup (FAST_KGEMM_SCHEDULE); MOEC_KGEMM=cooperative|pingpong in the driver's environment. */
typedef enum CudaKgemmSchedule { CUDA_KSCHED_DEFAULT, CUDA_KSCHED_COOPERATIVE, CUDA_KSCHED_PINGPONG } CudaKgemmSchedule;

/* The bf16 fast expert MLP backward's dSwiGLU (decision 60): in the epilogue of the da GEMM (da never stored) or
 * the separate kernel after a GEMM that stores da; the default per launch (cuda_moe_fast.c dswiglu_fused: the
 * epilogue where da's K = H >= 4096, measured faster there on the H200, the separate kernel below);
 * MOEC_DSWIGLU=fused|separate in the driver's environment. The same choice for fp8-block's forward SwiGLU and a's
 * 1x128 quantisation (decision 57): in the FP8 gate_up GEMM's epilogue or the separate tile quantiser (the
 * default: the epilogue measured slower); MOEC_FP8_SWIGLU=fused|separate. And fp8-block's tile passes over h
 * (decision 69): the forward's SwiGLU quantiser and h's copy, and the backward's dSwiGLU, a's colwise copy and
 * dprobs, each one launch reading its tiles once (the default, "fused") or the earlier separate launches;
 * MOEC_FP8_PASSES=fused|separate. */
typedef enum CudaDswiglu { CUDA_DSWIGLU_DEFAULT, CUDA_DSWIGLU_FUSED, CUDA_DSWIGLU_SEPARATE } CudaDswiglu;

/* The head-dim-128 attention forward's and dq's consumer schedule (codegen/attn_fast.cuh fwd_ws, bwd_dq_ws;
 * decision 59): the default (ping-pong), or forced (A/B timing): "ws" decision 50's kernels as measured;
 * "overlap" each warpgroup's own overlap fixed (the forward's exponentials before its wait for P V, in fp32 in
 * place, o rescaled under s_j); "pingpong" that plus a strict alternation of the two consumer warpgroups' products
 * by named barriers. MOEC_ATTN=ws|overlap|pingpong in the driver's environment. */
typedef enum CudaAttnSchedule { CUDA_ATTN_DEFAULT, CUDA_ATTN_WS, CUDA_ATTN_OVERLAP, CUDA_ATTN_PINGPONG } CudaAttnSchedule;

typedef struct CudaOptions {
    int no_dedup;          /* one kernel per launch even when identical (default: share) */
    CudaKgemmEpilogue kgemm_epilogue;
    CudaMgemmSchedule mgemm_schedule;
    CudaKgemmSchedule kgemm_schedule;
    CudaDswiglu dswiglu;
    CudaDswiglu fp8_swiglu; /* fp8-block's forward SwiGLU: the gate_up GEMM's epilogue or separate */
    CudaDswiglu fp8_passes; /* fp8-block's passes over h: merged (decision 69, the default) or separate */
    CudaAttnSchedule attn_schedule;
    int attn_max_grid; /* > 0: the attention launches' blocks capped here (a test: each block then loops over
                        * several items, MOEC_ATTN_GRID in the driver's environment); 0: 65535 */

    /* fp8-block's FP8 K-grouped weight-gradient GEMMs (GemmFp8KGrouped, decision 56): the default
     * (codegen/cuda_moe_fast.c FP8B_KGEMM_SCHEDULE), cooperative 128 x 128 tiles, or ping-pong with 64 x 128 tiles per
     * consumer warpgroup (taken where the TMA-store epilogue is: dW 16-byte aligned); MOEC_FP8_KGEMM=cooperative|pingpong
     * in the driver's environment, independent of MOEC_KGEMM (the bf16 K-grouped GEMMs) */
    CudaKgemmSchedule fp8_kgemm_schedule;
    /* fp8-block's FP8 M-grouped GEMMs (GemmFp8MGrouped, decision 71): 0 codegen's default (clusters where N or K
     * >= 8,192: codegen/cuda_moe_fast.c fp8b_cluster), 1 one block a tile, 2 clusters of two blocks on tiles
     * (m, 2j) and (m, 2j + 1) with A's stages multicast into both (where the tile columns pair up);
     * MOEC_FP8_CLUSTER=1|2 */
    int fp8_cluster;
    /* the fast RoPE rotation's heads a thread (decision 72): 0 codegen's default (4 where the heads allow); 1, 2 or 4
     * (dividing the heads): that many; MOEC_ROPE_HEADS=N */
    int rope_heads;
} CudaOptions;

/* Fills p's GPU part. Returns 1, or 0 after reporting through d (may be
 * NULL) why the graph cannot run on the GPU (a custom op from a plugin).
 * opts may be NULL. Internal errors die(). p must have no GPU part yet
 * (plan_clear_gpu removes one). */
int cuda_codegen(Plan *p, const CudaOptions *opts, Diag *d);

/* The rule for the fast grouped MLP (moec compile --kernels fast, codegen/cuda_moe_fast.c): 1 if the
 * grouped_mlp or grouped_mlp_bwd node n can run on the sm_90a bf16 GEMMs, else 0 with the reason in why
 * (precision bf16, not mxfp8 or fp8-block; H % 128 == 0, F % 128 == 0 (which makes every GEMM's K a
 * multiple of 64 and N a multiple of its BLOCK_N); the padded rows R + 128 E and E * 2F under 2^31). */
int cuda_fast_mlp_ok(const IrNode *n, char *why, size_t len);
/* The same for an sdpa / sdpa_bwd node and the fast attention kernels (codegen/attn_fast.cuh). */
int cuda_fast_attention_ok(const IrNode *n, char *why, size_t len);
/* The same for a linear / linear_dx / linear_dw node and the sm_90a GEMMs (one group, fp32 out). */
int cuda_fast_linear_ok(const IrNode *n, char *why, size_t len);

/* Whether the emitter table covers op (for the tests): 1 launches kernels,
 * 2 no launch (leaf or alias), 3 host-side collective, 4 refused, 0 none. */
int cuda_op_handling(IrOp op);

#endif
