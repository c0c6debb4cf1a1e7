#include "core/pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SPIN_ITERS 20000
#define YIELD_SPINS 2000

struct hr_pool {
    int nth;
    pthread_t *threads;
    hr_task_fn fn;
    void *ctx;
    _Atomic unsigned gen;     /* bumped once per job; futex word */
    _Atomic int pending;      /* workers still running the current job */
    _Atomic int stop;
    _Atomic int sleeping;     /* workers in futex_wait: wake only if any */
    void *scratch;            /* hr_pool_scratch: grows, never shrinks */
    size_t scratch_cap;
};

typedef struct worker_arg {
    hr_pool *pool;
    int ith;
} worker_arg;

static void futex_wait(_Atomic unsigned *addr, unsigned val) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic unsigned *addr) {
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, 0x7fffffff, NULL,
            NULL, 0);
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *worker_main(void *p) {
    worker_arg *a = p;
    hr_pool *pool = a->pool;
    int ith = a->ith;
    free(a);
    unsigned seen = 0; /* gen only moves once hr_pool_new has returned */
    for (;;) {
        int spins = 0;
        unsigned g;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) ==
               seen) {
            if (++spins < SPIN_ITERS)
                cpu_relax();
            else {
                atomic_fetch_add(&pool->sleeping, 1);
                futex_wait(&pool->gen, seen);
                atomic_fetch_sub(&pool->sleeping, 1);
            }
        }
        seen = g;
        if (atomic_load(&pool->stop))
            return NULL;
        pool->fn(pool->ctx, ith, pool->nth);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_release);
    }
}

hr_pool *hr_pool_new(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    hr_pool *pool = calloc(1, sizeof *pool);
    if (!pool)
        return NULL;
    pool->nth = n_threads;
    pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
    if (!pool->threads) {
        free(pool);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *a = malloc(sizeof *a);
        if (a) {
            a->pool = pool;
            a->ith = i;
        }
        if (!a || pthread_create(&pool->threads[i], NULL, worker_main, a) != 0) {
            free(a);
            pool->nth = i;
            hr_pool_free(pool);
            return NULL;
        }
    }
    return pool;
}

void hr_pool_free(hr_pool *pool) {
    if (!pool)
        return;
    atomic_store(&pool->stop, 1);
    atomic_fetch_add_explicit(&pool->gen, 1, memory_order_release);
    futex_wake_all(&pool->gen);
    for (int i = 1; i < pool->nth; i++)
        pthread_join(pool->threads[i], NULL);
    free(pool->threads);
    free(pool->scratch);
    free(pool);
}

void *hr_pool_scratch(hr_pool *pool, size_t bytes) {
    if (bytes > pool->scratch_cap) {
        size_t cap = bytes + bytes / 4;
        void *p = NULL;
        if (posix_memalign(&p, 64, cap) != 0)
            return NULL;
        free(pool->scratch);
        pool->scratch = p;
        pool->scratch_cap = cap;
    }
    return pool->scratch;
}

int hr_pool_size(const hr_pool *pool) { return pool ? pool->nth : 1; }

void hr_pool_run(hr_pool *pool, hr_task_fn fn, void *ctx) {
    if (!pool || pool->nth == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    atomic_store_explicit(&pool->pending, pool->nth - 1, memory_order_relaxed);
    atomic_fetch_add(&pool->gen, 1);
    if (atomic_load(&pool->sleeping) > 0)
        futex_wake_all(&pool->gen);
    fn(ctx, 0, pool->nth);
    /* a worker still busy after a short spin has usually been preempted (the
     * cores are shared): yield, so that it can have this core back */
    for (int spins = 0; atomic_load_explicit(&pool->pending, memory_order_acquire) > 0;)
        if (++spins < YIELD_SPINS)
            cpu_relax();
        else
            sched_yield();
}
