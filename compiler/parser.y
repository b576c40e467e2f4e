/* parser.y - grammar of the .moe model language (docs/language.md).
 *
 * A pure, reentrant LALR(1) parser with locations and %expect 0: a grammar
 * conflict is a design bug, fixed with precedence or a clearer rule, never
 * tolerated. Every AST node is allocated in the compilation's arena, so no
 * %destructor is needed: discarded symbols are reclaimed with the arena.
 *
 * Statements need no separator: each one starts with a keyword or with
 * `name =`, so newlines are whitespace and `;` is optional. Syntax errors
 * are reported once per line (the rest of a broken line only echoes it) and
 * parsing resumes at the next statement, so one run shows several errors. */
%define api.pure full
%define api.prefix {moe_}
%define parse.error verbose
%locations
%expect 0
%param {void *scanner}
%parse-param {ParseCtx *ctx}

%code requires {
#include "parse_ctx.h"
}

%code provides {
int moe_lex(MOE_STYPE *lval, MOE_LTYPE *lloc, void *scanner);
}

%code {
#include <string.h>

static SrcLoc L(MOE_LTYPE l)
{
    SrcLoc s = { l.first_line, l.first_column, 1 };
    if (l.last_line == l.first_line && l.last_column > l.first_column)
        s.len = l.last_column - l.first_column;
    return s;
}

static void moe_error(MOE_LTYPE *loc, void *scanner, ParseCtx *ctx, const char *msg)
{
    (void)scanner;
    if (ctx->fatal)
        return;
    if (strcmp(msg, "memory exhausted") == 0) {
        /* bison's stack (YYMAXDEPTH) overflows only on a long run of unary
         * minus (brackets are counted by the lexer, everything else is left
         * recursive): say so in the language's terms, once */
        diag_error(ctx->diag, L(*loc), "expression nested more than %d levels deep", AST_MAX_DEPTH);
        ctx->fatal = 1;
        return;
    }
    if (loc->first_line == ctx->last_err_line)
        return;
    ctx->last_err_line = loc->first_line;
    /* token aliases above make bison's message read as prose */
    diag_error(ctx->diag, L(*loc), "%s", msg);
}

static AstExpr *expr_new(ParseCtx *ctx, AstExprKind kind, MOE_LTYPE loc)
{
    AstExpr *e = arena_alloc(ctx->arena, sizeof *e);
    e->kind = kind;
    e->loc = L(loc);
    return e;
}

static AstStmt *stmt_new(ParseCtx *ctx, AstStmtKind kind, MOE_LTYPE loc)
{
    AstStmt *s = arena_alloc(ctx->arena, sizeof *s);
    s->kind = kind;
    s->loc = L(loc);
    return s;
}

static AstExpr *binary(ParseCtx *ctx, int op, AstExpr *a, AstExpr *b, MOE_LTYPE loc)
{
    AstExpr *e = expr_new(ctx, AST_BINARY, loc);
    e->op = op;
    e->lhs = a;
    e->rhs = b;
    return e;
}

static AstArg *arg_new(ParseCtx *ctx, const char *key, MOE_LTYPE key_loc, AstExpr *value)
{
    AstArg *a = arena_alloc(ctx->arena, sizeof *a);
    a->key = key;
    a->key_loc = L(key_loc);
    a->value = value;
    return a;
}

/* Lists are built in reverse by left recursion and reversed once. */
static AstArg *args_reverse(AstArg *a, int *n)
{
    AstArg *out = NULL;
    *n = 0;
    while (a) {
        AstArg *next = a->next;
        a->next = out;
        out = a;
        a = next;
        (*n)++;
    }
    return out;
}

static AstStmt *stmts_reverse(AstStmt *s)
{
    AstStmt *out = NULL;
    while (s) {
        AstStmt *next = s->next;
        s->next = out;
        out = s;
        s = next;
    }
    return out;
}
}

%union {
    long long ival;
    double fval;
    const char *str;
    AstExpr *expr;
    AstArg *arg;
    AstStmt *stmt;
    AstName *names;
    AstTrainItem *titem;
}

/* The quoted aliases are what syntax errors say: "unexpected identifier,
 * expecting model" rather than bison's token names. */
