/* test_safetensors.c - unit tests of runtime/safetensors: round trips of
 * every dtype (empty tensors and scalars included), the exact bytes the
 * writer produces, hand-made fixtures read by the reader, every kind of
 * corrupt file refused with a message naming it, and saves that fail
 * without harming the checkpoint already on disk. Scratch files live in a
 * /tmp directory of their own that is removed at the end. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../util/util.h"
#include "../../formats/safetensors.h"
#include "check.h"


static char scratch[64];   /* this run's directory under /tmp */

static const char *spath(char buf[256], const char *name)
{
    snprintf(buf, 256, "%s/%s", scratch, name);
    return buf;
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    unsigned char *buf = malloc((size_t)len + 1);
    if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len)
        die("cannot read %s", path);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static void spit(const char *path, const void *buf, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0)
        die("cannot write %s", path);
}

static void put_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Writes a file by hand: length field, header text (padded with spaces to
 * a multiple of 8 when pad is set), data. */
static void write_raw(const char *path, const char *hdr, size_t hlen, int pad, const void *data, size_t dlen)
{
    size_t plen = pad ? (hlen + 7) / 8 * 8 : hlen;
    unsigned char *buf = malloc(8 + plen + dlen + 1);
    put_le64(buf, plen);
    memcpy(buf + 8, hdr, hlen);
    memset(buf + 8 + hlen, ' ', plen - hlen);
    if (dlen)
        memcpy(buf + 8 + plen, data, dlen);
    spit(path, buf, 8 + plen + dlen);
    free(buf);
}

/* st_read must refuse path, with a message that names it and says what. */
static void expect_fail(const char *path, const char *keyword, const char *what)
{
    SafeTensors st;
    char err[512];
    int ok = st_read(path, &st, err, sizeof err);
    CHECK(!ok, "%s: accepted", what);
    if (!ok) {
        CHECK(strstr(err, path) == err, "%s: message does not name the file: %s", what, err);
        CHECK(strstr(err, keyword) != NULL, "%s: message lacks \"%s\": %s", what, keyword, err);
        CHECK(st.ntensors == 0 && st.tensors == NULL && st.nmeta == 0, "%s: result not empty", what);
    }
    st_free(&st);
}

static int no_temp_files(void)
{
    DIR *d = opendir(scratch);
    struct dirent *e;
    int clean = 1;
    while ((e = readdir(d)) != NULL)
        clean &= strstr(e->d_name, ".tmp.") == NULL;
    closedir(d);
    return clean;
}

static void test_dtypes(void)
{
    static const size_t sizes[ST_DTYPE_COUNT] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};
    for (int i = 0; i < ST_DTYPE_COUNT; i++) {
        StDType t;
        CHECK(st_dtype_parse(st_dtype_name((StDType)i), &t) && t == (StDType)i, "dtype %d", i);
        CHECK(st_dtype_size((StDType)i) == sizes[i], "size of %s", st_dtype_name((StDType)i));
    }
    StDType t;
    CHECK(!st_dtype_parse("f32", &t), "dtypes are case-sensitive");
    CHECK(!st_dtype_parse("F4", &t), "sub-byte dtypes are not supported");
    CHECK(strcmp(st_dtype_name(ST_BF16), "BF16") == 0, "BF16 spelling");
}

static void test_hash(void)
{
    /* Published FNV-1a 64 test vectors. */
    CHECK(hash64("", 0) == UINT64_C(0xcbf29ce484222325), "empty");
    CHECK(hash64("a", 1) == UINT64_C(0xaf63dc4c8601ec8c), "a: %016" PRIx64, hash64("a", 1));
    CHECK(hash64("foobar", 6) == UINT64_C(0x85944171f73967e8), "foobar: %016" PRIx64, hash64("foobar", 6));
    CHECK(hash64_update(hash64("foo", 3), "bar", 3) == hash64("foobar", 6), "update continues");
}

/* The tensors of the round trip: one of every dtype, plus empty ones and
 * scalars. */
typedef struct Spec {
    const char *name;
    StDType dtype;
    int rank;
    int64_t shape[4];
} Spec;

static const Spec specs[] = {
    {"bool", ST_BOOL, 1, {5}},
    {"u8", ST_U8, 2, {3, 7}},
    {"i8", ST_I8, 1, {9}},
    {"f8_e5m2", ST_F8_E5M2, 2, {2, 2}},
    {"f8_e4m3", ST_F8_E4M3, 1, {3}},
    {"i16", ST_I16, 3, {2, 3, 1}},
    {"u16", ST_U16, 1, {4}},
    {"f16", ST_F16, 2, {4, 4}},
    {"layers.0.moe.w_gate", ST_BF16, 3, {2, 4, 3}},
    {"i32", ST_I32, 1, {6}},
    {"u32", ST_U32, 1, {1}},
    {"f32", ST_F32, 4, {2, 1, 3, 2}},
    {"f64", ST_F64, 2, {3, 3}},
    {"i64", ST_I64, 1, {2}},
    {"u64", ST_U64, 1, {3}},
    {"empty", ST_F32, 2, {3, 0}},
    {"scalar", ST_F64, 0, {0}},
    {"empty_i64", ST_I64, 1, {0}},
    {"scalar_bf16", ST_BF16, 0, {0}},
    {"n\xc3\xa4me \"quoted\" \\ /", ST_U8, 1, {2}},
};
#define NSPECS ARRAY_LEN(specs)

static size_t spec_bytes(const Spec *s)
{
    size_t n = st_dtype_size(s->dtype);
    for (int d = 0; d < s->rank; d++)
        n *= (size_t)s->shape[d];
    return n;
}

/* Deterministic contents that differ between tensors and never start
 * with whitespace (see test_corrupt_flip). */
static unsigned char *spec_data(int i)
{
    size_t n = spec_bytes(&specs[i]);
    unsigned char *p = malloc(n + 1);
    for (size_t k = 0; k < n; k++)
        p[k] = (unsigned char)(0x41 + (k * 7 + (size_t)i * 13) % 150);
    return p;
}

