/* GET /metrics: the engine's published counters (hr_engine_stats_get, a
 * lock-free snapshot) and the server's own, in Prometheus' text exposition
 * format (version 0.0.4). Answered on the HTTP thread: it never waits for
 * the engine. docs/server-api.md lists the metrics. */
#include "core/error.h"
#include "core/timer.h"
#include "server/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct text {
    char *buf;
    size_t len, cap;
    bool oom;
} text;

__attribute__((format(printf, 2, 3))) static void put(text *t, const char *fmt, ...) {
    if (t->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf + t->len, t->cap - t->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->oom = true;
            return;
        }
        if ((size_t)n < t->cap - t->len) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->len + (size_t)n + 1) * 2;
        char *b = realloc(t->buf, cap);
        if (!b) {
            t->oom = true;
            return;
        }
        t->buf = b;
        t->cap = cap;
    }
}

/* One metric without labels: HELP, TYPE and its sample. */
static void metric(text *t, const char *name, const char *type, const char *help, double v) {
    put(t, "# HELP hearth_%s %s\n# TYPE hearth_%s %s\nhearth_%s %.17g\n", name, help, name, type,
        name, v);
}

static void counter(text *t, const char *name, const char *help, double v) {
    metric(t, name, "counter", help, v);
}

static void gauge(text *t, const char *name, const char *help, double v) {
    metric(t, name, "gauge", help, v);
}

/* ---- the server's own counters ------------------------------------------------------------ */

/* Route labels: a fixed set, so a client cannot grow the series. */
static const char *const routes[HR_METRIC_ROUTES] = {
    "/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens",
    "/v1/responses", "/v1/responses/{id}", "/v1/embeddings", "/v1/models", "/health", "/stats",
    "/metrics", "/", "other"};
static const unsigned codes[HR_METRIC_CODES - 1] = {200, 204, 400, 404, 413, 500, 503};
/* Upper bounds in seconds; the last bucket is +Inf. */
static const double ttft_le[HR_METRIC_BUCKETS - 1] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                      1, 2.5, 5, 10, 30, 60};
static const double itl_le[HR_METRIC_BUCKETS - 1] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04,
                                                     0.06, 0.08, 0.1, 0.25, 0.5, 1, 2.5};

static int route_index(const char *url) {
    static const char *const alias[][2] = {{"/chat/completions", "/v1/chat/completions"},
                                           {"/completions", "/v1/completions"},
                                           {"/responses", "/v1/responses"},
                                           {"/embeddings", "/v1/embeddings"}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(url, alias[i][0]))
            url = alias[i][1];
    if (!strncmp(url, "/v1/models/", 11))
        url = "/v1/models";
    else if (!strncmp(url, "/v1/responses/", 14))
        url = "/v1/responses/{id}";
    for (int i = 0; i < HR_METRIC_ROUTES - 1; i++)
        if (!strcmp(url, routes[i]))
            return i;
    return HR_METRIC_ROUTES - 1;
}

void hr__metrics_http(hr_metrics *m, const char *url, unsigned status) {
    int c = HR_METRIC_CODES - 1;
    for (int i = 0; i < HR_METRIC_CODES - 1; i++)
        if (codes[i] == status)
            c = i;
    atomic_fetch_add(&m->http[route_index(url)][c], 1);
}

static void observe(hr_histogram *h, const double *le, double s) {
    int b = 0;
    while (b < HR_METRIC_BUCKETS - 1 && s > le[b])
        b++;
    atomic_fetch_add(&h->count[b], 1);
    atomic_fetch_add(&h->sum_ns, (long long)(s * 1e9));
    atomic_fetch_add(&h->n, 1);
}

void hr__metrics_ttft(hr_metrics *m, double s) { observe(&m->ttft, ttft_le, s); }
void hr__metrics_itl(hr_metrics *m, double s) { observe(&m->itl, itl_le, s); }

