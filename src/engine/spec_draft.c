/* The draft model's batched, greedy drafting (spec_draft.h). */
#include "engine/spec_draft.h"
#include "engine/engine_int.h"
#include "core/error.h"
#include "core/timer.h"
#include "model/forward.h"
#include "sample/sampler.h"

#include <stdlib.h>

struct hr_spec_draft {
    const hr_model *m;
    hr_fwd *fwd;
    hr_kv kv;
    bool kv_ready;
    int max_batch, max_tokens;
    int n_ctx;                /* the draft's context: positions below it */
    int window;               /* the most tokens caught up at once (spec_draft.h) */
    int32_t *tok, *pos, *seq; /* [max_tokens] */
    uint8_t *want;
    hr_seq_blocks *seqs;      /* [max_batch] */
    int *row;                 /* [max_batch]: the logits row of each request, -1: none */
    int *got;                 /* [max_batch]: tokens drafted so far */
    struct hr_request **rs;   /* [max_batch]: hr_spec_draft_follow's requests */
    float *logits;            /* [max_batch][n_vocab] */
};

int hr_spec_draft_new(hr_spec_draft **out, const hr_model *dm, int n_blocks, int max_batch,
                      int max_tokens, int n_ctx, hr_error *err) {
    *out = NULL;
    hr_spec_draft *d = calloc(1, sizeof *d);
    if (!d)
        return hr_err(err, HR_ENOMEM, "out of memory");
    d->m = dm;
    d->max_batch = max_batch;
    d->max_tokens = max_tokens;
    d->n_ctx = n_ctx < dm->hp.ctx_max ? n_ctx : dm->hp.ctx_max;
    d->window = HR_SPEC_DRAFT_WINDOW < d->n_ctx / 2 ? HR_SPEC_DRAFT_WINDOW : d->n_ctx / 2;
    int rc;
    if ((rc = hr_kv_init_on(&d->kv, dm->be, &dm->hp, HR_DTYPE_F32, n_blocks, err)))
        goto fail;
    d->kv_ready = true;
    if ((rc = hr_fwd_new(&d->fwd, dm, max_tokens, max_batch, n_ctx, 1, err)))
        goto fail;
    d->tok = malloc((size_t)max_tokens * sizeof *d->tok);
    d->pos = malloc((size_t)max_tokens * sizeof *d->pos);
    d->seq = malloc((size_t)max_tokens * sizeof *d->seq);
    d->want = malloc((size_t)max_tokens);
    d->seqs = malloc((size_t)max_batch * sizeof *d->seqs);
    d->row = malloc((size_t)max_batch * sizeof *d->row);
    d->got = malloc((size_t)max_batch * sizeof *d->got);
    d->rs = malloc((size_t)max_batch * sizeof *d->rs);
    d->logits = malloc((size_t)max_batch * dm->hp.n_vocab * sizeof *d->logits);
    if (!d->tok || !d->pos || !d->seq || !d->want || !d->seqs || !d->row || !d->got ||
        !d->rs || !d->logits) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
    *out = d;
    return 0;
fail:
    hr_spec_draft_free(d);
    return hr_err_wrap(err, "draft model");
}

int hr_spec_draft_warm(hr_spec_draft *d, uint64_t id, hr_error *err) {
    return hr_fwd_warm(d->fwd, &d->kv, id, d->logits, NULL, err);
}

void hr_spec_draft_free(hr_spec_draft *d) {
    if (!d)
        return;
    hr_fwd_free(d->fwd);
    if (d->kv_ready)
        hr_kv_deinit(&d->kv);
    free(d->tok);
    free(d->pos);
    free(d->seq);
    free(d->want);
    free(d->seqs);
    free(d->row);
    free(d->got);
    free(d->rs);
    free(d->logits);
    free(d);
}

hr_kv *hr_spec_draft_kv(hr_spec_draft *d) { return &d->kv; }

/* Token j of request r's drafting: its known tokens, then the drafts. */
static int32_t token_of(const hr_request *r, int known, int j) {
    return j < known ? hr__token_at(r, j) : r->spec.draft[j - known];
}

/* Request r's draft KV is to hold its tokens up to `end`: the count to feed
 * from dbase + dlen on, after moving dbase forward to the last `window`
 * tokens when more are missing or `end` (and `extra` drafts after it)
 * would pass the draft's context. */
static int gap_of(const hr_spec_draft *d, hr_request *r, int end, int extra) {
    hr_spec_state *s = &r->spec;
    int c = end - s->dbase - s->dlen;
    if (c > d->window || end - s->dbase + extra > d->n_ctx) {
        int keep = d->window < end ? d->window : end;
        s->dbase = end - keep;
        s->dlen = 0;
        c = keep;
    }
    return c;
}

/* Feed request i's c tokens from dbase + dlen on into the batch at T (one
 * logits row at the last when want); its dlen moves past them. */
