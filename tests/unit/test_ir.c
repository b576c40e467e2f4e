/* test_ir.c - unit tests of the IR: op tables, names, shape inference and
 * its messages, the verifier (each invariant broken on purpose), DCE,
 * printers (stable text, JSON that parses back), and diagnostics. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../driver/compile.h"
#include "../../ir/ir.h"
#include "../../util/util.h"
#include "check.h"


/* A Diag writing into a memory buffer, so messages can be inspected. */
typedef struct Capture {
    char *buf;
    size_t len;
    FILE *f;
    Diag d;
} Capture;

static void capture_open(Capture *c, const char *text)
{
    c->buf = NULL;
    c->len = 0;
    c->f = open_memstream(&c->buf, &c->len);
    diag_init(&c->d, "t.moe", text, text ? strlen(text) : 0, c->f);
}

static const char *capture_text(Capture *c)
{
    fflush(c->f);
    return c->buf ? c->buf : "";
}

static void capture_close(Capture *c)
{
    fclose(c->f);
    free(c->buf);
}

static IrNode *leaf(IrGraph *g, IrOp op, const char *name, IrDType t, int rank, ...)
{
    SrcLoc loc = {1, 1, 1};
    IrNode *n = ir_node_new(g, op, 0, NULL, "", name, loc);
    n->dtype = t;
    n->rank = rank;
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        n->shape[i] = va_arg(ap, int64_t);
    va_end(ap);
    if (op == IR_OP_PARAM)
        ir_set_attr_e(n, IR_ATTR_INIT, IR_INIT_ONES);
    return n;
}

static void test_tables(void)
{
    for (int i = 0; i < IR_OP_COUNT; i++) {
        CHECK(ir_op_info[i].name != NULL, "op %d has no name", i);
        CHECK(ir_op_lookup(ir_op_info[i].name) == i, "lookup of %s", ir_op_info[i].name);
        CHECK((ir_op_info[i].arity >= 0 || i == IR_OP_CUSTOM) && ir_op_info[i].arity <= IR_MAX_SRC, "arity of %s",
              ir_op_info[i].name);
        CHECK(((ir_op_info[i].flags & OPF_LEAF) != 0) == (ir_op_info[i].arity == 0), "leaf flag of %s",
              ir_op_info[i].name);
        CHECK((ir_op_info[i].required_attrs & ir_op_info[i].optional_attrs) == 0, "attr sets of %s overlap",
              ir_op_info[i].name);
    }
    for (int i = 0; i < IR_ATTR_COUNT; i++)
        CHECK(ir_attr_lookup(ir_attr_name[i]) == i, "attr lookup %s", ir_attr_name[i]);
    CHECK(ir_op_lookup("no_such_op") == -1, "unknown op");
    for (int i = 0; i < IR_DTYPE_COUNT; i++)
        CHECK(ir_dtype_lookup(ir_dtype_name[i]) == i, "dtype %s", ir_dtype_name[i]);
}

static void test_fmt_double(void)
{
    static const double v[] = {0.1, 1e-5, 3e-4, 1.0 / 3.0, 1e300, -2.5e-310, 0.0, 123456789.123456789, 1e6};
    char b[32];
    for (int i = 0; i < ARRAY_LEN(v); i++)
        CHECK(strtod(fmt_double(b, v[i]), NULL) == v[i], "round trip of %.17g gave %s", v[i], b);
    srand(7);
    for (int i = 0; i < 10000; i++) {
        double d = (double)rand() / RAND_MAX * pow(10, rand() % 40 - 20);
        if (strtod(fmt_double(b, d), NULL) != d) {
            CHECK(0, "round trip of %.17g gave %s", d, b);
            break;
        }
    }
    CHECK(strcmp(fmt_double(b, 1e-5), "1e-05") == 0, "shortest form, got %s", b);
    CHECK(strcmp(fmt_double(b, INFINITY), "inf") == 0, "inf, got %s", b);
}

static void test_unique_names(void)
{
    Arena a;
    arena_init(&a);
    IrGraph *g = ir_graph_new(&a, "m", "m.moe");
    IrNode *x = leaf(g, IR_OP_INPUT, "x", IR_F32, 2, (int64_t)4, (int64_t)8);
    SrcLoc loc = {1, 1, 1};
    IrNode *s1 = ir_node_new(g, IR_OP_SILU, 1, &x, "layers.0", "act", loc);
    IrNode *s2 = ir_node_new(g, IR_OP_SILU, 1, &x, "layers.0", "act", loc);
    IrNode *s3 = ir_node_new(g, IR_OP_SILU, 1, &x, "layers.0", "act", loc);
    CHECK(strcmp(s1->name, "layers.0.act") == 0, "got %s", s1->name);
    CHECK(strcmp(s2->name, "layers.0.act.1") == 0, "got %s", s2->name);
    CHECK(strcmp(s3->name, "layers.0.act.2") == 0, "got %s", s3->name);
    CHECK(strcmp(s3->label, "act") == 0, "label %s", s3->label);
    arena_free(&a);
}

