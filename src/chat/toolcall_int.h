/* Tool calls, internals shared by toolcall*.c: the format table's row
 * layout, the region body parsers and a small growable byte buffer. */
#ifndef HR_CHAT_TOOLCALL_INT_H
#define HR_CHAT_TOOLCALL_INT_H

#include "chat/toolcall.h"

#include <stddef.h>

/* How the text between a region's open and close markers holds calls. */
typedef enum hr__tool_kind {
    /* JSON: a call object, a list of them, or several separated by
     * whitespace / commas. A call object is {name_key: "f", args_key: {...}},
     * or with HR__TS_NAME_AS_KEY {"f": {...}}. */
    HR__TOOL_JSON,
    /* One or more [call_open] header sep args [call_close]: the header holds
     * the name (see name_after / name_cut / HR__TS_KIMI_NAME), args is JSON
     * (or Gemma 4 notation with HR__TS_GEMMA). sep "": args start at the
     * first '{' of the header. call_close "": args end with their value. */
    HR__TOOL_NAME_ARGS,
    /* XML-style: [func_open] name name_end { param_open key key_end
     * [value_open] value param_close } func_close, values untyped text. */
    HR__TOOL_XML,
} hr__tool_kind;

enum {
    HR__TS_NAME_AS_KEY = 1 << 0, /* JSON: {"name": {args}} */
    HR__TS_KIMI_NAME = 1 << 1,   /* header "functions.NAME:N" */
    HR__TS_GEMMA = 1 << 2,       /* args in Gemma 4 notation */
    HR__TS_ARRAY = 1 << 3,       /* JSON: the payload is a list (schema shape) */
    HR__TS_KEY_ATTRS = 1 << 4,   /* XML: after key_end skip attributes to '>' */
    HR__TS_TRIM1 = 1 << 5,       /* XML: drop one leading and trailing newline of a value */
};

typedef struct hr__tool_syntax {
    const char *open;  /* region opener; NULL: a bare JSON object that starts the reply */
    const char *close; /* region closer; "": the region ends with its (last) JSON value */
    hr__tool_kind kind;
    unsigned flags;
    /* JSON */
    const char *name_key;     /* "name" */
    const char *args_keys[2]; /* "arguments", "parameters" (first present wins) */
    /* NAME_ARGS and XML */
    const char *call_open;  /* NAME_ARGS: before each call ("" none) */
    const char *sep;        /* NAME_ARGS: header / args separator */
    const char *call_close; /* NAME_ARGS: after each call's args ("" none) */
    const char *name_after; /* header: the name follows this marker (NULL: whole header) */
    const char *name_cut;   /* header: the name stops at this marker (NULL: none) */
    const char *func_open, *name_end, *param_open, *key_end, *value_open,
        *param_close, *func_close; /* XML */
    /* grammar shape: literal text around one call's JSON */
    const char *schema_prefix, *schema_mid, *schema_suffix;
} hr__tool_syntax;

#define HR__TOOL_MAX_SYNTAX 2
#define HR__TOOL_MAX_DETECT 3

struct hr_tool_format {
    const char *name;
    const char *detect[HR__TOOL_MAX_DETECT]; /* all must occur in the template */
    const char *reject;                      /* must not occur (NULL: none) */
    hr__tool_syntax syn[HR__TOOL_MAX_SYNTAX]; /* open NULL: bare JSON at the start */
    int n_syn;
};

/* ---- byte buffer ----------------------------------------------------------- */

typedef struct hr__tbuf {
    char *p;
    size_t n, cap;
    int oom;
} hr__tbuf;

void hr__tbuf_put(hr__tbuf *b, const char *s, size_t n);
void hr__tbuf_puts(hr__tbuf *b, const char *s);
void hr__tbuf_putc(hr__tbuf *b, char c);
void hr__tbuf_json_str(hr__tbuf *b, const char *s, size_t n); /* "..." escaped */
void hr__tbuf_free(hr__tbuf *b);

/* ---- body parsers ---------------------------------------------------------- */

/* One parsed call: name and arguments (JSON object text), both malloc'd. */
typedef struct hr__tool_call {
    char *name;
    char *args;
} hr__tool_call;

typedef struct hr__tool_calls {
    hr__tool_call *v;
    size_t n, cap;
} hr__tool_calls;

void hr__tool_calls_clear(hr__tool_calls *c);

/* Parse a region body (the text between the markers) into calls appended to
 * out. 0: ok (at least one call); HR_EFORMAT: malformed (out unchanged);
 * HR_ENOMEM. tools: the request's tools or NULL (XML value types). */
int hr__tool_parse_body(const hr__tool_syntax *s, const char *body, size_t n,
                        const json_t *tools, hr__tool_calls *out);

/* The end of one JSON value starting at s[0] (after whitespace): returns
 * the byte count consumed through the value's last byte, 0 when the value
 * is not finished within n bytes, or -1 when s cannot start an object or
 * list. Strings are skipped with escapes; gemma: <|"|>...<|"|> strings. */
long hr__tool_json_extent(const char *s, size_t n, int gemma);

/* For a region without a close marker: the length of its body (through the
 * end of its JSON value), 0 when not complete yet, -1 when it can no longer
 * be a call. */
long hr__tool_open_extent(const hr__tool_syntax *s, const char *body, size_t n);

#endif
