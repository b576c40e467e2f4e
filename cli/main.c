/* main.c - the `moec` command line.
 *
 *   moec check FILE        parse, lower, verify; exit 0, or diagnostics and 1
 *   moec dump FILE         print the IR (text, JSON or DOT) after the passes
 *   moec opt FILE.mir      run passes on IR text, print the IR after them
 *   moec passes            the pass pipeline, one line each
 *   moec ops               the language's ops with their signatures
 *
 * Exit status: 0 success, 1 an error in the user's input (located on
 * stderr), 2 a usage error (bad command or flag). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../driver/compile.h"
#include "../driver/build.h"
#include "../formats/hf.h"
#include "../compiler/lower.h"
#include "../codegen/cuda.h"
#include "../runtime/gpu/nvrtc.h"
#include "../util/util.h"
#include "../plan/payload.h"
#include "../formats/plot.h"
#include "../formats/safetensors.h"
#include "../train/train.h"

typedef struct Options {
    const char *command;
    const char *file;
    PrintFormat format;
    const char *print_before, *print_after;
    int stats;
    int no_verify;
    const char *output;      /* -o */
    const char *disabled[16];
    int ndisabled;
    int has_precision;
    IrPrecision precision;
    int64_t ep, dp;
    const char *emit_cuda;   /* compile --emit-cuda DIR */
    const char *arch;        /* compile --arch ARCH */
    int ir;                  /* --ir: FILE is IR text (as a .mir file is) */
    const char *passes;      /* opt --passes A,B,... */
} Options;

static const char *const usage_main =
    "usage: moec <command> [options] [FILE]\n"
    "\n"
    "moec compiles mixture-of-experts model descriptions (.moe files) into\n"
    "fused GPU training programs, and shows every decision it makes.\n"
    "\n"
    "commands:\n"
    "  check FILE      parse, lower and verify a model; print a summary\n"
    "  dump FILE       print the IR as lowered (later stages: --print-ir-after)\n"
    "  explain FILE    every fusion candidate: FUSED, or NOT FUSED and why\n"
    "  opt FILE [--passes A,B]   run passes on the IR (the rest of the pipeline, or\n"
    "                  those named) and print the IR after them\n"
    "  compile FILE -o OUT   write a standalone training binary (--emit-cuda DIR,\n"
    "                  --arch sm_90a: its CUDA kernels, compiled with NVRTC)\n"
    "  plot METRICS.jsonl -o OUT.svg   draw training and validation loss\n"
    "  ckpt-diff A B   compare two checkpoints' parameters\n"
    "  import-hf DIR -o MODEL.moe   a Hugging Face MixtralForCausalLM folder -> a model\n"
    "                  file (and, with weights, a checkpoint for --init)\n"
    "  export-hf MODEL.moe CKPT -o DIR   a checkpoint -> a Hugging Face model folder\n"
    "  passes          list the pass pipeline\n"
    "  ops             list the ops of the model language\n"
    "  help [COMMAND]  show help for a command\n"
    "\n"
    "options for every command:\n"
    "  --help          help for the command\n"
    "  --version       print the version\n"
    "  --precision P   bf16 | mxfp8 | fp8-block, overriding the model file\n"
    "  --ep N, --dp M  expert- and data-parallel ranks (world = N x M), overriding it\n"
    "  --disable-pass NAME    skip a pass of the pipeline\n"
    "  --load-pass LIB.so     load a pass plugin (docs/adding-a-pass.md)\n"
    "  --stats         each pass's counters on stderr\n"
    "  --ir            FILE is IR text as `moec dump` prints it ('-': stdin); a\n"
    "                  FILE ending in .mir is read as IR text anyway. The front\n"
    "                  end and the passes that already ran are skipped\n"
    "\n"
    "Run 'moec help COMMAND' for a command's options. The language is described\n"
    "in docs/language.md, the IR in docs/ir.md.\n";

static const char *const usage_check =
    "usage: moec check FILE [--print-ir-after PASS|all] [--print-ir-before PASS|all] [--stats]\n"
    "\n"
    "Parses FILE, lowers it to IR, runs the pass pipeline with the verifier\n"
    "after every pass and prints a one-line summary. Errors are printed as\n"
    "file:line:col with the source line; the exit status is then 1.\n"
    "\n"
    "  --print-ir-after PASS|all    print the IR (text) after that pass\n"
    "  --print-ir-before PASS|all   print the IR (text) before that pass\n"
    "  --stats                      print each pass's counters on stderr\n"
    "  --no-verify                  skip the verifier between passes\n";

