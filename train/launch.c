/* launch.c - the local launcher (launch_local: fork/exec N ranks, watch
 * them, stop them all when one dies) and the environment a rank reads to
 * join a run (launch_env). See launch.h.
 *
 * Everything the children need (argv, a full environment) is built before
 * fork(), so that a child only calls async-signal-safe functions before
 * execve(): the launcher may be linked into a program with threads. */
#include "launch.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The variables the launcher sets: inherited values are dropped, not duplicated. */
static const char *const launch_vars[] = {"MOEC_RANK", "MOEC_WORLD_SIZE", "MOEC_LOCAL_RANK", "MOEC_LOCAL_WORLD_SIZE",
                                          "MOEC_MASTER_ADDR", "MOEC_MASTER_PORT", "MOEC_SECRET", "MOEC_SECRET_FILE"};
#define NVARS ((int)(sizeof launch_vars / sizeof launch_vars[0]))

/* A free TCP port on 127.0.0.1: bind port 0 and read what the kernel chose.
 * Another program could take it before rank 0 binds it; rank 0 then fails
 * with "address in use" rather than hanging. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof sa;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && getsockname(fd, (struct sockaddr *)&sa, &sl) == 0)
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

static int is_launch_var(const char *entry)
{
    for (int i = 0; i < NVARS; i++) {
        size_t n = strlen(launch_vars[i]);
        if (!strncmp(entry, launch_vars[i], n) && entry[n] == '=')
            return 1;
    }
    return 0;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void describe(char *out, size_t outlen, int rank, pid_t pid, int status)
{
    if (WIFEXITED(status))
        snprintf(out, outlen, "rank %d (pid %d) exited with status %d", rank, (int)pid, WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, outlen, "rank %d (pid %d) was killed by signal %d (%s)", rank, (int)pid, WTERMSIG(status),
                 strsignal(WTERMSIG(status)));
    else
        snprintf(out, outlen, "rank %d (pid %d) ended with wait status 0x%x", rank, (int)pid, (unsigned)status);
}

/* Strict decimal integer in [lo, hi]. */
static int parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return 0;
    *out = (int)v;
    return 1;
}

/* The launcher passes SIGTERM / SIGINT on to its ranks (which stop at a step boundary, after a
 * checkpoint; a second signal stops them at once) and waits for them. */
static volatile sig_atomic_t fwd_sig, fwd_count;

static void on_forward(int sig)
{
    fwd_sig = sig;
    fwd_count++;
}

