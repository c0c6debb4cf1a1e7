#include "core/bigmem.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HUGE_PAGE ((size_t)2 << 20)

static size_t round_up(size_t n) { return (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1); }

void *hr_big_alloc(size_t bytes) {
    if (bytes == 0 || bytes > SIZE_MAX - 2 * HUGE_PAGE)
        return NULL;
    size_t len = round_up(bytes), span = len + HUGE_PAGE;
    char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    /* keep the 2 MiB-aligned len bytes inside the span, unmap the rest */
    char *a = (char *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    if (p + span > a + len)
        munmap(a + len, (size_t)(p + span - (a + len)));
#ifdef MADV_HUGEPAGE
    madvise(a, len, MADV_HUGEPAGE); /* advice: a refusal changes only speed */
#endif
    return a;
}

void hr_big_free(void *p, size_t bytes) {
    if (p)
        munmap(p, round_up(bytes));
}

struct hr_populator {
    pthread_t thread;
    _Atomic bool stop;
    int n_arrays;
    size_t n_units, step; /* units a range (about a huge page of the smallest unit) */
    void **base;
    size_t *unit;
};

static void *populate_main(void *arg) {
    hr_populator *p = arg;
#ifdef SCHED_IDLE /* only when nothing else wants the core: never slows a step */
    struct sched_param sp = {0};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
#endif
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (size_t u = 0; u < p->n_units && !atomic_load(&p->stop); u += p->step) {
        size_t n = p->n_units - u < p->step ? p->n_units - u : p->step;
        for (int i = 0; i < p->n_arrays && !atomic_load(&p->stop); i++) {
            uintptr_t a = (uintptr_t)p->base[i] + u * p->unit[i], b = a + n * p->unit[i];
            for (a &= ~(page - 1); a < b; a += page) /* a write fault; the value kept */
                __atomic_fetch_add((unsigned char *)a, 0, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

hr_populator *hr_populate_start(void *const *base, const size_t *unit, int n_arrays,
                                size_t n_units) {
    hr_populator *p = calloc(1, sizeof *p);
    if (!p || n_arrays <= 0 || n_units == 0)
        return free(p), NULL;
    p->base = malloc((size_t)n_arrays * sizeof *p->base);
    p->unit = malloc((size_t)n_arrays * sizeof *p->unit);
    if (!p->base || !p->unit)
        goto fail;
    memcpy(p->base, base, (size_t)n_arrays * sizeof *p->base);
    memcpy(p->unit, unit, (size_t)n_arrays * sizeof *p->unit);
    p->n_arrays = n_arrays;
    p->n_units = n_units;
    size_t small = unit[0];
    for (int i = 1; i < n_arrays; i++)
        small = unit[i] < small ? unit[i] : small;
    p->step = small && small < HUGE_PAGE ? HUGE_PAGE / small : 1;
    atomic_init(&p->stop, false);
    if (pthread_create(&p->thread, NULL, populate_main, p) == 0)
        return p;
fail:
    free(p->base);
    free(p->unit);
    free(p);
    return NULL;
}

void hr_populate_stop(hr_populator *p) {
    if (!p)
        return;
    atomic_store(&p->stop, true);
    pthread_join(p->thread, NULL);
    free(p->base);
    free(p->unit);
    free(p);
}

size_t hr_mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    if (kb)
        return (size_t)kb << 10;
    long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
}
