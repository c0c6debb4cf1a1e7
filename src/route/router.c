/* The router (router.h): replicas and their health, the choice of a
 * replica per request, forwarding with one retry. */
#include "route/internal.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define MODELS_EVERY 10 /* health rounds between two /v1/models reads of a healthy replica */

/* ---- replicas and their health ----------------------------------------------------------------- */

bool hr__replica_serves(hr_replica *p, const char *model) {
    if (!model[0])
        return true;
    pthread_mutex_lock(&p->mu);
    bool yes = p->n_models == 0; /* not known yet: it may */
    for (int i = 0; i < p->n_models && !yes; i++)
        yes = !strcmp(p->models[i], model);
    pthread_mutex_unlock(&p->mu);
    return yes;
}

static void read_models(hr_replica *p, double timeout) {
    char *body = NULL;
    long st = hr_upstream_get(p->url, "/v1/models", timeout, &body);
    json_t *j = st == 200 && body ? json_loads(body, 0, NULL) : NULL;
    free(body);
    const json_t *data = json_object_get(j, "data");
    if (json_is_array(data)) {
        pthread_mutex_lock(&p->mu);
        p->n_models = 0;
        size_t i;
        const json_t *m;
        json_array_foreach(data, i, m) {
            const char *id = json_string_value(json_object_get(m, "id"));
            if (id && p->n_models < HR_ROUTE_MAX_MODELS)
                snprintf(p->models[p->n_models++], sizeof p->models[0], "%s", id);
        }
        pthread_mutex_unlock(&p->mu);
    }
    json_decref(j);
}

static void set_down(hr_replica *p, const char *why) {
    pthread_mutex_lock(&p->mu);
    snprintf(p->why, sizeof p->why, "%s", why);
    pthread_mutex_unlock(&p->mu);
    if (atomic_exchange(&p->up, 0))
        hr_log(HR_LOG_WARN, "replica %s is down: %s", p->url, why);
}

/* One poll of every replica's /health (and, when it comes up or every
 * MODELS_EVERY rounds, its /v1/models). */
static void check_all(hr_router *r, long round) {
    double timeout = r->o.health_interval * 2 < 2 ? r->o.health_interval * 2 : 2;
    if (timeout < 0.2)
        timeout = 0.2;
    for (int i = 0; i < r->n; i++) {
        hr_replica *p = &r->rep[i];
        char *body = NULL;
        long st = hr_upstream_get(p->url, "/health", timeout, &body);
        if (st == 200) {
            bool was = atomic_load(&p->up);
            if (!was || round % MODELS_EVERY == 0)
                read_models(p, timeout);
            if (!atomic_exchange(&p->up, 1))
                hr_log(HR_LOG_INFO, "replica %s is up", p->url);
        } else {
            char why[160];
            json_t *j = body ? json_loads(body, 0, NULL) : NULL;
            const char *s = json_string_value(json_object_get(j, "status"));
            if (st)
                snprintf(why, sizeof why, "/health answered %ld%s%s", st, s ? ": " : "",
                         s ? s : "");
            else
                snprintf(why, sizeof why, "/health did not answer");
            json_decref(j);
            set_down(p, why);
        }
        free(body);
    }
}

static void *checker(void *arg) {
    hr_router *r = arg;
    long round = 1;
    pthread_mutex_lock(&r->cmu);
    while (!r->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double t = ts.tv_sec + ts.tv_nsec * 1e-9 + r->o.health_interval;
        ts.tv_sec = (time_t)t;
        ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
        pthread_cond_timedwait(&r->cv, &r->cmu, &ts);
        if (r->stop)
            break;
        pthread_mutex_unlock(&r->cmu);
        check_all(r, round++);
        pthread_mutex_lock(&r->cmu);
    }
    pthread_mutex_unlock(&r->cmu);
    return NULL;
}

int hr_router_healthy(hr_router *r) {
    int n = 0;
    for (int i = 0; i < r->n; i++)
        n += atomic_load(&r->rep[i].up);
    return n;
}

/* ---- choosing a replica ------------------------------------------------------------------------ */

