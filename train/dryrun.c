/* dryrun.c - --dry-run: the GPU memory plan of a training run, printed
 * without a GPU (no driver is loaded, no data read), and whether it fits.
 *
 * The figures are the CUDA backend's own (backend_cuda_plan_memory: the
 * four allocations gpu_create makes, and the reserve its fit check adds),
 * so a plan that fits here is one the backend does not refuse on a GPU with
 * that much free memory. The breakdown of the activations region comes from
 * the plan's tensor table (plan_memory_breakdown): what is live at its
 * fullest moment (a launch: the GPU's lifetimes are in launch positions). When the plan does not fit, the model is planned again
 * (driver_replan) for smaller batches, then shorter sequences, to name the
 * largest that fits; and the parameter state per layer says what fewer
 * layers or expert parallelism would save. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../driver/build.h"
#include "../util/util.h"
#include "trainer.h"

static const double GIB = 1024.0 * 1024.0 * 1024.0;

/* What one GPU holds: each rank's allocations (all ranks' when they share it) and the reserve. */
static double gpu_need(const Plan *pl, int world, int shared, int ring, BackendMemoryPlan *m)
{
    backend_cuda_plan_memory(pl, world, ring, m);
    return (double)m->total * (shared ? world : 1) + (double)m->reserve;
}

/* The same for the model planned again: another global batch, seq or kernels (fast: 1). < 0 when it does
 * not plan (the compiler's message on stderr) or has no GPU part. */
static double need_at(const Plan *pl, int64_t batch, int64_t seq, int fast, int world, int shared, int ring)
{
    Plan src = *pl;  /* driver_replan reads the source and shapes only */
    if (fast)
        src.source.kernels = PLAN_KERNELS_FAST;
    char err[1024];
    Plan *q = driver_replan(&src, batch, seq, world, err, sizeof err);
    double need = -1;
    if (q && !q->gpu_unsupported && q->bufs) {
        BackendMemoryPlan m;
        need = gpu_need(q, world, shared, ring, &m);
    }
    plan_free(q);
    return need;
}

static void row(const char *what, double bytes, const char *note)
{
    char b[32];
    fmt_bytes(b, sizeof b, bytes);
    printf("  %-34s %12s%s%s\n", what, b, note && *note ? "   " : "", note ? note : "");
}

/* The parameter state (fp32 master, bf16 copy, AdamW moments, gradient) of each layer: the largest over the
 * layers, their number, and the state of everything. */
static void state_per_layer(const Plan *pl, double *per_layer, int *nlayers, double *all)
{
    const IrGraph *g = pl->graph;
    const char **names = calloc((size_t)g->nparams + 1, sizeof *names);
    double *bytes = calloc((size_t)g->nparams + 1, sizeof *bytes);
    if (!names || !bytes)
        die("out of memory");
    int n = 0;
    *all = 0;
    for (int i = 0; i < pl->nparams; i++) {
        const IrNode *p = g->nodes[pl->params[i].node];
        double b = (double)pl->bufs[p->id].bytes + 8.0 * (double)pl->params[i].numel;
        int gb = pl->params[i].grad;
        if (gb >= 0 && gb < pl->nbufs)
            b += (double)pl->bufs[gb].bytes;
        for (int k = g->nnodes; k < pl->nbufs; k++)
            if (pl->bufs[k].kind == PLAN_BUF_COPY && pl->bufs[k].node == p->id)
                b += (double)pl->bufs[k].bytes;
        *all += b;
        if (!p->layer)
            continue;
        int j = 0;
        while (j < n && strcmp(names[j], p->layer))
            j++;
        if (j == n)
            names[n++] = p->layer;
        bytes[j] += b;
    }
    *per_layer = 0;
    for (int j = 0; j < n; j++)
        if (bytes[j] > *per_layer)
            *per_layer = bytes[j];
    *nlayers = n;
    free(names);
    free(bytes);
}

