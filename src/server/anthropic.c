/* POST /v1/messages: Anthropic's Messages API over the chat path. The
 * request is translated into a chat completions request (system and
 * content blocks into messages, tool_use / tool_result into tool calls and
 * tool messages, tools and tool_choice into functions), which the chat
 * template, the sampler and the tool-call parser serve as they serve
 * /v1/chat/completions; the output is shaped as a message with text and
 * tool_use blocks, or streamed as Anthropic's events. Every error on this
 * route leaves the server in Anthropic's shape (hr__anthropic_error).
 * docs/server-api.md lists the fields. */
#include "core/error.h"
#include "server/drive.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors --------------------------------------------------------------------------------- */

static const char *error_type(unsigned status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    default: return "api_error";
    }
}

static json_t *error_json(unsigned status, const char *msg) {
    return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", error_type(status),
                     "message", msg);
}

hr_reply hr__anthropic_error(hr_reply r) {
    if (r.status < 400 || !r.body)
        return r;
    json_t *o = json_loads(r.body, 0, NULL);
    const char *msg = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
    hr_reply out = hr__json_reply(r.status, error_json(r.status, msg ? msg : "error"));
    json_decref(o);
    free(r.body);
    return out;
}

/* ---- the request, as a chat completions request ------------------------------------------- */

typedef struct tr {
    hr_reply *err;
    bool bad;
} tr;

__attribute__((format(printf, 2, 3))) static void bad(tr *t, const char *fmt, ...) {
    if (t->bad)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *t->err = hr__error_reply(400, "invalid_request_error", NULL, "%s", msg);
    t->bad = true;
}

/* The text of a string or of a list of text blocks (joined); NULL (and a
 * 400) for anything else. Caller frees. */
static char *block_text(tr *t, const json_t *v, const char *what) {
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (!json_is_array(v)) {
        bad(t, "%s must be a string or a list of text blocks", what);
        return NULL;
    }
    char *out = NULL;
    size_t len = 0, cap = 0;
    size_t i;
    json_t *b;
    json_array_foreach(v, i, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        const char *text = json_string_value(json_object_get(b, "text"));
        if (!type || strcmp(type, "text") || !text) {
            bad(t, "%s: not supported yet: %s blocks (only text)", what,
                type ? type : "untyped");
            free(out);
            return NULL;
        }
        if (hr__buf_append(&out, &len, &cap, text, strlen(text))) {
            free(out);
            return NULL;
        }
    }
    return out ? out : strdup("");
}

static void add_message(json_t *msgs, const char *role, char *text) {
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", role, "content",
                                          text ? text : ""));
    free(text);
}

/* An image block's source as the URL of a chat image_url part: base64
 * data as a data: URL, a url source as it is; NULL (and a 400) for any
 * other. The chat route decodes, fetches and checks it. Caller frees. */
static char *image_url(tr *t, const json_t *b, size_t k, size_t i) {
    const json_t *src = json_object_get(b, "source");
    const char *type = json_string_value(json_object_get(src, "type"));
    if (type && !strcmp(type, "base64")) {
        const char *mt = json_string_value(json_object_get(src, "media_type"));
        const char *data = json_string_value(json_object_get(src, "data"));
        if (!mt || !data || strncmp(mt, "image/", 6) || strpbrk(mt, ";,")) {
            bad(t, "messages.%zu.content.%zu: an image's base64 source needs media_type "
                "(image/...) and data", k, i);
            return NULL;
        }
        size_t n = strlen(mt) + strlen(data) + 16;
        char *url = malloc(n);
        if (!url)
            bad(t, "out of memory");
        else
            snprintf(url, n, "data:%s;base64,%s", mt, data);
        return url;
    }
    if (type && !strcmp(type, "url")) {
        const char *url = json_string_value(json_object_get(src, "url"));
        if (!url)
            bad(t, "messages.%zu.content.%zu: an image's url source needs \"url\"", k, i);
        return url ? strdup(url) : NULL;
    }
    bad(t, "messages.%zu.content.%zu: not supported yet: image sources of type %s (base64 and "
        "url are)", k, i, type ? type : "untyped");
    return NULL;
}

/* One Anthropic message: a user turn becomes its tool results (one tool
 * message each, in order) then its text and images (a list of text and
 * image_url parts when it has an image, else one string); an assistant
 * turn one message with content and tool_calls. */
