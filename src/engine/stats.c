/* hr_engine_stats_get (engine.h): the engine's counters, read from any
 * thread (atomics, the pools' sizes and the SSD tiers' own counts). */
#include "engine/engine_int.h"
#include "engine/ssd.h"

#include <stdatomic.h>
#include <string.h>

void hr_engine_stats_get(const hr_engine *e, hr_engine_stats *s) {
    hr_engine *m = (hr_engine *)e; /* atomics only */
    s->requests_total = atomic_load(&m->st_total);
    s->dead = atomic_load(&m->dead) ? m->dead_msg : NULL;
    s->requests_running = atomic_load(&m->st_running);
    s->requests_queued = atomic_load(&m->st_queued);
    s->requests_finished = atomic_load(&m->st_finished);
    s->prompt_tokens = atomic_load(&m->st_prompt);
    s->generated_tokens = atomic_load(&m->st_gen);
    double ps = atomic_load(&m->st_prefill_s), ds = atomic_load(&m->st_decode_s);
    s->prefill_tps = ps > 0 ? atomic_load(&m->st_prefill_tok) / ps : 0;
    s->decode_tps = ds > 0 ? atomic_load(&m->st_decode_tok) / ds : 0;
    s->kv_blocks_total = e->kv.n_blocks;
    s->kv_blocks_free = atomic_load(&m->st_kv_free);
    s->kv_blocks_requests = atomic_load(&m->st_kv_requests);
    s->kv_blocks_cached = atomic_load(&m->st_kv_cached);
    s->cached_tokens = atomic_load(&m->st_cached_tokens);
    s->spec_drafted = atomic_load(&m->st_drafted);
    s->spec_accepted = atomic_load(&m->st_accepted);
    s->spec_draft_model = e->draft != NULL;
    s->ssd = e->ssd != NULL;
    s->ssd_written = s->ssd_hits = s->ssd_quarantined = 0;
    s->ssd_bytes_written = s->ssd_bytes_read = 0;
    s->ssd_write_errors = s->ssd_read_errors = s->ssd_direct_reads = 0;
    s->ssd_last_error = NULL;
    s->ssd_paused = false;
    for (int t = 0; t < 2; t++) { /* the two pools' tiers, summed */
        const hr_ssd *d = t ? e->ssdq : e->ssd;
        if (!d)
            continue;
        long w, h, q;
        long long bw, br;
        hr_ssd_counts(d, &w, &h, &q);
        hr_ssd_bytes(d, &bw, &br);
        s->ssd_written += w;
        s->ssd_hits += h;
        s->ssd_quarantined += q;
        s->ssd_bytes_written += bw;
        s->ssd_bytes_read += br;
        hr_ssd_state ss;
        hr_ssd_status(d, &ss);
        s->ssd_write_errors += ss.write_errors;
        s->ssd_read_errors += ss.read_errors;
        s->ssd_direct_reads += ss.direct_reads;
        if (ss.last_errno)
            s->ssd_last_error = strerror(ss.last_errno);
        s->ssd_paused |= ss.paused;
    }
    s->cache_lookups = atomic_load(&m->st_lookups);
    s->cache_hits = atomic_load(&m->st_lookup_hits);
    s->cache_logits_hits = atomic_load(&m->st_logits_hits);
    s->images_encoded = atomic_load(&m->st_img_encoded);
    s->images_cached = atomic_load(&m->st_img_cached);
    s->cache_misses = s->cache_lookups - s->cache_hits;
    s->cache_miss_tokens = atomic_load(&m->st_miss_tokens);
    s->kv_bytes = (size_t)e->kv.n_blocks * hr_kv_pool_block_bytes(&e->kv);
    s->kvq_blocks_total = e->kvq.n_blocks;
    s->kvq_blocks_free = atomic_load(&m->st_kvq_free);
    s->kvq_blocks_cached = atomic_load(&m->st_kvq_cached);
    s->kvq_bytes = (size_t)e->kvq.n_blocks * hr_kv_pool_block_bytes(&e->kvq);
    s->kvr_tokens = e->resid;
    s->kvr_bytes = (size_t)e->kvr.n_blocks * hr_kv_pool_block_bytes(&e->kvr);
    s->kv_bytes += s->kvq_bytes + s->kvr_bytes;
}
