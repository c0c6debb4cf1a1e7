#include "train/backprop.h"
#include "core/error.h"
#include "kernels/cpu/backward.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "model/adapter.h"
#include "model/rope.h"
#include "train/lora_params.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- what the pass keeps ---------------------------------------------------------- */

/* One layer's forward values the backward reads (T tokens). */
typedef struct act {
    float *xn1;          /* (T, d) the attention's normed input */
    float *qr, *kr;      /* (T, qd), (T, kvd) q, k before their norms (qk_norm only) */
    float *q, *k, *v;    /* (T, qd), (T, kvd), (T, kvd) as attention reads them */
    float *o, *lse;      /* (T, qd) attention out, (T, n_heads) */
    float *xmid;         /* (T, d) the residual after attention */
    float *xn2;          /* (T, d) the MLP's normed input */
    float *gp, *up, *h;  /* (T, ff) gate and up products, silu(gate) up */
    float *z[HR_LORA_SLOTS]; /* (T, r) x a^T of each adapted projection */
} act;

struct hr_bp {
    const hr_model *m;
    hr_lora_set *ls;
    hr_pool *pool;
    int max_T, max_len, chunk;
    bool ckpt;
    int n_ad;            /* adapted layers: first .. n_layers - 1 */
    int n_acts;          /* 1 with checkpointing, else n_ad */
    act *acts;
    float **resid;       /* [n_ad + 1] (T, d): the input of layer first + i */
    /* backward and loss scratch */
    float *dx, *dxn, *dq, *dk, *dv, *dout, *dh, *dgp, *dup, *dz, *tmp, *xs;
    float *attn_sc, *cs, *csi, *logits, *xg, *xf, *dxf;
    double *ce_m, *ce_s;
    float *ce_t;
    int32_t *tok, *tgt;
    int *pos, *row, *tseq, *seq_start;
    float *ce_w;         /* [n] the gradient pass's factor per target row */
    double *s_lp, *s_w;  /* hr_bp_step's per-sequence log-probs and weights */
    int *s_n;
    /* the last forward's state, for hr_bp_backward */
    int T, n, n_seqs;
    bool fwd_ready, adapters;
    float *mem;
    size_t n_floats;
};

/* ---- support ------------------------------------------------------------------------ */

int hr_bp_supports(const hr_model *m, hr_error *err) {
    const hr_hparams *hp = &m->hp;
    const hr_arch *a = hp->arch;
    const char *why = NULL;
    if (m->be->device_mem)
        why = "training on this device (the CPU only)";
    else if (a->encoder || a->abs_positions)
        why = "encoders";
    else if (a->norm != HR_NORM_RMS)
        why = "LayerNorm models";
    else if (a->post_ln)
        why = "post-norm residuals";
    else if (a->moe.router != HR_ROUTER_NONE || hp->n_experts)
        why = "mixtures of experts";
    else if (hp->n_linear)
        why = "recurrent (linear-attention, Mamba) layers";
    else if (a->attn_out_gate || a->attn_sinks || a->fused_qkv || a->fused_gate_up)
        why = "gated or fused attention projections, attention sinks";
    else if (a->qk_norm == HR_QK_NORM_FULL)
        why = "q/k norms over the whole projection";
    else if (!a->gated_mlp || hp->act != HR_ACT_SILU)
        why = "MLPs other than SwiGLU";
    else if (hp->attn_softcap > 0 || hp->final_softcap > 0)
        why = "soft-capped logits";
    else if (hp->sliding_window > 0 || hp->has_rope_local)
        why = "sliding-window attention";
    else if (a->embed_scale_sqrt || hp->embed_mult != 1.0f || hp->residual_mult != 1.0f ||
             hp->logit_div != 1.0f)
        why = "scaled embeddings, residuals or logits";
    for (int il = 0; il < hp->n_layers && !why; il++) {
        const hr_layer *L = &m->layers[il];
        if (L->norm[HR_NORM_POST_ATTN].w || L->norm[HR_NORM_POST_MLP].w)
            why = "post-sublayer norms";
        else if (!L->norm[HR_NORM_PRE_ATTN].w || !L->norm[HR_NORM_PRE_MLP].w)
            why = "layers without pre-norms";
        else if (L->b_up || L->b_down || L->bo)
            why = "MLP or output-projection biases";
        const hr_tensor *w[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                                &L->w_down};
        for (int i = 0; i < 7 && !why; i++)
            if (w[i]->layout != HR_LAYOUT_ROWS)
                why = "weights repacked for the integer kernels (load with quant_act f32)";
    }
    if (!why && (m->lm_head->layout != HR_LAYOUT_ROWS || m->embed->layout != HR_LAYOUT_ROWS))
        why = "weights repacked for the integer kernels (load with quant_act f32)";
    if (!why && !m->final_norm.w)
        why = "models without a final norm";
    if (why)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet for training (%s): %s",
                      a->model_type, why);
    return 0;
}

