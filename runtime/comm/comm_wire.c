/* comm_wire.c - the checks of the TCP transport's messages (comm_wire.h). */
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "comm_impl.h"
#include "comm_wire.h"

void wire_mac(const WireKey *k, const char *label, const void *a, size_t na, const void *b, size_t nb,
              unsigned char out[SHA256_LEN])
{
    const void *parts[3] = {label, a, b};
    size_t lens[3] = {strlen(label) + 1, na, nb};
    hmac_sha256(k->key, k->len, parts, lens, 3, out);
}

void wire_hello_mac(const WireKey *k, const unsigned char challenge[TCP_NONCE], const WireHello *h,
                    unsigned char out[SHA256_LEN])
{
    WireHello c = *h;
    memset(c.mac, 0, sizeof c.mac);
    wire_mac(k, "moec-hello", challenge, TCP_NONCE, &c, sizeof c, out);
}

void wire_sanitize(char *s, size_t n)
{
    for (size_t i = 0; i < n && s[i]; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            s[i] = '?';
}

static void printable_host(WireHello *h)
{
    h->host[TCP_HOST_LEN - 1] = 0;
    wire_sanitize(h->host, sizeof h->host);
}

int wire_challenge_ok(const WireChallenge *c)
{
    return c->magic == TCP_MAGIC && c->version == TCP_VERSION;
}

/* The MAC first: a stranger's bytes never reach the field checks. */
static int hello_proved(const WireKey *k, const unsigned char challenge[TCP_NONCE], const WireHello *h, char *msg,
                        size_t msglen)
{
    if (h->magic != TCP_MAGIC || h->version != TCP_VERSION) {
        snprintf(msg, msglen, "not a moec rank of this version");
        return 0;
    }
    unsigned char want[SHA256_LEN];
    wire_hello_mac(k, challenge, h, want);
    if (!ct_equal(want, h->mac, SHA256_LEN)) {
        snprintf(msg, msglen, "it did not prove the job's secret (MOEC_SECRET_FILE/MOEC_SECRET)");
        return 0;
    }
    return 1;
}

int wire_hello_master(const WireKey *k, const unsigned char challenge[TCP_NONCE], WireHello *h, int world, int ep,
                      const int *have, const WireHello *table, char *msg, size_t msglen)
{
    int proved = hello_proved(k, challenge, h, msg, msglen);
    printable_host(h);
    if (!proved)
        return WIRE_DROP;  /* not a rank of this job (no secret, another secret, another version): ignore it */
    if (h->world != world || h->ep != ep) {
        snprintf(msg, msglen,
                 "rank 0: rank %d (pid %d) joined with world size %d and ep %d, but rank 0 has world size %d and ep %d",
                 h->rank, h->pid, h->world, h->ep, world, ep);
        return WIRE_FATAL;
    }
    if (h->rank <= 0 || h->rank >= world) {
        snprintf(msg, msglen, "rank 0: a process (pid %d) joined as rank %d, outside 1..%d", h->pid, h->rank,
                 world - 1);
        return WIRE_FATAL;
    }
    if (have[h->rank]) {
        snprintf(msg, msglen, "rank 0: rank %d joined twice (pids %d and %d)", h->rank, table[h->rank].pid, h->pid);
        return WIRE_FATAL;
    }
    return WIRE_OK;
}

int wire_hello_mesh(const WireKey *k, const unsigned char challenge[TCP_NONCE], WireHello *h, int self, int world,
                    const int *connected, char *msg, size_t msglen)
{
    int proved = hello_proved(k, challenge, h, msg, msglen);
    printable_host(h);
    if (!proved)
        return WIRE_DROP;
    if (h->rank <= self || h->rank >= world || connected[h->rank]) {
        snprintf(msg, msglen, "a hello from rank %d, which does not connect to rank %d", h->rank, self);
        return WIRE_DROP;  /* or it died while connecting: keep waiting for the real one */
    }
    return WIRE_OK;
}

int wire_table_check(const WireKey *k, const unsigned char nonce[TCP_NONCE], WireHello *table, int world,
                     const unsigned char mac[SHA256_LEN], char *msg, size_t msglen)
{
    unsigned char want[SHA256_LEN];
    wire_mac(k, "moec-table", nonce, TCP_NONCE, table, (size_t)world * sizeof *table, want);
    if (!ct_equal(mac, want, SHA256_LEN)) {
        snprintf(msg, msglen, "did not prove the job's secret: it is not this job's rank 0 (or "
                 "MOEC_SECRET_FILE/MOEC_SECRET differ)");
        return WIRE_FATAL;
    }
    for (int r = 0; r < world; r++) {
        printable_host(&table[r]);
        if (table[r].magic != TCP_MAGIC || table[r].rank != r || table[r].world != world ||
            (r > 0 && (table[r].port < 1 || table[r].port > 65535))) {
            snprintf(msg, msglen, "sent a malformed rank table (entry %d)", r);
            return WIRE_FATAL;
        }
    }
    return WIRE_OK;
}

int wire_ack_ok(const WireKey *k, const unsigned char nonce[TCP_NONCE], const unsigned char hello_mac[SHA256_LEN],
                const unsigned char ack[SHA256_LEN])
{
    /* the acceptor's answer binds our nonce to our hello's MAC, which covers its challenge */
    unsigned char want[SHA256_LEN];
    wire_mac(k, "moec-ack", nonce, TCP_NONCE, hello_mac, SHA256_LEN, want);
    return ct_equal(ack, want, SHA256_LEN);
}

int wire_header_check(const WireHeader *h, int op, int g, uint32_t seq, uint64_t rlen, int self, int peer,
                      char *msg, size_t msglen)
{
    const char *opn = comm_op_name((CommOpKind)op), *gn = comm_group_name((CommGroup)g);
    if (h->magic != TCP_MAGIC) {
        snprintf(msg, msglen, "rank %d: rank %d sent a corrupt message header during %s on %s", self, peer, opn, gn);
        return WIRE_FATAL;
    }
    if (h->op == TCP_NOTICE)
        return WIRE_NOTICE;
    if (h->op != op || h->group != g || h->seq != seq) {
        snprintf(msg, msglen, "rank %d: mismatched collectives: rank %d is in %s on %s (#%u), rank %d sent %s on %s (#%u)",
                 self, self, opn, gn, seq, peer, comm_op_name((CommOpKind)h->op),
                 h->group <= COMM_DP ? comm_group_name((CommGroup)h->group) : "?", h->seq);
        return WIRE_FATAL;
    }
    if (h->len != rlen) {
        if (op == COMM_OP_ALLTOALLV)
            snprintf(msg, msglen, "rank %d: alltoallv on %s: rank %d sends %llu bytes to rank %d, which expects %llu",
                     self, gn, peer, (unsigned long long)h->len, self, (unsigned long long)rlen);
        else
            snprintf(msg, msglen, "rank %d: mismatched sizes in %s on %s: rank %d sent %llu bytes, rank %d expects %llu",
                     self, opn, gn, peer, (unsigned long long)h->len, self, (unsigned long long)rlen);
        return WIRE_FATAL;
    }
    return WIRE_OK;
}

void wire_notice_text(const char *raw, uint64_t len, char out[TCP_NOTICE_MAX + 1])
{
    size_t n = len < TCP_NOTICE_MAX ? (size_t)len : TCP_NOTICE_MAX;
    memcpy(out, raw, n);
    out[n] = 0;
    wire_sanitize(out, n + 1);
}
