/* fuzz_comm.c - libFuzzer target for the messages of the TCP rendezvous and
 * rank mesh (runtime/comm/comm_wire.c, the checks comm_tcp.c applies to
 * every message it reads): rank 0's check of a hello, a mesh acceptor's, a
 * rank's check of rank 0's table, of the challenge, of a mesh
 * acknowledgement, of a collective's header, and a failure notice's text.
 *
 * Input: byte 0 picks the message, byte 1 the key (none, or a fixed 32-byte
 * one) and whether the harness signs the message with that key, bytes 2-5
 * what the receiver expects (world, ep, its rank, ranks already arrived),
 * the rest is the message (cut or zero-padded to its size). Unsigned
 * messages test that a stranger's bytes are dropped at the MAC; signed ones
 * (as a misconfigured or buggy rank of the job would send) reach the field
 * checks behind it. Every message must be accepted or refused with a
 * message, never crash, and text that reaches a message must be printable. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/comm/comm.h"
#include "../../runtime/comm/comm_impl.h"
#include "../../runtime/comm/comm_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_COMM_WORLD_MAX 8

static void fuzz_comm_printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n && s[i]; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            abort();  /* a control character would reach the terminal */
}

static void fuzz_comm_msg(const char *msg, size_t cap)
{
    if (!memchr(msg, 0, cap) || !msg[0])
        abort();  /* every refusal says why */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned char secret[32] = "moec fuzz secret, thirty-two by";
    static const unsigned char challenge[TCP_NONCE] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                                       17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
    if (size < 6)
        return 0;
    int kind = data[0] % 7, keyed = data[1] & 1, sign = (data[1] >> 1) & 1;
    int world = 1 + data[2] % FUZZ_COMM_WORLD_MAX, ep = 1 + data[3] % world, self = data[4] % world;
    int have[FUZZ_COMM_WORLD_MAX] = {1};
    for (int r = 1; r < world; r++)
        have[r] = (data[5] >> r) & 1;
    WireKey k = {keyed ? secret : NULL, keyed ? sizeof secret : 0};
    data += 6;
    size -= 6;
    char msg[512];
    memset(msg, 0, sizeof msg);
    switch (kind) {
    case 0:   /* rank 0 reads a hello */
    case 1: { /* a mesh acceptor reads a hello */
        WireHello h, table[FUZZ_COMM_WORLD_MAX];
        memset(&h, 0, sizeof h);
        memcpy(&h, data, size < sizeof h ? size : sizeof h);
        memset(table, 0, sizeof table);
        for (int r = 0; r < world; r++)
            table[r].pid = 1000 + r;
        if (sign) {
            h.magic = TCP_MAGIC;
            h.version = TCP_VERSION;
            wire_hello_mac(&k, challenge, &h, h.mac);
        }
        int v = kind == 0 ? wire_hello_master(&k, challenge, &h, world, ep, have, table, msg, sizeof msg)
                          : wire_hello_mesh(&k, challenge, &h, self, world, have, msg, sizeof msg);
        fuzz_comm_printable(h.host, sizeof h.host);
        if (!memchr(h.host, 0, sizeof h.host))
            abort();
        if (v == WIRE_OK) {
            if (!sign && size < sizeof h)
                abort();  /* a short, unsigned message cannot carry a valid MAC */
            if (h.rank < 1 || h.rank >= world || have[h.rank] || (kind == 1 && h.rank <= self))
                abort();  /* accepted a rank the job cannot use */
        } else {
            fuzz_comm_msg(msg, sizeof msg);
            if (v != WIRE_DROP && v != WIRE_FATAL)
                abort();
            if (v == WIRE_FATAL && (kind == 1 || !sign))
                abort();  /* only an authenticated hello may stop the job, and never in the mesh */
        }
        break;
    }
    case 2: { /* a rank reads rank 0's table and its MAC */
        WireHello table[FUZZ_COMM_WORLD_MAX];
        unsigned char mac[SHA256_LEN] = {0};
        size_t tlen = (size_t)world * sizeof *table;
        memset(table, 0, sizeof table);
        memcpy(table, data, size < tlen ? size : tlen);
        if (size > tlen)
            memcpy(mac, data + tlen, size - tlen < sizeof mac ? size - tlen : sizeof mac);
        if (sign)
            wire_mac(&k, "moec-table", challenge, TCP_NONCE, table, tlen, mac);
        int v = wire_table_check(&k, challenge, table, world, mac, msg, sizeof msg);
        if (v == WIRE_OK) {
            for (int r = 0; r < world; r++) {
                fuzz_comm_printable(table[r].host, sizeof table[r].host);
                if (!memchr(table[r].host, 0, sizeof table[r].host) || table[r].rank != r ||
                    (r > 0 && (table[r].port < 1 || table[r].port > 65535)))
                    abort();
            }
        } else {
            fuzz_comm_msg(msg, sizeof msg);
        }
        break;
    }
    case 3: { /* a connector reads the acceptor's challenge */
        WireChallenge c;
        memset(&c, 0, sizeof c);
        memcpy(&c, data, size < sizeof c ? size : sizeof c);
        (void)wire_challenge_ok(&c);
        break;
    }
    case 4: { /* a mesh connector reads the acknowledgement of its hello */
        unsigned char hello_mac[SHA256_LEN] = {0}, ack[SHA256_LEN] = {0};
        memcpy(hello_mac, data, size < SHA256_LEN ? size : SHA256_LEN);
        if (size > SHA256_LEN)
            memcpy(ack, data + SHA256_LEN, size - SHA256_LEN < SHA256_LEN ? size - SHA256_LEN : SHA256_LEN);
        if (sign)
            wire_mac(&k, "moec-ack", challenge, TCP_NONCE, hello_mac, SHA256_LEN, ack);
        if (wire_ack_ok(&k, challenge, hello_mac, ack) != sign && sign)
            abort();
        break;
    }
    case 5: { /* a collective's header; the expected op, group, seq and size follow it */
        WireHeader h;
        uint8_t want[14] = {0};
        memset(&h, 0, sizeof h);
        memcpy(&h, data, size < sizeof h ? size : sizeof h);
        if (size > sizeof h)
            memcpy(want, data + sizeof h, size - sizeof h < sizeof want ? size - sizeof h : sizeof want);
        int op = COMM_OP_ALLREDUCE_F32 + want[0] % 5, g = want[1] % 3;
        uint32_t seq;
        uint64_t rlen;
        memcpy(&seq, want + 2, sizeof seq);
        memcpy(&rlen, want + 6, sizeof rlen);
        int v = wire_header_check(&h, op, g, seq, rlen, self, (self + 1) % world, msg, sizeof msg);
        if (v == WIRE_OK && (h.magic != TCP_MAGIC || h.op != op || h.group != g || h.seq != seq || h.len != rlen))
            abort();
        if (v == WIRE_FATAL)
            fuzz_comm_msg(msg, sizeof msg);
        fuzz_comm_printable(msg, sizeof msg);
        break;
    }
    default: { /* a failure notice: the header's length, then the text */
        uint64_t len = 0;
        memcpy(&len, data, size < sizeof len ? size : sizeof len);
        const char *raw = size > sizeof len ? (const char *)data + sizeof len : "";
        size_t have_bytes = size > sizeof len ? size - sizeof len : 0;
        if (len > have_bytes)
            len = have_bytes;  /* the transport reads that many bytes before it calls the check */
        char text[TCP_NOTICE_MAX + 1];
        wire_notice_text(raw, len, text);
        fuzz_comm_printable(text, sizeof text);
        if (!memchr(text, 0, sizeof text))
            abort();
        break;
    }
    }
    return 0;
}
