/* The engine's private structures, shared by the files of the engine
 * thread: engine.c (requests, scheduling, the step) and spec.c /
 * spec_draft.c (speculative decoding). Nothing above src/engine includes
 * this. */
#ifndef HR_ENGINE_ENGINE_INT_H
#define HR_ENGINE_ENGINE_INT_H

#include "engine/engine.h"
#include "engine/lcache.h"
#include "engine/pcache.h"
#include "engine/spec.h"
#include "engine/spec_draft.h"
#include "model/forward.h"
#include "model/kv.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

/* What a step's logits row does to its request. */
typedef enum hr_row_outcome {
    HR_ROW_NONE,     /* no row this step (a prefill chunk short of the prompt's end) */
    HR_ROW_CONTINUE, /* a token was appended; generation goes on */
    HR_ROW_EOS,      /* a stop token: ends with HR_FINISH_STOP */
    HR_ROW_COMPLETE, /* the constrained text is complete: HR_FINISH_STOP */
    HR_ROW_LIMIT,    /* max_tokens or the context reached: HR_FINISH_LENGTH */
    HR_ROW_FAILED,   /* constrained decoding failed (our bug): HR_FINISH_ERROR */
} hr_row_outcome;

struct hr_request {
    _Atomic int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* immutable after hr_request_new */
    int32_t *prompt;
    int n_prompt;
    int32_t *stop_ids;
    int n_stop_ids;
    int max_tokens, top_logprobs;
    int score_from;       /* 0, or the first prompt index scored */
    float *prompt_lp;     /* [n_prompt] with score_from: written before token 0 */
    bool embed;           /* an embedding request (hr_req_params.embed) */
    float *hidden;        /* [n_prompt][d_model] with embed */
    hr_sampler *sampler;
    hr_adapter *adapter;  /* a reference, or NULL; dropped when the request
                           * ends (hr__request_end) */
    uint64_t cache_seed;  /* the prompt cache's key seed: the adapter's */
    hr_matcher *matcher;  /* constrained decoding, or NULL */
    uint32_t *mask;       /* [n_vocab / 32 + 1] allowed tokens of the step */
    /* the log, written by the engine under mu */
    hr_step *steps;       /* [max_tokens] */
    int n_steps;
    bool eos;             /* a stop token ended it */
    hr_finish finish;
    char err[256];
    _Atomic int cancel;
    /* engine-thread state */
    hr_request *next;     /* inbox / waiting FIFO link */
    uint64_t seq_id;      /* unique per admitted request: its recurrent state's holder */
    hr_pcache_state snap[2]; /* hybrid models with the prompt cache: the state after
                              * the last block boundary inside the prompt, and the
                              * latest one a step ended on after it (data NULL: none) */
    int32_t *blocks;      /* in e->kv, or in e->kvq once converted */
    int n_blocks;
    int32_t *rblocks;     /* with a residual window (e->resid): the blocks of e->kvr
                           * holding its positions' rows at full precision, indexed
                           * as blocks (-1: none; residual.c), else NULL */
    int rb_lo, rb_hi;     /* rblocks' entries that may be set: [rb_lo, rb_hi) */
    bool conv;            /* its KV converted into e->kvq (hr_engine_opts.kv_start) */
    int q_need;           /* e->kvq blocks promised to it until it converts (0: none) */
    bool conv_exact;      /* converted holding exactly kv_start tokens (or started
                           * from such a sequence's quantized blocks): its blocks
                           * may go to the quantized prompt cache (e->pcq) */
    float *first;         /* the prompt's last logits from the logits cache (lcache.h):
                           * its first token is sampled from them, that position not
                           * computed again (NULL: none) */
    int len;              /* tokens whose K/V are in the cache */
    int cached;           /* of which came from the prompt cache */
    int rope_len;         /* the sequence length the cached K/V were roped for */
    int limit;            /* max tokens generated: max_tokens capped by the context */
    hr_row_outcome outcome; /* what this step's row did to it */
    _Atomic int progress; /* len, published for hr_request_progress */
    /* speculative decoding (engine thread; spec.h) */
    hr_spec_state spec;
    /* images (images.c): spans of the prompt, their pixels until the
     * engine encodes them, then their features */
    int n_images;
    struct hr__req_img *images; /* [n_images], by start */
    int32_t *key;               /* [n_prompt] the prompt cache's view of the prompt: image
                                 * tokens replaced by values of the image's identity; NULL: none */
    float *feat;                /* [image tokens][d_model] once encoded, else NULL */
    int32_t *rope3;             /* [n_prompt][3] M-RoPE positions (Qwen2.5-VL with images),
                                 * else NULL: a position is itself */
    int rope_delta;             /* M-RoPE: what later tokens add to their position */
};



