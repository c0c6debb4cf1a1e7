#include "model/model.h"
#include "model/upload.h"
#include "core/bigmem.h"
#include "core/error.h"
#include "core/file.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/ops.h"
#include "model/bind.h"
#include "model/gguf_model.h"
#include "model/names.h"
#include "kernels/cpu/quant.h"

#include <stdio.h>
#include <xxhash.h>
#include <stdlib.h>
#include <string.h>

/* ---- binding helpers ------------------------------------------------------ */

typedef hr__binder binder;

static const char *file_of(binder *b, const hr_tensor *t) {
    /* a view (a 3-D tensor seen 2-D) names its file through the original */
    const hr_tensor *orig = t->name ? hr_weights_find(b->m->weights, t->name) : NULL;
    const char *p = hr_weights_file_of(b->m->weights, orig ? orig : t), *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static const hr_tensor *find(binder *b, const char *name, bool required) {
    if (b->rc)
        return NULL;
    const hr_tensor *t = hr__weights_lookup(b->m->weights, b->m->hp.arch, name);
    if (!t && required)
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: missing tensor '%s' (needed by %s)",
                       b->m->path, name, b->m->hp.arch->model_type);
    return t;
}

static bool shape_is(binder *b, const hr_tensor *t, int64_t d0, int64_t d1) {
    bool ok = d1 ? (t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == d1)
                 : (t->ndim == 1 && t->shape[0] == d0);
    if (!ok && !b->rc) {
        char got[96] = "", want[64];
        for (int i = 0; i < t->ndim; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld",
                     i ? ", " : "", (long long)t->shape[i]);
        if (d1)
            snprintf(want, sizeof want, "[%lld, %lld]", (long long)d0, (long long)d1);
        else
            snprintf(want, sizeof want, "[%lld]", (long long)d0);
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: tensor '%s' has shape [%s], expected %s",
                       file_of(b, t), t->name, got, want);
    }
    return ok;
}

/* The quantization of module `path` ("model.layers.0.mlp.down_proj"):
 * config.json's per-module entry when there is one, else the block's
 * defaults, as mlx-lm reads them. */
static void quant_params(binder *b, const char *path, int *bits, int *group) {
    const json_t *q = b->quant, *o = json_object_get(q, path);
    const json_t *src = json_is_object(o) ? o : q;
    json_t *jb = json_object_get(src, "bits"), *jg = json_object_get(src, "group_size");
    *bits = json_is_integer(jb) ? (int)json_integer_value(jb) : -1;
    *group = json_is_integer(jg) ? (int)json_integer_value(jg) : -1;
}

/* A 3-D tensor [E, R, C] (stacked experts: mlx-lm's switch_mlp, GGUF's
 * *_exps) seen as the 2-D [E * R, C] it is in memory; else t as it is. */
static hr_tensor flat2(const hr_tensor *t) {
    hr_tensor v = *t;
    if (t->ndim == 3) {
        v.ndim = 2;
        v.shape[0] = t->shape[0] * t->shape[1];
        v.shape[1] = t->shape[2];
        v.shape[2] = 0;
    }
    return v;
}

/* An MLX affine matrix (rows, cols) from `path`.weight (U32, packed),
 * `path`.scales and `path`.biases; every shape and dtype checked. */
