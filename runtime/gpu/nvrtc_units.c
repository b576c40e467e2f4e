/* nvrtc_units.c - kernels.cu compiled unit by unit, in parallel, each unit cached (nvrtc.h
 * nvrtc_compile_units; docs/decisions.md 67). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kimage.h"
#include "nvrtc.h"
#include "../../plan/plan.h"
#include "../../util/util.h"

typedef struct Unit {
    char *text;      /* the device library, then each section after its #line directive */
    size_t len;
    uint64_t key;    /* of the code: the library's and each section's plan_code_hash (comment lines left out) */
    double work;     /* bytes of the unit's own sections: the order of the queue, largest first */
    NvrtcOutput out;
    int ok, cached;
    char err[512];
    char path[4400]; /* its cache file, or "" */
} Unit;

typedef struct Pool {
    Unit **todo;
    int ntodo, next;
    const char *name, *arch;
    pthread_mutex_t lock;
} Pool;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

const char *nvrtc_cache_dir(char *buf, size_t n)
{
    const char *e = getenv("MOEC_CACHE_DIR");
    if (e && strcmp(e, "off") == 0)
        return NULL;
    if (e && *e)
        snprintf(buf, n, "%s", e);
    else if ((e = getenv("XDG_CACHE_HOME")) && *e)
        snprintf(buf, n, "%s/moec", e);
    else if ((e = getenv("HOME")) && *e)
        snprintf(buf, n, "%s/.cache/moec", e);
    else
        return NULL;
    return buf;
}

