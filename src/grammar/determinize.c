/* Subset construction: the DFA of a rule's NFA, over byte ranges and
 * calls of other rules. */
#include "grammar/nfa.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_set(const uint32_t *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Epsilon closure of buf[0..nbuf) in place (sorted, deduplicated). */
static void eclose(hr__dfa *d, const hr__nfa *a) {
    d->stamp++;
    size_t sp = 0, n = 0;
    for (size_t i = 0; i < d->nbuf; i++)
        if (d->mark[d->buf[i]] != d->stamp) {
            d->mark[d->buf[i]] = d->stamp;
            d->stack[sp++] = d->buf[i];
        }
    while (sp) {
        uint32_t s = d->stack[--sp];
        d->buf[n++] = s;
        for (uint32_t e = a->head[s]; e; e = a->e[e - 1].next) {
            const hr__nedge *x = &a->e[e - 1];
            if (x->kind == HR__NE_EPS && d->mark[x->to] != d->stamp) {
                d->mark[x->to] = d->stamp;
                d->stack[sp++] = x->to;
            }
        }
    }
    d->nbuf = n;
    qsort(d->buf, n, sizeof *d->buf, cmp_u32);
}

/* Intern buf as a DFA state; returns the global state index, or UINT32_MAX
 * on failure (d->g->... limits / memory). *fresh = 1 if new. */
static uint32_t intern(hr__dfa *d, int *fresh, int *err) {
    *fresh = 0;
    uint64_t h = hash_set(d->buf, d->nbuf);
    uint32_t m = d->tcap - 1;
    for (uint32_t i = (uint32_t)h & m;; i = (i + 1) & m) {
        uint32_t k = d->tab[i];
        if (!k) {
            if (!(d->nsets & 1023) && d->nsets && hr__gbudget_over()) {
                *err = HR_ERANGE; /* the compile budget */
                return UINT32_MAX;
            }
            if (d->base + d->nsets >= HR__G_MAX_STATES) {
                *err = HR_ERANGE;
                return UINT32_MAX;
            }
            if (d->nsets + 1 >= d->cap_sets) {
                uint32_t c = d->cap_sets ? d->cap_sets * 2 : 64;
                size_t *o = realloc(d->off, (c + 1) * sizeof *o);
                if (!o) {
                    *err = HR_ENOMEM;
                    return UINT32_MAX;
                }
                d->off = o;
                d->cap_sets = c;
            }
            if (d->npool + d->nbuf > d->cap_pool) {
                size_t c = d->cap_pool ? d->cap_pool : 1024;
                while (c < d->npool + d->nbuf)
                    c *= 2;
                uint32_t *p = realloc(d->pool, c * sizeof *p);
                if (!p) {
                    *err = HR_ENOMEM;
                    return UINT32_MAX;
                }
                d->pool = p;
                d->cap_pool = c;
            }
            memcpy(d->pool + d->npool, d->buf, d->nbuf * sizeof *d->buf);
            d->off[d->nsets] = d->npool;
            d->npool += d->nbuf;
            d->off[d->nsets + 1] = d->npool;
            d->tab[i] = ++d->nsets;
            *fresh = 1;
            if (d->nsets * 2 > d->tcap) { /* rehash */
                uint32_t nc = d->tcap * 2, *t = calloc(nc, sizeof *t);
                if (!t) {
                    *err = HR_ENOMEM;
                    return UINT32_MAX;
                }
                for (uint32_t j = 0; j < d->nsets; j++) {
                    uint64_t hh = hash_set(d->pool + d->off[j], d->off[j + 1] - d->off[j]);
                    uint32_t p = (uint32_t)hh & (nc - 1);
                    while (t[p])
                        p = (p + 1) & (nc - 1);
                    t[p] = j + 1;
                }
                free(d->tab);
                d->tab = t;
                d->tcap = nc;
            }
            return d->base + d->nsets - 1;
        }
        size_t o = d->off[k - 1], n = d->off[k] - o;
        if (n == d->nbuf && !memcmp(d->pool + o, d->buf, n * sizeof *d->buf))
            return d->base + k - 1;
    }
}

static int grow_arr(void **p, uint32_t *cap, uint32_t need, size_t el) {
    if (need <= *cap)
        return 0;
    uint32_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * el);
    if (!q)
        return HR_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

/* Determinize the rule whose NFA is a (start 0, accept acc). Appends its
 * states to d->g; returns the start state's global index via *start. */
