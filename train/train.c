/* train.c - the training binary's entry (train.h): the plan it was given,
 * the flags checked once against it, another plan only when asked for
 * another batch, seq or world size (driver_replan), then the ranks: threads of
 * this process (--simulate-ranks), processes it starts (--nproc), or this
 * process as one rank of a run launched elsewhere (MOEC_RANK); each rank
 * runs trainer_run (loop.c) on the backend chosen here (runtime/backend.h:
 * the GPU when there is one, else the CPU). */
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
#include "cluster_env.h"
#include "launch.h"
#include "../runtime/cpu/cpu.h"
#include "../data/data.h"
#include "../data/shards.h"
#include "../runtime/backend.h"
#include "trainer.h"






int train_check_alphabet(const IrGraph *g, Diag *d)
{
    SrcLoc none = {0, 0, 0};
    if (g->train.alphabet == IR_ALPHABET_NONE) {
        diag_error(d, none, "model `%s` has no alphabet: add `alphabet protein` or `alphabet dna` to its train "
                   "section to train it on FASTA data", g->model);
        return 0;
    }
    const Alphabet *a = alphabet_get(g->train.alphabet == IR_ALPHABET_DNA ? ALPHABET_DNA : ALPHABET_PROTEIN);
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

/* ------------------------------------------------------------ stopping on a signal */

/* SIGTERM / SIGINT (a scheduler's preemption, Ctrl-C): the first asks the
 * ranks to stop at the next step boundary, after a checkpoint; a second one
 * stops the process at once. Only async-signal-safe calls in the handler. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
    if (stop_signal) {
        static const char msg[] = "moec: a second signal: stopping now, without a checkpoint\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        (void)w;
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
    static const char msg[] = "moec: signal received: stopping after this step, with a checkpoint when --ckpt-dir "
                              "is given (a second signal stops at once)\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
}

void trainer_catch_stop_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

int trainer_stop_requested(void) { return stop_signal; }

/* ------------------------------------------------------------ the ranks */

/* An error on one rank: print it with the rank and tell the others. */
int trainer_error(Trainer *t, const char *fmt, ...)
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
int trainer_allreduce_f64(Trainer *t, CommGroup g, double *v, int64_t n)
{
    if (t->world == 1)
        return 1;
    return t->be->ops->host_allreduce_f64(t->be, g, v, n);
}

int trainer_allgather(Trainer *t, CommGroup g, const void *in, void *out, size_t bytes)
{
    return t->be->ops->host_allgather(t->be, g, in, out, bytes);
}








static void use_plan(Trainer *t, const Plan *p)
{
    t->pl = p;
    t->g = p->graph;
    t->tr = p->graph->train;
    t->model_hash = hash64(p->source.text ? p->source.text : "", p->source.len);
}


/* FASTA files read into memory, or one shard directory mapped (data/shards.h) */
static int load_data(FastaSet *data, const Alphabet *alpha, const char *const *files, int n)
{
    char err[4096];
    if (!data_open(files, n, alpha, data, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 0;
    }
    return 1;
}

static void trainer_free(Trainer *t)
{
    if (t->log)
        fclose(t->log);
    if (t->ckpt_lock)
        close(t->ckpt_lock - 1);
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
    a->rc = trainer_run(a->t);
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
    /* after training: representations and likelihoods (embed.c, score.c) */
    if (argc > 1 && strcmp(argv[1], "embed") == 0)
        return trainer_embed_main(argc, argv, plan);
    if (argc > 1 && strcmp(argv[1], "score") == 0)
        return trainer_score_main(argc, argv, plan);

    /* flags first, checked once against the compiled model */
    Trainer *probe = calloc(1, sizeof *probe);
    probe->prog = prog;
    probe->world = 1;
    use_plan(probe, plan);
    int rc = trainer_parse_flags(probe, argc, argv);
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
    char *addr = NULL, err[1024], said[1024];
    /* torchrun's or Slurm's variables, when the MOEC_ ones are not set (cluster_env.h) */
    if (!cluster_env_apply(said, sizeof said, err, sizeof err)) {
        fprintf(stderr, "%s: error: %s\n", prog, err);
        return 2;
    }
    if (said[0] && getenv("MOEC_RANK") && strcmp(getenv("MOEC_RANK"), "0") == 0)
        printf("launch: from the cluster's variables: %s\n", said);
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
    int64_t ep = tr.ep, batch = f.batch ? f.batch : tr.batch, seq = f.seq ? f.seq : tr.seq;
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
    /* --dry-run: the GPU memory plan for this batch, seq and world, from the plan alone (no GPU, no data) */
    if (f.dry_run) {
        Plan *q = NULL;
        if (batch != plan->batch || seq != plan->seq || world != plan->world) {
            q = driver_replan(plan, batch, seq, world, err, sizeof err);
            if (!q) {
                fprintf(stderr, "%s: error: %s\n", prog, err);
                free(addr);
                return 1;
            }
        }
        rc = trainer_dry_run(prog, q ? q : plan, &f, world, f.simulate_ranks > 1 && env_rank < 0);
        plan_free(q);
        free(addr);
        return rc;
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
    trainer_catch_stop_signals();
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
    FastaSet data, val_data;
    fasta_set_init(&val_data);
    const Alphabet *alpha = alphabet_get(tr.alphabet == IR_ALPHABET_DNA ? ALPHABET_DNA : ALPHABET_PROTEIN);
    if (!(f.eval_path ? load_data(&data, alpha, &f.eval_path, 1) : load_data(&data, alpha, f.data, f.ndata)) ||
        (!f.eval_path && f.nval_data && !load_data(&val_data, alpha, f.val_data, f.nval_data))) {
        fasta_set_free(&data);
        fasta_set_free(&val_data);
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
            fasta_set_free(&val_data);
            return 1;
        }
    } else if (world > 1) {
        comms = comm_sim_create(world, (int)ep, err, sizeof err);
        if (!comms) {
            fprintf(stderr, "%s: error: %s\n", prog, err);
            fasta_set_free(&data);
            fasta_set_free(&val_data);
            return 1;
        }
    } else {
        single = comm_single();
    }
    /* another batch or world size than compiled for: the model is planned again, once for all local ranks */
    Plan *replanned = NULL;
    if (batch != plan->batch || seq != plan->seq || world != plan->world) {
        double t0 = wall_seconds();
        replanned = driver_replan(plan, batch, seq, world, err, sizeof err);
        if (!replanned) {
            fprintf(stderr, "%s: error: %s\n", prog, err);
            if (comms)
                comm_sim_free(comms, world);
            comm_free(single);
            fasta_set_free(&data);
            fasta_set_free(&val_data);
            return 1;
        }
        if (env_rank <= 0)
            printf("plan: compiled again for batch %lld x seq %lld over %d rank%s (the binary's plan is for batch "
                   "%lld x seq %lld over %lld) in %.2f s\n", (long long)batch, (long long)seq, world,
                   world == 1 ? "" : "s", (long long)plan->batch, (long long)plan->seq, (long long)plan->world,
                   wall_seconds() - t0);
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
        t->shared_val = val_data.nseq ? &val_data : NULL;
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
    fasta_set_free(&val_data);
    plan_free(replanned);
    free(ts);
    free(args);
    free(th);
    return rc;
}
