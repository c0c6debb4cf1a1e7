/* Server lifecycle, HTTP plumbing (bodies, size cap, CORS) and the small
 * routes: /health, /v1/models, /stats. Generation routes are in gen.c, the
 * HTTP plumbing in http.c, --isolate in isolate.c. */
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/timer.h"
#include "model/kv.h"
#include "server/drive.h"
#include "server/embeddings.h"
#include "server/internal.h"
#include "server/isolate.h"
#include "server/request.h"
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

/* One loaded model's part of /stats into o. */
static void model_stats(json_t *o, const hr_served *m) {
    hr_engine_stats st;
    hr_engine_stats_get(m->engine, &st);
    json_object_set_new(o, "requests",
                        json_pack("{s:I,s:I,s:I}", "served",
                                  (json_int_t)st.requests_finished,
                                  "active", (json_int_t)st.requests_running, "queued",
                                  (json_int_t)st.requests_queued));
    json_object_set_new(o, "tokens",
                        json_pack("{s:I,s:I,s:I}", "prompt", (json_int_t)st.prompt_tokens,
                                  "generated", (json_int_t)st.generated_tokens, "cached",
                                  (json_int_t)st.cached_tokens));
    json_object_set_new(o, "speculative",
                        json_pack("{s:b,s:I,s:I}", "draft_model", st.spec_draft_model,
                                  "drafted_tokens", (json_int_t)st.spec_drafted,
                                  "accepted_tokens", (json_int_t)st.spec_accepted));
    json_object_set_new(o, "images",
                        json_pack("{s:I,s:I}", "encoded", (json_int_t)st.images_encoded,
                                  "cached", (json_int_t)st.images_cached));
    json_object_set_new(o, "throughput",
                        json_pack("{s:f,s:f}", "prefill_tokens_per_s", st.prefill_tps,
                                  "decode_tokens_per_s", st.decode_tps));
    /* the pool sequences start in; with --quantized-kv-start, the one they
     * convert into beside it (docs/kv-quant.md) */
    size_t kvb = st.kv_bytes - st.kvq_bytes - st.kvr_bytes;
    json_t *kvc = json_pack("{s:i,s:i,s:i,s:i,s:I,s:I}", "blocks_total", st.kv_blocks_total,
                            "blocks_used", st.kv_blocks_requests, "blocks_cached",
                            st.kv_blocks_cached, "blocks_free", st.kv_blocks_free, "bytes",
                            (json_int_t)kvb, "bytes_per_token",
                            (json_int_t)(st.kv_blocks_total
                                             ? kvb / ((size_t)st.kv_blocks_total * HR_KV_BLOCK)
                                             : 0));
    if (kvc && st.kvq_blocks_total)
        json_object_set_new(kvc, "quantized",
                            json_pack("{s:i,s:i,s:i,s:I,s:I}", "blocks_total", st.kvq_blocks_total,
                                      "blocks_free", st.kvq_blocks_free, "blocks_cached",
                                      st.kvq_blocks_cached, "bytes",
                                      (json_int_t)st.kvq_bytes, "bytes_per_token",
                                      (json_int_t)(st.kvq_bytes / ((size_t)st.kvq_blocks_total *
                                                                   HR_KV_BLOCK))));
    if (kvc && st.kvr_tokens) /* --kv-residual's full-precision windows */
        json_object_set_new(kvc, "residual",
                            json_pack("{s:i,s:I}", "tokens", st.kvr_tokens, "bytes",
                                      (json_int_t)st.kvr_bytes));
    json_object_set_new(o, "kv_cache", kvc);
    json_object_set_new(o, "ssd_cache",
                        st.ssd ? json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:s?,s:b}", "blocks_written",
                                           (json_int_t)st.ssd_written, "blocks_read",
                                           (json_int_t)st.ssd_hits, "blocks_read_direct",
                                           (json_int_t)st.ssd_direct_reads, "quarantined",
                                           (json_int_t)st.ssd_quarantined, "write_errors",
                                           (json_int_t)st.ssd_write_errors, "read_errors",
                                           (json_int_t)st.ssd_read_errors, "last_error",
                                           st.ssd_last_error, "paused", st.ssd_paused)
                               : json_null());
    json_object_set_new(o, "weights_bytes", json_integer((json_int_t)m->model->weight_bytes));
    json_object_set_new(o, "grammar_cache_bytes",
                        json_integer((json_int_t)hr__llm_mask_cache_bytes(m->llm)));
}

