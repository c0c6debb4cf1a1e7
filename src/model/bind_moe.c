/* Binding the mixture-of-experts and hybrid parts of a layer (model/bind.h):
 * routers and experts in their three layouts, gpt-oss's fused and MXFP4
 * experts, qwen3_next's gated q_proj and gated DeltaNet weights. */
#include "core/error.h"
#include "kernels/cpu/quant.h"
#include "model/bind.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------- */

static float elem(const hr_tensor *t, size_t i) {
    switch (t->dtype) {
    case HR_DTYPE_BF16: return hr_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case HR_DTYPE_F16: return hr_f16_to_f32(((const uint16_t *)t->data)[i]);
    default: {
        float f;
        memcpy(&f, (const float *)t->data + i, 4);
        return f;
    }
    }
}

/* A plain float tensor of exactly shape [d0, d1, d2] (d2 0: 2-D) */
static const hr_tensor *float_tensor(hr__binder *b, const char *name, int64_t d0, int64_t d1,
                                     int64_t d2) {
    const hr_tensor *t = hr__bind_find(b, name, true);
    if (!t)
        return NULL;
    int nd = d2 ? 3 : 2;
    if (t->ndim != nd || t->shape[0] != d0 || t->shape[1] != d1 || (d2 && t->shape[2] != d2)) {
        char got[96] = "", want[96];
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? ", " : "",
                     (long long)t->shape[i]);
        if (d2)
            snprintf(want, sizeof want, "%lld, %lld, %lld", (long long)d0, (long long)d1,
                     (long long)d2);
        else
            snprintf(want, sizeof want, "%lld, %lld", (long long)d0, (long long)d1);
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: tensor '%s' has shape [%s], expected [%s]",
                       hr__bind_file_of(b, t), name, got, want);
        return NULL;
    }
    if (t->dtype != HR_DTYPE_F32 && t->dtype != HR_DTYPE_BF16 && t->dtype != HR_DTYPE_F16) {
        b->rc = hr_err(b->err, HR_EUNSUPPORTED, "not supported yet: %s: tensor '%s' has "
                       "dtype %s", hr__bind_file_of(b, t), name, hr_dtype_name(t->dtype));
        return NULL;
    }
    return t;
}

static float *vec_space(hr__binder *b, size_t n) {
    if (b->vec_next + n > b->vec_end) {
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: too many vector tensors", b->m->path);
        return NULL;
    }
    float *p = b->vec_next;
    b->vec_next += n;
    return p;
}

static hr_tensor f32_matrix(float *data, int64_t rows, int64_t cols) {
    return (hr_tensor){.name = "converted", .dtype = HR_DTYPE_F32, .ndim = 2,
                       .shape = {rows, cols}, .data = data,
                       .nbytes = (size_t)rows * cols * sizeof(float)};
}

/* The hub's MXFP4 gpt-oss experts: gate_up_proj_blocks [E, 2ff, d/32, 16]
 * (rows: gate j at 2j, up j at 2j + 1) and down_proj_blocks [E, d, ff/32,
 * 16], with _scales [.., n/32]: rewritten as HR_DTYPE_MXFP4 rows in the
 * converted space, gate and up rows apart. */
