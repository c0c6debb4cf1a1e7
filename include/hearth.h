/* hearth: a local LLM engine. Public embedding API (docs/api.md).
 *
 * Errors: every fallible call returns 0 or a negative HR_E* code and, when
 * err is not NULL, fills it with a one-line message. Nothing here exits or
 * aborts on bad input.
 *
 * Handles are opaque; every _free accepts NULL. Memory the API returns
 * (token arrays, text) is released with hr_free.
 *
 * Threads: an hr_llm is immutable after hr_llm_load; any number of threads
 * may tokenize, render and open sessions on it at once. An hr_session runs
 * one engine thread that batches every request submitted to it; submit,
 * cancel and stats may be called from any thread. One hr_gen (a request) is
 * read by one thread at a time (hr_gen_next / hr_gen_run); hr_gen_cancel may
 * come from any thread. Free in reverse order of creation: gens, then the
 * session, then the model. */
#ifndef HEARTH_H
#define HEARTH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HEARTH_VERSION_MAJOR 0
#define HEARTH_VERSION_MINOR 1
#define HEARTH_VERSION_PATCH 0

/* ---- errors ------------------------------------------------------------ */

#define HR_ERRNO_MAP(X)                                  \
    X(OK, 0, "success")                                  \
    X(INVAL, -1, "invalid argument")                     \
    X(NOMEM, -2, "out of memory")                        \
    X(IO, -3, "i/o error")                               \
    X(FORMAT, -4, "bad file format")                     \
    X(UNSUPPORTED, -5, "not supported yet")              \
    X(NOTFOUND, -6, "not found")                         \
    X(RANGE, -7, "out of range")                         \
    X(FULL, -8, "capacity exhausted")                    \
    X(CANCELLED, -9, "cancelled")                        \
    X(BUSY, -10, "in use")

enum {
#define HR_X(name, val, text) HR_E##name = val,
    HR_ERRNO_MAP(HR_X)
#undef HR_X
};

typedef struct hr_error {
    int code;      /* HR_E* */
    long pos;      /* byte position for parsers, -1 when not applicable */
    char msg[512]; /* one line, no trailing newline */
} hr_error;

/* A static string for an HR_E* code (any thread). */
const char *hr_strerror(int code);
/* "0.1.0" (any thread). */
const char *hr_version(void);
/* Release memory the API returned (token arrays, text). NULL is fine. */
void hr_free(void *p);

/* ---- models ------------------------------------------------------------ */

/* A loaded model: weights (mmapped read-only), tokenizer, chat template,
 * end-of-sequence tokens and generation defaults (generation_config.json,
 * read here, once). */
typedef struct hr_llm hr_llm;

typedef struct hr_llm_opts {
    int n_threads;             /* compute threads of sessions opened on this
                                * model that leave theirs at 0; 0 = all cores */
    const char *chat_template; /* template text replacing the model's; NULL */
    const char *device;        /* where the weights and the KV cache live:
                                * "auto" (also NULL: the first NVIDIA GPU when
                                * there is one, else the CPU), "cpu", "cuda",
                                * "cuda:N" (docs/gpu.md) */
    const char *quant_act;     /* CPU: how quantized weights meet the
                                * activations: "default", "int8", "rows",
                                * "f32" (docs/quantization.md); NULL: the
                                * environment's HEARTH_QUANT_ACT, else default */
    const char *isa;           /* CPU kernels: the best this CPU runs up to
                                * "scalar", "avx2" or "avx512"; NULL: the
                                * environment's HEARTH_ISA, else the best.
                                * Process-wide: the first model loaded fixes
                                * it, and a later load asking another fails */
} hr_llm_opts;

/* Load a Hugging Face-style model directory (config.json, *.safetensors,
 * tokenizer.json) or a GGUF file. opts may be NULL. The path is copied. */
int hr_llm_load(hr_llm **out, const char *path, const hr_llm_opts *opts, hr_error *err);
void hr_llm_free(hr_llm *m);
int hr_llm_n_vocab(const hr_llm *m);   /* rows of the logits */
int hr_llm_n_ctx_max(const hr_llm *m); /* max_position_embeddings */

