/* gpu.c - the GPU backend: codegen's kernels and plan, run with the CUDA
 * driver API (gpu.h; design in docs/gpu-runtime.md). */
#include "gpu.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kimage.h"
#include "nvrtc.h"
#include "../comm/comm.h"
#include "../cpu/cpu.h"
#include "../../util/util.h"
#include "cudrv.h"
#include "plan_args.h"

enum { BLOCK = 256, SUMSQ_MAX_GRID = 1024, ADAMW_MAX_GRID = 4096, NSCALARS = 7 };

/* How a run's collectives go (docs/decisions.md 46). COLL_HOST: through host memory with the CPU backend's code
 * (TCP, a forward-only backend of simulated ranks, MOEC_HOST_COLLECTIVES=1), or NCCL called synchronously with
 * the split sizes read back (a forward-only backend under NCCL): the stream is drained around each. COLL_SIM and
 * COLL_NCCL: on the device, enqueued on the step's stream with no host round trip, so a step is one CUDA graph:
 * the simulated ranks (threads sharing one GPU) read each other's buffers between device barriers; NCCL moves
 * fixed-capacity slots. Both pack and unpack the expert exchanges with the same kernels. */
enum { COLL_HOST, COLL_SIM, COLL_NCCL };

typedef struct Launch {
    const IrNode *node;
    CUfunction f;           /* NULL: a collective */
    unsigned grid, block, shared;
    int cluster;            /* PlanLaunch.cluster */
    int nargs;
    GpuArgs args;           /* the parameters (pointers, tensor maps, ints) and their addresses for cuLaunchKernel */
    void **argp;            /* args.argp */
    int bucket;             /* an all_reduce of a final gradient: its source is copied into its bucket here, the
                               sum happens after the backward (-1: run in place) */
    size_t bucket_off;      /* bytes into the bucket */
    char what[160];
} Launch;

/* Gradient all-reduces that nothing reads before the optimizer are done together after the backward: at its
 * place in the plan (where the plan keeps its source alive) each copies its source into one buffer per
 * (group, factor); after the backward one collective sums each buffer, one kernel scales it, and the slices
 * are copied into the nodes' outputs (whose blocks the plan keeps to the end of the step). */
enum { MAX_BUCKETS = 4 };
typedef struct Bucket {
    int group;              /* CommGroup */
    double factor;
    int64_t numel;
    CUdeviceptr buf;
} Bucket;

/* --profile: one pair of events around a launch (or the batch's copy, the optimizer, the step) and where its
 * time goes: a node id, or one of the PROF_ slots */
enum { PROF_BATCH = -1, PROF_OPT = -2, PROF_BUCKETS = -3, PROF_STEP = -4, PROF_SPANS_EXTRA = 4 };
typedef struct ProfSpan {
    int slot;
    int ev0, ev1;
} ProfSpan;

/* the step's host-side inputs, twice (steps alternate): tokens, targets, 3 scalars */
typedef struct Staging {
    void *pinned;           /* [tokens | targets | lr, bc1, bc2] */
    CUevent done;           /* recorded after the step that read it */
    int used;
    CUgraphExec graph;
} Staging;

struct Gpu {
    const Plan *plan;
    const IrGraph *g;
    Comm *comm;
    int device_comm;        /* collectives on device memory (NCCL) */
    GpuInfo info;
    char err[2048];
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    KModules mods; /* the kernels: one module per NVRTC unit */
    CUfunction k_sumsq, k_sum, k_clip, k_adamw, k_scale, k_adamw16, k_to16, k_accum, k_accum_out;
    CUfunction k_mstats, k_mstats_add, k_madd;
    CUdeviceptr accum;      /* --grad-accum: the gradients' double sum (nparams_total), allocated at its first step */
    CUdeviceptr region[3];  /* params, inputs, activations */
    size_t region_bytes[3];
    CUdeviceptr adam, misc;  /* misc: the inputs region, then partials, scalars, ring_loss, ring_norm */
    CUdeviceptr partials, scalars, ring_loss, ring_norm;
    CUdeviceptr *buf;       /* per plan buffer */
    int nbufs;
    Launch *launches;
    int nlaunches, eval_launches, has_collectives;
    /* the optimizer: per param */
    int64_t *numel, *part_off;
    CUdeviceptr *copy;      /* the param's bf16 working copy (plan.h PLAN_BUF_COPY), or 0 */
    long long *copy_glu, *copy_cols; /* its layout (PlanBuf.glu_f) and the param's last dimension */
    /* an fp8-block expert weight's e4m3 copy instead (copy[p] then points at it; plan.h PlanFp8Copy): its
     * AdamW + quantiser kernel and its quantiser (moec_adamw_fp8b_ExNxK, moec_fp8b_copy_ExNxK), tiles */
    CUfunction *fp8_step, *fp8_load;
    unsigned *fp8_grid;
    unsigned *sumsq_grid;
    /* decision 73: per param, the doubles its weight-gradient GEMM writes into its slot of the norm's partials (0:
     * none, moec_grad_sumsq reads the gradient), the slot's length (gpu_plan_memory's), and per node the address
     * handed to the GEMM (build_launches) */
    int64_t *norm_count, *part_len;
    CUdeviceptr *norm_at;
    double *wd;
    int64_t ndense_parts, nshard_parts;
    int any_shard;
    /* the batch */
    size_t tok_bytes;
    Staging stage[2];
    int parity;
    /* staged collectives: host copies of the nodes they read and write */
    void **host;
    /* the loss ring */
    int ring, slot, pending;
    float *ring_loss_h;
    double *ring_norm_h;
    int use_graphs;
    size_t free_before;
    const IrNode *tok, *tgt;  /* the inputs: token ids, targets */
    int *bucket_of;         /* per node: its bucket, or -1 */
    Bucket buckets[MAX_BUCKETS];
    int nbuckets;
    /* --profile: set during gpu_profile_step only; events made at its first call */
    GpuProfile *prof;
    CUevent *pev;
    int npev, pev_used;
    ProfSpan *spans;
    int nspans;
    /* GpuOptions.forward_only: the forward launches alone, their buffers from plan_forward_memory, no AdamW */
    int forward_only;
    CpuWatch watch;         /* what gpu_eval reads for the metrics (the CPU backend's choice of nodes) */
    /* the training steps' metrics, summed on the device (moec_moe_stats*, moec_metric_add) after each watched
     * node of a training pass and read by gpu_read_step_metrics: mstat = {loss, lm_loss, then per watched
     * layer {rows, load[E], entropy, aux}}, mpart the per-block sums of the layer being measured */
    CUdeviceptr mstat, mpart;
    int mpasses;            /* training passes since the last read */
    int mnodes, mnode[BACKEND_MOE_LAYERS + 2], mcut[BACKEND_MOE_LAYERS + 2]; /* watched nodes in order, their cuts */
    /* collectives on the device (COLL_SIM, COLL_NCCL): their kernels and their part of misc (comm_layout) */
    int coll;
    CUfunction k_pack, k_unpack, k_sbar, k_sa2a, k_sar, k_srs32, k_sag32, k_srs64, k_sag64;
    CUdeviceptr flag, peer_base, members, stage_send, stage_recv;
    size_t misc_bytes, comm_bytes;
    int gsize[3], grank[3];  /* per CommGroup: its size and this rank's place in it */
    long long timeout_ns;    /* the simulator's barrier: MOEC_COMM_TIMEOUT */
    volatile int *stop_h;    /* the simulator: host memory the barriers read; 1 when this rank's host has given up */
    CUdeviceptr stop_d;
    /* MOEC_SYNC_CHECK=1: host waits for the stream and device-to-host copies made while a step is enqueued */
    int sync_check, in_step;
    long long step_syncs, step_d2h, nsteps;
};

static void metrics_points(Gpu *G);
static int fail(Gpu *G, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Gpu *G, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(G->err, sizeof G->err, fmt, ap);
    va_end(ap);
    return 0;
}

static int cu_ok(Gpu *G, CUresult r, const char *call, const char *what)
{
    if (r == CUDA_SUCCESS)
        return 1;
    char b[256];
    return fail(G, "%s failed: %s%s%s", call, cudrv_error(r, b, sizeof b), what && *what ? " in " : "",
                what ? what : "");
}
#define CU(G, call, what) cu_ok(G, cu.call, #call, what)
/* a kernel of the image by name, from whichever unit's module has it (kimage.h) */
#define KFN(G, f, name, what) cu_ok(G, kimage_function(&(G)->mods, name, f), "cuModuleGetFunction", what)

/* Waiting for the stream (e NULL) or an event. Under NCCL with the collectives on the device the wait polls
 * (CommOps.wait_device) so that a dead peer or an NCCL error fails it instead of hanging a step's graph;
 * otherwise it blocks. Counted while a step is being enqueued (MOEC_SYNC_CHECK). */
typedef struct DoneArg {
    CUstream stream;
    CUevent event;
    CUresult r;
} DoneArg;

static int query_done(void *arg)
{
    DoneArg *a = arg;
    CUresult r = a->event ? cu.cuEventQuery(a->event) : cu.cuStreamQuery(a->stream);
    if (r == CUDA_SUCCESS)
        return 1;
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    a->r = r;
    return -1;
}

static int wait_done(Gpu *G, CUevent e, const char *what)
{
    if (G->in_step)
        G->step_syncs++;
    if (G->coll == COLL_NCCL || (G->coll == COLL_SIM && G->stop_h)) {
        DoneArg a = {G->stream, e, CUDA_SUCCESS};
        if (G->comm->ops->wait_device(G->comm, query_done, &a, what ? what : "waiting for the GPU"))
            return 1;
        if (G->stop_h) {
            *G->stop_h = 1;  /* this rank's barriers stop waiting for the rank that failed */
            __sync_synchronize();
        }
        if (a.r != CUDA_SUCCESS)
            return cu_ok(G, a.r, e ? "cuEventQuery" : "cuStreamQuery", what);
        return fail(G, "%s", G->comm->error);
    }
    return e ? CU(G, cuEventSynchronize(e), what) : CU(G, cuStreamSynchronize(G->stream), what);
}

static int sync_stream(Gpu *G, const char *what) { return wait_done(G, NULL, what); }
static int wait_event(Gpu *G, CUevent e, const char *what) { return wait_done(G, e, what); }

const char *gpu_error(const Gpu *G) { return G->err; }
const GpuInfo *gpu_info(const Gpu *G) { return &G->info; }

int gpu_probe(char *why, size_t n) { return cudrv_load(why, n); }

/* ------------------------------------------------------------ the kernels' image */

static void *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    void *data = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n)) &&
            fread(data, 1, (size_t)n, f) != (size_t)n) {
            free(data);
            data = NULL;
        }
        *size = n > 0 ? (size_t)n : 0;
    }
    fclose(f);
    return data;
}

/* sm_90a for compute capability 9.0 (the arch-specific features the
 * kernels may use one day), sm_XY otherwise */
static void arch_of(int major, int minor, char *out, size_t n)
{
    snprintf(out, n, "sm_%d%d%s", major, minor, major == 9 && minor == 0 ? "a" : "");
}

/* Whether an image compiled for `arch` runs on this GPU: sm_NN[a|f] with NN its compute capability. */
static int arch_runs_here(const char *arch, int major, int minor)
{
    int nn = 0;
    return arch && sscanf(arch, "sm_%d", &nn) == 1 && nn == major * 10 + minor;
}

int gpu_check_arch(const Plan *p, const char *name, int major, int minor, char *err, size_t errlen)
{
    if (!p->needs_arch[0])
        return 1;
    int nn = 0;
    if (sscanf(p->needs_arch, "sm_%d", &nn) == 1 && nn == major * 10 + minor)
        return 1;
    /* the nodes on the fast kernels (a node's launches are consecutive), for the message */
    int nodes = 0;
    for (int i = 0; i < p->nlaunches; i++) {
        const PlanLaunch *l = &p->launches[i];
        nodes += l->impl && strncmp(l->impl, "fast", 4) == 0 && (i == 0 || p->launches[i - 1].node != l->node);
    }
    const char *path = p->source.path && *p->source.path ? p->source.path : "MODEL";
    snprintf(err, errlen,
             "%s was compiled with the fast kernels (moec compile's default, --kernels %s: %d node%s on "
             "%s tensor-core code, bf16 storage), which only an sm_90 GPU (H100, H200) runs, and GPU %s has "
             "compute capability %d.%d (sm_%d%d); compile it again with `moec compile %s -o OUT --kernels "
             "reference` (the fp32 kernels, which run on any GPU), or train on the CPU with --device cpu",
             path, plan_kernels_name[p->source.kernels], nodes, nodes == 1 ? "" : "s", p->needs_arch,
             name && *name ? name : "0", major, minor, major, minor, path);
    return 0;
}

