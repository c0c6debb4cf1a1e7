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

/* Reverse adjacency: the states whose signature reads state t's class
 * (byte edges into t, calls returning to t or of the rule starting at t). */
static int preds(const hr_grammar *g, uint32_t **off_out, uint32_t **pred_out) {
    uint32_t n = g->n_st;
    uint32_t *off = calloc((size_t)n + 1, sizeof *off);
    size_t m = 0;
    for (uint32_t s = 0; s < n; s++)
        m += g->st[s].ne + 2u * g->st[s].nc;
    uint32_t *pred = malloc((m ? m : 1) * sizeof *pred), *cur = malloc((n ? n : 1) * sizeof *cur);
    if (!off || !pred || !cur) {
        free(off);
        free(pred);
        free(cur);
        return HR_ENOMEM;
    }
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t s = 0; s < n; s++) {
            const hr__gstate *x = &g->st[s];
            for (uint32_t i = 0; i < x->ne + 2u * x->nc; i++) {
                uint32_t t = i < x->ne ? g->edges[x->e0 + i].to
                           : (i - x->ne) % 2 ? g->calls[x->c0 + (i - x->ne) / 2].ret
                                             : g->rule_start[g->calls[x->c0 + (i - x->ne) / 2].rule];
                if (pass)
                    pred[cur[t]++] = s;
                else
                    off[t + 1]++;
            }
        }
        if (!pass) {
            for (uint32_t t = 0; t < n; t++)
                off[t + 1] += off[t];
            memcpy(cur, off, n * sizeof *cur);
        }
    }
    free(cur);
    *off_out = off;
    *pred_out = pred;
    return 0;
}

/* Refinement, incremental: a state's signature can change only when the
 * class of one of its successors changed in the previous round, so each
 * round re-examines only those ("dirty") states. Within a class, members
 * that are not dirty keep the signature they shared; dirty members that
 * still have it stay, the others form new classes by signature. Class ids
 * of the remaining members stay, so the work per round is proportional to
 * the dirty states, not to the automaton (a long chain of distinguishable
 * states takes as many rounds as it is long). */
