/* ast.h - the syntax tree of a .moe file, exactly as written.
 *
 * The parser builds it; lower.c gives it meaning (constants, blocks, repeat,
 * op calls) and produces the IR. One plain struct per kind of thing, with a
 * `kind` field, in the manner of chibicc: no unions to decode. Every node
 * keeps its source location so that any later error can point at it. */
#ifndef MOEC_AST_H
#define MOEC_AST_H

#include "../ir/arena.h"
#include "../ir/diag.h"

typedef enum AstExprKind {
    AST_INT,     /* 42            ival */
    AST_FLOAT,   /* 1e-5          fval */
    AST_BOOL,    /* true / false  ival */
    AST_STRING,  /* "text"        name */
    AST_IDENT,   /* d             name */
    AST_CALL,    /* f(a, k = 1)   name, args */
    AST_BINARY,  /* a + b         op, lhs, rhs */
    AST_NEG,     /* -a            lhs */
    AST_FIELD,   /* r.probs       lhs, name */
    AST_TUPLE,   /* (0.9, 0.95)   args (positional) */
    AST_LIST,    /* [B, S]        args (positional) */
} AstExprKind;

typedef struct AstExpr AstExpr;
typedef struct AstArg AstArg;

struct AstArg {
    const char *key;   /* keyword argument name, NULL when positional */
    SrcLoc key_loc;
    AstExpr *value;
    AstArg *next;
};

struct AstExpr {
    AstExprKind kind;
    SrcLoc loc;
    long long ival;
    double fval;
    const char *name;
    int op;            /* '+', '-', '*', '/', '%' */
    AstExpr *lhs, *rhs;
    AstArg *args;
    int nargs;
};

/* Lowering evaluates expressions recursively, through the blocks they call;
 * deeper than this is refused, so that `1 + 1 + ...` (no brackets for the
 * lexer to count) cannot overflow the C stack. */
enum { AST_MAX_DEPTH = 1000 };

typedef enum AstStmtKind {
    ST_CONST,    /* const name = value                    */
    ST_INPUT,    /* input name : dtype[shape]              */
    ST_PARAM,    /* param name : dtype[shape] init expr    */
    ST_ASSIGN,   /* name = value                           */
    ST_OUTPUT,   /* output name = value                    */
    ST_REPEAT,   /* repeat count { body }                  */
    ST_BLOCK,    /* block name(args) { body }              */
    ST_RETURN,   /* return value                           */
} AstStmtKind;

typedef struct AstStmt AstStmt;

typedef struct AstName {
    const char *name;
    SrcLoc loc;
    struct AstName *next;
} AstName;

struct AstStmt {
    AstStmtKind kind;
    SrcLoc loc;         /* the keyword or the assigned name */
    const char *name;
    SrcLoc name_loc;
    AstExpr *value;     /* const/assign/output/return value; repeat count */
    const char *dtype;  /* input/param: NULL when omitted */
    SrcLoc dtype_loc;
    AstExpr *shape;     /* input/param: AST_LIST */
    AstExpr *init;      /* param: NULL when omitted */
    AstName *formals;   /* block arguments */
    AstStmt *body;      /* repeat/block */
    AstStmt *next;
};

/* One line of the train section: `key value`, `key = value` or
 * `key sub = value` (as in `parallel ep = 2`). */
typedef struct AstTrainItem {
    const char *key;
    SrcLoc key_loc;
    const char *subkey;  /* NULL unless `key sub = value` */
    SrcLoc subkey_loc;
    AstExpr *value;
    struct AstTrainItem *next;
} AstTrainItem;

typedef struct AstModel {
    const char *name;
    SrcLoc loc;
    AstStmt *body;
    int has_train;
    SrcLoc train_loc;
    AstTrainItem *train;
} AstModel;

/* Parses a whole file. Returns NULL when there were syntax errors (already
 * reported through diag). */
AstModel *parse_model(Arena *arena, Diag *diag, const char *text, size_t len);

#endif