/* The default (first) model's numbers at the top (one model: the whole
 * answer, as ever) but requests, which count every loaded model's; every
 * model's under "models" (loaded: false, and no numbers, for one not
 * loaded now), the pool's under "pool". */
static hr_reply route_stats(hr_server *s) {
    json_t *o = json_object(), *models = json_array();
    json_object_set_new(o, "model", json_string(hr__pool_id(s->pool, 0)));
    json_object_set_new(o, "uptime_s", json_real(hr_now() - s->t_start));
    size_t weights = 0, gcache = 0;
    for (int i = 0; i < hr__pool_size(s->pool); i++) {
        hr_served *m = hr__pool_peek(s->pool, i);
        json_t *mo = json_pack("{s:s,s:b}", "model", hr__pool_id(s->pool, i), "loaded", m != NULL);
        if (m) {
            model_stats(mo, m);
            weights += m->model->weight_bytes;
            gcache += (size_t)json_integer_value(json_object_get(mo, "grammar_cache_bytes"));
            if (i == 0)
                model_stats(o, m);
            hr__pool_unpeek(s->pool, m);
        }
        json_array_append_new(models, mo);
    }
    /* requests: every loaded model's together (one model: its own) */
    json_int_t sum[3] = {0};
    static const char *keys[3] = {"served", "active", "queued"};
    for (size_t i = 0; i < json_array_size(models); i++)
        for (int k = 0; k < 3; k++)
            sum[k] += json_integer_value(json_object_get(
                json_object_get(json_array_get(models, i), "requests"), keys[k]));
    json_object_set_new(o, "requests",
                        json_pack("{s:I,s:I,s:I,s:I}", "served", sum[0], "active", sum[1],
                                  "queued", sum[2], "http",
                                  (json_int_t)atomic_load(&s->http_requests)));
    if (s->http) /* an engine child has no connections of its own */
        json_object_set_new(o, "connections", json_integer(hr__http_connections(s)));
    json_object_del(o, "weights_bytes");
    json_object_del(o, "grammar_cache_bytes");
    json_object_set_new(o, "memory",
                        json_pack("{s:I,s:I,s:I}", "rss_bytes", (json_int_t)hr__rss_bytes(),
                                  "weights_bytes", (json_int_t)weights, "grammar_cache_bytes",
                                  (json_int_t)gcache));
    json_object_set_new(o, "models", models);
    json_object_set_new(o, "pool", hr__pool_stats_json(s->pool));
    return hr__json_reply(200, o);
}

/* LoRA adapters at run time: GET lists them, POST {"name", "path"} adds one
 * (loaded at once, so a bad directory is this request's error), DELETE
 * /v1/adapters/NAME removes one (409 while a request uses it). */
static hr_reply adapters_on(hr_session *ss, const char *method, const char *name,
                            const char *body, size_t len) {
    hr_error e = {0};
    int rc;
    if (!strcmp(method, "DELETE")) {
        rc = hr_session_adapter_remove(ss, name, &e);
        if (!rc)
            return hr__json_reply(200, json_pack("{s:s,s:s,s:b}", "id", name, "object",
                                                 "adapter", "deleted", 1));
    } else if (!strcmp(method, "POST")) {
        hr_reply err;
        json_t *root = hr__body_parse(body, len, &err);
        if (!root)
            return err;
        const json_t *n = json_object_get(root, "name"), *p = json_object_get(root, "path");
        if (!json_is_string(n) || !json_is_string(p)) {
            json_decref(root);
            return hr__error_reply(400, "invalid_request_error", json_is_string(n) ? "path" : "name",
                                   "POST /v1/adapters takes {\"name\": string, \"path\": string}");
        }
        rc = hr_session_adapter_add(ss, json_string_value(n), json_string_value(p), 1, &e);
        json_decref(root);
    } else {
        char *list = hr_session_adapters_json(ss);
        json_t *arr = list ? json_loads(list, 0, NULL) : NULL;
        free(list);
        if (!arr)
            return hr__error_reply(500, "server_error", NULL, "out of memory");
        return hr__json_reply(200, json_pack("{s:s,s:o}", "object", "list", "data", arr));
    }
    if (rc == 0) { /* added: its entry */
        char *list = hr_session_adapters_json(ss);
        json_t *arr = list ? json_loads(list, 0, NULL) : NULL, *hit = NULL;
        free(list);
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v)
            if (!strcmp(json_string_value(json_object_get(v, "id")), name ? name : ""))
                hit = v;
        json_t *one = hit ? json_incref(hit) : json_object();
        json_decref(arr);
        return hr__json_reply(200, one);
    }
    unsigned status = rc == HR_EBUSY ? 409 : rc == HR_ENOTFOUND ? 404 : 400;
    return hr__error_reply(status, "invalid_request_error", NULL, "%s", e.msg);
}

