/* test_data.c - unit tests of the training data module: both alphabets,
 * the FASTA reader (line endings, case, stops, unknown letters, gzip, every
 * malformed input with its located message, the packaged real data sets),
 * the split, causal and masked packing, validation passes, and checkpoint
 * resume of the loader. Scratch files go to /tmp under this process's id. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../../util/util.h"
#include "../../data/data.h"
#include "check.h"


#define DB_FASTA "/usr/share/doc/mmseqs2/example-data/DB.fasta.gz"           /* mmseqs2-examples */
#define GOLD_16S "/usr/share/microbiomeutil-data/RESOURCES/rRNA16S.gold.fasta" /* microbiomeutil-data */
#define PROTEASES "/usr/share/doc/t-coffee/examples/proteases1_small.fasta"   /* t-coffee-examples */

static char scratch[32][256];
static int nscratch;

/* A path in /tmp unique to this process, removed at exit. */
static const char *tmp_path(const char *name)
{
    if (nscratch == ARRAY_LEN(scratch))
        die("too many scratch files");
    snprintf(scratch[nscratch], sizeof scratch[0], "/tmp/test_data_%d_%s", (int)getpid(), name);
    return scratch[nscratch++];
}

static void remove_scratch(void)
{
    for (int i = 0; i < nscratch; i++)
        unlink(scratch[i]);
}

static const char *write_scratch(const char *name, const void *data, size_t len)
{
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0)
        die("cannot write %s", path);
    return path;
}

static const char *write_text(const char *name, const char *text)
{
    return write_scratch(name, text, strlen(text));
}

/* Sequence i as residue letters. */
static char *seq_str(const FastaSet *fs, int64_t i)
{
    static char buf[4096];
    int64_t n = fasta_seq_len(fs, i), k = 0;
    for (; k < n && k < (int64_t)sizeof buf - 1; k++)
        buf[k] = fs->alphabet->tokens[fs->tokens[fs->offsets[i] + k]][0];
    buf[k] = '\0';
    return buf;
}

static void test_alphabets(void)
{
    static const char *esm2[33] = {"<cls>", "<pad>", "<eos>", "<unk>", "L", "A", "G", "V", "S", "E", "R",
                                   "T", "I", "D", "P", "K", "Q", "N", "F", "Y", "M", "H", "W", "C",
                                   "X", "B", "U", "Z", "O", ".", "-", "<null_1>", "<mask>"};
    const Alphabet *p = alphabet_get(ALPHABET_PROTEIN);
    CHECK(p->kind == ALPHABET_PROTEIN && p->vocab == 33, "protein vocab %d", p->vocab);
    for (int i = 0; i < 33; i++)
        CHECK(strcmp(p->tokens[i], esm2[i]) == 0, "protein token %d is %s", i, p->tokens[i]);
    CHECK(p->bos == 0 && p->pad == 1 && p->eos == 2 && p->mask == 32, "protein specials");
    CHECK(p->unk == alphabet_token_id(p, "X") && p->unk == 24, "protein unknown -> X");
    for (int i = 4; i <= 28; i++) {
        int c = p->tokens[i][0];
        CHECK(alphabet_encode(p, c) == i && alphabet_encode(p, c + 32) == i, "protein %c", c);
    }
    CHECK(alphabet_encode(p, 'J') == -1 && alphabet_encode(p, 'j') == -1, "J is not an amino acid");
    CHECK(alphabet_encode(p, '*') == -1 && alphabet_encode(p, '1') == -1 && alphabet_encode(p, ' ') == -1,
          "non-letters");
    CHECK(alphabet_encode(p, '.') == 29 && alphabet_encode(p, '-') == 30, "gaps");
    CHECK(p->random_first == 4 && p->random_count == 20 && strcmp(p->tokens[p->random_first + 19], "C") == 0,
          "random replacements are the 20 standard amino acids");

    static const char *dna[9] = {"<pad>", "<bos>", "<eos>", "<mask>", "A", "C", "G", "T", "N"};
    const Alphabet *d = alphabet_get(ALPHABET_DNA);
    CHECK(d->kind == ALPHABET_DNA && d->vocab == 9, "dna vocab %d", d->vocab);
    for (int i = 0; i < 9; i++)
        CHECK(strcmp(d->tokens[i], dna[i]) == 0, "dna token %d is %s", i, d->tokens[i]);
    CHECK(d->pad == 0 && d->bos == 1 && d->eos == 2 && d->mask == 3 && d->unk == 8, "dna specials");
    CHECK(alphabet_encode(d, 'a') == 4 && alphabet_encode(d, 'C') == 5 && alphabet_encode(d, 'g') == 6 &&
              alphabet_encode(d, 'T') == 7 && alphabet_encode(d, 'n') == 8,
          "ACGTN");
    CHECK(alphabet_encode(d, 'U') == 7 && alphabet_encode(d, 'u') == 7, "U reads as T");
    CHECK(alphabet_encode(d, 'R') == -1 && alphabet_encode(d, 'y') == -1 && alphabet_encode(d, '-') == -1,
          "IUPAC ambiguity codes are unknown");
    CHECK(alphabet_encode(d, 300) == -1 && alphabet_encode(d, -1) == -1, "out of range");

    CHECK(alphabet_lookup("protein") == ALPHABET_PROTEIN && alphabet_lookup("dna") == ALPHABET_DNA &&
              alphabet_lookup("rna") == -1 && alphabet_lookup(NULL) == -1,
          "lookup");
    CHECK(alphabet_token_id(p, "<mask>") == 32 && alphabet_token_id(d, "<bos>") == 1 &&
              alphabet_token_id(d, "X") == -1,
          "token ids");
}

