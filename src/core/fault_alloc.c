/* HEARTH_FAULT=alloc:N: every allocation of hearth's own code goes through
 * these wrappers (the library is linked with -Wl,--wrap=malloc,...; see
 * CMakeLists.txt), which count it and fail the armed one (core/fault.h).
 * Allocations inside other libraries are not counted: jansson's own (its
 * lexer asserts when an allocation fails mid-string, load.c:442 in 2.14),
 * PCRE2's, libmicrohttpd's. Unarmed, a wrapper costs one relaxed atomic
 * load. */
#include "core/fault.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
char *__real_strndup(const char *s, size_t n);
int __real_posix_memalign(void **p, size_t align, size_t n);
void *__real_aligned_alloc(size_t align, size_t n);

void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t n);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);
int __wrap_posix_memalign(void **p, size_t align, size_t n);
void *__wrap_aligned_alloc(size_t align, size_t n);

static int fail(void) {
    if (!hr_fault_hit(HR_FAULT_ALLOC))
        return 0;
    errno = ENOMEM;
    return 1;
}

void *__wrap_malloc(size_t n) { return fail() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t n, size_t size) { return fail() ? NULL : __real_calloc(n, size); }
/* realloc(p, 0) frees: not an allocation that can fail */
void *__wrap_realloc(void *p, size_t n) { return n && fail() ? NULL : __real_realloc(p, n); }
char *__wrap_strdup(const char *s) { return fail() ? NULL : __real_strdup(s); }
char *__wrap_strndup(const char *s, size_t n) { return fail() ? NULL : __real_strndup(s, n); }
int __wrap_posix_memalign(void **p, size_t align, size_t n) {
    return fail() ? ENOMEM : __real_posix_memalign(p, align, n);
}
void *__wrap_aligned_alloc(size_t align, size_t n) {
    return fail() ? NULL : __real_aligned_alloc(align, n);
}
