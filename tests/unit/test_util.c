/* test_util.c - unit tests of util/util.c's small helpers: the human-readable
 * counts and sizes (the exact strings the training binary and moec print),
 * the atomic file write (content, replacement, no temporary left behind, a
 * located error), and xstrdup. Run from the repository root. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "../../util/util.h"
#include "../../util/sha256.h"
#include "check.h"


static void check_count(double v, const char *want)
{
    char buf[32];
    fmt_count(buf, sizeof buf, v);
    CHECK(strcmp(buf, want) == 0, "fmt_count(%g) = '%s', want '%s'", v, buf, want);
}

static void check_bytes(double v, const char *want)
{
    char buf[32];
    fmt_bytes(buf, sizeof buf, v);
    CHECK(strcmp(buf, want) == 0, "fmt_bytes(%g) = '%s', want '%s'", v, buf, want);
}

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 16);
    *n = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int k = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        k += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return k;
}

static void test_write_file(void)
{
    char dir[] = "/tmp/moec_test_util_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256], err[512] = "";
    snprintf(path, sizeof path, "%s/out.txt", dir);
    CHECK(write_file(path, "hello\n", 6, err, sizeof err) == 1, "first write: %s", err);
    size_t n = 0;
    char *got = slurp(path, &n);
    CHECK(got && n == 6 && memcmp(got, "hello\n", 6) == 0, "content after the first write");
    free(got);
    CHECK(write_file(path, "bye", 3, err, sizeof err) == 1, "second write: %s", err);
    got = slurp(path, &n);
    CHECK(got && n == 3 && memcmp(got, "bye", 3) == 0, "the second write replaces the file");
    free(got);
    CHECK(count_entries(dir) == 1, "%d files in %s: a temporary was left behind", count_entries(dir), dir);
    CHECK(write_file(path, "", 0, err, sizeof err) == 1, "empty write: %s", err);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size == 0, "an empty write leaves an empty file");
    char bad[300];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x", dir);
    err[0] = 0;
    CHECK(write_file(bad, "x", 1, err, sizeof err) == 0, "a write into a missing directory fails");
    CHECK(strstr(err, bad) && strstr(err, "cannot write"), "the error names the path: '%s'", err);
    CHECK(count_entries(dir) == 1, "a failed write leaves nothing behind");
    unlink(path);
    rmdir(dir);
}

static void hex(const unsigned char *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

static void check_sha(const void *msg, size_t n, const char *want, const char *what)
{
    unsigned char d[SHA256_LEN];
    char got[65];
    sha256(msg, n, d);
    hex(d, sizeof d, got);
    CHECK(strcmp(got, want) == 0, "SHA-256 of %s = %s, want %s", what, got, want);
}

static void check_hmac(const void *key, size_t kl, const void *msg, size_t n, const char *want, const char *what)
{
    unsigned char d[SHA256_LEN];
    char got[65];
    const void *parts[1] = {msg};
    size_t lens[1] = {n};
    hmac_sha256(key, kl, parts, lens, 1, d);
    hex(d, sizeof d, got);
    CHECK(strcmp(got, want) == 0, "HMAC-SHA-256 %s = %s, want %s", what, got, want);
}

/* FIPS 180-4's examples (NIST's "SHA256.pdf": one block, two blocks) with the empty message and a million
 * a's; RFC 4231's HMAC-SHA-256 test cases 1, 2 and 6 (a key longer than the block); then the streamed hash
 * equal to the one-shot one at every split of messages around the padding boundaries. */
