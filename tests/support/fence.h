/* Buffers that end flush against an unmapped page: a kernel that reads
 * one byte past its input faults at once, in every build. The kernel tests
 * hand the SIMD bodies their records and queries through them, because the
 * largest of those files are compiled without ASan's checks in the
 * sanitizer builds (CMakeLists.txt), and a static array's slack hides an
 * over-read from ASan anyway. */
#ifndef HR_TESTS_FENCE_H
#define HR_TESTS_FENCE_H

#include <stddef.h>

#define HR_FENCE_MAX 8

/* A set of fenced buffers, freed together; zero-initialize it. */
typedef struct {
    struct {
        void *map;    /* the whole mapping */
        size_t bytes; /* its length */
    } buf[HR_FENCE_MAX];
    int n;
} hr_fence;

/* A copy of n bytes of src (n > 0), added to f, whose last byte is the
 * last before a PROT_NONE page; NULL when the mapping fails or f holds
 * HR_FENCE_MAX already. The copy stays readable and writable until
 * hr_fence_free. */
void *hr_fence_copy(hr_fence *f, const void *src, size_t n);
/* Unmaps every buffer of f and empties it. */
void hr_fence_free(hr_fence *f);

#endif
