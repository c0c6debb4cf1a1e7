/* hr_runner: one sequence through the forward pass, for the parity tests,
 * which teacher-force the reference's tokens (the product generates through
 * the engine: src/engine/engine.c). */
#include "support/runner.h"
#include "core/error.h"
#include "model/forward.h"
#include "model/kv.h"
#include "model/rope.h"

#include <stdlib.h>
#include <string.h>

struct hr_runner {
    const hr_model *m;
    hr_fwd *fwd;
    hr_kv kv;
    hr_kv rkv;          /* the residual window's rows (n_blocks 0: none) */
    int resid;
    int n_ctx, chunk, len;
    int32_t *history;   /* [n_ctx] every token of the sequence */
    int32_t *blocks;    /* [n_ctx / HR_KV_BLOCK + 1] */
    int32_t *rblocks;   /* the same positions' blocks of rkv */
    int n_blocks;
    const struct hr_adapter *adapter; /* NULL: the base model */
    int32_t *pos;       /* [chunk] */
    int32_t *seq;       /* [chunk], all 0 */
    uint8_t *want;      /* [chunk] */
};

int hr_runner_new(hr_runner **out, const hr_model *m, const hr_runner_opts *o,
                  hr_error *err) {
    *out = NULL;
    hr_runner *r = calloc(1, sizeof *r);
    if (!r)
        return hr_err(err, HR_ENOMEM, "out of memory");
    r->m = m;
    int cap = m->hp.ctx_max;
    r->n_ctx = o && o->n_ctx > 0 ? o->n_ctx : (cap < 8192 ? cap : 8192);
    if (r->n_ctx > cap)
        r->n_ctx = cap;
    r->chunk = o && o->prefill_chunk > 0 ? o->prefill_chunk : 512;
    int max_blocks = (r->n_ctx + HR_KV_BLOCK - 1) / HR_KV_BLOCK;
    hr_kv_fmt f = o && o->kv_fmt ? *o->kv_fmt : (hr_kv_fmt){.dtype = o ? o->kv_dtype : HR_DTYPE_F32};
    int rc = hr_kv_init_fmt(&r->kv, m->be, &m->hp, &f, max_blocks, err);
    if (rc)
        goto fail;
    r->resid = o ? o->kv_residual : 0;
    if (r->resid && (rc = hr_kv_init_on(&r->rkv, m->be, &m->hp, HR_DTYPE_F32, max_blocks, err)))
        goto fail;
    rc = hr_fwd_new(&r->fwd, m, r->chunk, 1, r->n_ctx, o ? o->n_threads : 0, err);
    if (rc)
        goto fail;
    r->blocks = malloc((size_t)max_blocks * sizeof *r->blocks);
    r->rblocks = malloc((size_t)max_blocks * sizeof *r->rblocks);
    r->history = malloc((size_t)r->n_ctx * sizeof *r->history);
    r->pos = malloc((size_t)r->chunk * sizeof *r->pos);
    r->seq = calloc((size_t)r->chunk, sizeof *r->seq);
    r->want = calloc((size_t)r->chunk, 1);
    if (!r->blocks || !r->rblocks || !r->history || !r->pos || !r->seq || !r->want) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
    *out = r;
    return 0;
fail:
    hr_runner_free(r);
    return rc;
}

void hr_runner_free(hr_runner *r) {
    if (!r)
        return;
    hr_fwd_free(r->fwd);
    hr_kv_deinit(&r->kv);
    hr_kv_deinit(&r->rkv);
    free(r->blocks);
    free(r->rblocks);
    free(r->history);
    free(r->pos);
    free(r->seq);
    free(r->want);
    free(r);
}

void hr_runner_reset(hr_runner *r) {
    for (int i = 0; i < r->n_blocks; i++) {
        hr_kv_unref(&r->kv, r->blocks[i]);
        if (r->resid)
            hr_kv_unref(&r->rkv, r->rblocks[i]);
    }
    r->n_blocks = 0;
    r->len = 0;
}

int hr_runner_len(const hr_runner *r) { return r->len; }

int hr_runner_eval(hr_runner *r, const int32_t *tokens, int n, float *logits,
                   hr_error *err) {
    if (n <= 0)
        return hr_err(err, HR_EINVAL, "nothing to evaluate");
    if (r->len + n > r->n_ctx)
        return hr_err(err, HR_ERANGE, "sequence of %d tokens exceeds the context "
                      "limit of %d tokens", r->len + n, r->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= r->m->hp.n_vocab)
            return hr_err(err, HR_ERANGE, "token id %d is outside the vocabulary "
                          "(0..%d)", tokens[i], r->m->hp.n_vocab - 1);
    memcpy(r->history + r->len, tokens, (size_t)n * sizeof *tokens);
    int new_len = r->len + n;
    if (hr_rope_needs_recompute(&r->m->hp, r->len, new_len)) {
        /* the cached keys' RoPE changes: recompute from the tokens */
        n = new_len;
        r->len = 0;
    }
    tokens = r->history + r->len;
    while (r->n_blocks * HR_KV_BLOCK < r->len + n) {
        int32_t b = hr_kv_alloc(&r->kv);
        HR_ASSERT(b >= 0); /* the pool holds n_ctx tokens */
        if (r->resid)
            r->rblocks[r->n_blocks] = hr_kv_alloc(&r->rkv);
        r->blocks[r->n_blocks++] = b;
    }
    hr_seq_blocks sb = {r->blocks, r->n_blocks, new_len, 0};
    for (int done = 0; done < n;) {
        int c = n - done < r->chunk ? n - done : r->chunk;
        for (int i = 0; i < c; i++) {
            r->pos[i] = r->len + i;
            r->want[i] = 0;
        }
        bool last = done + c == n;
        r->want[c - 1] = last && logits;
        hr_batch b = {.n_tokens = c, .token = tokens + done, .pos = r->pos,
                      .seq = r->seq, .logits = r->want, .n_seqs = 1, .seqs = &sb,
                      .adapter = r->adapter ? &r->adapter : NULL};
        const int32_t *rt = r->rblocks;
        if (r->resid) {
            b.resid_kv = &r->rkv;
            b.rtables = &rt;
            b.resid = r->resid;
        }
        int rc = hr_forward(r->fwd, &r->kv, &b, logits, err);
        if (rc)
            return rc;
        r->len += c;
        done += c;
    }
    return 0;
}

void hr_runner_set_adapter(hr_runner *r, const struct hr_adapter *a) { r->adapter = a; }