/* Multi-line records, lower case, \r\n, blank lines, a trailing '*', an
 * inner '*', an unknown letter, an empty record, no final newline. */
static const char small_protein[] =
    ">seq1 first record\r\n"
    "ACDEFGHIK\r\n"
    "lmnpqrst\r\n"
    "\r\n"
    ">seq2\r\n"
    "MKV*\r\n"
    ">empty record\n"
    ">seq3\n"
    "MJ*K \t\n"
    "   \n"
    "\n"
    "wy* ";

static void check_small_protein(const FastaSet *fs, const char *what)
{
    CHECK(fs->nseq == 3, "%s: %lld sequences", what, (long long)fs->nseq);
    if (fs->nseq != 3)
        return;
    CHECK(strcmp(seq_str(fs, 0), "ACDEFGHIKLMNPQRST") == 0, "%s: seq1 %s", what, seq_str(fs, 0));
    CHECK(strcmp(seq_str(fs, 1), "MKV") == 0, "%s: seq2 %s", what, seq_str(fs, 1));
    CHECK(strcmp(seq_str(fs, 2), "MXXKWY") == 0, "%s: seq3 %s", what, seq_str(fs, 2));
    CHECK(fs->ntokens == 17 + 3 + 6, "%s: residues %lld", what, (long long)fs->ntokens);
    CHECK(fs->nunknown == 2 && fs->unknown[0] == 0 && fs->unknown[1] == 0 && fs->unknown[2] == 2,
          "%s: unknown %lld", what, (long long)fs->nunknown);
    CHECK(fs->nempty == 1 && fs->nstops == 2, "%s: empty %lld, stops %lld", what, (long long)fs->nempty,
          (long long)fs->nstops);
    CHECK(fs->offsets[0] == 0 && fs->offsets[3] == fs->ntokens, "%s: offsets", what);
}

static void test_fasta_small(void)
{
    const Alphabet *p = alphabet_get(ALPHABET_PROTEIN), *d = alphabet_get(ALPHABET_DNA);
    char err[512];
    FastaSet fs;

    const char *plain = write_text("small.fa", small_protein);
    fasta_set_init(&fs);
    CHECK(fasta_read(plain, p, &fs, err, sizeof err) == 1, "small: %s", err);
    check_small_protein(&fs, "plain");
    fasta_set_free(&fs);

    /* the same text gzip-compressed, written through zlib */
    const char *gz_path = tmp_path("small.fa.gz");
    gzFile gz = gzopen(gz_path, "wb");
    CHECK(gz && gzwrite(gz, small_protein, (unsigned)strlen(small_protein)) == (int)strlen(small_protein),
          "gzwrite");
    CHECK(gz && gzclose(gz) == Z_OK, "gzclose");
    fasta_set_init(&fs);
    CHECK(fasta_read(gz_path, p, &fs, err, sizeof err) == 1, "gzip: %s", err);
    check_small_protein(&fs, "gzip");

    /* appending a second file */
    CHECK(fasta_read(plain, p, &fs, err, sizeof err) == 1, "append: %s", err);
    CHECK(fs.nseq == 6 && fs.ntokens == 52 && fs.nunknown == 4 && fs.nfiles == 2, "append counts");
    CHECK(strcmp(seq_str(&fs, 5), "MXXKWY") == 0 && fs.offsets[6] == 52, "appended %s", seq_str(&fs, 5));
    fasta_set_free(&fs);

    /* a UTF-8 byte order mark, as Windows editors write it */
    const char *bom = write_text("bom.fa", "\xef\xbb\xbf>a\r\nMKV\r\n");
    fasta_set_init(&fs);
    CHECK(fasta_read(bom, p, &fs, err, sizeof err) == 1 && fs.nseq == 1 && fs.ntokens == 3, "BOM: %s", err);
    fasta_set_free(&fs);

    /* DNA: U is T; IUPAC codes and other letters are N and counted */
    const char *dna = write_text("small_dna.fa", ">a\nacgtn\nUuRYry-\n>b\r\nGATTACA\r\n");
    fasta_set_init(&fs);
    CHECK(fasta_read(dna, d, &fs, err, sizeof err) == 1, "dna: %s", err);
    CHECK(fs.nseq == 2 && strcmp(seq_str(&fs, 0), "ACGTNTTNNNNN") == 0, "dna seq %s", seq_str(&fs, 0));
    CHECK(fs.nseq == 2 && strcmp(seq_str(&fs, 1), "GATTACA") == 0, "dna seq 2");
    CHECK(fs.nunknown == 5 && fs.nstops == 0, "dna unknown %lld", (long long)fs.nunknown);
    fasta_set_free(&fs);

    /* a 30 MB sequence on one line and a 1 MB header: no line buffer */
    size_t big = 30u << 20, hdr = 1u << 20;
    char *text = malloc(hdr + big + 8);
    if (!text)
        die("out of memory");
    memset(text, 'h', hdr);
    text[0] = '>';
    text[hdr] = '\n';
    for (size_t i = 0; i < big; i++)
        text[hdr + 1 + i] = "ACGT"[i & 3];
    text[hdr + 1 + big] = '\n';
    const char *long_path = write_scratch("long.fa", text, hdr + big + 2);
    free(text);
    fasta_set_init(&fs);
    CHECK(fasta_read(long_path, d, &fs, err, sizeof err) == 1, "long line: %s", err);
    CHECK(fs.nseq == 1 && fs.ntokens == (int64_t)big && fs.tokens[big - 1] == 7, "long line residues");
    fasta_set_free(&fs);
}