struct hr_engine {
    const hr_model *m;
    hr_fwd *fwd;
    hr_kv kv;                       /* where sequences start */
    hr_kv kvq;                      /* with kv_start: the quantized pool sequences convert
                                     * into (n_blocks 0: none) */
    int kv_start;                   /* convert once a sequence holds this many tokens */
    hr_kv kvr;                      /* with resid: the residual windows' full-precision
                                     * rows (n_blocks 0: none) */
    int resid;                      /* --kv-residual: the window's tokens; 0: none */
    struct hr__window *windows;     /* [max_batch] with resid and the prompt cache: the
                                     * last windows of finished sequences (residual.c) */
    long window_clock;
    int kvq_promised;               /* kvq blocks promised to unconverted requests */
    hr_pcache *pcache;              /* NULL: no prompt cache */
    hr_lcache *lcache;              /* prompts' last logits (NULL: none, e.g. hybrid) */
    hr_ssd *ssd;                    /* NULL: no SSD tier */
    hr_pcache *pcq;                 /* with kv_start: the prompt cache of e->kvq's blocks
                                     * (converted sequences'); NULL: none */
    hr_ssd *ssdq;                   /* its SSD tier; NULL: none */
    int32_t *tokbuf;                /* [n_ctx] a sequence's tokens, for the cache */
    int32_t *tokbuf_spec;           /* [n_ctx] a sequence's tokens, for prompt lookup */
    int max_batch, n_ctx, chunk, max_tokens_step;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    hr_request *inbox, *inbox_tail; /* under mu */
    bool stop;                      /* under mu */
    /* engine thread only */
    hr_request *waiting, *waiting_tail;
    hr_request **running;           /* [max_batch] */
    int n_running;
    int32_t *b_tok, *b_pos, *b_seq; /* [max_tokens_step] */
    uint8_t *b_want;
    hr_seq_blocks *b_seqs;          /* [max_batch] */
    const int32_t **b_rtables;      /* [max_batch] each sequence's rblocks */
    const hr_adapter **b_adapter;   /* [max_batch] each sequence's adapter */
    hr_request **b_row_req;         /* [max_rows]: request of each logits row */
    hr_step *b_step;                /* [max_rows]: what each row sampled */
    int n_rows;
    int b_kv2_from;                 /* the step's first token of a sequence in kvq */
    int *conv_rows;                 /* [n_ctx / HR_KV_BLOCK + 1] convert's scratch */
    uint8_t *b_first;               /* [max_rows]: the row is its request's first */
    int32_t *b_row_score;           /* [max_rows]: the prompt index a scoring row
                                     * predicts; -1: a row to sample */
    int rows_base;                  /* max_batch * (1 + max_draft) */
    int max_rows;                   /* logits rows of a step: rows_base, and
                                     * SCORE_ROWS more once a request scores */
    float *logits;                  /* [max_rows][n_vocab] */
    float *hidden;                  /* [max_tokens_step][d_model] a step's hidden-state
                                     * rows (embed requests); NULL until the first */
    int max_draft;                  /* room per row for drafted tokens */
    uint64_t next_seq_id;           /* the last hr_request.seq_id given */
    bool len_rope;                  /* RoPE depends on the sequence length */
    size_t state_bytes;             /* a sequence's recurrent state; 0: none, or
                                     * no prompt cache to snapshot it for */
    hr_spec_draft *draft;           /* the draft model, or NULL */
    hr_spec_cost spec_cost;         /* measured step costs, for choosing k */
    /* stats, read from any thread */
    _Atomic long st_total, st_running, st_queued, st_finished, st_prompt, st_gen;
    _Atomic long st_prefill_tok, st_decode_tok;
    _Atomic bool dead;              /* the model's device is lost (hr_backend.lost) */
    char dead_msg[256];             /* why; written once, before dead is set */
    _Atomic double st_prefill_s, st_decode_s;
    _Atomic int st_kv_free, st_kv_requests, st_kv_cached, st_kvq_free, st_kvq_cached;
    _Atomic long st_cached_tokens;
    _Atomic long st_lookups, st_lookup_hits, st_miss_tokens;
    _Atomic long st_logits_hits; /* first tokens from the logits cache */
    _Atomic long st_drafted, st_accepted;
    /* images: the step's rows and spans (build_batch), the features cache */
    float *b_embd;                  /* [max_tokens_step][d_model], NULL until the first */
    int32_t *b_embd_row, *b_end;    /* [max_tokens_step] */
    int32_t *b_rope;                /* [max_tokens_step][3] M-RoPE models, else NULL */
    bool b_has_rope;                /* a row of the step has M-RoPE positions of its own */
    bool b_has_img;
    struct hr__feat_entry *feat_cache; /* [HR_FEAT_CACHE] */
    long feat_clock;
    _Atomic long st_img_encoded, st_img_cached;
};
#define HR_FEAT_CACHE 16 /* images whose features the engine keeps */

