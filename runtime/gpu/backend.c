/* backend.c - the CUDA backend behind runtime/backend.h: the table of
 * functions over gpu.c, in the plan's flat parameter layout. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../util/util.h"
#include "../backend.h"
#include "gpu.h"

typedef struct CudaBackend {
    Backend base;
    const Plan *p;
    Comm *comm;
    Gpu *gpu;
    int64_t *param_off;
    double *param_wd;
    int device_comm;      /* the rank's transport works on device memory (NCCL) */
    int graphs;           /* CUDA graphs allowed (not --no-cuda-graph) */
    GpuProfile prof;      /* --profile: one step's times, moved into the trainer's BackendProfile */
    BackendMetrics metrics;  /* of the eval() passes since the last read_metrics(eval = 1) */
    char err[2048];
} CudaBackend;

int backend_cuda_probe(char *why, size_t n) { return gpu_probe(why, n); }

void backend_cuda_plan_memory(const Plan *p, int ranks, int ring, BackendMemoryPlan *out)
{
    GpuMemoryPlan m;
    gpu_plan_memory(p, ranks, ring, &m);
    *out = (BackendMemoryPlan){m.params, m.adam, m.acts, m.other, m.total, m.reserve, m.exchange};
}

static void cuda_destroy(Backend *b)
{
    CudaBackend *B = (CudaBackend *)b;
    if (!B)
        return;
    gpu_destroy(B->gpu);
    free(B->param_off);
    free(B->param_wd);
    free(B->prof.node_seconds);
    free(B->prof.node_launches);
    free(B);
}

static Backend *cuda_create(const Plan *p, Comm *comm, const BackendOptions *o, char *err, size_t errlen)
{
    CudaBackend *B = calloc(1, sizeof *B);
    if (!B)
        die("out of memory");
    B->base.ops = &backend_cuda;
    B->p = p;
    B->comm = comm;
    B->device_comm = comm && comm->world > 1 && strcmp(comm->ops->name, "nccl") == 0;
    B->param_off = calloc((size_t)p->nparams + 1, sizeof *B->param_off);
    B->param_wd = calloc((size_t)p->nparams + 1, sizeof *B->param_wd);
    if (!B->param_off || !B->param_wd)
        die("out of memory");
    for (int i = 0; i < p->nparams; i++) {
        B->param_off[i] = p->params[i].offset;
        B->param_wd[i] = p->params[i].weight_decay ? p->graph->train.weight_decay : 0.0;
    }
    GpuOptions go = {0};
    go.device = -1;  /* MOEC_LOCAL_RANK, else 0: simulated ranks share one GPU */
    go.graphs = B->graphs = o ? o->graphs : 1;
    go.ring = o && o->ring > 0 ? o->ring : 1;
    go.param_wd = B->param_wd;
    go.no_kernels = o ? o->no_kernels : NULL;
    go.forward_only = o ? o->forward_only : 0;
    B->gpu = gpu_create(p, comm, &go, err, errlen);
    if (!B->gpu) {
        cuda_destroy(&B->base);
        return NULL;
    }
    return &B->base;
}

static int cuda_put_state(Backend *b, const float *params, const float *adam)
{
    CudaBackend *B = (CudaBackend *)b;
    return gpu_put_params(B->gpu, params, B->param_off) &&
           (!adam || gpu_put_adam(B->gpu, adam, B->p->nparams_total));
}

static int cuda_get_state(Backend *b, float *params, float *adam)
{
    CudaBackend *B = (CudaBackend *)b;
    return (!params || gpu_get_params(B->gpu, params, B->param_off)) &&
           (!adam || gpu_get_adam(B->gpu, adam, B->p->nparams_total));
}

static int cuda_get_grad(Backend *b, int i, float *out) { return gpu_get_grad(((CudaBackend *)b)->gpu, i, out); }

static int cuda_step(Backend *b, const int32_t *tokens, const int32_t *targets, double lr, int64_t step)
{
    CudaBackend *B = (CudaBackend *)b;
    const IrTrain *tr = &B->p->graph->train;
    double bc1 = 1 - pow(tr->beta1, (double)step), bc2 = 1 - pow(tr->beta2, (double)step);
    return gpu_step(B->gpu, tokens, targets, lr, bc1, bc2);
}

static int cuda_accum_step(Backend *b, const int32_t *tokens, const int32_t *targets, int micro, const double *weight,
                           double lr, int64_t step)
{
    CudaBackend *B = (CudaBackend *)b;
    const IrTrain *tr = &B->p->graph->train;
    double bc1 = 1 - pow(tr->beta1, (double)step), bc2 = 1 - pow(tr->beta2, (double)step);
    return gpu_accum_step(B->gpu, tokens, targets, micro, weight, lr, bc1, bc2);
}