static void test_sha256(void)
{
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "\"abc\"");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_sha(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1", "the 448-bit message");
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "the empty message");
    char *million = malloc(1000000);
    memset(million, 'a', 1000000);
    check_sha(million, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", "a million a's");
    free(million);
    unsigned char k1[20], k6[131];
    memset(k1, 0x0b, sizeof k1);
    memset(k6, 0xaa, sizeof k6);
    check_hmac(k1, sizeof k1, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
               "RFC 4231 case 1");
    check_hmac("Jefe", 4, "what do ya want for nothing?", 28,
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", "RFC 4231 case 2");
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_hmac(k6, sizeof k6, m6, strlen(m6), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
               "RFC 4231 case 6");
    unsigned char msg[200];
    for (int i = 0; i < 200; i++)
        msg[i] = (unsigned char)(i * 7 + 1);
    static const size_t lens[] = {55, 56, 63, 64, 65, 119, 120, 128, 200};
    for (int li = 0; li < ARRAY_LEN(lens); li++) {
        unsigned char one[SHA256_LEN], streamed[SHA256_LEN];
        sha256(msg, lens[li], one);
        int same = 1;
        for (size_t cut = 0; cut <= lens[li]; cut += 13) {
            Sha256 s;
            sha256_init(&s);
            sha256_update(&s, msg, cut);
            sha256_update(&s, msg + cut, lens[li] - cut);
            sha256_final(&s, streamed);
            same &= memcmp(one, streamed, sizeof one) == 0;
        }
        CHECK(same, "SHA-256 of %zu bytes: streamed in two parts differs from one-shot", lens[li]);
    }
    CHECK(ct_equal("abc", "abc", 3) && !ct_equal("abc", "abd", 3), "ct_equal");
}

/* Spearman's rho with ties (mean ranks) against values worked by hand, and
 * the "did you mean" helper the command lines share with the model language */
static void test_spearman_suggest(void)
{
    double x[] = {1, 2, 3, 4, 5}, y[] = {5, 6, 7, 8, 7}, inv[] = {50, 40, 30, 20, 10}, cube[] = {1, 8, 27, 64, 125};
    double c[] = {3, 3, 3, 3, 3};
    /* ranks of y: 1 2 3.5 5 3.5; sum dx*dy = 8, sum dx^2 = 10, sum dy^2 = 9.5 */
    double r = spearman(x, y, 5);
    CHECK(fabs(r - 8 / sqrt(95)) < 1e-15, "spearman with a tie = %.17g, want %.17g", r, 8 / sqrt(95));
    CHECK(spearman(x, inv, 5) == -1, "spearman of a decreasing pair = %g", spearman(x, inv, 5));
    CHECK(spearman(x, cube, 5) == 1, "spearman of a monotone pair = %g", spearman(x, cube, 5));
    CHECK(isnan(spearman(x, c, 5)), "spearman against a constant is NAN");
    CHECK(isnan(spearman(x, y, 1)), "spearman of one pair is NAN");
    static const char *const flags[] = {"--steps", "--seed", "--set", "--keep-last", NULL};
    const char *s = suggest_among("--stpes", flags);
    CHECK(s && strcmp(s, "--steps") == 0, "--stpes suggests %s", s ? s : "nothing");
    s = suggest_among("--keep-lst", flags);
    CHECK(s && strcmp(s, "--keep-last") == 0, "--keep-lst suggests %s", s ? s : "nothing");
    CHECK(suggest_among("--frobnicate", flags) == NULL, "nothing near --frobnicate");
}

int main(void)
{
    test_spearman_suggest();
    test_sha256();
    check_count(0, "0");
    check_count(999, "999");
    check_count(1000, "1.0 k");
    check_count(12345, "12.3 k");
    check_count(1.23e6, "1.23 M");
    check_count(4.56e9, "4.56 B");
    check_count(46.70e9, "46.70 B");
    check_bytes(512, "0.5 KiB");
    check_bytes(1024, "1.0 KiB");
    check_bytes(3 << 20, "3.0 MiB");
    check_bytes(1.5 * (1 << 30), "1.50 GiB");
    test_write_file();
    char *s = xstrdup("moec");
    CHECK(strcmp(s, "moec") == 0, "xstrdup copies");
    free(s);
    printf("test_util: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