/* ---- setup -------------------------------------------------------------------------- */

static float *take(float **p, size_t n) {
    float *r = *p;
    *p += (n + 15) & ~(size_t)15; /* 64-byte aligned slices */
    return r;
}

/* floats of scratch; carve (mem != NULL) or count (mem NULL) */
static size_t layout(hr_bp *b, float *mem) {
    const hr_hparams *hp = &b->m->hp;
    size_t T = (size_t)b->max_T, d = hp->d_model, ff = hp->d_ff, nh = hp->n_heads;
    size_t qd = nh * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    size_t r = (size_t)b->ls->cfg.rank, V = (size_t)b->chunk;
    bool qkn = hp->arch->qk_norm != HR_QK_NORM_NONE;
    float *p = mem ? mem : (float *)64; /* a dummy base when counting */
    float *p0 = p;
    for (int i = 0; i < b->n_acts; i++) {
        act *A = &b->acts[i];
        A->xn1 = take(&p, T * d);
        A->qr = qkn ? take(&p, T * qd) : NULL;
        A->kr = qkn ? take(&p, T * kvd) : NULL;
        A->q = take(&p, T * qd);
        A->k = take(&p, T * kvd);
        A->v = take(&p, T * kvd);
        A->o = take(&p, T * qd);
        A->lse = take(&p, T * nh);
        A->xmid = take(&p, T * d);
        A->xn2 = take(&p, T * d);
        A->gp = take(&p, T * ff);
        A->up = take(&p, T * ff);
        A->h = take(&p, T * ff);
        for (int s = 0; s < HR_LORA_SLOTS; s++)
            A->z[s] = take(&p, T * r);
    }
    for (int i = 0; i <= b->n_ad; i++)
        b->resid[i] = take(&p, T * d);
    size_t wide = ff > qd ? ff : qd;
    wide = wide > d ? wide : d;
    b->dx = take(&p, T * d);
    b->dxn = take(&p, T * d);
    b->dq = take(&p, T * qd);
    b->dk = take(&p, T * kvd);
    b->dv = take(&p, T * kvd);
    b->dout = take(&p, T * qd);
    b->dh = take(&p, T * ff);
    b->dgp = take(&p, T * ff);
    b->dup = take(&p, T * ff);
    b->dz = take(&p, T * r);
    b->tmp = take(&p, T * wide);
    b->xs = take(&p, T * d);
    int nth = hr_pool_size(b->pool);
    b->attn_sc = take(&p, (size_t)nth * b->max_len);
    b->cs = take(&p, T * hp->rot_dim);
    b->csi = take(&p, T * hp->rot_dim);
    b->logits = take(&p, T * V);
    b->xg = take(&p, T * d);
    b->xf = take(&p, T * d);
    b->dxf = take(&p, T * d);
    b->ce_t = take(&p, T);
    /* the doubles and ints ride in float slots (both 4 or 8 bytes, aligned) */
    b->ce_m = (double *)take(&p, 2 * T);
    b->ce_s = (double *)take(&p, 2 * T);
    b->tok = (int32_t *)take(&p, T);
    b->tgt = (int32_t *)take(&p, T);
    b->pos = (int *)take(&p, T);
    b->row = (int *)take(&p, T);
    b->tseq = (int *)take(&p, T);
    b->ce_w = take(&p, T);
    b->s_lp = (double *)take(&p, 2 * T);
    b->s_w = (double *)take(&p, 2 * T);
    b->s_n = (int *)take(&p, T);
    b->seq_start = (int *)take(&p, T + 1);
    return (size_t)(p - p0);
}

