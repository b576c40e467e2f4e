/* layer.c - moec's side of the MoE layer benchmark: times ONE MoE block
 * (router, dispatch, expert MLP, combine; loss = mean_square(y)), forward
 * + backward, as bench/anchors.py times the PyTorch blocks at the same
 * shapes (bench/models/layer_*.moe; bench/layer.sh runs both).
 *
 *   layer DIR [--name S] [--reps N] [--warmup N] [--cpu-check] [--max-gib G] [--no-graph] [--launches]
 *             [--membound]
 *
 * DIR is `moec compile MODEL --emit-cuda DIR --arch sm_90a`: DIR/plan.json
 * (read with plan_from_json) and DIR/kernels.cubin, loaded as
 * tests/gpu/run_plan.c does, through the driver loader runtime/gpu/cudrv.h.
 * Parameters get their model's init (normal(0.02) in the layer models, as
 * anchors.py's p.normal_(0, 0.02)), the f32 input x N(0, 1) (anchors.py's
 * torch.randn), from a fixed seed. A weight larger than 2^24 elements
 * repeats a pool of 2^24 drawn values (drawing Mixtral's 1.4 G weights one
 * by one takes half a minute on the host; the fp32 kernels' time does not
 * depend on the weights' values, and routing depends on the router and x,
 * which are drawn in full).
 *
 * One iteration is the plan's launches [0, nlaunches): the forward and the
 * backward, no optimizer (the anchors time forward + backward too), replayed
 * as one CUDA graph as the training binary does (--no-graph: plain launches).
 * After --warmup iterations, --reps iterations each between its own pair
 * of CUDA events; the median is reported. FLOPs are counted exactly as
 * anchors.py counts them: 3 (forward + 2 backward) x 2 T k x 3 H F (the
 * gate, up and down GEMMs of the k experts of each token), so the TFLOP/s
 * of both sides divide the same number.
 *
 * The loss must be finite; with --cpu-check the CPU reference backend
 * (runtime/cpu, fp32) runs the same step on the same values and the loss
 * must agree within 1e-4 relative and every gradient within 1e-3 normwise
 * for the fp32 reference kernels; for a --kernels fast plan (bf16 operands
 * and intermediates) within 1e-2 both (5e-2 at fp8-block, docs/fp8-block.md), the bound docs/kernels-sm90.md
 * justifies. Plans whose memory (params + inputs + activations, from
 * plan->memory.region_bytes) exceeds --max-gib, or the GPU's free memory,
 * are skipped with a message (exit 0, a SKIP line).
 *
 * --membound (bench/membound.sh) takes any plan whose inputs are floats
 * (N(0, 1)) or i32 class ids (uniform in [0, V) for the V of the
 * cross_entropy or embedding that reads them), times every launch as
 * --launches does, and then prints one NODE line per IR node that launched
 * work, its launches' medians summed, beside the bytes plan_node_cost counts
 * for it (plan/cost.c: sources read and result written once, at their
 * storage sizes) and the achieved GB/s:
 *   NODE ms bytes GB/s %of4.24TB/s FLOP/byte kind op node kernel(s)
 * kind is mem (no GEMM, or a GEMM of under 32 FLOP per byte: the router's
 * skinny linear) or gemm; and one PART line per memory-bound launch inside
 * a GEMM node (the fast expert MLP's permute into the pad-to-tile layout,
 * its backward's dSwiGLU and scatter) with the bytes that launch must move:
 *   PART ms bytes GB/s %of4.24TB/s - part op node kernel
 *
 * Output: a few lines, then
 *   MEMORY name=S planned_gib=.. params_gib=.. activations_gib=.. device_used_gib=..
 * (the plan's regions, and the device memory this process took while it ran: cuMemGetInfo before the module
 * was loaded and after the timing), and last
 *   RESULT name=S T=.. H=.. F=.. E=.. k=.. ms=.. tokens_per_s=.. tflops=.. loss=.. cpu=ok|-|FAILED
 * which bench/layer.sh reads. Exit 1 when the loss is not finite or the CPU
 * check fails, 2 for usage errors. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../plan/plan.h"
#include "../runtime/cpu/cpu.h"
#include "../runtime/gpu/cudrv.h"
#include "../runtime/gpu/plan_args.h"
#include "../util/util.h"

/* errors in the input or the machine: a message and exit 1 (die() is for bugs) */
static _Noreturn void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "layer: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static const char *cu_what = "";
static void cu_check(CUresult r, const char *call)
{
    if (r != CUDA_SUCCESS) {
        char buf[160];
        fail("%s failed: %s%s%s", call, cudrv_error(r, buf, sizeof buf), *cu_what ? " at " : "", cu_what);
    }
}
#define CU(call) cu_check(cu.call, #call)

