/* backend.c - the CPU reference backend behind runtime/backend.h.
 *
 * The plan's graph executed node by node in plain C (cpu.c, kernels.inc),
 * buffers from the one memory planner; then the global gradient norm,
 * clipping and AdamW on the host. Bit-identical whatever the thread count:
 * each output element is computed by one thread. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../util/util.h"
#include "../backend.h"
#include "cpu.h"

typedef struct CpuBackend {
    Backend base;
    const Plan *p;
    Comm *comm;           /* NULL or a one-rank communicator: nothing to reduce */
    CpuPlan run;
    float *params, *adam; /* [nparams_total], [m | v] */
    int32_t *tokens, *targets;
    size_t batch_bytes;
    double *ring_loss, *ring_norm;
    int ring, pending;
    CpuWatch watch;            /* where the metrics are read (moe_metrics.c) */
    BackendMetrics metrics[2]; /* of the steps, of the eval passes */
    double *accum;             /* accum_step's gradient sum (nparams_total), allocated at its first call */
    int forward_only;          /* BackendOptions.forward_only: no gradients, no AdamW state (adam is NULL) */
    int seed;                  /* the backward's seed node (cpu_loss_seed), or -1 */
    char err[1024];
} CpuBackend;

static int cpu_fail(CpuBackend *B, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cpu_fail(CpuBackend *B, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(B->err, sizeof B->err, fmt, ap);
    va_end(ap);
    return 0;
}

static int multi(const CpuBackend *B) { return B->comm && B->comm->world > 1; }

static int cpu_host_allreduce(Backend *b, CommGroup g, double *v, int64_t n)
{
    CpuBackend *B = (CpuBackend *)b;
    if (!multi(B))
        return 1;
    return B->comm->ops->allreduce_f64(B->comm, g, v, n) || cpu_fail(B, "%s", B->comm->error);
}

static int cpu_host_allgather(Backend *b, CommGroup g, const void *in, void *out, size_t bytes)
{
    CpuBackend *B = (CpuBackend *)b;
    if (!multi(B)) {
        memcpy(out, in, bytes);
        return 1;
    }
    return B->comm->ops->allgather(B->comm, g, in, out, bytes) || cpu_fail(B, "%s", B->comm->error);
}

static void cpu_destroy(Backend *b)
{
    CpuBackend *B = (CpuBackend *)b;
    if (!B)
        return;
    if (B->run.g)
        cpu_plan_free(&B->run);
    free(B->params);
    free(B->adam);
    free(B->tokens);
    free(B->targets);
    free(B->ring_loss);
    free(B->ring_norm);
    free(B->accum);
    free(B);
}

static Backend *cpu_create(const Plan *p, Comm *comm, const BackendOptions *o, char *err, size_t errlen)
{
    CpuBackend *B = calloc(1, sizeof *B);
    if (!B)
        die("out of memory");
    B->base.ops = &backend_cpu;
    B->p = p;
    B->comm = comm;
    B->ring = o && o->ring > 0 ? o->ring : 1;
    const IrGraph *g = p->graph;
    B->batch_bytes = (size_t)ir_numel(g->nodes[p->tokens]) * sizeof(int32_t);
    /* as the GPU backend does with device memory: a plan that cannot fit in the host's memory is refused
     * before anything is allocated (the parameters and AdamW state twice: the trainer's and these) */
    B->forward_only = o && o->forward_only;
    int upto = B->forward_only ? g->loss->id + 1 : g->nnodes;
    size_t arena = cpu_plan_arena_bytes_upto(g, CPU_F32, upto);
    double need = (double)arena + (B->forward_only ? 8.0 : 24.0) * (double)p->nparams_total +
                  2.0 * (double)B->batch_bytes;
    int64_t avail = host_memory_available();
    if (avail >= 0 && need > (double)avail) {
        char a[32], b[32], c[32];
        fmt_bytes(a, sizeof a, need);
        fmt_bytes(b, sizeof b, (double)avail);
        fmt_bytes(c, sizeof c, (double)arena);
        snprintf(err, errlen, "the plan needs %s of host memory (activations and gradients %s, parameters and "
                 "AdamW state) but %s is available: use a smaller --batch, or a machine with more memory", a, c, b);
        cpu_destroy(&B->base);
        return NULL;
    }
    B->params = calloc((size_t)p->nparams_total + 1, sizeof(float));
    B->adam = B->forward_only ? NULL : calloc((size_t)p->nparams_total * 2 + 1, sizeof(float));
    B->tokens = calloc(B->batch_bytes / 4 + 1, sizeof(int32_t));
    B->targets = calloc(B->batch_bytes / 4 + 1, sizeof(int32_t));
    B->ring_loss = calloc((size_t)B->ring, sizeof(double));
    B->ring_norm = calloc((size_t)B->ring, sizeof(double));
    if (!B->params || (!B->adam && !B->forward_only) || !B->tokens || !B->targets || !B->ring_loss || !B->ring_norm) {
        snprintf(err, errlen, "out of memory for %lld parameters", (long long)p->nparams_total);
        cpu_destroy(&B->base);
        return NULL;
    }
    cpu_plan_init_upto(&B->run, g, CPU_F32, upto);
    B->run.comm = comm;
    cpu_plan_round_bf16(&B->run, p); /* where the GPU stores bf16 (--kernels fast), round as it does */
    for (int i = 0; i < p->nparams; i++)
        cpu_plan_bind(&B->run, g->nodes[p->params[i].node], B->params + p->params[i].offset);
    cpu_plan_bind(&B->run, g->nodes[p->tokens], B->tokens);
    cpu_plan_bind(&B->run, g->nodes[p->targets], B->targets);
    cpu_metrics_watch(g, &B->watch);
    B->seed = cpu_loss_seed(g);
    return &B->base;
}

static int cpu_put_state(Backend *b, const float *params, const float *adam)
{
    CpuBackend *B = (CpuBackend *)b;
    memcpy(B->params, params, sizeof(float) * (size_t)B->p->nparams_total);
    if (adam && B->forward_only)
        return cpu_fail(B, "internal: AdamW state given to a forward-only backend");
    if (adam)
        memcpy(B->adam, adam, sizeof(float) * 2 * (size_t)B->p->nparams_total);
    return 1;
}

static int cpu_get_state(Backend *b, float *params, float *adam)
{
    CpuBackend *B = (CpuBackend *)b;
    if (params)
        memcpy(params, B->params, sizeof(float) * (size_t)B->p->nparams_total);
    if (adam && B->forward_only)
        return cpu_fail(B, "internal: a forward-only backend has no AdamW state");
    if (adam)
        memcpy(adam, B->adam, sizeof(float) * 2 * (size_t)B->p->nparams_total);
    return 1;
}

static int cpu_get_grad(Backend *b, int i, float *out)
{
    CpuBackend *B = (CpuBackend *)b;
    const PlanParam *pp = &B->p->params[i];
    if (B->forward_only)
        return cpu_fail(B, "internal: a forward-only backend has no gradients");
    memcpy(out, cpu_plan_data(&B->run, B->p->graph->nodes[pp->grad]), sizeof(float) * (size_t)pp->numel);
    return 1;
}

/* Global gradient norm, clipping, AdamW (decoupled weight decay, bias
 * correction), exactly as torch.optim.AdamW with clip_grad_norm_. The GPU
 * backend runs the same formula in moec_clip / moec_adamw. */
static int optimizer_step(CpuBackend *B, double lr, int64_t step, double *norm_out)
{
    const Plan *p = B->p;
    const IrGraph *g = p->graph;
    const IrTrain *tr = &g->train;
    double ss = 0, ss_shards = 0;
    for (int i = 0; i < p->nparams; i++) {
        const float *gr = cpu_plan_data(&B->run, g->nodes[p->params[i].grad]);
        double s2 = 0;
        for (int64_t e = 0; e < p->params[i].numel; e++)
            s2 += (double)gr[e] * gr[e];
        if (p->params[i].shard > 1)
            ss_shards += s2;
        else
            ss += s2;
    }
    /* dense gradients are the same on every rank after their all-reduce;
     * expert gradients are shards: their squares add over the EP group */
    if (!cpu_host_allreduce(&B->base, COMM_EP, &ss_shards, 1))
        return 0;
    ss += ss_shards;
    double norm = sqrt(ss), clip = 1.0;
    if (tr->grad_clip > 0 && norm > tr->grad_clip)
        clip = tr->grad_clip / (norm + 1e-6);
    double b1 = tr->beta1, b2 = tr->beta2;
    double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        double wd = pp->weight_decay ? tr->weight_decay : 0.0;
        const float *gr = cpu_plan_data(&B->run, g->nodes[pp->grad]);
        float *w = B->params + pp->offset;
        float *m = B->adam + pp->offset, *v = B->adam + p->nparams_total + pp->offset;
        for (int64_t e = 0; e < pp->numel; e++) {
            double gv = gr[e] * clip;
            m[e] = (float)(b1 * m[e] + (1 - b1) * gv);
            v[e] = (float)(b2 * v[e] + (1 - b2) * gv * gv);
            double upd = (m[e] / bc1) / (sqrt(v[e] / bc2) + tr->eps);
            w[e] = (float)(w[e] * (1 - lr * wd) - lr * upd);
        }
    }
    *norm_out = norm;
    return 1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void prof_add(BackendProfileRow *r, double seconds)
{
    r->seconds += seconds;
    r->launches++;
}

/* Nodes [from, to), stopping after each watched one to read its metrics. */
/* 0 when a node failed (a collective: B->comm->error says why) */
static int run_watched_from(CpuBackend *B, int from, int to, BackendMetrics *m)
{
    for (int i = from; i < to; i++)
        if (cpu_metrics_watched(&B->watch, i)) {
            if (!cpu_plan_run_range(&B->run, from, i + 1))
                return 0;
            cpu_metrics_observe(&B->run, &B->watch, i, m);
            from = i + 1;
        }
    return cpu_plan_run_range(&B->run, from, to);
}

static int run_watched(CpuBackend *B, int to, BackendMetrics *m) { return run_watched_from(B, 0, to, m); }

/* A step; with prof, every node timed on its own (the same code in the same
 * order: the results do not change). Inputs and params are bound, not run. */
static int run_step(CpuBackend *B, const int32_t *tokens, const int32_t *targets, double lr, int64_t step,
                    BackendProfile *prof)
{
    if (B->forward_only)
        return cpu_fail(B, "internal: a training step on a forward-only backend");
    if (B->pending >= B->ring)
        return cpu_fail(B, "internal: %d steps without reading their losses", B->pending);
    const IrGraph *g = B->p->graph;
    double t0 = prof ? now() : 0;
    memcpy(B->tokens, tokens, B->batch_bytes);
    memcpy(B->targets, targets, B->batch_bytes);
    if (!prof) {
        if (!run_watched(B, g->nnodes, &B->metrics[0]))
            return cpu_fail(B, "%s", B->comm->error);
    } else {
        if (prof->nnodes != g->nnodes)
            die("cpu backend: a profile of %d nodes for a graph of %d", prof->nnodes, g->nnodes);
        double t = now();
        prof_add(&prof->extra[BACKEND_PROFILE_BATCH], t - t0);
        for (int i = 0; i < g->nnodes; i++) {
            int leaf = g->nodes[i]->op == IR_OP_INPUT || g->nodes[i]->op == IR_OP_PARAM;
            if (!cpu_plan_run_range(&B->run, i, i + 1))
                return cpu_fail(B, "%s", B->comm->error);
            double t2 = now();
            if (cpu_metrics_watched(&B->watch, i))
                cpu_metrics_observe(&B->run, &B->watch, i, &B->metrics[0]);
            if (!leaf)
                prof_add(&prof->node[i], t2 - t);
            t = t2;
        }
    }
    double loss = cpu_plan_scalar(&B->run, g->loss), norm = 0;
    B->metrics[0].loss += loss;
    B->metrics[0].passes++;
    double t_opt = prof ? now() : 0;
    if (!optimizer_step(B, lr, step, &norm))
        return 0;
    if (prof) {
        double t_end = now();
        prof_add(&prof->extra[BACKEND_PROFILE_OPTIMIZER], t_end - t_opt);
        prof->step_seconds += t_end - t0;
        prof->steps++;
        snprintf(prof->clock, sizeof prof->clock, "CLOCK_MONOTONIC around each node");
    }
    B->ring_loss[B->pending] = loss;
    B->ring_norm[B->pending] = norm;
    B->pending++;
    return 1;
}

/* --grad-accum: the forward and backward pass of each micro-batch with the backward's seed (d loss / d loss,
 * 1 in a step) set to the micro-batch's weight, so that the gradients the pass produces, after any collective
 * of the plan (the data-parallel all-reduce, the expert-parallel exchanges), are those of weight * loss; they
 * are added to B->accum (double); the sum is written back to the gradient buffers, then the optimizer. The
 * gradient of sum_k weight[k] * loss_k, whatever the ranks. */
static int cpu_accum_step(Backend *b, const int32_t *tokens, const int32_t *targets, int micro, const double *weight,
                          double lr, int64_t step)
{
    CpuBackend *B = (CpuBackend *)b;
    const Plan *p = B->p;
    const IrGraph *g = p->graph;
    if (B->forward_only)
        return cpu_fail(B, "internal: a training step on a forward-only backend");
    if (B->pending >= B->ring)
        return cpu_fail(B, "internal: %d steps without reading their losses", B->pending);
    if (B->seed < 0)
        return cpu_fail(B, "--grad-accum: the graph has no loss seed to weight (a fill node %s.seed)", g->loss->name);
    if (!B->accum && !(B->accum = malloc(sizeof(double) * (size_t)(p->nparams_total + 1))))
        return cpu_fail(B, "out of memory for the accumulated gradients of %lld parameters",
                        (long long)p->nparams_total);
    memset(B->accum, 0, sizeof(double) * (size_t)p->nparams_total);
    size_t words = B->batch_bytes / sizeof(int32_t);
    double loss = 0, norm = 0;
    for (int k = 0; k < micro; k++) {
        memcpy(B->tokens, tokens + (size_t)k * words, B->batch_bytes);
        memcpy(B->targets, targets + (size_t)k * words, B->batch_bytes);
        if (!run_watched(B, B->seed + 1, &B->metrics[0]))
            return cpu_fail(B, "%s", B->comm->error);
        *(float *)cpu_plan_data(&B->run, g->nodes[B->seed]) = (float)weight[k];
        if (!run_watched_from(B, B->seed + 1, g->nnodes, &B->metrics[0]))
            return cpu_fail(B, "%s", B->comm->error);
        double lk = cpu_plan_scalar(&B->run, g->loss);
        B->metrics[0].loss += lk;
        B->metrics[0].passes++;
        loss += weight[k] * lk;
        for (int i = 0; i < p->nparams; i++) {
            const float *gr = cpu_plan_data(&B->run, g->nodes[p->params[i].grad]);
            double *acc = B->accum + p->params[i].offset;
            for (int64_t e = 0; e < p->params[i].numel; e++)
                acc[e] += (double)gr[e];
        }
    }
    for (int i = 0; i < p->nparams; i++) {
        float *gr = cpu_plan_data(&B->run, g->nodes[p->params[i].grad]);
        const double *acc = B->accum + p->params[i].offset;
        for (int64_t e = 0; e < p->params[i].numel; e++)
            gr[e] = (float)acc[e];
    }
    if (!optimizer_step(B, lr, step, &norm))
        return 0;
    B->ring_loss[B->pending] = loss;
    B->ring_norm[B->pending] = norm;
    B->pending++;
    return 1;
}

static int cpu_step(Backend *b, const int32_t *tokens, const int32_t *targets, double lr, int64_t step)
{
    return run_step((CpuBackend *)b, tokens, targets, lr, step, NULL);
}

static int cpu_profile_step(Backend *b, const int32_t *tokens, const int32_t *targets, double lr, int64_t step,
                            BackendProfile *prof)
{
    return run_step((CpuBackend *)b, tokens, targets, lr, step, prof);
}

static int cpu_read_steps(Backend *b, double *losses, double *norms, int *n)
{
    CpuBackend *B = (CpuBackend *)b;
    memcpy(losses, B->ring_loss, sizeof(double) * (size_t)B->pending);
    memcpy(norms, B->ring_norm, sizeof(double) * (size_t)B->pending);
    *n = B->pending;
    B->pending = 0;
    return 1;
}

static int cpu_eval(Backend *b, const int32_t *tokens, const int32_t *targets, double *loss)
{
    CpuBackend *B = (CpuBackend *)b;
    memcpy(B->tokens, tokens, B->batch_bytes);
    memcpy(B->targets, targets, B->batch_bytes);
    if (!run_watched(B, B->p->graph->loss->id + 1, &B->metrics[1]))
        return cpu_fail(B, "%s", B->comm->error);
    *loss = cpu_plan_scalar(&B->run, B->p->graph->loss);
    B->metrics[1].loss += *loss;
    B->metrics[1].passes++;
    return 1;
}

static int cpu_read_metrics(Backend *b, int eval, BackendMetrics *out)
{
    CpuBackend *B = (CpuBackend *)b;
    *out = B->metrics[eval != 0];
    memset(&B->metrics[eval != 0], 0, sizeof B->metrics[0]);
    return 1;
}

/* The forward pass up to node `node`, whose value is copied out. */
static int cpu_forward_probe(Backend *b, const int32_t *tokens, const int32_t *targets, int node, float *out)
{
    CpuBackend *B = (CpuBackend *)b;
    const IrGraph *g = B->p->graph;
    if (node < 0 || node >= B->run.nplanned)
        return cpu_fail(B, "internal: no node %d to read", node);
    const IrNode *n = g->nodes[node];
    if (n->dtype == IR_I32)
        return cpu_fail(B, "internal: node %s is not a float tensor", n->name);
    memcpy(B->tokens, tokens, B->batch_bytes);
    memcpy(B->targets, targets, B->batch_bytes);
    cpu_plan_run_range(&B->run, 0, node + 1);
    memcpy(out, cpu_plan_data(&B->run, n), sizeof(float) * (size_t)ir_numel(n));
    return 1;
}

static void cpu_info(Backend *b, BackendInfo *out)
{
    CpuBackend *B = (CpuBackend *)b;
    memset(out, 0, sizeof *out);
    int th = cpu_get_threads();
    snprintf(out->device, sizeof out->device, "CPU");
    snprintf(out->step, sizeof out->step, "%d thread%s", th, th == 1 ? "" : "s");
    out->planned_params = (size_t)B->p->nparams_total * 4;
    out->planned_opt = B->forward_only ? 0 : (size_t)B->p->nparams_total * 8;
    out->planned_acts = B->run.planned_bytes;
    out->training_acts = B->forward_only ? cpu_plan_arena_bytes(B->p->graph, CPU_F32) : B->run.planned_bytes;
    out->forward_only = B->forward_only;
    out->planned_total = out->planned_params + out->planned_opt + out->planned_acts;
}

static const char *cpu_error(const Backend *b) { return ((const CpuBackend *)b)->err; }

const BackendOps backend_cpu = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .put_state = cpu_put_state,
    .get_state = cpu_get_state,
    .get_grad = cpu_get_grad,
    .step = cpu_step,
    .profile_step = cpu_profile_step,
    .accum_step = cpu_accum_step,
    .read_steps = cpu_read_steps,
    .eval = cpu_eval,
    .read_metrics = cpu_read_metrics,
    .forward_probe = cpu_forward_probe,
    .host_allreduce_f64 = cpu_host_allreduce,
    .host_allgather = cpu_host_allgather,
    .info = cpu_info,
    .error = cpu_error,
};
