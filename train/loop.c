/* loop.c - one rank's run: parameters initialised (or loaded), the step
 * loop with its learning-rate schedule, evaluation on the validation split,
 * progress lines, checkpoints. Everything that influences a step
 * (parameters, AdamW moments, the step number, the loader's state) is in
 * the checkpoint, and nothing else is random, so --resume continues
 * bit-identically. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/cpu/cpu.h"
#include "../util/util.h"
#include "trainer.h"

/* splitmix64 streams for parameter initialisation: one per parameter,
 * keyed by its name, so adding a parameter does not reshuffle the others. */
typedef struct Rng {
    uint64_t s;
} Rng;

static uint64_t rng_u64(Rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(Rng *r) { return ((double)(rng_u64(r) >> 11) + 0.5) / 9007199254740992.0; }

static double rng_normal(Rng *r)
{
    return sqrt(-2.0 * log(rng_unit(r))) * cos(6.283185307179586 * rng_unit(r));
}


static int find_inputs(Trainer *t)
{
    const IrGraph *g = t->g;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->op == IR_OP_EMBEDDING && n->src[0]->op == IR_OP_INPUT)
            t->tokens_in = n->src[0];
        if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_MASKED_LM_LOSS) && n->src[1]->op == IR_OP_INPUT)
            t->targets_in = n->src[1];
    }
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (n->op == IR_OP_INPUT && n != t->tokens_in && n != t->targets_in) {
            fprintf(stderr, "%s: error: input `%s` is neither the token ids (fed to embedding) nor the targets "
                    "(fed to the loss); the training binary feeds only those two\n", t->prog, n->label);
            return 0;
        }
    }
    if (!t->tokens_in || !t->targets_in) {
        fprintf(stderr, "%s: error: the model must embed an i32 input of token ids and compute its loss against "
                "an i32 input of targets\n", t->prog);
        return 0;
    }
    int64_t want = t->local_batch * t->tr.seq;
    if (ir_numel(t->tokens_in) != want || ir_numel(t->targets_in) != want) {
        fprintf(stderr, "%s: error: the inputs must be [B, S] (%lld x %lld tokens)\n", t->prog,
                (long long)t->local_batch, (long long)t->tr.seq);
        return 0;
    }
    return 1;
}

/* Parameter initialisation over all CPU threads (a few billion values take minutes on one): the values are
 * those of one pass over each parameter's own stream, whatever the threads. Element e of a parameter is
 * drawn after e values (skip + e for an expert shard's), each of `calls` draws of rng_u64, which advances the
 * state by a constant: the stream at e is the seed plus e * calls of it. */
typedef struct InitJob {
    Trainer *t;
    int64_t *start;  /* [nparams + 1]: each parameter's first element in the concatenation of this rank's */
} InitJob;

static void init_range(void *ctx, int64_t lo, int64_t hi)
{
    InitJob *job = ctx;
    Trainer *t = job->t;
    const IrGraph *g = t->g;
    for (int p = 0; p < g->nparams; p++) {
        int64_t a = lo > job->start[p] ? lo : job->start[p], b = hi < job->start[p + 1] ? hi : job->start[p + 1];
        if (a >= b)
            continue;
        a -= job->start[p];
        b -= job->start[p];
        IrNode *n = g->params[p];
        float *w = t->params + t->param_off[p];
        /* an expert shard takes its slice of the full tensor's values, so
         * every ep gives the same initial model */
        int64_t shard = ir_has_attr(n, IR_ATTR_SHARD) ? n->attr[IR_ATTR_SHARD].i : 1;
        int64_t skip = shard > 1 ? ir_numel(n) * comm_ep_rank(t->comm) : 0;
        IrInit init = (IrInit)ir_attr_e(n, IR_ATTR_INIT);
        uint64_t calls = init == IR_INIT_NORMAL ? 2 : init == IR_INIT_UNIFORM ? 1 : 0;
        Rng r = {(hash64(n->name, strlen(n->name)) ^ (uint64_t)t->f.seed * 0x9e3779b97f4a7c15ull) +
                 (uint64_t)(skip + a) * calls * 0x9e3779b97f4a7c15ull};
        for (int64_t e = a; e < b; e++) {
            double v = 0;
            if (init == IR_INIT_NORMAL)
                v = n->attr[IR_ATTR_STD].f * rng_normal(&r);
            else if (init == IR_INIT_UNIFORM)
                v = n->attr[IR_ATTR_BOUND].f * (2 * rng_unit(&r) - 1);
            else if (init == IR_INIT_CONSTANT)
                v = n->attr[IR_ATTR_VALUE].f;
            else if (init == IR_INIT_ONES)
                v = 1;
            w[e] = (float)v;
        }
    }
}

