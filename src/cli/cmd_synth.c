/* hearth synth: random-weight models in HF layout at the real shapes of
 * public models, deterministic from the seed (for benchmarks and tests). */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/file.h"
#include "io/safetensors.h"
#include "model/convert.h"
#include "model/weights.h"
#include "sample/rng.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct shape {
    const char *name, *model_type;
    int vocab, hidden, layers, heads, kv_heads, head_dim, ff, max_pos;
    double rope_theta, eps;
    const char *extra; /* more config.json fields, as a JSON object */
} shape;

static const shape shapes[] = {
    {"llama-3.2-1b", "llama", 128256, 2048, 16, 32, 8, 64, 8192, 131072, 500000, 1e-5,
     "{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0, \"low_freq_factor\": 1.0,"
     " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192},"
     " \"tie_word_embeddings\": true, \"hidden_act\": \"silu\", \"bos_token_id\": 128000,"
     " \"eos_token_id\": [128001, 128008, 128009]}"},
    {"llama-3.1-8b", "llama", 128256, 4096, 32, 32, 8, 128, 14336, 131072, 500000, 1e-5,
     "{\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0,"
     " \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192},"
     " \"tie_word_embeddings\": false, \"hidden_act\": \"silu\", \"bos_token_id\": 128000,"
     " \"eos_token_id\": [128001, 128008, 128009]}"},
    {"qwen3-8b", "qwen3", 151936, 4096, 36, 32, 8, 128, 12288, 40960, 1000000, 1e-6,
     "{\"tie_word_embeddings\": false, \"hidden_act\": \"silu\", \"eos_token_id\": 151645}"},
    {"qwen3-0.6b", "qwen3", 151936, 1024, 28, 16, 8, 128, 3072, 40960, 1000000, 1e-6,
     "{\"tie_word_embeddings\": true, \"hidden_act\": \"silu\", \"eos_token_id\": 151645}"},
    {"smollm2-135m", "llama", 49152, 576, 30, 9, 3, 64, 1536, 8192, 100000, 1e-5,
     "{\"tie_word_embeddings\": true, \"hidden_act\": \"silu\", \"eos_token_id\": 2}"},
    {"gemma-3-1b", "gemma3_text", 262144, 1152, 26, 4, 1, 256, 6912, 32768, 1000000, 1e-6,
     "{\"sliding_window\": 512, \"sliding_window_pattern\": 6, \"rope_local_base_freq\": 10000.0,"
     " \"query_pre_attn_scalar\": 256, \"hidden_activation\": \"gelu_pytorch_tanh\","
     " \"tie_word_embeddings\": true, \"eos_token_id\": [1, 106],"
     " \"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
     " \"sliding_attention\", \"sliding_attention\", \"full_attention\", \"sliding_attention\","
     " \"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
     " \"full_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
     " \"sliding_attention\", \"sliding_attention\", \"full_attention\", \"sliding_attention\","
     " \"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
     " \"full_attention\", \"sliding_attention\", \"sliding_attention\"]}"},
    {"tiny-llama", "llama", 512, 64, 2, 4, 2, 16, 128, 4096, 10000, 1e-5,
     "{\"tie_word_embeddings\": false, \"hidden_act\": \"silu\", \"eos_token_id\": 2}"},
    /* mixture of experts: num_experts, num_experts_per_tok and
     * moe_intermediate_size in extra make mlp.experts.* and the router */
    {"qwen3-30b-a3b", "qwen3_moe", 151936, 2048, 48, 32, 4, 128, 6144, 40960, 1000000, 1e-6,
     "{\"tie_word_embeddings\": false, \"hidden_act\": \"silu\", \"eos_token_id\": 151645,"
     " \"num_experts\": 128, \"num_experts_per_tok\": 8, \"moe_intermediate_size\": 768,"
     " \"norm_topk_prob\": true, \"decoder_sparse_step\": 1, \"mlp_only_layers\": []}"},
    /* qwen3-30b-a3b scaled to fit a 24 GB machine in f32 (4.8 GB of
     * experts): the same widths, head layout and k, 8 layers, 32 experts */
    {"qwen3-moe-mini", "qwen3_moe", 151936, 2048, 8, 32, 4, 128, 6144, 40960, 1000000, 1e-6,
     "{\"tie_word_embeddings\": false, \"hidden_act\": \"silu\", \"eos_token_id\": 151645,"
     " \"num_experts\": 32, \"num_experts_per_tok\": 8, \"moe_intermediate_size\": 768,"
     " \"norm_topk_prob\": true, \"decoder_sparse_step\": 1, \"mlp_only_layers\": []}"},
    /* for tests: rows of whole 256-wide blocks (Q4_K), 1.4M weights; and
     * 54M weights (the bounded-memory check of writing one tensor at a time) */
    {"tiny-qwen3-moe", "qwen3_moe", 512, 256, 2, 4, 2, 64, 512, 4096, 1000000, 1e-6,
     "{\"tie_word_embeddings\": false, \"hidden_act\": \"silu\", \"eos_token_id\": 2,"
     " \"num_experts\": 8, \"num_experts_per_tok\": 2, \"moe_intermediate_size\": 256,"
     " \"norm_topk_prob\": true, \"decoder_sparse_step\": 1, \"mlp_only_layers\": []}"},
    {"small-qwen3-moe", "qwen3_moe", 4096, 512, 4, 8, 2, 64, 1024, 4096, 1000000, 1e-6,
     "{\"tie_word_embeddings\": false, \"hidden_act\": \"silu\", \"eos_token_id\": 2,"
     " \"num_experts\": 16, \"num_experts_per_tok\": 4, \"moe_intermediate_size\": 512,"
     " \"norm_topk_prob\": true, \"decoder_sparse_step\": 1, \"mlp_only_layers\": []}"},
};

