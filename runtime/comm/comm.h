/* comm.h - collective communication between the ranks of a training run.
 *
 * One interface, several transports:
 *   - SIM:  N ranks as N threads of one process (--simulate-ranks N), with
 *           shared memory and barriers: proves the partitioning on the CPU
 *           (and on one GPU) without a network;
 *   - TCP:  one process per rank over loopback or a network, started by the
 *           launcher (--nproc N) or joined from MOEC_RANK, MOEC_WORLD_SIZE,
 *           MOEC_MASTER_ADDR, MOEC_MASTER_PORT: the CPU backend's
 *           multi-process transport;
 *   - NCCL: one process per GPU (libnccl loaded at run time), the GPU path.
 * All have the same semantics. Every call is collective over the group it
 * names: all ranks of the group call it in the same order with matching
 * sizes. Buffers are host memory for SIM and TCP, device memory for NCCL.
 *
 * Ranks are laid out EP-major: rank = dp_rank * ep + ep_rank. The EP group of
 * a rank is the ep ranks with its dp_rank (they exchange tokens); its DP
 * group is the dp ranks with its ep_rank (they hold the same experts); the
 * world group is everyone (dense parameters).
 *
 * Sums are reproducible: SIM and TCP add element i as
 * ((x_0 + x_1) + x_2) + ... in group-rank order, so every rank gets the same
 * bits and they equal a serial sum in that order, whatever the timing. NCCL
 * uses its own (ring/tree) order: the same bits on every rank, but not
 * necessarily those of SIM/TCP (docs/parallelism.md). */
#ifndef MOEC_COMM_H
#define MOEC_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef enum CommGroup { COMM_WORLD, COMM_EP, COMM_DP } CommGroup;

typedef struct Comm Comm;

/* The interface a transport implements. Return 1 on success; 0 after
 * writing a message with comm_fail(): a failed collective leaves the run
 * unusable (every later call fails at once), and the caller exits naming
 * the rank. A collective never waits forever on a rank that has died or
 * aborted: it fails with a message naming that rank. */
typedef struct CommOps {
    const char *name;  /* "single", "sim", "tcp", "nccl" */
    /* sum-reduce n floats in place across the group */
    int (*allreduce_f32)(Comm *c, CommGroup g, float *buf, int64_t n);
    int (*allreduce_f64)(Comm *c, CommGroup g, double *buf, int64_t n);
    /* each rank contributes `bytes`; out receives group-size * bytes, in group-rank order.
     * in may be out + group_rank * bytes (in place); otherwise they must not overlap. */
    int (*allgather)(Comm *c, CommGroup g, const void *in, void *out, size_t bytes);
    /* all-to-all-v: send[send_off[j] .. + send_bytes[j]) goes to group rank j,
     * arriving in recv at recv_off[i] (i = the sender's group rank), recv_bytes[i] long.
     * The arrays have group-size entries; send_bytes[j] on rank i must equal recv_bytes[i]
     * on rank j (SIM and TCP check it and fail naming both ranks); send and recv must not overlap. */
    int (*alltoallv)(Comm *c, CommGroup g, const void *send, const size_t *send_bytes, const size_t *send_off,
                     void *recv, const size_t *recv_bytes, const size_t *recv_off);
    int (*barrier)(Comm *c, CommGroup g);
    /* Device transports only (NCCL; NULL in the others): the collective is enqueued on the caller's CUDA
     * stream (a CUstream, which is a cudaStream_t) and the call returns without waiting: the stream orders it
     * after the kernels before it and before those after, and it may be captured in a CUDA graph. Nothing is
     * read on the host, so every size is given here. enqueue_allreduce sums n floats (f64: doubles) in place;
     * enqueue_alltoall sends send + j * bytes to group rank j and receives group rank i's block at
     * recv + i * bytes. */
    int (*enqueue_allreduce)(Comm *c, CommGroup g, void *buf, int64_t n, int f64, void *stream);
    int (*enqueue_alltoall)(Comm *c, CommGroup g, const void *send, void *recv, size_t bytes, void *stream);
    /* Waits until done(arg) returns 1 (a stream or an event with enqueued collectives has completed; -1: it
     * failed, 0: not yet), watching the peers as the transport's own collectives do: a rank that is gone, an
     * asynchronous error or MOEC_COMM_TIMEOUT fail the wait with a message naming `what` instead of hanging.
     * NCCL and SIM (whose ranks share one GPU under the GPU backend: a failed or aborted rank fails the wait). */
    int (*wait_device)(Comm *c, int (*done)(void *arg), void *arg, const char *what);
    /* Marks this rank failed so that the others stop waiting for it (see comm_abort). */
    void (*abort)(Comm *c, const char *why);
    void (*destroy)(Comm *c);
} CommOps;