%token MODEL "model" BLOCK "block" PARAM "param" INPUT "input" OUTPUT "output"
%token CONST "const" REPEAT "repeat" RETURN "return" TRAIN "train" INIT "init"
%token <str> IDENT "identifier" STRING "string"
%token <ival> INT "integer" BOOL "true or false"
%token <fval> FLOAT "number"

%type <expr> expr primary shape init_opt
%type <arg> args args_opt arg exprs exprs_opt
%type <stmt> stmts stmt const_defs const_def
%type <names> formals formals_opt
%type <titem> train_items train_item train_opt
%type <str> dtype_opt

%left '+' '-'
%left '*' '/' '%'
%precedence NEG

%start file

%%

file
    : MODEL IDENT '{' stmts '}' train_opt {
        AstModel *m = arena_alloc(ctx->arena, sizeof *m);
        m->name = $2;
        m->loc = L(@2);
        m->body = stmts_reverse($4);
        m->train = $6;
        m->has_train = ctx->has_train;
        m->train_loc = ctx->train_loc;
        ctx->model = m;
    }
    ;

train_opt
    : %empty { $$ = NULL; }
    | TRAIN '{' train_items '}' {
        ctx->has_train = 1;
        ctx->train_loc = L(@1);
        AstTrainItem *out = NULL, *t = $3;
        while (t) { AstTrainItem *n = t->next; t->next = out; out = t; t = n; }
        $$ = out;
    }
    ;

train_items
    : %empty { $$ = NULL; }
    | train_items train_item { $$ = $2; $$->next = $1; }
    | train_items ',' { $$ = $1; }
    | train_items ';' { $$ = $1; }
    | train_items error { $$ = $1; }
    ;

train_item
    : IDENT expr {
        $$ = arena_alloc(ctx->arena, sizeof *$$);
        $$->key = $1; $$->key_loc = L(@1); $$->value = $2;
    }
    | IDENT '=' expr {
        $$ = arena_alloc(ctx->arena, sizeof *$$);
        $$->key = $1; $$->key_loc = L(@1); $$->value = $3;
    }
    | IDENT IDENT '=' expr {
        $$ = arena_alloc(ctx->arena, sizeof *$$);
        $$->key = $1; $$->key_loc = L(@1);
        $$->subkey = $2; $$->subkey_loc = L(@2); $$->value = $4;
    }
    ;

stmts
    : %empty { $$ = NULL; }
    | stmts stmt {
        /* const lists come back as several statements, already reversed */
        AstStmt *s = $2, *last = s;
        if (!s) { $$ = $1; }
        else {
            while (last->next) last = last->next;
            last->next = $1;
            $$ = s;
        }
    }
    | stmts ';' { $$ = $1; }
    | stmts error { $$ = $1; }
    ;

stmt
    : CONST const_defs { $$ = $2; }
    | INPUT IDENT ':' dtype_opt shape {
        $$ = stmt_new(ctx, ST_INPUT, @1);
        $$->name = $2; $$->name_loc = L(@2);
        $$->dtype = $4; $$->dtype_loc = L(@4); $$->shape = $5;
    }
    | PARAM IDENT ':' dtype_opt shape init_opt {
        $$ = stmt_new(ctx, ST_PARAM, @1);
        $$->name = $2; $$->name_loc = L(@2);
        $$->dtype = $4; $$->dtype_loc = L(@4); $$->shape = $5; $$->init = $6;
    }
    | IDENT '=' expr {
        $$ = stmt_new(ctx, ST_ASSIGN, @1);
        $$->name = $1; $$->name_loc = L(@1); $$->value = $3;
    }
    | OUTPUT IDENT '=' expr {
        $$ = stmt_new(ctx, ST_OUTPUT, @1);
        $$->name = $2; $$->name_loc = L(@2); $$->value = $4;
    }
    | REPEAT expr '{' stmts '}' {
        $$ = stmt_new(ctx, ST_REPEAT, @1);
        $$->value = $2; $$->body = stmts_reverse($4);
    }
    | BLOCK IDENT '(' formals_opt ')' '{' stmts '}' {
        $$ = stmt_new(ctx, ST_BLOCK, @1);
        $$->name = $2; $$->name_loc = L(@2); $$->formals = $4;
        $$->body = stmts_reverse($7);
    }
    | RETURN expr {
        $$ = stmt_new(ctx, ST_RETURN, @1);
        $$->value = $2;
    }
    ;

