/* safetensors.c - the safetensors reader (strict validation of header and
 * data area), the atomic writer, and FNV-1a hashing. See safetensors.h. */
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/util.h"

/* Fault injection for the kill -9 suite (tests/train/kill_random.sh): MOEC_FAULT_SAVE_PAUSE_MS=N (0 to 10000)
 * pauses every save for N ms halfway through its tensors, the temporary file half written, so a kill lands
 * inside a write on any machine (without it, on a loaded machine under ASan, 60 random kills once all missed
 * the writes). Unset in any real run: it changes no byte that is written. */
static void fault_pause(void)
{
    const char *v = getenv("MOEC_FAULT_SAVE_PAUSE_MS");
    long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms <= 0 || ms > 10000)
        return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- dtypes */

static const struct {
    const char *name;
    size_t size;
} dtype_info[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1},     [ST_U8] = {"U8", 1},     [ST_I8] = {"I8", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1},
    [ST_I16] = {"I16", 2},       [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2},     [ST_I32] = {"I32", 4},   [ST_U32] = {"U32", 4},
    [ST_F32] = {"F32", 4},       [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8},
    [ST_U64] = {"U64", 8},
};

const char *st_dtype_name(StDType t)
{
    if ((unsigned)t >= ST_DTYPE_COUNT)
        die("bad safetensors dtype %d", (int)t);
    return dtype_info[t].name;
}

size_t st_dtype_size(StDType t)
{
    if ((unsigned)t >= ST_DTYPE_COUNT)
        die("bad safetensors dtype %d", (int)t);
    return dtype_info[t].size;
}

int st_dtype_parse(const char *name, StDType *out)
{
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        if (strcmp(name, dtype_info[i].name) == 0) {
            *out = (StDType)i;
            return 1;
        }
    }
    return 0;
}

/* ---- small helpers */

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory allocating %zu bytes", n);
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    p = realloc(p, n ? n : 1);
    if (!p)
        die("out of memory allocating %zu bytes", n);
    return p;
}

/* Writes "<path>: <message>" into err; returns 0 so callers can
 * `return st_fail(...)`. */
__attribute__((format(printf, 4, 5)))
static int st_fail(char *err, size_t errlen, const char *path, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return 0;
    int n = snprintf(err, errlen, "%s: ", path);
    if (n >= 0 && (size_t)n < errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return 0;
}

/* Position of the first byte that is not valid UTF-8 (overlong forms,
 * surrogates and code points past U+10FFFF included), or n if none. The
 * format requires a UTF-8 header and cJSON does not check. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        uint32_t cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return i;
        }
        if (n - i < len)
            return i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += len;
    }
    return n;
}

static const char *json_type_name(const cJSON *j)
{
    if (cJSON_IsObject(j))
        return "an object";
    if (cJSON_IsArray(j))
        return "an array";
    if (cJSON_IsString(j))
        return "a string";
    if (cJSON_IsNumber(j))
        return "a number";
    if (cJSON_IsBool(j))
        return "a boolean";
    if (cJSON_IsNull(j))
        return "null";
    return "something else";
}

/* Integers in the header are JSON numbers, which cJSON holds as doubles:
 * only those up to 2^53 are exact, far beyond any real file. */
#define ST_MAX_JSON_INT 9007199254740992.0

static int json_to_u64(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return 0;
    double d = j->valuedouble;
    if (!(d >= 0 && d <= ST_MAX_JSON_INT) || d != floor(d))
        return 0;
    *out = (uint64_t)d;
    return 1;
}

/* Describes a bad integer field for a message: its value or its type. */
static const char *json_describe(char buf[64], const cJSON *j)
{
    if (cJSON_IsNumber(j)) {
        char num[32];
        snprintf(buf, 64, "%s", fmt_double(num, j->valuedouble));
    } else {
        snprintf(buf, 64, "%s", json_type_name(j));
    }
    return buf;
}

/* Names with where they came from, sorted to find repeats in n log n
 * (cJSON keeps repeated keys, and a hostile header can hold millions);
 * plain structs, so that qsort needs no global context and reading stays
 * thread-safe. */
typedef struct NameRef {
    const char *name;
    int index;
} NameRef;

static int cmp_nameref(const void *a, const void *b)
{
    return strcmp(((const NameRef *)a)->name, ((const NameRef *)b)->name);
}

/* Sorts refs by name; returns the first name that occurs twice, or NULL. */
static const char *nameref_sort_find_repeat(NameRef *refs, int n)
{
    qsort(refs, (size_t)n, sizeof *refs, cmp_nameref);
    for (int i = 1; i < n; i++) {
        if (strcmp(refs[i - 1].name, refs[i].name) == 0)
            return refs[i].name;
    }
    return NULL;
}

/* ---- reading */

/* Reads exactly n bytes; returns 0 with errno set (0 for a short file). */
static int read_full(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n > 0) {
        ssize_t r = read(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return 0;
        }
        if (r == 0) {
            errno = 0;
            return 0;
        }
        p += r;
        n -= (size_t)r;
    }
    return 1;
}

