/* Token masks.
 *
 * A matcher's state is a set of kernel configurations (a DFA state and the
 * stack below it). For a kernel state s, most tokens are decided by s
 * alone: walk the vocabulary trie from (s, hole), where the hole stands for
 * the unknown stack below. A token consumed without returning into the hole
 * is accepted whatever the context; a token that dies is rejected whatever
 * the context; where a path returns into the hole with bytes left, that
 * trie node's children are "uncertain". So each state gets a cache entry
 * (accepted tokens + uncertain trie nodes), computed once per grammar and
 * vocabulary, and a mask is the union over the kernel of the entries'
 * accepted sets plus a walk of the uncertain subtrees with the real stack.
 * Returns into the hole before any byte need no walk: the matcher's kernel
 * already holds the configurations those returns reach. */
#include "grammar/internal.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct centry {
    uint32_t *bits;  /* accepted tokens as a bitmap (n_tok bits), or NULL */
    int32_t *list;   /* ... or as a list */
    uint32_t n_list;
    uint32_t *unc;   /* uncertain trie nodes: walk their children */
    uint32_t n_unc;
} centry;

struct hr__gcache {
    uint64_t serial;
    centry **e; /* per state; NULL until computed */
    hr__gcache *next;
};

static centry EMPTY_ENTRY;

static void centry_free(centry *e) {
    if (!e || e == &EMPTY_ENTRY)
        return;
    free(e->bits);
    free(e->list);
    free(e->unc);
    free(e);
}

void hr__gcache_free_all(hr__gcache *c) {
    while (c) {
        hr__gcache *n = c->next;
        /* the number of states is not stored here: entries array is sized
           by the grammar, freed by the caller through this list */
        free(c->e);
        free(c);
        c = n;
    }
}

void hr__maskrun_deinit(hr__maskrun *mr) {
    free(mr->depth.v);
    free(mr->doff);
    free(mr->dn);
    free(mr->tmp.v);
    free(mr->tmp2.v);
    free(mr->path);
    free(mr->list);
    memset(mr, 0, sizeof *mr);
}

static int mr_prepare(hr__maskrun *mr, const hr_grammar_vocab *v) {
    size_t need = (size_t)v->max_depth + 2;
    if (mr->ndepth >= need)
        return 0;
    size_t *o = realloc(mr->doff, (need + 1) * sizeof *o);
    if (!o)
        return HR_ENOMEM;
    mr->doff = o;
    uint32_t *n = realloc(mr->dn, need * sizeof *n);
    if (!n)
        return HR_ENOMEM;
    mr->dn = n;
    uint32_t *p = realloc(mr->path, need * sizeof *p);
    if (!p)
        return HR_ENOMEM;
    mr->path = p;
    mr->ndepth = need;
    return 0;
}

/* Walk the subtree of trie node root. Slot 0 (mr->depth from doff[0]) holds
 * the closed configurations at root. Tokens reached are set in bits; with
 * unc != NULL (a cache walk), nodes whose continuation returns into the hole
 * are appended to *unc and not walked. */
static int walk(hr__run *r, hr__maskrun *mr, const hr_grammar_vocab *v,
                uint32_t root, uint32_t *bits, hr__u32v *unc) {
    uint32_t base = v->ndepth[root];
    uint32_t end = v->nend[root];
    for (uint32_t i = root + 1; i < end;) {
        uint32_t d = v->ndepth[i] - base;
        const hr__cfg *par = mr->depth.v + mr->doff[d - 1];
        mr->tmp.n = 0;
        hr__scan(r, par, mr->dn[d - 1], v->nbyte[i], &mr->tmp);
        if (!mr->tmp.n) {
            i = v->nend[i];
            continue;
        }
        for (uint32_t t = v->ntok0[i]; t < v->ntok0[i + 1]; t++) {
            int32_t id = v->toks[t];
            bits[id >> 5] |= 1u << (id & 31);
        }
        if (v->nend[i] == i + 1) {
            i++;
            continue;
        }
        mr->depth.n = mr->doff[d];
        int fl = hr__closure(r, mr->tmp.v, mr->tmp.n, &mr->depth, 0);
        if (r->oom)
            return HR_ENOMEM;
        mr->dn[d] = (uint32_t)(mr->depth.n - mr->doff[d]);
        mr->doff[d + 1] = mr->depth.n;
        if (unc && (fl & HR__CL_HOLE)) {
            if (hr__u32v_push(unc, i))
                return HR_ENOMEM;
            i = v->nend[i];
            continue;
        }
        if (!mr->dn[d]) {
            i = v->nend[i];
            continue;
        }
        i++;
    }
    return r->oom ? HR_ENOMEM : 0;
}

