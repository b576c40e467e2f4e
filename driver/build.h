/* build.h - from a model file to a Plan: the compiler as one call.
 *
 * The layers run one way: front end (compiler/) -> IR -> passes -> plan ->
 * codegen; this layer strings them together for the two programs that
 * need a whole plan: `moec compile` (cli/) and the training binary (train/),
 * which calls driver_replan -- and nothing else of the compiler -- when it
 * is asked for another batch size or world size than it was compiled for. */
#ifndef MOEC_DRIVER_BUILD_H
#define MOEC_DRIVER_BUILD_H

#include "compile.h"
#include "../plan/plan.h"

/* Makes the Plan of a compiled model: c->graph after the whole pipeline
 * (the plan takes over c's arena; c->graph is NULL after). Records the
 * source and options it came from, and generates the GPU part; a graph the
 * GPU cannot run (a plugin's custom op without CUDA) gets a plan without
 * one, p->gpu_unsupported saying why. Returns NULL with a message in err. */
Plan *driver_make_plan(Compilation *c, const char *path, const char *const *plugins, int nplugins,
                       int has_precision, IrPrecision precision, int64_t ep, char *err, size_t errlen);

/* The plan compiled again from p's source and options for `batch`
 * sequences per step (0: p's) of `seq` tokens (0: p's) over `world` ranks
 * (dp = world / ep).
 * The pass plugins p names must be loaded. Returns NULL with the reason in
 * err (the compiler's own messages go to stderr). */
Plan *driver_replan(const Plan *p, int64_t batch, int64_t seq, int64_t world, char *err, size_t errlen);

/* For tests: how many times this process ran the front end and the pass
 * pipeline (compilation_run). A training binary that needs no re-plan
 * must leave it at 0. */
int driver_compilations(void);

#endif