static const char *const usage_dump =
    "usage: moec dump FILE [--format text|json|dot] [--print-ir-after PASS|all]\n"
    "                      [--print-ir-before PASS|all] [--stats]\n"
    "\n"
    "Prints the IR of FILE as lowered and verified: the model's meaning, after the\n"
    "front-end passes (infer-shapes, dce). The whole pipeline still runs. With\n"
    "--print-ir-after or --print-ir-before it prints those snapshots instead, each\n"
    "behind a fixed header line ('# *** IR after fuse-grouped-mlp ***'; in JSON a\n"
    "{\"stage\": ...} wrapper): --print-ir-after autodiff shows the final IR.\n"
    "\n"
    "  --format text|json|dot       text (default; stable across runs), JSON\n"
    "                               (schema in docs/ir.md) or Graphviz DOT with\n"
    "                               one cluster per layer\n"
    "  --print-ir-after PASS|all    print the IR after that pass\n"
    "  --print-ir-before PASS|all   print the IR before that pass\n"
    "  --stats                      print each pass's counters on stderr\n"
    "  --no-verify                  skip the verifier between passes\n";

static const char *const usage_opt =
    "usage: moec opt FILE [--passes NAME,NAME,...] [--format text|json|dot]\n"
    "                     [--print-ir-after PASS|all] [--print-ir-before PASS|all] [--stats]\n"
    "\n"
    "Runs passes on FILE and prints the IR after them, behind the fixed header\n"
    "line ('# *** IR after autodiff ***'), so that the output reads back in. FILE\n"
    "is usually IR text (FILE.mir, or --ir FILE; '-' is stdin): without --passes\n"
    "the pipeline resumes after the stage the text was dumped at (its '# *** IR\n"
    "after PASS ***' line; a plain dump is after the front end). With --passes\n"
    "exactly those passes run, in the order given: the way to test a pass IR in,\n"
    "IR out. A model file (.moe) goes through the front end first.\n"
    "\n"
    "  --passes A,B,...             the passes to run (names from 'moec passes')\n"
    "  --format text|json|dot       the output format (text reads back in)\n";

static const char *const usage_passes =
    "usage: moec passes\n"
    "\n"
    "Lists the pass pipeline in the order it runs: name and summary.\n";

static const char *const usage_ops =
    "usage: moec ops\n"
    "\n"
    "Lists the ops of the model language with their signatures; keyword\n"
    "arguments show their defaults ('?' = required).\n";

static const char *const usage_ckpt_diff =
    "usage: moec ckpt-diff A.safetensors B.safetensors [--rtol X] [--prefix P]\n"
    "\n"
    "Compares the parameters (param.*; --prefix grad. for a --dump's gradients,\n"
    "--prefix '' for every tensor) of two checkpoints, tensor by tensor:\n"
    "the relative difference ||a - b|| / ||a|| (2-norms over the tensor) and the\n"
    "largest elementwise |a - b|. Exit 0 when every tensor is within --rtol\n"
    "(default 1e-5), 1 when one is not or the tensors or shapes differ.\n";

static const char *const usage_explain =
    "usage: moec explain FILE [--format text|json] [--precision bf16|mxfp8|fp8-block]\n"
    "                         [--disable-pass NAME] [--load-pass LIB.so]\n"
    "\n"
    "Runs the pass pipeline on FILE and prints every candidate each fusion pass\n"
    "examined, one line each: where it is (file:line, the block instance), and\n"
    "FUSED -> the new node, or NOT FUSED and the reason. Nothing is declined\n"
    "silently. The same records head `moec dump` after the pass.\n";

static const char *const usage_compile =
    "usage: moec compile FILE -o OUT [--emit-cuda DIR] [--arch ARCH]\n"
    "       moec compile FILE --emit-cuda DIR | --arch ARCH   (the CUDA code alone)\n"
    "\n"
    "Compiles the model in FILE into OUT, a standalone training binary: the\n"
    "runtime plus the compiled plan. It needs no moec installation beside it.\n"
    "Run 'OUT --help' for its flags; typically:\n"
    "    OUT --data sequences.fasta --steps 1000 --log metrics.jsonl --ckpt-dir ckpt\n"
    "The model's train section must name its alphabet (protein or dna), and its\n"
    "vocabulary must match that alphabet.\n"
    "\n"
    "  --emit-cuda DIR   also write the model's CUDA code: DIR/kernels.cu (a kernel\n"
    "                    per launch of each IR node, shapes as constants) and\n"
    "                    DIR/plan.json (launch order, grids, buffers and offsets);\n"
    "                    see docs/codegen.md\n"
    "  --arch ARCH       also compile those kernels with NVRTC for ARCH (sm_90a for\n"
    "                    H100/H200; compute_NN gives PTX) and report the count; with\n"
    "                    --emit-cuda the image goes to DIR/kernels.cubin (.ptx).\n"
    "                    Loads libnvrtc from the CUDA toolkit at run time\n"
    "                    (MOEC_NVRTC_LIB overrides). OUT still trains on the CPU:\n"
    "                    running these kernels is not done yet.\n"
    "Without -o only the CUDA code is generated, and the model needs no alphabet.\n";

