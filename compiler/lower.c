/* lower.c - gives a parsed model its meaning and builds the IR graph.
 *
 * Lowering walks the statements in order with an environment of names:
 *
 *   const   compile-time numbers, evaluated at once (int64 with overflow
 *           checks, or double); `B` and `S` are predefined from the train
 *           section's batch and seq;
 *   input   graph inputs (top level only);
 *   param   parameters; one per declaration *per instance*, so a param in a
 *           block called from `repeat layers` becomes layers.0.decoder.w,
 *           layers.1.decoder.w, ...;
 *   x = e   tensor variables; assigning again rebinds (x = decoder(x));
 *   block   inlined at every call: its body runs in a fresh scope that sees
 *           the model's constants, inputs, params and blocks, but not its
 *           tensor variables (all data a block uses comes in as arguments);
 *   repeat  unrolled; each iteration gets its own scope name (layers.3).
 *
 * Calls either inline a block or lower a built-in op. Composite built-ins
 * (attention, route_topk, dispatch, combine, moe) expand into several IR
 * nodes here, so the IR itself stays small and explicit. Every node's shape
 * is inferred as soon as it is created, so a mismatch is reported at the
 * expression the user wrote. A node whose inference failed is "poisoned"
 * (rank -1) and everything built on it stays quiet, which keeps one mistake
 * from producing a cascade of errors. */
#include "lower.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

/* ---------------------------------------------------------------- values */

typedef enum ValKind {
    V_NONE,      /* no value, or the result of an error already reported */
    V_INT,
    V_FLOAT,
    V_BOOL,
    V_STRING,
    V_TENSOR,
    V_ROUTING,
} ValKind;

typedef struct Routing {
    IrNode *logits;
    const char *layer;  /* the repeat iteration it was made in */
    int64_t experts, k;
    const char *scope, *label;
    SrcLoc loc;
    /* created on first use */
    IrNode *topk, *weights, *plan, *splits, *probs, *aux;
} Routing;

typedef struct Value {
    ValKind kind;
    int64_t i;
    double f;
    const char *s;
    IrNode *node;
    Routing *r;
} Value;

static const Value NONE = {V_NONE, 0, 0, NULL, NULL, NULL};

static const char *kind_name(ValKind k)
{
    switch (k) {
    case V_NONE: return "nothing";
    case V_INT: return "an integer";
    case V_FLOAT: return "a floating-point number";  /* "an integer, not a number" read as nonsense */
    case V_BOOL: return "a boolean";
    case V_STRING: return "a string";
    case V_TENSOR: return "a tensor";
    case V_ROUTING: return "a routing";
    }
    return "?";
}

/* ------------------------------------------------------------ environment */

typedef enum BindKind { B_CONST, B_INPUT, B_PARAM, B_VAR, B_BLOCK } BindKind;

typedef struct Binding {
    const char *name;
    BindKind kind;
    Value v;
    const AstStmt *block;
    SrcLoc loc;
    struct Binding *next;
} Binding;

typedef struct Env {
    Binding *head;
    struct Env *parent;
    int block_boundary;  /* lookups crossing this see no B_VAR bindings */
    /* a hash index of the bindings once there are many (200,000 `const` lines were quadratic) */
    Binding **tab;
    int cap, n;
} Env;

typedef struct Lower {
    Arena *arena;
    Diag *diag;
    IrGraph *g;
    const char *scope;         /* current hierarchical scope, "" at top */
    const char *layer;         /* outermost repeat iteration, or NULL */
    const AstStmt *stack[64];  /* blocks being inlined, for recursion checks */
    int depth;
    NameSet *scopes;           /* block-call scopes used so far */
    Value ret;                 /* a block's return value */
    int returned;
    int block_nodes;           /* nodes created, to cap runaway unrolling */
    int eval_depth;            /* eval() recursion, to cap stack use (AST_MAX_DEPTH) */
    int too_deep;              /* that cap was reported for the current statement */
    PtrVec routings;           /* every route_topk, for the train section's aux_loss */
} Lower;

enum { MAX_NODES = 4000000, MAX_BLOCK_DEPTH = 64 };

static Binding *env_find_local(Env *e, const char *name)
{
    if (e->tab) {
        for (uint64_t i = hash64(name, strlen(name)) & (uint64_t)(e->cap - 1);; i = (i + 1) & (uint64_t)(e->cap - 1)) {
            if (!e->tab[i])
                return NULL;
            if (strcmp(e->tab[i]->name, name) == 0)
                return e->tab[i];
        }
    }
    for (Binding *b = e->head; b; b = b->next)
        if (strcmp(b->name, name) == 0)
            return b;
    return NULL;
}

static void env_index(Lower *L, Env *e, Binding *b)
{
    if (++e->n < 32)
        return;
    if (e->n * 2 > e->cap) {
        /* a table of at least twice the bindings (power of two), rebuilt from the list */
        e->cap = e->cap ? e->cap * 2 : 128;
        e->tab = arena_alloc(L->arena, sizeof *e->tab * (size_t)e->cap);
        memset(e->tab, 0, sizeof *e->tab * (size_t)e->cap);
        for (Binding *x = e->head; x; x = x->next) {
            uint64_t i = hash64(x->name, strlen(x->name)) & (uint64_t)(e->cap - 1);
            while (e->tab[i])
                i = (i + 1) & (uint64_t)(e->cap - 1);
            e->tab[i] = x;
        }
        return;
    }
    uint64_t i = hash64(b->name, strlen(b->name)) & (uint64_t)(e->cap - 1);
    while (e->tab[i])
        i = (i + 1) & (uint64_t)(e->cap - 1);
    e->tab[i] = b;
}

static Binding *env_lookup(Env *e, const char *name)
{
    int crossed = 0;
    for (; e; e = e->parent) {
        Binding *b = env_find_local(e, name);
        if (b && !(crossed && b->kind == B_VAR))
            return b;
        if (e->block_boundary)
            crossed = 1;
    }
    return NULL;
}

static const char *bind_kind_name(BindKind k)
{
    switch (k) {
    case B_CONST: return "constant";
    case B_INPUT: return "input";
    case B_PARAM: return "param";
    case B_VAR: return "variable";
    case B_BLOCK: return "block";
    }
    return "?";
}

/* The note that follows an error about an existing binding. B and S have
 * no source line, so "declared here" would point nowhere: say what they are. */
static void note_binding(Lower *L, const Binding *b, const char *what)
{
    if (b->loc.line == 0)
        diag_note(L->diag, b->loc, "`%s` is predefined as the train section's %s", b->name,
                  strcmp(b->name, "B") == 0 ? "batch" : "seq");
    else
        diag_note(L->diag, b->loc, "`%s` %s", b->name, what);
}

static Binding *env_add(Lower *L, Env *e, const char *name, BindKind kind, Value v, SrcLoc loc)
{
    Binding *prev = env_find_local(e, name);
    if (prev) {
        diag_error(L->diag, loc, "duplicate definition of `%s`", name);
        note_binding(L, prev, arena_printf(L->arena, "was first defined here as a %s", bind_kind_name(prev->kind)));
        return prev;
    }
    Binding *b = arena_alloc(L->arena, sizeof *b);
    b->name = name;
    b->kind = kind;
    b->v = v;
    b->loc = loc;
    b->next = e->head;
    e->head = b;
    env_index(L, e, b);
    return b;
}

/* ----------------------------------------------------------- built-ins */

typedef struct CallArgs CallArgs;
typedef Value (*LowerFn)(Lower *L, const AstExpr *call, CallArgs *a, const char *hint);

typedef struct KwSpec {
    const char *name;
    char kind;         /* 'i' integer, 'f' number, 'b' boolean */
    const char *def;   /* default as text, NULL when required */
} KwSpec;

enum { MAX_POS = 5, MAX_KW = 5 };

typedef struct Builtin {
    const char *name;
    const char *pos[MAX_POS];   /* positional arguments; a leading '@' means routing */
    KwSpec kw[MAX_KW];
    LowerFn fn;
    IrOp op;                    /* for fn == lower_direct */
    const char *summary;
} Builtin;

struct CallArgs {
    const Builtin *b;
    int npos;
    Value pos[MAX_POS];
    SrcLoc pos_loc[MAX_POS];
    int kw_given[MAX_KW];
    Value kw[MAX_KW];
    SrcLoc kw_loc[MAX_KW];
};

static int64_t kw_i(const CallArgs *a, int i) { return a->kw[i].kind == V_INT || a->kw[i].kind == V_BOOL ? a->kw[i].i : (int64_t)a->kw[i].f; }
static double kw_f(const CallArgs *a, int i) { return a->kw[i].kind == V_FLOAT ? a->kw[i].f : (double)a->kw[i].i; }

static Value eval(Lower *L, Env *env, const AstExpr *e, const char *hint);
static double as_f(Value v);

static Value tensor_val(IrNode *n)
{
    Value v = NONE;
    v.kind = V_TENSOR;
    v.node = n;
    return v;
}

/* Creates a node; the caller sets attributes, then calls node_done(). */
static IrNode *node_begin(Lower *L, IrOp op, int nsrc, IrNode *const *src, const SrcLoc *src_loc,
                          const char *scope, const char *label, SrcLoc loc)
{
    IrNode *n = ir_node_new(L->g, op, nsrc, src, scope, label, loc);
    for (int i = 0; i < nsrc; i++)
        n->src_loc[i] = src_loc ? src_loc[i] : loc;
    n->layer = L->layer;
    L->block_nodes++;
    return n;
}

static Value node_done(Lower *L, IrNode *n)
{
    ir_infer_node(n, L->diag);
    return tensor_val(n);
}

