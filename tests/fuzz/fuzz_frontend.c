/* fuzz_frontend.c - libFuzzer target for the whole front half: lexer,
 * parser, lowering, shape inference, the pass pipeline with the verifier,
 * and all three printers. Any input must end in a clean result or located
 * errors: no crash, no sanitizer report, no leak, no hang. `make fuzz`. */
#include <stdint.h>
#include <stdio.h>

#include "../../driver/compile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *sink;
    if (!sink)
        sink = fopen("/dev/null", "w");
    Compilation c = {0};
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    ctx.print_out = sink;
    ctx.stats_out = sink;
    if (compilation_run(&c, "fuzz.moe", (const char *)data, size, sink, &ctx) == 0) {
        ir_print_text(c.graph, sink);
        ir_print_json(c.graph, sink);
        ir_print_dot(c.graph, sink);
    }
    compilation_free(&c);
    return 0;
}
