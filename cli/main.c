/* main.c - the `moec` command line: the command table, the help texts,
 * --version, and the entry of a training binary (this executable with a
 * plan appended).
 *
 *   moec check FILE        parse, lower, verify; exit 0, or diagnostics and 1
 *   moec dump FILE         print the IR (text, JSON or DOT) after the passes
 *   moec opt FILE.mir      run passes on IR text, print the IR after them
 *   moec passes            the pass pipeline, one line each
 *   moec ops               the language's ops with their signatures
 *
 * Exit status: 0 success, 1 an error in the user's input (located on
 * stderr), 2 a usage error (bad command or flag). The options are parsed in
 * options.c; check, dump, explain and opt run in inspect.c, compile in
 * compile.c, ckpt-diff in ckpt_diff.c, import-hf and export-hf in formats/. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../driver/compile.h"
#include "../driver/build.h"
#include "../formats/hf.h"
#include "../compiler/lower.h"
#include "../util/util.h"
#include "../plan/payload.h"
#include "../formats/plot.h"
#include "../train/train.h"
#include "cli.h"

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
    "  plot METRICS.jsonl -o OUT.svg   draw training and validation loss (several\n"
    "                  files: the runs overlaid, final losses compared)\n"
    "  ckpt-diff A B   compare two checkpoints' parameters\n"
    "  prep INPUT... -o DIR --alphabet A   FASTA(.gz) files, directories, globs or\n"
    "                  '-' -> a token shard directory for --data (docs/data.md)\n"
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

static const char *const usage_prep =
    "usage: moec prep INPUT... -o DIR --alphabet protein|dna [--clusters TSV]\n"
    "                 [--shard-mb N] [--force] [--quiet]\n"
    "       moec prep --verify DIR\n"
    "\n"
    "Streams FASTA and FASTA.gz inputs (files, directories of FASTA files,\n"
    "glob patterns, '-' for standard input) in constant memory into DIR, a\n"
    "token shard directory that a training binary maps with --data DIR: token\n"
    "shards (one byte per residue, --shard-mb MiB each, default 1024), the\n"
    "offsets and ids of the sequences, and index.json (alphabet, counts, the\n"
    "split's statistics, every file's size and hash, a checksum). Everything is\n"
    "written to DIR.partial and renamed at the end: an interrupted prep leaves\n"
    "no DIR, and running it again starts over. An existing DIR is kept unless\n"
    "--force.\n"
    "\n"
    "  --clusters TSV   a two-column cluster table (representative TAB member, as\n"
    "                   `mmseqs createtsv` writes): training then draws a cluster,\n"
    "                   then one of its members, each epoch, and the validation\n"
    "                   split keeps each cluster on one side\n"
    "  --verify DIR     read every file of DIR and compare it with the index\n";

static const char *const usage_explain =
    "usage: moec explain FILE [--format text|json] [--precision bf16|mxfp8|fp8-block]\n"
    "                         [--disable-pass NAME] [--load-pass LIB.so] [--kernels fast|reference]\n"
    "\n"
    "Runs the pass pipeline on FILE and prints every candidate each fusion pass\n"
    "examined, one line each: where it is (file:line, the block instance), and\n"
    "FUSED -> the new node, or NOT FUSED and the reason. Nothing is declined\n"
    "silently. The same records head `moec dump` after the pass.\n"
    "With --kernels (text only), then the code generator's choices for that kernel\n"
    "set: each node with a choice of implementation and why (fast, or reference\n"
    "and the reason), each node the fast kernels read through (not materialised),\n"
    "and each node tensor the plan stores in bf16 (the rest is fp32). fast is what\n"
    "'moec compile' uses by default; reference is what --kernels reference gives.\n";

static const char *const usage_compile =
    "usage: moec compile FILE -o OUT [--emit-cuda DIR] [--arch ARCH]\n"
    "       moec compile FILE --emit-cuda DIR | --arch ARCH   (the CUDA code alone)\n"
    "\n"
    "Compiles the model in FILE into OUT, a standalone training binary: the\n"
    "runtime plus the compiled plan. It needs no moec installation beside it.\n"
    "OUT trains on the GPU when a CUDA driver and a GPU are there (else on the\n"
    "CPU, saying why; --device cpu|cuda chooses), and after training embeds and\n"
    "scores sequences ('OUT embed --help', 'OUT score --help', on the CPU).\n"
    "Run 'OUT --help' for its flags; typically:\n"
    "    OUT --data sequences.fasta --steps 1000 --log metrics.jsonl --ckpt-dir ckpt\n"
    "The model's train section must name its alphabet (protein or dna), and its\n"
    "vocabulary must match that alphabet.\n"
    "\n"
    "  --emit-cuda DIR   also write the model's CUDA code: DIR/kernels.cu (a kernel\n"
    "                    per launch of each IR node, shapes as constants, counts\n"
    "                    that scale with the batch as arguments) and DIR/plan.json\n"
    "                    (launch order, grids, buffers, offsets, argument values);\n"
    "                    see docs/codegen.md\n"
    "  --arch ARCH       also compile those kernels with NVRTC for ARCH (sm_90a for\n"
    "                    H100/H200; compute_NN gives PTX) and report the count; with\n"
    "                    -o the image is embedded in OUT, which runs it on a GPU of\n"
    "                    that architecture, at any --batch (without it OUT compiles\n"
    "                    its kernels with NVRTC on the GPU machine at start, then\n"
    "                    caches them; see docs/gpu-runtime.md); with --emit-cuda the\n"
    "                    image goes to DIR/kernels.cubin (.ptx). Loads libnvrtc from\n"
    "                    the CUDA toolkit at run time (MOEC_NVRTC_LIB overrides).\n"
    "  --kernels K       fast (the default) or reference. fast: the sm_90a bf16\n"
    "                    tensor-core kernels (expert MLP, linears, flash attention)\n"
    "                    for the nodes whose shapes qualify, bf16 storage around\n"
    "                    them, the reference kernels elsewhere (docs/kernels-sm90.md);\n"
    "                    --emit-cuda and 'moec explain FILE --kernels fast' say which\n"
    "                    nodes got them and why not. A plan with sm_90a code runs on\n"
    "                    an sm_90 GPU (H100, H200) only: elsewhere OUT stops and says\n"
    "                    so. reference: the fp32 SIMT kernels everywhere, the oracle\n"
    "                    the fast ones are checked against; they run on any GPU.\n"
    "                    With --arch other than sm_90a the default is reference.\n"
    "                    On the CPU (OUT --device cpu) the choice shows only as the\n"
    "                    bf16 rounding of the tensors fast stores in bf16\n"
    "Without -o only the CUDA code is generated, and the model needs no alphabet.\n";

static const char *const usage_plot =
    "usage: moec plot METRICS.jsonl -o OUT.svg [--title T]\n"
    "       moec plot A.jsonl B.jsonl [...] -o OUT.svg [--label NAME ...] [--title T]\n"
    "\n"
    "One file: draws the training loss (raw and smoothed) and validation loss of\n"
    "a training run's --log file against steps, with the unigram entropy as a\n"
    "reference line, as an SVG; the lm_loss, aux_loss and expert-load panels\n"
    "below when the log has them.\n"
    "\n"
    "Two to 8 files: the runs overlaid on one chart, each in its colour: its\n"
    "validation loss (thick line, markers) and training loss (thin, smoothed),\n"
    "a legend, and under the chart a table of each run's final validation loss\n"
    "and its difference from the first file's in percent (the first file is the\n"
    "reference: put the baseline first). Every file needs validation losses\n"
    "(--eval-every), and their last evaluations must be at the same step.\n"
    "\n"
    "  -o OUT.svg      the picture to write\n"
    "  --label NAME    a run's name in the legend and table, one per file in\n"
    "                  their order (default: the file name without .jsonl)\n"
    "  --title T       the title (default: the file name; for a comparison\n"
    "                  \"validation loss: A vs B ...\")\n";

const char *cli_usage_for(const char *cmd)
{
    if (!cmd)
        return usage_main;
    if (strcmp(cmd, "compile") == 0) return usage_compile;
    if (strcmp(cmd, "explain") == 0) return usage_explain;
    if (strcmp(cmd, "ckpt-diff") == 0) return usage_ckpt_diff;
    if (strcmp(cmd, "prep") == 0) return usage_prep;
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

/* What went to standard output reached it (a full disk, a closed pipe): else exit 1 with why. */
static int stdout_ok(const char *prog, int rc)
{
    if (fflush(stdout) == 0 && !ferror(stdout))
        return rc;
    const char *slash = strrchr(prog, '/');
    fprintf(stderr, "%s: error: writing the standard output: %s\n", slash ? slash + 1 : prog, strerror(errno));
    return rc ? rc : 1;
}

