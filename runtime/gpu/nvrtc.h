/* nvrtc.h - compiling the generated CUDA source with NVRTC.
 *
 * libnvrtc is loaded with dlopen on first use, so moec builds and runs on
 * machines without the CUDA toolkit; only `moec compile --arch` needs it.
 * The library tried: $MOEC_NVRTC_LIB if set, else libnvrtc.so.13,
 * libnvrtc.so.12, libnvrtc.so, then /usr/local/cuda/lib64/libnvrtc.so. NVRTC
 * needs no GPU. */
#ifndef MOEC_CODEGEN_NVRTC_H
#define MOEC_CODEGEN_NVRTC_H

#include <stddef.h>
#include <stdio.h>

#define NVRTC_DEFAULT_ARCH "sm_90a"

typedef struct NvrtcOutput {
    char *image;           /* cubin for sm_XX, PTX (NUL-terminated) for compute_XX */
    size_t image_size;
    int is_ptx;
    char *log;             /* NVRTC's log (warnings, errors), NUL-terminated, maybe empty */
    int nwarnings, nerrors;
    double seconds;        /* wall time of nvrtcCompileProgram */
    int major, minor;      /* NVRTC's version */
    /* nvrtc_compile_units: the units (1 for nvrtc_compile), how many came from the cache, the threads that
     * compiled the rest, and the longest unit's compile (seconds is then the wall time of all) */
    int units, units_cached, threads;
    double unit_seconds_max;
} NvrtcOutput;

/* Loads libnvrtc once. Returns 1, or 0 with a message naming the library. */
int nvrtc_load(char *err, size_t errlen);

/* NVRTC's version (loads it); 0 when it is not available. */
int nvrtc_version(int *major, int *minor);

/* Checks an --arch value: sm_NN, sm_NNa, sm_NNf, compute_NN or compute_NNa
 * (PTX), and that this NVRTC supports NN when it can say. 1 or 0 + err. */
int nvrtc_check_arch(const char *arch, char *err, size_t errlen);

/* Compiles `source` (named `name` in messages, e.g. kernels.cu) for `arch`
 * with -std=c++17 --gpu-architecture=ARCH -default-device. Returns 1 when
 * NVRTC produced an image (warnings are counted in out->nwarnings), 0 when
 * it did not: err says why; after a compile error out->log holds the log.
 * out is filled either way; free it with nvrtc_output_free. */
int nvrtc_compile(const char *source, const char *name, const char *arch, NvrtcOutput *out, char *err,
                  size_t errlen);
void nvrtc_output_free(NvrtcOutput *out);

/* Compiles kernels.cu unit by unit (plan/plan.h PLAN_UNIT_MARK; docs/decisions.md 67): each unit is the device
 * library (the text before the first mark) and its sections, each section after a `#line` directive so that
 * NVRTC's messages give the line in `source`. The units are compiled on `threads` threads (<= 0: $MOEC_NVRTC_THREADS,
 * else one per processor), each looked up first in and written after to cache_dir/units (NULL: no cache), keyed
 * by its code (comment lines left out), the architecture and NVRTC's version. out->image is the units' cubins
 * packed (runtime/gpu/kimage.h; a source without marks gives the one cubin, as nvrtc_compile). Returns as
 * nvrtc_compile; after a compile error out->log holds the log of every unit that failed. */
/* The kernel cache's folder: $MOEC_CACHE_DIR, else $XDG_CACHE_HOME/moec, else $HOME/.cache/moec; NULL when
 * none is set or MOEC_CACHE_DIR is "off" (no cache). Written into buf. */
const char *nvrtc_cache_dir(char *buf, size_t n);

int nvrtc_compile_units(const char *source, const char *name, const char *arch, const char *cache_dir, int threads,
                        NvrtcOutput *out, char *err, size_t errlen);

/* Prints NVRTC's log to `out`, and after each diagnostic line
 * `NAME(LINE): error|warning ...` the generated source lines around LINE. */
void nvrtc_print_log(FILE *out, const char *log, const char *source, const char *name);

/* The options nvrtc_compile passes (for the plan and the docs), NULL-terminated. */
extern const char *const nvrtc_option_names[];

#endif
