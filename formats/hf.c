/* hf.c - `moec import-hf` and `moec export-hf`: Hugging Face transformers'
 * MixtralForCausalLM <-> a .moe model file and a moec checkpoint.
 *
 * The model file import-hf writes has one fixed shape (the one of
 * models/mixtral_tiny.moe) with the numbers of config.json filled in; its
 * ops mean what transformers computes (docs/huggingface.md, "Semantics").
 * export-hf goes back: it reads the numbers off a model's IR, writes that
 * same model text again, lowers it and compares the two graphs node by
 * node, so that only a model that *is* that shape is exported, whatever
 * its file looks like.
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
#include "checkpoint.h"
#include "safetensors.h"


const char hf_usage_import[] =
    "usage: moec import-hf DIR -o MODEL.moe [--ckpt CKPT] [--seq N] [--batch N] [--steps N]\n"
    "                      [--lr X] [--precision bf16|mxfp8] [--name NAME]\n"
    "\n"
    "Reads DIR/config.json of a Hugging Face MixtralForCausalLM and writes MODEL.moe,\n"
    "a model file that computes what transformers computes, with a train section.\n"
    "When DIR holds weights (model.safetensors, or shards listed by\n"
    "model.safetensors.index.json; F32, BF16 or F16; the fused transformers 5\n"
    "layout or one module per expert), it also writes a moec checkpoint that the\n"
    "compiled model's training binary starts from with --init CKPT.\n"
    "\n"
    "  -o MODEL.moe      the model file to write\n"
    "  --ckpt CKPT       the checkpoint to write (default: MODEL.init.safetensors)\n"
    "  --seq N           sequence length of the train section (default 128, at most\n"
    "                    max_position_embeddings)\n"
    "  --batch N         global batch (default 8)\n"
    "  --steps N         training steps (default 1000)\n"
    "  --lr X            peak learning rate (default 3e-4)\n"
    "  --precision P     bf16 (default) or mxfp8\n"
    "  --name NAME       the model's name (default: from MODEL.moe's file name)\n"
    "\n"
    "The training binary reads FASTA with the protein (33 tokens) or dna (9 tokens)\n"
    "alphabet: a vocab_size of 33 or 9 gets that alphabet, any other a model that\n"
    "checks and compiles to CUDA but has no alphabet to train on. See\n"
    "docs/huggingface.md.\n";

const char hf_usage_export[] =
    "usage: moec export-hf MODEL.moe CKPT -o DIR [--dtype f32|bf16] [--layout fused|per-expert]\n"
    "\n"
    "Writes DIR/config.json and DIR/model.safetensors, a Hugging Face\n"
    "MixtralForCausalLM with the parameters of the moec checkpoint CKPT (written\n"
    "by a training binary of MODEL.moe, or by import-hf). MODEL.moe must have the\n"
    "Mixtral structure that import-hf writes (models/mixtral_tiny.moe has it).\n"
    "\n"
    "  -o DIR            the folder to write (created if missing)\n"
    "  --dtype D         f32 (default) or bf16 (round to nearest even)\n"
    "  --layout L        fused (default: transformers 5, mlp.experts.gate_up_proj)\n"
    "                    or per-expert (block_sparse_moe.experts.J.w1/w2/w3)\n";

/* ------------------------------------------------------------ small helpers */

static int errf(const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: error: ", path);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 0;
}

