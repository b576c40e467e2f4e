/* compile.h - the front half as one call: read, parse, lower, run passes. */
#ifndef MOEC_DRIVER_COMPILE_H
#define MOEC_DRIVER_COMPILE_H

#include "../passes/pass.h"
#include "../compiler/lower.h"

enum { DRIVER_MAX_FILE = 64 << 20 };  /* larger model files are refused */

typedef struct Compilation {
    Arena arena;
    Diag diag;
    char *text;          /* the source, malloc'd */
    size_t len;
    IrGraph *graph;      /* NULL after errors */
    LowerOptions opts;   /* set before compilation_run; zero = as the file says */
    int kernels;         /* PlanKernels for driver_make_plan (moec compile --kernels; 0 reference) */
} Compilation;

/* Reads `path` ("-" is stdin). Reports a missing/unreadable/oversized file
 * as an error on err_out; returns 0 then. */
int compilation_read(Compilation *c, const char *path, FILE *err_out);
/* Parses and lowers c->text into c->graph; then, if ctx is non-NULL, runs
 * the pass pipeline. Returns 0 on success, 1 after user errors. */
int compilation_run(Compilation *c, const char *path, const char *text, size_t len, FILE *err_out, PassCtx *ctx);
void compilation_free(Compilation *c);
/* How many times this process ran compilation_run (for the tests that a
 * training binary starts without compiling). */
int compilation_count(void);

#endif
