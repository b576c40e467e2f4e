/* comm_tcp.c - the TCP transport: one process per rank, a full mesh of
 * connections (loopback or a network).
 *
 * Setup: rank 0 listens on MOEC_MASTER_ADDR:MOEC_MASTER_PORT; every other
 * rank opens a listener of its own, connects to rank 0 (retrying while rank
 * 0 is not up yet) and says hello (rank, world, ep, pid, its listener).
 * Rank 0 checks that everyone agrees on the layout and sends back the table
 * of all ranks; each rank then connects to every lower rank but 0 and
 * accepts the higher ones. The rendezvous sockets are rank 0's links. All of
 * it is bounded by MOEC_RENDEZVOUS_TIMEOUT, and a timeout names the ranks
 * that never arrived.
 *
 * Collectives: each is one or two exchanges in which a rank sends at most
 * one message to, and receives at most one from, each group peer. A poll()
 * loop moves all of them at once on non-blocking sockets, so large messages
 * in both directions never deadlock. Each message carries a header (kind,
 * group, sequence number, length) that the receiver checks, so mismatched
 * calls fail naming both ranks instead of misreading the stream. A peer's
 * EOF or reset fails the collective with "rank N (pid P) exited"; a peer
 * that makes no progress for MOEC_COMM_TIMEOUT seconds fails it too.
 *
 * allreduce is a reduce-scatter then an allgather: group rank k owns chunk
 * k (comm_chunk), receives everyone's chunk k and adds them in group-rank
 * order with comm_sum_*, exactly as the simulator does, so the bits match
 * it and a serial sum in that order.
 *
 * Authentication (docs/reliability.md): every connection, to rank 0 and in
 * the mesh, proves that both ends hold the job's secret (MOEC_SECRET_FILE or
 * MOEC_SECRET; the --nproc launcher makes one per job) without sending it.
 * The acceptor sends a fresh random challenge; the connector answers with
 * its hello and HMAC-SHA-256(secret, "moec-hello" || challenge || hello),
 * whose hello carries a nonce of its own; the acceptor answers that nonce
 * with a MAC of what it sends back (the rank table, or an acknowledgement).
 * A connection that does not prove the secret, sends garbage or stays
 * silent is dropped without disturbing the job; rank 0 holds at most
 * world + 32 unfinished connections, each for at most 5 seconds (the oldest
 * gives way to a new one). Without a secret the key is empty: allowed only
 * when MOEC_MASTER_ADDR is a loopback address. Text from peers (failure
 * notices, addresses) is printed with control characters replaced. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "comm_impl.h"
#include "comm_wire.h"
#include "../../util/sha256.h"
#include "../../util/util.h"

#define TCP_PEND_MS 5000          /* an unfinished connection is dropped after this long */
#define TCP_PEND_EXTRA 32         /* rank 0 holds at most world + this many unfinished connections */

/* The messages (WireHello, WireChallenge, WireHeader) and the checks of what arrives are in comm_wire.c. */

typedef struct TcpPeer {
    int fd;                      /* -1 for this rank */
    int pid;
    int send_mid;                /* a failed exchange stopped inside a message to this peer */
} TcpPeer;

typedef struct Tcp {
    TcpPeer *peers;              /* [world] */
    int notified;                /* this rank's failure was told to the peers */
    uint32_t seq[3];             /* per CommGroup */
    int timeout_s;               /* MOEC_COMM_TIMEOUT: no progress for this long fails; 0 = never */
    void *scratch;               /* allreduce: the peers' parts of this rank's chunk */
    size_t scratch_cap;
    unsigned char *key;          /* the job's secret (empty: none, loopback only) */
    size_t keylen;
    int refused;                 /* connections dropped for failing authentication (rank 0 reports 3) */
} Tcp;

/* ---- socket helpers ------------------------------------------------------ */

static void set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  /* small headers must not wait for acks */
}

static int ms_left(int64_t deadline)
{
    int64_t left = deadline - comm_now_ms();
    return left <= 0 ? 0 : left > 1000 ? 1000 : (int)left;  /* wake at least once a second */
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Reads or writes exactly len bytes before the deadline. Returns 1; 0 on
 * timeout (errno ETIMEDOUT), EOF (errno 0) or an error (errno set). */
static int io_all(int fd, void *buf, size_t len, int writing, int64_t deadline)
{
    char *p = buf;
    while (len) {
        ssize_t k = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
        if (k > 0) {
            p += k;
            len -= (size_t)k;
            continue;
        }
        if (k == 0) {
            errno = 0;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return 0;
        if (comm_now_ms() >= deadline) {
            errno = ETIMEDOUT;
            return 0;
        }
        struct pollfd pfd = {fd, writing ? POLLOUT : POLLIN, 0};
        poll(&pfd, 1, ms_left(deadline));
    }
    return 1;
}

static const char *io_error(void)
{
    return errno == 0 ? "connection closed" : strerror(errno);
}

/* One non-blocking connect attempt, waiting until the deadline. */
static int connect_once(const struct addrinfo *ai, int64_t deadline, int *err_no)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        *err_no = errno;
        return -1;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return fd;
    if (errno != EINPROGRESS) {
        *err_no = errno;
        close(fd);
        return -1;
    }
    for (;;) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        int r = poll(&pfd, 1, ms_left(deadline));
        if (r > 0) {
            int soerr = 0;
            socklen_t sl = sizeof soerr;
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
            if (soerr == 0)
                return fd;
            *err_no = soerr;
            break;
        }
        if (r < 0 && errno != EINTR) {
            *err_no = errno;
            break;
        }
        if (comm_now_ms() >= deadline) {
            *err_no = ETIMEDOUT;
            break;
        }
    }
    close(fd);
    return -1;
}

/* Connects to host:port, retrying (a listener that is not up yet refuses)
 * until the deadline. Returns the fd, or -1 with the last error in err. */
