/* Jinja values: allocation, reference counting, Python equality/ordering,
 * str() and repr(). */
#include "chat/jinja_value.h"
#include "core/error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- allocation --------------------------------------------------------- */

static hr_jv oom(void) { return (hr_jv){.type = HR_JV_UNDEF, .flags = HR_JV_OOM}; }

int hr__jv_oom(hr_jv v) { return v.type == HR_JV_UNDEF && (v.flags & HR_JV_OOM); }

hr_jv hr__jv_str(const char *s, size_t len) {
    hr_jstr *p = malloc(sizeof *p + len + 1);
    if (!p)
        return oom();
    p->rc = 1;
    p->ncp = -1;
    p->len = len;
    if (len)
        memcpy(p->s, s, len);
    p->s[len] = 0;
    return (hr_jv){.type = HR_JV_STR, .u.s = p};
}

hr_jv hr__jv_cstr(const char *s) { return hr__jv_str(s, strlen(s)); }

hr_jv hr__jv_undef_hint(const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof tmp)
        n = sizeof tmp - 1;
    hr_jv s = hr__jv_str(tmp, (size_t)n);
    if (hr__jv_oom(s))
        return s;
    return (hr_jv){.type = HR_JV_UNDEF, .u.s = s.u.s};
}

hr_jv hr__jv_list(size_t cap) {
    hr_jlist *l = calloc(1, sizeof *l);
    if (!l)
        return oom();
    l->rc = 1;
    l->depth = 1;
    if (cap) {
        l->v = malloc(cap * sizeof *l->v);
        if (!l->v) {
            free(l);
            return oom();
        }
        l->cap = cap;
    }
    return (hr_jv){.type = HR_JV_LIST, .u.l = l};
}

hr_jv hr__jv_dict(size_t cap) {
    hr_jdict *d = calloc(1, sizeof *d);
    if (!d)
        return oom();
    d->rc = 1;
    d->depth = 1;
    if (cap) {
        d->k = malloc(cap * sizeof *d->k);
        d->v = malloc(cap * sizeof *d->v);
        if (!d->k || !d->v) {
            free(d->k);
            free(d->v);
            free(d);
            return oom();
        }
        d->cap = cap;
    }
    return (hr_jv){.type = HR_JV_DICT, .u.d = d};
}

hr_jv hr__jv_func(int kind, const char *name) {
    hr_jfunc *f = calloc(1, sizeof *f);
    if (!f)
        return oom();
    f->rc = 1;
    f->kind = kind;
    f->name = name;
    return (hr_jv){.type = HR_JV_FUNC, .u.fn = f};
}

hr_jv hr__jv_ref(hr_jv v) {
    switch (v.type) {
    case HR_JV_STR:
    case HR_JV_UNDEF:
        if (v.u.s && v.u.s->rc >= 0)
            v.u.s->rc++;
        break;
    case HR_JV_LIST: v.u.l->rc++; break;
    case HR_JV_DICT: v.u.d->rc++; break;
    case HR_JV_FUNC: v.u.fn->rc++; break;
    default: break;
    }
    return v;
}

void hr__jv_unref(hr_jv v) {
    switch (v.type) {
    case HR_JV_STR:
    case HR_JV_UNDEF:
        if (v.u.s && v.u.s->rc > 0 && --v.u.s->rc == 0)
            free(v.u.s);
        break;
    case HR_JV_LIST:
        if (--v.u.l->rc == 0) {
            for (size_t i = 0; i < v.u.l->n; i++)
                hr__jv_unref(v.u.l->v[i]);
            free(v.u.l->v);
            free(v.u.l);
        }
        break;
    case HR_JV_DICT:
        if (--v.u.d->rc == 0) {
            hr__jv_dict_clear(v);
            free(v.u.d->k);
            free(v.u.d->v);
            free(v.u.d);
        }
        break;
    case HR_JV_FUNC:
        if (--v.u.fn->rc == 0) {
            hr__jv_unref(v.u.fn->self);
            hr__jv_unref(v.u.fn->extra);
            free(v.u.fn);
        }
        break;
    default:
        break;
    }
}

/* ---- lists and dicts ------------------------------------------------------ */

