/* plan_io.c - a Plan as a document, and back.
 *
 * The document is JSON, readable and diffable (`moec compile --emit-cuda`
 * writes it as plan.json; a training binary carries it, with the model
 * source and the kernels, as its payload). Its first keys identify it:
 *
 *   {"format": "moec-plan", "checksum": "<16 hex digits>", "version": 2,
 *    "moec_version": "0.1.0 (git abc1234)", ...}
 *
 * The checksum is hash64 of the whole document with the 16 digits written
 * as zeros: any changed byte is noticed before anything is interpreted.
 * A document of another format version, or written by another build of
 * moec, is refused with a message saying so (the layout of the tensors and
 * the meaning of the kernels' arguments may differ). The graph travels as
 * IR text and comes back through the IR reader (ir_read_text), which checks
 * every node against shape inference; the tables are checked against the
 * graph (ids in range, buffers inside their regions) so a damaged plan
 * gives a message, never a crash. */
#include "plan.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"
#include "payload.h"

static const char CHECKSUM_KEY[] = "\"checksum\":";

/* ------------------------------------------------------------ writing */

static cJSON *int_array(const int64_t *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber((double)v[i]));
    return a;
}

static char *graph_text(const IrGraph *g)
{
    char *s = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&s, &n);
    if (!f)
        die("out of memory");
    ir_print_text(g, f);
    fclose(f);
    return s;
}

/* The position of the checksum's 16 digits in a document, or NULL. */
static char *checksum_digits(char *doc, size_t len)
{
    size_t look = len < 512 ? len : 512;
    char *k = memmem(doc, look, CHECKSUM_KEY, sizeof CHECKSUM_KEY - 1);
    if (!k)
        return NULL;
    char *q = memchr(k + sizeof CHECKSUM_KEY - 1, '"', look - (size_t)(k - doc) - (sizeof CHECKSUM_KEY - 1));
    if (!q || (size_t)(q - doc) + 18 > len || q[17] != '"')
        return NULL;
    return q + 1;
}

static uint64_t document_hash(const char *doc, size_t len, const char *digits)
{
    size_t at = (size_t)(digits - doc);
    uint64_t h = hash64_update(HASH64_INIT, doc, at);
    h = hash64_update(h, "0000000000000000", 16);
    return hash64_update(h, digits + 16, len - at - 16);
}

