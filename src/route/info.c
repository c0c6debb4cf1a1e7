/* The router's own routes: GET /health (its own state), /v1/models (the
 * union of the replicas' models), /stats (the router's counters, each
 * replica's and its /stats, and the replicas' prompt and cached tokens
 * summed) and /metrics (the router's counters in Prometheus' format).
 * docs/routing.md. */
#include "route/internal.h"
#include "core/timer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const how_names[HR_HOW_N] = {"prefix", "ring", "load", "round_robin",
                                                 "previous_response"};

static void reply_json(hr_outbox *box, unsigned status, json_t *o) {
    char *s = o ? json_dumps(o, JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII) : NULL;
    json_decref(o);
    hr_front_reply(box, status, NULL, s, 0);
}

static bool draining(hr_router *r) { return r->server && hr_server_draining(r->server); }

static void route_health(hr_router *r, hr_outbox *box) {
    int up = hr_router_healthy(r);
    const char *status = draining(r) ? "draining" : up ? "ok" : "error";
    reply_json(box, up && !draining(r) ? 200 : 503,
               json_pack("{s:s,s:i,s:i}", "status", status, "replicas_healthy", up,
                         "replicas", r->n));
}

static void route_models(hr_router *r, hr_outbox *box) {
    json_t *data = json_array(), *seen = json_object();
    for (int i = 0; i < r->n; i++) {
        hr_replica *p = &r->rep[i];
        if (!atomic_load(&p->up))
            continue;
        char *body = NULL;
        long st = hr_upstream_get(p->url, "/v1/models", 2, &body);
        json_t *j = st == 200 && body ? json_loads(body, 0, NULL) : NULL;
        free(body);
        size_t k;
        json_t *m;
        json_array_foreach(json_object_get(j, "data"), k, m) {
            const char *id = json_string_value(json_object_get(m, "id"));
            if (id && !json_object_get(seen, id)) {
                json_object_set_new(seen, id, json_true());
                json_array_append(data, m);
            }
        }
        json_decref(j);
    }
    json_decref(seen);
    reply_json(box, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

static json_t *replica_json(hr_replica *p, bool with_stats, json_int_t *sum) {
    pthread_mutex_lock(&p->mu);
    json_t *models = json_array();
    for (int k = 0; k < p->n_models; k++)
        json_array_append_new(models, json_string(p->models[k]));
    json_t *o = json_pack("{s:s,s:b,s:s?,s:i,s:I,s:I,s:o}", "url", p->url, "healthy",
                          atomic_load(&p->up), "down_because",
                          atomic_load(&p->up) ? NULL : p->why, "in_flight",
                          atomic_load(&p->in_flight), "routed",
                          (json_int_t)atomic_load(&p->routed), "failed",
                          (json_int_t)atomic_load(&p->failed), "models", models);
    pthread_mutex_unlock(&p->mu);
    if (!with_stats)
        return o;
    char *body = NULL;
    json_t *st = NULL;
    if (atomic_load(&p->up) && hr_upstream_get(p->url, "/stats", 2, &body) == 200 && body)
        st = json_loads(body, 0, NULL);
    free(body);
    const json_t *tok = json_object_get(st, "tokens");
    sum[0] += json_integer_value(json_object_get(tok, "prompt"));
    sum[1] += json_integer_value(json_object_get(tok, "cached"));
    json_object_set_new(o, "stats", st ? st : json_null());
    return o;
}

static void route_stats(hr_router *r, hr_outbox *box) {
    json_t *reps = json_array(), *how = json_object();
    json_int_t sum[2] = {0};
    for (int i = 0; i < r->n; i++)
        json_array_append_new(reps, replica_json(&r->rep[i], true, sum));
    for (int k = 0; k < HR_HOW_N; k++)
        json_object_set_new(how, how_names[k], json_integer(atomic_load(&r->how[k])));
    pthread_mutex_lock(&r->mu);
    int entries = hr_lru_size(r->table);
    pthread_mutex_unlock(&r->mu);
    json_t *o = json_pack(
        "{s:s,s:f,s:s,s:b,s:{s:o,s:I,s:I,s:I},s:{s:i,s:i,s:i},s:{s:I,s:I,s:f},s:o}", "object",
        "router", "uptime_s", hr_now() - r->t_start, "policy",
        r->o.policy == HR_ROUTE_PREFIX ? "prefix" : "round-robin", "draining", draining(r),
        "requests", "by_choice", how, "retried", (json_int_t)atomic_load(&r->retries),
        "no_replica", (json_int_t)atomic_load(&r->no_replica), "broken_streams",
        (json_int_t)atomic_load(&r->broken), "table", "entries", entries, "capacity",
        r->o.table_entries, "chunk_bytes", (int)r->o.chunk_bytes, "tokens", "prompt", sum[0],
        "cached", sum[1], "cache_hit_rate", sum[0] ? (double)sum[1] / (double)sum[0] : 0.0,
        "replicas", reps);
    reply_json(box, 200, o);
}

static void route_metrics(hr_router *r, hr_outbox *box) {
    size_t cap = 4096 + (size_t)r->n * 4096, len = 0; /* a URL is < 512 bytes */
    char *s = malloc(cap);
    if (!s) {
        hr_front_reply(box, 503, NULL, NULL, 0);
        return;
    }
#define OUT(...) len += (size_t)snprintf(s + len, cap - len, __VA_ARGS__)
    OUT("# HELP hearth_route_replica_up Whether the replica answers /health with 200.\n"
        "# TYPE hearth_route_replica_up gauge\n");
    for (int i = 0; i < r->n; i++)
        OUT("hearth_route_replica_up{replica=\"%s\"} %d\n", r->rep[i].url,
            atomic_load(&r->rep[i].up));
    OUT("# HELP hearth_route_in_flight Requests forwarded to the replica and not finished.\n"
        "# TYPE hearth_route_in_flight gauge\n");
    for (int i = 0; i < r->n; i++)
        OUT("hearth_route_in_flight{replica=\"%s\"} %d\n", r->rep[i].url,
            atomic_load(&r->rep[i].in_flight));
    OUT("# HELP hearth_route_requests_total Generation requests sent to the replica.\n"
        "# TYPE hearth_route_requests_total counter\n");
    for (int i = 0; i < r->n; i++)
        OUT("hearth_route_requests_total{replica=\"%s\"} %ld\n", r->rep[i].url,
            atomic_load(&r->rep[i].routed));
    OUT("# HELP hearth_route_choices_total Generation requests by how their replica was "
        "chosen.\n# TYPE hearth_route_choices_total counter\n");
    for (int k = 0; k < HR_HOW_N; k++)
        OUT("hearth_route_choices_total{how=\"%s\"} %ld\n", how_names[k],
            atomic_load(&r->how[k]));
    OUT("# HELP hearth_route_retries_total Requests sent again to another replica after "
        "one gave no answer.\n# TYPE hearth_route_retries_total counter\n"
        "hearth_route_retries_total %ld\n",
        atomic_load(&r->retries));
#undef OUT
    hr_front_reply(box, 200, "text/plain; version=0.0.4; charset=utf-8", s, 0);
}

bool hr__route_info(hr_router *r, hr_outbox *box, const hr_front_req *rq) {
    if (strcmp(rq->method, "GET") && strcmp(rq->method, "HEAD"))
        return false;
    if (!strcmp(rq->url, "/health"))
        route_health(r, box);
    else if (!strcmp(rq->url, "/v1/models") || !strcmp(rq->url, "/models"))
        route_models(r, box);
    else if (!strcmp(rq->url, "/stats"))
        route_stats(r, box);
    else if (!strcmp(rq->url, "/metrics"))
        route_metrics(r, box);
    else
        return false;
    return true;
}
