#include "engine/engine_int.h"
#include "engine/spec_draft.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "model/forward.h"
#include "model/kv.h"
#include "model/rope.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int hr_engine_ctx(const hr_engine *e) { return e->n_ctx; }
const hr_kv *hr_engine_kv(const hr_engine *e) { return &e->kv; }
const hr_kv *hr_engine_kvq(const hr_engine *e) { return e->kvq.n_blocks ? &e->kvq : NULL; }
const hr_kv *hr_engine_kvr(const hr_engine *e, int *resid) {
    *resid = e->resid;
    return e->resid ? &e->kvr : NULL;
}
int hr_engine_threads(const hr_engine *e) { return hr_pool_size(hr_fwd_pool(e->fwd)); }
int hr_engine_max_batch(const hr_engine *e) { return e->max_batch; }
hr_pool *hr_engine_pool(hr_engine *e) { return hr_fwd_pool(e->fwd); }


/* The most tokens a sequence holds before it converts at `start`: a prefill
 * chunk ends at start (batch.c), a decode step adds its token and drafts
 * to at most start - 1; but a chunk that may not split an image
 * (hr__image_chunk) goes past start by up to a step. */
static int unconverted_max(const hr_engine *e, int start) {
    return e->m->mm ? start - 1 + e->max_tokens_step : start + e->max_draft;
}

/* Blocks of e->kv a sequence of `tokens` tokens holds at most: all of them,
 * or with a quantized pool to convert into, those it holds before it
 * converts. */
static int kv_blocks_for(const hr_engine *e, int tokens) {
    int u = e->kvq.n_blocks ? unconverted_max(e, e->kv_start) : tokens;
    return hr__blocks_for(tokens < u ? tokens : u);
}
/* Blocks of e->kvq promised to it: all of them when it may reach kv_start */
static int kvq_blocks_for(const hr_engine *e, int tokens) {
    return e->kvq.n_blocks && tokens >= e->kv_start ? hr__blocks_for(tokens) : 0;
}