int hr_bp_new(hr_bp **out, hr_lora_set *ls, int max_tokens, int max_len, int n_threads,
              bool checkpoint, hr_error *err) {
    *out = NULL;
    const hr_model *m = ls->m;
    int rc = hr_bp_supports(m, err);
    if (rc)
        return rc;
    if (max_tokens < 1 || max_len < 2)
        return hr_err(err, HR_EINVAL, "training batches of %d tokens, sequences of %d",
                      max_tokens, max_len);
    hr_bp *b = calloc(1, sizeof *b);
    if (!b)
        return hr_err(err, HR_ENOMEM, "out of memory");
    b->m = m;
    b->ls = ls;
    b->max_T = max_tokens;
    b->max_len = max_len;
    b->ckpt = checkpoint;
    b->n_ad = m->hp.n_layers - ls->first;
    b->n_acts = checkpoint ? 1 : b->n_ad;
    /* a vocabulary chunk's logits stay near 4M floats (16 MiB) */
    long ch = 4L * 1024 * 1024 / max_tokens;
    ch = ch < 64 ? 64 : ch;
    b->chunk = ch > m->hp.n_vocab ? m->hp.n_vocab : (int)ch;
    b->pool = hr_pool_new(n_threads);
    b->acts = calloc((size_t)b->n_acts, sizeof *b->acts);
    b->resid = calloc((size_t)b->n_ad + 1, sizeof *b->resid);
    if (!b->pool || !b->acts || !b->resid)
        goto oom;
    b->n_floats = layout(b, NULL);
    if (posix_memalign((void **)&b->mem, 64, b->n_floats * sizeof(float)))
        goto oom;
    memset(b->mem, 0, b->n_floats * sizeof(float));
    layout(b, b->mem);
    int k_max = m->hp.d_ff > m->hp.d_model ? m->hp.d_ff : m->hp.d_model;
    if (m->hp.n_heads * m->hp.head_dim > k_max) /* o_proj's input */
        k_max = m->hp.n_heads * m->hp.head_dim;
    if (!hr_matmul_reserve(b->pool, max_tokens, k_max))
        goto oom;
    *out = b;
    return 0;
oom:
    rc = hr_err(err, HR_ENOMEM, "cannot allocate training activations for %d tokens",
                max_tokens);
    hr_bp_free(b);
    return rc;
}

void hr_bp_free(hr_bp *b) {
    if (!b)
        return;
    hr_pool_free(b->pool);
    free(b->acts);
    free(b->resid);
    free(b->mem);
    free(b);
}

size_t hr_bp_bytes(const hr_bp *b) { return b->n_floats * sizeof(float); }

/* ---- LoRA factors --------------------------------------------------------------------- */

static const hr_lora_param *lp(const hr_bp *b, int il, int slot) {
    if (!b->adapters)
        return NULL;
    const hr_lora_param *p = &b->ls->p[(size_t)il * HR_LORA_SLOTS + slot];
    return p->r ? p : NULL;
}

/* y += scale (x a^T) bt, z = x a^T kept */
static void lora_fwd(hr_bp *b, const hr_lora_param *p, const float *x, int T, float *y,
                     float *z) {
    if (!p)
        return;
    hr_small_gemm(b->pool, HR_SG_NT, T, p->r, p->in, 1.0f, x, p->in, p->a, p->in, z, p->r,
                  false);
    hr_small_gemm(b->pool, HR_SG_NN, T, p->out, p->r, p->scale, z, p->r, p->bt, p->out, y,
                  p->out, true);
}

/* from dy: gbt += scale z^T dy, dz = scale dy bt^T, ga += dz^T x, dx += dz a */
static void lora_bwd(hr_bp *b, const hr_lora_param *p, const float *dy, const float *x,
                     const float *z, int T, float *dx) {
    if (!p)
        return;
    float *dz = b->dz;
    hr_small_gemm(b->pool, HR_SG_TN, p->r, p->out, T, p->scale, z, p->r, dy, p->out, p->gbt,
                  p->out, true);
    hr_small_gemm(b->pool, HR_SG_NT, T, p->r, p->out, p->scale, dy, p->out, p->bt, p->out, dz,
                  p->r, false);
    hr_small_gemm(b->pool, HR_SG_TN, p->r, p->in, T, 1.0f, dz, p->r, x, p->in, p->ga, p->in,
                  true);
    hr_small_gemm(b->pool, HR_SG_NN, T, p->in, p->r, 1.0f, dz, p->r, p->a, p->in, dx, p->in,
                  true);
}

