/* ir.h - the moec intermediate representation.
 *
 * A model is one IrGraph: a list of IrNodes in topological order (every
 * source precedes its users). A node produces exactly one tensor; its op
 * comes from ops.def, its attributes from attrs.def. Nodes carry a
 * hierarchical, unique name showing where they came from
 * (`layers.3.decoder.w_down`) and the source location of the expression
 * that created them, so that any error about a node can point at the line
 * the user wrote. Shapes are concrete: `B` and `S` are bound from the train
 * section when the model is lowered.
 *
 * All memory belongs to the graph's arena. */
#ifndef MOEC_IR_H
#define MOEC_IR_H

#include <stdint.h>
#include <stdio.h>

#include "arena.h"
#include "diag.h"

enum { IR_MAX_RANK = 4, IR_MAX_SRC = 6 };

/* ---- ops and attributes, generated from the X-macro tables ---- */

typedef enum IrAttrKey {
#define ATTR(e, name, kind) IR_ATTR_##e,
#include "attrs.def"
#undef ATTR
    IR_ATTR_COUNT
} IrAttrKey;

/* I integer, F float, B bool, S string, E one of a closed set of names
 * (held as the index: an enum below; printed and read as the name) */
typedef enum IrAttrKind { IR_AK_I, IR_AK_F, IR_AK_B, IR_AK_S, IR_AK_E } IrAttrKind;

#define AT(x) (1u << IR_ATTR_##x)

/* op flags (ops.def says who reads each); bit 2 was OPF_FUSIBLE, never
 * read and removed, left free so the others keep their values */
enum {
    OPF_LEAF = 1 << 0,
    OPF_DIFF = 1 << 1,
    OPF_LOSS = 1 << 3,
    OPF_INDEX = 1 << 4,
    OPF_OPTSRC = 1 << 5,  /* the last source is optional (sdpa's segment ids): nsrc is arity or arity - 1 */
};

typedef enum IrOp {
#define OP(e, name, arity, req, opt, flags) IR_OP_##e,
#include "ops.def"
#undef OP
    IR_OP_COUNT
} IrOp;

typedef struct IrOpInfo {
    const char *name;
    int arity;
    unsigned required_attrs, optional_attrs;
    unsigned flags;
} IrOpInfo;

extern const IrOpInfo ir_op_info[IR_OP_COUNT];
extern const char *const ir_attr_name[IR_ATTR_COUNT];
extern const IrAttrKind ir_attr_kind[IR_ATTR_COUNT];

const char *ir_op_name(IrOp op);
int ir_op_lookup(const char *name);          /* -1 if unknown */
int ir_attr_lookup(const char *name);        /* -1 if unknown */

/* ---- element types ---- */

typedef enum IrDType {
    IR_F32, IR_BF16, IR_F16, IR_I32, IR_E4M3, IR_E8M0, IR_DTYPE_COUNT
} IrDType;

extern const char *const ir_dtype_name[IR_DTYPE_COUNT];
int ir_dtype_lookup(const char *name);       /* -1 if unknown */
int ir_dtype_is_float(IrDType t);

/* ---- nodes ---- */

typedef struct IrAttrVal {
    int64_t i;       /* I and B */
    double f;        /* F */
    const char *s;   /* S */
} IrAttrVal;

typedef struct IrNode IrNode;
typedef struct IrGraph IrGraph;

/* An op defined outside ops.def, by a pass plugin (docs/adding-a-pass.md):
 * everything the compiler and the CPU backend need to know about it. Nodes
 * of it have op IR_OP_CUSTOM and point at the descriptor, which must stay
 * alive (a plugin keeps it in static storage; plugins are never unloaded). */
