/* Jinja filters (jinja2's builtins, with transformers' tojson): dispatch,
 * string and number filters. Sequence filters are in jinja_filters_seq.c,
 * tests in jinja_tests.c. */
#include "chat/jinja_filters.h"
#include "chat/jinja_lex.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_str.h"
#include "core/error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* Every filter jinja2 3.1 ships, plus nothing else: transformers only
 * replaces tojson. */
static const char *const jinja2_filters[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
    "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min", "pprint",
    "random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim",
    "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
    NULL};

int hr__jinja_filter_known(const char *name) {
    for (const char *const *p = jinja2_filters; *p; p++)
        if (!strcmp(*p, name))
            return 1;
    return 0;
}

/* ---- string filters ---------------------------------------------------------------- */

static int f_case(hr_jctx *c, const hr_jnode *at, hr_jv v, int mode, hr_jv *out) {
    hr_jv s = hr__jf_soft_str(c, v);
    if (hr__jv_oom(s))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    hr_jv r = hr__jstr_case(s, mode);
    if (!hr__jv_oom(r))
        r.flags |= s.flags & HR_JV_SAFE;
    hr__jv_unref(s);
    RET(r);
}

/* jinja2's title: capitalize each piece split at [-\s({\[<]+ */
static int f_title(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
    hr_jv s = hr__jf_soft_str(c, v);
    if (hr__jv_oom(s))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    hr_jbuf b;
    hr__jbuf_init(&b, hr__jctx_max_output(c));
    hr__jbuf_put(&b, "", 0);
    int start = 1;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t ch = hr__utf8_next(s.u.s->s, &i);
        int sep = ch == '-' || ch == '(' || ch == '{' || ch == '[' || ch == '<' ||
                  hr__py_isspace(ch);
        if (sep)
            hr__jbuf_utf8(&b, ch);
        else
            hr__jbuf_utf8(&b, (uint32_t)(start ? utf8proc_toupper((utf8proc_int32_t)ch)
                                               : utf8proc_tolower((utf8proc_int32_t)ch)));
        start = sep;
    }
    hr__jv_unref(s);
    if (b.failed) {
        hr__jbuf_free(&b);
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    RET(hr__jbuf_take(&b));
}

static int f_indent(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"width", "first", "blank"};
    hr_jv *arg[3];
    int rc = hr__jargs_bind(c, at, "indent", a, names, 3, arg);
    if (rc || (rc = hr__jinja_check_defined(c, at, v)))
        return rc;
    if (v.type != HR_JV_STR)
        return hr__jerr(c, at, HR_EINVAL, "unsupported operand type(s) for +=: '%s' and 'str'",
                        hr__jv_type_name(v));
    hr_jbuf ind;
    hr__jbuf_init(&ind, 4096);
    hr__jbuf_put(&ind, "", 0);
    if (arg[0] && arg[0]->type == HR_JV_STR) {
        hr__jbuf_put(&ind, arg[0]->u.s->s, arg[0]->u.s->len);
    } else {
        int64_t w;
        if ((rc = hr__jf_get_int(c, at, "indent width", arg[0], 4, &w))) {
            hr__jbuf_free(&ind);
            return rc;
        }
        for (int64_t i = 0; i < w && !ind.failed; i++)
            hr__jbuf_putc(&ind, ' ');
    }
    hr_jv lines = hr__jstr_splitlines(v);
    hr_jbuf b;
    hr__jbuf_init(&b, hr__jctx_max_output(c));
    hr__jbuf_put(&b, "", 0);
    if (!hr__jv_oom(lines)) {
        int first = hr__jf_truthy_arg(arg[1], 0), blank = hr__jf_truthy_arg(arg[2], 0);
        if (first)
            hr__jbuf_put(&b, ind.p, ind.len);
        /* s + "\n" split into lines: a trailing newline adds no empty line */
        for (size_t i = 0; i < lines.u.l->n; i++) {
            hr_jv ln = lines.u.l->v[i];
            if (i) {
                hr__jbuf_putc(&b, '\n');
                if (blank || ln.u.s->len)
                    hr__jbuf_put(&b, ind.p, ind.len);
            }
            hr__jbuf_put(&b, ln.u.s->s, ln.u.s->len);
        }
        hr__jv_unref(lines);
    }
    hr__jbuf_free(&ind);
    if (hr__jv_oom(lines) || b.failed) {
        hr__jbuf_free(&b);
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    hr_jv r = hr__jbuf_take(&b);
    if (!hr__jv_oom(r))
        r.flags |= v.flags & HR_JV_SAFE;
    RET(r);
}