char *plan_to_json(const Plan *p, int with_source)
{
    const IrGraph *g = p->graph;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", "moec-plan");
    cJSON_AddStringToObject(root, "checksum", "0000000000000000");
    cJSON_AddNumberToObject(root, "version", PLAN_FORMAT_VERSION);
    cJSON_AddStringToObject(root, "moec_version", moec_version());
    cJSON_AddStringToObject(root, "model", g->model ? g->model : "");
    cJSON_AddStringToObject(root, "file", g->file ? g->file : "");
    cJSON_AddStringToObject(root, "precision", ir_precision_name[g->train.precision]);
    if (p->source.kernels != PLAN_KERNELS_REFERENCE)
        cJSON_AddStringToObject(root, "kernels", plan_kernels_name[p->source.kernels]);

    cJSON *par = cJSON_AddObjectToObject(root, "parallel");
    cJSON_AddNumberToObject(par, "ep", (double)p->ep);
    cJSON_AddNumberToObject(par, "dp", (double)p->dp);
    cJSON_AddNumberToObject(par, "world", (double)p->world);
    cJSON_AddNumberToObject(par, "batch", (double)p->batch);
    cJSON_AddNumberToObject(par, "local_batch", (double)p->local_batch);
    cJSON_AddNumberToObject(par, "seq", (double)p->seq);
    cJSON_AddNumberToObject(par, "experts", (double)p->experts);
    cJSON_AddNumberToObject(par, "local_experts", (double)p->local_experts);

    cJSON *in = cJSON_AddObjectToObject(root, "inputs");
    cJSON_AddNumberToObject(in, "tokens", p->tokens);
    cJSON_AddNumberToObject(in, "targets", p->targets);
    cJSON_AddNumberToObject(root, "loss", g->loss ? g->loss->id : -1);

    cJSON *params = cJSON_AddArrayToObject(root, "params");
    for (int i = 0; i < p->nparams; i++) {
        const PlanParam *pp = &p->params[i];
        const IrNode *n = g->nodes[pp->node];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", n->name);
        cJSON_AddNumberToObject(o, "node", pp->node);
        cJSON_AddNumberToObject(o, "grad", pp->grad);
        cJSON_AddNumberToObject(o, "numel", (double)pp->numel);
        cJSON_AddNumberToObject(o, "offset", (double)pp->offset);
        cJSON_AddItemToObject(o, "shape", int_array(n->shape, n->rank));
        cJSON_AddItemToObject(o, "full_shape", int_array(pp->full_shape, pp->rank));
        cJSON_AddBoolToObject(o, "weight_decay", pp->weight_decay);
        cJSON_AddNumberToObject(o, "shard", (double)pp->shard);
        cJSON_AddItemToArray(params, o);
    }
    cJSON_AddNumberToObject(root, "nparams_total", (double)p->nparams_total);

    cJSON *gpu = cJSON_AddObjectToObject(root, "gpu");
    if (p->gpu_unsupported) {
        cJSON_AddStringToObject(gpu, "unsupported", p->gpu_unsupported);
    } else if (p->cuda_source) {
        cJSON_AddStringToObject(gpu, "float_storage", "f32");
        cJSON_AddStringToObject(gpu, "index_storage", "i32");
        cJSON_AddNumberToObject(gpu, "alignment", 256);
        if (p->needs_arch[0])  /* only then: reference plans keep their text */
            cJSON_AddStringToObject(gpu, "needs_arch", p->needs_arch);
        cJSON *regions = cJSON_AddArrayToObject(gpu, "regions");
        for (int r = 0; r < PLAN_REGION_COUNT; r++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "name", plan_region_name[r]);
            cJSON_AddNumberToObject(o, "bytes", (double)p->memory.region_bytes[r]);
            if (r == PLAN_REGION_ACTIVATIONS)
                cJSON_AddNumberToObject(o, "blocks", p->memory.nblocks);
            cJSON_AddItemToArray(regions, o);
        }
        /* the payload (with_source) leaves out what the graph already says (names, ops, shapes) and what
         * only readers need (lifetimes, a line per launch): a smaller document starts faster */
        int brief = with_source;
        cJSON *bufs = cJSON_AddArrayToObject(gpu, "buffers");
        for (int i = 0; i < p->nbufs; i++) {
            const PlanBuf *b = &p->bufs[i];
            cJSON *o = cJSON_CreateObject();
            if (!brief)
                cJSON_AddNumberToObject(o, "id", i);
            if (!brief || b->kind == PLAN_BUF_WORKSPACE || b->kind == PLAN_BUF_COPY)
                cJSON_AddStringToObject(o, "name", b->name);
            cJSON_AddStringToObject(o, "kind", b->kind == PLAN_BUF_TENSOR && g->nodes[i]->op == IR_OP_PARAM ? "param"
                                               : b->kind == PLAN_BUF_TENSOR && g->nodes[i]->op == IR_OP_INPUT
                                                   ? "input"
                                                   : plan_buf_kind_name[b->kind]);
            cJSON_AddNumberToObject(o, "node", b->node);
            cJSON_AddStringToObject(o, "storage", plan_storage_name[b->storage]);
            if ((b->kind == PLAN_BUF_WORKSPACE || b->kind == PLAN_BUF_TENSOR) && b->until > b->node)
                cJSON_AddNumberToObject(o, "until", b->until);
            if (b->elided)
                cJSON_AddBoolToObject(o, "elided", 1);
            if (b->unread_srcs) {
                /* the sources its launches do not read, by index (in the payload too: the runtime lays the
                 * table out again, plan_forward_memory and plan_memory_breakdown) */
                cJSON *u = cJSON_AddArrayToObject(o, "unread_srcs");
                for (int s = 0; s < 64; s++)
                    if (b->unread_srcs >> s & 1)
                        cJSON_AddItemToArray(u, cJSON_CreateNumber(s));
            }
            if (b->kind == PLAN_BUF_COPY && b->glu_f)
                cJSON_AddNumberToObject(o, "glu_f", (double)b->glu_f);
            if (b->kind != PLAN_BUF_WORKSPACE && b->kind != PLAN_BUF_COPY && !brief) {
                const IrNode *n = g->nodes[i];
                cJSON_AddStringToObject(o, "op", ir_node_op_name(n));
                cJSON_AddItemToObject(o, "shape", int_array(n->shape, n->rank));
                if (n->is_output)
                    cJSON_AddBoolToObject(o, "output", 1);
            }
            if (b->kind == PLAN_BUF_VIEW) {
                cJSON_AddNumberToObject(o, "alias_of", b->alias_of);
                cJSON_AddNumberToObject(o, "alias_offset", (double)b->alias_offset);
            }
            cJSON_AddNumberToObject(o, "bytes", (double)b->bytes);
            cJSON_AddStringToObject(o, "region", plan_region_name[b->region]);
            cJSON_AddNumberToObject(o, "offset", (double)b->offset);
            if (!brief) {
                cJSON *life = cJSON_AddArrayToObject(o, "live");
                cJSON_AddItemToArray(life, cJSON_CreateNumber(b->first));
                cJSON_AddItemToArray(life, cJSON_CreateNumber(b->last));
                if (b->lfirst >= 0) {
                    /* the launch positions over which its bytes are its own (decision 65) */
                    cJSON *ll = cJSON_AddArrayToObject(o, "live_launches");
                    cJSON_AddItemToArray(ll, cJSON_CreateNumber(b->lfirst));
                    cJSON_AddItemToArray(ll, cJSON_CreateNumber(b->llast));
                }
            }
            cJSON_AddItemToArray(bufs, o);
        }
        cJSON *kernels = cJSON_AddArrayToObject(gpu, "kernels");
        for (int k = 0; k < p->nkernels; k++)
            cJSON_AddItemToArray(kernels, cJSON_CreateString(p->kernel_names[k]));
        cJSON *launches = cJSON_AddArrayToObject(gpu, "launches");
        for (int i = 0; i < p->nlaunches; i++) {
            const PlanLaunch *l = &p->launches[i];
            const IrNode *n = g->nodes[l->node];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "node", l->node);
            if (!brief) {
                cJSON_AddStringToObject(o, "name", n->name);
                cJSON_AddStringToObject(o, "op", ir_node_op_name(n));
            }
            if (l->kernel >= 0) {
                cJSON_AddStringToObject(o, "kernel", p->kernel_names[l->kernel]);
                cJSON_AddNumberToObject(o, "grid", (double)l->grid);
                cJSON_AddNumberToObject(o, "block", l->block);
                cJSON_AddNumberToObject(o, "shared_bytes", l->shared_bytes);
                if (l->cluster > 1)
                    cJSON_AddNumberToObject(o, "cluster", l->cluster);
            } else {
                cJSON_AddStringToObject(o, "collective", ir_node_op_name(n));
            }
            cJSON *args = cJSON_AddArrayToObject(o, "args");
            for (int a = 0; a < l->nargs; a++) {
                const PlanArg *t = l->targs ? &l->targs[a] : NULL;
                if (!t || t->kind == PLAN_ARG_BUF) {
                    cJSON_AddItemToArray(args, cJSON_CreateNumber(l->args[a]));
                    continue;
                }
                /* typed arguments (only fast plans have them): {"tmap": buf, rows, cols, box},
                 * {"tmap_f32": buf, "offset", rows, cols, box}, {"i32": v} or {"i64": v} */
                cJSON *ta = cJSON_CreateObject();
                if (t->kind == PLAN_ARG_TMAP || t->kind == PLAN_ARG_TMAP_F32 || t->kind == PLAN_ARG_TMAP_U8) {
                    cJSON_AddNumberToObject(ta, t->kind == PLAN_ARG_TMAP      ? "tmap"
                                                : t->kind == PLAN_ARG_TMAP_F32 ? "tmap_f32"
                                                                               : "tmap_u8",
                                            t->buf);
                    if (t->kind == PLAN_ARG_TMAP_F32 || (t->kind == PLAN_ARG_TMAP_U8 && t->offset))
                        cJSON_AddNumberToObject(ta, "offset", (double)t->offset);
                    cJSON_AddNumberToObject(ta, "rows", (double)t->rows);
                    cJSON_AddNumberToObject(ta, "cols", (double)t->cols);
                    cJSON_AddNumberToObject(ta, "box_rows", t->box_rows);
                    cJSON_AddNumberToObject(ta, "box_cols", t->box_cols);
                } else if (t->kind == PLAN_ARG_NORM) {
                    cJSON_AddNumberToObject(ta, "norm", (double)t->value);
                    cJSON_AddNumberToObject(ta, "per_block", (double)t->rows);
                } else {
                    cJSON_AddNumberToObject(ta, t->kind == PLAN_ARG_I64 ? "i64" : "i32", (double)t->value);
                }
                cJSON_AddItemToArray(args, ta);
            }
            if (l->impl)
                cJSON_AddStringToObject(o, "impl", l->impl);
            if (l->kernel < 0 && !brief) {
                /* what the collective does, for readers (the runtime takes it from the node) */
                if (ir_has_attr(n, IR_ATTR_EP))
                    cJSON_AddNumberToObject(o, "ep", (double)ir_attr_i(n, IR_ATTR_EP));
                if (ir_has_attr(n, IR_ATTR_GROUP))
                    cJSON_AddStringToObject(o, "group", ir_attr_e_name(n, IR_ATTR_GROUP));
                if (ir_has_attr(n, IR_ATTR_FACTOR))
                    cJSON_AddNumberToObject(o, "factor", ir_attr_f(n, IR_ATTR_FACTOR));
            }
            if (!brief)
                cJSON_AddStringToObject(o, "what", l->what);
            cJSON_AddItemToArray(launches, o);
        }
        cJSON_AddNumberToObject(gpu, "eval_launches", p->eval_launches);
        if (with_source) {
            cJSON_AddStringToObject(gpu, "cuda_source", p->cuda_source);
            if (p->image) {
                cJSON *img = cJSON_AddObjectToObject(gpu, "image");
                char hash[32];
                snprintf(hash, sizeof hash, "%016" PRIx64, p->image_hash);
                char *b64 = payload_base64_encode(p->image, p->image_size);
                if (!b64)
                    die("out of memory");
                cJSON_AddStringToObject(img, "arch", p->image_arch);
                cJSON_AddStringToObject(img, "source_hash", hash);
                cJSON_AddNumberToObject(img, "bytes", (double)p->image_size);
                cJSON_AddStringToObject(img, "base64", b64);
                free(b64);
            }
        }
    }
    /* the optimizer the runtime runs after the launches (the hyperparameters are the graph's train section);
     * its kernels' arguments, for readers of kernels.cu */
    const IrTrain *tr = &g->train;
    cJSON *opt = cJSON_AddObjectToObject(root, "optimizer");
    cJSON_AddStringToObject(opt, "name", ir_optimizer_name[tr->optimizer]);
    cJSON_AddNumberToObject(opt, "lr", tr->lr);
    cJSON_AddNumberToObject(opt, "beta1", tr->beta1);
    cJSON_AddNumberToObject(opt, "beta2", tr->beta2);
    cJSON_AddNumberToObject(opt, "eps", tr->eps);
    cJSON_AddNumberToObject(opt, "weight_decay", tr->weight_decay);
    cJSON_AddNumberToObject(opt, "grad_clip", tr->grad_clip);
    cJSON *ok = cJSON_AddObjectToObject(opt, "kernels");
    cJSON_AddStringToObject(ok, "sumsq", "moec_grad_sumsq");
    cJSON_AddStringToObject(ok, "sumsq_args", "partial (double[grid]), grad, numel");
    cJSON_AddStringToObject(ok, "sum", "moec_sum_partials");
    cJSON_AddStringToObject(ok, "sum_args", "out (double[1]), partial, count; one block");
    cJSON_AddStringToObject(ok, "scale", "moec_scale");
    cJSON_AddStringToObject(ok, "scale_args", "y, numel, factor: y *= factor (an all_reduce's factor)");
    cJSON_AddStringToObject(ok, "accum", "moec_accum");
    cJSON_AddStringToObject(ok, "accum_args", "acc (double[numel]), grad, numel, weight, first: --grad-accum's sum");
    cJSON_AddStringToObject(ok, "accum_out", "moec_accum_out");
    cJSON_AddStringToObject(ok, "accum_out_args", "grad, acc, numel: the sum as the gradient");
    cJSON_AddStringToObject(ok, "clip", "moec_clip");
    cJSON_AddStringToObject(ok, "clip_args", "scalars (double[7]), grad_clip; one thread");
    cJSON_AddStringToObject(ok, "adamw", "moec_adamw");
    cJSON_AddStringToObject(ok, "adamw_args",
                            "w, m, v, grad, numel, scalars (double[7]: lr, 1 - beta1^step, 1 - beta2^step, clip, "
                            "norm, dense sumsq, shard sumsq), weight_decay (0 where the param has none)");
    cJSON_AddStringToObject(ok, "adamw_bf16", "moec_adamw_bf16");
    cJSON_AddStringToObject(ok, "adamw_bf16_args", "as adamw, then w16: the param's copy (bf16 of the new w), glu_f, "
                                                   "cols (the copy's layout: glu_f 0 plain, else interleaved)");
    int fp8_copies = 0, mx = p->graph->train.precision == IR_PREC_MXFP8;
    for (int b = 0; b < p->nbufs; b++)
        fp8_copies += p->bufs[b].kind == PLAN_BUF_COPY && p->bufs[b].storage == PLAN_E4M3;
    if (fp8_copies && mx) {
        cJSON_AddStringToObject(ok, "adamw_mx8", "moec_adamw_mx8_ExNxK");
        cJSON_AddStringToObject(ok, "adamw_mx8_args",
                                "as adamw, then the param's MXFP8 copy (plan.h PlanFp8Copy with mx: the new w's 1x32 "
                                "codes along K, its 32x1 codes along N stored as W^T, both E8M0 scales); one per "
                                "shape; 512 threads per 128x128 tile");
        cJSON_AddStringToObject(ok, "mx8_copy", "moec_mx8_copy_ExNxK");
        cJSON_AddStringToObject(ok, "mx8_copy_args", "the MXFP8 copy, the param: after loading parameters; 512 threads "
                                                     "per 128x128 tile");
    } else if (fp8_copies) {
        cJSON_AddStringToObject(ok, "adamw_fp8b", "moec_adamw_fp8b_ExNxK");
        cJSON_AddStringToObject(ok, "adamw_fp8b_args",
                                "as adamw, then the param's e4m3 copy (plan.h PlanFp8Copy: the tiles of the new w, "
                                "their transposed copy, both scales); one per shape; 512 threads per 128x128 tile");
        cJSON_AddStringToObject(ok, "fp8b_copy", "moec_fp8b_copy_ExNxK");
        cJSON_AddStringToObject(ok, "fp8b_copy_args", "the e4m3 copy, the param: after loading parameters; 512 threads "
                                                      "per 128x128 tile");
    }
    cJSON_AddStringToObject(ok, "to_bf16", "moec_to_bf16");
    cJSON_AddStringToObject(ok, "to_bf16_args",
                            "dst (the copy), src (the param), numel, glu_f, cols: after loading parameters");
    if (with_source) {
        const PlanSource *s = &p->source;
        cJSON *so = cJSON_AddObjectToObject(root, "source");
        cJSON_AddStringToObject(so, "path", s->path ? s->path : "");
        cJSON_AddStringToObject(so, "text", s->text ? s->text : "");
        cJSON *pl = cJSON_AddArrayToObject(so, "plugins");
        for (int i = 0; i < s->nplugins; i++)
            cJSON_AddItemToArray(pl, cJSON_CreateString(s->plugins[i]));
        if (s->has_precision)
            cJSON_AddStringToObject(so, "precision", ir_precision_name[s->precision]);
        if (s->ep > 0)
            cJSON_AddNumberToObject(so, "ep", (double)s->ep);
    }
    char *ir = p->ir_text ? NULL : graph_text(g);
    cJSON_AddStringToObject(root, "ir", p->ir_text ? p->ir_text : ir);
    free(ir);

    /* plan.json indented for people, the payload compact */
    char *s = with_source ? cJSON_PrintUnformatted(root) : cJSON_Print(root);
    cJSON_Delete(root);
    if (!s)
        die("out of memory printing the plan");
    size_t len = strlen(s);
    char *out = malloc(len + 2);
    if (!out)
        die("out of memory");
    memcpy(out, s, len);
    out[len++] = '\n';
    out[len] = 0;
    cJSON_free(s);
    char *digits = checksum_digits(out, len);
    if (!digits)
        die("plan_to_json: no checksum field");
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, document_hash(out, len, digits));
    memcpy(digits, hex, 16);
    return out;
}

