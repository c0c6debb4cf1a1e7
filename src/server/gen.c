/* POST /v1/chat/completions and /v1/completions: submit the job to the
 * engine, then turn its tokens into text (streaming detokenizer, stop
 * strings) and into one response or a stream of SSE events, in
 * mlx_lm.server's shapes (docs/server-api.md).
 *
 * n > 1 asks for several choices from one prompt: n requests on the
 * engine, choice i sampled with seed + i (vLLM's rule; choice 0 is what the
 * same request with n = 1 gives). Choice 0 goes first; the others are
 * submitted once its prompt is computed, so they take its KV blocks from
 * the prompt cache instead of computing the prompt again. */
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "server/drive.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One choice: its generation and what it has produced so far. */
typedef struct choice {
    hr_drive *d;           /* choice 0's is the gen's own; others are owned */
    /* non-streaming accumulation */
    char *text;
    size_t len, cap;
    json_t *lp_content;
    json_t *calls;         /* complete calls (the message's tool_calls) */
    json_t *delta;         /* calls for the next chunk's delta */
    bool pending;          /* ev was read and not handled yet */
    hr_gen_event ev;
    bool ended;            /* its last event was handled */
} choice;

typedef struct gen {
    hr_drive r;            /* first: the stream's callbacks cast back; choice 0's */
    char id[64];
    json_int_t created;
    hr_client *conn;
    const char *param;     /* the prompt's field, for errors */
    int n, n_started;      /* choices asked for; submitted to the engine */
    int next;              /* streaming: the choice looked at first */
    double t_event;        /* streaming: the last event (keep-alive) */
    choice ch[HR_API_MAX_N];
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

static json_t *token_json(const hr_served *m, int32_t id, float lp) {
    size_t n = 0;
    const char *piece = hr_tokenizer_token_to_piece(m->tok, id, &n);
    return json_pack("{s:i,s:s%,s:f}", "id", id, "token", piece ? piece : "", piece ? n : 0,
                     "logprob", (double)lp);
}

/* mlx-lm's logprobs entry for one step: {id, logprob} or, with top_logprobs,
 * {id, token, logprob, top_logprobs: [...]} (the sampled token outside,
 * the k best inside, best first). */
static json_t *logprob_entry(const gen *g, const hr_gen_event *st) {
    if (!g->r.job.top_logprobs)
        return json_pack("{s:i,s:f}", "id", st->token, "logprob", (double)st->logprob);
    json_t *e = token_json(g->r.job.m, st->token, st->logprob), *top = json_array();
    for (int k = 0; k < st->n_top; k++)
        json_array_append_new(top, token_json(g->r.job.m, st->top_ids[k], st->top_logprobs[k]));
    json_object_set_new(e, "top_logprobs", top);
    return e;
}

/* The call pieces of c's last event (when the request's tools are parsed;
 * its text is the content outside them) into c->calls and c->delta. */
static void route_calls(choice *c) {
    for (size_t i = 0; i < c->d->ev->n; i++) {
        const hr_tool_event *v = &c->d->ev->ev[i];
        json_t *call;
        switch (v->kind) {
        case HR_TOOL_EV_CONTENT:
            break;
        case HR_TOOL_EV_CALL_START:
            json_array_append_new(c->calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", v->id,
                                                      "type", "function", "function", "name",
                                                      v->name, "arguments", ""));
            json_array_append_new(c->delta, json_pack("{s:i,s:s,s:s,s:{s:s,s:s}}", "index",
                                                      v->index, "id", v->id, "type", "function",
                                                      "function", "name", v->name, "arguments",
                                                      ""));
            break;
        case HR_TOOL_EV_CALL_ARGS:
            call = json_object_get(json_array_get(c->calls, (size_t)v->index), "function");
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
            json_array_append_new(c->delta, json_pack("{s:i,s:{s:s%}}", "index", v->index,
                                                      "function", "arguments", v->text,
                                                      v->len));
            break;
        case HR_TOOL_EV_CALL_END:
            break;
        }
    }
}