static Value lower_direct(Lower *L, const AstExpr *call, CallArgs *a, const char *hint)
{
    IrNode *src[MAX_POS] = {0};
    for (int i = 0; i < a->npos; i++)
        src[i] = a->pos[i].node;
    IrNode *n = node_begin(L, a->b->op, a->npos, src, a->pos_loc, L->scope, hint, call->loc);
    for (int i = 0; i < MAX_KW && a->b->kw[i].name; i++) {
        int key = ir_attr_lookup(a->b->kw[i].name);
        if (key < 0)
            die("builtin %s: keyword %s is no IR attribute", a->b->name, a->b->kw[i].name);
        switch (ir_attr_kind[key]) {
        case IR_AK_I: case IR_AK_B: ir_set_attr_i(n, (IrAttrKey)key, kw_i(a, i)); break;
        case IR_AK_F: ir_set_attr_f(n, (IrAttrKey)key, kw_f(a, i)); break;
        case IR_AK_S: case IR_AK_E: die("string keyword");
        }
    }
    return node_done(L, n);
}

/* ---- routing: route_topk returns a record whose fields are made lazily */

static IrNode *route_node(Lower *L, Routing *r, IrOp op, IrNode *a, IrNode *b, const char *field)
{
    IrNode *src[2] = {a, b};
    SrcLoc locs[2] = {r->loc, r->loc};
    const char *label = arena_printf(L->arena, "%s.%s", r->label, field);
    IrNode *n = node_begin(L, op, b ? 2 : 1, src, locs, r->scope, label, r->loc);
    n->layer = r->layer;  /* made lazily, perhaps outside the repeat (the train section's aux_loss) */
    if (op == IR_OP_TOPK_EXPERTS)
        ir_set_attr_i(n, IR_ATTR_K, r->k);
    if (op == IR_OP_ROUTE_PLAN || op == IR_OP_EXPERT_COUNTS || op == IR_OP_AUX_LOSS)
        ir_set_attr_i(n, IR_ATTR_EXPERTS, r->experts);
    node_done(L, n);
    return n;
}

static IrNode *r_topk(Lower *L, Routing *r)
{
    if (!r->topk)
        r->topk = route_node(L, r, IR_OP_TOPK_EXPERTS, r->logits, NULL, "experts");
    return r->topk;
}

static IrNode *r_weights(Lower *L, Routing *r)
{
    if (!r->weights)
        r->weights = route_node(L, r, IR_OP_TOPK_PROBS, r->logits, r_topk(L, r), "weights");
    return r->weights;
}

static IrNode *r_plan(Lower *L, Routing *r)
{
    if (!r->plan)
        r->plan = route_node(L, r, IR_OP_ROUTE_PLAN, r_topk(L, r), NULL, "plan");
    return r->plan;
}

static IrNode *r_splits(Lower *L, Routing *r)
{
    if (!r->splits)
        r->splits = route_node(L, r, IR_OP_EXPERT_COUNTS, r_topk(L, r), NULL, "splits");
    return r->splits;
}

static IrNode *r_probs(Lower *L, Routing *r)
{
    if (!r->probs)
        r->probs = route_node(L, r, IR_OP_DISPATCH_PROBS, r_weights(L, r), r_plan(L, r), "probs");
    return r->probs;
}

static IrNode *r_aux(Lower *L, Routing *r)
{
    if (!r->aux)
        r->aux = route_node(L, r, IR_OP_AUX_LOSS, r->logits, r_topk(L, r), "aux_loss");
    return r->aux;
}

static const char *const routing_fields =
    "experts (i32 [.., k]), weights ([.., k], token order), probs ([T*k], expert-major order), "
    "plan, splits (i32 [E]), aux_loss";

static Value routing_field(Lower *L, Routing *r, const char *field, SrcLoc loc)
{
    if (strcmp(field, "experts") == 0) return tensor_val(r_topk(L, r));
    if (strcmp(field, "weights") == 0) return tensor_val(r_weights(L, r));
    if (strcmp(field, "probs") == 0) return tensor_val(r_probs(L, r));
    if (strcmp(field, "plan") == 0) return tensor_val(r_plan(L, r));
    if (strcmp(field, "splits") == 0) return tensor_val(r_splits(L, r));
    if (strcmp(field, "aux_loss") == 0) return tensor_val(r_aux(L, r));
    diag_error(L->diag, loc, "a routing has no field `%s`; its fields are %s", field, routing_fields);
    return NONE;
}

static Value lower_route_topk(Lower *L, const AstExpr *call, CallArgs *a, const char *hint)
{
    IrNode *logits = a->pos[0].node;
    if (logits->rank < 0)
        return NONE;
    if (logits->rank < 1 || !ir_dtype_is_float(logits->dtype)) {
        diag_error(L->diag, a->pos_loc[0], "route_topk: router logits `%s` must be a float tensor [.., experts]",
                   logits->label);
        return NONE;
    }
    int64_t E = logits->shape[logits->rank - 1], k = kw_i(a, 0);
    if (k < 1 || k > E) {
        diag_error(L->diag, a->kw_given[0] ? a->kw_loc[0] : call->loc,
                   "route_topk: k = %lld must be between 1 and the number of experts, %lld", (long long)k,
                   (long long)E);
        return NONE;
    }
    Routing *r = arena_alloc(L->arena, sizeof *r);
    r->logits = logits;
    r->experts = E;
    r->k = k;
    r->scope = L->scope;
    r->label = hint ? hint : "route";
    r->loc = call->loc;
    r->layer = L->layer;
    ptrvec_push(L->arena, &L->routings, r);
    Value v = NONE;
    v.kind = V_ROUTING;
    v.r = r;
    return v;
}

static Value lower_dispatch(Lower *L, const AstExpr *call, CallArgs *a, const char *hint)
{
    Routing *r = a->pos[1].r;
    IrNode *src[2] = {a->pos[0].node, r_plan(L, r)};
    IrNode *n = node_begin(L, IR_OP_DISPATCH, 2, src, a->pos_loc, L->scope, hint, call->loc);
    return node_done(L, n);
}

static Value lower_combine(Lower *L, const AstExpr *call, CallArgs *a, const char *hint)
{
    Routing *r = a->pos[1].r;
    IrNode *src[2] = {a->pos[0].node, r_plan(L, r)};
    IrNode *n = node_begin(L, IR_OP_COMBINE, 2, src, a->pos_loc, L->scope, hint, call->loc);
    return node_done(L, n);
}

static Value lower_aux_loss(Lower *L, const AstExpr *call, CallArgs *a, const char *hint)
{
    (void)call;
    (void)hint;
    return tensor_val(r_aux(L, a->pos[0].r));
}

static IrNode *mk2(Lower *L, IrOp op, IrNode *x, IrNode *y, SrcLoc lx, SrcLoc ly, const char *label,
                   SrcLoc loc)
{
    IrNode *src[2] = {x, y};
    SrcLoc locs[2] = {lx, ly};
    return node_begin(L, op, y ? 2 : 1, src, locs, L->scope, label, loc);
}

/* attention(x, wq, wk, wv, wo, heads, kv_heads, rope_theta, causal):
 * q/k/v projections, RoPE, scaled dot-product attention, output projection. */
static Value lower_attention(Lower *L, const AstExpr *call, CallArgs *a, const char *hint)
{
    IrNode *x = a->pos[0].node, *wq = a->pos[1].node;
    int64_t heads = kw_i(a, 0), kv = a->kw_given[1] ? kw_i(a, 1) : heads;
    double theta = kw_f(a, 2);
    int causal = (int)kw_i(a, 3);
    SrcLoc hloc = a->kw_given[0] ? a->kw_loc[0] : call->loc, kvloc = a->kw_given[1] ? a->kw_loc[1] : call->loc;
    for (int i = 0; i < 5; i++)
        if (a->pos[i].node->rank < 0)
            return NONE;
    if (heads < 1) {
        diag_error(L->diag, hloc, "attention: heads = %lld must be positive", (long long)heads);
        return NONE;
    }
    if (kv < 1) {
        diag_error(L->diag, kvloc, "attention: kv_heads = %lld must be positive", (long long)kv);
        return NONE;
    }
    if (heads % kv) {
        diag_error(L->diag, kvloc, "attention: kv_heads = %lld does not divide heads = %lld", (long long)kv,
                   (long long)heads);
        return NONE;
    }
    if (x->rank == 3 && x->shape[2] % heads) {
        diag_error(L->diag, hloc, "attention: heads = %lld does not divide the hidden size %lld of `%s`",
                   (long long)heads, (long long)x->shape[2], x->label);
        return NONE;
    }
    if (wq->rank == 2 && wq->shape[0] % heads) {
        diag_error(L->diag, hloc, "attention: heads = %lld does not divide the query width %lld of `%s`",
                   (long long)heads, (long long)wq->shape[0], wq->label);
        return NONE;
    }
    if (x->rank != 3) {
        char b[128];
        diag_error(L->diag, a->pos_loc[0], "attention: input `%s` is %s; attention needs [batch, seq, hidden]",
                   x->label, ir_shape_str(x->rank, x->shape, b, sizeof b));
        return NONE;
    }
    /* wk and wv are [kv_heads * head_dim, hidden]. Checked here, at the
     * weight, because the internal sdpa node could only blame the call. */
    if (wq->rank == 2) {
        int64_t hd = wq->shape[0] / heads;
        for (int i = 2; i <= 3; i++) {
            IrNode *w = a->pos[i].node;
            if (w->rank == 2 && w->shape[0] != kv * hd) {
                char b[128];
                diag_error(L->diag, a->pos_loc[i], "attention: weight `%s` is %s but it needs kv_heads * head_dim "
                           "= %lld * %lld = %lld rows (head_dim = %lld query rows of `%s` / %lld heads)",
                           w->label, ir_shape_str(w->rank, w->shape, b, sizeof b), (long long)kv, (long long)hd,
                           (long long)(kv * hd), (long long)wq->shape[0], wq->label, (long long)heads);
                return NONE;
            }
        }
    }
    static const char *const proj[3] = {"q", "k", "v"};
    IrNode *qkv[3];
    for (int i = 0; i < 3; i++) {
        qkv[i] = mk2(L, IR_OP_LINEAR, x, a->pos[1 + i].node, a->pos_loc[0], a->pos_loc[1 + i], proj[i], call->loc);
        if (node_done(L, qkv[i]), qkv[i]->rank < 0)
            return NONE;
    }
    if (theta > 0) {
        for (int i = 0; i < 2; i++) {
            IrNode *n = mk2(L, IR_OP_ROPE, qkv[i], NULL, call->loc, call->loc, i ? "k_rope" : "q_rope", call->loc);
            ir_set_attr_i(n, IR_ATTR_HEADS, i ? kv : heads);
            ir_set_attr_f(n, IR_ATTR_THETA, theta);
            node_done(L, n);
            qkv[i] = n;
        }
    }
    IrNode *o = node_begin(L, IR_OP_SDPA, 3, qkv, NULL, L->scope, "attn", call->loc);
    ir_set_attr_i(o, IR_ATTR_HEADS, heads);
    ir_set_attr_i(o, IR_ATTR_KV_HEADS, kv);
    ir_set_attr_i(o, IR_ATTR_CAUSAL, causal);
    node_done(L, o);
    IrNode *out = mk2(L, IR_OP_LINEAR, o, a->pos[4].node, call->loc, a->pos_loc[4], hint ? hint : "attn_out",
                      call->loc);
    return node_done(L, out);
}

