/* A small seeded PRNG (xoshiro256** seeded by splitmix64): the same seed
 * gives the same stream on every platform. */
#ifndef HR_SAMPLE_RNG_H
#define HR_SAMPLE_RNG_H

#include <stdint.h>

typedef struct hr_rng {
    uint64_t s[4];
} hr_rng;

void hr_rng_seed(hr_rng *r, uint64_t seed);
uint64_t hr_rng_next(hr_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double hr_rng_uniform(hr_rng *r);

#endif
