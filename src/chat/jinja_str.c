/* Python string operations on UTF-8 values. Case mapping uses utf8proc's
 * simple (one code point to one) mappings; Python's few one-to-many
 * mappings (e.g. 'ß'.upper() == 'SS') are not reproduced. */
#include "chat/jinja_str.h"

#include <string.h>
#include <utf8proc.h>

static int is_cased(uint32_t c) {
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

/* Python's one-to-many case mappings that utf8proc's simple ones lack:
 * upper(ß) = SS, the Latin ligatures, lower(İ) = i + combining dot. */
static const char *special_case(uint32_t c, int mode) {
    if (mode == HR_JCASE_UPPER || mode == HR_JCASE_TITLE || mode == HR_JCASE_CAPITALIZE) {
        int title = mode != HR_JCASE_UPPER;
        switch (c) {
        case 0xDF: return title ? "Ss" : "SS";
        case 0xFB00: return title ? "Ff" : "FF";
        case 0xFB01: return title ? "Fi" : "FI";
        case 0xFB02: return title ? "Fl" : "FL";
        case 0xFB03: return title ? "Ffi" : "FFI";
        case 0xFB04: return title ? "Ffl" : "FFL";
        case 0xFB05:
        case 0xFB06: return title ? "St" : "ST";
        default: return NULL;
        }
    }
    if (c == 0x130)
        return "i\xcc\x87";
    if (mode == HR_JCASE_FOLD && c == 0xDF)
        return "ss";
    return NULL;
}

hr_jv hr__jstr_case(hr_jv s, int mode) {
    hr_jbuf b;
    hr__jbuf_init(&b, 0);
    hr__jbuf_put(&b, "", 0);
    int prev_cased = 0, first = 1;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t c = hr__utf8_next(s.u.s->s, &i), o = c;
        int title_pos = mode == HR_JCASE_TITLE ? !prev_cased : mode == HR_JCASE_CAPITALIZE && first;
        const char *sp = special_case(c, mode == HR_JCASE_UPPER || title_pos ? mode
                                         : mode == HR_JCASE_FOLD ? mode : HR_JCASE_LOWER);
        if (sp) {
            hr__jbuf_puts(&b, sp);
            prev_cased = 1;
            first = 0;
            continue;
        }
        switch (mode) {
        case HR_JCASE_LOWER:
        case HR_JCASE_FOLD: o = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c); break;
        case HR_JCASE_UPPER: o = (uint32_t)utf8proc_toupper((utf8proc_int32_t)c); break;
        case HR_JCASE_CAPITALIZE:
            o = (uint32_t)(first ? utf8proc_totitle((utf8proc_int32_t)c)
                                 : utf8proc_tolower((utf8proc_int32_t)c));
            break;
        default:
            o = (uint32_t)(prev_cased ? utf8proc_tolower((utf8proc_int32_t)c)
                                      : utf8proc_totitle((utf8proc_int32_t)c));
            prev_cased = is_cased(c);
            break;
        }
        first = 0;
        hr__jbuf_utf8(&b, o);
    }
    if (b.failed) {
        hr__jbuf_free(&b);
        return (hr_jv){.type = HR_JV_UNDEF, .flags = HR_JV_OOM};
    }
    return hr__jbuf_take(&b);
}

static int in_chars(uint32_t c, hr_jv chars) {
    if (chars.type != HR_JV_STR)
        return hr__py_isspace(c);
    for (size_t i = 0; i < chars.u.s->len;)
        if (hr__utf8_next(chars.u.s->s, &i) == c)
            return 1;
    return 0;
}

hr_jv hr__jstr_strip(hr_jv s, hr_jv chars, int left, int right) {
    const char *p = s.u.s->s;
    size_t start = 0, end = s.u.s->len;
    if (left) {
        while (start < end) {
            size_t j = start;
            if (!in_chars(hr__utf8_next(p, &j), chars))
                break;
            start = j;
        }
    }
    if (right) {
        while (end > start) {
            size_t j = end - 1;
            while (j > start && ((unsigned char)p[j] & 0xC0) == 0x80)
                j--;
            size_t k = j;
            if (!in_chars(hr__utf8_next(p, &k), chars))
                break;
            end = j;
        }
    }
    return hr__jv_str(p + start, end - start);
}

