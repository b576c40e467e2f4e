/* test_comm.c - unit tests of the communication layer (runtime/comm*.c,
 * runtime/launch.c).
 *
 * One fixed scenario (every collective on every group, zero-length calls,
 * in-place allgather, an alltoallv with gaps and empty messages, a large
 * allreduce) runs on comm_single, on the simulator for world 1, 2, 4 with
 * ep 1, 2, 4, and on 2 and 4 forked processes over TCP; every rank's
 * transcript of results must equal one computed serially here, bit for bit
 * (allreduce summed in group-rank order). The inputs span 40 binary orders
 * of magnitude so that any other summation order shows. Then failures: an
 * aborting rank, mismatched calls and a deadlock in the simulator; a killed
 * peer, an aborting peer, mismatched sizes and a rendezvous timeout over
 * TCP; the launcher with ranks that succeed, exit non-zero and die by a
 * signal; launch_env's validation. An alarm bounds the whole test.
 *
 * `test_comm --sim-only` runs the simulator part alone (for ThreadSanitizer). */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../runtime/comm/comm.h"
#include "../../runtime/comm/comm_impl.h"
#include "../../runtime/comm/comm_wire.h"
#include "../../train/launch.h"
#include "check.h"


static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- transcripts ---------------------------------------------------------- */

typedef struct Log {
    unsigned char *data;
    size_t len, cap;
} Log;

static void log_put(Log *l, const void *p, size_t n)
{
    if (l->len + n > l->cap) {
        size_t cap = l->cap ? l->cap : 4096;
        while (cap < l->len + n)
            cap *= 2;
        l->data = realloc(l->data, cap);
        if (!l->data) {
            fprintf(stderr, "test_comm: out of memory\n");
            exit(1);
        }
        l->cap = cap;
    }
    if (n)
        memcpy(l->data + l->len, p, n);
    l->len += n;
}

static void log_free(Log *l)
{
    free(l->data);
    memset(l, 0, sizeof *l);
}

static int log_equal(const Log *a, const Log *b)
{
    return a->len == b->len && (a->len == 0 || !memcmp(a->data, b->data, a->len));
}

/* ---- inputs ---------------------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Signed values from 2^-20 to 2^20: sums of a few of them round differently in every order. */
static double in_value(int rank, int g, int kind, int64_t i)
{
    uint64_t h = mix(((uint64_t)rank << 48) ^ ((uint64_t)g << 40) ^ ((uint64_t)kind << 36) ^ (uint64_t)i);
    double m = 1.0 + (double)(h & 0xfffffffffffffull) / 4503599627370496.0;
    int e = (int)((h >> 52) % 41) - 20;
    return ((h >> 63) ? -1.0 : 1.0) * ldexp(m, e);
}

static float in_f32(int rank, int g, int64_t i) { return (float)in_value(rank, g, 1, i); }
static double in_f64(int rank, int g, int64_t i) { return in_value(rank, g, 2, i); }

static unsigned char gather_byte(int rank, int g, int k) { return (unsigned char)(rank * 41 + g * 13 + k * 7 + 3); }

/* alltoallv: how much global rank src sends global rank dst in group g (0 often) */
static size_t a2a_len(int src, int dst, int g) { return (size_t)((src * 7 + dst * 3 + g * 5) % 6) * 5; }
static unsigned char a2a_byte(int src, int dst, int g, size_t k)
{
    return (unsigned char)(src * 31 + dst * 17 + g * 7 + (int)k * 3 + 1);
}

#define NF 1001    /* uneven chunks for every group size */
#define ND 333
#define NG 24
#define NBIG (1 << 18)

/* A Comm that only answers group questions, for the serial expectations. */
static Comm layout(int rank, int world, int ep)
{
    Comm c;
    memset(&c, 0, sizeof c);
    c.rank = rank;
    c.world = world;
    c.ep = ep;
    c.dp = world / ep;
    return c;
}

/* alltoallv buffers of global rank `me` in group g: gaps between the
 * messages (send: j bytes before message j; recv: 2i + 1 bytes) so that
 * offsets matter and the gaps must stay untouched */
typedef struct A2a {
    size_t sb[8], so[8], rb[8], ro[8];
    size_t send_len, recv_len;
} A2a;

static void a2a_layout(const Comm *c, CommGroup g, A2a *a)
{
    int s = comm_group_size(c, g);
    size_t so = 0, ro = 0;
    for (int j = 0; j < s; j++) {
        int peer = comm_group_member(c, g, j);
        so += (size_t)j;
        a->so[j] = so;
        a->sb[j] = a2a_len(c->rank, peer, g);
        so += a->sb[j];
        ro += 2 * (size_t)j + 1;
        a->ro[j] = ro;
        a->rb[j] = a2a_len(peer, c->rank, g);
        ro += a->rb[j];
    }
    a->send_len = so + 1;
    a->recv_len = ro + 1;
}

#define TRY(call)        \
    do {                 \
        if (!(call)) {   \
            ok = 0;      \
            goto out;    \
        }                \
    } while (0)

/* The scenario every transport runs; appends its results to out. 0 when a
 * collective failed (the message is in c->error). */
