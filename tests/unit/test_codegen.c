/* test_codegen.c - unit tests of the CUDA code generator (codegen/), all on
 * the CPU:
 *   - codegen/mxfp8.cuh, the device MXFP8 quantizer pasted into every
 *     kernels.cu, compiled here as C: bit-exact with runtime/cpu/mxfp8.c
 *     (E4M3 encoding of 1M strided floats and every rounding boundary,
 *     decoding of all 256 codes, the scale rule, whole and padded blocks);
 *   - the emitter table covers every op of ops.def, and the test models
 *     (tests/codegen/ops.moe in bf16, mxfp8 and unfused, mixtral_tiny with
 *     ep 2) exercise every op that has a kernel or a host-side call;
 *   - the buffer plan of every shipped model: no two buffers whose
 *     lifetimes (from the graph, not from the planner) overlap share bytes,
 *     views alias their packed source, launches name real buffers;
 *   - identical input gives byte-identical source and plan;
 *   - NVRTC's log is printed with the generated lines around each error.
 * Run from the repository root. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../codegen/cuda.h"
#include "../../codegen/mxfp8.cuh"
#include "../../codegen/moe_fast_offsets.h"
#include "../../codegen/gemm_sm90_sched.h"
#include "../../runtime/gpu/nvrtc.h"
#include "../../runtime/gpu/kimage.h"
#include "../../runtime/gpu/gpu.h"
#include "../../runtime/gpu/plan_args.h"
#include "../../driver/build.h"
#include "../../plan/plan.h"
#include "../../driver/compile.h"
#include "../../util/util.h"
#include "../../runtime/cpu/cpu.h"
#include "../../runtime/cpu/mxfp8.h"
#include "../../util/bf16.h"
#include "../../plan/payload.h"
#include "check.h"


static uint32_t fbits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bitsf(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* same bits, or both NaN of the same sign */
static int same_float(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b) && signbit(a) == signbit(b);
    return fbits(a) == fbits(b);
}

/* ------------------------------------------------------------ mxfp8.cuh */

static void test_e4m3_encode(void)
{
    int bad = 0;
    long checked = 0;
    /* a stride prime to 2^32 visits every exponent and many mantissas */
    for (uint64_t i = 0; i < (1u << 20); i++) {
        uint32_t u = (uint32_t)(i * 4099u * 1031u + i);
        unsigned got = moec_e4m3_encode(bitsf(u));
        unsigned want = e4m3_from_float(bitsf(u));
        if (got != want && bad++ < 5)
            fprintf(stderr, "e4m3 of %08x (%g): device %02x, cpu %02x\n", u, bitsf(u), got, want);
        checked++;
    }
    /* every code's value, the midpoints to its neighbours and one ulp
     * either side of them, both signs: every rounding decision */
    for (int c = 0; c < 0x7E; c++) {
        float lo = e4m3_to_float((uint8_t)c), hi = e4m3_to_float((uint8_t)(c + 1));
        float pts[7] = {lo, (lo + hi) / 2, nextafterf((lo + hi) / 2, 0), nextafterf((lo + hi) / 2, 1000),
                        nextafterf(lo, 0), nextafterf(lo, 1000), hi};
        for (int k = 0; k < 7; k++)
            for (int s = 0; s < 2; s++) {
                float x = s ? -pts[k] : pts[k];
                unsigned got = moec_e4m3_encode(x), want = e4m3_from_float(x);
                if (got != want && bad++ < 5)
                    fprintf(stderr, "e4m3 of %g: device %02x, cpu %02x\n", x, got, want);
                checked++;
            }
    }
    float special[] = {0.0f, -0.0f, 448.0f, 449.0f, 464.0f, 465.0f, 1e30f, INFINITY, -INFINITY, NAN, -NAN,
                       1e-45f, -1e-45f, 1e-38f, 0.001953125f, 0.0009765625f, 0.00146484375f};
    for (int k = 0; k < (int)(sizeof special / sizeof special[0]); k++) {
        unsigned got = moec_e4m3_encode(special[k]), want = e4m3_from_float(special[k]);
        if (got != want && bad++ < 5)
            fprintf(stderr, "e4m3 of %g: device %02x, cpu %02x\n", special[k], got, want);
        checked++;
    }
    CHECK(bad == 0, "%d of %ld E4M3 encodings differ", bad, checked);
}

static void test_e4m3_decode_and_scale(void)
{
    int bad = 0;
    for (int c = 0; c < 256; c++)
        bad += !same_float(moec_e4m3_decode((unsigned)c), e4m3_to_float((uint8_t)c));
    CHECK(bad == 0, "%d of 256 E4M3 decodings differ", bad);
    bad = 0;
    long n = 0;
    for (uint64_t i = 0; i < (1u << 18); i++) {
        uint32_t u = (uint32_t)(i * 16411u) & 0x7FFFFFFFu; /* non-negative amax, every exponent */
        float a = bitsf(u);
        int got = moec_mx_scale_exp(a), want = mxfp8_scale_exponent(a, MXFP8_SCALE_TE);
        if (got != want && bad++ < 5)
            fprintf(stderr, "scale exponent of %g: device %d, cpu %d\n", a, got, want);
        n++;
    }
    float special[] = {0.0f, 448.0f, 449.0f, 447.99997f, 896.0f, 896.0001f, 1e-40f, 1e-45f, 3.4e38f, INFINITY, NAN};
    for (int k = 0; k < (int)(sizeof special / sizeof special[0]); k++) {
        int got = moec_mx_scale_exp(special[k]), want = mxfp8_scale_exponent(special[k], MXFP8_SCALE_TE);
        if (got != want && bad++ < 5)
            fprintf(stderr, "scale exponent of %g: device %d, cpu %d\n", special[k], got, want);
        n++;
    }
    CHECK(bad == 0, "%d of %ld scale exponents differ", bad, n);
}

static uint64_t rng = 7;
static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* a block of 32 with a random magnitude, some zeros, now and then an
 * infinity, a NaN or a subnormal */
static void random_block(float *x)
{
    int exp = (int)(rnd() % 80) - 60;
    for (int i = 0; i < 32; i++) {
        double u = (double)(rnd() >> 11) / 9007199254740992.0 * 2 - 1;
        x[i] = (float)ldexp(u, exp);
        uint64_t r = rnd() % 200;
        if (r == 0)
            x[i] = 0.0f;
        else if (r == 1)
            x[i] = rnd() & 1 ? INFINITY : -INFINITY;
        else if (r == 2)
            x[i] = NAN;
        else if (r == 3)
            x[i] = bitsf((uint32_t)(rnd() & 0x807FFFFFu));
    }
}

static void test_fake_quant_blocks(void)
{
    int bad = 0, nblocks = 20000;
    for (int b = 0; b < nblocks; b++) {
        float x[32], dev[32], cpu[32];
        random_block(x);
        int n = b % 3 == 0 ? 1 + (int)(rnd() % 32) : 32; /* a third: a group's last, zero-padded block */
        memcpy(cpu, x, sizeof x);
        for (int i = n; i < 32; i++)
            cpu[i] = 0.0f;
        mxfp8_fake_quant(cpu, 1, 32, MXFP8_ROWWISE, MXFP8_SCALE_TE);
        /* strided like a colwise block, in place like the fused kernels */
        float col[32 * 3];
        for (int i = 0; i < 32; i++)
            col[i * 3] = x[i];
        moec_mx_fq_block(col, col, 3, n);
        for (int i = 0; i < n; i++)
            dev[i] = col[i * 3];
        for (int i = 0; i < n; i++)
            if (!same_float(dev[i], cpu[i]) && bad++ < 5)
                fprintf(stderr, "block %d element %d (%g): device %g, cpu %g\n", b, i, x[i], dev[i], cpu[i]);
    }
    CHECK(bad == 0, "%d elements of %d fake-quantized blocks differ", bad, nblocks);
}

/* ------------------------------------------------------------ the graph side */

static IrGraph *compile_model(Compilation *c, const char *path, const char *precision, int64_t ep,
                              const char *disable)
{
    memset(c, 0, sizeof *c);
    if (!compilation_read(c, path, stderr))
        return NULL;
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    if (disable)
        ctx.disabled[ctx.ndisabled++] = disable;
    if (precision) {
        c->opts.has_precision = 1;
        c->opts.precision = strcmp(precision, "mxfp8") == 0       ? IR_PREC_MXFP8
                            : strcmp(precision, "fp8-block") == 0 ? IR_PREC_FP8_BLOCK
                                                                  : IR_PREC_BF16;
    }
    c->opts.ep = ep;
    if (compilation_run(c, path, c->text, c->len, stderr, &ctx) != 0)
        return NULL;
    return c->graph;
}

static void test_table(void)
{
    int missing = 0;
    for (int op = 0; op < IR_OP_COUNT; op++)
        if (!cuda_op_handling((IrOp)op) && missing++ < 5)
            fprintf(stderr, "no CUDA emitter for %s\n", ir_op_name((IrOp)op));
    CHECK(missing == 0, "%d ops without an emitter", missing);
    CHECK(cuda_op_handling(IR_OP_CUSTOM) == 4, "custom ops are refused");
    CHECK(cuda_op_handling(IR_OP_QUANTIZE_FP8B) == 4 && cuda_op_handling(IR_OP_QUANTIZE_FP8B_GROUPED) == 4,
          "fp8-block quantization is refused on the GPU (CPU only for now)");
    CHECK(cuda_op_handling(IR_OP_ALL_REDUCE) == 3 && cuda_op_handling(IR_OP_EP_DISPATCH) == 3 &&
              cuda_op_handling(IR_OP_EP_COMBINE) == 3 && cuda_op_handling(IR_OP_EP_COUNTS) == 3,
          "collectives are host-side calls");
    CHECK(cuda_op_handling(IR_OP_VIEW) == 2 && cuda_op_handling(IR_OP_PARAM) == 2, "views alias, leaves are bound");
}

/* The plan's tensor table and launch list, checked from the graph and the
 * launches (not from the planner's own bookkeeping): sizes, views, no two
 * live buffers sharing bytes, in launch positions (decision 65: a buffer is
 * needed from the first launch that names it to the last, a view naming its
 * base; a node's tensor also to its own node's last launch, after which the
 * runtime may read it; an output to the last launch; a topk's logits to the
 * topk's last launch, the GPU metrics; a view's `like` source read by none;
 * each unread_srcs bit against its node's launches), params
 * and their bf16 working copies disjoint, launches in node order naming
 * their own buffers, another node's workspace only where it was kept at
 * least until them, a copy only of a param; no launch reads an elided
 * buffer (one the fast kernels read through, which nothing writes). */
static void check_plan(const char *what, const Plan *p)
{
    const IrGraph *g = p->graph;
    int nb = p->nbufs, n = g->nnodes, bad = 0;
    int64_t *off = calloc((size_t)nb, sizeof(int64_t)), *bytes = calloc((size_t)nb, sizeof(int64_t));
    int *region = calloc((size_t)nb, sizeof(int)), *owner = calloc((size_t)nb, sizeof(int));
    int *root = calloc((size_t)nb, sizeof(int)), *first = calloc((size_t)nb, sizeof(int));
    int *last = calloc((size_t)nb, sizeof(int));
    for (int b = 0; b < nb; b++) {
        const PlanBuf *pb = &p->bufs[b];
        off[b] = pb->offset;
        bytes[b] = pb->bytes;
        region[b] = (int)pb->region;
        owner[b] = b < n ? b : pb->node;
        int al = pb->alias_of >= 0;
        root[b] = al ? pb->alias_of : b;
        PlanFp8Copy fc;
        if (pb->kind == PLAN_BUF_COPY &&
            (b < n || g->nodes[pb->node]->op != IR_OP_PARAM ||
             (pb->storage == PLAN_E4M3 ? !plan_fp8b_copy_layout(g, g->nodes[pb->node], &fc) || pb->bytes != fc.bytes
                                       : pb->storage != PLAN_BF16 || pb->bytes != ir_numel(g->nodes[pb->node]) * 2) ||
             pb->region != PLAN_REGION_PARAMS) &&
            bad++ < 5)
            fprintf(stderr, "%s: buffer %d (%s) is no bf16 or e4m3 copy of a param in the params region\n", what, b,
                    pb->name);
        /* an elided node's buffer takes no memory (no kernel writes it, none reads it) */
        if (b < n && bytes[b] != (pb->elided ? 0 : ir_numel(g->nodes[b]) * plan_storage_bytes[pb->storage]) &&
            bad++ < 5)
            fprintf(stderr, "%s: buffer %d has %lld bytes for %s\n", what, b, (long long)bytes[b], g->nodes[b]->name);
        /* bf16 storage (docs/decisions.md 40): only a float activation of a --kernels fast plan that is no
         * output, no view and no view's source */
        if (b < n && pb->storage == PLAN_BF16 &&
            (p->source.kernels != PLAN_KERNELS_FAST || g->nodes[b]->dtype == IR_I32 || g->nodes[b]->is_output ||
             al) && bad++ < 5)
            fprintf(stderr, "%s: %s is stored in bf16\n", what, g->nodes[b]->name);
        if (al && p->bufs[root[b]].storage == PLAN_BF16 && bad++ < 5)
            fprintf(stderr, "%s: view %s into a bf16 buffer\n", what, g->nodes[b]->name);
        if (al && g->nodes[b]->op != IR_OP_VIEW && bad++ < 5)
            fprintf(stderr, "%s: %s aliases without being a view\n", what, g->nodes[b]->name);
        if (al) {
            int64_t want = off[root[b]] + ir_attr_i(g->nodes[b], IR_ATTR_OFFSET) * 4;
            if (root[b] == g->nodes[b]->src[0]->id && off[b] != want && bad++ < 5)
                fprintf(stderr, "%s: view %s at %lld, not %lld\n", what, g->nodes[b]->name, (long long)off[b],
                        (long long)want);
        }
    }
    /* lifetimes from the launches: a root is needed from the first launch naming it (through views too) to
     * the last; nothing before that (nobody writes it), none when no launch names it */
    int nlaunch = p->nlaunches;
    for (int b = 0; b < nb; b++) {
        first[b] = INT32_MAX;
        last[b] = -1;
    }
    for (int l = 0; l < nlaunch; l++)
        for (int a = 0; a < p->launches[l].nargs; a++) {
            int b = p->launches[l].args[a];
            if (b < 0 || b >= nb)
                continue;
            if (first[root[b]] > l)
                first[root[b]] = l;
            if (last[root[b]] < l)
                last[root[b]] = l;
        }
    /* an edge that no launch of its node reads keeps nothing alive (PlanBuf.unread_srcs): its bit checked here
     * against the launches (the node has some and none names the source or the buffer it lies in), or a view's
     * `like` source (shape only); what the runtime reads between launches: a node's tensor right after its
     * node, an output after the step, a topk's logits right after it */
    int *stamp = calloc((size_t)nb + 1, sizeof(int));
    for (int i = 0, l = 0; i < n; i++) {
        const IrNode *x = g->nodes[i];
        int nl0 = l;
        for (; l < nlaunch && p->launches[l].node == i; l++)
            for (int a = 0; a < p->launches[l].nargs; a++)
                if (p->launches[l].args[a] >= 0 && p->launches[l].args[a] < nb)
                    stamp[root[p->launches[l].args[a]]] = i + 1;
        if (l > nl0 && stamp[root[i]] == i + 1 && last[root[i]] < l - 1)
            last[root[i]] = l - 1;
        if (x->is_output && last[root[i]] >= 0)
            last[root[i]] = nlaunch - 1;
        if (x->op == IR_OP_TOPK_EXPERTS && l > nl0 && stamp[root[x->src[0]->id]] == i + 1 &&
            last[root[x->src[0]->id]] < l - 1)
            last[root[x->src[0]->id]] = l - 1;
        for (int s = 0; s < x->nsrc; s++) {
            if (s < 64 && p->bufs[i].unread_srcs >> s & 1) {
                int ok = x->op == IR_OP_VIEW ? s > 0 : l > nl0 && stamp[root[x->src[s]->id]] != i + 1;
                if (!ok && bad++ < 5)
                    fprintf(stderr, "%s: node %d (%s) says it does not read source %d (%s), but %s\n", what, i,
                            x->name, s, x->src[s]->name, l == nl0 ? "launches nothing" : "a launch names it");
            }
        }
    }
    free(stamp);
    for (int a = 0; a < nb && bad < 5; a++) { /* params and copies: all live at once */
        if (region[a] != 0 || root[a] != a)
            continue;
        for (int b = a + 1; b < nb; b++)
            if (region[b] == 0 && root[b] == b && bytes[a] && bytes[b] && off[a] < off[b] + bytes[b] &&
                off[b] < off[a] + bytes[a] && bad++ < 5)
                fprintf(stderr, "%s: params region: buffers %d and %d share bytes\n", what, a, b);
    }
    for (int a = 0; a < nb && bad < 5; a++) {
        if (root[a] != a || region[a] != 2)
            continue;
        for (int b = a + 1; b < nb; b++) {
            if (root[b] != b || region[b] != 2 || first[a] > last[b] || first[b] > last[a])
                continue;
            if (off[a] < off[b] + bytes[b] && off[b] < off[a] + bytes[a] && bytes[a] && bytes[b] && bad++ < 5)
                fprintf(stderr, "%s: buffers %d and %d are live together (launches %d..%d and %d..%d) but share "
                        "bytes\n", what, a, b, first[a], last[a], first[b], last[b]);
        }
    }
    int nl = p->nlaunches, prev = -1;
    for (int l = 0; l < nl; l++) {
        const PlanLaunch *o = &p->launches[l];
        int node = o->node;
        if (node < prev && bad++ < 5)
            fprintf(stderr, "%s: launch %d out of node order\n", what, l);
        prev = node;
        for (int a = 0; a < o->nargs; a++) {
            int b = o->args[a];
            if (b == -1 && o->targs &&
                (o->targs[a].kind == PLAN_ARG_I32 || o->targs[a].kind == PLAN_ARG_I64 || o->targs[a].kind == PLAN_ARG_NORM))
                continue;
            if (b >= 0 && b < nb && p->bufs[b].elided && bad++ < 5)
                fprintf(stderr, "%s: launch %d names buffer %d (%s), which is elided\n", what, l, b, p->bufs[b].name);
            int other = b >= n && b < nb && owner[b] != node;
            if ((b < 0 || b >= nb ||
                 (other && !(p->bufs[b].kind == PLAN_BUF_COPY || p->bufs[b].until >= node))) && bad++ < 5)
                fprintf(stderr, "%s: launch %d names buffer %d\n", what, l, b);
        }
    }
    CHECK(bad == 0, "%s: the plan's buffers are consistent (%d buffers, %d launches)", what, nb, nl);
    free(off);
    free(bytes);
    free(region);
    free(owner);
    free(root);
    free(first);
    free(last);
}


