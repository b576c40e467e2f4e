/* ckpt_keep.c - --keep-best: DIR/checkpoint-best.safetensors, a hard link
 * to the checkpoint of the best validation lm_loss so far (written at the
 * step it was measured).
 * --keep-last N: besides DIR/checkpoint.safetensors (the one
 * --resume reads), DIR/checkpoint-STEP.safetensors of the last N
 * checkpoints. Each is a hard link to the file just written (no copy: the
 * next checkpoint is written to a temporary file and renamed over
 * checkpoint.safetensors, so the link keeps the old one); older ones are
 * removed. Files of other names in DIR are never touched. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int trainer_keep_best(Trainer *t, const char *path)
{
    char best[4096], tmp[4200];
    snprintf(best, sizeof best, "%s/checkpoint-best.safetensors", t->f.ckpt_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", best, (int)getpid());
    unlink(tmp);
    if (link(path, tmp) != 0 || rename(tmp, best) != 0) {
        int e = errno;
        unlink(tmp);
        return trainer_error(t, "--keep-best: cannot link %s to %s: %s", path, best, strerror(e));
    }
    return 1;
}

int trainer_keep_last(Trainer *t, const char *path)
{
    char kept[4096];
    snprintf(kept, sizeof kept, "%s/checkpoint-%lld.safetensors", t->f.ckpt_dir, (long long)t->step);
    unlink(kept);
    if (link(path, kept) != 0)
        return trainer_error(t, "--keep-last: cannot link %s to %s: %s", path, kept, strerror(errno));
    DIR *d = opendir(t->f.ckpt_dir);
    if (!d)
        return trainer_error(t, "--keep-last: cannot list %s: %s", t->f.ckpt_dir, strerror(errno));
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long s;
        int used = 0;
        if (sscanf(e->d_name, "checkpoint-%lld.safetensors%n", &s, &used) == 1 && used > 0 &&
            e->d_name[used] == '\0' && s >= 0) {
            if (n == cap) {
                cap = cap ? cap * 2 : 16;
                int64_t *ns = realloc(steps, cap * sizeof *steps);
                if (!ns) {
                    free(steps);
                    closedir(d);
                    return trainer_error(t, "out of memory");
                }
                steps = ns;
            }
            steps[n++] = s;
        }
    }
    closedir(d);
    if (n > 1)
        qsort(steps, n, sizeof *steps, cmp_i64);
    for (size_t i = 0; n > (size_t)t->f.keep_last && i < n - (size_t)t->f.keep_last; i++) {
        snprintf(kept, sizeof kept, "%s/checkpoint-%lld.safetensors", t->f.ckpt_dir, (long long)steps[i]);
        if (unlink(kept) != 0 && errno != ENOENT) {
            free(steps);
            return trainer_error(t, "--keep-last: cannot remove %s: %s", kept, strerror(errno));
        }
    }
    free(steps);
    return 1;
}
