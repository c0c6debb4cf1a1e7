/* The JSON Schema compiler's shared context (json_schema.c drives,
 * json_lit.c builds values: literals, numbers, strings, generic JSON).
 *
 * Whitespace policy (docs/grammar.md): no whitespace anywhere except one
 * optional space after each ',' and each ':' -- exactly what Python's
 * json.dumps emits by default (", " and ": ") and compact JSON (",", ":").
 * Strings are written canonically (json.dumps with ensure_ascii=False). */
#ifndef HR_GRAMMAR_JSONC_H
#define HR_GRAMMAR_JSONC_H

#include "grammar/internal.h"

#include <jansson.h>

typedef struct hr__js {
    hr__gir *ir;
    json_t *root;
    json_t *keep;   /* schemas made by merging (owned) */
    hr_error *err;
    int rc;
    int depth;
    char path[384]; /* JSON pointer of the schema being compiled */
    size_t plen;
    struct hr__js_memo { const json_t *s; int32_t rule; } *memo;
    size_t n_memo, cap_memo;
    int32_t r_value; /* generic JSON value rule, -1 until needed */
} hr__js;

/* Fail with code and a message that names the current location. */
int hr__js_fail(hr__js *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

uint32_t hr__js_itemsep(hr__js *c); /* "," " "? */
/* The IR of schema s (json_schema.c); errors go to c->rc / c->err. */
uint32_t hr__js_schema(hr__js *c, const json_t *s);
uint32_t hr__js_keysep(hr__js *c);  /* ":" " "? */
uint32_t hr__js_value(hr__js *c);   /* any JSON value (a rule) */
uint32_t hr__js_literal(hr__js *c, const json_t *v); /* exactly v */
/* A JSON string's body (between the quotes): canonical text of s. */
uint32_t hr__js_key(hr__js *c, const char *s, size_t n);
/* A string body that is not one of the n names (canonical encoding). */
uint32_t hr__js_key_not_in(hr__js *c, const char *const *names,
                           const size_t *lens, size_t n);
/* patternProperties pp of an object declaring names[0..n): the string body
 * of the keys it adds (regexes joined), and in *schema their values' schema
 * (json_pattern.c). 0 with c->rc set when not supported. */
uint32_t hr__js_pattern_keys(hr__js *c, const json_t *pp, const char *const *names,
                             size_t n, const json_t **schema);
/* Type bits of a "type" value: null 1, boolean 2, object 4, array 8,
 * string 0x10, number 0x20, integer 0x40; no type: all (json_schema.c). */
int hr__js_type_bits(const json_t *t);
/* s with $ref (and allOf) resolved, NULL with c->rc set on error. */
const json_t *hr__js_deref(hr__js *c, const json_t *s, int depth);
/* No value can match two of the n branches (json_oneof.c; sufficient test). */
int hr__js_one_of_disjoint(hr__js *c, const json_t *const *brs, size_t n);
/* Python's repr of a float (what json.dumps writes). */
void hr__py_float(double x, char *out, size_t cap);
uint32_t hr__js_string(hr__js *c, const json_t *s);  /* type string */
uint32_t hr__js_number(hr__js *c, const json_t *s, int integer);

#endif