int launch_local(int nproc, int argc, char **argv, char *err, size_t errlen)
{
    if (nproc < 1 || nproc > 4096) {
        snprintf(err, errlen, "--nproc %d: expected 1 to 4096 processes", nproc);
        return 1;
    }
    int port = free_port();
    if (port < 0) {
        snprintf(err, errlen, "cannot find a free TCP port on 127.0.0.1: %s", strerror(errno));
        return 1;
    }
    /* argv without --nproc */
    char **cargv = calloc((size_t)argc + 1, sizeof *cargv);
    int cargc = 0;
    for (int i = 0; cargv && i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "--nproc")) {
            i++;  /* and its value */
            continue;
        }
        if (i > 0 && !strncmp(argv[i], "--nproc=", 8))
            continue;
        cargv[cargc++] = argv[i];
    }
    /* a secret for this job alone (comm_tcp.c): only its ranks can join the rendezvous */
    char secret[2 * 32 + 1];
    unsigned char raw[32];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        snprintf(err, errlen, "cannot make the job's secret: getrandom: %s", strerror(errno));
        free(cargv);
        return 1;
    }
    for (int i = 0; i < 32; i++)
        snprintf(secret + 2 * i, 3, "%02x", raw[i]);
    /* one environment per rank: the inherited one minus ours, plus ours */
    int nenv = 0;
    while (environ[nenv])
        nenv++;
    char ***envs = calloc((size_t)nproc, sizeof *envs);
    pid_t *pids = calloc((size_t)nproc, sizeof *pids);
    int *done = calloc((size_t)nproc, sizeof *done);
    int ok = cargv && envs && pids && done, result = 1;
    for (int r = 0; ok && r < nproc; r++) {
        char **e = envs[r] = calloc((size_t)nenv + NVARS + 1, sizeof *e);
        if (!e) {
            ok = 0;
            break;
        }
        int k = 0;
        for (int i = 0; i < nenv; i++)
            if (!is_launch_var(environ[i]))
                e[k++] = environ[i];
        int vals[NVARS] = {r, nproc, r, nproc, 0, port, 0, 0};
        for (int v = 0; v < NVARS - 1 && ok; v++) {  /* MOEC_SECRET_FILE: dropped, the job's own secret replaces it */
            char buf[160];
            if (v == 4)
                snprintf(buf, sizeof buf, "%s=127.0.0.1", launch_vars[v]);
            else if (v == 6)
                snprintf(buf, sizeof buf, "%s=%s", launch_vars[v], secret);
            else
                snprintf(buf, sizeof buf, "%s=%d", launch_vars[v], vals[v]);
            ok = (e[k++] = strdup(buf)) != NULL;
        }
    }
    if (!ok) {
        snprintf(err, errlen, "out of memory");
        nproc = envs ? nproc : 0;
        goto out;
    }
    fflush(NULL);  /* or buffered output would be written again by each child */
    pid_t self = getpid();
    int started = 0;
    for (int r = 0; r < nproc; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* die with the launcher, even if it is SIGKILLed */
            prctl(PR_SET_PDEATHSIG, SIGTERM);
            /* a process group of its own: a terminal's Ctrl-C reaches the launcher only, which passes it on once */
            setpgid(0, 0);
            if (getppid() != self)
                _exit(1);
            execve("/proc/self/exe", cargv, envs[r]);
            static const char msg[] = "moec launcher: cannot execute /proc/self/exe\n";
            ssize_t w = write(2, msg, sizeof msg - 1);
            (void)w;
            _exit(127);
        }
        if (pid < 0) {
            snprintf(err, errlen, "cannot start rank %d: fork: %s", r, strerror(errno));
            break;
        }
        pids[r] = pid;
        started++;
    }
    result = started == nproc ? 0 : 1;
    int failed = started == nproc ? -1 : started;  /* the rank that failed first (nproc: none started) */
    if (result)
        for (int r = 0; r < started; r++)
            kill(pids[r], SIGTERM);
    int grace_s = 5;
    const char *g = getenv("MOEC_LAUNCH_GRACE");
    if (g && *g && !parse_int(g, 0, 3600, &grace_s))
        grace_s = 5;
    long kill_at = result ? now_ms() + grace_s * 1000L : -1;
    int left = started;
    /* pidfds wake the loop the moment a child exits, so the rank that died
     * first is the one reported, not one that failed because of it a few
     * milliseconds later; without them (old kernels), poll every 2 ms */
    int *pidfds = calloc((size_t)started + 1, sizeof *pidfds);
    struct pollfd *pfds = calloc((size_t)started + 1, sizeof *pfds);
    int use_pidfd = pidfds && pfds;
    for (int r = 0; r < started; r++) {
        pidfds[r] = -1;
#ifdef SYS_pidfd_open
        if (use_pidfd)
            pidfds[r] = (int)syscall(SYS_pidfd_open, pids[r], 0);
#endif
        if (pidfds && pidfds[r] < 0)
            use_pidfd = 0;
    }
    struct sigaction sa, old_term, old_int;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_forward;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGINT, &sa, &old_int);
    int forwarded = 0, stopped = 0;
    while (left > 0) {
        if (fwd_count != forwarded) {
            forwarded = fwd_count;
            for (int r = 0; r < started; r++)
                if (!done[r])
                    kill(pids[r], fwd_sig);
        }
        if (use_pidfd) {
            int np = 0;
            for (int r = 0; r < started; r++)
                if (!done[r])
                    pfds[np++] = (struct pollfd){pidfds[r], POLLIN, 0};
            long wait = kill_at >= 0 ? kill_at - now_ms() : 1000;
            poll(pfds, (nfds_t)np, wait < 0 ? 0 : wait > 1000 ? 1000 : (int)wait);
        }
        int reaped = 0;
        for (int r = 0; r < started; r++) {
            if (done[r])
                continue;
            int st;
            pid_t w = waitpid(pids[r], &st, WNOHANG);
            if (w == 0 || (w < 0 && errno == EINTR))
                continue;
            done[r] = 1;
            left--;
            reaped = 1;
            int bad = w < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0;
            /* a rank that stopped on the signal passed on is no failure: the others stop on it too */
            if (bad && forwarded && w > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 128 + fwd_sig) {
                bad = 0;
                stopped = 128 + fwd_sig;
            }
            if (bad && failed < 0) {
                failed = r;
                if (w < 0) {
                    snprintf(err, errlen, "rank %d (pid %d): waitpid: %s", r, (int)pids[r], strerror(errno));
                    result = 1;
                } else {
                    describe(err, errlen, r, pids[r], st);
                    result = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
                }
                for (int o = 0; o < started; o++)
                    if (!done[o])
                        kill(pids[o], SIGTERM);
                kill_at = now_ms() + grace_s * 1000L;
            }
        }
        if (left > 0 && kill_at >= 0 && now_ms() >= kill_at) {
            for (int o = 0; o < started; o++)
                if (!done[o])
                    kill(pids[o], SIGKILL);
            kill_at = -1;  /* once */
        }
        if (left > 0 && !reaped && !use_pidfd)
            sleep_ms(2);
    }
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGINT, &old_int, NULL);
    if (stopped && result == 0) {
        result = stopped;
        snprintf(err, errlen, "stopped by %s (passed on to the ranks)", stopped == 128 + SIGINT ? "SIGINT" : "SIGTERM");
    }
    for (int r = 0; pidfds && r < started; r++)
        if (pidfds[r] >= 0)
            close(pidfds[r]);
    free(pidfds);
    free(pfds);
    if (failed >= 0 && failed < nproc && result != 0) {
        size_t len = strlen(err);
        if (nproc > 1 && len + 40 < errlen)
            snprintf(err + len, errlen - len, "; the other ranks were stopped");
    }
    ok = result == 0;
