/* Gemma-4's text model as GGUF ("gemma4", gguf_model.h), as llama.cpp's
 * converter (conversion/gemma.py Gemma4Model) writes it and its loader
 * (src/models/gemma4.cpp) reads it:
 *  - attention.key_length / value_length: the full-attention layers' head
 *    size, key_length_swa / value_length_swa the sliding layers' (config
 *    head_dim); rope.dimension_count / _swa the same; head_count_kv a
 *    number or one per layer (the full layers' num_global_key_value_heads,
 *    with attention_k_eq_v: their attn_v is absent, V is K);
 *  - attention.sliding_window_pattern: one flag per layer (bool or integer
 *    array); rope.freq_base_swa the sliding layers' base;
 *    attention.shared_kv_layers, embedding_length_per_layer_input;
 *    final_logit_softcapping, 30 when absent (llama_hparams' default: the
 *    export always writes it, 0 for none);
 *  - rope_freqs.weight: per-frequency divisors of the full layers' RoPE,
 *    which llama.cpp's loader requires: the converter writes transformers'
 *    "proportional" RoPE as 1 for the rotated pairs and 1e30 for the rest;
 *    all ones is the default RoPE;
 *  - norms as they are (no 1 added); router.scale as ffn_gate_inp.scale,
 *    router.per_expert_scale as ffn_down_exps.scale, layer_scalar as
 *    layer_output_scale.weight, experts.gate_up_proj [E, 2ff, d] as one
 *    ffn_gate_up_exps (gate rows first, as the hub's), the expert keys.
 * What hearth does not run is refused by config.c with the HF field's name
 * (global_head_dim, num_kv_shared_layers, hidden_size_per_layer_input, ...);
 * what llama.cpp would run differently is refused on export. */
#include "core/error.h"
#include "io/gguf_write.h"
#include "kernels/cpu/quant.h"
#include "model/config.h"
#include "model/gguf_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool num(const hr_gguf *g, const char *arch, const char *suffix, double *v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    int64_t i = hr_gguf_find(g, k), iv;
    if (i < 0 || hr_gguf_kv_type(g, i) == HR_GGUF_ARRAY)
        return false;
    if (!hr_gguf_get_int(g, i, &iv)) {
        *v = (double)iv;
        return true;
    }
    return !hr_gguf_get_float(g, i, v);
}

/* key {arch}.suffix as n per-layer integers into out (a scalar repeated);
 * false when absent, an error when malformed */
static bool per_layer(const hr_gguf *g, const char *arch, const char *suffix, int n,
                      int64_t *out, int *rc, hr_error *err) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    int64_t i = hr_gguf_find(g, k);
    if (i < 0)
        return false;
    hr_gguf_type et;
    uint64_t len;
    int64_t v;
    if (hr_gguf_kv_type(g, i) != HR_GGUF_ARRAY) {
        if (!hr_gguf_get_int(g, i, &v)) { /* a bool too */
            for (int l = 0; l < n; l++)
                out[l] = v;
            return true;
        }
    } else if (!hr_gguf_get_arr(g, i, &et, &len) && len == (uint64_t)n) {
        bool ok = true;
        for (int l = 0; l < n && ok; l++)
            ok = !hr_gguf_arr_int(g, i, (uint64_t)l, &out[l]);
        if (ok)
            return true;
    }
    *rc = hr_err(err, HR_EFORMAT, "%s: key '%s' must be a number or %d integers",
                 hr_gguf_path(g), k, n);
    return false;
}

