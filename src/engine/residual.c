/* The residual window (--kv-residual R, docs/kv-quant.md): every K/V row
 * is stored in the quantized pool (e->kv) and, while its window is being
 * read, at full precision in e->kvr. Windows are fixed spans of positions,
 * [w R, (w + 1) R): a token reads its own window's rows from e->kvr and
 * every earlier window's from e->kv (as Hugging Face's QuantizedCache keeps
 * its last residual_length tokens unquantized and quantizes them all when
 * the residual is full, but by position, so that a row's bits do not
 * depend on how the prompt was cut into steps). A window's rows depend
 * only on the tokens before it and on its own, so a prompt cache hit
 * resumes at the start of the window holding its end, and the cache keeps
 * only the quantized blocks. */
#include "engine/engine_int.h"
#include "core/error.h"

int hr__resid_init(hr_engine *e, int resid, hr_dtype t, const hr_kv_fmt *kvq_fmt,
                   hr_error *err) {
    const hr_model *m = e->m;
    if (resid % HR_KV_BLOCK)
        return hr_err(err, HR_EINVAL, "--kv-residual %d: a multiple of %d tokens", resid,
                      HR_KV_BLOCK);
    if (e->kvq.n_blocks)
        return hr_err(err, HR_EUNSUPPORTED, "--kv-residual with --quantized-kv-start > 0 is "
                      "not supported yet");
    if (!hr_kv_is_rec(kvq_fmt->dtype) && !(kvq_fmt->vown && hr_kv_is_rec(kvq_fmt->vdtype)))
        return hr_err(err, HR_EINVAL, "--kv-residual keeps a window of a quantized KV cache "
                      "at full precision: it needs --kv-quant, --kv-bits (with "
                      "--quantized-kv-start 0) or --cache-type-k/-v q8_0, q4_0");
    const hr_hparams *hp = &m->hp;
    if ((long)hp->n_heads / hp->n_kv_heads * hp->head_dim > 4096) /* attention.c's ROWS_BUF */
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: --kv-residual with more than "
                      "4096 query values per KV head (%d heads of %d over %d)", hp->n_heads,
                      hp->head_dim, hp->n_kv_heads);
    if (m->be->device_mem)
        return hr_err(err, HR_EUNSUPPORTED, "--kv-residual is not supported yet on %s",
                      m->be->name);
    if (hp->arch->encoder)
        return hr_err(err, HR_EINVAL, "--kv-residual: %s is an encoder (no KV cache)",
                      hp->arch->model_type);
    if (hr_fwd_state_bytes(e->fwd))
        return hr_err(err, HR_EUNSUPPORTED, "--kv-residual with recurrent layers (%s) is not "
                      "supported yet", m->hp.arch->model_type);
    if (t != HR_DTYPE_F32 && t != HR_DTYPE_F16 && t != HR_DTYPE_BF16)
        return hr_err(err, HR_EINVAL, "--kv-residual: rows of %s", hr_dtype_name(t));
    /* each sequence: its window's blocks up to its next position between
     * steps (hr__resid_trim), and during a step the blocks its tokens write
     * (the step's tokens, a block more a sequence where they start inside
     * one) */
    int w = resid / HR_KV_BLOCK, n = e->max_batch * (w + 2) + e->max_tokens_step / HR_KV_BLOCK + 1;
    e->resid = resid;
    return hr_kv_init_on(&e->kvr, m->be, hp, t, n, err);
}

void hr__resid_cut_hit(hr_engine *e, hr_request *r, int *hit, int *len) {
    if (!e->resid || *len % e->resid == 0)
        return;
    int keep = *len / e->resid * e->resid / HR_KV_BLOCK;
    for (int b = keep; b < *hit; b++)
        hr_kv_unref(&e->kv, r->blocks[b]);
    *hit = keep;
    *len = keep * HR_KV_BLOCK;
}

void hr__resid_alloc(hr_engine *e, int T) {
    for (int t = 0; e->resid && t < T; t++) {
        hr_request *r = e->running[e->b_seq[t]];
        int b = e->b_pos[t] / HR_KV_BLOCK;
        if (r->rblocks[b] >= 0)
            continue;
        r->rblocks[b] = hr_kv_alloc(&e->kvr);
        HR_ASSERT(r->rblocks[b] >= 0); /* hr__resid_init's count */
        if (r->rb_lo == r->rb_hi)
            r->rb_lo = r->rb_hi = b;
        r->rb_lo = b < r->rb_lo ? b : r->rb_lo;
        r->rb_hi = b + 1 > r->rb_hi ? b + 1 : r->rb_hi;
    }
}

void hr__resid_trim(hr_engine *e, hr_request *r, bool all) {
    if (!e->resid)
        return;
    /* keep [the window's first block, the block of the next position] */
    int lo = all ? 0 : r->len / e->resid * e->resid / HR_KV_BLOCK;
    int hi = all ? 0 : r->len / HR_KV_BLOCK + 1;
    for (int b = r->rb_lo; b < r->rb_hi; b++)
        if (r->rblocks[b] >= 0 && (b < lo || b >= hi)) {
            hr_kv_unref(&e->kvr, r->rblocks[b]);
            r->rblocks[b] = -1;
        }
    r->rb_lo = r->rb_lo > lo ? r->rb_lo : lo;
    r->rb_hi = r->rb_hi < hi ? r->rb_hi : hi;
    if (r->rb_hi <= r->rb_lo)
        r->rb_lo = r->rb_hi = 0;
}
