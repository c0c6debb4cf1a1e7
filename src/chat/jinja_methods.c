/* Methods of str, dict and list that jinja2's ImmutableSandboxedEnvironment
 * lets a template call, plus str.format and printf-style `%`. Mutating
 * methods (list.append, dict.update, ...) are a security error there and
 * here. */
#include "chat/jinja_eval.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_str.h"
#include "core/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static const char *const str_methods[] = {
    "capitalize", "center", "count", "endswith", "find", "format", "index", "isalnum",
    "isalpha", "isdigit", "islower", "isspace", "isupper", "join", "ljust", "lower",
    "lstrip", "replace", "rfind", "rjust", "rsplit", "rstrip", "split", "splitlines",
    "startswith", "strip", "title", "upper", "zfill", "removeprefix", "removesuffix", "casefold",
    /* known to Python, not implemented: a clear error when called */
    "encode", "expandtabs", "format_map", "isascii", "isdecimal",
    "isidentifier", "isnumeric", "isprintable", "istitle", "partition", "rindex",
    "rpartition", "swapcase", "translate", "maketrans", NULL};
static const char *const dict_methods[] = {"get", "items", "keys", "values", "copy", NULL};
static const char *const dict_mutating[] = {"pop", "popitem", "setdefault", "update", "clear",
                                            NULL};
static const char *const list_methods[] = {"count", "index", "copy", NULL};
static const char *const list_mutating[] = {"append", "extend", "insert", "pop", "remove",
                                            "reverse", "sort", "clear", NULL};

static int in_list(const char *const *l, const char *name) {
    for (; *l; l++)
        if (!strcmp(*l, name))
            return 1;
    return 0;
}

int hr__jinja_has_method(hr_jv obj, const char *name) {
    switch (obj.type) {
    case HR_JV_STR: return in_list(str_methods, name);
    case HR_JV_DICT:
        if (obj.flags & HR_JV_NS)
            return 0;
        return in_list(dict_methods, name) ? 1 : in_list(dict_mutating, name) ? -1 : 0;
    case HR_JV_LIST:
        if (obj.flags & HR_JV_GEN)
            return 0;
        if (obj.flags & HR_JV_TUPLE)
            return !strcmp(name, "count") || !strcmp(name, "index");
        return in_list(list_methods, name) ? 1 : in_list(list_mutating, name) ? -1 : 0;
    default:
        return 0;
    }
}

/* ---- helpers ---------------------------------------------------------------- */

static int need_str(hr_jctx *c, const hr_jnode *at, const char *fn, hr_jv *v) {
    if (!v || v->type != HR_JV_STR)
        return hr__jerr(c, at, HR_EINVAL, "%s() argument must be str, not %s", fn,
                        v ? hr__jv_type_name(*v) : "nothing");
    return 0;
}

static int opt_int(hr_jctx *c, const hr_jnode *at, const char *fn, hr_jv *v, int64_t dflt,
                   int64_t *out) {
    *out = dflt;
    if (!v || v->type == HR_JV_NONE)
        return 0;
    if (v->type == HR_JV_INT || v->type == HR_JV_BOOL) {
        *out = v->type == HR_JV_INT ? v->u.i : v->u.b;
        return 0;
    }
    return hr__jerr(c, at, HR_EINVAL, "%s(): '%s' object cannot be interpreted as an integer",
                    fn, hr__jv_type_name(*v));
}

static int done(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
    if (hr__jv_oom(v))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    *out = v;
    return 0;
}

/* Byte offset of substring sub in s (search from the left or right), or -1. */
static long find_sub(hr_jv s, hr_jv sub, int right) {
    size_t n = s.u.s->len, m = sub.u.s->len;
    if (m > n)
        return -1;
    if (!right) {
        const char *h = m ? memmem(s.u.s->s, n, sub.u.s->s, m) : s.u.s->s;
        return h ? (long)(h - s.u.s->s) : -1;
    }
    for (size_t j = n - m + 1; j-- > 0;)
        if (!memcmp(s.u.s->s + j, sub.u.s->s, m))
            return (long)j;
    return -1;
}

