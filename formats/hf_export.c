/* hf_export.c - `moec export-hf MODEL.moe CKPT -o DIR`: a moec checkpoint of
 * a Mixtral-shaped model -> config.json and model.safetensors that
 * MixtralForCausalLM.from_pretrained loads. It reads the numbers off the
 * model's IR, writes the model text of that shape again (hf.c), lowers it
 * and compares the two graphs node by node, so that only a model that *is*
 * that shape is exported, whatever its file looks like. */
#include "hf.h"
#include "hf_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../data/data.h"
#include "../driver/compile.h"
#include "../util/util.h"
#include "checkpoint.h"
#include "safetensors.h"

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
/* JSON string of a token (the alphabets' tokens need no escapes but '"' and '\\' are handled) */
static void json_token(char *b, size_t n, const char *tok)
{
    size_t o = 0;
    if (n < 4)
        die("json_token: no room");
    b[o++] = '"';
    for (; *tok && o + 3 < n; tok++) {
        if (*tok == '"' || *tok == '\\')
            b[o++] = '\\';
        b[o++] = *tok;
    }
    b[o++] = '"';
    b[o] = '\0';
}

/* vocab.txt (a token per line, in id order), tokenizer_config.json and special_tokens_map.json: the files
 * transformers' EsmTokenizer reads. It splits a sequence into the vocabulary's tokens and adds the BOS
 * (ESM's cls) and EOS, as moec's records are. Characters outside the alphabet become its unknown token
 * (X, N), as moec's reader makes them; upper case only. */
/* tokenizer.json, the `tokenizers` library's serialization, which transformers 5's AutoTokenizer needs (it
 * found no converter for EsmTokenizer's vocab.txt alone: "Couldn't instantiate the backend tokenizer", H200
 * machine, transformers 5.17): a word-level model over the alphabet, every character its own piece, the
 * unknown token for anything else, and a post-processor adding BOS and EOS; the special tokens as added
 * tokens so they are never split. */
static int write_tokenizer_json(const char *dir, const Alphabet *al)
{
    size_t cap = 8192, len = 0;
    char *s = malloc(cap);
    if (!s)
        die("out of memory");
#define TJ_PUT(...)                                                                                                    \
    do {                                                                                                               \
        int n_ = snprintf(s + len, cap - len, __VA_ARGS__);                                                            \
        while (n_ >= 0 && (size_t)n_ >= cap - len) {                                                                   \
            if (!(s = realloc(s, cap *= 2)))                                                                           \
                die("out of memory");                                                                                  \
            n_ = snprintf(s + len, cap - len, __VA_ARGS__);                                                            \
        }                                                                                                              \
        len += (size_t)n_;                                                                                             \
    } while (0)
    char t[64], bos[64], eos[64], unk[64];
    json_token(bos, sizeof bos, al->tokens[al->bos]);
    json_token(eos, sizeof eos, al->tokens[al->eos]);
    json_token(unk, sizeof unk, al->tokens[al->unk]);
    TJ_PUT("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [");
    int specials[4] = {al->bos, al->eos, al->pad, al->mask}, first = 1;
    for (int i = 0; i < al->vocab; i++) {
        int special = i == al->unk;
        for (int k = 0; k < 4; k++)
            special |= specials[k] == i;
        if (!special)
            continue;
        json_token(t, sizeof t, al->tokens[i]);
        TJ_PUT("%s\n    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
               "\"normalized\": false, \"special\": true}",
               first ? "" : ",", i, t);
        first = 0;
    }
    TJ_PUT("\n  ],\n  \"normalizer\": null,\n"
           "  \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \".\"}, \"behavior\": \"Isolated\", "
           "\"invert\": false},\n"
           "  \"post_processor\": {\"type\": \"TemplateProcessing\",\n"
           "    \"single\": [{\"SpecialToken\": {\"id\": %s, \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
           "{\"SpecialToken\": {\"id\": %s, \"type_id\": 0}}],\n"
           "    \"pair\": [{\"SpecialToken\": {\"id\": %s, \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
           "{\"SpecialToken\": {\"id\": %s, \"type_id\": 0}}, {\"Sequence\": {\"id\": \"B\", \"type_id\": 1}}, "
           "{\"SpecialToken\": {\"id\": %s, \"type_id\": 1}}],\n"
           "    \"special_tokens\": {%s: {\"id\": %s, \"ids\": [%d], \"tokens\": [%s]}, %s: {\"id\": %s, \"ids\": [%d], "
           "\"tokens\": [%s]}}},\n"
           "  \"decoder\": null,\n  \"model\": {\"type\": \"WordLevel\", \"unk_token\": %s, \"vocab\": {",
           bos, eos, bos, eos, eos, bos, bos, al->bos, bos, eos, eos, al->eos, eos, unk);
    for (int i = 0; i < al->vocab; i++) {
        json_token(t, sizeof t, al->tokens[i]);
        TJ_PUT("%s%s: %d", i ? ", " : "", t, i);
    }
    TJ_PUT("}}\n}\n");
#undef TJ_PUT
    char *p = hf_join(dir, "tokenizer.json");
    int ok = hf_write_text(p, s, len);
    free(p);
    free(s);
    return ok;
}

