/* Python's json.dumps(v, ensure_ascii=False) for jansson values. */
#include "grammar/jsonc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1)
            c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(sbuf *b, const char *s) { put(b, s, strlen(s)); }

static void str(sbuf *b, const char *s, size_t n) {
    puts_(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char e[8];
        switch (c) {
        case '"': puts_(b, "\\\""); break;
        case '\\': puts_(b, "\\\\"); break;
        case '\n': puts_(b, "\\n"); break;
        case '\r': puts_(b, "\\r"); break;
        case '\t': puts_(b, "\\t"); break;
        case 8: puts_(b, "\\b"); break;
        case 12: puts_(b, "\\f"); break;
        default:
            if (c < 0x20) {
                snprintf(e, sizeof e, "\\u%04x", c);
                puts_(b, e);
            } else {
                put(b, (const char *)&s[i], 1);
            }
        }
    }
    puts_(b, "\"");
}

static void dump(sbuf *b, const json_t *v) {
    char tmp[64];
    switch (json_typeof(v)) {
    case JSON_NULL: puts_(b, "null"); break;
    case JSON_TRUE: puts_(b, "true"); break;
    case JSON_FALSE: puts_(b, "false"); break;
    case JSON_INTEGER:
        snprintf(tmp, sizeof tmp, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        puts_(b, tmp);
        break;
    case JSON_REAL:
        hr__py_float(json_real_value(v), tmp, sizeof tmp);
        puts_(b, tmp);
        break;
    case JSON_STRING:
        str(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_ARRAY:
        puts_(b, "[");
        for (size_t i = 0; i < json_array_size(v); i++) {
            if (i)
                puts_(b, ", ");
            dump(b, json_array_get(v, i));
        }
        puts_(b, "]");
        break;
    case JSON_OBJECT: {
        const char *k;
        json_t *x;
        int first = 1;
        puts_(b, "{");
        json_object_foreach((json_t *)v, k, x) {
            if (!first)
                puts_(b, ", ");
            first = 0;
            str(b, k, strlen(k));
            puts_(b, ": ");
            dump(b, x);
        }
        puts_(b, "}");
        break;
    }
    }
}

char *hr_grammar_json_dumps(const json_t *v) {
    sbuf b = {0};
    dump(&b, v);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (!b.p)
        puts_(&b, "");
    return b.p;
}
