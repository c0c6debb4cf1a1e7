/* Jinja values: the Python object model a chat template sees.
 *
 * An hr_jv is a small tagged value passed by value; strings, lists, dicts
 * and callables live on the heap with a reference count. hr__jv_ref takes a
 * reference, hr__jv_unref drops one (both accept any value). Functions that
 * return an hr_jv return a new reference the caller owns; functions taking
 * an hr_jv borrow it unless they say "takes".
 *
 * Strings are valid UTF-8, NUL-terminated, immutable. Lists and dicts are
 * immutable once built (the sandbox forbids append/pop/update), except a
 * namespace() dict, whose attributes `{% set ns.x = ... %}` assigns. */
#ifndef HR_CHAT_JINJA_VALUE_H
#define HR_CHAT_JINJA_VALUE_H

#include "hearth.h"

#include <stddef.h>
#include <stdint.h>

typedef enum hr_jv_type {
    HR_JV_UNDEF, /* jinja2's default Undefined; u.s is an optional hint */
    HR_JV_NONE,
    HR_JV_BOOL,
    HR_JV_INT,
    HR_JV_FLOAT,
    HR_JV_STR,
    HR_JV_LIST, /* list, or tuple when HR_JV_TUPLE is set */
    HR_JV_DICT, /* dict, or namespace when HR_JV_NS is set */
    HR_JV_FUNC,
} hr_jv_type;

enum {
    HR_JV_SAFE = 1,  /* a Markup string (|safe, |escape) */
    HR_JV_TUPLE = 2, /* on lists */
    HR_JV_NS = 4,    /* on dicts: a namespace() object */
    HR_JV_GEN = 8,   /* on lists: a Python generator/iterator (map, select,
                        unique, ...): always truthy, no len(), no [i] */
};

typedef struct hr_jstr {
    int32_t rc;  /* -1: immortal (template constants, shared by threads) */
    int64_t ncp; /* code points, -1 until counted */
    size_t len;  /* bytes, without the NUL */
    char s[];
} hr_jstr;

typedef struct hr_jlist hr_jlist;
typedef struct hr_jdict hr_jdict;
typedef struct hr_jfunc hr_jfunc;

typedef struct hr_jv {
    uint8_t type;
    uint8_t flags;
    union {
        int b;
        int64_t i;
        double f;
        hr_jstr *s; /* STR, UNDEF (hint, may be NULL) */
        hr_jlist *l;
        hr_jdict *d;
        hr_jfunc *fn;
    } u;
} hr_jv;

/* depth: nesting of lists/dicts below and including this one (a namespace
 * counts as 1), capped at HR_JV_MAX_DEPTH so that freeing, printing and
 * comparing never recurse without bound. */
#define HR_JV_MAX_DEPTH 512

struct hr_jlist {
    int32_t rc;
    int32_t depth;
    size_t n, cap;
    hr_jv *v;
};

struct hr_jdict {
    int32_t rc;
    int32_t depth;
    size_t n, cap;
    hr_jv *k, *v;
};

/* A callable: a builtin (global function or bound method) or a macro.
 * The interpreter owns the meaning of `impl` and `scope`; `self` is the
 * bound object of a method and `name` its name. */
struct hr_jfunc {
    int32_t rc;
    int kind;         /* interpreter-defined */
    hr_jv self;       /* owned */
    const char *name; /* static or template-owned */
    const void *impl; /* macro node, or NULL */
    void *scope;      /* macro closure (raw: scopes outlive the render) */
    hr_jv extra;      /* owned: caller of a call block, etc. */
};

/* ---- constructors --------------------------------------------------- */

static inline hr_jv hr__jv_undef(void) { return (hr_jv){.type = HR_JV_UNDEF}; }
static inline hr_jv hr__jv_none(void) { return (hr_jv){.type = HR_JV_NONE}; }
static inline hr_jv hr__jv_bool(int b) {
    return (hr_jv){.type = HR_JV_BOOL, .u.b = b != 0};
}
static inline hr_jv hr__jv_int(int64_t i) {
    return (hr_jv){.type = HR_JV_INT, .u.i = i};
}
static inline hr_jv hr__jv_float(double f) {
    return (hr_jv){.type = HR_JV_FLOAT, .u.f = f};
}
/* The constructors below return a marked Undefined when allocation fails;
 * check with hr__jv_oom. */
