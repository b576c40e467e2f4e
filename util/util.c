/* util.c - die(), float formatting that round-trips, checked arithmetic,
 * atomic file writes, human-readable counts, sizes and durations. */
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

void die_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "moec: internal error at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n(this is a bug in moec, not in your model)\n");
    abort();
}

const char *fmt_double(char buf[32], double d)
{
    if (isnan(d)) {
        snprintf(buf, 32, "nan");
        return buf;
    }
    if (isinf(d)) {
        snprintf(buf, 32, d < 0 ? "-inf" : "inf");
        return buf;
    }
    snprintf(buf, 32, "%1.15g", d);
    if (strtod(buf, NULL) != d)
        snprintf(buf, 32, "%1.17g", d);
    return buf;
}

int checked_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

int checked_add_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

int parse_i64_in(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

int write_file(const char *path, const void *data, size_t n, char *err, size_t errlen)
{
    /* a device or a pipe (-o /dev/stdout, /dev/full) is written in place: renaming a file over it would
     * replace the device; a directory is refused */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        if (S_ISDIR(sb.st_mode)) {
            if (err && errlen)
                snprintf(err, errlen, "%s: cannot write: it is a directory", path);
            return 0;
        }
        FILE *f = fopen(path, "wb");
        int ok = f && fwrite(data, 1, n, f) == n;
        int e = errno;
        if (f && fclose(f) != 0 && ok) {
            ok = 0;
            e = errno;
        }
        if (!ok && err && errlen)
            snprintf(err, errlen, "%s: cannot write: %s", path, strerror(e ? e : EIO));
        return ok;
    }
    /* the temporary file is in path's directory, so rename() does not cross
     * file systems; the pid keeps two processes from sharing it */
    size_t len = strlen(path) + 32;
    char *tmp = malloc(len);
    if (!tmp)
        die("out of memory");
    snprintf(tmp, len, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    int ok = f && fwrite(data, 1, n, f) == n;
    int e = errno;
    if (f && fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        if (f)
            unlink(tmp);
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot write: %s", path, strerror(e ? e : EIO));
    }
    free(tmp);
    return ok;
}

int open_regular(const char *path, char *err, size_t errlen)
{
    /* O_NONBLOCK: opening a FIFO that has no writer returns at once instead of waiting for one */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        int e = errno;
        const char *kind = S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO (named pipe)"
                         : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device" : S_ISSOCK(sb.st_mode) ? "a socket"
                         : "not a regular file";
        if (err && errlen) {
            if (fstat(fd, &sb) != 0)
                snprintf(err, errlen, "%s: cannot stat: %s", path, strerror(e));
            else
                snprintf(err, errlen, "%s: is %s, not a regular file", path, kind);
        }
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return a && b && stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

FILE *fopen_regular(const char *path, char *err, size_t errlen)
{
    int fd = open_regular(path, err, errlen);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        close(fd);
    }
    return f;
}

uint64_t hash64_update(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

uint64_t hash64(const void *data, size_t n) { return hash64_update(HASH64_INIT, data, n); }

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (!d)
        die("out of memory copying a string of %zu bytes", n);
    return memcpy(d, s, n);
}

#ifndef MOEC_VERSION
#define MOEC_VERSION "0.1.0"
#endif
#ifndef MOEC_GIT
#define MOEC_GIT "unknown"
#endif

const char *moec_version(void) { return MOEC_VERSION " (git " MOEC_GIT ")"; }

static int64_t read_i64_file(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    int64_t v = -1;
    while (fgets(line, sizeof line, f)) {
        size_t k = strlen(key);
        if (strncmp(line, key, k) == 0) {
            char *end;
            long long x = strtoll(line + k, &end, 10);
            if (end != line + k && x >= 0)
                v = (int64_t)x;
            break;
        }
    }
    fclose(f);
    return v;
}

int64_t host_memory_available(void)
{
    int64_t kb = read_i64_file("/proc/meminfo", "MemAvailable:");
    int64_t avail = kb >= 0 && kb < INT64_MAX / 1024 ? kb * 1024 : -1;
    if (avail < 0) {
        long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
        avail = pages > 0 && size > 0 ? (int64_t)pages * size : -1;
    }
    /* a container's limit (cgroup v2): "max" reads as no number */
    int64_t max = read_i64_file("/sys/fs/cgroup/memory.max", ""),
            cur = read_i64_file("/sys/fs/cgroup/memory.current", "");
    if (max >= 0 && cur >= 0 && (avail < 0 || max - cur < avail))
        avail = max > cur ? max - cur : 0;
    return avail;
}

double wall_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void fmt_count(char *buf, size_t n, double v)
{
    if (v >= 1e9)
        snprintf(buf, n, "%.2f B", v / 1e9);
    else if (v >= 1e6)
        snprintf(buf, n, "%.2f M", v / 1e6);
    else if (v >= 1e3)
        snprintf(buf, n, "%.1f k", v / 1e3);
    else
        snprintf(buf, n, "%.0f", v);
}

void fmt_bytes(char *buf, size_t n, double v)
{
    if (v >= 1 << 30)
        snprintf(buf, n, "%.2f GiB", v / (1 << 30));
    else if (v >= 1 << 20)
        snprintf(buf, n, "%.1f MiB", v / (1 << 20));
    else
        snprintf(buf, n, "%.1f KiB", v / 1024);
}

void fmt_duration(char *buf, size_t n, double s)
{
    if (s < 0 || !isfinite(s))
        snprintf(buf, n, "?");
    else if (s < 60)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, (int)s % 3600 / 60);
}

