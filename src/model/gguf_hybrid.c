/* qwen3next, glm4moe, granitemoe and granitehybrid as GGUF (gguf_model.h),
 * as llama.cpp's convert_hf_to_gguf.py writes them and its loaders read
 * them:
 *  - granitemoe, granitehybrid: granite's multipliers as attention.scale,
 *    embedding_scale, residual_scale, logit_scale; the experts' input_linear
 *    [E, 2ff, d] split into ffn_gate_exps / ffn_up_exps (output_linear is
 *    ffn_down_exps), the shared_mlp's input_linear into ffn_gate_shexp /
 *    ffn_up_shexp; q/k rows permuted as llama's (gguf_export.c);
 *  - granitehybrid: Mamba-2 layers are those whose attention.head_count_kv
 *    (an array, one per layer) is 0; ssm.{conv_kernel, state_size,
 *    group_count, inner_size, time_step_rank (the heads)}; ssm_a =
 *    -exp(A_log) [H, 1], ssm_d [H, 1], ssm_conv1d [C, K], ssm_norm
 *    [groups, inner / groups]; positions only when rope.scaling.finetuned;
 *  - qwen3next: gated DeltaNet layers every layer but each
 *    full_attention_interval-th; ssm.{conv_kernel, state_size (key and value
 *    head width), group_count (key heads), time_step_rank (value heads),
 *    inner_size}; in_proj_qkvz, per key head [q k v z], split into attn_qkv
 *    [all q | all k | all v] and attn_gate [all z]; ssm_a = -exp(A_log),
 *    ssm_conv1d [C, K], ssm_dt.bias, ssm_ba, ssm_norm (as is), ssm_out;
 *    every other norm with qwen3_next's 1 added (as gemma's); partial
 *    rotary from rope.dimension_count; top k always renormalised;
 *  - glm4moe: expert_shared_count, leading_dense_block_count,
 *    expert_weights_scale, expert_weights_norm, expert_gating_func 2
 *    (sigmoid), the score bias exp_probs_b.bias; no expert groups (llama.cpp
 *    routes over all experts); partial rotary.
 *  - {arch}.nextn_predict_layers (multi-token prediction layers, counted in
 *    block_count) are left out: hearth runs the main layers only.
 * What llama.cpp would run differently from the model is refused on export
 * ("not supported yet: GGUF export of ..."). */
#include "core/error.h"
#include "io/gguf_write.h"
#include "kernels/cpu/quant.h"
#include "model/config.h"
#include "model/gguf_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool num(const hr_gguf *g, const char *arch, const char *suffix, double *v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    int64_t i = hr_gguf_find(g, k), iv;
    int b;
    if (i < 0)
        return false;
    if (!hr_gguf_get_int(g, i, &iv)) {
        *v = (double)iv;
        return true;
    }
    if (!hr_gguf_get_bool(g, i, &b)) {
        *v = b;
        return true;
    }
    return !hr_gguf_get_float(g, i, v);
}

/* A count key: a number in [0, 2^30], else false. */
static bool count(const hr_gguf *g, const char *arch, const char *suffix, int64_t *v) {
    double d;
    if (!num(g, arch, suffix, &d) || d < 0 || d > (1 << 30) || d != (int64_t)d)
        return false;
    *v = (int64_t)d;
    return true;
}

static bool is_granite(const char *arch) {
    return !strcmp(arch, "granitemoe") || !strcmp(arch, "granitehybrid");
}

bool hr__gguf_hybrid_arch(const char *arch) {
    return is_granite(arch) || !strcmp(arch, "qwen3next") || !strcmp(arch, "glm4moe");
}

/* ---- metadata -> config ------------------------------------------------------ */

static void set_real(const hr_gguf *g, const char *arch, json_t *cfg, const char *suffix,
                     const char *field) {
    double v;
    if (num(g, arch, suffix, &v))
        json_object_set_new(cfg, field, json_real(v));
}

