/* hr_session: the public face of the engine (src/engine/engine.h): one
 * engine thread over a model, its KV pool and prompt cache. */
#include "api/api.h"
#include "core/error.h"
#include "model/kv.h"
#include "kernels/backend.h"

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

static const char *const kv_names[] = {"auto", "f32", "f16", "bf16", "q8_0", "q4_0"};

static int cache_type(const char *name, const char *flag, int *kv, hr_error *err) {
    hr_dtype t;
    int rc = hr_kv_cache_type_pick(name, flag, &t, err);
    for (int i = HR_KV_F32; !rc && i <= HR_KV_Q4_0; i++)
        if (!strcasecmp(name, kv_names[i]))
            *kv = i;
    return rc;
}

int hr__kv_types_from_names(const char *kvd, const char *ctk, const char *ctv, int *k, int *v,
                            hr_error *err) {
    int rc = hr__kv_type_from_name(kvd, k, err), ck, cv;
    *v = 0;
    if (rc || (!ctk && !ctv))
        return rc;
    ck = cv = *k == HR_KV_AUTO ? HR_KV_F16 : *k;
    if ((ctk && (rc = cache_type(ctk, "--cache-type-k", &ck, err))) ||
        (ctv && (rc = cache_type(ctv, "--cache-type-v", &cv, err))))
        return rc;
    *k = ck;
    *v = cv == ck ? 0 : cv;
    return 0;
}

/* HR_KV_* kv -> the pool's dtype on a model loaded from GGUF (gguf) or not */
static int kv_pick(int kv, bool gguf, hr_dtype *t, hr_error *err) {
    if (kv < HR_KV_AUTO || kv > HR_KV_Q4_0)
        return hr_err(err, HR_EINVAL, "kv_dtype must be one of HR_KV_AUTO, _F32, _F16, _BF16, "
                      "_Q8_0, _Q4_0");
    return kv <= HR_KV_BF16 ? hr_kv_dtype_pick(kv_names[kv], gguf, t, err)
                            : hr_kv_cache_type_pick(kv_names[kv], "kv_dtype", t, err);
}

int hr__session_engine_opts(const hr_llm *m, const hr_session_opts *o, hr_engine_opts *eo,
                            hr_error *err) {
    static const hr_session_opts none = {0};
    if (!o)
        o = &none;
    if (o->n_threads < 0 || o->max_batch < 0 || o->n_ctx < 0 || o->prefill_chunk < 0 ||
        o->prompt_cache_size < 0 || o->ssd_demote_idle < 0 || o->quantized_kv_start < 0)
        return hr_err(err, HR_ERANGE, "a session option is negative");
    if (o->kv_residual < 0)
        return hr_err(err, HR_ERANGE, "--kv-residual %d: 0 (off) or a multiple of %d tokens",
                      o->kv_residual, HR_KV_BLOCK);
    hr_dtype kvt, kvv;
    int rc;
    if ((rc = kv_pick(o->kv_dtype, m->model->gguf, &kvt, err)) ||
        (rc = kv_pick(o->kv_dtype_v ? o->kv_dtype_v : o->kv_dtype, m->model->gguf, &kvv, err)))
        return rc;
    if (o->kv_bits && (kvv != kvt || kvt == HR_DTYPE_Q8_0 || kvt == HR_DTYPE_Q4_0))
        return hr_err(err, HR_EINVAL, "--kv-bits and --cache-type-k/-v q8_0, q4_0 or K and V "
                      "apart: pick one");
    int tk, tv;
    if ((rc = hr_kv_quant_parse(o->kv_quant, &tk, &tv, err)))
        return rc;
    if (tk && (o->kv_bits || o->kv_dtype_v || o->kv_dtype > HR_KV_BF16))
        return hr_err(err, HR_EINVAL, "--kv-quant and --kv-bits or --cache-type-k/-v: "
                      "pick one");
    /* the prompt cache bound in blocks: the tighter of size and bytes */
    int cache_blocks = o->prompt_cache < 0 ? -1 : 0;
    if (cache_blocks >= 0) {
        int ctx = o->n_ctx > 0 ? o->n_ctx : 8192;
        /* the prompt cache's pool: the quantized one from the first token,
         * else the one sequences start in (docs/kv-quant.md) */
        hr_kv_fmt f = {.dtype = o->kv_bits && !o->quantized_kv_start ? HR_DTYPE_AFFINE : kvt, .bits = o->kv_bits,
                       .group = o->kv_group ? o->kv_group : 64, .vown = kvv != kvt,
                       .vdtype = kvv};
        if (tk)
            f = (hr_kv_fmt){.dtype = HR_DTYPE_TURBO, .bits = tk, .vbits = tv};
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
                           .kv_vown = kvv != kvt, .kv_dtype_v = kvv,
                           .kv_bits = o->kv_bits, .kv_group = o->kv_group ? o->kv_group : 64,
                           .kv_start = o->quantized_kv_start,
                           .kv_turbo_k = tk, .kv_turbo_v = tv,
                           .kv_residual = o->kv_residual,
                           .prefill_chunk = o->prefill_chunk, .cache_blocks = cache_blocks,
                           .ssd_dir = o->ssd_dir, .ssd_max_bytes = o->ssd_max_bytes,
                           .ssd_demote_idle = o->ssd_demote_idle, .cache_salt = m->tok_hash,
                           .warmup = o->warmup != 0};
    return 0;
}

