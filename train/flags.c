/* flags.c - the training binary's command line. */
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

static const char *const usage_train =
    "usage: %s --data FILE|DIR... [options]\n"
    "\n"
    "Trains the model compiled into this binary (%s) on FASTA sequences.\n"
    "After training: '%s embed --help' (representations), '%s score --help' (likelihoods, variants).\n"
    "\n"
    "  --data FILE|DIR... training data: FASTA or FASTA.gz files, directories of\n"
    "                     them, glob patterns, '-' (standard input), or one shard\n"
    "                     directory written by `moec prep` (mapped, not read);\n"
    "                     several after one flag, and the flag repeatable\n"
    "  --val-data FILE|DIR... validation data (same forms); without it 1%% of the\n"
    "                     training sequences, chosen by a fixed hash of their\n"
    "                     index (not by --seed)\n"
    "  --set KEY=VALUE    override a setting of the model's train section for this run\n"
    "                     (repeatable): steps, lr, batch, seq, warmup, min_lr,\n"
    "                     schedule (warmup_cosine|constant); another batch or seq\n"
    "                     re-plans the model; settings compiled into the kernels\n"
    "                     (optimizer constants, precision, packing, aux_loss, ...)\n"
    "                     need the train section edited and `moec compile` again\n"
    "  --steps N          optimizer steps (default: the model file's, %lld)\n"
    "  --grad-accum N     N micro-batches of --batch sequences per optimizer step,\n"
    "                     their gradients accumulated: the step of one batch of\n"
    "                     N x batch sequences, up to fp32 rounding (CPU or GPU, any\n"
    "                     ranks; default 1)\n"
    "  --seed N           seed for initialisation, data order and masking (default 1)\n"
    "  --batch N          sequences per step (default: the model file's, %lld; re-plans)\n"
    "  --lr X             peak learning rate (default: the model file's, %g)\n"
    "  --eval-every N     validation loss every N steps (default 50; 0 = never)\n"
    "  --val-batches N    batches of the validation split per evaluation (default 16)\n"
    "  --log-every N      progress line every N steps (default 10)\n"
    "  --packing P        packed: sequences back to back, attention within each;\n"
    "                     rows: one sequence per row, cropped and padded; concat:\n"
    "                     back to back, attention across them (default: the model's\n"
    "                     train section; packed for masked LMs, concat for causal).\n"
    "                     packed and rows need a model compiled with packing packed\n"
    "                     or rows (segmented attention), concat one without\n"
    "  --ckpt-dir DIR     write DIR/checkpoint.safetensors\n"
    "  --ckpt-every N     checkpoint every N steps (default 100; and at the end)\n"
    "  --keep-last N      also keep DIR/checkpoint-STEP.safetensors of the last N\n"
    "                     checkpoints (default 0: only the latest)\n"
    "  --keep-best        also keep DIR/checkpoint-best.safetensors: the checkpoint of\n"
    "                     the best validation lm_loss so far (a checkpoint is written\n"
    "                     at each evaluation that improves on it)\n"
    "  --resume           continue from DIR/checkpoint.safetensors\n"
    "  --overwrite-ckpt   let a fresh run replace the checkpoint in --ckpt-dir (without\n"
    "                     it, or --resume, a run into a directory holding one is refused)\n"
    "  --init CKPT        start from a checkpoint's parameters (fresh optimizer)\n"
    "  --eval FILE        with --resume or --init: the language-model loss over every\n"
    "                     sequence of FILE, whole (windows of seq), and its perplexity,\n"
    "                     as one JSON object with the auxiliary loss and the MoE\n"
    "                     metrics apart; the same for any --seed; for a masked LM\n"
    "                     also the pseudo-perplexity (each residue masked in turn:\n"
    "                     a row per residue; one rank); forward passes only\n"
    "  --no-pseudo-perplexity  --eval without it (it costs a forward row per residue)\n"
    "  --log FILE.jsonl   metrics, one JSON object per line\n"
    "  --device D         auto | cpu | cuda (default auto: the GPU when a driver and a\n"
    "                     GPU are there, else the CPU, with a notice)\n"
    "  --dry-run          with --device cuda (or auto): no training, no data read, no GPU\n"
    "                     needed: the GPU memory plan of this model for the given batch,\n"
    "                     seq and ranks (parameters, AdamW state, gradients, activations,\n"
    "                     workspaces, the peak), then exit 0 when it fits one GPU, 1 with\n"
    "                     what to reduce when it does not\n"
    "  --gpu-mem GIB      with --dry-run: the GPU memory to fit in (default: an H200's\n"
    "                     usable %.1f GiB)\n"
    "  --no-cuda-graph    launch the step's kernels one by one instead of replaying a\n"
    "                     captured CUDA graph\n"
    "  --dump DIR         write DIR/step_<k>.safetensors after steps 1..N: the batch\n"
    "                     (tokens, targets), loss, grad.<param> (before clipping) and\n"
    "                     param.<param> (after the update); for comparisons\n"
    "  --dump-steps N     how many steps --dump writes (default 1)\n"
    "  --profile N        time N training steps per IR node (after one warm-up step\n"
    "                     when the run has more than N steps left), then print where a\n"
    "                     step's time goes: per node its kernels, launches, ms, share,\n"
    "                     TFLOP/s and GB/s (rows also in --log as {\"event\": \"profile\"});\n"
    "                     the timed steps are real steps: training goes on\n"
    "  --threads N        CPU threads (default: all cores, shared by simulated ranks)\n"
    "  --simulate-ranks N run N ranks in this process (expert parallelism ep x data\n"
    "                     parallelism N/ep) with the same semantics as N processes\n"
    "  --nproc N          start N processes on this host, one rank each (like\n"
    "                     torchrun); ranks on several hosts join through MOEC_RANK,\n"
    "                     MOEC_WORLD_SIZE, MOEC_MASTER_ADDR, MOEC_MASTER_PORT\n"
    "  --help\n";

