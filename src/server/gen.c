/* POST /v1/chat/completions and /v1/completions: submit the job to the
 * engine, then turn its tokens into text (streaming detokenizer, stop
 * strings) and into one response or a stream of SSE events, in
 * mlx_lm.server's shapes (docs/server-api.md). */
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "server/drive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct gen {
    hr_drive r;            /* first: the stream's callbacks cast back */
    char id[64];
    json_int_t created;
    /* non-streaming accumulation */
    char *text;
    size_t len, cap;
    json_t *lp_content;
    json_t *calls;         /* complete calls (the message's tool_calls) */
    json_t *delta;         /* calls for the next chunk's delta */
} gen;

/* ---- helpers ------------------------------------------------------------------------------ */

static void make_id(gen *g) {
    static _Atomic unsigned long counter;
    unsigned long c = atomic_fetch_add(&counter, 1);
    uint64_t r = (uint64_t)(hr_now() * 1e9) ^ ((uint64_t)c * 0x9e3779b97f4a7c15ull);
    snprintf(g->id, sizeof g->id, "%s-%08llx-%04llx-4%03llx-%04llx-%012llx",
             g->r.job.chat ? "chatcmpl" : "cmpl", (unsigned long long)(r >> 32),
             (unsigned long long)(r >> 16 & 0xffff), (unsigned long long)(c & 0xfff),
             (unsigned long long)(0x8000 | (r & 0x3fff)),
             (unsigned long long)(r * 2654435761ull & 0xffffffffffffull));
    g->created = (json_int_t)time(NULL);
}

static json_t *token_json(const hr_server *s, int32_t id, float lp) {
    size_t n = 0;
    const char *piece = hr_tokenizer_token_to_piece(s->tok, id, &n);
    return json_pack("{s:i,s:s%,s:f}", "id", id, "token", piece ? piece : "", piece ? n : 0,
                     "logprob", (double)lp);
}

/* mlx-lm's logprobs entry for one step: {id, logprob} or, with top_logprobs,
 * {id, token, logprob, top_logprobs: [...]} (the sampled token outside,
 * the k best inside, best first). */
static json_t *logprob_entry(const gen *g, const hr_gen_event *st) {
    if (!g->r.job.top_logprobs)
        return json_pack("{s:i,s:f}", "id", st->token, "logprob", (double)st->logprob);
    json_t *e = token_json(g->r.s, st->token, st->logprob), *top = json_array();
    for (int k = 0; k < st->n_top; k++)
        json_array_append_new(top, token_json(g->r.s, st->top_ids[k], st->top_logprobs[k]));
    json_object_set_new(e, "top_logprobs", top);
    return e;
}

/* The call pieces of the last event (when the request's tools are parsed;
 * its text is the content outside them) into g->calls and g->delta. */
static void route_calls(gen *g) {
    for (size_t i = 0; i < g->r.ev->n; i++) {
        const hr_tool_event *v = &g->r.ev->ev[i];
        json_t *call;
        switch (v->kind) {
        case HR_TOOL_EV_CONTENT:
            break;
        case HR_TOOL_EV_CALL_START:
            json_array_append_new(g->calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", v->id,
                                                      "type", "function", "function", "name",
                                                      v->name, "arguments", ""));
            json_array_append_new(g->delta, json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index",
                                                      v->index, "id", v->id, "type", "function",
                                                      "function", "name", v->name, "arguments",
                                                      ""));
            break;
        case HR_TOOL_EV_CALL_ARGS:
            call = json_object_get(json_array_get(g->calls, (size_t)v->index), "function");
            if (call) {
                const char *old = json_string_value(json_object_get(call, "arguments"));
                size_t ol = old ? strlen(old) : 0;
                char *joined = malloc(ol + v->len + 1);
                if (joined) {
                    memcpy(joined, old ? old : "", ol);
                    memcpy(joined + ol, v->text, v->len);
                    joined[ol + v->len] = 0;
                    json_object_set_new(call, "arguments", json_string(joined));
                    free(joined);
                }
            }
            json_array_append_new(g->delta, json_pack("{s:i,s:{s:s%}}", "index", v->index,
                                                      "function", "arguments", v->text,
                                                      v->len));
            break;
        case HR_TOOL_EV_CALL_END:
            break;
        }
    }
}

