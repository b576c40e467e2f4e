/* nvrtc.c - NVRTC, loaded at run time with dlopen (nvrtc.h). The few
 * entry points moec uses are declared here with their C ABI, so neither
 * nvrtc.h nor the toolkit is needed to build moec. */
#include "nvrtc.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct NvrtcProg *NvrtcProgram; /* nvrtcProgram: an opaque pointer */
typedef int NvrtcResult;                 /* nvrtcResult: 0 = NVRTC_SUCCESS */

#define NVRTC_FUNCS(X)                                                                                     \
    X(nvrtcVersion, NvrtcResult, (int *, int *), 1)                                                     \
    X(nvrtcGetErrorString, const char *, (NvrtcResult), 1)                                              \
    X(nvrtcCreateProgram, NvrtcResult,                                                                  \
      (NvrtcProgram *, const char *, const char *, int, const char *const *, const char *const *), 1)    \
    X(nvrtcDestroyProgram, NvrtcResult, (NvrtcProgram *), 1)                                            \
    X(nvrtcCompileProgram, NvrtcResult, (NvrtcProgram, int, const char *const *), 1)                    \
    X(nvrtcGetProgramLogSize, NvrtcResult, (NvrtcProgram, size_t *), 1)                                 \
    X(nvrtcGetProgramLog, NvrtcResult, (NvrtcProgram, char *), 1)                                       \
    X(nvrtcGetPTXSize, NvrtcResult, (NvrtcProgram, size_t *), 1)                                        \
    X(nvrtcGetPTX, NvrtcResult, (NvrtcProgram, char *), 1)                                              \
    X(nvrtcGetCUBINSize, NvrtcResult, (NvrtcProgram, size_t *), 0)                                      \
    X(nvrtcGetCUBIN, NvrtcResult, (NvrtcProgram, char *), 0)                                            \
    X(nvrtcGetNumSupportedArchs, NvrtcResult, (int *), 0)                                               \
    X(nvrtcGetSupportedArchs, NvrtcResult, (int *), 0)

#define TYPEDEF(name, ret, args, required) typedef ret(*name##_fn) args;
NVRTC_FUNCS(TYPEDEF)
#undef TYPEDEF

static struct {
    int tried, ok;
    char error[512];
#define FIELD(name, ret, args, required) name##_fn name;
    NVRTC_FUNCS(FIELD)
#undef FIELD
} lib;

const char *const nvrtc_option_names[] = {"-std=c++17", "--gpu-architecture=ARCH", "-default-device", NULL};

