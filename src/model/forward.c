#include "model/forward.h"
#include "core/arena.h"
#include "core/error.h"
#include "kernels/backend.h"
#include "model/adapter.h"
#include "model/rope.h"
#include "model/rstate.h"

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
    int32_t *rtables;          /* [max_seqs * max_blocks] the residual window's */
    uint8_t *seq_kv2;          /* [max_seqs] validate: the sequence's tokens use b->kv2 */

    int n_tokens;                    /* this step's */
    /* this step's LoRA groups: the distinct adapters of the batch and the
     * tokens of each (hr_lora_args) */
    int n_groups;
    const hr_adapter **g_ad;         /* [max_seqs] */
    int32_t *g_rows, *g_off;         /* [max_tokens], [max_seqs + 1] */
    const hr_lora_mat **g_mat;       /* [HR_LORA_MAX_OUT][max_seqs] */
    hr__rstate rs;                   /* recurrent layers' state slots */
};

/* ---- setup --------------------------------------------------------------- */

/* backend memory for a step's activations (and its logits, off the host) */
static size_t scratch_bytes(const hr_model *m, int T) {
    const hr_hparams *hp = &m->hp;
    size_t qd = (size_t)hp->n_heads * hp->head_dim, kvd = (size_t)hp->n_kv_heads * hp->head_dim;
    size_t d = hp->d_model, ff = hp->d_ff;
    size_t mff = hp->d_ff_expert > hp->d_ff_shared ? hp->d_ff_expert : hp->d_ff_shared;
    ff = ff > mff ? ff : mff;
    size_t floats = (size_t)T * (3 * d + 2 * qd + 2 * kvd + 2 * ff);
    if (hp->arch->moe.beside_dense) /* the router's input, the experts' output */
        floats += (size_t)T * 2 * d;
    if (hp->arch->attn_out_gate)
        floats += (size_t)T * qd;
    if (hp->n_linear && hp->arch->mamba2) {
        size_t c = (size_t)hp->mb_inner + 2 * (size_t)hp->mb_groups * hp->mb_state;
        floats += (size_t)T * ((hp->mb_inner + c + hp->mb_heads) + c + hp->mb_inner);
    } else if (hp->n_linear) {
        size_t kd = (size_t)hp->ln_k_heads * hp->ln_k_dim, vd = (size_t)hp->ln_v_heads * hp->ln_v_dim;
        floats += (size_t)T * (2 * kd + 2 * vd + 2 * hp->ln_v_heads + 2 * kd + vd + vd);
    }
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
    int moe_ff = hp->d_ff_expert > hp->d_ff_shared ? hp->d_ff_expert : hp->d_ff_shared;
    if (moe_ff > k_max)
        k_max = moe_ff;
    if (hp->ln_v_heads * hp->ln_v_dim > k_max) /* DeltaNet's out_proj */
        k_max = hp->ln_v_heads * hp->ln_v_dim;
    if (hp->mb_inner > k_max) /* Mamba-2's out_proj */
        k_max = hp->mb_inner;
    hr_bctx_dims dims = {.max_tokens = max_tokens, .max_seqs = max_seqs, .max_ctx = f->max_ctx,
                         .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads,
                         .head_dim = hp->head_dim, .rot_dim = hp->rot_dim, .max_k = k_max,
                         .d_model = hp->d_model, .n_experts = hp->n_experts,
                         .n_experts_used = hp->n_experts_used, .moe_ff = moe_ff,
                         .images = m->mm || m->mm_qwen || m->mm_audio,
                         .f32_act = m->f32_act};
    int rc = HR_ENOMEM;
    f->mem_bytes = scratch_bytes(m, max_tokens);
    f->freq = malloc((size_t)max_seqs * 2 * (hp->rot_dim / 2 + 1) * sizeof *f->freq);
    f->tables = malloc((size_t)max_seqs * f->max_blocks * sizeof *f->tables);
    f->rtables = malloc((size_t)max_seqs * f->max_blocks * sizeof *f->rtables);
    f->tab_off = malloc((size_t)max_seqs * sizeof *f->tab_off);
    f->seq_kv2 = malloc((size_t)max_seqs);
    f->g_ad = malloc((size_t)max_seqs * sizeof *f->g_ad);
    f->g_rows = malloc((size_t)max_tokens * sizeof *f->g_rows);
    f->g_off = malloc(((size_t)max_seqs + 1) * sizeof *f->g_off);
    f->g_mat = malloc((size_t)HR_LORA_MAX_OUT * max_seqs * sizeof *f->g_mat);
    if (!f->pool || !f->freq || !f->tables || !f->rtables || !f->tab_off || !f->seq_kv2 ||
        !f->g_ad || !f->g_rows || !f->g_off || !f->g_mat ||
        !(f->mem = f->be->ops->alloc(f->be, f->mem_bytes))) {
        rc = hr_err(err, HR_ENOMEM, "cannot allocate forward scratch for %d tokens (%zu MiB "
                    "on %s)", max_tokens, f->mem_bytes >> 20, f->be->name);
        goto fail;
    }
    hr_arena_wrap(&f->arena, f->mem, f->mem_bytes);
    if ((rc = f->be->ops->ctx_new(f->be, f->pool, &dims, &f->c, err)) ||
        (rc = hr__rstate_init(&f->rs, hp, f->be, max_seqs, err)))
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
    free(f->rtables);
    free(f->tab_off);
    free(f->seq_kv2);
    free(f->g_ad);
    free(f->g_rows);
    free(f->g_off);
    free(f->g_mat);
    hr__rstate_deinit(&f->rs);
    free(f);
}

