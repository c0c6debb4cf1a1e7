/* Server lifecycle, HTTP plumbing (bodies, size cap, CORS) and the small
 * routes: /health, /v1/models, /stats. Generation routes are in gen.c. */
#include "core/error.h"
#include "core/file.h"
#include "core/log.h"
#include "core/timer.h"
#include "io/hfcache.h"
#include "model/kv.h"
#include "server/internal.h"
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

/* LoRA adapters at run time: GET lists them, POST {"name", "path"} adds one
 * (loaded at once, so a bad directory is this request's error), DELETE
 * /v1/adapters/NAME removes one (409 while a request uses it). */
static hr_reply route_adapters(hr_server *s, const char *method, const char *name,
                               const char *body, size_t len) {
    hr_error e = {0};
    int rc;
    if (!strcmp(method, "DELETE")) {
        rc = hr_session_adapter_remove(s->session, name, &e);
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
        rc = hr_session_adapter_add(s->session, json_string_value(n), json_string_value(p), 1, &e);
        json_decref(root);
    } else {
        char *list = hr_session_adapters_json(s->session);
        json_t *arr = list ? json_loads(list, 0, NULL) : NULL;
        free(list);
        if (!arr)
            return hr__error_reply(500, "server_error", NULL, "out of memory");
        return hr__json_reply(200, json_pack("{s:s,s:o}", "object", "list", "data", arr));
    }
    if (rc == 0) { /* added: its entry */
        char *list = hr_session_adapters_json(s->session);
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

static hr_reply route(hr_server *s, struct MHD_Connection *c, const char *method,
                      const char *url, const char *body, size_t len) {
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    bool del = !strcmp(method, "DELETE");
    hr_reply ui;
    if (get && !s->o.no_ui && hr__ui_route(c, url, &ui))
        return ui;
    if (get && !strcmp(url, "/health")) {
        const char *dead = hr_server_dead(s);
        if (dead)
            return hr__json_reply(503, json_pack("{s:s,s:s}", "status", "error", "message", dead));
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
        return hr__route_generate(s, c, true, body, len);
    if (post && (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")))
        return hr__route_generate(s, c, false, body, len);
    if (post && !strcmp(url, "/v1/messages"))
        return hr__route_messages(s, c, body, len);
    if (post && !strcmp(url, "/v1/messages/count_tokens"))
        return hr__route_count_tokens(s, body, len);
    if (post && (!strcmp(url, "/v1/responses") || !strcmp(url, "/responses")))
        return hr__route_responses(s, c, body, len);
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
        return hr__error_reply(400, "invalid_request_error", NULL,
                               "not supported yet: embeddings (%s); this server only generates",
                               url);
    return hr__error_reply(404, "invalid_request_error", NULL, "Unknown route: %s %s",
                           method, url);
}

/* ---- libmicrohttpd glue ---------------------------------------------------------------- */

typedef struct conn_ctx {
    char *body;
    size_t len, cap;
    bool too_large;
} conn_ctx;

static void add_cors(const hr_server *s, struct MHD_Response *r) {
    MHD_add_response_header(r, "Access-Control-Allow-Origin", s->o.allowed_origins);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "*");
}

static enum MHD_Result send_reply(hr_server *s, struct MHD_Connection *c, hr_reply rep) {
    struct MHD_Response *r = rep.stream;
    if (!r) {
        const char *b = rep.body ? rep.body : "{}";
        r = MHD_create_response_from_buffer(strlen(b), (void *)b, MHD_RESPMEM_MUST_COPY);
        MHD_add_response_header(r, "Content-Type", "application/json");
    }
    free(rep.body);
    add_cors(s, r);
    if (rep.status >= 400)
        atomic_fetch_add(&s->http_errors, 1);
    enum MHD_Result ok = MHD_queue_response(c, rep.status, r);
    MHD_destroy_response(r);
    return ok;
}

/* Counted for /metrics; errors in the shape of the API the route speaks. */
static hr_reply shaped(hr_server *s, const char *url, hr_reply r) {
    hr__metrics_http(&s->metrics, url, r.status);
    return strncmp(url, "/v1/messages", 12) ? r : hr__anthropic_error(r);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version,
                               const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    hr_server *s = cls;
    conn_ctx *ctx = *con_cls;
    if (!ctx) {
        if (!(ctx = calloc(1, sizeof *ctx)))
            return MHD_NO;
        *con_cls = ctx;
        return MHD_YES;
    }
    if (*upload_size) { /* body bytes, possibly in several calls */
        size_t n = *upload_size;
        *upload_size = 0;
        if (ctx->too_large || ctx->len + n > s->o.max_body) {
            ctx->too_large = true;
            return MHD_YES;
        }
        if (ctx->len + n + 1 > ctx->cap) {
            size_t cap = (ctx->len + n + 1) * 2;
            cap = cap > s->o.max_body + 1 ? s->o.max_body + 1 : cap;
            char *b = realloc(ctx->body, cap);
            if (!b)
                return MHD_NO;
            ctx->body = b;
            ctx->cap = cap;
        }
        memcpy(ctx->body + ctx->len, upload, n);
        ctx->len += n;
        ctx->body[ctx->len] = 0;
        return MHD_YES;
    }
    atomic_fetch_add(&s->http_requests, 1);
    hr_log(HR_LOG_DEBUG, "%s %s (%zu bytes)", method, url, ctx->len);
    if (!strcmp(method, "OPTIONS")) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        hr_reply rep = {.status = 204, .stream = r};
        return send_reply(s, c, rep);
    }
    hr_reply rep;
    if (ctx->too_large)
        rep = hr__error_reply(413, "invalid_request_error", NULL,
                              "The request body exceeds %zu bytes", s->o.max_body);
    else if (atomic_load(&s->shutting_down))
        rep = hr__error_reply(503, "server_error", NULL, "The server is shutting down");
    else
        rep = route(s, c, method, url, ctx->body ? ctx->body : "", ctx->len);
    return send_reply(s, c, shaped(s, url, rep));
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)toe;
    if (c) /* back to the idle timeout after a generation lifted it */
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)HR_IDLE_TIMEOUT_S);
    conn_ctx *ctx = *con_cls;
    if (ctx) {
        free(ctx->body);
        free(ctx);
    }
    *con_cls = NULL;
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
    s->t_start = hr_now();
    const char *g = getenv("HEARTH_GRAMMAR"); /* read once, not per request */
    s->grammar_off = g && !strcmp(g, "0");
    int rc;
    if (!(s->model_id = basename_dup(o->model))) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
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
                          .spec = o->spec, .num_draft_tokens = o->num_draft_tokens,
                          .adapter_path = o->adapter_path, .adapters = o->adapters};
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
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->o.port)};
    if (inet_pton(AF_INET, s->o.host, &addr.sin_addr) != 1) {
        if (!strcmp(s->o.host, "localhost"))
            addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        else
            return hr_err(err, HR_EINVAL, "--host '%s' is not an IPv4 address", s->o.host);
    }
    s->daemon = MHD_start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
            MHD_USE_ERROR_LOG,
        (uint16_t)s->o.port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, &addr,
        MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)HR_IDLE_TIMEOUT_S, MHD_OPTION_END);
    if (!s->daemon)
        return hr_err(err, HR_EIO, "cannot listen on %s:%d (in use?)", s->o.host, s->o.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->o.port;
    return 0;
}

int hr_server_port(const hr_server *s) { return s->port; }

void hr_server_stop(hr_server *s) {
    if (!s || !s->daemon)
        return;
    atomic_store(&s->shutting_down, 1); /* streams see it and end */
    MHD_quiesce_daemon(s->daemon);
    MHD_stop_daemon(s->daemon); /* joins the connection threads */
    s->daemon = NULL;
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
    hr_engine_stats st;
    hr_engine_stats_get(s->engine, &st);
    return st.dead;
}
