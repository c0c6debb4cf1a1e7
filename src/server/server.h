/* hearth's OpenAI-compatible HTTP server, a drop-in for mlx_lm.server:
 * same endpoints, request fields and flags (docs/server-api.md). HTTP
 * threads (libmicrohttpd, one per connection) parse, validate, render the
 * chat template and tokenize; the engine thread batches and generates;
 * each connection thread detokenizes and streams its own request. */
#ifndef HR_SERVER_SERVER_H
#define HR_SERVER_SERVER_H

#include "hearth.h"

#include <stddef.h>

typedef struct hr_server hr_server;

typedef struct hr_server_opts {
    const char *model;        /* model directory */
    const char *host;         /* default 127.0.0.1 */
    int port;                 /* default 8080; 0 = any free port */
    /* sampling defaults; a negative value (or NULL) means "not given":
     * generation_config.json, then mlx-lm's defaults apply */
    double temp, top_p, min_p;
    int top_k, max_tokens;
    const char *chat_template;      /* template text overriding the model's */
    const char *chat_template_args; /* JSON object of template kwargs */
    const char *allowed_origins;    /* CORS; default "*" */
    size_t max_body;                /* bytes; default 16 MiB */
    int prefill_step;               /* tokens per prefill step; 0 = 512 */
    int batch;                      /* concurrent sequences; 0 = 8 */
    size_t kv_bytes;                /* 0 = automatic */
    const char *kv_dtype;           /* --kv-dtype: auto (NULL), f32, f16, bf16 */
    int kv_bits, kv_group;          /* --kv-bits (0: off), --kv-group-size */
    const char *device;             /* --device: auto (NULL), cpu, cuda, cuda:N */
    int n_threads;                  /* 0 = all cores */
    int n_ctx;                      /* 0 = the model's, capped at 8192 */
    int cache_blocks;               /* prompt cache bound in KV blocks; 0 = the
                                     * pool's free space; -1 = off */
    int cache_size;                 /* mlx's --prompt-cache-size: N full contexts; 0 = unset */
    size_t cache_bytes;             /* --prompt-cache-bytes; 0 = unset */
    const char *ssd_cache;          /* --ssd-cache DIR; NULL = no SSD tier */
    size_t ssd_cache_max;           /* bytes; 0 = 32 GB */
    double ssd_demote_idle;         /* seconds; default 300 */
    int no_ui;                      /* 1: no web chat UI at "/" (a 404 there) */
    const char *draft_model;        /* --draft-model; NULL = none */
    const char *spec;               /* --spec: off, ngram, draft; NULL = draft with a
                                     * draft model, else off */
    int num_draft_tokens;           /* --num-draft-tokens; 0 = 3 */
    const char *adapter_path;       /* --adapter-path: requests' default LoRA adapter */
    const char *adapters;           /* --adapters name=DIR,...: loaded on first use */
} hr_server_opts;

/* Load the model, tokenizer and chat template, start the engine. */
int hr_server_new(hr_server **out, const hr_server_opts *o, hr_error *err);
/* Listen. The bound port is returned by hr_server_port. */
int hr_server_start(hr_server *s, hr_error *err);
int hr_server_port(const hr_server *s);
/* Stop accepting, cancel what is in flight, wait for the connections. */
void hr_server_stop(hr_server *s);
void hr_server_free(hr_server *s);

/* NULL while the server can serve; else why it cannot (the engine's device
 * is lost): /health answers 503 with it and `hearth serve` exits 1. */
const char *hr_server_dead(hr_server *s);

#endif