hr_pool *hr_fwd_pool(hr_fwd *f) { return f->pool; }

size_t hr_fwd_state_bytes(const hr_fwd *f) { return hr__rstate_bytes(&f->rs); }

int hr_fwd_state_get(hr_fwd *f, uint64_t id, int pos, void *dst, hr_error *err) {
    return hr__rstate_get(&f->rs, id, pos, dst, err);
}

int hr_fwd_state_put(hr_fwd *f, uint64_t id, int pos, const void *src, hr_error *err) {
    return hr__rstate_put(&f->rs, id, pos, src, err);
}

void hr_fwd_state_drop(hr_fwd *f, uint64_t id) { hr__rstate_drop(&f->rs, id); }

int hr_fwd_warm(hr_fwd *f, hr_kv *kv, uint64_t id, float *logits, float *hidden, hr_error *err) {
    if (kv->n_free < 1)
        return hr_err(err, HR_ENOMEM, "no free KV block");
    int32_t block = hr_kv_alloc(kv), tok = 0, pos = 0, seq = 0;
    uint8_t want = f->m->hp.arch->encoder ? 2 : 1;
    hr_seq_blocks sb = {.table = &block, .n = 1, .id = id};
    hr_batch b = {.n_tokens = 1, .token = &tok, .pos = &pos, .seq = &seq, .logits = &want,
                  .n_seqs = 1, .seqs = &sb};
    int rc = hr_forward_out(f, kv, &b, logits, hidden, err);
    hr_fwd_state_drop(f, id);
    hr_kv_unref(kv, block);
    return rc;
}

