/* cuda.c - the CUDA code generator's driver: the emitter table, the kernel
 * builder (with sharing of identical kernels), the buffer planner, and the
 * assembly of kernels.cu and plan.json. The per-op emitters live in
 * cuda_dense.c, cuda_attention.c, cuda_moe.c and cuda_loss.c; the device
 * library they call in prelude.cuh and mxfp8.cuh. docs/codegen.md has the
 * design and the plan's schema. */
#include "cuda.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "../util/util.h"

/* ------------------------------------------------------------ strings */

void sb_put(Sb *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->s, cap);
        if (!p)
            die("out of memory generating CUDA source (%zu bytes)", cap);
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void sb_puts(Sb *b, const char *s) { sb_put(b, s, strlen(s)); }

void sb_vprintf(Sb *b, const char *fmt, va_list ap)
{
    char small[512];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0)
        die("vsnprintf failed");
    if ((size_t)n < sizeof small) {
        sb_put(b, small, (size_t)n);
    } else {
        char *big = malloc((size_t)n + 1);
        if (!big)
            die("out of memory");
        vsnprintf(big, (size_t)n + 1, fmt, ap2);
        sb_put(b, big, (size_t)n);
        free(big);
    }
    va_end(ap2);
}

void sb_printf(Sb *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_vprintf(b, fmt, ap);
    va_end(ap);
}

void sb_free(Sb *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        die("out of memory (%zu bytes)", n);
    return q;
}

/* Text for a // comment: printable ASCII only, no backslash (which would
 * continue the comment onto the next line). */
static void sb_comment_text(Sb *b, const char *s)
{
    for (; *s; s++) {
        char c = *s;
        sb_put(b, c >= 32 && c < 127 && c != '\\' ? &c : "?", 1);
    }
}

/* ------------------------------------------------------------ the emitter table */

#define K(fn) {CG_KERNELS, fn}
const CgEmitter cg_emitters[IR_OP_COUNT] = {
    [IR_OP_INPUT] = {CG_LEAF, NULL},
    [IR_OP_PARAM] = {CG_LEAF, NULL},
    [IR_OP_EMBEDDING] = K(cg_emit_embedding),
    [IR_OP_LINEAR] = K(cg_emit_linear),
    [IR_OP_RMSNORM] = K(cg_emit_rmsnorm),
    [IR_OP_ROPE] = K(cg_emit_rope),
    [IR_OP_SDPA] = K(cg_emit_sdpa),
    [IR_OP_ADD] = K(cg_emit_elementwise),
    [IR_OP_MUL] = K(cg_emit_elementwise),
    [IR_OP_SCALE] = K(cg_emit_elementwise),
    [IR_OP_SILU] = K(cg_emit_elementwise),
    [IR_OP_GELU] = K(cg_emit_elementwise),
    [IR_OP_SWIGLU] = K(cg_emit_swiglu),
    [IR_OP_TOPK_EXPERTS] = K(cg_emit_topk_experts),
    [IR_OP_TOPK_PROBS] = K(cg_emit_topk_probs),
    [IR_OP_ROUTE_PLAN] = K(cg_emit_route_plan),
    [IR_OP_EXPERT_COUNTS] = K(cg_emit_expert_counts),
    [IR_OP_DISPATCH] = K(cg_emit_dispatch),
    [IR_OP_DISPATCH_PROBS] = K(cg_emit_dispatch),
    [IR_OP_GROUPED_LINEAR] = K(cg_emit_grouped_linear),
    [IR_OP_SCALED_SWIGLU] = K(cg_emit_swiglu),
    [IR_OP_COMBINE] = K(cg_emit_combine),
    [IR_OP_ROW_SCALE] = K(cg_emit_elementwise),
    [IR_OP_GROUPED_MLP] = K(cg_emit_grouped_mlp),
    [IR_OP_AUX_LOSS] = K(cg_emit_aux_loss),
    [IR_OP_CROSS_ENTROPY] = K(cg_emit_cross_entropy),
    [IR_OP_MASKED_LM_LOSS] = K(cg_emit_cross_entropy),
    [IR_OP_MEAN_SQUARE] = K(cg_emit_mean_square),
    [IR_OP_FILL] = K(cg_emit_fill),
    [IR_OP_SLICE] = K(cg_emit_slice),
    [IR_OP_EMBEDDING_DW] = K(cg_emit_embedding_dw),
    [IR_OP_LINEAR_DX] = K(cg_emit_linear),
    [IR_OP_LINEAR_DW] = K(cg_emit_linear),
    [IR_OP_RMSNORM_DX] = K(cg_emit_rmsnorm_dx),
    [IR_OP_RMSNORM_DW] = K(cg_emit_rmsnorm_dw),
    [IR_OP_ROPE_DX] = K(cg_emit_rope),
    [IR_OP_SDPA_BWD] = K(cg_emit_sdpa_bwd),
    [IR_OP_SEGMENT_IDS] = K(cg_emit_segment_ids),
    [IR_OP_SILU_DX] = K(cg_emit_elementwise),
    [IR_OP_GELU_DX] = K(cg_emit_elementwise),
    [IR_OP_SWIGLU_DX] = K(cg_emit_swiglu_dh),
    [IR_OP_TOPK_PROBS_DX] = K(cg_emit_topk_probs_dx),
    [IR_OP_DISPATCH_PROBS_DX] = K(cg_emit_dispatch),
    [IR_OP_GROUPED_LINEAR_DX] = K(cg_emit_grouped_linear),
    [IR_OP_GROUPED_LINEAR_DW] = K(cg_emit_grouped_linear),
    [IR_OP_SCALED_SWIGLU_DH] = K(cg_emit_swiglu_dh),
    [IR_OP_SCALED_SWIGLU_DP] = K(cg_emit_row_reduce),
    [IR_OP_AUX_LOSS_DX] = K(cg_emit_aux_loss_dx),
    [IR_OP_CROSS_ENTROPY_DX] = K(cg_emit_cross_entropy_dx),
    [IR_OP_MEAN_SQUARE_DX] = K(cg_emit_mean_square_dx),
    [IR_OP_ROW_DOT] = K(cg_emit_row_reduce),
    [IR_OP_GROUPED_MLP_BWD] = K(cg_emit_grouped_mlp_bwd),
    [IR_OP_VIEW] = {CG_ALIAS, NULL},
    [IR_OP_EP_COUNTS] = {CG_HOST, NULL},
    [IR_OP_EP_LOCAL_SPLITS] = K(cg_emit_ep_local_splits),
    [IR_OP_EP_DISPATCH] = {CG_HOST, NULL},
    [IR_OP_EP_SORT] = K(cg_emit_ep_permute),
    [IR_OP_EP_UNSORT] = K(cg_emit_ep_permute),
    [IR_OP_EP_COMBINE] = {CG_HOST, NULL},
    [IR_OP_ALL_REDUCE] = {CG_HOST, NULL},
    [IR_OP_QUANTIZE] = K(cg_emit_quantize),
    [IR_OP_QUANTIZE_GROUPED] = K(cg_emit_quantize_grouped),
    /* fp8-block: no GPU kernels yet (the CPU reference is runtime/cpu/fp8_block.c); refused, never run as
     * something else */
    [IR_OP_QUANTIZE_FP8B] = {CG_UNSUPPORTED, NULL},
    [IR_OP_QUANTIZE_FP8B_GROUPED] = {CG_UNSUPPORTED, NULL},
    [IR_OP_CUSTOM] = {CG_UNSUPPORTED, NULL},
};
#undef K

