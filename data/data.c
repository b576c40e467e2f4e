/* data.c - alphabets, the FASTA reader, the train/validation split and the
 * packing loader declared in data.h.
 *
 * The reader is a byte-level state machine fed by gzread() in fixed chunks,
 * so it never holds a whole line: a 100 MB single-line sequence costs only
 * the tokens it produces. The loader never materialises its token stream
 * either; the stream is a pure function of (seed, epoch, position), which is
 * what lets a handful of integers in DataLoaderState restore it exactly. */
#include "data.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../util/util.h"
#include "shards.h"

/* ---- alphabets ---------------------------------------------------------- */

static const char *const protein_tokens[33] = {
    "<cls>", "<pad>", "<eos>", "<unk>", "L", "A", "G", "V", "S", "E", "R", "T", "I", "D", "P", "K", "Q",
    "N",     "F",     "Y",     "M",     "H", "W", "C", "X", "B", "U", "Z", "O", ".", "-", "<null_1>", "<mask>",
};

static const char *const dna_tokens[9] = {"<pad>", "<bos>", "<eos>", "<mask>", "A", "C", "G", "T", "N"};

/* A letter in both cases ('a' is 'A' + 32). */
#define LETTER(c, id) [c] = (id), [(c) + 32] = (id)

static const Alphabet protein_alphabet = {
    .kind = ALPHABET_PROTEIN,
    .name = "protein",
    .vocab = 33,
    .pad = 1, .bos = 0, .eos = 2, .mask = 32, .unk = 24,
    .random_first = 4, .random_count = 20,
    .tokens = protein_tokens,
    .map = {
        LETTER('L', 4),  LETTER('A', 5),  LETTER('G', 6),  LETTER('V', 7),  LETTER('S', 8),
        LETTER('E', 9),  LETTER('R', 10), LETTER('T', 11), LETTER('I', 12), LETTER('D', 13),
        LETTER('P', 14), LETTER('K', 15), LETTER('Q', 16), LETTER('N', 17), LETTER('F', 18),
        LETTER('Y', 19), LETTER('M', 20), LETTER('H', 21), LETTER('W', 22), LETTER('C', 23),
        LETTER('X', 24), LETTER('B', 25), LETTER('U', 26), LETTER('Z', 27), LETTER('O', 28),
        /* alignment gaps are ESM-2 tokens, so aligned FASTA keeps them */
        ['.'] = 29, ['-'] = 30,
    },
};

static const Alphabet dna_alphabet = {
    .kind = ALPHABET_DNA,
    .name = "dna",
    .vocab = 9,
    .pad = 0, .bos = 1, .eos = 2, .mask = 3, .unk = 8,
    .random_first = 4, .random_count = 4,
    .tokens = dna_tokens,
    .map = {
        LETTER('A', 4), LETTER('C', 5), LETTER('G', 6), LETTER('T', 7), LETTER('N', 8),
        /* RNA files (16S sets) are read as DNA: uracil is thymine, not unknown */
        LETTER('U', 7),
    },
};

const Alphabet *alphabet_get(AlphabetKind kind)
{
    switch (kind) {
    case ALPHABET_PROTEIN:
        return &protein_alphabet;
    case ALPHABET_DNA:
        return &dna_alphabet;
    }
    die("alphabet_get: bad kind %d", (int)kind);
}

int alphabet_lookup(const char *name)
{
    if (name && strcmp(name, "protein") == 0)
        return ALPHABET_PROTEIN;
    if (name && strcmp(name, "dna") == 0)
        return ALPHABET_DNA;
    return -1;
}

int alphabet_encode(const Alphabet *a, int c)
{
    if (c < 0 || c > 255)
        return -1;
    int id = a->map[c];
    return id ? id : -1;
}

int alphabet_token_id(const Alphabet *a, const char *token)
{
    for (int i = 0; i < a->vocab; i++)
        if (strcmp(a->tokens[i], token) == 0)
            return i;
    return -1;
}

/* ---- hashing and the PRNG ----------------------------------------------- */

/* splitmix64's output function: a bijective 64-bit mixer. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Each use of randomness has its own domain, so e.g. the split of sequence i
 * is independent of its crop offset. Never renumber: it changes every run. */
enum { DOM_SPLIT = 1, DOM_SHUFFLE, DOM_CROP, DOM_MASK, DOM_FINGERPRINT, DOM_MEMBER };

static uint64_t hash4(uint64_t seed, uint64_t domain, uint64_t a, uint64_t b)
{
    return mix64(mix64(mix64(seed ^ mix64(domain)) ^ a) ^ b);
}

static double unit_of(uint64_t h)
{
    return (double)(h >> 11) * 0x1.0p-53;
}

static uint64_t rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256** (Blackman and Vigna). */
static uint64_t rng_next(uint64_t s[4])
{
    uint64_t r = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return r;
}

static void rng_seed(uint64_t s[4], uint64_t seed)
{
    for (uint64_t i = 0; i < 4; i++)
        s[i] = mix64(seed + i * 0x9e3779b97f4a7c15ull);
    if (!(s[0] | s[1] | s[2] | s[3]))  /* the one state xoshiro cannot leave */
        s[0] = 1;
}

static double rng_unit(uint64_t s[4])
{
    return unit_of(rng_next(s));
}

