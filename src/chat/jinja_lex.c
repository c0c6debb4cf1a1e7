/* Jinja lexer. Mirrors jinja2's regex lexer (lexer.py) for the default
 * delimiters with trim_blocks=True and lstrip_blocks=True:
 *   - text before `{%-`/`{{-`/`{#-` loses its trailing whitespace;
 *   - text before `{%`/`{#` (not `{%+`) loses spaces/tabs back to the start
 *     of its line when nothing else is on that line;
 *   - `-%}`/`-}}`/`-#}` eat the whitespace after them; `%}` and `#}` eat
 *     one newline after them (not `+%}`);
 *   - `{% raw %}...{% endraw %}` is literal text. */
#include "chat/jinja_lex.h"
#include "chat/jinja_value.h"
#include "core/error.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void hr__jlex_linecol(const char *src, size_t len, long pos, int *line, int *col) {
    int l = 1, c = 1;
    for (long i = 0; i < pos && (size_t)i < len; i++) {
        if (src[i] == '\n') {
            l++;
            c = 1;
        } else if (((unsigned char)src[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

static int fail(hr_jlex *lx, hr_error *err, int code, long pos, const char *what) {
    int line, col;
    hr__jlex_linecol(lx->src, lx->src_len, pos, &line, &col);
    hr_err(err, code, "template syntax error at line %d, column %d: %s", line, col, what);
    if (err)
        err->pos = pos;
    hr__jlex_free(lx);
    return code;
}

static int push(hr_jlex *lx, hr_jtok t) {
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        hr_jtok *p = realloc(lx->tok, cap * sizeof *p);
        if (!p)
            return HR_ENOMEM;
        lx->tok = p;
        lx->cap = cap;
    }
    lx->tok[lx->n++] = t;
    return 0;
}

static int push_data(hr_jlex *lx, long pos, size_t len) {
    if (!len)
        return 0;
    return push(lx, (hr_jtok){.type = HR_JT_DATA, .pos = pos, .s = lx->src + pos, .len = len});
}

/* Text before a tag: apply the tag's `-` or lstrip_blocks. */
static size_t strip_text(const char *text, size_t len, char sign, int is_var,
                         int line_starting) {
    if (sign == '-') {
        while (len && is_ws(text[len - 1]))
            len--;
        return len;
    }
    if (sign == '+' || is_var)
        return len;
    size_t l = len;
    while (l && text[l - 1] != '\n')
        l--;
    if (l == 0 && !line_starting)
        return len;
    if (l == len)
        return len;
    for (size_t i = l; i < len; i++)
        if (!is_ws(text[i]))
            return len;
    return l;
}

/* ---- string literals (Python's unicode-escape) --------------------------- */

static int hexval(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decode body[0..n) into a new NUL-terminated buffer; NULL + *bad set on a
 * malformed escape. */
static char *unescape(const char *body, size_t n, size_t *out_len, const char **bad) {
    hr_jbuf b;
    hr__jbuf_init(&b, 0);
    hr__jbuf_put(&b, "", 0);
    *bad = NULL;
    for (size_t i = 0; i < n; i++) {
        char c = body[i];
        if (c != '\\' || i + 1 >= n) {
            hr__jbuf_putc(&b, c);
            continue;
        }
        char e = body[++i];
        uint32_t cp;
        int digits = 0;
        switch (e) {
        case '\n': continue;
        case '\\': hr__jbuf_putc(&b, '\\'); continue;
        case '\'': hr__jbuf_putc(&b, '\''); continue;
        case '"': hr__jbuf_putc(&b, '"'); continue;
        case 'a': hr__jbuf_putc(&b, '\a'); continue;
        case 'b': hr__jbuf_putc(&b, '\b'); continue;
        case 'f': hr__jbuf_putc(&b, '\f'); continue;
        case 'n': hr__jbuf_putc(&b, '\n'); continue;
        case 'r': hr__jbuf_putc(&b, '\r'); continue;
        case 't': hr__jbuf_putc(&b, '\t'); continue;
        case 'v': hr__jbuf_putc(&b, '\v'); continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': *bad = "not supported yet: \\N{...} escapes"; goto fail;
        default:
            if (e >= '0' && e <= '7') {
                cp = 0;
                int k = 0;
                while (k < 3 && i < n && body[i] >= '0' && body[i] <= '7')
                    cp = cp * 8 + (uint32_t)(body[i++] - '0'), k++;
                i--;
                hr__jbuf_utf8(&b, cp);
            } else {
                hr__jbuf_putc(&b, '\\');
                hr__jbuf_putc(&b, e);
            }
            continue;
        }
        cp = 0;
        for (int k = 0; k < digits; k++) {
            int h = i + 1 + (size_t)k < n ? hexval(body[i + 1 + k]) : -1;
            if (h < 0) {
                *bad = "truncated \\x, \\u or \\U escape in a string";
                goto fail;
            }
            cp = cp * 16 + (uint32_t)h;
        }
        i += (size_t)digits;
        if (cp > 0x10FFFF) {
            *bad = "illegal Unicode character in a string escape";
            goto fail;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            *bad = "not supported yet: surrogate code points in string escapes";
            goto fail;
        }
        hr__jbuf_utf8(&b, cp);
    }
    if (b.failed) {
        *bad = "out of memory";
        goto fail;
    }
    *out_len = b.len;
    return b.p;
fail:
    hr__jbuf_free(&b);
    return NULL;
}

/* ---- expression tokens ------------------------------------------------------ */

static const struct {
    const char *s;
    int op;
} ops[] = {
    {"//", HR_JOP_FLOORDIV}, {"**", HR_JOP_POW}, {"==", HR_JOP_EQ}, {"!=", HR_JOP_NE},
    {">=", HR_JOP_GTEQ}, {"<=", HR_JOP_LTEQ}, {"+", HR_JOP_ADD}, {"-", HR_JOP_SUB},
    {"/", HR_JOP_DIV}, {"*", HR_JOP_MUL}, {"%", HR_JOP_MOD}, {"~", HR_JOP_TILDE},
    {"[", HR_JOP_LBRACKET}, {"]", HR_JOP_RBRACKET}, {"(", HR_JOP_LPAREN},
    {")", HR_JOP_RPAREN}, {"{", HR_JOP_LBRACE}, {"}", HR_JOP_RBRACE}, {">", HR_JOP_GT},
    {"<", HR_JOP_LT}, {"=", HR_JOP_ASSIGN}, {".", HR_JOP_DOT}, {":", HR_JOP_COLON},
    {"|", HR_JOP_PIPE}, {",", HR_JOP_COMMA}, {";", HR_JOP_SEMICOLON},
};

/* Digits with optional single underscores between them; returns the end. */
static size_t scan_digits(const char *s, size_t i, size_t n) {
    if (i >= n || !isdigit((unsigned char)s[i]))
        return i;
    i++;
    while (i < n) {
        if (isdigit((unsigned char)s[i]))
            i++;
        else if (s[i] == '_' && i + 1 < n && isdigit((unsigned char)s[i + 1]))
            i += 2;
        else
            break;
    }
    return i;
}

static double parse_num(const char *s, size_t n, int is_float, int64_t *iv, int *overflow) {
    char tmp[128];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < sizeof tmp; i++)
        if (s[i] != '_')
            tmp[k++] = s[i];
    tmp[k] = 0;
    *overflow = 0;
    if (is_float)
        return strtod(tmp, NULL);
    int64_t v = 0;
    for (size_t i = 0; i < k; i++) {
        int d = tmp[i] - '0';
        if (v > (INT64_MAX - d) / 10) {
            *overflow = 1;
            return 0;
        }
        v = v * 10 + d;
    }
    *iv = v;
    return 0;
}

/* Lex the inside of a `{{ }}` or `{% %}` starting at *pi; stops after the
 * end delimiter. */
static int lex_tag(hr_jlex *lx, size_t *pi, int is_block, int *line_starting,
                   hr_error *err) {
    const char *s = lx->src;
    size_t n = lx->src_len, i = *pi;
    int balance = 0;
    for (;;) {
        if (i >= n)
            return fail(lx, err, HR_EFORMAT, (long)i, "unexpected end of template inside a tag");
        char c = s[i];
        /* end delimiter, only with balanced brackets */
        if (!balance) {
            char e = is_block ? '%' : '}';
            long at = (long)i;
            if (c == '-' && i + 2 < n + 0 && s[i + 1] == e && s[i + 2] == '}') {
                i += 3;
                while (i < n && is_ws(s[i]))
                    i++;
            } else if (is_block && c == '+' && i + 2 < n && s[i + 1] == '%' && s[i + 2] == '}') {
                i += 3;
            } else if (c == e && i + 1 < n && s[i + 1] == '}') {
                i += 2;
                if (is_block && i < n && s[i] == '\n')
                    i++;
            } else {
                at = -1;
            }
            if (at >= 0) {
                *line_starting = s[i - 1] == '\n';
                *pi = i;
                return push(lx, (hr_jtok){.type = is_block ? HR_JT_BLOCK_END : HR_JT_VAR_END,
                                          .pos = at});
            }
        }
        if (is_ws(c)) {
            i++;
            continue;
        }
        hr_jtok t = {.pos = (long)i};
        if (isdigit((unsigned char)c)) {
            size_t j = scan_digits(s, i, n), end = j;
            int is_float = 0;
            if (j < n && s[j] == '.' && j + 1 < n && isdigit((unsigned char)s[j + 1])) {
                end = scan_digits(s, j + 1, n);
                is_float = 1;
            }
            if (end < n && (s[end] == 'e' || s[end] == 'E')) {
                size_t k = end + 1;
                if (k < n && (s[k] == '+' || s[k] == '-'))
                    k++;
                size_t k2 = scan_digits(s, k, n);
                if (k2 > k) {
                    end = k2;
                    is_float = 1;
                }
            }
            if (!is_float && c == '0' && i + 1 < n && strchr("xXoObB", s[i + 1])) {
                /* 0x / 0o / 0b literals, with single underscores */
                int base = strchr("xX", s[i + 1]) ? 16 : strchr("oO", s[i + 1]) ? 8 : 2;
                size_t k = i + 2;
                int64_t v = 0, any = 0;
                for (;; k++) {
                    if (k < n && s[k] == '_' && k + 1 < n && hexval(s[k + 1]) >= 0)
                        k++;
                    int d = k < n ? hexval(s[k]) : -1;
                    if (d < 0 || d >= base)
                        break;
                    if (v > (INT64_MAX - d) / base)
                        return fail(lx, err, HR_EUNSUPPORTED, (long)i,
                                    "not supported yet: integer literal beyond 64 bits");
                    v = v * base + d;
                    any = 1;
                }
                if (!any)
                    return fail(lx, err, HR_EFORMAT, (long)i, "invalid integer literal");
                t.type = HR_JT_INT;
                t.i = v;
                i = k;
                goto pushed;
            }
            if (!is_float && c == '0') {
                /* jinja2: `0(_?0)*` */
                end = i + 1;
                while (end < n && (s[end] == '0' || (s[end] == '_' && end + 1 < n && s[end + 1] == '0')))
                    end++;
            }
            int overflow;
            t.type = is_float ? HR_JT_FLOAT : HR_JT_INT;
            t.f = parse_num(s + i, end - i, is_float, &t.i, &overflow);
            if (overflow)
                return fail(lx, err, HR_EUNSUPPORTED, (long)i,
                            "not supported yet: integer literal beyond 64 bits");
            i = end;
        } else if (isalpha((unsigned char)c) || c == '_') {
            size_t j = i + 1;
            while (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_'))
                j++;
            t.type = HR_JT_NAME;
            t.s = s + i;
            t.len = j - i;
            i = j;
        } else if (c == '\'' || c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != c) {
                if (s[j] == '\\')
                    j++;
                j++;
            }
            if (j >= n)
                return fail(lx, err, HR_EFORMAT, (long)i, "unterminated string literal");
            const char *bad;
            size_t len;
            char *v = unescape(s + i + 1, j - i - 1, &len, &bad);
            if (!v)
                return fail(lx, err, strstr(bad, "not supported") ? HR_EUNSUPPORTED : HR_EFORMAT,
                            (long)i, bad);
            if (lx->n_strings == lx->cap_strings) {
                size_t cap = lx->cap_strings ? lx->cap_strings * 2 : 32;
                char **p = realloc(lx->strings, cap * sizeof *p);
                if (!p) {
                    free(v);
                    return fail(lx, err, HR_ENOMEM, (long)i, "out of memory");
                }
                lx->strings = p;
                lx->cap_strings = cap;
            }
            lx->strings[lx->n_strings++] = v;
            t.type = HR_JT_STRING;
            t.s = v;
            t.len = len;
            i = j + 1;
        } else {
            size_t k = 0;
            for (; k < sizeof ops / sizeof ops[0]; k++) {
                size_t l = strlen(ops[k].s);
                if (i + l <= n && !memcmp(s + i, ops[k].s, l))
                    break;
            }
            if (k == sizeof ops / sizeof ops[0]) {
                char what[64];
                if ((unsigned char)c >= 0x20 && (unsigned char)c < 0x7F)
                    snprintf(what, sizeof what, "unexpected char '%c'", c);
                else
                    snprintf(what, sizeof what, "unexpected byte 0x%02x", (unsigned char)c);
                return fail(lx, err, HR_EFORMAT, (long)i, what);
            }
            t.type = HR_JT_OP;
            t.op = (uint8_t)ops[k].op;
            if (t.op == HR_JOP_LPAREN || t.op == HR_JOP_LBRACKET || t.op == HR_JOP_LBRACE)
                balance++;
            else if ((t.op == HR_JOP_RPAREN || t.op == HR_JOP_RBRACKET || t.op == HR_JOP_RBRACE) &&
                     balance > 0)
                balance--;
            else if (t.op == HR_JOP_RPAREN || t.op == HR_JOP_RBRACKET || t.op == HR_JOP_RBRACE)
                return fail(lx, err, HR_EFORMAT, (long)i, "unexpected closing bracket");
            i += strlen(ops[k].s);
        }
    pushed:
        if (push(lx, t))
            return fail(lx, err, HR_ENOMEM, t.pos, "out of memory");
    }
}

/* ---- root ---------------------------------------------------------------------- */

/* Is `{%` at i a `{% raw %}` (with optional - / +)? Sets *end after it. */
static int raw_begin(const char *s, size_t n, size_t i, size_t *end) {
    size_t j = i + 2;
    if (j < n && (s[j] == '-' || s[j] == '+'))
        j++;
    while (j < n && is_ws(s[j]))
        j++;
    if (j + 3 > n || memcmp(s + j, "raw", 3))
        return 0;
    j += 3;
    while (j < n && is_ws(s[j]))
        j++;
    if (j + 3 <= n && s[j] == '-' && s[j + 1] == '%' && s[j + 2] == '}') {
        j += 3;
        while (j < n && is_ws(s[j]))
            j++;
    } else if (j + 2 <= n && s[j] == '%' && s[j + 1] == '}') {
        j += 2;
    } else {
        return 0;
    }
    *end = j;
    return 1;
}

/* Find `{% endraw %}` from i; sets the text end, its sign and the end. */
static int raw_end(const char *s, size_t n, size_t i, size_t *text_end, char *sign,
                   size_t *end) {
    for (; i + 1 < n; i++) {
        if (s[i] != '{' || s[i + 1] != '%')
            continue;
        size_t j = i + 2;
        char sg = 0;
        if (j < n && (s[j] == '-' || s[j] == '+'))
            sg = s[j++];
        while (j < n && is_ws(s[j]))
            j++;
        if (j + 6 > n || memcmp(s + j, "endraw", 6))
            continue;
        j += 6;
        while (j < n && is_ws(s[j]))
            j++;
        if (j + 3 <= n && s[j] == '+' && s[j + 1] == '%' && s[j + 2] == '}') {
            j += 3;
        } else if (j + 3 <= n && s[j] == '-' && s[j + 1] == '%' && s[j + 2] == '}') {
            j += 3;
            while (j < n && is_ws(s[j]))
                j++;
        } else if (j + 2 <= n && s[j] == '%' && s[j + 1] == '}') {
            j += 2;
            if (j < n && s[j] == '\n')
                j++;
        } else {
            continue;
        }
        *text_end = i;
        *sign = sg;
        *end = j;
        return 1;
    }
    return 0;
}

static int normalize(hr_jlex *lx, const char *src, size_t len) {
    lx->src = malloc(len + 1);
    if (!lx->src)
        return HR_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            lx->src[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            lx->src[k++] = src[i];
        }
    }
    if (k && lx->src[k - 1] == '\n')
        k--; /* keep_trailing_newline=False */
    lx->src[k] = 0;
    lx->src_len = k;
    return 0;
}

int hr__jlex_run(hr_jlex *lx, const char *src, size_t len, hr_error *err) {
    memset(lx, 0, sizeof *lx);
    size_t bad = hr__utf8_check(src, len);
    if (bad) {
        hr_err(err, HR_EFORMAT, "template is not valid UTF-8 (byte %zu)", bad - 1);
        if (err)
            err->pos = (long)(bad - 1);
        return HR_EFORMAT;
    }
    if (normalize(lx, src, len))
        return hr_err(err, HR_ENOMEM, "out of memory");
    const char *s = lx->src;
    size_t n = lx->src_len, i = 0;
    int line_starting = 1;
    while (i < n) {
        size_t t = i;
        while (t + 1 < n && !(s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#')))
            t++;
        if (t + 1 >= n) {
            if (push_data(lx, (long)i, n - i))
                return fail(lx, err, HR_ENOMEM, (long)i, "out of memory");
            break;
        }
        char kind = s[t + 1];
        char sign = t + 2 < n && (s[t + 2] == '-' || s[t + 2] == '+') ? s[t + 2] : 0;
        size_t text_len = strip_text(s + i, t - i, sign, kind == '{', line_starting);
        if (push_data(lx, (long)i, text_len))
            return fail(lx, err, HR_ENOMEM, (long)i, "out of memory");
        size_t body = t + 2 + (sign ? 1 : 0), rend;
        if (kind == '%' && raw_begin(s, n, t, &rend)) {
            size_t text_end, after;
            char rs;
            if (!raw_end(s, n, rend, &text_end, &rs, &after))
                return fail(lx, err, HR_EFORMAT, (long)t, "missing end of raw directive");
            int ls = s[rend - 1] == '\n';
            size_t l = strip_text(s + rend, text_end - rend, rs, 0, ls);
            if (push_data(lx, (long)rend, l))
                return fail(lx, err, HR_ENOMEM, (long)i, "out of memory");
            i = after;
            line_starting = s[i - 1] == '\n';
        } else if (kind == '#') {
            size_t j = body;
            while (j + 1 < n && !(s[j] == '#' && s[j + 1] == '}'))
                j++;
            if (j + 1 >= n)
                return fail(lx, err, HR_EFORMAT, (long)t, "missing end of comment tag");
            char cs = j > body && (s[j - 1] == '-' || s[j - 1] == '+') ? s[j - 1] : 0;
            i = j + 2;
            if (cs == '-') {
                while (i < n && is_ws(s[i]))
                    i++;
            } else if (cs != '+' && i < n && s[i] == '\n') {
                i++;
            }
            line_starting = s[i - 1] == '\n';
        } else {
            int is_block = kind == '%';
            if (push(lx, (hr_jtok){.type = is_block ? HR_JT_BLOCK_BEGIN : HR_JT_VAR_BEGIN,
                                   .pos = (long)t}))
                return fail(lx, err, HR_ENOMEM, (long)t, "out of memory");
            i = body;
            int rc = lex_tag(lx, &i, is_block, &line_starting, err);
            if (rc)
                return rc;
        }
    }
    if (push(lx, (hr_jtok){.type = HR_JT_EOF, .pos = (long)n}))
        return fail(lx, err, HR_ENOMEM, (long)n, "out of memory");
    return 0;
}

void hr__jlex_free(hr_jlex *lx) {
    if (!lx)
        return;
    for (size_t i = 0; i < lx->n_strings; i++)
        free(lx->strings[i]);
    free(lx->strings);
    free(lx->tok);
    free(lx->src);
    memset(lx, 0, sizeof *lx);
}
