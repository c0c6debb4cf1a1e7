/* A step's logits rows (engine_int.h): sampled (the first row of each
 * request over the pool's threads, scoring rows scored), constrained
 * rows masked by their grammar, and each row's token committed to its
 * request. Engine thread. */
#include "engine/engine_int.h"
#include "core/log.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>

bool hr__is_stop(const hr_request *r, int32_t tok) {
    for (int i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == tok)
            return true;
    return false;
}

/* Advance r's matcher by the sampled *tok (not a stop token). If the text
 * could then no longer be completed within the tokens left (one token per
 * byte of its shortest completion), undo, mask row (the log-probabilities
 * the sampler left) to the tokens that keep it completable in time (or, when
 * none can, that get closest) and draw again. 0 when *tok stands, 1 when it
 * was drawn again (row changed), -1 on our bug (a token the mask allowed
 * does not fit). row has V entries. */
static int grammar_accept(hr_request *r, float *row, int V, int32_t *tok) {
    hr_error merr;
    int left = r->limit - r->n_steps; /* this token included */
    if (hr_matcher_accept(r->matcher, *tok, &merr))
        goto bug;
    int d = hr_matcher_distance(r->matcher);
    if (d >= 0 && d <= left - 1)
        return 0;
    hr_matcher_rollback(r->matcher, 1);
    hr_matcher_mask_budget(r->matcher, r->mask, left);
    for (int t = 0; t < V; t++)
        if (!(r->mask[t >> 5] >> (t & 31) & 1))
            row[t] = -INFINITY;
    *tok = hr_sampler_resample(r->sampler, row);
    if (hr__is_stop(r, *tok) || !hr_matcher_accept(r->matcher, *tok, &merr))
        return 1;
bug:
    hr_log(HR_LOG_ERROR, "grammar: %s", merr.msg);
    return -1;
}

/* What a row sampled: the token, its log-probability and the top ones. */
static void fill_step(hr_step *s, const hr_request *r, const float *row, int V, int32_t tok) {
    *s = (hr_step){.token = tok, .logprob = row[tok]};
    if (r->top_logprobs)
        s->n_top = hr_top_logprobs(row, V, r->top_logprobs, s->top_ids, s->top_lps);
}

/* log softmax(row)[tok], in double. */
static float row_logprob(const float *row, int V, int32_t tok) {
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++)
        mx = row[v] > mx ? row[v] : mx;
    for (int v = 0; v < V; v++)
        s += exp(row[v] - mx);
    return (float)(row[tok] - mx - log(s));
}

/* Sample the first logits row of every request and score the scoring rows:
 * rows are split over the pool's threads (each request's sampler is its
 * own). A request's further rows verify drafts: each is sampled once the
 * one before it is committed (hr__spec_commit), with the history and
 * grammar state of that point. */
static void sample_worker(void *p, int ith, int nth) {
    hr_engine *e = p;
    int V = e->m->hp.n_vocab;
    long lo, hi;
    hr_split(e->n_rows, ith, nth, &lo, &hi);
    for (long k = lo; k < hi; k++) {
        if (!e->b_first[k])
            continue;
        hr_request *r = e->b_row_req[k];
        float *row = e->logits + (size_t)k * V;
        int32_t at = e->b_row_score[k];
        if (at >= 0)
            r->prompt_lp[at] = row_logprob(row, V, r->prompt[at]);
        else
            fill_step(&e->b_step[k], r, row, V, hr_sampler_sample(r->sampler, row));
    }
}

/* Mask row k of a constrained request to the tokens that keep its output
 * valid (the grammar's caches are shared: the engine thread only). */
static void mask_row(hr_engine *e, int k) {
    int V = e->m->hp.n_vocab;
    hr_request *r = e->b_row_req[k];
    float *row = e->logits + (size_t)k * V;
    hr_matcher_mask(r->matcher, r->mask);
    for (int t = 0; t < V; t++)
        if (!(r->mask[t >> 5] >> (t & 31) & 1))
            row[t] = -INFINITY;
}

void hr__sample_row(hr_engine *e, int k) {
    int V = e->m->hp.n_vocab;
    hr_request *r = e->b_row_req[k];
    float *row = e->logits + (size_t)k * V;
    if (r->matcher)
        mask_row(e, k);
    fill_step(&e->b_step[k], r, row, V, hr_sampler_sample(r->sampler, row));
}

void hr__sample_rows(hr_engine *e) {
    for (int k = 0; k < e->n_rows; k++)
        if (e->b_first[k] && e->b_row_score[k] < 0 && e->b_row_req[k]->matcher)
            mask_row(e, k);
    if (e->n_rows > 1)
        hr_pool_run(hr_fwd_pool(e->fwd), sample_worker, e);
    else
        sample_worker(e, 0, 1);
}

/* Row k's sampled token goes to its request (the grammar may redraw it in
 * the last steps); returns what that does to the request. */
hr_row_outcome hr__commit_row(hr_engine *e, int k) {
    hr_request *r = e->b_row_req[k];
    int32_t tok = e->b_step[k].token;
    if (r->matcher && !hr__is_stop(r, tok)) {
        int V = e->m->hp.n_vocab;
        float *row = e->logits + (size_t)k * V;
        int rc = grammar_accept(r, row, V, &tok);
        if (rc < 0)
            return HR_ROW_FAILED;
        if (rc > 0) /* redrawn under the budget mask */
            fill_step(&e->b_step[k], r, row, V, tok);
    }
    if (hr__is_stop(r, tok)) {
        pthread_mutex_lock(&r->mu);
        r->eos = true;
        pthread_mutex_unlock(&r->mu);
        return HR_ROW_EOS;
    }
    hr_sampler_accept(r->sampler, &tok, 1);
    pthread_mutex_lock(&r->mu);
    r->steps[r->n_steps++] = e->b_step[k];
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    atomic_fetch_add(&e->st_gen, 1);
    if (r->matcher && hr_matcher_done(r->matcher))
        return HR_ROW_COMPLETE;
    if (r->n_steps >= r->limit) /* a complete constrained text ends with STOP */
        return r->matcher && hr_matcher_can_end(r->matcher) ? HR_ROW_COMPLETE : HR_ROW_LIMIT;
    return HR_ROW_CONTINUE;
}
