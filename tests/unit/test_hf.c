/* test_hf.c - the number conversions of formats/hf.c, and a writer of
 * small Hugging Face Mixtral folders for the lit tests in tests/hf/.
 *
 *   test_hf                  unit checks (run by tests/run.sh)
 *   test_hf fixture DIR [--layout fused|per-expert] [--dtype f32|bf16|f16] [--shards N]
 *                       [--no-weights] [--tie] [--v4-rope] [--drop NAME] [--extra NAME]
 *       writes DIR/config.json (one key per line, for sed) and random weights. Every
 *       weight is k/256 (|k| <= 48) or 1 + k/64 (norms), exact in F32, BF16 and F16,
 *       drawn in the same order for every layout and dtype: all variants of one
 *       fixture hold the same numbers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../formats/hf.h"
#include "../../formats/safetensors.h"

static int failures, checks;

#define CHECK(cond)                                                         \
    do {                                                                    \
        checks++;                                                           \
        if (!(cond)) {                                                      \
            failures++;                                                     \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                   \
    } while (0)

static void unit_tests(void)
{
    CHECK(hf_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(hf_bf16_to_f32(0xc000) == -2.0f);
    CHECK(hf_f16_to_f32(0x3c00) == 1.0f);
    CHECK(hf_f16_to_f32(0xc000) == -2.0f);
    CHECK(hf_f16_to_f32(0x3800) == 0.5f);
    CHECK(hf_f16_to_f32(0x0001) == ldexpf(1.0f, -24));   /* smallest subnormal */
    CHECK(hf_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24)); /* largest subnormal */
    CHECK(hf_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(isinf(hf_f16_to_f32(0x7c00)) && hf_f16_to_f32(0xfc00) < 0);
    CHECK(isnan(hf_f16_to_f32(0x7e00)));
    CHECK(signbit(hf_f16_to_f32(0x8000)) && hf_f16_to_f32(0x8000) == 0);
    /* round to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7 */
    CHECK(hf_f32_to_bf16(1.0f + ldexpf(1.0f, -8)) == 0x3f80);
    CHECK(hf_f32_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)) == 0x3f82);
    CHECK(hf_f32_to_bf16(1.0f + ldexpf(1.0f, -8) + ldexpf(1.0f, -20)) == 0x3f81);
    CHECK(hf_f32_to_bf16(-2.0f) == 0xc000);
    CHECK(isnan(hf_bf16_to_f32(hf_f32_to_bf16(NAN))));
    for (int i = -1000; i <= 1000; i++) {
        float f = (float)i / 7.0f;
        float r = hf_bf16_to_f32(hf_f32_to_bf16(f));
        CHECK(fabsf(r - f) <= fabsf(f) * ldexpf(1.0f, -8));
    }
    static const double v[] = {1e-5, 1e-6, 1e6, 10000, 0.02, 3e-4, 0.1 + 0.2, 1.0 / 3, 5e-324, 1.7976931348623157e308};
    char buf[64];
    for (int i = 0; i < (int)(sizeof v / sizeof v[0]); i++) {
        hf_format_double(buf, sizeof buf, v[i]);
        CHECK(strtod(buf, NULL) == v[i]);
    }
    hf_format_double(buf, sizeof buf, 1e-5);
    CHECK(strcmp(buf, "1e-05") == 0);
    hf_format_double(buf, sizeof buf, 1e6);
    CHECK(strcmp(buf, "1e+06") == 0);
    hf_format_double(buf, sizeof buf, 0.02);
    CHECK(strcmp(buf, "0.02") == 0);
}

/* ------------------------------------------------------------ the fixture */

enum { V = 33, H = 32, F = 64, L = 2, NH = 4, NKV = 2, HD = 8, E = 4, TOPK = 2 };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int next_k(int range)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)(2 * range + 1)) - range;
}

typedef struct T {
    char name[128];
    int rank;
    int64_t shape[3];
    float *f;
    size_t n;
} T;

static T tensors[512];
static int ntensors;

