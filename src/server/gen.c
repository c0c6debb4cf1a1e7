/* POST /v1/chat/completions and /v1/completions: submit the job to the
 * engine, then turn its tokens into text (streaming detokenizer, stop
 * strings) and into one response or a stream of SSE events, in
 * mlx_lm.server's shapes (docs/server-api.md). */
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "server/request.h"
#include "api/textout.h"

#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_MS 50
/* A stream silent this long (a long prefill) gets an SSE comment; env
 * HEARTH_SSE_KEEPALIVE (seconds) changes it. */
static double keepalive_s(void) {
    static double v = -1;
    if (v < 0) {
        const char *e = getenv("HEARTH_SSE_KEEPALIVE");
        v = e && *e ? atof(e) : 15.0;
    }
    return v;
}

typedef struct gen {
    hr_server *s;
    hr_job job;
    hr_request *req;
    hr_textout tout;       /* detokenizer + stop strings */
    int fd;                /* the client's socket, to notice it hang up */
    char id[64];
    json_int_t created;
    int n_steps;           /* tokens consumed from the request */
    bool stopped;          /* a stop string ended it */
    const char *finish;    /* "stop" / "length" once known */
    /* non-streaming accumulation */
    char *text;
    size_t len, cap;
    json_t *lp_content;
    /* tool calls (when the request's tools are parsed) */
    hr_tool_parser *tp;
    hr_tool_events ev;
    char *cbuf;            /* the content part of the last routed text */
    size_t clen, ccap;
    json_t *calls;         /* complete calls (the message's tool_calls) */
    json_t *delta;         /* calls for the next chunk's delta */
    /* streaming output buffer */
    char *out;
    size_t out_len, out_off, out_cap;
    bool done_sent;
    bool queued;           /* the engine holds a reference to req */
} gen;

/* ---- helpers ------------------------------------------------------------------------------ */

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *b = realloc(*buf, c);
        if (!b)
            return HR_ENOMEM;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

static void make_id(gen *g) {
    static _Atomic unsigned long counter;
    unsigned long c = atomic_fetch_add(&counter, 1);
    uint64_t r = (uint64_t)(hr_now() * 1e9) ^ ((uint64_t)c * 0x9e3779b97f4a7c15ull);
    snprintf(g->id, sizeof g->id, "%s-%08llx-%04llx-4%03llx-%04llx-%012llx",
             g->job.chat ? "chatcmpl" : "cmpl", (unsigned long long)(r >> 32),
             (unsigned long long)(r >> 16 & 0xffff), (unsigned long long)(c & 0xfff),
             (unsigned long long)(0x8000 | (r & 0x3fff)),
             (unsigned long long)(r * 2654435761ull & 0xffffffffffffull));
    g->created = (json_int_t)time(NULL);
}

