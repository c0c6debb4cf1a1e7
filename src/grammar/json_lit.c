/* JSON values for the JSON Schema compiler: literals (const/enum), numbers
 * with bounds, strings with lengths, patterns and formats, and the generic
 * "any JSON value". */
#include "grammar/jsonc.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A value as a rule that is never inlined (see hr__grule.noinline). */
static uint32_t value_rule(hr__js *c, uint32_t body, const char *name) {
    int32_t r = hr__gir_new_rule(c->ir, name);
    if (r < 0)
        return 0;
    hr__gir_define(c->ir, r, body);
    c->ir->rules[r].noinline = 1;
    return hr__gir_ref(c->ir, (uint32_t)r);
}

/* ---- small builders ---------------------------------------------------------- */

static uint32_t S(hr__js *c, const char *s) { return hr__gir_str(c->ir, s); }

static uint32_t cls(hr__js *c, uint32_t lo, uint32_t hi) {
    uint32_t r[2] = {lo, hi};
    return hr__gir_chars(c->ir, r, 1, 0, 0);
}

static uint32_t digits(hr__js *c, int min, int max) {
    return hr__gir_rep(c->ir, cls(c, '0', '9'), min, max);
}

uint32_t hr__js_itemsep(hr__js *c) {
    return hr__gir_seq2(c->ir, S(c, ","), hr__gir_opt(c->ir, S(c, " ")));
}

uint32_t hr__js_keysep(hr__js *c) {
    return hr__gir_seq2(c->ir, S(c, ":"), hr__gir_opt(c->ir, S(c, " ")));
}

static uint32_t jchar_all(hr__js *c) {
    uint32_t r[2] = {0, 0x10FFFF};
    return hr__gir_chars(c->ir, r, 1, 0, 1);
}

/* ---- generic JSON --------------------------------------------------------------- */

static uint32_t plain_number(hr__js *c) {
    /* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
    uint32_t in = hr__gir_alt2(c->ir, S(c, "0"), hr__gir_seq2(c->ir, cls(c, '1', '9'), digits(c, 0, -1)));
    uint32_t frac = hr__gir_opt(c->ir, hr__gir_seq2(c->ir, S(c, "."), digits(c, 1, -1)));
    uint32_t sgn[2] = {'+', '+'};
    uint32_t pm = hr__gir_chars(c->ir, sgn, 1, 0, 0);
    uint32_t pmr[4] = {'+', '+', '-', '-'};
    pm = hr__gir_chars(c->ir, pmr, 2, 0, 0);
    uint32_t er[4] = {'E', 'E', 'e', 'e'};
    uint32_t exp = hr__gir_opt(c->ir, hr__gir_seq3(c->ir, hr__gir_chars(c->ir, er, 2, 0, 0),
                                                   hr__gir_opt(c->ir, pm), digits(c, 1, -1)));
    uint32_t k[4] = {hr__gir_opt(c->ir, S(c, "-")), in, frac, exp};
    return hr__gir_seq(c->ir, k, 4);
}

static uint32_t plain_string(hr__js *c) {
    return hr__gir_seq3(c->ir, S(c, "\""), hr__gir_rep(c->ir, jchar_all(c), 0, -1), S(c, "\""));
}

uint32_t hr__js_value(hr__js *c) {
    if (c->r_value >= 0)
        return hr__gir_ref(c->ir, (uint32_t)c->r_value);
    hr__gir *ir = c->ir;
    c->r_value = hr__gir_new_rule(ir, "value");
    if (c->r_value < 0)
        return 0;
    uint32_t v = hr__gir_ref(ir, (uint32_t)c->r_value);
    uint32_t str = plain_string(c);
    uint32_t kv = hr__gir_seq3(ir, str, hr__js_keysep(c), v);
    uint32_t obj = hr__gir_seq3(ir, S(c, "{"),
                                hr__gir_opt(ir, hr__gir_seq2(ir, kv, hr__gir_rep(ir, hr__gir_seq2(ir, hr__js_itemsep(c), kv), 0, -1))),
                                S(c, "}"));
    uint32_t arr = hr__gir_seq3(ir, S(c, "["),
                                hr__gir_opt(ir, hr__gir_seq2(ir, v, hr__gir_rep(ir, hr__gir_seq2(ir, hr__js_itemsep(c), v), 0, -1))),
                                S(c, "]"));
    uint32_t k[7] = {obj, arr, plain_string(c), plain_number(c), S(c, "true"), S(c, "false"), S(c, "null")};
    hr__gir_define(ir, c->r_value, hr__gir_alt(ir, k, 7));
    return v;
}

/* ---- literals ---------------------------------------------------------------------- */

/* Canonical body of a JSON string (json.dumps, ensure_ascii=False). */
static int put_key(hr__u32v *tmp, char *out, size_t *o, const char *s, size_t n) {
    (void)tmp;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        const char *e = NULL;
        switch (ch) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case 8: e = "\\b"; break;
        case 12: e = "\\f"; break;
        }
        if (e) {
            memcpy(out + *o, e, 2);
            *o += 2;
        } else if (ch < 0x20) {
            *o += (size_t)sprintf(out + *o, "\\u%04x", ch);
        } else {
            out[(*o)++] = (char)ch;
        }
    }
    return 0;
}

