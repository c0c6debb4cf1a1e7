#include "model/forward.h"
#include "core/arena.h"
#include "core/error.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"
#include "model/rope.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct hr_fwd {
    const hr_model *m;
    hr_pool *pool;
    int max_tokens, max_seqs, max_ctx;
    hr_arena arena; /* per-step scratch, reset every hr_forward */
};

/* ---- setup --------------------------------------------------------------- */

static size_t scratch_bytes(const hr_hparams *hp, int T, int S, int ctx, int nth) {
    size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    size_t d = hp->d_model, ff = hp->d_ff, half = hp->rot_dim / 2 + 1, rot = hp->rot_dim;
    size_t floats = (size_t)T * (3 * d + 2 * qd + 2 * kvd + 2 * ff + 2 * rot) +
                    (size_t)S * 2 * half +
                    (size_t)nth * HR_ATTN_TILE * (size_t)(hp->n_heads / hp->n_kv_heads) *
                        (size_t)ctx;
    size_t ptrs = (size_t)T * sizeof(int32_t *) + (size_t)S * sizeof(float);
    return floats * sizeof(float) + ptrs + 64 * 32; /* + alignment slack */
}

int hr_fwd_new(hr_fwd **out, const hr_model *m, int max_tokens, int max_seqs, int max_ctx,
               int n_threads, hr_error *err) {
    *out = NULL;
    if (max_tokens <= 0 || max_seqs <= 0)
        return hr_err(err, HR_EINVAL, "forward scratch needs max_tokens, max_seqs > 0");
    hr_fwd *f = calloc(1, sizeof *f);
    if (!f)
        return hr_err(err, HR_ENOMEM, "out of memory");
    f->m = m;
    f->max_tokens = max_tokens;
    f->max_seqs = max_seqs;
    f->max_ctx = max_ctx > 0 && max_ctx < m->hp.ctx_max ? max_ctx : m->hp.ctx_max;
    f->pool = hr_pool_new(n_threads);
    const hr_hparams *hp = &m->hp;
    int k_max = hp->d_model > hp->d_ff ? hp->d_model : hp->d_ff;
    if (hp->n_heads * hp->head_dim > k_max)
        k_max = hp->n_heads * hp->head_dim;
    if (!f->pool ||
        hr_arena_init(&f->arena, scratch_bytes(hp, max_tokens, max_seqs, f->max_ctx,
                                               hr_pool_size(f->pool))) ||
        !hr_matmul_reserve(f->pool, max_tokens, k_max)) { /* no allocation mid-pass */
        hr_fwd_free(f);
        return hr_err(err, HR_ENOMEM, "cannot allocate forward scratch for %d tokens",
                      max_tokens);
    }
    *out = f;
    return 0;
}

void hr_fwd_free(hr_fwd *f) {
    if (!f)
        return;
    hr_pool_free(f->pool);
    hr_arena_deinit(&f->arena);
    free(f);
}

hr_pool *hr_fwd_pool(hr_fwd *f) { return f->pool; }

/* ---- pieces ---------------------------------------------------------------- */

/* Row-wise work between the matmuls runs on the pool when the batch has
 * more than one row (decode of several sequences, prefill), inline for one:
 * a dispatch costs more than a single row's norm. Each row's math is the
 * same whichever thread runs it, so the pass stays batch-invariant. */
static void run_rows(hr_pool *pool, int T, hr_task_fn fn, void *ctx) {
    if (T > 1)
        hr_pool_run(pool, fn, ctx);
    else
        fn(ctx, 0, 1);
}

/* the down projection's waiting threads prefetch the next layer's q, k, v
 * weights, the last layer's the lm_head's */
static void prefetch_after_layer(hr_pool *pool, const hr_model *m, int il) {
    if (il + 1 < m->hp.n_layers) {
        const hr_layer *N = &m->layers[il + 1];
        hr_matmul_prefetch_next(pool, 3, (const hr_tensor *[]){&N->wq, &N->wk, &N->wv});
    } else {
        hr_matmul_prefetch_next(pool, 1, (const hr_tensor *[]){m->lm_head});
    }
}

typedef struct norm_task {
    const hr_model *m;
    const hr_norm_w *nw;
    float *y;
    const float *x;
    int T, d;
} norm_task;