/* Appends kernel name k to a row's list unless it is there already. */
/* 1 if some param has a working copy of that storage (bf16: its optimizer launch is moec_adamw_bf16; e4m3:
 * moec_adamw_fp8b_ExNxK) */
static int has_copies(const Plan *p, PlanStorage st)
{
    for (int b = 0; b < p->nbufs; b++)
        if (p->bufs[b].kind == PLAN_BUF_COPY && p->bufs[b].storage == st)
            return 1;
    return 0;
}

static void add_kernel(BackendProfileRow *r, const char *k)
{
    size_t len = strlen(r->kernels), kl = strlen(k);
    for (const char *p = r->kernels; (p = strstr(p, k)); p += kl)
        if ((p == r->kernels || p[-1] == ' ') && (p[kl] == ',' || p[kl] == 0))
            return;
    if (len + kl + 3 >= sizeof r->kernels) {
        if (len + 4 < sizeof r->kernels && !strstr(r->kernels, "..."))
            snprintf(r->kernels + len, sizeof r->kernels - len, "...");
        return;
    }
    snprintf(r->kernels + len, sizeof r->kernels - len, "%s%s", len ? ", " : "", k);
}

static void move_row(BackendProfileRow *r, double *seconds, int64_t *launches)
{
    r->seconds += *seconds;
    r->launches += *launches;
    *seconds = 0;
    *launches = 0;
}

static int cuda_profile_step(Backend *b, const int32_t *tokens, const int32_t *targets, double lr, int64_t step,
                             BackendProfile *prof)
{
    CudaBackend *B = (CudaBackend *)b;
    const Plan *p = B->p;
    int nn = p->graph->nnodes;
    if (prof->nnodes != nn)
        die("cuda backend: a profile of %d nodes for a graph of %d", prof->nnodes, nn);
    if (!B->prof.node_seconds) {
        B->prof.node_seconds = calloc((size_t)nn + 1, sizeof(double));
        B->prof.node_launches = calloc((size_t)nn + 1, sizeof(int64_t));
        if (!B->prof.node_seconds || !B->prof.node_launches)
            die("out of memory");
    }
    if (prof->steps == 0) {
        /* what each row runs: the plan's kernel names */
        for (int i = 0; i < p->nlaunches; i++) {
            const PlanLaunch *l = &p->launches[i];
            add_kernel(&prof->node[l->node], l->kernel >= 0 ? p->kernel_names[l->kernel]
                                             : B->device_comm ? "nccl (host-driven)" : "host collective");
        }
        snprintf(prof->extra[BACKEND_PROFILE_OPTIMIZER].kernels, BACKEND_PROFILE_KERNELS,
                 "moec_grad_sumsq, moec_sum_partials, moec_clip, moec_adamw%s%s",
                 has_copies(p, PLAN_BF16) ? ", moec_adamw_bf16" : "",
                 has_copies(p, PLAN_E4M3) ? ", moec_adamw_fp8b (AdamW + the E4M3 weight tiles)" : "");
        snprintf(prof->extra[BACKEND_PROFILE_BUCKETS].kernels, BACKEND_PROFILE_KERNELS, "%s, moec_scale",
                 B->device_comm ? "nccl all_reduce" : "host all_reduce");
        snprintf(prof->extra[BACKEND_PROFILE_BATCH].kernels, BACKEND_PROFILE_KERNELS, "cuMemcpyHtoDAsync");
        snprintf(prof->clock, sizeof prof->clock, "CUDA events around each launch");
    }
    const IrTrain *tr = &p->graph->train;
    double bc1 = 1 - pow(tr->beta1, (double)step), bc2 = 1 - pow(tr->beta2, (double)step);
    GpuProfile *g = &B->prof;
    if (!gpu_profile_step(B->gpu, tokens, targets, lr, bc1, bc2, g))
        return 0;
    for (int i = 0; i < nn; i++)
        move_row(&prof->node[i], &g->node_seconds[i], &g->node_launches[i]);
    move_row(&prof->extra[BACKEND_PROFILE_BATCH], &g->batch_seconds, &g->batch_copies);
    move_row(&prof->extra[BACKEND_PROFILE_OPTIMIZER], &g->opt_seconds, &g->opt_launches);
    move_row(&prof->extra[BACKEND_PROFILE_BUCKETS], &g->bucket_seconds, &g->bucket_calls);
    prof->step_seconds += g->step_seconds;
    g->step_seconds = 0;
    prof->steps++;
    return 1;
}

static int cuda_read_steps(Backend *b, double *losses, double *norms, int *n)
{
    CudaBackend *B = (CudaBackend *)b;
    if (!gpu_read_steps(B->gpu, losses, norms, n))
        return 0;
    gpu_measure(B->gpu);
    return 1;
}

