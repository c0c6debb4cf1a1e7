/* --isolate's engine child (isolate.h): the parent's requests, each on a
 * thread of its own through the same routes as a plain server, their
 * answers back as frames; and the frames themselves. */
#include "server/isolate.h"
#include "core/error.h"
#include "core/log.h"
#include "server/drive.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FRAME_MAX ((uint32_t)1 << 30)

/* ---- frames --------------------------------------------------------------------------------- */

/* -1: the peer is gone; -2: the socket's SO_SNDTIMEO/SO_RCVTIMEO passed
 * (the parent sets them: a stopped child must not hold it mid-frame). */
static int write_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return -2;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return -2;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* One frame of up to three pieces, written whole under mu. */
int hr__frame_send(int fd, pthread_mutex_t *mu, uint32_t type, uint32_t id, const void *a,
                      size_t na, const void *b, size_t nb, const void *c, size_t nc) {
    uint32_t h[3] = {type, id, (uint32_t)(na + nb + nc)};
    pthread_mutex_lock(mu);
    int rc = write_all(fd, h, sizeof h) || (na && write_all(fd, a, na)) ||
             (nb && write_all(fd, b, nb)) || (nc && write_all(fd, c, nc));
    if (rc) /* a frame cut short leaves the stream unreadable: end it for both sides */
        shutdown(fd, SHUT_RDWR);
    pthread_mutex_unlock(mu);
    return rc ? -1 : 0;
}

/* The next frame: *payload malloc'd (NUL-terminated). -1: the peer is gone
 * or spoke nonsense. */
int hr__frame_recv(int fd, uint32_t *type, uint32_t *id, char **payload, uint32_t *len) {
    uint32_t h[3];
    int rc = read_all(fd, h, sizeof h);
    if (rc || h[2] > FRAME_MAX)
        return rc ? rc : -1;
    char *p = malloc((size_t)h[2] + 1);
    if (!p)
        return -1;
    if (h[2] && (rc = read_all(fd, p, h[2]))) {
        free(p);
        return rc;
    }
    p[h[2]] = 0;
    *type = h[0];
    *id = h[1];
    *payload = p;
    *len = h[2];
    return 0;
}

/* ---- the child ------------------------------------------------------------------------------ */

typedef struct creq {
    struct creq *next;
    uint32_t id;
    hr_client client;
    struct cstate *cs;
    char *payload;
    uint32_t len;
} creq;

typedef struct cstate {
    hr_server *s;
    int fd;
    pthread_mutex_t wmu, mu;
    pthread_cond_t cv;
    creq *reqs;
    int n_running;
} cstate;

static void *child_worker(void *arg) {
    creq *r = arg;
    cstate *cs = r->cs;
    const char *method = r->payload;
    size_t ml = strnlen(method, r->len);
    const char *url = ml < r->len ? method + ml + 1 : "";
    size_t ul = ml < r->len ? strnlen(url, r->len - ml - 1) : 0;
    size_t off = ml + ul + 2;
    const char *body = off <= r->len ? r->payload + off : "";
    size_t blen = off <= r->len ? r->len - off : 0;
    hr_reply rep = {0};
    atomic_fetch_add(&cs->s->http_requests, 1);
    if (ml >= r->len || off > r->len)
        rep = hr__error_reply(400, "invalid_request_error", NULL, "malformed relay frame");
    else
        rep = hr__route(cs->s, NULL, &r->client, method, url, body, blen);
    if (rep.sse) {
        hr_drive *d = rep.sse;
        hr__frame_send(cs->fd, &cs->wmu, F_STREAM, r->id, NULL, 0, NULL, 0, NULL, 0);
        bool more = true;
        while (more) {
            more = d->produce(d);
            if (d->out_len && hr__frame_send(cs->fd, &cs->wmu, F_DATA, r->id, d->out, d->out_len,
                                         NULL, 0, NULL, 0))
                atomic_store(&r->client.gone, 1);
            d->out_len = 0;
        }
        uint8_t clean = d->done;
        hr__frame_send(cs->fd, &cs->wmu, F_END, r->id, &clean, 1, NULL, 0, NULL, 0);
        d->release(d);
    } else {
        if (rep.stream) { /* a made response (static files) is the parent's to serve */
            MHD_destroy_response(rep.stream);
            rep = hr__error_reply(500, "server_error", NULL, "not supported yet: %s with "
                                  "--isolate", url);
        }
        uint32_t h[2] = {rep.status, rep.retry_after};
        const char *ct = rep.ctype ? rep.ctype : "application/json";
        const char *b = rep.body ? rep.body : "{}";
        hr__frame_send(cs->fd, &cs->wmu, F_REPLY, r->id, h, sizeof h, ct, strlen(ct) + 1, b,
                   strlen(b));
        free(rep.body);
    }
    pthread_mutex_lock(&cs->mu);
    for (creq **p = &cs->reqs; *p; p = &(*p)->next)
        if (*p == r) {
            *p = r->next;
            break;
        }
    cs->n_running--;
    pthread_cond_broadcast(&cs->cv);
    pthread_mutex_unlock(&cs->mu);
    free(r->payload);
    free(r);
    return NULL;
}