static int feed(hr_spec_draft *d, hr_request *r, int i, int known, int c, bool want, int T) {
    hr_spec_state *s = &r->spec;
    int V = d->m->hp.n_vocab;
    for (int j = 0; j < c; j++) {
        /* an id the draft does not have (its vocabulary is smaller) goes
         * in as 0: its drafts are guesses either way */
        int32_t t = token_of(r, known, s->dbase + s->dlen + j);
        d->tok[T] = t < V ? t : 0;
        d->pos[T] = s->dlen + j;
        d->seq[T] = i;
        d->want[T] = want && j == c - 1;
        T++;
    }
    s->dlen += c;
    return T;
}

static void seqs_of(hr_spec_draft *d, hr_request **rs, int n) {
    for (int i = 0; i < n; i++)
        d->seqs[i] = (hr_seq_blocks){rs[i]->spec.dblocks, rs[i]->spec.n_dblocks, 0, 0};
}

int hr_spec_draft_follow(hr_spec_draft *d, hr_request **running, int n_running, hr_error *err) {
    hr_request **rs = d->rs;
    int n = 0;
    for (int i = 0; i < n_running; i++) {
        hr_spec_state *s = &running[i]->spec;
        if (s->mode == HR_SPEC_DRAFT && running[i]->len <= running[i]->n_prompt &&
            s->dbase + s->dlen < running[i]->len)
            rs[n++] = running[i];
    }
    seqs_of(d, rs, n);
    for (;;) {
        int T = 0;
        for (int i = 0; i < n && T < d->max_tokens; i++) {
            hr_request *r = rs[i];
            int c = gap_of(d, r, r->len, 0);
            c = c < d->max_tokens - T ? c : d->max_tokens - T;
            T = feed(d, r, i, r->len, c, false, T);
        }
        if (T == 0)
            return 0;
        hr_batch b = {.n_tokens = T, .token = d->tok, .pos = d->pos, .seq = d->seq,
                      .logits = d->want, .n_seqs = n, .seqs = d->seqs};
        if (hr_forward(d->fwd, &d->kv, &b, d->logits, err)) {
            for (int i = 0; i < n; i++) /* its KV is unknown now: start over */
                rs[i]->spec.dlen = 0;
            return hr_err_wrap(err, "draft model");
        }
    }
}

int hr_spec_draft_run(hr_spec_draft *d, hr_request **rs, int n, double *seconds,
                      int *tokens, hr_error *err) {
    int V = d->m->hp.n_vocab, *got = d->got;
    *seconds = 0;
    *tokens = 0;
    for (int i = 0; i < n; i++)
        got[i] = 0;
    seqs_of(d, rs, n);
    /* pass j feeds every request's tokens from its draft length on (the
     * catch-up of what the model accepted, then each draft) and drafts the
     * next: pass 0 catches up, pass j > 0 feeds draft j - 1 */
    for (int pass = 0;; pass++) {
        int T = 0, rows = 0;
        for (int i = 0; i < n; i++) {
            hr_request *r = rs[i];
            int known = r->n_prompt + r->n_steps;
            d->row[i] = -1;
            if (pass == 0 && r->spec.n_draft > d->n_ctx - d->window)
                r->spec.n_draft = d->n_ctx - d->window; /* a window and the drafts fit */
            if (got[i] < pass || got[i] >= r->spec.n_draft)
                continue; /* done, or stopped short */
            int c = gap_of(d, r, known + got[i], r->spec.n_draft - got[i]);
            bool fits = T + c <= d->max_tokens;
            if (!fits)
                c = d->max_tokens - T;
            T = feed(d, r, i, known, c, fits, T);
            if (fits && c > 0)
                d->row[i] = rows++;
            else
                r->spec.n_draft = got[i]; /* the catch-up goes on next step */
        }
        if (T == 0)
            break;
        hr_batch b = {.n_tokens = T, .token = d->tok, .pos = d->pos, .seq = d->seq,
                      .logits = d->want, .n_seqs = n, .seqs = d->seqs};
        double t0 = hr_now();
        if (hr_forward(d->fwd, &d->kv, &b, d->logits, err)) {
            for (int i = 0; i < n; i++)
                rs[i]->spec.dlen = 0;
            return hr_err_wrap(err, "draft model");
        }
        if (rows && T <= 2 * rows) { /* drafting, not catching up */
            *seconds += hr_now() - t0;
            *tokens += rows;
        }
        for (int i = 0; i < n; i++) {
            if (d->row[i] < 0)
                continue;
            int32_t t = hr_argmax(d->logits + (size_t)d->row[i] * V, V);
            rs[i]->spec.draft[got[i]++] = t;
        }
        if (rows == 0)
            break;
    }
    for (int i = 0; i < n; i++)
        rs[i]->spec.n_draft = got[i];
    return 0;
}