static int scenario(Comm *c, Log *out)
{
    int ok = 1;
    float *f = malloc(NF * sizeof *f);
    double *d = malloc(ND * sizeof *d);
    unsigned char *gin = malloc(NG), *gout = malloc(4 * NG), *send = NULL, *recv = NULL;
    float *big = NULL;
    for (CommGroup g = COMM_WORLD; g <= COMM_DP; g++) {
        int s = comm_group_size(c, g), me = comm_group_rank(c, g);
        for (int i = 0; i < NF; i++)
            f[i] = in_f32(c->rank, g, i);
        TRY(c->ops->allreduce_f32(c, g, f, NF));
        log_put(out, f, NF * sizeof *f);
        TRY(c->ops->allreduce_f32(c, g, f, 0));
        TRY(c->ops->allreduce_f64(c, g, NULL, 0));
        for (int i = 0; i < ND; i++)
            d[i] = in_f64(c->rank, g, i);
        TRY(c->ops->allreduce_f64(c, g, d, ND));
        log_put(out, d, ND * sizeof *d);

        for (int k = 0; k < NG; k++)
            gin[k] = gather_byte(c->rank, g, k);
        memset(gout, 0xee, 4 * NG);
        TRY(c->ops->allgather(c, g, gin, gout, NG));
        log_put(out, gout, (size_t)s * NG);
        memset(gout, 0xee, 4 * NG);  /* in place: this rank's part already in its slot */
        memcpy(gout + (size_t)me * NG, gin, NG);
        TRY(c->ops->allgather(c, g, gout + (size_t)me * NG, gout, NG));
        log_put(out, gout, (size_t)s * NG);
        TRY(c->ops->allgather(c, g, NULL, NULL, 0));

        A2a a;
        a2a_layout(c, g, &a);
        send = malloc(a.send_len);
        recv = malloc(a.recv_len);
        memset(send, 0xaa, a.send_len);
        memset(recv, 0xee, a.recv_len);
        for (int j = 0; j < s; j++)
            for (size_t k = 0; k < a.sb[j]; k++)
                send[a.so[j] + k] = a2a_byte(c->rank, comm_group_member(c, g, j), g, k);
        TRY(c->ops->alltoallv(c, g, send, a.sb, a.so, recv, a.rb, a.ro));
        log_put(out, recv, a.recv_len);
        free(send);
        free(recv);
        send = recv = NULL;
        size_t zero[8] = {0};
        TRY(c->ops->alltoallv(c, g, NULL, zero, zero, NULL, zero, zero));
        TRY(c->ops->barrier(c, g));
    }
    big = malloc(NBIG * sizeof *big);  /* large enough to need many partial sends over TCP */
    for (int i = 0; i < NBIG; i++)
        big[i] = in_f32(c->rank, 9, i);
    TRY(c->ops->allreduce_f32(c, COMM_WORLD, big, NBIG));
    log_put(out, big, NBIG * sizeof *big);
out:
    free(f);
    free(d);
    free(gin);
    free(gout);
    free(send);
    free(recv);
    free(big);
    return ok;
}

/* What scenario() must produce on `rank`, computed serially: the sums add
 * group rank 0, 1, 2, ... in that order. */
static void expected(int world, int ep, int rank, Log *out)
{
    Comm c = layout(rank, world, ep);
    for (CommGroup g = COMM_WORLD; g <= COMM_DP; g++) {
        int s = comm_group_size(&c, g), me = comm_group_rank(&c, g);
        for (int i = 0; i < NF; i++) {
            float acc = in_f32(comm_group_member(&c, g, 0), g, i);
            for (int j = 1; j < s; j++)
                acc += in_f32(comm_group_member(&c, g, j), g, i);
            log_put(out, &acc, sizeof acc);
        }
        for (int i = 0; i < ND; i++) {
            double acc = in_f64(comm_group_member(&c, g, 0), g, i);
            for (int j = 1; j < s; j++)
                acc += in_f64(comm_group_member(&c, g, j), g, i);
            log_put(out, &acc, sizeof acc);
        }
        for (int rep = 0; rep < 2; rep++)
            for (int j = 0; j < s; j++)
                for (int k = 0; k < NG; k++) {
                    unsigned char b = gather_byte(comm_group_member(&c, g, j), g, k);
                    log_put(out, &b, 1);
                }
        A2a a;
        a2a_layout(&c, g, &a);
        unsigned char *recv = malloc(a.recv_len);
        memset(recv, 0xee, a.recv_len);
        for (int i = 0; i < s; i++)
            for (size_t k = 0; k < a.rb[i]; k++)
                recv[a.ro[i] + k] = a2a_byte(comm_group_member(&c, g, i), rank, g, k);
        log_put(out, recv, a.recv_len);
        free(recv);
        (void)me;
    }
    for (int i = 0; i < NBIG; i++) {
        float acc = in_f32(0, 9, i);
        for (int r = 1; r < world; r++)
            acc += in_f32(r, 9, i);
        log_put(out, &acc, sizeof acc);
    }
}

/* The inputs are sensitive to the order: reversed or pairwise sums differ. */
static void test_order_matters(void)
{
    int differ_rev = 0, differ_pair = 0;
    for (int i = 0; i < NF; i++) {
        float x[4], fwd, rev, pair;
        for (int r = 0; r < 4; r++)
            x[r] = in_f32(r, COMM_WORLD, i);
        fwd = ((x[0] + x[1]) + x[2]) + x[3];
        rev = ((x[3] + x[2]) + x[1]) + x[0];
        pair = (x[0] + x[1]) + (x[2] + x[3]);
        differ_rev += memcmp(&fwd, &rev, sizeof fwd) != 0;
        differ_pair += memcmp(&fwd, &pair, sizeof fwd) != 0;
    }
    CHECK(differ_rev > NF / 20 && differ_pair > NF / 20, "order-sensitive inputs: %d and %d of %d differ", differ_rev,
          differ_pair, NF);
}

/* ---- the group layout ------------------------------------------------------- */

static void test_groups(void)
{
    /* world 8, ep 4: rank = dp_rank * 4 + ep_rank */
    Comm c = layout(6, 8, 4);
    CHECK(comm_ep_rank(&c) == 2 && comm_dp_rank(&c) == 1, "ep %d dp %d", comm_ep_rank(&c), comm_dp_rank(&c));
    CHECK(comm_group_size(&c, COMM_WORLD) == 8 && comm_group_size(&c, COMM_EP) == 4 &&
              comm_group_size(&c, COMM_DP) == 2, "sizes");
    CHECK(comm_group_rank(&c, COMM_WORLD) == 6 && comm_group_rank(&c, COMM_EP) == 2 &&
              comm_group_rank(&c, COMM_DP) == 1, "group ranks");
    int ep_members[4], dp_members[2];
    for (int i = 0; i < 4; i++)
        ep_members[i] = comm_group_member(&c, COMM_EP, i);
    for (int i = 0; i < 2; i++)
        dp_members[i] = comm_group_member(&c, COMM_DP, i);
    CHECK(ep_members[0] == 4 && ep_members[1] == 5 && ep_members[2] == 6 && ep_members[3] == 7, "EP group of 6");
    CHECK(dp_members[0] == 2 && dp_members[1] == 6, "DP group of 6");
    CHECK(!strcmp(comm_group_name(COMM_DP), "dp"), "group name");
    /* every rank is in exactly one EP and one DP group, at its own group rank */
    for (int r = 0; r < 8; r++) {
        Comm x = layout(r, 8, 4);
        CHECK(comm_group_member(&x, COMM_EP, comm_group_rank(&x, COMM_EP)) == r &&
                  comm_group_member(&x, COMM_DP, comm_group_rank(&x, COMM_DP)) == r, "rank %d in its groups", r);
    }
    char err[256];
    CHECK(!comm_sim_create(6, 4, err, sizeof err) && strstr(err, "does not divide"), "ep must divide: %s", err);
    CHECK(!comm_sim_create(0, 1, err, sizeof err) && strstr(err, "at least 1"), "world 0: %s", err);
}

