/* The CPU's gated DeltaNet layer (kernels/backend.h hr_deltanet_args):
 * the conv and the L2 norms per sequence, then the recurrence and the gated
 * norm per (sequence, value head), each sequence's tokens in order. What a
 * token gets depends on its own sequence alone (batch-invariant). */
#ifndef HR_KERNELS_CPU_DELTANET_H
#define HR_KERNELS_CPU_DELTANET_H

#include "core/pool.h"
#include "kernels/backend.h"

/* The layer over T tokens at pos[t] of sequence seq[t] (n_seqs of them). */
void hr_deltanet(hr_pool *pool, const hr_deltanet_args *a, int T, const int32_t *pos,
                 const int32_t *seq, int n_seqs);

#endif