static int child_depth(hr_jv v) {
    if (v.type == HR_JV_LIST)
        return v.u.l->depth;
    if (v.type == HR_JV_DICT)
        return (v.flags & HR_JV_NS) ? 1 : v.u.d->depth;
    return 0;
}

int hr__jv_list_push(hr_jv list, hr_jv item) {
    hr_jlist *l = list.u.l;
    int d = child_depth(item) + 1;
    if (d > HR_JV_MAX_DEPTH) {
        hr__jv_unref(item);
        return HR_ERANGE;
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        hr_jv *p = realloc(l->v, cap * sizeof *p);
        if (!p) {
            hr__jv_unref(item);
            return HR_ENOMEM;
        }
        l->v = p;
        l->cap = cap;
    }
    l->v[l->n++] = item;
    if (d > l->depth)
        l->depth = d;
    return 0;
}

hr_jv *hr__jv_dict_get(hr_jv dict, hr_jv key) {
    hr_jdict *d = dict.u.d;
    for (size_t i = 0; i < d->n; i++)
        if (hr__jv_equal(d->k[i], key))
            return &d->v[i];
    return NULL;
}

hr_jv *hr__jv_dict_getc(hr_jv dict, const char *key) {
    hr_jdict *d = dict.u.d;
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].type == HR_JV_STR && d->k[i].u.s->len == n &&
            !memcmp(d->k[i].u.s->s, key, n))
            return &d->v[i];
    return NULL;
}

int hr__jv_dict_set(hr_jv dict, hr_jv key, hr_jv value) {
    hr_jdict *d = dict.u.d;
    int depth = child_depth(value) + 1;
    if (depth > HR_JV_MAX_DEPTH && !(dict.flags & HR_JV_NS)) {
        hr__jv_unref(key);
        hr__jv_unref(value);
        return HR_ERANGE;
    }
    hr_jv *old = hr__jv_dict_get(dict, key);
    if (old) {
        hr__jv_unref(key);
        hr__jv_unref(*old);
        *old = value;
    } else {
        if (d->n == d->cap) {
            size_t cap = d->cap ? d->cap * 2 : 4;
            hr_jv *k = realloc(d->k, cap * sizeof *k);
            if (k)
                d->k = k;
            hr_jv *v = k ? realloc(d->v, cap * sizeof *v) : NULL;
            if (!v) {
                hr__jv_unref(key);
                hr__jv_unref(value);
                return HR_ENOMEM;
            }
            d->v = v;
            d->cap = cap;
        }
        d->k[d->n] = key;
        d->v[d->n++] = value;
    }
    if (depth > d->depth)
        d->depth = depth;
    return 0;
}

void hr__jv_dict_clear(hr_jv dict) {
    hr_jdict *d = dict.u.d;
    size_t n = d->n;
    d->n = 0; /* first, so a cycle back into this dict sees it empty */
    for (size_t i = 0; i < n; i++) {
        hr__jv_unref(d->k[i]);
        hr__jv_unref(d->v[i]);
    }
}

/* ---- Python semantics ----------------------------------------------------- */

int hr__jv_truthy(hr_jv v) {
    switch (v.type) {
    case HR_JV_BOOL: return v.u.b;
    case HR_JV_INT: return v.u.i != 0;
    case HR_JV_FLOAT: return v.u.f != 0.0;
    case HR_JV_STR: return v.u.s->len != 0;
    case HR_JV_LIST: return (v.flags & HR_JV_GEN) || v.u.l->n != 0;
    case HR_JV_DICT: return (v.flags & HR_JV_NS) || v.u.d->n != 0;
    case HR_JV_FUNC: return 1;
    default: return 0;
    }
}

int hr__jv_is_number(hr_jv v) {
    return v.type == HR_JV_INT || v.type == HR_JV_FLOAT || v.type == HR_JV_BOOL;
}

double hr__jv_as_double(hr_jv v) {
    switch (v.type) {
    case HR_JV_INT: return (double)v.u.i;
    case HR_JV_FLOAT: return v.u.f;
    case HR_JV_BOOL: return v.u.b;
    default: return 0;
    }
}

