/* run_plan.c - the GPU twin of tests/codegen/emu/check.c: runs a model's
 * generated kernels (DIR/kernels.cubin from `moec compile --emit-cuda DIR
 * --arch sm_90a`) on a real GPU, node by node, following DIR/plan.json
 * exactly (its regions, offsets, launches, full grids; isolated, the table
 * laid out at node level, see main), against the CPU reference backend
 * (runtime/cpu) given the same inputs.
 * Not part of `make test`: CI has no GPU. tests/gpu/run_plan.sh builds and runs it.
 *
 *   run_plan MODEL DIR [--precision P] [--ep N] [--disable-pass X] [--chain]
 *
 * Params and inputs get the emulator check's random values (same generator,
 * same order). Default (isolated): before each node, its sources' buffers
 * get the CPU's values, so each kernel is checked on identical inputs.
 * Exact ops (integer results, copies, permutations, routing, MXFP8
 * quantization, elementwise: check.c's list) must match bit for bit; the rest
 * within a normwise relative error ||gpu - cpu||_2 / ||cpu||_2 < 1e-5 (the max
 * elementwise error relative to the tensor's largest value is reported too).
 * --chain runs the launches on their own outputs (activations start as NaN)
 * and compares loss and gradients within 1e-3 normwise. Collectives of an EP
 * plan are made up on the host as rank 0 would see them (fake_collective, as
 * the emulator). Also checks moec_adamw against the CPU backend's (runtime/cpu/backend.c) bit for bit, and
 * in an fp8-block plan each e4m3 weight copy's kernels (decision 44): moec_adamw_fp8b_ExNxK's w, m and v
 * bit for bit against moec_adamw's on the GPU, its copy against fp8b_quantize of the new W and W^T (codes
 * and scales) and against moec_fp8b_copy_ExNxK; the node checks of the fp8-block grouped_mlp read the
 * copies gpu_fill_copies wrote from the params; the fp8-block fast forward's a codes and scales, which the
 * gate_up GEMM's fused SwiGLU epilogue writes (decision 57), against fp8b_quantize of a computed from the
 * GPU's h (fp8b_glu_check, fp8b_glu_diff in the summary). Decision 73: each weight-gradient GEMM that writes the
 * squares of a param's gradient for the optimizer's norm (plan.h PLAN_ARG_NORM) writes them into a buffer here,
 * and their sum must equal the sum of squares of the dW it stored (read back, in double) within 1e-5 relative
 * (fp32 sums of 64 squares a tile: at most ~4e-6); norm_fused_worst in the summary.
 * The CUDA driver API comes through runtime/gpu/cudrv.h (loaded at run time,
 * as in the training binary). One line per compared node; the summary last. Exit 0 when all agree. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../plan/plan.h"
#include "../../runtime/cpu/cpu.h"
#include "../../runtime/cpu/fp8_block.h"
#include "../../runtime/cpu/mxfp8.h"
#include "../../codegen/gemm_sm90_sched.h"
#include "../../util/bf16.h"
#include "../../util/util.h"
#include "../../runtime/gpu/cudrv.h"
#include "../../runtime/gpu/plan_args.h"

/* ---- the driver API: the GPU backend's loader (runtime/gpu/cudrv.h) ---- */
static void cu_load(void)
{
    char err[512];
    if (!cudrv_load(err, sizeof err))
        die("%s", err);
}

static const char *cu_what = "";
static void cu_check(CUresult r, const char *call)
{
    if (r != CUDA_SUCCESS) {
        const char *s = "?";
        cu.cuGetErrorString(r, &s);
        die("%s failed: %s (%d)%s%s", call, s, (int)r, *cu_what ? " at " : "", cu_what);
    }
}
#define CU(call) cu_check(cu.call, #call)
#define KF(f, name) cu_check(kimage_function(&mod, name, f), "cuModuleGetFunction")

#include "../codegen/emu/plan_check.h"

typedef struct OpStat {
    double worst_norm, worst_max;
    int count, bad;
} OpStat;

static void h2d(CUdeviceptr d, const void *h, size_t n) { CU(cuMemcpyHtoD(d, h, n)); }
static void d2h(void *h, CUdeviceptr d, size_t n) { CU(cuMemcpyDtoH(h, d, n)); }

/* A node's values to and from its device buffer, fp32 on the host: a buffer the plan stores in bf16
 * (docs/decisions.md 40) is converted (to bf16 rounded to nearest even; the CPU's values there are
 * rounded already, so exactly; from bf16 exactly) */
static void put_node(const Plan *plan, int id, CUdeviceptr d, const float *h, int64_t numel)
{
    if (plan->bufs[id].storage != PLAN_BF16) {
        h2d(d, h, (size_t)numel * 4);
        return;
    }
    uint16_t *b = malloc((size_t)numel * 2 + 2);
    for (int64_t e = 0; e < numel; e++)
        b[e] = f32_to_bf16(h[e]);
    h2d(d, b, (size_t)numel * 2);
    free(b);
}
static void get_node(const Plan *plan, int id, float *h, CUdeviceptr d, int64_t numel)
{
    if (plan->bufs[id].storage != PLAN_BF16) {
        d2h(h, d, (size_t)numel * 4);
        return;
    }
    uint16_t *b = malloc((size_t)numel * 2 + 2);
    d2h(b, d, (size_t)numel * 2);
    for (int64_t e = 0; e < numel; e++)
        h[e] = bf16_to_f32(b[e]);
    free(b);
}

/* --kernels fast: the normwise tolerance of a node on the bf16 tensor-core kernels (docs/kernels-sm90.md) */
#define FAST_TOL 1e-2
/* --chain on a fast plan: every node downstream of a fast one inherits its bf16 error, compounded through
 * the layers (tests/gpu/fast_mlp.moe, 2 layers: 3.1e-2 worst measured, the layer-0 weight gradients);
 * a stale buffer or a wrong index gives O(1) (a buffer freed too early gave 0.45-0.51) */
#define FAST_CHAIN_TOL 5e-2
/* --precision fp8-block (tests/gpu/fast_mlp_fp8.moe): an expert-MLP node on the fp8-block kernels
 * (decision 38). The operands the CPU reference quantises from the same fp32 values (xs, dy, the weights)
 * are bit-identical (tests/codegen/fp8b_quant.test); those quantised from an intermediate (a, dh) come from
 * the GPU's bf16 h and da rather than the CPU's fp32 ones, so where the bf16 rounding (2^-9) crosses an
 * E4M3 rounding boundary (steps 2^-4 to 2^-3 of the value: about 2% of a's codes) the code differs by
 * one step: test_fp8_block's model of these roundings gives 1.2e-2 to 1.3e-2 normwise on y, dxs and the
 * weight gradients (docs/fp8-block.md) and requires them under half this bound; an index error gives
 * O(1). Chained, the fp8 error compounds through the two layers as the bf16
 * error does (FAST_CHAIN_TOL measured 3.1e-2 for bf16): 0.1, the routing-flip bounds as for bf16. */
#define FP8B_TOL 5e-2
#define FP8B_CHAIN_TOL 0.1
/* fp8-block, chained, once routing choices differ: E4M3's steps (2^-4 to 2^-3 of a value) move the logits
 * more than bf16 does, so more tokens flip (H200, 2026-12-01: 3 of 384 and 18 of 768 choices against bf16's
 * 7 of 1152), and each flip moves every gradient upstream of its layer: measured 0.137-0.16 normwise on the
 * gradients and 0.215 on a router's (layers.1's rmsnorm_dw 0.160 over the bf16 bound 0.15). 0.25 and 0.35:
 * a stale buffer or a wrong index still shows (0.45-0.51 measured for a buffer freed too early). */
#define FP8B_CHAIN_FLIP_TOL 0.25
#define FP8B_ROUTER_CHAIN_TOL 0.35

