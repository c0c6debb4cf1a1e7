/* Pre-tokenizers: Split (regex or string, every behavior, invert),
 * ByteLevel, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit,
 * BertPreTokenizer and Sequence (flattened at parse time).
 *
 * Splitting follows HF's NormalizedString::split: the text is cut into
 * segments, each a match or not (flipped by invert); the behavior decides
 * which are kept and how matches join their neighbours; empty pieces go. */
#include "tokenizer/internal.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

int hr__parse_pattern(json_t *pat, char **lit, size_t *lit_len,
                      pcre2_code **re, const char *what, hr_error *err);

static const char GPT2_RE[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char WS_RE[] = "\\w+|[^\\w\\s]+";

/* ---- parsing ------------------------------------------------------------ */

static int push(hr__pretokseq *seq, const hr__pretok *p) {
    hr__pretok *v = realloc(seq->v, (size_t)(seq->n + 1) * sizeof *v);
    if (!v)
        return HR_ENOMEM;
    seq->v = v;
    seq->v[seq->n++] = *p;
    return 0;
}

static int parse_behavior(const char *s, hr__split_behavior *b) {
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                  "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (s && !strcmp(s, names[i])) {
            *b = (hr__split_behavior)i;
            return 0;
        }
    return -1;
}

int hr__pretok_parse(hr__pretokseq *seq, json_t *j, hr_error *err) {
    if (!j || json_is_null(j))
        return 0;
    const char *type = hr__json_str(j, "type");
    if (!type)
        return hr_err(err, HR_EFORMAT, "pre_tokenizer without a \"type\"");
    hr__pretok p = {0};
    p.behavior = HR__SPLIT_ISOLATED;
    if (!strcmp(type, "Sequence")) {
        json_t *a = json_object_get(j, "pretokenizers");
        if (!json_is_array(a))
            return hr_err(err, HR_EFORMAT, "Sequence pre_tokenizer without \"pretokenizers\"");
        size_t i;
        json_t *x;
        json_array_foreach(a, i, x) {
            int rc = hr__pretok_parse(seq, x, err);
            if (rc)
                return rc;
        }
        return 0;
    } else if (!strcmp(type, "Split")) {
        p.kind = HR__PRE_SPLIT;
        char *lit = NULL;
        size_t lit_len = 0;
        int rc = hr__parse_pattern(json_object_get(j, "pattern"), &lit, &lit_len,
                                   &p.re, "Split pre_tokenizer", err);
        if (rc)
            return rc;
        if (lit) {
            if (lit_len)
                p.re = hr__regex_compile(lit, lit_len, 1, err);
            else
                p.empty_pattern = 1;
            free(lit);
            if (!p.re && !p.empty_pattern)
                return err ? err->code : HR_EFORMAT;
        }
        if (parse_behavior(hr__json_str(j, "behavior"), &p.behavior)) {
            if (p.re)
                pcre2_code_free(p.re);
            return hr_err(err, HR_EFORMAT, "Split pre_tokenizer: bad \"behavior\"");
        }
        p.invert = hr__json_bool(j, "invert", 0);
    } else if (!strcmp(type, "ByteLevel")) {
        p.kind = HR__PRE_BYTELEVEL;
        p.add_prefix_space = hr__json_bool(j, "add_prefix_space", 1);
        p.use_regex = hr__json_bool(j, "use_regex", 1);
        if (p.use_regex && !(p.re = hr__regex_compile(GPT2_RE, sizeof GPT2_RE - 1, 0, err)))
            return err ? err->code : HR_EFORMAT;
    } else if (!strcmp(type, "Metaspace")) {
        p.kind = HR__PRE_METASPACE;
        const char *r = hr__json_str(j, "replacement");
        if (!r)
            r = "\xe2\x96\x81";
        int32_t cp;
        size_t rl = strlen(r);
        if (!rl || (size_t)hr__utf8_decode(r, rl, &cp) != rl)
            return hr_err(err, HR_EFORMAT, "Metaspace: replacement must be one character");
        memcpy(p.repl, r, rl);
        p.repl_len = (int)rl;
        const char *ps = hr__json_str(j, "prepend_scheme");
        if (!ps)
            p.prepend = hr__json_bool(j, "add_prefix_space", 1) ? 2 : 0;
        else if (!strcmp(ps, "always"))
            p.prepend = 2;
        else if (!strcmp(ps, "first"))
            p.prepend = 1;
        else if (!strcmp(ps, "never"))
            p.prepend = 0;
        else
            return hr_err(err, HR_EFORMAT, "Metaspace: bad prepend_scheme '%s'", ps);
        p.split = hr__json_bool(j, "split", 1);
    } else if (!strcmp(type, "Digits")) {
        p.kind = HR__PRE_DIGITS;
        p.individual_digits = hr__json_bool(j, "individual_digits", 0);
        p.behavior = p.individual_digits ? HR__SPLIT_ISOLATED : HR__SPLIT_CONTIGUOUS;
    } else if (!strcmp(type, "Punctuation")) {
        p.kind = HR__PRE_PUNCT;
        const char *b = hr__json_str(j, "behavior");
        if (b && parse_behavior(b, &p.behavior))
            return hr_err(err, HR_EFORMAT, "Punctuation pre_tokenizer: bad \"behavior\"");
    } else if (!strcmp(type, "Whitespace")) {
        p.kind = HR__PRE_WHITESPACE;
        p.behavior = HR__SPLIT_REMOVED;
        p.invert = 1;
        if (!(p.re = hr__regex_compile(WS_RE, sizeof WS_RE - 1, 0, err)))
            return err ? err->code : HR_EFORMAT;
    } else if (!strcmp(type, "WhitespaceSplit") || !strcmp(type, "BertPreTokenizer")) {
        p.kind = HR__PRE_WSSPLIT;
        p.behavior = HR__SPLIT_REMOVED;
        if (!strcmp(type, "BertPreTokenizer")) {
            if (push(seq, &p))
                return hr_err(err, HR_ENOMEM, "out of memory");
            p.kind = HR__PRE_PUNCT;
            p.behavior = HR__SPLIT_ISOLATED;
        }
    } else {
        return hr_err(err, HR_EUNSUPPORTED, "not supported yet: %s pre_tokenizer", type);
    }
    if (push(seq, &p)) {
        if (p.re)
            pcre2_code_free(p.re);
        return hr_err(err, HR_ENOMEM, "out of memory");
    }
    return 0;
}