int cuda_op_handling(IrOp op)
{
    if ((int)op < 0 || op >= IR_OP_COUNT)
        return 0;
    switch (cg_emitters[op].kind) {
    case CG_KERNELS: return cg_emitters[op].fn ? 1 : 0;
    case CG_LEAF:
    case CG_ALIAS: return 2;
    case CG_HOST: return 3;
    case CG_UNSUPPORTED: return 4;
    case CG_NONE: break;
    }
    return 0;
}

/* ------------------------------------------------------------ helpers for emitters */

int64_t cg_grid(int64_t items, int block)
{
    int64_t g = (items + block - 1) / block;
    return g < 1 ? 1 : g > 65535 ? 65535 : g;
}

const char *cg_dbl(char buf[64], double v)
{
    if (v != v) {
        snprintf(buf, 64, "__longlong_as_double(0x7ff8000000000000ll)");
        return buf;
    }
    if (v > 1.7976931348623157e308 || v < -1.7976931348623157e308) {
        snprintf(buf, 64, "%s__longlong_as_double(0x7ff0000000000000ll)", v < 0 ? "-" : "");
        return buf;
    }
    char t[32];
    fmt_double(t, v);
    /* a decimal point or exponent, so that it is a double literal */
    snprintf(buf, 64, strpbrk(t, ".e") ? "%s" : "%s.0", t);
    return buf;
}

int64_t cg_lead(const IrNode *n)
{
    int64_t e = 1;
    for (int i = 0; i + 1 < n->rank; i++)
        e *= n->shape[i];
    return e;
}

int64_t cg_last(const IrNode *n) { return n->rank ? n->shape[n->rank - 1] : 1; }

int cg_is_mxfp8(const IrNode *n)
{
    return ir_has_attr(n, IR_ATTR_PRECISION) && ir_attr_e(n, IR_ATTR_PRECISION) == IR_PREC_MXFP8;
}

void cg_error(Cg *cg, const IrNode *n, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cg->errors++;
    if (cg->diag)
        diag_error(cg->diag, n->loc, "%s", msg);
}

/* ------------------------------------------------------------ buffers */

const char *cg_ctype(PlanStorage s)
{
    switch (s) {
    case PLAN_F32: return "float";
    case PLAN_F64: return "double";
    case PLAN_I32: return "int";
    case PLAN_BF16: return "unsigned short"; /* raw bf16 bits (the fast kernels) */
    case PLAN_E4M3: return "unsigned char";  /* E4M3 codes or E8M0 scale codes (the fp8-block fast kernels) */
    default: die("codegen: no C type for storage %d", (int)s);
    }
}

int cg_is_bf16(const Cg *cg, int id) { return id >= 0 && id < cg->nbufs && cg->bufs[id].storage == PLAN_BF16; }

int cg_aligned(const IrNode *n, int bytes)
{
    int64_t off = 0;
    for (; n->op == IR_OP_VIEW; n = n->src[0])
        off += ir_attr_i(n, IR_ATTR_OFFSET) * 4; /* views are fp32 (decide_storage), as the offset in the buffer plan */
    return off % bytes == 0;
}

/* ------------------------------------------------------------ storage types (docs/decisions.md 40)
 *
 * Under --kernels fast a node's tensor is stored in bf16 when
 *   - its producer has a kernel that writes bf16 (bf16_producer),
 *   - every consumer in the graph has a kernel that reads it in bf16 (bf16_consumer; a view is none),
 *   - it is a floating-point activation or intermediate gradient: not an input, param, output, the loss
 *     or a parameter's gradient (those stay fp32, as do router logits and probabilities, norm
 *     statistics and everything else no listed kernel produces),
 *   - it touches a tensor-core kernel (the GEMM of a dense linear, the flash attention) as producer or
 *     consumer, or is joined to such a bf16 tensor through the typed elementwise kernels (RoPE, its
 *     gradient, slice, rmsnorm), so that bf16 removes conversions rather than adding roundings,
 *   - and, for the q, k and v of a fast attention, all three are (its kernels take one operand type).
 * Everything else stays fp32 (indices i32). The rule is deterministic: it reads the graph and the
 * kernels codegen will choose, nothing measured. The CPU backend rounds these nodes' values to bf16
 * (runtime/cpu/cpu.c cpu_plan_round_bf16), so it stays the reference. */
static int bf16_producer(const Cg *cg, const IrNode *n)
{
    switch (n->op) {
    case IR_OP_LINEAR:
    case IR_OP_LINEAR_DX: return cg_linear_on_gemm(cg, n); /* the GEMM's TMA-store epilogue */
    case IR_OP_ROPE:
    case IR_OP_ROPE_DX: return 1;                          /* moec::sm90::st */
    case IR_OP_SDPA:                                       /* the flash forward's o, */
    case IR_OP_SDPA_BWD: return cg_attn_fast(cg, n);       /* the backward's [dq | dk | dv] (attn_fast.cuh st2) */
    case IR_OP_SLICE:                                      /* moec::sm90::st */
    case IR_OP_RMSNORM: return 1;                          /* (its statistics are computed in double, not stored) */
    default: return 0;
    }
}

static int bf16_consumer(const Cg *cg, const IrNode *u, int s)
{
    switch (u->op) {
    case IR_OP_LINEAR:
    case IR_OP_LINEAR_DX: return s == 0 && cg_linear_on_gemm(cg, u); /* A by tensor map */
    case IR_OP_LINEAR_DW: return s < 2 && cg_linear_on_gemm(cg, u);  /* dy and x by tensor map */
    case IR_OP_ROPE:
    case IR_OP_ROPE_DX: return s == 0;                               /* moec::sm90::ld */
    case IR_OP_SDPA: return s < 3 && cg_attn_fast(cg, u);            /* q, k, v */
    case IR_OP_SDPA_BWD: return s < 4 && cg_attn_fast(cg, u);        /* dO (prep), q, k, v */
    case IR_OP_SLICE: return s == 0;                                 /* moec::sm90::ld */
    default: return 0;
    }
}

/* a tensor-core kernel: the sm_90a GEMM of a dense linear, the flash attention */
static int tc_kernel(const Cg *cg, const IrNode *n)
{
    return cg_linear_on_gemm(cg, n) || cg_attn_fast(cg, n);
}