static T *tensor(const char *name, int rank, int64_t a, int64_t b, int64_t c, int norm)
{
    T *t = &tensors[ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rank = rank;
    int64_t d[3] = {a, b, c};
    t->n = 1;
    for (int i = 0; i < rank; i++) {
        t->shape[i] = d[i];
        t->n *= (size_t)d[i];
    }
    t->f = malloc(t->n * sizeof(float));
    for (size_t i = 0; i < t->n; i++)  /* norm 2: filled by the caller, no draw */
        t->f[i] = norm == 2 ? 0.0f : norm ? 1.0f + (float)next_k(8) / 64.0f : (float)next_k(48) / 256.0f;
    return t;
}

static uint16_t to_f16(float f)
{
    /* exact for the fixture's values: normal numbers with few mantissa bits */
    if (f == 0)
        return 0;
    uint16_t s = f < 0 ? 0x8000 : 0;
    int e;
    float m = frexpf(fabsf(f), &e);   /* f = m * 2^e, m in [0.5, 1) */
    uint16_t man = (uint16_t)((m * 2 - 1) * 1024 + 0.5f);
    return (uint16_t)(s | (uint16_t)((e - 1 + 15) << 10) | man);
}

static int fixture(int argc, char **argv)
{
    const char *dir = argv[2], *dtype = "f32", *drop = NULL, *extra = NULL;
    int per_expert = 0, shards = 1, weights = 1, tie = 0, v4 = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--layout") == 0 && i + 1 < argc)
            per_expert = strcmp(argv[++i], "per-expert") == 0;
        else if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc)
            dtype = argv[++i];
        else if (strcmp(argv[i], "--shards") == 0 && i + 1 < argc)
            shards = atoi(argv[++i]);
        else if (strcmp(argv[i], "--drop") == 0 && i + 1 < argc)
            drop = argv[++i];
        else if (strcmp(argv[i], "--extra") == 0 && i + 1 < argc)
            extra = argv[++i];
        else if (strcmp(argv[i], "--no-weights") == 0)
            weights = 0;
        else if (strcmp(argv[i], "--tie") == 0)
            tie = 1;
        else if (strcmp(argv[i], "--v4-rope") == 0)
            v4 = 1;
        else {
            fprintf(stderr, "test_hf fixture: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    mkdir(dir, 0777);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        return 1;
    }
    fprintf(f, "{\n"
               "  \"architectures\": [\"MixtralForCausalLM\"],\n"
               "  \"model_type\": \"mixtral\",\n"
               "  \"vocab_size\": %d,\n"
               "  \"hidden_size\": %d,\n"
               "  \"intermediate_size\": %d,\n"
               "  \"num_hidden_layers\": %d,\n"
               "  \"num_attention_heads\": %d,\n"
               "  \"num_key_value_heads\": %d,\n"
               "  \"head_dim\": null,\n"
               "  \"num_local_experts\": %d,\n"
               "  \"num_experts_per_tok\": %d,\n"
               "  \"hidden_act\": \"silu\",\n"
               "  \"rms_norm_eps\": 1e-05,\n",
            V, H, F, L, NH, NKV, E, TOPK);
    if (v4)
        fprintf(f, "  \"rope_theta\": 1000000.0,\n");
    else
        fprintf(f, "  \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0},\n");
    fprintf(f, "  \"max_position_embeddings\": 4096,\n"
               "  \"sliding_window\": null,\n"
               "  \"tie_word_embeddings\": %s,\n"
               "  \"initializer_range\": 0.02,\n"
               "  \"router_aux_loss_coef\": 0.02,\n"
               "  \"dtype\": \"float32\"\n"
               "}\n", tie ? "true" : "false");
    fclose(f);
    if (!weights)
        return 0;
    /* the numbers, in one order for every layout */
    tensor("model.embed_tokens.weight", 2, V, H, 0, 0);
    tensor("model.norm.weight", 1, H, 0, 0, 1);
    if (!tie)
        tensor("lm_head.weight", 2, V, H, 0, 0);
    for (int l = 0; l < L; l++) {
        char nm[128];
#define N(fmt) (snprintf(nm, sizeof nm, "model.layers.%d." fmt, l), nm)
        tensor(N("input_layernorm.weight"), 1, H, 0, 0, 1);
        tensor(N("self_attn.q_proj.weight"), 2, NH * HD, H, 0, 0);
        tensor(N("self_attn.k_proj.weight"), 2, NKV * HD, H, 0, 0);
        tensor(N("self_attn.v_proj.weight"), 2, NKV * HD, H, 0, 0);
        tensor(N("self_attn.o_proj.weight"), 2, H, NH * HD, 0, 0);
        tensor(N("post_attention_layernorm.weight"), 1, H, 0, 0, 1);
        T *gate = tensor(N("block_sparse_moe.gate.weight"), 2, E, H, 0, 0);
        T *w[E][3];
        for (int e = 0; e < E; e++)
            for (int j = 0; j < 3; j++) {
                char en[128];
                snprintf(en, sizeof en, "model.layers.%d.block_sparse_moe.experts.%d.w%d.weight", l, e, j + 1);
                w[e][j] = tensor(en, 2, j == 1 ? H : F, j == 1 ? F : H, 0, 0);
            }
        if (!per_expert) {  /* transformers 5: fused, gate (w1) rows then up (w3) rows */
            snprintf(gate->name, sizeof gate->name, "model.layers.%d.mlp.gate.weight", l);
            T *gu = tensor(N("mlp.experts.gate_up_proj"), 3, E, 2 * F, H, 2);
            T *dn = tensor(N("mlp.experts.down_proj"), 3, E, H, F, 2);
            for (int e = 0; e < E; e++) {
                memcpy(gu->f + (size_t)e * 2 * F * H, w[e][0]->f, sizeof(float) * F * H);
                memcpy(gu->f + (size_t)e * 2 * F * H + F * H, w[e][2]->f, sizeof(float) * F * H);
                memcpy(dn->f + (size_t)e * H * F, w[e][1]->f, sizeof(float) * H * F);
                for (int j = 0; j < 3; j++)
                    w[e][j]->name[0] = 0;  /* not written */
            }
        }
#undef N
    }
    if (extra)
        tensor(extra, 1, 4, 0, 0, 2);
    SafeTensorsWriter wr[16];
    if (shards < 1 || shards > 16)
        shards = 1;
    for (int s = 0; s < shards; s++)
        st_writer_init(&wr[s]);
    void *keep[512];
    int nkeep = 0, k = 0;
    char index[1 << 16];
    size_t io = (size_t)snprintf(index, sizeof index, "{\n  \"metadata\": {},\n  \"weight_map\": {\n");
    for (int i = 0; i < ntensors; i++) {
        T *t = &tensors[i];
        if (!t->name[0] || (drop && strcmp(t->name, drop) == 0))
            continue;
        int s = k++ % shards;
        if (strcmp(dtype, "f32") == 0) {
            st_writer_add(&wr[s], t->name, ST_F32, t->rank, t->shape, t->f, t->n * 4);
        } else {
            uint16_t *h = malloc(t->n * 2);
            for (size_t j = 0; j < t->n; j++)
                h[j] = strcmp(dtype, "bf16") == 0 ? hf_f32_to_bf16(t->f[j]) : to_f16(t->f[j]);
            keep[nkeep++] = h;
            st_writer_add(&wr[s], t->name, strcmp(dtype, "bf16") == 0 ? ST_BF16 : ST_F16, t->rank, t->shape, h,
                          t->n * 2);
        }
        io += (size_t)snprintf(index + io, sizeof index - io, "%s    \"%s\": \"model-%05d-of-%05d.safetensors\"",
                               k > 1 ? ",\n" : "", t->name, s + 1, shards);
    }
    snprintf(index + io, sizeof index - io, "\n  }\n}\n");
    char err[1024];
    for (int s = 0; s < shards; s++) {
        st_writer_set_metadata(&wr[s], "format", "pt");
        if (shards == 1)
            snprintf(path, sizeof path, "%s/model.safetensors", dir);
        else
            snprintf(path, sizeof path, "%s/model-%05d-of-%05d.safetensors", dir, s + 1, shards);
        if (!st_writer_save(&wr[s], path, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        st_writer_free(&wr[s]);
    }
    if (shards > 1) {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        f = fopen(path, "w");
        fputs(index, f);
        fclose(f);
    }
    for (int i = 0; i < nkeep; i++)
        free(keep[i]);
    for (int i = 0; i < ntensors; i++)
        free(tensors[i].f);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "fixture") == 0)
        return fixture(argc, argv);
    unit_tests();
    printf("test_hf: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