/* The image: embedded, cached, or compiled now (and cached). */
static int get_image(Gpu *G, const GpuOptions *o, void **image, size_t *size)
{
    const Plan *p = G->plan;
    uint64_t h = plan_code_hash(p->cuda_source, p->cuda_source_len);
    const char *arch = G->info.arch;
    if (p->image && p->image_size && arch_runs_here(p->image_arch, G->info.cc_major, G->info.cc_minor) &&
        p->image_hash == h) {
        *image = malloc(p->image_size);
        memcpy(*image, p->image, p->image_size);
        *size = p->image_size;
        snprintf(G->info.image_from, sizeof G->info.image_from, "embedded in the binary (%s)", p->image_arch);
        return 1;
    }
    const char *why_not_embedded = !p->image ? "none embedded"
                                   : !arch_runs_here(p->image_arch, G->info.cc_major, G->info.cc_minor)
                                       ? "the embedded one is for another architecture"
                                       : "the embedded one is for other shapes (--batch)";
    char dir[4096], path[4400], err[1024];
    int have_nvrtc = nvrtc_load(err, sizeof err);
    NvrtcOutput probe = {0};
    int major = 0, minor = 0;
    if (have_nvrtc)
        nvrtc_version(&major, &minor);  /* part of the key */
    const char *cd = nvrtc_cache_dir(dir, sizeof dir);
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%016llx-%s-", (unsigned long long)h, arch);
    if (cd) {
        if (have_nvrtc) {
            snprintf(path, sizeof path, "%s/%snvrtc%d.%d.cubin", cd, prefix, major, minor);
            if ((*image = read_file(path, size))) {
                snprintf(G->info.image_from, sizeof G->info.image_from, "the cache, %s", path);
                return 1;
            }
        } else {
            DIR *d = opendir(cd);
            struct dirent *e;
            while (d && (e = readdir(d)))
                if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
                    snprintf(path, sizeof path, "%s/%s", cd, e->d_name);
                    if ((*image = read_file(path, size))) {
                        snprintf(G->info.image_from, sizeof G->info.image_from, "the cache, %s", path);
                        closedir(d);
                        return 1;
                    }
                }
            if (d)
                closedir(d);
        }
    }
    if (!have_nvrtc) {
        if (o->no_kernels)
            *o->no_kernels = 1;
        return fail(G, "no kernels for this GPU (%s): %s, none in the cache, and NVRTC is not available (%s); "
                    "compile the binary with `moec compile MODEL -o OUT --arch %s`", arch, why_not_embedded, err,
                    arch);
    }
    NvrtcOutput out = probe;
    int ok = nvrtc_compile_units(p->cuda_source, "kernels.cu", arch, cd, 0, &out, err, sizeof err);
    if (!ok) {
        if (out.log)
            nvrtc_print_log(stderr, out.log, p->cuda_source, "kernels.cu");
        nvrtc_output_free(&out);
        return fail(G, "compiling the kernels for %s: %s", arch, err);
    }
    *image = out.image;
    *size = out.image_size;
    out.image = NULL;
    snprintf(G->info.image_from, sizeof G->info.image_from, "NVRTC %d.%d for %s in %.1f s, %d unit%s (%d from the "
             "cache) on %d thread%s (%s)", out.major, out.minor, arch, out.seconds, out.units, out.units == 1 ? "" : "s",
             out.units_cached, out.threads, out.threads == 1 ? "" : "s", why_not_embedded);
    nvrtc_output_free(&out);
    if (cd && make_dirs(cd)) {
        char tmp[4500];
        snprintf(path, sizeof path, "%s/%snvrtc%d.%d.cubin", cd, prefix, major, minor);
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
        FILE *f = fopen(tmp, "wb");
        int wrote = f && fwrite(*image, 1, *size, f) == *size;
        if (f && fclose(f) != 0)
            wrote = 0;
        if (wrote && rename(tmp, path) == 0) {
            size_t l = strlen(G->info.image_from);
            snprintf(G->info.image_from + l, sizeof G->info.image_from - l, ", cached");
        } else {
            unlink(tmp);
        }
    }
    return 1;
}

/* ------------------------------------------------------------ set-up */

static size_t align256(size_t n) { return (n + 255) / 256 * 256; }

static CommGroup allreduce_group(const IrNode *n)
{
    return ir_attr_e(n, IR_ATTR_GROUP) == IR_GROUP_DP ? COMM_DP : COMM_WORLD;
}

/* Which all_reduce nodes go into buckets: those whose result no node reads (final gradients, read only by
 * the optimizer), when the run has ranks to reduce over. */
/* The buckets of graph g (buckets[0 .. *nbuckets)), and each node's bucket in bucket_of ([nnodes], -1: none;
 * NULL: not wanted). Pure: the dry run sizes them too (gpu_plan_memory). */
static void find_buckets(const IrGraph *g, Bucket *buckets, int *nbuckets, int *bucket_of)
{
    char *used = calloc((size_t)g->nnodes + 1, 1);
    if (!used)
        die("out of memory");
    *nbuckets = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (bucket_of)
            bucket_of[i] = -1;
        for (int s = 0; s < g->nodes[i]->nsrc; s++)
            used[g->nodes[i]->src[s]->id] = 1;
    }
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->op != IR_OP_ALL_REDUCE || used[i])
            continue;
        int grp = (int)allreduce_group(n), b = 0;
        double f = ir_attr_f(n, IR_ATTR_FACTOR);
        while (b < *nbuckets && !(buckets[b].group == grp && buckets[b].factor == f))
            b++;
        if (b == MAX_BUCKETS)
            continue;  /* stays in place */
        if (b == *nbuckets)
            buckets[(*nbuckets)++] = (Bucket){grp, f, 0, 0};
        if (bucket_of)
            bucket_of[i] = b;
        buckets[b].numel += ir_numel(n);
    }
    free(used);
}

static void plan_buckets(Gpu *G)
{
    if (!G->comm)
        return;
    G->bucket_of = malloc(sizeof(int) * ((size_t)G->g->nnodes + 1));
    if (!G->bucket_of)
        die("out of memory");
    find_buckets(G->g, G->buckets, &G->nbuckets, G->bucket_of);
}

/* An expert exchange's shape: its rows of width d (floats), and the per-peer capacity of its staging slots:
 * the rows of its home side (the routed rows T*k of a rank: a dispatch's input, a combine's output), the most
 * one rank can send another (dropless) */
static int64_t exch_width(const IrNode *n) { return ir_numel(n->src[0]) / (n->src[0]->shape[0] ? n->src[0]->shape[0] : 1); }
static int64_t exch_cap(const IrNode *n) { return n->op == IR_OP_EP_DISPATCH ? n->src[0]->shape[0] : n->shape[0]; }

/* The device collectives' part of misc, after the buckets (gpu_create and gpu_plan_memory alike, training
 * backends of runs with more than one rank): the simulator's barrier count (one word), the ranks' region bases
 * [ranks][3], the groups' members [3][ranks], and the expert exchanges' two staging buffers, each ep slots of
 * the capacity above for the widest exchange: ep * cap * d floats. */
typedef struct CommLayout {
    size_t flag, peer_base, members, stage_send, stage_recv, stage, total;
} CommLayout;

static void comm_layout(const IrGraph *g, int ranks, CommLayout *l)
{
    memset(l, 0, sizeof *l);
    if (ranks <= 1)
        return;
    size_t stage = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->op != IR_OP_EP_DISPATCH && n->op != IR_OP_EP_COMBINE)
            continue;
        size_t b = (size_t)ir_attr_i(n, IR_ATTR_EP) * (size_t)exch_cap(n) * (size_t)exch_width(n) * sizeof(float);
        if (b > stage)
            stage = b;
    }
    size_t o = 0;
    l->flag = o;
    o += 256;
    l->peer_base = o;
    o += align256((size_t)ranks * 3 * sizeof(unsigned long long));
    l->members = o;
    o += align256((size_t)ranks * 3 * sizeof(int));
    l->stage_send = o;
    o += align256(stage);
    l->stage_recv = o;
    o += align256(stage);
    l->stage = stage;
    l->total = o;
}

static int build_launches(Gpu *G)
{
    const IrGraph *g = G->g;
    const Plan *p = G->plan;
    /* forward only: the launches that compute the loss; the backward's buffers are not there */
    G->nlaunches = G->forward_only ? p->eval_launches : p->nlaunches;
    G->eval_launches = p->eval_launches;
    G->launches = calloc((size_t)G->nlaunches + 1, sizeof *G->launches);
    size_t bucket_fill[MAX_BUCKETS] = {0};
    for (int i = 0; i < G->nlaunches; i++) {
        const PlanLaunch *l = &p->launches[i];
        Launch *L = &G->launches[i];
        int node = l->node;
        L->node = g->nodes[node];
        L->nargs = l->nargs;
        {
            char err[512];
            if (!gpu_args_build(l, G->buf, G->norm_at, &L->args, err, sizeof err))
                return fail(G, "launch %d (node %d, %s): %s", i, node, L->node->name, err);
            L->argp = L->args.argp;
        }
        L->bucket = G->bucket_of ? G->bucket_of[node] : -1;
        if (L->bucket >= 0) {
            L->bucket_off = bucket_fill[L->bucket];
            bucket_fill[L->bucket] += (size_t)ir_numel(L->node) * sizeof(float);
        }
        if (l->kernel >= 0) {
            const char *k = p->kernel_names[l->kernel];
            snprintf(L->what, sizeof L->what, "kernel %s (node %d, %s)", k, node, L->node->name);
            if (!KFN(G, &L->f, k, L->what))
                return 0;
            L->block = (unsigned)l->block;
            L->shared = (unsigned)l->shared_bytes;
            L->cluster = l->cluster;
            /* above 48 KB of dynamic shared memory a kernel must ask first (once per function) */
            if (L->shared > 48 * 1024 &&
                !CU(G, cuFuncSetAttribute(L->f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)L->shared),
                    L->what))
                return 0;
            CUresult gr;
            L->grid = gpu_launch_grid_f(l, L->f, G->info.sms, &gr);
            if (!cu_ok(G, gr, "cuOccupancyMaxActiveClusters", L->what))
                return 0;
            G->info.nlaunches++;
        } else {
            snprintf(L->what, sizeof L->what, "collective %s (node %d, %s)", ir_node_op_name(L->node), node,
                     L->node->name);
            G->has_collectives = 1;
            G->info.ncollectives++;
        }
    }
    return 1;
}

static size_t page2m(size_t n) { return (n + ((size_t)2 << 20) - 1) / ((size_t)2 << 20) * ((size_t)2 << 20); }

/* The training steps' metrics (moec_moe_stats): one block per 256 rows of a layer, at most this many */
enum { MSTATS_MAX_GRID = 256 };

static int mstats_grid(int64_t rows)
{
    int64_t g = (rows + BLOCK - 1) / BLOCK;
    return g < 1 ? 1 : g > MSTATS_MAX_GRID ? MSTATS_MAX_GRID : (int)g;
}

/* The device memory of the training steps' metrics: the accumulator (2 + per watched layer E + 3 doubles) and
 * the largest layer's per-block sums; the same watched nodes as the CPU backend's (cpu_metrics_watch). */
static size_t metrics_bytes(const IrGraph *g, size_t *acc_bytes)
{
    CpuWatch w;
    cpu_metrics_watch(g, &w);
    int64_t acc = 2, part = 0;
    for (int l = 0; l < w.nlayers; l++) {
        const IrNode *n = g->nodes[w.layer[l]];
        int64_t E = n->src[0]->shape[n->src[0]->rank - 1], k = n->shape[n->rank - 1];
        int64_t p = (int64_t)mstats_grid(ir_numel(n) / k) * (2 * E + 1);
        acc += E + 3;
        part = p > part ? p : part;
    }
    if (acc_bytes)
        *acc_bytes = align256((size_t)acc * sizeof(double));
    return align256((size_t)acc * sizeof(double)) + align256((size_t)(part ? part : 1) * sizeof(double));
}

/* The launch whose weight-gradient GEMM writes the squares of param node `param`'s whole gradient (plan.h
 * PLAN_ARG_NORM, decision 73), its doubles a block through *per_block; -1 when none does (or, never planned, more
 * than one). */
static int norm_launch(const Plan *plan, int param, int *per_block)
{
    int found = -1;
    for (int i = 0; i < plan->nlaunches; i++) {
        const PlanLaunch *l = &plan->launches[i];
        for (int a = 0; a < l->nargs && l->targs; a++)
            if (l->targs[a].kind == PLAN_ARG_NORM && l->targs[a].value == param) {
                if (found >= 0)
                    return -1;
                found = i;
                *per_block = (int)l->targs[a].rows;
            }
    }
    return found;
}

/* A param's slot of norm partials: the grad-norm kernel's blocks (moec_grad_sumsq), or for a gradient whose GEMM
 * writes its squares (decision 73) room for NORM_MAX_SMS persistent blocks of them, so that the layout (and
 * --dry-run's plan) does not depend on the device; a device with more SMs runs moec_grad_sumsq instead */
enum { NORM_MAX_SMS = 256 };
static int64_t norm_slot(const Plan *plan, const IrNode *param)
{
    int64_t grid = (ir_numel(param) + BLOCK - 1) / BLOCK, per_block = 0;
    grid = grid > SUMSQ_MAX_GRID ? SUMSQ_MAX_GRID : grid < 1 ? 1 : grid;
    int pb = 0;
    if (norm_launch(plan, param->id, &pb) >= 0)
        per_block = (int64_t)pb * NORM_MAX_SMS;
    return grid > per_block ? grid : per_block;
}

/* the optimizer's scratch beside the batch: the norm's partials (norm_slot's per parameter), the step's scalars,
 * the loss ring */
static size_t scratch_bytes(const Plan *plan, int ring)
{
    const IrGraph *g = plan->graph;
    int64_t parts = 0;
    for (int p = 0; p < g->nparams; p++)
        parts += norm_slot(plan, g->params[p]);
    return align256((size_t)(parts + 1) * sizeof(double)) + align256(NSCALARS * sizeof(double)) +
           align256((size_t)ring * sizeof(float)) + align256((size_t)ring * sizeof(double)) + metrics_bytes(g, NULL);
}

