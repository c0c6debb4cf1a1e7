/* Parse configurations: interned stacks, configuration sets, and the two
 * steps of the pushdown automaton: closure (calls and returns) and scan. */
#include "grammar/internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- interned stack nodes ---------------------------------------------------- */

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

int hr__stacks_init(hr__stacks *s) {
    memset(s, 0, sizeof *s);
    s->cap = 256;
    s->tcap = 512;
    s->nstate = malloc(s->cap * sizeof *s->nstate);
    s->nparent = malloc(s->cap * sizeof *s->nparent);
    s->ndist = malloc(s->cap * sizeof *s->ndist);
    s->tab = calloc(s->tcap, sizeof *s->tab);
    if (!s->nstate || !s->nparent || !s->ndist || !s->tab) {
        hr__stacks_deinit(s);
        return HR_ENOMEM;
    }
    hr__stacks_reset(s);
    return 0;
}

void hr__stacks_deinit(hr__stacks *s) {
    free(s->nstate);
    free(s->nparent);
    free(s->ndist);
    free(s->tab);
    memset(s, 0, sizeof *s);
}

void hr__stacks_reset(hr__stacks *s) {
    memset(s->tab, 0, s->tcap * sizeof *s->tab);
    /* nodes 0 (empty) and 1 (hole) have no content */
    s->nstate[0] = s->nstate[1] = UINT32_MAX;
    s->nparent[0] = s->nparent[1] = UINT32_MAX;
    s->ndist[0] = s->ndist[1] = 0;
    s->n = 2;
}

static int rehash(hr__stacks *s, uint32_t nc) {
    uint32_t *t = calloc(nc, sizeof *t);
    if (!t)
        return HR_ENOMEM;
    for (uint32_t i = 2; i < s->n; i++) {
        uint32_t p = (uint32_t)mix((uint64_t)s->nstate[i] << 32 | s->nparent[i]) & (nc - 1);
        while (t[p])
            p = (p + 1) & (nc - 1);
        t[p] = i;
    }
    free(s->tab);
    s->tab = t;
    s->tcap = nc;
    return 0;
}

uint32_t hr__stacks_push(hr__stacks *s, uint32_t state, uint32_t parent) {
    uint32_t m = s->tcap - 1;
    uint32_t p = (uint32_t)mix((uint64_t)state << 32 | parent) & m;
    for (;; p = (p + 1) & m) {
        uint32_t k = s->tab[p];
        if (!k)
            break;
        if (s->nstate[k] == state && s->nparent[k] == parent)
            return k;
    }
    if (s->n == s->cap) {
        uint32_t c = s->cap * 2;
        uint32_t *a = realloc(s->nstate, c * sizeof *a);
        if (!a)
            return UINT32_MAX;
        s->nstate = a;
        uint32_t *b = realloc(s->nparent, c * sizeof *b);
        if (!b)
            return UINT32_MAX;
        s->nparent = b;
        uint32_t *d = realloc(s->ndist, c * sizeof *d);
        if (!d)
            return UINT32_MAX;
        s->ndist = d;
        s->cap = c;
    }
    uint32_t id = s->n++;
    s->nstate[id] = state;
    s->nparent[id] = parent;
    s->ndist[id] = hr__dadd(s->sdist ? s->sdist[state] : 0, s->ndist[parent]);
    s->tab[p] = id;
    if (s->n * 2 > s->tcap && rehash(s, s->tcap * 2)) {
        s->n--;
        s->tab[p] = 0;
        return UINT32_MAX;
    }
    return id;
}

/* ---- configuration sets ------------------------------------------------------- */

int hr__cset_init(hr__cset *c) {
    c->cap = 1024;
    c->cur = 1;
    c->keys = malloc(c->cap * sizeof *c->keys);
    c->gen = calloc(c->cap, sizeof *c->gen);
    if (!c->keys || !c->gen) {
        hr__cset_deinit(c);
        return HR_ENOMEM;
    }
    return 0;
}

void hr__cset_deinit(hr__cset *c) {
    free(c->keys);
    free(c->gen);
    memset(c, 0, sizeof *c);
}

void hr__cset_clear(hr__cset *c) {
    if (++c->cur == 0) { /* generation wrapped */
        memset(c->gen, 0, c->cap * sizeof *c->gen);
        c->cur = 1;
    }
}

int hr__cset_add(hr__cset *c, hr__cfg x) {
    uint64_t key = (uint64_t)x.state << 32 | x.below;
    uint32_t m = c->cap - 1;
    for (uint32_t p = (uint32_t)mix(key) & m, i = 0; i < c->cap; p = (p + 1) & m, i++) {
        if (c->gen[p] != c->cur) {
            c->gen[p] = c->cur;
            c->keys[p] = key;
            return 1;
        }
        if (c->keys[p] == key)
            return 0;
    }
    return -1; /* full: the caller bounds sets below cap / 2 */
}