/* ---- shared by engine.c, rows.c and spec.c (engine thread) ---- */

/* Token k of a sequence: the prompt, then what was sampled. */
static inline int32_t hr__token_at(const hr_request *r, int k) {
    return k < r->n_prompt ? r->prompt[k] : r->steps[k - r->n_prompt].token;
}
bool hr__is_stop(const hr_request *r, int32_t tok);
/* The request ends: why (the first reason given stands) and msg; its
 * consumer is woken (request.c). */
void hr__request_end(hr_request *r, hr_finish why, const char *msg);
/* Logits row k (already sampled into b_step[k]) commits its token to its
 * request: grammar, stop tokens, the log, limits. */
hr_row_outcome hr__commit_row(hr_engine *e, int k);
/* Mask row k to the grammar's allowed tokens (constrained requests), run
 * the request's sampler on it and fill b_step[k]. */
void hr__sample_row(hr_engine *e, int k);
/* Mask the first rows of constrained requests, then sample every first row
 * into b_step (and score the scoring rows) (rows.c). */
void hr__sample_rows(hr_engine *e);

/* ---- images (images.c) ---- */
typedef struct hr__req_img {
    float *pixels;              /* owned until encoded */
    size_t n_pixels;
    uint8_t hash[16];
    int start, len;             /* its tokens in the prompt */
    int row0;                   /* its first row of r->feat */
    int gh, gw;                 /* Qwen2.5-VL's patch grid */
} hr__req_img;
/* hr_request_new's part for p->images. */
int hr__request_images(hr_request *r, const hr_engine *e, const hr_req_params *p, hr_error *err);
void hr__request_images_free(hr_request *r);
/* Features of r's images (engine thread, at admission): from the engine's
 * cache, else the vision tower on the forward's pool. */
int hr__engine_encode_images(hr_engine *e, hr_request *r, hr_error *err);
void hr__feat_cache_free(hr_engine *e);
/* The end of the image span holding prompt position p (p + 1 when none,
 * or when the model's images are causal: Qwen2.5-VL), and the row of
 * r->feat for it (-1: none). */
