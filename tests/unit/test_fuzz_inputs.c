/* test_fuzz_inputs.c - the fuzz targets' harnesses (tests/fuzz/fuzz_*.c),
 * built without libFuzzer, run on their seed corpora (tests/fuzz/corpus/NAME)
 * and on every input a fuzzer once crashed on (tests/fuzz/regressions/NAME):
 * in `make test`, plain and under ASan + UBSan, so a fixed crash stays fixed
 * and the harnesses build with the project's warnings. The front end's
 * regressions (*.input) run through moec in tests/fuzz/regressions.test. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define LLVMFuzzerTestOneInput fuzz_safetensors_one
#include "../fuzz/fuzz_safetensors.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_hf_config_one
#include "../fuzz/fuzz_hf_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_fasta_one
#include "../fuzz/fuzz_fasta.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_plan_one
#include "../fuzz/fuzz_plan.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_comm_one
#include "../fuzz/fuzz_comm.c"
#undef LLVMFuzzerTestOneInput

static int run_dir(const char *dir, int (*one)(const uint8_t *, size_t))
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc((size_t)len + 1);
        size_t got = buf ? fread(buf, 1, (size_t)len, f) : 0;
        fclose(f);
        CHECK(buf && got == (size_t)len, "reading %s", path);
        if (buf && got == (size_t)len)
            one(buf, got);  /* a crash or a sanitizer report fails the test */
        free(buf);
        n++;
    }
    closedir(d);
    return n;
}

int main(void)
{
    static const struct { const char *name; int (*one)(const uint8_t *, size_t); } targets[] = {
        {"safetensors", fuzz_safetensors_one},
        {"hf_config", fuzz_hf_config_one},
        {"fasta", fuzz_fasta_one},
        {"plan", fuzz_plan_one},
        {"comm", fuzz_comm_one},
    };
    for (int i = 0; i < (int)(sizeof targets / sizeof targets[0]); i++) {
        char dir[256];
        snprintf(dir, sizeof dir, "tests/fuzz/corpus/%s", targets[i].name);
        int seeds = run_dir(dir, targets[i].one);
        CHECK(seeds > 0, "no seed inputs in %s", dir);
        snprintf(dir, sizeof dir, "tests/fuzz/regressions/%s", targets[i].name);
        run_dir(dir, targets[i].one);
    }
    printf("test_fuzz_inputs: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