static int f_tojson(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    hr_jv *arg[4];
    int rc = hr__jargs_bind(c, at, "tojson", a, names, 4, arg);
    if (rc)
        return rc;
    hr_jjson_opts o = {.ensure_ascii = hr__jf_truthy_arg(arg[0], 0), .sort_keys = hr__jf_truthy_arg(arg[3], 0)};
    char spaces[256];
    if (arg[1] && arg[1]->type != HR_JV_NONE) {
        if (arg[1]->type == HR_JV_STR) {
            o.indent = arg[1]->u.s->s;
            o.indent_len = arg[1]->u.s->len;
        } else {
            int64_t w;
            if ((rc = hr__jf_get_int(c, at, "indent", arg[1], 0, &w)))
                return rc;
            if (w > (int64_t)sizeof spaces)
                return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: indent over 256");
            memset(spaces, ' ', sizeof spaces);
            o.indent = spaces;
            o.indent_len = w > 0 ? (size_t)w : 0;
        }
    }
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (arg[2] && arg[2]->type != HR_JV_NONE) {
        hr_jv s = *arg[2];
        if (s.type != HR_JV_LIST || s.u.l->n != 2 || s.u.l->v[0].type != HR_JV_STR ||
            s.u.l->v[1].type != HR_JV_STR)
            return hr__jerr(c, at, HR_EINVAL, "tojson separators must be a pair of strings");
        o.item_sep = s.u.l->v[0].u.s->s;
        o.key_sep = s.u.l->v[1].u.s->s;
    }
    o.item_sep_len = strlen(o.item_sep);
    o.key_sep_len = strlen(o.key_sep);
    return hr__jinja_tojson(c, at, v, &o, out);
}

/* ---- numbers ------------------------------------------------------------------------- */

static int parse_py_number(hr_jv s, int want_float, hr_jv *out) {
    char tmp[128];
    hr_jv t = hr__jstr_strip(s, hr__jv_none(), 1, 1);
    if (hr__jv_oom(t))
        return -1;
    size_t k = 0, n = t.u.s->len;
    int ok = n > 0 && n < sizeof tmp;
    for (size_t i = 0; ok && i < n; i++) {
        char ch = t.u.s->s[i];
        if (ch == '_') {
            ok = i > 0 && i + 1 < n;
            continue;
        }
        tmp[k++] = ch;
    }
    tmp[k] = 0;
    hr__jv_unref(t);
    if (!ok)
        return -1;
    char *end;
    if (!want_float) {
        errno = 0;
        long long v = strtoll(tmp, &end, 10);
        if (*end || errno || end == tmp || strchr(tmp, ' '))
            return -1;
        *out = hr__jv_int(v);
        return 0;
    }
    double d = strtod(tmp, &end);
    if (*end || end == tmp || strchr(tmp, 'x') || strchr(tmp, 'X'))
        return -1;
    *out = hr__jv_float(d);
    return 0;
}

static int f_int(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"default", "base"};
    hr_jv *arg[2], r;
    int rc = hr__jargs_bind(c, at, "int", a, names, 2, arg);
    if (rc || (rc = hr__jinja_check_defined(c, at, v)))
        return rc;
    if (arg[1] && !(arg[1]->type == HR_JV_INT && arg[1]->u.i == 10))
        return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: int filter with base other than 10");
    if (v.type == HR_JV_INT || v.type == HR_JV_BOOL) {
        *out = hr__jv_int(v.type == HR_JV_INT ? v.u.i : v.u.b);
        return 0;
    }
    if (v.type == HR_JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) {
        *out = hr__jv_int((int64_t)v.u.f);
        return 0;
    }
    if (v.type == HR_JV_STR) {
        if (!parse_py_number(v, 0, &r)) {
            *out = r;
            return 0;
        }
        if (!parse_py_number(v, 1, &r) && isfinite(r.u.f) && fabs(r.u.f) < 9.2e18) {
            *out = hr__jv_int((int64_t)r.u.f);
            return 0;
        }
    }
    *out = arg[0] ? hr__jv_ref(*arg[0]) : hr__jv_int(0);
    return 0;
}

