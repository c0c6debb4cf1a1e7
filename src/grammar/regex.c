/* Regex -> IR: the ECMAScript subset JSON Schema "pattern" needs.
 *
 *   alternation |, groups ( ) (?: ) (?<name> ), classes [...] [^...] with
 *   ranges, . (not a line terminator), quantifiers * + ? {m} {m,} {m,n}
 *   (a lazy ? suffix changes nothing for matching), escapes \d \D \w \W \s
 *   \S \n \r \t \f \v \0 \xHH \uHHHH \u{H...} and escaped punctuation,
 *   ^ at the start and $ at the end of a top-level alternative.
 *
 * Not supported (HR_EUNSUPPORTED): lookaround, backreferences, \b \B,
 * anchors elsewhere, \cX, \p{...}.
 *
 * Two modes: raw (the output is the matched text) and JSON (the output is
 * the body of a JSON string whose decoded value matches: each character may
 * appear raw, \-escaped or as \uXXXX). JSON Schema patterns are not
 * anchored: without ^ (or $), any text may come before (after). */
#include "grammar/internal.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct rp {
    const char *s;
    size_t n, i;
    hr__gir *ir;
    int json;
    int depth;
    int rc;
    hr_error *err;
} rp;

static int fail(rp *p, int code, const char *msg) {
    if (!p->rc) {
        p->rc = hr_err(p->err, code, "regex: %s at offset %zu of /%.*s/", msg, p->i,
                       (int)(p->n > 200 ? 200 : p->n), p->s);
        if (p->err)
            p->err->pos = (long)p->i;
    }
    return p->rc;
}

static int peek(const rp *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

static uint32_t chars(rp *p, const uint32_t *r, size_t n, int neg) {
    return hr__gir_chars(p->ir, r, n, neg, p->json);
}

static const uint32_t DIGIT[] = {'0', '9'};
static const uint32_t WORD[] = {'0', '9', 'A', 'Z', '_', '_', 'a', 'z'};
static const uint32_t SPACE[] = {9, 13, ' ', ' ', 0xA0, 0xA0, 0x1680, 0x1680,
                                 0x2000, 0x200A, 0x2028, 0x2029, 0x202F, 0x202F,
                                 0x205F, 0x205F, 0x3000, 0x3000, 0xFEFF, 0xFEFF};
static const uint32_t NOT_LT[] = {'\n', '\n', '\r', '\r', 0x2028, 0x2029};

static int hexv(int c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int64_t hexn(rp *p, int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; k++) {
        int h = hexv(peek(p));
        if (h < 0)
            return fail(p, HR_EINVAL, "bad hex escape"), -1;
        v = v * 16 + (uint32_t)h;
        p->i++;
    }
    return v;
}

/* One UTF-8 code point from the pattern. */
static int64_t utf8(rp *p) {
    unsigned char c = (unsigned char)p->s[p->i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || p->i + (size_t)len > p->n)
        return fail(p, HR_EINVAL, "invalid UTF-8"), -1;
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; k++) {
        unsigned char x = (unsigned char)p->s[p->i + (size_t)k];
        if ((x & 0xC0) != 0x80)
            return fail(p, HR_EINVAL, "invalid UTF-8"), -1;
        v = v << 6 | (x & 0x3F);
    }
    p->i += (size_t)len;
    return v;
}

/* An escape after '\'. Sets *set to a class table (and *nset) for \d etc.,
 * else returns the code point. */
