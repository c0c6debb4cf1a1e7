#include "core/pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SPIN_ITERS 20000
#define YIELD_SPINS 2000

/* the last job whose part ith was taken: a line of its own, so that the
 * workers' takes at a job's start do not contend */
typedef struct taken_line {
    _Alignas(64) _Atomic unsigned g;
} taken_line;

struct hr_pool {
    int nth;
    /* hr_pool_narrow: the threads that run jobs (the others sleep on it
     * until it includes them again, then wait for the job after resume) */
    _Atomic int width;
    _Atomic unsigned resume;
    pthread_t *threads;
    hr_task_fn fn;
    void *ctx;
    _Atomic unsigned gen;     /* bumped once per job; futex word */
    _Atomic int pending;      /* workers still running the current job */
    _Atomic int stop;
    _Atomic int sleeping;     /* workers in futex_wait: wake only if any */
    taken_line *taken;        /* [ith] */
    void *scratch;            /* hr_pool_scratch: grows, never shrinks */
    size_t scratch_cap;
    /* hr_pool_prefetch_next: each job's ranges in pf[parity of its gen]
     * [ith], the next job's written (armed) while the threads may still
     * read the current job's, never the same */
    hr_pool_range *pf[2];
    bool armed;
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

/* Prefetch r into L2, 16 lines between looks at whether the wait goes on
 * (waiting(pool, arg)). */
#define PF_STEP 1024
static void prefetch_while(const hr_pool_range *r, bool (*waiting)(const hr_pool *, unsigned),
                           const hr_pool *pool, unsigned arg) {
    const char *p = r->p;
    for (size_t o = 0; o < r->n && waiting(pool, arg); o += PF_STEP)
        for (size_t l = o; l < o + PF_STEP && l < r->n; l += 64)
            __builtin_prefetch(p + l, 0, 2);
}

/* Part i of job g: true for the one thread that takes it, its own or the
 * caller (done with part 0 before that thread started it); false once it
 * was taken, or for a worker that woke late for a job gone by (a later
 * job's part taken already). */
static bool take_part(hr_pool *pool, int i, unsigned g) {
    _Atomic unsigned *t = &pool->taken[i].g;
    unsigned v = atomic_load_explicit(t, memory_order_relaxed);
    while ((int)(g - v) > 0)
        if (atomic_compare_exchange_weak_explicit(t, &v, g, memory_order_acquire,
                                                  memory_order_relaxed))
            return true;
    return false;
}

/* a worker waits for the job after gen `seen`, the caller for its workers */
static bool no_new_job(const hr_pool *pool, unsigned seen) {
    return atomic_load_explicit(&pool->gen, memory_order_relaxed) == seen;
}
static bool workers_busy(const hr_pool *pool, unsigned unused) {
    (void)unused;
    return atomic_load_explicit(&pool->pending, memory_order_relaxed) > 0;
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
        int w;
        if (ith >= (w = atomic_load(&pool->width))) { /* left out: asleep till let in */
            do
                futex_wait((_Atomic unsigned *)&pool->width, (unsigned)w);
            while (ith >= (w = atomic_load(&pool->width)) && !atomic_load(&pool->stop));
            seen = atomic_load(&pool->resume);
            continue;
        }
        if (!take_part(pool, ith, g)) /* the caller ran it */
            continue;
        pool->fn(pool->ctx, ith, w);
        hr_pool_range r = pool->pf[g & 1][ith];
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_release);
        prefetch_while(&r, no_new_job, pool, g);
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
    atomic_init(&pool->width, n_threads);
    pool->threads = calloc((size_t)n_threads, sizeof *pool->threads);
    pool->pf[0] = calloc((size_t)n_threads * 2, sizeof *pool->pf[0]);
    if (posix_memalign((void **)&pool->taken, 64, (size_t)n_threads * sizeof *pool->taken) == 0)
        memset(pool->taken, 0, (size_t)n_threads * sizeof *pool->taken);
    else
        pool->taken = NULL;
    if (!pool->threads || !pool->pf[0] || !pool->taken) {
        free(pool->threads);
        free(pool->pf[0]);
        free(pool->taken);
        free(pool);
        return NULL;
    }
    pool->pf[1] = pool->pf[0] + n_threads;
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
    futex_wake_all((_Atomic unsigned *)&pool->width);
    for (int i = 1; i < pool->nth; i++)
        pthread_join(pool->threads[i], NULL);
    free(pool->threads);
    free(pool->pf[0]);
    free(pool->taken);
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

int hr_pool_size(const hr_pool *pool) { return pool ? atomic_load(&pool->width) : 1; }

int hr_pool_narrow(hr_pool *pool, int n) {
    if (!pool)
        return 1;
    int was = atomic_load(&pool->width);
    n = n < 1 ? 1 : n > pool->nth ? pool->nth : n;
    if (n > was) { /* (no job runs: the caller's) those let in take the jobs after this one */
        unsigned g = atomic_load(&pool->gen);
        atomic_store(&pool->resume, g);
        /* their parts' last takes, left behind while they were out, move up
         * to now: take_part compares within 2^31 jobs */
        for (int i = was; i < n; i++)
            atomic_store(&pool->taken[i].g, g);
    }
    atomic_store(&pool->width, n);
    if (n > was)
        futex_wake_all((_Atomic unsigned *)&pool->width);
    return was;
}

void hr_pool_prefetch_next(hr_pool *pool, const hr_pool_range *ranges, int count) {
    if (!pool || pool->nth == 1)
        return;
    /* the next job's parity: only the caller moves gen */
    unsigned g = atomic_load_explicit(&pool->gen, memory_order_relaxed) + 1;
    hr_pool_range *pf = pool->pf[g & 1];
    count = count < pool->nth ? count : pool->nth;
    memcpy(pf, ranges, (size_t)count * sizeof *ranges);
    memset(pf + count, 0, (size_t)(pool->nth - count) * sizeof *ranges);
    pool->armed = true;
}

void hr_pool_run(hr_pool *pool, hr_task_fn fn, void *ctx) {
    int w = pool ? atomic_load(&pool->width) : 1;
    if (w == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->ctx = ctx;
    /* this job's prefetches (none unless armed): the workers of the job
     * before may still read the other parity's, never these */
    unsigned g = atomic_load_explicit(&pool->gen, memory_order_relaxed) + 1;
    hr_pool_range *pf = pool->pf[g & 1];
    if (!pool->armed)
        memset(pf, 0, (size_t)pool->nth * sizeof *pf);
    pool->armed = false;
    atomic_store_explicit(&pool->pending, w - 1, memory_order_relaxed);
    atomic_fetch_add(&pool->gen, 1);
    if (atomic_load(&pool->sleeping) > 0)
        futex_wake_all(&pool->gen);
    fn(ctx, 0, w);
    /* a part whose thread has not started it yet (asleep, or its core taken
     * by another process on a shared machine) is the caller's to run: the
     * job does not wait for that thread to be scheduled */
    for (int i = 1; i < w; i++)
        if (take_part(pool, i, g)) {
            fn(ctx, i, w);
            atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_release);
        }
    prefetch_while(&pf[0], workers_busy, pool, 0);
    /* a worker still busy after a short spin has usually been preempted (the
     * cores are shared): yield, so that it can have this core back */
    for (int spins = 0; atomic_load_explicit(&pool->pending, memory_order_acquire) > 0;)
        if (++spins < YIELD_SPINS)
            cpu_relax();
        else
            sched_yield();
}