/* moe(x, router, w_gate_up, w_down, k): the explicit expert chain. */
static Value lower_moe(Lower *L, const AstExpr *call, CallArgs *a, const char *hint)
{
    IrNode *x = a->pos[0].node;
    for (int i = 0; i < 4; i++)
        if (a->pos[i].node->rank < 0)
            return NONE;
    IrNode *logits = mk2(L, IR_OP_LINEAR, x, a->pos[1].node, a->pos_loc[0], a->pos_loc[1], "router_logits",
                         call->loc);
    if (node_done(L, logits), logits->rank < 0)
        return NONE;
    CallArgs ra = *a;
    ra.pos[0] = tensor_val(logits);
    Value rv = lower_route_topk(L, call, &ra, "route");
    if (rv.kind != V_ROUTING)
        return NONE;
    Routing *r = rv.r;
    IrNode *xs = mk2(L, IR_OP_DISPATCH, x, r_plan(L, r), a->pos_loc[0], call->loc, "dispatch", call->loc);
    node_done(L, xs);
    IrNode *src[3] = {xs, a->pos[2].node, r_splits(L, r)};
    SrcLoc locs[3] = {call->loc, a->pos_loc[2], call->loc};
    IrNode *h = node_begin(L, IR_OP_GROUPED_LINEAR, 3, src, locs, L->scope, "gate_up", call->loc);
    if (node_done(L, h), h->rank < 0)
        return NONE;
    IrNode *act = mk2(L, IR_OP_SCALED_SWIGLU, h, r_probs(L, r), call->loc, call->loc, "act", call->loc);
    node_done(L, act);
    src[0] = act;
    src[1] = a->pos[3].node;
    locs[1] = a->pos_loc[3];
    IrNode *y = node_begin(L, IR_OP_GROUPED_LINEAR, 3, src, locs, L->scope, "down", call->loc);
    if (node_done(L, y), y->rank < 0)
        return NONE;
    IrNode *out = mk2(L, IR_OP_COMBINE, y, r_plan(L, r), call->loc, call->loc, hint ? hint : "moe", call->loc);
    return node_done(L, out);
}

static const Builtin builtins[] = {
    {"embedding", {"ids", "table"}, {{0}}, lower_direct, IR_OP_EMBEDDING,
     "rows of table [vocab, d] for integer ids [..] -> [.., d]"},
    {"linear", {"x", "weight"}, {{0}}, lower_direct, IR_OP_LINEAR,
     "x [.., in] times weight [out, in] transposed -> [.., out]; no bias"},
    {"rmsnorm", {"x", "weight"}, {{"eps", 'f', "1e-5"}}, lower_direct, IR_OP_RMSNORM,
     "x / sqrt(mean(x^2) + eps) * weight over the last dimension"},
    {"rope", {"x"}, {{"heads", 'i', NULL}, {"theta", 'f', "10000"}}, lower_direct, IR_OP_ROPE,
     "rotary position embedding of x [B, S, heads*hd], rotating half-dimension pairs"},
    {"sdpa", {"q", "k", "v"}, {{"heads", 'i', NULL}, {"kv_heads", 'i', NULL}, {"causal", 'b', "true"}},
     lower_direct, IR_OP_SDPA, "scaled dot-product attention with grouped key/value heads"},
    {"attention", {"x", "wq", "wk", "wv", "wo"},
     {{"heads", 'i', NULL}, {"kv_heads", 'i', "0"}, {"rope_theta", 'f', "10000"}, {"causal", 'b', "true"}},
     lower_attention, IR_OP_COUNT,
     "multi-head attention with GQA and RoPE: linear q/k/v, rope, sdpa, linear out (kv_heads defaults to "
     "heads; rope_theta = 0 turns RoPE off)"},
    {"add", {"a", "b"}, {{0}}, lower_direct, IR_OP_ADD, "elementwise sum (also written a + b)"},
    {"mul", {"a", "b"}, {{0}}, lower_direct, IR_OP_MUL, "elementwise product (also written a * b)"},
    {"scale", {"x"}, {{"factor", 'f', NULL}}, lower_direct, IR_OP_SCALE,
     "x times a constant (also written 0.5 * x)"},
    {"silu", {"x"}, {{0}}, lower_direct, IR_OP_SILU, "x * sigmoid(x)"},
    {"gelu", {"x"}, {{0}}, lower_direct, IR_OP_GELU, "Gaussian error linear unit (tanh approximation)"},
    {"swiglu", {"x"}, {{0}}, lower_direct, IR_OP_SWIGLU,
     "x [.., 2F] = [gate | up] -> silu(gate) * up [.., F]"},
    {"route_topk", {"logits"}, {{"k", 'i', NULL}}, lower_route_topk, IR_OP_COUNT,
     "fp32 softmax over experts, top-k, renormalised to sum 1 (Mixtral); returns a routing"},
    {"dispatch", {"x", "@routing"}, {{0}}, lower_dispatch, IR_OP_COUNT,
     "copies each token to its k experts, rows in stable expert-major order -> [T*k, d]"},
    {"grouped_linear", {"x", "weight", "splits"}, {{0}}, lower_direct, IR_OP_GROUPED_LINEAR,
     "per-expert linear: rows of group i times weight[i] [out, in] transposed"},
    {"row_scale", {"x", "scales"}, {{0}}, lower_direct, IR_OP_ROW_SCALE,
     "x [R, d] times scales [R], one per row (e.g. routing probabilities after a non-SwiGLU expert)"},
    {"scaled_swiglu", {"h", "probs"}, {{0}}, lower_direct, IR_OP_SCALED_SWIGLU,
     "h [R, 2F] = [gate | up] -> silu(gate) * up * probs per row [R, F]"},
    {"combine", {"y", "@routing"}, {{0}}, lower_combine, IR_OP_COUNT,
     "inverse of dispatch: sums each token's k expert rows -> [.., d]"},
    {"aux_loss", {"@routing"}, {{0}}, lower_aux_loss, IR_OP_COUNT,
     "Switch load-balancing loss E * sum_i f_i * P_i (also routing.aux_loss)"},
    {"moe", {"x", "router", "w_gate_up", "w_down"}, {{"k", 'i', NULL}}, lower_moe, IR_OP_COUNT,
     "the whole expert layer: linear router, route_topk, dispatch, grouped_linear, scaled_swiglu, "
     "grouped_linear, combine"},
    {"cross_entropy", {"logits", "targets"}, {{"ignore", 'i', "-100"}}, lower_direct, IR_OP_CROSS_ENTROPY,
     "mean token cross-entropy (causal LM); targets equal to ignore are skipped"},
    {"masked_lm_loss", {"logits", "targets"}, {{"ignore", 'i', "-100"}}, lower_direct, IR_OP_MASKED_LM_LOSS,
     "mean cross-entropy over masked positions; marks the model as a masked LM (15% masking in the data)"},
    {"mean_square", {"x"}, {{0}}, lower_direct, IR_OP_MEAN_SQUARE,
     "mean of x^2 over all elements -> [] (the MoE layer benchmark's loss, as (y ** 2).mean())"},
};

int lower_builtin_count(void) { return ARRAY_LEN(builtins); }

BuiltinDoc lower_builtin_doc(int i)
{
    static char sig[ARRAY_LEN(builtins)][256];
    const Builtin *b = &builtins[i];
    size_t o = 0;
    o += (size_t)snprintf(sig[i] + o, sizeof sig[i] - o, "%s(", b->name);
    int first = 1;
    for (int k = 0; k < MAX_POS && b->pos[k]; k++, first = 0)
        o += (size_t)snprintf(sig[i] + o, sizeof sig[i] - o, "%s%s", first ? "" : ", ",
                              b->pos[k][0] == '@' ? b->pos[k] + 1 : b->pos[k]);
    for (int k = 0; k < MAX_KW && b->kw[k].name; k++, first = 0)
        o += (size_t)snprintf(sig[i] + o, sizeof sig[i] - o, "%s%s = %s", first ? "" : ", ", b->kw[k].name,
                              b->kw[k].def ? b->kw[k].def : "?");
    snprintf(sig[i] + o, sizeof sig[i] - o, ")");
    BuiltinDoc d = {b->name, sig[i], b->summary};
    return d;
}