static const char *finish_reason(const choice *c) {
    if (c->d->last.finish == HR_GEN_STOP)
        return c->d->last.n_tool_calls > 0 ? "tool_calls" : "stop";
    return "length";
}

/* OpenAI's usage over every choice: the prompt (and its cached part, choice
 * 0's) once, the completion tokens of all. */
static json_t *usage_json(const gen *g) {
    int completion = 0, drafted = 0, accepted = 0;
    for (int i = 0; i < g->n_started; i++) {
        const hr_drive *d = g->ch[i].d;
        completion += hr__drive_completion_tokens(d);
        drafted += d->last.drafted_tokens;
        accepted += d->last.accepted_tokens;
    }
    int prompt = (int)g->r.job.prompt.n;
    json_t *u = json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", prompt, "completion_tokens",
                          completion, "total_tokens", prompt + completion,
                          "prompt_tokens_details", "cached_tokens", g->r.last.cached_tokens);
    if (g->r.job.rp.spec != HR_SPEC_OFF) { /* OpenAI's predicted-output counts */
        json_object_set_new(u, "completion_tokens_details",
                            json_pack("{s:i,s:i}", "accepted_prediction_tokens", accepted,
                                      "rejected_prediction_tokens", drafted - accepted));
    }
    return u;
}

static json_t *envelope(const gen *g, const char *object) {
    return json_pack("{s:s,s:s,s:s,s:s,s:I}", "id", g->id, "system_fingerprint",
                     "hearth-0.1.0", "object", object, "model", g->r.job.model, "created",
                     g->created);
}

static void choice_deinit(choice *c, bool own) {
    if (own && c->d) {
        memset(&c->d->job, 0, sizeof c->d->job); /* the gen's job, shared */
        hr__drive_deinit(c->d);
        free(c->d);
    }
    json_decref(c->calls);
    json_decref(c->delta);
    json_decref(c->lp_content);
    free(c->text);
}

static void gen_free(gen *g) {
    if (!g)
        return;
    for (int i = g->n - 1; i >= 0; i--) /* the others first: they share choice 0's job */
        choice_deinit(&g->ch[i], i > 0);
    hr__drive_deinit(&g->r);
    free(g);
}

static bool choice_init(choice *c) {
    c->calls = json_array();
    c->delta = json_array();
    c->lp_content = json_array();
    return c->calls && c->delta && c->lp_content;
}

/* Submit choices 1..n-1 (choice 0's prompt is computed by now): the
 * job's parameters with seed + i. */
static bool start_rest(gen *g, hr_reply *err) {
    while (g->n_started < g->n) {
        int i = g->n_started;
        hr_drive *d = calloc(1, sizeof *d);
        if (!d) {
            *err = hr__error_reply(500, "server_error", NULL, "out of memory");
            return false;
        }
        d->s = g->r.s;
        d->job = g->r.job;
        d->job.rp.sampler.seed = g->r.job.rp.sampler.seed + (uint64_t)i;
        g->ch[i].d = d;
        g->n_started++; /* freed by gen_free from here on */
        if (!hr__drive_start(d, g->conn, g->param, err))
            return false;
    }
    return true;
}

/* The next event of c (the pending one first): as hr__drive_poll. */
static int choice_poll(choice *c, hr_gen_event *ev, int wait_ms) {
    if (c->pending) {
        c->pending = false;
        *ev = c->ev;
        return 1;
    }
    return hr__drive_poll(c->d, ev, wait_ms);
}

/* ---- non-streaming -------------------------------------------------------------------------- */

/* c's events to its end; false with *err (the reply) when it failed. */
static bool run_choice(gen *g, choice *c, hr_reply *err) {
    hr_gen_event ev;
    int rc;
    while ((rc = choice_poll(c, &ev, 50)) >= 0) {
        if (rc == 0)
            continue;
        if (g->r.job.logprobs || g->r.job.top_logprobs) {
            if (ev.token >= 0)
                json_array_append_new(c->lp_content, logprob_entry(g, &ev));
        }
        route_calls(c);
        hr__buf_append(&c->text, &c->len, &c->cap, ev.text, ev.text_len);
        if (ev.token < 0)
            break;
    }
    if (rc < 0 || ev.finish == HR_GEN_CANCELLED) {
        *err = hr__error_reply(503, "server_error", NULL, "generation cancelled");
        return false;
    }
    if (ev.finish == HR_GEN_ERROR) {
        *err = hr__error_reply(500, "server_error", NULL, "%s", c->d->err);
        return false;
    }
    c->ended = true;
    return true;
}

