/* A run of prompt cache blocks read back from the SSD tier in the
 * background (pcache.h hr_pcache_overlap, engine_int.h): the step that
 * reads them is computed while they come in, the forward waiting for each
 * layer of them (model/kv.h's gate), and they are checked after it. A block
 * that fails its checks then (a file damaged on disk) is a miss found late:
 * the requests that got it compute it again, and the step computed over it
 * is dropped. */
#include "engine/engine_int.h"
#include "engine/pcache.h"
#include "core/log.h"
#include "core/pool.h"
#include "model/forward.h"

#include <sched.h>

/* r's first block among failed[0..nf) within what it holds computed: its
 * index, or -1. */
static int first_failed(const hr_request *r, const int32_t *failed, int nf) {
    for (int b = 0; b < r->n_blocks && b * HR_KV_BLOCK < r->len; b++)
        for (int i = 0; i < nf; i++)
            if (r->blocks[b] == failed[i])
                return b;
    return -1;
}

/* r computes again from block b: its length cut back there, and every
 * block from b on that somebody else holds too (the cache, or a request of
 * the same prefix) replaced by a fresh one, which it writes. false when no
 * block is free for it. */
static bool cut_back(hr_engine *e, hr_request *r, int b) {
    for (int i = b; i < r->n_blocks; i++) {
        if (e->kv.refs[r->blocks[i]] == 1)
            continue;
        if (e->kv.n_free == 0)
            hr_pcache_evict(e->pcache, 1);
        int32_t fresh = hr_kv_alloc(&e->kv);
        if (fresh < 0)
            return false;
        hr_kv_unref(&e->kv, r->blocks[i]);
        r->blocks[i] = fresh;
    }
    int len = b * HR_KV_BLOCK;
    hr__first_drop(r); /* (its prompt's end computed again gives them: sampled once) */
    atomic_fetch_sub(&e->st_cached_tokens, r->len - len);
    pthread_mutex_lock(&r->mu);
    r->cached = len;
    pthread_mutex_unlock(&r->mu);
    r->len = len;
    return true;
}

bool hr__readback_settle(hr_engine *e, bool wait) {
    if (!e->pcache)
        return false;
    if (wait)
        hr_pcache_settle(e->pcache);
    const int32_t *failed;
    int nf = hr_pcache_failed(e->pcache, &failed);
    bool cut = false;
    for (int s = 0; nf && s < e->n_running; s++) {
        hr_request *r = e->running[s];
        int b = r->conv ? -1 : first_failed(r, failed, nf); /* (converted: other blocks) */
        if (b < 0)
            continue;
        cut = true;
        hr_log(HR_LOG_INFO, "prompt cache: a block read back from disk failed its checks; "
                            "computing the prompt again from token %d",
               b * HR_KV_BLOCK);
        if (!cut_back(e, r, b))
            hr__retire(e, s--, HR_FINISH_ERROR,
                       "out of KV cache memory to compute again a prompt cache block that "
                       "failed its checks");
    }
    return cut;
}

void hr__readback_drop(hr_engine *e) {
    for (int s = 0; s < e->n_running; s++) {
        hr_spec_state *sp = &e->running[s]->spec;
        int len = e->running[s]->len;
        /* the draft's KV holds what was committed, not the drafts fed */
        if (sp->dbase > len)
            sp->dbase = sp->dlen = 0;
        else if (sp->dbase + sp->dlen > len)
            sp->dlen = len - sp->dbase;
        sp->n_draft = 0;
    }
}

/* Cores this process may run on. */
static int cores(void) {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

bool hr__readback_can(void) { return cores() >= 2; }

int hr__readback_narrow(hr_engine *e) {
    hr_pool *pool = hr_fwd_pool(e->fwd);
    int n = hr_pool_size(pool);
    if (!e->pcache || !hr_pcache_reading(e->pcache) || n < 2 || n < cores())
        return 0;
    return hr_pool_narrow(pool, n - 1);
}

void hr__readback_widen(hr_engine *e, int width) {
    if (width)
        hr_pool_narrow(hr_fwd_pool(e->fwd), width);
}
