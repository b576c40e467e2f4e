/* ir.c - tables generated from ops.def/attrs.def, graph and node builders,
 * unique hierarchical names. */
#include "ir.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "../util/util.h"

const IrOpInfo ir_op_info[IR_OP_COUNT] = {
#define OP(e, name, arity, req, opt, flags) [IR_OP_##e] = {name, arity, req, opt, flags},
#include "ops.def"
#undef OP
};

const char *const ir_attr_name[IR_ATTR_COUNT] = {
#define ATTR(e, name, kind) [IR_ATTR_##e] = name,
#include "attrs.def"
#undef ATTR
};

const IrAttrKind ir_attr_kind[IR_ATTR_COUNT] = {
#define ATTR(e, name, kind) [IR_ATTR_##e] = IR_AK_##kind,
#include "attrs.def"
#undef ATTR
};

static_assert(IR_ATTR_COUNT <= 32, "attribute sets are 32-bit masks");

const char *const ir_dtype_name[IR_DTYPE_COUNT] = {
    [IR_F32] = "f32", [IR_BF16] = "bf16", [IR_F16] = "f16",
    [IR_I32] = "i32", [IR_E4M3] = "e4m3", [IR_E8M0] = "e8m0",
};
static_assert(IR_DTYPE_COUNT == 6, "update ir_dtype_name");

const char *const ir_precision_name[3] = {"bf16", "mxfp8", "fp8-block"};

const char *ir_op_name(IrOp op)
{
    if ((unsigned)op >= IR_OP_COUNT)
        die("bad op %d", (int)op);
    return ir_op_info[op].name;
}

int ir_op_lookup(const char *name)
{
    for (int i = 0; i < IR_OP_COUNT; i++)
        if (strcmp(ir_op_info[i].name, name) == 0)
            return i;
    return -1;
}

int ir_attr_lookup(const char *name)
{
    for (int i = 0; i < IR_ATTR_COUNT; i++)
        if (strcmp(ir_attr_name[i], name) == 0)
            return i;
    return -1;
}

int ir_dtype_lookup(const char *name)
{
    for (int i = 0; i < IR_DTYPE_COUNT; i++)
        if (strcmp(ir_dtype_name[i], name) == 0)
            return i;
    return -1;
}

int ir_dtype_is_float(IrDType t) { return t != IR_I32; }

void ir_train_defaults(IrTrain *t)
{
    memset(t, 0, sizeof *t);
    t->optimizer = "adamw";
    t->lr = 3e-4;
    t->beta1 = 0.9;
    t->beta2 = 0.95;
    t->eps = 1e-8;
    t->weight_decay = 0.1;
    t->schedule = "warmup_cosine";
    t->warmup = 100;
    t->min_lr = 3e-5;
    t->precision = IR_PREC_BF16;
    t->ep = 1;
    t->dp = 1;
    t->batch = 8;
    t->seq = 128;
    t->grad_clip = 1.0;
    t->steps = 1000;
    t->alphabet = "none";
    t->objective = "causal_lm";
    t->aux_loss_coef = 0.0;
}

/* ---- unique names: open-addressing string set in the arena ---- */