/* ------------------------------------------------------------ reading */

typedef struct Reader {
    const char *what;
    char *err;
    size_t errlen;
    int failed;
} Reader;

static int bad(Reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(Reader *r, const char *fmt, ...)
{
    if (r->failed)
        return 0;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->errlen, "%s: %s", r->what, msg);
    r->failed = 1;
    return 0;
}

/* An integer field in [lo, hi]; on anything else the reader fails. */
static int64_t get_int(Reader *r, const cJSON *o, const char *key, int64_t lo, int64_t hi)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int64_t)v->valuedouble || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi) {
        bad(r, "field \"%s\" is missing or out of range [%lld, %lld]", key, (long long)lo, (long long)hi);
        return lo;
    }
    return (int64_t)v->valuedouble;
}

static const char *get_str(Reader *r, const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) {
        bad(r, "field \"%s\" is missing or not a string", key);
        return "";
    }
    return v->valuestring;
}

static const cJSON *get_array(Reader *r, const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(v)) {
        bad(r, "field \"%s\" is missing or not an array", key);
        return NULL;
    }
    return v;
}

/* The checksum, the format and the version; returns the parsed document. */
static cJSON *open_document(Reader *r, const char *json, size_t len)
{
    if (len < 2 || json[0] != '{')
        return bad(r, "not a moec plan (it does not start with a JSON object)"), NULL;
    char *copy = malloc(len + 1);
    if (!copy)
        die("out of memory");
    memcpy(copy, json, len);
    copy[len] = 0;
    char *digits = checksum_digits(copy, len);
    if (!digits) {
        free(copy);
        return bad(r, "not a moec plan (no checksum)"), NULL;
    }
    uint64_t want = document_hash(copy, len, digits);
    char got[17];
    memcpy(got, digits, 16);
    got[16] = 0;
    char *end;
    uint64_t stated = strtoull(got, &end, 16);
    free(copy);
    if (*end || stated != want)
        return bad(r, "the plan is damaged (checksum %s, its contents hash to %016" PRIx64 "); compile the model "
                   "again with moec compile", got, want), NULL;
    cJSON *o = cJSON_ParseWithLength(json, len);
    if (!o)
        return bad(r, "the plan is damaged (not JSON)"), NULL;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, "format");
    if (!cJSON_IsString(f) || strcmp(f->valuestring, "moec-plan") != 0) {
        bad(r, "not a moec plan (format \"%s\")", cJSON_IsString(f) ? f->valuestring : "?");
        cJSON_Delete(o);
        return NULL;
    }
    int64_t v = get_int(r, o, "version", 0, 1 << 30);
    if (!r->failed && v != PLAN_FORMAT_VERSION) {
        cJSON_Delete(o);
        return bad(r, "plan format version %lld; this moec (%s) reads version %d: compile the model again with this "
                   "moec", (long long)v, moec_version(), PLAN_FORMAT_VERSION), NULL;
    }
    const char *mv = get_str(r, o, "moec_version");
    if (!r->failed && strcmp(mv, moec_version()) != 0) {
        /* the message first: mv lives in o */
        bad(r, "the plan was made by moec %s, this is moec %s: compile the model again with this moec", mv,
            moec_version());
        cJSON_Delete(o);
        return NULL;
    }
    if (r->failed) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* A typed kernel argument (plan.h PlanArg): {"tmap": buf, "rows", "cols", "box_rows", "box_cols"},
 * {"tmap_f32": buf, "offset", "rows", "cols", "box_rows", "box_cols"}, {"tmap_u8": buf, ("offset": bytes,
 * absent when 0), "rows", "cols", "box_rows", "box_cols"}, {"i32": v}, {"i64": v} (|v| < 2^53) or {"norm": param node
 * or -1, "per_block": n} (decision 73). A tensor map must lie inside a buffer of its type (bf16, fp32,
 * e4m3), 16-byte aligned, with a box the runtime can encode (a
 * 128-byte inner box for the 128-byte swizzle, at most 256 rows). */
