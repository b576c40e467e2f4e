/* hf.c - the mapping between Hugging Face transformers' MixtralForCausalLM and
 * moec, shared by `moec import-hf` (hf_import.c) and `moec export-hf`
 * (hf_export.c): config.json read and checked, the model text of that one
 * shape, the safetensors weights and moec's parameter list, bf16/f16 <-> f32.
 *
 * The model file import-hf writes has one fixed shape (the one of
 * models/mixtral_tiny.moe) with the numbers of config.json filled in; its
 * ops mean what transformers computes (docs/huggingface.md, "Semantics").
 *
 * Weights: transformers 5 keeps the experts fused,
 *   model.layers.N.mlp.gate.weight             [E, H]      router
 *   model.layers.N.mlp.experts.gate_up_proj    [E, 2F, H]  gate rows (w1) first, then up (w3)
 *   model.layers.N.mlp.experts.down_proj       [E, H, F]
 * older checkpoints (and the Hub's Mixtral files) one module per expert,
 *   model.layers.N.block_sparse_moe.gate.weight          [E, H]
 *   model.layers.N.block_sparse_moe.experts.J.w1.weight  [F, H]  gate
 *   model.layers.N.block_sparse_moe.experts.J.w3.weight  [F, H]  up
 *   model.layers.N.block_sparse_moe.experts.J.w2.weight  [H, F]  down
 * moec's w_gate_up [E, 2F, H] (gate first) and w_down [E, H, F] are the fused
 * layout exactly, so both import to the same numbers. */
#include "hf.h"
#include "hf_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../driver/compile.h"
#include "../util/util.h"
#include "safetensors.h"

/* ------------------------------------------------------------ small helpers */

int hf_errf(const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: ", path);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 0;
}

void hf_warnf(const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: warning: ", path);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int hf_usage_error(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "moec: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nRun 'moec %s --help' for usage.\n", cmd);
    return 2;
}

int hf_unknown_option(const char *cmd, const char *opt, const char *const *known)
{
    /* a known flag here lacks its value */
    const char *best = suggest_among(opt, known);
    int near = best && strcmp(best, opt) != 0;
    char msg[512];
    snprintf(msg, sizeof msg, "unknown option or missing value: '%s'%s%s%s", opt, near ? "; did you mean '" : "",
             near ? best : "", near ? "'?" : "");
    return hf_usage_error(cmd, "%s", msg);
}

char *hf_join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);
    if (!s)
        die("out of memory");
    snprintf(s, n, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    return s;
}

int hf_file_exists(const char *path)
{
    /* any kind of file: the readers refuse what is not a regular one (a FIFO, /dev/zero) with a message,
     * rather than treat it as absent */
    struct stat st;
    return stat(path, &st) == 0;
}

float hf_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float hf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else {  /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                man <<= 1;
            } while (!(man & 0x400));
            u = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t hf_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);  /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

void hf_format_double(char *buf, size_t size, double v)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, size, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

/* ------------------------------------------------------------ the configuration */

static const char *json_kind(const cJSON *j)
{
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "invalid";
}

static const cJSON *key_of(const cJSON *o, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* An integer key in [lo, hi]. Absent or null: *out = dflt when optional
 * (dflt >= 0), an error otherwise. */
static int cfg_int(const char *path, const cJSON *root, const char *key, const char *meaning, int64_t lo, int64_t hi,
                   int64_t dflt, int64_t *out)
{
    const cJSON *j = key_of(root, key);
    if (!j || (cJSON_IsNull(j) && dflt >= 0)) {
        if (dflt >= 0) {
            *out = dflt;
            return 1;
        }
        return hf_errf(path, "missing key `%s` (%s)", key, meaning);
    }
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble))
        return hf_errf(path, "`%s` (%s) must be an integer, not %s", key, meaning,
                       cJSON_IsNumber(j) ? "a fractional number" : json_kind(j));
    if (j->valuedouble < (double)lo || j->valuedouble > (double)hi)
        return hf_errf(path, "`%s` = %.17g (%s) is out of range [%lld, %lld]", key, j->valuedouble, meaning,
                       (long long)lo, (long long)hi);
    *out = (int64_t)j->valuedouble;
    return 1;
}

static int cfg_num(const char *path, const cJSON *root, const char *key, const char *meaning, int required,
                   double dflt, double lo, double hi, double *out)
{
    const cJSON *j = key_of(root, key);
    if (!j || cJSON_IsNull(j)) {
        if (required)
            return hf_errf(path, "missing key `%s` (%s)", key, meaning);
        *out = dflt;
        return 1;
    }
    if (!cJSON_IsNumber(j))
        return hf_errf(path, "`%s` (%s) must be a number, not %s", key, meaning, json_kind(j));
    if (!(j->valuedouble >= lo && j->valuedouble <= hi))
        return hf_errf(path, "`%s` = %.17g (%s) is out of range [%g, %g]", key, j->valuedouble, meaning, lo, hi);
    *out = j->valuedouble;
    return 1;
}

