/* payload.h - the plan carried inside a training binary.
 *
 * `moec compile MODEL -o OUT` writes a copy of the moec executable with a
 * payload appended: the plan document (plan/plan_io.c: the compiled graph,
 * its tables, the kernels, the model source), then its length as 8
 * little-endian bytes, then the 8-byte magic "MOECPLN2". At start-up the
 * executable looks at its own end (/proc/self/exe): with a payload it is a
 * training binary, without one it is the compiler. The binary needs nothing
 * beside it and runs no compiler pass unless asked for other shapes. */
#ifndef MOEC_PAYLOAD_H
#define MOEC_PAYLOAD_H

#include <stddef.h>
#include <stdint.h>

enum { PAYLOAD_MAX = 1 << 30 };  /* a larger payload is taken for damage */

typedef struct Payload {
    char *data;        /* malloc'd, NUL-terminated */
    size_t len;
} Payload;

/* Returns 1 and fills p when `exe` ends with a payload, 0 when it has none,
 * -1 with a message in err when it has one that cannot be used (an old
 * format, a damaged trailer). */
int payload_read(const char *exe, Payload *p, char *err, size_t errlen);
void payload_free(Payload *p);

/* Writes exe's bytes (without any payload it already has) plus `data` to
 * out, mode 0755, atomically (temporary file + rename). Returns 1, or 0
 * with a message in err. */
int payload_write_binary(const char *exe, const char *out, const char *data, size_t len, char *err, size_t errlen);

/* Base64 (RFC 4648, padded) for binary data inside the JSON payload (the
 * kernels' image). Caller frees; NULL when out of memory / malformed. */
char *payload_base64_encode(const void *data, size_t n);
void *payload_base64_decode(const char *s, size_t *n);

#endif