/* plan_forward_memory: the forward launches' buffers laid out alone (--eval, embed and score on the GPU).
 * Every buffer a forward launch names is placed inside its region; two buffers needed together during the
 * forward pass (in forward launch positions: from the first forward launch naming it to the last, a node's tensor
 * to its node's last launch, the loss and other outputs to the last forward launch; decision 65) share no byte;
 * the params and inputs regions are the plan's; the activations smaller than the training layout's. */
static void check_forward(const char *what, const Plan *p)
{
    const IrGraph *g = p->graph;
    int nb = p->nbufs, n = g->nnodes, upto = g->loss->id + 1, bad = 0;
    int64_t *off = calloc((size_t)nb + 1, sizeof(int64_t));
    PlanMemory fm;
    int ok = plan_forward_memory(p, off, &fm);
    CHECK(ok, "%s: a forward-only layout", what);
    if (!ok) {
        free(off);
        return;
    }
    int *root = calloc((size_t)nb + 1, sizeof(int)), *first = calloc((size_t)nb + 1, sizeof(int));
    int *last = calloc((size_t)nb + 1, sizeof(int)), nfl = p->eval_launches;
    (void)n;
    for (int b = 0; b < nb; b++) {
        root[b] = p->bufs[b].alias_of >= 0 ? p->bufs[b].alias_of : b;
        first[b] = INT32_MAX;
        last[b] = -1;
    }
    for (int l = 0; l < nfl; l++)
        for (int a = 0; a < p->launches[l].nargs; a++) {
            int b = p->launches[l].args[a];
            if (b < 0)
                continue;
            if (b >= nb || off[b] < 0 || off[root[b]] < 0) {
                if (bad++ < 5)
                    fprintf(stderr, "%s: forward launch %d names buffer %d, not planned\n", what, l, b);
                continue;
            }
            int r = (int)p->bufs[b].region;
            if (off[b] + p->bufs[b].bytes > fm.region_bytes[r] && bad++ < 5)
                fprintf(stderr, "%s: buffer %d (%s) lies outside its region\n", what, b, p->bufs[b].name);
            if (first[root[b]] > l)
                first[root[b]] = l;
            if (last[root[b]] < l)
                last[root[b]] = l;
        }
    /* read by the runtime: a node's tensor right after its node (gpu_eval's metrics), the loss at the end */
    for (int l = 0; l < nfl; l++) {
        int i = p->launches[l].node;
        if ((l + 1 == nfl || p->launches[l + 1].node != i) && last[root[i]] >= 0 && last[root[i]] < l)
            last[root[i]] = l;
    }
    for (int i = 0; i < upto; i++)
        if (g->nodes[i]->is_output && last[root[i]] >= 0)
            last[root[i]] = nfl - 1;
    for (int a = 0; a < nb && bad < 5; a++) {
        if (root[a] != a || off[a] < 0 || p->bufs[a].region != PLAN_REGION_ACTIVATIONS || !p->bufs[a].bytes)
            continue;
        for (int b = a + 1; b < nb; b++) {
            if (root[b] != b || off[b] < 0 || p->bufs[b].region != PLAN_REGION_ACTIVATIONS || !p->bufs[b].bytes ||
                first[a] > last[b] || first[b] > last[a])
                continue;
            if (off[a] < off[b] + p->bufs[b].bytes && off[b] < off[a] + p->bufs[a].bytes && bad++ < 5)
                fprintf(stderr, "%s: forward buffers %d and %d are live together but share bytes\n", what, a, b);
        }
    }
    CHECK(bad == 0 && fm.region_bytes[PLAN_REGION_PARAMS] == p->memory.region_bytes[PLAN_REGION_PARAMS] &&
              fm.region_bytes[PLAN_REGION_INPUTS] == p->memory.region_bytes[PLAN_REGION_INPUTS] &&
              fm.region_bytes[PLAN_REGION_ACTIVATIONS] < p->memory.region_bytes[PLAN_REGION_ACTIVATIONS],
          "%s: the forward pass alone: activations %lld of the training layout's %lld bytes, %d launches", what,
          (long long)fm.region_bytes[PLAN_REGION_ACTIVATIONS],
          (long long)p->memory.region_bytes[PLAN_REGION_ACTIVATIONS], p->eval_launches);
    free(off);
    free(root);
    free(first);
    free(last);
}

static void test_models(void)
{
    static const struct {
        const char *path, *precision, *disable;
        int64_t ep;
    } cases[] = {
        {"tests/codegen/ops.moe", NULL, NULL, 0},
        {"tests/codegen/ops.moe", "mxfp8", NULL, 0},
        {"tests/codegen/ops.moe", NULL, "fuse-grouped-mlp", 0},
        {"models/mixtral_tiny.moe", NULL, NULL, 2},
        {"models/mixtral_tiny.moe", "mxfp8", NULL, 0},
        {"models/protein_tiny.moe", NULL, NULL, 0},
        {"models/dna_tiny.moe", NULL, NULL, 0},
        {"models/l0_sanity.moe", NULL, NULL, 0},
        {"models/mixtral_8x7b.moe", NULL, NULL, 0},
        {"models/protein_moe.moe", NULL, NULL, 0},
        {"models/dna_moe.moe", NULL, NULL, 0},
        {"models/variants/mixtral_tiny_gelu.moe", "mxfp8", NULL, 0},
        {"models/variants/mixtral_tiny_probe.moe", NULL, NULL, 0},
        {"models/variants/mixtral_tiny_ffn100.moe", NULL, NULL, 0},
    };
    int seen[IR_OP_COUNT] = {0};
    for (int k = 0; k < (int)(sizeof cases / sizeof cases[0]); k++) {
        char what[256];
        snprintf(what, sizeof what, "%s%s%s%s%s", cases[k].path, cases[k].precision ? " --precision " : "",
                 cases[k].precision ? cases[k].precision : "", cases[k].ep ? " --ep 2" : "",
                 cases[k].disable ? " unfused" : "");
        Compilation c;
        IrGraph *g = compile_model(&c, cases[k].path, cases[k].precision, cases[k].ep, cases[k].disable);
        CHECK(g != NULL, "%s compiles", what);
        if (!g) {
            compilation_free(&c);
            continue;
        }
        char perr[256];
        Plan *pl = plan_create(g, &c.arena, perr, sizeof perr);
        CHECK(pl != NULL, "%s: a plan (%s)", what, pl ? "" : perr);
        if (!pl) {
            compilation_free(&c);
            continue;
        }
        int ok = cuda_codegen(pl, NULL, NULL);
        CHECK(ok, "%s: cuda_codegen", what);
        if (!ok) {
            plan_free(pl);
            compilation_free(&c);
            continue;
        }
        for (int i = 0; i < g->nnodes; i++)
            seen[g->nodes[i]->op] = 1;
        check_plan(what, pl);
        check_forward(what, pl);
        CHECK(pl->nkernels > 3 && pl->nkernel_launches > 0 && strstr(pl->cuda_source, "moec_adamw"),
              "%s: %d kernels, %d launches", what, pl->nkernels, pl->nkernel_launches);
        char *src1 = xstrdup(pl->cuda_source), *json1 = plan_to_json(pl, 1);
        int nk1 = pl->nkernels, nl1 = pl->nkernel_launches;
        plan_clear_gpu(pl);
        ok = cuda_codegen(pl, NULL, NULL);
        char *json2 = plan_to_json(pl, 1);
        CHECK(ok && strcmp(src1, pl->cuda_source) == 0 && strcmp(json1, json2) == 0,
              "%s: a second run gives the same bytes", what);
        /* the document reads back to the same document */
        char err[1024];
        Plan *back = plan_from_json(json1, strlen(json1), what, NULL, err, sizeof err);
        char *json3 = back ? plan_to_json(back, 1) : NULL;
        CHECK(back && strcmp(json1, json3) == 0, "%s: the plan reads back to the same plan%s%s", what, back ? "" : ": ",
              back ? "" : err);
        free(json3);
        plan_free(back);
        free(src1);
        free(json1);
        free(json2);
        /* one kernel per launch without sharing: the same launches */
        CudaOptions no_share = {.no_dedup = 1};
        plan_clear_gpu(pl);
        CHECK(cuda_codegen(pl, &no_share, NULL) && pl->nkernel_launches == nl1 && pl->nkernels >= nk1,
              "%s: without kernel sharing, %d kernels for the same %d launches", what, pl->nkernels,
              pl->nkernel_launches);
        plan_free(pl);
        compilation_free(&c);
    }
    int missing = 0;
    for (int op = 0; op < IR_OP_COUNT; op++) {
        int h = cuda_op_handling((IrOp)op);
        if ((h == 1 || h == 3) && !seen[op] && missing++ < 10)
            fprintf(stderr, "no test model has a %s node\n", ir_op_name((IrOp)op));
    }
    CHECK(missing == 0, "the test models exercise every op with a kernel or a host call (%d missing)", missing);
}

/* Writes the checksum a plan document should have (as plan_io.c does: hash64 of the document with its 16
 * digits as zeros), so a test can change a field and still pass the checksum. */
static void reseal(char *doc)
{
    char *d = strstr(doc, "\"checksum\":");
    d = d ? strchr(d + 11, '"') : NULL;
    if (!d)
        return;
    d++;
    memset(d, '0', 16);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)hash64(doc, strlen(doc)));
    memcpy(d, hex, 16);
}

/* A plan document that is damaged, of another format version or from another moec is refused with a
 * message saying which; the reader never crashes on a truncated or garbled one. */
static void test_plan_refusals(void)
{
    Compilation c;
    IrGraph *g = compile_model(&c, "models/mixtral_tiny.moe", NULL, 0, NULL);
    char err[1024];
    Plan *p = g ? plan_create(g, &c.arena, err, sizeof err) : NULL;
    CHECK(p && cuda_codegen(p, NULL, NULL), "mixtral_tiny: a plan");
    if (!p) {
        compilation_free(&c);
        return;
    }
    char *doc = plan_to_json(p, 1);
    size_t n = strlen(doc);
    Plan *q = plan_from_json(doc, n, "plan", NULL, err, sizeof err);
    CHECK(q != NULL, "the plan reads: %s", q ? "" : err);
    plan_free(q);

    char *bad = xstrdup(doc);
    bad[n / 2] ^= 1;
    q = plan_from_json(bad, n, "plan", NULL, err, sizeof err);
    CHECK(!q && strstr(err, "the plan is damaged (checksum"), "one flipped bit: %s", err);
    plan_free(q);

    /* another moec */
    free(bad);
    bad = xstrdup(doc);
    char *v = strstr(bad, "\"moec_version\":\"");
    CHECK(v != NULL, "the document names its moec version");
    if (v) {
        v += strlen("\"moec_version\":\"");
        v[0] = v[0] == '9' ? '8' : '9';  /* 0.1.0 -> 9.1.0 */
        reseal(bad);
        q = plan_from_json(bad, n, "plan", NULL, err, sizeof err);
        CHECK(!q && strstr(err, "the plan was made by moec 9") && strstr(err, "compile the model again"),
              "a plan of another moec: %s", err);
        plan_free(q);
    }
    /* another format version */
    free(bad);
    bad = xstrdup(doc);
    char *ver = strstr(bad, "\"version\":3,");
    CHECK(ver != NULL, "the document says its format version");
    if (ver) {
        ver[10] = '7';
        reseal(bad);
        q = plan_from_json(bad, n, "plan", NULL, err, sizeof err);
        CHECK(!q && strstr(err, "plan format version 7") && strstr(err, "reads version 3"), "format 7: %s", err);
        plan_free(q);
    }
    /* not a plan at all, and every truncation of one */
    q = plan_from_json("{\"format\":\"pt\"}", 16, "plan", NULL, err, sizeof err);
    CHECK(!q, "a foreign JSON document is refused: %s", err);
    char foreign[] = "{\"format\":\"pt\",\"checksum\":\"0000000000000000\"}";
    reseal(foreign);
    q = plan_from_json(foreign, strlen(foreign), "plan", NULL, err, sizeof err);
    CHECK(!q && strstr(err, "not a moec plan (format \"pt\")"), "a sealed foreign document: %s", err);
    int crashed_or_read = 0;
    for (size_t cut = 0; cut < n; cut += n / 97 + 1) {
        q = plan_from_json(doc, cut, "plan", NULL, err, sizeof err);
        crashed_or_read += q != NULL;
        plan_free(q);
    }
    CHECK(crashed_or_read == 0, "no truncation of a plan reads as a plan (%d did)", crashed_or_read);
    free(bad);
    free(doc);
    plan_free(p);
    compilation_free(&c);
}

static void test_log_context(void)
{
    const char *src = "line one\nline two\nline three\nline four\nline five\nline six\nline seven\nline eight\n";
    const char *log = "kernels.cu(5): error: identifier \"x\" is undefined\n  line five\n  ^\n\n"
                      "1 error detected in the compilation of \"kernels.cu\".\n";
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    nvrtc_print_log(f, log, src, "kernels.cu");
    fclose(f);
    CHECK(strstr(buf, "generated source around kernels.cu:5") && strstr(buf, "      2 | line two") &&
              strstr(buf, ">      5 | line five") && strstr(buf, "      8 | line eight") && !strstr(buf, "line one"),
          "the log is printed with lines 2 to 8 around the error at line 5:\n%s", buf);
    free(buf);
    char err[512];
    CHECK(!nvrtc_check_arch("sm90", err, sizeof err) && strstr(err, "expected sm_NN"), "a bad --arch: %s", err);
}

/* With NVRTC at hand (the CUDA toolkit): a compile error comes back with
 * its log and counts; a clean source compiles warning-free. */
/* decision 59: the head-dim-128 forward's and dq's schedule (MOEC_ATTN through CudaOptions.attn_schedule): the
 * default is the ping-pong (SCHED 2), each forced value reaches both kernels' template and no other kernel, and
 * (with NVRTC) every schedule compiles warning-free with no wgmma serialised by ptxas (its C7518 / C7520 info
 * lines say "serialized"); CudaOptions.attn_max_grid caps the attention launches' blocks */
