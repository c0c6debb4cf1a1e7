/* Gemma-3's SigLIP tower and multi-modal projector (model/vision.h). */
#include "model/vision.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "model/names.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct vlayer {
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;          /* (d) */
    hr_tensor q, k, v, o, fc1, fc2;                /* (out, in) */
    float *q_b, *k_b, *v_b, *o_b, *fc1_b, *fc2_b;  /* (out) */
} vlayer;

struct hr_vision {
    hr_vision_cfg c;
    hr_tensor patch;        /* (d, channels * patch * patch): the conv as a product */
    float *patch_b;         /* (d) */
    float *pos;             /* (n_patches, d) */
    vlayer *layers;         /* [n_layers] */
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

typedef struct binder {
    const hr_weights *w;
    const char *prefix; /* the layout's (names.h), NULL: not found */
    hr_error *err;
    int rc;
} binder;

/* The layout of one component: the first of prefixes that holds probe;
 * none is an error naming what was looked for. */
static void layout(binder *b, const char *what, const char *const *prefixes, const char *probe) {
    if (b->rc || (b->prefix = hr__weights_prefix(b->w, prefixes, probe)))
        return;
    char tried[256] = "";
    size_t o = 0;
    for (const char *const *p = prefixes; *p && o < sizeof tried; p++)
        o += (size_t)snprintf(tried + o, sizeof tried - o, "%s%s", o ? ", " : "", *p);
    b->rc = hr_err(b->err, HR_EFORMAT, "the weights have no %s: no %s under any of %s", what,
                   probe, tried);
}

static const hr_tensor *find(binder *b, const char *name, int64_t d0, int64_t d1) {
    if (b->rc)
        return NULL;
    char full[320];
    snprintf(full, sizeof full, "%s%s", b->prefix, name);
    const hr_tensor *t = hr_weights_find(b->w, full);
    if (!t) {
        b->rc = hr_err(b->err, HR_EFORMAT, "the weights have no %s", full);
        return NULL;
    }
    int64_t n = hr_tensor_numel(t);
    if (hr_dtype_is_quant(t->dtype) || (d1 ? n != d0 * d1 : n != d0)) {
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: unexpected shape or type for (%lld, %lld)", t->name,
                       (long long)d0, (long long)d1);
        return NULL;
    }
    return t;
}

static float *to_f32(binder *b, const hr_tensor *t) {
    if (!t)
        return NULL;
    int64_t n = hr_tensor_numel(t);
    float *o = malloc(sizeof(float) * (size_t)n);
    if (!o) {
        b->rc = hr_err(b->err, HR_ENOMEM, "out of memory");
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case HR_DTYPE_F32: o[i] = ((const float *)t->data)[i]; break;
        case HR_DTYPE_BF16: o[i] = hr_bf16_to_f32(((const uint16_t *)t->data)[i]); break;
        case HR_DTYPE_F16: o[i] = hr_f16_to_f32(((const uint16_t *)t->data)[i]); break;
        default:
            free(o);
            b->rc = hr_err(b->err, HR_EFORMAT, "%s: dtype %s is not a float", t->name,
                           hr_dtype_name(t->dtype));
            return NULL;
        }
    }
    return o;
}

static float *vec(binder *b, const char *name, int64_t d) {
    return to_f32(b, find(b, name, d, 0));
}

static hr_tensor mat(binder *b, const char *name, int64_t rows, int64_t cols) {
    hr_tensor m = {0};
    const hr_tensor *t = find(b, name, rows, cols);
    if (!t)
        return m;
    if (!hr_matmul_supports(t->dtype)) {
        b->rc = hr_err(b->err, HR_EUNSUPPORTED, "not supported yet: %s in %s", t->name,
                       hr_dtype_name(t->dtype));
        return m;
    }
    m = *t; /* a 2-D view (the patch conv's 4-D weight flattened) */
    m.ndim = 2;
    m.shape[0] = rows;
    m.shape[1] = cols;
    return m;
}

