/* plan.h - the compiler's output and the training binary's input: one Plan.
 *
 * A Plan is everything the run half needs, decided once by the compiler:
 *   - the graph after the whole pass pipeline (forward, backward, the
 *     collectives of expert parallelism), carried as IR text and read back
 *     with ir_read_text, so the binary never runs the front end or a pass;
 *   - the options it was compiled with, as enums and integers (precision,
 *     ep, dp, the batch per rank): the parallel layout (ep x dp ranks, the
 *     experts each rank holds);
 *   - the parameter layout: every parameter's place in ONE flat fp32 array
 *     (the AdamW moments use the same offsets), its gradient node, whether
 *     AdamW decays it, and its checkpoint name and whole shape (a rank
 *     holding an expert shard saves the whole tensor): the checkpoint schema;
 *   - the tensor table: every buffer (a node's tensor, a view into another,
 *     a kernel's workspace) with its storage type, bytes, region, offset
 *     and lifetime, laid out by the one memory planner (plan_memory);
 *   - the launch list: kernels with grid, block, shared memory and buffer
 *     arguments, and host-side collectives in their place; the eval prefix;
 *   - the GPU kernels' CUDA source, and their image when it was compiled
 *     ahead of time (moec compile --arch);
 *   - the model source and compile options, so that a different --batch or
 *     world size can be re-planned (driver/build.h: driver_replan).
 *
 * Plans are written and read by plan_io.c (a versioned JSON document with a
 * checksum). All memory of a Plan belongs to it: plan_free releases it. */
#ifndef MOEC_PLAN_H
#define MOEC_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "../ir/ir.h"

/* The version of the plan format: a plan written by another version of
 * the format is refused with a message (re-run moec compile). */
enum { PLAN_FORMAT_VERSION = 3 };

/* ---- storage types: how one element of a buffer is stored ---- */
typedef enum PlanStorage { PLAN_F32, PLAN_F64, PLAN_I32, PLAN_BF16, PLAN_E4M3, PLAN_STORAGE_COUNT } PlanStorage;
extern const char *const plan_storage_name[PLAN_STORAGE_COUNT];
extern const int plan_storage_bytes[PLAN_STORAGE_COUNT];
int plan_storage_lookup(const char *name);   /* -1 if unknown */

/* ---- the tensor table ---- */
typedef enum PlanRegion { PLAN_REGION_PARAMS, PLAN_REGION_INPUTS, PLAN_REGION_ACTIVATIONS, PLAN_REGION_COUNT } PlanRegion;
extern const char *const plan_region_name[PLAN_REGION_COUNT];

/* COPY: a parameter's working copy, written from the fp32 master by the optimizer's step and whenever the
 * parameters are loaded, read by the fast kernels instead of converting the weights each step; never saved.
 * Two formats, told apart by the storage:
 *  - bf16 (the param's shape, PlanBuf.glu_f its row order): moec_adamw_bf16 / moec_to_bf16;
 *  - e4m3: an 8-bit expert weight [E, N, K] (PlanFp8Copy below: the codes, the transposed codes and both
 *    scale arrays): in 128x128 tiles for --precision fp8-block --kernels fast (docs/decisions.md 44: the
 *    per-shape kernels moec_adamw_fp8b_ExNxK, AdamW and the quantiser in one pass, and moec_fp8b_copy_ExNxK,
 *    from the loaded values), or in MXFP8's 1x32 blocks for --precision mxfp8 --kernels fast (decision 55:
 *    moec_adamw_mx8_ExNxK, moec_mx8_copy_ExNxK); the graph's precision says which, plan_fp8b_kernel_name
 *    names the kernels. */
typedef enum PlanBufKind {
    PLAN_BUF_TENSOR,
    PLAN_BUF_VIEW,
    PLAN_BUF_WORKSPACE,
    PLAN_BUF_COPY,
    PLAN_BUF_KIND_COUNT
} PlanBufKind;
extern const char *const plan_buf_kind_name[PLAN_BUF_KIND_COUNT];