static void test_attn_schedules(void)
{
    const struct {
        CudaAttnSchedule sched;
        const char *fwd, *dq;
    } cases[] = {
        {CUDA_ATTN_DEFAULT, "CAUSAL, 4, 0>(items, B, krow0, vrow0, o, lse2", "CAUSAL, 3, 0>(items, B, krow0, vrow0, out"},
        {CUDA_ATTN_WS, "CAUSAL, 4, 0>(items, B, krow0, vrow0, o, lse2", "CAUSAL, 3, 0>(items, B, krow0, vrow0, out"},
        {CUDA_ATTN_OVERLAP, "CAUSAL, 4, 1>(items, B, krow0, vrow0, o, lse2", "CAUSAL, 3, 1>(items, B, krow0, vrow0, out"},
        {CUDA_ATTN_PINGPONG, "CAUSAL, 4, 2>(items, B, krow0, vrow0, o, lse2", "CAUSAL, 3, 2>(items, B, krow0, vrow0, out"},
    };
    char err[1024];
    int nvrtc = nvrtc_load(err, sizeof err);
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        Compilation c;
        IrGraph *g = compile_model(&c, "tests/gpu/fast_attn128.moe", NULL, 0, NULL);
        Plan *p = g ? plan_create(g, &c.arena, err, sizeof err) : NULL;
        if (p)
            p->source.kernels = PLAN_KERNELS_FAST;
        CudaOptions opts = {0};
        opts.attn_schedule = cases[k].sched;
        opts.attn_max_grid = k == 0 ? 0 : 5;
        CHECK(p && cuda_codegen(p, &opts, NULL), "fast_attn128.moe: a fast plan with attention schedule %d",
              (int)cases[k].sched);
        if (!p) {
            compilation_free(&c);
            continue;
        }
        const char *src = p->cuda_source;
        const char *fwd = strstr(src, "moec::attn::fwd_ws<"), *dq = strstr(src, "moec::attn::bwd_dq_ws<");
        const char *dkv = strstr(src, "moec::attn::bwd_dkv_ws<");
        CHECK(fwd && strstr(fwd, cases[k].fwd) && strchr(fwd, ';') > strstr(fwd, cases[k].fwd),
              "schedule %d: the forward's template ends in %s", (int)cases[k].sched, cases[k].fwd);
        CHECK(dq && strstr(dq, cases[k].dq) && strchr(dq, ';') > strstr(dq, cases[k].dq),
              "schedule %d: dq's template ends in %s", (int)cases[k].sched, cases[k].dq);
        CHECK(dkv && strstr(dkv, "CAUSAL, 3>(items, B, krow0, vrow0, out") == strstr(dkv, "CAUSAL, 3"),
              "schedule %d: dk/dv unchanged", (int)cases[k].sched);
        /* the block cap: 2 x 8 x 3 = 48 items (dk/dv: 2 x 2 x 3 = 12), 5 blocks when capped */
        int flash = 0;
        for (int i = 0; i < p->nlaunches; i++) {
            const PlanLaunch *l = &p->launches[i];
            if (l->kernel >= 0 && strstr(p->kernel_names[l->kernel], "flash")) {
                flash++;
                int64_t want = k > 0 ? 5 : strstr(p->kernel_names[l->kernel], "dkv") ? 12 : 48;
                CHECK(l->grid == want, "schedule %d: %s over %lld blocks", (int)cases[k].sched,
                      p->kernel_names[l->kernel], (long long)l->grid);
            }
        }
        CHECK(flash == 3, "fast_attn128.moe: 3 flash launches (%d)", flash);
        if (nvrtc) {
            NvrtcOutput out;
            int ok = nvrtc_compile(src, "kernels.cu", "sm_90a", &out, err, sizeof err);
            CHECK(ok && out.nwarnings == 0, "schedule %d compiles warning-free: %s (%d warnings)", (int)cases[k].sched,
                  ok ? "" : err, out.nwarnings);
            CHECK(!(out.log && strstr(out.log, "serialized")), "schedule %d: ptxas serialised the wgmma:\n%s",
                  (int)cases[k].sched, out.log ? out.log : "");
            nvrtc_output_free(&out);
        }
        plan_free(p);
        compilation_free(&c);
    }
}

static void test_nvrtc(void)
{
    char err[1024];
    if (!nvrtc_load(err, sizeof err)) {
        printf("test_codegen: NVRTC not available, its checks skipped: %s\n", err);
        return;
    }
    NvrtcOutput out;
    int ok = nvrtc_compile("extern \"C\" __global__ void k(float *y) { y[threadIdx.x] = 1.0f; }\n", "kernels.cu",
                           NVRTC_DEFAULT_ARCH, &out, err, sizeof err);
    CHECK(ok && out.image_size > 0 && out.nwarnings == 0 && out.nerrors == 0, "a small kernel compiles: %s", ok ? "" : err);
    nvrtc_output_free(&out);
    ok = nvrtc_compile("extern \"C\" __global__ void k(float *y)\n{\n    y[0] = undefined_name;\n}\n", "kernels.cu",
                       "sm_90a", &out, err, sizeof err);
    CHECK(!ok && out.nerrors == 1 && out.log && strstr(out.log, "kernels.cu(3): error"),
          "a compile error is reported with its line: %s", err);
    nvrtc_output_free(&out);
}

/* decision 67: the image of several NVRTC units (kimage.h) packed and read back, a damaged one refused; a source
 * cut into units compiled unit by unit, every kernel in one of the cubins, the cache used on the second compile
 * and a change to one unit recompiling that unit alone; an error's line given in the whole source */
static void test_nvrtc_units(void)
{
    const char *u[3] = {"first", "the second unit", "3"};
    size_t us[3] = {5, 15, 1}, size = 0, got;
    unsigned char *img = kimage_pack((const void *const *)u, us, 3, &size);
    char err[1024];
    CHECK(img && kimage_count(img, size, err, sizeof err) == 3, "a packed image of 3 units reads back");
    int same = 1;
    for (int i = 0; i < 3 && img; i++) {
        const void *x = kimage_unit(img, size, i, &got);
        same &= got == us[i] && memcmp(x, u[i], us[i]) == 0 && ((const unsigned char *)x - img) % 256 == 0;
    }
    CHECK(same, "each unit comes back whole, at a multiple of 256 bytes");
    CHECK(kimage_count(img, size - 1, err, sizeof err) == -1 && strstr(err, "unit 2"), "a cut image is refused: %s", err);
    CHECK(kimage_count("plain cubin", 11, err, sizeof err) == 1, "a plain image is one unit");
    free(img);
    if (!nvrtc_load(err, sizeof err))
        return; /* test_nvrtc says why */
    char dir[] = "/tmp/moec_units_XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "a cache folder");
    const char *src0 = "// the library\n"
                       "__device__ float twice(float x) { return 2.0f * x; }\n"
                       "\n" PLAN_UNIT_MARK "0 ========\n"
                       "extern \"C\" __global__ void a(float *y) { y[0] = twice(y[0]); }\n"
                       "\n" PLAN_UNIT_MARK "1 ========\n"
                       "extern \"C\" __global__ void b(float *y) { y[1] = twice(y[1]); }\n"
                       "\n" PLAN_UNIT_MARK "0 ========\n"
                       "extern \"C\" __global__ void c(float *y) { y[2] = twice(y[2]); }\n";
    NvrtcOutput out;
    int ok = nvrtc_compile_units(src0, "kernels.cu", "sm_90a", dir, 2, &out, err, sizeof err);
    CHECK(ok && out.units == 2 && out.units_cached == 0 && out.threads == 2 && out.nwarnings == 0,
          "two units compiled on two threads: %s (%d units, %d cached)", ok ? "" : err, out.units, out.units_cached);
    CHECK(ok && kimage_count(out.image, out.image_size, err, sizeof err) == 2, "the image holds two cubins");
    int found = 0;
    for (int i = 0; ok && i < 2; i++) {
        size_t n;
        const char *c = kimage_unit(out.image, out.image_size, i, &n);
        /* the kernels' names are in the cubin's string table: a and c in unit 0, b in unit 1 */
        int has_a = memmem(c, n, "\0a\0", 3) != NULL, has_b = memmem(c, n, "\0b\0", 3) != NULL;
        int has_c = memmem(c, n, "\0c\0", 3) != NULL;
        found += i == 0 ? (has_a && has_c && !has_b) : (has_b && !has_a && !has_c);
    }
    CHECK(found == 2, "each kernel in its unit's cubin");
    nvrtc_output_free(&out);
    ok = nvrtc_compile_units(src0, "kernels.cu", "sm_90a", dir, 2, &out, err, sizeof err);
    CHECK(ok && out.units_cached == 2, "the second compile finds both units in the cache (%d)", out.units_cached);
    nvrtc_output_free(&out);
    /* unit 1 changed (a comment alone would not count): unit 0 still from the cache */
    char *src1 = xstrdup(src0);
    strstr(src1, "y[1] = twice")[2] = '3'; /* y[3] = twice(y[1]) */
    ok = nvrtc_compile_units(src1, "kernels.cu", "sm_90a", dir, 2, &out, err, sizeof err);
    CHECK(ok && out.units_cached == 1 && out.threads == 1, "a change to unit 1 recompiles it alone (%d cached)",
          out.units_cached);
    nvrtc_output_free(&out);
    free(src1);
    /* an error in unit 1: the line of the whole source (line 7), the unit named */
    const char *bad = "__device__ float twice(float x) { return 2.0f * x; }\n"
                      PLAN_UNIT_MARK "0 ========\n"
                      "extern \"C\" __global__ void a(float *y) { y[0] = twice(y[0]); }\n"
                      PLAN_UNIT_MARK "1 ========\n"
                      "extern \"C\" __global__ void b(float *y)\n"
                      "{\n"
                      "    y[1] = undefined_name;\n"
                      "}\n";
    ok = nvrtc_compile_units(bad, "kernels.cu", "sm_90a", NULL, 2, &out, err, sizeof err);
    CHECK(!ok && out.log && strstr(out.log, "kernels.cu(7): error") && strstr(err, "unit 1 of 2"),
          "an error in a unit is reported at its line in kernels.cu: %s | %s", err, out.log ? out.log : "");
    nvrtc_output_free(&out);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "the cache folder removed");
}

/* the kernels' image travels in the payload as base64: every length's
 * padding, every byte value, and malformed text refused */
static void test_base64(void)
{
    unsigned char data[300];
    for (int i = 0; i < 300; i++)
        data[i] = (unsigned char)(i * 37 + 11);
    int bad = 0;
    for (size_t n = 0; n <= 300; n++) {
        char *e = payload_base64_encode(data, n);
        size_t m = 0;
        unsigned char *d = e ? payload_base64_decode(e, &m) : NULL;
        bad += !e || strlen(e) != (n + 2) / 3 * 4 || !d || m != n || memcmp(d, data, n) != 0;
        free(e);
        free(d);
    }
    CHECK(bad == 0, "%d lengths do not round-trip", bad);
    char *e = payload_base64_encode("moec", 4);
    CHECK(strcmp(e, "bW9lYw==") == 0, "base64(moec) = %s", e);
    free(e);
    size_t m;
    CHECK(payload_base64_decode("bW9l*w==", &m) == NULL, "a bad character is refused");
    CHECK(payload_base64_decode("bW9", &m) == NULL, "a truncated text is refused");
    CHECK(payload_base64_decode("b=9lYw==", &m) == NULL, "padding in the middle is refused");
}

/* --kernels fast: the padded offsets (the device code's own C), the qualification rule, a fast plan
 * (typed launch arguments, "impl", "kernels") written and read back */
/* whether a launch has a tensor-map argument (a GEMM's: the other fast launches' typed arguments are only the
 * integers that scale with the batch, docs/decisions.md 62) */
static int launch_has_tmap(const PlanLaunch *l)
{
    for (int a = 0; l->targs && a < l->nargs; a++)
        if (l->targs[a].kind == PLAN_ARG_TMAP || l->targs[a].kind == PLAN_ARG_TMAP_U8 ||
            l->targs[a].kind == PLAN_ARG_TMAP_F32)
            return 1;
    return 0;
}

/* a launch's int argument (the GEMMs' rows_cap), or NULL */
static const PlanArg *launch_i32(const PlanLaunch *l)
{
    for (int a = 0; l->targs && a < l->nargs; a++)
        if (l->targs[a].kind == PLAN_ARG_I32)
            return &l->targs[a];
    return NULL;
}

/* whether the activation quantisers of p (kernels named with one of the tags) take their scale stride rcap, a
 * run-time argument, equal to rows_cap, and at least one is there */
static int quant_rcap_ok(const Plan *p, const char *const *tags, int ntags, long long rows_cap)
{
    int seen = 0, ok = 1;
    for (int i = 0; i < p->nlaunches; i++) {
        const PlanLaunch *l = &p->launches[i];
        const char *kn = p->kernel_names[l->kernel];
        int q = 0;
        for (int t = 0; t < ntags; t++)
            q |= strstr(kn, tags[t]) != NULL;
        if (!q)
            continue;
        seen++;
        int n64 = 0;
        for (int a = 0; l->targs && a < l->nargs; a++)
            if (l->targs[a].kind == PLAN_ARG_I64) {
                n64++;
                ok &= l->targs[a].value == rows_cap;
            }
        ok &= n64 == 1;
    }
    return seen && ok && strstr(p->cuda_source, "(q, sa, rcap, ") != NULL;
}