static json_t *choice_json(const gen *g, int i) {
    const choice *c = &g->ch[i];
    json_t *o = json_pack("{s:i,s:s}", "index", i, "finish_reason", finish_reason(c));
    if (g->r.job.logprobs || g->r.job.top_logprobs)
        json_object_set_new(o, "logprobs", json_pack("{s:O}", "content", c->lp_content));
    const char *text = c->text ? c->text : "";
    if (g->r.job.chat) {
        json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                                text[0] ? json_stringn(text, c->len) : json_null());
        if (json_array_size(c->calls))
            json_object_set(msg, "tool_calls", c->calls);
        json_object_set_new(o, "message", msg);
    } else
        json_object_set_new(o, "text", json_stringn(text, c->len));
    return o;
}

static hr_reply run_blocking(gen *g) {
    hr_reply err;
    if (g->n > 1) { /* choice 0's first event: its prompt is in the cache */
        choice *c = &g->ch[0];
        int rc;
        while ((rc = hr__drive_poll(c->d, &c->ev, 50)) == 0)
            ;
        if (rc < 0)
            return hr__error_reply(503, "server_error", NULL, "generation cancelled");
        c->pending = true;
        if (!start_rest(g, &err))
            return err;
    }
    for (int i = 0; i < g->n; i++)
        if (!run_choice(g, &g->ch[i], &err))
            return err;
    json_t *o = envelope(g, g->r.job.chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (int i = 0; i < g->n; i++)
        json_array_append_new(choices, choice_json(g, i));
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json(g));
    return (hr_reply){.status = 200, .body = hr__dump(o)};
}

/* ---- streaming ------------------------------------------------------------------------------- */

static int emit_event(gen *g, json_t *o) { return hr__sse_event(&g->r, NULL, o); }

static json_t *chunk(gen *g, int i, const char *text, size_t len, const char *finish,
                     const hr_gen_event *st) {
    choice *c = &g->ch[i];
    json_t *ch = json_pack("{s:i,s:o}", "index", i, "finish_reason",
                           finish ? json_string(finish) : json_null());
    if (st && (g->r.job.logprobs || g->r.job.top_logprobs))
        json_object_set_new(ch, "logprobs", json_pack("{s:[o]}", "content", logprob_entry(g, st)));
    if (g->r.job.chat) {
        json_t *delta = json_pack("{s:s}", "role", "assistant");
        if (len)
            json_object_set_new(delta, "content", json_stringn(text, len));
        if (json_array_size(c->delta)) {
            json_object_set_new(delta, "tool_calls", c->delta);
            c->delta = json_array();
        }
        json_object_set_new(ch, "delta", delta);
    } else {
        json_object_set_new(ch, "text", json_stringn(text, len));
    }
    json_t *o = envelope(g, g->r.job.chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_pack("[o]", ch));
    return o;
}

static void keepalive(gen *g) {
    int done, total;
    hr_request_progress(g->r.req, &done, &total);
    char c[64];
    int n = snprintf(c, sizeof c, ": keepalive %d/%d\n\n", done, total);
    hr__buf_append(&g->r.out, &g->r.out_len, &g->r.out_cap, c, (size_t)n);
}

typedef enum stream_step { STEP_NONE, STEP_OUTPUT, STEP_ABORT } stream_step;

