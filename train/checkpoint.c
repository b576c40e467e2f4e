/* checkpoint.c - checkpoints (written atomically, resumed exactly), --init
 * and --dump. Checkpoints hold whole tensors: an expert-parallel rank
 * gathers its shards when writing and takes its slice when reading. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/util.h"
#include "trainer.h"
#include "../formats/checkpoint.h"

const char *trainer_ckpt_path(const Trainer *t, char *buf, size_t n)
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
    if (!full || !trainer_allgather(t, COMM_EP, local, full, bytes)) {
        /* a peer lost while gathering: an error of the run, reported by the caller */
        trainer_error(t, "gathering %s: %s", n->name, full ? t->be->ops->error(t->be) : "out of memory");
        free(full);
        return NULL;
    }
    *owned = 1;
    return full;
}

/* The first non-finite value of n floats: its index, or -1 when all are finite. */
static int64_t first_nonfinite(const float *x, int64_t n, int64_t *count)
{
    int64_t first = -1, c = 0;
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) {
            if (first < 0)
                first = i;
            c++;
        }
    *count = c;
    return first;
}

/* Before the run writes anything: the checkpoint directory made, locked
 * for this run alone, checked writable; a checkpoint already there is kept
 * unless the run resumes from it or was told to replace it; temporary files
 * of killed runs removed (rank 0). */
#define FAIL(...) do { trainer_error(t, __VA_ARGS__); return 0; } while (0)
int trainer_ckpt_prepare(Trainer *t)
{
    const char *dir = t->f.ckpt_dir;
    char path[4096];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        FAIL("cannot create checkpoint directory %s: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        FAIL("--ckpt-dir %s is not a directory", dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        FAIL("cannot open checkpoint directory %s: %s", dir, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            FAIL("checkpoint directory %s is in use by another run (it holds the directory's "
                                 "lock); two runs must not share a --ckpt-dir", dir);
        FAIL("cannot lock checkpoint directory %s: %s", dir, strerror(e));
    }
    t->ckpt_lock = fd + 1;
    trainer_ckpt_path(t, path, sizeof path);
    if (!t->f.resume && !t->f.overwrite_ckpt && access(path, F_OK) == 0)
        FAIL("%s already holds a checkpoint: continue it with --resume, or replace it with "
                             "--overwrite-ckpt (or choose another --ckpt-dir)", path);
    /* checkpoint.safetensors.tmp.PID of runs that were killed while saving, and the write probes (below) of
     * runs killed at their start: we hold the lock, nobody writes them */
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        int probe = strncmp(de->d_name, ".moec-write-check.", 18) == 0;
        if (!probe && strncmp(de->d_name, "checkpoint.safetensors.tmp.", 27) != 0)
            continue;
        char stale[4096 + 256];
        snprintf(stale, sizeof stale, "%s/%s", dir, de->d_name);
        if (unlink(stale) == 0 && !probe)
            printf("removed %s, left by a run that stopped while saving\n", stale);
    }
    if (d)
        closedir(d);
    /* writable now, not found out at the first save */
    char probe[4096 + 64];
    snprintf(probe, sizeof probe, "%s/.moec-write-check.%ld", dir, (long)getpid());
    int pfd = open(probe, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int ok = pfd >= 0 && write(pfd, "x", 1) == 1;
    int e = errno;
    if (pfd >= 0) {
        if (close(pfd) != 0 && ok) {
            ok = 0;
            e = errno;
        }
        unlink(probe);
    }
    if (!ok)
        FAIL("checkpoint directory %s is not writable: %s", dir, strerror(e));
    return 1;
}
#undef FAIL

static void full_shape(const Trainer *t, const IrNode *n, int64_t *shape)
{
    memcpy(shape, n->shape, sizeof(int64_t) * (size_t)n->rank);
    if (ir_has_attr(n, IR_ATTR_SHARD))
        shape[0] *= t->ep;
}