static void test_fast_mlp(void)
{
    /* ragged groups, an empty one, padding rows past start[E] */
    int splits[5] = {1, 0, 128, 129, 5}, padded[6], start[6];
    CHECK(moec_fast_offsets(splits, 5, 300, padded, start) == 0, "offsets of splits adding up to 263 <= 300");
    const int want_p[6] = {0, 128, 128, 256, 512, 640}, want_s[6] = {0, 1, 1, 129, 258, 263};
    int ok = 1;
    for (int g = 0; g <= 5; g++)
        ok &= padded[g] == want_p[g] && start[g] == want_s[g];
    CHECK(ok, "padded offsets 0 128 128 256 512 640, starts 0 1 1 129 258 263");
    CHECK(padded[5] <= moec_fast_rows_cap(300, 5), "padded rows within R + 128 E");
    CHECK(moec_fast_offsets(splits, 5, 262, padded, start) == -1, "splits past R are refused");
    int negative[2] = {3, -1};
    CHECK(moec_fast_offsets(negative, 2, 10, padded, start) == -1, "a negative split is refused");
    /* random splits: every group starts at a multiple of 128 and holds its rows, the bound holds */
    for (int trial = 0; trial < 1000; trial++) {
        int E = 1 + (int)(rnd() % 64), sp[64];
        long long R = (long long)(rnd() % 5000), left = R;
        for (int g = 0; g < E; g++) {
            sp[g] = left > 0 ? (int)(rnd() % (uint64_t)(left + 1)) : 0;
            left -= sp[g];
        }
        int pd[65], st[65];
        int good = moec_fast_offsets(sp, E, R, pd, st) == 0 && pd[E] <= moec_fast_rows_cap(R, E);
        for (int g = 0; g < E && good; g++)
            good = pd[g] % 128 == 0 && pd[g + 1] - pd[g] >= sp[g] && pd[g + 1] - pd[g] < sp[g] + 128 &&
                   st[g + 1] - st[g] == sp[g];
        if (!good) {
            CHECK(0, "random splits (trial %d, E %d, R %lld)", trial, E, R);
            break;
        }
    }

    /* the rule, on the nodes of real plans */
    const struct {
        const char *path, *precision;
        int fast, skinny; /* grouped MLPs on the fast kernels; skinny launches: routers, a 33-token lm_head (K % 128 == 0) */
        CudaKgemmEpilogue kgemm; /* the weight-gradient GEMMs' epilogue (fast_mlp's dW slices are 16-byte aligned) */
        int tc, attn_fast, attn_ref; /* dense linear launches on the sm_90a GEMMs (a conversion + a GEMM per node);
                                        attention launches fast (2 forward + 3 backward per layer), reference */
        CudaMgemmSchedule mgemm; /* the M-grouped GEMMs' schedule (default: ping-pong, decision 49) */
    } cases[] = {/* attention: 1 forward launch (q, k, v bf16 as stored: no conversion) + 3 backward per layer */
                 {"tests/gpu/fast_mlp.moe", NULL, 1, 12, CUDA_KGEMM_DEFAULT, 48, 8, 0, CUDA_MGEMM_DEFAULT},
                 {"tests/gpu/fast_mlp.moe", NULL, 1, 12, CUDA_KGEMM_TMA, 48, 8, 0, CUDA_MGEMM_DEFAULT},
                 {"tests/gpu/fast_mlp.moe", NULL, 1, 12, CUDA_KGEMM_REGS, 48, 8, 0, CUDA_MGEMM_COOPERATIVE},
                 {"tests/gpu/fast_mlp.moe", NULL, 1, 12, CUDA_KGEMM_DEFAULT, 48, 8, 0, CUDA_MGEMM_PINGPONG},
                 {"tests/gpu/fast_mlp.moe", NULL, 1, 12, CUDA_KGEMM_DEFAULT, 48, 8, 0, CUDA_MGEMM_PINGPONG64},
                 {"tests/gpu/fast_mlp.moe", "mxfp8", 0, 12, CUDA_KGEMM_DEFAULT, 48, 8, 0, CUDA_MGEMM_DEFAULT},
                 /* head dim 16: the reference attention, with the reason; 64-wide projections: reference tiles */
                 {"models/mixtral_tiny.moe", NULL, 0, 0, CUDA_KGEMM_DEFAULT, 0, 0, 6, CUDA_MGEMM_DEFAULT},
                 /* x an input, dy's source read only through the elided dispatch */
                 {"bench/models/layer/layer_small.moe", NULL, 1, 3, CUDA_KGEMM_DEFAULT, 0, 0, 0, CUDA_MGEMM_DEFAULT}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        Compilation c;
        IrGraph *g = compile_model(&c, cases[k].path, cases[k].precision, 0, NULL);
        char err[1024];
        Plan *p = g ? plan_create(g, &c.arena, err, sizeof err) : NULL;
        if (p)
            p->source.kernels = PLAN_KERNELS_FAST;
        /* the cooperative M-grouped case takes the cooperative weight gradients too; the others the default
         * (ping-pong) */
        int kcoop = cases[k].mgemm == CUDA_MGEMM_COOPERATIVE;
        CudaOptions opts = {.kgemm_epilogue = cases[k].kgemm,
                            .mgemm_schedule = cases[k].mgemm,
                            .kgemm_schedule = kcoop ? CUDA_KSCHED_COOPERATIVE : CUDA_KSCHED_DEFAULT};
        CHECK(p && cuda_codegen(p, &opts, NULL), "%s: a fast plan", cases[k].path);
        if (!p) {
            compilation_free(&c);
            continue;
        }
        int nodes = 0, fast = 0, typed = 0, impl_ok = 1, skinny = 0, tmap_f32 = 0, tc = 0, attn_fast = 0, attn_ref = 0,
            membound = 0;
        for (int i = 0; i < p->graph->nnodes; i++) {
            const IrNode *n = p->graph->nodes[i];
            if (n->op != IR_OP_GROUPED_MLP && n->op != IR_OP_GROUPED_MLP_BWD)
                continue;
            char why[256];
            nodes++;
            fast += cuda_fast_mlp_ok(n, why, sizeof why);
        }
        for (int i = 0; i < p->nlaunches; i++) {
            const PlanLaunch *l = &p->launches[i];
            const IrNode *n = p->graph->nodes[l->node];
            int mlp = n->op == IR_OP_GROUPED_MLP || n->op == IR_OP_GROUPED_MLP_BWD;
            int lin = n->op == IR_OP_LINEAR || n->op == IR_OP_LINEAR_DX || n->op == IR_OP_LINEAR_DW;
            /* the expert MLP's typed launches (the dense linears' GEMMs are counted apart) */
            typed += mlp && launch_has_tmap(l);
            for (int a = 0; mlp && l->targs && a < l->nargs; a++)
                tmap_f32 += l->targs[a].kind == PLAN_ARG_TMAP_F32;
            if (n->op == IR_OP_SDPA || n->op == IR_OP_SDPA_BWD) {
                /* flash attention at head dims 64 and 128, else the reference kernel and why */
                if (l->impl && strncmp(l->impl, "fast: flash attention", 21) == 0)
                    attn_fast++;
                else if (l->impl && strncmp(l->impl, "reference: head dimension", 25) == 0)
                    attn_ref++;
                else
                    impl_ok = 0;
                continue;
            }
            if (n->op == IR_OP_RMSNORM_DW && l->impl) {
                /* the column sums in row chunks */
                if (strncmp(l->impl, "fast: the column sums", 21))
                    impl_ok = 0;
                continue;
            }
            if (lin && l->impl && strncmp(l->impl, "fast: bf16 sm_90a GEMM", 22) == 0) {
                /* an attention projection on the sm_90a GEMMs: the conversion, then the GEMM (typed) */
                tc++;
                continue;
            }
            if (l->impl && (n->op == IR_OP_ROPE || n->op == IR_OP_ROPE_DX || n->op == IR_OP_ROUTE_PLAN ||
                            n->op == IR_OP_EXPERT_COUNTS || n->op == IR_OP_RMSNORM || n->op == IR_OP_RMSNORM_DX ||
                            n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_MASKED_LM_LOSS ||
                            n->op == IR_OP_CROSS_ENTROPY_DX)) {
                /* the memory-bound kernels of decision 47 */
                membound++;
                if (strncmp(l->impl, "fast: ", 6))
                    impl_ok = 0;
                continue;
            }
            if (n->op == IR_OP_COMBINE && l->impl) {
                /* the combine reading the fast forward's padded rows */
                if (strncmp(l->impl, "fast: ", 6))
                    impl_ok = 0;
                continue;
            }
            if (lin && l->impl) {
                /* the router's skinny kernels: a fast plan, at most 32 outputs */
                skinny++;
                if (strncmp(l->impl, "fast: skinny", 12))
                    impl_ok = 0;
                continue;
            }
            if (mlp != (l->impl != NULL) ||
                (l->impl && strncmp(l->impl, cases[k].fast ? "fast: " : "reference: ", cases[k].fast ? 6 : 11)))
                impl_ok = 0;
        }
        CHECK(nodes > 0 && fast == (cases[k].fast ? nodes : 0), "%s%s%s: %d of %d grouped_mlp nodes qualify",
              cases[k].path, cases[k].precision ? " " : "", cases[k].precision ? cases[k].precision : "", fast,
              nodes);
        CHECK(impl_ok, "%s: every grouped_mlp launch says its implementation", cases[k].path);
        /* every case routes: route_plan's and expert_counts' many-block sort (2 launches each) at least */
        CHECK(membound >= 4, "%s: %d launches of the fast memory-bound kernels", cases[k].path, membound);
        /* a router (or a lm_head) with K % 128 == 0 and at most 48 outputs: linear, linear_dx, 2 x linear_dw each */
        CHECK(skinny == cases[k].skinny, "%s: %d skinny launches", cases[k].path, skinny);
        CHECK(!!cases[k].skinny == (strstr(p->cuda_source, "skinny_linear_dw_part<") != NULL),
              "%s: the fast dense code only when used", cases[k].path);
        /* forward: 2 GEMMs; backward: 2 M-grouped (no recomputation of h) + 2 K-grouped; per layer */
        CHECK(cases[k].fast ? typed == 6 * nodes / 2 : typed == 0, "%s: %d launches with typed arguments",
              cases[k].path, typed);
        /* the TMA-store epilogue: an fp32 tensor map over each of a backward's two dW slices, and its kernels */
        int tma = cases[k].fast && cases[k].kgemm != CUDA_KGEMM_REGS; /* the default: TMA stores */
        CHECK(tmap_f32 == (tma ? 2 * nodes / 2 : 0) &&
                  (strstr(p->cuda_source, ">::run(tma_dy, tma_x, tma_dw, out + ") != NULL) == tma &&
                  (strstr(p->cuda_source, ">::run(tma_dy, tma_x, out + ") != NULL) == (cases[k].fast && !tma),
              "%s (K-grouped epilogue option %d): %d fp32 tensor maps, the epilogue asked for", cases[k].path,
              (int)cases[k].kgemm, tmap_f32);
        check_plan(cases[k].path, p);
        check_forward(cases[k].path, p);
        int copies = 0, kept = 0, elided = 0, glu_ok = 1;
        for (int b = 0; b < p->nbufs; b++) {
            copies += p->bufs[b].kind == PLAN_BUF_COPY && p->graph->nodes[p->bufs[b].node]->rank == 3;
            if (p->bufs[b].kind == PLAN_BUF_COPY) {
                /* w_gate_up's copy gate/up-interleaved (the SwiGLU epilogue), w_down's plain */
                const IrNode *w = p->graph->nodes[p->bufs[b].node];
                int gate_up = w->rank == 3 && strstr(w->name, "gate_up") != NULL;
                glu_ok &= gate_up ? p->bufs[b].glu_f == w->shape[1] / 2 : p->bufs[b].glu_f == 0;
            }
            kept += p->bufs[b].kind == PLAN_BUF_WORKSPACE && p->bufs[b].until > p->bufs[b].node &&
                    p->graph->nodes[p->bufs[b].node]->op == IR_OP_GROUPED_MLP;
            elided += p->bufs[b].elided;
        }
        /* per layer: copies of w_gate_up and w_down; offsets, xs, probs and h kept for the backward, the
         * padded y for the combine; not materialised: xs = dispatch(x), dy = dispatch(dout) and y */
        CHECK(cases[k].fast ? copies == 2 * nodes / 2 && kept == 5 * nodes / 2 && elided == 3 * nodes / 2
                            : copies == 0 && kept == 0 && elided == 0,
              "%s: %d working copies, %d kept workspaces, %d elided buffers for %d grouped_mlp nodes", cases[k].path,
              copies, kept, elided, nodes);
        CHECK(glu_ok, "%s: the copies' layouts (gate_up interleaved for the SwiGLU epilogue)", cases[k].path);
        CHECK((cases[k].fast || cases[k].tc) == (strstr(p->cuda_source, "GemmMGrouped<") != NULL),
              "%s: the sm_90a device code only when used", cases[k].path);
        /* the expert MLP's M-grouped GEMMs: ping-pong with 128 x 128 tiles (PINGPONG 2, kernels named _pp, BLOCK_N
         * 128; gate_up's tma_b with 64-row boxes: its gate and up halves) unless asked for the 64-row ping-pong
         * (PINGPONG 1, _pp64, tma_a's box 64 rows) or the cooperative kernel; one schedule per plan */
        CudaMgemmSchedule sched = cases[k].mgemm == CUDA_MGEMM_DEFAULT ? CUDA_MGEMM_PINGPONG : cases[k].mgemm;
        int want = !cases[k].fast ? -1 : sched == CUDA_MGEMM_PINGPONG ? 2 : sched == CUDA_MGEMM_PINGPONG64 ? 1 : 0;
        int npp = 0, nbox = 0, nkpp = 0;
        for (int li = 0; li < p->nlaunches; li++) {
            const PlanLaunch *l = &p->launches[li];
            const char *kn = l->kernel >= 0 ? p->kernel_names[l->kernel] : "";
            size_t kl = strlen(kn);
            if (strstr(kn, "_fast_dw_")) { /* the weight gradients: K-grouped ping-pong, BLOCK_N 128 */
                nkpp += kl > 3 && strcmp(kn + kl - 3, "_pp") == 0 && strstr(kn, "_bn128_s6");
                continue;
            }
            int is_pp = kl > 3 && strcmp(kn + kl - 3, "_pp") == 0, is_pp64 = kl > 5 && strcmp(kn + kl - 5, "_pp64") == 0;
            npp += is_pp || is_pp64;
            if (is_pp64)
                nbox += l->targs && l->nargs > 0 && l->targs[0].box_rows == 64; /* tma_a */
            if (is_pp)
                nbox += l->targs && l->nargs > 1 && l->targs[1].box_rows == (strstr(kn, "_glu") || strstr(kn, "_tb") ? 64 : 128) &&
                        l->targs[0].box_rows == 128 && strstr(kn, "_bn128_s6");
        }
        char needle[3][64];
        for (int v = 0; v < 3; v++)
            snprintf(needle[v], sizeof needle[v], ", %d>::run(tma_a, tma_b, tma_d, d, offsets", v);
        CHECK((strstr(p->cuda_source, needle[0]) != NULL) == (want == 0) &&
                  (strstr(p->cuda_source, needle[1]) != NULL) == (want == 1) &&
                  (strstr(p->cuda_source, needle[2]) != NULL) == (want == 2) && npp == (want > 0 ? 4 * nodes / 2 : 0) &&
                  nbox == npp,
              "%s (schedule option %d): %d ping-pong launches (%d with their boxes) for %d grouped_mlp nodes",
              cases[k].path, (int)cases[k].mgemm, npp, nbox, nodes);
        CHECK(nkpp == (cases[k].fast && !kcoop ? 2 * nodes / 2 : 0) &&
                  (cases[k].fast && !kcoop) == (strstr(p->cuda_source, ", 1>::run(tma_dy, tma_x, tma_dw, out + ") != NULL ||
                                                strstr(p->cuda_source, ", 1>::run(tma_dy, tma_x, out + ") != NULL),
              "%s (K-grouped epilogue option %d, schedule option %d): %d ping-pong weight-gradient launches",
              cases[k].path, (int)cases[k].kgemm, (int)cases[k].mgemm, nkpp);
        CHECK(tc == cases[k].tc && attn_fast == cases[k].attn_fast && attn_ref == cases[k].attn_ref,
              "%s: %d dense linear launches on the sm_90a GEMMs, %d fast and %d reference attention launches",
              cases[k].path, tc, attn_fast, attn_ref);
        CHECK(!!cases[k].attn_fast == (strstr(p->cuda_source, "moec::attn::fwd<") != NULL),
              "%s: the fast attention code only when used", cases[k].path);
        for (int with_source = 0; with_source < 2; with_source++) {
            char *doc = plan_to_json(p, with_source);
            Plan *q = plan_from_json(doc, strlen(doc), "plan", NULL, err, sizeof err);
            CHECK(q != NULL, "%s: the fast plan reads back: %s", cases[k].path, q ? "" : err);
            if (q) {
                int same = q->nlaunches == p->nlaunches && q->source.kernels == PLAN_KERNELS_FAST &&
                           q->nbufs == p->nbufs;
                for (int b = 0; same && b < p->nbufs; b++)
                    same = q->bufs[b].kind == p->bufs[b].kind && q->bufs[b].until == p->bufs[b].until &&
                           q->bufs[b].unread_srcs == p->bufs[b].unread_srcs &&
                           q->bufs[b].elided == p->bufs[b].elided && q->bufs[b].glu_f == p->bufs[b].glu_f &&
                           q->bufs[b].offset == p->bufs[b].offset && q->bufs[b].region == p->bufs[b].region &&
                           q->bufs[b].storage == p->bufs[b].storage;
                for (int i = 0; same && i < p->nlaunches; i++) {
                    const PlanLaunch *a = &p->launches[i], *b = &q->launches[i];
                    same = a->grid == b->grid && a->shared_bytes == b->shared_bytes && a->nargs == b->nargs &&
                           !a->targs == !b->targs && !a->impl == !b->impl;
                    for (int j = 0; same && a->targs && j < a->nargs; j++)
                        same = memcmp(&a->targs[j], &b->targs[j], sizeof a->targs[j]) == 0 &&
                               a->args[j] == b->args[j];
                }
                CHECK(same, "%s: buffers (copies, kept workspaces), launches, typed arguments, impl and --kernels "
                      "survive the document (%s)",
                      cases[k].path, with_source ? "payload" : "plan.json");
                plan_free(q);
            }
            free(doc);
        }
        /* a plan whose fp32 tensor map would start off a 16-byte boundary is refused by the reader */
        for (int i = 0; tma && i < p->nlaunches; i++)
            for (int a = 0; p->launches[i].targs && a < p->launches[i].nargs; a++) {
                PlanArg *t = &p->launches[i].targs[a];
                if (t->kind != PLAN_ARG_TMAP_F32)
                    continue;
                t->offset += 1;
                char *doc = plan_to_json(p, 0);
                Plan *q = plan_from_json(doc, strlen(doc), "plan", NULL, err, sizeof err);
                CHECK(!q && strstr(err, "tensor map"), "%s: an fp32 tensor map 4 bytes off alignment is refused: %s",
                      cases[k].path, q ? "read" : err);
                plan_free(q);
                free(doc);
                t->offset -= 1;
                i = p->nlaunches;
                break;
            }
        plan_free(p);
        compilation_free(&c);
    }
}