int hr_engine_submit(hr_engine *e, hr_request *r, hr_error *err) {
    if (atomic_load(&e->dead))
        return hr_err(err, HR_EIO, "%s", e->dead_msg);
    if (e->m->hp.arch->encoder && r->n_prompt > e->chunk)
        return hr_err(err, HR_ERANGE, "the input has %d tokens; this encoder takes at most %d "
                      "in one step (--prefill-chunk)", r->n_prompt, e->chunk);
    if (r->n_prompt + (r->max_tokens > 0) > e->n_ctx)
        return hr_err(err, HR_ERANGE, "the prompt has %d tokens; this model's context "
                      "limit is %d tokens, including at least one generated token",
                      r->n_prompt, e->n_ctx);
    int tokens = r->n_prompt + r->limit;
    if (kv_blocks_for(e, tokens) > e->kv.n_blocks || kvq_blocks_for(e, tokens) > e->kvq.n_blocks)
        return hr_err(err, HR_EFULL, "the request needs %d tokens of KV cache; the "
                      "cache holds %d (raise --kv-budget)", tokens,
                      (kv_blocks_for(e, tokens) > e->kv.n_blocks ? e->kv.n_blocks
                                                                 : e->kvq.n_blocks) * HR_KV_BLOCK);
    atomic_fetch_add(&r->refs, 1);
    pthread_mutex_lock(&e->mu);
    r->next = NULL;
    if (e->inbox_tail)
        e->inbox_tail->next = r;
    else
        e->inbox = r;
    e->inbox_tail = r;
    atomic_fetch_add(&e->st_queued, 1);
    atomic_fetch_add(&e->st_total, 1);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

/* ---- scheduling (engine thread) -------------------------------------------------- */

/* A request's end, counted before its consumer hears of it: a /metrics
 * read after the response counts it finished. */
static void end_request(hr_engine *e, hr_request *r, hr_finish why, const char *msg) {
    atomic_fetch_add(&e->st_finished, 1);
    hr__request_end(r, why, msg);
}

/* A waiting request's end before it ran (the caller unlinked it). */
static void end_waiting(hr_engine *e, hr_request *r, hr_finish why, const char *msg) {
    atomic_fetch_sub(&e->st_queued, 1);
    end_request(e, r, why, msg);
    hr_request_release(r);
}

/* The queue's head refused with an error. */
static void refuse_head(hr_engine *e, const char *msg) {
    hr_request *r = e->waiting;
    e->waiting = r->next;
    if (!e->waiting)
        e->waiting_tail = NULL;
    end_waiting(e, r, HR_FINISH_ERROR, msg);
}

static void retire(hr_engine *e, int i, hr_finish why, const char *msg) {
    hr_request *r = e->running[i];
    /* a converted sequence's blocks are quantized: they go to the quantized
     * prompt cache (its unquantized prefix went to the other at the
     * conversion, convert) */
    if (e->pcache && why != HR_FINISH_ERROR && r->len > 0 && !r->embed && !r->conv) {
        /* index the sequence's blocks, its tail too: prompt, then generated
         * tokens; with a quantized pool, at most kv_start of them (a later
         * request that reuses them converts holding exactly kv_start) */
        int n = e->kvq.n_blocks && r->len > e->kv_start ? e->kv_start : r->len;
        for (int k = 0; k < n; k++)
            e->tokbuf[k] = hr__key_at(r, k);
        hr_pcache_insert_states(e->pcache, r->cache_seed, e->tokbuf, n, r->blocks, r->snap, 2);
        hr_pcache_keep_prompt_tail(e->pcache, r->cache_seed, e->tokbuf, r->n_prompt, n,
                                   r->blocks);
        if (e->resid) /* and its last window's full-precision rows */
            hr__resid_keep(e, r);
    } else if (e->pcq && why != HR_FINISH_ERROR && r->conv && r->conv_exact && !r->embed) {
        for (int k = 0; k < r->len; k++)
            e->tokbuf[k] = hr__key_at(r, k);
        hr_pcache_insert(e->pcq, hr__qseed(e, r->cache_seed), e->tokbuf, r->len, r->blocks);
        if (e->resid)
            hr__resid_keep(e, r);
    }
    for (int k = 0; k < 2; k++) { /* (those insert did not take) */
        free(r->snap[k].data);
        r->snap[k].data = NULL;
    }
    for (int b = 0; b < r->n_blocks; b++)
        hr_kv_unref(r->conv ? &e->kvq : &e->kv, r->blocks[b]);
    r->n_blocks = 0;
    hr__resid_trim(e, r, true);
    e->kvq_promised -= r->q_need;
    r->q_need = 0;
    hr_fwd_state_drop(e->fwd, r->seq_id);
    for (int b = 0; b < r->spec.n_dblocks; b++)
        hr_kv_unref(hr_spec_draft_kv(e->draft), r->spec.dblocks[b]);
    r->spec.n_dblocks = 0;
    atomic_fetch_sub(&e->st_running, 1);
    end_request(e, r, why, msg);
    hr_request_release(r);
    e->running[i] = e->running[--e->n_running];
}

void hr__retire(hr_engine *e, int i, hr_finish why, const char *msg) { retire(e, i, why, msg); }

/* Scoring requests need logits for many prompt positions a step: the
 * logits buffer grows by SCORE_ROWS rows at the first one (false: no
 * memory for it). */
#define SCORE_ROWS 64

static bool score_rows_ready(hr_engine *e) {
    if (e->max_rows > e->rows_base)
        return true;
    float *l = realloc(e->logits, (size_t)(e->rows_base + SCORE_ROWS) * e->m->hp.n_vocab *
                                      sizeof *l);
    if (!l)
        return false;
    e->logits = l;
    e->max_rows = e->rows_base + SCORE_ROWS;
    return true;
}

static void admit(hr_engine *e) {
    /* drop cancelled requests still waiting */
    e->waiting_tail = NULL;
    for (hr_request **pp = &e->waiting; *pp;) {
        hr_request *r = *pp;
        if (atomic_load(&r->cancel)) {
            *pp = r->next;
            end_waiting(e, r, HR_FINISH_CANCELLED, NULL);
        } else {
            e->waiting_tail = r;
            pp = &r->next;
        }
    }
    while (e->waiting && e->n_running < e->max_batch) {
        hr_request *r = e->waiting;
        hr_error ierr = {0};
        if (r->n_images && hr__engine_encode_images(e, r, &ierr)) {
            refuse_head(e, ierr.msg);
            continue;
        }
        if (r->score_from && !score_rows_ready(e)) {
            refuse_head(e, "out of memory for the logits of prompt scoring");
            continue;
        }
        int total = kv_blocks_for(e, r->n_prompt + r->limit), hit = 0, len = 0;
        int q_need = kvq_blocks_for(e, r->n_prompt + r->limit);
        /* reuse the longest cached prefix, leaving at least the last
         * prompt token to compute (its logits start the generation) and
         * every token whose logits score the prompt; a prefix ending inside
         * a block comes as a copy the request owns */
        int upto = r->score_from ? r->score_from - 1 : r->n_prompt - 1;
        r->seq_id = ++e->next_seq_id;
        /* a prefix in the quantized prompt cache (kvstart.c): the request
         * starts converted on its blocks */
        int conv = hr__admit_converted(e, r, upto, &hit, &len);
        if (conv < 0) { /* FIFO: the head waits for space */
            hr_fwd_state_drop(e->fwd, r->seq_id);
            break;
        }
        if (conv) {
            /* admitted converted: no e->kv block, nothing promised */
        } else if (e->pcache && !r->embed && e->state_bytes) { /* hybrid: whole blocks, and the state after */
            const void *st = NULL;
            hit = hr_pcache_lookup_state(e->pcache, r->cache_seed, r->key ? r->key : r->prompt, upto, total,
                                         r->blocks, &len, &st);
            hr_error serr = {0};
            if (hit && hr_fwd_state_put(e->fwd, r->seq_id, len, st, &serr)) {
                hr_log(HR_LOG_WARN, "prompt cache: %s; computing the prefix", serr.msg);
                for (int b = 0; b < hit; b++)
                    hr_kv_unref(&e->kv, r->blocks[b]);
                hit = len = 0;
            }
        } else if (e->pcache && !r->embed) {
            int want = hr__first_logits(e, r) ? r->n_prompt : upto;
            hr_pcache_whole_files(e->pcache, want == r->n_prompt); /* nothing computed under them */
            hit = hr_pcache_lookup(e->pcache, r->cache_seed, r->key ? r->key : r->prompt, want,
                                   r->n_prompt, total, r->blocks, &len);
            hr_pcache_whole_files(e->pcache, false);
            hr__resid_cut_hit(e, r, &e->kv, &hit, &len);
            if (len < r->n_prompt) /* (the last token computed: its logits too) */
                hr__first_drop(r);
        }
        if (!conv) {
            int need = total - hit;
            if (e->kv.n_free < need && e->pcache)
                hr_pcache_evict(e->pcache, need - e->kv.n_free);
            if (hr__kvq_spare(e) < q_need && e->pcq) /* converted sequences' cached blocks */
                hr_pcache_evict(e->pcq, q_need - hr__kvq_spare(e));
            if (e->kv.n_free < need || hr__kvq_spare(e) < q_need) {
                /* FIFO: the head waits for space */
                for (int b = 0; b < hit; b++)
                    hr_kv_unref(&e->kv, r->blocks[b]);
                hr__resid_trim(e, r, true); /* a kept window's rows copied for it */
                hr_fwd_state_drop(e->fwd, r->seq_id);
                break;
            }
            r->n_blocks = hit;
            for (int b = 0; b < need; b++)
                r->blocks[r->n_blocks++] = hr_kv_alloc(&e->kv);
            r->q_need = q_need;
            e->kvq_promised += q_need;
            r->len = len;
        }
        if (r->spec.mode == HR_SPEC_DRAFT) { /* the draft's KV: all its own (no cache) */
            hr_kv *dkv = hr_spec_draft_kv(e->draft);
            total = hr__blocks_for(r->n_prompt + r->limit);
            if (dkv->n_free >= total)
                for (int b = 0; b < total; b++)
                    r->spec.dblocks[r->spec.n_dblocks++] = hr_kv_alloc(dkv);
            else /* the draft pool is full: this request decodes without it */
                r->spec.mode = HR_SPEC_OFF;
        }
        pthread_mutex_lock(&r->mu);
        r->cached = r->len;
        pthread_mutex_unlock(&r->mu);
        atomic_fetch_add(&e->st_cached_tokens, r->len);
        if ((e->pcache || e->pcq) && !r->embed) {
            atomic_fetch_add(&e->st_lookups, 1);
            atomic_fetch_add(&e->st_lookup_hits, r->len > 0);
            atomic_fetch_add(&e->st_miss_tokens, r->n_prompt - r->len);
        }
        e->waiting = r->next;
        if (!e->waiting)
            e->waiting_tail = NULL;
        e->running[e->n_running++] = r;
        atomic_fetch_sub(&e->st_queued, 1);
        atomic_fetch_add(&e->st_running, 1);
        atomic_fetch_add(&e->st_prompt, r->n_prompt);
        if (r->limit == 0 && !r->score_from && !r->embed) /* max_tokens 0: nothing to generate */
            retire(e, e->n_running - 1, HR_FINISH_LENGTH, NULL);
    }
}

/* ---- one step (engine thread): build the batch, forward, sample rows, commit rows ---- */

/* After a step: the state of every hybrid sequence that stopped on a block
 * boundary worth keeping (snap_point, or past it: the latest). */
static void take_snapshots(hr_engine *e) {
    for (int i = 0; e->state_bytes && i < e->n_running; i++) {
        hr_request *r = e->running[i];
        int p = hr__snap_point(e, r);
        if (r->len == 0 || r->len % HR_KV_BLOCK || r->len < p || r->len == r->cached)
            continue;
        hr_pcache_state *s = &r->snap[r->len == p ? 0 : 1];
        if (s->pos == r->len && s->data)
            continue;
        if (!s->data && !(s->data = malloc(e->state_bytes)))
            continue;
        hr_error err = {0};
        if (hr_fwd_state_get(e->fwd, r->seq_id, r->len, s->data, &err)) {
            hr_log(HR_LOG_WARN, "prompt cache: %s", err.msg);
            free(s->data);
            s->data = NULL;
            continue;
        }
        s->pos = r->len;
    }
}

/* Retire every request whose row ended it. */
static void retire_finished(hr_engine *e) {
    for (int i = e->n_running - 1; i >= 0; i--) {
        switch (e->running[i]->outcome) {
        case HR_ROW_FAILED:
            retire(e, i, HR_FINISH_ERROR, "constrained decoding failed");
            break;
        case HR_ROW_EOS:
        case HR_ROW_COMPLETE:
            retire(e, i, HR_FINISH_STOP, NULL);
            break;
        case HR_ROW_LIMIT:
            retire(e, i, HR_FINISH_LENGTH, NULL);
            break;
        case HR_ROW_NONE:
        case HR_ROW_CONTINUE:
            break;
        }
    }
}

/* A prompt whose prefill just completed: its whole blocks go to the prompt
 * cache now, not only when the request ends, so requests admitted while it
 * runs (the other choices of an n > 1 request, concurrent requests with
 * the same prefix) reuse them. Whole blocks only: they are never written
 * again (the not-full tail is, by the decode). Not for a sequence whose
 * RoPE may change on the way (longrope: rewritten in place). */
static void cache_prompt(hr_engine *e, const hr_request *r) {
    int n = r->n_prompt / HR_KV_BLOCK * HR_KV_BLOCK;
    if (n == 0 || hr_rope_needs_recompute(&e->m->hp, r->n_prompt, r->n_prompt + r->limit))
        return;
    const int32_t *key = r->key ? r->key : r->prompt;
    if (r->conv && r->conv_exact && e->pcq) /* converted: its quantized blocks */
        hr_pcache_insert(e->pcq, hr__qseed(e, r->cache_seed), key, n, r->blocks);
    else if (!r->conv && e->pcache)
        hr_pcache_insert(e->pcache, r->cache_seed, key, n, r->blocks);
}

/* The step's forward over its T tokens (hr__build_batch's), then the
 * prefix cache's and the SSD run's bookkeeping and the positions
 * advanced. false when the step ends here (the forward failed, or a block
 * read back failed its checks: the step is dropped). */
static bool forward(hr_engine *e, int T, int n_prefill, int n_decode) {
    hr_batch b = {.n_tokens = T, .token = e->b_tok, .pos = e->b_pos, .seq = e->b_seq,
                  .logits = e->b_want, .n_seqs = e->n_running, .seqs = e->b_seqs,
                  .adapter = e->b_adapter};
    if (e->kvq.n_blocks) { /* sequences converted into the quantized pool */
        b.kv2 = &e->kvq;
        b.kv2_from = e->b_kv2_from;
    }
    if (e->resid) { /* the residual windows' rows */
        hr__resid_alloc(e, T);
        b.resid_kv = &e->kvr;
        b.rtables = e->b_rtables;
        b.resid = e->resid;
    }
    if (e->b_has_img) { /* image rows and spans (CPU only: the request was refused elsewhere) */
        b.embd = e->b_embd;
        b.embd_row = e->b_embd_row;
        b.attn_end = e->b_end;
    }
    if (e->b_has_rope) /* M-RoPE rows with positions of their own (their images) */
        b.rope_pos = e->b_rope;
    hr_error err = {0};
    double t0 = hr_now();
    int width = hr__readback_narrow(e);
    int rc = hr_forward_out(e->fwd, &e->kv, &b, e->logits, e->hidden, &err);
    hr__readback_widen(e, width);
    /* a run of blocks read back meanwhile: checked now, the step dropped
     * when one it read failed (its requests cut back to compute it again) */
    bool drop = hr__readback_settle(e, true);
    double dt = hr_now() - t0;
    if (n_prefill) {
        atomic_fetch_add(&e->st_prefill_tok, n_prefill);
        atomic_store(&e->st_prefill_s, atomic_load(&e->st_prefill_s) + dt);
    } else {
        atomic_fetch_add(&e->st_decode_tok, n_decode);
        atomic_store(&e->st_decode_s, atomic_load(&e->st_decode_s) + dt);
        hr_spec_cost_step(&e->spec_cost, T, dt);
    }
    if (rc) { /* a malformed batch is our bug; end these requests, keep serving */
        hr_log(HR_LOG_ERROR, "forward failed: %s", err.msg);
        if (e->m->be->lost && !atomic_load(&e->dead)) { /* nothing will run again */
            snprintf(e->dead_msg, sizeof e->dead_msg, "%s", err.msg);
            atomic_store(&e->dead, true);
        }
        while (e->n_running)
            retire(e, 0, HR_FINISH_ERROR, err.msg);
        return false;
    }
    if (drop) {
        hr__readback_drop(e);
        return false;
    }
    int d = e->m->hp.d_model;
    for (int t = 0, j = 0; t < T; t++) /* embed requests' hidden states */
        if (e->b_want[t] == 2) {
            hr_request *r = e->running[e->b_seq[t]];
            memcpy(r->hidden + (size_t)e->b_pos[t] * d, e->hidden + (size_t)j++ * d,
                   (size_t)d * sizeof *e->hidden);
        }
    for (int t = 0; t < T; t++) { /* advance positions */
        hr_request *r = e->running[e->b_seq[t]];
        if (++r->len == r->n_prompt && !r->hidden) /* embeddings never use the cache */
            cache_prompt(e, r);
    }
    if (e->draft && n_prefill && hr_spec_draft_follow(e->draft, e->running, e->n_running, &err))
        hr_log(HR_LOG_ERROR, "%s", err.msg); /* no drafts until it catches up */

    return true;
}

static void step(hr_engine *e) {
    /* sequences that hold kv_start tokens or more (the last step, or a
     * prompt cache hit) convert before the step's batch is built */
    for (int s = 0; e->kvq.n_blocks && s < e->n_running; s++) {
        hr_error err = {0};
        if (e->running[s]->conv || e->running[s]->len < e->kv_start)
            continue;
        if (hr__readback_settle(e, true)) { /* it reads its blocks: a cut, look again */
            s = -1;
            continue;
        }
        if (hr__convert(e, e->running[s], &err)) {
            hr_log(HR_LOG_ERROR, "converting a sequence's KV failed: %s", err.msg);
            retire(e, s--, HR_FINISH_ERROR, err.msg); /* the last one moved to s */
        }
    }
    hr__spec_propose(e);
    int n_prefill, n_decode, T = hr__build_batch(e, &n_prefill, &n_decode);
    if (T == 0) {
        /* (a run read back: checked before a first token from cached
         * logits goes out, so that its request's next step has its KV) */
        hr__readback_settle(e, true);
        if (!hr__first_rows(e, false))
            return;
    } else if (!forward(e, T, n_prefill, n_decode)) {
        return;
    }
    take_snapshots(e);
    for (int s = 0; s < e->n_running; s++)
        atomic_store(&e->running[s]->progress, e->running[s]->len);
    hr__keep_logits(e);
    hr__first_rows(e, true);
    hr__sample_rows(e);
    for (int k = 0; k < e->n_rows;) {
        hr_request *r = e->b_row_req[k];
        if (e->b_row_score[k] >= 0) { /* scored in hr__sample_rows */
            k++;
            continue;
        }
        int n = 1;
        while (k + n < e->n_rows && !e->b_first[k + n])
            n++;
        r->outcome = n > 1 ? (hr_row_outcome)hr__spec_commit(e, k, n) : hr__commit_row(e, k);
        k += n;
    }
    for (int s = 0; s < e->n_running; s++) { /* scored, nothing to generate: done */
        hr_request *r = e->running[s];
        hr__resid_trim(e, r, false);
        if (r->embed && r->len == r->n_prompt)
            r->outcome = HR_ROW_COMPLETE;
        else if (r->limit == 0 && r->len == r->n_prompt)
            r->outcome = HR_ROW_LIMIT;
    }
    retire_finished(e);
}

static void *engine_main(void *arg) {
    hr_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->inbox && !e->waiting && e->n_running == 0 && !e->ssd && !e->ssdq)
            pthread_cond_wait(&e->cv, &e->mu);
        if (e->inbox) {
            if (e->waiting_tail)
                e->waiting_tail->next = e->inbox;
            else
                e->waiting = e->inbox;
            e->waiting_tail = e->inbox_tail;
            e->inbox = e->inbox_tail = NULL;
        }
        bool stop = e->stop;
        if (!stop && !e->inbox && !e->waiting && e->n_running == 0 && (e->ssd || e->ssdq)) {
            /* idle: wake up now and then to demote idle cache entries */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        }
        pthread_mutex_unlock(&e->mu);
        if (stop)
            break;
        for (int i = e->n_running - 1; i >= 0; i--)
            if (atomic_load(&e->running[i]->cancel))
                retire(e, i, HR_FINISH_CANCELLED, NULL);
        hr__ssd_poll(e, hr_now());
        admit(e);
        /* a lookup that ended a run in flight (its block wanted at once) */
        hr__readback_settle(e, !e->n_running);
        if (e->n_running)
            step(e);
        int held = 0;
        for (int i = 0; i < e->n_running; i++)
            held += e->running[i]->n_blocks;
        atomic_store(&e->st_kv_free, e->kv.n_free);
        atomic_store(&e->st_kvq_free, e->kvq.n_free);
        atomic_store(&e->st_kv_requests, held);
        atomic_store(&e->st_kv_cached, e->pcache ? hr_pcache_blocks(e->pcache) : 0);
        atomic_store(&e->st_kvq_cached, e->pcq ? hr_pcache_blocks(e->pcq) : 0);
    }
    while (e->n_running)
        retire(e, 0, HR_FINISH_CANCELLED, "the server is shutting down");
    while (e->waiting) {
        hr_request *r = e->waiting;
        e->waiting = r->next;
        end_waiting(e, r, HR_FINISH_CANCELLED, "the server is shutting down");
    }
    return NULL;
}