static size_t cp_index(hr_jv s, size_t byte) {
    size_t n = 0;
    for (size_t i = 0; i < byte; i++)
        n += ((unsigned char)s.u.s->s[i] & 0xC0) != 0x80;
    return n;
}

static int pad(hr_jctx *c, const hr_jnode *at, hr_jv s, hr_jargs *a, int mode, hr_jv *out) {
    static const char *const names[] = {"width", "fillchar"};
    hr_jv *arg[2];
    int64_t width;
    int rc = hr__jargs_bind(c, at, "pad", a, names, 2, arg);
    if (rc || (rc = opt_int(c, at, "pad", arg[0], -1, &width)))
        return rc;
    if (!arg[0])
        return hr__jerr(c, at, HR_EINVAL, "missing the width argument");
    const char *fill = " ";
    size_t fl = 1;
    if (arg[1]) {
        if ((rc = need_str(c, at, "fillchar", arg[1])))
            return rc;
        if (hr__jv_strlen(*arg[1]) != 1)
            return hr__jerr(c, at, HR_EINVAL, "the fill character must be exactly one character long");
        fill = arg[1]->u.s->s;
        fl = arg[1]->u.s->len;
    }
    int64_t len = (int64_t)hr__jv_strlen(s), marg = width - len, left = 0;
    if (marg <= 0)
        return done(c, at, hr__jv_ref(s), out);
    if (marg > (int64_t)hr__jctx_max_output(c))
        return hr__jerr(c, at, HR_ERANGE, "padding too large");
    if (mode == 0)
        left = marg / 2 + (marg & width & 1);
    else if (mode == 2)
        left = marg;
    hr_jbuf b;
    hr__jbuf_init(&b, hr__jctx_max_output(c));
    for (int64_t i = 0; i < left; i++)
        hr__jbuf_put(&b, fill, fl);
    hr__jbuf_put(&b, s.u.s->s, s.u.s->len);
    for (int64_t i = left; i < marg; i++)
        hr__jbuf_put(&b, fill, fl);
    if (b.failed) {
        hr__jbuf_free(&b);
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    return done(c, at, hr__jbuf_take(&b), out);
}

static int affix(hr_jctx *c, const hr_jnode *at, hr_jv s, hr_jargs *a, int end, int *res) {
    if (a->npos != 1 || a->nkw)
        return hr__jerr(c, at, HR_EUNSUPPORTED,
                        "not supported yet: startswith/endswith with start/end arguments");
    hr_jv arg = a->pos[0];
    size_t n = arg.type == HR_JV_LIST ? arg.u.l->n : 1;
    *res = 0;
    for (size_t i = 0; i < n && !*res; i++) {
        hr_jv p = arg.type == HR_JV_LIST ? arg.u.l->v[i] : arg;
        if (p.type != HR_JV_STR)
            return hr__jerr(c, at, HR_EINVAL,
                            "%s first arg must be str or a tuple of str, not %s",
                            end ? "endswith" : "startswith", hr__jv_type_name(p));
        size_t m = p.u.s->len;
        *res = m <= s.u.s->len &&
               !memcmp(s.u.s->s + (end ? s.u.s->len - m : 0), p.u.s->s, m);
    }
    return 0;
}

static int char_class(hr_jv s, int cls) {
    if (!s.u.s->len)
        return 0;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t ch = hr__utf8_next(s.u.s->s, &i);
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)ch);
        int alpha = k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
        int digit = k == UTF8PROC_CATEGORY_ND;
        int num = k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO;
        int ok = cls == 'a' ? alpha : cls == 'd' ? digit : cls == 's' ? hr__py_isspace(ch)
                                                                      : alpha || num;
        if (!ok)
            return 0;
    }
    return 1;
}

/* ---- str --------------------------------------------------------------------------- */

