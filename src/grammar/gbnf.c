/* GBNF (llama.cpp's grammar syntax) -> IR.
 *
 *   rule     ::= name "::=" alts (newline | end)
 *   alts     ::= seq ("|" seq)*          newlines allowed after "|" and
 *   seq      ::= (elem postfix*)*        anywhere inside parentheses
 *   elem     ::= "lit" | [class] | [^class] | name | "(" alts ")" | "."
 *   postfix  ::= * | + | ? | {m} | {m,} | {m,n}
 *
 * Escapes (in literals and classes): \n \r \t \\ \" \[ \] \- \xHH \uHHHH
 * \UHHHHHHHH. Comments run from # to the end of the line. The start rule is
 * "root". Token references (<...>, <[id]>, !<...>) are not supported. */
#include "grammar/internal.h"
#include "core/error.h"

#include <stdlib.h>
#include <string.h>

typedef struct gp {
    const char *s;
    size_t n, i;
    hr__gir *ir;
    hr_error *err;
    int rc;
    int depth;
} gp;

#define MAX_DEPTH 200

static int fail(gp *p, int code, size_t at, const char *msg) {
    if (!p->rc) {
        p->rc = hr_err(p->err, code, "gbnf: %s at byte %zu", msg, at);
        if (p->err)
            p->err->pos = (long)at;
    }
    return p->rc;
}

static int peek(const gp *p) { return p->i < p->n ? (unsigned char)p->s[p->i] : -1; }

static void space(gp *p, int newline_ok) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
            p->i++;
        } else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r')
                p->i++;
        } else {
            break;
        }
    }
}

static int is_word(int c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '-' || c == '_';
}

