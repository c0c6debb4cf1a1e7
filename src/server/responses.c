/* POST /v1/responses: OpenAI's Responses API over the chat path.
 * instructions, a stored conversation (previous_response_id) and input
 * items (messages, function_call, function_call_output) become chat
 * messages, function tools and text.format become tools and
 * response_format; the output is a response object with message and
 * function_call items, or the stream of response.* events with sequence
 * numbers. With store (the default) the response and its conversation go
 * to the bounded store (store.h); GET / DELETE /v1/responses/{id} read and
 * drop them. Errors are OpenAI's shape, as on the chat routes.
 * docs/server-api.md lists the fields. */
#include "core/error.h"
#include "server/drive.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the request, as a chat completions request ------------------------------------------- */

typedef struct tr {
    hr_reply *err;
    bool bad;
} tr;

__attribute__((format(printf, 3, 4))) static void bad(tr *t, const char *param,
                                                      const char *fmt, ...) {
    if (t->bad)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    *t->err = hr__error_reply(400, "invalid_request_error", param, "%s", msg);
    t->bad = true;
}

static bool given(const json_t *v) { return v && !json_is_null(v); }

/* A user message's content with input_image parts: the chat route's list
 * of text and image_url parts (an image_url string as the part's url: a
 * data: URL or http(s), decoded, fetched and checked there); NULL with a
 * 400 for another part. */
static json_t *parts_with_images(tr *t, const json_t *v, const char *where) {
    json_t *out = json_array();
    size_t i;
    json_t *p;
    json_array_foreach(v, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        const char *text = json_string_value(json_object_get(p, "text"));
        const char *url = json_string_value(json_object_get(p, "image_url"));
        if (type && !strcmp(type, "input_text") && text) {
            json_array_append_new(out, json_pack("{s:s,s:s}", "type", "text", "text", text));
        } else if (type && !strcmp(type, "input_image") && url) {
            json_array_append_new(out, json_pack("{s:s,s:{s:s}}", "type", "image_url",
                                                 "image_url", "url", url));
        } else {
            bad(t, "input", "%s: not supported yet: %s parts in a message with images (input_text "
                "and input_image with an image_url are)", where, type ? type : "untyped");
            json_decref(out);
            return NULL;
        }
    }
    return out;
}

static bool has_image(const json_t *v) {
    size_t i;
    json_t *p;
    json_array_foreach(v, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        if (type && !strcmp(type, "input_image"))
            return true;
    }
    return false;
}

/* Text of a string or of a list of text parts (input_text, output_text),
 * joined; NULL with a 400 otherwise. Caller frees. */