static const char *const usage_plot =
    "usage: moec plot METRICS.jsonl -o OUT.svg\n"
    "\n"
    "Draws the training loss (raw and smoothed) and validation loss of a\n"
    "training run's --log file against steps, with the unigram entropy as a\n"
    "reference line, as an SVG.\n";

static const char *usage_for(const char *cmd)
{
    if (!cmd)
        return usage_main;
    if (strcmp(cmd, "compile") == 0) return usage_compile;
    if (strcmp(cmd, "explain") == 0) return usage_explain;
    if (strcmp(cmd, "ckpt-diff") == 0) return usage_ckpt_diff;
    if (strcmp(cmd, "import-hf") == 0) return hf_usage_import;
    if (strcmp(cmd, "export-hf") == 0) return hf_usage_export;
    if (strcmp(cmd, "plot") == 0) return usage_plot;
    if (strcmp(cmd, "check") == 0) return usage_check;
    if (strcmp(cmd, "dump") == 0) return usage_dump;
    if (strcmp(cmd, "opt") == 0) return usage_opt;
    if (strcmp(cmd, "passes") == 0) return usage_passes;
    if (strcmp(cmd, "ops") == 0) return usage_ops;
    return NULL;
}

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "moec: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nRun 'moec %s--help' for usage.\n", cmd ? cmd : "");
    return 2;
}

static int valid_pass_selector(const char *s)
{
    return strcmp(s, "all") == 0 || pass_find(s) != NULL;
}

static int bad_pass_selector(const char *flag, const char *s, int all_allowed)
{
    fprintf(stderr, "moec: %s: unknown pass '%s'; the passes are:", flag, s);
    for (int i = 0; i < pass_count(); i++)
        fprintf(stderr, " %s", pass_get(i)->name);
    fprintf(stderr, "%s\n", all_allowed ? " (or all)" : "");
    return 2;
}

static int option_takes_value(const char *a)
{
    static const char *const with_value[] = {"--format", "--print-ir-after", "--print-ir-before",
                                             "--disable-pass", "--load-pass", "--precision", "--ep", "--dp",
                                             "--emit-cuda", "--arch", "--passes"};
    for (int i = 0; i < ARRAY_LEN(with_value); i++)
        if (strcmp(a, with_value[i]) == 0)
            return 1;
    return 0;
}

/* --load-pass is handled before everything else, so that the passes it adds
 * can be named by --print-ir-after and --disable-pass. */
static const char *plugin_paths[16];
static int nplugin_paths;

static int load_plugins(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        const char *path = NULL;
        if (strcmp(argv[i], "--load-pass") == 0 && i + 1 < argc)
            path = argv[++i];
        else if (strncmp(argv[i], "--load-pass=", 12) == 0)
            path = argv[i] + 12;
        if (!path)
            continue;
        char err[1024];
        if (nplugin_paths == ARRAY_LEN(plugin_paths)) {
            fprintf(stderr, "moec: error: at most %d --load-pass plugins\n", ARRAY_LEN(plugin_paths));
            return 2;
        }
        if (!pass_load_plugin(path, err, sizeof err)) {
            fprintf(stderr, "moec: error: --load-pass %s: %s\n", path, err);
            return 1;
        }
        plugin_paths[nplugin_paths++] = path;
    }
    return -1;
}

