/* A persistent thread pool: the only owner of compute threads.
 *
 * hr_pool_run(pool, fn, ctx) calls fn(ctx, ith, nth) once for each part ith
 * of nth and returns when all are done. Part ith runs on the pool's thread
 * ith (the caller is 0), unless that thread has not started it by the time
 * the caller is done with part 0 (asleep, or preempted by another process
 * on a shared machine): then the caller runs it, after its own. So a part
 * never waits for another part to start, and its results do not depend on
 * the thread that runs it. Kernels split their work by (ith, nth) and never
 * manage threads. Workers
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
/* The threads that run its jobs: nth, or fewer while narrowed. */
int hr_pool_size(const hr_pool *pool);
/* Jobs run on the first n threads (1..nth) until narrowed again: the others
 * sleep, their cores free for other work (a read-back under the forward:
 * engine/readback.c). Between jobs, by the caller of hr_pool_run. Returns
 * the width before. Kernels split by their (ith, nth), so a job's results
 * do not depend on it. */
int hr_pool_narrow(hr_pool *pool, int n);
/* Not reentrant: one hr_pool_run at a time per pool. A NULL pool runs
 * fn(ctx, 0, 1) inline. */
void hr_pool_run(hr_pool *pool, hr_task_fn fn, void *ctx);

/* Bytes a thread should have in its L2 for the job after next (a hint). */
typedef struct hr_pool_range {
    const void *p;
    size_t n;
} hr_pool_range;

/* The next hr_pool_run's threads, once done with their part and waiting
 * (a worker for the job after, the caller for the workers), prefetch into
 * L2 the bytes of ranges[ith] (ith < count; ranges are copied) that the
 * job after will read, and stop as soon as their wait ends: on a decode
 * step the threads wait between jobs while the caller runs its serial row
 * work and while a job's last part finishes, and the memory is idle. A
 * hint only: the results never depend on it. */
void hr_pool_prefetch_next(hr_pool *pool, const hr_pool_range *ranges, int count);

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