static void child_start_request(cstate *cs, uint32_t id, char *payload, uint32_t len) {
    creq *r = calloc(1, sizeof *r);
    if (!r) {
        free(payload);
        return;
    }
    *r = (creq){.id = id, .cs = cs, .payload = payload, .len = len};
    r->client.fd = -1;
    pthread_mutex_lock(&cs->mu);
    r->next = cs->reqs;
    cs->reqs = r;
    cs->n_running++;
    pthread_mutex_unlock(&cs->mu);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    if (pthread_create(&t, &at, child_worker, r)) { /* answered as a 503 */
        pthread_mutex_lock(&cs->mu);
        cs->reqs = r->next;
        cs->n_running--;
        pthread_mutex_unlock(&cs->mu);
        hr_reply rep = hr__error_reply(503, "server_error", NULL, "the engine is out of threads");
        uint32_t h[2] = {rep.status, 0};
        hr__frame_send(cs->fd, &cs->wmu, F_REPLY, id, h, sizeof h, "application/json", 17,
                   rep.body, strlen(rep.body));
        free(rep.body);
        free(payload);
        free(r);
    }
    pthread_attr_destroy(&at);
}

int hr_server_serve_parent(hr_server *s) {
    cstate cs = {.s = s, .fd = s->o.engine_fd};
    pthread_mutex_init(&cs.wmu, NULL);
    pthread_mutex_init(&cs.mu, NULL);
    pthread_cond_init(&cs.cv, NULL);
    int status = 0;
    hr__frame_send(cs.fd, &cs.wmu, F_READY, 0, NULL, 0, NULL, 0, NULL, 0);
    for (;;) {
        struct pollfd pf = {.fd = cs.fd, .events = POLLIN};
        int k = poll(&pf, 1, 1000);
        const char *dead = hr_server_dead(s);
        if (dead) { /* a lost device: exit, the parent starts another */
            hr_log(HR_LOG_ERROR, "engine: %s; exiting", dead);
            status = 1;
            break;
        }
        if (k <= 0)
            continue;
        uint32_t type, id, len;
        char *p;
        if (hr__frame_recv(cs.fd, &type, &id, &p, &len))
            break; /* the parent is gone or stopping */
        if (type == F_REQ) {
            child_start_request(&cs, id, p, len);
            continue;
        }
        if (type == F_CANCEL) {
            pthread_mutex_lock(&cs.mu);
            for (creq *r = cs.reqs; r; r = r->next)
                if (r->id == id)
                    atomic_store(&r->client.gone, 1);
            pthread_mutex_unlock(&cs.mu);
        } else if (type == F_PING) {
            hr__frame_send(cs.fd, &cs.wmu, F_PONG, 0, NULL, 0, NULL, 0, NULL, 0);
        }
        free(p);
    }
    /* what runs ends (shutting_down: an error event each), then out */
    atomic_store(&s->shutting_down, 1);
    pthread_mutex_lock(&cs.mu);
    for (creq *r = cs.reqs; r; r = r->next)
        atomic_store(&r->client.gone, 1);
    while (cs.n_running > 0)
        pthread_cond_wait(&cs.cv, &cs.mu);
    pthread_mutex_unlock(&cs.mu);
    close(cs.fd);
    pthread_mutex_destroy(&cs.wmu);
    pthread_mutex_destroy(&cs.mu);
    pthread_cond_destroy(&cs.cv);
    return status;
}

/* The child reports a load failure before exiting (hr_cmd_serve calls it). */
void hr_server_child_fail(int fd, const char *why) {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    hr__frame_send(fd, &mu, F_FAIL, 0, why, strlen(why) + 1, NULL, 0, NULL, 0);
}
