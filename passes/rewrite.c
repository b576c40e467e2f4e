/* rewrite.c - applying rewrite rules and recording every decision. */
#include "rewrite.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../util/util.h"

int rewrite_decline(RewriteMatch *m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->reason, sizeof m->reason, fmt, ap);
    va_end(ap);
    return RW_DECLINE;
}

const char *rewrite_where(const IrGraph *g, const IrNode *n, char *buf, size_t size)
{
    snprintf(buf, size, "%s:%d", g->file, n->loc.line);
    return buf;
}

int rewrite_other_users(const IrGraph *g, const IrNode *n, const IrNode *except, char *buf, size_t size)
{
    int count = 0;
    size_t o = 0;
    char w0[256];
    buf[0] = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *u = g->nodes[i];
        if (u == except)
            continue;
        int uses = 0;
        for (int s = 0; s < u->nsrc; s++)
            uses |= u->src[s] == n;
        if (!uses)
            continue;
        if (count < 3 && o < size) {
            char w[256];
            o += (size_t)snprintf(buf + o, size - o, "%s%s at %s", count ? ", " : "", u->name,
                                  rewrite_where(g, u, w, sizeof w));
        }
        count++;
    }
    if (n->is_output && o < size) {
        o += (size_t)snprintf(buf + o, size - o, "%sthe model's output `%s` (made at %s)", count ? " and " : "",
                              n->output_name ? n->output_name : n->label, rewrite_where(g, n, w0, sizeof w0));
        count++;
    }
    if (count > 3 && o < size)
        snprintf(buf + o, size - o, " and %d more", count - 3);
    return count;
}

int rewrite_apply(IrGraph *g, PassCtx *ctx, const char *pass, const RewriteRule *rules, int nrules)
{
    int rewrites = 0;
    /* nodes appended by rewrites are not visited again in this sweep */
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *root = g->nodes[i];
        for (int r = 0; r < nrules; r++) {
            if (root->op != rules[r].root)
                continue;
            ir_count_uses(g);
            if (root->nuses == 0 && !root->is_output && root != g->loss)
                continue;  /* replaced earlier in this sweep, or dead */
            RewriteMatch m;
            memset(&m, 0, sizeof m);
            int got = rules[r].match(g, root, &m, ctx);
            if (got == RW_NOT_CANDIDATE)
                continue;
            if (got == RW_DECLINE) {
                if (!m.reason[0])
                    die("rule %s declined %s without a reason", rules[r].name, root->name);
                ir_add_decision(g, pass, root, 0, NULL, m.reason);
                ctx->counters[1]++;
                continue;
            }
            IrNode *rep = rules[r].rewrite(g, &m, ctx);
            if (!ir_infer_node(rep, ctx->diag))
                die("rule %s built an ill-typed %s", rules[r].name, rep->name);
            for (int s = 0; s < rep->nsrc; s++)
                if (rep->src[s]->id >= root->id)
                    die("rule %s: source %s of %s does not precede the root %s", rules[r].name, rep->src[s]->name,
                        rep->name, root->name);
            ir_graph_move(g, rep, root->id);
            ir_replace_uses(g, root, rep);
            ir_add_decision(g, pass, root, 1, rep->name, m.reason[0] ? m.reason : NULL);
            ctx->counters[0]++;
            rewrites++;
            i = rep->id;  /* continue after the replacement */
            break;
        }
    }
    if (rewrites)
        ir_remove_unused(g);
    return rewrites;
}