/* Healthy replicas that serve model, as a bit set. */
static uint64_t eligible(hr_router *r, const char *model) {
    uint64_t set = 0;
    for (int i = 0; i < r->n; i++)
        if (atomic_load(&r->rep[i].up) && hr__replica_serves(&r->rep[i], model))
            set |= (uint64_t)1 << i;
    if (!set && model[0]) /* nobody serves it: one that is up says so itself (404) */
        for (int i = 0; i < r->n; i++)
            if (atomic_load(&r->rep[i].up))
                set |= (uint64_t)1 << i;
    return set;
}

static int least_busy(hr_router *r, uint64_t set) {
    int best = -1, load = 0;
    for (int i = 0; i < r->n; i++) {
        if (!(set >> i & 1))
            continue;
        int l = atomic_load(&r->rep[i].in_flight);
        if (best < 0 || l < load) {
            best = i;
            load = l;
        }
    }
    return best;
}

static uint64_t id_key(const char *id) {
    return XXH3_64bits_withSeed(id, strlen(id), 0x7265737021ull); /* apart from chunk chains */
}

/* The replica of a generation request (px: its prefix, NULL when its
 * body is not JSON), or -1 when set is empty. */
static int pick(hr_router *r, const hr_prefix *px, uint64_t set, hr_route_how *how) {
    if (!set)
        return -1;
    if (r->o.policy == HR_ROUTE_ROUND_ROBIN) {
        *how = HR_HOW_RR;
        for (;;) {
            int i = (int)(atomic_fetch_add(&r->rr, 1) % (unsigned)r->n);
            if (set >> i & 1)
                return i;
        }
    }
    int c = -1;
    pthread_mutex_lock(&r->mu);
    if (px && px->prev_id[0]) {
        c = hr_lru_get(r->table, id_key(px->prev_id));
        if (c >= 0 && (set >> c & 1)) {
            pthread_mutex_unlock(&r->mu);
            *how = HR_HOW_STICKY; /* the stored response is there and nowhere else */
            return c;
        }
        c = -1;
    }
    for (int k = px ? px->n_chunks - 1 : -1; k >= 0 && k >= px->conv_chunk && c < 0; k--) {
        int v = hr_lru_get(r->table, px->chunk[k]);
        if (v >= 0 && (set >> v & 1))
            c = v;
    }
    pthread_mutex_unlock(&r->mu);
    *how = HR_HOW_PREFIX;
    if (c < 0) {
        *how = HR_HOW_RING;
        c = hr_ring_pick(r->ring, px ? px->conv_key : 0, set);
    }
    int low = least_busy(r, set);
    if (atomic_load(&r->rep[c].in_flight) > atomic_load(&r->rep[low].in_flight) + r->o.load_bound) {
        *how = HR_HOW_LOAD;
        c = low;
    }
    return c;
}

/* The replica i now holds px's chunks (it is sent the request). */
static void remember(hr_router *r, const hr_prefix *px, int i) {
    if (!px || r->o.policy != HR_ROUTE_PREFIX)
        return;
    pthread_mutex_lock(&r->mu);
    for (int k = 0; k < px->n_chunks; k++)
        hr_lru_put(r->table, px->chunk[k], i);
    pthread_mutex_unlock(&r->mu);
}

/* ---- a request --------------------------------------------------------------------------------- */

/* A /v1/responses answer's id: its replica is where the stored response is. */
typedef struct id_ctx {
    hr_router *r;
    int replica;
} id_ctx;

static void on_id(hr_upstream *u, const char *id) {
    id_ctx *c = u->ctx;
    pthread_mutex_lock(&c->r->mu);
    hr_lru_put(c->r->table, id_key(id), c->replica);
    pthread_mutex_unlock(&c->r->mu);
}

