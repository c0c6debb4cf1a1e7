/* IR -> pushdown automaton: each rule that is called (not inlined) becomes a
 * DFA over bytes whose edges are byte ranges or calls of other rules.
 *
 *   1. checks: every referenced rule is defined;
 *   2. inlining: a rule that is not recursive and small is expanded in place;
 *   3. per rule: Thompson NFA (code-point classes become UTF-8 byte paths,
 *      JSON-string classes also their escaped forms), then subset
 *      construction over bytes and calls;
 *   4. left recursion (a rule reaching itself without consuming a byte) is
 *      refused: the matcher's prediction would not terminate. */
#include "grammar/internal.h"
#include "grammar/nfa.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- NFA -------------------------------------------------------------------- */

typedef struct comp {
    const hr__gir *ir;
    uint8_t *inl;       /* per rule: inline it */
    hr__nfa a;
    hr_error *err;
} comp;

static uint32_t nstate(hr__nfa *a) {
    if (a->err)
        return 0;
    if (a->n >= HR__G_MAX_NFA || (!(a->n & 4095) && a->n && hr__gbudget_over())) {
        a->err = HR_ERANGE;
        return 0;
    }
    if (a->n == a->cap) {
        uint32_t c = a->cap ? a->cap * 2 : 256;
        uint32_t *h = realloc(a->head, c * sizeof *h);
        if (!h) {
            a->err = HR_ENOMEM;
            return 0;
        }
        a->head = h;
        a->cap = c;
    }
    a->head[a->n] = 0;
    return a->n++;
}

static void nedge_add(hr__nfa *a, uint32_t from, uint32_t to, uint8_t kind,
                      uint8_t lo, uint8_t hi, uint32_t rule) {
    if (a->err)
        return;
    if (a->ne == a->ecap) {
        uint32_t c = a->ecap ? a->ecap * 2 : 512;
        hr__nedge *e = realloc(a->e, c * sizeof *e);
        if (!e) {
            a->err = HR_ENOMEM;
            return;
        }
        a->e = e;
        a->ecap = c;
    }
    a->e[a->ne] = (hr__nedge){to, a->head[from], rule, kind, lo, hi};
    a->head[from] = ++a->ne;
}

static void eps(hr__nfa *a, uint32_t f, uint32_t t) { nedge_add(a, f, t, HR__NE_EPS, 0, 0, 0); }
static void byte(hr__nfa *a, uint32_t f, uint32_t t, uint8_t lo, uint8_t hi) {
    nedge_add(a, f, t, HR__NE_BYTE, lo, hi, 0);
}

/* ---- code points -> byte paths ----------------------------------------------- */

/* A path of byte ranges from s to e (n steps). */
static void path(hr__nfa *a, uint32_t s, uint32_t e, const uint8_t *lo,
                 const uint8_t *hi, int n) {
    for (int i = 0; i < n; i++) {
        uint32_t t = i == n - 1 ? e : nstate(a);
        byte(a, s, t, lo[i], hi[i]);
        s = t;
    }
}