uint32_t hr__js_key(hr__js *c, const char *s, size_t n) {
    char *buf = malloc(n * 6 + 1);
    if (!buf) {
        c->ir->oom = 1;
        return 0;
    }
    size_t o = 0;
    put_key(NULL, buf, &o, s, n);
    uint32_t r = hr__gir_bytes(c->ir, buf, o);
    free(buf);
    return r;
}

/* Python's repr of a float: shortest round trip; exponent form when the
 * decimal exponent is < -4 or >= 16; otherwise fixed with at least ".0". */
void hr__py_float(double x, char *out, size_t cap) {
    char tmp[64];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, x);
        if (strtod(tmp, NULL) == x)
            break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    const char *q = tmp;
    int neg = *q == '-';
    if (neg)
        q++;
    char dig[32];
    int nd = 0;
    for (; *q && *q != 'e'; q++)
        if (*q != '.')
            dig[nd++] = *q;
    int ex = atoi(q + 1);
    while (nd > 1 && dig[nd - 1] == '0')
        nd--;
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (ex < -4 || ex >= 16) {
        out[o++] = dig[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++)
                out[o++] = dig[i];
        }
        snprintf(out + o, cap - o, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
        return;
    }
    if (ex < 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -ex - 1; i++)
            out[o++] = '0';
        for (int i = 0; i < nd; i++)
            out[o++] = dig[i];
    } else {
        for (int i = 0; i <= ex; i++)
            out[o++] = i < nd ? dig[i] : '0';
        out[o++] = '.';
        if (nd > ex + 1)
            for (int i = ex + 1; i < nd; i++)
                out[o++] = dig[i];
        else
            out[o++] = '0';
    }
    out[o] = 0;
}

