/* HTTP over libmicrohttpd: a small pool of epoll threads reads requests and
 * answers the quick routes itself; a generation runs on a worker thread of
 * its own (or in the engine child, isolate.c) while its connection is
 * suspended, and its answer comes back through an outbox. Limits that hold
 * under abuse (docs/operations.md): a connection cap, a deadline for a
 * whole request to arrive (slow clients), a cap on generations admitted
 * (429), strict request framing (RFC 9112), and the admin routes. A front
 * without models (server/front.h: hearth route) gets every other request
 * on a worker of its own. */
#include "server/http.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "server/drive.h"
#include "server/front.h"
#include "server/isolate.h"
#include "server/ui.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define OUTBOX_HIGH_WATER ((size_t)1 << 20) /* unsent stream bytes before a writer waits */
#define OUTBOX_MAX ((size_t)64 << 20)       /* unsent bytes of a writer that cannot wait */
#define SWEEP_MS 200
#define PRESSURE_IDLE_S 1.0 /* near the cap, idle connections older than this go */

/* ---- connections (the sweeper's registry) --------------------------------------------------- */

typedef struct conn_rec {
    struct conn_rec *prev, *next;
    int fd;
    double t_wait; /* since when it waits for (the rest of) a request */
    bool busy;     /* a whole request came: it is being answered */
    bool cut;      /* shut down by the sweeper */
} conn_rec;

struct hr_http {
    struct MHD_Daemon *daemon;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    conn_rec *conns;
    long n_conns;
    hr_outbox *boxes; /* every live box (resumed on stop) */
    int n_workers;    /* generation workers running */
    bool closing;     /* no more suspends */
    bool stop_sweeper;
    pthread_t sweeper;
    bool sweeper_on;
};

long hr__http_connections(const hr_server *s) {
    hr_http *h = s->http;
    if (!h)
        return 0;
    pthread_mutex_lock(&h->mu);
    long n = h->n_conns;
    pthread_mutex_unlock(&h->mu);
    return n;
}

static void notify_conn(void *cls, struct MHD_Connection *c, void **socket_ctx,
                        enum MHD_ConnectionNotificationCode toe) {
    hr_server *s = cls;
    hr_http *h = s->http;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_rec *r = calloc(1, sizeof *r);
        if (!r)
            return;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        r->fd = ci ? ci->connect_fd : -1;
        r->t_wait = hr_now();
        pthread_mutex_lock(&h->mu);
        r->next = h->conns;
        if (h->conns)
            h->conns->prev = r;
        h->conns = r;
        h->n_conns++;
        pthread_mutex_unlock(&h->mu);
        *socket_ctx = r;
        return;
    }
    conn_rec *r = *socket_ctx;
    if (!r)
        return;
    pthread_mutex_lock(&h->mu);
    if (r->prev)
        r->prev->next = r->next;
    else
        h->conns = r->next;
    if (r->next)
        r->next->prev = r->prev;
    h->n_conns--;
    pthread_mutex_unlock(&h->mu);
    free(r);
    *socket_ctx = NULL;
}

static conn_rec *rec_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void rec_busy(hr_http *h, struct MHD_Connection *c, bool busy) {
    conn_rec *r = rec_of(c);
    if (!r)
        return;
    pthread_mutex_lock(&h->mu);
    r->busy = busy;
    r->t_wait = hr_now();
    pthread_mutex_unlock(&h->mu);
}

/* Every SWEEP_MS: a connection that has not delivered a whole request
 * within --timeout of opening (or of its previous answer) is shut down (a
 * slow client holds an fd, never a thread, and not for long); near the
 * connection cap, idle ones go after PRESSURE_IDLE_S so that new clients
 * (a health check) get in. libmicrohttpd then sees the socket end and
 * closes it. */
static void *sweeper(void *arg) {
    hr_server *s = arg;
    hr_http *h = s->http;
    pthread_mutex_lock(&h->mu);
    while (!h->stop_sweeper) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += SWEEP_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&h->cv, &h->mu, &ts);
        double now = hr_now();
        bool pressure = h->n_conns >= (long)s->o.max_connections * 9 / 10;
        for (conn_rec *r = h->conns; r; r = r->next) {
            if (r->busy || r->cut || r->fd < 0)
                continue;
            double idle = now - r->t_wait;
            if (idle > s->o.timeout || (pressure && idle > PRESSURE_IDLE_S)) {
                shutdown(r->fd, SHUT_RDWR);
                r->cut = true;
            }
        }
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* ---- outboxes ------------------------------------------------------------------------------- */