static void test_shape_errors(void)
{
    Arena a;
    arena_init(&a);
    IrGraph *g = ir_graph_new(&a, "m", "m.moe");
    const char *src = "y = grouped_linear(a, w_down, s)\n";
    Capture c;
    capture_open(&c, src);
    IrNode *x = leaf(g, IR_OP_INPUT, "a", IR_F32, 2, (int64_t)16, (int64_t)128);
    IrNode *w = leaf(g, IR_OP_PARAM, "w_down", IR_F32, 3, (int64_t)4, (int64_t)128, (int64_t)64);
    IrNode *s = leaf(g, IR_OP_INPUT, "s", IR_I32, 1, (int64_t)4);
    IrNode *srcs[3] = {x, w, s};
    SrcLoc loc = {1, 5, 14};
    IrNode *n = ir_node_new(g, IR_OP_GROUPED_LINEAR, 3, srcs, "", "y", loc);
    n->src_loc[1].line = 1;
    n->src_loc[1].col = 23;
    n->src_loc[1].len = 6;
    CHECK(!ir_infer_node(n, &c.d), "mismatch must fail");
    CHECK(n->rank == -1, "a failed node is poisoned");
    const char *msg = capture_text(&c);
    CHECK(strstr(msg, "t.moe:1:23: error: grouped_linear: weight `w_down` is [4, 128, 64] but [4, 64, 128] is needed")
              != NULL, "message was: %s", msg);
    CHECK(strstr(msg, "^~~~~~") != NULL, "caret under w_down: %s", msg);
    /* a user of a poisoned node stays quiet */
    int before = c.d.nerrors;
    IrNode *u = ir_node_new(g, IR_OP_SILU, 1, &n, "", "u", loc);
    CHECK(!ir_infer_node(u, &c.d) && c.d.nerrors == before, "no cascade");
    capture_close(&c);

    /* the right shape passes */
    IrNode *w2 = leaf(g, IR_OP_PARAM, "w_ok", IR_F32, 3, (int64_t)4, (int64_t)64, (int64_t)128);
    srcs[1] = w2;
    IrNode *ok = ir_node_new(g, IR_OP_GROUPED_LINEAR, 3, srcs, "", "ok", loc);
    CHECK(ir_infer_node(ok, NULL) && ok->rank == 2 && ok->shape[0] == 16 && ok->shape[1] == 64, "ok shape");
    arena_free(&a);
}

/* Builds x -> linear -> cross_entropy, valid. */
static IrGraph *small_graph(Arena *a)
{
    IrGraph *g = ir_graph_new(a, "m", "m.moe");
    SrcLoc loc = {1, 1, 1};
    IrNode *x = leaf(g, IR_OP_INPUT, "x", IR_F32, 2, (int64_t)4, (int64_t)8);
    IrNode *t = leaf(g, IR_OP_INPUT, "t", IR_I32, 1, (int64_t)4);
    IrNode *w = leaf(g, IR_OP_PARAM, "w", IR_F32, 2, (int64_t)5, (int64_t)8);
    IrNode *src[2] = {x, w};
    IrNode *y = ir_node_new(g, IR_OP_LINEAR, 2, src, "", "y", loc);
    ir_infer_node(y, NULL);
    IrNode *dead = ir_node_new(g, IR_OP_SILU, 1, &y, "", "dead", loc);
    ir_infer_node(dead, NULL);
    src[0] = y;
    src[1] = t;
    IrNode *l = ir_node_new(g, IR_OP_CROSS_ENTROPY, 2, src, "", "loss", loc);
    ir_infer_node(l, NULL);
    l->is_output = 1;
    g->loss = l;
    return g;
}

static int verify_quiet(const IrGraph *g)
{
    FILE *f = fopen("/dev/null", "w");
    int n = ir_verify(g, f);
    fclose(f);
    return n;
}