/* A tensor while the header is being checked. */
typedef struct StEntry {
    const char *name;   /* owned by the cJSON tree */
    StDType dtype;
    int rank;
    size_t dim0;        /* index of its first dim in the dims array */
    uint64_t begin, end;
    int index;          /* position in the header */
} StEntry;

typedef struct StParse {
    const char *path;
    char *err;
    size_t errlen;
    uint64_t data_size;
    int64_t *dims;
    size_t ndims, dimcap;
} StParse;

static int parse_entry(StParse *p, const cJSON *j, StEntry *e)
{
    const char *path = p->path, *name = e->name;
    char *err = p->err;
    size_t errlen = p->errlen;
    char d1[64], d2[64];

    if (!cJSON_IsObject(j))
        return st_fail(err, errlen, path, "tensor '%s': expected an object, found %s", name, json_type_name(j));

    const cJSON *dtype = NULL, *shape = NULL, *offsets = NULL, *k;
    cJSON_ArrayForEach(k, j) {
        const cJSON **slot = strcmp(k->string, "dtype") == 0          ? &dtype
                             : strcmp(k->string, "shape") == 0        ? &shape
                             : strcmp(k->string, "data_offsets") == 0 ? &offsets
                                                                      : NULL;
        if (!slot)
            return st_fail(err, errlen, path, "tensor '%s': unknown key \"%s\"", name, k->string);
        if (*slot)
            return st_fail(err, errlen, path, "tensor '%s': duplicate key \"%s\"", name, k->string);
        *slot = k;
    }
    if (!dtype)
        return st_fail(err, errlen, path, "tensor '%s': missing \"dtype\"", name);
    if (!shape)
        return st_fail(err, errlen, path, "tensor '%s': missing \"shape\"", name);
    if (!offsets)
        return st_fail(err, errlen, path, "tensor '%s': missing \"data_offsets\"", name);

    if (!cJSON_IsString(dtype))
        return st_fail(err, errlen, path, "tensor '%s': \"dtype\" must be a string, found %s", name,
                       json_type_name(dtype));
    if (!st_dtype_parse(dtype->valuestring, &e->dtype))
        return st_fail(err, errlen, path, "tensor '%s': unknown dtype \"%s\"", name, dtype->valuestring);

    if (!cJSON_IsArray(shape))
        return st_fail(err, errlen, path, "tensor '%s': \"shape\" must be an array, found %s", name,
                       json_type_name(shape));
    e->rank = cJSON_GetArraySize(shape);
    e->dim0 = p->ndims;
    int any_zero = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, shape) {
        uint64_t v;
        if (!json_to_u64(d, &v))
            return st_fail(err, errlen, path, "tensor '%s': shape[%d] is %s; dims must be integers from 0 to 2^53", name,
                           (int)(p->ndims - e->dim0), json_describe(d1, d));
        if (p->ndims == p->dimcap) {
            p->dimcap = p->dimcap ? 2 * p->dimcap : 64;
            p->dims = xrealloc(p->dims, p->dimcap * sizeof *p->dims);
        }
        p->dims[p->ndims++] = (int64_t)v;
        any_zero |= v == 0;
    }
    /* A zero dim makes the tensor empty however large the others are. */
    int64_t elems = 1;
    for (int i = 0; i < e->rank && !any_zero; i++) {
        if (!checked_mul_i64(elems, p->dims[e->dim0 + i], &elems))
            return st_fail(err, errlen, path, "tensor '%s': shape is too large", name);
    }
    if (any_zero)
        elems = 0;
    int64_t need;
    if (!checked_mul_i64(elems, (int64_t)st_dtype_size(e->dtype), &need))
        return st_fail(err, errlen, path, "tensor '%s': shape is too large", name);

    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2)
        return st_fail(err, errlen, path, "tensor '%s': \"data_offsets\" must be an array [begin, end]", name);
    const cJSON *b = cJSON_GetArrayItem(offsets, 0), *en = cJSON_GetArrayItem(offsets, 1);
    if (!json_to_u64(b, &e->begin) || !json_to_u64(en, &e->end))
        return st_fail(err, errlen, path, "tensor '%s': data_offsets [%s, %s] must be integers from 0 to 2^53", name,
                       json_describe(d1, b), json_describe(d2, en));
    if (e->end < e->begin)
        return st_fail(err, errlen, path, "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] end before they begin",
                       name, e->begin, e->end);
    if (e->end > p->data_size)
        return st_fail(err, errlen, path,
                       "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] go past the end of the data area (%" PRIu64
                       " bytes)",
                       name, e->begin, e->end, p->data_size);
    if (e->end - e->begin != (uint64_t)need)
        return st_fail(err, errlen, path,
                       "tensor '%s': data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                       " bytes but %" PRId64 " elements of %s need %" PRId64,
                       name, e->begin, e->end, e->end - e->begin, elems, st_dtype_name(e->dtype), need);
    return 1;
}

