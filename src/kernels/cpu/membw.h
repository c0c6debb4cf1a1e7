/* Measured memory read bandwidth of this machine: the ceiling of decode
 * (memory-bound), as the fastest plain streaming read (membw.c). */
#ifndef HR_KERNELS_MEMBW_H
#define HR_KERNELS_MEMBW_H

#include "core/pool.h"

#include <stddef.h>

/* Best of `reps` full reads, with and without a software prefetch, of a
 * `bytes` buffer (allocated, filled and freed here), split over the pool's
 * threads; bytes/s, or 0 when the buffer cannot be allocated. */
double hr_membw(hr_pool *pool, size_t bytes, int reps);

#endif