static char *parts_text(tr *t, const json_t *v, const char *where) {
    if (json_is_string(v))
        return strdup(json_string_value(v));
    if (!json_is_array(v)) {
        bad(t, "input", "%s: content must be a string or a list of parts", where);
        return NULL;
    }
    char *out = NULL;
    size_t len = 0, cap = 0;
    size_t i;
    json_t *p;
    json_array_foreach(v, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        const char *text = json_string_value(json_object_get(p, "text"));
        if (type && !strcmp(type, "refusal"))
            text = json_string_value(json_object_get(p, "refusal"));
        else if (!type || (strcmp(type, "input_text") && strcmp(type, "output_text")))
            text = NULL;
        if (!text) {
            bad(t, "input", "%s: not supported yet: %s parts (only input_text and output_text)",
                where, type ? type : "untyped");
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

/* function_call items join the assistant message right before them. */
static void add_call(json_t *msgs, const char *id, const char *name, const char *args) {
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *role = json_string_value(json_object_get(last, "role"));
    if (!role || strcmp(role, "assistant")) {
        last = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
        json_array_append_new(msgs, last);
    }
    json_t *calls = json_object_get(last, "tool_calls");
    if (!calls) {
        calls = json_array();
        json_object_set_new(last, "tool_calls", calls);
    }
    json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                           "function", "name", name, "arguments", args));
}

static void add_item(tr *t, json_t *msgs, const json_t *it, size_t k) {
    char where[32];
    snprintf(where, sizeof where, "input.%zu", k);
    const char *type = json_string_value(json_object_get(it, "type"));
    const char *role = json_string_value(json_object_get(it, "role"));
    if (!json_is_object(it)) {
        bad(t, "input", "%s must be an object", where);
    } else if ((!type && role) || (type && !strcmp(type, "message"))) {
        static const char *roles[][2] = {{"user", "user"}, {"assistant", "assistant"},
                                         {"system", "system"}, {"developer", "system"}};
        const char *as = NULL;
        for (size_t i = 0; role && i < 4; i++)
            if (!strcmp(role, roles[i][0]))
                as = roles[i][1];
        if (!as) {
            bad(t, "input", "%s: role must be user, assistant, system or developer", where);
            return;
        }
        const json_t *c = json_object_get(it, "content");
        if (json_is_array(c) && has_image(c)) {
            json_t *parts = NULL;
            if (strcmp(as, "user"))
                bad(t, "input", "%s: input_image parts belong in user messages", where);
            else if ((parts = parts_with_images(t, c, where)))
                json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", as, "content", parts));
            return;
        }
        char *text = parts_text(t, c, where);
        if (text)
            json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", as, "content", text));
        free(text);
    } else if (type && !strcmp(type, "function_call")) {
        const char *id = json_string_value(json_object_get(it, "call_id"));
        const char *name = json_string_value(json_object_get(it, "name"));
        const char *args = json_string_value(json_object_get(it, "arguments"));
        if (!id || !name || !args)
            bad(t, "input", "%s: function_call needs call_id, name and arguments (a string)",
                where);
        else
            add_call(msgs, id, name, args);
    } else if (type && !strcmp(type, "function_call_output")) {
        const char *id = json_string_value(json_object_get(it, "call_id"));
        char *out = parts_text(t, json_object_get(it, "output"), where);
        if (!id)
            bad(t, "input", "%s: function_call_output needs call_id", where);
        else if (out)
            json_array_append_new(msgs, json_pack("{s:s,s:s,s:s}", "role", "tool",
                                                  "tool_call_id", id, "content", out));
        free(out);
    } else if (type && !strcmp(type, "reasoning")) {
        /* earlier reasoning: templates drop it from history */
    } else {
        bad(t, "input", "%s: not supported yet: %s items (message, function_call and "
            "function_call_output are)", where, type ? type : "untyped");
    }
}

static void add_tools(tr *t, json_t *chat, const json_t *req) {
    const json_t *tools = json_object_get(req, "tools");
    if (given(tools)) {
        if (!json_is_array(tools)) {
            bad(t, "tools", "tools must be a list of tools");
            return;
        }
        json_t *out = json_array();
        json_object_set_new(chat, "tools", out);
        size_t i;
        json_t *tool;
        json_array_foreach(tools, i, tool) {
            const char *type = json_string_value(json_object_get(tool, "type"));
            const char *name = json_string_value(json_object_get(tool, "name"));
            if (!type || strcmp(type, "function")) {
                bad(t, "tools", "tools.%zu: not supported yet: %s tools (only function)", i,
                    type ? type : "untyped");
                return;
            }
            if (!name) {
                bad(t, "tools", "tools.%zu: a function tool needs a name", i);
                return;
            }
            json_t *fn = json_pack("{s:s}", "name", name);
            json_t *v;
            if (json_is_string(v = json_object_get(tool, "description")))
                json_object_set(fn, "description", v);
            v = json_object_get(tool, "parameters");
            json_object_set_new(fn, "parameters",
                                json_is_object(v) ? json_incref(v)
                                                  : json_pack("{s:s,s:{}}", "type", "object",
                                                              "properties"));
            json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
        }
    }
    const json_t *tc = json_object_get(req, "tool_choice");
    if (!given(tc))
        return;
    if (json_is_string(tc)) {
        json_object_set(chat, "tool_choice", (json_t *)tc);
        return;
    }
    const char *type = json_string_value(json_object_get(tc, "type"));
    const char *name = json_string_value(json_object_get(tc, "name"));
    if (!type || strcmp(type, "function") || !name) {
        bad(t, "tool_choice", "tool_choice: not supported yet: %s (auto, none, required and "
            "{\"type\": \"function\", \"name\"} are)", type ? type : "this choice");
        return;
    }
    json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:s}}", "type", "function",
                                                       "function", "name", name));
}