/* ---- tensors --------------------------------------------------------------- */

/* The tensors are declared first (name, dtype, shape) and their values made
 * on demand, each from its own random stream (the seed and the tensor's
 * name): any one can be made alone, in any order, so a model larger than
 * memory or disk in bf16 is written tensor by tensor (lazy weights,
 * model/weights.h) straight into its output format. */
typedef struct spec {
    float center, std;
} spec;

typedef struct tensor_list {
    hr_tensor *t;
    spec *sp;
    size_t n, cap;
    uint64_t seed;
} tensor_list;

static int add(tensor_list *l, const char *name, hr_dtype dt, int64_t d0, int64_t d1,
               float center, float std) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        hr_tensor *g = realloc(l->t, cap * sizeof *g);
        if (g)
            l->t = g;
        spec *sp = g ? realloc(l->sp, cap * sizeof *sp) : NULL;
        if (!sp)
            return HR_ENOMEM;
        l->sp = sp;
        l->cap = cap;
    }
    char *nm = strdup(name);
    if (!nm)
        return HR_ENOMEM;
    size_t numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    l->t[l->n] = (hr_tensor){.name = nm, .dtype = dt, .ndim = d1 ? 2 : 1, .shape = {d0, d1},
                             .nbytes = numel * hr_dtype_size(dt)};
    l->sp[l->n++] = (spec){center, std};
    return 0;
}

/* tensor i's values into dst (hr_weights_gen_fn, hr_st_fill_fn): uniform
 * with the spec's std, cheap and deterministic */
