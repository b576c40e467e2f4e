/* print_text.c - the human-readable IR dump, which is also an input
 * (read_text.c reads it back into the same graph).
 *
 * Stable by construction: nodes in graph order, names instead of pointers,
 * attributes in attrs.def order, floats in the shortest form that reads
 * back exactly. Two runs over the same input print the same bytes.
 *
 *   %layers.0.decoder.h = add(%x, %layers.0.decoder.attn_out) : f32[8, 128, 64]  @13:5
 *
 * A node's label, scope and layer follow from its name (ir_name_label and
 * friends in ir.c); the rare node where they do not gets `label "..."`,
 * `scope "..."` or `layer "..."|none` after its location. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "../util/util.h"

static void print_attr(const IrNode *n, int k, FILE *out)
{
    char b[32];
    fprintf(out, "%s = ", ir_attr_name[k]);
    switch (ir_attr_kind[k]) {
    case IR_AK_I: fprintf(out, "%lld", (long long)n->attr[k].i); break;
    case IR_AK_B: fprintf(out, "%s", n->attr[k].i ? "true" : "false"); break;
    case IR_AK_F: fprintf(out, "%s", fmt_double(b, n->attr[k].f)); break;
    case IR_AK_S: fprintf(out, "\"%s\"", n->attr[k].s); break;
    case IR_AK_E: fprintf(out, "\"%s\"", ir_attr_e_name(n, (IrAttrKey)k)); break;
    }
}

const char *ir_scales_str(const IrNode *n, char *buf, size_t size)
{
    char sh_buf[128];
    buf[0] = 0;
    int row = ir_has_attr(n, IR_ATTR_AXIS) && ir_attr_e(n, IR_ATTR_AXIS) == IR_AXIS_ROWWISE;
    if (n->op == IR_OP_QUANTIZE && ir_has_attr(n, IR_ATTR_AXIS) && n->rank >= (row ? 1 : 2)) {
        /* the scales travel with the values: one e8m0 per 32 along the axis */
        int64_t sh[IR_MAX_RANK];
        memcpy(sh, n->shape, sizeof sh);
        sh[row ? n->rank - 1 : n->rank - 2] /= 32;
        snprintf(buf, size, "e8m0%s", ir_shape_str(n->rank, sh, sh_buf, sizeof sh_buf));
    } else if (n->op == IR_OP_QUANTIZE_GROUPED && n->rank >= 2) {
        snprintf(buf, size, "e8m0[per 32 rows of each group, %lld]", (long long)n->shape[1]);
    } else if (n->op == IR_OP_QUANTIZE_FP8B && ir_has_attr(n, IR_ATTR_AXIS) && n->rank >= (row ? 1 : 2)) {
        /* one power-of-two scale (an e8m0 code) per 1x128, 128x1 or 128x128 block, partial ones included */
        int64_t sh[IR_MAX_RANK];
        IrAxis ax = (IrAxis)ir_attr_e(n, IR_ATTR_AXIS);
        memcpy(sh, n->shape, sizeof sh);
        if (ax != IR_AXIS_COLWISE)
            sh[n->rank - 1] = (sh[n->rank - 1] + 127) / 128;
        if (ax != IR_AXIS_ROWWISE)
            sh[n->rank - 2] = (sh[n->rank - 2] + 127) / 128;
        snprintf(buf, size, "e8m0%s", ir_shape_str(n->rank, sh, sh_buf, sizeof sh_buf));
    } else if (n->op == IR_OP_QUANTIZE_FP8B_GROUPED && n->rank >= 2) {
        snprintf(buf, size, "e8m0[per 128 rows of each group, %lld]", (long long)n->shape[1]);
    }
    return buf;
}

/* label, scope and layer where the name does not imply them */
static void print_naming(const IrNode *n, const IrNodeMap *byname, FILE *out)
{
    size_t off, len, scope_len;
    ir_name_label(n->name, n->op, &off, &len);
    if (strlen(n->label) != len || strncmp(n->name + off, n->label, len) != 0)
        fprintf(out, "  label \"%s\"", n->label);
    if (!ir_name_scope(n->name, n->label, &scope_len) || strlen(n->scope) != scope_len ||
        strncmp(n->name, n->scope, scope_len) != 0)
        fprintf(out, "  scope \"%s\"", n->scope);
    const char *layer;
    ir_name_layer(n->scope, byname, &layer, &len);
    if (!n->layer && layer)
        fprintf(out, "  layer none");
    else if (n->layer && (!layer || strlen(n->layer) != len || strncmp(n->layer, layer, len) != 0))
        fprintf(out, "  layer \"%s\"", n->layer);
}

