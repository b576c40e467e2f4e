/* dswiglu.cuh - the element arithmetic of the expert MLP backward's dSwiGLU (decision 60), shared by the dSwiGLU
 * epilogue of the bf16 M-grouped GEMM (gemm_sm90.cuh GemmMGrouped EPILOGUE 5, 6) and the separate dswiglu kernel
 * (moe_fast.cuh), so that both give the same bits. Plain CUDA C (no PTX): the Makefile pastes it after sm90.cuh,
 * and the emulator harnesses that compile moe_fast.cuh include it (emu.h has the intrinsics). */
namespace moec {
namespace sm90 {

/* The expert MLP backward's dSwiGLU of one element (decision 60): gate g, up u (bf16 values of h), da (the
 * bf16 value of the data gradient of a), the row's probability pp: dg = da pp u silu'(g), du = da pp silu(g),
 * o = silu(g) u pp (a, for dW_down) and t = da silu(g) u (a term of dprobs). Every operation explicitly
 * rounded (no contraction), so that moe_fast.cuh's dswiglu kernel and GemmMGrouped's dSwiGLU epilogue
 * (EPILOGUE 5, 6) give the same bits whatever the compiler fuses around them; both round the results to bf16
 * with pack_bf16x2 (cvt.rn.bf16x2.f32). */
__device__ __forceinline__ void dswiglu1(float g, float u, float da, float pp, float &dg, float &du, float &o,
                                         float &t)
{
    /* the sigmoid's reciprocal approximate (rcp.approx, within 1 ulp; 0 for 1 + exp(-g) = inf): IEEE division
     * puts a branch and a slow-path call on every element, which serialised the epilogue (decision 60) */
    const float sg = __fdividef(1.0f, __fadd_rn(1.0f, __expf(-g))), sl = __fmul_rn(g, sg), d = __fmul_rn(da, pp);
    dg = __fmul_rn(__fmul_rn(d, u), __fmul_rn(sg, __fadd_rn(1.0f, __fmul_rn(g, __fadd_rn(1.0f, -sg)))));
    du = __fmul_rn(d, sl);
    o = __fmul_rn(__fmul_rn(sl, u), pp);
    t = __fmul_rn(__fmul_rn(da, sl), u);
}

} /* namespace sm90 */
} /* namespace moec */