void gpu_plan_memory(const Plan *plan, int ranks, int ring, GpuMemoryPlan *out)
{
    const IrGraph *g = plan->graph;
    size_t region[PLAN_REGION_COUNT];
    for (int r = 0; r < PLAN_REGION_COUNT; r++)
        region[r] = align256((size_t)plan->memory.region_bytes[r] + 256);
    int64_t nparams_total = 0;
    for (int p = 0; p < g->nparams; p++)
        nparams_total += ir_numel(g->params[p]);
    size_t bucket_bytes = 0;
    if (ranks > 1) {
        Bucket buckets[MAX_BUCKETS];
        int nbuckets = 0;
        find_buckets(g, buckets, &nbuckets, NULL);
        for (int b = 0; b < nbuckets; b++)
            bucket_bytes += align256((size_t)buckets[b].numel * sizeof(float));
    }
    CommLayout cl;
    comm_layout(g, ranks, &cl);
    bucket_bytes += cl.total;
    memset(out, 0, sizeof *out);
    out->exchange = 2 * align256(cl.stage);
    out->params = page2m(region[PLAN_REGION_PARAMS]);
    out->adam = page2m(align256((size_t)nparams_total * 2 * sizeof(float)));
    out->acts = page2m(region[PLAN_REGION_ACTIVATIONS]);
    out->other = page2m(region[PLAN_REGION_INPUTS] + scratch_bytes(plan, ring > 0 ? ring : 1) + bucket_bytes);
    out->total = out->params + out->adam + out->acts + out->other;
    out->reserve = GPU_MEMORY_RESERVE;
}

/* The kernels' image (embedded, cached or compiled) loaded as a module.
 * Simulated ranks take turns: the first compiles, the others find the cache. */
static int load_module(Gpu *G, const GpuOptions *o)
{
    static pthread_mutex_t image_lock = PTHREAD_MUTEX_INITIALIZER;
    void *image = NULL;
    size_t image_size = 0;
    pthread_mutex_lock(&image_lock);
    int ok = get_image(G, o, &image, &image_size);
    pthread_mutex_unlock(&image_lock);
    if (ok) {
        char err[600];
        CUresult r = kimage_load(&G->mods, image, image_size, err, sizeof err);
        if (r != CUDA_SUCCESS)
            ok = fail(G, "%s", err);
    }
    ok = ok && KFN(G, &G->k_sumsq, "moec_grad_sumsq", NULL) &&
         KFN(G, &G->k_sum, "moec_sum_partials", NULL) &&
         KFN(G, &G->k_clip, "moec_clip", NULL) &&
         KFN(G, &G->k_adamw, "moec_adamw", NULL) &&
         KFN(G, &G->k_adamw16, "moec_adamw_bf16", NULL) &&
         KFN(G, &G->k_to16, "moec_to_bf16", NULL) &&
         KFN(G, &G->k_scale, "moec_scale", NULL) &&
         KFN(G, &G->k_accum, "moec_accum", NULL) &&
         KFN(G, &G->k_accum_out, "moec_accum_out", NULL) &&
         KFN(G, &G->k_mstats, "moec_moe_stats", NULL) &&
         KFN(G, &G->k_mstats_add, "moec_moe_stats_add", NULL) &&
         KFN(G, &G->k_madd, "moec_metric_add", NULL) &&
         KFN(G, &G->k_pack, "moec_ep_pack", NULL) &&
         KFN(G, &G->k_unpack, "moec_ep_unpack", NULL) &&
         KFN(G, &G->k_sbar, "moec_sim_barrier", NULL) &&
         KFN(G, &G->k_sa2a, "moec_sim_alltoall", NULL) &&
         KFN(G, &G->k_sar, "moec_sim_allreduce", NULL) &&
         KFN(G, &G->k_srs32, "moec_sim_rs_f32", NULL) &&
         KFN(G, &G->k_sag32, "moec_sim_ag_f32", NULL) &&
         KFN(G, &G->k_srs64, "moec_sim_rs_f64", NULL) &&
         KFN(G, &G->k_sag64, "moec_sim_ag_f64", NULL);
    free(image);
    return ok;
}

/* Param p's e4m3 copy (buffer c): its two kernels by name (plan_fp8b_kernel_name), one 512-thread block per
 * 128x128 tile (at most 8 an SM's worth of the H200's 132: the kernels stride over the tiles). */
static int fp8_copy_kernels(Gpu *G, int p, const IrNode *pn, const PlanBuf *c)
{
    PlanFp8Copy fc;
    if (!plan_fp8b_copy_layout(G->g, pn, &fc) || fc.bytes != c->bytes || fc.e * fc.n * fc.k != G->numel[p])
        return fail(G, "internal: %s is no e4m3 copy of %s", c->name, pn->name);
    if (!G->fp8_step) {
        G->fp8_step = calloc((size_t)G->g->nparams + 1, sizeof *G->fp8_step);
        G->fp8_load = calloc((size_t)G->g->nparams + 1, sizeof *G->fp8_load);
        G->fp8_grid = calloc((size_t)G->g->nparams + 1, sizeof *G->fp8_grid);
        if (!G->fp8_step || !G->fp8_load || !G->fp8_grid)
            return fail(G, "out of memory");
    }
    char a[96], b[96];
    plan_fp8b_kernel_name(&fc, 1, a, sizeof a);
    plan_fp8b_kernel_name(&fc, 0, b, sizeof b);
    int64_t tiles = fc.e * (fc.n / 128) * (fc.k / 128);
    G->fp8_grid[p] = (unsigned)(tiles < 132 * 8 ? tiles : 132 * 8);
    return KFN(G, &G->fp8_step[p], a, a) &&
           KFN(G, &G->fp8_load[p], b, b);
}

static int h2d(Gpu *G, CUdeviceptr d, const void *h, size_t n, const char *what);

/* The simulated ranks (threads of this process on one GPU, one context) learn each other's memory: every rank's
 * three allocations (params, misc, activations: a buffer of the plan lies at the same offset in each rank's),
 * through the host transport once, into a table on the device; and the groups' members. The last thing
 * gpu_create does, after every allocation: a rank that failed before has aborted the transport, and this fails
 * with its message. */
