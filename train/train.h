/* train.h - the training binary's main program. */
#ifndef MOEC_TRAIN_H
#define MOEC_TRAIN_H

#include "../ir/ir.h"

/* Runs a training binary whose plan is the JSON payload `plan_json`
 * (see payload.h). Returns the process exit status. */
int train_main(int argc, char **argv, const char *plan_json);

/* Checks that a model can be trained on an alphabet's tokens: the train
 * section names protein or dna, and every embedding table and the logits
 * have that many rows/classes. Reports located errors through d (at the
 * model's declarations); returns 1 when it fits. */
int train_check_alphabet(const IrGraph *g, Diag *d);

/* Builds the JSON payload for a model file's source text and the pass
 * plugins it was compiled with (absolute paths; loaded again at start-up).
 * Caller frees. */
char *train_plan_json(const char *model_path, const char *source, size_t len, const char *const *plugins,
                      int nplugins, const char *precision /* override, or NULL */, int64_t ep /* 0: keep */);

#endif