static int read_typed_arg(Reader *r, Plan *p, PlanLaunch *l, int i, int a, const cJSON *x)
{
    if (!l->targs) {
        l->targs = calloc((size_t)l->nargs + 1, sizeof *l->targs);
        if (!l->targs)
            die("out of memory");
        for (int b = 0; b < a; b++) {
            l->targs[b].kind = PLAN_ARG_BUF;
            l->targs[b].buf = l->args[b];
        }
    }
    PlanArg *t = &l->targs[a];
    if (cJSON_GetObjectItemCaseSensitive(x, "i32")) {
        t->kind = PLAN_ARG_I32;
        t->buf = -1;
        t->value = get_int(r, x, "i32", INT32_MIN, INT32_MAX);
        l->args[a] = -1;
        return !r->failed;
    }
    if (cJSON_GetObjectItemCaseSensitive(x, "i64")) {
        t->kind = PLAN_ARG_I64;
        t->buf = -1;
        t->value = get_int(r, x, "i64", -(INT64_C(1) << 53), INT64_C(1) << 53);
        l->args[a] = -1;
        return !r->failed;
    }
    if (cJSON_GetObjectItemCaseSensitive(x, "norm")) {
        /* the gradient norm's squares of param node `norm` (-1: none), per_block doubles a block (decision 73) */
        t->kind = PLAN_ARG_NORM;
        t->buf = -1;
        t->value = get_int(r, x, "norm", -1, p->graph->nnodes - 1);
        t->rows = get_int(r, x, "per_block", 1, 64);
        l->args[a] = -1;
        if (!r->failed && t->value >= 0 && p->graph->nodes[t->value]->op != IR_OP_PARAM)
            return bad(r, "launch %d: argument %d: the gradient norm's squares of node %lld, which is no param", i, a,
                       (long long)t->value);
        return !r->failed;
    }
    int f32 = cJSON_GetObjectItemCaseSensitive(x, "tmap_f32") != NULL;
    int u8 = !f32 && cJSON_GetObjectItemCaseSensitive(x, "tmap_u8") != NULL;
    int64_t esize = f32 ? 4 : u8 ? 1 : 2;
    PlanStorage want = f32 ? PLAN_F32 : u8 ? PLAN_E4M3 : PLAN_BF16;
    t->kind = f32 ? PLAN_ARG_TMAP_F32 : u8 ? PLAN_ARG_TMAP_U8 : PLAN_ARG_TMAP;
    t->buf = (int)get_int(r, x, f32 ? "tmap_f32" : u8 ? "tmap_u8" : "tmap", 0, p->nbufs - 1);
    t->offset = f32 || (u8 && cJSON_GetObjectItemCaseSensitive(x, "offset")) ? get_int(r, x, "offset", 0, (int64_t)1 << 50)
                                                                               : 0;
    t->rows = get_int(r, x, "rows", 1, INT32_MAX);
    t->cols = get_int(r, x, "cols", 8, INT32_MAX);
    t->box_rows = (int)get_int(r, x, "box_rows", 1, 256);
    t->box_cols = (int)get_int(r, x, "box_cols", 128 / esize, 128 / esize);
    if (r->failed)
        return 0;
    const PlanBuf *b = &p->bufs[t->buf];
    if (b->storage != want || (t->cols * esize) % 16 || (t->offset * esize) % 16 ||
        t->offset + t->rows * t->cols > b->bytes / esize)
        return bad(r, "launch %d: argument %d: a tensor map [%lld x %lld] from element %lld of buffer %d (%s, %lld "
                      "bytes), which is no %s buffer that large with 16-byte rows and a 16-byte-aligned start",
                   i, a, (long long)t->rows, (long long)t->cols, (long long)t->offset, t->buf,
                   plan_storage_name[b->storage], (long long)b->bytes, plan_storage_name[want]);
    l->args[a] = t->buf;
    return 1;
}