static void warnf(const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: warning: ", path);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int usage(const char *cmd, const char *fmt, const char *arg)
{
    fprintf(stderr, "moec: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nRun 'moec %s --help' for usage.\n", cmd);
    return 2;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *s = malloc(n);
    if (!s)
        die("out of memory");
    snprintf(s, n, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    return s;
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
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

typedef struct HfConfig {
    int64_t vocab, hidden, ffn, layers, heads, kv_heads, head_dim, experts, top_k, max_pos;
    int64_t sliding_window;   /* 0: none */
    double eps, theta, init_std, aux_coef;
    int tie;
} HfConfig;

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
        return errf(path, "missing key `%s` (%s)", key, meaning);
    }
    if (!cJSON_IsNumber(j) || j->valuedouble != floor(j->valuedouble))
        return errf(path, "`%s` (%s) must be an integer, not %s", key, meaning,
                    cJSON_IsNumber(j) ? "a fractional number" : json_kind(j));
    if (j->valuedouble < (double)lo || j->valuedouble > (double)hi)
        return errf(path, "`%s` = %.17g (%s) is out of range [%lld, %lld]", key, j->valuedouble, meaning,
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
            return errf(path, "missing key `%s` (%s)", key, meaning);
        *out = dflt;
        return 1;
    }
    if (!cJSON_IsNumber(j))
        return errf(path, "`%s` (%s) must be a number, not %s", key, meaning, json_kind(j));
    if (!(j->valuedouble >= lo && j->valuedouble <= hi))
        return errf(path, "`%s` = %.17g (%s) is out of range [%g, %g]", key, j->valuedouble, meaning, lo, hi);
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
        return errf(path, "`%s` must be true or false, not %s", key, json_kind(j));
    *out = cJSON_IsTrue(j);
    return 1;
}

static char *read_text(const char *path, size_t *len_out)
{
    FILE *f = fopen(path, "rb");
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

/* Parses a JSON file; a syntax error is reported at its line and column. */
static cJSON *read_json(const char *path)
{
    size_t len;
    char *text = read_text(path, &len);
    if (!text) {
        errf(path, "cannot read: %s", strerror(errno));
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
        errf(path, "the file must hold a JSON object, not %s", json_kind(root));
        cJSON_Delete(root);
        root = NULL;
    }
    free(text);
    return root;
}

/* Reads config.json into c; seq (0: not given) is checked against the
 * sliding window and the position limit. */
static int read_config(const char *path, int64_t *seq, HfConfig *c)
{
    cJSON *root = read_json(path);
    if (!root)
        return 0;
    int ok = 1;
    const cJSON *mt = key_of(root, "model_type");
    if (!mt)
        ok = errf(path, "missing key `model_type`: import-hf reads MixtralForCausalLM configs (\"mixtral\")");
    else if (!cJSON_IsString(mt))
        ok = errf(path, "`model_type` must be a string, not %s", json_kind(mt));
    else if (strcmp(mt->valuestring, "mixtral") != 0)
        ok = errf(path, "model_type \"%s\" is not \"mixtral\": import-hf reads MixtralForCausalLM configs only",
                  mt->valuestring);
    const cJSON *arch = key_of(root, "architectures");
    if (ok && arch && !cJSON_IsNull(arch)) {
        int found = 0;
        const cJSON *a;
        if (!cJSON_IsArray(arch))
            ok = errf(path, "`architectures` must be an array of strings, not %s", json_kind(arch));
        else
            cJSON_ArrayForEach(a, arch)
                found |= cJSON_IsString(a) && strcmp(a->valuestring, "MixtralForCausalLM") == 0;
        if (ok && !found) {
            const cJSON *first = cJSON_GetArrayItem(arch, 0);
            ok = errf(path, "architectures lists %s, not MixtralForCausalLM: import-hf maps the causal LM only",
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
        ok = errf(path, "hidden_act %s%s%s: moec's experts are SwiGLU (silu) only",
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
            ok = errf(path, "`%s` must be an object, not %s", what, json_kind(o));
            break;
        }
        const cJSON *ty = key_of(o, "rope_type");
        if (!ty)
            ty = key_of(o, "type");
        if (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "default") != 0)) {
            ok = errf(path, "%s.rope_type %s%s%s is not supported: moec's rope is the default (unscaled) RoPE",
                      what, cJSON_IsString(ty) ? "\"" : "", cJSON_IsString(ty) ? ty->valuestring : json_kind(ty),
                      cJSON_IsString(ty) ? "\"" : "");
            break;
        }
        const cJSON *th = key_of(o, "rope_theta");
        if (th) {
            if (!cJSON_IsNumber(th) || !(th->valuedouble > 0))
                ok = errf(path, "%s.rope_theta must be a positive number", what);
            else {
                c->theta = th->valuedouble;
                have_theta = 1;
            }
        }
        const cJSON *pr = key_of(o, "partial_rotary_factor");
        if (ok && pr && !(cJSON_IsNumber(pr) && pr->valuedouble == 1.0))
            ok = errf(path, "%s.partial_rotary_factor must be 1: moec rotates the whole head", what);
    }
    const cJSON *pr = key_of(root, "partial_rotary_factor");
    if (ok && pr && !cJSON_IsNull(pr) && !(cJSON_IsNumber(pr) && pr->valuedouble == 1.0))
        ok = errf(path, "partial_rotary_factor must be 1: moec rotates the whole head");
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
        return errf(path, "num_key_value_heads %lld does not divide num_attention_heads %lld", (long long)c->kv_heads,
                    (long long)c->heads);
    if (c->hidden % c->heads != 0)
        return errf(path, "num_attention_heads %lld does not divide hidden_size %lld, which moec's attention needs",
                    (long long)c->heads, (long long)c->hidden);
    if (c->head_dim == 0)
        c->head_dim = c->hidden / c->heads;
    if (c->head_dim % 2 != 0)
        return errf(path, "head_dim %lld is odd: RoPE rotates pairs", (long long)c->head_dim);
    if (c->top_k > c->experts)
        return errf(path, "num_experts_per_tok %lld is more than num_local_experts %lld", (long long)c->top_k,
                    (long long)c->experts);
    if (*seq == 0)
        *seq = c->max_pos < 128 ? c->max_pos : 128;
    if (*seq > c->max_pos)
        return errf(path, "--seq %lld is longer than max_position_embeddings %lld", (long long)*seq,
                    (long long)c->max_pos);
    if (c->sliding_window && c->sliding_window < *seq)
        return errf(path, "sliding_window %lld is shorter than the sequence (%lld): moec's attention is plainly "
                    "causal; import with --seq %lld or less", (long long)c->sliding_window, (long long)*seq,
                    (long long)c->sliding_window);
    if (dropout > 0)
        warnf(path, "attention_dropout %g is not imported: moec has no dropout", dropout);
    if (jitter > 0)
        warnf(path, "router_jitter_noise %g is not imported: moec's router has no noise", jitter);
    if (router_logits)
        warnf(path, "output_router_logits is true: transformers then adds router_aux_loss_coef times one "
              "load-balancing loss over all layers' tokens together; the model file's `aux_loss` (0 here) "
              "adds one per layer instead (docs/huggingface.md)");
    return 1;
}

/* ------------------------------------------------------------ the model text */

typedef struct TrainOpts {
    int64_t seq, batch, steps;
    double lr;
    const char *precision;
    double aux_loss;
} TrainOpts;

static const char *alphabet_for(int64_t vocab)
{
    return vocab == 33 ? "protein" : vocab == 9 ? "dna" : "none";
}

/* The model file: the structure of models/mixtral_tiny.moe with c's numbers. */
static char *model_text(const HfConfig *c, const char *name, const TrainOpts *t)
{
    char eps[40], theta[40], std[40], lr[40], minlr[40], aux[40];
    hf_format_double(eps, sizeof eps, c->eps);
    hf_format_double(theta, sizeof theta, c->theta);
    hf_format_double(std, sizeof std, c->init_std);
    hf_format_double(lr, sizeof lr, t->lr);
    snprintf(minlr, sizeof minlr, "%.6g", t->lr / 10);
    hf_format_double(aux, sizeof aux, t->aux_loss);
    const char *alpha = alphabet_for(c->vocab);
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
static int lower_text(Compilation *c, const char *path, const char *text, size_t len)
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

typedef struct HfWeights {
    SafeTensors *files;
    char **paths;
    char **used;      /* per file, per tensor */
    int nfiles;
} HfWeights;

static void weights_free(HfWeights *w)
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
static int weights_open(HfWeights *w, const char *dir)
{
    memset(w, 0, sizeof *w);
    char *single = join(dir, "model.safetensors"), *index = join(dir, "model.safetensors.index.json");
    int rc;
    if (file_exists(index)) {
        cJSON *root = read_json(index);
        const cJSON *map = root ? key_of(root, "weight_map") : NULL;
        rc = root != NULL;
        if (root && !cJSON_IsObject(map))
            rc = errf(index, "`weight_map` must be an object of tensor name -> file, not %s",
                      map ? json_kind(map) : "missing");
        const cJSON *e;
        if (rc)
            cJSON_ArrayForEach(e, map) {
                if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || !e->valuestring[0]) {
                    rc = errf(index, "weight_map[\"%s\"] must name a file in %s", e->string, dir);
                    break;
                }
                char *p = join(dir, e->valuestring);
                rc = weights_add(w, p);
                free(p);
                if (!rc)
                    break;
            }
        if (rc && w->nfiles == 0)
            rc = errf(index, "weight_map lists no files");
        cJSON_Delete(root);
    } else if (file_exists(single)) {
        rc = weights_add(w, single);
    } else {
        rc = -1;
        DIR *d = opendir(dir);
        struct dirent *de;
        while (d && (de = readdir(d)))
            if (strncmp(de->d_name, "model-", 6) == 0 && strstr(de->d_name, ".safetensors"))
                rc = errf(dir, "%s is a shard of a sharded checkpoint, but model.safetensors.index.json is "
                          "missing", de->d_name);
        if (d)
            closedir(d);
        if (rc == -1) {
            d = opendir(dir);
            while (d && (de = readdir(d)))
                if (strstr(de->d_name, ".bin") || strstr(de->d_name, ".pt"))
                    warnf(dir, "%s is not read: import-hf reads safetensors weights only", de->d_name);
            if (d)
                closedir(d);
        }
    }
    free(single);
    free(index);
    if (rc != 1)
        weights_free(w);
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

static void shape_text(char *buf, size_t size, int rank, const int64_t *shape)
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
        return errf(w->nfiles == 1 ? w->paths[0] : dir, "tensor `%s` is missing", name);
    char want[128], have[128];
    shape_text(want, sizeof want, rank, shape);
    shape_text(have, sizeof have, x->rank, x->shape);
    int same = x->rank == rank;
    for (int d = 0; same && d < rank; d++)
        same = x->shape[d] == shape[d];
    if (!same)
        return errf(w->paths[f], "tensor `%s` is %s but config.json makes it %s (%s)", name, have, want, why);
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
        return errf(w->paths[f], "tensor `%s` is %s; import-hf reads F32, BF16 and F16", name,
                    st_dtype_name(x->dtype));
    }
    return 1;
}

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
    int64_t dims[3] = {d0, d1, d2};
    p->n = 1;
    for (int d = 0; d < rank; d++) {
        p->shape[d] = dims[d];
        p->n *= (size_t)dims[d];
    }
    p->data = calloc(p->n ? p->n : 1, sizeof(float));
    if (!p->data)
        die("out of memory for %s", name);
    return p;
}

