/* Tool calls: the text inside one region (between its markers) -> calls.
 * JSON payloads keep the model's own text of the arguments (validated, not
 * re-printed, so numbers keep their digits); XML-style parameters and
 * Gemma 4's notation are converted to JSON text here. */
#include "chat/toolcall_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- byte buffer ----------------------------------------------------------- */

void hr__tbuf_put(hr__tbuf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void hr__tbuf_puts(hr__tbuf *b, const char *s) { hr__tbuf_put(b, s, strlen(s)); }
void hr__tbuf_putc(hr__tbuf *b, char c) { hr__tbuf_put(b, &c, 1); }

void hr__tbuf_json_str(hr__tbuf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    hr__tbuf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': hr__tbuf_puts(b, "\\\""); break;
        case '\\': hr__tbuf_puts(b, "\\\\"); break;
        case '\n': hr__tbuf_puts(b, "\\n"); break;
        case '\r': hr__tbuf_puts(b, "\\r"); break;
        case '\t': hr__tbuf_puts(b, "\\t"); break;
        default:
            if (c < 0x20) {
                char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
                hr__tbuf_put(b, u, 6);
            } else {
                hr__tbuf_putc(b, (char)c);
            }
        }
    }
    hr__tbuf_putc(b, '"');
}

void hr__tbuf_free(hr__tbuf *b) {
    free(b->p);
    *b = (hr__tbuf){0};
}

void hr__tool_calls_clear(hr__tool_calls *c) {
    for (size_t i = 0; i < c->n; i++) {
        free(c->v[i].name);
        free(c->v[i].args);
    }
    free(c->v);
    *c = (hr__tool_calls){0};
}

/* ---- helpers --------------------------------------------------------------- */

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i]))
        i++;
    return i;
}

static void trim(const char *s, size_t *a, size_t *b) {
    while (*a < *b && is_ws(s[*a]))
        (*a)++;
    while (*b > *a && is_ws(s[*b - 1]))
        (*b)--;
}

static int starts(const char *s, size_t n, size_t i, const char *m) {
    size_t k = strlen(m);
    return i + k <= n && memcmp(s + i, m, k) == 0;
}

/* First occurrence of m in s[i, n); n when absent. */
static size_t find(const char *s, size_t n, size_t i, const char *m) {
    size_t k = strlen(m);
    if (!k)
        return i;
    for (; i + k <= n; i++)
        if (s[i] == m[0] && memcmp(s + i, m, k) == 0)
            return i;
    return n;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* A JSON value (any type) in s[0, n) exactly; the caller decrefs. */
static json_t *load(const char *s, size_t n) {
    return json_loadb(s, n, JSON_DECODE_ANY, NULL);
}

static int push_call(hr__tool_calls *out, const char *name, size_t nn, const char *args,
                     size_t na) {
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 4;
        hr__tool_call *v = realloc(out->v, cap * sizeof *v);
        if (!v)
            return HR_ENOMEM;
        out->v = v;
        out->cap = cap;
    }
    char *a = dup_n(name, nn), *b = dup_n(args, na);
    if (!a || !b) {
        free(a);
        free(b);
        return HR_ENOMEM;
    }
    out->v[out->n++] = (hr__tool_call){a, b};
    return 0;
}

/* A function name: 1..256 bytes, no whitespace or control bytes, no quotes
 * or brackets (so prose is never taken for a name). */
static int good_name(const char *s, size_t n) {
    if (n == 0 || n > 256)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7f || strchr("\"'<>{}[]()", c))
            return 0;
    }
    return 1;
}

/* ---- JSON scanning --------------------------------------------------------- */

static const char GEMMA_Q[] = "<|\"|>";

long hr__tool_json_extent(const char *s, size_t n, int gemma) {
    size_t i = skip_ws(s, n, 0);
    if (i == n)
        return 0;
    if (s[i] != '{' && s[i] != '[')
        return -1;
    long depth = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (gemma && starts(s, n, i, GEMMA_Q)) {
            size_t e = find(s, n, i + 5, GEMMA_Q);
            if (e == n)
                return 0;
            i = e + 4;
        } else if (c == '"') {
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\')
                    i++;
            if (i >= n)
                return 0;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0)
                return (long)i + 1;
        }
    }
    return 0;
}