static int cfg_bool(const char *path, const cJSON *root, const char *key, int dflt, int *out)
{
    const cJSON *j = key_of(root, key);
    if (!j || cJSON_IsNull(j)) {
        *out = dflt;
        return 1;
    }
    if (!cJSON_IsBool(j))
        return hf_errf(path, "`%s` must be true or false, not %s", key, json_kind(j));
    *out = cJSON_IsTrue(j);
    return 1;
}

/* NULL with "PATH: why" in err */
static char *read_text(const char *path, size_t *len_out, char *err, size_t errlen)
{
    FILE *f = fopen_regular(path, err, errlen);
    if (!f)
        return NULL;
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap + 1);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            if (cap > ((size_t)1 << 30)) {  /* no config is a GiB */
                free(buf);
                buf = NULL;
                errno = EFBIG;
                break;
            }
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        return NULL;
    }
    buf[len] = 0;
    *len_out = len;
    return buf;
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The first key found twice in one object of the tree (sorted: n log n), or NULL. */
static const cJSON *json_duplicate(const cJSON *j)
{
    const cJSON *e, *found = NULL;
    if (cJSON_IsObject(j)) {
        size_t n = 0;
        cJSON_ArrayForEach(e, j) n++;
        const cJSON **keys = malloc((n ? n : 1) * sizeof *keys);
        if (!keys)
            die("out of memory");
        n = 0;
        cJSON_ArrayForEach(e, j) keys[n++] = e;
        qsort(keys, n, sizeof *keys, cmp_key);
        for (size_t i = 1; i < n && !found; i++)
            if (strcmp(keys[i - 1]->string, keys[i]->string) == 0)
                found = keys[i];
        free(keys);
    }
    if (cJSON_IsObject(j) || cJSON_IsArray(j))
        cJSON_ArrayForEach(e, j) {
            if (found)
                break;
            found = json_duplicate(e);
        }
    return found;
}

/* Parses a JSON file; a syntax error is reported at its line and column. */
static cJSON *read_json(const char *path)
{
    size_t len;
    char err[600] = "";
    char *text = read_text(path, &len, err, sizeof err);
    if (!text) {
        if (!err[0])
            snprintf(err, sizeof err, "%s: cannot read: %s", path, strerror(errno));
        fprintf(stderr, "moec: error: %s\n", err);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        const char *at = end && end >= text && end <= text + len ? end : text;
        int line = 1, col = 1;
        for (const char *p = text; p < at; p++) {
            if (*p == '\n') {
                line++;
                col = 1;
            } else {
                col++;
            }
        }
        fprintf(stderr, "%s:%d:%d: error: invalid JSON\n", path, line, col);
    } else if (!cJSON_IsObject(root)) {
        hf_errf(path, "the file must hold a JSON object, not %s", json_kind(root));
        cJSON_Delete(root);
        root = NULL;
    } else {
        const cJSON *dup = json_duplicate(root);
        if (dup) {
            hf_errf(path, "key `%s` appears twice in one object: JSON readers disagree on which value counts "
                    "(Python's json and transformers take the last, others the first), so the file is refused",
                    dup->string);
            cJSON_Delete(root);
            root = NULL;
        }
    }
    free(text);
    return root;
}

/* Reads config.json into c; seq (0: not given) is checked against the
 * sliding window and the position limit. */
