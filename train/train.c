/* train.c - the training binary: data, parameters, the step loop, AdamW,
 * validation, metrics and checkpoints.
 *
 * One step: draw a batch from the FASTA loader, run the plan (forward and
 * the backward graph the autodiff pass appended) on the CPU backend, clip
 * the global gradient norm, apply AdamW with the warmup + cosine schedule.
 * Everything that influences a step (parameters, AdamW moments, the step
 * number, the loader's state) is in the checkpoint, and nothing else is
 * random, so `--resume` continues bit-identically.
 *
 * Memory: parameters, AdamW moments and gradients' staging each live in
 * one allocation; activations and gradients in the CPU plan's
 * liveness-planned blocks. */
#include "train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../driver/build.h"
#include "../util/util.h"
#include "../runtime/comm/comm.h"
#include "launch.h"
#include "../runtime/cpu/cpu.h"
#include "../data/data.h"
#include "../runtime/backend.h"
#include "../formats/safetensors.h"

#ifndef MOEC_VERSION
#define MOEC_VERSION "0.1.0"
#endif

enum { MAX_DATA_FILES = 64 };

typedef struct Flags {
    const char *data[MAX_DATA_FILES];
    int ndata;
    int64_t steps, seed, batch, eval_every, ckpt_every, log_every, val_batches;
    double lr;
    const char *ckpt_dir, *log_path, *device, *eval_path, *init_path;
    int resume, threads;
    int simulate_ranks;  /* --simulate-ranks N: N ranks as threads of this process */
    int nproc;           /* --nproc N: N processes on this host, over TCP */
    const char *dump_dir;  /* --dump DIR: each step's batch, loss, gradients, params */
    int64_t dump_steps;
    int no_graphs;       /* --no-cuda-graph */
} Flags;

static const char *const usage_train =
    "usage: %s --data FILE [--data FILE ...] [options]\n"
    "\n"
    "Trains the model compiled into this binary (%s) on FASTA sequences.\n"
    "\n"
    "  --data FILE        FASTA or FASTA.gz training data (repeatable)\n"
    "  --steps N          optimizer steps (default: the model file's, %lld)\n"
    "  --seed N           seed for initialisation, data order and masking (default 1)\n"
    "  --batch N          sequences per step (default: the model file's, %lld)\n"
    "  --lr X             peak learning rate (default: the model file's, %g)\n"
    "  --eval-every N     validation loss every N steps (default 50; 0 = never)\n"
    "  --val-batches N    batches of the validation split per evaluation (default 16)\n"
    "  --log-every N      progress line every N steps (default 10)\n"
    "  --ckpt-dir DIR     write DIR/checkpoint.safetensors\n"
    "  --ckpt-every N     checkpoint every N steps (default 100; and at the end)\n"
    "  --resume           continue from DIR/checkpoint.safetensors\n"
    "  --init CKPT        start from a checkpoint's parameters (fresh optimizer)\n"
    "  --eval FILE        with --resume or --init: print the mean loss over FILE's\n"
    "                     sequences as {\"eval_loss\": X, \"tokens\": N} and exit\n"
    "  --log FILE.jsonl   metrics, one JSON object per line\n"
    "  --device D         auto | cpu | cuda (default auto: the GPU when a driver and a\n"
    "                     GPU are there, else the CPU, with a notice)\n"
    "  --no-cuda-graph    launch the step's kernels one by one instead of replaying a\n"
    "                     captured CUDA graph\n"
    "  --dump DIR         write DIR/step_<k>.safetensors after steps 1..N: the batch\n"
    "                     (tokens, targets), loss, grad.<param> (before clipping) and\n"
    "                     param.<param> (after the update); for comparisons\n"
    "  --dump-steps N     how many steps --dump writes (default 1)\n"
    "  --threads N        CPU threads (default: all cores, shared by simulated ranks)\n"
    "  --simulate-ranks N run N ranks in this process (expert parallelism ep x data\n"
    "                     parallelism N/ep) with the same semantics as N processes\n"
    "  --nproc N          start N processes on this host, one rank each (like\n"
    "                     torchrun); ranks on several hosts join through MOEC_RANK,\n"
    "                     MOEC_WORLD_SIZE, MOEC_MASTER_ADDR, MOEC_MASTER_PORT\n"
    "  --help\n";

/* ------------------------------------------------------------ utilities */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_time(char *buf, size_t n, double s)
{
    if (s < 0 || !isfinite(s))
        snprintf(buf, n, "?");
    else if (s < 60)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

static void fmt_count(char *buf, size_t n, double v)
{
    if (v >= 1e9) snprintf(buf, n, "%.2f B", v / 1e9);
    else if (v >= 1e6) snprintf(buf, n, "%.2f M", v / 1e6);
    else if (v >= 1e3) snprintf(buf, n, "%.1f k", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

static void fmt_bytes(char *buf, size_t n, double v)
{
    if (v >= 1 << 30) snprintf(buf, n, "%.2f GiB", v / (1 << 30));
    else if (v >= 1 << 20) snprintf(buf, n, "%.1f MiB", v / (1 << 20));
    else snprintf(buf, n, "%.1f KiB", v / 1024);
}

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

static int usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nRun '%s --help' for usage.\n", prog);
    return 2;
}

int train_check_alphabet(const IrGraph *g, Diag *d)
{
    int kind = alphabet_lookup(g->train.alphabet);
    SrcLoc none = {0, 0, 0};
    if (kind < 0) {
        diag_error(d, none, "model `%s` has no alphabet: add `alphabet protein` or `alphabet dna` to its train "
                   "section to train it on FASTA data", g->model);
        return 0;
    }
    const Alphabet *a = alphabet_get((AlphabetKind)kind);
    int ok = 1;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->op == IR_OP_EMBEDDING && n->src[1]->shape[0] != a->vocab) {
            diag_error(d, n->src[1]->loc, "embedding table `%s` has %lld rows but the %s alphabet has %d tokens",
                       n->src[1]->label, (long long)n->src[1]->shape[0], a->name, a->vocab);
            ok = 0;
        }
        if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_MASKED_LM_LOSS) &&
            n->src[0]->shape[n->src[0]->rank - 1] != a->vocab) {
            diag_error(d, n->loc, "the loss is over %lld classes but the %s alphabet has %d tokens",
                       (long long)n->src[0]->shape[n->src[0]->rank - 1], a->name, a->vocab);
            ok = 0;
        }
    }
    return ok;
}

