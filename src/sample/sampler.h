/* Token sampling for one sequence: greedy at temp 0, else temperature with
 * top-k, top-p (nucleus) and min-p filters in mlx-lm's order, from a seeded
 * RNG; plus log-softmax and the top-K log-probabilities. The full
 * penalties / logit_bias / XTC chain lands with the server. */
#ifndef HR_SAMPLE_SAMPLER_H
#define HR_SAMPLE_SAMPLER_H

#include "sample/rng.h"

#include <stdint.h>

typedef struct hr_sampler_params {
    float temp;   /* 0 = greedy */
    float top_p;  /* 1 = off */
    int top_k;    /* 0 = off */
    float min_p;  /* 0 = off */
    uint64_t seed;
} hr_sampler_params;

typedef struct hr_sampler {
    hr_sampler_params p;
    hr_rng rng;
    int n_vocab;
    float *probs;    /* [n_vocab] scratch */
    int32_t *order;  /* [n_vocab] scratch */
} hr_sampler;

int hr_sampler_init(hr_sampler *s, const hr_sampler_params *p, int n_vocab);
void hr_sampler_deinit(hr_sampler *s);
/* Pick the next token from logits[n_vocab] (not modified). */
int32_t hr_sampler_sample(hr_sampler *s, const float *logits);

/* The k best (id, logprob) of log_softmax(logits), best first (ties: lower
 * id first). Returns the number written (min(k, n)). */
int hr_top_logprobs(const float *logits, int n, int k, int32_t *ids, float *lps);
/* argmax, lowest id on ties */
int32_t hr_argmax(const float *logits, int n);

#endif