typedef struct PlanBuf {
    char *name;          /* the node's name, or NODE.ws.WHAT for a workspace */
    int node;            /* its node (a workspace's: the node whose kernels use it) */
    PlanBufKind kind;
    PlanStorage storage;
    int64_t bytes;
    int alias_of;        /* a view: the buffer it lies in (never itself a view); else -1 */
    int64_t alias_offset;/* a view: bytes into alias_of */
    int64_t glu_f;       /* a copy: 0, the param's layout; F > 0: a gate_up weight [E, 2F, K] with its rows
                            interleaved in blocks of 128 (gate rows 128t .. 128t + 127, then up rows 128t ..,
                            for t = 0 .. F/128 - 1), so that one 256-wide GEMM tile holds a gate column and its
                            up column (the fast MLP's SwiGLU epilogue): copy row 256t + c is gate row 128t + c,
                            256t + 128 + c is up row F + 128t + c (codegen/prelude.cuh glu_index) */
    int elided;          /* a node's buffer that no kernel writes: the fast kernels read through the node
                            (a dispatch gathered straight from its source, a grouped_mlp whose combine reads
                            its padded rows); its contents are undefined */
    int until;           /* the node position until which it lives at least; -1: no such constraint. A
                            workspace is otherwise released after its own node: a later one keeps what the
                            node wrote for that node (the fast grouped MLP's forward keeps its bf16
                            intermediates for its backward: no recomputation). A node's buffer otherwise
                            dies after its last graph user: a later one is a launch that reads it without
                            being its graph user (a fast kernel reading through an elided node) */
    uint64_t unread_srcs;/* a node's tensor: bit s set when none of the node's kernel launches names its source
                            s's buffer (or the buffer it lies in): the fast kernels read something else (the
                            fp8-block backward reads the transposed codes its forward kept, not the dispatch),
                            so the edge keeps no buffer alive (plan_memory). Set by codegen only for nodes that
                            launch kernels, and for a view's `like` sources (1 on: read for the shape only);
                            sources past the 64th never marked; 0 elsewhere */
    /* filled by plan_memory */
    PlanRegion region;
    int64_t offset;      /* bytes into the region */
    int block;           /* an activations buffer's place in the planner's order (a view: its base's), -1 elsewhere */
    int first, last;     /* lifetime: the node positions that take and release it (the node-level rule below,
                            in every layout; in a launch-level one they say which nodes need it, not which
                            bytes it shares: that is lfirst .. llast) */
    int lfirst, llast;   /* a launch-level layout (plan_memory_launches: every GPU plan, docs/decisions.md 65): the
                            launch positions (indices into the plan's launches, both inclusive) over which its
                            bytes are its own, what the packing and plan_memory_check's overlap test use; -1 in a
                            node-level layout (plan_memory: the CPU backend's). A view: its base's */
} PlanBuf;

/* The layout of an e4m3 working copy of a weight w [E, N, K] (N and K multiples of 128), in bytes from the
 * copy's start. fp8-block (mx 0): q the 128x128-tile E4M3 codes [E, N, K] (GemmFp8MGrouped's B operand of the
 * forward), qt the same codes transposed [E, K, N] (tile(W)^T = tile(W^T): the data gradient's operand), s the
 * tiles' scale codes [E][N/128][K/128] (gemm_sm90_sched.h moec_fp8_block_sb_index), st the transposed ones
 * [E][K/128][N/128]; bytes the whole copy (2 bytes and 2/16384 per weight). MXFP8 (mx 1, the graph's precision
 * mxfp8): q the codes of W quantised 1x32 along K [E, N, K], qt the codes of W quantised 32x1 along N stored as
 * W^T [E, K, N] 1x32 along its rows, s and st their E8M0 scale codes at moec_mxfp8_sb_index (g, n, k/32, N, K)
 * and (g, k, n/32, K, N): E*N*K/32 bytes each (2 + 2/32 bytes per weight). The two code arrays come first:
 * their tensor maps start 16-byte aligned. */