static bool client_gone(int fd) {
    if (fd < 0)
        return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
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
static json_t *logprob_entry(const gen *g, const hr_step *st) {
    if (!g->job.top_logprobs)
        return json_pack("{s:i,s:f}", "id", st->token, "logprob", (double)st->logprob);
    json_t *e = token_json(g->s, st->token, st->logprob), *top = json_array();
    for (int k = 0; k < st->n_top; k++)
        json_array_append_new(top, token_json(g->s, st->top_ids[k], st->top_lps[k]));
    json_object_set_new(e, "top_logprobs", top);
    return e;
}

/* Advance one token: text that became final goes to *emit. Returns true
 * when a stop string ended the generation. */
static bool take_step(gen *g, const hr_step *st, const char **emit, size_t *elen) {
    if (!hr_textout_push(&g->tout, st->token, emit, elen))
        return false;
    g->stopped = true;
    hr_request_cancel(g->req);
    return true;
}

/* The end: what the detokenizer and the stop matcher hold back. */
static void take_rest(gen *g, bool eos, const char **emit, size_t *elen) {
    hr_textout_finish(&g->tout, eos, emit, elen);
}

/* Split final text into content and tool calls (when the request's tools
 * are parsed): *e / *el become the content; calls go to g->calls and
 * g->delta. end: the generation is over (flush the parser). */
static void route(gen *g, const char **e, size_t *el, bool end) {
    if (!g->tp)
        return;
    hr_tool_events_reset(&g->ev);
    hr_tool_parser_push(g->tp, *e, *el, &g->ev);
    if (end)
        hr_tool_parser_finish(g->tp, &g->ev);
    g->clen = 0;
    for (size_t i = 0; i < g->ev.n; i++) {
        const hr_tool_event *v = &g->ev.ev[i];
        json_t *call;
        switch (v->kind) {
        case HR_TOOL_EV_CONTENT:
            append(&g->cbuf, &g->clen, &g->ccap, v->text, v->len);
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
    *e = g->cbuf ? g->cbuf : "";
    *el = g->clen;
}

static const char *finish_reason(gen *g, hr_finish f) {
    if (g->stopped || f == HR_FINISH_STOP)
        return g->tp && hr_tool_parser_calls(g->tp) > 0 ? "tool_calls" : "stop";
    return "length";
}

static json_t *usage_json(const gen *g) {
    /* a stop string ends the request early: count what was consumed */
    int completion = g->stopped ? g->n_steps : hr_request_completion_tokens(g->req);
    int prompt = (int)g->job.prompt.n;
    return json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", prompt, "completion_tokens",
                     completion, "total_tokens", prompt + completion, "prompt_tokens_details",
                     "cached_tokens", hr_request_cached_tokens(g->req));
}

static json_t *envelope(const gen *g, const char *object) {
    return json_pack("{s:s,s:s,s:s,s:s,s:I}", "id", g->id, "system_fingerprint",
                     "hearth-0.1.0", "object", object, "model", g->job.model, "created",
                     g->created);
}

static char *dump(json_t *o) {
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(o);
    return s;
}

static void gen_free(gen *g) {
    if (!g)
        return;
    if (g->req) {
        hr_request_cancel(g->req);
        /* the engine's matcher reads the job's grammar until it retires the request */
        hr_step st;
        while (g->queued && g->job.grammar && hr_request_wait(g->req, INT_MAX, &st, WAIT_MS) < 0)
            ;
        hr_request_release(g->req);
    }
    hr_textout_deinit(&g->tout);
    hr_tool_parser_free(g->tp);
    hr_tool_events_free(&g->ev);
    free(g->cbuf);
    json_decref(g->calls);
    json_decref(g->delta);
    hr__job_free(&g->job);
    json_decref(g->lp_content);
    free(g->text);
    free(g->out);
    free(g);
}

/* Token i: 1 with *st, 0 when generation ended before it, -1 when the
 * client left or the server stops; with keepalive, 2 after keepalive_s()
 * seconds without it. */
static int next_step(gen *g, int i, hr_step *st, bool keepalive) {
    double t0 = hr_now();
    for (;;) {
        int rc = hr_request_wait(g->req, i, st, WAIT_MS);
        if (rc >= 0)
            return rc;
        if (keepalive && hr_now() - t0 >= keepalive_s())
            return 2;
        if (client_gone(g->fd) || atomic_load(&g->s->shutting_down)) {
            hr_request_cancel(g->req);
            return -1;
        }
    }
}

/* ---- non-streaming -------------------------------------------------------------------------- */

static hr_reply run_blocking(gen *g) {
    hr_step st;
    const char *e;
    size_t el;
    int rc;
    while ((rc = next_step(g, g->n_steps, &st, false)) == 1) {
        g->n_steps++;
        if (g->job.logprobs || g->job.top_logprobs)
            json_array_append_new(g->lp_content, logprob_entry(g, &st));
        bool hit = take_step(g, &st, &e, &el);
        route(g, &e, &el, false);
        append(&g->text, &g->len, &g->cap, e, el);
        if (hit)
            break;
    }
    if (rc < 0)
        return hr__error_reply(503, "server_error", NULL, "generation cancelled");
    hr_error ferr = {0};
    hr_finish f = g->stopped ? HR_FINISH_STOP : hr_request_finish(g->req, &ferr);
    if (f == HR_FINISH_ERROR)
        return hr__error_reply(500, "server_error", NULL, "%s", ferr.msg);
    if (f == HR_FINISH_CANCELLED && !g->stopped)
        return hr__error_reply(503, "server_error", NULL, "generation cancelled");
    take_rest(g, f == HR_FINISH_STOP, &e, &el);
    route(g, &e, &el, true);
    append(&g->text, &g->len, &g->cap, e, el);
    json_t *choice = json_pack("{s:i,s:s}", "index", 0, "finish_reason", finish_reason(g, f));
    if (g->job.logprobs || g->job.top_logprobs)
        json_object_set_new(choice, "logprobs", json_pack("{s:O}", "content", g->lp_content));
    const char *text = g->text ? g->text : "";
    if (g->job.chat) {
        json_t *msg = json_pack("{s:s,s:o}", "role", "assistant", "content",
                                text[0] ? json_stringn(text, g->len) : json_null());
        if (json_array_size(g->calls))
            json_object_set(msg, "tool_calls", g->calls);
        json_object_set_new(choice, "message", msg);
    } else
        json_object_set_new(choice, "text", json_stringn(text, g->len));
    json_t *o = envelope(g, g->job.chat ? "chat.completion" : "text_completion");
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    json_object_set_new(o, "usage", usage_json(g));
    return (hr_reply){.status = 200, .body = dump(o)};
}

/* ---- streaming ------------------------------------------------------------------------------- */

static int emit_event(gen *g, json_t *o) {
    char *s = dump(o);
    if (!s)
        return HR_ENOMEM;
    int rc = append(&g->out, &g->out_len, &g->out_cap, "data: ", 6) ||
             append(&g->out, &g->out_len, &g->out_cap, s, strlen(s)) ||
             append(&g->out, &g->out_len, &g->out_cap, "\n\n", 2);
    free(s);
    return rc ? HR_ENOMEM : 0;
}

static json_t *chunk(gen *g, const char *text, size_t len, const char *finish,
                     const hr_step *st) {
    json_t *choice = json_pack("{s:i,s:o}", "index", 0, "finish_reason",
                               finish ? json_string(finish) : json_null());
    if (st && (g->job.logprobs || g->job.top_logprobs))
        json_object_set_new(choice, "logprobs",
                            json_pack("{s:[o]}", "content", logprob_entry(g, st)));
    if (g->job.chat) {
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
    json_t *o = envelope(g, g->job.chat ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    return o;
}

/* Produce the next events into g->out; false when the stream is over. */
static bool produce(gen *g) {
    if (g->done_sent)
        return false;
    hr_step st;
    const char *e;
    size_t el;
    int rc;
    while (!g->stopped && (rc = next_step(g, g->n_steps, &st, true)) >= 1) {
        if (rc == 2) { /* a comment, as mlx_lm.server's, keeps clients from timing out */
            int done, total;
            hr_request_progress(g->req, &done, &total);
            char c[64];
            int n = snprintf(c, sizeof c, ": keepalive %d/%d\n\n", done, total);
            append(&g->out, &g->out_len, &g->out_cap, c, (size_t)n);
            return true;
        }
        g->n_steps++;
        bool hit = take_step(g, &st, &e, &el);
        route(g, &e, &el, false);
        if (el || json_array_size(g->delta) || g->job.logprobs || g->job.top_logprobs) {
            emit_event(g, chunk(g, e, el, NULL, &st));
            return true;
        }
        if (hit)
            break;
    }
    if (!g->stopped && rc < 0)
        return false; /* client gone or shutting down: end without [DONE] */
    hr_finish f = g->stopped ? HR_FINISH_STOP : hr_request_finish(g->req, NULL);
    if (f == HR_FINISH_CANCELLED && !g->stopped)
        return false;
    take_rest(g, f == HR_FINISH_STOP, &e, &el);
    route(g, &e, &el, true);
    emit_event(g, chunk(g, e, el, finish_reason(g, f), NULL));
    if (g->job.include_usage) {
        json_t *u = envelope(g, "chat.completion");
        json_object_set_new(u, "choices", json_array());
        json_object_set_new(u, "usage", usage_json(g));
        emit_event(g, u);
    }
    append(&g->out, &g->out_len, &g->out_cap, "data: [DONE]\n\n", 14);
    g->done_sent = true;
    return true;
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    gen *g = cls;
    if (g->out_off == g->out_len) {
        g->out_off = g->out_len = 0;
        if (!produce(g))
            return g->done_sent ? MHD_CONTENT_READER_END_OF_STREAM
                                : MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = g->out_len - g->out_off < max ? g->out_len - g->out_off : max;
    memcpy(buf, g->out + g->out_off, n);
    g->out_off += n;
    return (ssize_t)n;
}

static void sse_free(void *cls) { gen_free(cls); }

/* ---- the route -------------------------------------------------------------------------------- */

hr_reply hr__route_generate(hr_server *s, struct MHD_Connection *c, bool chat,
                            const char *body, size_t len) {
    gen *g = calloc(1, sizeof *g);
    if (!g)
        return hr__error_reply(500, "server_error", NULL, "out of memory");
    g->s = s;
    g->fd = -1;
    hr_reply err;
    if (!hr__job_parse(s, chat, body, len, &g->job, &err)) {
        gen_free(g);
        return err;
    }
    make_id(g);
    hr_error e = {0};
    int rc = hr_request_new(&g->req, s->engine, &g->job.rp, &e);
    if (!rc && !(rc = hr_engine_submit(s->engine, g->req, &e)))
        g->queued = true;
    if (rc) {
        hr_reply r = hr__error_reply(400, "invalid_request_error", chat ? "messages" : "prompt",
                                     "%s", e.msg);
        gen_free(g);
        return r;
    }
    /* with tools, markers may be special tokens: keep them in the text */
    unsigned dflags = g->job.tools ? 0 : HR_DETOK_SKIP_SPECIAL;
    g->calls = json_array();
    g->delta = json_array();
    hr_tool_parser_opts tpo = {.tools = g->job.tools};
    if (g->job.tools && hr_tool_parser_new(&g->tp, s->tool_format, &tpo, &e)) {
        gen_free(g);
        return hr__error_reply(500, "server_error", NULL, "%s", e.msg);
    }
    if (hr_textout_init(&g->tout, s->tok, dflags, (const char *const *)g->job.stops,
                        g->job.n_stops, &e) ||
        !(g->lp_content = json_array())) {
        gen_free(g);
        return hr__error_reply(500, "server_error", NULL, "out of memory");
    }
    /* a generation may outlast the idle timeout (a long prefill sends nothing);
     * the connection is watched instead (client_gone) until it completes */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    g->fd = ci ? ci->connect_fd : -1;
    if (!g->job.stream) {
        hr_reply r = run_blocking(g);
        gen_free(g);
        return r;
    }
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, g, sse_free);
    if (!resp) {
        gen_free(g);
        return hr__error_reply(500, "server_error", NULL, "out of memory");
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    return (hr_reply){.status = 200, .stream = resp};
}