typedef struct IrCustomOp {
    const char *name;      /* as printed in dumps: grouped_mlp_gelu */
    int arity;             /* number of sources, at most IR_MAX_SRC */
    /* The attributes (AT(x) bits over attrs.def) its nodes may carry, such
     * as AT(PRECISION) for a kernel that quantizes; the verifier rejects any
     * other. The CPU reference sees them on n. */
    unsigned attrs;
    /* Sets n's dtype and shape from its sources; on a mismatch reports
     * through d (may be NULL) and returns 0. */
    int (*infer)(IrNode *n, Diag *d);
    /* The CPU reference, fp32 and fp64: buf[i] is node i's data. */
    void (*cpu_f32)(const IrNode *n, void *const *buf);
    void (*cpu_f64)(const IrNode *n, void *const *buf);
    /* The gradient rule: given dy = d loss / d n, builds nodes (with
     * ir_node_new + ir_infer_node) for d loss / d n->src[i] and hands each
     * to grad(ctx, i, node). Sources needing no gradient may be skipped. */
    void (*backward)(IrGraph *g, IrNode *n, IrNode *dy, void (*grad)(void *ctx, int src, IrNode *gnode), void *ctx);
} IrCustomOp;

struct IrNode {
    int id;                       /* index in graph->nodes, dense from 0 */
    IrOp op;
    const IrCustomOp *custom;     /* op == IR_OP_CUSTOM only */
    int nsrc;
    IrNode *src[IR_MAX_SRC];
    SrcLoc src_loc[IR_MAX_SRC];   /* where each argument was written */
    unsigned attr_set;            /* bit per IrAttrKey present */
    IrAttrVal attr[IR_ATTR_COUNT];
    IrDType dtype;
    int rank;
    int64_t shape[IR_MAX_RANK];
    const char *name;             /* unique, hierarchical: layers.3.decoder.w_down */
    const char *label;            /* what the user called it: w_down (or the op name) */
    const char *scope;            /* layers.3.decoder ("" at top level) */
    const char *layer;            /* outermost repeat iteration, layers.3 (NULL outside) */
    SrcLoc loc;
    int is_output;                /* named by `output` or the loss: kept by dce */
    const char *output_name;      /* the name `output NAME = ...` gave it */
    int nuses;                    /* recomputed by ir_count_uses */
};

/* ---- the train section, typed and defaulted ---- */

typedef enum IrPrecision { IR_PREC_BF16, IR_PREC_MXFP8, IR_PREC_FP8_BLOCK } IrPrecision;
extern const char *const ir_precision_name[3];

/* The values of the enumerated attributes (kind E in attrs.def); precision
 * takes IrPrecision. Their names are in ir_attr_enum_names. */
typedef enum IrInit { IR_INIT_NORMAL, IR_INIT_UNIFORM, IR_INIT_ZEROS, IR_INIT_ONES, IR_INIT_CONSTANT } IrInit;
typedef enum IrGroup { IR_GROUP_WORLD, IR_GROUP_DP } IrGroup;
typedef enum IrAxis { IR_AXIS_ROWWISE, IR_AXIS_COLWISE, IR_AXIS_TILE } IrAxis;
typedef enum IrLayout { IR_LAYOUT_GATE_UP } IrLayout;

/* The names of an enumerated attribute's values in enum order,
 * NULL-terminated; NULL for an attribute of another kind. */
const char *const *ir_attr_enum_names(IrAttrKey k);
/* The value named `name` (n bytes) of enumerated attribute k, or -1. */
int ir_attr_enum_lookup(IrAttrKey k, const char *name, size_t n);

/* The train section's closed choices, as enums; their names (NULL-
 * terminated, in enum order) are what the language, the dumps and the IR
 * reader use. */
typedef enum IrOptimizer { IR_OPT_ADAMW } IrOptimizer;
typedef enum IrSchedule { IR_SCHED_WARMUP_COSINE, IR_SCHED_CONSTANT } IrSchedule;
typedef enum IrAlphabet { IR_ALPHABET_PROTEIN, IR_ALPHABET_DNA, IR_ALPHABET_NONE } IrAlphabet;
typedef enum IrObjective { IR_OBJ_CAUSAL_LM, IR_OBJ_MASKED_LM } IrObjective;
/* How sequences fill the rows of a batch (docs/data.md):
 *   auto    packed for the masked-LM objective, concat for causal LMs
 *   concat  sequences back to back, attention across their boundaries (moec's first behaviour)
 *   packed  sequences back to back, attention kept inside each (block-diagonal)
 *   rows    one sequence per row, cropped and padded, padding masked
 * packed and rows give attention its segment ids (the segment-attention pass). */