/* Expects fasta_read to fail with a message that starts with prefix and
 * contains needle, and to leave a set it appends to unchanged. */
static void expect_error(const char *path, const Alphabet *a, const char *prefix, const char *needle)
{
    char err[512] = "";
    FastaSet fs;
    fasta_set_init(&fs);
    CHECK(fasta_read(path, a, &fs, err, sizeof err) == 0, "%s should fail", path);
    CHECK(strncmp(err, prefix, strlen(prefix)) == 0, "want prefix '%s', got '%s'", prefix, err);
    CHECK(strstr(err, needle) != NULL, "want '%s' in '%s'", needle, err);
    CHECK(fs.nseq == 0 && fs.ntokens == 0 && fs.alphabet == NULL, "set unchanged after %s", path);
    fasta_set_free(&fs);
}

static void test_fasta_errors(void)
{
    const Alphabet *p = alphabet_get(ALPHABET_PROTEIN);
    char prefix[512];
#define EXPECT(path, line, needle)                                    \
    do {                                                              \
        const char *path_ = (path);                                   \
        snprintf(prefix, sizeof prefix, "%s:%d: error: ", path_, line); \
        expect_error(path_, p, prefix, needle);                       \
    } while (0)

    EXPECT(write_text("before.fa", "MKV\n>a\nMKV\n"), 1, "before the first header");
    EXPECT(write_text("before3.fa", "\r\n  \n  MKV\n>a\nMKV\n"), 3, "before the first header");
    EXPECT(write_text("empty.fa", ""), 1, "empty file");
    EXPECT(write_text("blank.fa", "\n\n  \n"), 3, "no FASTA records");
    EXPECT(write_text("text.fa", "# a comment, not FASTA\n>a\nMK\n"), 1, "not a FASTA file");
    EXPECT(write_text("allempty.fa", "\n>a\n>b\n\n"), 2, "no sequences");
    EXPECT(write_text("binary_seq.fa", ">a\nMK\nMK\x01V\n"), 3, "binary data");
    EXPECT(write_text("binary_hdr.fa", ">a\nMK\n>b\x1b[0m\nMK\n"), 3, "binary data");
    EXPECT(write_text("utf8_seq.fa", ">a\nMK\xc3\xa9\n"), 2, "byte 0xc3");

    unsigned char garbage[4096];
    uint64_t x = 12345;
    for (size_t i = 0; i < sizeof garbage; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        garbage[i] = (unsigned char)(x >> 56);
    }
    garbage[0] = 0x7f;  /* not gzip's magic, not '>' */
    garbage[1] = 'E';
    EXPECT(write_scratch("garbage.bin", garbage, sizeof garbage), 1, "binary data");

    char err[512];
    FastaSet fs;
    fasta_set_init(&fs);
    CHECK(fasta_read("/tmp/test_data_no_such_file.fa", p, &fs, err, sizeof err) == 0 &&
              strstr(err, "/tmp/test_data_no_such_file.fa: error: cannot open: No such file") == err,
          "missing file: %s", err);
    CHECK(fasta_read("/tmp", p, &fs, err, sizeof err) == 0 && strstr(err, "/tmp:1: error:") == err,
          "directory: %s", err);

    /* a failed append leaves the set as it was */
    const char *good = write_text("good.fa", ">a\nMKV\n");
    CHECK(fasta_read(good, p, &fs, err, sizeof err) == 1, "good: %s", err);
    const char *bad = write_text("bad_tail.fa", ">b\nLLL\n>c\nAA\x02\n");
    CHECK(fasta_read(bad, p, &fs, err, sizeof err) == 0, "bad tail should fail");
    CHECK(fs.nseq == 1 && fs.ntokens == 3 && fs.nfiles == 1 && strcmp(seq_str(&fs, 0), "MKV") == 0,
          "rolled back: %lld sequences", (long long)fs.nseq);
    CHECK(fasta_read(good, p, &fs, err, sizeof err) == 1 && fs.nseq == 2 && fs.ntokens == 6, "usable after");
    fasta_set_free(&fs);

    /* the first half of a real gzip file, and one with a damaged middle */
    FILE *f = fopen(DB_FASTA, "rb");
    CHECK(f != NULL, "%s missing: apt-get install mmseqs2-examples", DB_FASTA);
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *gzdata = malloc((size_t)size);
    if (!gzdata || fread(gzdata, 1, (size_t)size, f) != (size_t)size)
        die("cannot read %s", DB_FASTA);
    fclose(f);
    const char *half = write_scratch("half.fasta.gz", gzdata, (size_t)size / 2);
    fasta_set_init(&fs);
    CHECK(fasta_read(half, p, &fs, err, sizeof err) == 0, "truncated gzip should fail");
    snprintf(prefix, sizeof prefix, "%s:", half);
    long line = strncmp(err, prefix, strlen(prefix)) == 0 ? strtol(err + strlen(prefix), NULL, 10) : 0;
    CHECK(line > 1000 && strstr(err, ": error: compressed data ends early") != NULL &&
              strstr(err, "truncated") != NULL,
          "truncated gzip: %s", err);
    CHECK(fs.nseq == 0 && fs.ntokens == 0, "nothing kept from a truncated file");
    for (long i = size / 2; i < size / 2 + 64; i++)
        gzdata[i] ^= 0x5a;
    const char *damaged = write_scratch("damaged.fasta.gz", gzdata, (size_t)size);
    CHECK(fasta_read(damaged, p, &fs, err, sizeof err) == 0 && strstr(err, ": error: corrupt compressed data"),
          "damaged gzip: %s", err);
    fasta_set_free(&fs);
    free(gzdata);
#undef EXPECT
}

