/* gemm_sm90.c - the CUDA source of the sm_90a grouped GEMM for one configuration (gemm_sm90.h). */
#include "gemm_sm90.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* $(GEN)/cuda_prelude.c: codegen/gemm_sm90_sched.h, codegen/sm90.cuh + codegen/dswiglu.cuh, codegen/gemm_sm90.cuh */
extern const char cuda_prelude_sm90_sched[], cuda_prelude_sm90[], cuda_prelude_gemm_sm90[];

static char *source_with(const char *inst, const char *extra)
{
    const char *parts[] = {cuda_prelude_sm90_sched, cuda_prelude_sm90, cuda_prelude_gemm_sm90, inst,
                           extra ? extra : ""};
    size_t len = 1;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        len += strlen(parts[i]);
    char *src = malloc(len);
    if (!src)
        return NULL;
    src[0] = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        strcat(src, parts[i]);
    return src;
}

char *gemm_sm90_source(const GemmSm90Shape *s, const char *name, const char *extra)
{
    char inst[256];
    snprintf(inst, sizeof inst, "\nMOEC_SM90_GEMM_MGROUPED_SCHED(%s, %d, %d, %d, %d, %d, %d, %d, %d)\n", name, s->E,
             s->N, s->K, s->block_n, s->stages, s->epilogue, s->trans_b, s->pingpong);
    return source_with(inst, extra);
}

char *gemm_sm90_kgrouped_source(const GemmSm90Shape *s, const char *name, const char *extra)
{
    char inst[256];
    if (s->pingpong)
        snprintf(inst, sizeof inst, "\nMOEC_SM90_GEMM_KGROUPED_SCHED(%s, %d, %d, %d, %d, %d, %d, %d)\n", name, s->E, s->N,
                 s->K, s->block_n, s->stages, s->epilogue, s->pingpong);
    else if (s->epilogue == GEMM_SM90_KEPI_TMA)
        snprintf(inst, sizeof inst, "\nMOEC_SM90_GEMM_KGROUPED_EX(%s, %d, %d, %d, %d, %d, 0)\n", name, s->E, s->N, s->K,
                 s->block_n, s->stages);
    else
        snprintf(inst, sizeof inst, "\nMOEC_SM90_GEMM_KGROUPED(%s, %d, %d, %d, %d, %d)\n", name, s->E, s->N, s->K,
                 s->block_n, s->stages);
    return source_with(inst, extra);
}


char *gemm_fp8_source_sched(const GemmFp8Shape *s, int sched, const char *name, const char *extra)
{
    char inst[256];
    if (s->cluster > 1)
        snprintf(inst, sizeof inst, "\nMOEC_SM90_GEMM_FP8_SC(%s, %d, %d, %d, %d, %d, %d, %d, %d)\n", name, s->E, s->N,
                 s->K, s->stages, s->mode, s->out, sched, s->cluster);
    else
        snprintf(inst, sizeof inst, "\nMOEC_SM90_GEMM_FP8_S(%s, %d, %d, %d, %d, %d, %d, %d)\n", name, s->E, s->N, s->K,
                 s->stages, s->mode, s->out, sched);
    return source_with(inst, extra);
}

char *gemm_fp8_source(const GemmFp8Shape *s, const char *name, const char *extra)
{
    return gemm_fp8_source_sched(s, GEMM_FP8_SCHED_PIPE, name, extra);
}

char *gemm_fp8_kgrouped_source_sched(const GemmFp8Shape *s, int sched, const char *name, const char *extra)
{
    char inst[256];
    snprintf(inst, sizeof inst, "\nMOEC_SM90_GEMM_FP8_KGROUPED%s_SP(%s, %d, %d, %d, %d, %d, %d)\n",
             s->out == GEMM_FP8_OUT_F32_TMA ? "_TMA" : "", name, s->E, s->N, s->K, s->stages, sched, s->pingpong);
    return source_with(inst, extra);
}

char *gemm_fp8_kgrouped_source(const GemmFp8Shape *s, const char *name, const char *extra)
{
    return gemm_fp8_kgrouped_source_sched(s, GEMM_FP8_SCHED_PIPE, name, extra);
}
