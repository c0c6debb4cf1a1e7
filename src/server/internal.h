/* Shared by the server's files; not an API. */
#ifndef HR_SERVER_INTERNAL_H
#define HR_SERVER_INTERNAL_H

#include "api/api.h"
#include "chat/chat.h"
#include "chat/toolcall.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "server/metrics.h"
#include "server/pool.h"
#include "server/server.h"
#include "server/store.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdbool.h>

/* Bounds of the /v1/responses store. */
#define HR_RESP_STORE_ENTRIES 256
#define HR_RESP_STORE_MIB 64

/* Connection limits' defaults (docs/operations.md). */
#define HR_DEFAULT_MAX_CONNECTIONS 4096
#define HR_DEFAULT_TIMEOUT_S 30      /* a whole request must arrive within it */
#define HR_DEFAULT_MAX_REQUESTS 256  /* generation requests admitted at once */
#define HR_DEFAULT_REQUEST_TIMEOUT_S 600
#define HR_DEFAULT_DRAIN_TIMEOUT_S 30
#define HR_DEFAULT_ENGINE_TIMEOUT_S 10 /* --isolate: a silent child is killed */
#define HR_HTTP_THREADS 4            /* libmicrohttpd's pool (epoll) */

typedef struct hr_http hr_http;   /* http.c: the daemon, its connections and workers */
typedef struct hr_child hr_child; /* isolate.c: the engine in a child process */

/* The client of one request, as a generation sees it: gone is set when its
 * connection closed (or, in an engine child, when the parent cancelled);
 * fd (a dup of the socket, or -1) is watched for a hang-up (an RST: a
 * half-closed socket is not a hang-up). */
typedef struct hr_client {
    _Atomic int gone;
    int fd;
} hr_client;

struct hr_server {
    hr_server_opts o;
    hr_pool *pool;                /* the models (pool.h) */
    json_t *template_args;        /* --chat-template-args, or NULL */
    bool grammar_off;             /* HEARTH_GRAMMAR=0 (read at start) */
    hr_http *http;                /* NULL until hr_server_start */
    hr_child *child;              /* --isolate: the engine's process (the parent's side) */
    bool engine_child;            /* this process is the engine child (no HTTP) */
    int port;
    double t_start;
    _Atomic int shutting_down;    /* streams end with an error, connections close */
    _Atomic int draining;         /* new generation requests get 503 */
    _Atomic int active;           /* generation requests admitted and not answered */
    _Atomic long http_requests, http_errors;
    hr_metrics metrics;           /* replies by route and status, latencies */
    hr_resp_store *responses;     /* /v1/responses kept for previous_response_id */
};

typedef struct hr_drive hr_drive;

/* An HTTP answer built by a route: status + body (owned, JSON unless ctype
 * says otherwise), a response already made (static files), or an event
 * stream (sse: the route's generation, pumped by http.c or isolate.c). */
typedef struct hr_reply {
    unsigned status;
    char *body;                 /* malloc'd, or NULL */
    const char *ctype;          /* static; NULL: application/json */
    unsigned retry_after;       /* seconds; 0: no Retry-After header */
    struct MHD_Response *stream;
    hr_drive *sse;
} hr_reply;

/* OpenAI-shaped error: {"error": {"message", "type", "param", "code"}}. */
hr_reply hr__error_reply(unsigned status, const char *type, const char *param,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));
hr_reply hr__json_reply(unsigned status, json_t *body); /* steals body */

/* Every route but the HTTP layer's own (server.c); c may be NULL (no UI).
 * The reply is counted for /metrics and errors come in the shape of the
 * API the route speaks. */
hr_reply hr__route(hr_server *s, struct MHD_Connection *c, hr_client *cl, const char *method,
                   const char *url, const char *body, size_t len);
/* Count r for /metrics and put an error in the shape of url's API. */
hr_reply hr__shaped(hr_server *s, const char *url, hr_reply r);
/* Whether method + url is a generation (run off the HTTP threads, counted
 * against --max-requests, refused while draining). */
bool hr__is_generation(const char *method, const char *url);
/* The engine's state for /health: NULL when it serves, else why not. */
const char *hr__engine_down(hr_server *s);

/* http.c: listen (hr_server_start), the connection count (for /stats),
 * stop accepting and close everything (hr_server_stop). */
int hr__http_start(hr_server *s, hr_error *err);
void hr__http_stop(hr_server *s);
long hr__http_connections(const hr_server *s);

/* POST /v1/chat/completions (chat = true) and /v1/completions. */
hr_reply hr__route_generate(hr_server *s, hr_client *c, bool chat,
                            const char *body, size_t len);

/* POST /v1/messages, Anthropic's Messages API (anthropic.c). */
hr_reply hr__route_messages(hr_server *s, hr_client *c, const char *body,
                            size_t len);
/* POST /v1/messages/count_tokens: {"input_tokens": N} (anthropic.c). */
hr_reply hr__route_count_tokens(hr_server *s, const char *body, size_t len);
/* An error reply (OpenAI's shape) in Anthropic's: {"type": "error", "error":
 * {"type", "message"}}; other replies pass through. Consumes r. */
hr_reply hr__anthropic_error(hr_reply r);
/* POST /v1/responses, OpenAI's Responses API (responses.c); GET and DELETE
 * /v1/responses/{id} (del: DELETE). */
hr_reply hr__route_responses(hr_server *s, hr_client *c, const char *body,
                             size_t len);
hr_reply hr__route_stored_response(hr_server *s, const char *id, bool del);
/* The other APIs' requests as a chat completions request (a new object), or
 * NULL with *err (a 400 in OpenAI's shape) when req is malformed. req is a
 * JSON object; history (chat messages, may be NULL) goes between the
 * instructions and the input: the conversation through a previous response. */
json_t *hr__messages_to_chat(const json_t *req, hr_reply *err);
json_t *hr__responses_to_chat(const json_t *req, const json_t *history, hr_reply *err);
/* GET /metrics: the published counters in Prometheus' text format (metrics.c). */
hr_reply hr__route_metrics(hr_server *s);
/* Resident set size of the process in bytes (0 when unknown). */
long hr__rss_bytes(void);

#endif
