/* shards.c - token shard directories (shards.h): `moec prep` streams FASTA
 * into them, the training binary maps them.
 *
 * Writing never holds more than a few MiB of sequence: the FASTA reader
 * hands complete sequences to a sink (fasta_read_stream) that appends their
 * tokens to the current shard, their end offsets to offsets.bin and their
 * ids to ids.txt. The split's statistics are counted at the end over the
 * written files, mapped, with the same code the training binary uses. */
#include "shards.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/util.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shard files are little-endian and read in place: a big-endian host needs byte swapping here"
#endif

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return 0;
}

/* ---- a fast streaming hash ---------------------------------------------- */

/* Four independent multiply-rotate lanes over 32-byte blocks (about 8 bytes
 * per cycle), a tail kept between calls so the result does not depend on
 * how the stream was cut. Not cryptographic: it detects damage and edits. */
typedef struct Hasher {
    uint64_t lane[4];
    uint64_t total;
    unsigned char tail[32];
    size_t ntail;
} Hasher;

#define HP1 UINT64_C(0x9e3779b185ebca87)
#define HP2 UINT64_C(0xc2b2ae3d27d4eb4f)

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void hasher_init(Hasher *h)
{
    memset(h, 0, sizeof *h);
    for (int i = 0; i < 4; i++)
        h->lane[i] = HP1 * (uint64_t)(i + 1);
}

static void hasher_block(Hasher *h, const unsigned char *p)
{
    for (int i = 0; i < 4; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        h->lane[i] = rotl(h->lane[i] + w * HP2, 31) * HP1;
    }
}

static void hasher_add(Hasher *h, const void *data, size_t n)
{
    const unsigned char *p = data;
    h->total += n;
    if (h->ntail) {
        size_t k = 32 - h->ntail < n ? 32 - h->ntail : n;
        memcpy(h->tail + h->ntail, p, k);
        h->ntail += k;
        p += k;
        n -= k;
        if (h->ntail < 32)
            return;
        hasher_block(h, h->tail);
        h->ntail = 0;
    }
    for (; n >= 32; p += 32, n -= 32)
        hasher_block(h, p);
    memcpy(h->tail, p, n);
    h->ntail = n;
}

static uint64_t hasher_end(const Hasher *h)
{
    uint64_t x = h->total * HP2;
    for (int i = 0; i < 4; i++)
        x = rotl(x ^ h->lane[i], 27) * HP1 + HP2;
    return hash64_update(x, h->tail, h->ntail);
}

static void hex64(char out[17], uint64_t v)
{
    snprintf(out, 17, "%016" PRIx64, v);
}

/* ---- inputs ------------------------------------------------------------- */

static int has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

static int is_fasta_name(const char *name)
{
    static const char *const ext[] = {".fa", ".fasta", ".faa", ".fna", ".ffn", ".fas", ".seq"};
    char base[512];
    snprintf(base, sizeof base, "%s", name);
    if (has_suffix(base, ".gz"))
        base[strlen(base) - 3] = '\0';
    for (int i = 0; i < ARRAY_LEN(ext); i++)
        if (has_suffix(base, ext[i]))
            return 1;
    return 0;
}

typedef struct StrList {
    char **v;
    int n, cap;
} StrList;