hr_jv hr__jstr_replace(hr_jv s, hr_jv old, hr_jv rep, int64_t count, size_t max) {
    hr_jbuf b;
    hr__jbuf_init(&b, max);
    hr__jbuf_put(&b, "", 0);
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, on = old.u.s->len, i = 0;
    int64_t done = 0;
    if (!on) {
        /* Python inserts rep between code points and at both ends */
        while (count < 0 || done < count) {
            hr__jbuf_put(&b, rep.u.s->s, rep.u.s->len);
            done++;
            if (i >= n)
                break;
            size_t j = i;
            hr__utf8_next(p, &j);
            hr__jbuf_put(&b, p + i, j - i);
            i = j;
        }
        hr__jbuf_put(&b, p + i, n - i);
    } else {
        while (count < 0 || done < count) {
            const char *hit = memmem(p + i, n - i, old.u.s->s, on);
            if (!hit)
                break;
            hr__jbuf_put(&b, p + i, (size_t)(hit - (p + i)));
            hr__jbuf_put(&b, rep.u.s->s, rep.u.s->len);
            i = (size_t)(hit - p) + on;
            done++;
        }
        hr__jbuf_put(&b, p + i, n - i);
    }
    if (b.failed) {
        hr__jbuf_free(&b);
        return (hr_jv){.type = HR_JV_UNDEF, .flags = HR_JV_OOM};
    }
    return hr__jbuf_take(&b);
}

static int line_break(uint32_t c) {
    return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D ||
           c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
}

static int push_piece(hr_jv l, const char *p, size_t n) {
    hr_jv v = hr__jv_str(p, n);
    if (hr__jv_oom(v))
        return -1;
    return hr__jv_list_push(l, v);
}

hr_jv hr__jstr_splitlines(hr_jv s) {
    hr_jv l = hr__jv_list(4);
    if (hr__jv_oom(l))
        return l;
    const char *p = s.u.s->s;
    size_t n = s.u.s->len, start = 0, i = 0;
    int rc = 0;
    while (i < n && !rc) {
        size_t j = i;
        uint32_t c = hr__utf8_next(p, &j);
        if (line_break(c)) {
            rc = push_piece(l, p + start, i - start);
            if (c == '\r' && j < n && p[j] == '\n')
                j++;
            start = j;
        }
        i = j;
    }
    if (!rc && start < n)
        rc = push_piece(l, p + start, n - start);
    if (rc) {
        hr__jv_unref(l);
        return (hr_jv){.type = HR_JV_UNDEF, .flags = HR_JV_OOM};
    }
    return l;
}

/* Split on runs of whitespace (sep None), from the left or the right. */
static int split_ws(hr_jv l, const char *p, size_t n, int64_t maxsplit, int right) {
    /* collect word boundaries first, then honour maxsplit */
    size_t i = 0;
    int rc = 0;
    if (!right) {
        int64_t splits = 0;
        while (i < n && !rc) {
            size_t j = i;
            while (j < n) {
                size_t k = j;
                if (!hr__py_isspace(hr__utf8_next(p, &k)))
                    break;
                j = k;
            }
            if (j >= n)
                break;
            size_t start = j;
            if (maxsplit >= 0 && splits >= maxsplit) /* the rest, as is */
                return push_piece(l, p + start, n - start);
            while (j < n) {
                size_t k = j;
                if (hr__py_isspace(hr__utf8_next(p, &k)))
                    break;
                j = k;
            }
            rc = push_piece(l, p + start, j - start);
            splits++;
            i = j;
        }
        return rc;
    }
    /* right: split from the end, then reverse */
    size_t end = n;
    int64_t splits = 0;
    hr_jv tmp = hr__jv_list(4);
    if (hr__jv_oom(tmp))
        return -1;
    while (end > 0 && !rc) {
        size_t j = end;
        while (j > 0) {
            size_t b = j - 1;
            while (b > 0 && ((unsigned char)p[b] & 0xC0) == 0x80)
                b--;
            size_t k = b;
            if (!hr__py_isspace(hr__utf8_next(p, &k)))
                break;
            j = b;
        }
        if (j == 0)
            break;
        size_t stop = j;
        if (maxsplit >= 0 && splits >= maxsplit) { /* the rest, as is */
            rc = push_piece(tmp, p, stop);
            break;
        }
        while (j > 0) {
            size_t b = j - 1;
            while (b > 0 && ((unsigned char)p[b] & 0xC0) == 0x80)
                b--;
            size_t k = b;
            if (hr__py_isspace(hr__utf8_next(p, &k)))
                break;
            j = b;
        }
        rc = push_piece(tmp, p + j, stop - j);
        splits++;
        end = j;
    }
    for (size_t k = tmp.u.l->n; k > 0 && !rc; k--)
        rc = hr__jv_list_push(l, hr__jv_ref(tmp.u.l->v[k - 1]));
    hr__jv_unref(tmp);
    return rc;
}

