/* plan.c - making and freeing a Plan: the parallel layout, the parameter
 * layout (one flat fp32 array, AdamW moments alike) and checkpoint schema,
 * the inputs the batch goes to. The GPU part comes from codegen. */
#include "plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

const char *const plan_storage_name[PLAN_STORAGE_COUNT] = {"f32", "f64", "i32", "bf16", "e4m3"};
const int plan_storage_bytes[PLAN_STORAGE_COUNT] = {4, 8, 4, 2, 1};
const char *const plan_region_name[PLAN_REGION_COUNT] = {"params", "inputs", "activations"};
const char *const plan_buf_kind_name[PLAN_BUF_KIND_COUNT] = {"tensor", "view", "workspace", "copy"};
const char *const plan_arg_kind_name[PLAN_ARG_KIND_COUNT] = {"buf", "tmap", "i32", "tmap_f32", "tmap_u8", "i64", "norm"};
const char *const plan_kernels_name[PLAN_KERNELS_COUNT] = {"reference", "fast"};

int plan_arch_takes_fast(const char *arch)
{
    return arch && (strcmp(arch, "sm_90a") == 0 || strcmp(arch, "compute_90a") == 0);
}

int plan_storage_lookup(const char *name)
{
    for (int i = 0; i < PLAN_STORAGE_COUNT; i++)
        if (strcmp(name, plan_storage_name[i]) == 0)
            return i;
    return -1;
}

static int used_as(const IrGraph *g, const IrNode *p, IrOp op, int src)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == op && g->nodes[i]->nsrc > src && g->nodes[i]->src[src] == p)
            return 1;
    return 0;
}

Plan *plan_create(IrGraph *g, Arena *arena, char *err, size_t errlen)
{
    if (!g->loss || !g->grads || g->nparams == 0) {
        snprintf(err, errlen, "model %s has no loss with gradients to train", g->model);
        return NULL;
    }
    Plan *p = calloc(1, sizeof *p);
    if (!p)
        die("out of memory");
    p->arena = *arena;
    memset(arena, 0, sizeof *arena);
    g->arena = &p->arena;
    p->graph = g;
    const IrTrain *tr = &g->train;
    p->ep = tr->ep > 0 ? tr->ep : 1;
    p->dp = tr->dp > 0 ? tr->dp : 1;
    p->world = p->ep * p->dp;
    p->batch = tr->batch;
    p->local_batch = tr->batch / p->world;
    p->seq = tr->seq;
    p->tokens = p->targets = -1;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->op == IR_OP_EMBEDDING && n->src[0]->op == IR_OP_INPUT)
            p->tokens = n->src[0]->id;
        if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_MASKED_LM_LOSS) && n->src[1]->op == IR_OP_INPUT)
            p->targets = n->src[1]->id;
        if (n->op == IR_OP_TOPK_EXPERTS)
            p->experts = n->src[0]->shape[n->src[0]->rank - 1];
    }
    p->local_experts = p->experts ? p->experts / p->ep : 0;
    p->nparams = g->nparams;
    p->params = calloc((size_t)g->nparams + 1, sizeof *p->params);
    if (!p->params)
        die("out of memory");
    for (int i = 0; i < g->nparams; i++) {
        const IrNode *n = g->params[i];
        PlanParam *pp = &p->params[i];
        pp->node = n->id;
        pp->grad = g->grads[i] ? g->grads[i]->id : -1;
        pp->numel = ir_numel(n);
        pp->offset = p->nparams_total;
        p->nparams_total += pp->numel;
        pp->weight_decay = !((used_as(g, n, IR_OP_RMSNORM, 1) && !tr->decay_norms) ||
                             (used_as(g, n, IR_OP_EMBEDDING, 1) && !tr->decay_embeddings));
        pp->shard = ir_has_attr(n, IR_ATTR_SHARD) ? ir_attr_i(n, IR_ATTR_SHARD) : 1;
        pp->rank = n->rank;
        for (int d = 0; d < n->rank; d++)
            pp->full_shape[d] = n->shape[d] * (d == 0 ? pp->shard : 1);
        if (pp->grad < 0) {
            snprintf(err, errlen, "parameter %s has no gradient", n->name);
            plan_free(p);
            return NULL;
        }
    }
    return p;
}

