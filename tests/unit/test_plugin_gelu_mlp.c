/* test_plugin_gelu_mlp.c - the numeric test of the fuse-grouped-gelu-mlp
 * plugin (plugins/fuse_grouped_gelu_mlp.c) and its custom op.
 *
 * The plugin is loaded the way moec loads it (pass_load_plugin, from
 * BUILD/plugins/ beside this binary, so the ASan build tests its own copy);
 * this program is linked with -rdynamic and the whole libmoec.a so that the
 * plugin's references to the IR and pass API resolve against it.
 *
 * 1. The shape rule of grouped_mlp_gelu reports bad operands in user terms.
 * 2. models/variants/mixtral_tiny_gelu.moe compiled with and without the
 *    plugin's pass, on the same random parameters and data: the loss and
 *    every parameter gradient agree. In fp64 within 1e-12 relative (to the
 *    tensor's largest magnitude): the fused forward sums its GEMMs in another
 *    order than moec's grouped_linear kernel (which keeps 8 partial sums), so
 *    the two differ by rounding alone, about 1e-16 per operation, amplified
 *    by the sums of at most 128 terms and by two layers and the backward to
 *    ~1e-14; a wrong gradient rule differs at the 1e-1 level. The same in
 *    fp32 (relative L2 within 1e-5: fp32 rounding, 6e-8 per operation) and in
 *    fp64 with mxfp8 (the fused kernel quantizes its operands as the
 *    precision pass quantizes the unfused chain's; the quantizer rounds in
 *    float, so both sides see identical operands unless a value lies within
 *    1e-16 of an E4M3 rounding boundary, and products of E4M3 values sum
 *    without rounding in double: the two agree exactly).
 * 3. The gradient rule against finite differences in fp64: the five-point
 *    stencil (8 (L(p+h) - L(p-h)) - (L(p+2h) - L(p-2h))) / 12h with
 *    h = 1e-4, as tests/unit/test_gradcheck.c, relative error < 1e-6, on a
 *    small expert layer and on mixtral_tiny_gelu at a small batch. */
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../driver/compile.h"
#include "../../runtime/cpu/cpu.h"
#include "../../util/util.h"

#define PASS_NAME "fuse-grouped-gelu-mlp"
#define GELU_MODEL "models/variants/mixtral_tiny_gelu.moe"

static int npass, nfail;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(ok ? "ok   " : "FAIL ", stdout);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    if (ok)
        npass++;
    else
        nfail++;
}