static const char *meta_keys[] = {"format", "moec.model_hash", "unicode", "quote\"key", "empty"};
static const char *meta_vals[] = {"pt", "0123456789abcdef", "h\xc3\xa9llo \xe2\x9c\x93", "va\\lue\n\ttab", ""};

static void write_good(const char *path, unsigned char **data)
{
    SafeTensorsWriter w;
    st_writer_init(&w);
    st_writer_set_metadata(&w, "format", "old value, replaced below");
    for (int i = 0; i < NSPECS; i++) {
        data[i] = spec_data(i);
        st_writer_add(&w, specs[i].name, specs[i].dtype, specs[i].rank, specs[i].rank ? specs[i].shape : NULL,
                      data[i], spec_bytes(&specs[i]));
    }
    for (int i = 0; i < ARRAY_LEN(meta_keys); i++)
        st_writer_set_metadata(&w, meta_keys[i], meta_vals[i]);
    char err[512];
    CHECK(st_writer_save(&w, path, err, sizeof err), "save: %s", err);
    st_writer_free(&w);
}

static void check_good(const SafeTensors *st, unsigned char **data, const char *what)
{
    CHECK(st->ntensors == NSPECS, "%s: %d tensors", what, st->ntensors);
    for (int i = 0; i < NSPECS && i < st->ntensors; i++) {
        const SafeTensor *t = &st->tensors[i];
        const Spec *s = &specs[i];
        CHECK(strcmp(t->name, s->name) == 0, "%s: tensor %d is %s, not %s (file order)", what, i, t->name, s->name);
        CHECK(st_find(st, s->name) == t, "%s: st_find(%s)", what, s->name);
        CHECK(t->dtype == s->dtype && t->rank == s->rank, "%s: %s dtype/rank", what, s->name);
        CHECK((t->rank == 0) == (t->shape == NULL), "%s: %s shape pointer", what, s->name);
        for (int d = 0; d < t->rank && d < s->rank; d++)
            CHECK(t->shape[d] == s->shape[d], "%s: %s dim %d", what, s->name, d);
        CHECK(t->nbytes == spec_bytes(s), "%s: %s has %zu bytes", what, s->name, t->nbytes);
        CHECK(t->data != NULL, "%s: %s data pointer", what, s->name);
        CHECK(t->nbytes == spec_bytes(s) && memcmp(t->data, data[i], t->nbytes) == 0, "%s: %s data", what, s->name);
    }
}

static void test_roundtrip(void)
{
    char path[256];
    spath(path, "good.safetensors");
    unsigned char *data[NSPECS];
    write_good(path, data);

    SafeTensors st;
    char err[512];
    CHECK(st_read(path, &st, err, sizeof err), "read: %s", err);
    check_good(&st, data, "round trip");
    CHECK((uintptr_t)st.tensors[0].data % 64 == 0, "data area is 64-byte aligned");
    const SafeTensor *bf = st_find(&st, "layers.0.moe.w_gate");
    CHECK(bf && bf->shape[0] == 2 && bf->shape[1] == 4 && bf->shape[2] == 3, "3-d BF16 shape");
    CHECK(st_find(&st, "missing") == NULL && st_find(&st, "") == NULL, "absent names");

    CHECK(st.nmeta == ARRAY_LEN(meta_keys), "%d metadata entries", st.nmeta);
    for (int i = 0; i < ARRAY_LEN(meta_keys); i++) {
        const char *v = st_metadata(&st, meta_keys[i]);
        CHECK(v && strcmp(v, meta_vals[i]) == 0, "metadata %s = %s", meta_keys[i], v ? v : "(null)");
        CHECK(i >= st.nmeta || strcmp(st.meta[i].key, meta_keys[i]) == 0, "metadata order at %d", i);
    }
    CHECK(st_metadata(&st, "absent") == NULL, "absent metadata");
    st_free(&st);
    st_free(&st);   /* harmless twice */
    for (int i = 0; i < NSPECS; i++)
        free(data[i]);

    /* No tensors and no metadata is a valid file too. */
    SafeTensorsWriter w;
    st_writer_init(&w);
    spath(path, "none.safetensors");
    CHECK(st_writer_save(&w, path, err, sizeof err), "save of nothing: %s", err);
    st_writer_free(&w);
    CHECK(st_read(path, &st, err, sizeof err) && st.ntensors == 0 && st.nmeta == 0, "read of nothing: %s", err);
    st_free(&st);
    size_t n;
    unsigned char *buf = slurp(path, &n);
    CHECK(n == 16 && get_le64(buf) == 8 && memcmp(buf + 8, "{}      ", 8) == 0, "empty file bytes");
    free(buf);

    /* Many tensors: the name index has to be right, not just small. */
    st_writer_init(&w);
    enum { MANY = 5000 };
    static unsigned char bytes[MANY];
    for (int i = 0; i < MANY; i++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d.w", (i * 7919) % MANY);
        bytes[i] = (unsigned char)i;
        int64_t one = 1;
        st_writer_add(&w, name, ST_U8, 1, &one, &bytes[i], 1);
    }
    spath(path, "many.safetensors");
    CHECK(st_writer_save(&w, path, err, sizeof err), "save many: %s", err);
    st_writer_free(&w);
    CHECK(st_read(path, &st, err, sizeof err) && st.ntensors == MANY, "read many: %s", err);
    int found = 0;
    for (int i = 0; i < MANY && st.ntensors == MANY; i++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%d.w", (i * 7919) % MANY);
        const SafeTensor *t = st_find(&st, name);
        found += t && t == &st.tensors[i] && *(const unsigned char *)t->data == (unsigned char)i;
    }
    CHECK(found == MANY, "found %d of %d", found, MANY);
    st_free(&st);
}

