/* moe_metrics.c - the language-model loss, the auxiliary loss and the
 * mixture-of-experts metrics of the steps since the last log line, added to
 * that line of the --log JSONL (rank 0's view):
 *   "lm_loss"   the cross_entropy / masked_lm_loss node alone (mean over the steps)
 *   "aux_loss"  what the objective adds to it (the train section's `aux_loss C`
 *               times the layers' load-balancing losses; 0 without it)
 *   "moe": [{"layer", "node", "experts", "k", "load": [fraction of the routed
 *            assignments per expert], "max_load" (max / mean: 1 is perfectly
 *            balanced, E is one expert taking everything), "entropy" (the
 *            router's mean per-token entropy, nats; ln E is uniform),
 *            "aux" (the layer's load-balancing loss E * sum f_i P_i; 1 when balanced)}]
 * Backends that do not read them leave the line as it was: the GPU backend
 * reads them for evaluation passes only (--eval, validation), not for the
 * training steps. */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "trainer.h"

/* Adds m's per-layer metrics to o as "moe": [...], means over its passes */
void trainer_moe_json(const Trainer *t, const BackendMetrics *m, cJSON *o)
{
    double n = m->passes;
    if (m->nlayers <= 0 || m->passes <= 0)
        return;
    cJSON *arr = cJSON_AddArrayToObject(o, "moe");
    for (int l = 0; l < m->nlayers; l++) {
        const BackendMoeLayer *L = &m->layer[l];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "layer", l);
        cJSON_AddStringToObject(x, "node", t->g->nodes[L->node]->name);
        cJSON_AddNumberToObject(x, "experts", L->experts);
        cJSON_AddNumberToObject(x, "k", L->k);
        double total = 0, mx = 0;
        for (int e = 0; e < L->experts; e++) {
            total += L->load[e];
            mx = L->load[e] > mx ? L->load[e] : mx;
        }
        cJSON *load = cJSON_AddArrayToObject(x, "load");
        for (int e = 0; e < L->experts; e++)
            cJSON_AddItemToArray(load, cJSON_CreateNumber(total > 0 ? L->load[e] / total : 0));
        cJSON_AddNumberToObject(x, "max_load", total > 0 ? mx / (total / L->experts) : 0);
        cJSON_AddNumberToObject(x, "entropy", L->entropy / n);
        cJSON_AddNumberToObject(x, "aux", L->aux / n);
        cJSON_AddItemToArray(arr, x);
    }
}

/* a += b: the sums of two reads (BackendMetrics are sums over passes) */
void trainer_metrics_add(BackendMetrics *a, const BackendMetrics *b)
{
    a->passes += b->passes;
    a->loss += b->loss;
    a->lm_loss += b->lm_loss;
    a->has_lm |= b->has_lm;
    if (b->nlayers > a->nlayers)
        a->nlayers = b->nlayers;
    for (int l = 0; l < b->nlayers; l++) {
        BackendMoeLayer *x = &a->layer[l];
        const BackendMoeLayer *y = &b->layer[l];
        x->node = y->node;
        x->experts = y->experts;
        x->k = y->k;
        x->rows += y->rows;
        for (int e = 0; e < BACKEND_MOE_EXPERTS; e++)
            x->load[e] += y->load[e];
        x->entropy += y->entropy;
        x->aux += y->aux;
    }
}

void trainer_log_moe(Trainer *t, cJSON *o)
{
    if (!t->be->ops->read_metrics)
        return;
    BackendMetrics *m = calloc(1, sizeof *m);
    if (!m || !t->be->ops->read_metrics(t->be, 0, m) || m->passes == 0) {
        free(m);
        return;
    }
    double n = m->passes;
    if (m->has_lm) {
        cJSON_AddNumberToObject(o, "lm_loss", m->lm_loss / n);
        cJSON_AddNumberToObject(o, "aux_loss", (m->loss - m->lm_loss) / n);
    }
    trainer_moe_json(t, m, o);
    free(m);
}