static hr_tensor affine_matrix(binder *b, const char *name, const hr_tensor *w,
                               int64_t rows, int64_t cols) {
    hr_tensor v = {0};
    char path[256], sn[300], bn[300];
    size_t len = strlen(name);
    snprintf(path, sizeof path, "%.*s", (int)(len > 7 ? len - 7 : len), name); /* - ".weight" */
    snprintf(sn, sizeof sn, "%s.scales", path);
    snprintf(bn, sizeof bn, "%s.biases", path);
    const hr_tensor *sc0 = find(b, sn, true), *bi0 = find(b, bn, true);
    if (!sc0 || !bi0)
        return v;
    hr_tensor wf = flat2(w), scf = flat2(sc0), bif = flat2(bi0);
    const hr_tensor *sc = &scf, *bi = &bif;
    w = &wf;
    if (!b->quant) {
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: tensor '%s' is quantized (has '%s') but "
                       "config.json has no 'quantization' block", file_of(b, w), name, sn);
        return v;
    }
    int bits, group;
    quant_params(b, path, &bits, &group);
    const char *mode = json_string_value(json_object_get(b->quant, "mode"));
    if (mode && strcmp(mode, "affine")) {
        b->rc = hr_err(b->err, HR_EUNSUPPORTED, "not supported yet: quantization mode "
                       "'%s' (%s)", mode, path);
        return v;
    }
    if (bits != 2 && bits != 3 && bits != 4 && bits != 5 && bits != 6 && bits != 8) {
        b->rc = hr_err(b->err, HR_EUNSUPPORTED, "not supported yet: %s: %d-bit "
                       "quantization (2, 3, 4, 5, 6, 8 are)", path, bits);
        return v;
    }
    if (group != 32 && group != 64 && group != 128) {
        b->rc = hr_err(b->err, HR_EUNSUPPORTED, "not supported yet: %s: group size %d "
                       "(32, 64, 128 are)", path, group);
        return v;
    }
    if (cols % group || (cols * bits) % 32) {
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: %lld columns are not a whole number of "
                       "groups of %d", path, (long long)cols, group);
        return v;
    }
    if (!shape_is(b, w, rows, cols * bits / 32) || !shape_is(b, sc, rows, cols / group) ||
        !shape_is(b, bi, rows, cols / group))
        return v;
    if ((sc->dtype != HR_DTYPE_F32 && sc->dtype != HR_DTYPE_F16 && sc->dtype != HR_DTYPE_BF16) ||
        bi->dtype != sc->dtype) {
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: '%s' / '%s' must be one float dtype (%s, %s)",
                       file_of(b, sc), sn, bn, hr_dtype_name(sc->dtype), hr_dtype_name(bi->dtype));
        return v;
    }
    v = *w;
    v.dtype = HR_DTYPE_AFFINE;
    v.shape[1] = cols;
    v.q.scales = sc->data;
    v.q.biases = bi->data;
    v.q.sdtype = sc->dtype;
    v.q.bits = bits;
    v.q.group = group;
    return v;
}

/* A matrix (rows, cols) in any dtype hr_matmul takes: plain, GGUF blocks
 * (cols a whole number of blocks) or MLX affine. */
static hr_tensor any_matrix(binder *b, const char *name, int64_t rows, int64_t cols) {
    hr_tensor v = {0};
    const hr_tensor *t = find(b, name, true);
    if (!t)
        return v;
    if (t->dtype == HR_DTYPE_U32) {
        char sn[300];
        snprintf(sn, sizeof sn, "%.*s.scales", (int)(strlen(name) > 7 ? strlen(name) - 7 : 0), name);
        if (hr_weights_find(b->m->weights, sn))
            return affine_matrix(b, name, t, rows, cols);
    }
    hr_tensor tf = flat2(t);
    t = &tf;
    if (!shape_is(b, t, rows, cols))
        return v;
    if (!hr_matmul_supports(t->dtype)) {
        b->rc = hr_err(b->err, HR_EUNSUPPORTED, "not supported yet: %s: tensor '%s' "
                       "has dtype %s", file_of(b, t), name, hr_dtype_name(t->dtype));
        return v;
    }
    int bc = hr_tensor_block_cols(t);
    if (bc > 1 && cols % bc) {
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: tensor '%s': %lld columns are not a whole "
                       "number of %s blocks", file_of(b, t), name, (long long)cols,
                       hr_dtype_name(t->dtype));
        return v;
    }
    return *t;
}

/* A matrix (rows, cols); optionally rows [r0, r0+rows) of a fused tensor with
 * total_rows rows. */
static hr_tensor matrix_rows(binder *b, const char *name, int64_t total_rows,
                             int64_t r0, int64_t rows, int64_t cols) {
    hr_tensor t = any_matrix(b, name, total_rows, cols);
    if (!t.data)
        return t;
    return hr_tensor_rows(&t, r0, rows);
}

static hr_tensor matrix(binder *b, const char *name, int64_t rows, int64_t cols) {
    return matrix_rows(b, name, rows, 0, rows, cols);
}

