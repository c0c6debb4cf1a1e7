/* Gemma-3's SigLIP tower and multi-modal projector (model/vision.h). */
#include "model/vision.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "model/names.h"
#include "model/vit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct hr_vision {
    hr_vision_cfg c;
    hr_tensor patch;        /* (d, channels * patch * patch): the conv as a product */
    float *patch_b;         /* (d) */
    float *pos;             /* (n_patches, d) */
    hr_enc_layer *layers;         /* [n_layers] */
    float *post_w, *post_b; /* (d) */
    float *mm_norm;         /* (d): Gemma RMSNorm weight (applied as 1 + w) */
    hr_tensor mm_proj;      /* (d_text, d): mm_input_projection_weight transposed, f32 */
    float *mm_proj_data;
};

/* ---- config ------------------------------------------------------------------------- */

static int geti(const json_t *o, const char *k, int dflt) {
    const json_t *v = json_object_get(o, k);
    return json_is_integer(v) ? (int)json_integer_value(v) : dflt;
}

int hr_vision_cfg_from_json(hr_vision_cfg *c, const json_t *cfg, hr_error *err) {
    const json_t *vc = json_object_get(cfg, "vision_config");
    if (!json_is_object(vc))
        return hr_err(err, HR_ENOTFOUND, "config.json has no vision_config");
    const char *mt = json_string_value(json_object_get(vc, "model_type"));
    if (mt && strcmp(mt, "siglip_vision_model"))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: vision towers of type '%s' "
                      "(siglip_vision_model is)", mt);
    *c = (hr_vision_cfg){
        .image_size = geti(vc, "image_size", 224), .patch_size = geti(vc, "patch_size", 16),
        .channels = geti(vc, "num_channels", 3), .d = geti(vc, "hidden_size", 768),
        .n_layers = geti(vc, "num_hidden_layers", 12), .n_heads = geti(vc, "num_attention_heads", 12),
        .d_ff = geti(vc, "intermediate_size", 3072), .ln_eps = 1e-6f,
        .mm_tokens = geti(cfg, "mm_tokens_per_image", 256),
        .d_text = geti(json_object_get(cfg, "text_config"), "hidden_size", 0)};
    const json_t *eps = json_object_get(vc, "layer_norm_eps");
    if (json_is_number(eps))
        c->ln_eps = (float)json_number_value(eps);
    const char *act = json_string_value(json_object_get(vc, "hidden_act"));
    if (act && strcmp(act, "gelu_pytorch_tanh"))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: vision hidden_act '%s'", act);
    if (json_is_true(json_object_get(vc, "vision_use_head")))
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: vision_use_head");
    if (c->image_size < 1 || c->patch_size < 1 || c->image_size % c->patch_size ||
        c->channels != 3 || c->d < 1 || c->n_layers < 0 || c->n_layers > 256 || c->n_heads < 1 ||
        c->d % c->n_heads || c->d_ff < 1 || c->d_text < 1 || c->image_size > 8192)
        return hr_err(err, HR_EFORMAT, "config.json: vision_config has out-of-range sizes");
    int per_side = c->image_size / c->patch_size, t = (int)lround(sqrt(c->mm_tokens));
    if (c->mm_tokens < 1 || t * t != c->mm_tokens || per_side % t)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: mm_tokens_per_image %d over a "
                      "%dx%d patch grid (a square that divides it is)", c->mm_tokens, per_side,
                      per_side);
    return 0;
}

/* ---- binding ------------------------------------------------------------------------ */

