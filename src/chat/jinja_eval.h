/* Shared between the interpreter (jinja_eval.c), the filters and tests
 * (jinja_filters.c), the methods of str/dict/list (jinja_methods.c) and
 * tojson (jinja_json.c): the render state, call arguments, errors. */
#ifndef HR_CHAT_JINJA_EVAL_H
#define HR_CHAT_JINJA_EVAL_H

#include "chat/jinja.h"
#include "chat/jinja_ast.h"

#define HR_JARGS_MAX 12

/* Arguments of one call: positional, then keyword. Values are owned. */
typedef struct hr_jargs {
    int npos, nkw;
    hr_jv pos[HR_JARGS_MAX];
    const char *kw_name[HR_JARGS_MAX];
    hr_jv kw[HR_JARGS_MAX];
} hr_jargs;

void hr__jargs_free(hr_jargs *a);

typedef struct hr_jctx hr_jctx;

/* Fail the render with a message at node `at` ("template error at line L,
 * column C: ..."); returns code. */
int hr__jerr(hr_jctx *c, const hr_jnode *at, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Fail with HR_ENOMEM, or HR_ERANGE for a size/nesting cap, from a value
 * constructor's failure (rc or an OOM-marked value). */
int hr__jerr_alloc(hr_jctx *c, const hr_jnode *at, int rc);
size_t hr__jctx_max_output(const hr_jctx *c);

/* Bind a to the parameters names[0..n) like a Python call: slots[i] gets a
 * borrowed pointer or NULL when not given. Errors on excess positional
 * arguments, unknown or repeated keywords. */
int hr__jargs_bind(hr_jctx *c, const hr_jnode *at, const char *fn, hr_jargs *a,
                   const char *const *names, int n, hr_jv **slots);

/* environment.getattr / getitem with jinja2's sandbox rules. */
int hr__jinja_getattr(hr_jctx *c, const hr_jnode *at, hr_jv obj, const char *name,
                      hr_jv *out);
int hr__jinja_getitem(hr_jctx *c, const hr_jnode *at, hr_jv obj, hr_jv key, hr_jv *out);
/* Call any callable value with args (consumed). */
int hr__jinja_call(hr_jctx *c, const hr_jnode *at, hr_jv fn, hr_jargs *args, hr_jv *out);
/* Fail when v is Undefined (jinja2 raises on most uses of Undefined). */
int hr__jinja_check_defined(hr_jctx *c, const hr_jnode *at, hr_jv v);
/* Iterate like Python's iter(): a new list of the items (dict: keys,
 * str: characters, Undefined: nothing). */
int hr__jinja_iterate(hr_jctx *c, const hr_jnode *at, hr_jv v, hr_jv *out);

/* jinja_filters.c */
int hr__jinja_filter(hr_jctx *c, const hr_jnode *at, const char *name, hr_jv value,
                     hr_jargs *args, hr_jv *out);
int hr__jinja_test(hr_jctx *c, const hr_jnode *at, const char *name, hr_jv value,
                   hr_jargs *args, int *out);

/* jinja_methods.c: Python methods of str, dict and list that the immutable
 * sandbox allows. has_method: 1 allowed, -1 a known mutating method (calling
 * it is a security error), 0 no such method. */
int hr__jinja_has_method(hr_jv obj, const char *name);
int hr__jinja_method(hr_jctx *c, const hr_jnode *at, hr_jv obj, const char *name,
                     hr_jargs *args, hr_jv *out);
/* Python's str.format and printf-style `%` on a format string. */
int hr__jinja_format(hr_jctx *c, const hr_jnode *at, hr_jv fmt, hr_jargs *args, hr_jv *out);
int hr__jinja_percent(hr_jctx *c, const hr_jnode *at, hr_jv fmt, hr_jv args, hr_jv *out);

/* jinja_json.c: json.dumps(v, ensure_ascii, indent, separators, sort_keys)
 * as transformers' tojson calls it. indent: NULL = none. */
typedef struct hr_jjson_opts {
    int ensure_ascii;
    int sort_keys;
    const char *indent; /* NULL: compact separators unless given */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
} hr_jjson_opts;
int hr__jinja_tojson(hr_jctx *c, const hr_jnode *at, hr_jv v, const hr_jjson_opts *o,
                     hr_jv *out);

#endif