/* A 1-D tensor of length n as f32, or NULL when absent and not required. */
static const float *vec(binder *b, const char *name, int64_t n, bool required) {
    const hr_tensor *t = find(b, name, required);
    if (!t || !shape_is(b, t, n, 0))
        return NULL;
    if (b->vec_next + n > b->vec_end) {
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: too many vector tensors", b->m->path);
        return NULL;
    }
    float *out = b->vec_next;
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case HR_DTYPE_F32: memcpy(&out[i], (const float *)t->data + i, 4); break;
        case HR_DTYPE_BF16: out[i] = hr_bf16_to_f32(((const uint16_t *)t->data)[i]); break;
        case HR_DTYPE_F16: out[i] = hr_f16_to_f32(((const uint16_t *)t->data)[i]); break;
        default:
            b->rc = hr_err(b->err, HR_EUNSUPPORTED, "not supported yet: %s: tensor "
                           "'%s' has dtype %s", file_of(b, t), name,
                           hr_dtype_name(t->dtype));
            return NULL;
        }
    }
    b->vec_next += n;
    return out;
}

/* the helpers model/bind.h shares with the other binding files */
const char *hr__bind_file_of(hr__binder *b, const hr_tensor *t) { return file_of(b, t); }
const hr_tensor *hr__bind_find(hr__binder *b, const char *name, bool required) {
    return find(b, name, required);
}
hr_tensor hr__bind_matrix(hr__binder *b, const char *name, int64_t rows, int64_t cols) {
    return matrix(b, name, rows, cols);
}
const float *hr__bind_vec(hr__binder *b, const char *name, int64_t n, bool required) {
    return vec(b, name, n, required);
}

/* n ones in the vector space (an unweighted norm's weight), or NULL */
static const float *ones(binder *b, int64_t n) {
    if (b->vec_next + n > b->vec_end) {
        b->rc = hr_err(b->err, HR_EFORMAT, "%s: too many vector tensors", b->m->path);
        return NULL;
    }
    float *out = b->vec_next;
    for (int64_t i = 0; i < n; i++)
        out[i] = 1.0f;
    b->vec_next += n;
    return out;
}

static hr_norm_w norm(binder *b, const char *prefix, const char *slot, int64_t d) {
    hr_norm_w n = {0};
    if (!slot)
        return n;
    char name[256];
    snprintf(name, sizeof name, "%s%s.weight", prefix, slot);
    n.w = vec(b, name, d, true);
    snprintf(name, sizeof name, "%s%s.bias", prefix, slot);
    n.b = vec(b, name, d, b->m->hp.arch->norm == HR_NORM_LAYER);
    return n;
}

/* ---- layers ---------------------------------------------------------------- */