/* ------------------------------------------------------ rank correlation */

typedef struct RankItem {
    double v;
    int64_t i;
} RankItem;

static int rank_item_cmp(const void *a, const void *b)
{
    const RankItem *x = a, *y = b;
    return x->v < y->v ? -1 : x->v > y->v ? 1 : x->i < y->i ? -1 : x->i > y->i;
}

/* 1-based ranks, ties given the mean of the ranks they span */
static double *ranks_of(const double *v, int64_t n)
{
    RankItem *it = malloc(sizeof *it * (size_t)(n ? n : 1));
    double *r = malloc(sizeof *r * (size_t)(n ? n : 1));
    if (!it || !r)
        die("out of memory");
    for (int64_t i = 0; i < n; i++)
        it[i] = (RankItem){v[i], i};
    qsort(it, (size_t)n, sizeof *it, rank_item_cmp);
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j + 1 < n && it[j + 1].v == it[i].v)
            j++;
        for (int64_t k = i; k <= j; k++)
            r[it[k].i] = (double)(i + j) / 2.0 + 1.0;
        i = j + 1;
    }
    free(it);
    return r;
}

double spearman(const double *x, const double *y, int64_t n)
{
    if (n < 2)
        return NAN;
    double *rx = ranks_of(x, n), *ry = ranks_of(y, n);
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (int64_t i = 0; i < n; i++) {
        mx += rx[i];
        my += ry[i];
    }
    mx /= (double)n;
    my /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        sxy += (rx[i] - mx) * (ry[i] - my);
        sxx += (rx[i] - mx) * (rx[i] - mx);
        syy += (ry[i] - my) * (ry[i] - my);
    }
    free(rx);
    free(ry);
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

/* ------------------------------------------------------ "did you mean" */

static int edit_distance(const char *a, const char *b)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la > 32 || lb > 32)
        return 99;
    int d[33][33];
    for (int i = 0; i <= la; i++)
        d[i][0] = i;
    for (int j = 0; j <= lb; j++)
        d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c)
                c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c)
                c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb];
}

void suggest_try(Suggest *s, const char *want, const char *cand)
{
    int d = edit_distance(want, cand);
    int limit = (int)strlen(want) / 3 + 1;
    if (d <= limit && (!s->best || d < s->dist)) {
        s->best = cand;
        s->dist = d;
    }
}

const char *suggest_among(const char *want, const char *const *cands)
{
    Suggest s = {0};
    for (int i = 0; cands[i]; i++)
        suggest_try(&s, want, cands[i]);
    return s.best;
}

int make_dirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return 0;
    }
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return 0;
            *p = c;
            if (!c)
                break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return 0;
    }
    return 1;
}
