/* GGUF <-> Hugging Face: metadata, names, llama's q/k permutation, gemma's
 * norms and the values llama.cpp derives for gemma. */
#include "model/gguf_model.h"
#include "core/error.h"
#include "io/gguf_write.h"
#include "core/log.h"
#include "kernels/cpu/quant.h"
#include "model/config.h"
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- architectures and names --------------------------------------------- */

typedef enum family {
    FAM_LLAMA, FAM_QWEN, FAM_GEMMA, FAM_GEMMA2, FAM_GEMMA3, FAM_GPTOSS,
    FAM_QNEXT, FAM_GLM4MOE, FAM_GRANITE, FAM_GRANITEH, /* gguf_hybrid.c */
} family;

static const struct { const char *gguf, *model_type; family fam; } ARCHS[] = {
    {"llama", "llama", FAM_LLAMA},   {"qwen2", "qwen2", FAM_QWEN},
    {"qwen3", "qwen3", FAM_QWEN},    {"gemma", "gemma", FAM_GEMMA},
    {"gemma2", "gemma2", FAM_GEMMA2}, {"gemma3", "gemma3_text", FAM_GEMMA3},
    /* mixture of experts (gguf_moe.c); mixtral is llama with experts */
    {"qwen3moe", "qwen3_moe", FAM_QWEN}, {"qwen2moe", "qwen2_moe", FAM_QWEN},
    {"olmoe", "olmoe", FAM_QWEN}, {"gpt-oss", "gpt_oss", FAM_GPTOSS}, /* gguf_gptoss.c */
    /* gguf_hybrid.c */
    {"qwen3next", "qwen3_next", FAM_QNEXT}, {"glm4moe", "glm4_moe", FAM_GLM4MOE},
    {"granitemoe", "granitemoe", FAM_GRANITE}, {"granitehybrid", "granitemoehybrid", FAM_GRANITEH},
};
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* The ARCHS row of a GGUF architecture name (len bytes), or -1. */
static int arch_index(const char *a, size_t len) {
    for (size_t i = 0; i < COUNT(ARCHS); i++)
        if (strlen(ARCHS[i].gguf) == len && !memcmp(a, ARCHS[i].gguf, len))
            return (int)i;
    return -1;
}

/* gemma2/3 have four norms per layer ("sandwich"): llama.cpp's ffn_norm is
 * the norm before the MLP, which Hugging Face calls post_attention_layernorm
 * in llama's layout but pre_feedforward_layernorm in this one. */
static bool sandwich(family f) {
    return f == FAM_GEMMA2 || f == FAM_GEMMA3;
}

static bool is_gemma(family f) {
    return f == FAM_GEMMA || sandwich(f);
}

/* Which families a LAYER_NAMES row is for (bits of family). Stacked
 * experts are [E, out, in] tensors under switch_mlp (mlx-lm's name);
 * mixtral (GGUF arch llama) keeps its experts under block_sparse_moe, the
 * granite families theirs and their router there too; the other MoE
 * families under mlp. Names that are not the hub's (qwen3next's
 * in_proj_qkv / in_proj_z, the A of ssm_a, granite's stacked and shared
 * experts split) are what the hub's tensors become on the way
 * (gguf_hybrid.c), and what the binder takes from a GGUF. */
