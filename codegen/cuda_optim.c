/* cuda_optim.c - the optimizer's kernels, appended to every kernels.cu:
 * the gradient norm (sums of squares per block, then one block adding the
 * partials) and the AdamW step of runtime/cpu/backend.c optimizer_step: decoupled
 * weight decay, bias correction, gradient clipping. The betas and eps are
 * the train section's, as constants; the param's weight decay (0 for norms
 * and embeddings unless the model asks) is an argument; lr (from the
 * schedule), the bias corrections 1 - beta^step and the clip factor are
 * read from the step's scalars in device memory, so a step needs no host
 * round trip and can be captured in a CUDA graph. The update is written with explicitly rounded operations
 * (__dmul_rn, __dadd_rn, ...) so that no multiply-add is contracted: it
 * computes the CPU's formula operation by operation, bit for bit. */
#include "cuda_internal.h"
#include "../util/util.h"

static void emit_to_bf16(Sb *src)
{
    sb_puts(src,
            "// a param's bf16 working copy from its fp32 values (after the parameters are loaded; the optimizer's\n"
            "// steps keep it current with moec_adamw_bf16)\n"
            "extern \"C\" __global__ void __launch_bounds__(256) moec_to_bf16(unsigned short *__restrict__ dst, "
            "const float *__restrict__ src, long long n, long long glu_f, long long cols)\n"
            "{\n"
            "    MOEC_FOR(i, n)\n"
            "        dst[moec::glu_index(i, glu_f, cols)] = moec::bf16_bits(src[i]);\n"
            "}\n");
}

/* the fast AdamW's update of one element (moec_adamw, moec_adamw_bf16 and moec_adamw_fp8b_* run these same
 * lines, so that w, m and v come out bit for bit the same whichever kernel a param gets). Every rounding is
 * written out (__fmul_rn, __fadd_rn and __fdiv_rn are never contracted into an FMA; __fmaf_rn is one): with
 * plain `a * b + c` NVRTC chooses per kernel which products to fuse, and the H200 measured moec_adamw_fp8b's
 * w, m, v differing from moec_adamw's on the same inputs (tests/gpu/run_plan.c, 2026-12-02) while the
 * emulator, which never contracts, agreed. */
static const char ADAMW_FAST_STEP[] =
    "    auto step = [&](float &wi, float &mi, float &vi, float gi) {\n"
    "        const float gg = __fmul_rn(gi, clip);\n"
    "        mi = __fmaf_rn(B1, mi, __fmul_rn(1.0f - B1, gg));\n"
    "        vi = __fmaf_rn(B2, vi, __fmul_rn(__fmul_rn(1.0f - B2, gg), gg));\n"
    "        wi = __fmaf_rn(wi, decay,\n"
    "                       -__fmul_rn(lr, __fdiv_rn(__fmul_rn(mi, rbc1), __fadd_rn(__fsqrt_rn(__fmul_rn(vi, rbc2)), EPS))));\n"
    "    };\n";
static const char ADAMW_FAST_SCALARS[] =
    "    const float lr = (float)s[0], rbc1 = (float)(1.0 / s[1]), rbc2 = (float)(1.0 / s[2]), clip = (float)s[3];\n"
    "    const float decay = (float)(1.0 - s[0] * wd);\n";

/* The fp8-block expert weights' e4m3 working copies (plan.h PlanFp8Copy, decision 44): per distinct shape
 * [E, N, K], moec_adamw_fp8b_ExNxK (moec_adamw's arguments, then the copy) updates w, m and v with the lines
 * above and writes the new w's 128x128 tiles, their scales and the transposed tiles in the same pass: the
 * weight quantiser of fp8_block_fast.cuh (moec::fp8b::quant_weight_from, one 512-thread block per tile, each
 * value read once) reading its values from AdamwValues, which updates the 4 elements it is asked for and
 * returns the new w. moec_fp8b_copy_ExNxK writes the copy from the values alone (after parameters are loaded).
 * The same quantiser as the per-step pass of decision 38, so the codes are the same bytes (the emulator test
 * tests/codegen/fp8b_quant.test checks both against runtime/cpu/fp8_block.c). */