/* text.format → response_format */
static void add_format(tr *t, json_t *chat, const json_t *req) {
    const json_t *text = json_object_get(req, "text");
    if (!given(text))
        return;
    const json_t *f = json_object_get(text, "format");
    if (!json_is_object(text) || (given(f) && !json_is_object(f))) {
        bad(t, "text", "text must be an object; text.format an object with a \"type\"");
        return;
    }
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!given(f) || (type && !strcmp(type, "text")))
        return;
    if (type && !strcmp(type, "json_object")) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
    } else if (type && !strcmp(type, "json_schema")) {
        json_t *schema = json_object_get(f, "schema");
        if (!schema) {
            bad(t, "text.format", "text.format: json_schema needs a \"schema\"");
            return;
        }
        json_object_set_new(chat, "response_format", json_pack("{s:s,s:{s:O}}", "type",
                                                               "json_schema", "json_schema",
                                                               "schema", schema));
    } else {
        bad(t, "text.format", "text.format.type must be text, json_object or json_schema");
    }
}

json_t *hr__responses_to_chat(const json_t *req, const json_t *history, hr_reply *err) {
    tr t = {err, false};
    json_t *chat = json_object(), *msgs = json_array();
    json_object_set_new(chat, "messages", msgs);
    const json_t *v;
    if (given(v = json_object_get(req, "previous_response_id")) && !json_is_string(v))
        bad(&t, "previous_response_id", "previous_response_id must be a string");
    if (given(v = json_object_get(req, "store")) && !json_is_boolean(v))
        bad(&t, "store", "store must be true or false");
    if (json_is_true(json_object_get(req, "background")))
        bad(&t, "background", "not supported yet: background responses");
    static const char *refused[] = {"conversation", "prompt"};
    for (size_t i = 0; i < 2; i++)
        if (given(json_object_get(req, refused[i])))
            bad(&t, refused[i], "not supported yet: %s", refused[i]);
    v = json_object_get(req, "reasoning");
    if (given(v) && given(json_object_get(v, "effort")))
        bad(&t, "reasoning", "not supported yet: reasoning.effort");
    /* fields the chat path validates itself, under the same names */
    static const char *same[] = {"model", "temperature", "top_p", "stream",
                                 "seed",  "top_k",       "min_p"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if ((v = json_object_get(req, same[i])))
            json_object_set(chat, same[i], (json_t *)v);
    if (given(v = json_object_get(req, "max_output_tokens"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 1)
            bad(&t, "max_output_tokens", "max_output_tokens must be an integer >= 1");
        else
            json_object_set(chat, "max_tokens", (json_t *)v);
    }
    if (given(v = json_object_get(req, "instructions"))) {
        if (!json_is_string(v))
            bad(&t, "instructions", "instructions must be a string");
        else
            json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", v));
    }
    if (history) /* the previous response's conversation, without its instructions */
        json_array_extend(msgs, (json_t *)history);
    const json_t *in = json_object_get(req, "input");
    if (json_is_string(in)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in));
    } else if (json_is_array(in) && json_array_size(in) > 0) {
        size_t k;
        json_t *it;
        json_array_foreach(in, k, it) {
            if (t.bad)
                break;
            add_item(&t, msgs, it, k);
        }
    } else {
        bad(&t, "input", "input is required: a string or a non-empty list of items");
    }
    if (!t.bad)
        add_tools(&t, chat, req);
    if (!t.bad)
        add_format(&t, chat, req);
    if (t.bad) {
        json_decref(chat);
        return NULL;
    }
    return chat;
}

/* ---- the answer ----------------------------------------------------------------------------- */