static void bind_experts_mxfp4(hr__binder *b, hr_layer *L, const char *pre, int64_t E, int64_t d,
                               int64_t ff) {
    static const char *const part[2] = {"gate_up_proj", "down_proj"};
    for (int k = 0; k < 2 && !b->rc; k++) {
        int64_t rows = k ? d : 2 * ff, cols = k ? ff : d;
        char bn[256], sn[256];
        snprintf(bn, sizeof bn, "%sexperts.%s_blocks", pre, part[k]);
        snprintf(sn, sizeof sn, "%sexperts.%s_scales", pre, part[k]);
        const hr_tensor *bl = hr__bind_find(b, bn, true), *sc = hr__bind_find(b, sn, true);
        if (!bl || !sc)
            return;
        if (cols % 32 || bl->dtype != HR_DTYPE_U8 || sc->dtype != HR_DTYPE_U8 ||
            bl->ndim != 4 || bl->shape[0] != E || bl->shape[1] != rows ||
            bl->shape[2] != cols / 32 || bl->shape[3] != 16 || sc->ndim != 3 ||
            sc->shape[0] != E || sc->shape[1] != rows || sc->shape[2] != cols / 32) {
            b->rc = hr_err(b->err, HR_EFORMAT, "%s: '%s' / '%s' must be U8 [%lld, %lld, %lld, "
                           "16] / [%lld, %lld, %lld] (MXFP4)", hr__bind_file_of(b, bl), bn, sn,
                           (long long)E, (long long)rows, (long long)(cols / 32), (long long)E,
                           (long long)rows, (long long)(cols / 32));
            return;
        }
        size_t rb = (size_t)(cols / 32) * 17;
        for (int64_t e = 0; e < E; e++) {
            uint8_t *dst = (uint8_t *)b->conv_next;
            for (int64_t r = 0; r < rows; r++) {
                /* gate_up: gate rows first, then up rows */
                int64_t to = k ? r : (r % 2) * ff + r / 2;
                size_t at = (size_t)(e * rows + r) * (size_t)(cols / 32);
                hr_mxfp4_from_hub(dst + (size_t)to * rb, (const uint8_t *)bl->data + at * 16,
                                  (const uint8_t *)sc->data + at, cols / 32);
            }
            b->conv_next += (size_t)rows * rb;
            hr_tensor t = {.name = "converted", .dtype = HR_DTYPE_MXFP4, .ndim = 2,
                           .shape = {rows, cols}, .data = dst, .nbytes = (size_t)rows * rb};
            if (k) {
                L->e_down[e] = t;
            } else {
                L->e_gate[e] = hr_tensor_rows(&t, 0, ff);
                L->e_up[e] = hr_tensor_rows(&t, ff, ff);
            }
        }
    }
}

/* gpt_oss: experts.gate_up_proj [E, d, 2ff] (gate, up interleaved by column)
 * and experts.down_proj [E, ff, d], both x @ W: transposed once into f32
 * (out, in) matrices at b->conv_next; the biases [E, 2ff], [E, d] split the
 * same way. */
static void bind_experts_fused_t(hr__binder *b, hr_layer *L, const char *pre, int64_t E,
                                 int64_t d, int64_t ff) {
    char nm[256];
    snprintf(nm, sizeof nm, "%sexperts.gate_up_proj_blocks", pre);
    bool mxfp4 = hr_weights_find(b->m->weights, nm) != NULL;
    const hr_tensor *gu = NULL, *dn = NULL;
    if (!mxfp4) {
        snprintf(nm, sizeof nm, "%sexperts.gate_up_proj", pre);
        gu = float_tensor(b, nm, E, d, 2 * ff);
        snprintf(nm, sizeof nm, "%sexperts.down_proj", pre);
        dn = float_tensor(b, nm, E, ff, d);
    }
    snprintf(nm, sizeof nm, "%sexperts.gate_up_proj_bias", pre);
    const hr_tensor *gub = float_tensor(b, nm, E, 2 * ff, 0);
    snprintf(nm, sizeof nm, "%sexperts.down_proj_bias", pre);
    const hr_tensor *dnb = float_tensor(b, nm, E, d, 0);
    float *bg = gub ? vec_space(b, (size_t)(E * ff)) : NULL;
    float *bu = bg ? vec_space(b, (size_t)(E * ff)) : NULL;
    float *bd = bu && dnb ? vec_space(b, (size_t)(E * d)) : NULL;
    if (mxfp4 && bd)
        bind_experts_mxfp4(b, L, pre, E, d, ff);
    if (!bd || b->rc || (!mxfp4 && (!gu || !dn)))
        return;
    for (int64_t e = 0; e < E && !mxfp4; e++) {
        float *g = (float *)b->conv_next, *u = g + ff * d, *w = u + ff * d;
        b->conv_next = (char *)(w + d * ff);
        for (int64_t i = 0; i < d; i++)
            for (int64_t j = 0; j < ff; j++) {
                size_t at = (size_t)((e * d + i) * 2 * ff + 2 * j);
                g[j * d + i] = elem(gu, at);
                u[j * d + i] = elem(gu, at + 1);
            }
        for (int64_t j = 0; j < ff; j++)
            for (int64_t i = 0; i < d; i++)
                w[i * ff + j] = elem(dn, (size_t)((e * ff + j) * d + i));
        L->e_gate[e] = f32_matrix(g, ff, d);
        L->e_up[e] = f32_matrix(u, ff, d);
        L->e_down[e] = f32_matrix(w, d, ff);
    }
    for (int64_t e = 0; e < E; e++) {
        for (int64_t j = 0; j < ff; j++) {
            bg[e * ff + j] = elem(gub, (size_t)(e * 2 * ff + 2 * j));
            bu[e * ff + j] = elem(gub, (size_t)(e * 2 * ff + 2 * j + 1));
        }
        for (int64_t i = 0; i < d; i++)
            bd[e * d + i] = elem(dnb, (size_t)(e * d + i));
    }
    L->eb_gate = bg;
    L->eb_up = bu;
    L->eb_down = bd;
}

