/* cpu.c - buffer planning, thread pool and the node loop of the CPU backend. */
#include "cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../../plan/plan.h"
#include "../comm/comm.h"
#include "../../util/bf16.h"
#include "../../util/util.h"

static int cpu_threads = 1;

void cpu_set_threads(int n) { cpu_threads = n < 1 ? 1 : n > 256 ? 256 : n; }
int cpu_get_threads(void) { return cpu_threads; }

typedef struct Chunk {
    void (*fn)(void *, int64_t, int64_t);
    void *ctx;
    int64_t lo, hi;
} Chunk;

static void *chunk_main(void *arg)
{
    Chunk *c = arg;
    c->fn(c->ctx, c->lo, c->hi);
    return NULL;
}

void cpu_parallel_for(int64_t n, void (*fn)(void *, int64_t, int64_t), void *ctx)
{
    int t = cpu_threads;
    if (t > n)
        t = (int)n;
    if (t <= 1 || n < 2) {
        fn(ctx, 0, n);
        return;
    }
    pthread_t th[256];
    Chunk ch[256];
    for (int i = 0; i < t; i++) {
        ch[i] = (Chunk){fn, ctx, n * i / t, n * (i + 1) / t};
        if (i > 0 && pthread_create(&th[i], NULL, chunk_main, &ch[i]) != 0)
            die("pthread_create failed");
    }
    chunk_main(&ch[0]);
    for (int i = 1; i < t; i++)
        pthread_join(th[i], NULL);
}

size_t cpu_elem_size(const IrNode *n, CpuPrecision prec)
{
    if (n->dtype == IR_I32)
        return 4;
    return prec == CPU_F64 ? 8 : 4;
}

/* Buffers from the one memory planner (plan/memory.c), with this
 * backend's element sizes and no GPU workspaces; one allocation holds the
 * activations and gradients. */
/* Every node's buffer from the planner: bufs (caller frees) and the arena's size. */
static PlanBuf *plan_buffers(const IrGraph *g, CpuPrecision prec, size_t *bytes, size_t *total, int upto)
{
    int n = upto;
    PlanBuf *bufs = calloc((size_t)n + 1, sizeof *bufs);
    if (!bufs)
        die("out of memory planning buffers");
    for (int i = 0; i < n; i++) {
        const IrNode *node = g->nodes[i];
        size_t b = (size_t)ir_numel(node) * cpu_elem_size(node, prec);
        if (bytes)
            bytes[i] = b;
        bufs[i] = (PlanBuf){.name = NULL, .node = i, .kind = PLAN_BUF_TENSOR,
                            .storage = node->dtype == IR_I32 ? PLAN_I32 : prec == CPU_F64 ? PLAN_F64 : PLAN_F32,
                            .bytes = (int64_t)b, .alias_of = -1};
    }
    /* the planner sees the graph's first `upto` nodes: their sources all come before them */
    IrGraph head = *g;
    head.nnodes = n;
    PlanMemory mem;
    plan_memory(&head, bufs, n, 64, &mem);
    *total = (size_t)mem.region_bytes[PLAN_REGION_ACTIVATIONS];
    return bufs;
}

size_t cpu_plan_arena_bytes(const IrGraph *g, CpuPrecision prec)
{
    return cpu_plan_arena_bytes_upto(g, prec, g->nnodes);
}

size_t cpu_plan_arena_bytes_upto(const IrGraph *g, CpuPrecision prec, int upto)
{
    size_t total;
    free(plan_buffers(g, prec, NULL, &total, upto));
    return total;
}

void cpu_plan_init(CpuPlan *p, const IrGraph *g, CpuPrecision prec) { cpu_plan_init_upto(p, g, prec, g->nnodes); }

void cpu_plan_init_upto(CpuPlan *p, const IrGraph *g, CpuPrecision prec, int upto)
{
    memset(p, 0, sizeof *p);
    p->g = g;
    p->prec = prec;
    int n = g->nnodes;
    if (upto < 1 || upto > n)
        die("cpu_plan_init_upto: %d of %d nodes", upto, n);
    p->nplanned = upto;
    p->buf = calloc((size_t)n, sizeof *p->buf);
    p->bytes = calloc((size_t)n, sizeof *p->bytes);
    if (!p->buf || !p->bytes)
        die("out of memory planning buffers");
    size_t total;
    PlanBuf *bufs = plan_buffers(g, prec, p->bytes, &total, upto);
    p->arena = aligned_alloc(64, total ? total : 64);
    if (!p->arena)
        die("out of memory: %zu bytes for activations", total);
    memset(p->arena, 0, total);
    p->planned_bytes = total;
    for (int i = 0; i < upto; i++)
        if (bufs[i].region == PLAN_REGION_ACTIVATIONS)
            p->buf[i] = (char *)p->arena + bufs[i].offset;
    free(bufs);
}

void cpu_plan_free(CpuPlan *p)
{
    free(p->bf16);
    free(p->arena);
    free(p->buf);
    free(p->bytes);
    memset(p, 0, sizeof *p);
}

void cpu_plan_bind(CpuPlan *p, const IrNode *n, void *data)
{
    if (n->op != IR_OP_INPUT && n->op != IR_OP_PARAM)
        die("cpu_plan_bind: %s is not an input or param", n->name);
    p->buf[n->id] = data;
}

int cpu_plan_run_range(CpuPlan *p, int from, int to)
{
    if (to > p->nplanned)
        die("cpu backend: running node %d of a plan with buffers for %d", to - 1, p->nplanned);
    for (int i = from; i < to; i++) {
        const IrNode *n = p->g->nodes[i];
        if ((n->op == IR_OP_INPUT || n->op == IR_OP_PARAM) && !p->buf[i])
            die("cpu backend: %s %s is not bound", ir_node_op_name(n), n->name);
        if (n->op == IR_OP_CUSTOM)
            (p->prec == CPU_F64 ? n->custom->cpu_f64 : n->custom->cpu_f32)(n, p->buf);
        else if (p->prec == CPU_F64)
            cpu_exec_node_f64(n, p->buf, p->comm);
        else
            cpu_exec_node_f32(n, p->buf, p->comm);
        if (p->bf16 && p->bf16[i] && p->prec == CPU_F32) {
            float *y = p->buf[i];
            for (int64_t e = 0, m = ir_numel(n); e < m; e++)
                y[e] = bf16_round(y[e]);
        }
        /* a failed collective (comm.h: its error is sticky) stops the plan: what follows would read garbage */
        if (p->comm && comm_failed(p->comm))
            return 0;
    }
    return 1;
}

void cpu_plan_round_bf16(CpuPlan *p, const Plan *plan)
{
    free(p->bf16);
    p->bf16 = NULL;
    if (p->prec != CPU_F32 || !plan->bufs || plan->nbufs < p->g->nnodes)
        return;
    for (int i = 0; i < p->g->nnodes; i++)
        if (plan->bufs[i].storage == PLAN_BF16 && plan->bufs[i].kind == PLAN_BUF_TENSOR) {
            if (!p->bf16 && !(p->bf16 = calloc((size_t)p->g->nnodes, 1)))
                die("out of memory");
            p->bf16[i] = 1;
        }
}

int cpu_plan_run(CpuPlan *p) { return cpu_plan_run_range(p, 0, p->g->nnodes); }

void *cpu_plan_data(const CpuPlan *p, const IrNode *n) { return p->buf[n->id]; }

double cpu_plan_scalar(const CpuPlan *p, const IrNode *n)
{
    return p->prec == CPU_F64 ? ((double *)p->buf[n->id])[0] : ((float *)p->buf[n->id])[0];
}
