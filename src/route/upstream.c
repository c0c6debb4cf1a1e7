/* Forwarding to a replica with libcurl (upstream.h). */
#include "route/upstream.h"
#include "core/header_line.h"
#include "core/log.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define BODY_MAX ((size_t)64 << 20) /* a whole (not streamed) answer at most */

static pthread_once_t once = PTHREAD_ONCE_INIT;
static CURLcode init_rc;

static void init(void) { init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

int hr_upstream_global_init(void) {
    pthread_once(&once, init);
    return init_rc == CURLE_OK ? 0 : -1;
}

/* ---- bodies ------------------------------------------------------------------------------------ */

typedef struct mem {
    char *p;
    size_t len, cap;
    bool too_large;
} mem;

static bool mem_put(mem *m, const char *s, size_t n) {
    if (m->len + n > BODY_MAX) {
        m->too_large = true;
        return false;
    }
    if (m->len + n + 1 > m->cap) {
        size_t cap = m->cap ? m->cap : 4096;
        while (cap < m->len + n + 1)
            cap *= 2;
        char *q = realloc(m->p, cap);
        if (!q)
            return false;
        m->p = q;
        m->cap = cap;
    }
    memcpy(m->p + m->len, s, n);
    m->len += n;
    m->p[m->len] = 0;
    return true;
}

static size_t to_mem(char *p, size_t sz, size_t nm, void *ud) {
    return mem_put(ud, p, sz * nm) ? sz * nm : 0;
}

/* The answer's content type as one of ours (the box wants a static string). */
static const char *static_ctype(const char *ct) {
    static const char *const known[] = {
        "application/json", "text/event-stream", "text/plain; version=0.0.4; charset=utf-8",
        "text/plain; charset=utf-8", "text/html; charset=utf-8", "text/css; charset=utf-8",
        "text/javascript; charset=utf-8", "application/javascript", "image/svg+xml",
        "image/png", "image/x-icon"};
    if (!ct)
        return "application/json";
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcasecmp(ct, known[i]))
            return known[i];
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const char *semi = strchr(known[i], ';');
        size_t n = semi ? (size_t)(semi - known[i]) : strlen(known[i]);
        if (!strncasecmp(ct, known[i], n))
            return known[i];
    }
    return "application/octet-stream";
}

/* ---- forwarding -------------------------------------------------------------------------------- */

typedef struct xfer {
    hr_upstream *u;
    CURL *curl;
    bool decided, streaming, gone, held;
    size_t sent;
    mem body;
    unsigned retry_after;
    char idbuf[256]; /* the answer's first bytes, for find_id */
    size_t idlen;
    bool id_found;
    curl_socket_t fd; /* the replica's connection */
} xfer;

static void find_id(xfer *x, const char *p, size_t n) {
    if (x->id_found || x->idlen + 1 >= sizeof x->idbuf)
        return;
    size_t k = n < sizeof x->idbuf - 1 - x->idlen ? n : sizeof x->idbuf - 1 - x->idlen;
    memcpy(x->idbuf + x->idlen, p, k);
    x->idlen += k;
    x->idbuf[x->idlen] = 0;
    const char *s = strstr(x->idbuf, "\"resp_");
    const char *e = s ? strchr(s + 1, '"') : NULL;
    if (e) {
        char id[128];
        x->id_found = true;
        if ((size_t)(e - s - 1) < sizeof id) {
            snprintf(id, sizeof id, "%.*s", (int)(e - s - 1), s + 1);
            x->u->on_id(x->u, id);
        }
    }
}

static void decide(xfer *x) {
    if (x->decided)
        return;
    x->decided = true;
    long st = 0;
    char *ct = NULL;
    curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &st);
    curl_easy_getinfo(x->curl, CURLINFO_CONTENT_TYPE, &ct);
    x->u->status = st;
    if (st == 503 && x->u->hold_503)
        x->held = true;
    else if (st == 200 && ct && !strncasecmp(ct, "text/event-stream", 17)) {
        x->streaming = true;
        hr_front_stream(x->u->box);
    }
}

/* The client left: the replica's connection is to end with a reset, not a
 * FIN. A replica takes a FIN for a half-close (a client may end its
 * input and still wait for the answer) and would finish the generation
 * for nobody; a reset is a hang-up, and it cancels
 * (docs/operations.md, "Client disconnects"). */
