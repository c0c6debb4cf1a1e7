/* Sequences converted into the quantized pool (--quantized-kv-start N):
 * their conversion at N tokens, and a request admitted converted on the
 * blocks a converted sequence left in the quantized prompt cache
 * (docs/kv-quant.md, "When a sequence is quantized"). */
#include "engine/engine_int.h"
#include "core/error.h"
#include "model/forward.h"
#include "model/kv.h"

#include <xxhash.h>

uint64_t hr__qseed(const hr_engine *e, uint64_t seed) {
    uint64_t tag[3] = {seed, (uint64_t)e->kv_start,
                       (uint64_t)e->kv.dtype | (uint64_t)e->kv.vdtype << 8};
    return XXH3_64bits(tag, sizeof tag);
}

int hr__admit_converted(hr_engine *e, hr_request *r, int upto, int *hit, int *len) {
    if (!e->pcq || r->embed || upto < e->kv_start)
        return 0;
    int qtotal = hr__blocks_for(r->n_prompt + r->limit);
    *hit = hr_pcache_lookup(e->pcq, hr__qseed(e, r->cache_seed), r->key ? r->key : r->prompt,
                            upto, r->n_prompt, qtotal, r->blocks, len);
    if (*len >= e->kv_start) /* its window's rows: kept, or computed again from its start */
        hr__resid_cut_hit(e, r, &e->kvq, hit, len);
    bool use = *len >= e->kv_start; /* (a cut before the start: the unquantized cache's) */
    if (use && hr__kvq_spare(e) < qtotal - *hit)
        hr_pcache_evict(e->pcq, qtotal - *hit - hr__kvq_spare(e));
    if (!use || hr__kvq_spare(e) < qtotal - *hit) {
        /* (a copy the lookup made may have taken a promised block: given
         * back here) */
        for (int b = 0; b < *hit; b++)
            hr_kv_unref(&e->kvq, r->blocks[b]);
        hr__resid_trim(e, r, true); /* a kept window's rows copied for it */
        *hit = *len = 0;
        return use ? -1 : 0; /* a hit without room waits (it needs less than unconverted) */
    }
    r->n_blocks = *hit;
    while (r->n_blocks < qtotal)
        r->blocks[r->n_blocks++] = hr_kv_alloc(&e->kvq);
    r->conv = r->conv_exact = true;
    r->len = *len;
    return 1;
}

int hr__convert(hr_engine *e, hr_request *r, hr_error *err) {
    HR_ASSERT(!r->conv && r->q_need >= hr__blocks_for(r->len) && r->len > 0);
    int keep = r->len < e->kv_start ? r->len : e->kv_start;
    if (e->pcache && !r->embed && !e->state_bytes) {
        for (int k = 0; k < keep; k++)
            e->tokbuf[k] = hr__key_at(r, k);
        hr_pcache_insert(e->pcache, r->cache_seed, e->tokbuf, keep, r->blocks);
    }
    int n = hr__blocks_for(r->len);
    for (int i = 0; i < n; i++)
        e->conv_rows[i] = i < n - 1 ? HR_KV_BLOCK : r->len - (n - 1) * HR_KV_BLOCK;
    int rc = hr_kv_convert(&e->kvq, &e->kv, r->blocks, e->conv_rows, n, r->blocks, err);
    if (rc) {
        HR_ASSERT(rc != HR_ENOMEM || e->m->be->device_mem); /* q_need blocks were promised */
        return rc;
    }
    for (int b = n; b < r->n_blocks; b++)
        hr_kv_unref(&e->kv, r->blocks[b]);
    for (int b = n; b < r->q_need; b++)
        r->blocks[b] = hr_kv_alloc(&e->kvq);
    r->n_blocks = r->q_need;
    e->kvq_promised -= r->q_need;
    r->q_need = 0;
    r->conv = true;
    r->conv_exact = r->len == e->kv_start;
    return 0;
}
