/* print_json.c - the IR as JSON, through cJSON (schema: docs/ir.md).
 *
 * Ownership follows cJSON: every item added to an object belongs to it, and
 * the one root returned by ir_to_json() is freed by the caller. Numbers are
 * written as raw JSON text that reads back exactly (see add_double);
 * non-finite floats, which JSON cannot hold, as strings. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "../util/util.h"

enum { IR_JSON_VERSION = 1 };

/* cJSON prints doubles with "%1.15g" when that reads back *approximately*
 * (its own equality test), so 0.1 + 0.2 would come out as 0.3. Numbers go
 * out as raw JSON text instead: the shortest form that reads back exactly,
 * and integers in full (int64 beyond 2^53 would lose digits as doubles). */
static void add_double(cJSON *o, const char *k, double v)
{
    char b[32];
    if (isfinite(v))
        cJSON_AddRawToObject(o, k, fmt_double(b, v));
    else
        cJSON_AddStringToObject(o, k, fmt_double(b, v));
}

static void add_int(cJSON *o, const char *k, int64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)v);
    cJSON_AddRawToObject(o, k, b);
}

static cJSON *int_item(int64_t v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)v);
    return cJSON_CreateRaw(b);
}

static cJSON *loc_json(const IrGraph *g, SrcLoc loc)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", g->file);
    add_int(o, "line", loc.line);
    add_int(o, "col", loc.col);
    return o;
}

static cJSON *train_json(const IrTrain *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *opt = cJSON_AddObjectToObject(o, "optimizer");
    cJSON_AddStringToObject(opt, "name", ir_optimizer_name[t->optimizer]);
    add_double(opt, "lr", t->lr);
    cJSON *betas = cJSON_AddArrayToObject(opt, "betas");
    char b[32];
    cJSON_AddItemToArray(betas, cJSON_CreateRaw(fmt_double(b, t->beta1)));
    cJSON_AddItemToArray(betas, cJSON_CreateRaw(fmt_double(b, t->beta2)));
    add_double(opt, "eps", t->eps);
    add_double(opt, "weight_decay", t->weight_decay);
    cJSON *nd = cJSON_AddArrayToObject(opt, "no_decay");
    if (!t->decay_norms)
        cJSON_AddItemToArray(nd, cJSON_CreateString("norms"));
    if (!t->decay_embeddings)
        cJSON_AddItemToArray(nd, cJSON_CreateString("embeddings"));
    cJSON *sch = cJSON_AddObjectToObject(o, "schedule");
    cJSON_AddStringToObject(sch, "name", ir_schedule_name[t->schedule]);
    add_int(sch, "warmup", t->warmup);
    add_double(sch, "min_lr", t->min_lr);
    cJSON_AddStringToObject(o, "precision", ir_precision_name[t->precision]);
    add_int(o, "ep", t->ep);
    add_int(o, "dp", t->dp);
    add_int(o, "batch", t->batch);
    add_int(o, "seq", t->seq);
    add_double(o, "grad_clip", t->grad_clip);
    add_int(o, "steps", t->steps);
    add_double(o, "aux_loss", t->aux_loss_coef);
    cJSON_AddStringToObject(o, "alphabet", ir_alphabet_name[t->alphabet]);
    cJSON_AddStringToObject(o, "objective", ir_objective_name[t->objective]);
    if (t->packing != IR_PACK_AUTO)
        cJSON_AddStringToObject(o, "packing", ir_packing_name[t->packing]);
    if (t->checkpoint != IR_CKPT_NONE)
        cJSON_AddStringToObject(o, "checkpoint", ir_checkpoint_name[t->checkpoint]);
    return o;
}

static cJSON *node_json(const IrGraph *g, const IrNode *n)
{
    cJSON *o = cJSON_CreateObject();
    add_int(o, "id", n->id);
    cJSON_AddStringToObject(o, "name", n->name);
    cJSON_AddStringToObject(o, "op", ir_node_op_name(n));
    cJSON *in = cJSON_AddArrayToObject(o, "inputs");
    for (int s = 0; s < n->nsrc; s++)
        cJSON_AddItemToArray(in, cJSON_CreateString(n->src[s]->name));
    cJSON *at = cJSON_AddObjectToObject(o, "attrs");
    for (int k = 0; k < IR_ATTR_COUNT; k++) {
        if (!ir_has_attr(n, (IrAttrKey)k))
            continue;
        switch (ir_attr_kind[k]) {
        case IR_AK_I: add_int(at, ir_attr_name[k], n->attr[k].i); break;
        case IR_AK_B: cJSON_AddBoolToObject(at, ir_attr_name[k], n->attr[k].i != 0); break;
        case IR_AK_F: add_double(at, ir_attr_name[k], n->attr[k].f); break;
        case IR_AK_S: cJSON_AddStringToObject(at, ir_attr_name[k], n->attr[k].s); break;
        case IR_AK_E: cJSON_AddStringToObject(at, ir_attr_name[k], ir_attr_e_name(n, (IrAttrKey)k)); break;
        }
    }
    cJSON_AddStringToObject(o, "dtype", ir_dtype_name[n->dtype]);
    cJSON *sh = cJSON_AddArrayToObject(o, "shape");
    for (int d = 0; d < n->rank; d++)
        cJSON_AddItemToArray(sh, int_item(n->shape[d]));
    cJSON_AddStringToObject(o, "label", n->label);
    cJSON_AddStringToObject(o, "scope", n->scope);
    if (n->layer)
        cJSON_AddStringToObject(o, "layer", n->layer);
    else
        cJSON_AddNullToObject(o, "layer");
    cJSON_AddItemToObject(o, "loc", loc_json(g, n->loc));
    if (n->is_output)
        cJSON_AddTrueToObject(o, "output");
    if (n->output_name)
        cJSON_AddStringToObject(o, "output_name", n->output_name);
    return o;
}