static void list_add(StrList *l, const char *s)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->v = realloc(l->v, (size_t)l->cap * sizeof *l->v);
        if (!l->v)
            die("out of memory");
    }
    l->v[l->n++] = xstrdup(s);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void data_inputs_free(char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

int shards_is_dir(const char *path)
{
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", path, SHARDS_INDEX);
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(p, F_OK) == 0;
}

int data_inputs_expand(const char *const *args, int n, char ***out, int *nout, char *err, size_t errlen)
{
    StrList l = {0};
    int nstdin = 0;
    for (int i = 0; i < n; i++) {
        const char *a = args[i];
        struct stat st;
        if (strcmp(a, "-") == 0) {
            if (nstdin++) {
                data_inputs_free(l.v, l.n);
                return fail(err, errlen, "standard input ('-') is named twice");
            }
            list_add(&l, a);
        } else if (stat(a, &st) == 0 && S_ISDIR(st.st_mode) && !shards_is_dir(a)) {
            DIR *d = opendir(a);
            if (!d) {
                data_inputs_free(l.v, l.n);
                return fail(err, errlen, "%s: cannot read the directory: %s", a, strerror(errno));
            }
            StrList sub = {0};
            struct dirent *e;
            while ((e = readdir(d))) {
                char p[4096];
                snprintf(p, sizeof p, "%s/%s", a, e->d_name);
                if (e->d_name[0] != '.' && is_fasta_name(e->d_name) && stat(p, &st) == 0 && S_ISREG(st.st_mode))
                    list_add(&sub, p);
            }
            closedir(d);
            if (sub.n == 0) {
                data_inputs_free(l.v, l.n);
                return fail(err, errlen, "%s: a directory without FASTA files (*.fa, *.fasta, *.faa, *.fna, *.ffn, "
                            "*.fas, *.seq, optionally .gz) and without an %s (not a shard directory)", a,
                            SHARDS_INDEX);
            }
            qsort(sub.v, (size_t)sub.n, sizeof *sub.v, cmp_str);
            for (int k = 0; k < sub.n; k++)
                list_add(&l, sub.v[k]);
            data_inputs_free(sub.v, sub.n);
        } else if (access(a, F_OK) != 0 && strpbrk(a, "*?[")) {
            glob_t g;
            int rc = glob(a, 0, NULL, &g);
            if (rc != 0) {
                if (rc != GLOB_NOMATCH)
                    globfree(&g);
                data_inputs_free(l.v, l.n);
                return fail(err, errlen, "%s: no file matches the pattern", a);
            }
            for (size_t k = 0; k < g.gl_pathc; k++)
                list_add(&l, g.gl_pathv[k]);
            globfree(&g);
        } else {
            list_add(&l, a);  /* a file, a shard directory, or a missing path that the reader names */
        }
    }
    *out = l.v;
    *nout = l.n;
    return 1;
}

int data_open(const char *const *args, int n, const Alphabet *a, FastaSet *fs, char *err, size_t errlen)
{
    char **in;
    int nin;
    fasta_set_init(fs);
    if (!data_inputs_expand(args, n, &in, &nin, err, errlen))
        return 0;
    int nshards = 0;
    for (int i = 0; i < nin; i++)
        nshards += shards_is_dir(in[i]);
    int ok = 1;
    if (nshards && nin > 1) {
        ok = fail(err, errlen, "%s: a shard directory is the whole data set: it cannot be mixed with %s (prep all "
                  "the inputs together with `moec prep`)", shards_is_dir(in[0]) ? in[0] : in[nin - 1],
                  nshards > 1 ? "another shard directory" : "FASTA files");
    } else if (nshards) {
        ok = shards_open(in[0], a, fs, err, errlen);
    } else {
        for (int i = 0; ok && i < nin; i++)
            ok = fasta_read(in[i], a, fs, err, errlen);
    }
    data_inputs_free(in, nin);
    return ok;
}

/* ---- reading ------------------------------------------------------------ */

typedef struct Shards {
    char *dir;
    unsigned char *tokens;       /* the reserved range the shard files are mapped into */
    size_t tokens_len;
    int64_t *offsets;
    size_t offsets_len;
    int64_t *clusters;           /* cluster_of | cluster_off | cluster_members, one file */
    size_t clusters_len;
    int64_t *unknown;            /* prep's unknown.tmp while it counts the split, else NULL */
    size_t unknown_len;
    _Atomic int64_t since_release;
} Shards;

/* Each sequence the loader reads maps the page-cache folio around it: 64 KiB
 * of fault-around, or a whole large folio (2 MiB measured on Linux 6.18,
 * ext4), so the resident set grows with the number of sequences read, not
 * their length: after every RELEASE_EVERY units of work (a sequence, or
 * 4 KiB of a long one) the maps' pages are dropped, bounding the growth to
 * about RELEASE_EVERY x 2 x 2 MiB. Dropping costs a walk of the page tables
 * of the maps, microseconds when few pages are present. */
#define RELEASE_EVERY 16

static void *map_file(const char *path, size_t len, void *at, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    void *p = mmap(at, len, PROT_READ, MAP_SHARED | (at ? MAP_FIXED : 0), fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) {
        fail(err, errlen, "%s: cannot map: %s", path, strerror(e));
        return NULL;
    }
    return p;
}

static int file_size_is(const char *path, int64_t want, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return fail(err, errlen, "%s: missing from the shard directory (%s)", path, strerror(errno));
    if ((int64_t)st.st_size != want)
        return fail(err, errlen, "%s: %lld bytes but the index says %lld: the file is %s; prep the data again",
                    path, (long long)st.st_size, (long long)want, (int64_t)st.st_size < want ? "truncated" : "changed");
    return 1;
}

static char *read_small_file(const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = malloc(max + 1);
    if (!buf)
        die("out of memory");
    size_t n = fread(buf, 1, max + 1, f);
    fclose(f);
    if (n > max) {
        free(buf);
        fail(err, errlen, "%s: larger than %zu bytes: not a shard index", path, max);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static int64_t json_i64(const cJSON *o, const char *key, int64_t dflt)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? (int64_t)x->valuedouble : dflt;
}

/* The index's checksum: the hash of its text as cJSON prints it without the
 * "checksum" member. */
static uint64_t index_checksum(cJSON *root)
{
    cJSON *ck = cJSON_DetachItemFromObjectCaseSensitive(root, "checksum");
    char *txt = cJSON_PrintUnformatted(root);
    if (!txt)
        die("out of memory");
    uint64_t h = hash64(txt, strlen(txt));
    free(txt);
    if (ck)
        cJSON_AddItemToObject(root, "checksum", ck);
    return h;
}

/* Reads and checks DIR/index.json. */
static cJSON *read_index(const char *dir, uint64_t *checksum, char *err, size_t errlen)
{
    char path[4096];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, SHARDS_INDEX);
    char *txt = read_small_file(path, (size_t)64 << 20, &len, err, errlen);
    if (!txt)
        return NULL;
    cJSON *root = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        fail(err, errlen, "%s: not a shard index (not a JSON object); prep the data again", path);
        return NULL;
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, SHARDS_FORMAT) != 0) {
        fail(err, errlen, "%s: format %s%s%s, but this moec reads %s; prep the data again with this moec", path,
             cJSON_IsString(fmt) ? "'" : "", cJSON_IsString(fmt) ? fmt->valuestring : "missing",
             cJSON_IsString(fmt) ? "'" : "", SHARDS_FORMAT);
        cJSON_Delete(root);
        return NULL;
    }
    const cJSON *ck = cJSON_GetObjectItemCaseSensitive(root, "checksum");
    uint64_t h = index_checksum(root);
    char hex[17];
    hex64(hex, h);
    if (!cJSON_IsString(ck) || strcmp(ck->valuestring, hex) != 0) {
        fail(err, errlen, "%s: the index's checksum does not match its contents (it was edited or damaged); prep "
             "the data again", path);
        cJSON_Delete(root);
        return NULL;
    }
    *checksum = h;
    return root;
}

static int read_counts(const cJSON *o, int64_t *nseq, int64_t *nres, int64_t *nunk, int64_t counts[64])
{
    if (!cJSON_IsObject(o))
        return 0;
    *nseq = json_i64(o, "sequences", -1);
    *nres = json_i64(o, "residues", -1);
    *nunk = json_i64(o, "unknown", -1);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "counts");
    if (!cJSON_IsArray(c) || cJSON_GetArraySize(c) > 64)
        return 0;
    memset(counts, 0, 64 * sizeof *counts);
    int k = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, c) counts[k++] = cJSON_IsNumber(x) ? (int64_t)x->valuedouble : -1;
    return *nseq >= 0 && *nres >= 0 && *nunk >= 0;
}

