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

/* ---- the engines' series, one sample per loaded model -------------------------------------- */

enum {
    E_REQUESTS, E_FINISHED, E_RUNNING, E_QUEUED, E_PROMPT_TOKENS, E_GENERATED, E_SPEC_DRAFTED,
    E_SPEC_ACCEPTED, E_HIT_TOKENS, E_MISS_TOKENS, E_LOOKUPS, E_HITS, E_LOGITS_HITS, E_MISSES, E_PREFILL_TPS,
    E_DECODE_TPS, E_KV_CAPACITY, E_KV_FREE, E_KV_USED, E_KV_CACHED, E_KV_BYTES, E_SSD,
    E_SSD_WRITTEN, E_SSD_READ, E_SSD_WRITTEN_BYTES, E_SSD_READ_BYTES, E_SSD_QUARANTINED,
    E_SSD_WRITE_ERRORS, E_SSD_READ_ERRORS, E_SSD_DIRECT, E_SSD_PAUSED, E_WEIGHTS, E_N
};

static const struct {
    const char *name, *type, *help;
} engine_series[E_N] = {
    [E_REQUESTS] = {"requests_total", "counter", "Generation requests submitted to the engine."},
    [E_FINISHED] = {"requests_finished_total", "counter",
                    "Generation requests the engine has finished."},
    [E_RUNNING] = {"requests_running", "gauge",
                   "Generation requests being decoded or prefilled (batch rows)."},
    [E_QUEUED] = {"requests_queued", "gauge",
                  "Generation requests waiting for a batch row or KV blocks."},
    [E_PROMPT_TOKENS] = {"prompt_tokens_total", "counter", "Prompt tokens of submitted requests."},
    [E_GENERATED] = {"generated_tokens_total", "counter", "Tokens generated."},
    [E_SPEC_DRAFTED] = {"spec_drafted_tokens_total", "counter",
                        "Tokens drafted for speculative decoding (prompt lookup or the draft "
                        "model)."},
    [E_SPEC_ACCEPTED] = {"spec_accepted_tokens_total", "counter",
                         "Drafted tokens the model accepted."},
    [E_HIT_TOKENS] = {"prompt_cache_hit_tokens_total", "counter",
                      "Prompt tokens whose KV came from the prompt cache."},
    [E_MISS_TOKENS] = {"prompt_cache_miss_tokens_total", "counter",
                       "Prompt tokens of requests that looked up the prompt cache, computed "
                       "because it did not hold them."},
    [E_LOOKUPS] = {"prompt_cache_lookups_total", "counter",
                   "Requests that looked up the prompt cache (one lookup each)."},
    [E_HITS] = {"prompt_cache_hits_total", "counter",
                "Prompt cache lookups that reused a cached prefix."},
    [E_LOGITS_HITS] = {"prompt_cache_logits_hits_total", "counter",
                       "Prompt cache hits that held the whole prompt and its last logits: "
                       "the first token sampled from them, no forward."},
    [E_MISSES] = {"prompt_cache_misses_total", "counter",
                  "Prompt cache lookups that found no cached prefix."},
    [E_PREFILL_TPS] = {"prefill_tokens_per_second", "gauge",
                       "Prompt tokens per second over the last steps."},
    [E_DECODE_TPS] = {"decode_tokens_per_second", "gauge",
                      "Generated tokens per second over the last steps."},
    [E_KV_CAPACITY] = {"kv_blocks_capacity", "gauge", "KV cache blocks in the pool."},
    [E_KV_FREE] = {"kv_blocks_free", "gauge", "KV cache blocks free."},
    [E_KV_USED] = {"kv_blocks_used", "gauge", "KV cache blocks held by running requests."},
    [E_KV_CACHED] = {"kv_blocks_cached", "gauge", "KV cache blocks indexed by the prompt cache."},
    [E_KV_BYTES] = {"kv_cache_bytes", "gauge", "Bytes of the KV cache pool."},
    [E_SSD] = {"ssd_cache_enabled", "gauge", "1 when the prompt cache has an SSD tier."},
    [E_SSD_WRITTEN] = {"ssd_cache_written_blocks_total", "counter",
                       "KV blocks written to the SSD tier."},
    [E_SSD_READ] = {"ssd_cache_read_blocks_total", "counter",
                    "KV blocks read back from the SSD tier (hits)."},
    [E_SSD_WRITTEN_BYTES] = {"ssd_cache_written_bytes_total", "counter",
                             "Bytes of the files written to the SSD tier (KV blocks, prompts' logits)."},
    [E_SSD_READ_BYTES] = {"ssd_cache_read_bytes_total", "counter",
                          "Bytes of the files read back from the SSD tier (KV blocks, prompts' logits)."},
    [E_SSD_QUARANTINED] = {"ssd_cache_quarantined_blocks_total", "counter",
                           "SSD tier files set aside as damaged or foreign."},
    [E_SSD_WRITE_ERRORS] = {"ssd_cache_write_errors_total", "counter",
                            "SSD tier writes that failed (full disk, I/O error, read-only "
                            "directory)."},
    [E_SSD_READ_ERRORS] = {"ssd_cache_read_errors_total", "counter",
                           "SSD tier reads that failed (then a miss)."},
    [E_SSD_DIRECT] = {"ssd_cache_direct_read_blocks_total", "counter",
                      "Of the KV blocks read back, those read with O_DIRECT (files the page "
                      "cache did not hold)."},
    [E_SSD_PAUSED] = {"ssd_cache_paused", "gauge",
                      "1 while SSD tier writes are paused after an error."},
    [E_WEIGHTS] = {"model_weights_bytes", "gauge", "Bytes of the model's weights."},
};

