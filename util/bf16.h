/* bf16.h - rounding an fp32 value to bf16 on the host, as the GPU's cvt.rn.bf16.f32 does: round to
 * nearest, ties to even, on the float's bits (the result is the fp32 value whose low 16 bits are 0).
 * Overflow past the largest bf16 gives infinity, as on the GPU; a NaN stays a NaN (the GPU writes the
 * canonical 0x7fff, the value compares the same). The CPU backend rounds every value written into a
 * buffer the plan stores in bf16 with it (runtime/cpu/cpu.c, docs/decisions.md 40), so that it stays
 * the reference of the GPU's bf16 storage. */
#ifndef MOEC_BF16_H
#define MOEC_BF16_H

#include <stdint.h>
#include <string.h>

static inline float bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return x; /* NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

/* bf16 bits (as stored on the GPU) to fp32 and fp32 to bf16 bits (rounded as above) */
static inline float bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float r;
    memcpy(&r, &u, 4);
    return r;
}
static inline uint16_t f32_to_bf16(float x)
{
    float r = bf16_round(x);
    uint32_t u;
    memcpy(&u, &r, 4);
    return (uint16_t)(u >> 16);
}

#endif