static int parse_metadata(StParse *p, const cJSON *j, SafeTensors *out)
{
    if (!cJSON_IsObject(j))
        return st_fail(p->err, p->errlen, p->path, "\"__metadata__\" must be an object, found %s", json_type_name(j));
    int n = cJSON_GetArraySize(j);
    out->meta = xmalloc((size_t)n * sizeof *out->meta);
    const cJSON *k;
    cJSON_ArrayForEach(k, j) {
        if (!cJSON_IsString(k))
            return st_fail(p->err, p->errlen, p->path, "metadata \"%s\" must be a string, found %s", k->string,
                           json_type_name(k));
        out->meta[out->nmeta].key = xstrdup(k->string);
        out->meta[out->nmeta].value = xstrdup(k->valuestring);
        out->nmeta++;
    }
    NameRef *refs = xmalloc((size_t)n * sizeof *refs);
    for (int i = 0; i < n; i++)
        refs[i] = (NameRef){out->meta[i].key, i};
    const char *dup = nameref_sort_find_repeat(refs, n);
    int ok = dup ? st_fail(p->err, p->errlen, p->path, "duplicate metadata key \"%s\"", dup) : 1;
    free(refs);
    return ok;
}

/* File order: by offsets, and by header position among equals so that the
 * order is deterministic; empty tensors sort before the tensor they touch. */
