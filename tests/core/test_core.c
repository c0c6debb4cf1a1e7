/* src/core: errors, arena, thread pool, files. */
#include "core/arena.h"
#include "core/bigmem.h"
#include <stdbool.h>
#include <sys/mman.h>
#include "core/error.h"
#include "core/file.h"
#include "core/pool.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void test_error_table(void **state) {
    (void)state;
    assert_string_equal(hr_strerror(HR_EOK), "success");
    assert_string_equal(hr_strerror(HR_EUNSUPPORTED), "not supported yet");
    assert_string_equal(hr_strerror(12345), "unknown error");
    hr_error e;
    assert_int_equal(hr_err(&e, HR_EFORMAT, "x=%d", 7), HR_EFORMAT);
    assert_int_equal(e.code, HR_EFORMAT);
    assert_string_equal(e.msg, "x=7");
    hr_err_wrap(&e, "file %s", "a.bin");
    assert_string_equal(e.msg, "file a.bin: x=7");
    assert_int_equal(hr_err(NULL, HR_EIO, "ignored"), HR_EIO);
}

static void test_arena(void **state) {
    (void)state;
    hr_arena a;
    assert_int_equal(hr_arena_init(&a, 256), 0);
    void *p = hr_arena_alloc(&a, 10), *q = hr_arena_alloc(&a, 64);
    assert_non_null(p);
    assert_non_null(q);
    assert_int_equal((uintptr_t)p % 64, 0);
    assert_int_equal((char *)q - (char *)p, 64);
    assert_null(hr_arena_alloc(&a, 200)); /* full */
    hr_arena_reset(&a);
    assert_ptr_equal(hr_arena_alloc(&a, 200), p);
    hr_arena_deinit(&a);
    hr_arena_deinit(NULL);
}

typedef struct sum_ctx {
    long n;
    _Atomic long total;
    _Atomic int calls;
} sum_ctx;

static void sum_task(void *p, int ith, int nth) {
    sum_ctx *c = p;
    long lo, hi, s = 0;
    hr_split(c->n, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++)
        s += i;
    atomic_fetch_add(&c->total, s);
    atomic_fetch_add(&c->calls, 1);
}

static void test_pool(void **state) {
    (void)state;
    for (int nth = 1; nth <= 4; nth++) {
        hr_pool *pool = hr_pool_new(nth);
        assert_non_null(pool);
        assert_int_equal(hr_pool_size(pool), nth);
        for (int rep = 0; rep < 200; rep++) {
            sum_ctx c = {.n = 1000 + rep};
            hr_pool_run(pool, sum_task, &c);
            assert_int_equal(c.total, c.n * (c.n - 1) / 2);
            assert_int_equal(c.calls, nth);
            if (rep == 100)
                usleep(20000); /* let workers fall asleep, then wake them */
        }
        hr_pool_free(pool);
    }
    hr_pool_free(NULL);
    sum_ctx c = {.n = 10};
    hr_pool_run(NULL, sum_task, &c);
    assert_int_equal(c.total, 45);
}

/* A narrowed pool runs its jobs on its first n threads (each job's nth is
 * n, its threads 0..n-1), widened again on all of them, asleep workers and
 * late ones included; the width given back is the one before. */
typedef struct width_ctx {
    _Atomic int calls, seen[8], bad;
    int want;
} width_ctx;

static void width_task(void *p, int ith, int nth) {
    width_ctx *c = p;
    if (nth != c->want || ith >= nth)
        atomic_store(&c->bad, 1);
    atomic_fetch_add(&c->seen[ith], 1);
    atomic_fetch_add(&c->calls, 1);
}

static void test_pool_narrow(void **state) {
    (void)state;
    hr_pool *pool = hr_pool_new(4);
    assert_non_null(pool);
    int widths[] = {4, 1, 3, 4, 2, 2, 4, 1, 4};
    for (size_t k = 0; k < sizeof widths / sizeof *widths; k++) {
        int w = widths[k], before = hr_pool_size(pool);
        assert_int_equal(hr_pool_narrow(pool, w), before);
        assert_int_equal(hr_pool_size(pool), w);
        for (int rep = 0; rep < 300; rep++) {
            width_ctx c = {.want = w};
            hr_pool_run(pool, width_task, &c);
            assert_int_equal(c.bad, 0);
            assert_int_equal(c.calls, w);
            for (int i = 0; i < 8; i++)
                assert_int_equal(c.seen[i], i < w);
            if (rep == 150)
                usleep(20000); /* workers asleep, then woken */
        }
    }
    assert_int_equal(hr_pool_narrow(pool, 99), 4); /* clamped to 1..nth */
    assert_int_equal(hr_pool_narrow(pool, 0), 4);
    assert_int_equal(hr_pool_size(pool), 1);
    hr_pool_free(pool); /* narrowed: its sleeping workers end too */
    assert_int_equal(hr_pool_narrow(NULL, 3), 1);
}