static const Builtin *builtin_find(const char *name)
{
    for (int i = 0; i < ARRAY_LEN(builtins); i++)
        if (strcmp(builtins[i].name, name) == 0)
            return &builtins[i];
    return NULL;
}

static int builtin_npos(const Builtin *b)
{
    int n = 0;
    while (n < MAX_POS && b->pos[n])
        n++;
    return n;
}

static const char *builtin_params(Lower *L, const Builtin *b)
{
    const char *s = "";
    for (int k = 0; k < MAX_POS && b->pos[k]; k++)
        s = arena_printf(L->arena, "%s%s%s", s, k ? ", " : "", b->pos[k][0] == '@' ? b->pos[k] + 1 : b->pos[k]);
    return s;
}

/* Parses a default like "1e-5", "true", "-100". */
static Value kw_default(const KwSpec *k)
{
    Value v = NONE;
    if (strcmp(k->def, "true") == 0 || strcmp(k->def, "false") == 0) {
        v.kind = V_BOOL;
        v.i = k->def[0] == 't';
    } else if (k->kind == 'i') {
        v.kind = V_INT;
        v.i = strtoll(k->def, NULL, 10);
    } else {
        v.kind = V_FLOAT;
        v.f = strtod(k->def, NULL);
    }
    return v;
}

/* Matches a call's arguments against a builtin's signature. Returns 0
 * after reporting a problem. */
static int bind_args(Lower *L, Env *env, const AstExpr *call, const Builtin *b, CallArgs *a)
{
    memset(a, 0, sizeof *a);
    a->b = b;
    int npos = builtin_npos(b), ok = 1, given[MAX_POS] = {0};
    int next = 0;
    for (const AstArg *arg = call->args; arg; arg = arg->next) {
        int slot = -1;
        if (!arg->key) {
            if (next >= npos) {
                diag_error(L->diag, arg->value->loc, "%s takes %d argument%s (%s) but %d were given", b->name,
                           npos, npos == 1 ? "" : "s", builtin_params(L, b), call->nargs);
                return 0;
            }
            slot = next++;
        } else {
            for (int i = 0; i < npos; i++) {
                const char *p = b->pos[i][0] == '@' ? b->pos[i] + 1 : b->pos[i];
                if (strcmp(p, arg->key) == 0)
                    slot = i;
            }
        }
        if (slot >= 0) {
            if (given[slot]) {
                diag_error(L->diag, arg->key ? arg->key_loc : arg->value->loc, "%s: argument `%s` given twice",
                           b->name, b->pos[slot][0] == '@' ? b->pos[slot] + 1 : b->pos[slot]);
                ok = 0;
                continue;
            }
            given[slot] = 1;
            Value v = eval(L, env, arg->value, NULL);
            int want_routing = b->pos[slot][0] == '@';
            if (v.kind == V_NONE) {
                ok = 0;
            } else if (want_routing && v.kind != V_ROUTING) {
                diag_error(L->diag, arg->value->loc,
                           "%s: argument `%s` must be a routing (the result of route_topk), not %s", b->name,
                           b->pos[slot] + 1, kind_name(v.kind));
                ok = 0;
            } else if (!want_routing && v.kind != V_TENSOR) {
                diag_error(L->diag, arg->value->loc, "%s: argument `%s` must be a tensor, not %s%s", b->name,
                           b->pos[slot], kind_name(v.kind),
                           v.kind == V_ROUTING ? " (use one of its fields, e.g. .probs or .splits)" : "");
                ok = 0;
            }
            a->pos[slot] = v;
            a->pos_loc[slot] = arg->value->loc;
            continue;
        }
        int k = -1;
        for (int i = 0; i < MAX_KW && b->kw[i].name; i++)
            if (strcmp(b->kw[i].name, arg->key) == 0)
                k = i;
        if (k < 0) {
            Suggest s = {0};
            for (int i = 0; i < MAX_KW && b->kw[i].name; i++)
                suggest_try(&s, arg->key, b->kw[i].name);
            for (int i = 0; i < npos; i++)
                suggest_try(&s, arg->key, b->pos[i][0] == '@' ? b->pos[i] + 1 : b->pos[i]);
            if (s.best)
                diag_error(L->diag, arg->key_loc, "%s has no argument `%s`; did you mean `%s`?", b->name, arg->key,
                           s.best);
            else
                diag_error(L->diag, arg->key_loc, "%s has no argument `%s`", b->name, arg->key);
            ok = 0;
            continue;
        }
        if (a->kw_given[k]) {
            diag_error(L->diag, arg->key_loc, "%s: argument `%s` given twice", b->name, arg->key);
            ok = 0;
            continue;
        }
        Value v = eval(L, env, arg->value, NULL);
        a->kw_given[k] = 1;
        a->kw_loc[k] = arg->key_loc;
        char want = b->kw[k].kind;
        if (v.kind == V_NONE) {
            ok = 0;
        } else if ((want == 'i' && v.kind != V_INT) || (want == 'f' && v.kind != V_INT && v.kind != V_FLOAT) ||
                   (want == 'b' && v.kind != V_BOOL)) {
            diag_error(L->diag, arg->value->loc, "%s: `%s` must be %s, not %s", b->name, arg->key,
                       want == 'i' ? "an integer" : want == 'f' ? "a number" : "true or false", kind_name(v.kind));
            ok = 0;
        } else if (want == 'f' && !isfinite(as_f(v))) {
            diag_error(L->diag, arg->value->loc, "%s: `%s` must be a finite number, not %g (out of range?)", b->name,
                       arg->key, as_f(v));
            ok = 0;
        } else if (want == 'f' && strcmp(arg->key, "eps") == 0 && !(as_f(v) > 0)) {
            diag_error(L->diag, arg->value->loc, "%s: `eps` must be positive (it keeps a division away from zero), "
                       "not %g", b->name, as_f(v));
            ok = 0;
        }
        a->kw[k] = v;
    }
    for (int i = 0; i < npos; i++)
        if (!given[i]) {
            diag_error(L->diag, call->loc, "%s is missing argument `%s`: it takes (%s)", b->name,
                       b->pos[i][0] == '@' ? b->pos[i] + 1 : b->pos[i], builtin_params(L, b));
            ok = 0;
        }
    for (int i = 0; i < MAX_KW && b->kw[i].name; i++) {
        if (a->kw_given[i])
            continue;
        if (!b->kw[i].def) {
            diag_error(L->diag, call->loc, "%s needs `%s = ...`", b->name, b->kw[i].name);
            ok = 0;
        } else {
            a->kw[i] = kw_default(&b->kw[i]);
        }
    }
    a->npos = npos;
    if (ok)
        for (int i = 0; i < npos; i++)
            if (a->pos[i].kind == V_TENSOR && a->pos[i].node->rank < 0)
                ok = 0;  /* an error upstream, already reported */
    return ok;
}

/* ------------------------------------------------------------ evaluation */

static void lower_stmts(Lower *L, Env *env, const AstStmt *s);

static Value num_int(int64_t i) { Value v = NONE; v.kind = V_INT; v.i = i; return v; }
static Value num_float(double f) { Value v = NONE; v.kind = V_FLOAT; v.f = f; return v; }
static int is_num(Value v) { return v.kind == V_INT || v.kind == V_FLOAT; }
static double as_f(Value v) { return v.kind == V_FLOAT ? v.f : (double)v.i; }

static Value arith(Lower *L, const AstExpr *e, Value a, Value b)
{
    if (a.kind == V_INT && b.kind == V_INT) {
        int64_t r = 0;
        int ok = 1;
        switch (e->op) {
        case '+': ok = checked_add_i64(a.i, b.i, &r); break;
        case '-': ok = !__builtin_sub_overflow(a.i, b.i, &r); break;
        case '*': ok = checked_mul_i64(a.i, b.i, &r); break;
        case '/':
        case '%':
            if (b.i == 0) {
                diag_error(L->diag, e->loc, "division by zero in a constant expression");
                return NONE;
            }
            if (a.i == INT64_MIN && b.i == -1) {
                ok = 0;
                break;
            }
            if (e->op == '%')
                r = a.i % b.i;
            else if (a.i % b.i == 0)
                r = a.i / b.i;
            else
                return num_float((double)a.i / (double)b.i);
            break;
        }
        if (!ok) {
            diag_error(L->diag, e->loc, "integer overflow in a constant expression");
            return NONE;
        }
        return num_int(r);
    }
    double x = as_f(a), y = as_f(b), r = 0;
    switch (e->op) {
    case '+': r = x + y; break;
    case '-': r = x - y; break;
    case '*': r = x * y; break;
    case '/':
    case '%':
        if (y == 0) {
            diag_error(L->diag, e->loc, "division by zero in a constant expression");
            return NONE;
        }
        r = e->op == '/' ? x / y : fmod(x, y);
        break;
    }
    return num_float(r);
}

static Value scale_tensor(Lower *L, const AstExpr *e, IrNode *x, double f, const char *hint)
{
    IrNode *n = node_begin(L, IR_OP_SCALE, 1, &x, &e->loc, L->scope, hint, e->loc);
    ir_set_attr_f(n, IR_ATTR_FACTOR, f);
    return node_done(L, n);
}

