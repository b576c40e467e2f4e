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
#include <sys/stat.h>
#include <unistd.h>

#include "../util/util.h"
#include "trainer.h"
#include "../formats/safetensors.h"

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
    if (!full || !trainer_allgather(t, COMM_EP, local, full, bytes))
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

int trainer_save_checkpoint(Trainer *t)
{
    char path[4096], err[512], num[64];
    const IrGraph *g = t->g;
    if (!t->be->ops->get_state(t->be, t->params, t->adam))
        return trainer_error(t, "checkpoint at step %lld: reading the %s backend's state: %s", (long long)t->step,
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
    st_writer_set_metadata(&w, "moec_version", moec_version());
    int ok = 1;
    if (is_rank0(t)) {
        ok = st_writer_save(&w, trainer_ckpt_path(t, path, sizeof path), err, sizeof err);
        if (!ok)
            trainer_error(t, "checkpoint at step %lld not written: %s", (long long)t->step, err);
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
int trainer_load_checkpoint(Trainer *t, const char *path, int full)
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

int trainer_dump_step(Trainer *t, double loss, double lr, double gnorm)
{
    const IrGraph *g = t->g;
    char path[4096], err[512], num[64];
    if (!t->be->ops->get_state(t->be, t->params, NULL))
        return trainer_error(t, "--dump: %s", t->be->ops->error(t->be));
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
            ok = trainer_error(t, "--dump: %s", grads[p] ? t->be->ops->error(t->be) : "out of memory");
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
            ok = trainer_error(t, "--dump: %s", err);
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