/* ---- row jobs on the pool ---------------------------------------------------------------- */

typedef struct rows_job {
    hr_bp *b;
    int T, kind, il;
    const act *A;
    const float *x;
    float *y;
} rows_job;

enum { RJ_NORM1, RJ_QKV, RJ_NORM2, RJ_SILU, RJ_BSILU, RJ_BNORM2, RJ_BQK, RJ_BNORM1 };

static void rows_worker(void *p, int ith, int nth) {
    const rows_job *j = p;
    hr_bp *b = j->b;
    const hr_hparams *hp = &b->m->hp;
    const act *A = j->A;
    int d = hp->d_model, hd = hp->head_dim, nh = hp->n_heads, nkv = hp->n_kv_heads;
    int qd = nh * hd, kvd = nkv * hd, ff = hp->d_ff, rot = hp->rot_dim;
    float off = hp->norm_offset, eps = hp->norm_eps;
    const hr_layer *L = j->il >= 0 ? &b->m->layers[j->il] : NULL;
    long lo, hi;
    hr_split(j->T, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        switch (j->kind) {
        case RJ_NORM1:
            hr_rmsnorm(A->xn1 + t * d, j->x + t * d, L->norm[HR_NORM_PRE_ATTN].w, off, d, eps);
            break;
        case RJ_NORM2:
            hr_rmsnorm(A->xn2 + t * d, A->xmid + t * d, L->norm[HR_NORM_PRE_MLP].w, off, d, eps);
            break;
        case RJ_QKV: { /* q, k norms then RoPE, in place on A->q, A->k */
            float *q = A->q + t * qd, *k = A->k + t * kvd;
            if (A->qr) {
                for (int h = 0; h < nh; h++)
                    hr_rmsnorm(q + h * hd, A->qr + t * qd + h * hd, L->q_norm, off, hd, eps);
                for (int h = 0; h < nkv; h++)
                    hr_rmsnorm(k + h * hd, A->kr + t * kvd + h * hd, L->k_norm, off, hd, eps);
            }
            if (hp->layer_rope[j->il] && rot >= 2) {
                hr_rope(q, nh, hd, rot, b->cs + t * rot, hp->rope_interleaved);
                hr_rope(k, nkv, hd, rot, b->cs + t * rot, hp->rope_interleaved);
            }
            break;
        }
        case RJ_SILU:
            memcpy(A->h + t * ff, A->gp + t * ff, (size_t)ff * sizeof(float));
            hr_silu_mul(A->h + t * ff, A->up + t * ff, ff);
            break;
        case RJ_BSILU:
            hr_silu_mul_bwd(b->dgp + t * ff, b->dup + t * ff, b->dh + t * ff, A->gp + t * ff,
                            A->up + t * ff, ff);
            break;
        case RJ_BNORM2: /* dx += norm2'(dxn) */
            hr_rmsnorm_bwd(b->dx + t * d, b->dxn + t * d, A->xmid + t * d,
                           L->norm[HR_NORM_PRE_MLP].w, off, d, eps, true);
            break;
        case RJ_BNORM1:
            hr_rmsnorm_bwd(b->dx + t * d, b->dxn + t * d, j->x + t * d,
                           L->norm[HR_NORM_PRE_ATTN].w, off, d, eps, true);
            break;
        case RJ_BQK: { /* RoPE's transpose, then the q, k norms' */
            float *dq = b->dq + t * qd, *dk = b->dk + t * kvd;
            if (hp->layer_rope[j->il] && rot >= 2) {
                hr_rope(dq, nh, hd, rot, b->csi + t * rot, hp->rope_interleaved);
                hr_rope(dk, nkv, hd, rot, b->csi + t * rot, hp->rope_interleaved);
            }
            if (A->qr) {
                for (int h = 0; h < nh; h++)
                    hr_rmsnorm_bwd(dq + h * hd, dq + h * hd, A->qr + t * qd + h * hd,
                                   L->q_norm, off, hd, eps, false);
                for (int h = 0; h < nkv; h++)
                    hr_rmsnorm_bwd(dk + h * hd, dk + h * hd, A->kr + t * kvd + h * hd,
                                   L->k_norm, off, hd, eps, false);
            }
            break;
        }
        }
    }
}