static void test_real_files(FastaSet *db, FastaSet *gold)
{
    const Alphabet *p = alphabet_get(ALPHABET_PROTEIN), *d = alphabet_get(ALPHABET_DNA);
    char err[512];
    CHECK(fasta_read(DB_FASTA, p, db, err, sizeof err) == 1, "%s (apt-get install mmseqs2-examples)", err);
    CHECK(db->nseq == 20000 && db->ntokens == 9055569 && db->nunknown == 0 && db->nempty == 0,
          "DB.fasta.gz: %lld sequences, %lld residues, %lld unknown", (long long)db->nseq,
          (long long)db->ntokens, (long long)db->nunknown);
    int64_t x = 0;
    for (int64_t i = 0; i < db->ntokens; i++)
        x += db->tokens[i] == p->unk;
    CHECK(x == 3088, "DB.fasta.gz has 3088 X residues, got %lld", (long long)x);

    CHECK(fasta_read(GOLD_16S, d, gold, err, sizeof err) == 1, "%s (apt-get install microbiomeutil-data)", err);
    /* unknown: the IUPAC ambiguity codes y r s k m w b h d v in the file */
    CHECK(gold->nseq == 5181 && gold->ntokens == 7615362 && gold->nunknown == 1814,
          "16S: %lld sequences, %lld bases, %lld unknown", (long long)gold->nseq, (long long)gold->ntokens,
          (long long)gold->nunknown);

    FastaSet small;
    fasta_set_init(&small);
    CHECK(fasta_read(PROTEASES, p, &small, err, sizeof err) == 1, "%s (apt-get install t-coffee-examples)", err);
    CHECK(small.nseq == 10 && small.ntokens == 2552 && small.nunknown == 0, "proteases: %lld, %lld",
          (long long)small.nseq, (long long)small.ntokens);
    fasta_set_free(&small);
}

static void test_split(const FastaSet *db, const FastaSet *gold)
{
    uint8_t *a = data_split_assign(db, DATA_VAL_FRACTION);
    uint8_t *b = data_split_assign(db, DATA_VAL_FRACTION);
    CHECK(memcmp(a, b, (size_t)db->nseq) == 0, "split is deterministic");
    int64_t nval = 0;
    for (int64_t i = 0; i < db->nseq; i++)
        nval += a[i];
    CHECK(nval > 140 && nval < 260, "about 1%% validation: %lld", (long long)nval);

    DataSplitStats st[2];
    data_split_stats(db, DATA_VAL_FRACTION, st);
    CHECK(st[0].nseq + st[1].nseq == db->nseq && st[1].nseq == nval, "stats sequences");
    CHECK(st[0].nresidues + st[1].nresidues == db->ntokens, "stats residues");
    data_split_stats(gold, DATA_VAL_FRACTION, st);
    CHECK(st[0].nunknown + st[1].nunknown == gold->nunknown, "stats unknown");

    /* the loaders' splits do not depend on the seed and partition the set */
    DataLoader tr, va, va2;
    const Alphabet *p = db->alphabet;
    CHECK(data_loader_init(&tr, db, p, DATA_SPLIT_TRAIN, 4, 128, 7, OBJECTIVE_CAUSAL) == 1, "train init");
    CHECK(data_loader_init(&va, db, p, DATA_SPLIT_VAL, 4, 128, 7, OBJECTIVE_CAUSAL) == 1, "val init");
    CHECK(data_loader_init(&va2, db, p, DATA_SPLIT_VAL, 4, 128, 8, OBJECTIVE_CAUSAL) == 1, "val init");
    CHECK(tr.nseqs + va.nseqs == db->nseq && va.nseqs == nval && va2.nseqs == nval, "split sizes");
    CHECK(data_loader_rows(&va) == data_loader_rows(&va2), "the validation split does not move with the seed");
    data_loader_free(&tr);
    data_loader_free(&va);
    data_loader_free(&va2);
    free(a);
    free(b);

    /* two sequences: one each for any fraction below 1; a fraction of 1
     * puts both in validation (how --eval scores a whole file) */
    FastaSet two;
    fasta_set_init(&two);
    char err[256];
    CHECK(fasta_read(write_text("two.fa", ">a\nMKV\n>b\nLLA\n"), p, &two, err, sizeof err) == 1, "%s", err);
    for (int f = 1; f <= 2; f++) {
        uint8_t *s = data_split_assign(&two, f * 0.5);
        int want = f == 2 ? 2 : 1;
        CHECK(s[0] + s[1] == want, "fraction %g: %d %d", f * 0.5, s[0], s[1]);
        free(s);
    }
    uint8_t *z = data_split_assign(&two, 0);
    CHECK(z[0] + z[1] == 0, "fraction 0: everything for training");
    free(z);
    fasta_set_free(&two);
}

/* Reads the causal stream of one epoch and checks that it is BOS + sequence
 * + EOS for every training sequence exactly once, cropped to max_len. */
