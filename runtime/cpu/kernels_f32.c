/* kernels_f32.c - the reference kernels with fp32 storage (training). */
#include <stdlib.h>

#include "cpu.h"
#include "mxfp8.h"
#include "fp8_block.h"
#include "../comm/comm.h"
#include "../../util/util.h"

typedef float real;
#define KFN(name) name##_f32
#include "kernels.inc"

void cpu_exec_node_f32(const IrNode *n, void *const *buf, struct Comm *comm) { exec_node_f32(n, buf, comm); }
