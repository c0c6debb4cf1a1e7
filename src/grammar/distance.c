/* Distances to the end of the text, and token masks under a token budget.
 *
 * dist[s] is the fewest bytes that take state s to the end of its rule
 * (accepting), calls included: 0 if s accepts, else the least of 1 +
 * dist[t] over byte edges s -> t and dist[start of R] + dist[ret] over calls
 * of R returning to ret. A configuration's distance adds the distances of
 * the states its stack returns to (hr__stacks keeps that sum per node), so
 * the matcher knows how many bytes its shortest completion takes.
 *
 * The equations are solved once per grammar by Knuth's generalization of
 * Dijkstra's algorithm: states are finished in increasing distance; a
 * finished state relaxes the states with an edge into it, and the callers
 * whose call (start, ret) has both ends finished. */
#include "grammar/internal.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- per-state distances ----------------------------------------------------- */

#define EDGE_TAG UINT32_MAX /* a reverse entry for a byte edge (else a call index) */

typedef struct heap {
    uint64_t *v; /* dist << 32 | state */
    size_t n;
} heap;

static void heap_push(heap *h, uint64_t x) {
    size_t i = h->n++;
    while (i && h->v[(i - 1) / 2] > x) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = x;
}

static uint64_t heap_pop(heap *h) {
    uint64_t top = h->v[0], x = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && h->v[c + 1] < h->v[c])
            c++;
        if (h->v[c] >= x)
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = x;
    return top;
}

int hr__grammar_distances(hr_grammar *g) {
    uint32_t n = g->n_st;
    size_t n_rev = 0;
    for (uint32_t s = 0; s < n; s++)
        n_rev += g->st[s].ne + 2u * g->st[s].nc;
    uint32_t *dist = malloc((n ? n : 1) * sizeof *dist);
    uint8_t *done = calloc(n ? n : 1, 1);
    uint32_t *roff = calloc((size_t)n + 1, sizeof *roff);
    uint32_t *rpred = malloc((n_rev ? n_rev : 1) * sizeof *rpred);
    uint32_t *rtag = malloc((n_rev ? n_rev : 1) * sizeof *rtag);
    heap h = {malloc((n_rev + n + 1) * sizeof *h.v), 0};
    int rc = HR_ENOMEM;
    if (!dist || !done || !roff || !rpred || !rtag || !h.v)
        goto done;
    /* reverse adjacency (CSR): entries of state x are the states whose
       distance depends on x */
    for (uint32_t s = 0; s < n; s++) {
        const hr__gstate *st = &g->st[s];
        for (uint32_t i = 0; i < st->ne; i++)
            roff[g->edges[st->e0 + i].to + 1]++;
        for (uint32_t i = 0; i < st->nc; i++) {
            const hr__gcall *c = &g->calls[st->c0 + i];
            roff[g->rule_start[c->rule] + 1]++;
            roff[c->ret + 1]++;
        }
    }
    for (uint32_t s = 0; s < n; s++)
        roff[s + 1] += roff[s];
    uint32_t *cur = malloc((n ? n : 1) * sizeof *cur);
    if (!cur)
        goto done;
    memcpy(cur, roff, n * sizeof *cur);
    for (uint32_t s = 0; s < n; s++) {
        const hr__gstate *st = &g->st[s];
        for (uint32_t i = 0; i < st->ne; i++) {
            uint32_t t = g->edges[st->e0 + i].to;
            rpred[cur[t]] = s;
            rtag[cur[t]++] = EDGE_TAG;
        }
        for (uint32_t i = 0; i < st->nc; i++) {
            const hr__gcall *c = &g->calls[st->c0 + i];
            uint32_t a = g->rule_start[c->rule];
            rpred[cur[a]] = s;
            rtag[cur[a]++] = st->c0 + i;
            rpred[cur[c->ret]] = s;
            rtag[cur[c->ret]++] = st->c0 + i;
        }
    }
    free(cur);
    for (uint32_t s = 0; s < n; s++) {
        dist[s] = g->st[s].accept ? 0 : HR__DIST_INF;
        if (!dist[s])
            heap_push(&h, s);
    }
    while (h.n) {
        uint64_t top = heap_pop(&h);
        uint32_t x = (uint32_t)top, d = (uint32_t)(top >> 32);
        if (done[x] || d != dist[x])
            continue;
        done[x] = 1;
        for (uint32_t j = roff[x]; j < roff[x + 1]; j++) {
            uint32_t p = rpred[j], cand;
            if (done[p])
                continue;
            if (rtag[j] == EDGE_TAG) {
                cand = hr__dadd(d, 1);
            } else {
                const hr__gcall *c = &g->calls[rtag[j]];
                uint32_t a = g->rule_start[c->rule];
                if (!done[a] || !done[c->ret])
                    continue; /* the other end relaxes p when it finishes */
                cand = hr__dadd(dist[a], dist[c->ret]);
            }
            if (cand < dist[p]) {
                dist[p] = cand;
                heap_push(&h, (uint64_t)cand << 32 | p);
            }
        }
    }
    free(g->dist);
    g->dist = dist;
    dist = NULL;
    rc = 0;
done:
    free(dist);
    free(done);
    free(roff);
    free(rpred);
    free(rtag);
    free(h.v);
    return rc;
}

/* ---- masks under a token budget ---------------------------------------------- */

int hr__mask_budget(hr__run *r, hr__maskrun *mr, const hr_grammar_vocab *v,
                    const hr__cfg *k, size_t n, uint32_t budget, uint32_t *allowed) {
    if (!mr->tokd && !(mr->tokd = malloc((size_t)v->n_vocab * sizeof *mr->tokd)))
        return HR_ENOMEM;
    int rc = hr__mask_walk(r, mr, v, k, n, allowed, mr->tokd);
    if (rc)
        return rc;
    size_t words = ((size_t)v->n_tok + 31) / 32;
    uint32_t lim = HR__DIST_INF;
    for (size_t w = 0; w < words; w++)
        for (uint32_t x = allowed[w]; x; x &= x - 1) {
            uint32_t d = mr->tokd[w * 32 + (size_t)__builtin_ctz(x)];
            lim = d < lim ? d : lim;
        }
    if (budget > 1 && budget - 1 > lim)
        lim = budget - 1;
    for (size_t w = 0; w < words; w++)
        for (uint32_t x = allowed[w]; x; x &= x - 1) {
            uint32_t b = (uint32_t)__builtin_ctz(x);
            if (mr->tokd[w * 32 + b] > lim)
                allowed[w] &= ~(1u << b);
        }
    return 0;
}