/* The end of the valid JSON value at s[i] (no leading whitespace). */
static size_t skip_value(const char *s, size_t n, size_t i) {
    if (i < n && (s[i] == '{' || s[i] == '[')) {
        long e = hr__tool_json_extent(s + i, n - i, 0);
        return e > 0 ? i + (size_t)e : n;
    }
    if (i < n && s[i] == '"') {
        for (i++; i < n && s[i] != '"'; i++)
            if (s[i] == '\\')
                i++;
        return i < n ? i + 1 : n;
    }
    while (i < n && !is_ws(s[i]) && !strchr(",]}", s[i]))
        i++;
    return i;
}

/* The span of the value of key in the (valid) object s[a, b); the last one
 * when repeated. 0 found, -1 absent. */
static int key_span(const char *s, size_t a, size_t b, const char *key, size_t *va, size_t *vb) {
    int found = -1;
    size_t i = skip_ws(s, b, a) + 1; /* past '{' */
    while (1) {
        i = skip_ws(s, b, i);
        if (i >= b || s[i] != '"')
            break;
        size_t ke = skip_value(s, b, i);
        json_t *k = load(s + i, ke - i);
        int match = k && strcmp(json_string_value(k), key) == 0;
        json_decref(k);
        i = skip_ws(s, b, ke) + 1; /* past ':' */
        i = skip_ws(s, b, i);
        size_t ve = skip_value(s, b, i);
        if (match) {
            *va = i;
            *vb = ve;
            found = 0;
        }
        i = skip_ws(s, b, ve);
        if (i >= b || s[i] != ',')
            break;
        i++;
    }
    return found;
}

/* ---- JSON payloads ---------------------------------------------------------- */

/* One call object at s[a, b) (valid JSON, decoded as obj). */
static int json_call(const hr__tool_syntax *sy, const char *s, size_t a, size_t b, json_t *obj,
                     hr__tool_calls *out) {
    if (!json_is_object(obj))
        return HR_EFORMAT;
    size_t va, vb;
    if (sy->flags & HR__TS_NAME_AS_KEY) {
        if (json_object_size(obj) != 1)
            return HR_EFORMAT;
        const char *name = json_object_iter_key(json_object_iter(obj));
        json_t *args = json_object_iter_value(json_object_iter(obj));
        if (!json_is_object(args) || !good_name(name, strlen(name)) ||
            key_span(s, a, b, name, &va, &vb))
            return HR_EFORMAT;
        return push_call(out, name, strlen(name), s + va, vb - va);
    }
    json_t *jn = json_object_get(obj, sy->name_key);
    const char *name = json_string_value(jn);
    if (!name || !good_name(name, json_string_length(jn)))
        return HR_EFORMAT;
    for (int k = 0; k < 2 && sy->args_keys[k]; k++) {
        json_t *args = json_object_get(obj, sy->args_keys[k]);
        if (!args)
            continue;
        if (json_is_null(args))
            break;
        if (json_is_string(args)) { /* arguments given as a JSON string */
            const char *t = json_string_value(args);
            json_t *inner = load(t, json_string_length(args));
            int ok = json_is_object(inner);
            json_decref(inner);
            if (!ok)
                return HR_EFORMAT;
            return push_call(out, name, strlen(name), t, json_string_length(args));
        }
        if (!json_is_object(args) || key_span(s, a, b, sy->args_keys[k], &va, &vb))
            return HR_EFORMAT;
        return push_call(out, name, strlen(name), s + va, vb - va);
    }
    return push_call(out, name, strlen(name), "{}", 2);
}