static hr_upstream_outcome forward(hr_router *r, int i, hr_outbox *box, const hr_front_req *rq,
                                   bool hold_503, hr_upstream *u) {
    hr_replica *p = &r->rep[i];
    id_ctx ic = {r, i};
    *u = (hr_upstream){.base = p->url, .rq = rq, .box = box, .hold_503 = hold_503,
                       .connect_timeout = r->o.connect_timeout,
                       .find_id = !strncmp(rq->url, "/v1/responses", 13) ||
                                  !strncmp(rq->url, "/responses", 10),
                       .on_id = on_id, .ctx = &ic};
    atomic_fetch_add(&p->in_flight, 1);
    hr_upstream_outcome out = hr_upstream_forward(u);
    atomic_fetch_sub(&p->in_flight, 1);
    if (out == HR_UPSTREAM_NO_ANSWER) {
        atomic_fetch_add(&p->failed, 1);
        set_down(p, u->why); /* the health checker brings it back */
    } else if (out == HR_UPSTREAM_BROKEN) {
        atomic_fetch_add(&r->broken, 1);
        hr_log(HR_LOG_WARN, "replica %s: the stream broke: %s", p->url, u->why);
    }
    return out;
}

/* The model a request names ("" when none or not JSON). */
static void model_of(const hr_front_req *rq, char *out, size_t n) {
    out[0] = 0;
    json_t *j = rq->len ? json_loadb(rq->body, rq->len, 0, NULL) : NULL;
    const char *m = json_string_value(json_object_get(j, "model"));
    snprintf(out, n, "%s", m ? m : "");
    json_decref(j);
}

static void handle(void *ctx, hr_outbox *box, const hr_front_req *rq) {
    hr_router *r = ctx;
    if (hr__route_info(r, box, rq))
        return;
    hr_prefix *px = NULL;
    char model[256];
    if (rq->generation && (px = malloc(sizeof *px)) &&
        hr_prefix_of(rq->url, rq->body, rq->len, r->o.chunk_bytes, px)) {
        snprintf(model, sizeof model, "%s", px->model);
    } else {
        free(px);
        px = NULL;
        model_of(rq, model, sizeof model);
    }
    if (!rq->generation && (!strncmp(rq->url, "/v1/responses/", 14) ||
                            !strncmp(rq->url, "/responses/", 11))) {
        /* a stored response lives on the replica that answered it */
        if (!(px = calloc(1, sizeof *px))) {
            hr_front_error(box, rq->url, 503, "server_error", "out of memory");
            return;
        }
        snprintf(px->prev_id, sizeof px->prev_id, "%s", strrchr(rq->url, '/') + 1);
    }
    uint64_t set = eligible(r, model);
    hr_upstream u = {0};
    char *held = NULL;
    unsigned held_status = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        hr_route_how how = HR_HOW_PREFIX;
        int i;
        if (rq->generation || (px && px->prev_id[0])) {
            i = pick(r, px, set, &how);
        } else {
            i = least_busy(r, set);
        }
        if (i < 0)
            break;
        if (rq->generation) {
            atomic_fetch_add(&r->how[how], 1);
            atomic_fetch_add(&r->rep[i].routed, 1);
            remember(r, px, i);
        }
        if (attempt)
            atomic_fetch_add(&r->retries, 1);
        set &= ~((uint64_t)1 << i);
        hr_upstream_outcome out = forward(r, i, box, rq, attempt == 0 && set, &u);
        if (out != HR_UPSTREAM_NO_ANSWER) {
            free(held);
            free(u.held);
            free(px);
            return;
        }
        hr_log(HR_LOG_WARN, "%s %s: replica %s gave no answer (%s)%s", rq->method, rq->url,
               r->rep[i].url, u.why, attempt == 0 && set ? "; retrying on another" : "");
        if (u.held) {
            free(held);
            held = u.held;
            held_status = (unsigned)u.status;
        }
    }
    free(px);
    if (held) { /* the last replica's own 503 */
        hr_front_reply(box, held_status, NULL, held, 1);
        return;
    }
    atomic_fetch_add(&r->no_replica, 1);
    if (!hr_router_healthy(r))
        hr_front_error(box, rq->url, 503, "server_error",
                       "no replica is healthy (of %d); retry later", r->n);
    else
        hr_front_error(box, rq->url, 502, "server_error", "the replica gave no answer: %s",
                       u.why[0] ? u.why : "none was available");
}

