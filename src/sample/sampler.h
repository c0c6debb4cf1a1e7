/* The per-request sampler chain, with mlx-lm's semantics (sample_utils.py):
 *   logits processors, in order: logit_bias, repetition penalty, presence
 *   penalty, frequency penalty (each over the last *_context_size tokens of
 *   the history: prompt + generated);
 *   then logprobs = log_softmax(logits) (the values reported as logprobs);
 *   then, unless temp == 0 (argmax): top_p, min_p, XTC, top_k filters and a
 *   categorical draw at temperature temp from a seeded RNG.
 * The same seed and inputs give the same tokens. */
#ifndef HR_SAMPLE_SAMPLER_H
#define HR_SAMPLE_SAMPLER_H

#include "hearth.h"
#include "sample/rng.h"

#include <stdint.h>

typedef struct hr_sampler_params {
    float temp;              /* 0: greedy */
    float top_p;             /* applied when 0 < top_p < 1 */
    float min_p;             /* 0: off */
    int min_tokens_to_keep;  /* min_p keeps at least this many (>= 1) */
    int top_k;               /* 0: off */
    float xtc_probability;   /* 0: off */
    float xtc_threshold;
    const int32_t *xtc_special; /* ids XTC never removes (eos, newline); copied */
    int n_xtc_special;
    float repetition_penalty; /* 0 or 1: off */
    int repetition_context_size;
    float presence_penalty;   /* 0: off */
    int presence_context_size;
    float frequency_penalty;  /* 0: off */
    int frequency_context_size;
    const int32_t *bias_ids;  /* logit_bias; copied */
    const float *bias_values;
    int n_bias;
    uint64_t seed;
} hr_sampler_params;

typedef struct hr_sampler hr_sampler;

/* mlx-lm's defaults: greedy, filters off, min_tokens_to_keep 1,
 * xtc_threshold 0.1, context sizes 20. */
void hr_sampler_params_default(hr_sampler_params *p);

/* Validates every field (ranges as mlx-lm checks them; errors name the
 * field, e.g. "top_k must be ...") and allocates all scratch up front:
 * sampling never allocates. */
int hr_sampler_new(hr_sampler **out, const hr_sampler_params *p, int n_vocab,
                   hr_error *err);
void hr_sampler_free(hr_sampler *s);

/* Append tokens to the penalty history (the prompt, then each sampled token). */
void hr_sampler_accept(hr_sampler *s, const int32_t *tokens, int n);

/* Runs the chain on logits[n_vocab] (raw model output). On return logits
 * holds the log-probabilities after the processors (what the API reports as
 * logprobs); the sampled token id is returned. Does not add it to the
 * history: call hr_sampler_accept. */
int32_t hr_sampler_sample(hr_sampler *s, float *logits);
/* Draws again from what hr_sampler_sample left in logprobs, after the
 * caller removed tokens (set them to -INFINITY; at least one must remain):
 * the processors are not applied again, the rest is renormalized and
 * becomes the reported log-probabilities. */
int32_t hr_sampler_resample(hr_sampler *s, float *logprobs);

/* The k best (id, logprob) of a row of log-probabilities (what the sampler
 * left in it), best first (ties: lower id first), the values as they are:
 * not normalized again, so a token's top entry equals its reported logprob
 * bit for bit. Returns the number written (min(k, n)). */
int hr_top_logprobs(const float *logprobs, int n, int k, int32_t *ids, float *lps);
/* log(sum(exp(x))), computed stably (the max, then the sum in double of
 * this CPU's exponential: hr_cpu()->sum_exp). */
float hr_logsumexp(const float *x, int n);
/* argmax, lowest id on ties; NaNs never win (0 when all are NaN) */
int32_t hr_argmax(const float *logits, int n);

#endif