static void emit_fp8b_copies(Cg *cg, Sb *src, const char *b1, const char *b2, const char *eps)
{
    int any = 0;
    for (int b = cg->g->nnodes; b < cg->nbufs; b++)
        any |= cg->bufs[b].kind == PLAN_BUF_COPY && cg->bufs[b].storage == PLAN_E4M3;
    if (!any)
        return;
    if (!cg->fp8b_used)
        die("codegen: e4m3 weight copies without the fp8-block device code");
    sb_puts(src, "// the 8-bit expert weights' e4m3 copies (plan.h PlanFp8Copy): AdamW and the weight quantiser (fp8-block's\n"
                 "// 128x128 tiles, or MXFP8's 1x32 blocks) in one pass (docs/decisions.md 44, 55)\n"
                 "namespace moec {\n"
                 "namespace fp8b {\n"
                 "// quant_weight_from's source: moec_adamw's update of the 4 elements from i, written back to w, m and v,\n"
                 "// the new w returned (vec: all four 16-byte aligned; else one element at a time, the same lines)\n"
                 "struct AdamwValues {\n"
                 "    float *w, *m, *v;\n"
                 "    const float *g;\n"
                 "    float lr, rbc1, rbc2, clip, decay;\n"
                 "    bool vec;\n"
                 "    __device__ __forceinline__ float4 load4(long long i) const\n"
                 "    {\n");
    sb_printf(src, "    constexpr float B1 = (float)%s, B2 = (float)%s, EPS = (float)%s;\n", b1, b2, eps);
    sb_puts(src, ADAMW_FAST_STEP);
    sb_puts(src, "        float4 wv, mv, vv, gv;\n"
                 "        if (vec) {\n"
                 "            wv = *(const float4 *)(w + i), mv = *(const float4 *)(m + i), vv = *(const float4 *)(v + i);\n"
                 "            gv = *(const float4 *)(g + i);\n"
                 "        } else {\n"
                 "            wv = make_float4(w[i], w[i + 1], w[i + 2], w[i + 3]);\n"
                 "            mv = make_float4(m[i], m[i + 1], m[i + 2], m[i + 3]);\n"
                 "            vv = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);\n"
                 "            gv = make_float4(g[i], g[i + 1], g[i + 2], g[i + 3]);\n"
                 "        }\n"
                 "        step(wv.x, mv.x, vv.x, gv.x);\n"
                 "        step(wv.y, mv.y, vv.y, gv.y);\n"
                 "        step(wv.z, mv.z, vv.z, gv.z);\n"
                 "        step(wv.w, mv.w, vv.w, gv.w);\n"
                 "        if (vec) {\n"
                 "            *(float4 *)(w + i) = wv, *(float4 *)(m + i) = mv, *(float4 *)(v + i) = vv;\n"
                 "        } else {\n"
                 "            w[i] = wv.x, w[i + 1] = wv.y, w[i + 2] = wv.z, w[i + 3] = wv.w;\n"
                 "            m[i] = mv.x, m[i + 1] = mv.y, m[i + 2] = mv.z, m[i + 3] = mv.w;\n"
                 "            v[i] = vv.x, v[i + 1] = vv.y, v[i + 2] = vv.z, v[i + 3] = vv.w;\n"
                 "        }\n"
                 "        return wv;\n"
                 "    }\n"
                 "};\n"
                 "} // namespace fp8b\n"
                 "} // namespace moec\n\n");
    for (int b = cg->g->nnodes; b < cg->nbufs; b++) {
        const CgBuf *c = &cg->bufs[b];
        if (c->kind != PLAN_BUF_COPY || c->storage != PLAN_E4M3)
            continue;
        PlanFp8Copy fc;
        if (!plan_fp8b_copy_layout(cg->g, cg->g->nodes[c->node], &fc))
            die("codegen: %s is no e4m3 copy of an [E, N, K] weight", c->name);
        int seen = 0; /* one pair of kernels per shape */
        for (int o = cg->g->nnodes; o < b && !seen; o++) {
            PlanFp8Copy oc;
            seen = cg->bufs[o].kind == PLAN_BUF_COPY && cg->bufs[o].storage == PLAN_E4M3 &&
                   plan_fp8b_copy_layout(cg->g, cg->g->nodes[cg->bufs[o].node], &oc) && oc.e == fc.e && oc.n == fc.n &&
                   oc.k == fc.k;
        }
        if (seen)
            continue;
        char upd[96], load[96], tmpl[96], ptrs[160];
        const char *ns = fc.mx ? "mx8" : "fp8b"; /* the quantiser: MXFP8's 1x32 blocks or fp8-block's tiles */
        plan_fp8b_kernel_name(&fc, 1, upd, sizeof upd);
        plan_fp8b_kernel_name(&fc, 0, load, sizeof load);
        snprintf(tmpl, sizeof tmpl, "%lld, %lldll, %lldll", (long long)fc.e, (long long)fc.n, (long long)fc.k);
        snprintf(ptrs, sizeof ptrs, "c + %lldll, c + %lldll, c + %lldll, c + %lldll", (long long)fc.q, (long long)fc.s,
                 (long long)fc.qt, (long long)fc.st);
        sb_printf(src,
                  "// w [%lld, %lld, %lld]: AdamW, then the new w's %s into its copy c (one 512-thread block per "
                  "128x128 tile)\n"
                  "extern \"C\" __global__ void __launch_bounds__(512) %s(float *__restrict__ w, float *__restrict__ m, "
                  "float *__restrict__ v, const float *__restrict__ g, long long n, const double *__restrict__ s, "
                  "double wd, unsigned char *__restrict__ c)\n"
                  "{\n"
                  "    (void)n; /* = %lld */\n",
                  (long long)fc.e, (long long)fc.n, (long long)fc.k,
                  fc.mx ? "MXFP8 codes (1x32 along K, and 32x1 along N stored as W^T)" : "tiles", upd,
                  (long long)(fc.e * fc.n * fc.k));
        sb_puts(src, ADAMW_FAST_SCALARS);
        sb_printf(src,
                  "    const bool vec = (((unsigned long long)w | (unsigned long long)m | (unsigned long long)v | "
                  "(unsigned long long)g) & 15) == 0;\n"
                  "    moec::%s::quant_weight_from<%s>(%s, moec::fp8b::AdamwValues{w, m, v, g, lr, rbc1, rbc2, clip, "
                  "decay, vec});\n"
                  "}\n\n"
                  "// the copy c of w [%lld, %lld, %lld] from its values (after parameters are loaded)\n"
                  "extern \"C\" __global__ void __launch_bounds__(512) %s(unsigned char *__restrict__ c, "
                  "const float *__restrict__ w)\n"
                  "{\n"
                  "    moec::%s::quant_weight<%s>(%s, w);\n"
                  "}\n\n",
                  ns, tmpl, ptrs, (long long)fc.e, (long long)fc.n, (long long)fc.k, load, ns, tmpl, ptrs);
    }
}