/* splitmix64 and Box-Muller: a fixed seed, reproducible values */
static uint64_t rng_state = 20261201;
static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }
static double rng_normal(void)
{
    double u = rng_uniform() + 1e-300, v = rng_uniform();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n)
        fail("cannot read %s", path);
    fclose(f);
    s[n] = 0;
    *len = (size_t)n;
    return s;
}

enum { POOL = 1 << 24 };

/* A parameter's values by its init attribute (the model's `init`). */
static void init_param(const IrNode *n, float *d, int64_t numel)
{
    IrInit init = (IrInit)ir_attr_e(n, IR_ATTR_INIT);
    double a = init == IR_INIT_NORMAL ? ir_attr_f(n, IR_ATTR_STD)
               : init == IR_INIT_UNIFORM ? ir_attr_f(n, IR_ATTR_BOUND)
               : init == IR_INIT_CONSTANT ? ir_attr_f(n, IR_ATTR_VALUE)
               : init == IR_INIT_ONES ? 1.0 : 0.0;
    if (init != IR_INIT_NORMAL && init != IR_INIT_UNIFORM) {
        for (int64_t e = 0; e < numel; e++)
            d[e] = (float)a;
        return;
    }
    int64_t drawn = numel < POOL ? numel : POOL;
    for (int64_t e = 0; e < drawn; e++)
        d[e] = (float)(init == IR_INIT_NORMAL ? a * rng_normal() : a * (2 * rng_uniform() - 1));
    for (int64_t e = drawn; e < numel; e += drawn) /* see the file's comment: a pool past 2^24 */
        memcpy(d + e, d, sizeof(float) * (size_t)(numel - e < drawn ? numel - e : drawn));
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* The class count of i32 ids (--membound): V of the first cross_entropy (logits [.., V]) or embedding
 * (table [V, d]) that reads them; 0 when none does. */
static int64_t class_bound(const IrGraph *g, const IrNode *ids)
{
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if ((n->op == IR_OP_CROSS_ENTROPY || n->op == IR_OP_MASKED_LM_LOSS) && n->src[1] == ids)
            return n->src[0]->shape[n->src[0]->rank - 1];
        if (n->op == IR_OP_EMBEDDING && n->src[0] == ids)
            return n->src[1]->shape[0];
    }
    return 0;
}

static double elems(const IrNode *n) { return (double)ir_numel(n); }

/* The bytes a memory-bound launch inside a GEMM node must move (--membound's PART lines), from its
 * node's shapes: the fast expert MLP's permute of the token rows (f32) into the pad-to-tile layout
 * (bf16) through the elided dispatch, its backward's permute of dy, the dSwiGLU row step (h, da in;
 * dh, a out: bf16) and the scatter of dxs back to the graph's rows (bf16 in, f32 out). Padding rows
 * are not counted. 0: not one of those (no PART line). */
