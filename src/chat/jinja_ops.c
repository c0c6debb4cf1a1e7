/* Jinja operators, lookup, slicing, iteration and global functions. */
#include "chat/jinja_ops.h"
#include "chat/jinja_lex.h"
#include "chat/jinja_str.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *hr__jinja_obj_desc(hr_jv v, char *buf, size_t n) {
    if (v.type == HR_JV_NONE)
        return "None";
    if (v.type == HR_JV_DICT && (v.flags & HR_JV_NS))
        return "jinja2.utils.Namespace object";
    snprintf(buf, n, "%s object", hr__jv_type_name(v));
    return buf;
}

static int type_error(hr_jctx *c, const hr_jnode *at, const char *opname, hr_jv a, hr_jv b) {
    return hr__jerr(c, at, HR_EINVAL, "unsupported operand type(s) for %s: '%s' and '%s'",
                    opname, hr__jv_type_name(a), hr__jv_type_name(b));
}

static int64_t as_int(hr_jv v) { return v.type == HR_JV_BOOL ? v.u.b : v.u.i; }
static int is_intlike(hr_jv v) { return v.type == HR_JV_INT || v.type == HR_JV_BOOL; }

static int overflow(hr_jctx *c, const hr_jnode *at) {
    return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: integers beyond 64 bits");
}

/* ---- arithmetic ------------------------------------------------------------- */

int hr__jinja_unary(hr_jctx *c, const hr_jnode *at, int neg, hr_jv a, hr_jv *out) {
    int rc = hr__jinja_check_defined(c, at, a);
    if (rc)
        return rc;
    if (is_intlike(a)) {
        int64_t x = as_int(a);
        if (neg && x == INT64_MIN)
            return overflow(c, at);
        *out = hr__jv_int(neg ? -x : x);
        return 0;
    }
    if (a.type == HR_JV_FLOAT) {
        *out = hr__jv_float(neg ? -a.u.f : a.u.f);
        return 0;
    }
    return hr__jerr(c, at, HR_EINVAL, "bad operand type for unary %c: '%s'", neg ? '-' : '+',
                    hr__jv_type_name(a));
}