static int num_cmp(hr_jv a, hr_jv b) {
    if (a.type != HR_JV_FLOAT && b.type != HR_JV_FLOAT) {
        int64_t x = a.type == HR_JV_BOOL ? a.u.b : a.u.i;
        int64_t y = b.type == HR_JV_BOOL ? b.u.b : b.u.i;
        return (x > y) - (x < y);
    }
    double x = hr__jv_as_double(a), y = hr__jv_as_double(b);
    if (x != x || y != y)
        return 2; /* unordered */
    return (x > y) - (x < y);
}

static int equal_depth(hr_jv a, hr_jv b, int depth) {
    if (depth > HR_JV_MAX_DEPTH + 8)
        return 0;
    if (hr__jv_is_number(a) && hr__jv_is_number(b))
        return num_cmp(a, b) == 0;
    if (a.type != b.type)
        return 0;
    switch (a.type) {
    case HR_JV_UNDEF:
    case HR_JV_NONE:
        return 1;
    case HR_JV_STR:
        return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case HR_JV_LIST:
        if ((a.flags | b.flags) & HR_JV_GEN)
            return a.u.l == b.u.l;
        if ((a.flags & HR_JV_TUPLE) != (b.flags & HR_JV_TUPLE) || a.u.l->n != b.u.l->n)
            return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_depth(a.u.l->v[i], b.u.l->v[i], depth + 1))
                return 0;
        return 1;
    case HR_JV_DICT:
        if ((a.flags & HR_JV_NS) || (b.flags & HR_JV_NS))
            return a.u.d == b.u.d;
        if (a.u.d->n != b.u.d->n)
            return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            hr_jv *o = hr__jv_dict_get(b, a.u.d->k[i]);
            if (!o || !equal_depth(a.u.d->v[i], *o, depth + 1))
                return 0;
        }
        return 1;
    case HR_JV_FUNC:
        return a.u.fn == b.u.fn;
    default:
        return 0;
    }
}

int hr__jv_equal(hr_jv a, hr_jv b) { return equal_depth(a, b, 0); }

