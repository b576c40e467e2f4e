/* rewrite.h - the pattern-rewrite helper that fusion passes are built on.
 *
 * A pass declares its rules as a table of {name, root op, match, rewrite}
 * (in the manner of MLIR's rewrite patterns and tinygrad's pattern tables).
 * rewrite_apply() visits every node whose op is a rule's root, in graph
 * order, and asks the rule's match:
 *
 *   RW_NOT_CANDIDATE  the node does not start this pattern at all (silent);
 *   RW_DECLINE        it is a candidate but cannot be rewritten: match has
 *                     filled m->reason with words a user understands;
 *   RW_MATCH          it can be rewritten: m->nodes holds the chain.
 *
 * match must not change the graph; only rewrite does, and only after a
 * match succeeded. Every candidate is recorded in g->decisions, fused or
 * declined with its reason, so that `moec explain` never hides a decline.
 * After all rewrites, nodes left without users are removed. */
#ifndef MOEC_REWRITE_H
#define MOEC_REWRITE_H

#include "pass.h"

enum { RW_NOT_CANDIDATE = 0, RW_DECLINE = 1, RW_MATCH = 2 };
enum { RW_MAX_NODES = 8 };

typedef struct RewriteMatch {
    IrNode *nodes[RW_MAX_NODES];   /* the matched chain; nodes[0] is the root */
    int nnodes;
    char reason[512];              /* RW_DECLINE: why, for the user */
} RewriteMatch;

typedef struct RewriteRule {
    const char *name;
    IrOp root;
    int (*match)(const IrGraph *g, IrNode *root, RewriteMatch *m, const PassCtx *ctx);
    /* Builds the replacement and returns it; rewrite_apply moves it to the
     * root's position and redirects the root's users to it. */
    IrNode *(*rewrite)(IrGraph *g, RewriteMatch *m, PassCtx *ctx);
} RewriteRule;

/* Applies the rules; returns the number of rewrites. Counters: 0 = rewrites,
 * 1 = declined candidates (the pass's first two statistics). */
int rewrite_apply(IrGraph *g, PassCtx *ctx, const char *pass, const RewriteRule *rules, int nrules);

/* Formats a decline reason into m->reason. Returns RW_DECLINE. */
int rewrite_decline(RewriteMatch *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* "models/x.moe:41" for a node, for reasons that point elsewhere. */
const char *rewrite_where(const IrGraph *g, const IrNode *n, char *buf, size_t size);

/* The users of n other than `except` (NULL: all), for "also feeds" reasons:
 * writes up to a few names with locations into buf; returns the count. */
int rewrite_other_users(const IrGraph *g, const IrNode *n, const IrNode *except, char *buf, size_t size);

#endif
