/* gpt-oss as GGUF (gguf_model.h), as llama.cpp's convert_hf_to_gguf.py
 * writes it and llama.cpp's openai-moe graph reads it: architecture
 * "gpt-oss", experts split into ffn_{gate,up,down}_exps [E, out, in] with
 * their biases (.bias [E, out]), the router with its bias
 * (ffn_gate_inp.weight / .bias), attention sinks (attn_sinks.weight),
 * post_attention_norm, MXFP4 experts as GGML type 39; sliding layers every
 * other one from layer 0 (llama.cpp's swa pattern 2), yarn RoPE. */
#include "core/error.h"
#include "io/gguf_write.h"
#include "kernels/cpu/quant.h"
#include "model/config.h"
#include "model/gguf_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGML_MXFP4 39u

static bool num(const hr_gguf *g, const char *arch, const char *suffix, double *v) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, suffix);
    int64_t i = hr_gguf_find(g, k), iv;
    if (i < 0)
        return false;
    if (!hr_gguf_get_int(g, i, &iv)) {
        *v = (double)iv;
        return true;
    }
    return !hr_gguf_get_float(g, i, v);
}

int hr__gguf_gptoss_config(const hr_gguf *g, const char *arch, json_t *cfg, hr_error *err) {
    json_object_set_new(cfg, "model_type", json_string("gpt_oss"));
    json_object_set_new(cfg, "attention_bias", json_true());
    double ff = 0, window = 0, theta = 150000, factor = 1, orig = 0;
    if (num(g, arch, "expert_feed_forward_length", &ff) && ff > 0)
        json_object_set_new(cfg, "intermediate_size", json_integer((json_int_t)ff));
    json_object_set_new(cfg, "swiglu_limit", json_real(7.0)); /* llama.cpp's, fixed */
    const json_t *nl = json_object_get(cfg, "num_hidden_layers");
    int n = json_is_integer(nl) ? (int)json_integer_value(nl) : 0;
    if (num(g, arch, "attention.sliding_window", &window) && window > 0) {
        json_t *lt = json_array();
        for (int i = 0; i < n && i < HR_MAX_LAYERS; i++) /* llama.cpp: set_swa_pattern(2) */
            json_array_append_new(lt, json_string(i % 2 == 0 ? "sliding_attention"
                                                             : "full_attention"));
        json_object_set_new(cfg, "layer_types", lt);
        json_object_set_new(cfg, "sliding_window", json_integer((json_int_t)window));
    }
    num(g, arch, "rope.freq_base", &theta);
    char k[128];
    snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
    const char *st;
    size_t sl;
    json_t *rp = json_pack("{s:s,s:f}", "rope_type", "default", "rope_theta", theta);
    if (!hr_gguf_key_str(g, k, &st, &sl) && sl == 4 && !memcmp(st, "yarn", 4)) {
        num(g, arch, "rope.scaling.factor", &factor);
        num(g, arch, "rope.scaling.original_context_length", &orig);
        if (factor <= 0 || orig <= 0) {
            json_decref(rp);
            return hr_err(err, HR_EFORMAT, "%s: yarn needs '%s.rope.scaling.factor' and "
                          "'.original_context_length'", hr_gguf_path(g), arch);
        }
        /* gpt-oss's own config: beta 32 / 1, truncate false */
        json_decref(rp);
        rp = json_pack("{s:s,s:f,s:f,s:i,s:f,s:f,s:b}", "rope_type", "yarn", "rope_theta", theta,
                       "factor", factor, "original_max_position_embeddings", (int)orig,
                       "beta_fast", 32.0, "beta_slow", 1.0, "truncate", 0);
    } else if (!hr_gguf_key_str(g, k, &st, &sl) && !(sl == 4 && !memcmp(st, "none", 4))) {
        json_decref(rp);
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s: gpt-oss rope scaling "
                      "'%.*s'", hr_gguf_path(g), (int)sl, st);
    }
    json_object_set_new(cfg, "rope_parameters", rp);
    return 0;
}