/* --chain on a fast plan once a routing choice differs from the CPU's (counted and printed): a token whose
 * top-k flips between two near-tied experts (the bf16 error upstream moves its logits) changes its whole
 * contribution to the gradients upstream of that layer, a discrete change the bf16 bound does not cover.
 * Measured on the H200 (2026-12-01, tests/gpu/fast_mlp.moe with the fast attention and dense linears, 7 of
 * 1152 choices flipped): gradients 1.8e-2 to 6.6e-2 normwise, the routers' 4.6e-2 and 1.0e-1 (with only
 * the expert MLP fast, 1 flip: the routers' 7.0e-2 and 9.8e-2, the rest under 5e-2). So 0.15 for every
 * gradient then, 0.25 for a router's: a stale buffer still shows, it gives O(1) (0.45-0.51 measured). */
#define FAST_CHAIN_FLIP_TOL 0.15
#define FAST_ROUTER_CHAIN_TOL 0.25

/* --precision mxfp8 (decision 53): an expert-MLP node on the MXFP8 fast kernels. As fp8-block, the operands
 * quantised from the graph's fp32 values are bit-identical (checked here on the GPU: mx_quant_check), those from
 * an intermediate (a, dh) come from the GPU's bf16 h and da; 1x32 blocks follow the values more closely than
 * 1x128 ones, and the products are summed 32 deep on the tensor core before each fp32 promotion (docs/mxfp8.md):
 * fp8-block's bounds, which the same mechanisms set. */
#define MX_TOL FP8B_TOL
#define MX_CHAIN_TOL FP8B_CHAIN_TOL

/* the buffer of node n's workspace `what`, or -1 */
static int ws_buf(const Plan *plan, const IrNode *n, const char *what)
{
    char name[512];
    snprintf(name, sizeof name, "%s.ws.%s", n->name, what);
    for (int b = 0; b < plan->nbufs; b++)
        if (plan->bufs[b].name && strcmp(plan->bufs[b].name, name) == 0)
            return b;
    return -1;
}

static void *ws_get(const Plan *plan, const IrNode *n, const char *what, const CUdeviceptr *dptr, int64_t *bytes)
{
    int b = ws_buf(plan, n, what);
    if (b < 0)
        die("%s: no workspace %s in the plan", n->name, what);
    *bytes = plan->bufs[b].bytes;
    void *h = malloc((size_t)*bytes);
    d2h(h, dptr[b], (size_t)*bytes);
    return h;
}

/* The MXFP8 fast expert MLP's quantised operands made from the graph's fp32 values, read back from the node's
 * workspaces after its launches, against runtime/cpu/mxfp8.c on the CPU's (the same) inputs, bit for bit: the
 * codes and E8M0 scales (GemmFp8MGrouped's layouts, gemm_sm90_sched.h moec_mxfp8_*) of xs (forward) or dy
 * (backward) 1x32 along H, and of the weights (their params' MXFP8 copies, decision 55; forward: 1x32 along K;
 * backward: 32x1 along N, stored as W^T),
 * and the 32x1 copies within each expert group dequantised to bf16 (xs, dy: exact, NaN by NaN). The device's E4M3
 * conversion (cvt.rn.satfinite) against the integer encoder the CPU runs. Returns the differences (printed). */
static int64_t mx_quant_check(const Plan *plan, const IrNode *n, CpuPlan *cpu, const CUdeviceptr *dptr)
{
    const int fwd = n->op == IR_OP_GROUPED_MLP;
    const IrNode *x = n->src[0], *w1 = n->src[fwd ? 1 : 2], *w2 = n->src[fwd ? 2 : 3];
    const IrNode *xs = n->src[fwd ? 0 : 1];
    int64_t R = xs->shape[0], H = xs->shape[1], E = w1->shape[0], F = w1->shape[1] / 2, bytes, checks = 0, diff = 0;
    const IrNode *owner = n;
    if (!fwd) /* the backward's offsets are its forward's */
        for (int i = n->id - 1; i >= 0; i--)
            if (plan->graph->nodes[i]->op == IR_OP_GROUPED_MLP && plan->graph->nodes[i]->src[0] == xs) {
                owner = plan->graph->nodes[i];
                break;
            }
    int *ofs = ws_get(plan, owner, "fast_offsets", dptr, &bytes);
    const int *start = ofs + E + 1;
    const char *nq = fwd ? "xs_e4m3" : "dy_e4m3", *ns = fwd ? "xs_scales" : "dy_scales";
    unsigned char *q = ws_get(plan, n, nq, dptr, &bytes);
    int64_t rcap = bytes / H;
    unsigned char *sa = ws_get(plan, n, ns, dptr, &bytes);
    /* the forward keeps xs's 32x1 copy only where xs is materialised; read through, the backward makes it (below) */
    const char *ncw = fwd ? "xs_colwise_bf16" : "dy_colwise_bf16";
    unsigned short *cw = ws_buf(plan, n, ncw) >= 0 ? ws_get(plan, n, ncw, dptr, &bytes) : NULL;
    /* the backward's own copy of xs's 32x1 (decision 64): checked as the forward's was */
    unsigned short *xcw = !fwd && ws_buf(plan, n, "xs_colwise_bf16") >= 0 ? ws_get(plan, n, "xs_colwise_bf16", dptr, &bytes)
                                                                          : NULL;
    const float *xv = cpu_plan_data(cpu, x), *xsv = cpu_plan_data(cpu, xs);
    for (int64_t g = 0; g < E; g++) {
        int64_t rows = start[g + 1] - start[g], padded = (rows + 31) / 32 * 32;
        if (rows <= 0)
            continue;
        uint8_t *vq = malloc((size_t)(rows * H)), *vs = malloc((size_t)(rows * H / 32));
        float *t = calloc((size_t)(padded * H), 4), *tx = calloc((size_t)(padded * H), 4);
        memcpy(t, xv + start[g] * H, (size_t)(rows * H) * 4);
        memcpy(tx, xsv + start[g] * H, (size_t)(rows * H) * 4);
        mxfp8_quantize(t, rows, H, MXFP8_ROWWISE, MXFP8_SCALE_TE, vq, vs);
        mxfp8_fake_quant(t, padded, H, MXFP8_COLWISE, MXFP8_SCALE_TE);
        mxfp8_fake_quant(tx, padded, H, MXFP8_COLWISE, MXFP8_SCALE_TE);
        for (int64_t k = 0; k < rows; k++) {
            int64_t pr = ofs[g] + k;
            for (int64_t c = 0; c < H; c++) {
                diff += q[pr * H + c] != vq[k * H + c];
                checks++;
                for (int w = 0; w < 2; w++) { /* the 32x1 bf16 copies: this node's operand's, the backward's of xs */
                    const unsigned short *cp = w ? xcw : cw;
                    if (!cp)
                        continue;
                    float want = (w ? tx : t)[k * H + c], got;
                    uint32_t u = (uint32_t)cp[pr * H + c] << 16, wb;
                    memcpy(&got, &u, 4);
                    memcpy(&wb, &want, 4);
                    diff += isnan(want) ? !isnan(got) : (wb & 0xFFFFu) != 0 || (wb >> 16) != (u >> 16);
                    checks++;
                }
            }
            for (int kb = 0; kb < H / 32; kb++, checks++)
                diff += sa[moec_mxfp8_sa_index(pr, kb, rcap)] != vs[k * (H / 32) + kb];
        }
        free(vq);
        free(vs);
        free(t);
        free(tx);
    }
    /* the weights */
    const IrNode *ws[2] = {w1, w2};
    for (int k = 0; k < 2; k++) {
        /* the param's MXFP8 copy (plan.h PlanFp8Copy with mx, written by gpu_fill_copies from the values the CPU
         * has too: decision 55): the forward reads its 1x32 codes q and scales s, the backward qt and st */
        int64_t N = ws[k]->shape[1], K = ws[k]->shape[2];
        int cb = -1;
        for (int b = 0; b < plan->nbufs; b++)
            if (plan->bufs[b].kind == PLAN_BUF_COPY && plan->bufs[b].node == ws[k]->id)
                cb = b;
        PlanFp8Copy fc;
        if (cb < 0 || plan->bufs[cb].storage != PLAN_E4M3 || !plan_fp8b_copy_layout(plan->graph, ws[k], &fc) || !fc.mx)
            die("%s: %s has no MXFP8 copy in the plan", n->name, ws[k]->name);
        unsigned char *copy = malloc((size_t)fc.bytes);
        d2h(copy, dptr[cb], (size_t)fc.bytes);
        const unsigned char *wq = copy + (fwd ? fc.q : fc.qt), *wsc = copy + (fwd ? fc.s : fc.st);
        const float *wv = cpu_plan_data(cpu, ws[k]);
        uint8_t *vq = malloc((size_t)(N * K)), *vs = malloc((size_t)(N * K / 32));
        for (int64_t g = 0; g < E; g++) {
            mxfp8_quantize(wv + g * N * K, N, K, fwd ? MXFP8_ROWWISE : MXFP8_COLWISE, MXFP8_SCALE_TE, vq, vs);
            for (int64_t r = 0; r < N; r++)
                for (int64_t c = 0; c < K; c++) {
                    checks++;
                    if (fwd) {
                        diff += wq[(g * N + r) * K + c] != vq[r * K + c];
                        if (c % 32 == 0)
                            checks++, diff += wsc[moec_mxfp8_sb_index((int)g, (int)r, (int)(c / 32), (int)N, (int)K)] !=
                                              vs[r * (K / 32) + c / 32];
                    } else {
                        diff += wq[(g * K + c) * N + r] != vq[r * K + c];
                        if (r % 32 == 0)
                            checks++, diff += wsc[moec_mxfp8_sb_index((int)g, (int)c, (int)(r / 32), (int)K, (int)N)] !=
                                              vs[r / 32 * K + c];
                    }
                }
        }
        free(vq);
        free(vs);
        free(copy);
    }
    /* the forward's copy of h for the backward (decision 64): the tile quantiser on the GPU's bf16 h, so bit for bit
     * mxfp8_quantize of those values */
    if (fwd && ws_buf(plan, n, "h_e4m3") >= 0) {
        int64_t hb;
        unsigned short *h = ws_get(plan, n, "h_padded", dptr, &hb);
        unsigned char *hq = ws_get(plan, n, "h_e4m3", dptr, &hb), *hs = ws_get(plan, n, "h_scales", dptr, &hb);
        float *hv = malloc((size_t)(2 * F * 4));
        uint8_t *hvq = malloc((size_t)(2 * F)), *hvs = malloc((size_t)(2 * F / 32));
        for (int64_t pr = 0; pr < ofs[E]; pr++) {
            for (int64_t c = 0; c < 2 * F; c++)
                hv[c] = bf16_to_f32(h[pr * 2 * F + c]);
            mxfp8_quantize(hv, 1, 2 * F, MXFP8_ROWWISE, MXFP8_SCALE_TE, hvq, hvs);
            for (int64_t c = 0; c < 2 * F; c++, checks++)
                diff += hq[pr * 2 * F + c] != hvq[c];
            for (int64_t kb = 0; kb < 2 * F / 32; kb++, checks++)
                diff += hs[moec_mxfp8_sa_index(pr, (int)kb, rcap)] != hvs[kb];
        }
        free(h);
        free(hq);
        free(hs);
        free(hv);
        free(hvq);
        free(hvs);
    }
    printf("  %-5s %s: mxfp8 quantised operands (%s 1x32 codes and scales, its 32x1 bf16 copy, the weights %s%s): "
           "%lld of %lld differ from runtime/cpu/mxfp8.c\n", "", n->name, fwd ? "xs" : "dy",
           fwd ? "1x32 along K" : "32x1 along N (W^T)", fwd ? "; h's copy for the backward, of the GPU's bf16 h" : "",
           (long long)diff, (long long)checks);
    (void)R, (void)F;
    free(ofs);
    free(q);
    free(sa);
    free(cw);
    free(xcw);
    return diff;
}

