/* kernels_f64.c - the reference kernels with fp64 storage: the check mode
 * in which every gradient rule is compared with finite differences. */
#include <stdlib.h>

#include "cpu.h"
#include "mxfp8.h"
#include "fp8_block.h"
#include "../comm/comm.h"
#include "../../util/util.h"

typedef double real;
#define KFN(name) name##_f64
#include "kernels.inc"

void cpu_exec_node_f64(const IrNode *n, void *const *buf, struct Comm *comm) { exec_node_f64(n, buf, comm); }