static int sim_connect(Gpu *G)
{
    Comm *c = G->comm;
    int world = c->world;
    unsigned long long mine[4] = {G->region[0], G->misc, G->region[2], (unsigned long long)G->dev};
    unsigned long long *all = calloc((size_t)world * 4, sizeof *all), *base = calloc((size_t)world * 3, sizeof *base);
    int *mem = calloc((size_t)world * 3, sizeof *mem);
    if (!all || !base || !mem)
        die("out of memory");
    void *stop = NULL;
    int ok = CU(G, cuMemHostAlloc(&stop, sizeof(int), CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
                "the simulated ranks' stop word") &&
             CU(G, cuMemHostGetDevicePointer(&G->stop_d, stop, 0), "the simulated ranks' stop word");
    if (stop) {
        G->stop_h = stop;
        *G->stop_h = 0;
    }
    ok = ok && c->ops->allgather(c, COMM_WORLD, mine, all, sizeof mine);
    if (!ok && !G->err[0])
        fail(G, "the simulated ranks' device memory: %s", c->error);
    for (int r = 0; ok && r < world; r++) {
        if (all[4 * r + 3] != mine[3])
            ok = fail(G, "simulated rank %d is on GPU %llu, rank %d on GPU %llu: they must share one", r,
                      all[4 * r + 3], c->rank, mine[3]);
        for (int k = 0; k < 3; k++)
            base[3 * r + k] = all[4 * r + k];
    }
    for (int grp = 0; grp < 3; grp++)
        for (int i = 0; i < G->gsize[grp]; i++)
            mem[grp * world + i] = comm_group_member(c, (CommGroup)grp, i);
    ok = ok && h2d(G, G->peer_base, base, (size_t)world * 3 * sizeof *base, "the simulated ranks' table") &&
         h2d(G, G->members, mem, (size_t)world * 3 * sizeof *mem, "the simulated ranks' table");
    free(all);
    free(base);
    free(mem);
    return ok;
}

Gpu *gpu_create(const Plan *plan, Comm *comm, const GpuOptions *o, char *err, size_t errlen)
{
    Gpu *G = calloc(1, sizeof *G);
    const IrGraph *g = plan->graph;
    G->plan = plan;
    G->g = g;
    G->comm = comm && comm->world > 1 ? comm : NULL;
    G->device_comm = G->comm && strcmp(G->comm->ops->name, "nccl") == 0;
    G->ring = o->ring > 0 ? o->ring : 1;
    G->use_graphs = o->graphs;
    G->forward_only = o->forward_only;
    {
        /* the collectives on the device, unless MOEC_HOST_COLLECTIVES=1 asks for the host path (to compare). Over
         * NCCL (several GPUs) only with MOEC_DEVICE_COLLECTIVES=1 for now: that path (send/recv captured in the
         * step's graph) has not yet run on two GPUs (tests/gpu/multi_gpu.sh rows syncN, hostN, speed), while the
         * rank simulator's was checked on the H200 (decision 46); it becomes the default once it has. */
        const char *hc = getenv("MOEC_HOST_COLLECTIVES"), *sc = getenv("MOEC_SYNC_CHECK"), *to = getenv("MOEC_COMM_TIMEOUT");
        const char *dc = getenv("MOEC_DEVICE_COLLECTIVES");
        int host = hc && !strcmp(hc, "1"), nccl_dev = dc && !strcmp(dc, "1");
        G->coll = COLL_HOST;
        if (G->comm && !G->forward_only && !host) {
            if (G->device_comm && nccl_dev && G->comm->ops->enqueue_alltoall && G->comm->ops->enqueue_allreduce &&
                G->comm->ops->wait_device)
                G->coll = COLL_NCCL;
            else if (!strcmp(G->comm->ops->name, "sim") && G->comm->world <= 32)
                G->coll = COLL_SIM;  /* a stream per rank, each its own hardware queue (cudrv.c): at most 32 */
        }
        G->sync_check = sc && !strcmp(sc, "1");
        G->info.coll_device = G->coll != COLL_HOST;
        G->timeout_ns = (to && *to ? atoll(to) : 600) * 1000000000LL;
        if (G->timeout_ns < 0)
            G->timeout_ns = 0;
        for (int grp = 0; G->comm && grp < 3; grp++) {
            G->gsize[grp] = comm_group_size(G->comm, (CommGroup)grp);
            G->grank[grp] = comm_group_rank(G->comm, (CommGroup)grp);
        }
    }
    cpu_metrics_watch(g, &G->watch);
    int64_t *foff = NULL;  /* forward only: each buffer's offset in the forward pass's own layout (-1: none) */
    int ok = 1;
    /* decision 73: the expert weights' gradient-norm squares from their GEMMs (MOEC_GRAD_NORM=gemm), or every
     * gradient read by moec_grad_sumsq (unset or "separate": the default until the GEMMs' squares have run on a GPU) */
    int norm_from_gemm = gpu_norm_from_gemm(G->err, sizeof G->err);
    if (norm_from_gemm < 0) {
        ok = 0;
        goto out;
    }
    ok = cudrv_load(G->err, sizeof G->err);
    if (!ok)
        goto out;
    /* the device */
    {
        int count = 0, dev = o->device;
        cu.cuDeviceGetCount(&count);
        if (dev < 0) {
            const char *lr = getenv("MOEC_LOCAL_RANK");
            dev = lr ? atoi(lr) % count : 0;
        }
        if (dev >= count) {
            ok = fail(G, "GPU %d asked for, %d visible", dev, count);
            goto out;
        }
        ok = CU(G, cuDeviceGet(&G->dev, dev), NULL) && CU(G, cuDevicePrimaryCtxRetain(&G->ctx, G->dev), NULL) &&
             CU(G, cuCtxSetCurrent(G->ctx), NULL);
        if (!ok)
            goto out;
        cu.cuDeviceGetName(G->info.name, sizeof G->info.name, G->dev);
        cu.cuDeviceGetAttribute(&G->info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, G->dev);
        cu.cuDeviceGetAttribute(&G->info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, G->dev);
        cu.cuDeviceGetAttribute(&G->info.sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, G->dev);
        cu.cuMemGetInfo(&G->info.free_mem, &G->info.total_mem);
        arch_of(G->info.cc_major, G->info.cc_minor, G->info.arch, sizeof G->info.arch);
        /* a plan with the fast kernels' sm_90a code on another GPU: refused before NVRTC fails on wgmma, and
         * not a want of kernels (--device auto does not fall back to the CPU on a machine with a GPU) */
        if (!gpu_check_arch(plan, G->info.name, G->info.cc_major, G->info.cc_minor, G->err, sizeof G->err)) {
            ok = 0;
            goto out;
        }
    }
    /* the kernels' plan: made by the compiler (moec compile), or why the GPU cannot run this model */
    if (plan->gpu_unsupported || !plan->cuda_source) {
        ok = fail(G, "the model cannot run on the GPU: %s",
                  plan->gpu_unsupported ? plan->gpu_unsupported : "its plan has no GPU kernels");
        goto out;
    }
    /* memory: plan it all, check it fits, then allocate */
    {
        /* forward passes only: the buffers of the nodes up to the loss, laid out as if the graph ended there
         * (the plan's own layout when that cannot be: plan_forward_memory says when) */
        PlanMemory fm;
        if (G->forward_only) {
            foff = malloc(sizeof(int64_t) * ((size_t)plan->nbufs + 1));
            if (!foff)
                die("out of memory");
            if (!plan_forward_memory(plan, foff, &fm)) {
                free(foff);
                foff = NULL;
            }
        }
        for (int r = 0; r < PLAN_REGION_COUNT; r++)
            G->region_bytes[r] = align256((size_t)(foff ? fm.region_bytes[r] : plan->memory.region_bytes[r]) + 256);
        G->info.training_acts = page2m(align256((size_t)plan->memory.region_bytes[PLAN_REGION_ACTIVATIONS] + 256));
        G->info.forward_only = G->forward_only;
        int64_t nparams_total = 0;
        G->numel = calloc((size_t)g->nparams + 1, sizeof *G->numel);
        G->part_off = calloc((size_t)g->nparams + 1, sizeof *G->part_off);
        G->sumsq_grid = calloc((size_t)g->nparams + 1, sizeof *G->sumsq_grid);
        G->wd = calloc((size_t)g->nparams + 1, sizeof *G->wd);
        G->norm_count = calloc((size_t)g->nparams + 1, sizeof *G->norm_count);
        G->part_len = calloc((size_t)g->nparams + 1, sizeof *G->part_len);
        for (int p = 0; p < g->nparams; p++) {
            G->numel[p] = ir_numel(g->params[p]);
            nparams_total += G->numel[p];
            int64_t grid = (G->numel[p] + BLOCK - 1) / BLOCK;
            G->sumsq_grid[p] = (unsigned)(grid > SUMSQ_MAX_GRID ? SUMSQ_MAX_GRID : grid < 1 ? 1 : grid);
            G->part_len[p] = norm_slot(plan, g->params[p]);
            /* decision 73: the gradient's squares from its GEMM, when its persistent grid fits the slot */
            int pb = 0, li = G->forward_only || !norm_from_gemm ? -1 : norm_launch(plan, g->params[p]->id, &pb);
            if (li >= 0 && plan->launches[li].cluster <= 1) {
                int64_t blocks = (int64_t)gpu_launch_grid(&plan->launches[li], G->info.sms);
                if (blocks <= NORM_MAX_SMS)
                    G->norm_count[p] = blocks * pb;
            }
            G->wd[p] = o->param_wd ? o->param_wd[p] : 0;
            if (ir_has_attr(g->params[p], IR_ATTR_SHARD))
                G->any_shard = 1;
        }
        /* dense gradients' partials first, then the expert shards' */
        for (int pass = 0; pass < 2; pass++)
            for (int p = 0; p < g->nparams; p++) {
                int shard = ir_has_attr(g->params[p], IR_ATTR_SHARD);
                if (shard != pass)
                    continue;
                G->part_off[p] = G->ndense_parts + G->nshard_parts;
                if (pass)
                    G->nshard_parts += G->part_len[p];
                else
                    G->ndense_parts += G->part_len[p];
            }
        G->tok_bytes = 0;
        size_t adam_bytes = G->forward_only ? 0 : align256((size_t)nparams_total * 2 * sizeof(float));
        size_t other = align256((size_t)(G->ndense_parts + G->nshard_parts + 1) * sizeof(double)) +
                       align256(NSCALARS * sizeof(double)) + align256((size_t)G->ring * sizeof(float)) +
                       align256((size_t)G->ring * sizeof(double)) + metrics_bytes(g, NULL);
        /* four allocations: parameters, AdamW state, activations + gradients, and the rest (the batch, the
         * norm's partials, the step's scalars, the loss ring); the driver hands out whole 2 MiB pages. A training
         * backend's sizes are gpu_plan_memory's (what --dry-run prints), checked here against what this Gpu lays
         * out; a forward-only one (eval, embed, score) takes its own, smaller figures */
        if (!G->forward_only)
            plan_buckets(G);
        size_t bucket_bytes = 0;
        for (int b = 0; b < G->nbuckets; b++)
            bucket_bytes += align256((size_t)G->buckets[b].numel * sizeof(float));
        CommLayout cl;
        comm_layout(g, G->comm && !G->forward_only ? G->comm->world : 1, &cl);
        G->comm_bytes = cl.total;
        size_t misc_bytes = G->region_bytes[1] + other + bucket_bytes + cl.total;
        G->misc_bytes = misc_bytes;
        GpuMemoryPlan mp;
        gpu_plan_memory(plan, G->comm ? G->comm->world : 1, G->ring, &mp);
        if (G->forward_only) {
            mp.params = page2m(G->region_bytes[0]);
            mp.adam = page2m(adam_bytes);
            mp.acts = page2m(G->region_bytes[2]);
            mp.other = page2m(misc_bytes);
            mp.total = mp.params + mp.adam + mp.acts + mp.other;
        }
        G->info.planned_params = mp.params;
        G->info.planned_adam = mp.adam;
        G->info.planned_acts = mp.acts;
        G->info.planned_other = mp.other;
        G->info.planned_bytes = mp.total;
        if (mp.params != page2m(G->region_bytes[0]) || mp.adam != page2m(adam_bytes) ||
            mp.acts != page2m(G->region_bytes[2]) || mp.other != page2m(misc_bytes)) {
            ok = fail(G, "internal: the memory plan (gpu_plan_memory) differs from the allocations");
            goto out;
        }
        size_t reserve = mp.reserve;
        if (G->info.planned_bytes + reserve > G->info.free_mem) {
            char a[32], b[32], c[32], d[32], e[32];
            fmt_bytes(a, sizeof a, (double)G->info.planned_bytes);
            fmt_bytes(b, sizeof b, (double)G->info.planned_acts);
            fmt_bytes(c, sizeof c, (double)(G->info.planned_params + G->info.planned_adam));
            fmt_bytes(d, sizeof d, (double)G->info.free_mem);
            fmt_bytes(e, sizeof e, (double)G->info.total_mem);
            ok = fail(G, "the plan does not fit on %s: it needs %s (activations and gradients %s for batch %lld x "
                      "seq %lld per rank, parameters and AdamW state %s) and %s of %s is free; reduce --batch or "
                      "the model's seq, or spread the experts over more GPUs (parallel ep)",
                      G->info.name, a, b, (long long)g->train.batch, (long long)g->train.seq, c, d, e);
            goto out;
        }
        /* the stream and the kernels first, so that what the allocations take can be measured */
        ok = CU(G, cuStreamCreate(&G->stream, CU_STREAM_NON_BLOCKING), NULL) && load_module(G, o);
        if (!ok)
            goto out;
        cu.cuMemGetInfo(&G->free_before, &G->info.total_mem);
        ok = CU(G, cuMemAlloc(&G->region[0], G->region_bytes[0]), "allocating the parameters") &&
             (!adam_bytes || CU(G, cuMemAlloc(&G->adam, adam_bytes), "allocating the AdamW state")) &&
             CU(G, cuMemAlloc(&G->region[2], G->region_bytes[2]), "allocating the activations") &&
             CU(G, cuMemAlloc(&G->misc, misc_bytes), "allocating the batch and the optimizer's scratch");
        if (!ok)
            goto out;
        G->region[1] = G->misc;
        G->partials = G->misc + G->region_bytes[1];
        G->scalars = G->partials + align256((size_t)(G->ndense_parts + G->nshard_parts + 1) * sizeof(double));
        G->ring_loss = G->scalars + align256(NSCALARS * sizeof(double));
        G->ring_norm = G->ring_loss + align256((size_t)G->ring * sizeof(float));
        size_t macc;  /* the metrics' accumulator, then their per-block sums, then the buckets */
        size_t mbytes = metrics_bytes(g, &macc);
        G->mstat = G->ring_norm + align256((size_t)G->ring * sizeof(double));
        G->mpart = G->mstat + macc;
        CUdeviceptr bp = G->mstat + mbytes;
        for (int b = 0; b < G->nbuckets; b++) {
            G->buckets[b].buf = bp;
            bp += align256((size_t)G->buckets[b].numel * sizeof(float));
        }
        if (cl.total) {
            G->flag = bp + cl.flag;
            G->peer_base = bp + cl.peer_base;
            G->members = bp + cl.members;
            G->stage_send = bp + cl.stage_send;
            G->stage_recv = bp + cl.stage_recv;
        }
        /* NaN everywhere a kernel should have written before reading */
        ok = CU(G, cuMemsetD8Async(G->region[2], 0xFF, G->region_bytes[2], G->stream), NULL) &&
             (!adam_bytes || CU(G, cuMemsetD8Async(G->adam, 0, adam_bytes, G->stream), NULL)) &&
             /* the norm's partials: a slot's entries past what its kernel writes stay 0 (decision 73) */
             CU(G, cuMemsetD8Async(G->partials, 0, (size_t)(G->ndense_parts + G->nshard_parts + 1) * sizeof(double),
                                   G->stream), NULL) &&
             CU(G, cuMemsetD8Async(G->scalars, 0, NSCALARS * sizeof(double), G->stream), NULL) &&
             CU(G, cuMemsetD8Async(G->mstat, 0, macc, G->stream), NULL) &&
             (!cl.total || CU(G, cuMemsetD8Async(G->flag, 0, cl.stage_send, G->stream), NULL));
        if (!ok)
            goto out;
        G->nbufs = plan->nbufs;
        G->buf = calloc((size_t)G->nbufs, sizeof *G->buf);
        for (int b = 0; b < G->nbufs; b++) {
            int r = (int)plan->bufs[b].region;
            if (foff && foff[b] < 0)
                continue;  /* a buffer of the backward: no launch here names it */
            size_t off = (size_t)(foff ? foff[b] : plan->bufs[b].offset), bytes = (size_t)plan->bufs[b].bytes;
            if (off + bytes > G->region_bytes[r]) {
                ok = fail(G, "internal: plan buffer %d lies outside its region", b);
                goto out;
            }
            G->buf[b] = G->region[r] + off;
        }
        /* the params' bf16 working copies */
        G->copy = calloc((size_t)g->nparams + 1, sizeof *G->copy);
        G->copy_glu = calloc((size_t)g->nparams + 1, sizeof *G->copy_glu);
        G->copy_cols = calloc((size_t)g->nparams + 1, sizeof *G->copy_cols);
        for (int b = 0; b < G->nbufs; b++)
            if (plan->bufs[b].kind == PLAN_BUF_COPY)
                for (int p = 0; p < g->nparams; p++)
                    if (g->params[p]->id == plan->bufs[b].node) {
                        const IrNode *pn = g->params[p];
                        G->copy[p] = G->buf[b];
                        G->copy_glu[p] = plan->bufs[b].glu_f;
                        G->copy_cols[p] = pn->rank ? pn->shape[pn->rank - 1] : 1;
                        if (plan->bufs[b].storage == PLAN_E4M3 && !fp8_copy_kernels(G, p, pn, &plan->bufs[b])) {
                            ok = 0;
                            goto out;
                        }
                    }
    }
    /* where each launch's weight-gradient GEMM writes its gradient's squares (decision 73), by param node */
    if (!G->forward_only) {
        G->norm_at = calloc((size_t)g->nnodes + 1, sizeof *G->norm_at);
        for (int p = 0; p < g->nparams; p++)
            if (G->norm_count[p])
                G->norm_at[g->params[p]->id] = G->partials + (CUdeviceptr)G->part_off[p] * sizeof(double);
    }
    if (!build_launches(G)) {
        ok = 0;
        goto out;
    }
    if (!G->forward_only)
        metrics_points(G);
    /* the batch's pinned staging, twice */
    {
        /* the inputs the batch goes to: the token ids fed to the embedding, the targets fed to the loss */
        const IrNode *tok = NULL, *tgt = NULL;
        for (int i = 0; i < g->nnodes; i++) {
            const IrNode *n = g->nodes[i];
            if (n->op == IR_OP_EMBEDDING && n->src[0]->op == IR_OP_INPUT)
                tok = n->src[0];
            if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_MASKED_LM_LOSS) && n->src[1]->op == IR_OP_INPUT)
                tgt = n->src[1];
        }
        G->tok = tok;
        G->tgt = tgt;
        if (!tok || !tgt) {
            ok = fail(G, "the model has no token and target inputs");
            goto out;
        }
        G->tok_bytes = (size_t)ir_numel(tok) * sizeof(int32_t);
        for (int s = 0; s < 2 && ok; s++)
            ok = CU(G, cuMemAllocHost(&G->stage[s].pinned, 2 * G->tok_bytes + 4 * sizeof(double)), NULL) &&
                 CU(G, cuEventCreate(&G->stage[s].done, CU_EVENT_DEFAULT), NULL);
        if (!ok)
            goto out;
        /* which inputs: remember their buffers through the nodes' ids */
        G->info.graph = 0;
        (void)tgt;
    }
    /* staged collectives need host copies of what they touch */
    if (G->has_collectives && !G->device_comm && G->coll == COLL_HOST) {
        G->host = calloc((size_t)g->nnodes, sizeof *G->host);
        for (int i = 0; i < G->nlaunches; i++) {
            const IrNode *n = G->launches[i].node;
            if (G->launches[i].f)
                continue;
            if (!G->host[n->id])
                G->host[n->id] = malloc((size_t)ir_numel(n) * 4 + 4);
            for (int s = 0; s < n->nsrc; s++)
                if (!G->host[n->src[s]->id])
                    G->host[n->src[s]->id] = malloc((size_t)ir_numel(n->src[s]) * 4 + 4);
        }
    }
    G->ring_loss_h = calloc((size_t)G->ring, sizeof(float));
    G->ring_norm_h = calloc((size_t)G->ring, sizeof(double));
    ok = sync_stream(G, NULL) && (G->coll != COLL_SIM || sim_connect(G));
out:
    free(foff);
    if (!ok) {
        snprintf(err, errlen, "%s", G->err);
        gpu_destroy(G);
        return NULL;
    }
    return G;
}

void gpu_destroy(Gpu *G)
{
    if (!G)
        return;
    if (G->ctx) {
        cu.cuCtxSetCurrent(G->ctx);
        if (G->stop_h)
            *G->stop_h = 1;  /* a barrier still waiting (a rank failed) returns: the stream can drain */
        if (G->stream)
            cu.cuStreamSynchronize(G->stream);
        if (G->stop_h)
            cu.cuMemFreeHost((void *)G->stop_h);
        for (int e = 0; e < G->npev; e++)
            if (G->pev[e])
                cu.cuEventDestroy(G->pev[e]);
        for (int s = 0; s < 2; s++) {
            if (G->stage[s].graph)
                cu.cuGraphExecDestroy(G->stage[s].graph);
            if (G->stage[s].pinned)
                cu.cuMemFreeHost(G->stage[s].pinned);
            if (G->stage[s].done)
                cu.cuEventDestroy(G->stage[s].done);
        }
        CUdeviceptr more[] = {G->region[0], G->region[2], G->adam, G->misc, G->accum};
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
            if (more[i])
                cu.cuMemFree(more[i]);
        kimage_unload(&G->mods);
        if (G->stream)
            cu.cuStreamDestroy(G->stream);
        cu.cuDevicePrimaryCtxRelease(G->dev);
    }
    for (int i = 0; i < G->nlaunches; i++) {
        gpu_args_free(&G->launches[i].args);
    }
    free(G->launches);
    if (G->host)
        for (int i = 0; i < G->g->nnodes; i++)
            free(G->host[i]);
    free(G->host);
    free(G->buf);
    free(G->bucket_of);
    free(G->numel);
    free(G->copy);
    free(G->copy_glu);
    free(G->copy_cols);
    free(G->fp8_step);
    free(G->fp8_load);
    free(G->fp8_grid);
    free(G->part_off);
    free(G->sumsq_grid);
    free(G->norm_count);
    free(G->part_len);
    free(G->norm_at);
    free(G->wd);
    free(G->ring_loss_h);
    free(G->ring_norm_h);
    free(G->pev);
    free(G->spans);
    free(G);
}