static void decide_storage(Cg *cg)
{
    const IrGraph *g = cg->g;
    if (cg->kernel_choice != PLAN_KERNELS_FAST)
        return;
    int n = g->nnodes;
    char *ok = calloc((size_t)n + 1, 1), *bf = calloc((size_t)n + 1, 1), *tc = calloc((size_t)n + 1, 1);
    int *users = calloc((size_t)n + 1, sizeof(int));
    if (!ok || !bf || !tc || !users)
        die("out of memory");
    /* ok: the tensor may be bf16 (its producer writes, every consumer reads bf16) */
    for (int i = 0; i < n; i++) {
        const IrNode *x = g->nodes[i];
        tc[i] = tc_kernel(cg, x);
        ok[i] = (x->dtype == IR_F32 || x->dtype == IR_BF16) && !x->is_output && x != g->loss && x->op != IR_OP_VIEW &&
                bf16_producer(cg, x);
    }
    for (int p = 0; p < g->nparams; p++)
        if (g->grads[p])
            ok[g->grads[p]->id] = 0;
    for (int i = 0; i < n; i++) {
        const IrNode *u = g->nodes[i];
        for (int s = 0; s < u->nsrc; s++) {
            users[u->src[s]->id]++;
            if (!bf16_consumer(cg, u, s))
                ok[u->src[s]->id] = 0;
        }
    }
    for (int i = 0; i < n; i++)
        ok[i] &= users[i] > 0;
    /* bf: it is. Seeds: a tensor a tensor-core kernel writes or reads (there the conversion passes were);
     * then, through the typed elementwise kernels (RoPE, slice, rmsnorm), a tensor whose producer reads a
     * bf16 one or one of whose consumers writes one. A chain of elementwise kernels alone (a model on the
     * reference attention) stays fp32: bf16 there would round without removing a conversion. */
    for (int i = 0; i < n; i++) {
        const IrNode *x = g->nodes[i];
        if (!ok[i])
            continue;
        bf[i] = tc[i];
        for (int j = i + 1; j < n && !bf[i]; j++)
            for (int s = 0; s < g->nodes[j]->nsrc; s++)
                if (g->nodes[j]->src[s] == x && tc[j])
                    bf[i] = 1;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int i = 0; i < n; i++) {
            const IrNode *x = g->nodes[i];
            if (!ok[i] || bf[i])
                continue;
            int grow = 0;
            for (int s = 0; s < x->nsrc && !grow; s++)
                grow = bf[x->src[s]->id];
            for (int j = i + 1; j < n && !grow; j++)
                for (int s = 0; s < g->nodes[j]->nsrc; s++)
                    if (g->nodes[j]->src[s] == x && bf[j])
                        grow = 1;
            if (grow)
                bf[i] = changed = 1;
        }
        /* the q, k and v of a fast attention: all three or none (its kernels take one operand type) */
        for (int i = 0; i < n; i++) {
            const IrNode *u = g->nodes[i];
            if (u->op != IR_OP_SDPA || !tc[i])
                continue;
            int q = u->src[0]->id, k = u->src[1]->id, v = u->src[2]->id;
            if ((bf[q] || bf[k] || bf[v]) && !(bf[q] && bf[k] && bf[v])) {
                ok[q] = ok[k] = ok[v] = bf[q] = bf[k] = bf[v] = 0;
                changed = 1;
            }
        }
    }
    for (int i = 0; i < n; i++)
        if (bf[i]) {
            cg->bufs[i].storage = PLAN_BF16;
            cg->bufs[i].bytes = ir_numel(g->nodes[i]) * plan_storage_bytes[PLAN_BF16];
        }
    free(ok);
    free(bf);
    free(tc);
    free(users);
}

static int add_buf(Cg *cg, const char *name, int node, PlanBufKind kind, PlanStorage storage, int64_t count)
{
    if (cg->nbufs == cg->capbufs) {
        cg->capbufs = cg->capbufs ? 2 * cg->capbufs : 256;
        cg->bufs = xrealloc(cg->bufs, sizeof *cg->bufs * (size_t)cg->capbufs);
    }
    CgBuf *b = &cg->bufs[cg->nbufs];
    memset(b, 0, sizeof *b);
    b->name = xstrdup(name);
    b->node = node;
    b->kind = kind;
    b->storage = storage;
    b->bytes = count * plan_storage_bytes[storage];
    b->alias_of = -1;
    b->until = -1;
    b->block = -1;
    return cg->nbufs++;
}

int cg_ws(Cg *cg, const IrNode *n, PlanStorage storage, int64_t count, const char *what)
{
    char name[512];
    snprintf(name, sizeof name, "%s.ws.%s", n->name, what);
    return add_buf(cg, name, n->id, PLAN_BUF_WORKSPACE, storage, count);
}

int cg_ws_kept(Cg *cg, const IrNode *n, const IrNode *until, PlanStorage storage, int64_t count, const char *what)
{
    if (until->id <= n->id)
        die("codegen: workspace %s of %s kept for %s, which runs before it", what, n->name, until->name);
    int b = cg_ws(cg, n, storage, count, what);
    cg->bufs[b].until = until->id;
    return b;
}

int cg_find_ws(Cg *cg, const IrNode *n, const char *what)
{
    char name[512];
    snprintf(name, sizeof name, "%s.ws.%s", n->name, what);
    for (int b = cg->g->nnodes; b < cg->nbufs; b++)
        if (cg->bufs[b].kind == PLAN_BUF_WORKSPACE && cg->bufs[b].node == n->id && strcmp(cg->bufs[b].name, name) == 0)
            return b;
    return -1;
}

int cg_param_copy(Cg *cg, const IrNode *param, int64_t glu_f)
{
    if (param->op != IR_OP_PARAM)
        die("codegen: a working copy of %s, which is no param", param->name);
    for (int b = cg->g->nnodes; b < cg->nbufs; b++)
        if (cg->bufs[b].kind == PLAN_BUF_COPY && cg->bufs[b].node == param->id) {
            if (cg->bufs[b].storage != PLAN_BF16)
                die("codegen: %s has an e4m3 copy, and a kernel wants a bf16 one", param->name);
            if (cg->bufs[b].glu_f != glu_f)
                die("codegen: %s's working copy wanted in two layouts", param->name);
            return b;
        }
    char name[512];
    snprintf(name, sizeof name, "%s.bf16%s", param->name, glu_f ? "_glu" : "");
    int b = add_buf(cg, name, param->id, PLAN_BUF_COPY, PLAN_BF16, ir_numel(param));
    cg->bufs[b].glu_f = glu_f;
    return b;
}

