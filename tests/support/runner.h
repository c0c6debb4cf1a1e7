/* hr_runner (tests only): drives one sequence through the forward pass, so
 * that the parity tests can teacher-force the reference's tokens and read
 * every step's logits. Everything else generates through the engine
 * (src/engine/engine.h). It owns the forward scratch, a KV pool sized for
 * n_ctx tokens and the sequence's block table, grown block by block. */
#ifndef HR_TESTS_RUNNER_H
#define HR_TESTS_RUNNER_H

#include "hearth.h"
#include "model/kv.h"
#include "model/model.h"

typedef struct hr_runner hr_runner;

typedef struct hr_runner_opts {
    int n_threads;     /* 0: all cores */
    int n_ctx;         /* max sequence length; 0: the model's max_position_embeddings, capped at 8192 */
    int prefill_chunk; /* tokens per forward during prefill; 0: 512 */
    hr_dtype kv_dtype; /* KV cache: F32 (0: exact), F16, BF16 (model/kv.h) */
    const hr_kv_fmt *kv_fmt; /* or a whole format (quantized KV: Q8_0, AFFINE,
                              * TURBO, K and V apart); NULL: kv_dtype's */
    int kv_residual;   /* with a quantized kv_fmt: the residual window's tokens
                        * (model/batch.h), its rows F32 (every block kept); 0: none */
} hr_runner_opts;

int hr_runner_new(hr_runner **out, const hr_model *m, const hr_runner_opts *o,
                  hr_error *err);
void hr_runner_free(hr_runner *r);

/* Append n tokens to the sequence (prefill in chunks); when logits is not
 * NULL, the logits after the last one go there ([n_vocab]). A sequence that
 * would pass n_ctx is an error naming the limit; nothing is appended then. */
int hr_runner_eval(hr_runner *r, const int32_t *tokens, int n, float *logits,
                   hr_error *err);
/* Forget the sequence (its KV blocks go back to the pool). */
void hr_runner_reset(hr_runner *r);
int hr_runner_len(const hr_runner *r);
/* The LoRA adapter of the following evaluations (model/adapter.h; NULL:
 * the base model; it must outlive them). */
struct hr_adapter;
void hr_runner_set_adapter(hr_runner *r, const struct hr_adapter *a);

#endif
