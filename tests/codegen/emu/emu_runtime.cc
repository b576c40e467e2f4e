// emu_runtime.cc - runs the kernels of one generated kernels.cu on the CPU
// (see emu.h). Built by tests/codegen/emu/run.sh with
//   -DKERNELS_CU='"DIR/kernels.cu"' -DKERNEL_TABLE='"DIR/table.inc"'
// where table.inc lists EMU_K(name) for every node kernel. The C side
// (check.c) calls emu_launch() by kernel name.
#include "emu.h"

#include <setjmp.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include KERNELS_CU

emu_dim3 threadIdx, blockIdx;
emu_dim3 blockDim, gridDim;

// ---- the coroutines of one block
enum { RUNNABLE, AT_BLOCK_BARRIER, AT_WARP_BARRIER, DONE };

// A coroutine starts with setcontext (makecontext gave it its stack) and
// then switches with _setjmp/_longjmp, which unlike swapcontext make no
// system call.
struct Fiber {
    ucontext_t ctx;
    jmp_buf jb;
    int state, started;
    std::vector<char> stack;
};

static std::vector<Fiber> fibers;
static jmp_buf scheduler;
static int current;
static double warp_slots[32][32];
static const std::function<void(void **)> *running;
static void **running_args;

static void yield_as(int state)
{
    fibers[current].state = state;
    if (!_setjmp(fibers[current].jb))
        _longjmp(scheduler, 1);
}

static void resume(int t)
{
    current = t;
    threadIdx = {(unsigned)t, 0, 0};
    if (!_setjmp(scheduler)) {
        if (!fibers[t].started) {
            fibers[t].started = 1;
            setcontext(&fibers[t].ctx);
        }
        _longjmp(fibers[t].jb, 1);
    }
}

void emu_syncthreads(void) { yield_as(AT_BLOCK_BARRIER); }
void emu_syncwarp(void) { yield_as(AT_WARP_BARRIER); }
void emu_warp_put(double v) { warp_slots[threadIdx.x >> 5][threadIdx.x & 31] = v; }
double emu_warp_get(int lane) { return warp_slots[threadIdx.x >> 5][lane]; }

static void fiber_main(void)
{
    (*running)(running_args);
    fibers[current].state = DONE;
    _longjmp(scheduler, 1);
}

// Runs one block to completion: round-robin over the runnable coroutines;
// a barrier opens when every thread (of the block, or of the warp) waits at it.
static void run_block(int block)
{
    for (int t = 0; t < block; t++) {
        Fiber &f = fibers[t];
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = f.stack.data();
        f.ctx.uc_stack.ss_size = f.stack.size();
        f.ctx.uc_link = nullptr;
        makecontext(&f.ctx, fiber_main, 0);
        f.state = RUNNABLE;
        f.started = 0;
    }
    for (;;) {
        int progressed = 0, done = 0;
        for (int t = 0; t < block; t++) {
            if (fibers[t].state != RUNNABLE)
                continue;
            resume(t);
            progressed = 1;
        }
        int at_block = 0;
        for (int t = 0; t < block; t++) {
            done += fibers[t].state == DONE;
            at_block += fibers[t].state == AT_BLOCK_BARRIER;
        }
        if (done == block)
            return;
        for (int w = 0; w < block / 32; w++) {
            int n = 0;
            for (int l = 0; l < 32; l++)
                n += fibers[w * 32 + l].state == AT_WARP_BARRIER;
            if (n == 32) {
                for (int l = 0; l < 32; l++)
                    fibers[w * 32 + l].state = RUNNABLE;
                progressed = 1;
            }
        }
        if (at_block && at_block + done == block) {
            if (done) {
                fprintf(stderr, "emu: __syncthreads reached by %d threads while %d have returned\n", at_block, done);
                abort();
            }
            for (int t = 0; t < block; t++)
                fibers[t].state = RUNNABLE;
            progressed = 1;
        }
        if (!progressed) {
            fprintf(stderr, "emu: deadlock: threads wait at barriers that cannot open\n");
            abort();
        }
    }
}

static void launch(const std::function<void(void **)> &f, long long grid, int block, void **args)
{
    blockDim = {(unsigned)block, 1, 1};
    gridDim = {(unsigned)grid, 1, 1};
    if ((int)fibers.size() < block) {
        fibers.resize((size_t)block);
        for (Fiber &fb : fibers)
            fb.stack.resize(256 * 1024);
    }
    running = &f;
    running_args = args;
    for (long long b = 0; b < grid; b++) {
        blockIdx = {(unsigned)b, 0, 0};
        run_block(block);
    }
}

// a node kernel takes pointers and integers (a count passed at run time, plan.h PLAN_ARG_I32 / I64, which
// check.c passes in the pointer's bits): each argument cast to its parameter's type
template <typename A> static A arg_as(void *p)
{
    if constexpr (std::is_integral<A>::value)
        return (A)(intptr_t)p;
    else
        return static_cast<A>(p);
}

