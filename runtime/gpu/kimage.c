/* kimage.c - a plan's kernel image, one cubin per NVRTC unit (kimage.h). */
#include "kimage.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { KIMAGE_ALIGN = 256, KIMAGE_HEAD = 16 };

static size_t round_up(size_t n) { return (n + KIMAGE_ALIGN - 1) / KIMAGE_ALIGN * KIMAGE_ALIGN; }

void *kimage_pack(const void *const *units, const size_t *sizes, int n, size_t *size)
{
    if (n < 1)
        return NULL;
    if (n == 1) {
        void *c = malloc(sizes[0] ? sizes[0] : 1);
        if (c)
            memcpy(c, units[0], sizes[0]);
        *size = sizes[0];
        return c;
    }
    size_t at = round_up(KIMAGE_HEAD + (size_t)n * 16);
    size_t total = at;
    for (int i = 0; i < n; i++)
        total = round_up(total) + sizes[i];
    unsigned char *c = calloc(1, total);
    if (!c)
        return NULL;
    memcpy(c, KIMAGE_MAGIC, 8);
    uint32_t cnt = (uint32_t)n;
    memcpy(c + 8, &cnt, 4);
    for (int i = 0; i < n; i++) {
        at = round_up(at);
        uint64_t o = at, s = sizes[i];
        memcpy(c + KIMAGE_HEAD + (size_t)i * 16, &o, 8);
        memcpy(c + KIMAGE_HEAD + (size_t)i * 16 + 8, &s, 8);
        memcpy(c + at, units[i], sizes[i]);
        at += sizes[i];
    }
    *size = total;
    return c;
}

static int is_packed(const void *img, size_t size) { return size >= 8 && memcmp(img, KIMAGE_MAGIC, 8) == 0; }

int kimage_count(const void *img, size_t size, char *err, size_t errlen)
{
    if (!is_packed(img, size))
        return 1;
    const unsigned char *c = img;
    uint32_t n;
    if (size < KIMAGE_HEAD) {
        snprintf(err, errlen, "the kernel image is cut short (%zu bytes, a header needs %d)", size, KIMAGE_HEAD);
        return -1;
    }
    memcpy(&n, c + 8, 4);
    if (n < 1 || n > 1u << 20 || (size - KIMAGE_HEAD) / 16 < n) {
        snprintf(err, errlen, "the kernel image's table of %u units does not fit its %zu bytes", n, size);
        return -1;
    }
    for (uint32_t i = 0; i < n; i++) {
        uint64_t o, s;
        memcpy(&o, c + KIMAGE_HEAD + (size_t)i * 16, 8);
        memcpy(&s, c + KIMAGE_HEAD + (size_t)i * 16 + 8, 8);
        if (o < KIMAGE_HEAD + (uint64_t)n * 16 || o % KIMAGE_ALIGN || o > size || s == 0 || s > size - o) {
            snprintf(err, errlen, "the kernel image's unit %u (offset %llu, %llu bytes) lies outside its %zu bytes",
                     i, (unsigned long long)o, (unsigned long long)s, size);
            return -1;
        }
    }
    return (int)n;
}

const void *kimage_unit(const void *img, size_t size, int i, size_t *unit_size)
{
    if (!is_packed(img, size)) {
        *unit_size = size;
        return i == 0 ? img : NULL;
    }
    const unsigned char *c = img;
    uint64_t o, s;
    memcpy(&o, c + KIMAGE_HEAD + (size_t)i * 16, 8);
    memcpy(&s, c + KIMAGE_HEAD + (size_t)i * 16 + 8, 8);
    *unit_size = (size_t)s;
    return c + o;
}

void kimage_unload(KModules *m)
{
    for (int i = 0; i < m->n; i++)
        if (m->mods[i])
            cu.cuModuleUnload(m->mods[i]);
    free(m->mods);
    memset(m, 0, sizeof *m);
}

CUresult kimage_load(KModules *m, const void *img, size_t size, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    int n = kimage_count(img, size, err, errlen);
    if (n < 0)
        return CUDA_ERROR_INVALID_IMAGE;
    m->mods = calloc((size_t)n, sizeof *m->mods);
    if (!m->mods) {
        snprintf(err, errlen, "out of memory");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    for (int i = 0; i < n; i++) {
        size_t us;
        const void *u = kimage_unit(img, size, i, &us);
        CUresult r = cu.cuModuleLoadData(&m->mods[i], u);
        m->n = i + 1;
        if (r != CUDA_SUCCESS) {
            char b[200];
            m->mods[i] = NULL;
            snprintf(err, errlen, "loading unit %d of %d of the kernels: %s", i, n, cudrv_error(r, b, sizeof b));
            kimage_unload(m);
            return r;
        }
    }
    return CUDA_SUCCESS;
}

CUresult kimage_function(KModules *m, const char *name, CUfunction *f)
{
    CUresult r = CUDA_ERROR_NOT_FOUND;
    for (int j = 0; j < m->n; j++) {
        int i = (m->last + j) % m->n;
        r = cu.cuModuleGetFunction(f, m->mods[i], name);
        if (r == CUDA_SUCCESS) {
            m->last = i;
            return r;
        }
        if (r != CUDA_ERROR_NOT_FOUND)
            return r;
    }
    return r;
}