typedef struct PlanFp8Copy {
    int64_t e, n, k;
    int mx;
    int64_t q, qt, s, st, bytes;
} PlanFp8Copy;
/* 1 and the layout when w is a rank-3 param-shaped [E, N, K] with N % 128 == K % 128 == 0, else 0; MXFP8's
 * layout when g's precision is mxfp8, else fp8-block's */
int plan_fp8b_copy_layout(const IrGraph *g, const IrNode *w, PlanFp8Copy *out);
/* the name of the copy's optimizer kernel (update 0: "moec_fp8b_copy_ExNxK", which writes the copy from the
 * weight's values) or AdamW kernel (update 1: "moec_adamw_fp8b_ExNxK"); MXFP8: moec_mx8_copy_ExNxK,
 * moec_adamw_mx8_ExNxK */
void plan_fp8b_kernel_name(const PlanFp8Copy *c, int update, char *buf, size_t len);

/* The one memory planner (liveness over the node order). bufs[0 .. nnodes)
 * are the nodes' own buffers (buf i is node i), workspaces and copies follow.
 * A node's buffer is taken when it runs and released after its last user ran
 * (a use of a view is a use of what it lies in; a user whose launches do not
 * read it, PlanBuf.unread_srcs, is none); a node's workspaces are
 * taken with its output and released when it is done (or after node
 * `until`); params and their working copies and inputs live in their own
 * regions; outputs (loss, gradients, `output` tensors) keep their
 * buffers to the end. Each activations buffer (views excepted: they lie in
 * their base) is thus an interval [first, last] of node positions, both
 * inclusive, so a node's output never shares bytes with the sources it reads
 * or its workspaces. The intervals are packed at offsets (decision 39): the largest
 * first, each at the lowest `align`-aligned offset where it shares no byte
 * with a placed buffer whose lifetime overlaps its own; deterministic.
 * Fills region, offset, block (the activations buffer's place in that
 * order; -1 elsewhere), first and last; returns the region sizes (the
 * activations': the highest end). */
typedef struct PlanMemory {
    int64_t region_bytes[PLAN_REGION_COUNT];
    int nblocks;         /* the buffers laid out in the activations region (views excepted) */
} PlanMemory;
void plan_memory(const IrGraph *g, PlanBuf *bufs, int nbufs, int64_t align, PlanMemory *out);
struct PlanLaunch;
/* The GPU's layout (docs/decisions.md 65): the same table and placement, each activations buffer's lifetime an
 * interval of launch positions (launches[0 .. nlaunches), in node order) instead of node positions, so that
 * the workspaces of one fused node (a grouped_mlp_bwd runs ~9 launches) share bytes when no launch needs two of
 * them at once. A buffer lives over the hull of:
 *   - every launch that names it (an argument, a tensor map's buffer; a view names its base), host-side
 *     collectives included (they name their sources and result);
 *   - a node's tensor: its node's launches, first to last (the isolated kernel checks upload a node's sources
 *     before its first launch, the GPU metrics and gpu_forward_probe read a node's result after its last);
 *     a node without launches (a view, an elided node) stands at the first launch of a later node;
 *   - a graph edge that its user's launches do not describe (a user without launches, or one whose launches
 *     name nothing of the source without unread_srcs saying so): to the user's last launch (or where it stands);
 *   - `until` a node none of whose launches names it: to that node's last launch;
 *   - a workspace no launch names: its node's launches;
 *   - a topk_experts node's logits, when its launches read them: to its last launch (the GPU metrics read them
 *     right after the node, runtime/gpu/gpu.c logits_live);
 *   - to the last launch: outputs (loss, gradients, `output` tensors), and a host-side collective's result no
 *     node reads (the runtime's bucketed all-reduce writes it after the backward).
 * first and last stay the node-level rule's (plan_memory's), for what reads them as node positions; lfirst and
 * llast are the launch-level intervals (params, copies and inputs: 0 .. nlaunches - 1). nlaunches 0: plan_memory. */
