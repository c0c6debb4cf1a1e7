/* One generation on behalf of an HTTP route, whatever API shapes it: the
 * parsed job goes to the engine as an hr_gen (src/api/gen.c: the public
 * API's own request, so the routes' text is the library's, byte for byte),
 * and the route reads its events back as final text split into content and
 * tool calls. gen.c (OpenAI chat and completions), anthropic.c
 * (/v1/messages) and responses.c (/v1/responses) shape what comes out; the
 * event-stream plumbing at the end is shared by their streams.
 *
 * A route embeds hr_drive as the first member of its own state, so the
 * stream's callbacks can get back to it. */
#ifndef HR_SERVER_DRIVE_H
#define HR_SERVER_DRIVE_H

#include "server/request.h"

typedef struct hr_drive hr_drive;

struct hr_drive {
    hr_server *s;
    hr_job job;             /* owned; filled by the route before hr__drive_start */
    hr_gen *gen;
    hr_request *req;        /* gen's, for progress and the cached tokens */
    hr_client *client;      /* who waits for it (NULL: nobody to watch) */
    double deadline;        /* hr_now() past which it ends with an error; 0: none */
    double t_watch;         /* the client was last looked at */
    int n_steps;            /* tokens consumed from the request */
    double t_start, t_last; /* submitted; the last token received (for /metrics) */
    bool ended;             /* the last event came */
    hr_gen_event last;      /* it: the finish (HR_GEN_*) and usage */
    char err[256];          /* with HR_GEN_ERROR: why */
    /* tool calls (when the request's tools are parsed) */
    const hr_tool_events *ev; /* with tools: the last event's call pieces (gen's) */
    /* event-stream output: produce() appends events to out and returns
     * false when there is nothing more (done: the stream ended cleanly) */
    char *out;
    size_t out_len, out_off, out_cap;
    bool done;
    bool (*produce)(hr_drive *r);
    void (*release)(hr_drive *r); /* frees the route's state around r */
};

/* Submit r->job (r->s set, r->job parsed): the hr_gen and the tool parser.
 * c (the client, watched for a hang-up) may be NULL. On failure returns false with
 * *err: a 400 naming param when the engine refuses the prompt, a 500
 * otherwise. hr__drive_deinit in every case. */
/* The client hung up (its connection closed or was reset; a half-close is
 * not a hang-up). NULL: never. */
bool hr__client_gone(hr_client *c);

bool hr__drive_start(hr_drive *r, hr_client *c, const char *param, hr_reply *err);
void hr__drive_deinit(hr_drive *r);

/* ---- event by event (gen.c's loops) ---- */

/* The next event: 1 with *ev (a token, its final text; or the last event,
 * ev->token -1: the text held back, the finish, usage; r->last and r->ended
 * set, r->err with HR_GEN_ERROR: also when the request ran past
 * --request-timeout or the server stops), -1 when the client left (the
 * request is cancelled); with keepalive, 2 after the keep-alive
 * interval without an event. */
int hr__drive_next(hr_drive *r, hr_gen_event *ev, bool keepalive);
/* One look: 1 with *ev as above, 0 when nothing came within wait_ms, -1
 * when the client left or the server stops (the request is cancelled). */
int hr__drive_poll(hr_drive *r, hr_gen_event *ev, int wait_ms);
/* Keep-alive seconds of a silent stream (env HEARTH_SSE_KEEPALIVE). */
double hr__drive_keepalive_s(void);
/* Generated tokens for usage (once ended): what was consumed when a stop
 * string ended it, else the engine's count (with the end-of-sequence token). */
int hr__drive_completion_tokens(const hr_drive *r);
/* The stop string that ended the text, or NULL. */
const char *hr__drive_stop_matched(const hr_drive *r);

/* ---- piece by piece (the other APIs) ---- */

typedef enum hr_drive_pull {
    HR_DRIVE_PIECE,     /* *text: content that became final; r->ev: calls it completed */
    HR_DRIVE_KEEPALIVE, /* keepalive was asked and nothing came for a while */
    HR_DRIVE_END,       /* the last piece (flushed); r->last.finish says why */
    HR_DRIVE_ABORTED,   /* client gone, server stopping, cancelled or failed: *err */
} hr_drive_pull;

/* The next piece; the text stays valid until the next call. */
hr_drive_pull hr__drive_pull(hr_drive *r, bool keepalive, const char **text, size_t *len,
                         hr_error *err);

/* Why it ended, in the terms the other APIs need. */
typedef enum hr_drive_outcome {
    HR_OUTCOME_EOS,         /* an end-of-sequence token (or a grammar completed) */
    HR_OUTCOME_LENGTH,      /* max_tokens or the context */
    HR_OUTCOME_STOP_STRING, /* hr__drive_stop_matched says which */
    HR_OUTCOME_TOOL_CALLS,  /* it stopped after one or more calls */
} hr_drive_outcome;

hr_drive_outcome hr__drive_outcome(const hr_drive *r);

/* ---- event streams ---- */

/* 0 or HR_ENOMEM; buf stays NUL-terminated. */
int hr__buf_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n);
/* Append "event: name\ndata: <json>\n\n" (name NULL: no event line);
 * steals o. 0 or HR_ENOMEM. */
int hr__sse_event(hr_drive *r, const char *name, json_t *o);
/* prefix + 24 random hex digits into buf (size n). */
void hr__make_id(char *buf, size_t n, const char *prefix);
/* JSON text as a string (steals o); NULL when out of memory. */
char *hr__dump(json_t *o);

#endif
