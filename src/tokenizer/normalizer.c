/* Normalizers: NFC/NFD/NFKC/NFKD, Lowercase, Strip, Replace, Prepend,
 * BertNormalizer (applied in wordpiece.c),
 * Sequence (flattened at parse time). Each is applied to every text piece
 * that is not an added token, as HF does. */
#include "tokenizer/internal.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- parsing ------------------------------------------------------------ */

static int push(hr__normseq *seq, hr__norm n) {
    hr__norm *v = realloc(seq->v, (size_t)(seq->n + 1) * sizeof *v);
    if (!v)
        return HR_ENOMEM;
    seq->v = v;
    seq->v[seq->n++] = n;
    return 0;
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* A {"String": s} or {"Regex": r} pattern: *lit set for a literal (and
 * *re left NULL), else *re compiled. */
int hr__parse_pattern(json_t *pat, char **lit, size_t *lit_len,
                      pcre2_code **re, const char *what, hr_error *err);
int hr__parse_pattern(json_t *pat, char **lit, size_t *lit_len,
                      pcre2_code **re, const char *what, hr_error *err) {
    json_t *s = json_object_get(pat, "String"), *r = json_object_get(pat, "Regex");
    if (json_is_string(s)) {
        *lit = dupn(json_string_value(s), json_string_length(s));
        *lit_len = json_string_length(s);
        return *lit ? 0 : hr_err(err, HR_ENOMEM, "out of memory");
    }
    if (json_is_string(r)) {
        *re = hr__regex_compile(json_string_value(r), json_string_length(r), 0, err);
        return *re ? 0 : (err ? err->code : HR_EFORMAT);
    }
    return hr_err(err, HR_EFORMAT, "%s: pattern must be {\"String\"} or {\"Regex\"}", what);
}

int hr__norm_parse(hr__normseq *seq, json_t *j, hr_error *err) {
    if (json_is_null(j) || !j)
        return 0;
    const char *type = hr__json_str(j, "type");
    if (!type)
        return hr_err(err, HR_EFORMAT, "normalizer without a \"type\"");
    if (!strcmp(type, "Sequence")) {
        json_t *a = json_object_get(j, "normalizers");
        if (!json_is_array(a))
            return hr_err(err, HR_EFORMAT, "Sequence normalizer without \"normalizers\"");
        size_t i;
        json_t *x;
        json_array_foreach(a, i, x) {
            int rc = hr__norm_parse(seq, x, err);
            if (rc)
                return rc;
        }
        return 0;
    }
    hr__norm n = {0};
    if (!strcmp(type, "NFC"))
        n.kind = HR__NORM_NFC;
    else if (!strcmp(type, "NFD"))
        n.kind = HR__NORM_NFD;
    else if (!strcmp(type, "NFKC"))
        n.kind = HR__NORM_NFKC;
    else if (!strcmp(type, "NFKD"))
        n.kind = HR__NORM_NFKD;
    else if (!strcmp(type, "Lowercase"))
        n.kind = HR__NORM_LOWER;
    else if (!strcmp(type, "Strip")) {
        n.kind = HR__NORM_STRIP;
        n.left = hr__json_bool(j, "strip_left", 1);
        n.right = hr__json_bool(j, "strip_right", 1);
    } else if (!strcmp(type, "Replace")) {
        n.kind = HR__NORM_REPLACE;
        json_t *c = json_object_get(j, "content");
        if (!json_is_string(c))
            return hr_err(err, HR_EFORMAT, "Replace normalizer without \"content\"");
        int rc = hr__parse_pattern(json_object_get(j, "pattern"), &n.pat,
                                   &n.pat_len, &n.re, "Replace normalizer", err);
        if (rc)
            return rc;
        n.content = dupn(json_string_value(c), json_string_length(c));
        n.content_len = json_string_length(c);
    } else if (!strcmp(type, "Prepend")) {
        n.kind = HR__NORM_PREPEND;
        json_t *c = json_object_get(j, "prepend");
        if (!json_is_string(c))
            return hr_err(err, HR_EFORMAT, "Prepend normalizer without \"prepend\"");
        n.content = dupn(json_string_value(c), json_string_length(c));
        n.content_len = json_string_length(c);
    } else if (!strcmp(type, "BertNormalizer")) {
        n.kind = HR__NORM_BERT;
        n.clean = (uint8_t)hr__json_bool(j, "clean_text", 1);
        n.chinese = (uint8_t)hr__json_bool(j, "handle_chinese_chars", 1);
        n.lower = (uint8_t)hr__json_bool(j, "lowercase", 1);
        /* strip_accents: null follows lowercase */
        n.strip_accents = (uint8_t)hr__json_bool(j, "strip_accents", n.lower);
    } else {
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s normalizer", type);
    }
    if (push(seq, n)) {
        free(n.pat);
        free(n.content);
        if (n.re)
            pcre2_code_free(n.re);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    return 0;
}

void hr__norm_free(hr__normseq *seq) {
    if (!seq)
        return;
    for (int i = 0; i < seq->n; i++) {
        free(seq->v[i].pat);
        free(seq->v[i].content);
        if (seq->v[i].re)
            pcre2_code_free(seq->v[i].re);
    }
    free(seq->v);
    seq->v = NULL;
    seq->n = 0;
}

/* ---- applying ----------------------------------------------------------- */

static int is_ascii(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0x80)
            return 0;
    return 1;
}

static int unicode_form(hr__norm_kind k, const hr__buf *in, hr__buf *out) {
    out->len = 0;
    if (is_ascii(in->p, in->len))
        return hr__buf_put(out, in->p, in->len);
    int opt = UTF8PROC_STABLE;
    if (k == HR__NORM_NFC || k == HR__NORM_NFKC)
        opt |= UTF8PROC_COMPOSE;
    else
        opt |= UTF8PROC_DECOMPOSE;
    if (k == HR__NORM_NFKC || k == HR__NORM_NFKD)
        opt |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t n = utf8proc_map((const utf8proc_uint8_t *)in->p,
                                      (utf8proc_ssize_t)in->len, &dst,
                                      (utf8proc_option_t)opt);
    if (n < 0)
        return HR_EINVAL; /* input is valid UTF-8, so only on OOM */
    int rc = hr__buf_put(out, dst, (size_t)n);
    free(dst);
    return rc;
}

/* HF's NormalizedString::lowercase: Rust's char::to_lowercase, character by
 * character: simple mappings plus U+0130 -> "i\u0307"; no final-sigma rule
 * (the oracle lowercases "ΟΔΟΣ " to "οδοσ "). */
static int lowercase(const hr__buf *in, hr__buf *out) {
    out->len = 0;
    if (hr__buf_reserve(out, in->len))
        return HR_ENOMEM;
    for (size_t i = 0; i < in->len;) {
        int32_t cp;
        int k = hr__utf8_decode(in->p + i, in->len - i, &cp);
        if (!k)
            return HR_EINVAL;
        char u[8];
        int m;
        if (cp == 0x130) {
            memcpy(u, "i\xcc\x87", 3);
            m = 3;
        } else {
            m = hr__utf8_encode(utf8proc_tolower(cp), u);
        }
        if (hr__buf_put(out, u, (size_t)m))
            return HR_ENOMEM;
        i += (size_t)k;
    }
    return 0;
}

static int strip(const hr__norm *n, const hr__buf *in, hr__buf *out) {
    size_t a = 0, b = in->len;
    int32_t cp;
    int k;
    while (n->left && a < b && (k = hr__utf8_decode(in->p + a, b - a, &cp)) &&
           hr__uni_is_space(cp))
        a += (size_t)k;
    while (n->right && b > a) {
        size_t s = b - 1;
        while (s > a && ((unsigned char)in->p[s] & 0xC0) == 0x80)
            s--;
        if (!hr__utf8_decode(in->p + s, b - s, &cp) || !hr__uni_is_space(cp))
            break;
        b = s;
    }
    out->len = 0;
    return hr__buf_put(out, in->p + a, b - a);
}

static int replace(const hr__norm *n, const hr__buf *in, hr__buf *out,
                   pcre2_match_data *md) {
    out->len = 0;
    size_t pos = 0, run = 0;
    while (pos <= in->len) {
        size_t ms, me;
        if (n->re) {
            int rc = hr__regex_next(n->re, md, in->p, in->len, pos, &ms, &me);
            if (rc < 0)
                return rc;
            if (!rc)
                break;
        } else {
            if (!n->pat_len)
                break;
            const char *f = in->len >= pos + n->pat_len
                                ? memmem(in->p + pos, in->len - pos, n->pat, n->pat_len)
                                : NULL;
            if (!f)
                break;
            ms = (size_t)(f - in->p);
            me = ms + n->pat_len;
        }
        if (hr__buf_put(out, in->p + run, ms - run) ||
            hr__buf_put(out, n->content, n->content_len))
            return HR_ENOMEM;
        run = me;
        pos = me > ms ? me : me + (me < in->len ? (size_t)hr__utf8_len((unsigned char)in->p[me]) : 1);
        if (me == ms && me < in->len) { /* empty match: keep the char */
            if (hr__buf_put(out, in->p + me, pos - me))
                return HR_ENOMEM;
            run = pos;
        }
    }
    if (run < in->len && hr__buf_put(out, in->p + run, in->len - run))
        return HR_ENOMEM;
    return 0;
}

int hr__norm_apply(const hr__normseq *seq, const char *s, size_t n,
                   hr__buf *out, hr__buf *tmp, pcre2_match_data *md) {
    hr__buf x_tmp = {0}; /* BertNormalizer's second scratch */
    out->len = 0;
    if (hr__buf_put(out, s, n))
        return HR_ENOMEM;
    for (int i = 0; i < seq->n; i++) {
        const hr__norm *x = &seq->v[i];
        int rc = 0;
        switch (x->kind) {
        case HR__NORM_NFC: case HR__NORM_NFD:
        case HR__NORM_NFKC: case HR__NORM_NFKD:
            rc = unicode_form(x->kind, out, tmp);
            break;
        case HR__NORM_LOWER:
            rc = lowercase(out, tmp);
            break;
        case HR__NORM_STRIP:
            rc = strip(x, out, tmp);
            break;
        case HR__NORM_REPLACE:
            rc = replace(x, out, tmp, md);
            break;
        case HR__NORM_BERT:
            rc = hr__bert_norm(x, out, tmp, &x_tmp);
            break;
        case HR__NORM_PREPEND:
            tmp->len = 0;
            if (out->len)
                rc = hr__buf_put(tmp, x->content, x->content_len);
            if (!rc)
                rc = hr__buf_put(tmp, out->p, out->len);
            break;
        }
        if (rc) {
            free(x_tmp.p);
            return rc;
        }
        hr__buf t = *out;
        *out = *tmp;
        *tmp = t;
    }
    free(x_tmp.p);
    return 0;
}
