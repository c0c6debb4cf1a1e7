/* Jinja filters (jinja2's builtins, with transformers' tojson) and the
 * attribute getters and sorting they share. Tests are in jinja_tests.c. */
#include "chat/jinja_eval.h"
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

/* ---- shared helpers ----------------------------------------------------------- */

#define RET(v) return ret(c, at, (v), out)

static int ret(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
    if (hr__jv_oom(v))
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    *out = v;
    return 0;
}

/* jinja2's soft_str: Undefined -> '', str (and Markup) as is, else str(). */
static hr_jv soft_str(hr_jctx *c, hr_jv v) {
    if (v.type == HR_JV_STR)
        return hr__jv_ref(v);
    if (v.type == HR_JV_UNDEF)
        return hr__jv_cstr("");
    return hr__jv_to_str(v, hr__jctx_max_output(c));
}

static int get_int(hr_jctx *c, const hr_jnode *at, const char *what, hr_jv *v, int64_t dflt,
                   int64_t *out) {
    *out = dflt;
    if (!v)
        return 0;
    if (v->type == HR_JV_INT || v->type == HR_JV_BOOL) {
        *out = v->type == HR_JV_INT ? v->u.i : v->u.b;
        return 0;
    }
    return hr__jerr(c, at, HR_EINVAL, "%s must be an integer, not %s", what, hr__jv_type_name(*v));
}

static int truthy_arg(hr_jv *v, int dflt) { return v ? hr__jv_truthy(*v) : dflt; }

/* make_attrgetter: "a.b.0" looked up item-first at each step. */
static int attr_path(hr_jctx *c, const hr_jnode *at, hr_jv item, hr_jv attr, hr_jv *out) {
    if (attr.type != HR_JV_STR) {
        if (attr.type == HR_JV_INT)
            return hr__jinja_getitem(c, at, item, attr, out);
        return hr__jerr(c, at, HR_EINVAL, "attribute must be a string or integer");
    }
    hr_jv cur = hr__jv_ref(item);
    const char *p = attr.u.s->s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        int digits = n > 0;
        int64_t iv = 0;
        for (size_t i = 0; i < n && digits; i++) {
            digits = p[i] >= '0' && p[i] <= '9' && iv < 100000000;
            iv = iv * 10 + (p[i] - '0');
        }
        hr_jv key = digits ? hr__jv_int(iv) : hr__jv_str(p, n), next;
        if (hr__jv_oom(key)) {
            hr__jv_unref(cur);
            return hr__jerr_alloc(c, at, HR_ENOMEM);
        }
        int rc = hr__jinja_getitem(c, at, cur, key, &next);
        hr__jv_unref(key);
        hr__jv_unref(cur);
        if (rc)
            return rc;
        cur = next;
        if (!dot)
            break;
        p = dot + 1;
    }
    *out = cur;
    return 0;
}

/* Sort key for case-insensitive comparisons: lower() of strings. */
static hr_jv fold(hr_jv v, int case_sensitive) {
    if (!case_sensitive && v.type == HR_JV_STR)
        return hr__jstr_case(v, HR_JCASE_LOWER);
    return hr__jv_ref(v);
}

/* Stable merge sort of idx[0..n) by keys[idx]; Python's TypeError on
 * unorderable keys becomes a template error. */
static int sort_idx(hr_jctx *c, const hr_jnode *at, const hr_jv *keys, size_t *idx, size_t n,
                    int reverse) {
    size_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                int cmp;
                if (hr__jv_compare(keys[idx[j]], keys[idx[i]], &cmp)) {
                    free(tmp);
                    return hr__jerr(c, at, HR_EINVAL,
                                    "'<' not supported between instances of '%s' and '%s'",
                                    hr__jv_type_name(keys[idx[j]]), hr__jv_type_name(keys[idx[i]]));
                }
                /* take from the right only when strictly before (stability) */
                int right_first = reverse ? cmp > 0 : cmp < 0;
                tmp[k++] = right_first ? idx[j++] : idx[i++];
            }
            while (i < mid)
                tmp[k++] = idx[i++];
            while (j < hi)
                tmp[k++] = idx[j++];
        }
        memcpy(idx, tmp, n * sizeof *idx);
    }
    free(tmp);
    return 0;
}

