/* The consistent-hash ring (ring.h). */
#include "route/ring.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct point {
    uint64_t at;
    int replica;
} point;

struct hr_ring {
    point *p; /* sorted by at */
    int n;
};

static int by_at(const void *a, const void *b) {
    const point *x = a, *y = b;
    if (x->at != y->at)
        return x->at < y->at ? -1 : 1;
    return x->replica - y->replica; /* a tie (never seen) still sorts alike */
}

hr_ring *hr_ring_new(const char *const *names, int n, int vnodes) {
    if (n < 1 || n > HR_RING_MAX || vnodes < 1)
        return NULL;
    hr_ring *r = calloc(1, sizeof *r);
    if (!r || !(r->p = calloc((size_t)n * (size_t)vnodes, sizeof *r->p))) {
        free(r);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        for (int v = 0; v < vnodes; v++)
            r->p[r->n++] = (point){XXH3_64bits_withSeed(names[i], strlen(names[i]),
                                                        (uint64_t)v),
                                   i};
    qsort(r->p, (size_t)r->n, sizeof *r->p, by_at);
    return r;
}

void hr_ring_free(hr_ring *r) {
    if (!r)
        return;
    free(r->p);
    free(r);
}

int hr_ring_pick(const hr_ring *r, uint64_t key, uint64_t eligible) {
    if (!eligible)
        return -1;
    int lo = 0, hi = r->n; /* the first point at or after key */
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (r->p[mid].at < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int k = 0; k < r->n; k++) {
        const point *p = &r->p[(lo + k) % r->n];
        if (eligible >> p->replica & 1)
            return p->replica;
    }
    return -1;
}