/* PlanBuf.unread_srcs (decision 63) through plan.json and the payload: tests/gpu/fast_mlp_fp8.moe at fp8-block,
 * whose backward reads the codes its forward kept, not xs (its source 1), and whose gradient views name xs for
 * its shape only; read back bit for bit (the layout too), and refused with a message: an index past the node's
 * sources, one named twice, a fraction, the field on a workspace, a source a launch of the node does read. */
static void test_unread_srcs_io(void)
{
    Compilation c;
    IrGraph *g = compile_model(&c, "tests/gpu/fast_mlp_fp8.moe", "fp8-block", 0, NULL);
    char err[1024];
    Plan *p = g ? plan_create(g, &c.arena, err, sizeof err) : NULL;
    if (p)
        p->source.kernels = PLAN_KERNELS_FAST;
    CHECK(p && cuda_codegen(p, NULL, NULL), "fast_mlp_fp8 at fp8-block: a fast plan");
    if (!p || !p->bufs) {
        plan_free(p);
        compilation_free(&c);
        return;
    }
    g = p->graph;
    int bwd = -1, view = -1, reader = -1, ws = -1;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i]->op == IR_OP_GROUPED_MLP_BWD && bwd < 0)
            bwd = i;
        if (g->nodes[i]->op == IR_OP_VIEW && view < 0)
            view = i;
    }
    for (int b = g->nnodes; b < p->nbufs && ws < 0; b++)
        if (p->bufs[b].kind == PLAN_BUF_WORKSPACE)
            ws = b;
    /* a node whose first source its first launch names (nothing reads that edge "unread") */
    for (int l = 0; l < p->nlaunches && reader < 0; l++) {
        const IrNode *u = g->nodes[p->launches[l].node];
        for (int a = 0; a < p->launches[l].nargs && u->nsrc > 0 && u->op != IR_OP_VIEW; a++)
            if (p->launches[l].args[a] == u->src[0]->id && !(p->bufs[u->id].unread_srcs & 1))
                reader = u->id;
    }
    CHECK(bwd >= 0 && (p->bufs[bwd].unread_srcs >> 1 & 1) && view >= 0 && p->bufs[view].unread_srcs == 2 &&
              reader >= 0 && ws >= 0,
          "fast_mlp_fp8: the backward's xs and a view's like marked unread (%#llx, %#llx), a node reading its "
          "source 0 (%d), a workspace (%d)", bwd >= 0 ? (unsigned long long)p->bufs[bwd].unread_srcs : 0ull,
          view >= 0 ? (unsigned long long)p->bufs[view].unread_srcs : 0ull, reader, ws);
    if (bwd < 0 || view < 0 || reader < 0 || ws < 0) {
        plan_free(p);
        compilation_free(&c);
        return;
    }
    for (int with_source = 0; with_source < 2; with_source++) {
        char *doc = plan_to_json(p, with_source);
        Plan *q = plan_from_json(doc, strlen(doc), "plan", NULL, err, sizeof err);
        int same = q && q->nbufs == p->nbufs;
        for (int b = 0; same && b < p->nbufs; b++)
            same = q->bufs[b].unread_srcs == p->bufs[b].unread_srcs;
        CHECK(same, "fast_mlp_fp8: unread_srcs survive the %s: %s", with_source ? "payload" : "plan.json",
              q ? "" : err);
        if (q) {
            /* the payload leaves the lifetimes out: the reader's table laid out again gives the plan's layout */
            PlanBuf *t = malloc(sizeof *t * ((size_t)q->nbufs + 1));
            memcpy(t, q->bufs, sizeof *t * (size_t)q->nbufs);
            PlanMemory m;
            plan_memory_again(q, t, &m);
            int layout = m.region_bytes[PLAN_REGION_ACTIVATIONS] == p->memory.region_bytes[PLAN_REGION_ACTIVATIONS];
            for (int b = 0; layout && b < q->nbufs; b++)
                layout = t[b].offset == p->bufs[b].offset && t[b].last == p->bufs[b].last &&
                         t[b].lfirst == p->bufs[b].lfirst && t[b].llast == p->bufs[b].llast;
            /* plan.json says the launch-level lifetimes (live_launches); the payload leaves them out */
            for (int b = 0; layout && b < q->nbufs; b++)
                layout = with_source ? q->bufs[b].lfirst == -1 && q->bufs[b].llast == -1
                                     : q->bufs[b].lfirst == p->bufs[b].lfirst && q->bufs[b].llast == p->bufs[b].llast;
            CHECK(layout, "fast_mlp_fp8: the %s's table laid out again is the plan's layout",
                  with_source ? "payload" : "plan.json");
            free(t);
        }
        plan_free(q);
        free(doc);
    }
    /* malformed: each written by the writer (a valid checksum) or edited and resealed */
    struct {
        int buf;
        uint64_t bits;
        const char *edit, *to, *want, *what;
    } bad[] = {
        {bwd, (uint64_t)1 << g->nodes[bwd]->nsrc, NULL, NULL, "names source", "an index past the node's sources"},
        {view, 1, NULL, NULL, "names source 0", "a view's packed source"},
        {ws, 1, NULL, NULL, "only for a node's own tensor", "the field on a workspace"},
        {reader, 1, NULL, NULL, "reads source 0", "a source a launch of the node reads"},
        /* the backward's: its dy and xs read through or kept, the rest read through copies (decision 64) */
        {-1, 0, "\"unread_srcs\":\t[0, 1, ", "\"unread_srcs\":[0,1,1, ", "names source 1", "an index named twice"},
        {-1, 0, "\"unread_srcs\":\t[0, 1, ", "\"unread_srcs\":[0,1.5, ", "names source 1.5", "a fraction"},
        {-1, 0, "\"unread_srcs\":\t[0, 1, ", "\"unread_srcs\":\"1\",\"x\":[0, 1, ", "not an array", "a string"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        uint64_t keep = bad[k].buf >= 0 ? p->bufs[bad[k].buf].unread_srcs : 0;
        if (bad[k].buf >= 0)
            p->bufs[bad[k].buf].unread_srcs |= bad[k].bits;
        char *doc = plan_to_json(p, 0);
        if (bad[k].buf >= 0)
            p->bufs[bad[k].buf].unread_srcs = keep;
        if (bad[k].edit) {
            char *at = strstr(doc, bad[k].edit);
            CHECK(at != NULL, "plan.json has %s", bad[k].edit);
            if (!at) {
                free(doc);
                continue;
            }
            size_t n = strlen(doc), e = strlen(bad[k].edit), t = strlen(bad[k].to);
            char *d2 = malloc(n - e + t + 1);
            memcpy(d2, doc, (size_t)(at - doc));
            memcpy(d2 + (at - doc), bad[k].to, t);
            memcpy(d2 + (at - doc) + t, at + e, n - (size_t)(at - doc) - e + 1);
            free(doc);
            doc = d2;
            reseal(doc);
        }
        Plan *q = plan_from_json(doc, strlen(doc), "plan", NULL, err, sizeof err);
        CHECK(!q && strstr(err, bad[k].want) && strstr(err, "unread_srcs"), "%s is refused: %s", bad[k].what,
              q ? "read" : err);
        plan_free(q);
        free(doc);
    }
    plan_free(p);
    compilation_free(&c);
}

/* --precision fp8-block --kernels fast (cuda_moe_fast.c, decision 38): tests/gpu/fast_mlp_fp8.moe's expert MLPs
 * on the FP8 grouped GEMM and the quantisers of fp8_block_fast.cuh (their numerics: tests/codegen/fp8b_quant.test);
 * the weight gradients' FP8 K-grouped GEMM in the default schedule (cooperative: the ping-pong kernel of decision 56
 * measured slower) or forced ping-pong; the forward's SwiGLU in its default place (the separate tile quantiser,
 * decision 57 measured the epilogue slower) with the first, in the gate_up GEMM's epilogue (MOEC_FP8_SWIGLU=fused)
 * with the second; the tile passes over h merged (decision 69: the SwiGLU quantiser and h's copy one launch, dprobs
 * in the dSwiGLU quantiser's) or, with sep, the separate launches (MOEC_FP8_PASSES=separate) */