/* Jobs armed with prefetches (hr_pool_prefetch_next) run and return as
 * before, whether the ranges are long (the threads are still prefetching
 * when the next job comes), empty, fewer than the threads or more. */
static void test_pool_prefetch(void **state) {
    (void)state;
    size_t bytes = 16 << 20;
    char *buf = malloc(bytes);
    assert_non_null(buf);
    for (int nth = 1; nth <= 4; nth++) {
        hr_pool *pool = hr_pool_new(nth);
        assert_non_null(pool);
        hr_pool_range r[8];
        for (int i = 0; i < 8; i++)
            r[i] = (hr_pool_range){buf + (size_t)i * (bytes / 8), bytes / 8};
        for (int rep = 0; rep < 300; rep++) {
            int count = rep % 3 == 0 ? 8 : rep % 3 == 1 ? 1 : 0;
            hr_pool_prefetch_next(pool, r, count);
            sum_ctx c = {.n = 1000 + rep};
            hr_pool_run(pool, sum_task, &c);
            assert_int_equal(c.total, c.n * (c.n - 1) / 2);
            assert_int_equal(c.calls, nth);
        }
        hr_pool_prefetch_next(pool, r, 8); /* armed, never run */
        hr_pool_free(pool);
    }
    hr_pool_prefetch_next(NULL, NULL, 0);
    free(buf);
}

/* A part whose thread has not started it when the caller is done with part
 * 0 is the caller's to run (src/core/pool.h). With the pool's threads all on
 * one core, a worker runs only when the caller loses that core, so the
 * caller runs most parts itself instead of waiting for its workers to be
 * scheduled; every part still runs once a job, whoever runs it. */
typedef struct late_ctx {
    pthread_t caller;
    _Atomic int calls, by_caller, seen[4];
} late_ctx;

static void late_task(void *p, int ith, int nth) {
    late_ctx *c = p;
    atomic_fetch_add(&c->seen[ith], 1);
    atomic_fetch_add(&c->calls, 1);
    if (ith > 0 && pthread_equal(pthread_self(), c->caller))
        atomic_fetch_add(&c->by_caller, 1);
}

static void test_pool_late_parts(void **state) {
    (void)state;
    cpu_set_t was, one;
    int cpu = -1;
    if (sched_getaffinity(0, sizeof was, &was) == 0)
        for (int i = 0; i < CPU_SETSIZE && cpu < 0; i++)
            if (CPU_ISSET(i, &was))
                cpu = i;
    CPU_ZERO(&one);
    if (cpu >= 0)
        CPU_SET(cpu, &one);
    if (cpu < 0 || sched_setaffinity(0, sizeof one, &one) != 0) {
        printf("pool late parts: skipped, this thread's CPU affinity cannot be set\n");
        return;
    }
    hr_pool *pool = hr_pool_new(4); /* its workers inherit the one core */
    assert_non_null(pool);
    int jobs = 2000, by_caller = 0;
    for (int rep = 0; rep < jobs; rep++) {
        late_ctx c = {.caller = pthread_self()};
        hr_pool_run(pool, late_task, &c);
        assert_int_equal(c.calls, 4);
        for (int i = 0; i < 4; i++)
            assert_int_equal(c.seen[i], 1);
        by_caller += c.by_caller;
    }
    hr_pool_free(pool);
    assert_int_equal(sched_setaffinity(0, sizeof was, &was), 0);
    printf("pool late parts: the caller ran %d of %d workers' parts\n", by_caller, 3 * jobs);
    assert_true(by_caller > 3 * jobs / 2);
}

static void test_split(void **state) {
    (void)state;
    long lo, hi, prev = 0;
    for (int i = 0; i < 3; i++) {
        hr_split(10, i, 3, &lo, &hi);
        assert_int_equal(lo, prev);
        prev = hi;
    }
    assert_int_equal(prev, 10);
}