static void bind_layer(binder *b, int il) {
    const hr_hparams *hp = &b->m->hp;
    const hr_arch *a = hp->arch;
    hr_layer *L = &b->m->layers[il];
    char pre[64], nm[256];
    snprintf(pre, sizeof pre, "model.layers.%d.", il);
    int64_t d = hp->d_model, qd = (int64_t)hp->n_heads * hp->head_dim,
            kvd = (int64_t)hp->n_kv_heads * hp->head_dim, ff = hp->d_ff;
#define NAME(fmt) (snprintf(nm, sizeof nm, "%s" fmt, pre), nm)
    if (hp->layer_linear[il] && a->mamba2) {
        hr__bind_mamba2(b, L, pre);
    } else if (hp->layer_linear[il]) {
        hr__bind_deltanet(b, L, pre);
    } else if (a->attn_out_gate) {
        hr__bind_gated_q(b, L, NAME("self_attn.q_proj.weight"));
        L->wk = matrix(b, NAME("self_attn.k_proj.weight"), kvd, d);
        L->wv = matrix(b, NAME("self_attn.v_proj.weight"), kvd, d);
    } else if (a->fused_qkv) {
        int64_t total = qd + 2 * kvd;
        L->wq = matrix_rows(b, NAME("self_attn.qkv_proj.weight"), total, 0, qd, d);
        L->wk = matrix_rows(b, nm, total, qd, kvd, d);
        L->wv = matrix_rows(b, nm, total, qd + kvd, kvd, d);
    } else {
        L->wq = matrix(b, NAME("self_attn.q_proj.weight"), qd, d);
        L->wk = matrix(b, NAME("self_attn.k_proj.weight"), kvd, d);
        /* gemma4 attention_k_eq_v: a full layer's values are its keys'
         * projection (before k_norm), it has no v_proj */
        L->wv = hp->k_eq_v && !hp->layer_sliding[il]
                    ? L->wk
                    : matrix(b, NAME("self_attn.v_proj.weight"), kvd, d);
        L->bq = vec(b, NAME("self_attn.q_proj.bias"), qd, false);
        L->bk = vec(b, NAME("self_attn.k_proj.bias"), kvd, false);
        L->bv = vec(b, NAME("self_attn.v_proj.bias"), kvd, false);
    }
    if (!hp->layer_linear[il]) {
        L->wo = matrix(b, NAME("self_attn.o_proj.weight"), d, qd);
        L->bo = vec(b, NAME("self_attn.o_proj.bias"), d, false);
    }
    if (a->qk_norm != HR_QK_NORM_NONE && !hp->layer_linear[il]) {
        bool full = a->qk_norm == HR_QK_NORM_FULL;
        L->q_norm = vec(b, NAME("self_attn.q_norm.weight"), full ? qd : hp->head_dim, true);
        L->k_norm = vec(b, NAME("self_attn.k_norm.weight"), full ? kvd : hp->head_dim, true);
    }
    bool beside = hp->layer_moe[il] && a->moe.beside_dense;
    const char *slots[HR_NORM_SLOTS] = {a->norms.pre_attn, a->norms.post_attn,
                                        a->norms.pre_mlp, a->norms.post_mlp,
                                        beside ? a->norms.post_dense : NULL,
                                        beside ? a->norms.pre_moe : NULL,
                                        beside ? a->norms.post_moe : NULL};
    for (int s = 0; s < HR_NORM_SLOTS; s++)
        L->norm[s] = norm(b, pre, slots[s], d);

    if (a->attn_sinks)
        L->sinks = vec(b, NAME("self_attn.sinks"), hp->n_heads, true);
    if (a->v_norm && !hp->layer_linear[il])
        L->v_norm = ones(b, hp->head_dim);
    if (a->layer_scalar) {
        const float *s = vec(b, NAME("layer_scalar"), 1, true);
        L->out_scale = s ? s[0] : 0;
    }
    if (hp->layer_moe[il]) {
        hr__bind_moe(b, il);
        if (!beside)
            return;
    }
    snprintf(nm, sizeof nm, "%smlp.%s.weight", pre, a->mlp_up);
    if (a->fused_gate_up) {
        L->w_gate = matrix_rows(b, nm, 2 * ff, 0, ff, d);
        L->w_up = matrix_rows(b, nm, 2 * ff, ff, ff, d);
    } else {
        L->w_up = matrix(b, nm, ff, d);
        snprintf(nm, sizeof nm, "%smlp.%s.bias", pre, a->mlp_up);
        L->b_up = vec(b, nm, ff, false);
        if (a->gated_mlp) {
            snprintf(nm, sizeof nm, "%smlp.%s.weight", pre, a->mlp_gate);
            L->w_gate = matrix(b, nm, ff, d);
        }
    }
    snprintf(nm, sizeof nm, "%smlp.%s.weight", pre, a->mlp_down);
    L->w_down = matrix(b, nm, d, ff);
    snprintf(nm, sizeof nm, "%smlp.%s.bias", pre, a->mlp_down);
    L->b_down = vec(b, nm, d, false);
}
#undef NAME

/* Upper bound of f32 vector space: every norm, bias and q/k norm. */
static size_t vec_floats(const hr_hparams *hp) {
    size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    /* up to 7 norms with biases, a router scale; q/k norms and biases, V's
     * ones, sinks, the layer scalar */
    size_t per_layer = 16 * (size_t)hp->d_model + 3 * (qd + kvd) + (size_t)hp->d_ff +
                       (size_t)hp->n_heads + (size_t)hp->head_dim + 1;
    if (hp->n_experts) /* router bias, score bias, expert scale, expert biases */
        per_layer += (size_t)hp->n_experts * (3 + 2 * (size_t)hp->d_ff_expert + hp->d_model);
    if (hp->n_linear && hp->arch->mamba2) { /* conv taps and bias, A_log, dt_bias, D, norm */
        size_t c = (size_t)hp->mb_inner + 2 * (size_t)hp->mb_groups * hp->mb_state;
        per_layer += c * ((size_t)hp->mb_conv + 1) + 3 * (size_t)hp->mb_heads + hp->mb_inner;
    }
    if (hp->n_linear) /* conv taps, A_log, dt_bias, gated norm */
        per_layer += (2 * (size_t)hp->ln_k_heads * hp->ln_k_dim +
                      (size_t)hp->ln_v_heads * hp->ln_v_dim) * hp->ln_conv +
                     2 * (size_t)hp->ln_v_heads + hp->ln_v_dim;
    return per_layer * hp->n_layers + 4 * (size_t)hp->d_model; /* final, embedding norms */
}