#define F(f) (1u << (f))
#define ALL (~0u)
#define LLAMA_NORM (F(FAM_LLAMA) | F(FAM_QWEN) | F(FAM_GEMMA) | F(FAM_GRANITE) | F(FAM_GRANITEH))
#define POST_NORM (F(FAM_GPTOSS) | F(FAM_QNEXT) | F(FAM_GLM4MOE))
#define SANDWICH (F(FAM_GEMMA2) | F(FAM_GEMMA3))
#define MOE_MLP (F(FAM_QWEN) | F(FAM_QNEXT) | F(FAM_GLM4MOE))
#define GRANITES (F(FAM_GRANITE) | F(FAM_GRANITEH))
static const struct { const char *gguf, *hf; unsigned fams; } LAYER_NAMES[] = {
    /* gpt-oss: its own names first (both ways, the first match wins) */
    {"attn_sinks.weight", "self_attn.sinks", F(FAM_GPTOSS)},
    {"ffn_gate_inp.weight", "mlp.router.weight", F(FAM_GPTOSS)},
    {"ffn_gate_inp.bias", "mlp.router.bias", F(FAM_GPTOSS)},
    {"ffn_gate_exps.bias", "mlp.switch_mlp.gate_proj.bias", F(FAM_GPTOSS)},
    {"ffn_up_exps.bias", "mlp.switch_mlp.up_proj.bias", F(FAM_GPTOSS)},
    {"ffn_down_exps.bias", "mlp.switch_mlp.down_proj.bias", F(FAM_GPTOSS)},
    {"attn_norm.weight", "input_layernorm.weight", ALL},
    {"ffn_norm.weight", "post_attention_layernorm.weight", LLAMA_NORM},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", POST_NORM | SANDWICH},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight", SANDWICH},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight", SANDWICH},
    {"attn_q.weight", "self_attn.q_proj.weight", ALL},
    {"attn_k.weight", "self_attn.k_proj.weight", ALL},
    {"attn_v.weight", "self_attn.v_proj.weight", ALL},
    {"attn_output.weight", "self_attn.o_proj.weight", ALL},
    {"attn_q.bias", "self_attn.q_proj.bias", ALL},
    {"attn_k.bias", "self_attn.k_proj.bias", ALL},
    {"attn_v.bias", "self_attn.v_proj.bias", ALL},
    {"attn_output.bias", "self_attn.o_proj.bias", ALL},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", ALL},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", ALL},
    {"ffn_gate.weight", "mlp.gate_proj.weight", ALL},
    {"ffn_up.weight", "mlp.up_proj.weight", ALL},
    {"ffn_down.weight", "mlp.down_proj.weight", ALL},
    {"ffn_gate_inp.weight", "mlp.gate.weight", MOE_MLP},
    {"ffn_gate_exps.weight", "mlp.switch_mlp.gate_proj.weight", MOE_MLP | F(FAM_GPTOSS)},
    {"ffn_up_exps.weight", "mlp.switch_mlp.up_proj.weight", MOE_MLP | F(FAM_GPTOSS)},
    {"ffn_down_exps.weight", "mlp.switch_mlp.down_proj.weight", MOE_MLP | F(FAM_GPTOSS)},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", F(FAM_QWEN) | F(FAM_QNEXT)},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", F(FAM_QWEN) | F(FAM_QNEXT)},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", F(FAM_QWEN) | F(FAM_QNEXT)},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", F(FAM_QWEN) | F(FAM_QNEXT)},
    {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight", F(FAM_LLAMA)},
    {"ffn_gate_exps.weight", "block_sparse_moe.switch_mlp.gate_proj.weight", F(FAM_LLAMA) | GRANITES},
    {"ffn_up_exps.weight", "block_sparse_moe.switch_mlp.up_proj.weight", F(FAM_LLAMA) | GRANITES},
    {"ffn_down_exps.weight", "block_sparse_moe.switch_mlp.down_proj.weight", F(FAM_LLAMA) | GRANITES},
    /* glm4moe: the router's score bias, plain shared experts */
    {"exp_probs_b.bias", "mlp.gate.e_score_correction_bias", F(FAM_GLM4MOE)},
    {"ffn_gate_shexp.weight", "mlp.shared_experts.gate_proj.weight", F(FAM_GLM4MOE)},
    {"ffn_up_shexp.weight", "mlp.shared_experts.up_proj.weight", F(FAM_GLM4MOE)},
    {"ffn_down_shexp.weight", "mlp.shared_experts.down_proj.weight", F(FAM_GLM4MOE)},
    /* granitemoe, granitehybrid: router, shared_mlp split */
    {"ffn_gate_inp.weight", "block_sparse_moe.router.layer.weight", GRANITES},
    {"ffn_gate_shexp.weight", "shared_mlp.gate_proj.weight", GRANITES},
    {"ffn_up_shexp.weight", "shared_mlp.up_proj.weight", GRANITES},
    {"ffn_down_shexp.weight", "shared_mlp.output_linear.weight", GRANITES},
    /* granitehybrid's Mamba-2 mixers */
    {"ssm_in.weight", "mamba.in_proj.weight", F(FAM_GRANITEH)},
    {"ssm_conv1d.weight", "mamba.conv1d.weight", F(FAM_GRANITEH)},
    {"ssm_conv1d.bias", "mamba.conv1d.bias", F(FAM_GRANITEH)},
    {"ssm_dt.bias", "mamba.dt_bias", F(FAM_GRANITEH)},
    {"ssm_a", "mamba.A", F(FAM_GRANITEH)},
    {"ssm_d", "mamba.D", F(FAM_GRANITEH)},
    {"ssm_norm.weight", "mamba.norm.weight", F(FAM_GRANITEH)},
    {"ssm_out.weight", "mamba.out_proj.weight", F(FAM_GRANITEH)},
    /* qwen3next's gated DeltaNet layers */
    {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight", F(FAM_QNEXT)},
    {"attn_gate.weight", "linear_attn.in_proj_z.weight", F(FAM_QNEXT)},
    {"ssm_ba.weight", "linear_attn.in_proj_ba.weight", F(FAM_QNEXT)},
    {"ssm_conv1d.weight", "linear_attn.conv1d.weight", F(FAM_QNEXT)},
    {"ssm_dt.bias", "linear_attn.dt_bias", F(FAM_QNEXT)},
    {"ssm_a", "linear_attn.A", F(FAM_QNEXT)},
    {"ssm_norm.weight", "linear_attn.norm.weight", F(FAM_QNEXT)},
    {"ssm_out.weight", "linear_attn.out_proj.weight", F(FAM_QNEXT)},
};
static const struct { const char *gguf, *hf; } TOP_NAMES[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
    {"rope_freqs.weight", "rope_freqs.weight"},
};

/* from -> to between GGUF (to_hf) and Hugging Face names of family f. */
static const char *map_name(const char *from, bool to_hf, family f, char *buf, size_t n) {
    for (size_t i = 0; i < COUNT(TOP_NAMES); i++)
        if (!strcmp(from, to_hf ? TOP_NAMES[i].gguf : TOP_NAMES[i].hf)) {
            snprintf(buf, n, "%s", to_hf ? TOP_NAMES[i].hf : TOP_NAMES[i].gguf);
            return buf;
        }
    int layer, used = 0;
    if (sscanf(from, to_hf ? "blk.%d.%n" : "model.layers.%d.%n", &layer, &used) != 1 || !used)
        return NULL;
    for (size_t i = 0; i < COUNT(LAYER_NAMES); i++)
        if ((LAYER_NAMES[i].fams & F(f)) &&
            !strcmp(from + used, to_hf ? LAYER_NAMES[i].gguf : LAYER_NAMES[i].hf)) {
            snprintf(buf, n, to_hf ? "model.layers.%d.%s" : "blk.%d.%s", layer,
                     to_hf ? LAYER_NAMES[i].hf : LAYER_NAMES[i].gguf);
            return buf;
        }
    return NULL;
}

const char *hr_gguf_hf_name(const hr_gguf *g, const char *name, char *buf, size_t n) {
    const char *a;
    size_t alen;
    int ai = hr_gguf_key_str(g, "general.architecture", &a, &alen) ? -1 : arch_index(a, alen);
    return map_name(name, true, ai < 0 ? FAM_LLAMA : ARCHS[ai].fam, buf, n);
}

static const struct { uint32_t ggml; hr_dtype dt; } TYPES[] = {
    {0, HR_DTYPE_F32}, {1, HR_DTYPE_F16}, {30, HR_DTYPE_BF16}, {8, HR_DTYPE_Q8_0},
    {2, HR_DTYPE_Q4_0}, {3, HR_DTYPE_Q4_1}, {12, HR_DTYPE_Q4_K}, {13, HR_DTYPE_Q5_K},
    {14, HR_DTYPE_Q6_K}, {39, HR_DTYPE_MXFP4},
};

int hr_gguf_dtype(uint32_t t) {
    for (size_t i = 0; i < COUNT(TYPES); i++)
        if (TYPES[i].ggml == t)
            return (int)TYPES[i].dt;
    return -1;
}

static uint32_t ggml_type(hr_dtype t) {
    for (size_t i = 0; i < COUNT(TYPES); i++)
        if (TYPES[i].dt == t)
            return TYPES[i].ggml;
    return 0;
}

uint32_t hr__gguf_ggml_type(hr_dtype t) { return ggml_type(t); }

/* ---- metadata readers ------------------------------------------------------- */

typedef struct meta {
    const hr_gguf *g;
    const char *arch;
    json_t *cfg;
    hr_error *err;
    int rc;
} meta;

static bool get_num(meta *m, const char *suffix, double *v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", m->arch, suffix);
    int64_t i = hr_gguf_find(m->g, k);
    if (i < 0)
        return false;
    int64_t iv;
    if (!hr_gguf_get_int(m->g, i, &iv)) {
        *v = (double)iv;
        return true;
    }
    if (!hr_gguf_get_float(m->g, i, v))
        return true;
    if (!m->rc)
        m->rc = hr_err(m->err, HR_EFORMAT, "%s: key '%s' is not a number",
                       hr_gguf_path(m->g), k);
    return false;
}

/* A count or size: a number in [0, 2^30] (else an error). */
static bool get_count(meta *m, const char *suffix, double *v) {
    if (!get_num(m, suffix, v))
        return false;
    if (*v >= 0 && *v <= (1 << 30))
        return true;
    if (!m->rc)
        m->rc = hr_err(m->err, HR_EFORMAT, "%s: key '%s.%s' is out of range",
                       hr_gguf_path(m->g), m->arch, suffix);
    return false;
}

static void set_int(meta *m, const char *suffix, const char *field, bool required) {
    double v;
    if (get_count(m, suffix, &v))
        json_object_set_new(m->cfg, field, json_integer((json_int_t)v));
    else if (required && !m->rc)
        m->rc = hr_err(m->err, HR_EFORMAT, "%s: missing key '%s.%s'", hr_gguf_path(m->g),
                       m->arch, suffix);
}

static void set_real(meta *m, const char *suffix, const char *field) {
    double v;
    if (get_num(m, suffix, &v))
        json_object_set_new(m->cfg, field, json_real(v));
}

/* ---- gemma: what llama.cpp derives instead of reading ------------------------
 * (src/models/gemma*.cpp in llama.cpp) */

/* llama.cpp's hparams.set_swa_pattern(p): layer i slides when p == 0 or
 * i % p < p - 1 (p = 6: five sliding layers, then a global one). */
static bool swa_layer(int p, int i) {
    return p == 0 || i % p < p - 1;
}

/* The default sliding_window_pattern of gemma2 (2) and gemma3 (6). */
static int swa_default(family f) {
    return f == FAM_GEMMA2 ? 2 : 6;
}

/* gemma2/3's query_pre_attn_scalar as llama.cpp derives it: the file does
 * not carry it; llama.cpp scales q by 1/sqrt(n_embd / n_head) for the "27B"
 * models (gemma2: 46 layers, gemma3: 62) and by 1/sqrt(head_dim) otherwise,
 * after gemma_pytorch's configs. */
static int gemma_qpas(family f, int n_layers, int d_model, int n_heads, int head_dim) {
    bool big = (f == FAM_GEMMA2 && n_layers == 46) || (f == FAM_GEMMA3 && n_layers == 62);
    return big ? d_model / n_heads : head_dim;
}

static int cfg_int(const json_t *cfg, const char *key, int dflt) {
    const json_t *v = json_object_get(cfg, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

/* {arch}.attention.sliding_window_pattern: llama.cpp reads a scalar period
 * and ignores an array for gemma2/3. */
static int swa_pattern(meta *m, int dflt) {
    char k[128];
    snprintf(k, sizeof k, "%s.attention.sliding_window_pattern", m->arch);
    int64_t i = hr_gguf_find(m->g, k), v;
    if (i < 0 || hr_gguf_kv_type(m->g, i) == HR_GGUF_ARRAY)
        return dflt;
    if (hr_gguf_get_int(m->g, i, &v) || v < 0 || v > HR_MAX_LAYERS) {
        if (!m->rc)
            m->rc = hr_err(m->err, HR_EFORMAT, "%s: key '%s' is not a layer period",
                           hr_gguf_path(m->g), k);
        return dflt;
    }
    return (int)v;
}

/* Rope per layer type: full layers as the metadata says (rope_scaling, if
 * set above), sliding layers at rope.freq_base_swa (default swa_theta, or
 * the global base when < 0), scaled like the full layers when swa_scaled
 * (gemma2), unscaled otherwise (gemma3). */
static void gemma_rope(meta *m, double swa_theta, bool swa_scaled) {
    double theta = 10000;
    get_num(m, "rope.freq_base", &theta);
    if (swa_theta < 0)
        swa_theta = theta;
    get_num(m, "rope.freq_base_swa", &swa_theta);
    json_t *sc = json_object_get(m->cfg, "rope_scaling");
    json_t *full = sc ? json_deep_copy(sc) : json_pack("{s:s}", "rope_type", "default");
    json_t *local = swa_scaled ? json_deep_copy(full) : json_pack("{s:s}", "rope_type", "default");
    json_object_set_new(full, "rope_theta", json_real(theta));
    json_object_set_new(local, "rope_theta", json_real(swa_theta));
    json_object_del(m->cfg, "rope_scaling");
    json_object_set_new(m->cfg, "rope_parameters", json_pack("{s:o,s:o}", "full_attention", full,
                                                             "sliding_attention", local));
}

/* The config.json fields a gemma GGUF implies (after the common ones). */
static void gemma_config(meta *m, family f) {
    json_t *c = m->cfg;
    int nl = cfg_int(c, "num_hidden_layers", 0), d = cfg_int(c, "hidden_size", 0);
    int nh = cfg_int(c, "num_attention_heads", 1);
    int hd = cfg_int(c, "head_dim", nh > 0 ? d / nh : 0);
    json_object_set_new(c, "hidden_activation", json_string("gelu_pytorch_tanh"));
    if (f != FAM_GEMMA3) /* gemma, gemma2: token_embd is the output matrix */
        json_object_set_new(c, "tie_word_embeddings", json_true());
    if (f == FAM_GEMMA)
        return;
    if (nh > 0)
        json_object_set_new(c, "query_pre_attn_scalar",
                            json_integer(gemma_qpas(f, nl, d, nh, hd)));
    double v;
    if (f == FAM_GEMMA2) { /* always capped; llama_hparams' defaults */
        json_object_set_new(c, "attn_logit_softcapping",
                            json_real(get_num(m, "attn_logit_softcapping", &v) ? v : 50.0));
        json_object_set_new(c, "final_logit_softcapping",
                            json_real(get_num(m, "final_logit_softcapping", &v) ? v : 30.0));
    } else if (get_num(m, "final_logit_softcapping", &v) && v != 0) {
        json_object_set_new(c, "final_logit_softcapping", json_real(v));
    }
    /* sliding layers: gemma2 always (window 4096 unless given), gemma3 when
     * the file gives a window */
    double window = f == FAM_GEMMA2 ? 4096 : 0;
    get_count(m, "attention.sliding_window", &window);
    bool swa = f == FAM_GEMMA2 || window > 0;
    int period = swa ? swa_pattern(m, swa_default(f)) : 1;
    json_t *lt = json_array();
    for (int i = 0; i < nl && i < HR_MAX_LAYERS; i++)
        json_array_append_new(lt, json_string(swa && swa_layer(period, i) ? "sliding_attention"
                                                                          : "full_attention"));
    json_object_set_new(c, "layer_types", lt);
    if (swa) {
        json_object_set_new(c, "sliding_window", json_integer((json_int_t)window));
        gemma_rope(m, f == FAM_GEMMA2 ? -1 : 10000.0, f == FAM_GEMMA2);
    }
}

/* ---- metadata -> config ----------------------------------------------------- */

/* End-of-generation ids, as llama.cpp collects them (llama-vocab.cpp): the
 * eos, eot, eom and FIM pad/repo/sep ids of the metadata, then every token
 * whose text is one of its end-of-generation texts -- so an instruct model
 * stops at its end of turn (<end_of_turn>, <|im_end|>, <|eot_id|>) even
 * when the file's eos is another token. When "<|return|>" and "<|call|>"
 * (or "<|calls|>" and "<|flush|>") exist, "<|end|>" is not one (llama.cpp's
 * exception for those chat formats). */
static const char *const EOG_TEXT[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
    "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>",
    "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
    "<|tool_response>", "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", /* DeepSeek */
    "[e~[",
};

static void add_id(json_t *ids, int64_t v) {
    for (size_t i = 0; i < json_array_size(ids); i++)
        if (json_integer_value(json_array_get(ids, i)) == v)
            return;
    json_array_append_new(ids, json_integer(v));
}

static json_t *eog_ids(const hr_gguf *g) {
    json_t *ids = json_array();
    static const char *const keys[] = {
        "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
        "tokenizer.ggml.eom_token_id", "tokenizer.ggml.fim_pad_token_id",
        "tokenizer.ggml.fim_rep_token_id", "tokenizer.ggml.fim_sep_token_id"};
    int64_t v;
    for (size_t i = 0; i < COUNT(keys); i++)
        if (!hr_gguf_key_int(g, keys[i], &v) && v >= 0)
            add_id(ids, v);
    int64_t ti = hr_gguf_find(g, "tokenizer.ggml.tokens");
    hr_gguf_type et;
    uint64_t n = 0;
    if (ti < 0 || hr_gguf_get_arr(g, ti, &et, &n) || et != HR_GGUF_STRING)
        return ids;
    int64_t found[COUNT(EOG_TEXT)];
    for (size_t e = 0; e < COUNT(EOG_TEXT); e++)
        found[e] = -1;
    for (uint64_t j = 0; j < n; j++) {
        const char *s;
        size_t len;
        if (hr_gguf_arr_str(g, ti, j, &s, &len) || len < 3 || len > 32 ||
            (s[0] != '<' && s[0] != '[' && s[0] != '_'))
            continue;
        for (size_t e = 0; e < COUNT(EOG_TEXT); e++)
            if (found[e] < 0 && strlen(EOG_TEXT[e]) == len && !memcmp(s, EOG_TEXT[e], len))
                found[e] = (int64_t)j;
    }
    bool no_end = (found[3] >= 0 && found[4] >= 0) || (found[5] >= 0 && found[6] >= 0);
    for (size_t e = 0; e < COUNT(EOG_TEXT); e++)
        if (found[e] >= 0 && !(e == 2 && no_end))
            add_id(ids, found[e]);
    return ids;
}

int hr_gguf_config(const hr_gguf *g, json_t **out, bool *permuted_qk, hr_error *err) {
    *out = NULL;
    const char *a;
    size_t alen;
    if (hr_gguf_key_str(g, "general.architecture", &a, &alen))
        return hr_err(err, HR_EFORMAT, "%s: missing 'general.architecture'", hr_gguf_path(g));
    char arch[64];
    snprintf(arch, sizeof arch, "%.*s", (int)(alen < 63 ? alen : 63), a);
    int ai = arch_index(a, alen);
    if (ai < 0)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: GGUF architecture '%s' "
                      "(llama, qwen2, qwen3, qwen2moe, qwen3moe, olmoe, gpt-oss, gemma, "
                      "gemma2, gemma3, qwen3next, glm4moe, granitemoe, granitehybrid are)",
                      hr_gguf_path(g), arch);
    family fam = ARCHS[ai].fam;
    *permuted_qk = fam == FAM_LLAMA || fam == FAM_GRANITE || fam == FAM_GRANITEH;
    meta m = {g, arch, json_object(), err, 0};
    json_object_set_new(m.cfg, "model_type", json_string(ARCHS[ai].model_type));
    const hr_gguf_tensor *emb = hr_gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2) {
        json_decref(m.cfg);
        return hr_err(err, HR_EFORMAT, "%s: missing 2-D tensor 'token_embd.weight'",
                      hr_gguf_path(g));
    }
    json_object_set_new(m.cfg, "vocab_size", json_integer((json_int_t)emb->ne[1]));
    set_int(&m, "embedding_length", "hidden_size", true);
    set_int(&m, "block_count", "num_hidden_layers", true);
    set_int(&m, "feed_forward_length", "intermediate_size", true);
    set_int(&m, "attention.head_count", "num_attention_heads", true);
    char k[128];
    snprintf(k, sizeof k, "%s.attention.head_count_kv", arch);
    int64_t hkv = hr_gguf_find(g, k); /* granitehybrid: one per layer (gguf_hybrid.c) */
    if (hkv < 0 || hr_gguf_kv_type(g, hkv) != HR_GGUF_ARRAY || fam != FAM_GRANITEH)
        set_int(&m, "attention.head_count_kv", "num_key_value_heads", false);
    set_int(&m, "attention.key_length", "head_dim", false);
    double kl, vl;
    if (get_num(&m, "attention.value_length", &vl) && get_num(&m, "attention.key_length", &kl) &&
        vl != kl && !m.rc)
        m.rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: value_length %g differs "
                      "from key_length %g", hr_gguf_path(g), vl, kl);
    /* these families rotate whole heads (qwen3next and glm4moe a part:
     * rope.dimension_count of them); a file that says otherwise would load
     * with the wrong RoPE */
    double rd, d_model, n_head, hd_k;
    bool partial = fam == FAM_QNEXT || fam == FAM_GLM4MOE;
    if (get_num(&m, "rope.dimension_count", &rd) && get_num(&m, "embedding_length", &d_model) &&
        get_num(&m, "attention.head_count", &n_head) && n_head > 0 && !m.rc) {
        double hd = get_num(&m, "attention.key_length", &hd_k) ? hd_k : d_model / n_head;
        if (partial && rd > 0 && rd <= hd) /* + 0.5: config.c truncates hd x factor */
            json_object_set_new(m.cfg, "partial_rotary_factor", json_real((rd + 0.5) / hd));
        else if (rd != hd)
            m.rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: rope.dimension_count "
                          "%g is not the head dimension (partial rotary)", hr_gguf_path(g), rd);
    }
    set_int(&m, "context_length", "max_position_embeddings", false);
    set_real(&m, "attention.layer_norm_rms_epsilon", "rms_norm_eps");
    set_real(&m, "rope.freq_base", "rope_theta");
    json_object_set_new(m.cfg, "tie_word_embeddings",
                        json_boolean(!hr_gguf_find_tensor(g, "output.weight")));
    int64_t v;
    if (!hr_gguf_key_int(g, "tokenizer.ggml.bos_token_id", &v))
        json_object_set_new(m.cfg, "bos_token_id", json_integer(v));
    json_t *eog = eog_ids(g);
    if (json_array_size(eog))
        json_object_set_new(m.cfg, "eos_token_id", eog);
    else
        json_decref(eog);
    /* rope scaling: linear by metadata; llama3 as per-frequency divisors in
     * rope_freqs.weight (expressed as longrope factors, equal short/long) */
    snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
    const char *st;
    size_t sl;
    if (!m.rc && fam != FAM_GPTOSS && !hr_gguf_key_str(g, k, &st, &sl) &&
        !(sl == 4 && !memcmp(st, "none", 4))) {
        double f = 1;
        if (sl == 6 && !memcmp(st, "linear", 6) && get_num(&m, "rope.scaling.factor", &f))
            json_object_set_new(m.cfg, "rope_scaling",
                                json_pack("{s:s,s:f}", "rope_type", "linear", "factor", f));
        else
            m.rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: rope scaling '%.*s'",
                          hr_gguf_path(g), (int)sl, st);
    }
    const hr_gguf_tensor *rf = hr_gguf_find_tensor(g, "rope_freqs.weight");
    if (!m.rc && rf) {
        if (rf->type != 0 || rf->n_dims != 1) {
            m.rc = hr_err(err, HR_EFORMAT, "%s: 'rope_freqs.weight' must be 1-D F32",
                          hr_gguf_path(g));
        } else {
            json_t *f = json_array();
            for (uint64_t i = 0; i < rf->ne[0]; i++) {
                float x;
                memcpy(&x, (const float *)rf->data + i, 4);
                json_array_append_new(f, json_real(x));
            }
            double theta = 10000;
            get_num(&m, "rope.freq_base", &theta);
            json_object_set_new(m.cfg, "rope_scaling",
                                json_pack("{s:s,s:O,s:O,s:f,s:f}", "rope_type", "longrope",
                                          "short_factor", f, "long_factor", f,
                                          "attention_factor", 1.0, "rope_theta", theta));
            json_decref(f);
        }
    }
    if (!m.rc && is_gemma(fam))
        gemma_config(&m, fam);
    if (!m.rc)
        m.rc = hr__gguf_moe_config(g, arch, m.cfg, err);
    if (!m.rc && fam == FAM_GPTOSS)
        m.rc = hr__gguf_gptoss_config(g, arch, m.cfg, err);
    if (!m.rc && hr__gguf_hybrid_arch(arch))
        m.rc = hr__gguf_hybrid_config(g, arch, m.cfg, err);
    if (m.rc) {
        json_decref(m.cfg);
        return m.rc;
    }
    *out = m.cfg;
    return 0;
}

