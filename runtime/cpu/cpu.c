/* cpu.c - buffer planning, thread pool and the node loop of the CPU backend. */
#include "cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

static int keeps_buffer(const IrNode *n)
{
    return n->is_output || n->op == IR_OP_INPUT || n->op == IR_OP_PARAM;
}

void cpu_plan_init(CpuPlan *p, const IrGraph *g, CpuPrecision prec)
{
    memset(p, 0, sizeof *p);
    p->g = g;
    p->prec = prec;
    int n = g->nnodes;
    p->buf = calloc((size_t)n, sizeof *p->buf);
    p->bytes = calloc((size_t)n, sizeof *p->bytes);
    p->blocks = calloc((size_t)n, sizeof *p->blocks);
    p->block_size = calloc((size_t)n, sizeof *p->block_size);
    int *last_use = malloc(sizeof(int) * (size_t)n);
    int *block_of = malloc(sizeof(int) * (size_t)n);
    char *block_free = calloc((size_t)n, 1);
    if (!p->buf || !p->bytes || !p->blocks || !p->block_size || !last_use || !block_of || !block_free)
        die("out of memory planning buffers");
    for (int i = 0; i < n; i++) {
        last_use[i] = i;
        block_of[i] = -1;
        p->bytes[i] = (size_t)ir_numel(g->nodes[i]) * cpu_elem_size(g->nodes[i], prec);
    }
    for (int i = 0; i < n; i++)
        for (int s = 0; s < g->nodes[i]->nsrc; s++)
            if (last_use[g->nodes[i]->src[s]->id] < i)
                last_use[g->nodes[i]->src[s]->id] = i;
    /* Liveness: a block is free again after its tensor's last user ran.
     * Best fit among free blocks, growing one when it is too small. */
    for (int i = 0; i < n; i++) {
        const IrNode *node = g->nodes[i];
        if (node->op != IR_OP_INPUT && node->op != IR_OP_PARAM) {
            /* the smallest free block that fits, else the largest free one (grown) */
            int best = -1, grow = -1;
            for (int b = 0; b < p->nblocks; b++) {
                if (!block_free[b])
                    continue;
                if (p->block_size[b] >= p->bytes[i]) {
                    if (best < 0 || p->block_size[b] < p->block_size[best])
                        best = b;
                } else if (grow < 0 || p->block_size[b] > p->block_size[grow]) {
                    grow = b;
                }
            }
            if (best < 0)
                best = grow;
            if (best < 0) {
                best = p->nblocks++;
                p->block_size[best] = 0;
            }
            if (p->block_size[best] < p->bytes[i])
                p->block_size[best] = p->bytes[i];
            block_free[best] = 0;
            block_of[i] = best;
        }
        /* release the sources whose last user this was (and dead results) */
        for (int s = 0; s <= node->nsrc; s++) {
            const IrNode *x = s < node->nsrc ? node->src[s] : node;
            if (last_use[x->id] == i && !keeps_buffer(x) && block_of[x->id] >= 0)
                block_free[block_of[x->id]] = 1;
        }
    }
    for (int b = 0; b < p->nblocks; b++) {
        p->blocks[b] = calloc(1, p->block_size[b] ? p->block_size[b] : 8);
        if (!p->blocks[b])
            die("out of memory: %zu bytes for activations", p->block_size[b]);
        p->planned_bytes += p->block_size[b];
    }
    for (int i = 0; i < n; i++)
        if (block_of[i] >= 0)
            p->buf[i] = p->blocks[block_of[i]];
    free(last_use);
    free(block_of);
    free(block_free);
}

void cpu_plan_free(CpuPlan *p)
{
    for (int b = 0; b < p->nblocks; b++)
        free(p->blocks[b]);
    free(p->blocks);
    free(p->block_size);
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

void cpu_plan_run_range(CpuPlan *p, int from, int to)
{
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
    }
}

void cpu_plan_run(CpuPlan *p) { cpu_plan_run_range(p, 0, p->g->nnodes); }

void *cpu_plan_data(const CpuPlan *p, const IrNode *n) { return p->buf[n->id]; }

double cpu_plan_scalar(const CpuPlan *p, const IrNode *n)
{
    return p->prec == CPU_F64 ? ((double *)p->buf[n->id])[0] : ((float *)p->buf[n->id])[0];
}