/* Bytes of the matrices the binding rewrites (an upper bound). */
size_t hr__bind_converted_bytes(const hr_model *m) {
    const hr_hparams *hp = &m->hp;
    size_t n = 0;
    if (hp->arch->moe.layout == HR_EXPERTS_FUSED_T && /* f32, or MXFP4 blocks; GGUF's are stacked */
        !hr_weights_find(m->weights, "model.layers.0.mlp.switch_mlp.gate_proj.weight"))
        n += (size_t)hp->n_layers * 3 * hp->n_experts * hp->d_ff_expert * hp->d_model *
             (hr_weights_find(m->weights, "model.layers.0.mlp.experts.gate_up_proj_blocks")
                  ? 1 : sizeof(float));
    if (hp->arch->attn_out_gate)
        for (int i = 0; i < hp->n_layers; i++) {
            char nm[96];
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj.weight", i);
            const char *part[] = {"weight", "scales", "biases"}; /* MLX affine: all 3 */
            for (int k = 0; k < 3 && !hp->layer_linear[i]; k++) {
                snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_proj.%s", i, part[k]);
                const hr_tensor *t = hr_weights_find(m->weights, nm);
                n += t ? (t->nbytes + 63) & ~(size_t)63 : 0;
            }
        }
    for (int i = 0; i < hp->n_layers; i++) /* GGUF qwen3next: attn_qkv + attn_gate */
        for (int k = 0; k < 2 && hp->layer_linear[i] && hp->arch->linear_deltanet; k++) {
            char nm[96];
            snprintf(nm, sizeof nm, "model.layers.%d.linear_attn.in_proj_%s.weight", i,
                     k ? "z" : "qkv");
            const hr_tensor *t = hr_weights_find(m->weights, nm);
            n += t ? (t->nbytes + 63) & ~(size_t)63 : 0;
        }
    return n;
}

/* Rows of rb bytes, per head [query (hd) | gate (hd)], copied to the
 * converted space as [every query row | every gate row]. */
static const void *permute_q_rows(hr__binder *b, const void *src, size_t rb, int64_t n_heads,
                                  int64_t hd) {
    char *dst = b->conv_next;
    for (int64_t h = 0; h < n_heads; h++) {
        memcpy(dst + (size_t)(h * hd) * rb, (const char *)src + (size_t)(2 * h * hd) * rb,
               (size_t)hd * rb);
        memcpy(dst + (size_t)((n_heads + h) * hd) * rb,
               (const char *)src + (size_t)((2 * h + 1) * hd) * rb, (size_t)hd * rb);
    }
    b->conv_next += ((size_t)2 * n_heads * hd * rb + 63) & ~(size_t)63;
    return dst;
}

/* qwen3_next's q_proj: per head [query (hd) | gate (hd)] rows, rewritten as
 * [every query row | every gate row] so that each half is one matrix. */
