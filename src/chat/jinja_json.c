/* JSON in and out of Jinja values: Python's json.dumps (as transformers'
 * tojson filter calls it: ensure_ascii=False by default, no HTML escaping)
 * and jansson values -> Jinja values for render inputs. */
#include "chat/jinja.h"
#include "chat/jinja_eval.h"
#include "core/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- dumps ----------------------------------------------------------------- */

typedef struct dumper {
    hr_jctx *c;
    const hr_jnode *at;
    const hr_jjson_opts *o;
    hr_jbuf *b;
} dumper;

static void dump_str(dumper *d, const char *s, size_t n) {
    hr_jbuf *b = d->b;
    hr__jbuf_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        uint32_t c = hr__utf8_next(s, &i);
        switch (c) {
        case '"': hr__jbuf_puts(b, "\\\""); break;
        case '\\': hr__jbuf_puts(b, "\\\\"); break;
        case '\n': hr__jbuf_puts(b, "\\n"); break;
        case '\r': hr__jbuf_puts(b, "\\r"); break;
        case '\t': hr__jbuf_puts(b, "\\t"); break;
        case '\b': hr__jbuf_puts(b, "\\b"); break;
        case '\f': hr__jbuf_puts(b, "\\f"); break;
        default:
            if (c < 0x20) {
                hr__jbuf_printf(b, "\\u%04x", c);
            } else if (c > 0x7E && d->o->ensure_ascii && c != 0x7F) {
                if (c >= 0x10000) {
                    uint32_t v = c - 0x10000;
                    hr__jbuf_printf(b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    hr__jbuf_printf(b, "\\u%04x", c);
                }
            } else {
                hr__jbuf_put(b, s + start, i - start);
            }
        }
    }
    hr__jbuf_putc(b, '"');
}

static void dump_float(hr_jbuf *b, double f) {
    if (isnan(f))
        hr__jbuf_puts(b, "NaN");
    else if (isinf(f))
        hr__jbuf_puts(b, f < 0 ? "-Infinity" : "Infinity");
    else
        hr__jv_float_repr(b, f);
}

static void newline(dumper *d, int level) {
    hr__jbuf_putc(d->b, '\n');
    for (int i = 0; i < level; i++)
        hr__jbuf_put(d->b, d->o->indent, d->o->indent_len);
}

static void item_sep(dumper *d, int level) {
    hr__jbuf_put(d->b, d->o->item_sep, d->o->item_sep_len);
    if (d->o->indent)
        newline(d, level);
}

static int dump(dumper *d, hr_jv v, int level);

static int dump_key(dumper *d, hr_jv k) {
    switch (k.type) {
    case HR_JV_STR: dump_str(d, k.u.s->s, k.u.s->len); return 0;
    case HR_JV_INT: hr__jbuf_printf(d->b, "\"%lld\"", (long long)k.u.i); return 0;
    case HR_JV_BOOL: hr__jbuf_puts(d->b, k.u.b ? "\"true\"" : "\"false\""); return 0;
    case HR_JV_NONE: hr__jbuf_puts(d->b, "\"null\""); return 0;
    case HR_JV_FLOAT:
        hr__jbuf_putc(d->b, '"');
        dump_float(d->b, k.u.f);
        hr__jbuf_putc(d->b, '"');
        return 0;
    default:
        return hr__jerr(d->c, d->at, HR_EINVAL,
                        "keys must be str, int, float, bool or None, not %s", hr__jv_type_name(k));
    }
}

static int dump_dict(dumper *d, hr_jv v, int level) {
    hr_jdict *m = v.u.d;
    if (!m->n) {
        hr__jbuf_puts(d->b, "{}");
        return 0;
    }
    size_t *idx = malloc(m->n * sizeof *idx);
    if (!idx)
        return hr__jerr_alloc(d->c, d->at, HR_ENOMEM);
    for (size_t i = 0; i < m->n; i++)
        idx[i] = i;
    if (d->o->sort_keys) { /* insertion sort: stable, with Python's type errors */
        for (size_t i = 1; i < m->n; i++) {
            size_t x = idx[i], j = i;
            while (j > 0) {
                int cmp;
                if (hr__jv_compare(m->k[idx[j - 1]], m->k[x], &cmp)) {
                    free(idx);
                    return hr__jerr(d->c, d->at, HR_EINVAL,
                                    "'<' not supported between instances of '%s' and '%s'",
                                    hr__jv_type_name(m->k[x]), hr__jv_type_name(m->k[idx[j - 1]]));
                }
                if (cmp <= 0)
                    break;
                idx[j] = idx[j - 1];
                j--;
            }
            idx[j] = x;
        }
    }
    hr__jbuf_putc(d->b, '{');
    if (d->o->indent)
        newline(d, level + 1);
    int rc = 0;
    for (size_t i = 0; i < m->n && !rc; i++) {
        if (i)
            item_sep(d, level + 1);
        if (!(rc = dump_key(d, m->k[idx[i]]))) {
            hr__jbuf_put(d->b, d->o->key_sep, d->o->key_sep_len);
            rc = dump(d, m->v[idx[i]], level + 1);
        }
    }
    free(idx);
    if (d->o->indent)
        newline(d, level);
    hr__jbuf_putc(d->b, '}');
    return rc;
}