static void test_single(void)
{
    Comm *c = comm_single();
    Log got = {0}, want = {0};
    CHECK(c && scenario(c, &got), "single: %s", c ? c->error : "NULL");
    expected(1, 1, 0, &want);
    CHECK(log_equal(&got, &want), "single transcript (%zu vs %zu bytes)", got.len, want.len);
    size_t sb[1] = {3}, so[1] = {0}, rb[1] = {4}, ro[1] = {0};
    char a[4] = "abc", b[4];
    CHECK(!c->ops->alltoallv(c, COMM_EP, a, sb, so, b, rb, ro) && strstr(c->error, "expects 4"), "self mismatch: %s",
          c->error);
    CHECK(!c->ops->barrier(c, COMM_WORLD), "calls after a failure fail");
    comm_free(c);
    log_free(&got);
    log_free(&want);
}

/* ---- the simulator ------------------------------------------------------------ */

typedef int (*RankFn)(Comm *c, Log *out, void *arg);

typedef struct SimArg {
    Comm *c;
    RankFn fn;
    void *arg;
    Log log;
    int ok;
    char error[512];
} SimArg;

static void *sim_thread(void *p)
{
    SimArg *a = p;
    a->ok = a->fn(a->c, &a->log, a->arg);
    snprintf(a->error, sizeof a->error, "%s", a->c->error);
    comm_free(a->c);  /* leaves: ranks still waiting for it fail instead of hanging */
    return NULL;
}

/* Runs fn on every rank of a simulated world; args[r] gets rank r's results. */
static int sim_run(int world, int ep, RankFn fn, void *arg, SimArg *args)
{
    char err[256];
    Comm **ranks = comm_sim_create(world, ep, err, sizeof err);
    if (!ranks) {
        CHECK(0, "comm_sim_create(%d, %d): %s", world, ep, err);
        return 0;
    }
    pthread_t th[8];
    for (int r = 0; r < world; r++) {
        args[r] = (SimArg){.c = ranks[r], .fn = fn, .arg = arg};
        pthread_create(&th[r], NULL, sim_thread, &args[r]);
    }
    for (int r = 0; r < world; r++)
        pthread_join(th[r], NULL);
    comm_sim_free(ranks, world);
    return 1;
}

static int run_scenario(Comm *c, Log *out, void *arg)
{
    (void)arg;
    return scenario(c, out);
}

static const int configs[][2] = {{1, 1}, {2, 1}, {2, 2}, {4, 1}, {4, 2}, {4, 4}};
#define NCONFIGS ((int)(sizeof configs / sizeof configs[0]))
static Log sim_logs[NCONFIGS][4];  /* kept for the TCP comparison */

static void test_sim_scenario(void)
{
    for (int k = 0; k < NCONFIGS; k++) {
        int world = configs[k][0], ep = configs[k][1];
        SimArg args[4];
        if (!sim_run(world, ep, run_scenario, NULL, args))
            continue;
        for (int r = 0; r < world; r++) {
            Log want = {0};
            expected(world, ep, r, &want);
            CHECK(args[r].ok, "sim world %d ep %d rank %d: %s", world, ep, r, args[r].error);
            CHECK(log_equal(&args[r].log, &want), "sim world %d ep %d rank %d: transcript differs from the serial one",
                  world, ep, r);
            log_free(&want);
            sim_logs[k][r] = args[r].log;
        }
        /* the world allreduce, bit-identical on every rank (also implied by the serial comparison) */
        for (int r = 1; r < world; r++)
            CHECK(!memcmp(args[r].log.data, args[0].log.data, NF * sizeof(float)), "world %d: rank %d's sum", world,
                  r);
    }
    /* the timing changes from run to run; the bits must not */
    for (int rep = 0; rep < 8; rep++) {
        SimArg args[4];
        if (!sim_run(4, 2, run_scenario, NULL, args))
            break;
        for (int r = 0; r < 4; r++) {
            CHECK(args[r].ok && log_equal(&args[r].log, &sim_logs[4][r]), "repeat %d rank %d", rep, r);
            log_free(&args[r].log);
        }
    }
}

/* rank 2 aborts; everyone else's next collectives fail naming it */
static int abort_fn(Comm *c, Log *out, void *arg)
{
    (void)out;
    (void)arg;
    if (c->rank == 2) {
        comm_abort(c, "injected failure");
        return 0;
    }
    float x[3] = {1, 2, 3};
    int first = c->ops->allreduce_f32(c, COMM_WORLD, x, 3);
    int second = c->ops->barrier(c, COMM_EP);  /* rank 0 and 1's EP group does not even hold rank 2 */
    return !first && !second && strstr(c->error, "rank 2 aborted: injected failure") != NULL;
}

static int mismatch_fn(Comm *c, Log *out, void *arg)
{
    (void)out;
    int kind = *(int *)arg;
    float x[5] = {0};
    if (kind == 0)  /* different lengths */
        return !c->ops->allreduce_f32(c, COMM_WORLD, x, c->rank == 0 ? 4 : 5) && strstr(c->error, "mismatched");
    if (kind == 3)  /* a bad call on rank 1 must not leave rank 0 waiting */
        return c->rank == 1 ? !c->ops->allreduce_f32(c, COMM_WORLD, x, -1) && strstr(c->error, "negative length")
                            : !c->ops->allreduce_f32(c, COMM_WORLD, x, 4) && strstr(c->error, "rank 1 failed");
    if (kind == 1)  /* different collectives */
        return !(c->rank == 0 ? c->ops->barrier(c, COMM_WORLD) : c->ops->allgather(c, COMM_WORLD, x, x, 0)) &&
               strstr(c->error, "mismatched");
    /* alltoallv: rank 0 sends 3 bytes to rank 1, which expects 4 */
    size_t sb[2] = {1, c->rank == 0 ? 3 : 2}, so[2] = {0, 4}, rb[2] = {1, 2}, ro[2] = {0, 4};
    if (c->rank == 1)
        rb[0] = 4, sb[0] = 2;
    char send[16] = {0}, recv[16];
    return !c->ops->alltoallv(c, COMM_WORLD, send, sb, so, recv, rb, ro) &&
           strstr(c->error, "rank 0 sends 3 bytes to rank 1, which expects 4");
}

