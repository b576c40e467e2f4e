/* parse_ctx.h - state shared by the reentrant lexer and parser. */
#ifndef MOEC_PARSE_CTX_H
#define MOEC_PARSE_CTX_H

#include "ast.h"

enum { PARSE_MAX_NESTING = 200 };  /* brackets deeper than this are refused */

typedef struct ParseCtx {
    Arena *arena;
    Diag *diag;
    AstModel *model;    /* set by the start rule */
    int line, col;      /* position of the next character */
    int nesting;        /* open ( and [ */
    int fatal;          /* stop: nesting limit, too many errors */
    int last_err_line;  /* one syntax error per line: the rest are echoes */
    int has_train;      /* a train { } section was seen */
    SrcLoc train_loc;
} ParseCtx;

#endif
