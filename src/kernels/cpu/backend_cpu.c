/* The CPU backend (kernels/backend.h): host memory, the kernels of this
 * folder on the forward's thread pool. Row-wise work between the products
 * runs on the pool when the step has enough of it (prefill, a large
 * batch), inline otherwise (run_rows): a dispatch costs more than a few
 * rows' norm. Each row's math is the same whichever thread runs it, so the
 * pass stays batch-invariant. */
#include "kernels/backend.h"
#include "core/bigmem.h"
#include "core/error.h"
#include "kernels/cpu/cpu.h"
#include "kernels/cpu/kvquant.h"
#include "kernels/cpu/turbo.h"
#include "kernels/cpu/lora.h"
#include "kernels/cpu/deltanet.h"
#include "kernels/cpu/mamba2.h"
#include "kernels/cpu/moe.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cpu_ctx {
    hr_pool *pool;
    int max_tokens, max_seqs, rot_dim;
    float *scores;               /* [nth][HR_ATTN_TILE][n_heads/n_kv_heads][max_ctx] */
    float *cs;                   /* [max_tokens][2][rot_dim]: full | local tables */
    const int32_t **tok_blocks;  /* [max_tokens] each token's block table */
    const int32_t **tok_rblocks; /* [max_tokens] its residual window's (hr_step_in.rtables) */
    int32_t *tok_end;            /* [max_tokens] 1 + the largest pos of the token's
                                  * sequence in the step (bidirectional attention) */
    int32_t *seq_end;            /* [max_seqs] the same per sequence */
    hr_moe_scratch *moe;         /* NULL: the model has no experts */
    float *lora_z;               /* [HR_LORA_MAX_OUT][max_tokens][HR_LORA_MAX_RANK]
                                  * (pages touched only when adapters run) */
    hr_step_in in;               /* the step's batch (host memory) */
} cpu_ctx;

static cpu_ctx *ctx_of(hr_bctx *c) { return (cpu_ctx *)c; }

/* ---- memory ---------------------------------------------------------------- */

static void *cpu_alloc(hr_backend *be, size_t bytes) {
    (void)be;
    return hr_big_alloc(bytes ? bytes : 1);
}

static void cpu_free(hr_backend *be, void *p, size_t bytes) {
    (void)be;
    hr_big_free(p, bytes ? bytes : 1);
}

static int cpu_copy(hr_backend *be, void *dst, const void *src, size_t n, hr_error *err) {
    (void)be;
    (void)err;
    memmove(dst, src, n);
    return 0;
}

static int cpu_copy_rows(hr_backend *be, void *dst, size_t dpitch, const void *src,
                         size_t spitch, size_t n, size_t rows, hr_error *err) {
    (void)be;
    (void)err;
    for (size_t r = 0; r < rows; r++)
        memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, n);
    return 0;
}

static void cpu_mem_info(hr_backend *be, size_t *free_b, size_t *total) {
    (void)be;
    *free_b = *total = 0;
}

/* ---- contexts ---------------------------------------------------------------- */

static void cpu_ctx_free(hr_bctx *c) {
    cpu_ctx *x = ctx_of(c);
    if (!x)
        return;
    free(x->scores);
    free(x->cs);
    free(x->tok_blocks);
    free(x->tok_rblocks);
    free(x->tok_end);
    free(x->seq_end);
    free(x->lora_z);
    hr_moe_scratch_free(x->moe);
    free(x);
}