static int f_float(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"default"};
    hr_jv *arg[1], r;
    int rc = hr__jargs_bind(c, at, "float", a, names, 1, arg);
    if (rc || (rc = hr__jinja_check_defined(c, at, v)))
        return rc;
    if (hr__jv_is_number(v)) {
        *out = hr__jv_float(hr__jv_as_double(v));
        return 0;
    }
    if (v.type == HR_JV_STR && !parse_py_number(v, 1, &r)) {
        *out = r;
        return 0;
    }
    *out = arg[0] ? hr__jv_ref(*arg[0]) : hr__jv_float(0.0);
    return 0;
}

static int f_round(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"precision", "method"};
    hr_jv *arg[2];
    int64_t prec;
    int rc = hr__jargs_bind(c, at, "round", a, names, 2, arg);
    if (rc || (rc = hr__jf_get_int(c, at, "precision", arg[0], 0, &prec)))
        return rc;
    const char *m = arg[1] && arg[1]->type == HR_JV_STR ? arg[1]->u.s->s : "common";
    if (strcmp(m, "common") && strcmp(m, "ceil") && strcmp(m, "floor"))
        return hr__jerr(c, at, HR_EINVAL, "method must be common, ceil or floor");
    if ((rc = hr__jinja_check_defined(c, at, v)))
        return rc;
    if (!hr__jv_is_number(v))
        return hr__jerr(c, at, HR_EINVAL, "type %s doesn't define __round__ method",
                        hr__jv_type_name(v));
    if (v.type != HR_JV_FLOAT && !strcmp(m, "common")) {
        *out = hr__jv_int(v.type == HR_JV_INT ? v.u.i : v.u.b);
        return 0;
    }
    double x = hr__jv_as_double(v), p = pow(10, (double)prec);
    if (!strcmp(m, "common")) {
        char tmp[400];
        if (prec < 0 || prec > 300) {
            *out = hr__jv_float(round(x * p) / p);
            return 0;
        }
        snprintf(tmp, sizeof tmp, "%.*f", (int)prec, x); /* half-even on the exact value */
        *out = hr__jv_float(strtod(tmp, NULL));
        return 0;
    }
    *out = hr__jv_float((m[0] == 'c' ? ceil(x * p) : floor(x * p)) / p);
    return 0;
}

static int f_sum(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"attribute", "start"};
    hr_jv *arg[2], items;
    int rc = hr__jargs_bind(c, at, "sum", a, names, 2, arg);
    if (rc || (rc = hr__jinja_iterate(c, at, v, &items)))
        return rc;
    hr_jv acc = arg[1] ? hr__jv_ref(*arg[1]) : hr__jv_int(0);
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        hr_jv x = hr__jv_ref(items.u.l->v[i]), s;
        if (arg[0]) {
            hr_jv y;
            rc = hr__jf_attr_path(c, at, x, *arg[0], &y);
            hr__jv_unref(x);
            x = y;
            if (rc)
                break;
        }
        if (x.type == HR_JV_STR)
            rc = hr__jerr(c, at, HR_EINVAL, "unsupported operand type(s) for +: '%s' and 'str'",
                          hr__jv_type_name(acc));
        else if (!(rc = hr__jinja_binop(c, at, HR_JOP_ADD, acc, x, &s))) {
            hr__jv_unref(acc);
            acc = s;
        }
        hr__jv_unref(x);
    }
    hr__jv_unref(items);
    if (rc) {
        hr__jv_unref(acc);
        return rc;
    }
    *out = acc;
    return 0;
}

/* ---- small filters ------------------------------------------------------------------------ */

static int f_default(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"default_value", "boolean"};
    hr_jv *arg[2];
    int rc = hr__jargs_bind(c, at, "default", a, names, 2, arg);
    if (rc)
        return rc;
    int use = v.type == HR_JV_UNDEF || (hr__jf_truthy_arg(arg[1], 0) && !hr__jv_truthy(v));
    if (!use) {
        *out = hr__jv_ref(v);
        return 0;
    }
    RET(arg[0] ? hr__jv_ref(*arg[0]) : hr__jv_cstr(""));
}