static int gen(void *ctx, size_t i, void *dst, hr_error *err) {
    (void)err;
    const tensor_list *l = ctx;
    const hr_tensor *t = &l->t[i];
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the name */
    for (const char *c = t->name; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    hr_rng rng;
    hr_rng_seed(&rng, l->seed ^ h);
    size_t numel = t->nbytes / hr_dtype_size(t->dtype);
    float c = l->sp[i].center, a = l->sp[i].std * sqrtf(3.0f);
    for (size_t k = 0; k < numel; k++) {
        float u = (float)(hr_rng_next(&rng) >> 40) * (1.0f / 16777216.0f);
        float v = c + (2.0f * u - 1.0f) * a;
        if (t->dtype == HR_DTYPE_F32)
            ((float *)dst)[k] = v;
        else
            ((uint16_t *)dst)[k] = hr_f32_to_bf16(v);
    }
    return 0;
}

static void list_free(tensor_list *l) {
    for (size_t i = 0; i < l->n; i++)
        free((void *)l->t[i].name);
    free(l->t);
    free(l->sp);
}

static int build(const shape *s, hr_dtype dt, tensor_list *l) {
    bool gemma = !strncmp(s->model_type, "gemma", 5);
    float nc = gemma ? 0.0f : 1.0f; /* gemma norms store w - 1 */
    int64_t d = s->hidden, qd = (int64_t)s->heads * s->head_dim,
            kvd = (int64_t)s->kv_heads * s->head_dim;
    float ws = 1.0f / sqrtf((float)d), fs = 1.0f / sqrtf((float)s->ff);
    char nm[128];
    /* experts, from the shape's config fields */
    json_t *ex = json_loads(s->extra, 0, NULL);
    int n_exp = (int)json_integer_value(json_object_get(ex, "num_experts"));
    int64_t moe_ff = json_integer_value(json_object_get(ex, "moe_intermediate_size"));
    json_decref(ex);
    int rc = add(l, "model.embed_tokens.weight", dt, s->vocab, d, 0, 1.0f);
    for (int i = 0; !rc && i < s->layers; i++) {
#define T(suffix, d0, d1, c, sd)                                                  \
    if (!rc) {                                                                    \
        snprintf(nm, sizeof nm, "model.layers.%d." suffix, i);                    \
        rc = add(l, nm, dt, d0, d1, c, sd);                                       \
    }
        T("input_layernorm.weight", d, 0, nc, 0.02f)
        T("post_attention_layernorm.weight", d, 0, nc, 0.02f)
        if (gemma) {
            T("pre_feedforward_layernorm.weight", d, 0, nc, 0.02f)
            T("post_feedforward_layernorm.weight", d, 0, nc, 0.02f)
        }
        T("self_attn.q_proj.weight", qd, d, 0, ws)
        T("self_attn.k_proj.weight", kvd, d, 0, ws)
        T("self_attn.v_proj.weight", kvd, d, 0, ws)
        T("self_attn.o_proj.weight", d, qd, 0, ws)
        if (!strcmp(s->model_type, "qwen3") || !strcmp(s->model_type, "qwen3_moe") ||
            !strcmp(s->model_type, "gemma3_text")) {
            T("self_attn.q_norm.weight", s->head_dim, 0, nc, 0.02f)
            T("self_attn.k_norm.weight", s->head_dim, 0, nc, 0.02f)
        }
        if (n_exp) {
            T("mlp.gate.weight", n_exp, d, 0, ws)
            for (int e = 0; !rc && e < n_exp; e++) {
                char en[96];
#define E(part, d0, d1, sd)                                                       \
    if (!rc) {                                                                    \
        snprintf(en, sizeof en, "model.layers.%d.mlp.experts.%d." part, i, e);    \
        rc = add(l, en, dt, d0, d1, 0, sd);                                       \
    }
                E("gate_proj.weight", moe_ff, d, ws)
                E("up_proj.weight", moe_ff, d, ws)
                E("down_proj.weight", d, moe_ff, 1.0f / sqrtf((float)moe_ff))
#undef E
            }
        } else {
            T("mlp.gate_proj.weight", s->ff, d, 0, ws)
            T("mlp.up_proj.weight", s->ff, d, 0, ws)
            T("mlp.down_proj.weight", d, s->ff, 0, fs)
        }
#undef T
    }
    if (!rc)
        rc = add(l, "model.norm.weight", dt, d, 0, nc, 0.02f);
    const char *tie = strstr(s->extra, "\"tie_word_embeddings\": false");
    if (!rc && tie)
        rc = add(l, "lm_head.weight", dt, s->vocab, d, 0, ws);
    return rc;
}

/* config.json of shape s (caller json_decref's it), NULL when out of memory */
static json_t *make_config(const shape *s, hr_dtype dt) {
    json_t *c = json_loads(s->extra, 0, NULL);
    if (!c)
        return NULL;
    json_t *arch = json_array();
    const char *cls = !strcmp(s->model_type, "qwen3")         ? "Qwen3ForCausalLM"
                      : !strcmp(s->model_type, "qwen3_moe")   ? "Qwen3MoeForCausalLM"
                      : !strcmp(s->model_type, "gemma3_text") ? "Gemma3ForCausalLM"
                                                              : "LlamaForCausalLM";
    json_array_append_new(arch, json_string(cls));
    json_object_set_new(c, "architectures", arch);
    json_object_set_new(c, "model_type", json_string(s->model_type));
    json_object_set_new(c, "vocab_size", json_integer(s->vocab));
    json_object_set_new(c, "hidden_size", json_integer(s->hidden));
    json_object_set_new(c, "num_hidden_layers", json_integer(s->layers));
    json_object_set_new(c, "num_attention_heads", json_integer(s->heads));
    json_object_set_new(c, "num_key_value_heads", json_integer(s->kv_heads));
    json_object_set_new(c, "head_dim", json_integer(s->head_dim));
    json_object_set_new(c, "intermediate_size", json_integer(s->ff));
    json_object_set_new(c, "max_position_embeddings", json_integer(s->max_pos));
    json_object_set_new(c, "rope_theta", json_real(s->rope_theta));
    json_object_set_new(c, "rms_norm_eps", json_real(s->eps));
    json_object_set_new(c, "torch_dtype", json_string(dt == HR_DTYPE_F32 ? "float32" : "bfloat16"));
    return c;
}

static int mkdir_p(const char *dir, hr_error *err) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return hr_err(err, HR_ERANGE, "%s: path too long", dir);
    for (char *p = buf + 1; ; p++) {
        bool end = *p == 0;
        if (*p == '/' || end) {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST)
                return hr_err(err, HR_EIO, "%s: %s", buf, strerror(errno));
            if (end)
                return 0;
            *p = '/';
        }
    }
}