/* splitmix64: reproducible test data */
static uint64_t rng_state = 2024;
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }
static double rng_normal(void)
{
    double u = rng_uniform() + 1e-300, v = rng_uniform();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* One compiled model with its parameters and inputs bound to a plan. */
typedef struct Case {
    Compilation c;
    CpuPlan plan;
    CpuPrecision prec;
    void **data;     /* [nnodes]: parameter (real) and input (i32) storage */
    int ncustom;     /* grouped_mlp_gelu nodes in the graph */
} Case;

typedef struct Setup {
    const char *path, *src;   /* a model file, or source text */
    int64_t batch, seq;
    int fused;                /* run the plugin's pass */
    int mxfp8;                /* --precision mxfp8 */
    CpuPrecision prec;
    uint64_t seed;            /* parameters and inputs */
} Setup;

static int case_init(Case *k, const Setup *s)
{
    memset(k, 0, sizeof *k);
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    if (!s->fused)
        ctx.disabled[ctx.ndisabled++] = PASS_NAME;
    k->c.opts.batch = s->batch;
    k->c.opts.seq = s->seq;
    k->c.opts.has_precision = s->mxfp8;
    k->c.opts.precision = IR_PREC_MXFP8;
    const char *text = s->src;
    size_t len = s->src ? strlen(s->src) : 0;
    if (s->path) {
        if (!compilation_read(&k->c, s->path, stderr))
            return 0;
        text = k->c.text;
        len = k->c.len;
    }
    if (compilation_run(&k->c, s->path ? s->path : "case.moe", text, len, stderr, &ctx) != 0)
        return 0;
    IrGraph *g = k->c.graph;
    k->prec = s->prec;
    cpu_plan_init(&k->plan, g, s->prec);
    k->data = calloc((size_t)g->nnodes, sizeof *k->data);
    rng_state = s->seed;
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        int64_t numel = ir_numel(n);
        k->ncustom += n->op == IR_OP_CUSTOM && strcmp(n->custom->name, "grouped_mlp_gelu") == 0;
        if (n->op == IR_OP_PARAM) {
            /* drawn in double, rounded to float for both precisions: the fp32
             * and fp64 runs see the same parameters */
            void *d = malloc(cpu_elem_size(n, s->prec) * (size_t)numel);
            for (int64_t e = 0; e < numel; e++) {
                float v = (float)(n->rank == 1 ? 1.0 + 0.3 * rng_normal() : 0.4 * rng_normal());
                if (s->prec == CPU_F64)
                    ((double *)d)[e] = v;
                else
                    ((float *)d)[e] = v;
            }
            k->data[i] = d;
            cpu_plan_bind(&k->plan, n, d);
        } else if (n->op == IR_OP_INPUT) {
            /* ids index the embedding table or the logits they are targets for */
            int64_t range = 2;
            for (int j = 0; j < g->nnodes; j++) {
                IrNode *u = g->nodes[j];
                if (u->op == IR_OP_EMBEDDING && u->src[0] == n)
                    range = u->src[1]->shape[0];
                if (u->op == IR_OP_CROSS_ENTROPY && u->src[1] == n)
                    range = u->src[0]->shape[u->src[0]->rank - 1];
            }
            void *d = malloc(cpu_elem_size(n, s->prec) * (size_t)numel);
            for (int64_t e = 0; e < numel; e++) {
                if (n->dtype == IR_I32)
                    ((int32_t *)d)[e] = (int32_t)(rng_next() % (uint64_t)range);
                else if (s->prec == CPU_F64)
                    ((double *)d)[e] = (float)rng_normal();
                else
                    ((float *)d)[e] = (float)rng_normal();
            }
            k->data[i] = d;
            cpu_plan_bind(&k->plan, n, d);
        }
    }
    return 1;
}

static void case_free(Case *k)
{
    if (k->c.graph)
        for (int i = 0; i < k->c.graph->nnodes; i++)
            free(k->data[i]);
    free(k->data);
    if (k->plan.g)
        cpu_plan_free(&k->plan);
    compilation_free(&k->c);
}

static double elem(const Case *k, const IrNode *n, int64_t e)
{
    const void *p = cpu_plan_data(&k->plan, n);
    return k->prec == CPU_F64 ? ((const double *)p)[e] : ((const float *)p)[e];
}

/* ------------------------------------------------ 1. the shape rule */

static IrNode *leaf(IrGraph *g, const char *name, IrDType t, int rank, int64_t d0, int64_t d1, int64_t d2)
{
    SrcLoc loc = {1, 1, 1};
    IrNode *n = ir_node_new(g, IR_OP_INPUT, 0, NULL, "", name, loc);
    n->dtype = t;
    n->rank = rank;
    n->shape[0] = d0;
    n->shape[1] = d1;
    n->shape[2] = d2;
    return n;
}

/* Infers a grouped_mlp_gelu node over the given operand shapes; returns the
 * message it reported ("" when it succeeded) in buf. */