out:
    for (int r = 0; envs && r < nproc; r++) {
        if (!envs[r])
            continue;
        for (char **e = envs[r]; *e; e++)
            if (is_launch_var(*e))
                free(*e);  /* ours; the inherited ones belong to environ */
        free(envs[r]);
    }
    free(envs);
    free(cargv);
    free(pids);
    free(done);
    return ok ? 0 : result ? result : 1;
}

int launch_env(int *rank, int *world, char **addr, int *port, char *err, size_t errlen)
{
    static const char *const names[4] = {"MOEC_RANK", "MOEC_WORLD_SIZE", "MOEC_MASTER_ADDR", "MOEC_MASTER_PORT"};
    const char *v[4];
    char missing[128] = "";
    for (int i = 0; i < 4; i++) {
        v[i] = getenv(names[i]);
        if (!v[i] || !*v[i]) {
            size_t len = strlen(missing);
            snprintf(missing + len, sizeof missing - len, "%s%s", len ? ", " : "", names[i]);
        }
    }
    *addr = NULL;
    if (missing[0]) {
        snprintf(err, errlen, "%s not set: a rank needs MOEC_RANK, MOEC_WORLD_SIZE, MOEC_MASTER_ADDR and "
                 "MOEC_MASTER_PORT (set by --nproc, or by hand on each host)", missing);
        return 0;
    }
    if (!parse_int(v[1], 1, 1 << 20, world)) {
        snprintf(err, errlen, "MOEC_WORLD_SIZE=%s: expected a number of ranks from 1 to %d", v[1], 1 << 20);
        return 0;
    }
    if (!parse_int(v[0], 0, INT_MAX, rank)) {
        snprintf(err, errlen, "MOEC_RANK=%s: expected a rank from 0 to %d", v[0], *world - 1);
        return 0;
    }
    if (*rank >= *world) {
        snprintf(err, errlen, "MOEC_RANK=%d is not below MOEC_WORLD_SIZE=%d", *rank, *world);
        return 0;
    }
    if (!parse_int(v[3], 1, 65535, port)) {
        snprintf(err, errlen, "MOEC_MASTER_PORT=%s: expected a TCP port from 1 to 65535", v[3]);
        return 0;
    }
    *addr = strdup(v[2]);
    if (!*addr) {
        snprintf(err, errlen, "out of memory");
        return 0;
    }
    return 1;
}