int hr__gguf_gptoss_keys(hr_gguf_w *g, const char *arch, const hr_hparams *hp, hr_error *err) {
    char k[160];
#define KEY(s) (snprintf(k, sizeof k, "%s." s, arch), k)
    for (int i = 0; i < hp->n_layers; i++)
        if (hp->layer_sliding[i] != (i % 2 == 0))
            return hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of gpt_oss "
                          "with these layer_types (llama.cpp's gpt-oss slides the even "
                          "layers)");
    if (hp->rope.type != HR_ROPE_DEFAULT &&
        (hp->rope.type != HR_ROPE_YARN || hp->rope.truncate || hp->rope.beta_fast != 32 ||
         hp->rope.beta_slow != 1 || hp->rope.attention_factor != 0))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of gpt_oss with "
                      "this RoPE (default, or yarn with beta 32/1 and truncate false are)");
    hr_gguf_w_u32(g, KEY("expert_count"), (uint32_t)hp->n_experts);
    hr_gguf_w_u32(g, KEY("expert_used_count"), (uint32_t)hp->n_experts_used);
    hr_gguf_w_u32(g, KEY("expert_feed_forward_length"), (uint32_t)hp->d_ff_expert);
    hr_gguf_w_u32(g, KEY("attention.sliding_window"), (uint32_t)hp->sliding_window);
    if (hp->rope.type == HR_ROPE_YARN) {
        hr_gguf_w_str(g, KEY("rope.scaling.type"), "yarn");
        hr_gguf_w_f32(g, KEY("rope.scaling.factor"), (float)hp->rope.factor);
        hr_gguf_w_u32(g, KEY("rope.scaling.original_context_length"),
                      (uint32_t)hp->rope.original_max_pos);
    }
#undef KEY
    return 0;
}

/* ---- the experts -------------------------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* rows x cols floats as GGUF rows of type (F16 when cols is no whole block);
 * the bytes in a kept buffer, the type written to *tt */
void *hr__gguf_rows_as(hr__gguf_bufs *kb, const float *x, int64_t rows, int64_t cols,
                       hr_dtype type, hr_dtype *tt, size_t *bytes) {
    int be, bb;
    hr_dtype_block(type, &be, &bb);
    if (cols % be) {
        type = HR_DTYPE_F16;
        hr_dtype_block(type, &be, &bb);
    }
    size_t rb = (size_t)(cols / be) * bb;
    unsigned char *d = hr__gguf_keep(kb, (size_t)rows * rb);
    if (!d)
        return NULL;
    for (int64_t r = 0; r < rows; r++) {
        const float *s = x + (size_t)r * cols;
        unsigned char *o = d + (size_t)r * rb;
        if (type == HR_DTYPE_F32)
            memcpy(o, s, (size_t)cols * 4);
        else if (type == HR_DTYPE_F16 || type == HR_DTYPE_BF16)
            for (int64_t c = 0; c < cols; c++) {
                uint16_t h = type == HR_DTYPE_F16 ? hr_f32_to_f16(s[c]) : hr_f32_to_bf16(s[c]);
                memcpy(o + 2 * c, &h, 2);
            }
        else
            hr_quant_gguf_row(type, s, cols, o);
    }
    *tt = type;
    *bytes = (size_t)rows * rb;
    return d;
}

static float at(const hr_tensor *t, size_t i) {
    float x;
    hr_dequant_range(&(hr_tensor){.dtype = t->dtype, .ndim = 2,
                                  .shape = {1, hr_tensor_numel(t)}, .data = t->data},
                     0, (int64_t)i, 1, &x);
    return x;
}

/* gate_up [E, d, 2ff] (x @ W, gate/up interleaved by column) or down
 * [E, ff, d] as stacked (out, in) matrices; biases [E, 2ff] / [E, d] split
 * the same way */
static int fused(hr_gguf_w *g, const char *blk, const hr_tensor *t, bool down, bool bias,
                 int64_t E, int64_t d, int64_t ff, hr_dtype type, hr__gguf_bufs *kb,
                 hr_error *err) {
    int64_t rows = down ? d : ff, cols = bias ? 1 : (down ? ff : d);
    float *x = malloc((size_t)E * rows * cols * sizeof *x);
    if (!x)
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (int part = 0; part < (down ? 1 : 2); part++) {
        for (int64_t e = 0; e < E; e++)
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++) {
                    size_t src = bias ? (down ? (size_t)(e * d + r)
                                              : (size_t)(e * 2 * ff + 2 * r + part))
                                 : down ? (size_t)((e * ff + c) * d + r)
                                        : (size_t)((e * d + c) * 2 * ff + 2 * r + part);
                    x[((size_t)e * rows + r) * cols + c] = at(t, src);
                }
        char name[160];
        snprintf(name, sizeof name, "%s.ffn_%s_exps.%s", blk, down ? "down" : part ? "up" : "gate",
                 bias ? "bias" : "weight");
        if (bias) {
            float *b = hr__gguf_keep(kb, (size_t)E * rows * 4);
            if (!b) {
                free(x);
                return hr_err(err, HR_ENOMEM, "out of memory");
            }
            memcpy(b, x, (size_t)E * rows * 4);
            uint64_t ne[2] = {(uint64_t)rows, (uint64_t)E};
            hr_gguf_w_tensor(g, name, 0, 2, ne, b, (size_t)E * rows * 4);
            continue;
        }
        hr_dtype tt;
        size_t bytes;
        void *data = hr__gguf_rows_as(kb, x, E * rows, cols, type, &tt, &bytes);
        if (!data) {
            free(x);
            return hr_err(err, HR_ENOMEM, "out of memory");
        }
        uint64_t ne[3] = {(uint64_t)cols, (uint64_t)rows, (uint64_t)E};
        hr_gguf_w_tensor(g, name, hr__gguf_ggml_type(tt), 3, ne, data, bytes);
    }
    free(x);
    return 0;
}