/* Maps the shard set described by root (already checked) into fs. with_summary: the index has one. */
static int map_set(const char *dir, cJSON *root, const Alphabet *want, FastaSet *fs, int with_summary, char *err,
                   size_t errlen)
{
    const cJSON *al = cJSON_GetObjectItemCaseSensitive(root, "alphabet");
    int kind = cJSON_IsString(al) ? alphabet_lookup(al->valuestring) : -1;
    if (kind < 0)
        return fail(err, errlen, "%s/%s: no alphabet, or an unknown one", dir, SHARDS_INDEX);
    const Alphabet *a = alphabet_get((AlphabetKind)kind);
    if (want && want != a)
        return fail(err, errlen, "%s: the shards hold %s tokens but this model trains on the %s alphabet; prep the "
                    "FASTA with --alphabet %s", dir, a->name, want->name, want->name);
    int64_t nseq = json_i64(root, "sequences", -1), ntok = json_i64(root, "tokens", -1);
    int64_t sb = json_i64(root, "shard_bytes", -1), ncl = json_i64(root, "clusters", 0);
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(root, "shards");
    long page = sysconf(_SC_PAGESIZE);
    if (nseq < 1 || ntok < nseq || sb < SHARDS_ALIGN || sb % SHARDS_ALIGN || (page > 0 && sb % page) ||
        !cJSON_IsArray(files) || ncl < 0 || ncl > nseq)
        return fail(err, errlen, "%s/%s: bad counts or shard size; prep the data again", dir, SHARDS_INDEX);
    int nfiles = cJSON_GetArraySize(files);
    if ((int64_t)nfiles != (ntok + sb - 1) / sb)
        return fail(err, errlen, "%s/%s: %d shard files listed for %lld tokens of %lld per shard", dir, SHARDS_INDEX,
                    nfiles, (long long)ntok, (long long)sb);
    Shards *sh = calloc(1, sizeof *sh);
    if (!sh)
        die("out of memory");
    sh->dir = xstrdup(dir);
    fs->shards = sh;
    char path[4096];
    /* the shard files side by side in one reserved range */
    sh->tokens_len = (size_t)(nfiles * sb);
    void *base = mmap(NULL, sh->tokens_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        sh->tokens_len = 0;
        shards_unmap(fs);
        return fail(err, errlen, "%s: cannot reserve %lld bytes of address space: %s", dir, (long long)ntok,
                    strerror(errno));
    }
    sh->tokens = base;
    int k = 0;
    const cJSON *f;
    cJSON_ArrayForEach(f, files)
    {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "file");
        int64_t bytes = json_i64(f, "bytes", -1);
        int64_t want_bytes = k + 1 < nfiles ? sb : ntok - (int64_t)k * sb;
        if (!cJSON_IsString(name) || strchr(name->valuestring, '/') || bytes != want_bytes) {
            shards_unmap(fs);
            return fail(err, errlen, "%s/%s: shard %d is listed badly", dir, SHARDS_INDEX, k);
        }
        snprintf(path, sizeof path, "%s/%s", dir, name->valuestring);
        if (!file_size_is(path, bytes, err, errlen) ||
            !map_file(path, (size_t)bytes, sh->tokens + (size_t)k * (size_t)sb, err, errlen)) {
            shards_unmap(fs);
            return 0;
        }
        k++;
    }
    madvise(sh->tokens, sh->tokens_len, MADV_RANDOM);  /* no read-ahead: the loader jumps */
    snprintf(path, sizeof path, "%s/offsets.bin", dir);
    sh->offsets_len = (size_t)(nseq + 1) * 8;
    if (!file_size_is(path, (int64_t)sh->offsets_len, err, errlen) ||
        !(sh->offsets = map_file(path, sh->offsets_len, NULL, err, errlen))) {
        sh->offsets_len = 0;
        shards_unmap(fs);
        return 0;
    }
    if (sh->offsets[0] != 0 || sh->offsets[nseq] != ntok) {
        shards_unmap(fs);
        return fail(err, errlen, "%s: offsets.bin does not match the index (it spans %lld..%lld, not 0..%lld); prep "
                    "the data again", dir, (long long)sh->offsets[0], (long long)sh->offsets[nseq], (long long)ntok);
    }
    if (ncl > 0) {
        snprintf(path, sizeof path, "%s/clusters.bin", dir);
        sh->clusters_len = (size_t)(2 * nseq + ncl + 1) * 8;
        if (!file_size_is(path, (int64_t)sh->clusters_len, err, errlen) ||
            !(sh->clusters = map_file(path, sh->clusters_len, NULL, err, errlen))) {
            sh->clusters_len = 0;
            shards_unmap(fs);
            return 0;
        }
        fs->cluster_of = sh->clusters;
        fs->cluster_off = sh->clusters + nseq;
        fs->cluster_members = sh->clusters + nseq + ncl + 1;
        fs->nclusters = ncl;
        if (fs->cluster_off[0] != 0 || fs->cluster_off[ncl] != nseq) {
            shards_unmap(fs);
            return fail(err, errlen, "%s: clusters.bin does not match the index; prep the data again", dir);
        }
    }
    fs->alphabet = a;
    fs->tokens = sh->tokens;
    fs->ntokens = ntok;
    fs->offsets = sh->offsets;
    fs->nseq = nseq;
    fs->nunknown = json_i64(root, "unknown", 0);
    fs->nempty = json_i64(root, "empty_records", 0);
    fs->nstops = json_i64(root, "stops", 0);
    fs->nfiles = 1;
    if (with_summary) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(root, "split");
        DataSummary *s = &fs->summary;
        if (!cJSON_IsObject(sp) ||
            !read_counts(cJSON_GetObjectItemCaseSensitive(sp, "train"), &s->nseq[0], &s->nresidues[0],
                         &s->nunknown[0], s->counts[0]) ||
            !read_counts(cJSON_GetObjectItemCaseSensitive(sp, "validation"), &s->nseq[1], &s->nresidues[1],
                         &s->nunknown[1], s->counts[1]) ||
            s->nseq[0] + s->nseq[1] != nseq) {
            shards_unmap(fs);
            return fail(err, errlen, "%s/%s: the split's statistics are missing or do not add up", dir, SHARDS_INDEX);
        }
        s->flip = json_i64(sp, "flip", -1);
        fs->has_summary = 1;
    }
    return 1;
}

