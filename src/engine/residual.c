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
 * only the quantized blocks; the last window of a finished sequence is
 * kept beside it (a few, in RAM), so that a request continuing that
 * sequence (the next turn of a conversation) resumes where it ended. */
#include "engine/engine_int.h"
#include "core/error.h"

#include <stdlib.h>
#include <xxhash.h>

/* A finished sequence's last window: positions [start, start + n), their
 * tokens (the prompt cache's keys), the full-precision rows in blocks */
typedef struct hr__window {
    uint64_t key;     /* the tokens before start, with the cache seed (0: empty) */
    int start, n;
    int32_t *tokens;  /* [resid] */
    int32_t *blocks;  /* [resid / HR_KV_BLOCK] blocks of e->kvr */
    long used;        /* e->window_clock when last kept or read */
} hr__window;

/* the key of r's tokens [0, start) (start < n_ctx: they fit the prompt
 * cache's tokbuf), never 0 (an empty entry's) */
static uint64_t prefix_key(hr_engine *e, const hr_request *r, int start) {
    for (int k = 0; k < start; k++)
        e->tokbuf[k] = hr__key_at(r, k);
    return XXH3_64bits_withSeed(e->tokbuf, (size_t)start * sizeof *e->tokbuf, r->cache_seed) | 1;
}

static void window_drop(hr_engine *e, hr__window *w) {
    for (int b = 0; b < e->resid / HR_KV_BLOCK; b++)
        if (w->blocks[b] >= 0) {
            hr_kv_unref(&e->kvr, w->blocks[b]);
            w->blocks[b] = -1;
        }
    w->key = 0;
}

int hr__resid_init(hr_engine *e, const hr_engine_opts *o, const hr_kv_fmt *kvq_fmt,
                   hr_error *err) {
    const hr_model *m = e->m;
    int resid = o->kv_residual;
    if (resid % HR_KV_BLOCK)
        return hr_err(err, HR_EINVAL, "--kv-residual %d: a multiple of %d tokens", resid,
                      HR_KV_BLOCK);
    if (!hr_kv_is_rec(kvq_fmt->dtype) && !(kvq_fmt->vown && hr_kv_is_rec(kvq_fmt->vdtype)))
        return hr_err(err, HR_EINVAL, "--kv-residual keeps a window of a quantized KV cache "
                      "at full precision: it needs --kv-quant, --kv-bits (with a "
                      "--quantized-kv-start within the context) or --cache-type-k/-v q8_0, "
                      "q4_0");
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
    hr_dtype t; /* the rows' dtype: what the cache would hold unquantized */
    int rc = hr_kv_dtype_pick(NULL, m->gguf, &t, err);
    if (rc)
        return rc;
    /* each sequence: its window's blocks up to its next position between
     * steps (hr__resid_trim), and during a step the blocks its tokens write
     * (the step's tokens, a block more a sequence where they start inside
     * one) */
    int w = resid / HR_KV_BLOCK, n = e->max_batch * (w + 2) + e->max_tokens_step / HR_KV_BLOCK + 1;
    /* and the kept windows (with the prompt cache: hr_engine_new makes it
     * after this), w blocks each at most */
    n += e->max_batch * w;
    e->resid = resid;
    if ((rc = hr_kv_init_on(&e->kvr, m->be, hp, t, n, err)))
        return rc;
    if (!(e->windows = calloc((size_t)e->max_batch, sizeof *e->windows)))
        return hr_err(err, HR_ENOMEM, "out of memory");
    for (int i = 0; i < e->max_batch; i++) {
        hr__window *wi = &e->windows[i];
        wi->tokens = malloc((size_t)resid * sizeof *wi->tokens);
        wi->blocks = malloc((size_t)w * sizeof *wi->blocks);
        if (!wi->tokens || !wi->blocks)
            return hr_err(err, HR_ENOMEM, "out of memory");
        for (int b = 0; b < w; b++)
            wi->blocks[b] = -1;
    }
    return 0;
}

void hr__resid_free(hr_engine *e) {
    for (int i = 0; e->windows && i < e->max_batch; i++) {
        free(e->windows[i].tokens);
        free(e->windows[i].blocks);
    }
    free(e->windows);
    e->windows = NULL;
}

void hr__resid_keep(hr_engine *e, hr_request *r) {
    int start = r->len / e->resid * e->resid;
    if (!e->pcache || r->embed || r->len == start) /* (at a window's start: nothing to keep) */
        return;
    hr__window *w = NULL; /* an empty entry, else the oldest */
    for (int i = 0; i < e->max_batch && !(w && !w->key); i++)
        if (!w || !e->windows[i].key || e->windows[i].used < w->used)
            w = &e->windows[i];
    window_drop(e, w);
    w->key = prefix_key(e, r, start);
    w->start = start;
    w->n = r->len - start;
    w->used = ++e->window_clock;
    for (int k = 0; k < w->n; k++)
        w->tokens[k] = hr__key_at(r, start + k);
    for (int b = start / HR_KV_BLOCK; b <= (r->len - 1) / HR_KV_BLOCK; b++) {
        w->blocks[b - start / HR_KV_BLOCK] = r->rblocks[b]; /* its reference moves here */
        r->rblocks[b] = -1;
    }
}

/* A kept window holding r's tokens [start, len): its rows copied into r's
 * new blocks of e->kvr; false when none does (or no block is left) */
static bool window_resume(hr_engine *e, hr_request *r, int start, int len) {
    if (!e->windows)
        return false;
    hr__window *w = NULL;
    uint64_t key = 0;
    for (int i = 0; i < e->max_batch; i++) {
        hr__window *c = &e->windows[i];
        if (!c->key || c->start != start || c->n < len - start)
            continue;
        if (!key)
            key = prefix_key(e, r, start);
        bool same = c->key == key;
        for (int k = 0; same && k < len - start; k++)
            same = c->tokens[k] == hr__key_at(r, start + k);
        if (same) {
            w = c;
            break;
        }
    }
    int b0 = start / HR_KV_BLOCK, b1 = (len - 1) / HR_KV_BLOCK;
    if (!w || e->kvr.n_free < b1 - b0 + 1)
        return false;
    for (int b = b0; b <= b1; b++) {
        r->rblocks[b] = hr_kv_alloc(&e->kvr);
        int rows = b < b1 ? HR_KV_BLOCK : len - b * HR_KV_BLOCK;
        hr_kv_copy_rows(&e->kvr, r->rblocks[b], w->blocks[b - b0], rows);
    }
    r->rb_lo = b0;
    r->rb_hi = b1 + 1;
    w->used = ++e->window_clock;
    return true;
}

void hr__resid_cut_hit(hr_engine *e, hr_request *r, hr_kv *pool, int *hit, int *len) {
    if (!e->resid || *len % e->resid == 0)
        return;
    if (pool == &e->kv && e->kvq.n_blocks && *len / e->resid != e->kv_start / e->resid)
        return; /* unconverted, and it converts in a later window */
    if (window_resume(e, r, *len / e->resid * e->resid, *len))
        return;
    int keep = *len / e->resid * e->resid / HR_KV_BLOCK;
    for (int b = keep; b < *hit; b++)
        hr_kv_unref(pool, r->blocks[b]);
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
