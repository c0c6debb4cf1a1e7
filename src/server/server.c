/* Server lifecycle, HTTP plumbing (bodies, size cap, CORS) and the small
 * routes: /health, /v1/models, /stats. Generation routes are in gen.c, the
 * HTTP plumbing in http.c, --isolate in isolate.c. */
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/timer.h"
#include "io/hfcache.h"
#include "model/kv.h"
#include "server/internal.h"
#include "server/isolate.h"
#include "server/ui.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#define DEFAULT_MAX_BODY ((size_t)16 << 20)

/* ---- replies ------------------------------------------------------------------ */

hr_reply hr__json_reply(unsigned status, json_t *body) {
    hr_reply r = {.status = status,
                  .body = json_dumps(body, JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII)};
    json_decref(body);
    return r;
}

hr_reply hr__error_reply(unsigned status, const char *type, const char *param,
                         const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *e = json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", msg, "type", type,
                          "param", param ? json_string(param) : json_null(), "code",
                          json_null());
    return hr__json_reply(status, e);
}

/* ---- small routes ------------------------------------------------------------------ */

static json_t *model_object(const hr_server *s) {
    return json_pack("{s:s,s:s,s:I,s:s}", "id", s->model_id, "object", "model", "created",
                     (json_int_t)time(NULL), "owned_by", "hearth");
}

long hr__rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    return rss * sysconf(_SC_PAGESIZE);
}

static hr_reply route_stats(hr_server *s) {
    hr_engine_stats st;
    hr_engine_stats_get(s->engine, &st);
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(s->model_id));
    json_object_set_new(o, "uptime_s", json_real(hr_now() - s->t_start));
    json_object_set_new(o, "requests",
                        json_pack("{s:I,s:I,s:I,s:I}", "served",
                                  (json_int_t)(st.requests_total - st.requests_running -
                                               st.requests_queued),
                                  "active", (json_int_t)st.requests_running, "queued",
                                  (json_int_t)st.requests_queued, "http",
                                  (json_int_t)atomic_load(&s->http_requests)));
    if (s->http) /* an engine child has no connections of its own */
        json_object_set_new(o, "connections", json_integer(hr__http_connections(s)));
    json_object_set_new(o, "tokens",
                        json_pack("{s:I,s:I,s:I}", "prompt", (json_int_t)st.prompt_tokens,
                                  "generated", (json_int_t)st.generated_tokens, "cached",
                                  (json_int_t)st.cached_tokens));
    json_object_set_new(o, "speculative",
                        json_pack("{s:b,s:I,s:I}", "draft_model", st.spec_draft_model,
                                  "drafted_tokens", (json_int_t)st.spec_drafted,
                                  "accepted_tokens", (json_int_t)st.spec_accepted));
    json_object_set_new(o, "throughput",
                        json_pack("{s:f,s:f}", "prefill_tokens_per_s", st.prefill_tps,
                                  "decode_tokens_per_s", st.decode_tps));
    json_object_set_new(o, "kv_cache",
                        json_pack("{s:i,s:i,s:i,s:i,s:I,s:I}", "blocks_total", st.kv_blocks_total,
                                  "blocks_used", st.kv_blocks_requests, "blocks_cached",
                                  st.kv_blocks_cached, "blocks_free", st.kv_blocks_free, "bytes",
                                  (json_int_t)st.kv_bytes, "bytes_per_token",
                                  (json_int_t)(st.kv_blocks_total
                                                   ? st.kv_bytes / ((size_t)st.kv_blocks_total *
                                                                    HR_KV_BLOCK)
                                                   : 0)));
    json_object_set_new(o, "ssd_cache",
                        st.ssd ? json_pack("{s:I,s:I,s:I}", "blocks_written",
                                           (json_int_t)st.ssd_written, "blocks_read",
                                           (json_int_t)st.ssd_hits, "quarantined",
                                           (json_int_t)st.ssd_quarantined)
                               : json_null());
    json_object_set_new(o, "memory",
                        json_pack("{s:I,s:I}", "rss_bytes", (json_int_t)hr__rss_bytes(),
                                  "weights_bytes", (json_int_t)s->model->weight_bytes));
    return hr__json_reply(200, o);
}

bool hr__is_generation(const char *method, const char *url) {
    static const char *const paths[] = {"/v1/chat/completions", "/chat/completions",
                                        "/v1/completions", "/completions", "/v1/messages",
                                        "/v1/responses", "/responses"};
    if (strcmp(method, "POST"))
        return false;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (!strcmp(url, paths[i]))
            return true;
    return false;
}