void hr__pretok_free(hr__pretokseq *seq) {
    if (!seq)
        return;
    for (int i = 0; i < seq->n; i++)
        if (seq->v[i].re)
            pcre2_code_free(seq->v[i].re);
    free(seq->v);
    seq->v = NULL;
    seq->n = 0;
}

/* ---- splitting ---------------------------------------------------------- */

typedef struct seg {
    size_t s, e;
    int match;
} seg;

/* Applies a behavior to a stream of segments, writing kept pieces. */
typedef struct splitter {
    hr__plist *out;
    const char *text;
    hr__split_behavior b;
    int at_start, rc;
    int has_pend, prev_match;
    seg pend;
} splitter;

static void emit(splitter *sp, seg x) {
    if (sp->rc || x.e == x.s)
        return;
    sp->rc = hr__plist_push(sp->out, sp->text + x.s, x.e - x.s, -1,
                            sp->at_start && x.s == 0);
}

static void feed(splitter *sp, seg x) {
    switch (sp->b) {
    case HR__SPLIT_ISOLATED:
        emit(sp, x);
        return;
    case HR__SPLIT_REMOVED:
        if (!x.match)
            emit(sp, x);
        return;
    case HR__SPLIT_CONTIGUOUS:
        if (sp->has_pend && x.match == sp->prev_match) {
            sp->pend.e = x.e;
        } else {
            if (sp->has_pend)
                emit(sp, sp->pend);
            sp->pend = x;
            sp->has_pend = 1;
        }
        sp->prev_match = x.match;
        return;
    case HR__SPLIT_MERGED_PREV:
        if (x.match && !sp->prev_match && sp->has_pend) {
            sp->pend.e = x.e;
        } else {
            if (sp->has_pend)
                emit(sp, sp->pend);
            sp->pend = x;
            sp->has_pend = 1;
        }
        sp->prev_match = x.match;
        return;
    case HR__SPLIT_MERGED_NEXT:
        /* a match joins the segment after it unless that one is a match */
        if (sp->has_pend && sp->pend.match && !x.match) {
            x.s = sp->pend.s;
        } else if (sp->has_pend) {
            emit(sp, sp->pend);
        }
        sp->pend = x;
        sp->has_pend = 1;
        return;
    }
}