static int parse_json(const hr__tool_syntax *sy, const char *s, size_t n, hr__tool_calls *out) {
    size_t i = 0;
    while (1) {
        while (i < n && (is_ws(s[i]) || s[i] == ',' || s[i] == ';'))
            i++;
        if (i == n)
            break;
        long e = hr__tool_json_extent(s + i, n - i, 0);
        if (e <= 0)
            return HR_EFORMAT;
        size_t end = i + (size_t)e;
        json_t *v = load(s + i, end - i);
        if (!v)
            return HR_EFORMAT;
        int rc = 0;
        if (json_is_array(v)) {
            size_t j = i + 1, k = 0;
            if (json_array_size(v) == 0)
                rc = HR_EFORMAT;
            for (; !rc && k < json_array_size(v); k++) {
                j = skip_ws(s, end, j);
                size_t je = skip_value(s, end, j);
                rc = json_call(sy, s, j, je, json_array_get(v, k), out);
                j = skip_ws(s, end, je) + 1; /* past ',' */
            }
        } else {
            rc = json_call(sy, s, i, end, v, out);
        }
        json_decref(v);
        if (rc)
            return rc;
        i = end;
    }
    return 0;
}

/* ---- Gemma 4 notation -------------------------------------------------------- */

/* {key:<|"|>text<|"|>,n:1,l:[...]} -> JSON text in b. */
static int gemma_to_json(const char *s, size_t n, hr__tbuf *b) {
    for (size_t i = 0; i < n;) {
        if (starts(s, n, i, GEMMA_Q)) {
            size_t e = find(s, n, i + 5, GEMMA_Q);
            if (e == n)
                return HR_EFORMAT;
            hr__tbuf_json_str(b, s + i + 5, e - i - 5);
            i = e + 5;
        } else if (s[i] == '"') {
            size_t e = skip_value(s, n, i);
            hr__tbuf_put(b, s + i, e - i);
            i = e;
        } else if (isalpha((unsigned char)s[i]) || s[i] == '_') {
            size_t e = i;
            while (e < n && (isalnum((unsigned char)s[e]) || s[e] == '_' || s[e] == '-'))
                e++;
            if (e < n && s[e] == ':')
                hr__tbuf_json_str(b, s + i, e - i);
            else
                hr__tbuf_put(b, s + i, e - i);
            i = e;
        } else {
            hr__tbuf_putc(b, s[i++]);
        }
    }
    return b->oom ? HR_ENOMEM : 0;
}

/* ---- name + arguments -------------------------------------------------------- */

static int add_named(const hr__tool_syntax *sy, const char *s, size_t ha, size_t hb, size_t aa,
                     size_t ab, hr__tool_calls *out) {
    if (sy->name_after) {
        size_t k = find(s, hb, ha, sy->name_after);
        if (k < hb)
            ha = k + strlen(sy->name_after);
    }
    if (sy->name_cut)
        hb = find(s, hb, ha, sy->name_cut);
    trim(s, &ha, &hb);
    if ((sy->flags & HR__TS_KIMI_NAME)) {
        if (starts(s, hb, ha, "functions."))
            ha += 10;
        size_t c = hb;
        while (c > ha && isdigit((unsigned char)s[c - 1]))
            c--;
        if (c < hb && c > ha && s[c - 1] == ':')
            hb = c - 1;
    }
    if (!good_name(s + ha, hb - ha))
        return HR_EFORMAT;
    trim(s, &aa, &ab);
    if (aa == ab)
        return push_call(out, s + ha, hb - ha, "{}", 2);
    hr__tbuf g = {0};
    const char *args = s + aa;
    size_t na = ab - aa;
    if (sy->flags & HR__TS_GEMMA) {
        int rc = gemma_to_json(args, na, &g);
        if (rc) {
            hr__tbuf_free(&g);
            return rc;
        }
        args = g.p;
        na = g.n;
    }
    json_t *v = load(args, na);
    int rc = json_is_object(v) ? push_call(out, s + ha, hb - ha, args, na) : HR_EFORMAT;
    json_decref(v);
    hr__tbuf_free(&g);
    return rc;
}

