/* comm_wire.h - the TCP transport's messages (comm_tcp.c) and the checks of
 * what arrives from the network: pure functions of the bytes received, the
 * job's key and what the receiver expects, with no socket in sight, so that
 * the fuzzer (tests/fuzz/fuzz_comm.c) drives the transport's own code.
 *
 * Every check reads a whole fixed-size message (the transport reassembles
 * it from the stream first), verifies its MAC before any other field, and
 * makes the text fields printable (NUL-terminated, control characters
 * replaced) before they can reach a message. */
#ifndef MOEC_COMM_WIRE_H
#define MOEC_COMM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "../../util/sha256.h"

#define TCP_MAGIC 0x4d4f4543u  /* "MOEC": also catches a peer of the other byte order */
#define TCP_VERSION 2u           /* 2: authenticated hellos */
#define TCP_NONCE 32
#define TCP_HOST_LEN 64
#define TCP_NOTICE 0xffu          /* WireHeader.op of a failure notice: len bytes of text follow */
#define TCP_NOTICE_MAX 1024

/* Sent by each rank during setup (to rank 0, then to the peers it connects
 * to); rank 0 sends back one per rank. Both ends are the same build, so
 * native layout is fine; the magic catches a foreign byte order. */
typedef struct WireHello {
    uint32_t magic, version;
    int32_t rank, world, ep, pid;
    int32_t port;                /* the rank's listener */
    char host[TCP_HOST_LEN];     /* its numeric address */
    unsigned char nonce[TCP_NONCE];  /* the connector's challenge to the acceptor */
    unsigned char mac[SHA256_LEN];   /* HMAC(secret, "moec-hello" || acceptor's challenge || this, mac zeroed) */
} WireHello;

/* The acceptor's first words on every connection. */
typedef struct WireChallenge {
    uint32_t magic, version;
    unsigned char nonce[TCP_NONCE];
} WireChallenge;

/* In front of every collective message. */
typedef struct WireHeader {
    uint32_t magic;
    uint8_t op, group, pad[2];
    uint32_t seq;                /* per group, counts exchanges */
    uint64_t len;
} WireHeader;

/* The job's secret (len 0: none, loopback only). */
typedef struct WireKey {
    const unsigned char *key;
    size_t len;
} WireKey;

/* What a check says about a message. */
enum {
    WIRE_OK = 0,
    WIRE_DROP,     /* not from this job (or garbage): close the connection, the job goes on; msg says why */
    WIRE_FATAL,    /* from this job but inconsistent: the job stops with msg */
    WIRE_NOTICE,   /* a header announcing the peer's failure notice (header's len bytes of text follow) */
};

/* HMAC(key, label || a || b), the label with its NUL. */
void wire_mac(const WireKey *k, const char *label, const void *a, size_t na, const void *b, size_t nb,
              unsigned char out[SHA256_LEN]);
/* The MAC a hello answering `challenge` must carry. */
void wire_hello_mac(const WireKey *k, const unsigned char challenge[TCP_NONCE], const WireHello *h,
                    unsigned char out[SHA256_LEN]);

/* Replaces control characters in the first n bytes (up to a NUL) by '?'. */
void wire_sanitize(char *s, size_t n);

/* The acceptor's challenge, as the connector reads it: 1 when it is ours. */
int wire_challenge_ok(const WireChallenge *c);

/* Rank 0 of a job of `world` ranks (ep) reads a hello that answers
 * `challenge`; have[r]/table[r] are the ranks already arrived. WIRE_OK (the
 * hello is a new rank: h->rank in 1..world-1), WIRE_DROP (no proof of the
 * secret, another version) or WIRE_FATAL (a rank of this job with another
 * layout, a rank out of range or twice). h's host is made printable. */
int wire_hello_master(const WireKey *k, const unsigned char challenge[TCP_NONCE], WireHello *h, int world, int ep,
                      const int *have, const WireHello *table, char *msg, size_t msglen);

/* Rank `self` accepting a mesh connection: WIRE_OK when the hello proves
 * the secret and comes from a higher rank not yet connected (connected[r]
 * nonzero), else WIRE_DROP. */
int wire_hello_mesh(const WireKey *k, const unsigned char challenge[TCP_NONCE], WireHello *h, int self, int world,
                    const int *connected, char *msg, size_t msglen);

/* A rank reads rank 0's table of `world` entries and its MAC of the
 * nonce it sent: WIRE_OK, or WIRE_FATAL when the MAC is wrong (not this
 * job's rank 0) or an entry is malformed (its rank, world, magic, or a port
 * outside 1..65535). Hosts are made printable. */
int wire_table_check(const WireKey *k, const unsigned char nonce[TCP_NONCE], WireHello *table, int world,
                     const unsigned char mac[SHA256_LEN], char *msg, size_t msglen);

/* A mesh acceptor's acknowledgement of the hello (whose MAC is hello_mac)
 * that carried our nonce: 1 when it proves the secret. */
int wire_ack_ok(const WireKey *k, const unsigned char nonce[TCP_NONCE], const unsigned char hello_mac[SHA256_LEN],
                const unsigned char ack[SHA256_LEN]);

/* Rank `self` in collective op (a CommOpKind) on group g, exchange #seq,
 * expecting rlen bytes, reads the header of rank `peer`'s message: WIRE_OK,
 * WIRE_NOTICE (a failure notice follows) or WIRE_FATAL (corrupt, another
 * collective, another size) with msg. */
int wire_header_check(const WireHeader *h, int op, int g, uint32_t seq, uint64_t rlen, int self, int peer,
                      char *msg, size_t msglen);

/* A failure notice's text as printed: the first min(len, TCP_NOTICE_MAX)
 * bytes of raw (which holds at least that many), printable, NUL-terminated
 * in out[TCP_NOTICE_MAX + 1]. */
void wire_notice_text(const char *raw, uint64_t len, char out[TCP_NOTICE_MAX + 1]);

#endif
