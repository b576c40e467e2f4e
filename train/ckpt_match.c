/* ckpt_match.c - what a checkpoint must share with this binary's model to
 * be loaded (decision 28).
 *
 * --init and --eval need only the parameters: every `param.NAME` of the
 * model must be in the checkpoint with the same shape; the differences are
 * listed (missing, other shape, and the checkpoint's tensors the model does
 * not have). A comment, a changed `seq`, learning rate or step count leave
 * the names and shapes as they were, so they never invalidate a checkpoint.
 *
 * --resume must continue exactly, so it also refuses, naming the reason:
 * another `seq` or batch (the loader would cut other rows), and another
 * computation: the structure hash covers the model's text with comments and
 * spacing removed and the train section's fields except lr, steps, seq,
 * batch, ep and dp (a new learning rate or step count continues the run
 * with the new schedule: that is asked for, not inexact). Another seed or
 * other data is refused by the loader's fingerprint (checkpoint.c). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/checkpoint.h"
#include "../util/util.h"
#include "trainer.h"

/* The model text without `#` comments and with runs of blanks as one
 * space, up to the top-level `train` section. */
static uint64_t text_hash(const char *s, size_t n, uint64_t h)
{
    int depth = 0, space = 0, any = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '#') {
            while (i < n && s[i] != '\n')
                i++;
            space = 1;
            continue;
        }
        if (isspace((unsigned char)c)) {
            space = 1;
            continue;
        }
        if (depth == 0 && !strncmp(s + i, "train", 5) && (i == 0 || !isalnum((unsigned char)s[i - 1]))) {
            size_t j = i + 5;
            while (j < n && isspace((unsigned char)s[j]))
                j++;
            if (j < n && s[j] == '{')
                break;
        }
        if (space && any)
            h = hash64_update(h, " ", 1);
        space = 0;
        any = 1;
        depth += c == '{' ? 1 : c == '}' ? -1 : 0;
        h = hash64_update(h, &c, 1);
    }
    return h;
}

uint64_t trainer_structure_hash(const Trainer *t)
{
    const PlanSource *src = &t->pl->source;
    uint64_t h = text_hash(src->text ? src->text : "", src->text ? src->len : 0, hash64("moec-structure-1", 16));
    IrTrain tr = t->pl->graph->train;
    /* what may change between runs of one model without making a resume inexact */
    tr.lr = 0;
    tr.steps = 0;
    tr.seq = 0;
    tr.batch = 0;
    tr.ep = 0;
    tr.dp = 0;
    char buf[512];
    int len = snprintf(buf, sizeof buf, "%d %.17g %.17g %.17g %.17g %d %lld %.17g %d %.17g %d %d %.17g %d %d",
                       (int)tr.optimizer, tr.beta1, tr.beta2, tr.eps, tr.weight_decay, (int)tr.schedule,
                       (long long)tr.warmup, tr.min_lr, (int)tr.precision, tr.grad_clip, (int)tr.alphabet,
                       (int)tr.objective, tr.aux_loss_coef, tr.decay_norms, tr.decay_embeddings);
    return hash64_update(h, buf, (size_t)len);
}

void trainer_ckpt_meta(const Trainer *t, CkptWriter *w)
{
    char num[64];
    ckpt_hash_text(trainer_structure_hash(t), num);
    ckpt_writer_meta(w, "structure_hash", num);
    snprintf(num, sizeof num, "%lld", (long long)t->tr.seq);
    ckpt_writer_meta(w, "seq", num);
    snprintf(num, sizeof num, "%lld", (long long)t->tr.batch);
    ckpt_writer_meta(w, "batch", num);
    snprintf(num, sizeof num, "%lld", (long long)t->f.grad_accum);
    ckpt_writer_meta(w, "grad_accum", num);
}

static void shape_text(char *b, size_t n, int rank, const int64_t *shape)
{
    size_t o = (size_t)snprintf(b, n, "[");
    for (int i = 0; i < rank && o < n; i++)
        o += (size_t)snprintf(b + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < n)
        snprintf(b + o, n - o, "]");
}