static int connect_retry(const char *host, int port, int64_t deadline, char *err, size_t errlen)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int delay = 20, last = ETIMEDOUT;
    char gai[128] = "";
    for (;;) {
        struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
        struct addrinfo *res = NULL;
        int rc = getaddrinfo(host, portstr, &hints, &res);
        if (rc == 0) {
            gai[0] = 0;
            for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                int fd = connect_once(ai, deadline, &last);
                if (fd >= 0) {
                    freeaddrinfo(res);
                    set_nodelay(fd);
                    return fd;
                }
            }
            freeaddrinfo(res);
        } else {
            snprintf(gai, sizeof gai, "%s", gai_strerror(rc));  /* DNS may come up later: keep trying */
        }
        int64_t now = comm_now_ms();
        if (now >= deadline)
            break;
        sleep_ms((int)(deadline - now < delay ? deadline - now : delay));
        delay = delay * 2 > 500 ? 500 : delay * 2;
    }
    snprintf(err, errlen, "%s", gai[0] ? gai : strerror(last));
    return -1;
}

/* A listener on host (numeric or name; NULL = any address) and port (0 = any free one). */
static int listen_on(const char *host, int port, int backlog, char *err, size_t errlen)
{
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, portstr, &hints, &res);
    if (rc != 0) {
        snprintf(err, errlen, "%s", gai_strerror(rc));
        return -1;
    }
    int last = 0;
    for (int wildcard = 0; wildcard < 2; wildcard++) {
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
            if (fd < 0) {
                last = errno;
                continue;
            }
            int one = 1;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  /* restart right after a run */
            struct sockaddr_storage ss;
            memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
            if (wildcard) {
                /* the name is not an address of this machine (behind NAT, say): listen on all */
                if (ss.ss_family == AF_INET)
                    ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_ANY);
                else if (ss.ss_family == AF_INET6)
                    ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_any;
            }
            if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0) {
                freeaddrinfo(res);
                return fd;
            }
            last = errno;
            close(fd);
        }
        if (last != EADDRNOTAVAIL)
            break;
    }
    freeaddrinfo(res);
    snprintf(err, errlen, "%s", strerror(last));
    return -1;
}

/* The numeric address and port of a socket's local end. */
static int local_name(int fd, char host[TCP_HOST_LEN], int *port)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char serv[16];
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0 ||
        getnameinfo((struct sockaddr *)&ss, sl, host, TCP_HOST_LEN, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV))
        return 0;
    *port = atoi(serv);
    return 1;
}

/* Accepts one connection before the deadline; -1 on timeout or error. */
static int accept_until(int lfd, int64_t deadline)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
            set_nodelay(fd);
            return fd;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
            return -1;
        if (comm_now_ms() >= deadline)
            return -1;
        struct pollfd pfd = {lfd, POLLIN, 0};
        poll(&pfd, 1, ms_left(deadline));
    }
}

/* ---- authentication ------------------------------------------------------ */

static int random_bytes(void *p, size_t n)
{
    unsigned char *b = p;
    while (n > 0) {
        ssize_t k = getrandom(b, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return 0;
        b += k;
        n -= (size_t)k;
    }
    return 1;
}

static WireKey tcp_key(const Tcp *t)
{
    return (WireKey){t->key, t->keylen};
}

static void mac3(const Tcp *t, const char *label, const void *a, size_t na, const void *b, size_t nb,
                 unsigned char out[SHA256_LEN])
{
    WireKey k = tcp_key(t);
    wire_mac(&k, label, a, na, b, nb, out);
}

/* Sends this end's challenge on a fresh connection (a few bytes: the socket buffer takes them at once). */
static int send_challenge(int fd, unsigned char nonce[TCP_NONCE])
{
    WireChallenge c = {TCP_MAGIC, TCP_VERSION, {0}};
    if (!random_bytes(c.nonce, TCP_NONCE))
        return 0;
    memcpy(nonce, c.nonce, TCP_NONCE);
    return send(fd, &c, sizeof c, MSG_NOSIGNAL) == (ssize_t)sizeof c;
}

/* Connector: the acceptor's challenge, then our hello proving the secret. */
static int answer_challenge(const Tcp *t, int fd, WireHello *me, int64_t deadline, unsigned char nonce_out[TCP_NONCE])
{
    WireChallenge c;
    if (!io_all(fd, &c, sizeof c, 0, deadline))
        return 0;
    if (!wire_challenge_ok(&c)) {
        errno = EPROTO;
        return 0;
    }
    if (!random_bytes(me->nonce, TCP_NONCE))
        return 0;
    memcpy(nonce_out, me->nonce, TCP_NONCE);
    WireKey k = tcp_key(t);
    wire_hello_mac(&k, c.nonce, me, me->mac);
    return io_all(fd, me, sizeof *me, 1, deadline);
}

static int is_loopback(const char *addr)
{
    unsigned char a[16];
    if (strcmp(addr, "localhost") == 0)
        return 1;
    if (inet_pton(AF_INET, addr, a) == 1)
        return a[0] == 127;
    if (inet_pton(AF_INET6, addr, a) == 1)
        return memcmp(a, in6addr_loopback.s6_addr, 16) == 0;
    return 0;
}

/* The job's secret: MOEC_SECRET_FILE (its contents, a trailing newline dropped) or MOEC_SECRET. */
static int load_secret(Tcp *t, int rank, int world, const char *addr, char *err, size_t errlen)
{
    const char *file = getenv("MOEC_SECRET_FILE"), *text = getenv("MOEC_SECRET");
    if (file && *file && text && *text) {
        snprintf(err, errlen, "rank %d: both MOEC_SECRET_FILE and MOEC_SECRET are set: set one", rank);
        return 0;
    }
    if (file && *file) {
        char oerr[512];
        FILE *f = fopen_regular(file, oerr, sizeof oerr);
        if (!f) {
            snprintf(err, errlen, "rank %d: MOEC_SECRET_FILE: %s", rank, oerr);
            return 0;
        }
        t->key = malloc(4097);
        size_t n = t->key ? fread(t->key, 1, 4097, f) : 0;
        fclose(f);
        while (n > 0 && (t->key[n - 1] == '\n' || t->key[n - 1] == '\r'))
            n--;
        if (n == 0 || n > 4096) {
            snprintf(err, errlen, "rank %d: MOEC_SECRET_FILE %s is %s: give 16 to 4096 bytes, the same file on every "
                     "host", rank, file, n ? "longer than 4096 bytes" : "empty");
            return 0;
        }
        t->keylen = n;
    } else if (text && *text) {
        t->keylen = strlen(text);
        t->key = malloc(t->keylen);
        if (t->key)
            memcpy(t->key, text, t->keylen);
    }
    if (t->keylen && t->keylen < 16) {
        snprintf(err, errlen, "rank %d: the job's secret (MOEC_SECRET_FILE or MOEC_SECRET) has %zu bytes: give at "
                 "least 16 (say, `head -c 32 /dev/urandom | base64`)", rank, t->keylen);
        return 0;
    }
    if (!t->keylen && world > 1 && !is_loopback(addr)) {
        snprintf(err, errlen, "rank %d: MOEC_MASTER_ADDR=%s is not a loopback address and the job has no secret: "
                 "anyone who reaches the port could join the job. Put the same random secret on every host and set "
                 "MOEC_SECRET_FILE to it (or MOEC_SECRET), e.g. `head -c 32 /dev/urandom | base64 > secret; chmod "
                 "600 secret`", rank, addr);
        return 0;
    }
    return 1;
}

static void refused(Tcp *t, int fd, const char *why)
{
    if (t->refused++ >= 3)
        return;
    char host[TCP_HOST_LEN] = "?", serv[16] = "?";
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV);
    fprintf(stderr, "moec: rank 0: warning: dropped a connection from %s:%s: %s%s\n", host, serv, why,
            t->refused == 3 ? " (further ones are not reported)" : "");
}