/* The fp8-block fast forward's a = silu(gate) up probs quantised 1x128 along F, which the gate_up GEMM's fused
 * epilogue writes (decision 57: GemmFp8MGrouped's GLU), read back with the h and probs the GPU used and checked
 * against fp8b_quantize of a computed here from that bf16 h ((g (1 / (1 + expf(-g)))) u p: swiglu_a's order of
 * operations, decision 69) over every padded row of
 * the groups. The device computes exp with __expf (ex2.approx), so a code may differ by one E4M3 step where the
 * two exps straddle a rounding boundary (about 2^-22 of the codes: none expected at these sizes) and a block's
 * scale where its amax straddles 448 2^k; an indexing error (a gate row, a tile, a pass, the scale layout)
 * differs in most codes. Returns 1 (printed) if more than 1e-4 of the codes or blocks differ, or any code by
 * more than one step. */
static int fp8b_glu_check(const Plan *plan, const IrNode *n, const CUdeviceptr *dptr, long long *diffs,
                          long long *hcopy_diffs)
{
    const IrNode *w1 = n->src[1];
    int64_t E = w1->shape[0], F = w1->shape[1] / 2, bytes;
    /* the offsets: fast_offsets_c where the forward has no backward of its own and a combine reads y_padded */
    int *ofs = ws_get(plan, n, ws_buf(plan, n, "fast_offsets") >= 0 ? "fast_offsets" : "fast_offsets_c", dptr, &bytes);
    unsigned short *h = ws_get(plan, n, "h_padded", dptr, &bytes);
    float *pp = ws_get(plan, n, "probs_padded", dptr, &bytes);
    unsigned char *q = ws_get(plan, n, "a_e4m3", dptr, &bytes);
    int64_t rcap = bytes / F;
    unsigned char *sa = ws_get(plan, n, "a_scales", dptr, &bytes);
    int64_t rows = ofs[E], codes = 0, code_diff = 0, far = 0, blocks = 0, block_diff = 0;
    float *a = malloc((size_t)(F * 4));
    uint8_t *vq = malloc((size_t)F), *vs = malloc((size_t)(F / 128));
    for (int64_t pr = 0; pr < rows; pr++) {
        for (int64_t c = 0; c < F; c++) {
            float g = bf16_to_f32(h[pr * 2 * F + c]), u = bf16_to_f32(h[pr * 2 * F + F + c]);
            a[c] = g * (1.0f / (1.0f + expf(-g))) * u * pp[pr];
        }
        fp8b_quantize(a, 1, F, FP8B_ROWWISE, vq, vs);
        for (int64_t kb = 0; kb < F / 128; kb++) {
            blocks++;
            if (sa[moec_fp8_block_sa_index(pr, (int)kb, rcap)] != vs[kb]) {
                block_diff++;
                continue;
            }
            for (int64_t c = kb * 128; c < kb * 128 + 128; c++) {
                int x = q[pr * F + c], y = vq[c];
                codes++;
                if (x != y) {
                    code_diff++;
                    far += (x ^ y) & 0x80 || abs((x & 0x7f) - (y & 0x7f)) > 1;
                }
            }
        }
    }
    /* h's E4M3 copy for the backward (decision 64), where the forward keeps one: the tile quantiser on the GPU's
     * bf16 h, so bit for bit fp8b_quantize of those values (the device conversion is the encoder: e4m3_check.c) */
    long long hdiff = -1;
    if (ws_buf(plan, n, "h_e4m3") >= 0) {
        int64_t hb;
        unsigned char *hq = ws_get(plan, n, "h_e4m3", dptr, &hb), *hs = ws_get(plan, n, "h_scales", dptr, &hb);
        float *hv = malloc((size_t)(2 * F * 4));
        uint8_t *hvq = malloc((size_t)(2 * F)), *hvs = malloc((size_t)(2 * F / 128));
        hdiff = 0;
        for (int64_t pr = 0; pr < rows; pr++) {
            for (int64_t c = 0; c < 2 * F; c++)
                hv[c] = bf16_to_f32(h[pr * 2 * F + c]);
            fp8b_quantize(hv, 1, 2 * F, FP8B_ROWWISE, hvq, hvs);
            for (int64_t c = 0; c < 2 * F; c++)
                hdiff += hq[pr * 2 * F + c] != hvq[c];
            for (int64_t kb = 0; kb < 2 * F / 128; kb++)
                hdiff += hs[moec_fp8_block_sa_index(pr, (int)kb, rcap)] != hvs[kb];
        }
        printf("  %-5s %s: h's E4M3 copy for the backward against fp8b_quantize of the GPU's bf16 h: %lld of %lld codes "
               "and scales differ: %s\n", "", n->name, hdiff, (long long)(rows * (2 * F + 2 * F / 128)),
               hdiff ? "FAILED" : "ok");
        *hcopy_diffs += hdiff;
        free(hq);
        free(hs);
        free(hv);
        free(hvq);
        free(hvs);
    }
    int bad = far > 0 || code_diff * 10000 > codes || block_diff * 10000 > blocks || hdiff > 0;
    printf("  %-5s %s: a (the gate_up GEMM's fused SwiGLU epilogue) 1x128 along F from the GPU's h: %lld of %lld codes "
           "differ (%lld by more than one step), %lld of %lld block scales: %s\n", "", n->name, (long long)code_diff,
           (long long)codes, (long long)far, (long long)block_diff, (long long)blocks, bad ? "FAILED" : "ok");
    *diffs += code_diff + block_diff;
    free(a);
    free(vq);
    free(vs);
    free(ofs);
    free(h);
    free(pp);
    free(q);
    free(sa);
    return bad;
}