/* ------------------------------------------------------------ the state */

typedef struct Trainer {
    Flags f;
    const char *prog;
    const Plan *pl;                /* shared by the ranks of this process */
    const IrGraph *g;              /* pl->graph */
    IrTrain tr;
    const Alphabet *alpha;
    Objective obj;
    uint64_t model_hash;
    /* parameters: one allocation, AdamW moments: one allocation */
    float *params, *adam;          /* adam = [m | v] */
    int64_t nparams_total;
    int64_t *param_off;            /* per g->params index */
    IrNode *tokens_in, *targets_in;
    int32_t *tokens, *targets;
    FastaSet data;
    DataLoader train_loader, val_loader;
    int have_val;
    int64_t step;
    FILE *log;
    double unigram;
    /* ranks: this one computes rows [rank * local_batch, +local_batch) of
     * every global batch the loader draws */
    Comm *comm;
    int rank, world;
    int64_t ep, dp, local_batch;
    int32_t *gtokens, *gtargets;   /* the global batch */
    const FastaSet *shared;        /* the data, read once for all ranks */
    /* the backend that runs the steps (runtime/backend.h) */
    const BackendOps *backend;
    Backend *be;
    int unread;                    /* steps whose losses the host has not read */
} Trainer;

static int is_rank0(const Trainer *t) { return t->rank == 0; }