static int validate(hr_fwd *f, const hr_kv *kv, const hr_batch *b, bool hidden,
                    hr_error *err) {
    const hr_hparams *hp = &f->m->hp;
    for (int t = 0; t < b->n_tokens && b->n_tokens > 0; t++) {
        if (b->logits[t] == 1 && hp->arch->encoder)
            return hr_err(err, HR_EINVAL, "%s is an encoder: it gives embeddings, not "
                          "logits", hp->arch->model_type);
        if (b->logits[t] == 2 && !hidden)
            return hr_err(err, HR_EINVAL, "a hidden-state row with nowhere to put it");
        if (b->logits[t] > 2)
            return hr_err(err, HR_EINVAL, "token %d: output kind %d", t, b->logits[t]);
    }
    if (b->rope_pos && !hp->mrope_section[0] && !hp->mrope_section[1] && !hp->mrope_section[2])
        return hr_err(err, HR_EINVAL, "M-RoPE positions for a model without M-RoPE");
    if (b->embd && !b->embd_row)
        return hr_err(err, HR_EINVAL, "image rows without embd_row");
    for (int t = 0; b->attn_end && t < b->n_tokens; t++)
        if (b->attn_end[t] <= b->pos[t] || b->attn_end[t] > f->max_ctx)
            return hr_err(err, HR_EINVAL, "token %d: attn_end %d outside (%d, %d]", t,
                          b->attn_end[t], b->pos[t], f->max_ctx);
    if (b->n_tokens <= 0 || b->n_tokens > f->max_tokens)
        return hr_err(err, HR_EINVAL, "batch of %d tokens (this context takes 1..%d)",
                      b->n_tokens, f->max_tokens);
    if (b->n_seqs <= 0 || b->n_seqs > f->max_seqs)
        return hr_err(err, HR_EINVAL, "batch of %d sequences (max %d)", b->n_seqs,
                      f->max_seqs);
    if (b->kv2 && (b->kv2_from < 0 || b->kv2_from > b->n_tokens ||
                   b->kv2->n_layers != kv->n_layers || b->kv2->n_kv_heads != kv->n_kv_heads ||
                   b->kv2->head_dim != kv->head_dim))
        return hr_err(err, HR_EINVAL, "a second KV pool that does not fit this step");
    const hr_kv *rk = b->resid_kv;
    if (rk && f->be->device_mem)
        return hr_err(err, HR_EUNSUPPORTED, "--kv-residual is not supported yet on %s",
                      f->be->name);
    if (rk && (!b->rtables || b->resid <= 0 || b->resid % HR_KV_BLOCK ||
               hr_kv_is_rec(rk->dtype) || rk->n_layers != kv->n_layers ||
               rk->n_kv_heads != kv->n_kv_heads || rk->head_dim != kv->head_dim))
        return hr_err(err, HR_EINVAL, "a residual window's pool that does not fit this step");
    for (int t = 0; t < b->n_tokens; t++) {
        int s = b->seq[t], p = b->pos[t];
        bool two = b->kv2 && t >= b->kv2_from;
        const hr_kv *pool = two ? b->kv2 : kv;
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
            if (b->seqs[s].table[i] < 0 || b->seqs[s].table[i] >= pool->n_blocks)
                return hr_err(err, HR_EINVAL, "sequence %d has a bad KV block id", s);
        /* its window's blocks, up to the last key it reads in it */
        int w0 = rk ? p / b->resid * b->resid : 0;
        int last = b->attn_end && b->attn_end[t] - 1 > p ? b->attn_end[t] - 1 : p;
        if (rk && last >= w0 + b->resid)
            last = w0 + b->resid - 1;
        for (int i = w0 / HR_KV_BLOCK; rk && i <= last / HR_KV_BLOCK; i++)
            if (!b->rtables[s] || b->rtables[s][i] < 0 ||
                b->rtables[s][i] >= rk->n_blocks)
                return hr_err(err, HR_EINVAL, "sequence %d has a bad residual block id", s);
        if (b->kv2) { /* seq_kv2[s]: s has tokens before kv2_from */
            if (t == 0)
                memset(f->seq_kv2, 0, (size_t)b->n_seqs);
            if (two && f->seq_kv2[s])
                return hr_err(err, HR_EINVAL, "sequence %d has tokens in both KV pools", s);
            f->seq_kv2[s] = !two;
        }
        if (t > 0 && b->seq[t - 1] == s && b->pos[t - 1] >= p)
            return hr_err(err, HR_EINVAL, "positions of sequence %d must increase", s);
    }
    return 0;
}

/* ---- adapters ---------------------------------------------------------------- */

/* The batch's rows grouped by adapter (f->g_*). Errors: an adapter of
 * another model, a backend without adapters. */
static int group_adapters(hr_fwd *f, const hr_batch *b, hr_error *err) {
    f->n_groups = 0;
    if (!b->adapter)
        return 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const hr_adapter *ad = b->adapter[s];
        if (!ad)
            continue;
        if (ad->model != f->m)
            return hr_err(err, HR_EINVAL, "adapter %s was loaded for another model", ad->name);
        if (!f->be->ops->lora)
            return hr_err(err, HR_EUNSUPPORTED, "adapters are not supported yet on %s",
                          f->be->name);
        int g = 0;
        while (g < f->n_groups && f->g_ad[g] != ad)
            g++;
        if (g == f->n_groups)
            f->g_ad[f->n_groups++] = ad;
    }
    int n = 0;
    for (int g = 0; g < f->n_groups; g++) {
        f->g_off[g] = n;
        for (int t = 0; t < b->n_tokens; t++)
            if (b->adapter[b->seq[t]] == f->g_ad[g])
                f->g_rows[n++] = t;
    }
    f->g_off[f->n_groups] = n;
    return 0;
}