/* ------------------------------------------------------------ transfers */

/* Copies between host and device memory, ordered on the rank's stream and
 * complete on return. (The synchronous cuMemcpyHtoD runs on the legacy
 * stream, which a non-blocking stream does not wait for, and may return
 * before a copy from pageable memory has landed: a kernel queued next on
 * our stream could read the old bytes.) */
static int h2d(Gpu *G, CUdeviceptr d, const void *h, size_t n, const char *what)
{
    return CU(G, cuMemcpyHtoDAsync(d, h, n, G->stream), what) && sync_stream(G, what);
}

static int d2h(Gpu *G, void *h, CUdeviceptr d, size_t n, const char *what)
{
    if (G->in_step)
        G->step_d2h++;
    return CU(G, cuMemcpyDtoHAsync(h, d, n, G->stream), what) && sync_stream(G, what);
}

static int cur(Gpu *G) { return CU(G, cuCtxSetCurrent(G->ctx), NULL); }

static unsigned grid_for(int64_t n, int64_t max);

int gpu_put_params(Gpu *G, const float *params, const int64_t *param_off)
{
    if (!cur(G) || !sync_stream(G, NULL))
        return 0;
    for (int p = 0; p < G->g->nparams; p++) {
        if (!h2d(G, G->buf[G->g->params[p]->id], params + param_off[p], (size_t)G->numel[p] * 4,
                G->g->params[p]->name))
            return 0;
        if (G->copy[p] && G->fp8_load && G->fp8_load[p]) {
            /* its e4m3 copy (fp8-block tiles or MXFP8 blocks, and the transposed ones), from the values just loaded */
            CUdeviceptr dst = G->copy[p], src = G->buf[G->g->params[p]->id];
            void *args[] = {&dst, &src};
            if (!CU(G, cuLaunchKernel(G->fp8_load[p], G->fp8_grid[p], 1, 1, 512, 1, 1, 0, G->stream, args, NULL),
                    "moec_fp8b_copy") ||
                !CU(G, cuStreamSynchronize(G->stream), G->g->params[p]->name))
                return 0;
        } else if (G->copy[p]) {
            /* its bf16 working copy, from the values just loaded */
            CUdeviceptr dst = G->copy[p], src = G->buf[G->g->params[p]->id];
            long long n = G->numel[p];
            void *args[] = {&dst, &src, &n, &G->copy_glu[p], &G->copy_cols[p]};
            if (!CU(G, cuLaunchKernel(G->k_to16, grid_for(n, ADAMW_MAX_GRID), 1, 1, BLOCK, 1, 1, 0, G->stream, args,
                                      NULL), "moec_to_bf16") ||
                !sync_stream(G, G->g->params[p]->name))
                return 0;
        }
    }
    return 1;
}

int gpu_get_params(Gpu *G, float *params, const int64_t *param_off)
{
    if (!cur(G) || !sync_stream(G, NULL))
        return 0;
    for (int p = 0; p < G->g->nparams; p++)
        if (!d2h(G, params + param_off[p], G->buf[G->g->params[p]->id], (size_t)G->numel[p] * 4,
                G->g->params[p]->name))
            return 0;
    return 1;
}

int gpu_put_adam(Gpu *G, const float *adam, int64_t nparams_total)
{
    if (G->forward_only)
        return fail(G, "internal: AdamW state given to a forward-only backend");
    return cur(G) && sync_stream(G, NULL) &&
           h2d(G, G->adam, adam, (size_t)nparams_total * 2 * sizeof(float), "the AdamW state");
}

int gpu_get_adam(Gpu *G, float *adam, int64_t nparams_total)
{
    if (G->forward_only)
        return fail(G, "internal: a forward-only backend has no AdamW state");
    return cur(G) && sync_stream(G, NULL) &&
           d2h(G, adam, G->adam, (size_t)nparams_total * 2 * sizeof(float), "the AdamW state");
}

int gpu_get_grad(Gpu *G, int p, float *out)
{
    if (G->forward_only)
        return fail(G, "internal: a forward-only backend has no gradients");
    return cur(G) && sync_stream(G, NULL) &&
           d2h(G, out, G->buf[G->g->grads[p]->id], (size_t)G->numel[p] * 4, G->g->grads[p]->name);
}

/* ------------------------------------------------------------ the step */

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int collective(Gpu *G, const Launch *L);
static int device_collective(Gpu *G, const Launch *L);

/* A collective. On the device (COLL_SIM, COLL_NCCL) it is only enqueued: no wait, no time taken (--profile
 * times it on the GPU). On the host path it is timed from when the kernels before it are done (the wait
 * for them is compute, not communication) to when its result is usable. */
static int run_collective(Gpu *G, const Launch *L)
{
    if (G->coll != COLL_HOST)
        return device_collective(G, L);
    if (!sync_stream(G, L->what))
        return 0;
    double t0 = wall();
    int ok = collective(G, L) && sync_stream(G, L->what);
    G->info.coll_seconds += wall() - t0;
    G->info.coll_calls++;
    return ok;
}

static int collective(Gpu *G, const Launch *L)
{
    const IrNode *n = L->node;
    Comm *c = G->comm;
    if (!c)
        return fail(G, "%s: a collective in a single-rank run", L->what);
    CUdeviceptr y = G->buf[n->id];
    size_t ybytes = (size_t)ir_numel(n) * 4;
    if (!G->device_comm) {
        /* host transports (the rank simulator, TCP): through host memory, with the CPU backend's code */
        if (!sync_stream(G, L->what))
            return 0;
        for (int s = 0; s < n->nsrc; s++)
            if (!d2h(G, G->host[n->src[s]->id], G->buf[n->src[s]->id], (size_t)ir_numel(n->src[s]) * 4,
                    L->what))
                return 0;
        cpu_exec_node_f32(n, G->host, c);
        return h2d(G, y, G->host[n->id], ybytes, L->what);
    }
    /* NCCL: device buffers; split sizes come to the host (the transfer sizes need them) */
    if (!sync_stream(G, L->what))
        return 0;
    int ok = 1;
    switch (n->op) {
    case IR_OP_EP_COUNTS: {
        int64_t ep = ir_attr_i(n, IR_ATTR_EP), El = n->shape[1];
        size_t b[1024], o[1024];
        for (int64_t j = 0; j < ep; j++) {
            b[j] = sizeof(int32_t) * (size_t)El;
            o[j] = b[j] * (size_t)j;
        }
        ok = c->ops->alltoallv(c, COMM_EP, (const void *)(uintptr_t)G->buf[n->src[0]->id], b, o,
                               (void *)(uintptr_t)y, b, o);
        break;
    }
    case IR_OP_EP_DISPATCH:
    case IR_OP_EP_COMBINE: {
        int64_t ep = ir_attr_i(n, IR_ATTR_EP), E = n->src[1]->shape[0], El = E / ep;
        int64_t d = n->src[0]->rank == 2 ? n->src[0]->shape[1] : 1;
        size_t rowb = sizeof(float) * (size_t)d;
        int32_t counts[4096], rc[4096];
        if (E > 4096 || ep * El > 4096 || ep > 1024)
            return fail(G, "%s: more than 4096 experts", L->what);
        if (!d2h(G, counts, G->buf[n->src[1]->id], sizeof(int32_t) * (size_t)E, L->what) ||
            !d2h(G, rc, G->buf[n->src[2]->id], sizeof(int32_t) * (size_t)(ep * El), L->what))
            return 0;
        size_t hb[1024], ho[1024], ab[1024], ao[1024], o1 = 0, o2 = 0;
        for (int64_t j = 0; j < ep; j++) {
            size_t rows = 0, rows2 = 0;
            for (int64_t e = j * El; e < (j + 1) * El; e++)
                rows += (size_t)counts[e];
            for (int64_t e = 0; e < El; e++)
                rows2 += (size_t)rc[j * El + e];
            hb[j] = rows * rowb;
            ho[j] = o1;
            o1 += hb[j];
            ab[j] = rows2 * rowb;
            ao[j] = o2;
            o2 += ab[j];
        }
        if (!CU(G, cuMemsetD8Async(y, 0, ybytes, G->stream), L->what) || !sync_stream(G, L->what))
            return 0;
        const void *x = (const void *)(uintptr_t)G->buf[n->src[0]->id];
        ok = n->op == IR_OP_EP_DISPATCH ? c->ops->alltoallv(c, COMM_EP, x, hb, ho, (void *)(uintptr_t)y, ab, ao)
                                        : c->ops->alltoallv(c, COMM_EP, x, ab, ao, (void *)(uintptr_t)y, hb, ho);
        break;
    }
    case IR_OP_ALL_REDUCE: {
        CommGroup grp = ir_attr_e(n, IR_ATTR_GROUP) == IR_GROUP_DP ? COMM_DP : COMM_WORLD;
        if (!CU(G, cuMemcpyDtoDAsync(y, G->buf[n->src[0]->id], ybytes, G->stream), L->what) ||
            !sync_stream(G, L->what))
            return 0;
        ok = c->ops->allreduce_f32(c, grp, (float *)(uintptr_t)y, ir_numel(n));
        if (ok) {
            long long nn = ir_numel(n);
            double f = ir_attr_f(n, IR_ATTR_FACTOR);
            void *args[] = {&y, &nn, &f};
            int64_t grid = (nn + BLOCK - 1) / BLOCK;
            if (!CU(G, cuLaunchKernel(G->k_scale, (unsigned)(grid > 4096 ? 4096 : grid < 1 ? 1 : grid), 1, 1, BLOCK, 1,
                                      1, 0, G->stream, args, NULL), L->what))
                return 0;
        }
        break;
    }
    default:
        return fail(G, "%s: no GPU implementation", L->what);
    }
    if (!ok)
        return fail(G, "%s failed: %s", L->what, c->error);
    return 1;
}

static unsigned grid_for(int64_t n, int64_t max)
{
    int64_t g = (n + BLOCK - 1) / BLOCK;
    return (unsigned)(g > max ? max : g < 1 ? 1 : g);
}

/* ------------------------------------------------------------ collectives on the device (decision 46) */

static int launch(Gpu *G, CUfunction f, unsigned grid, unsigned block, void **args, const char *what)
{
    return CU(G, cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, G->stream, args, NULL), what);
}

/* Where device pointer p lies for the simulator's table: region 0 params, 1 misc (the inputs, the optimizer's
 * scratch, the buckets, the staging), 2 activations; and its byte offset there. */
static int sim_where(Gpu *G, CUdeviceptr p, int *reg, long long *off, const char *what)
{
    CUdeviceptr b[3] = {G->region[0], G->misc, G->region[2]};
    size_t n[3] = {G->region_bytes[0], G->misc_bytes, G->region_bytes[2]};
    for (int r = 0; r < 3; r++)
        if (p >= b[r] && p < b[r] + n[r]) {
            *reg = r;
            *off = (long long)(p - b[r]);
            return 1;
        }
    return fail(G, "internal: %s: a buffer outside the allocations", what);
}

/* the simulator's barrier over group grp */
static int sim_barrier(Gpu *G, int grp, const char *what)
{
    CUdeviceptr mem = G->members + (CUdeviceptr)grp * (CUdeviceptr)G->comm->world * sizeof(int);
    int nmem = G->gsize[grp], me = G->comm->rank;
    long long foff = (long long)(G->flag - G->misc);
    void *a[] = {&G->peer_base, &mem, &nmem, &me, &foff, &G->timeout_ns, &G->stop_d};
    return launch(G, G->k_sbar, 1, 32, a, what);
}

/* the simulator's fixed-size all-to-all over group grp: `words` 4-byte words per member, from each member's
 * `send` (at the same offset in every rank) into y; between barriers (the senders' buffers are ready, and
 * nobody overwrites one before every member has read it) */
static int sim_alltoall(Gpu *G, int grp, CUdeviceptr y, CUdeviceptr send, long long words, const char *what)
{
    int reg, me = G->grank[grp], nmem = G->gsize[grp];
    long long off;
    CUdeviceptr mem = G->members + (CUdeviceptr)grp * (CUdeviceptr)G->comm->world * sizeof(int);
    void *a[] = {&y, &G->peer_base, &mem, &nmem, &me, &reg, &off, &words};
    return sim_where(G, send, &reg, &off, what) && sim_barrier(G, grp, what) &&
           launch(G, G->k_sa2a, grid_for((int64_t)nmem * words, 4096), BLOCK, a, what) && sim_barrier(G, grp, what);
}

/* the simulator's all-reduce in place (n floats, or doubles with f64): reduce-scatter, all-gather, a barrier
 * before, between and after */
