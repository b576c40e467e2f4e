/* compile.c - `moec compile`: the plan of a compiled model as a standalone
 * training binary (-o), and its CUDA code (--emit-cuda DIR: kernels.cu and
 * plan.json) and kernel image (--arch, through NVRTC). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../driver/compile.h"
#include "../driver/build.h"
#include "../codegen/cuda.h"
#include "../runtime/gpu/nvrtc.h"
#include "../util/util.h"
#include "../plan/payload.h"
#include "../train/train.h"
#include "cli.h"


/* DIR/NAME, written atomically (util's write_file); the path is left in path */
static int write_out(const char *dir, const char *name, const void *data, size_t len, char *path, size_t pathlen)
{
    char err[4400];
    snprintf(path, pathlen, "%s/%s", dir, name);
    if (write_file(path, data, len, err, sizeof err))
        return 1;
    fprintf(stderr, "moec: error: %s\n", err);
    return 0;
}

/* kernels.cu through NVRTC unit by unit, in parallel, each unit through the kernel cache (decision 67) */
static int compile_units(const Plan *p, const char *arch, NvrtcOutput *out, char *err, size_t errlen)
{
    char dir[4096];
    return nvrtc_compile_units(p->cuda_source, "kernels.cu", arch, nvrtc_cache_dir(dir, sizeof dir), 0, out, err,
                               errlen);
}

/* compile --emit-cuda / --arch, after the training binary was written;
 * `pre` is the NVRTC result when the binary was already given it */
static int cuda_outputs(const Options *o, const Plan *p, NvrtcOutput *pre)
{
    char path[4200];
    const IrGraph *g = p->graph;
    if (o->emit_cuda) {
        if (!make_dirs(o->emit_cuda)) {
            fprintf(stderr, "moec: error: --emit-cuda %s: cannot create the directory: %s\n", o->emit_cuda,
                    strerror(errno));
            return 1;
        }
        char *json = plan_to_json(p, 0);
        int ok = write_out(o->emit_cuda, "kernels.cu", p->cuda_source, p->cuda_source_len, path, sizeof path) &&
                 write_out(o->emit_cuda, "plan.json", json, strlen(json), path, sizeof path);
        free(json);
        if (!ok)
            return 1;
        printf("%s: wrote %s/kernels.cu (%d kernels for %d launches per step", o->file, o->emit_cuda,
               p->nkernels + CUDA_RUNTIME_KERNELS, p->nkernel_launches);
        if (p->ncollectives)
            printf(", %d host-side collectives", p->ncollectives);
        printf(") and %s/plan.json\n", o->emit_cuda);
        /* --kernels fast: which implementation each node with a choice got, and why */
        for (int i = 0; i < p->nlaunches; i++) {
            const PlanLaunch *l = &p->launches[i];
            if (!l->impl || (i > 0 && p->launches[i - 1].node == l->node))
                continue;
            printf("%s: node %d %s (%s): %s\n", o->file, l->node, g->nodes[l->node]->name,
                   ir_node_op_name(g->nodes[l->node]), l->impl);
        }
        if (p->needs_arch[0])
            printf("%s: %s code (--kernels %s%s): runs on an sm_90 GPU (H100, H200) only; --kernels reference for "
                   "another GPU\n", o->file, p->needs_arch, plan_kernels_name[p->source.kernels],
                   o->kernels_given ? "" : ", the default");
    }
    if (!o->arch)
        return 0;
    NvrtcOutput out;
    char err[1024] = "";
    int ok = 1;
    if (pre)
        out = *pre, memset(pre, 0, sizeof *pre);
    else
        ok = compile_units(p, o->arch, &out, err, sizeof err);
    if (out.log && (out.nwarnings || out.nerrors || !ok))
        nvrtc_print_log(stderr, out.log, p->cuda_source, "kernels.cu");
    int rc = 0;
    if (!ok) {
        fprintf(stderr, "moec: error: %s\n", err);
        rc = 1;
    } else {
        char hb[32];
        fmt_bytes(hb, sizeof hb, (double)out.image_size);
        printf("%s: NVRTC %d.%d compiled %d kernels of model %s for %s in %.1f s (%s %s), %d warnings\n", o->file,
               out.major, out.minor, p->nkernels + CUDA_RUNTIME_KERNELS, g->model, o->arch, out.seconds, out.is_ptx ? "PTX" : "cubin", hb,
               out.nwarnings);
        if (out.units > 1 && out.units_cached == out.units)
            printf("%s: %d NVRTC units (decision 67), all from the cache\n", o->file, out.units);
        else if (out.units > 1)
            printf("%s: %d NVRTC units (decision 67): %d compiled on %d thread%s (the longest %.1f s), %d from the "
                   "cache\n", o->file, out.units, out.units - out.units_cached, out.threads, out.threads == 1 ? "" : "s",
                   out.unit_seconds_max, out.units_cached);
        if (o->emit_cuda && !write_out(o->emit_cuda, out.is_ptx ? "kernels.ptx" : "kernels.cubin", out.image,
                                        out.is_ptx ? strlen(out.image) : out.image_size, path, sizeof path))
            rc = 1;
    }
    nvrtc_output_free(&out);
    return rc;
}