static int str_method(hr_jctx *c, const hr_jnode *at, hr_jv s, const char *m, hr_jargs *a,
                      hr_jv *out) {
    hr_jv *arg[3];
    int rc = 0, r;
    int64_t k;
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        static const char *const names[] = {"chars"};
        if ((rc = hr__jargs_bind(c, at, m, a, names, 1, arg)))
            return rc;
        if (arg[0] && arg[0]->type != HR_JV_NONE && (rc = need_str(c, at, m, arg[0])))
            return rc;
        return done(c, at,
                    hr__jstr_strip(s, arg[0] ? *arg[0] : hr__jv_none(), m[0] != 'r', m[0] != 'l'),
                    out);
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        static const char *const names[] = {"sep", "maxsplit"};
        if ((rc = hr__jargs_bind(c, at, m, a, names, 2, arg)) ||
            (rc = opt_int(c, at, m, arg[1], -1, &k)))
            return rc;
        hr_jv sep = arg[0] ? *arg[0] : hr__jv_none();
        if (sep.type != HR_JV_NONE && (rc = need_str(c, at, m, &sep)))
            return rc;
        if (sep.type == HR_JV_STR && !sep.u.s->len)
            return hr__jerr(c, at, HR_EINVAL, "empty separator");
        return done(c, at, hr__jstr_split(s, sep, k, m[0] == 'r'), out);
    }
    if (!strcmp(m, "splitlines")) {
        if (a->npos || a->nkw)
            return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: splitlines(keepends)");
        return done(c, at, hr__jstr_splitlines(s), out);
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        if ((rc = affix(c, at, s, a, m[0] == 'e', &r)))
            return rc;
        *out = hr__jv_bool(r);
        return 0;
    }
    if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "title") ||
        !strcmp(m, "capitalize") || !strcmp(m, "casefold")) {
        if (a->npos || a->nkw)
            return hr__jerr(c, at, HR_EINVAL, "%s() takes no arguments", m);
        int mode = m[0] == 'u' ? HR_JCASE_UPPER : m[0] == 'l' ? HR_JCASE_LOWER
                   : m[0] == 't' ? HR_JCASE_TITLE : m[1] == 'a' && m[2] == 's' ? HR_JCASE_FOLD
                                                                              : HR_JCASE_CAPITALIZE;
        return done(c, at, hr__jstr_case(s, mode), out);
    }
    if (!strcmp(m, "replace")) {
        static const char *const names[] = {"old", "new", "count"};
        if ((rc = hr__jargs_bind(c, at, m, a, names, 3, arg)) ||
            (rc = need_str(c, at, m, arg[0])) || (rc = need_str(c, at, m, arg[1])) ||
            (rc = opt_int(c, at, m, arg[2], -1, &k)))
            return rc;
        return done(c, at, hr__jstr_replace(s, *arg[0], *arg[1], k, hr__jctx_max_output(c)), out);
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "count")) {
        if (a->npos != 1 || a->nkw)
            return hr__jerr(c, at, HR_EUNSUPPORTED,
                            "not supported yet: str.%s() with start/end arguments", m);
        if ((rc = need_str(c, at, m, &a->pos[0])))
            return rc;
        hr_jv sub = a->pos[0];
        if (!strcmp(m, "count")) {
            int64_t n = 0;
            if (!sub.u.s->len) {
                n = (int64_t)hr__jv_strlen(s) + 1;
            } else {
                const char *p = s.u.s->s, *e = p + s.u.s->len, *h;
                while ((h = memmem(p, (size_t)(e - p), sub.u.s->s, sub.u.s->len))) {
                    n++;
                    p = h + sub.u.s->len;
                }
            }
            *out = hr__jv_int(n);
            return 0;
        }
        long pos = find_sub(s, sub, m[0] == 'r');
        if (pos < 0 && m[0] == 'i')
            return hr__jerr(c, at, HR_EINVAL, "substring not found");
        *out = hr__jv_int(pos < 0 ? -1 : (int64_t)cp_index(s, (size_t)pos));
        return 0;
    }
    if (!strcmp(m, "join")) {
        if (a->npos != 1 || a->nkw)
            return hr__jerr(c, at, HR_EINVAL, "join() takes exactly one argument");
        hr_jv items;
        if ((rc = hr__jinja_iterate(c, at, a->pos[0], &items)))
            return rc;
        hr_jbuf b;
        hr__jbuf_init(&b, hr__jctx_max_output(c));
        hr__jbuf_put(&b, "", 0);
        for (size_t i = 0; i < items.u.l->n && !rc; i++) {
            hr_jv it = items.u.l->v[i];
            if (it.type != HR_JV_STR)
                rc = hr__jerr(c, at, HR_EINVAL, "sequence item %zu: expected str instance, %s found",
                              i, hr__jv_type_name(it));
            else {
                if (i)
                    hr__jbuf_put(&b, s.u.s->s, s.u.s->len);
                hr__jbuf_put(&b, it.u.s->s, it.u.s->len);
            }
        }
        hr__jv_unref(items);
        if (rc || b.failed) {
            hr__jbuf_free(&b);
            return rc ? rc : hr__jerr_alloc(c, at, HR_ENOMEM);
        }
        return done(c, at, hr__jbuf_take(&b), out);
    }
    if (!strcmp(m, "center") || !strcmp(m, "ljust") || !strcmp(m, "rjust"))
        return pad(c, at, s, a, m[0] == 'c' ? 0 : m[0] == 'l' ? 1 : 2, out);
    if (!strcmp(m, "zfill")) {
        if (a->npos != 1 || (rc = opt_int(c, at, m, &a->pos[0], 0, &k)))
            return rc ? rc : hr__jerr(c, at, HR_EINVAL, "zfill() takes exactly one argument");
        int64_t len = (int64_t)hr__jv_strlen(s);
        if (k <= len)
            return done(c, at, hr__jv_ref(s), out);
        if (k > (int64_t)hr__jctx_max_output(c))
            return hr__jerr(c, at, HR_ERANGE, "padding too large");
        hr_jbuf b;
        hr__jbuf_init(&b, hr__jctx_max_output(c));
        size_t i = 0;
        if (s.u.s->len && (s.u.s->s[0] == '+' || s.u.s->s[0] == '-'))
            hr__jbuf_putc(&b, s.u.s->s[i++]);
        for (int64_t z = 0; z < k - len; z++)
            hr__jbuf_putc(&b, '0');
        hr__jbuf_put(&b, s.u.s->s + i, s.u.s->len - i);
        return done(c, at, hr__jbuf_take(&b), out);
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        if (a->npos != 1 || a->nkw || (rc = need_str(c, at, m, &a->pos[0])))
            return rc ? rc : hr__jerr(c, at, HR_EINVAL, "%s() takes exactly one argument", m);
        hr_jv p = a->pos[0];
        size_t n = s.u.s->len, pl = p.u.s->len;
        int pre = m[6] == 'p';
        if (pl <= n && !memcmp(s.u.s->s + (pre ? 0 : n - pl), p.u.s->s, pl))
            return done(c, at, hr__jv_str(s.u.s->s + (pre ? pl : 0), n - pl), out);
        return done(c, at, hr__jv_ref(s), out);
    }
    if (!strcmp(m, "isalnum") || !strcmp(m, "isalpha") || !strcmp(m, "isdigit") ||
        !strcmp(m, "isspace")) {
        *out = hr__jv_bool(char_class(s, m[2] == 'a' && m[3] == 'l' && m[4] == 'p' ? 'a'
                                         : m[2] == 'd' ? 'd' : m[2] == 's' ? 's' : 'n'));
        return 0;
    }
    if (!strcmp(m, "islower") || !strcmp(m, "isupper")) {
        *out = hr__jv_bool(hr__jstr_is_case(s, m[2] == 'u'));
        return 0;
    }
    if (!strcmp(m, "format"))
        return hr__jinja_format(c, at, s, a, out);
    return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: str.%s()", m);
}