static void finish(splitter *sp) {
    if (sp->b != HR__SPLIT_ISOLATED && sp->b != HR__SPLIT_REMOVED && sp->has_pend)
        emit(sp, sp->pend);
}

typedef int (*char_pred)(int32_t cp, const hr__pretok *p);

static int pred_numeric(int32_t c, const hr__pretok *p) { (void)p; return hr__uni_is_numeric(c); }
static int pred_punct(int32_t c, const hr__pretok *p) { (void)p; return hr__uni_is_punct(c); }
static int pred_space(int32_t c, const hr__pretok *p) { (void)p; return hr__uni_is_space(c); }
static int pred_repl(int32_t c, const hr__pretok *p) {
    int32_t r;
    hr__utf8_decode(p->repl, (size_t)p->repl_len, &r);
    return c == r;
}

static int split_piece(const hr__pretok *p, const pcre2_code *re, char_pred pred,
                       hr__split_behavior b, int invert, const char *s, size_t n,
                       int at_start, hr__plist *out, pcre2_match_data *md) {
    splitter sp = {out, s, b, at_start, 0, 0, 0, {0, 0, 0}};
    size_t prev = 0;
    if (re) {
        size_t pos = 0, ms, me;
        while (pos <= n) {
            int rc = hr__regex_next(re, md, s, n, pos, &ms, &me);
            if (rc < 0)
                return rc;
            if (!rc)
                break;
            if (prev != ms)
                feed(&sp, (seg){prev, ms, invert});
            feed(&sp, (seg){ms, me, !invert});
            prev = me;
            pos = me > ms ? me : me + (me < n ? (size_t)hr__utf8_len((unsigned char)s[me]) : 1);
        }
    } else if (pred) {
        for (size_t i = 0; i < n;) {
            int32_t cp;
            int k = hr__utf8_decode(s + i, n - i, &cp);
            if (!k)
                return HR_EINVAL;
            if (pred(cp, p)) {
                if (prev != i)
                    feed(&sp, (seg){prev, i, invert});
                feed(&sp, (seg){i, i + (size_t)k, !invert});
                prev = i + (size_t)k;
            }
            i += (size_t)k;
        }
    }
    if (prev != n || n == 0)
        feed(&sp, (seg){prev, n, invert});
    finish(&sp);
    return sp.rc;
}

/* ---- the pre-tokenizers ------------------------------------------------- */

static int byte_map(const char *s, size_t n, int at_start, hr__plist *out) {
    char *d = hr__plist_reserve(out, 2 * n);
    if (!d)
        return HR_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += (size_t)hr__utf8_encode(hr__byte_to_cp[(unsigned char)s[i]], d + k);
    return hr__plist_commit(out, k, -1, at_start);
}

static int bytelevel(const hr__pretok *p, const char *s, size_t n, int at_start,
                     hr__plist *out, hr__plist *tmp, pcre2_match_data *md) {
    const char *text = s;
    char *own = NULL;
    if (p->add_prefix_space && (n == 0 || s[0] != ' ')) {
        own = malloc(n + 1);
        if (!own)
            return HR_ENOMEM;
        own[0] = ' ';
        memcpy(own + 1, s, n);
        text = own;
        n++;
    }
    int rc = 0;
    if (p->use_regex) {
        hr__plist_reset(tmp);
        rc = split_piece(p, p->re, NULL, HR__SPLIT_ISOLATED, 0, text, n, at_start, tmp, md);
        for (size_t i = 0; !rc && i < tmp->n; i++)
            rc = byte_map(tmp->buf + tmp->p[i].off, tmp->p[i].len, tmp->p[i].at_start, out);
    } else {
        rc = byte_map(text, n, at_start, out);
    }
    free(own);
    return rc;
}

