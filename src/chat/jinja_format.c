/* Python string formatting: str.format ("{}", "{0}", "{name}", with !r/!s
 * and no format spec) and printf-style `%` (flags, width, precision and
 * the s r a d i u f F e E g G x X o c % conversions). */
#include "chat/jinja_eval.h"
#include "core/error.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static int finish(hr_jctx *c, const hr_jnode *at, hr_jbuf *b, hr_jv *out) {
    if (b->failed) {
        hr__jbuf_free(b);
        return hr__jerr_alloc(c, at, HR_ENOMEM);
    }
    *out = hr__jbuf_take(b);
    return hr__jv_oom(*out) ? hr__jerr_alloc(c, at, HR_ENOMEM) : 0;
}

static int fail(hr_jctx *c, const hr_jnode *at, hr_jbuf *b, int code, const char *msg) {
    hr__jbuf_free(b);
    return hr__jerr(c, at, code, "%s", msg);
}

int hr__jinja_format(hr_jctx *c, const hr_jnode *at, hr_jv fmt, hr_jargs *a, hr_jv *out) {
    hr_jbuf b;
    hr__jbuf_init(&b, hr__jctx_max_output(c));
    hr__jbuf_put(&b, "", 0);
    const char *s = fmt.u.s->s;
    size_t n = fmt.u.s->len;
    int auto_idx = 0, manual = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '}') {
            if (i + 1 < n && s[i + 1] == '}') {
                hr__jbuf_putc(&b, '}');
                i++;
                continue;
            }
            return fail(c, at, &b, HR_EINVAL, "single '}' encountered in format string");
        }
        if (ch != '{') {
            hr__jbuf_putc(&b, ch);
            continue;
        }
        if (i + 1 < n && s[i + 1] == '{') {
            hr__jbuf_putc(&b, '{');
            i++;
            continue;
        }
        size_t j = i + 1;
        while (j < n && s[j] != '}' && s[j] != '!' && s[j] != ':' && s[j] != '{')
            j++;
        size_t name_len = j - i - 1;
        const char *name = s + i + 1;
        char conv = 0;
        if (j < n && s[j] == '!') {
            conv = j + 1 < n ? s[j + 1] : 0;
            j += 2;
        }
        if (j < n && s[j] == ':')
            return fail(c, at, &b, HR_EUNSUPPORTED,
                        "not supported yet: format specs in str.format()");
        if (j >= n || s[j] != '}')
            return fail(c, at, &b, HR_EINVAL, "unmatched '{' in format string");
        if (conv && conv != 'r' && conv != 's' && conv != 'a')
            return fail(c, at, &b, HR_EINVAL, "unknown conversion specifier in format string");
        hr_jv *v = NULL;
        if (!name_len) {
            if (manual)
                return fail(c, at, &b, HR_EINVAL,
                            "cannot switch from manual field specification to automatic field numbering");
            if (auto_idx >= a->npos)
                return fail(c, at, &b, HR_EINVAL, "replacement index out of range for format()");
            v = &a->pos[auto_idx++];
        } else if (isdigit((unsigned char)name[0])) {
            size_t k = 0;
            int idx = 0;
            while (k < name_len && isdigit((unsigned char)name[k]) && idx < 1000)
                idx = idx * 10 + (name[k++] - '0');
            if (k != name_len)
                return fail(c, at, &b, HR_EUNSUPPORTED,
                            "not supported yet: attribute or index fields in str.format()");
            if (auto_idx)
                return fail(c, at, &b, HR_EINVAL,
                            "cannot switch from automatic field numbering to manual field specification");
            manual = 1;
            if (idx >= a->npos)
                return fail(c, at, &b, HR_EINVAL, "replacement index out of range for format()");
            v = &a->pos[idx];
        } else {
            for (size_t k = 0; k < name_len; k++)
                if (name[k] == '.' || name[k] == '[')
                    return fail(c, at, &b, HR_EUNSUPPORTED,
                                "not supported yet: attribute or index fields in str.format()");
            for (int k = 0; k < a->nkw && !v; k++)
                if (strlen(a->kw_name[k]) == name_len && !memcmp(a->kw_name[k], name, name_len))
                    v = &a->kw[k];
            if (!v)
                return fail(c, at, &b, HR_EINVAL, "missing keyword argument in format()");
        }
        if (conv == 'r' || conv == 'a')
            hr__jv_repr_append(&b, *v);
        else
            hr__jv_str_append(&b, *v);
        i = j;
    }
    return finish(c, at, &b, out);
}

static void pad_to(hr_jbuf *b, const char *s, size_t len, int width, int left) {
    size_t cps = 0;
    for (size_t i = 0; i < len; i++)
        cps += ((unsigned char)s[i] & 0xC0) != 0x80;
    if (!left)
        for (size_t k = cps; (int)k < width; k++)
            hr__jbuf_putc(b, ' ');
    hr__jbuf_put(b, s, len);
    if (left)
        for (size_t k = cps; (int)k < width; k++)
            hr__jbuf_putc(b, ' ');
}