/* Parses argv after the command. Returns -1 to continue, else an exit code. */
static int parse_options(int argc, char **argv, Options *o)
{
    char cmdsp[64];
    snprintf(cmdsp, sizeof cmdsp, "%s ", o->command);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        int takes_value = option_takes_value(a);
        char flag[64] = {0};
        const char *eq = strchr(a, '=');
        if (strncmp(a, "--", 2) == 0 && eq && (size_t)(eq - a) < sizeof flag) {
            memcpy(flag, a, (size_t)(eq - a));
            takes_value = option_takes_value(flag);
            if (takes_value) {
                val = eq + 1;
                a = flag;
            }
        }
        if (takes_value && !val) {
            if (i + 1 >= argc)
                return usage_error(cmdsp, "option %s needs a value", a);
            val = argv[++i];
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_for(o->command), stdout);
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            printf("moec %s\n", moec_version());
            return 0;
        } else if (strcmp(a, "--format") == 0) {
            if (strcmp(o->command, "dump") != 0 && strcmp(o->command, "explain") != 0 &&
                strcmp(o->command, "opt") != 0)
                return usage_error(cmdsp, "--format belongs to 'moec dump', 'moec opt' and 'moec explain'%s", "");
            if (strcmp(o->command, "explain") == 0 && strcmp(val, "dot") == 0)
                return usage_error(cmdsp, "--format: explain writes text or json%s", "");
            if (strcmp(val, "text") == 0) o->format = PRINT_TEXT;
            else if (strcmp(val, "json") == 0) o->format = PRINT_JSON;
            else if (strcmp(val, "dot") == 0) o->format = PRINT_DOT;
            else return usage_error(cmdsp, "--format: '%s' is not one of text, json, dot", val);
        } else if (strcmp(a, "--print-ir-after") == 0) {
            if (!valid_pass_selector(val))
                return bad_pass_selector(a, val, 1);
            o->print_after = val;
        } else if (strcmp(a, "--print-ir-before") == 0) {
            if (!valid_pass_selector(val))
                return bad_pass_selector(a, val, 1);
            o->print_before = val;
        } else if (strcmp(a, "--load-pass") == 0) {
            /* loaded by load_plugins() */
        } else if (strcmp(a, "--disable-pass") == 0) {
            if (!pass_find(val))
                return bad_pass_selector(a, val, 0);
            if (o->ndisabled == ARRAY_LEN(o->disabled))
                return usage_error(cmdsp, "too many --disable-pass options%s", "");
            o->disabled[o->ndisabled++] = val;
        } else if (strcmp(a, "--precision") == 0) {
            if (strcmp(val, "bf16") == 0) o->precision = IR_PREC_BF16;
            else if (strcmp(val, "mxfp8") == 0) o->precision = IR_PREC_MXFP8;
            else if (strcmp(val, "fp8-block") == 0) o->precision = IR_PREC_FP8_BLOCK;
            else return usage_error(cmdsp, "--precision: '%s' is not one of bf16, mxfp8, fp8-block", val);
            o->has_precision = 1;
        } else if (strcmp(a, "--ep") == 0 || strcmp(a, "--dp") == 0) {
            char *end;
            long long v = strtoll(val, &end, 10);
            if (*end || end == val || v < 1 || v > 4096)
                return usage_error(cmdsp, "expected a rank count from 1 to 4096, got '%s'", val);
            if (a[2] == 'e')
                o->ep = v;
            else
                o->dp = v;
        } else if (strcmp(a, "--emit-cuda") == 0 || strcmp(a, "--arch") == 0) {
            if (strcmp(o->command, "compile") != 0)
                return usage_error(cmdsp, "%s belongs to 'moec compile'", a);
            if (!*val)
                return usage_error(cmdsp, "%s needs a value", a);
            if (a[2] == 'e')
                o->emit_cuda = val;
            else
                o->arch = val;
        } else if (strcmp(a, "--passes") == 0) {
            if (strcmp(o->command, "opt") != 0)
                return usage_error(cmdsp, "--passes belongs to 'moec opt'%s", "");
            char name[128];
            for (const char *q = val;;) {
                size_t n = strcspn(q, ",");
                snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name - 1 ? n : sizeof name - 1), q);
                if (!pass_find(name))
                    return bad_pass_selector(a, name, 0);
                if (!q[n])
                    break;
                q += n + 1;
            }
            o->passes = val;
        } else if (strcmp(a, "--ir") == 0) {
            o->ir = 1;
        } else if (strcmp(a, "--stats") == 0) {
            o->stats = 1;
        } else if (strcmp(a, "--no-verify") == 0) {
            o->no_verify = 1;
        } else if (strcmp(a, "-o") == 0) {
            if (strcmp(o->command, "compile") != 0 && strcmp(o->command, "plot") != 0)
                return usage_error(cmdsp, "-o belongs to 'moec compile' and 'moec plot'%s", "");
            if (i + 1 >= argc)
                return usage_error(cmdsp, "-o needs a file name%s", "");
            o->output = argv[++i];
        } else if (a[0] == '-' && a[1] != 0) {
            return usage_error(cmdsp, "unknown option '%s'", a);
        } else if (o->file) {
            return usage_error(cmdsp, "one model file at a time (got a second: '%s')", a);
        } else {
            o->file = a;
        }
    }
    return -1;
}

/* Expert weights are the [experts, ...] parameters; whether a grouped_linear,
 * a fused grouped_mlp, a quantize copy or a plugin's op reads them does not
 * matter. A shard of an ep-partitioned graph stands for ep of them. */
