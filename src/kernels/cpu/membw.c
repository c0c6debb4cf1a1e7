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

struct hr_membw_buf {
    uint64_t *buf;
    size_t n; /* uint64 words read */
};

/* the prefetch runs up to PF_AHEAD past the end: that is in the buffer */
static size_t alloc_bytes(size_t n) { return n * 8 + PF_AHEAD; }

hr_membw_buf *hr_membw_buf_new(size_t bytes) {
    size_t n = bytes / 256 * 32; /* whole groups of 4 lines */
    hr_membw_buf *b = n ? malloc(sizeof *b) : NULL;
    if (!b)
        return NULL;
    *b = (hr_membw_buf){hr_big_alloc(alloc_bytes(n)), n};
    if (!b->buf) {
        free(b);
        return NULL;
    }
    memset(b->buf, 1, alloc_bytes(n));
    return b;
}

void hr_membw_buf_free(hr_membw_buf *b) {
    if (b)
        hr_big_free(b->buf, alloc_bytes(b->n));
    free(b);
}

double hr_membw_read(hr_membw_buf *b, hr_pool *pool, int reps) {
    read_task t = {.buf = b->buf, .n = b->n, .sum = 0};
    double best = 1e30;
    for (int r = 0; r < 2 * reps; r++) {
        t.prefetch = r & 1;
        double t0 = hr_now();
        hr_pool_run(pool, read_worker, &t);
        double dt = hr_now() - t0;
        best = dt < best ? dt : best;
    }
    return (double)(b->n * 8) / best;
}

double hr_membw(hr_pool *pool, size_t bytes, int reps) {
    hr_membw_buf *b = hr_membw_buf_new(bytes);
    double bw = b ? hr_membw_read(b, pool, reps) : 0;
    hr_membw_buf_free(b);
    return bw;
}