int hf_read_config(const char *path, int64_t *seq, HfConfig *c)
{
    cJSON *root = read_json(path);
    if (!root)
        return 0;
    int ok = 1;
    const cJSON *mt = key_of(root, "model_type");
    if (!mt)
        ok = hf_errf(path, "missing key `model_type`: import-hf reads MixtralForCausalLM configs (\"mixtral\")");
    else if (!cJSON_IsString(mt))
        ok = hf_errf(path, "`model_type` must be a string, not %s", json_kind(mt));
    else if (strcmp(mt->valuestring, "mixtral") != 0)
        ok = hf_errf(path, "model_type \"%s\" is not \"mixtral\": import-hf reads MixtralForCausalLM configs only",
                     mt->valuestring);
    const cJSON *arch = key_of(root, "architectures");
    if (ok && arch && !cJSON_IsNull(arch)) {
        int found = 0;
        const cJSON *a;
        if (!cJSON_IsArray(arch))
            ok = hf_errf(path, "`architectures` must be an array of strings, not %s", json_kind(arch));
        else
            cJSON_ArrayForEach(a, arch)
                found |= cJSON_IsString(a) && strcmp(a->valuestring, "MixtralForCausalLM") == 0;
        if (ok && !found) {
            const cJSON *first = cJSON_GetArrayItem(arch, 0);
            ok = hf_errf(path, "architectures lists %s, not MixtralForCausalLM: import-hf maps the causal LM only",
                         first && cJSON_IsString(first) ? first->valuestring : "nothing");
        }
    }
    if (!ok) {
        cJSON_Delete(root);
        return 0;
    }
    const int64_t BIG = (int64_t)1 << 40;
    ok &= cfg_int(path, root, "vocab_size", "rows of the embedding", 1, BIG, -1, &c->vocab);
    ok &= cfg_int(path, root, "hidden_size", "the model width", 1, BIG, -1, &c->hidden);
    ok &= cfg_int(path, root, "intermediate_size", "the expert FFN width", 1, BIG, -1, &c->ffn);
    ok &= cfg_int(path, root, "num_hidden_layers", "decoder layers", 1, 100000, -1, &c->layers);
    ok &= cfg_int(path, root, "num_attention_heads", "query heads", 1, 65536, -1, &c->heads);
    ok &= cfg_int(path, root, "num_key_value_heads", "key/value heads", 1, 65536, -1, &c->kv_heads);
    ok &= cfg_int(path, root, "head_dim", "per-head width; null: hidden_size / num_attention_heads", 1, BIG, 0,
                  &c->head_dim);
    ok &= cfg_int(path, root, "num_local_experts", "experts per layer", 1, 65536, -1, &c->experts);
    ok &= cfg_int(path, root, "num_experts_per_tok", "top-k", 1, 65536, -1, &c->top_k);
    ok &= cfg_int(path, root, "max_position_embeddings", "the longest sequence", 1, BIG, 4096 * 32, &c->max_pos);
    ok &= cfg_int(path, root, "sliding_window", "attention window; null: none", 1, BIG, 0, &c->sliding_window);
    ok &= cfg_num(path, root, "rms_norm_eps", "RMSNorm epsilon", 1, 0, 0, 1, &c->eps);
    ok &= cfg_num(path, root, "initializer_range", "init std", 0, 0.02, 0, 1e3, &c->init_std);
    ok &= cfg_num(path, root, "router_aux_loss_coef", "load-balancing coefficient", 0, 0.001, 0, 1e6, &c->aux_coef);
    ok &= cfg_bool(path, root, "tie_word_embeddings", 0, &c->tie);
    const cJSON *act = key_of(root, "hidden_act");
    if (act && !cJSON_IsNull(act) && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        ok = hf_errf(path, "hidden_act %s%s%s: moec's experts are SwiGLU (silu) only",
                     cJSON_IsString(act) ? "\"" : "", cJSON_IsString(act) ? act->valuestring : json_kind(act),
                     cJSON_IsString(act) ? "\"" : "");
    /* RoPE: transformers 5 keeps it in rope_parameters, 4 in rope_theta (+ rope_scaling) */
    const cJSON *rp = key_of(root, "rope_parameters"), *rs = key_of(root, "rope_scaling");
    int have_theta = 0;
    for (int pass = 0; pass < 2 && ok; pass++) {
        const cJSON *o = pass == 0 ? rp : rs;
        const char *what = pass == 0 ? "rope_parameters" : "rope_scaling";
        if (!o || cJSON_IsNull(o))
            continue;
        if (!cJSON_IsObject(o)) {
            ok = hf_errf(path, "`%s` must be an object, not %s", what, json_kind(o));
            break;
        }
        const cJSON *ty = key_of(o, "rope_type");
        if (!ty)
            ty = key_of(o, "type");
        if (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "default") != 0)) {
            ok = hf_errf(path, "%s.rope_type %s%s%s is not supported: moec's rope is the default (unscaled) RoPE",
                         what, cJSON_IsString(ty) ? "\"" : "", cJSON_IsString(ty) ? ty->valuestring : json_kind(ty),
                         cJSON_IsString(ty) ? "\"" : "");
            break;
        }
        const cJSON *th = key_of(o, "rope_theta");
        if (th) {
            if (!cJSON_IsNumber(th) || !(th->valuedouble > 0))
                ok = hf_errf(path, "%s.rope_theta must be a positive number", what);
            else {
                c->theta = th->valuedouble;
                have_theta = 1;
            }
        }
        const cJSON *pr = key_of(o, "partial_rotary_factor");
        if (ok && pr && !(cJSON_IsNumber(pr) && pr->valuedouble == 1.0))
            ok = hf_errf(path, "%s.partial_rotary_factor must be 1: moec rotates the whole head", what);
    }
    const cJSON *pr = key_of(root, "partial_rotary_factor");
    if (ok && pr && !cJSON_IsNull(pr) && !(cJSON_IsNumber(pr) && pr->valuedouble == 1.0))
        ok = hf_errf(path, "partial_rotary_factor must be 1: moec rotates the whole head");
    if (ok && !have_theta) {
        double th;
        ok = cfg_num(path, root, "rope_theta", "RoPE base; or rope_parameters.rope_theta", 1, 0, 1e-300, 1e300, &th);
        c->theta = th;
    }
    /* training-time extras moec does not have */
    double dropout = 0, jitter = 0;
    int router_logits = 0;
    ok &= cfg_num(path, root, "attention_dropout", "dropout", 0, 0, 0, 1, &dropout);
    ok &= cfg_num(path, root, "router_jitter_noise", "router noise", 0, 0, 0, 1e3, &jitter);
    ok &= cfg_bool(path, root, "output_router_logits", 0, &router_logits);
    cJSON_Delete(root);
    if (!ok)
        return 0;
    if (c->heads % c->kv_heads != 0)
        return hf_errf(path, "num_key_value_heads %lld does not divide num_attention_heads %lld",
                       (long long)c->kv_heads, (long long)c->heads);
    if (c->hidden % c->heads != 0)
        return hf_errf(path, "num_attention_heads %lld does not divide hidden_size %lld, which moec's attention needs",
                       (long long)c->heads, (long long)c->hidden);
    if (c->head_dim == 0)
        c->head_dim = c->hidden / c->heads;
    if (c->head_dim % 2 != 0)
        return hf_errf(path, "head_dim %lld is odd: RoPE rotates pairs", (long long)c->head_dim);
    if (c->top_k > c->experts)
        return hf_errf(path, "num_experts_per_tok %lld is more than num_local_experts %lld", (long long)c->top_k,
                       (long long)c->experts);
    if (*seq == 0)
        *seq = c->max_pos < 128 ? c->max_pos : 128;
    if (*seq > c->max_pos)
        return hf_errf(path, "--seq %lld is longer than max_position_embeddings %lld", (long long)*seq,
                       (long long)c->max_pos);
    if (c->sliding_window && c->sliding_window < *seq)
        return hf_errf(path, "sliding_window %lld is shorter than the sequence (%lld): moec's attention is plainly "
                       "causal; import with --seq %lld or less", (long long)c->sliding_window, (long long)*seq,
                       (long long)c->sliding_window);
    if (dropout > 0)
        hf_warnf(path, "attention_dropout %g is not imported: moec has no dropout", dropout);
    if (jitter > 0)
        hf_warnf(path, "router_jitter_noise %g is not imported: moec's router has no noise", jitter);
    if (router_logits)
        hf_warnf(path, "output_router_logits is true: transformers then adds router_aux_loss_coef times one "
                 "load-balancing loss over all layers' tokens together; the model file's `aux_loss` (0 here) "
                 "adds one per layer instead (docs/huggingface.md)");
    return 1;
}

