/* A bump arena: one block allocated up front, carved into 64-byte aligned
 * pieces, reset as a whole (per forward step). Allocation never calls malloc
 * after hr_arena_init. */
#ifndef HR_CORE_ARENA_H
#define HR_CORE_ARENA_H

#include <stddef.h>

typedef struct hr_arena {
    unsigned char *base;
    size_t cap;
    size_t used;
    size_t high; /* high-water mark, for sizing */
    int owned;   /* base came from hr_arena_init (freed by deinit) */
} hr_arena;

int hr_arena_init(hr_arena *a, size_t cap); /* 0 or HR_ENOMEM */
/* An arena over cap bytes at base (64-byte aligned) that it does not own
 * and never touches: only addresses are computed, so base may be device
 * memory (kernels/backend.h). */
void hr_arena_wrap(hr_arena *a, void *base, size_t cap);
void hr_arena_deinit(hr_arena *a);
/* NULL when the arena is full (the caller sized it wrong: a bug). */
void *hr_arena_alloc(hr_arena *a, size_t n);
static inline void hr_arena_reset(hr_arena *a) { a->used = 0; }

#endif
