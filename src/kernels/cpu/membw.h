/* Measured memory read bandwidth of this machine: the ceiling of decode
 * (memory-bound), as the fastest plain streaming read (membw.c). */
#ifndef HR_KERNELS_MEMBW_H
#define HR_KERNELS_MEMBW_H

#include "core/pool.h"

#include <stddef.h>

/* A buffer to read: whole 256-byte groups of `bytes` (at least one), on
 * huge pages, filled once; NULL when there is no group or no memory. */
typedef struct hr_membw_buf hr_membw_buf;
hr_membw_buf *hr_membw_buf_new(size_t bytes);
void hr_membw_buf_free(hr_membw_buf *b);

/* Best of `reps` full reads of b, with and without a software prefetch,
 * split over the pool's threads: bytes/s. */
double hr_membw_read(hr_membw_buf *b, hr_pool *pool, int reps);

/* The same with a `bytes` buffer of its own (allocated, filled and freed
 * here); 0 when the buffer cannot be allocated. */
double hr_membw(hr_pool *pool, size_t bytes, int reps);

#endif
