/* fuzz_plan.c - libFuzzer target for the plan a training binary carries
 * (plan/plan_io.c: the document, its tables, the graph through the IR
 * reader) and the payload trailer (plan/payload.c). The harness rewrites the
 * input's moec_version to this build's and recomputes its checksum, so that
 * mutations reach the parser behind them: any document must load or be
 * refused with a message, never crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../plan/payload.h"
#include "../../plan/plan.h"
#include "../../util/util.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* doc with the value of "key":"..." replaced by value (a new buffer), or NULL when absent */
static char *replace_value(const char *doc, size_t len, const char *key, const char *value, size_t *outlen)
{
    const char *k = memmem(doc, len < 1024 ? len : 1024, key, strlen(key));
    if (!k)
        return NULL;
    const char *q = memchr(k + strlen(key), '"', len - (size_t)(k + strlen(key) - doc));
    const char *e = q ? memchr(q + 1, '"', len - (size_t)(q + 1 - doc)) : NULL;
    if (!e)
        return NULL;
    size_t a = (size_t)(q + 1 - doc), b = (size_t)(e - doc), v = strlen(value);
    char *out = malloc(len - (b - a) + v + 1);
    memcpy(out, doc, a);
    memcpy(out + a, value, v);
    memcpy(out + a + v, doc + b, len - b);
    *outlen = len - (b - a) + v;
    out[*outlen] = 0;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[2048];
    /* the trailer of a binary: any bytes */
    Payload p;
    if (payload_read(fuzz_file(data, size), &p, err, sizeof err) > 0)
        payload_free(&p);
    /* the document */
    size_t len = size;
    char *doc = malloc(size + 1);
    memcpy(doc, data, size);
    doc[size] = 0;
    char *v = replace_value(doc, len, "\"moec_version\"", moec_version(), &len);
    if (v) {
        free(doc);
        doc = v;
    }
    char *digits = NULL;
    const char *k = memmem(doc, len < 512 ? len : 512, "\"checksum\":", 11);
    const char *q = k ? memchr(k + 11, '"', len - (size_t)(k + 11 - doc)) : NULL;
    if (q && (size_t)(q - doc) + 18 <= len && q[17] == '"')
        digits = (char *)q + 1;
    if (digits) {
        size_t at = (size_t)(digits - doc);
        uint64_t h = hash64_update(HASH64_INIT, doc, at);
        h = hash64_update(h, "0000000000000000", 16);
        h = hash64_update(h, digits + 16, len - at - 16);
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
        memcpy(digits, hex, 16);
    }
    Plan *plan = plan_from_json(doc, len, "fuzz", NULL, err, sizeof err);
    plan_free(plan);
    free(doc);
    return 0;
}