static const char *finish_reason(gen *g) {
    if (g->r.last.finish == HR_GEN_STOP)
        return g->r.last.n_tool_calls > 0 ? "tool_calls" : "stop";
    return "length";
}

static json_t *usage_json(const gen *g) {
    int completion = hr__drive_completion_tokens(&g->r);
    int prompt = (int)g->r.job.prompt.n;
    json_t *u = json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", prompt, "completion_tokens",
                          completion, "total_tokens", prompt + completion,
                          "prompt_tokens_details", "cached_tokens", g->r.last.cached_tokens);
    if (g->r.job.rp.spec != HR_SPEC_OFF) { /* OpenAI's predicted-output counts */
        json_object_set_new(u, "completion_tokens_details",
                            json_pack("{s:i,s:i}", "accepted_prediction_tokens",
                                      g->r.last.accepted_tokens, "rejected_prediction_tokens",
                                      g->r.last.drafted_tokens - g->r.last.accepted_tokens));
    }
    return u;
}

static json_t *envelope(const gen *g, const char *object) {
    return json_pack("{s:s,s:s,s:s,s:s,s:I}", "id", g->id, "system_fingerprint",
                     "hearth-0.1.0", "object", object, "model", g->r.job.model, "created",
                     g->created);
}

static void gen_free(gen *g) {
    if (!g)
        return;
    hr__drive_deinit(&g->r);
    json_decref(g->calls);
    json_decref(g->delta);
    json_decref(g->lp_content);
    free(g->text);
    free(g);
}

/* ---- non-streaming -------------------------------------------------------------------------- */

static hr_reply run_blocking(gen *g) {
    hr_gen_event ev;
    const char *e;
    size_t el;
    int rc;
    while ((rc = hr__drive_next(&g->r, &ev, false)) == 1 && ev.token >= 0) {
        if (g->r.job.logprobs || g->r.job.top_logprobs)
            json_array_append_new(g->lp_content, logprob_entry(g, &ev));
        e = ev.text;
        el = ev.text_len;
        route_calls(g);
        hr__buf_append(&g->text, &g->len, &g->cap, e, el);
    }
    if (rc < 0 || ev.finish == HR_GEN_CANCELLED)
        return hr__error_reply(503, "server_error", NULL, "generation cancelled");
    if (ev.finish == HR_GEN_ERROR)
        return hr__error_reply(500, "server_error", NULL, "%s", g->r.err);
    e = ev.text;
    el = ev.text_len;
    route_calls(g);
    hr__buf_append(&g->text, &g->len, &g->cap, e, el);
    json_t *choice = json_pack("{s:i,s:s}", "index", 0, "finish_reason", finish_reason(g));
    if (g->r.job.logprobs || g->r.job.top_logprobs)
        json_object_set_new(choice, "logprobs", json_pack("{s:O}", "content", g->lp_content));
    const char *text = g->text ? g->text : "";
    if (g->r.job.chat) {
        json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                                text[0] ? json_stringn(text, g->len) : json_null());
        if (json_array_size(g->calls))
            json_object_set(msg, "tool_calls", g->calls);
        json_object_set_new(choice, "message", msg);
    } else
        json_object_set_new(choice, "text", json_stringn(text, g->len));
    json_t *o = envelope(g, g->r.job.chat ? "chat.completion" : "text_completion");
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    json_object_set_new(o, "usage", usage_json(g));
    return (hr_reply){.status = 200, .body = hr__dump(o)};
}

/* ---- streaming ------------------------------------------------------------------------------- */

static int emit_event(gen *g, json_t *o) { return hr__sse_event(&g->r, NULL, o); }