struct hr_outbox {
    hr_outbox *prev, *next; /* in h->boxes */
    hr_http *h;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hr_client client;
    struct MHD_Connection *c; /* NULL once the connection is done with the box */
    bool suspended;
    int refs;                 /* the connection's and the producer's */
    bool ready;               /* rep (or the stream's head) is here */
    hr_reply rep;
    bool sse;
    char *buf;                /* unsent stream bytes [off, len) */
    size_t off, len, cap;
    bool ended, clean;
};

static void box_unref(hr_outbox *b) {
    hr_http *h = b->h;
    pthread_mutex_lock(&h->mu);
    bool last = --b->refs == 0;
    if (last) {
        if (b->prev)
            b->prev->next = b->next;
        else
            h->boxes = b->next;
        if (b->next)
            b->next->prev = b->prev;
    }
    pthread_mutex_unlock(&h->mu);
    if (!last)
        return;
    if (b->client.fd >= 0)
        close(b->client.fd);
    free(b->rep.body);
    free(b->buf);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}

static hr_outbox *box_new(hr_http *h, struct MHD_Connection *c) {
    hr_outbox *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->h = h;
    b->c = c;
    b->refs = 2;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    b->client.fd = ci ? fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0) : -1;
    pthread_mutex_lock(&h->mu);
    b->next = h->boxes;
    if (h->boxes)
        h->boxes->prev = b;
    h->boxes = b;
    pthread_mutex_unlock(&h->mu);
    return b;
}

/* With b->mu held: let the connection go on. */
static void box_wake(hr_outbox *b) {
    if (b->c && b->suspended) {
        b->suspended = false;
        MHD_resume_connection(b->c);
    }
    pthread_cond_broadcast(&b->cv);
}

hr_client *hr__outbox_client(hr_outbox *b) { return &b->client; }

void hr__outbox_reply(hr_outbox *b, hr_reply rep) {
    pthread_mutex_lock(&b->mu);
    b->rep = rep;
    b->ready = b->ended = b->clean = true;
    box_wake(b);
    pthread_mutex_unlock(&b->mu);
}

void hr__outbox_stream(hr_outbox *b) {
    pthread_mutex_lock(&b->mu);
    b->rep = (hr_reply){.status = 200};
    b->sse = b->ready = true;
    box_wake(b);
    pthread_mutex_unlock(&b->mu);
}

int hr__outbox_write(hr_outbox *b, const char *p, size_t n, bool wait) {
    pthread_mutex_lock(&b->mu);
    while (wait && !atomic_load(&b->client.gone) && b->len - b->off > OUTBOX_HIGH_WATER)
        pthread_cond_wait(&b->cv, &b->mu);
    int rc = -1;
    if (b->len - b->off > OUTBOX_MAX) /* a reader this slow is as good as gone */
        atomic_store(&b->client.gone, 1);
    if (!atomic_load(&b->client.gone)) {
        if (b->off && b->off == b->len)
            b->off = b->len = 0;
        rc = hr__buf_append(&b->buf, &b->len, &b->cap, p, n) ? -1 : 0;
        box_wake(b);
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

void hr__outbox_end(hr_outbox *b, bool clean) {
    pthread_mutex_lock(&b->mu);
    if (!b->ready) { /* nothing was said yet: a 503 in the API's shape */
        b->rep = hr__error_reply(503, "server_error", NULL, "the request was cancelled");
        b->ready = true;
    }
    b->ended = true;
    b->clean = clean;
    box_wake(b);
    pthread_mutex_unlock(&b->mu);
}

void hr__outbox_release(hr_outbox *b) { box_unref(b); }

/* libmicrohttpd's reader of a stream: what is there, or suspend until more. */
static ssize_t box_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    hr_outbox *b = cls;
    pthread_mutex_lock(&b->mu);
    ssize_t n;
    if (b->off < b->len) {
        size_t k = b->len - b->off < max ? b->len - b->off : max;
        memcpy(buf, b->buf + b->off, k);
        b->off += k;
        pthread_cond_broadcast(&b->cv);
        n = (ssize_t)k;
    } else if (b->ended || b->h->closing || !b->c) {
        n = b->ended && b->clean ? MHD_CONTENT_READER_END_OF_STREAM
                                 : MHD_CONTENT_READER_END_WITH_ERROR;
    } else {
        b->suspended = true;
        MHD_suspend_connection(b->c);
        n = 0;
    }
    pthread_mutex_unlock(&b->mu);
    return n;
}

static void box_reader_free(void *cls) { (void)cls; /* the request's context owns the box */ }

/* ---- replies -------------------------------------------------------------------------------- */

static void add_cors(const hr_server *s, struct MHD_Response *r) {
    MHD_add_response_header(r, "Access-Control-Allow-Origin", s->o.allowed_origins);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "*");
}