static int need(const hr_gguf *g, const char *arch, const char *suffix, int64_t *v,
                hr_error *err) {
    if (count(g, arch, suffix, v) && *v > 0)
        return 0;
    return hr_err(err, HR_EFORMAT, "%s: missing or bad key '%s.%s'", hr_gguf_path(g), arch,
                  suffix);
}

/* granitehybrid's layers: head_count_kv per layer, 0 for a Mamba-2 one */
static int granite_layers(const hr_gguf *g, const char *arch, json_t *cfg, int64_t n,
                          hr_error *err) {
    char k[128];
    snprintf(k, sizeof k, "%s.attention.head_count_kv", arch);
    int64_t i = hr_gguf_find(g, k), kv = 0, v;
    hr_gguf_type et;
    uint64_t len = 0;
    json_t *lt = json_array();
    if (i >= 0 && hr_gguf_kv_type(g, i) == HR_GGUF_ARRAY) {
        if (hr_gguf_get_arr(g, i, &et, &len) || (int64_t)len != n) {
            json_decref(lt);
            return hr_err(err, HR_EFORMAT, "%s: '%s' must list %lld layers", hr_gguf_path(g),
                          k, (long long)n);
        }
        for (uint64_t j = 0; j < len; j++) {
            if (hr_gguf_arr_int(g, i, j, &v) || v < 0 || v > (1 << 20)) {
                json_decref(lt);
                return hr_err(err, HR_EFORMAT, "%s: '%s'[%llu] is not a head count",
                              hr_gguf_path(g), k, (unsigned long long)j);
            }
            kv = kv ? kv : v;
            json_array_append_new(lt, json_string(v ? "attention" : "mamba"));
        }
        if (kv)
            json_object_set_new(cfg, "num_key_value_heads", json_integer(kv));
    } else {
        for (int64_t j = 0; j < n; j++)
            json_array_append_new(lt, json_string("attention"));
    }
    json_object_set_new(cfg, "layer_types", lt);
    return 0;
}