struct NameSet {
    const char **slots;
    int *next;  /* per slot: the next suffix nameset_unique() tries for it */
    int cap, len;
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;  /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The slot holding s, or the empty slot where it would go. */
static uint64_t slot_of(const NameSet *ns, const char *s)
{
    uint64_t mask = (uint64_t)ns->cap - 1, i = hash_str(s) & mask;
    while (ns->slots[i] && strcmp(ns->slots[i], s) != 0)
        i = (i + 1) & mask;
    return i;
}

int nameset_has(const NameSet *ns, const char *s)
{
    return ns->slots[slot_of(ns, s)] != NULL;
}

void nameset_add(Arena *a, NameSet *ns, const char *s)
{
    if ((ns->len + 1) * 2 > ns->cap) {
        NameSet bigger = {arena_calloc(a, (size_t)ns->cap * 2, sizeof(char *)),
                          arena_calloc(a, (size_t)ns->cap * 2, sizeof(int)), ns->cap * 2, 0};
        for (int i = 0; i < ns->cap; i++)
            if (ns->slots[i]) {
                uint64_t j = slot_of(&bigger, ns->slots[i]);
                bigger.slots[j] = ns->slots[i];
                bigger.next[j] = ns->next[i];
                bigger.len++;
            }
        *ns = bigger;
    }
    uint64_t i = slot_of(ns, s);
    if (!ns->slots[i]) {
        ns->slots[i] = s;
        ns->len++;
    }
}

const char *nameset_unique(Arena *a, NameSet *ns, const char *base)
{
    uint64_t b = slot_of(ns, base);
    if (!ns->slots[b]) {
        nameset_add(a, ns, base);
        return base;
    }
    /* Resume after the last suffix handed out for this base: probing from
     * .1 every time made n equal labels cost O(n^2) time and arena (a 10 MB
     * file repeating one statement ran for hours). Suffixes skipped earlier
     * were taken then and still are, so the result is the same. */
    int i = ns->next[b] ? ns->next[b] : 1;
    const char *name;
    while (nameset_has(ns, name = arena_printf(a, "%s.%d", base, i)))
        i++;
    ns->next[b] = i + 1;  /* before the add, which may move the slots */
    nameset_add(a, ns, name);
    return name;
}

NameSet *nameset_new(Arena *a)
{
    NameSet *ns = arena_alloc(a, sizeof *ns);
    ns->cap = 256;
    ns->slots = arena_calloc(a, 256, sizeof(char *));
    ns->next = arena_calloc(a, 256, sizeof(int));
    return ns;
}

IrGraph *ir_graph_new(Arena *arena, const char *model, const char *file)
{
    IrGraph *g = arena_alloc(arena, sizeof *g);
    g->arena = arena;
    g->model = model;
    g->file = file;
    g->names = nameset_new(arena);
    ir_train_defaults(&g->train);
    return g;
}

static const char *unique_name(IrGraph *g, const char *scope, const char *label)
{
    const char *base = scope && *scope ? arena_printf(g->arena, "%s.%s", scope, label)
                                       : arena_strdup(g->arena, label);
    return nameset_unique(g->arena, g->names, base);
}

IrNode *ir_node_new(IrGraph *g, IrOp op, int nsrc, IrNode *const *src,
                    const char *scope, const char *label, SrcLoc loc)
{
    if (nsrc > IR_MAX_SRC)
        die("%s: %d sources", ir_op_name(op), nsrc);
    IrNode *n = arena_alloc(g->arena, sizeof *n);
    n->op = op;
    n->nsrc = nsrc;
    for (int i = 0; i < nsrc; i++) {
        if (!src[i])
            die("%s: source %d is NULL", ir_op_name(op), i);
        n->src[i] = src[i];
        n->src_loc[i] = loc;
    }
    n->label = label ? arena_strdup(g->arena, label) : ir_op_name(op);
    n->scope = scope ? arena_strdup(g->arena, scope) : "";
    n->name = unique_name(g, n->scope, n->label);
    n->loc = loc;
    n->dtype = IR_F32;
    if (g->nnodes == g->cap) {
        int cap = g->cap ? g->cap * 2 : 256;
        IrNode **nodes = arena_calloc(g->arena, (size_t)cap, sizeof *nodes);
        if (g->nnodes)
            memcpy(nodes, g->nodes, (size_t)g->nnodes * sizeof *nodes);
        g->nodes = nodes;
        g->cap = cap;
    }
    n->id = g->nnodes;
    g->nodes[g->nnodes++] = n;
    return n;
}

void ir_set_attr_i(IrNode *n, IrAttrKey k, int64_t v) { n->attr[k].i = v; n->attr_set |= 1u << k; }
void ir_set_attr_f(IrNode *n, IrAttrKey k, double v) { n->attr[k].f = v; n->attr_set |= 1u << k; }
void ir_set_attr_s(IrNode *n, IrAttrKey k, const char *v) { n->attr[k].s = v; n->attr_set |= 1u << k; }
int ir_has_attr(const IrNode *n, IrAttrKey k) { return (n->attr_set >> k) & 1u; }

static void need_attr(const IrNode *n, IrAttrKey k)
{
    if (!ir_has_attr(n, k))
        die("node %s (%s) has no attribute %s", n->name, ir_node_op_name(n), ir_attr_name[k]);
}

int64_t ir_attr_i(const IrNode *n, IrAttrKey k) { need_attr(n, k); return n->attr[k].i; }
double ir_attr_f(const IrNode *n, IrAttrKey k) { need_attr(n, k); return n->attr[k].f; }
const char *ir_attr_s(const IrNode *n, IrAttrKey k) { need_attr(n, k); return n->attr[k].s; }

int64_t ir_numel(const IrNode *n)
{
    int64_t e = 1;
    for (int i = 0; i < n->rank; i++)
        e *= n->shape[i];
    return e;
}

const char *ir_shape_str(int rank, const int64_t *shape, char *buf, size_t size)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, size - o, "[");
    for (int i = 0; i < rank && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < size)
        snprintf(buf + o, size - o, "]");
    return buf;
}

