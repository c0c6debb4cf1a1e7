/* hearth's OpenAI-compatible HTTP server, a drop-in for mlx_lm.server:
 * same endpoints, request fields and flags (docs/server-api.md). A few
 * HTTP threads (libmicrohttpd, epoll) read requests and answer the quick
 * routes; each generation's worker parses, validates, renders the chat
 * template, tokenizes, then detokenizes and streams its own request while
 * the engine thread batches and generates (docs/operations.md). */
#ifndef HR_SERVER_SERVER_H
#define HR_SERVER_SERVER_H

#include "hearth.h"
#include "media/fetch.h"

#include <stdbool.h>
#include <stddef.h>

typedef struct hr_server hr_server;

typedef struct hr_server_opts {
    const char *model;        /* model directory (one model) */
    /* a pool instead (server/pool.h): models (paths; model_specs: the names
     * they were given by, may be NULL), or every model in model_dir; loaded
     * on first use, evicted LRU above pool_bytes (0: no bound) */
    const char *const *models, *const *model_specs;
    int n_models;
    const char *model_dir;
    const char *const *served_names; /* --served-model-name (pool.h says how) */
    int n_served_names;
    size_t pool_bytes;
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
    const char *cache_type_k;       /* --cache-type-k / -v (llama.cpp's): f32, f16, */
    const char *cache_type_v;       /* bf16, q8_0, q4_0; NULL: --kv-dtype's */
    int kv_bits, kv_group;          /* --kv-bits (0: off), --kv-group-size */
    int kv_start;                   /* --quantized-kv-start (with kv_bits) */
    const char *kv_quant;           /* --kv-quant turbo[:K,V]; NULL: off */
    int kv_residual;                /* --kv-residual (docs/kv-quant.md); 0: off */
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
    int no_warmup;                  /* 1: no warm-up token when a model loads */
    const char *draft_model;        /* --draft-model; NULL = none */
    const char *spec;               /* --spec: off, ngram, draft; NULL = draft with a
                                     * draft model, else off */
    int num_draft_tokens;           /* --num-draft-tokens; 0 = 3 */
    /* limits (docs/operations.md); 0 = the default */
    int max_connections;            /* open connections; default 4096 */
    double timeout;                 /* s for a whole request to arrive, and idle
                                     * keep-alive; default 30 */
    int max_requests;               /* generations running + queued; beyond: 429 */
    double request_timeout;         /* s a generation may run; 0 = none; <0 = 600 */
    double drain_timeout;           /* s hr_server_drain waits; 0 = forever; <0 = 30 */
    const char *admin_token;        /* Bearer token of the admin routes; NULL = none */
    int admin_remote;               /* 1: admin routes answer off loopback too */
    /* --isolate: the engine runs in a child process started with
     * child_argv (the CLI's own argv; "--engine-fd N" is appended). In
     * the child, engine_fd is its end of the socket pair; else -1. */
    int isolate;
    double engine_timeout;          /* s without a frame from the child: killed; 0 = 10 */
    char *const *child_argv;
    int engine_fd;
    const char *adapter_path;       /* --adapter-path: requests' default LoRA adapter */
    const char *adapters;           /* --adapters name=DIR,...: loaded on first use */
    hr_media_opts media;            /* image_url fetches: --allow-private-media,
                                     * --media-allow-host, --media-max-mb, --media-timeout */
    /* A front without models (server/front.h; `hearth route`): no model is
     * loaded, every request but OPTIONS and the admin routes goes to front->handle.
     * NULL: a server of its own models. */
    const struct hr_front *front;
} hr_server_opts;

/* Load the model, tokenizer and chat template, start the engine. */
int hr_server_new(hr_server **out, const hr_server_opts *o, hr_error *err);
/* Listen. The bound port is returned by hr_server_port. */
int hr_server_start(hr_server *s, hr_error *err);
int hr_server_port(const hr_server *s);
/* Stop accepting, cancel what is in flight, wait for the connections. */
void hr_server_stop(hr_server *s);
/* Draining (POST /admin/drain, SIGTERM): new generation requests get 503
 * and /health says "draining". hr_server_drain begins it and waits for the
 * running requests, at most drain_timeout; returns how many are left. */
void hr_server_drain_begin(hr_server *s);
bool hr_server_draining(hr_server *s);
int hr_server_drain(hr_server *s);
/* --isolate's child: serve the parent on s->o.engine_fd until it closes;
 * the process' exit status. */
int hr_server_serve_parent(hr_server *s);
/* --isolate's child could not load: tell the parent why (on fd) before
 * exiting. */
void hr_server_child_fail(int fd, const char *why);
void hr_server_free(hr_server *s);

/* NULL while the server can serve; else why it cannot (the engine's device
 * is lost): /health answers 503 with it and `hearth serve` exits 1. */
const char *hr_server_dead(hr_server *s);

#endif