int cg_param_fp8b_copy(Cg *cg, const IrNode *param)
{
    PlanFp8Copy c;
    if (param->op != IR_OP_PARAM || !plan_fp8b_copy_layout(cg->g, param, &c))
        die("codegen: an e4m3 copy of %s, which is no param [E, N, K] with N, K multiples of 128", param->name);
    for (int b = cg->g->nnodes; b < cg->nbufs; b++)
        if (cg->bufs[b].kind == PLAN_BUF_COPY && cg->bufs[b].node == param->id) {
            if (cg->bufs[b].storage != PLAN_E4M3)
                die("codegen: %s has a bf16 copy, and a kernel wants an e4m3 one", param->name);
            return b;
        }
    char name[512];
    snprintf(name, sizeof name, "%s.%s", param->name, c.mx ? "mxfp8" : "e4m3_tiles");
    return add_buf(cg, name, param->id, PLAN_BUF_COPY, PLAN_E4M3, c.bytes);
}

/* ------------------------------------------------------------ the kernel builder */

void cg_begin(Cg *cg, const IrNode *n, const char *suffix, const char *what)
{
    cg->node = n;
    free(cg->suffix);
    free(cg->what);
    cg->suffix = xstrdup(suffix);
    cg->what = xstrdup(what);
    cg->params.len = 0;
    cg->body.len = 0;
    sb_puts(&cg->params, "");
    sb_puts(&cg->body, "");
    cg->nargs = 0;
    cg->typed = 0;
    cg->shared_bytes = 0;
    cg->all_sms = 0;
    cg->cluster = 0;
}

void cg_param(Cg *cg, int buf, int is_out, const char *name)
{
    if (cg->nargs == CG_MAX_ARGS)
        die("codegen: kernel of %s has more than %d parameters", cg->node->name, CG_MAX_ARGS);
    sb_printf(&cg->params, "%s%s%s *__restrict__ %s", cg->nargs ? ", " : "", is_out ? "" : "const ",
              cg_ctype(cg->bufs[buf].storage), name);
    cg->targs[cg->nargs] = (PlanArg){.kind = PLAN_ARG_BUF, .buf = buf};
    cg->args[cg->nargs++] = buf;
}

void cg_tmap(Cg *cg, int buf, int64_t rows, int64_t cols, int box_rows, const char *name)
{
    if (cg->nargs == CG_MAX_ARGS)
        die("codegen: kernel of %s has more than %d parameters", cg->node->name, CG_MAX_ARGS);
    if (cg->bufs[buf].storage != PLAN_BF16 || rows * cols * 2 > cg->bufs[buf].bytes)
        die("codegen: tensor map %s of %s over a buffer that is no bf16 [%lld x %lld]", name, cg->node->name,
            (long long)rows, (long long)cols);
    sb_printf(&cg->params, "%sconst __grid_constant__ moec::sm90::TmaDesc %s", cg->nargs ? ", " : "", name);
    cg->targs[cg->nargs] =
        (PlanArg){.kind = PLAN_ARG_TMAP, .buf = buf, .rows = rows, .cols = cols, .box_rows = box_rows, .box_cols = 64};
    cg->args[cg->nargs++] = buf;
    cg->typed = 1;
}

void cg_tmap_u8(Cg *cg, int buf, int64_t offset, int64_t rows, int64_t cols, int box_rows, const char *name)
{
    if (cg->nargs == CG_MAX_ARGS)
        die("codegen: kernel of %s has more than %d parameters", cg->node->name, CG_MAX_ARGS);
    if (cg->bufs[buf].storage != PLAN_E4M3 || offset + rows * cols > cg->bufs[buf].bytes || cols % 16 || offset % 16)
        die("codegen: byte tensor map %s of %s over a buffer that is no e4m3 [%lld x %lld] from byte %lld (16-byte "
            "aligned)", name, cg->node->name, (long long)rows, (long long)cols, (long long)offset);
    sb_printf(&cg->params, "%sconst __grid_constant__ moec::sm90::TmaDesc %s", cg->nargs ? ", " : "", name);
    cg->targs[cg->nargs] = (PlanArg){.kind = PLAN_ARG_TMAP_U8, .buf = buf, .rows = rows, .cols = cols,
                                     .box_rows = box_rows, .box_cols = 128, .offset = offset};
    cg->args[cg->nargs++] = buf;
    cg->typed = 1;
}

void cg_tmap_f32(Cg *cg, int buf, int64_t offset, int64_t rows, int64_t cols, int box_rows, const char *name)
{
    if (cg->nargs == CG_MAX_ARGS)
        die("codegen: kernel of %s has more than %d parameters", cg->node->name, CG_MAX_ARGS);
    if (cg->bufs[buf].storage != PLAN_F32 || (offset + rows * cols) * 4 > cg->bufs[buf].bytes || (offset * 4) % 16 ||
        (cols * 4) % 16)
        die("codegen: fp32 tensor map %s of %s over a buffer that is no fp32 [%lld x %lld] from element %lld (16-byte "
            "aligned)", name, cg->node->name, (long long)rows, (long long)cols, (long long)offset);
    sb_printf(&cg->params, "%sconst __grid_constant__ moec::sm90::TmaDesc %s", cg->nargs ? ", " : "", name);
    cg->targs[cg->nargs] = (PlanArg){.kind = PLAN_ARG_TMAP_F32, .buf = buf, .rows = rows, .cols = cols,
                                     .box_rows = box_rows, .box_cols = 32, .offset = offset};
    cg->args[cg->nargs++] = buf;
    cg->typed = 1;
}

int cg_kernel_heavy(const CgKernel *k)
{
    return strstr(k->text, "moec::sm90::Gemm") || strstr(k->text, "moec::attn::");
}

/* a scalar parameter `ctype name` passed by value at run time (plan.h PLAN_ARG_I32 / PLAN_ARG_I64) */
static void scalar_param(Cg *cg, PlanArgKind kind, const char *ctype, int64_t value, const char *name)
{
    if (cg->nargs == CG_MAX_ARGS)
        die("codegen: kernel of %s has more than %d parameters", cg->node->name, CG_MAX_ARGS);
    sb_printf(&cg->params, "%s%s %s", cg->nargs ? ", " : "", ctype, name);
    cg->targs[cg->nargs] = (PlanArg){.kind = kind, .buf = -1, .value = value};
    cg->args[cg->nargs++] = -1;
    cg->typed = 1;
}

void cg_i32(Cg *cg, int64_t value, const char *name) { scalar_param(cg, PLAN_ARG_I32, "int", value, name); }
void cg_i64(Cg *cg, int64_t value, const char *name) { scalar_param(cg, PLAN_ARG_I64, "long long", value, name); }

void cg_norm(Cg *cg, const IrNode *param, int per_block, const char *name)
{
    if (cg->nargs == CG_MAX_ARGS)
        die("codegen: kernel of %s has more than %d parameters", cg->node->name, CG_MAX_ARGS);
    sb_printf(&cg->params, "%sdouble *%s", cg->nargs ? ", " : "", name);
    cg->targs[cg->nargs] =
        (PlanArg){.kind = PLAN_ARG_NORM, .buf = -1, .value = param ? param->id : -1, .rows = per_block};
    cg->args[cg->nargs++] = -1;
    cg->typed = 1;
}

void cg_launch_extra(Cg *cg, int shared, int all_sms)
{
    cg->shared_bytes = shared;
    cg->all_sms = all_sms;
}

