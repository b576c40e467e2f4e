/* check.c - runs a model's generated kernels (on the CPU, through the
 * emulator in emu_runtime.cc) against the CPU reference backend, node by
 * node, following plan.json exactly: its buffers, offsets and launches.
 *
 *   check MODEL PLAN.json [--precision P] [--ep N] [--disable-pass X] [--chain] [--grid-cap N]
 *
 * Default (isolated): before each node runs, its sources' buffers get the
 * CPU's values, so every kernel is checked on identical inputs: integer
 * results, copies, MXFP8 quantization and the other exact ops must match
 * bit for bit, the rest within 1e-4 of the tensor's largest value (only
 * the order of sums differs). --chain runs the launches on their own
 * outputs, as the GPU will, which checks the buffer planner (activations
 * start as NaN, so a buffer reused too early shows), and compares the loss
 * and every gradient within 1e-3. Also checks the AdamW kernel against
 * the formula of the CPU backend's (runtime/cpu/backend.c) bit for bit. Exit 0 when all agree.
 * A plan with expert parallelism runs as rank 0 with made-up collectives
 * (fake_collective): the local kernels around them are what is checked.
 * Options must repeat the compile's: --precision, --ep, --disable-pass. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../plan/plan.h"
#include "../../../runtime/cpu/cpu.h"
#include "../../../util/util.h"

int emu_launch(const char *name, long long grid, int block, void **args);
int emu_adamw(float *w, float *m, float *v, const float *g, long long n, double lr, double wd, double clip,
              double bc1, double bc2);

int emu_moe_stats(double *acc, double *part, const float *logits, const int *ex, long long n, int e, int k, int grid);

#include "plan_check.h"

typedef struct OpStat {
    double worst;
    int count;
} OpStat;

int main(int argc, char **argv)
{
    const char *model = NULL, *planpath = NULL;
    int chain = 0, mxfp8 = 0, ep = 0;
    const char *disabled = NULL;
    long long grid_cap = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--chain") == 0)
            chain = 1;
        else if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc)
            mxfp8 = strcmp(argv[++i], "mxfp8") == 0 ? 1 : -1;
        else if (strcmp(argv[i], "--ep") == 0 && i + 1 < argc)
            ep = atoi(argv[++i]);
        else if (strcmp(argv[i], "--disable-pass") == 0 && i + 1 < argc)
            disabled = argv[++i];
        else if (strcmp(argv[i], "--grid-cap") == 0 && i + 1 < argc)
            grid_cap = atoll(argv[++i]);
        else if (!model)
            model = argv[i];
        else
            planpath = argv[i];
    }
    if (!model || !planpath) {
        fprintf(stderr, "usage: check MODEL PLAN.json [--precision P] [--ep N] [--disable-pass X] [--chain] [--grid-cap N]\n");
        return 2;
    }
    char perr[2048];
    char *pj = read_all(planpath);
    /* the plan's own graph: the typed reader checks it against the tables */
    Plan *plan = pj ? plan_from_json(pj, strlen(pj), planpath, NULL, perr, sizeof perr) : NULL;
    if (!plan)
        die("cannot read %s: %s", planpath, pj ? perr : "no such file");
    IrGraph *g = plan->graph;
    (void)model, (void)mxfp8, (void)ep, (void)disabled;
    int nbufs = plan->nbufs;
    char *base[3];
    for (int r = 0; r < 3; r++) {
        size_t bytes = (size_t)plan->memory.region_bytes[r] + 256;
        base[r] = aligned_alloc(256, (bytes + 255) / 256 * 256);
        memset(base[r], 0xFF, bytes); /* NaN floats, -1 ints: what no kernel wrote shows */
    }
    char **ptr = calloc((size_t)nbufs, sizeof(char *));
    for (int b = 0; b < nbufs; b++) {
        const PlanBuf *o = &plan->bufs[b];
        int r = (int)o->region;
        ptr[b] = base[r] + (size_t)o->offset;
        if (b < g->nnodes && o->bytes != (o->elided ? 0 : ir_numel(g->nodes[b]) * 4))
            die("plan buffer %d is %lld bytes, node %s has %lld elements", b, (long long)o->bytes, g->nodes[b]->name,
                (long long)ir_numel(g->nodes[b]));
    }

    /* the same params and inputs for both */
    CpuPlan cpu;
    cpu_plan_init(&cpu, g, CPU_F32);
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        int64_t numel = ir_numel(n);
        if (n->op == IR_OP_PARAM) {
            float *d = (float *)ptr[i];
            for (int64_t e = 0; e < numel; e++)
                d[e] = (float)(n->rank == 1 ? 1.0 + 0.1 * rng_normal() : 0.1 * rng_normal());
            cpu_plan_bind(&cpu, n, d);
        } else if (n->op == IR_OP_INPUT) {
            int32_t *d = (int32_t *)ptr[i];
            int64_t range = 2;
            int masked = 0;
            for (int j = 0; j < g->nnodes; j++) {
                IrNode *u = g->nodes[j];
                if (u->op == IR_OP_EMBEDDING && u->src[0] == n)
                    range = u->src[1]->shape[0];
                if ((u->op == IR_OP_CROSS_ENTROPY || u->op == IR_OP_MASKED_LM_LOSS) && u->src[1] == n) {
                    range = u->src[0]->shape[u->src[0]->rank - 1];
                    masked |= u->op == IR_OP_MASKED_LM_LOSS;
                }
            }
            for (int64_t e = 0; e < numel; e++)
                d[e] = masked && rng_uniform() < 0.85 ? -100 : (int32_t)(rng_next() % (uint64_t)range);
            segment_tokens(g, n, d, numel);
            cpu_plan_bind(&cpu, n, d);
        }
    }

    OpStat stat[IR_OP_COUNT];
    memset(stat, 0, sizeof stat);
    int bad = 0, nl = plan->nlaunches, li = 0, nlaunched = 0;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (is_collective(n->op)) {
            fake_collective(n, cpu.buf);
            memcpy(ptr[i], cpu.buf[i], (size_t)ir_numel(n) * 4);
            for (; li < nl && plan->launches[li].node == i; li++)
                if (plan->launches[li].kernel >= 0)
                    die("%s: a collective with a kernel launch", n->name);
            continue;
        }
        cpu_plan_run_range(&cpu, i, i + 1);
        if (!chain)
            for (int s = 0; s < n->nsrc; s++) {
                const IrNode *x = n->src[s];
                /* elided: no memory; unread by the node's launches (unread_srcs): maybe dead, its bytes reused */
                if (x->op != IR_OP_INPUT && x->op != IR_OP_PARAM && !plan->bufs[x->id].elided &&
                    !(s < 64 && plan->bufs[i].unread_srcs >> s & 1))
                    memcpy(ptr[x->id], cpu_plan_data(&cpu, x), (size_t)ir_numel(x) * 4);
            }
        for (; li < nl; li++) {
            const PlanLaunch *l = &plan->launches[li];
            if (l->node != i)
                break;
            if (l->kernel < 0)
                die("%s: a host-side collective where a kernel was expected", n->name);
            void *a[32];
            int na = l->nargs;
            for (int j = 0; j < na && j < 32; j++)
                a[j] = l->targs && (l->targs[j].kind == PLAN_ARG_I32 || l->targs[j].kind == PLAN_ARG_I64)
                           ? (void *)(intptr_t)l->targs[j].value  /* a count passed by value */
                           : ptr[l->args[j]];
            /* one block an SM (PLAN_GRID_ALL_SMS): the H200's 132 */
            long long grid = l->grid == PLAN_GRID_ALL_SMS ? 132 : (long long)l->grid;
            int block = l->block;
            if (!emu_launch(plan->kernel_names[l->kernel], grid < grid_cap ? grid : grid_cap, block, a))
                return 1;
            nlaunched++;
        }
        if (n->op == IR_OP_INPUT || n->op == IR_OP_PARAM)
            continue;
        /* compare the node's result */
        int64_t numel = ir_numel(n);
        const void *want = cpu_plan_data(&cpu, n);
        const void *got = ptr[i];
        int exact = n->dtype == IR_I32 || exact_op(n->op);
        int is_grad = 0;
        for (int p = 0; p < g->nparams; p++)
            is_grad |= g->grads[p] == n;
        if (chain && !is_grad && n != g->loss)
            continue;
        double worst = 0;
        int64_t at = -1;
        if (n->dtype == IR_I32) {
            for (int64_t e = 0; e < numel; e++)
                if (((const int32_t *)want)[e] != ((const int32_t *)got)[e] && at < 0)
                    at = e;
            worst = at >= 0;
        } else {
            const float *w = want, *o = got;
            double scale = 0;
            for (int64_t e = 0; e < numel; e++)
                scale = fmax(scale, fabs(w[e]));
            for (int64_t e = 0; e < numel; e++) {
                double d = isnan(o[e]) != isnan(w[e]) ? INFINITY : isnan(o[e]) ? 0 : fabs((double)o[e] - w[e]);
                if (exact && !chain && d == 0 && memcmp(&o[e], &w[e], 4) != 0 && !isnan(o[e]))
                    d = INFINITY; /* -0 vs +0 */
                double err = exact && !chain ? (d > 0 ? INFINITY : 0) : d / (scale > 0 ? scale : 1);
                if (err > worst) {
                    worst = err;
                    at = e;
                }
            }
        }
        double tol = chain ? 1e-3 : 1e-4;
        if (stat[n->op].worst < worst)
            stat[n->op].worst = worst;
        stat[n->op].count++;
        if (worst > tol) {
            bad++;
            if (bad <= 20) {
                if (n->dtype == IR_I32)
                    fprintf(stderr, "MISMATCH %s (%s): element %lld: gpu %d, cpu %d\n", n->name, ir_node_op_name(n),
                            (long long)at, ((const int32_t *)got)[at], ((const int32_t *)want)[at]);
                else
                    fprintf(stderr, "MISMATCH %s (%s): element %lld of %lld: gpu %.9g, cpu %.9g (error %.3g%s)\n",
                            n->name, ir_node_op_name(n), (long long)at, (long long)numel, ((const float *)got)[at],
                            ((const float *)want)[at], worst, exact && !chain ? ", must be exact" : " of the largest");
            }
        }
    }
    printf("%s: %d launches emulated (%s), %d nodes compared\n", model, nlaunched,
           chain ? "chained, as on the GPU" : "each node on the CPU's inputs", g->nnodes);
    for (int op = 0; op < IR_OP_COUNT; op++)
        if (stat[op].count)
            printf("  %-22s %4d nodes, worst %s %.2e\n", ir_op_name((IrOp)op), stat[op].count,
                   (exact_op((IrOp)op) || op == IR_OP_TOPK_EXPERTS) && !chain ? "(exact)" : "error", stat[op].worst);
    if (g->loss)
        printf("  loss: gpu %.9g, cpu %.9g\n", *(float *)ptr[g->loss->id], cpu_plan_scalar(&cpu, g->loss));

    /* AdamW: the kernel against the CPU backend's formula (runtime/cpu/backend.c), bit for bit */
    {
        enum { N = 4099 };
        float *w = malloc(sizeof(float) * N * 8), *m = w + N, *v = m + N, *gr = v + N;
        float *w2 = gr + N, *m2 = w2 + N, *v2 = m2 + N;
        for (int e = 0; e < N; e++) {
            w[e] = w2[e] = (float)rng_normal();
            m[e] = m2[e] = (float)(0.01 * rng_normal());
            v[e] = v2[e] = (float)(1e-4 * rng_uniform());
            gr[e] = (float)(0.1 * rng_normal());
        }
        const IrTrain *t = &g->train;
        double lr = 1e-3, wd = t->weight_decay, clip = 0.7, bc1 = 1 - pow(t->beta1, 3), bc2 = 1 - pow(t->beta2, 3);
        emu_adamw(w2, m2, v2, gr, N, lr, wd, clip, bc1, bc2);
        /* --kernels fast's AdamW computes in fp32 (codegen/cuda_optim.c emit_adamw_fast): within 1e-5 of each
         * result against the magnitude of the terms it sums, tests/gpu/run_plan.c's rule; the reference's bit
         * for bit */
        int fast = plan->source.kernels == PLAN_KERNELS_FAST, diff = 0;
        double fast_worst = 0;
        for (int e = 0; e < N; e++) {
            double gv = gr[e] * clip, m0 = m[e], v0 = v[e], w0 = w[e];
            m[e] = (float)(t->beta1 * m[e] + (1 - t->beta1) * gv);
            v[e] = (float)(t->beta2 * v[e] + (1 - t->beta2) * gv * gv);
            double upd = (m[e] / bc1) / (sqrt(v[e] / bc2) + t->eps);
            w[e] = (float)(w[e] * (1 - lr * wd) - lr * upd);
            if (fast) {
                double em = fabs((double)m[e] - m2[e]) / (t->beta1 * fabs(m0) + (1 - t->beta1) * fabs(gv));
                double ev = fabs((double)v[e] - v2[e]) / (t->beta2 * v0 + (1 - t->beta2) * gv * gv + 1e-38);
                double ew = fabs((double)w[e] - w2[e]) / (fabs(w0) * (1 - lr * wd) + lr * fabs(upd));
                double worst = fmax(ew, fmax(em, ev));
                fast_worst = fmax(fast_worst, worst);
                diff += !(worst <= 1e-5);
            } else {
                diff += memcmp(&w[e], &w2[e], 4) != 0 || memcmp(&m[e], &m2[e], 4) != 0 || memcmp(&v[e], &v2[e], 4) != 0;
            }
        }
        if (fast)
            printf("  adamw (fp32, --kernels fast): %d of %d elements beyond 1e-5 of the CPU backend's formula, worst "
                   "%.3g\n", diff, N, fast_worst);
        else
            printf("  adamw: %d of %d elements differ from the CPU backend's formula (runtime/cpu/backend.c)\n", diff, N);
        bad += diff != 0;
        free(w);
    }
    /* the training steps' MoE metrics on the GPU (moec_moe_stats*, runtime/gpu/gpu.c) against the CPU backend's
     * arithmetic (cpu_metrics_layer) on random logits and experts of the first MoE layer's shapes, some out of
     * range: loads exact, entropy and auxiliary loss within 1e-12 (only the order of the double sums differs) */
    {
        CpuWatch w;
        cpu_metrics_watch(g, &w);
        if (w.nlayers > 0) {
            const IrNode *n = g->nodes[w.layer[0]];
            int64_t k = n->shape[n->rank - 1], N = ir_numel(n) / k, E = n->src[0]->shape[n->src[0]->rank - 1];
            float *lg = malloc(sizeof(float) * (size_t)(N * E));
            int32_t *ex = malloc(sizeof(int32_t) * (size_t)(N * k));
            double *acc = calloc((size_t)E + 3, sizeof(double)), *part = calloc(3 * (size_t)(2 * E + 1), sizeof(double));
            for (int64_t e = 0; e < N * E; e++)
                lg[e] = (float)(3 * rng_normal());
            for (int64_t e = 0; e < N * k; e++)
                ex[e] = e % 97 == 5 ? -1 : (int32_t)(rng_uniform() * (double)E) % (int32_t)E;
            BackendMetrics *m = calloc(1, sizeof *m);
            for (int pass = 0; pass < 2; pass++) {  /* two passes add up */
                emu_moe_stats(acc, part, lg, ex, N, (int)E, (int)k, 3);
                cpu_metrics_layer(n, 0, lg, ex, m);
            }
            const BackendMoeLayer *L = &m->layer[0];
            int diff = acc[0] != L->rows;
            for (int64_t e = 0; e < E; e++)
                diff += acc[1 + e] != L->load[e];
            double de = fabs(acc[1 + E] - L->entropy) / fmax(fabs(L->entropy), 1e-300),
                   da = fabs(acc[2 + E] - L->aux) / fmax(fabs(L->aux), 1e-300);
            printf("  moe metrics (%s, %lld rows, %lld experts, top-%lld, 2 passes): %d counts differ, entropy %.1e, "
                   "aux %.1e relative to the CPU backend's\n", n->name, (long long)N, (long long)E, (long long)k, diff,
                   de, da);
            bad += diff != 0 || !(de <= 1e-12) || !(da <= 1e-12);
            free(m);
            free(lg);
            free(ex);
            free(acc);
            free(part);
        }
    }
    cpu_plan_free(&cpu);
    for (int r = 0; r < 3; r++)
        free(base[r]);
    free(ptr);
    plan_free(plan);
    free(pj);

    printf("%s\n", bad ? "FAILED" : "all agree");
    return bad ? 1 : 0;
}
