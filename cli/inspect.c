/* inspect.c - the commands that run the front end and the passes and show
 * what they made: `moec check` (a summary), `moec dump` (the IR), `moec
 * explain` (every fusion decision) and `moec opt` (passes on IR text);
 * cli_run_front also hands the compiled model to `moec compile`. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../driver/build.h"
#include "../driver/compile.h"
#include "../util/util.h"
#include "cli.h"

/* `moec explain --kernels K`: the activations region at its fullest moment (plan_memory_breakdown, docs/decisions.md
 * 54): the launch where it peaks (decision 65: the GPU's lifetimes are in launches) and its node, the peak with and
 * without the parameter gradients, and the tensors live there, largest first, so a reader sees what a memory
 * change would have to remove. */
static int cmp_bytes_desc(const void *a, const void *b)
{
    int64_t x = ((const int64_t *)a)[0], y = ((const int64_t *)b)[0];
    return x < y ? 1 : x > y ? -1 : 0;
}

static void explain_memory(const char *file, const Plan *p)
{
    PlanMemoryBreakdown m;
    plan_memory_breakdown(p, &m);
    if (m.peak_at < 0)
        return;
    const IrGraph *g = p->graph;
    const double MIB = 1048576.0;
    const IrNode *at = g->nodes[m.peak_at];
    char where[512] = "";
    if (m.peak_launch >= 0) {
        const PlanLaunch *l = &p->launches[m.peak_launch];
        snprintf(where, sizeof where, "launch %d of %d (%s) of ", m.peak_launch, p->nlaunches,
                 l->kernel >= 0 ? p->kernel_names[l->kernel] : "a host-side collective");
    }
    printf("%s:%d: memory: the activations peak at %s%s (%s): %.1f MiB live, of which %.1f MiB parameter gradients; "
           "without them %.1f MiB (tensors %.1f, workspaces %.1f); region laid out %.1f MiB\n",
           file, at->loc.line, where, at->name, ir_node_op_name(at), m.peak_live / MIB, m.peak_grads / MIB,
           (m.peak_acts + m.peak_ws) / MIB, m.peak_acts / MIB, m.peak_ws / MIB, m.acts_region / MIB);
    /* the gradients, kept to the end, may put the peak where the rest is not at its fullest: that one too */
    if (m.nograd_at >= 0 && (m.peak_launch >= 0 ? m.nograd_launch != m.peak_launch : m.nograd_at != m.peak_at)) {
        const IrNode *nat = g->nodes[m.nograd_at];
        char nwhere[512] = "";
        if (m.nograd_launch >= 0) {
            const PlanLaunch *l = &p->launches[m.nograd_launch];
            snprintf(nwhere, sizeof nwhere, "launch %d (%s) of ", m.nograd_launch,
                     l->kernel >= 0 ? p->kernel_names[l->kernel] : "a host-side collective");
        }
        printf("%s:%d: memory: without the parameter gradients the activations peak at %s%s (%s): %.1f MiB\n", file,
               nat->loc.line, nwhere, nat->name, ir_node_op_name(nat), m.nograd_live / MIB);
    }
    /* the live buffers at the peak (the lifetimes as plan_memory_breakdown computed them: the plan's planner on a
     * copy); each buffer's lifetime as the nodes of its first and last launch */
    PlanBuf *bufs = malloc(sizeof *bufs * ((size_t)p->nbufs + 1));
    int64_t(*rows)[2] = malloc(sizeof *rows * ((size_t)p->nbufs + 1));
    if (!bufs || !rows)
        die("out of memory");
    memcpy(bufs, p->bufs, sizeof *bufs * (size_t)p->nbufs);
    PlanMemory mem;
    plan_memory_again(p, bufs, &mem);
    int bylaunch = m.peak_launch >= 0, pos = bylaunch ? m.peak_launch : m.peak_at, n = 0;
    for (int b = 0; b < p->nbufs; b++) {
        int f = bylaunch ? bufs[b].lfirst : bufs[b].first, l = bylaunch ? bufs[b].llast : bufs[b].last;
        if (bufs[b].alias_of < 0 && bufs[b].region == PLAN_REGION_ACTIVATIONS && f <= pos && l >= pos &&
            bufs[b].bytes > 0) {
            rows[n][0] = bufs[b].bytes;
            rows[n++][1] = b;
        }
    }
    qsort(rows, (size_t)n, sizeof *rows, cmp_bytes_desc);
    int shown = n < 12 ? n : 12;
    for (int i = 0; i < shown; i++) {
        const PlanBuf *b = &bufs[rows[i][1]];
        int f = bylaunch ? p->launches[b->lfirst].node : b->first;
        int l = bylaunch ? p->launches[b->llast].node : b->last;
        char span[64] = "";
        if (bylaunch)
            snprintf(span, sizeof span, " (launches %d..%d)", b->lfirst, b->llast);
        printf("%s:%d: memory:   %9.1f MiB  %-40s %-9s %s, live %s .. %s%s\n", file,
               b->node >= 0 && b->node < g->nnodes ? g->nodes[b->node]->loc.line : 0, b->bytes / MIB, b->name,
               plan_storage_name[b->storage], b->kind == PLAN_BUF_WORKSPACE ? "workspace" : "tensor",
               f >= 0 && f < g->nnodes ? g->nodes[f]->name : "?", l >= 0 && l < g->nnodes ? g->nodes[l]->name
                                                                                          : "the end", span);
    }
    if (n > shown) {
        int64_t rest = 0;
        for (int i = shown; i < n; i++)
            rest += rows[i][0];
        printf("%s: memory:   %9.1f MiB  %d more buffers\n", file, rest / MIB, n - shown);
    }
    /* what grows with the layers: the forward's tensors and workspaces that the backward reads */
    if (g->loss)
        printf("%s:%d: memory: held from the forward for the backward: %.1f MiB (activations live across the loss, "
               "parameter gradients excluded)\n",
               file, g->loss->loc.line, m.held / MIB);
    free(rows);
    free(bufs);
}