int hr__image_end(const hr_engine *e, const hr_request *r, int p, int *row);
/* Position p's three M-RoPE positions (p + the delta after the prompt). */
static inline void hr__rope3_at(const hr_request *r, int p, int32_t *out) {
    if (r->rope3 && p < r->n_prompt) {
        memcpy(out, r->rope3 + 3 * (size_t)p, 3 * sizeof *out);
        return;
    }
    out[0] = out[1] = out[2] = p + r->rope_delta;
}
/* c prefill tokens from r->len, shortened or lengthened so that no image
 * is split between steps (its tokens see each other: all in one step, or
 * in the cache); 0 when the next image does not fit in room. c as it is
 * when the model's images are causal (Qwen2.5-VL). */
int hr__image_chunk(const hr_engine *e, const hr_request *r, int c, int room);
/* The step's batch (batch.c): decode rows, then prefill chunks up to the
 * step's budgets, the sequences of e->kv before those converted into
 * e->kvq; the number of tokens. */
int hr__build_batch(hr_engine *e, int *n_prefill, int *n_decode);
/* Hybrid models with the prompt cache: the block boundary inside r's
 * prompt whose state is kept; 0: none. */
int hr__snap_point(const hr_engine *e, const hr_request *r);
/* The prompt cache's token k of r (hr__token_at with image tokens keyed). */
static inline int32_t hr__key_at(const hr_request *r, int k) {
    return r->key && k < r->n_prompt ? r->key[k] : hr__token_at(r, k);
}

/* the KV blocks that hold `tokens` tokens */
static inline int hr__blocks_for(int tokens) { return (tokens + HR_KV_BLOCK - 1) / HR_KV_BLOCK; }

/* The SSD tier's polls on the loop (ssd_flush.c): finished writes' blocks
 * given back, writes that found the queue full queued again (prompt cache
 * blocks, logits files); the number still waiting. */
int hr__ssd_poll(hr_engine *e, double now);
/* At a graceful stop, before the writers stop: the waiting writes queued as
 * room comes (until none is left, a tier pauses, or 10 s without progress). */
void hr__ssd_drain(hr_engine *e);

/* ---- the residual window (residual.c, docs/kv-quant.md) ---- */
/* The residual pool of an engine with a window of o->kv_residual tokens
 * over the pool of format kvq_fmt; its blocks in the model's unquantized
 * KV dtype. HR_EUNSUPPORTED / HR_EINVAL, one line naming --kv-residual,
 * for what it does not run with. */
int hr__resid_init(hr_engine *e, const hr_engine_opts *o, const hr_kv_fmt *kvq_fmt,
                   hr_error *err);
/* first.c, the logits cache's side of the engine. Once the prompt cache
 * (and its SSD tier) is open: e->lcache (none for hybrid models). */
void hr__first_init(hr_engine *e);
/* At admission, r's
 * prompt's last logits from the logits cache into r->first (true: every
 * prompt token may then come from the prompt cache); r->first dropped
 * (when the lookup or a cut back leaves the last token to compute). */
bool hr__first_logits(hr_engine *e, hr_request *r);
void hr__first_drop(hr_request *r);
/* After a step's forward: r->first of every request as logits rows after
 * the forward's (when they fit), sampled and committed with them; with add
 * false, only whether there is one. */
bool hr__first_rows(hr_engine *e, bool add);
/* Before sampling changes them: the logits of every prompt whose prefill
 * this step completed (its first row: the prompt's last position) go to
 * the logits cache. */
void hr__keep_logits(hr_engine *e);
/* A prompt cache hit of *len tokens (*hit blocks of pool in r->blocks):
 * resumed there when a finished sequence's last window holds the same
 * tokens up to *len (its full-precision rows copied into r's window), else
 * cut back to the start of the window holding position *len (the blocks
 * after it are unreferenced): a window's rows are computed by its own
 * tokens. An unconverted sequence (with --quantized-kv-start) reads no
 * window until it converts: its hit is cut only where it ends in the
 * window of kv_start, whose rows the conversion needs. */