/* shape s as an HF directory: model.safetensors and config.json */
static int write_hf(const shape *s, hr_dtype dt, tensor_list *l, json_t *cfg, const char *out,
                    hr_error *err) {
    char path[4096];
    const char *meta[] = {"format", "pt"};
    int rc = mkdir_p(out, err);
    if (!rc && hr_path_join(path, sizeof path, out, "model.safetensors"))
        rc = hr_err(err, HR_ERANGE, "%s: path too long", out);
    if (!rc)
        rc = hr_st_write_fill(path, l->t, l->n, meta, 1, gen, l, err);
    char *text = rc ? NULL : json_dumps(cfg, JSON_INDENT(2) | JSON_SORT_KEYS);
    if (!rc && !text)
        rc = hr_err(err, HR_ENOMEM, "out of memory");
    if (!rc && hr_path_join(path, sizeof path, out, "config.json"))
        rc = hr_err(err, HR_ERANGE, "%s: path too long", out);
    if (!rc)
        rc = hr_file_write_atomic(path, text, strlen(text), err);
    free(text);
    if (!rc)
        printf("wrote %s (%s, %s) to %s\n", s->name, s->model_type, hr_dtype_name(dt), out);
    return rc;
}

static const char usage[] =
    "usage: hearth synth --shape NAME --out DIR [--dtype bf16|f32] [--seed N]\n"
    "                    [--gguf TYPE | -q [--q-bits N] [--q-group-size N]]\n"
    "       hearth synth --shape list\n"
    "  --gguf TYPE      write one GGUF file (--out FILE) with matrices of this type,\n"
    "                   as hearth convert --gguf would from the --dtype weights\n"
    "  -q               an MLX affine quantized directory, as hearth convert -q would";