static Value eval_binary(Lower *L, Env *env, const AstExpr *e, const char *hint)
{
    Value a = eval(L, env, e->lhs, NULL), b = eval(L, env, e->rhs, NULL);
    if (a.kind == V_NONE || b.kind == V_NONE)
        return NONE;
    if (is_num(a) && is_num(b))
        return arith(L, e, a, b);
    if (a.kind == V_TENSOR && b.kind == V_TENSOR) {
        IrNode *src[2] = {a.node, b.node};
        SrcLoc locs[2] = {e->lhs->loc, e->rhs->loc};
        switch (e->op) {
        case '+':
            return node_done(L, node_begin(L, IR_OP_ADD, 2, src, locs, L->scope, hint, e->loc));
        case '*':
            return node_done(L, node_begin(L, IR_OP_MUL, 2, src, locs, L->scope, hint, e->loc));
        case '-': {
            Value nb = scale_tensor(L, e->rhs, b.node, -1.0, NULL);
            src[1] = nb.node;
            return node_done(L, node_begin(L, IR_OP_ADD, 2, src, locs, L->scope, hint, e->loc));
        }
        default:
            diag_error(L->diag, e->loc, "`%c` is not defined between two tensors (use +, - or *)", e->op);
            return NONE;
        }
    }
    if (a.kind == V_TENSOR && is_num(b) && (e->op == '*' || e->op == '/')) {
        double f = as_f(b);
        if (e->op == '/' && f == 0) {
            diag_error(L->diag, e->loc, "division of a tensor by zero");
            return NONE;
        }
        return scale_tensor(L, e, a.node, e->op == '*' ? f : 1.0 / f, hint);
    }
    if (is_num(a) && b.kind == V_TENSOR && e->op == '*')
        return scale_tensor(L, e, b.node, as_f(a), hint);
    diag_error(L->diag, e->loc, "cannot apply `%c` to %s and %s", e->op, kind_name(a.kind), kind_name(b.kind));
    return NONE;
}

static Value call_block(Lower *L, Env *env, const AstExpr *e, const AstStmt *blk, const char *hint)
{
    (void)hint;
    for (int i = 0; i < L->depth; i++)
        if (L->stack[i] == blk) {
            const char *chain = "";
            for (int j = i; j < L->depth; j++)
                chain = arena_printf(L->arena, "%s%s -> ", chain, L->stack[j]->name);
            diag_error(L->diag, e->loc, "block `%s` calls itself (%s%s); blocks cannot be recursive", blk->name,
                       chain, blk->name);
            return NONE;
        }
    if (L->depth >= MAX_BLOCK_DEPTH) {
        diag_error(L->diag, e->loc, "blocks nested more than %d calls deep", MAX_BLOCK_DEPTH);
        return NONE;
    }
    /* arguments are evaluated in the caller's environment */
    int nformals = 0;
    for (const AstName *f = blk->formals; f; f = f->next)
        nformals++;
    if (e->nargs != nformals) {
        diag_error(L->diag, e->loc, "block `%s` takes %d argument%s but %d were given", blk->name, nformals,
                   nformals == 1 ? "" : "s", e->nargs);
        diag_note(L->diag, blk->name_loc, "`%s` is defined here", blk->name);
        return NONE;
    }
    Env inner = {NULL, env, 1, NULL, 0, 0};
    /* find the model-level environment: blocks see only top-level names */
    Env *top = env;
    while (top->parent)
        top = top->parent;
    inner.parent = top;
    const AstName *f = blk->formals;
    int ok = 1;
    for (const AstArg *a = e->args; a; a = a->next, f = f->next) {
        if (a->key) {
            diag_error(L->diag, a->key_loc, "block arguments are positional; `%s = ...` is not allowed here",
                       a->key);
            ok = 0;
            continue;
        }
        Value v = eval(L, env, a->value, NULL);
        if (v.kind == V_NONE)
            ok = 0;
        Binding *b = env_add(L, &inner, f->name, B_VAR, v, f->loc);
        (void)b;
    }
    if (!ok)
        return NONE;
    const char *saved_scope = L->scope;
    const char *base = *L->scope ? arena_printf(L->arena, "%s.%s", L->scope, blk->name) : blk->name;
    const char *scope = nameset_unique(L->arena, L->scopes, base);
    L->scope = scope;
    L->stack[L->depth++] = blk;
    Value saved_ret = L->ret;
    int saved_returned = L->returned;
    L->ret = NONE;
    L->returned = 0;
    lower_stmts(L, &inner, blk->body);
    Value r = L->ret;
    int returned = L->returned;
    L->ret = saved_ret;
    L->returned = saved_returned;
    L->depth--;
    L->scope = saved_scope;
    if (!returned) {
        diag_error(L->diag, e->loc, "block `%s` returns nothing, but its value is used here", blk->name);
        diag_note(L->diag, blk->name_loc, "add `return ...` at the end of `%s`", blk->name);
        return NONE;
    }
    return r;
}

static Value eval_call(Lower *L, Env *env, const AstExpr *e, const char *hint)
{
    Binding *bb = env_lookup(env, e->name);
    if (bb && bb->kind == B_BLOCK)
        return call_block(L, env, e, bb->block, hint);
    if (bb) {
        diag_error(L->diag, e->loc, "`%s` is %s %s, not an op or a block: it cannot be called", e->name,
                   bb->kind == B_INPUT ? "an" : "a", bind_kind_name(bb->kind));
        return NONE;
    }
    const Builtin *b = builtin_find(e->name);
    if (!b) {
        Suggest s = {0};
        for (int i = 0; i < ARRAY_LEN(builtins); i++)
            suggest_try(&s, e->name, builtins[i].name);
        for (Env *x = env; x; x = x->parent)
            for (Binding *y = x->head; y; y = y->next)
                if (y->kind == B_BLOCK)
                    suggest_try(&s, e->name, y->name);
        if (s.best)
            diag_error(L->diag, e->loc, "unknown op or block `%s`; did you mean `%s`?", e->name, s.best);
        else
            diag_error(L->diag, e->loc, "unknown op or block `%s` (`moec ops` lists the ops)", e->name);
        /* still evaluate arguments for their own errors */
        for (const AstArg *a = e->args; a; a = a->next)
            eval(L, env, a->value, NULL);
        return NONE;
    }
    CallArgs a;
    if (!bind_args(L, env, e, b, &a))
        return NONE;
    return b->fn(L, e, &a, hint);
}

static Value eval_ident(Lower *L, Env *env, const AstExpr *e)
{
    Binding *b = env_lookup(env, e->name);
    if (b) {
        if (b->kind == B_BLOCK) {
            diag_error(L->diag, e->loc, "block `%s` must be called: %s(...)", e->name, e->name);
            return NONE;
        }
        return b->v;
    }
    if (builtin_find(e->name)) {
        diag_error(L->diag, e->loc, "`%s` is an op and must be called: %s(...)", e->name, e->name);
        return NONE;
    }
    Suggest s = {0};
    int in_block = 0;
    for (Env *x = env; x; x = x->parent) {
        for (Binding *y = x->head; y; y = y->next)
            if (!(in_block && y->kind == B_VAR))
                suggest_try(&s, e->name, y->name);
        if (x->block_boundary)
            in_block = 1;
    }
    /* a model-level variable used inside a block is a common mistake */
    Env *top = env;
    while (top->parent)
        top = top->parent;
    Binding *outer = in_block ? env_find_local(top, e->name) : NULL;
    if (outer && outer->kind == B_VAR) {
        diag_error(L->diag, e->loc, "`%s` is a variable of the model, which blocks cannot see; pass it as an "
                   "argument", e->name);
        return NONE;
    }
    if (s.best)
        diag_error(L->diag, e->loc, "unknown name `%s`; did you mean `%s`?", e->name, s.best);
    else
        diag_error(L->diag, e->loc, "unknown name `%s`", e->name);
    return NONE;
}

static Value eval_expr(Lower *L, Env *env, const AstExpr *e, const char *hint)
{
    if (L->block_nodes > MAX_NODES) {
        if (L->block_nodes == MAX_NODES + 1) {
            diag_error(L->diag, e->loc, "the model unrolls to more than %d IR nodes; is a repeat count too large?",
                       MAX_NODES);
            L->block_nodes++;
        }
        return NONE;
    }
    switch (e->kind) {
    case AST_INT: return num_int(e->ival);
    case AST_FLOAT: return num_float(e->fval);
    case AST_BOOL: { Value v = NONE; v.kind = V_BOOL; v.i = e->ival; return v; }
    case AST_STRING: { Value v = NONE; v.kind = V_STRING; v.s = e->name; return v; }
    case AST_IDENT: return eval_ident(L, env, e);
    case AST_CALL: return eval_call(L, env, e, hint);
    case AST_BINARY: return eval_binary(L, env, e, hint);
    case AST_NEG: {
        Value v = eval(L, env, e->lhs, NULL);
        if (v.kind == V_INT) {
            if (v.i == INT64_MIN) {
                diag_error(L->diag, e->loc, "integer overflow in a constant expression");
                return NONE;
            }
            return num_int(-v.i);
        }
        if (v.kind == V_FLOAT)
            return num_float(-v.f);
        if (v.kind == V_TENSOR)
            return scale_tensor(L, e, v.node, -1.0, hint);
        if (v.kind != V_NONE)
            diag_error(L->diag, e->loc, "cannot negate %s", kind_name(v.kind));
        return NONE;
    }
    case AST_FIELD: {
        Value v = eval(L, env, e->lhs, NULL);
        if (v.kind == V_NONE)
            return NONE;
        if (v.kind != V_ROUTING) {
            diag_error(L->diag, e->loc, "`.%s`: only a routing (from route_topk) has fields, this is %s", e->name,
                       kind_name(v.kind));
            return NONE;
        }
        return routing_field(L, v.r, e->name, e->loc);
    }
    case AST_TUPLE:
    case AST_LIST:
        diag_error(L->diag, e->loc, "a %s is not a value here", e->kind == AST_TUPLE ? "tuple" : "list");
        return NONE;
    }
    die("eval: bad expression kind %d", (int)e->kind);
}

