/* Minimization of the whole pushdown automaton: states that behave alike
 * (same accepting flag, byte edges to equivalent states, calls of
 * equivalent rules returning to equivalent states) are merged, across
 * rules. JSON Schema grammars repeat the same sub-automata (a string, a
 * number, a separator) in many places; merging them shrinks the grammar
 * and, above all, the number of distinct mask-cache entries.
 *
 * Moore's partition refinement: start from the accepting flag, split
 * classes by the signature of their edges until nothing changes. */
#include "grammar/internal.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
}

typedef struct sigtab {
    uint64_t *hash;
    uint32_t *state; /* representative state + 1, 0 free */
    uint32_t *cls;
    uint32_t cap;
} sigtab;

/* Signature equality of states a and b under classes cl. */
static int same(const hr_grammar *g, const uint32_t *cl, uint32_t a, uint32_t b) {
    const hr__gstate *x = &g->st[a], *y = &g->st[b];
    if (cl[a] != cl[b] || x->accept != y->accept || x->ne != y->ne || x->nc != y->nc)
        return 0;
    for (uint32_t i = 0; i < x->ne; i++) {
        const hr__gedge *e = &g->edges[x->e0 + i], *f = &g->edges[y->e0 + i];
        if (e->lo != f->lo || e->hi != f->hi || cl[e->to] != cl[f->to])
            return 0;
    }
    for (uint32_t i = 0; i < x->nc; i++) {
        const hr__gcall *c = &g->calls[x->c0 + i], *d = &g->calls[y->c0 + i];
        if (cl[g->rule_start[c->rule]] != cl[g->rule_start[d->rule]] || cl[c->ret] != cl[d->ret])
            return 0;
    }
    return 1;
}

static uint64_t sig(const hr_grammar *g, const uint32_t *cl, uint32_t s) {
    const hr__gstate *x = &g->st[s];
    uint64_t h = mix(cl[s], x->accept);
    for (uint32_t i = 0; i < x->ne; i++) {
        const hr__gedge *e = &g->edges[x->e0 + i];
        h = mix(h, (uint64_t)e->lo << 40 | (uint64_t)e->hi << 32 | cl[e->to]);
    }
    for (uint32_t i = 0; i < x->nc; i++) {
        const hr__gcall *c = &g->calls[x->c0 + i];
        h = mix(h, (uint64_t)cl[g->rule_start[c->rule]] << 32 | cl[c->ret]);
    }
    return h;
}

/* Calls of a state are sorted by rule id at build time; after merging,
 * equivalent states must list calls in the same order: sort by the
 * (start class, ret class) pair. */
static _Thread_local uint32_t *call_cls_cl;
static _Thread_local const hr_grammar *call_cls_g;
static int cmp_call(const void *a, const void *b) {
    const hr__gcall *x = a, *y = b;
    uint64_t kx = (uint64_t)call_cls_cl[call_cls_g->rule_start[x->rule]] << 32 | call_cls_cl[x->ret];
    uint64_t ky = (uint64_t)call_cls_cl[call_cls_g->rule_start[y->rule]] << 32 | call_cls_cl[y->ret];
    return kx < ky ? -1 : kx > ky;
}

int hr__grammar_minimize(hr_grammar *g) {
    uint32_t n = g->n_st;
    uint32_t *cl = malloc(n * sizeof *cl), *nc = malloc(n * sizeof *nc);
    sigtab t = {0};
    t.cap = 1;
    while (t.cap < 2 * n + 2)
        t.cap *= 2;
    t.hash = malloc(t.cap * sizeof *t.hash);
    t.state = malloc(t.cap * sizeof *t.state);
    t.cls = malloc(t.cap * sizeof *t.cls);
    int rc = HR_ENOMEM;
    if (!cl || !nc || !t.hash || !t.state || !t.cls)
        goto done;
    for (uint32_t s = 0; s < n; s++)
        cl[s] = g->st[s].accept;
    uint32_t ncls = 0, prev = 0;
    for (;;) {
        /* order calls canonically under the current classes */
        call_cls_cl = cl;
        call_cls_g = g;
        for (uint32_t s = 0; s < n; s++)
            if (g->st[s].nc > 1)
                qsort(g->calls + g->st[s].c0, g->st[s].nc, sizeof *g->calls, cmp_call);
        memset(t.state, 0, t.cap * sizeof *t.state);
        ncls = 0;
        for (uint32_t s = 0; s < n; s++) {
            uint64_t h = sig(g, cl, s);
            uint32_t p = (uint32_t)h & (t.cap - 1);
            for (;; p = (p + 1) & (t.cap - 1)) {
                if (!t.state[p]) {
                    t.state[p] = s + 1;
                    t.hash[p] = h;
                    t.cls[p] = ncls;
                    nc[s] = ncls++;
                    break;
                }
                if (t.hash[p] == h && same(g, cl, t.state[p] - 1, s)) {
                    nc[s] = t.cls[p];
                    break;
                }
            }
        }
        memcpy(cl, nc, n * sizeof *cl);
        if (ncls == prev)
            break;
        prev = ncls;
    }
    if (ncls == n) {
        rc = 0;
        goto done;
    }
    /* rebuild: one state per class (its first member's edges, remapped) */
    hr__gstate *st = calloc(ncls, sizeof *st);
    hr__gedge *ed = malloc((g->n_edges + 1) * sizeof *ed);
    hr__gcall *ca = malloc((g->n_calls + 1) * sizeof *ca);
    uint8_t *done_cls = calloc(ncls, 1);
    if (!st || !ed || !ca || !done_cls) {
        free(st);
        free(ed);
        free(ca);
        free(done_cls);
        goto done;
    }
    uint32_t ne = 0, nca = 0;
    for (uint32_t s = 0; s < n; s++) {
        uint32_t k = cl[s];
        if (done_cls[k])
            continue;
        done_cls[k] = 1;
        const hr__gstate *x = &g->st[s];
        st[k].accept = x->accept;
        st[k].e0 = ne;
        for (uint32_t i = 0; i < x->ne; i++) {
            hr__gedge e = g->edges[x->e0 + i];
            e.to = cl[e.to];
            if (st[k].ne && ed[ne - 1].to == e.to && ed[ne - 1].hi + 1u == e.lo) {
                ed[ne - 1].hi = e.hi;
                continue;
            }
            ed[ne++] = e;
            st[k].ne++;
        }
        st[k].c0 = nca;
        for (uint32_t i = 0; i < x->nc; i++) {
            hr__gcall c = g->calls[x->c0 + i];
            c.ret = cl[c.ret];
            ca[nca++] = c;
            st[k].nc++;
        }
    }
    for (uint32_t r = 0; r < g->n_rules; r++)
        if (g->rule_start[r] != UINT32_MAX)
            g->rule_start[r] = cl[g->rule_start[r]];
    g->root = cl[g->root];
    free(g->st);
    free(g->edges);
    free(g->calls);
    free(done_cls);
    g->st = st;
    g->n_st = ncls;
    g->edges = ed;
    g->n_edges = ne;
    g->calls = ca;
    g->n_calls = nca;
    rc = 0;
done:
    free(cl);
    free(nc);
    free(t.hash);
    free(t.state);
    free(t.cls);
    return rc;
}