void cg_launch_cluster(Cg *cg, int cluster)
{
    if (cluster > 1 && !cg->all_sms)
        die("codegen: %s: a cluster launch is a persistent one (one block an SM)", cg->node->name);
    cg->cluster = cluster > 1 ? cluster : 0;
}

void cg_impl(Cg *cg, const char *impl)
{
    if (!impl) {
        cg->impl = NULL;
        return;
    }
    snprintf(cg->impl_buf, sizeof cg->impl_buf, "%s", impl);
    cg->impl = cg->impl_buf;
}

void cg_out(Cg *cg, const IrNode *n, const char *name) { cg_param(cg, n->id, 1, name); }
void cg_in(Cg *cg, const IrNode *src, const char *name) { cg_param(cg, src->id, 0, name); }

void cg_const(Cg *cg, const char *name, int64_t v)
{
    sb_printf(&cg->body, "    constexpr long long %s = %lld;\n", name, (long long)v);
}

void cg_line(Cg *cg, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sb_puts(&cg->body, "    ");
    sb_vprintf(&cg->body, fmt, ap);
    sb_puts(&cg->body, "\n");
    va_end(ap);
}

static uint64_t fnv1a(const char *s, int block)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return (h ^ (uint64_t)block) * 1099511628211ull;
}

static void sb_node_desc(Sb *b, const IrNode *n)
{
    char tb[160], db[32];
    sb_printf(b, "%%");
    sb_comment_text(b, n->name);
    sb_printf(b, " = %s", ir_node_op_name(n));
    if (n->nsrc) {
        sb_puts(b, "(");
        for (int s = 0; s < n->nsrc; s++) {
            sb_puts(b, s ? ", %" : "%");
            sb_comment_text(b, n->src[s]->name);
        }
        sb_puts(b, ")");
    }
    if (n->attr_set) {
        int first = 1;
        sb_puts(b, " {");
        for (int k = 0; k < IR_ATTR_COUNT; k++) {
            if (!ir_has_attr(n, (IrAttrKey)k))
                continue;
            sb_printf(b, "%s%s = ", first ? "" : ", ", ir_attr_name[k]);
            first = 0;
            switch (ir_attr_kind[k]) {
            case IR_AK_I: sb_printf(b, "%lld", (long long)n->attr[k].i); break;
            case IR_AK_B: sb_puts(b, n->attr[k].i ? "true" : "false"); break;
            case IR_AK_F: sb_puts(b, fmt_double(db, n->attr[k].f)); break;
            case IR_AK_E:
                sb_printf(b, "\"%s\"", ir_attr_e_name(n, (IrAttrKey)k));
                break;
            case IR_AK_S:
                sb_puts(b, "\"");
                sb_comment_text(b, n->attr[k].s);
                sb_puts(b, "\"");
                break;
            }
        }
        sb_puts(b, "}");
    }
    sb_printf(b, " : %s", ir_type_str(n, tb, sizeof tb));
}

static void add_user(CgKernel *k, int node)
{
    if (k->nusers && k->users[k->nusers - 1] == node)
        return;
    if (k->nusers == k->capusers) {
        k->capusers = k->capusers ? 2 * k->capusers : 4;
        k->users = xrealloc(k->users, sizeof(int) * (size_t)k->capusers);
    }
    k->users[k->nusers++] = node;
}

static int find_kernel(Cg *cg, const char *text, int block, uint64_t h)
{
    if (!cg->tablecap)
        return -1;
    for (size_t i = h & (size_t)(cg->tablecap - 1);; i = (i + 1) & (size_t)(cg->tablecap - 1)) {
        int k = cg->table[i] - 1;
        if (k < 0)
            return -1;
        if (cg->kernels[k].hash == h && cg->kernels[k].block == block && strcmp(cg->kernels[k].text, text) == 0)
            return k;
    }
}

static void table_insert(Cg *cg, int k)
{
    if (2 * (cg->nkernels + 1) > cg->tablecap) {
        int cap = cg->tablecap ? 2 * cg->tablecap : 256;
        free(cg->table);
        cg->table = calloc((size_t)cap, sizeof(int));
        if (!cg->table)
            die("out of memory");
        cg->tablecap = cap;
        for (int j = 0; j < cg->nkernels; j++)
            if (j != k)
                table_insert(cg, j);
    }
    for (size_t i = cg->kernels[k].hash & (size_t)(cg->tablecap - 1);; i = (i + 1) & (size_t)(cg->tablecap - 1))
        if (!cg->table[i]) {
            cg->table[i] = k + 1;
            return;
        }
}

static CgLaunch *new_launch(Cg *cg, const IrNode *n)
{
    if (cg->nlaunches == cg->caplaunches) {
        cg->caplaunches = cg->caplaunches ? 2 * cg->caplaunches : 256;
        cg->launches = xrealloc(cg->launches, sizeof *cg->launches * (size_t)cg->caplaunches);
    }
    CgLaunch *l = &cg->launches[cg->nlaunches++];
    memset(l, 0, sizeof *l);
    l->node = n->id;
    l->kernel = -1;
    return l;
}

void cg_end(Cg *cg, int block, int64_t grid)
{
    const IrNode *n = cg->node;
    Sb text = {0};
    sb_printf(&text, "(%s)\n{\n%s}\n", cg->params.s, cg->body.s);
    uint64_t h = fnv1a(text.s, block);
    int k = cg->dedup ? find_kernel(cg, text.s, block, h) : -1;
    if (k < 0) {
        if (cg->nkernels == cg->capkernels) {
            cg->capkernels = cg->capkernels ? 2 * cg->capkernels : 256;
            cg->kernels = xrealloc(cg->kernels, sizeof *cg->kernels * (size_t)cg->capkernels);
        }
        k = cg->nkernels;
        CgKernel *kn = &cg->kernels[k];
        memset(kn, 0, sizeof *kn);
        Sb name = {0};
        sb_printf(&name, "k%d_", n->id);
        size_t start = name.len;
        for (const char *s = n->name; *s && name.len - start < 64; s++) {
            char c = *s;
            int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
            sb_put(&name, ok ? &c : "_", 1);
        }
        if (cg->suffix[0])
            sb_printf(&name, "_%s", cg->suffix);
        Sb hdr = {0};
        sb_puts(&hdr, "// node ");
        sb_printf(&hdr, "%d: ", n->id);
        sb_node_desc(&hdr, n);
        sb_puts(&hdr, "\n// ");
        sb_comment_text(&hdr, cg->g->file ? cg->g->file : "");
        if (n->loc.line)
            sb_printf(&hdr, ":%d:%d", n->loc.line, n->loc.col);
        sb_puts(&hdr, ": ");
        sb_comment_text(&hdr, cg->what);
        sb_puts(&hdr, "\n");
        kn->name = name.s;
        kn->header = hdr.s;
        kn->text = text.s;
        kn->block = block;
        kn->hash = h;
        cg->nkernels++;
        if (cg->dedup)
            table_insert(cg, k);
    } else {
        sb_free(&text);
    }
    add_user(&cg->kernels[k], n->id);
    CgLaunch *l = new_launch(cg, n);
    l->kernel = k;
    l->grid = cg->all_sms ? PLAN_GRID_ALL_SMS : grid < 1 ? 1 : grid;
    l->block = block;
    l->nargs = cg->nargs;
    memcpy(l->args, cg->args, sizeof(int) * (size_t)cg->nargs);
    l->what = xstrdup(cg->what);
    l->typed = cg->typed;
    if (cg->typed)
        memcpy(l->targs, cg->targs, sizeof(PlanArg) * (size_t)cg->nargs);
    l->shared_bytes = cg->shared_bytes;
    l->cluster = cg->cluster;
    l->impl = cg->impl ? xstrdup(cg->impl) : NULL;
}

