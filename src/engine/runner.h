/* hr_runner: drives one sequence through the forward pass (the CLI verbs'
 * engine; the server's scheduler batches many). It owns the forward
 * scratch, a KV pool sized for n_ctx tokens and the sequence's block table;
 * it grows the table block by block as the sequence grows. */
#ifndef HR_ENGINE_RUNNER_H
#define HR_ENGINE_RUNNER_H

#include "core/pool.h"
#include "hearth.h"
#include "model/model.h"

typedef struct hr_runner hr_runner;

typedef struct hr_runner_opts {
    int n_threads;     /* 0: all cores */
    int n_ctx;         /* max sequence length; 0: the model's max_position_embeddings, capped at 8192 */
    int prefill_chunk; /* tokens per forward during prefill; 0: 512 */
    hr_dtype kv_dtype; /* KV cache: F32 (0: exact), F16, BF16 (model/kv.h) */
    int kv_bits;       /* > 0: mlx-lm's quantized KV (2, 3, 4, 6, 8 bits) ... */
    int kv_group;      /* ... in groups of kv_group, once the sequence holds */
    int kv_start;      /* kv_start tokens or more after an eval (docs/kv-quant.md) */
} hr_runner_opts;

int hr_runner_new(hr_runner **out, const hr_model *m, const hr_runner_opts *o,
                  hr_error *err);
void hr_runner_free(hr_runner *r);

/* Append n tokens to the sequence (prefill in chunks); when logits is not
 * NULL, the logits after the last one go there ([n_vocab]). A sequence that
 * would pass n_ctx is an error naming the limit; nothing is appended then. */
int hr_runner_eval(hr_runner *r, const int32_t *tokens, int n, float *logits,
                   hr_error *err);
/* Forget the sequence (its KV blocks go back to the pool; a quantized
 * pool gives way to a full-precision one again). */
void hr_runner_reset(hr_runner *r);
int hr_runner_len(const hr_runner *r);
int hr_runner_threads(const hr_runner *r);
/* The runner's compute threads, for other work between its evals (bench's
 * bandwidth reads: no second set of threads spinning beside these). */
hr_pool *hr_runner_pool(hr_runner *r);

#endif
