/* trainer.h - what the files of the training binary share: its flags, one
 * rank's state, and the functions each file gives the others.
 *
 *   train.c       the entry: flags checked once, the ranks (threads,
 *                 processes or one of a launched run), the backend chosen
 *   flags.c       the command line
 *   loop.c        one rank's run: parameters, the step loop, evaluation
 *   checkpoint.c  checkpoints, --init, --resume and --dump
 *   metrics.c     the summary, progress lines and the JSONL metrics */
#ifndef MOEC_TRAINER_H
#define MOEC_TRAINER_H

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>

#include "../data/data.h"
#include "../plan/plan.h"
#include "../runtime/backend.h"
#include "../runtime/comm/comm.h"

enum { MAX_DATA_FILES = 64 };

typedef struct Flags {
    const char *data[MAX_DATA_FILES];
    int ndata;
    const char *val_data[MAX_DATA_FILES];  /* --val-data: the validation set (else 1% of --data) */
    int nval_data;
    int64_t steps, seed, batch, eval_every, ckpt_every, log_every, val_batches;
    double lr;
    const char *ckpt_dir, *log_path, *device, *eval_path, *init_path;
    int resume, threads;
    int overwrite_ckpt;  /* --overwrite-ckpt: a fresh run may replace the checkpoint in --ckpt-dir */
    int simulate_ranks;  /* --simulate-ranks N: N ranks as threads of this process */
    int nproc;           /* --nproc N: N processes on this host, over TCP */
    const char *dump_dir;  /* --dump DIR: each step's batch, loss, gradients, params */
    int64_t dump_steps;
    int no_graphs;       /* --no-cuda-graph */
    int64_t profile;     /* --profile N: time N steps per IR node (0: off) */
    int packing;         /* --packing: an IrPacking, or -1 for the model's */
    int64_t keep_last;   /* --keep-last N: keep DIR/checkpoint-STEP.safetensors of the last N (0: none) */
    /* --set KEY=VALUE: the train section's run-time settings (steps, lr and batch land in the fields above) */
    int64_t warmup;      /* -1: the model's */
    double min_lr;       /* < 0: the model's */
    int schedule;        /* an IrSchedule, or -1 for the model's */
    int64_t seq;         /* 0: the model's (another one re-plans, as --batch does) */
    int64_t grad_accum;  /* --grad-accum N: N micro-batches of the plan's batch per optimizer step (1: off) */
    int keep_best;       /* --keep-best: DIR/checkpoint-best.safetensors, the best validation lm_loss so far */
    int no_pll;          /* --no-pseudo-perplexity: --eval of a masked LM without it */
    int dry_run;         /* --dry-run: the GPU memory plan, no training (dryrun.c) */
    double gpu_mem_gib;  /* --gpu-mem GiB: the capacity --dry-run plans against (0: the H200's) */
} Flags;

/* --profile N (metrics.c): the steps it times and what they took */
typedef struct TrainerProfile {
    BackendProfile acc;            /* summed over the profiled steps (runtime/backend.h) */
    int64_t first, last;           /* the profiled steps, inclusive */
    int warmup;                    /* a step ran before them */
    int reported;
} TrainerProfile;

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
    const FastaSet *shared_val;    /* --val-data, read once for all ranks, or NULL */
    IrPacking packing;             /* in force: concat, packed or rows */
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
    TrainerProfile *prof;          /* --profile, or NULL */
    int log_errno;                 /* the first failed write to --log (0: none) */
    int ckpt_lock;                 /* the locked --ckpt-dir's descriptor + 1 (0: none) */
    double flops_per_token;        /* model FLOPs per token (plan/cost.c: plan_model_flops over the rank's tokens) */
    double mfu_peak;               /* FLOP/s the MFU is against: bf16 peak x the GPUs of the run; 0: none (CPU) */
    const char *mfu_gpu;           /* the GPU whose peak that is, or NULL */
    int mfu_gpus;                  /* how many of them */
    double best_val;               /* --keep-best: the best validation lm_loss so far (NAN: none yet) */
    int64_t best_step;             /* and its step */
} Trainer;

static inline int is_rank0(const Trainer *t) { return t->rank == 0; }