int hr__gguf_gemma4_config(const hr_gguf *g, const char *arch, json_t *cfg, hr_error *err) {
    const char *path = hr_gguf_path(g);
    json_t *nlj = json_object_get(cfg, "num_hidden_layers");
    int nl = json_is_integer(nlj) ? (int)json_integer_value(nlj) : 0, rc = 0;
    if (nl <= 0 || nl > HR_MAX_LAYERS)
        return 0; /* config.c names the field */
    json_object_set_new(cfg, "hidden_activation", json_string("gelu_pytorch_tanh"));
    /* head sizes: config head_dim is the sliding layers' (key_length_swa),
     * global_head_dim the full layers' (key_length, else the same) */
    json_t *dj = json_object_get(cfg, "hidden_size"), *hj = json_object_get(cfg, "num_attention_heads");
    double kl = json_is_integer(dj) && json_integer_value(hj) > 0
                    ? (double)(json_integer_value(dj) / json_integer_value(hj))
                    : 0,
           kls, rds, v;
    num(g, arch, "attention.key_length", &kl);
    if (!num(g, arch, "attention.key_length_swa", &kls))
        kls = kl;
    if (kl > 0) {
        json_object_set_new(cfg, "global_head_dim", json_integer((json_int_t)kl));
        json_object_set_new(cfg, "head_dim", json_integer((json_int_t)kls));
    }
    if (num(g, arch, "rope.dimension_count_swa", &rds) && rds != kls)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: rope.dimension_count_swa "
                      "%g is not the sliding layers' head dimension %g (partial rotary)",
                      path, rds, kls);
    /* sliding layers */
    int64_t *swa = calloc((size_t)nl, sizeof *swa), *kv = calloc((size_t)nl, sizeof *kv);
    if (!swa || !kv) {
        free(swa);
        free(kv);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    if (!per_layer(g, arch, "attention.sliding_window_pattern", nl, swa, &rc, err) && !rc)
        rc = hr_err(err, HR_EFORMAT, "%s: missing key '%s.attention.sliding_window_pattern'",
                    path, arch);
    json_t *lt = json_array();
    for (int l = 0; l < nl; l++)
        json_array_append_new(lt, json_string(swa[l] ? "sliding_attention" : "full_attention"));
    json_object_set_new(cfg, "layer_types", lt);
    if (num(g, arch, "attention.sliding_window", &v))
        json_object_set_new(cfg, "sliding_window", json_integer((json_int_t)v));
    /* KV heads per layer: the sliding layers', then the full layers' (V is
     * K's projection where attn_v is absent) */
    if (!rc && per_layer(g, arch, "attention.head_count_kv", nl, kv, &rc, err)) {
        int64_t local = -1, global = -1;
        for (int l = 0; l < nl && !rc; l++) {
            int64_t *want = swa[l] ? &local : &global;
            if (*want >= 0 && *want != kv[l])
                rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: %s layers with "
                            "different head_count_kv (%lld, %lld)", path,
                            swa[l] ? "sliding" : "full-attention", (long long)*want,
                            (long long)kv[l]);
            *want = kv[l];
        }
        json_object_set_new(cfg, "num_key_value_heads", json_integer(local >= 0 ? local : global));
        bool k_eq_v = false;
        for (int l = 0; l < nl && !k_eq_v; l++) {
            char t[64];
            snprintf(t, sizeof t, "blk.%d.attn_v.weight", l);
            k_eq_v = !swa[l] && !hr_gguf_find_tensor(g, t);
        }
        json_object_set_new(cfg, "attention_k_eq_v", json_boolean(k_eq_v));
        if (global >= 0)
            json_object_set_new(cfg, "num_global_key_value_heads", json_integer(global));
        if (!rc && !k_eq_v && global >= 0 && local >= 0 && global != local)
            rc = hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: full-attention layers "
                        "with %lld KV heads and a value projection, the others %lld", path,
                        (long long)global, (long long)local);
    }
    free(swa);
    free(kv);
    if (rc)
        return rc;
    static const struct {
        const char *key, *field;
    } counts[] = {{"attention.shared_kv_layers", "num_kv_shared_layers"},
                  {"embedding_length_per_layer_input", "hidden_size_per_layer_input"}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        json_object_set_new(cfg, counts[i].field,
                            json_integer(num(g, arch, counts[i].key, &v) ? (json_int_t)v : 0));
    /* llama.cpp caps at 30 (llama_hparams' default) unless the file says 0 */
    if (!num(g, arch, "final_logit_softcapping", &v))
        v = 30.0;
    if (v != 0)
        json_object_set_new(cfg, "final_logit_softcapping", json_real(v));
    json_object_set_new(cfg, "enable_moe_block",
                        json_boolean(num(g, arch, "expert_count", &v) && v > 0));
    /* RoPE per layer type; rope_freqs of ones is the default RoPE */
    const hr_gguf_tensor *rf = hr_gguf_find_tensor(g, "rope_freqs.weight");
    for (uint64_t i = 0; rf && i < rf->ne[0]; i++) {
        float x = 0;
        if (rf->type == 0 && rf->n_dims == 1)
            memcpy(&x, (const float *)rf->data + i, 4);
        if (x != 1.0f)
            return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: rope_freqs.weight "
                          "other than ones (transformers' proportional RoPE on the "
                          "full-attention layers)", path);
    }
    double theta = 10000, swa_theta;
    num(g, arch, "rope.freq_base", &theta);
    swa_theta = theta;
    num(g, arch, "rope.freq_base_swa", &swa_theta);
    json_t *sc = json_object_get(cfg, "rope_scaling");
    json_t *full = sc ? json_deep_copy(sc) : json_pack("{s:s}", "rope_type", "default");
    json_object_set_new(full, "rope_theta", json_real(theta));
    json_object_del(cfg, "rope_scaling");
    json_object_set_new(cfg, "rope_parameters",
                        json_pack("{s:o,s:{s:s,s:f}}", "full_attention", full,
                                  "sliding_attention", "rope_type", "default", "rope_theta",
                                  swa_theta));
    return 0;
}