static int sim_allreduce_inplace(Gpu *G, int grp, CUdeviceptr buf, long long n, int f64, const char *what)
{
    int reg, me = G->grank[grp], nmem = G->gsize[grp];
    long long off;
    CUdeviceptr mem = G->members + (CUdeviceptr)grp * (CUdeviceptr)G->comm->world * sizeof(int);
    void *a[] = {&buf, &n, &G->peer_base, &mem, &nmem, &me, &reg, &off};
    unsigned grid = grid_for(n, 4096);
    return sim_where(G, buf, &reg, &off, what) && sim_barrier(G, grp, what) &&
           launch(G, f64 ? G->k_srs64 : G->k_srs32, grid, BLOCK, a, what) && sim_barrier(G, grp, what) &&
           launch(G, f64 ? G->k_sag64 : G->k_sag32, grid, BLOCK, a, what) && sim_barrier(G, grp, what);
}

/* an all-reduce in place on the device, either transport */
static int device_allreduce(Gpu *G, int grp, CUdeviceptr buf, long long n, int f64, const char *what)
{
    if (G->coll == COLL_SIM)
        return sim_allreduce_inplace(G, grp, buf, n, f64, what);
    Comm *c = G->comm;
    if (!c->ops->enqueue_allreduce(c, (CommGroup)grp, (void *)(uintptr_t)buf, n, f64, (void *)G->stream))
        return fail(G, "%s failed: %s", what, c->error);
    return 1;
}

/* An expert exchange's fixed-size part: `bytes` per member of the EP group, stage_send to stage_recv. */
static int device_alltoall(Gpu *G, CUdeviceptr send, CUdeviceptr recv, size_t bytes, const char *what)
{
    if (G->coll == COLL_SIM)
        return sim_alltoall(G, COMM_EP, recv, send, (long long)(bytes / 4), what);
    Comm *c = G->comm;
    if (!c->ops->enqueue_alltoall(c, COMM_EP, (const void *)(uintptr_t)send, (void *)(uintptr_t)recv, bytes,
                                  (void *)G->stream))
        return fail(G, "%s failed: %s", what, c->error);
    return 1;
}

/* A collective node enqueued on the step's stream. The split sizes stay on the device: an exchange packs each
 * peer's rows into a slot of the dropless capacity (moec_ep_pack, reading the sizes), moves whole slots, and
 * unpacks the valid rows of each received slot (moec_ep_unpack): the bits the host path produces. */
static int device_collective(Gpu *G, const Launch *L)
{
    const IrNode *n = L->node;
    CUdeviceptr y = G->buf[n->id];
    switch (n->op) {
    case IR_OP_EP_COUNTS: {
        long long El = n->shape[1];
        return device_alltoall(G, G->buf[n->src[0]->id], y, (size_t)El * sizeof(int32_t), L->what);
    }
    case IR_OP_EP_DISPATCH:
    case IR_OP_EP_COMBINE: {
        int dispatch = n->op == IR_OP_EP_DISPATCH;
        int ep = (int)ir_attr_i(n, IR_ATTR_EP), El = (int)(n->src[1]->shape[0] / ep);
        long long xrows = n->src[0]->shape[0], yrows = n->shape[0], d = exch_width(n), cap = exch_cap(n);
        CUdeviceptr x = G->buf[n->src[0]->id], counts = G->buf[n->src[1]->id], rc = G->buf[n->src[2]->id];
        CUdeviceptr seg_send = dispatch ? counts : rc, seg_recv = dispatch ? rc : counts;
        size_t bytes = (size_t)cap * (size_t)d * sizeof(float);
        if (ep > 1024)
            return fail(G, "%s: ep %d > 1024", L->what, ep);
        if ((size_t)ep * bytes > G->comm_bytes)
            return fail(G, "internal: %s: the staging is smaller than %d slots of %lld rows", L->what, ep, cap);
        void *pa[] = {&G->stage_send, &cap, &d, &x, &xrows, &seg_send, &ep, &El};
        void *ua[] = {&y, &yrows, &d, &G->stage_recv, &cap, &seg_recv, &ep, &El};
        return launch(G, G->k_pack, grid_for(xrows * d, 4096), BLOCK, pa, L->what) &&
               device_alltoall(G, G->stage_send, G->stage_recv, bytes, L->what) &&
               launch(G, G->k_unpack, grid_for(yrows * d, 4096), BLOCK, ua, L->what);
    }
    case IR_OP_ALL_REDUCE: {
        int grp = (int)allreduce_group(n);
        long long nn = ir_numel(n);
        double f = ir_attr_f(n, IR_ATTR_FACTOR);
        CUdeviceptr src = G->buf[n->src[0]->id];
        if (G->coll == COLL_SIM) {
            /* y is this rank's alone: the peers' sources summed straight into it, and scaled */
            int reg, nmem = G->gsize[grp];
            long long off;
            CUdeviceptr mem = G->members + (CUdeviceptr)grp * (CUdeviceptr)G->comm->world * sizeof(int);
            void *a[] = {&y, &nn, &G->peer_base, &mem, &nmem, &reg, &off, &f};
            return sim_where(G, src, &reg, &off, L->what) && sim_barrier(G, grp, L->what) &&
                   launch(G, G->k_sar, grid_for(nn, 4096), BLOCK, a, L->what) && sim_barrier(G, grp, L->what);
        }
        void *a[] = {&y, &nn, &f};
        return CU(G, cuMemcpyDtoDAsync(y, src, (size_t)nn * sizeof(float), G->stream), L->what) &&
               device_allreduce(G, grp, y, nn, 0, L->what) && launch(G, G->k_scale, grid_for(nn, 4096), BLOCK, a, L->what);
    }
    default:
        return fail(G, "%s: no GPU implementation", L->what);
    }
}

/* The bucketed gradient all-reduces, after the backward: gather, one collective per bucket, scale, scatter. */
static int flush_buckets(Gpu *G)
{
    Comm *c = G->comm;
    for (int b = 0; G->coll != COLL_HOST && b < G->nbuckets; b++) {
        /* on the device: enqueued, no wait */
        Bucket *bk = &G->buckets[b];
        long long nn = bk->numel;
        void *args[] = {&bk->buf, &nn, &bk->factor};
        if (!device_allreduce(G, bk->group, bk->buf, nn, 0, "the gradient all-reduce") ||
            !launch(G, G->k_scale, grid_for(nn, 4096), BLOCK, args, "moec_scale"))
            return 0;
    }
    for (int b = 0; G->coll == COLL_HOST && b < G->nbuckets; b++) {
        Bucket *bk = &G->buckets[b];
        if (!sync_stream(G, "the gradient all-reduce"))
            return 0;
        double t0 = wall();
        int ok;
        size_t bytes = (size_t)bk->numel * sizeof(float);
        if (G->device_comm) {
            ok = c->ops->allreduce_f32(c, (CommGroup)bk->group, (float *)(uintptr_t)bk->buf, bk->numel);
        } else {
            float *h = malloc(bytes ? bytes : 4);
            ok = h && d2h(G, h, bk->buf, bytes, NULL) &&
                 c->ops->allreduce_f32(c, (CommGroup)bk->group, h, bk->numel) && h2d(G, bk->buf, h, bytes, NULL);
            free(h);
        }
        G->info.coll_seconds += wall() - t0;
        G->info.coll_calls++;
        if (!ok)
            return fail(G, "the gradient all-reduce failed: %s", c->error[0] ? c->error : G->err);
        long long nn = bk->numel;
        void *args[] = {&bk->buf, &nn, &bk->factor};
        if (!CU(G, cuLaunchKernel(G->k_scale, grid_for(nn, 4096), 1, 1, BLOCK, 1, 1, 0, G->stream, args, NULL),
                "moec_scale"))
            return 0;
    }
    for (int i = 0; i < G->nlaunches; i++) {
        const Launch *L = &G->launches[i];
        if (L->f || L->bucket < 0)
            continue;
        size_t nb = (size_t)ir_numel(L->node) * sizeof(float);
        if (!CU(G, cuMemcpyDtoDAsync(G->buf[L->node->id], G->buckets[L->bucket].buf + L->bucket_off, nb, G->stream),
                L->what))
            return 0;
    }
    return 1;
}

/* --profile: an event recorded on the stream where a timed span begins (nothing when not profiling) */
static int prof_begin(Gpu *G, int *ev)
{
    *ev = -1;
    if (!G->prof)
        return 1;
    if (G->pev_used == G->npev)
        return fail(G, "internal: more timed spans than the profile's %d events", G->npev);
    *ev = G->pev_used++;
    return CU(G, cuEventRecord(G->pev[*ev], G->stream), "profiling");
}

/* ... and where it ends: the pair's elapsed time goes to slot (a node id or a PROF_ slot) */
static int prof_end(Gpu *G, int ev0, int slot)
{
    int ev1;
    if (!G->prof)
        return 1;
    if (!prof_begin(G, &ev1))
        return 0;
    G->spans[G->nspans++] = (ProfSpan){slot, ev0, ev1};
    return 1;
}

static int readable(const Gpu *G, int id, PlanStorage want);
static int logits_live(const Gpu *G, int id);
static int launches_upto(const Gpu *G, int node);

/* The nodes of a training pass after which its metrics are taken on the device (the CPU backend's watched
 * nodes, gpu_eval's: the language-model loss, each MoE layer's topk_experts), plus the loss, in launch order,
 * each with the launch index right after its own launches; a layer whose values are not plain buffers of
 * their own (read through by a fast kernel) is left out, as in gpu_eval. */
static void metrics_points(Gpu *G)
{
    const IrGraph *g = G->g;
    G->mnodes = 0;
    for (int i = 0; i < g->nnodes && i <= g->loss->id; i++) {
        int want = i == g->loss->id || (i == G->watch.lm && readable(G, i, PLAN_F32));
        for (int l = 0; !want && l < G->watch.nlayers; l++)
            want = G->watch.layer[l] == i && readable(G, i, PLAN_I32) && logits_live(G, i);
        if (want) {
            G->mnode[G->mnodes] = i;
            G->mcut[G->mnodes++] = launches_upto(G, i);
        }
    }
}

/* Watched node id of a training pass has just been enqueued: its metrics added on the device. */
static int enqueue_metrics(Gpu *G, int id)
{
    const IrGraph *g = G->g;
    if (id == g->loss->id || id == G->watch.lm) {
        /* the objective into mstat[0], the language-model loss into mstat[1] (one node may be both) */
        for (int w = 0; w < 2; w++) {
            if (id != (w ? G->watch.lm : g->loss->id))
                continue;
            CUdeviceptr acc = G->mstat + (CUdeviceptr)w * sizeof(double);
            void *args[] = {&acc, &G->buf[id]};
            if (!CU(G, cuLaunchKernel(G->k_madd, 1, 1, 1, 32, 1, 1, 0, G->stream, args, NULL), "moec_metric_add"))
                return 0;
        }
        return 1;
    }
    int64_t off = 2;
    for (int l = 0; l < G->watch.nlayers; l++) {
        const IrNode *n = g->nodes[G->watch.layer[l]];
        int e = (int)n->src[0]->shape[n->src[0]->rank - 1], k = (int)n->shape[n->rank - 1];
        if (G->watch.layer[l] != id) {
            off += e + 3;
            continue;
        }
        long long rows = ir_numel(n) / k;
        int grid = mstats_grid(rows);
        CUdeviceptr acc = G->mstat + (CUdeviceptr)off * sizeof(double);
        void *a1[] = {&G->mpart, &G->buf[n->src[0]->id], &G->buf[id], &rows, &e, &k};
        void *a2[] = {&acc, &G->mpart, &grid, &rows, &e};
        return CU(G, cuLaunchKernel(G->k_mstats, (unsigned)grid, 1, 1, BLOCK, 1, 1, 0, G->stream, a1, NULL),
                  "moec_moe_stats") &&
               CU(G, cuLaunchKernel(G->k_mstats_add, 1, 1, 1, BLOCK, 1, 1, 0, G->stream, a2, NULL),
                  "moec_moe_stats_add");
    }
    return 1;
}

static int run_launches(Gpu *G, int from, int to);

/* A training pass's launches [from, to) with its metrics taken after each watched node (metrics_points);
 * under --profile each is timed with its node. */
static int run_pass_launches(Gpu *G, int from, int to)
{
    for (int i = 0; i < G->mnodes; i++) {
        int cut = G->mcut[i], ev;
        if (cut <= from || cut > to)
            continue;
        if (!run_launches(G, from, cut) || !prof_begin(G, &ev) || !enqueue_metrics(G, G->mnode[i]) ||
            !prof_end(G, ev, G->mnode[i]))
            return 0;
        from = cut;
    }
    return run_launches(G, from, to);
}

static int run_launches(Gpu *G, int from, int to)
{
    int bucketed = 0, ev;
    for (int i = from; i < to; i++) {
        Launch *L = &G->launches[i];
        if (!prof_begin(G, &ev))
            return 0;
        if (!L->f && L->bucket >= 0) {
            /* its source is alive here, not necessarily after the backward */
            size_t nb = (size_t)ir_numel(L->node) * sizeof(float);
            if (!CU(G, cuMemcpyDtoDAsync(G->buckets[L->bucket].buf + L->bucket_off, G->buf[L->node->src[0]->id], nb,
                                         G->stream), L->what))
                return 0;
            bucketed = 1;
        } else if (!L->f) {
            if (!run_collective(G, L))
                return 0;
        } else if (!cu_ok(G, cudrv_launch(L->f, L->grid, L->block, L->shared, G->stream, L->argp, L->cluster),
                          "cuLaunchKernel", L->what)) {
            return 0;
        }
        if (!prof_end(G, ev, L->node->id))
            return 0;
    }
    if (!bucketed)
        return 1;
    return prof_begin(G, &ev) && flush_buckets(G) && prof_end(G, ev, PROF_BUCKETS);
}

static int enqueue_optimizer(Gpu *G, int fused_norm);