void cg_collective(Cg *cg, const IrNode *n)
{
    CgLaunch *l = new_launch(cg, n);
    for (int s = 0; s < n->nsrc; s++)
        l->args[l->nargs++] = n->src[s]->id;
    l->args[l->nargs++] = n->id;
    l->what = xstrdup("host-side collective");
}

/* ------------------------------------------------------------ the driver */

static void cg_free(Cg *cg)
{
    for (int i = 0; i < cg->nbufs; i++)
        free(cg->bufs[i].name);
    free(cg->bufs);
    for (int i = 0; i < cg->nlaunches; i++) {
        free(cg->launches[i].what);
        free(cg->launches[i].impl);
    }
    free(cg->launches);
    for (int k = 0; k < cg->nkernels; k++) {
        free(cg->kernels[k].name);
        free(cg->kernels[k].header);
        free(cg->kernels[k].text);
        free(cg->kernels[k].users);
    }
    free(cg->kernels);
    free(cg->table);
    free(cg->suffix);
    free(cg->what);
    sb_free(&cg->params);
    sb_free(&cg->body);
}

static void check_table(void)
{
    for (int op = 0; op < IR_OP_COUNT; op++)
        if (!cuda_op_handling((IrOp)op))
            die("codegen: no CUDA emitter for op %s (add it to cg_emitters in codegen/cuda.c)", ir_op_name((IrOp)op));
}

const char *const cuda_runtime_kernels[CUDA_RUNTIME_KERNELS] = {
    "moec_grad_sumsq", "moec_sum_partials", "moec_scale", "moec_clip", "moec_adamw", "moec_adamw_bf16", "moec_to_bf16",
    "moec_accum", "moec_accum_out", "moec_moe_stats", "moec_moe_stats_add", "moec_metric_add", "moec_ep_pack",
    "moec_ep_unpack", "moec_sim_barrier", "moec_sim_alltoall", "moec_sim_allreduce", "moec_sim_rs_f32", "moec_sim_ag_f32",
    "moec_sim_rs_f64", "moec_sim_ag_f64"};

/* PlanBuf.unread_srcs of every node that launches kernels: bit s when none of its launches names source s's
 * buffer (a view and the buffer it lies in count as one). The fast kernels often read something else than a
 * graph source: the fp8-block backward reads the transposed E4M3 codes its forward kept, not the dispatch
 * (256 MiB of fp32 in the Mixtral layer, live across the whole backward for nothing); plan_memory then lets
 * the edge keep nothing alive. Conservative: only nodes whose emitter launches kernels (CG_KERNELS) and that
 * launched at least one, all of them kernels (not host collectives: their reads are the runtime's), each
 * argument a buffer of the table; never a leaf or collective; sources past the 64th stay read. A view is
 * the one node without launches that gets bits: its `like` source, which by definition gives the shape
 * only (cg_fast_reads_through skips it for the same reason). A node's buffer that a later launch reads
 * without being its graph user (through an elided node) is kept alive by `until` (cuda_codegen, below). */
static void mark_unread_srcs(Cg *cg)
{
    const IrGraph *g = cg->g;
    int n = g->nnodes;
    /* the launches grouped by node (counting sort: they are in node order, but nothing here relies on it) */
    int *start = calloc((size_t)n + 2, sizeof(int)), *order = malloc(sizeof(int) * ((size_t)cg->nlaunches + 1));
    int *fill = calloc((size_t)n + 1, sizeof(int)), *stamp = calloc((size_t)cg->nbufs + 1, sizeof(int));
    char *opaque = calloc((size_t)n + 1, 1);
    if (!start || !order || !fill || !stamp || !opaque)
        die("out of memory");
    for (int l = 0; l < cg->nlaunches; l++) {
        int node = cg->launches[l].node;
        if (node < 0 || node >= n)
            die("codegen: launch %d of node %d, past the graph", l, node);
        start[node + 1]++;
    }
    for (int i = 0; i < n; i++)
        start[i + 1] += start[i];
    for (int l = 0; l < cg->nlaunches; l++) {
        int node = cg->launches[l].node;
        order[start[node] + fill[node]++] = l;
    }
    for (int i = 0; i < n; i++) {
        const IrNode *node = g->nodes[i];
        cg->bufs[i].unread_srcs = 0;
        if (node->op == IR_OP_VIEW) {
            /* view(packed, like): `like` gives the shape only (docs/ir.md), nothing reads it through the view;
             * the view of the fast MLP backward's packed result for dxs names xs, which would otherwise live
             * until after the backward (1 GiB of ep_sort rows per Mixtral-8x7B layer) */
            for (int s = 1; s < node->nsrc && s < 64; s++)
                cg->bufs[i].unread_srcs |= (uint64_t)1 << s;
            continue;
        }
        if (cg_emitters[node->op].kind != CG_KERNELS || start[i] == start[i + 1] || node->nsrc == 0)
            continue;
        /* the buffers its launches name, by root, stamped i + 1 */
        for (int k = start[i]; k < start[i + 1] && !opaque[i]; k++) {
            const CgLaunch *L = &cg->launches[order[k]];
            if (L->kernel < 0) {
                opaque[i] = 1;
                break;
            }
            for (int a = 0; a < L->nargs; a++) {
                int b = L->args[a];
                if (b == -1 && L->typed &&
                    (L->targs[a].kind == PLAN_ARG_I32 || L->targs[a].kind == PLAN_ARG_I64 ||
                     L->targs[a].kind == PLAN_ARG_NORM))
                    continue;  /* a value, no buffer */
                if (b < 0 || b >= cg->nbufs) {
                    opaque[i] = 1;  /* an argument we cannot place: assume it reads everything */
                    break;
                }
                stamp[cg->bufs[b].alias_of >= 0 ? cg->bufs[b].alias_of : b] = i + 1;
            }
        }
        if (opaque[i])
            continue;
        for (int s = 0; s < node->nsrc && s < 64; s++) {
            int r = node->src[s]->id;
            if (cg->bufs[r].alias_of >= 0)
                r = cg->bufs[r].alias_of;
            if (stamp[r] != i + 1)
                cg->bufs[i].unread_srcs |= (uint64_t)1 << s;
        }
    }
    free(start);
    free(order);
    free(fill);
    free(stamp);
    free(opaque);
}