static int cpu_ctx_new(hr_backend *be, hr_pool *pool, const hr_bctx_dims *dm, hr_bctx **out,
                       hr_error *err) {
    (void)be;
    *out = NULL;
    cpu_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return hr_err(err, HR_ENOMEM, "out of memory");
    x->pool = pool;
    x->max_tokens = dm->max_tokens;
    x->max_seqs = dm->max_seqs;
    x->rot_dim = dm->rot_dim;
    size_t nscores = (size_t)hr_pool_size(pool) * HR_ATTN_TILE *
                     (size_t)(dm->n_heads / dm->n_kv_heads) * (size_t)dm->max_ctx;
    x->scores = aligned_alloc(64, (nscores * sizeof(float) + 63) & ~(size_t)63);
    x->cs = malloc(((size_t)dm->max_tokens * 2 * dm->rot_dim + 1) * sizeof(float));
    x->tok_blocks = malloc((size_t)dm->max_tokens * sizeof *x->tok_blocks);
    x->tok_rblocks = malloc((size_t)dm->max_tokens * sizeof *x->tok_rblocks);
    x->tok_end = malloc((size_t)dm->max_tokens * sizeof *x->tok_end);
    x->seq_end = malloc((size_t)dm->max_seqs * sizeof *x->seq_end);
    x->lora_z = malloc((size_t)HR_LORA_MAX_OUT * dm->max_tokens * HR_LORA_MAX_RANK *
                       sizeof(float));
    /* the products' scratch, reserved now: no allocation mid-pass */
    if (!x->scores || !x->cs || !x->tok_blocks || !x->tok_rblocks || !x->tok_end ||
        !x->seq_end || !x->lora_z ||
        !hr_matmul_reserve(pool, dm->max_tokens, dm->max_k) ||
        (dm->n_experts > 0 &&
         !(x->moe = hr_moe_scratch_new(dm->max_tokens, dm->d_model, dm->n_experts,
                                       dm->n_experts_used, dm->moe_ff)))) {
        cpu_ctx_free((hr_bctx *)x);
        return hr_err(err, HR_ENOMEM, "cannot allocate forward scratch for %d tokens",
                      dm->max_tokens);
    }
    *out = (hr_bctx *)x;
    return 0;
}

/* Row work of `floats` floats in all: on the pool when there is enough of
 * it to pay for the dispatch, else inline. A decode step of a few
 * sequences, or one carrying a few drafted tokens (docs/speculative.md),
 * stays inline: 4 of a layer's jobs fewer for the other threads to be
 * woken for (each a wait on a thread another process may hold) */
#define ROWS_INLINE_FLOATS 16384

static void run_rows(hr_pool *pool, int T, size_t floats, hr_task_fn fn, void *ctx) {
    if (T > 1 && floats >= ROWS_INLINE_FLOATS)
        hr_pool_run(pool, fn, ctx);
    else
        fn(ctx, 0, 1);
}

/* ---- begin: each token's RoPE tables and block table ------------------------ */

static void rope_worker(void *p, int ith, int nth) {
    const cpu_ctx *x = p;
    const hr_step_in *in = &x->in;
    int rot = in->rot_dim, half = rot / 2;
    long lo, hi;
    hr_split(in->n_tokens, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        const float *fs = in->freq + (size_t)in->seq[t] * 2 * (half + 1);
        float *cs = x->cs + (size_t)t * 2 * rot;
        if (in->mrope_pos) {
            hr_rope_table_mrope(cs, rot, in->mrope_pos + 3 * t, in->mrope_section, fs, fs[half]);
            continue; /* no local table: M-RoPE models have one */
        }
        hr_rope_table(cs, rot, in->pos[t], fs, fs[half]);
        if (in->rope_local)
            hr_rope_table(cs + rot, rot, in->pos[t], fs + half + 1, fs[2 * half + 1]);
    }
}

static int cpu_begin(hr_bctx *c, const hr_step_in *in, hr_error *err) {
    (void)err;
    cpu_ctx *x = ctx_of(c);
    x->in = *in;
    if (in->rot_dim / 2 > 0)
        run_rows(x->pool, in->n_tokens, (size_t)in->n_tokens * in->rot_dim * 2, rope_worker, x);
    for (int t = 0; t < in->n_tokens; t++) {
        x->tok_blocks[t] = in->tables + in->tab_off[in->seq[t]];
        x->tok_rblocks[t] = in->rtables ? in->rtables + in->tab_off[in->seq[t]] : NULL;
    }
    for (int s = 0; s < in->n_seqs; s++)
        x->seq_end[s] = 0;
    for (int t = 0; t < in->n_tokens; t++)
        if (in->pos[t] + 1 > x->seq_end[in->seq[t]])
            x->seq_end[in->seq[t]] = in->pos[t] + 1;
    for (int t = 0; t < in->n_tokens; t++)
        x->tok_end[t] = in->attn_end ? in->attn_end[t] : x->seq_end[in->seq[t]];
    return 0;
}

static int cpu_end(hr_bctx *c, hr_error *err) {
    (void)c;
    (void)err;
    return 0;
}

/* ---- row ops ------------------------------------------------------------------ */

