#include "kernels/cpu/membw.h"
#include "core/bigmem.h"
#include "core/timer.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The ceiling is the fastest plain read of the machine, not the read of
 * any of our kernels: each thread sums its contiguous share of a buffer on
 * huge pages (core/bigmem.h, as the weights are)
 * in the widest vectors the CPU has, once as is and once with a software prefetch
 * 4 KiB ahead into L2 (what the x16 kernels do), and the best pass of
 * either counts. Measured through the decode matvec instead (a bf16
 * weight matrix, as before), the ceiling was 10-15% under this one on a
 * 2-vCPU Xeon, and the Q8_0 decode read above 100% of it. */
#define PF_AHEAD 4096

typedef struct read_task {
    const uint64_t *buf;
    size_t n;      /* uint64 words, 8 per 64-byte line */
    int prefetch;
    _Atomic uint64_t sum; /* kept, so that the reads are not optimized out */
} read_task;

/* Sum of lines [lo, hi) in vectors of V bytes, 4 chains */
#define READ_LINES(NAME, V, ATTR)                                                   \
    ATTR static uint64_t NAME(const uint64_t *buf, size_t lo, size_t hi, int pf) {   \
        typedef uint64_t vec __attribute__((vector_size(V)));                       \
        enum { PER = 64 / V };                                                      \
        vec s[4] = {0};                                                             \
        for (size_t l = lo; l < hi; l += 4) {                                       \
            const vec *w = (const vec *)(buf + 8 * l);                              \
            if (pf)                                                                 \
                for (int j = 0; j < 4; j++)                                         \
                    __builtin_prefetch((const char *)w + PF_AHEAD + 64 * j, 0, 2);  \
            for (int j = 0; j < 4 * PER; j++)                                       \
                s[j % 4] += w[j];                                                   \
        }                                                                           \
        uint64_t sum = 0;                                                           \
        for (int j = 0; j < 4; j++)                                                 \
            for (int e = 0; e < V / 8; e++)                                         \
                sum += s[j][e];                                                     \
        return sum;                                                                 \
    }

READ_LINES(read16, 16, )
#if defined(__x86_64__)
READ_LINES(read32, 32, __attribute__((target("avx2"))))
READ_LINES(read64, 64, __attribute__((target("avx512f"))))
#endif

static void read_worker(void *p, int ith, int nth) {
    read_task *t = p;
    size_t quads = t->n / 32, lo = 4 * (quads * (size_t)ith / (size_t)nth),
           hi = 4 * (quads * (size_t)(ith + 1) / (size_t)nth);
    uint64_t sum;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f"))
        sum = read64(t->buf, lo, hi, t->prefetch);
    else if (__builtin_cpu_supports("avx2"))
        sum = read32(t->buf, lo, hi, t->prefetch);
    else
#endif
        sum = read16(t->buf, lo, hi, t->prefetch);
    atomic_fetch_add_explicit(&t->sum, sum, memory_order_relaxed);
}

double hr_membw(hr_pool *pool, size_t bytes, int reps) {
    size_t n = bytes / 256 * 32; /* whole groups of 4 lines */
    if (n == 0)
        return 0;
    /* the prefetch runs up to PF_AHEAD past the end: keep it in the buffer */
    uint64_t *buf = hr_big_alloc(n * 8 + PF_AHEAD);
    if (!buf)
        return 0;
    memset(buf, 1, n * 8 + PF_AHEAD);
    read_task t = {.buf = buf, .n = n, .sum = 0};
    double best = 1e30;
    for (int r = 0; r < 2 * reps; r++) {
        t.prefetch = r & 1;
        double t0 = hr_now();
        hr_pool_run(pool, read_worker, &t);
        double dt = hr_now() - t0;
        best = dt < best ? dt : best;
    }
    hr_big_free(buf, n * 8 + PF_AHEAD);
    return (double)(n * 8) / best;
}
