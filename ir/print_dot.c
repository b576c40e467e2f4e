/* print_dot.c - the IR as a Graphviz digraph: one cluster per layer (the
 * outermost repeat iterations), parameters as notes, losses doubled. */
#include <stdio.h>
#include <string.h>

#include "ir.h"

static void dot_id(const IrNode *n, FILE *out) { fprintf(out, "n%d", n->id); }

static void dot_node(const IrNode *n, FILE *out, const char *indent)
{
    char tb[160];
    const char *shape = n->op == IR_OP_PARAM ? "note" : n->op == IR_OP_INPUT ? "invhouse"
                        : (ir_op_info[n->op].flags & OPF_LOSS) ? "doubleoctagon" : "box";
    fprintf(out, "%s", indent);
    dot_id(n, out);
    fprintf(out, " [shape=%s, label=\"%s\\n%s\\n%s\"];\n", shape, n->name, ir_node_op_name(n),
            n->rank >= 0 ? ir_type_str(n, tb, sizeof tb) : "?");
}

void ir_print_dot(const IrGraph *g, FILE *out)
{
    fprintf(out, "digraph \"%s\" {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n", g->model);
    /* nodes outside any layer */
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i]->layer)
            dot_node(g->nodes[i], out, "  ");
    /* one cluster per layer, in order of first appearance */
    int cluster = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (!n->layer)
            continue;
        int first = 1;
        for (int j = 0; j < i; j++)
            if (g->nodes[j]->layer && strcmp(g->nodes[j]->layer, n->layer) == 0) {
                first = 0;
                break;
            }
        if (!first)
            continue;
        fprintf(out, "  subgraph cluster_%d {\n    label=\"%s\";\n    style=rounded;\n", cluster++, n->layer);
        for (int j = i; j < g->nnodes; j++)
            if (g->nodes[j]->layer && strcmp(g->nodes[j]->layer, n->layer) == 0)
                dot_node(g->nodes[j], out, "    ");
        fprintf(out, "  }\n");
    }
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        for (int s = 0; s < n->nsrc; s++) {
            fprintf(out, "  ");
            dot_id(n->src[s], out);
            fprintf(out, " -> ");
            dot_id(n, out);
            fprintf(out, ";\n");
        }
    }
    fprintf(out, "}\n");
}
