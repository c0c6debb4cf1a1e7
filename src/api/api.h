/* The public API's objects (include/hearth.h), shared with the layers above
 * (the server, the CLI) that read their fields. The API layer sits on the
 * engine: server, cli -> api -> engine -> model.
 *   hr_llm      llm.c      model + tokenizer + chat template + defaults
 *   hr_session  session.c  an engine over a model
 *   hr_gen      gen.c      one request: params -> engine -> text events */
#ifndef HR_API_API_H
#define HR_API_API_H

#include "hearth.h"
#include "api/embed_cfg.h"
#include "chat/chat.h"
#include "chat/toolcall.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define HR_LLM_MAX_STOP_IDS 16

/* Sampling defaults: generation_config.json (when it sets do_sample), else
 * mlx-lm's. Read once, at load. */
typedef struct hr_gen_defaults {
    double temp, top_p, min_p, rep;
    int top_k, max_tokens;
} hr_gen_defaults;

struct hr_llm {
    char *path;
    hr_model *model;
    hr_tokenizer *tok;               /* NULL: the model has none (token ids only) */
    char tok_err[512];               /* why tok is NULL */
    hr_chat_template *tmpl;          /* NULL: no template */
    char tmpl_err[512];              /* why tmpl is NULL: rendering fails with it */
    const hr_tool_format *tool_format; /* how the template's model writes calls; NULL */
    char *bos_token, *eos_token;     /* the template's bos_token / eos_token; NULL */
    int32_t stop_ids[HR_LLM_MAX_STOP_IDS]; /* end-of-sequence tokens */
    int n_stop_ids;
    hr_gen_defaults defaults;
    uint64_t tok_hash;               /* tokenizer.json's hash: part of SSD cache keys */
    int n_threads;                   /* hr_llm_opts.n_threads */
    pthread_mutex_t gvocab_mu;
    hr_grammar_vocab *gvocab;        /* for constrained decoding, built on first use */
    hr_embed_cfg emb;                /* how it embeds (embed_cfg.h) */
};

/* hr_llm_chat_render; images: the messages' image parts become the
 * template's {"type": "image"} (hr_chat_messages_normalize_images) */
int hr__llm_chat_render(const hr_llm *m, const char *messages_json, const char *tools_json,
                        const char *kwargs_json, int add_generation_prompt, bool images,
                        char **prompt, hr_error *err);

/* Render normalized messages (hr_chat_messages_normalize) with m's
 * template, or mlx-lm's plain format when it has none. tools and kwargs may
 * be NULL. *prompt: malloc'd. */
int hr__llm_render(const hr_llm *m, const json_t *msgs, const json_t *tools,
                   const json_t *kwargs, int add_generation_prompt, char **prompt,
                   hr_error *err);

/* The grammar that forces one call in m's tool-call format: to any of
 * tools (a JSON array of the request's tools) or, with only, to that
 * function. HR_EUNSUPPORTED: the template has no call format (or one whose
 * arguments are not JSON). */
int hr__llm_tool_grammar(const hr_llm *m, const json_t *tools, const char *only,
                         hr_grammar **g, hr_error *err);
/* The vocabulary index of constrained decoding, built on first use (any
 * thread). NULL with err filled on failure. */
const hr_grammar_vocab *hr__llm_gvocab(hr_llm *m, hr_error *err);
/* Bytes of m's grammar mask cache shared across requests (0 before any
 * constrained request). */
size_t hr__llm_mask_cache_bytes(hr_llm *m);
/* Make g ready for constrained decoding on m: *gv gets the vocabulary to
 * pair it with, and g's mask cache is filled (off the token loop). */
int hr__llm_grammar_ready(hr_llm *m, const hr_grammar *g, const hr_grammar_vocab **gv,
                          hr_error *err);

/* An embedding input's text as the model's ids: prompt + text, the
 * post-processor's special tokens, cut to max_seq_length as
 * sentence-transformers does (embed.c). prompt may be NULL. */
int hr__embed_ids(const hr_llm *m, const char *prompt, const char *text, size_t len,
                  hr_tokens *ids, hr_error *err);

