/* The engine's side of the logits cache (lcache.h): a request whose whole
 * prompt is cached with its last logits takes its first token from them
 * (the logits row appended after the step's forward rows) rather than
 * computing the prompt's last position again; a prefill that completes
 * keeps its logits there. Engine thread. */
#include "engine/engine_int.h"
#include "model/rope.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Whether r's first token may come from the logits cache, and its prompt's
 * logits go there: a generation over e->kv's prompt cache whose prompt is
 * its own tokens (no images), not scored, not converted, without a draft
 * model (the draft's KV would need the prompt computed), its RoPE fixed
 * (as the prompt cache's). */
static bool cacheable(const hr_engine *e, const hr_request *r) {
    return e->lcache && !r->embed && !r->score_from && !r->n_images && r->limit > 0 &&
           !r->conv && r->spec.mode != HR_SPEC_DRAFT &&
           !hr_rope_needs_recompute(&e->m->hp, r->n_prompt, r->n_prompt + r->limit);
}

void hr__first_init(hr_engine *e) {
    if (!e->pcache || e->state_bytes) /* hybrid: their state at the prompt's end is not kept */
        return;
    /* on disk: the logits of prompts whose KV outweighs them */
    size_t kb = hr_kv_pool_block_bytes(&e->kv), lb = (size_t)e->m->hp.n_vocab * sizeof(float);
    int ssd_min = kb ? (int)((lb * HR_KV_BLOCK + kb - 1) / kb) : 1;
    e->lcache = hr_lcache_new(e->m->hp.n_vocab, e->ssd, ssd_min); /* (NULL, no memory: none) */
}

bool hr__first_logits(hr_engine *e, hr_request *r) {
    hr__first_drop(r);
    if (!cacheable(e, r) || !(r->first = malloc((size_t)e->m->hp.n_vocab * sizeof *r->first)))
        return false;
    if (hr_lcache_get(e->lcache, r->cache_seed, r->prompt, r->n_prompt, r->first))
        return true;
    hr__first_drop(r);
    return false;
}

void hr__first_drop(hr_request *r) {
    free(r->first);
    r->first = NULL;
}

bool hr__first_rows(hr_engine *e, bool add) {
    int V = e->m->hp.n_vocab;
    bool any = false;
    for (int s = 0; s < e->n_running; s++) {
        hr_request *r = e->running[s];
        if (!r->first || e->n_rows >= e->max_rows)
            continue;
        any = true;
        if (!add)
            break;
        memcpy(e->logits + (size_t)e->n_rows * V, r->first, (size_t)V * sizeof *r->first);
        hr__first_drop(r);
        atomic_fetch_add(&e->st_logits_hits, 1); /* (used: not one cut back before) */
        e->b_first[e->n_rows] = 1;
        e->b_row_score[e->n_rows] = -1;
        e->b_row_req[e->n_rows++] = r;
    }
    return any;
}

void hr__keep_logits(hr_engine *e) {
    int V = e->m->hp.n_vocab;
    for (int k = 0; e->lcache && k < e->n_rows; k++) {
        hr_request *r = e->b_row_req[k];
        if (e->b_first[k] && e->b_row_score[k] < 0 && r->n_steps == 0 &&
            r->len == r->n_prompt && cacheable(e, r))
            hr_lcache_put(e->lcache, r->cache_seed, r->prompt, r->n_prompt,
                          e->logits + (size_t)k * V);
    }
}