static hr_jv gen(hr_jv l) {
    if (!hr__jv_oom(l))
        l.flags |= HR_JV_GEN;
    return l;
}

/* ---- string filters ---------------------------------------------------------------- */

static int f_case(hr_jctx *c, const hr_jnode *at, hr_jv v, int mode, hr_jv *out) {
    hr_jv s = soft_str(c, v);
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
    hr_jv s = soft_str(c, v);
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
        if ((rc = get_int(c, at, "indent width", arg[0], 4, &w))) {
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
        int first = truthy_arg(arg[1], 0), blank = truthy_arg(arg[2], 0);
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
    hr_jjson_opts o = {.ensure_ascii = truthy_arg(arg[0], 0), .sort_keys = truthy_arg(arg[3], 0)};
    char spaces[256];
    if (arg[1] && arg[1]->type != HR_JV_NONE) {
        if (arg[1]->type == HR_JV_STR) {
            o.indent = arg[1]->u.s->s;
            o.indent_len = arg[1]->u.s->len;
        } else {
            int64_t w;
            if ((rc = get_int(c, at, "indent", arg[1], 0, &w)))
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

/* ---- sequence filters --------------------------------------------------------------- */

static int f_length(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
    switch (v.type) {
    case HR_JV_UNDEF: *out = hr__jv_int(0); return 0;
    case HR_JV_STR: *out = hr__jv_int((int64_t)hr__jv_strlen(v)); return 0;
    case HR_JV_LIST:
        if (v.flags & HR_JV_GEN)
            break;
        *out = hr__jv_int((int64_t)v.u.l->n);
        return 0;
    case HR_JV_DICT:
        if (v.flags & HR_JV_NS)
            break;
        *out = hr__jv_int((int64_t)v.u.d->n);
        return 0;
    default:
        break;
    }
    return hr__jerr(c, at, HR_EINVAL, "object of type '%s' has no len()",
                    (v.flags & HR_JV_GEN) ? "generator" : hr__jv_type_name(v));
}

static int f_first_last(hr_jctx *c, const hr_jnode *at, hr_jv v, int last, hr_jv *out) {
    hr_jv items;
    int rc = hr__jinja_iterate(c, at, v, &items);
    if (rc)
        return rc;
    size_t n = items.u.l->n;
    if (n)
        *out = hr__jv_ref(items.u.l->v[last ? n - 1 : 0]);
    else
        *out = hr__jv_undef_hint("No %s item, sequence was empty.", last ? "last" : "first");
    hr__jv_unref(items);
    RET(*out);
}

static int f_join(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"d", "attribute"};
    hr_jv *arg[2], items;
    int rc = hr__jargs_bind(c, at, "join", a, names, 2, arg);
    if (rc || (rc = hr__jinja_iterate(c, at, v, &items)))
        return rc;
    hr_jbuf b;
    hr__jbuf_init(&b, hr__jctx_max_output(c));
    hr__jbuf_put(&b, "", 0);
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        hr_jv it = hr__jv_ref(items.u.l->v[i]);
        if (arg[1]) {
            hr_jv x;
            rc = attr_path(c, at, it, *arg[1], &x);
            hr__jv_unref(it);
            if (rc)
                break;
            it = x;
        }
        if (i && arg[0])
            hr__jv_str_append(&b, *arg[0]);
        hr__jv_str_append(&b, it);
        hr__jv_unref(it);
    }
    hr__jv_unref(items);
    if (rc || b.failed) {
        hr__jbuf_free(&b);
        return rc ? rc : hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    RET(hr__jbuf_take(&b));
}

/* map / select / reject / selectattr / rejectattr */
static int f_apply(hr_jctx *c, const hr_jnode *at, const char *fname, hr_jv v, hr_jargs *a,
                   hr_jv *out) {
    int is_map = !strcmp(fname, "map"), by_attr = strstr(fname, "attr") != NULL;
    int reject = fname[0] == 'r';
    hr_jv items, res;
    if (!hr__jv_truthy(v)) /* jinja2: `if value:` guards the generator */
        RET(gen(hr__jv_list(0)));
    hr_jv attr = hr__jv_none(), dflt = hr__jv_none();
    int off = 0;
    const char *name = NULL;
    if (is_map && a->npos == 0) {
        for (int k = 0; k < a->nkw; k++) {
            if (!strcmp(a->kw_name[k], "attribute"))
                attr = a->kw[k];
            else if (!strcmp(a->kw_name[k], "default"))
                dflt = a->kw[k];
            else
                return hr__jerr(c, at, HR_EINVAL, "unexpected keyword argument '%s' for map",
                                a->kw_name[k]);
        }
        if (attr.type == HR_JV_NONE)
            return hr__jerr(c, at, HR_EINVAL, "map requires a filter argument");
    } else {
        if (by_attr) {
            if (a->npos < 1)
                return hr__jerr(c, at, HR_EINVAL, "missing parameter for attribute name");
            attr = a->pos[0];
            off = 1;
        }
        if (a->npos > off) {
            if (a->pos[off].type != HR_JV_STR)
                return hr__jerr(c, at, HR_EINVAL, "%s name must be a string",
                                is_map ? "filter" : "test");
            name = a->pos[off].u.s->s;
            off++;
        } else if (is_map) {
            return hr__jerr(c, at, HR_EINVAL, "map requires a filter argument");
        }
    }
    int rc = hr__jinja_iterate(c, at, v, &items);
    if (rc)
        return rc;
    res = hr__jv_list(items.u.l->n);
    rc = hr__jv_oom(res) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        hr_jv item = items.u.l->v[i], x;
        if (attr.type != HR_JV_NONE) {
            if ((rc = attr_path(c, at, item, attr, &x)))
                break;
            if (x.type == HR_JV_UNDEF && dflt.type != HR_JV_NONE) {
                hr__jv_unref(x);
                x = hr__jv_ref(dflt);
            }
        } else {
            x = hr__jv_ref(item);
        }
        hr_jargs sub = {0};
        if (name) {
            for (int k = off; k < a->npos; k++)
                sub.pos[sub.npos++] = hr__jv_ref(a->pos[k]);
            for (int k = 0; k < a->nkw && !is_map; k++) {
                sub.kw_name[sub.nkw] = a->kw_name[k];
                sub.kw[sub.nkw++] = hr__jv_ref(a->kw[k]);
            }
            if (is_map)
                for (int k = 0; k < a->nkw; k++) {
                    sub.kw_name[sub.nkw] = a->kw_name[k];
                    sub.kw[sub.nkw++] = hr__jv_ref(a->kw[k]);
                }
        }
        if (is_map) {
            hr_jv y;
            if (name) {
                rc = hr__jinja_filter(c, at, name, x, &sub, &y);
                hr__jv_unref(x);
                x = y;
            }
            if (!rc && (rc = hr__jv_list_push(res, x)))
                rc = hr__jerr_alloc(c, at, rc);
        } else {
            int t = 0;
            if (name)
                rc = hr__jinja_test(c, at, name, x, &sub, &t);
            else
                t = hr__jv_truthy(x);
            hr__jv_unref(x);
            if (!rc && t != reject && (rc = hr__jv_list_push(res, hr__jv_ref(item))))
                rc = hr__jerr_alloc(c, at, rc);
        }
        hr__jargs_free(&sub);
    }
    hr__jv_unref(items);
    if (rc) {
        if (!hr__jv_oom(res))
            hr__jv_unref(res);
        return rc;
    }
    *out = gen(res);
    return 0;
}

/* Keys for sort/unique/min/max: attribute path(s) then case folding. */
static int make_keys(hr_jctx *c, const hr_jnode *at, hr_jv items, hr_jv *attr, int cs,
                     hr_jv **keys_out) {
    size_t n = items.u.l->n;
    hr_jv *keys = calloc(n ? n : 1, sizeof *keys);
    if (!keys)
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        hr_jv x = hr__jv_ref(items.u.l->v[i]);
        if (attr && attr->type != HR_JV_NONE) {
            hr_jv y;
            rc = attr_path(c, at, x, *attr, &y);
            hr__jv_unref(x);
            if (rc)
                break;
            x = y;
        }
        keys[i] = fold(x, cs);
        hr__jv_unref(x);
        if (hr__jv_oom(keys[i])) {
            keys[i] = hr__jv_none();
            rc = hr__jerr_alloc(c, at, HR_ENOMEM);
        }
    }
    if (rc) {
        for (size_t i = 0; i < n; i++)
            hr__jv_unref(keys[i]);
        free(keys);
        return rc;
    }
    *keys_out = keys;
    return 0;
}

static void free_keys(hr_jv *keys, size_t n) {
    for (size_t i = 0; keys && i < n; i++)
        hr__jv_unref(keys[i]);
    free(keys);
}

/* sort, dictsort, unique, min, max */
static int f_order(hr_jctx *c, const hr_jnode *at, const char *fname, hr_jv v, hr_jargs *a,
                   hr_jv *out) {
    static const char *const sort_names[] = {"reverse", "case_sensitive", "attribute"};
    static const char *const uniq_names[] = {"case_sensitive", "attribute"};
    static const char *const dict_names[] = {"case_sensitive", "by", "reverse"};
    hr_jv *arg[3] = {NULL, NULL, NULL}, items, *keys = NULL, *attr = NULL, by;
    int rc, reverse = 0, cs;
    int is_sort = !strcmp(fname, "sort"), is_dict = !strcmp(fname, "dictsort");
    if (is_sort) {
        rc = hr__jargs_bind(c, at, fname, a, sort_names, 3, arg);
        reverse = truthy_arg(arg[0], 0);
        cs = truthy_arg(arg[1], 0);
        attr = arg[2];
    } else if (is_dict) {
        rc = hr__jargs_bind(c, at, fname, a, dict_names, 3, arg);
        cs = truthy_arg(arg[0], 0);
        reverse = truthy_arg(arg[2], 0);
    } else {
        rc = hr__jargs_bind(c, at, fname, a, uniq_names, 2, arg);
        cs = truthy_arg(arg[0], 0);
        attr = arg[1];
    }
    if (rc)
        return rc;
    if (is_dict) {
        if ((rc = hr__jinja_check_defined(c, at, v)))
            return rc;
        if (v.type != HR_JV_DICT || (v.flags & HR_JV_NS))
            return hr__jerr(c, at, HR_EINVAL, "dictsort requires a mapping");
        hr_jargs none = {0};
        if ((rc = hr__jinja_method(c, at, v, "items", &none, &items)))
            return rc;
        const char *b = arg[1] && arg[1]->type == HR_JV_STR ? arg[1]->u.s->s : "key";
        if (strcmp(b, "key") && strcmp(b, "value")) {
            hr__jv_unref(items);
            return hr__jerr(c, at, HR_EINVAL, "You can only sort by either \"key\" or \"value\"");
        }
        by = hr__jv_int(b[0] == 'k' ? 0 : 1);
        attr = &by;
    } else if ((rc = hr__jinja_iterate(c, at, v, &items))) {
        return rc;
    }
    size_t n = items.u.l->n, *idx = malloc((n ? n : 1) * sizeof *idx);
    if (!idx || (rc = make_keys(c, at, items, attr, cs, &keys))) {
        free(idx);
        hr__jv_unref(items);
        return rc ? rc : hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    hr_jv res = hr__jv_none();
    if (!strcmp(fname, "unique")) {
        res = hr__jv_list(n);
        rc = hr__jv_oom(res) ? HR_ENOMEM : 0;
        for (size_t i = 0; i < n && !rc; i++) {
            int seen = 0;
            for (size_t j = 0; j < i && !seen; j++)
                seen = hr__jv_equal(keys[i], keys[j]);
            if (!seen)
                rc = hr__jv_list_push(res, hr__jv_ref(items.u.l->v[i]));
        }
        res = gen(res);
        rc = rc ? hr__jerr_alloc(c, at, rc) : 0;
    } else if (!strcmp(fname, "min") || !strcmp(fname, "max")) {
        size_t best = 0;
        for (size_t i = 1; i < n && !rc; i++) {
            int cmp;
            if (hr__jv_compare(keys[i], keys[best], &cmp))
                rc = hr__jerr(c, at, HR_EINVAL, "'<' not supported between instances of '%s' and '%s'",
                              hr__jv_type_name(keys[i]), hr__jv_type_name(keys[best]));
            else if (fname[1] == 'i' ? cmp < 0 : cmp > 0)
                best = i;
        }
        if (!rc)
            res = n ? hr__jv_ref(items.u.l->v[best])
                    : hr__jv_undef_hint("No aggregated item, sequence was empty.");
    } else if (!(rc = sort_idx(c, at, keys, idx, n, reverse))) {
        res = hr__jv_list(n);
        for (size_t i = 0; i < n && !hr__jv_oom(res) && !rc; i++)
            rc = hr__jv_list_push(res, hr__jv_ref(items.u.l->v[idx[i]]));
        rc = hr__jv_oom(res) || rc ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
    }
    free(idx);
    free_keys(keys, n);
    hr__jv_unref(items);
    if (rc) {
        if (!hr__jv_oom(res))
            hr__jv_unref(res);
        return rc;
    }
    RET(res);
}

static int f_items(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
    if (v.type == HR_JV_UNDEF)
        RET(gen(hr__jv_list(0)));
    if (v.type != HR_JV_DICT || (v.flags & HR_JV_NS))
        return hr__jerr(c, at, HR_EINVAL, "Can only get item pairs from a mapping.");
    hr_jargs none = {0};
    int rc = hr__jinja_method(c, at, v, "items", &none, out);
    if (!rc)
        *out = gen(*out);
    return rc;
}

static int f_reverse(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
    if (v.type == HR_JV_STR) {
        hr_jv idx[3] = {hr__jv_none(), hr__jv_none(), hr__jv_int(-1)};
        return hr__jinja_slice(c, at, v, idx, out);
    }
    hr_jv items;
    int rc = hr__jinja_iterate(c, at, v, &items);
    if (rc)
        return rc;
    hr_jv r = hr__jv_list(items.u.l->n);
    for (size_t i = items.u.l->n; i > 0 && !hr__jv_oom(r) && !rc; i--)
        rc = hr__jv_list_push(r, hr__jv_ref(items.u.l->v[i - 1]));
    int gen_like = v.type == HR_JV_LIST && !(v.flags & HR_JV_GEN);
    hr__jv_unref(items);
    if (hr__jv_oom(r) || rc) {
        if (!hr__jv_oom(r))
            hr__jv_unref(r);
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    RET(gen_like ? gen(r) : r);
}

static int f_batch(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"linecount", "fill_with"};
    hr_jv *arg[2], items;
    int64_t size;
    int rc = hr__jargs_bind(c, at, "batch", a, names, 2, arg);
    if (rc || (rc = get_int(c, at, "linecount", arg[0], 0, &size)))
        return rc;
    if (size <= 0)
        return hr__jerr(c, at, HR_EINVAL, "batch size must be positive");
    if ((rc = hr__jinja_iterate(c, at, v, &items)))
        return rc;
    hr_jv res = hr__jv_list(0), row = hr__jv_none();
    for (size_t i = 0; i < items.u.l->n && !rc; i++) {
        if (row.type == HR_JV_NONE)
            row = hr__jv_list((size_t)size);
        rc = hr__jv_oom(row) ? HR_ENOMEM : hr__jv_list_push(row, hr__jv_ref(items.u.l->v[i]));
        if (!rc && (int64_t)row.u.l->n == size) {
            rc = hr__jv_list_push(res, row);
            row = hr__jv_none();
        }
    }
    if (!rc && row.type == HR_JV_LIST) {
        while (arg[1] && (int64_t)row.u.l->n < size && !rc)
            rc = hr__jv_list_push(row, hr__jv_ref(*arg[1]));
        rc = rc ? rc : hr__jv_list_push(res, row);
        row = hr__jv_none();
    }
    hr__jv_unref(row);
    hr__jv_unref(items);
    if (rc) {
        hr__jv_unref(res);
        return hr__jerr_alloc(c, at, rc);
    }
    RET(gen(res));
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
    if (rc || (rc = get_int(c, at, "precision", arg[0], 0, &prec)))
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
            rc = attr_path(c, at, x, *arg[0], &y);
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
    int use = v.type == HR_JV_UNDEF || (truthy_arg(arg[1], 0) && !hr__jv_truthy(v));
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
    hr_jv s = soft_str(c, v);
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
    if ((rc = get_int(c, at, "count", arg[2], -1, &count)))
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
    hr_jv s = soft_str(c, v);
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
    hr_jv s = soft_str(c, v);
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
    if (rc || (rc = get_int(c, at, "length", arg[0], 255, &length)) ||
        (rc = get_int(c, at, "leeway", arg[3], 5, &leeway)))
        return rc;
    hr_jv s = soft_str(c, v), end = arg[2] ? hr__jv_to_str(*arg[2], 4096) : hr__jv_cstr("...");
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
    if (!truthy_arg(arg[1], 0)) {
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
    hr_jv s = soft_str(c, v);
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
    hr_jv s = soft_str(c, v), args = a->nkw ? hr__jv_dict(a->nkw) : hr__jv_list(a->npos);
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
        return f_join(c, at, v, a, out);
    if (!strcmp(name, "replace"))
        return f_replace(c, at, v, a, out);
    if (!strcmp(name, "map") || !strcmp(name, "select") || !strcmp(name, "reject") ||
        !strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return f_apply(c, at, name, v, a, out);
    if (!strcmp(name, "sort") || !strcmp(name, "dictsort") || !strcmp(name, "unique") ||
        !strcmp(name, "min") || !strcmp(name, "max"))
        return f_order(c, at, name, v, a, out);
    if (!strcmp(name, "int"))
        return f_int(c, at, v, a, out);
    if (!strcmp(name, "float"))
        return f_float(c, at, v, a, out);
    if (!strcmp(name, "round"))
        return f_round(c, at, v, a, out);
    if (!strcmp(name, "sum"))
        return f_sum(c, at, v, a, out);
    if (!strcmp(name, "batch"))
        return f_batch(c, at, v, a, out);
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
        return f_length(c, at, v, out);
    if (!strcmp(name, "string")) {
        if (v.type == HR_JV_STR) {
            *out = hr__jv_ref(v);
            return 0;
        }
        RET(soft_str(c, v));
    }
    if (!strcmp(name, "safe")) {
        hr_jv s = soft_str(c, v);
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
        return f_first_last(c, at, v, name[0] == 'l', out);
    if (!strcmp(name, "list"))
        return f_list(c, at, v, out);
    if (!strcmp(name, "items"))
        return f_items(c, at, v, out);
    if (!strcmp(name, "reverse"))
        return f_reverse(c, at, v, out);
    if (!strcmp(name, "abs"))
        return f_abs(c, at, v, out);
    if (!strcmp(name, "wordcount"))
        return f_wordcount(c, at, v, out);
    return hr__jerr(c, at, HR_EUNSUPPORTED, "not supported yet: the '%s' filter", name);
}