#define HR_JV_OOM 0x80
hr_jv hr__jv_str(const char *s, size_t len); /* copies */
hr_jv hr__jv_cstr(const char *s);
hr_jv hr__jv_list(size_t cap);
hr_jv hr__jv_dict(size_t cap);
hr_jv hr__jv_func(int kind, const char *name);
hr_jv hr__jv_undef_hint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int hr__jv_oom(hr_jv v); /* 1 when v is the failed-allocation marker */

hr_jv hr__jv_ref(hr_jv v);
void hr__jv_unref(hr_jv v);

/* ---- lists and dicts (building) ------------------------------------- */

/* Both take their arguments (also on error) and return 0, HR_ENOMEM, or
 * HR_ERANGE when the result would nest deeper than HR_JV_MAX_DEPTH.
 * dict_set replaces the value of an existing key in place. */
int hr__jv_list_push(hr_jv list, hr_jv item);
int hr__jv_dict_set(hr_jv dict, hr_jv key, hr_jv value);
/* Remove every entry of a dict (breaks reference cycles through
 * namespaces at the end of a render). */
void hr__jv_dict_clear(hr_jv dict);
/* Borrowed pointer to the value for key, or NULL. */
hr_jv *hr__jv_dict_get(hr_jv dict, hr_jv key);
hr_jv *hr__jv_dict_getc(hr_jv dict, const char *key);

/* ---- Python semantics ----------------------------------------------- */

int hr__jv_truthy(hr_jv v);
int hr__jv_equal(hr_jv a, hr_jv b);
/* *out = -1/0/1. HR_EINVAL when Python would raise TypeError. */
int hr__jv_compare(hr_jv a, hr_jv b, int *out);
const char *hr__jv_type_name(hr_jv v); /* Python's type name: 'str', ... */
int hr__jv_is_number(hr_jv v);         /* int, float or bool */
double hr__jv_as_double(hr_jv v);

/* Number of code points of a string (cached). */
size_t hr__jv_strlen(hr_jv s);
/* Byte offset of code point index i (0..ncp) in s. */
size_t hr__jv_cp_offset(hr_jv s, size_t i);

/* ---- text ------------------------------------------------------------ */

/* A growable byte buffer with a hard size cap (the render's output limit). */
typedef struct hr_jbuf {
    char *p;
    size_t len, cap, max;
    int failed; /* 1: out of memory, 2: over max */
} hr_jbuf;

void hr__jbuf_init(hr_jbuf *b, size_t max);
void hr__jbuf_free(hr_jbuf *b);
void hr__jbuf_put(hr_jbuf *b, const char *s, size_t n);
void hr__jbuf_puts(hr_jbuf *b, const char *s);
void hr__jbuf_putc(hr_jbuf *b, char c);
void hr__jbuf_printf(hr_jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hr__jbuf_utf8(hr_jbuf *b, uint32_t cp);
/* Move the contents into a string value (the buffer is emptied). */
hr_jv hr__jbuf_take(hr_jbuf *b);

/* str(v) and repr(v) as Python prints them, appended to b. */
void hr__jv_str_append(hr_jbuf *b, hr_jv v);
void hr__jv_repr_append(hr_jbuf *b, hr_jv v);
/* str(v) as a new string value (strings are returned as a new ref). */
hr_jv hr__jv_to_str(hr_jv v, size_t max);
void hr__jv_float_repr(hr_jbuf *b, double f);

/* Decode one UTF-8 code point at s[*i] (valid input), advancing *i. */
uint32_t hr__utf8_next(const char *s, size_t *i);
/* 0 when s[0..n) is valid UTF-8, else the byte offset of the first bad byte
 * plus one. */
size_t hr__utf8_check(const char *s, size_t n);
int hr__py_isspace(uint32_t cp);

#endif