int hr_vision_new(hr_vision **out, const hr_vision_cfg *c, const hr_weights *w, hr_error *err) {
    *out = NULL;
    hr_vision *v = calloc(1, sizeof *v);
    if (!v || !(v->layers = calloc((size_t)(c->n_layers ? c->n_layers : 1), sizeof(hr_enc_layer)))) {
        free(v);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    v->c = *c;
    int64_t d = c->d, f = c->d_ff, pp = (int64_t)c->channels * c->patch_size * c->patch_size;
    int64_t np = (int64_t)(c->image_size / c->patch_size) * (c->image_size / c->patch_size);
    hr_vbind b = {.w = w, .err = err};
    hr__vbind_layout(&b, "vision tower", hr__vision_tower_prefixes, "embeddings.patch_embedding.weight");
    v->patch = hr__vbind_mat(&b, "embeddings.patch_embedding.weight", d, pp);
    v->patch_b = hr__vbind_vec(&b, "embeddings.patch_embedding.bias", d, 0);
    v->pos = hr__vbind_vec(&b, "embeddings.position_embedding.weight", np * d, 0);
    static const hr_enc_names names = {"layer_norm1", "layer_norm2", "self_attn.q_proj",
                                       "self_attn.k_proj", "self_attn.v_proj",
                                       "self_attn.out_proj", "mlp.fc1", "mlp.fc2", true};
    for (int l = 0; l < c->n_layers && !b.rc; l++)
        hr__enc_layer_bind(&b, &v->layers[l], "encoder.layers", l, &names, d, f);
    v->post_w = hr__vbind_vec(&b, "post_layernorm.weight", d, 0);
    v->post_b = hr__vbind_vec(&b, "post_layernorm.bias", d, 0);
    hr_vbind pb = {.w = w, .err = err, .rc = b.rc};
    hr__vbind_layout(&pb, "multi-modal projector", hr__mm_projector_prefixes, "mm_input_projection_weight");
    v->mm_norm = hr__vbind_vec(&pb, "mm_soft_emb_norm.weight", d, 0);
    float *proj = hr__vbind_vec(&pb, "mm_input_projection_weight", d * c->d_text, 0); /* (d, d_text) */
    if (!pb.rc) { /* x @ W as hr_matmul's x . W'^T: W' = W^T, (d_text, d) */
        v->mm_proj_data = malloc(sizeof(float) * (size_t)(d * c->d_text));
        if (!v->mm_proj_data) {
            pb.rc = hr_err(err, HR_ENOMEM, "out of memory");
        } else {
            for (int64_t i = 0; i < d; i++)
                for (int64_t j = 0; j < c->d_text; j++)
                    v->mm_proj_data[j * d + i] = proj[i * c->d_text + j];
            v->mm_proj = (hr_tensor){.name = "mm_input_projection_weight^T",
                                     .dtype = HR_DTYPE_F32, .ndim = 2,
                                     .shape = {c->d_text, d}, .data = v->mm_proj_data,
                                     .nbytes = sizeof(float) * (size_t)(d * c->d_text)};
        }
    }
    free(proj);
    if (pb.rc) {
        hr_vision_free(v);
        return pb.rc;
    }
    *out = v;
    return 0;
}

void hr_vision_free(hr_vision *v) {
    if (!v)
        return;
    for (int l = 0; l < v->c.n_layers; l++)
        hr__enc_layer_free(&v->layers[l]);
    free(v->layers);
    free(v->patch_b);
    free(v->pos);
    free(v->post_w);
    free(v->post_b);
    free(v->mm_norm);
    free(v->mm_proj_data);
    free(v);
}

const hr_vision_cfg *hr_vision_config(const hr_vision *v) { return &v->c; }

/* ---- the forward pass ---------------------------------------------------------------- */

int hr_vision_encode(hr_vision *v, hr_pool *pool, const float *pixels, float *features,
                     float *hidden, hr_error *err) {
    const hr_vision_cfg *c = &v->c;
    int d = c->d, ps = c->patch_size, side = c->image_size / ps, n = side * side;
    int pp = c->channels * ps * ps;
    size_t S = (size_t)c->image_size;
    float *x = malloc(sizeof(float) * (size_t)n * d), *h = malloc(sizeof(float) * (size_t)n * d);
    float *q = malloc(sizeof(float) * (size_t)n * d), *k = malloc(sizeof(float) * (size_t)n * d);
    float *vv = malloc(sizeof(float) * (size_t)n * d), *a = malloc(sizeof(float) * (size_t)n * d);
    float *ff = malloc(sizeof(float) * (size_t)n * c->d_ff);
    float *patches = malloc(sizeof(float) * (size_t)n * pp);
    int rc = 0;
    if (!x || !h || !q || !k || !vv || !a || !ff || !patches) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto done;
    }
    /* patch embedding: the stride-p conv as (n, c*p*p) . (d, c*p*p)^T */
    for (int py = 0; py < side; py++)
        for (int px = 0; px < side; px++) {
            float *row = patches + ((size_t)py * side + px) * pp;
            for (int ch = 0; ch < c->channels; ch++)
                for (int ky = 0; ky < ps; ky++)
                    memcpy(row + ((size_t)ch * ps + ky) * ps,
                           pixels + (size_t)ch * S * S + ((size_t)py * ps + ky) * S + (size_t)px * ps,
                           sizeof(float) * (size_t)ps);
        }
    hr_matmul(pool, x, d, patches, pp, n, &v->patch, v->patch_b);
    for (size_t i = 0; i < (size_t)n * d; i++)
        x[i] += v->pos[i];
    /* the encoder: pre-norm attention and MLP, residuals */
    hr_enc_scratch sc = {h, q, k, vv, a, ff};
    for (int l = 0; l < c->n_layers && !rc; l++)
        rc = hr__enc_layer_forward(pool, &v->layers[l], x, n, d, c->d_ff, c->n_heads, c->ln_eps,
                                   true, &sc, err);
    if (rc)
        goto done;
    for (int i = 0; i < n; i++)
        hr_layernorm(x + (size_t)i * d, x + (size_t)i * d, v->post_w, v->post_b, d, c->ln_eps);
    if (hidden)
        memcpy(hidden, x, sizeof(float) * (size_t)n * d);
    /* the projector: k x k average pool of the patch grid, RMSNorm, projection */
    int t = (int)lround(sqrt(c->mm_tokens)), kk = side / t;
    float inv = 1.0f / (float)(kk * kk);
    for (int ty = 0; ty < t; ty++)
        for (int tx = 0; tx < t; tx++) {
            float *o = h + ((size_t)ty * t + tx) * d;
            memset(o, 0, sizeof(float) * (size_t)d);
            for (int i = 0; i < kk; i++)
                for (int j = 0; j < kk; j++) {
                    const float *src = x + ((size_t)(ty * kk + i) * side + (size_t)(tx * kk + j)) * d;
                    for (int e = 0; e < d; e++)
                        o[e] += src[e];
                }
            for (int e = 0; e < d; e++)
                o[e] *= inv;
            hr_rmsnorm(o, o, v->mm_norm, 1.0f, d, c->ln_eps);
        }
    hr_matmul(pool, features, c->d_text, h, d, c->mm_tokens, &v->mm_proj, NULL);
done:
    free(x);
    free(h);
    free(q);
    free(k);
    free(vv);
    free(a);
    free(ff);
    free(patches);
    return rc;
}