static const char *infer_with(const IrCustomOp *op, int64_t w_up_in, int64_t w_down_f, int64_t split_e,
                              int64_t probs_r, IrDType splits_t, char *buf, size_t size)
{
    Arena a;
    arena_init(&a);
    IrGraph *g = ir_graph_new(&a, "m", "m.moe");
    IrNode *src[5] = {
        leaf(g, "xs", IR_F32, 2, 8, 32, 0),
        leaf(g, "w_up", IR_F32, 3, 4, 64, w_up_in),
        leaf(g, "w_down", IR_F32, 3, 4, 32, w_down_f),
        leaf(g, "splits", splits_t, 1, split_e, 0, 0),
        leaf(g, "probs", IR_F32, 1, probs_r, 0, 0),
    };
    SrcLoc loc = {1, 1, 1};
    IrNode *n = ir_node_new(g, IR_OP_CUSTOM, 5, src, "", op->name, loc);
    n->custom = op;
    char *msg = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&msg, &len);
    Diag d;
    diag_init(&d, "m.moe", "", 0, f);
    int ok = ir_infer_node(n, &d);
    fclose(f);
    snprintf(buf, size, "%s", ok ? "" : msg);
    if (ok && (n->rank != 2 || n->shape[0] != 8 || n->shape[1] != 32))
        snprintf(buf, size, "wrong result shape");
    free(msg);
    arena_free(&a);
    return buf;
}

/* One bad operand at a time: the message names it, in the user's terms. */
static void shape_case(const IrCustomOp *op, int64_t w_up_in, int64_t w_down_f, int64_t split_e, int64_t probs_r,
                       IrDType splits_t, const char *want)
{
    char b[1024];
    infer_with(op, w_up_in, w_down_f, split_e, probs_r, splits_t, b, sizeof b);
    char *nl = strchr(b, '\n');
    if (nl)
        *nl = 0;  /* the message line, without the source excerpt */
    check(*want ? strstr(b, want) != NULL : !*b, "shape rule: %s", *b ? b : "[8, 32] from good operands");
}

static void test_shape_rule(const IrCustomOp *op)
{
    shape_case(op, 32, 64, 4, 8, IR_I32, "");
    shape_case(op, 30, 64, 4, 8, IR_I32,
               "grouped_mlp_gelu: up projection `w_up` is [4, 64, 30] but the routed rows `xs` [8, 32] have 32 "
               "features: it must be [experts, ffn, 32]");
    shape_case(op, 32, 48, 4, 8, IR_I32,
               "grouped_mlp_gelu: down projection `w_down` is [4, 32, 48] but [4, 32, 64] = [experts, hidden, ffn] "
               "is needed to follow the up projection `w_up` [4, 64, 32]");
    shape_case(op, 32, 64, 3, 8, IR_I32, "split sizes `splits` count 3 experts but the projections hold 4");
    shape_case(op, 32, 64, 4, 8, IR_F32, "split sizes `splits` is f32; i32 is needed");
    shape_case(op, 32, 64, 4, 6, IR_I32, "routing probabilities `probs` [6] do not match the 8 routed rows of `xs`");
}

/* ------------------------------------------- 2. fused against unfused */

/* max |a - b| / max |b| over a tensor (relative to its largest magnitude,
 * so that elements near zero do not dominate), or relative L2. */
static double rel_err(const Case *a, const IrNode *na, const Case *b, const IrNode *nb, int l2)
{
    double num = 0, den = 0;
    for (int64_t e = 0; e < ir_numel(na); e++) {
        double x = elem(a, na, e), y = elem(b, nb, e);
        if (l2) {
            num += (x - y) * (x - y);
            den += y * y;
        } else {
            num = fmax(num, fabs(x - y));
            den = fmax(den, fabs(y));
        }
    }
    if (l2) {
        num = sqrt(num);
        den = sqrt(den);
    }
    return num / (den > 0 ? den : 1);
}