static int64_t escape(rp *p, const uint32_t **set, size_t *nset, int *neg) {
    *set = NULL;
    *neg = 0;
    if (p->i >= p->n)
        return fail(p, HR_EINVAL, "trailing backslash"), -1;
    int c = p->s[p->i++];
    switch (c) {
    case 'd': case 'D':
        *set = DIGIT, *nset = 1, *neg = c == 'D';
        return 0;
    case 'w': case 'W':
        *set = WORD, *nset = 4, *neg = c == 'W';
        return 0;
    case 's': case 'S':
        *set = SPACE, *nset = sizeof SPACE / sizeof SPACE[0] / 2, *neg = c == 'S';
        return 0;
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0':
        if (peek(p) >= '0' && peek(p) <= '9')
            return fail(p, HR_EUNSUPPORTED, "octal escapes are not supported"), -1;
        return 0;
    case 'x':
        return hexn(p, 2);
    case 'u':
        if (peek(p) == '{') {
            p->i++;
            uint32_t v = 0;
            int nd = 0;
            while (hexv(peek(p)) >= 0 && nd < 7)
                v = v * 16 + (uint32_t)hexv(p->s[p->i++]), nd++;
            if (!nd || peek(p) != '}' || v > 0x10FFFF)
                return fail(p, HR_EINVAL, "bad \\u{...} escape"), -1;
            p->i++;
            return v;
        } else {
            int64_t v = hexn(p, 4);
            /* a surrogate pair written as two escapes */
            if (v >= 0xD800 && v <= 0xDBFF && p->i + 6 <= p->n && p->s[p->i] == '\\' &&
                p->s[p->i + 1] == 'u') {
                size_t save = p->i;
                p->i += 2;
                int64_t lo = hexn(p, 4);
                if (lo >= 0xDC00 && lo <= 0xDFFF)
                    return 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                p->rc = 0;
                p->i = save;
            }
            return v;
        }
    case 'b': case 'B':
        return fail(p, HR_EUNSUPPORTED, "word boundaries (\\b, \\B) are not supported"), -1;
    case 'c': case 'p': case 'P': case 'k':
        return fail(p, HR_EUNSUPPORTED, "this escape is not supported"), -1;
    }
    if (c >= '1' && c <= '9')
        return fail(p, HR_EUNSUPPORTED, "backreferences are not supported"), -1;
    if ((unsigned char)c >= 0x80) {
        p->i--;
        return utf8(p);
    }
    return (unsigned char)c; /* escaped punctuation or an identity escape */
}

static uint32_t parse_class(rp *p) {
    p->i++; /* [ */
    int neg = 0;
    if (peek(p) == '^') {
        neg = 1;
        p->i++;
    }
    hr__u32v r = {0};
    int first = 1;
    while (p->i < p->n && (p->s[p->i] != ']' || 0)) {
        (void)first;
        first = 0;
        int64_t lo;
        const uint32_t *set = NULL;
        size_t nset = 0;
        int sneg = 0;
        if (p->s[p->i] == '\\') {
            p->i++;
            if (peek(p) == 'b') { /* \b in a class is backspace */
                p->i++;
                lo = 8;
            } else {
                lo = escape(p, &set, &nset, &sneg);
            }
        } else {
            lo = utf8(p);
        }
        if (p->rc)
            goto bad;
        if (set) {
            if (sneg) { /* \D \W \S inside a class: add the complement */
                uint32_t prev = 0;
                for (size_t k = 0; k < nset; k++) {
                    if (set[2 * k] > prev && (hr__u32v_push(&r, prev) || hr__u32v_push(&r, set[2 * k] - 1)))
                        goto oom;
                    prev = set[2 * k + 1] + 1;
                }
                if (hr__u32v_push(&r, prev) || hr__u32v_push(&r, 0x10FFFF))
                    goto oom;
            } else {
                for (size_t k = 0; k < 2 * nset; k++)
                    if (hr__u32v_push(&r, set[k]))
                        goto oom;
            }
            continue;
        }
        int64_t hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if (p->s[p->i] == '\\') {
                p->i++;
                hi = escape(p, &set, &nset, &sneg);
                if (set)
                    return fail(p, HR_EUNSUPPORTED, "a class escape as a range end"), 0;
            } else {
                hi = utf8(p);
            }
            if (p->rc)
                goto bad;
            if (hi < lo) {
                fail(p, HR_EINVAL, "character range out of order");
                goto bad;
            }
        }
        if (hr__u32v_push(&r, (uint32_t)lo) || hr__u32v_push(&r, (uint32_t)hi))
            goto oom;
    }
    if (p->i >= p->n) {
        fail(p, HR_EINVAL, "unterminated character class");
        goto bad;
    }
    p->i++;
    uint32_t node = chars(p, r.v, r.n / 2, neg);
    hr__u32v_free(&r);
    return node;