int trainer_usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nRun '%s --help' for usage.\n", prog);
    return 2;
}

int trainer_unknown_option(const char *prog, const char *cmd, const char *opt, const char *const *known)
{
    const char *best = suggest_among(opt, known);
    if (best)
        return trainer_usage_error(prog, "%s%sunknown option '%s'; did you mean '%s'?", cmd ? cmd : "",
                                   cmd ? ": " : "", opt, best);
    return trainer_usage_error(prog, "%s%sunknown option '%s'", cmd ? cmd : "", cmd ? ": " : "", opt);
}

/* --set KEY=VALUE and the flags that set the same things (--steps, --lr, --batch) */
/* bit k is runtime_keys[k] */
enum { SET_STEPS = 1, SET_LR = 2, SET_BATCH = 4, SET_SEQ = 8, SET_WARMUP = 16, SET_MIN_LR = 32, SET_SCHEDULE = 64 };

static const char *const runtime_keys[] = {"steps", "lr", "batch", "seq", "warmup", "min_lr", "schedule", NULL};
/* the train section's other settings, and the optimizer's and schedule's arguments: compiled into the plan */
static const char *const compiled_keys[] = {"optimizer", "betas", "beta1", "beta2", "eps", "weight_decay", "grad_clip",
                                            "precision", "parallel", "ep", "dp", "alphabet", "aux_loss", "no_decay",
                                            "packing", "checkpoint", NULL};

static int parse_double_in(const char *v, double lo, double hi, int lo_open, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(lo_open ? x > lo : x >= lo) || !(x <= hi))
        return 0;
    *out = x;
    return 1;
}

/* 1 and the setting recorded (a later one of the same key wins, as a repeated flag does), or the usage
 * error's exit status (2) */