/* ---- dict and list -------------------------------------------------------------------- */

static int dict_method(hr_jctx *c, const hr_jnode *at, hr_jv d, const char *m, hr_jargs *a,
                       hr_jv *out) {
    if (!strcmp(m, "get")) {
        if (a->nkw || a->npos < 1 || a->npos > 2)
            return hr__jerr(c, at, HR_EINVAL, "get expected 1 or 2 arguments");
        hr_jv key = a->pos[0];
        if ((key.type == HR_JV_LIST && !(key.flags & HR_JV_TUPLE)) || key.type == HR_JV_DICT)
            return hr__jerr(c, at, HR_EINVAL, "unhashable type: '%s'", hr__jv_type_name(key));
        hr_jv *v = key.type == HR_JV_UNDEF ? NULL : hr__jv_dict_get(d, key);
        *out = hr__jv_ref(v ? *v : a->npos == 2 ? a->pos[1] : hr__jv_none());
        return 0;
    }
    if (a->npos || a->nkw)
        return hr__jerr(c, at, HR_EINVAL, "%s() takes no arguments", m);
    if (!strcmp(m, "copy"))
        return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: dict.copy()");
    hr_jv l = hr__jv_list(d.u.d->n);
    int rc = hr__jv_oom(l) ? HR_ENOMEM : 0;
    for (size_t i = 0; i < d.u.d->n && !rc; i++) {
        if (m[0] == 'k') {
            rc = hr__jv_list_push(l, hr__jv_ref(d.u.d->k[i]));
        } else if (m[0] == 'v') {
            rc = hr__jv_list_push(l, hr__jv_ref(d.u.d->v[i]));
        } else {
            hr_jv t = hr__jv_list(2);
            rc = hr__jv_oom(t) ? HR_ENOMEM : 0;
            if (!rc) {
                t.flags |= HR_JV_TUPLE;
                hr__jv_list_push(t, hr__jv_ref(d.u.d->k[i]));
                rc = hr__jv_list_push(t, hr__jv_ref(d.u.d->v[i]));
                rc = rc ? (hr__jv_unref(t), rc) : hr__jv_list_push(l, t);
            }
        }
    }
    if (rc) {
        if (!hr__jv_oom(l))
            hr__jv_unref(l);
        return hr__jerr_alloc(c, at, rc);
    }
    *out = l;
    return 0;
}