static void rows(hr_bp *b, int kind, int il, int T, const act *A, const float *x) {
    rows_job j = {b, T, kind, il, A, x, NULL};
    hr_pool_run(b->pool, rows_worker, &j);
}

/* ---- one layer ------------------------------------------------------------------------------ */

static void layer_fwd(hr_bp *b, int il, act *A, const float *x, float *xo, int T, int n_seqs) {
    const hr_model *m = b->m;
    const hr_hparams *hp = &m->hp;
    const hr_layer *L = &m->layers[il];
    int d = hp->d_model, hd = hp->head_dim, qd = hp->n_heads * hd, kvd = hp->n_kv_heads * hd;
    int ff = hp->d_ff;
    rows(b, RJ_NORM1, il, T, A, x);
    float *qr = A->qr ? A->qr : A->q, *kr = A->kr ? A->kr : A->k;
    hr_matmul_multi(b->pool, A->xn1, d, T, 3,
                    (hr_matmul_out[]){{qr, qd, &L->wq, L->bq}, {kr, kvd, &L->wk, L->bk},
                                      {A->v, kvd, &L->wv, L->bv}});
    lora_fwd(b, lp(b, il, HR_LORA_Q), A->xn1, T, qr, A->z[HR_LORA_Q]);
    lora_fwd(b, lp(b, il, HR_LORA_K), A->xn1, T, kr, A->z[HR_LORA_K]);
    lora_fwd(b, lp(b, il, HR_LORA_V), A->xn1, T, A->v, A->z[HR_LORA_V]);
    rows(b, RJ_QKV, il, T, A, NULL);
    hr_attn_train at = {.q = A->q, .k = A->k, .v = A->v, .out = A->o, .lse = A->lse,
                        .n_seqs = n_seqs, .start = b->seq_start, .n_heads = hp->n_heads,
                        .n_kv_heads = hp->n_kv_heads, .hd = hd, .scale = hp->attn_scale,
                        .scratch = b->attn_sc, .max_len = b->max_len};
    hr_attn_train_fwd(b->pool, &at);
    float *a = b->tmp;
    hr_matmul(b->pool, a, d, A->o, qd, T, &L->wo, NULL);
    lora_fwd(b, lp(b, il, HR_LORA_O), A->o, T, a, A->z[HR_LORA_O]);
    for (size_t i = 0; i < (size_t)T * d; i++)
        A->xmid[i] = x[i] + a[i];
    rows(b, RJ_NORM2, il, T, A, NULL);
    hr_matmul_multi(b->pool, A->xn2, d, T, 2,
                    (hr_matmul_out[]){{A->gp, ff, &L->w_gate, NULL}, {A->up, ff, &L->w_up, NULL}});
    lora_fwd(b, lp(b, il, HR_LORA_GATE), A->xn2, T, A->gp, A->z[HR_LORA_GATE]);
    lora_fwd(b, lp(b, il, HR_LORA_UP), A->xn2, T, A->up, A->z[HR_LORA_UP]);
    rows(b, RJ_SILU, il, T, A, NULL);
    hr_matmul(b->pool, a, d, A->h, ff, T, &L->w_down, NULL);
    lora_fwd(b, lp(b, il, HR_LORA_DOWN), A->h, T, a, A->z[HR_LORA_DOWN]);
    for (size_t i = 0; i < (size_t)T * d; i++)
        xo[i] = A->xmid[i] + a[i];
}