static void fused_vs_unfused(const char *what, CpuPrecision prec, int mxfp8, double tol, int l2)
{
    Setup s = {GELU_MODEL, NULL, 2, 16, 1, mxfp8, prec, 77};
    Case f, u;
    int ok = case_init(&f, &s);
    s.fused = 0;
    ok = case_init(&u, &s) && ok;
    if (!ok) {
        check(0, "%s: compiles", what);
        case_free(&f);
        case_free(&u);
        return;
    }
    cpu_plan_run(&f.plan);
    cpu_plan_run(&u.plan);
    IrGraph *gf = f.c.graph, *gu = u.c.graph;
    double lf = cpu_plan_scalar(&f.plan, gf->loss), lu = cpu_plan_scalar(&u.plan, gu->loss);
    double worst = fabs(lf - lu) / fabs(lu);
    const char *worst_name = "loss";
    int same_params = gf->nparams == gu->nparams;
    for (int p = 0; same_params && p < gf->nparams; p++) {
        same_params = strcmp(gf->params[p]->name, gu->params[p]->name) == 0;
        double e = rel_err(&f, gf->grads[p], &u, gu->grads[p], l2);
        if (e > worst || isnan(e)) {
            worst = e;
            worst_name = gf->params[p]->name;
        }
    }
    check(f.ncustom == 2 && u.ncustom == 0 && same_params && worst <= tol,
          "fused vs unfused %-14s %d vs %d grouped_mlp_gelu nodes, loss %.15g vs %.15g, %d gradients, worst %s "
          "%.2e (%s; tolerance %.0e)", what, f.ncustom, u.ncustom, lf, lu, gf->nparams,
          l2 ? "relative L2" : "relative", worst, worst_name, tol);
    case_free(&f);
    case_free(&u);
}

/* --------------------------------------- 3. against finite differences */

static double loss_at(Case *k)
{
    IrGraph *g = k->c.graph;
    cpu_plan_run_range(&k->plan, 0, g->loss->id + 1);
    return cpu_plan_scalar(&k->plan, g->loss);
}

static void gradcheck(const char *what, const Setup *s, int samples, int want_custom, int want_bwd_nodes)
{
    Case k;
    if (!case_init(&k, s)) {
        check(0, "%s: compiles", what);
        case_free(&k);
        return;
    }
    IrGraph *g = k.c.graph;
    /* the nodes the custom op's gradient rule built (named <node>.<op>) */
    int bwd_nodes = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int j = 0; j < g->nnodes; j++) {
            const IrNode *c = g->nodes[j];
            size_t len = strlen(c->name);
            if (c->op == IR_OP_CUSTOM && strncmp(g->nodes[i]->name, c->name, len) == 0 &&
                g->nodes[i]->name[len] == '.')
                bwd_nodes++;
        }
    cpu_plan_run(&k.plan);
    double **grads = calloc((size_t)g->nparams, sizeof *grads);
    for (int p = 0; p < g->nparams; p++) {
        size_t bytes = (size_t)ir_numel(g->params[p]) * sizeof(double);
        grads[p] = malloc(bytes);
        memcpy(grads[p], cpu_plan_data(&k.plan, g->grads[p]), bytes);  /* FD runs reuse the buffers */
    }
    const double h = 1e-4;
    int bad = 0, checked = 0;
    double worst = 0;
    const char *worst_name = "";
    for (int p = 0; p < g->nparams; p++) {
        IrNode *pn = g->params[p];
        double *w = k.data[pn->id];
        int64_t numel = ir_numel(pn);
        for (int t = 0; t < samples && t < numel; t++) {
            int64_t e = samples >= numel ? t : (int64_t)(rng_next() % (uint64_t)numel);
            double saved = w[e], l[4];
            static const double off[4] = {1, -1, 2, -2};
            for (int q = 0; q < 4; q++) {
                w[e] = saved + off[q] * h;
                l[q] = loss_at(&k);
            }
            w[e] = saved;
            double num = (8 * (l[0] - l[1]) - (l[2] - l[3])) / (12 * h), ana = grads[p][e];
            double err = fabs(num - ana) / fmax(fmax(fabs(num), fabs(ana)), 1e-3);
            checked++;
            if (err > worst) {
                worst = err;
                worst_name = pn->name;
            }
            if (err > 1e-6 && bad++ < 5)
                fprintf(stderr, "%s: d loss / d %s[%lld]: analytic %.12g, numeric %.12g (rel err %.3g)\n", what,
                        pn->name, (long long)e, ana, num, err);
        }
    }
    check(bad == 0 && checked > 0 && k.ncustom == want_custom && bwd_nodes == want_bwd_nodes,
          "gradcheck %-18s %d grouped_mlp_gelu, %d nodes from its gradient rule, %d params, %d elements, worst rel "
          "err %.2e (%s)", what, k.ncustom, bwd_nodes, g->nparams, checked, worst, worst_name);
    for (int p = 0; p < g->nparams; p++)
        free(grads[p]);
    free(grads);
    case_free(&k);
}