static void cpu_embed(hr_bctx *c, float *x, const hr_tensor *emb, int d, float scale) {
    const hr_step_in *in = &ctx_of(c)->in;
    for (int t = 0; t < in->n_tokens; t++) {
        float *xt = x + (size_t)t * d;
        if (in->embd_row && in->embd_row[t] >= 0) { /* an image's row, as it is */
            memcpy(xt, in->embd + (size_t)in->embd_row[t] * d, (size_t)d * sizeof *xt);
            continue;
        }
        hr_dequant_range(emb, in->token[t], 0, d, xt); /* one row */
        for (int i = 0; i < d; i++)
            xt[i] *= scale;
    }
}

typedef struct norm_task {
    float *y;
    const float *x, *w, *b;
    int kind, T, d;
    float offset, eps;
} norm_task;

static void norm_worker(void *p, int ith, int nth) {
    const norm_task *a = p;
    long lo, hi;
    hr_split(a->T, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        float *y = a->y + (size_t)t * a->d;
        const float *x = a->x + (size_t)t * a->d;
        if (a->kind == HR_BNORM_LAYER)
            hr_layernorm(y, x, a->w, a->b, a->d, a->eps);
        else
            hr_rmsnorm(y, x, a->w, a->offset, a->d, a->eps);
    }
}

static void cpu_norm(hr_bctx *c, float *y, const float *x, const float *w, const float *b,
                     int kind, float offset, float eps, int T, int d) {
    norm_task a = {y, x, w, b, kind, T, d, offset, eps};
    run_rows(ctx_of(c)->pool, T, (size_t)T * d, norm_worker, &a);
}

typedef struct act_task {
    int act;
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
    case HR_BACT_SILU: hr_silu_mul(g, u, n); break;
    case HR_BACT_GELU_TANH: hr_gelu_tanh_mul(g, u, n); break;
    case HR_BACT_GELU: hr_gelu_mul(g, u, n); break;
    case HR_BACT_SIGMOID:
        for (int i = 0; i < n; i++)
            g[i] = u[i] / (1.0f + expf(-g[i]));
        break;
    }
}

static void cpu_act(hr_bctx *c, int act, float *g, const float *u, int T, int n) {
    act_task a = {act, g, u, (size_t)T * n};
    run_rows(ctx_of(c)->pool, T, (size_t)T * n, act_worker, &a);
}

static void cpu_add(hr_bctx *c, float *x, const float *y, float mult, size_t n) {
    (void)c;
    for (size_t i = 0; i < n; i++)
        x[i] += y[i] * mult;
}

static int cpu_gather(hr_bctx *c, float *y, const float *x, int d) {
    const hr_step_in *in = &ctx_of(c)->in;
    int n = 0;
    for (int kind = 1; kind <= 2; kind++) /* logits rows, then hidden-state rows */
        for (int t = 0; t < in->n_tokens; t++)
            if (in->logits[t] == kind)
                memcpy(y + (size_t)n++ * d, x + (size_t)t * d, (size_t)d * sizeof *y);
    return n;
}

static void cpu_logit_scale(hr_bctx *c, float *logits, size_t n, float div, float cap) {
    (void)c;
    for (size_t i = 0; i < n; i++) {
        logits[i] /= div;
        if (cap > 0)
            logits[i] = tanhf(logits[i] / cap) * cap;
    }
}

/* ---- q/k/v: norms, RoPE, K/V into the cache --------------------------------- */

typedef struct qkv_task {
    const cpu_ctx *x;
    const hr_qkv_args *a;
} qkv_task;

