#include "support/fence.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void *hr_fence_copy(hr_fence *f, const void *src, size_t n) {
    if (f->n == HR_FENCE_MAX)
        return NULL;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t data = (n + page - 1) / page * page, bytes = data + page;
    char *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return NULL;
    if (mprotect(map + data, page, PROT_NONE) != 0) {
        munmap(map, bytes);
        return NULL;
    }
    f->buf[f->n].map = map;
    f->buf[f->n++].bytes = bytes;
    char *p = map + data - n;
    memcpy(p, src, n);
    return p;
}

void hr_fence_free(hr_fence *f) {
    for (int i = 0; i < f->n; i++)
        munmap(f->buf[i].map, f->buf[i].bytes);
    f->n = 0;
}