static int list_method(hr_jctx *c, const hr_jnode *at, hr_jv l, const char *m, hr_jargs *a,
                       hr_jv *out) {
    if (!strcmp(m, "copy"))
        return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: list.copy()");
    if (a->npos != 1 || a->nkw)
        return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: list.%s() with these arguments",
                        m);
    int64_t n = 0, first = -1;
    for (size_t i = 0; i < l.u.l->n; i++)
        if (hr__jv_equal(l.u.l->v[i], a->pos[0])) {
            n++;
            if (first < 0)
                first = (int64_t)i;
        }
    if (m[0] == 'i' && first < 0)
        return hr__jerr(c, at, HR_EINVAL, "list.index(x): x not in list");
    *out = hr__jv_int(m[0] == 'c' ? n : first);
    return 0;
}

int hr__jinja_method(hr_jctx *c, const hr_jnode *at, hr_jv obj, const char *name, hr_jargs *a,
                     hr_jv *out) {
    int m = hr__jinja_has_method(obj, name);
    if (m < 0)
        return hr__jerr(c, at, HR_EINVAL, "access to attribute '%s' of '%s' object is unsafe",
                        name, hr__jv_type_name(obj));
    if (!m)
        return hr__jerr(c, at, HR_EINVAL, "'%s' object has no attribute '%s'",
                        hr__jv_type_name(obj), name);
    if (obj.type == HR_JV_STR)
        return str_method(c, at, obj, name, a, out);
    if (obj.type == HR_JV_DICT)
        return dict_method(c, at, obj, name, a, out);
    return list_method(c, at, obj, name, a, out);
}