static void test_causal(void)
{
    const Alphabet *p = alphabet_get(ALPHABET_PROTEIN);
    FastaSet fs;
    fasta_set_init(&fs);
    char err[256];
    CHECK(fasta_read(PROTEASES, p, &fs, err, sizeof err) == 1, "%s", err);
    if (fs.nseq != 10)
        return;
    for (int crop = 0; crop < 2; crop++) {
        DataOptions opt = DATA_OPTIONS_DEFAULT;
        opt.max_len = crop ? 100 : 100000;
        int64_t batch = 3, seq = 37;
        DataLoader l;
        CHECK(data_loader_init_opts(&l, &fs, p, DATA_SPLIT_TRAIN, batch, seq, 11, OBJECTIVE_CAUSAL, &opt) == 1,
              "init");
        int64_t nb = (data_loader_rows(&l) + batch - 1) / batch + 2;
        int32_t *tok = malloc((size_t)(nb * batch * seq) * 4), *tgt = malloc((size_t)(nb * batch * seq) * 4);
        for (int64_t b = 0; b < nb; b++)
            data_loader_next(&l, tok + b * batch * seq, tgt + b * batch * seq);
        int shift_ok = 1;
        for (int64_t r = 0; r < nb * batch; r++) {
            for (int64_t i = 0; i + 1 < seq; i++)
                shift_ok &= tgt[r * seq + i] == tok[r * seq + i + 1];
            if (r + 1 < nb * batch)
                shift_ok &= tgt[r * seq + seq - 1] == tok[(r + 1) * seq];
        }
        CHECK(shift_ok, "targets are the tokens shifted by one, across rows too");
        /* parse the stream (tokens of every row, then the last target) */
        int64_t n = nb * batch * seq, seqs_seen = 0, i = 0;
        int found[10] = {0}, ok = 1;
        CHECK(tok[0] == p->bos, "stream starts with BOS");
        while (i < n && seqs_seen < l.nseqs) {
            ok &= tok[i] == p->bos;
            int64_t j = i + 1;
            while (j < n && tok[j] != p->eos)
                j++;
            if (j == n)
                break;
            int64_t len = j - i - 1, match = -1;
            for (int64_t s = 0; s < fs.nseq && match < 0; s++) {
                int64_t full = fasta_seq_len(&fs, s);
                if (crop ? !(full >= len && (full > 100 ? len == 100 : len == full)) : full != len)
                    continue;
                for (int64_t o = 0; o + len <= full && match < 0; o++) {
                    int eq = 1;
                    for (int64_t k = 0; k < len && eq; k++)
                        eq = tok[i + 1 + k] == fs.tokens[fs.offsets[s] + o + k];
                    if (eq)
                        match = s;
                }
            }
            ok &= match >= 0;
            if (match >= 0)
                found[match]++;
            seqs_seen++;
            i = j + 1;
        }
        int once = 1;
        uint8_t *sp = data_split_assign(&fs, DATA_VAL_FRACTION);
        for (int64_t s = 0; s < fs.nseq; s++)
            once &= found[s] == (sp[s] == DATA_SPLIT_TRAIN);
        free(sp);
        CHECK(ok && once && seqs_seen == l.nseqs, "crop %d: each training sequence once per epoch", crop);
        CHECK(l.st.epoch == 1, "wrapped into epoch 1");
        free(tok);
        free(tgt);
        data_loader_free(&l);
    }
    fasta_set_free(&fs);
}

static void test_masked(const FastaSet *db)
{
    const Alphabet *p = db->alphabet;
    DataLoader l;
    int64_t batch = 8, seq = 512, n = batch * seq;
    CHECK(data_loader_init(&l, db, p, DATA_SPLIT_TRAIN, batch, seq, 3, OBJECTIVE_MASKED) == 1, "init");
    int32_t *tok = malloc((size_t)n * 4), *tgt = malloc((size_t)n * 4);
    int64_t residues = 0, chosen = 0, as_mask = 0, as_self = 0, as_other = 0, bad = 0;
    for (int b = 0; b < 60; b++) {
        data_loader_next(&l, tok, tgt);
        for (int64_t i = 0; i < n; i++) {
            int special = tok[i] == p->bos || tok[i] == p->eos || tok[i] == p->pad;
            if (tgt[i] == DATA_IGNORE_INDEX) {
                residues += !special;
                bad += tok[i] == p->mask;
                continue;
            }
            residues++;
            chosen++;
            bad += tgt[i] < 4 || tgt[i] > 28 || special;
            if (tok[i] == p->mask)
                as_mask++;
            else if (tok[i] == tgt[i])
                as_self++;
            else
                as_other++;
            bad += tok[i] != p->mask && (tok[i] < 4 || tok[i] > 23) && tok[i] != tgt[i];
        }
    }
    double rate = (double)chosen / (double)residues;
    CHECK(rate > 0.135 && rate < 0.165, "masking rate %.4f", rate);
    CHECK(bad == 0, "%lld targets on special tokens or bad replacements", (long long)bad);
    double fm = (double)as_mask / (double)chosen, fs = (double)as_self / (double)chosen,
           fo = (double)as_other / (double)chosen;
    /* a random residue equal to the original counts as unchanged: 10% + 10%/20 */
    CHECK(fabs(fm - 0.80) < 0.02 && fabs(fs - 0.105) < 0.015 && fabs(fo - 0.095) < 0.015,
          "80/10/10: %.3f %.3f %.3f", fm, fs, fo);
    free(tok);
    free(tgt);
    data_loader_free(&l);

    /* a tiny batch still gets a target */
    CHECK(data_loader_init(&l, db, p, DATA_SPLIT_TRAIN, 1, 3, 3, OBJECTIVE_MASKED) == 1, "init tiny");
    int32_t t3[3], g3[3];
    int all = 1;
    for (int b = 0; b < 200; b++) {
        data_loader_next(&l, t3, g3);
        int has_residue = 0, has_target = 0;
        for (int i = 0; i < 3; i++) {
            has_residue |= t3[i] != p->bos && t3[i] != p->eos;
            has_target |= g3[i] != DATA_IGNORE_INDEX;
        }
        all &= has_target || !has_residue;
    }
    CHECK(all, "every batch with a residue has a target");
    data_loader_free(&l);
}