int trainer_save_checkpoint(Trainer *t)
{
    char path[4096], err[512], num[64];
    const IrGraph *g = t->g;
    if (!t->be->ops->get_state(t->be, t->params, t->adam))
        return !trainer_error(t, "checkpoint at step %lld: reading the %s backend's state: %s", (long long)t->step,
                             t->be->ops->name, t->be->ops->error(t->be));
    CkptWriter w;
    ckpt_writer_init(&w, g->model, t->model_hash, t->step);
    const float **bufs = calloc((size_t)g->nparams * 3 + 1, sizeof(float *));
    int *owned = calloc((size_t)g->nparams * 3 + 1, sizeof(int));
    if (!bufs || !owned)
        die("out of memory");
    int bad_ok = 1;
    for (int p = 0; p < g->nparams && bad_ok; p++) {
        IrNode *n = g->params[p];
        int64_t shape[IR_MAX_RANK];
        full_shape(t, n, shape);
        const float *src[CKPT_KIND_COUNT] = {t->params + t->param_off[p], t->adam + t->param_off[p],
                                             t->adam + t->nparams_total + t->param_off[p]};
        for (int k = 0; k < CKPT_KIND_COUNT; k++) {
            bufs[p * 3 + k] = full_tensor(t, p, src[k], &owned[p * 3 + k]);
            if (!bufs[p * 3 + k]) {
                bad_ok = 0;
                break;
            }
            ckpt_writer_add(&w, (CkptKind)k, n->name, n->rank, shape, bufs[p * 3 + k]);
            /* a checkpoint holds finite numbers only: a poisoned state never replaces a good checkpoint */
            int64_t numel = ir_numel(n) * (ir_has_attr(n, IR_ATTR_SHARD) ? t->ep : 1), bad;
            int64_t at = bad_ok ? first_nonfinite(bufs[p * 3 + k], numel, &bad) : -1;
            if (at >= 0) {
                trainer_error(t, "checkpoint at step %lld not written: tensor %s%s holds %lld non-finite value%s "
                              "(the first, %g, at flat index %lld); the previous checkpoint in %s is kept",
                              (long long)t->step, ckpt_prefix[k], n->name, (long long)bad, bad == 1 ? "" : "s",
                              (double)bufs[p * 3 + k][at], (long long)at, t->f.ckpt_dir);
                bad_ok = 0;
            }
        }
    }
    DataLoaderState ls;
    data_loader_state_get(&t->train_loader, &ls);
    int64_t ls_shape = (int64_t)sizeof ls;
    st_writer_add(&w.st, "state.train_loader", ST_U8, 1, &ls_shape, &ls, sizeof ls);
    snprintf(num, sizeof num, "%lld", (long long)t->f.seed);
    ckpt_writer_meta(&w, "seed", num);
    trainer_ckpt_meta(t, &w);
    /* a shard set's index checksum: a resume on changed shards is refused by name */
    snprintf(num, sizeof num, "%016llx", (unsigned long long)t->shared->checksum);
    ckpt_writer_meta(&w, "data_checksum", num);
    if (t->f.keep_best && isfinite(t->best_val)) {
        /* a resume goes on comparing with the best so far */
        char d[32];
        ckpt_writer_meta(&w, "best_val_loss", fmt_double(d, t->best_val));
        snprintf(num, sizeof num, "%lld", (long long)t->best_step);
        ckpt_writer_meta(&w, "best_step", num);
    }
    int ok = bad_ok;
    if (ok && is_rank0(t)) {
        ok = ckpt_writer_save(&w, trainer_ckpt_path(t, path, sizeof path), err, sizeof err);
        if (!ok)
            trainer_error(t, "checkpoint at step %lld not written: %s", (long long)t->step, err);
        else if (t->f.keep_last > 0)
            ok = trainer_keep_last(t, path);
        if (ok && t->f.keep_best && isfinite(t->best_val) && t->best_step == t->step)
            ok = trainer_keep_best(t, path);
    }
    ckpt_writer_free(&w);
    for (int i = 0; i < g->nparams * 3; i++)
        if (owned[i])
            free((void *)bufs[i]);
    free(bufs);
    free(owned);
    return ok;
}