static int f_strip_like(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"chars"};
    hr_jv *arg[1];
    int rc = hr__jargs_bind(c, at, "trim", a, names, 1, arg);
    if (rc)
        return rc;
    if (arg[0] && arg[0]->type != HR_JV_NONE && arg[0]->type != HR_JV_STR)
        return hr__jerr(c, at, HR_EINVAL, "strip arg must be None or str");
    hr_jv s = hr__jf_soft_str(c, v);
    if (hr__jv_oom(s))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    hr_jv r = hr__jstr_strip(s, arg[0] ? *arg[0] : hr__jv_none(), 1, 1);
    if (!hr__jv_oom(r))
        r.flags |= s.flags & HR_JV_SAFE;
    hr__jv_unref(s);
    RET(r);
}

static int f_replace(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"old", "new", "count"};
    hr_jv *arg[3];
    int64_t count;
    int rc = hr__jargs_bind(c, at, "replace", a, names, 3, arg);
    if (rc)
        return rc;
    if (!arg[0] || !arg[1])
        return hr__jerr(c, at, HR_EINVAL, "replace() needs the old and new strings");
    if (arg[2] && arg[2]->type == HR_JV_NONE)
        arg[2] = NULL;
    if ((rc = hr__jf_get_int(c, at, "count", arg[2], -1, &count)))
        return rc;
    hr_jv s = hr__jv_to_str(v, hr__jctx_max_output(c));
    hr_jv o = hr__jv_to_str(*arg[0], hr__jctx_max_output(c));
    hr_jv n = hr__jv_to_str(*arg[1], hr__jctx_max_output(c));
    hr_jv r = hr__jv_oom(s) || hr__jv_oom(o) || hr__jv_oom(n)
                  ? (hr_jv){.type = HR_JV_UNDEF, .flags = HR_JV_OOM}
                  : hr__jstr_replace(s, o, n, count, hr__jctx_max_output(c));
    hr__jv_unref(s);
    hr__jv_unref(o);
    hr__jv_unref(n);
    RET(r);
}

static int f_escape(hr_jctx *c, const hr_jnode *at, hr_jv v, int force, hr_jv *out) {
    if (v.type == HR_JV_STR && (v.flags & HR_JV_SAFE) && !force) {
        *out = hr__jv_ref(v);
        return 0;
    }
    hr_jv s = hr__jf_soft_str(c, v);
    if (hr__jv_oom(s))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    hr_jbuf b;
    hr__jbuf_init(&b, hr__jctx_max_output(c));
    hr__jbuf_put(&b, "", 0);
    hr__jstr_escape(&b, s);
    hr__jv_unref(s);
    hr_jv r = b.failed ? (hr__jbuf_free(&b), (hr_jv){.type = HR_JV_UNDEF, .flags = HR_JV_OOM})
                       : hr__jbuf_take(&b);
    if (!hr__jv_oom(r))
        r.flags |= HR_JV_SAFE;
    RET(r);
}

static int f_wordcount(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
    hr_jv s = hr__jf_soft_str(c, v);
    if (hr__jv_oom(s))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    int64_t n = 0;
    int in_word = 0;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t ch = hr__utf8_next(s.u.s->s, &i);
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)ch);
        int w = ch == '_' || (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
                (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
        n += w && !in_word;
        in_word = w;
    }
    hr__jv_unref(s);
    *out = hr__jv_int(n);
    return 0;
}

static int f_truncate(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"length", "killwords", "end", "leeway"};
    hr_jv *arg[4];
    int64_t length, leeway;
    int rc = hr__jargs_bind(c, at, "truncate", a, names, 4, arg);
    if (rc || (rc = hr__jf_get_int(c, at, "length", arg[0], 255, &length)) ||
        (rc = hr__jf_get_int(c, at, "leeway", arg[3], 5, &leeway)))
        return rc;
    hr_jv s = hr__jf_soft_str(c, v), end = arg[2] ? hr__jv_to_str(*arg[2], 4096) : hr__jv_cstr("...");
    if (hr__jv_oom(s) || hr__jv_oom(end)) {
        hr__jv_unref(s);
        hr__jv_unref(end);
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    int64_t n = (int64_t)hr__jv_strlen(s), el = (int64_t)hr__jv_strlen(end);
    if (length < el || leeway < 0) {
        hr__jv_unref(s);
        hr__jv_unref(end);
        return hr__jerr(c, at, HR_EINVAL, "expected length >= %lld and leeway >= 0", (long long)el);
    }
    if (n <= length + leeway) {
        hr__jv_unref(end);
        *out = s;
        return 0;
    }
    size_t cut = hr__jv_cp_offset(s, (size_t)(length - el));
    if (!hr__jf_truthy_arg(arg[1], 0)) {
        size_t k = cut;
        while (k > 0 && s.u.s->s[k - 1] != ' ')
            k--;
        if (k > 0)
            cut = k - 1;
    }
    hr_jbuf b;
    hr__jbuf_init(&b, hr__jctx_max_output(c));
    hr__jbuf_put(&b, s.u.s->s, cut);
    hr__jbuf_put(&b, end.u.s->s, end.u.s->len);
    hr__jv_unref(s);
    hr__jv_unref(end);
    RET(hr__jbuf_take(&b));
}

