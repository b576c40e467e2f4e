/* cuda_attention.c - emitters for scaled dot-product attention: a
 * flash-style forward (online softmax, one block per (batch, head, query
 * tile), never an S x S matrix) and a backward in two launches that
 * recompute the probabilities: dq per query, then dk and dv per key. The
 * templates are moec::sdpa_fwd / sdpa_bwd_dq / sdpa_bwd_dkv in prelude.cuh.
 * With segment ids (sdpa's optional fourth source, the segment-attention
 * pass) the kernels take them as `seg` and skip the keys outside the query's
 * sequence. segment_ids itself: one thread per row, a running count. The
 * batch B, the item and row counts and the offsets into the q/k/v workspace
 * (nq, nk, krow0, vrow0), which scale with it, are run-time kernel arguments
 * (cg_i64): the kernels' code is the same at every batch (docs/decisions.md
 * 62); S, the heads, the head dimension and the tiles stay compile-time. */
#include <stdio.h>

#include "cuda_internal.h"
#include "../util/util.h"

enum {
    ATTN_ROWS = 64,   /* queries (forward, dq) or keys (dk, dv) per block: one thread each */
};

/* Keys (or queries) staged in shared memory per step: two tiles of
 * [tile][hd] floats must fit in 32 KB. */
static int stage_tile(int64_t hd)
{
    int t = 16;
    while (t > 1 && 2 * t * hd * 4 > 32 * 1024)
        t /= 2;
    return t;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void attn_consts(Cg *cg, const IrNode *n, const IrNode *q)
{
    int64_t H = ir_attr_i(n, IR_ATTR_HEADS), KV = ir_attr_i(n, IR_ATTR_KV_HEADS), hd = q->shape[2] / H;
    cg_i64(cg, q->shape[0], "B");
    cg_const(cg, "S", q->shape[1]);
    cg_line(cg, "constexpr int H = %lld, KV = %lld, HD = %lld;", (long long)H, (long long)KV, (long long)hd);
    cg_line(cg, "constexpr bool CAUSAL = %s;", ir_attr_i(n, IR_ATTR_CAUSAL) ? "true" : "false");
    cg_line(cg, "constexpr int ROWS = %d, STAGE = %d;", ATTN_ROWS, stage_tile(hd));
}

static int check_hd(Cg *cg, const IrNode *n, const IrNode *q)
{
    int64_t hd = q->shape[2] / ir_attr_i(n, IR_ATTR_HEADS);
    if (hd > 512) {
        cg_error(cg, n, "%s: head dimension %lld: the CUDA attention kernel supports at most 512", n->name,
                 (long long)hd);
        return 0;
    }
    return 1;
}

/* ---- --kernels fast: flash attention on the tensor cores (codegen/attn_fast.cuh) */

/* 1 if sdpa (or sdpa_bwd) node n qualifies for the fast kernels, else 0 with the reason in why */
int cuda_fast_attention_ok(const IrNode *n, char *why, size_t len)
{
    const IrNode *q = n->src[n->op == IR_OP_SDPA ? 0 : 1];
    int64_t H = ir_attr_i(n, IR_ATTR_HEADS), hd = q->shape[2] / H;
    if (hd != 64 && hd != 128) {
        snprintf(why, len, "head dimension %lld (the fast attention kernels take 64 or 128)", (long long)hd);
        return 0;
    }
    if (q->shape[0] * q->shape[1] * q->shape[2] >= ((int64_t)1 << 40)) {
        snprintf(why, len, "q has %lld elements", (long long)ir_numel(q));
        return 0;
    }
    /* the kernels split their items in 32 bits (attn_fast.cuh item_tile) */
    int64_t items = q->shape[0] * H * ((q->shape[1] + ATTN_ROWS - 1) / ATTN_ROWS);
    if (items >= ((int64_t)1 << 31)) {
        snprintf(why, len, "%lld tiles of 64 queries (batch x heads x tiles: the fast attention kernels take fewer "
                 "than 2^31)", (long long)items);
        return 0;
    }
    snprintf(why, len, "flash attention, bf16 wgmma (sm_90a), fp32 softmax statistics, head dim %lld%s",
             (long long)hd, n->nsrc == (n->op == IR_OP_SDPA ? 4 : 5) ? ", segment-masked" : "");
    return 1;
}

/* the sdpa_bwd node of forward f (the same q, k, v and segment ids), else NULL */
static const IrNode *attn_backward_of(const Cg *cg, const IrNode *f)
{
    for (int i = f->id + 1; i < cg->g->nnodes; i++) {
        const IrNode *b = cg->g->nodes[i];
        if (b->op == IR_OP_SDPA_BWD && b->nsrc == f->nsrc + 1 && b->src[1] == f->src[0] && b->src[2] == f->src[1] &&
            b->src[3] == f->src[2] && (f->nsrc < 4 || b->src[4] == f->src[3]))
            return b;
    }
    return NULL;
}

/* the sdpa forward of backward b (the same q, k, v and segment ids), else NULL */
static const IrNode *attn_forward_by_sources(const Cg *cg, const IrNode *b)
{
    for (int i = b->id - 1; i >= 0; i--) {
        const IrNode *f = cg->g->nodes[i];
        if (f->op == IR_OP_SDPA && b->nsrc == f->nsrc + 1 && b->src[1] == f->src[0] && b->src[2] == f->src[1] &&
            b->src[3] == f->src[2] && (f->nsrc < 4 || b->src[4] == f->src[3]))
            return f;
    }
    return NULL;
}

int cg_attn_fast(const Cg *cg, const IrNode *n)
{
    char why[256];
    if (cg->kernel_choice != PLAN_KERNELS_FAST || (n->op != IR_OP_SDPA && n->op != IR_OP_SDPA_BWD) ||
        !cuda_fast_attention_ok(n, why, sizeof why))
        return 0;
    if (n->op == IR_OP_SDPA)
        return 1;
    const IrNode *f = attn_forward_by_sources(cg, n);
    return f && cuda_fast_attention_ok(f, why, sizeof why) && attn_backward_of(cg, f) == n;
}

/* q, k and v of sdpa (or sdpa_bwd) node n are stored in bf16: its kernels read them where they are */
static int attn_direct(const Cg *cg, const IrNode *n)
{
    int o = n->op == IR_OP_SDPA ? 0 : 1;
    return cg_is_bf16(cg, n->src[o]->id) && cg_is_bf16(cg, n->src[o + 1]->id) && cg_is_bf16(cg, n->src[o + 2]->id);
}

/* the sdpa forward of backward b whose kept workspaces it reads, else NULL */
static const IrNode *attn_forward_of(Cg *cg, const IrNode *b)
{
    const IrNode *f = attn_forward_by_sources(cg, b);
    if (!f)
        return NULL;
    int w = cg_find_ws(cg, f, "lse2");
    return w >= 0 && cg->bufs[w].until == b->id ? f : NULL;
}

static void attn_fast_consts(Cg *cg, const IrNode *n, const IrNode *q)
{
    int64_t H = ir_attr_i(n, IR_ATTR_HEADS), KV = ir_attr_i(n, IR_ATTR_KV_HEADS), hd = q->shape[2] / H;
    cg_i64(cg, q->shape[0], "B");
    cg_const(cg, "S", q->shape[1]);
    cg_line(cg, "constexpr int H = %lld, KV = %lld, HD = %lld;", (long long)H, (long long)KV, (long long)hd);
    cg_line(cg, "constexpr bool CAUSAL = %s;", ir_attr_i(n, IR_ATTR_CAUSAL) ? "true" : "false");
}

/* blocks of a launch over `items` tiles: at most 65535 (or CudaOptions.attn_max_grid, a test's smaller cap), the
 * kernels loop over the rest */
static int64_t attn_grid(const Cg *cg, int64_t items)
{
    int64_t cap = cg->attn_max_grid > 0 && cg->attn_max_grid < 65535 ? cg->attn_max_grid : 65535;
    return items < cap ? items : cap;
}

/* the query rows per dk/dv step: the wgmma N of k q^T and v dO^T (32 measured 1.28x slower at Mixtral shapes,
 * bench/RESULTS.md) */
enum { ATTN_DKV_QUERIES = 64 };

/* shared memory per block: unpadded bf16 tiles (128-byte swizzle), 1024-byte aligned by the kernel, so 1 KB
 * more than they take: the forward's q, two k and two v tiles; dq's q, dO, two k and two v; dk/dv's k, v,
 * two q and two dO tiles of the query step and its statistics (lse2, D, segment ids: 6 words a query) */
enum { ATTN_SMEM_ALIGN = 1024 };
static int attn_tile(int64_t rows, int64_t hd) { return (int)(rows * hd * 2); }
static int attn_fwd_smem(int64_t hd) { return 5 * attn_tile(ATTN_ROWS, hd) + ATTN_SMEM_ALIGN; }
static int attn_dq_smem(int64_t hd) { return 6 * attn_tile(ATTN_ROWS, hd) + ATTN_SMEM_ALIGN; }
static int attn_dkv_smem(int64_t hd)
{
    return 2 * attn_tile(ATTN_ROWS, hd) + 4 * attn_tile(ATTN_DKV_QUERIES, hd) + 6 * ATTN_DKV_QUERIES * 4 +
           ATTN_SMEM_ALIGN;
}

/* the warp-specialised backward (moec::attn::bwd_dq_ws, bwd_dkv_ws): 128 queries (dq) or keys (dk/dv) a block,
 * three warpgroups (a TMA producer and two consumers of 64 rows), a ring of 3 slots of the streamed tiles: k and
 * v of 64 keys for dq, q and dO of 64 queries and their statistics (lse2, D, segment ids: 3 words a query) for
 * dk/dv. Shared memory: the consumers' own tiles (q and dO; k and v), the ring, 8 mbarriers, 1 KB alignment.
 * Taken (with fwd_ws) at head dim 128 where the TMA's 32-bit row coordinates reach every row; else fwd, bwd_dq
 * and bwd_dkv, one warpgroup of 64 rows (at head dim 64 they hold 128-177 registers, so two to four blocks, 8-16
 * warps, share an SM, where the 384-thread block is one an SM with 8 consumer warps: head dim 64 keeps the
 * kernels measured at bio shapes; docs/decisions.md 50). */
enum { ATTN_WS_ROWS = 128, ATTN_WS_STAGES = 3, ATTN_WS_THREADS = 384 };
static int attn_dkv_ws_smem(int64_t hd)
{
    return 4 * attn_tile(ATTN_ROWS, hd) + ATTN_WS_STAGES * (2 * attn_tile(64, hd) + 3 * 64 * 4) +
           (2 * ATTN_WS_STAGES + 2) * 8 + ATTN_SMEM_ALIGN;
}
static int attn_dq_ws_smem(int64_t hd)
{
    return 4 * attn_tile(ATTN_ROWS, hd) + ATTN_WS_STAGES * 2 * attn_tile(64, hd) + (2 * ATTN_WS_STAGES + 2) * 8 +
           ATTN_SMEM_ALIGN;
}
/* the warp-specialised forward (moec::attn::fwd_ws): the consumers' q tiles and a ring of 4 slots of k and v
 * tiles (each held two steps: v_j is read while s_{j+1} is computed) */
enum { ATTN_FWD_STAGES = 4 };
static int attn_fwd_ws_smem(int64_t hd)
{
    return 2 * attn_tile(ATTN_ROWS, hd) + ATTN_FWD_STAGES * 2 * attn_tile(64, hd) + (2 * ATTN_FWD_STAGES + 2) * 8 +
           ATTN_SMEM_ALIGN;
}
/* fwd_ws's and bwd_dq_ws's SCHED: 0 decision 50's step, 1 the warpgroup's own overlap fixed, 2 that and the two
 * consumers' products in strict alternation (named barriers 1 and 2). The default 0: on the H200 (bench/attn.sh,
 * 2026-12-02, decision 59) 1 and 2 were within run-to-run noise of it (Mixtral 2.576 / 2.572 ms, between projections
 * 2.774 / 2.768 / overlap 2.736), so the kernels measured longest stay the default; MOEC_ATTN selects the others. */
static int attn_sched(const Cg *cg)
{
    switch (cg->attn_schedule) {
    case CUDA_ATTN_OVERLAP:
        return 1;
    case CUDA_ATTN_PINGPONG:
        return 2;
    case CUDA_ATTN_WS:
    case CUDA_ATTN_DEFAULT:
        break;
    }
    return 0;
}
static int attn_ws_ok(int64_t B, int64_t S, int64_t H, int64_t KV, int64_t hd)
{
    return hd == 128 && B * S * (H / KV + 2) < ((int64_t)1 << 31);
}

static void emit_sdpa_fast(Cg *cg, const IrNode *n)
{
    const IrNode *q = n->src[0], *k = n->src[1], *v = n->src[2];
    int64_t B = q->shape[0], S = q->shape[1], H = ir_attr_i(n, IR_ATTR_HEADS), WQ = q->shape[2], WK = k->shape[2];
    int64_t hd = WQ / H, nq = B * S * WQ, nk = B * S * WK;
    int seg = n->nsrc == 4;
    char why[256], impl[300];
    cuda_fast_attention_ok(n, why, sizeof why);
    snprintf(impl, sizeof impl, "fast: %s", why);
    cg_impl(cg, impl);
    const IrNode *bwd = attn_backward_of(cg, n);
    /* q, k, v already bf16 (the plan's storage): read where they are, nothing converted or kept but lse2 */
    int direct = attn_direct(cg, n);
    int qkv = direct ? -1
              : bwd  ? cg_ws_kept(cg, n, bwd, PLAN_BF16, nq + 2 * nk, "qkv_bf16")
                     : cg_ws(cg, n, PLAN_BF16, nq + 2 * nk, "qkv_bf16");
    int lse = bwd ? cg_ws_kept(cg, n, bwd, PLAN_F32, B * H * S, "lse2") : cg_ws(cg, n, PLAN_F32, B * H * S, "lse2");

    if (!direct) {
        cg_begin(cg, n, "to_bf16",
                 bwd ? "attention 1/2: q, k, v to bf16 (kept for the backward)" : "attention 1/2: q, k, v to bf16");
        cg_param(cg, qkv, 1, "qkv");
        cg_in(cg, q, "q");
        cg_in(cg, k, "k");
        cg_in(cg, v, "v");
        cg_i64(cg, nq, "nq");
        cg_i64(cg, nk, "nk");
        cg_line(cg, "moec::attn::to_bf16(nq, qkv, q);");
        cg_line(cg, "moec::attn::to_bf16(nk, qkv + nq, k);");
        cg_line(cg, "moec::attn::to_bf16(nk, qkv + nq + nk, v);");
        cg_end(cg, CG_BLOCK, cg_grid(nq / 8, CG_BLOCK));
    }

    int64_t KV = ir_attr_i(n, IR_ATTR_KV_HEADS), rep = H / KV;
    char what[300];
    if (attn_ws_ok(B, S, H, KV, hd)) {
        /* warp-specialised (fwd_ws): tensor maps over q, k, v or the q/k/v workspace as in emit_bwd_ws */
        int64_t items = B * H * ((S + ATTN_WS_ROWS - 1) / ATTN_WS_ROWS);
        snprintf(what, sizeof what, "attention %s: flash forward, one block per (batch, head, 128 queries): a TMA "
                 "producer and two consumer warpgroups of 64 queries, bf16 wgmma, online softmax in fp32; the base-2 "
                 "log-sum-exp kept for the backward%s%s", direct ? "1/1" : "2/2",
                 direct ? "; q, k, v read in bf16 as stored" : "", cg_is_bf16(cg, n->id) ? "; o stored in bf16" : "");
        cg_begin(cg, n, "flash", what);
        cg_out(cg, n, "o");
        cg_param(cg, lse, 1, "lse2");
        if (direct) {
            cg_tmap(cg, q->id, B * S, WQ, 64, "tq");
            cg_tmap(cg, k->id, B * S, WK, 64, "tk");
            cg_tmap(cg, v->id, B * S, WK, 64, "tv");
        } else {
            cg_tmap(cg, qkv, B * S, WQ, 64, "tq");
            cg_tmap(cg, qkv, B * S * (rep + 2), WK, 64, "tk");
            cg_tmap(cg, qkv, B * S * (rep + 2), WK, 64, "tv");
        }
        if (seg)
            cg_in(cg, n->src[3], "seg");
        attn_fast_consts(cg, n, q);
        cg_i64(cg, direct ? 0 : B * S * rep, "krow0");
        cg_i64(cg, direct ? 0 : B * S * (rep + 1), "vrow0");
        cg_i64(cg, items, "items");
        cg_line(cg, "moec::attn::fwd_ws<S, H, KV, HD, CAUSAL, %d, %d>(items, B, krow0, vrow0, o, lse2, &tq, &tk, &tv, %s);",
                ATTN_FWD_STAGES, attn_sched(cg), seg ? "seg" : "nullptr");
        cg_launch_extra(cg, attn_fwd_ws_smem(hd), 0);
        cg_end(cg, ATTN_WS_THREADS, attn_grid(cg, items));
        cg->attn_fast_used = 1;
        return;
    }
    int64_t items = B * H * ((S + ATTN_ROWS - 1) / ATTN_ROWS);
    snprintf(what, sizeof what, "attention %s: flash forward, one block per (batch, head, 64 queries), bf16 wgmma, "
             "online softmax in fp32; the base-2 log-sum-exp kept for the backward%s%s", direct ? "1/1" : "2/2",
             direct ? "; q, k, v read in bf16 as stored" : "", cg_is_bf16(cg, n->id) ? "; o stored in bf16" : "");
    cg_begin(cg, n, "flash", what);
    cg_out(cg, n, "o");
    cg_param(cg, lse, 1, "lse2");
    if (direct) {
        cg_in(cg, q, "q");
        cg_in(cg, k, "k");
        cg_in(cg, v, "v");
    } else {
        cg_param(cg, qkv, 0, "qkv");
    }
    if (seg)
        cg_in(cg, n->src[3], "seg");
    attn_fast_consts(cg, n, q);
    if (!direct) {
        cg_i64(cg, nq, "nq");
        cg_i64(cg, nk, "nk");
    }
    cg_i64(cg, items, "items");
    cg_line(cg, "for (long long item = blockIdx.x; item < items; item += gridDim.x) {");
    cg_line(cg, "    moec::attn::fwd<S, H, KV, HD, CAUSAL>(B, item, o, lse2, %s, %s);",
            direct ? "q, k, v" : "qkv, qkv + nq, qkv + nq + nk", seg ? "seg" : "nullptr");
    cg_line(cg, "    __syncthreads();");
    cg_line(cg, "}");
    cg_launch_extra(cg, attn_fwd_smem(hd), 0);
    cg_end(cg, 128, attn_grid(cg, items));
    cg->attn_fast_used = 1;
}

/* the backward's operands: bf16 q/k/v (kept by the forward in one workspace, or the nodes' own bf16
 * buffers), the log-sum-exp (kept by the forward), dO in bf16 (a workspace, or the node's own), D */
typedef struct AttnBufs {
    int qkv;             /* the forward's kept workspace, or -1: q, k, v are the nodes' bf16 buffers */
    const IrNode *q, *k, *v;
    int dob, lse, dsum;
    int64_t nq, nk;
} AttnBufs;

/* one of the backward's tile launches (dq or dk/dv): moec::attn::CALL over ITEMS tiles, a block each */
static void emit_bwd_tile(Cg *cg, const IrNode *n, const AttnBufs *b, const char *suffix, const char *what,
                          const char *call, int64_t items, int smem)
{
    cg_begin(cg, n, suffix, what);
    cg_out(cg, n, "out");
    if (b->qkv >= 0) {
        cg_param(cg, b->qkv, 0, "qkv");
    } else {
        cg_in(cg, b->q, "q");
        cg_in(cg, b->k, "k");
        cg_in(cg, b->v, "v");
    }
    cg_param(cg, b->dob, 0, "dob");
    cg_param(cg, b->lse, 0, "lse2");
    cg_param(cg, b->dsum, 0, "dsum");
    int seg = n->nsrc == 5;
    if (seg)
        cg_in(cg, n->src[4], "seg");
    attn_fast_consts(cg, n, n->src[1]);
    if (b->qkv >= 0) {
        cg_i64(cg, b->nq, "nq");
        cg_i64(cg, b->nk, "nk");
    }
    cg_i64(cg, items, "items");
    cg_line(cg, "for (long long item = blockIdx.x; item < items; item += gridDim.x) {");
    cg_line(cg, "    moec::attn::%s(B, item, out, %s, dob, lse2, dsum, %s);", call,
            b->qkv >= 0 ? "qkv, qkv + nq, qkv + nq + nk" : "q, k, v", seg ? "seg" : "nullptr");
    cg_line(cg, "    __syncthreads();");
    cg_line(cg, "}");
    cg_launch_extra(cg, smem, 0);
    cg_end(cg, 128, attn_grid(cg, items));
}

/* a warp-specialised backward launch (moec::attn::FN: bwd_dq_ws or bwd_dkv_ws, three warpgroups) over ITEMS
 * blocks (sched >= 0: FN's SCHED template argument, bwd_dq_ws's): tensor maps over q, k, v (the nodes' bf16 buffers, or the forward's q/k/v workspace read as
 * [B S][H HD] for q and as [B S (H / KV + 2)][KV HD] for k and v, which start at rows KROW0 and VROW0 of it)
 * and dO, boxes of 64 rows x 64 columns */
static void emit_bwd_ws(Cg *cg, const IrNode *n, const AttnBufs *b, const char *suffix, const char *what,
                        const char *fn, int sched, int64_t items, int smem)
{
    const IrNode *q = n->src[1];
    int64_t B = q->shape[0], S = q->shape[1], H = ir_attr_i(n, IR_ATTR_HEADS), KV = ir_attr_i(n, IR_ATTR_KV_HEADS);
    int64_t WQ = q->shape[2], WK = WQ / H * KV, rep = H / KV;
    cg_begin(cg, n, suffix, what);
    cg_out(cg, n, "out");
    if (b->qkv >= 0) {
        cg_tmap(cg, b->qkv, B * S, WQ, 64, "tq");
        cg_tmap(cg, b->qkv, B * S * (rep + 2), WK, 64, "tk");
        cg_tmap(cg, b->qkv, B * S * (rep + 2), WK, 64, "tv");
    } else {
        cg_tmap(cg, b->q->id, B * S, WQ, 64, "tq");
        cg_tmap(cg, b->k->id, B * S, WK, 64, "tk");
        cg_tmap(cg, b->v->id, B * S, WK, 64, "tv");
    }
    cg_tmap(cg, b->dob, B * S, WQ, 64, "tdo");
    cg_param(cg, b->lse, 0, "lse2");
    cg_param(cg, b->dsum, 0, "dsum");
    int seg = n->nsrc == 5;
    if (seg)
        cg_in(cg, n->src[4], "seg");
    attn_fast_consts(cg, n, q);
    cg_i64(cg, b->qkv >= 0 ? B * S * rep : 0, "krow0");
    cg_i64(cg, b->qkv >= 0 ? B * S * (rep + 1) : 0, "vrow0");
    cg_i64(cg, items, "items");
    char sch[16] = "";
    if (sched >= 0)
        snprintf(sch, sizeof sch, ", %d", sched);
    cg_line(cg, "moec::attn::%s<S, H, KV, HD, CAUSAL, %d%s>(items, B, krow0, vrow0, out, &tq, &tk, &tv, &tdo, lse2, "
                "dsum, %s);", fn, ATTN_WS_STAGES, sch, seg ? "seg" : "nullptr");
    cg_launch_extra(cg, smem, 0);
    cg_end(cg, ATTN_WS_THREADS, attn_grid(cg, items));
}

static void emit_sdpa_bwd_fast(Cg *cg, const IrNode *n, const IrNode *f)
{
    const IrNode *q = n->src[1], *k = n->src[2], *dy = n->src[0];
    int64_t B = q->shape[0], S = q->shape[1], H = ir_attr_i(n, IR_ATTR_HEADS), KV = ir_attr_i(n, IR_ATTR_KV_HEADS);
    int64_t WQ = q->shape[2], WK = k->shape[2], hd = WQ / H, nq = B * S * WQ, nk = B * S * WK;
    char why[200], impl[400];
    int direct = attn_direct(cg, n), dy_bf16 = cg_is_bf16(cg, dy->id);
    cuda_fast_attention_ok(n, why, sizeof why);
    snprintf(impl, sizeof impl, "fast: %s; %s and the log-sum-exp kept by %s%s%s", why,
             direct ? "q, k, v read in bf16 as stored" : "q, k, v in bf16", f->name,
             dy_bf16 ? "; dO read in bf16 as stored" : "", cg_is_bf16(cg, n->id) ? "; [dq | dk | dv] written in bf16" : "");
    cg_impl(cg, impl);
    int qkv = direct ? -1 : cg_find_ws(cg, f, "qkv_bf16"), lse = cg_find_ws(cg, f, "lse2");
    if ((!direct && qkv < 0) || lse < 0 || cg->bufs[lse].until != n->id)
        die("codegen: %s: the kept workspaces of %s are missing", n->name, f->name);
    int dob = dy_bf16 ? dy->id : cg_ws(cg, n, PLAN_BF16, nq, "dout_bf16");
    int dsum = cg_ws(cg, n, PLAN_F32, B * H * S, "dsum");

    cg_begin(cg, n, "prep", dy_bf16 ? "attention backward 1/3: D = rowsum(dO o) per (batch, position, head) (dO "
                                      "is bf16 already)"
                                    : "attention backward 1/3: dO to bf16 and D = rowsum(dO o) per (batch, "
                                      "position, head)");
    if (!dy_bf16)
        cg_param(cg, dob, 1, "dob");
    cg_param(cg, dsum, 1, "dsum");
    cg_in(cg, dy, "dy");
    cg_param(cg, f->id, 0, "o");
    cg_i64(cg, B, "B");
    cg_const(cg, "S", S);
    cg_line(cg, "constexpr int H = %lld, HD = %lld;", (long long)H, (long long)hd);
    cg_line(cg, "moec::attn::bwd_prep<S, H, HD>(B, %s, dsum, dy, o);", dy_bf16 ? "nullptr" : "dob");
    cg_end(cg, CG_BLOCK, cg_grid(B * S * H * (hd / 8), CG_BLOCK));

    int64_t qitems = B * H * ((S + ATTN_ROWS - 1) / ATTN_ROWS), kitems = B * KV * ((S + ATTN_ROWS - 1) / ATTN_ROWS);
    const AttnBufs bufs = {qkv, q, k, n->src[3], dob, lse, dsum, nq, nk};
    char call[64];
    if (attn_ws_ok(B, S, H, KV, hd)) {
        int64_t blocks = (S + ATTN_WS_ROWS - 1) / ATTN_WS_ROWS, wsq = B * H * blocks, wsk = B * KV * blocks;
        emit_bwd_ws(cg, n, &bufs, "flash_dq", "attention backward 2/3: dq per (batch, head, 128 queries) over the key "
                                              "tiles, probabilities recomputed from the kept log-sum-exp: a TMA "
                                              "producer and two consumer warpgroups of 64 queries (bf16 wgmma)",
                    "bwd_dq_ws", attn_sched(cg), wsq, attn_dq_ws_smem(hd));
        emit_bwd_ws(cg, n, &bufs, "flash_dkv", "attention backward 3/3: dk, dv per (batch, kv head, 128 keys) over "
                                               "the group's heads and the query tiles: a TMA producer warp and two "
                                               "consumer warpgroups of 64 keys (bf16 wgmma, no atomics)",
                    "bwd_dkv_ws", -1, wsk, attn_dkv_ws_smem(hd));
    } else {
        emit_bwd_tile(cg, n, &bufs, "flash_dq", "attention backward 2/3: dq per (batch, head, 64 queries) over the "
                                                "key tiles, probabilities recomputed from the kept log-sum-exp (bf16 "
                                                "wgmma)",
                      "bwd_dq<S, H, KV, HD, CAUSAL>", qitems, attn_dq_smem(hd));
        snprintf(call, sizeof call, "bwd_dkv<S, H, KV, HD, CAUSAL, %d>", ATTN_DKV_QUERIES);
        emit_bwd_tile(cg, n, &bufs, "flash_dkv", "attention backward 3/3: dk, dv per (batch, kv head, 64 keys) over "
                                                 "the group's heads and the query tiles (bf16 wgmma, no atomics)",
                      call, kitems, attn_dkv_smem(hd));
    }
    cg->attn_fast_used = 1;
}

/* --kernels fast: 1 if n gets the fast kernels, else 0 with the reason as its "impl" */
static int attn_fast_or_why(Cg *cg, const IrNode *n)
{
    char why[256], impl[300];
    if (cg->kernel_choice != PLAN_KERNELS_FAST)
        return 0;
    if (!cuda_fast_attention_ok(n, why, sizeof why)) {
        snprintf(impl, sizeof impl, "reference: %s", why);
        cg_impl(cg, impl);
        return 0;
    }
    return 1;
}

int cg_emit_sdpa(Cg *cg, const IrNode *n)
{
    const IrNode *q = n->src[0];
    if (!check_hd(cg, n, q))
        return 0;
    if (attn_fast_or_why(cg, n)) {
        emit_sdpa_fast(cg, n);
        return 1;
    }
    int64_t items = q->shape[0] * ir_attr_i(n, IR_ATTR_HEADS) * ((q->shape[1] + ATTN_ROWS - 1) / ATTN_ROWS);
    cg_begin(cg, n, "", "attention forward, flash-style: one block per (batch, head, 64 queries), online softmax "
                        "in double");
    cg_out(cg, n, "o");
    cg_in(cg, q, "q");
    cg_in(cg, n->src[1], "k");
    cg_in(cg, n->src[2], "v");
    int seg = n->nsrc == 4;
    if (seg)
        cg_in(cg, n->src[3], "seg");
    attn_consts(cg, n, q);
    cg_line(cg, "moec::sdpa_fwd<S, H, KV, HD, CAUSAL, ROWS, STAGE>(B, o, q, k, v%s);", seg ? ", seg" : "");
    cg_end(cg, ATTN_ROWS, min64(items, 65535));
    return 1;
}

/* dy, q, k, v -> [B, S, wq + 2 wk] = [dq | dk | dv] */
int cg_emit_sdpa_bwd(Cg *cg, const IrNode *n)
{
    const IrNode *q = n->src[1];
    if (!check_hd(cg, n, q))
        return 0;
    int64_t H = ir_attr_i(n, IR_ATTR_HEADS), KV = ir_attr_i(n, IR_ATTR_KV_HEADS);
    if (attn_fast_or_why(cg, n)) {
        const IrNode *f = attn_forward_of(cg, n);
        if (f) {
            emit_sdpa_bwd_fast(cg, n, f);
            return 1;
        }
        cg_impl(cg, "reference: no fast forward kept q, k, v and the log-sum-exp for it");
    }
    int64_t B = q->shape[0], S = q->shape[1], tiles = (S + ATTN_ROWS - 1) / ATTN_ROWS;
    int stats = cg_ws(cg, n, PLAN_F64, B * H * S * 3, "stats");

    cg_begin(cg, n, "dq", "attention backward 1/2: per (batch, head, 64 queries) recompute the softmax "
                          "statistics, D = rowsum(dO * O) and dq");
    cg_out(cg, n, "out");
    cg_param(cg, stats, 1, "stats");
    cg_in(cg, n->src[0], "dy");
    cg_in(cg, q, "q");
    cg_in(cg, n->src[2], "k");
    cg_in(cg, n->src[3], "v");
    int seg = n->nsrc == 5;
    if (seg)
        cg_in(cg, n->src[4], "seg");
    attn_consts(cg, n, q);
    cg_line(cg, "moec::sdpa_bwd_dq<S, H, KV, HD, CAUSAL, ROWS, STAGE>(B, out, stats, dy, q, k, v%s);",
            seg ? ", seg" : "");
    cg_end(cg, ATTN_ROWS, min64(B * H * tiles, 65535));

    cg_begin(cg, n, "dkv", "attention backward 2/2: per (batch, kv head, 64 keys) dk and dv over the group's "
                           "heads, probabilities recomputed");
    cg_out(cg, n, "out");
    cg_param(cg, stats, 0, "stats");
    cg_in(cg, n->src[0], "dy");
    cg_in(cg, q, "q");
    cg_in(cg, n->src[2], "k");
    cg_in(cg, n->src[3], "v");
    if (seg)
        cg_in(cg, n->src[4], "seg");
    attn_consts(cg, n, q);
    cg_line(cg, "moec::sdpa_bwd_dkv<S, H, KV, HD, CAUSAL, ROWS, STAGE>(B, out, stats, dy, q, k, v%s);",
            seg ? ", seg" : "");
    cg_end(cg, ATTN_ROWS, min64(B * KV * tiles, 65535));
    return 1;
}

/* tokens i32 [B, S] -> i32 [B, S]: per row, the BOS tokens so far, -1 at padding (kernels.inc: the same loop) */
int cg_emit_segment_ids(Cg *cg, const IrNode *n)
{
    const IrNode *t = n->src[0];
    cg_begin(cg, n, "", "segment_ids: one thread per row, a running count of BOS tokens, -1 at padding");
    cg_out(cg, n, "seg");
    cg_in(cg, t, "tokens");
    cg_i64(cg, t->shape[0], "rows");
    cg_const(cg, "S", t->shape[1]);
    cg_line(cg, "constexpr int BOS = %lld, PAD = %lld;", (long long)ir_attr_i(n, IR_ATTR_BOS),
            (long long)ir_attr_i(n, IR_ATTR_PAD));
    cg_line(cg, "MOEC_FOR(r, rows) {");
    cg_line(cg, "    int c = 0;");
    cg_line(cg, "    for (long long s = 0; s < S; s++) {");
    cg_line(cg, "        int x = tokens[r * S + s];");
    cg_line(cg, "        c += x == BOS;");
    cg_line(cg, "        seg[r * S + s] = x == PAD ? -1 : c;");
    cg_line(cg, "    }");
    cg_line(cg, "}");
    cg_end(cg, CG_BLOCK, cg_grid(t->shape[0], CG_BLOCK));
    return 1;
}
