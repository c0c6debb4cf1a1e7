/* hr_engine: the engine thread. Requests go in from any thread; each step
 * the scheduler builds one ragged batch from the decode rows of all running
 * sequences plus prefill chunks of waiting ones (continuous batching), runs
 * one forward pass, samples every row with its own sampler and appends the
 * result to that request's log, which its consumer reads.
 *
 * A request's KV blocks are reserved when it is admitted (prompt +
 * max_tokens, capped at the context), so a running request never runs out
 * of cache; requests beyond --batch or the KV budget wait in FIFO order, and
 * one that could never fit is refused by hr_engine_submit. */
#ifndef HR_ENGINE_ENGINE_H
#define HR_ENGINE_ENGINE_H

#include "hearth.h"
#include "core/pool.h"
#include "grammar/grammar.h"
#include "model/adapter.h"
#include "model/kv.h"
#include "model/model.h"
#include "sample/sampler.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HR_MAX_TOP_LOGPROBS 20
#define HR_SPEC_MAX_K 16   /* most drafted tokens per row and step */

/* How a request drafts tokens for speculative decoding. */
typedef enum hr_spec_mode {
    HR_SPEC_OFF,
    HR_SPEC_NGRAM, /* prompt lookup: the continuation of the longest recent
                    * n-gram match in the prompt and output */
    HR_SPEC_DRAFT, /* the engine's draft model (hr_engine_opts.draft) */
} hr_spec_mode;

typedef struct hr_engine hr_engine;
typedef struct hr_request hr_request;

typedef struct hr_engine_opts {
    int n_threads;      /* compute threads; 0 = all cores */
    int max_batch;      /* concurrent sequences; 0 = 8 */
    int n_ctx;          /* longest sequence; 0 = the model's, capped at 8192 */
    size_t kv_bytes;    /* KV pool budget; 0 = max_batch full contexts, at most 4 GiB */
    hr_dtype kv_dtype;  /* KV cache: F32 (0: exact), F16, BF16, Q8_0, Q4_0 (llama.cpp's
                         * cache types); hr_kv_dtype_pick gives the model's default */
    bool kv_vown;       /* V is kv_dtype_v (--cache-type-v), else kv_dtype */
    hr_dtype kv_dtype_v;
    int kv_bits;        /* > 0: mlx-lm's affine KV (--kv-bits; docs/kv-quant.md) */
    int kv_group;       /* with kv_bits: the group size (32, 64, 128) */
    int kv_start;       /* with kv_bits: mlx-lm's --quantized-kv-start. 0: the pool is
                         * quantized from the first token; > 0: a sequence starts in
                         * kv_dtype's pool and, after the step that takes it to kv_start
                         * tokens or more, its whole KV converts into a second, quantized
                         * pool (the budget split between the two: docs/kv-quant.md) */
    int kv_turbo_k, kv_turbo_v; /* > 0: TurboQuant KV (--kv-quant turbo), K's and V's
                                 * rates r2 (bits x 2: kernels/cpu/turbo.h) */
    int kv_residual;    /* > 0: --kv-residual, a multiple of 32: a token reads the keys
                         * of its window of this many positions at full precision
                         * (the model's unquantized KV dtype), the others from the
                         * quantized pool */
    int prefill_chunk;  /* tokens per step across prefills; 0 = 512 (a GPU: 2048) */
    int cache_blocks;   /* prompt cache bound in KV blocks; 0 = the pool's
                         * free space; -1 = no prompt cache */
    const char *ssd_dir;      /* SSD tier of the prompt cache; NULL = none */
    size_t ssd_max_bytes;     /* 0 = 32 GB */
    double ssd_demote_idle;   /* seconds; 0 = never demote */
    uint64_t cache_salt;      /* e.g. the tokenizer's hash: part of SSD keys */
    /* speculative decoding (docs/speculative.md): a draft model that shares
     * the target's vocabulary (NULL: none; it must outlive the engine; the
     * caller checks the tokenizers: the API layer does), and the most
     * tokens a request may draft per step (0: HR_SPEC_MAX_K) */
    const hr_model *draft;
    int max_draft;
    /* one token through the model before hr_engine_new returns, as
     * llama-server's warm-up: the weights' pages mapped, the forward's
     * buffers and the compute threads touched, so the first request does
     * not pay for them. Nothing reaches the prompt cache or the stats. */
    bool warmup;
} hr_engine_opts;

/* Starts the engine thread. */
int hr_engine_new(hr_engine **out, const hr_model *m, const hr_engine_opts *o,
                  hr_error *err);
/* Stops the thread; every unfinished request ends with HR_FINISH_CANCELLED. */
void hr_engine_free(hr_engine *e);
int hr_engine_ctx(const hr_engine *e);
int hr_engine_threads(const hr_engine *e);   /* compute threads */
int hr_engine_max_batch(const hr_engine *e);
/* The compute threads, for other work while no request runs (bench's
 * bandwidth reads: no second set of threads spinning beside these). */