static int enc(uint32_t c, uint8_t *b) {
    if (c < 0x80) {
        b[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        b[0] = (uint8_t)(0xC0 | c >> 6);
        b[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        b[0] = (uint8_t)(0xE0 | c >> 12);
        b[1] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
        b[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    b[0] = (uint8_t)(0xF0 | c >> 18);
    b[1] = (uint8_t)(0x80 | (c >> 12 & 0x3F));
    b[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F));
    b[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

/* Code points lo..hi as UTF-8 byte-range paths from s to e. */
static void utf8_range(hr__nfa *a, uint32_t s, uint32_t e, uint32_t lo, uint32_t hi) {
    static const uint32_t maxc[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= maxc[i] && hi > maxc[i]) {
            utf8_range(a, s, e, lo, maxc[i]);
            utf8_range(a, s, e, maxc[i] + 1, hi);
            return;
        }
    if (hi < 0x80) {
        byte(a, s, e, (uint8_t)lo, (uint8_t)hi);
        return;
    }
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                utf8_range(a, s, e, lo, lo | m);
                utf8_range(a, s, e, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                utf8_range(a, s, e, lo, (hi & ~m) - 1);
                utf8_range(a, s, e, hi & ~m, hi);
                return;
            }
        }
    }
    uint8_t x[4], y[4];
    int n = enc(lo, x);
    enc(hi, y);
    path(a, s, e, x, y, n);
}

/* One hex digit in [lo, hi] (0..15), either case. */
static void hexdigit(hr__nfa *a, uint32_t s, uint32_t e, uint32_t lo, uint32_t hi) {
    if (lo <= 9)
        byte(a, s, e, (uint8_t)('0' + lo), (uint8_t)('0' + (hi < 9 ? hi : 9)));
    if (hi >= 10) {
        uint32_t l = lo > 10 ? lo : 10;
        byte(a, s, e, (uint8_t)('a' + l - 10), (uint8_t)('a' + hi - 10));
        byte(a, s, e, (uint8_t)('A' + l - 10), (uint8_t)('A' + hi - 10));
    }
}

/* nd hex digits whose value is in [lo, hi], from s to e. */
static void hex_range(hr__nfa *a, uint32_t s, uint32_t e, uint32_t lo, uint32_t hi,
                      int nd) {
    if (nd == 1) {
        hexdigit(a, s, e, lo, hi);
        return;
    }
    int sh = 4 * (nd - 1);
    uint32_t m = (1u << sh) - 1;
    if ((lo & ~m) == (hi & ~m)) {
        uint32_t t = nstate(a);
        hexdigit(a, s, t, lo >> sh, lo >> sh);
        hex_range(a, t, e, lo & m, hi & m, nd - 1);
        return;
    }
    if (lo & m) {
        hex_range(a, s, e, lo, lo | m, nd);
        hex_range(a, s, e, (lo | m) + 1, hi, nd);
        return;
    }
    if ((hi & m) != m) {
        hex_range(a, s, e, lo, (hi & ~m) - 1, nd);
        hex_range(a, s, e, hi & ~m, hi, nd);
        return;
    }
    uint32_t t = nstate(a);
    hexdigit(a, s, t, lo >> sh, hi >> sh);
    hex_range(a, t, e, 0, m, nd - 1);
}

/* "\u" then 4 hex digits in [lo, hi]. */
static void uesc(hr__nfa *a, uint32_t s, uint32_t e, uint32_t lo, uint32_t hi) {
    uint32_t t1 = nstate(a), t2 = nstate(a);
    byte(a, s, t1, '\\', '\\');
    byte(a, t1, t2, 'u', 'u');
    hex_range(a, t2, e, lo, hi, 4);
}

static void lit(hr__nfa *a, uint32_t s, uint32_t e, const char *str) {
    size_t n = strlen(str);
    for (size_t i = 0; i < n; i++) {
        uint32_t t = i + 1 == n ? e : nstate(a);
        byte(a, s, t, (uint8_t)str[i], (uint8_t)str[i]);
        s = t;
    }
}

/* Code points lo..hi as they appear in a canonically written JSON string. */
static void json_range(hr__nfa *a, uint32_t s, uint32_t e, uint32_t lo, uint32_t hi) {
    static const struct { uint32_t c; const char *esc; } SHORT[] = {
        {'"', "\\\""}, {'\\', "\\\\"}, {8, "\\b"}, {12, "\\f"},
        {10, "\\n"},    {13, "\\r"},    {9, "\\t"},
    };
    /* raw: >= 0x20 except '"' and '\\' */
    static const uint32_t RAW[3][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
    for (int i = 0; i < 3; i++) {
        uint32_t l = lo > RAW[i][0] ? lo : RAW[i][0];
        uint32_t h = hi < RAW[i][1] ? hi : RAW[i][1];
        if (l <= h)
            utf8_range(a, s, e, l, h);
    }
    for (size_t i = 0; i < sizeof SHORT / sizeof SHORT[0]; i++)
        if (SHORT[i].c >= lo && SHORT[i].c <= hi)
            lit(a, s, e, SHORT[i].esc);
    /* other controls: \u00XX */
    for (uint32_t c = lo; c <= hi && c < 0x20;) {
        if (c == 8 || c == 9 || c == 10 || c == 12 || c == 13) {
            c++;
            continue;
        }
        uint32_t d = c;
        while (d + 1 <= hi && d + 1 < 0x20 && d + 1 != 8 && d + 1 != 9 && d + 1 != 10 &&
               d + 1 != 12 && d + 1 != 13)
            d++;
        uesc(a, s, e, c, d);
        c = d + 1;
    }
}

/* ---- Thompson construction --------------------------------------------------- */

static uint32_t frag(comp *c, uint32_t node, uint32_t s, int depth) {
    hr__nfa *a = &c->a;
    if (a->err)
        return 0;
    if (depth > 2000) { /* inlining is of non-recursive rules: bounded */
        a->err = HR_ERANGE;
        return 0;
    }
    const hr__gnode *n = &c->ir->nodes[node];
    switch (n->kind) {
    case HR__G_EMPTY:
        return s;
    case HR__G_NONE:
        return nstate(a);
    case HR__G_BYTES:
        for (uint32_t i = 0; i < n->b; i++) {
            uint32_t t = nstate(a);
            uint8_t b = c->ir->bytes[n->a + i];
            byte(a, s, t, b, b);
            s = t;
        }
        return s;
    case HR__G_CHARS:
    case HR__G_JCHARS: {
        uint32_t e = nstate(a);
        for (uint32_t i = 0; i < n->b; i++) {
            uint32_t lo = c->ir->ranges[n->a + 2 * i], hi = c->ir->ranges[n->a + 2 * i + 1];
            if (n->kind == HR__G_CHARS)
                utf8_range(a, s, e, lo, hi);
            else
                json_range(a, s, e, lo, hi);
        }
        return e;
    }
    case HR__G_SEQ:
        for (uint32_t i = 0; i < n->b; i++)
            s = frag(c, c->ir->kids[n->a + i], s, depth + 1);
        return s;
    case HR__G_ALT: {
        uint32_t e = nstate(a);
        for (uint32_t i = 0; i < n->b; i++) {
            uint32_t t = nstate(a);
            eps(a, s, t);
            eps(a, frag(c, c->ir->kids[n->a + i], t, depth + 1), e);
        }
        return e;
    }
    case HR__G_REP: {
        int32_t min = n->min, max = n->max;
        uint32_t kid = n->a;
        for (int32_t i = 0; i < min && !a->err; i++)
            s = frag(c, kid, s, depth + 1);
        if (max < 0) {
            uint32_t l = nstate(a);
            eps(a, s, l);
            eps(a, frag(c, kid, l, depth + 1), l);
            return l;
        }
        uint32_t f = nstate(a);
        for (int32_t i = min; i < max && !a->err; i++) {
            eps(a, s, f);
            uint32_t t = nstate(a);
            eps(a, s, t);
            s = frag(c, kid, t, depth + 1);
        }
        eps(a, s, f);
        return f;
    }
    case HR__G_REF:
        if (c->inl[n->a])
            return frag(c, (uint32_t)c->ir->rules[n->a].body, s, depth + 1);
        uint32_t t = nstate(a);
        nedge_add(a, s, t, HR__NE_CALL, 0, 0, n->a);
        return t;
    }
    return s;
}

/* ---- rule analysis ---------------------------------------------------------- */

/* Expanded size of a node if inlined (saturating), -1 if it references a
 * rule that is not inlined (then it is a call: size 1). */
#define BIG 1000000u
static uint32_t sat(uint64_t x) { return x > BIG ? BIG : (uint32_t)x; }

static uint32_t node_size(const comp *c, const uint32_t *rsize, uint32_t node) {
    const hr__gnode *n = &c->ir->nodes[node];
    uint64_t s = 0;
    switch (n->kind) {
    case HR__G_EMPTY:
    case HR__G_NONE:
        return 1;
    case HR__G_BYTES:
        return n->b;
    case HR__G_CHARS:
        return 4 * n->b;
    case HR__G_JCHARS:
        return 24 * n->b;
    case HR__G_SEQ:
    case HR__G_ALT:
        for (uint32_t i = 0; i < n->b; i++)
            s += node_size(c, rsize, c->ir->kids[n->a + i]);
        return sat(s + 1);
    case HR__G_REP:
        return sat((uint64_t)node_size(c, rsize, n->a) *
                   (uint64_t)(n->max < 0 ? (uint64_t)n->min + 1 : (uint64_t)n->max) + 1);
    case HR__G_REF:
        return c->inl[n->a] ? rsize[n->a] : 1;
    }
    return 1;
}

static void refs(const hr__gir *ir, uint32_t node, hr__u32v *out, int *oom) {
    const hr__gnode *n = &ir->nodes[node];
    if (n->kind == HR__G_REF) {
        if (hr__u32v_push(out, n->a))
            *oom = 1;
    } else if (n->kind == HR__G_SEQ || n->kind == HR__G_ALT) {
        for (uint32_t i = 0; i < n->b; i++)
            refs(ir, ir->kids[n->a + i], out, oom);
    } else if (n->kind == HR__G_REP) {
        refs(ir, n->a, out, oom);
    }
}

/* Decide inlining: a rule is inlined when it is not on a reference cycle and
 * its expansion is small. Rules are visited in reverse topological order. */
static int plan_inline(comp *c, int32_t root) {
    const hr__gir *ir = c->ir;
    uint32_t nr = ir->n_rules;
    int rc = 0, oom = 0;
    hr__u32v *adj = calloc(nr, sizeof *adj);
    uint32_t *rsize = calloc(nr, sizeof *rsize);
    uint8_t *state = calloc(nr, 1); /* 0 new, 1 on stack, 2 done */
    uint8_t *cyc = calloc(nr, 1);
    uint32_t *stk = malloc((nr + 1) * sizeof *stk), *it = calloc(nr, sizeof *it);
    if (!adj || !rsize || !state || !cyc || !stk || !it) {
        rc = HR_ENOMEM;
        goto done;
    }
    for (uint32_t r = 0; r < nr; r++)
        if (ir->rules[r].body >= 0)
            refs(ir, (uint32_t)ir->rules[r].body, &adj[r], &oom);
    if (oom) {
        rc = HR_ENOMEM;
        goto done;
    }
    /* iterative DFS from root; a back edge marks every rule on the cycle */
    size_t sp = 0;
    stk[sp++] = (uint32_t)root;
    state[root] = 1;
    while (sp) {
        uint32_t r = stk[sp - 1];
        if (it[r] < adj[r].n) {
            uint32_t q = adj[r].v[it[r]++];
            if (state[q] == 0) {
                state[q] = 1;
                stk[sp++] = q;
            } else if (state[q] == 1) {
                for (size_t i = sp; i-- > 0;) {
                    cyc[stk[i]] = 1;
                    if (stk[i] == q)
                        break;
                }
            } else if (cyc[q]) {
                /* q is done and cyclic; r may still reach a cycle through q
                   but is only cyclic if q reaches r: handled below */
            }
            continue;
        }
        state[r] = 2;
        sp--;
        /* post-order: sizes of callees are known */
        if (!cyc[r]) {
            uint32_t s = node_size(c, rsize, (uint32_t)ir->rules[r].body);
            rsize[r] = s;
            c->inl[r] = s <= 256 && (int32_t)r != root && !ir->rules[r].noinline;
        }
    }
    /* A rule reached again through a finished cycle member may be on a cycle
       the DFS above did not close (cross edge): recheck by fixpoint: a rule
       is cyclic iff it reaches itself. Cheap enough for grammar sizes. */
    for (uint32_t r = 0; r < nr; r++) {
        if (!c->inl[r])
            continue;
        /* DFS from r's callees looking for r */
        uint8_t *seen = calloc(nr, 1);
        size_t n2 = 0;
        if (!seen) {
            rc = HR_ENOMEM;
            goto done;
        }
        for (size_t i = 0; i < adj[r].n; i++)
            if (!seen[adj[r].v[i]])
                seen[adj[r].v[i]] = 1, stk[n2++] = adj[r].v[i];
        while (n2) {
            uint32_t q = stk[--n2];
            if (q == r) {
                c->inl[r] = 0;
                break;
            }
            for (size_t i = 0; i < adj[q].n; i++)
                if (!seen[adj[q].v[i]])
                    seen[adj[q].v[i]] = 1, stk[n2++] = adj[q].v[i];
        }
        free(seen);
    }
done:
    if (adj)
        for (uint32_t r = 0; r < nr; r++)
            hr__u32v_free(&adj[r]);
    free(adj);
    free(rsize);
    free(state);
    free(cyc);
    free(stk);
    free(it);
    return rc;
}

/* Left recursion: from a rule's start, following calls of nullable rules,
 * a call of the rule itself. */
static int check_left_rec(hr_grammar *g, const hr__gir *ir, hr_error *err) {
    uint32_t nr = g->n_rules;
    uint8_t *nullable = calloc(nr, 1);
    uint32_t *stk = malloc((g->n_st + 1) * sizeof *stk);
    uint32_t *seen = calloc(g->n_st, sizeof *seen);
    int rc = 0;
    if (!nullable || !stk || !seen) {
        rc = hr_err(err, HR_ENOMEM, "out of memory compiling the grammar");
        goto done;
    }
    /* nullable rules: fixpoint over "start reaches accept via nullable calls" */
    for (int changed = 1; changed;) {
        changed = 0;
        for (uint32_t r = 0; r < nr; r++) {
            if (nullable[r] || g->rule_start[r] == UINT32_MAX)
                continue;
            uint32_t mark = r + 1;
            size_t sp = 0;
            stk[sp++] = g->rule_start[r];
            seen[g->rule_start[r]] = mark;
            while (sp && !nullable[r]) {
                uint32_t s = stk[--sp];
                if (g->st[s].accept)
                    nullable[r] = 1;
                for (uint32_t i = 0; i < g->st[s].nc; i++) {
                    const hr__gcall *c = &g->calls[g->st[s].c0 + i];
                    if (nullable[c->rule] && seen[c->ret] != mark) {
                        seen[c->ret] = mark;
                        stk[sp++] = c->ret;
                    }
                }
            }
            changed |= nullable[r];
        }
        memset(seen, 0, g->n_st * sizeof *seen);
    }
    /* for each rule, the rules it calls at a left position; search for r */
    for (uint32_t r = 0; r < nr && !rc; r++) {
        if (g->rule_start[r] == UINT32_MAX)
            continue;
        uint32_t mark = r + 1;
        size_t sp = 0;
        stk[sp++] = g->rule_start[r];
        seen[g->rule_start[r]] = mark;
        while (sp) {
            uint32_t s = stk[--sp];
            for (uint32_t i = 0; i < g->st[s].nc; i++) {
                const hr__gcall *c = &g->calls[g->st[s].c0 + i];
                if (c->rule == r) {
                    rc = hr_err(err, HR_EUNSUPPORTED,
                                "rule '%s' is left-recursive (it can reach itself "
                                "before any character)", ir->rules[r].name);
                    goto done;
                }
                uint32_t st0 = g->rule_start[c->rule];
                if (seen[st0] != mark) {
                    seen[st0] = mark;
                    stk[sp++] = st0;
                }
                if (nullable[c->rule] && seen[c->ret] != mark) {
                    seen[c->ret] = mark;
                    stk[sp++] = c->ret;
                }
            }
        }
    }
done:
    free(nullable);
    free(stk);
    free(seen);
    return rc;
}

/* ---- driver ------------------------------------------------------------------- */

static int too_costly(hr_error *err) {
    if (hr__gbudget_cancelled())
        return hr_err(err, HR_ECANCELLED, "grammar compilation cancelled (the client went away)");
    return hr_err(err, HR_ERANGE, "grammar too costly: compiling it needs more than %g s of "
                  "CPU (the limit)", hr__gbudget_compile_seconds());
}

int hr__grammar_compile(hr_grammar **out, const hr__gir *ir, int32_t root,
                        hr_error *err) {
    *out = NULL;
    hr__gbudget_start();
    if (ir->oom)
        return hr_err(err, HR_ENOMEM, "out of memory building the grammar");
    if (root < 0 || (uint32_t)root >= ir->n_rules || ir->rules[root].body < 0)
        return hr_err(err, HR_EINVAL, "the grammar has no root rule");
    for (uint32_t r = 0; r < ir->n_rules; r++)
        if (ir->rules[r].body < 0) {
            int rc = hr_err(err, HR_EINVAL, "undefined rule '%s'", ir->rules[r].name);
            if (err)
                err->pos = ir->rules[r].pos;
            return rc;
        }
    int rc = 0;
    comp c = {.ir = ir, .err = err};
    hr__dfa d = {0};
    hr_grammar *g = calloc(1, sizeof *g);
    uint32_t *queue = malloc((ir->n_rules + 1) * sizeof *queue);
    c.inl = calloc(ir->n_rules, 1);
    if (!g || !queue || !c.inl) {
        rc = hr_err(err, HR_ENOMEM, "out of memory compiling the grammar");
        goto fail;
    }
    pthread_mutex_init(&g->mu, NULL);
    g->n_rules = ir->n_rules;
    g->rule_start = malloc(ir->n_rules * sizeof *g->rule_start);
    if (!g->rule_start) {
        rc = hr_err(err, HR_ENOMEM, "out of memory compiling the grammar");
        goto fail;
    }
    for (uint32_t r = 0; r < ir->n_rules; r++)
        g->rule_start[r] = UINT32_MAX;
    if ((rc = plan_inline(&c, root))) {
        hr_err(err, rc, "out of memory compiling the grammar");
        goto fail;
    }
    d.g = g;
    /* compile root, then every rule called from compiled code */
    size_t qn = 0;
    queue[qn++] = (uint32_t)root;
    g->rule_start[root] = 0; /* placeholder: queued */
    for (size_t qi = 0; qi < qn; qi++) {
        uint32_t r = queue[qi];
        c.a.n = c.a.ne = 0;
        c.a.err = 0;
        uint32_t s0 = nstate(&c.a);
        uint32_t acc = frag(&c, (uint32_t)ir->rules[r].body, s0, 0);
        if (c.a.err) {
            rc = c.a.err == HR_ENOMEM ? hr_err(err, HR_ENOMEM, "out of memory compiling the grammar")
                 : hr__gbudget_hit()     ? too_costly(err)
                                         : hr_err(err, HR_ERANGE, "grammar too large (rule '%s' "
                                                  "expands past %u automaton states)",
                                                  ir->rules[r].name, HR__G_MAX_NFA);
            goto fail;
        }
        uint32_t first_call = g->n_calls, start;
        if ((rc = hr__determinize(&d, &c.a, acc, &start))) {
            rc = rc == HR_ENOMEM ? hr_err(err, HR_ENOMEM, "out of memory compiling the grammar")
                 : hr__gbudget_hit() ? too_costly(err)
                                     : hr_err(err, HR_ERANGE, "grammar too large (more than %u "
                                              "parser states)", HR__G_MAX_STATES);
            goto fail;
        }
        g->rule_start[r] = start;
        for (uint32_t i = first_call; i < g->n_calls; i++) {
            uint32_t q = g->calls[i].rule;
            if (g->rule_start[q] == UINT32_MAX) {
                g->rule_start[q] = 0;
                queue[qn++] = q;
            }
        }
    }
    /* rules never called keep UINT32_MAX; they were marked 0 only if queued */
    g->root = g->rule_start[root];
    if ((rc = check_left_rec(g, ir, err)))
        goto fail;
    if ((rc = hr__grammar_minimize(g))) {
        rc = rc == HR_ERANGE ? too_costly(err) : hr_err(err, rc, "out of memory compiling the grammar");
        goto fail;
    }
    for (uint32_t s = 0; s < g->n_st; s++) {
        hr__gstate *st = &g->st[s];
        st->plain = !st->nc && !st->accept;
    }
    for (uint32_t i = 0; i < g->n_calls; i++) {
        const hr__gstate *r = &g->st[g->calls[i].ret];
        g->calls[i].tail = r->accept && !r->ne && !r->nc;
    }
    if ((rc = hr__grammar_distances(g))) {
        hr_err(err, rc, "out of memory compiling the grammar");
        goto fail;
    }
    *out = g;
    g = NULL;
fail:
    free(c.a.head);
    free(c.a.e);
    free(c.inl);
    free(queue);
    hr__dfa_free(&d);
    hr_grammar_free(g);
    return rc;
}