struct Comm {
    const CommOps *ops;
    int rank, world;     /* global */
    int ep, dp;          /* world = ep * dp */
    char error[512];     /* the first failure, for the message */
    void *impl;          /* the transport's state */
};

static inline int comm_ep_rank(const Comm *c) { return c->rank % c->ep; }
static inline int comm_dp_rank(const Comm *c) { return c->rank / c->ep; }
int comm_group_size(const Comm *c, CommGroup g);
int comm_group_rank(const Comm *c, CommGroup g);
/* The global rank of group rank i of this rank's group g. */
int comm_group_member(const Comm *c, CommGroup g, int i);
const char *comm_group_name(CommGroup g);  /* "world", "ep", "dp" */

/* Records the first error; returns 0 for `return comm_fail(...)`. */
int comm_fail(Comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int comm_failed(const Comm *c) { return c->error[0] != 0; }

/* This rank gives up (an error outside communication, say): records `why`
 * and tells the other ranks, whose collectives then fail naming this rank
 * instead of waiting for it. Later calls on c fail. */
void comm_abort(Comm *c, const char *why);

/* c->ops->destroy(c); NULL is a no-op. */
void comm_free(Comm *c);

/* ---- transports. Each returns NULL with a message in err on failure. */

/* A single rank: every collective is a copy (world 1). */
Comm *comm_single(void);

/* `world` ranks as threads of this process, world = ep * dp; element r of
 * the returned array is rank r, for the thread that plays it. A rank's
 * destroy (comm_free) only marks it gone, so that ranks still waiting for
 * it fail instead of hanging; comm_sim_free releases everything once the
 * threads are joined. */
Comm **comm_sim_create(int world, int ep, char *err, size_t errlen);
void comm_sim_free(Comm **ranks, int world);

/* One process per rank over TCP: rank 0 listens on addr:port, the others
 * connect to it (retrying until MOEC_RENDEZVOUS_TIMEOUT, default 60 s), then
 * every pair of ranks gets its own connection. Collectives wait for a peer
 * at most MOEC_COMM_TIMEOUT seconds (default 600, 0 = no limit). */
Comm *comm_tcp_create(int rank, int world, int ep, const char *addr, int port, char *err, size_t errlen);

/* One process per GPU through libnccl.so.2 and libcudart loaded with dlopen
 * (MOEC_NCCL_LIB / MOEC_CUDART_LIB override the library names). The NCCL
 * unique id comes from MOEC_NCCL_ID (hex, see comm_nccl_unique_id_hex) when
 * set, otherwise rank 0 makes it and sends it through a TCP rendezvous at
 * addr:port. device < 0 picks MOEC_LOCAL_RANK (else rank) % visible GPUs,
 * and fails when MOEC_LOCAL_WORLD_SIZE exceeds them (one GPU per rank). */
Comm *comm_nccl_create(int rank, int world, int ep, int device, const char *addr, int port, char *err,
                       size_t errlen);
/* For a launcher that passes MOEC_NCCL_ID: a new unique id as 256 hex
 * digits. NCCL's bootstrap root then runs in the calling process, which
 * must live until every rank has joined (a launcher waiting for its ranks
 * does). */
int comm_nccl_unique_id_hex(char out[257], char *err, size_t errlen);

#endif
