/* test_comm_nccl.c - the NCCL transport (runtime/comm/comm_nccl.c) on real GPUs.
 * Not part of `make test`: CI has no GPU. On a machine with N GPUs:
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -I/usr/local/cuda/include -o test_comm_nccl tests/gpu/test_comm_nccl.c \
 *      runtime/comm/comm.c runtime/comm/comm_sim.c runtime/comm/comm_tcp.c runtime/comm/comm_wire.c \
 *      runtime/comm/comm_nccl.c train/launch.c util/*.c -L/usr/local/cuda/lib64 -lcudart -lpthread -ldl -lm
 *   ./test_comm_nccl NPROC EP [id]     (NPROC <= N; `id`: pass the NCCL id in MOEC_NCCL_ID, not over TCP)
 *
 * It launches NPROC ranks with launch_local (one per GPU); each runs every
 * collective on every group with device buffers and checks: allreduce
 * against a double-precision sum and bit-identical across the group (NCCL's
 * order is its own, so not against the SIM/TCP bits), allgather and
 * alltoallv exactly, zero-length calls; the asynchronous entries of the GPU
 * backend's steps (enqueue_alltoall, enqueue_allreduce) captured in a CUDA
 * graph and replayed, waited for with wait_device. With NPROC >= 2 a last round has
 * rank 1 exit and checks that the others fail naming it instead of hanging. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../runtime/comm/comm.h"
#include "../../train/launch.h"

static int nfail, npass;
#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (cond)                                                                          \
            npass++;                                                                       \
        else {                                                                             \
            nfail++;                                                                       \
            fprintf(stderr, "rank %d: FAILED %s: ", my_rank, #cond);                      \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fputc('\n', stderr);                                                           \
        }                                                                                  \
    } while (0)
static int my_rank;

static double in_value(int rank, int g, int i)
{
    unsigned h = (unsigned)(rank * 7919 + g * 104729 + i * 2654435761u);
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    return ((h & 1) ? -1.0 : 1.0) * ldexp(1.0 + (h >> 8) / 16777216.0, (int)(h % 41) - 20);
}

static size_t a2a_len(int src, int dst, int g) { return (size_t)((src * 7 + dst * 3 + g * 5) % 6) * 5; }

static void *dev(size_t n)
{
    void *p = NULL;
    if (cudaMalloc(&p, n ? n : 1) != cudaSuccess) {
        fprintf(stderr, "cudaMalloc failed\n");
        exit(2);
    }
    return p;
}

/* a stream's completion, for CommOps.wait_device */
static int stream_done(void *arg)
{
    cudaError_t e = cudaStreamQuery((cudaStream_t)arg);
    return e == cudaSuccess ? 1 : e == cudaErrorNotReady ? 0 : -1;
}

