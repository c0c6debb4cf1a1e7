/* The encoders' shared pieces (model/vit.h). */
#include "model/vit.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "model/names.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- binding -------------------------------------------------------------------------- */

void hr__vbind_layout(hr_vbind *b, const char *what, const char *const *prefixes,
                      const char *probe) {
    if (b->rc || (b->prefix = hr__weights_prefix(b->w, prefixes, probe)))
        return;
    char tried[256] = "";
    size_t o = 0;
    for (const char *const *p = prefixes; *p && o < sizeof tried; p++)
        o += (size_t)snprintf(tried + o, sizeof tried - o, "%s%s", o ? ", " : "", *p);
    b->rc = hr_err(b->err, HR_EFORMAT, "the weights have no %s: no %s under any of %s", what,
                   probe, tried);
}

static const hr_tensor *find(hr_vbind *b, const char *name, int64_t d0, int64_t d1) {
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

float *hr__vbind_vec(hr_vbind *b, const char *name, int64_t d0, int64_t d1) {
    const hr_tensor *t = find(b, name, d0, d1);
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

hr_tensor hr__vbind_mat(hr_vbind *b, const char *name, int64_t rows, int64_t cols) {
    hr_tensor m = {0};
    const hr_tensor *t = find(b, name, rows, cols);
    if (!t)
        return m;
    if (!hr_matmul_supports(t->dtype)) {
        b->rc = hr_err(b->err, HR_EUNSUPPORTED, "not supported yet: %s in %s", t->name,
                       hr_dtype_name(t->dtype));
        return m;
    }
    m = *t; /* a 2-D view (a conv's weight flattened) */
    m.ndim = 2;
    m.shape[0] = rows;
    m.shape[1] = cols;
    return m;
}

/* ---- attention ------------------------------------------------------------------------ */

/* one task per (head, query rows share) */
typedef struct attn_job {
    const float *q, *k, *v;
    float *out;
    int ld, ldo, n, n_heads, hd;
    float scale;
    const int32_t *group;
    float *scratch; /* nth * n floats */
    int *idx;       /* nth * n ints: the keys a query sees */
} attn_job;

static void attn_task(void *ctx, int ith, int nth) {
    attn_job *a = ctx;
    float *s = a->scratch + (size_t)ith * a->n;
    int *idx = a->idx + (size_t)ith * a->n;
    long lo, hi;
    hr_split((long)a->n * a->n_heads, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        int h = (int)(r / a->n), i = (int)(r % a->n), hd = a->hd, m = 0;
        for (int j = 0; j < a->n; j++)
            if (!a->group || a->group[j] == a->group[i])
                idx[m++] = j;
        const float *qi = a->q + (size_t)i * a->ld + (size_t)h * hd;
        for (int u = 0; u < m; u++) {
            const float *kj = a->k + (size_t)idx[u] * a->ld + (size_t)h * hd;
            float dot = 0;
            for (int t = 0; t < hd; t++)
                dot += qi[t] * kj[t];
            s[u] = dot * a->scale;
        }
        hr_softmax(s, m);
        float *o = a->out + (size_t)i * a->ldo + (size_t)h * hd;
        memset(o, 0, sizeof(float) * (size_t)hd);
        for (int u = 0; u < m; u++) {
            const float *vj = a->v + (size_t)idx[u] * a->ld + (size_t)h * hd;
            for (int t = 0; t < hd; t++)
                o[t] += s[u] * vj[t];
        }
    }
}

int hr__vit_attention(hr_pool *pool, const float *q, const float *k, const float *v, int ld,
                      float *out, int ldo, int n, int n_heads, int hd, float scale,
                      const int32_t *group, hr_error *err) {
    int nth = hr_pool_size(pool);
    size_t per = (size_t)n * (size_t)(nth > 0 ? nth : 1);
    float *scratch = malloc(sizeof(float) * per);
    int *idx = malloc(sizeof(int) * per);
    if (!scratch || !idx) {
        free(scratch);
        free(idx);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    attn_job job = {.q = q, .k = k, .v = v, .out = out, .ld = ld, .ldo = ldo, .n = n,
                    .n_heads = n_heads, .hd = hd, .scale = scale, .group = group,
                    .scratch = scratch, .idx = idx};
    hr_pool_run(pool, attn_task, &job);
    free(scratch);
    free(idx);
    return 0;
}

/* ---- the pre-LN encoder layer --------------------------------------------------------- */

void hr__enc_layer_bind(hr_vbind *b, hr_enc_layer *L, const char *layers, int layer,
                        const hr_enc_names *nm, int d, int f) {
    char n[200];
#define NAME(s, suffix) (snprintf(n, sizeof n, "%s.%d.%s.%s", layers, layer, s, suffix), n)
    L->ln1_w = hr__vbind_vec(b, NAME(nm->ln1, "weight"), d, 0);
    L->ln1_b = hr__vbind_vec(b, NAME(nm->ln1, "bias"), d, 0);
    L->ln2_w = hr__vbind_vec(b, NAME(nm->ln2, "weight"), d, 0);
    L->ln2_b = hr__vbind_vec(b, NAME(nm->ln2, "bias"), d, 0);
    L->q = hr__vbind_mat(b, NAME(nm->q, "weight"), d, d);
    L->k = hr__vbind_mat(b, NAME(nm->k, "weight"), d, d);
    L->v = hr__vbind_mat(b, NAME(nm->v, "weight"), d, d);
    L->o = hr__vbind_mat(b, NAME(nm->o, "weight"), d, d);
    L->q_b = hr__vbind_vec(b, NAME(nm->q, "bias"), d, 0);
    L->k_b = nm->k_bias ? hr__vbind_vec(b, NAME(nm->k, "bias"), d, 0) : NULL;
    L->v_b = hr__vbind_vec(b, NAME(nm->v, "bias"), d, 0);
    L->o_b = hr__vbind_vec(b, NAME(nm->o, "bias"), d, 0);
    L->fc1 = hr__vbind_mat(b, NAME(nm->fc1, "weight"), f, d);
    L->fc2 = hr__vbind_mat(b, NAME(nm->fc2, "weight"), d, f);
    L->fc1_b = hr__vbind_vec(b, NAME(nm->fc1, "bias"), f, 0);
    L->fc2_b = hr__vbind_vec(b, NAME(nm->fc2, "bias"), d, 0);
#undef NAME
}

void hr__enc_layer_free(hr_enc_layer *L) {
    float *own[] = {L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b, L->q_b,
                    L->k_b,   L->v_b,   L->o_b,   L->fc1_b, L->fc2_b};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        free(own[i]);
}

int hr__enc_layer_forward(hr_pool *pool, const hr_enc_layer *L, float *x, int n, int d, int f,
                          int n_heads, float eps, bool gelu_tanh, const hr_enc_scratch *s,
                          hr_error *err) {
    float scale = 1.0f / sqrtf((float)(d / n_heads));
    for (int i = 0; i < n; i++)
        hr_layernorm(s->h + (size_t)i * d, x + (size_t)i * d, L->ln1_w, L->ln1_b, d, eps);
    hr_matmul(pool, s->q, d, s->h, d, n, &L->q, L->q_b);
    hr_matmul(pool, s->k, d, s->h, d, n, &L->k, L->k_b);
    hr_matmul(pool, s->v, d, s->h, d, n, &L->v, L->v_b);
    int rc = hr__vit_attention(pool, s->q, s->k, s->v, d, s->att, d, n, n_heads, d / n_heads,
                               scale, NULL, err);
    if (rc)
        return rc;
    hr_matmul(pool, s->h, d, s->att, d, n, &L->o, L->o_b);
    for (size_t i = 0; i < (size_t)n * d; i++)
        x[i] += s->h[i];
    for (int i = 0; i < n; i++)
        hr_layernorm(s->h + (size_t)i * d, x + (size_t)i * d, L->ln2_w, L->ln2_b, d, eps);
    hr_matmul(pool, s->ff, f, s->h, d, n, &L->fc1, L->fc1_b);
    if (gelu_tanh)
        hr_gelu_tanh_mul(s->ff, NULL, n * f);
    else
        hr_gelu_mul(s->ff, NULL, n * f);
    hr_matmul(pool, s->h, d, s->ff, f, n, &L->fc2, L->fc2_b);
    for (size_t i = 0; i < (size_t)n * d; i++)
        x[i] += s->h[i];
    return 0;
}