static void test_fast_mlp_fp8(int coop, int sep)
{
    Compilation c;
    IrGraph *g = compile_model(&c, "tests/gpu/fast_mlp_fp8.moe", NULL, 0, NULL);
    char err[1024];
    Plan *p = g ? plan_create(g, &c.arena, err, sizeof err) : NULL;
    if (p)
        p->source.kernels = PLAN_KERNELS_FAST;
    CudaOptions opts = {.fp8_kgemm_schedule = coop ? CUDA_KSCHED_DEFAULT : CUDA_KSCHED_PINGPONG,
                        .fp8_swiglu = coop ? CUDA_DSWIGLU_DEFAULT : CUDA_DSWIGLU_FUSED,
                        .fp8_passes = sep ? CUDA_DSWIGLU_SEPARATE : CUDA_DSWIGLU_DEFAULT};
    const int epi = !coop;
    CHECK(g && g->train.precision == IR_PREC_FP8_BLOCK && p && cuda_codegen(p, &opts, NULL),
          "fast_mlp_fp8: an fp8-block fast plan");
    if (!p) {
        compilation_free(&c);
        return;
    }
    int nodes = 0, fast = 0, fwd = 0, bwd = 0, fp8_gemms = 0, u8maps = 0, kgemms = 0, caps = 1, impl_ok = 1;
    int tiles = 0, tiles_nodyn = 1, weights = 0, weights_ok = 1, swiglu = 0, glu = 0;
    for (int i = 0; i < p->graph->nnodes; i++) {
        const IrNode *n = p->graph->nodes[i];
        if (n->op != IR_OP_GROUPED_MLP && n->op != IR_OP_GROUPED_MLP_BWD)
            continue;
        char why[256];
        nodes++;
        fast += cuda_fast_mlp_ok(n, why, sizeof why) && strncmp(why, "fp8-block: FP8 grouped GEMMs", 28) == 0;
    }
    for (int i = 0; i < p->nlaunches; i++) {
        const PlanLaunch *l = &p->launches[i];
        const IrNode *n = p->graph->nodes[l->node];
        if (n->op != IR_OP_GROUPED_MLP && n->op != IR_OP_GROUPED_MLP_BWD)
            continue;
        fwd += n->op == IR_OP_GROUPED_MLP;
        bwd += n->op == IR_OP_GROUPED_MLP_BWD;
        impl_ok &= l->impl && strncmp(l->impl, "fast: fp8-block", 15) == 0;
        const char *kn = p->kernel_names[l->kernel];
        /* the M-grouped FP8 GEMMs at 6 stages, the K-grouped ones with the TMA-store epilogue at 5 (decision 51), or
         * ping-pong at 7 (decision 56) */
        int is_fp8 = strstr(kn, "_fp8b_s6") != NULL ||
                     (coop ? strstr(kn, "_fp8b_s5_tma") != NULL && !strstr(kn, "_pp")
                           : strstr(kn, "_fp8b_s7_tma_pp") != NULL),
            maps = 0;
        /* the weight gradients on the FP8 K-grouped GEMM (decision 45): operands [C, rows_cap], tokens contiguous */
        int is_k = is_fp8 && strstr(kn, "_dw_") != NULL;
        fp8_gemms += is_fp8;
        kgemms += is_k;
        /* the activation quantisers (gathers, dSwiGLU, a colwise): the tile in registers, no dynamic shared
         * memory, 256 threads; the SwiGLU's is the gate_up GEMM's epilogue (decision 57) */
        swiglu += strstr(kn, "_fp8b_swiglu") != NULL;
        glu += strstr(kn, "_fast_gate_up_fp8b_s6_glu") != NULL;
        if (strstr(kn, "_fp8b_gather") || strstr(kn, "_fp8b_dswiglu") || strstr(kn, "_fp8b_a_colwise") ||
            strstr(kn, "_fp8b_swiglu_h"))
            tiles_nodyn &= l->shared_bytes == 0 && l->block == 256;
        if (strstr(kn, "_fp8b_gather") || strstr(kn, "_fp8b_dswiglu") || strstr(kn, "_fp8b_a_colwise")) {
            tiles++;
            tiles_nodyn &= l->shared_bytes == 0 && l->block == 256;
        }
        /* no node quantises a weight: the optimizer writes their tiles (decision 44) */
        if (strstr(kn, "_fp8b_w_"))
            weights++;
        for (int a = 0; l->targs && a < l->nargs; a++) {
            const PlanArg *t = &l->targs[a];
            if (t->kind != PLAN_ARG_TMAP_U8)
                continue;
            maps++;
            /* the weight operand (the second map of an M-grouped FP8 GEMM): the param's e4m3 copy, its tiles in the
             * forward, the transposed tiles in the backward; the scales (the argument "sb") from the copy too */
            if (a > 0 && !is_k) {
                const PlanBuf *wb = &p->bufs[t->buf];
                PlanFp8Copy fc;
                int ok = wb->kind == PLAN_BUF_COPY && wb->storage == PLAN_E4M3 &&
                         plan_fp8b_copy_layout(p->graph, p->graph->nodes[wb->node], &fc) &&
                         t->offset == (n->op == IR_OP_GROUPED_MLP ? fc.q : fc.qt);
                int sb = -1;
                for (int k = 0; k < l->nargs; k++)
                    if (l->targs[k].kind == PLAN_ARG_BUF && l->args[k] == t->buf)
                        sb = k;
                weights_ok &= ok && sb >= 0;
            }
            /* an E4M3 operand: a byte buffer, box {128, 128} (the ping-pong K-grouped kernel's dY^T {128, 64}),
             * rows_cap (the i32 argument) a multiple of 16; the M-grouped kernel's A is [rows_cap, K], the K-grouped
             * kernel's both operands [C, rows_cap] */
            const PlanArg *rc = launch_i32(l);
            caps &= p->bufs[t->buf].storage == PLAN_E4M3 && t->box_cols == 128 &&
                    t->box_rows == (is_k && !coop && a == 0 ? 64 : 128) &&
                    rc && rc->value % 16 == 0 &&
                    (is_k ? t->cols == rc->value : a > 0 || t->rows == rc->value) &&
                    t->rows * t->cols <= p->bufs[t->buf].bytes;
        }
        u8maps += maps;
        caps &= maps == (is_fp8 ? 2 : 0);
    }
    int layers = nodes / 2;
    CHECK(nodes == 4 && fast == nodes, "fast_mlp_fp8: %d of %d grouped_mlp nodes take the fp8-block kernels", fast,
          nodes);
    CHECK(impl_ok, "fast_mlp_fp8: every expert-MLP launch says fast: fp8-block");
    /* forward: offsets, the tokens of the dispatch read through, gather + xs rowwise and colwise, gate_up (with
     * SwiGLU + a's quantisation in its epilogue: decision 57), the SwiGLU quantiser and h's E4M3 copy for the
     * backward (decision 64; one launch when merged, decision 69), down (the combine reads y_padded; the weights'
     * tiles are the optimizer's e4m3 copies); backward: dy rowwise and colwise, da, dSwiGLU + dh rowwise and
     * colwise, dprobs (in the dSwiGLU launch when merged), a colwise, dxs, two weight gradients, scatter */
    CHECK(fwd == (epi || !sep ? 6 : 7) * layers && bwd == (sep ? 9 : 8) * layers,
          "fast_mlp_fp8: %d forward and %d backward launches", fwd, bwd);
    CHECK(tiles == 4 * layers && tiles_nodyn, "fast_mlp_fp8: %d tile quantiser launches (want %d), all without dynamic "
          "shared memory", tiles, 4 * layers);
    CHECK(epi ? swiglu == 0 && glu == layers &&
                    strstr(p->cuda_source, "moec::sm90::GemmFp8MGrouped<4, 512, 256, 6, 0, 0, 16, 0, "
                                           "moec::fp8b::SwigluQuantEpi<256ll>>::run(tma_a, tma_b, tma_d, d, sa, sb + "
                                           "1048576ll, offsets, rows_cap, aq, asa, pp);") &&
                    !strstr(p->cuda_source, "moec::fp8b::quant_tiles<E, F>(q, sa, ")
              : swiglu == layers && glu == 0 && !strstr(p->cuda_source, "SwigluQuantEpi<256ll>>::run") &&
                    strstr(p->cuda_source, sep ? "moec::fp8b::quant_tiles<E, F>(q, sa, "
                                               : "moec::fp8b::swiglu_h_tiles<E, F>(aq, asa, hq, hsa, hp, pp, ofs, "
                                                 "rcap);"),
          "fast_mlp_fp8: a = silu(gate) up probs and its 1x128 quantisation in the gate_up GEMM's epilogue (%d fused "
          "GEMMs, %d separate SwiGLU launches)", glu, swiglu);
    CHECK(weights == 0 && weights_ok, "fast_mlp_fp8: %d weight quantiser launches (want 0), every FP8 GEMM's weight "
          "operand and scales from the param's e4m3 copy at its tiles (forward) or transposed tiles (backward)",
          weights);
    /* the quantisers lay the activation scales out with the stride the GEMMs read them with (rows_cap) */
    long long rows_cap = -1;
    for (int i = 0; i < p->nlaunches && rows_cap < 0; i++)
        if (strstr(p->kernel_names[p->launches[i].kernel], "_fp8b_s6"))
            rows_cap = launch_i32(&p->launches[i])->value;
    static const char *const fp8b_quants[] = {"_fp8b_gather", "_fp8b_dswiglu", "_fp8b_a_colwise", "_fp8b_swiglu"};
    CHECK(rows_cap == (384 + 4 * 128 + 15) / 16 * 16 && quant_rcap_ok(p, fp8b_quants, 4, rows_cap),
          "fast_mlp_fp8: the quantisers' scale stride is the GEMMs' rows_cap %lld", rows_cap);
    CHECK(fp8_gemms == 6 * layers && u8maps == 12 * layers && kgemms == 2 * layers && caps,
          "fast_mlp_fp8: %d FP8 GEMMs (%d E4M3 tensor maps), %d of them FP8 weight-gradient GEMMs per plan", fp8_gemms,
          u8maps, kgemms);
    const char *kdown = coop ? "moec::sm90::GemmFp8KGrouped<4, 256, 256, 5, 0>::run(tma_a, tma_b, out + "
                             : "moec::sm90::GemmFp8KGrouped<4, 256, 256, 7, 0, 16, 0, 1>::run(tma_a, tma_b, out + ";
    const char *kgu = coop ? "moec::sm90::GemmFp8KGrouped<4, 512, 256, 5, 0>::run(tma_a, tma_b, out + "
                           : "moec::sm90::GemmFp8KGrouped<4, 512, 256, 7, 0, 16, 0, 1>::run(tma_a, tma_b, out + ";
    CHECK(strstr(p->cuda_source, kdown) && strstr(p->cuda_source, kgu) &&
              strstr(p->cuda_source, "rows_cap, &tma_dw, sumsq);") &&
              strstr(p->cuda_source, "moec::fp8b::quant_tiles<E, 2 * F>(q, sa, ") &&
              strstr(p->cuda_source, sep ? ", dht, dhts, moec::fp8b::Dswiglu<F, moec::fp8b::HE4m3<F>>{{hq, hsa, rcap}, "
                                           "dap, pp}, nullptr"
                                         : ", dht, dhts, moec::fp8b::Dswiglu<F, moec::fp8b::HE4m3<F>>{{hq, hsa, rcap}, "
                                           "dap, pp, dpart}, nullptr") &&
              (sep || strstr(p->cuda_source, "moec::fast::scatter<E, H, 2>(out, out + R * H, dxp, dpp, ofs, R);")) &&
              !strstr(p->cuda_source, "GemmKGrouped<4,"),
          "fast_mlp_fp8 (%s): dw_down and dw_gate_up on the FP8 K-grouped GEMM from the transposed codes, no bf16 "
          "K-grouped expert GEMM", coop ? "cooperative" : "ping-pong");
    CHECK(strstr(p->cuda_source, epi ? "moec::sm90::GemmFp8MGrouped<4, 512, 256, 6, 0, 0, 16, 0, "
                                     : "moec::sm90::GemmFp8MGrouped<4, 512, 256, 6, 0, 0>::run(") &&
              strstr(p->cuda_source, "void __launch_bounds__(512) moec_adamw_fp8b_4x512x256(") &&
              strstr(p->cuda_source, "void __launch_bounds__(512) moec_fp8b_copy_4x512x256(") &&
              strstr(p->cuda_source, "void __launch_bounds__(512) moec_adamw_fp8b_4x256x256(") &&
              strstr(p->cuda_source, "void __launch_bounds__(512) moec_fp8b_copy_4x256x256(") &&
              strstr(p->cuda_source, "moec::fp8b::quant_weight_from<4, 512ll, 256ll>(c + 0ll, c + 1048576ll, c + "
                                     "524288ll, c + 1048608ll, moec::fp8b::AdamwValues{") &&
              strstr(p->cuda_source, "moec::fp8b::quant_weight<4, 512ll, 256ll>(c + 0ll, c + 1048576ll, c + "
                                     "524288ll, c + 1048608ll, w)") &&
              strstr(p->cuda_source, epi ? ", sa, sb + 1048576ll, offsets, rows_cap, aq, asa, pp)"
                                         : ", sa, sb + 1048576ll, offsets, rows_cap)") &&
              strstr(p->cuda_source, "moec::fp8b::quant_tiles<E, H>(q, sa, ") &&
              !strstr(p->cuda_source, "GemmMGrouped<4, 512"),
          "fast_mlp_fp8: the FP8 GEMM and the quantisers, no bf16 expert GEMM");
    check_plan("fast_mlp_fp8", p);
    check_forward("fast_mlp_fp8", p);
    int copies = 0, kept = 0, e4m3 = 0, fp8_copies = 0;
    for (int b = 0; b < p->nbufs; b++) {
        copies += p->bufs[b].kind == PLAN_BUF_COPY && p->bufs[b].storage == PLAN_BF16 &&
                  p->graph->nodes[p->bufs[b].node]->rank == 3;
        fp8_copies += p->bufs[b].kind == PLAN_BUF_COPY && p->bufs[b].storage == PLAN_E4M3 &&
                      p->bufs[b].region == PLAN_REGION_PARAMS;
        kept += p->bufs[b].kind == PLAN_BUF_WORKSPACE && p->bufs[b].until > p->bufs[b].node &&
                p->graph->nodes[p->bufs[b].node]->op == IR_OP_GROUPED_MLP;
        e4m3 += p->bufs[b].storage == PLAN_E4M3;
    }
    /* kept per layer: offsets, probs, h's E4M3 copy and its scales (decision 64), xs colwise (its transposed codes
     * and their scales), the token of each row, y for the combine; no bf16 working copy of an expert weight, an
     * e4m3 one of each in the params region (the tiles, the transposed tiles and their scales: decision 44); E4M3
     * buffers (values or scale codes): 8 in the forward (xs rowwise and colwise, a, h's copy), 10 in the backward
     * (dy and dh rowwise and colwise, a colwise), 2 copies */
    CHECK(copies == 0 && fp8_copies == 2 * layers && kept == 8 * layers && e4m3 == 20 * layers,
          "fast_mlp_fp8: %d bf16 and %d e4m3 expert-weight copies, %d kept workspaces, %d E4M3 buffers", copies,
          fp8_copies, kept, e4m3);
    char *doc = plan_to_json(p, 0);
    Plan *q = plan_from_json(doc, strlen(doc), "plan", NULL, err, sizeof err);
    int same = q && q->nlaunches == p->nlaunches && q->nbufs == p->nbufs;
    for (int b = 0; same && b < p->nbufs; b++)
        same = q->bufs[b].storage == p->bufs[b].storage && q->bufs[b].bytes == p->bufs[b].bytes;
    for (int i = 0; same && i < p->nlaunches; i++)
        for (int j = 0; same && p->launches[i].targs && j < p->launches[i].nargs; j++)
            same = memcmp(&p->launches[i].targs[j], &q->launches[i].targs[j], sizeof(PlanArg)) == 0;
    CHECK(same, "fast_mlp_fp8: the E4M3 buffers and tensor maps survive plan.json: %s", q ? "" : err);
    plan_free(q);
    free(doc);
    /* an E4M3 tensor map over a bf16 buffer is refused by the reader */
    for (int i = 0; i < p->nlaunches; i++) {
        PlanArg *t = p->launches[i].targs;
        if (!t || t[0].kind != PLAN_ARG_TMAP_U8)
            continue;
        int keep = t[0].buf, other = -1;
        for (int b = 0; b < p->nbufs && other < 0; b++)
            if (p->bufs[b].storage == PLAN_BF16 && p->bufs[b].bytes >= p->bufs[keep].bytes)
                other = b;
        t[0].buf = other;
        p->launches[i].args[0] = other;
        doc = plan_to_json(p, 0);
        q = plan_from_json(doc, strlen(doc), "plan", NULL, err, sizeof err);
        CHECK(other >= 0 && !q && strstr(err, "no e4m3 buffer"), "an E4M3 tensor map over a bf16 buffer is refused: %s",
              q ? "read" : err);
        plan_free(q);
        free(doc);
        t[0].buf = keep;
        p->launches[i].args[0] = keep;
        break;
    }
    plan_free(p);
    compilation_free(&c);

    /* hidden 128: no FP8 kernels; codegen refuses rather than run another precision */
    g = compile_model(&c, "tests/gpu/fast_mlp.moe", "fp8-block", 0, NULL);
    p = g ? plan_create(g, &c.arena, err, sizeof err) : NULL;
    if (p)
        p->source.kernels = PLAN_KERNELS_FAST;
    int refused = p && !cuda_codegen(p, NULL, NULL);
    char why[256] = "";
    for (int i = 0; g && i < g->nnodes; i++)
        if (g->nodes[i]->op == IR_OP_GROUPED_MLP) {
            cuda_fast_mlp_ok(g->nodes[i], why, sizeof why);
            break;
        }
    CHECK(refused && strstr(why, "H 128 and F 256 must be multiples of 256"),
          "fast_mlp at fp8-block (H 128) is refused: %s", why);
    plan_free(p);
    compilation_free(&c);
}

/* --precision mxfp8 --kernels fast (cuda_moe_fast.c, decision 53): tests/gpu/fast_mlp_fp8.moe's expert MLPs with
 * the forward and data-gradient GEMMs on the FP8 grouped GEMM's MXFP8 mode, the weight gradients on the bf16
 * K-grouped GEMM, the quantisers of fp8_block_fast.cuh's moec::mx8 (their numerics: tests/codegen/mx_quant.test) */
static void test_fast_mlp_mx(void)
{
    Compilation c;
    IrGraph *g = compile_model(&c, "tests/gpu/fast_mlp_fp8.moe", "mxfp8", 0, NULL);
    char err[1024];
    Plan *p = g ? plan_create(g, &c.arena, err, sizeof err) : NULL;
    if (p)
        p->source.kernels = PLAN_KERNELS_FAST;
    CHECK(g && g->train.precision == IR_PREC_MXFP8 && p && cuda_codegen(p, NULL, NULL),
          "fast_mlp_fp8 at mxfp8: a fast plan");
    if (!p) {
        compilation_free(&c);
        return;
    }
    int nodes = 0, fast = 0, fwd = 0, bwd = 0, mx_gemms = 0, kgemms = 0, u8maps = 0, caps = 1, impl_ok = 1, tiles = 0;
    int tiles_ok = 1, weights = 0, weights_ok = 1;
    for (int i = 0; i < p->graph->nnodes; i++) {
        const IrNode *n = p->graph->nodes[i];
        if (n->op != IR_OP_GROUPED_MLP && n->op != IR_OP_GROUPED_MLP_BWD)
            continue;
        char why[512];
        nodes++;
        fast += cuda_fast_mlp_ok(n, why, sizeof why) && strncmp(why, "mxfp8: FP8 grouped GEMMs", 24) == 0;
    }
    long long rows_cap = -1;
    for (int i = 0; i < p->nlaunches; i++) {
        const PlanLaunch *l = &p->launches[i];
        const IrNode *n = p->graph->nodes[l->node];
        if (n->op != IR_OP_GROUPED_MLP && n->op != IR_OP_GROUPED_MLP_BWD)
            continue;
        fwd += n->op == IR_OP_GROUPED_MLP;
        bwd += n->op == IR_OP_GROUPED_MLP_BWD;
        impl_ok &= l->impl && strncmp(l->impl, "fast: mxfp8", 11) == 0;
        const char *kn = p->kernel_names[l->kernel];
        int is_mx = strstr(kn, "_mx_s5") != NULL, maps = 0;
        mx_gemms += is_mx;
        kgemms += strstr(kn, "_dw_") != NULL && strstr(kn, "_bn") != NULL;
        if (strstr(kn, "_mx_gather") || strstr(kn, "_mx_swiglu") || strstr(kn, "_mx_dswiglu") ||
            strstr(kn, "_mx_a_colwise")) {
            tiles++;
            tiles_ok &= l->shared_bytes == 0 && l->block == 256;
        }
        /* no node quantises a weight: the optimizer writes their MXFP8 copies (decision 55) */
        weights += strstr(kn, "_mx_weights") != NULL;
        for (int a = 0; l->targs && a < l->nargs; a++) {
            const PlanArg *t = &l->targs[a];
            if (t->kind != PLAN_ARG_TMAP_U8)
                continue;
            maps++;
            /* the weight operand (the second map): the param's MXFP8 copy, the 1x32-along-K codes in the
             * forward, the transposed 32x1 codes in the backward, the scales (a buffer argument) from the copy */
            if (a > 0) {
                const PlanBuf *wb = &p->bufs[t->buf];
                PlanFp8Copy fc;
                int ok = wb->kind == PLAN_BUF_COPY && wb->storage == PLAN_E4M3 &&
                         plan_fp8b_copy_layout(p->graph, p->graph->nodes[wb->node], &fc) && fc.mx &&
                         t->offset == (n->op == IR_OP_GROUPED_MLP ? fc.q : fc.qt);
                int sb = -1;
                for (int k = 0; k < l->nargs; k++)
                    if (l->targs[k].kind == PLAN_ARG_BUF && l->args[k] == t->buf)
                        sb = k;
                weights_ok &= ok && sb >= 0;
            }
            /* an E4M3 operand: a byte buffer (the activations' a workspace), box {128, 128}, rows_cap a multiple
             * of 16, A [rows_cap, K] */
            const PlanArg *rc = launch_i32(l);
            caps &= p->bufs[t->buf].storage == PLAN_E4M3 &&
                    (a > 0 || p->bufs[t->buf].kind == PLAN_BUF_WORKSPACE) && t->box_cols == 128 && t->box_rows == 128 && rc && rc->value % 16 == 0 &&
                    (a > 0 || t->rows == rc->value) && t->rows * t->cols <= p->bufs[t->buf].bytes;
            if (rows_cap < 0)
                rows_cap = rc->value;
        }
        u8maps += maps;
        caps &= maps == (is_mx ? 2 : 0);
    }
    int layers = nodes / 2;
    CHECK(nodes == 4 && fast == nodes, "fast_mlp_fp8 at mxfp8: %d of %d grouped_mlp nodes take the MXFP8 kernels", fast,
          nodes);
    CHECK(impl_ok, "fast_mlp_fp8 at mxfp8: every expert-MLP launch says fast: mxfp8");
    /* forward: offsets, the tokens of the dispatch read through, gather + xs rowwise, gate_up, SwiGLU + quantise,
     * h's MXFP8 copy (decision 64), down (the combine reads y_padded); backward: dy rowwise and colwise, da,
     * dSwiGLU + dh rowwise and colwise with dprobs' partials (decision 69), a colwise, dxs, xs colwise (from the token
     * rows), two weight gradients, scatter (the weights' copies are the optimizer's) */
    CHECK(fwd == 7 * layers && bwd == 9 * layers, "fast_mlp_fp8 at mxfp8: %d forward and %d backward launches", fwd,
          bwd);
    CHECK(tiles == 5 * layers && tiles_ok && weights == 0 && weights_ok,
          "fast_mlp_fp8 at mxfp8: %d tile quantisers (want %d, no dynamic shared memory), %d weight quantisers (want "
          "0), the GEMMs' weights %s the params' MXFP8 copies", tiles, 5 * layers, weights,
          weights_ok ? "on" : "NOT on");
    CHECK(mx_gemms == 4 * layers && u8maps == 8 * layers && kgemms == 2 * layers && caps,
          "fast_mlp_fp8 at mxfp8: %d MXFP8 GEMMs (%d E4M3 tensor maps), %d bf16 weight-gradient GEMMs", mx_gemms,
          u8maps, kgemms);
    static const char *const mx_quants[] = {"_mx_gather", "_mx_dswiglu", "_mx_a_colwise", "_mx_swiglu"};
    CHECK(rows_cap == (384 + 4 * 128 + 15) / 16 * 16 && quant_rcap_ok(p, mx_quants, 4, rows_cap),
          "fast_mlp_fp8 at mxfp8: the quantisers' scale stride is the GEMMs' rows_cap %lld", rows_cap);
    CHECK(strstr(p->cuda_source, "moec::sm90::GemmFp8MGrouped<4, 512, 256, 5, 1, 0>::run(") &&
              strstr(p->cuda_source, "moec::sm90::GemmFp8MGrouped<4, 256, 512, 5, 1, 0>::run(") &&
              strstr(p->cuda_source, "moec::sm90::GemmKGrouped<4, 512, 256, ") &&
              strstr(p->cuda_source, "moec::mx8::quant_tiles<E, H>(q, sa, ") &&
              strstr(p->cuda_source, "moec::mx8::quant_tiles<E, 2 * F>(q, sa, ") &&
              strstr(p->cuda_source, ", dhw, moec::fp8b::Dswiglu<F, moec::fp8b::HMx<F>>{{hq, hsa, rcap}, dap, pp, "
                                     "dpart}") &&
              strstr(p->cuda_source, "moec::fp8b::Swiglu<F, moec::fp8b::HMx<F>>{{hq, hsa, rcap}, pp}") &&
              strstr(p->cuda_source, "moec::fast::scatter<E, H, 2>(out, out + R * H, dxp, dpp, ofs, R);") &&
              !strstr(p->cuda_source, "moec::mx8::weight_rows<") && !strstr(p->cuda_source, "moec::mx8::weight_cols<") &&
              !strstr(p->cuda_source, "GemmMGrouped<4, 512") && !strstr(p->cuda_source, "GemmFp8KGrouped<4,") &&
              !strstr(p->cuda_source, "void __launch_bounds__(512) moec_adamw_fp8b_") &&
              strstr(p->cuda_source, "void __launch_bounds__(512) moec_adamw_mx8_4x512x256(") &&
              strstr(p->cuda_source, "void __launch_bounds__(512) moec_mx8_copy_4x256x256(") &&
              strstr(p->cuda_source, "moec::mx8::quant_weight_from<4, 512ll, 256ll>(c + 0ll, c + 1048576ll, "
                                     "c + 524288ll, c + 1064960ll, moec::fp8b::AdamwValues{"),
          "fast_mlp_fp8 at mxfp8: the MXFP8 GEMM and quantisers, the bf16 K-grouped wgrad, no bf16 expert M-grouped "
          "GEMM, no weight quantiser in a node, the optimizer's MXFP8 copy kernels");
    check_plan("fast_mlp_fp8 at mxfp8", p);
    check_forward("fast_mlp_fp8 at mxfp8", p);
    int copies = 0, kept = 0, copies_ok = 1;
    for (int b = 0; b < p->nbufs; b++) {
        const PlanBuf *pb = &p->bufs[b];
        PlanFp8Copy fc;
        if (pb->kind == PLAN_BUF_COPY && p->graph->nodes[pb->node]->rank == 3) {
            copies++;
            copies_ok &= pb->storage == PLAN_E4M3 && pb->region == PLAN_REGION_PARAMS &&
                         plan_fp8b_copy_layout(p->graph, p->graph->nodes[pb->node], &fc) && fc.mx &&
                         pb->bytes == 2 * fc.e * fc.n * fc.k + fc.e * fc.n * fc.k / 16 && strstr(pb->name, ".mxfp8");
        }
        kept += p->bufs[b].kind == PLAN_BUF_WORKSPACE && p->bufs[b].until > p->bufs[b].node &&
                p->graph->nodes[p->bufs[b].node]->op == IR_OP_GROUPED_MLP;
    }
    /* kept per layer: offsets, probs, h's MXFP8 copy and its scales (decision 64), the token of each row, y for the
     * combine (xs's colwise copy is made in the backward from the token rows); each expert weight one MXFP8 copy in
     * the params region (2 + 2/32 bytes a weight) */
    CHECK(copies == 2 * layers && copies_ok && kept == 6 * layers,
          "fast_mlp_fp8 at mxfp8: %d expert-weight copies (want %d, e4m3 in the params region), %d kept workspaces",
          copies, 2 * layers, kept);
    plan_free(p);
    compilation_free(&c);
}