/* A table (rows, d) in F32 / F16 / BF16 as an f32 copy (malloc), or NULL
 * (b->rc set). */
static float *table_f32(binder *b, const char *name, int64_t rows, int64_t d) {
    const hr_tensor *t = find(b, name, true);
    if (!t || !shape_is(b, t, rows, d))
        return NULL;
    if (t->dtype != HR_DTYPE_F32 && t->dtype != HR_DTYPE_F16 && t->dtype != HR_DTYPE_BF16) {
        b->rc = hr_err(b->err, HR_EUNSUPPORTED, "not supported yet: %s: tensor '%s' has "
                       "dtype %s", file_of(b, t), t->name, hr_dtype_name(t->dtype));
        return NULL;
    }
    float *out = malloc((size_t)rows * (size_t)d * sizeof *out);
    if (!out) {
        b->rc = hr_err(b->err, HR_ENOMEM, "out of memory");
        return NULL;
    }
    for (int64_t r = 0; r < rows; r++)
        hr_dequant_range(t, r, 0, d, out + r * d);
    return out;
}

/* An encoder's embedding extras: positions, token types, their LayerNorm. */
static void bind_abs_positions(binder *b) {
    hr_model *m = b->m;
    const hr_hparams *hp = &m->hp;
    m->pos_emb = table_f32(b, "model.embed_positions.weight", hp->max_pos, hp->d_model);
    m->type_emb = table_f32(b, "model.embed_types.weight", hp->n_types, hp->d_model);
    m->embed_norm = norm(b, "model.", "embed_norm", hp->d_model);
}

static int load_json(const char *dir, const char *name, bool required, json_t **out,
                     hr_error *err) {
    char path[4096];
    *out = NULL;
    if (hr_path_join(path, sizeof path, dir, name))
        return hr_err(err, HR_ERANGE, "%s: path too long", dir);
    if (!hr_file_exists(path))
        return required ? hr_err(err, HR_ENOTFOUND, "%s: not found (is this a model "
                                 "directory?)", path) : 0;
    json_error_t je;
    *out = json_load_file(path, 0, &je);
    if (!*out)
        return hr_err(err, HR_EFORMAT, "%s: %s (line %d, column %d)", path, je.text,
                      je.line, je.column);
    return 0;
}

/* A GGUF file: config from its metadata, tensors under HF names. */
static int open_gguf(hr_model *m, const char *path, json_t **cfg, hr_error *err) {
    hr_gguf *g = NULL;
    bool permuted;
    int rc = hr_gguf_open(&g, path, err);
    if (rc)
        return rc;
    if ((rc = hr_gguf_config(g, cfg, &permuted, err))) {
        hr_gguf_close(g);
        return rc;
    }
    if ((rc = hr_hparams_from_json(&m->hp, *cfg, NULL, err))) {
        hr_err_wrap(err, "%s", path);
        hr_gguf_close(g);
        return rc;
    }
    m->hp.norm_offset = 0; /* llama.cpp stores gemma norms with the +1 applied */
    if (permuted)
        m->hp.rope_interleaved = m->qk_permuted = true;
    return hr_weights_open_gguf(&m->weights, g, err);
}

/* The matrices repack() looks at: embeddings and head (i < 0), then layer
 * i's projections and experts; n of them into mats (room for
 * repack_max(m)) */
static int repack_set(hr_model *m, int i, hr_tensor **mats) {
    int n = 0;
    if (i < 0) {
        mats[n++] = &m->embed_t;
        if (m->lm_head == &m->head_t)
            mats[n++] = &m->head_t;
        return n;
    }
    hr_layer *L = &m->layers[i];
    hr_tensor *l[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down,
                      &L->router, &L->sh_gate, &L->sh_up, &L->sh_down, &L->w_qgate,
                      &L->ln_qkvz, &L->ln_ba, &L->ln_out, &L->mb_in, &L->mb_out};
    for (size_t k = 0; k < sizeof l / sizeof l[0]; k++)
        if (l[k]->data)
            mats[n++] = l[k];
    if (m->hp.layer_moe[i] && L->e_gate)
        for (int e = 0; e < 3 * m->hp.n_experts; e++)
            if (L->e_gate[e].data)
                mats[n++] = &L->e_gate[e];
    return n;
}