/* ---- export ---------------------------------------------------------------- */

typedef hr__gguf_bufs bufs;

void *hr__gguf_keep(bufs *b, size_t size) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        void **p = realloc(b->p, cap * sizeof *p);
        if (!p)
            return NULL;
        b->p = p;
        b->cap = cap;
    }
    void *q = malloc(size ? size : 1);
    if (q)
        b->p[b->n++] = q;
    return q;
}

/* llama.cpp's LlamaModel.permute: within each head, row s*hd/2 + i moves
 * to 2*i + s. Returns the source row of destination row r. */
int64_t hr_gguf_unpermute_row(int64_t r, int head_dim) {
    int64_t h = r / head_dim, o = r % head_dim;
    return h * head_dim + (o % 2) * (head_dim / 2) + o / 2;
}

/* llama3 rope: per-frequency divisors, as convert_hf_to_gguf.py computes. */
static void llama3_factors(const hr_rope_params *rp, int dim, float *out) {
    double lo_wl = rp->original_max_pos / rp->low_freq_factor;
    double hi_wl = rp->original_max_pos / rp->high_freq_factor;
    for (int i = 0; i < dim / 2; i++) {
        double freq = 1.0 / pow(rp->theta, (2.0 * i) / dim);
        double wl = 2 * M_PI / freq;
        if (wl < hi_wl)
            out[i] = 1.0f;
        else if (wl > lo_wl)
            out[i] = (float)rp->factor;
        else {
            double smooth = (rp->original_max_pos / wl - rp->low_freq_factor) /
                            (rp->high_freq_factor - rp->low_freq_factor);
            out[i] = (float)(1.0 / ((1 - smooth) / rp->factor + smooth));
        }
    }
}