/* --kernels fast: the same AdamW in fp32 arithmetic (the reference's double formula, operation by operation, is
 * bound by the FP64 units' divisions and square root: 4.2 ms of a 10.1 ms bench_bio step), 16-byte loads and
 * stores where all four tensors are 16-byte aligned. Deterministic; within a few fp32 ulps of the CPU's update
 * (tests/gpu/run_plan.c checks it). The same names and arguments as the reference kernels. */
static void emit_adamw_fast(Cg *cg, Sb *src, const char *b1, const char *b2, const char *eps)
{
    for (int copy = 0; copy < 2; copy++) {
        sb_printf(src,
                  "extern \"C\" __global__ void __launch_bounds__(256) moec_adamw%s(float *__restrict__ w, "
                  "float *__restrict__ m, float *__restrict__ v, const float *__restrict__ g, long long n, "
                  "const double *__restrict__ s, double wd%s)\n"
                  "{\n",
                  copy ? "_bf16" : "",
                  copy ? ", unsigned short *__restrict__ w16, long long glu_f, long long cols" : "");
        sb_printf(src, "    constexpr float B1 = (float)%s, B2 = (float)%s, EPS = (float)%s;\n", b1, b2, eps);
        sb_puts(src, ADAMW_FAST_SCALARS);
        sb_puts(src, ADAMW_FAST_STEP);
        sb_puts(src,
                "    const long long stride = (long long)gridDim.x * blockDim.x, t0 = (long long)blockIdx.x * blockDim.x "
                "+ threadIdx.x;\n"
                "    long long done = 0;\n"
                "    if ((((unsigned long long)w | (unsigned long long)m | (unsigned long long)v | (unsigned long long)g) "
                "& 15) == 0) {\n"
                "        done = n / 4 * 4;\n"
                "        for (long long q = t0; q < n / 4; q += stride) {\n"
                "            float4 wv = ((float4 *)w)[q], mv = ((float4 *)m)[q], vv = ((float4 *)v)[q];\n"
                "            const float4 gv = ((const float4 *)g)[q];\n"
                "            step(wv.x, mv.x, vv.x, gv.x);\n"
                "            step(wv.y, mv.y, vv.y, gv.y);\n"
                "            step(wv.z, mv.z, vv.z, gv.z);\n"
                "            step(wv.w, mv.w, vv.w, gv.w);\n"
                "            ((float4 *)w)[q] = wv;\n"
                "            ((float4 *)m)[q] = mv;\n"
                "            ((float4 *)v)[q] = vv;\n");
        if (copy)
            sb_puts(src,
                    "            w16[moec::glu_index(4 * q, glu_f, cols)] = moec::bf16_bits(wv.x);\n"
                    "            w16[moec::glu_index(4 * q + 1, glu_f, cols)] = moec::bf16_bits(wv.y);\n"
                    "            w16[moec::glu_index(4 * q + 2, glu_f, cols)] = moec::bf16_bits(wv.z);\n"
                    "            w16[moec::glu_index(4 * q + 3, glu_f, cols)] = moec::bf16_bits(wv.w);\n");
        sb_puts(src,
                "        }\n"
                "    }\n"
                "    for (long long i = done + t0; i < n; i += stride) {\n"
                "        float wi = w[i], mi = m[i], vi = v[i];\n"
                "        step(wi, mi, vi, g[i]);\n"
                "        w[i] = wi;\n"
                "        m[i] = mi;\n"
                "        v[i] = vi;\n");
        if (copy)
            sb_puts(src, "        w16[moec::glu_index(i, glu_f, cols)] = moec::bf16_bits(wi);\n");
        sb_puts(src, "    }\n}\n\n");
    }
    emit_to_bf16(src);
    emit_fp8b_copies(cg, src, b1, b2, eps);
}