static size_t repack_max(const hr_model *m) { return 20 + 3 * (size_t)m->hp.n_experts; }

/* Every matrix the kernels can read faster in another layout (GGUF and MLX
 * 4/8-bit weights on CPUs with the x16 kernels, hr_matmul_packed_bytes) is
 * repacked once here, all into one huge-page buffer (core/bigmem.h), each
 * file's pages let go as its matrix is done. */
static int repack(hr_model *m, hr_quant_act qa, hr_error *err) {
    hr_tensor **mats = malloc(repack_max(m) * sizeof *mats);
    size_t total = 0;
    if (!mats)
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (int i = -1; i < m->hp.n_layers; i++)
        for (int k = 0, n = repack_set(m, i, mats); k < n; k++) {
            if (qa == HR_QACT_F32 && hr_dtype_is_quant(mats[k]->dtype))
                mats[k]->act_digits = -1; /* the f32 kernels only */
            total += (hr_matmul_packed_bytes(mats[k], qa) + 63) & ~(size_t)63;
        }
    if (total == 0) {
        free(mats);
        return 0;
    }
    if (!(m->repacked = hr_big_alloc(total))) {
        free(mats);
        return hr_err(err, HR_ENOMEM, "out of memory repacking the weights (%zu MiB)",
                      total >> 20);
    }
    m->repacked_bytes = total;
    char *at = m->repacked;
    for (int i = -1; i < m->hp.n_layers; i++)
        for (int k = 0, n = repack_set(m, i, mats); k < n; k++) {
            size_t bytes = hr_matmul_packed_bytes(mats[k], qa);
            const void *was = mats[k]->data;
            size_t was_bytes = mats[k]->nbytes;
            if (bytes && hr_matmul_pack(mats[k], at, qa)) {
                hr_weights_drop(m->weights, was, was_bytes);
                at += (bytes + 63) & ~(size_t)63;
            }
        }
    free(mats);
    return 0;
}

/* Identifies the weights (as loaded from the file, before any repacking or
 * upload) and the math: the SSD tier never reads cache files of another
 * model or configuration. The math includes how quantized weights meet the
 * activations (qa), where the pass runs (be: a GPU's sums differ from a
 * CPU's) and, on the CPU, its kernels' ISA (their sums differ too), so a
 * cache file gives the bits its own pass would have computed. */
static uint64_t fingerprint(const hr_model *m, const hr_backend *be, hr_quant_act qa) {
    const hr_hparams *hp = &m->hp;
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0x6865617274680001ull);
    int dims[] = {hp->n_vocab, hp->d_model, hp->n_layers, hp->n_heads, hp->n_kv_heads,
                  hp->head_dim, hp->d_ff, hp->rot_dim, hp->sliding_window, (int)hp->act};
    XXH64_update(st, dims, sizeof dims);
    XXH64_update(st, hp->arch->model_type, strlen(hp->arch->model_type));
    double f[] = {hp->rope.theta, hp->rope.factor, hp->rope_local.theta, hp->attn_scale,
                  hp->attn_softcap, hp->norm_eps, hp->embed_mult, hp->residual_mult};
    XXH64_update(st, f, sizeof f);
    XXH64_update(st, hp->layer_sliding, (size_t)hp->n_layers);
    size_t wb = m->weight_bytes;
    XXH64_update(st, &wb, sizeof wb);
    for (int l = 0; l < hp->n_layers; l++) { /* a sample of every layer's weights */
        const hr_tensor *t[] = {&m->layers[l].wq, &m->layers[l].wk, &m->layers[l].wv,
                                &m->layers[l].wo, &m->layers[l].w_down};
        for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
            XXH64_update(st, t[k]->data, t[k]->nbytes < 4096 ? t[k]->nbytes : 4096);
    }
    XXH64_update(st, m->embed->data, m->embed->nbytes < 4096 ? m->embed->nbytes : 4096);
    const hr_cpu_kernels *k = hr_cpu();
    /* a GPU's products differ only between f32-grade x and not, and by
     * the version of its kernels' arithmetic */
    int math[] = {be->device_mem ? qa == HR_QACT_F32 : (int)qa,
                  be->device_mem ? be->math : k->math};
    XXH64_update(st, math, sizeof math);
    XXH64_update(st, be->name, strcspn(be->name, ":")); /* "cpu", "cuda" (not which one) */
    uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    return h;
}