/* The ARCHS row hearth exports model_type mt as (mistral as llama), or -1. */
static int arch_of_model_type(const char *mt) {
    if (!strcmp(mt, "mistral") || !strcmp(mt, "mixtral"))
        mt = "llama";
    for (size_t i = 0; i < COUNT(ARCHS); i++)
        if (!strcmp(mt, ARCHS[i].model_type))
            return (int)i;
    return -1;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* convert_hf_to_gguf.py writes gemma's norm weights ("norm.weight"
 * tensors) with the 1 added, which llama.cpp multiplies by as they are: in
 * f32 for f32 and bf16 sources (widened first), rounded to f16 for f16 ones
 * (torch adds in the tensor's dtype); the file stores them as F32. */
static float shifted(float x, float offset, hr_dtype src) {
    x += offset;
    return src == HR_DTYPE_F16 ? hr_f16_to_f32(hr_f32_to_f16(x)) : x;
}

/* A gemma model in the keys llama.cpp reads, beyond the common ones; a
 * model llama.cpp would run differently (it derives the attention scale,
 * the sliding layers and the local RoPE rather than reading them) is
 * HR_EUNSUPPORTED. */
static int gemma_export(hr_gguf_w *g, const char *arch, family f, const hr_hparams *hp,
                        const json_t *cfg, const hr_weights *w, hr_error *err) {
    const char *mt = hp->arch->model_type;
    char k[160];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
#define NOPE(...) hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of " __VA_ARGS__)
    if (hp->act != HR_ACT_GELU_TANH)
        return NOPE("%s with an activation other than gelu_pytorch_tanh (llama.cpp's %s "
                    "runs tanh GELU)", mt, arch);
    if (f != FAM_GEMMA3 && !hp->tie_embeddings && hr_weights_find(w, "lm_head.weight"))
        return NOPE("%s with an untied lm_head (llama.cpp's %s uses token_embd as the "
                    "output matrix)", mt, arch);
    if (hp->rot_dim != hp->head_dim)
        return NOPE("%s with partial rotary embeddings", mt);
    if (hp->rope.type != HR_ROPE_DEFAULT && hp->rope.type != HR_ROPE_LINEAR)
        return NOPE("%s with this rope scaling (default and linear are)", mt);
    int qpas = f == FAM_GEMMA ? hp->head_dim
                              : gemma_qpas(f, hp->n_layers, hp->d_model, hp->n_heads, hp->head_dim);
    if (hp->attn_scale != (float)(1.0 / sqrt(qpas))) {
        const json_t *q = json_object_get(cfg, "query_pre_attn_scalar");
        double have = json_is_number(q) ? json_number_value(q)
                                        : 1.0 / ((double)hp->attn_scale * hp->attn_scale);
        return NOPE("%s with query_pre_attn_scalar %g (llama.cpp's %s takes %d, %s, for a "
                    "%d-layer model)", mt, have, arch, qpas, qpas == hp->head_dim ? "head_dim"
                    : "hidden_size / num_attention_heads", hp->n_layers);
    }
    /* logit softcapping: llama.cpp's gemma2 always applies both (50 and 30
     * when the file has no value), gemma3 only the final one */
    if (f == FAM_GEMMA2 && (hp->attn_softcap == 0 || hp->final_softcap == 0))
        return NOPE("gemma2 without attention and final logit softcapping (llama.cpp's "
                    "gemma2 always applies both)");
    if (f != FAM_GEMMA2 && hp->attn_softcap != 0)
        return NOPE("%s with attention logit softcapping (llama.cpp's %s has none)", mt, arch);
    if (f == FAM_GEMMA && hp->final_softcap != 0)
        return NOPE("gemma with final logit softcapping (llama.cpp's gemma has none)");
    if (hp->attn_softcap != 0)
        hr_gguf_w_f32(g, KEY("attn_logit_softcapping"), hp->attn_softcap);
    if (hp->final_softcap != 0)
        hr_gguf_w_f32(g, KEY("final_logit_softcapping"), hp->final_softcap);
    /* sliding layers: llama.cpp derives them from one period */
    bool any = false;
    for (int i = 0; i < hp->n_layers; i++)
        any |= hp->layer_sliding[i];
    if (f == FAM_GEMMA && any)
        return NOPE("gemma with sliding-window layers (llama.cpp's gemma has none)");
    if (f == FAM_GEMMA || (f == FAM_GEMMA3 && !any))
        return 0;
    int p = -1;
    for (int q = -1; q <= hp->n_layers && p < 0; q++) {
        int c = q < 0 ? swa_default(f) : q;
        bool same = true;
        for (int i = 0; i < hp->n_layers; i++)
            same &= swa_layer(c, i) == hp->layer_sliding[i];
        if (same)
            p = c;
    }
    if (p < 0)
        return NOPE("%s with these layer_types (llama.cpp's %s slides layer i when i %% p < "
                    "p - 1, for one period p)", mt, arch);
    if (p != swa_default(f))
        hr_gguf_w_u32(g, KEY("attention.sliding_window_pattern"), (uint32_t)p);
    if (!any)
        return 0;
    hr_gguf_w_u32(g, KEY("attention.sliding_window"), (uint32_t)hp->sliding_window);
    /* RoPE of the sliding layers: gemma3 unscaled, gemma2 scaled as the
     * global layers; the base is rope.freq_base_swa */
    const hr_rope_params *loc = hp->has_rope_local ? &hp->rope_local : &hp->rope;
    if (f == FAM_GEMMA3 && loc->type != HR_ROPE_DEFAULT)
        return NOPE("gemma3_text with scaled RoPE on sliding layers (llama.cpp's gemma3 "
                    "scales the global layers only)");
    if (f == FAM_GEMMA2 && (loc->type != hp->rope.type ||
                            (loc->type == HR_ROPE_LINEAR && loc->factor != hp->rope.factor)))
        return NOPE("gemma2 whose sliding layers' RoPE scaling differs from the global "
                    "layers' (llama.cpp's gemma2 has one)");
    hr_gguf_w_f32(g, KEY("rope.freq_base_swa"), (float)loc->theta);
#undef NOPE
#undef KEY
    return 0;
}

int hr_gguf_export(const char *src, const json_t *cfg, const hr_weights *w, hr_dtype type,
                   const char *out, FILE *report, hr_error *err) {
    if (hr_gguf_dtype(ggml_type(type)) != (int)type || type == HR_DTYPE_MXFP4)
        return hr_err(err, HR_EINVAL, "--gguf type %s is not one hearth writes",
                      hr_dtype_name(type));
    hr_hparams hp;
    int rc = hr_hparams_from_json(&hp, cfg, NULL, err);
    if (rc)
        return rc;
    const char *mt = hp.arch->model_type;
    int ai = arch_of_model_type(mt);
    if (ai < 0) {
        hr_hparams_deinit(&hp);
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of model_type "
                      "'%s' (llama, mistral, mixtral, qwen2, qwen3, qwen2_moe, qwen3_moe, gpt_oss, "
                      "olmoe, gemma, gemma2, gemma3_text, qwen3_next, glm4_moe, granitemoe, "
                      "granitemoehybrid are)", mt);
    }
    const char *arch = ARCHS[ai].gguf;
    family fam = ARCHS[ai].fam;
    bool permute = fam == FAM_LLAMA || fam == FAM_GRANITE || fam == FAM_GRANITEH;
    bool hybrid = hr__gguf_hybrid_arch(arch);
    /* a window shorter than the context changes the answers past it, and
     * only llama.cpp's gemma2/3 have one (gemma_export writes it) */
    for (int i = 0; !is_gemma(fam) && fam != FAM_GPTOSS && i < hp.n_layers; i++)
        if (hp.layer_sliding[i] && hp.sliding_window < hp.max_pos) {
            rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of %s with a "
                        "sliding window of %d tokens (llama.cpp's %s attends to the whole "
                        "context of %d)", mt, hp.sliding_window, arch, hp.max_pos);
            hr_hparams_deinit(&hp);
            return rc;
        }
    if (hp.rope.type != HR_ROPE_DEFAULT && hp.rope.type != HR_ROPE_LINEAR &&
        hp.rope.type != HR_ROPE_LLAMA3 && !(fam == FAM_GPTOSS && hp.rope.type == HR_ROPE_YARN)) {
        hr_hparams_deinit(&hp);
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of this rope "
                      "scaling (default, linear, llama3 are)");
    }
    hr_gguf_w *g = hr_gguf_w_new();
    bufs keepers = {0};
    char k[160];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
    hr_gguf_w_str(g, "general.architecture", arch);
    hr_gguf_w_str(g, "general.name", src);
    hr_gguf_w_u32(g, "general.alignment", 32);
    hr_gguf_w_u32(g, KEY("vocab_size"), (uint32_t)hp.n_vocab);
    hr_gguf_w_u32(g, KEY("context_length"), (uint32_t)hp.max_pos);
    hr_gguf_w_u32(g, KEY("embedding_length"), (uint32_t)hp.d_model);
    hr_gguf_w_u32(g, KEY("block_count"), (uint32_t)hp.n_layers);
    hr_gguf_w_u32(g, KEY("feed_forward_length"), (uint32_t)hp.d_ff);
    hr_gguf_w_u32(g, KEY("attention.head_count"), (uint32_t)hp.n_heads);
    if (fam != FAM_GRANITEH) /* granitehybrid's: one per layer */
        hr_gguf_w_u32(g, KEY("attention.head_count_kv"), (uint32_t)hp.n_kv_heads);
    hr_gguf_w_u32(g, KEY("attention.key_length"), (uint32_t)hp.head_dim);
    hr_gguf_w_u32(g, KEY("attention.value_length"), (uint32_t)hp.head_dim);
    hr_gguf_w_u32(g, KEY("rope.dimension_count"), (uint32_t)hp.rot_dim);
    hr_gguf_w_f32(g, KEY("rope.freq_base"), (float)hp.rope.theta);
    hr_gguf_w_f32(g, KEY("attention.layer_norm_rms_epsilon"), hp.norm_eps);
    if (hp.rope.type == HR_ROPE_LINEAR) {
        hr_gguf_w_str(g, KEY("rope.scaling.type"), "linear");
        hr_gguf_w_f32(g, KEY("rope.scaling.factor"), (float)hp.rope.factor);
    }
