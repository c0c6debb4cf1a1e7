#include "support/fence.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void *hr_fence_copy(hr_fence *f, const void *src, size_t n) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t data = (n + page - 1) / page * page;
    f->bytes = data + page;
    f->map = mmap(NULL, f->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        return NULL;
    }
    if (mprotect((char *)f->map + data, page, PROT_NONE) != 0) {
        hr_fence_free(f);
        return NULL;
    }
    char *p = (char *)f->map + data - n;
    memcpy(p, src, n);
    return p;
}

void hr_fence_free(hr_fence *f) {
    if (f->map)
        munmap(f->map, f->bytes);
    f->map = NULL;
}