int shards_open(const char *dir, const Alphabet *want, FastaSet *fs, char *err, size_t errlen)
{
    uint64_t ck;
    fasta_set_init(fs);
    cJSON *root = read_index(dir, &ck, err, errlen);
    if (!root)
        return 0;
    int ok = map_set(dir, root, want, fs, 1, err, errlen);
    cJSON_Delete(root);
    if (!ok) {
        fasta_set_init(fs);
        return 0;
    }
    fs->checksum = ck;
    return 1;
}

void shards_unmap(FastaSet *fs)
{
    Shards *sh = fs->shards;
    if (!sh)
        return;
    if (sh->tokens)
        munmap(sh->tokens, sh->tokens_len);
    if (sh->offsets)
        munmap(sh->offsets, sh->offsets_len);
    if (sh->clusters)
        munmap(sh->clusters, sh->clusters_len);
    if (sh->unknown)
        munmap(sh->unknown, sh->unknown_len);
    free(sh->dir);
    free(sh);
    fs->shards = NULL;
    fs->tokens = NULL;
    fs->offsets = NULL;
    fs->cluster_of = fs->cluster_off = fs->cluster_members = NULL;
}

_Noreturn void shards_damaged(const FastaSet *fs, int64_t id)
{
    const Shards *sh = fs->shards;
    if (id >= 0)
        fprintf(stderr, "error: %s: sequence %lld has an impossible index entry or tokens outside the alphabet: the "
                "shard files changed or were damaged after they were opened; prep the data again\n",
                sh ? sh->dir : "(data)", (long long)id);
    else
        fprintf(stderr, "error: %s: cluster %lld has an impossible entry in clusters.bin: prep the data again\n",
                sh ? sh->dir : "(data)", (long long)(-1 - id));
    exit(1);
}

void shards_release(const FastaSet *fs, int64_t units)
{
    Shards *sh = fs->shards;
    if (!sh)
        return;
    int64_t n = atomic_fetch_add(&sh->since_release, units) + units;
    if (n < RELEASE_EVERY)
        return;
    atomic_store(&sh->since_release, 0);
    /* MADV_DONTNEED on a shared read-only file map only unmaps the pages:
     * the page cache keeps them, a later read faults them back in */
    madvise(sh->tokens, sh->tokens_len, MADV_DONTNEED);
    madvise(sh->offsets, sh->offsets_len, MADV_DONTNEED);
    if (sh->clusters)
        madvise(sh->clusters, sh->clusters_len, MADV_DONTNEED);
    if (sh->unknown)
        madvise(sh->unknown, sh->unknown_len, MADV_DONTNEED);
}

const int64_t *shards_clusters(const FastaSet *fs, int64_t *nclusters)
{
    *nclusters = fs->nclusters;
    return fs->cluster_of;
}

static int hash_file(const char *path, uint64_t *out, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    enum { BUF = 1 << 20 };
    unsigned char *buf = malloc(BUF);
    if (!buf)
        die("out of memory");
    Hasher h;
    hasher_init(&h);
    size_t n;
    while ((n = fread(buf, 1, BUF, f)) > 0)
        hasher_add(&h, buf, n);
    int bad = ferror(f);
    fclose(f);
    free(buf);
    if (bad)
        return fail(err, errlen, "%s: read error", path);
    *out = hasher_end(&h);
    return 1;
}

static int verify_one(const char *dir, const cJSON *f, char *err, size_t errlen)
{
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(f, "file");
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(f, "hash");
    if (!cJSON_IsString(name) || !cJSON_IsString(want))
        return fail(err, errlen, "%s/%s: a file without a name or hash", dir, SHARDS_INDEX);
    char path[4096], hex[17];
    uint64_t h = 0;
    snprintf(path, sizeof path, "%s/%s", dir, name->valuestring);
    if (!hash_file(path, &h, err, errlen))
        return 0;
    hex64(hex, h);
    if (strcmp(hex, want->valuestring) != 0)
        return fail(err, errlen, "%s: its contents differ from what was prepped (hash %s, index %s); prep the data "
                    "again", path, hex, want->valuestring);
    return 1;
}

int shards_verify(const char *dir, char *err, size_t errlen)
{
    uint64_t ck;
    cJSON *root = read_index(dir, &ck, err, errlen);
    if (!root)
        return 0;
    FastaSet fs;
    fasta_set_init(&fs);
    int ok = map_set(dir, root, NULL, &fs, 1, err, errlen);
    fasta_set_free(&fs);
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(root, "shards")) ok = ok && verify_one(dir, f, err, errlen);
    const char *others[] = {"offsets", "ids", "cluster_table"};
    for (int i = 0; ok && i < ARRAY_LEN(others); i++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, others[i]);
        if (o)
            ok = verify_one(dir, o, err, errlen);
    }
    cJSON_Delete(root);
    return ok;
}

/* ---- writing ------------------------------------------------------------ */

/* An output file with its hash. */
typedef struct OutFile {
    FILE *f;
    char name[64];
    int64_t bytes;
    Hasher h;
} OutFile;

/* Cluster ids read from the TSV: an open-addressing table from member id to
 * cluster number. */
typedef struct ClusterMap {
    char **key;
    int64_t *val;
    int64_t cap, n;
    int64_t nclusters;
} ClusterMap;

typedef struct Prep {
    const PrepOptions *o;
    char dir[4096];
    OutFile shard, offsets, ids, cl, unk;
    cJSON *shard_list;
    int nshards;
    int64_t ntokens, nseq, nunknown, nempty, nstops;
    int64_t ninput_bytes;
    ClusterMap cm;
    int64_t nsingletons;         /* sequences missing from the TSV: clusters of their own */
    int64_t nclusters;           /* cluster numbers given out (TSV's + singletons) */
    int64_t *cluster_of_tsv;     /* [cm.nclusters]: the final number of each TSV cluster, -1 unseen */
    int64_t nmatched;            /* sequences found in the TSV */
    char example_miss[256];      /* the first id not found, for the message */
    char example_tsv[256];       /* the TSV's first member id */
} Prep;

static int out_open(Prep *p, OutFile *o, const char *name, char *err, size_t errlen)
{
    char path[4200];
    snprintf(o->name, sizeof o->name, "%s", name);
    snprintf(path, sizeof path, "%s/%s", p->dir, name);
    o->f = fopen(path, "wb");
    if (!o->f)
        return fail(err, errlen, "%s: cannot create: %s", path, strerror(errno));
    setvbuf(o->f, NULL, _IOFBF, 1 << 20);
    o->bytes = 0;
    hasher_init(&o->h);
    return 1;
}