int hr__grammar_minimize(hr_grammar *g) {
    uint32_t n = g->n_st;
    uint32_t *cl = malloc((n + 2) * sizeof *cl), *nc = malloc((n + 2) * sizeof *nc);
    uint32_t *head = malloc((n + 2) * sizeof *head), *nxt = malloc((n + 2) * sizeof *nxt);
    uint32_t *prv = malloc((n + 2) * sizeof *prv), *mark = calloc(n + 2, sizeof *mark);
    uint32_t *seeded = calloc(n + 2, sizeof *seeded), *claimed = calloc(n + 2, sizeof *claimed);
    uint32_t *dirty = malloc((n + 2) * sizeof *dirty), *changed = malloc((n + 2) * sizeof *changed);
    uint32_t *used = malloc((2 * n + 4) * sizeof *used);
    uint32_t *poff = NULL, *pred = NULL;
    sigtab t = {0};
    t.cap = 1;
    while (t.cap < 4 * n + 8)
        t.cap *= 2;
    t.hash = malloc(t.cap * sizeof *t.hash);
    t.state = calloc(t.cap, sizeof *t.state);
    t.cls = malloc(t.cap * sizeof *t.cls);
    int rc = HR_ENOMEM;
    if (!cl || !nc || !head || !nxt || !prv || !mark || !seeded || !claimed || !dirty ||
        !changed || !used || !t.hash || !t.state || !t.cls || preds(g, &poff, &pred))
        goto done;
    const uint32_t NIL = UINT32_MAX;
    head[0] = head[1] = NIL;
    for (uint32_t s = n; s-- > 0;) { /* two classes: accepting or not */
        uint32_t k = cl[s] = g->st[s].accept ? 1 : 0;
        nxt[s] = head[k];
        prv[s] = NIL;
        if (head[k] != NIL)
            prv[head[k]] = s;
        head[k] = s;
    }
    uint32_t ncls = 2, nd = n;
    for (uint32_t s = 0; s < n; s++)
        dirty[s] = s;
    call_cls_g = g;
    for (uint32_t round = 1; nd; round++) {
        if (!(round & 7) && hr__gbudget_over()) { /* the compile budget */
            rc = HR_ERANGE;
            goto done;
        }
        for (uint32_t i = 0; i < nd; i++)
            mark[dirty[i]] = round;
        call_cls_cl = cl;
        for (uint32_t i = 0; i < nd; i++) {
            const hr__gstate *x = &g->st[dirty[i]];
            if (x->nc > 1)
                qsort(g->calls + x->c0, x->nc, sizeof *g->calls, cmp_call);
        }
        /* group the dirty states (old classes throughout) */
        uint32_t nused = 0;
        for (uint32_t i = 0; i < nd; i++) {
            uint32_t s = dirty[i], k = cl[s];
            if (seeded[k] != round) { /* the signature of k's clean members */
                seeded[k] = round;
                uint32_t r = head[k];
                while (r != NIL && mark[r] == round)
                    r = nxt[r];
                if (r != NIL) {
                    claimed[k] = round;
                    uint64_t h = sig(g, cl, r);
                    uint32_t p = (uint32_t)h & (t.cap - 1);
                    while (t.state[p])
                        p = (p + 1) & (t.cap - 1);
                    t.state[p] = r + 1;
                    t.hash[p] = h;
                    t.cls[p] = k;
                    used[nused++] = p;
                }
            }
            uint64_t h = sig(g, cl, s);
            uint32_t p = (uint32_t)h & (t.cap - 1);
            for (;; p = (p + 1) & (t.cap - 1)) {
                if (!t.state[p]) {
                    uint32_t id = k;
                    if (claimed[k] == round) { /* a new class */
                        id = ncls++;
                        head[id] = NIL;
                    }
                    claimed[k] = round;
                    t.state[p] = s + 1;
                    t.hash[p] = h;
                    t.cls[p] = id;
                    used[nused++] = p;
                    nc[s] = id;
                    break;
                }
                if (t.hash[p] == h && same(g, cl, t.state[p] - 1, s)) {
                    nc[s] = t.cls[p];
                    break;
                }
            }
        }
        for (uint32_t i = 0; i < nused; i++)
            t.state[used[i]] = 0;
        /* move the states whose class changed; their predecessors are next */
        uint32_t nch = 0;
        for (uint32_t i = 0; i < nd; i++) {
            uint32_t s = dirty[i], k = cl[s], k2 = nc[s];
            if (k2 == k)
                continue;
            if (prv[s] != NIL)
                nxt[prv[s]] = nxt[s];
            else
                head[k] = nxt[s];
            if (nxt[s] != NIL)
                prv[nxt[s]] = prv[s];
            changed[nch++] = s;
        }
        for (uint32_t i = 0; i < nch; i++) {
            uint32_t s = changed[i], k2 = nc[s];
            cl[s] = k2;
            nxt[s] = head[k2];
            prv[s] = NIL;
            if (head[k2] != NIL)
                prv[head[k2]] = s;
            head[k2] = s;
        }
        nd = 0;
        for (uint32_t i = 0; i < nch; i++)
            for (uint32_t j = poff[changed[i]]; j < poff[changed[i] + 1]; j++)
                if (mark[pred[j]] != round + 1) {
                    mark[pred[j]] = round + 1;
                    dirty[nd++] = pred[j];
                }
    }
    /* class ids in order of their first state (as a full Moore pass gives) */
    for (uint32_t k = 0; k < ncls; k++)
        nc[k] = UINT32_MAX;
    uint32_t nk = 0;
    for (uint32_t s = 0; s < n; s++) {
        if (nc[cl[s]] == UINT32_MAX)
            nc[cl[s]] = nk++;
    }
    for (uint32_t s = 0; s < n; s++)
        cl[s] = nc[cl[s]];
    ncls = nk;
    /* calls in canonical order under the final classes */
    call_cls_cl = cl;
    for (uint32_t s = 0; s < n; s++)
        if (g->st[s].nc > 1)
            qsort(g->calls + g->st[s].c0, g->st[s].nc, sizeof *g->calls, cmp_call);
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
    free(head);
    free(nxt);
    free(prv);
    free(mark);
    free(seeded);
    free(claimed);
    free(dirty);
    free(changed);
    free(used);
    free(poff);
    free(pred);
    free(t.hash);
    free(t.state);
    free(t.cls);
    return rc;
}