/* ------------------------------------------------------------ the model text */

const char *hf_alphabet_for(int64_t vocab)
{
    return vocab == 33 ? "protein" : vocab == 9 ? "dna" : "none";
}

/* The model file: the structure of models/mixtral_tiny.moe with c's numbers. */
char *hf_model_text(const HfConfig *c, const char *name, const TrainOpts *t)
{
    char eps[40], theta[40], std[40], lr[40], minlr[40], aux[40];
    hf_format_double(eps, sizeof eps, c->eps);
    hf_format_double(theta, sizeof theta, c->theta);
    hf_format_double(std, sizeof std, c->init_std);
    hf_format_double(lr, sizeof lr, t->lr);
    snprintf(minlr, sizeof minlr, "%.6g", t->lr / 10);
    hf_format_double(aux, sizeof aux, t->aux_loss);
    const char *alpha = hf_alphabet_for(c->vocab);
    int64_t warmup = t->steps / 10 < 100 ? t->steps / 10 : 100;
    size_t cap = 8192;
    char *s = malloc(cap);
    if (!s)
        die("out of memory");
    const char *lm = c->tie ? "embed" : "lm_head";
    int n = snprintf(s, cap,
        "# %s - a Hugging Face MixtralForCausalLM, as `moec import-hf` writes it: token embedding,\n"
        "# %lld decoder layers (pre-norm GQA attention with RoPE, pre-norm top-%lld mixture of %lld SwiGLU\n"
        "# experts, residuals), final RMSNorm, %s, causal cross-entropy.\n"
        "# Parameter names map to transformers' as docs/huggingface.md lists.\n"
        "model %s {\n"
        "  const vocab = %lld, d = %lld, ffn = %lld, experts = %lld, top_k = %lld\n"
        "  const heads = %lld, kv_heads = %lld, head_dim = %lld, layers = %lld\n"
        "\n"
        "  input tokens  : i32[B, S]\n"
        "  input targets : i32[B, S]\n"
        "\n"
        "  param embed   : [vocab, d]  init normal(%s)   # model.embed_tokens.weight\n"
        "  param norm_f  : [d]         init ones   # model.norm.weight\n"
        "%s%s%s"
        "\n"
        "  # model.layers.N: input_layernorm, self_attn.{q,k,v,o}_proj\n"
        "  block attn(x) {\n"
        "    param norm : [d] init ones\n"
        "    param wq : [heads * head_dim, d]  init normal(%s)\n"
        "    param wk : [kv_heads * head_dim, d]  init normal(%s)\n"
        "    param wv : [kv_heads * head_dim, d]  init normal(%s)\n"
        "    param wo : [d, heads * head_dim]  init normal(%s)\n"
        "    return x + attention(rmsnorm(x, norm, eps = %s), wq, wk, wv, wo,\n"
        "                         heads = heads, kv_heads = kv_heads, rope_theta = %s, causal = true)\n"
        "  }\n"
        "\n"
        "  # model.layers.N: post_attention_layernorm, mlp.gate (router), mlp.experts.gate_up_proj\n"
        "  # ([experts, 2 * ffn, d], gate rows first), mlp.experts.down_proj\n"
        "  block moe(h) {\n"
        "    param norm      : [d] init ones\n"
        "    param router    : [experts, d]  init normal(%s)\n"
        "    param w_gate_up : [experts, 2 * ffn, d]  init normal(%s)\n"
        "    param w_down    : [experts, d, ffn]  init normal(%s)\n"
        "    y  = rmsnorm(h, norm, eps = %s)\n"
        "    r  = route_topk(linear(y, router), k = top_k)\n"
        "    xs = dispatch(y, r)\n"
        "    a  = scaled_swiglu(grouped_linear(xs, w_gate_up, r.splits), r.probs)\n"
        "    return h + combine(grouped_linear(a, w_down, r.splits), r)\n"
        "  }\n"
        "\n"
        "  x = embedding(tokens, embed)\n"
        "  repeat layers {\n"
        "    x = attn(x)\n"
        "    x = moe(x)\n"
        "  }\n"
        "  logits = linear(rmsnorm(x, norm_f, eps = %s), %s)\n"
        "  loss = cross_entropy(logits, targets)\n"
        "}\n"
        "\n"
        "%s"
        "train {\n"
        "  optimizer adamw(lr = %s, betas = (0.9, 0.95), eps = 1e-8, weight_decay = 0.1)\n"
        "  schedule  warmup_cosine(warmup = %lld, min_lr = %s)\n"
        "  precision %s\n"
        "  alphabet  %s\n"
        "  batch %lld, seq %lld, grad_clip 1.0, steps %lld, aux_loss %s\n"
        "}\n",
        name, (long long)c->layers, (long long)c->top_k, (long long)c->experts,
        c->tie ? "logits through the embedding (tied)" : "lm_head", name, (long long)c->vocab,
        (long long)c->hidden, (long long)c->ffn, (long long)c->experts, (long long)c->top_k, (long long)c->heads,
        (long long)c->kv_heads, (long long)c->head_dim, (long long)c->layers, std,
        c->tie ? "" : "  param lm_head : [vocab, d]  init normal(", c->tie ? "" : std,
        c->tie ? "" : ")   # lm_head.weight\n", std, std, std, std, eps, theta, std, std, std, eps, eps, lm,
        strcmp(alpha, "none") == 0
            ? "# vocab is neither the protein alphabet's 33 tokens nor dna's 9: the model checks and compiles\n"
              "# (also to CUDA), but a training binary reads FASTA in one of those two alphabets only.\n"
            : "# The training binary reads FASTA in this alphabet (data/data.h): token ids are its order.\n",
        lr, (long long)warmup, minlr, t->precision, alpha, (long long)t->batch, (long long)t->seq,
        (long long)t->steps, aux);
    if (n < 0 || (size_t)n >= cap)
        die("model text too long");
    return s;
}