/* Buffer i's "unread_srcs" (absent: none): the indices of the sources of node i that its launches do not
 * read, each once, below the node's source count and 64; only a node's own tensor has them, and a view
 * (its `like` sources, 1 on). */
static int read_unread_srcs(Reader *r, const IrGraph *g, int i, PlanBuf *b, const cJSON *u)
{
    b->unread_srcs = 0;
    if (!u)
        return 1;
    if (!cJSON_IsArray(u) || i >= g->nnodes || (b->kind != PLAN_BUF_TENSOR && b->kind != PLAN_BUF_VIEW))
        return bad(r, "buffer %d (%s): \"unread_srcs\" is %s", i, b->name,
                   cJSON_IsArray(u) ? "only for a node's own tensor" : "not an array of source indices");
    int nsrc = g->nodes[i]->nsrc, lo = b->kind == PLAN_BUF_VIEW;
    const cJSON *x;
    cJSON_ArrayForEach(x, u) {
        if (!cJSON_IsNumber(x) || x->valuedouble != (double)(int)x->valuedouble || x->valueint < lo ||
            x->valueint >= nsrc || x->valueint >= 64 || (b->unread_srcs >> x->valueint & 1))
            return bad(r, "buffer %d (%s): \"unread_srcs\" names source %g of a node with %d sources (each index "
                       "once, %d to %d)", i, b->name, cJSON_IsNumber(x) ? x->valuedouble : -1.0, nsrc, lo,
                       (nsrc < 64 ? nsrc : 64) - 1);
        b->unread_srcs |= (uint64_t)1 << x->valueint;
    }
    return 1;
}

/* No launch of a node names a source it says it does not read (a view and its base count as one): the memory
 * planner frees such a source early, and a launch reading it would read another buffer's bytes. */
static int check_unread_srcs(Reader *r, const Plan *p)
{
    const IrGraph *g = p->graph;
    for (int i = 0; i < p->nlaunches; i++) {
        const PlanLaunch *l = &p->launches[i];
        const IrNode *n = g->nodes[l->node];
        uint64_t u = p->bufs[l->node].unread_srcs;
        for (int a = 0; a < l->nargs && u; a++) {
            int b = l->args[a];
            if (b < 0)
                continue;
            int rb = p->bufs[b].alias_of >= 0 ? p->bufs[b].alias_of : b;
            for (int s = 0; s < n->nsrc && s < 64; s++) {
                int rs = n->src[s]->id;
                if (p->bufs[rs].alias_of >= 0)
                    rs = p->bufs[rs].alias_of;
                if ((u >> s & 1) && rs == rb)
                    return bad(r, "launch %d (node %d, %s) reads source %d (%s), which buffer %d's \"unread_srcs\" "
                               "says it does not", i, l->node, n->name, s, n->src[s]->name, l->node);
            }
        }
    }
    return 1;
}

