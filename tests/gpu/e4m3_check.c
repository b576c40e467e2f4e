/* tests/gpu/e4m3_check.c - the device's E4M3 conversion against moec's integer encoder, on every float.
 *
 * util/e4m3.h's moec_e4m3_encode2 uses the GPU's cvt.rn.satfinite.e4m3x2.f32 on sm_89 and later, and the
 * integer encoder moec_e4m3_encode (the rule of docs/mxfp8.md, the CPU reference's) elsewhere. This program
 * checks on the GPU that the two agree bit for bit on all 2^32 float bit patterns: each pattern goes
 * through the low slot of one conversion and the high slot of another (paired with a scrambled pattern),
 * so both halves of the instruction are covered; and moec_e4m3_decode2 (cvt.rn.f16x2.e4m3x2) against
 * moec_e4m3_decode on all 2^16 pairs of codes, bit for bit (NaN payloads included). The kernel source is the prelude string the generated
 * kernels get (util/e4m3.h + codegen/mxfp8.cuh), compiled with NVRTC for sm_90a.
 *
 *   e4m3_check --emit DIR   compile here (no GPU): DIR/e4m3_check.cubin
 *   e4m3_check --run DIR    on the GPU: prints "e4m3_hw: N mismatches ...", exit 0 when N == 0
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cudrv.h"
#include "nvrtc.h"

extern const char cuda_prelude_mxfp8[];

static const char kernel_src[] =
    "extern \"C\" __global__ void e4m3_check(unsigned long long *bad, unsigned *first)\n"
    "{\n"
    "    const unsigned long long n = 1ull << 32;\n"
    "    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;\n"
    "         i += (unsigned long long)gridDim.x * blockDim.x) {\n"
    "        const unsigned u = (unsigned)i, v = u * 2654435761u + 0x9E3779B9u;\n"
    "        const float a = __uint_as_float(u), b = __uint_as_float(v);\n"
    "        const unsigned hw1 = moec_e4m3_encode2(a, b), hw2 = moec_e4m3_encode2(b, a);\n"
    "        const unsigned sa = moec_e4m3_encode(a), sb = moec_e4m3_encode(b);\n"
    "        bool ok = hw1 == (sa | sb << 8) && hw2 == (sb | sa << 8);\n"
    "        if (u < 65536u) { /* every pair of codes through the decoder */\n"
    "            float lo, hi;\n"
    "            moec_e4m3_decode2(u, &lo, &hi);\n"
    "            ok = ok && __float_as_uint(lo) == __float_as_uint(moec_e4m3_decode(u & 0xFFu)) &&\n"
    "                 __float_as_uint(hi) == __float_as_uint(moec_e4m3_decode(u >> 8));\n"
    "        }\n"
    "        if (!ok) {\n"
    "            if (atomicAdd(bad, 1ull) < 8) {\n"
    "                const unsigned k = atomicAdd(first, 1u);\n"
    "                if (k < 8) {\n"
    "                    first[1 + 4 * k] = u;\n"
    "                    first[2 + 4 * k] = hw1;\n"
    "                    first[3 + 4 * k] = sa | sb << 8;\n"
    "                    first[4 + 4 * k] = v;\n"
    "                }\n"
    "            }\n"
    "        }\n"
    "    }\n"
    "}\n";

static void die(const char *what, const char *why)
{
    fprintf(stderr, "e4m3_check: %s: %s\n", what, why);
    exit(2);
}

static void ck(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        char b[200];
        die(what, cudrv_error(r, b, sizeof b));
    }
}

static int emit(const char *dir)
{
    char err[1024], path[1024];
    size_t n1 = strlen(cuda_prelude_mxfp8), n2 = strlen(kernel_src);
    char *src = malloc(n1 + n2 + 1);
    if (!src)
        die("source", "out of memory");
    memcpy(src, cuda_prelude_mxfp8, n1);
    memcpy(src + n1, kernel_src, n2 + 1);
    NvrtcOutput out;
    int ok = nvrtc_compile(src, "e4m3_check.cu", "sm_90a", &out, err, sizeof err);
    if (out.log && *out.log)
        nvrtc_print_log(stderr, out.log, src, "e4m3_check.cu");
    printf("emit e4m3_check NVRTC %d.%d: %s, %d warnings\n", out.major, out.minor, ok ? "ok" : err, out.nwarnings);
    if (ok) {
        snprintf(path, sizeof path, "%s/e4m3_check.cubin", dir);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(out.image, 1, out.image_size, f) != out.image_size)
            die(path, "cannot write");
        fclose(f);
    }
    int bad = !ok || out.nwarnings != 0;
    nvrtc_output_free(&out);
    free(src);
    return bad;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n > 0 ? malloc((size_t)n) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

static int run(const char *dir)
{
    char err[512], path[1024];
    if (!cudrv_load(err, sizeof err))
        die("libcuda", err);
    CUdevice dev;
    CUcontext ctx;
    ck(cu.cuInit(0), "cuInit");
    ck(cu.cuDeviceGet(&dev, 0), "cuDeviceGet");
    ck(cu.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    ck(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    snprintf(path, sizeof path, "%s/e4m3_check.cubin", dir);
    size_t len;
    char *img = slurp(path, &len);
    if (!img)
        die(path, "cannot read (run --emit first)");
    CUmodule mod;
    CUfunction fn;
    ck(cu.cuModuleLoadData(&mod, img), "cuModuleLoadData");
    free(img);
    ck(cu.cuModuleGetFunction(&fn, mod, "e4m3_check"), "cuModuleGetFunction");
    CUdeviceptr bad, first;
    ck(cu.cuMemAlloc(&bad, 8), "alloc");
    ck(cu.cuMemAlloc(&first, 4 * 33), "alloc");
    ck(cu.cuMemsetD8Async(bad, 0, 8, NULL), "memset");
    ck(cu.cuMemsetD8Async(first, 0, 4 * 33, NULL), "memset");
    void *args[] = {&bad, &first};
    ck(cu.cuLaunchKernel(fn, 132 * 16, 1, 1, 256, 1, 1, 0, NULL, args, NULL), "launch");
    ck(cu.cuCtxSynchronize(), "run");
    unsigned long long nbad = 0;
    unsigned f[33];
    ck(cu.cuMemcpyDtoH(&nbad, bad, 8), "DtoH");
    ck(cu.cuMemcpyDtoH(f, first, sizeof f), "DtoH");
    printf("e4m3_hw: %llu mismatches: 2^32 float patterns through both slots of moec_e4m3_encode2 against "
           "moec_e4m3_encode, 2^16 code pairs through moec_e4m3_decode2 against moec_e4m3_decode\n",
           nbad);
    for (unsigned k = 0; k < f[0] && k < 8; k++)
        printf("  x bits 0x%08x (pair 0x%08x): device 0x%04x, integer encoder 0x%04x\n", f[1 + 4 * k], f[4 + 4 * k],
               f[2 + 4 * k], f[3 + 4 * k]);
    return nbad != 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--emit") == 0)
        return emit(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--run") == 0)
        return run(argv[2]);
    fprintf(stderr, "usage: e4m3_check --emit DIR | --run DIR\n");
    return 2;
}
