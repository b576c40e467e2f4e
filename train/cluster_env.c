/* cluster_env.c - torchrun and Slurm variables mapped onto moec's
 * (cluster_env.h). A new file rather than part of launch.c: launch_env and
 * the NCCL communicator keep reading only the MOEC_ variables, and this is
 * the one place that knows other launchers' names. */
#include "cluster_env.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int get_int(const char *name, long lo, long hi, long *out, int *present, char *err, size_t errlen)
{
    const char *v = getenv(name);
    *present = v && *v;
    if (!*present)
        return 1;
    char *end;
    long x = strtol(v, &end, 10);
    /* SLURM_TASKS_PER_NODE may read "4(x2)": the first count is this layout's */
    if (end == v || (*end && *end != '(') || x < lo || x > hi) {
        snprintf(err, errlen, "%s=%s: expected a number from %ld to %ld", name, v, lo, hi);
        return 0;
    }
    *out = x;
    return 1;
}

int cluster_first_host(const char *list, char *out, size_t outlen)
{
    size_t i = 0, n = 0;
    if (!list || !*list)
        return 0;
    while (list[i] && list[i] != ',' && list[i] != '[') {
        if (n + 1 >= outlen)
            return 0;
        out[n++] = list[i++];
    }
    if (list[i] == '[') {
        i++;
        /* the range's first number, its zero padding kept */
        if (!isdigit((unsigned char)list[i]))
            return 0;
        while (isdigit((unsigned char)list[i])) {
            if (n + 1 >= outlen)
                return 0;
            out[n++] = list[i++];
        }
        if (list[i] != '-' && list[i] != ',' && list[i] != ']')
            return 0;
        const char *close = strchr(list + i, ']');
        if (!close)
            return 0;
        /* a suffix after the bracket ("n[1-2]-ib") belongs to the name */
        for (const char *s = close + 1; *s && *s != ','; s++) {
            if (n + 1 >= outlen)
                return 0;
            out[n++] = *s;
        }
    }
    out[n] = '\0';
    return n > 0;
}

static void set_unset(const char *name, const char *value, char *said, size_t saidlen, const char *from)
{
    if (getenv(name) && *getenv(name))
        return;  /* the MOEC_ variable wins */
    setenv(name, value, 1);
    size_t len = strlen(said);
    snprintf(said + len, saidlen - len, "%s%s=%s (%s)", len ? ", " : "", name, value, from);
}

int cluster_env_apply(char *said, size_t saidlen, char *err, size_t errlen)
{
    said[0] = '\0';
    long rank = 0, world = 0, lrank = 0, lworld = 0, port = 0;
    int has_r, has_w, has_lr, has_lw, has_p;
    char buf[64];
    /* torchrun (torch.distributed.run) */
    if (!get_int("WORLD_SIZE", 1, 1 << 20, &world, &has_w, err, errlen) ||
        !get_int("RANK", 0, (1 << 20) - 1, &rank, &has_r, err, errlen))
        return 0;
    if (has_w && has_r && world > 1) {
        if (!get_int("LOCAL_RANK", 0, (1 << 20) - 1, &lrank, &has_lr, err, errlen) ||
            !get_int("LOCAL_WORLD_SIZE", 1, 1 << 20, &lworld, &has_lw, err, errlen))
            return 0;
        snprintf(buf, sizeof buf, "%ld", rank);
        set_unset("MOEC_RANK", buf, said, saidlen, "RANK");
        snprintf(buf, sizeof buf, "%ld", world);
        set_unset("MOEC_WORLD_SIZE", buf, said, saidlen, "WORLD_SIZE");
        if (has_lr) {
            snprintf(buf, sizeof buf, "%ld", lrank);
            set_unset("MOEC_LOCAL_RANK", buf, said, saidlen, "LOCAL_RANK");
        }
        if (has_lw) {
            snprintf(buf, sizeof buf, "%ld", lworld);
            set_unset("MOEC_LOCAL_WORLD_SIZE", buf, said, saidlen, "LOCAL_WORLD_SIZE");
        }
        if (getenv("MASTER_ADDR") && *getenv("MASTER_ADDR"))
            set_unset("MOEC_MASTER_ADDR", getenv("MASTER_ADDR"), said, saidlen, "MASTER_ADDR");
        if (getenv("MASTER_PORT") && *getenv("MASTER_PORT"))
            set_unset("MOEC_MASTER_PORT", getenv("MASTER_PORT"), said, saidlen, "MASTER_PORT");
        return 1;
    }
    /* Slurm (srun: one task per rank) */
    if (!get_int("SLURM_NTASKS", 1, 1 << 20, &world, &has_w, err, errlen) ||
        !get_int("SLURM_PROCID", 0, (1 << 20) - 1, &rank, &has_r, err, errlen))
        return 0;
    if (!(has_w && has_r && world > 1))
        return 1;
    if (!get_int("SLURM_LOCALID", 0, (1 << 20) - 1, &lrank, &has_lr, err, errlen) ||
        !get_int("SLURM_NTASKS_PER_NODE", 1, 1 << 20, &lworld, &has_lw, err, errlen))
        return 0;
    if (!has_lw && !get_int("SLURM_TASKS_PER_NODE", 1, 1 << 20, &lworld, &has_lw, err, errlen))
        return 0;
    snprintf(buf, sizeof buf, "%ld", rank);
    set_unset("MOEC_RANK", buf, said, saidlen, "SLURM_PROCID");
    snprintf(buf, sizeof buf, "%ld", world);
    set_unset("MOEC_WORLD_SIZE", buf, said, saidlen, "SLURM_NTASKS");
    if (has_lr) {
        snprintf(buf, sizeof buf, "%ld", lrank);
        set_unset("MOEC_LOCAL_RANK", buf, said, saidlen, "SLURM_LOCALID");
    }
    if (has_lw) {
        snprintf(buf, sizeof buf, "%ld", lworld);
        set_unset("MOEC_LOCAL_WORLD_SIZE", buf, said, saidlen, "SLURM_NTASKS_PER_NODE");
    }
    const char *master = getenv("MASTER_ADDR");
    char host[256];
    if (master && *master) {
        set_unset("MOEC_MASTER_ADDR", master, said, saidlen, "MASTER_ADDR");
    } else if (getenv("SLURM_JOB_NODELIST") || getenv("SLURM_NODELIST")) {
        const char *list = getenv("SLURM_JOB_NODELIST") ? getenv("SLURM_JOB_NODELIST") : getenv("SLURM_NODELIST");
        if (!cluster_first_host(list, host, sizeof host)) {
            snprintf(err, errlen, "SLURM_JOB_NODELIST=%s: cannot read its first host; set MASTER_ADDR (or "
                     "MOEC_MASTER_ADDR)", list);
            return 0;
        }
        set_unset("MOEC_MASTER_ADDR", host, said, saidlen, "the first host of SLURM_JOB_NODELIST");
    }
    if (getenv("MASTER_PORT") && *getenv("MASTER_PORT")) {
        set_unset("MOEC_MASTER_PORT", getenv("MASTER_PORT"), said, saidlen, "MASTER_PORT");
    } else {
        long job = 0;
        if (!get_int("SLURM_JOB_ID", 0, 0x7fffffff, &job, &has_p, err, errlen))
            return 0;
        if (has_p) {
            /* one port per job, the same on every task: 20000 + job id mod 20000 */
            port = 20000 + job % 20000;
            snprintf(buf, sizeof buf, "%ld", port);
            set_unset("MOEC_MASTER_PORT", buf, said, saidlen, "20000 + SLURM_JOB_ID mod 20000");
        }
    }
    return 1;
}
