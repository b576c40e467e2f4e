/* lower.h - from the syntax tree to the IR graph. */
#ifndef MOEC_LOWER_H
#define MOEC_LOWER_H

#include "../ir/ir.h"
#include "ast.h"

/* Gives the model its meaning: evaluates constants, reads the train
 * section, inlines blocks, unrolls `repeat`, lowers composite ops
 * (attention, route_topk, dispatch, combine, moe) into IR nodes, and
 * infers every node's shape as it is created. Errors are reported through
 * diag at the user's source line; returns NULL if there were any. */
typedef struct LowerOptions {
    int64_t batch, seq;   /* override the train section (0: keep) */
    int has_precision;    /* override the train section's precision with: */
    IrPrecision precision;
    int64_t ep, dp;       /* override parallel ep / dp (0: keep) */
} LowerOptions;

/* opt may be NULL. */
IrGraph *lower_model(Arena *arena, Diag *diag, const AstModel *model, const char *path, const LowerOptions *opt);

/* The built-in ops of the language, for `moec ops` and the docs. */
typedef struct BuiltinDoc {
    const char *name;
    const char *signature;
    const char *summary;
} BuiltinDoc;

int lower_builtin_count(void);
BuiltinDoc lower_builtin_doc(int i);

#endif