static int concat(hr_jctx *c, const hr_jnode *at, hr_jv a, hr_jv b, hr_jv *out) {
    int safe = (a.flags | b.flags) & HR_JV_SAFE;
    hr_jbuf buf;
    hr__jbuf_init(&buf, hr__jctx_max_output(c));
    /* Markup + str escapes the plain side (markupsafe) */
    if (safe && !(a.flags & HR_JV_SAFE))
        hr__jstr_escape(&buf, a);
    else
        hr__jbuf_put(&buf, a.u.s->s, a.u.s->len);
    if (safe && !(b.flags & HR_JV_SAFE))
        hr__jstr_escape(&buf, b);
    else
        hr__jbuf_put(&buf, b.u.s->s, b.u.s->len);
    if (buf.failed) {
        hr__jbuf_free(&buf);
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    *out = hr__jbuf_take(&buf);
    if (hr__jv_oom(*out))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    out->flags |= (uint8_t)safe;
    return 0;
}

static int repeat(hr_jctx *c, const hr_jnode *at, hr_jv s, int64_t n, hr_jv *out) {
    if (s.type == HR_JV_STR) {
        hr_jbuf buf;
        hr__jbuf_init(&buf, hr__jctx_max_output(c));
        for (int64_t i = 0; i < n && !buf.failed; i++)
            hr__jbuf_put(&buf, s.u.s->s, s.u.s->len);
        if (buf.failed) {
            hr__jbuf_free(&buf);
            return hr__jerr_alloc(c, at, HR_ENOMEM);
        }
        *out = hr__jbuf_take(&buf);
        return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
    }
    size_t cap = hr__jctx_max_output(c) / 8;
    if (n > 0 && s.u.l->n && (uint64_t)n * s.u.l->n > cap)
        return hr__jerr(c, at, HR_ERANGE, "list repetition larger than %zu items", cap);
    hr_jv l = hr__jv_list(0);
    int rc = hr__jv_oom(l) ? HR_ENOMEM : 0;
    for (int64_t i = 0; i < n && !rc; i++)
        for (size_t k = 0; k < s.u.l->n && !rc; k++)
            rc = hr__jv_list_push(l, hr__jv_ref(s.u.l->v[k]));
    if (rc) {
        hr__jv_unref(l);
        return hr__jerr_alloc(c, at, rc);
    }
    l.flags = s.flags & HR_JV_TUPLE;
    *out = l;
    return 0;
}

static int int_pow(hr_jctx *c, const hr_jnode *at, int64_t x, int64_t e, hr_jv *out) {
    int64_t r = 1;
    while (e > 0) {
        if (e & 1) {
            if (__builtin_mul_overflow(r, x, &r))
                return overflow(c, at);
        }
        e >>= 1;
        if (e && __builtin_mul_overflow(x, x, &x))
            return overflow(c, at);
    }
    *out = hr__jv_int(r);
    return 0;
}

int hr__jinja_binop(hr_jctx *c, const hr_jnode *at, int op, hr_jv a, hr_jv b, hr_jv *out) {
    static const char *names[] = {[HR_JOP_ADD] = "+", [HR_JOP_SUB] = "-", [HR_JOP_MUL] = "*",
                                  [HR_JOP_DIV] = "/", [HR_JOP_FLOORDIV] = "//",
                                  [HR_JOP_MOD] = "%", [HR_JOP_POW] = "** or pow()"};
    int rc;
    if ((rc = hr__jinja_check_defined(c, at, a)) || (rc = hr__jinja_check_defined(c, at, b)))
        return rc;
    if (hr__jv_is_number(a) && hr__jv_is_number(b)) {
        if (is_intlike(a) && is_intlike(b)) {
            int64_t x = as_int(a), y = as_int(b), r;
            switch (op) {
            case HR_JOP_ADD:
                if (__builtin_add_overflow(x, y, &r))
                    return overflow(c, at);
                *out = hr__jv_int(r);
                return 0;
            case HR_JOP_SUB:
                if (__builtin_sub_overflow(x, y, &r))
                    return overflow(c, at);
                *out = hr__jv_int(r);
                return 0;
            case HR_JOP_MUL:
                if (__builtin_mul_overflow(x, y, &r))
                    return overflow(c, at);
                *out = hr__jv_int(r);
                return 0;
            case HR_JOP_FLOORDIV:
            case HR_JOP_MOD:
                if (!y)
                    return hr__jerr(c, at, HR_EINVAL, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1)
                    return overflow(c, at);
                r = x / y;
                if ((x % y != 0) && ((x < 0) != (y < 0)))
                    r--;
                *out = hr__jv_int(op == HR_JOP_FLOORDIV ? r : x - r * y);
                return 0;
            case HR_JOP_POW:
                if (y >= 0)
                    return int_pow(c, at, x, y, out);
                if (!x)
                    return hr__jerr(c, at, HR_EINVAL,
                                    "0.0 cannot be raised to a negative power");
                *out = hr__jv_float(pow((double)x, (double)y));
                return 0;
            default:
                break;
            }
        }
        double x = hr__jv_as_double(a), y = hr__jv_as_double(b);
        switch (op) {
        case HR_JOP_ADD: *out = hr__jv_float(x + y); return 0;
        case HR_JOP_SUB: *out = hr__jv_float(x - y); return 0;
        case HR_JOP_MUL: *out = hr__jv_float(x * y); return 0;
        case HR_JOP_DIV:
            if (y == 0)
                return hr__jerr(c, at, HR_EINVAL, "division by zero");
            *out = hr__jv_float(x / y);
            return 0;
        case HR_JOP_FLOORDIV:
        case HR_JOP_MOD: {
            if (y == 0)
                return hr__jerr(c, at, HR_EINVAL, "float modulo or division by zero");
            double m = fmod(x, y);
            if (m != 0 && ((y < 0) != (m < 0)))
                m += y;
            if (op == HR_JOP_MOD) {
                *out = hr__jv_float(m == 0 ? copysign(0.0, y) : m);
            } else {
                double d = (x - m) / y;
                *out = hr__jv_float(d == 0 ? copysign(0.0, x / y) : round(d));
            }
            return 0;
        }
        case HR_JOP_POW:
            if (x == 0 && y < 0)
                return hr__jerr(c, at, HR_EINVAL, "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y))
                return hr__jerr(c, at, HR_EUNSUPPORTED,
                                "not supported yet: complex results of **");
            *out = hr__jv_float(pow(x, y));
            return 0;
        default:
            break;
        }
    }
    if (op == HR_JOP_ADD && a.type == HR_JV_STR && b.type == HR_JV_STR)
        return concat(c, at, a, b, out);
    if (op == HR_JOP_ADD && a.type == HR_JV_LIST && b.type == HR_JV_LIST &&
        (a.flags & HR_JV_TUPLE) == (b.flags & HR_JV_TUPLE)) {
        hr_jv l = hr__jv_list(a.u.l->n + b.u.l->n);
        rc = hr__jv_oom(l) ? HR_ENOMEM : 0;
        for (size_t i = 0; i < a.u.l->n && !rc; i++)
            rc = hr__jv_list_push(l, hr__jv_ref(a.u.l->v[i]));
        for (size_t i = 0; i < b.u.l->n && !rc; i++)
            rc = hr__jv_list_push(l, hr__jv_ref(b.u.l->v[i]));
        if (rc) {
            hr__jv_unref(l);
            return hr__jerr_alloc(c, at, rc);
        }
        l.flags = a.flags & HR_JV_TUPLE;
        *out = l;
        return 0;
    }
    if (op == HR_JOP_MUL && (a.type == HR_JV_STR || a.type == HR_JV_LIST) && is_intlike(b))
        return repeat(c, at, a, as_int(b), out);
    if (op == HR_JOP_MUL && (b.type == HR_JV_STR || b.type == HR_JV_LIST) && is_intlike(a))
        return repeat(c, at, b, as_int(a), out);
    if (op == HR_JOP_MOD && a.type == HR_JV_STR)
        return hr__jinja_percent(c, at, a, b, out);
    if (op == HR_JOP_ADD && a.type == HR_JV_STR)
        return hr__jerr(c, at, HR_EINVAL, "can only concatenate str (not \"%s\") to str",
                        hr__jv_type_name(b));
    if (op == HR_JOP_ADD && a.type == HR_JV_LIST)
        return hr__jerr(c, at, HR_EINVAL, "can only concatenate %s (not \"%s\") to %s",
                        hr__jv_type_name(a), hr__jv_type_name(b), hr__jv_type_name(a));
    return type_error(c, at, op < (int)(sizeof names / sizeof names[0]) && names[op] ? names[op] : "?",
                      a, b);
}

/* ---- comparison ---------------------------------------------------------------- */

static int contains(hr_jctx *c, const hr_jnode *at, hr_jv item, hr_jv seq, int *res) {
    switch (seq.type) {
    case HR_JV_UNDEF:
        *res = 0;
        return 0;
    case HR_JV_STR:
        if (item.type != HR_JV_STR)
            return hr__jerr(c, at, HR_EINVAL,
                            "'in <string>' requires string as left operand, not %s",
                            hr__jv_type_name(item));
        *res = item.u.s->len == 0 ||
               memmem(seq.u.s->s, seq.u.s->len, item.u.s->s, item.u.s->len) != NULL;
        return 0;
    case HR_JV_LIST:
        *res = 0;
        for (size_t i = 0; i < seq.u.l->n && !*res; i++)
            *res = hr__jv_equal(seq.u.l->v[i], item);
        return 0;
    case HR_JV_DICT:
        if (!(seq.flags & HR_JV_NS)) {
            if ((item.type == HR_JV_LIST && !(item.flags & HR_JV_TUPLE)) ||
                item.type == HR_JV_DICT)
                return hr__jerr(c, at, HR_EINVAL, "unhashable type: '%s'",
                                hr__jv_type_name(item));
            *res = hr__jv_dict_get(seq, item) != NULL;
            return 0;
        }
        /* fall through */
    default:
        return hr__jerr(c, at, HR_EINVAL, "argument of type '%s' is not iterable",
                        hr__jv_type_name(seq));
    }
}

int hr__jinja_compare(hr_jctx *c, const hr_jnode *at, int op, hr_jv a, hr_jv b, int *res) {
    int rc;
    switch (op) {
    case HR_JOP_EQ: *res = hr__jv_equal(a, b); return 0;
    case HR_JOP_NE: *res = !hr__jv_equal(a, b); return 0;
    case HR_JN_IN:
    case HR_JN_NOTIN:
        if ((rc = contains(c, at, a, b, res)))
            return rc;
        if (op == HR_JN_NOTIN)
            *res = !*res;
        return 0;
    default:
        break;
    }
    if ((rc = hr__jinja_check_defined(c, at, a)) || (rc = hr__jinja_check_defined(c, at, b)))
        return rc;
    int cmp;
    if (hr__jv_compare(a, b, &cmp)) {
        static const char *names[] = {[HR_JOP_GT] = ">", [HR_JOP_GTEQ] = ">=",
                                      [HR_JOP_LT] = "<", [HR_JOP_LTEQ] = "<="};
        return hr__jerr(c, at, HR_EINVAL,
                        "'%s' not supported between instances of '%s' and '%s'", names[op],
                        hr__jv_type_name(a), hr__jv_type_name(b));
    }
    if (cmp == 2) { /* NaN */
        *res = 0;
        return 0;
    }
    switch (op) {
    case HR_JOP_GT: *res = cmp > 0; break;
    case HR_JOP_GTEQ: *res = cmp >= 0; break;
    case HR_JOP_LT: *res = cmp < 0; break;
    default: *res = cmp <= 0; break;
    }
    return 0;
}

/* ---- lookup -------------------------------------------------------------------------- */

static int method_value(hr_jctx *c, const hr_jnode *at, hr_jv obj, const char *name, int *done,
                        hr_jv *out) {
    *done = 0;
    if (!(obj.type == HR_JV_STR || obj.type == HR_JV_LIST ||
          (obj.type == HR_JV_DICT && !(obj.flags & HR_JV_NS))))
        return 0;
    int m = hr__jinja_has_method(obj, name);
    if (!m)
        return 0;
    *done = 1;
    if (m < 0) {
        *out = hr__jv_undef_hint("access to attribute '%s' of '%s' object is unsafe.", name,
                                 hr__jv_type_name(obj));
    } else {
        *out = hr__jv_func(HR_JFN_METHOD, name);
        if (!hr__jv_oom(*out))
            out->u.fn->self = hr__jv_ref(obj);
    }
    return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
}

static int missing(hr_jctx *c, const hr_jnode *at, hr_jv obj, hr_jv key, hr_jv *out) {
    char buf[64];
    const char *desc = hr__jinja_obj_desc(obj, buf, sizeof buf);
    if (key.type == HR_JV_STR)
        *out = hr__jv_undef_hint("'%s' has no attribute '%.100s'", desc, key.u.s->s);
    else if (key.type == HR_JV_INT)
        *out = hr__jv_undef_hint("'%s' has no element %lld", desc, (long long)key.u.i);
    else
        *out = hr__jv_undef_hint("'%s' has no element of type %s", desc, hr__jv_type_name(key));
    return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
}

int hr__jinja_getattr(hr_jctx *c, const hr_jnode *at, hr_jv obj, const char *name, hr_jv *out) {
    int rc = hr__jinja_check_defined(c, at, obj), done;
    if (rc)
        return rc;
    if (name[0] == '_') { /* the sandbox hides private attributes */
        *out = hr__jv_undef_hint("access to attribute '%s' of '%s' object is unsafe.", name,
                                 hr__jv_type_name(obj));
        return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
    }
    if ((rc = method_value(c, at, obj, name, &done, out)) || done)
        return rc;
    if (obj.type == HR_JV_DICT) {
        hr_jv *v = hr__jv_dict_getc(obj, name);
        if (v) {
            *out = hr__jv_ref(*v);
            return 0;
        }
    }
    hr_jv key = hr__jv_cstr(name);
    if (hr__jv_oom(key))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    rc = missing(c, at, obj, key, out);
    hr__jv_unref(key);
    return rc;
}

int hr__jinja_getitem(hr_jctx *c, const hr_jnode *at, hr_jv obj, hr_jv key, hr_jv *out) {
    int rc = hr__jinja_check_defined(c, at, obj), done;
    if (rc)
        return rc;
    if (obj.type == HR_JV_DICT && !(obj.flags & HR_JV_NS) && key.type != HR_JV_UNDEF) {
        hr_jv *v = hr__jv_dict_get(obj, key);
        if (v) {
            *out = hr__jv_ref(*v);
            return 0;
        }
    } else if (((obj.type == HR_JV_LIST && !(obj.flags & HR_JV_GEN)) || obj.type == HR_JV_STR) &&
               is_intlike(key)) {
        int64_t i = as_int(key);
        int64_t n = obj.type == HR_JV_LIST ? (int64_t)obj.u.l->n : (int64_t)hr__jv_strlen(obj);
        if (i < 0)
            i += n;
        if (i >= 0 && i < n) {
            if (obj.type == HR_JV_LIST) {
                *out = hr__jv_ref(obj.u.l->v[i]);
                return 0;
            }
            size_t b0 = hr__jv_cp_offset(obj, (size_t)i), b1 = b0;
            hr__utf8_next(obj.u.s->s, &b1);
            *out = hr__jv_str(obj.u.s->s + b0, b1 - b0);
            return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
        }
    }
    if (key.type == HR_JV_STR) {
        if (key.u.s->s[0] == '_')
            return missing(c, at, obj, key, out);
        if ((rc = method_value(c, at, obj, key.u.s->s, &done, out)) || done)
            return rc;
        if (obj.type == HR_JV_DICT && (obj.flags & HR_JV_NS)) {
            hr_jv *v = hr__jv_dict_get(obj, key);
            if (v) {
                *out = hr__jv_ref(*v);
                return 0;
            }
        }
    }
    return missing(c, at, obj, key, out);
}

/* Python's PySlice_AdjustIndices for one bound. */
static int64_t clamp_index(int64_t i, int64_t len, int64_t step) {
    if (i < 0) {
        i += len;
        if (i < 0)
            i = step < 0 ? -1 : 0;
    } else if (i >= len) {
        i = step < 0 ? len - 1 : len;
    }
    return i;
}

int hr__jinja_slice(hr_jctx *c, const hr_jnode *at, hr_jv obj, const hr_jv *idx, hr_jv *out) {
    int rc = hr__jinja_check_defined(c, at, obj);
    if (rc)
        return rc;
    for (int k = 0; k < 3; k++)
        if (idx[k].type != HR_JV_NONE && !is_intlike(idx[k]))
            return missing(c, at, obj, idx[k], out); /* TypeError: jinja2 gives Undefined */
    if ((obj.type != HR_JV_LIST && obj.type != HR_JV_STR) || (obj.flags & HR_JV_GEN)) {
        *out = hr__jv_undef_hint("'%s' object is not subscriptable", hr__jv_type_name(obj));
        return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
    }
    int64_t step = idx[2].type == HR_JV_NONE ? 1 : as_int(idx[2]);
    if (!step)
        return hr__jerr(c, at, HR_EINVAL, "slice step cannot be zero");
    int64_t len = obj.type == HR_JV_LIST ? (int64_t)obj.u.l->n : (int64_t)hr__jv_strlen(obj);
    int64_t start = idx[0].type == HR_JV_NONE ? (step < 0 ? len - 1 : 0)
                                               : clamp_index(as_int(idx[0]), len, step);
    int64_t stop = idx[1].type == HR_JV_NONE ? (step < 0 ? -1 : len)
                                              : clamp_index(as_int(idx[1]), len, step);
    if (obj.type == HR_JV_LIST) {
        hr_jv l = hr__jv_list(0);
        rc = hr__jv_oom(l) ? HR_ENOMEM : 0;
        for (int64_t i = start; (step > 0 ? i < stop : i > stop) && !rc; i += step)
            rc = hr__jv_list_push(l, hr__jv_ref(obj.u.l->v[i]));
        if (rc) {
            hr__jv_unref(l);
            return hr__jerr_alloc(c, at, rc);
        }
        l.flags = obj.flags & HR_JV_TUPLE;
        *out = l;
        return 0;
    }
    hr_jbuf b;
    hr__jbuf_init(&b, 0);
    if (step == 1 && start < stop) {
        size_t b0 = hr__jv_cp_offset(obj, (size_t)start), b1 = hr__jv_cp_offset(obj, (size_t)stop);
        hr__jbuf_put(&b, obj.u.s->s + b0, b1 - b0);
    } else {
        /* general step: index the code points once */
        size_t n = (size_t)len, *off = malloc((n + 1) * sizeof *off), p = 0;
        if (!off)
            return hr__jerr_alloc(c, at, HR_ENOMEM);
        for (size_t i = 0; i < n; i++) {
            off[i] = p;
            hr__utf8_next(obj.u.s->s, &p);
        }
        off[n] = p;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            hr__jbuf_put(&b, obj.u.s->s + off[i], off[i + 1] - off[i]);
        free(off);
    }
    if (b.failed) {
        hr__jbuf_free(&b);
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    *out = hr__jbuf_take(&b);
    return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
}

int hr__jinja_iterate(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
    int rc = 0;
    switch (v.type) {
    case HR_JV_LIST:
        *out = hr__jv_ref(v);
        return 0;
    case HR_JV_UNDEF:
        *out = hr__jv_list(0);
        break;
    case HR_JV_DICT:
        if (v.flags & HR_JV_NS)
            goto bad;
        *out = hr__jv_list(v.u.d->n);
        for (size_t i = 0; !hr__jv_oom(*out) && i < v.u.d->n && !rc; i++)
            rc = hr__jv_list_push(*out, hr__jv_ref(v.u.d->k[i]));
        break;
    case HR_JV_STR:
        *out = hr__jv_list(hr__jv_strlen(v));
        for (size_t i = 0; !hr__jv_oom(*out) && i < v.u.s->len && !rc;) {
            size_t s = i;
            hr__utf8_next(v.u.s->s, &i);
            hr_jv ch = hr__jv_str(v.u.s->s + s, i - s);
            rc = hr__jv_oom(ch) ? HR_ENOMEM : hr__jv_list_push(*out, ch);
        }
        break;
    default:
        goto bad;
    }
    if (hr__jv_oom(*out))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    if (rc) {
        hr__jv_unref(*out);
        return hr__jerr_alloc(c, at, rc);
    }
    return 0;
bad:
    return hr__jerr(c, at, HR_EINVAL, "'%s' object is not iterable", hr__jv_type_name(v));
}

/* ---- loop ------------------------------------------------------------------------ */

int hr__jinja_loop_object(hr_jctx *c, const hr_jnode *at, hr_jv items, size_t i, hr_jv *out) {
    int64_t n = (int64_t)items.u.l->n, k = (int64_t)i;
    hr_jv d = hr__jv_dict(16);
    if (hr__jv_oom(d))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    struct {
        const char *k;
        hr_jv v;
    } f[] = {
        {"index", hr__jv_int(k + 1)},      {"index0", hr__jv_int(k)},
        {"revindex", hr__jv_int(n - k)},   {"revindex0", hr__jv_int(n - k - 1)},
        {"first", hr__jv_bool(k == 0)},    {"last", hr__jv_bool(k == n - 1)},
        {"length", hr__jv_int(n)},         {"depth", hr__jv_int(1)},
        {"depth0", hr__jv_int(0)},
    };
    int rc = 0;
    for (size_t j = 0; j < sizeof f / sizeof f[0] && !rc; j++) {
        hr_jv key = hr__jv_cstr(f[j].k);
        rc = hr__jv_oom(key) ? HR_ENOMEM : hr__jv_dict_set(d, key, f[j].v);
    }
    if (!rc && k > 0) {
        hr_jv key = hr__jv_cstr("previtem");
        rc = hr__jv_oom(key) ? HR_ENOMEM : hr__jv_dict_set(d, key, hr__jv_ref(items.u.l->v[k - 1]));
    }
    if (!rc && k + 1 < n) {
        hr_jv key = hr__jv_cstr("nextitem");
        rc = hr__jv_oom(key) ? HR_ENOMEM : hr__jv_dict_set(d, key, hr__jv_ref(items.u.l->v[k + 1]));
    }
    if (!rc) {
        hr_jv key = hr__jv_cstr("cycle"), fn = hr__jv_func(HR_JFN_CYCLE, "cycle");
        if (hr__jv_oom(key) || hr__jv_oom(fn)) {
            hr__jv_unref(key);
            hr__jv_unref(fn);
            rc = HR_ENOMEM;
        } else {
            fn.u.fn->extra = hr__jv_int(k);
            rc = hr__jv_dict_set(d, key, fn);
        }
    }
    if (rc) {
        hr__jv_unref(d);
        return hr__jerr_alloc(c, at, rc);
    }
    *out = d;
    return 0;
}

/* ---- globals --------------------------------------------------------------------------- */

static const char *const globals[] = {"range", "dict", "namespace", "raise_exception",
                                      "strftime_now", "lipsum", "cycler", "joiner"};

int hr__jinja_global(const char *name, hr_jv *out) {
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (!strcmp(name, globals[i])) {
            *out = hr__jv_func(HR_JFN_GLOBAL, globals[i]);
            return 1;
        }
    return 0;
}

static int build_dict(hr_jctx *c, const hr_jnode *at, hr_jargs *a, const char *fn, int ns,
                      hr_jv *out) {
    if (a->npos > 1 || (a->npos == 1 && (a->pos[0].type != HR_JV_DICT ||
                                          (a->pos[0].flags & HR_JV_NS))))
        return hr__jerr(c, at, HR_EUNSUPPORTED,
                        "not supported yet: %s() with positional arguments other than a dict", fn);
    hr_jv d = hr__jv_dict(4);
    int rc = hr__jv_oom(d) ? HR_ENOMEM : 0;
    if (ns && !rc) {
        d.flags |= HR_JV_NS;
        rc = hr__jinja_register_ns(c, d);
    }
    if (a->npos)
        for (size_t i = 0; i < a->pos[0].u.d->n && !rc; i++)
            rc = hr__jv_dict_set(d, hr__jv_ref(a->pos[0].u.d->k[i]),
                                 hr__jv_ref(a->pos[0].u.d->v[i]));
    for (int i = 0; i < a->nkw && !rc; i++) {
        hr_jv k = hr__jv_cstr(a->kw_name[i]);
        rc = hr__jv_oom(k) ? HR_ENOMEM : hr__jv_dict_set(d, k, hr__jv_ref(a->kw[i]));
    }
    if (rc) {
        if (!hr__jv_oom(d))
            hr__jv_unref(d);
        return hr__jerr_alloc(c, at, rc);
    }
    *out = d;
    return 0;
}

static int range_fn(hr_jctx *c, const hr_jnode *at, hr_jargs *a, hr_jv *out) {
    if (a->nkw || a->npos < 1 || a->npos > 3)
        return hr__jerr(c, at, HR_EINVAL, "range expected 1 to 3 integer arguments");
    int64_t v[3] = {0, 0, 1};
    for (int i = 0; i < a->npos; i++) {
        if (!is_intlike(a->pos[i]))
            return hr__jerr(c, at, HR_EINVAL, "'%s' object cannot be interpreted as an integer",
                            hr__jv_type_name(a->pos[i]));
        v[a->npos == 1 ? 1 : i] = as_int(a->pos[i]);
    }
    if (!v[2])
        return hr__jerr(c, at, HR_EINVAL, "range() arg 3 must not be zero");
    double len = v[2] > 0 ? ceil(((double)v[1] - (double)v[0]) / (double)v[2])
                          : ceil(((double)v[0] - (double)v[1]) / (double)-v[2]);
    if (len > 100000)
        return hr__jerr(c, at, HR_ERANGE, "range too big, maximum size for range is 100000");
    hr_jv l = hr__jv_list(len > 0 ? (size_t)len : 0);
    int rc = hr__jv_oom(l) ? HR_ENOMEM : 0;
    for (int64_t x = v[0]; (v[2] > 0 ? x < v[1] : x > v[1]) && !rc; x += v[2])
        rc = hr__jv_list_push(l, hr__jv_int(x));
    if (rc) {
        hr__jv_unref(l);
        return hr__jerr_alloc(c, at, rc);
    }
    *out = l;
    return 0;
}

static int strftime_fn(hr_jctx *c, const hr_jnode *at, hr_jargs *a, hr_jv *out) {
    if (a->npos != 1 || a->nkw || a->pos[0].type != HR_JV_STR)
        return hr__jerr(c, at, HR_EINVAL, "strftime_now() takes one string argument");
    const hr_jinja_opts *o = hr__jctx_opts(c);
    struct tm tm;
    time_t now = o->has_now ? (time_t)o->now : time(NULL);
    if (o->has_now)
        gmtime_r(&now, &tm);
    else
        localtime_r(&now, &tm);
    char buf[512];
    size_t n = strftime(buf, sizeof buf, a->pos[0].u.s->s, &tm);
    if (!n && a->pos[0].u.s->len > 64)
        return hr__jerr(c, at, HR_ERANGE, "strftime_now() result too long");
    *out = hr__jv_str(buf, n);
    return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
}

int hr__jinja_call_global(hr_jctx *c, const hr_jnode *at, hr_jfunc *fn, hr_jargs *a,
                          hr_jv *out) {
    if (fn->kind == HR_JFN_CYCLE) {
        if (!a->npos || a->nkw)
            return hr__jerr(c, at, HR_EINVAL, "no items for cycling given");
        *out = hr__jv_ref(a->pos[fn->extra.u.i % a->npos]);
        return 0;
    }
    const char *name = fn->name;
    if (!strcmp(name, "raise_exception")) {
        hr_jbuf b;
        hr__jbuf_init(&b, 4096);
        for (int i = 0; i < a->npos; i++)
            hr__jv_str_append(&b, a->pos[i]);
        int rc = hr__jerr(c, at, HR_EINVAL, "raise_exception: %s", b.p ? b.p : "");
        hr__jbuf_free(&b);
        return rc;
    }
    if (!strcmp(name, "strftime_now"))
        return strftime_fn(c, at, a, out);
    if (!strcmp(name, "range"))
        return range_fn(c, at, a, out);
    if (!strcmp(name, "dict"))
        return build_dict(c, at, a, "dict", 0, out);
    if (!strcmp(name, "namespace"))
        return build_dict(c, at, a, "namespace", 1, out);
    return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: the global function '%s'", name);
}