static void qkv_worker(void *p, int ith, int nth) {
    const qkv_task *qt = p;
    const hr_qkv_args *a = qt->a;
    const hr_step_in *in = &qt->x->in;
    int hd = a->head_dim, qd = a->n_heads * hd, kvd = a->n_kv_heads * hd, rot = in->rot_dim;
    hr_dtype kt = a->kv_dtype, vt = a->v_block_stride ? a->v_dtype : kt;
    int vbits = a->v_bits ? a->v_bits : a->kv_bits;
    size_t krb = hr_kv_row_size(kt, hd, a->kv_bits, a->kv_group);
    size_t vrb = hr_kv_row_size(vt, hd, vbits, a->kv_group);
    size_t vbs = a->v_block_stride ? a->v_block_stride : a->block_stride;
    size_t kstride = hr_kv_is_rec(kt) ? a->block_stride : a->block_stride * hr_dtype_size(kt);
    size_t vstride = hr_kv_is_rec(vt) ? vbs : vbs * hr_dtype_size(vt);
    long lo, hi;
    hr_split(a->nt ? a->nt : in->n_tokens, ith, nth, &lo, &hi);
    for (long t = a->t0 + lo; t < a->t0 + hi; t++) {
        float *q = a->q + (size_t)t * qd, *k = a->k + (size_t)t * kvd;
        if (a->qk_norm == HR_BQK_HEAD) {
            for (int h = 0; h < a->n_heads; h++)
                hr_rmsnorm(q + h * hd, q + h * hd, a->q_norm, a->norm_offset, hd, a->norm_eps);
            for (int h = 0; h < a->n_kv_heads; h++)
                hr_rmsnorm(k + h * hd, k + h * hd, a->k_norm, a->norm_offset, hd, a->norm_eps);
        } else if (a->qk_norm == HR_BQK_FULL) {
            hr_rmsnorm(q, q, a->q_norm, a->norm_offset, qd, a->norm_eps);
            hr_rmsnorm(k, k, a->k_norm, a->norm_offset, kvd, a->norm_eps);
        }
        int pos = in->pos[t];
        if (a->rope && rot >= 2) {
            const float *cs = qt->x->cs + (size_t)t * 2 * rot;
            if (a->rope_local)
                cs += rot;
            hr_rope(q, a->n_heads, hd, rot, cs, a->rope_interleaved);
            hr_rope(k, a->n_kv_heads, hd, rot, cs, a->rope_interleaved);
        }
        int32_t block = qt->x->tok_blocks[t][pos / a->block_size];
        int slot = pos % a->block_size;
        for (int h = 0; h < a->n_kv_heads; h++) {
            size_t at = (size_t)h * a->block_size + slot;
            bool turbo = kt == HR_DTYPE_TURBO; /* group: the row's rotation */
            hr_kv_row_store((char *)a->k_cache + (size_t)block * kstride + at * krb, k + h * hd,
                            hd, kt, a->kv_bits,
                            turbo ? hr_turbo_kv_rot(a->layer, h, false) : a->kv_group);
            hr_kv_row_store((char *)a->v_cache + (size_t)block * vstride + at * vrb,
                            a->v + (size_t)t * kvd + h * hd, hd, vt, vbits,
                            turbo ? hr_turbo_kv_rot(a->layer, h, true) : a->kv_group);
        }
        if (a->r_k) { /* the residual window's full-precision rows too */
            int32_t rb = qt->x->tok_rblocks[t][pos / a->block_size];
            size_t rs = a->r_stride * hr_dtype_size(a->r_dtype);
            for (int h = 0; h < a->n_kv_heads; h++) {
                size_t at = ((size_t)h * a->block_size + slot) * hd * hr_dtype_size(a->r_dtype);
                hr_store_row((char *)a->r_k + (size_t)rb * rs + at, k + h * hd, hd, a->r_dtype);
                hr_store_row((char *)a->r_v + (size_t)rb * rs + at,
                             a->v + (size_t)t * kvd + h * hd, hd, a->r_dtype);
            }
        }
    }
}

static void cpu_qkv(hr_bctx *c, const hr_qkv_args *a) {
    cpu_ctx *x = ctx_of(c);
    qkv_task t = {x, a};
    int n = a->nt ? a->nt : x->in.n_tokens;
    run_rows(x->pool, n, (size_t)n * (a->n_heads + 2 * a->n_kv_heads) * a->head_dim, qkv_worker,
             &t);
}

/* ---- products and attention ------------------------------------------------- */

static void cpu_matmul(hr_bctx *c, const float *x, int ldx, int T, int count,
                       const hr_matmul_out *out) {
    hr_matmul_multi(ctx_of(c)->pool, x, ldx, T, count, out);
}

