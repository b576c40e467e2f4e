/* compile.c - reading a model file and running the front half on it. Shared
 * by the CLI, the tests and the fuzz target, so none of it exits. */
#include "compile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../util/util.h"
#include "../compiler/ast.h"
#include "../compiler/lower.h"

int compilation_read(Compilation *c, const char *path, FILE *err_out)
{
    char oerr[512];
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen_regular(path, oerr, sizeof oerr);
    if (!f) {
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            fprintf(err_out, "moec: error: '%s' is a directory, not a model file\n", path);
        else if (stat(path, &sb) == 0)
            fprintf(err_out, "moec: error: %s (a model file is read whole: give a file, or - for stdin)\n", oerr);
        else
            fprintf(err_out, "moec: error: cannot open '%s': %s\n", path, strerror(errno));
        return 0;
    }
    struct stat st;
    if (f != stdin && fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(err_out, "moec: error: '%s' is a directory, not a model file\n", path);
        fclose(f);
        return 0;
    }
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fprintf(err_out, "moec: error: out of memory reading '%s'\n", path);
            if (f != stdin)
                fclose(f);
            return 0;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len > DRIVER_MAX_FILE) {
            fprintf(err_out, "moec: error: '%s' is larger than %d MiB; is it really a model file?\n", path,
                    DRIVER_MAX_FILE >> 20);
            free(buf);
            if (f != stdin)
                fclose(f);
            return 0;
        }
        if (n == 0)
            break;
        if (len == cap) {
            cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    int err = ferror(f);
    if (f != stdin)
        fclose(f);
    if (err) {
        fprintf(err_out, "moec: error: cannot read '%s'\n", path);
        free(buf);
        return 0;
    }
    c->text = buf;
    c->len = len;
    return 1;
}

static int ncompilations;

int compilation_count(void) { return ncompilations; }

int compilation_run(Compilation *c, const char *path, const char *text, size_t len, FILE *err_out, PassCtx *ctx)
{
    ncompilations++;
    arena_init(&c->arena);
    diag_init(&c->diag, path, text, len, err_out);
    c->graph = NULL;
    if (len == 0) {
        SrcLoc loc = {1, 1, 1};
        diag_error(&c->diag, loc, "the file is empty: a model file starts with `model NAME { ... }`");
        return 1;
    }
    AstModel *m = parse_model(&c->arena, &c->diag, text, len);
    if (m)
        c->graph = lower_model(&c->arena, &c->diag, m, path, &c->opts);
    if (!c->graph || c->diag.nerrors) {
        c->graph = NULL;
        diag_finish(&c->diag);
        return 1;
    }
    if (ctx) {
        ctx->diag = &c->diag;
        if (pass_run_pipeline(c->graph, ctx) != 0 || c->diag.nerrors) {
            diag_finish(&c->diag);
            return 1;
        }
    }
    return 0;
}

void compilation_free(Compilation *c)
{
    arena_free(&c->arena);
    free(c->text);
    c->text = NULL;
    c->graph = NULL;
}