typedef enum IrPacking { IR_PACK_AUTO, IR_PACK_CONCAT, IR_PACK_PACKED, IR_PACK_ROWS } IrPacking;
extern const char *const ir_packing_name[];
/* Activation checkpointing (decision 43): none, or blocks (each `repeat`
 * iteration's forward recomputed before its backward; the checkpoint pass). */
typedef enum IrCheckpoint { IR_CKPT_NONE, IR_CKPT_BLOCKS } IrCheckpoint;
extern const char *const ir_checkpoint_name[];
extern const char *const ir_optimizer_name[];
extern const char *const ir_schedule_name[];
extern const char *const ir_alphabet_name[];
extern const char *const ir_objective_name[];
/* The index of `name` (n bytes) in a NULL-terminated name table, or -1. */
int ir_name_index(const char *const *names, const char *name, size_t n);

typedef struct IrTrain {
    IrOptimizer optimizer;
    double lr, beta1, beta2, eps, weight_decay;
    IrSchedule schedule;
    int64_t warmup;
    double min_lr;
    IrPrecision precision;
    int64_t ep, dp;
    int64_t batch, seq;
    double grad_clip;
    int64_t steps;
    IrAlphabet alphabet;
    IrObjective objective;        /* from the loss op */
    double aux_loss_coef;
    int decay_norms, decay_embeddings;  /* AdamW weight decay on norm weights / embedding tables (default off) */
    IrPacking packing;            /* the train section's `packing` (auto unless written) */
    IrCheckpoint checkpoint;      /* the train section's `checkpoint` (none unless written): activation checkpointing */
} IrTrain;

/* packing with auto resolved by the objective */
IrPacking ir_train_packing(const IrTrain *t);

void ir_train_defaults(IrTrain *t);

/* ---- the graph ---- */

typedef struct NameSet NameSet;

/* The op's name as dumps show it (a custom op's own name). */
const char *ir_node_op_name(const IrNode *n);
/* The number of sources the node's op takes (the most, for OPF_OPTSRC ops). */
int ir_node_arity(const IrNode *n);
/* Whether n may have nsrc sources (arity, or arity - 1 for OPF_OPTSRC). */
int ir_node_arity_ok(const IrNode *n, int nsrc);

/* One candidate a fusion pass examined: fused, or declined with the reason
 * in words a user understands. `moec explain` prints these; dumps after the
 * pass show them too. Never a silent decline. */
typedef struct IrDecision {
    const char *pass;      /* fuse-grouped-mlp */
    const char *action;    /* FUSED / NOT FUSED, or a pass's own words (MXFP8 / KEPT BF16) */
    const char *where;     /* scope of the candidate: layers.3.moe */
    SrcLoc loc;            /* the root of the matched chain */
    int fused;
    const char *result;    /* the new node's name when fused */
    const char *reason;    /* why not, when declined; details when fused */
} IrDecision;

struct IrGraph {
    Arena *arena;
    const char *model;            /* model name */
    const char *file;             /* source path */
    IrNode **nodes;
    int nnodes, cap;
    IrNode *loss;                 /* the scalar objective */
    /* filled by the autodiff pass: grads[i] is d loss / d params[i] */
    IrNode **params, **grads;
    int nparams;
    PtrVec decisions;             /* IrDecision *, in the order examined */
    IrTrain train;
    NameSet *names;
    /* "after PASS" / "before PASS" when read from a snapshot with that
     * header line (ir_read_text), else NULL: where the pipeline resumes */
    const char *stage;
};

