/* cuda_optim.c - the optimizer's kernels, appended to every kernels.cu:
 * the gradient norm (sums of squares per block, then one block adding the
 * partials) and the AdamW step of runtime/train.c optimizer_step: decoupled
 * weight decay, bias correction, the clipping factor as an argument. The
 * betas and eps are the train section's, as constants; lr (from the
 * schedule), the param's weight decay (0 for norms and embeddings unless
 * the model asks), the clip factor and the bias corrections 1 - beta^step
 * are arguments. The update is written with explicitly rounded operations
 * (__dmul_rn, __dadd_rn, ...) so that no multiply-add is contracted: it
 * computes the CPU's formula operation by operation, bit for bit. */
#include "cuda_internal.h"
#include "../ir/util.h"

void cg_emit_optimizer(Cg *cg, Sb *src)
{
    const IrTrain *t = &cg->g->train;
    char b1[64], b2[64], eps[64];
    sb_puts(src, "\n// ======== the optimizer: AdamW (runtime/train.c optimizer_step) ========\n\n");
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
    sb_printf(src,
              "// adamw(betas = (%s, %s), eps = %s): one parameter tensor of n elements. lr and wd (the\n"
              "// param's weight decay, 0 where it has none), clip (the gradient clipping factor) and the bias\n"
              "// corrections bc1 = 1 - beta1^step, bc2 = 1 - beta2^step come from the host.\n",
              cg_dbl(b1, t->beta1), cg_dbl(b2, t->beta2), cg_dbl(eps, t->eps));
    sb_puts(src,
            "extern \"C\" __global__ void __launch_bounds__(256) moec_adamw(float *__restrict__ w, "
            "float *__restrict__ m, float *__restrict__ v, const float *__restrict__ g, long long n, double lr, "
            "double wd, double clip, double bc1, double bc2)\n"
            "{\n");
    sb_printf(src, "    constexpr double B1 = %s, B2 = %s, EPS = %s;\n", b1, b2, eps);
    sb_puts(src,
            "    MOEC_FOR(i, n) {\n"
            "        double gv = __dmul_rn((double)g[i], clip);\n"
            "        m[i] = (float)__dadd_rn(__dmul_rn(B1, (double)m[i]), __dmul_rn(1.0 - B1, gv));\n"
            "        v[i] = (float)__dadd_rn(__dmul_rn(B2, (double)v[i]), __dmul_rn(__dmul_rn(1.0 - B2, gv), gv));\n"
            "        double upd = __ddiv_rn(__ddiv_rn((double)m[i], bc1), __dadd_rn(__dsqrt_rn(__ddiv_rn((double)v[i], "
            "bc2)), EPS));\n"
            "        w[i] = (float)__dsub_rn(__dmul_rn((double)w[i], __dsub_rn(1.0, __dmul_rn(lr, wd))), "
            "__dmul_rn(lr, upd));\n"
            "    }\n"
            "}\n");
}