void cg_emit_optimizer(Cg *cg, Sb *src)
{
    const IrTrain *t = &cg->g->train;
    char b1[64], b2[64], eps[64];
    sb_puts(src, "\n// ======== the optimizer: AdamW (runtime/cpu/backend.c optimizer_step) ========\n\n");
    sb_puts(src,
            "// gradient norm 1/2: the sum of squares of a gradient, one partial per block (grid <= 1024);\n"
            "// launched for every gradient, into its own slice of the partials\n"
            "extern \"C\" __global__ void __launch_bounds__(256) moec_grad_sumsq(double *__restrict__ partial, "
            "const float *__restrict__ g, long long n)\n"
            "{\n"
            "    double s = 0.0;\n"
            "    MOEC_FOR(i, n)\n"
            "        s += (double)g[i] * g[i];\n"
            "    s = moec::block_sum<256>(s);\n"
            "    if (threadIdx.x == 0)\n"
            "        partial[blockIdx.x] = s;\n"
            "}\n\n"
            "// gradient norm 2/2: out[0] = the sum of n partials, one block\n"
            "extern \"C\" __global__ void __launch_bounds__(256) moec_sum_partials(double *__restrict__ out, "
            "const double *__restrict__ partial, long long n)\n"
            "{\n"
            "    double s = 0.0;\n"
            "    for (long long i = threadIdx.x; i < n; i += blockDim.x)\n"
            "        s += partial[i];\n"
            "    s = moec::block_sum<256>(s);\n"
            "    if (threadIdx.x == 0)\n"
            "        out[0] = s;\n"
            "}\n\n");
    sb_puts(src,
            "// y = y * f in place: the factor of an all_reduce node (runtime/gpu/gpu.c, after NCCL's sum), as the\n"
            "// CPU applies it: (float)((double)y * f)\n"
            "extern \"C\" __global__ void __launch_bounds__(256) moec_scale(float *__restrict__ y, long long n, double f)\n"
            "{\n"
            "    MOEC_FOR(i, n)\n"
            "        y[i] = (float)__dmul_rn((double)y[i], f);\n"
            "}\n\n");
    sb_puts(src,
            "// --grad-accum (runtime/gpu/gpu.c): each micro-batch's gradient g with its weight w added to a double\n"
            "// sum, acc = (first ? 0 : acc) + w * g, then the sum as the gradient the optimizer reads, (float)acc: the\n"
            "// CPU backend's accum_step, operation by operation\n"
            "extern \"C\" __global__ void __launch_bounds__(256) moec_accum(double *__restrict__ acc, "
            "const float *__restrict__ g, long long n, double w, int first)\n"
            "{\n"
            "    MOEC_FOR(i, n)\n"
            "        acc[i] = __dadd_rn(first ? 0.0 : acc[i], __dmul_rn(w, (double)g[i]));\n"
            "}\n\n"
            "extern \"C\" __global__ void __launch_bounds__(256) moec_accum_out(float *__restrict__ g, "
            "const double *__restrict__ acc, long long n)\n"
            "{\n"
            "    MOEC_FOR(i, n)\n"
            "        g[i] = (float)acc[i];\n"
            "}\n\n");
    sb_puts(src,
            "// the MoE metrics of the training steps (runtime/gpu/gpu.c; the CPU backend's runtime/cpu/moe_metrics.c,\n"
            "// the same quantities): per block of rows of one layer, the assignments per expert, the router's\n"
            "// probabilities summed per expert and the summed per-token entropy, from the router's logits [n, e]\n"
            "// and the chosen experts [n, k]: part[block] = {f[0..e), P[0..e), entropy}, each a fixed-order sum\n"
            "extern \"C\" __global__ void __launch_bounds__(256) moec_moe_stats(double *__restrict__ part, "
            "const float *__restrict__ logits, const int *__restrict__ ex, long long n, int e, int k)\n"
            "{\n"
            "    double P[64], f[64], ent = 0.0;\n"
            "    for (int j = 0; j < e; j++)\n"
            "        P[j] = f[j] = 0.0;\n"
            "    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n;\n"
            "         t += (long long)gridDim.x * blockDim.x) {\n"
            "        const float *row = logits + t * e;\n"
            "        double mx = moec::neg_inf(), sum = 0.0, pr[64];\n"
            "        for (int j = 0; j < e; j++)\n"
            "            mx = (double)row[j] > mx ? (double)row[j] : mx;\n"
            "        for (int j = 0; j < e; j++)\n"
            "            sum += pr[j] = exp((double)row[j] - mx);\n"
            "        for (int j = 0; j < e; j++) {\n"
            "            double q = pr[j] / sum;\n"
            "            P[j] += q;\n"
            "            if (q > 0.0)\n"
            "                ent -= q * log(q);\n"
            "        }\n"
            "        for (int j = 0; j < k; j++) {\n"
            "            int x = ex[t * k + j];\n"
            "            if (x >= 0 && x < e)\n"
            "                f[x] += 1.0;\n"
            "        }\n"
            "    }\n"
            "    double *out = part + (long long)blockIdx.x * (2 * e + 1);\n"
            "    for (int j = 0; j < e; j++) {\n"
            "        double a = moec::block_sum<256>(f[j]), b = moec::block_sum<256>(P[j]);\n"
            "        if (threadIdx.x == 0) {\n"
            "            out[j] = a;\n"
            "            out[e + j] = b;\n"
            "        }\n"
            "    }\n"
            "    ent = moec::block_sum<256>(ent);\n"
            "    if (threadIdx.x == 0)\n"
            "        out[2 * e] = ent;\n"
            "}\n\n"
            "// the layer's blocks summed in order and added to its accumulator acc = {rows, f[0..e), entropy, aux}:\n"
            "// rows += n, f += the assignments, entropy += the mean per-token entropy, aux += e * sum_i f_i P_i / n^2\n"
            "// (the load-balancing loss of this pass); one block\n"
            "extern \"C\" __global__ void __launch_bounds__(256) moec_moe_stats_add(double *__restrict__ acc, "
            "const double *__restrict__ part, int blocks, long long n, int e)\n"
            "{\n"
            "    __shared__ double col[129];\n"
            "    for (int j = threadIdx.x; j < 2 * e + 1; j += blockDim.x) {\n"
            "        double s = 0.0;\n"
            "        for (int b = 0; b < blocks; b++)\n"
            "            s += part[(long long)b * (2 * e + 1) + j];\n"
            "        col[j] = s;\n"
            "    }\n"
            "    __syncthreads();\n"
            "    if (threadIdx.x == 0) {\n"
            "        double aux = 0.0, dn = (double)n;\n"
            "        for (int j = 0; j < e; j++) {\n"
            "            acc[1 + j] += col[j];\n"
            "            aux += (col[j] / dn) * (col[e + j] / dn);\n"
            "        }\n"
            "        acc[0] += dn;\n"
            "        acc[1 + e] += n ? col[2 * e] / dn : 0.0;\n"
            "        acc[2 + e] += (double)e * aux;\n"
            "    }\n"
            "}\n\n"
            "// acc[0] += v[0]: a scalar node's value (the loss, the language-model loss) added to the step metrics\n"
            "extern \"C\" __global__ void __launch_bounds__(32) moec_metric_add(double *__restrict__ acc, "
            "const float *__restrict__ v)\n"
            "{\n"
            "    if (blockIdx.x == 0 && threadIdx.x == 0)\n"
            "        acc[0] += (double)v[0];\n"
            "}\n\n");
    sb_puts(src,
            "// the step's scalars, one double array in device memory (runtime/gpu/gpu.c): s[0] lr, s[1] 1 - beta1^step,\n"
            "// s[2] 1 - beta2^step (the host writes these), s[3] the clip factor and s[4] the global norm (moec_clip),\n"
            "// s[5] the sum of squares of the dense gradients and s[6] of the expert shards (moec_sum_partials; s[6]\n"
            "// already summed over the expert-parallel group). Reading them on the device keeps the host out of the step.\n"
            "extern \"C\" __global__ void __launch_bounds__(32) moec_clip(double *__restrict__ s, double max_norm)\n"
            "{\n"
            "    if (blockIdx.x == 0 && threadIdx.x == 0) {\n"
            "        double norm = __dsqrt_rn(__dadd_rn(s[5], s[6]));\n"
            "        s[4] = norm;\n"
            "        s[3] = max_norm > 0.0 && norm > max_norm ? __ddiv_rn(max_norm, __dadd_rn(norm, 1e-6)) : 1.0;\n"
            "    }\n"
            "}\n\n");
    sb_printf(src,
              "// adamw(betas = (%s, %s), eps = %s): one parameter tensor of n elements; wd is the param's weight\n"
              "// decay (0 where it has none); lr, the bias corrections and the clip factor are read from s.\n",
              cg_dbl(b1, t->beta1), cg_dbl(b2, t->beta2), cg_dbl(eps, t->eps));
    /* moec_adamw and moec_adamw_bf16 (which also writes the param's bf16 working copy, plan.h
     * PLAN_BUF_COPY, in the same pass) from one text: the same formula */
    if (cg->kernel_choice == PLAN_KERNELS_FAST) {
        emit_adamw_fast(cg, src, b1, b2, eps);
        return;
    }
    for (int copy = 0; copy < 2; copy++) {
        sb_printf(src,
                  "extern \"C\" __global__ void __launch_bounds__(256) moec_adamw%s(float *__restrict__ w, "
                  "float *__restrict__ m, float *__restrict__ v, const float *__restrict__ g, long long n, "
                  "const double *__restrict__ s, double wd%s)\n"
                  "{\n",
                  copy ? "_bf16" : "",
                  copy ? ", unsigned short *__restrict__ w16, long long glu_f, long long cols" : "");
        sb_printf(src, "    constexpr double B1 = %s, B2 = %s, EPS = %s;\n", b1, b2, eps);
        sb_puts(src,
                "    const double lr = s[0], bc1 = s[1], bc2 = s[2], clip = s[3];\n"
                "    MOEC_FOR(i, n) {\n"
                "        double gv = __dmul_rn((double)g[i], clip);\n"
                "        m[i] = (float)__dadd_rn(__dmul_rn(B1, (double)m[i]), __dmul_rn(1.0 - B1, gv));\n"
                "        v[i] = (float)__dadd_rn(__dmul_rn(B2, (double)v[i]), __dmul_rn(__dmul_rn(1.0 - B2, gv), gv));\n"
                "        double upd = __ddiv_rn(__ddiv_rn((double)m[i], bc1), __dadd_rn(__dsqrt_rn(__ddiv_rn((double)v[i], "
                "bc2)), EPS));\n");
        if (copy)
            sb_puts(src,
                    "        const float nw = (float)__dsub_rn(__dmul_rn((double)w[i], __dsub_rn(1.0, __dmul_rn(lr, wd))), "
                    "__dmul_rn(lr, upd));\n"
                    "        w[i] = nw;\n"
                    "        w16[moec::glu_index(i, glu_f, cols)] = moec::bf16_bits(nw);\n");
        else
            sb_puts(src,
                    "        w[i] = (float)__dsub_rn(__dmul_rn((double)w[i], __dsub_rn(1.0, __dmul_rn(lr, wd))), "
                    "__dmul_rn(lr, upd));\n");
        sb_puts(src, "    }\n}\n\n");
    }
    emit_to_bf16(src);
}