/* hr_engine_opts.warmup (before the engine thread starts): a token
 * through the model and one through the draft model (hr_fwd_warm). A
 * failure only costs the first request its first touches. */
static void warm_up(hr_engine *e) {
    hr_error err = {0};
    double t0 = hr_now();
    if (hr_fwd_warm(e->fwd, &e->kv, ++e->next_seq_id, e->logits, e->hidden, &err) ||
        (e->draft && hr_spec_draft_warm(e->draft, ++e->next_seq_id, &err)))
        hr_log(HR_LOG_WARN, "warm-up: %s", err.msg);
    else
        hr_log(HR_LOG_INFO, "warm-up: one token in %.1f ms%s", (hr_now() - t0) * 1e3,
               e->draft ? " (and one through the draft model)" : "");
}

int hr_engine_new(hr_engine **out, const hr_model *m, const hr_engine_opts *o,
                  hr_error *err) {
    *out = NULL;
    hr_engine *e = calloc(1, sizeof *e);
    if (!e)
        return hr_err(err, HR_ENOMEM, "out of memory");
    e->m = m;
    e->max_batch = o && o->max_batch > 0 ? o->max_batch : 8;
    int cap = m->hp.ctx_max;
    e->n_ctx = o && o->n_ctx > 0 ? o->n_ctx : (cap < 8192 ? cap : 8192);
    if (e->n_ctx > cap)
        e->n_ctx = cap;
    /* a GPU takes mlx_lm.server's 2048 (a step of many prompts' tokens is
     * cheap there; on 2 CPU cores it would hold the running rows' tokens) */
    e->chunk = o && o->prefill_chunk > 0 ? o->prefill_chunk : m->be->device_mem ? 2048 : 512;
    e->max_draft = o && o->max_draft > 0 && o->max_draft < HR_SPEC_MAX_K ? o->max_draft
                                                                          : HR_SPEC_MAX_K;
    e->max_rows = e->max_batch * (1 + e->max_draft);
    e->max_tokens_step = e->chunk + e->max_rows;
    hr_kv_fmt kvf = {.dtype = o ? o->kv_dtype : HR_DTYPE_F32, .vown = o && o->kv_vown,
                     .vdtype = o ? o->kv_dtype_v : HR_DTYPE_F32};
    hr_kv_fmt qf = {.dtype = HR_DTYPE_AFFINE, .bits = o ? o->kv_bits : 0,
                    .group = o ? o->kv_group : 0};
    /* a second pool to convert into: a start a sequence can reach (a
     * scored prompt may fill the context) */
    bool two = o && o->kv_bits > 0 && o->kv_start > 0 && o->kv_start <= e->n_ctx;
    if (o && o->kv_bits > 0 && o->kv_start == 0)
        kvf = qf;
    if (o && o->kv_turbo_k > 0)
        kvf = (hr_kv_fmt){.dtype = HR_DTYPE_TURBO, .bits = o->kv_turbo_k,
                          .vbits = o->kv_turbo_v ? o->kv_turbo_v : o->kv_turbo_k};
    size_t bb = hr_kv_fmt_block_bytes(&m->hp, &kvf);
    /* two pools: the budget split as max_batch full-context sequences need
     * it (kv_blocks_for, kvq_blocks_for), bb the bytes of one block of each */
    int nu = hr__blocks_for(e->n_ctx), nq = 0;
    if (two) {
        int u = unconverted_max(e, o->kv_start);
        nu = hr__blocks_for(e->n_ctx < u ? e->n_ctx : u);
        nq = hr__blocks_for(e->n_ctx);
    }
    size_t bq = two ? hr_kv_fmt_block_bytes(&m->hp, &qf) : 0;
    size_t per = nu * bb + nq * bq; /* one sequence's bytes */
    size_t budget = o && o->kv_bytes ? o->kv_bytes : (size_t)e->max_batch * per;
    if (!(o && o->kv_bytes) && m->be->device_mem) {
        /* a GPU's pool takes 90% of what the weights left, less 2 GiB for
         * the forward scratch and the runtime (as vLLM's memory fraction) */
        size_t fr = 0, tot = 0;
        m->be->ops->mem_info(m->be, &fr, &tot);
        budget = fr > ((size_t)2 << 30) ? (fr - ((size_t)2 << 30)) / 10 * 9 : 0;
    } else if (!(o && o->kv_bytes) && budget > ((size_t)4 << 30)) {
        budget = (size_t)4 << 30;
    }
    /* budget * nu / per blocks of e->kv (one pool: budget / bb) and budget *
     * nq / per of e->kvq */
    int n_blocks = (int)(budget / per * nu + budget % per * nu / per);
    int q_blocks = (int)(budget / per * nq + budget % per * nq / per);
    /* the prompt cache, unless RoPE depends on the sequence length (a block's
     * KV would then differ between requests of different lengths) */
    e->len_rope = m->hp.rope.type == HR_ROPE_DYNAMIC || m->hp.rope.type == HR_ROPE_LONGROPE ||
                  (m->hp.has_rope_local && (m->hp.rope_local.type == HR_ROPE_DYNAMIC ||
                                            m->hp.rope_local.type == HR_ROPE_LONGROPE));
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    int rc;
    if (n_blocks < 1 || (two && q_blocks < 1)) {
        rc = hr_err(err, HR_EINVAL, "the KV budget holds no block (a block is %zu KiB)",
                    bb >> 10);
        goto fail;
    }
    e->kv_start = two ? o->kv_start : 0;
    if ((rc = hr_kv_init_fmt(&e->kv, m->be, &m->hp, &kvf, n_blocks, err)) ||
        (two && (rc = hr_kv_init_fmt(&e->kvq, m->be, &m->hp, &qf, q_blocks, err))) ||
        (rc = hr_fwd_new(&e->fwd, m, e->max_tokens_step, e->max_batch, e->n_ctx,
                         o ? o->n_threads : 0, err)))
        goto fail;
    if (o && o->kv_residual &&
        (rc = hr__resid_init(e, o, two ? &qf : &kvf, err)))
        goto fail;
    /* rows: every running request's last token and drafts; scoring rows
     * come on top (their logits when the first scoring request comes) */
    e->rows_base = e->max_rows;
    int T = e->max_tokens_step, B = e->max_batch, R = e->max_rows + SCORE_ROWS;
    e->running = calloc((size_t)B, sizeof *e->running);
    e->b_tok = malloc((size_t)T * sizeof *e->b_tok);
    e->b_pos = malloc((size_t)T * sizeof *e->b_pos);
    e->b_seq = malloc((size_t)T * sizeof *e->b_seq);
    e->b_want = malloc((size_t)T);
    e->b_seqs = malloc((size_t)B * sizeof *e->b_seqs);
    e->b_rtables = calloc((size_t)B, sizeof *e->b_rtables);
    e->b_adapter = calloc((size_t)B, sizeof *e->b_adapter);
    e->b_row_req = malloc((size_t)R * sizeof *e->b_row_req);
    e->b_row_score = malloc((size_t)R * sizeof *e->b_row_score);
    e->b_step = malloc((size_t)R * sizeof *e->b_step);
    e->b_first = malloc((size_t)R);
    e->logits = malloc((size_t)e->rows_base * m->hp.n_vocab * sizeof *e->logits);
    e->hidden = malloc((size_t)T * m->hp.d_model * sizeof *e->hidden);
    e->tokbuf_spec = malloc((size_t)e->n_ctx * sizeof *e->tokbuf_spec);
    e->conv_rows = malloc(((size_t)e->n_ctx / HR_KV_BLOCK + 1) * sizeof *e->conv_rows);
    if (m->mm || m->mm_qwen || m->mm_audio) { /* image (audio) rows and spans of a step */
        e->b_embd = malloc((size_t)T * m->hp.d_model * sizeof *e->b_embd);
        e->b_embd_row = malloc((size_t)T * sizeof *e->b_embd_row);
        e->b_end = malloc((size_t)T * sizeof *e->b_end);
        if (!e->b_embd || !e->b_embd_row || !e->b_end) {
            rc = hr_err(err, HR_ENOMEM, "out of memory");
            goto fail;
        }
    }
    if (m->mm_qwen && !(e->b_rope = malloc((size_t)T * 3 * sizeof *e->b_rope))) {
        rc = hr_err(err, HR_ENOMEM, "out of memory"); /* M-RoPE positions of a step */
        goto fail;
    }
    if (!e->running || !e->b_tok || !e->b_pos || !e->b_seq || !e->b_want || !e->b_seqs ||
        !e->b_rtables ||
        !e->b_adapter ||
        !e->b_row_req || !e->b_row_score || !e->b_step || !e->b_first || !e->logits || !e->hidden ||
        !e->tokbuf_spec || !e->conv_rows) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
    /* the draft's pool: what the running requests can hold at most (a
     * GPU's target pool takes most of the device) */
    int draft_blocks = B * hr__blocks_for(e->n_ctx) < n_blocks ? B * hr__blocks_for(e->n_ctx) : n_blocks;
    if (o && o->draft &&
        (rc = hr_spec_draft_new(&e->draft, o->draft, draft_blocks, B, e->chunk + B, e->n_ctx,
                                err)))
        goto fail;
    /* the prompt cache, unless RoPE depends on the sequence length (a block's
     * KV would then differ between requests of different lengths) */
    bool len_rope = e->len_rope;
    /* layers with recurrent state (gated DeltaNet, Mamba-2): the cache keeps
     * their state at block boundaries beside the KV (snap_point) */
    size_t state_bytes = hr_fwd_state_bytes(e->fwd);
    if (!(o && o->cache_blocks < 0) && !len_rope && !m->hp.arch->encoder) {
        e->state_bytes = state_bytes;
        if (o && o->ssd_dir) {
            hr_error serr = {0};
            /* a window changes the rows: "-res256" (not those of a sequence
             * before it converts: they read no window) */
            char tag[32] = "";
            if (e->resid && !e->kvq.n_blocks)
                snprintf(tag, sizeof tag, "-res%d", e->resid);
            if (hr_ssd_open_tag(&e->ssd, o->ssd_dir, m->fingerprint, o->cache_salt, &e->kv, tag,
                                state_bytes, o->ssd_max_bytes ? o->ssd_max_bytes : (size_t)32e9,
                                &serr))
                hr_log(HR_LOG_WARN, "%s; running without the SSD tier", serr.msg);
        }
        e->pcache = hr_pcache_new(&e->kv, o ? o->cache_blocks : 0, e->ssd,
                                  o ? o->ssd_demote_idle : 0);
        if (e->pcache) /* states: at most a GiB of RAM (docs/prompt-cache.md) */
            hr_pcache_keep_states(e->pcache, state_bytes, (size_t)1 << 30);
        hr__first_init(e);
        /* a run read back from the SSD tier under the step that needs it
         * (readback.c; not with residual windows, cut back by position) */
        if (e->pcache && !e->resid && hr__readback_can())
            hr_pcache_overlap(e->pcache, true);
        /* --quantized-kv-start: converted sequences' blocks in a cache of
         * their own (not for hybrid models: no states are kept for them) */
        if (e->pcache && e->kvq.n_blocks && !state_bytes) {
            if (o->ssd_dir) {
                char tag[64]; /* "-start5000-f16": where and from what they converted */
                int n = snprintf(tag, sizeof tag, "-start%d-%s%s", e->kv_start,
                                 hr_dtype_name(e->kv.dtype),
                                 e->kv.vdtype != e->kv.dtype ? "-mixed" : "");
                if (e->resid) /* "-start5000-f16-res128" */
                    snprintf(tag + n, sizeof tag - (size_t)n, "-res%d", e->resid);
                for (char *c = tag; *c; c++)
                    *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
                hr_error serr = {0};
                if (hr_ssd_open_tag(&e->ssdq, o->ssd_dir, m->fingerprint, o->cache_salt,
                                    &e->kvq, tag, 0,
                                    o->ssd_max_bytes ? o->ssd_max_bytes : (size_t)32e9, &serr))
                    hr_log(HR_LOG_WARN, "%s; the quantized blocks run without the SSD tier",
                           serr.msg);
            }
            if (!(e->pcq = hr_pcache_new(&e->kvq, o->cache_blocks, e->ssdq, o->ssd_demote_idle))) {
                rc = hr_err(err, HR_ENOMEM, "out of memory");
                goto fail;
            }
        }
        e->tokbuf = malloc((size_t)e->n_ctx * sizeof *e->tokbuf);
        if (!e->pcache || !e->tokbuf) {
            rc = hr_err(err, HR_ENOMEM, "out of memory");
            goto fail;
        }
    } else if (len_rope) {
        hr_log(HR_LOG_INFO, "prompt cache off: this model's RoPE depends on the sequence length");
    }
    if (o && o->warmup)
        warm_up(e);
    atomic_store(&e->st_kv_free, e->kv.n_free);
    atomic_store(&e->st_kvq_free, e->kvq.n_free);
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) {
        rc = hr_err(err, HR_ENOMEM, "cannot start the engine thread");
        goto fail;
    }
    e->thread_started = true;
    *out = e;
    return 0;
