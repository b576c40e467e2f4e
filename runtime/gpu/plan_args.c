/* plan_args.c - a plan launch's kernel parameters (plan_args.h). */
#include "plan_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tma.h"

enum { SLOT = 128 }; /* one CUtensorMap; pointers and ints use a slot too (a handful per launch) */

int gpu_args_build(const PlanLaunch *l, const CUdeviceptr *buf, const CUdeviceptr *norm, GpuArgs *a, char *err,
                   size_t errlen)
{
    memset(a, 0, sizeof *a);
    a->nargs = l->nargs;
    a->mem = aligned_alloc(64, (size_t)SLOT * (size_t)(l->nargs + 1));
    a->argp = calloc((size_t)l->nargs + 1, sizeof *a->argp);
    if (!a->mem || !a->argp) {
        snprintf(err, errlen, "out of memory");
        return 0;
    }
    memset(a->mem, 0, (size_t)SLOT * (size_t)(l->nargs + 1));
    for (int i = 0; i < l->nargs; i++) {
        unsigned char *slot = (unsigned char *)a->mem + (size_t)SLOT * (size_t)i;
        a->argp[i] = slot;
        PlanArgKind k = l->targs ? l->targs[i].kind : PLAN_ARG_BUF;
        if (k == PLAN_ARG_BUF) {
            CUdeviceptr p = buf[l->args[i]];
            memcpy(slot, &p, sizeof p);
        } else if (k == PLAN_ARG_I32) {
            int v = (int)l->targs[i].value;
            memcpy(slot, &v, sizeof v);
        } else if (k == PLAN_ARG_I64) {
            long long v = (long long)l->targs[i].value;
            memcpy(slot, &v, sizeof v);
        } else if (k == PLAN_ARG_NORM) {
            CUdeviceptr p = norm && l->targs[i].value >= 0 ? norm[l->targs[i].value] : 0;
            memcpy(slot, &p, sizeof p);
        } else {
            const PlanArg *t = &l->targs[i];
            CUdeviceptr p = buf[t->buf];
            if (p & 15) {
                snprintf(err, errlen, "argument %d: a tensor map over a buffer that is not 16-byte aligned", i);
                return 0;
            }
            if (k == PLAN_ARG_TMAP_F32) {
                p += (CUdeviceptr)t->offset * 4;
                if (p & 15) {
                    snprintf(err, errlen, "argument %d: an fp32 tensor map from an offset that is not 16-byte aligned",
                             i);
                    return 0;
                }
                if (!tma_encode_f32_2d((CUtensorMap *)(void *)slot, p, (unsigned long long)t->rows,
                                       (unsigned long long)t->cols, (unsigned)t->box_rows, err, errlen))
                    return 0;
            } else if (k == PLAN_ARG_TMAP_U8) {
                p += (CUdeviceptr)t->offset; /* bytes: an fp8-block weight copy's transposed tiles */
                if (p & 15) {
                    snprintf(err, errlen, "argument %d: a byte tensor map from an offset that is not 16-byte aligned",
                             i);
                    return 0;
                }
                if (!tma_encode_u8_2d((CUtensorMap *)(void *)slot, p, (unsigned long long)t->rows,
                                      (unsigned long long)t->cols, (unsigned)t->box_rows, err, errlen))
                    return 0;
            } else if (!tma_encode_bf16_2d((CUtensorMap *)(void *)slot, p, (unsigned long long)t->rows,
                                           (unsigned long long)t->cols, (unsigned)t->box_rows, err, errlen))
                return 0;
        }
    }
    return 1;
}

void gpu_args_free(GpuArgs *a)
{
    free(a->mem);
    free(a->argp);
    memset(a, 0, sizeof *a);
}

int gpu_norm_from_gemm(char *err, size_t errlen)
{
    const char *v = getenv("MOEC_GRAD_NORM");
    if (!v || !*v || strcmp(v, "separate") == 0)
        return 0;
    if (strcmp(v, "gemm") == 0)
        return 1;
    snprintf(err, errlen, "MOEC_GRAD_NORM is 'gemm' or 'separate', not '%s'", v);
    return -1;
}