static void add_turn(tr *t, json_t *msgs, const json_t *m, size_t k) {
    const char *role = json_string_value(json_object_get(m, "role"));
    bool user = role && !strcmp(role, "user"), assistant = role && !strcmp(role, "assistant");
    if (!json_is_object(m) || (!user && !assistant)) {
        bad(t, "messages.%zu: role must be \"user\" or \"assistant\"", k);
        return;
    }
    const json_t *c = json_object_get(m, "content");
    if (json_is_string(c)) {
        add_message(msgs, role, strdup(json_string_value(c)));
        return;
    }
    if (!json_is_array(c)) {
        bad(t, "messages.%zu: content must be a string or a list of blocks", k);
        return;
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    json_t *calls = json_array(), *parts = json_array();
    bool images = false;
    size_t i;
    json_t *b;
    json_array_foreach(c, i, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!type) {
            bad(t, "messages.%zu.content.%zu: a block needs a \"type\"", k, i);
        } else if (!strcmp(type, "text")) {
            const char *s = json_string_value(json_object_get(b, "text"));
            if (!s)
                bad(t, "messages.%zu.content.%zu: a text block needs \"text\"", k, i);
            else if (!hr__buf_append(&text, &len, &cap, s, strlen(s)))
                json_array_append_new(parts, json_pack("{s:s,s:s}", "type", "text", "text", s));
        } else if (!strcmp(type, "image") && user) {
            char *url = image_url(t, b, k, i);
            if (url)
                json_array_append_new(parts, json_pack("{s:s,s:{s:s}}", "type", "image_url",
                                                       "image_url", "url", url));
            images = images || url;
            free(url);
        } else if (!strcmp(type, "tool_use") && assistant) {
            const char *id = json_string_value(json_object_get(b, "id"));
            const char *name = json_string_value(json_object_get(b, "name"));
            json_t *input = json_object_get(b, "input");
            if (!id || !name || !json_is_object(input))
                bad(t, "messages.%zu.content.%zu: tool_use needs id, name and an input "
                    "object", k, i);
            else
                json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:O}}", "id", id,
                                                       "type", "function", "function", "name",
                                                       name, "arguments", input));
        } else if (!strcmp(type, "tool_result") && user) {
            const char *id = json_string_value(json_object_get(b, "tool_use_id"));
            const json_t *rc = json_object_get(b, "content");
            char *out = rc ? block_text(t, rc, "tool_result content") : strdup("");
            if (!id)
                bad(t, "messages.%zu.content.%zu: tool_result needs tool_use_id", k, i);
            else if (out)
                json_array_append_new(msgs, json_pack("{s:s,s:s,s:s}", "role", "tool",
                                                      "tool_call_id", id, "content", out));
            free(out);
        } else if (!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) {
            /* earlier reasoning: templates drop it from history */
        } else if (!strcmp(type, "tool_use") || !strcmp(type, "tool_result")) {
            bad(t, "messages.%zu.content.%zu: %s blocks belong in %s messages", k, i, type,
                user ? "assistant" : "user");
        } else {
            bad(t, "messages.%zu.content.%zu: not supported yet: %s blocks", k, i, type);
        }
        if (t->bad)
            break;
    }
    /* a user turn of tool results only adds no user message */
    if (!t->bad && (assistant || text || images || json_array_size(c) == 0)) {
        json_t *msg = images ? json_pack("{s:s,s:O}", "role", role, "content", parts)
                             : json_pack("{s:s,s:s}", "role", role, "content", text ? text : "");
        if (json_array_size(calls))
            json_object_set(msg, "tool_calls", calls);
        json_array_append_new(msgs, msg);
    }
    free(text);
    json_decref(calls);
    json_decref(parts);
}

static void add_tools(tr *t, json_t *chat, const json_t *req) {
    const json_t *tools = json_object_get(req, "tools");
    if (!tools || json_is_null(tools))
        return;
    if (!json_is_array(tools)) {
        bad(t, "tools must be a list of tools");
        return;
    }
    json_t *out = json_array();
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        const char *type = json_string_value(json_object_get(tool, "type"));
        const char *name = json_string_value(json_object_get(tool, "name"));
        json_t *schema = json_object_get(tool, "input_schema");
        if (type && strcmp(type, "custom")) {
            bad(t, "tools.%zu: not supported yet: server and client tools of type \"%s\" "
                "(only custom tools with an input_schema)", i, type);
            break;
        }
        if (!name || !json_is_object(schema)) {
            bad(t, "tools.%zu: a tool needs a name and an input_schema object", i);
            break;
        }
        json_t *fn = json_pack("{s:s,s:O}", "name", name, "parameters", schema);
        json_t *desc = json_object_get(tool, "description");
        if (json_is_string(desc))
            json_object_set(fn, "description", desc);
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    json_object_set_new(chat, "tools", out);
    const json_t *tc = json_object_get(req, "tool_choice");
    if (!tc || json_is_null(tc))
        return;
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!type) {
        bad(t, "tool_choice must be an object with a \"type\"");
        return;
    }
    if (!strcmp(type, "auto") || !strcmp(type, "none")) {
        json_object_set_new(chat, "tool_choice", json_string(type));
    } else if (!strcmp(type, "any")) {
        json_object_set_new(chat, "tool_choice", json_string("required"));
    } else if (!strcmp(type, "tool")) {
        const char *name = json_string_value(json_object_get(tc, "name"));
        if (!name) {
            bad(t, "tool_choice: type \"tool\" needs a name");
            return;
        }
        json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:s}}", "type", "function",
                                                           "function", "name", name));
    } else {
        bad(t, "tool_choice.type must be auto, any, tool or none");
    }
}