uint32_t hr__js_literal(hr__js *c, const json_t *v) {
    hr__gir *ir = c->ir;
    char buf[64];
    switch (json_typeof(v)) {
    case JSON_NULL:
        return S(c, "null");
    case JSON_TRUE:
        return S(c, "true");
    case JSON_FALSE:
        return S(c, "false");
    case JSON_INTEGER:
        /* 1 and 1.0 are equal for const/enum */
        snprintf(buf, sizeof buf, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return hr__gir_seq2(ir, S(c, buf), hr__gir_opt(ir, S(c, ".0")));
    case JSON_REAL: {
        double x = json_real_value(v);
        hr__py_float(x, buf, sizeof buf);
        uint32_t r = S(c, buf);
        if (x == floor(x) && fabs(x) < 9e15) {
            char ib[32];
            snprintf(ib, sizeof ib, "%lld", (long long)x);
            r = hr__gir_alt2(ir, r, S(c, ib));
        }
        return r;
    }
    case JSON_STRING:
        return hr__gir_seq3(ir, S(c, "\""), hr__js_key(c, json_string_value(v), json_string_length(v)),
                            S(c, "\""));
    case JSON_ARRAY: {
        hr__u32v k = {0};
        hr__gir_push(c->ir, &k, S(c, "["));
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                hr__gir_push(c->ir, &k, hr__js_itemsep(c));
            hr__gir_push(c->ir, &k, hr__js_literal(c, json_array_get(v, i)));
        }
        if (hr__u32v_push(&k, S(c, "]")))
            ir->oom = 1;
        uint32_t r = hr__gir_seq(ir, k.v, k.n);
        hr__u32v_free(&k);
        return r;
    }
    case JSON_OBJECT: {
        hr__u32v k = {0};
        const char *key;
        json_t *val;
        int first = 1;
        hr__gir_push(c->ir, &k, S(c, "{"));
        json_object_foreach((json_t *)v, key, val) {
            if (!first)
                hr__gir_push(c->ir, &k, hr__js_itemsep(c));
            first = 0;
            hr__gir_push(c->ir, &k, S(c, "\""));
            hr__gir_push(c->ir, &k, hr__js_key(c, key, strlen(key)));
            hr__gir_push(c->ir, &k, S(c, "\""));
            hr__gir_push(c->ir, &k, hr__js_keysep(c));
            hr__gir_push(c->ir, &k, hr__js_literal(c, val));
        }
        if (hr__u32v_push(&k, S(c, "}")))
            ir->oom = 1;
        uint32_t r = hr__gir_seq(ir, k.v, k.n);
        hr__u32v_free(&k);
        return r;
    }
    }
    return hr__gir_none(ir);
}

/* ---- keys not in a set -------------------------------------------------------------- */

typedef struct knode {
    uint32_t cp;
    int terminal;
    struct knode *kid, *next;
} knode;

static void knode_free(knode *n) {
    while (n) {
        knode *x = n->next;
        knode_free(n->kid);
        free(n);
        n = x;
    }
}

static int dec(const char *s, size_t n, size_t *i, uint32_t *cp) {
    unsigned char c = (unsigned char)s[*i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
    if (*i + (size_t)len > n)
        len = 1;
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; k++)
        v = v << 6 | ((unsigned char)s[*i + (size_t)k] & 0x3F);
    *i += (size_t)len;
    *cp = v;
    return 0;
}

static uint32_t knot(hr__js *c, const knode *n, int terminal, uint32_t free_tail) {
    hr__gir *ir = c->ir;
    hr__u32v alts = {0}, ex = {0};
    if (!terminal)
        hr__gir_push(c->ir, &alts, hr__gir_empty(ir));
    for (const knode *k = n; k; k = k->next) {
        uint32_t r[2] = {k->cp, k->cp};
        hr__gir_push(c->ir, &alts, hr__gir_seq2(ir, hr__gir_chars(ir, r, 1, 0, 1),
                                          knot(c, k->kid, k->terminal, free_tail)));
        hr__gir_push(c->ir, &ex, k->cp);
        hr__gir_push(c->ir, &ex, k->cp);
    }
    hr__gir_push(c->ir, &alts, hr__gir_seq2(ir, hr__gir_chars(ir, ex.v, ex.n / 2, 1, 1), free_tail));
    if (alts.n == 0 || ex.n % 2)
        ir->oom = 1;
    uint32_t r = hr__gir_alt(ir, alts.v, alts.n);
    hr__u32v_free(&alts);
    hr__u32v_free(&ex);
    return r;
}