void hr__bind_gated_q(hr__binder *b, hr_layer *L, const char *name) {
    const hr_hparams *hp = &b->m->hp;
    int64_t hd = hp->head_dim, qd = hp->n_heads * hd, d = hp->d_model;
    hr_tensor t = hr__bind_matrix(b, name, 2 * qd, d);
    if (!t.data)
        return;
    t.data = permute_q_rows(b, t.data, hr_tensor_row_bytes(&t), hp->n_heads, hd);
    if (t.dtype == HR_DTYPE_AFFINE) { /* scales and biases: rows of cols/group */
        size_t sb = (size_t)(d / t.q.group) * hr_dtype_size(t.q.sdtype);
        t.q.scales = permute_q_rows(b, t.q.scales, sb, hp->n_heads, hd);
        t.q.biases = permute_q_rows(b, t.q.biases, sb, hp->n_heads, hd);
    }
    t.name = "converted";
    L->wq = hr_tensor_rows(&t, 0, qd);
    L->w_qgate = hr_tensor_rows(&t, qd, qd);
}

/* A float tensor of n elements whatever its shape (conv1d's [C, 1, K]), as
 * f32 in the vector space. */
static const float *flat_vec(hr__binder *b, const char *name, int64_t n) {
    const hr_tensor *t = hr__bind_find(b, name, true);
    if (!t)
        return NULL;
    if (hr_tensor_numel(t) != n || (t->dtype != HR_DTYPE_F32 && t->dtype != HR_DTYPE_BF16 &&
                                    t->dtype != HR_DTYPE_F16)) {
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: tensor '%s' must be %lld floats (f32, bf16, "
                       "f16)", hr__bind_file_of(b, t), name, (long long)n);
        return NULL;
    }
    float *v = vec_space(b, (size_t)n);
    for (int64_t i = 0; v && i < n; i++)
        v[i] = elem(t, (size_t)i);
    return v;
}

/* A = -exp(A_log) per head, from <pre>A_log (the hub's) or <pre>A (a
 * GGUF's ssm_a, which llama.cpp's converter stores as -exp(A_log) in f32:
 * the same floats as computed here). */
static const float *neg_a(hr__binder *b, const char *pre, int64_t n) {
    char nm[256];
    snprintf(nm, sizeof nm, "%sA", pre);
    if (hr_weights_find(b->m->weights, nm))
        return flat_vec(b, nm, n);
    snprintf(nm, sizeof nm, "%sA_log", pre);
    float *v = (float *)flat_vec(b, nm, n);
    for (int64_t i = 0; v && i < n; i++)
        v[i] = -expf(v[i]);
    return v;
}

/* qwen3_next's in_proj_qkvz from a GGUF's attn_qkv [q (all heads) | k | v]
 * and attn_gate [z]: their rows copied, in the hub's order per key head g
 * [q_g | k_g | v_g | z_g], to the converted space (the same rows: the same
 * products). */
static hr_tensor qkvz_from_split(hr__binder *b, const char *qkv_name, const char *z_name) {
    const hr_hparams *hp = &b->m->hp;
    int64_t d = hp->d_model, nk = hp->ln_k_heads, dk = hp->ln_k_dim,
            rv = (int64_t)hp->ln_v_heads / nk * hp->ln_v_dim, kd = nk * dk,
            vd = (int64_t)hp->ln_v_heads * hp->ln_v_dim;
    hr_tensor qkv = hr__bind_matrix(b, qkv_name, 2 * kd + vd, d);
    hr_tensor z = hr__bind_matrix(b, z_name, vd, d);
    if (!qkv.data || !z.data)
        return (hr_tensor){0};
    size_t rb = hr_tensor_row_bytes(&qkv);
    if (z.dtype != qkv.dtype || hr_tensor_row_bytes(&z) != rb || qkv.dtype == HR_DTYPE_AFFINE) {
        b->rc = hr_err(b->err, HR_EUNSUPPORTED, "not supported yet: '%s' (%s) and '%s' (%s) "
                       "of different types", qkv_name, hr_dtype_name(qkv.dtype), z_name,
                       hr_dtype_name(z.dtype));
        return (hr_tensor){0};
    }
    char *dst = b->conv_next, *o = dst;
    const char *q = qkv.data, *zz = z.data;
    for (int64_t g = 0; g < nk; g++) {
        memcpy(o, q + (size_t)(g * dk) * rb, (size_t)dk * rb), o += (size_t)dk * rb;
        memcpy(o, q + (size_t)(kd + g * dk) * rb, (size_t)dk * rb), o += (size_t)dk * rb;
        memcpy(o, q + (size_t)(2 * kd + g * rv) * rb, (size_t)rv * rb), o += (size_t)rv * rb;
        memcpy(o, zz + (size_t)(g * rv) * rb, (size_t)rv * rb), o += (size_t)rv * rb;
    }
    b->conv_next += ((size_t)(o - dst) + 63) & ~(size_t)63;
    hr_tensor t = qkv;
    t.name = "converted";
    t.shape[0] = 2 * kd + 2 * vd;
    t.data = dst;
    t.nbytes = (size_t)(o - dst);
    return t;
}

