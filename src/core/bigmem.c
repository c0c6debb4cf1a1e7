#include "core/bigmem.h"

#include <stdint.h>
#include <sys/mman.h>

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