/* Lowers text (as file `path`) up to dce; 0 and the errors on stderr if it
 * does not lower. */
int hf_lower_text(Compilation *c, const char *path, const char *text, size_t len)
{
    memset(c, 0, sizeof *c);
    c->text = malloc(len + 1);
    if (!c->text)
        die("out of memory");
    memcpy(c->text, text, len);
    c->text[len] = 0;
    c->len = len;
    PassCtx ctx;
    pass_ctx_init(&ctx, NULL);
    ctx.stop_after = "dce";
    return compilation_run(c, path, c->text, len, stderr, &ctx) == 0;
}

/* ------------------------------------------------------------ the weights */

void hf_weights_free(HfWeights *w)
{
    for (int i = 0; i < w->nfiles; i++) {
        st_free(&w->files[i]);
        free(w->paths[i]);
        free(w->used[i]);
    }
    free(w->files);
    free(w->paths);
    free(w->used);
    memset(w, 0, sizeof *w);
}

static int weights_add(HfWeights *w, const char *path)
{
    for (int i = 0; i < w->nfiles; i++)
        if (strcmp(w->paths[i], path) == 0)
            return 1;
    w->files = realloc(w->files, sizeof *w->files * (size_t)(w->nfiles + 1));
    w->paths = realloc(w->paths, sizeof *w->paths * (size_t)(w->nfiles + 1));
    w->used = realloc(w->used, sizeof *w->used * (size_t)(w->nfiles + 1));
    if (!w->files || !w->paths || !w->used)
        die("out of memory");
    char err[1024];
    SafeTensors *st = &w->files[w->nfiles];
    if (!st_read(path, st, err, sizeof err)) {
        fprintf(stderr, "%s: error: %s\n", path, err);
        return 0;
    }
    w->paths[w->nfiles] = xstrdup(path);
    w->used[w->nfiles] = calloc((size_t)st->ntensors + 1, 1);
    w->nfiles++;
    return 1;
}