int hr__determinize(hr__dfa *d, const hr__nfa *a, uint32_t acc, uint32_t *start) {
    hr_grammar *g = d->g;
    int rc = 0, fresh;
    d->base = g->n_st;
    d->nsets = 0;
    d->npool = 0;
    if (!d->tab || d->tcap < 64) {
        free(d->tab);
        d->tcap = 64;
        d->tab = calloc(d->tcap, sizeof *d->tab);
        if (!d->tab)
            return HR_ENOMEM;
    } else {
        memset(d->tab, 0, d->tcap * sizeof *d->tab);
    }
    free(d->stack);
    free(d->mark);
    free(d->buf);
    d->stack = malloc((a->n + 1) * sizeof *d->stack);
    d->mark = calloc(a->n + 1, sizeof *d->mark);
    d->buf = malloc((a->n + 1) * sizeof *d->buf);
    d->stamp = 0;
    uint32_t *bnd = NULL, *tos = NULL;
    size_t cap_tmp = 0;
    if (!d->stack || !d->mark || !d->buf)
        return HR_ENOMEM;
    d->buf[0] = 0;
    d->nbuf = 1;
    eclose(d, a);
    *start = intern(d, &fresh, &rc);
    if (rc)
        return rc;
    for (uint32_t k = 0; k < d->nsets && !rc; k++) {
        uint32_t gi = d->base + k;
        if ((rc = grow_arr((void **)&g->st, &d->cap_st, gi + 1, sizeof *g->st)))
            break;
        g->n_st = gi + 1;
        hr__gstate *st = &g->st[gi];
        memset(st, 0, sizeof *st);
        st->e0 = g->n_edges;
        st->c0 = g->n_calls;
        /* gather the set's outgoing byte and call edges */
        size_t o = d->off[k], n = d->off[k + 1] - o, ne = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t s = d->pool[o + i];
            if (s == acc)
                st->accept = 1;
            for (uint32_t e = a->head[s]; e; e = a->e[e - 1].next)
                if (a->e[e - 1].kind != HR__NE_EPS)
                    ne++;
        }
        if (ne * 2 + 2 > cap_tmp) {
            cap_tmp = ne * 2 + 2;
            uint32_t *b2 = realloc(bnd, cap_tmp * sizeof *b2), *t2;
            if (!b2) {
                rc = HR_ENOMEM;
                break;
            }
            bnd = b2;
            if (!(t2 = realloc(tos, cap_tmp * sizeof *t2))) {
                rc = HR_ENOMEM;
                break;
            }
            tos = t2;
        }
        /* byte partition: boundaries lo and hi+1 of every byte edge */
        size_t nb = 0;
        for (size_t i = 0; i < n; i++)
            for (uint32_t e = a->head[d->pool[o + i]]; e; e = a->e[e - 1].next)
                if (a->e[e - 1].kind == HR__NE_BYTE) {
                    bnd[nb++] = a->e[e - 1].lo;
                    bnd[nb++] = (uint32_t)a->e[e - 1].hi + 1;
                }
        qsort(bnd, nb, sizeof *bnd, cmp_u32);
        size_t nu = 0;
        for (size_t i = 0; i < nb; i++)
            if (!nu || bnd[nu - 1] != bnd[i])
                bnd[nu++] = bnd[i];
        for (size_t j = 0; j + 1 < nu && !rc; j++) {
            uint32_t lo = bnd[j], hi = bnd[j + 1] - 1;
            d->nbuf = 0;
            for (size_t i = 0; i < n; i++)
                for (uint32_t e = a->head[d->pool[o + i]]; e; e = a->e[e - 1].next) {
                    const hr__nedge *x = &a->e[e - 1];
                    if (x->kind == HR__NE_BYTE && x->lo <= lo && x->hi >= hi)
                        d->buf[d->nbuf++] = x->to;
                }
            if (!d->nbuf)
                continue;
            eclose(d, a);
            uint32_t to = intern(d, &fresh, &rc);
            if (rc)
                break;
            st = &g->st[gi];
            if (st->ne && g->edges[g->n_edges - 1].to == to &&
                g->edges[g->n_edges - 1].hi + 1u == lo) {
                g->edges[g->n_edges - 1].hi = (uint8_t)hi;
                continue;
            }
            if ((rc = grow_arr((void **)&g->edges, &d->cap_e, g->n_edges + 1, sizeof *g->edges)))
                break;
            g->edges[g->n_edges++] = (hr__gedge){(uint8_t)lo, (uint8_t)hi, to};
            st->ne++;
        }
        /* calls, grouped by rule */
        size_t nr = 0;
        for (size_t i = 0; i < n; i++)
            for (uint32_t e = a->head[d->pool[o + i]]; e; e = a->e[e - 1].next)
                if (a->e[e - 1].kind == HR__NE_CALL)
                    tos[nr++] = a->e[e - 1].rule;
        qsort(tos, nr, sizeof *tos, cmp_u32);
        for (size_t j = 0; j < nr && !rc; j++) {
            if (j && tos[j] == tos[j - 1])
                continue;
            d->nbuf = 0;
            for (size_t i = 0; i < n; i++)
                for (uint32_t e = a->head[d->pool[o + i]]; e; e = a->e[e - 1].next)
                    if (a->e[e - 1].kind == HR__NE_CALL && a->e[e - 1].rule == tos[j])
                        d->buf[d->nbuf++] = a->e[e - 1].to;
            eclose(d, a);
            uint32_t to = intern(d, &fresh, &rc);
            if (rc)
                break;
            if ((rc = grow_arr((void **)&g->calls, &d->cap_c, g->n_calls + 1, sizeof *g->calls)))
                break;
            g->calls[g->n_calls++] = (hr__gcall){tos[j], to, 0};
            g->st[gi].nc++;
        }
    }
    free(bnd);
    free(tos);
    return rc;
}

void hr__dfa_free(hr__dfa *d) {
    free(d->pool);
    free(d->off);
    free(d->tab);
    free(d->stack);
    free(d->mark);
    free(d->buf);
}