static int read_gpu(Reader *r, Plan *p, const cJSON *gpu)
{
    const IrGraph *g = p->graph;
    int nn = g->nnodes;
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(gpu, "unsupported");
    if (cJSON_IsString(u)) {
        p->gpu_unsupported = xstrdup(u->valuestring);
        return 1;
    }
    const cJSON *regions = get_array(r, gpu, "regions");
    const cJSON *bufs = get_array(r, gpu, "buffers");
    const cJSON *kernels = get_array(r, gpu, "kernels");
    const cJSON *launches = get_array(r, gpu, "launches");
    if (r->failed)
        return 0;
    if (cJSON_GetArraySize(regions) != PLAN_REGION_COUNT)
        return bad(r, "%d memory regions, not %d", cJSON_GetArraySize(regions), PLAN_REGION_COUNT);
    for (int i = 0; i < PLAN_REGION_COUNT; i++)
        p->memory.region_bytes[i] = get_int(r, cJSON_GetArrayItem(regions, i), "bytes", 0, INT64_C(1) << 50);
    p->memory.nblocks = (int)get_int(r, cJSON_GetArrayItem(regions, PLAN_REGION_ACTIVATIONS), "blocks", 0, 1 << 30);
    int nbufs = cJSON_GetArraySize(bufs);
    if (nbufs < nn)
        return bad(r, "%d buffers for %d nodes", nbufs, nn);  /* p->nbufs stays 0: nothing to free */
    p->nbufs = nbufs;
    p->bufs = calloc((size_t)p->nbufs, sizeof *p->bufs);
    if (!p->bufs)
        die("out of memory");
    const cJSON *o = bufs->child;
    for (int i = 0; i < p->nbufs && !r->failed; i++, o = o->next) {
        PlanBuf *b = &p->bufs[i];
        b->node = (int)get_int(r, o, "node", 0, nn - 1);
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
        if (cJSON_IsString(nm))
            b->name = xstrdup(nm->valuestring);
        else if (i < nn)
            b->name = xstrdup(g->nodes[i]->name);
        else
            return bad(r, "workspace buffer %d has no name", i);
        const char *kind = get_str(r, o, "kind");
        b->kind = strcmp(kind, "view") == 0        ? PLAN_BUF_VIEW
                  : strcmp(kind, "workspace") == 0 ? PLAN_BUF_WORKSPACE
                  : strcmp(kind, "copy") == 0      ? PLAN_BUF_COPY
                                                   : PLAN_BUF_TENSOR;
        if ((b->kind == PLAN_BUF_WORKSPACE || b->kind == PLAN_BUF_COPY) && i < nn)
            return bad(r, "buffer %d is a %s, but the first %d buffers are the nodes'", i, kind, nn);
        if (b->kind != PLAN_BUF_WORKSPACE && b->kind != PLAN_BUF_COPY && i >= nn)
            return bad(r, "buffer %d past the nodes' is a %s, not a workspace or a copy", i, kind);
        b->until = -1;
        b->elided = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "elided"));
        b->glu_f = 0;
        if (b->kind == PLAN_BUF_COPY && cJSON_GetObjectItemCaseSensitive(o, "glu_f"))
            b->glu_f = get_int(r, o, "glu_f", 128, INT64_C(1) << 40);
        if (b->elided && (i >= nn || b->kind != PLAN_BUF_TENSOR))
            return bad(r, "buffer %d is elided but is no node's tensor", i);
        if ((b->kind == PLAN_BUF_WORKSPACE || b->kind == PLAN_BUF_TENSOR) && cJSON_GetObjectItemCaseSensitive(o, "until"))
            b->until = (int)get_int(r, o, "until", b->node, nn - 1);
        if (!read_unread_srcs(r, g, i, b, cJSON_GetObjectItemCaseSensitive(o, "unread_srcs")))
            return 0;
        int st = plan_storage_lookup(get_str(r, o, "storage"));
        if (st < 0)
            return bad(r, "buffer %d: unknown storage type", i);
        b->storage = (PlanStorage)st;
        b->bytes = get_int(r, o, "bytes", 0, INT64_C(1) << 50);
        const char *reg = get_str(r, o, "region");
        int ri = -1;
        for (int k = 0; k < PLAN_REGION_COUNT; k++)
            if (strcmp(reg, plan_region_name[k]) == 0)
                ri = k;
        if (ri < 0)
            return bad(r, "buffer %d: unknown region \"%s\"", i, reg);
        b->region = (PlanRegion)ri;
        b->offset = get_int(r, o, "offset", 0, INT64_C(1) << 50);
        b->alias_of = b->kind == PLAN_BUF_VIEW ? (int)get_int(r, o, "alias_of", 0, p->nbufs - 1) : -1;
        b->alias_offset = b->kind == PLAN_BUF_VIEW ? get_int(r, o, "alias_offset", 0, INT64_C(1) << 50) : 0;
        const cJSON *live = cJSON_GetObjectItemCaseSensitive(o, "live");
        b->first = cJSON_IsArray(live) && cJSON_GetArraySize(live) == 2 ? live->child->valueint : 0;
        b->last = cJSON_IsArray(live) && cJSON_GetArraySize(live) == 2 ? live->child->next->valueint : nn - 1;
        const cJSON *ll = cJSON_GetObjectItemCaseSensitive(o, "live_launches");
        b->lfirst = cJSON_IsArray(ll) && cJSON_GetArraySize(ll) == 2 ? ll->child->valueint : -1;
        b->llast = cJSON_IsArray(ll) && cJSON_GetArraySize(ll) == 2 ? ll->child->next->valueint : -1;
        b->block = -1;
        PlanFp8Copy fc;
        if (b->kind == PLAN_BUF_COPY && !r->failed && b->storage == PLAN_E4M3 &&
            (g->nodes[b->node]->op != IR_OP_PARAM || !plan_fp8b_copy_layout(g, g->nodes[b->node], &fc) ||
             b->bytes != fc.bytes || b->glu_f))
            return bad(r, "buffer %d (%s) is no e4m3 copy of a param [E, N, K] (N, K multiples of 128)", i, b->name);
        if (b->kind == PLAN_BUF_COPY && !r->failed && b->storage != PLAN_E4M3 &&
            (g->nodes[b->node]->op != IR_OP_PARAM || b->storage != PLAN_BF16 ||
             b->bytes != ir_numel(g->nodes[b->node]) * 2 ||
             (b->glu_f && (b->glu_f % 128 || g->nodes[b->node]->rank != 3 ||
                           g->nodes[b->node]->shape[1] != 2 * b->glu_f))))
            return bad(r, "buffer %d (%s) is no bf16 copy of a param", i, b->name);
        if (i < nn && b->kind != PLAN_BUF_WORKSPACE &&
            b->bytes != (b->elided ? 0 : ir_numel(g->nodes[i]) * plan_storage_bytes[b->storage]))
            return bad(r, "buffer %d (%s) is %lld bytes, its node holds %lld elements of %s", i, b->name,
                       (long long)b->bytes, (long long)ir_numel(g->nodes[i]), plan_storage_name[b->storage]);
        /* a node's tensor: its dtype's storage, or bf16 for a float activation (docs/decisions.md 40) */
        if (i < nn && b->kind == PLAN_BUF_TENSOR && b->storage != PLAN_F32 &&
            (g->nodes[i]->dtype == IR_I32 ? b->storage != PLAN_I32 : b->storage != PLAN_BF16 || g->nodes[i]->is_output))
            return bad(r, "buffer %d (%s): storage %s for a %s tensor%s", i, b->name, plan_storage_name[b->storage],
                       g->nodes[i]->dtype == IR_I32 ? "i32" : "float", g->nodes[i]->is_output ? " that is an output" : "");
        if (b->offset + b->bytes > p->memory.region_bytes[b->region])
            return bad(r, "buffer %d (%s) lies outside its region", i, b->name);
    }
    if (r->failed)
        return 0;
    p->nkernels = cJSON_GetArraySize(kernels);
    p->kernel_names = calloc((size_t)p->nkernels + 1, sizeof(char *));
    const cJSON *s = kernels->child;
    for (int k = 0; k < p->nkernels; k++, s = s->next) {
        if (!cJSON_IsString(s))
            return bad(r, "kernel %d has no name", k);
        p->kernel_names[k] = xstrdup(s->valuestring);
    }
    p->nlaunches = cJSON_GetArraySize(launches);
    p->launches = calloc((size_t)p->nlaunches + 1, sizeof *p->launches);
    if (!p->launches)
        die("out of memory");
    o = launches->child;
    for (int i = 0; i < p->nlaunches && !r->failed; i++, o = o->next) {
        PlanLaunch *l = &p->launches[i];
        l->node = (int)get_int(r, o, "node", 0, nn - 1);
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "kernel");
        l->kernel = -1;
        if (cJSON_IsString(k)) {
            for (int j = 0; j < p->nkernels && l->kernel < 0; j++)
                if (strcmp(p->kernel_names[j], k->valuestring) == 0)
                    l->kernel = j;
            if (l->kernel < 0)
                return bad(r, "launch %d names kernel %s, which the plan does not list", i, k->valuestring);
            l->grid = get_int(r, o, "grid", PLAN_GRID_ALL_SMS, INT32_MAX);
            l->block = (int)get_int(r, o, "block", 1, 1024);
            l->shared_bytes = (int)get_int(r, o, "shared_bytes", 0, 1 << 20);
            l->cluster = cJSON_GetObjectItemCaseSensitive(o, "cluster") ? (int)get_int(r, o, "cluster", 0, 2) : 0;
            if (l->cluster > 1 && l->grid != PLAN_GRID_ALL_SMS && l->grid % l->cluster)
                return bad(r, "launch %d: a grid of %lld blocks is not a multiple of its cluster of %d", i,
                           (long long)l->grid, l->cluster);
            p->nkernel_launches++;
        } else {
            p->ncollectives++;
        }
        const cJSON *args = get_array(r, o, "args");
        if (r->failed)
            return 0;
        l->nargs = cJSON_GetArraySize(args);
        l->args = calloc((size_t)l->nargs + 1, sizeof(int));
        const cJSON *x = args->child;
        for (int a = 0; a < l->nargs; a++, x = x->next) {
            if (cJSON_IsObject(x) && l->kernel >= 0) {
                if (!read_typed_arg(r, p, l, i, a, x))
                    return 0;
                continue;
            }
            if (!cJSON_IsNumber(x) || x->valueint < 0 || x->valueint >= p->nbufs)
                return bad(r, "launch %d: argument %d is no buffer of the plan", i, a);
            l->args[a] = x->valueint;
            if (l->targs) {
                l->targs[a].kind = PLAN_ARG_BUF;
                l->targs[a].buf = x->valueint;
            }
        }
        const cJSON *impl = cJSON_GetObjectItemCaseSensitive(o, "impl");
        if (cJSON_IsString(impl))
            l->impl = xstrdup(impl->valuestring);
        const cJSON *what = cJSON_GetObjectItemCaseSensitive(o, "what");
        l->what = xstrdup(cJSON_IsString(what) ? what->valuestring : "");
    }
    if (!r->failed && !check_unread_srcs(r, p))
        return 0;
    p->eval_launches = (int)get_int(r, gpu, "eval_launches", 0, p->nlaunches);
    const cJSON *na = cJSON_GetObjectItemCaseSensitive(gpu, "needs_arch");
    if (na) {
        if (!cJSON_IsString(na) || strlen(na->valuestring) >= sizeof p->needs_arch)
            return bad(r, "\"needs_arch\" is not an architecture name");
        snprintf(p->needs_arch, sizeof p->needs_arch, "%s", na->valuestring);
    }
    const cJSON *cs = cJSON_GetObjectItemCaseSensitive(gpu, "cuda_source");
    if (cJSON_IsString(cs)) {
        p->cuda_source = xstrdup(cs->valuestring);
        p->cuda_source_len = strlen(p->cuda_source);
    }
    const cJSON *img = cJSON_GetObjectItemCaseSensitive(gpu, "image");
    if (img) {
        const char *arch = get_str(r, img, "arch"), *hash = get_str(r, img, "source_hash");
        const char *b64 = get_str(r, img, "base64");
        if (r->failed)
            return 0;
        p->image = payload_base64_decode(b64, &p->image_size);
        if (!p->image)
            return bad(r, "the kernels' image is damaged");
        snprintf(p->image_arch, sizeof p->image_arch, "%s", arch);
        p->image_hash = strtoull(hash, NULL, 16);
    }
    return !r->failed;
}