/* ranks 0 and 1 finish; rank 2 waits for rank 3 in their EP group while
 * rank 3 waits in the world group: nobody can proceed */
static int deadlock_fn(Comm *c, Log *out, void *arg)
{
    (void)out;
    (void)arg;
    if (c->rank < 2)
        return c->ops->barrier(c, COMM_EP);
    int r = c->rank == 2 ? c->ops->barrier(c, COMM_EP) : c->ops->barrier(c, COMM_WORLD);
    return !r && strstr(c->error, "deadlock") && strstr(c->error, "rank 3 waits in barrier on world");
}

/* wait_device (the GPU backend's wait for a stream whose collectives run on the device): done() is polled; a
 * never-finishing stream on ranks 0 and 1 fails when rank 3 aborts, naming it; rank 2's finishes */
static int never(void *arg)
{
    (*(long *)arg)++;
    return 0;
}
static int after_3(void *arg) { return ++*(long *)arg >= 3; }
static int broken(void *arg)
{
    (void)arg;
    return -1;
}
static int wait_device_fn(Comm *c, Log *out, void *arg)
{
    (void)out;
    (void)arg;
    long polls = 0;
    if (c->rank == 3) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);  /* the others are waiting by now */
        comm_abort(c, "injected failure");
        return 1;
    }
    if (c->rank == 2)
        return c->ops->wait_device(c, after_3, &polls, "a step") && polls == 3;
    int r = c->ops->wait_device(c, never, &polls, "a step");
    return !r && polls > 1 && strstr(c->error, "a step stopped: rank 3 aborted: injected failure") != NULL;
}
static int wait_broken_fn(Comm *c, Log *out, void *arg)
{
    (void)out;
    (void)arg;
    if (c->rank == 1)  /* its own stream failed: the world learns it */
        return !c->ops->wait_device(c, broken, NULL, "a step") && strstr(c->error, "a CUDA error") != NULL;
    long polls = 0;
    return !c->ops->wait_device(c, never, &polls, "a step") && strstr(c->error, "rank 1 failed") != NULL;
}

static void test_sim_failures(void)
{
    SimArg args[4];
    double t0 = now_s();
    if (sim_run(4, 2, wait_device_fn, NULL, args))
        for (int r = 0; r < 4; r++)
            CHECK(args[r].ok, "wait_device: rank %d: %s", r, args[r].error);
    if (sim_run(2, 2, wait_broken_fn, NULL, args))
        for (int r = 0; r < 2; r++)
            CHECK(args[r].ok, "wait_device on a failed stream: rank %d: %s", r, args[r].error);
    if (sim_run(4, 2, abort_fn, NULL, args))
        for (int r = 0; r < 4; r++)
            CHECK(r == 2 ? !args[r].ok && strstr(args[r].error, "rank 2 aborted") : args[r].ok,
                  "abort: rank %d: %s", r, args[r].error);
    for (int kind = 0; kind < 4; kind++)
        if (sim_run(2, 2, mismatch_fn, &kind, args))
            for (int r = 0; r < 2; r++)
                CHECK(args[r].ok, "mismatch %d: rank %d: %s", kind, r, args[r].error);
    if (sim_run(4, 2, deadlock_fn, NULL, args))
        for (int r = 0; r < 4; r++)
            CHECK(args[r].ok, "deadlock: rank %d: %s", r, args[r].error);
    CHECK(now_s() - t0 < 10, "failures reported promptly (%.1f s)", now_s() - t0);
}

/* ---- TCP: forked ranks ------------------------------------------------------------ */

typedef struct Result {
    int created, ok;
    char error[512];
    Log log;
    pid_t pid;
} Result;

typedef struct TcpRun {
    int world, ep;
    int nstart;          /* ranks actually started (fewer: a rendezvous that times out) */
    RankFn fn;
    void *arg;
    const char *rdv_timeout;
    int kill_rank;       /* -1, or the rank to SIGKILL once it says it is ready */
    double limit_s;
} TcpRun;

static int ready_fd = -1;  /* in a child: write a byte here to say "kill me now" */