/* An error on one rank: print it with the rank and tell the others. */
static int rank_error(Trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rank_error(Trainer *t, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (t->world > 1)
        fprintf(stderr, "%s: rank %d: error: %s\n", t->prog, t->rank, msg);
    else
        fprintf(stderr, "%s: error: %s\n", t->prog, msg);
    if (t->comm && t->world > 1)
        comm_abort(t->comm, msg);
    return 1;
}

/* Collectives on host memory: NCCL works on device memory, so under it
 * these go through a small device buffer (gpu_host_*). */
static int host_allreduce_f64(Trainer *t, CommGroup g, double *v, int64_t n)
{
    if (t->world == 1)
        return 1;
    return t->be->ops->host_allreduce_f64(t->be, g, v, n);
}

static int host_allgather(Trainer *t, CommGroup g, const void *in, void *out, size_t bytes)
{
    return t->be->ops->host_allgather(t->be, g, in, out, bytes);
}

static void log_json(Trainer *t, cJSON *o)
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

static void init_params(Trainer *t)
{
    const IrGraph *g = t->g;
    for (int p = 0; p < g->nparams; p++) {
        IrNode *n = g->params[p];
        float *w = t->params + t->param_off[p];
        /* an expert shard takes its slice of the full tensor's values, so
         * every ep gives the same initial model */
        int64_t shard = ir_has_attr(n, IR_ATTR_SHARD) ? n->attr[IR_ATTR_SHARD].i : 1;
        int64_t numel = ir_numel(n), skip = shard > 1 ? numel * comm_ep_rank(t->comm) : 0;
        Rng r = {hash64(n->name, strlen(n->name)) ^ (uint64_t)t->f.seed * 0x9e3779b97f4a7c15ull};
        IrInit init = (IrInit)ir_attr_e(n, IR_ATTR_INIT);
        for (int64_t e = -skip; e < numel; e++) {
            double v = 0;
            if (init == IR_INIT_NORMAL)
                v = n->attr[IR_ATTR_STD].f * rng_normal(&r);
            else if (init == IR_INIT_UNIFORM)
                v = n->attr[IR_ATTR_BOUND].f * (2 * rng_unit(&r) - 1);
            else if (init == IR_INIT_CONSTANT)
                v = n->attr[IR_ATTR_VALUE].f;
            else if (init == IR_INIT_ONES)
                v = 1;
            if (e >= 0)
                w[e] = (float)v;
        }
    }
}

static double lr_at(const Trainer *t, int64_t step)
{
    const IrTrain *tr = &t->tr;
    double peak = tr->lr, lo = tr->min_lr < peak ? tr->min_lr : peak;
    if (strcmp(tr->schedule, "constant") == 0)
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

/* Forward only, over `batches` batches of a loader (all rows when <= 0):
 * the token-weighted mean loss. */
static double evaluate(Trainer *t, DataLoader *l, int64_t batches, int64_t *tokens_out)
{
    data_loader_reset(l);
    int64_t rows = data_loader_rows(l);
    int64_t nb = (rows + t->tr.batch - 1) / t->tr.batch;
    if (batches > 0 && batches < nb)
        nb = batches;
    double sums[2] = {0, 0};  /* loss x tokens, tokens */
    int64_t bs = t->local_batch * t->tr.seq;
    for (int64_t b = 0; b < nb; b++) {
        data_loader_next(l, t->gtokens, t->gtargets);
        memcpy(t->tokens, t->gtokens + t->rank * bs, sizeof(int32_t) * (size_t)bs);
        memcpy(t->targets, t->gtargets + t->rank * bs, sizeof(int32_t) * (size_t)bs);
        int64_t c = count_targets(t->targets, bs);
        /* every rank runs the plan: its collectives need all of them */
        double loss;
        if (!t->be->ops->eval(t->be, t->tokens, t->targets, &loss))
            die("rank %d: evaluation on %s: %s", t->rank, t->be->ops->name, t->be->ops->error(t->be));
        if (c) {
            sums[0] += loss * (double)c;
            sums[1] += (double)c;
        }
    }
    if (t->world > 1 && !host_allreduce_f64(t, COMM_WORLD, sums, 2))
        die("rank %d: %s", t->rank, t->comm->error);
    if (tokens_out)
        *tokens_out = (int64_t)sums[1];
    return sums[1] > 0 ? sums[0] / sums[1] : NAN;
}

/* ------------------------------------------------------------ checkpoints */

static const char *ckpt_path(const Trainer *t, char *buf, size_t n)
{
    snprintf(buf, n, "%s/checkpoint.safetensors", t->f.ckpt_dir);
    return buf;
}

/* The full tensor of a parameter (or of one of its AdamW moments): a
 * dense one as it is, an expert shard gathered from the EP group. Every rank
 * calls it (the gather is collective); *owned says whether to free it. */
static const float *full_tensor(Trainer *t, int p, const float *local, int *owned)
{
    IrNode *n = t->g->params[p];
    *owned = 0;
    if (!ir_has_attr(n, IR_ATTR_SHARD) || t->ep == 1)
        return local;
    size_t bytes = (size_t)ir_numel(n) * sizeof(float);
    float *full = malloc(bytes * (size_t)t->ep);
    if (!full || !host_allgather(t, COMM_EP, local, full, bytes))
        die("rank %d: gathering %s: %s", t->rank, n->name, full ? t->comm->error : "out of memory");
    *owned = 1;
    return full;
}

static void full_shape(const Trainer *t, const IrNode *n, int64_t *shape)
{
    memcpy(shape, n->shape, sizeof(int64_t) * (size_t)n->rank);
    if (ir_has_attr(n, IR_ATTR_SHARD))
        shape[0] *= t->ep;
}

static int save_checkpoint(Trainer *t)
{
    char path[4096], err[512], num[64];
    const IrGraph *g = t->g;
    if (!t->be->ops->get_state(t->be, t->params, t->adam))
        return rank_error(t, "checkpoint at step %lld: reading the %s backend's state: %s", (long long)t->step,
                          t->be->ops->name, t->be->ops->error(t->be));
    SafeTensorsWriter w;
    st_writer_init(&w);
    char **names = calloc((size_t)g->nparams * 3, sizeof(char *));
    const float **bufs = calloc((size_t)g->nparams * 3, sizeof(float *));
    int *owned = calloc((size_t)g->nparams * 3, sizeof(int));
    for (int p = 0; p < g->nparams; p++) {
        IrNode *n = g->params[p];
        int64_t shape[IR_MAX_RANK];
        full_shape(t, n, shape);
        size_t bytes = (size_t)ir_numel(n) * 4 * (ir_has_attr(n, IR_ATTR_SHARD) ? (size_t)t->ep : 1);
        static const char *const pre[3] = {"param.", "adam_m.", "adam_v."};
        const float *src[3] = {t->params + t->param_off[p], t->adam + t->param_off[p],
                               t->adam + t->nparams_total + t->param_off[p]};
        for (int k = 0; k < 3; k++) {
            bufs[p * 3 + k] = full_tensor(t, p, src[k], &owned[p * 3 + k]);
            names[p * 3 + k] = malloc(strlen(n->name) + 8);
            sprintf(names[p * 3 + k], "%s%s", pre[k], n->name);
            st_writer_add(&w, names[p * 3 + k], ST_F32, n->rank, shape, bufs[p * 3 + k], bytes);
        }
    }
    DataLoaderState ls;
    data_loader_state_get(&t->train_loader, &ls);
    int64_t ls_shape = (int64_t)sizeof ls;
    st_writer_add(&w, "state.train_loader", ST_U8, 1, &ls_shape, &ls, sizeof ls);
    st_writer_set_metadata(&w, "format", "moec-checkpoint-1");
    st_writer_set_metadata(&w, "model", g->model);
    snprintf(num, sizeof num, "%016llx", (unsigned long long)t->model_hash);
    st_writer_set_metadata(&w, "model_hash", num);
    snprintf(num, sizeof num, "%lld", (long long)t->step);
    st_writer_set_metadata(&w, "step", num);
    snprintf(num, sizeof num, "%lld", (long long)t->f.seed);
    st_writer_set_metadata(&w, "seed", num);
    st_writer_set_metadata(&w, "moec_version", MOEC_VERSION);
    int ok = 1;
    if (is_rank0(t)) {
        ok = st_writer_save(&w, ckpt_path(t, path, sizeof path), err, sizeof err);
        if (!ok)
            rank_error(t, "checkpoint at step %lld not written: %s", (long long)t->step, err);
    }
    st_writer_free(&w);
    for (int i = 0; i < g->nparams * 3; i++) {
        free(names[i]);
        if (owned[i])
            free((void *)bufs[i]);
    }
    free(names);
    free(bufs);
    free(owned);
    return ok;
}

/* Loads parameters (and, for a resume, the optimizer and loader state). */
static int load_checkpoint(Trainer *t, const char *path, int full)
{
    SafeTensors st;
    char err[512];
    if (!st_read(path, &st, err, sizeof err)) {
        fprintf(stderr, "%s: error: %s\n", t->prog, err);
        return 0;
    }
    int ok = 1;
    const char *fmt = st_metadata(&st, "format"), *hash = st_metadata(&st, "model_hash");
    const char *step = st_metadata(&st, "step"), *model = st_metadata(&st, "model");
    char want[32];
    snprintf(want, sizeof want, "%016llx", (unsigned long long)t->model_hash);
    if (!fmt || strcmp(fmt, "moec-checkpoint-1") != 0) {
        fprintf(stderr, "%s: error: %s is not a moec checkpoint (no format moec-checkpoint-1 in its metadata)\n",
                t->prog, path);
        ok = 0;
    } else if (!hash || strcmp(hash, want) != 0) {
        fprintf(stderr, "%s: error: %s was written for another model (model `%s`, plan hash %s; this binary is "
                "`%s`, plan hash %s)\n", t->prog, path, model ? model : "?", hash ? hash : "none", t->g->model, want);
        ok = 0;
    }
    const IrGraph *g = t->g;
    for (int p = 0; ok && p < g->nparams; p++) {
        IrNode *n = g->params[p];
        static const char *const pre[3] = {"param.", "adam_m.", "adam_v."};
        float *dst[3] = {t->params + t->param_off[p], t->adam + t->param_off[p],
                         t->adam + t->nparams_total + t->param_off[p]};
        for (int k = 0; ok && k < (full ? 3 : 1); k++) {
            char name[1024];
            snprintf(name, sizeof name, "%s%s", pre[k], n->name);
            const SafeTensor *x = st_find(&st, name);
            int64_t shape[IR_MAX_RANK];
            full_shape(t, n, shape);
            int shape_ok = x && x->dtype == ST_F32 && x->rank == n->rank;
            for (int d = 0; shape_ok && d < n->rank; d++)
                shape_ok = x->shape[d] == shape[d];
            if (!shape_ok) {
                fprintf(stderr, "%s: error: %s: tensor %s is %s\n", t->prog, path, name,
                        x ? "of another dtype or shape" : "missing");
                ok = 0;
                break;
            }
            /* checkpoints hold whole tensors; an expert shard takes its slice */
            size_t local = (size_t)ir_numel(n) * sizeof(float);
            size_t off = ir_has_attr(n, IR_ATTR_SHARD) ? local * (size_t)comm_ep_rank(t->comm) : 0;
            memcpy(dst[k], (const char *)x->data + off, local);
        }
    }
    if (ok && full) {
        const SafeTensor *ls = st_find(&st, "state.train_loader");
        int64_t s = 0;
        if (!ls || ls->nbytes != sizeof(DataLoaderState) || !step || !parse_i64_in(step, 0, INT64_MAX, &s)) {
            fprintf(stderr, "%s: error: %s has no valid training state (step, loader)\n", t->prog, path);
            ok = 0;
        } else {
            DataLoaderState st_l;
            memcpy(&st_l, ls->data, sizeof st_l);
            if (!data_loader_state_set(&t->train_loader, &st_l)) {
                fprintf(stderr, "%s: error: %s was written while training on other data or with another seed; "
                        "resume with the same --data and --seed\n", t->prog, path);
                ok = 0;
            }
            t->step = s;
        }
    }
    st_free(&st);
    return ok;
}

/* ------------------------------------------------------------ the GPU's steps */

/* Reads the losses and norms of the GPU steps run since the last read:
 * the ranks' mean, the first non-finite one reported with its step. */
/* The losses of the steps since the last drain: the mean over the ranks
 * of each step's loss, added to the log interval's sum. */
static int drain(Trainer *t, double *loss_sum, int *loss_n, double *gnorm, double *last)
{
    double losses[1024], norms[1024];
    int n = 0;
    if (!t->be->ops->read_steps(t->be, losses, norms, &n))
        return rank_error(t, "step %lld on %s: %s", (long long)t->step, t->be->ops->name, t->be->ops->error(t->be));
    if (t->world > 1 && n > 0 && !host_allreduce_f64(t, COMM_WORLD, losses, n))
        return rank_error(t, "%s", t->comm->error);
    for (int i = 0; i < n; i++) {
        double loss = losses[i] / t->world;
        if (!isfinite(loss))
            return rank_error(t, "the loss is %g at step %lld; lower the learning rate (--lr)", loss,
                              (long long)(t->step - n + 1 + i));
        *loss_sum += loss;
        (*loss_n)++;
        *last = loss;
    }
    if (n > 0)
        *gnorm = norms[n - 1];
    t->unread = 0;
    return 1;
}

static int dump_step(Trainer *t, double loss, double lr, double gnorm)
{
    const IrGraph *g = t->g;
    char path[4096], err[512], num[64];
    if (!t->be->ops->get_state(t->be, t->params, NULL))
        return rank_error(t, "--dump: %s", t->be->ops->error(t->be));
    SafeTensorsWriter w;
    st_writer_init(&w);
    int64_t bs[2] = {t->tr.batch, t->tr.seq};
    st_writer_add(&w, "tokens", ST_I32, 2, bs, t->gtokens, sizeof(int32_t) * (size_t)(bs[0] * bs[1]));
    st_writer_add(&w, "targets", ST_I32, 2, bs, t->gtargets, sizeof(int32_t) * (size_t)(bs[0] * bs[1]));
    float lf = (float)loss;
    int64_t one = 1;
    st_writer_add(&w, "loss", ST_F32, 1, &one, &lf, sizeof lf);
    int n2 = g->nparams * 2;
    char **names = calloc((size_t)n2, sizeof(char *));
    const float **bufs = calloc((size_t)n2, sizeof(float *));
    int *owned = calloc((size_t)n2, sizeof(int));
    float **grads = calloc((size_t)g->nparams, sizeof(float *));
    int ok = 1;
    for (int p = 0; p < g->nparams && ok; p++) {
        IrNode *n = g->params[p];
        int64_t shape[IR_MAX_RANK];
        full_shape(t, n, shape);
        size_t bytes = (size_t)ir_numel(n) * 4 * (ir_has_attr(n, IR_ATTR_SHARD) ? (size_t)t->ep : 1);
        grads[p] = malloc((size_t)ir_numel(n) * 4);
        if (!grads[p] || !t->be->ops->get_grad(t->be, p, grads[p])) {
            ok = rank_error(t, "--dump: %s", grads[p] ? t->be->ops->error(t->be) : "out of memory");
            break;
        }
        const float *src[2] = {grads[p], t->params + t->param_off[p]};
        static const char *const pre[2] = {"grad.", "param."};
        for (int k = 0; k < 2; k++) {
            bufs[p * 2 + k] = full_tensor(t, p, src[k], &owned[p * 2 + k]);
            names[p * 2 + k] = malloc(strlen(n->name) + 8);
            sprintf(names[p * 2 + k], "%s%s", pre[k], n->name);
            st_writer_add(&w, names[p * 2 + k], ST_F32, n->rank, shape, bufs[p * 2 + k], bytes);
        }
    }
    snprintf(num, sizeof num, "%lld", (long long)t->step);
    st_writer_set_metadata(&w, "step", num);
    snprintf(num, sizeof num, "%.17g", lr);
    st_writer_set_metadata(&w, "lr", num);
    snprintf(num, sizeof num, "%.17g", gnorm);
    st_writer_set_metadata(&w, "grad_norm", num);
    st_writer_set_metadata(&w, "device", t->be->ops->name);
    if (ok && is_rank0(t)) {
        snprintf(path, sizeof path, "%s/step_%lld.safetensors", t->f.dump_dir, (long long)t->step);
        if (!st_writer_save(&w, path, err, sizeof err))
            ok = rank_error(t, "--dump: %s", err);
    }
    st_writer_free(&w);
    for (int i = 0; i < n2; i++) {
        free(names[i]);
        if (owned[i])
            free((void *)bufs[i]);
    }
    for (int p = 0; p < g->nparams; p++)
        free(grads[p]);
    free(grads);
    free(names);
    free(bufs);
    free(owned);
    return ok;
}

/* ------------------------------------------------------------ main */

static int parse_flags(Trainer *t, int argc, char **argv)
{
    Flags *f = &t->f;
    f->steps = -1;
    f->seed = 1;
    f->batch = 0;
    f->lr = 0;
    f->eval_every = 50;
    f->ckpt_every = 100;
    f->log_every = 10;
    f->val_batches = 16;
    f->device = "auto";
    f->threads = 0;
    f->dump_steps = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
#define NEED_VALUE() do { if (!v) return usage_error(t->prog, "%s needs a value", a); i++; } while (0)
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf(usage_train, t->prog, t->g->model, (long long)t->tr.steps, (long long)t->tr.batch, t->tr.lr);
            return 0;
        } else if (strcmp(a, "--data") == 0) {
            NEED_VALUE();
            if (f->ndata == MAX_DATA_FILES)
                return usage_error(t->prog, "at most %d --data files", MAX_DATA_FILES);
            f->data[f->ndata++] = v;
        } else if (strcmp(a, "--resume") == 0) {
            f->resume = 1;
        } else if (strcmp(a, "--ckpt-dir") == 0) {
            NEED_VALUE();
            f->ckpt_dir = v;
        } else if (strcmp(a, "--log") == 0) {
            NEED_VALUE();
            f->log_path = v;
        } else if (strcmp(a, "--device") == 0) {
            NEED_VALUE();
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda"))
                return usage_error(t->prog, "--device must be auto, cpu or cuda, not '%s'", v);
            f->device = v;
        } else if (strcmp(a, "--dump") == 0) {
            NEED_VALUE();
            f->dump_dir = v;
        } else if (strcmp(a, "--no-cuda-graph") == 0) {
            f->no_graphs = 1;
        } else if (strcmp(a, "--eval") == 0) {
            NEED_VALUE();
            f->eval_path = v;
        } else if (strcmp(a, "--init") == 0) {
            NEED_VALUE();
            f->init_path = v;
        } else if (strcmp(a, "--lr") == 0) {
            NEED_VALUE();
            char *end;
            errno = 0;
            f->lr = strtod(v, &end);
            if (errno || end == v || *end || !(f->lr > 0) || f->lr > 10)
                return usage_error(t->prog, "--lr takes a learning rate in (0, 10], not '%s'", v);
        } else {
            static const struct { const char *name; int64_t lo, hi; size_t off; } ints[] = {
                {"--steps", 0, (int64_t)1 << 40, offsetof(Flags, steps)},
                {"--seed", 0, INT64_MAX, offsetof(Flags, seed)},
                {"--batch", 1, 1 << 20, offsetof(Flags, batch)},
                {"--eval-every", 0, (int64_t)1 << 40, offsetof(Flags, eval_every)},
                {"--ckpt-every", 1, (int64_t)1 << 40, offsetof(Flags, ckpt_every)},
                {"--log-every", 1, (int64_t)1 << 40, offsetof(Flags, log_every)},
                {"--val-batches", 0, (int64_t)1 << 40, offsetof(Flags, val_batches)},
                {"--dump-steps", 1, (int64_t)1 << 20, offsetof(Flags, dump_steps)},
                {"--threads", 1, 256, 0},
                {"--simulate-ranks", 1, 256, 1},
                {"--nproc", 1, 256, 2},
            };
            int matched = 0;
            for (size_t k = 0; k < sizeof ints / sizeof ints[0]; k++) {
                if (strcmp(a, ints[k].name) != 0)
                    continue;
                NEED_VALUE();
                if (!parse_i64_in(v, ints[k].lo, ints[k].hi, &x))
                    return usage_error(t->prog, "%s takes an integer in [%lld, %lld], not '%s'", a,
                                       (long long)ints[k].lo, (long long)ints[k].hi, v);
                if (strcmp(a, "--threads") == 0)
                    f->threads = (int)x;
                else if (strcmp(a, "--simulate-ranks") == 0)
                    f->simulate_ranks = (int)x;
                else if (strcmp(a, "--nproc") == 0)
                    f->nproc = (int)x;
                else
                    *(int64_t *)((char *)f + ints[k].off) = x;
                matched = 1;
            }
            if (!matched)
                return usage_error(t->prog, "unknown option '%s'", a);
        }
#undef NEED_VALUE
    }
    if (f->resume && !f->ckpt_dir)
        return usage_error(t->prog, "--resume needs --ckpt-dir DIR");
    if (f->resume && f->init_path)
        return usage_error(t->prog, "--resume and --init exclude each other");
    if (f->eval_path && !f->resume && !f->init_path)
        return usage_error(t->prog, "--eval needs trained parameters: add --init CKPT or --resume --ckpt-dir DIR");
    if (!f->eval_path && f->ndata == 0)
        return usage_error(t->prog, "no training data: give --data FILE (FASTA or FASTA.gz)");
    return -1;
}