/* eval() recurses once per level of the expression tree, and on through the
 * blocks it calls: a left-leaning `1 + 1 + ... + 1` has no brackets for the
 * lexer to count, and overflowed the C stack before this limit. */
static Value eval(Lower *L, Env *env, const AstExpr *e, const char *hint)
{
    if (L->eval_depth >= AST_MAX_DEPTH) {
        /* once: every sibling at this depth would say the same */
        if (!L->too_deep)
            diag_error(L->diag, e->loc, "expression nested more than %d levels deep%s", AST_MAX_DEPTH,
                       L->depth ? " (counting the calls of the blocks that lead here)" : "");
        L->too_deep = 1;
        return NONE;
    }
    L->eval_depth++;
    Value v = eval_expr(L, env, e, hint);
    if (--L->eval_depth == 0)
        L->too_deep = 0;
    return v;
}

/* ------------------------------------------------------------ statements */

#define MAX_DIM ((int64_t)1 << 40)

static int eval_shape(Lower *L, Env *env, const AstExpr *list, int *rank, int64_t *shape, const char *what)
{
    if (list->nargs > IR_MAX_RANK) {
        diag_error(L->diag, list->loc, "%s has %d dimensions; at most %d are supported", what, list->nargs,
                   IR_MAX_RANK);
        return 0;
    }
    int ok = 1, i = 0;
    for (const AstArg *a = list->args; a; a = a->next, i++) {
        Value v = eval(L, env, a->value, NULL);
        if (v.kind == V_NONE) {
            ok = 0;
        } else if (v.kind == V_FLOAT && v.f == floor(v.f) && fabs(v.f) < 9e15) {
            v = num_int((int64_t)v.f);
        }
        if (v.kind == V_FLOAT) {
            char b[32];
            diag_error(L->diag, a->value->loc, "dimension %d of %s is %s, not a whole number", i + 1, what,
                       fmt_double(b, v.f));
            ok = 0;
        } else if (v.kind == V_INT && (v.i < 1 || v.i > MAX_DIM)) {
            diag_error(L->diag, a->value->loc, "dimension %d of %s is %lld; dimensions must be between 1 and 2^40",
                       i + 1, what, (long long)v.i);
            ok = 0;
        } else if (v.kind != V_INT && v.kind != V_NONE) {
            diag_error(L->diag, a->value->loc, "dimension %d of %s must be an integer, not %s", i + 1, what,
                       kind_name(v.kind));
            ok = 0;
        }
        shape[i] = v.i;
    }
    *rank = list->nargs;
    if (ok) {
        int64_t total = 1;
        for (int k = 0; k < *rank; k++)
            if (!checked_mul_i64(total, shape[k], &total) || total > ((int64_t)1 << 48)) {
                diag_error(L->diag, list->loc, "%s has more than 2^48 elements", what);
                return 0;
            }
    }
    return ok;
}

static int eval_dtype(Lower *L, const AstStmt *s, IrDType def, IrDType *out)
{
    if (!s->dtype) {
        *out = def;
        return 1;
    }
    int t = ir_dtype_lookup(s->dtype);
    if (t < 0) {
        diag_error(L->diag, s->dtype_loc, "unknown element type `%s` (f32, bf16, f16 or i32; e4m3 and e8m0 are made by the precision pass)", s->dtype);
        return 0;
    }
    *out = (IrDType)t;
    return 1;
}

static void set_init(Lower *L, Env *env, IrNode *p, const AstExpr *init)
{
    if (!init) {
        /* defaults: matrices small normal, vectors (norm weights) ones */
        if (p->rank >= 2) {
            ir_set_attr_e(p, IR_ATTR_INIT, IR_INIT_NORMAL);
            ir_set_attr_f(p, IR_ATTR_STD, 0.02);
        } else {
            ir_set_attr_e(p, IR_ATTR_INIT, IR_INIT_ONES);
        }
        return;
    }
    const char *name = init->kind == AST_IDENT || init->kind == AST_CALL ? init->name : NULL;
    static const struct { const char *name; IrAttrKey arg; int needs_arg; } inits[] = {
        {"normal", IR_ATTR_STD, 1}, {"uniform", IR_ATTR_BOUND, 1}, {"constant", IR_ATTR_VALUE, 1},
        {"zeros", IR_ATTR_COUNT, 0}, {"ones", IR_ATTR_COUNT, 0},
    };
    for (int i = 0; name && i < ARRAY_LEN(inits); i++) {
        if (strcmp(inits[i].name, name) != 0)
            continue;
        int nargs = init->kind == AST_CALL ? init->nargs : 0;
        if (nargs != inits[i].needs_arg) {
            diag_error(L->diag, init->loc, "init %s takes %s", name,
                       inits[i].needs_arg ? "one number, e.g. normal(0.02)" : "no arguments");
            return;
        }
        ir_set_attr_e(p, IR_ATTR_INIT, ir_attr_enum_lookup(IR_ATTR_INIT, inits[i].name, strlen(inits[i].name)));
        if (nargs) {
            const AstExpr *ae = init->args->value;
            Value v = eval(L, env, ae, NULL);
            if (v.kind == V_NONE)
                return;
            if (!is_num(v)) {
                diag_error(L->diag, ae->loc, "init %s takes a number, not %s", name, kind_name(v.kind));
                return;
            }
            if (!isfinite(as_f(v))) {
                diag_error(L->diag, ae->loc, "init %s takes a finite number, not %g (out of range?)", name, as_f(v));
                return;
            }
            if (i < 2 && !(as_f(v) >= 0)) {
                diag_error(L->diag, ae->loc, "init %s needs a non-negative scale", name);
                return;
            }
            ir_set_attr_f(p, inits[i].arg, as_f(v));
        }
        return;
    }
    diag_error(L->diag, init->loc, "unknown initialiser; use normal(std), uniform(bound), constant(value), zeros "
               "or ones");
}

static void lower_stmt(Lower *L, Env *env, const AstStmt *s)
{
    switch (s->kind) {
    case ST_CONST: {
        Value v = eval(L, env, s->value, NULL);
        if (v.kind != V_NONE && !is_num(v) && v.kind != V_BOOL) {
            diag_error(L->diag, s->value->loc, "a constant must be a number or a boolean, not %s", kind_name(v.kind));
            v = NONE;
        }
        env_add(L, env, s->name, B_CONST, v, s->name_loc);
        return;
    }
    case ST_INPUT:
    case ST_PARAM: {
        int is_param = s->kind == ST_PARAM;
        IrDType t;
        int rank, ok = 1;
        int64_t shape[IR_MAX_RANK];
        const char *what = arena_printf(L->arena, "%s `%s`", is_param ? "param" : "input", s->name);
        if (!is_param && L->depth > 0) {
            diag_error(L->diag, s->loc, "inputs are declared at the model's top level, not inside a block");
            ok = 0;
        } else if (!eval_dtype(L, s, is_param ? IR_F32 : IR_F32, &t) ||
                   !eval_shape(L, env, s->shape, &rank, shape, what)) {
            ok = 0;
        } else if (is_param && (t == IR_I32 || t == IR_E4M3 || t == IR_E8M0)) {
            diag_error(L->diag, s->dtype_loc, "param `%s` must be f32, bf16 or f16 (master weights are kept in "
                       "high precision)", s->name);
            ok = 0;
        } else if (is_param && rank == 0) {
            diag_error(L->diag, s->shape->loc, "param `%s` needs at least one dimension", s->name);
            ok = 0;
        }
        if (!ok) {
            /* bound to nothing: its uses stay quiet instead of adding
             * "unknown name" errors to the one already reported */
            env_add(L, env, s->name, is_param ? B_PARAM : B_INPUT, NONE, s->name_loc);
            return;
        }
        if (!is_param && s->init)
            diag_error(L->diag, s->init->loc, "inputs take no initialiser");
        IrNode *n = node_begin(L, is_param ? IR_OP_PARAM : IR_OP_INPUT, 0, NULL, NULL, L->scope, s->name, s->name_loc);
        n->dtype = t;
        n->rank = rank;
        memcpy(n->shape, shape, sizeof(int64_t) * (size_t)rank);
        if (is_param)
            set_init(L, env, n, s->init);
        env_add(L, env, s->name, is_param ? B_PARAM : B_INPUT, tensor_val(n), s->name_loc);
        return;
    }
    case ST_ASSIGN:
    case ST_OUTPUT: {
        Value v = eval(L, env, s->value, s->name);
        /* rebinding a variable updates it where it lives (e.g. outside a repeat) */
        Binding *b = NULL;
        for (Env *e = env; e && !b; e = e->parent) {
            b = env_find_local(e, s->name);
            if (e->block_boundary)
                break;
        }
        if (b && b->kind != B_VAR) {
            diag_error(L->diag, s->name_loc, "cannot assign to %s `%s`", bind_kind_name(b->kind), s->name);
            note_binding(L, b, "is declared here");
            return;
        }
        if (v.kind != V_NONE && v.kind != V_TENSOR && v.kind != V_ROUTING && v.kind != V_NONE) {
            diag_error(L->diag, s->value->loc, "`%s = ...` needs a tensor; this is %s (use `const` for numbers)",
                       s->name, kind_name(v.kind));
            v = NONE;
        }
        if (v.kind == V_ROUTING && v.r->label && strcmp(v.r->label, "route") == 0)
            v.r->label = s->name;
        if (s->kind == ST_OUTPUT) {
            if (v.kind == V_TENSOR) {
                v.node->is_output = 1;
                if (!v.node->output_name)
                    v.node->output_name = arena_strdup(L->arena, s->name);
            }
            else if (v.kind == V_ROUTING)
                diag_error(L->diag, s->value->loc, "output `%s` must be a tensor, not a routing", s->name);
        }
        if (b)
            b->v = v;
        else
            env_add(L, env, s->name, B_VAR, v, s->name_loc);
        return;
    }
    case ST_REPEAT: {
        Value n = eval(L, env, s->value, NULL);
        if (n.kind == V_NONE)
            return;
        if (n.kind != V_INT) {
            diag_error(L->diag, s->value->loc, "repeat needs a non-negative integer count, not %s", kind_name(n.kind));
            return;
        }
        if (n.i < 0) {  /* "not an integer" was the message for -1 */
            diag_error(L->diag, s->value->loc, "repeat needs a non-negative integer count, not %lld", (long long)n.i);
            return;
        }
        if (n.i > 100000) {
            diag_error(L->diag, s->value->loc, "repeat %lld is more than 100000 iterations", (long long)n.i);
            return;
        }
        const char *name = s->value->kind == AST_IDENT ? s->value->name : "repeat";
        const char *saved_scope = L->scope, *saved_layer = L->layer;
        for (int64_t i = 0; i < n.i && !L->returned; i++) {
            int errs = L->diag->nerrors;
            Env iter = {NULL, env, 0, NULL, 0, 0};
            L->scope = *saved_scope ? arena_printf(L->arena, "%s.%s.%lld", saved_scope, name, (long long)i)
                                    : arena_printf(L->arena, "%s.%lld", name, (long long)i);
            if (!saved_layer)
                L->layer = L->scope;
            lower_stmts(L, &iter, s->body);
            L->scope = saved_scope;
            L->layer = saved_layer;
            if (L->diag->nerrors > errs)
                break;  /* the same mistake would repeat in every iteration */
        }
        return;
    }
    case ST_BLOCK:
        if (L->depth > 0 || env->parent) {
            diag_error(L->diag, s->loc, "block `%s` must be defined at the top level of the model", s->name);
        }
        return;  /* top-level blocks were bound before lowering */
    case ST_RETURN:
        if (L->depth == 0) {
            diag_error(L->diag, s->loc, "`return` is only allowed inside a block");
            return;
        }
        L->ret = eval(L, env, s->value, NULL);
        if (L->ret.kind != V_NONE && L->ret.kind != V_TENSOR && L->ret.kind != V_ROUTING) {
            diag_error(L->diag, s->value->loc, "a block returns a tensor or a routing, not %s", kind_name(L->ret.kind));
            L->ret = NONE;
        }
        L->returned = 1;
        return;
    }
}