const_defs
    : const_def { $$ = $1; }
    | const_defs ',' const_def { $$ = $3; $$->next = $1; }
    ;

const_def
    : IDENT '=' expr {
        $$ = stmt_new(ctx, ST_CONST, @1);
        $$->name = $1; $$->name_loc = L(@1); $$->value = $3;
    }
    ;

formals_opt
    : %empty { $$ = NULL; }
    | formals {
        AstName *out = NULL, *n = $1;
        while (n) { AstName *x = n->next; n->next = out; out = n; n = x; }
        $$ = out;
    }
    ;

formals
    : IDENT {
        $$ = arena_alloc(ctx->arena, sizeof *$$);
        $$->name = $1; $$->loc = L(@1);
    }
    | formals ',' IDENT {
        $$ = arena_alloc(ctx->arena, sizeof *$$);
        $$->name = $3; $$->loc = L(@3); $$->next = $1;
    }
    ;

dtype_opt
    : %empty { $$ = NULL; }
    | IDENT { $$ = $1; }
    ;

shape
    : '[' exprs_opt ']' {
        $$ = expr_new(ctx, AST_LIST, @$);
        $$->args = args_reverse($2, &$$->nargs);
    }
    ;

init_opt
    : %empty { $$ = NULL; }
    | INIT expr { $$ = $2; }
    ;

expr
    : expr '+' expr { $$ = binary(ctx, '+', $1, $3, @2); }
    | expr '-' expr { $$ = binary(ctx, '-', $1, $3, @2); }
    | expr '*' expr { $$ = binary(ctx, '*', $1, $3, @2); }
    | expr '/' expr { $$ = binary(ctx, '/', $1, $3, @2); }
    | expr '%' expr { $$ = binary(ctx, '%', $1, $3, @2); }
    | '-' expr %prec NEG { $$ = expr_new(ctx, AST_NEG, @1); $$->lhs = $2; }
    | primary { $$ = $1; }
    ;

primary
    : INT { $$ = expr_new(ctx, AST_INT, @1); $$->ival = $1; }
    | FLOAT { $$ = expr_new(ctx, AST_FLOAT, @1); $$->fval = $1; }
    | BOOL { $$ = expr_new(ctx, AST_BOOL, @1); $$->ival = $1; }
    | STRING { $$ = expr_new(ctx, AST_STRING, @1); $$->name = $1; }
    | IDENT { $$ = expr_new(ctx, AST_IDENT, @1); $$->name = $1; }
    | IDENT '(' args_opt ')' {
        $$ = expr_new(ctx, AST_CALL, @1);
        $$->name = $1;
        $$->args = args_reverse($3, &$$->nargs);
    }
    | primary '.' IDENT {
        $$ = expr_new(ctx, AST_FIELD, @3);
        $$->lhs = $1; $$->name = $3;
    }
    | '(' expr ')' { $$ = $2; }
    | '(' expr ',' exprs ')' {
        $$ = expr_new(ctx, AST_TUPLE, @1);
        AstArg *first = arg_new(ctx, NULL, @2, $2);
        int n;
        first->next = args_reverse($4, &n);
        $$->args = first;
        $$->nargs = n + 1;
    }
    | '[' exprs_opt ']' {
        $$ = expr_new(ctx, AST_LIST, @1);
        $$->args = args_reverse($2, &$$->nargs);
    }
    ;

exprs_opt
    : %empty { $$ = NULL; }
    | exprs { $$ = $1; }
    ;

exprs
    : expr { $$ = arg_new(ctx, NULL, @1, $1); }
    | exprs ',' expr { $$ = arg_new(ctx, NULL, @3, $3); $$->next = $1; }
    ;

args_opt
    : %empty { $$ = NULL; }
    | args { $$ = $1; }
    ;

args
    : arg { $$ = $1; }
    | args ',' arg { $$ = $3; $$->next = $1; }
    ;

arg
    : expr { $$ = arg_new(ctx, NULL, @1, $1); }
    | IDENT '=' expr { $$ = arg_new(ctx, $1, @1, $3); }
    ;

%%