static int f_attr(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    if (a->npos != 1 || a->nkw || a->pos[0].type != HR_JV_STR)
        return hr__jerr(c, at, HR_EINVAL, "attr() takes one attribute name");
    const char *name = a->pos[0].u.s->s;
    /* attributes only: dict keys are not attributes */
    if (v.type == HR_JV_DICT && !(v.flags & HR_JV_NS) && !hr__jinja_has_method(v, name))
        RET(hr__jv_undef_hint("'dict object' has no attribute '%.100s'", name));
    return hr__jinja_getattr(c, at, v, name, out);
}

static int f_list(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
    int rc = hr__jinja_iterate(c, at, v, out);
    if (!rc)
        out->flags &= (uint8_t) ~(HR_JV_GEN | HR_JV_TUPLE);
    return rc;
}

static int f_abs(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
    if (v.type == HR_JV_FLOAT) {
        *out = hr__jv_float(fabs(v.u.f));
        return 0;
    }
    if (v.type == HR_JV_INT || v.type == HR_JV_BOOL) {
        int64_t x = v.type == HR_JV_INT ? v.u.i : v.u.b;
        return hr__jinja_unary(c, at, x < 0, hr__jv_int(x), out);
    }
    return hr__jerr(c, at, HR_EINVAL, "bad operand type for abs(): '%s'", hr__jv_type_name(v));
}

static int f_center(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    hr_jv s = hr__jf_soft_str(c, v);
    if (hr__jv_oom(s))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    if (!a->npos && !a->nkw)
        a->pos[a->npos++] = hr__jv_int(80);
    int rc = hr__jinja_method(c, at, s, "center", a, out);
    hr__jv_unref(s);
    return rc;
}

static int f_format(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    if (a->npos && a->nkw)
        return hr__jerr(c, at, HR_EINVAL, "can't handle positional and keyword arguments at the same time");
    hr_jv s = hr__jf_soft_str(c, v), args = a->nkw ? hr__jv_dict(a->nkw) : hr__jv_list(a->npos);
    int rc = hr__jv_oom(s) || hr__jv_oom(args) ? HR_ENOMEM : 0;
    for (int i = 0; i < a->npos && !rc; i++)
        rc = hr__jv_list_push(args, hr__jv_ref(a->pos[i]));
    for (int i = 0; i < a->nkw && !rc; i++) {
        hr_jv k = hr__jv_cstr(a->kw_name[i]);
        rc = hr__jv_oom(k) ? HR_ENOMEM : hr__jv_dict_set(args, k, hr__jv_ref(a->kw[i]));
    }
    if (!rc) {
        args.flags |= a->nkw ? 0 : HR_JV_TUPLE;
        rc = hr__jinja_percent(c, at, s, args, out);
    } else {
        rc = hr__jerr_alloc(c, at, rc);
    }
    if (!hr__jv_oom(s))
        hr__jv_unref(s);
    if (!hr__jv_oom(args))
        hr__jv_unref(args);
    return rc;
}

/* ---- dispatch ---------------------------------------------------------------------------- */

static int no_args(hr_jctx *c, const hr_jnode *at, const char *name, hr_jargs *a) {
    if (a->npos || a->nkw)
        return hr__jerr(c, at, HR_EINVAL, "%s() takes no arguments", name);
    return 0;
}