/* b->dx: the gradient of the layer's output in, of its input x out */
static void layer_bwd(hr_bp *b, int il, const act *A, const float *x, int T, int n_seqs) {
    const hr_model *m = b->m;
    const hr_hparams *hp = &m->hp;
    const hr_layer *L = &m->layers[il];
    int d = hp->d_model, hd = hp->head_dim, qd = hp->n_heads * hd, kvd = hp->n_kv_heads * hd;
    int ff = hp->d_ff;
    /* MLP */
    memset(b->dh, 0, (size_t)T * ff * sizeof(float));
    hr_matmul_t(b->pool, b->dh, ff, b->dx, d, T, &L->w_down);
    lora_bwd(b, lp(b, il, HR_LORA_DOWN), b->dx, A->h, A->z[HR_LORA_DOWN], T, b->dh);
    rows(b, RJ_BSILU, il, T, A, NULL);
    memset(b->dxn, 0, (size_t)T * d * sizeof(float));
    hr_matmul_t(b->pool, b->dxn, d, b->dgp, ff, T, &L->w_gate);
    hr_matmul_t(b->pool, b->dxn, d, b->dup, ff, T, &L->w_up);
    lora_bwd(b, lp(b, il, HR_LORA_GATE), b->dgp, A->xn2, A->z[HR_LORA_GATE], T, b->dxn);
    lora_bwd(b, lp(b, il, HR_LORA_UP), b->dup, A->xn2, A->z[HR_LORA_UP], T, b->dxn);
    rows(b, RJ_BNORM2, il, T, A, NULL);
    /* attention */
    memset(b->dout, 0, (size_t)T * qd * sizeof(float));
    hr_matmul_t(b->pool, b->dout, qd, b->dx, d, T, &L->wo);
    lora_bwd(b, lp(b, il, HR_LORA_O), b->dx, A->o, A->z[HR_LORA_O], T, b->dout);
    hr_attn_train at = {.q = A->q, .k = A->k, .v = A->v, .out = A->o, .lse = A->lse,
                        .n_seqs = n_seqs, .start = b->seq_start, .n_heads = hp->n_heads,
                        .n_kv_heads = hp->n_kv_heads, .hd = hd, .scale = hp->attn_scale,
                        .scratch = b->attn_sc, .max_len = b->max_len, .dout = b->dout,
                        .dq = b->dq, .dk = b->dk, .dv = b->dv};
    hr_attn_train_bwd(b->pool, &at);
    rows(b, RJ_BQK, il, T, A, NULL);
    memset(b->dxn, 0, (size_t)T * d * sizeof(float));
    hr_matmul_t(b->pool, b->dxn, d, b->dq, qd, T, &L->wq);
    hr_matmul_t(b->pool, b->dxn, d, b->dk, kvd, T, &L->wk);
    hr_matmul_t(b->pool, b->dxn, d, b->dv, kvd, T, &L->wv);
    lora_bwd(b, lp(b, il, HR_LORA_Q), b->dq, A->xn1, A->z[HR_LORA_Q], T, b->dxn);
    lora_bwd(b, lp(b, il, HR_LORA_K), b->dk, A->xn1, A->z[HR_LORA_K], T, b->dxn);
    lora_bwd(b, lp(b, il, HR_LORA_V), b->dv, A->xn1, A->z[HR_LORA_V], T, b->dxn);
    rows(b, RJ_BNORM1, il, T, A, x);
}

/* ---- cross-entropy over vocabulary chunks ------------------------------------------------------ */

typedef struct ce_job {
    hr_bp *b;
    int n, v0, cv, pass;
} ce_job;

/* pass 0: running max and sum of e^(l - max) per row, the target's logit;
 * pass 1: the logits' gradient (softmax - one-hot) * ce_w[row], in place */
static void ce_worker(void *p, int ith, int nth) {
    const ce_job *j = p;
    hr_bp *b = j->b;
    long lo, hi;
    hr_split(j->n, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        float *l = b->logits + (size_t)i * j->cv;
        int tg = b->tgt[i] - j->v0;
        if (j->pass == 0) {
            double mx = b->ce_m[i], s = b->ce_s[i];
            float cm = -INFINITY;
            for (int c = 0; c < j->cv; c++)
                cm = l[c] > cm ? l[c] : cm;
            if (cm > mx) {
                s *= exp(mx - cm);
                mx = cm;
            }
            for (int c = 0; c < j->cv; c++)
                s += exp((double)l[c] - mx);
            b->ce_m[i] = mx;
            b->ce_s[i] = s;
            if (tg >= 0 && tg < j->cv)
                b->ce_t[i] = l[tg];
        } else {
            double lse = b->ce_m[i] + log(b->ce_s[i]);
            float gs = b->ce_w[i];
            for (int c = 0; c < j->cv; c++)
                l[c] = (float)(exp((double)l[c] - lse)) * gs;
            if (tg >= 0 && tg < j->cv)
                l[tg] -= gs;
        }
    }
}