/* An allocation failed (HEARTH_FAULT=alloc:N provokes it): a 503 whose
 * body needs no allocation of ours. */
static const char OOM_BODY[] = "{\"error\": {\"message\": \"out of memory\", \"type\": "
                               "\"server_error\", \"param\": null, \"code\": null}}";

/* Queue rep (consumed); close: the connection ends after it (the request's
 * body was not read, or its framing was bad). A reply without a body (its
 * JSON could not be built) is the out-of-memory 503. */
static enum MHD_Result send_reply(hr_server *s, struct MHD_Connection *c, hr_reply rep,
                                  bool close) {
    struct MHD_Response *r = rep.stream;
    if (!r) {
        if (!rep.body)
            rep.status = 503;
        const char *b = rep.body ? rep.body : OOM_BODY;
        r = MHD_create_response_from_buffer(strlen(b), (void *)b, MHD_RESPMEM_MUST_COPY);
        if (!r) {
            free(rep.body);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", rep.ctype ? rep.ctype : "application/json");
    }
    free(rep.body);
    add_cors(s, r);
    if (rep.retry_after) {
        char v[16];
        snprintf(v, sizeof v, "%u", rep.retry_after);
        MHD_add_response_header(r, "Retry-After", v);
    }
    if (close)
        MHD_add_response_header(r, "Connection", "close");
    if (rep.status >= 400)
        atomic_fetch_add(&s->http_errors, 1);
    enum MHD_Result ok = MHD_queue_response(c, rep.status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_stream(hr_server *s, struct MHD_Connection *c, hr_outbox *b) {
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                               box_reader, b, box_reader_free);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    add_cors(s, r);
    enum MHD_Result ok = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ok;
}

/* ---- generations ---------------------------------------------------------------------------- */

typedef struct work {
    hr_server *s;
    hr_outbox *box;
    char *method, *url, *body;
    size_t len;
    char *headers; /* a front's: the request's headers */
} work;

/* A front's request (server/front.h): its handler answers through the box;
 * a box it left unanswered ends in a 503. */
static void front_run(work *w) {
    hr_outbox *b = w->box;
    hr_front_req rq = {.method = w->method, .url = w->url, .headers = w->headers,
                       .body = w->body, .len = w->len,
                       .generation = hr__is_generation(w->method, w->url)};
    w->s->o.front->handle(w->s->o.front->ctx, b, &rq);
    pthread_mutex_lock(&b->mu);
    bool open = !b->ended;
    pthread_mutex_unlock(&b->mu);
    if (open)
        hr__outbox_end(b, false);
}

/* Run a generation route and pump its stream into the box. */
static void *worker(void *arg) {
    work *w = arg;
    hr_server *s = w->s;
    hr_outbox *b = w->box;
    if (s->o.front) {
        front_run(w);
    } else {
        hr_reply rep = hr__route(s, NULL, &b->client, w->method, w->url, w->body, w->len);
        if (rep.sse) {
            hr_drive *r = rep.sse;
            hr__outbox_stream(b);
            bool more = true;
            while (more) {
                more = r->produce(r);
                if (r->out_len && hr__outbox_write(b, r->out, r->out_len, true) < 0)
                    more = false;
                r->out_len = 0;
            }
            hr__outbox_end(b, r->done);
            r->release(r);
        } else {
            hr__outbox_reply(b, rep);
        }
    }
    hr__outbox_release(b);
    free(w->method);
    free(w->url);
    free(w->body);
    free(w->headers);
    free(w);
    hr_http *h = s->http;
    pthread_mutex_lock(&h->mu);
    h->n_workers--;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* Hand the request to a worker (or the engine child); the box then belongs
 * to the request's context too. false: it could not start (out of memory,
 * no thread): the caller answers 503. */
static bool dispatch(hr_server *s, struct MHD_Connection *c, hr_outbox *b, const char *method,
                     const char *url, const char *body, size_t len) {
    if (s->child)
        return hr__child_submit(s->child, b, method, url, body, len);
    work *w = calloc(1, sizeof *w);
    if (!w)
        return false;
    *w = (work){.s = s, .box = b, .method = strdup(method), .url = strdup(url),
                .body = malloc(len + 1), .len = len};
    if (!w->method || !w->url || !w->body)
        goto fail;
    if (s->o.front) {
        if (!(w->headers = hr__front_headers(c)))
            goto fail;
    }
    memcpy(w->body, body, len);
    w->body[len] = 0;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    hr_http *h = s->http;
    pthread_mutex_lock(&h->mu);
    h->n_workers++;
    pthread_mutex_unlock(&h->mu);
    pthread_t t;
    int rc = pthread_create(&t, &at, worker, w);
    pthread_attr_destroy(&at);
    if (!rc)
        return true;
    pthread_mutex_lock(&h->mu);
    h->n_workers--;
    pthread_mutex_unlock(&h->mu);
fail:
    free(w->method);
    free(w->url);
    free(w->body);
    free(w->headers);
    free(w);
    return false;
}

/* ---- the access handler --------------------------------------------------------------------- */

typedef struct req_ctx {
    char *body;
    size_t len, cap;
    bool too_large;
    bool oom;         /* the body could not be stored: a 503 at the end */
    bool answered;    /* from the headers alone (bad framing) */
    bool admitted;    /* counted in s->active */
    hr_outbox *box;
} req_ctx;

/* The answer to a request whose box is ready; or suspend until it is. */
static enum MHD_Result answer_box(hr_server *s, struct MHD_Connection *c, req_ctx *ctx) {
    hr_outbox *b = ctx->box;
    pthread_mutex_lock(&b->mu);
    if (!b->ready) {
        if (s->http->closing) {
            pthread_mutex_unlock(&b->mu);
            return MHD_NO;
        }
        b->suspended = true;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&b->mu);
        return MHD_YES;
    }
    bool sse = b->sse;
    hr_reply rep = b->rep;
    b->rep.body = NULL;
    pthread_mutex_unlock(&b->mu);
    return sse ? send_stream(s, c, b) : send_reply(s, c, rep, false);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version,
                               const char *upload, size_t *upload_size, void **con_cls) {
    hr_server *s = cls;
    req_ctx *ctx = *con_cls;
    if (!ctx) { /* the headers: framing is checked before any body is read */
        if (!(ctx = calloc(1, sizeof *ctx)))
            return send_reply(s, c, (hr_reply){.status = 503}, true);
        *con_cls = ctx;
        hr_reply rep;
        if (hr__check_framing(s, c, version, &rep)) {
            atomic_fetch_add(&s->http_requests, 1);
            ctx->answered = true; /* whatever body comes is dropped */
            return send_reply(s, c, hr__shaped(s, url, rep), true);
        }
        return MHD_YES;
    }
    if (ctx->answered) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (ctx->box) /* resumed: the answer is ready */
        return answer_box(s, c, ctx);
    if (*upload_size) { /* body bytes, possibly in several calls */
        size_t n = *upload_size;
        *upload_size = 0;
        if (ctx->oom)
            return MHD_YES;
        if (ctx->too_large || ctx->len + n > s->o.max_body) {
            ctx->too_large = true;
            return MHD_YES;
        }
        if (hr__buf_append(&ctx->body, &ctx->len, &ctx->cap, upload, n))
            ctx->oom = true;
        return MHD_YES;
    }
    rec_busy(s->http, c, true);
    atomic_fetch_add(&s->http_requests, 1);
    hr_log(HR_LOG_DEBUG, "%s %s (%zu bytes)", method, url, ctx->len);
    if (!strcmp(method, "OPTIONS")) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        return send_reply(s, c, (hr_reply){.status = 204, .stream = r}, false);
    }
    if (ctx->oom) /* send_reply's out-of-memory body */
        return send_reply(s, c, (hr_reply){.status = 503}, true);
    if (ctx->too_large)
        return send_reply(s, c, hr__shaped(s, url, hr__error_reply(413, "invalid_request_error",
                                                                   NULL, "The request body "
                                                                   "exceeds %zu bytes",
                                                                   s->o.max_body)),
                          true);
    if (atomic_load(&s->shutting_down))
        return send_reply(s, c, hr__shaped(s, url, hr__error_reply(503, "server_error", NULL,
                                                                   "The server is shutting "
                                                                   "down")),
                          false);
    if (!strncmp(url, "/admin/", 7))
        return send_reply(s, c, hr__route_admin(s, c, method, url), false);
    bool gen = hr__is_generation(method, url);
    bool remote = s->o.front || (s->child && strcmp(url, "/health") &&
                                 !(!s->o.no_ui && !strcmp(method, "GET") && hr_ui_find(url)));
    if (!gen && !remote)
        return send_reply(s, c, hr__route(s, c, NULL, method, url, ctx->body ? ctx->body : "",
                                          ctx->len),
                          false);
    if (gen) {
        hr_reply rep = {0};
        if (atomic_load(&s->draining))
            rep = hr__error_reply(503, "server_error", NULL,
                                  "The server is draining: it finishes what it runs and "
                                  "takes no new requests");
        else if (atomic_fetch_add(&s->active, 1) >= s->o.max_requests) {
            atomic_fetch_sub(&s->active, 1);
            rep = hr__error_reply(429, "rate_limit_error", NULL,
                                  "%d requests are running or queued (--max-requests); "
                                  "retry later", s->o.max_requests);
            rep.retry_after = 1;
        } else {
            ctx->admitted = true;
        }
        if (rep.status)
            return send_reply(s, c, hr__shaped(s, url, rep), false);
    }
    if (!(ctx->box = box_new(s->http, c)) ||
        !dispatch(s, c, ctx->box, method, url, ctx->body ? ctx->body : "", ctx->len)) {
        if (ctx->box) {
            ctx->box->refs--; /* the producer's, never taken */
            box_unref(ctx->box);
            ctx->box = NULL;
        }
        const char *down = hr__engine_down(s);
        hr_reply rep = down ? hr__error_reply(503, "server_error", NULL,
                                              "the engine is not serving: %s", down)
                            : hr__error_reply(503, "server_error", NULL,
                                              "cannot start the request (out of threads or "
                                              "memory)");
        rep.retry_after = down ? 1 : 0;
        return send_reply(s, c, hr__shaped(s, url, rep), false);
    }
    return answer_box(s, c, ctx);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    (void)toe;
    hr_server *s = cls;
    req_ctx *ctx = *con_cls;
    if (c)
        rec_busy(s->http, c, false);
    if (!ctx)
        return;
    if (ctx->box) { /* the producer learns the client is gone and stops */
        hr_outbox *b = ctx->box;
        pthread_mutex_lock(&b->mu);
        atomic_store(&b->client.gone, 1);
        b->c = NULL;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        if (s->child)
            hr__child_cancel(s->child, b);
        box_unref(b);
    }
    if (ctx->admitted)
        atomic_fetch_sub(&s->active, 1);
    free(ctx->body);
    free(ctx);
    *con_cls = NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

/* libmicrohttpd's messages (a client that went away, a bad request line):
 * DEBUG, one line each; they are the clients' doing. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = 0;
    hr_log(HR_LOG_DEBUG, "http: %s", msg);
}

/* Room for the connection cap in the process' descriptor limit. */
static void raise_fd_limit(hr_server *s) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return;
    rlim_t want = (rlim_t)s->o.max_connections + 256;
    if (rl.rlim_cur < want) {
        rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur < want) {
        int cap = rl.rlim_cur > 512 ? (int)(rl.rlim_cur - 256) : 256;
        hr_log(HR_LOG_WARN, "--max-connections %d: the descriptor limit is %llu; using %d",
               s->o.max_connections, (unsigned long long)rl.rlim_cur, cap);
        s->o.max_connections = cap;
    }
}