static int compare_depth(hr_jv a, hr_jv b, int *out, int depth) {
    if (depth > HR_JV_MAX_DEPTH + 8)
        return HR_ERANGE;
    if (hr__jv_is_number(a) && hr__jv_is_number(b)) {
        int c = num_cmp(a, b);
        *out = c == 2 ? 2 : c;
        return 0;
    }
    if (a.type == HR_JV_STR && b.type == HR_JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        if (!c)
            c = (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
        *out = (c > 0) - (c < 0);
        return 0;
    }
    if (a.type == HR_JV_LIST && b.type == HR_JV_LIST &&
        (a.flags & HR_JV_TUPLE) == (b.flags & HR_JV_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (hr__jv_equal(a.u.l->v[i], b.u.l->v[i]))
                continue;
            return compare_depth(a.u.l->v[i], b.u.l->v[i], out, depth + 1);
        }
        *out = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return 0;
    }
    return HR_EINVAL;
}

int hr__jv_compare(hr_jv a, hr_jv b, int *out) { return compare_depth(a, b, out, 0); }

const char *hr__jv_type_name(hr_jv v) {
    switch (v.type) {
    case HR_JV_UNDEF: return "Undefined";
    case HR_JV_NONE: return "NoneType";
    case HR_JV_BOOL: return "bool";
    case HR_JV_INT: return "int";
    case HR_JV_FLOAT: return "float";
    case HR_JV_STR: return "str";
    case HR_JV_LIST: return (v.flags & HR_JV_TUPLE) ? "tuple" : "list";
    case HR_JV_DICT: return (v.flags & HR_JV_NS) ? "Namespace" : "dict";
    case HR_JV_FUNC: return "function";
    }
    return "object";
}

/* ---- UTF-8 ----------------------------------------------------------------- */

uint32_t hr__utf8_next(const char *s, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    uint32_t c = p[0];
    if (c < 0x80) {
        *i += 1;
        return c;
    }
    if (c < 0xE0) {
        *i += 2;
        return ((c & 0x1F) << 6) | (p[1] & 0x3F);
    }
    if (c < 0xF0) {
        *i += 3;
        return ((c & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    }
    *i += 4;
    return ((c & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
           ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

size_t hr__utf8_check(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0)
            return i + 1;
        i += (size_t)k;
    }
    return 0;
}

int hr__py_isspace(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

size_t hr__jv_strlen(hr_jv s) {
    hr_jstr *p = s.u.s;
    if (p->ncp < 0) {
        int64_t n = 0;
        for (size_t i = 0; i < p->len; i++)
            n += ((unsigned char)p->s[i] & 0xC0) != 0x80;
        p->ncp = n;
    }
    return (size_t)p->ncp;
}

size_t hr__jv_cp_offset(hr_jv s, size_t idx) {
    hr_jstr *p = s.u.s;
    if ((int64_t)p->len == p->ncp)
        return idx < p->len ? idx : p->len;
    size_t i = 0;
    while (idx && i < p->len) {
        hr__utf8_next(p->s, &i);
        idx--;
    }
    return i;
}

/* ---- buffers ----------------------------------------------------------------- */

void hr__jbuf_init(hr_jbuf *b, size_t max) {
    memset(b, 0, sizeof *b);
    b->max = max ? max : (size_t)1 << 30;
}

void hr__jbuf_free(hr_jbuf *b) {
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

static int reserve(hr_jbuf *b, size_t n) {
    if (b->failed)
        return 0;
    if (n > b->max - b->len || b->len + n > b->max) {
        b->failed = 2;
        return 0;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return 0;
        }
        b->p = p;
        b->cap = cap;
        b->p[b->len] = 0;
    }
    return 1;
}

/* n == 0 still allocates, so a buffer that was written to has p != NULL. */
void hr__jbuf_put(hr_jbuf *b, const char *s, size_t n) {
    if (!reserve(b, n) || !n)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void hr__jbuf_puts(hr_jbuf *b, const char *s) { hr__jbuf_put(b, s, strlen(s)); }
void hr__jbuf_putc(hr_jbuf *b, char c) { hr__jbuf_put(b, &c, 1); }

void hr__jbuf_printf(hr_jbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        hr__jbuf_put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

void hr__jbuf_utf8(hr_jbuf *b, uint32_t cp) {
    unsigned char tmp[4];
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, tmp);
    hr__jbuf_put(b, (const char *)tmp, (size_t)n);
}

hr_jv hr__jbuf_take(hr_jbuf *b) {
    hr_jv v = hr__jv_str(b->p ? b->p : "", b->len);
    hr__jbuf_free(b);
    return v;
}

/* ---- str() and repr() ------------------------------------------------------- */

/* Python's float repr: the shortest digits that round-trip, positional
 * when the decimal exponent is in [-4, 16), otherwise scientific. */
void hr__jv_float_repr(hr_jbuf *b, double f) {
    if (isnan(f)) {
        hr__jbuf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        hr__jbuf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        hr__jbuf_puts(b, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char tmp[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    /* tmp: [-]d[.ddd]e[+-]xx */
    char digits[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *q = tmp + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.')
            digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    int exp10 = atoi(q + 1);
    int decpt = exp10 + 1; /* value = 0.digits * 10^decpt */
    if (neg)
        hr__jbuf_putc(b, '-');
    if (decpt <= -4 || decpt > 16) {
        hr__jbuf_putc(b, digits[0]);
        if (nd > 1) {
            hr__jbuf_putc(b, '.');
            hr__jbuf_put(b, digits + 1, (size_t)nd - 1);
        }
        hr__jbuf_printf(b, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    } else if (decpt <= 0) {
        hr__jbuf_puts(b, "0.");
        for (int i = 0; i < -decpt; i++)
            hr__jbuf_putc(b, '0');
        hr__jbuf_put(b, digits, (size_t)nd);
    } else if (decpt >= nd) {
        hr__jbuf_put(b, digits, (size_t)nd);
        for (int i = nd; i < decpt; i++)
            hr__jbuf_putc(b, '0');
        hr__jbuf_puts(b, ".0");
    } else {
        hr__jbuf_put(b, digits, (size_t)decpt);
        hr__jbuf_putc(b, '.');
        hr__jbuf_put(b, digits + decpt, (size_t)(nd - decpt));
    }
}

static int py_printable(uint32_t c) {
    if (c == ' ')
        return 1;
    if (c < 0x20 || c == 0x7F)
        return 0;
    if (c < 0x7F)
        return 1;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
        return 0;
    default:
        return 1;
    }
}

static void str_repr(hr_jbuf *b, const hr_jstr *s) {
    char q = '\'';
    if (memchr(s->s, '\'', s->len) && !memchr(s->s, '"', s->len))
        q = '"';
    hr__jbuf_putc(b, q);
    size_t i = 0;
    while (i < s->len) {
        size_t start = i;
        uint32_t c = hr__utf8_next(s->s, &i);
        if (c == (uint32_t)q || c == '\\') {
            hr__jbuf_putc(b, '\\');
            hr__jbuf_putc(b, (char)c);
        } else if (c == '\n') {
            hr__jbuf_puts(b, "\\n");
        } else if (c == '\r') {
            hr__jbuf_puts(b, "\\r");
        } else if (c == '\t') {
            hr__jbuf_puts(b, "\\t");
        } else if (py_printable(c)) {
            hr__jbuf_put(b, s->s + start, i - start);
        } else if (c < 0x100) {
            hr__jbuf_printf(b, "\\x%02x", c);
        } else if (c < 0x10000) {
            hr__jbuf_printf(b, "\\u%04x", c);
        } else {
            hr__jbuf_printf(b, "\\U%08x", c);
        }
    }
    hr__jbuf_putc(b, q);
}

static void repr_depth(hr_jbuf *b, hr_jv v, int depth);

static void str_depth(hr_jbuf *b, hr_jv v, int depth) {
    switch (v.type) {
    case HR_JV_UNDEF: break;
    case HR_JV_STR: hr__jbuf_put(b, v.u.s->s, v.u.s->len); break;
    default: repr_depth(b, v, depth); break;
    }
}

static void repr_depth(hr_jbuf *b, hr_jv v, int depth) {
    if (depth > HR_JV_MAX_DEPTH + 8) {
        hr__jbuf_puts(b, "...");
        return;
    }
    switch (v.type) {
    case HR_JV_UNDEF: hr__jbuf_puts(b, "Undefined"); break;
    case HR_JV_NONE: hr__jbuf_puts(b, "None"); break;
    case HR_JV_BOOL: hr__jbuf_puts(b, v.u.b ? "True" : "False"); break;
    case HR_JV_INT: hr__jbuf_printf(b, "%lld", (long long)v.u.i); break;
    case HR_JV_FLOAT: hr__jv_float_repr(b, v.u.f); break;
    case HR_JV_STR: str_repr(b, v.u.s); break;
    case HR_JV_LIST: {
        int tup = v.flags & HR_JV_TUPLE;
        if (v.flags & HR_JV_GEN) {
            hr__jbuf_puts(b, "<generator object>");
            break;
        }
        hr__jbuf_putc(b, tup ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                hr__jbuf_puts(b, ", ");
            repr_depth(b, v.u.l->v[i], depth + 1);
        }
        if (tup && v.u.l->n == 1)
            hr__jbuf_putc(b, ',');
        hr__jbuf_putc(b, tup ? ')' : ']');
        break;
    }
    case HR_JV_DICT: {
        int ns = v.flags & HR_JV_NS;
        hr__jbuf_puts(b, ns ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                hr__jbuf_puts(b, ", ");
            repr_depth(b, v.u.d->k[i], depth + 1);
            hr__jbuf_puts(b, ": ");
            repr_depth(b, v.u.d->v[i], depth + 1);
        }
        hr__jbuf_puts(b, ns ? "}>" : "}");
        break;
    }
    case HR_JV_FUNC:
        hr__jbuf_printf(b, "<function %s>", v.u.fn->name ? v.u.fn->name : "?");
        break;
    }
}

void hr__jv_str_append(hr_jbuf *b, hr_jv v) { str_depth(b, v, 0); }
void hr__jv_repr_append(hr_jbuf *b, hr_jv v) { repr_depth(b, v, 0); }

hr_jv hr__jv_to_str(hr_jv v, size_t max) {
    if (v.type == HR_JV_STR) {
        hr_jv r = hr__jv_ref(v);
        r.flags &= (uint8_t)~HR_JV_SAFE;
        return r;
    }
    hr_jbuf b;
    hr__jbuf_init(&b, max);
    str_depth(&b, v, 0);
    if (b.failed) {
        hr__jbuf_free(&b);
        return oom();
    }
    return hr__jbuf_take(&b);
}