static int cmp_by_offset(const void *a, const void *b)
{
    const StEntry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

/* Checks the header and fills out (except the data pointers). */
static int parse_header(StParse *p, char *hdr, size_t n, SafeTensors *out)
{
    const char *path = p->path;
    char *err = p->err;
    size_t errlen = p->errlen;

    if (hdr[0] != '{')
        return st_fail(err, errlen, path, "header does not start with '{' (found byte 0x%02x)", (unsigned char)hdr[0]);
    /* JSON allows no raw control bytes but tab, newline and return, yet
     * cJSON skips them all as whitespace, so that a flipped bit could turn
     * "[1]" into a valid "[]". A NUL would also cut names short. */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)hdr[i];
        if (c == 0)
            return st_fail(err, errlen, path, "header contains a NUL byte at offset %zu", i);
        if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
            return st_fail(err, errlen, path, "header contains control byte 0x%02x at offset %zu", c, i);
    }
    size_t bad = utf8_invalid_at((const unsigned char *)hdr, n);
    if (bad < n)
        return st_fail(err, errlen, path, "header is not valid UTF-8 (byte %zu of the header)", bad);

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, n, &end, 0);
    if (!root) {
        size_t at = end && end >= hdr && end <= hdr + n ? (size_t)(end - hdr) : 0;
        return st_fail(err, errlen, path, "header is not valid JSON (error near byte %zu of the header)", at);
    }
    int ok = 0;
    StEntry *entries = NULL;
    NameRef *refs = NULL;
    for (const char *q = end; q < hdr + n; q++) {
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            st_fail(err, errlen, path, "header has stray bytes after the JSON object (byte %zu of the header)",
                    (size_t)(q - hdr));
            goto done;
        }
    }
    if (!cJSON_IsObject(root)) {
        st_fail(err, errlen, path, "header must be a JSON object, found %s", json_type_name(root));
        goto done;
    }

    int nkeys = cJSON_GetArraySize(root), ne = 0;
    entries = xmalloc((size_t)nkeys * sizeof *entries);
    const cJSON *metadata = NULL, *k;
    cJSON_ArrayForEach(k, root) {
        if (strcmp(k->string, "__metadata__") == 0) {
            if (metadata) {
                st_fail(err, errlen, path, "header has \"__metadata__\" twice");
                goto done;
            }
            metadata = k;
            if (!parse_metadata(p, k, out))
                goto done;
            continue;
        }
        StEntry *e = &entries[ne];
        e->name = k->string;
        e->index = ne;
        if (!parse_entry(p, k, e))
            goto done;
        ne++;
    }

    /* The sorted names find repeats and then serve st_find. */
    refs = xmalloc((size_t)ne * sizeof *refs);
    for (int i = 0; i < ne; i++)
        refs[i] = (NameRef){entries[i].name, i};
    const char *dup = nameref_sort_find_repeat(refs, ne);
    if (dup) {
        st_fail(err, errlen, path, "duplicate tensor name '%s'", dup);
        goto done;
    }

    /* Every byte of the data area belongs to exactly one tensor. */
    qsort(entries, (size_t)ne, sizeof *entries, cmp_by_offset);
    uint64_t cursor = 0;
    for (int i = 0; i < ne; i++) {
        const StEntry *e = &entries[i];
        if (e->begin < cursor) {
            st_fail(err, errlen, path, "tensors '%s' and '%s' overlap in the data area", entries[i - 1].name,
                    e->name);
            goto done;
        }
        if (e->begin > cursor) {
            st_fail(err, errlen, path, "bytes [%" PRIu64 ", %" PRIu64 ") of the data area belong to no tensor",
                    cursor, e->begin);
            goto done;
        }
        cursor = e->end;
    }
    if (cursor != p->data_size) {
        st_fail(err, errlen, path, "bytes [%" PRIu64 ", %" PRIu64 ") of the data area belong to no tensor", cursor,
                p->data_size);
        goto done;
    }

    /* Copy out in file order; refs hold header positions, so map them. */
    int *pos = xmalloc((size_t)ne * sizeof *pos);
    size_t namebytes = 0;
    for (int i = 0; i < ne; i++) {
        pos[entries[i].index] = i;
        namebytes += strlen(entries[i].name) + 1;
    }
    out->by_name = xmalloc((size_t)ne * sizeof *out->by_name);
    for (int i = 0; i < ne; i++)
        out->by_name[i] = pos[refs[i].index];
    free(pos);
    out->tensors = xmalloc((size_t)ne * sizeof *out->tensors + namebytes);
    char *names = (char *)(out->tensors + ne);
    for (int i = 0; i < ne; i++) {
        const StEntry *e = &entries[i];
        SafeTensor *t = &out->tensors[i];
        size_t len = strlen(e->name) + 1;
        t->name = memcpy(names, e->name, len);
        names += len;
        t->dtype = e->dtype;
        t->rank = e->rank;
        t->shape = e->rank ? p->dims + e->dim0 : NULL;
        t->offset = e->begin;
        t->nbytes = (size_t)(e->end - e->begin);
        t->data = NULL;
    }
    out->ntensors = ne;
    out->dims = p->dims;   /* every shape points into it now */
    p->dims = NULL;
    ok = 1;
done:
    free(entries);
    free(refs);
    cJSON_Delete(root);
    return ok;
}