static void engine_values(const hr_engine_stats *st, size_t weights, double v[E_N]) {
    v[E_REQUESTS] = (double)st->requests_total;
    v[E_FINISHED] = (double)st->requests_finished;
    v[E_RUNNING] = (double)st->requests_running;
    v[E_QUEUED] = (double)st->requests_queued;
    v[E_PROMPT_TOKENS] = (double)st->prompt_tokens;
    v[E_GENERATED] = (double)st->generated_tokens;
    v[E_SPEC_DRAFTED] = (double)st->spec_drafted;
    v[E_SPEC_ACCEPTED] = (double)st->spec_accepted;
    v[E_HIT_TOKENS] = (double)st->cached_tokens;
    v[E_MISS_TOKENS] = (double)st->cache_miss_tokens;
    v[E_LOOKUPS] = (double)st->cache_lookups;
    v[E_HITS] = (double)st->cache_hits;
    v[E_LOGITS_HITS] = (double)st->cache_logits_hits;
    v[E_MISSES] = (double)st->cache_misses;
    v[E_PREFILL_TPS] = st->prefill_tps;
    v[E_DECODE_TPS] = st->decode_tps;
    v[E_KV_CAPACITY] = (double)st->kv_blocks_total;
    v[E_KV_FREE] = (double)st->kv_blocks_free;
    v[E_KV_USED] = (double)st->kv_blocks_requests;
    v[E_KV_CACHED] = (double)st->kv_blocks_cached;
    v[E_KV_BYTES] = (double)st->kv_bytes;
    v[E_SSD] = st->ssd ? 1 : 0;
    v[E_SSD_WRITTEN] = (double)st->ssd_written;
    v[E_SSD_READ] = (double)st->ssd_hits;
    v[E_SSD_WRITTEN_BYTES] = (double)st->ssd_bytes_written;
    v[E_SSD_READ_BYTES] = (double)st->ssd_bytes_read;
    v[E_SSD_QUARANTINED] = (double)st->ssd_quarantined;
    v[E_SSD_WRITE_ERRORS] = (double)st->ssd_write_errors;
    v[E_SSD_READ_ERRORS] = (double)st->ssd_read_errors;
    v[E_SSD_DIRECT] = (double)st->ssd_direct_reads;
    v[E_SSD_PAUSED] = st->ssd_paused ? 1 : 0;
    v[E_WEIGHTS] = (double)weights;
}

/* A label value, escaped as the format requires (\\ \" \n). */
static void label(text *t, const char *v) {
    for (const char *p = v; *p; p++)
        put(t, "%s%c", *p == '\\' || *p == '"' || *p == '\n' ? "\\" : "", *p == '\n' ? 'n' : *p);
}

/* ---- the route ------------------------------------------------------------------------------ */

hr_reply hr__route_metrics(hr_server *s) {
    text t = {0};
    if ((t.buf = malloc(t.cap = 4096)))
        t.buf[0] = 0;
    else
        t.oom = true;
    /* every model of the pool, loaded or not, as an info-style gauge; the
     * engines' series below have a sample per loaded model */
    int n = hr__pool_size(s->pool);
    double (*v)[E_N] = calloc((size_t)n, sizeof *v);
    bool *loaded = calloc((size_t)n, sizeof *loaded);
    if (!v || !loaded)
        t.oom = true;
    put(&t, "# HELP hearth_model_info The served models (value 1), loaded or not.\n"
            "# TYPE hearth_model_info gauge\n");
    for (int i = 0; i < n && !t.oom; i++) {
        hr_served *m = hr__pool_peek(s->pool, i);
        if ((loaded[i] = m != NULL)) {
            hr_engine_stats st;
            hr_engine_stats_get(m->engine, &st);
            engine_values(&st, m->model->weight_bytes, v[i]);
            hr__pool_unpeek(s->pool, m);
        }
        put(&t, "hearth_model_info{model=\"");
        label(&t, hr__pool_id(s->pool, i));
        put(&t, "\",loaded=\"%s\"} 1\n", loaded[i] ? "true" : "false");
    }
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
    gauge(&t, "process_resident_memory_bytes", "Resident set size of the process.",
          (double)hr__rss_bytes());
    for (int e = 0; e < E_N && !t.oom; e++) {
        const char *name = engine_series[e].name;
        put(&t, "# HELP hearth_%s %s\n# TYPE hearth_%s %s\n", name, engine_series[e].help, name,
            engine_series[e].type);
        for (int i = 0; i < n; i++) {
            if (!loaded[i])
                continue;
            put(&t, "hearth_%s{model=\"", name);
            label(&t, hr__pool_id(s->pool, i));
            put(&t, "\"} %.17g\n", v[i][e]);
        }
    }
    free(v);
    free(loaded);
    if (t.oom) {
        free(t.buf);
        return hr__error_reply(500, "server_error", NULL, "out of memory");
    }
    return (hr_reply){.status = 200, .body = t.buf,
                      .ctype = "text/plain; version=0.0.4; charset=utf-8"};
}
