#include "core/arena.h"
#include "hearth.h"

#include <stdlib.h>

int hr_arena_init(hr_arena *a, size_t cap) {
    a->cap = (cap + 63) & ~(size_t)63;
    a->used = a->high = 0;
    a->base = a->cap ? aligned_alloc(64, a->cap) : NULL;
    a->owned = 1;
    return (a->cap && !a->base) ? HR_ENOMEM : 0;
}

void hr_arena_wrap(hr_arena *a, void *base, size_t cap) {
    a->base = base;
    a->cap = cap & ~(size_t)63;
    a->used = a->high = 0;
    a->owned = 0;
}

void hr_arena_deinit(hr_arena *a) {
    if (!a)
        return;
    if (a->owned)
        free(a->base);
    a->base = NULL;
    a->cap = a->used = 0;
}

void *hr_arena_alloc(hr_arena *a, size_t n) {
    size_t sz = (n + 63) & ~(size_t)63;
    if (sz > a->cap - a->used)
        return NULL;
    void *p = a->base + a->used;
    a->used += sz;
    if (a->used > a->high)
        a->high = a->used;
    return p;
}