int st_read(const char *path, SafeTensors *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (err && errlen)
        err[0] = 0;
    char oerr[512];
    int fd = open_regular(path, oerr, sizeof oerr);  /* a FIFO, a device or a directory: refused before reading */
    if (fd < 0) {
        if (err && errlen)
            snprintf(err, errlen, "%s", oerr);
        return 0;
    }

    int ok = 0;
    char *hdr = NULL;
    StParse p = {path, err, errlen, 0, NULL, 0, 0};
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        st_fail(err, errlen, path, "cannot stat: %s", strerror(errno));
        goto done;
    }
    if (!S_ISREG(sb.st_mode)) {
        st_fail(err, errlen, path, "not a regular file");
        goto done;
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        st_fail(err, errlen, path, "file is %" PRIu64 " bytes, too short to hold the 8-byte header size", size);
        goto done;
    }
    unsigned char lenbuf[8];
    if (!read_full(fd, lenbuf, 8))
        goto read_error;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | lenbuf[i];
    if (n == 0) {
        st_fail(err, errlen, path, "header size is 0");
        goto done;
    }
    if (n > ST_MAX_HEADER) {
        st_fail(err, errlen, path, "header size %" PRIu64 " is absurd (limit %u); the file is corrupt or not safetensors",
                n, ST_MAX_HEADER);
        goto done;
    }
    if (n > size - 8) {
        st_fail(err, errlen, path, "header size %" PRIu64 " is larger than the rest of the file (%" PRIu64 " bytes)", n,
                size - 8);
        goto done;
    }
    hdr = xmalloc((size_t)n + 1);
    if (!read_full(fd, hdr, (size_t)n))
        goto read_error;
    hdr[n] = 0;

    p.data_size = size - 8 - n;
    if (p.data_size > SIZE_MAX - 64) {
        st_fail(err, errlen, path, "data area of %" PRIu64 " bytes is too large for this machine", p.data_size);
        goto done;
    }
    if (!parse_header(&p, hdr, (size_t)n, out))
        goto done;

    /* The header is sound; now the data, in a buffer of its own so that it
     * is aligned whatever the header's padding. */
    size_t dsize = (size_t)p.data_size;
    out->data_area = aligned_alloc(64, (dsize + 63) / 64 * 64 + 64);
    if (!out->data_area) {
        st_fail(err, errlen, path, "cannot allocate %zu bytes for the tensor data", dsize);
        goto done;
    }
    if (!read_full(fd, out->data_area, dsize))
        goto read_error;
    char extra;
    ssize_t r;
    while ((r = read(fd, &extra, 1)) < 0 && errno == EINTR)
        ;
    if (r != 0) {
        st_fail(err, errlen, path, "file changed while it was being read");
        goto done;
    }
    for (int i = 0; i < out->ntensors; i++)
        out->tensors[i].data = (char *)out->data_area + out->tensors[i].offset;
    ok = 1;
    goto done;

read_error:
    if (errno)
        st_fail(err, errlen, path, "read error: %s", strerror(errno));
    else
        st_fail(err, errlen, path, "file changed while it was being read");
done:
    close(fd);
    free(hdr);
    free(p.dims);
    if (!ok)
        st_free(out);
    return ok;
}

void st_free(SafeTensors *st)
{
    for (int i = 0; i < st->nmeta; i++) {
        free(st->meta[i].key);
        free(st->meta[i].value);
    }
    free(st->meta);
    free(st->tensors);   /* the names live in the same block */
    free(st->by_name);
    free(st->dims);
    free(st->data_area);
    memset(st, 0, sizeof *st);
}

const SafeTensor *st_find(const SafeTensors *st, const char *name)
{
    int lo = 0, hi = st->ntensors;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        const SafeTensor *t = &st->tensors[st->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

const char *st_metadata(const SafeTensors *st, const char *key)
{
    for (int i = 0; i < st->nmeta; i++) {
        if (strcmp(st->meta[i].key, key) == 0)
            return st->meta[i].value;
    }
    return NULL;
}

/* ---- writing */

struct StWriterTensor {
    char *name;
    StDType dtype;
    int rank;
    int64_t *shape;
    const void *data;
    size_t nbytes;
};

void st_writer_init(SafeTensorsWriter *w)
{
    memset(w, 0, sizeof *w);
}

void st_writer_free(SafeTensorsWriter *w)
{
    for (int i = 0; i < w->ntensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].shape);
    }
    free(w->tensors);
    for (int i = 0; i < w->nmeta; i++) {
        free(w->meta[i].key);
        free(w->meta[i].value);
    }
    free(w->meta);
    memset(w, 0, sizeof *w);
}