/* The bytes of our files, checked against the spec without our reader. */
static void test_format_bytes(void)
{
    char path[256];
    spath(path, "good.safetensors");
    unsigned char *data[NSPECS];
    write_good(path, data);
    size_t size;
    unsigned char *buf = slurp(path, &size);
    uint64_t n = get_le64(buf);
    CHECK(size >= 8 && n <= size - 8, "header size %" PRIu64 " in a file of %zu", n, size);
    CHECK((8 + n) % 8 == 0, "data starts 8-byte aligned (header %" PRIu64 ")", n);
    CHECK(buf[8] == '{', "header starts with {");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts((const char *)buf + 8, n, &end, 0);
    CHECK(root && cJSON_IsObject(root), "header parses with cJSON");
    if (!root) {
        free(buf);
        return;
    }
    for (const char *q = end; q < (const char *)buf + 8 + n; q++)
        CHECK(*q == ' ', "padding is spaces");
    CHECK((size_t)((const char *)buf + 8 + n - end) < 8, "at most 7 bytes of padding");

    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    CHECK(cJSON_IsObject(meta) && cJSON_GetArraySize(meta) == ARRAY_LEN(meta_keys), "metadata object");
    for (int i = 0; i < ARRAY_LEN(meta_keys); i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, meta_keys[i]);
        CHECK(cJSON_IsString(v) && strcmp(v->valuestring, meta_vals[i]) == 0, "metadata %s in JSON", meta_keys[i]);
    }

    uint64_t dsize = size - 8 - n, cursor = 0;
    const unsigned char *area = buf + 8 + n;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0)
            continue;
        const Spec *s = &specs[i];
        CHECK(i < NSPECS && strcmp(e->string, s->name) == 0, "header order at %d: %s", i, e->string);
        if (i >= NSPECS)
            break;
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        CHECK(cJSON_IsString(dt) && strcmp(dt->valuestring, st_dtype_name(s->dtype)) == 0, "%s dtype", s->name);
        CHECK(cJSON_IsArray(sh) && cJSON_GetArraySize(sh) == s->rank, "%s rank", s->name);
        for (int d = 0; d < s->rank; d++) {
            const cJSON *v = cJSON_GetArrayItem(sh, d);
            CHECK(cJSON_IsNumber(v) && v->valuedouble == (double)s->shape[d], "%s dim %d", s->name, d);
        }
        CHECK(cJSON_IsArray(of) && cJSON_GetArraySize(of) == 2, "%s offsets", s->name);
        uint64_t b = (uint64_t)cJSON_GetArrayItem(of, 0)->valuedouble;
        uint64_t en = (uint64_t)cJSON_GetArrayItem(of, 1)->valuedouble;
        CHECK(b == cursor, "%s begins at %" PRIu64 ", not at %" PRIu64 " (contiguous)", s->name, b, cursor);
        CHECK(en - b == spec_bytes(s), "%s offsets span %" PRIu64, s->name, en - b);
        CHECK(en <= dsize && memcmp(area + b, data[i], spec_bytes(s)) == 0, "%s bytes in the data area", s->name);
        cursor = en;
        i++;
    }
    CHECK(i == NSPECS, "%d tensors in the header", i);
    CHECK(cursor == dsize, "tensors end at %" PRIu64 ", the data area at %" PRIu64, cursor, dsize);
    cJSON_Delete(root);
    free(buf);
    for (int k = 0; k < NSPECS; k++)
        free(data[k]);

    /* One small tensor: the whole file, byte for byte. */
    static const char json[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    static const unsigned char vals[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40};   /* 1.0f, 2.0f */
    size_t jlen = sizeof json - 1, plen = (jlen + 7) / 8 * 8;
    unsigned char want[128];
    put_le64(want, plen);
    memcpy(want + 8, json, jlen);
    memset(want + 8 + jlen, ' ', plen - jlen);
    memcpy(want + 8 + plen, vals, 8);
    SafeTensorsWriter w;
    st_writer_init(&w);
    int64_t two = 2;
    float f[2] = {1.0f, 2.0f};
    st_writer_add(&w, "a", ST_F32, 1, &two, f, sizeof f);
    char err[512];
    spath(path, "small.safetensors");
    CHECK(st_writer_save(&w, path, err, sizeof err), "save small: %s", err);
    st_writer_free(&w);
    buf = slurp(path, &size);
    CHECK(size == 8 + plen + 8 && memcmp(buf, want, size) == 0, "small file bytes (%zu bytes)", size);
    free(buf);

    /* Dims too large for cJSON's plain number printing stay integers. */
    st_writer_init(&w);
    int64_t big[2] = {INT64_C(1000000000000000), 0};
    st_writer_add(&w, "wide", ST_U8, 2, big, NULL, 0);
    spath(path, "wide.safetensors");
    CHECK(st_writer_save(&w, path, err, sizeof err), "save wide: %s", err);
    st_writer_free(&w);
    buf = slurp(path, &size);
    CHECK(memmem(buf, size, "[1000000000000000,0]", 20) != NULL, "big dim printed as an integer");
    free(buf);
    SafeTensors st;
    CHECK(st_read(path, &st, err, sizeof err) && st.tensors[0].shape[0] == big[0], "wide reads back: %s", err);
    st_free(&st);
}

/* Files built byte by byte from the spec: an independent check that the
 * reader reads the format, not merely what our writer writes. */