/* p is a router weight: the weight of a linear whose logits a topk_experts node routes by */
static int is_router(const IrGraph *g, const IrNode *p)
{
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *t = g->nodes[i];
        if (t->op == IR_OP_TOPK_EXPERTS && t->src[0]->op == IR_OP_LINEAR && t->src[0]->src[1] == p)
            return 1;
    }
    return 0;
}

/* grouped_mlp_bwd on the fast kernels: the normwise error of each part of [dxs | dprobs | dw_gate_up | dw_down] */
static void fast_parts(const IrNode *n, const float *want, const float *got)
{
    const IrNode *xs = n->src[1], *w1 = n->src[2];
    int64_t R = xs->shape[0], H = xs->shape[1], E = w1->shape[0], F = w1->shape[1] / 2;
    int64_t len[4] = {R * H, R, E * 2 * F * H, E * H * F}, off = 0;
    const char *name[4] = {"dxs", "dprobs", "dw_gate_up", "dw_down"};
    printf("  %-5s %s:", "", n->name);
    for (int p = 0; p < 4; p++) {
        double sd = 0, sw = 0;
        for (int64_t e = off; e < off + len[p]; e++) {
            double d = (double)got[e] - want[e];
            sd += d * d;
            sw += (double)want[e] * want[e];
        }
        printf(" %s %.3e%s", name[p], sw > 0 ? sqrt(sd / sw) : sqrt(sd), p < 3 ? "," : "\n");
        off += len[p];
    }
}