static double part_bytes(const IrNode *n, const char *what)
{
    if (n->op == IR_OP_GROUPED_MLP && strstr(what, "token rows into zero-padded groups")) {
        const IrNode *xs = n->src[0]; /* [R, H], the elided dispatch of the [T, H] token rows */
        const IrNode *tok = xs->op == IR_OP_DISPATCH ? xs->src[0] : xs;
        return 4 * elems(tok) + 2 * elems(xs);
    }
    if (n->op == IR_OP_GROUPED_MLP_BWD) {
        const IrNode *dy = n->src[0], *xs = n->src[1], *wd = n->src[3];
        double R = elems(xs) / xs->shape[xs->rank - 1];
        double F = (double)wd->shape[2];
        if (strstr(what, "dy's token rows")) {
            const IrNode *tok = dy->op == IR_OP_DISPATCH ? dy->src[0] : dy;
            return 4 * elems(tok) + 2 * elems(dy);
        }
        if (strstr(what, "dSwiGLU"))
            return 2 * R * (2 * F + F + 2 * F + F) + 8 * R; /* h, da in; dh, a out; p in, dp out */
        if (strstr(what, "back to the graph's row order"))
            return (2 + 4) * elems(xs) + 8 * R;
    }
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: layer DIR [--name S] [--reps N] [--warmup N] [--cpu-check] [--max-gib G] [--no-graph] "
                    "[--launches] [--membound]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *name = NULL;
    int reps = 10, warmup = 2, cpu_check = 0, use_graph = 1, per_launch = 0, membound = 0;
    double max_gib = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--warmup") == 0 && i + 1 < argc)
            warmup = atoi(argv[++i]);
        else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
            name = argv[++i];
        else if (strcmp(argv[i], "--max-gib") == 0 && i + 1 < argc)
            max_gib = atof(argv[++i]);
        else if (strcmp(argv[i], "--cpu-check") == 0)
            cpu_check = 1;
        else if (strcmp(argv[i], "--no-graph") == 0)
            use_graph = 0;
        else if (strcmp(argv[i], "--launches") == 0)
            per_launch = 1;
        else if (strcmp(argv[i], "--membound") == 0)
            per_launch = membound = 1;
        else if (argv[i][0] == '-' || dir)
            usage();
        else
            dir = argv[i];
    }
    if (!dir || reps < 1 || warmup < 0)
        usage();
    if (membound && cpu_check)
        fail("--membound and --cpu-check do not go together (the CPU check is for layer models)");

    char path[4096], perr[2048];
    size_t len;
    snprintf(path, sizeof path, "%s/plan.json", dir);
    char *pj = read_file(path, &len);
    Plan *plan = pj ? plan_from_json(pj, len, path, NULL, perr, sizeof perr) : NULL;
    if (!plan)
        fail("cannot read %s: %s", path, pj ? perr : "no such file");
    IrGraph *g = plan->graph;
    if (!name)
        name = g->model;

    /* the shape, from the graph: x [.., H] the input, E and k from the
     * routing, F from the expert weight [E, 2F, H] */
    const IrNode *x = NULL, *attn = NULL;
    int64_t T = 0, H = 0, F = 0, E = 0, k = 0;
    int ninputs = 0;
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->op == IR_OP_SDPA && !attn)
            attn = n;
        if (n->op == IR_OP_INPUT && membound && !ir_dtype_is_float(n->dtype)) {
            if (n->dtype != IR_I32 || !class_bound(g, n))
                fail("%s: input %s: --membound takes float inputs and i32 ids read by a cross_entropy or an "
                     "embedding", path, n->name);
        } else if (n->op == IR_OP_INPUT) {
            if (!ir_dtype_is_float(n->dtype) || n->rank < 1)
                fail("%s: a layer model has float inputs only (model %s)", path, g->model);
            ninputs++;
            if (!x) {
                x = n;
                H = n->shape[n->rank - 1];
                T = ir_numel(n) / H;
            }
        } else if (n->op == IR_OP_TOPK_EXPERTS && !E) {
            E = n->src[0]->shape[n->src[0]->rank - 1];
            k = ir_attr_i(n, IR_ATTR_K);
        } else if ((n->op == IR_OP_GROUPED_MLP || n->op == IR_OP_GROUPED_LINEAR) && !F) {
            F = n->src[1]->shape[1] / 2;
        }
    }
    double flop;
    if (attn && !E) {
        /* an attention layer: y = sdpa(q, k, v), loss = mean_square(y); FLOPs as the flash-attention papers
         * and PyTorch count them: 4 B S^2 heads hd for the forward's two products (half of it causal), 2.5 x
         * that for the backward (5 products), so 3.5 x the forward in all. T = B S, H = q's width, F = the
         * head dim, E = heads, k = kv heads in the RESULT line. */
        const IrNode *q = attn->src[0];
        int64_t B = q->shape[0], S = q->shape[1];
        E = ir_attr_i(attn, IR_ATTR_HEADS);
        k = ir_attr_i(attn, IR_ATTR_KV_HEADS);
        H = q->shape[2];
        F = H / E;
        T = B * S;
        flop = 3.5 * 4.0 * (double)B * (double)S * (double)S * (double)H * (ir_attr_i(attn, IR_ATTR_CAUSAL) ? 0.5 : 1.0);
    } else if (membound) {
        flop = 0; /* any model: its GEMM FLOPs as plan/cost.c counts them */
        for (int i = 0; i < g->nnodes; i++)
            flop += plan_node_cost(plan, g->nodes[i]).flops;
    } else {
        if (!x || ninputs != 1 || !E || !F || !g->loss || g->loss->op != IR_OP_MEAN_SQUARE)
            fail("%s: not a layer model (one f32 input x, route_topk, the expert MLP, loss = mean_square(y); or "
                 "inputs q, k, v and loss = mean_square(sdpa(q, k, v)))", path);
        flop = 3.0 * 2.0 * (double)T * (double)k * 3.0 * (double)H * (double)F;
    }
    if (!g->loss || (!membound && g->loss->op != IR_OP_MEAN_SQUARE))
        fail("%s: a layer model's loss is mean_square(y)", path);
    double bytes = 0;
    for (int r = 0; r < PLAN_REGION_COUNT; r++)
        bytes += (double)plan->memory.region_bytes[r];
    printf("# %s: T %lld, H %lld, F %lld, E %lld, k %lld; %d launches; plan memory %.2f GiB "
           "(params %.2f, inputs %.2f, activations %.2f)\n",
           name, (long long)T, (long long)H, (long long)F, (long long)E, (long long)k, plan->nlaunches,
           bytes / 1073741824.0, plan->memory.region_bytes[PLAN_REGION_PARAMS] / 1073741824.0,
           plan->memory.region_bytes[PLAN_REGION_INPUTS] / 1073741824.0,
           plan->memory.region_bytes[PLAN_REGION_ACTIVATIONS] / 1073741824.0);
    fflush(stdout);
    if (max_gib > 0 && bytes > max_gib * 1073741824.0) {
        printf("SKIP name=%s: the plan needs %.2f GiB, above --max-gib %.2f\n", name, bytes / 1073741824.0, max_gib);
        return 0;
    }

    char err[512];
    if (!cudrv_load(err, sizeof err))
        fail("%s", err);
    CUdevice dev;
    CUcontext ctx;
    char devname[256];
    CU(cuDeviceGet(&dev, 0));
    CU(cuDeviceGetName(devname, sizeof devname, dev));
    CU(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU(cuCtxSetCurrent(ctx));
    size_t free_b = 0, total_b = 0;
    CU(cuMemGetInfo(&free_b, &total_b));
    if (bytes + (256 << 20) > (double)free_b) {
        printf("SKIP name=%s: the plan needs %.2f GiB, the GPU has %.2f GiB free\n", name, bytes / 1073741824.0,
               free_b / 1073741824.0);
        return 0;
    }
    snprintf(path, sizeof path, "%s/kernels.cubin", dir);
    char *cubin = read_file(path, &len);
    if (!cubin)
        fail("cannot read %s", path);
    KModules mod; /* the image's units, one module each (kimage.h) */
    {
        char kerr[600];
        if (kimage_load(&mod, cubin, len, kerr, sizeof kerr) != CUDA_SUCCESS)
            fail("%s: %s", path, kerr);
    }

    CUdeviceptr base[PLAN_REGION_COUNT];
    for (int r = 0; r < PLAN_REGION_COUNT; r++) {
        CU(cuMemAlloc(&base[r], (size_t)plan->memory.region_bytes[r] + 256));
        CU(cuMemsetD8Async(base[r], 0xFF, (size_t)plan->memory.region_bytes[r] + 256, NULL));
    }
    CUdeviceptr *dptr = calloc((size_t)plan->nbufs, sizeof *dptr);
    for (int b = 0; b < plan->nbufs; b++)
        dptr[b] = base[plan->bufs[b].region] + (CUdeviceptr)plan->bufs[b].offset;

    /* params and the input, on the host (kept for the CPU check) and uploaded */
    float **host = calloc((size_t)g->nnodes, sizeof *host);
    for (int i = 0; i < g->nnodes; i++) {
        const IrNode *n = g->nodes[i];
        if (n->op != IR_OP_PARAM && n->op != IR_OP_INPUT)
            continue;
        int64_t numel = ir_numel(n);
        if (plan->bufs[i].bytes != numel * 4)
            die("%s: buffer of %lld bytes for %lld f32 elements", n->name, (long long)plan->bufs[i].bytes,
                (long long)numel);
        host[i] = malloc(sizeof(float) * (size_t)numel);
        if (!host[i])
            die("out of memory for %s", n->name);
        if (n->op == IR_OP_PARAM) {
            init_param(n, host[i], numel);
        } else if (!ir_dtype_is_float(n->dtype)) {
            int32_t v, V = (int32_t)class_bound(g, n); /* i32 ids (--membound): uniform in [0, V) */
            for (int64_t e = 0; e < numel; e++) {
                v = (int32_t)(rng_next() % (uint64_t)V);
                memcpy(&host[i][e], &v, 4);
            }
        } else {
            for (int64_t e = 0; e < numel; e++)
                host[i][e] = (float)rng_normal();
        }
        CU(cuMemcpyHtoD(dptr[i], host[i], (size_t)numel * 4));
    }
    CU(cuCtxSynchronize()); /* the memsets and copies are done before the step's stream starts */
    {
        /* the params' bf16 working copies, as the backend writes them when it loads parameters */
        char cerr[512];
        if (gpu_fill_copies(plan, &mod, dptr, NULL, cerr, sizeof cerr) < 0)
            fail("%s", cerr);
    }

    CUstream stream;
    CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    CUfunction *fn = calloc((size_t)plan->nlaunches + 1, sizeof *fn);
    GpuArgs *gargs = calloc((size_t)plan->nlaunches + 1, sizeof *gargs);
    unsigned *grid = calloc((size_t)plan->nlaunches + 1, sizeof *grid);
    int sms = 0;
    CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    /* the weight-gradient GEMMs write their gradients' squares for the optimizer's norm where training has them do
     * it (decision 73, MOEC_GRAD_NORM=gemm): each into its own place in a scratch buffer, which nothing reads here */
    CUdeviceptr *norm_at = calloc((size_t)g->nnodes + 1, sizeof *norm_at), dnorm = 0;
    char nerr[128];
    int norm_gemm = gpu_norm_from_gemm(nerr, sizeof nerr);
    if (norm_gemm < 0)
        die("%s", nerr);
    int64_t *norm_count = calloc((size_t)g->nnodes + 1, sizeof *norm_count);
    int64_t norm_total = norm_gemm ? gpu_norm_counts(plan, sms, norm_count) : 0;
    if (norm_total) {
        CU(cuMemAlloc(&dnorm, (size_t)norm_total * sizeof(double)));
        int64_t o = 0;
        for (int i = 0; i < g->nnodes; i++)
            if (norm_count[i]) {
                norm_at[i] = dnorm + (CUdeviceptr)o * sizeof(double);
                o += norm_count[i];
            }
    }
    free(norm_count);
    for (int li = 0; li < plan->nlaunches; li++) {
        const PlanLaunch *l = &plan->launches[li];
        if (l->kernel < 0)
            die("%s: a host-side collective in a layer plan", g->nodes[l->node]->name);
        if (l->nargs > 32)
            die("%s: %d kernel arguments", g->nodes[l->node]->name, l->nargs);
        cu_what = plan->kernel_names[l->kernel];
        if (kimage_function(&mod, plan->kernel_names[l->kernel], &fn[li]) != CUDA_SUCCESS)
            fail("%s: no kernel %s in %s", name, plan->kernel_names[l->kernel], path);
        if (l->shared_bytes > 48 * 1024)
            CU(cuFuncSetAttribute(fn[li], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, l->shared_bytes));
        /* buffers, and the fast kernels' tensor maps and ints (runtime/gpu/plan_args.h, as the backend) */
        char aerr[512];
        if (!gpu_args_build(l, dptr, norm_at, &gargs[li], aerr, sizeof aerr))
            die("%s: %s", g->nodes[l->node]->name, aerr);
        CUresult gr;
        grid[li] = gpu_launch_grid_f(l, fn[li], sms, &gr);
        cu_check(gr, "cuOccupancyMaxActiveClusters");
    }
    cu_what = "";

    /* one step: forward + backward */
#define LAUNCH_ALL()                                                                                                \
    for (int li = 0; li < plan->nlaunches; li++) {                                                                  \
        const PlanLaunch *l = &plan->launches[li];                                                                  \
        cu_check(cudrv_launch(fn[li], grid[li], (unsigned)l->block, (unsigned)l->shared_bytes, stream, gargs[li].argp, \
                              l->cluster),                                                                          \
                 "cuLaunchKernel");                                                                                 \
    }
    CUgraphExec exec = NULL;
    CUgraph graph = NULL;
    if (use_graph) {
        CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
        LAUNCH_ALL();
        CU(cuStreamEndCapture(stream, &graph));
        CU(cuGraphInstantiate(&exec, graph, 0));
    }
#define STEP()                                                                                                      \
    do {                                                                                                            \
        if (exec)                                                                                                   \
            CU(cuGraphLaunch(exec, stream));                                                                        \
        else {                                                                                                      \
            LAUNCH_ALL();                                                                                           \
        }                                                                                                           \
    } while (0)

    STEP();
    CU(cuStreamSynchronize(stream));
    float loss_gpu;
    CU(cuMemcpyDtoH(&loss_gpu, dptr[g->loss->id], 4));
    for (int w = 0; w < warmup; w++)
        STEP();
    CU(cuStreamSynchronize(stream));
    CUevent *ev = calloc(2 * (size_t)reps, sizeof *ev);
    for (int r = 0; r < 2 * reps; r++)
        CU(cuEventCreate(&ev[r], CU_EVENT_DEFAULT));
    for (int r = 0; r < reps; r++) {
        CU(cuEventRecord(ev[2 * r], stream));
        STEP();
        CU(cuEventRecord(ev[2 * r + 1], stream));
    }
    CU(cuStreamSynchronize(stream));
    float *ms = malloc(sizeof(float) * (size_t)reps);
    for (int r = 0; r < reps; r++)
        CU(cuEventElapsedTime(&ms[r], ev[2 * r], ev[2 * r + 1]));
    qsort(ms, (size_t)reps, sizeof *ms, cmp_float);
    double med = reps % 2 ? ms[reps / 2] : 0.5 * (ms[reps / 2 - 1] + ms[reps / 2]);
    float loss_last;
    CU(cuMemcpyDtoH(&loss_last, dptr[g->loss->id], 4));
    printf("# %s on %s: %s, %d warm-up, %d timed: median %.3f ms (min %.3f, max %.3f)\n", name, devname,
           exec ? "one CUDA graph per step" : "plain launches", warmup, reps, med, ms[0], ms[reps - 1]);
    int bad = 0;
    if (!isfinite(loss_gpu) || loss_gpu != loss_last) {
        fprintf(stderr, "%s: loss %.9g on the first step, %.9g on the last: %s\n", name, loss_gpu, loss_last,
                isfinite(loss_gpu) ? "the same inputs must give the same bits" : "not finite");
        bad = 1;
    }

    if (per_launch) {
        /* each launch between its own events, plain launches (no graph), the median of `reps` steps:
         * where a step's time goes (the sum exceeds the graph's step by the launch gaps) */
        int nl = plan->nlaunches;
        CUevent *le = calloc((size_t)nl + 1, sizeof *le);
        float *lt = calloc((size_t)nl * (size_t)reps + 1, sizeof *lt), *col = calloc((size_t)reps + 1, sizeof *col);
        for (int li = 0; li <= nl; li++)
            CU(cuEventCreate(&le[li], CU_EVENT_DEFAULT));
        for (int r = 0; r < reps; r++) {
            CU(cuEventRecord(le[0], stream));
            for (int li = 0; li < nl; li++) {
                const PlanLaunch *l = &plan->launches[li];
                cu_check(cudrv_launch(fn[li], grid[li], (unsigned)l->block, (unsigned)l->shared_bytes, stream,
                                      gargs[li].argp, l->cluster),
                         "cuLaunchKernel");
                CU(cuEventRecord(le[li + 1], stream));
            }
            CU(cuStreamSynchronize(stream));
            for (int li = 0; li < nl; li++)
                CU(cuEventElapsedTime(&lt[(size_t)li * reps + r], le[li], le[li + 1]));
        }
        double total = 0;
        printf("# per launch (median of %d, plain launches): ms, share, kernel: what\n", reps);
        for (int li = 0; li < nl; li++) {
            memcpy(col, &lt[(size_t)li * reps], sizeof(float) * (size_t)reps);
            qsort(col, (size_t)reps, sizeof *col, cmp_float);
            double m = reps % 2 ? col[reps / 2] : 0.5 * (col[reps / 2 - 1] + col[reps / 2]);
            lt[(size_t)li * reps] = (float)m;
            total += m;
        }
        for (int li = 0; li < nl; li++) {
            const PlanLaunch *l = &plan->launches[li];
            printf("LAUNCH %3d %9.4f ms %5.1f%% %s: %.90s\n", li, lt[(size_t)li * reps], 100.0 * lt[(size_t)li * reps] / total,
                   plan->kernel_names[l->kernel], l->what);
        }
        printf("# per launch: %.4f ms in all\n", total);
        if (membound) {
            /* per node: its launches' medians summed, beside the bytes plan/cost.c counts for it */
            printf("# per node: NODE ms bytes GB/s %%-of-4.24-TB/s FLOP/byte kind op node kernel(s); "
                   "PART: a memory-bound launch of a GEMM node\n");
            for (int i = 0; i < g->nnodes; i++) {
                const IrNode *n = g->nodes[i];
                double m = 0;
                int first = -1, nk = 0;
                for (int li = 0; li < nl; li++)
                    if (plan->launches[li].node == i && plan->launches[li].kernel >= 0) {
                        m += lt[(size_t)li * reps];
                        if (first < 0)
                            first = li;
                        nk++;
                    }
                if (first < 0)
                    continue;
                PlanCost c = plan_node_cost(plan, n);
                double gbps = m > 0 ? c.bytes / (m * 1e-3) / 1e9 : 0, ai = c.bytes > 0 ? c.flops / c.bytes : 0;
                int mem = !c.gemm || ai < 32;
                char more[32] = "";
                if (nk > 1)
                    snprintf(more, sizeof more, "+%d", nk - 1);
                printf("NODE %9.4f %14.0f %8.1f %6.1f %8.1f %s %s %s %s%s\n", m, c.bytes, gbps, 100 * gbps / 4240.0,
                       ai, mem ? "mem" : "gemm", ir_op_name(n->op), n->name,
                       plan->kernel_names[plan->launches[first].kernel], more);
                if (mem)
                    continue;
                for (int li = first; li < nl; li++) {
                    const PlanLaunch *l = &plan->launches[li];
                    double pb = l->node == i && l->kernel >= 0 ? part_bytes(n, l->what) : 0;
                    if (pb <= 0)
                        continue;
                    double pm = lt[(size_t)li * reps], pg = pm > 0 ? pb / (pm * 1e-3) / 1e9 : 0;
                    printf("PART %9.4f %14.0f %8.1f %6.1f %8s part %s %s %s\n", pm, pb, pg, 100 * pg / 4240.0, "-",
                           ir_op_name(n->op), n->name, plan->kernel_names[l->kernel]);
                }
            }
        }
        for (int li = 0; li <= nl; li++)
            cu.cuEventDestroy(le[li]);
        free(le);
        free(lt);
        free(col);
    }

    const char *cpu_status = "-";
    if (cpu_check) {
        CpuPlan cpu;
        cpu_plan_init(&cpu, g, CPU_F32);
        cpu_plan_round_bf16(&cpu, plan); /* rounded where the plan stores bf16, as the GPU (docs/decisions.md 40) */
        for (int i = 0; i < g->nnodes; i++)
            if (host[i])
                cpu_plan_bind(&cpu, g->nodes[i], host[i]);
        cpu_plan_run(&cpu);
        double lc = cpu_plan_scalar(&cpu, g->loss), rel = fabs(loss_gpu - lc) / fmax(fabs(lc), 1e-30);
        int fast = plan->source.kernels == PLAN_KERNELS_FAST;
        /* fp8-block's and MXFP8's fast expert MLP: 5e-2, the bound tests/gpu/run_plan.c argues (docs/fp8-block.md,
         * docs/mxfp8.md) */
        double fast_tol = g->train.precision == IR_PREC_FP8_BLOCK || g->train.precision == IR_PREC_MXFP8 ? 5e-2 : 1e-2;
        double tol_loss = fast ? fast_tol : 1e-4, tol_grad = fast ? fast_tol : 1e-3;
        printf("# cpu check: loss gpu %.9g, cpu %.9g, relative difference %.2e (within %.0e: %s)\n", loss_gpu, lc,
               rel, tol_loss, rel < tol_loss ? "yes" : "NO");
        int ok = rel < tol_loss;
        for (int p = 0; p < g->nparams; p++) {
            const IrNode *gn = g->grads[p];
            int64_t numel = ir_numel(gn);
            float *got = malloc(sizeof(float) * (size_t)numel);
            CU(cuMemcpyDtoH(got, dptr[gn->id], (size_t)numel * 4));
            const float *want = cpu_plan_data(&cpu, gn);
            double sd = 0, sw = 0;
            for (int64_t e = 0; e < numel; e++) {
                double d = (double)got[e] - want[e];
                sd += d * d;
                sw += (double)want[e] * want[e];
            }
            double nr = sw > 0 ? sqrt(sd / sw) : sqrt(sd);
            printf("# cpu check: d loss / d %-12s normwise relative difference %.2e%s\n", g->params[p]->name, nr,
                   nr < tol_grad ? "" : " (above the bound)");
            ok &= nr < tol_grad;
            free(got);
        }
        cpu_status = ok ? "ok" : "FAILED";
        bad |= !ok;
        cpu_plan_free(&cpu);
    }
    /* the memory the plan asks for against what the device lost while this process ran it: the regions, the
     * module, the CUDA graph and the driver's own (cuMemGetInfo's free memory before the module was loaded, and
     * now; the CPU check's host memory not included) */
    {
        size_t free_now = 0, total_now = 0;
        CU(cuMemGetInfo(&free_now, &total_now));
        printf("MEMORY name=%s planned_gib=%.3f params_gib=%.3f activations_gib=%.3f device_used_gib=%.3f\n", name,
               bytes / 1073741824.0, plan->memory.region_bytes[PLAN_REGION_PARAMS] / 1073741824.0,
               plan->memory.region_bytes[PLAN_REGION_ACTIVATIONS] / 1073741824.0,
               ((double)free_b - (double)free_now) / 1073741824.0);
    }
    printf("RESULT name=%s T=%lld H=%lld F=%lld E=%lld k=%lld ms=%.4f tokens_per_s=%.0f tflops=%.3f loss=%.9g cpu=%s\n",
           name, (long long)T, (long long)H, (long long)F, (long long)E, (long long)k, med, (double)T / (med / 1e3),
           flop / (med / 1e3) / 1e12, loss_gpu, cpu_status);

    for (int r = 0; r < 2 * reps; r++)
        cu.cuEventDestroy(ev[r]);
    if (exec) {
        cu.cuGraphExecDestroy(exec);
        cu.cuGraphDestroy(graph);
    }
    cu.cuStreamDestroy(stream);
    for (int r = 0; r < PLAN_REGION_COUNT; r++)
        cu.cuMemFree(base[r]);
    if (dnorm)
        cu.cuMemFree(dnorm);
    free(norm_at);
    kimage_unload(&mod);
    for (int i = 0; i < g->nnodes; i++)
        free(host[i]);
    free(host);
    free(ev);
    free(ms);
    free(fn);
    for (int li = 0; li < plan->nlaunches; li++)
        gpu_args_free(&gargs[li]);
    free(gargs);
    free(grid);
    free(dptr);
    free(cubin);
    plan_free(plan);
    free(pj);
    return bad;
}