static void test_fixtures(void)
{
    char path[256];
    SafeTensors st;
    char err[512];

    /* The spec's example, padded to 8 bytes with spaces. */
    static const char h1[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    unsigned char file1[8 + 64 + 8];
    CHECK(sizeof h1 - 1 == 54, "fixture header is %zu bytes", sizeof h1 - 1);
    static const unsigned char len1[8] = {56, 0, 0, 0, 0, 0, 0, 0};   /* 54 bytes of JSON, 2 spaces */
    memcpy(file1, len1, 8);
    memcpy(file1 + 8, h1, 54);
    memcpy(file1 + 8 + 54, "  ", 2);
    static const unsigned char f32s[8] = {0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40};   /* 1.0f, 2.0f */
    memcpy(file1 + 64, f32s, 8);
    spath(path, "fixture1.safetensors");
    spit(path, file1, 72);
    CHECK(st_read(path, &st, err, sizeof err), "fixture 1: %s", err);
    if (st.ntensors == 1) {
        const SafeTensor *t = st_find(&st, "a");
        CHECK(t == &st.tensors[0] && t->dtype == ST_F32 && t->rank == 1 && t->shape[0] == 2 && t->nbytes == 8,
              "fixture 1 tensor");
        float v[2];
        memcpy(v, t->data, 8);
        CHECK(v[0] == 1.0f && v[1] == 2.0f, "fixture 1 values %g %g", v[0], v[1]);
        CHECK(st.nmeta == 0, "fixture 1 has no metadata");
    } else {
        CHECK(0, "fixture 1 has %d tensors", st.ntensors);
    }
    st_free(&st);

    /* Another writer's habits: unpadded header of odd length, newlines in
     * the JSON, header order unlike data order, an empty tensor touching
     * a full one, and a scalar. */
    static const char h2[] = "{\"__metadata__\":{\"format\":\"pt\"},\n"
                             " \"b\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[4,8]},\n"
                             " \"z\":{\"dtype\":\"I64\",\"shape\":[0,5],\"data_offsets\":[4,4]},\n"
                             " \"s\":{\"shape\":[],\"data_offsets\":[8,9],\"dtype\":\"U8\"},\n"
                             " \"a\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[0,4]}}\n";
    static const unsigned char d2[9] = {1, 2, 3, 4, 0x80, 0x3f, 0x00, 0xc0, 0x7f};   /* bf16 1.0, -2.0 */
    size_t hl = sizeof h2 - 1;
    CHECK(hl % 8 != 0, "fixture 2 header is unaligned (%zu)", hl);
    unsigned char *file2 = malloc(8 + hl + 9);
    for (int i = 0; i < 8; i++)
        file2[i] = (unsigned char)(hl >> (8 * i));
    memcpy(file2 + 8, h2, hl);
    memcpy(file2 + 8 + hl, d2, 9);
    spath(path, "fixture2.safetensors");
    spit(path, file2, 8 + hl + 9);
    free(file2);
    CHECK(st_read(path, &st, err, sizeof err), "fixture 2: %s", err);
    if (st.ntensors == 4) {
        static const char *order[4] = {"a", "z", "b", "s"};
        for (int i = 0; i < 4; i++) {
            CHECK(strcmp(st.tensors[i].name, order[i]) == 0, "fixture 2 order %d: %s", i, st.tensors[i].name);
            CHECK(st_find(&st, order[i]) == &st.tensors[i], "fixture 2 find %s", order[i]);
        }
        const SafeTensor *a = st_find(&st, "a"), *b = st_find(&st, "b"), *z = st_find(&st, "z"),
                         *s = st_find(&st, "s");
        CHECK(a && a->rank == 2 && a->nbytes == 4 && memcmp(a->data, d2, 4) == 0, "fixture 2 a");
        CHECK(b && b->dtype == ST_BF16 && b->nbytes == 4 && memcmp(b->data, d2 + 4, 4) == 0, "fixture 2 b");
        CHECK(z && z->dtype == ST_I64 && z->nbytes == 0 && z->shape[1] == 5, "fixture 2 z");
        CHECK(s && s->rank == 0 && s->shape == NULL && s->nbytes == 1 && *(const unsigned char *)s->data == 0x7f,
              "fixture 2 scalar");
        const char *fmt = st_metadata(&st, "format");
        CHECK(fmt && strcmp(fmt, "pt") == 0, "fixture 2 metadata");
    } else {
        CHECK(0, "fixture 2 has %d tensors", st.ntensors);
    }
    st_free(&st);

    /* The smallest file: "{}" and no data. */
    spath(path, "fixture3.safetensors");
    write_raw(path, "{}", 2, 0, NULL, 0);
    CHECK(st_read(path, &st, err, sizeof err) && st.ntensors == 0, "fixture 3: %s", err);
    st_free(&st);
}

static void test_corrupt_truncate(void)
{
    char path[256], cut[256];
    unsigned char *data[NSPECS];
    spath(path, "good.safetensors");
    write_good(path, data);
    for (int i = 0; i < NSPECS; i++)
        free(data[i]);
    size_t size;
    unsigned char *buf = slurp(path, &size);
    uint64_t n = get_le64(buf);
    spath(cut, "cut.safetensors");
    int refused = 0;
    spit(cut, buf, size);
    int fd = open(cut, O_WRONLY);
    for (size_t len = size; len-- > 0;) {
        if (ftruncate(fd, (off_t)len) != 0)   /* cheaper than rewriting the file */
            die("cannot truncate %s", cut);
        SafeTensors st;
        char err[512];
        int ok = st_read(cut, &st, err, sizeof err);
        refused += !ok && strstr(err, cut) == err;
        st_free(&st);
    }
    close(fd);
    CHECK(refused == (int)size, "%d of %zu truncations refused", refused, size);
    spit(cut, buf, 0);
    expect_fail(cut, "too short", "empty file");
    spit(cut, buf, 7);
    expect_fail(cut, "too short", "7 bytes");
    spit(cut, buf, 8);
    expect_fail(cut, "larger than the rest", "only the size");
    spit(cut, buf, 8 + n - 1);
    expect_fail(cut, "larger than the rest", "header cut short");
    spit(cut, buf, size - 1);
    expect_fail(cut, "past the end of the data area", "data cut short");
    free(buf);
}

static void test_corrupt_header_size(void)
{
    char path[256], bad[256];
    unsigned char *data[NSPECS];
    spath(path, "good.safetensors");
    write_good(path, data);
    for (int i = 0; i < NSPECS; i++)
        free(data[i]);
    size_t size;
    unsigned char *buf = slurp(path, &size);
    uint64_t n = get_le64(buf);
    spath(bad, "badsize.safetensors");
    static const struct {
        uint64_t v;
        const char *keyword;
    } huge[] = {
        {UINT64_MAX, "absurd"},
        {UINT64_C(1) << 63, "absurd"},
        {UINT64_C(0x7fffffffffffffff), "absurd"},
        {100000001, "absurd"},
        {UINT64_C(1) << 32, "absurd"},
        {0, "header size is 0"},
    };
    for (int i = 0; i < ARRAY_LEN(huge); i++) {
        put_le64(buf, huge[i].v);
        spit(bad, buf, size);
        expect_fail(bad, huge[i].keyword, "huge header size");
    }
    uint64_t near[] = {size - 7, size - 8 + 1, size, n - 1, n + 1, n + 8, 1};
    /* n - 1 may only eat a padding space, so any message will do there. */
    const char *keywords[] = {"larger than the rest", "larger than the rest", "larger than the rest", "",
                              "stray bytes", "stray bytes", "JSON"};
    for (int i = 0; i < ARRAY_LEN(near); i++) {
        put_le64(buf, near[i]);
        spit(bad, buf, size);
        char what[64];
        snprintf(what, sizeof what, "header size %" PRIu64, near[i]);
        expect_fail(bad, keywords[i], what);
    }
    free(buf);
}

/* Every single-bit flip in the size field and the header: never a crash;
 * either refused, or (a flip inside a name or a metadata string) the same
 * tensors under other names. */
static void test_corrupt_flip(void)
{
    char path[256], bad[256];
    unsigned char *data[NSPECS];
    spath(path, "good.safetensors");
    write_good(path, data);
    size_t size;
    unsigned char *buf = slurp(path, &size);
    uint64_t n = get_le64(buf);
    spath(bad, "flip.safetensors");
    spit(bad, buf, size);
    int fd = open(bad, O_WRONLY);
    int refused = 0, accepted = 0, size_refused = 0;
    for (size_t pos = 0; pos < 8 + n; pos++) {
        for (int bit = 0; bit < 8; bit++) {
            /* Rewrite one byte in place, then put it back. */
            unsigned char flipped = buf[pos] ^ (unsigned char)(1u << bit);
            if (pwrite(fd, &flipped, 1, (off_t)pos) != 1)
                die("cannot write %s", bad);
            SafeTensors st;
            char err[512];
            int ok = st_read(bad, &st, err, sizeof err);
            if (pwrite(fd, &buf[pos], 1, (off_t)pos) != 1)
                die("cannot write %s", bad);
            if (!ok) {
                refused++;
                size_refused += pos < 8;
                CHECK(strstr(err, bad) == err, "message names the file: %s", err);
                continue;
            }
            accepted++;
            ok = st.ntensors == NSPECS;
            for (int i = 0; ok && i < NSPECS; i++) {
                const SafeTensor *t = &st.tensors[i];
                ok = t->dtype == specs[i].dtype && t->rank == specs[i].rank && t->nbytes == spec_bytes(&specs[i]) &&
                     memcmp(t->data, data[i], t->nbytes) == 0;
                /* An empty tensor's other dims leave no trace in the data. */
                for (int d = 0; ok && d < t->rank && t->nbytes; d++)
                    ok = t->shape[d] == specs[i].shape[d];
            }
            CHECK(ok, "flip of bit %d at byte %zu accepted with different tensors", bit, pos);
            st_free(&st);
        }
    }
    close(fd);
    CHECK(size_refused == 64, "%d of 64 flips in the size field refused", size_refused);
    CHECK(refused > accepted, "%d refused, %d accepted", refused, accepted);
    printf("test_safetensors: bit flips in the header: %d refused, %d accepted as renamed strings\n", refused,
           accepted);
    free(buf);
    for (int i = 0; i < NSPECS; i++)
        free(data[i]);
}

/* Edits of the header text of a good file, keeping its length, so that
 * only the edited field is wrong. */
static void test_corrupt_offsets_in_place(void)
{
    char path[256], bad[256];
    unsigned char *data[NSPECS];
    spath(path, "good.safetensors");
    write_good(path, data);
    for (int i = 0; i < NSPECS; i++)
        free(data[i]);
    size_t size;
    unsigned char *buf = slurp(path, &size);
    spath(bad, "edited.safetensors");
    static const struct {
        const char *from, *to, *keyword;
    } edits[] = {
        {"\"data_offsets\":[0,5]", "\"data_offsets\":[1,5]", "hold 4 bytes"},         /* bool [5] */
        {"\"data_offsets\":[0,5]", "\"data_offsets\":[5,0]", "end before"},
        {"\"data_offsets\":[0,5]", "\"data_offsets\":[0,6]", "hold 6 bytes"},
        {"\"data_offsets\":[5,26]", "\"data_offsets\":[0,21]", "overlap"},            /* u8 [3,7] */
        {"\"data_offsets\":[5,26]", "\"data_offsets\":[6,27]", "no tensor"},
        {"\"data_offsets\":[0,5]", "\"data_offsets\":[0;5]", "not valid JSON"},
        {"\"data_offsets\":[5,26]", "\"data_offsets\":[-5,6]", "must be integers"},
        {"\"shape\":[5]", "\"shape\":[6]", "hold 5 bytes"},
        {"\"shape\":[5]", "\"shape\":[-5", "JSON"},
        {"\"dtype\":\"BOOL\"", "\"dtype\":\"BOOM\"", "unknown dtype \"BOOM\""},
        {"\"dtype\":\"BOOL\"", "\"dtypes\":\"BOL\"", "unknown key \"dtypes\""},
    };
    for (int i = 0; i < ARRAY_LEN(edits); i++) {
        unsigned char *copy = malloc(size);
        memcpy(copy, buf, size);
        char *at = memmem(copy, size, edits[i].from, strlen(edits[i].from));
        CHECK(at && strlen(edits[i].from) == strlen(edits[i].to), "edit %d applies", i);
        if (at) {
            memcpy(at, edits[i].to, strlen(edits[i].to));
            spit(bad, copy, size);
            if (edits[i].keyword[0]) {
                expect_fail(bad, edits[i].keyword, edits[i].to);
            } else {
                SafeTensors st;
                char err[512];
                CHECK(st_read(bad, &st, err, sizeof err), "%s: %s", edits[i].to, err);
                st_free(&st);
            }
        }
        free(copy);
    }
    free(buf);
}

#define T_A "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}"
#define T_B "\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[8,16]}"

/* Headers written by hand over a 16-byte data area (24 where noted). */
static void test_corrupt_headers(void)
{
    static const struct {
        const char *hdr;
        size_t dlen;
        const char *keyword;   /* NULL: must be accepted */
    } cases[] = {
        {"{" T_A "," T_B "}", 16, NULL},
        {"{" T_A "," T_B ",\"e\":{\"dtype\":\"F32\",\"shape\":[0,9007199254740992],\"data_offsets\":[16,16]}}", 16,
         NULL},
        {"{\"__metadata__\":{}," T_A "," T_B "}", 16, NULL},
        {"[" T_A "]", 16, "does not start with '{'"},
        {" {" T_A "," T_B "}", 16, "does not start with '{'"},
        {"\"abc\"", 16, "does not start with '{'"},
        {"{" T_A "," T_B, 16, "not valid JSON"},
        {"{" T_A ";" T_B "}", 16, "not valid JSON"},
        {"{" T_A "," T_B "}x", 16, "stray bytes"},
        {"{" T_A "," T_B "}{}", 16, "stray bytes"},
        {"{\"a\":1," T_B "}", 16, "tensor 'a': expected an object, found a number"},
        {"{\"a\":[0,8]," T_B "}", 16, "expected an object, found an array"},
        {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}," T_B "}", 16, "missing \"dtype\""},
        {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}," T_B "}", 16, "missing \"shape\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}," T_B "}", 16, "missing \"data_offsets\""},
        {"{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}," T_B "}", 16, "\"dtype\" must be a string"},
        {"{\"a\":{\"dtype\":null,\"shape\":[2],\"data_offsets\":[0,8]}," T_B "}", 16, "found null"},
        {"{\"a\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}," T_B "}", 16, "unknown dtype \"F31\""},
        {"{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}," T_B "}", 16, "unknown dtype"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[\x11" "2],\"data_offsets\":[0,8]}," T_B "}", 16,
         "control byte 0x11 at offset 29"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}," T_B "}", 16, "\"shape\" must be an array"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}," T_B "}", 16, "shape[0] is -2"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,2.5],\"data_offsets\":[0,8]}," T_B "}", 16, "shape[1] is 2.5"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}," T_B "}", 16, "shape[0] is a string"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[true],\"data_offsets\":[0,8]}," T_B "}", 16, "a boolean"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}," T_B "}", 16, "dims must be integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,8]}," T_B "}", 16,
         "too large"},
        {"{\"a\":{\"dtype\":\"U64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}," T_B "}", 16,
         "dims must be integers"},
        {"{\"a\":{\"dtype\":\"U64\",\"shape\":[4503599627370496,4096],\"data_offsets\":[0,8]}," T_B "}", 16,
         "too large"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":\"0,8\"}," T_B "}", 16, "[begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}," T_B "}", 16, "[begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,8]}," T_B "}", 16, "[begin, end]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}," T_B "}", 16, "must be integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}," T_B "}", 16, "[0, a string]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}," T_B "}", 16, "end before"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}," T_B "}", 16, "past the end"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,18446744073709551616]}," T_B "}", 16,
         "must be integers"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}," T_B "}", 16, "need 12"},
        {"{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}," T_B "}", 16, "need 16"},
        {"{" T_A ",\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 16, "overlap"},
        {"{" T_A ",\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 16, "overlap"},
        {"{" T_A ",\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, "[8, 12) of the data area"},
        {"{" T_A "," T_B "}", 24, "[16, 24) of the data area belong to no tensor"},
        {"{\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "[0, 8) of the data area"},
        {"{}", 16, "belong to no tensor"},
        {"{" T_A "," T_A "}", 16, "duplicate tensor name 'a'"},
        {"{" T_A "," T_B ",\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[16,16]}}", 16,
         "duplicate tensor name 'a'"},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}," T_B "}", 16,
         "duplicate key \"dtype\""},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"crc\":1}," T_B "}", 16,
         "unknown key \"crc\""},
        {"{\"__metadata__\":{\"k\":1}," T_A "," T_B "}", 16, "metadata \"k\" must be a string, found a number"},
        {"{\"__metadata__\":{\"k\":\"v\",\"l\":{}}," T_A "," T_B "}", 16, "found an object"},
        {"{\"__metadata__\":{\"k\":null}," T_A "," T_B "}", 16, "found null"},
        {"{\"__metadata__\":\"v\"," T_A "," T_B "}", 16, "\"__metadata__\" must be an object"},
        {"{\"__metadata__\":{\"k\":\"v\",\"k\":\"w\"}," T_A "," T_B "}", 16, "duplicate metadata key \"k\""},
        {"{\"__metadata__\":{}," T_A ",\"__metadata__\":{}," T_B "}", 16, "\"__metadata__\" twice"},
        {"{\"\xff\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}," T_A "," T_B "}", 16, "UTF-8"},
        {"{\"\xc0\xaf\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}," T_A "," T_B "}", 16, "UTF-8"},
        {"{\"\xed\xa0\x80\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}," T_A "," T_B "}", 16, "UTF-8"},
        {"{\"\xe2\x9c\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]}," T_A "," T_B "}", 16, "UTF-8"},
    };
    static unsigned char area[24];
    for (int i = 0; i < 24; i++)
        area[i] = (unsigned char)(0xA0 + i);
    char path[256];
    spath(path, "hand.safetensors");
    for (int i = 0; i < ARRAY_LEN(cases); i++) {
        write_raw(path, cases[i].hdr, strlen(cases[i].hdr), 1, area, cases[i].dlen);
        if (cases[i].keyword) {
            expect_fail(path, cases[i].keyword, cases[i].hdr);
        } else {
            SafeTensors st;
            char err[512];
            CHECK(st_read(path, &st, err, sizeof err), "case %d refused: %s", i, err);
            st_free(&st);
        }
    }

    /* A NUL inside the header (a string literal cannot carry it). */
    static const char withnul[] = "{\"a\0\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}," T_B "}";
    write_raw(path, withnul, sizeof withnul - 1, 1, area, 16);
    expect_fail(path, "NUL byte at offset 3", "NUL in the header");
    /* NUL padding instead of spaces. */
    static const char nulpad[] = "{" T_A "," T_B "}\0\0";
    write_raw(path, nulpad, sizeof nulpad - 1, 0, area, 16);
    expect_fail(path, "NUL", "NUL padding");

    /* Nesting deeper than cJSON allows: refused, not a stack overflow. */
    enum { DEPTH = 100000 };
    char *deep = malloc(DEPTH * 2 + 16);
    size_t k = 0;
    deep[k++] = '{';
    memcpy(deep + k, "\"a\":", 4);
    k += 4;
    for (int i = 0; i < DEPTH; i++)
        deep[k++] = '[';
    for (int i = 0; i < DEPTH; i++)
        deep[k++] = ']';
    deep[k++] = '}';
    write_raw(path, deep, k, 1, area, 0);
    expect_fail(path, "not valid JSON", "deep nesting");
    free(deep);

    /* Not a file at all. */
    expect_fail(scratch, "not a regular file", "a directory");
    spath(path, "does-not-exist.safetensors");
    expect_fail(path, "cannot open", "a missing file");
}