/* A gated DeltaNet layer's weights (linear_attn.*). */
void hr__bind_deltanet(hr__binder *b, hr_layer *L, const char *pre) {
    const hr_hparams *hp = &b->m->hp;
    int64_t d = hp->d_model, kd = (int64_t)hp->ln_k_heads * hp->ln_k_dim,
            vd = (int64_t)hp->ln_v_heads * hp->ln_v_dim, nv = hp->ln_v_heads;
    char nm[256];
#define LN(x) (snprintf(nm, sizeof nm, "%slinear_attn." x, pre), nm)
    if (hr_weights_find(b->m->weights, LN("in_proj_qkv.weight"))) { /* GGUF */
        char zn[256];
        snprintf(zn, sizeof zn, "%slinear_attn.in_proj_z.weight", pre);
        L->ln_qkvz = qkvz_from_split(b, LN("in_proj_qkv.weight"), zn);
    } else {
        L->ln_qkvz = hr__bind_matrix(b, LN("in_proj_qkvz.weight"), 2 * kd + 2 * vd, d);
    }
    L->ln_ba = hr__bind_matrix(b, LN("in_proj_ba.weight"), 2 * nv, d);
    L->ln_out = hr__bind_matrix(b, LN("out_proj.weight"), d, vd);
    L->ln_conv = flat_vec(b, LN("conv1d.weight"), (2 * kd + vd) * hp->ln_conv);
    L->ln_a = neg_a(b, LN(""), nv);
    L->ln_dt_bias = hr__bind_vec(b, LN("dt_bias"), nv, true);
    L->ln_norm = hr__bind_vec(b, LN("norm.weight"), hp->ln_v_dim, true);
#undef LN
}

/* A Mamba-2 mixer's weights (mamba.*). */
void hr__bind_mamba2(hr__binder *b, hr_layer *L, const char *pre) {
    const hr_hparams *hp = &b->m->hp;
    int64_t d = hp->d_model, I = hp->mb_inner, H = hp->mb_heads,
            C = I + 2 * (int64_t)hp->mb_groups * hp->mb_state;
    char nm[256];
#define MB(x) (snprintf(nm, sizeof nm, "%smamba." x, pre), nm)
    if (hr_weights_find(b->m->weights, MB("in_proj.bias")) ||
        hr_weights_find(b->m->weights, MB("out_proj.bias"))) {
        b->rc = hr_err(b->err, HR_EUNSUPPORTED, "not supported yet: Mamba-2 projections "
                       "with biases (mamba_proj_bias; '%s')", nm);
        return;
    }
    L->mb_in = hr__bind_matrix(b, MB("in_proj.weight"), I + C + H, d);
    L->mb_out = hr__bind_matrix(b, MB("out_proj.weight"), d, I);
    L->mb_conv = flat_vec(b, MB("conv1d.weight"), C * hp->mb_conv);
    L->mb_conv_b = hr__bind_vec(b, MB("conv1d.bias"), C, false);
    L->mb_a = neg_a(b, MB(""), H);
    L->mb_dt_bias = hr__bind_vec(b, MB("dt_bias"), H, true);
    L->mb_d = flat_vec(b, MB("D"), H); /* GGUF: [H, 1] */
    L->mb_norm = flat_vec(b, MB("norm.weight"), I); /* GGUF: [groups, I / groups] */
#undef MB
}