/* Drawing k batches, saving the state, drawing m more; restoring the state in
 * the same and in a fresh loader must give those m batches again. */
static void check_resume(const FastaSet *fs, Objective obj, int64_t batch, int64_t seq, int k, int m)
{
    const Alphabet *a = fs->alphabet;
    DataLoader l, fresh;
    CHECK(data_loader_init(&l, fs, a, DATA_SPLIT_TRAIN, batch, seq, 99, obj) == 1, "init");
    int64_t n = batch * seq;
    int32_t *tok = malloc((size_t)n * 4), *tgt = malloc((size_t)n * 4);
    int32_t *tok_m = malloc((size_t)(n * m) * 4), *tgt_m = malloc((size_t)(n * m) * 4);
    for (int i = 0; i < k; i++)
        data_loader_next(&l, tok, tgt);
    DataLoaderState st;
    data_loader_state_get(&l, &st);
    for (int i = 0; i < m; i++)
        data_loader_next(&l, tok_m + i * n, tgt_m + i * n);
    int64_t epochs = l.st.epoch;
    CHECK(data_loader_state_set(&l, &st) == 1, "restore");
    int same = 1;
    for (int i = 0; i < m; i++) {
        data_loader_next(&l, tok, tgt);
        same &= memcmp(tok, tok_m + i * n, (size_t)n * 4) == 0 && memcmp(tgt, tgt_m + i * n, (size_t)n * 4) == 0;
    }
    CHECK(same, "obj %d: same loader replays the batches", obj);
    CHECK(data_loader_init(&fresh, fs, a, DATA_SPLIT_TRAIN, batch, seq, 99, obj) == 1, "init fresh");
    DataLoaderState copy;
    memcpy(&copy, &st, sizeof st);  /* as if written to and read from a checkpoint */
    CHECK(data_loader_state_set(&fresh, &copy) == 1, "restore into a fresh loader");
    same = 1;
    for (int i = 0; i < m; i++) {
        data_loader_next(&fresh, tok, tgt);
        same &= memcmp(tok, tok_m + i * n, (size_t)n * 4) == 0 && memcmp(tgt, tgt_m + i * n, (size_t)n * 4) == 0;
    }
    CHECK(same, "obj %d: a fresh loader replays the batches (epochs %lld -> %lld)", obj, (long long)st.epoch,
          (long long)epochs);
    data_loader_free(&fresh);

    /* a state from another seed or another seq is refused */
    CHECK(data_loader_init(&fresh, fs, a, DATA_SPLIT_TRAIN, batch, seq, 100, obj) == 1, "init other");
    CHECK(data_loader_state_set(&fresh, &st) == 0, "other seed refused");
    data_loader_free(&fresh);
    CHECK(data_loader_init(&fresh, fs, a, DATA_SPLIT_TRAIN, batch, seq + 1, 99, obj) == 1, "init other");
    CHECK(data_loader_state_set(&fresh, &st) == 0, "other seq refused");
    data_loader_free(&fresh);
    DataLoaderState broken = st;
    broken.pos = l.nunits + 5;
    CHECK(data_loader_state_set(&l, &broken) == 0, "out-of-range state refused");
    broken = st;
    broken.off = 1 << 30;
    CHECK(data_loader_state_set(&l, &broken) == 0, "out-of-range offset refused");

    free(tok);
    free(tgt);
    free(tok_m);
    free(tgt_m);
    data_loader_free(&l);
}

static void test_resume(const FastaSet *db)
{
    const Alphabet *p = alphabet_get(ALPHABET_PROTEIN);
    FastaSet small;
    fasta_set_init(&small);
    char err[256];
    CHECK(fasta_read(PROTEASES, p, &small, err, sizeof err) == 1, "%s", err);
    if (small.nseq == 10) {
        /* an epoch is about 10 batches here: the replay crosses epochs */
        check_resume(&small, OBJECTIVE_CAUSAL, 4, 64, 7, 25);
        check_resume(&small, OBJECTIVE_MASKED, 4, 64, 7, 25);
    }
    fasta_set_free(&small);
    check_resume(db, OBJECTIVE_MASKED, 2, 256, 5, 5);
}