/* Fill slot 0 with the closure of k[0..n). */
static int slot0(hr__run *r, hr__maskrun *mr, const hr__cfg *k, size_t n) {
    mr->depth.n = 0;
    mr->doff[0] = 0;
    hr__closure(r, k, n, &mr->depth, 0);
    mr->dn[0] = (uint32_t)mr->depth.n;
    mr->doff[1] = mr->depth.n;
    return r->oom ? HR_ENOMEM : 0;
}

/* Compute the cache entry of state s (run cr is scratch for it). */
static int entry_compute(hr__run *cr, hr__maskrun *mr, const hr_grammar_vocab *v,
                         uint32_t s, centry **out) {
    const hr__gstate *st = &cr->g->st[s];
    *out = NULL;
    if (!st->ne && !st->nc) {
        *out = &EMPTY_ENTRY;
        return 0;
    }
    size_t words = ((size_t)v->n_tok + 31) / 32;
    uint32_t *bits = calloc(words ? words : 1, sizeof *bits);
    hr__u32v unc = {0};
    centry *e = calloc(1, sizeof *e);
    int rc = HR_ENOMEM;
    if (!bits || !e)
        goto fail;
    hr__stacks_reset(&cr->stk);
    hr__cfg k = {s, HR__NODE_HOLE};
    if ((rc = slot0(cr, mr, &k, 1)) || (rc = walk(cr, mr, v, 0, bits, &unc)))
        goto fail;
    rc = HR_ENOMEM;
    size_t cnt = 0;
    for (size_t w = 0; w < words; w++)
        cnt += (size_t)__builtin_popcount(bits[w]);
    if (cnt <= words / 2) {
        e->list = malloc((cnt + 1) * sizeof *e->list);
        if (!e->list)
            goto fail;
        for (size_t w = 0; w < words; w++)
            for (uint32_t x = bits[w]; x; x &= x - 1)
                e->list[e->n_list++] = (int32_t)(w * 32 + (size_t)__builtin_ctz(x));
        free(bits);
    } else {
        e->bits = bits;
    }
    bits = NULL;
    e->unc = unc.v;
    e->n_unc = (uint32_t)unc.n;
    *out = e;
    return 0;
fail:
    free(bits);
    hr__u32v_free(&unc);
    centry_free(e);
    return rc;
}

/* The cache of (g, v), created on first use. Called with g->mu held. */
static hr__gcache *cache_of(const hr_grammar *g, const hr_grammar_vocab *v) {
    hr_grammar *gm = (hr_grammar *)g; /* the cache is internal mutable state */
    for (hr__gcache *c = gm->caches; c; c = c->next)
        if (c->serial == v->serial)
            return c;
    hr__gcache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->e = calloc(g->n_st ? g->n_st : 1, sizeof *c->e);
    if (!c->e) {
        free(c);
        return NULL;
    }
    c->serial = v->serial;
    c->next = gm->caches;
    gm->caches = c;
    return c;
}