static WireHello make_hello(int rank, int world, int ep)
{
    WireHello h;
    memset(&h, 0, sizeof h);
    h.magic = TCP_MAGIC;
    h.version = TCP_VERSION;
    h.rank = rank;
    h.world = world;
    h.ep = ep;
    h.pid = (int32_t)getpid();
    return h;
}

/* "2, 3, 5" (the ranks with have[r] == 0), for the timeout messages. */
static void list_missing(const int *have, int world, char *out, size_t outlen)
{
    size_t len = 0;
    int shown = 0;
    out[0] = 0;
    for (int r = 0; r < world && len + 16 < outlen; r++) {
        if (have[r])
            continue;
        if (shown++ == 16) {
            len += (size_t)snprintf(out + len, outlen - len, ", ...");
            break;
        }
        len += (size_t)snprintf(out + len, outlen - len, "%s%d", len ? ", " : "", r);
    }
}

/* ---- setup --------------------------------------------------------------- */

/* Rank 0: accept every other rank's hello, check the layout, send the table. */
static int rendezvous_master(Tcp *t, int world, int ep, const char *addr, int port, int timeout_s, char *err,
                             size_t errlen)
{
    char why[256];
    int lfd = listen_on(addr, port, world + TCP_PEND_EXTRA, why, sizeof why);
    if (lfd < 0) {
        snprintf(err, errlen, "rank 0: cannot listen on %s:%d (MOEC_MASTER_ADDR:MOEC_MASTER_PORT): %s", addr, port,
                 why);
        return 0;
    }
    WireHello *table = calloc((size_t)world, sizeof *table);
    int *have = calloc((size_t)world, sizeof *have);
    /* connections accepted but whose authenticated hello has not fully arrived yet: at most cap, each for at
     * most TCP_PEND_MS; a stranger's idle or garbage connection is dropped and never stalls the job */
    int npend = 0, cap = world + TCP_PEND_EXTRA;
    struct Pending { int fd; size_t got; WireHello h; unsigned char challenge[TCP_NONCE]; int64_t until; } *pend =
        calloc((size_t)cap, sizeof *pend);
    struct pollfd *pfds = calloc((size_t)cap + 1, sizeof *pfds);
    int ok = table && have && pend && pfds;
    if (!ok)
        snprintf(err, errlen, "out of memory");
    else {
        table[0] = make_hello(0, world, ep);
        have[0] = 1;
    }
    int arrived = 1;
    int64_t deadline = comm_now_ms() + (int64_t)timeout_s * 1000;
    while (ok && arrived < world) {
        int64_t now = comm_now_ms();
        if (now >= deadline) {
            char missing[200];
            list_missing(have, world, missing, sizeof missing);
            snprintf(err, errlen,
                     "rank 0: rendezvous at %s:%d timed out after %d s (MOEC_RENDEZVOUS_TIMEOUT): %d of %d ranks "
                     "arrived; rank(s) %s never did",
                     addr, port, timeout_s, arrived, world, missing);
            ok = 0;
            break;
        }
        int64_t wake = deadline;
        for (int i = npend - 1; i >= 0; i--) {
            if (pend[i].until <= now) {
                refused(t, pend[i].fd, "no authenticated hello within 5 s");
                close(pend[i].fd);
                pend[i] = pend[--npend];
            } else if (pend[i].until < wake) {
                wake = pend[i].until;
            }
        }
        pfds[0] = (struct pollfd){lfd, POLLIN, 0};
        for (int i = 0; i < npend; i++)
            pfds[1 + i] = (struct pollfd){pend[i].fd, POLLIN, 0};
        if (poll(pfds, (nfds_t)npend + 1, ms_left(wake)) <= 0)
            continue;
        /* downwards, so that removing entry i (the last one moves into it) leaves those below in place */
        int npolled = npend;
        for (int i = npolled - 1; i >= 0 && ok; i--) {
            if (!(pfds[1 + i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t k = recv(pend[i].fd, (char *)&pend[i].h + pend[i].got, sizeof(WireHello) - pend[i].got, 0);
            if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
                continue;
            if (k > 0)
                pend[i].got += (size_t)k;
            int drop = k <= 0;  /* gone before saying hello: a stray connection, not a rank */
            if (pend[i].got == sizeof(WireHello)) {
                WireHello *h = &pend[i].h;
                char msg[512];
                WireKey key = tcp_key(t);
                int verdict = wire_hello_master(&key, pend[i].challenge, h, world, ep, have, table, msg, sizeof msg);
                if (verdict == WIRE_DROP) {
                    refused(t, pend[i].fd, msg);
                    drop = 1;
                } else if (verdict == WIRE_FATAL) {
                    snprintf(err, errlen, "%s", msg);
                    ok = 0;
                } else {
                    table[h->rank] = *h;
                    have[h->rank] = 1;
                    t->peers[h->rank] = (TcpPeer){pend[i].fd, h->pid, 0};
                    arrived++;
                    pend[i] = pend[--npend];
                    continue;
                }
            }
            if (drop) {
                close(pend[i].fd);
                pend[i] = pend[--npend];
            }
        }
        if (ok && (pfds[0].revents & POLLIN)) {
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (fd >= 0 && npend == cap) {
                /* full: the oldest unfinished connection gives way (a real rank finishes in milliseconds) */
                int old = 0;
                for (int i = 1; i < npend; i++)
                    if (pend[i].until < pend[old].until)
                        old = i;
                refused(t, pend[old].fd, "too many unfinished connections");
                close(pend[old].fd);
                pend[old] = pend[--npend];
            }
            if (fd >= 0) {
                set_nodelay(fd);
                pend[npend] = (struct Pending){.fd = fd, .until = comm_now_ms() + TCP_PEND_MS};
                if (send_challenge(fd, pend[npend].challenge))
                    npend++;
                else
                    close(fd);
            }
        }
    }
    for (int i = 0; i < npend; i++)
        close(pend[i].fd);
    close(lfd);
    /* the table, and a MAC of it for each rank's nonce: rank 0 proves the secret too */
    for (int r = 1; ok && r < world; r++) {
        unsigned char mac[SHA256_LEN];
        mac3(t, "moec-table", table[r].nonce, TCP_NONCE, table, (size_t)world * sizeof *table, mac);
        if (!io_all(t->peers[r].fd, table, (size_t)world * sizeof *table, 1, deadline) ||
            !io_all(t->peers[r].fd, mac, sizeof mac, 1, deadline)) {
            snprintf(err, errlen, "rank 0: sending the rank table to rank %d (pid %d): %s", r, t->peers[r].pid,
                     io_error());
            ok = 0;
        }
    }
    free(table);
    free(have);
    free(pend);
    free(pfds);
    return ok;
}

/* Rank > 0: hello to rank 0, the table back, then the mesh. */
static int rendezvous_peer(Tcp *t, int rank, int world, int ep, const char *addr, int port, int timeout_s, char *err,
                           size_t errlen)
{
    char why[256];
    int64_t deadline = comm_now_ms() + (int64_t)timeout_s * 1000;
    int fd0 = connect_retry(addr, port, deadline, why, sizeof why);
    if (fd0 < 0) {
        snprintf(err, errlen,
                 "rank %d: could not reach rank 0 at %s:%d within %d s (MOEC_MASTER_ADDR, MOEC_MASTER_PORT, "
                 "MOEC_RENDEZVOUS_TIMEOUT): %s",
                 rank, addr, port, timeout_s, why);
        return 0;
    }
    t->peers[0].fd = fd0;
    /* listen on the address that reaches rank 0: the others can reach it too */
    WireHello me = make_hello(rank, world, ep);
    int lfd = -1;
    if (!local_name(fd0, me.host, &me.port) || (lfd = listen_on(me.host, 0, world + 8, why, sizeof why)) < 0 ||
        !local_name(lfd, me.host, &me.port)) {
        snprintf(err, errlen, "rank %d: cannot open a listener for the other ranks: %s", rank,
                 lfd < 0 ? why : strerror(errno));
        if (lfd >= 0)
            close(lfd);
        return 0;
    }
    WireHello *table = calloc((size_t)world, sizeof *table);
    int *have = calloc((size_t)world, sizeof *have);
    int ok = table && have;
    if (!ok)
        snprintf(err, errlen, "out of memory");
    unsigned char mine[TCP_NONCE], mac[SHA256_LEN];
    if (ok && !answer_challenge(t, fd0, &me, deadline, mine)) {
        snprintf(err, errlen, "rank %d: saying hello to rank 0 at %s:%d: %s%s", rank, addr, port, io_error(),
                 errno == EPROTO ? " (not a moec rank 0 of this version)" : "");
        ok = 0;
    }
    if (ok && (!io_all(fd0, table, (size_t)world * sizeof *table, 0, deadline) ||
               !io_all(fd0, mac, sizeof mac, 0, deadline))) {
        if (errno == ETIMEDOUT)
            snprintf(err, errlen,
                     "rank %d: rank 0 at %s:%d did not send the rank table within %d s (MOEC_RENDEZVOUS_TIMEOUT): "
                     "some rank never arrived (rank 0 says which)",
                     rank, addr, port, timeout_s);
        else
            snprintf(err, errlen,
                     "rank %d: rank 0 at %s:%d ended the rendezvous (%s): see rank 0's message (another "
                     "MOEC_SECRET_FILE/MOEC_SECRET than rank 0's?)", rank, addr, port, io_error());
        ok = 0;
    }
    if (ok) {
        char msg[512];
        WireKey k = tcp_key(t);
        if (wire_table_check(&k, mine, table, world, mac, msg, sizeof msg) != WIRE_OK) {
            snprintf(err, errlen, "rank %d: the process at %s:%d %s", rank, addr, port, msg);
            ok = 0;
        }
    }
    if (ok)
        t->peers[0].pid = table[0].pid;
    /* connect down (listeners were up before the hellos, so no retries needed) */
    for (int j = 1; ok && j < rank; j++) {
        int fd = connect_retry(table[j].host, table[j].port, deadline, why, sizeof why);
        unsigned char ack[SHA256_LEN];
        WireHello mesh = me;
        int proved = fd >= 0 && answer_challenge(t, fd, &mesh, deadline, mine) && io_all(fd, ack, sizeof ack, 0, deadline);
        if (proved) {
            WireKey k = tcp_key(t);
            proved = wire_ack_ok(&k, mine, mesh.mac, ack);
            if (!proved)
                errno = EACCES;
        }
        if (!proved) {
            snprintf(err, errlen, "rank %d: connecting to rank %d (pid %d) at %s:%d: %s", rank, j, table[j].pid,
                     table[j].host, table[j].port, fd < 0 ? why : errno == EACCES ? "it did not prove the job's secret"
                                                                                   : io_error());
            if (fd >= 0)
                close(fd);
            ok = 0;
            break;
        }
        t->peers[j] = (TcpPeer){fd, table[j].pid, 0};
    }
    /* accept up */
    int need = world - 1 - rank;
    while (ok && need > 0) {
        int fd = accept_until(lfd, deadline);
        WireHello h;
        if (fd < 0) {
            for (int r = 0; r < world; r++)
                have[r] = r <= rank || t->peers[r].fd >= 0;
            char missing[200];
            list_missing(have, world, missing, sizeof missing);
            snprintf(err, errlen, "rank %d: rank(s) %s never connected within %d s (MOEC_RENDEZVOUS_TIMEOUT)", rank,
                     missing, timeout_s);
            ok = 0;
        } else {
            /* a stranger gets TCP_PEND_MS, not the whole rendezvous, to prove the secret */
            int64_t until = comm_now_ms() + TCP_PEND_MS < deadline ? comm_now_ms() + TCP_PEND_MS : deadline;
            unsigned char chal[TCP_NONCE], ack[SHA256_LEN];
            char msg[256];
            WireKey k = tcp_key(t);
            for (int r = 0; r < world; r++)
                have[r] = t->peers[r].fd >= 0;
            if (!send_challenge(fd, chal) || !io_all(fd, &h, sizeof h, 0, until) ||
                wire_hello_mesh(&k, chal, &h, rank, world, have, msg, sizeof msg) != WIRE_OK) {
                close(fd);  /* not one of ours, or it died while connecting: keep waiting for the real one */
                continue;
            }
            mac3(t, "moec-ack", h.nonce, TCP_NONCE, h.mac, SHA256_LEN, ack);
            if (!io_all(fd, ack, sizeof ack, 1, until)) {
                close(fd);
                continue;
            }
            t->peers[h.rank] = (TcpPeer){fd, h.pid, 0};
            need--;
        }
    }
    close(lfd);
    free(table);
    free(have);
    return ok;
}

/* ---- the exchange engine -------------------------------------------------- */

/* One peer's part of an exchange: at most one message each way. */
typedef struct Xfer {
    int peer;                    /* global rank */
    int sending, receiving;
    WireHeader shdr, rhdr;
    const char *sbuf;
    size_t slen, sdone;          /* sdone counts the header too */
    char *rbuf;
    size_t rlen, rdone;
} Xfer;

static void xfer_send(Xfer *x, const void *buf, size_t len)
{
    x->sending = 1;
    x->sbuf = buf;
    x->slen = len;
}

static void xfer_recv(Xfer *x, void *buf, size_t len)
{
    x->receiving = 1;
    x->rbuf = buf;
    x->rlen = len;
}

static int tcp_fail_peer(Comm *c, int peer, CommOpKind op, CommGroup g, const char *what)
{
    Tcp *t = c->impl;
    return comm_fail(c, "rank %d: rank %d (pid %d) exited or failed (%s) during %s on %s", c->rank, peer,
                     t->peers[peer].pid, what, comm_op_name(op), comm_group_name(g));
}

/* The peer failed and says why: its last words, right behind the header just read. */
static int read_notice(Comm *c, int peer, uint64_t len, CommOpKind op, CommGroup g)
{
    Tcp *t = c->impl;
    char raw[TCP_NOTICE_MAX] = "", text[TCP_NOTICE_MAX + 1];
    size_t n = len < TCP_NOTICE_MAX ? (size_t)len : TCP_NOTICE_MAX;
    if (io_all(t->peers[peer].fd, raw, n, 0, comm_now_ms() + 2000))
        wire_notice_text(raw, n, text);
    else
        snprintf(text, sizeof text, "(its message was cut off)");
    return comm_fail(c, "rank %d: %s on %s stopped: from rank %d (pid %d): %s", c->rank, comm_op_name(op),
                     comm_group_name(g), peer, t->peers[peer].pid, text);
}

/* The peer's end is gone (a send failed, or its stream ended while this
 * rank had nothing more to read from it). Unless this rank is inside one of
 * its messages, a notice may be waiting to be read: then it names the cause. */
static int peer_hung_up(Comm *c, const Xfer *x, CommOpKind op, CommGroup g, const char *what)
{
    Tcp *t = c->impl;
    WireHeader h;
    if (!(x->receiving && x->rdone > 0)) {
        ssize_t k = recv(t->peers[x->peer].fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
        if (k == (ssize_t)sizeof h && h.magic == TCP_MAGIC && h.op == TCP_NOTICE &&
            recv(t->peers[x->peer].fd, &h, sizeof h, MSG_DONTWAIT) == (ssize_t)sizeof h)
            return read_notice(c, x->peer, h.len, op, g);
    }
    return tcp_fail_peer(c, x->peer, op, g, what);
}

/* The header arrived: is it the message this rank expects? */
static int check_header(Comm *c, const Xfer *x, CommOpKind op, CommGroup g, uint32_t seq)
{
    char msg[512];
    int verdict = wire_header_check(&x->rhdr, op, g, seq, x->rlen, c->rank, x->peer, msg, sizeof msg);
    if (verdict == WIRE_NOTICE)
        return read_notice(c, x->peer, x->rhdr.len, op, g);
    if (verdict != WIRE_OK)
        return comm_fail(c, "%s", msg);
    return 1;
}

/* Moves every message of the exchange; 0 (with a message) on a dead peer,
 * a mismatch, or MOEC_COMM_TIMEOUT seconds without progress. */
static int exchange_run(Comm *c, Xfer *xs, int nx, CommOpKind op, CommGroup g)
{
    Tcp *t = c->impl;
    uint32_t seq = t->seq[g]++;
    struct pollfd pfds[nx > 0 ? nx : 1];
    int idx[nx > 0 ? nx : 1];
    for (int i = 0; i < nx; i++) {
        xs[i].shdr = (WireHeader){.magic = TCP_MAGIC, .op = (uint8_t)op, .group = (uint8_t)g, .seq = seq,
                                  .len = xs[i].slen};
        xs[i].sdone = xs[i].rdone = 0;
    }
    int64_t limit = (int64_t)t->timeout_s * 1000;
    int64_t last_progress = comm_now_ms();
    for (;;) {
        int np = 0;
        for (int i = 0; i < nx; i++) {
            /* only sending: still watch for the peer's end of stream (it failed and will never read) */
            short ev = (short)((xs[i].sending ? POLLOUT : 0) | (xs[i].receiving ? POLLIN : 0) |
                               (xs[i].sending && !xs[i].receiving ? POLLRDHUP : 0));
            if (ev) {
                pfds[np] = (struct pollfd){t->peers[xs[i].peer].fd, ev, 0};
                idx[np++] = i;
            }
        }
        if (np == 0)
            return 1;
        int r = poll(pfds, (nfds_t)np, 1000);
        if (r < 0 && errno != EINTR)
            return comm_fail(c, "rank %d: poll: %s", c->rank, strerror(errno));
        int progress = 0;
        for (int k = 0; r > 0 && k < np; k++) {
            Xfer *x = &xs[idx[k]];
            int fd = pfds[k].fd;
            short re = pfds[k].revents;
            if (x->receiving && (re & (POLLIN | POLLHUP | POLLERR))) {
                for (;;) {  /* drain what is there: fewer polls for large messages */
                    size_t hl = sizeof(WireHeader);
                    char *dst;
                    size_t want;
                    if (x->rdone < hl) {
                        dst = (char *)&x->rhdr + x->rdone;
                        want = hl - x->rdone;
                    } else {
                        dst = x->rbuf + (x->rdone - hl);
                        want = x->rlen + hl - x->rdone;
                    }
                    ssize_t n = recv(fd, dst, want, 0);
                    if (n == 0)
                        return tcp_fail_peer(c, x->peer, op, g, "connection closed");
                    if (n < 0) {
                        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                            break;
                        return tcp_fail_peer(c, x->peer, op, g, strerror(errno));
                    }
                    progress = 1;
                    int had_header = x->rdone >= hl;
                    x->rdone += (size_t)n;
                    if (!had_header && x->rdone >= hl && !check_header(c, x, op, g, seq))
                        return 0;
                    if (x->rdone == x->rlen + hl) {
                        x->receiving = 0;
                        break;
                    }
                }
            }
            if (x->sending && !x->receiving && (re & POLLRDHUP))
                return peer_hung_up(c, x, op, g, "connection closed");
            if (x->sending && (re & (POLLOUT | POLLERR | POLLHUP))) {
                for (;;) {
                    size_t hl = sizeof(WireHeader);
                    const char *src = x->sdone < hl ? (const char *)&x->shdr + x->sdone : x->sbuf + (x->sdone - hl);
                    size_t want = x->sdone < hl ? hl - x->sdone : x->slen + hl - x->sdone;
                    ssize_t n = send(fd, src, want, MSG_NOSIGNAL);
                    if (n < 0) {
                        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                            break;
                        return peer_hung_up(c, x, op, g, errno == EPIPE ? "connection closed" : strerror(errno));
                    }
                    progress = 1;
                    x->sdone += (size_t)n;
                    if (x->sdone == x->slen + hl) {
                        x->sending = 0;
                        break;
                    }
                }
            }
        }
        int64_t now = comm_now_ms();
        if (progress) {
            last_progress = now;
        } else if (limit > 0 && now - last_progress >= limit) {
            char who[200];
            size_t len = 0;
            who[0] = 0;
            for (int i = 0; i < nx && len + 32 < sizeof who; i++)
                if (xs[i].sending || xs[i].receiving)
                    len += (size_t)snprintf(who + len, sizeof who - len, "%s%d (pid %d)", len ? ", " : "",
                                            xs[i].peer, t->peers[xs[i].peer].pid);
            return comm_fail(c, "rank %d: %s on %s made no progress for %d s (MOEC_COMM_TIMEOUT) waiting for rank(s) %s",
                             c->rank, comm_op_name(op), comm_group_name(g), t->timeout_s, who);
        }
    }
}

/* Tells every peer why this rank failed (or aborted), then ends the
 * streams: a peer reads the notice in place of the next message it expects
 * from this rank and fails naming the cause, instead of a bare "connection
 * closed" that would blame this rank for another's death. Skipped on a link
 * where a message to the peer was cut off mid-way: the notice would land
 * inside it. Best effort: a peer that reads nothing gets EOF. */
static int tcp_failed(Comm *c)
{
    Tcp *t = c->impl;
    if (t->notified)
        return 0;
    t->notified = 1;
    size_t len = strlen(c->error);
    WireHeader h = {.magic = TCP_MAGIC, .op = (uint8_t)TCP_NOTICE, .len = len};
    for (int r = 0; r < c->world; r++) {
        int fd = t->peers[r].fd;
        if (fd < 0)
            continue;
        if (!t->peers[r].send_mid) {
            int64_t deadline = comm_now_ms() + 200;
            if (io_all(fd, &h, sizeof h, 1, deadline))
                io_all(fd, c->error, len, 1, deadline);
        }
        shutdown(fd, SHUT_WR);  /* not close: unread input would turn the FIN into a reset */
    }
    return 0;
}

static int tcp_exchange(Comm *c, Xfer *xs, int nx, CommOpKind op, CommGroup g)
{
    if (exchange_run(c, xs, nx, op, g))
        return 1;
    Tcp *t = c->impl;
    for (int i = 0; i < nx; i++)
        if (xs[i].sending && xs[i].sdone > 0)
            t->peers[xs[i].peer].send_mid = 1;
    return tcp_failed(c);
}

/* ---- collectives ---------------------------------------------------------- */

/* Zero-length calls may pass NULL buffers; offsetting NULL, even by 0, is undefined. */
static char no_bytes;
#define NONNULL(p) ((p) ? (p) : (void *)&no_bytes)

/* The group's peers (everyone but this rank), one Xfer each, in group-rank order. */
static Xfer *group_xfers(Comm *c, CommGroup g, Xfer *xs)
{
    int s = comm_group_size(c, g), me = comm_group_rank(c, g), k = 0;
    for (int j = 0; j < s; j++)
        if (j != me)
            xs[k++] = (Xfer){.peer = comm_group_member(c, g, j)};
    return xs;
}

static int tcp_allreduce(Comm *c, CommGroup g, void *buf, int64_t n, int f64)
{
    if (!comm_check_call(c, g, n))
        return tcp_failed(c);
    Tcp *t = c->impl;
    int s = comm_group_size(c, g), me = comm_group_rank(c, g);
    if (s == 1)
        return 1;
    CommOpKind op = f64 ? COMM_OP_ALLREDUCE_F64 : COMM_OP_ALLREDUCE_F32;
    size_t esize = f64 ? sizeof(double) : sizeof(float);
    int64_t lo, hi;
    comm_chunk(n, s, me, &lo, &hi);
    size_t mine = (size_t)(hi - lo) * esize;
    size_t need = mine * (size_t)(s - 1);
    if (need > t->scratch_cap) {
        void *p = realloc(t->scratch, need);
        if (!p) {
            comm_fail(c, "rank %d: out of memory in %s of %lld elements", c->rank, comm_op_name(op), (long long)n);
            return tcp_failed(c);
        }
        t->scratch = p;
        t->scratch_cap = need;
    }
    char *b = NONNULL(buf), *scratch = NONNULL(t->scratch);
    Xfer xs[s - 1];
    group_xfers(c, g, xs);
    /* reduce-scatter: everyone's part of chunk k goes to group rank k */
    for (int j = 0, k = 0; j < s; j++) {
        if (j == me)
            continue;
        int64_t jlo, jhi;
        comm_chunk(n, s, j, &jlo, &jhi);
        xfer_send(&xs[k], b + (size_t)jlo * esize, (size_t)(jhi - jlo) * esize);
        xfer_recv(&xs[k], scratch + (size_t)k * mine, mine);
        k++;
    }
    if (!tcp_exchange(c, xs, s - 1, op, g))
        return 0;
    /* the sum in group-rank order, this rank's own values in their place */
    if (hi > lo) {
        if (f64) {
            const double *in[s];
            for (int j = 0, k = 0; j < s; j++)
                in[j] = j == me ? (const double *)buf + lo : (const double *)(scratch + (size_t)k++ * mine);
            comm_sum_f64((double *)buf + lo, in, s, hi - lo);
        } else {
            const float *in[s];
            for (int j = 0, k = 0; j < s; j++)
                in[j] = j == me ? (const float *)buf + lo : (const float *)(scratch + (size_t)k++ * mine);
            comm_sum_f32((float *)buf + lo, in, s, hi - lo);
        }
    }
    /* allgather of the reduced chunks */
    group_xfers(c, g, xs);
    for (int j = 0, k = 0; j < s; j++) {
        if (j == me)
            continue;
        int64_t jlo, jhi;
        comm_chunk(n, s, j, &jlo, &jhi);
        xfer_send(&xs[k], b + (size_t)lo * esize, mine);
        xfer_recv(&xs[k], b + (size_t)jlo * esize, (size_t)(jhi - jlo) * esize);
        k++;
    }
    return tcp_exchange(c, xs, s - 1, op, g);
}

static int tcp_allreduce_f32(Comm *c, CommGroup g, float *buf, int64_t n)
{
    return tcp_allreduce(c, g, buf, n, 0);
}

static int tcp_allreduce_f64(Comm *c, CommGroup g, double *buf, int64_t n)
{
    return tcp_allreduce(c, g, buf, n, 1);
}

static int tcp_allgather(Comm *c, CommGroup g, const void *in, void *out, size_t bytes)
{
    if (!comm_check_call(c, g, 0))
        return tcp_failed(c);
    int s = comm_group_size(c, g), me = comm_group_rank(c, g);
    char *o = NONNULL(out);
    in = NONNULL(in);
    if (bytes && o + (size_t)me * bytes != in)
        memmove(o + (size_t)me * bytes, in, bytes);
    if (s == 1)
        return 1;
    Xfer xs[s - 1];
    group_xfers(c, g, xs);
    for (int j = 0, k = 0; j < s; j++) {
        if (j == me)
            continue;
        xfer_send(&xs[k], o + (size_t)me * bytes, bytes);
        xfer_recv(&xs[k], o + (size_t)j * bytes, bytes);
        k++;
    }
    return tcp_exchange(c, xs, s - 1, COMM_OP_ALLGATHER, g);
}

static int tcp_alltoallv(Comm *c, CommGroup g, const void *send, const size_t *send_bytes, const size_t *send_off,
                         void *recv, const size_t *recv_bytes, const size_t *recv_off)
{
    if (!comm_check_call(c, g, 0))
        return tcp_failed(c);
    int s = comm_group_size(c, g), me = comm_group_rank(c, g);
    send = NONNULL(send);
    recv = NONNULL(recv);
    if (send_bytes[me] != recv_bytes[me]) {
        comm_fail(c, "rank %d: alltoallv on %s: rank %d sends %zu bytes to rank %d, which expects %zu", c->rank,
                  comm_group_name(g), c->rank, send_bytes[me], c->rank, recv_bytes[me]);
        return tcp_failed(c);
    }
    if (send_bytes[me])
        memmove((char *)recv + recv_off[me], (const char *)send + send_off[me], send_bytes[me]);
    if (s == 1)
        return 1;
    Xfer xs[s - 1];
    group_xfers(c, g, xs);
    for (int j = 0, k = 0; j < s; j++) {
        if (j == me)
            continue;
        xfer_send(&xs[k], (const char *)send + send_off[j], send_bytes[j]);
        xfer_recv(&xs[k], (char *)recv + recv_off[j], recv_bytes[j]);
        k++;
    }
    return tcp_exchange(c, xs, s - 1, COMM_OP_ALLTOALLV, g);
}

static int tcp_barrier(Comm *c, CommGroup g)
{
    if (!comm_check_call(c, g, 0))
        return tcp_failed(c);
    int s = comm_group_size(c, g);
    if (s == 1)
        return 1;
    Xfer xs[s - 1];
    group_xfers(c, g, xs);
    for (int k = 0; k < s - 1; k++) {  /* empty messages: nobody leaves before everyone arrived */
        xfer_send(&xs[k], NULL, 0);
        xfer_recv(&xs[k], NULL, 0);
    }
    return tcp_exchange(c, xs, s - 1, COMM_OP_BARRIER, g);
}

/* Every peer's next (or current) collective with this rank reads the
 * notice and fails naming this rank and why. */
static void tcp_abort(Comm *c, const char *why)
{
    comm_fail(c, "rank %d aborted: %s", c->rank, why);
    tcp_failed(c);
}

static void tcp_destroy(Comm *c)
{
    Tcp *t = c->impl;
    if (t) {
        for (int r = 0; t->peers && r < c->world; r++)
            if (t->peers[r].fd >= 0)
                close(t->peers[r].fd);
        free(t->peers);
        free(t->scratch);
        if (t->key)
            memset(t->key, 0, t->keylen);
        free(t->key);
        free(t);
    }
    free(c);
}

int comm_tcp_peer_gone(Comm *c, int peer, int *pid, char *why, size_t whylen)
{
    Tcp *t = c->impl;
    *pid = t->peers[peer].pid;
    why[0] = 0;
    int fd = t->peers[peer].fd;
    if (fd < 0)
        return 0;
    /* nothing travels on the mesh after the bootstrap but failure notices */
    WireHeader h;
    ssize_t k = recv(fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
    if (k < 0)
        return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    if (k == (ssize_t)sizeof h && h.magic == TCP_MAGIC && h.op == TCP_NOTICE &&
        recv(fd, &h, sizeof h, MSG_DONTWAIT) == (ssize_t)sizeof h) {
        size_t n = h.len < whylen - 1 ? (size_t)h.len : whylen - 1;
        if (io_all(fd, why, n, 0, comm_now_ms() + 500))
            why[n] = 0;
        else
            why[0] = 0;
        wire_sanitize(why, whylen);
    }
    return 1;
}

static const CommOps tcp_ops = {
    .name = "tcp",
    .allreduce_f32 = tcp_allreduce_f32,
    .allreduce_f64 = tcp_allreduce_f64,
    .allgather = tcp_allgather,
    .alltoallv = tcp_alltoallv,
    .barrier = tcp_barrier,
    .abort = tcp_abort,
    .destroy = tcp_destroy,
};

Comm *comm_tcp_create(int rank, int world, int ep, const char *addr, int port, char *err, size_t errlen)
{
    int rdv_s, comm_s;
    if (!comm_check_layout(rank, world, ep, err, errlen) ||
        !comm_env_seconds("MOEC_RENDEZVOUS_TIMEOUT", 60, &rdv_s, err, errlen) ||
        !comm_env_seconds("MOEC_COMM_TIMEOUT", 600, &comm_s, err, errlen))
        return NULL;
    if (world > 1 && (!addr || !*addr || port <= 0 || port > 65535)) {
        snprintf(err, errlen, "rank %d: the master address %s:%d is not usable (MOEC_MASTER_ADDR, MOEC_MASTER_PORT)",
                 rank, addr ? addr : "(none)", port);
        return NULL;
    }
    Comm *c = calloc(1, sizeof *c);
    Tcp *t = calloc(1, sizeof *t);
    TcpPeer *peers = calloc((size_t)world, sizeof *peers);
    if (!c || !t || !peers) {
        free(c);
        free(t);
        free(peers);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    comm_init_base(c, rank, world, ep);
    c->ops = &tcp_ops;
    c->impl = t;
    t->peers = peers;
    t->timeout_s = comm_s;
    for (int r = 0; r < world; r++)
        peers[r] = (TcpPeer){-1, 0, 0};
    peers[rank].pid = (int)getpid();
    int ok = world == 1 ? 1
             : !load_secret(t, rank, world, addr, err, errlen) ? 0
             : rank == 0 ? rendezvous_master(t, world, ep, addr, port, rdv_s, err, errlen)
                         : rendezvous_peer(t, rank, world, ep, addr, port, rdv_s, err, errlen);
    if (!ok) {
        tcp_destroy(c);
        return NULL;
    }
    return c;
}
