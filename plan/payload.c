/* payload.c - appending a plan to the executable and finding it again. */
#include "payload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../util/util.h"

static const char MAGIC[8] = {'M', 'O', 'E', 'C', 'P', 'L', 'N', '2'};
/* the trailer of training binaries made before plans were documents (moec 0.1 up to the plan format 2) */
static const char MAGIC_OLD[8] = {'M', 'O', 'E', 'C', 'P', 'L', 'N', '1'};

/* Size of exe without its payload; sets *plen to the payload length. */
static long exe_body_size(FILE *f, uint64_t *plen)
{
    *plen = 0;
    if (fseek(f, 0, SEEK_END) != 0)
        return -1;
    long size = ftell(f);
    if (size < 16)
        return size;
    unsigned char tail[16];
    if (fseek(f, size - 16, SEEK_SET) != 0 || fread(tail, 1, 16, f) != 16)
        return -1;
    if (memcmp(tail + 8, MAGIC_OLD, 8) == 0)
        return -2;
    if (memcmp(tail + 8, MAGIC, 8) != 0)
        return size;
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--)
        len = len << 8 | tail[i];
    if (len > (uint64_t)size - 16)
        return size;  /* not ours: treat as no payload */
    *plen = len;
    return size - 16 - (long)len;
}

int payload_read(const char *exe, Payload *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    FILE *f = fopen(exe, "rb");
    if (!f)
        return 0;
    uint64_t len;
    long body = exe_body_size(f, &len);
    if (body == -2) {
        fclose(f);
        snprintf(err, errlen, "this training binary was made by an older moec (its plan is in format 1): compile the model again");
        return -1;
    }
    if (body < 0 || len == 0) {
        fclose(f);
        return 0;
    }
    if (len > PAYLOAD_MAX) {
        fclose(f);
        snprintf(err, errlen, "%s: the plan appended to it claims %llu bytes: it is damaged", exe,
                 (unsigned long long)len);
        return -1;
    }
    p->data = malloc(len + 1);
    if (!p->data || fseek(f, body, SEEK_SET) != 0 || fread(p->data, 1, len, f) != len) {
        free(p->data);
        p->data = NULL;
        fclose(f);
        snprintf(err, errlen, "%s: cannot read the plan appended to it", exe);
        return -1;
    }
    p->data[len] = 0;
    p->len = len;
    fclose(f);
    return 1;
}

void payload_free(Payload *p)
{
    free(p->data);
    p->data = NULL;
}

int payload_write_binary(const char *exe, const char *out, const char *data, size_t len, char *err, size_t errlen)
{
    FILE *in = fopen(exe, "rb");
    if (!in) {
        snprintf(err, errlen, "cannot read the moec executable '%s': %s", exe, strerror(errno));
        return 0;
    }
    uint64_t oldlen;
    long body = exe_body_size(in, &oldlen);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", out, (long)getpid());
    FILE *o = body < 0 ? NULL : fopen(tmp, "wb");
    if (!o) {
        snprintf(err, errlen, "cannot write '%s': %s", out, strerror(errno));
        fclose(in);
        return 0;
    }
    int ok = fseek(in, 0, SEEK_SET) == 0;
    char buf[1 << 16];
    long left = body;
    while (ok && left > 0) {
        size_t n = fread(buf, 1, left < (long)sizeof buf ? (size_t)left : sizeof buf, in);
        ok = n > 0 && fwrite(buf, 1, n, o) == n;
        left -= (long)n;
    }
    size_t jl = len;
    unsigned char tail[16];
    for (int i = 0; i < 8; i++)
        tail[i] = (unsigned char)((uint64_t)jl >> (8 * i));
    memcpy(tail + 8, MAGIC, 8);
    ok = ok && fwrite(data, 1, jl, o) == jl && fwrite(tail, 1, 16, o) == 16;
    ok = fflush(o) == 0 && ok;
    ok = fsync(fileno(o)) == 0 && ok;
    ok = fclose(o) == 0 && ok;
    fclose(in);
    if (ok && chmod(tmp, 0755) != 0)
        ok = 0;
    if (!ok || rename(tmp, out) != 0) {
        snprintf(err, errlen, "cannot write '%s': %s", out, strerror(errno));
        unlink(tmp);
        return 0;
    }
    return 1;
}

/* ---- base64 (RFC 4648, with padding), for the kernels' image in the JSON */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *payload_base64_encode(const void *data, size_t n)
{
    const unsigned char *s = data;
    char *out = malloc((n + 2) / 3 * 4 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0) | (i + 2 < n ? s[i + 2] : 0);
        *o++ = B64[v >> 18 & 63];
        *o++ = B64[v >> 12 & 63];
        *o++ = i + 1 < n ? B64[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? B64[v & 63] : '=';
    }
    *o = 0;
    return out;
}

static int b64_value(char c)
{
    const char *p = c ? strchr(B64, c) : NULL;
    return p ? (int)(p - B64) : -1;
}

void *payload_base64_decode(const char *s, size_t *n)
{
    size_t len = strlen(s);
    if (len % 4)
        return NULL;
    unsigned char *out = malloc(len / 4 * 3 + 1);
    size_t k = 0;
    if (!out)
        return NULL;
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        for (int j = 0; j < 4; j++) {
            v[j] = s[i + j] == '=' && i + 4 == len && j >= 2 ? 0 : b64_value(s[i + j]);
            if (v[j] < 0) {
                free(out);
                return NULL;
            }
        }
        unsigned x = (unsigned)v[0] << 18 | (unsigned)v[1] << 12 | (unsigned)v[2] << 6 | (unsigned)v[3];
        out[k++] = (unsigned char)(x >> 16);
        if (s[i + 2] != '=')
            out[k++] = (unsigned char)(x >> 8);
        if (s[i + 3] != '=')
            out[k++] = (unsigned char)x;
    }
    *n = k;
    return out;
}
