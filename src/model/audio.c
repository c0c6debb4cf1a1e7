/* Qwen2-Audio's encoder and projector (model/audio.h). */
#include "model/audio.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "model/names.h"
#include "model/vit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct hr_audio_enc {
    hr_audio_enc_cfg c;
    hr_tensor conv1, conv2;   /* (d, n_mels * 3), (d, d * 3): the convs as products */
    float *conv1_b, *conv2_b; /* (d) */
    float *pos;               /* (max_pos, d) */
    hr_enc_layer *layers;           /* [n_layers] */
    float *ln_w, *ln_b;       /* (d): the final layer_norm */
    hr_tensor proj;           /* (d_text, d) */
    float *proj_b;            /* (d_text) */
};

/* ---- config ------------------------------------------------------------------------- */

static int geti(const json_t *o, const char *k, int dflt) {
    const json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

int hr_audio_enc_cfg_from_json(hr_audio_enc_cfg *c, const json_t *cfg, int d_text, hr_error *err) {
    const json_t *ac = json_object_get(cfg, "audio_config");
    if (!json_is_object(ac))
        return hr_err(err, HR_ENOTFOUND, "config.json has no audio_config");
    const char *mt = json_string_value(json_object_get(ac, "model_type"));
    if (mt && strcmp(mt, "qwen2_audio_encoder"))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: audio encoders of type '%s' "
                      "(qwen2_audio_encoder is)", mt);
    *c = (hr_audio_enc_cfg){
        .n_mels = geti(ac, "num_mel_bins", 128), .d = geti(ac, "d_model", 1280),
        .n_layers = geti(ac, "encoder_layers", 32), .n_heads = geti(ac, "encoder_attention_heads", 20),
        .d_ff = geti(ac, "encoder_ffn_dim", 5120), .max_pos = geti(ac, "max_source_positions", 1500),
        .ln_eps = 1e-5f, .d_text = d_text};
    const char *act = json_string_value(json_object_get(ac, "activation_function"));
    if (act && strcmp(act, "gelu"))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: audio activation_function '%s'",
                      act);
    if (c->n_mels < 1 || c->n_mels > 512 || c->d < 1 || c->d > 16384 || c->n_layers < 0 ||
        c->n_layers > 256 || c->n_heads < 1 || c->d % c->n_heads || c->d_ff < 1 ||
        c->max_pos < 1 || c->max_pos > 65536 || c->d_text < 1)
        return hr_err(err, HR_EFORMAT, "config.json: audio_config has out-of-range sizes");
    return 0;
}

/* ---- binding ------------------------------------------------------------------------ */

static const char *const tower_prefixes[] = {"audio_tower.", "model.audio_tower.", NULL};

