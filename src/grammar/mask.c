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

#include "core/timer.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* An entry is reference-counted: the shared table holds one reference,
 * each grammar cache slot one, a maskrun's one-use entry one. */
typedef struct centry {
    _Atomic uint32_t refs;
    uint32_t *bits;  /* accepted tokens as a bitmap (n_tok bits), or NULL */
    int32_t *list;   /* ... or as a list */
    uint32_t n_list;
    uint32_t *unc;   /* uncertain trie nodes: walk their children */
    uint32_t n_unc;
} centry;

struct hr__gcache {
    uint64_t serial;
    centry **e;     /* per state; NULL until computed (a reference each) */
    size_t bytes;   /* of the entries held, bounded by hr__gbudget_cache_bytes */
    hr__gcache *next;
};

/* ---- entries shared across grammars ----------------------------------------
 * A state's entry depends only on the automaton reachable from it (bytes
 * and calls; returns go to the hole). That sub-automaton, numbered in
 * breadth-first order, is the key: the same JSON string, number or literal
 * in any grammar finds the entry computed for another. */

#define SHARE_MAX_STATES 4096
#define SHARE_MAX_ENTRIES 65536

typedef struct sent {
    uint64_t hash;
    uint32_t *key;
    uint32_t len;
    centry *e;
} sent;

struct hr__vshared {
    sent *tab;
    uint32_t cap, n;
    size_t bytes; /* keys and entries, bounded by hr__gbudget_cache_bytes */
};

static centry EMPTY_ENTRY;

static void centry_unref(centry *e) {
    if (!e || e == &EMPTY_ENTRY || atomic_fetch_sub(&e->refs, 1) != 1)
        return;
    free(e->bits);
    free(e->list);
    free(e->unc);
    free(e);
}

static centry *centry_ref(centry *e) {
    if (e && e != &EMPTY_ENTRY)
        atomic_fetch_add(&e->refs, 1);
    return e;
}

static size_t centry_bytes(const centry *e, const hr_grammar_vocab *v) {
    if (e == &EMPTY_ENTRY)
        return 0;
    return sizeof *e + (e->bits ? ((size_t)v->n_tok + 31) / 32 * 4 : ((size_t)e->n_list + 1) * 4) +
           (size_t)e->n_unc * 4;
}

/* Drop every shared entry (grammars keep theirs). Called with v->mu. */
static void shared_clear(struct hr__vshared *sh) {
    for (uint32_t i = 0; i < sh->cap; i++)
        if (sh->tab[i].key) {
            free(sh->tab[i].key);
            centry_unref(sh->tab[i].e);
            sh->tab[i] = (sent){0};
        }
    sh->n = 0;
    sh->bytes = 0;
}

void hr__vshared_free(hr_grammar_vocab *v) {
    struct hr__vshared *sh = v->shared;
    if (!sh)
        return;
    shared_clear(sh);
    free(sh->tab);
    free(sh);
    v->shared = NULL;
}

typedef hr__keybuf keybuf;

static int kput(keybuf *k, uint32_t x) {
    if (k->n == k->cap) {
        size_t c = k->cap ? k->cap * 2 : 256;
        uint32_t *p = realloc(k->v, c * sizeof *p);
        if (!p)
            return -1;
        k->v = p;
        k->cap = c;
    }
    k->v[k->n++] = x;
    return 0;
}

static uint32_t knum(keybuf *k, uint32_t s, int *over) {
    if (!k->num[s]) {
        if (k->norder >= SHARE_MAX_STATES) {
            *over = 1;
            return 0;
        }
        k->order[k->norder++] = s;
        k->num[s] = (uint32_t)k->norder;
    }
    return k->num[s] - 1;
}