/* s[*a, *b) without leading and trailing Python whitespace (str.strip()) */
void hr__py_strip(const char *s, size_t *a, size_t *b);

struct hr_session {
    hr_llm *llm;
    hr_engine *engine;
    int n_threads, max_batch;
    hr_model *draft;                 /* the draft model, or NULL */
    char *draft_path;                /* as given (requests' draft_model may name it) */
    int spec;                        /* requests' default hr_spec_mode */
    int num_draft;                   /* requests' default num_draft_tokens */
    /* LoRA adapters (adapters.c), under ad_mu */
    pthread_mutex_t ad_mu;
    bool ad_init;
    struct hr_adapter_slot *ads;
    int n_ads, cap_ads;
    int ad_default;                  /* the index of requests' default, or -1 */
};

/* The session's adapters from its options (--adapter-path, --adapters). */
int hr__session_adapters_init(hr_session *s, const hr_session_opts *o, hr_error *err);
void hr__session_adapters_free(hr_session *s);
/* A request's adapter by name (NULL: the session's default; "" or "base":
 * none), loaded on first use: *out gets a reference (NULL: the base
 * model) that the caller drops once the request holds its own. */
int hr__session_adapter_get(hr_session *s, const char *name, hr_adapter **out,
                            hr_error *err);

/* hr_gen for the server's routes, which validate in their APIs' own terms
 * and build the engine's parameters themselves: queue rp (its grammar must
 * outlive the hr_gen; hr_gen_free waits for the engine to let go of it),
 * with the text ended by stops and, when tools is not NULL (the request's
 * tools; the model has a call format), tool calls parsed out of it (the
 * text then keeps special tokens: markers may be). */
int hr__gen_start(hr_gen **out, hr_session *s, const hr_req_params *rp,
                  const char *const *stops, int n_stops, const json_t *tools, hr_error *err);
/* The internal tool events of the last event (CONTENT ones included) and the
 * calls so far. */
const hr_tool_events *hr__gen_tool_events(const hr_gen *g);
/* hr_gen_next waiting at most timeout_ms: 2 when nothing came by then. */
int hr__gen_next_timed(hr_gen *g, hr_gen_event *ev, int timeout_ms, hr_error *err);
hr_request *hr__gen_request(const hr_gen *g);
/* The stop string that ended the text, or NULL. */
const char *hr__gen_stop_matched(const hr_gen *g);
/* "off" (or "none"), "ngram" (or "prompt-lookup"), "draft" -> hr_spec_mode;
 * HR_EINVAL naming `what` (the flag or field) for another name. */
int hr__spec_mode_parse(const char *name, const char *what, int *mode, hr_error *err);
/* The draft model's tokenizer must be the model's: the same string for
 * every id and the same end-of-sequence token. HR_EINVAL naming the first
 * difference. */
int hr__spec_check_tokenizers(const hr_tokenizer *model, const hr_tokenizer *draft,
                              hr_error *err);
/* The request's speculation: its spec / num_draft_tokens / draft_model
 * (NULL, -1, NULL: the session's defaults) checked against the session;
 * errors name the field. */
int hr__session_spec(const hr_session *s, const char *spec, int num_draft,
                     const char *draft_model, hr_spec_mode *mode, int *k, hr_error *err);

/* The engine options a session's options make on model m (the server's
 * flags take this path too). */
int hr__session_engine_opts(const hr_llm *m, const hr_session_opts *o, hr_engine_opts *eo,
                            hr_error *err);
/* --kv-dtype's names (NULL, auto, f32, f16, bf16) -> HR_KV_*. */
int hr__kv_type_from_name(const char *name, int *kv, hr_error *err);
/* --kv-dtype (kvd), --cache-type-k (ctk) and --cache-type-v (ctv), each
 * NULL when not given, -> hr_session_opts' kv_dtype (*k) and kv_dtype_v
 * (*v). A cache type not given is --kv-dtype's, f16 (llama.cpp's default)
 * when that is auto and the other cache type is given. Errors name the
 * flag. */
int hr__kv_types_from_names(const char *kvd, const char *ctk, const char *ctv, int *k, int *v,
                            hr_error *err);

#endif