static void params_free(ParamList *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->p[i].data);
    free(l->p);
    memset(l, 0, sizeof *l);
}

/* The moec parameters, in the order of the model file, with their shapes
 * (no data read). */
static void params_plan(ParamList *l, const HfConfig *c)
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
static int hf_name(const char *moec, char *out, size_t size)
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
static int params_read(ParamList *l, const HfConfig *c, HfWeights *w, const char *dir, const char **layout)
{
    int nfused = 0, nsplit = 0;
    for (int i = 0; i < l->n; i++) {
        Param *p = &l->p[i];
        char hf[160];
        if (hf_name(p->name, hf, sizeof hf)) {
            if (!load_tensor(w, dir, hf, p->rank, p->shape, shape_reason(p->name), p->data))
                return 0;
        }
    }
    int64_t E = c->experts, F = c->ffn, H = c->hidden;
    float *tmp = malloc(sizeof(float) * (size_t)(F * H));
    if (!tmp)
        die("out of memory");
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
            ok = load_tensor(w, dir, nm, 3, gu->shape, shape_reason("gate_up"), gu->data);
            snprintf(nm, sizeof nm, "model.layers.%lld.mlp.experts.down_proj", (long long)li);
            ok = ok && load_tensor(w, dir, nm, 3, down->shape, shape_reason("down"), down->data);
            snprintf(nm, sizeof nm, "model.layers.%lld.mlp.gate.weight", (long long)li);
            ok = ok && load_tensor(w, dir, nm, 2, router->shape, shape_reason("router"), router->data);
        } else {
            nsplit++;
            snprintf(nm, sizeof nm, "model.layers.%lld.block_sparse_moe.gate.weight", (long long)li);
            ok = load_tensor(w, dir, nm, 2, router->shape, shape_reason("router"), router->data);
            int64_t fh[2] = {F, H}, hf2[2] = {H, F};
            for (int64_t e = 0; ok && e < E; e++) {
                snprintf(nm, sizeof nm, "model.layers.%lld.block_sparse_moe.experts.%lld.w1.weight", (long long)li,
                         (long long)e);
                ok = load_tensor(w, dir, nm, 2, fh, "intermediate_size, hidden_size", gu->data + e * 2 * F * H);
                snprintf(nm, sizeof nm, "model.layers.%lld.block_sparse_moe.experts.%lld.w3.weight", (long long)li,
                         (long long)e);
                ok = ok && load_tensor(w, dir, nm, 2, fh, "intermediate_size, hidden_size",
                                       gu->data + e * 2 * F * H + F * H);
                snprintf(nm, sizeof nm, "model.layers.%lld.block_sparse_moe.experts.%lld.w2.weight", (long long)li,
                         (long long)e);
                ok = ok && load_tensor(w, dir, nm, 2, hf2, "hidden_size, intermediate_size", tmp);
                if (ok)
                    memcpy(down->data + e * H * F, tmp, sizeof(float) * (size_t)(H * F));
            }
        }
    }
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
            return errf(w->paths[i], "tensor `%s` has no place in the model config.json describes (a bias, another "
                        "architecture, or more layers or experts than the config has?)", nm);
        }
    return 1;
}