int hr__gguf_gemma4_keys(hr_gguf_w *g, const char *arch, const hr_hparams *hp,
                         hr__gguf_bufs *kb, hr_error *err) {
    const char *mt = hp->arch->model_type;
    char k[160];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
#define NOPE(...) hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of " __VA_ARGS__)
    if (hp->act != HR_ACT_GELU_TANH)
        return NOPE("%s with an activation other than gelu_pytorch_tanh (llama.cpp's %s "
                    "runs tanh GELU)", mt, arch);
    if (hp->rot_dim != hp->head_dim)
        return NOPE("%s with partial rotary embeddings", mt);
    const hr_rope_params *loc = hp->has_rope_local ? &hp->rope_local : &hp->rope;
    if (hp->rope.type != HR_ROPE_DEFAULT || loc->type != HR_ROPE_DEFAULT)
        return NOPE("%s with scaled RoPE", mt);
    if (hp->attn_scale != 1.0f || hp->attn_softcap != 0)
        return NOPE("%s with a scaled or capped q.k (llama.cpp's %s takes 1)", mt, arch);
    hr_gguf_w_u32(g, KEY("attention.key_length_swa"), (uint32_t)hp->head_dim);
    hr_gguf_w_u32(g, KEY("attention.value_length_swa"), (uint32_t)hp->head_dim);
    hr_gguf_w_u32(g, KEY("rope.dimension_count_swa"), (uint32_t)hp->rot_dim);
    hr_gguf_w_f32(g, KEY("rope.freq_base_swa"), (float)loc->theta);
    int32_t *swa = hr__gguf_keep(kb, (size_t)hp->n_layers * sizeof *swa);
    float *rf = hr__gguf_keep(kb, (size_t)hp->head_dim / 2 * sizeof *rf);
    if (!swa || !rf)
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (int i = 0; i < hp->n_layers; i++)
        swa[i] = hp->layer_sliding[i];
    hr_gguf_w_arr_i32(g, KEY("attention.sliding_window_pattern"), swa, (size_t)hp->n_layers);
    hr_gguf_w_u32(g, KEY("attention.sliding_window"), (uint32_t)hp->sliding_window);
    hr_gguf_w_u32(g, KEY("attention.shared_kv_layers"), 0);
    hr_gguf_w_u32(g, KEY("embedding_length_per_layer_input"), 0);
    /* always written: without it llama.cpp caps at 30 */
    hr_gguf_w_f32(g, KEY("final_logit_softcapping"), hp->final_softcap);
    if (hp->n_experts) { /* llama.cpp's gemma4 always renormalises the top k */
        hr_gguf_w_u32(g, KEY("expert_count"), (uint32_t)hp->n_experts);
        hr_gguf_w_u32(g, KEY("expert_used_count"), (uint32_t)hp->n_experts_used);
        hr_gguf_w_u32(g, KEY("expert_feed_forward_length"), (uint32_t)hp->d_ff_expert);
    }
    /* the full layers' RoPE divisors, which llama.cpp's loader requires:
     * ones, the default RoPE */
    for (int i = 0; i < hp->head_dim / 2; i++)
        rf[i] = 1.0f;
    uint64_t ne[1] = {(uint64_t)hp->head_dim / 2};
    hr_gguf_w_tensor(g, "rope_freqs.weight", 0, 1, ne, rf, (size_t)hp->head_dim / 2 * 4);
#undef NOPE
#undef KEY
    return 0;
}

int hr__gguf_gemma4_tensor(hr_gguf_w *g, const hr_hparams *hp, const hr_tensor *t,
                           hr_dtype type, hr__gguf_bufs *kb, hr_error *err) {
    int layer, used = 0;
    if (t->ndim != 3 || sscanf(t->name, "model.layers.%d.%n", &layer, &used) != 1 || !used)
        return 0;
    const char *part = t->name + used;
    bool down = !strcmp(part, "experts.down_proj");
    if (!down && strcmp(part, "experts.gate_up_proj"))
        return 0;
    int64_t E = t->shape[0], rows = t->shape[1], cols = t->shape[2];
    if (E != hp->n_experts || rows != (down ? hp->d_model : 2 * (int64_t)hp->d_ff_expert))
        return hr_err(err, HR_EFORMAT, "tensor '%s' has shape [%lld, %lld, %lld]", t->name,
                      (long long)E, (long long)rows, (long long)cols);
    float *x = malloc((size_t)(E * rows * cols) * sizeof *x);
    if (!x)
        return hr_err(err, HR_ENOMEM, "out of memory");
    hr_tensor flat = *t;
    flat.ndim = 2;
    flat.shape[0] = E * rows;
    flat.shape[1] = cols;
    for (int64_t r = 0; r < E * rows; r++)
        hr_dequant_range(&flat, r, 0, cols, x + (size_t)r * cols);
    hr_dtype tt;
    size_t bytes;
    void *d = hr__gguf_rows_as(kb, x, E * rows, cols, type, &tt, &bytes);
    free(x);
    if (!d)
        return hr_err(err, HR_ENOMEM, "out of memory");
    char nm[96];
    snprintf(nm, sizeof nm, "blk.%d.%s.weight", layer, down ? "ffn_down_exps" : "ffn_gate_up_exps");
    uint64_t ne[3] = {(uint64_t)cols, (uint64_t)rows, (uint64_t)E};
    hr_gguf_w_tensor(g, nm, hr__gguf_ggml_type(tt), 3, ne, d, bytes);
    return 1;
}