/* The draft model beside m, on m's device, with m's tokenizer. */
static int load_draft(hr_session *s, const char *path, hr_error *err) {
    hr_llm *m = s->llm;
    int rc;
    if (!(s->draft_path = strdup(path)))
        return hr_err(err, HR_ENOMEM, "out of memory");
    if ((rc = hr_model_open_on(&s->draft, path, m->model->be->name, err)))
        return hr_err_wrap(err, "--draft-model");
    if (s->draft->hp.n_linear > 0) /* its drafts roll back and restart (spec_draft.h) */
        return hr_err(err, HR_EUNSUPPORTED, "--draft-model: not supported yet: a draft model "
                      "with recurrent layers (%s: its state cannot roll back)",
                      s->draft->hp.arch->model_type);
    if (m->tok) {
        hr_tokenizer *dt = NULL;
        if ((rc = hr_tokenizer_load(&dt, path, err)))
            return hr_err_wrap(err, "--draft-model: its tokenizer");
        rc = hr__spec_check_tokenizers(m->tok, dt, err);
        hr_tokenizer_free(dt);
        if (rc)
            return rc;
    } else if (s->draft->hp.n_vocab != m->model->hp.n_vocab) {
        return hr_err(err, HR_EINVAL, "the draft model has %d tokens, the model %d",
                      s->draft->hp.n_vocab, m->model->hp.n_vocab);
    }
    return 0;
}

int hr__session_spec(const hr_session *s, const char *spec, int num_draft,
                     const char *draft_model, hr_spec_mode *mode, int *k, hr_error *err) {
    int md = s->spec, rc;
    if (draft_model && strcmp(draft_model, "default_model") &&
        !(s->draft_path && !strcmp(draft_model, s->draft_path)))
        return s->draft_path
                   ? hr_err(err, HR_EUNSUPPORTED, "draft_model: not supported yet: a draft "
                            "model other than the one loaded (%s)", s->draft_path)
                   : hr_err(err, HR_EUNSUPPORTED, "draft_model: not supported yet: loading a "
                            "draft model per request (start with --draft-model PATH)");
    if (draft_model && s->draft)
        md = HR_SPEC_DRAFT;
    if (spec && (rc = hr__spec_mode_parse(spec, "spec", &md, err)))
        return rc;
    if (md == HR_SPEC_DRAFT && !s->draft)
        return hr_err(err, HR_EINVAL, "spec: draft needs a draft model (--draft-model PATH)");
    if (num_draft < -1 || num_draft > HR_SPEC_MAX_K)
        return hr_err(err, HR_ERANGE, "num_draft_tokens must be in [0, %d]", HR_SPEC_MAX_K);
    *k = num_draft >= 0 ? num_draft : s->num_draft;
    *mode = *k > 0 ? (hr_spec_mode)md : HR_SPEC_OFF;
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
    if (opts && (opts->num_draft_tokens < 0 || opts->num_draft_tokens > HR_SPEC_MAX_K))
        return hr_err(err, HR_ERANGE, "--num-draft-tokens must be in [1, %d]", HR_SPEC_MAX_K);
    hr_session *s = calloc(1, sizeof *s);
    if (!s)
        return hr_err(err, HR_ENOMEM, "out of memory");
    s->llm = m;
    s->num_draft = opts && opts->num_draft_tokens ? opts->num_draft_tokens : 3;
    s->spec = opts && opts->draft_model ? HR_SPEC_DRAFT : HR_SPEC_OFF;
    if (opts && opts->spec && (rc = hr__spec_mode_parse(opts->spec, "--spec", &s->spec, err)))
        goto fail;
    if (s->spec == HR_SPEC_DRAFT && !(opts && opts->draft_model)) {
        rc = hr_err(err, HR_EINVAL, "--spec draft needs --draft-model PATH");
        goto fail;
    }
    if (opts && opts->draft_model && (rc = load_draft(s, opts->draft_model, err)))
        goto fail;
    if ((rc = hr__session_adapters_init(s, opts, err)))
        goto fail;
    eo.draft = s->draft;
    if ((rc = hr_engine_new(&s->engine, m->model, &eo, err)))
        goto fail;
    *out = s;
    return 0;
fail:
    hr_session_free(s);
    return rc;
}

void hr_session_free(hr_session *s) {
    if (!s)
        return;
    hr_engine_free(s->engine);
    hr__session_adapters_free(s);
    hr_model_free(s->draft);
    free(s->draft_path);
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
        .n_ctx = hr_engine_ctx(s->engine), .spec_drafted = e.spec_drafted,
        .spec_accepted = e.spec_accepted};
}