/* Uniform in [0, n) without modulo bias. */
static uint64_t rng_below(uint64_t s[4], uint64_t n)
{
    uint64_t min = -n % n;
    for (;;) {
        uint64_t r = rng_next(s);
        if (r >= min)
            return r % n;
    }
}

/* ---- FASTA -------------------------------------------------------------- */

void fasta_set_init(FastaSet *fs)
{
    memset(fs, 0, sizeof *fs);
}

void fasta_set_free(FastaSet *fs)
{
    if (fs->shards) {
        shards_unmap(fs);
    } else {
        free(fs->tokens);
        free(fs->offsets);
        free(fs->unknown);
    }
    free(fs->names);
    memset(fs, 0, sizeof *fs);
}

/* Grows *p to hold at least need elements; 0 when that cannot be allocated
 * (a data file larger than memory is the user's problem, not a bug). */
static int grow(void **p, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return 1;
    int64_t c = *cap ? *cap : 1024;
    while (c < need) {
        if (c > INT64_MAX / 2)
            return 0;
        c *= 2;
    }
    if ((uint64_t)c > SIZE_MAX / elem)
        return 0;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return 0;
    *p = q;
    *cap = c;
    return 1;
}

typedef struct FastaParse {
    const char *path;
    const Alphabet *a;
    FastaSet *fs;
    char *err;
    size_t errlen;
    int64_t line;           /* 1-based number of the line being read */
    int bol;                /* the next byte begins a line */
    int in_header;          /* the current line is a '>' line */
    int in_record;          /* a header has been seen in this file */
    int last_star;          /* the last token came from a protein '*' */
    int64_t rec_unknown;    /* unknown characters of the current record */
    int64_t first_header_line;
    int64_t nrecords;
    int64_t nseq_before;    /* fs->nseq when this file began */
    int64_t flushed;        /* sequences handed to the sink (streaming) */
    int64_t name_start;     /* fs->names_len when the current record's header began */
    int64_t names_done;     /* fs->names_len after the last stored sequence's id */
    int name_open;          /* still reading the header's first word */
    int failed;
} FastaParse;