typedef struct resp {
    hr_drive r;          /* first: the stream's callbacks cast back */
    char id[40];
    json_int_t created;
    json_t *echo;        /* request fields the response object repeats */
    json_t *output;      /* finished items */
    bool stream;
    json_t *conv;        /* with store: the conversation so far (chat messages) */
    int seq;             /* the next event's sequence_number */
    /* the open item: a message (text) or a function call (args) */
    enum { ITEM_NONE, ITEM_MESSAGE, ITEM_CALL } open;
    char item_id[40];
    char *text;
    size_t len, cap;
    char *call_id, *name;
} resp;

static void resp_free(resp *o) {
    if (!o)
        return;
    hr__drive_deinit(&o->r);
    json_decref(o->echo);
    json_decref(o->output);
    json_decref(o->conv);
    free(o->text);
    free(o->call_id);
    free(o->name);
    free(o);
}

static json_t *usage(resp *o) {
    int prompt = (int)o->r.job.prompt.n, out = hr__drive_completion_tokens(&o->r);
    return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", prompt,
                     "input_tokens_details", "cached_tokens", hr_request_cached_tokens(o->r.req),
                     "output_tokens", out, "output_tokens_details", "reasoning_tokens", 0,
                     "total_tokens", prompt + out);
}

/* The response object; status "in_progress", "completed" or "incomplete". */
static json_t *response(resp *o, const char *status) {
    json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:n,s:n}", "id", o->id, "object", "response",
                          "created_at", o->created, "status", status, "error",
                          "incomplete_details");
    if (!strcmp(status, "incomplete"))
        json_object_set_new(r, "incomplete_details", json_pack("{s:s}", "reason",
                                                               "max_output_tokens"));
    json_object_set_new(r, "model", json_string(o->r.job.model));
    json_object_set_new(r, "output", strcmp(status, "in_progress") ? json_deep_copy(o->output)
                                                                    : json_array());
    json_object_update(r, o->echo);
    json_object_set_new(r, "usage", strcmp(status, "in_progress") ? usage(o) : json_null());
    return r;
}

static void event(resp *o, const char *type, json_t *data) {
    if (!o->stream) {
        json_decref(data);
        return;
    }
    json_t *e = json_pack("{s:s,s:i}", "type", type, "sequence_number", o->seq++);
    json_object_update(e, data);
    json_decref(data);
    hr__sse_event(&o->r, type, e);
}

static json_t *text_part(const resp *o) {
    return json_pack("{s:s,s:s%,s:[]}", "type", "output_text", "text", o->text ? o->text : "",
                     o->len, "annotations");
}

static json_t *message_item(const resp *o, const char *status) {
    json_t *content = strcmp(status, "in_progress") ? json_pack("[o]", text_part(o)) : json_array();
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", o->item_id, "type", "message", "status",
                     status, "role", "assistant", "content", content);
}

static json_t *call_item(const resp *o, const char *status) {
    return json_pack("{s:s,s:s,s:s,s:s%,s:s,s:s}", "id", o->item_id, "type", "function_call",
                     "status", status, "arguments", o->text ? o->text : "", o->len, "call_id",
                     o->call_id, "name", o->name);
}

static int out_index(const resp *o) { return (int)json_array_size(o->output); }

static void open_item(resp *o, int kind, const hr_tool_event *v) {
    o->open = kind;
    o->len = 0;
    hr__make_id(o->item_id, sizeof o->item_id, kind == ITEM_MESSAGE ? "msg_" : "fc_");
    if (kind == ITEM_CALL) {
        free(o->call_id);
        free(o->name);
        o->call_id = strdup(v->id);
        o->name = strdup(v->name);
    }
    json_t *item = kind == ITEM_MESSAGE ? message_item(o, "in_progress")
                                        : call_item(o, "in_progress");
    event(o, "response.output_item.added",
          json_pack("{s:i,s:o}", "output_index", out_index(o), "item", item));
    if (kind == ITEM_MESSAGE)
        event(o, "response.content_part.added",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", o->item_id, "output_index", out_index(o),
                        "content_index", 0, "part", text_part(o)));
}

