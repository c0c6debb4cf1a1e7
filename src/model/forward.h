/* The one generic transformer forward pass over a ragged hr_batch. Every
 * supported architecture runs through it; quirks come from the hparams and
 * the arch descriptor. */
#ifndef HR_MODEL_FORWARD_H
#define HR_MODEL_FORWARD_H

#include "core/pool.h"
#include "hearth.h"
#include "model/batch.h"
#include "model/kv.h"
#include "model/model.h"

typedef struct hr_fwd hr_fwd;

/* Scratch for batches of up to max_tokens tokens and max_seqs sequences at
 * positions below max_ctx (<= 0 or beyond the model's: the model's context),
 * allocated once: hr_forward never allocates. */
int hr_fwd_new(hr_fwd **out, const hr_model *m, int max_tokens, int max_seqs, int max_ctx,
               int n_threads, hr_error *err);
void hr_fwd_free(hr_fwd *f);
hr_pool *hr_fwd_pool(hr_fwd *f);

/* Run the batch: write every token's K/V into kv, and put the logits of
 * each token with b->logits[t] set, in token order, into logits
 * [n_out][n_vocab]. A malformed batch (token out of vocab, position past
 * the context or its block table) is an error before anything is written. */
int hr_forward(hr_fwd *f, hr_kv *kv, const hr_batch *b, float *logits,
               hr_error *err);
/* The same, where b->logits[t] == 2 asks for token t's last hidden state
 * (after the final norm, when the model has one) instead of its logits:
 * those rows go in token order into hidden [n_hidden][d_model], the
 * others' logits into logits as above. An encoder (arch->encoder) has only
 * hidden rows. Off the host (CUDA) the hidden rows come back to the host
 * after the step (kernels/backend.h gather: logits rows, then hidden ones). */
int hr_forward_out(hr_fwd *f, hr_kv *kv, const hr_batch *b, float *logits, float *hidden,
                   hr_error *err);

/* Recurrent layers' state (gated DeltaNet, Mamba-2), one sequence at a
 * time, for prompt-cache snapshots: the bytes of one sequence's state (0:
 * the model has none); a copy of sequence id's state, which must have run
 * up to position pos; sequence id to continue at pos from a copy (taking a
 * free slot); sequence id's slot given back (the engine, at a request's
 * end). A sequence has an id when its hr_seq_blocks.id is set. */
size_t hr_fwd_state_bytes(const hr_fwd *f);
int hr_fwd_state_get(hr_fwd *f, uint64_t id, int pos, void *dst, hr_error *err);
int hr_fwd_state_put(hr_fwd *f, uint64_t id, int pos, const void *src, hr_error *err);
void hr_fwd_state_drop(hr_fwd *f, uint64_t id);

/* A warm-up: one token at position 0 of sequence id (unique, its state
 * slot dropped after) in a block of kv given back after, its logits (an
 * encoder: its hidden state) into logits (hidden), so that the pass's
 * first touches (the weights' pages, the scratch, the threads) are paid
 * before a request. 0, or the forward's error. */
int hr_fwd_warm(hr_fwd *f, hr_kv *kv, uint64_t id, float *logits, float *hidden, hr_error *err);

#endif