static char *read_whole(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = 0;
        *size = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static void *worker(void *arg)
{
    Pool *P = arg;
    for (;;) {
        pthread_mutex_lock(&P->lock);
        int i = P->next < P->ntodo ? P->next++ : -1;
        pthread_mutex_unlock(&P->lock);
        if (i < 0)
            return NULL;
        Unit *u = P->todo[i];
        u->ok = nvrtc_compile(u->text, P->name, P->arch, &u->out, u->err, sizeof u->err);
        /* a unit with warnings is not cached: they print each time it is compiled, and the tests see them */
        if (u->ok && u->path[0] && u->out.nwarnings == 0)
            /* atomic (util write_file); no two units share a path, since no two share their kernels. A failed
             * write costs only a compile next time */
            write_file(u->path, u->out.image, u->out.image_size, NULL, 0);
    }
}

static int by_work(const void *a, const void *b)
{
    double x = (*(Unit *const *)a)->work, y = (*(Unit *const *)b)->work;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The sections of `source`: unit number, start and end offsets, first line; the library's end. */
typedef struct Section {
    int unit;
    size_t begin, end;
    int line;
} Section;

static int find_sections(const char *s, size_t n, Section **out, size_t *lib_end)
{
    size_t ml = strlen(PLAN_UNIT_MARK);
    int cap = 64, ns = 0, line = 1;
    Section *sec = malloc(sizeof *sec * (size_t)cap);
    if (!sec)
        return -1;
    *lib_end = n;
    for (size_t i = 0; i < n;) {
        if (n - i >= ml && strncmp(s + i, PLAN_UNIT_MARK, ml) == 0) {
            if (ns == 0)
                *lib_end = i;
            else
                sec[ns - 1].end = i;
            if (ns == cap) {
                Section *g = realloc(sec, sizeof *sec * (size_t)(cap *= 2));
                if (!g) {
                    free(sec);
                    return -1;
                }
                sec = g;
            }
            sec[ns++] = (Section){atoi(s + i + ml), i, n, line};
        }
        while (i < n && s[i] != '\n')
            i++;
        i++;
        line++;
    }
    *out = sec;
    return ns;
}

int nvrtc_compile_units(const char *source, const char *name, const char *arch, const char *cache_dir, int threads,
                        NvrtcOutput *out, char *err, size_t errlen)
{
    size_t n = strlen(source), lib_end;
    Section *sec = NULL;
    int ns = find_sections(source, n, &sec, &lib_end);
    if (ns < 0) {
        snprintf(err, errlen, "out of memory");
        return 0;
    }
    int nunits = 0;
    for (int i = 0; i < ns; i++) {
        if (sec[i].unit < 0 || sec[i].unit > 100000) {
            snprintf(err, errlen, "%s:%d: a unit mark with unit number %d", name, sec[i].line, sec[i].unit);
            free(sec);
            return 0;
        }
        if (sec[i].unit + 1 > nunits)
            nunits = sec[i].unit + 1;
    }
    const char *one = getenv("MOEC_NVRTC_UNITS");
    if (ns == 0 || strncmp(arch, "compute_", 8) == 0 || (one && strcmp(one, "0") == 0)) {
        /* one unit, PTX (kernels.ptx is one text a reader opens), or MOEC_NVRTC_UNITS=0 (the whole source as one
         * program, as before decision 67: for A/B runs) */
        free(sec);
        return nvrtc_compile(source, name, arch, out, err, errlen);
    }
    memset(out, 0, sizeof *out);
    if (!nvrtc_check_arch(arch, err, errlen)) {
        free(sec);
        return 0;
    }
    nvrtc_version(&out->major, &out->minor);
    Unit *units = calloc((size_t)nunits, sizeof *units);
    Unit **todo = calloc((size_t)nunits, sizeof *todo);
    if (!units || !todo) {
        free(units);
        free(todo);
        free(sec);
        snprintf(err, errlen, "out of memory");
        return 0;
    }
    int ok = 1;
    /* a unit's key: the library's code hash (plan_code_hash: comment lines left out), then each section's */
    uint64_t lib_hash = plan_code_hash(source, lib_end);
    char dir[4200] = "";
    if (cache_dir && *cache_dir) {
        snprintf(dir, sizeof dir, "%s/units", cache_dir);
        if (!make_dirs(dir))
            dir[0] = 0;
    }
    for (int u = 0; u < nunits && ok; u++) {
        Unit *U = &units[u];
        size_t len = lib_end;
        for (int i = 0; i < ns; i++)
            if (sec[i].unit == u)
                len += sec[i].end - sec[i].begin + 64 + strlen(name);
        if (len == lib_end) {
            snprintf(err, errlen, "%s: unit %d has no section (the marks skip a number)", name, u);
            ok = 0;
            break;
        }
        U->text = malloc(len + 1);
        if (!U->text) {
            snprintf(err, errlen, "out of memory");
            ok = 0;
            break;
        }
        memcpy(U->text, source, lib_end);
        U->len = lib_end;
        U->key = lib_hash;
        for (int i = 0; i < ns; i++)
            if (sec[i].unit == u) {
                U->len += (size_t)snprintf(U->text + U->len, len + 1 - U->len, "#line %d \"%s\"\n", sec[i].line, name);
                memcpy(U->text + U->len, source + sec[i].begin, sec[i].end - sec[i].begin);
                U->len += sec[i].end - sec[i].begin;
                uint64_t sh = plan_code_hash(source + sec[i].begin, sec[i].end - sec[i].begin);
                U->key = hash64_update(U->key, &sh, sizeof sh);
                U->work += (double)(sec[i].end - sec[i].begin);
            }
        U->text[U->len] = 0;
        if (dir[0]) {
            snprintf(U->path, sizeof U->path, "%s/%016llx-%s-nvrtc%d.%d.cubin", dir, (unsigned long long)U->key, arch,
                     out->major, out->minor);
            size_t sz = 0;
            char *img = read_whole(U->path, &sz);
            if (img) {
                U->out.image = img;
                U->out.image_size = sz;
                U->ok = U->cached = 1;
                out->units_cached++;
                continue;
            }
        }
    }
    free(sec);
    double t0 = now_s();
    if (ok) {
        int ntodo = 0;
        for (int u = 0; u < nunits; u++)
            if (!units[u].cached)
                todo[ntodo++] = &units[u];
        qsort(todo, (size_t)ntodo, sizeof *todo, by_work);
        if (threads <= 0) {
            const char *e = getenv("MOEC_NVRTC_THREADS");
            threads = e && atoi(e) > 0 ? atoi(e) : (int)sysconf(_SC_NPROCESSORS_ONLN);
        }
        if (threads > ntodo)
            threads = ntodo;
        if (threads < 1)
            threads = ntodo ? 1 : 0;
        out->threads = threads;
        Pool P = {todo, ntodo, 0, name, arch, PTHREAD_MUTEX_INITIALIZER};
        pthread_t tid[256];
        int started = 0;
        for (int t = 1; t < threads && t < 256; t++)
            if (pthread_create(&tid[started], NULL, worker, &P) == 0)
                started++;
        worker(&P);
        for (int t = 0; t < started; t++)
            pthread_join(tid[t], NULL);
    }
    out->seconds = now_s() - t0;
    out->units = nunits;
    /* the logs of every unit compiled, warnings and errors counted; the first failure's message */
    size_t loglen = 0;
    for (int u = 0; u < nunits; u++)
        if (units[u].out.log)
            loglen += strlen(units[u].out.log);
    out->log = malloc(loglen + 1);
    if (out->log)
        out->log[0] = 0;
    int failed = -1;
    const void **imgs = calloc((size_t)nunits, sizeof *imgs);
    size_t *sizes = calloc((size_t)nunits, sizeof *sizes);
    for (int u = 0; u < nunits && ok; u++) {
        Unit *U = &units[u];
        if (U->out.log && out->log)
            strcat(out->log, U->out.log);
        out->nwarnings += U->out.nwarnings;
        out->nerrors += U->out.nerrors;
        if (!U->cached && U->out.seconds > out->unit_seconds_max)
            out->unit_seconds_max = U->out.seconds;
        if (!U->ok && failed < 0)
            failed = u;
        if (imgs && sizes) {
            imgs[u] = U->out.image;
            sizes[u] = U->out.image_size;
        }
    }
    if (ok && failed >= 0) {
        snprintf(err, errlen, "%s (unit %d of %d)", units[failed].err, failed, nunits);
        ok = 0;
    }
    if (ok && nunits == 1) {
        /* one unit: the plain image, as nvrtc_compile gives */
        out->image = units[0].out.image;
        out->image_size = units[0].out.image_size;
        units[0].out.image = NULL;
    } else if (ok) {
        if (!imgs || !sizes || !(out->image = kimage_pack(imgs, sizes, nunits, &out->image_size))) {
            snprintf(err, errlen, "out of memory");
            ok = 0;
        }
    }
    free(imgs);
    free(sizes);
    for (int u = 0; u < nunits; u++) {
        free(units[u].text);
        nvrtc_output_free(&units[u].out);
    }
    free(units);
    free(todo);
    return ok;
}
