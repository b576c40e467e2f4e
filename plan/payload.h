/* payload.h - the compiled plan carried inside a training binary.
 *
 * `moec compile MODEL -o OUT` writes a copy of the moec executable with a
 * payload appended: a JSON object (the model source, its path and the
 * compile options), then its length as 8 little-endian bytes, then the
 * 8-byte magic "MOECPLN1". At start-up the executable looks at its own end
 * (/proc/self/exe): with a payload it is a training binary, without one it
 * is the compiler. The binary needs nothing beside it; the plan is lowered
 * again from the embedded source in a few milliseconds, which also lets
 * `--batch` re-plan the shapes. */
#ifndef MOEC_PAYLOAD_H
#define MOEC_PAYLOAD_H

#include <stddef.h>
#include <stdint.h>

typedef struct Payload {
    char *json;        /* malloc'd, NUL-terminated */
    size_t len;
} Payload;

/* Returns 1 and fills p when `exe` ends with a payload, 0 otherwise. */
int payload_read(const char *exe, Payload *p);
void payload_free(Payload *p);

/* Writes exe's bytes (without any payload it already has) plus `json` to
 * out, mode 0755, atomically (temporary file + rename). Returns 1, or 0
 * with a message in err. */
int payload_write_binary(const char *exe, const char *out, const char *json, char *err, size_t errlen);

/* Base64 (RFC 4648, padded) for binary data inside the JSON payload (the
 * kernels' image). Caller frees; NULL when out of memory / malformed. */
char *payload_base64_encode(const void *data, size_t n);
void *payload_base64_decode(const char *s, size_t *n);

/* The payload JSON plus the kernels' image compiled ahead of time for
 * `arch` from `source` (hash64 of it identifies the kernels it fits):
 * {"image": {"arch", "source_hash", "bytes", "base64"}}. Caller frees. */
char *payload_add_image(const char *json, const char *arch, const char *source, size_t source_len, const void *image,
                        size_t image_size);

#endif
