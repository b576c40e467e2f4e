/* read_text.c - the IR text format as an input: reads what ir_print_text
 * prints back into the same IrGraph, so that a dump can be checked, fed to
 * chosen passes (`moec opt x.mir --passes ...`) or compiled, and passes can
 * be tested IR in, IR out (docs/ir.md §5, "Reading IR text").
 *
 * The format is line-oriented: header comment lines (`# moec IR of model`,
 * `# train:` and its continuation lines, one line per decision, and an
 * optional `# *** IR after PASS ***`), then `graph NAME {`, one line per
 * node, `output`, `loss` and `grad` lines and `}`. Other comments and blank
 * lines are skipped. Everything the printer leaves out is derived the way
 * lower.c and the passes make it (ir_name_label and friends in ir.c).
 *
 * Mistakes in the text are user errors: the first one is reported, located
 * in the text with the line shown, and the reader returns NULL. Nothing
 * here exits or recurses; names are looked up in a hash table, so reading
 * is linear in the size of the text. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"
#include "../util/util.h"

/* Limits that keep every later computation on shapes and attributes clear
 * of int64 overflow (the shape rules add and multiply them). */
#define MAX_NAME 4096
#define MAX_DIM ((int64_t)1 << 40)
#define MAX_NUMEL ((int64_t)1 << 53)
#define MAX_ATTR_INT ((int64_t)1 << 40)

/* What a node line said beyond the node itself, kept until the whole graph
 * is read (the layer depends on other nodes; the output name on the loss). */
typedef struct NodeExtra {
    const char *layer;     /* the `layer "..."` given */
    int has_layer;         /* 1: layer given ("none" leaves it NULL) */
    int output;            /* 0 no output line, 1 implied name, 2 `as` given */
    const char *output_name;
} NodeExtra;

typedef struct Reader {
    Arena *a;
    Diag *d;
    IrGraph *g;
    const char *text;
    size_t len, pos;     /* pos: start of the next line */
    int line;            /* the current line, 1-based */
    const char *ls, *le; /* the current line's text (without the newline) */
    const char *p;       /* the cursor in it */
    IrNodeMap map;
    NodeExtra *extra;    /* by node id */
    int extra_cap;
    IrNode **params, **grads;
    int nparams, params_cap;
    int header_nodes;    /* N of "# moec IR of model ...: N nodes", -1 if absent */
    int header_line;
    const char *header_model;
    int graph_line;
} Reader;

/* ---- lines, locations, errors ---- */

static int next_line(Reader *r)
{
    if (r->pos >= r->len)
        return 0;
    r->ls = r->text + r->pos;
    const char *end = r->text + r->len;
    const char *nl = memchr(r->ls, '\n', (size_t)(end - r->ls));
    r->le = nl ? nl : end;
    r->pos = (size_t)((nl ? nl + 1 : end) - r->text);
    if (r->le > r->ls && r->le[-1] == '\r')
        r->le--;
    r->line++;
    r->p = r->ls;
    return 1;
}

static SrcLoc loc_at(const Reader *r, const char *at, size_t len)
{
    SrcLoc l = {r->line, (int)(at - r->ls) + 1, len ? (int)(len < 1000 ? len : 1000) : 1};
    return l;
}

static int error_at(Reader *r, const char *at, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int error_at(Reader *r, const char *at, size_t len, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    diag_error(r->d, loc_at(r, at, len), "%s", msg);
    return 0;
}

static void skip_sp(Reader *r)
{
    while (r->p < r->le && (*r->p == ' ' || *r->p == '\t'))
        r->p++;
}

/* The rest of the line is empty (or a comment). */
static int at_end(Reader *r)
{
    skip_sp(r);
    return r->p == r->le || *r->p == '#';
}

static int error_at_end(Reader *r);
static int end_of_line(Reader *r) { return at_end(r) || error_at_end(r); }

static int accept(Reader *r, const char *s)
{
    size_t n = strlen(s);
    skip_sp(r);
    if ((size_t)(r->le - r->p) >= n && memcmp(r->p, s, n) == 0) {
        r->p += n;
        return 1;
    }
    return 0;
}

/* A short printable quote of the text at the cursor, for messages. */
static const char *quote(const Reader *r, char buf[40])
{
    if (r->p >= r->le)
        return "the end of the line";
    size_t n = 0;
    buf[n++] = '\'';
    for (const char *q = r->p; q < r->le && n < 30 && *q != ' '; q++)
        buf[n++] = (*q >= 32 && *q < 127) ? *q : '?';
    buf[n++] = '\'';
    buf[n] = 0;
    return buf;
}

static int expect(Reader *r, const char *s, const char *what)
{
    if (accept(r, s))
        return 1;
    char b[40];
    return error_at(r, r->p, 1, "expected %s, found %s", what, quote(r, b));
}

static int error_at_end(Reader *r)
{
    char b[40];
    return error_at(r, r->p, 1, "expected the end of the line, found %s", quote(r, b));
}

static int is_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* A word: op, dtype, attribute and keyword names, precision, alphabet. */
static size_t word(Reader *r, const char **w)
{
    skip_sp(r);
    *w = r->p;
    while (r->p < r->le && is_word_char(*r->p))
        r->p++;
    return (size_t)(r->p - *w);
}

static int accept_word(Reader *r, const char *kw)
{
    const char *save = r->p, *w;
    size_t n = word(r, &w);
    if (n == strlen(kw) && memcmp(w, kw, n) == 0)
        return 1;
    r->p = save;
    return 0;
}

static int is_name_char(char c)
{
    return c > ' ' && c < 127 && !strchr(",(){}[]:=%@\"#", c);
}

/* %NAME: the cursor is on the '%'. */
static int read_name(Reader *r, const char **s, size_t *n)
{
    skip_sp(r);
    if (r->p >= r->le || *r->p != '%') {
        char b[40];
        return error_at(r, r->p, 1, "expected a %%name, found %s", quote(r, b));
    }
    const char *at = r->p++;
    *s = r->p;
    while (r->p < r->le && is_name_char(*r->p))
        r->p++;
    *n = (size_t)(r->p - *s);
    if (*n == 0)
        return error_at(r, at, 1, "expected a name after '%%'");
    if (*n > MAX_NAME)
        return error_at(r, at, *n + 1, "a name of %zu characters; at most %d are allowed", *n, MAX_NAME);
    return 1;
}

static int read_int(Reader *r, int64_t lo, int64_t hi, int64_t *v, const char *what)
{
    skip_sp(r);
    const char *at = r->p;
    int neg = r->p < r->le && *r->p == '-';
    if (neg)
        r->p++;
    if (r->p >= r->le || *r->p < '0' || *r->p > '9') {
        char b[40];
        r->p = at;
        return error_at(r, at, 1, "expected %s (an integer), found %s", what, quote(r, b));
    }
    uint64_t x = 0;
    int over = 0;
    while (r->p < r->le && *r->p >= '0' && *r->p <= '9') {
        unsigned dgt = (unsigned)(*r->p++ - '0');
        if (x > (UINT64_MAX - dgt) / 10)
            over = 1;
        else
            x = x * 10 + dgt;
    }
    if (!over && (neg ? x > (uint64_t)INT64_MAX + 1 : x > (uint64_t)INT64_MAX))
        over = 1;
    int64_t val = over ? 0 : neg ? (x == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)x) : (int64_t)x;
    if (over || val < lo || val > hi)
        return error_at(r, at, (size_t)(r->p - at), "%s %.*s is out of range (%lld to %lld)", what,
                        (int)(r->p - at > 40 ? 40 : r->p - at), at, (long long)lo, (long long)hi);
    *v = val;
    return 1;
}