/* train.c */
/* An error on one rank: printed with the rank, and the others told. Returns 1. */
int trainer_error(Trainer *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Collectives on host values over the rank's backend and transport. */
int trainer_allreduce_f64(Trainer *t, CommGroup g, double *v, int64_t n);
int trainer_allgather(Trainer *t, CommGroup g, const void *in, void *out, size_t bytes);
/* SIGTERM and SIGINT: the first sets the stop request (its signal number), a second kills the process. */
void trainer_catch_stop_signals(void);
int trainer_stop_requested(void);

/* flags.c */
/* Parses the command line into t->f; -1 to go on, else the exit status (--help: 0, usage errors: 2). */
int trainer_parse_flags(Trainer *t, int argc, char **argv);
int trainer_usage_error(const char *prog, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "[CMD: ]unknown option 'OPT'; did you mean 'X'?" (X the nearest of the NULL-terminated `known`, when one
 * is near) as a usage error: returns 2. */
int trainer_unknown_option(const char *prog, const char *cmd, const char *opt, const char *const *known);

/* loop.c */
/* One rank's whole run (t arrives with its flags, plan, communicator, rank, world and data). */
int trainer_run(Trainer *t);

/* checkpoint.c */
const char *trainer_ckpt_path(const Trainer *t, char *buf, size_t n);
/* Rank 0, before the run writes: --ckpt-dir made, locked (flock) for this run alone, writable; an
 * existing checkpoint refused without --resume or --overwrite-ckpt; stale temporary files removed.
 * 1, or 0 after a message. */
int trainer_ckpt_prepare(Trainer *t);
/* 1, or 0 after a message (a non-finite tensor, a write error): the previous checkpoint is kept. */
int trainer_save_checkpoint(Trainer *t);
/* Parameters, and with full also AdamW, the step and the loader's state. 1, or 0 after a message. */
int trainer_load_checkpoint(Trainer *t, const char *path, int full);
int trainer_dump_step(Trainer *t, double loss, double lr, double gnorm);

/* ckpt_match.c: whether a checkpoint fits (by tensor name and shape; for
 * a resume also seq, batch and the structure hash), the differences on
 * stderr; and the metadata that check reads */
struct Ckpt;
struct CkptWriter;
uint64_t trainer_structure_hash(const Trainer *t);
int trainer_ckpt_check(const Trainer *t, const struct Ckpt *c, const char *path, int full);
void trainer_ckpt_meta(const Trainer *t, struct CkptWriter *w);
/* --keep-last N: a copy of the checkpoint just written at `path` as
 * DIR/checkpoint-STEP.safetensors, and those beyond the last N removed. 1, or 0 after a message. */
int trainer_keep_last(Trainer *t, const char *path);
/* --keep-best: DIR/checkpoint-best.safetensors made a hard link to the checkpoint just written at `path`
 * (through a temporary name renamed over it). 1, or 0 after a message. */
int trainer_keep_best(Trainer *t, const char *path);

/* eval.c: --eval over whole sequences, independent of the seed */
typedef struct EvalRows {
    int64_t nrows, seq, nseq;
    int32_t *tokens, *targets;   /* [nrows, seq] */
} EvalRows;
typedef struct EvalResult {
    double lm_loss;              /* the language-model loss, token-weighted */
    double loss;                 /* the objective (auxiliary terms included), token-weighted */
    int lm_separate;             /* the backend read the language-model loss apart */
    int64_t tokens;              /* scored targets */
    BackendMetrics *moe;         /* the passes' metrics summed (this rank's; NULL: not read) */
} EvalResult;
int eval_rows_build(EvalRows *e, const FastaSet *fs, const Alphabet *a, int64_t seq, Objective obj);
void eval_rows_free(EvalRows *e);
int trainer_eval_rows(Trainer *t, const EvalRows *e, EvalResult *r);   /* 0, or 1 after a message */
int trainer_eval_file(Trainer *t);                                     /* exit status */

/* moe_metrics.c: lm_loss, aux_loss and the per-layer expert load of the steps since the last call, added to o */
void trainer_log_moe(Trainer *t, cJSON *o);
/* m's per-layer metrics (means over its passes) added to o as "moe": [...] (nothing without layers) */
void trainer_moe_json(const Trainer *t, const BackendMetrics *m, cJSON *o);
/* a += b (sums over passes) */
void trainer_metrics_add(BackendMetrics *a, const BackendMetrics *b);

/* infer.c: forward passes for embed, score and --eval's pseudo-perplexity */
/* device: --device auto|cpu|cuda (NULL: auto), as the training binary's. 1, or 0 after a message. */
int infer_open(Trainer *t, const char *prog, const Plan *pl, const char *ckpt, const char *device);
void infer_close(Trainer *t);
/* What the backend planned, one line on out: "memory: forward passes only: ..." (BackendOptions.forward_only),
 * else "memory: the training plan: ...". */
void trainer_print_eval_memory(Trainer *t, FILE *out);
/* A batch of rows to run: tokens [n, S]; queries (row, position, token,
 * sign, owner): out[owner] += sign * log p(token at position of row). Several
 * owners may share a row (variants masking the same positions). */
typedef struct InferRows {
    int64_t n, cap, S;
    int32_t *tokens;   /* [n, S] */
    int64_t nq, qcap;
    int64_t *qrow, *qpos, *qown;
    int32_t *qtok;
    int8_t *qsign;
} InferRows;
int32_t *infer_rows_add(InferRows *r);                 /* a new row of S tokens to fill */
void infer_rows_query(InferRows *r, int64_t owner, int64_t pos, int32_t tok, int sign);   /* on the last row */
void infer_rows_free(InferRows *r);
/* Runs the rows in batches through the backend's forward_probe up to `node` (the logits); out[owner] +=
 * sign * log p(token at position), a log-softmax in double; per_query (NULL, or one per query) gets each
 * query's log p. 1, or 0 after a message. */
int infer_rows_run(Trainer *t, int node, const InferRows *r, double *out, double *per_query);
/* The record BOS res[0..L) EOS at position j. */
int32_t infer_rec_at(const Trainer *t, const int32_t *res, int64_t L, int64_t j);
/* Causal: rows of the windows of the record, every residue and the EOS queried from what precedes it. */
void infer_causal_rows(Trainer *t, InferRows *r, const int32_t *res, int64_t L, int64_t owner, int sign);
/* A row of the window from record position w0, with the record positions pos[0..n) masked (one window). */
int32_t *infer_masked_row(Trainer *t, InferRows *r, const int32_t *res, int64_t L, int64_t w0, const int64_t *pos,
                          int n);
/* The node of the logits feeding the language-model loss over the alphabet, or -1. */
int infer_logits_node(const Trainer *t);
/* A masked LM's pseudo-log-likelihood of every sequence of fs (each residue masked in turn, one row each, in
 * the windows of --eval, batched): out[s], natural log; *rows the rows run. 1, or 0 after a message. */
int infer_pll(Trainer *t, int node, const FastaSet *fs, double *out, int64_t *rows);
/* The same over prepared rows r (infer_pll_rows), so a caller can read each query's log p (per_query). */
void infer_pll_rows(Trainer *t, InferRows *r, const FastaSet *fs);
int fasta_ids(const char *path, char ***ids, int64_t *n, char *err, size_t errlen);
void fasta_ids_free(char **ids, int64_t n);
/* embed.c, score.c: the subcommands of a training binary */
int trainer_embed_main(int argc, char **argv, const Plan *pl);
int trainer_score_main(int argc, char **argv, const Plan *pl);

/* metrics.c */
/* What a GPU can do, for the GPUs whose figures are known (metrics.c: the one table): --profile's roofs, the
 * MFU of the progress line (against bf16_tflops) and --dry-run's capacity (usable_gib). */
typedef struct TrainerPeaks {
    const char *gpu;           /* matched as a substring of the device's name */
    double fp32_tflops, bf16_tflops, bf16_nominal, fp8_tflops, hbm_gbps, hbm_nominal;
    double usable_gib;         /* device memory a run may plan for (free on an idle device), GiB */
} TrainerPeaks;
/* The entry whose gpu the name contains, or NULL. */
const TrainerPeaks *trainer_peaks_for(const char *device);
/* The GPU --dry-run plans for unless --gpu-mem says otherwise (its usable_gib). */
#define TRAINER_DRY_RUN_GPU "H200"

/* dryrun.c: --dry-run. The GPU memory plan of pl (already planned for the run's batch, seq and world) on one
 * GPU per rank (all `world` ranks on one GPU when `shared`), against f->gpu_mem_gib or the H200's usable
 * memory; what to reduce when it does not fit. The exit status: 0 fits, 1 does not (or a plan failed). */
int trainer_dry_run(const char *prog, const Plan *pl, const Flags *f, int world, int shared);
void trainer_log(Trainer *t, cJSON *o);   /* one JSONL line (takes o) */
/* 1, or 0 after a message when a write to --log failed. */
int trainer_log_ok(Trainer *t);
void trainer_print_summary(Trainer *t);
/* --profile: sets t->prof for a run whose loop starts after step `start` (NULL without --profile). */
void trainer_profile_begin(Trainer *t, int64_t start);
/* Whether `step` is one to time (with the backend's profile_step instead of step). */
int trainer_profile_wants(const Trainer *t, int64_t step);
/* The table on stdout and the rows in the --log JSONL (rank 0), once. */
void trainer_profile_report(Trainer *t);
void trainer_profile_free(Trainer *t);

#endif
