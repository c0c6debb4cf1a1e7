/* Speculative decoding inside continuous batching (docs/speculative.md).
 *
 * Before a step, every decoding request with speculation on proposes up to
 * k tokens: by prompt lookup (the continuation of the longest recent n-gram
 * match in its prompt and output) or with the draft model (spec_draft.h,
 * batched across requests). The step's ragged batch then carries k + 1
 * positions for that request: its last token and the drafts, all with
 * logits. After the forward pass the rows are taken in order, each sampled
 * exactly as without speculation (same sampler, same grammar mask, same
 * history) and committed; the request moves on to the next row only while
 * the token it committed is the one drafted there. So every committed token
 * is the model's own choice: greedy output is identical, and with a seed so
 * is sampled output (a draft is a point mass: accepting when the model's own
 * draw equals it is the min(1, p/q) rule, and a rejection's draw is the
 * residual's). The KV written for rejected drafts is rolled back (the
 * sequence's length moves back; the slots are overwritten next step and
 * never reach the prompt cache, which indexes only the length). k adapts to
 * each request's acceptance. */
#ifndef HR_ENGINE_SPEC_H
#define HR_ENGINE_SPEC_H

#include "engine/engine.h"

#include <stdbool.h>
#include <stdint.h>

/* Per-request state (engine thread, except the counters: under the
 * request's mutex). */
typedef struct hr_spec_state {
    hr_spec_mode mode;
    int k_max;          /* num_draft_tokens */
    double succ, trials; /* decayed counts of drafts accepted / verified (each
                         * given the ones before it were accepted) */
    int idle, wait;     /* steps without drafting; the steps before a probe */
    int cap;            /* this step's most drafts (k_max, the limit) */
    bool probe;         /* this step's first draft is a probe */
    int32_t draft[HR_SPEC_MAX_K]; /* this step's proposal */
    int n_draft;
    int32_t *dblocks;   /* the draft model's KV blocks ([n_ctx / HR_KV_BLOCK + 1]) */
    int n_dblocks;
    int dbase;          /* the token at the draft model's position 0 (spec_draft.h) */
    int dlen;           /* tokens from dbase on whose draft-model KV is valid */
    long drafted, accepted;
} hr_spec_state;

/* Prompt lookup over the history h[0, n): the continuation (at most k
 * tokens, written to out) of the most recent earlier occurrence of the
 * longest suffix of h, between HR_SPEC_NGRAM_MIN and HR_SPEC_NGRAM_MAX
 * tokens, that has one. Returns the number written (0: no match). O(n). */
#define HR_SPEC_NGRAM_MIN 2
#define HR_SPEC_NGRAM_MAX 6
int hr_spec_ngram(const int32_t *h, int n, int k, int32_t *out);

/* ---- how many tokens to draft ----
 * Each step the engine drafts where it pays: a request's j-th draft is
 * accepted with probability alpha^j (alpha: its acceptance so far, each
 * draft given the ones before it), and costs what one more token adds to
 * the step's forward pass (measured: hr_spec_cost) plus, with the draft
 * model, a draft token's share of its passes. Drafts are added, best
 * first, while they raise the step's expected tokens per second; so k
 * follows each request's acceptance, and shrinks where a bigger batch
 * makes a token dearer (a CPU), grows where it is nearly free (a GPU). A
 * request the choice leaves without drafts probes with one token after 1,
 * 2, 4 ... 64 steps (doubling while only probes draft for it), so that its
 * estimate can recover. */
void hr_spec_init(hr_spec_state *s, hr_spec_mode mode, int k_max);
double hr_spec_alpha(const hr_spec_state *s);
/* A verify of `drafted` tokens accepted the first `accepted`. */
void hr_spec_observe(hr_spec_state *s, int drafted, int accepted);

/* The measured cost of a decode step's forward pass by its token count,
 * and of the draft model per drafted token (seconds, moving estimates of
 * the quiet value). A size not measured in the last HR_SPEC_COST_AGE
 * steps is estimated again (a stall measured once cannot keep k off a size
 * for good), and no size is taken to cost more than the one below it plus
 * a one-token step (running the token apart would). */
#define HR_SPEC_COST_T 64
#define HR_SPEC_COST_AGE 256
typedef struct hr_spec_cost {
    double step[HR_SPEC_COST_T + 1]; /* [T]: 0 = not measured yet */
    long seen[HR_SPEC_COST_T + 1];   /* [T]: n when step[T] was last measured */
    long n;                          /* decode steps measured */
    double draft_tok;                /* draft model seconds per drafted token */
} hr_spec_cost;
void hr_spec_cost_step(hr_spec_cost *c, int T, double seconds);
void hr_spec_cost_draft(hr_spec_cost *c, int tokens, double seconds);
/* The forward pass's seconds for T tokens: measured, else estimated from
 * the nearest measured T below (each token beyond it 20% of a one-token
 * step, until measured). */
double hr_spec_cost_of(const hr_spec_cost *c, int T);

/* ---- engine hooks (engine thread; engine_int.h) ---- */
struct hr_engine;
/* Fill every decoding request's proposal (spec.n_draft, 0 for most). */
void hr__spec_propose(struct hr_engine *e);
/* Logits rows [k, k + n) are one request's verify rows (n = 1 + n_draft,
 * row k already sampled): commit them in order while they match the
 * drafts, roll back the rest. Returns the request's outcome. */
int hr__spec_commit(struct hr_engine *e, int k, int n);

#endif