static int parse_named(const hr__tool_syntax *sy, const char *s, size_t n, hr__tool_calls *out) {
    size_t i = 0;
    int gemma = (sy->flags & HR__TS_GEMMA) != 0;
    while (1) {
        while (i < n && (is_ws(s[i]) || s[i] == ','))
            i++;
        if (i == n)
            break;
        if (*sy->call_open) {
            if (!starts(s, n, i, sy->call_open))
                return HR_EFORMAT;
            i += strlen(sy->call_open);
        }
        size_t hb = *sy->sep ? find(s, n, i, sy->sep) : find(s, n, i, "{");
        if (hb == n)
            return HR_EFORMAT;
        size_t aa = hb + strlen(sy->sep), ab, next;
        if (*sy->call_close) {
            ab = find(s, n, aa, sy->call_close);
            if (ab == n)
                return HR_EFORMAT;
            next = ab + strlen(sy->call_close);
        } else {
            long e = hr__tool_json_extent(s + aa, n - aa, gemma);
            if (e <= 0)
                return HR_EFORMAT;
            ab = next = aa + (size_t)e;
        }
        int rc = add_named(sy, s, i, hb, aa, ab, out);
        if (rc)
            return rc;
        i = next;
    }
    return 0;
}

/* ---- XML-style parameters ----------------------------------------------------- */

/* The declared JSON type of tool `name`'s parameter `key`: 1 string,
 * 0 something else, -1 unknown. */
static int param_is_string(const json_t *tools, const char *name, size_t nn, const char *key,
                           size_t nk) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *fname = json_string_value(json_object_get(fn, "name"));
        if (!fname || strlen(fname) != nn || memcmp(fname, name, nn))
            continue;
        json_t *props = json_object_get(json_object_get(fn, "parameters"), "properties");
        const char *k;
        json_t *p;
        json_object_foreach(props, k, p) {
            if (strlen(k) != nk || memcmp(k, key, nk))
                continue;
            json_t *ty = json_object_get(p, "type");
            if (json_is_string(ty))
                return strcmp(json_string_value(ty), "string") == 0;
            if (json_is_array(ty)) {
                size_t j;
                json_t *e;
                json_array_foreach(ty, j, e) if (json_is_string(e) &&
                                                 !strcmp(json_string_value(e), "string")) return 1;
                return 0;
            }
            return -1;
        }
    }
    return -1;
}

/* Append "key": value to b: a JSON value when the value is valid JSON and
 * not declared (or marked) a string, else a JSON string. */
static void put_param(hr__tbuf *b, const char *s, size_t ka, size_t kb, size_t va, size_t vb,
                      int is_string) {
    if (b->n > 1)
        hr__tbuf_puts(b, ", ");
    hr__tbuf_json_str(b, s + ka, kb - ka);
    hr__tbuf_puts(b, ": ");
    if (starts(s, vb, va, "<![CDATA[") && vb - va >= 12 && !memcmp(s + vb - 3, "]]>", 3)) {
        va += 9;
        vb -= 3;
        is_string = 1;
    }
    if (is_string != 1) {
        size_t a = va, z = vb;
        trim(s, &a, &z);
        json_t *v = a < z ? load(s + a, z - a) : NULL;
        if (v) {
            json_decref(v);
            hr__tbuf_put(b, s + a, z - a);
            return;
        }
    }
    hr__tbuf_json_str(b, s + va, vb - va);
}