static int parse_set(Trainer *t, const char *kv)
{
    Flags *f = &t->f;
    const char *eq = strchr(kv, '=');
    char key[64];
    size_t n = eq ? (size_t)(eq - kv) : strlen(kv);
    snprintf(key, sizeof key, "%.*s", (int)(n < sizeof key ? n : sizeof key - 1), kv);
    int k = 0;
    while (runtime_keys[k] && strcmp(runtime_keys[k], key))
        k++;
    if (!runtime_keys[k]) {
        for (int c = 0; compiled_keys[c]; c++)
            if (!strcmp(compiled_keys[c], key))
                return trainer_usage_error(t->prog, "--set %s: `%s` is compiled into the model's plan (and its GPU "
                                           "kernels): change it in the train section of %s and run `moec compile` "
                                           "again; --set changes %s", kv, key, t->g->model,
                                           "steps, lr, batch, seq, warmup, min_lr and schedule");
        Suggest s = {0};
        for (int i = 0; runtime_keys[i]; i++)
            suggest_try(&s, key, runtime_keys[i]);
        for (int i = 0; compiled_keys[i]; i++)
            suggest_try(&s, key, compiled_keys[i]);
        if (s.best)
            return trainer_usage_error(t->prog, "--set %s: unknown train setting `%s`; did you mean `%s`?", kv, key,
                                       s.best);
        return trainer_usage_error(t->prog, "--set %s: unknown train setting `%s` (--set changes steps, lr, batch, "
                                   "seq, warmup, min_lr and schedule)", kv, key);
    }
    if (!eq || !eq[1])
        return trainer_usage_error(t->prog, "--set takes KEY=VALUE, e.g. --set warmup=100, not '%s'", kv);
    const char *v = eq + 1;
    unsigned bit = 1u << k;
    int64_t x;
    double d;
    switch (bit) {
    case SET_STEPS:
        if (!parse_i64_in(v, 0, (int64_t)1 << 40, &x))
            return trainer_usage_error(t->prog, "--set steps takes an integer in [0, %lld], not '%s'",
                                       (long long)1 << 40, v);
        f->steps = x;
        break;
    case SET_LR:
        if (!parse_double_in(v, 0, 10, 1, &d))
            return trainer_usage_error(t->prog, "--set lr takes a learning rate in (0, 10], not '%s'", v);
        f->lr = d;
        break;
    case SET_BATCH:
        if (!parse_i64_in(v, 1, 1 << 20, &x))
            return trainer_usage_error(t->prog, "--set batch takes an integer in [1, %d], not '%s'", 1 << 20, v);
        f->batch = x;
        break;
    case SET_SEQ:
        if (!parse_i64_in(v, 1, 1 << 24, &x))
            return trainer_usage_error(t->prog, "--set seq takes an integer in [1, %d], not '%s'", 1 << 24, v);
        f->seq = x;
        break;
    case SET_WARMUP:
        if (!parse_i64_in(v, 0, (int64_t)1 << 40, &x))
            return trainer_usage_error(t->prog, "--set warmup takes a whole number of steps in [0, %lld], not '%s'",
                                       (long long)1 << 40, v);
        f->warmup = x;
        break;
    case SET_MIN_LR:
        if (!parse_double_in(v, 0, 10, 0, &d))
            return trainer_usage_error(t->prog, "--set min_lr takes a learning rate in [0, 10], not '%s'", v);
        f->min_lr = d;
        break;
    case SET_SCHEDULE:
        if (strcmp(v, "warmup_cosine") && strcmp(v, "constant"))
            return trainer_usage_error(t->prog, "--set schedule must be warmup_cosine or constant, not '%s'", v);
        f->schedule = v[0] == 'w' ? IR_SCHED_WARMUP_COSINE : IR_SCHED_CONSTANT;
        break;
    }
    return 1;
}

