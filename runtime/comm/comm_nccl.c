/* comm_nccl.c - the NCCL transport: one process per GPU, buffers in device
 * memory.
 *
 * libcuda.so.1 (probed only), libcudart and libnccl.so.2 are loaded with
 * dlopen, so moec links and starts on machines without them; creating the
 * transport there fails with a message instead. The declarations below are
 * our own for the same reason; `cc -fsyntax-only -DMOEC_NCCL_REAL_HEADERS
 * -I/usr/local/cuda/include runtime/comm/comm_nccl.c` checks every one of them
 * against the real nccl.h and cuda_runtime_api.h.
 *
 * Bootstrap: rank 0 makes the NCCL unique id and sends it to the others
 * over the TCP transport (comm_tcp_create at addr:port), unless the launcher
 * passed it in MOEC_NCCL_ID. The TCP mesh then stays open as a liveness
 * channel: when a collective does not complete and a group peer's
 * connection is closed, the collective fails naming that rank and its pid
 * (NCCL itself only says "remote error"). The EP and DP groups are
 * ncclCommSplit()s of the world communicator (or, before NCCL 2.18, new
 * communicators whose ids travel over the TCP mesh); a group equal to the
 * world reuses it.
 *
 * Every collective is enqueued on one stream and waited for by polling the
 * stream, NCCL's asynchronous error and the liveness channel, never by a
 * blocking synchronise that could hang on a dead peer; on an error or after
 * MOEC_COMM_TIMEOUT seconds without completion the communicators are
 * aborted. The interface is synchronous, so each call returns with its
 * result in place. The GPU backend's steps use the asynchronous entries
 * instead (enqueue_allreduce, enqueue_alltoall on the step's own stream,
 * capturable in a CUDA graph) and wait for the step with wait_device, which
 * watches the peers the same way (docs/decisions.md 46). Sum order is
 * NCCL's (ring or tree): identical on every rank, not necessarily the
 * SIM/TCP order (comm.h). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "comm_impl.h"

#ifdef MOEC_NCCL_REAL_HEADERS
#include <cuda_runtime_api.h>
#include <nccl.h>
#else
typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef int ncclResult_t;    /* enums in nccl.h: int-sized, same calling convention */
typedef int ncclDataType_t;
typedef int ncclRedOp_t;
typedef struct moec_nccl_config ncclConfig_t;  /* only ever passed as NULL */
typedef int cudaError_t;
typedef struct CUstream_st *cudaStream_t;
#endif

/* The values the headers give these constants; with the real headers the
 * names below are theirs and the values are checked against them. */
#define V_NCCL_SUCCESS 0
#define V_NCCL_IN_PROGRESS 7
#define V_NCCL_INT8 0
#define V_NCCL_FLOAT32 7
#define V_NCCL_FLOAT64 8
#define V_NCCL_SUM 0
#define V_CUDA_SUCCESS 0
#define V_CUDA_NOT_READY 600
#define V_STREAM_NON_BLOCKING 1
#ifdef MOEC_NCCL_REAL_HEADERS
#define K_NCCL_SUCCESS ncclSuccess
#define K_NCCL_IN_PROGRESS ncclInProgress
#define K_NCCL_INT8 ncclInt8
#define K_NCCL_FLOAT32 ncclFloat32
#define K_NCCL_FLOAT64 ncclFloat64
#define K_NCCL_SUM ncclSum
#define K_CUDA_SUCCESS cudaSuccess
#define K_CUDA_NOT_READY cudaErrorNotReady
#define K_STREAM_NON_BLOCKING cudaStreamNonBlocking
#else
#define K_NCCL_SUCCESS V_NCCL_SUCCESS
#define K_NCCL_IN_PROGRESS V_NCCL_IN_PROGRESS
#define K_NCCL_INT8 V_NCCL_INT8
#define K_NCCL_FLOAT32 V_NCCL_FLOAT32
#define K_NCCL_FLOAT64 V_NCCL_FLOAT64
#define K_NCCL_SUM V_NCCL_SUM
#define K_CUDA_SUCCESS V_CUDA_SUCCESS
#define K_CUDA_NOT_READY V_CUDA_NOT_READY
#define K_STREAM_NON_BLOCKING V_STREAM_NON_BLOCKING
#endif