IrGraph *ir_graph_new(Arena *arena, const char *model, const char *file);

/* A set of strings (arena-backed), for unique names and scopes. */
NameSet *nameset_new(Arena *a);
int nameset_has(const NameSet *ns, const char *s);
void nameset_add(Arena *a, NameSet *ns, const char *s);
/* Adds and returns base, or base.N with the smallest free N >= 1 (suffixes
 * already handed out for base are not probed again). */
const char *nameset_unique(Arena *a, NameSet *ns, const char *base);

/* Creates a node with a unique name derived from scope and label; shape and
 * dtype are filled by ir_infer_node(). Sources must already be in the graph. */
IrNode *ir_node_new(IrGraph *g, IrOp op, int nsrc, IrNode *const *src,
                    const char *scope, const char *label, SrcLoc loc);

void ir_set_attr_i(IrNode *n, IrAttrKey k, int64_t v);
void ir_set_attr_f(IrNode *n, IrAttrKey k, double v);
void ir_set_attr_s(IrNode *n, IrAttrKey k, const char *v);
void ir_set_attr_e(IrNode *n, IrAttrKey k, int v);   /* an enumerated attribute: v is its enum's value */
int ir_has_attr(const IrNode *n, IrAttrKey k);
int64_t ir_attr_i(const IrNode *n, IrAttrKey k);   /* die()s when absent */
double ir_attr_f(const IrNode *n, IrAttrKey k);
const char *ir_attr_s(const IrNode *n, IrAttrKey k);
int ir_attr_e(const IrNode *n, IrAttrKey k);        /* die()s when absent */
const char *ir_attr_e_name(const IrNode *n, IrAttrKey k);  /* its value's name */

int64_t ir_numel(const IrNode *n);
/* The whole model's parameters (a rank holding expert shards counts every
 * shard), and those a token uses: the expert tensors ([E, ...], E the
 * router's width) count k/E. */
void ir_param_counts(const IrGraph *g, int64_t *total, double *active);
/* "f32[8, 128, 64]" into buf. */
const char *ir_type_str(const IrNode *n, char *buf, size_t size);
const char *ir_shape_str(int rank, const int64_t *shape, char *buf, size_t size);

/* Renumbers ids after nodes were removed or inserted. */
void ir_graph_renumber(IrGraph *g);
/* Moves node n (usually just created, hence last) to position pos, shifting
 * the nodes from pos on by one; renumbers. */
void ir_graph_move(IrGraph *g, IrNode *n, int pos);
/* Re-infers every non-leaf node in order, after a pass changed types that
 * later nodes derive theirs from; die()s if one no longer type-checks. */
void ir_reinfer_all(IrGraph *g);
/* Makes every user of `from` (and the loss/output marks) use `to` instead. */
void ir_replace_uses(IrGraph *g, IrNode *from, IrNode *to);
/* Removes nodes with no users that are neither outputs nor the loss, nor
 * parameters/inputs, repeatedly; returns how many were removed. */
int ir_remove_unused(IrGraph *g);
void ir_add_decision(IrGraph *g, const char *pass, const IrNode *root, int fused, const char *result,
                     const char *reason);
/* Same, with the pass's own words for "done" / "not done". */
void ir_add_decision_as(IrGraph *g, const char *pass, const IrNode *root, int done, const char *action,
                        const char *result, const char *reason);
void ir_count_uses(IrGraph *g);
/* Whether n is a forward node the checkpoint pass re-emitted before the
 * backward (named ORIGINAL.recompute): work done twice, which model FLOPs
 * (MFU) do not count. */
int ir_node_is_recompute(const IrNode *n);

/* ---- shape inference (shape.c) ---- */

/* Computes n's dtype and shape from its sources and attributes. On a
 * mismatch reports a located, user-level error through d and returns 0. */
int ir_infer_node(IrNode *n, Diag *d);

/* ---- verifier (verify.c) ---- */