hr_jv hr__jstr_split(hr_jv s, hr_jv sep, int64_t maxsplit, int right) {
    hr_jv l = hr__jv_list(4);
    if (hr__jv_oom(l))
        return l;
    const char *p = s.u.s->s;
    size_t n = s.u.s->len;
    int rc;
    if (sep.type != HR_JV_STR) {
        rc = split_ws(l, p, n, maxsplit, right);
    } else if (!right) {
        size_t i = 0, sn = sep.u.s->len;
        int64_t k = 0;
        rc = 0;
        for (;;) {
            const char *hit = (maxsplit < 0 || k < maxsplit) ? memmem(p + i, n - i, sep.u.s->s, sn)
                                                             : NULL;
            if (!hit) {
                rc = push_piece(l, p + i, n - i);
                break;
            }
            if ((rc = push_piece(l, p + i, (size_t)(hit - p) - i)))
                break;
            i = (size_t)(hit - p) + sn;
            k++;
        }
    } else {
        size_t end = n, sn = sep.u.s->len;
        int64_t k = 0;
        hr_jv tmp = hr__jv_list(4);
        rc = hr__jv_oom(tmp) ? -1 : 0;
        while (!rc) {
            size_t hit = (size_t)-1;
            if ((maxsplit < 0 || k < maxsplit) && end >= sn)
                for (size_t j = end - sn + 1; j-- > 0;)
                    if (!memcmp(p + j, sep.u.s->s, sn)) {
                        hit = j;
                        break;
                    }
            if (hit == (size_t)-1) {
                rc = push_piece(tmp, p, end);
                break;
            }
            rc = push_piece(tmp, p + hit + sn, end - hit - sn);
            end = hit;
            k++;
        }
        for (size_t j = rc ? 0 : tmp.u.l->n; j > 0 && !rc; j--)
            rc = hr__jv_list_push(l, hr__jv_ref(tmp.u.l->v[j - 1]));
        if (!hr__jv_oom(tmp))
            hr__jv_unref(tmp);
    }
    if (rc) {
        hr__jv_unref(l);
        return (hr_jv){.type = HR_JV_UNDEF, .flags = HR_JV_OOM};
    }
    return l;
}

int hr__jstr_is_case(hr_jv s, int upper) {
    int cased = 0;
    for (size_t i = 0; i < s.u.s->len;) {
        uint32_t c = hr__utf8_next(s.u.s->s, &i);
        utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
        if (k == UTF8PROC_CATEGORY_LT || k == (upper ? UTF8PROC_CATEGORY_LL : UTF8PROC_CATEGORY_LU))
            return 0;
        if (k == (upper ? UTF8PROC_CATEGORY_LU : UTF8PROC_CATEGORY_LL))
            cased = 1;
    }
    return cased;
}

void hr__jstr_escape(hr_jbuf *b, hr_jv s) {
    for (size_t i = 0; i < s.u.s->len; i++) {
        char ch = s.u.s->s[i];
        switch (ch) {
        case '&': hr__jbuf_puts(b, "&amp;"); break;
        case '<': hr__jbuf_puts(b, "&lt;"); break;
        case '>': hr__jbuf_puts(b, "&gt;"); break;
        case '"': hr__jbuf_puts(b, "&#34;"); break;
        case '\'': hr__jbuf_puts(b, "&#39;"); break;
        default: hr__jbuf_putc(b, ch);
        }
    }
}