/* The key of state s; 0 on success, -1 when too large or out of memory. */
static int make_key(const hr_grammar *g, uint32_t s, keybuf *k) {
    int over = 0, rc = 0;
    k->n = 0;
    k->norder = 0;
    knum(k, s, &over);
    for (size_t i = 0; i < k->norder && !over && !rc; i++) {
        const hr__gstate *st = &g->st[k->order[i]];
        rc |= kput(k, st->accept);
        rc |= kput(k, st->ne);
        for (uint32_t j = 0; j < st->ne; j++) {
            const hr__gedge *e = &g->edges[st->e0 + j];
            rc |= kput(k, (uint32_t)e->lo << 8 | e->hi);
            rc |= kput(k, knum(k, e->to, &over));
        }
        rc |= kput(k, st->nc);
        for (uint32_t j = 0; j < st->nc; j++) {
            const hr__gcall *c = &g->calls[st->c0 + j];
            rc |= kput(k, knum(k, g->rule_start[c->rule], &over));
            rc |= kput(k, knum(k, c->ret, &over));
        }
    }
    for (size_t i = 0; i < k->norder; i++)
        k->num[k->order[i]] = 0;
    return over || rc ? -1 : 0;
}

static uint64_t key_hash(const uint32_t *v, size_t n) {
    uint64_t h = 0x84222325cbf29ce4ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ v[i]) * 0x100000001b3ull;
    return h ^ (h >> 31);
}

/* Find (or, with e != NULL, insert) the entry of key k: a new reference to
 * it (the table takes its own on insert), NULL if absent and not inserted.
 * Called with v->mu. */
static centry *shared_find(hr_grammar_vocab *v, const keybuf *k, uint64_t h, centry *e) {
    struct hr__vshared *sh = v->shared;
    if (!sh) {
        if (!e || !(sh = calloc(1, sizeof *sh)))
            return NULL;
        sh->cap = 1024;
        if (!(sh->tab = calloc(sh->cap, sizeof *sh->tab))) {
            free(sh);
            return NULL;
        }
        v->shared = sh;
    }
    uint32_t m = sh->cap - 1;
    for (uint32_t i = (uint32_t)h & m;; i = (i + 1) & m) {
        sent *x = &sh->tab[i];
        if (!x->key) {
            if (!e || sh->n >= SHARE_MAX_ENTRIES || (sh->n + 1) * 2 > sh->cap)
                return NULL;
            size_t add = k->n * sizeof *x->key + centry_bytes(e, v);
            if (sh->bytes + add > hr__gbudget_cache_bytes())
                return NULL; /* the caller empties the table and tries again */
            x->key = malloc(k->n * sizeof *x->key);
            if (!x->key)
                return NULL;
            memcpy(x->key, k->v, k->n * sizeof *x->key);
            x->len = (uint32_t)k->n;
            x->hash = h;
            x->e = centry_ref(e);
            sh->n++;
            sh->bytes += add;
            return centry_ref(e);
        }
        if (x->hash == h && x->len == k->n && !memcmp(x->key, k->v, k->n * sizeof *k->v))
            return centry_ref(x->e);
    }
}

static int shared_grow(hr_grammar_vocab *v) {
    struct hr__vshared *sh = v->shared;
    if (!sh || (sh->n + 1) * 2 <= sh->cap || sh->cap >= 4 * SHARE_MAX_ENTRIES)
        return 0;
    uint32_t nc = sh->cap * 2;
    sent *t = calloc(nc, sizeof *t);
    if (!t)
        return -1;
    for (uint32_t i = 0; i < sh->cap; i++)
        if (sh->tab[i].key) {
            uint32_t p = (uint32_t)sh->tab[i].hash & (nc - 1);
            while (t[p].key)
                p = (p + 1) & (nc - 1);
            t[p] = sh->tab[i];
        }
    free(sh->tab);
    sh->tab = t;
    sh->cap = nc;
    return 0;
}