/* ------------------------------------------------------------ bf16 storage (docs/decisions.md 40) */

static int node_id(const IrGraph *g, const char *name)
{
    for (int i = 0; i < g->nnodes; i++)
        if (strcmp(g->nodes[i]->name, name) == 0)
            return i;
    return -1;
}

/* the CPU backend's run of plan p on fixed random params and batch; round: cpu_plan_round_bf16. Returns
 * the loss; *rounded: every value of every bf16 node has its low 16 bits zero; *nbf16: such nodes run */
static double cpu_run(const Plan *p, int round, int *rounded, int *nbf16)
{
    const IrGraph *g = p->graph;
    CpuPlan cpu;
    cpu_plan_init(&cpu, g, CPU_F32);
    if (round)
        cpu_plan_round_bf16(&cpu, p);
    uint64_t st = 12345;
    void **owned = calloc((size_t)g->nnodes, sizeof(void *));
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        int64_t numel = ir_numel(n);
        if (n->op == IR_OP_PARAM) {
            float *d = malloc((size_t)numel * 4);
            for (int64_t e = 0; e < numel; e++) {
                st = st * 6364136223846793005ull + 1442695040888963407ull;
                double u = (double)(st >> 11) / 9007199254740992.0 - 0.5;
                d[e] = (float)(n->rank == 1 ? 1.0 + 0.2 * u : 0.2 * u);
            }
            owned[i] = d;
            cpu_plan_bind(&cpu, n, d);
        } else if (n->op == IR_OP_INPUT) {
            int32_t *d = malloc((size_t)numel * 4);
            for (int64_t e = 0; e < numel; e++)
                d[e] = (int32_t)(3 + e * 7 % 20); /* real residues: no BOS / padding ids */
            owned[i] = d;
            cpu_plan_bind(&cpu, n, d);
        }
    }
    *rounded = 1;
    *nbf16 = 0;
    for (int i = 0; i < g->nnodes; i++) {
        cpu_plan_run_range(&cpu, i, i + 1);
        if (p->bufs[i].storage != PLAN_BF16)
            continue;
        (*nbf16)++;
        const float *y = cpu_plan_data(&cpu, g->nodes[i]);
        for (int64_t e = 0; e < ir_numel(g->nodes[i]); e++)
            *rounded &= (fbits(y[e]) & 0xffffu) == 0;
    }
    double loss = cpu_plan_scalar(&cpu, g->loss);
    cpu_plan_free(&cpu);
    for (int i = 0; i < g->nnodes; i++)
        free(owned[i]);
    free(owned);
    return loss;
}

/* Decision 48: a plan with the fast kernels' sm_90a code says so (needs_arch, through plan.json too), and
 * the GPU backend's check refuses it on any GPU but compute capability 9.0, naming the way out; a fast plan
 * in which no node qualifies, and a reference plan, run anywhere. The device is faked through the check. */
static void test_needs_arch(void)
{
    const struct {
        const char *path;
        PlanKernels kernels;
        const char *needs;
    } cases[] = {{"tests/gpu/fast_mlp.moe", PLAN_KERNELS_FAST, "sm_90a"},
                 {"tests/gpu/fast_mlp.moe", PLAN_KERNELS_REFERENCE, ""},
                 {"models/mixtral_tiny.moe", PLAN_KERNELS_FAST, ""}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        Compilation c;
        char err[2048] = "";
        IrGraph *g = compile_model(&c, cases[k].path, NULL, 0, NULL);
        c.kernels = (int)cases[k].kernels;
        Plan *p = g ? driver_make_plan(&c, cases[k].path, NULL, 0, 0, IR_PREC_BF16, 0, err, sizeof err) : NULL;
        CHECK(p && !p->gpu_unsupported, "%s, %s kernels: a plan (%s)", cases[k].path,
              plan_kernels_name[cases[k].kernels], err);
        if (!p) {
            compilation_free(&c);
            continue;
        }
        CHECK(strcmp(p->needs_arch, cases[k].needs) == 0, "%s, %s kernels: needs_arch '%s' (want '%s')",
              cases[k].path, plan_kernels_name[cases[k].kernels], p->needs_arch, cases[k].needs);
        CHECK(!!p->needs_arch[0] == (strstr(p->cuda_source, "sm_90a: codegen/gemm_sm90_sched.h") != NULL),
              "%s: needs_arch exactly when the source holds the sm_90a device code", cases[k].path);
        char *doc = plan_to_json(p, 1);
        Plan *q = plan_from_json(doc, strlen(doc), "plan", NULL, err, sizeof err);
        CHECK(q && strcmp(q->needs_arch, p->needs_arch) == 0, "%s: needs_arch survives the document", cases[k].path);
        CHECK(!!strstr(doc, "\"needs_arch\"") == !!p->needs_arch[0], "%s: \"needs_arch\" written only when set",
              cases[k].path);
        free(doc);
        plan_free(q);
        /* the devices: an H200 runs everything; an A100, an L40S, a B200 only plans without sm_90a code */
        const struct { const char *name; int major, minor; } gpus[] = {
            {"NVIDIA H200", 9, 0}, {"NVIDIA A100-SXM4-80GB", 8, 0}, {"NVIDIA L40S", 8, 9}, {"NVIDIA B200", 10, 0}};
        for (size_t d = 0; d < sizeof gpus / sizeof *gpus; d++) {
            err[0] = 0;
            int runs = gpu_check_arch(p, gpus[d].name, gpus[d].major, gpus[d].minor, err, sizeof err);
            int want = !p->needs_arch[0] || (gpus[d].major == 9 && gpus[d].minor == 0);
            CHECK(runs == want, "%s, %s kernels on %s (%d.%d): %s", cases[k].path,
                  plan_kernels_name[cases[k].kernels], gpus[d].name, gpus[d].major, gpus[d].minor,
                  runs ? "runs" : "refused");
            if (!runs) {
                char cc[64], cmd[256];
                snprintf(cc, sizeof cc, "compute capability %d.%d", gpus[d].major, gpus[d].minor);
                snprintf(cmd, sizeof cmd, "`moec compile %s -o OUT --kernels reference`", cases[k].path);
                CHECK(strstr(err, gpus[d].name) && strstr(err, cc) && strstr(err, cmd) &&
                          strstr(err, "--device cpu") && strstr(err, "only an sm_90 GPU"),
                      "the refusal names the GPU, its compute capability, the model and --kernels reference: %s",
                      err);
            }
        }
        plan_free(p);
        compilation_free(&c);
    }
}

static void test_bf16_storage(void)
{
    /* the host rounding: to nearest, ties to even, overflow to infinity, NaN kept */
    CHECK(bf16_round(1.0f) == 1.0f && bf16_round(1.0f + 0x1p-8f) == 1.0f &&
              bf16_round(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f && bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f &&
              bf16_round(-1.0f - 0x1p-8f) == -1.0f && isinf(bf16_round(3.4e38f)) && isnan(bf16_round(NAN)) &&
              bf16_to_f32(f32_to_bf16(1.5f)) == 1.5f && f32_to_bf16(-2.0f) == 0xc000u,
          "bf16_round: to nearest even, overflow to infinity, NaN kept");

    const char *want[] = {"causal64.rmsnorm", "causal64.q", "causal64.k", "causal64.v", "causal64.q_rope",
                          "causal64.k_rope", "causal64.attn", "causal64.attn_out.linear_dx", "causal64.attn.sdpa_bwd",
                          "causal64.attn.slice", "causal64.attn.slice.2", "causal64.q_rope.rope_dx",
                          "causal64.k_rope.rope_dx", "bidir128.q", "bidir128.attn"};
    /* the MoE block's norm feeds the router (skinny kernels) and the expert MLP (fp32 for now); the
     * residual stream, the projections' data gradients (summed by add), the router's logits and weights */
    const char *fp32[] = {"causal64.rmsnorm.1", "causal64.attn_out", "causal64.router_logits", "causal64.route.weights",
                          "causal64.h", "causal64.q.linear_dx", "causal64.q.linear_dw", "loss", "x"};
    for (int fast = 0; fast < 2; fast++) {
        Compilation c;
        IrGraph *g = compile_model(&c, "tests/gpu/fast_attn.moe", NULL, 0, NULL);
        char err[1024];
        Plan *p = g ? plan_create(g, &c.arena, err, sizeof err) : NULL;
        if (p)
            p->source.kernels = fast ? PLAN_KERNELS_FAST : PLAN_KERNELS_REFERENCE;
        CHECK(p && cuda_codegen(p, NULL, NULL), "fast_attn.moe: a %s plan", fast ? "fast" : "reference");
        if (!p) {
            compilation_free(&c);
            continue;
        }
        g = p->graph;
        int nbf = 0, ok = 1;
        for (int i = 0; i < g->nnodes; i++)
            nbf += p->bufs[i].storage == PLAN_BF16;
        if (!fast) {
            CHECK(nbf == 0, "fast_attn.moe, reference kernels: no tensor in bf16 (%d)", nbf);
        } else {
            for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
                int id = node_id(g, want[k]);
                if (id < 0 || p->bufs[id].storage != PLAN_BF16 || p->bufs[id].bytes != ir_numel(g->nodes[id]) * 2) {
                    fprintf(stderr, "fast_attn.moe: %s is not stored in bf16\n", want[k]);
                    ok = 0;
                }
            }
            for (size_t k = 0; k < sizeof fp32 / sizeof *fp32; k++) {
                int id = node_id(g, fp32[k]);
                if (id < 0 || p->bufs[id].storage == PLAN_BF16) {
                    fprintf(stderr, "fast_attn.moe: %s is %s\n", fp32[k], id < 0 ? "missing" : "stored in bf16");
                    ok = 0;
                }
            }
            for (int q = 0; q < g->nparams; q++)
                ok &= p->bufs[g->grads[q]->id].storage != PLAN_BF16;
            CHECK(ok && nbf == 28, "fast_attn.moe, --kernels fast: the attention block's norm, projections, RoPE, "
                  "attention output and their gradients named in bf16 (28 nodes: %d), router logits and probabilities, norms, the loss and "
                  "every parameter gradient fp32", nbf);
            /* no conversion pass left where the inputs are bf16: no to_bf16 launch, no kept qkv copy, no dO copy */
            int conv = 0, qkv = 0;
            for (int i = 0; i < p->nlaunches; i++)
                conv += p->launches[i].kernel >= 0 && strstr(p->kernel_names[p->launches[i].kernel], "to_bf16") != NULL;
            for (int b = g->nnodes; b < p->nbufs; b++)
                qkv += strstr(p->bufs[b].name, "qkv_bf16") != NULL || strstr(p->bufs[b].name, "dout_bf16") != NULL;
            CHECK(conv == 0 && qkv == 0, "fast_attn.moe: no q/k/v to_bf16 launch (%d), no qkv_bf16 or dout_bf16 "
                  "workspace (%d)", conv, qkv);
            /* the plan document says so, and reads back */
            char *doc = plan_to_json(p, 0);
            cJSON *root = cJSON_Parse(doc);
            const cJSON *bufs = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "gpu"), "buffers");
            int shown = 0, readback = 0;
            const cJSON *b;
            cJSON_ArrayForEach(b, bufs)
            {
                const cJSON *nm = cJSON_GetObjectItemCaseSensitive(b, "name");
                const cJSON *sto = cJSON_GetObjectItemCaseSensitive(b, "storage");
                shown += cJSON_IsString(nm) && cJSON_IsString(sto) && strcmp(sto->valuestring, "bf16") == 0 &&
                         cJSON_IsString(cJSON_GetObjectItemCaseSensitive(b, "kind")) &&
                         strcmp(cJSON_GetObjectItemCaseSensitive(b, "kind")->valuestring, "tensor") == 0;
            }
            cJSON_Delete(root);
            Plan *q = plan_from_json(doc, strlen(doc), "plan", NULL, err, sizeof err);
            for (int i = 0; q && i < g->nnodes; i++)
                readback += q->bufs[i].storage == PLAN_BF16;
            plan_free(q);
            CHECK(shown == 28 && readback == 28, "fast_attn.moe: plan.json shows the 28 bf16 tensors (%d) and reads "
                  "back with them (%d)", shown, readback);
            free(doc);
            /* the CPU backend rounds where the GPU stores bf16, and only with the plan's word: a run without
             * cpu_plan_round_bf16 leaves low bits (so this fails if the rounding is skipped) and another loss */
            int rounded = 0, n1 = 0, unrounded = 0, n2 = 0;
            double l1 = cpu_run(p, 1, &rounded, &n1), l0 = cpu_run(p, 0, &unrounded, &n2);
            CHECK(rounded && n1 == 28 && !unrounded && isfinite(l1) && l1 != l0,
                  "CPU backend: the 28 bf16 nodes hold bf16 values (%d), not without the rounding (%d); loss %.9g "
                  "rounded, %.9g not", rounded, unrounded, l1, l0);
        }
        if (fast) {
            /* a bf16 index tensor is refused by the plan reader */
            int seg = node_id(g, "segments");
            PlanBuf keep = p->bufs[seg];
            p->bufs[seg].storage = PLAN_BF16;
            p->bufs[seg].bytes = ir_numel(g->nodes[seg]) * 2;
            char *doc = plan_to_json(p, 0);
            Plan *q = plan_from_json(doc, strlen(doc), "plan", NULL, err, sizeof err);
            CHECK(!q && strstr(err, "storage bf16 for a i32 tensor"), "plan reader: bf16 storage of an index tensor "
                  "refused: %s", q ? "read" : err);
            plan_free(q);
            free(doc);
            p->bufs[seg] = keep;
        }
        plan_free(p);
        compilation_free(&c);
    }

    /* the planner sizes buffers by storage: four Mixtral-shape layers (tests/gpu/nofit.moe, bf16, 16 x 4096), the
     * fast plan as made, then the same tensor table with its bf16 tensors widened back to fp32 and laid out again */
    Compilation c;
    IrGraph *g = compile_model(&c, "tests/gpu/nofit.moe", "bf16", 0, NULL);
    char err[1024];
    Plan *p = g ? plan_create(g, &c.arena, err, sizeof err) : NULL;
    if (p)
        p->source.kernels = PLAN_KERNELS_FAST;
    CHECK(p && cuda_codegen(p, NULL, NULL), "nofit.moe: a fast plan");
    if (p) {
        PlanMemoryBreakdown a, b;
        plan_memory_breakdown(p, &a);
        int64_t half = 0;
        for (int i = 0; i < p->graph->nnodes; i++)
            if (p->bufs[i].storage == PLAN_BF16) {
                half += p->bufs[i].bytes;
                p->bufs[i].storage = PLAN_F32;
                p->bufs[i].bytes *= 2;
            }
        plan_memory_again(p, p->bufs, &p->memory);
        plan_memory_breakdown(p, &b);
        printf("nofit.moe (bf16, --kernels fast, 16 x 4096): %.2f GiB in bf16 tensors; activations at the peak %.2f "
               "GiB, region %.2f GiB (with them in fp32: %.2f, %.2f)\n", half / 1073741824.0,
               a.peak_acts / 1073741824.0, a.acts_region / 1073741824.0, b.peak_acts / 1073741824.0,
               b.acts_region / 1073741824.0);
        CHECK(half > 0 && a.peak_acts < b.peak_acts && a.acts_region < b.acts_region,
              "nofit.moe: bf16 storage shrinks the activations at the peak and the region the planner lays out");
        plan_free(p);
    }
    compilation_free(&c);
}

