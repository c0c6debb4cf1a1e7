/* The HTTP front without models, for a layer above the server (src/route/:
 * `hearth route`): the server's libmicrohttpd daemon with its limits
 * (connection cap, slow clients, --max-requests, draining, the admin
 * routes: docs/operations.md) answers OPTIONS and /admin/... itself and hands
 * every other request to front->handle, on a worker thread of its own,
 * with the request's connection suspended until an answer comes through
 * the box. A generation route (hr_front_req.generation) is refused with a
 * 503 while the server drains and a 429 past --max-requests, as a
 * server's. */
#ifndef HR_SERVER_FRONT_H
#define HR_SERVER_FRONT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct hr_outbox hr_outbox;

typedef struct hr_front_req {
    const char *method, *url;
    const char *headers; /* the request's headers, "Name: value\n" each */
    const char *body;    /* NUL-terminated; len bytes */
    size_t len;
    bool generation;     /* POST to a generation route */
} hr_front_req;

typedef struct hr_front {
    void *ctx;
    /* Answer rq through box (hr_front_reply, or hr_front_stream + writes +
     * hr_front_end) before returning; a box left unanswered ends in a 503.
     * Called on a worker thread; rq lives until it returns. */
    void (*handle)(void *ctx, hr_outbox *box, const hr_front_req *rq);
} hr_front;

/* The client left (its connection closed or was reset): drop the rest. */
bool hr_front_gone(hr_outbox *b);
/* A whole answer: status, ctype (static; NULL: application/json), body
 * (malloc'd, owned by the box from now on; NULL: an out-of-memory 503),
 * retry_after seconds (0: no header). */
void hr_front_reply(hr_outbox *b, unsigned status, const char *ctype, char *body,
                    unsigned retry_after);
/* An error in the shape of url's API (OpenAI's; Anthropic's under
 * /v1/messages). */
void hr_front_error(hr_outbox *b, const char *url, unsigned status, const char *type,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The head of an event stream (200, text/event-stream), then its bytes
 * (-1: the client is gone; blocks while a slow reader is 1 MiB behind),
 * then its end (clean: the last event was sent; else the connection closes
 * without the chunked terminator). */
void hr_front_stream(hr_outbox *b);
int hr_front_write(hr_outbox *b, const char *p, size_t n);
void hr_front_end(hr_outbox *b, bool clean);

#endif
