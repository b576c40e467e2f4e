/* metrics.c - what the training binary tells its user: the summary before
 * the first step and the JSONL metrics. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/util.h"
#include "trainer.h"

void trainer_log(Trainer *t, cJSON *o)
{
    if (!t->log) {
        cJSON_Delete(o);
        return;
    }
    char *s = cJSON_PrintUnformatted(o);
    fprintf(t->log, "%s\n", s);
    fflush(t->log);
    cJSON_free(s);
    cJSON_Delete(o);
}

void trainer_print_summary(Trainer *t)
{
    const IrGraph *g = t->g;
    int64_t experts = 0, E = 0, k = 0;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->op == IR_OP_TOPK_EXPERTS) {
            k = ir_attr_i(n, IR_ATTR_K);
            E = n->src[0]->shape[n->src[0]->rank - 1];
        }
    }
    /* the whole model's counts: a rank holding expert shards stands for all of them */
    int64_t total = 0;
    for (int p = 0; p < g->nparams; p++) {
        IrNode *n = g->params[p];
        int64_t copies = ir_has_attr(n, IR_ATTR_SHARD) ? n->attr[IR_ATTR_SHARD].i : 1;
        total += ir_numel(n) * copies;
        if (E > 1 && n->rank >= 3 && n->shape[0] * copies == E)
            experts += ir_numel(n) * copies;
    }
    double active = (double)(total - experts) + (E ? (double)experts * k / E : 0);
    char a[32], b[32];
    fmt_count(a, sizeof a, (double)total);
    fmt_count(b, sizeof b, active);
    printf("model %s (%s): %s parameters, %s active per token\n", g->model, g->file, a, b);
    BackendInfo bi;
    t->be->ops->info(t->be, &bi);
    char pa[32], ad[32], ac[32], ot[32], tot[32];
    fmt_bytes(pa, sizeof pa, (double)bi.planned_params);
    fmt_bytes(ad, sizeof ad, (double)bi.planned_opt);
    fmt_bytes(ac, sizeof ac, (double)bi.planned_acts);
    fmt_bytes(ot, sizeof ot, (double)bi.planned_other);
    fmt_bytes(tot, sizeof tot, (double)bi.planned_total);
    int mx = g->train.precision == IR_PREC_MXFP8;
    if (bi.kernels[0]) {
        /* a backend with kernels: where they came from and how a step launches them */
        printf("device: %s\n", bi.device);
        printf("plan: %d IR nodes (forward + backward), precision %s (fp32 storage and arithmetic%s); %d kernel "
               "launches per step%s%.0d%s; kernels from %s; %s\n", g->nnodes, ir_precision_name[g->train.precision],
               mx ? ", MXFP8-quantized expert GEMM operands" : "", bi.nlaunches, bi.ncollectives ? " + " : "",
               bi.ncollectives, bi.ncollectives ? " collectives" : "", bi.kernels, bi.step);
        printf("memory planned: parameters %s, AdamW state %s, activations and gradients %s, batch and optimizer "
               "scratch %s: %s\n", pa, ad, ac, ot, tot);
    } else {
        printf("plan: %d IR nodes (forward + backward), precision %s (on the %s: fp32 arithmetic%s), %s\n", g->nnodes,
               ir_precision_name[g->train.precision], bi.device, mx ? " on MXFP8-quantized expert GEMM operands" : "",
               bi.step);
        printf("memory planned: parameters %s, AdamW state %s, activations and gradients %s\n", pa, ad, ac);
    }
    printf("training: %lld steps, batch %lld x seq %lld = %lld tokens/step, lr %g (%s, warmup %lld, min %g), "
           "objective %s\n", (long long)t->tr.steps, (long long)t->tr.batch, (long long)t->tr.seq,
           (long long)(t->tr.batch * t->tr.seq), t->tr.lr, ir_schedule_name[t->tr.schedule], (long long)t->tr.warmup, t->tr.min_lr,
           t->obj == OBJECTIVE_MASKED ? "masked LM (15%)" : "causal LM");
}
