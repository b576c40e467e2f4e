/* emu_sm90.h - the one function of codegen/sm90.cuh that code the emulator runs calls: pack_bf16x2
 * (cvt.rn.bf16x2.f32: round to nearest even, a NaN to the canonical 0x7FFF), with which the gate_up GEMM's
 * fused SwiGLU epilogue (fp8_block_fast.cuh SwigluQuantEpi, decision 57) rounds its up accumulators as the
 * TMA-store epilogue rounds h. Included by the harnesses that paste fp8_block_fast.cuh (fp8b_kernels.cu,
 * mx_kernels.cu) before it; the plans have sm90.cuh itself. */
#ifndef MOEC_EMU_SM90_H
#define MOEC_EMU_SM90_H
namespace moec {
namespace sm90 {
inline unsigned emu_bf16_rn(float x)
{
    unsigned u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return 0x7fffu;
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}
inline unsigned pack_bf16x2(float lo, float hi) { return emu_bf16_rn(lo) | emu_bf16_rn(hi) << 16; }
} // namespace sm90
} // namespace moec
#endif
