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

/* Seconds an idle connection stays open (a generation lifts it meanwhile). */
#define HR_IDLE_TIMEOUT_S 600

struct hr_server {
    hr_server_opts o;
    hr_pool *pool;                /* the models (pool.h) */
    json_t *template_args;        /* --chat-template-args, or NULL */
    bool grammar_off;             /* HEARTH_GRAMMAR=0 (read at start) */
    struct MHD_Daemon *daemon;
    int port;
    double t_start;
    _Atomic int shutting_down;
    _Atomic long http_requests, http_errors;
    hr_metrics metrics;           /* replies by route and status, latencies */
    hr_resp_store *responses;     /* /v1/responses kept for previous_response_id */
};

/* An HTTP answer built by a route: status + body (owned), or a streaming
 * response already made. */
typedef struct hr_reply {
    unsigned status;
    char *body;                 /* malloc'd JSON, or NULL */
    struct MHD_Response *stream;
} hr_reply;

/* OpenAI-shaped error: {"error": {"message", "type", "param", "code"}}. */
hr_reply hr__error_reply(unsigned status, const char *type, const char *param,
                         const char *fmt, ...) __attribute__((format(printf, 4, 5)));
hr_reply hr__json_reply(unsigned status, json_t *body); /* steals body */

/* POST /v1/chat/completions (chat = true) and /v1/completions. */
hr_reply hr__route_generate(hr_server *s, struct MHD_Connection *c, bool chat,
                            const char *body, size_t len);

/* POST /v1/messages, Anthropic's Messages API (anthropic.c). */
hr_reply hr__route_messages(hr_server *s, struct MHD_Connection *c, const char *body,
                            size_t len);
/* POST /v1/messages/count_tokens: {"input_tokens": N} (anthropic.c). */
hr_reply hr__route_count_tokens(hr_server *s, const char *body, size_t len);
/* An error reply (OpenAI's shape) in Anthropic's: {"type": "error", "error":
 * {"type", "message"}}; other replies pass through. Consumes r. */
hr_reply hr__anthropic_error(hr_reply r);
/* POST /v1/responses, OpenAI's Responses API (responses.c); GET and DELETE
 * /v1/responses/{id} (del: DELETE). */
hr_reply hr__route_responses(hr_server *s, struct MHD_Connection *c, const char *body,
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