static void use_plan(Trainer *t, const Plan *p)
{
    t->pl = p;
    t->g = p->graph;
    t->tr = p->graph->train;
    t->model_hash = hash64(p->source.text ? p->source.text : "", p->source.len);
}

static void print_summary(Trainer *t)
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
           (long long)(t->tr.batch * t->tr.seq), t->tr.lr, t->tr.schedule, (long long)t->tr.warmup, t->tr.min_lr,
           t->obj == OBJECTIVE_MASKED ? "masked LM (15%)" : "causal LM");
}

static int load_data(FastaSet *data, const Alphabet *alpha, const char *const *files, int n)
{
    char err[1024];
    fasta_set_init(data);
    for (int i = 0; i < n; i++)
        if (!fasta_read(files[i], alpha, data, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 0;
        }
    return 1;
}

/* One rank's training run. t arrives with its flags, program name, plan,
 * communicator, rank, world, ep, dp and the shared data. */
static int run_rank(Trainer *t)
{
    if (t->f.steps >= 0)
        t->tr.steps = t->f.steps;
    if (t->f.lr > 0)
        t->tr.lr = t->f.lr;
    t->alpha = alphabet_get((AlphabetKind)alphabet_lookup(t->tr.alphabet));
    t->obj = strcmp(t->tr.objective, "masked_lm") == 0 ? OBJECTIVE_MASKED : OBJECTIVE_CAUSAL;
    t->local_batch = t->tr.batch / t->world;
    if (!find_inputs(t))
        return rank_error(t, "the model's inputs do not fit the training binary");

    /* parameters and AdamW moments, one allocation each */
    const IrGraph *g = t->g;
    t->param_off = calloc((size_t)g->nparams + 1, sizeof *t->param_off);
    for (int p = 0; p < g->nparams; p++) {
        t->param_off[p] = t->nparams_total;
        t->nparams_total += ir_numel(g->params[p]);
    }
    int64_t gsize = t->tr.batch * t->tr.seq, lsize = t->local_batch * t->tr.seq;
    t->params = calloc((size_t)t->nparams_total, sizeof(float));
    t->adam = calloc((size_t)t->nparams_total * 2, sizeof(float));
    t->tokens = calloc((size_t)lsize, sizeof(int32_t));
    t->targets = calloc((size_t)lsize, sizeof(int32_t));
    t->gtokens = calloc((size_t)gsize, sizeof(int32_t));
    t->gtargets = calloc((size_t)gsize, sizeof(int32_t));
    if (!t->params || !t->adam || !t->tokens || !t->targets || !t->gtokens || !t->gtargets)
        return rank_error(t, "out of memory for %lld parameters", (long long)t->nparams_total);
    {
        char err[2048];
        BackendOptions o = {0};
        o.graphs = !t->f.no_graphs;
        o.ring = (int)(t->f.log_every < 1024 ? t->f.log_every : 1024);
        int no_kernels = 0;
        o.no_kernels = &no_kernels;
        t->be = t->backend->create(t->pl, t->comm, &o, err, sizeof err);
        /* --device auto falls back to the CPU when the GPU has no kernels (none embedded for it and no NVRTC),
         * except under NCCL, whose ranks are GPUs; other failures (a plan that does not fit, a driver error)
         * stop the run: the CPU would not do better */
        if (!t->be && (!no_kernels || strcmp(t->f.device, "auto") != 0 || !strcmp(t->comm->ops->name, "nccl")))
            return rank_error(t, "the %s backend: %s", t->backend == &backend_cuda ? "GPU" : t->backend->name, err);
        if (!t->be) {
            if (is_rank0(t))
                printf("device: cpu (the GPU backend could not start: %s; --device cuda makes this an error)\n", err);
            t->backend = &backend_cpu;
            t->be = t->backend->create(t->pl, t->comm, &o, err, sizeof err);
            if (!t->be)
                return rank_error(t, "the cpu backend: %s", err);
        }
    }
    init_params(t);

    /* --eval FILE: the loss over all its sequences, then exit */
    if (t->f.eval_path) {
        char path[4096];
        const char *ck = t->f.init_path ? t->f.init_path : ckpt_path(t, path, sizeof path);
        if (!load_checkpoint(t, ck, 0))
            return rank_error(t, "cannot use %s", ck);
        if (!t->be->ops->put_state(t->be, t->params, NULL))
            return rank_error(t, "%s", t->be->ops->error(t->be));
        DataOptions o = DATA_OPTIONS_DEFAULT;
        o.val_fraction = 1.0;
        DataLoader l;
        if (!data_loader_init_opts(&l, t->shared, t->alpha, DATA_SPLIT_VAL, t->tr.batch, t->tr.seq,
                                   (uint64_t)t->f.seed, t->obj, &o))
            return rank_error(t, "%s has no sequences to evaluate", t->f.eval_path);
        int64_t ntok;
        double loss = evaluate(t, &l, 0, &ntok);
        if (is_rank0(t))
            printf("{\"eval_loss\": %.6f, \"tokens\": %lld}\n", loss, (long long)ntok);
        data_loader_free(&l);
        return 0;
    }

    if (!data_loader_init(&t->train_loader, t->shared, t->alpha, DATA_SPLIT_TRAIN, t->tr.batch, t->tr.seq,
                          (uint64_t)t->f.seed, t->obj))
        return rank_error(t, "the training split is empty: give more sequences");
    t->have_val = data_loader_init(&t->val_loader, t->shared, t->alpha, DATA_SPLIT_VAL, t->tr.batch, t->tr.seq,
                                   (uint64_t)t->f.seed, t->obj);
    DataSplitStats ss[2];
    data_split_stats(t->shared, (uint64_t)t->f.seed, DATA_VAL_FRACTION, ss);
    t->unigram = data_unigram_entropy(t->shared, (uint64_t)t->f.seed, DATA_VAL_FRACTION, DATA_SPLIT_VAL, t->obj);

    if (t->f.init_path && !load_checkpoint(t, t->f.init_path, 0))
        return rank_error(t, "cannot start from %s", t->f.init_path);
    if (t->f.resume) {
        char path[4096];
        if (access(ckpt_path(t, path, sizeof path), F_OK) != 0)
            return rank_error(t, "--resume: no checkpoint at %s", path);
        if (!load_checkpoint(t, path, 1))
            return rank_error(t, "cannot resume from %s", path);
        if (is_rank0(t))
            printf("resumed from %s at step %lld\n", path, (long long)t->step);
    }
    if (!t->be->ops->put_state(t->be, t->params, t->adam))
        return rank_error(t, "%s", t->be->ops->error(t->be));
    if (t->f.dump_dir && is_rank0(t) && mkdir(t->f.dump_dir, 0755) != 0 && errno != EEXIST)
        return rank_error(t, "cannot create --dump directory %s: %s", t->f.dump_dir, strerror(errno));
    if (is_rank0(t) && t->f.ckpt_dir && mkdir(t->f.ckpt_dir, 0755) != 0 && errno != EEXIST)
        return rank_error(t, "cannot create checkpoint directory %s: %s", t->f.ckpt_dir, strerror(errno));
    if (is_rank0(t) && t->f.log_path) {
        t->log = fopen(t->f.log_path, t->f.resume ? "a" : "w");
        if (!t->log)
            return rank_error(t, "cannot write %s: %s", t->f.log_path, strerror(errno));
    }

    if (is_rank0(t)) {
        print_summary(t);
        if (t->world > 1)
            printf("ranks: %d (expert parallel %lld x data parallel %lld), %lld sequences per rank and step\n",
                   t->world, (long long)t->ep, (long long)t->dp, (long long)t->local_batch);
        for (int s = 0; s < 2; s++) {
            char r[32];
            fmt_count(r, sizeof r, (double)ss[s].nresidues);
            printf("data %s: %lld sequences, %s residues, %lld unknown characters mapped to %s\n",
                   s ? "validation" : "train", (long long)ss[s].nseq, r, (long long)ss[s].nunknown,
                   t->alpha->tokens[t->alpha->unk]);
        }
        printf("unigram entropy of the validation targets: %.4f nats (the loss of a model that ignores context)\n",
               t->unigram);
        cJSON *start = cJSON_CreateObject();
        cJSON_AddStringToObject(start, "event", "start");
        cJSON_AddStringToObject(start, "model", g->model);
        cJSON_AddNumberToObject(start, "params", (double)t->nparams_total);
        cJSON_AddNumberToObject(start, "unigram_entropy", t->unigram);
        cJSON_AddNumberToObject(start, "start_step", (double)t->step);
        cJSON_AddNumberToObject(start, "ranks", t->world);
        log_json(t, start);
        fflush(stdout);
    }

    double t0 = now_s(), tlast = t0;
    int64_t first = t->step, tok_per_step = t->tr.batch * t->tr.seq;
    double loss_sum = 0;
    int loss_n = 0, measured = 0;
    while (t->step < t->tr.steps) {
        t->step++;
        data_loader_next(&t->train_loader, t->gtokens, t->gtargets);
        memcpy(t->tokens, t->gtokens + t->rank * lsize, sizeof(int32_t) * (size_t)lsize);
        memcpy(t->targets, t->gtargets + t->rank * lsize, sizeof(int32_t) * (size_t)lsize);
        double lr = lr_at(t, t->step), gnorm = 0, step_loss = NAN;
        int do_eval = t->have_val && t->f.eval_every > 0 &&
                      (t->step % t->f.eval_every == 0 || t->step == t->tr.steps);
        int do_log = t->step % t->f.log_every == 0 || t->step == t->tr.steps || do_eval;
        int do_ckpt = t->f.ckpt_dir && (t->step % t->f.ckpt_every == 0 || t->step == t->tr.steps);
        int do_dump = t->f.dump_dir && t->step <= t->f.dump_steps;
        /* the step may run asynchronously: its loss is read when the host needs it */
        if (!t->be->ops->step(t->be, t->tokens, t->targets, lr, t->step))
            return rank_error(t, "step %lld on %s: %s", (long long)t->step, t->be->ops->name,
                              t->be->ops->error(t->be));
        t->unread++;
        if (do_log || do_eval || do_ckpt || do_dump || t->unread >= (t->f.log_every < 1024 ? t->f.log_every : 1024)) {
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
                log_json(t, mo);
                measured = 1;
            }
        }
        if (do_dump && !dump_step(t, step_loss, lr, gnorm))
            return 1;
        double val = NAN;
        if (do_eval)
            val = evaluate(t, &t->val_loader, t->f.val_batches, NULL);
        double tnow = now_s();
        if (do_log && is_rank0(t)) {
            double tps = (double)(tok_per_step * loss_n) / (tnow - tlast > 1e-9 ? tnow - tlast : 1e-9);
            double elapsed = tnow - t0, eta = elapsed / (double)(t->step - first) * (double)(t->tr.steps - t->step);
            char el[32], et[32], vs[48] = "";
            fmt_time(el, sizeof el, elapsed);
            fmt_time(et, sizeof et, eta);
            if (do_eval)
                snprintf(vs, sizeof vs, " | val %.4f", val);
            printf("step %6lld/%lld | loss %.4f%s | lr %.2e | %7.0f tok/s | elapsed %s | eta %s\n",
                   (long long)t->step, (long long)t->tr.steps, loss_sum / loss_n, vs, lr, tps, el, et);
            fflush(stdout);
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "step", (double)t->step);
            cJSON_AddNumberToObject(o, "loss", loss_sum / loss_n);
            cJSON_AddNumberToObject(o, "lr", lr);
            cJSON_AddNumberToObject(o, "tokens_per_s", tps);
            cJSON_AddNumberToObject(o, "grad_norm", gnorm);
            cJSON_AddNumberToObject(o, "elapsed_s", elapsed);
            if (do_eval)
                cJSON_AddNumberToObject(o, "val_loss", val);
            log_json(t, o);
        }
        if (do_log) {
            loss_sum = 0;
            loss_n = 0;
            tlast = now_s();
        }
        if (do_ckpt) {
            if (!save_checkpoint(t))
                return 1;
            tlast += now_s() - tnow;  /* checkpoint time is not training throughput */
        }
    }
    BackendInfo fin;
    t->be->ops->info(t->be, &fin);
    const BackendInfo *gi = &fin;
    if (gi->coll_calls && t->world > 1 && is_rank0(t) && t->step > first) {
        /* how much of the run the exchanges took (rank 0's view) */
        double total = now_s() - t0;
        printf("collectives: %lld calls took %.2f s of rank 0's %.2f s (%.1f%%; waits for other ranks included)\n",
               gi->coll_calls, gi->coll_seconds, total, 100.0 * gi->coll_seconds / (total > 0 ? total : 1));
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "collectives");
        cJSON_AddNumberToObject(o, "calls", (double)gi->coll_calls);
        cJSON_AddNumberToObject(o, "seconds", gi->coll_seconds);
        cJSON_AddNumberToObject(o, "run_seconds", total);
        log_json(t, o);
    }
    if (t->log)
        fclose(t->log);
    t->log = NULL;
    return 0;
}

