/* check.h - the one CHECK macro of the C unit tests: count a passed check,
 * or print a failed one with its file, line, condition and a message.
 * Each test program prints "NAME: N passed, N failed" last from these
 * counters and exits non-zero when any failed. */
#ifndef MOEC_TEST_CHECK_H
#define MOEC_TEST_CHECK_H

#include <stdio.h>

static int npass, nfail;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (cond) {                                                            \
            npass++;                                                           \
        } else {                                                               \
            nfail++;                                                           \
            fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
        }                                                                      \
    } while (0)

#endif