/* ---- lifecycle --------------------------------------------------------------------------------- */

int hr_router_new(hr_router **out, const hr_router_opts *o, hr_error *err) {
    *out = NULL;
    if (o->n_replicas < 1 || o->n_replicas > HR_RING_MAX)
        return hr_err(err, HR_EINVAL, "--replicas: give 1 to %d URLs", HR_RING_MAX);
    if (hr_upstream_global_init())
        return hr_err(err, HR_EIO, "libcurl could not start");
    hr_router *r = calloc(1, sizeof *r);
    if (!r)
        return hr_err(err, HR_ENOMEM, "out of memory");
    r->o = *o;
    if (!r->o.chunk_bytes)
        r->o.chunk_bytes = 128;
    if (r->o.table_entries <= 0)
        r->o.table_entries = 65536;
    if (r->o.vnodes <= 0)
        r->o.vnodes = 64;
    if (r->o.load_bound <= 0)
        r->o.load_bound = 4;
    if (r->o.health_interval <= 0)
        r->o.health_interval = 1;
    if (r->o.connect_timeout <= 0)
        r->o.connect_timeout = 2;
    r->n = o->n_replicas;
    r->t_start = hr_now();
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->cmu, NULL);
    pthread_cond_init(&r->cv, NULL);
    const char *names[HR_RING_MAX];
    int rc = 0;
    if (!(r->rep = calloc((size_t)r->n, sizeof *r->rep))) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < r->n; i++)
        pthread_mutex_init(&r->rep[i].mu, NULL);
    for (int i = 0; i < r->n; i++) {
        hr_replica *p = &r->rep[i];
        const char *u = o->replicas[i];
        size_t n = strlen(u);
        while (n && u[n - 1] == '/')
            n--;
        if (strncmp(u, "http://", 7) || n <= 7 || n >= sizeof p->url) {
            rc = hr_err(err, HR_EINVAL, "--replicas: '%s' is not an http://HOST:PORT URL", u);
            goto fail;
        }
        snprintf(p->url, sizeof p->url, "%.*s", (int)n, u);
        snprintf(p->why, sizeof p->why, "not checked yet");
        for (int k = 0; k < i; k++)
            if (!strcmp(r->rep[k].url, p->url)) {
                rc = hr_err(err, HR_EINVAL, "--replicas: %s is given twice", p->url);
                goto fail;
            }
        names[i] = p->url;
    }
    if (!(r->ring = hr_ring_new(names, r->n, r->o.vnodes)) ||
        !(r->table = hr_lru_new(r->o.table_entries))) {
        rc = hr_err(err, HR_ENOMEM, "out of memory");
        goto fail;
    }
    r->front = (hr_front){.ctx = r, .handle = handle};
    check_all(r, 0);
    r->checker_on = !pthread_create(&r->checker, NULL, checker, r);
    if (!r->checker_on) {
        rc = hr_err(err, HR_EIO, "cannot start the health checker");
        goto fail;
    }
    *out = r;
    return 0;
fail:
    hr_router_free(r);
    return rc;
}

const hr_front *hr_router_front(hr_router *r) { return &r->front; }

void hr_router_set_server(hr_router *r, hr_server *s) { r->server = s; }

void hr_router_free(hr_router *r) {
    if (!r)
        return;
    if (r->checker_on) {
        pthread_mutex_lock(&r->cmu);
        r->stop = true;
        pthread_cond_broadcast(&r->cv);
        pthread_mutex_unlock(&r->cmu);
        pthread_join(r->checker, NULL);
    }
    for (int i = 0; r->rep && i < r->n; i++)
        pthread_mutex_destroy(&r->rep[i].mu);
    free(r->rep);
    hr_ring_free(r->ring);
    hr_lru_free(r->table);
    pthread_mutex_destroy(&r->mu);
    pthread_mutex_destroy(&r->cmu);
    pthread_cond_destroy(&r->cv);
    free(r);
}
