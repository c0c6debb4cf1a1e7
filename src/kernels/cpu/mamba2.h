/* The CPU's Mamba-2 mixer (kernels/backend.h hr_mamba2_args): the conv per
 * sequence, the selective-state recurrence per (sequence, head), each
 * sequence's tokens in order, then the gated norm per token. What a token
 * gets depends on its own sequence alone (batch-invariant).
 *
 * transformers' torch path computes a prefill with the chunked (SSD) scan
 * and a cached decode step with this recurrence; the two are the same sum in
 * another order (docs/models.md: within 1e-4 of each other at float32). */
#ifndef HR_KERNELS_CPU_MAMBA2_H
#define HR_KERNELS_CPU_MAMBA2_H

#include "core/pool.h"
#include "kernels/backend.h"

/* The mixer over T tokens at pos[t] of sequence seq[t] (n_seqs of them). */
void hr_mamba2(hr_pool *pool, const hr_mamba2_args *a, int T, const int32_t *pos,
               const int32_t *seq, int n_seqs);

#endif