static void norm_worker(void *p, int ith, int nth) {
    const norm_task *a = p;
    const hr_hparams *hp = &a->m->hp;
    long lo, hi;
    hr_split(a->T, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        float *y = a->y + (size_t)t * a->d;
        const float *x = a->x + (size_t)t * a->d;
        if (hp->arch->norm == HR_NORM_LAYER)
            hr_layernorm(y, x, a->nw->w, a->nw->b, a->d, hp->norm_eps);
        else
            hr_rmsnorm(y, x, a->nw->w, hp->norm_offset, a->d, hp->norm_eps);
    }
}

static void norm_rows(hr_pool *pool, const hr_model *m, const hr_norm_w *nw, float *y,
                      const float *x, int T, int d) {
    norm_task a = {m, nw, y, x, T, d};
    run_rows(pool, T, norm_worker, &a);
}

typedef struct act_task {
    hr_act act;
    float *g;
    const float *u;
    size_t n;
} act_task;

static void act_worker(void *p, int ith, int nth) {
    const act_task *a = p;
    long lo, hi;
    hr_split((long)(a->n / 16), ith, nth, &lo, &hi); /* 16-float chunks */
    size_t i0 = (size_t)lo * 16, i1 = ith == nth - 1 ? a->n : (size_t)hi * 16;
    float *g = a->g + i0;
    const float *u = a->u ? a->u + i0 : NULL;
    int n = (int)(i1 - i0);
    switch (a->act) {
    case HR_ACT_SILU: hr_silu_mul(g, u, n); break;
    case HR_ACT_GELU_TANH: hr_gelu_tanh_mul(g, u, n); break;
    case HR_ACT_GELU: hr_gelu_mul(g, u, n); break;
    }
}

static void act_rows(hr_pool *pool, int T, hr_act act, float *g, const float *u, size_t n) {
    act_task a = {act, g, u, n};
    run_rows(pool, T, act_worker, &a);
}

/* Per token, before the layers: its RoPE tables, [full | local] (the local
 * one only where the model has one), from its sequence's frequencies. */
typedef struct rope_task {
    const hr_hparams *hp;
    const hr_batch *b;
    const float *freq;
    float *cs;
} rope_task;

static void rope_worker(void *p, int ith, int nth) {
    const rope_task *a = p;
    const hr_hparams *hp = a->hp;
    int rot = hp->rot_dim, half = rot / 2;
    long lo, hi;
    hr_split(a->b->n_tokens, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        const float *fs = a->freq + (size_t)a->b->seq[t] * 2 * (half + 1);
        float *cs = a->cs + (size_t)t * 2 * rot;
        hr_rope_table(cs, rot, a->b->pos[t], fs, fs[half]);
        if (hp->has_rope_local)
            hr_rope_table(cs + rot, rot, a->b->pos[t], fs + half + 1, fs[2 * half + 1]);
    }
}

/* Per token after the q/k/v projections: q/k norms, RoPE, K/V into the
 * cache ([block][kv_head][slot][hd]). */
typedef struct qkv_task {
    const hr_model *m;
    const hr_layer *L;
    const hr_batch *b;
    hr_kv *kv;
    float *q, *k;
    const float *v, *cs;
    const int32_t *const *tok_blocks;
    int il;
    bool sliding;
} qkv_task;

static void qkv_worker(void *p, int ith, int nth) {
    const qkv_task *a = p;
    const hr_hparams *hp = &a->m->hp;
    const hr_arch *arch = hp->arch;
    int hd = hp->head_dim, qd = hp->n_heads * hd, kvd = hp->n_kv_heads * hd, rot = hp->rot_dim;
    long lo, hi;
    hr_split(a->b->n_tokens, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        float *qt = a->q + (size_t)t * qd, *kt = a->k + (size_t)t * kvd;
        if (arch->qk_norm == HR_QK_NORM_HEAD) {
            for (int h = 0; h < hp->n_heads; h++)
                hr_rmsnorm(qt + h * hd, qt + h * hd, a->L->q_norm, hp->norm_offset, hd,
                           hp->norm_eps);
            for (int h = 0; h < hp->n_kv_heads; h++)
                hr_rmsnorm(kt + h * hd, kt + h * hd, a->L->k_norm, hp->norm_offset, hd,
                           hp->norm_eps);
        } else if (arch->qk_norm == HR_QK_NORM_FULL) {
            hr_rmsnorm(qt, qt, a->L->q_norm, hp->norm_offset, qd, hp->norm_eps);
            hr_rmsnorm(kt, kt, a->L->k_norm, hp->norm_offset, kvd, hp->norm_eps);
        }
        int pos = a->b->pos[t];
        if (hp->layer_rope[a->il] && rot >= 2) {
            const float *cs = a->cs + (size_t)t * 2 * rot;
            if (a->sliding && hp->has_rope_local)
                cs += rot;
            hr_rope(qt, hp->n_heads, hd, rot, cs, hp->rope_interleaved);
            hr_rope(kt, hp->n_kv_heads, hd, rot, cs, hp->rope_interleaved);
        }
        for (int h = 0; h < hp->n_kv_heads; h++)
            hr_kv_store(a->kv, a->il, a->tok_blocks[t][pos / HR_KV_BLOCK], h, pos % HR_KV_BLOCK,
                        kt + h * hd, a->v + (size_t)t * kvd + h * hd);
    }
}

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