/* A header order and a data order that differ, over 50 tensors. */
static void test_foreign_order(void)
{
    enum { N = 50 };
    int data_order[N], header_order[N];
    for (int i = 0; i < N; i++) {
        data_order[i] = (i * 17) % N;      /* tensor data_order[k] is k-th in the data area */
        header_order[i] = (i * 31 + 7) % N;
    }
    uint64_t begin[N], off = 0;
    for (int k = 0; k < N; k++) {
        int t = data_order[k];
        begin[t] = off;
        off += (uint64_t)t + 1;   /* tensor t is U8 [t + 1] */
    }
    unsigned char *area = malloc(off);
    for (int t = 0; t < N; t++)
        memset(area + begin[t], t + 1, (size_t)t + 1);
    cJSON *root = cJSON_CreateObject();
    for (int i = 0; i < N; i++) {
        int t = header_order[i];
        char name[16];
        snprintf(name, sizeof name, "t%d", t);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToObject(root, name, e);
        cJSON_AddStringToObject(e, "dtype", "U8");
        double dim = t + 1;
        cJSON_AddItemToObject(e, "shape", cJSON_CreateDoubleArray(&dim, 1));
        double offs[2] = {(double)begin[t], (double)(begin[t] + (uint64_t)t + 1)};
        cJSON_AddItemToObject(e, "data_offsets", cJSON_CreateDoubleArray(offs, 2));
    }
    char *text = cJSON_Print(root);   /* formatted, with newlines and tabs */
    cJSON_Delete(root);
    char path[256];
    spath(path, "foreign.safetensors");
    write_raw(path, text, strlen(text), 0, area, off);
    cJSON_free(text);
    free(area);

    SafeTensors st;
    char err[512];
    CHECK(st_read(path, &st, err, sizeof err) && st.ntensors == N, "foreign order: %s", err);
    int good = 0;
    for (int k = 0; k < st.ntensors; k++) {
        int t = data_order[k];
        char name[16];
        snprintf(name, sizeof name, "t%d", t);
        const SafeTensor *x = st_find(&st, name);
        const unsigned char *p = x ? x->data : NULL;
        good += x == &st.tensors[k] && x->offset == begin[t] && x->nbytes == (size_t)t + 1 && p[0] == t + 1 &&
                p[t] == t + 1;
    }
    CHECK(good == N, "foreign order: %d of %d tensors in data order and found", good, N);
    st_free(&st);
}

