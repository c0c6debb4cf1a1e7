/* One generation for an HTTP route (drive.h): submitting the job, reading its
 * tokens back as final text and tool calls, and the event-stream plumbing
 * the routes share. */
#include "server/drive.h"
#include "core/error.h"
#include "core/timer.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAIT_MS 50

/* ---- helpers ------------------------------------------------------------------------------ */

/* A stream silent this long (a long prefill) gets a keep-alive; env
 * HEARTH_SSE_KEEPALIVE (seconds) changes it. */
double hr__drive_keepalive_s(void) {
    static double v = -1;
    if (v < 0) {
        const char *e = getenv("HEARTH_SSE_KEEPALIVE");
        v = e && *e ? atof(e) : 15.0;
    }
    return v;
}

int hr__buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
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

char *hr__dump(json_t *o) {
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(o);
    return s;
}

void hr__make_id(char *buf, size_t n, const char *prefix) {
    static _Atomic unsigned long counter;
    unsigned long c = atomic_fetch_add(&counter, 1);
    uint64_t a = (uint64_t)(hr_now() * 1e9) ^ ((uint64_t)c * 0x9e3779b97f4a7c15ull);
    uint64_t b = (a ^ (a >> 29)) * 0xbf58476d1ce4e5b9ull;
    b ^= b >> 32;
    snprintf(buf, n, "%s%016llx%08llx", prefix, (unsigned long long)b,
             (unsigned long long)(c & 0xffffffffull));
}

/* A real hang-up: the connection closed, or the socket was reset. The end
 * of the client's input alone (a half-close after the request, which
 * HTTP/1.1 allows) is not one: the client still waits for its answer. */
bool hr__client_gone(hr_client *c) {
    if (!c)
        return false;
    if (atomic_load(&c->gone))
        return true;
    if (c->fd < 0)
        return false;
    struct pollfd p = {.fd = c->fd, .events = 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLERR | POLLNVAL));
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

bool hr__drive_start(hr_drive *r, hr_client *c, const char *param, hr_reply *err) {
    hr_server *s = r->s;
    hr_error e = {0};
    r->client = c;
    r->t_start = hr_now();
    r->deadline = s->o.request_timeout > 0 ? r->t_start + s->o.request_timeout : 0;
    int rc = hr__gen_start(&r->gen, r->job.m->session, &r->job.rp, (const char *const *)r->job.stops,
                           r->job.n_stops, r->job.tools, &e);
    if (rc) {
        *err = rc == HR_ENOMEM ? hr__error_reply(500, "server_error", NULL, "out of memory")
                               : hr__error_reply(400, "invalid_request_error", param, "%s", e.msg);
        return false;
    }
    r->req = hr__gen_request(r->gen);
    r->ev = hr__gen_tool_events(r->gen);
    return true;
}

void hr__drive_deinit(hr_drive *r) {
    /* first: it waits for the engine to let go of the job's grammar */
    hr_gen_free(r->gen);
    hr__job_free(&r->job);
    free(r->out);
}

/* ---- event by event ----------------------------------------------------------------------- */

int hr__drive_poll(hr_drive *r, hr_gen_event *ev, int wait_ms) {
    double now = hr_now();
    if (now - r->t_watch >= WAIT_MS * 1e-3) { /* a poll at most every WAIT_MS */
        r->t_watch = now;
        if (hr__client_gone(r->client)) {
            hr_gen_cancel(r->gen);
            return -1;
        }
    }
    bool late = r->deadline > 0 && now > r->deadline;
    if (late || atomic_load(&r->s->shutting_down)) {
        /* the last event is an error the client is told about */
        hr_gen_cancel(r->gen);
        if (late)
            snprintf(r->err, sizeof r->err, "the request ran past its time limit of %g s "
                     "(--request-timeout)", r->s->o.request_timeout);
        else
            snprintf(r->err, sizeof r->err, "the server is shutting down");
        *ev = (hr_gen_event){.text = "", .token = -1, .finish = HR_GEN_ERROR,
                             .prompt_tokens = (int)r->job.prompt.n,
                             .completion_tokens = r->n_steps};
        r->last = *ev;
        r->ended = true;
        return 1;
    }
    hr_error e = {0};
    int rc = hr__gen_next_timed(r->gen, ev, wait_ms, &e);
    if (rc == 1 && ev->token >= 0) {
        now = hr_now();
        if (r->n_steps++ == 0)
            hr__metrics_ttft(&r->s->metrics, now - r->t_start);
        else
            hr__metrics_itl(&r->s->metrics, now - r->t_last);
        r->t_last = now;
        return 1;
    }
    if (rc == 1 || rc < 0) { /* the last event (an error comes as one too) */
        if (rc < 0)
            snprintf(r->err, sizeof r->err, "%s", e.msg);
        r->last = *ev;
        r->ended = true;
        return 1;
    }
    return 0;
}