uint32_t hr__js_key_not_in(hr__js *c, const char *const *names, const size_t *lens,
                           size_t n) {
    knode root = {0};
    int root_terminal = 0;
    for (size_t i = 0; i < n; i++) {
        knode *at = &root;
        int *term = &root_terminal;
        for (size_t j = 0; j < lens[i];) {
            uint32_t cp;
            dec(names[i], lens[i], &j, &cp);
            knode *k = at->kid;
            while (k && k->cp != cp)
                k = k->next;
            if (!k) {
                k = calloc(1, sizeof *k);
                if (!k) {
                    c->ir->oom = 1;
                    knode_free(root.kid);
                    return 0;
                }
                k->cp = cp;
                k->next = at->kid;
                at->kid = k;
            }
            at = k;
            term = &k->terminal;
        }
        *term = 1;
    }
    uint32_t tail = hr__gir_rep(c->ir, jchar_all(c), 0, -1);
    uint32_t r = knot(c, root.kid, root_terminal, tail);
    knode_free(root.kid);
    return r;
}

/* ---- numbers -------------------------------------------------------------------------- */

/* Decimal strings of length n with value in [a, b] (digit strings of length
 * n, leading zeros allowed). */
static uint32_t dig_range(hr__js *c, const char *a, const char *b, int n);

static uint32_t dig_ge(hr__js *c, const char *a, int n) {
    if (n == 0)
        return hr__gir_empty(c->ir);
    uint32_t first = hr__gir_seq2(c->ir, cls(c, (uint32_t)a[0], (uint32_t)a[0]), dig_ge(c, a + 1, n - 1));
    if (a[0] == '9')
        return first;
    return hr__gir_alt2(c->ir, first, hr__gir_seq2(c->ir, cls(c, (uint32_t)a[0] + 1, '9'), digits(c, n - 1, n - 1)));
}

static uint32_t dig_le(hr__js *c, const char *b, int n, char lowest) {
    if (n == 0)
        return hr__gir_empty(c->ir);
    uint32_t first = hr__gir_seq2(c->ir, cls(c, (uint32_t)b[0], (uint32_t)b[0]), dig_le(c, b + 1, n - 1, '0'));
    if (b[0] == lowest)
        return first;
    return hr__gir_alt2(c->ir, first,
                        hr__gir_seq2(c->ir, cls(c, (uint32_t)lowest, (uint32_t)b[0] - 1), digits(c, n - 1, n - 1)));
}

static uint32_t dig_range(hr__js *c, const char *a, const char *b, int n) {
    if (n == 0)
        return hr__gir_empty(c->ir);
    if (a[0] == b[0])
        return hr__gir_seq2(c->ir, cls(c, (uint32_t)a[0], (uint32_t)a[0]), dig_range(c, a + 1, b + 1, n - 1));
    hr__u32v k = {0};
    hr__gir_push(c->ir, &k, hr__gir_seq2(c->ir, cls(c, (uint32_t)a[0], (uint32_t)a[0]), dig_ge(c, a + 1, n - 1)));
    if (b[0] - a[0] > 1)
        hr__gir_push(c->ir, &k, hr__gir_seq2(c->ir, cls(c, (uint32_t)a[0] + 1, (uint32_t)b[0] - 1), digits(c, n - 1, n - 1)));
    if (hr__u32v_push(&k, hr__gir_seq2(c->ir, cls(c, (uint32_t)b[0], (uint32_t)b[0]), dig_le(c, b + 1, n - 1, '0'))))
        c->ir->oom = 1;
    uint32_t r = hr__gir_alt(c->ir, k.v, k.n);
    hr__u32v_free(&k);
    return r;
}

/* Canonical naturals (no leading zeros) of exactly n digits. */
static uint32_t nat_len(hr__js *c, int n) {
    if (n == 1)
        return cls(c, '0', '9');
    return hr__gir_seq2(c->ir, cls(c, '1', '9'), digits(c, n - 1, n - 1));
}