static void run_groups(Comm *c)
{
    enum { N = 1001 };
    for (CommGroup g = COMM_WORLD; g <= COMM_DP; g++) {
        int s = comm_group_size(c, g), me = comm_group_rank(c, g);
        /* allreduce f32, then gather every member's result: all rows must be the same bits */
        float h[N], *d = dev(sizeof h), *rows = dev(sizeof h * (size_t)s);
        float *hrows = malloc(sizeof h * (size_t)s);
        for (int i = 0; i < N; i++)
            h[i] = (float)in_value(c->rank, g, i);
        cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
        CHECK(c->ops->allreduce_f32(c, g, d, N), "allreduce_f32 on %s: %s", comm_group_name(g), c->error);
        CHECK(c->ops->allgather(c, g, d, rows, sizeof h), "allgather: %s", c->error);
        cudaMemcpy(hrows, rows, sizeof h * (size_t)s, cudaMemcpyDeviceToHost);
        int same = 1, close = 1;
        for (int j = 1; j < s; j++)
            same &= !memcmp(hrows, hrows + (size_t)j * N, sizeof h);
        for (int i = 0; i < N; i++) {
            double ref = 0, mag = 0;
            for (int j = 0; j < s; j++) {
                double x = (float)in_value(comm_group_member(c, g, j), g, i);
                ref += x;
                mag += fabs(x);
            }
            close &= fabs(hrows[i] - ref) <= 4e-7 * mag;
        }
        CHECK(same, "allreduce_f32 on %s: ranks got different bits", comm_group_name(g));
        CHECK(close, "allreduce_f32 on %s: wrong sum", comm_group_name(g));
        /* f64 */
        double hd[N], *dd = dev(sizeof hd);
        for (int i = 0; i < N; i++)
            hd[i] = in_value(c->rank, g, i);
        cudaMemcpy(dd, hd, sizeof hd, cudaMemcpyHostToDevice);
        CHECK(c->ops->allreduce_f64(c, g, dd, N), "allreduce_f64: %s", c->error);
        cudaMemcpy(hd, dd, sizeof hd, cudaMemcpyDeviceToHost);
        double ref = 0, mag = 0;
        for (int j = 0; j < s; j++) {
            ref += in_value(comm_group_member(c, g, j), g, 5);
            mag += fabs(in_value(comm_group_member(c, g, j), g, 5));
        }
        CHECK(fabs(hd[5] - ref) <= 1e-15 * mag, "allreduce_f64 on %s: %g vs %g", comm_group_name(g), hd[5], ref);
        /* alltoallv with gaps, exact */
        size_t sb[8], so[8], rb[8], ro[8], sl = 0, rl = 0;
        for (int j = 0; j < s; j++) {
            int peer = comm_group_member(c, g, j);
            sl += (size_t)j;
            so[j] = sl;
            sb[j] = a2a_len(c->rank, peer, g);
            sl += sb[j];
            rl += 2 * (size_t)j + 1;
            ro[j] = rl;
            rb[j] = a2a_len(peer, c->rank, g);
            rl += rb[j];
        }
        unsigned char *hs = calloc(sl + 1, 1), *hr = malloc(rl + 1);
        for (int j = 0; j < s; j++)
            for (size_t k = 0; k < sb[j]; k++)
                hs[so[j] + k] = (unsigned char)(c->rank * 31 + comm_group_member(c, g, j) * 17 + (int)k);
        unsigned char *ds = dev(sl + 1), *dr = dev(rl + 1);
        cudaMemcpy(ds, hs, sl + 1, cudaMemcpyHostToDevice);
        cudaMemset(dr, 0xee, rl + 1);
        CHECK(c->ops->alltoallv(c, g, ds, sb, so, dr, rb, ro), "alltoallv: %s", c->error);
        cudaMemcpy(hr, dr, rl + 1, cudaMemcpyDeviceToHost);
        int ok = 1;
        for (int i = 0; i < s; i++)
            for (size_t k = 0; k < rb[i]; k++)
                ok &= hr[ro[i] + k] == (unsigned char)(comm_group_member(c, g, i) * 31 + c->rank * 17 + (int)k);
        ok &= hr[0] == 0xee && hr[rl] == 0xee;
        CHECK(ok, "alltoallv on %s: wrong bytes", comm_group_name(g));
        /* in-place allgather, zero-length calls, barrier */
        CHECK(c->ops->allgather(c, g, rows + (size_t)me * N, rows, sizeof h), "in-place allgather: %s", c->error);
        size_t zero[8] = {0};
        CHECK(c->ops->allreduce_f32(c, g, d, 0) && c->ops->allgather(c, g, d, rows, 0) &&
                  c->ops->alltoallv(c, g, ds, zero, zero, dr, zero, zero) && c->ops->barrier(c, g),
              "zero-length calls: %s", c->error);
        /* the asynchronous entries the GPU backend's steps use (decision 46): enqueued on our own stream,
         * captured in a CUDA graph, replayed twice with new inputs, waited for with wait_device */
        {
            enum { W = 33 };
            cudaStream_t st;
            cudaGraph_t gr;
            cudaGraphExec_t ge;
            float *as = dev(sizeof(float) * W * (size_t)s), *ar = dev(sizeof(float) * W * (size_t)s);
            float *hs2 = malloc(sizeof(float) * W * (size_t)s), *hr2 = malloc(sizeof(float) * W * (size_t)s);
            double *sum = dev(sizeof(double)), hsum;
            int okc = cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess &&
                      cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
            okc = okc && c->ops->enqueue_alltoall(c, g, as, ar, sizeof(float) * W, st) &&
                  c->ops->enqueue_allreduce(c, g, sum, 1, 1, st);
            okc = cudaStreamEndCapture(st, &gr) == cudaSuccess && okc &&
                  cudaGraphInstantiate(&ge, gr, 0) == cudaSuccess;
            CHECK(okc, "capturing enqueue_alltoall and enqueue_allreduce on %s: %s", comm_group_name(g), c->error);
            for (int rep = 0; okc && rep < 2; rep++) {
                for (int j = 0; j < s; j++)
                    for (int k = 0; k < W; k++)
                        hs2[j * W + k] = (float)(rep * 1000000 + c->rank * 1000 + comm_group_member(c, g, j) * 40 + k);
                hsum = (double)(c->rank + 1 + rep);
                cudaMemcpy(as, hs2, sizeof(float) * W * (size_t)s, cudaMemcpyHostToDevice);
                cudaMemcpy(sum, &hsum, sizeof hsum, cudaMemcpyHostToDevice);
                cudaMemset(ar, 0xff, sizeof(float) * W * (size_t)s);
                CHECK(cudaGraphLaunch(ge, st) == cudaSuccess, "cudaGraphLaunch");
                CHECK(c->ops->wait_device(c, stream_done, st, "the test's graph"), "wait_device: %s", c->error);
                cudaMemcpy(hr2, ar, sizeof(float) * W * (size_t)s, cudaMemcpyDeviceToHost);
                cudaMemcpy(&hsum, sum, sizeof hsum, cudaMemcpyDeviceToHost);
                int oka = 1;
                double want = 0;
                for (int i = 0; i < s; i++) {
                    want += (double)(comm_group_member(c, g, i) + 1 + rep);
                    for (int k = 0; k < W; k++)
                        oka &= hr2[i * W + k] ==
                               (float)(rep * 1000000 + comm_group_member(c, g, i) * 1000 + c->rank * 40 + k);
                }
                CHECK(oka, "enqueue_alltoall in a graph on %s (replay %d): wrong values", comm_group_name(g), rep);
                CHECK(hsum == want, "enqueue_allreduce in a graph on %s (replay %d): %g vs %g", comm_group_name(g), rep,
                      hsum, want);
            }
            if (okc) {
                cudaGraphExecDestroy(ge);
                cudaGraphDestroy(gr);
            }
            cudaStreamDestroy(st);
            cudaFree(as);
            cudaFree(ar);
            cudaFree(sum);
            free(hs2);
            free(hr2);
        }
        cudaFree(d);
        cudaFree(rows);
        cudaFree(dd);
        cudaFree(ds);
        cudaFree(dr);
        free(hrows);
        free(hs);
        free(hr);
    }
}