/* One event of choice i into the stream. */
static stream_step stream_event(gen *g, int i, const hr_gen_event *ev) {
    choice *c = &g->ch[i];
    if (ev->token >= 0) {
        route_calls(c);
        if (ev->text_len || json_array_size(c->delta) || g->r.job.logprobs ||
            g->r.job.top_logprobs) {
            emit_event(g, chunk(g, i, ev->text, ev->text_len, NULL, ev));
            return STEP_OUTPUT;
        }
        return STEP_NONE;
    }
    if (ev->finish == HR_GEN_CANCELLED)
        return STEP_ABORT; /* client gone or shutting down: end without [DONE] */
    if (ev->finish == HR_GEN_ERROR) { /* the error in OpenAI's shape, then the end */
        emit_event(g, json_pack("{s:{s:s,s:s}}", "error", "message", c->d->err, "type",
                                "server_error"));
        g->r.done = true;
        return STEP_OUTPUT;
    }
    route_calls(c);
    emit_event(g, chunk(g, i, ev->text, ev->text_len, finish_reason(c), NULL));
    c->ended = true;
    for (int k = 0; k < g->n; k++)
        if (!g->ch[k].ended)
            return STEP_OUTPUT;
    if (g->r.job.include_usage) {
        json_t *u = envelope(g, "chat.completion");
        json_object_set_new(u, "choices", json_array());
        json_object_set_new(u, "usage", usage_json(g));
        emit_event(g, u);
    }
    hr__buf_append(&g->r.out, &g->r.out_len, &g->r.out_cap, "data: [DONE]\n\n", 14);
    g->r.done = true;
    return STEP_OUTPUT;
}

static void cancel_all(gen *g) {
    for (int i = 0; i < g->n_started; i++)
        hr_gen_cancel(g->ch[i].d->gen);
}

/* Produce the next events into g->r.out; false when the stream is over. */
static bool produce(hr_drive *r) {
    gen *g = (gen *)r;
    if (g->r.done)
        return false;
    hr_gen_event ev;
    for (;;) {
        if (g->n_started < g->n) { /* choice 0's first event, then the others */
            choice *c = &g->ch[0];
            int rc = hr__drive_poll(c->d, &c->ev, 50);
            if (rc < 0)
                return false;
            if (rc == 1) {
                c->pending = true;
                hr_reply err;
                if (!start_rest(g, &err)) {
                    free(err.body);
                    cancel_all(g);
                    emit_event(g, json_pack("{s:{s:s,s:s}}", "error", "message",
                                            "could not start every choice", "type",
                                            "server_error"));
                    g->r.done = true;
                    return true;
                }
                continue;
            }
        } else {
            /* every choice once, without waiting, from the one after the
             * last that produced; when none had an event, a short wait on
             * the first unfinished one */
            int first = -1;
            for (int k = 0; k <= g->n; k++) {
                int i = k < g->n ? (g->next + k) % g->n : first;
                if (i < 0 || g->ch[i].ended)
                    continue;
                if (first < 0)
                    first = i;
                int rc = choice_poll(&g->ch[i], &ev, k < g->n ? 0 : 20);
                if (rc < 0) {
                    cancel_all(g);
                    return false;
                }
                if (rc == 0)
                    continue;
                g->t_event = hr_now();
                stream_step st = stream_event(g, i, &ev);
                if (st == STEP_ABORT) {
                    cancel_all(g);
                    return false;
                }
                if (st == STEP_OUTPUT) {
                    g->next = (i + 1) % g->n;
                    return true;
                }
            }
        }
        /* a comment, as mlx_lm.server's, keeps clients from timing out */
        if (hr_now() - g->t_event >= hr__drive_keepalive_s()) {
            g->t_event = hr_now();
            keepalive(g);
            return true;
        }
    }
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
    g->conn = c;
    g->param = chat ? "messages" : "prompt";
    g->n = g->r.job.n;
    g->ch[0].d = &g->r;
    for (int i = 0; i < g->n; i++)
        if (!choice_init(&g->ch[i])) {
            gen_free(g);
            return hr__error_reply(500, "server_error", NULL, "out of memory");
        }
    if (!hr__drive_start(&g->r, c, g->param, &err)) {
        gen_free(g);
        return err;
    }
    g->n_started = 1;
    g->t_event = hr_now();
    if (!g->r.job.stream) {
        hr_reply r = run_blocking(g);
        gen_free(g);
        return r;
    }
    g->r.produce = produce;
    g->r.release = release;
    return (hr_reply){.status = 200, .sse = &g->r};
}