int hr__gguf_hybrid_config(const hr_gguf *g, const char *arch, json_t *cfg, hr_error *err) {
    int64_t nl = 0, nextn = 0, v;
    count(g, arch, "block_count", &nl);
    if (nl <= 0 || nl > HR_MAX_LAYERS)
        return hr_err(err, HR_EFORMAT, "%s: %s.block_count %lld is not 1..%d", hr_gguf_path(g),
                      arch, (long long)nl, HR_MAX_LAYERS);
    if (count(g, arch, "nextn_predict_layers", &nextn) && nextn > 0) {
        if (nextn >= nl)
            return hr_err(err, HR_EFORMAT, "%s: nextn_predict_layers %lld of %lld blocks",
                          hr_gguf_path(g), (long long)nextn, (long long)nl);
        nl -= nextn; /* multi-token prediction layers come last */
        json_object_set_new(cfg, "num_hidden_layers", json_integer(nl));
        json_t *only = json_object_get(cfg, "mlp_only_layers"), *keep = json_array();
        for (size_t i = 0; i < json_array_size(only); i++)
            if (json_integer_value(json_array_get(only, i)) < nl)
                json_array_append(keep, json_array_get(only, i));
        json_object_set_new(cfg, "mlp_only_layers", keep);
    }
    if (is_granite(arch)) {
        set_real(g, arch, cfg, "attention.scale", "attention_multiplier");
        set_real(g, arch, cfg, "embedding_scale", "embedding_multiplier");
        set_real(g, arch, cfg, "residual_scale", "residual_multiplier");
        set_real(g, arch, cfg, "logit_scale", "logits_scaling");
    }
    if (!strcmp(arch, "granitehybrid")) {
        int64_t conv, state, groups, inner, heads;
        int rc;
        if ((rc = need(g, arch, "ssm.conv_kernel", &conv, err)) ||
            (rc = need(g, arch, "ssm.state_size", &state, err)) ||
            (rc = need(g, arch, "ssm.group_count", &groups, err)) ||
            (rc = need(g, arch, "ssm.inner_size", &inner, err)) ||
            (rc = need(g, arch, "ssm.time_step_rank", &heads, err)))
            return rc;
        const json_t *d = json_object_get(cfg, "hidden_size");
        int64_t dm = json_integer_value(d);
        if (dm <= 0 || inner % dm || inner % heads)
            return hr_err(err, HR_EFORMAT, "%s: ssm.inner_size %lld is not a multiple of the "
                          "embedding length and of the %lld heads", hr_gguf_path(g),
                          (long long)inner, (long long)heads);
        json_object_set_new(cfg, "mamba_d_conv", json_integer(conv));
        json_object_set_new(cfg, "mamba_d_state", json_integer(state));
        json_object_set_new(cfg, "mamba_n_groups", json_integer(groups));
        json_object_set_new(cfg, "mamba_n_heads", json_integer(heads));
        json_object_set_new(cfg, "mamba_expand", json_integer(inner / dm));
        json_object_set_new(cfg, "mamba_d_head", json_integer(inner / heads));
        if (count(g, arch, "expert_shared_feed_forward_length", &v) && v > 0)
            json_object_set_new(cfg, "shared_intermediate_size", json_integer(v));
        double rope = 1; /* llama.cpp's default: positions on */
        num(g, arch, "rope.scaling.finetuned", &rope);
        json_object_set_new(cfg, "position_embedding_type", json_string(rope ? "rope" : "nope"));
        if ((rc = granite_layers(g, arch, cfg, nl, err)))
            return rc;
    }
    if (!strcmp(arch, "qwen3next")) {
        int64_t conv, state, groups, inner, heads, interval = 4;
        int rc;
        if ((rc = need(g, arch, "ssm.conv_kernel", &conv, err)) ||
            (rc = need(g, arch, "ssm.state_size", &state, err)) ||
            (rc = need(g, arch, "ssm.group_count", &groups, err)) ||
            (rc = need(g, arch, "ssm.inner_size", &inner, err)) ||
            (rc = need(g, arch, "ssm.time_step_rank", &heads, err)))
            return rc;
        if (inner != state * heads)
            return hr_err(err, HR_EFORMAT, "%s: ssm.inner_size %lld is not ssm.state_size x "
                          "ssm.time_step_rank", hr_gguf_path(g), (long long)inner);
        char k[128];
        snprintf(k, sizeof k, "%s.attention.recurrent_layers", arch);
        if (hr_gguf_find(g, k) >= 0)
            return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: key '%s' (layers by "
                          "full_attention_interval are)", hr_gguf_path(g), k);
        if (count(g, arch, "full_attention_interval", &v) && v > 0)
            interval = v;
        json_t *lt = json_array();
        for (int64_t i = 0; i < nl; i++) /* llama.cpp: recurrent when (i + 1) % interval */
            json_array_append_new(lt, json_string((i + 1) % interval ? "linear_attention"
                                                                     : "full_attention"));
        json_object_set_new(cfg, "layer_types", lt);
        json_object_set_new(cfg, "linear_conv_kernel_dim", json_integer(conv));
        json_object_set_new(cfg, "linear_key_head_dim", json_integer(state));
        json_object_set_new(cfg, "linear_value_head_dim", json_integer(state));
        json_object_set_new(cfg, "linear_num_key_heads", json_integer(groups));
        json_object_set_new(cfg, "linear_num_value_heads", json_integer(heads));
        json_object_set_new(cfg, "norm_topk_prob", json_true()); /* llama.cpp's, fixed */
    }
    if (!strcmp(arch, "glm4moe")) {
        int64_t gate = 2;
        count(g, arch, "expert_gating_func", &gate);
        if (gate != 2 && gate != 0)
            return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: glm4moe with "
                          "expert_gating_func %lld (2, sigmoid, is)", hr_gguf_path(g),
                          (long long)gate);
        if (count(g, arch, "expert_shared_count", &v))
            json_object_set_new(cfg, "n_shared_experts", json_integer(v));
        if (count(g, arch, "leading_dense_block_count", &v))
            json_object_set_new(cfg, "first_k_dense_replace", json_integer(v));
        set_real(g, arch, cfg, "expert_weights_scale", "routed_scaling_factor");
    }
    return 0;
}

