/* A persistent thread pool: the only owner of compute threads.
 *
 * hr_pool_run(pool, fn, ctx) calls fn(ctx, ith, nth) once on each of the
 * pool's nth threads (the caller is ith 0) and returns when all are done.
 * Kernels split their work by (ith, nth) and never manage threads. Workers
 * spin briefly between jobs, then sleep on a futex: the token loop makes no
 * allocation and, while busy, no system call. The caller, done with its
 * share, spins a little for the others and then yields its core (a worker
 * that is late has usually been preempted by another process on a shared
 * machine, and may be waiting for exactly that core). */
#ifndef HR_CORE_POOL_H
#define HR_CORE_POOL_H

#include <stddef.h>

typedef struct hr_pool hr_pool;
typedef void (*hr_task_fn)(void *ctx, int ith, int nth);

/* n_threads counts the caller; 0 means one per online CPU. NULL on failure. */
hr_pool *hr_pool_new(int n_threads);
void hr_pool_free(hr_pool *pool);
int hr_pool_size(const hr_pool *pool);
/* Not reentrant: one hr_pool_run at a time per pool. A NULL pool runs
 * fn(ctx, 0, 1) inline. */
void hr_pool_run(hr_pool *pool, hr_task_fn fn, void *ctx);

/* A 64-byte aligned buffer of at least `bytes` owned by the pool, for the
 * caller of hr_pool_run to fill before a job (one user at a time, like
 * hr_pool_run). It grows when asked for more (the old contents are lost)
 * and is freed with the pool. NULL when out of memory. */
void *hr_pool_scratch(hr_pool *pool, size_t bytes);

/* Split n items into nth nearly equal ranges; range ith is [*lo, *hi). */
static inline void hr_split(long n, int ith, int nth, long *lo, long *hi) {
    long per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}

#endif
