/* --isolate (isolate.c): the engine in a child process. The parent keeps
 * HTTP (http.c) and relays every engine route to the child over a socket
 * pair; the child runs the routes (server.c) and sends back their answers.
 * When the child dies or stops answering, what was in flight ends with an
 * error, /health says so, and a new child starts with exponential backoff.
 *
 * Frames on the wire (both ways): u32 type, u32 id, u32 length, payload. */
#ifndef HR_SERVER_ISOLATE_H
#define HR_SERVER_ISOLATE_H

#include "server/http.h"

#include <stdint.h>

/* Parent side: start the supervisor, which starts the child with argv
 * (the same binary, `serve ... --engine-fd N` is appended). */
int hr__child_start(hr_server *s, char *const *argv, hr_error *err);
void hr__child_stop(hr_child *ch);
/* Relay a request; its answer comes into b. false: the child is down (the
 * caller answers 503). */
bool hr__child_submit(hr_child *ch, hr_outbox *b, const char *method, const char *url,
                      const char *body, size_t len);
/* The client of b left: tell the child to cancel. */
void hr__child_cancel(hr_child *ch, hr_outbox *b);
/* NULL while the child serves; else why not (starting, restarting). */
const char *hr__child_down(hr_child *ch);

/* Child side: serve the parent on fd until it closes. Returns the exit
 * status for the process. */
int hr__child_serve(hr_server *s, int fd);

/* ---- frames (isolate_child.c) ---- */

enum {
    F_REQ = 1, F_CANCEL, F_PING, F_READY, F_FAIL, F_REPLY, F_STREAM, F_DATA, F_END, F_PONG,
};

/* One frame of up to three pieces (a, b, c; NULL with 0 length when
 * unused), written whole under mu. 0, or -1 when the peer is gone or the
 * socket's send timeout passed (the socket is then shut down: a frame cut
 * short cannot be followed by another). */
int hr__frame_send(int fd, pthread_mutex_t *mu, uint32_t type, uint32_t id, const void *a,
                   size_t na, const void *b, size_t nb, const void *c, size_t nc);
/* The next frame: *payload malloc'd and NUL-terminated (len bytes before
 * the NUL). -1: the peer is gone or sent a length past 1 GiB; -2: the
 * socket's receive timeout passed mid-frame (the peer stopped). */
int hr__frame_recv(int fd, uint32_t *type, uint32_t *id, char **payload, uint32_t *len);

#endif