/* `moec compile`: the plan of the compiled model (c->graph), as a training
 * binary (-o: this executable with the plan appended), and/or its CUDA
 * source and plan.json (--emit-cuda) and kernel image (--arch). */
int cli_compile_command(const Options *o, Compilation *c)
{
    char err[1024];
    if (o->arch && !nvrtc_check_arch(o->arch, err, sizeof err)) {
        fprintf(stderr, "moec: error: %s\n", err);
        return 1;
    }
    Diag d;
    diag_init(&d, o->file, c->text, c->len, stderr);
    if (o->output && !train_check_alphabet(c->graph, &d))
        return 1;
    /* the pass plugins by absolute path: the binary loads them again */
    char *abs[ARRAY_LEN(cli_plugin_paths)];
    for (int i = 0; i < cli_nplugin_paths; i++) {
        abs[i] = realpath(cli_plugin_paths[i], NULL);
        if (!abs[i])
            abs[i] = xstrdup(cli_plugin_paths[i]);
    }
    Plan *p = driver_make_plan(c, o->file, (const char *const *)abs, cli_nplugin_paths, o->has_precision,
                               o->precision, o->ep, err, sizeof err);
    for (int i = 0; i < cli_nplugin_paths; i++)
        free(abs[i]);
    if (!p) {
        fprintf(stderr, "moec: error: %s\n", err);
        return 1;
    }
    int want_cuda = o->emit_cuda || o->arch, rc = 0;
    if (want_cuda && p->gpu_unsupported) {
        fputs(p->gpu_unsupported, stderr);
        plan_free(p);
        return 1;
    }
    if (o->kernels_for_arch)
        printf("%s: the reference kernels for --arch %s (the default, --kernels fast, is sm_90a code)\n", o->file,
               o->arch);
    if (o->arch && p->needs_arch[0] && strcmp(o->arch, p->needs_arch) != 0 && !plan_arch_takes_fast(o->arch)) {
        /* --kernels fast asked for by name, for another GPU: NVRTC would fail on the first wgmma */
        fprintf(stderr, "moec: error: --arch %s: %s's fast kernels (--kernels fast) are %s code, which only an sm_90 "
                "GPU (H100, H200) runs; leave --kernels out or give --kernels reference for the fp32 kernels, "
                "which compile for %s\n", o->arch, o->file, p->needs_arch, o->arch);
        plan_free(p);
        return 1;
    }
    NvrtcOutput nv = {0}, *pre = NULL;
    if (o->output && o->arch) {
        /* the kernels' image goes into the binary: it starts without NVRTC on that GPU */
        pre = &nv;
        if (!compile_units(p, o->arch, &nv, err, sizeof err)) {
            if (nv.log)
                nvrtc_print_log(stderr, nv.log, p->cuda_source, "kernels.cu");
            fprintf(stderr, "moec: error: %s\n", err);
            rc = 1;
        } else if (!nv.is_ptx) {
            plan_set_image(p, o->arch, nv.image, nv.image_size);
        }
    }
    if (rc == 0 && o->output) {
        char *json = plan_to_json(p, 1);
        if (!payload_write_binary("/proc/self/exe", o->output, json, strlen(json), err, sizeof err)) {
            fprintf(stderr, "moec: error: %s\n", err);
            rc = 1;
        } else {
            printf("%s: wrote %s (model %s, %d IR nodes); run '%s --help'\n", o->file, o->output, p->graph->model,
                   p->graph->nnodes, o->output);
        }
        free(json);
    }
    if (rc == 0 && want_cuda)
        rc = cuda_outputs(o, p, pre);
    nvrtc_output_free(&nv);
    plan_free(p);
    return rc;
}
