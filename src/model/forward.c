#include "model/forward.h"
#include "core/arena.h"
#include "core/error.h"
#include "kernels/backend.h"
#include "model/rope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The pass is a sequence of the model's backend's ops (kernels/backend.h);
 * only the batch's bookkeeping (validation, block tables, RoPE
 * frequencies) runs here on the host. */
struct hr_fwd {
    const hr_model *m;
    hr_backend *be;
    hr_bctx *c;
    hr_pool *pool;
    int max_tokens, max_seqs, max_ctx, max_blocks;
    void *mem;      /* activations (backend memory), carved by arena */
    size_t mem_bytes;
    hr_arena arena; /* reset every hr_forward */
    float *freq;    /* [max_seqs][2 * (rot_dim/2 + 1)] host staging */
    int32_t *tables, *tab_off; /* [max_seqs * max_blocks], [max_seqs] */
};

/* ---- setup --------------------------------------------------------------- */

/* backend memory for a step's activations (and its logits, off the host) */
static size_t scratch_bytes(const hr_model *m, int T) {
    const hr_hparams *hp = &m->hp;
    size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    size_t d = hp->d_model, ff = hp->d_ff;
    size_t floats = (size_t)T * (3 * d + 2 * qd + 2 * kvd + 2 * ff);
    if (m->be->device_mem)
        floats += (size_t)T * hp->n_vocab;
    return floats * sizeof(float) + 64 * 16; /* + alignment slack */
}

int hr_fwd_new(hr_fwd **out, const hr_model *m, int max_tokens, int max_seqs, int max_ctx,
               int n_threads, hr_error *err) {
    *out = NULL;
    if (max_tokens <= 0 || max_seqs <= 0)
        return hr_err(err, HR_EINVAL, "forward scratch needs max_tokens, max_seqs > 0");
    hr_fwd *f = calloc(1, sizeof *f);
    if (!f)
        return hr_err(err, HR_ENOMEM, "out of memory");
    const hr_hparams *hp = &m->hp;
    f->m = m;
    f->be = m->be;
    f->max_tokens = max_tokens;
    f->max_seqs = max_seqs;
    f->max_ctx = max_ctx > 0 && max_ctx < hp->ctx_max ? max_ctx : hp->ctx_max;
    f->max_blocks = (f->max_ctx + HR_KV_BLOCK - 1) / HR_KV_BLOCK;
    f->pool = hr_pool_new(n_threads);
    int k_max = hp->d_model > hp->d_ff ? hp->d_model : hp->d_ff;
    if (hp->n_heads * hp->head_dim > k_max)
        k_max = hp->n_heads * hp->head_dim;
    hr_bctx_dims dims = {.max_tokens = max_tokens, .max_seqs = max_seqs, .max_ctx = f->max_ctx,
                         .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads,
                         .rot_dim = hp->rot_dim, .max_k = k_max};
    int rc = HR_ENOMEM;
    f->mem_bytes = scratch_bytes(m, max_tokens);
    f->freq = malloc((size_t)max_seqs * 2 * (hp->rot_dim / 2 + 1) * sizeof *f->freq);
    f->tables = malloc((size_t)max_seqs * f->max_blocks * sizeof *f->tables);
    f->tab_off = malloc((size_t)max_seqs * sizeof *f->tab_off);
    if (!f->pool || !f->freq || !f->tables || !f->tab_off ||
        !(f->mem = f->be->ops->alloc(f->be, f->mem_bytes))) {
        rc = hr_err(err, HR_ENOMEM, "cannot allocate forward scratch for %d tokens (%zu MiB "
                    "on %s)", max_tokens, f->mem_bytes >> 20, f->be->name);
        goto fail;
    }
    hr_arena_wrap(&f->arena, f->mem, f->mem_bytes);
    if ((rc = f->be->ops->ctx_new(f->be, f->pool, &dims, &f->c, err)))
        goto fail;
    *out = f;
    return 0;
fail:
    hr_fwd_free(f);
    return rc;
}

void hr_fwd_free(hr_fwd *f) {
    if (!f)
        return;
    if (f->c)
        f->be->ops->ctx_free(f->c);
    if (f->mem)
        f->be->ops->free(f->be, f->mem, f->mem_bytes);
    hr_pool_free(f->pool);
    free(f->freq);
    free(f->tables);
    free(f->tab_off);
    free(f);
}

