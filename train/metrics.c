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
    /* a failed write (a full disk) is remembered and stops the run at the next check (trainer_log_ok) */
    if ((fprintf(t->log, "%s\n", s) < 0 || fflush(t->log) != 0) && !t->log_errno)
        t->log_errno = errno ? errno : EIO;
    cJSON_free(s);
    cJSON_Delete(o);
}

int trainer_log_ok(Trainer *t)
{
    if (!t->log_errno)
        return 1;
    trainer_error(t, "cannot write the metrics to %s: %s", t->f.log_path, strerror(t->log_errno));
    return 0;
}

void trainer_print_summary(Trainer *t)
{
    const IrGraph *g = t->g;
    /* the whole model's counts: a rank holding expert shards stands for all of them */
    int64_t total;
    double active;
    ir_param_counts(g, &total, &active);
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
    int mx = g->train.precision == IR_PREC_MXFP8, fb = g->train.precision == IR_PREC_FP8_BLOCK;
    /* the node tensors the fast kernels store in bf16 (decision 40), which the CPU rounds at the same points */
    const Plan *pl = t->pl;
    int nbf16 = 0;
    for (int b = 0; pl->bufs && b < pl->nbufs && b < g->nnodes; b++)
        nbf16 += pl->bufs[b].kind == PLAN_BUF_TENSOR && pl->bufs[b].storage == PLAN_BF16;
    char kern[160] = "";
    if (pl->source.kernels == PLAN_KERNELS_FAST)
        snprintf(kern, sizeof kern, bi.kernels[0] ? "; the fast kernels' plan: %d node tensor%s stored in bf16"
                                                  : "; the fast kernels' plan: %d node tensor%s rounded to bf16 "
                                                    "where the GPU stores them",
                 nbf16, nbf16 == 1 ? "" : "s");
    if (bi.kernels[0]) {
        /* a backend with kernels: where they came from and how a step launches them */
        printf("device: %s\n", bi.device);
        printf("plan: %d IR nodes (forward + backward), precision %s (%s%s%s); %d kernel "
               "launches per step%s%.0d%s; kernels from %s; %s\n", g->nnodes, ir_precision_name[g->train.precision],
               pl->source.kernels == PLAN_KERNELS_FAST ? "bf16 tensor cores where a node qualifies, fp32 elsewhere"
                                                       : "fp32 storage and arithmetic",
               mx   ? ", MXFP8-quantized expert GEMM operands"
               : fb ? ", fp8-block-quantized expert GEMM operands (E4M3, 1x128 activations, 128x128 weights)"
                    : "", kern,
               bi.nlaunches, bi.ncollectives ? " + " : "",
               bi.ncollectives, bi.ncollectives ? " collectives" : "", bi.kernels, bi.step);
        printf("memory planned: parameters %s, AdamW state %s, activations and gradients %s, batch and optimizer "
               "scratch %s: %s\n", pa, ad, ac, ot, tot);
    } else {
        printf("plan: %d IR nodes (forward + backward), precision %s (on the %s: fp32 arithmetic%s%s), %s\n",
               g->nnodes, ir_precision_name[g->train.precision], bi.device,
               mx   ? " on MXFP8-quantized expert GEMM operands"
               : fb ? " on fp8-block-quantized expert GEMM operands (1x128 activations, 128x128 weights)"
                    : "",
               kern, bi.step);
        printf("memory planned: parameters %s, AdamW state %s, activations and gradients %s\n", pa, ad, ac);
    }
    if (t->mfu_peak > 0)
        printf("model FLOPs: %.4g per token (the plan's forward + backward GEMMs, no recomputation); mfu against "
               "%s bf16 %.0f TFLOP/s (measured) x %d GPU%s\n", t->flops_per_token, t->mfu_gpu,
               t->mfu_peak / 1e12 / t->mfu_gpus, t->mfu_gpus, t->mfu_gpus == 1 ? "" : "s");
    else
        printf("model FLOPs: %.4g per token (the plan's forward + backward GEMMs, no recomputation); mfu n/a (%s)\n",
               t->flops_per_token, t->backend == &backend_cuda ? "no bf16 peak known for this GPU"
                                                                 : "the CPU has no bf16 tensor-core peak");
    printf("training: %lld steps, batch %lld x seq %lld = %lld tokens/step, lr %g (%s, warmup %lld, min %g), "
           "objective %s\n", (long long)t->tr.steps, (long long)t->tr.batch, (long long)t->tr.seq,
           (long long)(t->tr.batch * t->tr.seq), t->tr.lr, ir_schedule_name[t->tr.schedule], (long long)t->tr.warmup, t->tr.min_lr,
           t->obj == OBJECTIVE_MASKED ? "masked LM (15%)" : "causal LM");
}

