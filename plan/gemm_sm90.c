/* gemm_sm90.c - what an sm_90a grouped GEMM configuration can do and needs (gemm_sm90.h). */
#include "gemm_sm90.h"

#include <stdio.h>

int gemm_sm90_block_m(const GemmSm90Shape *s) { return s->pingpong == 1 ? 64 : GEMM_SM90_BLOCK_M; }

int gemm_sm90_b_box_rows(const GemmSm90Shape *s)
{
    return s->trans_b || (s->pingpong == 2 && s->epilogue == GEMM_SM90_EPI_GLU) ? 64 : s->block_n;
}

int gemm_sm90_smem_bytes(const GemmSm90Shape *s)
{
    return 1024 + s->stages * (gemm_sm90_block_m(s) + s->block_n) * GEMM_SM90_BLOCK_K * 2 +
           (s->epilogue == GEMM_SM90_EPI_TMA || s->epilogue == GEMM_SM90_EPI_GLU || gemm_sm90_epi_dswiglu(s->epilogue)
                ? 4 * 64 * 64 * 2
                : 0) +
           16 * s->stages;
}

int gemm_sm90_epi_dswiglu(int epilogue)
{
    return epilogue == GEMM_SM90_EPI_DSWIGLU || epilogue == GEMM_SM90_EPI_DSWIGLU_SPLIT;
}

int gemm_sm90_check_shape(const GemmSm90Shape *s, char *err, size_t errlen)
{
    if (s->E < 1 || s->N < 1 || s->K < 1)
        snprintf(err, errlen, "E, N, K must be positive (E %d, N %d, K %d)", s->E, s->N, s->K);
    else if (s->epilogue < 0 || s->epilogue > 6)
        snprintf(err, errlen, "epilogue is 0 to 6, not %d", s->epilogue);
    else if (s->pingpong < 0 || s->pingpong > 2)
        snprintf(err, errlen, "pingpong is 0, 1 or 2, not %d", s->pingpong);
    else if (s->pingpong == 2 && (s->block_n != 128 || (s->epilogue != GEMM_SM90_EPI_TMA && s->epilogue != GEMM_SM90_EPI_GLU &&
                                                        !gemm_sm90_epi_dswiglu(s->epilogue))))
        snprintf(err, errlen,
                 "pingpong 2 takes BLOCK_N 128 and the TMA, SwiGLU or dSwiGLU epilogue, not BLOCK_N %d, epilogue %d",
                 s->block_n, s->epilogue);
    else if (gemm_sm90_epi_dswiglu(s->epilogue) && s->N % 128)
        snprintf(err, errlen, "the dSwiGLU epilogue takes N a multiple of 128 (partials of dprobs per 128), not %d", s->N);
    else if (s->epilogue == GEMM_SM90_EPI_GLU && s->pingpong != 2 && s->block_n != 256)
        snprintf(err, errlen, "the SwiGLU epilogue takes BLOCK_N 256, not %d", s->block_n);
    else if (s->epilogue == GEMM_SM90_EPI_GLU && s->N % 256)
        snprintf(err, errlen, "the SwiGLU epilogue takes N a multiple of 256 (gate and up blocks of 128), not %d", s->N);
    else if (s->block_n != 128 && s->block_n != 256)
        snprintf(err, errlen, "BLOCK_N is 128 or 256, not %d", s->block_n);
    else if (s->K % GEMM_SM90_BLOCK_K)
        snprintf(err, errlen, "K %d is not a multiple of %d", s->K, GEMM_SM90_BLOCK_K);
    else if (s->N % s->block_n)
        snprintf(err, errlen, "N %d is not a multiple of BLOCK_N %d", s->N, s->block_n);
    else if (s->trans_b != 0 && s->trans_b != 1)
        snprintf(err, errlen, "trans_b is 0 or 1, not %d", s->trans_b);
    else if ((long long)s->E * (s->trans_b ? s->K : s->N) >= 2147483647ll)
        snprintf(err, errlen, "E * %s = %lld rows of W do not fit an int", s->trans_b ? "K" : "N",
                 (long long)s->E * (s->trans_b ? s->K : s->N));
    else if (s->stages < 2 || gemm_sm90_smem_bytes(s) > 232448)
        snprintf(err, errlen, "%d stages of BLOCK_N %d need %d bytes of shared memory (2..227 KB)", s->stages,
                 s->block_n, gemm_sm90_smem_bytes(s));
    else
        return 1;
    return 0;
}