fail:
    hr_engine_free(e);
    return rc;
}

void hr_engine_free(hr_engine *e) {
    if (!e)
        return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true; /* the thread moves the inbox over and cancels it all */
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    hr__ssd_drain(e);
    if (e->ssd) { /* finish the writes and give their blocks back */
        hr_ssd_stop(e->ssd);
        hr_pcache_poll(e->pcache, 0);
    }
    if (e->ssdq) {
        hr_ssd_stop(e->ssdq);
        hr_pcache_poll(e->pcq, 0);
    }
    hr_pcache_free(e->pcache);
    hr_pcache_free(e->pcq);
    hr_lcache_free(e->lcache);
    hr_ssd_close(e->ssd);
    hr_ssd_close(e->ssdq);
    free(e->tokbuf);
    hr_fwd_free(e->fwd);
    hr_kv_deinit(&e->kv);
    hr_kv_deinit(&e->kvq);
    hr__resid_free(e);
    hr_kv_deinit(&e->kvr);
    free(e->conv_rows);
    free(e->running);
    free(e->b_tok);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_want);
    free(e->b_seqs);
    free(e->b_rtables);
    free(e->b_adapter);
    free(e->b_row_req);
    free(e->b_row_score);
    free(e->b_step);
    free(e->b_first);
    free(e->logits);
    free(e->hidden);
    free(e->tokbuf_spec);
    free(e->b_embd);
    free(e->b_embd_row);
    free(e->b_end);
    free(e->b_rope);
    hr__feat_cache_free(e);
    hr_spec_draft_free(e->draft);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}