static int save_checkpoint(const ParamList *l, const char *model_name, const char *text, size_t len,
                           const char *path, const char *source)
{
    CkptWriter w;
    ckpt_writer_init(&w, model_name, hash64(text, len), 0);
    for (int i = 0; i < l->n; i++)
        ckpt_writer_add(&w, CKPT_PARAM, l->p[i].name, l->p[i].rank, l->p[i].shape, l->p[i].data);
    ckpt_writer_meta(&w, "source", source);
    char err[1024];
    int ok = ckpt_writer_save(&w, path, err, sizeof err);
    if (!ok)
        fprintf(stderr, "moec: error: %s\n", err);
    ckpt_writer_free(&w);
    return ok;
}

/* util's atomic write_file, its error said as errf says errors */
static int write_text(const char *path, const char *text, size_t len)
{
    char err[1024];
    if (!write_file(path, text, len, err, sizeof err))
    {
        size_t pl = strlen(path);  /* err is "PATH: cannot write: ...": PATH goes first in errf's way */
        return errf(path, "%s", strlen(err) > pl + 2 && strncmp(err, path, pl) == 0 ? err + pl + 2 : err);
    }
    return 1;
}

static int is_keyword(const char *s)
{
    static const char *const kw[] = {"model", "block", "param", "input", "output", "const", "repeat",
                                     "return", "train", "init", "true", "false", "B", "S"};
    for (int i = 0; i < ARRAY_LEN(kw); i++)
        if (strcmp(s, kw[i]) == 0)
            return 1;
    return 0;
}