oom:
    fail(p, HR_ENOMEM, "out of memory");
bad:
    hr__u32v_free(&r);
    return 0;
}

static int parse_int(rp *p, int32_t *v) {
    if (peek(p) < '0' || peek(p) > '9')
        return -1;
    int64_t x = 0;
    while (peek(p) >= '0' && peek(p) <= '9') {
        x = x * 10 + (p->s[p->i++] - '0');
        if (x > HR__G_MAX_REP)
            return fail(p, HR_ERANGE, "repetition bound too large");
    }
    *v = (int32_t)x;
    return 0;
}

static uint32_t parse_alt(rp *p, int top);

static uint32_t parse_seq(rp *p, int top) {
    hr__u32v kids = {0};
    while (p->i < p->n && !p->rc) {
        int c = peek(p);
        uint32_t e;
        if (c == '|' || c == ')')
            break;
        if (c == '^' || c == '$') {
            /* anchors are handled by the caller at the ends of top-level
               alternatives; here they are in the middle */
            if (top && c == '$' && p->i + 1 == p->n)
                break;
            if (top && c == '$' && p->i + 1 < p->n && p->s[p->i + 1] == '|')
                break;
            fail(p, HR_EUNSUPPORTED, "an anchor (^ or $) inside the pattern is not supported");
            break;
        }
        if (c == '(') {
            p->i++;
            if (peek(p) == '?') {
                if (p->i + 1 < p->n && p->s[p->i + 1] == ':') {
                    p->i += 2;
                } else if (p->i + 1 < p->n && p->s[p->i + 1] == '<' && p->i + 2 < p->n &&
                           p->s[p->i + 2] != '=' && p->s[p->i + 2] != '!') {
                    while (p->i < p->n && p->s[p->i] != '>')
                        p->i++;
                    if (p->i >= p->n) {
                        fail(p, HR_EINVAL, "unterminated group name");
                        break;
                    }
                    p->i++;
                } else {
                    fail(p, HR_EUNSUPPORTED, "lookaround and (?...) groups are not supported");
                    break;
                }
            }
            if (++p->depth > 200) {
                fail(p, HR_ERANGE, "groups nested too deeply");
                break;
            }
            e = parse_alt(p, 0);
            p->depth--;
            if (p->rc)
                break;
            if (peek(p) != ')') {
                fail(p, HR_EINVAL, "missing ')'");
                break;
            }
            p->i++;
        } else if (c == '[') {
            e = parse_class(p);
        } else if (c == '.') {
            p->i++;
            e = chars(p, NOT_LT, 3, 1);
        } else if (c == '\\') {
            p->i++;
            const uint32_t *set;
            size_t nset;
            int neg;
            int64_t cp = escape(p, &set, &nset, &neg);
            if (p->rc)
                break;
            if (set) {
                e = chars(p, set, nset, neg);
            } else {
                uint32_t r[2] = {(uint32_t)cp, (uint32_t)cp};
                e = chars(p, r, 1, 0);
            }
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (c == '{' && !(p->i + 1 < p->n && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9')) {
                p->i++; /* a literal '{' (Annex B) */
                uint32_t r[2] = {'{', '{'};
                e = chars(p, r, 1, 0);
            } else {
                fail(p, HR_EINVAL, "nothing to repeat");
                break;
            }
        } else {
            int64_t cp = utf8(p);
            if (p->rc)
                break;
            uint32_t r[2] = {(uint32_t)cp, (uint32_t)cp};
            e = chars(p, r, 1, 0);
        }
        if (p->rc)
            break;
        /* quantifiers */
        for (;;) {
            c = peek(p);
            int32_t lo, hi;
            if (c == '*' || c == '+' || c == '?') {
                p->i++;
                lo = c == '+';
                hi = c == '?' ? 1 : -1;
            } else if (c == '{') {
                size_t save = p->i++;
                if (parse_int(p, &lo)) {
                    if (p->rc)
                        break;
                    p->i = save; /* a literal '{' follows: next atom */
                    break;
                }
                hi = lo;
                if (peek(p) == ',') {
                    p->i++;
                    hi = -1;
                    if (peek(p) >= '0' && peek(p) <= '9' && parse_int(p, &hi))
                        break;
                }
                if (peek(p) != '}') {
                    fail(p, HR_EINVAL, "bad {m,n} quantifier");
                    break;
                }
                p->i++;
                if (hi >= 0 && hi < lo) {
                    fail(p, HR_EINVAL, "quantifier {m,n} with n < m");
                    break;
                }
            } else {
                break;
            }
            if (peek(p) == '?')
                p->i++; /* lazy: same language */
            e = hr__gir_rep(p->ir, e, lo, hi);
        }
        if (p->rc)
            break;
        if (hr__u32v_push(&kids, e)) {
            fail(p, HR_ENOMEM, "out of memory");
            break;
        }
    }
    uint32_t node = p->rc ? 0 : hr__gir_seq(p->ir, kids.v, kids.n);
    hr__u32v_free(&kids);
    return node;
}

/* top: a top-level alternation, whose alternatives may carry ^ and $;
 * p->json with unanchored ends adds "anything" where an anchor is absent.
 * For a full match (raw mode), the anchors change nothing. */
static uint32_t parse_alt(rp *p, int top) {
    hr__u32v alts = {0};
    uint32_t any = 0;
    if (top && p->json) {
        uint32_t all[2] = {0, 0x10FFFF};
        any = hr__gir_rep(p->ir, chars(p, all, 1, 0), 0, -1);
    }
    for (;;) {
        int start_anchor = 0, end_anchor = 0;
        if (top && peek(p) == '^') {
            p->i++;
            start_anchor = 1;
        }
        uint32_t s = parse_seq(p, top);
        if (p->rc)
            break;
        if (top && peek(p) == '$') {
            p->i++;
            end_anchor = 1;
        }
        if (top && p->json)
            s = hr__gir_seq3(p->ir, start_anchor ? hr__gir_empty(p->ir) : any, s,
                             end_anchor ? hr__gir_empty(p->ir) : any);
        if (hr__u32v_push(&alts, s)) {
            fail(p, HR_ENOMEM, "out of memory");
            break;
        }
        if (peek(p) != '|')
            break;
        p->i++;
    }
    uint32_t node = p->rc ? 0 : hr__gir_alt(p->ir, alts.v, alts.n);
    hr__u32v_free(&alts);
    return node;
}

int hr__regex_ir(hr__gir *ir, const char *re, size_t len, int json,
                 uint32_t *out, hr_error *err) {
    rp p = {re, len, 0, ir, json, 0, 0, err};
    uint32_t n = parse_alt(&p, 1);
    if (!p.rc && p.i < p.n)
        fail(&p, HR_EINVAL, "unmatched ')'");
    if (!p.rc && ir->oom)
        p.rc = hr_err(err, HR_ENOMEM, "out of memory");
    *out = n;
    return p.rc;
}

int hr_grammar_from_regex(hr_grammar **out, const char *re, hr_error *err) {
    *out = NULL;
    hr__gir ir;
    hr__gir_init(&ir);
    uint32_t body;
    int rc = hr__regex_ir(&ir, re, strlen(re), 0, &body, err);
    if (!rc) {
        int32_t root = hr__gir_rule(&ir, "root", 4);
        hr__gir_define(&ir, root, body);
        rc = hr__grammar_compile(out, &ir, root, err);
    }
    hr__gir_deinit(&ir);
    return rc;
}
