/* One exchange with a replica over HTTP (libcurl, one easy handle per
 * exchange, on the calling thread): a client's request forwarded with its
 * body and headers unchanged (hop-by-hop headers excepted), the answer
 * passed to the client's box as it arrives (an event stream byte for byte,
 * no buffering; any other answer whole, with its status, content type and
 * Retry-After); and the small GETs of the health checker. */
#ifndef HR_ROUTE_UPSTREAM_H
#define HR_ROUTE_UPSTREAM_H

#include "server/front.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum hr_upstream_outcome {
    HR_UPSTREAM_ANSWERED,  /* the replica's answer went to the client (any status) */
    HR_UPSTREAM_NO_ANSWER, /* nothing reached the client: no connection, no response, or
                            * (with hold_503) a 503; the client may be answered elsewhere */
    HR_UPSTREAM_BROKEN,    /* the stream broke after bytes went out (the client's
                            * connection is closed without the stream's end) */
    HR_UPSTREAM_GONE,      /* the client left: the transfer was aborted */
} hr_upstream_outcome;

typedef struct hr_upstream {
    const char *base;       /* the replica: "http://host:port" */
    const hr_front_req *rq;
    hr_outbox *box;
    bool hold_503;          /* a 503 is kept (status, body) instead of passed on */
    double connect_timeout; /* seconds */
    /* out */
    long status;            /* the replica's status, 0 when none came */
    char *held;             /* with hold_503 and a 503: its body (the caller frees) */
    /* find_id: the first "resp_..." id of the answer goes to on_id(u, id)
     * before any of the answer reaches the client (so a request that
     * names it cannot come before the caller knows it) */
    bool find_id;
    void (*on_id)(struct hr_upstream *u, const char *id);
    void *ctx;              /* the caller's, for on_id */
    char why[256];          /* NO_ANSWER / BROKEN: why */
} hr_upstream;

hr_upstream_outcome hr_upstream_forward(hr_upstream *u);

/* GET base + path within timeout seconds: the status (0: no answer) and
 * the body (*body malloc'd, NUL-terminated, or NULL). */
long hr_upstream_get(const char *base, const char *path, double timeout, char **body);

/* libcurl's global state, once per process before any exchange. */
int hr_upstream_global_init(void);

#endif