int hr_audio_enc_new(hr_audio_enc **out, const hr_audio_enc_cfg *c, const hr_weights *w,
                     hr_error *err) {
    *out = NULL;
    hr_audio_enc *a = calloc(1, sizeof *a);
    if (!a || !(a->layers = calloc((size_t)(c->n_layers ? c->n_layers : 1), sizeof(hr_enc_layer)))) {
        free(a);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    a->c = *c;
    int64_t d = c->d, f = c->d_ff;
    hr_vbind b = {.w = w, .err = err};
    hr__vbind_layout(&b, "audio tower", tower_prefixes, "conv1.weight");
    a->conv1 = hr__vbind_mat(&b, "conv1.weight", d, (int64_t)c->n_mels * 3);
    a->conv1_b = hr__vbind_vec(&b, "conv1.bias", d, 0);
    a->conv2 = hr__vbind_mat(&b, "conv2.weight", d, d * 3);
    a->conv2_b = hr__vbind_vec(&b, "conv2.bias", d, 0);
    a->pos = hr__vbind_vec(&b, "embed_positions.weight", c->max_pos, d);
    static const hr_enc_names names = {"self_attn_layer_norm", "final_layer_norm",
                                       "self_attn.q_proj", "self_attn.k_proj",
                                       "self_attn.v_proj", "self_attn.out_proj", "fc1", "fc2",
                                       false}; /* Whisper's k_proj has no bias */
    for (int l = 0; l < c->n_layers && !b.rc; l++)
        hr__enc_layer_bind(&b, &a->layers[l], "layers", l, &names, d, f);
    a->ln_w = hr__vbind_vec(&b, "layer_norm.weight", d, 0);
    a->ln_b = hr__vbind_vec(&b, "layer_norm.bias", d, 0);
    hr_vbind pb = {.w = w, .err = err, .rc = b.rc};
    hr__vbind_layout(&pb, "multi-modal projector", hr__mm_projector_prefixes, "linear.weight");
    a->proj = hr__vbind_mat(&pb, "linear.weight", c->d_text, d);
    a->proj_b = hr__vbind_vec(&pb, "linear.bias", c->d_text, 0);
    if (pb.rc) {
        hr_audio_enc_free(a);
        return pb.rc;
    }
    *out = a;
    return 0;
}

void hr_audio_enc_free(hr_audio_enc *a) {
    if (!a)
        return;
    for (int l = 0; l < a->c.n_layers; l++)
        hr__enc_layer_free(&a->layers[l]);
    free(a->layers);
    free(a->conv1_b);
    free(a->conv2_b);
    free(a->pos);
    free(a->ln_w);
    free(a->ln_b);
    free(a->proj_b);
    free(a);
}

const hr_audio_enc_cfg *hr_audio_enc_config(const hr_audio_enc *a) { return &a->c; }

int hr_audio_enc_tokens(int frames) {
    if (frames < 3)
        return 0; /* Python: ((f - 1) // 2 + 1 - 2) // 2 + 1 <= 0 */
    return ((frames - 1) / 2 + 1 - 2) / 2 + 1;
}

/* ---- the forward pass ---------------------------------------------------------------- */

/* rows[i] = the kernel-3 window of src around position stride * i, zero
 * past [0, len): src is (len, ch) when time_major, else (ch, ld) */
static void im2col(float *rows, int n, int ch, const float *src, int len, int ld, int stride,
                   bool time_major) {
    for (int i = 0; i < n; i++) {
        float *r = rows + (size_t)i * ch * 3;
        for (int k = 0; k < 3; k++) {
            int t = stride * i + k - 1;
            bool in = t >= 0 && t < len;
            for (int c = 0; c < ch; c++)
                r[c * 3 + k] = !in ? 0.0f
                               : time_major ? src[(size_t)t * ch + c]
                                            : src[(size_t)c * ld + t];
        }
    }
}

int hr_audio_enc_encode(hr_audio_enc *a, hr_pool *pool, const float *mel, int frames,
                        float *features, float *hidden, hr_error *err) {
    const hr_audio_enc_cfg *c = &a->c;
    int T = 2 * c->max_pos, tokens = hr_audio_enc_tokens(frames);
    if (frames < 1 || frames > T || tokens < 1)
        return hr_err(err, HR_EINVAL, "an audio clip of %d mel frames gives no audio tokens "
                      "(3 to %d frames do)", frames, T);
    int d = c->d, n = (frames - 1) / 2 + 1, n1 = 2 * n; /* conv2's positions, conv1's needed */
    if (n1 > T)
        n1 = T;
    size_t rows_n = (size_t)n1 * c->n_mels * 3 > (size_t)n * d * 3 ? (size_t)n1 * c->n_mels * 3
                                                                   : (size_t)n * d * 3;
    float *rows = malloc(sizeof(float) * rows_n), *h1 = malloc(sizeof(float) * (size_t)n1 * d);
    float *x = malloc(sizeof(float) * (size_t)n * d), *h = malloc(sizeof(float) * (size_t)n * d);
    float *q = malloc(sizeof(float) * (size_t)n * d), *k = malloc(sizeof(float) * (size_t)n * d);
    float *vv = malloc(sizeof(float) * (size_t)n * d), *att = malloc(sizeof(float) * (size_t)n * d);
    float *ff = malloc(sizeof(float) * (size_t)n * c->d_ff);
    int rc = 0;
    if (!rows || !h1 || !x || !h || !q || !k || !vv || !att || !ff) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    /* conv1 (padding 1) and GELU over the first n1 frames, conv2 (stride 2) and GELU */
    im2col(rows, n1, c->n_mels, mel, T, T, 1, false);
    hr_matmul(pool, h1, d, rows, c->n_mels * 3, n1, &a->conv1, a->conv1_b);
    hr_gelu_mul(h1, NULL, n1 * d);
    im2col(rows, n, d, h1, n1, 0, 2, true);
    hr_matmul(pool, x, d, rows, d * 3, n, &a->conv2, a->conv2_b);
    hr_gelu_mul(x, NULL, n * d);
    for (size_t i = 0; i < (size_t)n * d; i++)
        x[i] += a->pos[i];
    /* the encoder layers: pre-LN attention and MLP, residuals */
    hr_enc_scratch sc = {h, q, k, vv, att, ff};
    for (int l = 0; l < c->n_layers && !rc; l++)
        rc = hr__enc_layer_forward(pool, &a->layers[l], x, n, d, c->d_ff, c->n_heads, c->ln_eps,
                                   false, &sc, err);
    if (rc)
        goto done;
    /* average pool by 2, layer norm, projector */
    for (int t = 0; t < tokens; t++) {
        float *o = h + (size_t)t * d;
        const float *p0 = x + (size_t)(2 * t) * d, *p1 = p0 + d;
        for (int e = 0; e < d; e++)
            o[e] = (p0[e] + p1[e]) * 0.5f;
        hr_layernorm(o, o, a->ln_w, a->ln_b, d, c->ln_eps);
    }
    if (hidden)
        memcpy(hidden, h, sizeof(float) * (size_t)tokens * d);
    hr_matmul(pool, features, c->d_text, h, d, tokens, &a->proj, a->proj_b);
done:
    free(rows);
    free(h1);
    free(x);
    free(h);
    free(q);
    free(k);
    free(vv);
    free(att);
    free(ff);
    return rc;
}