void plan_memory_launches(const IrGraph *g, PlanBuf *bufs, int nbufs, const struct PlanLaunch *launches,
                          int nlaunches, int64_t align, PlanMemory *out);
/* What plan_memory (launches NULL) or plan_memory_launches (the same launches) promises, checked on a laid-out
 * table (the tests run it on every model): each buffer in its region, `align`-aligned, a view inside its base
 * at its offset; every node-level lifetime covering the node's users (those whose launches read it:
 * unread_srcs; an output's to the end, a workspace's its node and `until`); with launches, every launch-level
 * lifetime covering each launch that names the buffer, its node's launches (a node's tensor), the users the
 * launches do not describe, `until` and the end for outputs; and no two activations buffers whose lifetimes
 * (launch-level when there are launches, else node-level) overlap sharing a byte. 1, or 0 with the first
 * violation in err. The planners run it on their own layout and stop with an internal error when it fails. */
int plan_memory_check(const IrGraph *g, const PlanBuf *bufs, int nbufs, const struct PlanLaunch *launches,
                      int nlaunches, int64_t align, const PlanMemory *mem, char *err, size_t errlen);
struct Plan;
/* The plan's own layout made again on bufs, a copy of its table (a plan read from a training binary's payload
 * has no lifetimes): plan_memory_launches over its launches (every GPU plan), plan_memory when it has none. */
void plan_memory_again(const struct Plan *p, PlanBuf *bufs, PlanMemory *out);
/* The memory of the forward pass alone (the launches [0, eval_launches): evaluation, embed, score): the
 * buffers of the nodes up to the loss, with their workspaces and copies, laid out by plan_memory as if the
 * graph ended at the loss (no gradient, nothing kept for the backward), in the regions of the plan's own
 * layout. off[b] (nbufs of them) gets buffer b's bytes into its region, or -1 for a buffer that the forward
 * pass does not have; out the regions' sizes. 0 (nothing written) when the forward launches need a buffer
 * of a later node, or a param or input comes after the loss: then the plan's own layout serves. */
int plan_forward_memory(const struct Plan *p, int64_t *off, PlanMemory *out);

/* What a plan's memory holds, for --dry-run (memory.c): the params region's fp32 masters and bf16
 * copies, the parameters' final gradients, and the activations region at its fullest moment: the launch
 * position (a node-level layout: the node position) where the live buffers (each over its lifetime in the
 * layout, lfirst .. llast or first .. last) add up most, and what they are there. The region as laid out (acts_region) is at least peak_live: the
 * difference is the layout's slack (alignment, and lifetimes that do not nest: the packing is greedy). Zeros without the GPU part. */
typedef struct PlanMemoryBreakdown {
    int64_t masters, copies;     /* the params region: fp32 parameters, their bf16 working copies */
    int64_t grads;               /* the parameters' gradients, all of them (they are kept to the end) */
    int64_t acts_region;
    int peak_at;                 /* the node position of the peak: its launch's node (-1: none) */
    int peak_launch;             /* the launch position of the peak in a launch-level layout; -1 in a node-level one */
    int64_t peak_live;           /* = peak_grads + peak_acts + peak_ws */
    int64_t peak_grads;          /* the parameters' gradients made by then */
    int64_t peak_acts;           /* the nodes' other tensors: activations and intermediate gradients */
    int64_t peak_ws;             /* the kernels' workspaces */
    int nograd_at, nograd_launch;/* where the live bytes without the parameters' gradients peak (node, launch), which
                                    the gradients kept to the end need not put at peak_at */
    int64_t nograd_live;         /* those bytes there */
    int64_t held;                /* held from the forward for the backward: the activations buffers live across
                                    the loss (taken at or before its last launch, released after it), the parameters' gradients
                                    excepted; what grows with the layers (0 without a loss) */
} PlanMemoryBreakdown;
struct Plan;
void plan_memory_breakdown(const struct Plan *p, PlanMemoryBreakdown *out);