static void init_params(Trainer *t)
{
    const IrGraph *g = t->g;
    InitJob job = {t, malloc(sizeof(int64_t) * ((size_t)g->nparams + 1))};
    if (!job.start)
        die("out of memory");
    job.start[0] = 0;
    for (int p = 0; p < g->nparams; p++)
        job.start[p + 1] = job.start[p] + ir_numel(g->params[p]);
    /* one thread for a small model (the splitting would cost more than it saves), else all of them */
    int64_t n = job.start[g->nparams];
    if (n < (INT64_C(1) << 16))
        init_range(&job, 0, n);
    else
        cpu_parallel_for(n, init_range, &job);
    free(job.start);
}

static double lr_at(const Trainer *t, int64_t step)
{
    const IrTrain *tr = &t->tr;
    double peak = tr->lr, lo = tr->min_lr < peak ? tr->min_lr : peak;
    if (tr->schedule == IR_SCHED_CONSTANT)
        return peak;
    if (step <= tr->warmup)
        return peak * (double)step / (double)(tr->warmup > 0 ? tr->warmup : 1);
    int64_t span = tr->steps - tr->warmup;
    double progress = span > 0 ? (double)(step - tr->warmup) / (double)span : 1.0;
    if (progress > 1)
        progress = 1;
    return lo + 0.5 * (peak - lo) * (1 + cos(3.141592653589793 * progress));
}

static int64_t count_targets(const int32_t *tg, int64_t n)
{
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++)
        c += tg[i] != DATA_IGNORE_INDEX;
    return c;
}

/* The packing in force: --packing or the model's, which must agree with the
 * compiled graph: attention segmented by sequence (a segment_ids node, the
 * segment-attention pass) for packed and rows, not for concat. */
static int choose_packing(Trainer *t)
{
    int segmented = 0;
    for (int i = 0; i < t->g->nnodes; i++)
        segmented |= t->g->nodes[i]->op == IR_OP_SEGMENT_IDS;
    IrPacking model = ir_train_packing(&t->tr);
    t->packing = t->f.packing >= 0 ? (IrPacking)t->f.packing : model;
    if (segmented && t->packing == IR_PACK_CONCAT)
        return !trainer_error(t, "--packing concat: this model was compiled with attention kept inside each "
                             "sequence (packing %s); write `packing concat` in its train section and compile it "
                             "again to attend across sequences", ir_packing_name[model]);
    if (!segmented && t->packing != IR_PACK_CONCAT)
        return !trainer_error(t, "%s%s: this model was compiled with attention across sequences (packing concat); "
                             "write `packing %s` in its train section and compile it again",
                             t->f.packing >= 0 ? "--packing " : "packing ", ir_packing_name[t->packing],
                             ir_packing_name[t->packing]);
    return 1;
}

/* Forward only, over `batches` batches of a loader (all rows when <= 0):
 * the token-weighted mean loss. */
static int evaluate(Trainer *t, DataLoader *l, int64_t batches, int64_t *tokens_out, double *loss_out)
{
    data_loader_reset(l);
    double sums[2] = {0, 0};  /* loss x tokens, tokens */
    BackendMetrics *m = t->be->ops->read_metrics ? calloc(1, sizeof *m) : NULL;
    if (m)
        t->be->ops->read_metrics(t->be, 1, m);  /* drop what earlier passes left */
    int64_t bs = t->local_batch * t->tr.seq;
    /* to the end of the pass (every rank's loader is the same, so they stop together) */
    for (int64_t b = 0; (batches <= 0 || b < batches) && !data_loader_done(l); b++) {
        data_loader_next(l, t->gtokens, t->gtargets);
        memcpy(t->tokens, t->gtokens + t->rank * bs, sizeof(int32_t) * (size_t)bs);
        memcpy(t->targets, t->gtargets + t->rank * bs, sizeof(int32_t) * (size_t)bs);
        int64_t c = count_targets(t->targets, bs);
        /* every rank runs the plan: its collectives need all of them */
        double loss;
        if (!t->be->ops->eval(t->be, t->tokens, t->targets, &loss)) {
            free(m);
            return !trainer_error(t, "evaluation on %s: %s", t->be->ops->name, t->be->ops->error(t->be));
        }
        /* the language-model loss, without the auxiliary terms, where the backend reads it */
        if (m && t->be->ops->read_metrics(t->be, 1, m) && m->has_lm && m->passes == 1)
            loss = m->lm_loss;
        if (c) {
            sums[0] += loss * (double)c;
            sums[1] += (double)c;
        }
    }
    free(m);
    if (t->world > 1 && !trainer_allreduce_f64(t, COMM_WORLD, sums, 2))
        return !trainer_error(t, "evaluation: %s", t->comm->error);
    if (tokens_out)
        *tokens_out = (int64_t)sums[1];
    *loss_out = sums[1] > 0 ? sums[0] / sums[1] : NAN;
    return 1;
}