/* pass 0 over xf (n, d): each row's log-normalizer parts and target logit */
static void ce_forward(hr_bp *b, int n) {
    const hr_model *m = b->m;
    int d = m->hp.d_model, V = m->hp.n_vocab;
    for (int i = 0; i < n; i++) {
        b->ce_m[i] = -INFINITY;
        b->ce_s[i] = 0;
    }
    for (int v0 = 0; v0 < V; v0 += b->chunk) {
        int cv = V - v0 < b->chunk ? V - v0 : b->chunk;
        hr_tensor w = hr_tensor_rows(m->lm_head, v0, cv);
        hr_matmul(b->pool, b->logits, cv, b->xf, d, n, &w, NULL);
        ce_job j = {b, n, v0, cv, 0};
        hr_pool_run(b->pool, ce_worker, &j);
    }
}

/* pass 1: dxf = d(sum_i ce_w[i] * (-log p(target i)))/dxf */
static void ce_backward(hr_bp *b, int n) {
    const hr_model *m = b->m;
    int d = m->hp.d_model, V = m->hp.n_vocab;
    memset(b->dxf, 0, (size_t)n * d * sizeof(float));
    for (int v0 = 0; v0 < V; v0 += b->chunk) {
        int cv = V - v0 < b->chunk ? V - v0 : b->chunk;
        hr_tensor w = hr_tensor_rows(m->lm_head, v0, cv);
        hr_matmul(b->pool, b->logits, cv, b->xf, d, n, &w, NULL);
        ce_job j = {b, n, v0, cv, 1};
        hr_pool_run(b->pool, ce_worker, &j);
        hr_matmul_t(b->pool, b->dxf, d, b->logits, cv, n, &w);
    }
}

/* ---- the step ---------------------------------------------------------------------------------- */

/* the batch's inputs (each sequence but its last token), their positions,
 * RoPE tables and target rows; the count of targets */
static int stage(hr_bp *b, const hr_bp_batch *bt, int *T_out, hr_error *err) {
    const hr_hparams *hp = &b->m->hp;
    int T = 0, n = 0, rot = hp->rot_dim, half = rot / 2;
    float inv[HR_ATTN_MAX_HEAD_DIM / 2 + 1], af = 1;
    for (int s = 0; s < bt->n_seqs; s++) {
        int s0 = bt->start[s], L = bt->start[s + 1] - s0;
        if (L < 0 || L > b->max_len)
            return hr_err(err, HR_EINVAL, "a training sequence of %d tokens (at most %d)", L,
                          b->max_len);
        int ni = L > 0 ? L - 1 : 0;
        if (T + ni > b->max_T)
            return hr_err(err, HR_EINVAL, "a training batch of more than %d tokens", b->max_T);
        b->seq_start[s] = T;
        if (rot >= 2)
            hr_rope_freqs(&hp->rope, rot, hp->max_pos, L, inv, &af);
        int off = bt->offset ? bt->offset[s] : 0;
        for (int j = 0; j < ni; j++) {
            int32_t id = bt->tok[s0 + j], nx = bt->tok[s0 + j + 1];
            if (id < 0 || id >= hp->n_vocab || nx < 0 || nx >= hp->n_vocab)
                return hr_err(err, HR_ERANGE, "token id %d is outside the vocabulary (0..%d)",
                              id < 0 || id >= hp->n_vocab ? id : nx, hp->n_vocab - 1);
            b->tok[T] = id;
            b->pos[T] = j;
            if (rot >= 2) {
                float *cs = b->cs + (size_t)T * rot, *ci = b->csi + (size_t)T * rot;
                hr_rope_table(cs, rot, j, inv, af);
                memcpy(ci, cs, (size_t)rot * sizeof *ci);
                for (int i = half; i < rot; i++)
                    ci[i] = -ci[i];
            }
            if (j + 1 >= off) {
                b->row[n] = T;
                b->tseq[n] = s;
                b->tgt[n++] = nx;
            }
            T++;
        }
    }
    b->seq_start[bt->n_seqs] = T;
    *T_out = T;
    return n;
}