/* Canonical naturals in [lo, hi]; hi < 0: unbounded. */
static uint32_t nat_range(hr__js *c, long long lo, long long hi) {
    char a[24], b[24];
    int na = snprintf(a, sizeof a, "%lld", lo);
    hr__u32v k = {0};
    if (hi < 0) {
        if (lo == 0) {
            hr__u32v_free(&k);
            return hr__gir_alt2(c->ir, S(c, "0"), hr__gir_seq2(c->ir, cls(c, '1', '9'), digits(c, 0, -1)));
        }
        hr__gir_push(c->ir, &k, dig_ge(c, a, na));
        hr__gir_push(c->ir, &k, hr__gir_seq2(c->ir, cls(c, '1', '9'), digits(c, na, -1)));
    } else {
        int nb = snprintf(b, sizeof b, "%lld", hi);
        if (na == nb) {
            hr__gir_push(c->ir, &k, dig_range(c, a, b, na));
        } else {
            hr__gir_push(c->ir, &k, na == 1 ? cls(c, (uint32_t)a[0], '9') : dig_ge(c, a, na));
            for (int len = na + 1; len < nb; len++)
                hr__gir_push(c->ir, &k, nat_len(c, len));
            hr__gir_push(c->ir, &k, dig_le(c, b, nb, '1'));
        }
    }
    uint32_t r = hr__gir_alt(c->ir, k.v, k.n);
    hr__u32v_free(&k);
    return r;
}

#define BOUND_MAX 1000000000000000000LL /* 1e18 */

typedef struct bound {
    int set, incl;
    double v;
} bound;

static int get_bounds(hr__js *c, const json_t *s, bound *lo, bound *hi) {
    memset(lo, 0, sizeof *lo);
    memset(hi, 0, sizeof *hi);
    json_t *x;
    if ((x = json_object_get(s, "minimum")) && json_is_number(x))
        lo->set = 1, lo->incl = 1, lo->v = json_number_value(x);
    if ((x = json_object_get(s, "maximum")) && json_is_number(x))
        hi->set = 1, hi->incl = 1, hi->v = json_number_value(x);
    x = json_object_get(s, "exclusiveMinimum");
    if (x && json_is_true(x) && lo->set)
        lo->incl = 0;
    else if (x && json_is_number(x) && (!lo->set || json_number_value(x) >= lo->v))
        lo->set = 1, lo->incl = 0, lo->v = json_number_value(x);
    x = json_object_get(s, "exclusiveMaximum");
    if (x && json_is_true(x) && hi->set)
        hi->incl = 0;
    else if (x && json_is_number(x) && (!hi->set || json_number_value(x) <= hi->v))
        hi->set = 1, hi->incl = 0, hi->v = json_number_value(x);
    if ((lo->set && fabs(lo->v) > (double)BOUND_MAX) || (hi->set && fabs(hi->v) > (double)BOUND_MAX))
        return hr__js_fail(c, HR_EUNSUPPORTED, "a numeric bound beyond 1e18 is not supported");
    return 0;
}

/* Integers in [lo, hi] (each may be unset). */
static uint32_t int_range(hr__js *c, int has_lo, long long lo, int has_hi, long long hi) {
    hr__gir *ir = c->ir;
    if (has_lo && has_hi && lo > hi)
        return hr__gir_none(ir);
    hr__u32v k = {0};
    /* non-negative part */
    if (!has_hi || hi >= 0)
        hr__gir_push(c->ir, &k, nat_range(c, has_lo && lo > 0 ? lo : 0, has_hi ? hi : -1));
    /* negative part: magnitudes in [max(1, -hi), -lo] */
    if (!has_lo || lo < 0) {
        long long mlo = has_hi && hi < 0 ? -hi : 1;
        hr__gir_push(c->ir, &k, hr__gir_seq2(ir, S(c, "-"), nat_range(c, mlo, has_lo ? -lo : -1)));
    }
    uint32_t r = hr__gir_alt(ir, k.v, k.n);
    hr__u32v_free(&k);
    return r;
}

/* Non-negative decimals (no exponent) with value in (L,H) / [L,H]; L, H
 * integers >= 0, H < 0: unbounded. */
