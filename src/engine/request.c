/* Requests (engine.h): made on any thread, their token log written by the
 * engine thread under the request's lock and read by their consumer. */
#include "engine/engine_int.h"
#include "core/error.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static void request_free(hr_request *r) {
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    hr_sampler_free(r->sampler);
    hr_adapter_unref(r->adapter);
    hr_matcher_free(r->matcher);
    free(r->mask);
    hr__request_images_free(r);
    free(r->prompt);
    free(r->prompt_lp);
    free(r->hidden);
    free(r->stop_ids);
    free(r->steps);
    free(r->snap[0].data);
    free(r->snap[1].data);
    free(r->first);
    free(r->blocks);
    free(r->rblocks);
    free(r->spec.dblocks);
    free(r);
}

void hr_request_release(hr_request *r) {
    if (r && atomic_fetch_sub(&r->refs, 1) == 1)
        request_free(r);
}

void hr_request_cancel(hr_request *r) { atomic_store(&r->cancel, 1); }

int hr_request_completion_tokens(hr_request *r) {
    pthread_mutex_lock(&r->mu);
    int n = r->n_steps + (r->eos ? 1 : 0);
    pthread_mutex_unlock(&r->mu);
    return n;
}

void hr__request_end(hr_request *r, hr_finish why, const char *msg) {
    pthread_mutex_lock(&r->mu);
    if (r->finish == HR_FINISH_NONE) {
        r->finish = why;
        if (msg)
            snprintf(r->err, sizeof r->err, "%s", msg);
    }
    /* the adapter is free to go once its consumer learns the request ended
     * (no step reads it any more) */
    hr_adapter_unref(r->adapter);
    r->adapter = NULL;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

int hr_request_wait(hr_request *r, int i, hr_step *out, int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    int rc = -1;
    pthread_mutex_lock(&r->mu);
    while (r->n_steps <= i && r->finish == HR_FINISH_NONE)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT)
            break;
    if (r->n_steps > i) {
        *out = r->steps[i];
        rc = 1;
    } else if (r->finish != HR_FINISH_NONE) {
        rc = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

hr_finish hr_request_finish(hr_request *r, hr_error *msg) {
    pthread_mutex_lock(&r->mu);
    hr_finish f = r->finish;
    if (msg && f == HR_FINISH_ERROR)
        hr_err(msg, HR_EINVAL, "%s", r->err);
    pthread_mutex_unlock(&r->mu);
    return f;
}

void hr_request_progress(hr_request *r, int *done, int *total) {
    int c = hr_request_cached_tokens(r), p = atomic_load(&r->progress);
    *total = r->n_prompt - c;
    *done = (p < r->n_prompt ? p : r->n_prompt) - c;
    if (*done < 0)
        *done = 0;
}

const float *hr_request_prompt_logprobs(const hr_request *r) { return r->prompt_lp; }

const float *hr_request_hidden(const hr_request *r) { return r->hidden; }

int hr_request_n_prompt(const hr_request *r) { return r->n_prompt; }

void hr_request_spec_counts(hr_request *r, long *drafted, long *accepted) {
    pthread_mutex_lock(&r->mu);
    *drafted = r->spec.drafted;
    *accepted = r->spec.accepted;
    pthread_mutex_unlock(&r->mu);
}

int hr_request_cached_tokens(hr_request *r) {
    pthread_mutex_lock(&r->mu);
    int c = r->cached;
    pthread_mutex_unlock(&r->mu);
    return c;
}

/* ---- the engine ------------------------------------------------------------ */


int hr_request_new(hr_request **out, const hr_engine *e, const hr_req_params *p,
                   hr_error *err) {
    *out = NULL;
    if (p->n_prompt <= 0)
        return hr_err(err, HR_EINVAL, "the prompt is empty");
    if (p->max_tokens < 0)
        return hr_err(err, HR_ERANGE, "max_tokens must be non-negative");
    if (p->top_logprobs < 0 || p->top_logprobs > HR_MAX_TOP_LOGPROBS)
        return hr_err(err, HR_ERANGE, "top_logprobs must be in [0, %d]", HR_MAX_TOP_LOGPROBS);
    if (p->score_from < 0 || p->score_from >= p->n_prompt)
        return hr_err(err, HR_ERANGE, "prompt scoring must start inside the prompt (1..%d)",
                      p->n_prompt - 1);
    if (p->spec < HR_SPEC_OFF || p->spec > HR_SPEC_DRAFT)
        return hr_err(err, HR_EINVAL, "unknown speculative decoding mode %d", (int)p->spec);
    if (p->spec != HR_SPEC_OFF && (p->num_draft < 0 || p->num_draft > e->max_draft))
        return hr_err(err, HR_ERANGE, "num_draft_tokens must be in [0, %d]", e->max_draft);
    if (p->spec == HR_SPEC_DRAFT && !e->draft)
        return hr_err(err, HR_EINVAL, "speculative decoding with a draft model needs one: "
                      "start with --draft-model PATH");
    if (p->spec != HR_SPEC_OFF && p->num_draft > 0 && e->len_rope)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: speculative decoding with a "
                      "RoPE that depends on the sequence length (dynamic, longrope)");
    if (p->spec != HR_SPEC_OFF && p->num_draft > 0 && e->m->hp.n_linear > 0)
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: speculative decoding on a "
                      "model with recurrent layers (%s: its state cannot roll back)",
                      e->m->hp.arch->model_type);
    if (p->embed && (p->max_tokens || p->score_from || p->grammar ||
                     (p->spec != HR_SPEC_OFF && p->num_draft > 0)))
        return hr_err(err, HR_EINVAL, "an embedding request generates nothing (no max_tokens, "
                      "scoring, grammar or speculation)");
    if (!p->embed && e->m->hp.arch->encoder)
        return hr_err(err, HR_EINVAL, "%s is an encoder model: it gives embeddings only",
                      e->m->hp.arch->model_type);
    if (p->adapter && p->adapter->model != e->m)
        return hr_err(err, HR_EINVAL, "adapter %s was loaded for another model",
                      p->adapter->name);
    int V = e->m->hp.n_vocab;
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= V)
            return hr_err(err, HR_ERANGE, "prompt token %d is outside the vocabulary "
                          "(0..%d)", p->prompt[i], V - 1);
    hr_request *r = calloc(1, sizeof *r);
    if (!r)
        return hr_err(err, HR_ENOMEM, "out of memory");
    int rc = hr_sampler_new(&r->sampler, &p->sampler, V, err);
    if (rc) {
        free(r);
        return rc;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    if ((r->adapter = p->adapter)) {
        hr_adapter_ref(r->adapter);
        r->cache_seed = r->adapter->fingerprint;
    }
    atomic_store(&r->refs, 1);
    if (p->grammar) {
        if ((rc = hr_matcher_new(&r->matcher, p->grammar, p->gvocab, err))) {
            request_free(r);
            return rc;
        }
        r->mask = malloc(((size_t)V / 32 + 1) * sizeof *r->mask);
        if (!r->mask) {
            request_free(r);
            return hr_err(err, HR_ENOMEM, "out of memory");
        }
    }
    r->n_prompt = p->n_prompt;
    r->max_tokens = p->max_tokens;
    r->top_logprobs = p->top_logprobs;
    r->score_from = p->score_from;
    r->embed = p->embed;
    r->n_stop_ids = p->n_stop_ids;
    r->limit = p->max_tokens < e->n_ctx - p->n_prompt ? p->max_tokens : e->n_ctx - p->n_prompt;
    if (r->limit < 0)
        r->limit = 0;
    r->prompt = malloc((size_t)p->n_prompt * sizeof *r->prompt);
    r->stop_ids = malloc(((size_t)p->n_stop_ids + 1) * sizeof *r->stop_ids);
    r->steps = malloc(((size_t)r->limit + 1) * sizeof *r->steps);
    r->blocks = malloc(((size_t)e->n_ctx / HR_KV_BLOCK + 1) * sizeof *r->blocks);
    size_t nb = (size_t)e->n_ctx / HR_KV_BLOCK + 1;
    if (e->resid && (r->rblocks = malloc(nb * sizeof *r->rblocks)))
        for (size_t b = 0; b < nb; b++)
            r->rblocks[b] = -1;
    if (r->score_from && (r->prompt_lp = malloc((size_t)p->n_prompt * sizeof *r->prompt_lp)))
        for (int i = 0; i < p->n_prompt; i++)
            r->prompt_lp[i] = NAN;
    if (r->embed)
        r->hidden = malloc((size_t)p->n_prompt * e->m->hp.d_model * sizeof *r->hidden);
    if (p->spec == HR_SPEC_DRAFT && p->num_draft > 0)
        r->spec.dblocks = malloc(((size_t)e->n_ctx / HR_KV_BLOCK + 1) * sizeof *r->spec.dblocks);
    hr_spec_init(&r->spec, p->spec, p->num_draft);
    if (!r->prompt || !r->stop_ids || !r->steps || !r->blocks || (e->resid && !r->rblocks) ||
        (r->score_from && !r->prompt_lp) || (r->embed && !r->hidden) || (r->spec.mode == HR_SPEC_DRAFT && !r->spec.dblocks)) {
        request_free(r);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    memcpy(r->prompt, p->prompt, (size_t)p->n_prompt * sizeof *r->prompt);
    if ((rc = hr__request_images(r, e, p, err))) {
        request_free(r);
        return rc;
    }
    if (p->n_stop_ids)
        memcpy(r->stop_ids, p->stop_ids, (size_t)p->n_stop_ids * sizeof *r->stop_ids);
    hr_sampler_accept(r->sampler, r->prompt, r->n_prompt);
    *out = r;
    return 0;
}