/* The routed MLP of layer il: router, experts, shared expert. */
void hr__bind_moe(hr__binder *b, int il) {
    const hr_hparams *hp = &b->m->hp;
    const hr_arch_moe *mo = &hp->arch->moe;
    hr_layer *L = &b->m->layers[il];
    int64_t E = hp->n_experts, d = hp->d_model, ff = hp->d_ff_expert;
    char pre[96], nm[256];
    snprintf(pre, sizeof pre, "model.layers.%d.%s%s", il, mo->block, *mo->block ? "." : "");
    snprintf(nm, sizeof nm, "%s%s.weight", pre, mo->router_name);
    L->router = hr__bind_matrix(b, nm, E, d);
    snprintf(nm, sizeof nm, "%s%s.bias", pre, mo->router_name);
    L->router_b = hr__bind_vec(b, nm, E, false);
    if (mo->router_scale) { /* gemma4: scale / sqrt(d), once here */
        snprintf(nm, sizeof nm, "%s%s", pre, mo->router_scale);
        float *v = (float *)flat_vec(b, nm, d);
        for (int64_t i = 0; v && i < d; i++)
            v[i] *= (float)(1.0 / sqrt((double)d));
        L->router_scale = v;
    }
    if (mo->expert_scale) {
        snprintf(nm, sizeof nm, "%s%s", pre, mo->expert_scale);
        L->expert_scale = flat_vec(b, nm, E);
    }
    if (mo->router == HR_ROUTER_SIGMOID_GROUPED) {
        snprintf(nm, sizeof nm, "%s%s.e_score_correction_bias", pre, mo->router_name);
        L->score_bias = hr__bind_vec(b, nm, E, true);
    }
    L->e_gate = b->m->experts + (size_t)il * 3 * E;
    L->e_up = L->e_gate + E;
    L->e_down = L->e_up + E;
    snprintf(nm, sizeof nm, "%sswitch_mlp.gate_proj.weight", pre);
    bool stacked = hr_weights_find(b->m->weights, nm) != NULL;
    if (mo->layout == HR_EXPERTS_FUSED_T && stacked) { /* GGUF gpt-oss: biases stacked too */
        const float **bias[3] = {&L->eb_gate, &L->eb_up, &L->eb_down};
        const char *part[3] = {"gate_proj", "up_proj", "down_proj"};
        for (int k = 0; k < 3 && !b->rc; k++) {
            snprintf(nm, sizeof nm, "%sswitch_mlp.%s.bias", pre, part[k]);
            *bias[k] = flat_vec(b, nm, E * (k == 2 ? d : ff));
        }
    }
    if (mo->layout == HR_EXPERTS_FUSED_T && !stacked) {
        bind_experts_fused_t(b, L, pre, E, d, ff);
    } else if (mo->layout == HR_EXPERTS_GATE_UP && !stacked) {
        /* [E, 2ff, d]: per expert its gate rows, then its up rows */
        snprintf(nm, sizeof nm, "%s%s", pre, mo->e_gate);
        hr_tensor in = hr__bind_matrix(b, nm, E * 2 * ff, d);
        snprintf(nm, sizeof nm, "%s%s", pre, mo->e_down);
        hr_tensor out = hr__bind_matrix(b, nm, E * d, ff);
        for (int64_t e = 0; e < E && !b->rc; e++) {
            L->e_gate[e] = hr_tensor_rows(&in, e * 2 * ff, ff);
            L->e_up[e] = hr_tensor_rows(&in, e * 2 * ff + ff, ff);
            L->e_down[e] = hr_tensor_rows(&out, e * d, d);
        }
    } else if (stacked || mo->layout == HR_EXPERTS_GATE_UP ||
               !hr_weights_find(b->m->weights, (snprintf(nm, sizeof nm, "%sexperts.0.%s.weight",
                                                         pre, mo->e_gate), nm))) {
        /* stacked [E, out, in]: mlx-lm's switch_mlp, GGUF's ffn_*_exps */
        const char *part[3] = {"gate_proj", "up_proj", "down_proj"};
        hr_tensor *dst[3] = {L->e_gate, L->e_up, L->e_down};
        for (int k = 0; k < 3 && !b->rc; k++) {
            int64_t rows = k == 2 ? d : ff, cols = k == 2 ? ff : d;
            snprintf(nm, sizeof nm, "%sswitch_mlp.%s.weight", pre, part[k]);
            hr_tensor all = hr__bind_matrix(b, nm, E * rows, cols);
            for (int64_t e = 0; e < E && !b->rc; e++)
                dst[k][e] = hr_tensor_rows(&all, e * rows, rows);
        }
    } else {
        for (int64_t e = 0; e < E && !b->rc; e++) {
            snprintf(nm, sizeof nm, "%sexperts.%lld.%s.weight", pre, (long long)e, mo->e_gate);
            L->e_gate[e] = hr__bind_matrix(b, nm, ff, d);
            snprintf(nm, sizeof nm, "%sexperts.%lld.%s.weight", pre, (long long)e, mo->e_up);
            L->e_up[e] = hr__bind_matrix(b, nm, ff, d);
            snprintf(nm, sizeof nm, "%sexperts.%lld.%s.weight", pre, (long long)e, mo->e_down);
            L->e_down[e] = hr__bind_matrix(b, nm, d, ff);
        }
    }
    int64_t sf = hp->d_ff_shared;
    if (mo->shared == HR_SHARED_PLAIN) {
        const char *part[3] = {"gate_proj", "up_proj", "down_proj"};
        hr_tensor *dst[3] = {&L->sh_gate, &L->sh_up, &L->sh_down};
        for (int k = 0; k < 3; k++) {
            snprintf(nm, sizeof nm, "%sshared_experts.%s.weight", pre, part[k]);
            *dst[k] = hr__bind_matrix(b, nm, k == 2 ? d : sf, k == 2 ? sf : d);
        }
    } else if (mo->shared == HR_SHARED_GRANITE &&
               hr_weights_find(b->m->weights, (snprintf(nm, sizeof nm, "model.layers.%d."
                                                        "shared_mlp.gate_proj.weight", il), nm))) {
        /* GGUF: ffn_gate_shexp, ffn_up_shexp apart */
        L->sh_gate = hr__bind_matrix(b, nm, sf, d);
        snprintf(nm, sizeof nm, "model.layers.%d.shared_mlp.up_proj.weight", il);
        L->sh_up = hr__bind_matrix(b, nm, sf, d);
        snprintf(nm, sizeof nm, "model.layers.%d.shared_mlp.output_linear.weight", il);
        L->sh_down = hr__bind_matrix(b, nm, d, sf);
    } else if (mo->shared == HR_SHARED_GRANITE) {
        snprintf(nm, sizeof nm, "model.layers.%d.shared_mlp.input_linear.weight", il);
        hr_tensor in = hr__bind_matrix(b, nm, 2 * sf, d);
        if (in.data) {
            L->sh_gate = hr_tensor_rows(&in, 0, sf);
            L->sh_up = hr_tensor_rows(&in, sf, sf);
        }
        snprintf(nm, sizeof nm, "model.layers.%d.shared_mlp.output_linear.weight", il);
        L->sh_down = hr__bind_matrix(b, nm, d, sf);
    } else if (mo->shared == HR_SHARED_GATED) {
        snprintf(nm, sizeof nm, "%sshared_expert.gate_proj.weight", pre);
        L->sh_gate = hr__bind_matrix(b, nm, sf, d);
        snprintf(nm, sizeof nm, "%sshared_expert.up_proj.weight", pre);
        L->sh_up = hr__bind_matrix(b, nm, sf, d);
        snprintf(nm, sizeof nm, "%sshared_expert.down_proj.weight", pre);
        L->sh_down = hr__bind_matrix(b, nm, d, sf);
        snprintf(nm, sizeof nm, "%sshared_expert_gate.weight", pre);
        const hr_tensor *gi = hr__bind_find(b, nm, true);
        if (gi && gi->ndim == 1 && gi->shape[0] == d) { /* GGUF: ffn_gate_inp_shexp [d] */
            L->sh_inp = *gi;
            L->sh_inp.ndim = 2;
            L->sh_inp.shape[0] = 1;
            L->sh_inp.shape[1] = d;
        } else if (gi) {
            L->sh_inp = hr__bind_matrix(b, nm, 1, d);
        }
    }
}