/* mkdir -p: 1, or 0 with errno set */
static int make_dirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) {
        errno = ENAMETOOLONG;
        return 0;
    }
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return 0;
            *p = c;
            if (!c)
                break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return 0;
    }
    return 1;
}

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
    }
    if (!o->arch)
        return 0;
    NvrtcOutput out;
    char err[1024] = "";
    int ok = 1;
    if (pre)
        out = *pre, memset(pre, 0, sizeof *pre);
    else
        ok = nvrtc_compile(p->cuda_source, "kernels.cu", o->arch, &out, err, sizeof err);
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
static int compile_command(const Options *o, Compilation *c)
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
    char *abs[ARRAY_LEN(plugin_paths)];
    for (int i = 0; i < nplugin_paths; i++) {
        abs[i] = realpath(plugin_paths[i], NULL);
        if (!abs[i])
            abs[i] = xstrdup(plugin_paths[i]);
    }
    Plan *p = driver_make_plan(c, o->file, (const char *const *)abs, nplugin_paths, o->has_precision, o->precision,
                               o->ep, err, sizeof err);
    for (int i = 0; i < nplugin_paths; i++)
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
    NvrtcOutput nv = {0}, *pre = NULL;
    if (o->output && o->arch) {
        /* the kernels' image goes into the binary: it starts without NVRTC on that GPU */
        pre = &nv;
        if (!nvrtc_compile(p->cuda_source, "kernels.cu", o->arch, &nv, err, sizeof err)) {
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

/* `moec explain`: every fusion candidate, one line each. */
static void explain(const IrGraph *g, int json)
{
    if (json) {
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "model", g->model);
        cJSON_AddStringToObject(root, "file", g->file);
        cJSON_AddStringToObject(root, "precision", ir_precision_name[g->train.precision]);
        cJSON_AddItemToObject(root, "decisions", ir_decisions_json(g));
        char *s = cJSON_Print(root);
        puts(s);
        cJSON_free(s);
        cJSON_Delete(root);
        return;
    }
    int fused = 0;
    for (int i = 0; i < g->decisions.len; i++) {
        const IrDecision *d = g->decisions.items[i];
        if (d->fused && d->result)
            printf("%s:%d: %s: %s: %s -> %s (%s)\n", g->file, d->loc.line, d->pass, d->where, d->action, d->result,
                   d->reason ? d->reason : "");
        else
            printf("%s:%d: %s: %s: %s: %s\n", g->file, d->loc.line, d->pass, d->where, d->action,
                   d->reason ? d->reason : "");
    }
    /* one summary line per pass: how many candidates got each verdict */
    for (int i = 0; i < g->decisions.len; i++) {
        const IrDecision *d = g->decisions.items[i];
        int first = 1, total = 0;
        for (int j = 0; j < i; j++)
            first &= strcmp(((const IrDecision *)g->decisions.items[j])->pass, d->pass) != 0;
        if (!first)
            continue;
        const char *actions[8];
        int counts[8], nact = 0;
        for (int j = i; j < g->decisions.len; j++) {
            const IrDecision *e = g->decisions.items[j];
            if (strcmp(e->pass, d->pass) != 0)
                continue;
            total++;
            int k = 0;
            while (k < nact && strcmp(actions[k], e->action) != 0)
                k++;
            if (k == nact && nact < 8) {
                actions[nact] = e->action;
                counts[nact++] = 0;
            }
            if (k < 8)
                counts[k]++;
        }
        int fusion = 1, fused = 0;
        for (int k = 0; k < nact; k++) {
            fusion &= strcmp(actions[k], "FUSED") == 0 || strcmp(actions[k], "NOT FUSED") == 0;
            if (strcmp(actions[k], "FUSED") == 0)
                fused = counts[k];
        }
        printf("%s: %d candidate%s:", d->pass, total, total == 1 ? "" : "s");
        if (fusion)
            printf(" %d fused, %d not fused", fused, total - fused);
        else
            for (int k = 0; k < nact; k++)
                printf("%s %d %s", k ? "," : "", counts[k], actions[k]);
        printf("\n");
    }
    if (g->decisions.len == 0)
        printf("no candidates: no pass found a pattern to fuse\n");
    (void)fused;
}

/* ---- IR text in: a .mir file, or FILE with --ir */

static int is_ir_input(const Options *o)
{
    size_t n = o->file ? strlen(o->file) : 0;
    return o->ir || (n > 4 && strcmp(o->file + n - 4, ".mir") == 0);
}

static const char *last_pass;  /* the last pass that ran: `moec opt` prints the IR after it */
static Diag pass_diag;         /* errors of passes on IR input, located in the model file */

/* opt --passes A,B: those passes, in that order */
static int run_pass_list(IrGraph *g, PassCtx *ctx, const char *list)
{
    char name[128];
    for (const char *q = list;;) {
        size_t n = strcspn(q, ",");
        snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name - 1 ? n : sizeof name - 1), q);
        const Pass *p = pass_find(name);  /* checked by parse_options */
        int rc = pass_run_one(g, ctx, p);
        if (rc != 0)
            return rc;
        if (!pass_is_disabled(ctx, p->name))
            last_pass = p->name;
        if (!q[n])
            return 0;
        q += n + 1;
    }
}

/* Reads c->text as IR text into c->graph and runs the passes after the
 * stage it was dumped at (or --passes); 0, or 1 after errors. */
