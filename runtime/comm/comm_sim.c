/* comm_sim.c - the SIM transport: `world` ranks as threads of one process.
 *
 * Each group instance (the world, one EP group per dp_rank, one DP group per
 * ep_rank) has a slot where its members post their buffers. A collective is
 * "post, wait for the group, read the others' buffers directly, wait again":
 * no copies through a mailbox, and every rank reads inputs in group-rank
 * order, so allreduce adds x_0 + x_1 + ... in that order on every rank
 * whatever the thread timing (each rank reduces one chunk, then everyone
 * copies every chunk: the same per-element order, a 1/size share of work).
 *
 * Only the first wait of a collective can fail. After it, every member is
 * inside the same collective running local code, so the later waits always
 * complete; letting them fail would free buffers another rank still reads.
 * The first wait fails when some rank failed or aborted (the world is then
 * unusable and every later call fails naming that rank) or on a deadlock:
 * when every rank that has not left is waiting in such a first wait, none
 * of them can ever be released (mismatched groups, a rank that returned
 * early), so the last one to block reports where each rank waits. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "comm_impl.h"

typedef struct SimPost {
    CommOpKind op;
    int64_t n;                   /* elements (allreduce) or bytes (allgather) */
    void *buf;                   /* allreduce: in and out */
    const void *in;              /* allgather */
    void *out;
    const void *send;            /* alltoallv */
    const size_t *send_bytes, *send_off;
    void *recv;
    const size_t *recv_bytes, *recv_off;
    const void *chunk;           /* allreduce: this rank's reduced part, after the second wait */
} SimPost;

typedef struct SimGroup {
    int size;
    int *members;                /* global rank of each group rank */
    int arrived;
    unsigned long gen;           /* completed waits; a waiter sleeps until it changes */
    SimPost *post;               /* one per group rank */
} SimGroup;

typedef struct SimRank {
    int blocked;                 /* in a first wait that has not completed */
    int gone;                    /* destroyed: will never call again */
    CommOpKind op;
    CommGroup g;
} SimRank;

typedef struct SimWorld {
    pthread_mutex_t mu;
    pthread_cond_t cv;           /* one for all groups: broadcasts are rare and cheap at these sizes */
    int world, ep, dp;
    SimGroup world_group;
    SimGroup *ep_groups;         /* [dp], by dp_rank */
    SimGroup *dp_groups;         /* [ep], by ep_rank */
    SimRank *ranks;
    int nblocked, ngone;
    int failed;
    char failure[640];           /* "rank 2 aborted: ...", "deadlock: ..." */
    Comm *comms;                 /* [world] */
    Comm **ptrs;                 /* [world], what comm_sim_create returns */
} SimWorld;

static SimGroup *sim_group(Comm *c, CommGroup g)
{
    SimWorld *w = c->impl;
    switch (g) {
    case COMM_WORLD: return &w->world_group;
    case COMM_EP: return &w->ep_groups[comm_dp_rank(c)];
    case COMM_DP: return &w->dp_groups[comm_ep_rank(c)];
    }
    return NULL;
}

/* Marks the world failed (the first cause wins) and wakes every waiter. Call with mu held. */
static void sim_set_failed_locked(SimWorld *w, const char *why)
{
    if (!w->failed) {
        w->failed = 1;
        snprintf(w->failure, sizeof w->failure, "%s", why);
    }
    pthread_cond_broadcast(&w->cv);
}

