/* hearth synth: random-weight models in HF layout at the real shapes of
 * public models, deterministic from the seed (for benchmarks and tests). */
#include "cli/args.h"
#include "cli/cli.h"
#include "core/error.h"
#include "core/file.h"
#include "io/safetensors.h"
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
};

/* ---- tensors --------------------------------------------------------------- */

typedef struct tensor_list {
    hr_tensor *t;
    size_t n, cap;
} tensor_list;

static int add(tensor_list *l, hr_rng *rng, const char *name, hr_dtype dt,
               int64_t d0, int64_t d1, float center, float std) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        hr_tensor *g = realloc(l->t, cap * sizeof *g);
        if (!g)
            return HR_ENOMEM;
        l->t = g;
        l->cap = cap;
    }
    size_t numel = (size_t)d0 * (size_t)(d1 ? d1 : 1), esz = hr_dtype_size(dt);
    void *data = malloc(numel * esz);
    char *nm = strdup(name);
    if (!data || !nm) {
        free(data);
        free(nm);
        return HR_ENOMEM;
    }
    /* uniform with the given std: cheap and deterministic */
    float a = std * sqrtf(3.0f);
    for (size_t i = 0; i < numel; i++) {
        float u = (float)(hr_rng_next(rng) >> 40) * (1.0f / 16777216.0f);
        float v = center + (2.0f * u - 1.0f) * a;
        if (dt == HR_DTYPE_F32)
            ((float *)data)[i] = v;
        else
            ((uint16_t *)data)[i] = hr_f32_to_bf16(v);
    }
    hr_tensor *t = &l->t[l->n++];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->dtype = dt;
    t->ndim = d1 ? 2 : 1;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->data = data;
    t->nbytes = numel * esz;
    return 0;
}

static void list_free(tensor_list *l) {
    for (size_t i = 0; i < l->n; i++) {
        free((void *)l->t[i].name);
        free((void *)l->t[i].data);
    }
    free(l->t);
}

static int build(const shape *s, hr_dtype dt, uint64_t seed, tensor_list *l) {
    hr_rng rng;
    hr_rng_seed(&rng, seed);
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
    int rc = add(l, &rng, "model.embed_tokens.weight", dt, s->vocab, d, 0, 1.0f);
    for (int i = 0; !rc && i < s->layers; i++) {
#define T(suffix, d0, d1, c, sd)                                                  \
    if (!rc) {                                                                    \
        snprintf(nm, sizeof nm, "model.layers.%d." suffix, i);                    \
        rc = add(l, &rng, nm, dt, d0, d1, c, sd);                                 \
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
        rc = add(l, &rng, en, dt, d0, d1, 0, sd);                                 \
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
        rc = add(l, &rng, "model.norm.weight", dt, d, 0, nc, 0.02f);
    const char *tie = strstr(s->extra, "\"tie_word_embeddings\": false");
    if (!rc && tie)
        rc = add(l, &rng, "lm_head.weight", dt, s->vocab, d, 0, ws);
    return rc;
}

static int write_config(const shape *s, const char *dir, hr_dtype dt, hr_error *err) {
    json_error_t je;
    json_t *c = json_loads(s->extra, 0, &je);
    if (!c)
        return hr_err(err, HR_EINVAL, "shape %s: bad built-in config: %s", s->name, je.text);
    json_t *arch = json_array();
    char cls[64];
    snprintf(cls, sizeof cls, "%s",
             !strcmp(s->model_type, "qwen3") ? "Qwen3ForCausalLM"
             : !strcmp(s->model_type, "gemma3_text") ? "Gemma3ForCausalLM"
                                                     : "LlamaForCausalLM");
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
    char *text = json_dumps(c, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(c);
    if (!text)
        return hr_err(err, HR_ENOMEM, "out of memory");
    char path[4096];
    int rc = hr_path_join(path, sizeof path, dir, "config.json")
                 ? hr_err(err, HR_ERANGE, "%s: path too long", dir)
                 : hr_file_write_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

static const char usage[] =
    "usage: hearth synth --shape NAME --out DIR [--dtype bf16|f32] [--seed N]\n"
    "       hearth synth --shape list";

int hr_cmd_synth(int argc, char **argv) {
    const char *shape_name = NULL, *out = NULL, *dtype = "bf16";
    long seed = 0;
    const hr_opt opts[] = {
        {"shape", HR_OPT_STR, &shape_name, "model shape, or 'list'"},
        {"out", HR_OPT_STR, &out, "output directory (created)"},
        {"dtype", HR_OPT_STR, &dtype, "bf16 (default) or f32"},
        {"seed", HR_OPT_INT, &seed, "random seed (default 0)"},
    };
    hr_error err = {0};
    int rc = hr_args_parse(argc, argv, opts, sizeof opts / sizeof opts[0], usage, &err);
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
    char dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", out);
    for (char *p = dirbuf + 1; ; p++) { /* mkdir -p */
        bool end = *p == 0;
        if (*p == '/' || end) {
            *p = 0;
            if (mkdir(dirbuf, 0755) != 0 && errno != EEXIST) {
                hr_err(&err, HR_EIO, "%s: %s", dirbuf, strerror(errno));
                return hr_cli_fail(&err);
            }
            if (end)
                break;
            *p = '/';
        }
    }
    tensor_list l = {0};
    if ((rc = build(s, dt, (uint64_t)seed, &l))) {
        list_free(&l);
        hr_err(&err, rc, "out of memory building %s", s->name);
        return hr_cli_fail(&err);
    }
    char path[4096];
    const char *meta[] = {"format", "pt"};
    if (hr_path_join(path, sizeof path, out, "model.safetensors"))
        rc = hr_err(&err, HR_ERANGE, "%s: path too long", out);
    else
        rc = hr_st_write(path, l.t, l.n, meta, 1, &err);
    list_free(&l);
    if (!rc)
        rc = write_config(s, out, dt, &err);
    if (rc)
        return hr_cli_fail(&err);
    printf("wrote %s (%s, %s) to %s\n", s->name, s->model_type, hr_dtype_name(dt), out);
    return 0;
}