static void name_from_path(char *out, size_t size, const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    if (n > 4 && strcmp(base + n - 4, ".moe") == 0)
        n -= 4;
    size_t o = 0;
    if (n > 0 && base[0] >= '0' && base[0] <= '9')
        o += (size_t)snprintf(out, size, "m_");
    for (size_t i = 0; i < n && o + 1 < size; i++) {
        char ch = base[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
        out[o++] = ok ? ch : '_';
    }
    out[o] = 0;
    if (o == 0)
        snprintf(out, size, "hf_model");
    else if (is_keyword(out) && o + 7 < size)
        strcat(out, "_model");
}

static int valid_ident(const char *s)
{
    if (!s[0] || (s[0] >= '0' && s[0] <= '9') || is_keyword(s))
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return 0;
    return 1;
}

/* ------------------------------------------------------------ import-hf */

int hf_import_main(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL, *ckpt = NULL, *name = NULL;
    TrainOpts t = {0, 8, 1000, 3e-4, "bf16", 0};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(hf_usage_import, stdout);
            return 0;
        } else if (strcmp(a, "-o") == 0 && has_val) {
            out = argv[++i];
        } else if (strcmp(a, "--ckpt") == 0 && has_val) {
            ckpt = argv[++i];
        } else if (strcmp(a, "--name") == 0 && has_val) {
            name = argv[++i];
            if (!valid_ident(name))
                return usage("import-hf", "--name: '%s' is not a model name (letters, digits, _; not a keyword)",
                             name);
        } else if ((strcmp(a, "--seq") == 0 || strcmp(a, "--batch") == 0) && has_val) {
            int64_t v;
            if (!parse_i64_in(argv[++i], 1, 1 << 24, &v))
                return usage("import-hf", "expected a whole number from 1 to 16777216 after this flag, got '%s'",
                             argv[i]);
            *(a[2] == 's' ? &t.seq : &t.batch) = v;
        } else if (strcmp(a, "--steps") == 0 && has_val) {
            if (!parse_i64_in(argv[++i], 0, (int64_t)1 << 40, &t.steps))
                return usage("import-hf", "--steps: expected a whole number, got '%s'", argv[i]);
        } else if (strcmp(a, "--lr") == 0 && has_val) {
            char *end;
            t.lr = strtod(argv[++i], &end);
            if (*end || end == argv[i] || !(t.lr > 0 && t.lr <= 1e9))
                return usage("import-hf", "--lr: expected a positive number, got '%s'", argv[i]);
        } else if (strcmp(a, "--precision") == 0 && has_val) {
            t.precision = argv[++i];
            if (strcmp(t.precision, "bf16") != 0 && strcmp(t.precision, "mxfp8") != 0)
                return usage("import-hf", "--precision: '%s' is not one of bf16, mxfp8", t.precision);
        } else if (a[0] == '-' && a[1]) {
            return usage("import-hf", "unknown option or missing value: '%s'", a);
        } else if (!dir) {
            dir = a;
        } else {
            return usage("import-hf", "one folder, not more ('%s')", a);
        }
    }
    if (!dir)
        return usage("import-hf", "give the folder of a Hugging Face model (with config.json)%s", "");
    if (!out)
        return usage("import-hf", "import-hf needs -o MODEL.moe, the model file to write%s", "");
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "moec: error: '%s' is not a folder: give the folder that holds config.json\n", dir);
        return 1;
    }
    char *cfg_path = join(dir, "config.json");
    if (!file_exists(cfg_path)) {
        errf(cfg_path, "no such file: a Hugging Face model folder has config.json");
        free(cfg_path);
        return 1;
    }
    HfConfig c;
    memset(&c, 0, sizeof c);
    if (!read_config(cfg_path, &t.seq, &c)) {
        free(cfg_path);
        return 1;
    }
    char nbuf[96];
    if (name)
        snprintf(nbuf, sizeof nbuf, "%s", name);
    else
        name_from_path(nbuf, sizeof nbuf, out);
    char *text = model_text(&c, nbuf, &t);
    size_t len = strlen(text);
    /* the text must lower: a config moec cannot express is refused here */
    Compilation comp;
    int rc = 1;
    HfWeights w = {0};
    ParamList pl = {0};
    char *ckpt_buf = NULL;
    if (!lower_text(&comp, out, text, len)) {
        fprintf(stderr, "%s: error: the model file made from this config does not lower (above)\n", cfg_path);
        goto done;
    }
    int have = weights_open(&w, dir);
    if (have == 0)
        goto done;
    const char *layout = NULL;
    if (have == 1) {
        params_plan(&pl, &c);
        if (!params_read(&pl, &c, &w, dir, &layout))
            goto done;
        if (!ckpt) {
            size_t n = strlen(out);
            ckpt_buf = malloc(n + 24);
            memcpy(ckpt_buf, out, n + 1);
            if (n > 4 && strcmp(ckpt_buf + n - 4, ".moe") == 0)
                ckpt_buf[n - 4] = 0;
            strcat(ckpt_buf, ".init.safetensors");
            ckpt = ckpt_buf;
        }
    }
    if (!write_text(out, text, len))
        goto done;
    if (have == 1 && !save_checkpoint(&pl, nbuf, text, len, ckpt, "moec import-hf"))
        goto done;
    printf("%s: wrote %s (model %s: %lld layers, hidden %lld, %lld experts top-%lld, vocab %lld, alphabet %s)\n",
           dir, out, nbuf, (long long)c.layers, (long long)c.hidden, (long long)c.experts, (long long)c.top_k,
           (long long)c.vocab, alphabet_for(c.vocab));
    if (have == 1)
        printf("%s: wrote %s (%d parameter tensors from %d safetensors file%s, expert layout %s); train from it "
               "with --init %s\n", dir, ckpt, pl.n, w.nfiles, w.nfiles == 1 ? "" : "s", layout, ckpt);
    else
        printf("%s: no weights (model.safetensors or model.safetensors.index.json): wrote the model file only\n",
               dir);
    if (strcmp(alphabet_for(c.vocab), "none") == 0)
        printf("%s: note: vocab_size %lld is neither the protein alphabet's 33 nor dna's 9 tokens: the model "
               "checks and compiles, but its training binary has no FASTA alphabet to read\n", dir,
               (long long)c.vocab);
    rc = 0;
done:
    compilation_free(&comp);
    params_free(&pl);
    weights_free(&w);
    free(ckpt_buf);
    free(text);
    free(cfg_path);
    return rc;
}

/* ------------------------------------------------------------ export-hf */

static const IrNode *find_node(const IrGraph *g, IrOp op, const char *name)
{
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i]->op == op && (!name || strcmp(g->nodes[i]->name, name) == 0))
            return g->nodes[i];
    return NULL;
}

/* Reads the numbers of a Mixtral-shaped graph; 0 with the reason if it has
 * no such numbers. */