/* Never dlclose'd: CUDA's libraries do not support being unloaded. */
static void lib_load(void)
{
    static const char *const names[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so",
                                        "/usr/local/cuda/lib64/libnvrtc.so", NULL};
    const char *over = getenv("MOEC_NVRTC_LIB");
    void *h = NULL;
    char first[300] = "";
    if (over && *over) {
        h = dlopen(over, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(lib.error, sizeof lib.error, "cannot load NVRTC from MOEC_NVRTC_LIB=%s: %s", over, dlerror());
            return;
        }
    } else {
        for (int i = 0; names[i] && !h; i++) {
            h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
            if (!h && i == 0)
                snprintf(first, sizeof first, "%s", dlerror());
        }
        if (!h) {
            snprintf(lib.error, sizeof lib.error,
                     "cannot load NVRTC, the CUDA runtime compiler (libnvrtc.so.13: %s); install the CUDA toolkit "
                     "or set MOEC_NVRTC_LIB to the library's path",
                     first);
            return;
        }
    }
    /* dlsym returns void *; the union avoids the object-to-function pointer cast ISO C leaves undefined */
#define LOAD(name, ret, args, required)                                                                     \
    {                                                                                                       \
        union { void *p; name##_fn f; } u = {dlsym(h, #name)};                                               \
        lib.name = u.f;                                                                                     \
        if (!lib.name && (required)) {                                                                      \
            snprintf(lib.error, sizeof lib.error, "the NVRTC library lacks %s (too old?)", #name);           \
            return;                                                                                         \
        }                                                                                                   \
    }
    NVRTC_FUNCS(LOAD)
#undef LOAD
    lib.ok = 1;
}

int nvrtc_load(char *err, size_t errlen)
{
    if (!lib.tried) {
        lib.tried = 1;
        lib_load();
    }
    if (!lib.ok)
        snprintf(err, errlen, "%s", lib.error);
    return lib.ok;
}

int nvrtc_version(int *major, int *minor)
{
    *major = *minor = 0;
    if (!nvrtc_load(NULL, 0))
        return 0;
    lib.nvrtcVersion(major, minor);
    return 1;
}

static int parse_arch(const char *arch, int *num, int *ptx)
{
    const char *p;
    if (strncmp(arch, "sm_", 3) == 0) {
        p = arch + 3;
        *ptx = 0;
    } else if (strncmp(arch, "compute_", 8) == 0) {
        p = arch + 8;
        *ptx = 1;
    } else {
        return 0;
    }
    int n = 0, digits = 0;
    for (; *p >= '0' && *p <= '9' && digits < 4; p++, digits++)
        n = n * 10 + (*p - '0');
    if (digits < 2)
        return 0;
    if (*p == 'a' || *p == 'f')
        p++;
    if (*p)
        return 0;
    *num = n;
    return 1;
}

int nvrtc_check_arch(const char *arch, char *err, size_t errlen)
{
    int num, ptx;
    if (!parse_arch(arch, &num, &ptx)) {
        snprintf(err, errlen, "--arch %s: expected sm_NN, sm_NNa (e.g. %s) or compute_NN for PTX", arch,
                 NVRTC_DEFAULT_ARCH);
        return 0;
    }
    if (!nvrtc_load(err, errlen))
        return 0;
    int count = 0, archs[128];
    if (lib.nvrtcGetNumSupportedArchs && lib.nvrtcGetSupportedArchs && lib.nvrtcGetNumSupportedArchs(&count) == 0 &&
        count > 0 && count <= 128 && lib.nvrtcGetSupportedArchs(archs) == 0) {
        for (int i = 0; i < count; i++)
            if (archs[i] == num)
                return 1;
        int major = 0, minor = 0;
        lib.nvrtcVersion(&major, &minor);
        int len = snprintf(err, errlen, "--arch %s: NVRTC %d.%d compiles for", arch, major, minor);
        for (int i = 0; i < count && len > 0 && (size_t)len < errlen; i++)
            len += snprintf(err + len, errlen - (size_t)len, " sm_%d", archs[i]);
        return 0;
    }
    return 1;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* `NAME(LINE): error` / `NAME(LINE): warning`: the kind (1 error, 2
 * warning, 0 neither) and the line */
static int diag_line(const char *s, size_t len, const char *name, int *line)
{
    size_t nl = strlen(name);
    if (len < nl + 3 || strncmp(s, name, nl) != 0 || s[nl] != '(')
        return 0;
    size_t i = nl + 1;
    int v = 0, digits = 0;
    while (i < len && s[i] >= '0' && s[i] <= '9') {
        v = v * 10 + (s[i++] - '0');
        digits++;
    }
    if (!digits || i + 3 > len || s[i] != ')' || s[i + 1] != ':' || s[i + 2] != ' ')
        return 0;
    i += 3;
    *line = v;
    if (len - i >= 5 && strncmp(s + i, "error", 5) == 0)
        return 1;
    if (len - i >= 7 && strncmp(s + i, "warning", 7) == 0)
        return 2;
    return 0;
}

static void count_diags(NvrtcOutput *out, const char *name)
{
    for (const char *s = out->log; s && *s;) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        int line;
        int kind = diag_line(s, len, name, &line);
        if (kind == 1)
            out->nerrors++;
        else if (kind == 2)
            out->nwarnings++;
        s += len + (e ? 1 : 0);
    }
}

int nvrtc_compile(const char *source, const char *name, const char *arch, NvrtcOutput *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->units = 1;
    if (!nvrtc_check_arch(arch, err, errlen))
        return 0;
    lib.nvrtcVersion(&out->major, &out->minor);
    int num, ptx = 0;
    parse_arch(arch, &num, &ptx);
    out->is_ptx = ptx;
    char archopt[64];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", arch);
    const char *opts[] = {"-std=c++17", archopt, "-default-device"};
    NvrtcProgram prog = NULL;
    NvrtcResult rc = lib.nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL);
    if (rc != 0) {
        snprintf(err, errlen, "nvrtcCreateProgram: %s", lib.nvrtcGetErrorString(rc));
        return 0;
    }
    double t0 = now_s();
    rc = lib.nvrtcCompileProgram(prog, 3, opts);
    out->seconds = now_s() - t0;
    size_t logsize = 0;
    if (lib.nvrtcGetProgramLogSize(prog, &logsize) == 0 && logsize > 0) {
        out->log = malloc(logsize + 1);
        if (out->log && lib.nvrtcGetProgramLog(prog, out->log) == 0)
            out->log[logsize] = 0;
        else if (out->log)
            out->log[0] = 0;
    }
    count_diags(out, name);
    int ok = 0;
    if (rc != 0) {
        snprintf(err, errlen, "NVRTC could not compile %s for %s: %s (%d error%s)", name, arch,
                 lib.nvrtcGetErrorString(rc), out->nerrors, out->nerrors == 1 ? "" : "s");
    } else if (ptx) {
        size_t size = 0;
        if (lib.nvrtcGetPTXSize(prog, &size) == 0 && (out->image = malloc(size ? size : 1)) &&
            lib.nvrtcGetPTX(prog, out->image) == 0) {
            out->image_size = size;
            ok = 1;
        } else {
            snprintf(err, errlen, "NVRTC compiled %s but returned no PTX", name);
        }
    } else if (!lib.nvrtcGetCUBINSize || !lib.nvrtcGetCUBIN) {
        snprintf(err, errlen, "this NVRTC cannot return a cubin; use --arch compute_NN for PTX");
    } else {
        size_t size = 0;
        if (lib.nvrtcGetCUBINSize(prog, &size) == 0 && size > 0 && (out->image = malloc(size)) &&
            lib.nvrtcGetCUBIN(prog, out->image) == 0) {
            out->image_size = size;
            ok = 1;
        } else {
            snprintf(err, errlen, "NVRTC compiled %s but returned no cubin for %s", name, arch);
        }
    }
    if (!ok) {
        free(out->image);
        out->image = NULL;
        out->image_size = 0;
    }
    lib.nvrtcDestroyProgram(&prog);
    out->unit_seconds_max = out->seconds;
    out->threads = 1;
    return ok;
}

void nvrtc_output_free(NvrtcOutput *out)
{
    free(out->image);
    free(out->log);
    memset(out, 0, sizeof *out);
}

/* Prints source lines [lo, hi] (1-based) with their numbers, marking `at`. */
static void print_source_lines(FILE *out, const char *source, int lo, int hi, int at)
{
    int line = 1;
    const char *s = source;
    while (*s && line < lo) {
        if (*s++ == '\n')
            line++;
    }
    while (*s && line <= hi) {
        const char *e = strchr(s, '\n');
        int len = e ? (int)(e - s) : (int)strlen(s);
        fprintf(out, "  %c %6d | %.*s\n", line == at ? '>' : ' ', line, len, s);
        if (!e)
            break;
        s = e + 1;
        line++;
    }
}

void nvrtc_print_log(FILE *out, const char *log, const char *source, const char *name)
{
    for (const char *s = log; s && *s;) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        fprintf(out, "%.*s\n", (int)len, s);
        int line;
        if (diag_line(s, len, name, &line)) {
            fprintf(out, "  generated source around %s:%d:\n", name, line);
            print_source_lines(out, source, line > 3 ? line - 3 : 1, line + 3, line);
        }
        s += len + (e ? 1 : 0);
    }
}