static void child_ready(void)
{
    char b = 'R';
    ssize_t w = write(ready_fd, &b, 1);
    (void)w;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *q = p;
    while (n) {
        ssize_t k = write(fd, q, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return 0;
        q += k;
        n -= (size_t)k;
    }
    return 1;
}

static int free_port(void);

/* Forks the ranks, collects what each reports through a pipe, and kills
 * everything still running after limit_s: a bug fails the test, never hangs it. */
static void tcp_run(const TcpRun *t, Result *res)
{
    int port = free_port();
    int pipes[8][2], ready[2];
    if (pipe(ready) != 0)
        return;
    fflush(NULL);
    for (int r = 0; r < t->nstart; r++) {
        memset(&res[r], 0, sizeof res[r]);
        if (pipe(pipes[r]) != 0)
            return;
        pid_t pid = fork();
        if (pid == 0) {
            close(pipes[r][0]);
            close(ready[0]);
            ready_fd = ready[1];
            setenv("MOEC_RENDEZVOUS_TIMEOUT", t->rdv_timeout ? t->rdv_timeout : "10", 1);
            setenv("MOEC_COMM_TIMEOUT", "20", 1); /* the "promptly" bounds below stay under it: detection, not timeout */
            char err[512] = "";
            Log log = {0};
            Comm *c = comm_tcp_create(r, t->world, t->ep, "127.0.0.1", port, err, sizeof err);
            int hdr[2] = {c != NULL, 0};
            if (c) {
                hdr[1] = t->fn(c, &log, t->arg);
                snprintf(err, sizeof err, "%s", c->error);
            }
            uint64_t len = log.len;
            int w = write_all(pipes[r][1], hdr, sizeof hdr) && write_all(pipes[r][1], err, sizeof err) &&
                    write_all(pipes[r][1], &len, sizeof len) && write_all(pipes[r][1], log.data, log.len);
            comm_free(c);
            log_free(&log);
            _exit(w ? 0 : 1);  /* no atexit handlers or stdio flushes of the parent's copies */
        }
        close(pipes[r][1]);
        res[r].pid = pid;
    }
    close(ready[1]);
    double deadline = now_s() + t->limit_s;
    if (t->kill_rank >= 0) {
        struct pollfd p = {ready[0], POLLIN, 0};
        char b;
        if (poll(&p, 1, (int)(t->limit_s * 1000)) == 1 && read(ready[0], &b, 1) == 1)
            kill(res[t->kill_rank].pid, SIGKILL);
        else
            CHECK(0, "rank %d never got ready", t->kill_rank);
    }
    /* read every pipe to EOF, concurrently: a rank blocks on a full pipe otherwise */
    unsigned char *raw[8] = {0};
    size_t rawlen[8] = {0}, rawcap[8] = {0};
    int open_fds = t->nstart, isopen[8];
    for (int r = 0; r < t->nstart; r++)
        isopen[r] = 1;
    while (open_fds > 0 && now_s() < deadline) {
        struct pollfd p[8];
        int idx[8], np = 0;
        for (int r = 0; r < t->nstart; r++)
            if (isopen[r]) {
                p[np] = (struct pollfd){pipes[r][0], POLLIN, 0};
                idx[np++] = r;
            }
        if (poll(p, (nfds_t)np, 100) <= 0)
            continue;
        for (int k = 0; k < np; k++) {
            if (!p[k].revents)
                continue;
            int r = idx[k];
            if (rawcap[r] - rawlen[r] < 65536) {
                rawcap[r] = rawcap[r] * 2 + 65536;
                raw[r] = realloc(raw[r], rawcap[r]);
            }
            ssize_t n = read(pipes[r][0], raw[r] + rawlen[r], rawcap[r] - rawlen[r]);
            if (n > 0) {
                rawlen[r] += (size_t)n;
            } else if (n == 0 || errno != EINTR) {
                isopen[r] = 0;
                open_fds--;
            }
        }
    }
    for (int r = 0; r < t->nstart; r++) {
        if (isopen[r])
            kill(res[r].pid, SIGKILL);
        close(pipes[r][0]);
    }
    close(ready[0]);
    for (int r = 0; r < t->nstart; r++) {
        int st;
        while (waitpid(res[r].pid, &st, 0) < 0 && errno == EINTR) {
        }
        size_t head = 2 * sizeof(int) + sizeof res[r].error + sizeof(uint64_t);
        if (rawlen[r] >= head) {
            int hdr[2];
            uint64_t len;
            memcpy(hdr, raw[r], sizeof hdr);
            memcpy(res[r].error, raw[r] + sizeof hdr, sizeof res[r].error);
            memcpy(&len, raw[r] + sizeof hdr + sizeof res[r].error, sizeof len);
            res[r].created = hdr[0];
            res[r].ok = hdr[1];
            if (rawlen[r] == head + len)
                log_put(&res[r].log, raw[r] + head, len);
            else
                snprintf(res[r].error, sizeof res[r].error, "truncated report");
        } else {
            snprintf(res[r].error, sizeof res[r].error, "no report (killed after %.0f s, or crashed: wait status 0x%x)",
                     t->limit_s, (unsigned)st);
        }
        free(raw[r]);
    }
}

/* As the launcher does: bind port 0 and read back what the kernel chose. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    int port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
        getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void test_tcp_scenario(void)
{
    for (int k = 1; k < NCONFIGS; k++) {
        int world = configs[k][0], ep = configs[k][1];
        Result res[4];
        TcpRun t = {.world = world, .ep = ep, .nstart = world, .fn = run_scenario, .kill_rank = -1, .limit_s = 15};
        double t0 = now_s();
        tcp_run(&t, res);
        for (int r = 0; r < world; r++) {
            CHECK(res[r].created && res[r].ok, "tcp world %d ep %d rank %d: %s", world, ep, r, res[r].error);
            CHECK(log_equal(&res[r].log, &sim_logs[k][r]),
                  "tcp world %d ep %d rank %d: transcript differs from the simulator's (%zu vs %zu bytes)", world, ep,
                  r, res[r].log.len, sim_logs[k][r].len);
            log_free(&res[r].log);
        }
        CHECK(now_s() - t0 < 20, "tcp world %d ep %d took %.1f s", world, ep, now_s() - t0);
    }
}

/* rank 2 is killed while ranks 0 and 1 wait for it in an allreduce */
static int killed_fn(Comm *c, Log *out, void *arg)
{
    (void)out;
    (void)arg;
    if (!c->ops->barrier(c, COMM_WORLD))
        return 0;
    if (c->rank == 2) {
        child_ready();
        sleep(30);  /* killed long before */
        return 1;
    }
    float x[1000] = {0};
    return c->ops->allreduce_f32(c, COMM_WORLD, x, 1000);
}

/* rank 1 aborts and stays alive: the others must not wait for it */
static int tcp_abort_fn(Comm *c, Log *out, void *arg)
{
    (void)out;
    (void)arg;
    if (!c->ops->barrier(c, COMM_WORLD))
        return 0;
    if (c->rank == 1) {
        comm_abort(c, "injected failure");
        sleep(1);
        return 0;
    }
    float x[10] = {0};
    int ok = c->ops->allreduce_f32(c, COMM_WORLD, x, 10);
    /* a survivor that has read rank 1's abort stays a moment before its process exits: otherwise, on a loaded
     * machine, the other survivor could see this one's sockets close before rank 1's message reaches it and
     * name this rank instead (a race of the test, not of the transport: both errors are true; CI saw it once) */
    if (!ok)
        usleep(500 * 1000);
    return ok;
}

static int tcp_mismatch_fn(Comm *c, Log *out, void *arg)
{
    (void)out;
    (void)arg;
    float x[5] = {0};
    return c->ops->allreduce_f32(c, COMM_WORLD, x, c->rank == 0 ? 4 : 5);
}

static void test_tcp_failures(void)
{
    Result res[4];
    char want[128];
    double t0 = now_s();
    TcpRun t = {.world = 3, .ep = 1, .nstart = 3, .fn = killed_fn, .kill_rank = 2, .limit_s = 15};
    tcp_run(&t, res);
    snprintf(want, sizeof want, "rank 2 (pid %d) exited", (int)res[2].pid);
    for (int r = 0; r < 2; r++) {
        CHECK(res[r].created && !res[r].ok && strstr(res[r].error, want), "killed peer: rank %d: %s", r,
              res[r].error);
        log_free(&res[r].log);
    }
    CHECK(now_s() - t0 < 15, "killed peer noticed promptly (%.1f s)", now_s() - t0);

    t0 = now_s();
    t = (TcpRun){.world = 3, .ep = 1, .nstart = 3, .fn = tcp_abort_fn, .kill_rank = -1, .limit_s = 15};
    tcp_run(&t, res);
    snprintf(want, sizeof want, "from rank 1 (pid %d): rank 1 aborted: injected failure", (int)res[1].pid);
    for (int r = 0; r < 3; r += 2)
        CHECK(!res[r].ok && strstr(res[r].error, want), "aborting peer: rank %d: %s [rank 0: %s]", r, res[r].error,
              res[0].error);
    CHECK(strstr(res[1].error, "rank 1 aborted: injected failure"), "aborting rank: %s", res[1].error);
    CHECK(now_s() - t0 < 15, "abort noticed promptly (%.1f s)", now_s() - t0);

    t = (TcpRun){.world = 2, .ep = 1, .nstart = 2, .fn = tcp_mismatch_fn, .kill_rank = -1, .limit_s = 15};
    tcp_run(&t, res);
    CHECK(!res[0].ok && strstr(res[0].error, "mismatched sizes in allreduce_f32 on world: rank 1 sent 12 bytes"),
          "mismatch: rank 0: %s", res[0].error);
    CHECK(!res[1].ok && strstr(res[1].error, "rank 0 (pid"), "mismatch: rank 1: %s", res[1].error);

    /* world 3, rank 2 never starts */
    t0 = now_s();
    t = (TcpRun){.world = 3, .ep = 1, .nstart = 2, .fn = run_scenario, .rdv_timeout = "1", .kill_rank = -1,
                 .limit_s = 15};
    tcp_run(&t, res);
    CHECK(!res[0].created && strstr(res[0].error, "timed out after 1 s") && strstr(res[0].error, "rank(s) 2 never"),
          "rendezvous timeout: rank 0: %s", res[0].error);
    CHECK(!res[1].created && strstr(res[1].error, "rank 0"), "rendezvous timeout: rank 1: %s", res[1].error);
    CHECK(now_s() - t0 < 10, "rendezvous timeout took %.1f s", now_s() - t0);

    /* nobody listening at all */
    char err[512];
    setenv("MOEC_RENDEZVOUS_TIMEOUT", "1", 1);
    Comm *c = comm_tcp_create(1, 2, 1, "127.0.0.1", free_port(), err, sizeof err);
    CHECK(!c && strstr(err, "could not reach rank 0"), "no master: %s", err);
    setenv("MOEC_RENDEZVOUS_TIMEOUT", "soon", 1);
    c = comm_tcp_create(0, 2, 1, "127.0.0.1", free_port(), err, sizeof err);
    CHECK(!c && strstr(err, "MOEC_RENDEZVOUS_TIMEOUT=soon"), "bad timeout: %s", err);
    unsetenv("MOEC_RENDEZVOUS_TIMEOUT");
    c = comm_tcp_create(0, 1, 1, NULL, 0, err, sizeof err);  /* world 1 needs no network */
    float x[2] = {1, 2};
    CHECK(c && c->ops->allreduce_f32(c, COMM_WORLD, x, 2) && x[1] == 2, "tcp world 1");
    comm_free(c);
}

/* ---- NCCL on a machine without a GPU ------------------------------------------------ */

static void test_nccl_absent(void)
{
    char err[512];
    Comm *c = comm_nccl_create(0, 1, 1, -1, NULL, 0, err, sizeof err);
    if (c) {  /* a GPU machine: the transport works; a world-1 barrier must too */
        CHECK(c->ops->barrier(c, COMM_WORLD), "nccl barrier: %s", c->error);
        comm_free(c);
        return;
    }
    CHECK(strstr(err, "nccl transport:") != NULL, "nccl error: %s", err);
    fprintf(stderr, "test_comm: (no NCCL here: %s)\n", err);
}

/* ---- the launcher --------------------------------------------------------------------- */

/* A rank started by launch_local (the test re-executed). */
static int launch_child(int argc, char **argv)
{
    if (argc != 3)
        return 9;  /* --nproc was not removed */
    int rank, world, port;
    char *addr, err[512];
    if (!launch_env(&rank, &world, &addr, &port, err, sizeof err)) {
        fprintf(stderr, "launch child: %s\n", err);
        return 8;
    }
    const char *mode = argv[2];
    /* "signal": rank 0 ignores SIGTERM from before the rendezvous, or (on a loaded machine) rank 1 could die
     * and the launcher's SIGTERM arrive before rank 0 got to ignoring it */
    if (!strcmp(mode, "signal") && rank == 0)
        signal(SIGTERM, SIG_IGN);
    Comm *c = comm_tcp_create(rank, world, 1, addr, port, err, sizeof err);
    free(addr);
    if (!c) {
        fprintf(stderr, "launch child: %s\n", err);
        return 7;
    }
    int status = 0;
    if (!strcmp(mode, "ok")) {
        double x = rank + 1;
        status = c->ops->allreduce_f64(c, COMM_WORLD, &x, 1) && x == world * (world + 1) / 2.0 ? 0 : 6;
    } else if (!strcmp(mode, "exit")) {  /* rank 1 exits 3; rank 0 waits to be stopped */
        if (rank == 1)
            _exit(3);
        sleep(30);
        status = 5;
    } else if (!strcmp(mode, "signal")) {  /* rank 1 dies by SIGKILL; rank 0 ignores SIGTERM */
        /* rank 1 dies only once rank 0 ignores SIGTERM (a marker file): else, on a loaded machine, the
         * launcher's SIGTERM could reach rank 0 first and end it before the grace period */
        const char *ready = getenv("MOEC_TEST_READY");
        if (rank == 1) {
            for (int i = 0; ready && i < 500 && access(ready, F_OK) != 0; i++)
                usleep(10000);
            raise(SIGKILL);
        }
        signal(SIGTERM, SIG_IGN);
        if (ready) {
            FILE *f = fopen(ready, "w");
            if (f)
                fclose(f);
        }
        sleep(30);
        status = 5;
    }
    comm_free(c);
    return status;
}

static void test_launch_local(const char *self)
{
    char err[512];
    char *ok_argv[] = {(char *)self, "--nproc", "3", "--launch-child", "ok", NULL};
    double t0 = now_s();
    int rc = launch_local(3, 5, ok_argv, err, sizeof err);
    CHECK(rc == 0, "launch ok: %d: %s", rc, err);

    setenv("MOEC_LAUNCH_GRACE", "1", 1);
    char *exit_argv[] = {(char *)self, "--launch-child", "exit", "--nproc=2", NULL};
    rc = launch_local(2, 4, exit_argv, err, sizeof err);
    CHECK(rc == 3 && strstr(err, "rank 1 (pid ") && strstr(err, "exited with status 3"), "launch exit: %d: %s", rc,
          err);

    char *sig_argv[] = {(char *)self, "--launch-child", "signal", "--nproc", "2", NULL};
    char ready[64];
    snprintf(ready, sizeof ready, "/tmp/moec_test_comm_ready.%d", (int)getpid());
    unlink(ready);
    setenv("MOEC_TEST_READY", ready, 1);
    double t1 = now_s();
    rc = launch_local(2, 5, sig_argv, err, sizeof err);
    CHECK(rc == 128 + SIGKILL && strstr(err, "rank 1 (pid ") && strstr(err, "killed by signal 9"),
          "launch signal: %d: %s", rc, err);
    CHECK(now_s() - t1 >= 0.9, "rank 0 ignored SIGTERM, so it took the grace period");
    unlink(ready);
    unsetenv("MOEC_TEST_READY");
    unsetenv("MOEC_LAUNCH_GRACE");
    CHECK(launch_local(0, 1, ok_argv, err, sizeof err) == 1 && strstr(err, "--nproc 0"), "nproc 0: %s", err);
    CHECK(now_s() - t0 < 25, "launcher tests took %.1f s", now_s() - t0);
}

static void test_launch_env(void)
{
    static const char *const vars[] = {"MOEC_RANK", "MOEC_WORLD_SIZE", "MOEC_MASTER_ADDR", "MOEC_MASTER_PORT"};
    int rank, world, port;
    char *addr, err[512];
    struct {
        const char *v[4];
        const char *want;
    } cases[] = {
        {{"1", "4", "10.0.0.1", "29500"}, NULL},
        {{NULL, "4", "10.0.0.1", NULL}, "MOEC_RANK, MOEC_MASTER_PORT not set"},
        {{"x", "4", "h", "1"}, "MOEC_RANK=x: expected a rank"},
        {{"1", "4x", "h", "1"}, "MOEC_WORLD_SIZE=4x"},
        {{"1", "0", "h", "1"}, "MOEC_WORLD_SIZE=0"},
        {{"4", "4", "h", "1"}, "MOEC_RANK=4 is not below MOEC_WORLD_SIZE=4"},
        {{"-1", "4", "h", "1"}, "MOEC_RANK=-1"},
        {{"1", "4", "h", "65536"}, "MOEC_MASTER_PORT=65536"},
        {{"1", "4", "h", ""}, "MOEC_MASTER_PORT not set"},
        {{"99999999999", "4", "h", "1"}, "MOEC_RANK=99999999999"},
    };
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        for (int i = 0; i < 4; i++) {
            if (cases[k].v[i])
                setenv(vars[i], cases[k].v[i], 1);
            else
                unsetenv(vars[i]);
        }
        err[0] = 0;
        int ok = launch_env(&rank, &world, &addr, &port, err, sizeof err);
        if (!cases[k].want)
            CHECK(ok && rank == 1 && world == 4 && port == 29500 && addr && !strcmp(addr, "10.0.0.1"),
                  "launch_env valid: %s", err);
        else
            CHECK(!ok && !addr && strstr(err, cases[k].want), "launch_env case %d: %s", k, err);
        free(addr);
    }
    for (int i = 0; i < 4; i++)
        unsetenv(vars[i]);
}