/* A validation pass: fixed rows, padding after the end, identical after reset. */
static void test_validation(const FastaSet *db, const FastaSet *gold)
{
    for (int o = 0; o < 2; o++) {
        Objective obj = o ? OBJECTIVE_MASKED : OBJECTIVE_CAUSAL;
        const FastaSet *fs = o ? db : gold;
        DataLoader l;
        int64_t batch = 4, seq = 1024, n = batch * seq;
        CHECK(data_loader_init(&l, fs, fs->alphabet, DATA_SPLIT_VAL, batch, seq, 5, obj) == 1, "init");
        int64_t rows = data_loader_rows(&l), nb = (rows + batch - 1) / batch;
        int32_t *tok = malloc((size_t)(n * (nb + 1)) * 4), *tgt = malloc((size_t)(n * (nb + 1)) * 4);
        int32_t *tok2 = malloc((size_t)n * 4), *tgt2 = malloc((size_t)n * 4);
        for (int64_t b = 0; b <= nb; b++)
            data_loader_next(&l, tok + b * n, tgt + b * n);
        int64_t targets = 0, late = 0;
        for (int64_t i = 0; i < n * (nb + 1); i++) {
            targets += tgt[i] != DATA_IGNORE_INDEX;
            late += i >= rows * seq && (tgt[i] != DATA_IGNORE_INDEX || tok[i] != fs->alphabet->pad);
        }
        CHECK(late == 0, "obj %d: rows after the pass are padding (%lld)", o, (long long)late);
        int64_t stream_len = 0;
        uint8_t *sp = data_split_assign(fs, DATA_VAL_FRACTION);
        for (int64_t i = 0; i < fs->nseq; i++)
            if (sp[i])
                stream_len += (fasta_seq_len(fs, i) < seq - 2 ? fasta_seq_len(fs, i) : seq - 2) + 2;
        free(sp);
        if (obj == OBJECTIVE_CAUSAL) {
            CHECK(targets == stream_len - 1, "causal: every stream token but the first is a target: %lld vs %lld",
                  (long long)targets, (long long)stream_len);
            CHECK(tgt[(rows - 1) * seq - 1] != DATA_IGNORE_INDEX || rows == 1, "only the last row is padded");
        }
        data_loader_reset(&l);
        int same = 1;
        for (int64_t b = 0; b <= nb; b++) {
            data_loader_next(&l, tok2, tgt2);
            same &= memcmp(tok2, tok + b * n, (size_t)n * 4) == 0 && memcmp(tgt2, tgt + b * n, (size_t)n * 4) == 0;
        }
        CHECK(same, "obj %d: each evaluation sees the same rows and masks", o);
        free(tok);
        free(tgt);
        free(tok2);
        free(tgt2);
        data_loader_free(&l);
    }
}

static void test_entropy(const FastaSet *db, const FastaSet *gold)
{
    /* by hand: sequences AAAA and CCGG, whichever is in validation */
    const Alphabet *d = alphabet_get(ALPHABET_DNA);
    FastaSet fs;
    fasta_set_init(&fs);
    char err[256];
    CHECK(fasta_read(write_text("entropy.fa", ">a\nAAAA\n>b\nCCGG\n"), d, &fs, err, sizeof err) == 1, "%s", err);
    uint8_t *s = data_split_assign(&fs, DATA_VAL_FRACTION);
    int v = s[0] ? 0 : 1;  /* the validation sequence */
    free(s);
    double hm = v == 0 ? 0 : log(2);
    double hc = v == 0 ? -(4 / 6.0) * log(4 / 6.0) - 2 * (1 / 6.0) * log(1 / 6.0)
                       : -2 * (2 / 6.0) * log(2 / 6.0) - 2 * (1 / 6.0) * log(1 / 6.0);
    CHECK(fabs(data_unigram_entropy(&fs, DATA_VAL_FRACTION, DATA_SPLIT_VAL, OBJECTIVE_MASKED) - hm) < 1e-12,
          "masked entropy");
    CHECK(fabs(data_unigram_entropy(&fs, DATA_VAL_FRACTION, DATA_SPLIT_VAL, OBJECTIVE_CAUSAL) - hc) < 1e-12,
          "causal entropy");
    fasta_set_free(&fs);

    double hp = data_unigram_entropy(db, DATA_VAL_FRACTION, DATA_SPLIT_VAL, OBJECTIVE_MASKED);
    double hd = data_unigram_entropy(gold, DATA_VAL_FRACTION, DATA_SPLIT_VAL, OBJECTIVE_CAUSAL);
    CHECK(hp > 2.8 && hp < log(20), "protein unigram entropy %.4f nats", hp);
    CHECK(hd > 1.3 && hd < log(4) + 0.05, "16S unigram entropy %.4f nats", hd);
    printf("test_data: validation unigram entropy: proteins %.4f nats, 16S %.4f nats\n", hp, hd);
}

/* packing rows: every row is one sequence (BOS, at most seq - 2 residues,
 * EOS) then padding; padding is never a target; every training sequence
 * once per epoch; causal targets are the next token inside the row only. */