static void test_files(void **state) {
    (void)state;
    char path[] = "/tmp/hearth_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    hr_error e;
    assert_int_equal(hr_file_write_atomic(path, "hello", 5, &e), 0);
    char *buf;
    size_t n;
    assert_int_equal(hr_file_read(path, &buf, &n, &e), 0);
    assert_int_equal(n, 5);
    assert_string_equal(buf, "hello");
    free(buf);
    hr_mmap m;
    assert_int_equal(hr_mmap_open(&m, path, &e), 0);
    assert_int_equal(m.size, 5);
    assert_memory_equal(m.data, "hello", 5);
    hr_mmap_close(&m);
    unlink(path);
    assert_int_equal(hr_file_read(path, &buf, &n, &e), HR_EIO);
    assert_non_null(strstr(e.msg, path));
    assert_int_equal(hr_mmap_open(&m, "/nonexistent/x", &e), HR_EIO);
}

/* hr_big_alloc: 2 MiB-aligned, zeroed, writable to its last byte, for
 * sizes that are and are not whole huge pages; 0 and absurd sizes are
 * NULL, as is freeing NULL a no-op */
static void test_bigmem(void **state) {
    (void)state;
    static const size_t sizes[] = {1, 4096, (size_t)2 << 20, ((size_t)5 << 20) + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = hr_big_alloc(sizes[i]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % ((size_t)2 << 20), 0);
        assert_int_equal(p[0] | p[sizes[i] / 2] | p[sizes[i] - 1], 0);
        memset(p, 0xa5, sizes[i]);
        assert_int_equal(p[sizes[i] - 1], 0xa5);
        hr_big_free(p, sizes[i]);
    }
    assert_null(hr_big_alloc(0));
    assert_null(hr_big_alloc(SIZE_MAX - 4096));
    hr_big_free(NULL, 123);
}

/* A populator makes pages resident without changing a byte (the owner's
 * writes before and during it stay), over interleaved arrays of different
 * units, and stops when asked, done or not. */
static void test_populate(void **state) {
    (void)state;
    enum { UNITS = 300 };
    size_t unit[3] = {4096 * 3, 1000, 65536}, bytes[3];
    void *base[3];
    for (int i = 0; i < 3; i++) {
        bytes[i] = unit[i] * UNITS;
        base[i] = hr_big_alloc(bytes[i]);
        assert_non_null(base[i]);
        memset((char *)base[i] + 5 * unit[i], 0x5a, unit[i]); /* the owner's */
    }
    hr_populator *p = hr_populate_start(base, unit, 3, UNITS);
    assert_non_null(p);
    ((char *)base[2])[bytes[2] - 1] = 7; /* written while it runs */
    long page = sysconf(_SC_PAGESIZE);
    bool resident = false;
    for (int t = 0; t < 2000 && !resident; t++) { /* all pages, by mincore */
        resident = true;
        for (int i = 0; i < 3 && resident; i++) {
            size_t np = (bytes[i] + (size_t)page - 1) / (size_t)page;
            unsigned char *vec = malloc(np);
            assert_int_equal(mincore(base[i], bytes[i], vec), 0);
            for (size_t k = 0; k < np; k++)
                resident = resident && (vec[k] & 1);
            free(vec);
        }
        if (!resident)
            usleep(1000);
    }
    hr_populate_stop(p);
    assert_true(resident);
    for (int i = 0; i < 3; i++) {
        const unsigned char *c = base[i];
        for (size_t k = 0; k < bytes[i]; k++) {
            unsigned char want = k / unit[i] == 5 ? 0x5a : 0;
            if (i == 2 && k == bytes[i] - 1)
                want = 7;
            if (c[k] != want)
                fail_msg("array %d byte %zu: %d, not %d", i, k, c[k], want);
        }
        hr_big_free(base[i], bytes[i]);
    }
    /* stopped at once: joins, leaks nothing (ASan) */
    void *big = hr_big_alloc((size_t)256 << 20);
    size_t u = (size_t)1 << 20;
    hr_populate_stop(hr_populate_start(&big, &u, 1, 256));
    hr_big_free(big, (size_t)256 << 20);
    hr_populate_stop(NULL);
    assert_null(hr_populate_start(base, unit, 0, UNITS));
    /* what the system has available: more than nothing, less than it has */
    size_t avail = hr_mem_available();
    assert_true(avail > 0);
    assert_true(avail <= (size_t)sysconf(_SC_PHYS_PAGES) * (size_t)page);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_table), cmocka_unit_test(test_arena),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_pool_narrow),
        cmocka_unit_test(test_pool_late_parts),        cmocka_unit_test(test_pool_prefetch),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_files),       cmocka_unit_test(test_bigmem),
        cmocka_unit_test(test_populate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