template <typename... A, size_t... I>
static void call_impl(void (*f)(A...), void **a, std::index_sequence<I...>)
{
    f(arg_as<A>(a[I])...);
}

template <typename... A> static std::function<void(void **)> caller(void (*f)(A...))
{
    return [f](void **a) { call_impl(f, a, std::index_sequence_for<A...>{}); };
}

struct Entry {
    const char *name;
    std::function<void(void **)> call;
};

#define EMU_K(name) {#name, caller(name)},
static const Entry table[] = {
#include KERNEL_TABLE
};
#undef EMU_K

extern "C" int emu_launch(const char *name, long long grid, int block, void **args)
{
    const Entry *e = nullptr;
    for (const Entry &t : table)
        if (strcmp(t.name, name) == 0)
            e = &t;
    if (!e || block % 32 || block > 1024 || grid < 1) {
        fprintf(stderr, "emu: cannot launch %s (grid %lld, block %d)\n", name, grid, block);
        return 0;
    }
    launch(e->call, grid, block, args);
    return 1;
}

#ifndef EMU_NO_ADAMW /* tile_run.sh builds kernels without the optimizer */
// the optimizer's AdamW kernel, for the bit-exactness check against train/train.c
extern "C" int emu_adamw(float *w, float *m, float *v, const float *g, long long n, double lr, double wd,
                         double clip, double bc1, double bc2)
{
    // the step's scalars as the GPU runtime lays them out (codegen/cuda_optim.c)
    static double s[7];
    s[0] = lr;
    s[1] = bc1;
    s[2] = bc2;
    s[3] = clip;
    std::function<void(void **)> f = [=](void **) { moec_adamw(w, m, v, g, n, s, wd); };
    launch(f, 2, 256, nullptr);
    return 1;
}

// the training steps' MoE metrics (runtime/gpu/gpu.c enqueue_metrics): moec_moe_stats over `grid` blocks, then
// moec_moe_stats_add into acc ({rows, load[e], entropy, aux})
extern "C" int emu_moe_stats(double *acc, double *part, const float *logits, const int *ex, long long n, int e, int k,
                             int grid)
{
    std::function<void(void **)> f1 = [=](void **) { moec_moe_stats(part, logits, ex, n, e, k); };
    launch(f1, grid, 256, nullptr);
    std::function<void(void **)> f2 = [=](void **) { moec_moe_stats_add(acc, part, grid, n, e); };
    launch(f2, 1, 256, nullptr);
    return 1;
}

// the collectives' kernels (codegen/cuda_comm.c), for tests/codegen/emu/comm_check.cc: three blocks each, so that
// the grid-stride loops and the per-block split tables are exercised across blocks
extern "C" void emu_ep_pack(float *stage, long long cap, long long d, const float *x, long long xrows, const int *seg,
                            int ep, int El)
{
    std::function<void(void **)> f = [=](void **) { moec_ep_pack(stage, cap, d, x, xrows, seg, ep, El); };
    launch(f, 3, 256, nullptr);
}

extern "C" void emu_ep_unpack(float *y, long long yrows, long long d, const float *stage, long long cap,
                              const int *seg, int ep, int El)
{
    std::function<void(void **)> f = [=](void **) { moec_ep_unpack(y, yrows, d, stage, cap, seg, ep, El); };
    launch(f, 3, 256, nullptr);
}

extern "C" void emu_sim_alltoall(unsigned *y, const unsigned long long *base, const int *mem, int nmem, int me,
                                 int reg, long long off, long long words)
{
    std::function<void(void **)> f = [=](void **) { moec_sim_alltoall(y, base, mem, nmem, me, reg, off, words); };
    launch(f, 3, 256, nullptr);
}

extern "C" void emu_sim_allreduce(float *y, long long n, const unsigned long long *base, const int *mem, int nmem,
                                  int reg, long long off, double fac)
{
    std::function<void(void **)> f = [=](void **) { moec_sim_allreduce(y, n, base, mem, nmem, reg, off, fac); };
    launch(f, 3, 256, nullptr);
}

// phase 0: reduce-scatter, 1: all-gather; f64: doubles
extern "C" void emu_sim_inplace(void *buf, long long n, const unsigned long long *base, const int *mem, int nmem,
                                int me, int reg, long long off, int f64, int phase)
{
    std::function<void(void **)> f = [=](void **) {
        if (f64 && phase == 0)
            moec_sim_rs_f64((double *)buf, n, base, mem, nmem, me, reg, off);
        else if (f64)
            moec_sim_ag_f64((double *)buf, n, base, mem, nmem, me, reg, off);
        else if (phase == 0)
            moec_sim_rs_f32((float *)buf, n, base, mem, nmem, me, reg, off);
        else
            moec_sim_ag_f32((float *)buf, n, base, mem, nmem, me, reg, off);
    };
    launch(f, 3, 256, nullptr);
}
#endif