hr_pool *hr_engine_pool(hr_engine *e);
/* The engine's KV pool (its format: hr_kv's fields; read only) */
const hr_kv *hr_engine_kv(const hr_engine *e);
/* The quantized pool sequences convert into (hr_engine_opts.kv_start), or
 * NULL: none */
const hr_kv *hr_engine_kvq(const hr_engine *e);
/* The residual window's pool and its length in tokens (*resid), or NULL:
 * none (hr_engine_opts.kv_residual) */
const hr_kv *hr_engine_kvr(const hr_engine *e, int *resid);

typedef enum hr_finish {
    HR_FINISH_NONE,      /* still running */
    HR_FINISH_STOP,      /* a stop token (end of sequence) */
    HR_FINISH_LENGTH,    /* max_tokens or the context limit */
    HR_FINISH_CANCELLED, /* hr_request_cancel, or the engine stopped */
    HR_FINISH_ERROR,
} hr_finish;

/* An image of a request (a model with an image side: model.h's mm or
 * mm_qwen): its pixels as the model's image processor gives them (copied
 * by hr_request_new), its identity (hr_image.hash) and where its image
 * tokens start in the prompt. Gemma-3: 3 x S x S floats (media/imgproc.h),
 * mm_tokens tokens. Qwen2.5-VL: the patch rows of a gh x gw patch grid
 * (model/vision_qwen.h hr_vision_qwen_patchify), (gh / merge) * (gw /
 * merge) tokens. A Qwen2-Audio model (model.h's mm_audio) takes its
 * audio clips here too: pixels the clip's mel features (n_mels x the
 * window's frames, media/mel.h), gh its valid frames, its audio tokens
 * hr_audio_enc_tokens(gh), causal like Qwen2.5-VL's. */
#define HR_REQ_IMAGES_MAX 64 /* images a request may hold */

typedef struct hr_req_image {
    const float *pixels;
    uint8_t hash[16];
    int start;
    int gh, gw; /* Qwen2.5-VL's grid, in patches; unused for Gemma-3; gh: an audio clip's frames */
} hr_req_image;

typedef struct hr_req_params {
    const int32_t *prompt;
    int n_prompt;
    hr_sampler_params sampler; /* validated by hr_request_new */
    int max_tokens;
    int top_logprobs;          /* 0..HR_MAX_TOP_LOGPROBS */
    const int32_t *stop_ids;   /* tokens that end generation (not reported) */
    int n_stop_ids;
    /* constrained decoding (both NULL: free): every sampled token keeps the
     * output a valid prefix of the grammar's language, generation ends when
     * it is complete; in the last steps only tokens that still let it
     * complete within the limit (HR_FINISH_STOP with a complete text at the
     * limit; HR_FINISH_LENGTH when it could not fit). The grammar and
     * vocabulary must outlive the request. */
    const hr_grammar *grammar;
    const hr_grammar_vocab *gvocab;
    /* prompt scoring (teacher forcing): 0 = off; i in [1, n_prompt): the
     * log-probability of every prompt token from index i on, given the
     * tokens before it (hr_request_prompt_logprobs). Those positions are
     * computed, never taken from the prompt cache. max_tokens may be 0, and
     * the prompt may then fill the whole context. */
    int score_from;
    /* speculative decoding: up to num_draft tokens drafted per step
     * (0..the engine's max_draft; 0 or HR_SPEC_OFF: none) and verified by
     * the model in the same ragged batch. Greedy output is identical to
     * decoding without it; sampled output is too, for a given seed (the
     * draft is a point mass: docs/speculative.md). */
    hr_spec_mode spec;
    int num_draft;
    /* an embedding request: the last hidden state (after the model's final
     * norm) of every prompt token (hr_request_hidden), nothing generated
     * (max_tokens must be 0, no scoring, no speculation). Its positions are
     * all computed: the prompt cache is neither read nor written. An
     * encoder (bert) takes only these, its whole prompt in one step. */
    bool embed;
    /* a LoRA adapter of the engine's model (model/adapter.h; NULL: the
     * base): the request holds a reference until it is freed. Rows of
     * different adapters share each forward pass; the prompt cache keeps
     * each adapter's blocks apart. */
    hr_adapter *adapter;
    /* images (NULL / 0: none): each one's features (the vision tower's,
     * computed by the engine once per image identity and kept in a small
     * cache) replace the embeddings of its image tokens, which attend to
     * each other both ways. Prompt cache blocks that hold image tokens are
     * keyed by the image's identity. Not with embed or score_from. */
    const hr_req_image *images;
    int n_images;
} hr_req_params;