static void client_gone(xfer *x) {
    x->gone = true;
    if (x->fd != CURL_SOCKET_BAD) {
        struct linger l = {.l_onoff = 1, .l_linger = 0};
        setsockopt(x->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    }
    hr_log(HR_LOG_DEBUG, "%s%s: the client left; the transfer is aborted", x->u->base,
           x->u->rq->url);
}

/* The replica's socket, as libcurl opens it (for client_gone). */
static int on_socket(void *ud, curl_socket_t fd, curlsocktype purpose) {
    xfer *x = ud;
    if (purpose == CURLSOCKTYPE_IPCXN)
        x->fd = fd;
    return CURL_SOCKOPT_OK;
}

static size_t on_body(char *p, size_t sz, size_t nm, void *ud) {
    xfer *x = ud;
    size_t n = sz * nm;
    decide(x);
    if (x->u->find_id && x->u->on_id)
        find_id(x, p, n);
    if (!x->streaming)
        return mem_put(&x->body, p, n) ? n : 0;
    if (hr_front_write(x->u->box, p, n) < 0) {
        client_gone(x);
        return 0;
    }
    x->sent += n;
    return n;
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud) {
    xfer *x = ud;
    size_t n = sz * nm;
    hr_header_line l;
    if (hr_header_line_split(p, n, &l) && hr_header_line_is(&l, "Retry-After"))
        x->retry_after = (unsigned)strtoul(l.value, NULL, 10);
    return n;
}

static int on_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    (void)a, (void)b, (void)c, (void)d;
    xfer *x = ud;
    if (hr_front_gone(x->u->box)) {
        client_gone(x);
        return 1;
    }
    return 0;
}

/* The client's headers for the replica: hop-by-hop ones and those libcurl
 * writes itself left out. */
static struct curl_slist *headers_of(const char *hb) {
    static const char *const skip[] = {"host", "content-length", "connection", "keep-alive",
                                       "transfer-encoding", "expect", "te", "upgrade",
                                       "proxy-connection", "accept-encoding"};
    struct curl_slist *l = curl_slist_append(NULL, "Expect:");
    for (const char *p = hb; l && p && *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        const char *colon = memchr(p, ':', n);
        bool keep = colon != NULL;
        for (size_t i = 0; keep && i < sizeof skip / sizeof skip[0]; i++)
            keep = !((size_t)(colon - p) == strlen(skip[i]) && !strncasecmp(p, skip[i], strlen(skip[i])));
        if (keep) {
            char line[8192];
            snprintf(line, sizeof line, "%.*s", (int)n, p);
            struct curl_slist *t = curl_slist_append(l, line);
            if (!t) {
                curl_slist_free_all(l);
                return NULL;
            }
            l = t;
        }
        p = e ? e + 1 : p + n;
    }
    return l;
}

hr_upstream_outcome hr_upstream_forward(hr_upstream *u) {
    const hr_front_req *rq = u->rq;
    xfer x = {.u = u, .fd = CURL_SOCKET_BAD};
    u->status = 0;
    u->held = NULL;
    u->why[0] = 0;
    char url[4096];
    snprintf(url, sizeof url, "%s%s", u->base, rq->url);
    struct curl_slist *hdrs = headers_of(rq->headers);
    if (!hdrs || !(x.curl = curl_easy_init())) {
        curl_slist_free_all(hdrs);
        snprintf(u->why, sizeof u->why, "out of memory");
        return HR_UPSTREAM_NO_ANSWER;
    }
    CURL *c = x.curl;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, (long)(u->connect_timeout * 1000));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &x);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_SOCKOPTFUNCTION, on_socket);
    curl_easy_setopt(c, CURLOPT_SOCKOPTDATA, &x);
    if (!strcmp(rq->method, "POST") || rq->len) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, rq->body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)rq->len);
    }
    if (!strcmp(rq->method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (strcmp(rq->method, "GET") && strcmp(rq->method, "POST"))
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, rq->method);
    CURLcode cc = curl_easy_perform(c);
    if (cc == CURLE_OK)
        decide(&x); /* an answer without a body */
    hr_upstream_outcome out;
    if (x.gone) {
        out = HR_UPSTREAM_GONE;
        if (x.streaming)
            hr_front_end(u->box, false);
    } else if (x.streaming) {
        out = cc == CURLE_OK ? HR_UPSTREAM_ANSWERED : HR_UPSTREAM_BROKEN;
        if (cc != CURLE_OK)
            snprintf(u->why, sizeof u->why, "%s after %zu bytes", curl_easy_strerror(cc),
                     x.sent);
        hr_front_end(u->box, cc == CURLE_OK);
    } else if (cc != CURLE_OK || !u->status) {
        out = HR_UPSTREAM_NO_ANSWER;
        snprintf(u->why, sizeof u->why, "%s",
                 x.body.too_large ? "the answer is too large" : curl_easy_strerror(cc));
    } else if (x.held) {
        out = HR_UPSTREAM_NO_ANSWER;
        u->held = x.body.p;
        x.body.p = NULL;
        snprintf(u->why, sizeof u->why, "503 from the replica");
    } else {
        char *ct = NULL;
        curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
        char *body = x.body.p ? x.body.p : strdup("");
        x.body.p = NULL;
        hr_front_reply(u->box, (unsigned)u->status, static_ctype(ct), body, x.retry_after);
        out = HR_UPSTREAM_ANSWERED;
    }
    free(x.body.p);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    return out;
}

/* ---- small GETs -------------------------------------------------------------------------------- */

long hr_upstream_get(const char *base, const char *path, double timeout, char **body) {
    *body = NULL;
    char url[4096];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *c = curl_easy_init();
    if (!c)
        return 0;
    mem m = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)(timeout * 1000));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, to_mem);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &m);
    long st = 0;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &st);
    curl_easy_cleanup(c);
    if (st)
        *body = m.p ? m.p : strdup("");
    else
        free(m.p);
    return st;
}