static void test_verifier(void)
{
    Arena a;
    arena_init(&a);
    IrGraph *g = small_graph(&a);
    CHECK(verify_quiet(g) == 0, "valid graph");

    IrNode *y = g->nodes[3];
    y->shape[1] = 6;
    CHECK(verify_quiet(g) > 0, "wrong recorded shape is caught");
    y->shape[1] = 5;

    IrNode *tmp = g->nodes[3];
    g->nodes[3] = g->nodes[4];
    g->nodes[4] = tmp;
    ir_graph_renumber(g);
    CHECK(verify_quiet(g) > 0, "a source after its user is caught");
    g->nodes[4] = g->nodes[3];
    g->nodes[3] = tmp;
    ir_graph_renumber(g);
    CHECK(verify_quiet(g) == 0, "restored");

    g->nodes[2]->attr_set = 0;
    CHECK(verify_quiet(g) > 0, "missing required attribute is caught");
    ir_set_attr_e(g->nodes[2], IR_ATTR_INIT, IR_INIT_ONES);
    ir_set_attr_i(g->nodes[3], IR_ATTR_K, 2);
    CHECK(verify_quiet(g) > 0, "foreign attribute is caught");
    g->nodes[3]->attr_set = 0;

    const char *saved = g->nodes[1]->name;
    g->nodes[1]->name = g->nodes[0]->name;
    CHECK(verify_quiet(g) > 0, "duplicate name is caught");
    g->nodes[1]->name = saved;

    g->nodes[3]->nsrc = 1;
    CHECK(verify_quiet(g) > 0, "wrong arity is caught");
    g->nodes[3]->nsrc = 2;
    CHECK(verify_quiet(g) == 0, "restored again");
    arena_free(&a);
}

static void test_dce(void)
{
    Arena a;
    arena_init(&a);
    IrGraph *g = small_graph(&a);
    Diag d;
    diag_init(&d, "m.moe", "", 0, stderr);
    PassCtx ctx;
    pass_ctx_init(&ctx, &d);
    int before = g->nnodes;
    CHECK(pass_dce(g, &ctx) == 0, "dce runs");
    CHECK(g->nnodes == before - 1 && ctx.counters[0] == 1, "removed %ld, %d left", ctx.counters[0], g->nnodes);
    for (int i = 0; i < g->nnodes; i++)
        CHECK(strcmp(g->nodes[i]->name, "dead") != 0, "dead node gone");
    CHECK(verify_quiet(g) == 0, "valid after dce");
    arena_free(&a);
}

static char *dump_text(const IrGraph *g)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ir_print_text(g, f);
    fclose(f);
    return buf;
}

static void test_model_roundtrip(void)
{
    Compilation c1 = {0}, c2 = {0};
    FILE *devnull = fopen("/dev/null", "w");
    CHECK(compilation_read(&c1, "models/mixtral_tiny.moe", stderr), "read the model");
    CHECK(compilation_read(&c2, "models/mixtral_tiny.moe", stderr), "read the model again");
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    ctx.stop_after = PASS_FRONT_END_LAST;  /* what `moec dump` prints */
    CHECK(compilation_run(&c1, "models/mixtral_tiny.moe", c1.text, c1.len, devnull, &ctx) == 0, "compiles");
    pass_ctx_init(&ctx, NULL);
    ctx.stop_after = PASS_FRONT_END_LAST;
    CHECK(compilation_run(&c2, "models/mixtral_tiny.moe", c2.text, c2.len, devnull, &ctx) == 0, "compiles again");
    if (c1.graph && c2.graph) {
        char *t1 = dump_text(c1.graph), *t2 = dump_text(c2.graph);
        CHECK(strcmp(t1, t2) == 0, "text dumps of two compilations are identical");
        CHECK(strstr(t1, "0x") == NULL, "no pointers in the dump");
        free(t1);
        free(t2);

        cJSON *j = ir_to_json(c1.graph);
        char *s = cJSON_PrintUnformatted(j);
        cJSON *back = cJSON_Parse(s);
        CHECK(back != NULL, "JSON parses back");
        cJSON *nodes = cJSON_GetObjectItem(back, "nodes");
        CHECK(cJSON_GetArraySize(nodes) == c1.graph->nnodes, "node count");
        CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(back, "layers")) == 2, "two layers");
        int gl = 0;
        cJSON *n;
        cJSON_ArrayForEach(n, nodes)
            if (strcmp(cJSON_GetObjectItem(n, "op")->valuestring, "grouped_linear") == 0)
                gl++;
        CHECK(gl == 4, "grouped_linear count %d", gl);
        cJSON *tr = cJSON_GetObjectItem(back, "train");
        CHECK(cJSON_GetObjectItem(cJSON_GetObjectItem(tr, "optimizer"), "lr")->valuedouble == 3e-3, "lr");
        cJSON_Delete(back);
        cJSON_free(s);
        cJSON_Delete(j);
        CHECK(verify_quiet(c1.graph) == 0, "verifier clean");
    }
    compilation_free(&c1);
    compilation_free(&c2);
    fclose(devnull);
}

/* The acceptance check: the Mixtral-8x7B JSON dump is valid JSON
 * holding 32 layers, each with grouped_linear [8, 28672, 4096],
 * scaled_swiglu and grouped_linear [8, 4096, 14336]. */