/* `moec explain --kernels K`: after the fusion decisions, the code generator's for K: every node with a
 * choice of implementation (its launches' "impl" in plan.json), every node whose buffer no kernel
 * writes (the fast kernels read through it), and every node tensor stored in bf16, one line each. Takes over c's graph (the plan does). */
static int explain_kernels(const Options *o, Compilation *c)
{
    char err[1024];
    const char *file = c->graph->file ? c->graph->file : o->file;
    Plan *p = driver_make_plan(c, o->file, cli_plugin_paths, cli_nplugin_paths, o->has_precision, o->precision, o->ep,
                               err, sizeof err);
    if (!p) {
        fprintf(stderr, "moec: error: %s\n", err);
        return 1;
    }
    const IrGraph *g = p->graph;
    if (p->gpu_unsupported) {
        printf("%s: codegen: no GPU plan: %s\n", file, p->gpu_unsupported);
        plan_free(p);
        return 0;
    }
    int lines = 0;
    for (int i = 0; i < p->nlaunches; i++) {
        const PlanLaunch *l = &p->launches[i];
        if (!l->impl || (i > 0 && p->launches[i - 1].node == l->node))
            continue;
        const IrNode *n = g->nodes[l->node];
        printf("%s:%d: codegen: %s (%s): %s\n", file, n->loc.line, n->name, ir_node_op_name(n), l->impl);
        lines++;
    }
    for (int b = 0; b < g->nnodes && b < p->nbufs; b++)
        if (p->bufs[b].elided) {
            const IrNode *n = g->nodes[b];
            printf("%s:%d: codegen: %s (%s): not materialised: the fast kernels read through it\n", file,
                   n->loc.line, n->name, ir_node_op_name(n));
            lines++;
        }
    printf("codegen (--kernels %s): %d node%s with a choice of implementation or read through\n",
           plan_kernels_name[p->source.kernels], lines, lines == 1 ? "" : "s");
    /* storage types (docs/decisions.md 40): the node tensors not stored as their dtype's default */
    int nbf16 = 0;
    double bf16_bytes = 0, all_bytes = 0;
    for (int b = 0; b < g->nnodes && b < p->nbufs; b++) {
        const PlanBuf *pb = &p->bufs[b];
        if (pb->kind != PLAN_BUF_TENSOR || g->nodes[b]->op == IR_OP_PARAM || g->nodes[b]->op == IR_OP_INPUT)
            continue;
        all_bytes += (double)pb->bytes;
        if (pb->storage != PLAN_BF16)
            continue;
        const IrNode *n = g->nodes[b];
        printf("%s:%d: storage: %s (%s): bf16 (its kernel writes bf16, every consumer reads it)\n", file, n->loc.line,
               n->name, ir_node_op_name(n));
        nbf16++;
        bf16_bytes += (double)pb->bytes;
    }
    printf("storage (--kernels %s): %d node tensor%s in bf16 (%.1f MiB of the nodes' %.1f MiB), the rest fp32 "
           "(indices i32)\n",
           plan_kernels_name[p->source.kernels], nbf16, nbf16 == 1 ? "" : "s", bf16_bytes / 1048576.0,
           all_bytes / 1048576.0);
    explain_memory(file, p);
    /* where the binary runs (decision 48): sm_90a code runs on an sm_90 GPU only */
    printf("target (--kernels %s%s): %s\n", plan_kernels_name[p->source.kernels],
           p->source.kernels == PLAN_KERNELS_FAST ? ", moec compile's default" : "",
           p->needs_arch[0] ? "sm_90a code: the binary runs on an sm_90 GPU (H100, H200) or the CPU; "
                              "--kernels reference for another GPU"
           : p->source.kernels == PLAN_KERNELS_FAST ? "no sm_90a code (no node takes the sm_90a kernels): any GPU"
                                                    : "any GPU");
    plan_free(p);
    return 0;
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
        const Pass *p = pass_find(name);  /* checked by cli_parse_options */
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

int cli_run_front(const Options *o)
{
    if (!o->file) {
        char cmdsp[64];  /* "check ": cli_usage_error prints "moec check --help" */
        snprintf(cmdsp, sizeof cmdsp, "%s ", o->command);
        return cli_usage_error(cmdsp, "'%s' needs a model file", o->command);
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
    c.kernels = o->kernels;
    for (int i = 0; i < o->ndisabled; i++)
        if ((o->print_after && strcmp(o->print_after, o->disabled[i]) == 0) ||
            (o->print_before && strcmp(o->print_before, o->disabled[i]) == 0))
        {
            char cmdsp[64];
            snprintf(cmdsp, sizeof cmdsp, "%s ", o->command);
            compilation_free(&c);
            return cli_usage_error(cmdsp, "pass '%s' is disabled, so there is no IR around it to print",
                                   o->disabled[i]);
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
        if (strcmp(o->command, "explain") == 0 && o->kernels_given && o->format == PRINT_JSON) {
            fprintf(stderr, "moec: error: explain --kernels writes text only (codegen's choices follow the fusion "
                            "decisions); leave out --format json\n");
            rc = 2;
        } else if (strcmp(o->command, "explain") == 0) {
            explain(g, o->format == PRINT_JSON);
            if (o->kernels_given)
                rc = explain_kernels(o, &c);
        } else if (strcmp(o->command, "compile") == 0) {
            rc = cli_compile_command(o, &c);
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