/* status: the message's ("incomplete" when max_output_tokens cut it). */
static void close_item(resp *o, const char *status) {
    if (o->open == ITEM_NONE)
        return;
    int index = out_index(o);
    json_t *item;
    if (o->open == ITEM_MESSAGE) {
        event(o, "response.output_text.done",
              json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", o->item_id, "output_index", index,
                        "content_index", 0, "text", o->text ? o->text : "", o->len, "logprobs"));
        event(o, "response.content_part.done",
              json_pack("{s:s,s:i,s:i,s:o}", "item_id", o->item_id, "output_index", index,
                        "content_index", 0, "part", text_part(o)));
        item = message_item(o, status);
    } else {
        event(o, "response.function_call_arguments.done",
              json_pack("{s:s,s:i,s:s,s:s%}", "item_id", o->item_id, "output_index", index,
                        "name", o->name, "arguments", o->text ? o->text : "", o->len));
        item = call_item(o, "completed");
    }
    event(o, "response.output_item.done", json_pack("{s:i,s:O}", "output_index", index, "item",
                                                    item));
    json_array_append_new(o->output, item);
    o->open = ITEM_NONE;
}

/* A piece of output: text goes to the open message (opened when needed),
 * calls become function_call items. */
static void take(resp *o, const char *text, size_t len) {
    if (len) {
        if (o->open != ITEM_MESSAGE) {
            close_item(o, "completed");
            open_item(o, ITEM_MESSAGE, NULL);
        }
        hr__buf_append(&o->text, &o->len, &o->cap, text, len);
        if (o->stream) /* (event() drops it otherwise: spare the token loop the packing) */
            event(o, "response.output_text.delta",
                  json_pack("{s:s,s:i,s:i,s:s%,s:[]}", "item_id", o->item_id, "output_index",
                            out_index(o), "content_index", 0, "delta", text, len, "logprobs"));
    }
    for (size_t i = 0; i < o->r.ev->n; i++) {
        const hr_tool_event *v = &o->r.ev->ev[i];
        if (v->kind == HR_TOOL_EV_CALL_START) {
            close_item(o, "completed");
            open_item(o, ITEM_CALL, v);
        } else if (v->kind == HR_TOOL_EV_CALL_ARGS) {
            hr__buf_append(&o->text, &o->len, &o->cap, v->text, v->len);
            event(o, "response.function_call_arguments.delta",
                  json_pack("{s:s,s:i,s:s%}", "item_id", o->item_id, "output_index",
                            out_index(o), "delta", v->text, v->len));
        } else if (v->kind == HR_TOOL_EV_CALL_END) {
            close_item(o, "completed");
        }
    }
}

/* The output as the assistant turn of a conversation: its text and calls. */
static json_t *assistant_turn(const resp *o) {
    char *text = NULL;
    size_t len = 0, cap = 0;
    json_t *calls = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(o->output, i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        if (type && !strcmp(type, "message")) {
            const char *t = json_string_value(json_object_get(
                json_array_get(json_object_get(it, "content"), 0), "text"));
            if (t)
                hr__buf_append(&text, &len, &cap, t, strlen(t));
        } else if (type && !strcmp(type, "function_call")) {
            json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id",
                                                   json_object_get(it, "call_id"), "type",
                                                   "function", "function", "name",
                                                   json_object_get(it, "name"), "arguments",
                                                   json_object_get(it, "arguments")));
        }
    }
    json_t *m = json_pack("{s:s,s:s}", "role", "assistant", "content", text ? text : "");
    if (json_array_size(calls))
        json_object_set(m, "tool_calls", calls);
    json_decref(calls);
    free(text);
    return m;
}

/* The end: the last item closes, then the response (kept when stored).
 * Returns its status. */
static const char *finish(resp *o) {
    const char *status =
        hr__drive_outcome(&o->r) == HR_OUTCOME_LENGTH ? "incomplete" : "completed";
    close_item(o, status);
    event(o, !strcmp(status, "completed") ? "response.completed" : "response.incomplete",
          json_pack("{s:o}", "response", response(o, status)));
    if (o->conv) {
        json_array_append_new(o->conv, assistant_turn(o));
        hr__resp_store_put(o->r.s->responses, o->id, response(o, status), o->conv);
        o->conv = NULL;
    }
    return status;
}