/* ------------------------------------------------------------ --profile */

/* The roofs a row is measured against, for the GPUs whose figures we know
 * (trainer.h: TrainerPeaks; also the MFU of the progress line and the
 * capacity --dry-run plans against). Nominal: NVIDIA's H200 SXM datasheet
 * (dense, no sparsity). Measured: what the team measured on its H200 (a
 * large bf16 GEMM; a device-to-device copy; cuMemGetInfo's free memory of
 * an idle H200, 139.2 GiB, rounded down). A GEMM row's roof follows its
 * operands' storage: fp32 runs on the SIMT cores (today's kernels), bf16
 * and e4m3 on the tensor cores. */
static const TrainerPeaks known_peaks[] = {
    {"H200", 67, 782, 989, 1979, 4240, 4800, 139.0},
};

const TrainerPeaks *trainer_peaks_for(const char *device)
{
    for (size_t i = 0; i < sizeof known_peaks / sizeof known_peaks[0]; i++)
        if (strstr(device, known_peaks[i].gpu))
            return &known_peaks[i];
    return NULL;
}

void trainer_profile_begin(Trainer *t, int64_t start)
{
    if (t->f.profile <= 0)
        return;
    TrainerProfile *p = calloc(1, sizeof *p);
    if (!p)
        die("out of memory");
    p->acc.nnodes = t->g->nnodes;
    p->acc.node = calloc((size_t)t->g->nnodes + 1, sizeof *p->acc.node);
    if (!p->acc.node)
        die("out of memory");
    /* one warm-up step first (first touch of memory, caches, the GPU's graph capture and module) when the run
     * has room for it; a run of exactly N steps profiles them all */
    int64_t left = t->tr.steps - start, n = t->f.profile;
    p->warmup = left > n;
    p->first = start + 1 + p->warmup;
    p->last = p->first + n - 1;
    if (p->last > t->tr.steps)
        p->last = t->tr.steps;
    t->prof = p;
}

int trainer_profile_wants(const Trainer *t, int64_t step)
{
    return t->prof && step >= t->prof->first && step <= t->prof->last;
}

void trainer_profile_free(Trainer *t)
{
    if (!t->prof)
        return;
    free(t->prof->acc.node);
    free(t->prof);
    t->prof = NULL;
}

typedef struct ProfRow {
    const char *name, *op, *kernels, *kind;
    double seconds, launches, flops, bytes;  /* per step */
    int gemm, collective;
    double roof_tflops;                      /* 0: none known */
} ProfRow;

static int by_time(const void *a, const void *b)
{
    double x = ((const ProfRow *)a)->seconds, y = ((const ProfRow *)b)->seconds;
    return x < y ? 1 : x > y ? -1 : 0;
}

static int is_collective(IrOp op)
{
    return op == IR_OP_EP_COUNTS || op == IR_OP_EP_DISPATCH || op == IR_OP_EP_COMBINE || op == IR_OP_ALL_REDUCE;
}

/* The roof of a GEMM row: by the storage of its widest-typed operand. */
static double gemm_roof(const Plan *pl, const IrNode *n, const TrainerPeaks *pk)
{
    if (!pk)
        return 0;
    /* a node on the bf16 tensor-core kernels (--kernels fast: its launches' impl says bf16) converts its fp32
     * operands itself: the bf16 roof */
    for (int i = 0; i < pl->nlaunches; i++) {
        const char *im = pl->launches[i].impl;
        if (pl->launches[i].node != n->id || !im || strncmp(im, "fast", 4) != 0)
            continue;
        /* the fp8-block expert MLP (decision 38): its forward's two GEMMs on the FP8 tensor cores; of its
         * backward's four equal GEMMs, the data gradients on FP8 and the weight gradients on bf16 */
        if (strncmp(im, "fast: fp8-block", 15) == 0)
            return n->op == IR_OP_GROUPED_MLP ? pk->fp8_tflops
                                              : 1.0 / (0.5 / pk->fp8_tflops + 0.5 / pk->bf16_tflops);
        if (strstr(im, "bf16"))
            return pk->bf16_tflops;
    }
    int narrow = 0;
    for (int s = 0; s < n->nsrc && pl->bufs; s++) {
        PlanStorage st = pl->bufs[n->src[s]->id].storage;
        if (st == PLAN_E4M3 && narrow < 2)
            narrow = 2;
        else if (st == PLAN_BF16 && !narrow)
            narrow = 1;
        else if (st == PLAN_F32 && ir_dtype_is_float(n->src[s]->dtype))
            return pk->fp32_tflops;  /* an fp32 operand: the SIMT cores */
    }
    return narrow == 2 ? pk->fp8_tflops : narrow == 1 ? pk->bf16_tflops : pk->fp32_tflops;
}