static int run_ir(const Options *o, Compilation *c, PassCtx *ctx, int plain_dump)
{
    arena_init(&c->arena);
    diag_init(&c->diag, o->file, c->text, c->len, stderr);
    IrGraph *g = ir_read_text(&c->arena, o->file, c->text, c->len, &c->diag);
    if (!g) {
        diag_finish(&c->diag);
        return 1;
    }
    if ((o->ep && o->ep != g->train.ep) || (o->dp && o->dp != g->train.dp)) {
        fprintf(stderr, "moec: error: %s: --ep/--dp cannot change IR text: its shapes are bound for ep %lld, dp %lld "
                "(compile the model file with them instead)\n", o->file, (long long)g->train.ep,
                (long long)g->train.dp);
        return 1;
    }
    if (o->has_precision)
        g->train.precision = o->precision;
    int first = pass_index(PASS_FRONT_END_LAST) + 1;  /* a plain dump is after the front end */
    if (g->stage) {
        int after = strncmp(g->stage, "after ", 6) == 0;
        const char *name = g->stage + (after ? 6 : 7);
        int i = pass_index(name);
        if (i < 0) {
            fprintf(stderr, "moec: error: %s: the text is a snapshot %s pass '%s', which is not in the pipeline "
                    "(a plugin's pass needs its --load-pass)\n", o->file, after ? "after" : "before", name);
            return 1;
        }
        first = after ? i + 1 : i;
    }
    c->graph = g;
    if (plain_dump) {
        /* `moec dump x.mir`: the graph as read; the rest of the pipeline still runs, for its errors */
        switch (o->format) {
        case PRINT_TEXT: ir_print_text(g, stdout); break;
        case PRINT_JSON: ir_print_json(g, stdout); break;
        case PRINT_DOT: ir_print_dot(g, stdout); break;
        }
        ctx->print_after = ctx->print_before = NULL;
    }
    /* the passes' errors point at the model the IR was made from (no source line: only the IR is here) */
    diag_init(&pass_diag, g->file, NULL, 0, stderr);
    ctx->diag = &pass_diag;
    int rc = 0;
    if (o->passes) {
        rc = run_pass_list(g, ctx, o->passes);
    } else {
        rc = pass_run_from(g, ctx, first);
        for (int i = first; i < pass_count(); i++)
            if (!pass_is_disabled(ctx, pass_get(i)->name))
                last_pass = pass_get(i)->name;
    }
    if (rc != 0 || pass_diag.nerrors) {
        diag_finish(&pass_diag);
        return 1;
    }
    return 0;
}

/* `moec opt`: the IR after the last pass run, behind its header line so that it reads back in */
static void print_opt(IrGraph *g, PassCtx *ctx)
{
    ctx->print_header = 1;
    if (last_pass) {
        pass_print_ir(g, ctx, "after", last_pass);
    } else if (g->stage) {
        char when[8];
        const char *sp = strchr(g->stage, ' ');
        snprintf(when, sizeof when, "%.*s", (int)(sp - g->stage), g->stage);
        pass_print_ir(g, ctx, when, sp + 1);
    } else {
        ctx->print_header = 0;
        pass_print_ir(g, ctx, "after", "");
    }
}