int hr_forward(hr_fwd *f, hr_kv *kv, const hr_batch *b, float *logits,
               hr_error *err) {
    int rc = validate(f, kv, b, err);
    if (rc)
        return rc;
    const hr_model *m = f->m;
    const hr_hparams *hp = &m->hp;
    const hr_arch *arch = hp->arch;
    hr_pool *pool = f->pool;
    int T = b->n_tokens, d = hp->d_model, hd = hp->head_dim, ff = hp->d_ff;
    int qd = hp->n_heads * hd, kvd = hp->n_kv_heads * hd, half = hp->rot_dim / 2;
    int nth = hr_pool_size(pool);

    hr_arena *A = &f->arena;
    hr_arena_reset(A);
#define ALLOC(type, n) ((type *)hr_arena_alloc(A, (size_t)(n) * sizeof(type)))
    float *x = ALLOC(float, (size_t)T * d), *xn = ALLOC(float, (size_t)T * d);
    float *tmp = ALLOC(float, (size_t)T * d);
    float *q = ALLOC(float, (size_t)T * qd), *att = ALLOC(float, (size_t)T * qd);
    float *k = ALLOC(float, (size_t)T * kvd), *v = ALLOC(float, (size_t)T * kvd);
    float *g = ALLOC(float, (size_t)T * ff), *u = ALLOC(float, (size_t)T * ff);
    float *freq = ALLOC(float, (size_t)b->n_seqs * 2 * (half + 1));
    float *cs = ALLOC(float, (size_t)T * 2 * hp->rot_dim);
    float *scores = ALLOC(float, (size_t)nth * HR_ATTN_TILE * (hp->n_heads / hp->n_kv_heads) *
                                     f->max_ctx);
    const int32_t **tok_blocks = ALLOC(const int32_t *, T);
#undef ALLOC
    HR_ASSERT(tok_blocks != NULL); /* the arena was sized for max_tokens */

    /* rope tables per sequence: [full half | factor][local half | factor] */
    int max_ctx = 0; /* positions attended to (validate: < f->max_ctx) */
    for (int t = 0; t < T; t++)
        if (b->pos[t] + 1 > max_ctx)
            max_ctx = b->pos[t] + 1;
    for (int s = 0; s < b->n_seqs; s++) {
        int len = b->seqs[s].rope_len;
        for (int t = 0; t < T; t++)
            if (b->seq[t] == s && b->pos[t] + 1 > len)
                len = b->pos[t] + 1;
        float *fs = freq + (size_t)s * 2 * (half + 1);
        hr_rope_freqs(&hp->rope, hp->rot_dim, hp->max_pos, len, fs, &fs[half]);
        hr_rope_freqs(hp->has_rope_local ? &hp->rope_local : &hp->rope, hp->rot_dim,
                      hp->max_pos, len, fs + half + 1, &fs[2 * half + 1]);
    }
    if (half > 0)
        run_rows(pool, T, rope_worker, &(rope_task){hp, b, freq, cs});
    for (int t = 0; t < T; t++)
        tok_blocks[t] = b->seqs[b->seq[t]].table;

    /* embeddings */
    float escale = hp->embed_mult;
    if (arch->embed_scale_sqrt)
        escale *= sqrtf((float)d);
    for (int t = 0; t < T; t++) {
        float *xt = x + (size_t)t * d;
        hr_dequant_range(m->embed, b->token[t], 0, d, xt); /* one row */
        for (int i = 0; i < d; i++)
            xt[i] *= escale;
    }

    for (int il = 0; il < hp->n_layers; il++) {
        const hr_layer *L = &m->layers[il];
        bool sliding = hp->layer_sliding[il];

        /* ---- attention ---- */
        const float *ain = x;
        if (L->norm[HR_NORM_PRE_ATTN].w) {
            norm_rows(pool, m, &L->norm[HR_NORM_PRE_ATTN], xn, x, T, d);
            ain = xn;
        }
        hr_matmul_multi(pool, ain, d, T, 3,
                        (hr_matmul_out[]){{q, qd, &L->wq, L->bq}, {k, kvd, &L->wk, L->bk},
                                          {v, kvd, &L->wv, L->bv}});
        qkv_task qa = {.m = m, .L = L, .b = b, .kv = kv, .q = q, .k = k, .v = v, .cs = cs,
                       .tok_blocks = tok_blocks, .il = il, .sliding = sliding};
        run_rows(pool, T, qkv_worker, &qa);
        hr_attn_args aa = {
            .q = q, .out = att, .n_tok = T, .n_heads = hp->n_heads,
            .n_kv_heads = hp->n_kv_heads, .head_dim = hd,
            .k = hr_kv_layer_k(kv, il), .v = hr_kv_layer_v(kv, il),
            .kv_dtype = kv->dtype, .block_stride = kv->block_stride,
            .block_size = HR_KV_BLOCK,
            .pos = b->pos, .blocks = tok_blocks, .scale = hp->attn_scale,
            .softcap = hp->attn_softcap, .window = sliding ? hp->sliding_window : 0,
            .scratch = scores, .max_ctx = max_ctx,
        };
        /* each job's waiting threads prefetch their share of the next
         * product's weights (hr_matmul_prefetch_next) */
        hr_matmul_prefetch_next(pool, 1, (const hr_tensor *[]){&L->wo});
        hr_attention(pool, &aa);
        hr_matmul_prefetch_next(pool, L->w_gate.data ? 2 : 1,
                                (const hr_tensor *[]){&L->w_up, &L->w_gate});
        hr_matmul(pool, tmp, d, att, qd, T, &L->wo, L->bo);
        if (L->norm[HR_NORM_POST_ATTN].w)
            norm_rows(pool, m, &L->norm[HR_NORM_POST_ATTN], tmp, tmp, T, d);
        for (size_t i = 0; i < (size_t)T * d; i++)
            x[i] += tmp[i] * hp->residual_mult;

        /* ---- mlp ---- */
        const float *min = x;
        if (L->norm[HR_NORM_PRE_MLP].w) {
            norm_rows(pool, m, &L->norm[HR_NORM_PRE_MLP], xn, x, T, d);
            min = xn;
        }
        hr_matmul_prefetch_next(pool, 1, (const hr_tensor *[]){&L->w_down});
        if (L->w_gate.data) {
            hr_matmul_multi(pool, min, d, T, 2,
                            (hr_matmul_out[]){{u, ff, &L->w_up, L->b_up},
                                              {g, ff, &L->w_gate, NULL}});
            act_rows(pool, T, hp->act, g, u, (size_t)T * ff);
            prefetch_after_layer(pool, m, il);
            hr_matmul(pool, tmp, d, g, ff, T, &L->w_down, L->b_down);
        } else {
            hr_matmul(pool, u, ff, min, d, T, &L->w_up, L->b_up);
            act_rows(pool, T, hp->act, u, NULL, (size_t)T * ff);
            prefetch_after_layer(pool, m, il);
            hr_matmul(pool, tmp, d, u, ff, T, &L->w_down, L->b_down);
        }
        if (L->norm[HR_NORM_POST_MLP].w)
            norm_rows(pool, m, &L->norm[HR_NORM_POST_MLP], tmp, tmp, T, d);
        for (size_t i = 0; i < (size_t)T * d; i++)
            x[i] += tmp[i] * hp->residual_mult;
    }

    /* final norm on the rows that want logits, gathered */
    int n_out = 0;
    for (int t = 0; t < T; t++) {
        if (!b->logits[t])
            continue;
        float *dst = xn + (size_t)n_out * d, *src = x + (size_t)t * d;
        if (m->final_norm.w)
            norm_rows(NULL, m, &m->final_norm, dst, src, 1, d);
        else
            memcpy(dst, src, (size_t)d * sizeof(float));
        n_out++;
    }
    if (n_out == 0)
        return 0;
    int V = hp->n_vocab;
    hr_matmul(pool, logits, V, xn, d, n_out, m->lm_head, NULL);
    if (hp->logit_div != 1.0f || hp->final_softcap > 0)
        for (size_t i = 0; i < (size_t)n_out * V; i++) {
            logits[i] /= hp->logit_div;
            if (hp->final_softcap > 0)
                logits[i] = tanhf(logits[i] / hp->final_softcap) * hp->final_softcap;
        }
    return 0;
}