/* ---- non-streaming and streaming ------------------------------------------------------------ */

static hr_reply run_blocking(resp *o) {
    const char *text;
    size_t len;
    hr_error err = {0};
    for (;;) {
        hr_drive_pull p = hr__drive_pull(&o->r, false, &text, &len, &err);
        if (p == HR_DRIVE_ABORTED)
            return hr__error_reply(err.code == HR_ECANCELLED ? 503 : 500, "server_error", NULL,
                                   "%s", err.msg);
        take(o, text, len);
        if (p == HR_DRIVE_END)
            break;
    }
    return (hr_reply){.status = 200, .body = hr__dump(response(o, finish(o)))};
}

static bool produce(hr_drive *r) {
    resp *o = (resp *)r;
    if (r->done)
        return false;
    if (o->seq == 0) {
        event(o, "response.created", json_pack("{s:o}", "response", response(o, "in_progress")));
        event(o, "response.in_progress",
              json_pack("{s:o}", "response", response(o, "in_progress")));
        return true;
    }
    while (r->out_len == 0) {
        const char *text;
        size_t len;
        hr_error err = {0};
        hr_drive_pull p = hr__drive_pull(r, true, &text, &len, &err);
        if (p == HR_DRIVE_KEEPALIVE) {
            hr__buf_append(&r->out, &r->out_len, &r->out_cap, ": keepalive\n\n", 13);
            return true;
        }
        if (p == HR_DRIVE_ABORTED) {
            if (err.code == HR_ECANCELLED)
                return false; /* client gone or shutting down */
            event(o, "error", json_pack("{s:s,s:s,s:n}", "code", "server_error", "message",
                                        err.msg, "param"));
            r->done = true;
            return true;
        }
        take(o, text, len);
        if (p == HR_DRIVE_END) {
            finish(o);
            r->done = true;
        }
    }
    return true;
}

static void release(hr_drive *r) { resp_free((resp *)r); }

/* ---- the route ------------------------------------------------------------------------------ */

/* What the response object repeats of the request (effective values). */
static json_t *echo(const json_t *req, const hr_job *j, bool store) {
    json_t *e = json_object(), *v;
    json_object_set_new(e, "instructions", json_is_string(v = json_object_get(req, "instructions"))
                                               ? json_incref(v)
                                               : json_null());
    json_object_set_new(e, "max_output_tokens", json_integer(j->rp.max_tokens));
    json_object_set_new(e, "parallel_tool_calls",
                        json_boolean(!json_is_false(json_object_get(req, "parallel_tool_calls"))));
    json_object_set_new(e, "previous_response_id",
                        json_is_string(v = json_object_get(req, "previous_response_id"))
                            ? json_incref(v)
                            : json_null());
    json_object_set_new(e, "store", json_boolean(store));
    json_object_set_new(e, "temperature", json_real(j->rp.sampler.temp));
    json_object_set_new(e, "text", json_is_object(v = json_object_get(req, "text"))
                                       ? json_incref(v)
                                       : json_pack("{s:{s:s}}", "format", "type", "text"));
    json_object_set_new(e, "tool_choice", (v = json_object_get(req, "tool_choice")) &&
                                                  !json_is_null(v)
                                              ? json_incref(v)
                                              : json_string("auto"));
    json_object_set_new(e, "tools", json_is_array(v = json_object_get(req, "tools"))
                                        ? json_incref(v)
                                        : json_array());
    json_object_set_new(e, "top_p", json_real(j->rp.sampler.top_p));
    json_object_set_new(e, "truncation", json_string("disabled"));
    json_object_set_new(e, "metadata", json_is_object(v = json_object_get(req, "metadata"))
                                           ? json_incref(v)
                                           : json_object());
    return e;
}