static void fmt_rate(char *buf, size_t n, double v)
{
    if (v <= 0 || !isfinite(v))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%.3g", v);
}

static void fmt_pct(char *buf, size_t n, double v, double roof)
{
    if (roof <= 0 || v <= 0 || !isfinite(v))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, "%.1f%%", 100 * v / roof);
}

/* One line of the table; pos: its place by time (0: a summary line) */
static void print_row(int pos, const ProfRow *r, double step, const TrainerPeaks *pk)
{
    double tf = r->gemm && r->seconds > 0 ? r->flops / r->seconds / 1e12 : 0;
    double gb = r->seconds > 0 ? r->bytes / r->seconds / 1e9 : 0;
    char tfs[24], tfp[24], gbs[24], gbp[24];
    fmt_rate(tfs, sizeof tfs, tf);
    fmt_pct(tfp, sizeof tfp, tf, r->roof_tflops);
    fmt_rate(gbs, sizeof gbs, gb);
    fmt_pct(gbp, sizeof gbp, gb, pk ? pk->hbm_gbps : 0);
    char kern[48];
    const char *k = r->kernels && r->kernels[0] ? r->kernels : pos ? "-" : "";
    snprintf(kern, sizeof kern, "%s", k);
    if (strlen(k) >= sizeof kern)
        memcpy(kern + sizeof kern - 4, "...", 4);
    char ps[16] = "";
    if (pos)
        snprintf(ps, sizeof ps, "%d", pos);
    char ls[24] = "";
    if (r->launches > 0)
        snprintf(ls, sizeof ls, "%.0f", r->launches);
    printf("%3s  %-44s %-20s %-47s %8s %9.3f %6.1f%% %8s %6s %8s %6s\n", ps, r->name, r->op, kern, ls,
           1e3 * r->seconds, 100 * r->seconds / (step > 0 ? step : 1), tfs, tfp, gbs, gbp);
}

static cJSON *row_json(const ProfRow *r, double step, const TrainerPeaks *pk)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", "profile");
    cJSON_AddStringToObject(o, "kind", r->kind);
    cJSON_AddStringToObject(o, "node", r->name);
    cJSON_AddStringToObject(o, "op", r->op);
    cJSON_AddStringToObject(o, "kernels", r->kernels ? r->kernels : "");
    cJSON_AddNumberToObject(o, "launches_per_step", r->launches);
    cJSON_AddNumberToObject(o, "ms_per_step", 1e3 * r->seconds);
    cJSON_AddNumberToObject(o, "share", step > 0 ? r->seconds / step : 0);
    cJSON_AddNumberToObject(o, "flops_per_step", r->flops);
    cJSON_AddNumberToObject(o, "bytes_per_step", r->bytes);
    double tf = r->gemm && r->seconds > 0 ? r->flops / r->seconds / 1e12 : 0;
    double gb = r->seconds > 0 ? r->bytes / r->seconds / 1e9 : 0;
    if (r->gemm)
        cJSON_AddNumberToObject(o, "tflops", tf);
    cJSON_AddNumberToObject(o, "gbps", gb);
    if (r->gemm && r->roof_tflops > 0)
        cJSON_AddNumberToObject(o, "tflops_of_peak", tf / r->roof_tflops);
    if (pk)
        cJSON_AddNumberToObject(o, "gbps_of_peak", gb / pk->hbm_gbps);
    return o;
}

enum { PROFILE_TOP = 30 };