/* Finds DIR's weights: 1 loaded, 0 an error, -1 there are none. */
int hf_weights_open(HfWeights *w, const char *dir)
{
    memset(w, 0, sizeof *w);
    char *single = hf_join(dir, "model.safetensors"), *index = hf_join(dir, "model.safetensors.index.json");
    int rc;
    if (hf_file_exists(index)) {
        cJSON *root = read_json(index);
        const cJSON *map = root ? key_of(root, "weight_map") : NULL;
        rc = root != NULL;
        if (root && !cJSON_IsObject(map))
            rc = hf_errf(index, "`weight_map` must be an object of tensor name -> file, not %s",
                         map ? json_kind(map) : "missing");
        const cJSON *e;
        if (rc)
            cJSON_ArrayForEach(e, map) {
                if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !e->valuestring[0]) {
                    rc = hf_errf(index, "weight_map[\"%s\"] must name a file in %s", e->string, dir);
                    break;
                }
                char *p = hf_join(dir, e->valuestring);
                rc = weights_add(w, p);
                free(p);
                if (!rc)
                    break;
            }
        if (rc && w->nfiles == 0)
            rc = hf_errf(index, "weight_map lists no files");
        cJSON_Delete(root);
    } else if (hf_file_exists(single)) {
        rc = weights_add(w, single);
    } else {
        rc = -1;
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d)))
            if (strncmp(de->d_name, "model-", 6) == 0 && strstr(de->d_name, ".safetensors"))
                rc = hf_errf(dir, "%s is a shard of a sharded checkpoint, but model.safetensors.index.json is "
                             "missing", de->d_name);
        if (d)
            closedir(d);
        if (rc == -1) {
            d = opendir(dir);
            while (d && (de = readdir(d)))
                if (strstr(de->d_name, ".bin") || strstr(de->d_name, ".pt"))
                    hf_warnf(dir, "%s is not read: import-hf reads safetensors weights only", de->d_name);
            if (d)
                closedir(d);
        }
    }
    free(single);
    free(index);
    if (rc != 1)
        hf_weights_free(w);
    return rc;
}

static const SafeTensor *weights_find(HfWeights *w, const char *name, int *file)
{
    for (int i = 0; i < w->nfiles; i++) {
        const SafeTensor *x = st_find(&w->files[i], name);
        if (x) {
            w->used[i][x - w->files[i].tensors] = 1;
            *file = i;
            return x;
        }
    }
    return NULL;
}

void hf_shape_text(char *buf, size_t size, int rank, const int64_t *shape)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, size - o, "[");
    for (int d = 0; d < rank && o < size; d++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (o < size)
        snprintf(buf + o, size - o, "]");
}

/* Loads tensor `name` of the expected shape into dst (f32); `why` says
 * where config.json's shape comes from. */
static int load_tensor(HfWeights *w, const char *dir, const char *name, int rank, const int64_t *shape,
                       const char *why, float *dst)
{
    int f = 0;
    const SafeTensor *x = weights_find(w, name, &f);
    if (!x)
        return hf_errf(w->nfiles == 1 ? w->paths[0] : dir, "tensor `%s` is missing", name);
    char want[128], have[128];
    hf_shape_text(want, sizeof want, rank, shape);
    hf_shape_text(have, sizeof have, x->rank, x->shape);
    int same = x->rank == rank;
    for (int d = 0; same && d < rank; d++)
        same = x->shape[d] == shape[d];
    if (!same)
        return hf_errf(w->paths[f], "tensor `%s` is %s but config.json makes it %s (%s)", name, have, want, why);
    if (x->dtype != ST_F32 && x->dtype != ST_BF16 && x->dtype != ST_F16)
        return hf_errf(w->paths[f], "tensor `%s` is %s; import-hf reads F32, BF16 and F16", name,
                       st_dtype_name(x->dtype));
    if (!dst)
        return 1;  /* hf_params_read's first pass: names, shapes and types only */
    size_t n = 1;
    for (int d = 0; d < rank; d++)
        n *= (size_t)shape[d];
    const unsigned char *p = x->data;
    switch (x->dtype) {
    case ST_F32:
        memcpy(dst, p, n * 4);
        break;
    case ST_BF16:
    case ST_F16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = x->dtype == ST_BF16 ? hf_bf16_to_f32(h) : hf_f16_to_f32(h);
        }
        break;
    default:
        return hf_errf(w->paths[f], "tensor `%s` is %s; import-hf reads F32, BF16 and F16", name,
                       st_dtype_name(x->dtype));
    }
    return 1;
}

static Param *param_add(ParamList *l, const char *name, int rank, int64_t d0, int64_t d1, int64_t d2)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->p = realloc(l->p, sizeof *l->p * (size_t)l->cap);
        if (!l->p)
            die("out of memory");
    }
    Param *p = &l->p[l->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rank = rank;
    int64_t dims[3] = {d0, d1, d2}, n = 1;
    for (int d = 0; d < rank; d++) {
        p->shape[d] = dims[d];
        if (n >= 0 && !checked_mul_i64(n, dims[d], &n))
            n = -1;
    }
    p->n = n < 0 ? SIZE_MAX : (size_t)n;  /* SIZE_MAX: too large to count; hf_params_alloc refuses it */
    return p;
}