int trainer_ckpt_check(const Trainer *t, const Ckpt *c, const char *path, int full)
{
    const IrGraph *g = t->g;
    int bad = 0, shown = 0;
    const int show = 12;
    for (int k = 0; k < (full ? CKPT_KIND_COUNT : 1); k++)
        for (int p = 0; p < g->nparams; p++) {
            IrNode *n = g->params[p];
            char name[1024];
            snprintf(name, sizeof name, "%s%s", ckpt_prefix[k], n->name);
            int64_t shape[IR_MAX_RANK];
            memcpy(shape, n->shape, sizeof(int64_t) * (size_t)n->rank);
            if (ir_has_attr(n, IR_ATTR_SHARD))
                shape[0] *= t->ep;
            const SafeTensor *x = st_find(&c->st, name);
            char want[128], have[128];
            shape_text(want, sizeof want, n->rank, shape);
            int same = x && x->dtype == ST_F32 && x->rank == n->rank &&
                       (n->rank == 0 || !memcmp(x->shape, shape, sizeof(int64_t) * (size_t)n->rank));
            if (same)
                continue;
            if (bad++ < show) {
                if (!x) {
                    fprintf(stderr, "%s: %s: missing %s %s\n", t->prog, path, name, want);
                } else {
                    shape_text(have, sizeof have, x->rank, x->shape);
                    fprintf(stderr, "%s: %s: %s is %s %s, the model's is F32 %s\n", t->prog, path, name,
                            st_dtype_name(x->dtype), have, want);
                }
                shown++;
            }
        }
    /* the checkpoint's parameters the model does not have */
    for (int i = 0; i < c->st.ntensors; i++) {
        const char *nm = c->st.tensors[i].name;
        if (strncmp(nm, "param.", 6) != 0)
            continue;
        int found = 0;
        for (int p = 0; p < g->nparams && !found; p++)
            found = !strcmp(g->params[p]->name, nm + 6);
        if (!found && bad++ < show) {
            fprintf(stderr, "%s: %s: %s is not a parameter of model `%s`\n", t->prog, path, nm, g->model);
            shown++;
        }
    }
    if (bad) {
        fprintf(stderr, "%s: error: %s does not fit model `%s` (checkpoint of `%s`): %d tensor%s differ%s by name or "
                "shape%s\n", t->prog, path, g->model, c->model ? c->model : "?", bad, bad == 1 ? "" : "s",
                bad == 1 ? "s" : "", bad > shown ? " (the first listed above)" : " (listed above)");
        return 0;
    }
    if (!full)
        return 1;
    /* --resume: what would make the continuation inexact */
    const char *seq = st_metadata(&c->st, "seq"), *batch = st_metadata(&c->st, "batch");
    const char *sh = st_metadata(&c->st, "structure_hash");
    if (seq && strtoll(seq, NULL, 10) != t->tr.seq) {
        fprintf(stderr, "%s: error: cannot resume exactly from %s: it was written with seq %s and this run has seq "
                "%lld (the loader would cut other rows); use seq %s, or start from it with --init\n", t->prog, path,
                seq, (long long)t->tr.seq, seq);
        return 0;
    }
    if (batch && strtoll(batch, NULL, 10) != t->tr.batch) {
        fprintf(stderr, "%s: error: cannot resume exactly from %s: it was written with batch %s and this run has "
                "batch %lld; use --batch %s, or start from it with --init\n", t->prog, path, batch,
                (long long)t->tr.batch, batch);
        return 0;
    }
    const char *acc = st_metadata(&c->st, "grad_accum");
    int64_t was = acc ? strtoll(acc, NULL, 10) : 1;
    if (was != t->f.grad_accum) {
        fprintf(stderr, "%s: error: cannot resume exactly from %s: it was written with --grad-accum %lld and this run "
                "has %lld (the loader would draw other batches); use --grad-accum %lld, or start from it with "
                "--init\n", t->prog, path, (long long)was, (long long)t->f.grad_accum, (long long)was);
        return 0;
    }
    char want[17];
    if (sh) {
        ckpt_hash_text(trainer_structure_hash(t), want);
        if (strcmp(sh, want) != 0) {
            fprintf(stderr, "%s: error: cannot resume exactly from %s: the model's computation or its optimizer "
                    "settings changed since it was written (structure hash %s, now %s; comments, spacing, lr, steps "
                    "do not count); start from it with --init\n", t->prog, path, sh, want);
            return 0;
        }
    } else {
        /* a checkpoint from before the structure hash: the model source as it was */
        ckpt_hash_text(t->model_hash, want);
        if (!c->model_hash || strcmp(c->model_hash, want) != 0) {
            fprintf(stderr, "%s: error: cannot resume exactly from %s: it was written for another model source "
                    "(model `%s`, hash %s; this binary is `%s`, hash %s); start from it with --init\n", t->prog, path,
                    c->model ? c->model : "?", c->model_hash ? c->model_hash : "none", g->model, want);
            return 0;
        }
    }
    return 1;
}
