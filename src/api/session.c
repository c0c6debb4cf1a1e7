/* hr_session: the public face of the engine (src/engine/engine.h): one
 * engine thread over a model, its KV pool and prompt cache. */
#include "api/api.h"
#include "core/error.h"
#include "model/kv.h"

#include <stdlib.h>
#include <string.h>

int hr__kv_type_from_name(const char *name, int *kv, hr_error *err) {
    hr_dtype t;
    int rc = hr_kv_dtype_pick(name, false, &t, err);
    if (rc)
        return rc;
    *kv = !name || !strcasecmp(name, "auto") ? HR_KV_AUTO
          : t == HR_DTYPE_F16                ? HR_KV_F16
          : t == HR_DTYPE_BF16               ? HR_KV_BF16
                                             : HR_KV_F32;
    return 0;
}

int hr__session_engine_opts(const hr_llm *m, const hr_session_opts *o, hr_engine_opts *eo,
                            hr_error *err) {
    static const hr_session_opts none = {0};
    static const char *const names[] = {"auto", "f32", "f16", "bf16"};
    if (!o)
        o = &none;
    if (o->n_threads < 0 || o->max_batch < 0 || o->n_ctx < 0 || o->prefill_chunk < 0 ||
        o->prompt_cache_size < 0 || o->ssd_demote_idle < 0)
        return hr_err(err, HR_ERANGE, "a session option is negative");
    if (o->kv_dtype < HR_KV_AUTO || o->kv_dtype > HR_KV_BF16)
        return hr_err(err, HR_EINVAL, "kv_dtype must be one of HR_KV_AUTO, _F32, _F16, _BF16");
    hr_dtype kvt;
    int rc = hr_kv_dtype_pick(names[o->kv_dtype], m->model->gguf, &kvt, err);
    if (rc)
        return rc;
    /* the prompt cache bound in blocks: the tighter of size and bytes */
    int cache_blocks = o->prompt_cache < 0 ? -1 : 0;
    if (cache_blocks >= 0) {
        int ctx = o->n_ctx > 0 ? o->n_ctx : 8192;
        hr_kv_fmt f = {o->kv_bits ? HR_DTYPE_AFFINE : kvt, o->kv_bits,
                       o->kv_group ? o->kv_group : 64};
        size_t bb = hr_kv_fmt_block_bytes(&m->model->hp, &f);
        if (o->prompt_cache_size > 0)
            cache_blocks = o->prompt_cache_size * ((ctx + HR_KV_BLOCK - 1) / HR_KV_BLOCK);
        if (o->prompt_cache_bytes > 0) {
            int by = (int)(o->prompt_cache_bytes / bb);
            by = by < 1 ? 1 : by;
            cache_blocks = cache_blocks > 0 && cache_blocks < by ? cache_blocks : by;
        }
    }
    *eo = (hr_engine_opts){.n_threads = o->n_threads ? o->n_threads : m->n_threads,
                           .max_batch = o->max_batch, .n_ctx = o->n_ctx,
                           .kv_bytes = o->kv_bytes, .kv_dtype = kvt,
                           .kv_bits = o->kv_bits, .kv_group = o->kv_group ? o->kv_group : 64,
                           .prefill_chunk = o->prefill_chunk, .cache_blocks = cache_blocks,
                           .ssd_dir = o->ssd_dir, .ssd_max_bytes = o->ssd_max_bytes,
                           .ssd_demote_idle = o->ssd_demote_idle, .cache_salt = m->tok_hash};
    return 0;
}

int hr_session_new(hr_session **out, hr_llm *m, const hr_session_opts *opts, hr_error *err) {
    if (!out || !m)
        return hr_err(err, HR_EINVAL, "hr_session_new: NULL argument");
    *out = NULL;
    hr_engine_opts eo;
    int rc = hr__session_engine_opts(m, opts, &eo, err);
    if (rc)
        return rc;
    hr_session *s = calloc(1, sizeof *s);
    if (!s)
        return hr_err(err, HR_ENOMEM, "out of memory");
    s->llm = m;
    if ((rc = hr_engine_new(&s->engine, m->model, &eo, err))) {
        free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void hr_session_free(hr_session *s) {
    if (!s)
        return;
    hr_engine_free(s->engine);
    free(s);
}

void hr_session_stats_get(const hr_session *s, hr_session_stats *st) {
    hr_engine_stats e;
    hr_engine_stats_get(s->engine, &e);
    *st = (hr_session_stats){
        .requests_total = e.requests_total, .requests_running = e.requests_running,
        .requests_queued = e.requests_queued, .prompt_tokens = e.prompt_tokens,
        .generated_tokens = e.generated_tokens, .cached_tokens = e.cached_tokens,
        .prefill_tokens_per_s = e.prefill_tps, .decode_tokens_per_s = e.decode_tps,
        .kv_blocks_total = e.kv_blocks_total, .kv_blocks_free = e.kv_blocks_free,
        .kv_blocks_cached = e.kv_blocks_cached, .kv_bytes = e.kv_bytes,
        .n_threads = hr_engine_threads(s->engine), .max_batch = hr_engine_max_batch(s->engine),
        .n_ctx = hr_engine_ctx(s->engine)};
}