static hr_reply route(hr_server *s, struct MHD_Connection *c, hr_client *cl,
                      const char *method, const char *url, const char *body, size_t len) {
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    bool del = !strcmp(method, "DELETE");
    hr_reply ui;
    if (get && c && !s->o.no_ui && hr__ui_route(c, url, &ui))
        return ui;
    if (get && !strcmp(url, "/health")) {
        const char *dead = hr_server_dead(s), *down = hr__engine_down(s);
        if (dead)
            return hr__json_reply(503, json_pack("{s:s,s:s}", "status", "error", "message", dead));
        if (down)
            return hr__json_reply(503, json_pack("{s:s,s:s}", "status", "restarting", "message",
                                                 down));
        if (atomic_load(&s->draining))
            return hr__json_reply(503, json_pack("{s:s,s:i}", "status", "draining", "running",
                                                 atomic_load(&s->active)));
        return (hr_reply){.status = 200, .body = strdup("{\"status\": \"ok\"}")};
    }
    if (get && !strcmp(url, "/stats"))
        return route_stats(s);
    if (get && !strcmp(url, "/v1/models"))
        return hr__json_reply(200, json_pack("{s:s,s:[o]}", "object", "list", "data",
                                             model_object(s)));
    if (get && !strncmp(url, "/v1/models/", 11)) {
        if (!strcmp(url + 11, s->model_id))
            return hr__json_reply(200, model_object(s));
        return hr__error_reply(404, "invalid_request_error", "model",
                               "The model '%s' does not exist", url + 11);
    }
    if (post && (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions")))
        return hr__route_generate(s, cl, true, body, len);
    if (post && (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")))
        return hr__route_generate(s, cl, false, body, len);
    if (post && !strcmp(url, "/v1/messages"))
        return hr__route_messages(s, cl, body, len);
    if (post && !strcmp(url, "/v1/messages/count_tokens"))
        return hr__route_count_tokens(s, body, len);
    if (post && (!strcmp(url, "/v1/responses") || !strcmp(url, "/responses")))
        return hr__route_responses(s, cl, body, len);
    if ((get || del) && !strncmp(url, "/v1/responses/", 14))
        return hr__route_stored_response(s, url + 14, del);
    if (get && !strcmp(url, "/metrics"))
        return hr__route_metrics(s);
    if (post && (!strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings")))
        return hr__error_reply(400, "invalid_request_error", NULL,
                               "not supported yet: embeddings (%s); this server only generates",
                               url);
    return hr__error_reply(404, "invalid_request_error", NULL, "Unknown route: %s %s",
                           method, url);
}

hr_reply hr__shaped(hr_server *s, const char *url, hr_reply r) {
    hr__metrics_http(&s->metrics, url, r.status);
    return strncmp(url, "/v1/messages", 12) ? r : hr__anthropic_error(r);
}

hr_reply hr__route(hr_server *s, struct MHD_Connection *c, hr_client *cl, const char *method,
                   const char *url, const char *body, size_t len) {
    return hr__shaped(s, url, route(s, c, cl, method, url, body, len));
}

/* ---- lifecycle ------------------------------------------------------------------------- */

/* What /v1/models calls the model: "org/name" for a Hugging Face cache
 * snapshot, else the path's last component. */
static char *basename_dup(const char *path) {
    char repo[256];
    if (!hr_hf_repo_of_path(repo, sizeof repo, path))
        return strdup(repo);
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/')
        b--;
    return strndup(path + b, n - b);
}

int hr_server_new(hr_server **out, const hr_server_opts *o, hr_error *err) {
    *out = NULL;
    hr_server *s = calloc(1, sizeof *s);
    if (!s)
        return hr_err(err, HR_ENOMEM, "out of memory");
    s->o = *o;
    if (!s->o.host)
        s->o.host = "127.0.0.1";
    if (!s->o.allowed_origins)
        s->o.allowed_origins = "*";
    if (!s->o.max_body)
        s->o.max_body = DEFAULT_MAX_BODY;
    if (s->o.max_connections <= 0)
        s->o.max_connections = HR_DEFAULT_MAX_CONNECTIONS;
    if (s->o.timeout <= 0)
        s->o.timeout = HR_DEFAULT_TIMEOUT_S;
    if (s->o.max_requests <= 0)
        s->o.max_requests = HR_DEFAULT_MAX_REQUESTS;
    if (s->o.request_timeout < 0) /* 0 stays: no limit */
        s->o.request_timeout = HR_DEFAULT_REQUEST_TIMEOUT_S;
    if (s->o.engine_timeout <= 0)
        s->o.engine_timeout = HR_DEFAULT_ENGINE_TIMEOUT_S;
    if (s->o.drain_timeout < 0)
        s->o.drain_timeout = HR_DEFAULT_DRAIN_TIMEOUT_S;
    s->t_start = hr_now();
    const char *g = getenv("HEARTH_GRAMMAR"); /* read once, not per request */
    s->grammar_off = g && !strcmp(g, "0");
    int rc;
    if (!(s->model_id = basename_dup(o->model))) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
    if (o->isolate && o->engine_fd < 0) { /* the parent: the child loads the model */
        *out = s;
        return 0;
    }
    s->engine_child = o->engine_fd >= 0;
    hr_llm_opts lo = {.n_threads = o->n_threads, .chat_template = o->chat_template,
                      .device = o->device};
    if ((rc = hr_llm_load(&s->llm, o->model, &lo, err)))
        goto fail;
    if (!s->llm->tok || s->llm->tmpl_err[0]) { /* the server needs both */
        rc = hr_err(err, HR_ENOTFOUND, "%s", s->llm->tok ? s->llm->tmpl_err : s->llm->tok_err);
        goto fail;
    }
    s->model = s->llm->model;
    s->tok = s->llm->tok;
    s->tmpl = s->llm->tmpl;
    s->tool_format = s->llm->tool_format;
    s->bos_token = s->llm->bos_token;
    s->eos_token = s->llm->eos_token;
    s->stop_ids = s->llm->stop_ids;
    s->n_stop_ids = s->llm->n_stop_ids;
    if (o->chat_template_args) {
        json_error_t je;
        s->template_args = json_loads(o->chat_template_args, 0, &je);
        if (!json_is_object(s->template_args)) {
            rc = hr_err(err, HR_EINVAL, "--chat-template-args must be a JSON object");
            goto fail;
        }
    }
    hr_session_opts so = {.n_threads = o->n_threads, .max_batch = o->batch, .n_ctx = o->n_ctx,
                          .kv_bytes = o->kv_bytes, .prefill_chunk = o->prefill_step,
                          .prompt_cache = o->cache_blocks < 0 ? -1 : 0,
                          .prompt_cache_size = o->cache_size,
                          .prompt_cache_bytes = o->cache_bytes, .ssd_dir = o->ssd_cache,
                          .ssd_max_bytes = o->ssd_cache_max,
                          .ssd_demote_idle = o->ssd_demote_idle, .kv_bits = o->kv_bits,
                          .kv_group = o->kv_group, .draft_model = o->draft_model,
                          .spec = o->spec, .num_draft_tokens = o->num_draft_tokens};
    if ((rc = hr__kv_type_from_name(o->kv_dtype, &so.kv_dtype, err)) ||
        (rc = hr_session_new(&s->session, s->llm, &so, err)))
        goto fail;
    s->engine = s->session->engine;
    if (!(s->responses = hr__resp_store_new(HR_RESP_STORE_ENTRIES,
                                            (size_t)HR_RESP_STORE_MIB << 20))) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
    *out = s;
    return 0;
fail:
    hr_server_free(s);
    return rc;
}

int hr_server_start(hr_server *s, hr_error *err) {
    if (s->engine_child)
        return hr_err(err, HR_EINVAL, "an engine child serves its parent, not HTTP");
    int rc;
    if (s->o.isolate && (rc = hr__child_start(s, s->o.child_argv, err)))
        return rc;
    return hr__http_start(s, err);
}

int hr_server_port(const hr_server *s) { return s->port; }

void hr_server_drain_begin(hr_server *s) {
    if (!atomic_exchange(&s->draining, 1))
        hr_log(HR_LOG_INFO, "draining: %d requests running, no new ones",
               atomic_load(&s->active));
}

bool hr_server_draining(hr_server *s) { return atomic_load(&s->draining); }

int hr_server_drain(hr_server *s) {
    hr_server_drain_begin(s);
    double t0 = hr_now();
    while (atomic_load(&s->active) > 0 &&
           (s->o.drain_timeout <= 0 || hr_now() - t0 < s->o.drain_timeout))
        usleep(20000);
    int left = atomic_load(&s->active);
    if (left)
        hr_log(HR_LOG_WARN, "drain timeout (%g s): %d requests end with an error",
               s->o.drain_timeout, left);
    return left;
}

void hr_server_stop(hr_server *s) {
    if (!s)
        return;
    hr__http_stop(s);
    hr__child_stop(s->child);
    s->child = NULL;
}

void hr_server_free(hr_server *s) {
    if (!s)
        return;
    hr_server_stop(s);
    hr__resp_store_free(s->responses);
    hr_session_free(s->session);
    hr_llm_free(s->llm);
    json_decref(s->template_args);
    free(s->model_id);
    free(s);
}

const char *hr_server_dead(hr_server *s) {
    if (s->o.isolate && !s->engine_child)
        return NULL; /* the child restarts: /health says so (hr__engine_down) */
    hr_engine_stats st;
    hr_engine_stats_get(s->engine, &st);
    return st.dead;
}

const char *hr__engine_down(hr_server *s) {
    return s->child ? hr__child_down(s->child) : NULL;
}