/* name, return type, parameters; `opt` ones may be missing from older libraries */
#define NCCL_FUNCS(X, OPT)                                                                                  \
    X(ncclGetUniqueId, ncclResult_t, (ncclUniqueId *))                                                      \
    X(ncclCommInitRank, ncclResult_t, (ncclComm_t *, int, ncclUniqueId, int))                               \
    X(ncclCommDestroy, ncclResult_t, (ncclComm_t))                                                          \
    X(ncclCommAbort, ncclResult_t, (ncclComm_t))                                                            \
    X(ncclCommGetAsyncError, ncclResult_t, (ncclComm_t, ncclResult_t *))                                    \
    X(ncclGetErrorString, const char *, (ncclResult_t))                                                     \
    X(ncclGetVersion, ncclResult_t, (int *))                                                                \
    X(ncclAllReduce, ncclResult_t,                                                                          \
      (const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t))                \
    X(ncclAllGather, ncclResult_t, (const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)) \
    X(ncclSend, ncclResult_t, (const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))        \
    X(ncclRecv, ncclResult_t, (void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t))              \
    X(ncclGroupStart, ncclResult_t, (void))                                                                 \
    X(ncclGroupEnd, ncclResult_t, (void))                                                                   \
    OPT(ncclCommSplit, ncclResult_t, (ncclComm_t, int, int, ncclComm_t *, ncclConfig_t *))

#define CUDA_FUNCS(X, OPT)                                                   \
    X(cudaGetDeviceCount, cudaError_t, (int *))                              \
    X(cudaSetDevice, cudaError_t, (int))                                     \
    X(cudaGetErrorString, const char *, (cudaError_t))                       \
    X(cudaStreamCreateWithFlags, cudaError_t, (cudaStream_t *, unsigned int)) \
    X(cudaStreamDestroy, cudaError_t, (cudaStream_t))                        \
    X(cudaStreamQuery, cudaError_t, (cudaStream_t))                          \
    X(cudaMalloc, cudaError_t, (void **, size_t))                            \
    X(cudaFree, cudaError_t, (void *))

#define DECLARE_FN(name, ret, args) typedef ret(*name##_fn) args;
NCCL_FUNCS(DECLARE_FN, DECLARE_FN)
CUDA_FUNCS(DECLARE_FN, DECLARE_FN)