int gemm_sm90_kgrouped_smem_bytes(const GemmSm90Shape *s)
{
    return 1024 + s->stages * (GEMM_SM90_BLOCK_M + s->block_n) * 64 * 2 +
           (s->epilogue == GEMM_SM90_KEPI_TMA ? 4 * 64 * 32 * 4 : 0) + 16 * s->stages;
}

int gemm_sm90_kgrouped_check_shape(const GemmSm90Shape *s, char *err, size_t errlen)
{
    if (s->E < 1 || s->N < 1 || s->K < 1)
        snprintf(err, errlen, "E, N, K must be positive (E %d, N %d, K %d)", s->E, s->N, s->K);
    else if (s->block_n != 128 && s->block_n != 256)
        snprintf(err, errlen, "BLOCK_N is 128 or 256, not %d", s->block_n);
    else if (s->epilogue != GEMM_SM90_KEPI_TMA && s->epilogue != GEMM_SM90_KEPI_REGS)
        snprintf(err, errlen, "the K-grouped epilogue is 0 (TMA stores) or 1 (stores from registers), not %d",
                 s->epilogue);
    else if (s->N % 128)
        snprintf(err, errlen, "N %d is not a multiple of 128", s->N);
    else if (s->pingpong != 0 && (s->pingpong != 1 || s->block_n != 128))
        snprintf(err, errlen, "the K-grouped pingpong is 0, or 1 with BLOCK_N 128 (pingpong %d, BLOCK_N %d)", s->pingpong,
                 s->block_n);
    else if (s->epilogue == GEMM_SM90_KEPI_TMA && (long long)s->E * s->N >= 2147483647ll)
        snprintf(err, errlen, "E * N = %lld rows of dW do not fit a tensor map's int coordinate",
                 (long long)s->E * s->N);
    else if (s->K % s->block_n)
        snprintf(err, errlen, "K %d is not a multiple of BLOCK_N %d", s->K, s->block_n);
    else if ((long long)s->E * s->N * s->K >= (1ll << 40))
        snprintf(err, errlen, "dW of %lld elements is too large", (long long)s->E * s->N * s->K);
    else if (s->stages < 2 || gemm_sm90_kgrouped_smem_bytes(s) > 232448)
        snprintf(err, errlen, "%d stages of BLOCK_N %d need %d bytes of shared memory (2..227 KB)", s->stages,
                 s->block_n, gemm_sm90_kgrouped_smem_bytes(s));
    else
        return 1;
    return 0;
}

int gemm_fp8_smem_bytes(const GemmFp8Shape *s)
{
    int stage = 128 * 128 * 2 + (s->mode == GEMM_FP8_MX ? 512 + 512 + 4096 : 128);
    return 1024 + s->stages * stage + (s->out == GEMM_FP8_OUT_BF16 ? 4 * 64 * 64 * 2 : 0) + 24 * s->stages;
}