static int child(int ep, const char *mode)
{
    int rank, world, port;
    char *addr, err[512];
    if (!launch_env(&rank, &world, &addr, &port, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    my_rank = rank;
    Comm *c = comm_nccl_create(rank, world, ep, -1, addr, port, err, sizeof err);
    free(addr);
    if (!c) {
        fprintf(stderr, "rank %d: %s\n", rank, err);
        return 2;
    }
    run_groups(c);
    if (!strcmp(mode, "die") && world >= 2) {
        CHECK(c->ops->barrier(c, COMM_WORLD), "barrier: %s", c->error);
        if (rank == 1)
            _exit(0);  /* leaves without a word: the others must not hang */
        float *d = dev(4 << 20);
        int r = c->ops->allreduce_f32(c, COMM_WORLD, d, 1 << 20);
        CHECK(!r && strstr(c->error, "rank 1"), "dead peer: %s", c->error);
        fprintf(stderr, "rank %d (expected failure): %s\n", rank, c->error);
        _exit(nfail ? 1 : 0);  /* aborted communicators: skip the teardown */
    }
    comm_free(c);
    printf("rank %d: %d passed, %d failed\n", rank, npass, nfail);
    return nfail ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 4 && !strcmp(argv[1], "--child"))
        return child(atoi(argv[2]), argv[3]);
    if (argc < 3) {
        fprintf(stderr, "usage: %s NPROC EP [id|die]\n", argv[0]);
        return 2;
    }
    int nproc = atoi(argv[1]);
    char err[512];
    const char *mode = argc > 3 ? argv[3] : "tcp";
    if (!strcmp(mode, "id")) {
        char hex[257];
        if (!comm_nccl_unique_id_hex(hex, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        setenv("MOEC_NCCL_ID", hex, 1);
    }
    char *cargv[] = {argv[0], "--child", argv[2], (char *)mode, "--nproc", argv[1], NULL};
    int rc = launch_local(nproc, 6, cargv, err, sizeof err);
    printf("launch (%s): %s\n", mode, rc ? err : "all ranks passed");
    return rc;
}
