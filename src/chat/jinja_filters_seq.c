/* Jinja filters over sequences: length, first/last, join, map/select/
 * reject(attr), sort/dictsort/unique/min/max, items, reverse, batch. Like
 * jinja2, the lazy ones return generators (HR_JV_GEN lists). */
#include "chat/jinja_filters.h"
#include "chat/jinja_lex.h"
#include "chat/jinja_ops.h"
#include "chat/jinja_str.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

int hr__jf_attr_path(hr_jctx *c, const hr_jnode *at, hr_jv item, hr_jv attr, hr_jv *out) {
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

/* ---- sequence filters --------------------------------------------------------------- */

int hr__jf_length(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
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

int hr__jf_first_last(hr_jctx *c, const hr_jnode *at, hr_jv v, int last, hr_jv *out) {
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

int hr__jf_join(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
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
            rc = hr__jf_attr_path(c, at, it, *arg[1], &x);
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
int hr__jf_apply(hr_jctx *c, const hr_jnode *at, const char *fname, hr_jv v, hr_jargs *a,
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
            if ((rc = hr__jf_attr_path(c, at, item, attr, &x)))
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
            rc = hr__jf_attr_path(c, at, x, *attr, &y);
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
int hr__jf_order(hr_jctx *c, const hr_jnode *at, const char *fname, hr_jv v, hr_jargs *a,
                   hr_jv *out) {
    static const char *const sort_names[] = {"reverse", "case_sensitive", "attribute"};
    static const char *const uniq_names[] = {"case_sensitive", "attribute"};
    static const char *const dict_names[] = {"case_sensitive", "by", "reverse"};
    hr_jv *arg[3] = {NULL, NULL, NULL}, items, *keys = NULL, *attr = NULL, by;
    int rc, reverse = 0, cs;
    int is_sort = !strcmp(fname, "sort"), is_dict = !strcmp(fname, "dictsort");
    if (is_sort) {
        rc = hr__jargs_bind(c, at, fname, a, sort_names, 3, arg);
        reverse = hr__jf_truthy_arg(arg[0], 0);
        cs = hr__jf_truthy_arg(arg[1], 0);
        attr = arg[2];
    } else if (is_dict) {
        rc = hr__jargs_bind(c, at, fname, a, dict_names, 3, arg);
        cs = hr__jf_truthy_arg(arg[0], 0);
        reverse = hr__jf_truthy_arg(arg[2], 0);
    } else {
        rc = hr__jargs_bind(c, at, fname, a, uniq_names, 2, arg);
        cs = hr__jf_truthy_arg(arg[0], 0);
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

int hr__jf_items(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
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

int hr__jf_reverse(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out) {
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

int hr__jf_batch(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jargs *a, hr_jv *out) {
    static const char *const names[] = {"linecount", "fill_with"};
    hr_jv *arg[2], items;
    int64_t size;
    int rc = hr__jargs_bind(c, at, "batch", a, names, 2, arg);
    if (rc || (rc = hr__jf_get_int(c, at, "linecount", arg[0], 0, &size)))
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