void st_writer_add(SafeTensorsWriter *w, const char *name, StDType dtype, int rank, const int64_t *shape,
                   const void *data, size_t nbytes)
{
    if ((unsigned)dtype >= ST_DTYPE_COUNT)
        die("st_writer_add: bad dtype %d for '%s'", (int)dtype, name);
    if (utf8_invalid_at((const unsigned char *)name, strlen(name)) != strlen(name))
        die("st_writer_add: tensor name is not valid UTF-8");
    if (strcmp(name, "__metadata__") == 0)
        die("st_writer_add: \"__metadata__\" is reserved");
    if (rank < 0 || (rank > 0 && !shape))
        die("st_writer_add: bad rank %d for '%s'", rank, name);
    int64_t elems = 1;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0)
            die("st_writer_add: '%s' has dim %d = %" PRId64, name, i, shape[i]);
    }
    for (int i = 0; i < rank && elems; i++) {
        if (!checked_mul_i64(elems, shape[i], &elems))
            die("st_writer_add: shape of '%s' overflows", name);
    }
    int64_t need;
    if (!checked_mul_i64(elems, (int64_t)st_dtype_size(dtype), &need) || (uint64_t)need != nbytes)
        die("st_writer_add: '%s' has %zu bytes, its shape and dtype need %" PRId64, name, nbytes, need);
    if (nbytes && !data)
        die("st_writer_add: '%s' has no data", name);

    if (w->ntensors == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 16;
        w->tensors = xrealloc(w->tensors, (size_t)w->cap * sizeof *w->tensors);
    }
    StWriterTensor *t = &w->tensors[w->ntensors++];
    t->name = xstrdup(name);
    t->dtype = dtype;
    t->rank = rank;
    t->shape = xmalloc((size_t)rank * sizeof *t->shape);
    if (rank)
        memcpy(t->shape, shape, (size_t)rank * sizeof *t->shape);
    t->data = data;
    t->nbytes = nbytes;
}

void st_writer_set_metadata(SafeTensorsWriter *w, const char *key, const char *value)
{
    if (utf8_invalid_at((const unsigned char *)key, strlen(key)) != strlen(key) ||
        utf8_invalid_at((const unsigned char *)value, strlen(value)) != strlen(value))
        die("st_writer_set_metadata: key or value is not valid UTF-8");
    for (int i = 0; i < w->nmeta; i++) {
        if (strcmp(w->meta[i].key, key) == 0) {
            free(w->meta[i].value);
            w->meta[i].value = xstrdup(value);
            return;
        }
    }
    if (w->nmeta == w->metacap) {
        w->metacap = w->metacap ? 2 * w->metacap : 8;
        w->meta = xrealloc(w->meta, (size_t)w->metacap * sizeof *w->meta);
    }
    w->meta[w->nmeta].key = xstrdup(key);
    w->meta[w->nmeta].value = xstrdup(value);
    w->nmeta++;
}

/* An exact integer for the header: cJSON prints large numbers in
 * exponent form, which other readers refuse for integer fields. */
static cJSON *json_u64(uint64_t v)
{
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return cJSON_CreateRaw(buf);
}

static void json_add(cJSON *obj, const char *key, cJSON *item)
{
    if (!item || !cJSON_AddItemToObject(obj, key, item))
        die("out of memory building a safetensors header");
}

