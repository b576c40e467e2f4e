/* ir_read_check.h - a graph printed with ir_print_text and read back with
 * ir_read_text must equal the original field by field: name, label, scope,
 * layer, loc, op (and custom descriptor), sources, attributes with their
 * kinds, dtype, shape, outputs and their names, the loss, params/grads in
 * order, the train section and the decisions. Included by test_ir.c and
 * test_plugin_gelu_mlp.c (which has the plugin's custom op); the including
 * file defines CHECK(cond, ...). */
#include <string.h>
#include <time.h>

static int same_str(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

/* Prints g, reads it back; *read_ms is the time ir_read_text took. */
static IrGraph *read_back(const IrGraph *g, Arena *a, char **text, double *read_ms)
{
    size_t len = 0;
    FILE *f = open_memstream(text, &len);
    ir_print_text(g, f);
    fclose(f);
    Diag d;
    diag_init(&d, "back.mir", *text, len, stderr);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    IrGraph *h = ir_read_text(a, "back.mir", *text, len, &d);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *read_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    return h;
}

static void check_same_graph(const IrGraph *g, const IrGraph *h, const char *what)
{
    CHECK(h != NULL, "%s: read back", what);
    if (!h)
        return;
    CHECK(same_str(g->model, h->model) && same_str(g->file, h->file), "%s: model %s (%s)", what, h->model, h->file);
    CHECK(g->nnodes == h->nnodes, "%s: %d nodes, %d read", what, g->nnodes, h->nnodes);
    int bad = 0;
    for (int i = 0; i < g->nnodes && i < h->nnodes && bad < 5; i++) {
        const IrNode *x = g->nodes[i], *y = h->nodes[i];
        int ok = y->id == i && x->op == y->op && x->custom == y->custom && x->nsrc == y->nsrc &&
                 x->attr_set == y->attr_set && x->dtype == y->dtype && x->rank == y->rank &&
                 same_str(x->name, y->name) && same_str(x->label, y->label) && same_str(x->scope, y->scope) &&
                 same_str(x->layer, y->layer) && x->loc.line == y->loc.line && x->loc.col == y->loc.col &&
                 x->is_output == y->is_output && same_str(x->output_name, y->output_name);
        for (int s = 0; ok && s < x->nsrc; s++)
            ok = x->src[s]->id == y->src[s]->id && y->src[s] == h->nodes[y->src[s]->id];
        for (int d = 0; ok && d < x->rank; d++)
            ok = x->shape[d] == y->shape[d];
        for (int k = 0; ok && k < IR_ATTR_COUNT; k++) {
            if (!ir_has_attr(x, (IrAttrKey)k))
                continue;
            switch (ir_attr_kind[k]) {
            case IR_AK_I: case IR_AK_B: case IR_AK_E: ok = x->attr[k].i == y->attr[k].i; break;
            case IR_AK_F: ok = memcmp(&x->attr[k].f, &y->attr[k].f, sizeof(double)) == 0; break;
            case IR_AK_S: ok = same_str(x->attr[k].s, y->attr[k].s); break;
            }
        }
        if (!ok)
            bad++;
        CHECK(ok, "%s: node %d %s differs when read back (%s/%s/%s vs %s/%s/%s)", what, i, x->name, x->label,
              x->scope, x->layer ? x->layer : "-", y->label, y->scope, y->layer ? y->layer : "-");
    }
    CHECK((!g->loss && !h->loss) || (g->loss && h->loss && g->loss->id == h->loss->id), "%s: the loss", what);
    int pg = g->nparams == h->nparams;
    for (int p = 0; pg && p < g->nparams; p++)
        pg = g->params[p]->id == h->params[p]->id && g->grads[p]->id == h->grads[p]->id;
    CHECK(pg, "%s: params/grads (%d, %d read)", what, g->nparams, h->nparams);
    const IrTrain *s = &g->train, *t = &h->train;
    CHECK(s->optimizer == t->optimizer && s->lr == t->lr && s->beta1 == t->beta1 && s->beta2 == t->beta2 &&
          s->eps == t->eps && s->weight_decay == t->weight_decay && s->schedule == t->schedule &&
          s->warmup == t->warmup && s->min_lr == t->min_lr && s->precision == t->precision && s->ep == t->ep &&
          s->dp == t->dp && s->batch == t->batch && s->seq == t->seq && s->grad_clip == t->grad_clip &&
          s->steps == t->steps && s->alphabet == t->alphabet && s->objective == t->objective &&
          s->aux_loss_coef == t->aux_loss_coef && s->decay_norms == t->decay_norms &&
          s->decay_embeddings == t->decay_embeddings, "%s: the train section", what);
    int dd = g->decisions.len == h->decisions.len;
    for (int i = 0; dd && i < g->decisions.len; i++) {
        const IrDecision *x = g->decisions.items[i], *y = h->decisions.items[i];
        dd = same_str(x->pass, y->pass) && same_str(x->action, y->action) && same_str(x->where, y->where) &&
             x->loc.line == y->loc.line && x->loc.col == y->loc.col && x->fused == y->fused &&
             same_str(x->result, y->result) && same_str(x->reason, y->reason);
    }
    CHECK(dd, "%s: decisions (%d, %d read)", what, g->decisions.len, h->decisions.len);
}

/* Compiles path through the whole pipeline (ctx as given), reads its dump back and compares. */
static void check_read_back_model(const char *path, PassCtx *ctx, double max_ms)
{
    Compilation c = {0};
    if (!compilation_read(&c, path, stderr)) {
        CHECK(0, "cannot read %s", path);
        return;
    }
    int rc = compilation_run(&c, path, c.text, c.len, stderr, ctx);
    CHECK(rc == 0, "%s compiles", path);
    if (rc == 0) {
        Arena a;
        arena_init(&a);
        char *text = NULL;
        double ms;
        IrGraph *h = read_back(c.graph, &a, &text, &ms);
        check_same_graph(c.graph, h, path);
        printf("%s: %d nodes read back in %.2f ms\n", path, c.graph->nnodes, ms);
        CHECK(ms < max_ms, "%s: read in %.2f ms, more than %.0f", path, ms, max_ms);
        free(text);
        arena_free(&a);
    }
    compilation_free(&c);
}