int cuda_codegen(Plan *p, const CudaOptions *opts, Diag *d)
{
    const IrGraph *g = p->graph;
    check_table();
    p->needs_arch[0] = 0;
    if (g->train.precision == IR_PREC_FP8_BLOCK && p->source.kernels != PLAN_KERNELS_FAST) {
        /* the reference kernels have no fp8-block path: the fused grouped_mlp would otherwise run its
         * fp32 kernels, wrong numerics, not an error. --kernels fast has one (cuda_moe_fast.c); a node
         * it cannot take is refused there (cg_emit_grouped_mlp) */
        SrcLoc none = {0, 0, 0};
        if (d)
            diag_error(d, none, CG_FP8_BLOCK_CPU_ONLY);
        return 0;
    }
    Cg cg;
    memset(&cg, 0, sizeof cg);
    cg.g = g;
    cg.diag = d;
    cg.dedup = !(opts && opts->no_dedup);
    cg.kgemm_epilogue = opts ? opts->kgemm_epilogue : CUDA_KGEMM_DEFAULT;
    cg.mgemm_schedule = opts ? opts->mgemm_schedule : CUDA_MGEMM_DEFAULT;
    cg.dswiglu = opts ? opts->dswiglu : CUDA_DSWIGLU_DEFAULT;
    cg.fp8_swiglu = opts ? opts->fp8_swiglu : CUDA_DSWIGLU_DEFAULT;
    cg.fp8_passes = opts ? opts->fp8_passes : CUDA_DSWIGLU_DEFAULT;
    cg.kgemm_schedule = opts ? opts->kgemm_schedule : CUDA_KSCHED_DEFAULT;
    cg.attn_schedule = opts ? opts->attn_schedule : CUDA_ATTN_DEFAULT;
    cg.attn_max_grid = opts ? opts->attn_max_grid : 0;

    cg.fp8_kgemm_schedule = opts ? opts->fp8_kgemm_schedule : CUDA_KSCHED_DEFAULT;
    cg.fp8_cluster = opts ? opts->fp8_cluster : 0;
    cg.rope_heads = opts ? opts->rope_heads : 0;
    cg.kernel_choice = p->source.kernels;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->id != i)
            die("codegen: node %s has id %d at position %d", n->name, n->id, i);
        PlanBufKind kind = n->op == IR_OP_VIEW ? PLAN_BUF_VIEW : PLAN_BUF_TENSOR;
        /* every floating tensor in fp32 (an e4m3 one as its dequantized values), indices in i32 */
        int b = add_buf(&cg, n->name, i, kind, n->dtype == IR_I32 ? PLAN_I32 : PLAN_F32, ir_numel(n));
        if (kind == PLAN_BUF_VIEW) {
            const CgBuf *src = &cg.bufs[n->src[0]->id];
            cg.bufs[b].alias_of = src->alias_of >= 0 ? src->alias_of : n->src[0]->id;
            cg.bufs[b].alias_offset = (src->alias_of >= 0 ? src->alias_offset : 0) + ir_attr_i(n, IR_ATTR_OFFSET) * 4;
        }
    }
    decide_storage(&cg);
    int nbf16 = 0;
    for (int i = 0; i < g->nnodes; i++)
        nbf16 += cg.bufs[i].storage == PLAN_BF16;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        const CgEmitter *em = &cg_emitters[n->op];
        switch (em->kind) {
        case CG_LEAF:
        case CG_ALIAS:
            break;
        case CG_KERNELS:
            cg.impl = NULL;
            if (!em->fn(&cg, n))
                cg.errors += cg.errors ? 0 : 1;
            break;
        case CG_HOST:
            cg_collective(&cg, n);
            break;
        case CG_UNSUPPORTED:
            if (n->op != IR_OP_CUSTOM) {
                cg_error(&cg, n, "%s: " CG_FP8_BLOCK_CPU_ONLY, n->name);
                break;
            }
            cg_error(&cg, n, "custom op `%s` (from a pass plugin) is not supported on the GPU yet: no CUDA kernel for "
                     "%s; compile without --emit-cuda and --arch, or without the plugin", ir_node_op_name(n), n->name);
            break;
        case CG_NONE:
            die("codegen: no emitter for %s", ir_node_op_name(n));
        }
    }
    if (cg.errors) {
        cg_free(&cg);
        return 0;
    }
    mark_unread_srcs(&cg);
    /* a launch that reads a node's buffer after its last graph user (a fast kernel reading through an
     * elided node) keeps it alive until then */
    for (int i = 0; i < cg.nlaunches; i++)
        for (int a = 0; a < cg.launches[i].nargs; a++) {
            int b = cg.launches[i].args[a];
            if (b < 0 || b >= g->nnodes)
                continue;
            const IrNode *user = g->nodes[cg.launches[i].node];
            int graph_user = b == user->id;
            for (int s = 0; s < user->nsrc && !graph_user; s++)
                graph_user = user->src[s]->id == b;
            if (cg.bufs[b].alias_of >= 0)
                b = cg.bufs[b].alias_of;
            if (!graph_user && cg.launches[i].node > b && cg.bufs[b].until < cg.launches[i].node)
                cg.bufs[b].until = cg.launches[i].node;
        }
    /* an elided node's buffer (no kernel writes it, the fast kernels read through the node) takes no memory:
     * it was the size of its tensor, 2 x 256 MiB of fp32 for the Mixtral layer's two dispatches */
    for (int b = 0; b < g->nnodes; b++)
        if (cg.bufs[b].elided)
            cg.bufs[b].bytes = 0;

    int nkernel_launches = 0, ncollectives = 0;
    for (int i = 0; i < cg.nlaunches; i++) {
        if (cg.launches[i].kernel >= 0)
            nkernel_launches++;
        else
            ncollectives++;
    }
    Sb src = {0};
    sb_puts(&src, "// kernels.cu - CUDA C generated by moec from ");
    sb_comment_text(&src, g->file ? g->file : "");
    sb_puts(&src, " (model ");
    sb_comment_text(&src, g->model ? g->model : "");
    sb_puts(&src, "). Do not edit.\n");
    sb_printf(&src, "// %d kernels (%d of them the runtime's) for %d launches per training step",
              cg.nkernels + CUDA_RUNTIME_KERNELS, CUDA_RUNTIME_KERNELS,
              nkernel_launches);
    if (ncollectives)
        sb_printf(&src, " and %d host-side collectives", ncollectives);
    if (nbf16)
        sb_printf(&src, ";\n// the order, grids and buffers of the launches are in plan.json. Precision %s: %d node\n"
                  "// tensors are stored in bf16 (plan.json's \"storage\", docs/decisions.md 40), every other\n"
                  "// floating-point tensor in fp32 (an e4m3 tensor as its dequantized values), indices in\n"
                  "// i32. Compiled by moec compile --arch with NVRTC: -std=c++17 --gpu-architecture=ARCH\n"
                  "// -default-device. Design: docs/codegen.md.\n\n",
                  ir_precision_name[g->train.precision], nbf16);
    else
        sb_printf(&src, ";\n// the order, grids and buffers of the launches are in plan.json. Precision %s: every\n"
                  "// floating-point tensor is stored in fp32 (an e4m3 tensor as its dequantized values), indices in\n"
                  "// i32. Compiled by moec compile --arch with NVRTC: -std=c++17 --gpu-architecture=ARCH\n"
                  "// -default-device. Design: docs/codegen.md.\n\n",
                  ir_precision_name[g->train.precision]);
    sb_puts(&src, "// ======== device library: codegen/mxfp8.cuh ========\n");
    sb_puts(&src, cuda_prelude_mxfp8);
    sb_puts(&src, "\n// ======== device library: codegen/prelude.cuh ========\n");
    sb_puts(&src, cuda_prelude_lib);
    if (cg.fast_used || cg.attn_fast_used || nbf16) {
        /* only plans with fast kernels (moec compile --kernels fast): the sm_90a device code, which only an
         * sm_90 GPU runs (the runtime refuses another with the way out: gpu_check_arch) */
        snprintf(p->needs_arch, sizeof p->needs_arch, "sm_90a");
        sb_puts(&src, "\n// ======== sm_90a: codegen/gemm_sm90_sched.h, sm90.cuh, gemm_sm90.cuh ========\n");
        sb_puts(&src, cuda_prelude_sm90_sched);
        sb_puts(&src, cuda_prelude_sm90);
        sb_puts(&src, cuda_prelude_gemm_sm90);
        sb_puts(&src, "\n// ======== sm_90a: codegen/moe_fast_offsets.h, moe_fast.cuh ========\n");
        sb_puts(&src, cuda_prelude_moe_fast);
    }
    if (cg.fp8b_used) {
        sb_puts(&src, "\n// ======== fp8-block: codegen/fp8_block_fast.cuh ========\n");
        sb_puts(&src, cuda_prelude_fp8_block_fast);
    }
    if (cg.dense_fast_used) {
        sb_puts(&src, "\n// ======== fast dense kernels: codegen/dense_fast.cuh ========\n");
        sb_puts(&src, cuda_prelude_dense_fast);
    }
    if (cg.attn_fast_used) {
        sb_puts(&src, "\n// ======== fast attention: codegen/attn_fast.cuh ========\n");
        sb_puts(&src, cuda_prelude_attn_fast);
    }
    sb_puts(&src, "\n// ======== the kernels, in launch order ========\n");
    /* NVRTC units (decision 67): each heavy kernel (a template of the sm_90a GEMM or attention library, 0.3 to
     * 3 s of NVRTC each) alone, the light ones CG_UNIT_LIGHT to a unit (a unit's sections need not be adjacent:
     * the kernels stay in launch order), the optimizer's and the runtime's one */
    int nunits = 0, light_unit = -1, light = 0, cur = -1;
    for (int k = 0; k < cg.nkernels; k++) {
        const CgKernel *kn = &cg.kernels[k];
        int u;
        if (cg_kernel_heavy(kn)) {
            u = nunits++;
        } else {
            if (light_unit < 0 || light == CG_UNIT_LIGHT) {
                light_unit = nunits++;
                light = 0;
            }
            light++;
            u = light_unit;
        }
        if (u != cur)
            sb_printf(&src, "\n" PLAN_UNIT_MARK "%d ========\n", u);
        cur = u;
        sb_puts(&src, "\n");
        sb_puts(&src, kn->header);
        if (kn->nusers > 1) {
            sb_printf(&src, "// also launched for %d more node%s:", kn->nusers - 1, kn->nusers > 2 ? "s" : "");
            for (int u = 1; u < kn->nusers && u <= 4; u++) {
                sb_printf(&src, "%s %d %%", u > 1 ? "," : "", kn->users[u]);
                sb_comment_text(&src, g->nodes[kn->users[u]]->name);
            }
            if (kn->nusers > 5)
                sb_printf(&src, ", ... (plan.json lists them)");
            sb_puts(&src, "\n");
        }
        sb_printf(&src, "extern \"C\" __global__ void __launch_bounds__(%d) %s", kn->block, kn->name);
        sb_puts(&src, kn->text);
    }
    sb_printf(&src, "\n" PLAN_UNIT_MARK "%d (the optimizer and the runtime's kernels) ========\n", nunits++);
    cg_emit_optimizer(&cg, &src);
    cg_emit_collectives(&src);

    p->cuda_source = src.s;
    p->cuda_source_len = src.len;
    p->nkernel_launches = nkernel_launches;
    p->ncollectives = ncollectives;
    /* the buffers and launches move into the plan */
    p->bufs = cg.bufs;
    p->nbufs = cg.nbufs;
    cg.bufs = NULL;
    cg.nbufs = 0;
    p->launches = calloc((size_t)cg.nlaunches + 1, sizeof *p->launches);
    if (!p->launches)
        die("out of memory");
    for (int i = 0; i < cg.nlaunches; i++) {
        const CgLaunch *l = &cg.launches[i];
        PlanLaunch *pl = &p->launches[i];
        pl->node = l->node;
        pl->kernel = l->kernel;
        pl->grid = l->grid;
        pl->block = l->block;
        pl->shared_bytes = l->shared_bytes;
        pl->cluster = l->cluster;
        pl->nargs = l->nargs;
        pl->args = malloc(sizeof(int) * (size_t)(l->nargs + 1));
        if (!pl->args)
            die("out of memory");
        memcpy(pl->args, l->args, sizeof(int) * (size_t)l->nargs);
        if (l->typed) {
            pl->targs = malloc(sizeof(PlanArg) * (size_t)(l->nargs + 1));
            if (!pl->targs)
                die("out of memory");
            memcpy(pl->targs, l->targs, sizeof(PlanArg) * (size_t)l->nargs);
        }
        pl->what = xstrdup(l->what ? l->what : "");
        pl->impl = l->impl ? xstrdup(l->impl) : NULL;
        if (g->loss && l->node <= g->loss->id)
            p->eval_launches = i + 1;
    }
    p->nlaunches = cg.nlaunches;
    /* the layout, with lifetimes in launch positions (decision 65): a fused node's workspaces share bytes
     * when no launch needs two of them at once */
    plan_memory_launches(g, p->bufs, p->nbufs, p->launches, p->nlaunches, 256, &p->memory);
    p->kernel_names = calloc((size_t)cg.nkernels + 1, sizeof(char *));
    if (!p->kernel_names)
        die("out of memory");
    for (int k = 0; k < cg.nkernels; k++)
        p->kernel_names[k] = xstrdup(cg.kernels[k].name);
    p->nkernels = cg.nkernels;
    cg_free(&cg);
    return 1;
}

