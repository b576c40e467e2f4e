/* sha256.h - SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104, FIPS 198-1):
 * the rendezvous's challenge-response (runtime/comm/comm_tcp.c) proves
 * that both ends know the job's secret without sending it. Checked against
 * the FIPS 180-4 examples and the RFC 4231 vectors in tests/unit/test_util.c. */
#ifndef MOEC_SHA256_H
#define MOEC_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

typedef struct Sha256 {
    uint32_t h[8];
    uint64_t len;            /* bytes hashed so far */
    unsigned char buf[64];
    size_t nbuf;
} Sha256;

void sha256_init(Sha256 *s);
void sha256_update(Sha256 *s, const void *data, size_t n);
void sha256_final(Sha256 *s, unsigned char out[SHA256_LEN]);
void sha256(const void *data, size_t n, unsigned char out[SHA256_LEN]);

/* HMAC-SHA-256 of the concatenation of nparts parts under key. */
void hmac_sha256(const void *key, size_t keylen, const void *const *parts, const size_t *lens, int nparts,
                 unsigned char out[SHA256_LEN]);

/* Constant-time comparison of n bytes: 1 when equal. */
int ct_equal(const void *a, const void *b, size_t n);

#endif