static hr_reply route_adapters(hr_server *s, const char *method, const char *name,
                               const char *body, size_t len) {
    hr_served *m = NULL; /* adapters belong to the one model (refused with a pool) */
    hr_reply err;
    if (!hr__model_hold(s, NULL, &m, &err))
        return err;
    hr_reply r = adapters_on(m->session, method, name, body, len);
    hr__pool_release(s->pool, m);
    return r;
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
        return hr__json_reply(200, json_pack("{s:s,s:o}", "object", "list", "data",
                                             hr__pool_models_json(s->pool, false)));
    if (get && !strncmp(url, "/v1/models/", 11)) {
        int i = hr__pool_resolve(s->pool, url + 11);
        json_t *all = i >= 0 ? hr__pool_models_json(s->pool, false) : NULL;
        if (all) {
            json_t *one = json_incref(json_array_get(all, (size_t)i));
            json_decref(all);
            return hr__json_reply(200, one);
        }
        char *names = hr__pool_names(s->pool);
        hr_reply r = hr__error_reply(404, "invalid_request_error", "model",
                                     "The model '%s' does not exist; this server serves %s",
                                     url + 11, names ? names : "other models");
        free(names);
        return r;
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
    if ((get || post) && !strcmp(url, "/v1/adapters")) {
        if (!post)
            return route_adapters(s, "GET", NULL, body, len);
        json_t *r = json_loadb(body, len, 0, NULL);
        const char *n = r ? json_string_value(json_object_get(r, "name")) : NULL;
        char name[128];
        snprintf(name, sizeof name, "%s", n ? n : "");
        json_decref(r);
        return route_adapters(s, "POST", name, body, len);
    }
    if (del && !strncmp(url, "/v1/adapters/", 13))
        return route_adapters(s, "DELETE", url + 13, body, len);
    if (post && (!strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings")))
        return hr__route_embeddings(s, body, len);
    return hr__error_reply(404, "invalid_request_error", NULL, "Unknown route: %s %s",
                           method, url);
}

hr_reply hr__shaped(hr_server *s, const char *url, hr_reply r) {
    hr__metrics_http(&s->metrics, url, r.status);
    return strncmp(url, "/v1/messages", 12) ? r : hr__anthropic_error(r);
}

static int client_left(void *cl) { return hr__client_gone(cl); }

hr_reply hr__route(hr_server *s, struct MHD_Connection *c, hr_client *cl, const char *method,
                   const char *url, const char *body, size_t len) {
    /* a grammar or schema compiled for this request stops (and frees what
     * it built) when its client goes away */
    if (cl)
        hr_grammar_cancel_set(client_left, cl);
    hr_reply r = route(s, c, cl, method, url, body, len);
    if (cl)
        hr_grammar_cancel_set(NULL, NULL);
    return hr__shaped(s, url, r);
}

/* ---- lifecycle ------------------------------------------------------------------------- */

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
    if (o->front || (o->isolate && o->engine_fd < 0)) { /* a front, or the parent of
                                                          * --isolate: no models here */
        *out = s;
        return 0;
    }
    s->engine_child = o->engine_fd >= 0;
    if ((rc = hr__pool_new(&s->pool, &s->o, err)))
        goto fail;
    if (o->chat_template_args) {
        json_error_t je;
        s->template_args = json_loads(o->chat_template_args, 0, &je);
        if (!json_is_object(s->template_args)) {
            rc = hr_err(err, HR_EINVAL, "--chat-template-args must be a JSON object");
            goto fail;
        }
    }
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
    hr__pool_free(s->pool);
    json_decref(s->template_args);
    free(s);
}

const char *hr_server_dead(hr_server *s) {
    if (s->o.front || (s->o.isolate && !s->engine_child))
        return NULL; /* the child restarts: /health says so (hr__engine_down) */
    return hr__pool_dead(s->pool);
}

const char *hr__engine_down(hr_server *s) {
    return s->child ? hr__child_down(s->child) : NULL;
}