static void histogram(text *t, const char *name, const char *help, hr_histogram *h,
                      const double *le) {
    put(t, "# HELP hearth_%s %s\n# TYPE hearth_%s histogram\n", name, help, name);
    long cum = 0;
    for (int b = 0; b < HR_METRIC_BUCKETS; b++) {
        cum += atomic_load(&h->count[b]);
        if (b < HR_METRIC_BUCKETS - 1)
            put(t, "hearth_%s_bucket{le=\"%g\"} %ld\n", name, le[b], cum);
        else
            put(t, "hearth_%s_bucket{le=\"+Inf\"} %ld\n", name, cum);
    }
    /* read apart from the buckets: a scrape may see one observation half
     * counted; the count is the +Inf bucket's, as Prometheus requires */
    put(t, "hearth_%s_sum %.9f\nhearth_%s_count %ld\n", name,
        (double)atomic_load(&h->sum_ns) * 1e-9, name, cum);
}

static void http_replies(text *t, hr_metrics *m) {
    put(t, "# HELP hearth_http_responses_total HTTP replies by route and status (series "
           "appear at their first reply).\n# TYPE hearth_http_responses_total counter\n");
    for (int r = 0; r < HR_METRIC_ROUTES; r++)
        for (int c = 0; c < HR_METRIC_CODES; c++) {
            long n = atomic_load(&m->http[r][c]);
            if (!n)
                continue;
            if (c < HR_METRIC_CODES - 1)
                put(t, "hearth_http_responses_total{route=\"%s\",code=\"%u\"} %ld\n",
                    routes[r], codes[c], n);
            else
                put(t, "hearth_http_responses_total{route=\"%s\",code=\"other\"} %ld\n",
                    routes[r], n);
        }
}

/* ---- the route ------------------------------------------------------------------------------ */