/* --host as a socket address: IPv4 ("127.0.0.1", "0.0.0.0", "localhost") or
 * IPv6 ("::1", "[::1]", "::"); *flags gets MHD's IPv6 flags (dual stack for
 * "::": IPv4 clients too, as IPV6_V6ONLY off). */
static int listen_addr(const char *host, int port, struct sockaddr_storage *ss,
                       unsigned *flags, hr_error *err) {
    memset(ss, 0, sizeof *ss);
    *flags = 0;
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
    char h[INET6_ADDRSTRLEN + 2];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof h) {
        memcpy(h, host + 1, n - 2);
        h[n - 2] = 0;
    } else
        snprintf(h, sizeof h, "%s", host);
    if (inet_pton(AF_INET, h, &a4->sin_addr) == 1 || !strcmp(h, "localhost")) {
        if (!strcmp(h, "localhost"))
            a4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        return 0;
    }
    if (inet_pton(AF_INET6, h, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *flags = IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr) ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
        return 0;
    }
    return hr_err(err, HR_EINVAL, "--host '%s' is not an IPv4 or IPv6 address", host);
}

int hr__http_start(hr_server *s, hr_error *err) {
    struct sockaddr_storage addr;
    unsigned v6;
    int rc = listen_addr(s->o.host, s->o.port, &addr, &v6, err);
    if (rc)
        return rc;
    hr_http *h = calloc(1, sizeof *h);
    if (!h)
        return hr_err(err, HR_ENOMEM, "out of memory");
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    s->http = h;
    raise_fd_limit(s);
    /* STRICT_FOR_CLIENT 0: a request without Host (or with whitespace
     * before a field's colon) reaches hr__check_framing, which refuses it
     * in the API's error shape; at 1 libmicrohttpd sent its own HTML 400 */
    h->daemon = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | v6,
        (uint16_t)s->o.port, NULL, NULL, handler, s, MHD_OPTION_SOCK_ADDR, &addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HR_HTTP_THREADS, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)s->o.max_connections, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.timeout,
        MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_NOTIFY_CONNECTION, notify_conn,
        s, MHD_OPTION_UNESCAPE_CALLBACK, hr__unescape, NULL, MHD_OPTION_STRICT_FOR_CLIENT, 0,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_END);
    if (!h->daemon) {
        hr__http_stop(s);
        return hr_err(err, HR_EIO, "cannot listen on %s:%d (in use?)", s->o.host, s->o.port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->o.port;
    h->sweeper_on = !pthread_create(&h->sweeper, NULL, sweeper, s);
    return 0;
}

/* h->cv for 20 ms at most (h->mu held) */
static void wait_20ms(hr_http *h) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&h->cv, &h->mu, &ts);
}