int hf_params_alloc(ParamList *l, const char *path)
{
    for (int i = 0; i < l->n; i++) {
        Param *p = &l->p[i];
        p->data = p->n > SIZE_MAX / sizeof(float) ? NULL : calloc(p->n ? p->n : 1, sizeof(float));
        if (!p->data) {
            char b[32];
            fmt_bytes(b, sizeof b, (double)p->n * sizeof(float));
            return hf_errf(path, "not enough memory for parameter %s (%s)", p->name, b);
        }
    }
    return 1;
}

void hf_params_free(ParamList *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->p[i].data);
    free(l->p);
    memset(l, 0, sizeof *l);
}

/* The moec parameters, in the order of the model file, with their shapes
 * (no data read). */
void hf_params_plan(ParamList *l, const HfConfig *c)
{
    int64_t V = c->vocab, H = c->hidden, F = c->ffn, E = c->experts, Q = c->heads * c->head_dim,
            K = c->kv_heads * c->head_dim;
    param_add(l, "embed", 2, V, H, 0);
    param_add(l, "norm_f", 1, H, 0, 0);
    if (!c->tie)
        param_add(l, "lm_head", 2, V, H, 0);
    for (int64_t i = 0; i < c->layers; i++) {
        char nm[96];
#define P(suffix, rank, a, b, cc) \
    (snprintf(nm, sizeof nm, "layers.%lld." suffix, (long long)i), param_add(l, nm, rank, a, b, cc))
        P("attn.norm", 1, H, 0, 0);
        P("attn.wq", 2, Q, H, 0);
        P("attn.wk", 2, K, H, 0);
        P("attn.wv", 2, K, H, 0);
        P("attn.wo", 2, H, Q, 0);
        P("moe.norm", 1, H, 0, 0);
        P("moe.router", 2, E, H, 0);
        P("moe.w_gate_up", 3, E, 2 * F, H);
        P("moe.w_down", 3, E, H, F);
#undef P
    }
}

static Param *param_get(ParamList *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->p[i].name, name) == 0)
            return &l->p[i];
    die("no parameter %s", name);
}

/* The transformers name of a dense moec parameter (not the experts). */
int hf_name(const char *moec, char *out, size_t size)
{
    static const char *const top[][2] = {{"embed", "model.embed_tokens.weight"},
                                         {"norm_f", "model.norm.weight"},
                                         {"lm_head", "lm_head.weight"}};
    for (int i = 0; i < ARRAY_LEN(top); i++)
        if (strcmp(moec, top[i][0]) == 0) {
            snprintf(out, size, "%s", top[i][1]);
            return 1;
        }
    static const char *const per_layer[][2] = {
        {"attn.norm", "input_layernorm.weight"}, {"attn.wq", "self_attn.q_proj.weight"},
        {"attn.wk", "self_attn.k_proj.weight"}, {"attn.wv", "self_attn.v_proj.weight"},
        {"attn.wo", "self_attn.o_proj.weight"}, {"moe.norm", "post_attention_layernorm.weight"}};
    long long layer;
    int used = 0;
    if (sscanf(moec, "layers.%lld.%n", &layer, &used) != 1 || used == 0)
        return 0;
    for (int i = 0; i < ARRAY_LEN(per_layer); i++)
        if (strcmp(moec + used, per_layer[i][0]) == 0) {
            snprintf(out, size, "model.layers.%lld.%s", layer, per_layer[i][1]);
            return 1;
        }
    return 0;
}

static const char *shape_reason(const char *moec)
{
    if (strstr(moec, "embed") || strstr(moec, "lm_head")) return "vocab_size, hidden_size";
    if (strstr(moec, "norm")) return "hidden_size";
    if (strstr(moec, "wq")) return "num_attention_heads * head_dim, hidden_size";
    if (strstr(moec, "wk") || strstr(moec, "wv")) return "num_key_value_heads * head_dim, hidden_size";
    if (strstr(moec, "wo")) return "hidden_size, num_attention_heads * head_dim";
    if (strstr(moec, "router")) return "num_local_experts, hidden_size";
    if (strstr(moec, "gate_up")) return "num_local_experts, 2 * intermediate_size, hidden_size";
    if (strstr(moec, "down")) return "num_local_experts, hidden_size, intermediate_size";
    return "";
}

