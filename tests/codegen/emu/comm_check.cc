// comm_check.cc - the collectives' kernels of codegen/cuda_comm.c (runtime/gpu/gpu.c, decision 46), run on the CPU
// emulator, against the exchanges' definitions (the CPU backend's ep_exchange and all_reduce, runtime/cpu/
// kernels.inc), bit for bit (tests/codegen/ep_exchange.test). Ranks are arrays here; what separates the kernels
// on the GPU (the simulator's barriers, NCCL) is the order in which this program runs them.
//  1. all_to_all_counts through moec_sim_alltoall: rank r receives every rank's counts of its experts;
//  2. dispatch and combine at ep 2, 3 and 4, rows of width 5 and 1, with empty experts, a rank that gets no rows,
//     every row to one expert: moec_ep_pack, then the slots moved as NCCL moves them (slot r of rank i to slot i
//     of rank r) and as the simulator reads them (moec_sim_alltoall from the peers' memory), then moec_ep_unpack;
//     the staging filled with NaN first, so that a row read from past a segment shows;
//  3. an all_reduce node (moec_sim_allreduce: the members' sum in member order, times the factor as the CPU
//     rounds it) and the in-place all-reduce of the buckets and of the norm (moec_sim_rs_*, moec_sim_ag_*) in
//     float and double, against the serial sum ((x0 + x1) + x2) + ... (comm_sum_f32).
// Prints a summary; exit 1 on any difference.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <vector>