static int parse_error(FastaParse *p, int64_t line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int parse_error(FastaParse *p, int64_t line, const char *fmt, ...)
{
    p->failed = 1;
    if (!p->err || p->errlen == 0)
        return 0;
    int n = line > 0 ? snprintf(p->err, p->errlen, "%s:%" PRId64 ": error: ", p->path, line)
                     : snprintf(p->err, p->errlen, "%s: error: ", p->path);
    if (n >= 0 && (size_t)n < p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return 0;
}

static int is_blank(int c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Bytes that do not occur in a text file: control characters other than
 * white space. A NUL or an ESC in a FASTA file means it is something else. */
static int is_binary(int c)
{
    return (c < 0x20 && !is_blank(c) && c != '\n') || c == 0x7f;
}

/* Closes the current record: drops a protein's final '*' stop symbol, then
 * stores the sequence, or counts it as empty. */
static int record_end(FastaParse *p)
{
    FastaSet *fs = p->fs;
    if (!p->in_record)
        return 1;
    if (p->last_star) {
        fs->ntokens--;
        p->rec_unknown--;
        fs->nstops++;
        p->last_star = 0;
    }
    int64_t start = fs->nseq ? fs->offsets[fs->nseq] : 0;
    if (fs->ntokens == start) {
        fs->nempty++;
        p->rec_unknown = 0;
        if (fs->keep_names)
            fs->names_len = p->name_start;
        return 1;
    }
    if (fs->keep_names) {
        if (!grow((void **)&fs->names, &fs->names_cap, fs->names_len + 1, 1))
            return parse_error(p, p->line, "out of memory after %" PRId64 " sequences", fs->nseq);
        fs->names[fs->names_len++] = '\n';
        p->names_done = fs->names_len;
    }
    if (fs->nseq + 2 > fs->seq_cap) {
        /* offsets[] and unknown[] share seq_cap */
        int64_t cap = fs->seq_cap;
        if (!grow((void **)&fs->offsets, &cap, fs->nseq + 2, sizeof(int64_t)))
            return parse_error(p, p->line, "out of memory after %" PRId64 " sequences", fs->nseq);
        void *u = realloc(fs->unknown, (size_t)cap * sizeof(int64_t));
        if (!u)
            return parse_error(p, p->line, "out of memory after %" PRId64 " sequences", fs->nseq);
        fs->unknown = u;
        fs->seq_cap = cap;
    }
    fs->offsets[0] = 0;
    fs->offsets[fs->nseq + 1] = fs->ntokens;
    fs->unknown[fs->nseq] = p->rec_unknown;
    fs->nunknown += p->rec_unknown;
    fs->nseq++;
    p->rec_unknown = 0;
    return 1;
}

/* The first non-blank line of the file, line[0..n) as far as this chunk
 * holds it, does not start with '>': say what it looks like. */
static int not_fasta(FastaParse *p, const unsigned char *line, size_t n)
{
    int seq_like = 1;
    for (size_t i = 0; i < n; i++) {
        int c = line[i];
        if (is_binary(c) || c >= 0x80)
            return parse_error(p, p->line, "not a FASTA file: binary data (byte 0x%02x)", c);
        seq_like &= is_blank(c) || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '*' || c == '-' ||
                    c == '.';
    }
    if (seq_like)
        return parse_error(p, p->line, "sequence data before the first header (a line starting with '>')");
    return parse_error(p, p->line, "not a FASTA file: the first non-blank line does not start with '>'");
}

static int parse_chunk(FastaParse *p, const unsigned char *buf, size_t n)
{
    FastaSet *fs = p->fs;
    const Alphabet *a = p->a;
    size_t i = 0;
    while (i < n) {
        if (p->bol) {
            p->bol = 0;
            p->line++;
            p->in_header = buf[i] == '>';
            if (p->in_header) {
                if (!record_end(p))
                    return 0;
                if (!p->in_record)
                    p->first_header_line = p->line;
                p->in_record = 1;
                p->nrecords++;
                p->name_start = fs->names_len;
                p->name_open = fs->keep_names;
                i++;
                continue;
            }
        }
        const unsigned char *nl = memchr(buf + i, '\n', n - i);
        size_t end = nl ? (size_t)(nl - buf) : n;
        if (p->in_header) {
            size_t h = i;
            for (; i < end; i++)
                if (is_binary(buf[i]))
                    return parse_error(p, p->line, "binary data (byte 0x%02x) in a header line", buf[i]);
            if (p->name_open) {
                /* the id: the header's first word, up to the first blank */
                size_t k = h;
                while (k < end && !is_blank(buf[k]))
                    k++;
                int64_t take = (int64_t)(k - h), room = FASTA_NAME_MAX - (fs->names_len - p->name_start);
                if (take > room)
                    take = room;
                if (take > 0) {
                    if (!grow((void **)&fs->names, &fs->names_cap, fs->names_len + take + 1, 1))
                        return parse_error(p, p->line, "out of memory after %" PRId64 " sequences", fs->nseq);
                    memcpy(fs->names + fs->names_len, buf + h, (size_t)take);
                    fs->names_len += take;
                }
                if (k < end || nl)
                    p->name_open = 0;
            }
        } else if (!p->in_record) {
            for (; i < end; i++)
                if (!is_blank(buf[i]))
                    return not_fasta(p, buf + i, end - i);
        } else {
            if (!grow((void **)&fs->tokens, &fs->tokens_cap, fs->ntokens + (int64_t)(end - i), 1))
                return parse_error(p, p->line, "out of memory after %" PRId64 " residues", fs->ntokens);
            uint8_t *out = fs->tokens;
            int64_t nt = fs->ntokens;
            for (; i < end; i++) {
                int c = buf[i];
                int id = a->map[c];
                if (id) {
                    out[nt++] = (uint8_t)id;
                    p->last_star = 0;
                } else if (is_blank(c)) {
                    continue;
                } else if (is_binary(c) || c >= 0x80) {
                    fs->ntokens = nt;
                    return parse_error(p, p->line, "byte 0x%02x in a sequence line: binary data, not FASTA", c);
                } else {
                    out[nt++] = (uint8_t)a->unk;
                    p->rec_unknown++;
                    p->last_star = c == '*' && a->kind == ALPHABET_PROTEIN;
                }
            }
            fs->ntokens = nt;
        }
        if (nl) {
            p->bol = 1;
            i = end + 1;
        }
    }
    return 1;
}

/* Reports what gzerror() says went wrong, if anything. */
static int check_gz(FastaParse *p, gzFile gz)
{
    int errnum = Z_OK;
    const char *msg = gzerror(gz, &errnum);
    /* zlib prefixes its message with the path, which ours already has */
    size_t plen = strlen(p->path);
    if (strncmp(msg, p->path, plen) == 0 && strncmp(msg + plen, ": ", 2) == 0)
        msg += plen + 2;
    switch (errnum) {
    case Z_OK:
    case Z_STREAM_END:
        return 1;
    case Z_ERRNO:
        return parse_error(p, p->line, "read error: %s", strerror(errno));
    case Z_BUF_ERROR:
        return parse_error(p, p->line, "compressed data ends early (%s): the file is truncated", msg);
    default:
        return parse_error(p, p->line, "corrupt compressed data (%s)", msg);
    }
}

/* Hands the complete sequences to the sink and keeps the record being read. */
static int flush_sink(FastaParse *p, FastaSink sink, void *ctx)
{
    FastaSet *fs = p->fs;
    if (fs->nseq == 0)
        return 1;
    if (!sink(ctx, fs, p->err, p->errlen)) {
        p->failed = 1;
        return 0;
    }
    int64_t done = fs->offsets[fs->nseq];
    memmove(fs->tokens, fs->tokens + done, (size_t)(fs->ntokens - done));
    fs->ntokens -= done;
    p->flushed += fs->nseq;
    fs->nseq = 0;
    fs->offsets[0] = 0;
    if (fs->keep_names) {
        memmove(fs->names, fs->names + p->names_done, (size_t)(fs->names_len - p->names_done));
        fs->names_len -= p->names_done;
        p->name_start -= p->names_done;
        p->names_done = 0;
    }
    return 1;
}

static int fasta_read_impl(const char *path, const Alphabet *a, FastaSet *fs, int64_t flush_bytes, FastaSink sink,
                           void *ctx, char *err, size_t errlen)
{
    if (!a || !fs || !path)
        die("fasta_read: null argument");
    if (fs->alphabet && fs->alphabet != a)
        die("fasta_read: appending %s sequences to a %s set", a->name, fs->alphabet->name);
    if (err && errlen)
        err[0] = '\0';
    int is_stdin = strcmp(path, "-") == 0;
    FastaParse p = {.path = is_stdin ? "(standard input)" : path, .a = a, .fs = fs, .err = err, .errlen = errlen,
                    .bol = 1, .nseq_before = fs->nseq, .name_start = fs->names_len, .names_done = fs->names_len};
    /* what a failure puts back */
    FastaSet saved = *fs;

    errno = 0;
    int fd0 = is_stdin ? dup(0) : -1;
    gzFile gz = is_stdin ? (fd0 >= 0 ? gzdopen(fd0, "rb") : NULL) : gzopen(path, "rb");
    if (!gz && fd0 >= 0)
        close(fd0);
    if (!gz) {
        parse_error(&p, 0, "cannot open: %s", errno ? strerror(errno) : "out of memory");
        return 0;
    }
    gzbuffer(gz, 1 << 18);
    enum { CHUNK = 1 << 18 };
    unsigned char *buf = malloc(CHUNK);
    if (!buf)
        die("out of memory");
    int64_t total = 0;
    for (;;) {
        int got = gzread(gz, buf, CHUNK);
        if (got < 0) {
            if (p.line == 0)
                p.line = 1;
            check_gz(&p, gz);
            if (!p.failed)
                parse_error(&p, p.line, "read error");
            break;
        }
        if (got == 0)
            break;
        size_t skip = 0;
        /* Windows editors may start a text file with a UTF-8 byte order mark */
        if (total == 0 && got >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
            skip = 3;
        total += got;
        if (!parse_chunk(&p, buf + skip, (size_t)got - skip))
            break;
        if (sink && fs->nseq > 0 && fs->offsets[fs->nseq] >= flush_bytes && !flush_sink(&p, sink, ctx))
            break;
    }
    free(buf);
    if (!p.failed && p.line == 0)
        p.line = 1;
    if (!p.failed)
        check_gz(&p, gz);
    int rc = gzclose(gz);
    if (!p.failed && rc != Z_OK)
        parse_error(&p, p.line, rc == Z_BUF_ERROR ? "compressed data ends early: the file is truncated"
                                                  : "cannot read the file (zlib error %d)", rc);
    if (!p.failed && total == 0)
        parse_error(&p, 1, "empty file");
    if (!p.failed && !p.in_record)
        parse_error(&p, p.line, "no FASTA records (no line starts with '>')");
    if (!p.failed)
        record_end(&p);
    if (!p.failed && fs->nseq + p.flushed == p.nseq_before)
        parse_error(&p, p.first_header_line, "no sequences: the file's %" PRId64 " record%s all empty",
                    p.nrecords, p.nrecords == 1 ? " is" : "s are");
    if (!p.failed && sink)
        flush_sink(&p, sink, ctx);
    if (p.failed && sink)
        return 0;
    if (p.failed) {
        /* keep the grown buffers, forget what this file added */
        saved.tokens = fs->tokens;
        saved.tokens_cap = fs->tokens_cap;
        saved.offsets = fs->offsets;
        saved.unknown = fs->unknown;
        saved.names = fs->names;
        saved.names_cap = fs->names_cap;
        saved.seq_cap = fs->seq_cap;
        *fs = saved;
        return 0;
    }
    fs->alphabet = a;
    fs->nfiles++;
    return 1;
}

int fasta_read(const char *path, const Alphabet *a, FastaSet *fs, char *err, size_t errlen)
{
    return fasta_read_impl(path, a, fs, 0, NULL, NULL, err, errlen);
}

int fasta_read_stream(const char *path, const Alphabet *a, FastaSet *fs, int64_t flush_bytes, FastaSink sink,
                      void *ctx, char *err, size_t errlen)
{
    if (!sink)
        die("fasta_read_stream: no sink");
    return fasta_read_impl(path, a, fs, flush_bytes, sink, ctx, err, errlen);
}

/* ---- split -------------------------------------------------------------- */

/* The split's hash has a fixed key: it must not move with --seed. */
#define SPLIT_KEY UINT64_C(0x6d6f6563)

double data_split_u(int64_t i)
{
    return unit_of(hash4(SPLIT_KEY, DOM_SPLIT, (uint64_t)i, 0));
}

int64_t data_split_flip(int64_t n, double val_fraction)
{
    if (n < 2 || val_fraction <= 0 || val_fraction >= 1.0)
        return -1;
    int64_t nval = 0, lo_train = -1, hi_val = -1;
    double lo_u = 2, hi_u = -1;
    for (int64_t i = 0; i < n; i++) {
        double u = data_split_u(i);
        if (u < val_fraction) {
            nval++;
            if (u > hi_u)
                hi_u = u, hi_val = i;
        } else if (u < lo_u) {
            lo_u = u, lo_train = i;
        }
    }
    /* each split non-empty, by moving the sequence that came closest to the other side */
    return nval == 0 ? lo_train : nval == n ? hi_val : -1;
}

int data_split_of(int64_t i, int64_t n, double val_fraction, int64_t flip)
{
    if (val_fraction >= 1.0)
        return DATA_SPLIT_VAL;
    if (val_fraction <= 0 || n < 2)
        return DATA_SPLIT_TRAIN;  /* a lone sequence is for training */
    int s = data_split_u(i) < val_fraction;
    return i == flip ? !s : s;
}

uint8_t *data_split_assign(const FastaSet *fs, double val_fraction)
{
    int64_t n = fs->nseq, units = fs->cluster_of ? fs->nclusters : n, flip = data_split_flip(units, val_fraction);
    uint8_t *s = malloc(n ? (size_t)n : 1);
    if (!s)
        die("out of memory");
    for (int64_t i = 0; i < n; i++)
        s[i] = (uint8_t)data_split_of(fs->cluster_of ? fs->cluster_of[i] : i, units, val_fraction, flip);
    return s;
}

void data_summary(const FastaSet *fs, double val_fraction, DataSummary *out)
{
    memset(out, 0, sizeof *out);
    out->flip = -1;
    if (fs->has_summary) {
        if (val_fraction == DATA_VAL_FRACTION) {
            *out = fs->summary;
            return;
        }
        if (val_fraction <= 0 || val_fraction >= 1.0) {
            int to = val_fraction >= 1.0 ? DATA_SPLIT_VAL : DATA_SPLIT_TRAIN;
            for (int s = 0; s < 2; s++) {
                out->nseq[to] += fs->summary.nseq[s];
                out->nresidues[to] += fs->summary.nresidues[s];
                out->nunknown[to] += fs->summary.nunknown[s];
                for (int t = 0; t < 64; t++)
                    out->counts[to][t] += fs->summary.counts[s][t];
            }
            return;
        }
        die("data_summary: a shard set knows its split at %g only", DATA_VAL_FRACTION);
    }
    int64_t units = fs->cluster_of ? fs->nclusters : fs->nseq, scanned = 0;
    int64_t hist[2][4][64];  /* 4 KiB */
    memset(hist, 0, sizeof hist);
    out->flip = data_split_flip(units, val_fraction);
    for (int64_t i = 0; i < fs->nseq; i++) {
        int s = data_split_of(fs->cluster_of ? fs->cluster_of[i] : i, units, val_fraction, out->flip);
        int64_t a = fs->offsets[i], b = fs->offsets[i + 1];
        if (a < 0 || b < a || b > fs->ntokens)
            shards_damaged(fs, i);
        out->nseq[s]++;
        out->nresidues[s] += b - a;
        out->nunknown[s] += fs->unknown ? fs->unknown[i] : 0;
        /* four histograms per split, so consecutive equal tokens do not wait on one counter */
        int64_t (*h)[64] = hist[s];
        const uint8_t *t = fs->tokens;
        int64_t k = a;
        for (; k + 4 <= b; k += 4) {
            h[0][t[k] & 63]++;
            h[1][t[k + 1] & 63]++;
            h[2][t[k + 2] & 63]++;
            h[3][t[k + 3] & 63]++;
        }
        for (; k < b; k++)
            h[0][t[k] & 63]++;
        /* a sequential pass: the mapped pages are dropped every 16 MiB (not every few sequences, as the
         * loader's random reads need: each drop walks the maps' page tables) */
        scanned += b - a + 8;
        if (fs->shards && scanned >= (16 << 20)) {
            shards_release(fs, INT32_MAX);
            scanned = 0;
        }
    }
    for (int sp = 0; sp < 2; sp++)
        for (int v = 0; v < 64; v++)
            out->counts[sp][v] += hist[sp][0][v] + hist[sp][1][v] + hist[sp][2][v] + hist[sp][3][v];
}

void data_split_stats(const FastaSet *fs, double val_fraction, DataSplitStats stats[2])
{
    DataSummary sum;
    data_summary(fs, val_fraction, &sum);
    for (int s = 0; s < 2; s++)
        stats[s] = (DataSplitStats){sum.nseq[s], sum.nresidues[s], sum.nunknown[s]};
}

double data_unigram_entropy(const FastaSet *fs, double val_fraction, int split, Objective obj)
{
    if (!fs->alphabet)
        return 0;
    const Alphabet *a = fs->alphabet;
    DataSummary sum;
    data_summary(fs, val_fraction, &sum);
    int64_t count[64];
    memcpy(count, sum.counts[split], sizeof count);
    if (obj == OBJECTIVE_CAUSAL) {
        count[a->eos] += sum.nseq[split];
        count[a->bos] += sum.nseq[split];
    }
    int64_t total = 0;
    for (int t = 0; t < 64; t++)
        total += count[t];
    double h = 0;
    for (int t = 0; t < 64; t++) {
        if (count[t]) {
            double q = (double)count[t] / (double)total;
            h -= q * log(q);
        }
    }
    return h;
}

/* ---- loader ------------------------------------------------------------- */

static int64_t loader_max_len(const DataLoader *l)
{
    int64_t fit = l->seq > 3 ? l->seq - 2 : 1;  /* a cropped sequence with BOS and EOS fills one row */
    if (l->opt.max_len > 0 && !(l->opt.one_per_row && l->opt.max_len > fit))
        return l->opt.max_len;
    return fit;
}

/* The epoch whose shuffle and crops the stream uses now: validation always
 * reads epoch 0, so every evaluation sees the same rows. */
static int64_t loader_epoch(const DataLoader *l)
{
    return l->split == DATA_SPLIT_VAL ? 0 : l->st.epoch;
}

/* Position pos of the epoch's order: a 4-round Feistel network on
 * 2 * perm_half bits keyed by (seed, split, epoch), applied until the value
 * falls in [0, nseq) (cycle walking; the domain is under 4 * nseq, so a few
 * rounds on average). A bijection: every sequence once per epoch. */
static int64_t loader_perm(const DataLoader *l, int64_t epoch, int64_t pos)
{
    uint64_t n = (uint64_t)l->nunits, half = (uint64_t)l->perm_half, mask = (UINT64_C(1) << half) - 1;
    uint64_t key = hash4(l->seed, DOM_SHUFFLE, (uint64_t)l->split, (uint64_t)epoch);
    uint64_t x = (uint64_t)pos;
    do {
        uint64_t L = x >> half, R = x & mask;
        for (uint64_t r = 0; r < 4; r++) {
            uint64_t f = mix64(key ^ mix64(R + (r << 56))) & mask;
            uint64_t t = L ^ f;
            L = R;
            R = t;
        }
        x = (L << half) | R;
    } while (x >= n);
    return (int64_t)x;
}

/* The sequence a unit stands for in `epoch`: itself, or with clusters one
 * member of the cluster drawn from (seed, epoch, cluster). */
static int64_t loader_pick(const DataLoader *l, int64_t unit, int64_t epoch)
{
    const FastaSet *fs = l->fs;
    if (!fs->cluster_of)
        return unit;
    int64_t a = fs->cluster_off[unit], b = fs->cluster_off[unit + 1];
    if (a < 0 || b <= a || b > fs->nseq)
        shards_damaged(fs, -1 - unit);
    int64_t id = fs->cluster_members[a + (int64_t)(hash4(l->seed, DOM_MEMBER, (uint64_t)epoch, (uint64_t)unit) %
                                                   (uint64_t)(b - a))];
    if (id < 0 || id >= fs->nseq)
        shards_damaged(fs, -1 - unit);
    return id;
}

/* The unit (sequence or cluster) at position st.pos of the current epoch,
 * and the sequence it gives (cached). */
static int64_t loader_current(DataLoader *l)
{
    if (l->cur_pos != l->st.pos || l->cur_epoch != loader_epoch(l)) {
        l->cur_pos = l->st.pos;
        l->cur_epoch = loader_epoch(l);
        l->cur_unit = loader_perm(l, l->cur_epoch, l->st.pos);
        l->cur_id = loader_pick(l, l->cur_unit, l->cur_epoch);
    }
    return l->cur_id;
}

static int loader_takes(const DataLoader *l, int64_t unit)
{
    return data_split_of(unit, l->nunits, l->opt.val_fraction, l->flip) == l->split;
}

/* The residues sequence `id` contributes in `epoch`: all of them, or a window
 * of max_len at an offset drawn from (seed, epoch, id). An index that does
 * not fit the tokens (a damaged shard set) stops the run with a message. */
static void loader_window(const DataLoader *l, int64_t id, int64_t epoch, int64_t *start, int64_t *len)
{
    const FastaSet *fs = l->fs;
    int64_t a = fs->offsets[id], b = fs->offsets[id + 1], max_len = loader_max_len(l);
    if (a < 0 || b < a || b > fs->ntokens)
        shards_damaged(fs, id);
    int64_t n = b - a;
    *start = a;
    *len = n;
    if (n > max_len) {
        /* modulo bias is below 2^-24 for any real sequence length */
        *start += (int64_t)(hash4(l->seed, DOM_CROP, (uint64_t)epoch, (uint64_t)id) % (uint64_t)(n - max_len + 1));
        *len = max_len;
    }
}

static uint64_t loader_fingerprint(const DataLoader *l)
{
    uint64_t h = hash4(l->seed, DOM_FINGERPRINT, (uint64_t)l->split, (uint64_t)l->obj);
    uint64_t bits[2];
    memcpy(&bits[0], &l->opt.val_fraction, 8);
    memcpy(&bits[1], &l->opt.mask_prob, 8);
    uint64_t parts[] = {(uint64_t)l->seq, (uint64_t)loader_max_len(l), bits[0], bits[1], (uint64_t)l->nseqs,
                        (uint64_t)l->fs->nseq, (uint64_t)l->fs->ntokens, (uint64_t)l->a->kind, l->fs->checksum,
                        (uint64_t)l->nunits, (uint64_t)l->opt.one_per_row};
    for (int i = 0; i < ARRAY_LEN(parts); i++)
        h = mix64(h ^ parts[i]);
    return h;
}

int data_loader_init(DataLoader *l, const FastaSet *fs, const Alphabet *a, int split, int64_t batch, int64_t seq,
                     uint64_t seed, Objective obj)
{
    return data_loader_init_opts(l, fs, a, split, batch, seq, seed, obj, NULL);
}

int data_loader_init_opts(DataLoader *l, const FastaSet *fs, const Alphabet *a, int split, int64_t batch,
                          int64_t seq, uint64_t seed, Objective obj, const DataOptions *opt)
{
    if (!l || !fs || !a || fs->alphabet != a)
        die("data_loader_init: the set was not read with this alphabet");
    if (split != DATA_SPLIT_TRAIN && split != DATA_SPLIT_VAL)
        die("data_loader_init: bad split %d", split);
    if (obj != OBJECTIVE_CAUSAL && obj != OBJECTIVE_MASKED)
        die("data_loader_init: bad objective %d", (int)obj);
    if (batch < 1 || seq < 1 || batch > INT64_MAX / seq)
        die("data_loader_init: bad shape %" PRId64 " x %" PRId64, batch, seq);
    memset(l, 0, sizeof *l);
    l->opt = opt ? *opt : DATA_OPTIONS_DEFAULT;
    if (!(l->opt.val_fraction >= 0 && l->opt.val_fraction <= 1 && l->opt.mask_prob >= 0 && l->opt.mask_prob <= 1))
        die("data_loader_init: val_fraction %g, mask_prob %g", l->opt.val_fraction, l->opt.mask_prob);
    l->fs = fs;
    l->a = a;
    l->split = split;
    l->obj = obj;
    l->batch = batch;
    l->seq = seq;
    l->seed = seed;

    DataSummary sum;
    data_summary(fs, l->opt.val_fraction, &sum);
    l->nseqs = sum.nseq[split];
    l->flip = sum.flip;
    l->nunits = fs->cluster_of ? fs->nclusters : fs->nseq;
    if (l->nseqs == 0)
        return 0;
    int bits = 1;
    while (bits < 62 && (INT64_C(1) << bits) < l->nunits)
        bits++;
    l->perm_half = (bits + 1) / 2;
    l->row = malloc(((size_t)seq + 1) * sizeof(int32_t));
    if (!l->row)
        die("out of memory");
    data_loader_reset(l);
    return 1;
}

void data_loader_free(DataLoader *l)
{
    free(l->row);
    memset(l, 0, sizeof *l);
}

void data_loader_reset(DataLoader *l)
{
    memset(&l->st, 0, sizeof l->st);
    l->st.carry = -1;
    rng_seed(l->st.rng, hash4(l->seed, DOM_MASK, (uint64_t)l->split, 0));
    l->st.fingerprint = loader_fingerprint(l);
    l->cur_pos = -1;
}

int64_t data_loader_rows(const DataLoader *l)
{
    int64_t stream_len = 0, max_len = loader_max_len(l);
    for (int64_t u = 0; u < l->nunits; u++) {
        if (loader_takes(l, u)) {
            int64_t n = fasta_seq_len(l->fs, loader_pick(l, u, 0));
            stream_len += (n < max_len ? n : max_len) + 2;
        }
    }
    if (l->opt.one_per_row) {
        int64_t n = 0;
        for (int64_t u = 0; u < l->nunits; u++)
            n += loader_takes(l, u);
        return n;
    }
    int64_t targets = l->obj == OBJECTIVE_CAUSAL ? stream_len - 1 : stream_len;
    return (targets + l->seq - 1) / l->seq;
}

int data_loader_done(const DataLoader *l)
{
    return l->split == DATA_SPLIT_VAL && l->st.pos == l->nunits;
}

/* Moves st.pos to the next position of this split's units (at or after
 * it); 0 at the end of the epoch (st.pos == nunits). */
static int loader_seek(DataLoader *l)
{
    while (l->st.pos < l->nunits) {
        loader_current(l);
        if (loader_takes(l, l->cur_unit))
            return 1;
        l->st.pos++;
    }
    return 0;
}

/* Copies the next n stream tokens to dst; fewer only at the end of a
 * validation pass. */
static int64_t stream_read(DataLoader *l, int32_t *dst, int64_t n)
{
    const Alphabet *a = l->a;
    DataLoaderState *st = &l->st;
    int64_t done = 0, work = 0;
    while (done < n) {
        work++;
        if (st->off == 0 && !loader_seek(l)) {
            if (l->split == DATA_SPLIT_VAL)
                break;
            st->epoch++;
            st->pos = 0;
            continue;
        }
        int64_t id = loader_current(l), start, len;
        loader_window(l, id, loader_epoch(l), &start, &len);
        /* emission: off 0 is BOS, 1..len the residues, len + 1 EOS */
        while (done < n && st->off < len + 2) {
            if (st->off == 0) {
                dst[done++] = a->bos;
                st->off++;
            } else if (st->off <= len) {
                int64_t k = len - (st->off - 1);
                if (k > n - done)
                    k = n - done;
                const uint8_t *src = l->fs->tokens + start + st->off - 1;
                uint8_t bad = 0;
                for (int64_t j = 0; j < k; j++) {
                    dst[done + j] = src[j];
                    bad |= (uint8_t)(src[j] >= a->vocab || src[j] == 0);
                }
                if (bad && l->fs->shards)
                    shards_damaged(l->fs, id);
                done += k;
                st->off += k;
            } else {
                dst[done++] = a->eos;
                st->off++;
            }
        }
        if (st->off == len + 2) {
            st->pos++;
            st->off = 0;
            if (l->one_record)
                break;
        }
    }
    if (l->fs->shards)
        shards_release(l->fs, work + done / 4096);
    return done;
}

/* One sequence (one_per_row): BOS, its window, EOS; fewer tokens only at
 * the end of a validation pass. */
static int64_t read_record(DataLoader *l, int32_t *dst, int64_t n)
{
    l->one_record = 1;
    int64_t got = stream_read(l, dst, n);
    l->one_record = 0;
    return got;
}

static void causal_row(DataLoader *l, int32_t *tokens, int32_t *targets)
{
    int32_t *w = l->row, pad = l->a->pad;
    int64_t seq = l->seq, got;
    if (l->opt.one_per_row) {
        got = read_record(l, w, seq + 1);
        for (int64_t i = got; i <= seq; i++)
            w[i] = pad;
        for (int64_t i = 0; i < seq; i++) {
            tokens[i] = w[i];
            targets[i] = w[i + 1] == pad ? DATA_IGNORE_INDEX : w[i + 1];
        }
        return;
    }
    if (l->st.carry >= 0) {
        w[0] = (int32_t)l->st.carry;
    } else if (stream_read(l, w, 1) == 0) {
        w[0] = pad;
    }
    got = stream_read(l, w + 1, seq);
    for (int64_t i = got + 1; i <= seq; i++)
        w[i] = pad;
    /* after a validation pass's last token nothing is carried: the rows after it are all padding */
    l->st.carry = got == seq ? w[seq] : -1;
    for (int64_t i = 0; i < seq; i++) {
        tokens[i] = w[i];
        targets[i] = w[i + 1] == pad ? DATA_IGNORE_INDEX : w[i + 1];
    }
}

static int is_residue(const Alphabet *a, int32_t t)
{
    return t != a->pad && t != a->bos && t != a->eos && t != a->mask;
}

/* Chooses position (tok, tgt) for prediction, with BERT's 80/10/10 input. */
static void mask_position(DataLoader *l, int32_t *tok, int32_t *tgt)
{
    const Alphabet *a = l->a;
    *tgt = *tok;
    double u = rng_unit(l->st.rng);
    if (u < 0.8)
        *tok = a->mask;
    else if (u < 0.9)
        *tok = a->random_first + (int32_t)rng_below(l->st.rng, (uint64_t)a->random_count);
}

static void masked_batch(DataLoader *l, int32_t *tokens, int32_t *targets)
{
    const Alphabet *a = l->a;
    int64_t seq = l->seq, n = l->batch * seq, chosen = 0, candidates = 0;
    for (int64_t r = 0; r < l->batch; r++) {
        int32_t *tok = tokens + r * seq;
        int64_t got = l->opt.one_per_row ? read_record(l, tok, seq) : stream_read(l, tok, seq);
        for (int64_t i = got; i < seq; i++)
            tok[i] = a->pad;
    }
    for (int64_t i = 0; i < n; i++) {
        targets[i] = DATA_IGNORE_INDEX;
        if (!is_residue(a, tokens[i]))
            continue;
        candidates++;
        if (rng_unit(l->st.rng) < l->opt.mask_prob) {
            mask_position(l, &tokens[i], &targets[i]);
            chosen++;
        }
    }
    /* a batch without a single target would make the mean loss 0/0 */
    if (chosen == 0 && candidates > 0 && l->opt.mask_prob > 0) {
        int64_t k = (int64_t)rng_below(l->st.rng, (uint64_t)candidates);
        for (int64_t i = 0; i < n; i++) {
            if (is_residue(a, tokens[i]) && k-- == 0) {
                mask_position(l, &tokens[i], &targets[i]);
                break;
            }
        }
    }
}

void data_loader_next(DataLoader *l, int32_t *tokens, int32_t *targets)
{
    if (l->obj == OBJECTIVE_CAUSAL) {
        for (int64_t r = 0; r < l->batch; r++)
            causal_row(l, tokens + r * l->seq, targets + r * l->seq);
    } else {
        masked_batch(l, tokens, targets);
    }
    l->st.rows += l->batch;
}

void data_loader_state_get(const DataLoader *l, DataLoaderState *st)
{
    *st = l->st;
    st->fingerprint = loader_fingerprint(l);
}

int data_loader_state_set(DataLoader *l, const DataLoaderState *st)
{
    if (st->fingerprint != loader_fingerprint(l))
        return 0;
    /* a state read from a damaged checkpoint must not index out of bounds */
    if (st->epoch < 0 || (l->split == DATA_SPLIT_VAL && st->epoch != 0) || st->pos < 0 || st->pos > l->nunits ||
        st->off < 0 || st->carry < -1 || st->carry >= l->a->vocab || st->rows < 0 ||
        !(st->rng[0] | st->rng[1] | st->rng[2] | st->rng[3]))
        return 0;
    if (st->pos == l->nunits && st->off != 0)
        return 0;
    DataLoaderState old = l->st;
    l->st = *st;
    if (st->off > 0) {
        int64_t id = loader_current(l), start, len;
        if (!loader_takes(l, l->cur_unit)) {
            l->st = old;
            return 0;
        }
        loader_window(l, id, loader_epoch(l), &start, &len);
        if (st->off >= len + 2) {
            l->st = old;
            return 0;
        }
    }
    return 1;
}