static int read_float(Reader *r, double *v, const char *what)
{
    skip_sp(r);
    const char *at = r->p;
    while (r->p < r->le && (is_word_char(*r->p) || *r->p == '.' || *r->p == '+'))
        r->p++;
    size_t n = (size_t)(r->p - at);
    char buf[64];
    if (n == 0 || n >= sizeof buf) {
        char b[40];
        r->p = at;
        return error_at(r, at, n ? n : 1, "expected %s (a number), found %s", what, quote(r, b));
    }
    memcpy(buf, at, n);
    buf[n] = 0;
    char *end;
    double x = strtod(buf, &end);
    if (end != buf + n || (buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X')))
        return error_at(r, at, n, "expected %s (a number), found '%s'", what, buf);
    *v = x;
    return 1;
}

static int read_string(Reader *r, const char **s, const char *what)
{
    skip_sp(r);
    if (r->p >= r->le || *r->p != '"') {
        char b[40];
        return error_at(r, r->p, 1, "expected %s (a \"string\"), found %s", what, quote(r, b));
    }
    const char *at = r->p++, *start = r->p;
    while (r->p < r->le && *r->p != '"') {
        if ((unsigned char)*r->p < 32 || (unsigned char)*r->p >= 127)
            return error_at(r, r->p, 1, "unexpected byte 0x%02x in a string", (unsigned char)*r->p);
        r->p++;
    }
    if (r->p >= r->le)
        return error_at(r, at, 1, "unterminated string");
    *s = arena_strndup(r->a, start, (size_t)(r->p - start));
    r->p++;
    return 1;
}

/* ---- header comments ---- */

static int one_of(const char *w, size_t n, const char *const *set)
{
    for (; *set; set++)
        if (strlen(*set) == n && memcmp(*set, w, n) == 0)
            return 1;
    return 0;
}

static int read_word_in(Reader *r, const char **out, const char *what, const char *const *set)
{
    const char *w;
    size_t n = word(r, &w);
    if (!n || !one_of(w, n, set)) {
        char b[40];
        r->p = w;
        return error_at(r, w, n, "%s: expected one of the known values, found %s", what, quote(r, b));
    }
    for (; *set; set++)
        if (strlen(*set) == n && memcmp(*set, w, n) == 0)
            *out = *set;
    return 1;
}

/* One of a train enum's names (ir_*_name) into *out. */
#define read_enum_in(r, out, what, names) read_enum_at(r, (int *)(out), what, names)
static int read_enum_at(Reader *r, int *out, const char *what, const char *const *names)
{
    const char *w = NULL;
    if (!read_word_in(r, &w, what, names))
        return 0;
    *out = ir_name_index(names, w, strlen(w));
    return 1;
}

/* The lines ir_print_train writes; r->p is after "# train:" or "#". */
static int train_line(Reader *r)
{
    IrTrain *t = &r->g->train;
    if (accept_word(r, "optimizer")) {
        return read_enum_in(r, &t->optimizer, "optimizer", ir_optimizer_name) && expect(r, "(", "'('") &&
               expect(r, "lr =", "'lr ='") && read_float(r, &t->lr, "lr") && expect(r, ",", "','") &&
               expect(r, "betas = (", "'betas = ('") && read_float(r, &t->beta1, "beta1") && expect(r, ",", "','") &&
               read_float(r, &t->beta2, "beta2") && expect(r, "),", "'),'") && expect(r, "eps =", "'eps ='") &&
               read_float(r, &t->eps, "eps") && expect(r, ",", "','") &&
               expect(r, "weight_decay =", "'weight_decay ='") && read_float(r, &t->weight_decay, "weight_decay") &&
               expect(r, ")", "')'") && end_of_line(r);
    }
    if (accept_word(r, "schedule")) {
        const char *w;
        size_t n;
        if (!read_enum_in(r, &t->schedule, "schedule", ir_schedule_name) || !expect(r, "(", "'('") ||
            !expect(r, "warmup =", "'warmup ='") || !read_int(r, 0, INT64_MAX, &t->warmup, "warmup") ||
            !expect(r, ",", "','") || !expect(r, "min_lr =", "'min_lr ='") ||
            !read_float(r, &t->min_lr, "min_lr") || !expect(r, "),", "'),'") ||
            !expect(r, "precision", "'precision'"))
            return 0;
        n = word(r, &w);
        int prec = -1;
        for (int i = 0; i < 3; i++)
            if (strlen(ir_precision_name[i]) == n && memcmp(ir_precision_name[i], w, n) == 0)
                prec = i;
        if (prec < 0)
            return error_at(r, w, n ? n : 1, "precision must be bf16, mxfp8 or fp8-block");
        t->precision = (IrPrecision)prec;
        return expect(r, ",", "','") && expect(r, "ep", "'ep'") && read_int(r, 1, 4096, &t->ep, "ep") &&
               expect(r, ",", "','") && expect(r, "dp", "'dp'") && read_int(r, 1, 4096, &t->dp, "dp") &&
               end_of_line(r);
    }
    if (accept_word(r, "batch")) {
        return read_int(r, 1, MAX_DIM, &t->batch, "batch") && expect(r, ",", "','") && expect(r, "seq", "'seq'") &&
               read_int(r, 1, MAX_DIM, &t->seq, "seq") && expect(r, ",", "','") &&
               expect(r, "grad_clip", "'grad_clip'") && read_float(r, &t->grad_clip, "grad_clip") &&
               expect(r, ",", "','") && expect(r, "steps", "'steps'") &&
               read_int(r, 0, INT64_MAX, &t->steps, "steps") && expect(r, ",", "','") &&
               expect(r, "aux_loss", "'aux_loss'") && read_float(r, &t->aux_loss_coef, "aux_loss") &&
               expect(r, ",", "','") && expect(r, "alphabet", "'alphabet'") &&
               read_enum_in(r, &t->alphabet, "alphabet", ir_alphabet_name) && expect(r, ",", "','") &&
               expect(r, "objective", "'objective'") && read_enum_in(r, &t->objective, "objective", ir_objective_name) &&
               end_of_line(r);
    }
    if (accept_word(r, "packing"))
        return read_enum_in(r, &t->packing, "packing", ir_packing_name) && end_of_line(r);
    if (accept_word(r, "checkpoint"))
        return read_enum_in(r, &t->checkpoint, "checkpoint", ir_checkpoint_name) && end_of_line(r);
    if (accept(r, "weight decay also on:")) {
        int any = 0;
        for (;;) {
            if (accept_word(r, "norms"))
                t->decay_norms = any = 1;
            else if (accept_word(r, "embeddings"))
                t->decay_embeddings = any = 1;
            else
                break;
        }
        if (!any || !at_end(r)) {
            char b[40];
            return error_at(r, r->p, 1, "expected norms or embeddings, found %s", quote(r, b));
        }
        return 1;
    }
    return 1;  /* another comment */
}

/* "# moec IR of model NAME (FILE): N nodes" */
static int header_line(Reader *r)
{
    const char *name;
    size_t n = word(r, &name);
    if (!n || !accept(r, "("))
        return error_at(r, r->p, 1, "expected 'NAME (FILE): N nodes' after '# moec IR of model'");
    const char *file = r->p, *q = r->le;
    /* FILE may hold anything; the line ends in "): N nodes" */
    static const char tail[] = " nodes";
    size_t tl = sizeof tail - 1;
    if ((size_t)(q - file) < tl || memcmp(q - tl, tail, tl) != 0)
        return error_at(r, file, 1, "expected '(FILE): N nodes' after the model name");
    q -= tl;
    const char *digits = q;
    while (digits > file && digits[-1] >= '0' && digits[-1] <= '9')
        digits--;
    if (digits == q || digits - file < 3 || memcmp(digits - 3, "): ", 3) != 0)
        return error_at(r, file, 1, "expected '(FILE): N nodes' after the model name");
    r->header_model = arena_strndup(r->a, name, n);
    r->g->model = r->header_model;
    r->g->file = arena_strndup(r->a, file, (size_t)(digits - 3 - file));
    r->p = digits;
    int64_t nn;
    if (!read_int(r, 0, 100000000, &nn, "the node count"))
        return 0;
    r->header_nodes = (int)nn;
    r->header_line = r->line;
    r->p = r->le;
    return 1;
}

/* "# PASS: WHERE (line N): ACTION -> %RESULT" or "...: ACTION: REASON";
 * anything else that starts like a comment is only a comment. */
static void decision_line(Reader *r)
{
    const char *s = r->p, *e = r->le;
    const char *c1 = s;
    while (c1 < e && *c1 != ':' && *c1 != ' ')
        c1++;
    if (c1 == s || c1 + 2 > e || c1[0] != ':' || c1[1] != ' ')
        return;
    const char *where = c1 + 2, *w_end = where;
    while (w_end < e && *w_end != ' ')
        w_end++;
    static const char lp[] = " (line ";
    if (w_end == where || (size_t)(e - w_end) < sizeof lp - 1 || memcmp(w_end, lp, sizeof lp - 1) != 0)
        return;
    const char *num = w_end + sizeof lp - 1, *ne = num;
    long line = 0, col = 0;
    while (ne < e && *ne >= '0' && *ne <= '9' && ne - num < 9)
        line = line * 10 + (*ne++ - '0');
    if (ne == num || ne == e || *ne++ != ':')
        return;
    for (num = ne; ne < e && *ne >= '0' && *ne <= '9' && ne - num < 9;)
        col = col * 10 + (*ne++ - '0');
    if (ne == num || e - ne < 3 || memcmp(ne, "): ", 3) != 0)
        return;
    const char *act = ne + 3;
    IrDecision *d = arena_alloc(r->a, sizeof *d);
    d->pass = arena_strndup(r->a, s, (size_t)(c1 - s));
    d->where = arena_strndup(r->a, where, (size_t)(w_end - where));
    d->loc.line = (int)line;
    d->loc.col = (int)col;
    d->loc.len = 1;
    const char *arrow = NULL;
    for (const char *q = act; e - q >= 5 && !arrow; q++)
        if (memcmp(q, " -> %", 5) == 0)
            arrow = q;
    if (arrow) {
        d->action = arena_strndup(r->a, act, (size_t)(arrow - act));
        const char *res = arrow + 5, *res_end = res;
        while (res_end < e && *res_end != ' ')
            res_end++;
        d->result = arena_strndup(r->a, res, (size_t)(res_end - res));
        /* " (DETAILS)": what the fused node is */
        if (e - res_end >= 3 && res_end[1] == '(' && e[-1] == ')')
            d->reason = arena_strndup(r->a, res_end + 2, (size_t)(e - 1 - (res_end + 2)));
        d->fused = 1;
    } else {
        const char *colon = act;
        while (colon + 1 < e && !(colon[0] == ':' && colon[1] == ' '))
            colon++;
        if (colon + 1 >= e) {
            if (e - act >= 1 && e[-1] == ':')  /* "ACTION: " with the blank trimmed */
                colon = e - 1;
            else
                return;
        }
        d->action = arena_strndup(r->a, act, (size_t)(colon - act));
        const char *why = colon + 2 <= e ? colon + 2 : e;
        d->reason = why < e ? arena_strndup(r->a, why, (size_t)(e - why)) : NULL;
        /* the text has no flag: a decline's words are NOT ..., KEPT ..., PARTLY ... */
        d->fused = !(strncmp(d->action, "NOT ", 4) == 0 || strncmp(d->action, "KEPT ", 5) == 0 ||
                     strncmp(d->action, "PARTLY ", 7) == 0);
    }
    ptrvec_push(r->a, &r->g->decisions, d);
}

static int comment_line(Reader *r)
{
    r->p++;  /* '#' */
    const char *save = r->p;
    int after = accept(r, "*** IR after ");
    if (after || accept(r, "*** IR before ")) {
        const char *w;
        size_t n = word(r, &w);
        if (!n || !accept(r, "***"))
            return error_at(r, r->ls, 1, "expected '# *** IR after PASS ***'");
        r->g->stage = arena_printf(r->a, "%s %.*s", after ? "after" : "before", (int)n, w);
        return 1;
    }
    r->p = save;
    if (accept(r, "moec IR of model "))
        return header_line(r);
    r->p = save;
    if (accept(r, "train:"))
        return train_line(r);
    r->p = save;
    if (r->p < r->le && *r->p == ' ' && r->p + 1 < r->le && r->p[1] == ' ')
        return train_line(r);  /* "#        schedule ...": the train lines go on */
    if (r->p < r->le && *r->p == ' ') {
        r->p++;
        decision_line(r);
    }
    return 1;
}

/* ---- nodes ---- */

static void push_node(Reader *r, IrNode *n)
{
    IrGraph *g = r->g;
    if (g->nnodes == g->cap) {
        int cap = g->cap ? g->cap * 2 : 256;
        IrNode **nodes = arena_calloc(r->a, (size_t)cap, sizeof *nodes);
        if (g->nnodes)
            memcpy(nodes, g->nodes, (size_t)g->nnodes * sizeof *nodes);
        g->nodes = nodes;
        g->cap = cap;
    }
    if (g->nnodes == r->extra_cap) {
        r->extra_cap = r->extra_cap ? r->extra_cap * 2 : 256;
        r->extra = realloc(r->extra, (size_t)r->extra_cap * sizeof *r->extra);
        if (!r->extra)
            die("out of memory");
    }
    memset(&r->extra[g->nnodes], 0, sizeof *r->extra);
    n->id = g->nnodes;
    g->nodes[g->nnodes++] = n;
    ir_node_map_put(&r->map, n);
    nameset_add(r->a, g->names, n->name);
}

/* Looks up %NAME as a source; an unknown one is told apart from one that is
 * defined further down (the graph must be in topological order). */
static IrNode *lookup_source(Reader *r, const char *s, size_t n, const char *at)
{
    IrNode *src = ir_node_map_get(&r->map, s, n);
    if (src)
        return src;
    int later = 0;
    for (const char *q = r->le; q < r->text + r->len && !later;) {
        const char *nl = memchr(q, '\n', (size_t)(r->text + r->len - q));
        const char *e = nl ? nl : r->text + r->len;
        const char *b = q;
        while (b < e && (*b == ' ' || *b == '\t'))
            b++;
        if ((size_t)(e - b) > n + 1 && b[0] == '%' && memcmp(b + 1, s, n) == 0 && !is_name_char(b[n + 1]))
            later = 1;
        q = nl ? nl + 1 : e;
    }
    if (later)
        error_at(r, at, n + 1, "%%%.*s is used before it is defined (a node's sources must come before it)",
                 (int)n, s);
    else
        error_at(r, at, n + 1, "unknown node %%%.*s", (int)n, s);
    return NULL;
}

static const char *const inits[] = {"normal", "uniform", "zeros", "ones", "constant", NULL};
static const char *const precisions[] = {"bf16", "mxfp8", "fp8-block", NULL};
static const char *const groups[] = {"world", "dp", NULL};
static const char *const axes[] = {"rowwise", "colwise", NULL};
static const char *const layouts[] = {"gate_up", NULL};

static int read_attrs(Reader *r, IrNode *n, unsigned allowed, const char *opname)
{
    do {
        const char *w;
        size_t wl = word(r, &w);
        char key[32];
        if (!wl || wl >= sizeof key) {
            char b[40];
            return error_at(r, w, wl ? wl : 1, "expected an attribute name, found %s", quote(r, b));
        }
        memcpy(key, w, wl);
        key[wl] = 0;
        int k = ir_attr_lookup(key);
        if (k < 0)
            return error_at(r, w, wl, "unknown attribute '%s'", key);
        if (!(allowed & (1u << k)))
            return error_at(r, w, wl, "attribute %s does not belong to %s", key, opname);
        if (ir_has_attr(n, (IrAttrKey)k))
            return error_at(r, w, wl, "attribute %s is given twice", key);
        if (!expect(r, "=", "'='"))
            return 0;
        switch (ir_attr_kind[k]) {
        case IR_AK_I: {
            int64_t v;
            /* ignore is only compared; every other one enters shape arithmetic */
            int64_t lim = k == IR_ATTR_IGNORE ? INT64_MAX : MAX_ATTR_INT;
            if (!read_int(r, k == IR_ATTR_IGNORE ? INT64_MIN : -lim, lim, &v, key))
                return 0;
            ir_set_attr_i(n, (IrAttrKey)k, v);
            break;
        }
        case IR_AK_B:
            if (accept_word(r, "true"))
                ir_set_attr_i(n, (IrAttrKey)k, 1);
            else if (accept_word(r, "false"))
                ir_set_attr_i(n, (IrAttrKey)k, 0);
            else
                return error_at(r, r->p, 1, "%s takes true or false", key);
            break;
        case IR_AK_F: {
            double v;
            if (!read_float(r, &v, key))
                return 0;
            ir_set_attr_f(n, (IrAttrKey)k, v);
            break;
        }
        case IR_AK_E: {
            const char *at, *v;
            skip_sp(r);
            at = r->p;
            if (!read_string(r, &v, key))
                return 0;
            int e = ir_attr_enum_lookup((IrAttrKey)k, v, strlen(v));
            if (e < 0)
                return error_at(r, at, (size_t)(r->p - at), "%s = \"%s\" is not a value moec knows", key, v);
            ir_set_attr_e(n, (IrAttrKey)k, e);
            break;
        }
        case IR_AK_S: {
            const char *at, *v;
            skip_sp(r);
            at = r->p;
            if (!read_string(r, &v, key))
                return 0;
            const char *const *set = k == IR_ATTR_INIT ? inits : k == IR_ATTR_PRECISION ? precisions
                                   : k == IR_ATTR_GROUP ? groups : k == IR_ATTR_AXIS ? axes
                                   : k == IR_ATTR_LAYOUT ? layouts : NULL;
            if (set && !one_of(v, strlen(v), set))
                return error_at(r, at, (size_t)(r->p - at), "%s = \"%s\" is not a value moec knows", key, v);
            ir_set_attr_s(n, (IrAttrKey)k, v);
            break;
        }
        }
    } while (accept(r, ","));
    return expect(r, "}", "',' or '}'");
}

static int read_type(Reader *r, IrDType *dt, int *rank, int64_t *shape)
{
    const char *w;
    size_t wl = word(r, &w);
    char b[16];
    int t = -1;
    if (wl && wl < sizeof b) {
        memcpy(b, w, wl);
        b[wl] = 0;
        t = ir_dtype_lookup(b);
    }
    if (t < 0)
        return error_at(r, w, wl, "expected a dtype (f32, bf16, f16, i32, e4m3, e8m0), found '%.*s'",
                        (int)(wl > 20 ? 20 : wl), w);
    *dt = (IrDType)t;
    if (r->p >= r->le || *r->p != '[')
        return error_at(r, r->p, 1, "expected '[' and the shape after the dtype");
    r->p++;
    *rank = 0;
    int64_t numel = 1;
    const char *at = r->p;
    if (accept(r, "]"))
        return 1;
    do {
        if (*rank == IR_MAX_RANK)
            return error_at(r, at, (size_t)(r->p - at), "more than %d dimensions", IR_MAX_RANK);
        int64_t v;
        if (!read_int(r, 1, MAX_DIM, &v, "a dimension"))
            return 0;
        if (!checked_mul_i64(numel, v, &numel) || numel > MAX_NUMEL)
            return error_at(r, at, (size_t)(r->p - at), "a tensor of more than 2^53 elements");
        shape[(*rank)++] = v;
    } while (accept(r, ","));
    return expect(r, "]", "',' or ']'");
}

static int node_line(Reader *r)
{
    const char *name_at = r->p, *s;
    size_t sn;
    if (!read_name(r, &s, &sn))
        return 0;
    if (ir_node_map_get(&r->map, s, sn))
        return error_at(r, name_at, sn + 1, "%%%.*s is defined twice", (int)sn, s);
    if (!expect(r, "=", "'=' after the node's name"))
        return 0;
    const char *op_at;
    size_t opl = word(r, &op_at);
    if (!opl)
        return error_at(r, op_at, 1, "expected an op name");
    char opname[64];
    int op = -1;
    const IrCustomOp *custom = NULL;
    if (opl < sizeof opname) {
        memcpy(opname, op_at, opl);
        opname[opl] = 0;
        op = ir_op_lookup(opname);
    }
    if (op == IR_OP_CUSTOM)
        return error_at(r, op_at, opl, "'custom' is not written: a plugin's op goes by its own name");
    if (op < 0) {
        custom = ir_custom_op_find(op_at, opl);
        if (!custom)
            return error_at(r, op_at, opl, "unknown op '%.*s' (a plugin's op needs --load-pass with its plugin)",
                            (int)(opl > 64 ? 64 : opl), op_at);
        op = IR_OP_CUSTOM;
    }
    IrNode *n = arena_alloc(r->a, sizeof *n);
    n->op = (IrOp)op;
    n->custom = custom;
    n->name = arena_strndup(r->a, s, sn);
    const char *oname = ir_node_op_name(n);
    int arity = ir_node_arity(n);
    SrcLoc src_at[IR_MAX_SRC];
    if (accept(r, "(")) {
        do {
            skip_sp(r);
            const char *at = r->p, *ss;
            size_t ssn;
            if (n->nsrc == IR_MAX_SRC)
                return error_at(r, at, 1, "more than %d sources", IR_MAX_SRC);
            if (!read_name(r, &ss, &ssn))
                return 0;
            IrNode *src = lookup_source(r, ss, ssn, at);
            if (!src)
                return 0;
            src_at[n->nsrc] = loc_at(r, at, ssn + 1);
            n->src[n->nsrc++] = src;
        } while (accept(r, ","));
        if (!expect(r, ")", "',' or ')'"))
            return 0;
    }
    if (!ir_node_arity_ok(n, n->nsrc))
        return error_at(r, op_at, opl, "%s takes %d source%s, not %d", oname, arity, arity == 1 ? "" : "s", n->nsrc);
    unsigned required = custom ? custom->attrs : ir_op_info[op].required_attrs;
    unsigned allowed = custom ? custom->attrs : required | ir_op_info[op].optional_attrs;
    if (accept(r, "{") && !read_attrs(r, n, allowed, oname))
        return 0;
    for (int k = 0; k < IR_ATTR_COUNT; k++)
        if ((required >> k & 1u) && !ir_has_attr(n, (IrAttrKey)k))
            return error_at(r, op_at, opl, "%s needs the attribute %s", oname, ir_attr_name[k]);
    if (!expect(r, ":", "':' and the node's type"))
        return 0;
    skip_sp(r);
    const char *type_at = r->p;
    IrDType dt = IR_F32;
    int rank = 0;
    int64_t shape[IR_MAX_RANK] = {0};
    if (!read_type(r, &dt, &rank, shape))
        return 0;
    size_t type_len = (size_t)(r->p - type_at);
    const char *scales_at = NULL;
    size_t scales_len = 0;
    if (accept(r, "+")) {
        skip_sp(r);
        scales_at = r->p;
        const char *close = memchr(r->p, ']', (size_t)(r->le - r->p));
        if (!close)
            return error_at(r, r->p, 1, "expected the block scales, e8m0[...]");
        r->p = close + 1;
        scales_len = (size_t)(r->p - scales_at);
    }
    SrcLoc loc = {0, 0, 0};
    if (accept(r, "@")) {
        int64_t l, c;
        if (!read_int(r, 1, 1 << 30, &l, "a line") || !expect(r, ":", "':'") ||
            !read_int(r, 1, 1 << 30, &c, "a column"))
            return 0;
        loc.line = (int)l;
        loc.col = (int)c;
        loc.len = 1;
    }
    const char *label = NULL, *scope = NULL, *layer = NULL;
    int has_layer = 0;
    for (;;) {
        const char *kw_at = (skip_sp(r), r->p);
        if (accept_word(r, "label")) {
            if (label)
                return error_at(r, kw_at, 5, "label is given twice");
            if (!read_string(r, &label, "the label"))
                return 0;
        } else if (accept_word(r, "scope")) {
            if (scope)
                return error_at(r, kw_at, 5, "scope is given twice");
            if (!read_string(r, &scope, "the scope"))
                return 0;
        } else if (accept_word(r, "layer")) {
            if (has_layer)
                return error_at(r, kw_at, 5, "layer is given twice");
            has_layer = 1;
            if (!accept_word(r, "none") && !read_string(r, &layer, "the layer (or none)"))
                return 0;
        } else {
            break;
        }
    }
    if (!at_end(r)) {
        char b[40];
        return error_at(r, r->p, 1, "unexpected %s after the node", quote(r, b));
    }
    /* label and scope now (a wrong one is an error on this line); the layer when every node is known */
    if (!label) {
        size_t off, len;
        ir_name_label(n->name, n->op, &off, &len);
        label = len ? arena_strndup(r->a, n->name + off, len) : n->name;
    }
    n->label = label;
    if (!scope) {
        size_t sl;
        if (!ir_name_scope(n->name, label, &sl))
            return error_at(r, name_at, sn + 1, "the name %%%s is not SCOPE.LABEL for the label \"%s\"; give the scope "
                            "with scope \"...\"", n->name, label);
        scope = arena_strndup(r->a, n->name, sl);
    }
    n->scope = scope;
    /* types: a leaf's as written; any other node's from its sources, which must agree */
    int leaf = !custom && (ir_op_info[op].flags & OPF_LEAF);
    if (leaf) {
        n->dtype = dt;
        n->rank = rank;
        memcpy(n->shape, shape, sizeof shape);
    } else {
        n->loc = loc_at(r, op_at, opl);
        for (int i = 0; i < n->nsrc; i++)
            n->src_loc[i] = src_at[i];
        int before = r->d->nerrors;
        if (!ir_infer_node(n, r->d)) {
            if (r->d->nerrors == before)
                error_at(r, op_at, opl, "%s: the sources do not type-check", oname);
            return 0;
        }
        int same = n->dtype == dt && n->rank == rank;
        for (int i = 0; same && i < rank; i++)
            same = n->shape[i] == shape[i];
        if (!same) {
            char tb[160];
            return error_at(r, type_at, type_len, "type %.*s but the sources of %s give %s", (int)type_len, type_at,
                            oname, ir_type_str(n, tb, sizeof tb));
        }
    }
    char want[160];
    ir_scales_str(n, want, sizeof want);
    if (scales_at ? strlen(want) != scales_len || memcmp(want, scales_at, scales_len) != 0 : *want != 0) {
        if (!*want)
            return error_at(r, scales_at, scales_len, "%s carries no block scales", oname);
        return error_at(r, scales_at ? scales_at : type_at, scales_at ? scales_len : type_len,
                        "the block scales of this %s are %s", oname, want);
    }
    n->loc = loc;
    for (int i = 0; i < n->nsrc; i++)
        n->src_loc[i] = loc;
    push_node(r, n);
    r->extra[n->id].layer = layer;
    r->extra[n->id].has_layer = has_layer;
    return 1;
}

static IrNode *node_ref(Reader *r)
{
    skip_sp(r);
    const char *at = r->p, *s;
    size_t n;
    if (!read_name(r, &s, &n))
        return NULL;
    IrNode *x = ir_node_map_get(&r->map, s, n);
    if (!x)
        error_at(r, at, n + 1, "unknown node %%%.*s", (int)n, s);
    return x;
}

static int output_line(Reader *r)
{
    skip_sp(r);
    const char *at = r->p;
    IrNode *x = node_ref(r);
    if (!x)
        return 0;
    NodeExtra *e = &r->extra[x->id];
    if (e->output)
        return error_at(r, at, strlen(x->name) + 1, "%%%s is listed as an output twice", x->name);
    e->output = 1;
    if (accept_word(r, "as")) {
        e->output = 2;
        if (!accept_word(r, "none") && !read_string(r, &e->output_name, "the output's name (or none)"))
            return 0;
    }
    x->is_output = 1;
    if (!at_end(r)) {
        char b[40];
        return error_at(r, r->p, 1, "unexpected %s after the output", quote(r, b));
    }
    return 1;
}

static int loss_line(Reader *r)
{
    skip_sp(r);
    const char *at = r->p;
    IrNode *x = node_ref(r);
    if (!x)
        return 0;
    if (r->g->loss)
        return error_at(r, at, strlen(x->name) + 1, "a second loss: %%%s is the loss already", r->g->loss->name);
    if (x->rank != 0) {
        char tb[160];
        return error_at(r, at, strlen(x->name) + 1, "the loss must be a scalar, but %%%s is %s", x->name,
                        ir_type_str(x, tb, sizeof tb));
    }
    r->g->loss = x;
    if (!at_end(r)) {
        char b[40];
        return error_at(r, r->p, 1, "unexpected %s after the loss", quote(r, b));
    }
    return 1;
}

static int grad_line(Reader *r)
{
    skip_sp(r);
    const char *at = r->p;
    IrNode *p = node_ref(r);
    if (!p)
        return 0;
    if (p->op != IR_OP_PARAM)
        return error_at(r, at, strlen(p->name) + 1, "%%%s is not a param (its op is %s)", p->name, ir_node_op_name(p));
    for (int i = 0; i < r->nparams; i++)
        if (r->params[i] == p)
            return error_at(r, at, strlen(p->name) + 1, "a second gradient for %%%s", p->name);
    if (!expect(r, "=", "'='"))
        return 0;
    skip_sp(r);
    const char *gat = r->p;
    IrNode *gr = node_ref(r);
    if (!gr)
        return 0;
    int same = gr->rank == p->rank && ir_dtype_is_float(gr->dtype);
    for (int i = 0; same && i < p->rank; i++)
        same = gr->shape[i] == p->shape[i];
    if (!same) {
        char a[160], b[160];
        return error_at(r, gat, strlen(gr->name) + 1, "the gradient %%%s is %s but the param is %s", gr->name,
                        ir_type_str(gr, a, sizeof a), ir_type_str(p, b, sizeof b));
    }
    if (!at_end(r)) {
        char b[40];
        return error_at(r, r->p, 1, "unexpected %s after the gradient", quote(r, b));
    }
    if (r->nparams == r->params_cap) {
        r->params_cap = r->params_cap ? r->params_cap * 2 : 64;
        r->params = realloc(r->params, (size_t)r->params_cap * sizeof *r->params);
        r->grads = realloc(r->grads, (size_t)r->params_cap * sizeof *r->grads);
        if (!r->params || !r->grads)
            die("out of memory");
    }
    r->params[r->nparams] = p;
    r->grads[r->nparams++] = gr;
    gr->is_output = 1;
    return 1;
}

/* Layers, by increasing name length: the node a scope names is shorter than
 * the nodes in that scope, so its layer is known when theirs is derived. */
static int by_name_len(const void *a, const void *b)
{
    const IrNode *x = *(IrNode *const *)a, *y = *(IrNode *const *)b; /* (no file-scope state: reentrant) */
    size_t la = strlen(x->name), lb = strlen(y->name);
    return la < lb ? -1 : la > lb ? 1 : x->id - y->id;
}

static void derive_layers(Reader *r)
{
    IrGraph *g = r->g;
    IrNode **order = malloc(sizeof *order * (size_t)(g->nnodes ? g->nnodes : 1));
    if (!order)
        die("out of memory");
    for (int i = 0; i < g->nnodes; i++)
        order[i] = g->nodes[i];
    qsort(order, (size_t)g->nnodes, sizeof *order, by_name_len);
    const char *prev = NULL;  /* neighbouring nodes share their layer string */
    for (int k = 0; k < g->nnodes; k++) {
        IrNode *n = order[k];
        const NodeExtra *e = &r->extra[n->id];
        if (e->has_layer) {
            n->layer = e->layer;
            continue;
        }
        const char *layer;
        size_t len;
        ir_name_layer(n->scope, &r->map, &layer, &len);
        if (!layer)
            n->layer = NULL;
        else if (prev && strlen(prev) == len && memcmp(prev, layer, len) == 0)
            n->layer = prev;
        else
            n->layer = prev = arena_strndup(r->a, layer, len);
    }
    free(order);
}

static int body(Reader *r)
{
    for (;;) {
        if (!next_line(r)) {
            r->p = r->le;
            return error_at(r, r->p, 1, "the text ends inside graph %s: '}' is missing (a truncated dump?)",
                            r->g->model);
        }
        skip_sp(r);
        if (r->p == r->le || *r->p == '#')
            continue;
        if (*r->p == '%') {
            if (!node_line(r))
                return 0;
        } else if (accept_word(r, "output")) {
            if (!output_line(r))
                return 0;
        } else if (accept_word(r, "loss")) {
            if (!loss_line(r))
                return 0;
        } else if (accept_word(r, "grad")) {
            if (!grad_line(r))
                return 0;
        } else if (*r->p == '}') {
            r->p++;
            if (!at_end(r)) {
                char b[40];
                return error_at(r, r->p, 1, "unexpected %s after '}'", quote(r, b));
            }
            return 1;
        } else {
            char b[40];
            return error_at(r, r->p, 1, "expected a node (%%name = op...), output, loss, grad or '}', found %s",
                            quote(r, b));
        }
    }
}

static int read_graph(Reader *r)
{
    /* the header, up to `graph NAME {` */
    for (;;) {
        if (!next_line(r)) {
            SrcLoc l = {r->line ? r->line : 1, 1, 1};
            diag_error(r->d, l, "%s: no graph: the IR text has `graph NAME { ... }` (as `moec dump` prints it)",
                       r->len ? "the text ends" : "the file is empty");
            return 0;
        }
        skip_sp(r);
        if (r->p == r->le)
            continue;
        if (*r->p == '#') {
            if (!comment_line(r))
                return 0;
            continue;
        }
        if (accept_word(r, "graph"))
            break;
        char b[40];
        return error_at(r, r->p, 1, "expected `graph NAME {` or a comment, found %s (is this IR text?)", quote(r, b));
    }
    const char *w;
    size_t n = word(r, &w);
    if (!n)
        return error_at(r, r->p, 1, "expected the model's name after `graph`");
    if (r->header_model && (strlen(r->header_model) != n || memcmp(r->header_model, w, n) != 0))
        return error_at(r, w, n, "graph %.*s, but the header names model %s", (int)(n > 64 ? 64 : n), w,
                        r->header_model);
    if (!r->header_model)
        r->g->model = arena_strndup(r->a, w, n);
    r->graph_line = r->line;
    if (!expect(r, "{", "'{'") || !end_of_line(r))
        return 0;
    if (!body(r))
        return 0;
    /* nothing but comments may follow: one graph per text */
    while (next_line(r)) {
        skip_sp(r);
        if (r->p == r->le)
            continue;
        if (*r->p == '#') {
            if (accept(r, "# *** IR "))
                return error_at(r, r->ls, 1, "a second snapshot: this reads one graph (split a --print-ir-after "
                                "all dump at its '# ***' lines)");
            continue;
        }
        char b[40];
        return error_at(r, r->p, 1, "unexpected %s after the graph", quote(r, b));
    }
    return 1;
}

IrGraph *ir_read_text(Arena *a, const char *path, const char *text, size_t len, Diag *d)
{
    Reader r;
    memset(&r, 0, sizeof r);
    r.a = a;
    r.d = d;
    r.text = text;
    r.len = len;
    r.header_nodes = -1;
    r.g = ir_graph_new(a, NULL, arena_strdup(a, path));
    ir_node_map_init(&r.map, len / 64 + 16);
    IrGraph *g = r.g;
    int ok = read_graph(&r);
    if (ok && r.header_nodes >= 0 && r.header_nodes != g->nnodes) {
        SrcLoc l = {r.header_line, 1, 1};
        diag_error(d, l, "the header counts %d nodes but the graph has %d (the text was edited or cut?)",
                   r.header_nodes, g->nnodes);
        ok = 0;
    }
    if (ok) {
        derive_layers(&r);
        for (int i = 0; i < g->nnodes; i++) {
            IrNode *n = g->nodes[i];
            const NodeExtra *e = &r.extra[i];
            /* an output's name is its label unless written; the loss has none */
            if (e->output == 1)
                n->output_name = n == g->loss ? NULL : n->label;
            else if (e->output == 2)
                n->output_name = e->output_name;
        }
        g->nparams = r.nparams;
        if (r.nparams) {
            g->params = arena_calloc(a, (size_t)r.nparams, sizeof *g->params);
            g->grads = arena_calloc(a, (size_t)r.nparams, sizeof *g->grads);
            memcpy(g->params, r.params, sizeof *g->params * (size_t)r.nparams);
            memcpy(g->grads, r.grads, sizeof *g->grads * (size_t)r.nparams);
        }
        /* everything the verifier checks was checked above, located; this
         * catches what a new invariant might add */
        int nerr = ir_verify(g, d->out);
        if (nerr) {
            SrcLoc l = {r.graph_line, 1, 1};
            diag_error(d, l, "the graph does not pass the verifier (%d problem%s above)", nerr, nerr == 1 ? "" : "s");
            ok = 0;
        }
    }
    ir_node_map_free(&r.map);
    free(r.extra);
    free(r.params);
    free(r.grads);
    return ok ? g : NULL;
}