int main(int argc, char **argv)
{
    const char *model = NULL, *dir = NULL;
    int chain = 0, mxfp8 = 0, ep = 0;
    const char *disabled = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--chain") == 0)
            chain = 1;
        else if (strcmp(argv[i], "--precision") == 0 && i + 1 < argc)
            mxfp8 = strcmp(argv[++i], "mxfp8") == 0 ? 1 : -1;
        else if (strcmp(argv[i], "--ep") == 0 && i + 1 < argc)
            ep = atoi(argv[++i]);
        else if (strcmp(argv[i], "--disable-pass") == 0 && i + 1 < argc)
            disabled = argv[++i];
        else if (strcmp(argv[i], "--kernels") == 0 && i + 1 < argc)
            i++; /* the plan says which (its launches' "impl") */
        else if (!model)
            model = argv[i];
        else
            dir = argv[i];
    }
    if (!model || !dir) {
        fprintf(stderr, "usage: run_plan MODEL DIR [--precision P] [--ep N] [--disable-pass X] [--chain]\n");
        return 2;
    }
    char path[4096], perr[2048];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    char *pj = read_all(path);
    /* the plan's own graph: the typed reader checks it against the tables */
    Plan *plan = pj ? plan_from_json(pj, strlen(pj), path, NULL, perr, sizeof perr) : NULL;
    if (!plan)
        die("cannot read %s: %s", path, pj ? perr : "no such file");
    IrGraph *g = plan->graph;
    (void)model, (void)mxfp8, (void)ep, (void)disabled;
    snprintf(path, sizeof path, "%s/kernels.cubin", dir);
    char *cubin = NULL;
    size_t cubin_size = 0;
    {
        FILE *f = fopen(path, "rb");
        if (!f)
            die("cannot read %s", path);
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        cubin = malloc((size_t)n);
        cubin_size = (size_t)n;
        if (fread(cubin, 1, (size_t)n, f) != (size_t)n)
            die("cannot read %s", path);
        fclose(f);
    }

    cu_load();
    CUdevice dev;
    CUcontext cuctx;
    KModules mod; /* the image's units, one module each (kimage.h) */
    char devname[256];
        CU(cuDeviceGet(&dev, 0));
    CU(cuDeviceGetName(devname, sizeof devname, dev));
    CU(cuDevicePrimaryCtxRetain(&cuctx, dev));
    CU(cuCtxSetCurrent(cuctx));
    {
        char kerr[600];
        if (kimage_load(&mod, cubin, cubin_size, kerr, sizeof kerr) != CUDA_SUCCESS)
            die("%s: %s", path, kerr);
    }
    int sms = 0;
    CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));

    int nbufs = plan->nbufs;
    /* isolated, the table is laid out again at node level (plan_memory: a node's workspaces and sources live over
     * all its launches): the checks below read a node's workspaces after its last launch (mx_quant_check,
     * fp8b_glu_check), which the plan's launch-level lifetimes (docs/decisions.md 65) keep only to the last launch
     * naming each. --chain runs the plan's own layout, the one training uses */
    if (!chain)
        plan_memory(g, plan->bufs, plan->nbufs, 256, &plan->memory);
    char *base[3];
    CUdeviceptr dbase[3];
    size_t rbytes[3];
    for (int r = 0; r < 3; r++) {
        size_t bytes = (size_t)plan->memory.region_bytes[r] + 256;
        rbytes[r] = (bytes + 255) / 256 * 256;
        base[r] = aligned_alloc(256, rbytes[r]);
        memset(base[r], 0xFF, rbytes[r]);
        CU(cuMemAlloc(&dbase[r], rbytes[r]));
        CU(cuMemsetD8Async(dbase[r], 0xFF, rbytes[r], NULL)); /* NaN floats, -1 ints: what no kernel wrote shows */
    }
    char **ptr = calloc((size_t)nbufs, sizeof(char *));
    CUdeviceptr *dptr = calloc((size_t)nbufs, sizeof(CUdeviceptr));
    for (int b = 0; b < nbufs; b++) {
        const PlanBuf *o = &plan->bufs[b];
        int r = (int)o->region;
        ptr[b] = base[r] + (size_t)o->offset;
        dptr[b] = dbase[r] + (CUdeviceptr)o->offset;
        /* an elided node's buffer takes no memory (no kernel writes or reads it) */
        if (b < g->nnodes && o->bytes != (o->elided ? 0 : ir_numel(g->nodes[b]) * plan_storage_bytes[o->storage]))
            die("plan buffer %d is %lld bytes, node %s has %lld elements", b, (long long)o->bytes, g->nodes[b]->name,
                (long long)ir_numel(g->nodes[b]));
    }

    /* the same params and inputs for both (generated as check.c does, then uploaded) */
    CpuPlan cpu;
    cpu_plan_init(&cpu, g, CPU_F32);
    cpu_plan_round_bf16(&cpu, plan); /* rounded where the plan stores bf16, as the GPU */
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        int64_t numel = ir_numel(n);
        if (n->op == IR_OP_PARAM) {
            float *d = (float *)ptr[i];
            for (int64_t e = 0; e < numel; e++)
                d[e] = (float)(n->rank == 1 ? 1.0 + 0.1 * rng_normal() : 0.1 * rng_normal());
            cpu_plan_bind(&cpu, n, d);
            h2d(dptr[i], d, (size_t)numel * 4);
        } else if (n->op == IR_OP_INPUT) {
            int32_t *d = (int32_t *)ptr[i];
            int64_t range = 2;
            int masked = 0;
            for (int j = 0; j < g->nnodes; j++) {
                IrNode *u = g->nodes[j];
                if (u->op == IR_OP_EMBEDDING && u->src[0] == n)
                    range = u->src[1]->shape[0];
                if ((u->op == IR_OP_CROSS_ENTROPY || u->op == IR_OP_MASKED_LM_LOSS) && u->src[1] == n) {
                    range = u->src[0]->shape[u->src[0]->rank - 1];
                    masked |= u->op == IR_OP_MASKED_LM_LOSS;
                }
            }
            for (int64_t e = 0; e < numel; e++)
                d[e] = masked && rng_uniform() < 0.85 ? -100 : (int32_t)(rng_next() % (uint64_t)range);
            segment_tokens(g, n, d, numel);
            cpu_plan_bind(&cpu, n, d);
            h2d(dptr[i], d, (size_t)numel * 4);
        }
    }

    {
        char cerr[512];
        if (gpu_fill_copies(plan, &mod, dptr, NULL, cerr, sizeof cerr) < 0) {
            fprintf(stderr, "run_plan: %s\n", cerr);
            return 1;
        }
    }
    printf("# %s on %s: %s, %s\n", model, devname, ir_precision_name[g->train.precision],
           chain ? "chained, as in training" : "each node on the CPU's inputs");
    printf("# %-5s %-40s %-22s %-5s %12s %12s %s\n", "node", "name", "op", "kind", "norm_rel", "max_rel", "status");
    OpStat stat[IR_OP_COUNT];
    memset(stat, 0, sizeof stat);
    int bad = 0, nl = plan->nlaunches, li = 0, nlaunched = 0, ncompared = 0;
    double worst_fp = 0;
    const char *worst_fp_name = "-";
    char *host = NULL;
    size_t host_cap = 0;
    int fast_node = -1;
    long long mx_quant_diff = 0, glu_diff = 0, hcopy_diff = 0;
    int glu_nodes = 0;
    long long route_flips = 0, route_total = 0;
    /* decision 73: the GEMMs' gradient-norm squares, each param's at norm_at[param node] (count doubles) */
    CUdeviceptr *norm_at = calloc((size_t)g->nnodes + 1, sizeof *norm_at), dnorm = 0;
    int64_t *norm_count = calloc((size_t)g->nnodes + 1, sizeof *norm_count);
    int64_t norm_total = gpu_norm_counts(plan, sms, norm_count);
    int norm_checked = 0;
    double norm_worst = 0;
    if (norm_total) {
        CU(cuMemAlloc(&dnorm, (size_t)norm_total * sizeof(double)));
        int64_t o = 0;
        for (int i = 0; i < g->nnodes; i++)
            if (norm_count[i]) {
                norm_at[i] = dnorm + (CUdeviceptr)o * sizeof(double);
                o += norm_count[i];
            }
    }
    for (int i = 0; i < g->nnodes; i++) {
        IrNode *n = g->nodes[i];
        cu_what = n->name;
        if (is_collective(n->op)) {
            fake_collective(n, cpu.buf);
            h2d(dptr[i], cpu.buf[i], (size_t)ir_numel(n) * 4);
            for (; li < nl && plan->launches[li].node == i; li++)
                if (plan->launches[li].kernel >= 0)
                    die("%s: a collective with a kernel launch", n->name);
            continue;
        }
        cpu_plan_run_range(&cpu, i, i + 1);
        if (!chain)
            for (int s = 0; s < n->nsrc; s++) {
                const IrNode *x = n->src[s];
                /* an elided node has no memory: the fast kernels read through it, from its own source; a
                 * source the node's launches do not read (unread_srcs) may be dead by now, its bytes another
                 * live buffer's */
                if (x->op != IR_OP_INPUT && x->op != IR_OP_PARAM && !plan->bufs[x->id].elided &&
                    !(s < 64 && plan->bufs[i].unread_srcs >> s & 1))
                    put_node(plan, x->id, dptr[x->id], cpu_plan_data(&cpu, x), ir_numel(x));
            }
        for (; li < nl; li++) {
            const PlanLaunch *l = &plan->launches[li];
            if (l->node != i)
                break;
            if (l->kernel < 0)
                die("%s: a host-side collective where a kernel was expected", n->name);
            GpuArgs ga;
            char aerr[512];
            if (!gpu_args_build(l, dptr, norm_at, &ga, aerr, sizeof aerr))
                die("%s: %s", n->name, aerr);
            unsigned bx = (unsigned)l->block;
            unsigned shm = (unsigned)l->shared_bytes;
            CUfunction f;
            cu_what = plan->kernel_names[l->kernel];
            KF(&f, plan->kernel_names[l->kernel]);
            if (shm > 48 * 1024)
                CU(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)shm));
            CUresult gr;
            unsigned gx = gpu_launch_grid_f(l, f, sms, &gr);
            cu_check(gr, "cuOccupancyMaxActiveClusters");
            if (l->impl && strncmp(l->impl, "fast", 4) == 0)
                fast_node = i;
            cu_check(cudrv_launch(f, gx, bx, shm, NULL, ga.argp, l->cluster), "cuLaunchKernel");
            CU(cuCtxSynchronize());
            gpu_args_free(&ga);
            cu_what = n->name;
            nlaunched++;
        }
        if (n->op == IR_OP_INPUT || n->op == IR_OP_PARAM)
            continue;
        /* decision 73: the squares each GEMM of this node wrote against the dW it stored */
        for (int p = 0; p < g->nparams && norm_total; p++) {
            const IrNode *pn = g->params[p], *gr = g->grads[p];
            if (!norm_count[pn->id] || !gr || gr->op != IR_OP_VIEW || gr->src[0] != n)
                continue;
            int64_t cnt = norm_count[pn->id], ne = ir_numel(pn), off = ir_attr_i(gr, IR_ATTR_OFFSET);
            double *part = malloc((size_t)cnt * sizeof(double)), got = 0, want = 0;
            float *dwh = malloc((size_t)ne * 4);
            d2h(part, norm_at[pn->id], (size_t)cnt * sizeof(double));
            d2h(dwh, dptr[i] + (CUdeviceptr)off * 4, (size_t)ne * 4);
            for (int64_t e = 0; e < cnt; e++)
                got += part[e];
            for (int64_t e = 0; e < ne; e++)
                want += (double)dwh[e] * dwh[e];
            double rel = fabs(got - want) / (want > 0 ? want : 1);
            norm_worst = fmax(norm_worst, isnan(rel) ? INFINITY : rel);
            norm_checked++;
            int fail = !(rel <= 1e-5);
            bad += fail;
            printf("  %-5d %-40s gradient-norm squares from its GEMM: %.9g, of the stored dW %.9g: rel %.2e %s\n",
                   pn->id, pn->name, got, want, rel, fail ? "FAIL" : "ok");
            free(part);
            free(dwh);
        }
        if (!chain && fast_node == i && g->train.precision == IR_PREC_MXFP8 &&
            (n->op == IR_OP_GROUPED_MLP || n->op == IR_OP_GROUPED_MLP_BWD)) {
            int64_t d = mx_quant_check(plan, n, &cpu, dptr);
            mx_quant_diff += d;
            bad += d != 0;
        }
        if (!chain && fast_node == i && g->train.precision == IR_PREC_FP8_BLOCK && n->op == IR_OP_GROUPED_MLP) {
            bad += fp8b_glu_check(plan, n, dptr, &glu_diff, &hcopy_diff);
            glu_nodes++;
        }
        if (plan->bufs[i].elided) {
            /* the fast kernels read through this node: its buffer is never written */
            printf("  %-5d %-40s %-22s elided (read through by the fast kernels)\n", i, n->name, ir_node_op_name(n));
            continue;
        }
        int is_grad = 0, router_grad = 0;
        for (int p = 0; p < g->nparams; p++)
            if (g->grads[p] == n) {
                is_grad = 1;
                router_grad = is_router(g, g->params[p]);
            }
        if (chain && n->op == IR_OP_TOPK_EXPERTS) {
            /* chained, routing choices are not compared as results: count those that differ */
            int64_t numel = ir_numel(n);
            int32_t *gi = malloc((size_t)numel * 4);
            d2h(gi, dptr[i], (size_t)numel * 4);
            const int32_t *ci = cpu_plan_data(&cpu, n);
            for (int64_t e = 0; e < numel; e++)
                route_flips += gi[e] != ci[e];
            route_total += numel;
            free(gi);
            printf("  %-5d %-40s %-22s routing choices: %lld of %lld differ from the CPU's\n", i, n->name,
                   ir_node_op_name(n), (long long)route_flips, (long long)route_total);
        }
        if (chain && !is_grad && n != g->loss)
            continue;
        /* compare the node's result */
        int64_t numel = ir_numel(n);
        size_t nb = (size_t)numel * 4;
        if (nb > host_cap) {
            free(host);
            host_cap = nb * 2;
            host = malloc(host_cap);
        }
        get_node(plan, i, (float *)host, dptr[i], numel);
        const void *want = cpu_plan_data(&cpu, n);
        const void *got = host;
        int exact = (n->dtype == IR_I32 || exact_op(n->op)) && !chain && fast_node != i;
        double norm_rel = 0, max_rel = 0;
        int64_t at = -1, ndiff = 0;
        if (n->dtype == IR_I32) {
            for (int64_t e = 0; e < numel; e++)
                if (((const int32_t *)want)[e] != ((const int32_t *)got)[e]) {
                    ndiff++;
                    if (at < 0)
                        at = e;
                }
        } else {
            const float *w = want, *o = got;
            double scale = 0, sd = 0, sw = 0;
            for (int64_t e = 0; e < numel; e++)
                scale = fmax(scale, fabs(w[e]));
            for (int64_t e = 0; e < numel; e++) {
                double d = isnan(o[e]) != isnan(w[e]) ? INFINITY : isnan(o[e]) ? 0 : fabs((double)o[e] - w[e]);
                int bits = memcmp(&o[e], &w[e], 4) != 0 && !(isnan(o[e]) && isnan(w[e]));
                if (bits) {
                    ndiff++;
                    if (exact && at < 0)
                        at = e;
                }
                sd += d * d;
                if (!isnan(w[e]))
                    sw += (double)w[e] * w[e];
                double err = d / (scale > 0 ? scale : 1);
                if (err > max_rel) {
                    max_rel = err;
                    if (!exact)
                        at = e;
                }
            }
            norm_rel = sw > 0 ? sqrt(sd) / sqrt(sw) : sqrt(sd);
        }
        /* the fast (bf16 tensor-core) kernels: bf16 operands and intermediates, docs/kernels-sm90.md */
        /* chained through a fast plan, every later node inherits the bf16 error of the fast kernels */
        int fast_chain = chain && plan->source.kernels == PLAN_KERNELS_FAST;
        /* a node the plan stores in bf16 (docs/decisions.md 40) on equal inputs: both sides round the same fp32
         * value, but an fp32 result one ulp apart (another summation order) can round to neighbouring bf16
         * values, 2^-8 relative: the bf16 bound (exact ops stay exact: their fp32 values agree bit for bit) */
        int bf16_node = plan->bufs[i].storage == PLAN_BF16;
        /* MXFP8 on the fast kernels: fp8-block's bounds (MX_TOL) */
        int fp8b = g->train.precision == IR_PREC_FP8_BLOCK || (g->train.precision == IR_PREC_MXFP8 &&
                                                               plan->source.kernels == PLAN_KERNELS_FAST);
        /* the combine reads the fp8-block expert MLP's output rows through (decision 22's read-through), so it
         * carries their error: 1.4e-2 and 1.6e-2 measured on the H200, over the bf16 bound */
        int fp8b_node = fast_node == i && fp8b &&
                        (n->op == IR_OP_GROUPED_MLP || n->op == IR_OP_GROUPED_MLP_BWD || n->op == IR_OP_COMBINE);
        double tol = fast_chain ? (fp8b ? FP8B_CHAIN_TOL : FAST_CHAIN_TOL)
                     : fp8b_node ? FP8B_TOL
                     : fast_node == i || bf16_node ? FAST_TOL
                     : chain ? 1e-3
                             : 1e-5;
        if (fast_chain && route_flips > 0)
            tol = fp8b ? (router_grad ? FP8B_ROUTER_CHAIN_TOL : FP8B_CHAIN_FLIP_TOL)
                       : router_grad ? FAST_ROUTER_CHAIN_TOL : FAST_CHAIN_FLIP_TOL;
        if (fast_node == i && n->op == IR_OP_GROUPED_MLP_BWD)
            fast_parts(n, (const float *)want, (const float *)got);
        int fail = exact || n->dtype == IR_I32 ? ndiff > 0 : !(norm_rel < tol);
        ncompared++;
        OpStat *st = &stat[n->op];
        st->count++;
        st->bad += fail;
        if (n->dtype != IR_I32) {
            st->worst_norm = fmax(st->worst_norm, norm_rel);
            st->worst_max = fmax(st->worst_max, max_rel);
            if (!exact && norm_rel >= worst_fp) {
                worst_fp = norm_rel;
                worst_fp_name = n->name;
            }
        }
        {
            char kind[8];
            snprintf(kind, sizeof kind, "%s", n->dtype == IR_I32 ? "i32" : exact ? "exact"
                                              : plan->bufs[i].storage == PLAN_BF16 ? "bf16" : "fp32");
            printf("  %-5d %-40s %-22s %-5s %12.3e %12.3e %s", i, n->name, ir_node_op_name(n), kind, norm_rel, max_rel,
                   fail ? "FAIL" : "ok");
            if (exact || n->dtype == IR_I32)
                printf(" (%lld of %lld differ)", (long long)ndiff, (long long)numel);
            if (fast_chain && route_flips > 0)
                printf(" (%s after %lld differing routing choices: bound %.2g)", router_grad ? "a router's gradient" : "chained",
                       route_flips, tol);
            printf("\n");
        }
        if (fail) {
            bad++;
            if (at < 0)
                at = 0;
            if (n->dtype == IR_I32)
                fprintf(stderr, "MISMATCH %s (%s): element %lld: gpu %d, cpu %d\n", n->name, ir_node_op_name(n),
                        (long long)at, ((const int32_t *)got)[at], ((const int32_t *)want)[at]);
            else
                fprintf(stderr, "MISMATCH %s (%s): element %lld of %lld: gpu %.9g, cpu %.9g (normwise %.3g, max %.3g%s)\n",
                        n->name, ir_node_op_name(n), (long long)at, (long long)numel, ((const float *)got)[at],
                        ((const float *)want)[at], norm_rel, max_rel, exact ? ", must be exact" : "");
        }
    }
    printf("%s: %d launches on %s (%s), %d nodes compared\n", model, nlaunched, devname,
           chain ? "chained, as on the GPU" : "each node on the CPU's inputs", ncompared);
    for (int op = 0; op < IR_OP_COUNT; op++)
        if (stat[op].count)
            printf("  %-22s %4d nodes, %d failed, worst normwise %.2e, max %.2e%s\n", ir_op_name((IrOp)op),
                   stat[op].count, stat[op].bad, stat[op].worst_norm, stat[op].worst_max,
                   exact_op((IrOp)op) && !chain ? " (exact)" : "");
    if (g->loss) {
        float l;
        d2h(&l, dptr[g->loss->id], 4);
        printf("  loss: gpu %.9g, cpu %.9g\n", l, cpu_plan_scalar(&cpu, g->loss));
    }

    /* AdamW: the kernel against the CPU backend's formula (runtime/cpu/backend.c), bit for bit; a --kernels fast
     * plan's fp32 AdamW (codegen/cuda_optim.c) within 1e-5 of each result against the magnitude of the terms it
     * sums (beta1 |m| + (1 - beta1) |g|, ..., |w| (1 - lr wd) + lr |update|): fp32 rounding of a handful of
     * operations, ~6e-8 each, amplified where m's terms cancel inside the update (an fp32 emulation of the
     * kernel on 200,000 such draws: worst 4.0e-6) */
    int adam_diff = 0, adam_fast = plan->source.kernels == PLAN_KERNELS_FAST;
    double adam_worst = 0;
    {
        enum { N = 4099 };
        float *w = malloc(sizeof(float) * N * 8), *m = w + N, *v = m + N, *gr = v + N;
        float *w2 = gr + N, *m2 = w2 + N, *v2 = m2 + N;
        for (int e = 0; e < N; e++) {
            w[e] = w2[e] = (float)rng_normal();
            m[e] = m2[e] = (float)(0.01 * rng_normal());
            v[e] = v2[e] = (float)(1e-4 * rng_uniform());
            gr[e] = (float)(0.1 * rng_normal());
        }
        const IrTrain *t = &g->train;
        double lr = 1e-3, wd = t->weight_decay, clip = 0.7, bc1 = 1 - pow(t->beta1, 3), bc2 = 1 - pow(t->beta2, 3);
        CUdeviceptr dw, dm, dv, dg, ds;
        double sc[7] = {lr, bc1, bc2, clip, 0, 0, 0};
        CU(cuMemAlloc(&ds, sizeof sc));
        h2d(ds, sc, sizeof sc);
        CU(cuMemAlloc(&dw, N * 4));
        CU(cuMemAlloc(&dm, N * 4));
        CU(cuMemAlloc(&dv, N * 4));
        CU(cuMemAlloc(&dg, N * 4));
        h2d(dw, w2, N * 4);
        h2d(dm, m2, N * 4);
        h2d(dv, v2, N * 4);
        h2d(dg, gr, N * 4);
        long long nn = N;
        void *pa[] = {&dw, &dm, &dv, &dg, &nn, &ds, &wd};
        CUfunction f;
        cu_what = "moec_adamw";
        KF(&f, "moec_adamw");
        CU(cuLaunchKernel(f, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, pa, NULL));
        CU(cuCtxSynchronize());
        d2h(w2, dw, N * 4);
        d2h(m2, dm, N * 4);
        d2h(v2, dv, N * 4);
        for (int e = 0; e < N; e++) {
            double gv = gr[e] * clip, m0 = m[e], v0 = v[e], w0 = w[e];
            m[e] = (float)(t->beta1 * m[e] + (1 - t->beta1) * gv);
            v[e] = (float)(t->beta2 * v[e] + (1 - t->beta2) * gv * gv);
            double upd = (m[e] / bc1) / (sqrt(v[e] / bc2) + t->eps);
            w[e] = (float)(w[e] * (1 - lr * wd) - lr * upd);
            if (adam_fast) {
                /* each against the magnitude of the terms it sums (m, v and w can cancel) */
                double em = fabs((double)m[e] - m2[e]) / (t->beta1 * fabs(m0) + (1 - t->beta1) * fabs(gv));
                double ev = fabs((double)v[e] - v2[e]) / (t->beta2 * v0 + (1 - t->beta2) * gv * gv + 1e-38);
                double ew = fabs((double)w[e] - w2[e]) / (fabs(w0) * (1 - lr * wd) + lr * fabs(upd));
                double worst = fmax(ew, fmax(em, ev));
                adam_worst = fmax(adam_worst, worst);
                adam_diff += !(worst <= 1e-5);
            } else {
                adam_diff += memcmp(&w[e], &w2[e], 4) != 0 || memcmp(&m[e], &m2[e], 4) != 0 || memcmp(&v[e], &v2[e], 4) != 0;
            }
        }
        if (adam_fast)
            printf("  adamw (fp32, --kernels fast): %d of %d elements beyond 1e-5 of the CPU backend's formula, worst "
                   "%.3g\n", adam_diff, N, adam_worst);
        else
            printf("  adamw: %d of %d elements differ from the CPU backend's formula (runtime/cpu/backend.c)\n", adam_diff,
                   N);
        bad += adam_diff != 0;
        cu.cuMemFree(dw);
        cu.cuMemFree(dm);
        cu.cuMemFree(dv);
        cu.cuMemFree(dg);
        cu.cuMemFree(ds);
        free(w);
    }
    /* fp8-block and MXFP8: each e4m3 copy's shape once: the AdamW that writes the copy against moec_adamw (w, m, v
     * bit for bit: the same lines, NVRTC's contractions included) and the copy against the CPU's quantiser
     * (fp8b_quantize's tiles, or mxfp8_quantize's 1x32 rows and 32x1 columns: decision 55) */
    int fp8_diff = 0, fp8_shapes = 0;
    for (int b = 0; b < plan->nbufs; b++) {
        const PlanBuf *pb = &plan->bufs[b];
        PlanFp8Copy fc;
        if (pb->kind != PLAN_BUF_COPY || pb->storage != PLAN_E4M3 || !plan_fp8b_copy_layout(g, g->nodes[pb->node], &fc))
            continue;
        int seen = 0;
        for (int o = 0; o < b && !seen; o++) {
            PlanFp8Copy oc;
            seen = plan->bufs[o].kind == PLAN_BUF_COPY && plan->bufs[o].storage == PLAN_E4M3 &&
                   plan_fp8b_copy_layout(g, g->nodes[plan->bufs[o].node], &oc) && oc.e == fc.e && oc.n == fc.n &&
                   oc.k == fc.k;
        }
        if (seen)
            continue;
        fp8_shapes++;
        long long n = fc.e * fc.n * fc.k;
        size_t nb = (size_t)n * 4;
        float *h = malloc(nb * 8);
        unsigned char *c1 = malloc((size_t)fc.bytes * 2), *c2 = c1 + fc.bytes;
        for (long long e = 0; e < n; e++) {
            h[e] = h[4 * n + e] = (float)(0.05 * rng_normal());
            h[n + e] = h[5 * n + e] = (float)(0.01 * rng_normal());
            h[2 * n + e] = h[6 * n + e] = (float)(1e-4 * rng_uniform());
            h[3 * n + e] = h[7 * n + e] = (float)(0.1 * rng_normal());
        }
        const IrTrain *t = &g->train;
        double sc[7] = {1e-3, 1 - pow(t->beta1, 3), 1 - pow(t->beta2, 3), 0.7, 0, 0, 0}, wd = t->weight_decay;
        CUdeviceptr d[8], ds, dc, dc2;
        for (int k = 0; k < 8; k++) {
            CU(cuMemAlloc(&d[k], nb));
            h2d(d[k], h + (size_t)k * (size_t)n, nb);
        }
        CU(cuMemAlloc(&ds, sizeof sc));
        h2d(ds, sc, sizeof sc);
        CU(cuMemAlloc(&dc, (size_t)fc.bytes));
        CU(cuMemAlloc(&dc2, (size_t)fc.bytes));
        char name[96], lname[96];
        plan_fp8b_kernel_name(&fc, 1, name, sizeof name);
        plan_fp8b_kernel_name(&fc, 0, lname, sizeof lname);
        CUfunction fa, f8, fl;
        cu_what = "moec_adamw";
        KF(&fa, "moec_adamw");
        cu_what = name;
        KF(&f8, name);
        cu_what = lname;
        KF(&fl, lname);
        long long tiles = fc.e * (fc.n / 128) * (fc.k / 128);
        void *pa[] = {&d[0], &d[1], &d[2], &d[3], &n, &ds, &wd};
        CU(cuLaunchKernel(fa, (unsigned)((n + 255) / 256 > 4096 ? 4096 : (n + 255) / 256), 1, 1, 256, 1, 1, 0, NULL, pa,
                          NULL));
        void *p8[] = {&d[4], &d[5], &d[6], &d[7], &n, &ds, &wd, &dc};
        CU(cuLaunchKernel(f8, (unsigned)(tiles < 1056 ? tiles : 1056), 1, 1, 512, 1, 1, 0, NULL, p8, NULL));
        void *pl[] = {&dc2, &d[4]};
        CU(cuLaunchKernel(fl, (unsigned)(tiles < 1056 ? tiles : 1056), 1, 1, 512, 1, 1, 0, NULL, pl, NULL));
        CU(cuCtxSynchronize());
        for (int k = 0; k < 8; k++)
            if (k != 3 && k != 7)
                d2h(h + (size_t)k * (size_t)n, d[k], nb);
        d2h(c1, dc, (size_t)fc.bytes);
        d2h(c2, dc2, (size_t)fc.bytes);
        int wmv = 0, codes = 0;
        for (int k = 0; k < 3; k++)
            wmv += memcmp(h + (size_t)k * (size_t)n, h + (size_t)(4 + k) * (size_t)n, nb) != 0;
        int same_load = memcmp(c1, c2, (size_t)fc.bytes) == 0;
        int64_t T = fc.n * fc.k;
        unsigned char *vq = malloc((size_t)T * 2 + 2 * (size_t)(T / 32) + 2), *vqt = vq + T;
        unsigned char *vs = vqt + T, *vst = vs + T / 32 + 1;
        float *wt = malloc((size_t)T * 4);
        for (int64_t gi = 0; gi < fc.e; gi++) {
            const float *wg = h + 4 * (size_t)n + (size_t)(gi * T);
            if (fc.mx) {
                /* MXFP8 (decision 55): W 1x32 along K, and W 32x1 along N stored as W^T */
                if (mxfp8_quantize(wg, fc.n, fc.k, MXFP8_ROWWISE, MXFP8_SCALE_TE, vq, vs) != 0 ||
                    mxfp8_quantize(wg, fc.n, fc.k, MXFP8_COLWISE, MXFP8_SCALE_TE, vqt, vst) != 0)
                    codes++;
                for (int64_t r = 0; r < fc.n; r++)
                    for (int64_t k = 0; k < fc.k; k++) {
                        codes += c1[fc.q + gi * T + r * fc.k + k] != vq[r * fc.k + k];
                        codes += c1[fc.qt + gi * T + k * fc.n + r] != vqt[r * fc.k + k];
                        if (k % 32 == 0)
                            codes += c1[fc.s + moec_mxfp8_sb_index((int)gi, (int)r, (int)(k / 32), (int)fc.n,
                                                                   (int)fc.k)] != vs[r * (fc.k / 32) + k / 32];
                        if (r % 32 == 0)
                            codes += c1[fc.st + moec_mxfp8_sb_index((int)gi, (int)k, (int)(r / 32), (int)fc.k,
                                                                    (int)fc.n)] != vst[r / 32 * fc.k + k];
                    }
                continue;
            }
            for (int64_t r = 0; r < fc.n; r++)
                for (int64_t k = 0; k < fc.k; k++)
                    wt[k * fc.n + r] = wg[r * fc.k + k];
            if (fp8b_quantize(wg, fc.n, fc.k, FP8B_TILE, vq, vs) != 0 ||
                fp8b_quantize(wt, fc.k, fc.n, FP8B_TILE, vqt, vst) != 0)
                codes++;
            codes += memcmp(c1 + fc.q + gi * T, vq, (size_t)T) != 0;
            codes += memcmp(c1 + fc.qt + gi * T, vqt, (size_t)T) != 0;
            for (int64_t nb2 = 0; nb2 < fc.n / 128; nb2++)
                for (int64_t kb = 0; kb < fc.k / 128; kb++) {
                    codes += c1[fc.s + (gi * (fc.n / 128) + nb2) * (fc.k / 128) + kb] != vs[nb2 * (fc.k / 128) + kb];
                    codes += c1[fc.st + (gi * (fc.k / 128) + kb) * (fc.n / 128) + nb2] != vst[kb * (fc.n / 128) + nb2];
                }
        }
        printf("  %s: w, m, v %s moec_adamw's; the e4m3 copy: %d of %lld experts' codes or scales differ from "
               "%s of the new W and W^T; %s %s's\n", name, wmv ? "DIFFER from" : "bit for bit as", codes ? 1 : 0,
               (long long)fc.e, fc.mx ? "mxfp8_quantize (1x32 rowwise, 32x1 colwise)" : "fp8b_quantize",
               same_load ? "the same bytes as" : "DIFFERENT bytes from", lname);
        fp8_diff += wmv + (codes != 0) + !same_load;
        free(vq);
        free(wt);
        free(h);
        free(c1);
        for (int k = 0; k < 8; k++)
            cu.cuMemFree(d[k]);
        cu.cuMemFree(ds);
        cu.cuMemFree(dc);
        cu.cuMemFree(dc2);
    }
    bad += fp8_diff != 0;
    if (fp8_shapes)
        printf("  8-bit weight copies (fp8-block or MXFP8): %d shapes, %d differences\n", fp8_shapes, fp8_diff);
    char mxs[96] = "";
    if (g->train.precision == IR_PREC_MXFP8 && plan->source.kernels == PLAN_KERNELS_FAST && !chain)
        snprintf(mxs, sizeof mxs, " mx_quant_diff=%lld", mx_quant_diff);
    if (glu_nodes)
        snprintf(mxs, sizeof mxs, " fp8b_glu_diff=%lld fp8b_hcopy_diff=%lld", glu_diff, hcopy_diff);
    char nms[96] = "";
    if (norm_checked)
        snprintf(nms, sizeof nms, " norm_fused=%d norm_fused_worst=%.2e", norm_checked, norm_worst);
    printf("SUMMARY nodes=%d launches=%d failed=%d worst_fp32_normwise=%.3e (%s) adamw_diff=%d%s%s%s %s\n", ncompared,
           nlaunched, bad, worst_fp, worst_fp_name, adam_diff, fp8_shapes ? (fp8_diff ? " fp8b_copy_diff=1" : " fp8b_copy_diff=0") : "",
           mxs, nms, bad ? "FAILED" : "all agree");
    if (dnorm)
        cu.cuMemFree(dnorm);
    free(norm_at);
    free(norm_count);
    cpu_plan_free(&cpu);
    for (int r = 0; r < 3; r++) {
        free(base[r]);
        cu.cuMemFree(dbase[r]);
    }
    free(ptr);
    free(dptr);
    free(host);
    free(cubin);
    plan_free(plan);
    free(pj);

    return bad ? 1 : 0;
}