static void cpu_attention(hr_bctx *c, const hr_attn_in *a) {
    cpu_ctx *x = ctx_of(c);
    size_t t0 = (size_t)a->t0, qd = (size_t)a->n_heads * a->head_dim; /* tokens [t0, t0 + nt) */
    const int32_t *end = a->bidirectional || x->in.attn_end ? x->tok_end + t0 : NULL;
    hr_attn_args aa = {
        .q = a->q + t0 * qd, .out = a->out + t0 * qd,
        .n_tok = a->nt ? a->nt : x->in.n_tokens, .n_heads = a->n_heads,
        .n_kv_heads = a->n_kv_heads, .head_dim = a->head_dim,
        .k = a->k_cache, .v = a->v_cache, .kv_dtype = a->kv_dtype,
        .kv_bits = a->kv_bits, .kv_group = a->kv_group,
        .block_stride = a->block_stride, .block_size = a->block_size,
        .v_dtype = a->v_dtype, .v_block_stride = a->v_block_stride, .v_bits = a->v_bits,
        .layer = a->layer, .pos = x->in.pos + t0, .blocks = x->tok_blocks + t0, .scale = a->scale,
        .softcap = a->softcap, .window = a->window, .scratch = x->scores,
        .max_ctx = a->max_ctx, .sinks = a->sinks,
        .end = end,
        .r_k = a->r_k, .r_v = a->r_v, .r_dtype = a->r_dtype, .r_stride = a->r_stride,
        .rblocks = x->tok_rblocks + t0, .resid = a->r_k ? x->in.resid : 0,
    };
    hr_attention(x->pool, &aa);
}

static void cpu_embed_abs(hr_bctx *c, float *x, const float *pos_emb, const float *type_row,
                          int d) {
    const hr_step_in *in = &ctx_of(c)->in;
    for (int t = 0; t < in->n_tokens; t++) {
        float *xt = x + (size_t)t * d;
        const float *pe = pos_emb + (size_t)in->pos[t] * d;
        for (int i = 0; i < d; i++)
            xt[i] = xt[i] + type_row[i] + pe[i];
    }
}

static void cpu_deltanet(hr_bctx *c, const hr_deltanet_args *a) {
    cpu_ctx *x = ctx_of(c);
    hr_deltanet(x->pool, a, x->in.n_tokens, x->in.pos, x->in.seq, x->in.n_seqs);
}

static void cpu_mamba2(hr_bctx *c, const hr_mamba2_args *a) {
    cpu_ctx *x = ctx_of(c);
    hr_mamba2(x->pool, a, x->in.n_tokens, x->in.pos, x->in.seq, x->in.n_seqs);
}

static void cpu_moe(hr_bctx *c, const hr_moe_args *a) {
    cpu_ctx *x = ctx_of(c);
    hr_moe(x->pool, x->moe, a, x->in.n_tokens);
}

static void cpu_lora(hr_bctx *c, const float *x, int ldx, int T, int count,
                     const hr_matmul_out *out, const hr_lora_args *a) {
    cpu_ctx *cx = ctx_of(c);
    hr_matmul_lora(cx->pool, x, ldx, T, count, out, a, cx->lora_z);
}

static void cpu_prefetch_next(hr_bctx *c, int count, const hr_tensor *const *w) {
    hr_matmul_prefetch_next(ctx_of(c)->pool, count, w);
}

/* ---- the table -------------------------------------------------------------- */

static const hr_backend_ops cpu_ops = {
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .upload_rows = cpu_copy_rows,
    .download_rows = cpu_copy_rows,
    .mem_info = cpu_mem_info,
    .membw = NULL,
    .ctx_new = cpu_ctx_new,
    .ctx_free = cpu_ctx_free,
    .begin = cpu_begin,
    .embed = cpu_embed,
    .norm = cpu_norm,
    .matmul = cpu_matmul,
    .qkv = cpu_qkv,
    .attention = cpu_attention,
    .act = cpu_act,
    .add = cpu_add,
    .gather = cpu_gather,
    .logit_scale = cpu_logit_scale,
    .prefetch_next = cpu_prefetch_next,
    .end = cpu_end,
    .moe = cpu_moe,
    .attn_sinks = true,
    .deltanet = cpu_deltanet,
    .encoder = true,
    .embed_abs = cpu_embed_abs,
    .lora = cpu_lora,
    .mamba2 = cpu_mamba2,
};

static hr_backend cpu_backend = {.name = "cpu", .device_mem = false, .ops = &cpu_ops};

hr_backend *hr_backend_cpu(void) { return &cpu_backend; }