static int run_front(const Options *o)
{
    if (!o->file) {
        char cmdsp[64];  /* "check ": usage_error prints "moec check --help" */
        snprintf(cmdsp, sizeof cmdsp, "%s ", o->command);
        return usage_error(cmdsp, "'%s' needs a model file", o->command);
    }
    Compilation c = {0};
    if (!compilation_read(&c, o->file, stderr))
        return 1;
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    ctx.print_before = o->print_before;
    ctx.print_after = o->print_after;
    ctx.print_format = o->format;
    ctx.stats = o->stats;
    ctx.verify_each = !o->no_verify;
    for (int i = 0; i < o->ndisabled; i++)
        ctx.disabled[ctx.ndisabled++] = o->disabled[i];
    c.opts.has_precision = o->has_precision;
    c.opts.precision = o->precision;
    c.opts.ep = o->ep;
    c.opts.dp = o->dp;
    for (int i = 0; i < o->ndisabled; i++)
        if ((o->print_after && strcmp(o->print_after, o->disabled[i]) == 0) ||
            (o->print_before && strcmp(o->print_before, o->disabled[i]) == 0))
        {
            char cmdsp[64];
            snprintf(cmdsp, sizeof cmdsp, "%s ", o->command);
            compilation_free(&c);
            return usage_error(cmdsp, "pass '%s' is disabled, so there is no IR around it to print", o->disabled[i]);
        }
    int is_dump = strcmp(o->command, "dump") == 0;
    if (is_dump && !o->print_after && !o->print_before) {
        /* plain `moec dump`: the model as lowered and verified, after the
         * front-end passes; what later passes do is --print-ir-after's.
         * With those disabled: after the one left, or before any pass. */
        ctx.print_header = 0;
        if (!pass_is_disabled(&ctx, PASS_FRONT_END_LAST))
            ctx.print_after = PASS_FRONT_END_LAST;
        else if (!pass_is_disabled(&ctx, "infer-shapes"))
            ctx.print_after = "infer-shapes";
        else
            for (int i = 0; i < pass_count() && !ctx.print_before; i++)
                if (!pass_is_disabled(&ctx, pass_get(i)->name))
                    ctx.print_before = pass_get(i)->name;
    }
    int ir_in = is_ir_input(o), is_opt = strcmp(o->command, "opt") == 0;
    if (ir_in && strcmp(o->command, "compile") == 0) {
        /* the training binary recompiles its model from the source it embeds (train/) */
        fprintf(stderr, "moec: error: %s: compile takes a model file (.moe); a training binary cannot be made "
                "from IR text yet\n", o->file);
        compilation_free(&c);
        return 1;
    }
    int rc;
    if (ir_in) {
        rc = run_ir(o, &c, &ctx, is_dump && !o->print_after && !o->print_before);
    } else if (is_opt && o->passes) {
        /* a model file: the front end, then the passes named */
        ctx.stop_after = PASS_FRONT_END_LAST;
        rc = compilation_run(&c, o->file, c.text, c.len, stderr, &ctx);
        if (rc == 0 && (run_pass_list(c.graph, &ctx, o->passes) != 0 || c.diag.nerrors)) {
            diag_finish(&c.diag);
            rc = 1;
        }
    } else {
        rc = compilation_run(&c, o->file, c.text, c.len, stderr, &ctx);
        for (int i = 0; i < pass_count() && is_opt; i++)
            if (!pass_is_disabled(&ctx, pass_get(i)->name))
                last_pass = pass_get(i)->name;
    }
    if (rc == 0) {
        IrGraph *g = c.graph;
        if (strcmp(o->command, "explain") == 0) {
            explain(g, o->format == PRINT_JSON);
        } else if (strcmp(o->command, "compile") == 0) {
            rc = compile_command(o, &c);
        } else if (is_opt) {
            print_opt(g, &ctx);
        } else if (strcmp(o->command, "dump") == 0) {
            if (!ir_in && !o->print_after && !o->print_before && !ctx.print_after && !ctx.print_before) {
                switch (o->format) {
                case PRINT_TEXT: ir_print_text(g, stdout); break;
                case PRINT_JSON: ir_print_json(g, stdout); break;
                case PRINT_DOT: ir_print_dot(g, stdout); break;
                }
            }
        } else {
            int64_t total;
            double active;
            ir_param_counts(g, &total, &active);
            char tb[32], ab[32];
            fmt_count(tb, sizeof tb, (double)total);
            fmt_count(ab, sizeof ab, active);
            printf("%s: ok: model %s, %d IR nodes, %s parameters (%s active per token)\n", o->file, g->model,
                   g->nnodes, tb, ab);
        }
        if (c.diag.nwarnings)
            fflush(stdout);
    }
    compilation_free(&c);
    return rc;
}

/* moec ckpt-diff A B [--rtol X] */
static int ckpt_diff(int argc, char **argv)
{
    const char *a = NULL, *b = NULL, *prefix = "param.";
    double rtol = 1e-5;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            fputs(usage_ckpt_diff, stdout);
            return 0;
        } else if (strcmp(argv[i], "--rtol") == 0 && i + 1 < argc) {
            char *end;
            rtol = strtod(argv[++i], &end);
            if (*end || !(rtol >= 0))
                return usage_error("ckpt-diff ", "--rtol takes a non-negative number, not '%s'", argv[i]);
        } else if (strcmp(argv[i], "--prefix") == 0 && i + 1 < argc) {
            prefix = argv[++i];
        } else if (!a) {
            a = argv[i];
        } else if (!b) {
            b = argv[i];
        } else {
            return usage_error("ckpt-diff ", "two checkpoints, not more ('%s')", argv[i]);
        }
    }
    if (!a || !b)
        return usage_error("ckpt-diff ", "give two checkpoints%s", "");
    SafeTensors sa, sb;
    char err[1024];
    if (!st_read(a, &sa, err, sizeof err) || !st_read(b, &sb, err, sizeof err)) {
        fprintf(stderr, "moec: error: %s\n", err);
        st_free(&sa);
        return 1;
    }
    int bad = 0, n = 0;
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < sa.ntensors; i++) {
        const SafeTensor *x = &sa.tensors[i];
        if (strncmp(x->name, prefix, strlen(prefix)) != 0 || x->dtype != ST_F32)
            continue;
        const SafeTensor *y = st_find(&sb, x->name);
        int same = y && y->dtype == ST_F32 && x->dtype == ST_F32 && y->nbytes == x->nbytes && y->rank == x->rank;
        for (int d = 0; same && d < x->rank; d++)
            same = x->shape[d] == y->shape[d];
        if (!same) {
            printf("%s: missing or of another shape in %s\n", x->name, b);
            bad++;
            continue;
        }
        size_t m = x->nbytes / 4;
        float *u = malloc(x->nbytes), *v = malloc(x->nbytes);
        memcpy(u, x->data, x->nbytes);
        memcpy(v, y->data, x->nbytes);
        double num = 0, den = 0, amax = 0;
        for (size_t k = 0; k < m; k++) {
            double dd = (double)u[k] - v[k];
            num += dd * dd;
            den += (double)u[k] * u[k];
            amax = fmax(amax, fabs(dd));
        }
        double err_max = den > 0 ? sqrt(num / den) : sqrt(num);
        (void)amax;
        free(u);
        free(v);
        n++;
        if (err_max > worst) {
            worst = err_max;
            worst_name = x->name;
        }
        if (err_max > rtol) {
            printf("%s: relative difference %.3g > %g (largest element difference %.3g)\n", x->name, err_max, rtol,
                   amax);
            bad++;
        }
    }
    printf("%d %s* tensors compared, largest relative difference %.3g (%s): %s\n", n, prefix, worst, worst_name,
           bad ? "DIFFERENT" : "within tolerance");
    if (n == 0) {
        printf("no tensors named %s* in %s\n", prefix, a);
        bad++;
    }
    st_free(&sa);
    st_free(&sb);
    return bad ? 1 : 0;
}