/* forward + backward + norm + clip + AdamW, reading the staging s */
static int enqueue_step(Gpu *G, Staging *s)
{
    char *pin = s->pinned;
    const IrNode *tok = G->tok, *tgt = G->tgt;
    int ev;
    if (!prof_begin(G, &ev) ||
        !CU(G, cuMemcpyHtoDAsync(G->buf[tok->id], pin, G->tok_bytes, G->stream), "the batch") ||
        !CU(G, cuMemcpyHtoDAsync(G->buf[tgt->id], pin + G->tok_bytes, G->tok_bytes, G->stream), "the batch") ||
        !CU(G, cuMemcpyHtoDAsync(G->scalars, pin + 2 * G->tok_bytes, 3 * sizeof(double), G->stream), "the step") ||
        !prof_end(G, ev, PROF_BATCH))
        return 0;
    return run_pass_launches(G, 0, G->nlaunches) && enqueue_optimizer(G, 1);
}

/* the global gradient norm, clipping and AdamW on the gradients' buffers, with the step's scalars. fused_norm:
 * the gradients are those the step's launches stored (not --grad-accum's sums), so a gradient whose GEMM wrote its
 * squares (decision 73, norm_count) is not read again here */
static int enqueue_optimizer(Gpu *G, int fused_norm)
{
    const IrGraph *g = G->g;
    int ev;
    if (!prof_begin(G, &ev))
        return 0;
    /* the global gradient norm: sums of squares per block, then per kind */
    for (int p = 0; p < g->nparams; p++) {
        if (fused_norm && G->norm_count[p])
            continue;
        CUdeviceptr part = G->partials + (CUdeviceptr)G->part_off[p] * sizeof(double);
        CUdeviceptr gr = G->buf[g->grads[p]->id];
        long long n = G->numel[p];
        void *args[] = {&part, &gr, &n};
        /* (over a GEMM's slot, as many blocks as the GEMM's partials: every one of them is written again) */
        unsigned grid = G->norm_count[p] ? (unsigned)G->norm_count[p] : G->sumsq_grid[p];
        if (!CU(G, cuLaunchKernel(G->k_sumsq, grid, 1, 1, BLOCK, 1, 1, 0, G->stream, args, NULL), "moec_grad_sumsq"))
            return 0;
    }
    for (int kind = 0; kind < 2; kind++) {
        CUdeviceptr out = G->scalars + (CUdeviceptr)(5 + kind) * sizeof(double);
        CUdeviceptr part = G->partials + (CUdeviceptr)(kind ? G->ndense_parts : 0) * sizeof(double);
        long long n = kind ? G->nshard_parts : G->ndense_parts;
        void *args[] = {&out, &part, &n};
        if (!CU(G, cuLaunchKernel(G->k_sum, 1, 1, 1, BLOCK, 1, 1, 0, G->stream, args, NULL), "moec_sum_partials"))
            return 0;
    }
    /* expert shards: their squares add over the expert-parallel group */
    if (G->any_shard && G->comm && G->comm->ep > 1 && G->coll != COLL_HOST) {
        if (!device_allreduce(G, COMM_EP, G->scalars + 6 * sizeof(double), 1, 1, "the gradient norm's all-reduce"))
            return 0;
    } else if (G->any_shard && G->comm && G->comm->ep > 1) {
        CUdeviceptr ss = G->scalars + 6 * sizeof(double);
        if (!sync_stream(G, "the gradient norm"))
            return 0;
        if (G->device_comm) {
            if (!G->comm->ops->allreduce_f64(G->comm, COMM_EP, (double *)(uintptr_t)ss, 1))
                return fail(G, "the gradient norm's all-reduce failed: %s", G->comm->error);
        } else {
            double v;
            if (!d2h(G, &v, ss, sizeof v, NULL))
                return 0;
            if (!G->comm->ops->allreduce_f64(G->comm, COMM_EP, &v, 1))
                return fail(G, "the gradient norm's all-reduce failed: %s", G->comm->error);
            if (!h2d(G, ss, &v, sizeof v, NULL))
                return 0;
        }
    }
    {
        double clip = g->train.grad_clip;
        void *args[] = {&G->scalars, &clip};
        if (!CU(G, cuLaunchKernel(G->k_clip, 1, 1, 1, 32, 1, 1, 0, G->stream, args, NULL), "moec_clip"))
            return 0;
    }
    int64_t nparams_total = 0;
    for (int p = 0; p < g->nparams; p++)
        nparams_total += G->numel[p];
    int64_t off = 0;
    for (int p = 0; p < g->nparams; p++) {
        CUdeviceptr w = G->buf[g->params[p]->id], gr = G->buf[g->grads[p]->id];
        CUdeviceptr m = G->adam + (CUdeviceptr)off * 4, v = G->adam + (CUdeviceptr)(nparams_total + off) * 4;
        long long n = G->numel[p];
        double wd = G->wd[p];
        CUdeviceptr w16 = G->copy[p];
        if (w16 && G->fp8_step && G->fp8_step[p]) {
            /* an 8-bit expert weight (fp8-block or MXFP8): AdamW and its e4m3 copy in one pass, a block per 128x128 tile */
            void *a8[] = {&w, &m, &v, &gr, &n, &G->scalars, &wd, &w16};
            if (!CU(G, cuLaunchKernel(G->fp8_step[p], G->fp8_grid[p], 1, 1, 512, 1, 1, 0, G->stream, a8, NULL),
                    "moec_adamw_fp8b"))
                return 0;
            off += G->numel[p];
            continue;
        }
        void *args[] = {&w, &m, &v, &gr, &n, &G->scalars, &wd, &w16, &G->copy_glu[p], &G->copy_cols[p]};
        /* a param with a bf16 working copy gets it written in the same pass */
        if (!CU(G, cuLaunchKernel(w16 ? G->k_adamw16 : G->k_adamw, grid_for(n, ADAMW_MAX_GRID), 1, 1, BLOCK, 1, 1, 0,
                                  G->stream, args, NULL), w16 ? "moec_adamw_bf16" : "moec_adamw"))
            return 0;
        off += G->numel[p];
    }
    return prof_end(G, ev, PROF_OPT);
}

static Staging *stage_batch(Gpu *G, const int32_t *tokens, const int32_t *targets, const double *sc3)
{
    Staging *s = &G->stage[G->parity];
    G->parity ^= 1;
    /* the step that last read this staging must have consumed it */
    if (s->used && !wait_event(G, s->done, "waiting for a step"))
        return NULL;
    char *pin = s->pinned;
    memcpy(pin, tokens, G->tok_bytes);
    memcpy(pin + G->tok_bytes, targets, G->tok_bytes);
    memcpy(pin + 2 * G->tok_bytes, sc3, 3 * sizeof(double));
    return s;
}

static int finish_step(Gpu *G, Staging *s);