/* An error of the chat path names chat fields: name this API's instead. */
static hr_reply renamed(hr_reply r) {
    static const char *map[][2] = {{"messages", "input"},
                                   {"max_tokens", "max_output_tokens"},
                                   {"response_format", "text.format"}};
    json_t *o = r.body ? json_loads(r.body, 0, NULL) : NULL;
    json_t *e = json_object_get(o, "error");
    const char *param = json_string_value(json_object_get(e, "param"));
    const char *msg = json_string_value(json_object_get(e, "message"));
    for (size_t i = 0; param && msg && i < sizeof map / sizeof map[0]; i++) {
        size_t n = strlen(map[i][0]);
        if (strcmp(param, map[i][0]))
            continue;
        char buf[1024];
        snprintf(buf, sizeof buf, "%s%s", strncmp(msg, map[i][0], n) ? "" : map[i][1],
                 strncmp(msg, map[i][0], n) ? msg : msg + n);
        json_object_set_new(e, "message", json_string(buf));
        json_object_set_new(e, "param", json_string(map[i][1]));
        free(r.body);
        r.body = hr__dump(o);
        return r;
    }
    json_decref(o);
    return r;
}

hr_reply hr__route_responses(hr_server *s, hr_client *c, const char *body,
                             size_t len) {
    hr_reply err;
    json_t *req = hr__body_parse(body, len, &err);
    if (!req)
        return err;
    /* the conversation through a stored response goes before the input */
    const char *prev = json_string_value(json_object_get(req, "previous_response_id"));
    json_t *history = NULL;
    if (prev && !hr__resp_store_get(s->responses, prev, NULL, &history)) {
        err = hr__error_reply(400, "invalid_request_error", "previous_response_id",
                              "Previous response with id '%s' not found (this server keeps "
                              "the last %d responses, at most %d MiB, in memory)",
                              prev, HR_RESP_STORE_ENTRIES, HR_RESP_STORE_MIB);
        json_decref(req); /* prev pointed into it */
        return err;
    }
    json_t *chat = hr__responses_to_chat(req, history, &err);
    json_decref(history);
    resp *o = chat ? calloc(1, sizeof *o) : NULL;
    if (!o) {
        json_decref(req);
        json_decref(chat);
        return chat ? hr__error_reply(500, "server_error", NULL, "out of memory") : err;
    }
    o->r.s = s;
    bool ok = hr__job_from_json(s, true, chat, &o->r.job, &err);
    bool store = !json_is_false(json_object_get(req, "store"));
    if (ok && store) { /* the messages without this request's instructions */
        json_t *msgs = json_object_get(chat, "messages");
        o->conv = json_array();
        for (size_t i = json_is_string(json_object_get(req, "instructions")) ? 1 : 0;
             i < json_array_size(msgs); i++)
            json_array_append(o->conv, json_array_get(msgs, i));
    }
    json_decref(chat);
    if (ok) {
        o->echo = echo(req, &o->r.job, store);
        o->output = json_array();
    }
    json_decref(req);
    if (!ok || !hr__drive_start(&o->r, c, "input", &err)) {
        resp_free(o);
        return renamed(err);
    }
    hr__make_id(o->id, sizeof o->id, "resp_");
    o->created = (json_int_t)time(NULL);
    o->stream = o->r.job.stream;
    if (!o->stream) {
        hr_reply r = run_blocking(o);
        resp_free(o);
        return r;
    }
    o->r.produce = produce;
    o->r.release = release;
    return (hr_reply){.status = 200, .sse = &o->r};
}

/* GET and DELETE /v1/responses/{id}: a stored response. */
hr_reply hr__route_stored_response(hr_server *s, const char *id, bool del) {
    json_t *r = NULL;
    if (del ? hr__resp_store_delete(s->responses, id)
            : hr__resp_store_get(s->responses, id, &r, NULL))
        return hr__json_reply(200, del ? json_pack("{s:s,s:s,s:b}", "id", id, "object",
                                                   "response", "deleted", 1)
                                       : r);
    return hr__error_reply(404, "invalid_request_error", NULL,
                           "Response with id '%s' not found (never stored, deleted, or evicted: "
                           "this server keeps the last %d responses, at most %d MiB, in memory)",
                           id, HR_RESP_STORE_ENTRIES, HR_RESP_STORE_MIB);
}