Plan *plan_from_json(const char *json, size_t len, const char *what, PlanPluginLoader load_plugin, char *err,
                     size_t errlen)
{
    Reader r = {what, err, errlen, 0};
    cJSON *o = open_document(&r, json, len);
    if (!o)
        return NULL;
    Plan *p = NULL;
    /* the pass plugins first: the graph may use their ops */
    const cJSON *src0 = cJSON_GetObjectItemCaseSensitive(o, "source");
    const cJSON *pl0 = src0 ? cJSON_GetObjectItemCaseSensitive(src0, "plugins") : NULL, *it;
    cJSON_ArrayForEach(it, pl0) {
        char perr[1024] = "";
        if (!cJSON_IsString(it) || !load_plugin || !load_plugin(it->valuestring, perr, sizeof perr)) {
            bad(&r, "it was compiled with the pass plugin %s: %s", cJSON_IsString(it) ? it->valuestring : "?",
                load_plugin ? perr : "plugins cannot be loaded here");
            goto out;
        }
    }
    const char *ir = get_str(&r, o, "ir");
    const char *file = get_str(&r, o, "file");
    if (r.failed)
        goto out;
    {
        /* the graph, through the IR reader; its messages go to a buffer */
        Arena arena;
        arena_init(&arena);
        char *msg = NULL;
        size_t msglen = 0;
        FILE *mf = open_memstream(&msg, &msglen);
        Diag d;
        diag_init(&d, file, ir, strlen(ir), mf);
        IrGraph *g = ir_read_text(&arena, file, ir, strlen(ir), &d);
        fclose(mf);
        if (!g || d.nerrors) {
            bad(&r, "its graph does not read back: %s", msg && *msg ? msg : "(no message)");
            free(msg);
            arena_free(&arena);
            goto out;
        }
        free(msg);
        char perr[512];
        p = plan_create(g, &arena, perr, sizeof perr);
        if (!p) {
            bad(&r, "%s", perr);
            arena_free(&arena);
            goto out;
        }
    }
    p->ir_text = xstrdup(ir);
    const IrGraph *g = p->graph;
    /* the tables must agree with the graph they came with */
    const cJSON *par = cJSON_GetObjectItemCaseSensitive(o, "parallel");
    if (!cJSON_IsObject(par)) {
        bad(&r, "no parallel layout");
        goto out;
    }
    if (get_int(&r, par, "ep", 1, 1 << 20) != p->ep || get_int(&r, par, "dp", 1, 1 << 20) != p->dp ||
        get_int(&r, par, "local_batch", 0, INT64_C(1) << 40) != p->local_batch) {
        bad(&r, "its parallel layout does not match its graph");
        goto out;
    }
    const cJSON *params = get_array(&r, o, "params");
    if (r.failed)
        goto out;
    if (cJSON_GetArraySize(params) != p->nparams) {
        bad(&r, "%d parameters listed, the graph has %d", cJSON_GetArraySize(params), p->nparams);
        goto out;
    }
    const cJSON *q = params->child;
    for (int i = 0; i < p->nparams && !r.failed; i++, q = q->next) {
        const PlanParam *pp = &p->params[i];
        if (strcmp(get_str(&r, q, "name"), g->nodes[pp->node]->name) != 0 ||
            get_int(&r, q, "offset", 0, INT64_C(1) << 50) != pp->offset || get_int(&r, q, "grad", 0, 1 << 30) != pp->grad)
            bad(&r, "parameter %d does not match the graph", i);
    }
    if (r.failed)
        goto out;
    const cJSON *gpu = cJSON_GetObjectItemCaseSensitive(o, "gpu");
    if (cJSON_IsObject(gpu) && cJSON_GetArraySize(gpu) > 0 && !read_gpu(&r, p, gpu))
        goto out;
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(o, "source");
    if (cJSON_IsObject(src)) {
        const char *text = get_str(&r, src, "text"), *path = get_str(&r, src, "path");
        const cJSON *pl = cJSON_GetObjectItemCaseSensitive(src, "plugins");
        int npl = cJSON_IsArray(pl) ? cJSON_GetArraySize(pl) : 0;
        const char **plugins = calloc((size_t)npl + 1, sizeof(char *));
        for (int i = 0; i < npl; i++) {
            const cJSON *s = cJSON_GetArrayItem(pl, i);
            plugins[i] = cJSON_IsString(s) ? s->valuestring : "";
        }
        const cJSON *prec = cJSON_GetObjectItemCaseSensitive(src, "precision");
        int has_prec = 0;
        IrPrecision pr = IR_PREC_BF16;
        for (int i = 0; cJSON_IsString(prec) && i < 3; i++)
            if (strcmp(prec->valuestring, ir_precision_name[i]) == 0) {
                has_prec = 1;
                pr = (IrPrecision)i;
            }
        const cJSON *ep = cJSON_GetObjectItemCaseSensitive(src, "ep");
        if (!r.failed)
            plan_set_source(p, path, text, strlen(text), plugins, npl, has_prec, pr,
                            cJSON_IsNumber(ep) ? (int64_t)ep->valuedouble : 0);
        free(plugins);
    }
    {
        const cJSON *kn = cJSON_GetObjectItemCaseSensitive(o, "kernels");
        p->source.kernels = PLAN_KERNELS_REFERENCE;
        for (int i = 0; cJSON_IsString(kn) && i < PLAN_KERNELS_COUNT; i++)
            if (strcmp(kn->valuestring, plan_kernels_name[i]) == 0)
                p->source.kernels = (PlanKernels)i;
        if (kn && !(cJSON_IsString(kn) && strcmp(kn->valuestring, plan_kernels_name[p->source.kernels]) == 0)) {
            bad(&r, "field \"kernels\" is not one of reference, fast");
            goto out;
        }
    }
out:
    cJSON_Delete(o);
    if (r.failed) {
        plan_free(p);
        return NULL;
    }
    return p;
}