int gpu_step(Gpu *G, const int32_t *tokens, const int32_t *targets, double lr, double bc1, double bc2)
{
    if (G->forward_only)
        return fail(G, "internal: a training step on a forward-only backend");
    if (!cur(G))
        return 0;
    if (G->pending >= G->ring)
        return fail(G, "internal: %d steps without reading their losses", G->pending);
    double sc[3] = {lr, bc1, bc2};
    Staging *s = stage_batch(G, tokens, targets, sc);
    if (!s)
        return 0;
    /* a step with collectives is one graph too when they run on the device */
    int graph = G->use_graphs && (!G->has_collectives || G->coll != COLL_HOST), captured = 0;
    G->in_step = 1;
    G->step_syncs = G->step_d2h = 0;
    if (graph && !s->graph) {
        CUgraph gr;
        if (!CU(G, cuStreamBeginCapture(G->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "capturing the step"))
            return 0;
        int ok = enqueue_step(G, s);
        CUresult r = cu.cuStreamEndCapture(G->stream, &gr);
        if (!ok)
            return G->in_step = 0;
        if (!cu_ok(G, r, "cuStreamEndCapture", "capturing the step") ||
            !CU(G, cuGraphInstantiate(&s->graph, gr, 0), "instantiating the step's graph"))
            return G->in_step = 0;
        cu.cuGraphDestroy(gr);
        G->info.graph = 1;
        captured = 1;
    }
    if (graph) {
        if (!CU(G, cuGraphLaunch(s->graph, G->stream), "launching the step's graph"))
            return G->in_step = 0;
    } else if (!enqueue_step(G, s)) {
        return G->in_step = 0;
    }
    G->mpasses++;  /* the step's metrics are summed on the device (a replayed graph does it too) */
    int ok = finish_step(G, s);
    G->in_step = 0;
    G->nsteps++;
    if (ok && G->sync_check)
        /* tests/gpu/train_check.sh reads these lines (the sync rows) */
        fprintf(stderr, "sync check: rank %d step %lld: %lld stream waits, %lld device-to-host copies in the step; %s\n",
                G->comm ? G->comm->rank : 0, G->nsteps, G->step_syncs, G->step_d2h,
                !graph ? "launched kernel by kernel" : captured ? "captured as one CUDA graph and launched"
                                                              : "one CUDA graph replayed");
    return ok;
}

/* After a step's launches: its staging released when they are done, its loss and norm into the ring. */
static int finish_step(Gpu *G, Staging *s)
{
    if (!CU(G, cuEventRecord(s->done, G->stream), NULL))
        return 0;
    s->used = 1;
    /* the loss and the norm into the ring */
    int slot = (G->slot + G->pending) % G->ring;
    if (!CU(G, cuMemcpyDtoDAsync(G->ring_loss + (CUdeviceptr)slot * 4, G->buf[G->g->loss->id], 4, G->stream), NULL) ||
        !CU(G, cuMemcpyDtoDAsync(G->ring_norm + (CUdeviceptr)slot * 8, G->scalars + 4 * sizeof(double), 8, G->stream),
            NULL))
        return 0;
    G->pending++;
    return 1;
}

/* --grad-accum: each micro-batch's forward and backward with the backward's seed (the fill node LOSS.seed,
 * 1 in a step) set to its weight after the seed's launch, so that the gradients, after the plan's collectives
 * (bucketed all-reduce, expert exchanges), are those of weight * loss; each added into G->accum (moec_accum,
 * double), the sum written back to the gradients' buffers (moec_accum_out), then the optimizer as a step's;
 * the loss, sum_k weight[k] * loss_k, and the norm into the ring. Synchronous (one micro-batch at a time from
 * the host's memory; no CUDA graph). The CPU backend's cpu_accum_step, launch for node. */
int gpu_accum_step(Gpu *G, const int32_t *tokens, const int32_t *targets, int micro, const double *weight, double lr,
                   double bc1, double bc2)
{
    const IrGraph *g = G->g;
    if (G->forward_only)
        return fail(G, "internal: a training step on a forward-only backend");
    int seed = cpu_loss_seed(g);
    if (seed < 0 || !G->buf[seed])
        return fail(G, "--grad-accum: the graph has no loss seed to weight (a fill node %s.seed)", g->loss->name);
    int cut = 0;  /* launches [0, cut) compute the nodes up to the seed (node order) */
    while (cut < G->nlaunches && G->launches[cut].node->id <= seed)
        cut++;
    if (!cur(G) || !sync_stream(G, NULL))
        return 0;
    if (G->pending >= G->ring)
        return fail(G, "internal: %d steps without reading their losses", G->pending);
    int64_t nparams_total = 0;
    for (int p = 0; p < g->nparams; p++)
        nparams_total += G->numel[p];
    if (!G->accum) {
        size_t bytes = align256((size_t)(nparams_total + 1) * sizeof(double));
        if (!CU(G, cuMemAlloc(&G->accum, bytes), "allocating the accumulated gradients (--grad-accum)"))
            return 0;
        G->info.planned_other += bytes;
        G->info.planned_bytes += bytes;
    }
    size_t words = G->tok_bytes / sizeof(int32_t);
    double loss = 0;
    for (int k = 0; k < micro; k++) {
        float lk, wf = (float)weight[k];
        if (!h2d(G, G->buf[G->tok->id], tokens + (size_t)k * words, G->tok_bytes, "the batch") ||
            !h2d(G, G->buf[G->tgt->id], targets + (size_t)k * words, G->tok_bytes, "the batch") ||
            !(++G->mpasses, run_pass_launches(G, 0, cut)) || !h2d(G, G->buf[seed], &wf, sizeof wf, "the loss seed") ||
            !run_pass_launches(G, cut, G->nlaunches) || !d2h(G, &lk, G->buf[g->loss->id], sizeof lk, "the loss"))
            return 0;
        loss += weight[k] * (double)lk;
        int64_t off = 0;
        for (int p = 0; p < g->nparams; p++) {
            CUdeviceptr acc = G->accum + (CUdeviceptr)off * sizeof(double), gr = G->buf[g->grads[p]->id];
            long long n = G->numel[p];
            double w = 1.0;  /* the weight is in the gradient already (the seed) */
            int first = k == 0;
            void *args[] = {&acc, &gr, &n, &w, &first};
            if (!CU(G, cuLaunchKernel(G->k_accum, grid_for(n, ADAMW_MAX_GRID), 1, 1, BLOCK, 1, 1, 0, G->stream, args,
                                      NULL), "moec_accum"))
                return 0;
            off += G->numel[p];
        }
    }
    int64_t off = 0;
    for (int p = 0; p < g->nparams; p++) {
        CUdeviceptr acc = G->accum + (CUdeviceptr)off * sizeof(double), gr = G->buf[g->grads[p]->id];
        long long n = G->numel[p];
        void *args[] = {&gr, &acc, &n};
        if (!CU(G, cuLaunchKernel(G->k_accum_out, grid_for(n, ADAMW_MAX_GRID), 1, 1, BLOCK, 1, 1, 0, G->stream, args,
                                  NULL), "moec_accum_out"))
            return 0;
        off += G->numel[p];
    }
    double sc[3] = {lr, bc1, bc2};
    float lf = (float)loss;
    int slot = (G->slot + G->pending) % G->ring;
    if (!h2d(G, G->scalars, sc, sizeof sc, "the step") || !enqueue_optimizer(G, 0) ||
        !h2d(G, G->ring_loss + (CUdeviceptr)slot * 4, &lf, sizeof lf, "the loss") ||
        !CU(G, cuMemcpyDtoDAsync(G->ring_norm + (CUdeviceptr)slot * 8, G->scalars + 4 * sizeof(double), 8, G->stream),
            NULL) ||
        !sync_stream(G, "a step"))
        return 0;
    G->pending++;
    return 1;
}

int gpu_profile_step(Gpu *G, const int32_t *tokens, const int32_t *targets, double lr, double bc1, double bc2,
                     GpuProfile *prof)
{
    if (G->forward_only)
        return fail(G, "internal: a training step on a forward-only backend");
    if (!cur(G))
        return 0;
    if (G->pending >= G->ring)
        return fail(G, "internal: %d steps without reading their losses", G->pending);
    if (!G->pev) {
        /* two events per span: each launch, each watched node's metrics (metrics_points: the loss, the LM loss
         * and each MoE layer's routing; four MoE layers overflowed a count that left them out), the batch, the
         * optimizer, the buckets, the step */
        G->npev = 2 * (G->nlaunches + (int)(sizeof G->mnode / sizeof G->mnode[0]) + PROF_SPANS_EXTRA);
        G->pev = calloc((size_t)G->npev, sizeof *G->pev);
        G->spans = calloc((size_t)G->npev / 2, sizeof *G->spans);
        if (!G->pev || !G->spans)
            die("out of memory");
        for (int e = 0; e < G->npev; e++)
            if (!CU(G, cuEventCreate(&G->pev[e], CU_EVENT_DEFAULT), "profiling"))
                return 0;
    }
    double sc[3] = {lr, bc1, bc2};
    Staging *s = stage_batch(G, tokens, targets, sc);
    if (!s)
        return 0;
    G->prof = prof;
    G->pev_used = 0;
    G->nspans = 0;
    int ev;
    int ok = prof_begin(G, &ev) && enqueue_step(G, s) && prof_end(G, ev, PROF_STEP);
    G->mpasses += ok;
    G->prof = NULL;
    if (!ok || !finish_step(G, s) || !sync_stream(G, "a profiled step"))
        return 0;
    for (int i = 0; i < G->nspans; i++) {
        const ProfSpan *sp = &G->spans[i];
        float ms = 0;
        if (!CU(G, cuEventElapsedTime(&ms, G->pev[sp->ev0], G->pev[sp->ev1]), "profiling"))
            return 0;
        double sec = 1e-3 * ms;
        switch (sp->slot) {
        case PROF_BATCH:
            prof->batch_seconds += sec;
            prof->batch_copies += 3;
            break;
        case PROF_OPT:
            prof->opt_seconds += sec;
            prof->opt_launches += 2 * (int64_t)G->g->nparams + 3;
            for (int p = 0; p < G->g->nparams; p++)
                prof->opt_launches -= G->norm_count[p] != 0; /* no moec_grad_sumsq (decision 73) */
            break;
        case PROF_BUCKETS:
            prof->bucket_seconds += sec;
            prof->bucket_calls += G->nbuckets;
            break;
        case PROF_STEP:
            prof->step_seconds += sec;
            break;
        default:
            prof->node_seconds[sp->slot] += sec;
            prof->node_launches[sp->slot]++;
        }
    }
    return 1;
}

int gpu_read_steps(Gpu *G, double *losses, double *norms, int *n)
{
    *n = 0;
    if (!cur(G) || !sync_stream(G, "a training step"))
        return 0;
    if (!d2h(G, G->ring_loss_h, G->ring_loss, (size_t)G->ring * 4, NULL) ||
        !d2h(G, G->ring_norm_h, G->ring_norm, (size_t)G->ring * 8, NULL))
        return 0;
    for (int i = 0; i < G->pending; i++) {
        int slot = (G->slot + i) % G->ring;
        losses[i] = G->ring_loss_h[slot];
        norms[i] = G->ring_norm_h[slot];
    }
    *n = G->pending;
    G->slot = (G->slot + G->pending) % G->ring;
    G->pending = 0;
    return 1;
}

/* The launches [0, cut) compute the nodes up to `node`: the launch list is in node order (codegen emits
 * each node's launches in turn), so none of a later node runs before them and no memory of `node` or of
 * what it reads is reused yet when they are done. */
static int launches_upto(const Gpu *G, int node)
{
    int cut = 0;
    while (cut < G->eval_launches && G->launches[cut].node->id <= node)
        cut++;
    return cut;
}

/* The batch into the inputs' buffers, synchronously. */
static int put_batch(Gpu *G, const int32_t *tokens, const int32_t *targets)
{
    return cur(G) && sync_stream(G, NULL) &&
           h2d(G, G->buf[G->tok->id], tokens, G->tok_bytes, "the batch") &&
           h2d(G, G->buf[G->tgt->id], targets, G->tok_bytes, "the batch");
}

/* Whether node id's value can be read: a float (or, with i32, an index) buffer in fp32 that a launch writes. */
static int readable(const Gpu *G, int id, PlanStorage want)
{
    const PlanBuf *b = &G->plan->bufs[id];
    return G->buf[id] && !b->elided && b->storage == want;
}

/* The router logits of watched topk_experts node id (its source 0) are readable and still alive right after
 * the node: its launches read them (a source they do not read, PlanBuf.unread_srcs, may be dead by then, its
 * bytes another buffer's), and the launch-level planner then keeps them to the node's last launch
 * (plan_memory_launches, docs/decisions.md 65: a source otherwise dies at the last launch naming it) */
static int logits_live(const Gpu *G, int id)
{
    return readable(G, G->g->nodes[id]->src[0]->id, PLAN_F32) && !(G->plan->bufs[id].unread_srcs & 1);
}

/* Watched node id has just been computed: its metrics added to m (cpu_metrics_layer: the CPU's arithmetic). */
static int observe(Gpu *G, int id, BackendMetrics *m)
{
    const IrNode *n = G->g->nodes[id];
    if (id == G->watch.lm) {
        float v;
        if (!readable(G, id, PLAN_F32))
            return 1;
        if (!d2h(G, &v, G->buf[id], sizeof v, "the language-model loss"))
            return 0;
        m->has_lm = 1;
        m->lm_loss += v;
        return 1;
    }
    for (int l = 0; l < G->watch.nlayers; l++) {
        if (G->watch.layer[l] != id)
            continue;
        const IrNode *lg = n->src[0];
        if (!readable(G, id, PLAN_I32) || !logits_live(G, id))
            return 1;  /* not on the device as a tensor of its own: the layer is left out */
        float *logits = malloc(sizeof(float) * (size_t)ir_numel(lg) + 4);
        int32_t *ex = malloc(sizeof(int32_t) * (size_t)ir_numel(n) + 4);
        if (!logits || !ex)
            die("out of memory");
        int ok = d2h(G, logits, G->buf[lg->id], sizeof(float) * (size_t)ir_numel(lg), "the router's logits") &&
                 d2h(G, ex, G->buf[id], sizeof(int32_t) * (size_t)ir_numel(n), "the chosen experts");
        if (ok)
            cpu_metrics_layer(n, l, logits, ex, m);
        free(logits);
        free(ex);
        return ok;
    }
    return 1;
}

int gpu_eval(Gpu *G, const int32_t *tokens, const int32_t *targets, double *loss, BackendMetrics *m)
{
    const IrGraph *g = G->g;
    if (!put_batch(G, tokens, targets))
        return 0;
    /* the pass in pieces, each ending with a watched node, whose values are read before the next piece */
    int from = 0, prev = -1;
    for (;;) {
        int next = g->nnodes;
        if (m && G->watch.lm > prev)
            next = G->watch.lm;
        for (int l = 0; m && l < G->watch.nlayers; l++)
            if (G->watch.layer[l] > prev && G->watch.layer[l] < next)
                next = G->watch.layer[l];
        if (next == g->nnodes)
            break;
        int cut = launches_upto(G, next);
        if (!run_launches(G, from, cut) || !sync_stream(G, "the forward pass") ||
            !observe(G, next, m))
            return 0;
        from = cut;
        prev = next;
    }
    float l;
    if (!run_launches(G, from, G->eval_launches) || !sync_stream(G, "the forward pass") ||
        !d2h(G, &l, G->buf[g->loss->id], 4, "the loss"))
        return 0;
    *loss = l;
    return 1;
}

int gpu_read_step_metrics(Gpu *G, BackendMetrics *m)
{
    const IrGraph *g = G->g;
    memset(m, 0, sizeof *m);
    if (G->forward_only || !G->mpasses)
        return 1;
    size_t macc;
    metrics_bytes(g, &macc);
    double *acc = malloc(macc);
    if (!acc)
        return fail(G, "out of memory");
    int ok = cur(G) && sync_stream(G, "the steps") &&
             d2h(G, acc, G->mstat, macc, "the steps' metrics") &&
             CU(G, cuMemsetD8Async(G->mstat, 0, macc, G->stream), NULL);
    if (ok) {
        m->passes = G->mpasses;
        m->loss = acc[0];
        m->lm_loss = acc[1];
        for (int i = 0; i < G->mnodes; i++)
            m->has_lm |= G->mnode[i] == G->watch.lm;
        int64_t off = 2;
        for (int l = 0; l < G->watch.nlayers; l++) {
            const IrNode *n = g->nodes[G->watch.layer[l]];
            int e = (int)n->src[0]->shape[n->src[0]->rank - 1];
            int measured = 0;
            for (int i = 0; i < G->mnodes; i++)
                measured |= G->mnode[i] == n->id;
            if (measured) {
                BackendMoeLayer *L = &m->layer[l];
                L->node = n->id;
                L->experts = e;
                L->k = (int)n->shape[n->rank - 1];
                L->rows = acc[off];
                for (int j = 0; j < e; j++)
                    L->load[j] = acc[off + 1 + j];
                L->entropy = acc[off + 1 + e];
                L->aux = acc[off + 2 + e];
                m->nlayers = l + 1;
            }
            off += e + 3;
        }
        G->mpasses = 0;
    }
    free(acc);
    return ok;
}

int gpu_forward_probe(Gpu *G, const int32_t *tokens, const int32_t *targets, int node, float *out)
{
    const IrGraph *g = G->g;
    if (node < 0 || node > g->loss->id)
        return fail(G, "internal: node %d is not computed by the forward pass", node);
    const IrNode *n = g->nodes[node];
    int bf16 = readable(G, node, PLAN_BF16);
    if (n->dtype == IR_I32 || (!readable(G, node, PLAN_F32) && !bf16))
        return fail(G, "node %s cannot be read on the GPU (%s)", n->name,
                    n->dtype == IR_I32 ? "not a float tensor"
                    : G->plan->bufs[node].elided ? "no kernel writes it: a fast kernel reads through it"
                                                 : "not stored in fp32 or bf16");
    if (!put_batch(G, tokens, targets) || !run_launches(G, 0, launches_upto(G, node)) ||
        !sync_stream(G, "the forward pass"))
        return 0;
    int64_t numel = ir_numel(n);
    if (!bf16)
        return d2h(G, out, G->buf[node], sizeof(float) * (size_t)numel, n->name);
    /* stored in bf16 (docs/decisions.md 40): the raw halves into the first half of out, widened from the end
     * down so that no element is overwritten before it is read */
    uint16_t *raw = (uint16_t *)out;
    if (!d2h(G, raw, G->buf[node], 2 * (size_t)numel, n->name))
        return 0;
    for (int64_t e = numel - 1; e >= 0; e--) {
        uint32_t u = (uint32_t)raw[e] << 16;
        memcpy(&out[e], &u, 4);
    }
    return 1;
}

void gpu_measure(Gpu *G)
{
    size_t fr = 0, total = 0;
    if (cur(G) && cu.cuMemGetInfo(&fr, &total) == CUDA_SUCCESS && fr <= G->free_before)
        G->info.measured_bytes = G->free_before - fr;
}

/* ------------------------------------------------------------ host data over NCCL */

/* NCCL reduces device memory: stage host values through a device buffer. */
static int host_scratch(Gpu *G, size_t bytes, CUdeviceptr *d)
{
    return cur(G) && sync_stream(G, NULL) && CU(G, cuMemAlloc(d, bytes ? bytes : 8), NULL);
}

int gpu_host_allreduce_f64(Gpu *G, Comm *c, int group, double *v, int64_t n)
{
    CUdeviceptr d;
    size_t bytes = (size_t)n * sizeof(double);
    if (!host_scratch(G, bytes, &d))
        return comm_fail(c, "%s", G->err);
    int ok = h2d(G, d, v, bytes, NULL) &&
             c->ops->allreduce_f64(c, (CommGroup)group, (double *)(uintptr_t)d, n) &&
             d2h(G, v, d, bytes, NULL);
    cu.cuMemFree(d);
    return ok;
}

int gpu_host_allgather(Gpu *G, Comm *c, int group, const void *in, void *out, size_t bytes)
{
    CUdeviceptr d;
    int size = comm_group_size(c, (CommGroup)group), rank = comm_group_rank(c, (CommGroup)group);
    if (!host_scratch(G, bytes * (size_t)size, &d))
        return comm_fail(c, "%s", G->err);
    CUdeviceptr mine = d + (CUdeviceptr)(bytes * (size_t)rank);
    int ok = h2d(G, mine, in, bytes, NULL) &&
             c->ops->allgather(c, (CommGroup)group, (const void *)(uintptr_t)mine, (void *)(uintptr_t)d, bytes) &&
             d2h(G, out, d, bytes * (size_t)size, NULL);
    cu.cuMemFree(d);
    return ok;
}