void hr__http_stop(hr_server *s) {
    hr_http *h = s->http;
    if (!h)
        return;
    /* generations end with an error event; new requests get 503. The
     * daemon keeps accepting until MHD_stop_daemon: MHD_quiesce_daemon on
     * an epoll daemon with a thread pool races its workers' own removal of
     * the listening socket, and libmicrohttpd 0.9.75 aborts the process on
     * the loser's ENOENT (tests/e2e/server.sh provokes it) */
    atomic_store(&s->shutting_down, 1);
    /* the workers see shutting_down within a wait step; give their last
     * events a moment to go out */
    double t0 = hr_now();
    pthread_mutex_lock(&h->mu);
    while (h->n_workers > 0 && hr_now() - t0 < 2.0) {
        wait_20ms(h);
    }
    /* ...and for their connections to take the last bytes (an ended stream
     * whose connection has not let go of its box), at most 1 s more */
    for (t0 = hr_now(); hr_now() - t0 < 1.0;) {
        bool flushing = false;
        for (hr_outbox *b = h->boxes; b && !flushing; b = b->next) {
            pthread_mutex_lock(&b->mu);
            flushing = b->c && b->ended;
            pthread_mutex_unlock(&b->mu);
        }
        if (!flushing)
            break;
        wait_20ms(h);
    }
    /* no connection may stay suspended when the daemon stops */
    h->closing = true;
    for (hr_outbox *b = h->boxes; b; b = b->next) {
        pthread_mutex_lock(&b->mu);
        box_wake(b);
        pthread_mutex_unlock(&b->mu);
    }
    h->stop_sweeper = true;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->sweeper_on)
        pthread_join(h->sweeper, NULL);
    if (h->daemon)
        MHD_stop_daemon(h->daemon);
    /* workers still running hold their boxes, never the connection */
    pthread_mutex_lock(&h->mu);
    while (h->n_workers > 0)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
    free(h);
    s->http = NULL;
}