static json_t *chunk(gen *g, const char *text, size_t len, const char *finish,
                     const hr_gen_event *st) {
    json_t *choice = json_pack("{s:i,s:o}", "index", 0, "finish_reason",
                               finish ? json_string(finish) : json_null());
    if (st && (g->r.job.logprobs || g->r.job.top_logprobs))
        json_object_set_new(choice, "logprobs",
                            json_pack("{s:[o]}", "content", logprob_entry(g, st)));
    if (g->r.job.chat) {
        json_t *delta = json_pack("{s:s}", "role", "assistant");
        if (len)
            json_object_set_new(delta, "content", json_stringn(text, len));
        if (json_array_size(g->delta)) {
            json_object_set_new(delta, "tool_calls", g->delta);
            g->delta = json_array();
        }
        json_object_set_new(choice, "delta", delta);
    } else {
        json_object_set_new(choice, "text", json_stringn(text, len));
    }
    json_t *o = envelope(g, g->r.job.chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    return o;
}

/* Produce the next events into g->r.out; false when the stream is over. */
static bool produce(hr_drive *r) {
    gen *g = (gen *)r;
    if (g->r.done)
        return false;
    hr_gen_event ev;
    const char *e;
    size_t el;
    int rc;
    while ((rc = hr__drive_next(&g->r, &ev, true)) >= 1) {
        if (rc == 2) { /* a comment, as mlx_lm.server's, keeps clients from timing out */
            int done, total;
            hr_request_progress(g->r.req, &done, &total);
            char c[64];
            int n = snprintf(c, sizeof c, ": keepalive %d/%d\n\n", done, total);
            hr__buf_append(&g->r.out, &g->r.out_len, &g->r.out_cap, c, (size_t)n);
            return true;
        }
        if (ev.token < 0)
            break;
        e = ev.text;
        el = ev.text_len;
        route_calls(g);
        if (el || json_array_size(g->delta) || g->r.job.logprobs || g->r.job.top_logprobs) {
            emit_event(g, chunk(g, e, el, NULL, &ev));
            return true;
        }
    }
    if (rc < 0 || ev.finish == HR_GEN_CANCELLED)
        return false; /* client gone or shutting down: end without [DONE] */
    if (ev.finish == HR_GEN_ERROR) { /* the error in OpenAI's shape, then the end */
        emit_event(g, json_pack("{s:{s:s,s:s}}", "error", "message", g->r.err, "type",
                                "server_error"));
        g->r.done = true;
        return true;
    }
    e = ev.text;
    el = ev.text_len;
    route_calls(g);
    emit_event(g, chunk(g, e, el, finish_reason(g), NULL));
    if (g->r.job.include_usage) {
        json_t *u = envelope(g, "chat.completion");
        json_object_set_new(u, "choices", json_array());
        json_object_set_new(u, "usage", usage_json(g));
        emit_event(g, u);
    }
    hr__buf_append(&g->r.out, &g->r.out_len, &g->r.out_cap, "data: [DONE]\n\n", 14);
    g->r.done = true;
    return true;
}

static void release(hr_drive *r) { gen_free((gen *)r); }

/* ---- the route -------------------------------------------------------------------------------- */

hr_reply hr__route_generate(hr_server *s, hr_client *c, bool chat,
                            const char *body, size_t len) {
    gen *g = calloc(1, sizeof *g);
    if (!g)
        return hr__error_reply(500, "server_error", NULL, "out of memory");
    g->r.s = s;
    hr_reply err;
    if (!hr__job_parse(s, chat, body, len, &g->r.job, &err)) {
        gen_free(g);
        return err;
    }
    make_id(g);
    g->calls = json_array();
    g->delta = json_array();
    g->lp_content = json_array();
    if (!g->calls || !g->delta || !g->lp_content) {
        gen_free(g);
        return hr__error_reply(500, "server_error", NULL, "out of memory");
    }
    if (!hr__drive_start(&g->r, c, chat ? "messages" : "prompt", &err)) {
        gen_free(g);
        return err;
    }
    if (!g->r.job.stream) {
        hr_reply r = run_blocking(g);
        gen_free(g);
        return r;
    }
    g->r.produce = produce;
    g->r.release = release;
    return (hr_reply){.status = 200, .sse = &g->r};
}
