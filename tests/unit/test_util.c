/* test_util.c - unit tests of util/util.c's small helpers: the human-readable
 * counts and sizes (the exact strings the training binary and moec print),
 * the atomic file write (content, replacement, no temporary left behind, a
 * located error), and xstrdup. Run from the repository root. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "../../util/util.h"
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

int main(void)
{
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
