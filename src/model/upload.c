/* A model's weights onto a device backend: every matrix (with an affine
 * one's scales and biases), the f32 vectors and an encoder's position and
 * token type tables go into one allocation of the backend's memory, in the
 * row layout they were loaded in (quantized ones stay quantized), and the
 * model's views are pointed there. The host
 * copy is the file's mmap: nothing else is copied on the host (the
 * runtime stages each matrix through its own pinned buffer). */
#include "model/upload.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* The matrices the forward pass reads, each view once (a tied head is the
 * embedding): the dense ones, routers, experts and shared experts, the
 * attention output gate and the recurrent layers' projections. Views of
 * one tensor (an expert's rows of a stacked one) are copied apart. */
static int matrices(hr_model *m, hr_tensor **out) {
    int n = 0;
    out[n++] = &m->embed_t;
    if (m->lm_head == &m->head_t)
        out[n++] = &m->head_t;
    for (int i = 0; i < m->hp.n_layers; i++) {
        hr_layer *L = &m->layers[i];
        hr_tensor *l[] = {&L->wq,      &L->wk,     &L->wv,      &L->wo,     &L->w_gate,
                          &L->w_up,    &L->w_down, &L->router,  &L->sh_gate, &L->sh_up,
                          &L->sh_down, &L->sh_inp, &L->w_qgate, &L->ln_qkvz, &L->ln_ba,
                          &L->ln_out,  &L->mb_in,  &L->mb_out};
        for (size_t k = 0; k < sizeof l / sizeof l[0]; k++)
            if (l[k]->data)
                out[n++] = l[k];
        for (int e = 0; L->e_gate && e < 3 * m->hp.n_experts; e++) /* e_gate, e_up, e_down */
            if (L->e_gate[e].data)
                out[n++] = &L->e_gate[e];
    }
    return n;
}

/* The matrices' count bound for matrices() */
static int matrices_max(const hr_model *m) {
    return 2 + m->hp.n_layers * (18 + 3 * m->hp.n_experts);
}

static size_t aligned(size_t n) { return (n + 255) & ~(size_t)255; }

static size_t side_bytes(const hr_tensor *t) {
    if (t->dtype != HR_DTYPE_AFFINE)
        return 0;
    return (size_t)t->shape[0] * (size_t)(t->shape[1] / t->q.group) * hr_dtype_size(t->q.sdtype);
}

/* p, a pointer into the host vectors, moved to their device copy */
static const float *rebase(const hr_model *m, const float *p, float *dvecs) {
    if (!p)
        return NULL;
    HR_ASSERT(p >= m->vecs && p < m->vecs + m->n_vecs);
    return dvecs + (p - m->vecs);
}

static void rebase_norm(const hr_model *m, hr_norm_w *n, float *dvecs) {
    n->w = rebase(m, n->w, dvecs);
    n->b = rebase(m, n->b, dvecs);
}

/* the vectors of the expert and recurrent layers */
static void rebase_moe_recurrent(const hr_model *m, hr_layer *L, float *dvecs) {
    const float **v[] = {&L->router_b,   &L->score_bias, &L->router_scale, &L->expert_scale,
                         &L->eb_gate,    &L->eb_up,      &L->eb_down,      &L->ln_conv,
                         &L->ln_a,       &L->ln_dt_bias, &L->ln_norm,      &L->mb_conv,
                         &L->mb_conv_b,  &L->mb_a,       &L->mb_dt_bias,   &L->mb_d,
                         &L->mb_norm};
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
        *v[k] = rebase(m, *v[k], dvecs);
}

int hr_model_upload(hr_model *m, hr_backend *be, hr_error *err) {
    const hr_hparams *hp = &m->hp;
    if (hp->head_dim > 512)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet on %s: head_dim %d (at most "
                      "512)", be->name, hp->head_dim);
    int nm_max = matrices_max(m);
    hr_tensor **mats = malloc((size_t)nm_max * sizeof *mats);
    if (!mats)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int nm = matrices(m, mats);
    /* an encoder's tables (owned f32 copies: freed here once uploaded) */
    size_t pos_bytes = m->pos_emb ? (size_t)hp->max_pos * hp->d_model * sizeof(float) : 0;
    size_t type_bytes = m->type_emb ? (size_t)hp->n_types * hp->d_model * sizeof(float) : 0;
    size_t total = aligned(m->n_vecs * sizeof(float)) + aligned(pos_bytes) + aligned(type_bytes);
    for (int i = 0; i < nm; i++) {
        if (mats[i]->layout != HR_LAYOUT_ROWS) {
            free(mats);
            return hr_err(err, HR_EINVAL, "%s: a repacked matrix cannot go to %s",
                          mats[i]->name ? mats[i]->name : "?", be->name);
        }
        if (mats[i]->dtype == HR_DTYPE_MXFP4) { /* no device kernel reads it yet */
            free(mats);
            return hr_err(err, HR_EUNSUPPORTED, "not supported yet on %s: MXFP4 weights (%s)",
                          be->name, hp->arch->model_type);
        }
        total += aligned(mats[i]->nbytes) + 2 * aligned(side_bytes(mats[i]));
    }
    size_t fr = 0, tot = 0;
    be->ops->mem_info(be, &fr, &tot);
    char *base = fr >= total ? be->ops->alloc(be, total) : NULL;
    if (!base) {
        free(mats);
        return hr_err(err, HR_ENOMEM, "not enough memory on %s for the weights: %zu MiB "
                      "needed, %zu MiB free of %zu", be->name, total >> 20, fr >> 20,
                      tot >> 20);
    }
    int rc = 0;
    char *at = base;
    float *dvecs = (float *)at;
    rc = be->ops->upload(be, at, m->vecs, m->n_vecs * sizeof(float), err);
    at += aligned(m->n_vecs * sizeof(float));
    float *dpos = (float *)at, *dtype = (float *)(at + aligned(pos_bytes));
    if (!rc && pos_bytes)
        rc = be->ops->upload(be, dpos, m->pos_emb, pos_bytes, err);
    if (!rc && type_bytes)
        rc = be->ops->upload(be, dtype, m->type_emb, type_bytes, err);
    at += aligned(pos_bytes) + aligned(type_bytes);
    for (int i = 0; i < nm && !rc; i++) {
        hr_tensor *t = mats[i];
        if ((rc = be->ops->upload(be, at, t->data, t->nbytes, err)))
            break;
        t->data = at;
        at += aligned(t->nbytes);
        size_t sb = side_bytes(t);
        if (sb) {
            if ((rc = be->ops->upload(be, at, t->q.scales, sb, err)) ||
                (rc = be->ops->upload(be, at + aligned(sb), t->q.biases, sb, err)))
                break;
            t->q.scales = at;
            t->q.biases = at + aligned(sb);
            at += 2 * aligned(sb);
        }
    }
    free(mats);
    if (rc) { /* the views may point at either memory now: the model is unusable */
        be->ops->free(be, base, total);
        return rc;
    }
    rebase_norm(m, &m->final_norm, dvecs);
    rebase_norm(m, &m->embed_norm, dvecs);
    if (pos_bytes) {
        free(m->pos_emb);
        m->pos_emb = dpos;
    }
    if (type_bytes) {
        free(m->type_emb);
        m->type_emb = dtype;
    }
    for (int i = 0; i < hp->n_layers; i++) {
        hr_layer *L = &m->layers[i];
        const float **v[] = {&L->bq, &L->bk, &L->bv, &L->bo, &L->q_norm, &L->k_norm,
                             &L->b_up, &L->b_down, &L->v_norm, &L->sinks};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++)
            *v[k] = rebase(m, *v[k], dvecs);
        for (int s = 0; s < HR_NORM_SLOTS; s++)
            rebase_norm(m, &L->norm[s], dvecs);
        rebase_moe_recurrent(m, L, dvecs);
    }
    m->dev_mem = base;
    m->dev_bytes = total;
    m->be = be;
    return 0;
}