void hr__maskrun_deinit(hr__maskrun *mr) {
    centry_unref(mr->once);
    free(mr->key.v);
    free(mr->key.num);
    free(mr->key.order);
    free(mr->depth.v);
    free(mr->doff);
    free(mr->dn);
    free(mr->tmp.v);
    free(mr->tmp2.v);
    free(mr->path);
    free(mr->tokd);
    hr__plainmemo_free(&mr->plain);
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

/* Node i's subtree is plain text from its decoder state, and one of the
 * configurations that read its path (mr->tmp) reads that much plain text. */
static int plain_below(const hr__run *r, hr__maskrun *mr, const hr_grammar_vocab *v,
                       uint32_t i) {
    uint8_t w = v->nu8[i];
    if (w == 0xff || !(v->nplain[i] >> w & 1))
        return 0;
    for (size_t j = 0; j < mr->tmp.n && j < 4; j++)
        if (hr__plain_reach(r->g, &mr->plain, mr->tmp.v[j].state, w,
                            (uint16_t)v->max_depth) >= v->nheight[i])
            return 1;
    return 0;
}

/* Walk the subtree of trie node root. Slot 0 (mr->depth from doff[0]) holds
 * the closed configurations at root. Tokens reached are set in bits; with
 * unc != NULL (a cache walk), nodes whose continuation returns into the hole
 * are appended to *unc and not walked; with tokd != NULL (real stacks), each
 * token's distance after it is stored there. */
static int walk(hr__run *r, hr__maskrun *mr, const hr_grammar_vocab *v,
                uint32_t root, uint32_t *bits, hr__u32v *unc, uint32_t *tokd) {
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
        uint32_t dmin = HR__DIST_INF;
        if (tokd && v->ntok0[i] < v->ntok0[i + 1])
            for (size_t j = 0; j < mr->tmp.n; j++) {
                uint32_t dj = hr__cfg_dist(r, mr->tmp.v[j]);
                dmin = dj < dmin ? dj : dmin;
            }
        for (uint32_t t = v->ntok0[i]; t < v->ntok0[i + 1]; t++) {
            int32_t id = v->toks[t];
            bits[id >> 5] |= 1u << (id & 31);
            if (tokd)
                tokd[id] = dmin;
        }
        if (v->nend[i] == i + 1) {
            i++;
            continue;
        }
        if (!tokd && plain_below(r, mr, v, i)) { /* every token below: accepted */
            for (uint32_t t = v->ntok0[i + 1]; t < v->ntok0[v->nend[i]]; t++) {
                int32_t id = v->toks[t];
                bits[id >> 5] |= 1u << (id & 31);
            }
            i = v->nend[i];
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
    e->refs = 1;
    hr__stacks_reset(&cr->stk);
    hr__cfg k = {s, HR__NODE_HOLE};
    if ((rc = slot0(cr, mr, &k, 1)) || (rc = walk(cr, mr, v, 0, bits, &unc, NULL)))
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
    centry_unref(e);
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

/* The entry of state s: from g's cache, else the shared one, else
 * computed (and kept in both while they are under their byte bounds).
 * Valid until the next entry_get on mr. */
static int entry_get(hr__run *cr, hr__maskrun *mr, const hr_grammar_vocab *v,
                     uint32_t s, const centry **out) {
    const hr_grammar *g = cr->g;
    hr_grammar *gm = (hr_grammar *)g;
    hr_grammar_vocab *vm = (hr_grammar_vocab *)v; /* internal shared cache */
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
    /* shared across grammars? */
    keybuf *k = &mr->key;
    if (!k->num) {
        k->num = calloc(g->n_st, sizeof *k->num);
        k->order = malloc(SHARE_MAX_STATES * sizeof *k->order);
        if (!k->num || !k->order)
            return HR_ENOMEM;
    }
    int keyed = make_key(g, s, k) == 0;
    uint64_t h = keyed ? key_hash(k->v, k->n) : 0;
    if (keyed) {
        pthread_mutex_lock(&vm->mu);
        e = shared_find(vm, k, h, NULL);
        pthread_mutex_unlock(&vm->mu);
    }
    if (!e) {
        int rc = entry_compute(cr, mr, v, s, &e); /* one reference, ours */
        if (rc)
            return rc;
        if (keyed && e != &EMPTY_ENTRY) {
            pthread_mutex_lock(&vm->mu);
            centry *f = shared_grow(vm) ? NULL : shared_find(vm, k, h, e);
            if (!f && vm->shared && vm->shared->n) { /* full: start again */
                shared_clear(vm->shared);
                f = shared_find(vm, k, h, e);
            }
            pthread_mutex_unlock(&vm->mu);
            if (f) { /* e itself, or another thread's: one reference too many */
                centry_unref(e);
                e = f;
            }
        }
    }
    size_t nb = centry_bytes(e, v);
    pthread_mutex_lock(&gm->mu);
    if (c->e[s]) { /* another thread was first */
        centry_unref(e);
        e = c->e[s];
    } else if (c->bytes + nb <= hr__gbudget_cache_bytes()) {
        c->e[s] = e;
        c->bytes += nb;
    } else { /* the grammar's cache is full: this entry serves one use */
        centry_unref(mr->once);
        mr->once = e;
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
        if (!mr->tmp2.n)
            return 0;
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
    return walk(r, mr, v, u, allowed, NULL, NULL);
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

int hr__mask_walk(hr__run *r, hr__maskrun *mr, const hr_grammar_vocab *v,
                  const hr__cfg *k, size_t n, uint32_t *allowed, uint32_t *tokd) {
    int rc = mr_prepare(mr, v);
    if (!rc)
        rc = slot0(r, mr, k, n);
    return rc ? rc : walk(r, mr, v, 0, allowed, NULL, tokd);
}

void hr__gcache_clear(hr_grammar *g) {
    for (hr__gcache *c = g->caches, *n; c; c = n) {
        n = c->next;
        for (uint32_t s = 0; s < g->n_st; s++)
            centry_unref(c->e[s]);
        free(c->e);
        free(c);
    }
    g->caches = NULL;
}

int hr__mask_warm(const hr_grammar *g, const hr_grammar_vocab *v,
                  hr_error *err) {
    hr__run cr;
    hr__maskrun mr = {0};
    int rc = hr__run_init(&cr, g);
    if (rc)
        return hr_err(err, rc, "out of memory");
    /* on a budget: the states left when it runs out are computed when
     * first used; a full cache stops it too */
    double end = hr_thread_cpu() + hr__gbudget_warm_seconds();
    if (!(rc = mr_prepare(&mr, v)))
        for (uint32_t s = 0; s < g->n_st && !rc && !mr.once; s++) {
            const centry *e;
            rc = entry_get(&cr, &mr, v, s, &e);
            if (!(s & 31) && (hr_thread_cpu() > end || hr__gbudget_cancel_now()))
                break;
        }
    hr__run_deinit(&cr);
    hr__maskrun_deinit(&mr);
    return rc ? hr_err(err, rc, "out of memory computing grammar masks") : 0;
}

size_t hr_grammar_vocab_cache_bytes(const hr_grammar_vocab *v) {
    hr_grammar_vocab *vm = (hr_grammar_vocab *)v;
    pthread_mutex_lock(&vm->mu);
    size_t n = vm->shared ? vm->shared->bytes : 0;
    pthread_mutex_unlock(&vm->mu);
    return n;
}

void hr__mask_cache_bytes(const hr_grammar *g, const hr_grammar_vocab *v, size_t *grammar,
                          size_t *shared) {
    hr_grammar *gm = (hr_grammar *)g;
    hr_grammar_vocab *vm = (hr_grammar_vocab *)v;
    *grammar = 0;
    pthread_mutex_lock(&gm->mu);
    for (hr__gcache *c = gm->caches; c; c = c->next)
        if (c->serial == v->serial)
            *grammar = c->bytes;
    pthread_mutex_unlock(&gm->mu);
    pthread_mutex_lock(&vm->mu);
    *shared = vm->shared ? vm->shared->bytes : 0;
    pthread_mutex_unlock(&vm->mu);
}