/* Copies everything it needs from p. The caller holds one reference. */
int hr_request_new(hr_request **out, const hr_engine *e, const hr_req_params *p,
                   hr_error *err);
/* Queue the request. Errors (the prompt does not fit the context or the KV
 * pool) leave it unqueued. The engine takes its own reference. */
int hr_engine_submit(hr_engine *e, hr_request *r, hr_error *err);
/* Ask the engine to stop it at the next step and free its KV. */
void hr_request_cancel(hr_request *r);
void hr_request_release(hr_request *r);

typedef struct hr_step {
    int32_t token;
    float logprob;              /* after the logits processors */
    int n_top;
    int32_t top_ids[HR_MAX_TOP_LOGPROBS];
    float top_lps[HR_MAX_TOP_LOGPROBS];
} hr_step;

/* Wait up to timeout_ms for generated token i. Returns 1 with *out filled,
 * 0 when generation finished before token i, -1 on timeout. */
int hr_request_wait(hr_request *r, int i, hr_step *out, int timeout_ms);
/* The finish reason (HR_FINISH_NONE while running); msg gets the error. */
hr_finish hr_request_finish(hr_request *r, hr_error *msg);
/* Generated tokens, counting an end-of-sequence token that ended it (as
 * mlx-lm's usage does). Valid once finished. */
int hr_request_completion_tokens(hr_request *r);
/* With score_from: [n_prompt] log-probabilities of the prompt tokens
 * (NaN before score_from), complete once token 0 exists or the request
 * finished (hr_request_wait returned); NULL without score_from. */
const float *hr_request_prompt_logprobs(const hr_request *r);
/* With embed: [n_prompt][d_model] hidden states, complete once the request
 * finished with HR_FINISH_STOP; NULL without embed. */
const float *hr_request_hidden(const hr_request *r);
int hr_request_n_prompt(const hr_request *r);
/* Tokens drafted for it and how many of them the model accepted (valid
 * once finished; both 0 without speculation). */
void hr_request_spec_counts(hr_request *r, long *drafted, long *accepted);
/* Prompt tokens whose KV came from the prompt cache (valid once the first
 * token exists). */
int hr_request_cached_tokens(hr_request *r);
/* Prompt processing so far: *done of *total prompt tokens computed, both
 * not counting those the prompt cache served (any thread; approximate while
 * the step runs). */
void hr_request_progress(hr_request *r, int *done, int *total);

typedef struct hr_engine_stats {
    long requests_total, requests_running, requests_queued;
    long requests_finished; /* ended (each counted before its consumer hears) */
    long prompt_tokens, generated_tokens;
    double prefill_tps, decode_tps; /* over the last steps */
    int kv_blocks_total, kv_blocks_free;
    int kv_blocks_requests;  /* held by running requests */
    int kv_blocks_cached;    /* indexed by the prompt cache */
    long cached_tokens;      /* prompt tokens served from the cache, in all */
    long spec_drafted, spec_accepted; /* speculative decoding, in all */
    bool spec_draft_model;   /* a draft model is loaded */
    bool ssd;                /* the SSD tier is on */
    const char *dead;        /* NULL; or why the engine cannot run any more
                              * (its GPU context is lost): every request fails,
                              * and the server exits */
    long ssd_written, ssd_hits, ssd_quarantined;
    long long ssd_bytes_written, ssd_bytes_read;
    /* prompt cache lookups (one per admitted request while the cache is on;
     * not embed requests): those that reused a prefix, those that did not,
     * and the looked-up prompt tokens computed rather than served */
    long cache_lookups, cache_hits, cache_misses, cache_miss_tokens;
    /* of the hits, those whose whole prompt was cached with its last
     * logits: the first token sampled from them, no forward (lcache.h) */
    long cache_logits_hits;
    /* images: encoded by the vision tower, and served from the features cache */
    long images_encoded, images_cached;
    long ssd_write_errors, ssd_read_errors; /* disk faults the tier survived */
    long ssd_direct_reads;      /* of ssd_hits, the files read with O_DIRECT */
    const char *ssd_last_error; /* strerror of the last one; NULL none */
    bool ssd_paused;            /* writes paused after an error (retried later) */
    size_t kv_bytes;         /* every pool */
    /* the quantized pool sequences convert into (kv_start; 0 / 0 / 0: none) */
    int kvq_blocks_total, kvq_blocks_free;
    int kvq_blocks_cached; /* of them, indexed by the quantized prompt cache */
    size_t kvq_bytes;
    int kvr_tokens;        /* --kv-residual's window (0: none) and its pool */
    size_t kvr_bytes;
} hr_engine_stats;

/* Lock-free snapshot of the counters. */
void hr_engine_stats_get(const hr_engine *e, hr_engine_stats *s);

#endif