int plan_fp8b_copy_layout(const IrGraph *g, const IrNode *w, PlanFp8Copy *out)
{
    memset(out, 0, sizeof *out);
    if (w->rank != 3 || w->shape[0] < 1 || w->shape[1] < 128 || w->shape[2] < 128 || w->shape[1] % 128 ||
        w->shape[2] % 128)
        return 0;
    out->e = w->shape[0];
    out->n = w->shape[1];
    out->k = w->shape[2];
    out->mx = g->train.precision == IR_PREC_MXFP8;
    int64_t codes = out->e * out->n * out->k, scales = out->mx ? codes / 32 : out->e * (out->n / 128) * (out->k / 128);
    out->q = 0;
    out->qt = codes;
    out->s = 2 * codes;
    out->st = 2 * codes + scales;
    out->bytes = 2 * codes + 2 * scales;
    return 1;
}

void plan_fp8b_kernel_name(const PlanFp8Copy *c, int update, char *buf, size_t len)
{
    snprintf(buf, len, "%s_%lldx%lldx%lld",
             c->mx ? (update ? "moec_adamw_mx8" : "moec_mx8_copy") : (update ? "moec_adamw_fp8b" : "moec_fp8b_copy"),
             (long long)c->e,
             (long long)c->n, (long long)c->k);
}

void plan_set_source(Plan *p, const char *path, const char *text, size_t len, const char *const *plugins,
                     int nplugins, int has_precision, IrPrecision precision, int64_t ep)
{
    PlanSource *s = &p->source;
    s->path = xstrdup(path ? path : "");
    s->text = malloc(len + 1);
    if (!s->text)
        die("out of memory");
    memcpy(s->text, text, len);
    s->text[len] = 0;
    s->len = len;
    s->plugins = calloc((size_t)nplugins + 1, sizeof(char *));
    for (int i = 0; i < nplugins; i++)
        s->plugins[i] = xstrdup(plugins[i]);
    s->nplugins = nplugins;
    s->has_precision = has_precision;
    s->precision = precision;
    s->ep = ep;
}

uint64_t plan_code_hash(const char *src, size_t n)
{
    uint64_t h = HASH64_INIT;
    size_t i = 0;
    while (i < n) {
        size_t e = i;
        while (e < n && src[e] != '\n')
            e++;
        size_t j = i;
        while (j < e && (src[j] == ' ' || src[j] == '\t'))
            j++;
        if (!(e - j >= 2 && src[j] == '/' && src[j + 1] == '/'))
            h = hash64_update(h, src + i, e < n ? e + 1 - i : e - i);
        i = e + 1;
    }
    return h;
}

void plan_set_image(Plan *p, const char *arch, const void *image, size_t size)
{
    free(p->image);
    p->image = malloc(size ? size : 1);
    if (!p->image)
        die("out of memory");
    memcpy(p->image, image, size);
    p->image_size = size;
    snprintf(p->image_arch, sizeof p->image_arch, "%s", arch);
    p->image_hash = plan_code_hash(p->cuda_source, p->cuda_source_len);
}

void plan_clear_gpu(Plan *p)
{
    for (int i = 0; i < p->nbufs; i++)
        free(p->bufs[i].name);
    free(p->bufs);
    for (int i = 0; i < p->nlaunches; i++) {
        free(p->launches[i].args);
        free(p->launches[i].targs);
        free(p->launches[i].what);
        free(p->launches[i].impl);
    }
    free(p->launches);
    for (int k = 0; k < p->nkernels; k++)
        free(p->kernel_names[k]);
    free(p->kernel_names);
    free(p->cuda_source);
    free(p->gpu_unsupported);
    p->bufs = NULL;
    p->launches = NULL;
    p->kernel_names = NULL;
    p->cuda_source = p->gpu_unsupported = NULL;
    p->nbufs = p->nlaunches = p->nkernels = p->eval_launches = p->nkernel_launches = p->ncollectives = 0;
    p->cuda_source_len = 0;
    p->needs_arch[0] = 0;
    memset(&p->memory, 0, sizeof p->memory);
}

void plan_free(Plan *p)
{
    if (!p)
        return;
    plan_clear_gpu(p);
    free(p->image);
    free(p->params);
    free(p->ir_text);
    free(p->source.text);
    free(p->source.path);
    for (int i = 0; i < p->source.nplugins; i++)
        free(p->source.plugins[i]);
    free(p->source.plugins);
    arena_free(&p->arena);
    free(p);
}