static void test_one_per_row(const FastaSet *db)
{
    const Alphabet *p = db->alphabet;
    for (int o = 0; o < 2; o++) {
        Objective obj = o ? OBJECTIVE_MASKED : OBJECTIVE_CAUSAL;
        DataOptions opt = DATA_OPTIONS_DEFAULT;
        opt.one_per_row = 1;
        int64_t batch = 16, seq = 300, n = batch * seq;
        DataLoader l;
        CHECK(data_loader_init_opts(&l, db, p, DATA_SPLIT_TRAIN, batch, seq, 4, obj, &opt) == 1, "rows init");
        int32_t *tok = malloc((size_t)n * 4), *tgt = malloc((size_t)n * 4);
        int ok = 1, padded = 0;
        int64_t rows = 0, nb = (l.nseqs + batch - 1) / batch;
        for (int64_t b = 0; b < nb; b++) {
            data_loader_next(&l, tok, tgt);
            for (int64_t r = 0; r < batch; r++) {
                const int32_t *t = tok + r * seq, *g = tgt + r * seq;
                int64_t eos = -1, bos = 0;
                for (int64_t i = 0; i < seq; i++) {
                    bos += t[i] == p->bos;
                    if (t[i] == p->eos && eos < 0)
                        eos = i;
                }
                ok &= t[0] == p->bos && bos == 1 && eos > 0 && eos <= seq - 1;
                for (int64_t i = eos + 1; eos > 0 && i < seq; i++) {
                    ok &= t[i] == p->pad && g[i] == DATA_IGNORE_INDEX;
                    padded = 1;
                }
                if (obj == OBJECTIVE_CAUSAL && eos > 0) {
                    ok &= g[eos] == DATA_IGNORE_INDEX;  /* nothing after EOS in this row to predict */
                    for (int64_t i = 0; i < eos; i++)
                        ok &= g[i] == t[i + 1];
                }
                rows++;
            }
        }
        CHECK(ok, "obj %d: one sequence per row, then padding that is never a target", o);
        CHECK(padded, "obj %d: short sequences are padded", o);
        CHECK(data_loader_rows(&l) == l.nseqs, "obj %d: one row per sequence in a pass", o);
        CHECK(l.st.epoch == 1 && rows - l.nseqs < batch, "obj %d: %lld rows: one epoch, then the next begins", o,
              (long long)rows);
        free(tok);
        free(tgt);
        data_loader_free(&l);
    }
}

/* Cluster-weighted sampling: with clusters, an epoch draws one member of
 * every training cluster, exactly once per cluster; a cluster's members are
 * all on one side of the split; other epochs draw other members. */
static void test_clusters(const FastaSet *db0)
{
    FastaSet fs = *db0;  /* the same tokens, with clusters of 1..5 consecutive sequences */
    int64_t n = fs.nseq;
    int64_t *of = malloc((size_t)n * 8), *off = malloc((size_t)(n + 1) * 8), *mem = malloc((size_t)n * 8), nc = 0;
    for (int64_t i = 0; i < n; nc++) {
        int64_t size = 1 + nc % 5;
        off[nc] = i;
        for (int64_t k = 0; k < size && i < n; k++, i++) {
            of[i] = nc;
            mem[i] = i;
        }
    }
    off[nc] = n;
    fs.cluster_of = of;
    fs.cluster_off = off;
    fs.cluster_members = mem;
    fs.nclusters = nc;
    uint8_t *sp = data_split_assign(&fs, DATA_VAL_FRACTION);
    int together = 1;
    int64_t ntrain_clusters = 0;
    for (int64_t c = 0; c < nc; c++) {
        for (int64_t k = off[c]; k < off[c + 1]; k++)
            together &= sp[k] == sp[off[c]];
        ntrain_clusters += sp[off[c]] == DATA_SPLIT_TRAIN;
    }
    CHECK(together, "a cluster's members are on one side of the split");
    DataOptions opt = DATA_OPTIONS_DEFAULT;
    opt.one_per_row = 1;
    DataLoader l;
    int64_t seq = 40, batch = 1;
    CHECK(data_loader_init_opts(&l, &fs, fs.alphabet, DATA_SPLIT_TRAIN, batch, seq, 9, OBJECTIVE_CAUSAL, &opt) == 1,
          "clusters: init");
    CHECK(l.nunits == nc, "the loader's units are the clusters");
    int64_t *seen = calloc((size_t)nc, 8);
    int64_t picked_diff = 0;
    int32_t tok[40], tgt[40];
    int ok = 1;
    for (int epoch = 0; epoch < 2; epoch++) {
        for (int64_t r = 0; r < ntrain_clusters; r++) {
            data_loader_next(&l, tok, tgt);
            int64_t id = l.cur_id, c = of[id];
            ok &= sp[id] == DATA_SPLIT_TRAIN && l.cur_unit == c;
            if (epoch == 0)
                seen[c]++;
            else if (seen[c] == 1 && off[c + 1] - off[c] > 1)
                picked_diff += 1;
        }
    }
    int once = 1;
    for (int64_t c = 0; c < nc; c++)
        once &= seen[c] == (sp[off[c]] == DATA_SPLIT_TRAIN);
    CHECK(ok && once, "clusters: one epoch draws every training cluster once (%lld clusters)",
          (long long)ntrain_clusters);
    CHECK(l.st.epoch >= 1 && picked_diff > 0, "clusters: the next epoch draws again");
    free(seen);
    free(sp);
    data_loader_free(&l);
    free(of);
    free(off);
    free(mem);
}

int main(void)
{
    /* passes/segment_attention.c writes these ids (it sits below data/) */
    CHECK(alphabet_get(ALPHABET_PROTEIN)->bos == 0 && alphabet_get(ALPHABET_PROTEIN)->pad == 1 &&
              alphabet_get(ALPHABET_DNA)->bos == 1 && alphabet_get(ALPHABET_DNA)->pad == 0,
          "BOS and padding ids as the segment-attention pass has them");
    test_alphabets();
    test_fasta_small();
    test_fasta_errors();
    FastaSet db, gold;
    fasta_set_init(&db);
    fasta_set_init(&gold);
    test_real_files(&db, &gold);
    if (db.nseq > 0 && gold.nseq > 0) {
        test_split(&db, &gold);
        test_causal();
        test_masked(&db);
        test_one_per_row(&db);
        test_clusters(&db);
        test_resume(&db);
        test_validation(&db, &gold);
        test_entropy(&db, &gold);
    }
    fasta_set_free(&db);
    fasta_set_free(&gold);
    remove_scratch();
    printf("test_data: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
