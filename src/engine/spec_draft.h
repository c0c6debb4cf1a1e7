/* The draft model of speculative decoding: its own forward scratch and KV
 * pool (on the draft model's backend, through the same forward pass as the
 * target), on the engine thread alone: a small model's passes are mostly
 * synchronization on a pool of threads, and one thread is as fast (0.23 ms
 * a token for the demo draft on one thread, 0.21 on two), and never waits
 * for a preempted worker on a shared machine. Each step it catches every
 * drafting request's draft KV up to the request's tokens and drafts their
 * tokens greedily, one batched forward pass per drafted position across all
 * requests. */
#ifndef HR_ENGINE_SPEC_DRAFT_H
#define HR_ENGINE_SPEC_DRAFT_H

#include "hearth.h"
#include "model/kv.h"
#include "model/model.h"

typedef struct hr_spec_draft hr_spec_draft;
struct hr_request;

/* A pool of n_blocks blocks, batches of up to max_tokens tokens over
 * max_batch sequences below n_ctx. */
int hr_spec_draft_new(hr_spec_draft **out, const hr_model *dm, int n_blocks, int max_batch,
                      int max_tokens, int n_ctx, hr_error *err);
void hr_spec_draft_free(hr_spec_draft *d);
/* A warm-up token through the draft model (hr_fwd_warm), sequence id. */
int hr_spec_draft_warm(hr_spec_draft *d, uint64_t id, hr_error *err);
hr_kv *hr_spec_draft_kv(hr_spec_draft *d);

/* A request's draft KV holds its tokens from spec.dbase on, at the draft's
 * positions from 0 (spec.dlen of them). It follows the target's prefill
 * (hr_spec_draft_follow, in the prefill steps: a prompt's prefill is part
 * of its time to first token, not of what a drafted token costs), and the
 * tokens since it last ran are caught up at a request's next draft. Where
 * more than HR_SPEC_DRAFT_WINDOW tokens (at most half the draft's
 * context) would have to be caught up at once (a prompt cache hit) or the
 * context passes the draft's own, the draft KV starts again from the last
 * HR_SPEC_DRAFT_WINDOW tokens: the drafts are proposals, and the target's
 * verify keeps the output exact whatever context they came from. */
#define HR_SPEC_DRAFT_WINDOW 1024

/* Brings the draft KV of every running request in prefill with
 * speculation by the draft model up to the tokens the target has
 * processed (its len). A forward failure is an error (those requests'
 * draft KV starts over at their next draft). */
int hr_spec_draft_follow(hr_spec_draft *d, struct hr_request **running, int n_running,
                         hr_error *err);

/* Requests rs[0, n): each wants rs[i]->spec.n_draft tokens (> 0) after its
 * known tokens; on return spec.draft holds at most that many (fewer when
 * its catch-up did not fit this step's tokens), spec.dlen is updated.
 * *seconds and *tokens get the time of the passes that drafted without a
 * catch-up of more than a token or two per request (the tokens of steps
 * that declined to draft are not what a drafted token costs) and the
 * tokens they drafted. A forward failure is an error (no drafts then). */
int hr_spec_draft_run(hr_spec_draft *d, struct hr_request **rs, int n, double *seconds,
                      int *tokens, hr_error *err);

#endif