/* The products of x (k columns) into out[0..n_out), with each group's
 * deltas on out[0..count) (slots[i]: HR_LORA_* of out[i]); the plain
 * products when no group adapts them. */
static void product(hr_fwd *f, const float *x, int k, int T, int il, int n_out, int count,
                    const int *slots, const hr_matmul_out *out) {
    hr_lora_out lo[HR_LORA_MAX_OUT];
    bool any = false;
    for (int o = 0; o < count && f->n_groups; o++) {
        const hr_lora_mat **mat = f->g_mat + (size_t)o * f->max_seqs;
        for (int g = 0; g < f->n_groups; g++) {
            mat[g] = hr_adapter_mat(f->g_ad[g], il, slots[o]);
            any |= mat[g] != NULL;
        }
        lo[o] = (hr_lora_out){.y = out[o].y, .ldy = out[o].ldy, .n = out[o].ldy,
                              .bias = out[o].bias, .mat = mat};
    }
    if (!any) {
        f->be->ops->matmul(f->c, x, k, T, n_out, out);
        return;
    }
    f->be->ops->lora(f->c, x, k, T, n_out, out,
                     &(hr_lora_args){.x = x, .ldx = k, .k = k, .n_groups = f->n_groups,
                                     .rows = f->g_rows, .off = f->g_off, .count = count,
                                     .out = lo});
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
        if (b->resid_kv)
            memcpy(f->rtables + n_tab, b->rtables[s], (size_t)nb * sizeof *f->rtables);
        n_tab += nb;
    }
    *in = (hr_step_in){
        .n_tokens = T, .n_seqs = b->n_seqs, .token = b->token, .pos = b->pos, .seq = b->seq,
        .logits = b->logits, .tables = f->tables, .tab_off = f->tab_off, .n_tables = n_tab,
        .freq = f->freq, .rot_dim = hp->rot_dim, .rope_local = hp->has_rope_local,
        .embd = b->embd, .embd_row = b->embd ? b->embd_row : NULL,
        .attn_end = b->attn_end, .mrope_pos = b->rope_pos,
        .kv_split = b->kv2 ? b->kv2_from : -1,
        .rtables = b->resid_kv ? f->rtables : NULL, .resid = b->resid_kv ? b->resid : 0,
        .mrope_section = {hp->mrope_section[0], hp->mrope_section[1], hp->mrope_section[2]},
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

/* a gated DeltaNet layer: out = out_proj(deltanet(x)) */
static void linear_attention(hr_fwd *f, const hr_layer *L, int il, const float *x, float *out,
                             float *qkvz, float *ba, float *mixed, float *o) {
    const hr_hparams *hp = &f->m->hp;
    const hr_backend_ops *ops = f->be->ops;
    int d = hp->d_model, kd = hp->ln_k_heads * hp->ln_k_dim, vd = hp->ln_v_heads * hp->ln_v_dim;
    int T = f->n_tokens;
    ops->matmul(f->c, x, d, T, 2,
                (hr_matmul_out[]){{qkvz, 2 * kd + 2 * vd, &L->ln_qkvz, NULL},
                                  {ba, 2 * hp->ln_v_heads, &L->ln_ba, NULL}});
    ops->deltanet(f->c, &(hr_deltanet_args){
        .qkvz = qkvz, .ba = ba, .mixed = mixed, .out = o, .n_k_heads = hp->ln_k_heads,
        .n_v_heads = hp->ln_v_heads, .dk = hp->ln_k_dim, .dv = hp->ln_v_dim,
        .conv_k = hp->ln_conv, .conv_w = L->ln_conv, .a = L->ln_a,
        .dt_bias = L->ln_dt_bias, .norm_w = L->ln_norm, .norm_eps = hp->norm_eps,
        .conv_state = f->rs.conv[il], .state = f->rs.state[il], .slot = f->rs.seq_slot});
    ops->matmul(f->c, o, vd, T, 1, &(hr_matmul_out){out, d, &L->ln_out, NULL});
}

/* a Mamba-2 layer: out = out_proj(mamba2(in_proj x)) */
static void mamba2_layer(hr_fwd *f, const hr_layer *L, int il, const float *x, float *out,
                         float *zxbcdt, float *mixed, float *y) {
    const hr_hparams *hp = &f->m->hp;
    const hr_backend_ops *ops = f->be->ops;
    int d = hp->d_model, I = hp->mb_inner, T = f->n_tokens;
    int w = 2 * I + 2 * hp->mb_groups * hp->mb_state + hp->mb_heads;
    ops->matmul(f->c, x, d, T, 1, &(hr_matmul_out){zxbcdt, w, &L->mb_in, NULL});
    ops->mamba2(f->c, &(hr_mamba2_args){
        .zxbcdt = zxbcdt, .mixed = mixed, .out = y, .heads = hp->mb_heads,
        .head_dim = hp->mb_head_dim, .groups = hp->mb_groups, .n = hp->mb_state,
        .conv_k = hp->mb_conv, .conv_w = L->mb_conv, .conv_b = L->mb_conv_b,
        .a = L->mb_a, .dt_bias = L->mb_dt_bias, .d_skip = L->mb_d,
        .norm_w = L->mb_norm, .norm_eps = hp->norm_eps, .conv_state = f->rs.conv[il],
        .state = f->rs.state[il], .slot = f->rs.seq_slot});
    ops->matmul(f->c, y, I, T, 1, &(hr_matmul_out){out, d, &L->mb_out, NULL});
}

/* a layer's routed MLP: out = moe(x), routed by rx (NULL: x) */
static void moe(const hr_backend_ops *ops, hr_bctx *c, const hr_model *m, const hr_layer *L,
                float *out, const float *x, const float *rx) {
    const hr_hparams *hp = &m->hp;
    const hr_arch_moe *mo = &hp->arch->moe;
    ops->moe(c, &(hr_moe_args){
        .x = x, .router_x = rx, .expert_scale = L->expert_scale, .out = out,
        .d = hp->d_model, .n_experts = hp->n_experts,
        .k = hp->n_experts_used, .ff = hp->d_ff_expert,
        .router = mo->router == HR_ROUTER_TOPK_SOFTMAX      ? HR_BROUTER_TOPK_SOFTMAX
                  : mo->router == HR_ROUTER_SIGMOID_GROUPED ? HR_BROUTER_SIGMOID_GROUPED
                                                            : HR_BROUTER_SOFTMAX_TOPK,
        .score_bias = L->score_bias, .n_group = hp->n_group, .topk_group = hp->topk_group,
        .scale = hp->routed_scale,
        .norm_topk = hp->norm_topk, .router_w = &L->router, .router_b = L->router_b,
        .gate = L->e_gate, .up = L->e_up, .down = L->e_down, .b_gate = L->eb_gate,
        .b_up = L->eb_up, .b_down = L->eb_down,
        .act = mo->swiglu_clamped ? HR_BACT_SWIGLU_CLAMPED : act_of(hp->act),
        .alpha = hp->swiglu_alpha, .limit = hp->swiglu_limit,
        .sh_ff = L->sh_gate.data ? hp->d_ff_shared : 0, .sh_gate = &L->sh_gate,
        .sh_up = &L->sh_up, .sh_down = &L->sh_down, .sh_inp = &L->sh_inp});
}

int hr_forward(hr_fwd *f, hr_kv *kv, const hr_batch *b, float *logits,
               hr_error *err) {
    return hr_forward_out(f, kv, b, logits, NULL, err);
}

int hr_forward_out(hr_fwd *f, hr_kv *kv, const hr_batch *b, float *logits, float *hidden,
                   hr_error *err) {
    int rc = validate(f, kv, b, hidden != NULL, err);
    if (rc || (rc = group_adapters(f, b, err)) || (rc = hr__rstate_assign(&f->rs, kv, b, err)))
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
    float *qgate = arch->attn_out_gate ? hr_arena_alloc(A, (size_t)T * qd * sizeof(float)) : NULL;
    float *rx = NULL, *ex = NULL; /* moe.beside_dense: the router's input, the experts' output */
    if (arch->moe.beside_dense) {
        rx = hr_arena_alloc(A, (size_t)T * d * sizeof(float));
        ex = hr_arena_alloc(A, (size_t)T * d * sizeof(float));
    }
    float *lq = NULL, *lba = NULL, *lmix = NULL, *lout = NULL;
    if (hp->n_linear && arch->mamba2) {
        size_t I = (size_t)hp->mb_inner, c = I + 2 * (size_t)hp->mb_groups * hp->mb_state;
        lq = hr_arena_alloc(A, (size_t)T * (I + c + hp->mb_heads) * sizeof(float));
        lmix = hr_arena_alloc(A, (size_t)T * c * sizeof(float));
        lout = hr_arena_alloc(A, (size_t)T * I * sizeof(float));
    } else if (hp->n_linear) {
        size_t kd = (size_t)hp->ln_k_heads * hp->ln_k_dim, vd = (size_t)hp->ln_v_heads * hp->ln_v_dim;
        lq = hr_arena_alloc(A, (size_t)T * (2 * kd + 2 * vd) * sizeof(float));
        lba = hr_arena_alloc(A, (size_t)T * 2 * hp->ln_v_heads * sizeof(float));
        lmix = hr_arena_alloc(A, (size_t)T * (2 * kd + vd) * sizeof(float));
        lout = hr_arena_alloc(A, (size_t)T * vd * sizeof(float));
    }
    HR_ASSERT(out != NULL); /* the arena was sized for max_tokens */

    int max_ctx = 0; /* positions attended to (validate: < f->max_ctx) */
    for (int t = 0; t < T; t++)
        if (b->pos[t] + 1 > max_ctx)
            max_ctx = b->pos[t] + 1;
    hr_step_in in;
    stage(f, b, &in);
    f->n_tokens = T;
    if ((rc = ops->begin(c, &in, err)))
        return rc;

    float escale = hp->embed_mult;
    if (arch->embed_scale_sqrt)
        escale *= sqrtf((float)d);
    ops->embed(c, x, m->embed, d, escale);
    if (arch->abs_positions) { /* + position + token type 0, then LayerNorm */
        ops->embed_abs(c, x, m->pos_emb, m->type_emb, d);
        norm_rows(ops, c, m, &m->embed_norm, x, x, T);
    }

    for (int il = 0; il < hp->n_layers; il++) {
        const hr_layer *L = &m->layers[il];
        bool sliding = hp->layer_sliding[il];

        /* ---- attention ---- */
        const float *ain = x;
        if (L->norm[HR_NORM_PRE_ATTN].w) {
            norm_rows(ops, c, m, &L->norm[HR_NORM_PRE_ATTN], xn, x, T);
            ain = xn;
        }
        if (hp->layer_linear[il]) {
            if (arch->mamba2)
                mamba2_layer(f, L, il, ain, tmp, lq, lmix, lout);
            else
                linear_attention(f, L, il, ain, tmp, lq, lba, lmix, lout);
            goto residual;
        }
        hr_matmul_out qkv[4] = {{q, qd, &L->wq, L->bq}, {k, kvd, &L->wk, L->bk},
                                {v, kvd, &L->wv, L->bv}, {qgate, qd, &L->w_qgate, NULL}};
        product(f, ain, d, T, il, qgate ? 4 : 3, 3,
                (const int[]){HR_LORA_Q, HR_LORA_K, HR_LORA_V}, qkv);
        if (L->v_norm) /* gemma4: V RMS-normed per head, no weight */
            ops->norm(c, v, v, L->v_norm, NULL, HR_BNORM_RMS, 0.0f, hp->norm_eps,
                      T * hp->n_kv_heads, hd);
        /* the step's tokens by pool: [0, kv2_from) in kv, the rest in kv2 */
        int n_parts = b->kv2 && b->kv2_from > 0 && b->kv2_from < T ? 2 : 1;
        const hr_kv *rk = b->resid_kv; /* the residual window's rows (CPU) */
        for (int part = 0; part < n_parts; part++) {
            const hr_kv *pk = b->kv2 && (n_parts == 2 ? part : b->kv2_from == 0) ? b->kv2 : kv;
            int t0 = part ? b->kv2_from : 0, nt = n_parts == 1 ? 0 : part ? T - t0 : b->kv2_from;
            /* --cache-type-v of its own, or TurboQuant's V at its own rate */
            bool vsplit = pk->vdtype != pk->dtype || pk->vrow_bytes != pk->row_bytes;
            /* the window's rows are stored for every token, read by those
             * of a quantized pool (an unconverted sequence's attention is
             * at full precision already; its window's rows are there for
             * when it converts) */
            const hr_kv *ak = hr_kv_is_rec(pk->dtype) || hr_kv_is_rec(pk->vdtype) ? rk : NULL;
            hr_kv_wait_layer(pk, il); /* a read-back's layer il (the products above ran) */
            ops->qkv(c, &(hr_qkv_args){
                .q = q, .k = k, .v = v, .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads,
                .head_dim = hd,
                .qk_norm = arch->qk_norm == HR_QK_NORM_HEAD   ? HR_BQK_HEAD
                           : arch->qk_norm == HR_QK_NORM_FULL ? HR_BQK_FULL
                                                              : HR_BQK_NONE,
                .q_norm = L->q_norm, .k_norm = L->k_norm, .norm_offset = hp->norm_offset,
                .norm_eps = hp->norm_eps, .rope = hp->layer_rope[il],
                .rope_local = sliding && hp->has_rope_local,
                .rope_interleaved = hp->rope_interleaved, .k_cache = hr_kv_layer_k(pk, il),
                .v_cache = hr_kv_layer_v(pk, il), .kv_dtype = pk->dtype, .kv_bits = pk->bits,
                .kv_group = pk->group, .block_stride = pk->block_stride,
                .block_size = HR_KV_BLOCK, .v_dtype = pk->vdtype,
                .v_block_stride = vsplit ? pk->vblock_stride : 0, .v_bits = pk->vbits,
                .layer = il, .t0 = t0, .nt = nt, .r_k = rk ? hr_kv_layer_k(rk, il) : NULL,
                .r_v = rk ? hr_kv_layer_v(rk, il) : NULL, .r_dtype = rk ? rk->dtype : 0,
                .r_stride = rk ? rk->block_stride : 0});
            /* each job's waiting threads prefetch their share of the next
             * product's weights (CPU: hr_matmul_prefetch_next) */
            if (part == n_parts - 1)
                prefetch(ops, c, 1, (const hr_tensor *[]){&L->wo});
            ops->attention(c, &(hr_attn_in){
                .q = q, .out = att, .n_heads = hp->n_heads, .n_kv_heads = hp->n_kv_heads,
                .head_dim = hd, .k_cache = hr_kv_layer_k(pk, il), .v_cache = hr_kv_layer_v(pk, il),
                .kv_dtype = pk->dtype, .kv_bits = pk->bits, .kv_group = pk->group,
                .block_stride = pk->block_stride, .block_size = HR_KV_BLOCK,
                .v_dtype = pk->vdtype, .v_block_stride = vsplit ? pk->vblock_stride : 0,
                .v_bits = pk->vbits, .layer = il, .scale = hp->attn_scale,
                .softcap = hp->attn_softcap, .window = sliding ? hp->sliding_window : 0,
                .max_ctx = max_ctx, .sinks = L->sinks, .bidirectional = arch->encoder,
                .t0 = t0, .nt = nt, .r_k = ak ? hr_kv_layer_k(ak, il) : NULL,
                .r_v = ak ? hr_kv_layer_v(ak, il) : NULL, .r_dtype = ak ? ak->dtype : 0,
                .r_stride = ak ? ak->block_stride : 0});
        }
        prefetch(ops, c, L->w_gate.data ? 2 : 1, (const hr_tensor *[]){&L->w_up, &L->w_gate});
        const float *ao = att;
        if (qgate) { /* attn * sigmoid(gate), into qgate */
            ops->act(c, HR_BACT_SIGMOID, qgate, att, T, qd);
            ao = qgate;
        }
        hr_matmul_out wo = {tmp, d, &L->wo, L->bo};
        product(f, ao, qd, T, il, 1, 1, (const int[]){HR_LORA_O}, &wo);
    residual:
        if (arch->post_ln) { /* x = norm(x + attn) */
            ops->add(c, x, tmp, hp->residual_mult, (size_t)T * d);
            norm_rows(ops, c, m, &L->norm[HR_NORM_POST_ATTN], x, x, T);
        } else {
            if (L->norm[HR_NORM_POST_ATTN].w)
                norm_rows(ops, c, m, &L->norm[HR_NORM_POST_ATTN], tmp, tmp, T);
            ops->add(c, x, tmp, hp->residual_mult, (size_t)T * d);
        }

        /* ---- mlp ---- */
        const float *min = x;
        if (L->norm[HR_NORM_PRE_MLP].w) {
            norm_rows(ops, c, m, &L->norm[HR_NORM_PRE_MLP], xn, x, T);
            min = xn;
        }
        prefetch(ops, c, 1, (const hr_tensor *[]){&L->w_down});
        bool beside = hp->layer_moe[il] && arch->moe.beside_dense;
        if (hp->layer_moe[il] && !beside) {
            moe(ops, c, m, L, tmp, min, NULL);
        } else {
            bool gated = L->w_gate.data != NULL;
            hr_matmul_out ug[2] = {{u, ff, &L->w_up, L->b_up}, {g, ff, &L->w_gate, NULL}};
            product(f, min, d, T, il, gated ? 2 : 1, gated ? 2 : 1,
                    (const int[]){HR_LORA_UP, HR_LORA_GATE}, ug);
            float *h = gated ? g : u;
            ops->act(c, act_of(hp->act), h, gated ? u : NULL, T, ff);
            prefetch_after_layer(ops, c, m, il);
            hr_matmul_out dn = {tmp, d, &L->w_down, L->b_down};
            product(f, h, ff, T, il, 1, 1, (const int[]){HR_LORA_DOWN}, &dn);
        }
        if (beside) { /* + the experts, from the residual stream x */
            norm_rows(ops, c, m, &L->norm[HR_NORM_POST_DENSE], tmp, tmp, T);
            if (L->router_scale) /* rmsnorm(x) * scale / sqrt(d) */
                ops->norm(c, rx, x, L->router_scale, NULL, HR_BNORM_RMS, 0.0f, hp->norm_eps,
                          T, d);
            norm_rows(ops, c, m, &L->norm[HR_NORM_PRE_MOE], xn, x, T);
            moe(ops, c, m, L, ex, xn, L->router_scale ? rx : NULL);
            norm_rows(ops, c, m, &L->norm[HR_NORM_POST_MOE], ex, ex, T);
            ops->add(c, tmp, ex, 1.0f, (size_t)T * d);
        }
        if (arch->post_ln) { /* x = norm(x + mlp) */
            ops->add(c, x, tmp, hp->residual_mult, (size_t)T * d);
            norm_rows(ops, c, m, &L->norm[HR_NORM_POST_MLP], x, x, T);
        } else {
            if (L->norm[HR_NORM_POST_MLP].w)
                norm_rows(ops, c, m, &L->norm[HR_NORM_POST_MLP], tmp, tmp, T);
            ops->add(c, x, tmp, hp->residual_mult, (size_t)T * d);
        }
        if (L->out_scale != 0.0f && L->out_scale != 1.0f) /* gemma4's layer_scalar: x *= s */
            ops->logit_scale(c, x, (size_t)T * d, 1.0f / L->out_scale, 0.0f);
    }

    /* final norm on the rows that want logits or hidden states, gathered:
     * the n_out logits rows first, then the n_hid hidden ones */
    int n_rows = ops->gather(c, xn, x, d), V = hp->n_vocab, n_hid = 0;
    for (int t = 0; t < T; t++)
        n_hid += b->logits[t] == 2;
    int n_out = n_rows - n_hid;
    if (n_rows > 0 && m->final_norm.w)
        norm_rows(ops, c, m, &m->final_norm, xn, xn, n_rows);
    if (n_out > 0) {
        ops->matmul(c, xn, d, n_out, 1, &(hr_matmul_out){out, V, m->lm_head, NULL});
        if (hp->logit_div != 1.0f || hp->final_softcap > 0)
            ops->logit_scale(c, out, (size_t)n_out * V, hp->logit_div, hp->final_softcap);
    }
    if ((rc = ops->end(c, err)))
        return rc;
    hr__rstate_commit(&f->rs, kv, b);
    if (n_out > 0 && out != logits)
        rc = f->be->ops->download(f->be, logits, out, (size_t)n_out * V * sizeof(float), err);
    if (!rc && n_hid > 0) /* validate: hidden is set */
        rc = f->be->ops->download(f->be, hidden, xn + (size_t)n_out * d,
                                  (size_t)n_hid * d * sizeof(float), err);
    return rc;
}