#undef KEY
    if ((is_gemma(fam) && (rc = gemma_export(g, arch, fam, &hp, cfg, w, err))) ||
        (fam == FAM_GPTOSS && (rc = hr__gguf_gptoss_keys(g, arch, &hp, err))) ||
        (hybrid && (rc = hr__gguf_hybrid_keys(g, arch, &hp, err))) ||
        (fam != FAM_GPTOSS && !hybrid && (rc = hr__gguf_moe_keys(g, arch, &hp, err)))) {
        hr_gguf_w_free(g);
        hr_hparams_deinit(&hp);
        return rc;
    }
    const char *pre = NULL;
    hr_error terr = {0};
    rc = hr_tokenizer_gguf_export(g, src, hp.n_vocab, hp.bos_id, hp.n_eos ? hp.eos_ids[0] : -1,
                                  &pre, &terr);
    if (rc == HR_EUNSUPPORTED || rc == HR_ENOTFOUND) {
        hr_log(HR_LOG_WARN, "%s: tokenizer not exported (%s); the GGUF has tokenizer.ggml.model "
               "'none': llama.cpp loads and benchmarks it but cannot tokenize text with it",
               src, terr.msg);
        rc = 0;
        hr_gguf_w_str(g, "tokenizer.ggml.model", "none");
        if (hp.bos_id >= 0)
            hr_gguf_w_u32(g, "tokenizer.ggml.bos_token_id", (uint32_t)hp.bos_id);
        if (hp.n_eos)
            hr_gguf_w_u32(g, "tokenizer.ggml.eos_token_id", (uint32_t)hp.eos_ids[0]);
    } else if (rc) {
        if (err)
            *err = terr;
    }
    if (hp.rope.type == HR_ROPE_LLAMA3) {
        float *f = hr__gguf_keep(&keepers, (size_t)hp.rot_dim / 2 * sizeof *f);
        if (f) {
            llama3_factors(&hp.rope, hp.rot_dim, f);
            uint64_t ne[1] = {(uint64_t)hp.rot_dim / 2};
            hr_gguf_w_tensor(g, "rope_freqs.weight", 0, 1, ne, f, (size_t)hp.rot_dim / 2 * 4);
        }
    }
    size_t n_fallback = 0;
    for (size_t i = 0; !rc && i < hr_weights_count(w); i++) {
        const hr_tensor *t = hr_weights_at(w, i);
        char gn[160], stacked[200];
        if (hp.tie_embeddings && !strcmp(t->name, "lm_head.weight"))
            continue; /* unused: the model computes with embed_tokens */
        int layer;
        if (sscanf(t->name, "model.layers.%d.", &layer) == 1 && layer >= hp.n_layers)
            continue; /* multi-token prediction layers: not run, not written */
        if (hybrid) { /* fused experts, recurrent layers' reshaped tensors */
            int r = hr__gguf_hybrid_tensor(g, &hp, arch, t, type, &keepers, err);
            if (r < 0)
                rc = r;
            if (r)
                continue;
        }
        if (fam == FAM_GPTOSS) { /* its experts: split, transposed, or MXFP4 */
            int r = hr__gguf_gptoss_tensor(g, w, &hp, t, type, &keepers, err);
            if (r < 0)
                rc = r;
            if (r)
                continue;
        }
        /* experts: one [E, out, in] tensor, written at expert 0 */
        int expert = hr__gguf_expert_of(&hp, t->name, stacked, sizeof stacked);
        if (expert > 0)
            continue;
        const hr_tensor *one[1] = {t}, **parts = one;
        int n_parts = 1;
        if (expert == 0 && !(parts = hr__gguf_experts_of(w, t, hp.n_experts, &rc, err)))
            break;
        n_parts = expert == 0 ? hp.n_experts : 1;
        hr_tensor gate1; /* the shared expert's gate (1, d): llama.cpp's is 1-D */
        if (t->ndim == 2 && t->shape[0] == 1 && ends_with(t->name, "shared_expert_gate.weight")) {
            gate1 = *t;
            gate1.ndim = 1;
            gate1.shape[0] = t->shape[1];
            t = one[0] = &gate1;
        }
        if (!map_name(expert == 0 ? stacked : t->name, false, fam, gn, sizeof gn)) {
            rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: no GGUF name for "
                        "tensor '%s'", src, t->name);
            if (parts != one)
                free(parts);
            break;
        }
        bool is_q = strstr(t->name, "q_proj") != NULL, is_k = strstr(t->name, "k_proj") != NULL;
        /* the (1 + w) norms with the 1 added; qwen3_next's gated DeltaNet
         * norm is a plain w */
        bool shift = hp.norm_offset != 0 && t->ndim == 1 && ends_with(t->name, "norm.weight") &&
                     !strstr(t->name, "linear_attn.");
        int64_t rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
        hr_tensor flat = *t;
        flat.ndim = 2;
        flat.shape[0] = rows;
        flat.shape[1] = cols;
        hr_dtype tt = t->ndim == 2 && !ends_with(gn, "ffn_gate_inp.weight") ? type : HR_DTYPE_F32;
        int be, bb;
        hr_dtype_block(tt, &be, &bb);
        if (cols % be) {
            tt = HR_DTYPE_F16;
            hr_dtype_block(tt, &be, &bb);
            n_fallback++;
        }
        size_t row_bytes = (size_t)(cols / be) * bb;
        unsigned char *data = hr__gguf_keep(&keepers, (size_t)n_parts * rows * row_bytes);
        float *x = malloc((size_t)cols * sizeof *x);
        if (!data || !x) {
            free(x);
            if (parts != one)
                free(parts);
            rc = hr_err(err, HR_ENOMEM, "out of memory");
            break;
        }
        for (int64_t pr = 0; pr < n_parts * rows; pr++) {
            int64_t r = pr % rows;
            flat.data = parts[pr / rows]->data;
            int64_t sr = permute && (is_q || is_k) ? hr_gguf_unpermute_row(r, hp.head_dim) : r;
            if (t->ndim == 1) {
                hr_dequant_range(&(hr_tensor){.dtype = t->dtype, .ndim = 2, .shape = {1, rows},
                                              .data = t->data},
                                 0, r, 1, x);
                if (shift)
                    x[0] = shifted(x[0], hp.norm_offset, t->dtype);
            } else {
                hr_dequant_range(&flat, sr, 0, cols, x);
            }
            unsigned char *dst = data + (size_t)pr * row_bytes;
            if (tt == HR_DTYPE_F32)
                memcpy(dst, x, (size_t)cols * 4);
            else if (tt == HR_DTYPE_F16 || tt == HR_DTYPE_BF16)
                for (int64_t c = 0; c < cols; c++) {
                    uint16_t h = tt == HR_DTYPE_F16 ? hr_f32_to_f16(x[c]) : hr_f32_to_bf16(x[c]);
                    memcpy(dst + 2 * c, &h, 2);
                }
            else
                hr_quant_gguf_row(tt, x, cols, dst);
        }
        free(x);
        if (parts != one)
            free(parts);
        uint64_t ne[3] = {(uint64_t)cols, (uint64_t)rows, (uint64_t)n_parts};
        if (t->ndim == 1)
            ne[0] = (uint64_t)rows;
        hr_gguf_w_tensor(g, gn, ggml_type(tt), n_parts > 1 ? 3 : t->ndim, ne, data,
                         (size_t)n_parts * rows * row_bytes);
    }
    if (!rc)
        rc = hr_gguf_w_write(g, out, err);
    if (!rc && report)
        fprintf(report, "wrote %s (%s, matrices %s%s, tokenizer %s%s)\n", out, arch,
                hr_dtype_name(type), n_fallback ? ", some F16: rows not whole blocks" : "",
                pre ? "gpt2/" : "none", pre ? pre : "");
    for (size_t i = 0; i < keepers.n; i++)
        free(keepers.p[i]);
    free(keepers.p);
    hr_gguf_w_free(g);
    hr_hparams_deinit(&hp);
    return rc;
}