/* The message checks of comm_wire.c on hand-made messages: what each accepts,
 * drops and refuses (the fuzzer, fuzz_comm.c, checks that none crashes). */
static void test_wire(void)
{
    static const unsigned char key[] = "0123456789abcdef0123456789abcdef";
    WireKey k = {key, 32}, other = {key + 1, 31}, none = {NULL, 0};
    unsigned char chal[TCP_NONCE], nonce[TCP_NONCE];
    memset(chal, 7, sizeof chal);
    memset(nonce, 9, sizeof nonce);
    char msg[512];
    int have[4] = {1, 0, 1, 0};
    WireHello table[4];
    memset(table, 0, sizeof table);
    table[2].pid = 222;
    WireHello h;
    memset(&h, 0, sizeof h);
    h.magic = TCP_MAGIC;
    h.version = TCP_VERSION;
    h.rank = 1;
    h.world = 4;
    h.ep = 2;
    h.pid = 111;
    h.port = 4000;
    snprintf(h.host, sizeof h.host, "127.0.0.1");
    wire_hello_mac(&k, chal, &h, h.mac);
    WireHello x = h;
    CHECK(wire_hello_master(&k, chal, &x, 4, 2, have, table, msg, sizeof msg) == WIRE_OK, "signed hello: %s", msg);
    x = h;
    CHECK(wire_hello_master(&other, chal, &x, 4, 2, have, table, msg, sizeof msg) == WIRE_DROP &&
          strstr(msg, "did not prove the job's secret"), "another key: %s", msg);
    x = h;
    CHECK(wire_hello_master(&none, chal, &x, 4, 2, have, table, msg, sizeof msg) == WIRE_DROP, "no key: dropped");
    x = h;
    x.pid ^= 1;  /* any bit after signing */
    CHECK(wire_hello_master(&k, chal, &x, 4, 2, have, table, msg, sizeof msg) == WIRE_DROP, "altered hello dropped");
    x = h;
    x.version = 1;
    CHECK(wire_hello_master(&k, chal, &x, 4, 2, have, table, msg, sizeof msg) == WIRE_DROP &&
          strstr(msg, "not a moec rank of this version"), "version: %s", msg);
    unsigned char chal2[TCP_NONCE];
    memset(chal2, 8, sizeof chal2);
    x = h;
    CHECK(wire_hello_master(&k, chal2, &x, 4, 2, have, table, msg, sizeof msg) == WIRE_DROP, "replayed hello dropped");
    /* authenticated but inconsistent: the job stops, naming it */
    x = h;
    x.world = 8;
    wire_hello_mac(&k, chal, &x, x.mac);
    CHECK(wire_hello_master(&k, chal, &x, 4, 2, have, table, msg, sizeof msg) == WIRE_FATAL &&
          strstr(msg, "joined with world size 8 and ep 2, but rank 0 has world size 4 and ep 2"), "world: %s", msg);
    x = h;
    x.rank = 2;
    wire_hello_mac(&k, chal, &x, x.mac);
    CHECK(wire_hello_master(&k, chal, &x, 4, 2, have, table, msg, sizeof msg) == WIRE_FATAL &&
          strstr(msg, "rank 2 joined twice (pids 222 and 111)"), "twice: %s", msg);
    x = h;
    x.rank = 4;
    wire_hello_mac(&k, chal, &x, x.mac);
    CHECK(wire_hello_master(&k, chal, &x, 4, 2, have, table, msg, sizeof msg) == WIRE_FATAL &&
          strstr(msg, "joined as rank 4, outside 1..3"), "range: %s", msg);
    /* control characters in the host are replaced, after the MAC */
    x = h;
    memcpy(x.host, "\033[2J", 4);
    wire_hello_mac(&k, chal, &x, x.mac);
    CHECK(wire_hello_master(&k, chal, &x, 4, 2, have, table, msg, sizeof msg) == WIRE_OK && x.host[0] == '?',
          "host sanitised: %s", x.host);
    /* the mesh: only a higher rank not yet connected */
    x = h;
    x.rank = 3;
    wire_hello_mac(&k, chal, &x, x.mac);
    CHECK(wire_hello_mesh(&k, chal, &x, 1, 4, have, msg, sizeof msg) == WIRE_OK, "mesh hello: %s", msg);
    x = h;
    CHECK(wire_hello_mesh(&k, chal, &x, 1, 4, have, msg, sizeof msg) == WIRE_DROP, "mesh: a lower rank is dropped");
    /* rank 0's table: its MAC answers our nonce */
    WireHello t[2];
    memset(t, 0, sizeof t);
    for (int r = 0; r < 2; r++) {
        t[r].magic = TCP_MAGIC;
        t[r].rank = r;
        t[r].world = 2;
        t[r].port = r ? 4001 : 0;
    }
    unsigned char mac[SHA256_LEN];
    wire_mac(&k, "moec-table", nonce, TCP_NONCE, t, sizeof t, mac);
    CHECK(wire_table_check(&k, nonce, t, 2, mac, msg, sizeof msg) == WIRE_OK, "table: %s", msg);
    CHECK(wire_table_check(&k, chal, t, 2, mac, msg, sizeof msg) == WIRE_FATAL && strstr(msg, "not this job's rank 0"),
          "table for another nonce: %s", msg);
    t[1].port = 70000;
    wire_mac(&k, "moec-table", nonce, TCP_NONCE, t, sizeof t, mac);
    CHECK(wire_table_check(&k, nonce, t, 2, mac, msg, sizeof msg) == WIRE_FATAL &&
          strstr(msg, "malformed rank table (entry 1)"), "port 70000: %s", msg);
    /* the mesh acknowledgement */
    unsigned char ack[SHA256_LEN];
    wire_mac(&k, "moec-ack", nonce, TCP_NONCE, h.mac, SHA256_LEN, ack);
    CHECK(wire_ack_ok(&k, nonce, h.mac, ack) && !wire_ack_ok(&k, chal, h.mac, ack) && !wire_ack_ok(&other, nonce, h.mac, ack),
          "ack");
    /* headers */
    WireHeader hd = {.magic = TCP_MAGIC, .op = COMM_OP_ALLGATHER, .group = COMM_EP, .seq = 5, .len = 64};
    CHECK(wire_header_check(&hd, COMM_OP_ALLGATHER, COMM_EP, 5, 64, 0, 1, msg, sizeof msg) == WIRE_OK, "header");
    CHECK(wire_header_check(&hd, COMM_OP_ALLGATHER, COMM_EP, 6, 64, 0, 1, msg, sizeof msg) == WIRE_FATAL &&
          strstr(msg, "mismatched collectives: rank 0 is in allgather on ep (#6), rank 1 sent allgather on ep (#5)"),
          "seq: %s", msg);
    CHECK(wire_header_check(&hd, COMM_OP_ALLGATHER, COMM_EP, 5, 65, 0, 1, msg, sizeof msg) == WIRE_FATAL &&
          strstr(msg, "rank 1 sent 64 bytes, rank 0 expects 65"), "len: %s", msg);
    hd.op = 200;
    hd.group = 9;
    CHECK(wire_header_check(&hd, COMM_OP_ALLGATHER, COMM_EP, 5, 64, 0, 1, msg, sizeof msg) == WIRE_FATAL &&
          strstr(msg, "rank 1 sent ? on ? (#5)"), "bad op: %s", msg);
    hd.op = TCP_NOTICE;
    CHECK(wire_header_check(&hd, COMM_OP_ALLGATHER, COMM_EP, 5, 64, 0, 1, msg, sizeof msg) == WIRE_NOTICE, "notice");
    hd.magic = 0;
    CHECK(wire_header_check(&hd, COMM_OP_ALLGATHER, COMM_EP, 5, 64, 0, 1, msg, sizeof msg) == WIRE_FATAL &&
          strstr(msg, "corrupt message header"), "magic: %s", msg);
    char text[TCP_NOTICE_MAX + 1];
    wire_notice_text("out\033[31m\a", 9, text);
    CHECK(!strcmp(text, "out?[31m?"), "notice text: %s", text);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "--launch-child"))
        return launch_child(argc, argv);
    int sim_only = argc >= 2 && !strcmp(argv[1], "--sim-only");
    alarm(sim_only ? 120 : 90);  /* a hang is a failure, not a stuck CI job */
    signal(SIGPIPE, SIG_IGN);
    test_groups();
    test_order_matters();
    test_single();
    test_wire();
    test_sim_scenario();
    test_sim_failures();
    if (!sim_only) {
        test_tcp_scenario();
        test_tcp_failures();
        test_nccl_absent();
        test_launch_env();
        test_launch_local("/proc/self/exe");
    }
    for (int k = 0; k < NCONFIGS; k++)
        for (int r = 0; r < 4; r++)
            log_free(&sim_logs[k][r]);
    printf("test_comm: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
