/* checkpoint.c - moec checkpoints on top of safetensors (checkpoint.h). */
#include "checkpoint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

const char *const ckpt_prefix[CKPT_KIND_COUNT] = {"param.", "adam_m.", "adam_v."};

void ckpt_hash_text(uint64_t hash, char out[17]) { snprintf(out, 17, "%016" PRIx64, hash); }

void ckpt_writer_init(CkptWriter *w, const char *model, uint64_t model_hash, int64_t step)
{
    memset(w, 0, sizeof *w);
    st_writer_init(&w->st);
    char num[32];
    st_writer_set_metadata(&w->st, "format", CKPT_FORMAT);
    st_writer_set_metadata(&w->st, "model", model);
    ckpt_hash_text(model_hash, num);
    st_writer_set_metadata(&w->st, "model_hash", num);
    snprintf(num, sizeof num, "%lld", (long long)step);
    st_writer_set_metadata(&w->st, "step", num);
    st_writer_set_metadata(&w->st, "moec_version", moec_version());
}

void ckpt_writer_add(CkptWriter *w, CkptKind kind, const char *name, int rank, const int64_t *shape,
                     const float *data)
{
    if (w->nnames == w->capnames) {
        w->capnames = w->capnames ? 2 * w->capnames : 64;
        w->names = realloc(w->names, sizeof *w->names * (size_t)w->capnames);
        if (!w->names)
            die("out of memory");
    }
    size_t len = strlen(ckpt_prefix[kind]) + strlen(name) + 1;
    char *full = malloc(len);
    if (!full)
        die("out of memory");
    snprintf(full, len, "%s%s", ckpt_prefix[kind], name);
    w->names[w->nnames++] = full;
    int64_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= shape[d];
    st_writer_add(&w->st, full, ST_F32, rank, shape, data, (size_t)n * sizeof(float));
}

void ckpt_writer_meta(CkptWriter *w, const char *key, const char *value) { st_writer_set_metadata(&w->st, key, value); }

int ckpt_writer_save(CkptWriter *w, const char *path, char *err, size_t errlen)
{
    return st_writer_save(&w->st, path, err, errlen);
}

void ckpt_writer_free(CkptWriter *w)
{
    st_writer_free(&w->st);
    for (int i = 0; i < w->nnames; i++)
        free(w->names[i]);
    free(w->names);
    memset(w, 0, sizeof *w);
}

int ckpt_open(Ckpt *c, const char *path, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (!st_read(path, &c->st, err, errlen))
        return 0;
    const char *fmt = st_metadata(&c->st, "format");
    if (!fmt || strcmp(fmt, CKPT_FORMAT) != 0) {
        snprintf(err, errlen, "%s: not a moec checkpoint (no format " CKPT_FORMAT " in its metadata)", path);
        st_free(&c->st);
        return 0;
    }
    c->model = st_metadata(&c->st, "model");
    c->model_hash = st_metadata(&c->st, "model_hash");
    const char *step = st_metadata(&c->st, "step");
    if (!step || !parse_i64_in(step, 0, INT64_MAX, &c->step))
        c->step = -1;
    return 1;
}

void ckpt_close(Ckpt *c)
{
    st_free(&c->st);
    memset(c, 0, sizeof *c);
}

const SafeTensor *ckpt_tensor(const Ckpt *c, CkptKind kind, const char *name, int rank, const int64_t *shape,
                              char *err, size_t errlen)
{
    char full[1024];
    snprintf(full, sizeof full, "%s%s", ckpt_prefix[kind], name);
    const SafeTensor *x = st_find(&c->st, full);
    int ok = x && x->dtype == ST_F32 && x->rank == rank;
    for (int d = 0; ok && d < rank; d++)
        ok = x->shape[d] == shape[d];
    if (!ok) {
        snprintf(err, errlen, "tensor %s is %s", full, x ? "of another dtype or shape" : "missing");
        return NULL;
    }
    return x;
}