hr_reply hr__route_metrics(hr_server *s) {
    /* the default (first) model's engine; zeros while a pool has it unloaded */
    hr_engine_stats st = {0};
    hr_served *m = hr__pool_peek(s->pool, 0);
    size_t weights = m ? m->model->weight_bytes : 0;
    if (m) {
        hr_engine_stats_get(m->engine, &st);
        hr__pool_unpeek(s->pool, m);
    }
    text t = {0};
    if ((t.buf = malloc(t.cap = 4096)))
        t.buf[0] = 0;
    else
        t.oom = true;
    /* the served model, as an info-style gauge */
    put(&t, "# HELP hearth_model_info The served model (value 1).\n"
            "# TYPE hearth_model_info gauge\nhearth_model_info{model=\"");
    for (const char *p = hr__pool_id(s->pool, 0); *p; p++) /* label escapes: \\ \" \n */
        put(&t, "%s%c", *p == '\\' || *p == '"' || *p == '\n' ? "\\" : "",
            *p == '\n' ? 'n' : *p);
    put(&t, "\"} 1\n");
    gauge(&t, "uptime_seconds", "Seconds since the server started.", hr_now() - s->t_start);
    counter(&t, "http_requests_total", "HTTP requests answered or being answered.",
            (double)atomic_load(&s->http_requests));
    counter(&t, "http_errors_total", "HTTP replies with a 4xx or 5xx status.",
            (double)atomic_load(&s->http_errors));
    http_replies(&t, &s->metrics);
    histogram(&t, "time_to_first_token_seconds",
              "Seconds from a generation's submission to its first token.", &s->metrics.ttft,
              ttft_le);
    histogram(&t, "inter_token_latency_seconds", "Seconds between two tokens of a generation.",
              &s->metrics.itl, itl_le);
    counter(&t, "requests_total", "Generation requests submitted to the engine.",
            (double)st.requests_total);
    counter(&t, "requests_finished_total", "Generation requests the engine has finished.",
            (double)(st.requests_total - st.requests_running - st.requests_queued));
    gauge(&t, "requests_running", "Generation requests being decoded or prefilled (batch rows).",
          (double)st.requests_running);
    gauge(&t, "requests_queued", "Generation requests waiting for a batch row or KV blocks.",
          (double)st.requests_queued);
    counter(&t, "prompt_tokens_total", "Prompt tokens of submitted requests.",
            (double)st.prompt_tokens);
    counter(&t, "generated_tokens_total", "Tokens generated.", (double)st.generated_tokens);
    counter(&t, "spec_drafted_tokens_total",
            "Tokens drafted for speculative decoding (prompt lookup or the draft model).",
            (double)st.spec_drafted);
    counter(&t, "spec_accepted_tokens_total",
            "Drafted tokens the model accepted.", (double)st.spec_accepted);
    counter(&t, "prompt_cache_hit_tokens_total",
            "Prompt tokens whose KV came from the prompt cache.", (double)st.cached_tokens);
    counter(&t, "prompt_cache_miss_tokens_total",
            "Prompt tokens of requests that looked up the prompt cache, computed because "
            "it did not hold them.", (double)st.cache_miss_tokens);
    counter(&t, "prompt_cache_lookups_total",
            "Requests that looked up the prompt cache (one lookup each).",
            (double)st.cache_lookups);
    counter(&t, "prompt_cache_hits_total",
            "Prompt cache lookups that reused a cached prefix.", (double)st.cache_hits);
    counter(&t, "prompt_cache_misses_total",
            "Prompt cache lookups that found no cached prefix.", (double)st.cache_misses);
    gauge(&t, "prefill_tokens_per_second", "Prompt tokens per second over the last steps.",
          st.prefill_tps);
    gauge(&t, "decode_tokens_per_second", "Generated tokens per second over the last steps.",
          st.decode_tps);
    gauge(&t, "kv_blocks_capacity", "KV cache blocks in the pool.", st.kv_blocks_total);
    gauge(&t, "kv_blocks_free", "KV cache blocks free.", st.kv_blocks_free);
    gauge(&t, "kv_blocks_used", "KV cache blocks held by running requests.",
          st.kv_blocks_requests);
    gauge(&t, "kv_blocks_cached", "KV cache blocks indexed by the prompt cache.",
          st.kv_blocks_cached);
    gauge(&t, "kv_cache_bytes", "Bytes of the KV cache pool.", (double)st.kv_bytes);
    gauge(&t, "ssd_cache_enabled", "1 when the prompt cache has an SSD tier.", st.ssd ? 1 : 0);
    counter(&t, "ssd_cache_written_blocks_total", "KV blocks written to the SSD tier.",
            (double)st.ssd_written);
    counter(&t, "ssd_cache_read_blocks_total", "KV blocks read back from the SSD tier (hits).",
            (double)st.ssd_hits);
    counter(&t, "ssd_cache_written_bytes_total",
            "Bytes of KV block files written to the SSD tier.", (double)st.ssd_bytes_written);
    counter(&t, "ssd_cache_read_bytes_total",
            "Bytes of KV block files read back from the SSD tier (hits).",
            (double)st.ssd_bytes_read);
    counter(&t, "ssd_cache_quarantined_blocks_total",
            "SSD tier files set aside as damaged or foreign.", (double)st.ssd_quarantined);
    counter(&t, "ssd_cache_write_errors_total",
            "SSD tier writes that failed (full disk, I/O error, read-only directory).",
            (double)st.ssd_write_errors);
    counter(&t, "ssd_cache_read_errors_total", "SSD tier reads that failed (then a miss).",
            (double)st.ssd_read_errors);
    gauge(&t, "ssd_cache_paused", "1 while SSD tier writes are paused after an error.",
          st.ssd_paused ? 1 : 0);
    gauge(&t, "process_resident_memory_bytes", "Resident set size of the process.",
          (double)hr__rss_bytes());
    gauge(&t, "model_weights_bytes", "Bytes of the model's weights.",
          (double)weights);
    if (t.oom) {
        free(t.buf);
        return hr__error_reply(500, "server_error", NULL, "out of memory");
    }
    return (hr_reply){.status = 200, .body = t.buf,
                      .ctype = "text/plain; version=0.0.4; charset=utf-8"};
}
