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

static const char *const init_names[] = {"normal", "uniform", "zeros", "ones", "constant", NULL};
static const char *const precision_names[] = {"bf16", "mxfp8", "fp8-block", NULL};
static const char *const group_names[] = {"world", "dp", NULL};
static const char *const axis_names[] = {"rowwise", "colwise", "tile", NULL};
static const char *const layout_names[] = {"gate_up", NULL};
static_assert(sizeof precision_names / sizeof *precision_names == IR_PREC_FP8_BLOCK + 2, "IrPrecision and its names");
static_assert(sizeof init_names / sizeof *init_names == IR_INIT_CONSTANT + 2, "IrInit and its names");

const char *const *ir_attr_enum_names(IrAttrKey k)
{
    switch (k) {
    case IR_ATTR_INIT: return init_names;
    case IR_ATTR_PRECISION: return precision_names;
    case IR_ATTR_GROUP: return group_names;
    case IR_ATTR_AXIS: return axis_names;
    case IR_ATTR_LAYOUT: return layout_names;
    default: return NULL;
    }
}

int ir_attr_enum_lookup(IrAttrKey k, const char *name, size_t n)
{
    const char *const *names = ir_attr_enum_names(k);
    for (int i = 0; names && names[i]; i++)
        if (strlen(names[i]) == n && memcmp(names[i], name, n) == 0)
            return i;
    return -1;
}

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

const char *const ir_optimizer_name[] = {"adamw", NULL};
const char *const ir_schedule_name[] = {"warmup_cosine", "constant", NULL};
const char *const ir_alphabet_name[] = {"protein", "dna", "none", NULL};
const char *const ir_objective_name[] = {"causal_lm", "masked_lm", NULL};
const char *const ir_packing_name[] = {"auto", "concat", "packed", "rows", NULL};
const char *const ir_checkpoint_name[] = {"none", "blocks", NULL};

int ir_node_is_recompute(const IrNode *n)
{
    const char *p = n->name;
    for (const char *q; (q = strstr(p, ".recompute")); p = q + 1)
        if (q[10] == 0 || q[10] == '.')
            return 1;
    return 0;
}


IrPacking ir_train_packing(const IrTrain *t)
{
    if (t->packing != IR_PACK_AUTO)
        return t->packing;
    return t->objective == IR_OBJ_MASKED_LM ? IR_PACK_PACKED : IR_PACK_CONCAT;
}

int ir_name_index(const char *const *names, const char *name, size_t n)
{
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == n && memcmp(names[i], name, n) == 0)
            return i;
    return -1;
}

void ir_train_defaults(IrTrain *t)
{
    memset(t, 0, sizeof *t);
    t->optimizer = IR_OPT_ADAMW;
    t->lr = 3e-4;
    t->beta1 = 0.9;
    t->beta2 = 0.95;
    t->eps = 1e-8;
    t->weight_decay = 0.1;
    t->schedule = IR_SCHED_WARMUP_COSINE;
    t->warmup = 100;
    t->min_lr = 3e-5;
    t->precision = IR_PREC_BF16;
    t->ep = 1;
    t->dp = 1;
    t->batch = 8;
    t->seq = 128;
    t->grad_clip = 1.0;
    t->steps = 1000;
    t->alphabet = IR_ALPHABET_NONE;
    t->objective = IR_OBJ_CAUSAL_LM;
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
void ir_set_attr_e(IrNode *n, IrAttrKey k, int v)
{
    const char *const *names = ir_attr_enum_names(k);
    int count = 0;
    while (names && names[count])
        count++;
    if (ir_attr_kind[k] != IR_AK_E || v < 0 || v >= count)
        die("ir_set_attr_e: %s = %d on %s", ir_attr_name[k], v, n->name ? n->name : "?");
    n->attr[k].i = v;
    n->attr_set |= 1u << k;
}
int ir_has_attr(const IrNode *n, IrAttrKey k) { return (n->attr_set >> k) & 1u; }

static void need_attr(const IrNode *n, IrAttrKey k)
{
    if (!ir_has_attr(n, k))
        die("node %s (%s) has no attribute %s", n->name, ir_node_op_name(n), ir_attr_name[k]);
}

int64_t ir_attr_i(const IrNode *n, IrAttrKey k) { need_attr(n, k); return n->attr[k].i; }
double ir_attr_f(const IrNode *n, IrAttrKey k) { need_attr(n, k); return n->attr[k].f; }
const char *ir_attr_s(const IrNode *n, IrAttrKey k) { need_attr(n, k); return n->attr[k].s; }
int ir_attr_e(const IrNode *n, IrAttrKey k) { need_attr(n, k); return (int)n->attr[k].i; }
const char *ir_attr_e_name(const IrNode *n, IrAttrKey k) { return ir_attr_enum_names(k)[ir_attr_e(n, k)]; }

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

int ir_node_arity_ok(const IrNode *n, int nsrc)
{
    int a = ir_node_arity(n);
    return nsrc == a || (n->op != IR_OP_CUSTOM && (ir_op_info[n->op].flags & OPF_OPTSRC) && nsrc == a - 1);
}

void ir_reinfer_all(IrGraph *g)
{
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        if (!(ir_op_info[n->op].flags & OPF_LEAF) && !ir_infer_node(n, NULL))
            die("node %s (%s) no longer type-checks", n->name, ir_node_op_name(n));
    }
}

/* ---- custom ops by name ---- */

enum { MAX_CUSTOM_OPS = 64 };
static const IrCustomOp *custom_ops[MAX_CUSTOM_OPS];
static int ncustom_ops;

