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
 * hidden rows. Hidden rows are not supported yet off the host (CUDA). */
int hr_forward_out(hr_fwd *f, hr_kv *kv, const hr_batch *b, float *logits, float *hidden,
                   hr_error *err);

#endif