hr_pool *hr_fwd_pool(hr_fwd *f) { return f->pool; }

static int validate(const hr_fwd *f, const hr_kv *kv, const hr_batch *b, hr_error *err) {
    const hr_hparams *hp = &f->m->hp;
    if (b->n_tokens <= 0 || b->n_tokens > f->max_tokens)
        return hr_err(err, HR_EINVAL, "batch of %d tokens (this context takes 1..%d)",
                      b->n_tokens, f->max_tokens);
    if (b->n_seqs <= 0 || b->n_seqs > f->max_seqs)
        return hr_err(err, HR_EINVAL, "batch of %d sequences (max %d)", b->n_seqs,
                      f->max_seqs);
    for (int t = 0; t < b->n_tokens; t++) {
        int s = b->seq[t], p = b->pos[t];
        if (b->token[t] < 0 || b->token[t] >= hp->n_vocab)
            return hr_err(err, HR_ERANGE, "token id %d is outside the vocabulary "
                          "(0..%d)", b->token[t], hp->n_vocab - 1);
        if (s < 0 || s >= b->n_seqs)
            return hr_err(err, HR_EINVAL, "token %d names sequence %d of %d", t, s,
                          b->n_seqs);
        if (p < 0 || p >= f->max_ctx)
            return hr_err(err, HR_ERANGE, "position %d is past the context of %d tokens",
                          p, f->max_ctx);
        if (p / HR_KV_BLOCK >= b->seqs[s].n)
            return hr_err(err, HR_EINVAL, "position %d is not covered by sequence "
                          "%d's %d KV blocks", p, s, b->seqs[s].n);
        for (int i = 0; i <= p / HR_KV_BLOCK; i++)
            if (b->seqs[s].table[i] < 0 || b->seqs[s].table[i] >= kv->n_blocks)
                return hr_err(err, HR_EINVAL, "sequence %d has a bad KV block id", s);
        if (t > 0 && b->seq[t - 1] == s && b->pos[t - 1] >= p)
            return hr_err(err, HR_EINVAL, "positions of sequence %d must increase", s);
    }
    return 0;
}

/* ---- the forward pass -------------------------------------------------------- */

/* the host side of a step: per-sequence RoPE frequencies and block tables */
static void stage(hr_fwd *f, const hr_batch *b, hr_step_in *in) {
    const hr_hparams *hp = &f->m->hp;
    int T = b->n_tokens, half = hp->rot_dim / 2, n_tab = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        int len = b->seqs[s].rope_len, last = -1;
        for (int t = 0; t < T; t++)
            if (b->seq[t] == s) {
                if (b->pos[t] + 1 > len)
                    len = b->pos[t] + 1;
                last = b->pos[t];
            }
        float *fs = f->freq + (size_t)s * 2 * (half + 1);
        hr_rope_freqs(&hp->rope, hp->rot_dim, hp->max_pos, len, fs, &fs[half]);
        hr_rope_freqs(hp->has_rope_local ? &hp->rope_local : &hp->rope, hp->rot_dim,
                      hp->max_pos, len, fs + half + 1, &fs[2 * half + 1]);
        /* the blocks up to the sequence's last position in this step */
        int nb = last < 0 ? 0 : last / HR_KV_BLOCK + 1;
        f->tab_off[s] = n_tab;
        memcpy(f->tables + n_tab, b->seqs[s].table, (size_t)nb * sizeof *f->tables);
        n_tab += nb;
    }
    *in = (hr_step_in){
        .n_tokens = T, .n_seqs = b->n_seqs, .token = b->token, .pos = b->pos, .seq = b->seq,
        .logits = b->logits, .tables = f->tables, .tab_off = f->tab_off, .n_tables = n_tab,
        .freq = f->freq, .rot_dim = hp->rot_dim, .rope_local = hp->has_rope_local,
    };
}

static void norm_rows(const hr_backend_ops *ops, hr_bctx *c, const hr_model *m,
                      const hr_norm_w *nw, float *y, const float *x, int T) {
    const hr_hparams *hp = &m->hp;
    ops->norm(c, y, x, nw->w, nw->b, hp->arch->norm == HR_NORM_LAYER ? HR_BNORM_LAYER : HR_BNORM_RMS,
              hp->norm_offset, hp->norm_eps, T, hp->d_model);
}

