/* moe_metrics.c - what the CPU backend reads off a forward pass besides the
 * objective (runtime/backend.h, BackendMetrics): the language-model loss
 * node's value, and per MoE layer the tokens each expert received, the
 * router's entropy and the load-balancing loss, computed from the router's
 * logits and the chosen experts while both are still in their buffers (the
 * memory planner reuses them later in the pass). */
#include <math.h>
#include <string.h>

#include "cpu.h"

void cpu_metrics_watch(const IrGraph *g, CpuWatch *w)
{
    memset(w, 0, sizeof *w);
    w->lm = -1;
    int last = g->loss ? g->loss->id : g->nnodes - 1;
    for (int i = 0; i <= last && i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_MASKED_LM_LOSS) && w->lm < 0)
            w->lm = i;
        if (n->op == IR_OP_TOPK_EXPERTS && n->rank >= 1 && n->src[0]->rank >= 1 && w->nlayers < BACKEND_MOE_LAYERS &&
            n->src[0]->shape[n->src[0]->rank - 1] <= BACKEND_MOE_EXPERTS)
            w->layer[w->nlayers++] = i;
    }
}

int cpu_loss_seed(const IrGraph *g)
{
    if (!g->loss)
        return -1;
    size_t l = strlen(g->loss->name);
    for (int i = g->loss->id + 1; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->op == IR_OP_FILL && n->rank == 0 && n->dtype == IR_F32 && !strncmp(n->name, g->loss->name, l) &&
            !strcmp(n->name + l, ".seed"))
            return i;
    }
    return -1;
}

int cpu_metrics_watched(const CpuWatch *w, int id)
{
    if (id == w->lm)
        return 1;
    for (int l = 0; l < w->nlayers; l++)
        if (w->layer[l] == id)
            return 1;
    return 0;
}

/* What MoE layer `l` (topk_experts node n) showed: ex its chosen experts [N, k], logits its router's logits
 * [N, E], both host memory (the CPU's buffers, or the GPU's copied back: the same arithmetic for both). */
void cpu_metrics_layer(const IrNode *n, int l, const float *logits, const int32_t *ex, BackendMetrics *m)
{
    int64_t k = n->shape[n->rank - 1], N = ir_numel(n) / k, E = n->src[0]->shape[n->src[0]->rank - 1];
    if (m->nlayers < l + 1)
        m->nlayers = l + 1;
    BackendMoeLayer *L = &m->layer[l];
    L->node = n->id;
    L->experts = (int)E;
    L->k = (int)k;
    double f[BACKEND_MOE_EXPERTS] = {0}, P[BACKEND_MOE_EXPERTS] = {0}, pr[BACKEND_MOE_EXPERTS], ent = 0;
    for (int64_t t = 0; t < N * k; t++)
        if (ex[t] >= 0 && ex[t] < E)
            f[ex[t]] += 1;
    for (int64_t t = 0; t < N; t++) {
        const float *row = logits + t * E;
        double mx = -INFINITY, sum = 0;
        for (int64_t e = 0; e < E; e++)
            mx = row[e] > mx ? row[e] : mx;
        for (int64_t e = 0; e < E; e++)
            sum += pr[e] = exp((double)row[e] - mx);
        for (int64_t e = 0; e < E; e++) {
            pr[e] /= sum;
            P[e] += pr[e];
            if (pr[e] > 0)
                ent -= pr[e] * log(pr[e]);
        }
    }
    double aux = 0;
    for (int64_t e = 0; e < E; e++) {
        L->load[e] += f[e];
        aux += (f[e] / (double)N) * (P[e] / (double)N);
    }
    L->rows += (double)N;
    L->entropy += N ? ent / (double)N : 0;
    L->aux += (double)E * aux;
}

/* Node `id` has just run: add what it shows to m. */
void cpu_metrics_observe(const CpuPlan *p, const CpuWatch *w, int id, BackendMetrics *m)
{
    if (p->prec != CPU_F32)
        return;
    if (id == w->lm) {
        m->has_lm = 1;
        m->lm_loss += cpu_plan_scalar(p, p->g->nodes[id]);
        return;
    }
    for (int l = 0; l < w->nlayers; l++)
        if (w->layer[l] == id) {
            const IrNode *n = p->g->nodes[id];
            cpu_metrics_layer(n, l, p->buf[n->src[0]->id], p->buf[id], m);
            return;
        }
}
