/* Shared by the server's files; not an API. */
#ifndef HR_SERVER_INTERNAL_H
#define HR_SERVER_INTERNAL_H

#include "api/api.h"
#include "chat/chat.h"
#include "chat/toolcall.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdbool.h>

/* Seconds an idle connection stays open (a generation lifts it meanwhile). */
#define HR_IDLE_TIMEOUT_S 600

struct hr_server {
    hr_server_opts o;
    char *model_id;               /* what /v1/models reports */
    hr_llm *llm;                  /* model, tokenizer, template (api/api.h) */
    hr_session *session;          /* the engine over it */
    /* borrowed from llm and session, for the routes */
    hr_model *model;
    hr_tokenizer *tok;
    hr_chat_template *tmpl;       /* NULL: the model has no chat template */
    const hr_tool_format *tool_format; /* how the template's model writes calls; NULL */
    const char *bos_token, *eos_token;
    hr_engine *engine;
    const int32_t *stop_ids;      /* end-of-sequence tokens */
    int n_stop_ids;
    json_t *template_args;        /* --chat-template-args, or NULL */
    bool grammar_off;             /* HEARTH_GRAMMAR=0 (read at start) */
    struct MHD_Daemon *daemon;
    int port;
    double t_start;
    _Atomic int shutting_down;
    _Atomic long http_requests, http_errors;
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

#endif