static int derive_config(const IrGraph *g, HfConfig *c, char *why, size_t size)
{
    memset(c, 0, sizeof *c);
    const IrNode *embed = find_node(g, IR_OP_PARAM, "embed"), *wq = find_node(g, IR_OP_PARAM, "layers.0.attn.wq"),
                 *gu = find_node(g, IR_OP_PARAM, "layers.0.moe.w_gate_up"), *sdpa = find_node(g, IR_OP_SDPA, NULL),
                 *rope = find_node(g, IR_OP_ROPE, NULL), *norm = find_node(g, IR_OP_RMSNORM, NULL),
                 *topk = find_node(g, IR_OP_TOPK_EXPERTS, NULL);
    const char *missing = !embed ? "parameter `embed` (the token embedding)"
                          : !wq ? "parameter `layers.0.attn.wq` (a `repeat layers { x = attn(x) ... }`)"
                          : !gu ? "parameter `layers.0.moe.w_gate_up` (a block `moe` in the repeat)"
                          : !sdpa ? "attention"
                          : !rope ? "RoPE (rope_theta > 0)"
                          : !norm ? "rmsnorm"
                          : !topk ? "route_topk"
                                  : NULL;
    if (missing) {
        snprintf(why, size, "it has no %s", missing);
        return 0;
    }
    if (embed->rank != 2 || wq->rank != 2 || gu->rank != 3) {
        snprintf(why, size, "`embed`, `wq` or `w_gate_up` has an unexpected rank");
        return 0;
    }
    c->vocab = embed->shape[0];
    c->hidden = embed->shape[1];
    c->heads = ir_attr_i(sdpa, IR_ATTR_HEADS);
    c->kv_heads = ir_attr_i(sdpa, IR_ATTR_KV_HEADS);
    c->head_dim = wq->shape[0] / c->heads;
    c->experts = gu->shape[0];
    c->ffn = gu->shape[1] / 2;
    c->top_k = ir_attr_i(topk, IR_ATTR_K);
    c->eps = ir_attr_f(norm, IR_ATTR_EPS);
    c->theta = ir_attr_f(rope, IR_ATTR_THETA);
    c->tie = find_node(g, IR_OP_PARAM, "lm_head") == NULL;
    c->init_std = ir_has_attr(embed, IR_ATTR_STD) ? ir_attr_f(embed, IR_ATTR_STD) : 0.02;
    c->aux_coef = g->train.aux_loss_coef;
    c->max_pos = g->train.seq > 4096 ? g->train.seq : 4096;
    for (;;) {
        char nm[64];
        snprintf(nm, sizeof nm, "layers.%lld.attn.wq", (long long)c->layers);
        if (!find_node(g, IR_OP_PARAM, nm))
            break;
        c->layers++;
    }
    return 1;
}

static int init_attr(int k)
{
    return k == IR_ATTR_INIT || k == IR_ATTR_STD || k == IR_ATTR_BOUND || k == IR_ATTR_VALUE;
}

/* The first difference between two lowered graphs, ignoring locations and
 * initialisers; 1 if there is none. */
static int same_graph(const IrGraph *a, const IrGraph *b, char *why, size_t size)
{
    if (a->nnodes != b->nnodes) {
        snprintf(why, size, "it has %d IR nodes where the Mixtral structure has %d", a->nnodes, b->nnodes);
        return 0;
    }
    for (int i = 0; i < a->nnodes; i++) {
        const IrNode *x = a->nodes[i], *y = b->nodes[i];
        const char *what = NULL;
        if (x->op != y->op || x->custom != y->custom || x->nsrc != y->nsrc)
            what = "another op";
        else if (strcmp(x->name, y->name) != 0)
            what = "another name";
        int same = x->dtype == y->dtype && x->rank == y->rank;
        for (int d = 0; same && d < x->rank; d++)
            same = x->shape[d] == y->shape[d];
        if (!what && !same)
            what = "another type";
        for (int s = 0; !what && s < x->nsrc; s++)
            if (x->src[s]->id != y->src[s]->id)
                what = "other inputs";
        if (!what && x->is_output != y->is_output)
            what = "another output mark";
        unsigned ma = x->attr_set, mb = y->attr_set;
        for (int k = 0; k < IR_ATTR_COUNT; k++)
            if (init_attr(k)) {
                ma &= ~(1u << k);
                mb &= ~(1u << k);
            }
        same = ma == mb;
        for (int k = 0; same && k < IR_ATTR_COUNT; k++)
            if (ma & (1u << k))
                same = x->attr[k].i == y->attr[k].i && x->attr[k].f == y->attr[k].f &&
                       (x->attr[k].s == y->attr[k].s ||
                        (x->attr[k].s && y->attr[k].s && strcmp(x->attr[k].s, y->attr[k].s) == 0));
        if (!what && !same)
            what = "other attributes";
        if (what) {
            char tx[96], ty[96];
            snprintf(why, size, "IR node %d, %%%s = %s : %s (line %d), has %s than in the Mixtral structure "
                     "(%%%s = %s : %s)", i, x->name, ir_node_op_name(x), ir_type_str(x, tx, sizeof tx), x->loc.line,
                     what, y->name, ir_node_op_name(y), ir_type_str(y, ty, sizeof ty));
            return 0;
        }
    }
    if ((a->loss ? a->loss->id : -1) != (b->loss ? b->loss->id : -1)) {
        snprintf(why, size, "its loss is another node");
        return 0;
    }
    return 1;
}

/* A JSON number that Python reads as a float: 1e-05, 1000000.0, 0.0. */
static void json_float(char *buf, size_t size, double v)
{
    hf_format_double(buf, size, v);
    if (!strpbrk(buf, ".eEn") && strlen(buf) + 3 <= size)
        strcat(buf, ".0");
}

static void add_f32_or_bf16(SafeTensorsWriter *w, const char *name, int rank, const int64_t *shape,
                            const float *data, size_t n, int bf16, void **keep, int *nkeep)
{
    if (!bf16) {
        st_writer_add(w, name, ST_F32, rank, shape, data, n * 4);
        return;
    }
    uint16_t *h = malloc(n * 2 + 2);
    if (!h)
        die("out of memory");
    for (size_t i = 0; i < n; i++)
        h[i] = hf_f32_to_bf16(data[i]);
    keep[(*nkeep)++] = h;
    st_writer_add(w, name, ST_BF16, rank, shape, h, n * 2);
}