/* ---- config -> metadata -------------------------------------------------------- */

#define NOPE(...) hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of " __VA_ARGS__)

int hr__gguf_hybrid_keys(hr_gguf_w *g, const char *arch, const hr_hparams *hp, hr_error *err) {
    const char *mt = hp->arch->model_type;
    char k[160];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
    if (!hp->n_experts)
        return NOPE("%s without experts", mt);
    hr_gguf_w_u32(g, KEY("expert_count"), (uint32_t)hp->n_experts);
    hr_gguf_w_u32(g, KEY("expert_used_count"), (uint32_t)hp->n_experts_used);
    hr_gguf_w_u32(g, KEY("expert_feed_forward_length"), (uint32_t)hp->d_ff_expert);
    if (is_granite(arch)) {
        /* llama.cpp: softmax over all, top k, renormalised: the softmax of the top k */
        hr_gguf_w_f32(g, KEY("attention.scale"), hp->attn_scale);
        hr_gguf_w_f32(g, KEY("embedding_scale"), hp->embed_mult);
        hr_gguf_w_f32(g, KEY("residual_scale"), hp->residual_mult);
        hr_gguf_w_f32(g, KEY("logit_scale"), hp->logit_div);
        if (hp->d_ff_shared)
            hr_gguf_w_u32(g, KEY("expert_shared_feed_forward_length"), (uint32_t)hp->d_ff_shared);
        for (int i = 0; i < hp->n_layers; i++)
            if (!hp->layer_moe[i])
                return NOPE("%s with dense layers", mt);
    }
    if (!strcmp(arch, "granitehybrid")) {
        if (hp->mb_inner != 2 * hp->d_model)
            return NOPE("%s with mamba_expand other than 2 (llama.cpp's granitehybrid "
                        "takes 2)", mt);
        bool rope = false, norope = false;
        int32_t kv[HR_MAX_LAYERS];
        for (int i = 0; i < hp->n_layers; i++) {
            kv[i] = hp->layer_linear[i] ? 0 : hp->n_kv_heads;
            rope |= !hp->layer_linear[i] && hp->layer_rope[i];
            norope |= !hp->layer_linear[i] && !hp->layer_rope[i];
        }
        if (rope && norope)
            return NOPE("%s with positions on some attention layers only", mt);
        hr_gguf_w_arr_i32(g, KEY("attention.head_count_kv"), kv, (size_t)hp->n_layers);
        hr_gguf_w_bool(g, KEY("rope.scaling.finetuned"), rope);
        hr_gguf_w_u32(g, KEY("ssm.conv_kernel"), (uint32_t)hp->mb_conv);
        hr_gguf_w_u32(g, KEY("ssm.state_size"), (uint32_t)hp->mb_state);
        hr_gguf_w_u32(g, KEY("ssm.group_count"), (uint32_t)hp->mb_groups);
        hr_gguf_w_u32(g, KEY("ssm.inner_size"), (uint32_t)hp->mb_inner);
        hr_gguf_w_u32(g, KEY("ssm.time_step_rank"), (uint32_t)hp->mb_heads);
    }
    if (!strcmp(arch, "qwen3next")) {
        if (hp->ln_k_dim != hp->ln_v_dim)
            return NOPE("%s with linear_key_head_dim %d != linear_value_head_dim %d "
                        "(llama.cpp's qwen3next has one ssm.state_size)", mt, hp->ln_k_dim,
                        hp->ln_v_dim);
        if (!hp->norm_topk)
            return NOPE("%s with norm_topk_prob false (llama.cpp's qwen3next renormalises)",
                        mt);
        int p = 0;
        for (int c = 1; c <= hp->n_layers + 1 && !p; c++) {
            bool same = true;
            for (int i = 0; i < hp->n_layers; i++)
                same &= hp->layer_linear[i] == ((i + 1) % c != 0);
            p = same ? c : 0;
        }
        if (!p)
            return NOPE("%s with these layer_types (llama.cpp's qwen3next has full attention "
                        "on every p-th layer, one period p)", mt);
        for (int i = 0; i < hp->n_layers; i++)
            if (!hp->layer_moe[i])
                return NOPE("%s with dense layers (llama.cpp's qwen3next routes every layer)",
                            mt);
        if (!hp->d_ff_shared)
            return NOPE("%s without a shared expert", mt);
        hr_gguf_w_u32(g, KEY("expert_shared_feed_forward_length"), (uint32_t)hp->d_ff_shared);
        hr_gguf_w_u32(g, KEY("full_attention_interval"), (uint32_t)p);
        hr_gguf_w_u32(g, KEY("ssm.conv_kernel"), (uint32_t)hp->ln_conv);
        hr_gguf_w_u32(g, KEY("ssm.state_size"), (uint32_t)hp->ln_k_dim);
        hr_gguf_w_u32(g, KEY("ssm.group_count"), (uint32_t)hp->ln_k_heads);
        hr_gguf_w_u32(g, KEY("ssm.time_step_rank"), (uint32_t)hp->ln_v_heads);
        hr_gguf_w_u32(g, KEY("ssm.inner_size"), (uint32_t)(hp->ln_v_dim * hp->ln_v_heads));
    }
    if (!strcmp(arch, "glm4moe")) {
        if (hp->n_group > 1 && hp->topk_group < hp->n_group)
            return NOPE("%s with expert groups (n_group %d, topk_group %d: llama.cpp's "
                        "glm4moe routes over all experts)", mt, hp->n_group, hp->topk_group);
        int lead = 0;
        while (lead < hp->n_layers && !hp->layer_moe[lead])
            lead++;
        for (int i = lead; i < hp->n_layers; i++)
            if (!hp->layer_moe[i])
                return NOPE("%s with dense layers after the first routed one", mt);
        if (hp->d_ff_expert <= 0 || hp->d_ff_shared % hp->d_ff_expert)
            return NOPE("%s with this shared expert width", mt);
        hr_gguf_w_u32(g, KEY("expert_shared_count"), (uint32_t)(hp->d_ff_shared / hp->d_ff_expert));
        hr_gguf_w_u32(g, KEY("leading_dense_block_count"), (uint32_t)lead);
        hr_gguf_w_f32(g, KEY("expert_weights_scale"), hp->routed_scale);
        hr_gguf_w_bool(g, KEY("expert_weights_norm"), hp->norm_topk);
        hr_gguf_w_u32(g, KEY("expert_gating_func"), 2); /* sigmoid */
    }
#undef KEY
    return 0;
}