/* The ops a family needs beyond the dense pass, on backend be. */
static int backend_can_run(const hr_hparams *hp, const hr_backend *be, hr_error *err) {
    const char *what = hp->n_experts && !be->ops->moe                      ? "mixture of experts"
                       : hp->arch->attn_sinks && !be->ops->attn_sinks      ? "attention sinks"
                       : hp->n_linear && hp->arch->mamba2 && !be->ops->mamba2 ? "Mamba-2"
                       : hp->n_linear && !hp->arch->mamba2 && !be->ops->deltanet ? "gated DeltaNet"
                       : hp->arch->encoder && !be->ops->encoder            ? "encoder (bidirectional attention)"
                       /* gemma4 without experts: the ops exist, no oracle has run them
                        * there (with experts: the gemma4_moe fixture, test_parity) */
                       : hp->arch->gemma4_fields && !hp->n_experts && be->device_mem
                           ? "Gemma-4, not checked there"
                                                                           : NULL;
    if (what)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet on %s: %s (%s)", be->name,
                      hp->arch->model_type, what);
    return 0;
}

static int model_open(hr_model **out, const char *dir, hr_backend *be, hr_quant_act qa,
                      hr_error *err) {
    *out = NULL;
    json_t *cfg = NULL, *gen = NULL;
    hr_model *m = calloc(1, sizeof *m);
    int rc = HR_ENOMEM;
    if (!m || !(m->path = strdup(dir))) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
    if (hr_file_exists(dir) && !hr_dir_exists(dir)) {
        if ((rc = open_gguf(m, dir, &cfg, err)))
            goto fail;
        m->gguf = true;
    } else {
        if (!hr_dir_exists(dir)) {
            rc = hr_err(err, HR_ENOTFOUND, "%s: no such model directory", dir);
            goto fail;
        }
        if ((rc = load_json(dir, "config.json", true, &cfg, err)) ||
            (rc = load_json(dir, "generation_config.json", false, &gen, err)))
            goto fail;
        if ((rc = hr_hparams_from_json(&m->hp, cfg, gen, err))) {
            hr_err_wrap(err, "%s/config.json", dir);
            goto fail;
        }
        if ((rc = hr_weights_open(&m->weights, dir, err)))
            goto fail;
    }
    const hr_hparams *hp = &m->hp;
    size_t nvec = vec_floats(hp);
    m->vecs = calloc(nvec, sizeof *m->vecs);
    m->n_vecs = nvec;
    m->layers = calloc((size_t)hp->n_layers, sizeof *m->layers);
    if (hp->n_experts)
        m->experts = calloc((size_t)hp->n_layers * 3 * hp->n_experts, sizeof *m->experts);
    m->converted_bytes = hr__bind_converted_bytes(m);
    if (m->converted_bytes)
        m->converted = hr_big_alloc(m->converted_bytes);
    if (!m->vecs || !m->layers || (hp->n_experts && !m->experts) ||
        (m->converted_bytes && !m->converted)) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
    const json_t *quant = json_object_get(cfg, "quantization");
    if (!quant)
        quant = json_object_get(cfg, "quantization_config");
    if (quant && !json_is_object(quant)) {
        rc = hr_err(err, HR_EFORMAT, "%s/config.json: 'quantization' must be an object", dir);
        goto fail;
    }
    binder b = {m, err, 0, m->vecs, m->vecs + nvec, quant, m->converted};
    m->embed_t = any_matrix(&b, "model.embed_tokens.weight", hp->n_vocab, hp->d_model);
    m->embed = &m->embed_t;
    m->lm_head = m->embed;
    /* the head where the layout keeps it (language_model.lm_head.weight in a
     * multimodal checkpoint), else the tied embeddings */
    if (!b.rc && !hp->tie_embeddings && find(&b, "lm_head.weight", false)) {
        m->head_t = any_matrix(&b, "lm_head.weight", hp->n_vocab, hp->d_model);
        m->lm_head = &m->head_t;
    }
    if (!hp->arch->encoder)
        m->final_norm = norm(&b, "model.", "norm", hp->d_model);
    if (hp->arch->abs_positions)
        bind_abs_positions(&b);
    for (int i = 0; i < hp->n_layers && !b.rc; i++)
        bind_layer(&b, i);
    m->be = hr_backend_cpu();
    if ((rc = b.rc))
        goto fail;
    if (!m->gguf && json_object_get(cfg, "vision_config") && (rc = hr__model_open_vision(m, dir, cfg, err)))
        goto fail;
    if (!m->gguf && json_object_get(cfg, "audio_config") && (rc = hr__model_open_audio(m, dir, cfg, err)))
        goto fail;
    if ((rc = backend_can_run(hp, be, err)))
        goto fail;
    m->weight_bytes = hr_weights_bytes(m->weights);
    m->fingerprint = fingerprint(m, be, qa);
    m->f32_act = qa == HR_QACT_F32;
    if ((rc = be->device_mem ? hr_model_upload(m, be, err) : repack(m, qa, err)))
        goto fail;
    json_decref(cfg);
    json_decref(gen);
    *out = m;
    return 0;
fail:
    json_decref(cfg);
    json_decref(gen);
    hr_model_free(m);
    return rc;
}