static int dump(dumper *d, hr_jv v, int level) {
    if (level > HR_JV_MAX_DEPTH)
        return hr__jerr(d->c, d->at, HR_EINVAL, "Circular reference detected");
    if (d->b->failed)
        return hr__jerr_alloc(d->c, d->at, HR_ENOMEM);
    switch (v.type) {
    case HR_JV_NONE: hr__jbuf_puts(d->b, "null"); return 0;
    case HR_JV_BOOL: hr__jbuf_puts(d->b, v.u.b ? "true" : "false"); return 0;
    case HR_JV_INT: hr__jbuf_printf(d->b, "%lld", (long long)v.u.i); return 0;
    case HR_JV_FLOAT: dump_float(d->b, v.u.f); return 0;
    case HR_JV_STR: dump_str(d, v.u.s->s, v.u.s->len); return 0;
    case HR_JV_LIST: {
        if (v.flags & HR_JV_GEN)
            break;
        if (!v.u.l->n) {
            hr__jbuf_puts(d->b, "[]");
            return 0;
        }
        hr__jbuf_putc(d->b, '[');
        if (d->o->indent)
            newline(d, level + 1);
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                item_sep(d, level + 1);
            int rc = dump(d, v.u.l->v[i], level + 1);
            if (rc)
                return rc;
        }
        if (d->o->indent)
            newline(d, level);
        hr__jbuf_putc(d->b, ']');
        return 0;
    }
    case HR_JV_DICT:
        if (v.flags & HR_JV_NS)
            break;
        return dump_dict(d, v, level);
    default:
        break;
    }
    return hr__jerr(d->c, d->at, HR_EINVAL, "Object of type %s is not JSON serializable",
                    (v.flags & HR_JV_GEN) ? "generator" : hr__jv_type_name(v));
}

int hr__jinja_tojson(hr_jctx *c, const hr_jnode *at, hr_jv v, const hr_jjson_opts *o,
                     hr_jv *out) {
    hr_jbuf b;
    hr__jbuf_init(&b, hr__jctx_max_output(c));
    hr__jbuf_put(&b, "", 0);
    dumper d = {.c = c, .at = at, .o = o, .b = &b};
    int rc = dump(&d, v, 0);
    if (!rc && b.failed)
        rc = hr__jerr_alloc(c, at, HR_ENOMEM);
    if (rc) {
        hr__jbuf_free(&b);
        return rc;
    }
    *out = hr__jbuf_take(&b);
    return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
}

/* ---- from jansson ------------------------------------------------------------- */

static int from_json(const json_t *j, hr_jv *out, int depth, hr_error *err) {
    if (depth > HR_JV_MAX_DEPTH)
        return hr_err(err, HR_ERANGE, "JSON nested deeper than %d levels", HR_JV_MAX_DEPTH);
    int rc = 0;
    switch (json_typeof(j)) {
    case JSON_NULL: *out = hr__jv_none(); return 0;
    case JSON_TRUE: *out = hr__jv_bool(1); return 0;
    case JSON_FALSE: *out = hr__jv_bool(0); return 0;
    case JSON_INTEGER: *out = hr__jv_int((int64_t)json_integer_value(j)); return 0;
    case JSON_REAL: *out = hr__jv_float(json_real_value(j)); return 0;
    case JSON_STRING:
        *out = hr__jv_str(json_string_value(j), json_string_length(j));
        break;
    case JSON_ARRAY: {
        *out = hr__jv_list(json_array_size(j));
        for (size_t i = 0; !hr__jv_oom(*out) && i < json_array_size(j) && !rc; i++) {
            hr_jv v;
            if (!(rc = from_json(json_array_get(j, i), &v, depth + 1, err)))
                rc = hr__jv_list_push(*out, v);
        }
        break;
    }
    case JSON_OBJECT: {
        *out = hr__jv_dict(json_object_size(j));
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val) {
            if (hr__jv_oom(*out) || rc)
                break;
            hr_jv v, k = hr__jv_cstr(key);
            if (hr__jv_oom(k)) {
                rc = HR_ENOMEM;
            } else if ((rc = from_json(val, &v, depth + 1, err))) {
                hr__jv_unref(k);
            } else {
                rc = hr__jv_dict_set(*out, k, v);
            }
        }
        break;
    }
    }
    if (hr__jv_oom(*out))
        return hr_err(err, HR_ENOMEM, "out of memory");
    if (rc) {
        hr__jv_unref(*out);
        if (rc == HR_ERANGE && err && !strstr(err->msg, "nested"))
            hr_err(err, rc, "JSON nested deeper than %d levels", HR_JV_MAX_DEPTH);
        else if (rc == HR_ENOMEM)
            hr_err(err, rc, "out of memory");
        return rc;
    }
    return 0;
}

int hr_jinja_value_from_json(const json_t *j, hr_jv *out, hr_error *err) {
    if (err)
        err->msg[0] = 0;
    return from_json(j, out, 0, err);
}