/* ---- the launch list ---- */
/* A kernel argument beyond a buffer pointer (the sm_90a kernels, docs/kernels-sm90.md): a launch whose
 * targs is NULL passes only buffers (args); else targs[i] says what parameter i is, args[i] its buffer
 * (-1 for a constant). A tensor map is 2-D, 128-byte swizzled, over buffer `buf` from element `offset`
 * on (of the map's type; 0 for TMAP), viewed as [rows, cols] (row-major, cols contiguous) with box
 * {box_cols, box_rows}, box_cols elements being one 128-byte swizzle row: TMAP bf16 (box_cols 64),
 * TMAP_F32 fp32 (box_cols 32; the K-grouped kernel's fp32 dW), TMAP_U8 bytes (box_cols 128; the FP8 kernel's
 * E4M3 operands, over an e4m3 buffer). The runtime encodes it once (arena
 * addresses never move) and passes it by value (a 64-byte-aligned CUtensorMap). */
typedef enum PlanArgKind {
    PLAN_ARG_BUF,
    PLAN_ARG_TMAP,
    PLAN_ARG_I32,
    PLAN_ARG_TMAP_F32,
    PLAN_ARG_TMAP_U8,
    PLAN_ARG_I64,        /* a 64-bit integer by value: a count that depends on the batch (the token count, the
                            rows), passed at run time so that the kernels' code does not (docs/decisions.md 62) */
    PLAN_ARG_NORM,       /* a `double *`: where a weight-gradient GEMM writes the squares of the gradient it stores,
                            `rows` doubles a block (decision 73), for the optimizer's gradient norm. value: the param
                            node whose whole gradient the launch writes, or -1 (none: the runtime passes nullptr) */
    PLAN_ARG_KIND_COUNT
} PlanArgKind;
extern const char *const plan_arg_kind_name[PLAN_ARG_KIND_COUNT];
typedef struct PlanArg {
    PlanArgKind kind;
    int buf;             /* BUF, TMAP, TMAP_F32: the buffer; I32: -1 */
    int64_t rows, cols;  /* TMAP, TMAP_F32 */
    int box_rows, box_cols;
    int64_t offset;      /* TMAP_F32, TMAP_U8: elements (bytes for U8) from the buffer's start (16-byte aligned;
                            U8: an fp8-block weight copy's transposed tiles); TMAP: 0 */
    int64_t value;       /* I32 */
} PlanArg;
enum { PLAN_GRID_ALL_SMS = 0 }; /* grid 0: one block per SM of the device (persistent kernels) */

typedef struct PlanLaunch {
    int node;            /* the IR node it computes */
    int kernel;          /* index into Plan.kernel_names; -1: a host-side collective */
    int64_t grid;        /* blocks (x only) */
    int block;           /* threads per block */
    int shared_bytes;    /* dynamic shared memory */
    int cluster;         /* 0 (or 1): a plain launch; 2: thread-block clusters of two blocks (the FP8 M-grouped GEMM's
                          * A multicast, decision 71): launched with cluster dimension 2, its PLAN_GRID_ALL_SMS grid
                          * two blocks for each cluster that fits at once (runtime/gpu/cudrv.h cudrv_persistent_grid) */
    int nargs;
    int *args;           /* buffer ids, in the kernel's parameter order (-1: a constant, see targs) */
    PlanArg *targs;      /* NULL: every argument a buffer pointer; else [nargs] typed arguments */
    char *what;          /* a line for messages: what this launch does */
    char *impl;          /* NULL, or which implementation a node with a choice got and why ("fast", "reference: ...") */
} PlanLaunch;

