/* Buffers that end flush against an unmapped page: a kernel that reads
 * one byte past its input faults at once, in every build. The kernel tests
 * hand the SIMD bodies their records and queries through one, because the
 * largest of those files are compiled without ASan's checks in the
 * sanitizer builds (CMakeLists.txt), and a static array's slack hides an
 * over-read from ASan anyway. */
#ifndef HR_TESTS_FENCE_H
#define HR_TESTS_FENCE_H

#include <stddef.h>

typedef struct {
    void *map;    /* the whole mapping (NULL: none) */
    size_t bytes; /* its length */
} hr_fence;

/* A copy of n bytes of src (n > 0) whose last byte is the last before a
 * PROT_NONE page; NULL when the mapping fails. The copy stays readable and
 * writable until hr_fence_free. */
void *hr_fence_copy(hr_fence *f, const void *src, size_t n);
/* Unmaps f's buffer; f may hold none. */
void hr_fence_free(hr_fence *f);

#endif