int hf_export_main(int argc, char **argv)
{
    const char *model = NULL, *ckpt = NULL, *out = NULL;
    int bf16 = 0, per_expert = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(hf_usage_export, stdout);
            return 0;
        } else if (strcmp(a, "-o") == 0 && has_val) {
            out = argv[++i];
        } else if (strcmp(a, "--dtype") == 0 && has_val) {
            const char *v = argv[++i];
            if (strcmp(v, "f32") != 0 && strcmp(v, "bf16") != 0)
                return usage("export-hf", "--dtype: '%s' is not one of f32, bf16", v);
            bf16 = strcmp(v, "bf16") == 0;
        } else if (strcmp(a, "--layout") == 0 && has_val) {
            const char *v = argv[++i];
            if (strcmp(v, "fused") != 0 && strcmp(v, "per-expert") != 0)
                return usage("export-hf", "--layout: '%s' is not one of fused, per-expert", v);
            per_expert = strcmp(v, "per-expert") == 0;
        } else if (a[0] == '-' && a[1]) {
            return usage("export-hf", "unknown option or missing value: '%s'", a);
        } else if (!model) {
            model = a;
        } else if (!ckpt) {
            ckpt = a;
        } else {
            return usage("export-hf", "a model file and a checkpoint, not more ('%s')", a);
        }
    }
    if (!model || !ckpt)
        return usage("export-hf", "give a model file and a checkpoint: moec export-hf MODEL.moe CKPT -o DIR%s", "");
    if (!out)
        return usage("export-hf", "export-hf needs -o DIR, the folder to write%s", "");

    int rc = 1;
    Compilation mc = {0}, rc_comp = {0};
    char *ref_text = NULL;
    Ckpt ck = {0};
    SafeTensorsWriter w;
    st_writer_init(&w);
    ParamList pl = {0};
    void **keep = NULL;
    int nkeep = 0;
    char **names = NULL;
    int nnames = 0;
    char *cfg_path = NULL, *st_path = NULL;
    char why[512];
    HfConfig c;

    if (!compilation_read(&mc, model, stderr))
        return 1;
    char *src = mc.text;
    size_t src_len = mc.len;
    mc.text = NULL;
    if (!lower_text(&mc, model, src, src_len)) {
        free(src);
        goto done;
    }
    if (!derive_config(mc.graph, &c, why, sizeof why)) {
        errf(model, "export-hf maps Mixtral-shaped models only (the structure import-hf writes, as in "
             "models/mixtral_tiny.moe): %s", why);
        free(src);
        goto done;
    }
    /* B is one rank's share of the batch: the regenerated text has one rank */
    const IrTrain *tr = &mc.graph->train;
    TrainOpts t = {tr->seq, tr->batch / (tr->ep * tr->dp), 1000, 3e-4, "bf16", tr->aux_loss_coef};
    ref_text = model_text(&c, mc.graph->model, &t);
    if (!lower_text(&rc_comp, "(the Mixtral structure)", ref_text, strlen(ref_text))) {
        errf(model, "export-hf maps Mixtral-shaped models only: its numbers do not make a valid Mixtral (above)");
        free(src);
        goto done;
    }
    if (!same_graph(mc.graph, rc_comp.graph, why, sizeof why)) {
        errf(model, "export-hf maps Mixtral-shaped models only (the structure import-hf writes, as in "
             "models/mixtral_tiny.moe): %s", why);
        free(src);
        goto done;
    }
    uint64_t hash = hash64(src, src_len);
    free(src);

    char err[1024];
    if (!ckpt_open(&ck, ckpt, err, sizeof err)) {
        fprintf(stderr, "moec: error: %s\n", err);
        goto done;
    }
    const char *mh = ck.model_hash;
    char want[17];
    ckpt_hash_text(hash, want);
    if (!mh || strcmp(mh, want) != 0)
        warnf(ckpt, "written for another version of %s (model hash %s, the file's is %s); exporting it, since "
              "every tensor's shape is checked", model, mh ? mh : "none", want);
    params_plan(&pl, &c);
    for (int i = 0; i < pl.n; i++) {
        Param *p = &pl.p[i];
        char nm[128];
        snprintf(nm, sizeof nm, "%s%s", ckpt_prefix[CKPT_PARAM], p->name);
        const SafeTensor *x = st_find(&ck.st, nm);
        int ok = x && x->dtype == ST_F32 && x->rank == p->rank;
        for (int d = 0; ok && d < p->rank; d++)
            ok = x->shape[d] == p->shape[d];
        if (!ok) {
            char have[96] = "", wantsh[96];
            shape_text(wantsh, sizeof wantsh, p->rank, p->shape);
            if (x)
                shape_text(have, sizeof have, x->rank, x->shape);
            errf(ckpt, "tensor %s is %s%s%s; %s needs F32 %s", nm, x ? st_dtype_name(x->dtype) : "missing",
                 x ? " " : "", have, model, wantsh);
            goto done;
        }
        memcpy(p->data, x->data, p->n * 4);
    }

    struct stat sb;
    if (stat(out, &sb) != 0) {
        if (mkdir(out, 0777) != 0) {
            fprintf(stderr, "moec: error: cannot create '%s': %s\n", out, strerror(errno));
            goto done;
        }
    } else if (!S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "moec: error: '%s' exists and is not a folder\n", out);
        goto done;
    }
    /* model.safetensors */
    int cap = pl.n + (int)(c.layers * c.experts * 3) + 8;
    keep = calloc((size_t)cap, sizeof *keep);
    names = calloc((size_t)cap, sizeof *names);
    if (!keep || !names)
        die("out of memory");
    for (int i = 0; i < pl.n; i++) {
        Param *p = &pl.p[i];
        char hf[192];
        if (hf_name(p->name, hf, sizeof hf)) {
            names[nnames] = xstrdup(hf);
            add_f32_or_bf16(&w, names[nnames++], p->rank, p->shape, p->data, p->n, bf16, keep, &nkeep);
            continue;
        }
        long long li;
        char what[32];
        if (sscanf(p->name, "layers.%lld.moe.%31s", &li, what) != 2)
            die("unmapped parameter %s", p->name);
        const char *pre = per_expert ? "block_sparse_moe" : "mlp";
        if (strcmp(what, "router") == 0) {
            snprintf(hf, sizeof hf, "model.layers.%lld.%s.gate.weight", li, pre);
            names[nnames] = xstrdup(hf);
            add_f32_or_bf16(&w, names[nnames++], 2, p->shape, p->data, p->n, bf16, keep, &nkeep);
        } else if (!per_expert) {
            snprintf(hf, sizeof hf, "model.layers.%lld.mlp.experts.%s", li,
                     strcmp(what, "w_gate_up") == 0 ? "gate_up_proj" : "down_proj");
            names[nnames] = xstrdup(hf);
            add_f32_or_bf16(&w, names[nnames++], 3, p->shape, p->data, p->n, bf16, keep, &nkeep);
        } else {
            int64_t F = c.ffn, H = c.hidden;
            int gate_up = strcmp(what, "w_gate_up") == 0;
            for (int64_t e = 0; e < c.experts; e++)
                for (int part = 0; part < (gate_up ? 2 : 1); part++) {
                    int64_t shape[2] = {gate_up ? F : H, gate_up ? H : F};
                    const float *d = p->data + e * 2 * F * H * gate_up + e * H * F * !gate_up + part * F * H;
                    snprintf(hf, sizeof hf, "model.layers.%lld.block_sparse_moe.experts.%lld.%s.weight", li,
                             (long long)e, gate_up ? (part ? "w3" : "w1") : "w2");
                    names[nnames] = xstrdup(hf);
                    add_f32_or_bf16(&w, names[nnames++], 2, shape, d, (size_t)(F * H), bf16, keep, &nkeep);
                }
        }
    }
    st_writer_set_metadata(&w, "format", "pt");
    st_path = join(out, "model.safetensors");
    if (!st_writer_save(&w, st_path, err, sizeof err)) {
        fprintf(stderr, "moec: error: %s\n", err);
        goto done;
    }
    /* config.json, one key per line as transformers writes it */
    /* transformers 5 validates types strictly: a float field must not read as an int */
    char eps[40], theta[40], stdv[40], aux[40];
    json_float(eps, sizeof eps, c.eps);
    json_float(theta, sizeof theta, c.theta);
    json_float(stdv, sizeof stdv, c.init_std);
    json_float(aux, sizeof aux, c.aux_coef);
    char json[4096];
    int jn = snprintf(json, sizeof json,
        "{\n"
        "  \"architectures\": [\"MixtralForCausalLM\"],\n"
        "  \"model_type\": \"mixtral\",\n"
        "  \"vocab_size\": %lld,\n"
        "  \"hidden_size\": %lld,\n"
        "  \"intermediate_size\": %lld,\n"
        "  \"num_hidden_layers\": %lld,\n"
        "  \"num_attention_heads\": %lld,\n"
        "  \"num_key_value_heads\": %lld,\n"
        "  \"head_dim\": %lld,\n"
        "  \"num_local_experts\": %lld,\n"
        "  \"num_experts_per_tok\": %lld,\n"
        "  \"hidden_act\": \"silu\",\n"
        "  \"rms_norm_eps\": %s,\n"
        "  \"rope_theta\": %s,\n"
        "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": %s},\n"
        "  \"max_position_embeddings\": %lld,\n"
        "  \"sliding_window\": null,\n"
        "  \"tie_word_embeddings\": %s,\n"
        "  \"initializer_range\": %s,\n"
        "  \"router_aux_loss_coef\": %s,\n"
        "  \"output_router_logits\": false,\n"
        "  \"router_jitter_noise\": 0.0,\n"
        "  \"attention_dropout\": 0.0,\n"
        "  \"use_cache\": true,\n"
        "  \"dtype\": \"%s\"\n"
        "}\n",
        (long long)c.vocab, (long long)c.hidden, (long long)c.ffn, (long long)c.layers, (long long)c.heads,
        (long long)c.kv_heads, (long long)c.head_dim, (long long)c.experts, (long long)c.top_k, eps, theta, theta,
        (long long)c.max_pos, c.tie ? "true" : "false", stdv, aux, bf16 ? "bfloat16" : "float32");
    if (jn < 0 || (size_t)jn >= sizeof json)
        die("config.json too long");
    cfg_path = join(out, "config.json");
    size_t jl = (size_t)jn;
    int wok = write_text(cfg_path, json, jl);
    if (!wok)
        goto done;
    printf("%s: wrote %s and %s (MixtralForCausalLM: %lld layers, hidden %lld, %lld experts top-%lld, vocab "
           "%lld; %s, %s experts)\n", ckpt, cfg_path, st_path, (long long)c.layers, (long long)c.hidden,
           (long long)c.experts, (long long)c.top_k, (long long)c.vocab, bf16 ? "BF16" : "F32",
           per_expert ? "per-expert" : "fused");
    rc = 0;
done:
    for (int i = 0; i < nkeep; i++)
        free(keep[i]);
    free(keep);
    for (int i = 0; i < nnames; i++)
        free(names[i]);
    free(names);
    st_writer_free(&w);
    ckpt_close(&ck);
    params_free(&pl);
    free(ref_text);
    free(cfg_path);
    free(st_path);
    compilation_free(&mc);
    compilation_free(&rc_comp);
    return rc;
}