/* A training binary: load the pass plugins its plan names (for their ops),
 * read the plan, train. Nothing here runs the front end or a pass. */
static int train_binary(char **argv, int argc, const Payload *payload)
{
    char what[4200], err[2048];
    snprintf(what, sizeof what, "the plan embedded in %s", argv[0]);
    double t0 = wall_seconds();
    Plan *p = plan_from_json(payload->data, payload->len, what, pass_load_plugin, err, sizeof err);
    if (!p) {
        fprintf(stderr, "%s: error: %s\n", argv[0], err);
        return 1;
    }
    if (getenv("MOEC_PRINT_LOAD_TIME"))
        fprintf(stderr, "plan loaded in %.3f s (%zu bytes, %d IR nodes, %d compilations)\n", wall_seconds() - t0,
                payload->len, p->graph->nnodes, driver_compilations());
    int rc = train_main(argc, argv, p);
    plan_free(p);
    return rc;
}

int main(int argc, char **argv)
{
    /* a training binary is this executable with a plan appended */
    Payload payload;
    char perr[2048];
    int has = payload_read("/proc/self/exe", &payload, perr, sizeof perr);
    if (has < 0) {
        fprintf(stderr, "%s: error: %s\n", argv[0], perr);
        return 1;
    }
    if (has > 0) {
        int rc = train_binary(argv, argc, &payload);
        payload_free(&payload);
        return rc;
    }
    if (argc < 2) {
        fputs(usage_main, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(usage_main, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("moec %s\n", moec_version());
        return 0;
    }
    if (strcmp(cmd, "help") == 0) {
        const char *u = usage_for(argc > 2 ? argv[2] : NULL);
        if (!u)
            return usage_error(NULL, "no command '%s'", argv[2]);
        fputs(u, stdout);
        return 0;
    }
    if (strcmp(cmd, "ckpt-diff") == 0)
        return ckpt_diff(argc, argv);
    if (strcmp(cmd, "import-hf") == 0)
        return hf_import_main(argc, argv);
    if (strcmp(cmd, "export-hf") == 0)
        return hf_export_main(argc, argv);
    if (!usage_for(cmd) || cmd[0] == '-') {
        return usage_error(NULL, "unknown command '%s' (check, dump, opt, explain, compile, plot, ckpt-diff, import-hf, export-hf, passes, ops, help)", cmd);
    }
    Options o = {0};
    o.command = cmd;
    int rc = load_plugins(argc, argv);
    if (rc >= 0)
        return rc;
    rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (strcmp(cmd, "passes") == 0) {
        if (o.file)
            return usage_error("passes ", "'passes' takes no file (got '%s')", o.file);
        int width = 16;
        for (int i = 0; i < pass_count(); i++)
            if ((int)strlen(pass_get(i)->name) > width)
                width = (int)strlen(pass_get(i)->name);
        for (int i = 0; i < pass_count(); i++)
            printf("%-*s %s\n", width, pass_get(i)->name, pass_get(i)->summary);
        return 0;
    }
    if (strcmp(cmd, "ops") == 0) {
        for (int i = 0; i < lower_builtin_count(); i++) {
            BuiltinDoc d = lower_builtin_doc(i);
            printf("%s\n    %s\n", d.signature, d.summary);
        }
        return 0;
    }
    if (strcmp(cmd, "plot") == 0) {
        if (!o.file || !o.output)
            return usage_error("plot ", "usage: moec plot METRICS.jsonl -o OUT.svg%s", "");
        char err[1024];
        if (plot_metrics_svg(o.file, o.output, NULL, err, sizeof err) != 0) {
            fprintf(stderr, "moec: error: %s\n", err);
            return 1;
        }
        printf("wrote %s\n", o.output);
        return 0;
    }
    if (strcmp(cmd, "compile") == 0 && !o.output && !o.emit_cuda && !o.arch)
        return usage_error("compile ", "compile needs -o OUT, the training binary to write (or --emit-cuda DIR "
                           "or --arch ARCH for the CUDA code alone)%s", "");
    return run_front(&o);
}
