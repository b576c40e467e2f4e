/* hf_internal.h - what hf.c (the Hugging Face Mixtral mapping), hf_import.c
 * (`moec import-hf`) and hf_export.c (`moec export-hf`) share; not an API:
 * the public one is hf.h. */
#ifndef MOEC_HF_INTERNAL_H
#define MOEC_HF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../driver/compile.h"
#include "safetensors.h"

typedef struct HfConfig {
    int64_t vocab, hidden, ffn, layers, heads, kv_heads, head_dim, experts, top_k, max_pos;
    int64_t sliding_window;   /* 0: none */
    double eps, theta, init_std, aux_coef;
    int tie;
} HfConfig;

typedef struct TrainOpts {
    int64_t seq, batch, steps;
    double lr;
    const char *precision;
    double aux_loss;
} TrainOpts;

typedef struct HfWeights {
    SafeTensors *files;
    char **paths;
    char **used;      /* per file, per tensor */
    int nfiles;
} HfWeights;

/* One parameter of the moec model: its name, shape and data. */
typedef struct Param {
    char name[96];
    int rank;
    int64_t shape[3];
    float *data;
    size_t n;
} Param;

typedef struct ParamList {
    Param *p;
    int n, cap;
} ParamList;

/* ---- messages: `PATH: error: ...` (returns 0), `PATH: warning: ...`, and a
 * usage error of command cmd (returns 2) */
int hf_errf(const char *path, const char *fmt, ...);
void hf_warnf(const char *path, const char *fmt, ...);
int hf_usage_error(const char *cmd, const char *fmt, const char *arg);
/* "unknown option or missing value: 'OPT'; did you mean 'X'?" (X the nearest of the NULL-terminated
 * `known`) as a usage error of `cmd`: returns 2. */
int hf_unknown_option(const char *cmd, const char *opt, const char *const *known);

/* dir/name, malloc'd */
char *hf_join(const char *dir, const char *name);
int hf_file_exists(const char *path);
/* "[a, b, c]" */
void hf_shape_text(char *buf, size_t size, int rank, const int64_t *shape);
/* util's atomic write_file, its error said as hf_errf says errors */
int hf_write_text(const char *path, const char *text, size_t len);

/* ---- the configuration and the model text */

/* Reads config.json into c; seq (0: not given) is checked against the
 * sliding window and the position limit. */
int hf_read_config(const char *path, int64_t *seq, HfConfig *c);
/* "protein", "dna" or "none" */
const char *hf_alphabet_for(int64_t vocab);
/* The model file: the structure of models/mixtral_tiny.moe with c's numbers (malloc'd). */
char *hf_model_text(const HfConfig *c, const char *name, const TrainOpts *t);
/* Lowers text (as file `path`) up to dce; 0 and the errors on stderr if it
 * does not lower. */
int hf_lower_text(Compilation *c, const char *path, const char *text, size_t len);

/* ---- the weights and the parameters */

/* Finds DIR's weights: 1 loaded, 0 an error, -1 there are none. */
int hf_weights_open(HfWeights *w, const char *dir);
void hf_weights_free(HfWeights *w);
/* The moec parameters, in the order of the model file, with their shapes
 * (no data read). */
void hf_params_plan(ParamList *l, const HfConfig *c);   /* names and shapes only, no data */
/* Every parameter's data, zeroed: 1, or 0 after a message "PATH: error: not enough memory ...". */
int hf_params_alloc(ParamList *l, const char *path);
/* Reads every parameter from the weights; *layout names what was found. */
/* Reads every parameter from the weights; before hf_params_alloc, checks their names, shapes and types only. */
int hf_params_read(ParamList *l, const HfConfig *c, HfWeights *w, const char *dir, const char **layout);
void hf_params_free(ParamList *l);
/* The transformers name of a dense moec parameter (not the experts); 0 for an expert tensor. */
int hf_name(const char *moec, char *out, size_t size);

#endif