static void trainer_free(Trainer *t)
{
    if (t->log)
        fclose(t->log);
    if (t->be)
        t->be->ops->destroy(t->be);
    if (t->train_loader.fs)
        data_loader_free(&t->train_loader);
    if (t->have_val)
        data_loader_free(&t->val_loader);
    free(t->params);
    free(t->adam);
    free(t->param_off);
    free(t->tokens);
    free(t->targets);
    free(t->gtokens);
    free(t->gtargets);
    free(t);
}

typedef struct RankArgs {
    Trainer *t;
    int rc;
} RankArgs;

static void *rank_thread(void *arg)
{
    RankArgs *a = arg;
    a->rc = run_rank(a->t);
    if (a->rc != 0 && a->t->comm)
        comm_abort(a->t->comm, "exited with an error");
    if (a->t->world > 1 && a->t->comm && strcmp(a->t->comm->ops->name, "sim") == 0)
        comm_free(a->t->comm);  /* marks the rank gone: nobody waits for it */
    return NULL;
}

int train_main(int argc, char **argv, const Plan *plan)
{
    const char *slash = strrchr(argv[0], '/');
    const char *prog = slash ? slash + 1 : argv[0];

    /* flags first, checked once against the compiled model */
    Trainer *probe = calloc(1, sizeof *probe);
    probe->prog = prog;
    probe->world = 1;
    use_plan(probe, plan);
    int rc = parse_flags(probe, argc, argv);
    Flags f = probe->f;
    IrTrain tr = probe->tr;
    if (rc >= 0) {
        trainer_free(probe);
        return rc;
    }
    trainer_free(probe);
    /* Where the ranks are: threads of this process, processes this one
     * starts, or this process is one rank of a run started elsewhere. */
    int env_rank = -1, env_world = 0, port = 0;
    char *addr = NULL, err[1024];
    if (getenv("MOEC_RANK")) {
        if (!launch_env(&env_rank, &env_world, &addr, &port, err, sizeof err)) {
            fprintf(stderr, "%s: error: %s\n", prog, err);
            return 2;
        }
        if (f.simulate_ranks || f.nproc > 1) {
            fprintf(stderr, "%s: error: MOEC_RANK is set (this is one rank of a launched run): drop --simulate-ranks "
                    "and --nproc\n", prog);
            free(addr);
            return 2;
        }
    }
    if (f.simulate_ranks && f.nproc > 1) {
        fprintf(stderr, "%s: error: --simulate-ranks and --nproc exclude each other\n", prog);
        return 2;
    }
    int world = env_rank >= 0 ? env_world : f.nproc > 1 ? f.nproc : f.simulate_ranks ? f.simulate_ranks : 1;
    int64_t ep = tr.ep, batch = f.batch ? f.batch : tr.batch;
    if (ep > 1 && world == 1) {
        fprintf(stderr, "%s: error: the model is compiled for parallel ep = %lld: run it with --simulate-ranks %lld "
                "(or a multiple), or compile it with --ep 1\n", prog, (long long)ep, (long long)ep);
        return 2;
    }
    if (world % ep) {
        fprintf(stderr, "%s: error: %d ranks do not form groups of ep = %lld (the model's parallel ep); use a multiple "
                "of %lld\n", prog, world, (long long)ep, (long long)ep);
        return 2;
    }
    if (batch % world) {
        fprintf(stderr, "%s: error: the global batch %lld does not split over %d ranks\n", prog, (long long)batch,
                world);
        return 2;
    }
    /* the backend: the GPU when asked for or (auto) when a driver and a GPU are there */
    int use_gpu = 0;
    char why[1024] = "";
    if (strcmp(f.device, "cpu") != 0) {
        use_gpu = backend_cuda_probe(why, sizeof why);
        if (!use_gpu && strcmp(f.device, "cuda") == 0) {
            fprintf(stderr, "%s: error: --device cuda: %s\n", prog, why);
            return 1;
        }
    }
    if (f.nproc > 1 && env_rank < 0) {
        /* the launcher: start the ranks as processes and wait for them */
        int st = launch_local(f.nproc, argc, argv, err, sizeof err);
        if (st != 0)
            fprintf(stderr, "%s: error: %s\n", prog, err[0] ? err : "a rank failed");
        return st;
    }
    if (!use_gpu && strcmp(f.device, "auto") == 0 && env_rank <= 0)
        printf("device: cpu (no GPU: %s; --device cpu says so without this notice)\n", why);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int threads = f.threads ? f.threads : (int)(ncpu > 0 ? ncpu : 1);
    int local_ranks = env_rank >= 0 ? (getenv("MOEC_LOCAL_WORLD_SIZE") ? atoi(getenv("MOEC_LOCAL_WORLD_SIZE")) : 1)
                                    : world;
    if (!f.threads && local_ranks > 1)
        threads = threads / local_ranks > 0 ? threads / local_ranks : 1;
    cpu_set_threads(threads);

    /* the data, read once */
    FastaSet data;
    const Alphabet *alpha = alphabet_get((AlphabetKind)alphabet_lookup(tr.alphabet));
    if (!(f.eval_path ? load_data(&data, alpha, &f.eval_path, 1) : load_data(&data, alpha, f.data, f.ndata))) {
        fasta_set_free(&data);
        return 1;
    }

    Comm **comms = NULL, *single = NULL;
    if (env_rank >= 0) {
        /* one rank of a multi-process run: NCCL between GPUs, TCP between CPUs */
        single = use_gpu ? comm_nccl_create(env_rank, world, (int)ep, -1, addr, port, err, sizeof err)
                         : comm_tcp_create(env_rank, world, (int)ep, addr, port, err, sizeof err);
        free(addr);
        if (!single) {
            fprintf(stderr, "%s: rank %d: error: %s\n", prog, env_rank, err);
            fasta_set_free(&data);
            return 1;
        }
    } else if (world > 1) {
        comms = comm_sim_create(world, (int)ep, err, sizeof err);
        if (!comms) {
            fprintf(stderr, "%s: error: %s\n", prog, err);
            fasta_set_free(&data);
            return 1;
        }
    } else {
        single = comm_single();
    }
    /* another batch or world size than compiled for: the model is planned again, once for all local ranks */
    Plan *replanned = NULL;
    if (batch != plan->batch || world != plan->world) {
        double t0 = now_s();
        replanned = driver_replan(plan, batch, world, err, sizeof err);
        if (!replanned) {
            fprintf(stderr, "%s: error: %s\n", prog, err);
            if (comms)
                comm_sim_free(comms, world);
            comm_free(single);
            fasta_set_free(&data);
            return 1;
        }
        if (env_rank <= 0)
            printf("plan: compiled again for batch %lld over %d rank%s (the binary's plan is for batch %lld over "
                   "%lld) in %.2f s\n", (long long)batch, world, world == 1 ? "" : "s", (long long)plan->batch,
                   (long long)plan->world, now_s() - t0);
        plan = replanned;
    }
    int nlocal = comms ? world : 1;  /* trainers in this process */
    Trainer **ts = calloc((size_t)nlocal, sizeof *ts);
    RankArgs *args = calloc((size_t)nlocal, sizeof *args);
    pthread_t *th = calloc((size_t)nlocal, sizeof *th);
    for (int r = 0; r < nlocal; r++) {
        Trainer *t = ts[r] = calloc(1, sizeof *t);
        t->f = f;
        t->prog = prog;
        t->comm = comms ? comms[r] : single;
        t->rank = env_rank >= 0 ? env_rank : r;
        t->world = world;
        t->ep = ep;
        t->dp = world / ep;
        t->shared = &data;
        t->backend = use_gpu ? &backend_cuda : &backend_cpu;
        use_plan(t, plan);
        args[r] = (RankArgs){t, 0};
    }
    if (nlocal == 1) {
        rank_thread(&args[0]);
    } else {
        for (int r = 0; r < nlocal; r++)
            if (pthread_create(&th[r], NULL, rank_thread, &args[r]) != 0)
                die("cannot start rank %d", r);
        for (int r = 0; r < nlocal; r++)
            pthread_join(th[r], NULL);
    }
    rc = 0;
    for (int r = 0; r < nlocal; r++) {
        if (args[r].rc > rc)
            rc = args[r].rc;
        trainer_free(ts[r]);
    }
    if (comms)
        comm_sim_free(comms, world);
    comm_free(single);
    fasta_set_free(&data);
    plan_free(replanned);
    free(ts);
    free(args);
    free(th);
    return rc;
}