static int parse_xml(const hr__tool_syntax *sy, const char *s, size_t n, const json_t *tools,
                     hr__tool_calls *out) {
    size_t i = 0;
    hr__tbuf b = {0};
    int rc = 0;
    while (!rc) {
        i = skip_ws(s, n, i);
        if (i == n)
            break;
        rc = HR_EFORMAT;
        if (*sy->func_open) {
            if (!starts(s, n, i, sy->func_open))
                break;
            i += strlen(sy->func_open);
        }
        size_t na = i, nb = find(s, n, i, *sy->name_end ? sy->name_end : sy->param_open);
        if (nb == n && *sy->name_end)
            break;
        i = nb + strlen(sy->name_end);
        trim(s, &na, &nb);
        if (!good_name(s + na, nb - na))
            break;
        b.n = 0;
        hr__tbuf_putc(&b, '{');
        while (1) {
            i = skip_ws(s, n, i);
            if (*sy->func_close && starts(s, n, i, sy->func_close)) {
                i += strlen(sy->func_close);
                rc = 0;
                break;
            }
            if (!*sy->func_close && (i == n || !starts(s, n, i, sy->param_open))) {
                rc = 0;
                break;
            }
            if (!starts(s, n, i, sy->param_open))
                break;
            size_t ka = i + strlen(sy->param_open), kb = find(s, n, ka, sy->key_end);
            if (kb == n)
                break;
            i = kb + strlen(sy->key_end);
            int is_string = param_is_string(tools, s + na, nb - na, s + ka, kb - ka);
            if (sy->flags & HR__TS_KEY_ATTRS) {
                size_t gt = find(s, n, i, ">");
                if (gt == n)
                    break;
                size_t st = find(s, gt, i, "string=\"");
                if (st < gt)
                    is_string = starts(s, gt, st + 8, "true");
                i = gt + 1;
            }
            if (*sy->value_open) {
                i = skip_ws(s, n, i);
                if (!starts(s, n, i, sy->value_open))
                    break;
                i += strlen(sy->value_open);
            }
            size_t va = i, vb = find(s, n, i, sy->param_close);
            if (vb == n)
                break;
            i = vb + strlen(sy->param_close);
            if (sy->flags & HR__TS_TRIM1) {
                if (va < vb && s[va] == '\n')
                    va++;
                if (vb > va && s[vb - 1] == '\n')
                    vb--;
            }
            size_t kta = ka, ktb = kb;
            trim(s, &kta, &ktb);
            if (kta == ktb)
                break;
            put_param(&b, s, kta, ktb, va, vb, is_string);
        }
        if (rc)
            break;
        hr__tbuf_putc(&b, '}');
        json_t *v = b.oom ? NULL : load(b.p, b.n);
        rc = b.oom ? HR_ENOMEM : json_is_object(v) ? push_call(out, s + na, nb - na, b.p, b.n)
                                                    : HR_EFORMAT;
        json_decref(v);
    }
    hr__tbuf_free(&b);
    return rc;
}

/* ---- entry ------------------------------------------------------------------ */

long hr__tool_open_extent(const hr__tool_syntax *s, const char *body, size_t n) {
    if (s->kind != HR__TOOL_NAME_ARGS)
        return hr__tool_json_extent(body, n, 0);
    /* the separator must come within a name's length (searched in a fixed
     * window, so the answer does not depend on how much has arrived) */
    size_t win = 300 + strlen(s->sep), lim = n < win ? n : win;
    size_t hb = find(body, lim, 0, s->sep);
    if (hb == lim)
        return n >= win ? -1 : 0;
    size_t aa = hb + strlen(s->sep);
    long e = hr__tool_json_extent(body + aa, n - aa, 0);
    return e <= 0 ? e : (long)(aa + (size_t)e);
}

int hr__tool_parse_body(const hr__tool_syntax *s, const char *body, size_t n,
                        const json_t *tools, hr__tool_calls *out) {
    size_t before = out->n;
    int rc;
    switch (s->kind) {
    case HR__TOOL_JSON: rc = parse_json(s, body, n, out); break;
    case HR__TOOL_NAME_ARGS: rc = parse_named(s, body, n, out); break;
    default: rc = parse_xml(s, body, n, tools, out); break;
    }
    if (!rc && out->n == before)
        rc = HR_EFORMAT;
    if (rc) { /* drop partial results: all calls of a region or none */
        for (size_t i = before; i < out->n; i++) {
            free(out->v[i].name);
            free(out->v[i].args);
        }
        out->n = before;
    }
    return rc;
}