/* The launch-level layout (decision 65) of the benchmark layers' fast plans, each precision: checked against the
 * launches (check_plan, check_forward); buffers that the node-level rule keeps live together at the fused
 * backward's node share bytes (never live at one launch), the peak is at one of the backward's launches and
 * below the node-level layout's (the same table laid out by plan_memory: decision 64's figures) */
static void test_layer_layouts(void)
{
    static const char *const models[] = {"bench/models/layer/layer_mixtral.moe", "bench/models/layer/layer_bio.moe"};
    static const char *const precs[] = {"bf16", "fp8-block", "mxfp8"};
    for (int mi = 0; mi < 2; mi++)
        for (int pi = 0; pi < 3; pi++) {
            char what[256];
            snprintf(what, sizeof what, "%s --precision %s --kernels fast", models[mi], precs[pi]);
            Compilation c;
            IrGraph *g = compile_model(&c, models[mi], precs[pi], 0, NULL);
            char err[512];
            Plan *p = g ? plan_create(g, &c.arena, err, sizeof err) : NULL;
            if (p)
                p->source.kernels = PLAN_KERNELS_FAST;
            int ok = p && cuda_codegen(p, NULL, NULL);
            CHECK(ok, "%s: a plan", what);
            if (ok) {
                check_plan(what, p);
                check_forward(what, p);
                /* pairs that the node-level rule keeps live at one node (the fused backward's) and the
                 * launch-level layout puts on the same bytes */
                int shared = 0, n = p->graph->nnodes;
                for (int a = 0; a < p->nbufs; a++)
                    for (int b = a + 1; b < p->nbufs; b++) {
                        const PlanBuf *x = &p->bufs[a], *y = &p->bufs[b];
                        int lo = x->first > y->first ? x->first : y->first, hi = x->last < y->last ? x->last : y->last;
                        int bwd = 0;
                        for (int i = lo; i <= hi && !bwd; i++)
                            bwd = p->graph->nodes[i]->op == IR_OP_GROUPED_MLP_BWD;
                        shared += bwd && x->alias_of < 0 && y->alias_of < 0 &&
                                  x->region == PLAN_REGION_ACTIVATIONS && y->region == PLAN_REGION_ACTIVATIONS &&
                                  x->bytes && y->bytes && x->first <= y->last && y->first <= x->last &&
                                  x->offset < y->offset + y->bytes && y->offset < x->offset + x->bytes;
                    }
                PlanMemoryBreakdown lb;
                plan_memory_breakdown(p, &lb);
                PlanBuf *t = malloc(sizeof *t * ((size_t)p->nbufs + 1));
                memcpy(t, p->bufs, sizeof *t * (size_t)p->nbufs);
                PlanMemory m;
                plan_memory(p->graph, t, p->nbufs, 256, &m);
                /* the node-level peak, by the same measure: its lifetimes at every node position */
                int64_t node_peak = 0;
                for (int i = 0; i < n; i++) {
                    int64_t live = 0;
                    for (int b = 0; b < p->nbufs; b++)
                        if (t[b].alias_of < 0 && t[b].region == PLAN_REGION_ACTIVATIONS && t[b].first <= i &&
                            t[b].last >= i)
                            live += t[b].bytes;
                    node_peak = live > node_peak ? live : node_peak;
                }
                printf("%s: activations peak %.1f MiB at launch %d (node-level %.1f MiB), without the gradients "
                       "%.1f MiB; %d pairs live together at the backward's node share bytes\n", what,
                       lb.peak_live / 1048576.0, lb.peak_launch, node_peak / 1048576.0, lb.nograd_live / 1048576.0,
                       shared);
                CHECK(shared > 0 && lb.peak_live < node_peak && lb.peak_launch >= 0 &&
                          p->graph->nodes[lb.peak_at]->op == IR_OP_GROUPED_MLP_BWD,
                      "%s: buffers live together at the fused backward's node share bytes, the peak falls", what);
                free(t);
            }
            if (p)
                plan_free(p);
            compilation_free(&c);
        }
}

/* Decision 73: each weight-gradient GEMM of the fast expert MLP (bf16, fp8-block, MXFP8) takes a PLAN_ARG_NORM naming
 * the param whose whole gradient it stores (KGEMM_SUMSQ_PER_BLOCK doubles a block), so the optimizer's gradient norm
 * need not read it again; a gradient that goes through an all-reduce gets none (value -1: the kernel then writes
 * nothing): with ep or dp above 1 every gradient does (the sum over replicas, or at least the mean over the world).
 * The argument survives the plan's JSON, and a plan naming a node that is no param is refused. */
static void test_norm_args(void)
{
    const struct {
        const char *path, *precision;
        int64_t ep, dp;
        int named; /* whether the weight-gradient launches name their params */
    } cases[] = {{"tests/gpu/fast_mlp.moe", NULL, 1, 1, 1},           {"tests/gpu/fast_mlp_fp8.moe", "fp8-block", 1, 1, 1},
                 {"tests/gpu/fast_mlp_fp8.moe", "mxfp8", 1, 1, 1},    {"tests/gpu/fast_mlp.moe", NULL, 2, 1, 0},
                 {"tests/gpu/fast_mlp.moe", NULL, 1, 2, 0},           {"tests/gpu/fast_mlp_fp8.moe", "fp8-block", 1, 2, 0}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        Compilation c;
        memset(&c, 0, sizeof c);
        IrGraph *g = NULL;
        if (compilation_read(&c, cases[k].path, stderr)) {
            PassCtx ctx;
            pass_ctx_init(&ctx, NULL);
            if (cases[k].precision) {
                c.opts.has_precision = 1;
                c.opts.precision = strcmp(cases[k].precision, "mxfp8") == 0 ? IR_PREC_MXFP8 : IR_PREC_FP8_BLOCK;
            }
            c.opts.ep = cases[k].ep;
            c.opts.dp = cases[k].dp;
            if (compilation_run(&c, cases[k].path, c.text, c.len, stderr, &ctx) == 0)
                g = c.graph;
        }
        char err[1024], what[96];
        snprintf(what, sizeof what, "norm args (%s, ep %lld, dp %lld)", cases[k].precision ? cases[k].precision : "bf16",
                 (long long)cases[k].ep, (long long)cases[k].dp);
        Plan *p = g ? plan_create(g, &c.arena, err, sizeof err) : NULL;
        if (p)
            p->source.kernels = PLAN_KERNELS_FAST;
        CHECK(p && cuda_codegen(p, NULL, NULL), "%s: a fast plan", what);
        if (!p) {
            compilation_free(&c);
            continue;
        }
        int named = 0, none = 0, good = 1, dw = 0, bwd = 0;
        for (int i = 0; i < g->nnodes; i++)
            bwd += g->nodes[i]->op == IR_OP_GROUPED_MLP_BWD;
        for (int i = 0; i < p->nlaunches; i++) {
            const PlanLaunch *l = &p->launches[i];
            const char *kn = l->kernel >= 0 ? p->kernel_names[l->kernel] : "";
            int is_dw = strstr(kn, "_fast_dw_down") || strstr(kn, "_fast_dw_gate_up"), norms = 0;
            dw += is_dw;
            for (int a = 0; a < l->nargs && l->targs; a++) {
                const PlanArg *t = &l->targs[a];
                if (t->kind != PLAN_ARG_NORM)
                    continue;
                norms++;
                good &= is_dw && t->rows == KGEMM_SUMSQ_PER_BLOCK && t->buf == -1 && l->args[a] == -1;
                if (t->value < 0) {
                    none++;
                    continue;
                }
                named++;
                /* the param's gradient is the view of this launch's node, of the param's size */
                int pi = -1;
                for (int q = 0; q < g->nparams; q++)
                    if (g->params[q]->id == t->value)
                        pi = q;
                const IrNode *gr = pi >= 0 ? g->grads[pi] : NULL;
                good &= gr && gr->op == IR_OP_VIEW && gr->src[0]->id == l->node &&
                        ir_numel(gr) == ir_numel(g->params[pi]) && strstr(g->params[pi]->name, "w_");
            }
            good &= norms == is_dw; /* one on every weight-gradient GEMM, none elsewhere */
        }
        CHECK(good && bwd > 0 && dw == 2 * bwd && named == (cases[k].named ? dw : 0) && named + none == dw,
              "%s: %d weight-gradient launches (%d backward nodes), %d name their param's norm, %d none", what, dw, bwd,
              named, none);
        /* the harnesses' layout of the squares (gpu_norm_counts): 8 doubles a block for each named param, here 132 SMs */
        int64_t *cnt = calloc((size_t)g->nnodes + 1, sizeof *cnt), total = gpu_norm_counts(p, 132, cnt), sum = 0;
        int counted = 0;
        for (int i = 0; i < g->nnodes; i++) {
            counted += cnt[i] != 0;
            sum += cnt[i];
            good &= cnt[i] == 0 || (g->nodes[i]->op == IR_OP_PARAM && cnt[i] == KGEMM_SUMSQ_PER_BLOCK * 132);
        }
        CHECK(good && counted == named && total == sum, "%s: gpu_norm_counts: %d params, %lld doubles", what, counted,
              (long long)total);
        free(cnt);
        char *json = plan_to_json(p, 1);
        Plan *back = json ? plan_from_json(json, strlen(json), what, NULL, err, sizeof err) : NULL;
        char *json2 = back ? plan_to_json(back, 1) : NULL;
        CHECK(back && strcmp(json, json2) == 0, "%s: the norm arguments read back%s%s", what, back ? "" : ": ",
              back ? "" : err);
        if (named && back) {
            /* a norm argument made to name node 0 (an input), written out with a fresh checksum: refused */
            for (int l = 0; l < back->nlaunches; l++)
                for (int a = 0; a < back->launches[l].nargs && back->launches[l].targs; a++)
                    if (back->launches[l].targs[a].kind == PLAN_ARG_NORM)
                        back->launches[l].targs[a].value = 0;
            char *bad = plan_to_json(back, 1);
            Plan *refused = bad ? plan_from_json(bad, strlen(bad), what, NULL, err, sizeof err) : NULL;
            CHECK(bad && !refused && strstr(err, "which is no param"),
                  "%s: a norm of a node that is no param is refused (%s)", what, refused ? "read" : err);
            plan_free(refused);
            free(bad);
        }
        free(json);
        free(json2);
        plan_free(back);
        plan_free(p);
        compilation_free(&c);
    }
}

/* MOEC_GRAD_NORM, decision 73's switch: unset, empty or "separate" 0 (the default until it has run on a GPU), "gemm"
 * 1, anything else -1 with a message naming the variable and its values */
static void test_grad_norm_switch(void)
{
    char err[128] = "";
    const char *saved = getenv("MOEC_GRAD_NORM");
    char *keep = saved ? xstrdup(saved) : NULL;
    unsetenv("MOEC_GRAD_NORM");
    int unset = gpu_norm_from_gemm(err, sizeof err);
    setenv("MOEC_GRAD_NORM", "", 1);
    int empty = gpu_norm_from_gemm(err, sizeof err);
    setenv("MOEC_GRAD_NORM", "separate", 1);
    int sep = gpu_norm_from_gemm(err, sizeof err);
    setenv("MOEC_GRAD_NORM", "gemm", 1);
    int gemm = gpu_norm_from_gemm(err, sizeof err);
    setenv("MOEC_GRAD_NORM", "fused", 1);
    int bad = gpu_norm_from_gemm(err, sizeof err);
    CHECK(unset == 0 && empty == 0 && sep == 0 && gemm == 1 && bad == -1 &&
              strcmp(err, "MOEC_GRAD_NORM is 'gemm' or 'separate', not 'fused'") == 0,
          "MOEC_GRAD_NORM: unset %d, empty %d, separate %d, gemm %d, fused %d (%s)", unset, empty, sep, gemm, bad, err);
    if (keep)
        setenv("MOEC_GRAD_NORM", keep, 1);
    else
        unsetenv("MOEC_GRAD_NORM");
    free(keep);
}

int main(void)
{
    test_base64();
    test_e4m3_encode();
    test_e4m3_decode_and_scale();
    test_fake_quant_blocks();
    test_table();
    test_models();
    test_plan_refusals();
    test_fast_mlp();
    test_fast_mlp_fp8(0, 0);
    test_fast_mlp_fp8(1, 0);
    test_fast_mlp_fp8(1, 1);
    test_unread_srcs_io();
    test_fast_mlp_mx();
    test_norm_args();
    test_grad_norm_switch();
    test_bf16_storage();
    test_layer_layouts();
    test_needs_arch();
    test_attn_schedules();
    test_log_context();
    test_nvrtc();
    test_nvrtc_units();
    printf("test_codegen: %d passed, %d failed\n", npass, nfail);
    return nfail != 0;
}