int hr__jinja_percent(hr_jctx *c, const hr_jnode *at, hr_jv fmt, hr_jv args, hr_jv *out) {
    hr_jbuf b;
    hr__jbuf_init(&b, hr__jctx_max_output(c));
    hr__jbuf_put(&b, "", 0);
    const char *s = fmt.u.s->s;
    size_t n = fmt.u.s->len, next = 0;
    int is_tuple = args.type == HR_JV_LIST && (args.flags & HR_JV_TUPLE);
    int is_map = args.type == HR_JV_DICT && !(args.flags & HR_JV_NS);
    size_t nargs = is_tuple ? args.u.l->n : 1;
    int used_map = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            hr__jbuf_putc(&b, s[i]);
            continue;
        }
        if (++i >= n)
            return fail(c, at, &b, HR_EINVAL, "incomplete format");
        hr_jv v;
        int have = 0;
        if (s[i] == '(') {
            size_t j = i + 1;
            while (j < n && s[j] != ')')
                j++;
            if (j >= n || !is_map)
                return fail(c, at, &b, HR_EINVAL, j >= n ? "incomplete format key"
                                                         : "format requires a mapping");
            hr_jv key = hr__jv_str(s + i + 1, j - i - 1);
            hr_jv *p = hr__jv_oom(key) ? NULL : hr__jv_dict_get(args, key);
            hr__jv_unref(key);
            if (!p)
                return fail(c, at, &b, HR_EINVAL, "format key not found");
            v = *p;
            have = used_map = 1;
            i = j + 1;
        }
        char flags[8];
        int nf = 0, width = 0, prec = -1, left = 0;
        while (i < n && strchr("-+ 0#", s[i]) && nf < 6) {
            left |= s[i] == '-';
            flags[nf++] = s[i++];
        }
        flags[nf] = 0;
        if (i < n && s[i] == '*')
            return fail(c, at, &b, HR_EUNSUPPORTED, "not supported yet: '*' width in % format");
        while (i < n && isdigit((unsigned char)s[i]) && width < 10000)
            width = width * 10 + (s[i++] - '0');
        if (i < n && s[i] == '.') {
            prec = 0;
            i++;
            while (i < n && isdigit((unsigned char)s[i]) && prec < 10000)
                prec = prec * 10 + (s[i++] - '0');
        }
        while (i < n && (s[i] == 'l' || s[i] == 'h' || s[i] == 'L'))
            i++;
        if (i >= n)
            return fail(c, at, &b, HR_EINVAL, "incomplete format");
        char conv = s[i];
        if (conv == '%') {
            hr__jbuf_putc(&b, '%');
            continue;
        }
        if (!have) {
            if (next >= nargs)
                return fail(c, at, &b, HR_EINVAL, "not enough arguments for format string");
            v = is_tuple ? args.u.l->v[next] : args;
            next++;
        }
        char tmp[512], spec[32];
        if (conv == 's' || conv == 'r' || conv == 'a') {
            hr_jbuf t;
            hr__jbuf_init(&t, hr__jctx_max_output(c));
            hr__jbuf_put(&t, "", 0);
            if (conv == 's')
                hr__jv_str_append(&t, v);
            else
                hr__jv_repr_append(&t, v);
            size_t len = t.len;
            if (prec >= 0) { /* truncate to prec code points */
                size_t k = 0, cps = 0;
                while (k < len && cps < (size_t)prec) {
                    hr__utf8_next(t.p, &k);
                    cps++;
                }
                len = k;
            }
            pad_to(&b, t.p ? t.p : "", len, width, left);
            hr__jbuf_free(&t);
        } else if (strchr("diuxXoc", conv)) {
            long long x;
            if (v.type == HR_JV_INT || v.type == HR_JV_BOOL)
                x = v.type == HR_JV_INT ? v.u.i : v.u.b;
            else if (v.type == HR_JV_FLOAT && strchr("diu", conv) && isfinite(v.u.f) &&
                     fabs(v.u.f) < 9.2e18)
                x = (long long)v.u.f;
            else
                return fail(c, at, &b, HR_EINVAL, "%d format: a real number is required");
            if (conv == 'c') {
                hr_jbuf t;
                hr__jbuf_init(&t, 8);
                if (x < 0 || x > 0x10FFFF)
                    return hr__jbuf_free(&t), fail(c, at, &b, HR_EINVAL, "%c arg not in range(0x110000)");
                hr__jbuf_utf8(&t, (uint32_t)x);
                pad_to(&b, t.p ? t.p : "", t.len, width, left);
                hr__jbuf_free(&t);
                continue;
            }
            snprintf(spec, sizeof spec, "%%%s%d.%dll%c", flags, width, prec < 0 ? 1 : prec,
                     conv == 'u' || conv == 'i' ? 'd' : conv);
            int k = snprintf(tmp, sizeof tmp, spec, x);
            if (k < 0 || (size_t)k >= sizeof tmp)
                return fail(c, at, &b, HR_ERANGE, "formatted number too long");
            hr__jbuf_puts(&b, tmp);
        } else if (strchr("fFeEgG", conv)) {
            if (!hr__jv_is_number(v))
                return fail(c, at, &b, HR_EINVAL, "must be real number");
            snprintf(spec, sizeof spec, "%%%s%d.%d%c", flags, width, prec < 0 ? 6 : prec, conv);
            int k = snprintf(tmp, sizeof tmp, spec, hr__jv_as_double(v));
            if (k < 0 || (size_t)k >= sizeof tmp)
                return fail(c, at, &b, HR_ERANGE, "formatted number too long");
            hr__jbuf_puts(&b, tmp);
        } else {
            return fail(c, at, &b, HR_EINVAL, "unsupported format character");
        }
    }
    if (!used_map && !is_map && next < nargs)
        return fail(c, at, &b, HR_EINVAL, "not all arguments converted during string formatting");
    return finish(c, at, &b, out);
}