/* Reads every parameter from the weights; *layout names what was found. */
int hf_params_read(ParamList *l, const HfConfig *c, HfWeights *w, const char *dir, const char **layout)
{
    /* without data (before hf_params_alloc) only the names, shapes and types are checked: a config that
     * does not match its weights (a vocab_size of 2^40) is refused before anything is allocated */
    int dry = l->n > 0 && !l->p[0].data;
#define PDATA(p, off) (dry ? NULL : (p)->data + (off))
    int nfused = 0, nsplit = 0;
    for (int i = 0; i < l->n; i++) {
        Param *p = &l->p[i];
        char hf[160];
        if (hf_name(p->name, hf, sizeof hf)) {
            if (!load_tensor(w, dir, hf, p->rank, p->shape, shape_reason(p->name), PDATA(p, 0)))
                return 0;
        }
    }
    int64_t E = c->experts, F = c->ffn, H = c->hidden;
    float *tmp = dry ? NULL : malloc(sizeof(float) * (size_t)(F * H));
    if (!dry && !tmp)
        return hf_errf(dir, "not enough memory for one expert's down projection");
    int ok = 1;
    for (int64_t li = 0; ok && li < c->layers; li++) {
        char nm[160], mn[96];
        snprintf(mn, sizeof mn, "layers.%lld.moe.router", (long long)li);
        Param *router = param_get(l, mn);
        snprintf(mn, sizeof mn, "layers.%lld.moe.w_gate_up", (long long)li);
        Param *gu = param_get(l, mn);
        snprintf(mn, sizeof mn, "layers.%lld.moe.w_down", (long long)li);
        Param *down = param_get(l, mn);
        snprintf(nm, sizeof nm, "model.layers.%lld.mlp.experts.gate_up_proj", (long long)li);
        int fused = 0;
        for (int i = 0; i < w->nfiles && !fused; i++)
            fused = st_find(&w->files[i], nm) != NULL;
        if (fused) {
            nfused++;
            ok = load_tensor(w, dir, nm, 3, gu->shape, shape_reason("gate_up"), PDATA(gu, 0));
            snprintf(nm, sizeof nm, "model.layers.%lld.mlp.experts.down_proj", (long long)li);
            ok = ok && load_tensor(w, dir, nm, 3, down->shape, shape_reason("down"), PDATA(down, 0));
            snprintf(nm, sizeof nm, "model.layers.%lld.mlp.gate.weight", (long long)li);
            ok = ok && load_tensor(w, dir, nm, 2, router->shape, shape_reason("router"), PDATA(router, 0));
        } else {
            nsplit++;
            snprintf(nm, sizeof nm, "model.layers.%lld.block_sparse_moe.gate.weight", (long long)li);
            ok = load_tensor(w, dir, nm, 2, router->shape, shape_reason("router"), PDATA(router, 0));
            int64_t fh[2] = {F, H}, hf2[2] = {H, F};
            for (int64_t e = 0; ok && e < E; e++) {
                snprintf(nm, sizeof nm, "model.layers.%lld.block_sparse_moe.experts.%lld.w1.weight", (long long)li,
                         (long long)e);
                ok = load_tensor(w, dir, nm, 2, fh, "intermediate_size, hidden_size", PDATA(gu, e * 2 * F * H));
                snprintf(nm, sizeof nm, "model.layers.%lld.block_sparse_moe.experts.%lld.w3.weight", (long long)li,
                         (long long)e);
                ok = ok && load_tensor(w, dir, nm, 2, fh, "intermediate_size, hidden_size",
                                       PDATA(gu, e * 2 * F * H + F * H));
                snprintf(nm, sizeof nm, "model.layers.%lld.block_sparse_moe.experts.%lld.w2.weight", (long long)li,
                         (long long)e);
                ok = ok && load_tensor(w, dir, nm, 2, hf2, "hidden_size, intermediate_size", tmp);
                if (ok && !dry)
                    memcpy(down->data + e * H * F, tmp, sizeof(float) * (size_t)(H * F));
            }
        }
    }
#undef PDATA
    free(tmp);
    if (!ok)
        return 0;
    *layout = nfused && nsplit ? "mixed" : nfused ? "fused (transformers 5)" : "per-expert";
    /* anything left over means the folder is not the model we mapped */
    for (int i = 0; i < w->nfiles; i++)
        for (int k = 0; k < w->files[i].ntensors; k++) {
            const char *nm = w->files[i].tensors[k].name;
            if (w->used[i][k])
                continue;
            size_t n = strlen(nm);
            if (n > 15 && strcmp(nm + n - 15, ".rotary_emb.inv_freq") == 0)
                continue;  /* a buffer old transformers saved */
            if (c->tie && strcmp(nm, "lm_head.weight") == 0)
                continue;  /* tied: transformers uses the embedding */
            return hf_errf(w->paths[i], "tensor `%s` has no place in the model config.json describes (a bias, another "
                           "architecture, or more layers or experts than the config has?)", nm);
        }
    return 1;
}

/* util's atomic write_file, its error said as hf_errf says errors */
int hf_write_text(const char *path, const char *text, size_t len)
{
    char err[1024];
    if (!write_file(path, text, len, err, sizeof err))
    {
        size_t pl = strlen(path);  /* err is "PATH: cannot write: ...": PATH goes first in hf_errf's way */
        return hf_errf(path, "%s", strlen(err) > pl + 2 && strncmp(err, path, pl) == 0 ? err + pl + 2 : err);
    }
    return 1;
}
