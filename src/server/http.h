/* The HTTP layer's answer box (http.c): what one request's producer (a
 * generation worker in this process, or isolate.c relaying the engine
 * child) hands to the connection that waits for it. The connection is
 * suspended while it waits; every call below resumes it when there is
 * something to send. Thread-safe; refcounted between the connection and
 * the producer. */
#ifndef HR_SERVER_HTTP_H
#define HR_SERVER_HTTP_H

#include "server/internal.h"

typedef struct hr_outbox hr_outbox;

/* The client as the producer watches it (gone once the connection closed). */
hr_client *hr__outbox_client(hr_outbox *b);
/* A whole reply (body owned by the box from now on). Ends the box. */
void hr__outbox_reply(hr_outbox *b, hr_reply rep);
/* The head of an event stream (status 200, text/event-stream). */
void hr__outbox_stream(hr_outbox *b);
/* Stream bytes. With wait, blocks while more than a high-water mark (1 MiB)
 * is unsent (a slow reader); without, a reader 64 MiB behind counts as
 * gone. -1: the client is gone (drop the rest). */
int hr__outbox_write(hr_outbox *b, const char *p, size_t n, bool wait);
/* The end of the stream: clean (the last event was sent) or not (the
 * connection is closed without the chunked terminator). */
void hr__outbox_end(hr_outbox *b, bool clean);
/* The producer lets go (every producer calls it once). */
void hr__outbox_release(hr_outbox *b);

/* ---- front.c ---- */

/* The request's headers, "Name: value\n" each (malloc'd; NULL when out of
 * memory), for a front (server/front.h). */
char *hr__front_headers(struct MHD_Connection *c);

/* ---- guard.c ---- */

/* An error decided from the headers alone (*rep; the caller answers it
 * before any body is read, then closes), or 0. */
unsigned hr__check_framing(hr_server *s, struct MHD_Connection *c, const char *version,
                           hr_reply *rep);
/* libmicrohttpd's URL unescaper: %XX decoded, but "%00" kept as it is. */
size_t hr__unescape(void *cls, struct MHD_Connection *c, char *s);
/* /admin/...: the gate, then POST /admin/drain (202) or 404. */
hr_reply hr__route_admin(hr_server *s, struct MHD_Connection *c, const char *method,
                         const char *url);

#endif