static uint32_t dec_nonneg(hr__js *c, long long L, int incL, long long H, int incH) {
    hr__gir *ir = c->ir;
    uint32_t any = hr__gir_opt(ir, hr__gir_seq2(ir, S(c, "."), digits(c, 1, -1)));
    uint32_t zero = hr__gir_opt(ir, hr__gir_seq2(ir, S(c, "."), hr__gir_rep(ir, S(c, "0"), 1, -1)));
    uint32_t nz = hr__gir_seq(ir, (uint32_t[]){S(c, "."), digits(c, 0, -1), cls(c, '1', '9'), digits(c, 0, -1)}, 4);
    hr__u32v k = {0};
    long long lowI = incL ? L : L + 1;
    if (H < 0) {
        hr__gir_push(c->ir, &k, hr__gir_seq2(ir, nat_range(c, lowI, -1), any));
    } else {
        if (lowI <= H - 1)
            hr__gir_push(c->ir, &k, hr__gir_seq2(ir, nat_range(c, lowI, H - 1), any));
        if (incH && H >= lowI)
            hr__gir_push(c->ir, &k, hr__gir_seq2(ir, nat_range(c, H, H), zero));
    }
    if (!incL && (H < 0 || L < H))
        hr__gir_push(c->ir, &k, hr__gir_seq2(ir, nat_range(c, L, L), nz));
    uint32_t r = hr__gir_alt(ir, k.v, k.n);
    hr__u32v_free(&k);
    return r;
}

static uint32_t number(hr__js *c, const json_t *s, int integer) {
    hr__gir *ir = c->ir;
    if (json_object_get(s, "multipleOf")) {
        json_t *m = json_object_get(s, "multipleOf");
        if (!(integer && json_is_number(m) && json_number_value(m) == 1))
            return hr__js_fail(c, HR_EUNSUPPORTED, "keyword 'multipleOf' is not supported"), 0;
    }
    bound lo, hi;
    if (get_bounds(c, s, &lo, &hi))
        return 0;
    if (integer) {
        if (!lo.set && !hi.set)
            return hr__gir_alt2(ir, S(c, "0"), hr__gir_seq3(ir, hr__gir_opt(ir, S(c, "-")), cls(c, '1', '9'), digits(c, 0, -1)));
        long long a = 0, b = 0;
        if (lo.set) {
            double v = ceil(lo.v);
            a = (long long)v;
            if (!lo.incl && v == lo.v)
                a++;
        }
        if (hi.set) {
            double v = floor(hi.v);
            b = (long long)v;
            if (!hi.incl && v == hi.v)
                b--;
        }
        return int_range(c, lo.set, a, hi.set, b);
    }
    if (!lo.set && !hi.set)
        return plain_number(c);
    if ((lo.set && lo.v != floor(lo.v)) || (hi.set && hi.v != floor(hi.v)))
        return hr__js_fail(c, HR_EUNSUPPORTED, "a non-integer minimum/maximum on a "
                           "number is not supported"), 0;
    long long L = (long long)lo.v, H = (long long)hi.v;
    if (lo.set && hi.set && (L > H || (L == H && !(lo.incl && hi.incl))))
        return hr__gir_none(ir);
    hr__u32v k = {0};
    /* v >= 0 */
    if (!hi.set || H > 0 || (H == 0 && hi.incl)) {
        long long nl = lo.set && L >= 0 ? L : 0;
        int nincl = lo.set && L >= 0 ? lo.incl : 1;
        hr__gir_push(c->ir, &k, dec_nonneg(c, nl, nincl, hi.set ? H : -1, hi.incl));
    }
    /* v < 0: magnitude m = -v in (max(0,-H) .., -L] */
    if (!lo.set || L < 0) {
        long long ml = hi.set && H < 0 ? -H : 0;
        int mincl = hi.set && H < 0 ? hi.incl : 0;
        hr__gir_push(c->ir, &k, hr__gir_seq2(ir, S(c, "-"), dec_nonneg(c, ml, mincl, lo.set ? -L : -1, lo.incl)));
    }
    uint32_t r = hr__gir_alt(ir, k.v, k.n);
    hr__u32v_free(&k);
    return r;
}