int hr_cmd_synth(int argc, char **argv) {
    const char *shape_name = NULL, *out = NULL, *dtype = "bf16", *gguf = NULL;
    long seed = 0, bits = 0, group = 64;
    int quantize = 0;
    const hr_opt opts[] = {
        {"shape", HR_OPT_STR, &shape_name, "model shape, or 'list'"},
        {"out", HR_OPT_STR, &out, "output directory (created; a file with --gguf)"},
        {"dtype", HR_OPT_STR, &dtype, "bf16 (default) or f32: the weights' values"},
        {"seed", HR_OPT_INT, &seed, "random seed (default 0)"},
        {"gguf", HR_OPT_STR, &gguf, "write a GGUF file with matrices of this type"},
        {"quantize", HR_OPT_FLAG, &quantize, "same as -q"},
        {"q-bits", HR_OPT_INT, &bits, "bits per weight with -q: 2, 3, 4, 5, 6, 8 (default 4; "
                                      "implies -q)"},
        {"q-group-size", HR_OPT_INT, &group, "group size with -q: 32, 64, 128 (default 64)"},
    };
    char **av = malloc((size_t)(argc + 1) * sizeof *av);
    if (!av)
        return hr_cli_fail(&(hr_error){.msg = "out of memory"});
    for (int i = 0; i < argc; i++) /* the short flag */
        av[i] = !strcmp(argv[i], "-q") ? "--quantize" : argv[i];
    hr_error err = {0};
    int rc = hr_args_parse(argc, av, opts, sizeof opts / sizeof opts[0], usage, &err);
    free(av);
    if (rc)
        return rc > 0 ? 0 : hr_cli_fail(&err);
    size_t n_shapes = sizeof shapes / sizeof shapes[0];
    if (shape_name && !strcmp(shape_name, "list")) {
        for (size_t i = 0; i < n_shapes; i++)
            printf("%s\n", shapes[i].name);
        return 0;
    }
    if (!shape_name || !out)
        return hr_cli_fail(&(hr_error){.msg = "--shape and --out are required (see --help)"});
    const shape *s = NULL;
    for (size_t i = 0; i < n_shapes; i++)
        if (!strcmp(shapes[i].name, shape_name))
            s = &shapes[i];
    if (!s) {
        hr_err(&err, HR_EINVAL, "unknown shape '%s' (see --shape list)", shape_name);
        return hr_cli_fail(&err);
    }
    hr_dtype dt;
    if (!strcmp(dtype, "bf16"))
        dt = HR_DTYPE_BF16;
    else if (!strcmp(dtype, "f32"))
        dt = HR_DTYPE_F32;
    else
        return hr_cli_fail(&(hr_error){.msg = "--dtype must be bf16 or f32"});
    quantize = quantize || bits;
    int gt = HR_DTYPE_COUNT;
    bool km = false;
    if (gguf && quantize)
        return hr_cli_fail(&(hr_error){.msg = "-q writes MLX affine weights; --gguf takes its "
                                              "own type"});
    if (gguf && hr_cli_gguf_type(gguf, &gt, &km, &err))
        return hr_cli_fail(&err);
    tensor_list l = {.seed = (uint64_t)seed};
    json_t *cfg = NULL;
    hr_weights *w = NULL;
    if ((rc = build(s, dt, &l)) || !(cfg = make_config(s, dt))) {
        rc = hr_err(&err, HR_ENOMEM, "out of memory building %s", s->name);
    } else if (!gguf && !quantize) {
        rc = write_hf(s, dt, &l, cfg, out, &err);
    } else if (!(rc = hr_weights_new_lazy(&w, l.t, l.n, gen, &l, &err))) {
        /* straight into the format, as hearth convert would write it from
         * the HF directory, one tensor made at a time */
        hr_convert_opts o = {.out = out, .quantize = quantize, .bits = bits ? (int)bits : 4,
                             .group = (int)group, .dtype = HR_DTYPE_COUNT,
                             .gguf = (hr_dtype)gt, .gguf_km = km, .report = stdout};
        rc = hr_convert_weights(&o, cfg, w, &err);
        if (!rc && quantize)
            printf("wrote %s (%s, MLX %d-bit, group %d) to %s\n", s->name, s->model_type,
                   o.bits, o.group, out);
    }
    hr_weights_close(w);
    json_decref(cfg);
    list_free(&l);
    return rc ? hr_cli_fail(&err) : 0;
}