int hr_bp_forward(hr_bp *b, const hr_bp_batch *bt, bool adapters, double *seq_logp,
                  int *seq_n, hr_error *err) {
    const hr_model *m = b->m;
    const hr_hparams *hp = &m->hp;
    int T, d = hp->d_model, first = b->ls->first;
    b->fwd_ready = false;
    if (bt->n_seqs < 0 || bt->n_seqs > b->max_T)
        return hr_err(err, HR_EINVAL, "a training batch of %d sequences", bt->n_seqs);
    int n = stage(b, bt, &T, err);
    if (n < 0)
        return n;
    for (int s = 0; s < bt->n_seqs; s++) {
        seq_logp[s] = 0;
        seq_n[s] = 0;
    }
    b->adapters = adapters;
    b->T = T;
    b->n = n;
    b->n_seqs = bt->n_seqs;
    b->fwd_ready = true;
    if (n == 0)
        return 0;
    b->fwd_ready = false;
    /* embeddings, then the layers below the adapted ones (nothing kept) */
    float *x = b->resid[0];
    for (int t = 0; t < T; t++)
        hr_dequant_range(m->embed, b->tok[t], 0, d, x + (size_t)t * d);
    for (int il = 0; il < first; il++)
        layer_fwd(b, il, &b->acts[0], x, x, T, bt->n_seqs);
    for (int i = 0; i < b->n_ad; i++)
        layer_fwd(b, first + i, &b->acts[b->ckpt ? 0 : i], b->resid[i], b->resid[i + 1], T,
                  bt->n_seqs);
    /* the target rows: final norm, the log-normalizers */
    const float *xl = b->resid[b->n_ad];
    for (int i = 0; i < n; i++) {
        memcpy(b->xg + (size_t)i * d, xl + (size_t)b->row[i] * d, (size_t)d * sizeof(float));
        hr_rmsnorm(b->xf + (size_t)i * d, b->xg + (size_t)i * d, m->final_norm.w,
                   hp->norm_offset, d, hp->norm_eps);
    }
    ce_forward(b, n);
    for (int i = 0; i < n; i++) {
        seq_logp[b->tseq[i]] -= b->ce_m[i] + log(b->ce_s[i]) - b->ce_t[i];
        seq_n[b->tseq[i]]++;
    }
    b->fwd_ready = true;
    return 0;
}

void hr_bp_backward(hr_bp *b, const double *seq_w) {
    HR_ASSERT(b->fwd_ready && b->adapters);
    const hr_model *m = b->m;
    const hr_hparams *hp = &m->hp;
    int T = b->T, n = b->n, d = hp->d_model, first = b->ls->first;
    b->fwd_ready = false;
    if (n == 0)
        return;
    for (int i = 0; i < n; i++)
        b->ce_w[i] = (float)-seq_w[b->tseq[i]];
    ce_backward(b, n);
    memset(b->dx, 0, (size_t)T * d * sizeof(float));
    for (int i = 0; i < n; i++)
        hr_rmsnorm_bwd(b->dx + (size_t)b->row[i] * d, b->dxf + (size_t)i * d,
                       b->xg + (size_t)i * d, m->final_norm.w, hp->norm_offset, d,
                       hp->norm_eps, false);
    for (int i = b->n_ad - 1; i >= 0; i--) {
        act *A = &b->acts[b->ckpt ? 0 : i];
        if (b->ckpt) /* recompute the layer's values from its kept input */
            layer_fwd(b, first + i, A, b->resid[i], b->xs, T, b->n_seqs);
        layer_bwd(b, first + i, A, b->resid[i], T, b->n_seqs);
    }
}

int hr_bp_step(hr_bp *b, const hr_bp_batch *bt, bool grad, double *loss, int *n_targets,
               hr_error *err) {
    *loss = 0;
    *n_targets = 0;
    double *lp = b->s_lp;
    int *cnt = b->s_n;
    int rc = hr_bp_forward(b, bt, true, lp, cnt, err);
    if (!rc && b->n > 0) {
        double sum = 0;
        for (int s = 0; s < bt->n_seqs; s++)
            sum -= lp[s];
        *loss = sum / b->n;
        *n_targets = b->n;
        if (grad) {
            for (int s = 0; s < bt->n_seqs; s++)
                b->s_w[s] = -1.0 / b->n;
            hr_bp_backward(b, b->s_w);
        }
    }
    return rc;
}
