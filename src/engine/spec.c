/* Speculative decoding: proposals, the verify rows' commit, the adaptive k
 * (spec.h). Engine thread only. */
#include "engine/spec.h"
#include "engine/engine_int.h"
#include "engine/spec_draft.h"
#include "core/log.h"

#include <math.h>

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

/* ---- how many tokens to draft ------------------------------------------------ */

#define WAIT_MAX 64
#define DECAY 0.9      /* of the acceptance counts, per verify */
#define PRIOR_TOKEN 0.2 /* an unmeasured token's cost, in one-token steps */

void hr_spec_init(hr_spec_state *s, hr_spec_mode mode, int k_max) {
    int32_t *db = s->dblocks;
    *s = (hr_spec_state){.mode = k_max > 0 ? mode : HR_SPEC_OFF, .k_max = k_max,
                         .succ = 1, .trials = 2, .wait = 1, .dblocks = db};
}

double hr_spec_alpha(const hr_spec_state *s) { return s->succ / s->trials; }

void hr_spec_observe(hr_spec_state *s, int drafted, int accepted) {
    if (drafted <= 0)
        return;
    /* the drafts were tried in order until the first rejection */
    int tried = accepted < drafted ? accepted + 1 : drafted;
    s->succ = s->succ * DECAY + accepted;
    s->trials = s->trials * DECAY + tried;
}

/* A moving estimate of a cost's quiet value: down quickly, up slowly (a
 * stall of a preempted thread on a shared machine moves it little). */
static void track(double *v, double y) {
    if (*v == 0)
        *v = y;
    else if (y < *v)
        *v += 0.3 * (y - *v);
    else
        *v += 0.05 * ((y < 2 * *v ? y : 2 * *v) - *v);
}

static bool fresh(const hr_spec_cost *c, int T) {
    return c->step[T] > 0 && c->n - c->seen[T] <= HR_SPEC_COST_AGE;
}

void hr_spec_cost_step(hr_spec_cost *c, int T, double seconds) {
    if (T < 1 || T > HR_SPEC_COST_T || !(seconds > 0))
        return;
    if (T > 1 && fresh(c, 1)) { /* never above the size below plus one token */
        double bound = hr_spec_cost_of(c, T - 1) + c->step[1];
        seconds = seconds < bound ? seconds : bound;
    }
    if (!fresh(c, T))
        c->step[T] = 0;
    track(&c->step[T], seconds);
    c->seen[T] = ++c->n;
}

void hr_spec_cost_draft(hr_spec_cost *c, int tokens, double seconds) {
    if (tokens > 0 && seconds > 0)
        track(&c->draft_tok, seconds / tokens);
}

double hr_spec_cost_of(const hr_spec_cost *c, int T) {
    if (T < 1)
        return 0;
    if (T <= HR_SPEC_COST_T && fresh(c, T))
        return c->step[T];
    /* the nearest measured T, below if there is one, else above */
    int t = T < HR_SPEC_COST_T ? T : HR_SPEC_COST_T;
    while (t > 1 && !fresh(c, t))
        t--;
    if (!fresh(c, t))
        for (t = T + 1; t <= HR_SPEC_COST_T && !fresh(c, t); t++)
            ;
    if (t > HR_SPEC_COST_T) /* nothing measured yet: in one-token steps */
        return 1 + PRIOR_TOKEN * (T - 1);
    double one = fresh(c, 1) ? c->step[1] : c->step[t] / (1 + PRIOR_TOKEN * (t - 1));
    return c->step[t] + (T - t) * PRIOR_TOKEN * one;
}

/* What one more token adds to a step of T: never taken as free (noise can
 * measure T + 1 below T): at least 5% of a one-token step, at most one. */
static double token_cost(const hr_spec_cost *c, int T) {
    double d = hr_spec_cost_of(c, T + 1) - hr_spec_cost_of(c, T), one = hr_spec_cost_of(c, 1);
    return d < 0.05 * one ? 0.05 * one : d > one ? one : d;
}

/* Every decoding request's k for this step (spec.n_draft: the most it may
 * draft), chosen as spec.h says. */
static void choose_k(hr_engine *e) {
    int T = 0;
    double N = 0;
    for (int i = 0; i < e->n_running; i++) {
        hr_request *r = e->running[i];
        hr_spec_state *s = &r->spec;
        s->n_draft = s->cap = 0;
        if (r->n_prompt + r->n_steps - r->len != 1)
            continue;
        T++;
        N++;
        if (s->mode == HR_SPEC_OFF)
            continue;
        int c = r->limit - r->n_steps - 1; /* the drafts and the token after them fit */
        c = c < s->k_max ? c : s->k_max;
        s->cap = c < e->max_draft ? c : e->max_draft;
    }
    double C = hr_spec_cost_of(&e->spec_cost, T);
    /* probes first: one token each */
    for (int i = 0; i < e->n_running; i++) {
        hr_spec_state *s = &e->running[i]->spec;
        s->probe = s->cap > 0 && ++s->idle >= s->wait;
        if (s->probe) {
            double d = s->mode == HR_SPEC_DRAFT ? e->spec_cost.draft_tok : 0;
            s->n_draft = 1;
            N += hr_spec_alpha(s);
            C += token_cost(&e->spec_cost, T) + d;
            T++;
        }
    }
    for (;;) { /* then the best next draft while it pays */
        int best = -1;
        double g = 0;
        for (int i = 0; i < e->n_running; i++) {
            hr_spec_state *s = &e->running[i]->spec;
            if (s->n_draft >= s->cap)
                continue;
            double gi = pow(hr_spec_alpha(s), s->n_draft + 1);
            if (gi > g) {
                g = gi;
                best = i;
            }
        }
        if (best < 0)
            break;
        hr_spec_state *s = &e->running[best]->spec;
        double d = s->mode == HR_SPEC_DRAFT ? e->spec_cost.draft_tok : 0;
        double dc = token_cost(&e->spec_cost, T) + d;
        if (g * C <= N * dc)
            break;
        s->n_draft++;
        N += g;
        C += dc;
        T++;
    }
    /* a request the choice itself drafts for probes again after 1 step; one
     * that only probed waits twice as long for the next probe */
    for (int i = 0; i < e->n_running; i++) {
        hr_spec_state *s = &e->running[i]->spec;
        if (s->n_draft > (s->probe ? 1 : 0))
            s->wait = 1;
        else if (s->probe)
            s->wait = s->wait * 2 < WAIT_MAX ? s->wait * 2 : WAIT_MAX;
        if (s->n_draft)
            s->idle = 0;
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
    choose_k(e);
    for (int i = 0; i < e->n_running; i++) {
        hr_request *r = e->running[i];
        hr_spec_state *s = &r->spec;
        int known = r->n_prompt + r->n_steps, k = s->n_draft;
        s->n_draft = 0;
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
        double secs;
        int toks, rc = hr_spec_draft_run(e->draft, drafting, n_drafting, &secs, &toks, &err);
        hr_spec_cost_draft(&e->spec_cost, toks, secs);
        if (rc) {
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
    if (s->dbase + s->dlen > r->len)
        s->dlen = r->len - s->dbase;
    hr_spec_observe(s, n - 1, m);
    pthread_mutex_lock(&r->mu);
    s->drafted += n - 1;
    s->accepted += m;
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&e->st_drafted, n - 1);
    atomic_fetch_add(&e->st_accepted, m);
    return (int)o;
}