int ir_custom_op_register(const IrCustomOp *op)
{
    const IrCustomOp *have = ir_custom_op_find(op->name, strlen(op->name));
    if (have)
        return have == op;
    if (ncustom_ops == MAX_CUSTOM_OPS || ir_op_lookup(op->name) >= 0)
        return 0;
    custom_ops[ncustom_ops++] = op;
    return 1;
}

const IrCustomOp *ir_custom_op_find(const char *name, size_t len)
{
    for (int i = 0; i < ncustom_ops; i++)
        if (strlen(custom_ops[i]->name) == len && memcmp(custom_ops[i]->name, name, len) == 0)
            return custom_ops[i];
    return NULL;
}

/* ---- name -> node ---- */

static uint64_t hash_mem(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

void ir_node_map_init(IrNodeMap *m, size_t expect)
{
    m->cap = 64;
    while (m->cap < expect * 2)
        m->cap *= 2;
    m->len = 0;
    m->slots = calloc(m->cap, sizeof *m->slots);
    if (!m->slots)
        die("out of memory");
}

void ir_node_map_free(IrNodeMap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->len = 0;
}

static size_t map_slot(const IrNodeMap *m, const char *name, size_t len)
{
    size_t mask = m->cap - 1, i = (size_t)hash_mem(name, len) & mask;
    while (m->slots[i] && !(strncmp(m->slots[i]->name, name, len) == 0 && m->slots[i]->name[len] == 0))
        i = (i + 1) & mask;
    return i;
}

IrNode *ir_node_map_get(const IrNodeMap *m, const char *name, size_t len)
{
    return m->slots[map_slot(m, name, len)];
}

void ir_node_map_put(IrNodeMap *m, IrNode *n)
{
    if ((m->len + 1) * 2 > m->cap) {
        IrNodeMap bigger;
        ir_node_map_init(&bigger, m->cap);
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i])
                bigger.slots[map_slot(&bigger, m->slots[i]->name, strlen(m->slots[i]->name))] = m->slots[i];
        bigger.len = m->len;
        free(m->slots);
        *m = bigger;
    }
    size_t i = map_slot(m, n->name, strlen(n->name));
    if (!m->slots[i])
        m->len++;
    m->slots[i] = n;
}

/* ---- what a name implies ---- */

static int all_digits(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* The length of name without a unique-making .N suffix. */
static size_t name_base_len(const char *name)
{
    size_t n = strlen(name);
    const char *dot = strrchr(name, '.');
    if (dot && dot > name && all_digits(dot + 1, n - (size_t)(dot + 1 - name)))
        return (size_t)(dot - name);
    return n;
}

void ir_name_label(const char *name, IrOp op, size_t *off, size_t *len)
{
    size_t base = name_base_len(name), start = base;
    while (start > 0 && name[start - 1] != '.')
        start--;
    /* route_node() in lower.c labels the routing fields R.FIELD */
    if (start > 0 && (op == IR_OP_TOPK_EXPERTS || op == IR_OP_TOPK_PROBS || op == IR_OP_ROUTE_PLAN ||
                      op == IR_OP_EXPERT_COUNTS || op == IR_OP_DISPATCH_PROBS || op == IR_OP_AUX_LOSS)) {
        start--;
        while (start > 0 && name[start - 1] != '.')
            start--;
    }
    *off = start;
    *len = base - start;
}

int ir_name_scope(const char *name, const char *label, size_t *scope_len)
{
    size_t base = name_base_len(name), ll = strlen(label), n = strlen(name);
    /* label may itself end in what looks like a suffix only when the name is exactly scope.label */
    for (int pass = 0; pass < 2; pass++) {
        size_t b = pass == 0 ? base : n;
        if (b == ll && memcmp(name, label, ll) == 0) {
            *scope_len = 0;
            return 1;
        }
        if (b > ll + 1 && name[b - ll - 1] == '.' && memcmp(name + b - ll, label, ll) == 0) {
            *scope_len = b - ll - 1;
            return 1;
        }
        if (base == n)
            break;
    }
    return 0;
}

void ir_name_layer(const char *scope, const IrNodeMap *m, const char **layer, size_t *len)
{
    size_t n = strlen(scope);
    const IrNode *owner = n ? ir_node_map_get(m, scope, n) : NULL;
    if (owner) {
        *layer = owner->layer;
        *len = owner->layer ? strlen(owner->layer) : 0;
        return;
    }
    /* NAME.NUMBER: the scope repeat gives its iterations (layers.3) */
    const char *dot = strchr(scope, '.');
    if (dot && dot > scope) {
        const char *end = dot + 1;
        while (*end >= '0' && *end <= '9')
            end++;
        if (end > dot + 1 && (*end == '.' || *end == 0)) {
            *layer = scope;
            *len = (size_t)(end - scope);
            return;
        }
    }
    *layer = NULL;
    *len = 0;
}

void ir_param_counts(const IrGraph *g, int64_t *total, double *active)
{
    int64_t experts = 0, E = 0, k = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == IR_OP_TOPK_EXPERTS) {
            k = ir_attr_i(g->nodes[i], IR_ATTR_K);
            E = g->nodes[i]->src[0]->shape[g->nodes[i]->src[0]->rank - 1];
        }
    *total = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->op != IR_OP_PARAM)
            continue;
        int64_t copies = ir_has_attr(n, IR_ATTR_SHARD) ? n->attr[IR_ATTR_SHARD].i : 1;
        *total += ir_numel(n) * copies;
        if (E > 1 && n->rank >= 3 && n->shape[0] * copies == E)
            experts += ir_numel(n) * copies;
    }
    *active = (double)(*total - experts) + (E ? (double)experts * (double)k / (double)E : 0);
}
