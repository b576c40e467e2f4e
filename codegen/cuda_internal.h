/* cuda_internal.h - what the CUDA code generator's files share: the kernel
 * builder the per-op emitters write through, and the emitter table.
 *
 * An emitter turns one IR node into one or more launches. For each it calls
 *
 *     cg_begin(cg, n, "suffix", "what it does")
 *     cg_out / cg_in / cg_param_ws ...     the kernel's pointer parameters
 *     cg_const / cg_line ...               the body, constants first
 *     cg_end(cg, block, grid)
 *
 * The builder adds the kernel (or reuses an identical one another node
 * already emitted), records the launch with its buffers for the plan, and
 * keeps the source deterministic. Workspaces (scratch buffers live only
 * during the node) come from cg_ws(). */
#ifndef MOEC_CODEGEN_CUDA_INTERNAL_H
#define MOEC_CODEGEN_CUDA_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "../ir/ir.h"
#include "../plan/plan.h"
#include "cuda.h"

/* ---- a growable string */
typedef struct Sb {
    char *s;
    size_t len, cap;
} Sb;
void sb_put(Sb *b, const char *s, size_t n);
void sb_puts(Sb *b, const char *s);
void sb_printf(Sb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_vprintf(Sb *b, const char *fmt, va_list ap);
void sb_free(Sb *b);

enum { CG_MAX_ARGS = 24, CG_BLOCK = 256 };

/* The buffers are the plan's tensor table (plan/plan.h): bufs[i] is node
 * i's tensor, workspaces follow; plan_memory_launches lays them out. */
typedef PlanBuf CgBuf;
const char *cg_ctype(PlanStorage s);           /* float, double, int */

typedef struct CgLaunch {
    int node;
    int kernel;          /* index into kernels, -1: a host-side collective */
    int64_t grid;
    int block;
    int nargs;
    int args[CG_MAX_ARGS];
    char *what;
    int typed;           /* targs hold typed arguments (a tensor map, an int) */
    PlanArg targs[CG_MAX_ARGS];
    int shared_bytes;    /* dynamic shared memory */
    int cluster;         /* PlanLaunch.cluster */
    char *impl;          /* the node's implementation choice, or NULL */
} CgLaunch;

typedef struct CgKernel {
    char *name;
    char *header;        /* comment lines naming the first node */
    char *text;          /* parameters and body, everything after the name */
    int block;
    uint64_t hash;
    int *users;          /* node ids launching it, the first included */
    int nusers, capusers;
} CgKernel;

/* NVRTC units (decision 67): a heavy kernel instantiates a template of the sm_90a GEMM or attention library
 * (moec::sm90::Gemm..., moec::attn::...) and is a unit alone; light kernels go CG_UNIT_LIGHT to a unit */
enum { CG_UNIT_LIGHT = 24 };
int cg_kernel_heavy(const CgKernel *k);

typedef struct Cg {
    const IrGraph *g;
    Diag *diag;
    int dedup;
    CgBuf *bufs;
    int nbufs, capbufs;
    CgLaunch *launches;
    int nlaunches, caplaunches;
    CgKernel *kernels;
    int nkernels, capkernels;
    int *table;          /* hash table of kernels (index + 1, 0 empty) */
    int tablecap;
    /* the kernel being built */
    const IrNode *node;
    char *suffix, *what;
    Sb params, body;
    int args[CG_MAX_ARGS];
    int nargs;
    int launch_index;    /* launches of this node so far */
    int errors;
    /* typed arguments and launch settings of the kernel being built (cg_tmap, cg_i32, cg_launch_extra) */
    int typed;
    PlanArg targs[CG_MAX_ARGS];
    int shared_bytes, all_sms;
    int cluster; /* the launch being built: 0, or thread-block clusters of 2 (cg_launch_cluster) */
    const char *impl;    /* set by an emitter with a choice for all the node's launches (cg_impl) */
    char impl_buf[320];
    PlanKernels kernel_choice; /* the plan's --kernels */
    int fast_used;       /* a kernel needs the sm_90a device code (moe_fast.cuh and the GEMM) */
    int dense_fast_used; /* a kernel needs dense_fast.cuh (the skinny linears) */
    int attn_fast_used;  /* a kernel needs attn_fast.cuh (flash attention) */
    int fp8b_used;       /* a kernel needs fp8_block_fast.cuh (the fp8-block expert MLP; sets fast_used too) */
    CudaKgemmEpilogue kgemm_epilogue; /* CudaOptions.kgemm_epilogue */
    CudaMgemmSchedule mgemm_schedule; /* CudaOptions.mgemm_schedule */
    CudaDswiglu dswiglu;              /* CudaOptions.dswiglu */
    CudaDswiglu fp8_swiglu;           /* CudaOptions.fp8_swiglu */
    CudaDswiglu fp8_passes;           /* CudaOptions.fp8_passes */
    CudaKgemmSchedule kgemm_schedule; /* CudaOptions.kgemm_schedule */
    CudaAttnSchedule attn_schedule;   /* CudaOptions.attn_schedule */
    int attn_max_grid;                /* CudaOptions.attn_max_grid */

    CudaKgemmSchedule fp8_kgemm_schedule; /* CudaOptions.fp8_kgemm_schedule */
    int fp8_cluster;                      /* CudaOptions.fp8_cluster */
    int rope_heads;                       /* CudaOptions.rope_heads */
} Cg;

/* ---- the builder */
void cg_begin(Cg *cg, const IrNode *n, const char *suffix, const char *what);
/* A pointer parameter for buffer `buf`: `T *__restrict__ name` (const T
 * for inputs), T from the buffer. */
void cg_param(Cg *cg, int buf, int is_out, const char *name);
void cg_out(Cg *cg, const IrNode *n, const char *name);
void cg_in(Cg *cg, const IrNode *src, const char *name);
/* A workspace of `count` elements of `storage`, owned by node n. */
int cg_ws(Cg *cg, const IrNode *n, PlanStorage storage, int64_t count, const char *what);
/* The same, kept until node `until` (later than n) has run: what n writes there, `until` reads. */
int cg_ws_kept(Cg *cg, const IrNode *n, const IrNode *until, PlanStorage storage, int64_t count, const char *what);
/* Node n's workspace `what`, or -1. */
int cg_find_ws(Cg *cg, const IrNode *n, const char *what);
/* The bf16 working copy of a param (plan.h PLAN_BUF_COPY), made on first use: written by the
 * optimizer's step and when the parameters are loaded, never by a node's kernels. glu_f: its layout
 * (PlanBuf.glu_f: 0 the param's, F the gate/up-interleaved one). */
int cg_param_copy(Cg *cg, const IrNode *param, int64_t glu_f);
/* The e4m3 working copy of an fp8-block expert weight [E, N, K] (plan.h PlanFp8Copy: the 128x128-tile codes,
 * the transposed codes and their scales), made on first use: written by the optimizer's step
 * (moec_adamw_fp8b_ExNxK) and when the parameters are loaded (moec_fp8b_copy_ExNxK), never by a node's
 * kernels. A param has one copy: a bf16 and an e4m3 one for the same param is an internal error. */
int cg_param_fp8b_copy(Cg *cg, const IrNode *param);
void cg_const(Cg *cg, const char *name, int64_t v);      /* constexpr long long name = v; */
/* Typed parameters (plan.h PlanArg): `const __grid_constant__ moec::sm90::TmaDesc name`, a bf16 tensor
 * map over buffer buf viewed as [rows, cols] with box {64, box_rows}; `int name` passed as value. */
void cg_tmap(Cg *cg, int buf, int64_t rows, int64_t cols, int box_rows, const char *name);
/* The same for an fp32 tensor map over buffer buf from element `offset` on (16-byte aligned), box
 * {32, box_rows} (plan.h PLAN_ARG_TMAP_F32). */
/* an E4M3 (byte) tensor map over buf from byte `offset` on (16-byte aligned) viewed [rows, cols], box
 * {128, box_rows} (plan.h PLAN_ARG_TMAP_U8) */
void cg_tmap_u8(Cg *cg, int buf, int64_t offset, int64_t rows, int64_t cols, int box_rows, const char *name);
void cg_tmap_f32(Cg *cg, int buf, int64_t offset, int64_t rows, int64_t cols, int box_rows, const char *name);
void cg_i32(Cg *cg, int64_t value, const char *name);
/* A `long long name` parameter given `value` at run time (plan.h PLAN_ARG_I64). Every number that depends on
 * the batch (a row or token count, an element count or offset that scales with it) goes in this way, never as
 * cg_const or a literal in the body: the kernels' code is then the same for every --batch, so a training
 * binary run with another batch uses its embedded image (docs/decisions.md 62; tests/codegen/batch.test). */
void cg_i64(Cg *cg, int64_t value, const char *name);
/* a `double *name` parameter: where the launch's weight-gradient GEMM writes the squares of param's gradient,
 * per_block doubles a block (plan.h PLAN_ARG_NORM, decision 73); param NULL: none, the runtime passes nullptr */
void cg_norm(Cg *cg, const IrNode *param, int per_block, const char *name);
/* The launch being built: `shared` bytes of dynamic shared memory, and (all_sms) one block per SM. */
void cg_launch_extra(Cg *cg, int shared, int all_sms);
/* ... launched in thread-block clusters of `cluster` blocks (2: decision 71; needs all_sms) */
void cg_launch_cluster(Cg *cg, int cluster);
/* Names the implementation the node's following launches are (plan.json "impl"); NULL: none. */
void cg_impl(Cg *cg, const char *impl);
void cg_line(Cg *cg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void cg_end(Cg *cg, int block, int64_t grid);
/* A host-side collective: no kernel, a plan entry with its buffers. */
void cg_collective(Cg *cg, const IrNode *n);

/* ---- helpers for emitters */
int64_t cg_grid(int64_t items, int block);     /* ceil(items / block), 1 to 65535 */
const char *cg_dbl(char buf[64], double v);    /* an exact double literal */
int64_t cg_lead(const IrNode *n);              /* product of all but the last dimension */
int64_t cg_last(const IrNode *n);              /* the last dimension (1 for scalars) */
int cg_is_mxfp8(const IrNode *n);
/* what codegen says of a plan with precision fp8-block (no GPU kernels yet) */
#define CG_FP8_BLOCK_CPU_ONLY                                                                                    \
    "precision fp8-block runs on the GPU only with --kernels fast, on the fused expert MLP (grouped_mlp) with " \
    "hidden and FFN sizes multiples of 256 (docs/fp8-block.md); otherwise use the CPU backend, or bf16 or mxfp8 " \
    "on the GPU"              /* grouped_mlp(_bwd) with precision mxfp8 */
/* Reports a user-level error at the node (codegen cannot handle it). */
void cg_error(Cg *cg, const IrNode *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---- GEMM tiles (cuda_dense.c): moec::gemm, grouped_gemm and
 * grouped_gemm_wgrad take their tile side T (64, 32 or 16; moec::GEMM_T =
 * CG_GEMM_T is 64), chosen per launch from its shape at code-generation
 * time and, where the row count is the batch's, passed at run time
 * (moec::gemm_tiled / grouped_gemm_tiled branch on it; decision 62). 64 x 64 tiles do the most work per load, but a
 * small output has few of them: [1024 x 64] is 16 blocks on a GPU of 132
 * SMs. So a launch keeps 64 only if its grid has at least
 * CG_GEMM_MIN_BLOCKS blocks, else takes 32 if that has, else 16 (the most
 * blocks). 264 = 2 x the 132 SMs of an H200: two blocks per SM at least,
 * so every SM is busy and the last wave is at most half idle. Every T
 * computes each output with the same fmaf sequence: results do not change
 * by a bit, only the speed. */
enum { CG_GEMM_T = 64, CG_GEMM_MIN_BLOCKS = 2 * 132 };
/* Blocks of a GEMM launch with T x T tiles: (batch ceil(m / T) + extra) x
 * ceil(n / T), uncapped (dense: batch 1, extra 0; grouped_gemm: m = R,
 * extra = E + 1, the static bound on the groups' row tiles;
 * grouped_gemm_wgrad: batch E). */
int64_t cg_gemm_blocks(int64_t batch, int64_t m, int64_t extra, int64_t n, int t);
/* The tile side for such a launch (64, 32 or 16), by the rule above. */
int cg_gemm_tile(int64_t batch, int64_t m, int64_t extra, int64_t n);

/* ---- the emitter table (cuda.c) and the families (cuda_*.c) */
typedef enum CgKind {
    CG_NONE = 0,     /* no entry: a bug, caught at start-up */
    CG_LEAF,         /* input, param: bound by the host, no launch */
    CG_ALIAS,        /* view: aliases its packed source, no launch */
    CG_KERNELS,      /* one or more kernel launches */
    CG_HOST,         /* a collective: a host-side call recorded in the plan */
    CG_UNSUPPORTED,  /* refused with an error (custom ops; fp8-block quantize ops, CPU only for now) */
} CgKind;

typedef int (*CgEmitFn)(Cg *cg, const IrNode *n);

typedef struct CgEmitter {
    CgKind kind;
    CgEmitFn fn;         /* CG_KERNELS */
} CgEmitter;

extern const CgEmitter cg_emitters[IR_OP_COUNT];

/* ---- storage types (cuda.c cg_decide_storage, docs/decisions.md 40): under --kernels fast a node's
 * tensor is stored in bf16 when its producer writes bf16 and every consumer reads it; these say which
 * kernels can. A bf16 buffer's kernel parameter is `unsigned short *` (cg_ctype), read and written with
 * moec::sm90::ld / st (sm90.cuh) or by the tensor maps of the GEMMs. */
/* 1 if linear / linear_dx / linear_dw node n runs on the sm_90a GEMM (not the skinny or reference kernels):
 * its activation operands may be bf16 (read by tensor maps, zero-filled past the rows), and a linear's or
 * linear_dx's output too (the TMA-store epilogue, rows past the end clipped) */
int cg_linear_on_gemm(const Cg *cg, const IrNode *n);
/* 1 if sdpa / sdpa_bwd node n gets the fast attention kernels (a backward: with its fast forward) */
int cg_attn_fast(const Cg *cg, const IrNode *n);
/* node id's buffer is stored in bf16 */
int cg_is_bf16(const Cg *cg, int id);
/* n's buffer starts a multiple of `bytes` into its region: every buffer is 256-byte aligned except a view,
 * at its offset into the packed source (the 16-byte accesses of the fast memory-bound kernels need 32) */
int cg_aligned(const IrNode *n, int bytes);

/* cuda_dense.c */
int cg_emit_fill(Cg *cg, const IrNode *n);
int cg_emit_embedding(Cg *cg, const IrNode *n);
int cg_emit_embedding_dw(Cg *cg, const IrNode *n);
int cg_emit_linear(Cg *cg, const IrNode *n);       /* linear, linear_dx, linear_dw */
int cg_emit_rmsnorm(Cg *cg, const IrNode *n);
int cg_emit_rmsnorm_dx(Cg *cg, const IrNode *n);
int cg_emit_rmsnorm_dw(Cg *cg, const IrNode *n);
int cg_emit_rope(Cg *cg, const IrNode *n);         /* rope, rope_dx */
int cg_emit_elementwise(Cg *cg, const IrNode *n);  /* add, mul, scale, silu, gelu, silu_dx, gelu_dx, row_scale */
int cg_emit_swiglu(Cg *cg, const IrNode *n);       /* swiglu, scaled_swiglu */
int cg_emit_swiglu_dh(Cg *cg, const IrNode *n);    /* swiglu_dx, scaled_swiglu_dh */
int cg_emit_row_reduce(Cg *cg, const IrNode *n);   /* scaled_swiglu_dp, row_dot */
int cg_emit_slice(Cg *cg, const IrNode *n);
/* cuda_attention.c */
int cg_emit_sdpa(Cg *cg, const IrNode *n);
int cg_emit_sdpa_bwd(Cg *cg, const IrNode *n);
int cg_emit_segment_ids(Cg *cg, const IrNode *n);
/* cuda_moe.c */
int cg_emit_topk_experts(Cg *cg, const IrNode *n);
int cg_emit_topk_probs(Cg *cg, const IrNode *n);
int cg_emit_topk_probs_dx(Cg *cg, const IrNode *n);
int cg_emit_route_plan(Cg *cg, const IrNode *n);
int cg_emit_expert_counts(Cg *cg, const IrNode *n);
int cg_emit_dispatch(Cg *cg, const IrNode *n);     /* dispatch, dispatch_probs, dispatch_probs_dx */
int cg_emit_combine(Cg *cg, const IrNode *n);
int cg_emit_grouped_linear(Cg *cg, const IrNode *n); /* grouped_linear, _dx, _dw */
int cg_emit_grouped_mlp(Cg *cg, const IrNode *n);
int cg_emit_grouped_mlp_bwd(Cg *cg, const IrNode *n);
/* cuda_moe_fast.c: the fast (sm_90a bf16 tensor-core) grouped_mlp and its backward; 1 on success */
int cg_emit_grouped_mlp_fast(Cg *cg, const IrNode *n);
int cg_emit_grouped_mlp_bwd_fast(Cg *cg, const IrNode *n);
/* 1 if the fast kernels read through dispatch node d (its consumers gather from its source): d then
 * launches nothing */
int cg_fast_reads_through(Cg *cg, const IrNode *d);
/* combine(y, plan) of a fast grouped_mlp's y straight from its padded bf16 rows (the forward then
 * writes no y): 1 when it emitted that, 0 to use the reference kernel */
int cg_emit_combine_fast(Cg *cg, const IrNode *n);
/* linear / linear_dx / linear_dw on the sm_90a GEMMs (one group): 1 when it emitted that, 0 to use another */
int cg_emit_linear_fast(Cg *cg, const IrNode *n);
int cg_emit_quantize(Cg *cg, const IrNode *n);
int cg_emit_quantize_grouped(Cg *cg, const IrNode *n);
int cg_emit_ep_local_splits(Cg *cg, const IrNode *n);
int cg_emit_ep_permute(Cg *cg, const IrNode *n);   /* ep_sort, ep_unsort */
/* cuda_loss.c */
int cg_emit_cross_entropy(Cg *cg, const IrNode *n);
int cg_emit_cross_entropy_dx(Cg *cg, const IrNode *n);
int cg_emit_aux_loss(Cg *cg, const IrNode *n);
int cg_emit_aux_loss_dx(Cg *cg, const IrNode *n);
int cg_emit_mean_square(Cg *cg, const IrNode *n);
int cg_emit_mean_square_dx(Cg *cg, const IrNode *n);
/* cuda_optim.c: the AdamW step and gradient norm (not tied to a node) */
void cg_emit_optimizer(Cg *cg, Sb *src);
/* cuda_comm.c: the collectives on the device (exchange staging, the rank simulator's peer access) */
void cg_emit_collectives(Sb *src);

/* The generated device library (codegen/mxfp8.cuh and codegen/prelude.cuh
 * as C strings, made by the Makefile). */
extern const char cuda_prelude_mxfp8[];
extern const char cuda_prelude_lib[];
/* the sm_90a part, pasted only into plans with fast kernels */
extern const char cuda_prelude_sm90_sched[], cuda_prelude_sm90[], cuda_prelude_gemm_sm90[], cuda_prelude_moe_fast[];
/* the fast dense kernels (no sm_90a feature), pasted only when used */
extern const char cuda_prelude_dense_fast[];
/* flash attention on the tensor cores (mma.sync), pasted only when used */
extern const char cuda_prelude_attn_fast[];
extern const char cuda_prelude_fp8_block_fast[];

#endif