int hr_vision_new(hr_vision **out, const hr_vision_cfg *c, const hr_weights *w, hr_error *err) {
    *out = NULL;
    hr_vision *v = calloc(1, sizeof *v);
    if (!v || !(v->layers = calloc((size_t)(c->n_layers ? c->n_layers : 1), sizeof(vlayer)))) {
        free(v);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    v->c = *c;
    int64_t d = c->d, f = c->d_ff, pp = (int64_t)c->channels * c->patch_size * c->patch_size;
    int64_t np = (int64_t)(c->image_size / c->patch_size) * (c->image_size / c->patch_size);
    binder b = {.w = w, .err = err};
    layout(&b, "vision tower", hr__vision_tower_prefixes, "embeddings.patch_embedding.weight");
    v->patch = mat(&b, "embeddings.patch_embedding.weight", d, pp);
    v->patch_b = vec(&b, "embeddings.patch_embedding.bias", d);
    v->pos = vec(&b, "embeddings.position_embedding.weight", np * d);
    for (int l = 0; l < c->n_layers && !b.rc; l++) {
        vlayer *L = &v->layers[l];
        char n[160];
#define NAME(s) (snprintf(n, sizeof n, "encoder.layers.%d.%s", l, s), n)
        L->ln1_w = vec(&b, NAME("layer_norm1.weight"), d);
        L->ln1_b = vec(&b, NAME("layer_norm1.bias"), d);
        L->ln2_w = vec(&b, NAME("layer_norm2.weight"), d);
        L->ln2_b = vec(&b, NAME("layer_norm2.bias"), d);
        L->q = mat(&b, NAME("self_attn.q_proj.weight"), d, d);
        L->k = mat(&b, NAME("self_attn.k_proj.weight"), d, d);
        L->v = mat(&b, NAME("self_attn.v_proj.weight"), d, d);
        L->o = mat(&b, NAME("self_attn.out_proj.weight"), d, d);
        L->q_b = vec(&b, NAME("self_attn.q_proj.bias"), d);
        L->k_b = vec(&b, NAME("self_attn.k_proj.bias"), d);
        L->v_b = vec(&b, NAME("self_attn.v_proj.bias"), d);
        L->o_b = vec(&b, NAME("self_attn.out_proj.bias"), d);
        L->fc1 = mat(&b, NAME("mlp.fc1.weight"), f, d);
        L->fc2 = mat(&b, NAME("mlp.fc2.weight"), d, f);
        L->fc1_b = vec(&b, NAME("mlp.fc1.bias"), f);
        L->fc2_b = vec(&b, NAME("mlp.fc2.bias"), d);
#undef NAME
    }
    v->post_w = vec(&b, "post_layernorm.weight", d);
    v->post_b = vec(&b, "post_layernorm.bias", d);
    binder pb = {.w = w, .err = err, .rc = b.rc};
    layout(&pb, "multi-modal projector", hr__mm_projector_prefixes, "mm_input_projection_weight");
    v->mm_norm = vec(&pb, "mm_soft_emb_norm.weight", d);
    float *proj = vec(&pb, "mm_input_projection_weight", d * c->d_text); /* (d, d_text) */
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
    for (int l = 0; l < v->c.n_layers; l++) {
        vlayer *L = &v->layers[l];
        float *own[] = {L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b, L->q_b,  L->k_b,
                        L->v_b,   L->o_b,   L->fc1_b, L->fc2_b};
        for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
            free(own[i]);
    }
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

/* Full (bidirectional) attention of n tokens, one task per (head, query
 * rows share). q, k, v, out: (n, d), head h at columns [h*hd, (h+1)*hd). */
typedef struct attn_job {
    const float *q, *k, *v;
    float *out;
    int n, d, n_heads;
    float scale;
    float *scratch; /* nth * n floats */
} attn_job;

static void attn_task(void *ctx, int ith, int nth) {
    attn_job *a = ctx;
    int hd = a->d / a->n_heads;
    float *s = a->scratch + (size_t)ith * a->n;
    long lo, hi;
    hr_split((long)a->n * a->n_heads, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        int h = (int)(r / a->n), i = (int)(r % a->n);
        const float *qi = a->q + (size_t)i * a->d + (size_t)h * hd;
        for (int j = 0; j < a->n; j++) {
            const float *kj = a->k + (size_t)j * a->d + (size_t)h * hd;
            float dot = 0;
            for (int t = 0; t < hd; t++)
                dot += qi[t] * kj[t];
            s[j] = dot * a->scale;
        }
        hr_softmax(s, a->n);
        float *o = a->out + (size_t)i * a->d + (size_t)h * hd;
        memset(o, 0, sizeof(float) * (size_t)hd);
        for (int j = 0; j < a->n; j++) {
            const float *vj = a->v + (size_t)j * a->d + (size_t)h * hd;
            for (int t = 0; t < hd; t++)
                o[t] += s[j] * vj[t];
        }
    }
}

int hr_vision_encode(hr_vision *v, hr_pool *pool, const float *pixels, float *features,
                     float *hidden, hr_error *err) {
    const hr_vision_cfg *c = &v->c;
    int d = c->d, ps = c->patch_size, side = c->image_size / ps, n = side * side;
    int pp = c->channels * ps * ps, nth = hr_pool_size(pool);
    size_t S = (size_t)c->image_size;
    float *x = malloc(sizeof(float) * (size_t)n * d), *h = malloc(sizeof(float) * (size_t)n * d);
    float *q = malloc(sizeof(float) * (size_t)n * d), *k = malloc(sizeof(float) * (size_t)n * d);
    float *vv = malloc(sizeof(float) * (size_t)n * d), *a = malloc(sizeof(float) * (size_t)n * d);
    float *ff = malloc(sizeof(float) * (size_t)n * c->d_ff);
    float *patches = malloc(sizeof(float) * (size_t)n * pp);
    float *scratch = malloc(sizeof(float) * (size_t)n * (nth > 0 ? nth : 1));
    int rc = 0;
    if (!x || !h || !q || !k || !vv || !a || !ff || !patches || !scratch) {
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
    float scale = 1.0f / sqrtf((float)(d / c->n_heads));
    for (int l = 0; l < c->n_layers; l++) {
        const vlayer *L = &v->layers[l];
        for (int i = 0; i < n; i++)
            hr_layernorm(h + (size_t)i * d, x + (size_t)i * d, L->ln1_w, L->ln1_b, d, c->ln_eps);
        hr_matmul(pool, q, d, h, d, n, &L->q, L->q_b);
        hr_matmul(pool, k, d, h, d, n, &L->k, L->k_b);
        hr_matmul(pool, vv, d, h, d, n, &L->v, L->v_b);
        attn_job job = {.q = q, .k = k, .v = vv, .out = a, .n = n, .d = d,
                        .n_heads = c->n_heads, .scale = scale, .scratch = scratch};
        hr_pool_run(pool, attn_task, &job);
        hr_matmul(pool, h, d, a, d, n, &L->o, L->o_b);
        for (size_t i = 0; i < (size_t)n * d; i++)
            x[i] += h[i];
        for (int i = 0; i < n; i++)
            hr_layernorm(h + (size_t)i * d, x + (size_t)i * d, L->ln2_w, L->ln2_b, d, c->ln_eps);
        hr_matmul(pool, ff, c->d_ff, h, d, n, &L->fc1, L->fc1_b);
        hr_gelu_tanh_mul(ff, NULL, n * c->d_ff);
        hr_matmul(pool, h, d, ff, c->d_ff, n, &L->fc2, L->fc2_b);
        for (size_t i = 0; i < (size_t)n * d; i++)
            x[i] += h[i];
    }
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
    free(scratch);
    return rc;
}