json_t *hr__messages_to_chat(const json_t *req, hr_reply *err) {
    tr t = {err, false};
    json_t *chat = json_object(), *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    /* fields the chat path validates itself, under the same names */
    static const char *same[] = {"model", "temperature", "top_p", "top_k", "stream", "seed"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        json_t *v = json_object_get(req, same[i]);
        if (v)
            json_object_set(chat, same[i], v);
    }
    const json_t *mt = json_object_get(req, "max_tokens");
    if (!json_is_integer(mt) || json_integer_value(mt) < 1)
        bad(&t, "max_tokens is required: an integer >= 1");
    else
        json_object_set(chat, "max_tokens", (json_t *)mt);
    const json_t *ss = json_object_get(req, "stop_sequences");
    if (ss && !json_is_null(ss)) {
        bool ok = json_is_array(ss) && json_array_size(ss) <= 16;
        for (size_t i = 0; ok && i < json_array_size(ss); i++)
            ok = json_is_string(json_array_get(ss, i));
        if (!ok)
            bad(&t, "stop_sequences must be a list of at most 16 strings");
        else
            json_object_set(chat, "stop", (json_t *)ss);
    }
    const json_t *th = json_object_get(req, "thinking");
    const char *tht = json_string_value(json_object_get(th, "type"));
    if (th && !json_is_null(th) && !(tht && !strcmp(tht, "disabled")))
        bad(&t, "not supported yet: thinking (extended thinking); send {\"type\": "
            "\"disabled\"} or leave it out");
    const json_t *sys = json_object_get(req, "system");
    if (!t.bad && sys && !json_is_null(sys)) {
        char *text = block_text(&t, sys, "system");
        if (text)
            add_message(msgs, "system", text);
    }
    const json_t *in = json_object_get(req, "messages");
    if (!t.bad && (!json_is_array(in) || json_array_size(in) == 0))
        bad(&t, "messages must be a non-empty list of messages");
    size_t k;
    json_t *m;
    json_array_foreach(in, k, m) {
        if (t.bad)
            break;
        add_turn(&t, msgs, m, k);
    }
    const char *last = json_string_value(json_object_get(json_array_get(in, json_array_size(in) - 1),
                                                         "role"));
    if (!t.bad && last && !strcmp(last, "assistant"))
        bad(&t, "not supported yet: a final assistant message (prefill); the last message "
            "must be the user's");
    if (!t.bad)
        add_tools(&t, chat, req);
    if (t.bad) {
        json_decref(chat);
        return NULL;
    }
    return chat;
}

/* ---- the answer ----------------------------------------------------------------------------- */

typedef struct msg {
    hr_drive r;          /* first: the stream's callbacks cast back */
    char id[40];
    json_t *content;     /* non-streaming: the blocks so far */
    char *text;          /* the open text block's text (non-streaming) */
    size_t len, cap;
    char *args;          /* the open tool_use block's arguments */
    size_t alen, acap;
    /* streaming */
    int n_blocks;        /* blocks started */
    bool text_open;      /* the last block started is an open text block */
    bool started, pinged;
} msg;

static void msg_free(msg *m) {
    if (!m)
        return;
    hr__drive_deinit(&m->r);
    json_decref(m->content);
    free(m->text);
    free(m->args);
    free(m);
}

static const char *stop_reason(const hr_drive *r) {
    switch (hr__drive_outcome(r)) {
    case HR_OUTCOME_LENGTH: return "max_tokens";
    case HR_OUTCOME_STOP_STRING: return "stop_sequence";
    case HR_OUTCOME_TOOL_CALLS: return "tool_use";
    default: return "end_turn";
    }
}