static int shape_is(cJSON *shape, int64_t a, int64_t b, int64_t c)
{
    return cJSON_GetArraySize(shape) == 3 && cJSON_GetArrayItem(shape, 0)->valuedouble == (double)a &&
           cJSON_GetArrayItem(shape, 1)->valuedouble == (double)b &&
           cJSON_GetArrayItem(shape, 2)->valuedouble == (double)c;
}

static void test_mixtral_json(void)
{
    Compilation c = {0};
    CHECK(compilation_read(&c, "models/mixtral_8x7b.moe", stderr), "read mixtral_8x7b");
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    ctx.stop_after = PASS_FRONT_END_LAST;  /* what `moec dump --format json` prints */
    CHECK(compilation_run(&c, "models/mixtral_8x7b.moe", c.text, c.len, stderr, &ctx) == 0, "compiles");
    if (!c.graph) {
        compilation_free(&c);
        return;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ir_print_json(c.graph, f);
    fclose(f);
    cJSON *root = cJSON_Parse(buf);
    CHECK(root != NULL, "valid JSON");
    cJSON *nodes = cJSON_GetObjectItem(root, "nodes"), *layers = cJSON_GetObjectItem(root, "layers");
    CHECK(cJSON_GetArraySize(layers) == 32, "32 layers, got %d", cJSON_GetArraySize(layers));
    /* index nodes by name for the weight lookups */
    int good_layers = 0;
    cJSON *layer;
    cJSON_ArrayForEach(layer, layers) {
        int gate_up = 0, swiglu = 0, down = 0;
        cJSON *name;
        cJSON_ArrayForEach(name, cJSON_GetObjectItem(layer, "nodes")) {
            cJSON *n;
            cJSON_ArrayForEach(n, nodes) {
                if (strcmp(cJSON_GetObjectItem(n, "name")->valuestring, name->valuestring) != 0)
                    continue;
                const char *op = cJSON_GetObjectItem(n, "op")->valuestring;
                if (strcmp(op, "scaled_swiglu") == 0)
                    swiglu++;
                if (strcmp(op, "grouped_linear") == 0) {
                    const char *w = cJSON_GetArrayItem(cJSON_GetObjectItem(n, "inputs"), 1)->valuestring;
                    cJSON *wn;
                    cJSON_ArrayForEach(wn, nodes)
                        if (strcmp(cJSON_GetObjectItem(wn, "name")->valuestring, w) == 0) {
                            cJSON *sh = cJSON_GetObjectItem(wn, "shape");
                            gate_up += shape_is(sh, 8, 28672, 4096);
                            down += shape_is(sh, 8, 4096, 14336);
                        }
                }
                break;
            }
        }
        good_layers += gate_up == 1 && swiglu == 1 && down == 1;
    }
    CHECK(good_layers == 32, "layers with the expert chain: %d", good_layers);
    cJSON_Delete(root);
    free(buf);
    compilation_free(&c);
}

static void test_diag_format(void)
{
    Capture c;
    const char *src = "model m {\n\tx = foo(\x01\x02, y)\n}\n";
    capture_open(&c, src);
    SrcLoc loc = {2, 6, 3};
    diag_error(&c.d, loc, "unknown op `%s`", "foo");
    diag_error(&c.d, loc, "unknown op `%s`", "foo");  /* the same message again is not repeated */
    const char *out = capture_text(&c);
    CHECK(strstr(out, "t.moe:2:6: error: unknown op `foo`\n") == out, "header: %s", out);
    CHECK(strstr(out, "    2 | \tx = foo(??, y)\n") != NULL, "sanitised source line: %s", out);
    CHECK(strstr(out, "      | \t    ^~~\n") != NULL, "caret keeps the tab: %s", out);
    CHECK(strstr(out + 10, "t.moe:2:6") == NULL, "duplicate suppressed");
    CHECK(c.d.nerrors == 2, "still counted");
    capture_close(&c);
}

#include "ir_read_check.h"

/* The text dump reads back into the same graph (ir_read_text), fast enough
 * for the training binary's start-up (ASan builds get more time). */
static void test_read_back(void)
{
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    check_read_back_model("models/mixtral_tiny.moe", &ctx, 100);
    check_read_back_model("models/variants/mixtral_tiny_probe.moe", &ctx, 100);
    check_read_back_model("models/mixtral_8x7b.moe", &ctx, 100);
}

int main(void)
{
    test_tables();
    test_fmt_double();
    test_unique_names();
    test_shape_errors();
    test_verifier();
    test_dce();
    test_model_roundtrip();
    test_diag_format();
    test_mixtral_json();
    test_read_back();
    printf("test_ir: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