const char *ir_type_str(const IrNode *n, char *buf, size_t size)
{
    char sh[128];
    snprintf(buf, size, "%s%s", ir_dtype_name[n->dtype], ir_shape_str(n->rank, n->shape, sh, sizeof sh));
    return buf;
}

void ir_graph_renumber(IrGraph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        g->nodes[i]->id = i;
}

void ir_count_uses(IrGraph *g)
{
    for (int i = 0; i < g->nnodes; i++)
        g->nodes[i]->nuses = 0;
    for (int i = 0; i < g->nnodes; i++)
        for (int s = 0; s < g->nodes[i]->nsrc; s++)
            g->nodes[i]->src[s]->nuses++;
}

void ir_graph_move(IrGraph *g, IrNode *n, int pos)
{
    int from = n->id;
    if (pos < 0 || pos > from || g->nodes[from] != n)
        die("ir_graph_move: %s from %d to %d", n->name, from, pos);
    memmove(g->nodes + pos + 1, g->nodes + pos, sizeof(IrNode *) * (size_t)(from - pos));
    g->nodes[pos] = n;
    ir_graph_renumber(g);
}

void ir_replace_uses(IrGraph *g, IrNode *from, IrNode *to)
{
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *u = g->nodes[i];
        if (u == to)
            continue;
        for (int s = 0; s < u->nsrc; s++)
            if (u->src[s] == from)
                u->src[s] = to;
    }
    if (g->loss == from)
        g->loss = to;
    if (from->is_output) {
        to->is_output = 1;
        from->is_output = 0;
        if (!to->output_name)
            to->output_name = from->output_name ? from->output_name : from->label;
    }
    for (int p = 0; p < g->nparams; p++)
        if (g->grads[p] == from)
            g->grads[p] = to;
}

int ir_remove_unused(IrGraph *g)
{
    int removed = 0;
    ir_count_uses(g);
    for (int i = g->nnodes - 1; i >= 0; i--) {
        IrNode *n = g->nodes[i];
        if (n->nuses || n->is_output || n == g->loss || (ir_op_info[n->op].flags & OPF_LEAF))
            continue;
        for (int s = 0; s < n->nsrc; s++)
            n->src[s]->nuses--;
        n->id = -1;  /* mark */
        removed++;
    }
    int j = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->id != -1)
            g->nodes[j++] = g->nodes[i];
    g->nnodes = j;
    ir_graph_renumber(g);
    return removed;
}

void ir_add_decision(IrGraph *g, const char *pass, const IrNode *root, int fused, const char *result,
                     const char *reason)
{
    ir_add_decision_as(g, pass, root, fused, fused ? "FUSED" : "NOT FUSED", result, reason);
}

void ir_add_decision_as(IrGraph *g, const char *pass, const IrNode *root, int fused, const char *action,
                        const char *result, const char *reason)
{
    IrDecision *d = arena_alloc(g->arena, sizeof *d);
    d->pass = pass;
    d->action = action;
    d->where = root->scope && *root->scope ? root->scope : root->name;
    d->loc = root->loc;
    d->fused = fused;
    d->result = result ? arena_strdup(g->arena, result) : NULL;
    d->reason = reason ? arena_strdup(g->arena, reason) : NULL;
    ptrvec_push(g->arena, &g->decisions, d);
}

const char *ir_node_op_name(const IrNode *n)
{
    return n->op == IR_OP_CUSTOM && n->custom ? n->custom->name : ir_op_name(n->op);
}

int ir_node_arity(const IrNode *n)
{
    return n->op == IR_OP_CUSTOM ? (n->custom ? n->custom->arity : -1) : ir_op_info[n->op].arity;
}

void ir_reinfer_all(IrGraph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (!(ir_op_info[n->op].flags & OPF_LEAF) && !ir_infer_node(n, NULL))
            die("node %s (%s) no longer type-checks", n->name, ir_node_op_name(n));
    }
}