/* every flag of the training binary, for "did you mean" */
static const char *const train_flags[] = {
    "--data", "--val-data", "--packing", "--resume", "--overwrite-ckpt", "--ckpt-dir", "--log", "--device", "--dump",
    "--no-cuda-graph", "--eval", "--init", "--lr", "--set", "--steps", "--seed", "--batch", "--eval-every",
    "--ckpt-every", "--keep-last", "--log-every", "--val-batches", "--dump-steps", "--profile", "--threads",
    "--simulate-ranks", "--nproc", "--grad-accum", "--keep-best", "--no-pseudo-perplexity",
    "--dry-run", "--gpu-mem", "--help", NULL};

int trainer_parse_flags(Trainer *t, int argc, char **argv)
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
    f->packing = -1;
    f->warmup = -1;
    f->min_lr = -1;
    f->schedule = -1;
    f->grad_accum = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t x;
#define NEED_VALUE() do { if (!v) return trainer_usage_error(t->prog, "%s needs a value", a); i++; } while (0)
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf(usage_train, t->prog, t->g->model, t->prog, t->prog, (long long)t->tr.steps, (long long)t->tr.batch, t->tr.lr,
                   trainer_peaks_for(TRAINER_DRY_RUN_GPU)->usable_gib);
            return 0;
        } else if (strcmp(a, "--data") == 0 || strcmp(a, "--val-data") == 0) {
            NEED_VALUE();
            int val = a[2] == 'v';
            const char **list = val ? f->val_data : f->data;
            int *n = val ? &f->nval_data : &f->ndata;
            /* the value and every following argument up to the next option */
            for (int first = 1; first || (i + 1 < argc && (argv[i + 1][0] != '-' || !strcmp(argv[i + 1], "-")));
                 first = 0) {
                if (*n == MAX_DATA_FILES)
                    return trainer_usage_error(t->prog, "at most %d %s arguments (give a directory or a glob)",
                                               MAX_DATA_FILES, a);
                list[(*n)++] = argv[first ? i : ++i];
            }
        } else if (strcmp(a, "--packing") == 0) {
            NEED_VALUE();
            if (strcmp(v, "concat") && strcmp(v, "packed") && strcmp(v, "rows"))
                return trainer_usage_error(t->prog, "--packing must be concat, packed or rows, not '%s'", v);
            f->packing = v[0] == 'c' ? IR_PACK_CONCAT : v[0] == 'p' ? IR_PACK_PACKED : IR_PACK_ROWS;
        } else if (strcmp(a, "--resume") == 0) {
            f->resume = 1;
        } else if (strcmp(a, "--no-pseudo-perplexity") == 0) {
            f->no_pll = 1;
        } else if (strcmp(a, "--keep-best") == 0) {
            f->keep_best = 1;
        } else if (strcmp(a, "--overwrite-ckpt") == 0) {
            f->overwrite_ckpt = 1;
        } else if (strcmp(a, "--ckpt-dir") == 0) {
            NEED_VALUE();
            f->ckpt_dir = v;
        } else if (strcmp(a, "--log") == 0) {
            NEED_VALUE();
            f->log_path = v;
        } else if (strcmp(a, "--device") == 0) {
            NEED_VALUE();
            if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "cuda"))
                return trainer_usage_error(t->prog, "--device must be auto, cpu or cuda, not '%s'", v);
            f->device = v;
        } else if (strcmp(a, "--dump") == 0) {
            NEED_VALUE();
            f->dump_dir = v;
        } else if (strcmp(a, "--dry-run") == 0) {
            f->dry_run = 1;
        } else if (strcmp(a, "--gpu-mem") == 0) {
            NEED_VALUE();
            if (!parse_double_in(v, 0, 1 << 20, 1, &f->gpu_mem_gib))
                return trainer_usage_error(t->prog, "--gpu-mem takes the GPU's memory in GiB, a number in (0, %d], "
                                           "not '%s'", 1 << 20, v);
        } else if (strcmp(a, "--no-cuda-graph") == 0) {
            f->no_graphs = 1;
        } else if (strcmp(a, "--eval") == 0) {
            NEED_VALUE();
            f->eval_path = v;
        } else if (strcmp(a, "--init") == 0) {
            NEED_VALUE();
            f->init_path = v;
        } else if (strcmp(a, "--set") == 0) {
            NEED_VALUE();
            int rc = parse_set(t, v);
            if (rc != 1)
                return rc;
        } else if (strcmp(a, "--lr") == 0) {
            NEED_VALUE();
            if (!parse_double_in(v, 0, 10, 1, &f->lr))
                return trainer_usage_error(t->prog, "--lr takes a learning rate in (0, 10], not '%s'", v);
        } else {
            static const struct { const char *name; int64_t lo, hi; size_t off; } ints[] = {
                {"--steps", 0, (int64_t)1 << 40, offsetof(Flags, steps)},
                {"--seed", 0, INT64_MAX, offsetof(Flags, seed)},
                {"--batch", 1, 1 << 20, offsetof(Flags, batch)},
                {"--eval-every", 0, (int64_t)1 << 40, offsetof(Flags, eval_every)},
                {"--ckpt-every", 1, (int64_t)1 << 40, offsetof(Flags, ckpt_every)},
                {"--keep-last", 0, 1 << 20, offsetof(Flags, keep_last)},
                {"--log-every", 1, (int64_t)1 << 40, offsetof(Flags, log_every)},
                {"--val-batches", 0, (int64_t)1 << 40, offsetof(Flags, val_batches)},
                {"--dump-steps", 1, (int64_t)1 << 20, offsetof(Flags, dump_steps)},
                {"--profile", 1, (int64_t)1 << 20, offsetof(Flags, profile)},
                {"--grad-accum", 1, 1 << 16, offsetof(Flags, grad_accum)},
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
                    return trainer_usage_error(t->prog, "%s takes an integer in [%lld, %lld], not '%s'", a,
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
                return trainer_unknown_option(t->prog, NULL, a, train_flags);
        }
#undef NEED_VALUE
    }
    if (f->resume && !f->ckpt_dir)
        return trainer_usage_error(t->prog, "--resume needs --ckpt-dir DIR");
    if (f->overwrite_ckpt && (!f->ckpt_dir || f->resume))
        return trainer_usage_error(t->prog, "--overwrite-ckpt goes with --ckpt-dir DIR and a fresh run (not --resume)");
    if (f->resume && f->init_path)
        return trainer_usage_error(t->prog, "--resume and --init exclude each other");
    if (f->keep_best && (!f->ckpt_dir || f->eval_every == 0 || f->eval_path))
        return trainer_usage_error(t->prog, "--keep-best keeps the checkpoint of the best validation loss: it needs "
                                   "--ckpt-dir DIR and validation (--eval-every N > 0), and no --eval");
    if (f->grad_accum > 1 && f->profile)
        return trainer_usage_error(t->prog, "--profile times single steps: run it without --grad-accum");
    if (f->eval_path && !f->resume && !f->init_path)
        return trainer_usage_error(t->prog, "--eval needs trained parameters: add --init CKPT or --resume --ckpt-dir DIR");
    if (f->gpu_mem_gib > 0 && !f->dry_run)
        return trainer_usage_error(t->prog, "--gpu-mem goes with --dry-run (a run checks the GPU's own free memory)");
    if (f->dry_run && !strcmp(f->device, "cpu"))
        return trainer_usage_error(t->prog, "--dry-run plans GPU memory: give --device cuda (or leave --device out)");
    if (f->dry_run && (f->eval_path || f->resume || f->init_path))
        return trainer_usage_error(t->prog, "--dry-run plans a training run's memory: drop --eval, --resume and --init");
    if (f->dry_run)
        return -1;  /* no data needed */
    if (!f->eval_path && f->ndata == 0)
        return trainer_usage_error(t->prog, "no training data: give --data FILE (FASTA or FASTA.gz)");
    return -1;
}
