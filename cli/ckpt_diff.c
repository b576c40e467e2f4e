/* ckpt_diff.c - `moec ckpt-diff A B`: two checkpoints' tensors compared one
 * by one (relative 2-norm difference and largest elementwise difference). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/safetensors.h"
#include "cli.h"

/* moec ckpt-diff A B [--rtol X] */
int cli_ckpt_diff(int argc, char **argv)
{
    const char *a = NULL, *b = NULL, *prefix = "param.";
    double rtol = 1e-5;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            fputs(cli_usage_for("ckpt-diff"), stdout);
            return 0;
        } else if (strcmp(argv[i], "--rtol") == 0 && i + 1 < argc) {
            char *end;
            rtol = strtod(argv[++i], &end);
            if (*end || !(rtol >= 0))
                return cli_usage_error("ckpt-diff ", "--rtol takes a non-negative number, not '%s'", argv[i]);
        } else if (strcmp(argv[i], "--prefix") == 0 && i + 1 < argc) {
            prefix = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            static const char *const known[] = {"--rtol", "--prefix", "--help", NULL};
            return cli_unknown_option("ckpt-diff ", argv[i], known);
        } else if (!a) {
            a = argv[i];
        } else if (!b) {
            b = argv[i];
        } else {
            return cli_usage_error("ckpt-diff ", "two checkpoints, not more ('%s')", argv[i]);
        }
    }
    if (!a || !b)
        return cli_usage_error("ckpt-diff ", "give two checkpoints%s", "");
    SafeTensors sa, sb;
    char err[1024];
    if (!st_read(a, &sa, err, sizeof err) || !st_read(b, &sb, err, sizeof err)) {
        fprintf(stderr, "moec: error: %s\n", err);
        st_free(&sa);
        return 1;
    }
    int bad = 0, n = 0;
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < sa.ntensors; i++) {
        const SafeTensor *x = &sa.tensors[i];
        if (strncmp(x->name, prefix, strlen(prefix)) != 0 || x->dtype != ST_F32)
            continue;
        const SafeTensor *y = st_find(&sb, x->name);
        int same = y && y->dtype == ST_F32 && x->dtype == ST_F32 && y->nbytes == x->nbytes && y->rank == x->rank;
        for (int d = 0; same && d < x->rank; d++)
            same = x->shape[d] == y->shape[d];
        if (!same) {
            printf("%s: missing or of another shape in %s\n", x->name, b);
            bad++;
            continue;
        }
        size_t m = x->nbytes / 4;
        float *u = malloc(x->nbytes), *v = malloc(x->nbytes);
        memcpy(u, x->data, x->nbytes);
        memcpy(v, y->data, x->nbytes);
        double num = 0, den = 0, amax = 0;
        /* NaN and infinity compare as nothing (NaN > rtol is false): each is a difference of its own */
        size_t nonfinite[2] = {0, 0};
        for (size_t k = 0; k < m; k++) {
            nonfinite[0] += !isfinite(u[k]);
            nonfinite[1] += !isfinite(v[k]);
        }
        if (nonfinite[0] || nonfinite[1]) {
            for (int s = 0; s < 2; s++)
                if (nonfinite[s])
                    printf("%s: %zu non-finite value%s (NaN or infinity) in %s\n", x->name, nonfinite[s],
                           nonfinite[s] == 1 ? "" : "s", s ? b : a);
            free(u);
            free(v);
            n++;
            bad++;
            continue;
        }
        for (size_t k = 0; k < m; k++) {
            double dd = (double)u[k] - v[k];
            num += dd * dd;
            den += (double)u[k] * u[k];
            amax = fmax(amax, fabs(dd));
        }
        double err_max = den > 0 ? sqrt(num / den) : sqrt(num);
        (void)amax;
        free(u);
        free(v);
        n++;
        if (err_max > worst) {
            worst = err_max;
            worst_name = x->name;
        }
        if (err_max > rtol) {
            printf("%s: relative difference %.3g > %g (largest element difference %.3g)\n", x->name, err_max, rtol,
                   amax);
            bad++;
        }
    }
    /* and what only the second file has */
    for (int i = 0; i < sb.ntensors; i++) {
        const SafeTensor *y = &sb.tensors[i];
        if (strncmp(y->name, prefix, strlen(prefix)) == 0 && y->dtype == ST_F32 && !st_find(&sa, y->name)) {
            printf("%s: only in %s\n", y->name, b);
            bad++;
        }
    }
    printf("%d %s* tensors compared, largest relative difference %.3g (%s): %s\n", n, prefix, worst, worst_name,
           bad ? "DIFFERENT" : "within tolerance");
    if (n == 0) {
        printf("no tensors named %s* in %s\n", prefix, a);
        bad++;
    }
    st_free(&sa);
    st_free(&sb);
    return bad ? 1 : 0;
}