/* ------------------------------------------------------------ the GPU's steps */

/* A non-finite loss (returns 0 after the message): the advice depends on where it came from. Parameters or moments that went non-finite
 * (named: the first such tensor) point at the update; all finite points at the forward pass. */
static int nonfinite_loss(Trainer *t, double loss, int64_t step)
{
    const IrGraph *g = t->g;
    if (t->be->ops->get_state(t->be, t->params, t->adam)) {
        for (int k = 0; k < 3; k++)
            for (int p = 0; p < g->nparams; p++) {
                const float *x = (k == 0 ? t->params : k == 1 ? t->adam : t->adam + t->nparams_total) + t->param_off[p];
                int64_t n = ir_numel(g->params[p]);
                for (int64_t i = 0; i < n; i++)
                    if (!isfinite(x[i]))
                        return !trainer_error(t, "the loss is %g at step %lld and %s%s holds non-finite values (the "
                                             "first at flat index %lld; the first such tensor in the model's order): "
                                             "the update diverged; lower the learning rate (--lr) or clip the "
                                             "gradients harder (grad_clip)%s", loss, (long long)step,
                                             k == 0 ? "parameter " : k == 1 ? "adam_m." : "adam_v.",
                                             g->params[p]->name, (long long)i,
                                             t->f.resume || t->f.init_path ? ", or check the checkpoint it started from"
                                                                           : "");
            }
    }
    return !trainer_error(t, "the loss is %g at step %lld with every parameter finite: the forward pass overflowed; "
                         "lower the learning rate (--lr)", loss, (long long)step);
}

/* Reads the losses and norms of the GPU steps run since the last read:
 * the ranks' mean, the first non-finite one reported with its step. */
/* The losses of the steps since the last drain: the mean over the ranks
 * of each step's loss, added to the log interval's sum. */
static int drain(Trainer *t, double *loss_sum, int *loss_n, double *gnorm, double *last)
{
    double losses[1024], norms[1024];
    int n = 0;
    if (!t->be->ops->read_steps(t->be, losses, norms, &n))
        return !trainer_error(t, "step %lld on %s: %s", (long long)t->step, t->be->ops->name,
                              t->be->ops->error(t->be));
    if (t->world > 1 && n > 0 && !trainer_allreduce_f64(t, COMM_WORLD, losses, n))
        return !trainer_error(t, "%s", t->comm->error);
    for (int i = 0; i < n; i++) {
        double loss = losses[i] / t->world;
        if (!isfinite(loss))
            return nonfinite_loss(t, loss, t->step - n + 1 + i);
        *loss_sum += loss;
        (*loss_n)++;
        *last = loss;
    }
    if (n > 0)
        *gnorm = norms[n - 1];
    t->unread = 0;
    return 1;
}


/* ------------------------------------------------------------ main */


/* One rank's training run. t arrives with its flags, program name, plan,
 * communicator, rank, world, ep, dp and the shared data. */