int trainer_dry_run(const char *prog, const Plan *pl, const Flags *f, int world, int shared)
{
    const IrGraph *g = pl->graph;
    if (pl->gpu_unsupported || !pl->bufs) {
        fprintf(stderr, "%s: error: --dry-run: the model cannot run on the GPU: %s\n", prog,
                pl->gpu_unsupported ? pl->gpu_unsupported : "its plan has no GPU kernels");
        return 1;
    }
    const TrainerPeaks *pk = trainer_peaks_for(TRAINER_DRY_RUN_GPU);
    double cap = (f->gpu_mem_gib > 0 ? f->gpu_mem_gib : pk->usable_gib) * GIB;
    char capw[96];
    if (f->gpu_mem_gib > 0)
        snprintf(capw, sizeof capw, "--gpu-mem");
    else
        snprintf(capw, sizeof capw, "an %s's usable memory; --gpu-mem GIB for another GPU", pk->gpu);
    int ring = (int)(f->log_every < 1024 ? f->log_every : 1024);
    BackendMemoryPlan m;
    double need = gpu_need(pl, world, shared, ring, &m);
    PlanMemoryBreakdown b;
    plan_memory_breakdown(pl, &b);
    char a[32], c[32], note[256];

    printf("dry run: %s, batch %lld x seq %lld", g->model, (long long)pl->batch, (long long)pl->seq);
    if (world > 1)
        printf(" over %d ranks (%lld sequences each)%s", world, (long long)pl->local_batch,
               shared ? ", all on one GPU (--simulate-ranks)" : ", one GPU each");
    printf(", precision %s, %s kernels; no GPU used\n", ir_precision_name[g->train.precision],
           plan_kernels_name[pl->source.kernels]);
    /* the kernels' code does not depend on the batch (decision 62): at another --batch the embedded image is
     * the one the GPU loads, unless the code differs (another seq, another world size) */
    if (pl->image && pl->image_size && pl->cuda_source)
        printf("kernels: %s\n", plan_code_hash(pl->cuda_source, pl->cuda_source_len) == pl->image_hash
                                    ? "the embedded image serves this plan (the same code: no NVRTC at start)"
                                    : "the embedded image is for other code (another seq or number of ranks): NVRTC "
                                      "compiles the kernels at start, then caches them");
    else if (pl->cuda_source)
        printf("kernels: none embedded: NVRTC compiles them at start, then caches them\n");
    printf("GPU memory plan%s, as the CUDA backend allocates it:\n", world > 1 ? " of one rank" : "");
    fmt_bytes(a, sizeof a, (double)b.masters);
    fmt_bytes(c, sizeof c, (double)b.copies);
    int e4m3_copies = 0; /* fp8-block expert weights' E4M3 tiles (docs/decisions.md 44) */
    for (int k = 0; k < pl->nbufs; k++)
        e4m3_copies += pl->bufs[k].kind == PLAN_BUF_COPY && pl->bufs[k].storage == PLAN_E4M3;
    snprintf(note, sizeof note, "fp32 masters %s + %s working copies %s", a, e4m3_copies ? "bf16 and E4M3" : "bf16", c);
    row("parameters", (double)m.params, note);
    row("AdamW state", (double)m.opt, "two fp32 moments per parameter");
    const char *at = b.peak_at >= 0 ? g->nodes[b.peak_at]->name : "-";
    /* the GPU's lifetimes are in launches (decision 65): the peak is at a launch, of the node named */
    if (b.peak_launch >= 0)
        snprintf(note, sizeof note, "at its fullest, launch %d of %d (%s):", b.peak_launch, pl->nlaunches, at);
    else
        snprintf(note, sizeof note, "at its fullest, node %d of %d (%s):", b.peak_at, g->nnodes, at);
    row("activations region", (double)m.acts, note);
    fmt_bytes(a, sizeof a, (double)b.grads);
    snprintf(note, sizeof note, "the parameters' gradients made by then (all: %s, kept to the end)", a);
    row("  gradients", (double)b.peak_grads, note);
    row("  activations", (double)b.peak_acts, "the nodes' tensors: activations and intermediate gradients");
    row("  workspaces", (double)b.peak_ws, "the kernels' scratch");
    row("  layout slack", (double)m.acts - (double)b.peak_live,
        "alignment, lifetimes that do not nest, whole 2 MiB pages");
    row("batch and optimizer scratch", (double)m.other,
        world > 1 ? "the batch, the gradient all-reduce's buckets, the norm's partials, the loss ring"
                  : "the batch, the gradient norm's partials, the loss ring");
    if (m.exchange)
        row("  exchange staging", (double)m.exchange,
            "of the above: the expert exchanges' send and receive slots, ep x T*k rows each (decision 46)");
    row("total", (double)m.total, "");
    if (shared && world > 1) {
        snprintf(note, sizeof note, "%d ranks x the total", world);
        row("all ranks", (double)m.total * world, note);
    }
    row("reserve", (double)m.reserve, "the kernels' module, the context, NCCL's buffers");
    fmt_bytes(a, sizeof a, need);
    fmt_bytes(c, sizeof c, cap);
    int fits = need <= cap;
    printf("peak: %s of %s (%s): %s\n", a, c, capw, fits ? "fits" : "does not fit");
    if (fits)
        return 0;

    /* what to reduce: the largest batch that fits, else the longest seq at one sequence per rank */
    printf("to fit, reduce:\n");
    int64_t lb = pl->local_batch, seq = pl->seq;
    int said = 0;  /* a batch or seq that fits was named */
    if (lb > 1) {
        int64_t lo = 0, hi = lb;  /* lo fits (0: none known), hi does not */
        double lo_need = 0;
        while (hi - lo > 1) {
            int64_t mid = lo + (hi - lo) / 2;
            double nd = need_at(pl, mid * world, seq, 0, world, shared, ring);
            if (nd >= 0 && nd <= cap) {
                lo = mid;
                lo_need = nd;
            } else {
                hi = mid;
            }
        }
        if (lo > 0) {
            fmt_bytes(a, sizeof a, lo_need);
            printf("  the batch: --batch %lld fits (%s)\n", (long long)(lo * world), a);
            said = 1;
        }
    }
    if (!said && seq > 1) {
        for (int64_t s = seq / 2; s >= 1; s /= 2) {
            double nd = need_at(pl, world, s, 0, world, shared, ring);
            if (nd >= 0 && nd <= cap) {
                fmt_bytes(a, sizeof a, nd);
                printf("  the sequence length: --batch %d --set seq=%lld fits (%s)%s\n", world, (long long)s, a,
                       lb > 1 ? "; no batch fits at this seq" : "");
                said = 1;
                break;
            }
        }
    }
    if (pl->source.kernels == PLAN_KERNELS_REFERENCE) {
        double nd = need_at(pl, pl->batch, seq, 1, world, shared, ring);
        if (nd >= 0 && nd < need) {
            fmt_bytes(a, sizeof a, nd);
            printf("  the kernels: `moec compile` without --kernels reference (the default, fast: the bf16 "
                   "tensor-core kernels) needs %s at this batch%s\n", a, nd <= cap ? " and fits" : " (not enough alone)");
        }
    }
    double per_layer, state;
    int nlayers;
    state_per_layer(pl, &per_layer, &nlayers, &state);
    fmt_bytes(a, sizeof a, state * (shared ? world : 1));
    printf("  the model: its parameter state (parameters, bf16 copies, AdamW state, gradients) takes %s", a);
    if (nlayers > 1) {
        fmt_bytes(c, sizeof c, per_layer * (shared ? world : 1));
        printf(", %s per layer of %d: fewer layers", c, nlayers);
    }
    if (pl->experts > 0 && pl->ep == 1)
        printf("%s, or the experts spread over GPUs (`parallel ep = N` in the train section, or `moec compile --ep N`; "
               "each GPU then holds E/N of them)", nlayers > 1 ? "" : ": fewer parameters");
    printf("\n");
    if (!said && state * (shared ? world : 1) + (double)m.reserve > cap)
        printf("  (no batch or seq fits: the parameter state alone exceeds the GPU's memory)\n");
    else if (!said)
        printf("  (no batch or seq fits at these settings)\n");
    return 1;
}