static int out_write(Prep *p, OutFile *o, const void *data, size_t n, char *err, size_t errlen)
{
    if (n && fwrite(data, 1, n, o->f) != n)
        return fail(err, errlen, "%s/%s: cannot write: %s", p->dir, o->name, strerror(errno));
    hasher_add(&o->h, data, n);
    o->bytes += (int64_t)n;
    return 1;
}

/* Flushes, fsyncs and closes; returns the file's entry for the index. */
static cJSON *out_close(Prep *p, OutFile *o, char *err, size_t errlen)
{
    int ok = fflush(o->f) == 0 && fsync(fileno(o->f)) == 0;
    int e = errno;
    ok = fclose(o->f) == 0 && ok;
    o->f = NULL;
    if (!ok) {
        fail(err, errlen, "%s/%s: cannot write: %s", p->dir, o->name, strerror(e));
        return NULL;
    }
    char hex[17];
    hex64(hex, hasher_end(&o->h));
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "file", o->name);
    cJSON_AddNumberToObject(j, "bytes", (double)o->bytes);
    cJSON_AddStringToObject(j, "hash", hex);
    return j;
}

static int shard_next(Prep *p, char *err, size_t errlen)
{
    if (p->shard.f) {
        cJSON *j = out_close(p, &p->shard, err, errlen);
        if (!j)
            return 0;
        cJSON_AddItemToArray(p->shard_list, j);
    }
    char name[64];
    snprintf(name, sizeof name, "tokens-%05d.bin", p->nshards++);
    return out_open(p, &p->shard, name, err, errlen);
}

static int write_tokens(Prep *p, const uint8_t *t, int64_t n, char *err, size_t errlen)
{
    while (n > 0) {
        int64_t room = p->o->shard_bytes - p->shard.bytes;
        if (room == 0) {
            if (!shard_next(p, err, errlen))
                return 0;
            continue;
        }
        int64_t k = n < room ? n : room;
        if (!out_write(p, &p->shard, t, (size_t)k, err, errlen))
            return 0;
        t += k;
        n -= k;
    }
    return 1;
}

static uint64_t str_hash(const char *s, size_t n)
{
    return hash64(s, n);
}

static int64_t *cm_slot(ClusterMap *m, const char *k, size_t n, int *found)
{
    uint64_t h = str_hash(k, n);
    for (int64_t i = (int64_t)(h & (uint64_t)(m->cap - 1));; i = (i + 1) & (m->cap - 1)) {
        if (!m->key[i]) {
            *found = 0;
            return &m->val[i];
        }
        if (strlen(m->key[i]) == n && memcmp(m->key[i], k, n) == 0) {
            *found = 1;
            return &m->val[i];
        }
    }
}

static void cm_grow(ClusterMap *m)
{
    ClusterMap old = *m;
    m->cap = old.cap ? old.cap * 2 : 1024;
    m->key = calloc((size_t)m->cap, sizeof *m->key);
    m->val = calloc((size_t)m->cap, sizeof *m->val);
    if (!m->key || !m->val)
        die("out of memory");
    for (int64_t i = 0; i < old.cap; i++) {
        if (old.key[i]) {
            int found;
            uint64_t h = str_hash(old.key[i], strlen(old.key[i]));
            int64_t j = (int64_t)(h & (uint64_t)(m->cap - 1));
            while (m->key[j])
                j = (j + 1) & (m->cap - 1);
            m->key[j] = old.key[i];
            m->val[j] = old.val[i];
            (void)found;
        }
    }
    free(old.key);
    free(old.val);
}

/* Returns the value stored for k, inserting v when absent; *inserted says which. */
static int64_t cm_get_or_add(ClusterMap *m, const char *k, size_t n, int64_t v, int *inserted)
{
    if ((m->n + 1) * 2 > m->cap)
        cm_grow(m);
    int found;
    int64_t *slot = cm_slot(m, k, n, &found);
    *inserted = !found;
    if (found)
        return *slot;
    int64_t i = slot - m->val;
    char *key = malloc(n + 1);
    if (!key)
        die("out of memory");
    memcpy(key, k, n);
    key[n] = '\0';
    m->key[i] = key;
    m->val[i] = v;
    m->n++;
    return v;
}

static void cm_free(ClusterMap *m)
{
    for (int64_t i = 0; i < m->cap; i++)
        free(m->key[i]);
    free(m->key);
    free(m->val);
    memset(m, 0, sizeof *m);
}

/* Reads a two-column TSV (representative TAB member), as `mmseqs createtsv`
 * writes it: every member, the representative included, gets its
 * representative's cluster number. */
static int read_clusters(Prep *p, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    ClusterMap reps = {0};
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t lineno = 0;
    int ok = 1;
    while (ok && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        if (memchr(line, '\0', (size_t)len)) {
            ok = fail(err, errlen, "%s:%lld: error: binary data: not a cluster TSV", path, (long long)lineno);
            break;
        }
        char *tab = strchr(line, '\t');
        if (!tab || strchr(tab + 1, '\t') || tab == line || tab[1] == '\0') {
            ok = fail(err, errlen, "%s:%lld: error: expected two tab-separated columns (representative, member), "
                      "as `mmseqs createtsv` writes", path, (long long)lineno);
            break;
        }
        int ins;
        int64_t c = cm_get_or_add(&reps, line, (size_t)(tab - line), reps.nclusters, &ins);
        if (ins)
            reps.nclusters++;
        if (!p->example_tsv[0])
            snprintf(p->example_tsv, sizeof p->example_tsv, "%.200s", tab + 1);
        int64_t got = cm_get_or_add(&p->cm, tab + 1, strlen(tab + 1), c, &ins);
        if (!ins && got != c) {
            ok = fail(err, errlen, "%s:%lld: error: member '%s' is already in another cluster", path,
                      (long long)lineno, tab + 1);
            break;
        }
    }
    if (ok && ferror(f))
        ok = fail(err, errlen, "%s: read error", path);
    if (ok && p->cm.n == 0)
        ok = fail(err, errlen, "%s: no clusters (an empty file)", path);
    free(line);
    fclose(f);
    p->cm.nclusters = reps.nclusters;
    cm_free(&reps);
    if (ok) {
        p->cluster_of_tsv = malloc((size_t)p->cm.nclusters * sizeof(int64_t));
        if (!p->cluster_of_tsv)
            die("out of memory");
        for (int64_t i = 0; i < p->cm.nclusters; i++)
            p->cluster_of_tsv[i] = -1;
    }
    return ok;
}

