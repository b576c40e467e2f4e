/* parse.c - runs the flex scanner and bison parser over one source buffer. */
#include "ast.h"
#include "parse_ctx.h"
#include "parser.h"
#include "lexer.h"

AstModel *parse_model(Arena *arena, Diag *diag, const char *text, size_t len)
{
    ParseCtx ctx = { .arena = arena, .diag = diag, .line = 1, .col = 1 };
    yyscan_t scanner;
    if (moe_lex_init_extra(&ctx, &scanner) != 0)
        return NULL;
    YY_BUFFER_STATE buf = moe__scan_bytes(text, (int)len, scanner);
    int errors_before = diag->nerrors;
    int rc = moe_parse(scanner, &ctx);
    moe__delete_buffer(buf, scanner);
    moe_lex_destroy(scanner);
    if (rc == 2 && diag->nerrors == errors_before) {
        /* moe_error() normally reports bison's stack overflow itself */
        SrcLoc loc = { ctx.line, ctx.col, 1 };
        diag_error(diag, loc, "the model is too deeply nested to parse");
        return NULL;
    }
    if (rc != 0 || diag->nerrors > errors_before || ctx.fatal)
        return NULL;
    if (!ctx.model) {
        SrcLoc loc = { 1, 1, 1 };
        diag_error(diag, loc, "no model: a .moe file starts with `model NAME { ... }`");
        return NULL;
    }
    return ctx.model;
}
