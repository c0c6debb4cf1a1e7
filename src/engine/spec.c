/* Speculative decoding: proposals, the verify rows' commit, the adaptive k
 * (spec.h). Engine thread only. */
#include "engine/spec.h"
#include "engine/engine_int.h"
#include "engine/spec_draft.h"
#include "core/log.h"

#include <string.h>

/* ---- prompt lookup ------------------------------------------------------------ */

int hr_spec_ngram(const int32_t *h, int n, int k, int32_t *out) {
    if (n < HR_SPEC_NGRAM_MIN + 1 || k <= 0)
        return 0;
    int best = 0, at = -1;
    /* an occurrence ending at p (p < n - 1, so it has a continuation):
     * the length of the common suffix of h[0, p] and h[0, n - 1] */
    for (int p = n - 2; p >= HR_SPEC_NGRAM_MIN - 1; p--) {
        if (h[p] != h[n - 1])
            continue;
        int len = 1;
        while (len < HR_SPEC_NGRAM_MAX && len <= p && h[p - len] == h[n - 1 - len])
            len++;
        if (len > best) { /* scanning backwards: the most recent of a length wins */
            best = len;
            at = p;
            if (len == HR_SPEC_NGRAM_MAX)
                break;
        }
    }
    if (best < HR_SPEC_NGRAM_MIN)
        return 0;
    int c = n - 1 - at;
    c = c < k ? c : k;
    memcpy(out, h + at + 1, (size_t)c * sizeof *out);
    return c;
}

/* ---- the adaptive k ----------------------------------------------------------- */

#define BACKOFF_MAX 64

void hr_spec_init(hr_spec_state *s, hr_spec_mode mode, int k_max) {
    int32_t *db = s->dblocks;
    *s = (hr_spec_state){.mode = k_max > 0 ? mode : HR_SPEC_OFF, .k_max = k_max, .k = k_max,
                         .backoff = 1, .dblocks = db};
}

int hr_spec_budget(hr_spec_state *s) {
    if (s->mode == HR_SPEC_OFF)
        return 0;
    if (s->k > 0)
        return s->k;
    if (s->wait > 0) {
        s->wait--;
        return 0;
    }
    s->k = 1; /* probe */
    return 1;
}

void hr_spec_adapt(hr_spec_state *s, int drafted, int accepted) {
    if (drafted <= 0)
        return;
    if (accepted == drafted) {
        s->k = s->k < s->k_max ? s->k + 1 : s->k_max;
        s->backoff = 1;
    } else if (accepted == 0) {
        if (--s->k <= 0) {
            s->k = 0;
            s->wait = s->backoff;
            s->backoff = s->backoff * 2 < BACKOFF_MAX ? s->backoff * 2 : BACKOFF_MAX;
        }
    } else {
        s->backoff = 1;
    }
}

/* ---- proposals ------------------------------------------------------------------ */

/* Keep the drafts a constrained request's grammar allows (and none after a
 * stop token): the matcher walks them and is rolled back. */
static void grammar_trim(hr_request *r) {
    hr_spec_state *s = &r->spec;
    int n = 0;
    for (; n < s->n_draft; n++)
        if (hr__is_stop(r, s->draft[n]) || hr_matcher_accept(r->matcher, s->draft[n], NULL))
            break;
    if (n)
        hr_matcher_rollback(r->matcher, n);
    s->n_draft = n;
}

void hr__spec_propose(hr_engine *e) {
    hr_request **drafting = e->b_row_req; /* scratch until build_batch fills it */
    int n_drafting = 0;
    for (int i = 0; i < e->n_running; i++) {
        hr_request *r = e->running[i];
        hr_spec_state *s = &r->spec;
        s->n_draft = 0;
        int known = r->n_prompt + r->n_steps;
        if (s->mode == HR_SPEC_OFF || known - r->len != 1)
            continue;
        /* the drafts and the token after them must fit the limit */
        int room = r->limit - r->n_steps - 1, k = hr_spec_budget(s);
        k = k < room ? k : room;
        k = k < e->max_draft ? k : e->max_draft;
        if (k <= 0)
            continue;
        if (s->mode == HR_SPEC_NGRAM) {
            /* the history is the prompt then the log: drafted over a copy */
            int n = 0;
            for (int t = 0; t < known; t++)
                e->tokbuf_spec[n++] = hr__token_at(r, t);
            s->n_draft = hr_spec_ngram(e->tokbuf_spec, n, k, s->draft);
        } else {
            s->n_draft = k;
            drafting[n_drafting++] = r;
        }
    }
    if (n_drafting) {
        hr_error err = {0};
        if (hr_spec_draft_run(e->draft, drafting, n_drafting, &err)) {
            hr_log(HR_LOG_ERROR, "%s", err.msg);
            for (int i = 0; i < n_drafting; i++)
                drafting[i]->spec.n_draft = 0;
        }
        for (int i = 0; i < n_drafting; i++) { /* ids the model does not have end it */
            hr_spec_state *s = &drafting[i]->spec;
            for (int j = 0; j < s->n_draft; j++)
                if (s->draft[j] >= e->m->hp.n_vocab)
                    s->n_draft = j;
        }
    }
    for (int i = 0; i < e->n_running; i++) {
        hr_request *r = e->running[i];
        if (r->spec.n_draft && r->matcher)
            grammar_trim(r);
    }
}

/* ---- verify --------------------------------------------------------------------- */

int hr__spec_commit(hr_engine *e, int k, int n) {
    hr_request *r = e->b_row_req[k];
    hr_spec_state *s = &r->spec;
    int len0 = r->len - n; /* the step advanced len by every position it wrote */
    int m = 0;             /* drafts accepted */
    hr_row_outcome o = hr__commit_row(e, k);
    while (o == HR_ROW_CONTINUE && m < n - 1 &&
           r->steps[r->n_steps - 1].token == s->draft[m]) {
        m++;
        hr__sample_row(e, k + m);
        o = hr__commit_row(e, k + m);
    }
    /* KV is valid for the last token and the accepted drafts */
    r->len = len0 + 1 + m;
    if (s->dlen > r->len)
        s->dlen = r->len;
    hr_spec_adapt(s, n - 1, m);
    pthread_mutex_lock(&r->mu);
    s->drafted += n - 1;
    s->accepted += m;
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&e->st_drafted, n - 1);
    atomic_fetch_add(&e->st_accepted, m);
    return (int)o;
}