static const char *const expert_layer =
    "model m { input t : i32[B]  param x : [B, 6]  param router : [3, 6]\n"
    "  param w_up : [3, 8, 6]  param w_down : [3, 6, 8]  param w : [5, 6]\n"
    "  r = route_topk(linear(x, router), k = 2)\n"
    "  a = row_scale(gelu(grouped_linear(dispatch(x, r), w_up, r.splits)), r.probs)\n"
    "  loss = cross_entropy(linear(x + combine(grouped_linear(a, w_down, r.splits), r), w), t) }\n"
    "train { batch 5 }\n";

/* the routed rows come from an input: no gradient for xs is built */
static const char *const expert_layer_input =
    "model m { input t : i32[B]  input x : f32[B, 6]  param router : [3, 6]\n"
    "  param w_up : [3, 8, 6]  param w_down : [3, 6, 8]  param w : [5, 6]\n"
    "  r = route_topk(linear(x, router), k = 2)\n"
    "  a = row_scale(gelu(grouped_linear(dispatch(x, r), w_up, r.splits)), r.probs)\n"
    "  loss = cross_entropy(linear(combine(grouped_linear(a, w_down, r.splits), r), w), t) }\n"
    "train { batch 5 }\n";

#define CHECK(cond, ...) check((cond) != 0, __VA_ARGS__)
#include "ir_read_check.h"

int main(void)
{
    /* the plugin of this build: BUILD/plugins/, beside this executable */
    char exe[PATH_MAX], path[PATH_MAX + 64], err[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        die("cannot read /proc/self/exe");
    exe[n] = 0;
    *strrchr(exe, '/') = 0;
    snprintf(path, sizeof path, "%s/plugins/fuse_grouped_gelu_mlp.so", exe);
    if (!pass_load_plugin(path, err, sizeof err)) {
        fprintf(stderr, "test_plugin_gelu_mlp: %s (make builds the plugin)\n", err);
        return 1;
    }
    const Pass *p = pass_find(PASS_NAME);
    int at = -1;
    for (int i = 0; i < pass_count(); i++)
        if (pass_get(i) == p)
            at = i;
    check(p && at > 0 && strcmp(pass_get(at - 1)->name, "fuse-grouped-mlp") == 0,
          "the plugin registers %s right after fuse-grouped-mlp", PASS_NAME);

    /* the descriptor, as the pass puts it on the nodes it builds */
    Setup s = {NULL, expert_layer, 0, 0, 1, 0, CPU_F64, 1};
    Case k;
    const IrCustomOp *op = NULL;
    if (case_init(&k, &s))
        for (int i = 0; i < k.c.graph->nnodes; i++)
            if (k.c.graph->nodes[i]->op == IR_OP_CUSTOM)
                op = k.c.graph->nodes[i]->custom;
    case_free(&k);
    check(op && strcmp(op->name, "grouped_mlp_gelu") == 0 && op->arity == 5, "the pass builds grouped_mlp_gelu nodes");
    if (op)
        test_shape_rule(op);

    fused_vs_unfused("fp64", CPU_F64, 0, 1e-12, 0);
    fused_vs_unfused("fp64 mxfp8", CPU_F64, 1, 1e-12, 0);
    fused_vs_unfused("fp32", CPU_F32, 0, 1e-5, 1);

    gradcheck("expert_layer", &s, 40, 1, 10);
    Setup si = {NULL, expert_layer_input, 0, 0, 1, 0, CPU_F64, 2};
    gradcheck("expert_layer_input", &si, 40, 1, 9);
    Setup sm = {GELU_MODEL, NULL, 2, 6, 1, 0, CPU_F64, 3};
    gradcheck("mixtral_tiny_gelu", &sm, 12, 2, 20);

    /* the IR text of the fused model reads back, the custom op found by name */
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    check_read_back_model(GELU_MODEL, &ctx, 100);

    printf("test_plugin_gelu_mlp: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