/* ---- text ---------------------------------------------------------------- */

enum {
    HR_TOKENIZE_ADD_SPECIAL = 1,   /* add BOS etc. as the model's post-processor does */
    HR_DETOKENIZE_SKIP_SPECIAL = 1 /* drop special tokens from the text */
};

/* text[0..len) -> *ids[0..*n) (hr_free it). Thread-safe. */
int hr_llm_tokenize(const hr_llm *m, const char *text, size_t len, unsigned flags,
                    int32_t **ids, size_t *n, hr_error *err);
/* ids -> *text, NUL-terminated (hr_free it); *len may be NULL. Thread-safe. */
int hr_llm_detokenize(const hr_llm *m, const int32_t *ids, size_t n, unsigned flags,
                      char **text, size_t *len, hr_error *err);
/* Render the chat template over messages_json (a JSON array of {"role",
 * "content"} objects, as the OpenAI API takes them; content may be a list
 * of text parts). tools_json (JSON array) and kwargs_json (JSON object of
 * template variables) may be NULL. add_generation_prompt: end with the
 * assistant's turn opened. A model without a template gets mlx-lm's plain
 * "USER: ..." format. *prompt: hr_free it. Thread-safe. */
int hr_llm_chat_render(const hr_llm *m, const char *messages_json, const char *tools_json,
                       const char *kwargs_json, int add_generation_prompt, char **prompt,
                       hr_error *err);

/* ---- sessions: an engine over a model ---------------------------------- */

typedef struct hr_session hr_session;

/* AUTO: f16 for GGUF, else f32; Q8_0, Q4_0: llama.cpp's cache types (rows
 * of ggml blocks; docs/kv-quant.md) */
enum { HR_KV_AUTO, HR_KV_F32, HR_KV_F16, HR_KV_BF16, HR_KV_Q8_0, HR_KV_Q4_0 };

typedef struct hr_session_opts {
    int n_threads;            /* 0 = the model's hr_llm_opts.n_threads */
    int max_batch;            /* concurrent requests; 0 = 8 */
    int n_ctx;                /* longest sequence; 0 = the model's, capped at 8192 */
    size_t kv_bytes;          /* KV pool budget; 0 = max_batch full contexts, at most 4 GiB */
    int kv_dtype;             /* HR_KV_*: K's, and V's unless kv_dtype_v */
    int prefill_chunk;        /* prompt tokens per step; 0 = 512 (a GPU: 2048) */
    int prompt_cache;         /* 0 = on (the default), -1 = off */
    int prompt_cache_size;    /* bound: this many full contexts; 0 = the pool's free space */
    size_t prompt_cache_bytes; /* bound in bytes (the tighter bound wins); 0 = none */
    const char *ssd_dir;      /* SSD tier of the prompt cache (survives restarts); NULL */
    size_t ssd_max_bytes;     /* 0 = 32 GB */
    double ssd_demote_idle;   /* seconds before an idle prefix leaves RAM; 0 = never */
    int kv_bits;              /* 0 = the kv_dtype above; 2, 3, 4, 6, 8: every K/V row
                               * stored in mlx-lm's affine format (docs/kv-quant.md) */
    int kv_group;             /* its group size; 0 = 64 */
    /* speculative decoding (docs/speculative.md) */
    const char *draft_model;  /* a draft model directory (its tokenizer must be the
                               * model's); NULL = none */
    const char *spec;         /* requests' default drafting: "off", "ngram" (prompt
                               * lookup) or "draft"; NULL = "draft" with a draft
                               * model, else "off" */
    int num_draft_tokens;     /* requests' default tokens drafted per step; 0 = 3 */
    /* LoRA adapters (docs/adapters.md) */
    const char *adapter_path; /* the adapter of requests that name none (mlx_lm.server's
                               * --adapter-path), loaded now; NULL = the base model */
    const char *adapters;     /* "name=DIR,name=DIR": adapters requests may name, each
                               * loaded on first use; NULL */
    int kv_dtype_v;           /* V's HR_KV_* when it differs from K's (llama.cpp's
                               * --cache-type-v); 0 = kv_dtype's */
    const char *kv_quant;     /* "turbo", "turbo:B" or "turbo:K_BITS,V_BITS" (B: 2, 2.5,
                               * 3, 3.5, 4): TurboQuant KV (docs/kv-quant.md); NULL = off */
    int quantized_kv_start;   /* with kv_bits: mlx-lm's --quantized-kv-start, the tokens a
                               * sequence holds (kv_dtype) before its KV converts to
                               * kv_bits; 0 = quantized from the first token */
    int kv_residual;          /* with a quantized KV cache (kv_quant, kv_bits from the
                               * first token, Q8_0/Q4_0): a token reads the keys of its
                               * window of this many positions (a multiple of 32) at full
                               * precision (docs/kv-quant.md); 0 = off */
    int warmup;               /* nonzero: one token through the model before
                               * hr_session_new returns (llama-server's warm-up), so
                               * the first request does not map the weights' pages
                               * or touch the buffers; nothing reaches the prompt
                               * cache or the stats. 0 = none */
} hr_session_opts;

