/* cuda_attention.c - emitters for scaled dot-product attention: a
 * flash-style forward (online softmax, one block per (batch, head, query
 * tile), never an S x S matrix) and a backward in two launches that
 * recompute the probabilities: dq per query, then dk and dv per key. The
 * templates are moec::sdpa_fwd / sdpa_bwd_dq / sdpa_bwd_dkv in prelude.cuh.
 * With segment ids (sdpa's optional fourth source, the segment-attention
 * pass) the kernels take them as `seg` and skip the keys outside the query's
 * sequence. segment_ids itself: one thread per row, a running count. */
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
    cg_const(cg, "B", q->shape[0]);
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

int cg_emit_sdpa(Cg *cg, const IrNode *n)
{
    const IrNode *q = n->src[0];
    if (!check_hd(cg, n, q))
        return 0;
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
    cg_line(cg, "moec::sdpa_fwd<B, S, H, KV, HD, CAUSAL, ROWS, STAGE>(o, q, k, v%s);", seg ? ", seg" : "");
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
    cg_line(cg, "moec::sdpa_bwd_dq<B, S, H, KV, HD, CAUSAL, ROWS, STAGE>(out, stats, dy, q, k, v%s);",
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
    cg_line(cg, "moec::sdpa_bwd_dkv<B, S, H, KV, HD, CAUSAL, ROWS, STAGE>(out, stats, dy, q, k, v%s);",
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
    cg_const(cg, "ROWS", t->shape[0]);
    cg_const(cg, "S", t->shape[1]);
    cg_line(cg, "constexpr int BOS = %lld, PAD = %lld;", (long long)ir_attr_i(n, IR_ATTR_BOS),
            (long long)ir_attr_i(n, IR_ATTR_PAD));
    cg_line(cg, "MOEC_FOR(r, ROWS) {");
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