static int write_tokenizer(const char *dir, const Alphabet *al, int64_t max_pos)
{
    size_t cap = 4096, len = 0;
    char *v = malloc(cap);
    if (!v)
        die("out of memory");
    for (int i = 0; i < al->vocab; i++) {
        size_t k = strlen(al->tokens[i]);
        if (len + k + 2 > cap && !(v = realloc(v, cap *= 2)))
            die("out of memory");
        memcpy(v + len, al->tokens[i], k);
        len += k;
        v[len++] = '\n';
    }
    char bos[64], eos[64], pad[64], mask[64], unk[64], specials[1024], cfg[2048];
    json_token(bos, sizeof bos, al->tokens[al->bos]);
    json_token(eos, sizeof eos, al->tokens[al->eos]);
    json_token(pad, sizeof pad, al->tokens[al->pad]);
    json_token(mask, sizeof mask, al->tokens[al->mask]);
    json_token(unk, sizeof unk, al->tokens[al->unk]);
    int sn = snprintf(specials, sizeof specials,
                      "  \"bos_token\": %s,\n  \"cls_token\": %s,\n  \"eos_token\": %s,\n  \"pad_token\": %s,\n"
                      "  \"mask_token\": %s,\n  \"unk_token\": %s", bos, bos, eos, pad, mask, unk);
    int cn = snprintf(cfg, sizeof cfg,
                      "{\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\",\n%s,\n  \"model_max_length\": %lld,\n"
                      "  \"clean_up_tokenization_spaces\": false,\n  \"moec_alphabet\": \"%s\"\n}\n",
                      specials, (long long)max_pos, al->name);
    if (sn < 0 || (size_t)sn >= sizeof specials || cn < 0 || (size_t)cn >= sizeof cfg)
        die("tokenizer config too long");
    char map[1100];
    int mn = snprintf(map, sizeof map, "{\n%s\n}\n", specials);
    if (mn < 0 || (size_t)mn >= sizeof map)
        die("special tokens map too long");
    char *pv = hf_join(dir, "vocab.txt"), *pc = hf_join(dir, "tokenizer_config.json"),
         *pm = hf_join(dir, "special_tokens_map.json");
    int ok = hf_write_text(pv, v, len) && hf_write_text(pc, cfg, (size_t)cn) && hf_write_text(pm, map, (size_t)mn) &&
             write_tokenizer_json(dir, al);
    free(pv);
    free(pc);
    free(pm);
    free(v);
    return ok;
}

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
                return hf_usage_error("export-hf", "--dtype: '%s' is not one of f32, bf16", v);
            bf16 = strcmp(v, "bf16") == 0;
        } else if (strcmp(a, "--layout") == 0 && has_val) {
            const char *v = argv[++i];
            if (strcmp(v, "fused") != 0 && strcmp(v, "per-expert") != 0)
                return hf_usage_error("export-hf", "--layout: '%s' is not one of fused, per-expert", v);
            per_expert = strcmp(v, "per-expert") == 0;
        } else if (a[0] == '-' && a[1]) {
            static const char *const known[] = {"-o", "--dtype", "--layout", "--help", NULL};
            return hf_unknown_option("export-hf", a, known);
        } else if (!model) {
            model = a;
        } else if (!ckpt) {
            ckpt = a;
        } else {
            return hf_usage_error("export-hf", "a model file and a checkpoint, not more ('%s')", a);
        }
    }
    if (!model || !ckpt)
        return hf_usage_error("export-hf", "give a model file and a checkpoint: moec export-hf MODEL.moe CKPT -o DIR%s",
                              "");
    if (!out)
        return hf_usage_error("export-hf", "export-hf needs -o DIR, the folder to write%s", "");

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
    if (!hf_lower_text(&mc, model, src, src_len)) {
        free(src);
        goto done;
    }
    if (!derive_config(mc.graph, &c, why, sizeof why)) {
        hf_errf(model, "export-hf maps Mixtral-shaped models only (the structure import-hf writes, as in "
                "models/mixtral_tiny.moe): %s", why);
        free(src);
        goto done;
    }
    /* B is one rank's share of the batch: the regenerated text has one rank */
    const IrTrain *tr = &mc.graph->train;
    TrainOpts t = {tr->seq, tr->batch / (tr->ep * tr->dp), 1000, 3e-4, "bf16", tr->aux_loss_coef};
    ref_text = hf_model_text(&c, mc.graph->model, &t);
    if (!hf_lower_text(&rc_comp, "(the Mixtral structure)", ref_text, strlen(ref_text))) {
        hf_errf(model, "export-hf maps Mixtral-shaped models only: its numbers do not make a valid Mixtral (above)");
        free(src);
        goto done;
    }
    if (!same_graph(mc.graph, rc_comp.graph, why, sizeof why)) {
        hf_errf(model, "export-hf maps Mixtral-shaped models only (the structure import-hf writes, as in "
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
        hf_warnf(ckpt, "written for another version of %s (model hash %s, the file's is %s); exporting it, since "
                 "every tensor's shape is checked", model, mh ? mh : "none", want);
    hf_params_plan(&pl, &c);
    if (!hf_params_alloc(&pl, ckpt))
        goto done;
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
            hf_shape_text(wantsh, sizeof wantsh, p->rank, p->shape);
            if (x)
                hf_shape_text(have, sizeof have, x->rank, x->shape);
            hf_errf(ckpt, "tensor %s is %s%s%s; %s needs F32 %s", nm, x ? st_dtype_name(x->dtype) : "missing",
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
    st_path = hf_join(out, "model.safetensors");
    cfg_path = hf_join(out, "config.json");
    /* an output over an input would destroy what it was made from */
    for (int o = 0; o < 2; o++) {
        const char *op = o ? cfg_path : st_path;
        const char *in = same_file(op, model) ? model : same_file(op, ckpt) ? ckpt : NULL;
        if (in) {
            hf_errf(op, "is %s, an input of this export: export to another folder", in);
            goto done;
        }
    }
    if (!st_writer_save(&w, st_path, err, sizeof err)) {
        fprintf(stderr, "moec: error: %s\n", err);
        goto done;
    }
    /* the alphabet the model was trained in: its special tokens' ids in config.json, and a tokenizer */
    const Alphabet *al = mc.graph->train.alphabet == IR_ALPHABET_PROTEIN ? alphabet_get(ALPHABET_PROTEIN)
                         : mc.graph->train.alphabet == IR_ALPHABET_DNA ? alphabet_get(ALPHABET_DNA) : NULL;
    if (al && al->vocab != c.vocab)
        al = NULL;
    char ids[256] = "";
    if (al)
        snprintf(ids, sizeof ids,
                 "  \"bos_token_id\": %d,\n  \"eos_token_id\": %d,\n  \"pad_token_id\": %d,\n  \"mask_token_id\": %d,\n",
                 al->bos, al->eos, al->pad, al->mask);
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
        "%s"
        "  \"dtype\": \"%s\"\n"
        "}\n",
        (long long)c.vocab, (long long)c.hidden, (long long)c.ffn, (long long)c.layers, (long long)c.heads,
        (long long)c.kv_heads, (long long)c.head_dim, (long long)c.experts, (long long)c.top_k, eps, theta, theta,
        (long long)c.max_pos, c.tie ? "true" : "false", stdv, aux, ids, bf16 ? "bfloat16" : "float32");
    if (jn < 0 || (size_t)jn >= sizeof json)
        die("config.json too long");
    size_t jl = (size_t)jn;
    int wok = hf_write_text(cfg_path, json, jl);
    if (!wok || (al && !write_tokenizer(out, al, c.max_pos)))
        goto done;
    printf("%s: wrote %s and %s (MixtralForCausalLM: %lld layers, hidden %lld, %lld experts top-%lld, vocab "
           "%lld; %s, %s experts)\n", ckpt, cfg_path, st_path, (long long)c.layers, (long long)c.hidden,
           (long long)c.experts, (long long)c.top_k, (long long)c.vocab, bf16 ? "BF16" : "F32",
           per_expert ? "per-expert" : "fused");
    if (al)
        printf("%s: wrote the %s tokenizer: tokenizer.json, vocab.txt, tokenizer_config.json, special_tokens_map.json "
               "(bos %d, eos %d, pad %d, mask %d, as in config.json)\n", out, al->name, al->bos, al->eos, al->pad,
               al->mask);
    else
        printf("%s: no tokenizer written: the model's train section names no alphabet of %lld tokens\n", out,
               (long long)c.vocab);
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
    hf_params_free(&pl);
    free(ref_text);
    free(cfg_path);
    free(st_path);
    compilation_free(&mc);
    compilation_free(&rc_comp);
    return rc;
}