static void lower_stmts(Lower *L, Env *env, const AstStmt *s)
{
    for (; s && !L->returned; s = s->next) {
        if (diag_full(L->diag))
            return;
        lower_stmt(L, env, s);
        if (L->returned && s->next)
            diag_warning(L->diag, s->next->loc, "statement after `return` is never reached");
    }
}

/* --------------------------------------------------------- train section */

static int train_num(Lower *L, const AstTrainItem *t, double lo, double hi, double *out)
{
    Env empty = {0};
    Value v = eval(L, &empty, t->value, NULL);
    if (v.kind == V_NONE)
        return 0;
    if (!is_num(v)) {
        diag_error(L->diag, t->value->loc, "`%s` takes a number, not %s", t->key, kind_name(v.kind));
        return 0;
    }
    double f = as_f(v);
    if (!(f >= lo && f <= hi)) {
        char a[32], b[32], c[32];
        diag_error(L->diag, t->value->loc, "`%s` = %s is out of range [%s, %s]", t->key, fmt_double(a, f),
                   fmt_double(b, lo), fmt_double(c, hi));
        return 0;
    }
    *out = f;
    return 1;
}

static int train_int(Lower *L, const AstExpr *e, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
    Env empty = {0};
    Value v = eval(L, &empty, e, NULL);
    if (v.kind == V_NONE)
        return 0;
    if (v.kind != V_INT) {
        diag_error(L->diag, e->loc, "`%s` takes an integer, not %s", key, kind_name(v.kind));
        return 0;
    }
    if (v.i < lo || v.i > hi) {
        diag_error(L->diag, e->loc, "`%s` = %lld is out of range [%lld, %lld]", key, (long long)v.i, (long long)lo,
                   (long long)hi);
        return 0;
    }
    *out = v.i;
    return 1;
}

/* Keyword arguments of optimizer/schedule calls: name = number. */
static void train_kwargs(Lower *L, const AstExpr *call, const char *const *names, double **slots, int n)
{
    for (const AstArg *a = call->args; a; a = a->next) {
        if (!a->key) {
            diag_error(L->diag, a->value->loc, "%s takes keyword arguments, e.g. %s = ...", call->name, names[0]);
            continue;
        }
        int k = -1;
        for (int i = 0; i < n; i++)
            if (strcmp(names[i], a->key) == 0)
                k = i;
        if (k < 0) {
            Suggest s = {0};
            for (int i = 0; i < n; i++)
                suggest_try(&s, a->key, names[i]);
            diag_error(L->diag, a->key_loc, "%s has no setting `%s`%s%s%s", call->name, a->key,
                       s.best ? "; did you mean `" : "", s.best ? s.best : "", s.best ? "`?" : "");
            continue;
        }
        if (strcmp(a->key, "betas") == 0) {
            if (a->value->kind != AST_TUPLE || a->value->nargs != 2) {
                diag_error(L->diag, a->value->loc, "betas takes two numbers: betas = (0.9, 0.95)");
                continue;
            }
            Env empty = {0};
            Value b1 = eval(L, &empty, a->value->args->value, NULL), b2 = eval(L, &empty, a->value->args->next->value, NULL);
            if (!is_num(b1) || !is_num(b2) || as_f(b1) < 0 || as_f(b1) >= 1 || as_f(b2) < 0 || as_f(b2) >= 1) {
                diag_error(L->diag, a->value->loc, "betas must be two numbers in [0, 1)");
                continue;
            }
            slots[k][0] = as_f(b1);
            slots[k][1] = as_f(b2);
            continue;
        }
        AstTrainItem tmp = {a->key, a->key_loc, NULL, {0, 0, 0}, a->value, NULL};
        double v;
        if (train_num(L, &tmp, 0, 1e9, &v))
            *slots[k] = v;
    }
}

static const char *train_word(Lower *L, const AstTrainItem *t, const char *const *allowed)
{
    const AstExpr *e = t->value;
    const char *w = e->kind == AST_IDENT || e->kind == AST_CALL ? e->name : e->kind == AST_STRING ? e->name : NULL;
    if (w)
        for (int i = 0; allowed[i]; i++)
            if (strcmp(allowed[i], w) == 0)
                return allowed[i];
    const char *list = "";
    for (int i = 0; allowed[i]; i++)
        list = arena_printf(L->arena, "%s%s%s", list, i ? ", " : "", allowed[i]);
    diag_error(L->diag, e->loc, "`%s` must be one of: %s", t->key, list);
    return NULL;
}

static const char *const train_keys[] = {
    "optimizer", "schedule", "precision", "parallel", "ep", "dp", "batch", "seq", "grad_clip", "steps",
    "alphabet", "aux_loss", "no_decay", "packing", "checkpoint", NULL,
};

