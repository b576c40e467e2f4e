/* rewrite.c - applying rewrite rules and recording every decision. */
#include "rewrite.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The live node a (possibly replaced) node stands for now: replaced roots forward to their
 * replacements through fwd, indexed by node id (rewrite_apply). */
static IrNode *resolve(IrNode *n, IrNode *const *fwd, int nfwd)
{
    while (n->id < nfwd && fwd[n->id])
        n = fwd[n->id];
    return n;
}

int rewrite_apply(IrGraph *g, PassCtx *ctx, const char *pass, const RewriteRule *rules, int nrules)
{
    /* Linear in the graph: uses are counted once and kept exact by hand; a replaced root's users are
     * redirected lazily (each node's sources resolved when the sweep reaches it, as every rule looks only
     * upstream of its root, which the sweep has passed); the replacement takes the root's slot and the
     * root goes to the replacement's (the end), so no node shifts. Recounting, rescanning the graph for
     * users and shifting the node array after every rewrite made 100,000 layers take hours. */
    int rewrites = 0, nfwd = 0, capfwd = 0;
    IrNode **fwd = NULL;
    ir_count_uses(g);
    /* nodes appended by rewrites are not visited again in this sweep */
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *root = g->nodes[i];
        for (int s = 0; nfwd && s < root->nsrc; s++)
            root->src[s] = resolve(root->src[s], fwd, nfwd);
        for (int r = 0; r < nrules; r++) {
            if (root->op != rules[r].root)
                continue;
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
            /* nodes the rule made (rep among them) have no uses counted yet; rep's sources gain one each */
            for (int s = 0; s < rep->nsrc; s++)
                rep->src[s]->nuses++;
            /* rep takes root's slot, root (now dead) rep's */
            int at = root->id, from = rep->id;
            g->nodes[at] = rep;
            g->nodes[from] = root;
            rep->id = at;
            root->id = from;
            rep->nuses = root->nuses;
            root->nuses = 0;
            if (g->loss == root)
                g->loss = rep;
            if (root->is_output) {
                rep->is_output = 1;
                root->is_output = 0;
                if (!rep->output_name)
                    rep->output_name = root->output_name ? root->output_name : root->label;
            }
            if (g->nnodes > capfwd) {
                capfwd = g->nnodes * 2 + 16;
                fwd = realloc(fwd, sizeof *fwd * (size_t)capfwd);
                if (!fwd)
                    die("out of memory");
            }
            while (nfwd < g->nnodes)
                fwd[nfwd++] = NULL;
            fwd[root->id] = rep;
            ir_add_decision(g, pass, root, 1, rep->name, m.reason[0] ? m.reason : NULL);
            ctx->counters[0]++;
            rewrites++;
            i = rep->id;  /* continue after the replacement */
            break;
        }
    }
    if (rewrites) {
        /* every source was resolved by the sweep; the gradients (not sources) are resolved here */
        for (int p = 0; p < g->nparams; p++)
            if (g->grads && g->grads[p])
                g->grads[p] = resolve(g->grads[p], fwd, nfwd);
        ir_remove_unused(g);
    }
    free(fwd);
    return rewrites;
}