/* Checkpoint A or B: one F32 tensor of n elements, all equal to v. */
static void save_ckpt(const char *path, int n, float v, int *ok, char *err, size_t errlen)
{
    float *x = malloc((size_t)n * sizeof *x);
    for (int i = 0; i < n; i++)
        x[i] = v;
    SafeTensorsWriter w;
    st_writer_init(&w);
    int64_t shape = n;
    st_writer_add(&w, "w", ST_F32, 1, &shape, x, (size_t)n * sizeof *x);
    st_writer_set_metadata(&w, "step", v == 1.0f ? "1" : "2");
    *ok = st_writer_save(&w, path, err, errlen);
    st_writer_free(&w);
    free(x);
}

/* Whether path holds checkpoint (n, v). */
static int is_ckpt(const char *path, int n, float v)
{
    SafeTensors st;
    char err[512];
    if (!st_read(path, &st, err, sizeof err))
        return 0;
    const SafeTensor *t = st_find(&st, "w");
    int ok = t && t->nbytes == (size_t)n * sizeof(float);
    for (int i = 0; ok && i < n; i++) {
        float f;
        memcpy(&f, (const char *)t->data + i * sizeof f, sizeof f);
        ok = f == v;
    }
    st_free(&st);
    return ok;
}

static void test_atomic_save(void)
{
    char path[256], err[512];
    int ok;
    spath(path, "ckpt.safetensors");
    save_ckpt(path, 10, 1.0f, &ok, err, sizeof err);
    CHECK(ok && is_ckpt(path, 10, 1.0f), "first save: %s", err);
    save_ckpt(path, 1000, 2.0f, &ok, err, sizeof err);
    CHECK(ok && is_ckpt(path, 1000, 2.0f), "save over an existing file: %s", err);
    save_ckpt(path, 10, 1.0f, &ok, err, sizeof err);
    CHECK(ok && is_ckpt(path, 10, 1.0f), "save over it again, smaller: %s", err);
    CHECK(no_temp_files(), "no temporary files left");

    /* Into a directory that does not exist: refused, nothing created. */
    char nodir[256], nofile[300];
    spath(nodir, "nope");
    snprintf(nofile, sizeof nofile, "%s/ckpt.safetensors", nodir);
    save_ckpt(nofile, 10, 2.0f, &ok, err, sizeof err);
    CHECK(!ok && strstr(err, nofile) == err && strstr(err, "No such file or directory"), "missing dir: %s", err);
    struct stat sb;
    CHECK(stat(nodir, &sb) != 0 && errno == ENOENT, "missing dir not created");

    /* A full disk, imitated with a file size limit in a child process:
     * the write fails half-way, the old checkpoint must survive. */
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {4096, 4096};
        setrlimit(RLIMIT_FSIZE, &rl);
        save_ckpt(path, 100000, 2.0f, &ok, err, sizeof err);
        int good = !ok && strstr(err, "cannot write") && strstr(err, "File too large") && no_temp_files();
        if (!good)
            fprintf(stderr, "disk full child: ok=%d err=%s\n", ok, err);
        _exit(good ? 0 : 1);
    }
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "failed write reported, temp removed");
    CHECK(is_ckpt(path, 10, 1.0f), "checkpoint intact after a failed write");
    CHECK(no_temp_files(), "no temporary files after a failed write");

    /* A rename that fails (the target is a directory): temp removed, target
     * untouched. */
    char dirtarget[256], inside[300];
    spath(dirtarget, "is-a-dir.safetensors");
    mkdir(dirtarget, 0755);
    snprintf(inside, sizeof inside, "%s/keep", dirtarget);
    spit(inside, "x", 1);
    save_ckpt(dirtarget, 10, 2.0f, &ok, err, sizeof err);
    CHECK(!ok && strstr(err, "cannot rename"), "rename over a directory: %s", err);
    CHECK(stat(inside, &sb) == 0 && no_temp_files(), "directory target untouched, no temp");
    unlink(inside);
    rmdir(dirtarget);

    /* A read-only directory: only meaningful where permissions bind (not
     * for root), so probe first. */
    char rodir[256], rofile[300], probe[300];
    spath(rodir, "ro");
    mkdir(rodir, 0755);
    snprintf(rofile, sizeof rofile, "%s/ckpt.safetensors", rodir);
    save_ckpt(rofile, 10, 1.0f, &ok, err, sizeof err);
    CHECK(ok, "save into ro before chmod: %s", err);
    chmod(rodir, 0555);
    snprintf(probe, sizeof probe, "%s/probe", rodir);
    int fd = open(probe, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) {
        close(fd);
        unlink(probe);
        printf("test_safetensors: read-only directory case skipped (permissions do not bind, running as uid %d)\n",
               (int)geteuid());
    } else {
        save_ckpt(rofile, 1000, 2.0f, &ok, err, sizeof err);
        CHECK(!ok && strstr(err, "Permission denied"), "read-only dir: %s", err);
        CHECK(is_ckpt(rofile, 10, 1.0f), "checkpoint in read-only dir intact");
    }
    chmod(rodir, 0755);
    unlink(rofile);
    rmdir(rodir);
}

