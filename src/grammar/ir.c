/* The grammar IR: builders over growable pools with a sticky OOM flag. */
#include "grammar/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int grow(void **p, uint32_t *cap, uint32_t need, size_t elem) {
    if (need <= *cap)
        return 0;
    uint32_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > UINT32_MAX / 2)
            return -1;
        c *= 2;
    }
    void *q = realloc(*p, (size_t)c * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

static uint32_t node(hr__gir *ir, uint8_t kind, uint32_t a, uint32_t b) {
    if (ir->oom || grow((void **)&ir->nodes, &ir->cap_nodes, ir->n_nodes + 1,
                        sizeof *ir->nodes)) {
        ir->oom = 1;
        return 0;
    }
    hr__gnode *n = &ir->nodes[ir->n_nodes];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->a = a;
    n->b = b;
    return ir->n_nodes++;
}

void hr__gir_init(hr__gir *ir) {
    memset(ir, 0, sizeof *ir);
    node(ir, HR__G_EMPTY, 0, 0); /* node 0 */
}

void hr__gir_deinit(hr__gir *ir) {
    for (uint32_t i = 0; i < ir->n_rules; i++)
        free(ir->rules[i].name);
    free(ir->rules);
    free(ir->nodes);
    free(ir->kids);
    free(ir->ranges);
    free(ir->bytes);
    memset(ir, 0, sizeof *ir);
}

uint32_t hr__gir_empty(hr__gir *ir) { return node(ir, HR__G_EMPTY, 0, 0); }
uint32_t hr__gir_none(hr__gir *ir) { return node(ir, HR__G_NONE, 0, 0); }

uint32_t hr__gir_bytes(hr__gir *ir, const void *s, size_t n) {
    if (!n)
        return hr__gir_empty(ir);
    if (ir->oom || n > UINT32_MAX / 2 ||
        grow((void **)&ir->bytes, &ir->cap_bytes, ir->n_bytes + (uint32_t)n, 1)) {
        ir->oom = 1;
        return 0;
    }
    memcpy(ir->bytes + ir->n_bytes, s, n);
    uint32_t at = ir->n_bytes;
    ir->n_bytes += (uint32_t)n;
    return node(ir, HR__G_BYTES, at, (uint32_t)n);
}

uint32_t hr__gir_str(hr__gir *ir, const char *s) {
    return hr__gir_bytes(ir, s, strlen(s));
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

uint32_t hr__gir_chars(hr__gir *ir, const uint32_t *ranges, size_t n,
                       int negate, int json) {
    /* Normalize: sort, merge, cut out surrogates, complement if asked. */
    uint32_t *r = malloc((n + 2) * 2 * sizeof *r), *o = NULL;
    if (!r) {
        ir->oom = 1;
        return 0;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t lo = ranges[2 * i], hi = ranges[2 * i + 1];
        if (hi > 0x10FFFF)
            hi = 0x10FFFF;
        if (lo > hi)
            continue;
        r[2 * k] = lo;
        r[2 * k + 1] = hi;
        k++;
    }
    qsort(r, k, 2 * sizeof *r, cmp_range);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1])
                r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i];
            r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    o = malloc((m + 3) * 2 * 2 * sizeof *o);
    if (!o) {
        free(r);
        ir->oom = 1;
        return 0;
    }
    size_t q = 0;
    if (negate) {
        uint32_t next = 0;
        for (size_t i = 0; i < m; i++) {
            if (r[2 * i] > next) {
                o[2 * q] = next;
                o[2 * q + 1] = r[2 * i] - 1;
                q++;
            }
            next = r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) {
            o[2 * q] = next;
            o[2 * q + 1] = 0x10FFFF;
            q++;
        }
    } else {
        memcpy(o, r, m * 2 * sizeof *o);
        q = m;
    }
    free(r);
    /* Drop surrogates D800..DFFF: split ranges that cover them. */
    uint32_t *f = malloc((q + 1) * 2 * sizeof *f);
    size_t nf = 0;
    if (!f) {
        free(o);
        ir->oom = 1;
        return 0;
    }
    for (size_t i = 0; i < q; i++) {
        uint32_t lo = o[2 * i], hi = o[2 * i + 1];
        if (hi < 0xD800 || lo > 0xDFFF) {
            f[2 * nf] = lo, f[2 * nf + 1] = hi, nf++;
            continue;
        }
        if (lo < 0xD800)
            f[2 * nf] = lo, f[2 * nf + 1] = 0xD7FF, nf++;
        if (hi > 0xDFFF)
            f[2 * nf] = 0xE000, f[2 * nf + 1] = hi, nf++;
    }
    free(o);
    if (!nf) {
        free(f);
        return hr__gir_none(ir);
    }
    if (ir->oom || grow((void **)&ir->ranges, &ir->cap_ranges,
                        ir->n_ranges + 2 * (uint32_t)nf, sizeof *ir->ranges)) {
        free(f);
        ir->oom = 1;
        return 0;
    }
    memcpy(ir->ranges + ir->n_ranges, f, nf * 2 * sizeof *f);
    free(f);
    uint32_t at = ir->n_ranges;
    ir->n_ranges += 2 * (uint32_t)nf;
    return node(ir, json ? HR__G_JCHARS : HR__G_CHARS, at, (uint32_t)nf);
}