/* ---- strings ------------------------------------------------------------------------ */

/* Formats as regexes over the decoded string (dates are checked per month,
 * with leap years; no leap seconds; a time zone is required). */
#define DATE "([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)"
#define TIME "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?"
#define TZ "([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
static const struct { const char *name, *re; } FORMATS[] = {
    {"date-time", "^" DATE "[Tt]" TIME TZ "$"},
    {"date", "^" DATE "$"},
    {"time", "^" TIME TZ "$"},
    {"email",
     "^[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]+)*@([a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?\\.)+[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    {"ipv4", "^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$"},
};

/* The formats JSON Schema defines (2020-12 and earlier drafts): one we do
 * not implement is refused. Any other name is an annotation that
 * validators do not check (OpenAPI's "int32", "byte", tool-specific names):
 * ignored. */
static const char *const STD_FORMATS[] = {
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname",
    "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference",
    "uuid", "uri-template", "json-pointer", "relative-json-pointer", "regex",
    "host-name", "ip-address", "color", "style", "phone", "utc-millisec",
};

uint32_t hr__js_string(hr__js *c, const json_t *s) {
    hr__gir *ir = c->ir;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    json_t *mn = json_object_get(s, "minLength"), *mx = json_object_get(s, "maxLength");
    long long lo = mn && json_is_number(mn) ? (long long)ceil(json_number_value(mn)) : 0;
    long long hi = mx && json_is_number(mx) ? (long long)floor(json_number_value(mx)) : -1;
    const char *re = NULL;
    if (fmt && json_is_string(fmt)) {
        for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
            if (!strcmp(json_string_value(fmt), FORMATS[i].name))
                re = FORMATS[i].re;
        for (size_t i = 0; !re && i < sizeof STD_FORMATS / sizeof STD_FORMATS[0]; i++)
            if (!strcmp(json_string_value(fmt), STD_FORMATS[i]))
                return hr__js_fail(c, HR_EUNSUPPORTED, "format '%s' is not supported",
                                   json_string_value(fmt)), 0;
    }
    if (pat && !json_is_string(pat))
        return hr__js_fail(c, HR_EINVAL, "'pattern' must be a string"), 0;
    if (pat && re)
        return hr__js_fail(c, HR_EUNSUPPORTED, "'pattern' together with 'format' is not supported"), 0;
    if (pat)
        re = json_string_value(pat);
    if (re && (lo > 0 || hi >= 0))
        return hr__js_fail(c, HR_EUNSUPPORTED, "'minLength'/'maxLength' together with "
                           "'pattern' or 'format' is not supported"), 0;
    if (hi > HR__G_MAX_REP || lo > HR__G_MAX_REP)
        return hr__js_fail(c, HR_EUNSUPPORTED, "string length bounds above %d are not "
                           "supported", HR__G_MAX_REP), 0;
    if (hi >= 0 && hi < lo)
        return hr__gir_none(ir);
    uint32_t body;
    if (re) {
        hr_error e2;
        int rc = hr__regex_ir(ir, re, strlen(re), 1, &body, &e2);
        if (rc)
            return hr__js_fail(c, rc, "%s", e2.msg), 0;
    } else {
        body = hr__gir_rep(ir, jchar_all(c), (int32_t)lo, (int32_t)hi);
    }
    return value_rule(c, hr__gir_seq3(ir, S(c, "\""), body, S(c, "\"")), "string");
}

uint32_t hr__js_number(hr__js *c, const json_t *s, int integer) {
    uint32_t n = number(c, s, integer);
    return c->rc ? 0 : value_rule(c, n, integer ? "integer" : "number");
}