static int cuda_eval(Backend *b, const int32_t *tokens, const int32_t *targets, double *loss)
{
    CudaBackend *B = (CudaBackend *)b;
    if (!gpu_eval(B->gpu, tokens, targets, loss, &B->metrics))
        return 0;
    B->metrics.loss += *loss;
    B->metrics.passes++;
    return 1;
}

/* The eval passes' metrics, read off the device as the CPU backend reads them (gpu_eval); the training
 * steps', summed on the device after each watched node of the step (gpu_read_step_metrics: reading the
 * router's values back would stop the step and its CUDA graph at every MoE layer). */
static int cuda_read_metrics(Backend *b, int eval, BackendMetrics *out)
{
    CudaBackend *B = (CudaBackend *)b;
    memset(out, 0, sizeof *out);
    if (eval) {
        *out = B->metrics;
        memset(&B->metrics, 0, sizeof B->metrics);
        return 1;
    }
    return gpu_read_step_metrics(B->gpu, out);
}

static int cuda_forward_probe(Backend *b, const int32_t *tokens, const int32_t *targets, int node, float *out)
{
    return gpu_forward_probe(((CudaBackend *)b)->gpu, tokens, targets, node, out);
}

static int cuda_host_allreduce(Backend *b, CommGroup g, double *v, int64_t n)
{
    CudaBackend *B = (CudaBackend *)b;
    if (!B->comm || B->comm->world == 1)
        return 1;
    if (B->device_comm)
        return gpu_host_allreduce_f64(B->gpu, B->comm, g, v, n);
    return B->comm->ops->allreduce_f64(B->comm, g, v, n);
}

static int cuda_host_allgather(Backend *b, CommGroup g, const void *in, void *out, size_t bytes)
{
    CudaBackend *B = (CudaBackend *)b;
    if (!B->comm || B->comm->world == 1) {
        memcpy(out, in, bytes);
        return 1;
    }
    if (B->device_comm)
        return gpu_host_allgather(B->gpu, B->comm, g, in, out, bytes);
    return B->comm->ops->allgather(B->comm, g, in, out, bytes);
}

static void cuda_info(Backend *b, BackendInfo *out)
{
    CudaBackend *B = (CudaBackend *)b;
    const GpuInfo *gi = gpu_info(B->gpu);
    memset(out, 0, sizeof *out);
    char tm[32], fm[32];
    fmt_bytes(tm, sizeof tm, (double)gi->total_mem);
    fmt_bytes(fm, sizeof fm, (double)gi->free_mem);
    snprintf(out->device, sizeof out->device, "cuda: %s (%s, %d SMs, %s, %s free)", gi->name, gi->arch, gi->sms, tm,
             fm);
    snprintf(out->kernels, sizeof out->kernels, "%s", gi->image_from);
    snprintf(out->step, sizeof out->step, "%s",
             !B->graphs ? "CUDA graph off (--no-cuda-graph)"
             : gi->ncollectives && !gi->coll_device ? "no CUDA graph (collectives run between launches)"
             : gi->ncollectives ? "the step, collectives included, is replayed as a CUDA graph"
                                : "the step is replayed as a CUDA graph");
    out->planned_params = gi->planned_params;
    out->planned_opt = gi->planned_adam;
    out->planned_acts = gi->planned_acts;
    out->planned_other = gi->planned_other;
    out->planned_total = gi->planned_bytes;
    out->training_acts = gi->forward_only ? gi->training_acts : gi->planned_acts;
    out->forward_only = gi->forward_only;
    out->measured = gi->measured_bytes;
    out->nlaunches = gi->nlaunches;
    out->ncollectives = gi->ncollectives;
    out->coll_seconds = gi->coll_seconds;
    out->coll_calls = gi->coll_calls;
}

static const char *cuda_error(const Backend *b) { return gpu_error(((const CudaBackend *)b)->gpu); }

const BackendOps backend_cuda = {
    .name = "cuda",
    .create = cuda_create,
    .destroy = cuda_destroy,
    .put_state = cuda_put_state,
    .get_state = cuda_get_state,
    .get_grad = cuda_get_grad,
    .step = cuda_step,
    .profile_step = cuda_profile_step,
    .accum_step = cuda_accum_step,
    .read_steps = cuda_read_steps,
    .eval = cuda_eval,
    .read_metrics = cuda_read_metrics,
    .forward_probe = cuda_forward_probe,
    .host_allreduce_f64 = cuda_host_allreduce,
    .host_allgather = cuda_host_allgather,
    .info = cuda_info,
    .error = cuda_error,
};