/* Start the engine thread over m (which must outlive the session). opts may
 * be NULL. */
int hr_session_new(hr_session **out, hr_llm *m, const hr_session_opts *opts, hr_error *err);
/* Stops the engine; unfinished requests end with HR_GEN_CANCELLED. */
void hr_session_free(hr_session *s);

typedef struct hr_session_stats {
    long requests_total, requests_running, requests_queued;
    long prompt_tokens, generated_tokens, cached_tokens;
    double prefill_tokens_per_s, decode_tokens_per_s;
    int kv_blocks_total, kv_blocks_free, kv_blocks_cached;
    size_t kv_bytes;
    int n_threads, max_batch, n_ctx;
    long spec_drafted, spec_accepted; /* speculative decoding: tokens drafted, accepted */
} hr_session_stats;

/* A lock-free snapshot of the counters (any thread). */
void hr_session_stats_get(const hr_session *s, hr_session_stats *st);

/* LoRA adapters of the session's model (docs/adapters.md), any thread.
 * Add: register the peft or mlx-lm adapter directory `path` as `name`
 * (letters, digits, "._-", at most 64), loaded at once when load_now,
 * else on the first request that names it. Remove: unregister it;
 * HR_EBUSY while a request uses it. List: a JSON array of {"id", "path",
 * "loaded", "default"} and, once loaded, "format", "rank", "dora" (hr_free
 * it; NULL when out of memory). */
int hr_session_adapter_add(hr_session *s, const char *name, const char *path, int load_now,
                           hr_error *err);
int hr_session_adapter_remove(hr_session *s, const char *name, hr_error *err);
char *hr_session_adapters_json(hr_session *s);

/* ---- requests -------------------------------------------------------------- */

typedef struct hr_gen hr_gen;

/* An image for a request's messages: an encoded file (JPEG, PNG or WebP)
 * in memory, read during hr_gen_submit only. */
typedef struct hr_gen_image {
    const void *data;
    size_t size;
} hr_gen_image;

/* A request: the prompt (exactly one of prompt_tokens, prompt_text,
 * messages_json) and every sampling and output field of the server's
 * /v1/completions and /v1/chat/completions (docs/server-api.md). Start from
 * hr_gen_params_default. Pointers are read during hr_gen_submit only. */