/* The header text, unpadded; free with cJSON_free. */
static char *writer_header(const SafeTensorsWriter *w)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        die("out of memory building a safetensors header");
    if (w->nmeta) {
        cJSON *meta = cJSON_CreateObject();
        json_add(root, "__metadata__", meta);
        for (int i = 0; i < w->nmeta; i++)
            json_add(meta, w->meta[i].key, cJSON_CreateString(w->meta[i].value));
    }
    uint64_t off = 0;
    for (int i = 0; i < w->ntensors; i++) {
        const StWriterTensor *t = &w->tensors[i];
        cJSON *e = cJSON_CreateObject();
        json_add(root, t->name, e);
        json_add(e, "dtype", cJSON_CreateString(st_dtype_name(t->dtype)));
        cJSON *shape = cJSON_CreateArray();
        json_add(e, "shape", shape);
        for (int d = 0; d < t->rank; d++) {
            cJSON *v = json_u64((uint64_t)t->shape[d]);
            if (!v || !cJSON_AddItemToArray(shape, v))
                die("out of memory building a safetensors header");
        }
        cJSON *offs = cJSON_CreateArray();
        json_add(e, "data_offsets", offs);
        cJSON *b = json_u64(off), *en = json_u64(off + t->nbytes);
        if (!b || !en || !cJSON_AddItemToArray(offs, b) || !cJSON_AddItemToArray(offs, en))
            die("out of memory building a safetensors header");
        off += t->nbytes;
    }
    char *s = cJSON_PrintUnformatted(root);
    if (!s)
        die("out of memory printing a safetensors header");
    cJSON_Delete(root);
    return s;
}

/* fsyncs the directory holding path, so that the rename is durable. */
static int sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash == path ? xstrdup("/") : slash ? strndup(path, (size_t)(slash - path)) : xstrdup(".");
    if (!dir)
        die("out of memory");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (fd < 0)
        return 0;
    /* Some file systems cannot sync a directory and say EINVAL; there is
     * nothing more to do there. */
    int ok = fsync(fd) == 0 || errno == EINVAL;
    int saved = errno;
    close(fd);
    errno = saved;
    return ok;
}

int st_writer_save(const SafeTensorsWriter *w, const char *path, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = 0;
    /* Checked here rather than per add, which would be quadratic. */
    NameRef *refs = xmalloc((size_t)w->ntensors * sizeof *refs);
    for (int i = 0; i < w->ntensors; i++)
        refs[i] = (NameRef){w->tensors[i].name, i};
    const char *dup = nameref_sort_find_repeat(refs, w->ntensors);
    if (dup)
        die("st_writer_save: tensor '%s' added twice", dup);
    free(refs);

    char *json = writer_header(w);
    size_t jlen = strlen(json);
    size_t hlen = (jlen + 7) / 8 * 8;   /* 8 + hlen is then a multiple of 8 too */
    if (hlen > ST_MAX_HEADER) {
        cJSON_free(json);
        return st_fail(err, errlen, path, "header of %zu bytes is over the limit of %u that readers accept", hlen,
                       ST_MAX_HEADER);
    }
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++)
        lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    static const char spaces[8] = "        ";

    size_t tlen = strlen(path) + 32;
    char *tmp = xmalloc(tlen);
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());

    int ok = 0;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        st_fail(err, errlen, path, "cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }
    int bad = fwrite(lenbuf, 1, 8, f) != 8 || fwrite(json, 1, jlen, f) != jlen ||
              fwrite(spaces, 1, hlen - jlen, f) != hlen - jlen;
    for (int i = 0; i < w->ntensors && !bad; i++) {
        const StWriterTensor *t = &w->tensors[i];
        if (i == w->ntensors / 2)
            fault_pause();
        bad = t->nbytes && fwrite(t->data, 1, t->nbytes, f) != t->nbytes;
    }
    if (bad || fflush(f) != 0) {
        st_fail(err, errlen, path, "cannot write %s: %s", tmp, strerror(errno));
        fclose(f);
        goto fail;
    }
    if (fsync(fileno(f)) != 0) {
        st_fail(err, errlen, path, "cannot sync %s: %s", tmp, strerror(errno));
        fclose(f);
        goto fail;
    }
    if (fclose(f) != 0) {
        st_fail(err, errlen, path, "cannot close %s: %s", tmp, strerror(errno));
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        st_fail(err, errlen, path, "cannot rename %s over it: %s", tmp, strerror(errno));
        goto fail;
    }
    if (!sync_dir(path)) {
        st_fail(err, errlen, path, "written, but its directory could not be synced (%s); it may not survive a crash",
                strerror(errno));
        goto out;
    }
    ok = 1;
    goto out;
fail:
    unlink(tmp);
out:
    free(tmp);
    cJSON_free(json);
    return ok;
}

