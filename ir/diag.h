/* diag.h - user-facing diagnostics with source locations.
 *
 * Every error caused by the user's input is reported here, in the form
 *
 *     models/x.moe:12:7: error: message
 *        12 |   y = rmsnorm(h, ffn_norm, 3)
 *           |       ^~~~~~~
 *
 * and counted; the caller decides when to stop (exit status 1). Nothing here
 * exits, so the front end can run inside a fuzzer. The IR depends on this
 * header too (shape errors are reported at the user's line), so it lives in
 * ir/ rather than compiler/. */
#ifndef MOEC_DIAG_H
#define MOEC_DIAG_H

#include <stddef.h>
#include <stdio.h>

typedef struct SrcLoc {
    int line, col;  /* 1-based; line 0 means "no location" */
    int len;        /* columns to underline, >= 1 */
} SrcLoc;

typedef struct Diag {
    const char *path;    /* as the user named the file */
    const char *text;    /* whole source, may contain NULs */
    size_t text_len;
    FILE *out;           /* stderr normally; a memstream or /dev/null in tests */
    int nerrors, nwarnings;
    int max_errors;      /* stop reporting after this many (default 20) */
    int suppressed;      /* errors not shown because of max_errors */
    /* hashes of messages already shown: the same mistake inside a block
     * that is inlined many times is reported once */
    unsigned long long seen[512];
} Diag;

void diag_init(Diag *d, const char *path, const char *text, size_t len, FILE *out);
void diag_error(Diag *d, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_warning(Diag *d, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void diag_note(Diag *d, SrcLoc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prints "N errors generated" style trailer when errors were suppressed. */
void diag_finish(Diag *d);
/* True once max_errors has been reached: callers may stop early. */
int diag_full(const Diag *d);

#endif