/* The hub's MXFP4 blocks [E, rows, cols/32, 16] and scales [E, rows, cols/32]
 * as GGML MXFP4 (gate_up: the gate rows, then the up rows, apart) */
static int mxfp4(hr_gguf_w *g, const char *blk, const hr_tensor *bl, const hr_tensor *sc,
                 bool down, int64_t E, int64_t d, int64_t ff, hr__gguf_bufs *kb,
                 hr_error *err) {
    int64_t rows = down ? d : 2 * ff, cols = down ? ff : d, ng = cols / 32;
    if (cols % 32 || bl->dtype != HR_DTYPE_U8 || sc->dtype != HR_DTYPE_U8 ||
        hr_tensor_numel(bl) != E * rows * ng * 16 || hr_tensor_numel(sc) != E * rows * ng)
        return hr_err(err, HR_EFORMAT, "'%s' / '%s': not MXFP4 blocks of [%lld, %lld, %lld]",
                      bl->name, sc->name, (long long)E, (long long)rows, (long long)cols);
    size_t rb = (size_t)ng * 17;
    for (int part = 0; part < (down ? 1 : 2); part++) {
        int64_t out_rows = down ? d : ff;
        unsigned char *dst = hr__gguf_keep(kb, (size_t)E * out_rows * rb);
        if (!dst)
            return hr_err(err, HR_ENOMEM, "out of memory");
        for (int64_t e = 0; e < E; e++)
            for (int64_t r = 0; r < out_rows; r++) {
                int64_t src = down ? r : 2 * r + part; /* gate j at 2j, up j at 2j + 1 */
                size_t a = (size_t)(e * rows + src) * (size_t)ng;
                hr_mxfp4_from_hub(dst + (size_t)(e * out_rows + r) * rb,
                                  (const uint8_t *)bl->data + a * 16,
                                  (const uint8_t *)sc->data + a, ng);
            }
        char name[160];
        snprintf(name, sizeof name, "%s.ffn_%s_exps.weight", blk,
                 down ? "down" : part ? "up" : "gate");
        uint64_t ne[3] = {(uint64_t)cols, (uint64_t)out_rows, (uint64_t)E};
        hr_gguf_w_tensor(g, name, GGML_MXFP4, 3, ne, dst, (size_t)E * out_rows * rb);
    }
    return 0;
}

int hr__gguf_gptoss_tensor(hr_gguf_w *g, const hr_weights *w, const hr_hparams *hp,
                           const hr_tensor *t, hr_dtype type, hr__gguf_bufs *kb,
                           hr_error *err) {
    int layer, used = 0;
    if (sscanf(t->name, "model.layers.%d.mlp.experts.%n", &layer, &used) != 1 || !used)
        return 0;
    const char *part = t->name + used;
    char blk[32];
    snprintf(blk, sizeof blk, "blk.%d", layer);
    int64_t E = hp->n_experts, d = hp->d_model, ff = hp->d_ff_expert;
    bool down = !strncmp(part, "down_proj", 9);
    if (!down && strncmp(part, "gate_up_proj", 12))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: GGUF export of tensor '%s'",
                      t->name);
    if (ends_with(part, "_scales"))
        return 1; /* with its blocks */
    if (ends_with(part, "_blocks")) {
        char sn[256];
        snprintf(sn, sizeof sn, "%.*s_scales", (int)(strlen(t->name) - 7), t->name);
        const hr_tensor *sc = hr_weights_find(w, sn);
        if (!sc)
            return hr_err(err, HR_EFORMAT, "'%s' has no '%s'", t->name, sn);
        int rc = mxfp4(g, blk, t, sc, down, E, d, ff, kb, err);
        return rc ? rc : 1;
    }
    bool bias = ends_with(part, "_bias");
    int64_t want = bias ? E * (down ? d : 2 * ff) : E * d * ff * (down ? 1 : 2);
    if (hr_tensor_numel(t) != want)
        return hr_err(err, HR_EFORMAT, "tensor '%s' has %lld elements, expected %lld", t->name,
                      (long long)hr_tensor_numel(t), (long long)want);
    int rc = fused(g, blk, t, down, bias, E, d, ff, type, kb, err);
    return rc ? rc : 1;
}