int gemm_fp8_check_shape(const GemmFp8Shape *s, char *err, size_t errlen)
{
    if (s->E < 1 || s->N < 1 || s->K < 1)
        snprintf(err, errlen, "E, N, K must be positive (E %d, N %d, K %d)", s->E, s->N, s->K);
    else if (s->mode != GEMM_FP8_BLOCK && s->mode != GEMM_FP8_MX)
        snprintf(err, errlen, "mode is 0 (fp8-block) or 1 (MXFP8), not %d", s->mode);
    else if (s->out != GEMM_FP8_OUT_BF16 && s->out != GEMM_FP8_OUT_F32)
        snprintf(err, errlen, "out is 0 (bf16) or 1 (fp32), not %d", s->out);
    else if (s->pingpong)
        snprintf(err, errlen, "the FP8 M-grouped kernel has no ping-pong schedule (pingpong %d)", s->pingpong);
    else if (s->cluster < 0 || s->cluster > 2)
        snprintf(err, errlen, "the FP8 M-grouped kernel's cluster is 0, 1 or 2, not %d", s->cluster);
    else if (s->cluster == 2 && s->N % 256)
        snprintf(err, errlen, "cluster 2 pairs the N tiles: N %d is not a multiple of 256", s->N);
    else if (s->K % 256)
        snprintf(err, errlen, "K %d is not a multiple of 256 (the FP8 kernel takes its 128-deep K blocks in pairs)",
                 s->K);
    else if (s->N % 128)
        snprintf(err, errlen, "N %d is not a multiple of 128 (the FP8 kernel's BLOCK_N)", s->N);
    else if ((long long)s->E * s->N >= 2147483647ll)
        snprintf(err, errlen, "E * N = %lld rows of W do not fit an int", (long long)s->E * s->N);
    else if (s->stages < 2 || gemm_fp8_smem_bytes(s) > 232448)
        snprintf(err, errlen, "%d stages need %d bytes of shared memory (2..227 KB)", s->stages, gemm_fp8_smem_bytes(s));
    else
        return 1;
    return 0;
}

int gemm_fp8_kgrouped_a_rows(const GemmFp8Shape *s) { return s->pingpong ? 64 : 128; }

int gemm_fp8_kgrouped_smem_bytes(const GemmFp8Shape *s)
{
    const int a = gemm_fp8_kgrouped_a_rows(s);
    return 1024 + s->stages * (a * 128 + 128 * 128 + a + 128 + 1024) + 24 * s->stages +
           (s->out == GEMM_FP8_OUT_F32_TMA ? 4 * 64 * 32 * 4 : 0) + 256 * 8 /* sumsq's running doubles */;
}

int gemm_fp8_kgrouped_check_shape(const GemmFp8Shape *s, char *err, size_t errlen)
{
    if (s->E < 1 || s->N < 1 || s->K < 1)
        snprintf(err, errlen, "E, N, K must be positive (E %d, N %d, K %d)", s->E, s->N, s->K);
    else if (s->mode != GEMM_FP8_BLOCK)
        snprintf(err, errlen, "the FP8 K-grouped kernel is fp8-block only (mode 0), not mode %d", s->mode);
    else if (s->out != GEMM_FP8_OUT_F32 && s->out != GEMM_FP8_OUT_F32_TMA)
        snprintf(err, errlen, "the FP8 K-grouped kernel writes fp32 (out 1, or 2 through TMA stores), not out %d",
                 s->out);
    else if (s->pingpong != 0 && s->pingpong != 1)
        snprintf(err, errlen, "pingpong is 0 (cooperative) or 1 (ping-pong, 64 x 128 tiles), not %d", s->pingpong);
    else if (s->pingpong && s->out != GEMM_FP8_OUT_F32_TMA)
        snprintf(err, errlen, "the ping-pong FP8 K-grouped kernel writes dW through TMA stores only (out 2), not out %d",
                 s->out);
    else if (s->out == GEMM_FP8_OUT_F32_TMA && (long long)s->E * s->N >= 2147483647ll)
        snprintf(err, errlen, "E * N = %lld rows of dW do not fit the TMA store's int coordinate",
                 (long long)s->E * s->N);
    else if (s->N % 128 || s->K % 128)
        snprintf(err, errlen, "N %d and K %d must be multiples of 128 (the FP8 K-grouped kernel's tile)", s->N, s->K);
    else if ((long long)s->E * s->N * s->K >= (1ll << 40))
        snprintf(err, errlen, "dW of %lld elements is too large", (long long)s->E * s->N * s->K);
    else if (s->stages < 2 || gemm_fp8_kgrouped_smem_bytes(s) > 232448)
        snprintf(err, errlen, "%d stages need %d bytes of shared memory (2..227 KB)", s->stages,
                 gemm_fp8_kgrouped_smem_bytes(s));
    else
        return 1;
    return 0;
}