/* The FASTA reader's sink: complete sequences to the files. */
static int prep_sink(void *ctx, FastaSet *fs, char *err, size_t errlen)
{
    Prep *p = ctx;
    int64_t end = fs->offsets[fs->nseq];
    if (!write_tokens(p, fs->tokens, end, err, errlen))
        return 0;
    int64_t offs[1024];
    int k = 0;
    for (int64_t i = 1; i <= fs->nseq; i++) {
        offs[k++] = p->ntokens + fs->offsets[i];
        if (k == ARRAY_LEN(offs) || i == fs->nseq) {
            if (!out_write(p, &p->offsets, offs, (size_t)k * 8, err, errlen))
                return 0;
            k = 0;
        }
    }
    /* the ids: up to the last complete one (a header being read has no newline yet) */
    const char *nm = fs->names, *last = fs->names_len ? memrchr(fs->names, '\n', (size_t)fs->names_len) : NULL;
    size_t nlen = last ? (size_t)(last - nm + 1) : 0;
    if (!out_write(p, &p->ids, nm, nlen, err, errlen))
        return 0;
    if (p->o->clusters) {
        const char *s = nm;
        for (int64_t i = 0; i < fs->nseq; i++) {
            const char *e = memchr(s, '\n', (size_t)(nm + nlen - s));
            int found;
            int64_t *slot = cm_slot(&p->cm, s, (size_t)(e - s), &found), c;
            if (!found) {
                /* mmseqs names a UniProt record "db|ACCESSION|NAME ..." by its accession */
                const char *b1 = memchr(s, '|', (size_t)(e - s)), *b2 = b1 ? memchr(b1 + 1, '|', (size_t)(e - b1 - 1)) : NULL;
                if (b2 && b2 > b1 + 1)
                    slot = cm_slot(&p->cm, b1 + 1, (size_t)(b2 - b1 - 1), &found);
            }
            if (found)
                p->nmatched++;
            else if (!p->example_miss[0])
                snprintf(p->example_miss, sizeof p->example_miss, "%.*s", (int)(e - s < 200 ? e - s : 200), s);
            if (found) {
                int64_t t = *slot;
                if (p->cluster_of_tsv[t] < 0)
                    p->cluster_of_tsv[t] = p->nclusters++;
                c = p->cluster_of_tsv[t];
            } else {
                c = p->nclusters++;
                p->nsingletons++;
            }
            if (!out_write(p, &p->cl, &c, 8, err, errlen))
                return 0;
            s = e + 1;
        }
    }
    if (!out_write(p, &p->unk, fs->unknown, (size_t)fs->nseq * 8, err, errlen))
        return 0;
    p->ntokens += end;
    p->nseq += fs->nseq;
    return 1;
}

/* Removes a directory this module wrote (only the files it writes). */
static void remove_set(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (!strncmp(n, "tokens-", 7) || !strcmp(n, "offsets.bin") || !strcmp(n, "ids.txt") ||
            !strcmp(n, "clusters.bin") || !strcmp(n, "cluster_of.tmp") || !strcmp(n, "unknown.tmp") || !strcmp(n, SHARDS_INDEX) ||
            !strcmp(n, SHARDS_INDEX ".tmp")) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", dir, n);
            unlink(p);
        }
    }
    closedir(d);
    rmdir(dir);
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

static cJSON *counts_json(const DataSummary *s, int k)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "sequences", (double)s->nseq[k]);
    cJSON_AddNumberToObject(o, "residues", (double)s->nresidues[k]);
    cJSON_AddNumberToObject(o, "unknown", (double)s->nunknown[k]);
    cJSON *c = cJSON_AddArrayToObject(o, "counts");
    for (int t = 0; t < 64; t++)
        cJSON_AddItemToArray(c, cJSON_CreateNumber((double)s->counts[k][t]));
    return o;
}

/* clusters.bin = cluster_of [nseq] | cluster_off [nclusters + 1] | members [nseq], from the per-sequence numbers
 * written while streaming (cluster_of.tmp): a counting sort through a map of the output file. */
static cJSON *write_cluster_table(Prep *p, char *err, size_t errlen)
{
    char src[4200], dst[4200];
    snprintf(src, sizeof src, "%s/cluster_of.tmp", p->dir);
    snprintf(dst, sizeof dst, "%s/clusters.bin", p->dir);
    int64_t n = p->nseq, nc = p->nclusters;
    size_t len = (size_t)(2 * n + nc + 1) * 8;
    int fd = open(dst, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        fail(err, errlen, "%s: cannot create: %s", dst, strerror(errno));
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    int64_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        fail(err, errlen, "%s: cannot map: %s", dst, strerror(errno));
        return NULL;
    }
    FILE *f = fopen(src, "rb");
    if (!f || fread(m, 8, (size_t)n, f) != (size_t)n) {
        if (f)
            fclose(f);
        munmap(m, len);
        fail(err, errlen, "%s: cannot read back", src);
        return NULL;
    }
    fclose(f);
    unlink(src);
    int64_t *of = m, *off = m + n, *mem = m + n + nc + 1;
    memset(off, 0, (size_t)(nc + 1) * 8);
    for (int64_t i = 0; i < n; i++)
        off[of[i] + 1]++;
    for (int64_t c = 0; c < nc; c++)
        off[c + 1] += off[c];
    /* fill: a cursor per cluster, kept in mem's own slots is not possible; use off shifted */
    for (int64_t i = 0; i < n; i++)
        mem[off[of[i]]++] = i;
    for (int64_t c = nc; c > 0; c--)
        off[c] = off[c - 1];
    off[0] = 0;
    Hasher h;
    hasher_init(&h);
    hasher_add(&h, m, len);
    int ok = msync(m, len, MS_SYNC) == 0;
    munmap(m, len);
    if (!ok) {
        fail(err, errlen, "%s: cannot write: %s", dst, strerror(errno));
        return NULL;
    }
    char hex[17];
    hex64(hex, hasher_end(&h));
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "file", "clusters.bin");
    cJSON_AddNumberToObject(j, "bytes", (double)len);
    cJSON_AddStringToObject(j, "hash", hex);
    return j;
}