void hr__resid_cut_hit(hr_engine *e, hr_request *r, hr_kv *pool, int *hit, int *len);
/* r ends: its last window's full-precision rows are kept for a request
 * that continues it (hr__resid_cut_hit), the oldest kept window given
 * back for them. */
void hr__resid_keep(hr_engine *e, hr_request *r);
void hr__resid_free(hr_engine *e);
/* Before a step of T tokens (the b_* arrays): the residual blocks of every
 * block its tokens write. */
void hr__resid_alloc(hr_engine *e, int T);
/* After a step: r keeps the blocks of the window its next token reads
 * (all of them with all false, at its end: none). */
void hr__resid_trim(hr_engine *e, hr_request *r, bool all);

/* ---- sequences converted into the quantized pool (kvstart.c) ---- */
/* kvq blocks free beyond those promised to unconverted requests */
static inline int hr__kvq_spare(const hr_engine *e) { return e->kvq.n_free - e->kvq_promised; }
/* The quantized prompt cache's seed for a request's seed: a converted
 * block's rows depend on where its sequence converted and on the format it
 * converted from (the rows before the start attended over that format), so
 * both are part of its key, in RAM and in the SSD tier's file names. */
uint64_t hr__qseed(const hr_engine *e, uint64_t seed);
/* A prefix of kv_start tokens or more (of r's first upto) that a converted
 * sequence left in the quantized prompt cache: r starts converted on its
 * blocks (a copy of the last one if the prefix ends inside it) and takes
 * all its other blocks from e->kvq now, as hr__convert; *hit blocks and
 * *len tokens reused. 1: admitted so; 0: not (nothing held); -1: a hit
 * without room yet (r waits). */
int hr__admit_converted(hr_engine *e, hr_request *r, int upto, int *hit, int *len);
/* Convert r's KV into the quantized pool (mlx-lm's maybe_quantize_kv_cache:
 * once it holds kv_start tokens or more, before its next step): every row of
 * its blocks read and stored again by hr_kv_row_store in kvq's format
 * (hr_kv_convert), its e->kv blocks unreferenced, and the rest of its
 * reservation taken from what was promised to it. The prompt cache keeps
 * its unquantized prefix first (kv_start tokens at most: a later request
 * that reuses them converts where this one did); a sequence that converts
 * holding exactly kv_start tokens gives its quantized blocks to the
 * quantized prompt cache later (cache_prompt, retire).
 * A device pool's blocks go through the host: a failed copy (or no host
 * memory) leaves r unconverted and is r's error (0 or the error's code). */
int hr__convert(hr_engine *e, hr_request *r, hr_error *err);

/* engine.c's retire: running request i ends (why, msg), its blocks go to
 * the prompt cache unless it failed; the last running one moves to i. */
void hr__retire(hr_engine *e, int i, hr_finish why, const char *msg);

/* readback.c: a run of prompt cache blocks read back from the SSD tier in
 * the background (pcache.h hr_pcache_overlap). With wait, the run in
 * flight ends first (hr_pcache_settle). Requests that got a block that
 * failed its checks are cut back to the block before it, to compute the
 * rest again (one that cannot get blocks of its own for it ends with an
 * error). true when any was: what a step computed over that block is
 * wrong, and the step is to be dropped (hr__readback_drop). */
bool hr__readback_settle(hr_engine *e, bool wait);
/* A step's outputs dropped before anything was committed: every request
 * computes it again (its drafts made again). */
void hr__readback_drop(hr_engine *e);
/* Whether runs are worth reading under the forward here: a core besides
 * the forward's (at least 2). */
bool hr__readback_can(void);
/* Before the forward of a step with a run in flight: the compute pool
 * narrowed by a thread when it takes every core, so that the readers have
 * one (the forward's own threads and 4 readers sharing 2 cores made both
 * slower, docs/kv-quant.md); the width to give back to hr__readback_widen
 * (0: nothing was changed). */
int hr__readback_narrow(hr_engine *e);
void hr__readback_widen(hr_engine *e, int width);

#endif