int hr__cbuf_reserve(hr__cbuf *b, size_t n) {
    if (b->n + n <= b->cap)
        return 0;
    size_t c = b->cap ? b->cap : 64;
    while (c < b->n + n)
        c *= 2;
    hr__cfg *v = realloc(b->v, c * sizeof *v);
    if (!v)
        return HR_ENOMEM;
    b->v = v;
    b->cap = c;
    return 0;
}

int hr__cbuf_push(hr__cbuf *b, hr__cfg c) {
    if (b->n == b->cap && hr__cbuf_reserve(b, 1))
        return HR_ENOMEM;
    b->v[b->n++] = c;
    return 0;
}

/* ---- the automaton's steps ------------------------------------------------------- */

int hr__run_init(hr__run *r, const hr_grammar *g) {
    memset(r, 0, sizeof *r);
    r->g = g;
    if (hr__stacks_init(&r->stk) || hr__cset_init(&r->seen)) {
        hr__run_deinit(r);
        return HR_ENOMEM;
    }
    r->stk.sdist = g->dist;
    /* the set bound keeps the table at most half full */
    while (r->seen.cap < 4 * HR__G_MAX_SET) {
        hr__cset_deinit(&r->seen);
        r->seen.cap = 4 * HR__G_MAX_SET;
        r->seen.cur = 1;
        r->seen.keys = malloc(r->seen.cap * sizeof *r->seen.keys);
        r->seen.gen = calloc(r->seen.cap, sizeof *r->seen.gen);
        if (!r->seen.keys || !r->seen.gen) {
            hr__run_deinit(r);
            return HR_ENOMEM;
        }
    }
    return 0;
}

void hr__run_deinit(hr__run *r) {
    hr__stacks_deinit(&r->stk);
    hr__cset_deinit(&r->seen);
    free(r->work.v);
    memset(r, 0, sizeof *r);
}

/* Add x to the worklist if new; bounded. */
static int visit(hr__run *r, hr__cfg x, size_t *added) {
    if (*added >= HR__G_MAX_SET)
        return 0; /* too ambiguous: drop (never widens the language) */
    int k = hr__cset_add(&r->seen, x);
    if (k > 0) {
        if (hr__cbuf_push(&r->work, x)) {
            r->oom = 1;
            return 0;
        }
        (*added)++;
        return 1;
    }
    return 0;
}

int hr__closure(hr__run *r, const hr__cfg *in, size_t n, hr__cbuf *out,
                int kernel) {
    const hr_grammar *g = r->g;
    int flags = 0;
    /* fast path: one configuration that only scans */
    if (n == 1 && g->st[in[0].state].plain) {
        if (hr__cbuf_push(out, in[0]))
            r->oom = 1;
        return 0;
    }
    hr__cset_clear(&r->seen);
    r->work.n = 0;
    size_t added = 0;
    for (size_t i = 0; i < n; i++)
        if (visit(r, in[i], &added) && kernel && hr__cbuf_push(out, in[i]))
            r->oom = 1;
    for (size_t w = 0; w < r->work.n; w++) {
        hr__cfg c = r->work.v[w];
        const hr__gstate *st = &g->st[c.state];
        if (!kernel && st->ne && hr__cbuf_push(out, c))
            r->oom = 1;
        for (uint32_t i = 0; i < st->nc; i++) {
            const hr__gcall *k = &g->calls[st->c0 + i];
            uint32_t below = c.below;
            if (!k->tail) {
                below = hr__stacks_push(&r->stk, k->ret, c.below);
                if (below == UINT32_MAX) {
                    r->oom = 1;
                    continue;
                }
            }
            visit(r, (hr__cfg){g->rule_start[k->rule], below}, &added);
        }
        if (st->accept) {
            if (c.below == HR__NODE_EMPTY) {
                flags |= HR__CL_END;
            } else if (c.below == HR__NODE_HOLE) {
                flags |= HR__CL_HOLE;
            } else {
                hr__cfg p = {r->stk.nstate[c.below], r->stk.nparent[c.below]};
                if (visit(r, p, &added) && kernel && hr__cbuf_push(out, p))
                    r->oom = 1;
            }
        }
    }
    return flags;
}

void hr__scan(hr__run *r, const hr__cfg *in, size_t n, uint8_t b, hr__cbuf *out) {
    const hr_grammar *g = r->g;
    if (n == 1) {
        uint32_t t = hr__gstep(g, in[0].state, b);
        if (t != UINT32_MAX && hr__cbuf_push(out, (hr__cfg){t, in[0].below}))
            r->oom = 1;
        return;
    }
    hr__cset_clear(&r->seen);
    size_t added = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t t = hr__gstep(g, in[i].state, b);
        if (t == UINT32_MAX || added >= HR__G_MAX_SET)
            continue;
        hr__cfg x = {t, in[i].below};
        if (hr__cset_add(&r->seen, x) > 0) {
            added++;
            if (hr__cbuf_push(out, x))
                r->oom = 1;
        }
    }
}
