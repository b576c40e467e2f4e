/* comm.c - the transport-independent parts of comm.h: group arithmetic
 * (rank = dp_rank * ep + ep_rank), error recording, the fixed-order sum the
 * transports share (comm_impl.h), and comm_single(), the world-1 transport
 * where every collective is a local copy. */
#include "comm.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_impl.h"

int comm_group_size(const Comm *c, CommGroup g)
{
    switch (g) {
    case COMM_WORLD: return c->world;
    case COMM_EP: return c->ep;
    case COMM_DP: return c->dp;
    }
    return 0;
}

int comm_group_rank(const Comm *c, CommGroup g)
{
    switch (g) {
    case COMM_WORLD: return c->rank;
    case COMM_EP: return comm_ep_rank(c);
    case COMM_DP: return comm_dp_rank(c);
    }
    return -1;
}

int comm_group_member(const Comm *c, CommGroup g, int i)
{
    switch (g) {
    case COMM_WORLD: return i;
    case COMM_EP: return comm_dp_rank(c) * c->ep + i;   /* same dp_rank, ep_rank i */
    case COMM_DP: return i * c->ep + comm_ep_rank(c);   /* same ep_rank, dp_rank i */
    }
    return -1;
}

const char *comm_group_name(CommGroup g)
{
    switch (g) {
    case COMM_WORLD: return "world";
    case COMM_EP: return "ep";
    case COMM_DP: return "dp";
    }
    return "?";
}

const char *comm_op_name(CommOpKind op)
{
    switch (op) {
    case COMM_OP_ALLREDUCE_F32: return "allreduce_f32";
    case COMM_OP_ALLREDUCE_F64: return "allreduce_f64";
    case COMM_OP_ALLGATHER: return "allgather";
    case COMM_OP_ALLTOALLV: return "alltoallv";
    case COMM_OP_BARRIER: return "barrier";
    }
    return "?";
}

int comm_fail(Comm *c, const char *fmt, ...)
{
    if (c->error[0])  /* the first failure is the cause; later ones are consequences */
        return 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    if (!c->error[0])
        snprintf(c->error, sizeof c->error, "communication failed");
    return 0;
}

void comm_abort(Comm *c, const char *why)
{
    if (!why || !*why)
        why = "aborted";
    if (c->ops && c->ops->abort)
        c->ops->abort(c, why);
    comm_fail(c, "rank %d aborted: %s", c->rank, why);
}

void comm_free(Comm *c)
{
    if (c)
        c->ops->destroy(c);
}

void comm_init_base(Comm *c, int rank, int world, int ep)
{
    memset(c, 0, sizeof *c);
    c->rank = rank;
    c->world = world;
    c->ep = ep;
    c->dp = world / ep;
}

int comm_check_layout(int rank, int world, int ep, char *err, size_t errlen)
{
    if (world < 1) {
        snprintf(err, errlen, "world size %d: need at least 1 rank", world);
        return 0;
    }
    if (ep < 1 || world % ep != 0) {
        snprintf(err, errlen, "expert-parallel size %d does not divide the world size %d", ep, world);
        return 0;
    }
    if (rank < 0 || rank >= world) {
        snprintf(err, errlen, "rank %d is outside the world [0, %d)", rank, world);
        return 0;
    }
    return 1;
}

int comm_check_call(Comm *c, CommGroup g, int64_t n)
{
    if (c->error[0])
        return 0;  /* keep the first message: it names the cause */
    if (g != COMM_WORLD && g != COMM_EP && g != COMM_DP)
        return comm_fail(c, "rank %d: collective on unknown group %d", c->rank, (int)g);
    if (n < 0)
        return comm_fail(c, "rank %d: collective with negative length %lld", c->rank, (long long)n);
    return 1;
}

/* Blocked so that the accumulator stays in cache and the inner loops
 * vectorise, while out may alias an input: each block is read completely
 * before it is written. Only additions: there is nothing to contract into
 * an FMA, so the bits are the same at any optimisation level. */
#define SUM_BLOCK 1024
#define DEFINE_SUM(NAME, T)                                                  \
    void NAME(T *out, const T *const *in, int nin, int64_t n)                \
    {                                                                        \
        T acc[SUM_BLOCK];                                                    \
        for (int64_t b = 0; b < n; b += SUM_BLOCK) {                         \
            int64_t m = n - b < SUM_BLOCK ? n - b : SUM_BLOCK;               \
            memcpy(acc, in[0] + b, (size_t)m * sizeof(T));                   \
            for (int j = 1; j < nin; j++) {                                  \
                const T *x = in[j] + b;                                      \
                for (int64_t i = 0; i < m; i++)                              \
                    acc[i] += x[i];                                          \
            }                                                                \
            memcpy(out + b, acc, (size_t)m * sizeof(T));                     \
        }                                                                    \
    }
DEFINE_SUM(comm_sum_f32, float)
DEFINE_SUM(comm_sum_f64, double)

int comm_env_seconds(const char *name, int def, int *out, char *err, size_t errlen)
{
    const char *s = getenv(name);
    if (!s || !*s) {
        *out = def;
        return 1;
    }
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > INT_MAX / 1000) {
        snprintf(err, errlen, "%s=%s: expected a number of seconds (0 to %d)", name, s, INT_MAX / 1000);
        return 0;
    }
    *out = (int)v;
    return 1;
}

int64_t comm_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- comm_single: world 1 ---------------------------------------------- */

static int single_allreduce_f32(Comm *c, CommGroup g, float *buf, int64_t n)
{
    (void)buf;
    return comm_check_call(c, g, n);
}

static int single_allreduce_f64(Comm *c, CommGroup g, double *buf, int64_t n)
{
    (void)buf;
    return comm_check_call(c, g, n);
}

static int single_allgather(Comm *c, CommGroup g, const void *in, void *out, size_t bytes)
{
    if (!comm_check_call(c, g, 0))
        return 0;
    if (bytes && in != out)
        memmove(out, in, bytes);
    return 1;
}

static int single_alltoallv(Comm *c, CommGroup g, const void *send, const size_t *send_bytes,
                            const size_t *send_off, void *recv, const size_t *recv_bytes, const size_t *recv_off)
{
    if (!comm_check_call(c, g, 0))
        return 0;
    if (send_bytes[0] != recv_bytes[0])
        return comm_fail(c, "rank 0: alltoallv on %s sends %zu bytes to itself but expects %zu", comm_group_name(g),
                         send_bytes[0], recv_bytes[0]);
    if (send_bytes[0])
        memmove((char *)recv + recv_off[0], (const char *)send + send_off[0], send_bytes[0]);
    return 1;
}

static int single_barrier(Comm *c, CommGroup g)
{
    return comm_check_call(c, g, 0);
}

static void single_abort(Comm *c, const char *why)
{
    (void)c;
    (void)why;  /* nobody else to tell */
}

static void single_destroy(Comm *c)
{
    free(c);
}

static const CommOps single_ops = {
    .name = "single",
    .allreduce_f32 = single_allreduce_f32,
    .allreduce_f64 = single_allreduce_f64,
    .allgather = single_allgather,
    .alltoallv = single_alltoallv,
    .barrier = single_barrier,
    .abort = single_abort,
    .destroy = single_destroy,
};

Comm *comm_single(void)
{
    Comm *c = malloc(sizeof *c);
    if (!c)
        return NULL;
    comm_init_base(c, 0, 1, 1);
    c->ops = &single_ops;
    return c;
}