int trainer_load_checkpoint(Trainer *t, const char *path, int full)
{
    Ckpt c;
    char err[1024];
    if (!ckpt_open(&c, path, err, sizeof err)) {
        fprintf(stderr, "%s: error: %s\n", t->prog, err);
        return 0;
    }
    /* tensors by name and shape; for --resume also what would make it inexact (ckpt_match.c) */
    int ok = trainer_ckpt_check(t, &c, path, full);
    const IrGraph *g = t->g;
    for (int p = 0; ok && p < g->nparams; p++) {
        IrNode *n = g->params[p];
        float *dst[CKPT_KIND_COUNT] = {t->params + t->param_off[p], full ? t->adam + t->param_off[p] : NULL,
                                       full ? t->adam + t->nparams_total + t->param_off[p] : NULL};
        for (int k = 0; ok && k < (full ? CKPT_KIND_COUNT : 1); k++) {
            int64_t shape[IR_MAX_RANK];
            full_shape(t, n, shape);
            const SafeTensor *x = ckpt_tensor(&c, (CkptKind)k, n->name, n->rank, shape, err, sizeof err);
            if (!x) {
                fprintf(stderr, "%s: error: %s: %s\n", t->prog, path, err);
                ok = 0;
                break;
            }
            /* checkpoints hold whole tensors; an expert shard takes its slice */
            size_t local = (size_t)ir_numel(n) * sizeof(float);
            size_t off = ir_has_attr(n, IR_ATTR_SHARD) ? local * (size_t)comm_ep_rank(t->comm) : 0;
            /* no NaN or infinity enters a run; AdamW's second moment is a mean of squares */
            int64_t numel = (int64_t)(x->nbytes / sizeof(float)), bad = 0, at = -1;
            float v = 0;
            for (int64_t i = 0; i < numel; i++) {
                float y;
                memcpy(&y, (const char *)x->data + (size_t)i * sizeof y, sizeof y);  /* may be unaligned */
                if (!isfinite(y) || (k == CKPT_ADAM_V && y < 0)) {
                    if (at < 0) {
                        at = i;
                        v = y;
                    }
                    bad++;
                }
            }
            if (at >= 0) {
                fprintf(stderr, "%s: error: %s: tensor %s%s holds %lld %s value%s (the first, %g, at flat index %lld); "
                        "the checkpoint is damaged or was written by a run that diverged\n", t->prog, path,
                        ckpt_prefix[k], n->name, (long long)bad, isfinite(v) ? "negative" : "non-finite",
                        bad == 1 ? "" : "s", (double)v, (long long)at);
                ok = 0;
                break;
            }
            memcpy(dst[k], (const char *)x->data + off, local);
        }
    }
    if (ok && full) {
        const SafeTensor *ls = st_find(&c.st, "state.train_loader");
        if (!ls || ls->nbytes != sizeof(DataLoaderState) || c.step < 0) {
            fprintf(stderr, "%s: error: %s has no valid training state (step, loader)\n", t->prog, path);
            ok = 0;
        } else {
            DataLoaderState st_l;
            memcpy(&st_l, ls->data, sizeof st_l);
            const char *bv = st_metadata(&c.st, "best_val_loss"), *bs = st_metadata(&c.st, "best_step");
            if (bv && bs) {
                t->best_val = strtod(bv, NULL);
                t->best_step = strtoll(bs, NULL, 10);
            }
            const char *dck = st_metadata(&c.st, "data_checksum");
            char now[32];
            snprintf(now, sizeof now, "%016llx", (unsigned long long)t->shared->checksum);
            if (dck && strcmp(dck, now) != 0) {
                fprintf(stderr, "%s: error: %s was written while training on %s (checksum %s), but --data is %s "
                        "(checksum %s): the data changed since; resume on the same data, or start a new run\n",
                        t->prog, path, strcmp(dck, "0000000000000000") ? "a shard set" : "FASTA files", dck,
                        t->shared->checksum ? "a shard set" : "FASTA files", now);
                ok = 0;
            } else if (!data_loader_state_set(&t->train_loader, &st_l)) {
                fprintf(stderr, "%s: error: %s was written while training on other data or with another seed; "
                        "resume with the same --data and --seed\n", t->prog, path);
                ok = 0;
            }
            t->step = c.step;
        }
    }
    ckpt_close(&c);
    return ok;
}

int trainer_dump_step(Trainer *t, double loss, double lr, double gnorm)
{
    const IrGraph *g = t->g;
    char path[4096], err[512], num[64];
    if (!t->be->ops->get_state(t->be, t->params, NULL))
        return !trainer_error(t, "--dump: %s", t->be->ops->error(t->be));
    SafeTensorsWriter w;
    st_writer_init(&w);
    int64_t bs[2] = {t->tr.batch * t->f.grad_accum, t->tr.seq};
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
            ok = !trainer_error(t, "--dump: %s", grads[p] ? t->be->ops->error(t->be) : "out of memory");
            break;
        }
        const float *src[2] = {grads[p], t->params + t->param_off[p]};
        static const char *const pre[2] = {"grad.", "param."};
        for (int k = 0; k < 2; k++) {
            bufs[p * 2 + k] = full_tensor(t, p, src[k], &owned[p * 2 + k]);
            if (!bufs[p * 2 + k]) {
                ok = 0;
                break;
            }
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
            ok = !trainer_error(t, "--dump: %s", err);
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
