/* train.h - the training binary's main program. */
#ifndef MOEC_TRAIN_H
#define MOEC_TRAIN_H

#include "../ir/ir.h"
#include "../plan/plan.h"

/* Runs a training binary on its plan (read from its payload, plan/payload.h).
 * Returns the process exit status. */
int train_main(int argc, char **argv, const Plan *plan);

/* Checks that a model can be trained on an alphabet's tokens: the train
 * section names protein or dna, and every embedding table and the logits
 * have that many rows/classes. Reports located errors through d (at the
 * model's declarations); returns 1 when it fits. */
int train_check_alphabet(const IrGraph *g, Diag *d);

#endif