/* ---- the parameter layout and checkpoint schema ---- */
typedef struct PlanParam {
    int node;            /* the param node */
    int grad;            /* the node holding d loss / d param after the backward */
    int64_t numel;       /* this rank's elements */
    int64_t offset;      /* elements into the flat fp32 parameter array (and each AdamW moment) */
    int weight_decay;    /* AdamW decays it (norm weights and embedding tables not, unless the model says) */
    int64_t shard;       /* 1, or the ranks the leading (expert) dimension is split over */
    int rank;
    int64_t full_shape[IR_MAX_RANK];  /* the checkpoint's (whole) shape */
} PlanParam;

/* ---- which kernels codegen uses where it has a choice (moec compile --kernels) ---- */
typedef enum PlanKernels {
    PLAN_KERNELS_REFERENCE, /* the fp32 SIMT kernels everywhere (the oracle; --kernels reference) */
    PLAN_KERNELS_FAST,      /* the sm_90a bf16 tensor-core kernels where a node qualifies (codegen/cuda_moe_fast.c);
                               moec compile's default (decision 48) */
    PLAN_KERNELS_COUNT
} PlanKernels;
extern const char *const plan_kernels_name[PLAN_KERNELS_COUNT];
/* Whether the fast kernels' sm_90a code compiles for NVRTC target `arch` (sm_90a, or compute_90a for PTX):
 * moec compile --arch with another target defaults to the reference kernels (decision 48). */
int plan_arch_takes_fast(const char *arch);

/* ---- what the plan was made from, for re-planning ---- */
typedef struct PlanSource {
    char *text;          /* the model file's text */
    size_t len;
    char *path;          /* as given to moec compile */
    char **plugins;      /* absolute paths of the pass plugins it was compiled with */
    int nplugins;
    int has_precision;   /* --precision given at compile time */
    IrPrecision precision;
    int64_t ep;          /* --ep given at compile time (0: the model's) */
    PlanKernels kernels; /* --kernels (codegen reads it; written as "kernels" only when not reference) */
} PlanSource;

typedef struct Plan {
    Arena arena;         /* the graph and its strings */
    IrGraph *graph;      /* after the pipeline */
    char *ir_text;       /* the graph as IR text (what plan_io writes) */
    PlanSource source;
    /* the parallel layout */
    int64_t ep, dp, world;        /* world = ep * dp ranks */
    int64_t batch, local_batch, seq;  /* sequences per step: all ranks, one rank */
    int64_t experts, local_experts;   /* E, and E / ep on each rank (0 without experts) */
    /* parameters */
    PlanParam *params;   /* [graph->nparams], in graph->params order */
    int nparams;
    int64_t nparams_total;
    int tokens, targets; /* the input nodes the batch goes to: token ids (embedding), targets (loss) */
    /* the GPU part (absent when the graph cannot run on the GPU: gpu_unsupported says why) */
    char *gpu_unsupported;
    PlanBuf *bufs;
    int nbufs;
    PlanMemory memory;
    PlanLaunch *launches;
    int nlaunches;
    int eval_launches;   /* launches [0, eval_launches) compute the loss (the forward pass) */
    int nkernel_launches, ncollectives;
    char **kernel_names; /* in source order; the runtime's own kernels last */
    int nkernels;
    char *cuda_source;   /* kernels.cu: the device library, then units marked by PLAN_UNIT_MARK */
    size_t cuda_source_len;
    char needs_arch[16]; /* the one architecture the kernels run on ("sm_90a": the source holds the fast kernels'
                            sm_90a device code, wgmma and TMA), or "" (any GPU); "needs_arch" in plan.json */
    /* the kernels compiled ahead of time (moec compile --arch), or none */
    void *image;
    size_t image_size;
    char image_arch[16];
    uint64_t image_hash; /* plan_code_hash of cuda_source: the code the image was compiled from */
} Plan;