cJSON *ir_decisions_json(const IrGraph *g)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < g->decisions.len; i++) {
        const IrDecision *d = g->decisions.items[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "pass", d->pass);
        cJSON_AddStringToObject(o, "where", d->where);
        cJSON_AddItemToObject(o, "loc", loc_json(g, d->loc));
        cJSON_AddBoolToObject(o, "fused", d->fused);
        cJSON_AddStringToObject(o, "action", d->action);
        if (d->result)
            cJSON_AddStringToObject(o, "result", d->result);
        else
            cJSON_AddNullToObject(o, "result");
        if (d->reason)
            cJSON_AddStringToObject(o, "reason", d->reason);
        else
            cJSON_AddNullToObject(o, "reason");
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

cJSON *ir_to_json(const IrGraph *g)
{
    cJSON *root = cJSON_CreateObject();
    add_int(root, "moec_ir_version", IR_JSON_VERSION);
    cJSON_AddStringToObject(root, "model", g->model);
    cJSON_AddStringToObject(root, "file", g->file);
    cJSON_AddItemToObject(root, "train", train_json(&g->train));
    cJSON *nodes = cJSON_AddArrayToObject(root, "nodes");
    for (int i = 0; i < g->nnodes; i++)
        cJSON_AddItemToArray(nodes, node_json(g, g->nodes[i]));
    /* layers: each outermost repeat iteration with the names of its nodes */
    cJSON *layers = cJSON_AddArrayToObject(root, "layers");
    cJSON *cur = NULL;
    const char *cur_name = NULL;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (!n->layer)
            continue;
        if (!cur_name || strcmp(cur_name, n->layer) != 0) {
            cJSON *l = NULL;
            cJSON_ArrayForEach(l, layers)
                if (strcmp(cJSON_GetObjectItem(l, "name")->valuestring, n->layer) == 0)
                    break;
            if (!l) {
                l = cJSON_CreateObject();
                cJSON_AddStringToObject(l, "name", n->layer);
                cJSON_AddArrayToObject(l, "nodes");
                cJSON_AddItemToArray(layers, l);
            }
            cur = cJSON_GetObjectItem(l, "nodes");
            cur_name = n->layer;
        }
        cJSON_AddItemToArray(cur, cJSON_CreateString(n->name));
    }
    /* outputs as in the text dump: gradients are listed under "grads" */
    cJSON *outs = cJSON_AddArrayToObject(root, "outputs");
    for (int i = 0; i < g->nnodes; i++) {
        int is_grad = 0;
        for (int p = 0; p < g->nparams; p++)
            is_grad |= g->grads[p] == g->nodes[i];
        if (g->nodes[i]->is_output && !is_grad)
            cJSON_AddItemToArray(outs, cJSON_CreateString(g->nodes[i]->name));
    }
    cJSON_AddItemToObject(root, "decisions", ir_decisions_json(g));
    cJSON *grads = cJSON_AddArrayToObject(root, "grads");
    for (int p = 0; p < g->nparams; p++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "param", g->params[p]->name);
        cJSON_AddStringToObject(o, "grad", g->grads[p]->name);
        cJSON_AddItemToArray(grads, o);
    }
    if (g->loss)
        cJSON_AddStringToObject(root, "loss", g->loss->name);
    else
        cJSON_AddNullToObject(root, "loss");
    return root;
}

void ir_print_json(const IrGraph *g, FILE *out)
{
    cJSON *root = ir_to_json(g);
    char *s = cJSON_Print(root);
    if (!s)
        die("cJSON_Print failed");
    fputs(s, out);
    fputc('\n', out);
    cJSON_free(s);
    cJSON_Delete(root);
}