static uint32_t list(hr__gir *ir, uint8_t kind, const uint32_t *kids, size_t n) {
    if (ir->oom || n > UINT32_MAX / 4 ||
        grow((void **)&ir->kids, &ir->cap_kids, ir->n_kids + (uint32_t)n,
             sizeof *ir->kids)) {
        ir->oom = 1;
        return 0;
    }
    memcpy(ir->kids + ir->n_kids, kids, n * sizeof *kids);
    uint32_t at = ir->n_kids;
    ir->n_kids += (uint32_t)n;
    return node(ir, kind, at, (uint32_t)n);
}

uint32_t hr__gir_seq(hr__gir *ir, const uint32_t *kids, size_t n) {
    if (n == 0)
        return hr__gir_empty(ir);
    if (n == 1)
        return kids[0];
    return list(ir, HR__G_SEQ, kids, n);
}

uint32_t hr__gir_alt(hr__gir *ir, const uint32_t *kids, size_t n) {
    if (n == 0)
        return hr__gir_none(ir);
    if (n == 1)
        return kids[0];
    return list(ir, HR__G_ALT, kids, n);
}

uint32_t hr__gir_seq2(hr__gir *ir, uint32_t a, uint32_t b) {
    uint32_t k[2] = {a, b};
    return hr__gir_seq(ir, k, 2);
}

uint32_t hr__gir_seq3(hr__gir *ir, uint32_t a, uint32_t b, uint32_t c) {
    uint32_t k[3] = {a, b, c};
    return hr__gir_seq(ir, k, 3);
}

uint32_t hr__gir_alt2(hr__gir *ir, uint32_t a, uint32_t b) {
    uint32_t k[2] = {a, b};
    return hr__gir_alt(ir, k, 2);
}

uint32_t hr__gir_rep(hr__gir *ir, uint32_t kid, int32_t min, int32_t max) {
    if (max == 1 && min == 1)
        return kid;
    if (max == 0)
        return hr__gir_empty(ir);
    uint32_t n = node(ir, HR__G_REP, kid, 0);
    if (!ir->oom) {
        ir->nodes[n].min = min;
        ir->nodes[n].max = max;
    }
    return n;
}

uint32_t hr__gir_opt(hr__gir *ir, uint32_t kid) {
    return hr__gir_rep(ir, kid, 0, 1);
}

uint32_t hr__gir_ref(hr__gir *ir, uint32_t rule) {
    return node(ir, HR__G_REF, rule, 0);
}

int32_t hr__gir_rule(hr__gir *ir, const char *name, size_t len) {
    for (uint32_t i = 0; i < ir->n_rules; i++)
        if (strlen(ir->rules[i].name) == len && !memcmp(ir->rules[i].name, name, len))
            return (int32_t)i;
    if (ir->oom || ir->n_rules >= INT32_MAX / 2 ||
        grow((void **)&ir->rules, &ir->cap_rules, ir->n_rules + 1,
             sizeof *ir->rules)) {
        ir->oom = 1;
        return -1;
    }
    char *s = malloc(len + 1);
    if (!s) {
        ir->oom = 1;
        return -1;
    }
    memcpy(s, name, len);
    s[len] = 0;
    ir->rules[ir->n_rules] = (hr__grule){s, -1, -1, 0};
    return (int32_t)ir->n_rules++;
}

int32_t hr__gir_new_rule(hr__gir *ir, const char *prefix) {
    char name[96];
    snprintf(name, sizeof name, "%s#%u", prefix, ir->n_rules);
    return hr__gir_rule(ir, name, strlen(name));
}

void hr__gir_define(hr__gir *ir, int32_t rule, uint32_t body) {
    if (rule >= 0 && (uint32_t)rule < ir->n_rules)
        ir->rules[rule].body = (int32_t)body;
}

int hr__u32v_push(hr__u32v *v, uint32_t x) {
    if (v->n == v->cap) {
        size_t c = v->cap ? v->cap * 2 : 8;
        uint32_t *p = realloc(v->v, c * sizeof *p);
        if (!p)
            return HR_ENOMEM;
        v->v = p;
        v->cap = c;
    }
    v->v[v->n++] = x;
    return 0;
}

void hr__u32v_free(hr__u32v *v) {
    free(v->v);
    v->v = NULL;
    v->n = v->cap = 0;
}