static int entry_get(hr__run *cr, hr__maskrun *mr, const hr_grammar_vocab *v,
                     uint32_t s, const centry **out) {
    const hr_grammar *g = cr->g;
    hr_grammar *gm = (hr_grammar *)g;
    pthread_mutex_lock(&gm->mu);
    hr__gcache *c = cache_of(g, v);
    centry *e = c ? c->e[s] : NULL;
    pthread_mutex_unlock(&gm->mu);
    if (!c)
        return HR_ENOMEM;
    if (e) {
        *out = e;
        return 0;
    }
    int rc = entry_compute(cr, mr, v, s, &e);
    if (rc)
        return rc;
    pthread_mutex_lock(&gm->mu);
    if (c->e[s]) {
        centry_free(e);
        e = c->e[s];
    } else {
        c->e[s] = e;
    }
    pthread_mutex_unlock(&gm->mu);
    *out = e;
    return 0;
}

/* Walk the children of uncertain node u from kernel configuration k with
 * the real stack. */
static int recheck(hr__run *r, hr__maskrun *mr, const hr_grammar_vocab *v,
                   hr__cfg k, uint32_t u, uint32_t *allowed) {
    uint32_t np = 0;
    for (uint32_t x = u; x != 0; x = v->nparent[x])
        mr->path[np++] = x;
    int rc = slot0(r, mr, &k, 1);
    if (rc)
        return rc;
    /* advance slot 0 along the path (root's child first) */
    while (np) {
        uint32_t x = mr->path[--np];
        mr->tmp.n = 0;
        hr__scan(r, mr->depth.v, mr->dn[0], v->nbyte[x], &mr->tmp);
        if (!mr->tmp.n)
            return 0;
        mr->tmp2.n = 0;
        hr__closure(r, mr->tmp.v, mr->tmp.n, &mr->tmp2, 0);
        if (r->oom)
            return HR_ENOMEM;
        mr->depth.n = 0;
        if (hr__cbuf_reserve(&mr->depth, mr->tmp2.n))
            return HR_ENOMEM;
        memcpy(mr->depth.v, mr->tmp2.v, mr->tmp2.n * sizeof *mr->tmp2.v);
        mr->depth.n = mr->tmp2.n;
        mr->dn[0] = (uint32_t)mr->tmp2.n;
        mr->doff[1] = mr->depth.n;
        if (!mr->dn[0])
            return 0;
    }
    return walk(r, mr, v, u, allowed, NULL);
}

int hr__mask_compute(hr__run *r, hr__run *cr, hr__maskrun *mr,
                     const hr_grammar_vocab *v, const hr__cfg *k, size_t n,
                     uint32_t *allowed) {
    int rc = mr_prepare(mr, v);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        const centry *e;
        if ((rc = entry_get(cr, mr, v, k[i].state, &e)))
            return rc;
        if (e->bits) {
            size_t words = ((size_t)v->n_tok + 31) / 32;
            for (size_t w = 0; w < words; w++)
                allowed[w] |= e->bits[w];
        } else {
            for (uint32_t j = 0; j < e->n_list; j++)
                allowed[e->list[j] >> 5] |= 1u << (e->list[j] & 31);
        }
        for (uint32_t j = 0; j < e->n_unc; j++)
            if ((rc = recheck(r, mr, v, k[i], e->unc[j], allowed)))
                return rc;
    }
    return 0;
}

void hr__gcache_clear(hr_grammar *g) {
    for (hr__gcache *c = g->caches; c; c = c->next)
        for (uint32_t s = 0; s < g->n_st; s++)
            centry_free(c->e[s]);
    hr__gcache_free_all(g->caches);
    g->caches = NULL;
}

int hr__mask_warm(const hr_grammar *g, const hr_grammar_vocab *v,
                  hr_error *err) {
    hr__run cr;
    hr__maskrun mr = {0};
    int rc = hr__run_init(&cr, g);
    if (rc)
        return hr_err(err, rc, "out of memory");
    if (!(rc = mr_prepare(&mr, v)))
        for (uint32_t s = 0; s < g->n_st && !rc; s++) {
            const centry *e;
            rc = entry_get(&cr, &mr, v, s, &e);
        }
    hr__run_deinit(&cr);
    hr__maskrun_deinit(&mr);
    return rc ? hr_err(err, rc, "out of memory computing grammar masks") : 0;
}
