/* comm_impl.h - what the transports of comm.h share and their users need
 * not see: the collective kinds (for messages and mismatch checks), how an
 * allreduce splits into per-rank chunks, the fixed-order sum that makes
 * every transport's result bit-identical, and environment parsing. */
#ifndef MOEC_COMM_IMPL_H
#define MOEC_COMM_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"

typedef enum CommOpKind {
    COMM_OP_ALLREDUCE_F32 = 1,
    COMM_OP_ALLREDUCE_F64,
    COMM_OP_ALLGATHER,
    COMM_OP_ALLTOALLV,
    COMM_OP_BARRIER,
} CommOpKind;

const char *comm_op_name(CommOpKind op);

/* Fills the common fields; the caller sets ops and impl. */
void comm_init_base(Comm *c, int rank, int world, int ep);
/* 1 when 0 <= rank < world, ep >= 1 and ep divides world; else 0 and a message. */
int comm_check_layout(int rank, int world, int ep, char *err, size_t errlen);
/* 0 with a message when c already failed, g is not a group, or n < 0. */
int comm_check_call(Comm *c, CommGroup g, int64_t n);

/* Part k of `parts` near-equal parts of [0, n): [*lo, *hi). */
static inline void comm_chunk(int64_t n, int parts, int k, int64_t *lo, int64_t *hi)
{
    int64_t q = n / parts, r = n % parts;
    *lo = q * k + (k < r ? k : r);
    *hi = *lo + q + (k < r ? 1 : 0);
}

/* out[i] = ((in[0][i] + in[1][i]) + in[2][i]) + ... for i < n: the one sum
 * order of every transport. out may be any one of the in[] (in place). */
void comm_sum_f32(float *out, const float *const *in, int nin, int64_t n);
void comm_sum_f64(double *out, const double *const *in, int nin, int64_t n);

/* Seconds from environment variable `name` (a non-negative integer), or def
 * when it is unset or empty. 0 and a message when it is malformed. */
int comm_env_seconds(const char *name, int def, int *out, char *err, size_t errlen);

/* Monotonic clock in milliseconds. */
int64_t comm_now_ms(void);

/* For the NCCL transport, which keeps its TCP bootstrap as a liveness
 * channel: 1 when the peer's connection is closed or reset (the process
 * exited) or carries its failure notice (then in why, else why is ""),
 * without blocking; *pid is the peer's pid. */
int comm_tcp_peer_gone(Comm *tcp, int peer, int *pid, char *why, size_t whylen);

#endif