int trainer_run(Trainer *t)
{
    t->best_val = NAN;
    t->best_step = -1;
    if (t->f.steps >= 0)
        t->tr.steps = t->f.steps;
    if (t->f.lr > 0)
        t->tr.lr = t->f.lr;
    if (t->f.warmup >= 0)
        t->tr.warmup = t->f.warmup;
    if (t->f.min_lr >= 0)
        t->tr.min_lr = t->f.min_lr;
    if (t->f.schedule >= 0)
        t->tr.schedule = (IrSchedule)t->f.schedule;
    if (is_rank0(t) && !t->f.eval_path && t->tr.schedule == IR_SCHED_WARMUP_COSINE && t->tr.warmup > t->tr.steps)
        fprintf(stderr, "%s: warning: warmup %lld exceeds the %lld steps: the learning rate rises to %.3g of its peak "
                "%g and never decays (set warmup below steps, e.g. --set warmup=%lld)\n", t->prog,
                (long long)t->tr.warmup, (long long)t->tr.steps,
                (double)t->tr.steps / (double)t->tr.warmup, t->tr.lr, (long long)(t->tr.steps / 10));
    t->alpha = alphabet_get(t->tr.alphabet == IR_ALPHABET_DNA ? ALPHABET_DNA : ALPHABET_PROTEIN);
    t->obj = t->tr.objective == IR_OBJ_MASKED_LM ? OBJECTIVE_MASKED : OBJECTIVE_CAUSAL;
    t->local_batch = t->tr.batch / t->world;
    if (!find_inputs(t))
        return trainer_error(t, "the model's inputs do not fit the training binary");
    if (!choose_packing(t))
        return 1;
    /* the checkpoint directory locked and checked before any work that a save at the end would lose */
    if (is_rank0(t) && t->f.ckpt_dir && !t->f.eval_path && !trainer_ckpt_prepare(t))
        return 1;

    /* parameters and AdamW moments, one allocation each */
    const IrGraph *g = t->g;
    t->param_off = calloc((size_t)g->nparams + 1, sizeof *t->param_off);
    for (int p = 0; p < g->nparams; p++) {
        t->param_off[p] = t->nparams_total;
        t->nparams_total += ir_numel(g->params[p]);
    }
    /* with --grad-accum N the loader draws N batches at once: the rows of one batch N times as large */
    int64_t gsize = t->tr.batch * t->tr.seq * t->f.grad_accum, lsize = t->local_batch * t->tr.seq;
    t->params = calloc((size_t)t->nparams_total, sizeof(float));
    /* --eval runs forward passes only: no AdamW state here or in the backend */
    t->adam = t->f.eval_path ? NULL : calloc((size_t)t->nparams_total * 2, sizeof(float));
    t->tokens = calloc((size_t)lsize, sizeof(int32_t));
    t->targets = calloc((size_t)lsize, sizeof(int32_t));
    t->gtokens = calloc((size_t)gsize, sizeof(int32_t));
    t->gtargets = calloc((size_t)gsize, sizeof(int32_t));
    if (!t->params || (!t->adam && !t->f.eval_path) || !t->tokens || !t->targets || !t->gtokens || !t->gtargets)
        return trainer_error(t, "out of memory for %lld parameters", (long long)t->nparams_total);
    {
        char err[2048];
        BackendOptions o = {0};
        o.graphs = !t->f.no_graphs;
        o.ring = (int)(t->f.log_every < 1024 ? t->f.log_every : 1024);
        /* --eval: the activations planned up to the loss, no gradients, no AdamW state (as embed and score);
         * MOEC_EVAL_TRAINING_PLAN=1 evaluates on the training plan's memory instead, for tests to compare */
        const char *tp = getenv("MOEC_EVAL_TRAINING_PLAN");
        o.forward_only = t->f.eval_path != NULL && !(tp && !strcmp(tp, "1"));
        int no_kernels = 0;
        o.no_kernels = &no_kernels;
        t->be = t->backend->create(t->pl, t->comm, &o, err, sizeof err);
        /* --device auto falls back to the CPU when the GPU has no kernels (none embedded for it and no NVRTC),
         * except under NCCL, whose ranks are GPUs; other failures (a plan that does not fit, a driver error)
         * stop the run: the CPU would not do better */
        if (!t->be && (!no_kernels || strcmp(t->f.device, "auto") != 0 || !strcmp(t->comm->ops->name, "nccl")))
            return trainer_error(t, "the %s backend: %s", t->backend == &backend_cuda ? "GPU" : t->backend->name, err);
        if (!t->be) {
            if (is_rank0(t))
                printf("device: cpu (the GPU backend could not start: %s; --device cuda makes this an error)\n", err);
            t->backend = &backend_cpu;
            t->be = t->backend->create(t->pl, t->comm, &o, err, sizeof err);
            if (!t->be)
                return trainer_error(t, "the cpu backend: %s", err);
        }
    }
    {
        /* MFU: the plan's model FLOPs per token against the bf16 peak of the GPUs the run uses (the simulated
         * ranks share one); none on the CPU, which has no bf16 tensor-core peak to speak of */
        t->flops_per_token = plan_model_flops(g) / (double)(t->local_batch * t->tr.seq);
        BackendInfo bi;
        t->be->ops->info(t->be, &bi);
        const TrainerPeaks *pk = t->backend == &backend_cuda ? trainer_peaks_for(bi.device) : NULL;
        if (pk) {
            int gpus = t->world > 1 && !strcmp(t->comm->ops->name, "sim") ? 1 : t->world;
            t->mfu_peak = pk->bf16_tflops * 1e12 * gpus;
            t->mfu_gpu = pk->gpu;
            t->mfu_gpus = gpus;
        }
    }
    if (t->f.grad_accum > 1 && !t->f.eval_path) {
        if (!t->be->ops->accum_step)
            return trainer_error(t, "--grad-accum is not implemented on the %s backend yet: use --device cpu",
                                 t->be->ops->name);
    }
    init_params(t);

    /* --eval FILE: the loss over all its sequences, then exit */
    if (t->f.eval_path) {
        char path[4096];
        const char *ck = t->f.init_path ? t->f.init_path : trainer_ckpt_path(t, path, sizeof path);
        if (!trainer_load_checkpoint(t, ck, 0))
            return trainer_error(t, "cannot use %s", ck);
        if (!t->be->ops->put_state(t->be, t->params, NULL))
            return trainer_error(t, "%s", t->be->ops->error(t->be));
        if (is_rank0(t))
            trainer_print_eval_memory(t, stderr);  /* stdout holds the one JSON line */
        return trainer_eval_file(t);
    }

    /* validation: --val-data, or the fixed 1% hash split of the training data */
    DataOptions to = DATA_OPTIONS_DEFAULT, vo = DATA_OPTIONS_DEFAULT;
    to.one_per_row = vo.one_per_row = t->packing == IR_PACK_ROWS;
    const FastaSet *vs = t->shared_val ? t->shared_val : t->shared;
    if (t->shared_val) {
        to.val_fraction = 0;
        vo.val_fraction = 1.0;
    }
    if (!data_loader_init_opts(&t->train_loader, t->shared, t->alpha, DATA_SPLIT_TRAIN,
                               t->tr.batch * (t->f.eval_path ? 1 : t->f.grad_accum), t->tr.seq,
                               (uint64_t)t->f.seed, t->obj, &to))
        return trainer_error(t, "the training split is empty: give more sequences");
    t->have_val = data_loader_init_opts(&t->val_loader, vs, t->alpha, DATA_SPLIT_VAL, t->tr.batch, t->tr.seq,
                                        (uint64_t)t->f.seed, t->obj, &vo);
    DataSplitStats ss[2], vss[2];
    data_split_stats(t->shared, to.val_fraction, ss);
    if (t->shared_val) {
        data_split_stats(vs, vo.val_fraction, vss);
        ss[1] = vss[1];
    }
    t->unigram = data_unigram_entropy(vs, vo.val_fraction, DATA_SPLIT_VAL, t->obj);

    if (t->f.init_path && !trainer_load_checkpoint(t, t->f.init_path, 0))
        return trainer_error(t, "cannot start from %s", t->f.init_path);
    if (t->f.resume) {
        char path[4096];
        if (access(trainer_ckpt_path(t, path, sizeof path), F_OK) != 0)
            return trainer_error(t, "--resume: no checkpoint at %s", path);
        if (!trainer_load_checkpoint(t, path, 1))
            return trainer_error(t, "cannot resume from %s", path);
        if (is_rank0(t))
            printf("resumed from %s at step %lld\n", path, (long long)t->step);
    }
    if (!t->be->ops->put_state(t->be, t->params, t->adam))
        return trainer_error(t, "%s", t->be->ops->error(t->be));
    if (t->f.dump_dir && is_rank0(t) && mkdir(t->f.dump_dir, 0755) != 0 && errno != EEXIST)
        return trainer_error(t, "cannot create --dump directory %s: %s", t->f.dump_dir, strerror(errno));
    if (is_rank0(t) && t->f.log_path) {
        t->log = fopen(t->f.log_path, t->f.resume ? "a" : "w");
        if (!t->log)
            return trainer_error(t, "cannot write %s: %s", t->f.log_path, strerror(errno));
    }

    if (is_rank0(t)) {
        trainer_print_summary(t);
        if (t->f.grad_accum > 1)
            printf("gradient accumulation: %lld micro-batches of %lld sequences per step, their gradients weighted by "
                   "their scored tokens: the step of a batch of %lld\n", (long long)t->f.grad_accum,
                   (long long)t->tr.batch, (long long)(t->f.grad_accum * t->tr.batch));
        if (t->world > 1)
            printf("ranks: %d (expert parallel %lld x data parallel %lld), %lld sequences per rank and step\n",
                   t->world, (long long)t->ep, (long long)t->dp, (long long)t->local_batch);
        for (int s = 0; s < 2; s++) {
            char r[32];
            fmt_count(r, sizeof r, (double)ss[s].nresidues);
            printf("data %s: %lld sequences, %s residues, %lld unknown characters mapped to %s%s\n",
                   s ? "validation" : "train", (long long)ss[s].nseq, r, (long long)ss[s].nunknown,
                   t->alpha->tokens[t->alpha->unk],
                   s == 0 && t->shared->shards ? " (shards, memory-mapped)"
                   : s == 1 && t->shared_val ? " (--val-data)"
                   : s == 1 && t->shared->cluster_of ? " (1% of the training clusters, a fixed hash of each "
                                                       "cluster's index)"
                   : s == 1 ? " (1% of the training data, a fixed hash of each sequence's index)" : "");
        }
        /* most letters unknown: likely protein FASTA given to a DNA model (or the reverse, or not sequences) */
        int64_t unk = ss[0].nunknown + ss[1].nunknown, res = ss[0].nresidues + ss[1].nresidues;
        if (res > 0 && unk * 10 > res)
            fprintf(stderr, "%s: warning: %.0f%% of the data's letters are not in the %s alphabet and became %s: is "
                    "this %s data? (the model's train section says `alphabet %s`)\n", t->prog,
                    100.0 * (double)unk / (double)res, t->alpha->name, t->alpha->tokens[t->alpha->unk],
                    t->tr.alphabet == IR_ALPHABET_DNA ? "nucleotide" : "protein", t->alpha->name);
        if (!t->have_val)
            printf("unigram entropy of the validation targets: none (the validation split is empty: give more "
                   "sequences for a validation loss)\n");
        else
            printf("unigram entropy of the validation targets: %.4f nats (the loss of a model that ignores "
                   "context)\n", t->unigram);
        printf("packing: %s\n", t->packing == IR_PACK_ROWS ? "rows (one sequence per row, cropped and padded; "
                                  "padding masked out of attention, loss and tokens/s)"
                                  : t->packing == IR_PACK_PACKED ? "packed (sequences back to back, attention kept "
                                  "inside each)" : "concat (sequences back to back, attention across them)");
        cJSON *start = cJSON_CreateObject();
        cJSON_AddStringToObject(start, "event", "start");
        cJSON_AddStringToObject(start, "model", g->model);
        cJSON_AddNumberToObject(start, "params", (double)t->nparams_total);
        if (t->have_val)  /* without a validation split there is no reference (not an entropy of 0) */
            cJSON_AddNumberToObject(start, "unigram_entropy", t->unigram);
        cJSON_AddNumberToObject(start, "start_step", (double)t->step);
        cJSON_AddNumberToObject(start, "ranks", t->world);
        cJSON_AddNumberToObject(start, "model_flops_per_token", t->flops_per_token);
        if (t->mfu_peak > 0)
            cJSON_AddNumberToObject(start, "mfu_peak_flops", t->mfu_peak);
        else
            cJSON_AddNullToObject(start, "mfu_peak_flops");
        trainer_log(t, start);
        fflush(stdout);
        if (!trainer_log_ok(t))
            return 1;
    }

    double t0 = wall_seconds(), tlast = t0;
    int64_t first = t->step, tokens_since_log = 0;
    double loss_sum = 0;
    int loss_n = 0, measured = 0;
    trainer_profile_begin(t, first);
    while (t->step < t->tr.steps) {
        t->step++;
        data_loader_next(&t->train_loader, t->gtokens, t->gtargets);
        for (int64_t i = 0; i < gsize; i++)
            tokens_since_log += t->gtokens[i] != t->alpha->pad;  /* padding is not throughput */
        memcpy(t->tokens, t->gtokens + t->rank * lsize, sizeof(int32_t) * (size_t)lsize);
        memcpy(t->targets, t->gtargets + t->rank * lsize, sizeof(int32_t) * (size_t)lsize);
        double lr = lr_at(t, t->step), gnorm = 0, step_loss = NAN;
        int do_eval = t->have_val && t->f.eval_every > 0 &&
                      (t->step % t->f.eval_every == 0 || t->step == t->tr.steps);
        int do_log = t->step % t->f.log_every == 0 || t->step == t->tr.steps || do_eval;
        int do_ckpt = t->f.ckpt_dir && (t->step % t->f.ckpt_every == 0 || t->step == t->tr.steps);
        int do_dump = t->f.dump_dir && t->step <= t->f.dump_steps;
        /* the step may run asynchronously: its loss is read when the host needs it. A profiled step
         * (--profile) is the same step, each launch timed */
        int profiled = trainer_profile_wants(t, t->step);
        int ok;
        if (t->f.grad_accum > 1) {
            /* the rows this rank would hold in one batch of grad_accum x batch sequences (its rank-major
             * slice of the global batch), as grad_accum micro-batches of its local batch; micro-batch k weighs
             * its share of this rank's scored targets (each rank's loss is a token mean over its own rows) */
            double *wk = malloc(sizeof(double) * (size_t)t->f.grad_accum);
            if (!wk)
                return trainer_error(t, "out of memory");
            int64_t big = lsize * t->f.grad_accum;
            const int32_t *tk = t->gtokens + t->rank * big, *tg = t->gtargets + t->rank * big;
            int64_t total = count_targets(tg, big);
            for (int64_t k = 0; k < t->f.grad_accum; k++)
                wk[k] = total ? (double)count_targets(tg + k * lsize, lsize) / (double)total
                              : 1.0 / (double)t->f.grad_accum;
            ok = t->be->ops->accum_step(t->be, tk, tg, (int)t->f.grad_accum, wk, lr, t->step);
            free(wk);
        } else {
            ok = profiled ? t->be->ops->profile_step(t->be, t->tokens, t->targets, lr, t->step, &t->prof->acc)
                          : t->be->ops->step(t->be, t->tokens, t->targets, lr, t->step);
        }
        if (!ok)
            return trainer_error(t, "step %lld on %s: %s", (long long)t->step, t->be->ops->name,
                              t->be->ops->error(t->be));
        t->unread++;
        int drained = do_log || do_eval || do_ckpt || do_dump ||
                      t->unread >= (t->f.log_every < 1024 ? t->f.log_every : 1024);
        if (drained) {
            if (!drain(t, &loss_sum, &loss_n, &gnorm, &step_loss))
                return 1;
            BackendInfo bi;
            t->be->ops->info(t->be, &bi);
            if (!measured && bi.measured && is_rank0(t)) {
                /* planned vs what the device lost, once the first steps ran */
                char pl[32], me[32];
                fmt_bytes(pl, sizeof pl, (double)bi.planned_total);
                fmt_bytes(me, sizeof me, (double)bi.measured);
                printf("memory measured after step %lld: %s of device memory in use by this run (cuMemGetInfo), "
                       "planned %s (%+.1f%%)%s\n", (long long)t->step, me, pl,
                       100.0 * ((double)bi.measured - (double)bi.planned_total) / (double)bi.planned_total,
                       t->world > 1 && !strcmp(t->comm->ops->name, "sim") ? " (all simulated ranks together)" : "");
                cJSON *mo = cJSON_CreateObject();
                cJSON_AddStringToObject(mo, "event", "gpu_memory");
                cJSON_AddNumberToObject(mo, "planned_bytes", (double)bi.planned_total);
                cJSON_AddNumberToObject(mo, "measured_bytes", (double)bi.measured);
                trainer_log(t, mo);
                measured = 1;
            }
        }
        if (do_dump && !trainer_dump_step(t, step_loss, lr, gnorm))
            return 1;
        double val = NAN;
        double te = wall_seconds();
        if (do_eval && !evaluate(t, &t->val_loader, t->f.val_batches, NULL, &val))
            return 1;
        tlast += wall_seconds() - te;  /* evaluation time is not training throughput either */
        /* --keep-best: a better validation loss is saved now, as a checkpoint of this step */
        int new_best = t->f.keep_best && do_eval && isfinite(val) && !(val >= t->best_val);
        if (new_best) {
            t->best_val = val;
            t->best_step = t->step;
            do_ckpt = 1;
        }
        double tnow = wall_seconds();
        if (do_log && is_rank0(t)) {
            double tps = (double)tokens_since_log / (tnow - tlast > 1e-9 ? tnow - tlast : 1e-9);
            double elapsed = tnow - t0, eta = elapsed / (double)(t->step - first) * (double)(t->tr.steps - t->step);
            char el[32], et[32], vs[48] = "";
            fmt_duration(el, sizeof el, elapsed);
            fmt_duration(et, sizeof et, eta);
            if (do_eval)
                snprintf(vs, sizeof vs, " | val %.4f", val);
            /* MFU: the model FLOPs of the tokens trained (padding excluded) per second over the peak */
            double mfu = t->mfu_peak > 0 ? tps * t->flops_per_token / t->mfu_peak : NAN;
            char ms[32] = "";
            if (isfinite(mfu))
                snprintf(ms, sizeof ms, " | mfu %.1f%%", 100 * mfu);
            printf("step %6lld/%lld | loss %.4f%s | lr %.2e | %7.0f tok/s%s | elapsed %s | eta %s\n",
                   (long long)t->step, (long long)t->tr.steps, loss_sum / loss_n, vs, lr, tps, ms, el, et);
            fflush(stdout);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "step", (double)t->step);
            cJSON_AddNumberToObject(o, "loss", loss_sum / loss_n);
            cJSON_AddNumberToObject(o, "lr", lr);
            cJSON_AddNumberToObject(o, "tokens_per_s", tps);
            if (isfinite(mfu))
                cJSON_AddNumberToObject(o, "mfu", mfu);
            else
                cJSON_AddNullToObject(o, "mfu");  /* the CPU, or a GPU whose peak is not known */
            cJSON_AddNumberToObject(o, "grad_norm", gnorm);
            cJSON_AddNumberToObject(o, "elapsed_s", elapsed);
            if (do_eval)
                cJSON_AddNumberToObject(o, "val_loss", val);
            trainer_log_moe(t, o);
            trainer_log(t, o);
            if (!trainer_log_ok(t))
                return 1;
        }
        if (do_log) {
            loss_sum = 0;
            loss_n = 0;
            tokens_since_log = 0;
            tlast = wall_seconds();
        }
        if (do_ckpt) {
            if (!trainer_save_checkpoint(t))
                return 1;
            tlast += wall_seconds() - tnow;  /* checkpoint time is not training throughput */
        }
        if (profiled && t->step == t->prof->last)
            trainer_profile_report(t);
        /* SIGTERM / SIGINT: stop at this step boundary, the state saved. One rank checks its own flag every
         * step; several ranks agree (an all-reduce) at the steps whose losses they read anyway */
        int stop = trainer_stop_requested();
        if (t->world > 1) {
            if (!drained)
                continue;
            double v = stop;
            if (!trainer_allreduce_f64(t, COMM_WORLD, &v, 1))
                return trainer_error(t, "%s", t->comm->error);
            stop = v > 0 ? (stop ? stop : SIGTERM) : 0;
        }
        if (stop && t->step < t->tr.steps) {
            if (t->f.ckpt_dir && !do_ckpt && !trainer_save_checkpoint(t))
                return 1;
            if (is_rank0(t)) {
                char path[4096];
                if (t->f.ckpt_dir)
                    printf("stopped by %s after step %lld: checkpoint %s written; continue with --resume\n",
                           stop == SIGINT ? "SIGINT" : "SIGTERM", (long long)t->step,
                           trainer_ckpt_path(t, path, sizeof path));
                else
                    printf("stopped by %s after step %lld: no --ckpt-dir, nothing saved\n",
                           stop == SIGINT ? "SIGINT" : "SIGTERM", (long long)t->step);
                fflush(stdout);
            }
            trainer_profile_free(t);
            return 128 + (stop == SIGINT ? SIGINT : SIGTERM);
        }
    }
    if (t->f.keep_best && is_rank0(t) && isfinite(t->best_val))
        printf("best validation loss %.4f at step %lld: %s/checkpoint-best.safetensors\n", t->best_val,
               (long long)t->best_step, t->f.ckpt_dir);
    trainer_profile_report(t);  /* a run that ended inside the profiled steps: what ran */
    trainer_profile_free(t);
    BackendInfo fin;
    t->be->ops->info(t->be, &fin);
    const BackendInfo *gi = &fin;
    if (gi->coll_calls && t->world > 1 && is_rank0(t) && t->step > first) {
        /* how much of the run the exchanges took (rank 0's view) */
        double total = wall_seconds() - t0;
        printf("collectives: %lld calls took %.2f s of rank 0's %.2f s (%.1f%%; waits for other ranks included)\n",
               gi->coll_calls, gi->coll_seconds, total, 100.0 * gi->coll_seconds / (total > 0 ? total : 1));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "collectives");
        cJSON_AddNumberToObject(o, "calls", (double)gi->coll_calls);
        cJSON_AddNumberToObject(o, "seconds", gi->coll_seconds);
        cJSON_AddNumberToObject(o, "run_seconds", total);
        trainer_log(t, o);
    }
    if (!trainer_log_ok(t))
        return 1;
    if (t->log && fclose(t->log) != 0) {
        t->log = NULL;
        return trainer_error(t, "cannot write the metrics to %s: %s", t->f.log_path, strerror(errno));
    }
    t->log = NULL;
    return 0;
}