static int moec_main(int argc, char **argv)
{
    /* a file over `ulimit -f` is a write error (EFBIG) each writer reports, not a silent SIGXFSZ death */
    signal(SIGXFSZ, SIG_IGN);
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
        const char *u = cli_usage_for(argc > 2 ? argv[2] : NULL);
        if (!u)
            return cli_usage_error(NULL, "no command '%s'", argv[2]);
        fputs(u, stdout);
        return 0;
    }
    if (strcmp(cmd, "ckpt-diff") == 0)
        return cli_ckpt_diff(argc, argv);
    if (strcmp(cmd, "prep") == 0)
        return cli_prep(argc, argv);
    if (strcmp(cmd, "plot") == 0)
        return cli_plot(argc, argv);
    if (strcmp(cmd, "import-hf") == 0)
        return hf_import_main(argc, argv);
    if (strcmp(cmd, "export-hf") == 0)
        return hf_export_main(argc, argv);
    if (!cli_usage_for(cmd) || cmd[0] == '-') {
        static const char *const commands[] = {"check", "dump", "opt", "explain", "compile", "plot", "ckpt-diff", "prep",
                                               "import-hf", "export-hf", "passes", "ops", "help", NULL};
        const char *best = suggest_among(cmd, commands);
        char msg[512];
        snprintf(msg, sizeof msg, "unknown command '%s'%s%s%s (check, dump, opt, explain, compile, plot, ckpt-diff, "
                 "prep, import-hf, export-hf, passes, ops, help)", cmd, best ? "; did you mean '" : "",
                 best ? best : "", best ? "'?" : "");
        return cli_usage_error(NULL, "%s", msg);
    }
    Options o = {0};
    o.command = cmd;
    int rc = cli_load_plugins(argc, argv);
    if (rc >= 0)
        return rc;
    rc = cli_parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    if (strcmp(cmd, "passes") == 0) {
        if (o.file)
            return cli_usage_error("passes ", "'passes' takes no file (got '%s')", o.file);
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
    if (strcmp(cmd, "compile") == 0 && !o.output && !o.emit_cuda && !o.arch)
        return cli_usage_error("compile ", "compile needs -o OUT, the training binary to write (or --emit-cuda DIR "
                               "or --arch ARCH for the CUDA code alone)%s", "");
    return cli_run_front(&o);
}

int main(int argc, char **argv) { return stdout_ok(argv[0], moec_main(argc, argv)); }