int hr__drive_next(hr_drive *r, hr_gen_event *ev, bool keepalive) {
    double t0 = hr_now();
    for (;;) {
        int rc = hr__drive_poll(r, ev, WAIT_MS);
        if (rc)
            return rc;
        if (keepalive && hr_now() - t0 >= hr__drive_keepalive_s())
            return 2;
    }
}

int hr__drive_completion_tokens(const hr_drive *r) { return r->last.completion_tokens; }

const char *hr__drive_stop_matched(const hr_drive *r) { return hr__gen_stop_matched(r->gen); }

/* ---- piece by piece ----------------------------------------------------------------------- */

hr_drive_pull hr__drive_pull(hr_drive *r, bool keepalive, const char **text, size_t *len,
                         hr_error *err) {
    *text = "";
    *len = 0;
    if (r->ended)
        return HR_DRIVE_END;
    hr_gen_event ev;
    int rc = hr__drive_next(r, &ev, keepalive);
    if (rc == 2)
        return HR_DRIVE_KEEPALIVE;
    if (rc < 0) {
        hr_err(err, HR_ECANCELLED, "generation cancelled");
        return HR_DRIVE_ABORTED;
    }
    *text = ev.text;
    *len = ev.text_len;
    if (ev.token >= 0)
        return HR_DRIVE_PIECE; /* a stop string found here ends it next call */
    if (ev.finish == HR_GEN_ERROR) {
        hr_err(err, HR_EIO, "%s", r->err);
        return HR_DRIVE_ABORTED;
    }
    if (ev.finish == HR_GEN_CANCELLED) {
        hr_err(err, HR_ECANCELLED, "generation cancelled");
        return HR_DRIVE_ABORTED;
    }
    return HR_DRIVE_END;
}

hr_drive_outcome hr__drive_outcome(const hr_drive *r) {
    bool stopped = hr__drive_stop_matched(r) != NULL;
    if (r->last.finish == HR_GEN_LENGTH && !stopped)
        return HR_OUTCOME_LENGTH;
    if (r->last.n_tool_calls > 0)
        return HR_OUTCOME_TOOL_CALLS;
    return stopped ? HR_OUTCOME_STOP_STRING : HR_OUTCOME_EOS;
}

/* ---- event streams ------------------------------------------------------------------------ */

int hr__sse_event(hr_drive *r, const char *name, json_t *o) {
    char *s = hr__dump(o);
    if (!s)
        return HR_ENOMEM;
    int rc = 0;
    if (name)
        rc = hr__buf_append(&r->out, &r->out_len, &r->out_cap, "event: ", 7) ||
             hr__buf_append(&r->out, &r->out_len, &r->out_cap, name, strlen(name)) ||
             hr__buf_append(&r->out, &r->out_len, &r->out_cap, "\n", 1);
    rc = rc || hr__buf_append(&r->out, &r->out_len, &r->out_cap, "data: ", 6) ||
         hr__buf_append(&r->out, &r->out_len, &r->out_cap, s, strlen(s)) ||
         hr__buf_append(&r->out, &r->out_len, &r->out_cap, "\n\n", 2);
    free(s);
    return rc ? HR_ENOMEM : 0;
}

