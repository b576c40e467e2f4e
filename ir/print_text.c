/* print_text.c - the human-readable IR dump.
 *
 * Stable by construction: nodes in graph order, names instead of pointers,
 * attributes in attrs.def order, floats in the shortest form that reads
 * back exactly. Two runs over the same input print the same bytes.
 *
 *   %layers.0.decoder.h = add(%x, %layers.0.decoder.attn_out) : f32[8, 128, 64]  @13:5
 */
#include <stdio.h>
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
    }
}

void ir_print_train(const IrTrain *t, FILE *out)
{
    char a[32], b[32], c[32], d[32], e[32], f[32], g[32];
    fprintf(out, "# train: optimizer %s(lr = %s, betas = (%s, %s), eps = %s, weight_decay = %s)\n", t->optimizer,
            fmt_double(a, t->lr), fmt_double(b, t->beta1), fmt_double(c, t->beta2), fmt_double(d, t->eps),
            fmt_double(e, t->weight_decay));
    fprintf(out, "#        schedule %s(warmup = %lld, min_lr = %s), precision %s, ep %lld, dp %lld\n", t->schedule,
            (long long)t->warmup, fmt_double(f, t->min_lr), ir_precision_name[t->precision], (long long)t->ep,
            (long long)t->dp);
    fprintf(out, "#        batch %lld, seq %lld, grad_clip %s, steps %lld, aux_loss %s, alphabet %s, objective %s\n",
            (long long)t->batch, (long long)t->seq, fmt_double(g, t->grad_clip), (long long)t->steps,
            fmt_double(a, t->aux_loss_coef), t->alphabet, t->objective);
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
        if (d->fused && d->result)
            fprintf(out, "# %s: %s (line %d): %s -> %%%s\n", d->pass, d->where, d->loc.line, d->action, d->result);
        else if (d->fused)
            fprintf(out, "# %s: %s (line %d): %s: %s\n", d->pass, d->where, d->loc.line, d->action,
                    d->reason ? d->reason : "");
        else
            fprintf(out, "# %s: %s (line %d): %s: %s\n", d->pass, d->where, d->loc.line, d->action, d->reason);
    }
    fprintf(out, "graph %s {\n", g->model);
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
        if (n->op == IR_OP_QUANTIZE && n->rank >= 1) {
            /* the scales travel with the values: one e8m0 per 32 along the axis */
            int64_t sh[IR_MAX_RANK];
            memcpy(sh, n->shape, sizeof sh);
            int row = strcmp(n->attr[IR_ATTR_AXIS].s, "rowwise") == 0;
            sh[row ? n->rank - 1 : n->rank - 2] /= 32;
            fprintf(out, " + e8m0%s", ir_shape_str(n->rank, sh, tb, sizeof tb));
        } else if (n->op == IR_OP_QUANTIZE_GROUPED) {
            fprintf(out, " + e8m0[per 32 rows of each group, %lld]", (long long)n->shape[1]);
        }
        if (n->loc.line)
            fprintf(out, "  @%d:%d", n->loc.line, n->loc.col);
        fputc('\n', out);
    }
    /* gradients are outputs too; they are listed by the param they belong to */
    for (int i = 0; i < g->nnodes; i++) {
        int is_grad = 0;
        for (int p = 0; p < g->nparams; p++)
            is_grad |= g->grads[p] == g->nodes[i];
        if (g->nodes[i]->is_output && !is_grad) {
            const IrNode *n = g->nodes[i];
            if (n->output_name && strcmp(n->output_name, n->label) != 0)
                fprintf(out, "  output %%%s  # %s\n", n->name, n->output_name);
            else
                fprintf(out, "  output %%%s\n", n->name);
        }
    }
    for (int p = 0; p < g->nparams; p++)
        fprintf(out, "  grad %%%s = %%%s\n", g->params[p]->name, g->grads[p]->name);
    fprintf(out, "}\n");
}