/* A lock on a directory for as long as the fd stays open: held by the prep
 * writing it, so a second prep of the same DIR neither removes nor shares it. */
static int lock_dir(const char *dir, int *fd_out)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return 0;
    }
    *fd_out = fd;
    return 1;
}

int shards_prep(char *const *inputs, int n, const PrepOptions *opt, char *err, size_t errlen)
{
    PrepOptions o = *opt;
    char outbuf[4096];
    snprintf(outbuf, sizeof outbuf, "%s", o.out);
    for (size_t k = strlen(outbuf); k > 1 && outbuf[k - 1] == '/'; k--)
        outbuf[k - 1] = '\0';  /* "dir/" is dir: its .partial must be a sibling, not a child */
    o.out = outbuf;
    if (o.shard_bytes <= 0)
        o.shard_bytes = SHARDS_DEFAULT_BYTES;
    if (o.shard_bytes % SHARDS_ALIGN)
        return fail(err, errlen, "the shard size %lld is not a multiple of %d bytes", (long long)o.shard_bytes,
                    SHARDS_ALIGN);
    struct stat st;
    if (stat(o.out, &st) == 0 && !o.force)
        return fail(err, errlen, "%s already exists%s; remove it, choose another name, or pass --force to replace "
                    "it", o.out, shards_is_dir(o.out) ? " (a shard directory)" : "");
    if (stat(o.out, &st) == 0 && !shards_is_dir(o.out))
        return fail(err, errlen, "%s exists and is not a shard directory: --force replaces only shard directories",
                    o.out);
    Prep p = {.o = &o};
    int wrote = snprintf(p.dir, sizeof p.dir, "%s.partial", o.out);
    if (wrote < 0 || (size_t)wrote >= sizeof p.dir - 64)
        return fail(err, errlen, "%s: the path is too long", o.out);
    int lockfd = -1;
    if (stat(p.dir, &st) == 0) {
        /* an interrupted prep: nothing in it was ever a finished set; a running one holds its lock */
        if (!lock_dir(p.dir, &lockfd))
            return fail(err, errlen, "%s: another moec prep is writing it (or it cannot be opened); wait for it or "
                        "choose another output", p.dir);
        close(lockfd);
        lockfd = -1;
        if (!o.quiet)
            printf("prep: removing %s, left by an interrupted prep\n", p.dir);
        remove_set(p.dir);
        if (stat(p.dir, &st) == 0)
            return fail(err, errlen, "%s: left by an interrupted prep but holds other files: remove it", p.dir);
    }
    if (mkdir(p.dir, 0755) != 0)
        return fail(err, errlen, "%s: cannot create: %s", p.dir, strerror(errno));
    if (!lock_dir(p.dir, &lockfd)) {
        rmdir(p.dir);
        return fail(err, errlen, "%s: another moec prep took it", p.dir);
    }
    double t0 = wall_seconds();
    int ok = 1;
    p.shard_list = cJSON_CreateArray();
    if (o.clusters)
        ok = read_clusters(&p, o.clusters, err, errlen);
    ok = ok && shard_next(&p, err, errlen) && out_open(&p, &p.offsets, "offsets.bin", err, errlen) &&
         out_open(&p, &p.ids, "ids.txt", err, errlen) && out_open(&p, &p.unk, "unknown.tmp", err, errlen) &&
         (!o.clusters || out_open(&p, &p.cl, "cluster_of.tmp", err, errlen));
    int64_t zero = 0;
    ok = ok && out_write(&p, &p.offsets, &zero, 8, err, errlen);
    FastaSet fs;
    fasta_set_init(&fs);
    fs.keep_names = 1;
    for (int i = 0; ok && i < n; i++) {
        struct stat in;
        if (strcmp(inputs[i], "-") != 0 && stat(inputs[i], &in) == 0)
            p.ninput_bytes += (int64_t)in.st_size;
        ok = fasta_read_stream(inputs[i], o.alphabet, &fs, (int64_t)4 << 20, prep_sink, &p, err, errlen);
    }
    p.nunknown = fs.nunknown;
    p.nempty = fs.nempty;
    p.nstops = fs.nstops;
    fasta_set_free(&fs);
    cJSON *root = cJSON_CreateObject(), *j;
    cJSON_AddStringToObject(root, "format", SHARDS_FORMAT);
    cJSON_AddStringToObject(root, "alphabet", o.alphabet->name);
    cJSON_AddNumberToObject(root, "sequences", (double)p.nseq);
    cJSON_AddNumberToObject(root, "tokens", (double)p.ntokens);
    cJSON_AddNumberToObject(root, "shard_bytes", (double)o.shard_bytes);
    if (ok && p.shard.bytes == 0 && p.nseq > 0) {
        /* the tokens ended exactly at a shard's end: no empty last shard */
        char path[4200];
        fclose(p.shard.f);
        p.shard.f = NULL;
        snprintf(path, sizeof path, "%s/%s", p.dir, p.shard.name);
        unlink(path);
        p.nshards--;
    } else if (ok && (j = out_close(&p, &p.shard, err, errlen))) {
        cJSON_AddItemToArray(p.shard_list, j);
    } else if (ok) {
        ok = 0;
    }
    cJSON_AddItemToObject(root, "shards", p.shard_list);
    if (ok && (j = out_close(&p, &p.offsets, err, errlen)))
        cJSON_AddItemToObject(root, "offsets", j);
    else
        ok = 0;
    if (ok && (j = out_close(&p, &p.ids, err, errlen)))
        cJSON_AddItemToObject(root, "ids", j);
    else
        ok = 0;
    if (ok && o.clusters && p.nmatched == 0)
        ok = fail(err, errlen, "%s: no sequence of the inputs is in it: the FASTA's ids look like '%s', the TSV's "
                  "like '%s' (a sequence's id is its header's first word, or for db|ACCESSION|NAME headers the "
                  "accession)", o.clusters, p.example_miss, p.example_tsv);
    if (ok && o.clusters) {
        ok = (j = out_close(&p, &p.cl, err, errlen)) != NULL;
        cJSON_Delete(j);
        if (ok && (j = write_cluster_table(&p, err, errlen))) {
            cJSON_AddItemToObject(root, "cluster_table", j);
            cJSON_AddNumberToObject(root, "clusters", (double)p.nclusters);
            cJSON_AddNumberToObject(root, "clusters_tsv", (double)p.cm.nclusters);
            cJSON_AddNumberToObject(root, "singletons", (double)p.nsingletons);
            cJSON_AddStringToObject(root, "cluster_file", o.clusters);
        } else {
            ok = 0;
        }
    }
    if (ok) {
        ok = (j = out_close(&p, &p.unk, err, errlen)) != NULL;
        cJSON_Delete(j);
    }
    OutFile *outs[] = {&p.shard, &p.offsets, &p.ids, &p.cl, &p.unk};
    for (int i = 0; i < ARRAY_LEN(outs); i++)
        if (outs[i]->f)
            fclose(outs[i]->f);
    cJSON_AddNumberToObject(root, "unknown", (double)p.nunknown);
    cJSON_AddNumberToObject(root, "empty_records", (double)p.nempty);
    cJSON_AddNumberToObject(root, "stops", (double)p.nstops);
    cJSON *ins = cJSON_AddArrayToObject(root, "inputs");
    for (int i = 0; i < n; i++)
        cJSON_AddItemToArray(ins, cJSON_CreateString(inputs[i]));
    cJSON_AddStringToObject(root, "moec_version", moec_version());
    /* the split's statistics, counted over the written files as the loader will see them */
    if (ok) {
        FastaSet w;
        fasta_set_init(&w);
        ok = map_set(p.dir, root, o.alphabet, &w, 0, err, errlen);
        char upath[4200];
        snprintf(upath, sizeof upath, "%s/unknown.tmp", p.dir);
        size_t ulen = (size_t)p.nseq * 8;
        void *um = ok ? map_file(upath, ulen, NULL, err, errlen) : NULL;
        ok = ok && um;
        if (ok) {
            DataSummary s;
            /* each sequence's unknown characters, as the reader counted them; its pages dropped with the others' */
            ((Shards *)w.shards)->unknown = um;
            ((Shards *)w.shards)->unknown_len = ulen;
            w.unknown = um;
            data_summary(&w, DATA_VAL_FRACTION, &s);
            w.unknown = NULL;
            unlink(upath);
            cJSON *sp = cJSON_AddObjectToObject(root, "split");
            cJSON_AddNumberToObject(sp, "val_fraction", DATA_VAL_FRACTION);
            cJSON_AddStringToObject(sp, "unit", w.cluster_of ? "cluster" : "sequence");
            cJSON_AddNumberToObject(sp, "flip", (double)s.flip);
            cJSON_AddItemToObject(sp, "train", counts_json(&s, 0));
            cJSON_AddItemToObject(sp, "validation", counts_json(&s, 1));
        }
        fasta_set_free(&w);
    }
    char hex[17];
    hex64(hex, index_checksum(root));
    cJSON_AddStringToObject(root, "checksum", hex);
    if (ok) {
        /* the index last, fsynced like the others before the directory is renamed */
        char *txt = cJSON_Print(root);
        OutFile idx = {0};
        ok = out_open(&p, &idx, SHARDS_INDEX, err, errlen) && out_write(&p, &idx, txt, strlen(txt), err, errlen);
        if (idx.f) {
            cJSON *j2 = out_close(&p, &idx, err, errlen);
            ok = ok && j2;
            cJSON_Delete(j2);
        }
        free(txt);
    }
    cm_free(&p.cm);
    free(p.cluster_of_tsv);
    if (ok) {
        fsync_dir(p.dir);
        char old[4200];
        snprintf(old, sizeof old, "%s.replaced", o.out);
        int had = stat(o.out, &st) == 0;
        if (had)
            remove_set(old);  /* left by a --force that was interrupted after moving the old set aside */
        if (had && rename(o.out, old) != 0)
            ok = fail(err, errlen, "%s: cannot move aside: %s", o.out, strerror(errno));
        if (ok && rename(p.dir, o.out) != 0)
            ok = fail(err, errlen, "%s: cannot rename to %s: %s", p.dir, o.out, strerror(errno));
        if (ok && had)
            remove_set(old);
        char parent[4200];
        snprintf(parent, sizeof parent, "%s", o.out);
        char *slash = strrchr(parent, '/');
        if (slash)
            *slash = '\0';
        fsync_dir(slash ? (parent[0] ? parent : "/") : ".");
    }
    if (!ok)
        remove_set(p.dir);
    close(lockfd);
    if (!ok) {
        cJSON_Delete(root);
        return 0;
    }
    double dt = wall_seconds() - t0;
    if (!o.quiet) {
        char a[32], b[32], c[32];
        fmt_count(a, sizeof a, (double)p.nseq);
        fmt_count(b, sizeof b, (double)p.ntokens);
        fmt_bytes(c, sizeof c, (double)p.ninput_bytes);
        printf("prep: %s: %s sequences, %s residues (%s), %d shard%s, %lld unknown characters, %lld empty records "
               "skipped; %s of input in %.2f s (%.0f MB/s)\n",
               o.out, a, b, o.alphabet->name, p.nshards, p.nshards == 1 ? "" : "s", (long long)p.nunknown,
               (long long)p.nempty, c, dt, dt > 0 ? (double)p.ninput_bytes / 1e6 / dt : 0.0);
        if (o.clusters)
            printf("prep: clusters: %lld (%lld from %s, %lld sequences not in it made clusters of their own)\n",
                   (long long)p.nclusters, (long long)(p.nclusters - p.nsingletons), o.clusters,
                   (long long)p.nsingletons);
        printf("prep: index checksum %s\n", hex);
    }
    cJSON_Delete(root);
    return 1;
}