static int hexval(int c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One code point (escape or UTF-8) at p->i; -1 on error. */
static int64_t parse_char(gp *p) {
    size_t at = p->i;
    unsigned char c = (unsigned char)p->s[p->i];
    if (c == '\\') {
        if (p->i + 1 >= p->n)
            return fail(p, HR_EINVAL, at, "unfinished escape"), -1;
        char e = p->s[p->i + 1];
        p->i += 2;
        int nd = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nd) {
            uint32_t v = 0;
            for (int k = 0; k < nd; k++) {
                int h = p->i < p->n ? hexval((unsigned char)p->s[p->i]) : -1;
                if (h < 0)
                    return fail(p, HR_EINVAL, at, "bad hex escape"), -1;
                v = v * 16 + (uint32_t)h;
                p->i++;
            }
            if (v > 0x10FFFF)
                return fail(p, HR_EINVAL, at, "code point out of range"), -1;
            return v;
        }
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'':
            return (unsigned char)e;
        }
        return fail(p, HR_EINVAL, at, "unknown escape"), -1;
    }
    /* UTF-8 */
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || p->i + (size_t)len > p->n)
        return fail(p, HR_EINVAL, at, "invalid UTF-8"), -1;
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len; k++) {
        unsigned char x = (unsigned char)p->s[p->i + (size_t)k];
        if ((x & 0xC0) != 0x80)
            return fail(p, HR_EINVAL, at, "invalid UTF-8"), -1;
        v = v << 6 | (x & 0x3F);
    }
    static const uint32_t minv[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < minv[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return fail(p, HR_EINVAL, at, "invalid UTF-8"), -1;
    p->i += (size_t)len;
    return v;
}

static size_t put_utf8(uint32_t c, char *b) {
    if (c < 0x80) {
        b[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        b[0] = (char)(0xC0 | c >> 6);
        b[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        b[0] = (char)(0xE0 | c >> 12);
        b[1] = (char)(0x80 | (c >> 6 & 0x3F));
        b[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    b[0] = (char)(0xF0 | c >> 18);
    b[1] = (char)(0x80 | (c >> 12 & 0x3F));
    b[2] = (char)(0x80 | (c >> 6 & 0x3F));
    b[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

static uint32_t parse_literal(gp *p) {
    size_t at = p->i++;
    char *buf = malloc(p->n - p->i + 4 > 16 ? (p->n - p->i) * 4 + 4 : 64);
    size_t bn = 0;
    if (!buf)
        return fail(p, HR_ENOMEM, at, "out of memory"), 0;
    while (p->i < p->n && p->s[p->i] != '"') {
        int64_t c = parse_char(p);
        if (c < 0) {
            free(buf);
            return 0;
        }
        if (c >= 0xD800 && c <= 0xDFFF) {
            free(buf);
            return fail(p, HR_EINVAL, at, "surrogate code point in a literal"), 0;
        }
        bn += put_utf8((uint32_t)c, buf + bn);
    }
    if (p->i >= p->n) {
        free(buf);
        return fail(p, HR_EINVAL, at, "unterminated literal"), 0;
    }
    p->i++;
    uint32_t node = hr__gir_bytes(p->ir, buf, bn);
    free(buf);
    return node;
}

static uint32_t parse_class(gp *p) {
    size_t at = p->i++;
    int neg = 0;
    if (peek(p) == '^') {
        neg = 1;
        p->i++;
    }
    hr__u32v r = {0};
    while (p->i < p->n && p->s[p->i] != ']') {
        int64_t lo = parse_char(p), hi;
        if (lo < 0)
            goto bad;
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            hi = parse_char(p);
            if (hi < 0)
                goto bad;
            if (hi < lo) {
                fail(p, HR_EINVAL, at, "character range out of order");
                goto bad;
            }
        }
        if (hr__u32v_push(&r, (uint32_t)lo) || hr__u32v_push(&r, (uint32_t)hi)) {
            fail(p, HR_ENOMEM, at, "out of memory");
            goto bad;
        }
    }
    if (p->i >= p->n) {
        fail(p, HR_EINVAL, at, "unterminated character class");
        goto bad;
    }
    p->i++;
    uint32_t node = hr__gir_chars(p->ir, r.v, r.n / 2, neg, 0);
    hr__u32v_free(&r);
    return node;
bad:
    hr__u32v_free(&r);
    return 0;
}

static int parse_int(gp *p, int32_t *out) {
    size_t at = p->i;
    int64_t v = 0;
    if (peek(p) < '0' || peek(p) > '9')
        return fail(p, HR_EINVAL, at, "expected a number");
    while (peek(p) >= '0' && peek(p) <= '9') {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > HR__G_MAX_REP)
            return fail(p, HR_ERANGE, at, "repetition bound too large");
    }
    *out = (int32_t)v;
    return 0;
}

static uint32_t parse_alts(gp *p, int nested);

static uint32_t parse_seq(gp *p, int nested) {
    hr__u32v kids = {0};
    while (p->i < p->n && !p->rc) {
        int c = peek(p);
        size_t at = p->i;
        uint32_t e;
        if (c == '"') {
            e = parse_literal(p);
        } else if (c == '[') {
            e = parse_class(p);
        } else if (c == '.') {
            uint32_t any[2] = {0, 0x10FFFF};
            p->i++;
            e = hr__gir_chars(p->ir, any, 1, 0, 0);
        } else if (c == '(') {
            if (++p->depth > MAX_DEPTH) {
                fail(p, HR_ERANGE, at, "groups nested too deeply");
                break;
            }
            p->i++;
            space(p, 1);
            e = parse_alts(p, 1);
            p->depth--;
            if (p->rc)
                break;
            if (peek(p) != ')') {
                fail(p, HR_EINVAL, at, "unclosed '('");
                break;
            }
            p->i++;
        } else if (is_word(c)) {
            size_t s = p->i;
            while (is_word(peek(p)))
                p->i++;
            int32_t r = hr__gir_rule(p->ir, p->s + s, p->i - s);
            if (r < 0) {
                fail(p, HR_ENOMEM, at, "out of memory");
                break;
            }
            if (p->ir->rules[r].pos < 0)
                p->ir->rules[r].pos = (long)s;
            e = hr__gir_ref(p->ir, (uint32_t)r);
        } else if (c == '<' || c == '!') {
            fail(p, HR_EUNSUPPORTED, at, "token references (<...>) are not supported");
            break;
        } else {
            break; /* end of the sequence */
        }
        if (p->rc)
            break;
        space(p, nested);
        /* postfix operators */
        for (;;) {
            c = peek(p);
            size_t pat = p->i;
            if (c == '*' || c == '+' || c == '?') {
                p->i++;
                e = hr__gir_rep(p->ir, e, c == '+', c == '?' ? 1 : -1);
            } else if (c == '{') {
                int32_t lo, hi;
                p->i++;
                space(p, nested);
                if (parse_int(p, &lo))
                    break;
                space(p, nested);
                hi = lo;
                if (peek(p) == ',') {
                    p->i++;
                    space(p, nested);
                    hi = -1;
                    if (peek(p) >= '0' && peek(p) <= '9') {
                        if (parse_int(p, &hi))
                            break;
                        space(p, nested);
                    }
                }
                if (peek(p) != '}') {
                    fail(p, HR_EINVAL, pat, "expected '}'");
                    break;
                }
                p->i++;
                if (hi >= 0 && hi < lo) {
                    fail(p, HR_EINVAL, pat, "repetition {m,n} with n < m");
                    break;
                }
                e = hr__gir_rep(p->ir, e, lo, hi);
            } else {
                break;
            }
            space(p, nested);
        }
        if (p->rc)
            break;
        if (hr__u32v_push(&kids, e)) {
            fail(p, HR_ENOMEM, at, "out of memory");
            break;
        }
    }
    uint32_t node = p->rc ? 0 : hr__gir_seq(p->ir, kids.v, kids.n);
    hr__u32v_free(&kids);
    return node;
}

static uint32_t parse_alts(gp *p, int nested) {
    hr__u32v alts = {0};
    for (;;) {
        uint32_t s = parse_seq(p, nested);
        if (p->rc)
            break;
        if (hr__u32v_push(&alts, s)) {
            fail(p, HR_ENOMEM, p->i, "out of memory");
            break;
        }
        if (peek(p) != '|')
            break;
        p->i++;
        space(p, 1);
    }
    uint32_t node = p->rc ? 0 : hr__gir_alt(p->ir, alts.v, alts.n);
    hr__u32v_free(&alts);
    return node;
}

static int parse_rule(gp *p) {
    size_t at = p->i;
    while (is_word(peek(p)))
        p->i++;
    if (p->i == at)
        return fail(p, HR_EINVAL, at, "expected a rule name");
    int32_t r = hr__gir_rule(p->ir, p->s + at, p->i - at);
    if (r < 0)
        return fail(p, HR_ENOMEM, at, "out of memory");
    if (p->ir->rules[r].body >= 0)
        return fail(p, HR_EINVAL, at, "rule defined twice");
    space(p, 0);
    if (p->n - p->i < 3 || memcmp(p->s + p->i, "::=", 3))
        return fail(p, HR_EINVAL, p->i, "expected '::='");
    p->i += 3;
    space(p, 1);
    uint32_t body = parse_alts(p, 0);
    if (p->rc)
        return p->rc;
    hr__gir_define(p->ir, r, body);
    if (p->i < p->n && p->s[p->i] != '\n' && p->s[p->i] != '\r')
        return fail(p, HR_EINVAL, p->i, "expected a newline or the end");
    space(p, 1);
    return 0;
}

int hr_grammar_from_gbnf(hr_grammar **out, const char *src, size_t len,
                         hr_error *err) {
    *out = NULL;
    hr__gir ir;
    hr__gir_init(&ir);
    gp p = {src, len, 0, &ir, err, 0, 0};
    if (err)
        err->pos = -1;
    if (memchr(src, 0, len))
        fail(&p, HR_EINVAL, (size_t)((const char *)memchr(src, 0, len) - src),
             "NUL byte in the grammar");
    space(&p, 1);
    while (!p.rc && p.i < p.n)
        parse_rule(&p);
    int rc = p.rc;
    if (!rc && ir.oom)
        rc = hr_err(err, HR_ENOMEM, "out of memory");
    if (!rc) {
        int32_t root = -1;
        for (uint32_t r = 0; r < ir.n_rules; r++)
            if (!strcmp(ir.rules[r].name, "root"))
                root = (int32_t)r;
        if (root < 0 || ir.rules[root].body < 0)
            rc = hr_err(err, HR_EINVAL, "gbnf: no 'root' rule");
        else if ((rc = hr__grammar_compile(out, &ir, root, err)) && err &&
                 err->code != HR_ENOMEM)
            hr_err_wrap(err, "gbnf");
    }
    hr__gir_deinit(&ir);
    return rc;
}