static json_t *stop_sequence(const hr_drive *r) {
    const char *s = hr__drive_outcome(r) == HR_OUTCOME_STOP_STRING ? hr__drive_stop_matched(r)
                                                                   : NULL;
    return s ? json_string(s) : json_null();
}

/* Anthropic counts input_tokens without the cache's: prompt = input_tokens
 * + cache_read_input_tokens (hearth caches prefixes by itself: nothing is
 * counted as a cache write). */
static json_t *usage(msg *m, bool final) {
    int prompt = (int)m->r.job.prompt.n, cached = hr_request_cached_tokens(m->r.req);
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", prompt - cached,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", cached,
                     "output_tokens", final ? hr__drive_completion_tokens(&m->r) : 0);
}

static json_t *message(msg *m, json_t *content, bool final) {
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", m->id, "type", "message", "role",
                          "assistant", "model", m->r.job.model, "content", content);
    json_object_set_new(o, "stop_reason", final ? json_string(stop_reason(&m->r)) : json_null());
    json_object_set_new(o, "stop_sequence", final ? stop_sequence(&m->r) : json_null());
    json_object_set_new(o, "usage", usage(m, final));
    return o;
}

/* The arguments of a call as an object (the parser only emits valid JSON). */
static json_t *call_input(const char *args, size_t len) {
    json_t *v = json_loadb(args ? args : "{}", args ? len : 2, JSON_DECODE_ANY, NULL);
    if (!json_is_object(v)) {
        json_decref(v);
        v = json_object();
    }
    return v;
}

/* ---- non-streaming -------------------------------------------------------------------------- */

static void close_text(msg *m) {
    if (m->len)
        json_array_append_new(m->content, json_pack("{s:s,s:s%}", "type", "text", "text",
                                                    m->text, m->len));
    m->len = 0;
}

static void collect(msg *m, const char *text, size_t len) {
    hr__buf_append(&m->text, &m->len, &m->cap, text, len);
    for (size_t i = 0; i < m->r.ev->n; i++) {
        const hr_tool_event *v = &m->r.ev->ev[i];
        if (v->kind == HR_TOOL_EV_CALL_START) {
            close_text(m);
            json_array_append_new(m->content, json_pack("{s:s,s:s,s:s}", "type", "tool_use",
                                                        "id", v->id, "name", v->name));
            m->alen = 0;
        } else if (v->kind == HR_TOOL_EV_CALL_ARGS) {
            hr__buf_append(&m->args, &m->alen, &m->acap, v->text, v->len);
        } else if (v->kind == HR_TOOL_EV_CALL_END) {
            json_t *b = json_array_get(m->content, json_array_size(m->content) - 1);
            json_object_set_new(b, "input", call_input(m->args, m->alen));
        }
    }
}

static hr_reply run_blocking(msg *m) {
    const char *text;
    size_t len;
    hr_error err = {0};
    for (;;) {
        hr_drive_pull p = hr__drive_pull(&m->r, false, &text, &len, &err);
        if (p == HR_DRIVE_ABORTED)
            return hr__error_reply(err.code == HR_ECANCELLED ? 503 : 500, "server_error", NULL,
                                   "%s", err.msg);
        collect(m, text, len);
        if (p == HR_DRIVE_END)
            break;
    }
    close_text(m);
    json_t *o = message(m, m->content, true);
    m->content = NULL;
    return (hr_reply){.status = 200, .body = hr__dump(o)};
}

/* ---- streaming ------------------------------------------------------------------------------ */

/* "event: type" and its data, type first as Anthropic writes it; steals o. */
static void event(msg *m, const char *type, json_t *o) {
    json_t *e = json_pack("{s:s}", "type", type);
    json_object_update(e, o);
    json_decref(o);
    hr__sse_event(&m->r, type, e);
}

static void block_start(msg *m, json_t *block) {
    event(m, "content_block_start", json_pack("{s:i,s:o}", "index", m->n_blocks, "content_block",
                                              block));
    m->n_blocks++;
    if (!m->pinged) {
        event(m, "ping", json_object());
        m->pinged = true;
    }
}

static void block_stop(msg *m) {
    event(m, "content_block_stop", json_pack("{s:i}", "index", m->n_blocks - 1));
    m->text_open = false;
}

static void delta(msg *m, json_t *d) {
    event(m, "content_block_delta", json_pack("{s:i,s:o}", "index", m->n_blocks - 1, "delta", d));
}

