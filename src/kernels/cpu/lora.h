/* The CPU's LoRA deltas (kernels/backend.h hr_lora_args): after a base
 * product, each adapter's rows get their low-rank delta. Two jobs on the
 * pool: z = scale * x . a^T for every (row, rank) pair, then y += z . bt
 * split by output columns (each adapter's bt is read once for all its
 * rows). A row's result does not depend on which other rows, adapters or
 * threads share the step: every element is the same sequence of float
 * operations (batch-invariant). */
#ifndef HR_KERNELS_CPU_LORA_H
#define HR_KERNELS_CPU_LORA_H

#include "core/pool.h"
#include "kernels/backend.h"

/* z: scratch of HR_LORA_MAX_OUT * T * HR_LORA_MAX_RANK floats for the
 * step's T rows. */
void hr_lora(hr_pool *pool, float *z, int T, const hr_lora_args *a);

/* The same on the calling thread alone (the reference the tests hold
 * the pooled one to). */
void hr_lora_ref(float *z, int T, const hr_lora_args *a);

#endif