int hr__jinja_filter(hr_jctx *c, const hr_jnode *at, const char *name, hr_jv v, hr_jargs *a,
                     hr_jv *out) {
    int rc;
    if (!strcmp(name, "default") || !strcmp(name, "d"))
        return f_default(c, at, v, a, out);
    if (!strcmp(name, "tojson"))
        return f_tojson(c, at, v, a, out);
    if (!strcmp(name, "trim"))
        return f_strip_like(c, at, v, a, out);
    if (!strcmp(name, "indent"))
        return f_indent(c, at, v, a, out);
    if (!strcmp(name, "join"))
        return hr__jf_join(c, at, v, a, out);
    if (!strcmp(name, "replace"))
        return f_replace(c, at, v, a, out);
    if (!strcmp(name, "map") || !strcmp(name, "select") || !strcmp(name, "reject") ||
        !strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return hr__jf_apply(c, at, name, v, a, out);
    if (!strcmp(name, "sort") || !strcmp(name, "dictsort") || !strcmp(name, "unique") ||
        !strcmp(name, "min") || !strcmp(name, "max"))
        return hr__jf_order(c, at, name, v, a, out);
    if (!strcmp(name, "int"))
        return f_int(c, at, v, a, out);
    if (!strcmp(name, "float"))
        return f_float(c, at, v, a, out);
    if (!strcmp(name, "round"))
        return f_round(c, at, v, a, out);
    if (!strcmp(name, "sum"))
        return f_sum(c, at, v, a, out);
    if (!strcmp(name, "batch"))
        return hr__jf_batch(c, at, v, a, out);
    if (!strcmp(name, "truncate"))
        return f_truncate(c, at, v, a, out);
    if (!strcmp(name, "attr"))
        return f_attr(c, at, v, a, out);
    if (!strcmp(name, "center"))
        return f_center(c, at, v, a, out);
    if (!strcmp(name, "format"))
        return f_format(c, at, v, a, out);
    if (!hr__jinja_filter_known(name))
        return hr__jerr(c, at, HR_EINVAL, "no filter named '%s'", name);
    if (!strcmp(name, "groupby") || !strcmp(name, "slice") || !strcmp(name, "pprint") ||
        !strcmp(name, "random") || !strcmp(name, "striptags") || !strcmp(name, "urlencode") ||
        !strcmp(name, "urlize") || !strcmp(name, "wordwrap") || !strcmp(name, "xmlattr") ||
        !strcmp(name, "filesizeformat"))
        return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: the '%s' filter", name);
    if ((rc = no_args(c, at, name, a)))
        return rc;
    if (!strcmp(name, "length") || !strcmp(name, "count"))
        return hr__jf_length(c, at, v, out);
    if (!strcmp(name, "string")) {
        if (v.type == HR_JV_STR) {
            *out = hr__jv_ref(v);
            return 0;
        }
        RET(hr__jf_soft_str(c, v));
    }
    if (!strcmp(name, "safe")) {
        hr_jv s = hr__jf_soft_str(c, v);
        if (!hr__jv_oom(s))
            s.flags |= HR_JV_SAFE;
        RET(s);
    }
    if (!strcmp(name, "escape") || !strcmp(name, "e") || !strcmp(name, "forceescape"))
        return f_escape(c, at, v, name[0] == 'f', out);
    if (!strcmp(name, "upper"))
        return f_case(c, at, v, HR_JCASE_UPPER, out);
    if (!strcmp(name, "lower"))
        return f_case(c, at, v, HR_JCASE_LOWER, out);
    if (!strcmp(name, "capitalize"))
        return f_case(c, at, v, HR_JCASE_CAPITALIZE, out);
    if (!strcmp(name, "title"))
        return f_title(c, at, v, out);
    if (!strcmp(name, "first") || !strcmp(name, "last"))
        return hr__jf_first_last(c, at, v, name[0] == 'l', out);
    if (!strcmp(name, "list"))
        return f_list(c, at, v, out);
    if (!strcmp(name, "items"))
        return hr__jf_items(c, at, v, out);
    if (!strcmp(name, "reverse"))
        return hr__jf_reverse(c, at, v, out);
    if (!strcmp(name, "abs"))
        return f_abs(c, at, v, out);
    if (!strcmp(name, "wordcount"))
        return f_wordcount(c, at, v, out);
    return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: the '%s' filter", name);
}