/* ---- tensors ---------------------------------------------------------------------- */

/* t's elements as floats, viewed as rows x cols (malloc'd; NULL: out of memory) */
static float *floats(const hr_tensor *t, int64_t rows, int64_t cols) {
    float *x = malloc((size_t)rows * cols * sizeof *x);
    hr_tensor flat = *t;
    flat.ndim = 2;
    flat.shape[0] = rows;
    flat.shape[1] = cols;
    for (int64_t r = 0; x && r < rows; r++)
        hr_dequant_range(&flat, r, 0, cols, x + (size_t)r * cols);
    return x;
}

/* n_src row ranges of x (each {first row, rows}, cols wide) as one GGUF
 * tensor of type (F32 forced when f32) with dims ne (n_dims). */
static int put(hr_gguf_w *g, const char *name, const float *x, int64_t cols,
               const int64_t (*ranges)[2], int n_ranges, hr_dtype type, int n_dims,
               const uint64_t *ne, hr__gguf_bufs *kb, hr_error *err) {
    int64_t rows = 0;
    for (int i = 0; i < n_ranges; i++)
        rows += ranges[i][1];
    float *y = malloc((size_t)rows * cols * sizeof *y);
    if (!y)
        return hr_err(err, HR_ENOMEM, "out of memory");
    float *o = y;
    for (int i = 0; i < n_ranges; i++) {
        memcpy(o, x + (size_t)ranges[i][0] * cols, (size_t)ranges[i][1] * cols * sizeof *o);
        o += (size_t)ranges[i][1] * cols;
    }
    hr_dtype tt;
    size_t bytes;
    void *d = hr__gguf_rows_as(kb, y, rows, cols, type, &tt, &bytes);
    free(y);
    if (!d)
        return hr_err(err, HR_ENOMEM, "out of memory");
    hr_gguf_w_tensor(g, name, hr__gguf_ggml_type(tt), n_dims, ne, d, bytes);
    return 0;
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

int hr__gguf_hybrid_tensor(hr_gguf_w *g, const hr_hparams *hp, const char *arch,
                           const hr_tensor *t, hr_dtype type, hr__gguf_bufs *kb, hr_error *err) {
    int layer, used = 0;
    if (sscanf(t->name, "model.layers.%d.%n", &layer, &used) != 1 || !used)
        return 0;
    const char *part = t->name + used;
    char blk[32], nm[160];
    snprintf(blk, sizeof blk, "blk.%d", layer);
    int64_t numel = hr_tensor_numel(t), d = hp->d_model;
    int rc = 0;
#define NAME(s) (snprintf(nm, sizeof nm, "%s." s, blk), nm)
    if (is_granite(arch) && (!strcmp(part, "block_sparse_moe.input_linear.weight") ||
                             !strcmp(part, "block_sparse_moe.output_linear.weight") ||
                             !strcmp(part, "shared_mlp.input_linear.weight"))) {
        bool shared = part[0] == 's', down = strstr(part, "output") != NULL;
        int64_t E = shared ? 1 : hp->n_experts, ff = shared ? hp->d_ff_shared : hp->d_ff_expert;
        int64_t rows = down ? d : 2 * ff, cols = down ? ff : d;
        if (numel != E * rows * cols)
            return hr_err(err, HR_EFORMAT, "tensor '%s' has %lld elements, expected %lld",
                          t->name, (long long)numel, (long long)(E * rows * cols));
        float *x = floats(t, E * rows, cols);
        if (!x)
            return hr_err(err, HR_ENOMEM, "out of memory");
        int64_t (*rg)[2] = malloc((size_t)E * sizeof *rg);
        for (int half = 0; rg && !rc && half < (down ? 1 : 2); half++) {
            for (int64_t e = 0; e < E; e++) { /* per expert: gate rows, then up rows */
                rg[e][0] = e * rows + (down ? 0 : half * ff);
                rg[e][1] = down ? rows : ff;
            }
            uint64_t ne[3] = {(uint64_t)cols, (uint64_t)(down ? rows : ff), (uint64_t)E};
            const char *n = shared ? (half ? NAME("ffn_up_shexp.weight")
                                           : NAME("ffn_gate_shexp.weight"))
                            : down ? NAME("ffn_down_exps.weight")
                            : half ? NAME("ffn_up_exps.weight")
                                   : NAME("ffn_gate_exps.weight");
            rc = put(g, n, x, cols, (const int64_t(*)[2])rg, (int)E, type, shared ? 2 : 3, ne,
                     kb, err);
        }
        if (!rg)
            rc = hr_err(err, HR_ENOMEM, "out of memory");
        free(rg);
        free(x);
        return rc ? rc : 1;
    }
    bool mamba = !strncmp(part, "mamba.", 6), lin = !strncmp(part, "linear_attn.", 12);
    if (!mamba && !lin)
        return 0;
    const char *leaf = part + (mamba ? 6 : 12);
    if (!strcmp(leaf, "A_log") || !strcmp(leaf, "D") || !strcmp(leaf, "conv1d.weight") ||
        (mamba && !strcmp(leaf, "norm.weight"))) {
        float *x = floats(t, 1, numel);
        if (!x)
            return hr_err(err, HR_ENOMEM, "out of memory");
        bool a = !strcmp(leaf, "A_log"), conv = leaf[0] == 'c';
        if (a)
            for (int64_t i = 0; i < numel; i++)
                x[i] = -expf(x[i]); /* as the binder computes it */
        int64_t K = mamba ? hp->mb_conv : hp->ln_conv, ng = hp->mb_groups;
        /* llama.cpp's shapes: mamba's A and D [H, 1], conv [C, K], norm [groups, I / groups] */
        uint64_t ne[2] = {1, (uint64_t)numel};
        int nd = 2;
        if (conv) {
            ne[0] = (uint64_t)K;
            ne[1] = (uint64_t)(numel / K);
        } else if (!strcmp(leaf, "norm.weight")) {
            ne[0] = (uint64_t)(numel / ng);
            ne[1] = (uint64_t)ng;
        } else if (lin) { /* qwen3next's ssm_a: [H] */
            ne[0] = (uint64_t)numel;
            nd = 1;
        }
        const char *n = a ? NAME("ssm_a") : leaf[0] == 'D' ? NAME("ssm_d")
                        : conv ? NAME("ssm_conv1d.weight") : NAME("ssm_norm.weight");
        int64_t all[1][2] = {{0, 1}};
        rc = put(g, n, x, numel, (const int64_t(*)[2])all, 1, HR_DTYPE_F32, nd, ne, kb, err);
        free(x);
        return rc ? rc : 1;
    }
    if (lin && ends_with(leaf, "in_proj_qkvz.weight")) {
        int64_t nk = hp->ln_k_heads, dk = hp->ln_k_dim,
                rv = (int64_t)hp->ln_v_heads / nk * hp->ln_v_dim, W = 2 * dk + 2 * rv;
        if (numel != nk * W * d)
            return hr_err(err, HR_EFORMAT, "tensor '%s' has %lld elements, expected %lld",
                          t->name, (long long)numel, (long long)(nk * W * d));
        float *x = floats(t, nk * W, d);
        int64_t (*rg)[2] = malloc((size_t)(3 * nk) * sizeof *rg);
        if (!x || !rg) {
            free(x);
            free(rg);
            return hr_err(err, HR_ENOMEM, "out of memory");
        }
        /* per key head g: [q_g (dk) | k_g (dk) | v_g (rv) | z_g (rv)] */
        for (int s = 0; s < 3; s++)
            for (int64_t h = 0; h < nk; h++) {
                rg[s * nk + h][0] = h * W + (s == 0 ? 0 : s == 1 ? dk : 2 * dk);
                rg[s * nk + h][1] = s == 2 ? rv : dk;
            }
        uint64_t ne[2] = {(uint64_t)d, (uint64_t)(nk * (2 * dk + rv))};
        rc = put(g, NAME("attn_qkv.weight"), x, d, (const int64_t(*)[2])rg, (int)(3 * nk), type,
                 2, ne, kb, err);
        for (int64_t h = 0; h < nk; h++) {
            rg[h][0] = h * W + 2 * dk + rv;
            rg[h][1] = rv;
        }
        ne[1] = (uint64_t)(nk * rv);
        if (!rc)
            rc = put(g, NAME("attn_gate.weight"), x, d, (const int64_t(*)[2])rg, (int)nk, type,
                     2, ne, kb, err);
        free(x);
        free(rg);
        return rc ? rc : 1;
    }
#undef NAME
    return 0;
}