extern "C" {
void emu_ep_pack(float *stage, long long cap, long long d, const float *x, long long xrows, const int *seg, int ep,
                 int El);
void emu_ep_unpack(float *y, long long yrows, long long d, const float *stage, long long cap, const int *seg, int ep,
                   int El);
void emu_sim_alltoall(unsigned *y, const unsigned long long *base, const int *mem, int nmem, int me, int reg,
                      long long off, long long words);
void emu_sim_allreduce(float *y, long long n, const unsigned long long *base, const int *mem, int nmem, int reg,
                       long long off, double fac);
void emu_sim_inplace(void *buf, long long n, const unsigned long long *base, const int *mem, int nmem, int me, int reg,
                     long long off, int f64, int phase);
int checked_mul_i64(int64_t a, int64_t b, int64_t *out) { return !__builtin_mul_overflow(a, b, out); }
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float value(void) { return ldexpf((float)(int)(next() % 2001 - 1000) / 997.0f, (int)(next() % 41) - 20); }

static int checks, failed;
static void check(int ok, const char *what, int ep, int r)
{
    checks++;
    if (!ok) {
        failed++;
        printf("FAIL: %s (ep %d, rank %d)\n", what, ep, r);
    }
}

// a base table where "region" reg of rank r starts at p[r]
static std::vector<unsigned long long> table(const std::vector<void *> &p, int reg)
{
    std::vector<unsigned long long> b(3 * p.size(), 0);
    for (size_t r = 0; r < p.size(); r++)
        b[3 * r + reg] = (unsigned long long)(uintptr_t)p[r];
    return b;
}

// rows of segment j of seg ([ep][El] or [E], the same layout) and where it starts
static long long seg_len(const std::vector<int> &seg, int j, int El)
{
    long long n = 0;
    for (int e = 0; e < El; e++)
        n += seg[(size_t)j * El + e];
    return n;
}
static long long seg_off(const std::vector<int> &seg, int j, int El)
{
    long long n = 0;
    for (int i = 0; i < j; i++)
        n += seg_len(seg, i, El);
    return n;
}

// the counts of rank r's R rows over E experts; mode 0 random (some experts empty), 1 all rows to expert 0
// (every other rank gets no rows), 2 all to the last expert
static std::vector<int> make_counts(int E, long long R, int mode)
{
    std::vector<int> c((size_t)E, 0);
    if (mode == 1)
        c[0] = (int)R;
    else if (mode == 2)
        c[(size_t)E - 1] = (int)R;
    else
        for (long long i = 0; i < R; i++) {
            int e = (int)(next() % (uint64_t)E);
            if (e == 1 && E > 2)
                e = 2;  // expert 1 stays empty
            c[(size_t)e]++;
        }
    return c;
}

static void exchange(int ep, int El, long long R, long long d, int mode)
{
    const int E = ep * El;
    std::vector<int> mem((size_t)ep);
    for (int r = 0; r < ep; r++)
        mem[(size_t)r] = r;
    std::vector<std::vector<int>> counts((size_t)ep), rc((size_t)ep);
    for (int r = 0; r < ep; r++)
        counts[(size_t)r] = make_counts(E, R, mode == 1 && r == ep - 1 ? 2 : mode);
    // 1. all_to_all_counts: rc[r][i][e] = counts[i][r * El + e], through the simulator's all-to-all
    {
        std::vector<void *> p((size_t)ep);
        for (int r = 0; r < ep; r++)
            p[(size_t)r] = counts[(size_t)r].data();
        std::vector<unsigned long long> base = table(p, 2);
        for (int r = 0; r < ep; r++) {
            rc[(size_t)r].assign((size_t)E, -7);
            emu_sim_alltoall((unsigned *)rc[(size_t)r].data(), base.data(), mem.data(), ep, r, 2, 0, El);
            int ok = 1;
            for (int i = 0; i < ep; i++)
                for (int e = 0; e < El; e++)
                    ok &= rc[(size_t)r][(size_t)i * El + e] == counts[(size_t)i][(size_t)r * El + e];
            check(ok, "all_to_all_counts", ep, r);
        }
    }
    // 2. dispatch (home rows R -> received ep * R) and combine (back)
    for (int combine = 0; combine < 2; combine++) {
        long long xrows = combine ? ep * R : R, yrows = combine ? R : ep * R, cap = R;
        std::vector<std::vector<float>> x((size_t)ep), ref((size_t)ep);
        for (int r = 0; r < ep; r++) {
            x[(size_t)r].resize((size_t)(xrows * d));
            for (float &v : x[(size_t)r])
                v = value();
        }
        const std::vector<std::vector<int>> &send_seg = combine ? rc : counts, &recv_seg = combine ? counts : rc;
        // the definition: y of rank r, segment i (recv_seg) = rank i's rows for r (its send_seg segment r)
        for (int r = 0; r < ep; r++) {
            ref[(size_t)r].assign((size_t)(yrows * d), 0.0f);
            for (int i = 0; i < ep; i++) {
                long long n = seg_len(send_seg[(size_t)i], r, El), from = seg_off(send_seg[(size_t)i], r, El),
                          to = seg_off(recv_seg[(size_t)r], i, El);
                check(n == seg_len(recv_seg[(size_t)r], i, El), "the two sides' split sizes agree", ep, r);
                memcpy(&ref[(size_t)r][(size_t)(to * d)], &x[(size_t)i][(size_t)(from * d)], sizeof(float) * (size_t)(n * d));
            }
        }
        std::vector<std::vector<float>> send((size_t)ep), recv((size_t)ep), y((size_t)ep);
        for (int r = 0; r < ep; r++) {
            send[(size_t)r].assign((size_t)(ep * cap * d), NAN);
            emu_ep_pack(send[(size_t)r].data(), cap, d, x[(size_t)r].data(), xrows, send_seg[(size_t)r].data(), ep, El);
        }
        for (int transport = 0; transport < 2; transport++) {
            std::vector<void *> p((size_t)ep);
            for (int r = 0; r < ep; r++)
                p[(size_t)r] = send[(size_t)r].data();
            std::vector<unsigned long long> base = table(p, 1);
            for (int r = 0; r < ep; r++) {
                recv[(size_t)r].assign((size_t)(ep * cap * d), NAN);
                if (transport == 0)  // NCCL: slot r of rank i arrives in slot i of rank r
                    for (int i = 0; i < ep; i++)
                        memcpy(&recv[(size_t)r][(size_t)(i * cap * d)], &send[(size_t)i][(size_t)(r * cap * d)],
                               sizeof(float) * (size_t)(cap * d));
                else  // the simulator: read from the peers' memory
                    emu_sim_alltoall((unsigned *)recv[(size_t)r].data(), base.data(), mem.data(), ep, r, 1, 0, cap * d);
            }
            for (int r = 0; r < ep; r++) {
                y[(size_t)r].assign((size_t)(yrows * d), -1.0f);
                emu_ep_unpack(y[(size_t)r].data(), yrows, d, recv[(size_t)r].data(), cap, recv_seg[(size_t)r].data(), ep,
                              El);
                char what[128];
                snprintf(what, sizeof what, "%s of width %lld over %s (counts mode %d)", combine ? "combine" : "dispatch", d,
                         transport ? "the simulator" : "NCCL's slots", mode);
                check(!memcmp(y[(size_t)r].data(), ref[(size_t)r].data(), sizeof(float) * (size_t)(yrows * d)), what, ep, r);
            }
        }
    }
}

template <typename T> static void inplace(int nmem, long long n, int f64)
{
    std::vector<std::vector<T>> buf((size_t)nmem);
    std::vector<T> sum((size_t)n);
    for (int k = 0; k < nmem; k++) {
        buf[(size_t)k].resize((size_t)n);
        for (T &v : buf[(size_t)k])
            v = (T)value() * (T)(1 + (next() % 3));
    }
    for (long long i = 0; i < n; i++) {
        T s = buf[0][(size_t)i];
        for (int k = 1; k < nmem; k++)
            s = s + buf[(size_t)k][(size_t)i];
        sum[(size_t)i] = s;
    }
    std::vector<void *> p((size_t)nmem);
    std::vector<int> mem((size_t)nmem);
    for (int k = 0; k < nmem; k++) {
        p[(size_t)k] = buf[(size_t)k].data();
        mem[(size_t)k] = k;
    }
    std::vector<unsigned long long> base = table(p, 1);
    for (int phase = 0; phase < 2; phase++)  // the barriers: every member's reduce-scatter, then every all-gather
        for (int k = 0; k < nmem; k++)
            emu_sim_inplace(buf[(size_t)k].data(), n, base.data(), mem.data(), nmem, k, 1, 0, f64, phase);
    for (int k = 0; k < nmem; k++)
        check(!memcmp(buf[(size_t)k].data(), sum.data(), sizeof(T) * (size_t)n),
              f64 ? "in-place all-reduce (double)" : "in-place all-reduce (float)", nmem, k);
}

int main(void)
{
    for (int ep = 2; ep <= 4; ep++)
        for (int mode = 0; mode < 3; mode++)
            for (long long d : {5LL, 1LL})
                exchange(ep, 2, 37 + 11 * ep, d, mode);
    // an all_reduce node: y = (float)((double)sum * f), the members' sources in a region at an offset
    for (int nmem = 1; nmem <= 4; nmem++) {
        const long long n = 777, off = 64;
        std::vector<std::vector<float>> src((size_t)nmem);
        std::vector<void *> p((size_t)nmem);
        std::vector<int> mem((size_t)nmem);
        for (int k = 0; k < nmem; k++) {
            src[(size_t)k].resize((size_t)(n + off / 4));
            for (float &v : src[(size_t)k])
                v = value();
            p[(size_t)k] = src[(size_t)k].data();
            mem[(size_t)k] = nmem - 1 - k;  // members need not be in rank order: mem[k] is member k's rank
        }
        std::vector<unsigned long long> base = table(p, 2);
        std::vector<float> y((size_t)n), want((size_t)n);
        for (long long i = 0; i < n; i++) {
            float s = src[(size_t)mem[0]][(size_t)(off / 4 + i)];
            for (int k = 1; k < nmem; k++)
                s = s + src[(size_t)mem[(size_t)k]][(size_t)(off / 4 + i)];
            want[(size_t)i] = (float)((double)s * 0.25);
        }
        emu_sim_allreduce(y.data(), n, base.data(), mem.data(), nmem, 2, off, 0.25);
        check(!memcmp(y.data(), want.data(), sizeof(float) * (size_t)n), "all_reduce node", nmem, 0);
    }
    for (int nmem = 1; nmem <= 4; nmem++) {
        inplace<float>(nmem, 1000, 0);
        inplace<float>(nmem, 3, 0);  // fewer elements than members: empty chunks
        inplace<double>(nmem, 1, 1);  // the shards' sum of squares
        inplace<double>(nmem, 7, 1);
    }
    printf("collectives on the device: %d checks, %d failed\n", checks, failed);
    if (!failed)
        printf("all bit-identical to the exchanges' definitions\n");
    return failed ? 1 : 0;
}