void ir_print_train(const IrTrain *t, FILE *out)
{
    char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
    fprintf(out, "# train: optimizer %s(lr = %s, betas = (%s, %s), eps = %s, weight_decay = %s)\n", ir_optimizer_name[t->optimizer],
            fmt_double(a, t->lr), fmt_double(b, t->beta1), fmt_double(c, t->beta2), fmt_double(d, t->eps),
            fmt_double(e, t->weight_decay));
    fprintf(out, "#        schedule %s(warmup = %lld, min_lr = %s), precision %s, ep %lld, dp %lld\n", ir_schedule_name[t->schedule],
            (long long)t->warmup, fmt_double(f, t->min_lr), ir_precision_name[t->precision], (long long)t->ep,
            (long long)t->dp);
    fprintf(out, "#        batch %lld, seq %lld, grad_clip %s, steps %lld, aux_loss %s, alphabet %s, objective %s\n",
            (long long)t->batch, (long long)t->seq, fmt_double(g, t->grad_clip), (long long)t->steps,
            fmt_double(a, t->aux_loss_coef), ir_alphabet_name[t->alphabet], ir_objective_name[t->objective]);
    if (t->packing != IR_PACK_AUTO)
        fprintf(out, "#        packing %s\n", ir_packing_name[t->packing]);
    if (t->checkpoint != IR_CKPT_NONE)
        fprintf(out, "#        checkpoint %s\n", ir_checkpoint_name[t->checkpoint]);
    if (t->decay_norms || t->decay_embeddings)
        fprintf(out, "#        weight decay also on:%s%s\n", t->decay_norms ? " norms" : "",
                t->decay_embeddings ? " embeddings" : "");
}

void ir_print_text(const IrGraph *g, FILE *out)
{
    char tb[160];
    fprintf(out, "# moec IR of model %s (%s): %d nodes\n", g->model, g->file, g->nnodes);
    ir_print_train(&g->train, out);
    for (int i = 0; i < g->decisions.len; i++) {
        const IrDecision *d = g->decisions.items[i];
        fprintf(out, "# %s: %s (line %d:%d): %s", d->pass, d->where, d->loc.line, d->loc.col, d->action);
        if (d->fused && d->result)
            fprintf(out, " -> %%%s%s%s%s\n", d->result, d->reason ? " (" : "", d->reason ? d->reason : "",
                    d->reason ? ")" : "");
        else
            fprintf(out, ": %s\n", d->reason ? d->reason : "");
    }
    fprintf(out, "graph %s {\n", g->model);
    IrNodeMap byname;
    ir_node_map_init(&byname, (size_t)g->nnodes);
    for (int i = 0; i < g->nnodes; i++)
        ir_node_map_put(&byname, g->nodes[i]);
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        fprintf(out, "  %%%s = %s", n->name, ir_node_op_name(n));
        if (n->nsrc) {
            fputc('(', out);
            for (int s = 0; s < n->nsrc; s++)
                fprintf(out, "%s%%%s", s ? ", " : "", n->src[s]->name);
            fputc(')', out);
        }
        if (n->attr_set) {
            fputs(" {", out);
            int first = 1;
            for (int k = 0; k < IR_ATTR_COUNT; k++)
                if (ir_has_attr(n, (IrAttrKey)k)) {
                    if (!first)
                        fputs(", ", out);
                    print_attr(n, k, out);
                    first = 0;
                }
            fputc('}', out);
        }
        fprintf(out, " : %s", n->rank >= 0 ? ir_type_str(n, tb, sizeof tb) : "<error>");
        if (*ir_scales_str(n, tb, sizeof tb))
            fprintf(out, " + %s", tb);
        if (n->loc.line)
            fprintf(out, "  @%d:%d", n->loc.line, n->loc.col);
        print_naming(n, &byname, out);
        fputc('\n', out);
    }
    ir_node_map_free(&byname);
    /* gradients are outputs too; they are listed by the param they belong to */
    for (int i = 0; i < g->nnodes; i++) {
        int is_grad = 0;
        for (int p = 0; p < g->nparams; p++)
            is_grad |= g->grads[p] == g->nodes[i];
        if (g->nodes[i]->is_output && !is_grad) {
            /* the name an `output NAME = ...` gave it, when that is not its label (or for the loss,
             * which has none unless an output statement named it too) */
            const IrNode *n = g->nodes[i];
            const char *implied = n == g->loss ? NULL : n->label;
            if (n->output_name && (!implied || strcmp(n->output_name, implied) != 0))
                fprintf(out, "  output %%%s as \"%s\"\n", n->name, n->output_name);
            else if (!n->output_name && implied)
                fprintf(out, "  output %%%s as none\n", n->name);
            else
                fprintf(out, "  output %%%s\n", n->name);
        }
    }
    if (g->loss)
        fprintf(out, "  loss %%%s\n", g->loss->name);
    for (int p = 0; p < g->nparams; p++)
        fprintf(out, "  grad %%%s = %%%s\n", g->params[p]->name, g->grads[p]->name);
    fprintf(out, "}\n");
}