void trainer_profile_report(Trainer *t)
{
    TrainerProfile *p = t->prof;
    if (!p || p->reported)
        return;
    p->reported = 1;
    if (!is_rank0(t))
        return;
    const BackendProfile *a = &p->acc;
    if (a->steps == 0) {
        printf("profile: no step was profiled: the run ended before step %lld\n", (long long)p->first);
        return;
    }
    const IrGraph *g = t->g;
    const Plan *pl = t->pl;
    BackendInfo bi;
    t->be->ops->info(t->be, &bi);
    const TrainerPeaks *pk = t->backend == &backend_cuda ? trainer_peaks_for(bi.device) : NULL;
    double ns = a->steps, step = a->step_seconds / ns;
    ProfRow *rows = calloc((size_t)g->nnodes + BACKEND_PROFILE_NEXTRA, sizeof *rows);
    if (!rows)
        die("out of memory");
    int nr = 0;
    double nodes = 0, coll = 0, opt = 0, other = 0, flops = 0, bytes = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const BackendProfileRow *b = &a->node[i];
        if (!b->launches)
            continue;
        const IrNode *n = g->nodes[i];
        PlanCost c = plan_node_cost(pl, n);
        ProfRow *r = &rows[nr++];
        r->name = n->name;
        r->op = ir_node_op_name(n);
        r->kernels = b->kernels;
        r->seconds = b->seconds / ns;
        r->launches = (double)b->launches / ns;
        r->flops = c.flops;
        r->bytes = c.bytes;
        r->gemm = c.gemm;
        r->collective = is_collective(n->op);
        r->kind = r->collective ? "collective" : "node";
        r->roof_tflops = c.gemm ? gemm_roof(pl, n, pk) : 0;
        if (r->collective)
            coll += r->seconds;
        else
            nodes += r->seconds;
        flops += c.flops;
        bytes += c.bytes;
    }
    static const char *const extra_name[BACKEND_PROFILE_NEXTRA] = {
        "(optimizer: grad norm + clip + AdamW)", "(gradient all-reduce, bucketed)", "(batch to the device)"};
    static const char *const extra_op[BACKEND_PROFILE_NEXTRA] = {"optimizer", "all_reduce", "copy"};
    static const char *const extra_kind[BACKEND_PROFILE_NEXTRA] = {"optimizer", "collective", "batch"};
    for (int e = 0; e < BACKEND_PROFILE_NEXTRA; e++) {
        const BackendProfileRow *b = &a->extra[e];
        if (!b->launches)
            continue;
        ProfRow *r = &rows[nr++];
        r->name = extra_name[e];
        r->op = extra_op[e];
        r->kernels = b->kernels;
        r->seconds = b->seconds / ns;
        r->launches = (double)b->launches / ns;
        r->kind = extra_kind[e];
        if (e == BACKEND_PROFILE_OPTIMIZER) {
            /* reads each gradient twice (norm, update), reads and writes parameters and both moments */
            r->bytes = (double)t->nparams_total * 4 * (2 + 2 + 2 + 2);
            opt += r->seconds;
        } else if (e == BACKEND_PROFILE_BUCKETS) {
            r->collective = 1;
            coll += r->seconds;
        } else {
            r->bytes = 2.0 * (double)ir_numel(t->tokens_in) * 4;
            other += r->seconds;
        }
    }
    qsort(rows, (size_t)nr, sizeof *rows, by_time);
    double attributed = nodes + coll + opt + other, gap = step - attributed;
    if (gap < 0)
        gap = 0;

    printf("\nprofile: steps %lld-%lld (%d step%s%s), %s, timed with %s; per step, means over the profiled steps\n",
           (long long)p->first, (long long)(p->first + a->steps - 1), a->steps, a->steps == 1 ? "" : "s",
           p->warmup ? ", after 1 warm-up step" : ", no warm-up step: the first includes first-touch costs",
           t->backend == &backend_cuda ? "the GPU launch by launch (no CUDA graph)" : bi.device, a->clock);
    if (t->world > 1)
        printf("profile: rank 0's view of %d ranks\n", t->world);
    printf("profile: step %.3f ms measured = nodes %.3f ms + collectives %.3f ms + optimizer %.3f ms + batch %.3f "
           "ms + unattributed %.3f ms (launch gaps, host work); %.3g GFLOP, %.3g GB per step\n", 1e3 * step,
           1e3 * nodes, 1e3 * coll, 1e3 * opt, 1e3 * other, 1e3 * gap, flops / 1e9, bytes / 1e9);
    if (pk)
        printf("profile: peaks (%s): GEMMs on fp32 operands %.0f TFLOP/s (SIMT, nominal), bf16 %.0f TFLOP/s "
               "(tensor cores, measured; %.0f nominal), e4m3 %.0f TFLOP/s (nominal); HBM %.2f TB/s (measured; %.1f "
               "nominal)\n", pk->gpu, pk->fp32_tflops, pk->bf16_tflops, pk->bf16_nominal, pk->fp8_tflops,
               pk->hbm_gbps / 1e3, pk->hbm_nominal / 1e3);
    else
        printf("profile: no peaks known for this device: achieved rates only\n");
    printf("%3s  %-44s %-20s %-47s %8s %9s %7s %8s %6s %8s %6s\n", "#", "node", "op", "kernels", "launches", "ms/step",
           "share", "TFLOP/s", "%peak", "GB/s", "%peak");
    int top = nr < PROFILE_TOP ? nr : PROFILE_TOP;
    for (int i = 0; i < top; i++)
        print_row(i + 1, &rows[i], step, pk);
    if (nr > top) {
        ProfRow rest = {0};
        char name[64];
        snprintf(name, sizeof name, "(%d more rows)", nr - top);
        rest.name = name;
        rest.op = "";
        rest.kernels = "";
        for (int i = top; i < nr; i++) {
            rest.seconds += rows[i].seconds;
            rest.launches += rows[i].launches;
            rest.bytes += rows[i].bytes;
        }
        print_row(0, &rest, step, pk);
    }
    ProfRow un = {.name = "(unattributed: launch gaps, host work)", .op = "", .kernels = "", .seconds = gap};
    print_row(0, &un, step, pk);
    double launches = 0;
    for (int i = 0; i < nr; i++)
        launches += rows[i].launches;
    ProfRow tot = {.name = "(step)", .op = "", .kernels = "", .seconds = step, .launches = launches};
    print_row(0, &tot, step, pk);
    fflush(stdout);

    if (t->log) {
        for (int i = 0; i < nr; i++)
            trainer_log(t, row_json(&rows[i], step, pk));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "profile");
        cJSON_AddStringToObject(o, "kind", "total");
        cJSON_AddNumberToObject(o, "first_step", (double)p->first);
        cJSON_AddNumberToObject(o, "steps", a->steps);
        cJSON_AddBoolToObject(o, "warmup", p->warmup);
        cJSON_AddStringToObject(o, "device", bi.device);
        cJSON_AddStringToObject(o, "clock", a->clock);
        cJSON_AddNumberToObject(o, "step_ms", 1e3 * step);
        cJSON_AddNumberToObject(o, "nodes_ms", 1e3 * nodes);
        cJSON_AddNumberToObject(o, "collectives_ms", 1e3 * coll);
        cJSON_AddNumberToObject(o, "optimizer_ms", 1e3 * opt);
        cJSON_AddNumberToObject(o, "batch_ms", 1e3 * other);
        cJSON_AddNumberToObject(o, "unattributed_ms", 1e3 * gap);
        cJSON_AddNumberToObject(o, "flops_per_step", flops);
        cJSON_AddNumberToObject(o, "bytes_per_step", bytes);
        cJSON_AddNumberToObject(o, "rows", nr);
        if (pk) {
            cJSON *k = cJSON_AddObjectToObject(o, "peaks");
            cJSON_AddStringToObject(k, "gpu", pk->gpu);
            cJSON_AddNumberToObject(k, "fp32_tflops", pk->fp32_tflops);
            cJSON_AddNumberToObject(k, "bf16_tflops", pk->bf16_tflops);
            cJSON_AddNumberToObject(k, "bf16_tflops_nominal", pk->bf16_nominal);
            cJSON_AddNumberToObject(k, "e4m3_tflops_nominal", pk->fp8_tflops);
            cJSON_AddNumberToObject(k, "hbm_gbps", pk->hbm_gbps);
            cJSON_AddNumberToObject(k, "hbm_gbps_nominal", pk->hbm_nominal);
        }
        trainer_log(t, o);
    }
    free(rows);
}