typedef struct hr_gen_params {
    const int32_t *prompt_tokens; /* token ids, used as they are */
    int n_prompt_tokens;
    const char *prompt_text;      /* text, tokenized with special tokens added */
    const char *messages_json;    /* chat messages, rendered by the chat template */
    const char *tools_json;       /* with messages: the template's tools; NULL */
    const char *template_kwargs_json; /* with messages: template variables; NULL */
    /* sampling; a negative value means the model's default
     * (generation_config.json when it sets do_sample, else mlx-lm's) */
    int max_tokens;               /* -1 = 512 */
    float temperature, top_p, min_p;
    int top_k;
    float repetition_penalty;
    int repetition_context_size;  /* 20 */
    float presence_penalty;       /* 0: off */
    int presence_context_size;    /* 20 */
    float frequency_penalty;      /* 0: off */
    int frequency_context_size;   /* 20 */
    float xtc_probability;        /* 0: off */
    float xtc_threshold;          /* 0.1 */
    const int32_t *logit_bias_ids;
    const float *logit_bias_values;
    int n_logit_bias;
    int has_seed;                 /* 0: a seed from the clock */
    uint64_t seed;
    int ignore_eos;               /* do not stop at end-of-sequence tokens */
    /* output */
    const char *const *stop;      /* stop strings (at most 16): the text ends before one */
    int n_stop;
    int top_logprobs;             /* 0..20 best tokens per step in each event */
    /* structured output, at most one: the text is a valid prefix at every
     * step and generation ends when it is complete */
    const char *json_schema;      /* JSON Schema (JSON text) */
    int json_object;              /* any JSON object */
    const char *regex;
    const char *grammar;          /* GBNF */
    const char *const *choices;   /* one of these strings */
    int n_choices;
    /* prompt scoring (perplexity, teacher forcing): 0 = off; i >= 1: the
     * log-probability of every prompt token from index i on, given the
     * tokens before it, for hr_gen_prompt_logprobs. Those positions are
     * computed, never taken from the prompt cache. With max_tokens 0 the
     * request only scores, and the prompt may fill the whole context. */
    int score_from;
    /* tool calls (with messages_json and tools_json, on a model whose chat
     * template has a tool-call format): NULL or "auto": the calls are
     * parsed out of the output (events carry them apart from the text);
     * "none": the output stays text; "required": a call is forced (by a
     * grammar over the template's call format); else the name of the one
     * function whose call is forced */
    const char *tool_choice;
    /* speculative decoding (docs/speculative.md); output is the same with
     * or without it */
    const char *spec;             /* "off", "ngram", "draft"; NULL: the session's */
    int num_draft_tokens;         /* 0..16; -1: the session's */
    /* LoRA adapter: a name registered on the session; NULL: the session's
     * default (hr_session_opts.adapter_path, else the base model); "" or
     * "base": the base model */
    const char *adapter;
    /* images (docs/images.md), with messages_json on a model that takes
     * them: one for each image part of the messages ({"type": "image"}, or
     * an image_url part whose url is not read), in order; at most 8 */
    const hr_gen_image *images;
    int n_images;
    /* audio (docs/audio.md), with messages_json on a model that takes it:
     * one WAV file (hr_gen_image's data and size) for each input_audio part
     * of the messages (whose data is not read), in order; at most 8 */
    const hr_gen_image *audio;
    int n_audio;
} hr_gen_params;

void hr_gen_params_default(hr_gen_params *p);

/* Validate, build the prompt, compile any grammar and queue the request on
 * the session (any thread). Errors (a bad field, a prompt that does not fit
 * the context or the KV pool) name the problem and queue nothing. */
int hr_gen_submit(hr_gen **out, hr_session *s, const hr_gen_params *p, hr_error *err);

enum {
    HR_GEN_RUNNING,   /* more events follow */
    HR_GEN_STOP,      /* end of sequence, a stop string, or a complete structured text */
    HR_GEN_LENGTH,    /* max_tokens or the context limit */
    HR_GEN_CANCELLED, /* hr_gen_cancel, or the session stopped */
    HR_GEN_ERROR,
};

/* A piece of a tool call, parsed out of the output. */
enum { HR_TOOL_CALL_START = 1, HR_TOOL_CALL_ARGS, HR_TOOL_CALL_END };
typedef struct hr_gen_tool_event {
    int kind;               /* HR_TOOL_CALL_* */
    int index;              /* the call's number in this output, from 0 */
    const char *id, *name;  /* START: "call_" + 24 alphanumerics, the function */
    const char *args;       /* ARGS: the next piece of the arguments' JSON */
    size_t args_len;
} hr_gen_tool_event;

/* One step of output. Pointers stay valid until the next hr_gen_next (or
 * the callback's return). */