static int metaspace(const hr__pretok *p, const char *s, size_t n, int at_start,
                     hr__plist *out, hr__plist *tmp, pcre2_match_data *md) {
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++)
        spaces += s[i] == ' ';
    size_t cap = n + spaces * (size_t)p->repl_len + (size_t)p->repl_len;
    char *buf = malloc(cap + 1), *d = buf;
    if (!buf)
        return HR_ENOMEM;
    int starts = n > 0 && (s[0] == ' ' || ((size_t)p->repl_len <= n &&
                                           !memcmp(s, p->repl, (size_t)p->repl_len)));
    if (p->prepend == 3 || ((p->prepend == 2 || (p->prepend == 1 && at_start)) && !starts)) {
        memcpy(d, p->repl, (size_t)p->repl_len);
        d += p->repl_len;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(d, p->repl, (size_t)p->repl_len);
            d += p->repl_len;
        } else {
            *d++ = s[i];
        }
    }
    int rc;
    if (p->split)
        rc = split_piece(p, NULL, pred_repl, HR__SPLIT_MERGED_NEXT, 0, buf,
                         (size_t)(d - buf), at_start, out, md);
    else
        rc = hr__plist_push(out, buf, (size_t)(d - buf), -1, at_start);
    (void)tmp;
    free(buf);
    return rc;
}

static int apply_one(const hr__pretok *p, const hr__plist *in, hr__plist *out,
                     hr__plist *tmp, pcre2_match_data *md) {
    hr__plist_reset(out);
    for (size_t i = 0; i < in->n; i++) {
        const hr__piece *x = &in->p[i];
        const char *s = in->buf + x->off;
        int rc = 0;
        if (x->id >= 0) {
            rc = hr__plist_push(out, s, x->len, x->id, x->at_start);
            if (rc)
                return rc;
            continue;
        }
        switch (p->kind) {
        case HR__PRE_SPLIT:
            if (p->empty_pattern)
                rc = split_piece(p, NULL, NULL, p->behavior, p->invert, s, x->len,
                                 x->at_start, out, md);
            else
                rc = split_piece(p, p->re, NULL, p->behavior, p->invert, s, x->len,
                                 x->at_start, out, md);
            break;
        case HR__PRE_WHITESPACE:
            rc = split_piece(p, p->re, NULL, p->behavior, p->invert, s, x->len,
                             x->at_start, out, md);
            break;
        case HR__PRE_DIGITS:
            rc = split_piece(p, NULL, pred_numeric, p->behavior, 0, s, x->len,
                             x->at_start, out, md);
            break;
        case HR__PRE_PUNCT:
            rc = split_piece(p, NULL, pred_punct, p->behavior, 0, s, x->len,
                             x->at_start, out, md);
            break;
        case HR__PRE_WSSPLIT:
            rc = split_piece(p, NULL, pred_space, HR__SPLIT_REMOVED, 0, s, x->len,
                             x->at_start, out, md);
            break;
        case HR__PRE_BYTELEVEL:
            rc = bytelevel(p, s, x->len, x->at_start, out, tmp, md);
            break;
        case HR__PRE_METASPACE:
            rc = metaspace(p, s, x->len, x->at_start, out, tmp, md);
            break;
        }
        if (rc)
            return rc;
    }
    return 0;
}

int hr__pretok_apply(const hr__pretokseq *seq, hr__plist **in, hr__plist **tmp,
                     pcre2_match_data *md) {
    hr__plist scratch = {0};
    int rc = 0;
    for (int i = 0; i < seq->n && !rc; i++) {
        rc = apply_one(&seq->v[i], *in, *tmp, &scratch, md);
        hr__plist *t = *in;
        *in = *tmp;
        *tmp = t;
    }
    hr__plist_free(&scratch);
    return rc;
}