/* Misuse of the writer is a bug in moec: it must die, in a child. */
static int dies(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        fn();
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static void misuse_nbytes(void)
{
    SafeTensorsWriter w;
    st_writer_init(&w);
    int64_t shape = 3;
    float x[3] = {0};
    st_writer_add(&w, "x", ST_F32, 1, &shape, x, 8);
}

static void misuse_duplicate(void)
{
    SafeTensorsWriter w;
    st_writer_init(&w);
    int64_t shape = 1;
    float x = 0;
    st_writer_add(&w, "x", ST_F32, 1, &shape, &x, 4);
    st_writer_add(&w, "x", ST_F32, 1, &shape, &x, 4);
    char path[256], err[256];
    st_writer_save(&w, spath(path, "dup.safetensors"), err, sizeof err);
}

static void misuse_reserved(void)
{
    SafeTensorsWriter w;
    st_writer_init(&w);
    st_writer_add(&w, "__metadata__", ST_U8, 1, (const int64_t[]){0}, NULL, 0);
}

static void misuse_negative(void)
{
    SafeTensorsWriter w;
    st_writer_init(&w);
    st_writer_add(&w, "x", ST_U8, 2, (const int64_t[]){-1, 0}, NULL, 0);
}

static void test_writer_misuse(void)
{
    CHECK(dies(misuse_nbytes), "wrong nbytes dies");
    CHECK(dies(misuse_duplicate), "duplicate name dies at save");
    CHECK(dies(misuse_reserved), "__metadata__ as a tensor name dies");
    CHECK(dies(misuse_negative), "negative dim dies");
    char path[256];
    struct stat sb;
    CHECK(stat(spath(path, "dup.safetensors"), &sb) != 0, "nothing written for duplicates");
}

static void cleanup(void)
{
    DIR *d = opendir(scratch);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", scratch, e->d_name);
            unlink(path);
        }
    }
    closedir(d);
    rmdir(scratch);
}

int main(void)
{
    snprintf(scratch, sizeof scratch, "/tmp/test_safetensors.%ld", (long)getpid());
    if (mkdir(scratch, 0700) != 0)
        die("cannot create %s", scratch);
    test_dtypes();
    test_hash();
    test_roundtrip();
    test_format_bytes();
    test_fixtures();
    test_corrupt_truncate();
    test_corrupt_header_size();
    test_corrupt_flip();
    test_corrupt_offsets_in_place();
    test_corrupt_headers();
    test_foreign_order();
    test_atomic_save();
    test_writer_misuse();
    cleanup();
    printf("test_safetensors: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