#ifdef MOEC_NCCL_REAL_HEADERS
#define CHECK_FN(name, ret, args) \
    _Static_assert(__builtin_types_compatible_p(name##_fn, __typeof__(&name)), #name " differs from the header");
NCCL_FUNCS(CHECK_FN, CHECK_FN)
CUDA_FUNCS(CHECK_FN, CHECK_FN)
_Static_assert((int)ncclSuccess == V_NCCL_SUCCESS && (int)ncclInProgress == V_NCCL_IN_PROGRESS, "ncclResult_t");
_Static_assert((int)ncclInt8 == V_NCCL_INT8 && (int)ncclFloat32 == V_NCCL_FLOAT32 &&
                   (int)ncclFloat64 == V_NCCL_FLOAT64, "ncclDataType_t");
_Static_assert((int)ncclSum == V_NCCL_SUM, "ncclRedOp_t");
_Static_assert((int)cudaSuccess == V_CUDA_SUCCESS && (int)cudaErrorNotReady == V_CUDA_NOT_READY, "cudaError_t");
_Static_assert(cudaStreamNonBlocking == V_STREAM_NON_BLOCKING, "cudaStreamNonBlocking");
_Static_assert(sizeof(ncclUniqueId) == 128 && sizeof(ncclResult_t) == sizeof(int) &&
                   sizeof(ncclDataType_t) == sizeof(int) && sizeof(cudaError_t) == sizeof(int),
               "sizes");
#endif

/* The loaded libraries, once per process. */
typedef struct NcclLib {
#define FIELD(name, ret, args) name##_fn name;
    NCCL_FUNCS(FIELD, FIELD)
    CUDA_FUNCS(FIELD, FIELD)
    int ok;
    char error[400];
} NcclLib;

static NcclLib lib;
static pthread_once_t lib_once = PTHREAD_ONCE_INIT;

static void *open_first(const char *env, const char *const *names, char *tried, size_t triedlen)
{
    const char *over = getenv(env);
    if (over && *over) {
        void *h = dlopen(over, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            snprintf(tried, triedlen, "%s", dlerror());
        return h;
    }
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
        if (i == 0)
            snprintf(tried, triedlen, "%s", dlerror());
    }
    return NULL;
}

/* Never dlclose'd: CUDA's libraries do not support being unloaded. */
static void lib_load(void)
{
    char why[300] = "";
    static const char *const driver[] = {"libcuda.so.1", NULL};
    static const char *const cudart[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so",
                                         NULL};
    static const char *const nccl[] = {"libnccl.so.2", "libnccl.so", NULL};
    if (!open_first("MOEC_CUDA_DRIVER_LIB", driver, why, sizeof why)) {
        snprintf(lib.error, sizeof lib.error, "no CUDA driver / GPU: cannot load libcuda.so.1 (%s)", why);
        return;
    }
    void *hrt = open_first("MOEC_CUDART_LIB", cudart, why, sizeof why);
    if (!hrt) {
        snprintf(lib.error, sizeof lib.error, "cannot load the CUDA runtime libcudart (%s); set MOEC_CUDART_LIB", why);
        return;
    }
    void *hnccl = open_first("MOEC_NCCL_LIB", nccl, why, sizeof why);
    if (!hnccl) {
        snprintf(lib.error, sizeof lib.error,
                 "cannot load NCCL libnccl.so.2 (%s); install NCCL, set MOEC_NCCL_LIB, or use the tcp transport", why);
        return;
    }
    /* dlsym returns void *; the union avoids the object-to-function pointer cast ISO C leaves undefined */
#define LOAD(h, name, required)                                                                               \
    do {                                                                                                      \
        union { void *p; name##_fn f; } u = {dlsym(h, #name)};                                                \
        lib.name = u.f;                                                                                       \
        if (!lib.name && (required)) {                                                                        \
            snprintf(lib.error, sizeof lib.error, "%s lacks %s: too old?", (h) == hnccl ? "libnccl" : "libcudart", \
                     #name);                                                                                  \
            return;                                                                                           \
        }                                                                                                     \
    } while (0);
#define LOAD_NCCL(name, ret, args) LOAD(hnccl, name, 1)
#define LOAD_NCCL_OPT(name, ret, args) LOAD(hnccl, name, 0)
#define LOAD_CUDA(name, ret, args) LOAD(hrt, name, 1)
    NCCL_FUNCS(LOAD_NCCL, LOAD_NCCL_OPT)
    CUDA_FUNCS(LOAD_CUDA, LOAD_CUDA)
    int ndev = 0;
    cudaError_t e = lib.cudaGetDeviceCount(&ndev);
    if (e != K_CUDA_SUCCESS || ndev < 1) {
        snprintf(lib.error, sizeof lib.error, "no CUDA driver / GPU: cudaGetDeviceCount: %s",
                 e != K_CUDA_SUCCESS ? lib.cudaGetErrorString(e) : "no devices");
        return;
    }
    lib.ok = 1;
}

static int lib_ready(char *err, size_t errlen)
{
    pthread_once(&lib_once, lib_load);
    if (!lib.ok)
        snprintf(err, errlen, "nccl transport: %s", lib.error);
    return lib.ok;
}

/* ---- the transport ---------------------------------------------------------- */

typedef struct Nccl {
    ncclComm_t comm[3];          /* by CommGroup; ep or dp may be the world's */
    int owned[3];                /* destroy only what was created here */
    cudaStream_t stream;
    void *scratch;               /* device memory for barrier */
    Comm *tcp;                   /* the bootstrap mesh, kept for liveness; NULL with MOEC_NCCL_ID */
    int timeout_s;
    int aborted;
} Nccl;

/* Stops everything in flight and tells the peers why (over the liveness channel). */
static void nccl_abort_all(Nccl *n, const char *why)
{
    if (n->aborted)
        return;
    n->aborted = 1;
    for (int g = 0; g < 3; g++)
        if (n->owned[g] && n->comm[g])
            lib.ncclCommAbort(n->comm[g]);  /* aborts the kernels in flight too */
    if (n->tcp)
        comm_abort(n->tcp, why);
}

/* After comm_fail(c, ...): a failed NCCL communicator cannot be used again. */
static int nccl_failed(Comm *c)
{
    nccl_abort_all(c->impl, c->error);
    return 0;
}

static int nccl_check(Comm *c, ncclResult_t r, const char *call, CommOpKind op, CommGroup g)
{
    if (r == K_NCCL_SUCCESS)
        return 1;
    comm_fail(c, "rank %d: %s in %s on %s: %s", c->rank, call, comm_op_name(op), comm_group_name(g),
              lib.ncclGetErrorString(r));
    return nccl_failed(c);
}

/* Waits until done(arg) says 1 without ever blocking in CUDA or NCCL: polls it, NCCL's asynchronous error on
 * group g's communicator, the liveness channel and the clock. `what` names the wait in messages. */
static int nccl_wait_until(Comm *c, const char *what, CommGroup g, int all_groups, int (*done)(void *), void *arg)
{
    Nccl *n = c->impl;
    int64_t start = comm_now_ms(), gone_since = -1;
    int gone = -1, gone_pid = 0;
    char why[400] = "";
    for (long spin = 0;; spin++) {
        int d = done(arg);
        if (d > 0)
            return 1;
        if (d < 0) {
            comm_fail(c, "rank %d: %s on %s: CUDA error", c->rank, what, comm_group_name(g));
            return nccl_failed(c);
        }
        if (spin < 1000)
            continue;  /* most collectives finish within microseconds: no sleep yet */
        /* all_groups: a step's stream holds collectives of every group; the async error of any */
        ncclResult_t ae = K_NCCL_SUCCESS;
        for (int k = all_groups ? 0 : (int)g; k <= (all_groups ? 2 : (int)g) && ae == K_NCCL_SUCCESS; k++)
            lib.ncclCommGetAsyncError(n->comm[k], &ae);
        int64_t now = comm_now_ms();
        if (n->tcp && gone < 0 && spin % 64 == 0) {
            for (int j = 0; j < comm_group_size(c, g) && gone < 0; j++) {
                int peer = comm_group_member(c, g, j);
                if (peer != c->rank && comm_tcp_peer_gone(n->tcp, peer, &gone_pid, why, sizeof why)) {
                    gone = peer;
                    gone_since = now;
                }
            }
        }
        /* a peer that finished this collective may exit while our stream drains: give it a moment */
        if (gone >= 0 && (why[0] || now - gone_since > 2000)) {
            if (why[0])
                comm_fail(c, "rank %d: %s on %s stopped: from rank %d (pid %d): %s", c->rank, what,
                          comm_group_name(g), gone, gone_pid, why);
            else
                comm_fail(c, "rank %d: rank %d (pid %d) exited or failed during %s on %s", c->rank, gone, gone_pid,
                          what, comm_group_name(g));
            return nccl_failed(c);
        }
        if (ae != K_NCCL_SUCCESS && ae != K_NCCL_IN_PROGRESS) {
            comm_fail(c, "rank %d: %s on %s: NCCL: %s (a peer rank exited or failed?)", c->rank, what,
                      comm_group_name(g), lib.ncclGetErrorString(ae));
            return nccl_failed(c);
        }
        if (n->timeout_s > 0 && now - start > (int64_t)n->timeout_s * 1000) {
            comm_fail(c, "rank %d: %s on %s did not complete within %d s (MOEC_COMM_TIMEOUT)", c->rank, what,
                      comm_group_name(g), n->timeout_s);
            return nccl_failed(c);
        }
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

/* cudaStreamQuery as a done() for nccl_wait_until; the error's text kept for the message */
typedef struct StreamWait {
    cudaStream_t stream;
    cudaError_t err;
} StreamWait;

static int stream_done(void *arg)
{
    StreamWait *w = arg;
    cudaError_t e = lib.cudaStreamQuery(w->stream);
    if (e == K_CUDA_SUCCESS)
        return 1;
    if (e == K_CUDA_NOT_READY)
        return 0;
    w->err = e;
    return -1;
}

/* Waits for the transport's own stream. */
static int nccl_wait(Comm *c, CommOpKind op, CommGroup g)
{
    Nccl *n = c->impl;
    StreamWait w = {n->stream, K_CUDA_SUCCESS};
    if (nccl_wait_until(c, comm_op_name(op), g, 0, stream_done, &w))
        return 1;
    if (w.err != K_CUDA_SUCCESS)  /* the CUDA error's own words rather than "CUDA error" */
        snprintf(c->error, sizeof c->error, "rank %d: %s on %s: CUDA error %s", c->rank, comm_op_name(op),
                 comm_group_name(g), lib.cudaGetErrorString(w.err));
    return 0;
}

/* CommOps.wait_device: the caller's stream or event, watched over the world group */
static int nccl_wait_device(Comm *c, int (*done)(void *), void *arg, const char *what)
{
    if (!comm_check_call(c, COMM_WORLD, 0))
        return 0;
    return nccl_wait_until(c, what, COMM_WORLD, 1, done, arg);
}

static int nccl_allreduce(Comm *c, CommGroup g, void *buf, int64_t count, int f64)
{
    if (!comm_check_call(c, g, count))
        return 0;
    Nccl *n = c->impl;
    CommOpKind op = f64 ? COMM_OP_ALLREDUCE_F64 : COMM_OP_ALLREDUCE_F32;
    if (count == 0)
        return 1;  /* the same on every rank, so skipping it keeps them in step */
    ncclResult_t r = lib.ncclAllReduce(buf, buf, (size_t)count, f64 ? K_NCCL_FLOAT64 : K_NCCL_FLOAT32, K_NCCL_SUM,
                                       n->comm[g], n->stream);
    return nccl_check(c, r, "ncclAllReduce", op, g) && nccl_wait(c, op, g);
}

static int nccl_allreduce_f32(Comm *c, CommGroup g, float *buf, int64_t count)
{
    return nccl_allreduce(c, g, buf, count, 0);
}

static int nccl_allreduce_f64(Comm *c, CommGroup g, double *buf, int64_t count)
{
    return nccl_allreduce(c, g, buf, count, 1);
}

static int nccl_allgather(Comm *c, CommGroup g, const void *in, void *out, size_t bytes)
{
    if (!comm_check_call(c, g, 0))
        return 0;
    if (bytes == 0)
        return 1;
    Nccl *n = c->impl;
    ncclResult_t r = lib.ncclAllGather(in, out, bytes, K_NCCL_INT8, n->comm[g], n->stream);
    return nccl_check(c, r, "ncclAllGather", COMM_OP_ALLGATHER, g) && nccl_wait(c, COMM_OP_ALLGATHER, g);
}

static int nccl_alltoallv(Comm *c, CommGroup g, const void *send, const size_t *send_bytes, const size_t *send_off,
                          void *recv, const size_t *recv_bytes, const size_t *recv_off)
{
    if (!comm_check_call(c, g, 0))
        return 0;
    Nccl *n = c->impl;
    int s = comm_group_size(c, g);
    /* a zero-length pair is skipped on both sides alike (send_bytes[j] on i == recv_bytes[i] on j) */
    ncclResult_t r = lib.ncclGroupStart();
    for (int j = 0; r == K_NCCL_SUCCESS && j < s; j++) {
        if (send_bytes[j])
            r = lib.ncclSend((const char *)send + send_off[j], send_bytes[j], K_NCCL_INT8, j, n->comm[g], n->stream);
        if (r == K_NCCL_SUCCESS && recv_bytes[j])
            r = lib.ncclRecv((char *)recv + recv_off[j], recv_bytes[j], K_NCCL_INT8, j, n->comm[g], n->stream);
    }
    ncclResult_t r2 = lib.ncclGroupEnd();  /* always closes the group, even after a failed enqueue */
    if (r == K_NCCL_SUCCESS)
        r = r2;
    return nccl_check(c, r, "ncclSend/ncclRecv", COMM_OP_ALLTOALLV, g) && nccl_wait(c, COMM_OP_ALLTOALLV, g);
}

/* CommOps.enqueue_allreduce / enqueue_alltoall: on the caller's stream, not waited for (a CUDA graph may
 * capture them) */
static int nccl_enqueue_allreduce(Comm *c, CommGroup g, void *buf, int64_t count, int f64, void *stream)
{
    if (!comm_check_call(c, g, count))
        return 0;
    Nccl *n = c->impl;
    if (count == 0)
        return 1;
    ncclResult_t r = lib.ncclAllReduce(buf, buf, (size_t)count, f64 ? K_NCCL_FLOAT64 : K_NCCL_FLOAT32, K_NCCL_SUM,
                                       n->comm[g], (cudaStream_t)stream);
    return nccl_check(c, r, "ncclAllReduce", f64 ? COMM_OP_ALLREDUCE_F64 : COMM_OP_ALLREDUCE_F32, g);
}

static int nccl_enqueue_alltoall(Comm *c, CommGroup g, const void *send, void *recv, size_t bytes, void *stream)
{
    if (!comm_check_call(c, g, 0))
        return 0;
    Nccl *n = c->impl;
    if (bytes == 0)
        return 1;
    int s = comm_group_size(c, g);
    ncclResult_t r = lib.ncclGroupStart();
    for (int j = 0; r == K_NCCL_SUCCESS && j < s; j++) {
        r = lib.ncclSend((const char *)send + (size_t)j * bytes, bytes, K_NCCL_INT8, j, n->comm[g],
                         (cudaStream_t)stream);
        if (r == K_NCCL_SUCCESS)
            r = lib.ncclRecv((char *)recv + (size_t)j * bytes, bytes, K_NCCL_INT8, j, n->comm[g], (cudaStream_t)stream);
    }
    ncclResult_t r2 = lib.ncclGroupEnd();
    if (r == K_NCCL_SUCCESS)
        r = r2;
    return nccl_check(c, r, "ncclSend/ncclRecv", COMM_OP_ALLTOALLV, g);
}

static int nccl_barrier(Comm *c, CommGroup g)
{
    if (!comm_check_call(c, g, 0))
        return 0;
    Nccl *n = c->impl;
    /* the value is irrelevant: completing the allreduce means everyone arrived */
    ncclResult_t r = lib.ncclAllReduce(n->scratch, n->scratch, 1, K_NCCL_FLOAT32, K_NCCL_SUM, n->comm[g], n->stream);
    return nccl_check(c, r, "ncclAllReduce", COMM_OP_BARRIER, g) && nccl_wait(c, COMM_OP_BARRIER, g);
}

static void nccl_abort(Comm *c, const char *why)
{
    nccl_abort_all(c->impl, why);  /* the TCP transport's notice says "rank R aborted: why" */
}

static void nccl_destroy(Comm *c)
{
    Nccl *n = c->impl;
    if (n) {
        for (int g = 0; g < 3; g++)
            if (n->owned[g] && n->comm[g] && !n->aborted)
                lib.ncclCommDestroy(n->comm[g]);
        if (n->scratch)
            lib.cudaFree(n->scratch);
        if (n->stream)
            lib.cudaStreamDestroy(n->stream);
        comm_free(n->tcp);
        free(n);
    }
    free(c);
}

static const CommOps nccl_ops = {
    .name = "nccl",
    .allreduce_f32 = nccl_allreduce_f32,
    .allreduce_f64 = nccl_allreduce_f64,
    .allgather = nccl_allgather,
    .alltoallv = nccl_alltoallv,
    .barrier = nccl_barrier,
    .enqueue_allreduce = nccl_enqueue_allreduce,
    .enqueue_alltoall = nccl_enqueue_alltoall,
    .wait_device = nccl_wait_device,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
};

static int parse_id_hex(const char *hex, ncclUniqueId *id)
{
    if (strlen(hex) != 2 * sizeof id->internal)
        return 0;
    for (size_t i = 0; i < sizeof id->internal; i++) {
        unsigned v;
        if (sscanf(hex + 2 * i, "%2x", &v) != 1 || !strchr("0123456789abcdefABCDEF", hex[2 * i]) ||
            !strchr("0123456789abcdefABCDEF", hex[2 * i + 1]))
            return 0;
        id->internal[i] = (char)v;
    }
    return 1;
}

int comm_nccl_unique_id_hex(char out[257], char *err, size_t errlen)
{
    if (!lib_ready(err, errlen))
        return 0;
    ncclUniqueId id;
    ncclResult_t r = lib.ncclGetUniqueId(&id);
    if (r != K_NCCL_SUCCESS) {
        snprintf(err, errlen, "ncclGetUniqueId: %s", lib.ncclGetErrorString(r));
        return 0;
    }
    for (size_t i = 0; i < sizeof id.internal; i++)
        snprintf(out + 2 * i, 3, "%02x", (unsigned char)id.internal[i]);
    return 1;
}

/* The communicator of group g: a split of the world (colour = which group
 * instance, key = rank within it), or without ncclCommSplit a new
 * communicator whose id group rank 0 sends over the TCP mesh. */
static int make_group(Comm *c, Nccl *n, CommGroup g, char *err, size_t errlen)
{
    int color = g == COMM_EP ? comm_dp_rank(c) : comm_ep_rank(c);
    int key = comm_group_rank(c, g);
    ncclResult_t r;
    if (lib.ncclCommSplit) {
        r = lib.ncclCommSplit(n->comm[COMM_WORLD], color, key, &n->comm[g], NULL);
    } else if (n->tcp) {
        ncclUniqueId id, *ids = calloc((size_t)comm_group_size(c, g), sizeof *ids);
        memset(&id, 0, sizeof id);
        r = key == 0 ? lib.ncclGetUniqueId(&id) : K_NCCL_SUCCESS;
        if (!ids || !n->tcp->ops->allgather(n->tcp, g, &id, ids, sizeof id)) {
            snprintf(err, errlen, "rank %d: sending the %s group's NCCL id: %s", c->rank, comm_group_name(g),
                     ids ? n->tcp->error : "out of memory");
            free(ids);
            return 0;
        }
        if (r == K_NCCL_SUCCESS)
            r = lib.ncclCommInitRank(&n->comm[g], comm_group_size(c, g), ids[0], key);
        free(ids);
    } else {
        snprintf(err, errlen, "rank %d: this NCCL has no ncclCommSplit (needs 2.18+) to make the %s groups with "
                 "MOEC_NCCL_ID; leave MOEC_NCCL_ID unset to bootstrap over TCP", c->rank, comm_group_name(g));
        return 0;
    }
    if (r != K_NCCL_SUCCESS) {
        snprintf(err, errlen, "rank %d: creating the %s group's NCCL communicator: %s", c->rank, comm_group_name(g),
                 lib.ncclGetErrorString(r));
        return 0;
    }
    n->owned[g] = 1;
    return 1;
}

Comm *comm_nccl_create(int rank, int world, int ep, int device, const char *addr, int port, char *err,
                       size_t errlen)
{
    int timeout_s;
    if (!comm_check_layout(rank, world, ep, err, errlen) || !lib_ready(err, errlen) ||
        !comm_env_seconds("MOEC_COMM_TIMEOUT", 600, &timeout_s, err, errlen))
        return NULL;
    int ndev = 0;
    lib.cudaGetDeviceCount(&ndev);
    if (device < 0) {
        /* NCCL refuses two ranks of one communicator on one GPU: say so before it does */
        const char *lr = getenv("MOEC_LOCAL_RANK"), *lw = getenv("MOEC_LOCAL_WORLD_SIZE");
        int local_world = lw && *lw ? atoi(lw) : 0;
        if (local_world > ndev) {
            snprintf(err, errlen, "rank %d: %d ranks on this machine but %d GPU%s: NCCL needs one GPU per rank", rank,
                     local_world, ndev, ndev == 1 ? "" : "s");
            return NULL;
        }
        device = (lr && *lr ? atoi(lr) : rank) % ndev;
    }
    if (device >= ndev) {
        snprintf(err, errlen, "rank %d: GPU %d does not exist (%d visible)", rank, device, ndev);
        return NULL;
    }
    cudaError_t ce = lib.cudaSetDevice(device);
    if (ce != K_CUDA_SUCCESS) {
        snprintf(err, errlen, "rank %d: cudaSetDevice(%d): %s", rank, device, lib.cudaGetErrorString(ce));
        return NULL;
    }
    Comm *c = calloc(1, sizeof *c);
    Nccl *n = calloc(1, sizeof *n);
    if (!c || !n) {
        free(c);
        free(n);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    comm_init_base(c, rank, world, ep);
    c->ops = &nccl_ops;
    c->impl = n;
    n->timeout_s = timeout_s;

    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    const char *hex = getenv("MOEC_NCCL_ID");
    if (hex && *hex) {
        if (!parse_id_hex(hex, &id)) {
            snprintf(err, errlen, "MOEC_NCCL_ID: expected %zu hex digits (comm_nccl_unique_id_hex)",
                     2 * sizeof id.internal);
            goto fail;
        }
    } else {
        n->tcp = comm_tcp_create(rank, world, ep, addr, port, err, errlen);
        if (!n->tcp)
            goto fail;
        ncclUniqueId *ids = calloc((size_t)world, sizeof *ids);
        ncclResult_t r = rank == 0 ? lib.ncclGetUniqueId(&id) : K_NCCL_SUCCESS;
        /* an allgather rather than a broadcast: the one collective both transports share */
        int ok = ids && n->tcp->ops->allgather(n->tcp, COMM_WORLD, &id, ids, sizeof id);
        if (ok)
            id = ids[0];
        free(ids);
        if (!ok || r != K_NCCL_SUCCESS) {
            snprintf(err, errlen, "rank %d: sharing the NCCL id: %s", rank,
                     r != K_NCCL_SUCCESS ? lib.ncclGetErrorString(r) : n->tcp->error[0] ? n->tcp->error : "out of memory");
            goto fail;
        }
        /* rank 0 failed to make an id: its zeros would hang ncclCommInitRank */
        static const ncclUniqueId zero;
        if (!memcmp(&id, &zero, sizeof id)) {
            snprintf(err, errlen, "rank %d: rank 0 could not make an NCCL id", rank);
            goto fail;
        }
    }
    ncclResult_t r = lib.ncclCommInitRank(&n->comm[COMM_WORLD], world, id, rank);
    if (r != K_NCCL_SUCCESS) {
        snprintf(err, errlen, "rank %d: ncclCommInitRank: %s", rank, lib.ncclGetErrorString(r));
        goto fail;
    }
    n->owned[COMM_WORLD] = 1;
    for (CommGroup g = COMM_EP; g <= COMM_DP; g++) {
        if (comm_group_size(c, g) == world)
            n->comm[g] = n->comm[COMM_WORLD];
        else if (!make_group(c, n, g, err, errlen))
            goto fail;
    }
    ce = lib.cudaStreamCreateWithFlags(&n->stream, K_STREAM_NON_BLOCKING);
    if (ce == K_CUDA_SUCCESS)
        ce = lib.cudaMalloc(&n->scratch, 16);
    if (ce != K_CUDA_SUCCESS) {
        snprintf(err, errlen, "rank %d: %s", rank, lib.cudaGetErrorString(ce));
        goto fail;
    }
    return c;
fail:
    nccl_destroy(c);
    return NULL;
}
