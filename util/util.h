/* util.h - internal-error reporting and small helpers shared by every module.
 *
 * Two kinds of error: bad user input goes through diag.h with a
 * source location and exit status 1; a broken invariant inside moec is a bug
 * and goes through die(), which names the file and line and aborts. */
#ifndef MOEC_UTIL_H
#define MOEC_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define die(...) die_at(__FILE__, __LINE__, __VA_ARGS__)
_Noreturn void die_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define ARRAY_LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* "%.15g", or "%.17g" when that is needed to read back exactly (strtod
 * equality, stricter than cJSON's own printer); buf needs 32 bytes.
 * Non-finite values print as inf, -inf, nan. */
const char *fmt_double(char buf[32], double d);

/* Checked int64 arithmetic: returns 0 on overflow. */
int checked_mul_i64(int64_t a, int64_t b, int64_t *out);
int checked_add_i64(int64_t a, int64_t b, int64_t *out);

/* A whole decimal integer in [lo, hi] (command-line values, metadata):
 * 1 and *out, or 0 for anything else (empty, trailing text, overflow). */
int parse_i64_in(const char *s, int64_t lo, int64_t hi, int64_t *out);

/* mkdir -p PATH (mode 0755): 1, or 0 with errno set (ENOTDIR when PATH exists and is no folder) */
int make_dirs(const char *path);
/* Writes n bytes to path atomically: a temporary file next to it, then
 * rename over it, so a reader never sees half a file and a failed write
 * leaves the old one. 1, or 0 with "PATH: cannot write: REASON" in err. */
int write_file(const char *path, const void *data, size_t n, char *err, size_t errlen);

/* Opens path for reading only if it is a regular file: a FIFO, a device or a
 * directory is refused before anything blocks on it or reads it forever.
 * The descriptor (blocking, close-on-exec), or -1 with "PATH: REASON" in err. */
int open_regular(const char *path, char *err, size_t errlen);
/* The same as a stdio stream ("rb"). */
FILE *fopen_regular(const char *path, char *err, size_t errlen);

/* Whether a and b name one existing file (device and inode): an output that
 * would overwrite an input. */
int same_file(const char *a, const char *b);

/* FNV-1a, 64 bits: identifies a checkpoint's tensors, a kernel source, a
 * plan document (not cryptographic). hash64_update continues a hash over
 * more bytes, starting from HASH64_INIT:
 * hash64(p, n) == hash64_update(HASH64_INIT, p, n). */
#define HASH64_INIT UINT64_C(0xcbf29ce484222325)
uint64_t hash64(const void *data, size_t n);
uint64_t hash64_update(uint64_t h, const void *data, size_t n);

/* strdup that die()s when out of memory. */
char *xstrdup(const char *s);

/* The one version string: "0.1.0 (git abc1234)". Checkpoints, plans and
 * --version print it; a plan from another version is refused. */
const char *moec_version(void);

/* Bytes of memory this process may still allocate: MemAvailable of
 * /proc/meminfo, lowered to a cgroup v2 memory.max when one is set; -1 when
 * unknown. For refusing a plan that cannot fit before allocating it. */
int64_t host_memory_available(void);

/* Seconds on the monotonic clock (for durations). */
double wall_seconds(void);

/* Human-readable numbers for messages: "15.6 k", "1.23 M", "46.70 B";
 * bytes: "60.9 KiB", "1.5 MiB", "29.26 GiB"; durations: "42s", "3m07s", "2h05m". */
void fmt_count(char *buf, size_t n, double v);
void fmt_bytes(char *buf, size_t n, double v);
void fmt_duration(char *buf, size_t n, double seconds);

/* Spearman's rank correlation of x and y (n pairs): the Pearson correlation
 * of their ranks, ties given the mean rank of the values they span; NAN for
 * fewer than 2 pairs or a constant side. */
double spearman(const double *x, const double *y, int64_t n);

/* "Did you mean": the candidate nearest to `want` by edit distance, if it is
 * within strlen(want) / 3 + 1 edits (the model language's rule, shared by
 * the command lines). suggest_try offers one candidate at a time;
 * suggest_among a NULL-terminated list. */
typedef struct Suggest {
    const char *best;
    int dist;
} Suggest;
void suggest_try(Suggest *s, const char *want, const char *cand);
const char *suggest_among(const char *want, const char *const *cands);

#endif
