/* hf_import.c - `moec import-hf DIR -o MODEL.moe`: a Hugging Face
 * MixtralForCausalLM folder (config.json and, when present, its safetensors
 * weights) -> a .moe model file of the one Mixtral shape and a moec
 * checkpoint that `TRAIN --init` accepts. The mapping is hf.c's. */
#include "hf.h"
#include "hf_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../driver/compile.h"
#include "../util/util.h"
#include "checkpoint.h"

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
                return hf_usage_error("import-hf",
                                      "--name: '%s' is not a model name (letters, digits, _; not a keyword)", name);
        } else if ((strcmp(a, "--seq") == 0 || strcmp(a, "--batch") == 0) && has_val) {
            int64_t v;
            if (!parse_i64_in(argv[++i], 1, 1 << 24, &v))
                return hf_usage_error("import-hf",
                                      "expected a whole number from 1 to 16777216 after this flag, got '%s'", argv[i]);
            *(a[2] == 's' ? &t.seq : &t.batch) = v;
        } else if (strcmp(a, "--steps") == 0 && has_val) {
            if (!parse_i64_in(argv[++i], 0, (int64_t)1 << 40, &t.steps))
                return hf_usage_error("import-hf", "--steps: expected a whole number, got '%s'", argv[i]);
        } else if (strcmp(a, "--lr") == 0 && has_val) {
            char *end;
            t.lr = strtod(argv[++i], &end);
            if (*end || end == argv[i] || !(t.lr > 0 && t.lr <= 1e9))
                return hf_usage_error("import-hf", "--lr: expected a positive number, got '%s'", argv[i]);
        } else if (strcmp(a, "--precision") == 0 && has_val) {
            t.precision = argv[++i];
            if (strcmp(t.precision, "bf16") != 0 && strcmp(t.precision, "mxfp8") != 0)
                return hf_usage_error("import-hf", "--precision: '%s' is not one of bf16, mxfp8", t.precision);
        } else if (a[0] == '-' && a[1]) {
            static const char *const known[] = {"-o",      "--ckpt", "--name",      "--seq",  "--batch",
                                                "--steps", "--lr",   "--precision", "--help", NULL};
            return hf_unknown_option("import-hf", a, known);
        } else if (!dir) {
            dir = a;
        } else {
            return hf_usage_error("import-hf", "one folder, not more ('%s')", a);
        }
    }
    if (!dir)
        return hf_usage_error("import-hf", "give the folder of a Hugging Face model (with config.json)%s", "");
    if (!out)
        return hf_usage_error("import-hf", "import-hf needs -o MODEL.moe, the model file to write%s", "");
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "moec: error: '%s' is not a folder: give the folder that holds config.json\n", dir);
        return 1;
    }
    char *cfg_path = hf_join(dir, "config.json");
    if (!hf_file_exists(cfg_path)) {
        hf_errf(cfg_path, "no such file: a Hugging Face model folder has config.json");
        free(cfg_path);
        return 1;
    }
    HfConfig c;
    memset(&c, 0, sizeof c);
    if (!hf_read_config(cfg_path, &t.seq, &c)) {
        free(cfg_path);
        return 1;
    }
    char nbuf[96];
    if (name)
        snprintf(nbuf, sizeof nbuf, "%s", name);
    else
        name_from_path(nbuf, sizeof nbuf, out);
    char *text = hf_model_text(&c, nbuf, &t);
    size_t len = strlen(text);
    /* the text must lower: a config moec cannot express is refused here */
    Compilation comp;
    int rc = 1;
    HfWeights w = {0};
    ParamList pl = {0};
    char *ckpt_buf = NULL;
    if (!hf_lower_text(&comp, out, text, len)) {
        fprintf(stderr, "%s: error: the model file made from this config does not lower (above)\n", cfg_path);
        goto done;
    }
    int have = hf_weights_open(&w, dir);
    if (have == 0)
        goto done;
    const char *layout = NULL;
    if (have == 1) {
        hf_params_plan(&pl, &c);
        if (!hf_params_read(&pl, &c, &w, dir, &layout) || !hf_params_alloc(&pl, dir) ||
            !hf_params_read(&pl, &c, &w, dir, &layout))
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
    /* an output over an input would destroy what it was made from */
    {
        char *index = hf_join(dir, "model.safetensors.index.json");
        const char *outs[2] = {out, have == 1 ? ckpt : NULL};
        int clash = 0;
        for (int o = 0; o < 2 && !clash; o++) {
            const char *in = same_file(outs[o], cfg_path) ? cfg_path : same_file(outs[o], index) ? index : NULL;
            for (int i = 0; !in && i < w.nfiles; i++)
                if (same_file(outs[o], w.paths[i]))
                    in = w.paths[i];
            if (in)
                clash = !hf_errf(outs[o], "is %s, an input of this import: write the %s elsewhere", in,
                                 o ? "checkpoint" : "model file");
        }
        free(index);
        if (clash)
            goto done;
    }
    if (!hf_write_text(out, text, len))
        goto done;
    if (have == 1 && !save_checkpoint(&pl, nbuf, text, len, ckpt, "moec import-hf"))
        goto done;
    printf("%s: wrote %s (model %s: %lld layers, hidden %lld, %lld experts top-%lld, vocab %lld, alphabet %s)\n",
           dir, out, nbuf, (long long)c.layers, (long long)c.hidden, (long long)c.experts, (long long)c.top_k,
           (long long)c.vocab, hf_alphabet_for(c.vocab));
    if (have == 1)
        printf("%s: wrote %s (%d parameter tensors from %d safetensors file%s, expert layout %s); train from it "
               "with --init %s\n", dir, ckpt, pl.n, w.nfiles, w.nfiles == 1 ? "" : "s", layout, ckpt);
    else
        printf("%s: no weights (model.safetensors or model.safetensors.index.json): wrote the model file only\n",
               dir);
    if (strcmp(hf_alphabet_for(c.vocab), "none") == 0)
        printf("%s: note: vocab_size %lld is neither the protein alphabet's 33 nor dna's 9 tokens: the model "
               "checks and compiles, but its training binary has no FASTA alphabet to read\n", dir,
               (long long)c.vocab);
    rc = 0;
done:
    compilation_free(&comp);
    hf_params_free(&pl);
    hf_weights_free(&w);
    free(ckpt_buf);
    free(text);
    free(cfg_path);
    return rc;
}