static void lower_train(Lower *L, const AstModel *m)
{
    IrTrain *tr = &L->g->train;
    const AstTrainItem *seen[32] = {0};
    for (const AstTrainItem *t = m->train; t; t = t->next) {
        const char *key = t->key;
        if (strcmp(key, "parallel") == 0) {
            if (!t->subkey) {
                diag_error(L->diag, t->key_loc, "write `parallel ep = N` (and optionally `dp = M`)");
                continue;
            }
            key = t->subkey;
        } else if (t->subkey) {
            diag_error(L->diag, t->subkey_loc, "`%s %s = ...`: only `parallel` takes a named setting", t->key,
                       t->subkey);
            continue;
        }
        int k = -1;
        for (int i = 0; train_keys[i]; i++)
            if (strcmp(train_keys[i], key) == 0)
                k = i;
        if (k < 0) {
            Suggest s = {0};
            for (int i = 0; train_keys[i]; i++)
                suggest_try(&s, key, train_keys[i]);
            SrcLoc loc = t->subkey ? t->subkey_loc : t->key_loc;
            if (s.best)
                diag_error(L->diag, loc, "unknown train setting `%s`; did you mean `%s`?", key, s.best);
            else
                diag_error(L->diag, loc, "unknown train setting `%s` (see docs/language.md, \"train\")", key);
            continue;
        }
        if (seen[k]) {
            diag_error(L->diag, t->key_loc, "train setting `%s` is given twice", key);
            diag_note(L->diag, seen[k]->key_loc, "first given here");
            continue;
        }
        seen[k] = t;
        double f;
        int64_t i64;
        if (strcmp(key, "optimizer") == 0) {
            static const char *const opts[] = {"adamw", NULL};
            if (!train_word(L, t, opts))
                continue;
            if (t->value->kind == AST_CALL) {
                static const char *const names[] = {"lr", "betas", "eps", "weight_decay"};
                double *slots[] = {&tr->lr, &tr->beta1, &tr->eps, &tr->weight_decay};
                double betas[2] = {tr->beta1, tr->beta2};
                slots[1] = betas;
                train_kwargs(L, t->value, names, slots, 4);
                tr->beta1 = betas[0];
                tr->beta2 = betas[1];
            }
        } else if (strcmp(key, "schedule") == 0) {
            static const char *const opts[] = {"warmup_cosine", "constant", NULL};
            const char *w = train_word(L, t, opts);
            if (!w)
                continue;
            tr->schedule = (IrSchedule)ir_name_index(ir_schedule_name, w, strlen(w));
            if (t->value->kind == AST_CALL) {
                static const char *const names[] = {"warmup", "min_lr"};
                double warm = (double)tr->warmup;
                double *slots[] = {&warm, &tr->min_lr};
                train_kwargs(L, t->value, names, slots, 2);
                if (warm != floor(warm)) {
                    /* at the value, not at the schedule's name */
                    SrcLoc wloc = t->value->loc;
                    for (const AstArg *a = t->value->args; a; a = a->next)
                        if (a->key && strcmp(a->key, "warmup") == 0)
                            wloc = a->value->loc;
                    diag_error(L->diag, wloc, "warmup counts steps and must be a whole number");
                }
                tr->warmup = (int64_t)warm;
            }
        } else if (strcmp(key, "precision") == 0) {
            static const char *const opts[] = {"bf16", "mxfp8", "fp8_block", "fp8-block", NULL};
            const char *w = train_word(L, t, opts);
            if (w)
                tr->precision = w[0] == 'b' ? IR_PREC_BF16 : w[0] == 'm' ? IR_PREC_MXFP8 : IR_PREC_FP8_BLOCK;
        } else if (strcmp(key, "packing") == 0) {
            static const char *const opts[] = {"auto", "concat", "packed", "rows", NULL};
            const char *w = train_word(L, t, opts);
            if (w)
                tr->packing = (IrPacking)ir_name_index(ir_packing_name, w, strlen(w));
        } else if (strcmp(key, "checkpoint") == 0) {
            static const char *const opts[] = {"none", "blocks", NULL};
            const char *w = train_word(L, t, opts);
            if (w)
                tr->checkpoint = (IrCheckpoint)ir_name_index(ir_checkpoint_name, w, strlen(w));
        } else if (strcmp(key, "alphabet") == 0) {
            static const char *const opts[] = {"protein", "dna", "none", NULL};
            const char *w = train_word(L, t, opts);
            if (w)
                tr->alphabet = (IrAlphabet)ir_name_index(ir_alphabet_name, w, strlen(w));
        } else if (strcmp(key, "ep") == 0 || strcmp(key, "dp") == 0) {
            if (train_int(L, t->value, key, 1, 4096, &i64))
                *(key[0] == 'e' ? &tr->ep : &tr->dp) = i64;
        } else if (strcmp(key, "batch") == 0) {
            if (train_int(L, t->value, key, 1, 1 << 24, &i64))
                tr->batch = i64;
        } else if (strcmp(key, "seq") == 0) {
            if (train_int(L, t->value, key, 1, 1 << 24, &i64))
                tr->seq = i64;
        } else if (strcmp(key, "steps") == 0) {
            if (train_int(L, t->value, key, 0, (int64_t)1 << 40, &i64))
                tr->steps = i64;
        } else if (strcmp(key, "grad_clip") == 0) {
            if (train_num(L, t, 0, 1e30, &f))
                tr->grad_clip = f;
        } else if (strcmp(key, "aux_loss") == 0) {
            if (train_num(L, t, 0, 1e6, &f))
                tr->aux_loss_coef = f;
        } else if (strcmp(key, "no_decay") == 0) {
            /* no_decay [norms, embeddings] | [norms] | [] : parameters AdamW's
             * weight decay leaves alone */
            const AstExpr *e = t->value;
            if (e->kind != AST_LIST) {
                diag_error(L->diag, e->loc, "no_decay takes a list: [norms, embeddings], [norms], [embeddings] or []");
                continue;
            }
            tr->decay_norms = 1;
            tr->decay_embeddings = 1;
            for (const AstArg *a = e->args; a; a = a->next) {
                const AstExpr *w = a->value;
                if (w->kind == AST_IDENT && strcmp(w->name, "norms") == 0)
                    tr->decay_norms = 0;
                else if (w->kind == AST_IDENT && strcmp(w->name, "embeddings") == 0)
                    tr->decay_embeddings = 0;
                else
                    diag_error(L->diag, w->loc, "no_decay lists `norms` and/or `embeddings`");
            }
        }
    }
}

/* --------------------------------------------------------------- driver */

IrGraph *lower_model(Arena *arena, Diag *diag, const AstModel *m, const char *path, const LowerOptions *opt)
{
    Lower L = {0};
    L.arena = arena;
    L.diag = diag;
    L.g = ir_graph_new(arena, m->name, path);
    L.scope = "";
    L.scopes = nameset_new(arena);
    int errs = diag->nerrors;

    lower_train(&L, m);
    if (opt && opt->batch > 0)
        L.g->train.batch = opt->batch;
    if (opt && opt->seq > 0)
        L.g->train.seq = opt->seq;
    if (opt && opt->has_precision)
        L.g->train.precision = opt->precision;
    if (opt && opt->ep > 0)
        L.g->train.ep = opt->ep;
    if (opt && opt->dp > 0)
        L.g->train.dp = opt->dp;

    /* With expert parallelism the graph is one rank's: `batch` is the global
     * batch and B the rank's share of it. */
    int64_t world = L.g->train.ep * L.g->train.dp, local_batch = L.g->train.batch;
    if (world > 1) {
        if (L.g->train.batch % world) {
            diag_error(diag, m->has_train ? m->train_loc : m->loc,
                       "batch %lld does not split evenly over ep %lld x dp %lld = %lld ranks", (long long)L.g->train.batch,
                       (long long)L.g->train.ep, (long long)L.g->train.dp, (long long)world);
            return NULL;
        }
        local_batch = L.g->train.batch / world;
    }

    Env top = {0};
    Value v = num_int(local_batch);
    SrcLoc none = {0, 0, 0};
    env_add(&L, &top, "B", B_CONST, v, none);
    v = num_int(L.g->train.seq);
    env_add(&L, &top, "S", B_CONST, v, none);
    /* blocks may be called before their definition */
    for (const AstStmt *s = m->body; s; s = s->next)
        if (s->kind == ST_BLOCK) {
            Binding *b = env_add(&L, &top, s->name, B_BLOCK, NONE, s->name_loc);
            b->block = s;
        }
    lower_stmts(&L, &top, m->body);

    if (diag->nerrors > errs)
        return NULL;
    Binding *loss = env_find_local(&top, "loss");
    if (!loss) {
        diag_error(diag, m->loc, "model `%s` defines no `loss`: assign the training objective, e.g. "
                   "`loss = cross_entropy(logits, targets)`", m->name);
        return NULL;
    }
    if (loss->kind != B_VAR || loss->v.kind != V_TENSOR) {
        /* a `loss` exists, so "defines no `loss`" would mislead: say what it is */
        diag_error(diag, loss->loc, "`loss` must be the training objective, a scalar tensor computed by the model "
                   "(e.g. `loss = cross_entropy(logits, targets)`), but it is %s%s",
                   loss->kind == B_VAR ? kind_name(loss->v.kind)
                   : loss->kind == B_INPUT ? "an " : "a ",
                   loss->kind == B_VAR ? "" : bind_kind_name(loss->kind));
        return NULL;
    }
    IrNode *ln = loss->v.node;
    if (ln->rank != 0) {
        char b[64];
        diag_error(diag, ln->loc, "`loss` must be a scalar, but it is %s", ir_type_str(ln, b, sizeof b));
        return NULL;
    }
    /* `aux_loss C` in the train section adds C * the load-balancing loss of
     * every routing to the objective */
    if (L.g->train.aux_loss_coef > 0 && L.routings.len) {
        L.scope = "";
        L.layer = NULL;
        IrNode *total = ln;
        for (int i = 0; i < L.routings.len; i++) {
            Routing *r = L.routings.items[i];
            IrNode *aux = r_aux(&L, r);
            IrNode *sc = node_begin(&L, IR_OP_SCALE, 1, &aux, &r->loc, "", "aux_scaled", r->loc);
            ir_set_attr_f(sc, IR_ATTR_FACTOR, L.g->train.aux_loss_coef);
            node_done(&L, sc);
            IrNode *src[2] = {total, sc};
            SrcLoc locs[2] = {ln->loc, r->loc};
            total = node_begin(&L, IR_OP_ADD, 2, src, locs, "", "loss_total", ln->loc);
            node_done(&L, total);
        }
        ln = total;
    }
    ln->is_output = 1;
    L.g->loss = ln;
    for (int i = 0; i < L.g->nnodes; i++)
        if (L.g->nodes[i]->op == IR_OP_MASKED_LM_LOSS)
            L.g->train.objective = IR_OBJ_MASKED_LM;

    /* parameters nobody reads are almost always a typo */
    ir_count_uses(L.g);
    for (int i = 0; i < L.g->nnodes; i++) {
        IrNode *n = L.g->nodes[i];
        if ((n->op == IR_OP_PARAM || n->op == IR_OP_INPUT) && n->nuses == 0)
            diag_warning(diag, n->loc, "%s `%s` is never used", n->op == IR_OP_PARAM ? "param" : "input", n->label);
    }
    return L.g;
}