int hr_model_open_with(hr_model **out, const char *dir, const hr_model_opts *o,
                       hr_error *err) {
    hr_backend *be = NULL;
    *out = NULL;
    const char *qname = o && o->quant_act ? o->quant_act : getenv("HEARTH_QUANT_ACT");
    hr_quant_act qa;
    int rc = hr_quant_act_parse(qname, &qa, err);
    if (!rc)
        rc = hr_cpu_select(o && o->isa ? o->isa : getenv("HEARTH_ISA"), err);
    if (!rc && o && o->device)
        rc = hr_backend_get(o->device, &be, err);
    return rc ? rc : model_open(out, dir, be ? be : hr_backend_cpu(), qa, err);
}

int hr_model_open(hr_model **out, const char *dir, hr_error *err) {
    return hr_model_open_with(out, dir, NULL, err);
}

int hr_model_open_on(hr_model **out, const char *dir, const char *device, hr_error *err) {
    return hr_model_open_with(out, dir, &(hr_model_opts){.device = device}, err);
}

void hr_model_free(hr_model *m) {
    if (!m)
        return;
    hr_hparams_deinit(&m->hp);
    hr__model_vision_free(m->mm);
    hr__model_vision_qwen_free(m->mm_qwen);
    hr__model_audio_free(m->mm_audio);
    hr_weights_close(m->weights);
    hr_big_free(m->repacked, m->repacked_bytes);
    if (m->dev_mem)
        m->be->ops->free(m->be, m->dev_mem, m->dev_bytes);
    free(m->layers);
    free(m->vecs);
    if (!m->dev_mem) { /* else they are in it (model/upload.c) */
        free(m->pos_emb);
        free(m->type_emb);
    }
    free(m->experts);
    hr_big_free(m->converted, m->converted_bytes);
    free(m->path);
    free(m);
}

size_t hr_model_decode_bytes(const hr_model *m) {
    size_t total = 0;
    for (int i = 0; i < m->hp.n_layers; i++) {
        const hr_layer *L = &m->layers[i];
        const hr_tensor *mats[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                                   &L->w_down, &L->router, &L->sh_gate, &L->sh_up,
                                   &L->sh_down, &L->sh_inp, &L->w_qgate, &L->ln_qkvz,
                                   &L->ln_ba, &L->ln_out, &L->mb_in, &L->mb_out};
        for (size_t k = 0; k < sizeof mats / sizeof mats[0]; k++)
            if (mats[k]->data)
                total += hr_tensor_bytes(mats[k]);
        if (m->hp.layer_moe[i] && L->e_gate) { /* k of the experts: their mean */
            size_t ex = 0;
            for (int e = 0; e < 3 * m->hp.n_experts; e++)
                ex += hr_tensor_bytes(&L->e_gate[e]);
            total += ex / (size_t)m->hp.n_experts * (size_t)m->hp.n_experts_used;
        }
    }
    total += hr_tensor_bytes(m->lm_head);
    total += hr_tensor_row_bytes(m->embed);
    return total;
}