static void stream_piece(msg *m, const char *text, size_t len) {
    if (len) {
        if (!m->text_open) {
            block_start(m, json_pack("{s:s,s:s}", "type", "text", "text", ""));
            m->text_open = true;
        }
        delta(m, json_pack("{s:s,s:s%}", "type", "text_delta", "text", text, len));
    }
    for (size_t i = 0; i < m->r.ev->n; i++) {
        const hr_tool_event *v = &m->r.ev->ev[i];
        if (v->kind == HR_TOOL_EV_CALL_START) {
            if (m->text_open)
                block_stop(m);
            block_start(m, json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id", v->id,
                                     "name", v->name, "input"));
        } else if (v->kind == HR_TOOL_EV_CALL_ARGS) {
            delta(m, json_pack("{s:s,s:s%}", "type", "input_json_delta", "partial_json",
                               v->text, v->len));
        } else if (v->kind == HR_TOOL_EV_CALL_END) {
            block_stop(m);
        }
    }
}

/* message_start waits for the first token (the cache's share of the prompt
 * is known then); until it, keep-alives are SSE comments, after it pings. */
static bool produce(hr_drive *r) {
    msg *m = (msg *)r;
    if (r->done)
        return false;
    while (r->out_len == 0) {
        const char *text;
        size_t len;
        hr_error err = {0};
        hr_drive_pull p = hr__drive_pull(r, true, &text, &len, &err);
        if (p == HR_DRIVE_KEEPALIVE) {
            if (m->started)
                event(m, "ping", json_object());
            else
                hr__buf_append(&r->out, &r->out_len, &r->out_cap, ": keepalive\n\n", 13);
            return true;
        }
        if (p == HR_DRIVE_ABORTED) {
            if (err.code == HR_ECANCELLED)
                return false; /* client gone or shutting down: no message_stop */
            hr__sse_event(r, "error", error_json(500, err.msg));
            r->done = true;
            return true;
        }
        if (!m->started) {
            event(m, "message_start", json_pack("{s:o}", "message",
                                                message(m, json_array(), false)));
            m->started = true;
        }
        stream_piece(m, text, len);
        if (p == HR_DRIVE_END) {
            if (m->text_open)
                block_stop(m);
            if (!m->pinged)
                event(m, "ping", json_object());
            event(m, "message_delta",
                  json_pack("{s:{s:s,s:o},s:{s:i}}", "delta", "stop_reason", stop_reason(r),
                            "stop_sequence", stop_sequence(r), "usage", "output_tokens",
                            hr__drive_completion_tokens(r)));
            event(m, "message_stop", json_object());
            r->done = true;
        }
    }
    return true;
}

static void release(hr_drive *r) { msg_free((msg *)r); }

/* ---- the route ------------------------------------------------------------------------------ */

hr_reply hr__route_messages(hr_server *s, hr_client *c, const char *body,
                            size_t len) {
    hr_reply err;
    json_t *req = hr__body_parse(body, len, &err);
    if (!req)
        return err;
    json_t *chat = hr__messages_to_chat(req, &err);
    json_decref(req);
    if (!chat)
        return err;
    msg *m = calloc(1, sizeof *m);
    if (!m) {
        json_decref(chat);
        return hr__error_reply(500, "server_error", NULL, "out of memory");
    }
    m->r.s = s;
    bool ok = hr__job_from_json(s, true, chat, &m->r.job, &err);
    json_decref(chat);
    if (!ok || !hr__drive_start(&m->r, c, "messages", &err)) {
        msg_free(m);
        return err;
    }
    hr__make_id(m->id, sizeof m->id, "msg_");
    if (!m->r.job.stream) {
        m->content = json_array();
        hr_reply r = run_blocking(m);
        msg_free(m);
        return r;
    }
    m->r.produce = produce;
    m->r.release = release;
    return (hr_reply){.status = 200, .sse = &m->r};
}

/* POST /v1/messages/count_tokens: the prompt's length as the request would
 * render it (max_tokens may be left out). */
hr_reply hr__route_count_tokens(hr_server *s, const char *body, size_t len) {
    hr_reply err;
    json_t *req = hr__body_parse(body, len, &err);
    if (!req)
        return err;
    if (!json_object_get(req, "max_tokens"))
        json_object_set_new(req, "max_tokens", json_integer(1));
    json_t *chat = hr__messages_to_chat(req, &err);
    json_decref(req);
    if (!chat)
        return err;
    hr_job j;
    bool ok = hr__job_from_json(s, true, chat, &j, &err);
    json_decref(chat);
    int n = (int)j.prompt.n;
    hr__job_free(&j);
    return ok ? hr__json_reply(200, json_pack("{s:i}", "input_tokens", n)) : err;
}