/* Checks structural invariants: arity, attributes, topological order,
 * unique names, shapes agreeing with inference. Problems are internal
 * errors (the front end should have rejected bad input first): reported to
 * `out` with the node named; returns the number found. */
int ir_verify(const IrGraph *g, FILE *out);

/* ---- custom ops by name (ir.c) ---- */

/* A plugin registers the ops it defines, so that the IR reader can build
 * their nodes by name (`moec dump x.mir --load-pass LIB.so`). The
 * descriptor must stay alive; registering the same one twice is a no-op.
 * Returns 0 when another descriptor has that name, or the table is full. */
int ir_custom_op_register(const IrCustomOp *op);
const IrCustomOp *ir_custom_op_find(const char *name, size_t len);  /* NULL if unknown */

/* ---- names (ir.c): what a node's name implies ---- */

/* name -> node, open addressing over malloc'd slots (the reader's and the
 * printer's lookups; linear scans were quadratic on large graphs). */
typedef struct IrNodeMap {
    IrNode **slots;
    size_t cap, len;
} IrNodeMap;

void ir_node_map_init(IrNodeMap *m, size_t expect);
void ir_node_map_free(IrNodeMap *m);
IrNode *ir_node_map_get(const IrNodeMap *m, const char *name, size_t len);
void ir_node_map_put(IrNodeMap *m, IrNode *n);   /* replaces a node of the same name */

/* Nodes are named scope.label, made unique with .N (ir_node_new); the text
 * dump prints label, scope and layer only where they differ from what the
 * name implies, so the reader derives them the same way:
 *  - the label is the name's last component, before a .N suffix (the last
 *    two for the routing fields, `r.splits`, which lower.c names R.FIELD);
 *  - the scope is what precedes the label;
 *  - the layer is that of the node whose name is the scope (a gradient or
 *    an MXFP8 copy is scoped by the node it belongs to), else the scope's
 *    first two components when they are NAME.NUMBER (a repeat iteration),
 *    else none.
 * ir_name_label sets the label's offset and length within name. */
void ir_name_label(const char *name, IrOp op, size_t *off, size_t *len);
/* 1 and *scope_len when name is scope.label[.N] (scope may be empty). */
int ir_name_scope(const char *name, const char *label, size_t *scope_len);
/* The default layer for scope (looked up in m): *layer and *len, or
 * *layer = NULL for none. *layer points at another node's layer or into
 * scope (then only *len characters of it). */
void ir_name_layer(const char *scope, const IrNodeMap *m, const char **layer, size_t *len);

/* ---- printers (print_text.c, print_json.c, print_dot.c) ---- */

/* The block scales an MXFP8 copy carries, as the text dump prints them after
 * its type ("e8m0[2048, 2]"), or "" for other nodes. */
const char *ir_scales_str(const IrNode *n, char *buf, size_t size);
void ir_print_text(const IrGraph *g, FILE *out);
void ir_print_train(const IrTrain *t, FILE *out);
void ir_print_dot(const IrGraph *g, FILE *out);
/* Returns a cJSON object (caller owns it: cJSON_Delete). */
struct cJSON *ir_to_json(const IrGraph *g);
struct cJSON *ir_decisions_json(const IrGraph *g);
void ir_print_json(const IrGraph *g, FILE *out);

/* ---- reader (read_text.c) ---- */

/* Parses one graph as ir_print_text prints it (docs/ir.md §5): the header
 * and `# train:` lines, `graph NAME { ... }`, node, output, loss and grad
 * lines, and an optional `# *** IR after PASS ***` line before them (then
 * g->stage is "after PASS", or "before PASS"; else NULL). Every non-leaf
 * node is re-inferred and must have the type printed; the graph is then
 * verified. Errors in the text are reported through d (located in `path`)
 * and give NULL; nothing here exits. Custom ops are found by name among
 * those plugins registered (ir_custom_op_register). */
IrGraph *ir_read_text(Arena *a, const char *path, const char *text, size_t len, Diag *d);

#endif
