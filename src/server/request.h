/* Parsing and validating an OpenAI / mlx_lm.server generation request into
 * a job: the prompt tokens, the sampler parameters, stop strings and output
 * options. Every problem is an OpenAI-shaped 400 naming the field. */
#ifndef HR_SERVER_REQUEST_H
#define HR_SERVER_REQUEST_H

#include "server/internal.h"
#include "server/media.h"

#define HR_MAX_STOPS 16
#define HR_API_MAX_TOP_LOGPROBS 11 /* mlx_lm.server's bound */
#define HR_API_MAX_N 16            /* choices a request may ask for (n) */

typedef struct hr_job {
    bool chat, stream, include_usage, logprobs;
    int n;                          /* choices: 1..HR_API_MAX_N */
    int top_logprobs;               /* 0: none */
    char *model;                    /* echoed: the request's "model" or "default_model" */
    hr_served *m;                   /* the model it runs on, held (hr__job_free lets go) */
    hr_pool *pool;                  /* m's */
    const char *adapter_name;       /* the model field's "base:adapter" suffix (in model) or NULL */
    hr_tokens prompt;
    hr_req_params rp;               /* rp.prompt points into prompt */
    int32_t *bias_ids;
    float *bias_vals;
    char *stops[HR_MAX_STOPS];
    int n_stops;
    json_t *tools;                  /* the request's tools when calls are parsed, else NULL */
    hr_grammar *grammar;            /* constrained decoding (owned), or NULL */
    bool forced_tool;               /* tool_choice required / named: grammar forces a call */
    hr_job_media media;             /* the messages' images (server/media.h) */
} hr_job;

/* Fill j from a request body; on failure return false with *err set to the
 * error reply. */
bool hr__job_parse(hr_server *s, bool chat, const char *body, size_t len, hr_job *j,
                   hr_reply *err);
/* The same from a parsed body (a JSON object, not kept): the other APIs
 * (anthropic.c, responses.c) translate theirs into a chat request. */
bool hr__job_from_json(hr_server *s, bool chat, const json_t *root, hr_job *j,
                       hr_reply *err);
/* A request body as a JSON object (caller decrefs); NULL with *err set (400:
 * not JSON, not an object). */
json_t *hr__body_parse(const char *body, size_t len, hr_reply *err);
void hr__job_free(hr_job *j);
/* The request's "model" names the served one (its id, path, or an
 * ORG/NAME that resolves to it; "default_model"). */
/* The model a request's "model" names, loaded and held in *out (let go
 * with hr__pool_release); else false with *err (404 listing the models, or
 * 500 when it cannot be loaded). */
bool hr__model_hold(hr_server *s, const char *name, hr_served **out, hr_reply *err);

#endif