/* A failure of this rank: recorded in c and told to the others. */
__attribute__((format(printf, 2, 3))) static int sim_fail(Comm *c, const char *fmt, ...)
{
    SimWorld *w = c->impl;
    if (!c->error[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->error, sizeof c->error, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_lock(&w->mu);
    if (!w->failed) {
        char why[sizeof w->failure];
        snprintf(why, sizeof why, "rank %d failed: %s", c->rank, c->error);
        sim_set_failed_locked(w, why);
    }
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* comm_check_call, and a bad call (unknown group, negative length) fails
 * the world too: the other ranks would wait for this one forever. */
static int sim_check_call(Comm *c, CommGroup g, int64_t n)
{
    if (c->error[0])
        return 0;  /* failed before: the world already knows */
    return comm_check_call(c, g, n) ? 1 : sim_fail(c, "%s", c->error);
}

/* Every rank that has not left waits in a first wait: nobody can release them. Call with mu held. */
static void sim_check_deadlock_locked(SimWorld *w)
{
    if (w->failed || w->nblocked == 0 || w->nblocked + w->ngone != w->world)
        return;
    char msg[sizeof w->failure];
    size_t len = (size_t)snprintf(msg, sizeof msg, "deadlock: no rank can proceed:");
    for (int r = 0; r < w->world && len < sizeof msg; r++) {
        if (w->ranks[r].blocked)
            len += (size_t)snprintf(msg + len, sizeof msg - len, " rank %d waits in %s on %s;", r,
                                    comm_op_name(w->ranks[r].op), comm_group_name(w->ranks[r].g));
        else
            len += (size_t)snprintf(msg + len, sizeof msg - len, " rank %d has left;", r);
    }
    if (len < sizeof msg && len > 0 && msg[len - 1] == ';')
        msg[len - 1] = 0;
    sim_set_failed_locked(w, msg);
}

/* Waits until all members of the group have arrived. `first`: the first wait
 * of a collective, which fails when the world has failed (see the top). */
static int sim_wait(Comm *c, SimGroup *grp, int first, CommOpKind op, CommGroup g)
{
    SimWorld *w = c->impl;
    pthread_mutex_lock(&w->mu);
    if (first && w->failed)
        goto failed;
    unsigned long gen = grp->gen;
    if (++grp->arrived == grp->size) {
        grp->arrived = 0;
        grp->gen++;
        if (first) {
            w->nblocked -= grp->size - 1;  /* the others were all counted blocked */
            for (int i = 0; i < grp->size; i++)
                w->ranks[grp->members[i]].blocked = 0;
        }
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        return 1;
    }
    if (first) {
        w->nblocked++;
        w->ranks[c->rank] = (SimRank){.blocked = 1, .op = op, .g = g};
        sim_check_deadlock_locked(w);
    }
    while (grp->gen == gen && !(first && w->failed))
        pthread_cond_wait(&w->cv, &w->mu);
    if (grp->gen != gen) {
        pthread_mutex_unlock(&w->mu);
        return 1;
    }
    grp->arrived--;  /* withdraw: the group can no longer complete */
    w->nblocked--;
    w->ranks[c->rank].blocked = 0;
failed:;
    char why[sizeof w->failure];
    snprintf(why, sizeof why, "%s", w->failure);
    pthread_mutex_unlock(&w->mu);
    return comm_fail(c, "rank %d: %s on %s stopped: %s", c->rank, comm_op_name(op), comm_group_name(g), why);
}

/* After the first wait every member reads the same posts, so every member
 * reaches the same verdict here and either all go on or all fail. */
static int sim_same_call(SimGroup *grp, CommGroup g, char *msg, size_t msglen)
{
    const SimPost *p0 = &grp->post[0];
    for (int i = 1; i < grp->size; i++) {
        const SimPost *p = &grp->post[i];
        if (p->op != p0->op || p->n != p0->n) {
            snprintf(msg, msglen, "mismatched collectives on %s: rank %d called %s (%lld), rank %d called %s (%lld)",
                     comm_group_name(g), grp->members[0], comm_op_name(p0->op), (long long)p0->n, grp->members[i],
                     comm_op_name(p->op), (long long)p->n);
            return 0;
        }
    }
    return 1;
}

static int sim_allreduce(Comm *c, CommGroup g, void *buf, int64_t n, int f64)
{
    if (!sim_check_call(c, g, n))
        return 0;
    SimGroup *grp = sim_group(c, g);
    int me = comm_group_rank(c, g);
    CommOpKind op = f64 ? COMM_OP_ALLREDUCE_F64 : COMM_OP_ALLREDUCE_F32;
    size_t esize = f64 ? sizeof(double) : sizeof(float);
    int64_t lo, hi;
    comm_chunk(n, grp->size, me, &lo, &hi);
    /* allocated before the first wait, so that running out of memory fails
     * this rank alone and the others are told, never half a collective */
    void *chunk = hi > lo ? malloc((size_t)(hi - lo) * esize) : NULL;
    if (hi > lo && !chunk)
        return sim_fail(c, "rank %d: out of memory in %s of %lld elements", c->rank, comm_op_name(op), (long long)n);
    grp->post[me] = (SimPost){.op = op, .n = n, .buf = buf};
    if (!sim_wait(c, grp, 1, op, g)) {
        free(chunk);
        return 0;
    }
    char msg[400];
    int ok = sim_same_call(grp, g, msg, sizeof msg);
    if (ok && hi > lo) {
        if (f64) {
            const double *in[grp->size];
            for (int j = 0; j < grp->size; j++)
                in[j] = (const double *)grp->post[j].buf + lo;
            comm_sum_f64(chunk, in, grp->size, hi - lo);
        } else {
            const float *in[grp->size];
            for (int j = 0; j < grp->size; j++)
                in[j] = (const float *)grp->post[j].buf + lo;
            comm_sum_f32(chunk, in, grp->size, hi - lo);
        }
    }
    grp->post[me].chunk = chunk;
    sim_wait(c, grp, 0, op, g);  /* every chunk reduced; nobody reads inputs any more */
    if (ok) {
        for (int j = 0; j < grp->size; j++) {
            int64_t jlo, jhi;
            comm_chunk(n, grp->size, j, &jlo, &jhi);
            if (jhi > jlo && j != me)
                memcpy((char *)buf + (size_t)jlo * esize, grp->post[j].chunk, (size_t)(jhi - jlo) * esize);
        }
        if (hi > lo)
            memcpy((char *)buf + (size_t)lo * esize, chunk, (size_t)(hi - lo) * esize);
    }
    sim_wait(c, grp, 0, op, g);  /* every chunk copied: they can be freed */
    free(chunk);
    return ok ? 1 : sim_fail(c, "%s", msg);
}

static int sim_allreduce_f32(Comm *c, CommGroup g, float *buf, int64_t n)
{
    return sim_allreduce(c, g, buf, n, 0);
}

static int sim_allreduce_f64(Comm *c, CommGroup g, double *buf, int64_t n)
{
    return sim_allreduce(c, g, buf, n, 1);
}

static int sim_allgather(Comm *c, CommGroup g, const void *in, void *out, size_t bytes)
{
    if (!sim_check_call(c, g, 0))
        return 0;
    SimGroup *grp = sim_group(c, g);
    int me = comm_group_rank(c, g);
    grp->post[me] = (SimPost){.op = COMM_OP_ALLGATHER, .n = (int64_t)bytes, .in = in, .out = out};
    if (!sim_wait(c, grp, 1, COMM_OP_ALLGATHER, g))
        return 0;
    char msg[400];
    int ok = sim_same_call(grp, g, msg, sizeof msg);
    if (ok && bytes) {
        for (int j = 0; j < grp->size; j++) {
            char *dst = (char *)out + (size_t)j * bytes;
            if (j == me) {
                if (dst != in)
                    memmove(dst, in, bytes);
            } else {
                memcpy(dst, grp->post[j].in, bytes);
            }
        }
    }
    sim_wait(c, grp, 0, COMM_OP_ALLGATHER, g);  /* nobody reads `in` any more */
    return ok ? 1 : sim_fail(c, "%s", msg);
}

static int sim_alltoallv(Comm *c, CommGroup g, const void *send, const size_t *send_bytes, const size_t *send_off,
                         void *recv, const size_t *recv_bytes, const size_t *recv_off)
{
    if (!sim_check_call(c, g, 0))
        return 0;
    SimGroup *grp = sim_group(c, g);
    int me = comm_group_rank(c, g);
    grp->post[me] = (SimPost){.op = COMM_OP_ALLTOALLV, .send = send, .send_bytes = send_bytes, .send_off = send_off,
                              .recv = recv, .recv_bytes = recv_bytes, .recv_off = recv_off};
    if (!sim_wait(c, grp, 1, COMM_OP_ALLTOALLV, g))
        return 0;
    char msg[400];
    int ok = sim_same_call(grp, g, msg, sizeof msg);
    /* the whole matrix, not only this rank's row, so that all ranks agree */
    for (int i = 0; ok && i < grp->size; i++)
        for (int j = 0; ok && j < grp->size; j++)
            if (grp->post[i].send_bytes[j] != grp->post[j].recv_bytes[i]) {
                snprintf(msg, sizeof msg, "alltoallv on %s: rank %d sends %zu bytes to rank %d, which expects %zu",
                         comm_group_name(g), grp->members[i], grp->post[i].send_bytes[j], grp->members[j],
                         grp->post[j].recv_bytes[i]);
                ok = 0;
            }
    if (ok) {
        for (int j = 0; j < grp->size; j++) {
            const SimPost *p = &grp->post[j];
            if (recv_bytes[j])
                memcpy((char *)recv + recv_off[j], (const char *)p->send + p->send_off[me], recv_bytes[j]);
        }
    }
    sim_wait(c, grp, 0, COMM_OP_ALLTOALLV, g);  /* nobody reads `send` any more */
    return ok ? 1 : sim_fail(c, "%s", msg);
}

static int sim_barrier(Comm *c, CommGroup g)
{
    if (!sim_check_call(c, g, 0))
        return 0;
    SimGroup *grp = sim_group(c, g);
    grp->post[comm_group_rank(c, g)] = (SimPost){.op = COMM_OP_BARRIER};
    if (!sim_wait(c, grp, 1, COMM_OP_BARRIER, g))
        return 0;
    char msg[400];
    int ok = sim_same_call(grp, g, msg, sizeof msg);
    sim_wait(c, grp, 0, COMM_OP_BARRIER, g);  /* the posts were read: they may be reused */
    return ok ? 1 : sim_fail(c, "%s", msg);
}

static void sim_abort(Comm *c, const char *why)
{
    SimWorld *w = c->impl;
    char msg[sizeof w->failure];
    snprintf(msg, sizeof msg, "rank %d aborted: %s", c->rank, why);
    pthread_mutex_lock(&w->mu);
    sim_set_failed_locked(w, msg);
    pthread_mutex_unlock(&w->mu);
}

/* CommOps.wait_device, for the GPU backend's simulated ranks (whose collectives run on the device, between
 * device barriers): polls done(arg) and this world's failure, so that a rank that failed or aborted stops the
 * others' waits with its message instead of leaving them waiting for a GPU that waits for it. */
static int sim_wait_device(Comm *c, int (*done)(void *), void *arg, const char *what)
{
    SimWorld *w = c->impl;
    if (c->error[0])
        return 0;
    for (long spin = 0;; spin++) {
        int d = done(arg);
        if (d > 0)
            return 1;
        if (d < 0)
            return sim_fail(c, "rank %d: %s: a CUDA error", c->rank, what);
        if (spin % 64 == 0) {
            char why[sizeof w->failure];
            pthread_mutex_lock(&w->mu);
            int failed = w->failed;
            if (failed)
                snprintf(why, sizeof why, "%s", w->failure);
            pthread_mutex_unlock(&w->mu);
            if (failed)
                return comm_fail(c, "rank %d: %s stopped: %s", c->rank, what, why);
        }
        if (spin >= 1000) {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

/* Leaving, not freeing: the others may still be waiting for this rank. */
static void sim_destroy(Comm *c)
{
    SimWorld *w = c->impl;
    pthread_mutex_lock(&w->mu);
    if (!w->ranks[c->rank].gone) {
        w->ranks[c->rank].gone = 1;
        w->ngone++;
        sim_check_deadlock_locked(w);
    }
    pthread_mutex_unlock(&w->mu);
}

static const CommOps sim_ops = {
    .name = "sim",
    .allreduce_f32 = sim_allreduce_f32,
    .allreduce_f64 = sim_allreduce_f64,
    .allgather = sim_allgather,
    .alltoallv = sim_alltoallv,
    .barrier = sim_barrier,
    .abort = sim_abort,
    .destroy = sim_destroy,
    .wait_device = sim_wait_device,
};

/* Group `size` with members first, first + stride, ... */
static int sim_group_init(SimGroup *grp, int size, int first, int stride)
{
    grp->size = size;
    grp->members = malloc((size_t)size * sizeof *grp->members);
    grp->post = calloc((size_t)size, sizeof *grp->post);
    if (!grp->members || !grp->post)
        return 0;
    for (int i = 0; i < size; i++)
        grp->members[i] = first + i * stride;
    return 1;
}

static void sim_group_free(SimGroup *grp)
{
    free(grp->members);
    free(grp->post);
}

static void sim_world_free(SimWorld *w)
{
    sim_group_free(&w->world_group);
    for (int d = 0; w->ep_groups && d < w->dp; d++)
        sim_group_free(&w->ep_groups[d]);
    for (int e = 0; w->dp_groups && e < w->ep; e++)
        sim_group_free(&w->dp_groups[e]);
    free(w->ep_groups);
    free(w->dp_groups);
    free(w->ranks);
    free(w->comms);
    free(w->ptrs);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}

Comm **comm_sim_create(int world, int ep, char *err, size_t errlen)
{
    if (!comm_check_layout(0, world, ep, err, errlen))
        return NULL;
    SimWorld *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->world = world;
    w->ep = ep;
    w->dp = world / ep;
    w->ep_groups = calloc((size_t)w->dp, sizeof *w->ep_groups);
    w->dp_groups = calloc((size_t)w->ep, sizeof *w->dp_groups);
    w->ranks = calloc((size_t)world, sizeof *w->ranks);
    w->comms = calloc((size_t)world, sizeof *w->comms);
    w->ptrs = calloc((size_t)world, sizeof *w->ptrs);
    int ok = w->ep_groups && w->dp_groups && w->ranks && w->comms && w->ptrs &&
             sim_group_init(&w->world_group, world, 0, 1);
    for (int d = 0; ok && d < w->dp; d++)
        ok = sim_group_init(&w->ep_groups[d], ep, d * ep, 1);   /* same dp_rank */
    for (int e = 0; ok && e < ep; e++)
        ok = sim_group_init(&w->dp_groups[e], w->dp, e, ep);    /* same ep_rank */
    if (!ok) {
        sim_world_free(w);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (int r = 0; r < world; r++) {
        Comm *c = &w->comms[r];
        comm_init_base(c, r, world, ep);
        c->ops = &sim_ops;
        c->impl = w;
        w->ptrs[r] = c;
    }
    return w->ptrs;
}

void comm_sim_free(Comm **ranks, int world)
{
    if (!ranks || world < 1)
        return;
    sim_world_free(ranks[0]->impl);
}