/* the down projection's waiting threads prefetch the next layer's q, k, v
 * weights, the last layer's the lm_head's */
static void prefetch_after_layer(const hr_backend_ops *ops, hr_bctx *c, const hr_model *m,
                                 int il) {
    if (!ops->prefetch_next)
        return;
    if (il + 1 < m->hp.n_layers) {
        const hr_layer *N = &m->layers[il + 1];
        ops->prefetch_next(c, 3, (const hr_tensor *[]){&N->wq, &N->wk, &N->wv});
    } else {
        ops->prefetch_next(c, 1, (const hr_tensor *[]){m->lm_head});
    }
}

static void prefetch(const hr_backend_ops *ops, hr_bctx *c, int count,
                     const hr_tensor *const *w) {
    if (ops->prefetch_next)
        ops->prefetch_next(c, count, w);
}

static int act_of(hr_act a) {
    return a == HR_ACT_SILU ? HR_BACT_SILU : a == HR_ACT_GELU_TANH ? HR_BACT_GELU_TANH
                                                                   : HR_BACT_GELU;
}

int hr_forward(hr_fwd *f, hr_kv *kv, const hr_batch *b, float *logits,
               hr_error *err) {
    int rc = validate(f, kv, b, err);
    if (rc)
        return rc;
    const hr_model *m = f->m;
    const hr_hparams *hp = &m->hp;
    const hr_arch *arch = hp->arch;
    const hr_backend_ops *ops = f->be->ops;
    hr_bctx *c = f->c;
    int T = b->n_tokens, d = hp->d_model, hd = hp->head_dim, ff = hp->d_ff;
    int qd = hp->n_heads * hd, kvd = hp->n_kv_heads * hd;

    hr_arena *A = &f->arena;
    hr_arena_reset(A);
    float *x = hr_arena_alloc(A, (size_t)T * d * sizeof(float));
    float *xn = hr_arena_alloc(A, (size_t)T * d * sizeof(float));
    float *tmp = hr_arena_alloc(A, (size_t)T * d * sizeof(float));
    float *q = hr_arena_alloc(A, (size_t)T * qd * sizeof(float));
    float *att = hr_arena_alloc(A, (size_t)T * qd * sizeof(float));
    float *k = hr_arena_alloc(A, (size_t)T * kvd * sizeof(float));
    float *v = hr_arena_alloc(A, (size_t)T * kvd * sizeof(float));
    float *g = hr_arena_alloc(A, (size_t)T * ff * sizeof(float));
    float *u = hr_arena_alloc(A, (size_t)T * ff * sizeof(float));
    float *out = f->be->device_mem ? hr_arena_alloc(A, (size_t)T * hp->n_vocab * sizeof(float))
                                   : logits;
    HR_ASSERT(out != NULL); /* the arena was sized for max_tokens */

    int max_ctx = 0; /* positions attended to (validate: < f->max_ctx) */
    for (int t = 0; t < T; t++)
        if (b->pos[t] + 1 > max_ctx)
            max_ctx = b->pos[t] + 1;
    hr_step_in in;
    stage(f, b, &in);
    if ((rc = ops->begin(c, &in, err)))
        return rc;

    float escale = hp->embed_mult;
    if (arch->embed_scale_sqrt)
        escale *= sqrtf((float)d);
    ops->embed(c, x, m->embed, d, escale);

    for (int il = 0; il < hp->n_layers; il++) {
        const hr_layer *L = &m->layers[il];
        bool sliding = hp->layer_sliding[il];

        /* ---- attention ---- */
        const float *ain = x;
        if (L->norm[HR_NORM_PRE_ATTN].w) {
            norm_rows(ops, c, m, &L->norm[HR_NORM_PRE_ATTN], xn, x, T);
            ain = xn;
        }
        ops->matmul(c, ain, d, T, 3,
                    (hr_matmul_out[]){{q, qd, &L->wq, L->bq}, {k, kvd, &L->wk, L->bk},
                                      {v, kvd, &L->wv, L->bv}});
        void *kc = hr_kv_layer_k(kv, il), *vc = hr_kv_layer_v(kv, il);
        ops->qkv(c, &(hr_qkv_args){
            .q = q, .k = k, .v = v, .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads,
            .head_dim = hd,
            .qk_norm = arch->qk_norm == HR_QK_NORM_HEAD   ? HR_BQK_HEAD
                       : arch->qk_norm == HR_QK_NORM_FULL ? HR_BQK_FULL
                                                          : HR_BQK_NONE,
            .q_norm = L->q_norm, .k_norm = L->k_norm, .norm_offset = hp->norm_offset,
            .norm_eps = hp->norm_eps, .rope = hp->layer_rope[il],
            .rope_local = sliding && hp->has_rope_local,
            .rope_interleaved = hp->rope_interleaved, .k_cache = kc, .v_cache = vc,
            .kv_dtype = kv->dtype, .kv_bits = kv->bits, .kv_group = kv->group,
            .block_stride = kv->block_stride, .block_size = HR_KV_BLOCK});
        /* each job's waiting threads prefetch their share of the next
         * product's weights (CPU: hr_matmul_prefetch_next) */
        prefetch(ops, c, 1, (const hr_tensor *[]){&L->wo});
        ops->attention(c, &(hr_attn_in){
            .q = q, .out = att, .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads,
            .head_dim = hd, .k_cache = kc, .v_cache = vc, .kv_dtype = kv->dtype,
            .kv_bits = kv->bits, .kv_group = kv->group,
            .block_stride = kv->block_stride, .block_size = HR_KV_BLOCK,
            .scale = hp->attn_scale, .softcap = hp->attn_softcap,
            .window = sliding ? hp->sliding_window : 0, .max_ctx = max_ctx});
        prefetch(ops, c, L->w_gate.data ? 2 : 1, (const hr_tensor *[]){&L->w_up, &L->w_gate});
        ops->matmul(c, att, qd, T, 1, &(hr_matmul_out){tmp, d, &L->wo, L->bo});
        if (L->norm[HR_NORM_POST_ATTN].w)
            norm_rows(ops, c, m, &L->norm[HR_NORM_POST_ATTN], tmp, tmp, T);
        ops->add(c, x, tmp, hp->residual_mult, (size_t)T * d);

        /* ---- mlp ---- */
        const float *min = x;
        if (L->norm[HR_NORM_PRE_MLP].w) {
            norm_rows(ops, c, m, &L->norm[HR_NORM_PRE_MLP], xn, x, T);
            min = xn;
        }
        prefetch(ops, c, 1, (const hr_tensor *[]){&L->w_down});
        if (L->w_gate.data) {
            ops->matmul(c, min, d, T, 2,
                        (hr_matmul_out[]){{u, ff, &L->w_up, L->b_up}, {g, ff, &L->w_gate, NULL}});
            ops->act(c, act_of(hp->act), g, u, T, ff);
            prefetch_after_layer(ops, c, m, il);
            ops->matmul(c, g, ff, T, 1, &(hr_matmul_out){tmp, d, &L->w_down, L->b_down});
        } else {
            ops->matmul(c, min, d, T, 1, &(hr_matmul_out){u, ff, &L->w_up, L->b_up});
            ops->act(c, act_of(hp->act), u, NULL, T, ff);
            prefetch_after_layer(ops, c, m, il);
            ops->matmul(c, u, ff, T, 1, &(hr_matmul_out){tmp, d, &L->w_down, L->b_down});
        }
        if (L->norm[HR_NORM_POST_MLP].w)
            norm_rows(ops, c, m, &L->norm[HR_NORM_POST_MLP], tmp, tmp, T);
        ops->add(c, x, tmp, hp->residual_mult, (size_t)T * d);
    }

    /* final norm on the rows that want logits, gathered */
    int n_out = ops->gather(c, xn, x, d), V = hp->n_vocab;
    if (n_out > 0) {
        if (m->final_norm.w)
            norm_rows(ops, c, m, &m->final_norm, xn, xn, n_out);
        ops->matmul(c, xn, d, n_out, 1, &(hr_matmul_out){out, V, m->lm_head, NULL});
        if (hp->logit_div != 1.0f || hp->final_softcap > 0)
            ops->logit_scale(c, out, (size_t)n_out * V, hp->logit_div, hp->final_softcap);
    }
    if ((rc = ops->end(c, err)))
        return rc;
    if (n_out > 0 && out != logits)
        rc = f->be->ops->download(f->be, logits, out, (size_t)n_out * V * sizeof(float), err);
    return rc;
}
