/* kimage.h - a plan's kernel image: one cubin per NVRTC unit (docs/decisions.md 67).
 *
 * kernels.cu is compiled as several NVRTC programs (plan.h PLAN_UNIT_MARK), in parallel and cached one by one,
 * and the image keeps their cubins side by side instead of linking them: linking relocatable code (-rdc,
 * nvJitLink) changed the code of 77 of 100 kernels (decision 61), separate modules change none. The image is
 *
 *     "MOECKIM1"  u32 count  u32 0  then count x { u64 offset  u64 size }  then the cubins, each at a
 *     multiple of 256 bytes from the start (little-endian, as every CUDA host is)
 *
 * or, for a source with one unit, that unit's cubin (or PTX) alone, which every loader has always read. The
 * runtime loads each cubin as a CUDA module and finds a kernel in whichever module has it. The pack/parse half
 * needs no GPU (moec compile uses it); the load half needs the driver table (cudrv.h) loaded. */
#ifndef MOEC_KIMAGE_H
#define MOEC_KIMAGE_H

#include <stddef.h>

#include "cudrv.h"

#define KIMAGE_MAGIC "MOECKIM1"

/* Packs n images into one (malloc'ed, *size its bytes). n == 1 returns a copy of the one image. NULL when
 * out of memory. */
void *kimage_pack(const void *const *units, const size_t *sizes, int n, size_t *size);

/* The number of images in img (1 for a plain cubin or PTX), or -1 with a message when a packed image is cut
 * short or inconsistent. unit(i) gives the i-th image and its size. */
int kimage_count(const void *img, size_t size, char *err, size_t errlen);
const void *kimage_unit(const void *img, size_t size, int i, size_t *unit_size);

/* The image loaded: one module per unit. */
typedef struct KModules {
    CUmodule *mods;
    int n;
    int last; /* the module of the last kernel found, tried first next time (launches are mostly in order) */
} KModules;

/* Loads every unit of img as a module. On failure unloads what it loaded and returns the driver's error (or
 * CUDA_ERROR_INVALID_IMAGE for a damaged container, err saying which unit). */
CUresult kimage_load(KModules *m, const void *img, size_t size, char *err, size_t errlen);
/* Finds kernel `name` in one of the modules: CUDA_ERROR_NOT_FOUND when none has it. */
CUresult kimage_function(KModules *m, const char *name, CUfunction *f);
void kimage_unload(KModules *m);

#endif