typedef struct hr_gen_event {
    const char *text;       /* new final text (UTF-8, stop strings held back) */
    size_t text_len;
    int32_t token;          /* the sampled token; -1 on the last event */
    float logprob;          /* its log-probability after the logits processors */
    int n_top;              /* top_logprobs of the step, best first */
    const int32_t *top_ids;
    const float *top_logprobs;
    int finish;             /* HR_GEN_RUNNING, or on the last event why it ended */
    /* usage, on the last event */
    int prompt_tokens, completion_tokens, cached_tokens;
    /* tool calls (when parsed): the pieces this event completed, in order;
     * text is then the content outside the calls. finish is HR_GEN_STOP
     * after calls too (n_tool_calls says there were some) */
    int n_tool_events;
    const hr_gen_tool_event *tool_events;
    int n_tool_calls;             /* calls so far */
    int drafted_tokens, accepted_tokens; /* speculative decoding */
} hr_gen_event;

/* The pull iterator: block until the next event. Returns 1 with *ev
 * filled, 0 after the last event was returned, or a negative code (the
 * request failed: HR_GEN_ERROR's message in err). */
int hr_gen_next(hr_gen *g, hr_gen_event *ev, hr_error *err);

/* The callback form: calls cb for every event on this thread until the
 * last one; cb returning non-zero cancels the request. Returns 0, or the
 * error of hr_gen_next. */
typedef int (*hr_gen_cb)(const hr_gen_event *ev, void *user);
int hr_gen_run(hr_gen *g, hr_gen_cb cb, void *user, hr_error *err);

/* Ask the engine to stop the request at its next step (any thread); the
 * reader then gets a last event with HR_GEN_CANCELLED. */
void hr_gen_cancel(hr_gen *g);
/* With score_from: the prompt's log-probabilities, [*n = prompt tokens],
 * NaN before score_from; complete once hr_gen_next returned its first
 * event (the prompt is computed before any token). Valid until hr_gen_free.
 * NULL without score_from. */
const float *hr_gen_prompt_logprobs(const hr_gen *g, int *n);
/* The prompt as tokens (valid until hr_gen_free). */
const int32_t *hr_gen_prompt(const hr_gen *g, int *n);
/* Cancels the request if it is still running and frees it. */
void hr_gen_free(hr_gen *g);

/* ---- embeddings ------------------------------------------------------------ */

/* One input: text (the model's prompt prepended, special tokens added,
 * truncated to its max_seq_length as sentence-transformers does) or token
 * ids (used as they are: no prompt, no special tokens, no truncation). */
typedef struct hr_embed_input {
    const char *text;          /* UTF-8; NULL: tokens */
    size_t text_len;
    const int32_t *tokens;
    int n_tokens;
} hr_embed_input;

typedef struct hr_embed_opts {
    const char *prompt_name;   /* a name of the model's sentence-transformers
                                * "prompts"; NULL: its default_prompt_name
                                * (none when it has none); "": no prompt */
    const char *prompt;        /* the prompt text itself (wins over
                                * prompt_name); NULL */
    int dimensions;            /* 0: hr_llm_embed_dim; 1..that: the first
                                * `dimensions` values, re-normalised to unit
                                * length (Matryoshka) */
} hr_embed_opts;

/* The length of m's embeddings (its hidden size); 0 when m cannot embed. */
int hr_llm_embed_dim(const hr_llm *m);
/* Embed n inputs through s's engine (they run batched, with each other and
 * any other requests): pooled as the model's sentence-transformers config
 * says (docs/server-api.md#embeddings), into out [n][dimensions]. *n_tokens
 * (may be NULL): the tokens computed. o may be NULL. Thread-safe. */
int hr_embed(hr_session *s, const hr_embed_input *in, int n, const hr_embed_opts *o,
             float *out, long *n_tokens, hr_error *err);

/* ---- internal ------------------------------------------------------------ */
#ifdef HEARTH_INTERNAL
/* The weights alone (src/model/model.h); the library's own layers use
 * them. Not exported from libhearth.so: embedders use hr_llm. */
typedef struct hr_model hr_model;
void hr_model_free(hr_model *m);
#endif

#ifdef __cplusplus
}
#endif

#endif
