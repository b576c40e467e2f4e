/* verify.c - structural invariants of an IR graph.
 *
 * Runs after every pass (docs/decisions.md #7). Any
 * failure here is a bug in moec, not in the user's model: the front end
 * has already rejected bad input with a located error. So problems are
 * printed naming the node and the rule, for the developer. */
#include <stdarg.h>
#include <string.h>

#include "ir.h"

/* ops.def: an index op (OPF_INDEX) has an integer result and no gradient,
 * so no row may also claim a gradient rule. */
#define OP(e, name, arity, req, opt, flags)                                  \
    _Static_assert(!(((flags) & OPF_INDEX) && ((flags) & OPF_DIFF)),        \
                   "ops.def: " name " is both OPF_INDEX and OPF_DIFF");
#include "ops.def"
#undef OP

typedef struct V {
    const IrGraph *g;
    FILE *out;
    int nerr;
} V;

static void bad(V *v, const IrNode *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void bad(V *v, const IrNode *n, const char *fmt, ...)
{
    va_list ap;
    v->nerr++;
    if (v->nerr > 50)
        return;
    fprintf(v->out, "verify: %s (%s, id %d): ", n ? n->name : "graph", n ? ir_node_op_name(n) : "-", n ? n->id : -1);
    va_start(ap, fmt);
    vfprintf(v->out, fmt, ap);
    va_end(ap);
    fputc('\n', v->out);
}

int ir_verify(const IrGraph *g, FILE *out)
{
    V v = {g, out, 0};
    Arena scratch;
    arena_init(&scratch);
    NameSet *names = nameset_new(&scratch);
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (!n) {
            bad(&v, NULL, "node slot %d is empty", i);
            continue;
        }
        if (n->id != i)
            bad(&v, n, "id %d at position %d (renumber after editing the node list)", n->id, i);
        if ((unsigned)n->op >= IR_OP_COUNT) {
            bad(&v, n, "op %d out of range", (int)n->op);
            continue;
        }
        const IrOpInfo *info = &ir_op_info[n->op];
        if (n->op == IR_OP_CUSTOM && !n->custom) {
            bad(&v, n, "custom node without a descriptor");
            continue;
        }
        if (!ir_node_arity_ok(n, n->nsrc))
            bad(&v, n, "%d sources, the op takes %d", n->nsrc, ir_node_arity(n));
        for (int s = 0; s < n->nsrc && s < IR_MAX_SRC; s++) {
            const IrNode *src = n->src[s];
            if (!src)
                bad(&v, n, "source %d is missing", s);
            else if (src->id >= i || src->id < 0 || g->nodes[src->id] != src)
                bad(&v, n, "source %d (%s) is not an earlier node of the graph", s, src->name);
        }
        if ((n->attr_set & info->required_attrs) != info->required_attrs)
            for (int k = 0; k < IR_ATTR_COUNT; k++)
                if ((info->required_attrs >> k & 1u) && !ir_has_attr(n, (IrAttrKey)k))
                    bad(&v, n, "required attribute %s is missing", ir_attr_name[k]);
        unsigned allowed = info->required_attrs | info->optional_attrs;
        if (n->op == IR_OP_CUSTOM)
            allowed |= n->custom->attrs;  /* a plugin's op declares its own */
        unsigned extra = n->attr_set & ~allowed;
        for (int k = 0; k < IR_ATTR_COUNT; k++)
            if (extra >> k & 1u)
                bad(&v, n, "attribute %s does not belong to this op", ir_attr_name[k]);
        if (!n->name || !*n->name)
            bad(&v, n, "has no name");
        else if (nameset_has(names, n->name))
            bad(&v, n, "name is not unique");
        else
            nameset_add(&scratch, names, n->name);
        if (n->rank < 0 || n->rank > IR_MAX_RANK) {
            bad(&v, n, "rank %d", n->rank);
            continue;
        }
        for (int d = 0; d < n->rank; d++)
            if (n->shape[d] < 1)
                bad(&v, n, "dimension %d is %lld", d, (long long)n->shape[d]);
        if ((info->flags & OPF_INDEX) && n->dtype != IR_I32)
            bad(&v, n, "an index op's result must be i32, not %s", ir_dtype_name[n->dtype]);
        /* shapes must agree with inference from the sources */
        if (!(info->flags & OPF_LEAF)) {
            IrNode copy = *n;
            if (!ir_infer_node(&copy, NULL))
                bad(&v, n, "shape inference fails on this node");
            else if (copy.dtype != n->dtype || copy.rank != n->rank ||
                     memcmp(copy.shape, n->shape, sizeof(int64_t) * (size_t)n->rank) != 0) {
                char a[160], b[160];
                bad(&v, n, "type %s but its sources give %s", ir_type_str(n, a, sizeof a), ir_type_str(&copy, b, sizeof b));
            }
        }
    }
    if (g->loss) {
        if (g->loss->id < 0 || g->loss->id >= g->nnodes || g->nodes[g->loss->id] != g->loss)
            bad(&v, NULL, "the loss node is not in the graph");
        else if (g->loss->rank != 0)
            bad(&v, g->loss, "the loss is not a scalar");
    }
    arena_free(&scratch);
    return v.nerr;
}