/* kernels.cu is cut into NVRTC units (docs/decisions.md 67): a comment line starting with PLAN_UNIT_MARK opens
 * each; the text before the first is the device library, which every unit gets in front of its own text.
 * NVRTC compiles the units in parallel (runtime/gpu/nvrtc.h nvrtc_compile_units) and the image holds one cubin
 * per unit (runtime/gpu/kimage.h). A source with no mark is one unit. */
#define PLAN_UNIT_MARK "// ======== unit "

/* Makes a Plan around a graph that went through the whole pipeline (it
 * takes over the arena holding it; *arena is emptied). Fills the parallel
 * layout, the parameters and the inputs. The GPU part comes from codegen
 * (codegen/cuda.h: cuda_codegen_plan). Returns NULL and says why in err
 * when the graph is no training graph (no loss, no gradients, no inputs). */
Plan *plan_create(IrGraph *g, Arena *arena, char *err, size_t errlen);
void plan_free(Plan *p);
/* Removes the GPU part (tensor table, launches, kernels), e.g. before codegen fills it again. */
void plan_clear_gpu(Plan *p);

/* The source and options the plan was made from (copied). */
void plan_set_source(Plan *p, const char *path, const char *text, size_t len, const char *const *plugins,
                     int nplugins, int has_precision, IrPrecision precision, int64_t ep);
/* Attaches a kernel image compiled for `arch` from p->cuda_source (copied). */
void plan_set_image(Plan *p, const char *arch, const void *image, size_t size);
/* The hash of CUDA source text without its comment lines (a line whose first non-blank characters are //):
 * the key of an image (embedded or cached). The comments name the model file, the nodes' shapes and the
 * launches' purpose, none of which changes the code: the same code for another --batch or another path of
 * the model keeps its image (docs/decisions.md 62). */
uint64_t plan_code_hash(const char *src, size_t n);

/* ---- plan_io.c: the plan as a document ---- */

/* The whole plan as JSON (format "moec-plan", PLAN_FORMAT_VERSION, the moec
 * version, a checksum of the rest). with_source: include the model source
 * and the kernels (the payload); without them it is the readable plan.json
 * of --emit-cuda, which still reads back. Caller frees. */
char *plan_to_json(const Plan *p, int with_source);
/* Loads a pass plugin by path: 1, or 0 with a message (passes/pass.h:
 * pass_load_plugin has this shape). */
typedef int (*PlanPluginLoader)(const char *path, char *err, size_t errlen);

/* Reads a plan written by plan_to_json: the checksum, the format and its
 * version, the moec version, and the graph (through the IR reader) are
 * checked, and the tables against the graph. The pass plugins the plan
 * names are loaded first with load_plugin (NULL: a plan naming plugins is
 * refused). `what` names the document in messages ("the plan embedded in
 * ./train"). Returns NULL with a message in err. */
Plan *plan_from_json(const char *json, size_t len, const char *what, PlanPluginLoader load_plugin, char *err,
                     size_t errlen);

/* ---- cost.c: the work of a node, from its shapes and storage types ---- */

/* What a node must compute and move (conventions in cost.c): --profile
 * divides them by the measured time. */
typedef struct PlanCost {
    double flops;        /* floating-point operations of its GEMMs (a multiply-add is 2); 0 for other ops */
    double bytes;        /* its sources read and its result written once, at their storage sizes */
    int gemm;            /* a matmul-like op (linear, grouped_linear, grouped_mlp, sdpa and their gradients) */
} PlanCost;
/* p may be NULL or lack the GPU part: element sizes then come from the IR dtypes. */
PlanCost plan_node_cost(const Plan *p, const IrNode *n);
/* Model FLOPs (cost.c): a node's GEMM FLOPs without recomputation, its
 * expert rows those of its rank's own tokens (T*k, not the receive capacity
 * of expert parallelism); summed over a training graph: the forward and
 * backward FLOPs of one rank's step, the numerator of MFU. */
double plan_node_model_flops(const IrNode *n);
double plan_model_flops(const IrGraph *g);

#endif