int64_t gpu_norm_counts(const Plan *p, int sms, int64_t *count)
{
    int64_t total = 0;
    for (int l = 0; l < p->nlaunches; l++)
        for (int a = 0; a < p->launches[l].nargs && p->launches[l].targs; a++) {
            const PlanArg *t = &p->launches[l].targs[a];
            if (t->kind == PLAN_ARG_NORM && t->value >= 0) {
                count[t->value] = t->rows * (int64_t)gpu_launch_grid(&p->launches[l], sms);
                total += count[t->value];
            }
        }
    return total;
}

unsigned gpu_launch_grid(const PlanLaunch *l, int sms)
{
    return l->grid == PLAN_GRID_ALL_SMS ? (unsigned)(sms > 0 ? sms : 1) : (unsigned)l->grid;
}

unsigned gpu_launch_grid_f(const PlanLaunch *l, CUfunction f, int sms, CUresult *r)
{
    *r = CUDA_SUCCESS;
    if (l->cluster > 1 && l->grid == PLAN_GRID_ALL_SMS)
        return cudrv_persistent_grid(f, sms, (unsigned)l->block, (unsigned)l->shared_bytes, l->cluster, r);
    return gpu_launch_grid(l, sms);
}

int gpu_fill_copies(const Plan *p, KModules *mods, const CUdeviceptr *buf, CUstream stream, char *err, size_t errlen)
{
    CUfunction f = NULL;
    int n = 0;
    char b[200];
    for (int i = 0; i < p->nbufs; i++) {
        const PlanBuf *c = &p->bufs[i];
        if (c->kind != PLAN_BUF_COPY)
            continue;
        CUresult r = CUDA_SUCCESS;
        CUdeviceptr dst = buf[i], src = buf[c->node];
        const IrNode *pn = p->graph->nodes[c->node];
        PlanFp8Copy fc;
        if (c->storage == PLAN_E4M3) {
            /* an 8-bit weight's e4m3 copy (fp8-block or MXFP8): its quantiser, a 512-thread block per 128x128 tile */
            char name[96];
            CUfunction q = NULL;
            if (!plan_fp8b_copy_layout(p->graph, pn, &fc) || fc.bytes != c->bytes) {
                snprintf(err, errlen, "the working copy %s: no e4m3 copy of %s", c->name, pn->name);
                return -1;
            }
            plan_fp8b_kernel_name(&fc, 0, name, sizeof name);
            long long tiles = fc.e * (fc.n / 128) * (fc.k / 128);
            void *qa[] = {&dst, &src};
            r = kimage_function(mods, name, &q);
            if (r == CUDA_SUCCESS)
                r = cu.cuLaunchKernel(q, (unsigned)(tiles > 1056 ? 1056 : tiles), 1, 1, 512, 1, 1, 0, stream, qa, NULL);
            if (r != CUDA_SUCCESS) {
                snprintf(err, errlen, "the working copy %s (%s): %s", c->name, name, cudrv_error(r, b, sizeof b));
                return -1;
            }
            n++;
            continue;
        }
        if (!f)
            r = kimage_function(mods, "moec_to_bf16", &f);
        long long numel = c->bytes / 2, glu_f = c->glu_f, cols = pn->rank ? pn->shape[pn->rank - 1] : 1;
        long long grid = (numel + 255) / 256;
        void *args[] = {&dst, &src, &numel, &glu_f, &cols};
        if (r == CUDA_SUCCESS)
            r = cu.cuLaunchKernel(f, (unsigned)(grid > 4096 ? 4096 : grid < 1 ? 1 : grid), 1, 1, 256, 1, 1, 0, stream,
                                  args, NULL);
        if (r != CUDA_SUCCESS) {
            snprintf(err, errlen, "the working copy %s: %s", c->name, cudrv_error(r, b, sizeof b));
            return -1;
        }
        n++;
    }
    CUresult r = cu.cuStreamSynchronize(stream);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "writing the working copies: %s", cudrv_error(r, b, sizeof b));
        return -1;
    }
    return n;
}
